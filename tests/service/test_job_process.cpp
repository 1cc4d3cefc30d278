// Tests of running a job in a child process without HTTP: the report lines,
// the service's own job options, how an ended child is described, killing a
// process tree, and the supervisor driving the test-only job program
// (tapp-test-job) under a JobRunner.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "server_process.h"
#include "service/job_limits.h"
#include "service/job_report.h"
#include "service/job_supervisor.h"
#include "service/process_tree.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {

// Polls `done` every 10 ms for at most `limit_s` (liveness, not timing).
template <typename F>
bool eventually(F done, double limit_s) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

json two_device_request(const std::string& first_device, int iterations, json options = json::object()) {
  options["iterations"] = iterations;
  return json{{"model", "alexnet"},
              {"cluster", {{"devices", {{{"name", first_device}}, {{"name", "b"}}}}}},
              {"options", options}};
}

JobProcessOptions test_job_program(const std::string& dir) {
  JobProcessOptions o;
  o.program = std::string(TAPP_BIN_DIR) + "/tapp-test-job";
  o.db_path = dir + "/jobs.db";
  o.work_root = dir + "/jobs.db.jobs";
  o.stall_timeout_s = 30;
  return o;
}

std::string wait_final(JobStore& store, const std::string& id, double limit_s = 20) {
  std::string status = "timeout";
  eventually([&] {
    auto j = store.get(id, false);
    if (j && j->has_value() && is_final_status((*j)->status)) status = (*j)->status;
    return status != "timeout";
  }, limit_s);
  return status;
}

}  // namespace

TEST_CASE("report lines carry progress, a result and an error through the pipe unchanged") {
  ProgressEvent e{"optimizing", 7, 20, 123.5, -1.25, 0.5};
  Result<JobReport> p = decode_report_line(encode_progress_line(e));
  REQUIRE(p.is_ok());
  CHECK(p->kind == JobReport::Kind::progress);
  CHECK(p->progress.phase == "optimizing");
  CHECK(p->progress.iteration == 7);
  CHECK(p->progress.total_iterations == 20);
  CHECK(p->progress.best_step_ms == 123.5);
  CHECK(p->progress.reward == -1.25);
  CHECK(p->progress.elapsed_s == 0.5);

  Result<JobReport> r = decode_report_line(encode_result_line(json{{"step_ms", 4.5}, {"layers", {"a", "b"}}}));
  REQUIRE(r.is_ok());
  CHECK(r->kind == JobReport::Kind::result);
  CHECK(r->result["layers"][1] == "b");

  Result<JobReport> err = decode_report_line(encode_error_line("options.seed: expected an integer"));
  REQUIRE(err.is_ok());
  CHECK(err->kind == JobReport::Kind::error);
  CHECK(err->error == "options.seed: expected an integer");

  ProgressEvent no_reward{"profiling", 0, 0, 0, NAN, 0};
  CHECK(std::isnan(decode_report_line(encode_progress_line(no_reward))->progress.reward));
}

TEST_CASE("a report line the supervisor cannot read is an error quoting it") {
  for (const char* bad : {"not json", "[1, 2]", "{\"progress\": 3}", "{\"error\": 1}", "{\"what\": 1}",
                          "{\"result\": 1, \"error\": \"x\"}"}) {
    Result<JobReport> r = decode_report_line(bad);
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error_message().find("unreadable report line: " + std::string(bad).substr(0, 5)) != std::string::npos);
  }
}

TEST_CASE("options.memory_limit_mib is read, range-checked with the field named, and hidden from the placer") {
  CHECK_FALSE(requested_memory_limit_mib(json{{"model", "mlp"}})->has_value());
  CHECK(**requested_memory_limit_mib(json{{"options", {{"memory_limit_mib", 512}}}}) == 512);
  for (json bad : {json("lots"), json(1.5), json(-1), json(16), json(int64_t{1} << 40)}) {
    auto r = requested_memory_limit_mib(json{{"options", {{"memory_limit_mib", bad}}}});
    REQUIRE_FALSE(r.is_ok());
    CHECK(r.error_message().rfind("options.memory_limit_mib: ", 0) == 0);
  }
  json stripped = without_service_options(json{{"options", {{"memory_limit_mib", 512}, {"seed", 3}}}});
  CHECK(stripped == json{{"options", {{"seed", 3}}}});
  CHECK(memory_share_mib(1) >= memory_share_mib(4));
  CHECK(memory_share_mib(1000000) == kMinJobMemoryLimitMiB);
}

TEST_CASE("a child that ended without a result, or went silent, is described by its cause") {
  CHECK(describe_job_exit(SIGSEGV, 0) == "crashed: signal 11 (SIGSEGV)");  // a raw wait status: killed by 11
  CHECK(describe_job_exit(SIGABRT, 0) == "crashed: signal 6 (SIGABRT)");
  CHECK(describe_job_exit(SIGKILL, 0).rfind("crashed: signal 9 (SIGKILL); the server did not send it", 0) == 0);
  CHECK(describe_job_exit(W_EXITCODE(static_cast<int>(JobExitCode::memory_limit), 0), 512) ==
        "exceeded its memory limit of 512 MiB");
  CHECK(describe_job_exit(W_EXITCODE(0, 0), 0) == "the job process exited without a result");
  CHECK(describe_job_exit(W_EXITCODE(9, 0), 0) == "the job process exited with code 9 without a result");
  CHECK(describe_stall(600, 100, 1024) == "no progress for 600 s");
  CHECK(describe_stall(600, 900, 0) == "no progress for 600 s");
  CHECK(describe_stall(600, 237, 256) ==
        "no progress for 600 s; it was using 237 MiB of its memory limit of 256 MiB, so it may be waiting for memory "
        "it cannot get");
  CHECK(format_seconds(600) == "600 s");
  CHECK(format_seconds(1.5) == "1.5 s");
}

