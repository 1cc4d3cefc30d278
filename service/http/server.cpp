// service/http/server.cpp — listener + sessions over Boost.Beast (see server.h).
#include "service/http/server.h"

#include "common/allocator.h"

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/version.hpp>
#include <iostream>
#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "service/http/framing.h"
#include "service/http/router.h"

namespace tapp::service {
namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

// A request body at least this large returns its memory to the system once answered.
constexpr size_t kTrimAfterBytes = 256 * 1024;
// After an error answer: how long and how much to drain before closing.
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kLingerBytes = 256 * 1024;
// Deadline of a reserve connection (beyond the caps: /healthz only).
constexpr auto kReserveTimeout = std::chrono::seconds(3);

enum class Admission { normal, reserve, refused };

// A reserve connection that may be closed to make room for a newer one.
struct Evictable {
  virtual ~Evictable() = default;
  virtual void evict_if_idle() = 0;
};

// The connection counts, in total and per client address, and the reserve in use.
// When the reserve is full, a new connection takes the place of the oldest
// reserve connection that has not sent a byte yet (idle connections cannot
// hold the reserve against a health check).
struct Shared {
  Shared(AppState& a, HttpOptions o) : app(a), options(std::move(o)) {}
  AppState& app;
  HttpOptions options;
  std::mutex mu;
  int total = 0, reserve_used = 0;
  std::atomic<int64_t> body_bytes_in_flight{0};  // announced bodies being read, all sessions

  // Reserves `bytes` of the in-flight body budget; false when it would go over.
  bool reserve_body(int64_t bytes) {
    int64_t now = body_bytes_in_flight.fetch_add(bytes) + bytes;
    if (now <= options.max_body_bytes_in_flight) return true;
    body_bytes_in_flight.fetch_sub(bytes);
    return false;
  }
  void release_body(int64_t bytes) { body_bytes_in_flight.fetch_sub(bytes); }
  std::unordered_map<std::string, int> per_client;
  std::deque<std::weak_ptr<Evictable>> reserve_queue;  // oldest first

  void add_reserve(const std::shared_ptr<Evictable>& s) {
    std::lock_guard<std::mutex> lock(mu);
    reserve_queue.push_back(s);
    if (reserve_queue.size() > static_cast<size_t>(2 * options.reserve_connections + 8))
      reserve_queue.erase(std::remove_if(reserve_queue.begin(), reserve_queue.end(),
                                         [](const std::weak_ptr<Evictable>& w) { return w.expired(); }),
                          reserve_queue.end());
  }

  // `victim`: a reserve connection to ask to leave; the caller does that after
  // the lock is released (its destructor, if this is its last owner, takes the lock).
  Admission admit(const std::string& client, std::shared_ptr<Evictable>& victim) {
    std::lock_guard<std::mutex> lock(mu);
    int& mine = per_client[client];
    if (total < options.max_connections && mine < options.max_connections_per_client) {
      ++total;
      ++mine;
      return Admission::normal;
    }
    if (mine == 0) per_client.erase(client);
    if (reserve_used < options.reserve_connections) {
      ++reserve_used;
      return Admission::reserve;
    }
    // Full: ask the oldest reserve connection to leave if it is idle; this one may
    // overshoot the reserve until it has (never beyond twice the reserve).
    if (reserve_used >= 2 * options.reserve_connections) return Admission::refused;
    while (!reserve_queue.empty()) {
      victim = reserve_queue.front().lock();
      reserve_queue.pop_front();
      if (!victim) continue;
      ++reserve_used;
      return Admission::reserve;
    }
    return Admission::refused;
  }
  void release(const std::string& client, bool reserve) {
    std::lock_guard<std::mutex> lock(mu);
    if (reserve) {
      --reserve_used;
      return;
    }
    --total;
    auto it = per_client.find(client);
    if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
  }
};

std::string_view buffer_view(const beast::flat_buffer& b) {
  return {static_cast<const char*>(b.data().data()), b.size()};
}

bool is_healthz(const HttpRequest& req) {
  std::string_view target(req.target().data(), req.target().size());
  return (req.method() == http::verb::get || req.method() == http::verb::head) &&
         (target == "/healthz" || target.rfind("/healthz?", 0) == 0);
}

class Session : public std::enable_shared_from_this<Session>, public Evictable {
 public:
  Session(tcp::socket&& socket, std::shared_ptr<Shared> shared, std::string client, bool reserve)
      : stream_(std::move(socket)), shared_(std::move(shared)), client_(std::move(client)), reserve_(reserve) {}
  ~Session() {
    release_body_budget();
    shared_->release(client_, reserve_);
  }

