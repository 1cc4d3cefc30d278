// Tests of the HTTP router as a pure function (no sockets): every route, the
// error shapes, auth, 404/405 and path tricks.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "common/base64.h"
#include "fake_job.h"
#include "server_process.h"
#include "placer/policy.h"
#include "service/http/router.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;
namespace http = boost::beast::http;

namespace {

const char* kCluster = R"({"devices": [{"name": "a"}, {"name": "b", "speed": 0.5}]})";

struct Fixture {
  std::unique_ptr<JobStore> store;
  std::unique_ptr<JobRunner> runner;
  AppState app;
  explicit Fixture(bool start = false, int queue_size = 64) {
    auto dir = testing::temp_dir("router");
    store = std::move(JobStore::open(dir + "/jobs.db").value());
    JobsOptions opts;
    opts.queue_size = queue_size;
    runner = std::make_unique<JobRunner>(*store, testing::make_fake_job({2, 5, false}), opts);
    if (start) runner->start();
    app.store = store.get();
    app.runner = runner.get();
    app.web_dir = std::string(TAPP_SOURCE_DIR) + "/web";
    std::ifstream in(std::string(TAPP_SOURCE_DIR) + "/schemas/openapi.json");
    app.openapi_json.assign(std::istreambuf_iterator<char>(in), {});
  }
  HttpResponse call(http::verb verb, const std::string& target, const std::string& body = {},
                    const std::string& token = {}, const std::string& content_type = "application/json") {
    HttpRequest req{verb, target, 11};
    if (!body.empty()) {
      req.body() = body;
      req.set(http::field::content_type, content_type);
      req.prepare_payload();
    }
    if (!token.empty()) req.set(http::field::authorization, "Bearer " + token);
    return handle_request(app, req);
  }
  HttpResponse post(const std::string& body, const std::string& token = {}) {
    return call(http::verb::post, "/placements", body, token);
  }
};

json body_of(const HttpResponse& res) { return json::parse(res.body()); }

// Asserts a 4xx/5xx JSON error naming `field`.
void check_error(const HttpResponse& res, int status, const std::string& field) {
  CHECK(res.result_int() == status);
  json j = json::parse(res.body(), nullptr, false);
  REQUIRE(j.is_object());
  CHECK(j["error"].is_string());
  CHECK_MESSAGE(j["field"] == field, res.body());
  CHECK(res[http::field::content_type] == "application/json");
}

std::string valid_body(const std::string& model = "\"alexnet\"", const std::string& options = "{\"iterations\": 5}") {
  return std::string("{\"model\": ") + model + ", \"cluster\": " + kCluster + ", \"options\": " + options + "}";
}

}  // namespace

TEST_CASE("healthz answers ok with queue figures") {
  Fixture f;
  auto res = f.call(http::verb::get, "/healthz");
  CHECK(res.result_int() == 200);
  CHECK(body_of(res)["ok"] == true);
  CHECK(body_of(res)["queue_capacity"] == 64);
}

TEST_CASE("a valid submission is accepted with its id and url, and reads back queued") {
  Fixture f;
  auto res = f.post(valid_body());
  REQUIRE(res.result_int() == 202);
  json j = body_of(res);
  std::string id = j["id"];
  CHECK(j["url"] == "/placements/" + id);
  CHECK(res[http::field::location] == "/placements/" + id);
  auto got = f.call(http::verb::get, "/placements/" + id);
  REQUIRE(got.result_int() == 200);
  json g = body_of(got);
  CHECK(g["status"] == "queued");
  CHECK(g["model"] == "alexnet");
  CHECK(g["request"]["options"]["iterations"] == 5);
  CHECK(g["events_url"] == "/placements/" + id + "/events");
}

