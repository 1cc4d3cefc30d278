// Over 1000 malformed or hostile requests against a real tapp-server on
// 127.0.0.1: broken JSON, wrong types, huge numbers, deep nesting, unknown ops,
// path tricks, bad methods, huge headers, garbage bytes, oversized bodies. The
// server must answer every one (an HTTP status line, never a 5xx other than
// 503) and still be up and healthy afterwards.
#include <doctest/doctest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <mutex>
#include <random>
#include <thread>

#include "server_process.h"
#include "service/http_client.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {

std::string http_request(const std::string& method, const std::string& target, const std::string& body,
                         const std::string& extra_headers = "") {
  std::string r = method + " " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" + extra_headers;
  if (!body.empty() || method == "POST")
    r += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  return r + "\r\n" + body;
}

std::string post(const std::string& body) { return http_request("POST", "/placements", body); }

const std::string kValid =
    R"({"model": "alexnet", "cluster": {"devices": [{"name": "a", "threads": 1, "speed": 1.0, "memory_mb": 4096, "kind": "cpu", "where": "local"}]}, "options": {"evaluator": "simulate", "iterations": 3, "time_budget_s": 0, "seed": 1, "batch_size": 32, "input_size": 0, "num_classes": 0, "warm_start": false, "baselines": true}})";

// Replaces the value at a JSON pointer with `value` (raw JSON text).
std::string with_value(const std::string& pointer, const std::string& raw) {
  json doc = json::parse(kValid);
  doc[json::json_pointer(pointer)] = "@@HOLE@@";
  std::string text = doc.dump();
  auto pos = text.find("\"@@HOLE@@\"");
  return text.substr(0, pos) + raw + text.substr(pos + 10);
}