  void run() {
    if (reserve_) shared_->add_reserve(shared_from_this());
    net::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::start_request, shared_from_this()));
  }

  void evict_if_idle() override {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (!self->head_started_) self->close();
    });
  }

 private:
  const HttpOptions& options() const { return shared_->options; }
  HeadLimits head_limits() const { return {options().header_limit_bytes, options().max_header_fields}; }

  // Waits for the first byte of the next request (it may already be buffered).
  void start_request() {
    parser_.emplace();
    parser_->body_limit(shared_->app.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(options().header_limit_bytes));
    head_started_ = false;
    if (buffer_.size() > 0) return on_bytes();
    if (reserve_) stream_.expires_after(kReserveTimeout);
    else stream_.expires_after(std::chrono::seconds(first_request_ ? options().header_timeout_s : options().idle_timeout_s));
    read_more();
  }

  void read_more() {
    stream_.async_read_some(buffer_.prepare(8192), beast::bind_front_handler(&Session::on_read_some, shared_from_this()));
  }

  void on_read_some(beast::error_code ec, std::size_t n) {
    if (ec) return close();  // timeout, reset or the client closed: nothing to answer
    buffer_.commit(n);
    on_bytes();
  }

  // The head's deadline runs from its first byte; the body's from the same moment.
  void on_bytes() {
    try {
      if (!head_started_) {
        head_started_ = true;
        first_request_ = false;
        auto now = Clock::now();
        head_deadline_ = now + (reserve_ ? kReserveTimeout : std::chrono::seconds(options().header_timeout_s));
        request_deadline_ = now + (reserve_ ? kReserveTimeout : std::chrono::seconds(options().read_timeout_s));
        stream_.expires_at(head_deadline_);
      }
      HeadVerdict verdict;
      size_t end = find_head_end(buffer_view(buffer_), head_limits(), verdict);
      if (!verdict.ok()) return reject(verdict.status, verdict.message, verdict.field);
      if (end == 0) return read_more();
      verdict = check_request_head(buffer_view(buffer_).substr(0, end), head_limits());
      if (!verdict.ok()) return reject(verdict.status, verdict.message, verdict.field);
      beast::error_code ec;
      size_t used = parser_->put(net::buffer(buffer_.data().data(), end), ec);
      buffer_.consume(used);
      if (!ec && !parser_->is_header_done()) ec = http::error::partial_message;
      if (ec) return on_read(ec, 0);
      on_header();
    } catch (...) {
      close();
    }
  }

  // After the head: answer "Expect: 100-continue" (curl sends it for large
  // bodies and would otherwise wait a second), then read the body.
  void on_header() {
    stream_.expires_at(request_deadline_);
    if (parser_->is_done()) return on_read({}, 0);
    // All sessions together read at most max_body_bytes_in_flight of bodies at once
    // (a chunked body counts as the largest allowed): memory stays bounded however
    // many connections send large bodies together.
    const int64_t announced = parser_->chunked() ? static_cast<int64_t>(shared_->app.max_body_bytes)
                                                 : static_cast<int64_t>(parser_->content_length().value_or(0));
    if (announced > 0) {
      if (!shared_->reserve_body(announced)) {
        HttpResponse res = error_response(503, "the server is reading other large bodies; retry", "body", 11, false);
        res.set(http::field::retry_after, "1");
        return send(std::move(res), true);
      }
      body_reserved_ = announced;
    }
    auto expect = parser_->get().find(http::field::expect);
    if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue")) {
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
      if (ec == beast::error::timeout || ec == net::error::operation_aborted || ec == net::error::connection_reset ||
          ec == net::error::eof || ec == http::error::end_of_stream)
        return close();
      if (ec == http::error::body_limit)
        return reject(413, "body larger than " + std::to_string(shared_->app.max_body_bytes) + " bytes", "body");
      if (ec == http::error::header_limit)
        return reject(431, "request head larger than " + std::to_string(options().header_limit_bytes) + " bytes",
                      "headers");
      if (ec) return reject(400, "malformed HTTP request: " + ec.message(), "request");
      HttpRequest req = parser_->release();
      body_bytes_ = req.body().size();
      if (reserve_ && !is_healthz(req)) {
        HttpResponse res = error_response(503, "the server is at its connection limit (" +
                                                   std::to_string(options().max_connections) + " in all, " +
                                                   std::to_string(options().max_connections_per_client) +
                                                   " per client address); only /healthz is answered now",
                                          "connection", req.version(), false);
        res.set(http::field::retry_after, "5");
        return send(std::move(res), true);
      }
      HttpResponse res = handle_request(shared_->app, req);
      if (reserve_) res.keep_alive(false);
      const bool close_after = !res.keep_alive();
      send(std::move(res), close_after);
    } catch (...) {
      close();
    }
  }

  // An error the connection cannot continue after: answered once, then closed.
  void reject(int status, const std::string& message, const std::string& field) {
    send(error_response(status, message, field, 11, false), true);
  }

  void send(HttpResponse res, bool close_after) {
    if (close_after) res.keep_alive(false);
    auto sp = std::make_shared<HttpResponse>(std::move(res));
    response_ = sp;
    stream_.expires_after(std::chrono::seconds(options().read_timeout_s));
    http::async_write(stream_, *sp, beast::bind_front_handler(&Session::on_write, shared_from_this(), close_after));
  }

  void release_body_budget() {
    if (body_reserved_ > 0) shared_->release_body(body_reserved_);
    body_reserved_ = 0;
  }

  void on_write(bool close_after, beast::error_code ec, std::size_t) {
    response_.reset();
    release_body_budget();
    if (body_bytes_ >= kTrimAfterBytes) release_memory();
    body_bytes_ = 0;
    if (ec) return close();
    if (close_after) return linger();
    start_request();
  }

  // A large body's pages go back to the system (the allocator keeps freed memory otherwise).
  void release_memory() {
    parser_.reset();
    buffer_.shrink_to_fit();
    release_free_memory();
  }

  // Shuts our side, then reads and discards what the client still sends (a
  // pipelined request after a framing error is never parsed) until it closes,
  // kLingerBytes or kLingerTime: closing with unread bytes would reset the
  // connection and could destroy the answer before the client reads it.
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    buffer_.consume(buffer_.size());
    stream_.expires_after(kLingerTime);
    drain();
  }

  void drain() {
    stream_.async_read_some(net::buffer(discard_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      self->drained_ += n;
      if (ec || self->drained_ >= kLingerBytes) return self->close();
      self->drain();
    });
  }

  void close() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<HttpResponse> response_;
  std::shared_ptr<Shared> shared_;
  std::string client_;
  bool reserve_ = false;
  bool first_request_ = true;
  bool head_started_ = false;
  Clock::time_point head_deadline_, request_deadline_;
  size_t body_bytes_ = 0;
  int64_t body_reserved_ = 0;  // of the in-flight body budget, while this request is read and answered
  size_t drained_ = 0;
  char discard_[4096];
};

