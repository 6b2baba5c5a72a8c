#include "server/http_server.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
#include <utility>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>
#include <unordered_map>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

#include "server/api_error.h"
#include "server/tenant.h"
#include "server/worker_pool.h"

namespace cedar::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using unix_socket = net::local::stream_protocol;

namespace {

std::chrono::milliseconds Ms(double seconds) { return std::chrono::milliseconds(int64_t(seconds * 1000)); }

// Errors that mean the connection is gone or idle, not that the client sent bad HTTP.
bool ConnectionEnded(beast::error_code ec) {
  return ec == http::error::end_of_stream || ec == http::error::partial_message || ec == beast::error::timeout ||
         ec.category() != http::make_error_code(http::error::bad_method).category();
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(uint8_t(c)));
  return out;
}

}  // namespace

// A connection the server can close from another thread.
class ConnectionBase {
 public:
  virtual ~ConnectionBase() = default;
  virtual void Close() = 0;  // thread-safe: posts to the connection's strand
};

struct HttpServer::Impl {
  Impl(Api& api, session::SessionManager& manager, ServerOptions opt)
      : api(api),
        manager(manager),
        opt(std::move(opt)),
        keys(this->opt.api_keys),
        // One worker per open connection at most (one request in flight each): never a queue.
        pool(this->opt.max_connections + this->opt.max_unix_connections) {}

  void Listen();
  template <class Protocol>
  void Accept(net::basic_socket_acceptor<Protocol>& acceptor, bool is_tcp);
  void RequestStarted();
  void RequestEnded();
  bool WaitIdle(std::chrono::milliseconds timeout);  // no request in flight
  void Register(const std::shared_ptr<ConnectionBase>& c);
  void Unregister(ConnectionBase* c, bool is_tcp);

  Api& api;
  session::SessionManager& manager;
  ServerOptions opt;
  const ApiKeys keys;
  WorkerPool pool;
  std::atomic<bool> stopping{false};

  std::mutex mu;  // guards the fields up to `stop_requested`
  std::condition_variable cv;
  int64_t in_flight = 0;
  std::unordered_map<ConnectionBase*, std::weak_ptr<ConnectionBase>> connections;
  size_t open_tcp = 0, open_unix = 0;  // connections per listener (their own budgets)
  bool started = false, stopped = false, stop_requested = false;

  std::string unix_path;
  ino_t unix_inode = 0;
  uint16_t port = 0;

  // Destroyed first (declared last but the threads): pending handlers hold connections, whose
  // destructors use the fields above.
  net::io_context io;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  std::unique_ptr<unix_socket::acceptor> unix_acceptor;
  std::unique_ptr<tcp::acceptor> tcp_acceptor;
  std::vector<std::thread> io_threads;
};

namespace {

template <class Protocol>
class Connection final : public ConnectionBase, public std::enable_shared_from_this<Connection<Protocol>> {
 public:
  using Stream = beast::basic_stream<Protocol>;

  Connection(HttpServer::Impl& server, typename Protocol::socket socket, bool is_tcp)
      : server_(server),
        stream_(std::move(socket)),
        is_tcp_(is_tcp),
        authenticated_(!is_tcp),
        tenant_(is_tcp ? AnonymousTcpTenant() : kOwnerTenant) {
    server_.api.metrics().Connection(+1);
  }
  ~Connection() override {
    if (in_request_) server_.RequestEnded();  // (every path ends a request first; a safety net)
    server_.api.metrics().Connection(-1);
    server_.Unregister(this, is_tcp_);
  }

  void Start() {
    net::dispatch(stream_.get_executor(), [self = this->shared_from_this()] { self->Read(); });
  }
  void Close() override {
    net::post(stream_.get_executor(), [self = this->shared_from_this()] { self->Shutdown(); });
  }

 private:
  void Read() {
    if (closed_) return;
    parser_.emplace();
    parser_->body_limit(server_.opt.max_body_bytes);
    parser_->header_limit(uint32_t(server_.opt.max_header_bytes));
    // A TCP connection that has not authenticated gets a short deadline for its headers.
    stream_.expires_after(Ms(authenticated_ ? server_.opt.read_timeout_s
                                            : std::min(server_.opt.auth_timeout_s, server_.opt.read_timeout_s)));
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
  }

