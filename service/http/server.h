// service/http/server.h — the listener, the sessions, and the io threads that run them.
//
// Shaped like Boost.Beast's multi-file async examples: a Listener accepts TCP
// connections and hands each to a Session, which reads one request at a time
// (body and header size limits, a read deadline that cuts off slow clients),
// calls the pure handle_request router, writes the response and loops while
// keep-alive. Everything a session does is inside try/catch: no request can
// take the server down. HttpServer owns the io_context and its threads.
// Thread safety: start/stop from one thread; sessions run on the io threads.
#pragma once

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
  int read_timeout_s = 10;   // to read one whole request (headers + body)
  int idle_timeout_s = 30;   // between keep-alive requests
  size_t header_limit_bytes = 16 * 1024;
  int max_connections = 1024;
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
