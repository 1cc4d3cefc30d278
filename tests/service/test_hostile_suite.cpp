// The hostile suite (issue 19): over 2,000 requests against a real tapp-server
// on 127.0.0.1, one class of attack at a time, each with the exact status it
// must get. Every reply is read until the server closes the connection and
// must hold exactly one response: a framing error answered 400 and then a
// second response (the smuggled request after it) is the desynchronisation
// request smuggling uses. Prints one line of counts (sent, 4xx by status,
// second responses, 5xx, hangs) and the server's resident memory before and
// after. Connection caps, slow heads and idle connections have their own cases.
#include <doctest/doctest.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "server_process.h"
#include "service/http_client.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {

struct Case {
  std::string cls;      // the attack class, for the report
  std::string bytes;    // sent as is
  int status;           // the one status it must get
  std::string field;    // when set, the error body's "field" must be this
};

// One HTTP response parsed off the front of `reply`; `rest` is whatever follows it.
struct Parsed {
  int status = 0;
  json body;
  std::string rest;
  bool ok = false;
};

Parsed parse_one(const std::string& reply) {
  Parsed p;
  if (reply.rfind("HTTP/1.1 ", 0) != 0 || reply.size() < 12) return p;
  p.status = std::atoi(reply.substr(9, 3).c_str());
  auto end = reply.find("\r\n\r\n");
  if (end == std::string::npos) return p;
  std::string head = reply.substr(0, end);
  size_t length = 0;
  std::istringstream lines(head);
  for (std::string line; std::getline(lines, line);) {
    std::string lower = line;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.rfind("content-length:", 0) == 0) length = std::stoul(line.substr(15));
  }
  if (reply.size() < end + 4 + length) return p;
  p.body = json::parse(reply.substr(end + 4, length), nullptr, false);
  p.rest = reply.substr(end + 4 + length);
  p.ok = true;
  return p;
}

const std::string kSmuggled = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

std::string valid_body() {
  return R"({"model": "mlp", "cluster": {"devices": [{"name": "a", "threads": 1, "speed": 1.0, "memory_mb": 4096}]}, )"
         R"("options": {"evaluator": "simulate", "iterations": 3, "seed": 1, "batch_size": 8}})";
}

