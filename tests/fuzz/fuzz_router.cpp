// tests/fuzz/fuzz_router.cpp — fuzzes the HTTP API's request handler (service/http/router.h).
//
// Input: the raw bytes of one HTTP/1.x request ("POST /placements HTTP/1.1\r\n
// Authorization: Bearer fuzz-token\r\n...\r\n\r\nbody"). Boost.Beast's parser
// reads it with the server's limits, as a session does; what it refuses never
// reaches the router and is skipped. A parsed request goes to handle_request,
// the pure function the server calls, over a real job store (SQLite in a temp
// directory, kept for the whole run; the runner is never started, so jobs stay
// queued until cancelled) and the page's files from web/.
// Properties: no crash and no undefined behaviour; every answer has a status in
// [200, 600) and is never a 500 (handle_request turns an exception escaping a
// parser into a 500: that is a bug here); every error answer is JSON; an
// accepted job reads back (GET its url) and cancels (DELETE it), so the
// queue never fills.
// Seeds: tests/fuzz/seeds/router/*.http (one per route).
#include <boost/beast/core/flat_buffer.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>

#include "fuzz_support.h"
#include "service/http/router.h"

using namespace tapp;
using namespace tapp::service;
namespace http = boost::beast::http;

namespace {

constexpr size_t kHeaderLimitBytes = 16 * 1024;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The server's shared state, built once: a store in a fresh temp directory
// (removed at exit), a runner that is never started, token "fuzz-token".
struct App {
  std::string dir;
  std::unique_ptr<JobStore> store;
  std::unique_ptr<JobRunner> runner;
  AppState state;

  App() {
    char tmpl[] = "/tmp/tapp-fuzz-router-XXXXXX";
    FUZZ_CHECK(mkdtemp(tmpl) != nullptr, "cannot make a temp directory");
    dir = tmpl;
    auto opened = JobStore::open(dir + "/jobs.db");
    FUZZ_CHECK(opened, "cannot open the job store in " + dir);
    store = std::move(*opened);
    JobsOptions options;
    options.queue_size = 8;
    options.total_cores = 2;
    JobFn never_run = [](const JobInput&, const ProgressFn&, const std::atomic<bool>&) -> Result<nlohmann::json> {
      return Status::error("fuzz: jobs are not run");
    };
    runner = std::make_unique<JobRunner>(*store, never_run, options);
    state.store = store.get();
    state.runner = runner.get();
    state.token = "fuzz-token";
    state.web_dir = std::string(TAPP_SOURCE_DIR) + "/web";
    state.openapi_json = read_text(std::string(TAPP_SOURCE_DIR) + "/schemas/openapi.json");
    state.job_schema_json = read_text(std::string(TAPP_SOURCE_DIR) + "/schemas/job.schema.json");
    state.max_body_bytes = 64 * 1024;
    state.limits.max_upload_bytes = 32 * 1024;
  }
  ~App() {
    runner.reset();
    store.reset();
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

App& app() {
  static App a;
  return a;
}

// The request in `data` as the server's parser reads it; false when it refuses it.
bool parse_request(const uint8_t* data, size_t size, size_t body_limit, HttpRequest& out) {
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  parser.body_limit(body_limit);
  parser.header_limit(static_cast<std::uint32_t>(kHeaderLimitBytes));
  boost::system::error_code ec;
  size_t used = 0;
  while (!parser.is_done() && used < size) {
    size_t n = parser.put(boost::asio::buffer(data + used, size - used), ec);
    if (ec == http::error::need_more) break;
    if (ec || n == 0) return false;
    used += n;
  }
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec || !parser.is_done()) return false;
  }
  out = parser.release();
  return true;
}

// An accepted job reads back and cancels (which also keeps the queue of 8 from filling up).
void check_accepted_job_reads_back_and_cancels(App& a, const HttpResponse& accepted) {
  nlohmann::json body = nlohmann::json::parse(accepted.body(), nullptr, false);
  FUZZ_CHECK(body.is_object() && body.contains("url") && body["url"].is_string(), "a 202 without a url: " + accepted.body());
  const std::string url = body["url"];
  for (http::verb verb : {http::verb::get, http::verb::delete_}) {
    HttpRequest follow{verb, url, 11};
    follow.set(http::field::authorization, "Bearer " + a.state.token);
    HttpResponse res = handle_request(a.state, follow);
    FUZZ_CHECK(res.result_int() == 200, std::string(http::to_string(verb)) + " " + url + " answered " +
                                            std::to_string(res.result_int()) + ": " + res.body());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  App& a = app();
  HttpRequest req;
  if (!parse_request(data, size, a.state.max_body_bytes, req)) return 0;
  HttpResponse res = handle_request(a.state, req);
  const int status = res.result_int();
  FUZZ_CHECK(status >= 200 && status < 600, "status " + std::to_string(status));
  FUZZ_CHECK(status != 500, "an internal error: " + res.body());
  if (status >= 400) {
    nlohmann::json body = nlohmann::json::parse(res.body(), nullptr, false);
    FUZZ_CHECK(body.is_object() && body.contains("error"), "an error answer that is not JSON: " + res.body());
  }
  if (status == 202) check_accepted_job_reads_back_and_cancels(a, res);
  return 0;
}