  // Headers in: authenticate (TCP) and check the declared size from the headers alone, then
  // answer "Expect: 100-continue" (curl sends it for large bodies and would wait a second
  // otherwise), then read the body. A refused request's body is never read.
  void OnHeader(beast::error_code ec) {
    if (closed_) return;
    if (ec) return OnRead(ec);
    const auto& head = parser_->get();
    const std::string target(head.target());
    const std::string route = Api::RouteOf(target.substr(0, target.find('?')));
    if (is_tcp_ && !server_.keys.empty() && route != "/health") {
      const auto auth = head.find(http::field::authorization);
      const auto xkey = head.find("x-api-key");
      const std::string auth_value = auth == head.end() ? "" : std::string(auth->value());
      const std::string xkey_value = xkey == head.end() ? "" : std::string(xkey->value());
      const std::optional<TenantId> tenant = server_.keys.Authenticate(auth == head.end() ? nullptr : &auth_value,
                                                                       xkey == head.end() ? nullptr : &xkey_value);
      if (!tenant) {
        spdlog::debug("401 on {} {}: missing or wrong API key", std::string(head.method_string()), route);
        HttpResponse res = StartRequest(route, ApiError(401, "authentication_error", "invalid_api_key",
                                                        "missing or wrong API key (send 'Authorization: Bearer KEY' "
                                                        "or 'x-api-key: KEY')"));
        res.headers.push_back({"WWW-Authenticate", "Bearer"});
        return RefuseUnread(std::move(res));
      }
      tenant_ = *tenant;
      authenticated_ = true;
    } else if (is_tcp_ && server_.keys.empty()) {
      authenticated_ = true;  // no keys: any TCP client is the anonymous tenant
    }
    if (auto length = parser_->content_length(); length && *length > server_.opt.max_body_bytes) {
      return RefuseUnread(StartRequest(
          route, ApiError(413, "invalid_request_error", "request_too_large",
                          "the request body exceeds " + std::to_string(server_.opt.max_body_bytes) + " bytes")));
    }
    stream_.expires_after(Ms(server_.opt.read_timeout_s));  // the body's time
    auto self = this->shared_from_this();
    auto read_body = [self] {
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](beast::error_code ec2, size_t) { self->OnRead(ec2); });
    };
    if (parser_->is_done()) return OnRead({});  // no body
    if (!beast::iequals(head[http::field::expect], "100-continue")) return read_body();
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(stream_, net::buffer(kContinue), [self, read_body](beast::error_code ec2, size_t) {
      if (ec2) return self->Shutdown();
      read_body();
    });
  }

  // Answers a request whose body is not read, then closes: first the sending side, then
  // (after draining what the client still sends, a bounded amount for a bounded time, so it
  // reads the answer instead of a reset) the rest.
  void RefuseUnread(HttpResponse res) {
    keep_alive_ = false;
    linger_ = true;
    Respond(std::move(res));
  }

  void Linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(net::socket_base::shutdown_send, ignored);
    drain_ = std::make_unique<std::array<char, 4096>>();
    stream_.expires_after(std::chrono::seconds(2));
    DrainSome();
  }

  void DrainSome() {
    stream_.async_read_some(net::buffer(*drain_), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ > (1u << 20)) return self->Shutdown();
      self->DrainSome();
    });
  }

  // What was wrong with the request's framing, in our words (the parser's own messages are
  // library text; the log keeps them at debug).
  static std::string FramingProblem(const beast::error_code& ec) {
    spdlog::debug("HTTP parse error: {}", ec.message());
    if (ec == http::error::bad_method) return "bad method";
    if (ec == http::error::bad_target) return "bad request target";
    if (ec == http::error::bad_version) return "bad HTTP version";
    if (ec == http::error::bad_field || ec == http::error::bad_value) return "bad header field";
    if (ec == http::error::bad_content_length) return "bad Content-Length";
    if (ec == http::error::bad_transfer_encoding || ec == http::error::bad_chunk ||
        ec == http::error::bad_chunk_extension)
      return "bad chunked encoding";
    if (ec == http::error::partial_message || ec == http::error::short_read) return "the request ended early";
    return "the request could not be parsed as HTTP/1.1";
  }

  void OnRead(beast::error_code ec) {
    if (closed_) return;
    if (ec == http::error::body_limit) {
      return Refuse(ApiError(413, "invalid_request_error", "request_too_large",
                             "the request body exceeds " + std::to_string(server_.opt.max_body_bytes) + " bytes"));
    }
    if (ec == http::error::header_limit) {
      return Refuse(ApiError(431, "invalid_request_error", "headers_too_large", "the request headers are too large"));
    }
    if (ec && ConnectionEnded(ec)) return Shutdown();  // the client closed, went idle or reset
    if (ec) return Refuse(InvalidRequest("malformed HTTP request: " + FramingProblem(ec)));
    http::request<http::string_body> req = parser_->release();
    HttpRequest r;
    r.method = std::string(req.method_string());
    r.target = std::string(req.target());
    for (const auto& field : req) r.headers[Lower(std::string_view(field.name_string().data(), field.name_string().size()))] = std::string(field.value());
    r.body = std::move(req.body());
    r.tenant = tenant_;
    keep_alive_ = req.keep_alive() && !server_.stopping.load();
    head_request_ = req.method() == http::verb::head;
    Dispatch(std::move(r));
  }

  // Answers from the I/O thread (no handler): counts the request and starts it.
  HttpResponse StartRequest(const std::string& route, const ApiError& e) {
    server_.api.metrics().Request(route, e.status, 0);
    BeginRequest();
    if (route.starts_with("/v1/messages")) return AnthropicErrorResponse(e);  // Anthropic's clients read its shape
    return ErrorResponse(e);
  }

  // A request that cannot be read to its end: answer and close.
  void Refuse(const ApiError& e) { RefuseUnread(StartRequest("other", e)); }

  void BeginRequest() {
    in_request_ = true;
    server_.RequestStarted();
  }

  void Dispatch(HttpRequest request) {
    BeginRequest();
    cancelled_ = request.cancelled;
    stream_.expires_never();
    Watch();
    auto self = this->shared_from_this();
    server_.pool.Post([self, request = std::move(request)] {
      HttpResponse response = self->server_.api.Handle(request);
      std::function<void()> complete = std::move(response.complete);
      net::post(self->stream_.get_executor(),
                [self, response = std::move(response)]() mutable { self->Respond(std::move(response)); });
      if (complete) complete();
    });
  }

  void Respond(HttpResponse response) {
    if (closed_ || peer_gone_) {
      if (response.stream) response.stream->Cancel();
      EndRequest();
      return;
    }
    if (response.stream) return StartStream(std::move(response));
    auto res = std::make_shared<http::response<http::string_body>>(http::status(response.status), 11);
    res->set(http::field::server, "cedar");
    if (!server_.opt.server_id.empty()) res->set("X-Cedar-Server", server_.opt.server_id);
    res->set(http::field::content_type, response.content_type);
    for (const auto& [k, v] : response.headers) res->set(k, v);
    res->keep_alive(keep_alive_);
    res->body() = std::move(response.body);
    res->prepare_payload();
    if (head_request_) res->body().clear();  // Content-Length stays: what GET would send
    stream_.expires_after(Ms(server_.opt.write_timeout_s));
    http::async_write(stream_, *res, [self = this->shared_from_this(), res](beast::error_code ec, size_t) {
      if (ec) return self->Abort();
      self->EndRequest();
    });
  }

  void StartStream(HttpResponse response) {
    body_ = std::move(response.stream);
    head_ = std::make_unique<http::response<http::empty_body>>(http::status(response.status), 11);
    head_->set(http::field::server, "cedar");
    if (!server_.opt.server_id.empty()) head_->set("X-Cedar-Server", server_.opt.server_id);
    head_->set(http::field::content_type, response.content_type);
    for (const auto& [k, v] : response.headers) head_->set(k, v);
    head_->keep_alive(keep_alive_);
    head_->chunked(true);
    serializer_ = std::make_unique<http::response_serializer<http::empty_body>>(*head_);
    writing_ = true;
    stream_.expires_after(Ms(server_.opt.write_timeout_s));
    http::async_write_header(stream_, *serializer_, [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec || !self->body_) return self->Abort();
      // The waker keeps the connection alive while the turn runs (nothing else may be pending
      // between tokens); EndRequest and Shutdown drop the body, which ends that cycle.
      auto ex = self->stream_.get_executor();
      self->body_->SetWaker([self, ex] { net::post(ex, [self] { self->Pump(); }); });
      self->ArmKeepAlive();
      self->Pump();
    });
  }

  // SSE keep-alives: a timer on the connection's executor; each tick that finds the stream
  // silent since the last one (its turn queued or prefilling) writes an SSE comment, which
  // every SSE client ignores and every proxy counts as traffic.
  void ArmKeepAlive() {
    if (server_.opt.sse_keepalive_s <= 0) return;
    if (!keepalive_) keepalive_ = std::make_unique<net::steady_timer>(stream_.get_executor());
    keepalive_->expires_after(Ms(server_.opt.sse_keepalive_s));
    keepalive_->async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || !self->body_ || self->body_done_ || self->closed_) return;
      if (!self->writing_ && !self->wrote_since_tick_) self->WriteKeepAlive();
      self->wrote_since_tick_ = false;
      self->ArmKeepAlive();
    });
  }

  void WriteKeepAlive() {
    static const std::string kComment = ": keep-alive\n\n";
    writing_ = true;
    stream_.expires_after(Ms(server_.opt.write_timeout_s));
    net::async_write(stream_, http::make_chunk(net::buffer(kComment)), [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->Abort();
      self->Pump();  // a wake that came during the write found writing_ set
    });
  }

  // Writes what the body has now; the body's waker calls again when it has more.
  void Pump() {
    if (!body_ || writing_ || closed_ || body_done_) return;
    chunk_.clear();
    body_done_ = !body_->Pull(&chunk_);
    if (chunk_.empty() && !body_done_) return;
    writing_ = true;
    wrote_since_tick_ = true;
    stream_.expires_after(Ms(server_.opt.write_timeout_s));
    auto self = this->shared_from_this();
    if (chunk_.empty()) {
      net::async_write(stream_, http::make_chunk_last(), [self](beast::error_code ec, size_t) { self->OnLast(ec); });
      return;
    }
    net::async_write(stream_, http::make_chunk(net::buffer(chunk_)), [self](beast::error_code ec, size_t) {
      self->writing_ = false;
      if (ec) return self->Abort();
      if (!self->body_done_) return self->Pump();
      self->writing_ = true;
      self->stream_.expires_after(Ms(self->server_.opt.write_timeout_s));
      net::async_write(self->stream_, http::make_chunk_last(),
                       [self](beast::error_code ec2, size_t) { self->OnLast(ec2); });
    });
  }

  void OnLast(beast::error_code ec) {
    writing_ = false;
    if (ec) return Abort();
    EndRequest();
  }

  // The response is out: next request, or close.
  void EndRequest() {
    if (closed_) return;  // Shutdown (e.g. the client left as the last bytes went out) ended it
    if (in_request_) {
      in_request_ = false;
      server_.RequestEnded();
    }
    StopWatch();
    if (keepalive_) keepalive_->cancel();
    body_.reset();
    serializer_.reset();
    head_.reset();
    body_done_ = false;
    if (linger_) return Linger();
    if (!keep_alive_ || peer_gone_ || server_.stopping.load()) return Shutdown();
    Read();
  }

  // While a request is in flight, notice the client closing the connection.
  void Watch() {
    watching_ = true;
    const uint64_t gen = ++watch_gen_;
    stream_.socket().async_wait(net::socket_base::wait_read,
                                [self = this->shared_from_this(), gen](beast::error_code ec) { self->OnWatch(ec, gen); });
  }

  void OnWatch(beast::error_code ec, uint64_t gen) {
    if (ec || gen != watch_gen_ || !watching_ || closed_) return;
    char c;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) {  // the next (pipelined) request: it is read after this response
      watching_ = false;
      return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return Watch();
    // Closed or reset: cancel the turn; the connection closes once the handler returns.
    watching_ = false;
    peer_gone_ = true;
    keep_alive_ = false;
    if (cancelled_) cancelled_->store(true);
    if (body_) Abort();  // streaming: nothing more to send; else the handler's answer closes
  }

  void StopWatch() {
    if (!watching_) return;
    watching_ = false;
    ++watch_gen_;
    beast::error_code ignored;
    stream_.socket().cancel(ignored);  // nothing else is pending now
  }

  // A write failed or timed out: the client is gone.
  void Abort() {
    if (cancelled_) cancelled_->store(true);
    if (body_) body_->Cancel();
    Shutdown();
  }

  void Shutdown() {
    if (closed_) return;
    closed_ = true;
    if (cancelled_ && in_request_) cancelled_->store(true);
    if (body_ && !body_done_) body_->Cancel();
    if (keepalive_) keepalive_->cancel();
    body_.reset();  // (head_ and serializer_ stay: a header write may still be pending)
    beast::error_code ignored;
    stream_.socket().shutdown(net::socket_base::shutdown_both, ignored);
    stream_.close();
    if (in_request_) {
      in_request_ = false;
      server_.RequestEnded();
    }
  }

  HttpServer::Impl& server_;
  Stream stream_;
  const bool is_tcp_;
  bool authenticated_;  // TCP: a request of this connection presented a valid key (or none is needed)
  TenantId tenant_;     // who the current request is (set from its key over TCP)
  bool linger_ = false; // the answer refused an unread body: drain a little, then close
  std::unique_ptr<std::array<char, 4096>> drain_;
  size_t drained_ = 0;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = true;
  bool head_request_ = false;
  bool in_request_ = false;  // a request was read and its response is not finished
  bool closed_ = false;
  bool peer_gone_ = false;
  std::shared_ptr<std::atomic<bool>> cancelled_;
  // A streamed response.
  std::shared_ptr<BodySource> body_;
  std::unique_ptr<http::response<http::empty_body>> head_;
  std::unique_ptr<http::response_serializer<http::empty_body>> serializer_;
  std::string chunk_;
  bool writing_ = false, body_done_ = false;
  std::unique_ptr<net::steady_timer> keepalive_;  // ArmKeepAlive
  bool wrote_since_tick_ = false;                 // a chunk went out since the last keep-alive tick
  // The watch for the client closing.
  bool watching_ = false;
  uint64_t watch_gen_ = 0;
};

}  // namespace

