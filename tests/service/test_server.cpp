// Tests of a real tapp-server process on 127.0.0.1: submit and poll to
// success, cancel, auth and slow clients over sockets, and a restart after
// SIGKILL with nothing lost.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <fstream>
#include <set>
#include <thread>

#include "server_process.h"
#include "service/http_client.h"
#include "service/job_store.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {

const std::string kBody =
    R"({"model": "alexnet_cifar", "cluster": {"devices": [{"name": "a"}, {"name": "b"}]}, "options": {"iterations": 15}})";

ServerUrl url_of(const testing::ServerProcess& p) {
  ServerUrl u;
  u.host = "127.0.0.1";
  u.port = std::to_string(p.port());
  return u;
}

json get_json(const ServerUrl& u, const std::string& target, const std::map<std::string, std::string>& h = {}) {
  Result<HttpReply> r = http_call(u, "GET", target, "", h, 10);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  return json::parse(r->body);
}

std::string submit(const ServerUrl& u, const std::string& body = kBody) {
  Result<HttpReply> r = http_call(u, "POST", "/placements", body, {{"Content-Type", "application/json"}}, 10);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  REQUIRE_MESSAGE(r->status == 202, r->body);
  return json::parse(r->body)["id"];
}

// Polls until the job is final (bounded liveness wait, not a timing assertion).
json wait_final(const ServerUrl& u, const std::string& id, double limit_s = 30) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  json j;
  while (std::chrono::steady_clock::now() < end) {
    j = get_json(u, "/placements/" + id);
    if (is_final_status(j["status"])) return j;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return j;
}

void wait_running(const ServerUrl& u, const std::string& id) {
  for (int i = 0; i < 1000; ++i) {
    json j = get_json(u, "/placements/" + id);
    if (j["status"] == "optimizing" && j["progress"].value("iteration", 0) > 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("job never started optimizing");
}

}  // namespace

TEST_CASE("a real server takes a job, reports progress and returns the result") {
  auto dir = testing::temp_dir("server");
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 10));
  ServerUrl u = url_of(server);
  CHECK(get_json(u, "/healthz")["ok"] == true);
  std::string id = submit(u);
  json done = wait_final(u, id);
  REQUIRE(done["status"] == "succeeded");
  CHECK(done["result"]["placement"]["groups"].size() == 2);
  CHECK(done["result"]["timeline"].size() > 0);
  CHECK(done["progress"]["iteration"] == 15);
  json events = get_json(u, "/placements/" + id + "/events");
  CHECK(events["events"].size() >= 3);
  json list = get_json(u, "/placements?status=succeeded");
  CHECK(list["total"] == 1);
  Result<HttpReply> page = http_call(u, "GET", "/");
  REQUIRE(page.is_ok());
  CHECK(page->status == 200);
  CHECK(page->body.find("<title>TAPP") != std::string::npos);
}

TEST_CASE("cancelling a running job over HTTP stops it and frees the runner") {
  auto dir = testing::temp_dir("server");
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 50));
  ServerUrl u = url_of(server);
  std::string id = submit(u, R"({"model": "alexnet", "cluster": {"devices": [{"name": "a"}]}, "options": {"iterations": 100000}})");
  wait_running(u, id);
  auto t0 = std::chrono::steady_clock::now();
  Result<HttpReply> del = http_call(u, "DELETE", "/placements/" + id);
  REQUIRE(del.is_ok());
  CHECK(del->status == 200);
  CHECK(get_json(u, "/placements/" + id)["status"] == "cancelled");
  // The single runner is free again: a new job completes.
  std::string next = submit(u, R"({"model": "alexnet", "cluster": {"devices": [{"name": "a"}]}, "options": {"iterations": 2}})");
  CHECK(wait_final(u, next)["status"] == "succeeded");
  MESSAGE("cancel answered and the next job finished after "
          << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s");
}

