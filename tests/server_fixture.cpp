#include "tests/server_fixture.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

#include <doctest/doctest.h>

#include "engine/init.h"
#include "tests/test_models.h"

namespace cedar::test {

using nlohmann::json;

std::shared_ptr<const Model> SharedTinyModel() {
  static std::shared_ptr<const Model> m = [] {
    ModelConfig c;
    PresetConfig("tiny", &c);
    return std::shared_ptr<const Model>(MakeModel(c, 1));
  }();
  return m;
}

ApiFixture::ApiFixture(session::ManagerOptions manager_options, server::ApiOptions api_options)
    : model(SharedTinyModel()) {
  manager = session::SessionManager::Start(model, manager_options);
  if (api_options.model_name == "cedar") api_options.model_name = "tiny";
  api = std::make_unique<server::Api>(*manager, api_options);
}

ApiFixture::~ApiFixture() {
  api.reset();
  manager->Shutdown(true);
}

ServerFixture::ServerFixture(server::ServerOptions o) {
  dir = TempDir("server");
  if (o.unix_socket.empty()) o.unix_socket = dir + "/cedar.sock";
  if (o.tcp_host.empty()) o.tcp_host = "127.0.0.1";
  options = o;
  http = std::make_unique<server::HttpServer>(*api, *manager, o);
  http->Start();
}

ServerFixture::~ServerFixture() { http->Stop(); }

TestClient ServerFixture::Unix() { return TestClient::Unix(http->unix_path()); }
TestClient ServerFixture::Tcp() { return TestClient::Tcp(http->tcp_port()); }

server::HttpResponse ApiFixture::Call(const std::string& method, const std::string& target, const std::string& body,
                                      std::map<std::string, std::string> headers) {
  server::HttpRequest r;
  r.method = method;
  r.target = target;
  r.body = body;
  for (auto& [k, v] : headers) {
    std::string lower = k;
    for (char& c : lower) c = char(std::tolower(uint8_t(c)));
    r.headers[lower] = v;
  }
  server::HttpResponse res = api->Handle(r);
  if (res.stream) {
    if (res.complete) res.complete();
    std::string all;
    while (res.stream->Pull(&all)) {
    }
    res.body = std::move(all);
  }
  return res;
}

server::HttpResponse ApiFixture::Post(const std::string& target, const json& body,
                                      std::map<std::string, std::string> headers) {
  return Call("POST", target, body.dump(), std::move(headers));
}

json ApiFixture::Ok(const std::string& target, const json& body) {
  server::HttpResponse r = Post(target, body);
  INFO(r.body);
  REQUIRE(r.status == 200);
  return json::parse(r.body);
}

std::vector<json> SseEvents(const std::string& body) {
  std::vector<json> events;
  size_t pos = 0;
  bool done = false;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    REQUIRE_MESSAGE(end != std::string::npos, "an SSE event without its blank line: " << body.substr(pos));
    const std::string event = body.substr(pos, end - pos);
    pos = end + 2;
    REQUIRE_MESSAGE(event.rfind("data: ", 0) == 0, "an SSE line without 'data: ': " << event);
    CHECK_MESSAGE(event.find('\n') == std::string::npos, "one data line per event");
    CHECK_FALSE(done);  // nothing after [DONE]
    if (event == "data: [DONE]") {
      done = true;
      continue;
    }
    events.push_back(json::parse(event.substr(6)));
  }
  CHECK_MESSAGE(done, "the stream ends with data: [DONE]");
  return events;
}

std::string StreamedText(const std::vector<json>& events) {
  std::string text;
  for (const json& e : events) {
    if (!e.contains("choices") || e["choices"].empty()) continue;
    const json& c = e["choices"][0];
    if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string()) {
      text += c["delta"]["content"].get<std::string>();
    }
    if (c.contains("text")) text += c["text"].get<std::string>();
  }
  return text;
}

namespace {
void SetTimeout(int fd, double seconds) {
  timeval tv{};
  tv.tv_sec = time_t(seconds);
  tv.tv_usec = suseconds_t((seconds - double(tv.tv_sec)) * 1e6);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}
}  // namespace