void HttpServer::Impl::RequestStarted() {
  std::lock_guard<std::mutex> lk(mu);
  in_flight++;
}

void HttpServer::Impl::RequestEnded() {
  {
    std::lock_guard<std::mutex> lk(mu);
    in_flight--;
  }
  cv.notify_all();
}

bool HttpServer::Impl::WaitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu);
  return cv.wait_for(lk, timeout, [&] { return in_flight == 0; });
}

void HttpServer::Impl::Register(const std::shared_ptr<ConnectionBase>& c) {
  std::lock_guard<std::mutex> lk(mu);
  connections[c.get()] = c;
}

void HttpServer::Impl::Unregister(ConnectionBase* c, bool is_tcp) {
  {
    std::lock_guard<std::mutex> lk(mu);
    if (connections.erase(c)) (is_tcp ? open_tcp : open_unix)--;
  }
  cv.notify_all();
}

template <class Protocol>
void HttpServer::Impl::Accept(net::basic_socket_acceptor<Protocol>& acceptor, bool is_tcp) {
  acceptor.async_accept(net::make_strand(io), [this, &acceptor, is_tcp](beast::error_code ec,
                                                                         typename Protocol::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // E.g. out of file descriptors: try again shortly rather than spin.
      spdlog::warn("accept: {}", ec.message());
      auto timer = std::make_shared<net::steady_timer>(io, std::chrono::milliseconds(50));
      timer->async_wait([this, &acceptor, is_tcp, timer](beast::error_code) {
        if (acceptor.is_open()) Accept(acceptor, is_tcp);
      });
      return;
    }
    bool admitted = false;
    {
      std::lock_guard<std::mutex> lk(mu);
      size_t& open = is_tcp ? open_tcp : open_unix;
      if (open < (is_tcp ? opt.max_connections : opt.max_unix_connections) && !stopping.load()) {
        ++open;  // Register adds it to `connections`; Unregister takes both back
        admitted = true;
      }
    }
    if (!admitted) {
      spdlog::debug("{} connection refused: the listener's {} connections are open", is_tcp ? "TCP" : "Unix",
                    is_tcp ? opt.max_connections : opt.max_unix_connections);
      beast::error_code ignored;
      socket.close(ignored);
    } else {
      auto c = std::make_shared<Connection<Protocol>>(*this, std::move(socket), is_tcp);
      Register(c);
      c->Start();
    }
    Accept(acceptor, is_tcp);
  });
}