TEST_CASE("a job submitted through the router runs to success and shows its result and events") {
  Fixture f(true);
  std::string id = body_of(f.post(valid_body()))["id"];
  json g;
  for (int i = 0; i < 2000; ++i) {
    g = body_of(f.call(http::verb::get, "/placements/" + id));
    if (g["status"] == "succeeded") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(g["status"] == "succeeded");
  CHECK(g["result"]["placement"]["groups"] == json::array({"a", "b"}));
  CHECK(g["progress"]["iteration"] == 5);
  json ev = body_of(f.call(http::verb::get, "/placements/" + id + "/events"));
  CHECK(ev["events"].size() >= 3);
  CHECK(ev["events"][0]["seq"] == 1);
  json later = body_of(f.call(http::verb::get, "/placements/" + id + "/events?after=1&limit=1"));
  REQUIRE(later["events"].size() == 1);
  CHECK(later["events"][0]["seq"] == 2);
}

TEST_CASE("bad bodies are rejected with 4xx naming the field") {
  Fixture f;
  check_error(f.post("{\"model\": \"alexnet\", "), 400, "body");
  check_error(f.post("[1, 2]"), 400, "body");
  check_error(f.post("\"just a string\""), 400, "body");
  check_error(f.post("{\"cluster\": " + std::string(kCluster) + "}"), 400, "model");
  check_error(f.post("{\"model\": \"alexnet\"}"), 400, "cluster");
  check_error(f.post(valid_body("42")), 400, "model");
  check_error(f.post(valid_body("\"no_such_model\"")), 400, "model");
  check_error(f.post(valid_body("\"/etc/passwd\"")), 400, "model");
  check_error(f.post(valid_body("\"../models/x.json\"")), 400, "model");
  check_error(f.post(valid_body("\"alexnet\"", "{\"iterations\": \"many\"}")), 400, "options.iterations");
  check_error(f.post(valid_body("\"alexnet\"", "{\"iterations\": -1}")), 400, "options.iterations");
  check_error(f.post(valid_body("\"alexnet\"", "{\"iterations\": 1e300}")), 400, "options.iterations");
  check_error(f.post(valid_body("\"alexnet\"", "{\"evaluator\": \"guess\"}")), 400, "options.evaluator");
  check_error(f.post(valid_body("\"alexnet\"", "{\"batch_size\": 0}")), 400, "options.batch_size");
  check_error(f.post(valid_body("\"alexnet\"", "{\"colour\": 1}")), 400, "options.colour");
  check_error(f.post(valid_body("\"alexnet\"", "[]")), 400, "options");
  check_error(f.post("{\"model\": \"alexnet\", \"cluster\": {\"devices\": [{\"name\": \"a\", \"speed\": 2000}]}}"), 400,
              "cluster.devices[0].speed");
  check_error(f.post("{\"model\": \"alexnet\", \"cluster\": {\"devices\": []}}"), 400, "cluster.devices");
  check_error(f.post(valid_body() .substr(0, valid_body().size() - 1) + ", \"priority\": 1}"), 400, "priority");
  CHECK(f.store->list("", 10, 0)->total == 0);
}

TEST_CASE("an inline layer graph is checked before it is queued: unknown ops are named") {
  Fixture f;
  std::string good = R"({"name": "tiny", "input_shape": [16], "layers": [
      {"name": "fc1", "op": "linear", "inputs": [], "attrs": {"out": 8}},
      {"name": "fc2", "op": "linear", "inputs": ["fc1"], "attrs": {"out": 4}}]})";
  auto ok = f.post(valid_body(good));
  CHECK(ok.result_int() == 202);
  std::string bad = R"({"name": "tiny", "input_shape": [16], "layers": [
      {"name": "fc1", "op": "teleport", "inputs": []}]})";
  auto res = f.post(valid_body(bad));
  CHECK(res.result_int() == 400);
  CHECK(body_of(res)["field"].get<std::string>().rfind("model", 0) == 0);
  CHECK(body_of(res)["error"].get<std::string>().find("teleport") != std::string::npos);
}

TEST_CASE("JSON nested deeper than the limit is refused without parsing it") {
  Fixture f;
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  check_error(f.post(deep), 400, "body");
  std::string deep_obj;
  for (int i = 0; i < 70; ++i) deep_obj += "{\"a\":";
  deep_obj += "1" + std::string(70, '}');
  check_error(f.post(deep_obj), 400, "body");
  CHECK(json_nesting_depth("{\"a\": \"[[[[[[\", \"b\": [[1]]}") == 3);
}

TEST_CASE("oversized bodies get 413 and non-JSON content types 415") {
  Fixture f;
  f.app.max_body_bytes = 1000;
  check_error(f.post(std::string(2000, ' ')), 413, "body");
  check_error(f.call(http::verb::post, "/placements", "model=alexnet", "", "application/x-www-form-urlencoded"), 415,
              "Content-Type");
}

