// Tests of the SQLite job store: WAL, round trips, listing, crash recovery.
#include <doctest/doctest.h>

#include <filesystem>

#include "server_process.h"
#include "service/job_store.h"
#include "service/sqlite_profile_cache.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

namespace {
std::unique_ptr<JobStore> open_store(const std::string& path) {
  Result<std::unique_ptr<JobStore>> s = JobStore::open(path);
  REQUIRE_MESSAGE(s.is_ok(), s.error_message());
  return std::move(s.value());
}
JobRecord job_for(const std::string& model) {
  JobRecord j;
  j.model_label = model;
  j.request = json{{"model", model}, {"cluster", {{"devices", {{{"name", "a"}}}}}}};
  return j;
}
}  // namespace

TEST_CASE("a new job store is in WAL mode and passes integrity_check") {
  auto dir = testing::temp_dir("store");
  auto store = open_store(dir + "/jobs.db");
  CHECK(*store->journal_mode() == "wal");
  CHECK(*store->integrity_check() == "ok");
}

TEST_CASE("an inserted job reads back queued with its request and upload, also after reopening") {
  auto dir = testing::temp_dir("store");
  std::string id;
  {
    auto store = open_store(dir + "/jobs.db");
    JobRecord j = job_for("alexnet");
    REQUIRE(store->insert(j, std::string("\x00\x01pt", 4)).is_ok());
    id = j.id;
    CHECK(!id.empty());
  }
  auto store = open_store(dir + "/jobs.db");
  auto got = store->get(id);
  REQUIRE(got.is_ok());
  REQUIRE(got->has_value());
  CHECK((*got)->status == "queued");
  CHECK((*got)->model_label == "alexnet");
  CHECK((*got)->request["model"] == "alexnet");
  CHECK((*got)->created_at_s > 0);
  CHECK(**store->upload(id) == std::string("\x00\x01pt", 4));
  CHECK_FALSE(store->get("nope")->has_value());
}

TEST_CASE("listing filters by status and pages newest first") {
  auto dir = testing::temp_dir("store");
  auto store = open_store(dir + "/jobs.db");
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    JobRecord j = job_for("m" + std::to_string(i));
    REQUIRE(store->insert(j).is_ok());
    ids.push_back(j.id);
  }
  REQUIRE(*store->transition(ids[1], {kQueued}, kProfiling));
  REQUIRE(*store->transition(ids[1], {kProfiling}, kFailed, "boom"));
  JobPage all = *store->list("", 2, 0);
  CHECK(all.total == 5);
  REQUIRE(all.jobs.size() == 2);
  CHECK(all.jobs[0].id == ids[4]);
  CHECK(all.jobs[1].id == ids[3]);
  JobPage next = *store->list("", 2, 2);
  CHECK(next.jobs[0].id == ids[2]);
  JobPage failed = *store->list(kFailed, 10, 0);
  REQUIRE(failed.jobs.size() == 1);
  CHECK(failed.jobs[0].error == "boom");
  CHECK(failed.total == 1);
}

TEST_CASE("a transition only happens from the stated states") {
  auto dir = testing::temp_dir("store");
  auto store = open_store(dir + "/jobs.db");
  JobRecord j = job_for("alexnet");
  REQUIRE(store->insert(j).is_ok());
  CHECK_FALSE(*store->transition(j.id, {kProfiling}, kFailed));
  CHECK(*store->transition(j.id, {kQueued}, kCancelled));
  CHECK_FALSE(*store->transition(j.id, {kQueued}, kProfiling));
  CHECK((*store->get(j.id))->status == "cancelled");
  CHECK((*store->get(j.id))->finished_at_s > 0);
}

TEST_CASE("a result is stored only while the job is running") {
  auto dir = testing::temp_dir("store");
  auto store = open_store(dir + "/jobs.db");
  JobRecord j = job_for("alexnet");
  REQUIRE(store->insert(j).is_ok());
  CHECK_FALSE(*store->finish_succeeded(j.id, json{{"x", 1}}));  // still queued
  REQUIRE(*store->transition(j.id, {kQueued}, kProfiling));
  CHECK(*store->finish_succeeded(j.id, json{{"x", 1}}));
  auto got = *store->get(j.id);
  CHECK(got->status == "succeeded");
  CHECK(got->result["x"] == 1);
  CHECK_FALSE(*store->finish_succeeded(j.id, json{{"x", 2}}));
}

