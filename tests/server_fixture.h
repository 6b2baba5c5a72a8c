// Helpers for the server tests: a tiny model with a SessionManager and an Api (no sockets),
// the same served over real sockets, and a minimal blocking HTTP/1.1 client.
#pragma once
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "session/session_manager.h"
#include "server/api.h"
#include "server/http_server.h"

namespace cedar::test {

// A fresh SessionManager on the tiny model (seed 1; loaded once per process) and an Api on it.
struct ApiFixture {
  explicit ApiFixture(session::ManagerOptions manager_options = {}, server::ApiOptions api_options = {});
  ~ApiFixture();

  // Handle() and, for a stream, run the turn to its end and read the whole body.
  server::HttpResponse Call(const std::string& method, const std::string& target, const std::string& body = "",
                            std::map<std::string, std::string> headers = {});
  server::HttpResponse Post(const std::string& target, const nlohmann::json& body,
                            std::map<std::string, std::string> headers = {});
  // POST that must answer 200 with JSON.
  nlohmann::json Ok(const std::string& target, const nlohmann::json& body);

  std::shared_ptr<const Model> model;
  std::unique_ptr<session::SessionManager> manager;
  std::unique_ptr<server::Api> api;
};

// The shared tiny model.
std::shared_ptr<const Model> SharedTinyModel();

// The JSON events of an SSE body ("data: {...}\n\n" ... "data: [DONE]\n\n"). CHECKs the framing.
std::vector<nlohmann::json> SseEvents(const std::string& body);
// The text of a streamed chat (delta.content) or completion (text) joined.
std::string StreamedText(const std::vector<nlohmann::json>& events);

// A blocking HTTP/1.1 client on one connection (Unix socket path or TCP port on 127.0.0.1).
class TestClient {
 public:
  struct Response {
    int status = 0;
    std::map<std::string, std::string> headers;  // lower-case names
    std::string body;                           // de-chunked
  };
  static TestClient Unix(const std::string& path, double timeout_s = 30);
  static TestClient Tcp(int port, double timeout_s = 30);
  TestClient(TestClient&& other) noexcept;
  ~TestClient();

  void Send(const std::string& raw);  // raw bytes
  // A request with Content-Length (and Connection: keep-alive unless given).
  void SendRequest(const std::string& method, const std::string& target, const std::string& body = "",
                   std::map<std::string, std::string> headers = {});
  // One whole response; throws on EOF/timeout before it ends. `head`: the answer to a HEAD
  // request (no body follows its headers).
  Response Read(bool head = false);
  Response Request(const std::string& method, const std::string& target, const std::string& body = "",
                   std::map<std::string, std::string> headers = {}) {
    SendRequest(method, target, body, std::move(headers));
    return Read();
  }
  // Reads until `needle` appears in the raw bytes received (headers included); returns them.
  std::string ReadUntil(const std::string& needle);
  // True when the server closed the connection (recv returns 0) within the timeout.
  bool ClosedByPeer();
  void Close();

 private:
  explicit TestClient(int fd) : fd_(fd) {}
  bool Fill();  // reads more into buf_; false on EOF
  int fd_ = -1;
  std::string buf_;
};

// An ApiFixture served by an HttpServer on a Unix socket in a temporary directory and on TCP
// at 127.0.0.1 (an ephemeral port).
struct ServerFixture : ApiFixture {
  explicit ServerFixture(server::ServerOptions o = {});
  ~ServerFixture();
  TestClient Unix();
  TestClient Tcp();
  // Polls the manager until `pred` holds (or ~20 s pass).
  template <class Pred>
  bool Eventually(Pred pred) {
    for (int i = 0; i < 2000; ++i) {
      if (pred(manager->Metrics())) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::string dir;
  server::ServerOptions options;
  std::unique_ptr<server::HttpServer> http;
};

}  // namespace cedar::test