TEST_CASE("remote workers are refused unless their host is allowed") {
  Fixture f;
  std::string body = R"({"model": "alexnet", "cluster": {"devices": [{"name": "a"}, {"name": "r", "where": "10.0.0.7:7000"}]}})";
  check_error(f.post(body), 403, "cluster.devices[1].where");
  f.app.limits.allowed_remote_hosts = {"10.0.0.7"};
  CHECK(f.post(body).result_int() == 202);
}

TEST_CASE("a device's layer library is a file on the server: a request may not name it") {
  Fixture f;
  std::string body = R"({"model": "alexnet", "cluster": {"devices": [{"name": "a"}, {"name": "b", "costs": {"library": "/etc/passwd"}}]}})";
  check_error(f.post(body), 403, "cluster.devices[1].costs.library");
  std::string fast = R"({"model": "alexnet", "cluster": {"devices": [{"name": "a"}, {"name": "b", "speed": 4}]}})";
  CHECK(f.post(fast).result_int() == 202);  // a device faster than this host, planned by simulation
}

TEST_CASE("an inline layer graph may not name a TorchScript file on the server") {
  Fixture f;
  const std::string layers =
      R"([{"name": "t", "op": "torchscript", "attrs": {"file": "/etc/shadow", "hash": "0123456789abcdef",
           "nodes": [0, 1], "output_shape": [10]}}, {"name": "fc", "op": "linear", "inputs": ["t"], "attrs": {"out": 2}}])";
  const std::string body = R"({"model": {"name": "m", "input_shape": [10], "layers": )" + layers +
                           R"(}, "cluster": {"devices": [{"name": "a"}]}})";
  check_error(f.post(body), 403, "model.layers[0].attrs.file");
  const std::string plain = R"({"model": {"name": "m", "input_shape": [10], "layers": [{"name": "fc", "op": "linear",
      "attrs": {"out": 2}}]}, "cluster": {"devices": [{"name": "a"}]}})";
  CHECK(f.post(plain).result_int() == 202);
}

TEST_CASE("an uploaded TorchScript file is stored with the job, never passed as a path") {
  Fixture f;
  std::string body = std::string(R"({"model_file": {"name": "net.pt", "base64": ")") + base64_encode("PK\x03\x04 torchscript") +
                     R"("}, "cluster": )" + kCluster + "}";
  auto res = f.post(body);
  REQUIRE(res.result_int() == 202);
  std::string id = body_of(res)["id"];
  CHECK(**f.store->upload(id) == "PK\x03\x04 torchscript");
  json g = body_of(f.call(http::verb::get, "/placements/" + id));
  CHECK(g["model"] == "net.pt");
  CHECK(g["request"]["model_file"]["bytes"] == 16);
  CHECK_FALSE(g["request"]["model_file"].contains("base64"));
  check_error(f.post(R"({"model_file": {"name": "../x.pt", "base64": "AAAA"}, "cluster": )" + std::string(kCluster) + "}"),
              400, "model_file.name");
  check_error(f.post(R"({"model_file": {"name": "x.pt", "base64": "@@@@"}, "cluster": )" + std::string(kCluster) + "}"),
              400, "model_file.base64");
  check_error(f.post(R"({"model": "alexnet", "model_file": {"name": "x.pt", "base64": "AAAA"}, "cluster": )" +
                     std::string(kCluster) + "}"),
              400, "model_file");
}

TEST_CASE("listing filters by status and pages, with bad parameters named") {
  Fixture f;
  for (int i = 0; i < 3; ++i) REQUIRE(f.post(valid_body()).result_int() == 202);
  json all = body_of(f.call(http::verb::get, "/placements"));
  CHECK(all["total"] == 3);
  CHECK(all["jobs"].size() == 3);
  CHECK_FALSE(all["jobs"][0].contains("request"));
  json page = body_of(f.call(http::verb::get, "/placements?limit=2&offset=2"));
  CHECK(page["jobs"].size() == 1);
  json queued = body_of(f.call(http::verb::get, "/placements?status=queued"));
  CHECK(queued["total"] == 3);
  json done = body_of(f.call(http::verb::get, "/placements?status=succeeded"));
  CHECK(done["total"] == 0);
  check_error(f.call(http::verb::get, "/placements?status=sleeping"), 400, "status");
  check_error(f.call(http::verb::get, "/placements?limit=0"), 400, "limit");
  check_error(f.call(http::verb::get, "/placements?limit=abc"), 400, "limit");
  check_error(f.call(http::verb::get, "/placements?offset=-1"), 400, "offset");
  check_error(f.call(http::verb::get, "/placements?limit=99999999999999999999999"), 400, "limit");
}