std::vector<std::string> hostile_requests() {
  std::vector<std::string> out;
  // Broken JSON: every truncation of a valid body, and corrupted bytes.
  for (size_t n = 0; n < kValid.size(); n += 2) out.push_back(post(kValid.substr(0, n)));
  std::mt19937 rng(42);
  for (int i = 0; i < 150; ++i) {
    std::string b = kValid;
    for (int k = 0; k < 3; ++k) b[rng() % b.size()] = "{}[]\",:\\\x01\xff 0e-"[rng() % 16];
    out.push_back(post(b));
  }
  // Wrong types and huge numbers at every field.
  const std::vector<std::string> pointers = {
      "/model", "/cluster", "/cluster/devices", "/cluster/devices/0", "/cluster/devices/0/name",
      "/cluster/devices/0/threads", "/cluster/devices/0/speed", "/cluster/devices/0/memory_mb",
      "/cluster/devices/0/kind", "/cluster/devices/0/where", "/options", "/options/evaluator",
      "/options/iterations", "/options/time_budget_s", "/options/seed", "/options/batch_size",
      "/options/input_size", "/options/num_classes", "/options/warm_start", "/options/baselines",
      "/model_file", "/extra"};
  const std::vector<std::string> values = {
      "null", "true", "0", "-1", "1.5", "\"x\"", "\"\"", "[]", "{}", "[1]", "{\"a\":1}", "1e308", "-1e308",
      "18446744073709551616", "1e400", "-9223372036854775809", "123456789012345678901234567890", "NaN",
      "\"\\u0000\"", "\"../../etc/passwd\"", "\"evil.example:22\""};
  for (const std::string& p : pointers)
    for (const std::string& v : values) out.push_back(post(with_value(p, v)));
  // Deep nesting, alone and inside fields.
  for (int depth : {65, 100, 1000, 10000, 200000}) {
    out.push_back(post(std::string(depth, '[') + std::string(depth, ']')));
    std::string obj;
    for (int i = 0; i < std::min(depth, 20000); ++i) obj += "{\"a\":";
    out.push_back(post(obj + "1" + std::string(std::min(depth, 20000), '}')));
    out.push_back(post(with_value("/options", std::string(depth, '[') + std::string(depth, ']'))));
    out.push_back(post(std::string(depth, '[')));  // unterminated
  }
  // Unknown ops and broken layer graphs.
  const std::vector<std::string> layers = {
      R"([{"name": "x", "op": "teleport", "inputs": []}])",
      R"([{"name": "x", "op": "", "inputs": []}])",
      R"([{"name": "x", "op": 7, "inputs": []}])",
      R"([{"name": "x", "op": null, "inputs": []}])",
      R"([{"name": "x", "op": "conv3d", "inputs": [], "attrs": {"out": 4}}])",
      R"([{"name": "x", "op": "linear", "inputs": []}])",
      R"([{"name": "x", "op": "linear", "inputs": ["y"], "attrs": {"out": 4}}])",
      R"([{"name": "x", "op": "linear", "inputs": ["x"], "attrs": {"out": 4}}])",
      R"([{"name": "x", "op": "linear", "inputs": [], "attrs": {"out": 1000000000000}}])",
      R"([{"name": "x", "op": "linear", "inputs": [], "attrs": {"out": -4}}])",
      R"([{"name": "x", "op": "conv2d", "inputs": [], "attrs": {"out": 4, "kernel": -3}}])",
      R"([{"name": "x", "op": "conv2d", "inputs": [], "attrs": {"out": 4, "kernel": 99999}}])",
      R"([{"name": "x", "op": "add", "inputs": []}])",
      R"([{"name": "x", "op": "concat", "inputs": [], "attrs": {"dim": 9}}])",
      R"([{"name": "x", "op": "linear", "inputs": [], "attrs": {"out": 4}}, {"name": "x", "op": "relu", "inputs": ["x"]}])",
      R"([])", R"({})", R"("layers")", R"([1, 2, 3])", R"([null])", R"([[]])"};
  const std::vector<std::string> shapes = {"[16]", "[]", "[0]", "[-1]", "[1000000000, 1000000000, 1000000000]",
                                           "\"16\""};
  for (const std::string& l : layers)
    for (const std::string& s : shapes)
      out.push_back(post(R"({"model": {"name": "m", "input_shape": )" + s + R"(, "layers": )" + l +
                         R"(}, "cluster": {"devices": [{"name": "a"}]}})"));
  // Path tricks, with GET and DELETE.
  const std::vector<std::string> targets = {
      "/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/..%2f..%2fetc%2fpasswd", "/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd",
      "/web/../../etc/passwd", "/.git/config", "/.env", "/%00", "/index.html%00.js", "/%", "/%zz", "/%2",
      "//etc/passwd", "/\\..\\..\\etc\\passwd", "/..;/etc/passwd", "/placements/../../etc/passwd",
      "/placements/%2e%2e", "/placements/..", "/placements/.", "/placements/a%2fb", "/placements/%00",
      "/placements/" + std::string(300, 'a'), "/placements/x/events/../../..", "/placements?status=%00",
      "/placements?limit=-1", "/placements?limit=1e9", "/placements?offset=99999999999999999999",
      "/placements?status=queued&status=failed", "/placements?&&&==", "/placements/x/events?after=-5",
      "/index.html/..", "/app.js%2f..%2f..%2fCMakeLists.txt", "/~/.ssh/id_rsa", "/proc/self/environ",
      "/" + std::string(3000, 'b'), "/openapi.json/..", "/schemas/../CMakeLists.txt", "/schemas/job.schema.json%00",
      "*", "http://evil.example/", "/healthz?x=" + std::string(2000, 'y'), "/style.css?../../x"};
  for (const std::string& t : targets) {
    out.push_back(http_request("GET", t, ""));
    out.push_back(http_request("DELETE", t, ""));
    out.push_back(http_request("HEAD", t, ""));
  }
  // Bad methods.
  for (const std::string& m : {"PUT", "PATCH", "OPTIONS", "TRACE", "CONNECT", "FOO", "get", "PROPFIND", "MKCOL", "LOCK"})
    for (const std::string& t : {"/placements", "/placements/jx", "/healthz", "/", "/placements/jx/events"})
      out.push_back(http_request(m, t, m == std::string("PUT") ? kValid : ""));
  // Huge and broken headers.
  for (int size : {8 * 1024, 17 * 1024, 64 * 1024, 1024 * 1024})
    out.push_back(http_request("GET", "/healthz", "", "X-Big: " + std::string(size, 'h') + "\r\n"));
  {
    std::string many;
    for (int i = 0; i < 2000; ++i) many += "X-H" + std::to_string(i) + ": v\r\n";
    out.push_back(http_request("GET", "/placements", "", many));
  }
  out.push_back(http_request("GET", "/placements", "", "Authorization: Bearer " + std::string(20000, 't') + "\r\n"));
  out.push_back(http_request("POST", "/placements", kValid, "Content-Type: text/plain\r\n"));
  out.push_back("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\nConnection: close\r\n\r\n");
  out.push_back("POST /placements HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\nConnection: close\r\n\r\n");
  out.push_back("POST /placements HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\nConnection: close\r\n\r\n");
  out.push_back("POST /placements HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\nConnection: close\r\n\r\nabcd");
  out.push_back("POST /placements HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nxx\r\n0\r\n\r\n");
  out.push_back("POST /placements HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nffffffffffffffff\r\nx\r\n0\r\n\r\n");
  out.push_back("GET /healthz HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n");
  out.push_back("GET /healthz\r\n\r\n");
  out.push_back("GET\r\n\r\n");
  out.push_back("\r\n\r\n");
  out.push_back("GET /healthz HTTP/1.1\r\nBad Header Line\r\nConnection: close\r\n\r\n");
  out.push_back("GET /healthz HTTP/1.1\r\n: empty-name\r\nConnection: close\r\n\r\n");
  out.push_back(std::string("GET /hea\0lthz HTTP/1.1\r\nConnection: close\r\n\r\n", 45));
  // Oversized bodies: announced as 9 MiB and 1 GiB; only the start is sent.
  for (const char* len : {"9437184", "1073741824", "8388609"})
    out.push_back(std::string("POST /placements HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ") +
                  len + "\r\nConnection: close\r\n\r\n{\"model\": \"" + std::string(4096, 'a'));
  // Garbage bytes.
  for (int i = 0; i < 120; ++i) {
    std::string g;
    int n = 1 + rng() % 400;
    for (int k = 0; k < n; ++k) g += static_cast<char>(rng() % 256);
    out.push_back(g + "\r\n\r\n");
  }
  return out;
}

}  // namespace