TEST_CASE("killing a process tree ends a grandchild that leads its own process group") {
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    setpgid(0, 0);
    pid_t grandchild = fork();
    if (grandchild == 0) {
      setpgid(0, 0);  // as the runtime starts a tapp-worker
      alarm(30);
      for (;;) pause();
    }
    // Both sides set the group, so it is set before "ready" whichever runs first.
    setpgid(grandchild, grandchild);
    ssize_t ignored = write(ready[1], "x", 1);
    (void)ignored;
    alarm(30);
    for (;;) pause();
  }
  setpgid(child, child);
  char c;
  REQUIRE(read(ready[0], &c, 1) == 1);
  close(ready[0]);
  close(ready[1]);
  std::vector<pid_t> below = descendants_of(child);
  REQUIRE(below.size() == 1);
  CHECK(getpgid(below[0]) == below[0]);
  kill_process_tree(child);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(eventually([&] { return process_ended(below[0]); }, 5));
}

TEST_CASE("a supervised job runs in a child process and its progress and result reach the store") {
  auto dir = testing::temp_dir("supervisor");
  auto store = std::move(JobStore::open(dir + "/jobs.db").value());
  JobRunner runner(*store, make_supervised_job(test_job_program(dir)), {});
  runner.start();
  JobRecord j;
  j.request = two_device_request("a", 6);
  REQUIRE(runner.submit(j, "", nullptr) == SubmitError::none);
  CHECK(wait_final(*store, j.id) == "succeeded");
  auto got = *store->get(j.id);
  CHECK(got->result["fake"] == true);
  CHECK(got->result["placement"]["groups"].size() == 2);
  CHECK(got->progress["iteration"] == 6);
  auto events = *store->events(j.id, 0, 1000);
  REQUIRE(events.size() >= 3);
  CHECK(events.front().event["phase"] == "profiling");
  // The job's scratch directory is gone with its process.
  CHECK_FALSE(std::filesystem::exists(dir + "/jobs.db.jobs/" + j.id));
}

TEST_CASE("a supervised job that stops reporting fails with the time it was silent") {
  auto dir = testing::temp_dir("supervisor");
  auto store = std::move(JobStore::open(dir + "/jobs.db").value());
  JobProcessOptions o = test_job_program(dir);
  o.stall_timeout_s = 0.5;
  JobRunner runner(*store, make_supervised_job(o), {});
  runner.start();
  JobRecord j;
  j.request = two_device_request("fault-hang", 1);
  REQUIRE(runner.submit(j, "", nullptr) == SubmitError::none);
  CHECK(wait_final(*store, j.id) == "failed");
  CHECK((*store->get(j.id))->error == "no progress for 0.5 s");
}

TEST_CASE("a job's memory limit comes from its request, else from the server's default") {
  auto dir = testing::temp_dir("supervisor");
  auto store = std::move(JobStore::open(dir + "/jobs.db").value());
  JobProcessOptions o = test_job_program(dir);
  o.default_memory_limit_mib = 300;
  JobRunner runner(*store, make_supervised_job(o), {});
  runner.start();
  JobRecord by_default, by_request;
  by_default.request = two_device_request("fault-allocate", 1);
  by_request.request = two_device_request("fault-allocate", 1, {{"memory_limit_mib", 400}});
  REQUIRE(runner.submit(by_default, "", nullptr) == SubmitError::none);
  REQUIRE(runner.submit(by_request, "", nullptr) == SubmitError::none);
  CHECK(wait_final(*store, by_default.id) == "failed");
  CHECK(wait_final(*store, by_request.id) == "failed");
  CHECK((*store->get(by_default.id))->error == "exceeded its memory limit of 300 MiB");
  CHECK((*store->get(by_request.id))->error == "exceeded its memory limit of 400 MiB");
}

TEST_CASE("a supervised job whose program cannot start fails with that named") {
  auto dir = testing::temp_dir("supervisor");
  auto store = std::move(JobStore::open(dir + "/jobs.db").value());
  JobProcessOptions o = test_job_program(dir);
  o.program = dir + "/no-such-program";
  JobRunner runner(*store, make_supervised_job(o), {});
  runner.start();
  JobRecord j;
  j.request = two_device_request("a", 1);
  REQUIRE(runner.submit(j, "", nullptr) == SubmitError::none);
  CHECK(wait_final(*store, j.id) == "failed");
  CHECK((*store->get(j.id))->error == "the job process could not be started (exec failed)");
}

TEST_CASE("a supervised job ends when its process exits, even if a process it left behind holds the pipe open") {
  auto dir = testing::temp_dir("supervisor");
  auto store = std::move(JobStore::open(dir + "/jobs.db").value());
  JobRunner runner(*store, make_supervised_job(test_job_program(dir)), {});
  runner.start();
  JobRecord j;
  j.request = two_device_request("fault-spawn", 3);
  REQUIRE(runner.submit(j, "", nullptr) == SubmitError::none);
  CHECK(wait_final(*store, j.id) == "succeeded");
}