TEST_CASE("cancel: a queued job is cancelled once, then 409; unknown jobs 404") {
  Fixture f;
  std::string id = body_of(f.post(valid_body()))["id"];
  auto res = f.call(http::verb::delete_, "/placements/" + id);
  CHECK(res.result_int() == 200);
  CHECK(body_of(res)["status"] == "cancelled");
  check_error(f.call(http::verb::delete_, "/placements/" + id), 409, "id");
  check_error(f.call(http::verb::delete_, "/placements/jnope"), 404, "id");
  check_error(f.call(http::verb::get, "/placements/jnope"), 404, "id");
  check_error(f.call(http::verb::get, "/placements/jnope/events"), 404, "id");
  check_error(f.call(http::verb::get, "/placements/" + id + "/other"), 404, "path");
  check_error(f.call(http::verb::get, "/placements/" + id + "/events/x"), 404, "path");
}

TEST_CASE("a full queue answers 503 with Retry-After") {
  Fixture f(false, 1);
  CHECK(f.post(valid_body()).result_int() == 202);
  auto res = f.post(valid_body());
  CHECK(res.result_int() == 503);
  CHECK(res[http::field::retry_after] == "5");
  CHECK(body_of(res)["error"].get<std::string>().find("queue is full") != std::string::npos);
}

TEST_CASE("wrong methods get 405 with Allow, unknown paths 404") {
  Fixture f;
  auto res = f.call(http::verb::put, "/placements");
  check_error(res, 405, "method");
  CHECK(res[http::field::allow] == "GET, POST");
  check_error(f.call(http::verb::post, "/placements/j123"), 405, "method");
  check_error(f.call(http::verb::patch, "/placements/j123/events"), 405, "method");
  check_error(f.call(http::verb::post, "/healthz"), 405, "method");
  check_error(f.call(http::verb::delete_, "/"), 405, "method");
  check_error(f.call(http::verb::get, "/nothing-here"), 404, "path");
  check_error(f.call(http::verb::get, "/placements/a/b/c/d"), 404, "path");
  check_error(f.call(http::verb::get, "/placements/bad%20id"), 404, "id");
}

TEST_CASE("path tricks never leave the web directory") {
  Fixture f;
  for (const char* target : {"/../../etc/passwd", "/%2e%2e/%2e%2e/etc/passwd", "/web/../../../etc/passwd",
                             "/./index.html", "/..%2f..%2fetc%2fpasswd", "/%2E%2E/CMakeLists.txt"})
    check_error(f.call(http::verb::get, target), 400, "path");
  for (const char* target : {"/.git/config", "/%00index.html", "/index.html%00.js", "/\\..\\etc\\passwd",
                             "/etc/passwd", "//etc/passwd", "/app.js/", "/%zz", "relative", "/~root"}) {
    auto res = f.call(http::verb::get, target);
    CHECK_MESSAGE((res.result_int() == 400 || res.result_int() == 404), target);
    CHECK(res.body().find("root:") == std::string::npos);
  }
}

TEST_CASE("the page and its assets are served with content types and a strict CSP") {
  Fixture f;
  auto index = f.call(http::verb::get, "/");
  REQUIRE(index.result_int() == 200);
  CHECK(index[http::field::content_type] == "text/html; charset=utf-8");
  CHECK(index.body().find("app.js") != std::string::npos);
  CHECK(std::string(index["Content-Security-Policy"]).find("default-src 'self'") != std::string::npos);
  CHECK(f.call(http::verb::get, "/app.js")[http::field::content_type] == "application/javascript; charset=utf-8");
  CHECK(f.call(http::verb::get, "/style.css")[http::field::content_type] == "text/css; charset=utf-8");
  // Every asset the page references is local.
  CHECK(index.body().find("http://") == std::string::npos);
  CHECK(index.body().find("https://") == std::string::npos);
}