bool ValidServerId(const std::string& id) {
  if (id.empty() || id.size() > 64) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
                    c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string DefaultSocketPath() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg && *xdg) return std::string(xdg) + "/cedar/cedar.sock";
  return "/tmp/cedar-" + std::to_string(getuid()) + "/cedar.sock";
}

namespace {

// Prepares `path` for bind: its directory exists (created 0700) and belongs to us; a stale
// socket file is removed; a live one (a server answering) is an error.
void PrepareSocketPath(net::io_context& io, const std::string& path) {
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    throw std::runtime_error("socket path '" + path + "' is longer than " +
                             std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes");
  }
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (!dir.empty()) {
    struct stat st{};
    if (::stat(dir.c_str(), &st) != 0) {
      if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        throw std::runtime_error("cannot create the socket directory '" + dir.string() + "': " + std::strerror(errno));
      }
    } else if (!S_ISDIR(st.st_mode)) {
      throw std::runtime_error("'" + dir.string() + "' is not a directory");
    }
  }
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (!S_ISSOCK(st.st_mode)) throw std::runtime_error("'" + path + "' exists and is not a socket");
  unix_socket::socket probe(io);
  beast::error_code ec;
  probe.connect(unix_socket::endpoint(path), ec);
  if (!ec) throw std::runtime_error("another server is already listening on '" + path + "'");
  ::unlink(path.c_str());  // stale: left by a server that did not shut down cleanly
}

}  // namespace

