// A blocking HTTP/1.1 client for `cedar serve`: one request per connection (Connection: close),
// over its Unix socket or TCP. One connection per request costs ~0.1 ms on a Unix socket and
// spares the replay from keep-alive connections the server closes while a slow trace idles.
//
// Thread contract: an HttpClient is immutable after construction; Request may be called from
// many threads at once.
#pragma once
#include <string>

namespace cedar::profile_live {

struct HttpAnswer {
  int status = 0;    // 0: no answer (see error)
  std::string body;
  std::string error; // what failed when status == 0 (connect, write, read, timeout)
};

class HttpClient {
 public:
  // `address`: "unix:/path/to.sock", a bare path (a Unix socket), or "http://host:port".
  // Throws std::invalid_argument for anything else.
  HttpClient(const std::string& address, std::string api_key, double timeout_s);

  // Never throws: failures come back in HttpAnswer::error.
  HttpAnswer Request(const std::string& method, const std::string& target, const std::string& body = "") const;

  // "unix:/path" or "http://host:port".
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  std::string unix_path_;     // set for a Unix socket
  std::string host_, port_;   // set for TCP
  std::string api_key_;
  double timeout_s_;
};

}  // namespace cedar::profile_live
