// service/http/server.h — the listener, the sessions, and the io threads that run them.
//
// Shaped like Boost.Beast's multi-file async examples: a Listener accepts TCP
// connections and hands each to a Session, which reads one request at a time,
// calls the pure handle_request router, writes the response and loops while
// keep-alive. Everything a session does is inside try/catch: no request can
// take the server down.
// Hostile clients: a request's head is checked byte-exactly (framing.h) before
// Beast parses it; a framing error, an over-long head (431) or body (413) is
// answered once, then the connection is shut down and drained (a lingering
// close, so the answer is not lost to a reset) without reading another request.
// Deadlines: the first byte of a request within idle_timeout_s (header_timeout_s
// on a new connection), the whole head within header_timeout_s of its first
// byte, the whole request within read_timeout_s. Connections are capped in
// total and per client address; beyond a cap a small reserve of connections
// answers only /healthz (others get 503), so health checks still work while
// the server is full. Bodies being read at once are capped in total too.
// HttpServer owns the io_context and its threads.
// Thread safety: start/stop from one thread; sessions run on the io threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "service/http/app_state.h"

namespace tapp::service {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0 = any free port
  int io_threads = 2;
  int header_timeout_s = 10;  // to read a request's head, from its first byte (and a new connection's first byte)
  int read_timeout_s = 30;    // to read one whole request (head + body)
  int idle_timeout_s = 15;    // between keep-alive requests
  size_t header_limit_bytes = 16 * 1024;
  size_t max_header_fields = 100;
  int max_connections = 1000;           // in total
  int max_connections_per_client = 64;  // per client IP address
  int reserve_connections = 16;         // beyond the caps: /healthz only
  int64_t max_body_bytes_in_flight = 128 * 1024 * 1024;  // bodies being read at once, all connections (503 above)
};

class HttpServer {
 public:
  HttpServer(AppState& app, HttpOptions options);
  ~HttpServer();
  // Binds and starts the io threads; returns the bound port.
  Result<int> start();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tapp::service
