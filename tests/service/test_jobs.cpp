// Tests of the job queue and runners with an injected (fake) job function.
#include <doctest/doctest.h>

#include <chrono>
#include <thread>

#include "server_process.h"
#include "fake_job.h"
#include "service/jobs.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {
std::unique_ptr<JobStore> open_store() {
  auto dir = testing::temp_dir("jobs");
  auto s = JobStore::open(dir + "/jobs.db");
  REQUIRE(s.is_ok());
  return std::move(s.value());
}
JobRecord request(const std::string& evaluator = "simulate", int iterations = 5, int threads = 1) {
  JobRecord j;
  j.model_label = "alexnet";
  j.request = json{{"model", "alexnet"},
                   {"cluster", {{"devices", {{{"name", "a"}, {"threads", threads}}, {{"name", "b"}, {"threads", threads}}}}}},
                   {"options", {{"evaluator", evaluator}, {"iterations", iterations}}}};
  return j;
}
// Polls until the job reaches a final state (bounded: liveness, not timing).
std::string wait_final(JobStore& store, const std::string& id, double limit_s = 20) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (std::chrono::steady_clock::now() < end) {
    auto j = store.get(id, false);
    if (j && j->has_value() && is_final_status((*j)->status)) return (*j)->status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return "timeout";
}
}  // namespace

TEST_CASE("a job runs to success with progress events and its result stored") {
  auto store = open_store();
  JobRunner runner(*store, testing::make_fake_job({5, 10, false}), {});
  runner.start();
  JobRecord j = request("simulate", 10);
  REQUIRE(runner.submit(j, "", nullptr) == SubmitError::none);
  CHECK(wait_final(*store, j.id) == "succeeded");
  auto got = *store->get(j.id);
  CHECK(got->result["placement"]["groups"].size() == 2);
  CHECK(got->progress["phase"] == "done");
  auto events = *store->events(j.id, 0, 1000);
  REQUIRE(events.size() >= 3);
  CHECK(events.front().event["phase"] == "profiling");
  CHECK(events.back().event["iteration"] == 10);
}

TEST_CASE("a failing job function fails the job with its message, and a throwing one too") {
  auto store = open_store();
  SUBCASE("error value") {
    JobRunner runner(*store, testing::make_fake_job({1, 2, true}), {});
    runner.start();
    JobRecord j = request();
    REQUIRE(runner.submit(j, "", nullptr) == SubmitError::none);
    CHECK(wait_final(*store, j.id) == "failed");
    CHECK((*store->get(j.id))->error == "fake job failed on purpose");
  }
  SUBCASE("exception") {
    JobRunner runner(*store, [](const JobInput&, const ProgressFn&, const std::atomic<bool>&) -> Result<json> {
      throw std::runtime_error("kaboom");
    }, {});
    runner.start();
    JobRecord j = request();
    REQUIRE(runner.submit(j, "", nullptr) == SubmitError::none);
    CHECK(wait_final(*store, j.id) == "failed");
    CHECK((*store->get(j.id))->error == "internal error: kaboom");
  }
}

TEST_CASE("cancelling a running job marks it cancelled and frees its runner") {
  auto store = open_store();
  JobRunner runner(*store, testing::make_fake_job({50, 1000, false}), {});
  runner.start();
  JobRecord j = request("simulate", 1000);
  REQUIRE(runner.submit(j, "", nullptr) == SubmitError::none);
  while ((*store->get(j.id, false))->status == "queued") std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::string status;
  CHECK(*runner.cancel(j.id, &status));
  CHECK((*store->get(j.id))->status == "cancelled");
  // The runner thread is released: the next job runs.
  JobRecord k = request("simulate", 2);
  REQUIRE(runner.submit(k, "", nullptr) == SubmitError::none);
  CHECK(wait_final(*store, k.id) == "succeeded");
  CHECK((*store->get(j.id))->status == "cancelled");
  CHECK_FALSE(*runner.cancel(j.id, &status));
  CHECK(status == "cancelled");
}

