// Fault injection into jobs on a real tapp-server (127.0.0.1): a job that
// aborts, one that segfaults, one that allocates past its memory limit, one
// that hangs, and one that leaves a process of its own behind and is cancelled.
// The faults come from the test-only job program (test_job_main.cpp, chosen
// by the job's first device name), which the server runs and supervises as it
// does real jobs. Each test keeps a healthy job running beside the faulty one
// and checks, while the fault plays out, that /healthz answers and that the
// healthy job can be polled; then that the faulty job's error names the cause
// and the healthy job still succeeds. Bounded: one server and two jobs each.
#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "server_process.h"
#include "service/http_client.h"
#include "service/process_tree.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {

ServerUrl url_of(const testing::ServerProcess& s) {
  ServerUrl u;
  u.port = std::to_string(s.port());
  return u;
}

json get_json(const ServerUrl& u, const std::string& path) {
  Result<HttpReply> r = http_call(u, "GET", path);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  REQUIRE_MESSAGE(r->status == 200, path << " -> " << r->status << " " << r->body);
  return json::parse(r->body);
}

std::string submit(const ServerUrl& u, const json& body) {
  Result<HttpReply> r = http_call(u, "POST", "/placements", body.dump(), {{"Content-Type", "application/json"}});
  REQUIRE(r.is_ok());
  REQUIRE_MESSAGE(r->status == 202, r->body);
  return json::parse(r->body)["id"].get<std::string>();
}

json job_on(const std::string& first_device, json options = json::object()) {
  return json{{"model", "alexnet"}, {"cluster", {{"devices", {{{"name", first_device}}, {{"name", "b"}}}}}}, {"options", options}};
}

// Polls `id` until it is final (at most 30 s: liveness, not timing). Every round
// also checks that the server answers /healthz and a poll of `other`, and,
// when `other_healthy`, that `other` has not failed.
json follow_while_server_answers(const ServerUrl& u, const std::string& id, const std::string& other,
                                 bool other_healthy) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  json j;
  int rounds = 0;
  while (std::chrono::steady_clock::now() < end) {
    Result<HttpReply> health = http_call(u, "GET", "/healthz");
    REQUIRE(health.is_ok());
    REQUIRE(health->status == 200);
    json neighbour = get_json(u, "/placements/" + other);
    if (other_healthy) CHECK(neighbour["status"] != "failed");
    ++rounds;
    j = get_json(u, "/placements/" + id);
    std::string s = j["status"];
    if (s == "succeeded" || s == "failed" || s == "cancelled") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(rounds >= 1);
  return j;
}

void wait_running(const ServerUrl& u, const std::string& id) {
  for (int i = 0; i < 1000; ++i) {
    std::string s = get_json(u, "/placements/" + id)["status"];
    if (s == "profiling" || s == "optimizing") return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  FAIL("job " << id << " never started");
}

// Starts a server with two job slots, a healthy job beside the faulty one, and
// returns the faulty job's final document once the healthy one has succeeded.
json run_fault_beside_a_healthy_job(const std::string& fault, json options = json::object(),
                                    std::vector<std::string> flags = {}) {
  auto dir = testing::temp_dir("faults");
  testing::ServerProcess server;
  flags.insert(flags.end(), {"--jobs", "2"});
  REQUIRE(server.start_fake(dir + "/jobs.db", 20, flags));
  ServerUrl u = url_of(server);
  std::string healthy = submit(u, job_on("a", {{"iterations", 100}}));  // about 2 s
  wait_running(u, healthy);
  std::string faulty = submit(u, job_on(fault, options));
  json j = follow_while_server_answers(u, faulty, healthy, true);
  json h = follow_while_server_answers(u, healthy, faulty, false);
  CHECK(h["status"] == "succeeded");
  CHECK(server.alive());
  return j;
}

}  // namespace

TEST_CASE("a job that aborts fails with SIGABRT named while the server and another job go on") {
  json j = run_fault_beside_a_healthy_job("fault-abort");
  CHECK(j["status"] == "failed");
  CHECK(j["error"] == "crashed: signal 6 (SIGABRT)");
}

TEST_CASE("a job that segfaults fails with SIGSEGV named while the server and another job go on") {
  json j = run_fault_beside_a_healthy_job("fault-segfault");
  CHECK(j["status"] == "failed");
  CHECK(j["error"] == "crashed: signal 11 (SIGSEGV)");
}

TEST_CASE("a job that allocates past its memory limit fails with the limit named while the server and another job go on") {
  json j = run_fault_beside_a_healthy_job("fault-allocate", {{"memory_limit_mib", 256}});
  CHECK(j["status"] == "failed");
  CHECK(j["error"] == "exceeded its memory limit of 256 MiB");
}

TEST_CASE("a job that hangs fails after --job-stall-timeout-s with the silence named while the server and another job go on") {
  json j = run_fault_beside_a_healthy_job("fault-hang", json::object(), {"--job-stall-timeout-s", "1"});
  CHECK(j["status"] == "failed");
  CHECK(j["error"] == "no progress for 1 s");
}

TEST_CASE("cancelling a job ends its process and the processes it started in groups of their own within 1 s") {
  auto dir = testing::temp_dir("faults");
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 20));
  ServerUrl u = url_of(server);
  std::string id = submit(u, job_on("fault-spawn", {{"iterations", 100000}}));
  wait_running(u, id);
  // The job's process and the one it started (the server runs nothing else).
  std::vector<pid_t> job_processes;
  bool both = false;
  for (int i = 0; i < 500 && !both; ++i) {
    job_processes = descendants_of(server.pid());
    both = job_processes.size() >= 2;
    if (!both) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(both);
  Result<HttpReply> del = http_call(u, "DELETE", "/placements/" + id);
  REQUIRE(del.is_ok());
  CHECK(del->status == 200);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  auto all_ended = [&] {
    for (pid_t p : job_processes)
      if (!process_ended(p)) return false;
    return true;
  };
  while (!all_ended() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(all_ended());
  CHECK(get_json(u, "/placements/" + id)["status"] == "cancelled");
  CHECK(http_call(u, "GET", "/healthz")->status == 200);
}

TEST_CASE("a job's processes die with a server killed by SIGKILL") {
  auto dir = testing::temp_dir("faults");
  testing::ServerProcess server;
  REQUIRE(server.start_fake(dir + "/jobs.db", 20));
  ServerUrl u = url_of(server);
  std::string id = submit(u, job_on("a", {{"iterations", 100000}}));
  wait_running(u, id);
  std::vector<pid_t> job_processes;
  for (int i = 0; i < 500 && job_processes.empty(); ++i) {
    job_processes = descendants_of(server.pid());
    if (job_processes.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE_FALSE(job_processes.empty());
  server.kill_hard();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!process_ended(job_processes[0]) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(process_ended(job_processes[0]));
}