class Listener : public std::enable_shared_from_this<Listener> {
 public:
  Listener(net::io_context& ioc, std::shared_ptr<Shared> shared)
      : ioc_(ioc), acceptor_(ioc), retry_(ioc), shared_(shared) {}

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
    retry_.cancel();
  }

 private:
  void do_accept() {
    acceptor_.async_accept(net::make_strand(ioc_), beast::bind_front_handler(&Listener::on_accept, shared_from_this()));
  }
  void on_accept(beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors (EMFILE) or similar: wait a little instead of spinning.
      retry_.expires_after(std::chrono::milliseconds(50));
      retry_.async_wait([self = shared_from_this()](beast::error_code wec) {
        if (!wec) self->do_accept();
      });
      return;
    }
    try {
      beast::error_code aec;
      std::string client = socket.remote_endpoint(aec).address().to_string();
      std::shared_ptr<Evictable> victim;
      Admission a = aec ? Admission::refused : shared_->admit(client, victim);
      if (victim) victim->evict_if_idle();
      victim.reset();
      if (a == Admission::refused) {
        beast::error_code ignore;
        socket.close(ignore);
      } else {
        std::make_shared<Session>(std::move(socket), shared_, client, a == Admission::reserve)->run();
      }
    } catch (...) {
    }
    do_accept();
  }

  net::io_context& ioc_;
  tcp::acceptor acceptor_;
  net::steady_timer retry_;
  std::shared_ptr<Shared> shared_;
};

// Raises the descriptor limit to its hard maximum and keeps the connection caps
// under it; the head's deadline is never longer than the whole request's.
void fit_connection_caps(HttpOptions& o) {
  o.header_timeout_s = std::max(1, std::min(o.header_timeout_s, o.read_timeout_s));
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = std::min<rlim_t>(rl.rlim_max, 1 << 20);
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  const long spare = 128;  // the database, job processes, listening socket
  const long usable = static_cast<long>(std::min<rlim_t>(rl.rlim_cur, 1 << 20)) - spare - o.reserve_connections;
  if (usable < o.max_connections) {
    std::cerr << "tapp-server: --max-connections lowered from " << o.max_connections << " to "
              << std::max(1L, usable) << " (open-file limit " << rl.rlim_cur << ")\n";
    o.max_connections = static_cast<int>(std::max(1L, usable));
  }
}

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
  fit_connection_caps(impl_->options);
  impl_->options.max_body_bytes_in_flight =
      std::max<int64_t>(impl_->options.max_body_bytes_in_flight, static_cast<int64_t>(impl_->app.max_body_bytes));
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