TEST_CASE("a thousand hostile requests are each answered and the server stays up") {
  auto dir = testing::temp_dir("hostile");
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 1, {"--queue-size", "100000", "--read-timeout-s", "2", "--io-threads", "2"}));
  std::vector<std::string> requests = hostile_requests();
  REQUIRE(requests.size() >= 1000);
  std::atomic<size_t> next{0};
  std::atomic<int> answered{0}, server_errors{0}, accepted{0};
  std::mutex mu;
  std::vector<std::string> unanswered;
  auto worker = [&] {
    for (size_t i; (i = next++) < requests.size();) {
      Result<std::string> r = raw_exchange("127.0.0.1", server.port(), requests[i], 15);
      std::string reply = r.is_ok() ? *r : "";
      if (reply.rfind("HTTP/1.1 ", 0) == 0 && reply.size() >= 12) {
        ++answered;
        int status = std::atoi(reply.substr(9, 3).c_str());
        if (status >= 500 && status != 503) {
          ++server_errors;
          std::lock_guard<std::mutex> lock(mu);
          unanswered.push_back("5xx for request " + std::to_string(i) + ": " + requests[i].substr(0, 200) + " -> " +
                               reply.substr(0, 300));
        }
        if (status == 202) ++accepted;
      } else {
        std::lock_guard<std::mutex> lock(mu);
        unanswered.push_back("no answer to request " + std::to_string(i) + ": " + requests[i].substr(0, 120) +
                             (r.is_ok() ? "" : " (" + r.error_message() + ")"));
      }
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < std::min<size_t>(unanswered.size(), 10); ++i) MESSAGE(unanswered[i]);
  MESSAGE(requests.size() << " hostile requests, " << answered.load() << " answered, " << accepted.load()
                          << " happened to be valid jobs");
  CHECK(answered.load() == static_cast<int>(requests.size()));
  CHECK(server_errors.load() == 0);
  CHECK(server.alive());
  ServerUrl u;
  u.port = std::to_string(server.port());
  Result<HttpReply> health = http_call(u, "GET", "/healthz");
  REQUIRE(health.is_ok());
  CHECK(health->status == 200);
}
