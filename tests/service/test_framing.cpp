// Tests of the strict request-head check (service/http/framing.h), the field
// path every parser's Status carries, and the last check on a job's result.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "placer/optimize.h"
#include "service/http/framing.h"
#include "service/request_check.h"
#include "service/result_check.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {

HeadVerdict check(const std::string& fields, const std::string& line = "POST /placements HTTP/1.1") {
  return check_request_head(line + "\r\n" + fields + "\r\n", HeadLimits{});
}

}  // namespace

TEST_CASE("a well-framed head passes, chunked alone or one Content-Length") {
  CHECK(check("Host: x\r\nContent-Length: 5\r\n").ok());
  CHECK(check("Host: x\r\nTransfer-Encoding: chunked\r\n").ok());
  CHECK(check("Host: x\r\nTransfer-Encoding:  Chunked \r\n").ok());
  CHECK(check("Host: x\r\n", "GET /healthz HTTP/1.0").ok());
  CHECK(check("", "GET /healthz HTTP/1.0").ok());
}

TEST_CASE("ambiguous framing is a 400 naming the header") {
  auto bad = [](const std::string& fields, const std::string& field) {
    HeadVerdict v = check("Host: x\r\n" + fields);
    CHECK_MESSAGE(v.status == 400, fields);
    CHECK_MESSAGE(v.field == field, fields << " -> " << v.message);
  };
  bad("Content-Length: 5\r\nContent-Length: 5\r\n", "Content-Length");
  bad("Content-Length: 5, 5\r\n", "Content-Length");
  bad("Content-Length: +5\r\n", "Content-Length");
  bad("Transfer-Encoding: gzip\r\n", "Transfer-Encoding");
  bad("Transfer-Encoding: chunked, gzip\r\n", "Transfer-Encoding");
  bad("Transfer-Encoding: gzip, chunked\r\n", "Transfer-Encoding");
  bad("Transfer-Encoding: xchunked\r\n", "Transfer-Encoding");
  bad("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", "Transfer-Encoding");
  bad("Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", "Transfer-Encoding");
  bad("X-A: 1\r\n Transfer-Encoding: chunked\r\n", "headers");
  bad("Transfer-Encoding : chunked\r\n", "headers");
  bad(std::string("X-A: a\0b\r\n", 10), "X-A");
  bad("Host: y\r\n", "Host");
  CHECK(check("Transfer-Encoding: chunked\r\n", "POST / HTTP/1.0").status == 400);
  CHECK(check("Content-Length: 0\r\n").field == "Host");
  CHECK(check("Host: x\r\n", "GET /healthz HTTP/2.0").status == 400);
  CHECK(check("Host: x\r\n", "GET  /healthz HTTP/1.1").status == 400);
}

TEST_CASE("too many header fields or too long a head is a 431") {
  std::string many;
  for (int i = 0; i < 101; ++i) many += "X-" + std::to_string(i) + ": v\r\n";
  CHECK(check("Host: x\r\n" + many).status == 431);
  HeadVerdict v;
  std::string long_head = "GET / HTTP/1.1\r\nX: " + std::string(20000, 'a');
  CHECK(find_head_end(long_head, HeadLimits{}, v) == 0);
  CHECK(v.status == 431);
}

TEST_CASE("the head's end is found only after CRLF CRLF, and a bare LF or CR is refused at once") {
  HeadVerdict v;
  CHECK(find_head_end("GET / HTTP/1.1\r\nHost: x\r\n", HeadLimits{}, v) == 0);
  CHECK(v.ok());
  std::string head = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(find_head_end(head + "GET / HTTP/1.1", HeadLimits{}, v) == head.size());
  CHECK(find_head_end("GET / HTTP/1.1\nHost: x\n\n", HeadLimits{}, v) == 0);
  CHECK(v.status == 400);
  HeadVerdict cr;
  CHECK(find_head_end("GET / HTTP/1.1\rHost: x\r\n\r\n", HeadLimits{}, cr) == 0);
  CHECK(cr.status == 400);
}

TEST_CASE("parsers set the field path on their Status; nesting prefixes it and the message together") {
  Result<Cluster> c = cluster_from_json(json::parse(R"({"devices":[{"name":"a"},{"name":"b","speed":null}]})"));
  REQUIRE_FALSE(c.is_ok());
  CHECK(c.status().field() == "devices[1].speed");
  CHECK(c.error_message() == "devices[1].speed: expected a number, got null");
  Status nested = c.status().nested_in("cluster");
  CHECK(nested.field() == "cluster.devices[1].speed");
  CHECK(nested.message() == "cluster.devices[1].speed: expected a number, got null");
  CHECK(Status::error("x").with_context("file.json").field() == "file.json");
  CHECK(Status::error("x").with_context("file.json").message() == "file.json: x");
  Result<OptimizeRequest> r = optimize_request_from_json(
      json::parse(R"({"model": "mlp", "cluster": {"devices": [{"name": "a", "speed": 5e-324}]}})"));
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.status().field() == "cluster.devices[0].speed");
  Result<OptimizeRequest> seed = optimize_request_from_json(
      json::parse(R"({"model": "mlp", "cluster": {"devices": [{"name": "a"}]}, "options": {"iterations": null}})"));
  CHECK(seed.status().field() == "options.iterations");
  CHECK(field_error_from(seed.status()).field == "options.iterations");
  CHECK(field_error_from(Status::coded(ErrorCode::too_large, "big")).http_status == 413);
}

TEST_CASE("a JSON body is one value and nothing else: a trailing NUL, a repeated key and bare control bytes are refused") {
  json out;
  FieldError err;
  CHECK(parse_json_body(R"({"a": 1})", 64, out, err));
  CHECK_FALSE(parse_json_body(std::string("{\"a\": 1}\0", 9), 64, out, err));
  CHECK(err.field == "body");
  CHECK_FALSE(parse_json_body(R"({"a": 1} {"b": 2})", 64, out, err));
  CHECK_FALSE(parse_json_body(R"({"a": 1, "a": 2})", 64, out, err));
  CHECK(err.error.find("twice") != std::string::npos);
  CHECK(parse_json_body(R"({"a": {"b": 1}, "b": {"b": 2}})", 64, out, err));  // the same key in different objects
}

TEST_CASE("a result with a zero, infinite or NaN step time fails with the path of the figure") {
  CHECK(check_result_figures(json{{"step_ms", 12.5}, {"baselines", json::array({{{"step_ms", nullptr}}})}}).is_ok());
  Status zero = check_result_figures(json{{"step_ms", 0.0}});
  CHECK_FALSE(zero.is_ok());
  CHECK(zero.field() == "result.step_ms");
  Status inner = check_result_figures(json{{"step_ms", 1.0}, {"baselines", json::array({{{"step_ms", -1.0}}})}});
  CHECK(inner.field() == "result.baselines[0].step_ms");
  CHECK_FALSE(check_result_figures(json{{"comm_fraction", std::nan("")}}).is_ok());
  CHECK(check_result_figures(json{{"timeline", json::array({{{"start_ms", 0.0}}})}}).is_ok());
}