// A POST that closes after its answer (its framing is valid: only its content is under test).
std::string post_closing(const std::string& body, const std::string& headers = "Content-Type: application/json\r\n") {
  return "POST /placements HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + headers +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

void add_framing(std::vector<Case>& out) {
  const std::string body = valid_body();
  const std::string len = std::to_string(body.size());
  // Heads whose framing is ambiguous: each followed by the body and a smuggled request.
  std::vector<std::pair<std::string, std::string>> heads = {
      {"Content-Length: " + len + "\r\nContent-Length: " + len + "\r\n", "Content-Length"},
      {"Content-Length: " + len + "\r\nContent-Length: 0\r\n", "Content-Length"},
      {"Content-Length: " + len + ", " + len + "\r\n", "Content-Length"},
      {"Content-Length: " + len + "," + len + "\r\n", "Content-Length"},
      {"Content-Length: +" + len + "\r\n", "Content-Length"},
      {"Content-Length: -" + len + "\r\n", "Content-Length"},
      {"Content-Length: 0x10\r\n", "Content-Length"},
      {"Content-Length: " + len + " 5\r\n", "Content-Length"},
      {"Content-Length: \r\n", "Content-Length"},
      {"Content-Length: 99999999999999999999\r\n", "Content-Length"},
      {"Transfer-Encoding: gzip\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: chunked, gzip\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: xchunked\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: chunkedx\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: chunked, chunked\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: identity\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: \r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: chunked;q=1\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding: chunked\r\nContent-Length: " + len + "\r\n", "Transfer-Encoding"},
      {"Content-Length: " + len + "\r\nTransfer-Encoding: chunked\r\n", "Transfer-Encoding"},
      {"Transfer-Encoding:\r\n chunked\r\n", "headers"},
      {"X-Folded: a\r\n b\r\nContent-Length: " + len + "\r\n", "headers"},
      {"X-Folded: a\r\n\tTransfer-Encoding: chunked\r\n", "headers"},
      {"Transfer-Encoding : chunked\r\n", "headers"},
      {"Content-Length : " + len + "\r\n", "headers"},
      {"Content Length: " + len + "\r\n", "headers"},
      {"X-Nul: a" + std::string(1, '\0') + "b\r\nContent-Length: " + len + "\r\n", "X-Nul"},
      {"X-Ctl: a\x01z\r\nContent-Length: " + len + "\r\n", "X-Ctl"},
      {"Host: y\r\nContent-Length: " + len + "\r\n", "Host"},
  };
  for (const auto& [head, field] : heads)
    for (const std::string& method : {"POST", "PUT", "GET", "DELETE", "PATCH"})
      for (const std::string& tail : {kSmuggled, kSmuggled + kSmuggled, std::string("0\r\n\r\n") + kSmuggled,
                                      "POST /placements HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                                      "Content-Length: " + len + "\r\n\r\n" + body,
                                      std::string()})
        out.push_back({"framing", std::string(method) + " /placements HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
                                      head + "\r\n" + body + tail,
                       400, field});
  // No Host, or HTTP/1.0 with Transfer-Encoding.
  for (const std::string& tail : {kSmuggled, std::string()}) {
    out.push_back({"framing", "GET /healthz HTTP/1.1\r\n\r\n" + tail, 400, "Host"});
    out.push_back({"framing", "POST /placements HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n" + tail,
                   400, "Transfer-Encoding"});
  }
  // Bare LF and bare CR line ends.
  for (const std::string& head : {std::string("GET /healthz HTTP/1.1\nHost: x\n\n"),
                                  std::string("GET /healthz HTTP/1.1\r\nHost: x\n\r\n"),
                                  std::string("GET /healthz HTTP/1.1\r\nHost: x\rX: y\r\n\r\n"),
                                  std::string("GET /healthz HTTP/1.1\rHost: x\r\n\r\n")})
    for (int i = 0; i < 5; ++i) out.push_back({"framing", head + kSmuggled, 400, ""});
  // Bad chunk sizes and chunk framing.
  const std::vector<std::pair<std::string, int>> chunked = {
      {"zz\r\nhello\r\n0\r\n\r\n", 400},
      {"-5\r\nhello\r\n0\r\n\r\n", 400},
      {"1ffffffffffffffffff\r\nx\r\n0\r\n\r\n", 400},
      {"5 5\r\nhello\r\n0\r\n\r\n", 400},
      {"5\r\nhelloXX\r\n0\r\n\r\n", 400},
      {"5\nhello\r\n0\r\n\r\n", 400},
      {"0x5\r\nhello\r\n0\r\n\r\n", 400},
      {"\r\nhello\r\n0\r\n\r\n", 400},
      {"ffffffffffffffff\r\nx\r\n0\r\n\r\n", 413},
  };
  for (const auto& [chunks, status] : chunked)
    for (const std::string& tail : {kSmuggled, kSmuggled + kSmuggled})
      for (int i = 0; i < 6; ++i)
        out.push_back({"chunks",
                       "POST /placements HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
                           chunks + tail,
                       status, status == 413 ? "body" : "request"});
}

void add_limits(std::vector<Case>& out) {
  for (int fields : {101, 150, 300, 1000, 5000}) {
    std::string many;
    for (int i = 0; i < fields; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
    for (int i = 0; i < 8; ++i)
      out.push_back({"limits", "GET /healthz HTTP/1.1\r\nHost: x\r\n" + many + "\r\n" + kSmuggled, 431, "headers"});
  }
  for (int size : {17 * 1024, 20 * 1024, 64 * 1024, 256 * 1024})
    for (int i = 0; i < 8; ++i)
      out.push_back({"limits", "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(size, 'h') + "\r\n\r\n" + kSmuggled,
                     431, "headers"});
  // A body announced over the limit: 413 before it is read.
  for (const char* len : {"8388609", "9437184", "1073741824", "999999999999999"})
    for (int i = 0; i < 8; ++i)
      out.push_back({"limits", std::string("POST /placements HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ") +
                                   len + "\r\n\r\n{\"model\": \"" + std::string(2048, 'a'),
                     413, "body"});
}

// Replaces the value at a JSON pointer of the valid body with raw JSON text.
std::string with_raw(const std::string& pointer, const std::string& raw) {
  json doc = json::parse(valid_body());
  doc[json::json_pointer(pointer)] = "@@HOLE@@";
  std::string text = doc.dump();
  auto pos = text.find("\"@@HOLE@@\"");
  return text.substr(0, pos) + raw + text.substr(pos + 10);
}

std::string field_of_pointer(const std::string& pointer) {
  std::string field;
  std::istringstream parts(pointer.substr(1));
  for (std::string p; std::getline(parts, p, '/');) {
    if (!p.empty() && p.find_first_not_of("0123456789") == std::string::npos) field += "[" + p + "]";
    else field += (field.empty() ? "" : ".") + p;
  }
  return field;
}

void add_strict(std::vector<Case>& out) {
  const std::string body = valid_body();
  // Content types: what a page can send cross-origin without a preflight, and other near misses.
  for (const std::string& ct : {std::string(""), std::string("Content-Type: text/plain\r\n"),
                                std::string("Content-Type: application/x-www-form-urlencoded\r\n"),
                                std::string("Content-Type: multipart/form-data; boundary=x\r\n"),
                                std::string("Content-Type: application/jsonx\r\n"),
                                std::string("Content-Type: application/json; charset=latin1\r\n"),
                                std::string("Content-Type: text/json\r\n"), std::string("Content-Type: \r\n")})
    for (int i = 0; i < 20; ++i) out.push_back({"strict", post_closing(body, ct), 415, "Content-Type"});
  // Bytes after the one JSON value.
  for (const std::string& tail : {std::string(1, '\0'), std::string("\0\0\0", 3), std::string("x"), std::string("{}"),
                                  std::string(" 1"), std::string("\x01"), std::string("//"), std::string("]")})
    for (int i = 0; i < 12; ++i) out.push_back({"strict", post_closing(body + tail), 400, "body"});
  // null (and other wrong types) where a number is expected: named by the field.
  const std::vector<std::string> numbers = {"/options/iterations", "/options/seed",  "/options/batch_size",
                                            "/cluster/devices/0/threads", "/cluster/devices/0/speed",
                                            "/cluster/devices/0/memory_mb"};
  for (const std::string& p : numbers)
    for (const std::string& v : {"null", "\"1\"", "true", "[]", "{}", "1e400", "-1e400"})
      for (int i = 0; i < 6; ++i)  // a number beyond a double is a JSON error of the body; the rest name the field
        out.push_back({"strict", post_closing(with_raw(p, v)), 400, v.find("e400") == std::string::npos ? field_of_pointer(p) : ""});
  // A key twice in one object.
  for (int i = 0; i < 20; ++i)
    out.push_back({"strict", post_closing(R"({"model": "mlp", "model": "alexnet", "cluster": {"devices": [{"name": "a"}]}})"),
                   400, "body"});
  // Authorization twice (the first right, the second wrong, or both the same).
  for (const std::string& second : {"Bearer wrong", "Bearer s3cret", "Basic eDp5"})
    for (int i = 0; i < 15; ++i)
      out.push_back({"strict", "GET /placements HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer s3cret\r\n"
                               "Authorization: " + std::string(second) + "\r\n\r\n",
                     400, "Authorization"});
  // Cross-origin writes and preflights from an origin the server does not name.
  for (const std::string& origin : {"http://evil.example", "null", "http://127.0.0.1:1"})
    for (int i = 0; i < 10; ++i) {
      out.push_back({"cors", post_closing(body, "Content-Type: application/json\r\nOrigin: " + origin + "\r\n"), 403, "Origin"});
      out.push_back({"cors", "DELETE /placements/jx HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: " + origin + "\r\n\r\n",
                     403, "Origin"});
      out.push_back({"cors", "OPTIONS /placements HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: " + origin +
                                 "\r\nAccess-Control-Request-Method: POST\r\n\r\n",
                     403, "Origin"});
    }
}

void add_arithmetic(std::vector<Case>& out) {
  auto model = [](const std::string& shape, const std::string& layers, const std::string& devices = R"([{"name": "a"}])") {
    return R"({"model": {"name": "m", "input_shape": )" + shape + R"(, "layers": )" + layers +
           R"(}, "cluster": {"devices": )" + devices + "}}";
  };
  const std::vector<std::pair<std::string, std::string>> graphs = {
      {"[1000000000]", R"([{"name": "x", "op": "linear", "attrs": {"out": 1000000000}}])"},
      {"[4294967296]", R"([{"name": "x", "op": "linear", "attrs": {"out": 4294967296}}])"},
      {"[3, 2147483648, 2147483648]", R"([{"name": "f", "op": "flatten"}, {"name": "x", "op": "linear", "inputs": ["f"], "attrs": {"out": 10}}])"},
      {"[2147483648, 64, 64]", R"([{"name": "c", "op": "conv2d", "attrs": {"out": 2147483648, "kernel": 3}}, {"name": "f", "op": "flatten", "inputs": ["c"]}, {"name": "x", "op": "linear", "inputs": ["f"], "attrs": {"out": 10}}])"},
      {"[3, 64, 64]", R"([{"name": "c", "op": "conv2d", "attrs": {"out": 8, "kernel": 3, "padding": 9223372036854775807}}, {"name": "f", "op": "flatten", "inputs": ["c"]}, {"name": "x", "op": "linear", "inputs": ["f"], "attrs": {"out": 10}}])"},
      {"[3, 64, 64]", R"([{"name": "p", "op": "adaptive_avgpool2d", "attrs": {"output_size": [2147483648, 2147483648]}}, {"name": "f", "op": "flatten", "inputs": ["p"]}, {"name": "x", "op": "linear", "inputs": ["f"], "attrs": {"out": 10}}])"},
      {"[100000]", R"([{"name": "x", "op": "linear", "attrs": {"out": 100000}}])"},  // 10^10 parameters: over 4 GiB
  };
  for (const auto& [shape, layers] : graphs)
    for (int i = 0; i < 20; ++i) out.push_back({"arithmetic", post_closing(model(shape, layers)), 400, ""});
  // A zoo model over what the cluster could hold at all.
  for (int i = 0; i < 20; ++i)
    out.push_back({"arithmetic",
                   post_closing(R"({"model": "alexnet", "cluster": {"devices": [{"name": "a", "memory_mb": 64}, {"name": "b", "memory_mb": 32}]}})"),
                   400, "model"});
  // Device and link figures outside their ranges.
  const std::vector<std::pair<std::string, std::string>> devices = {
      {R"({"name": "a", "speed": 5e-324})", "cluster.devices[0].speed"},
      {R"({"name": "a", "speed": 1e-5})", "cluster.devices[0].speed"},
      {R"({"name": "a", "speed": 1000.0001})", "cluster.devices[0].speed"},
      {R"({"name": "a", "speed": -0.0})", "cluster.devices[0].speed"},
      {R"({"name": "a", "threads": 100000})", "cluster.devices[0].threads"},
      {R"({"name": "a", "threads": 4294967297})", "cluster.devices[0].threads"},
      {R"({"name": "a", "memory_mb": 1099511627776})", "cluster.devices[0].memory_mb"},
      {R"({"name": "a", "memory_mb": 0})", "cluster.devices[0].memory_mb"},
  };
  for (const auto& [device, field] : devices)
    for (int i = 0; i < 12; ++i)
      out.push_back({"arithmetic", post_closing(R"({"model": "mlp", "cluster": {"devices": [)" + device + "]}}"), 400, field});
  for (const std::string& link : {R"({"bandwidth_mbps": 1e-9})", R"({"bandwidth_mbps": 5e-324})", R"({"bandwidth_mbps": 1e12})",
                                  R"({"latency_ms": 1e9})", R"({"latency_ms": -1})"})
    for (int i = 0; i < 12; ++i)
      out.push_back({"arithmetic",
                     post_closing(R"({"model": "mlp", "cluster": {"devices": [{"name": "a"}, {"name": "b"}], "default_link": )" +
                                  link + "}}"),
                     400, ""});
}

// The valid requests among them: each gets 202 (or 200) and nothing else.
void add_valid(std::vector<Case>& out) {
  const std::string body = valid_body();
  for (int i = 0; i < 25; ++i) {
    out.push_back({"valid", post_closing(body), 202, ""});
    out.push_back({"valid", post_closing(body, "Content-Type: application/json; charset=utf-8\r\n"), 202, ""});
    std::string chunked = "POST /placements HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                          "Transfer-Encoding: chunked\r\n\r\n";
    char size[16];
    std::snprintf(size, sizeof size, "%zx", body.size());
    out.push_back({"valid", chunked + size + "\r\n" + body + "\r\n0\r\n\r\n", 202, ""});
    out.push_back({"valid", "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 200, ""});
  }
}

long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.substr(6).c_str());
  return -1;
}

}  // namespace

TEST_CASE("the hostile suite: each attack class gets its one 4xx, nothing after it, no 5xx and no hang") {
  auto dir = testing::temp_dir("hostile-suite");
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 1, {"--queue-size", "100000",
                                          "--read-timeout-s", "5", "--io-threads", "2"}));
  std::vector<Case> cases;
  add_framing(cases);
  add_limits(cases);
  add_strict(cases);
  add_arithmetic(cases);
  add_valid(cases);
  REQUIRE(cases.size() >= 2000);
  const long rss_before = rss_kib(server.pid());

  std::atomic<size_t> next{0};
  std::mutex mu;
  std::map<int, int> by_status;
  int second_responses = 0, server_errors = 0, hangs = 0, wrong = 0;
  std::vector<std::string> failures;
  auto worker = [&] {
    for (size_t i; (i = next++) < cases.size();) {
      const Case& c = cases[i];
      Result<std::string> r = raw_exchange("127.0.0.1", server.port(), c.bytes, 20);
      Parsed p = r.is_ok() ? parse_one(*r) : Parsed{};
      std::lock_guard<std::mutex> lock(mu);
      auto fail = [&](const std::string& why) {
        if (failures.size() < 20)
          failures.push_back(c.cls + " #" + std::to_string(i) + ": " + why + " | request: " +
                             c.bytes.substr(0, 160) + " | reply: " + (r.is_ok() ? r->substr(0, 300) : r.error_message()));
      };
      if (!r.is_ok()) {
        ++hangs;
        fail("no close within 20 s");
        continue;
      }
      if (!p.ok) {
        ++wrong;
        fail("no complete response");
        continue;
      }
      ++by_status[p.status];
      if (p.status >= 500) ++server_errors;
      if (!p.rest.empty()) {
        ++second_responses;
        fail("bytes after the response");
      }
      if (p.status != c.status) {
        ++wrong;
        fail("status " + std::to_string(p.status) + ", expected " + std::to_string(c.status));
      } else if (!c.field.empty() && (!p.body.is_object() || p.body.value("field", json()) != c.field)) {
        ++wrong;
        fail("field " + (p.body.is_object() ? p.body.value("field", json()).dump() : "?") + ", expected " + c.field);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  const long rss_after = rss_kib(server.pid());

  std::string statuses;
  for (const auto& [status, n] : by_status)
    if (status >= 400 && status < 500) statuses += (statuses.empty() ? "" : " ") + std::to_string(status) + ":" + std::to_string(n);
  std::string line = "hostile suite: sent " + std::to_string(cases.size()) + ", 4xx by status {" + statuses +
                     "}, 2xx " + std::to_string(by_status[200] + by_status[202]) + ", second responses " +
                     std::to_string(second_responses) + ", 5xx " + std::to_string(server_errors) + ", hangs " +
                     std::to_string(hangs) + ", wrong " + std::to_string(wrong) + "; server RSS " +
                     std::to_string(rss_before / 1024) + " MiB before, " + std::to_string(rss_after / 1024) + " MiB after";
  std::printf("%s\n", line.c_str());
  MESSAGE(line);
  for (const std::string& f : failures) MESSAGE(f);
  CHECK(second_responses == 0);
  CHECK(server_errors == 0);
  CHECK(hangs == 0);
  CHECK(wrong == 0);
  CHECK(server.alive());
}

namespace {

// A plain TCP connection to the server that the test holds open.
struct Conn {
  boost::asio::ip::tcp::socket socket;
  explicit Conn(boost::asio::io_context& ioc) : socket(ioc) {}
};

bool closed_by_server(boost::asio::ip::tcp::socket& s, int within_s) {
  timeval tv{within_s, 0};
  setsockopt(s.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  for (;;) {
    ssize_t n = ::recv(s.native_handle(), buf, sizeof buf, 0);
    if (n == 0) return true;             // orderly close
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;  // reset counts as closed; a timeout does not
  }
}

}  // namespace

TEST_CASE("over the connection caps, /healthz is still answered and other requests get 503; idle and slow heads are cut") {
  auto dir = testing::temp_dir("hostile-conn");
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 40, {"--max-connections-per-client", "20", "--max-connections", "40",
                                          "--reserve-connections", "4", "--header-timeout-s", "2", "--idle-timeout-s",
                                          "3", "--read-timeout-s", "4"}));
  namespace net = boost::asio;
  net::io_context ioc;
  net::ip::tcp::endpoint ep(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server.port()));
  std::vector<std::unique_ptr<Conn>> idle;
  for (int i = 0; i < 300; ++i) {  // hold far more idle connections than the caps allow
    auto c = std::make_unique<Conn>(ioc);
    boost::system::error_code ec;
    c->socket.connect(ep, ec);
    if (!ec) idle.push_back(std::move(c));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ServerUrl u;
  u.port = std::to_string(server.port());
  Result<HttpReply> health = http_call(u, "GET", "/healthz", "", {}, 5);
  REQUIRE_MESSAGE(health.is_ok(), health.error_message());
  CHECK(health->status == 200);
  Result<HttpReply> other = http_call(u, "GET", "/placements", "", {}, 5);
  REQUIRE(other.is_ok());
  CHECK(other->status == 503);
  // The idle ones are closed by the server (idle/head deadline), not held forever.
  int closed = 0;
  for (auto& c : idle) closed += closed_by_server(c->socket, 10) ? 1 : 0;
  CHECK(closed == static_cast<int>(idle.size()));
  idle.clear();
  // A slow head (one byte a second, slowloris) is cut at the head deadline, long before it ends.
  {
    Conn slow(ioc);
    slow.socket.connect(ep);
    const std::string head = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(40, 'a') + "\r\n\r\n";
    bool cut = false;
    for (size_t i = 0; i < 32 && !cut; ++i) {  // 8 s of trickle, against a 2 s head deadline
      boost::system::error_code ec;
      net::write(slow.socket, net::buffer(&head[i], 1), ec);
      if (ec) cut = true;
      else std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
    if (!cut) cut = closed_by_server(slow.socket, 3);
    CHECK(cut);
  }
  Result<HttpReply> after = http_call(u, "GET", "/healthz", "", {}, 5);
  REQUIRE(after.is_ok());
  CHECK(after->status == 200);
}

TEST_CASE("bodies being read at once are capped over all connections: past the budget a request gets 503 before its body") {
  auto dir = testing::temp_dir("hostile-budget");
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 40, {"--max-body-bytes", "65536", "--max-inflight-body-bytes",
                                          "100000", "--read-timeout-s", "5"}));
  namespace net = boost::asio;
  net::io_context ioc;
  net::ip::tcp::endpoint ep(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server.port()));
  Conn holder(ioc);  // announces 60,000 bytes and sends only the first few: its share stays reserved
  holder.socket.connect(ep);
  net::write(holder.socket, net::buffer(std::string("POST /placements HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                                    "application/json\r\nContent-Length: 60000\r\n\r\n{\"model\"")));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::string second = "POST /placements HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 60000\r\n\r\n" +
                       std::string(100, ' ');
  Result<std::string> r = raw_exchange("127.0.0.1", server.port(), second, 10);
  REQUIRE(r.is_ok());
  Parsed p = parse_one(*r);
  CHECK(p.status == 503);
  CHECK(p.rest.empty());
  holder.socket.close();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ServerUrl u;
  u.port = std::to_string(server.port());
  Result<HttpReply> ok = http_call(u, "POST", "/placements", valid_body(), {{"Content-Type", "application/json"}}, 5);
  REQUIRE(ok.is_ok());
  CHECK(ok->status == 202);  // the budget came back when the holder left
}
