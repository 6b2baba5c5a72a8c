#include "server/profile_live/http_client.h"

#include <sys/socket.h>
#include <sys/time.h>

#include <cmath>
#include <stdexcept>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

namespace cedar::profile_live {

namespace asio = boost::asio;
namespace http = boost::beast::http;

HttpClient::HttpClient(const std::string& address, std::string api_key, double timeout_s)
    : api_key_(std::move(api_key)), timeout_s_(timeout_s) {
  if (address.starts_with("http://")) {
    std::string hostport = address.substr(7);
    if (const size_t slash = hostport.find('/'); slash != std::string::npos) hostport.resize(slash);
    const size_t colon = hostport.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == hostport.size()) {
      throw std::invalid_argument("--url: expected http://HOST:PORT, found '" + address + "'");
    }
    host_ = hostport.substr(0, colon);
    port_ = hostport.substr(colon + 1);
    address_ = "http://" + hostport;
  } else if (address.starts_with("https://")) {
    throw std::invalid_argument("--url: https is not supported (cedar serve speaks plain HTTP on loopback)");
  } else {
    unix_path_ = address.starts_with("unix:") ? address.substr(5) : address;
    if (unix_path_.empty()) throw std::invalid_argument("empty Unix socket path");
    address_ = "unix:" + unix_path_;
  }
}

namespace {

// Blocking reads and writes give up after the timeout (SO_RCVTIMEO / SO_SNDTIMEO): a turn that
// runs longer than that is reported as an error instead of hanging the replay.
void SetTimeouts(int fd, double seconds) {
  timeval tv{};
  tv.tv_sec = time_t(seconds);
  tv.tv_usec = suseconds_t((seconds - std::floor(seconds)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

template <class Socket>
HttpAnswer Exchange(Socket& socket, http::request<http::string_body>& req) {
  HttpAnswer a;
  boost::system::error_code ec;
  http::write(socket, req, ec);
  if (ec) {
    a.error = "write: " + ec.message();
    return a;
  }
  boost::beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 30);
  http::read(socket, buffer, parser, ec);
  if (ec) {
    a.error = (ec == boost::asio::error::would_block || ec == boost::asio::error::try_again ? "read timed out: "
                                                                                             : "read: ") +
              ec.message();
    return a;
  }
  a.status = int(parser.get().result_int());
  a.body = std::move(parser.get().body());
  return a;
}

}  // namespace

HttpAnswer HttpClient::Request(const std::string& method, const std::string& target, const std::string& body) const {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, unix_path_.empty() ? host_ : "cedar");
  req.set(http::field::connection, "close");
  if (!api_key_.empty() && unix_path_.empty()) req.set(http::field::authorization, "Bearer " + api_key_);
  if (!body.empty()) {
    req.set(http::field::content_type, "application/json");
    req.body() = body;
  }
  req.prepare_payload();
  asio::io_context io;
  boost::system::error_code ec;
  if (!unix_path_.empty()) {
    asio::local::stream_protocol::socket socket(io);
    socket.connect(asio::local::stream_protocol::endpoint(unix_path_), ec);
    if (ec) return HttpAnswer{0, "", "connect: " + ec.message()};
    SetTimeouts(socket.native_handle(), timeout_s_);
    return Exchange(socket, req);
  }
  asio::ip::tcp::resolver resolver(io);
  auto endpoints = resolver.resolve(host_, port_, ec);
  if (ec) return HttpAnswer{0, "", "resolve: " + ec.message()};
  asio::ip::tcp::socket socket(io);
  asio::connect(socket, endpoints, ec);
  if (ec) return HttpAnswer{0, "", "connect: " + ec.message()};
  SetTimeouts(socket.native_handle(), timeout_s_);
  return Exchange(socket, req);
}

}  // namespace cedar::profile_live
