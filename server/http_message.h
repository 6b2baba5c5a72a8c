// The server's request and response, free of sockets: the API (api.h) is a function from an
// HttpRequest to an HttpResponse, and the transport (http_server.h) only moves bytes. A
// streamed response (SSE) carries a BodySource the transport pulls from as data arrives.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace cedar::server {

struct HttpRequest {
  std::string method;                         // "GET", "POST", ...
  std::string target;                         // path and query, e.g. "/v1/sessions/s1"
  std::map<std::string, std::string> headers; // names in lower case
  std::string body;
  // Set by the transport when the client goes away (or the server cancels the request); the
  // turn it started is then cancelled at its next token. Never null when built by the server.
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  // Who sent it (server/tenant.h), set by the transport once the request authenticated: the
  // hash of its API key over TCP, 0 (the owner) on the Unix socket.
  uint64_t tenant = 0;

  const std::string* Header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? nullptr : &it->second;
  }
};

// A response body produced over time (Server-Sent Events). Thread contract: SetWaker and
// Cancel may be called from any thread; Pull is called by one consumer at a time.
class BodySource {
 public:
  virtual ~BodySource() = default;
  // `wake` is called (from any thread, possibly at once) whenever Pull may return new bytes.
  virtual void SetWaker(std::function<void()> wake) = 0;
  // Appends the bytes available now to *out. Returns false once the body is complete (the
  // last bytes are appended by that call); later calls append nothing and return false.
  virtual bool Pull(std::string* out) = 0;
  // The consumer is gone: stop producing (the turn is cancelled at its next token).
  virtual void Cancel() = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;                                         // unused when `stream` is set
  std::vector<std::pair<std::string, std::string>> headers; // extra headers
  std::shared_ptr<BodySource> stream;                       // set: the body is streamed
  // Set with `stream`: blocks until the body's producer is done (waits for the turn). The
  // transport runs it on a worker thread after taking the response; tests run it inline.
  std::function<void()> complete;
};

}  // namespace cedar::server