void HttpServer::Impl::Listen() {
  if (!opt.unix_socket.empty()) {
    PrepareSocketPath(io, opt.unix_socket);
    unix_acceptor = std::make_unique<unix_socket::acceptor>(io);
    unix_socket::endpoint ep(opt.unix_socket);
    unix_acceptor->open(ep.protocol());
    unix_acceptor->bind(ep);
    struct stat st{};
    if (::stat(opt.unix_socket.c_str(), &st) == 0) unix_inode = st.st_ino;
    unix_path = opt.unix_socket;
    // Only the owner may connect (connect() needs write permission on the socket file).
    if (::chmod(opt.unix_socket.c_str(), 0600) != 0) {
      throw std::runtime_error("chmod 0600 '" + opt.unix_socket + "': " + std::strerror(errno));
    }
    unix_acceptor->listen(net::socket_base::max_listen_connections);
  }
  if (!opt.tcp_host.empty()) {
    tcp::resolver resolver(io);
    beast::error_code ec;
    auto results = resolver.resolve(opt.tcp_host, std::to_string(opt.tcp_port), ec);
    if (ec || results.empty()) throw std::runtime_error("cannot resolve --host '" + opt.tcp_host + "': " + ec.message());
    const tcp::endpoint ep = results.begin()->endpoint();
    if (!ep.address().is_loopback()) {
      spdlog::warn("listening on {} (not loopback){}", ep.address().to_string(),
                   keys.empty() ? " without --api-key: anyone who can reach it can use the model" : "");
    }
    tcp_acceptor = std::make_unique<tcp::acceptor>(io);
    tcp_acceptor->open(ep.protocol());
    tcp_acceptor->set_option(net::socket_base::reuse_address(true));
    tcp_acceptor->bind(ep, ec);
    if (ec) throw std::runtime_error("cannot bind " + ep.address().to_string() + ":" + std::to_string(ep.port()) + ": " + ec.message());
    tcp_acceptor->listen(net::socket_base::max_listen_connections);
    port = tcp_acceptor->local_endpoint().port();
  }
  if (!unix_acceptor && !tcp_acceptor) throw std::runtime_error("nothing to listen on (no socket path and no --host/--port)");
  if (unix_acceptor) Accept(*unix_acceptor, false);
  if (tcp_acceptor) Accept(*tcp_acceptor, true);
}