TEST_CASE("after SIGKILL during running jobs a restart loses nothing and re-runs each interrupted job once") {
  auto dir = testing::temp_dir("server");
  std::string db = dir + "/jobs.db";
  std::vector<std::string> ids;
  std::string finished;
  {
    testing::ServerProcess server;
    REQUIRE(server.start_fake(db, 30, {"--jobs", "2"}));
    ServerUrl u = url_of(server);
    finished = submit(u, R"({"model": "mlp", "cluster": {"devices": [{"name": "a"}]}, "options": {"iterations": 1}})");
    REQUIRE(wait_final(u, finished)["status"] == "succeeded");
    const std::string long_job =
        R"({"model": "alexnet_cifar", "cluster": {"devices": [{"name": "a"}, {"name": "b"}]}, "options": {"iterations": 200}})";
    for (int i = 0; i < 5; ++i) ids.push_back(submit(u, long_job));  // 2 run (6 s each), 3 wait
    wait_running(u, ids[0]);
    wait_running(u, ids[1]);
    server.kill_hard();
  }
  {
    // Inspect the file as the crash left it.
    auto store = std::move(JobStore::open(db).value());
    CHECK(*store->integrity_check() == "ok");
    CHECK(store->list("", 100, 0)->total == 6);
    CHECK(is_running_status((*store->get(ids[0], false))->status));
  }
  testing::ServerProcess server;
  REQUIRE(server.start_fake(db, 5, {"--jobs", "2"}));
  ServerUrl u = url_of(server);
  for (const std::string& id : ids) {
    json j = wait_final(u, id);
    CHECK(j["status"] == "succeeded");
    CHECK(j["restarts"] == (id == ids[0] || id == ids[1] ? 1 : 0));
  }
  json all = get_json(u, "/placements?limit=100");
  CHECK(all["total"] == 6);
  std::set<std::string> seen;
  for (const json& j : all["jobs"]) seen.insert(j["id"].get<std::string>());
  CHECK(seen.size() == 6);
  CHECK(get_json(u, "/placements/" + finished)["restarts"] == 0);
  // Each interrupted job ran to completion exactly once more: one "requeued" marker, then one run's events.
  json ev = get_json(u, "/placements/" + ids[0] + "/events");
  int requeued = 0, done = 0;
  for (const json& e : ev["events"]) {
    if (e.value("phase", "") == "requeued") ++requeued;
    if (e.value("phase", "") == "done") ++done;
  }
  CHECK(requeued == 1);
  CHECK(done == 1);
  server.stop();
  auto store = std::move(JobStore::open(db).value());
  CHECK(*store->integrity_check() == "ok");
  CHECK(*store->journal_mode() == "wal");
}

TEST_CASE("with --token-file the API needs the bearer token over the wire") {
  auto dir = testing::temp_dir("server");
  { std::ofstream(dir + "/token") << "tok-123\n"; }
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 40, {"--token-file", dir + "/token"}));
  ServerUrl u = url_of(server);
  CHECK(http_call(u, "GET", "/healthz")->status == 200);
  CHECK(http_call(u, "GET", "/placements")->status == 401);
  CHECK(http_call(u, "GET", "/placements", "", {{"Authorization", "Bearer tok-123"}})->status == 200);
}

TEST_CASE("a slow client is cut off while the server keeps answering others") {
  auto dir = testing::temp_dir("server");
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 40, {"--read-timeout-s", "1"}));
  ServerUrl u = url_of(server);
  std::string got;
  std::thread slow([&] {
    // Half a request line, then silence: the server must close the connection.
    Result<std::string> r = raw_exchange("127.0.0.1", server.port(), "GET /healthz HT", 10);
    got = r.is_ok() ? *r : "error: " + r.error_message();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(http_call(u, "GET", "/healthz")->status == 200);
  slow.join();
  CHECK(got.empty());  // closed without an answer (not left hanging for the client's 10 s)
  CHECK(server.alive());
}

namespace {
// Runs a command, returns its exit code and stdout.
int run(const std::string& cmd, std::string& out) {
  out.clear();
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
}  // namespace

TEST_CASE("a --server URL other than http://host[:port][/path] is refused naming the scheme") {
  Result<ServerUrl> plain = parse_server_url("http://127.0.0.1:8080/tapp/");
  REQUIRE(plain.is_ok());
  CHECK(plain->host == "127.0.0.1");
  CHECK(plain->port == "8080");
  CHECK(plain->base_path == "/tapp");
  Result<ServerUrl> bare = parse_server_url("localhost");
  REQUIRE(bare.is_ok());
  CHECK(bare->port == "80");
  Result<ServerUrl> typo = parse_server_url("htp://127.0.0.1:8080");
  REQUIRE_FALSE(typo.is_ok());
  CHECK(typo.error_message().find("unknown scheme \"htp\"") != std::string::npos);
  CHECK_FALSE(parse_server_url("https://127.0.0.1:8080").is_ok());
  CHECK_FALSE(parse_server_url("http://").is_ok());
}

TEST_CASE("tapp-cli optimize --server follows a job to its result and tapp-cli jobs lists it") {
  auto dir = testing::temp_dir("server");
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 5));
  std::string cli = std::string(TAPP_BIN_DIR) + "/tapp-cli";
  std::string url = "http://127.0.0.1:" + std::to_string(server.port());
  std::string out;
  int rc = run(cli + " optimize mlp --devices " + TAPP_SOURCE_DIR + "/examples/cluster_2cpu.json --iterations 7 --server " +
                   url + " --json 2>/dev/null",
               out);
  CHECK(rc == 0);
  json result = json::parse(out, nullptr, false);
  REQUIRE(result.is_object());
  CHECK(result["placement"]["groups"].size() == 2);
  rc = run(cli + " jobs --server " + url + " --status succeeded --json", out);
  CHECK(rc == 0);
  json page = json::parse(out, nullptr, false);
  REQUIRE(page.is_object());
  CHECK(page["total"] == 1);
  CHECK(page["jobs"][0]["model"] == "mlp");
  rc = run(cli + " jobs --server " + url, out);
  CHECK(rc == 0);
  CHECK(out.find("succeeded") != std::string::npos);
  // A bad request comes back as exit code 2 with the field named on stderr.
  rc = run(cli + " optimize no_such_model --devices " + TAPP_SOURCE_DIR + "/examples/cluster_2cpu.json --server " + url +
               " 2>&1",
           out);
  CHECK(rc == 2);
  CHECK(out.find("model") != std::string::npos);
  // A TorchScript file goes up as model_file under a name the server takes
  // (the server reads no path a request names: "model: must be a zoo model name" before).
  const std::string script = dir + "/my model (v2).pt";
  std::ofstream(script, std::ios::binary) << std::string("PK\x03\x04 not really a module\0\xff", 28);
  rc = run(cli + " optimize '" + script + "' --devices " + TAPP_SOURCE_DIR +
               "/examples/cluster_2cpu.json --iterations 7 --server " + url + " --json 2>&1",
           out);
  CHECK_MESSAGE(rc == 0, out);
  rc = run(cli + " jobs --server " + url + " --json", out);
  json uploaded = json::parse(out, nullptr, false);
  REQUIRE(uploaded.is_object());
  CHECK(uploaded["jobs"][0]["model"].get<std::string>().find("my_model__v2_.pt") != std::string::npos);
  // An unreachable server is a failure (1), not a hang.
  rc = run(cli + " jobs --server http://127.0.0.1:1 2>&1", out);
  CHECK(rc == 1);
  // --out with --server: the job's placement, written here.
  const std::string placement = dir + "/placement.json";
  rc = run(cli + " optimize mlp --devices " + TAPP_SOURCE_DIR + "/examples/cluster_2cpu.json --iterations 7 --server " +
               url + " --out " + placement + " 2>/dev/null",
           out);
  CHECK(rc == 0);
  std::ifstream written(placement);
  json p = json::parse(written, nullptr, false);
  REQUIRE(p.is_object());
  CHECK(p["groups"].size() == 2);
}

