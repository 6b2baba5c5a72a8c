// The transport: HTTP/1.1 over a Unix domain socket (the default) and optionally TCP, with
// Boost.Beast on a few I/O threads. I/O threads only read, write and post: each request's
// handler (Api::Handle, which waits for its turn) runs on a WorkerPool thread, and the
// SessionManager's engine thread owns the model.
//
// Per connection: a read timeout (idle keep-alive included), a body size limit (413, from
// Content-Length before the body is read), the API key checked from the headers (401 and
// close, before any body byte is read), keep-alive and pipelining (one request at a time),
// chunked Server-Sent Events for streamed responses. While a request is in flight the connection watches for the client closing:
// then the request's `cancelled` flag is set and its turn ends at the next token.
//
// Stop(): stop accepting, let in-flight requests finish for `drain_timeout_s`, then
// SessionManager::Shutdown(cancel = true) (ends the rest, flushes the cache's disk tier),
// close every connection, join the threads, remove the socket file.
//
// Thread contract: Start, then Stop (or RunUntilSignal) from one controlling thread.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "session/session_manager.h"
#include "server/api.h"

namespace cedar::server {

struct ServerOptions {
  std::string unix_socket;          // path of the Unix socket; "" = none
  std::string tcp_host;             // "" = no TCP listener
  uint16_t tcp_port = 0;            // 0 = an ephemeral port (see tcp_port())
  // TCP: the accepted API keys, each one tenant (server/tenant.h). A request sends
  // "Authorization: Bearer KEY" (scheme in any case) or "x-api-key: KEY"; it is checked from
  // the headers, before any body is read or "100 Continue" sent. Empty: TCP clients need no
  // key and are one tenant. The Unix socket (mode 0600) is the owner's tenant, keys or not.
  std::vector<std::string> api_keys;
  int io_threads = 2;
  // Each listener has its own connection budget, so TCP clients cannot lock the owner out of
  // the Unix socket; connections beyond one are closed at once.
  size_t max_connections = 1024;       // TCP
  size_t max_unix_connections = 256;   // Unix socket
  size_t max_body_bytes = 32u << 20;
  size_t max_header_bytes = 64u << 10;
  double read_timeout_s = 60;       // one request's headers and body; also keep-alive idle time
  // TCP: a connection's request headers must arrive within this until one of its requests
  // authenticates (and a connection idle that long before then is closed), so connections
  // that never authenticate hold a slot only briefly.
  double auth_timeout_s = 5;
  double write_timeout_s = 60;      // one write
  double drain_timeout_s = 10;      // at Stop, how long in-flight turns may still run
  // This instance's name in a cluster, sent as "X-Cedar-Server" on every response (a client
  // behind a load balancer sees which server answered); "" = no header. REQUIRES: ValidServerId.
  std::string server_id;
  // A streamed response silent this long (its turn queued or prefilling) gets an SSE comment
  // ": keep-alive\n\n", so proxies and clients with idle timeouts keep the stream. 0 = never.
  double sse_keepalive_s = 5;
};

// 1 to 64 characters from [A-Za-z0-9_.:-] (safe in a header and a log line).
bool ValidServerId(const std::string& id);

// The documented default socket path: $XDG_RUNTIME_DIR/cedar/cedar.sock, else
// /tmp/cedar-<uid>/cedar.sock (its directory is created with mode 0700).
std::string DefaultSocketPath();

class HttpServer {
 public:
  // REQUIRES: `api` and `manager` (the one `api` drives) outlive the server.
  HttpServer(Api& api, session::SessionManager& manager, ServerOptions options);
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listeners and starts the threads. Throws std::runtime_error naming the address
  // that failed (e.g. another server already listens on the socket path).
  void Start();
  // Blocks until SIGINT or SIGTERM (or Stop from another thread), then stops. Returns 0.
  int RunUntilSignal();
  // Idempotent. Returns when everything is closed and joined.
  void Stop();

  const std::string& unix_path() const;
  uint16_t tcp_port() const;  // the bound port (0 without TCP)
  // Requests read and not yet fully answered (tests; 0 when idle).
  int64_t requests_in_flight() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cedar::server