namespace {
// Removes the socket file, if it is still the one this server bound.
void RemoveSocketFile(const HttpServer::Impl& s) {
  if (s.unix_path.empty()) return;
  struct stat st{};
  if (::lstat(s.unix_path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode) && st.st_ino == s.unix_inode) {
    ::unlink(s.unix_path.c_str());
  }
}
}  // namespace

HttpServer::HttpServer(Api& api, session::SessionManager& manager, ServerOptions options)
    : impl_(std::make_unique<Impl>(api, manager, std::move(options))) {}

HttpServer::~HttpServer() { Stop(); }

const std::string& HttpServer::unix_path() const { return impl_->unix_path; }

int64_t HttpServer::requests_in_flight() const {
  std::lock_guard<std::mutex> lk(impl_->mu);
  return impl_->in_flight;
}
uint16_t HttpServer::tcp_port() const { return impl_->port; }

void HttpServer::Start() {
  Impl& s = *impl_;
  s.Listen();
  s.work.emplace(s.io.get_executor());
  for (int i = 0; i < std::max(1, s.opt.io_threads); ++i) s.io_threads.emplace_back([&s] { s.io.run(); });
  std::lock_guard<std::mutex> lk(s.mu);
  s.started = true;
}

int HttpServer::RunUntilSignal() {
  Impl& s = *impl_;
  net::signal_set signals(s.io, SIGINT, SIGTERM);
  signals.async_wait([&s](beast::error_code ec, int sig) {
    if (ec) return;
    spdlog::info("signal {}: shutting down", sig);
    {
      std::lock_guard<std::mutex> lk(s.mu);
      s.stop_requested = true;
    }
    s.cv.notify_all();
  });
  {
    std::unique_lock<std::mutex> lk(s.mu);
    s.cv.wait(lk, [&] { return s.stop_requested || s.stopped; });
  }
  Stop();
  return 0;
}