TEST_CASE("a cancelled queued job never runs") {
  auto store = open_store();
  JobRunner runner(*store, testing::make_fake_job({20, 20, false}), {});
  runner.start();
  JobRecord first = request("simulate", 20), second = request();
  REQUIRE(runner.submit(first, "", nullptr) == SubmitError::none);
  REQUIRE(runner.submit(second, "", nullptr) == SubmitError::none);
  CHECK(*runner.cancel(second.id, nullptr));
  CHECK(wait_final(*store, first.id) == "succeeded");
  auto got = *store->get(second.id);
  CHECK(got->status == "cancelled");
  CHECK(got->started_at_s == 0);
}

TEST_CASE("a full queue refuses new jobs with a message") {
  auto store = open_store();
  JobsOptions opts;
  opts.queue_size = 2;
  JobRunner runner(*store, testing::make_fake_job({20, 100, false}), opts);  // not started: nothing leaves the queue
  JobRecord a = request(), b = request(), c = request();
  CHECK(runner.submit(a, "", nullptr) == SubmitError::none);
  CHECK(runner.submit(b, "", nullptr) == SubmitError::none);
  std::string why;
  CHECK(runner.submit(c, "", &why) == SubmitError::queue_full);
  CHECK(why.find("queue is full") != std::string::npos);
  CHECK(store->list("", 10, 0)->total == 2);
}

TEST_CASE("jobs that measure never hold the same cores at once, simulating jobs run alongside") {
  auto store = open_store();
  std::atomic<int> measuring{0}, max_measuring{0}, simulating_overlap{0};
  JobFn fn = [&](const JobInput& in, const ProgressFn&, const std::atomic<bool>&) -> Result<json> {
    bool measures = in.request["options"]["evaluator"] != "simulate";
    if (measures) {
      int now = ++measuring;
      int prev = max_measuring.load();
      while (now > prev && !max_measuring.compare_exchange_weak(prev, now)) {
      }
    } else if (measuring.load() > 0) {
      ++simulating_overlap;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    if (measures) --measuring;
    return json{{"ok", true}};
  };
  JobsOptions opts;
  opts.runners = 3;
  opts.total_cores = 2;
  JobRunner runner(*store, fn, opts);
  runner.start();
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    JobRecord j = request("measure", 1, 1);  // needs 2 cores: all of them
    REQUIRE(runner.submit(j, "", nullptr) == SubmitError::none);
    ids.push_back(j.id);
  }
  JobRecord sim = request("simulate");
  REQUIRE(runner.submit(sim, "", nullptr) == SubmitError::none);
  ids.push_back(sim.id);
  for (const std::string& id : ids) CHECK(wait_final(*store, id) == "succeeded");
  CHECK(max_measuring.load() == 1);
  CHECK(runner.cores().free_cores() == 2);
  CHECK(cores_needed(sim.request, 2) == 0);
  CHECK(cores_needed(request("hybrid", 1, 1).request, 8) == 2);
  CHECK(cores_needed(request("measure", 1, 16).request, 8) == 8);
}

TEST_CASE("stopping the runner leaves a running job for recovery, which runs it again") {
  auto dir = testing::temp_dir("jobs");
  std::string id;
  {
    auto store = std::move(JobStore::open(dir + "/jobs.db").value());
    JobRunner runner(*store, testing::make_fake_job({50, 1000, false}), {});
    runner.start();
    JobRecord j = request("simulate", 1000);
    REQUIRE(runner.submit(j, "", nullptr) == SubmitError::none);
    id = j.id;
    while ((*store->get(id, false))->status == "queued") std::this_thread::sleep_for(std::chrono::milliseconds(5));
    runner.stop();
    CHECK(is_running_status((*store->get(id, false))->status));
  }
  auto store = std::move(JobStore::open(dir + "/jobs.db").value());
  auto queued = *store->recover();
  REQUIRE(queued == std::vector<std::string>{id});
  JobRunner runner(*store, testing::make_fake_job({1, 3, false}), {});
  runner.start(queued);
  CHECK(wait_final(*store, id) == "succeeded");
  CHECK((*store->get(id))->restarts == 1);
}