TEST_CASE("progress events are numbered per job in order") {
  auto dir = testing::temp_dir("store");
  auto store = open_store(dir + "/jobs.db");
  JobRecord a = job_for("a"), b = job_for("b");
  REQUIRE(store->insert(a).is_ok());
  REQUIRE(store->insert(b).is_ok());
  for (int i = 1; i <= 3; ++i) REQUIRE(store->add_event(a.id, json{{"iteration", i}}).is_ok());
  REQUIRE(store->add_event(b.id, json{{"iteration", 9}}).is_ok());
  auto ev = *store->events(a.id, 0, 100);
  REQUIRE(ev.size() == 3);
  CHECK(ev[0].seq == 1);
  CHECK(ev[2].seq == 3);
  CHECK(ev[2].event["iteration"] == 3);
  CHECK(store->events(a.id, 2, 100)->size() == 1);
  CHECK((*store->events(b.id, 0, 100))[0].seq == 1);
}

TEST_CASE("recovery re-queues interrupted jobs exactly once and leaves the others alone") {
  auto dir = testing::temp_dir("store");
  std::string path = dir + "/jobs.db";
  std::vector<std::string> ids;
  {
    auto store = open_store(path);
    for (int i = 0; i < 5; ++i) {
      JobRecord j = job_for("m" + std::to_string(i));
      REQUIRE(store->insert(j).is_ok());
      ids.push_back(j.id);
    }
    // 0: queued, 1: profiling, 2: optimizing, 3: succeeded, 4: cancelled
    REQUIRE(*store->transition(ids[1], {kQueued}, kProfiling));
    REQUIRE(*store->transition(ids[2], {kQueued}, kProfiling));
    REQUIRE(*store->transition(ids[2], {kProfiling}, kOptimizing));
    REQUIRE(store->add_event(ids[2], json{{"iteration", 5}}).is_ok());
    REQUIRE(*store->transition(ids[3], {kQueued}, kProfiling));
    REQUIRE(*store->finish_succeeded(ids[3], json{{"ok", true}}));
    REQUIRE(*store->transition(ids[4], {kQueued}, kCancelled));
  }  // "crash": the store is closed with jobs 1 and 2 mid-run
  auto store = open_store(path);
  auto queued = *store->recover();
  CHECK(queued == std::vector<std::string>{ids[0], ids[1], ids[2]});
  CHECK((*store->get(ids[1]))->restarts == 1);
  CHECK((*store->get(ids[2]))->restarts == 1);
  CHECK((*store->get(ids[0]))->restarts == 0);
  CHECK((*store->get(ids[3]))->status == "succeeded");
  CHECK((*store->get(ids[4]))->status == "cancelled");
  auto ev = *store->events(ids[2], 0, 100);
  REQUIRE(ev.size() == 1);  // the old run's curve is dropped; a "requeued" marker remains
  CHECK(ev[0].event["phase"] == "requeued");
  // A second recovery (restart before anything ran) does not re-queue them again.
  auto again = *store->recover();
  CHECK(again == queued);
  CHECK((*store->get(ids[1]))->restarts == 1);
  CHECK(store->list("", 100, 0)->total == 5);
  CHECK(*store->integrity_check() == "ok");
}

TEST_CASE("the profile cache round-trips bytes by key") {
  auto dir = testing::temp_dir("store");
  auto store = open_store(dir + "/jobs.db");
  CHECK_FALSE(store->cache_get("alexnet/cpu")->has_value());
  REQUIRE(store->cache_put("alexnet/cpu", std::string("{\"layers\":[]}\0x", 15)).is_ok());
  CHECK(**store->cache_get("alexnet/cpu") == std::string("{\"layers\":[]}\0x", 15));
  REQUIRE(store->cache_put("alexnet/cpu", "v2").is_ok());
  CHECK(**store->cache_get("alexnet/cpu") == "v2");
}

TEST_CASE("the SQLite profile cache serves the profiler's ProfileCache interface across store handles") {
  auto dir = testing::temp_dir("store");
  {
    auto store = open_store(dir + "/jobs.db");
    SqliteProfileCache cache(*store);
    ProfileCache& as_interface = cache;
    CHECK_FALSE(as_interface.get("mlp-784-abc-cpu-t1-b32").has_value());
    REQUIRE(as_interface.put("mlp-784-abc-cpu-t1-b32", "{\"rows\": []}").is_ok());
  }
  auto store = open_store(dir + "/jobs.db");
  SqliteProfileCache cache(*store);
  CHECK(cache.get("mlp-784-abc-cpu-t1-b32") == std::optional<std::string>("{\"rows\": []}"));
}