TEST_CASE("the OpenAPI document and the zoo are served") {
  Fixture f;
  auto res = f.call(http::verb::get, "/openapi.json");
  REQUIRE(res.result_int() == 200);
  json doc = body_of(res);
  CHECK(doc["openapi"] == "3.1.0");
  CHECK(doc["paths"].contains("/placements/{id}/events"));
  json models = body_of(f.call(http::verb::get, "/models"));
  CHECK(std::find(models["models"].begin(), models["models"].end(), "alexnet") != models["models"].end());
}

TEST_CASE("with a token, the API needs the bearer token but healthz and the page do not") {
  Fixture f;
  f.app.token = "s3cret";
  auto res = f.call(http::verb::get, "/placements");
  check_error(res, 401, "Authorization");
  CHECK(res[http::field::www_authenticate] == "Bearer");
  check_error(f.call(http::verb::get, "/placements", "", "wrong"), 401, "Authorization");
  check_error(f.call(http::verb::get, "/placements", "", "s3cre"), 401, "Authorization");
  check_error(f.call(http::verb::get, "/placements", "", "s3cret0"), 401, "Authorization");
  check_error(f.post(valid_body()), 401, "Authorization");
  check_error(f.call(http::verb::get, "/openapi.json"), 401, "Authorization");
  CHECK(f.call(http::verb::get, "/placements", "", "s3cret").result_int() == 200);
  CHECK(f.post(valid_body(), "s3cret").result_int() == 202);
  CHECK(f.call(http::verb::get, "/healthz").result_int() == 200);
  CHECK(f.call(http::verb::get, "/").result_int() == 200);
  CHECK(f.call(http::verb::get, "/app.js").result_int() == 200);
}

TEST_CASE("percent-decoding refuses malformed escapes and NUL") {
  std::string out;
  CHECK(percent_decode("/a%20b", out));
  CHECK(out == "/a b");
  CHECK_FALSE(percent_decode("/a%2", out));
  CHECK_FALSE(percent_decode("/a%g0", out));
  CHECK_FALSE(percent_decode("/a%00", out));
}

TEST_CASE("an error's field and HTTP status come from its Status, never from its message") {
  FieldError speed = field_error_from(Status::field_error("cluster.devices[1].speed", "must be in (0, 1]"));
  CHECK(speed.field == "cluster.devices[1].speed");
  CHECK(speed.http_status == 400);
  FieldError looks_like_a_field = field_error_from(Status::error("cluster.devices[1].speed: not a field path"));
  CHECK(looks_like_a_field.field == "body");  // a message is not parsed for a field
  CHECK(field_error_from(Status::coded(ErrorCode::too_large, "too big")).http_status == 413);
  CHECK(field_error_from(Status::field_error("cluster.devices[0].where", "not allowed", ErrorCode::forbidden))
            .http_status == 403);
}

TEST_CASE("the server accepts the job schema's valid examples and rejects its invalid ones") {
  Fixture f;
  namespace fs = std::filesystem;
  std::string root = std::string(TAPP_SOURCE_DIR) + "/schemas/examples/job/";
  int valid = 0, invalid = 0;
  for (const auto& e : fs::directory_iterator(root + "valid")) {
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), {});
    auto res = f.post(text);
    CHECK_MESSAGE(res.result_int() == 202, e.path().string() << ": " << res.body());
    ++valid;
  }
  for (const auto& e : fs::directory_iterator(root + "invalid")) {
    std::ifstream in(e.path());
    std::string text((std::istreambuf_iterator<char>(in)), {});
    auto res = f.post(text);
    CHECK_MESSAGE(res.result_int() >= 400, e.path().string());
    CHECK_MESSAGE(res.result_int() < 500, e.path().string());
    ++invalid;
  }
  CHECK(valid >= 3);
  CHECK(invalid >= 5);
}