void HttpServer::Stop() {
  Impl& s = *impl_;
  bool started;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    if (s.stopped) return;
    s.stopped = true;
    s.stop_requested = true;
    started = s.started;
  }
  s.cv.notify_all();
  if (!started) {  // Start failed part way: release what it bound
    s.unix_acceptor.reset();
    s.tcp_acceptor.reset();
    RemoveSocketFile(s);
    return;
  }
  s.stopping.store(true);
  s.api.StartDraining();
  // 1. Stop accepting (on an I/O thread: acceptors are not thread-safe).
  std::promise<void> closed;
  net::post(s.io, [&s, &closed] {
    beast::error_code ignored;
    if (s.unix_acceptor) s.unix_acceptor->close(ignored);
    if (s.tcp_acceptor) s.tcp_acceptor->close(ignored);
    closed.set_value();
  });
  if (!s.io_threads.empty()) closed.get_future().wait();
  // 2. In-flight turns finish, for a while; 3. the rest are cancelled and the cache flushed.
  if (!s.WaitIdle(Ms(s.opt.drain_timeout_s))) spdlog::info("shutdown: cancelling the turns still running");
  s.api.DetachManager();
  s.manager.Shutdown(/*cancel=*/true);
  if (!s.WaitIdle(std::chrono::seconds(5))) spdlog::warn("shutdown: requests still in flight after the turns ended");
  // 4. Close every connection; wait (briefly) until they are gone.
  std::vector<std::shared_ptr<ConnectionBase>> open;
  {
    std::lock_guard<std::mutex> lk(s.mu);
    for (auto& [p, weak] : s.connections)
      if (auto c = weak.lock()) open.push_back(std::move(c));
  }
  for (auto& c : open) c->Close();
  open.clear();
  {
    std::unique_lock<std::mutex> lk(s.mu);
    s.cv.wait_for(lk, std::chrono::seconds(2), [&] { return s.connections.empty(); });
  }
  spdlog::debug("shutdown: connections closed");
  // 5. Join the workers (every turn has ended) and the I/O threads.
  s.pool.Join();
  s.work.reset();
  s.io.stop();
  for (std::thread& t : s.io_threads) t.join();
  s.io_threads.clear();
  RemoveSocketFile(s);
}

}  // namespace cedar::server