TestClient TestClient::Unix(const std::string& path, double timeout_s) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, path.c_str(), sizeof(a.sun_path) - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw std::runtime_error("connect " + path + ": " + std::strerror(errno));
  }
  SetTimeout(fd, timeout_s);
  return TestClient(fd);
}

TestClient TestClient::Tcp(int port, double timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    ::close(fd);
    throw std::runtime_error("connect 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(errno));
  }
  SetTimeout(fd, timeout_s);
  return TestClient(fd);
}

TestClient::TestClient(TestClient&& o) noexcept : fd_(o.fd_), buf_(std::move(o.buf_)) { o.fd_ = -1; }
TestClient::~TestClient() { Close(); }

void TestClient::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TestClient::Send(const std::string& raw) {
  size_t off = 0;
  while (off < raw.size()) {
    const ssize_t n = ::send(fd_, raw.data() + off, raw.size() - off, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error(std::string("send: ") + std::strerror(errno));
    off += size_t(n);
  }
}

void TestClient::SendRequest(const std::string& method, const std::string& target, const std::string& body,
                             std::map<std::string, std::string> headers) {
  std::string raw = method + " " + target + " HTTP/1.1\r\nHost: test\r\n";
  if (!headers.count("Connection")) headers["Connection"] = "keep-alive";
  if (!body.empty() || method == "POST") headers["Content-Length"] = std::to_string(body.size());
  if (!body.empty() && !headers.count("Content-Type")) headers["Content-Type"] = "application/json";
  for (auto& [k, v] : headers) raw += k + ": " + v + "\r\n";
  Send(raw + "\r\n" + body);
}

bool TestClient::Fill() {
  char tmp[65536];
  const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
  if (n < 0 && errno == ECONNRESET) return false;  // closed with our request unread
  if (n < 0) throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
  if (n == 0) return false;
  buf_.append(tmp, size_t(n));
  return true;
}

std::string TestClient::ReadUntil(const std::string& needle) {
  while (buf_.find(needle) == std::string::npos) {
    if (!Fill()) throw std::runtime_error("connection closed before '" + needle + "'");
  }
  return buf_;
}

bool TestClient::ClosedByPeer() {
  try {
    while (Fill()) {
    }
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

TestClient::Response TestClient::Read(bool head_request) {
  size_t head_end;
  while ((head_end = buf_.find("\r\n\r\n")) == std::string::npos) {
    if (!Fill()) throw std::runtime_error("connection closed before a response");
  }
  Response r;
  const std::string head = buf_.substr(0, head_end);
  buf_.erase(0, head_end + 4);
  size_t line_end = head.find("\r\n");
  const std::string status_line = head.substr(0, line_end);
  r.status = std::stoi(status_line.substr(9, 3));
  while (line_end != std::string::npos) {
    const size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = char(std::tolower(uint8_t(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    r.headers[name] = value;
  }
  if (head_request || r.status == 100) return r;
  if (r.headers.count("content-length")) {
    const size_t len = std::stoul(r.headers["content-length"]);
    while (buf_.size() < len)
      if (!Fill()) throw std::runtime_error("connection closed in a body");
    r.body = buf_.substr(0, len);
    buf_.erase(0, len);
    return r;
  }
  if (r.headers["transfer-encoding"] == "chunked") {
    for (;;) {
      size_t eol;
      while ((eol = buf_.find("\r\n")) == std::string::npos)
        if (!Fill()) throw std::runtime_error("connection closed in a chunk size");
      const size_t size = std::stoul(buf_.substr(0, eol), nullptr, 16);
      while (buf_.size() < eol + 2 + size + 2)
        if (!Fill()) throw std::runtime_error("connection closed in a chunk");
      r.body += buf_.substr(eol + 2, size);
      buf_.erase(0, eol + 2 + size + 2);
      if (size == 0) break;
    }
    return r;
  }
  return r;
}

}  // namespace cedar::test