TEST_CASE("the job schema is served next to the OpenAPI document") {
  Fixture f;
  std::ifstream in(std::string(TAPP_SOURCE_DIR) + "/schemas/job.schema.json");
  f.app.job_schema_json.assign(std::istreambuf_iterator<char>(in), {});
  auto res = f.call(http::verb::get, "/schemas/job.schema.json");
  REQUIRE(res.result_int() == 200);
  CHECK(body_of(res)["$defs"].contains("result"));
  check_error(f.call(http::verb::get, "/schemas/other.json"), 404, "path");
}

TEST_CASE("a job's memory limit is accepted in the options and a bad one is refused naming the field") {
  Fixture f;
  auto ok = f.post(std::string(R"({"model": "alexnet", "cluster": )") + kCluster + R"(, "options": {"memory_limit_mib": 2048}})");
  CHECK(ok.result_int() == 202);
  check_error(f.post(std::string(R"({"model": "alexnet", "cluster": )") + kCluster + R"(, "options": {"memory_limit_mib": 16}})"),
              400, "options.memory_limit_mib");
  check_error(f.post(std::string(R"({"model": "alexnet", "cluster": )") + kCluster + R"(, "options": {"memory_limit_mib": "big"}})"),
              400, "options.memory_limit_mib");
}

TEST_CASE("cross-origin writes are refused unless the origin is named; the page's own origin is not cross-origin") {
  Fixture f;
  auto with_origin = [&](http::verb verb, const std::string& target, const std::string& origin, const std::string& body) {
    HttpRequest req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1:8080");
    req.set(http::field::origin, origin);
    if (!body.empty()) {
      req.body() = body;
      req.set(http::field::content_type, "application/json");
      req.prepare_payload();
    }
    return handle_request(f.app, req);
  };
  check_error(with_origin(http::verb::post, "/placements", "http://evil.example", valid_body()), 403, "Origin");
  check_error(with_origin(http::verb::options, "/placements", "http://evil.example", ""), 403, "Origin");
  auto read = with_origin(http::verb::get, "/placements", "http://evil.example", "");
  CHECK(read.result_int() == 200);
  CHECK(read.find(http::field::access_control_allow_origin) == read.end());  // the browser will not show it
  CHECK(with_origin(http::verb::post, "/placements", "http://127.0.0.1:8080", valid_body()).result_int() == 202);
  f.app.cors_origins = {"http://dash.example:3000"};
  auto pre = with_origin(http::verb::options, "/placements", "http://dash.example:3000", "");
  CHECK(pre.result_int() == 204);
  CHECK(pre[http::field::access_control_allow_origin] == "http://dash.example:3000");
  auto ok = with_origin(http::verb::post, "/placements", "http://dash.example:3000", valid_body());
  CHECK(ok.result_int() == 202);
  CHECK(ok[http::field::access_control_allow_origin] == "http://dash.example:3000");
}

TEST_CASE("a POST needs application/json, and a repeated Authorization header is refused even when one is right") {
  Fixture f;
  check_error(f.call(http::verb::post, "/placements", valid_body(), "", "text/plain"), 415, "Content-Type");
  CHECK(f.call(http::verb::post, "/placements", valid_body(), "", "application/json; charset=utf-8").result_int() == 202);
  check_error(f.call(http::verb::post, "/placements", valid_body(), "", "application/json; charset=latin1"), 415,
              "Content-Type");
  HttpRequest none{http::verb::post, "/placements", 11};
  none.body() = valid_body();
  none.prepare_payload();
  check_error(handle_request(f.app, none), 415, "Content-Type");
  f.app.token = "s3cret";
  HttpRequest twice{http::verb::get, "/placements", 11};
  twice.insert(http::field::authorization, "Bearer s3cret");
  twice.insert(http::field::authorization, "Bearer wrong");
  check_error(handle_request(f.app, twice), 400, "Authorization");
  HttpRequest lower{http::verb::get, "/placements", 11};
  lower.set(http::field::authorization, "bearer s3cret");
  CHECK(handle_request(f.app, lower).result_int() == 200);
}

