// service/http/server.cpp — listener + sessions over Boost.Beast (see server.h).
#include "service/http/server.h"

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/version.hpp>
#include <iostream>
#include <optional>

#include "service/http/router.h"

namespace tapp::service {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {

struct Shared {
  Shared(AppState& a, HttpOptions o) : app(a), options(std::move(o)) {}
  AppState& app;
  HttpOptions options;
  std::atomic<int> connections{0};
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, std::shared_ptr<Shared> shared)
      : stream_(std::move(socket)), shared_(std::move(shared)) {
    ++shared_->connections;
  }
  ~Session() { --shared_->connections; }

  void run() {
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::do_read, shared_from_this()));
  }

 private:
  void do_read() {
    parser_.emplace();
    parser_->body_limit(shared_->app.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(shared_->options.header_limit_bytes));
    stream_.expires_after(std::chrono::seconds(shared_->options.read_timeout_s));
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::on_header, shared_from_this()));
  }

  // After the headers: answer "Expect: 100-continue" (curl sends it for large
  // bodies and would otherwise wait a second), then read the body.
  void on_header(beast::error_code ec, std::size_t bytes) {
    if (ec) return on_read(ec, bytes);
    auto expect = parser_->get().find(http::field::expect);
    if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue") && !parser_->is_done()) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      http::async_write(stream_, *cont, [self = shared_from_this(), cont](beast::error_code wec, std::size_t) {
        if (wec) return self->close();
        self->read_body();
      });
      return;
    }
    read_body();
  }

  void read_body() {
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  void on_read(beast::error_code ec, std::size_t) {
    try {
      if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::operation_aborted ||
          ec == net::error::connection_reset || ec == net::error::eof)
        return close();
      if (ec == http::error::body_limit)
        return send(error_response(413, "body larger than " + std::to_string(shared_->app.max_body_bytes) + " bytes",
                                   "body"));
      if (ec == http::error::header_limit)
        return send(error_response(431, "request headers larger than " +
                                            std::to_string(shared_->options.header_limit_bytes) + " bytes",
                                   "headers"));
      if (ec) return send(error_response(400, "malformed HTTP request: " + ec.message(), "request"));
      HttpRequest req = parser_->release();
      send(handle_request(shared_->app, req));
    } catch (...) {
      close();
    }
  }

  void send(HttpResponse res) {
    auto sp = std::make_shared<HttpResponse>(std::move(res));
    response_ = sp;
    stream_.expires_after(std::chrono::seconds(shared_->options.read_timeout_s));
    http::async_write(stream_, *sp,
                      beast::bind_front_handler(&Session::on_write, shared_from_this(), sp->need_eof()));
  }

  void on_write(bool close_after, beast::error_code ec, std::size_t) {
    response_.reset();
    if (ec) return close();
    if (close_after) return close();
    do_read();
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<HttpResponse> response_;
  std::shared_ptr<Shared> shared_;
};

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& ioc, std::shared_ptr<Shared> shared) : ioc_(ioc), acceptor_(ioc), shared_(shared) {}

  Status open(const tcp::endpoint& endpoint) {
    beast::error_code ec;
    acceptor_.open(endpoint.protocol(), ec);
    if (ec) return Status::error("listen: open: " + ec.message());
    acceptor_.set_option(net::socket_base::reuse_address(true), ec);
    acceptor_.bind(endpoint, ec);
    if (ec) return Status::error("listen: bind " + endpoint.address().to_string() + ":" +
                                 std::to_string(endpoint.port()) + ": " + ec.message());
    acceptor_.listen(net::socket_base::max_listen_connections, ec);
    if (ec) return Status::error("listen: " + ec.message());
    return Status::ok();
  }
  int port() const { return acceptor_.local_endpoint().port(); }
  void run() { do_accept(); }
  void stop() {
    beast::error_code ec;
    acceptor_.close(ec);
  }

 private:
  void do_accept() {
    acceptor_.async_accept(net::make_strand(ioc_),
                           beast::bind_front_handler(&Listener::on_accept, shared_from_this()));
  }
  void on_accept(beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec) {
      if (shared_->connections.load() >= shared_->options.max_connections) {
        beast::error_code ignore;
        socket.close(ignore);
      } else {
        try {
          std::make_shared<Session>(std::move(socket), shared_)->run();
        } catch (...) {
        }
      }
    }
    do_accept();
  }

  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace

struct HttpServer::Impl {
  AppState& app;
  HttpOptions options;
  net::io_context ioc;
  std::shared_ptr<Listener> listener;
  std::vector<std::thread> threads;
  Impl(AppState& a, HttpOptions o) : app(a), options(std::move(o)), ioc(std::max(1, options.io_threads)) {}
};

HttpServer::HttpServer(AppState& app, HttpOptions options) : impl_(new Impl(app, std::move(options))) {}

HttpServer::~HttpServer() { stop(); }

Result<int> HttpServer::start() {
  beast::error_code ec;
  auto address = net::ip::make_address(impl_->options.host, ec);
  if (ec) {
    // A host name: resolve it.
    tcp::resolver resolver(impl_->ioc);
    auto results = resolver.resolve(impl_->options.host, std::to_string(impl_->options.port), ec);
    if (ec || results.empty()) return Status::error("--host: cannot resolve " + impl_->options.host);
    address = results.begin()->endpoint().address();
  }
  if (impl_->options.port < 0 || impl_->options.port > 65535) return Status::error("--port: must be in [0, 65535]");
  auto shared = std::make_shared<Shared>(impl_->app, impl_->options);
  impl_->listener = std::make_shared<Listener>(impl_->ioc, shared);
  if (Status s = impl_->listener->open(tcp::endpoint(address, static_cast<unsigned short>(impl_->options.port))); !s)
    return s;
  int port = impl_->listener->port();
  impl_->listener->run();
  for (int i = 0; i < std::max(1, impl_->options.io_threads); ++i)
    impl_->threads.emplace_back([this] {
      for (;;) {
        try {
          impl_->ioc.run();
          return;
        } catch (const std::exception& e) {
          std::cerr << "tapp-server: io thread: " << e.what() << "\n";
        } catch (...) {
        }
      }
    });
  return port;
}

void HttpServer::stop() {
  if (!impl_) return;
  if (impl_->listener) {
    net::post(impl_->ioc, [l = impl_->listener] { l->stop(); });
  }
  impl_->ioc.stop();
  for (std::thread& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->threads.clear();
}

}  // namespace tapp::service