TEST_CASE("a second tapp-server on the same database is refused: it would run the first one's jobs again") {
  auto dir = testing::temp_dir("db_lock");
  testing::ServerProcess first;
  REQUIRE(first.start_fake(dir + "/jobs.db", 5));
  std::string out;
  const std::string server = std::string(TAPP_BIN_DIR) + "/tapp-server";
  CHECK(run("timeout 30 " + server + " --port 0 --db " + dir + "/jobs.db 2>&1", out) == 2);
  CHECK(out.find("--db " + dir + "/jobs.db: in use by another tapp-server") != std::string::npos);
  first.stop();
  // Once the first has ended, a server starts on it again (the kernel dropped the lock).
  testing::ServerProcess second;
  CHECK(second.start_fake(dir + "/jobs.db", 5));
}

namespace {

// A program on a port that is not a tapp-server: every request gets the
// answer `reply(method)` gives (status and body), then the connection closes.
class CannedServer {
 public:
  using Reply = std::function<std::pair<int, std::string>(const std::string& method)>;
  explicit CannedServer(Reply reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd_, 8) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~CannedServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      std::string request;
      char buf[4096];
      for (ssize_t n; request.find("\r\n\r\n") == std::string::npos && (n = ::read(c, buf, sizeof buf)) > 0;)
        request.append(buf, static_cast<size_t>(n));
      const auto [status, body] = reply_(request.substr(0, request.find(' ')));
      const std::string answer = "HTTP/1.1 " + std::to_string(status) + " X\r\nContent-Type: application/json\r\n" +
                                 "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
      (void)!::write(c, answer.data(), answer.size());
      ::close(c);
    }
  }
  Reply reply_;
  int fd_ = -1, port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

TEST_CASE("tapp-cli as a client: an answer no tapp-server gives is exit 1 naming the URL, never a crash") {
  const std::string cli = std::string(TAPP_BIN_DIR) + "/tapp-cli";
  const std::string optimize = cli + " optimize mlp --devices " + TAPP_SOURCE_DIR + "/examples/cluster_2cpu.json --server ";
  std::string out;
  for (const std::string& page : {std::string("not json {"), std::string(R"({"jobs": "nope"})"), std::string("[1, 2]"),
                                  std::string(R"({"jobs": [{"id": 5, "status": null}]})")}) {
    INFO(page);
    CannedServer fake([&](const std::string&) { return std::make_pair(200, page); });
    CHECK(run(cli + " jobs --server " + fake.url() + " 2>&1", out) == 1);
    CHECK(out.find("unexpected answer from " + fake.url()) != std::string::npos);
  }
  {
    CannedServer fake([](const std::string&) { return std::make_pair(202, std::string(R"({"id": 123, "status": "queued"})")); });
    CHECK(run(optimize + fake.url() + " 2>&1", out) == 1);
    CHECK(out.find("unexpected answer from " + fake.url()) != std::string::npos);
  }
  {
    CannedServer fake([](const std::string& method) {
      return method == "POST" ? std::make_pair(202, std::string(R"({"id": "j1", "url": 7})"))
                              : std::make_pair(200, std::string(R"({"status": "succeeded"})"));
    });
    const std::string placement = testing::temp_dir("canned") + "/p.json";
    CHECK(run(optimize + fake.url() + " --out " + placement + " 2>&1", out) == 1);
    CHECK(out.find("job j1 succeeded without a result") != std::string::npos);
    CHECK_FALSE(std::ifstream(placement).good());
  }
}