TEST_CASE("a model larger than the cluster could hold is refused at submit time with its computed size") {
  Fixture f;
  auto res = f.post(R"({"model": "alexnet", "cluster": {"devices": [{"name": "a", "memory_mb": 100}, {"name": "b", "memory_mb": 50}]}})");
  check_error(res, 400, "model");
  CHECK(body_of(res)["error"].get<std::string>().find("733,210,080 bytes") != std::string::npos);
  CHECK(f.post(R"({"model": "alexnet", "cluster": {"devices": [{"name": "a", "memory_mb": 700}]}})").result_int() == 202);
  // Adam keeps two more copies where SGD's momentum keeps one: 16 bytes a parameter, over 700 MiB.
  auto adam = f.post(
      R"({"model": "alexnet", "options": {"optimizer": "adam"}, "cluster": {"devices": [{"name": "a", "memory_mb": 700}]}})");
  check_error(adam, 400, "model");
  CHECK(body_of(adam)["error"].get<std::string>().find("977,613,440 bytes") != std::string::npos);
  CHECK(body_of(adam)["error"].get<std::string>().find("adam state: 16 bytes a parameter") != std::string::npos);
  f.app.limits.max_model_bytes = 1000;
  check_error(f.post(valid_body()), 400, "model");
}

TEST_CASE("POST /policies stores a trained policy file after loading it; GET /policies lists them, newest first") {
  Fixture f;
  auto dir = testing::temp_dir("router-policy");
  const std::string path = dir + "/p.pt";
  REQUIRE(save_policy_networks(*new_policy_networks(8, 0.005, 1), path, json{{"models", {"mlp"}}}).is_ok());
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});

  auto res = f.call(http::verb::post, "/policies", bytes, {}, "application/octet-stream");
  REQUIRE(res.result_int() == 201);
  json stored = body_of(res);
  CHECK(stored["feature_version"] == kPolicyFeatureVersion);
  CHECK(stored["trained_on"]["models"][0] == "mlp");
  CHECK(stored["bytes"] == bytes.size());
  REQUIRE(f.call(http::verb::post, "/policies", bytes, {}, "application/octet-stream").result_int() == 201);

  json list = body_of(f.call(http::verb::get, "/policies"));
  REQUIRE(list["policies"].size() == 2);
  CHECK(list["policies"][0]["id"].get<int64_t>() > list["policies"][1]["id"].get<int64_t>());
  CHECK(list["feature_version"] == kPolicyFeatureVersion);
  auto latest = f.store->latest_policy(kPolicyFeatureVersion);
  REQUIRE(latest.is_ok());
  REQUIRE(latest->has_value());
  CHECK((*latest)->bytes == bytes);
  CHECK((*latest)->id == list["policies"][0]["id"].get<int64_t>());

  // Not a policy, half a policy, nothing: 400 naming the body; nothing stored.
  check_error(f.call(http::verb::post, "/policies", "garbage", {}, "application/octet-stream"), 400, "body");
  check_error(f.call(http::verb::post, "/policies", bytes.substr(0, bytes.size() / 2), {}, "application/octet-stream"),
              400, "body");
  // Only as application/octet-stream: text/plain is what a page can send cross-origin
  // without asking, and a policy is not JSON.
  check_error(f.call(http::verb::post, "/policies"), 415, "Content-Type");
  check_error(f.call(http::verb::post, "/policies", bytes, {}, "text/plain"), 415, "Content-Type");
  check_error(f.call(http::verb::post, "/policies", bytes, {}, "application/json"), 415, "Content-Type");
  CHECK(body_of(f.call(http::verb::get, "/policies"))["policies"].size() == 2);
  check_error(f.call(http::verb::delete_, "/policies"), 405, "method");
  check_error(f.call(http::verb::get, "/policies/1"), 404, "path");
  CHECK(body_of(f.call(http::verb::get, "/openapi.json"))["paths"].contains("/policies"));
}

TEST_CASE("options.policy is latest or fresh; anything else is refused naming it") {
  Fixture f;
  CHECK(f.post(valid_body("\"alexnet\"", "{\"iterations\": 5, \"policy\": \"fresh\"}")).result_int() == 202);
  CHECK(f.post(valid_body("\"alexnet\"", "{\"iterations\": 5, \"policy\": \"latest\"}")).result_int() == 202);
  check_error(f.post(valid_body("\"alexnet\"", "{\"policy\": \"/etc/passwd\"}")), 400, "options.policy");
  check_error(f.post(valid_body("\"alexnet\"", "{\"policy\": 3}")), 400, "options.policy");
}
