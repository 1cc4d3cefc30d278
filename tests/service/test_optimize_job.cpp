// Tests of the real job function (service/optimize_job.h) in process: what the
// service adds around placer's optimize().
#include <doctest/doctest.h>

#include <fstream>

#include "core/cluster.h"
#include "model/profile_cache.h"
#include "model/zoo.h"
#include "server_process.h"
#include "placer/features.h"
#include "placer/policy.h"
#include "simulator/calibration_store.h"
#include "service/optimize_job.h"
#include "service/sqlite_profile_cache.h"

using namespace tapp;
using namespace tapp::service;
using nlohmann::json;

TEST_CASE("the real job optimizes the stored request, without the service's options, and lists the layers in order") {
  auto dir = testing::temp_dir("optimize-job");
  auto store = std::move(JobStore::open(dir + "/jobs.db").value());
  SqliteProfileCache cache(*store);
  OptimizeJobSettings settings{dir + "/work", {}, &cache};
  JobInput input{"j1",
                 json{{"model", "mlp"},
                      {"cluster", {{"devices", {{{"name", "a"}}, {{"name", "b"}, {"speed", 0.5}}}}}},
                      {"options", {{"iterations", 3}, {"batch_size", 8}, {"memory_limit_mib", 1024}}}},
                 {}};
  std::vector<std::string> phases;
  std::atomic<bool> cancel{false};
  Result<json> result =
      run_optimize_job(input, settings, [&](const ProgressEvent& e) { phases.push_back(e.phase); }, cancel);
  REQUIRE_MESSAGE(result.is_ok(), result.error_message());
  Result<LayerGraph> mlp = zoo_model("mlp");
  REQUIRE(mlp.is_ok());
  json order = json::array();
  for (const Layer& l : mlp->layers) order.push_back(l.name);
  CHECK((*result)["layer_order"] == order);
  CHECK((*result)["placement"]["layers"].size() == order.size());
  REQUIRE_FALSE(phases.empty());
  CHECK(phases.front() == "profiling");
  // Verified on the workers by default; the measured steps are kept with the
  // cluster's calibration in the job database, for the next job on it.
  const json& verification = (*result)["verification"];
  CAPTURE(verification.dump(2));
  CHECK(verification["state"] == "verified");
  if (verification.contains("calibration") && verification["calibration"]["stored"] == true) {
    Result<Cluster> cluster = cluster_from_json(input.request["cluster"]);
    REQUIRE(cluster.is_ok());
    auto stored = find_calibration(cache, *cluster, profile_timing_method());
    REQUIRE_MESSAGE(stored.is_ok(), stored.error_message());
    REQUIRE(stored->has_value());
    CHECK((*stored)->stored_samples() == verification["calibration"]["samples_kept"].get<int>());
  }
}

TEST_CASE("the real job refuses a remote worker whose host the server does not allow, naming the device") {
  auto dir = testing::temp_dir("optimize-job");
  OptimizeJobSettings settings{dir + "/work", {"10.0.0.9"}, nullptr};
  JobInput input{"j2",
                 json{{"model", "mlp"}, {"cluster", {{"devices", {{{"name", "a"}}, {{"name", "w"}, {"where", "10.0.0.5:7000"}}}}}}},
                 {}};
  std::atomic<bool> cancel{false};
  Result<json> result = run_optimize_job(input, settings, nullptr, cancel);
  REQUIRE_FALSE(result.is_ok());
  CHECK(result.error_message() ==
        "cluster.devices[1].where: remote host \"10.0.0.5\" is not in this server's --allow-remote-hosts");
}

TEST_CASE("the real job names a bad stored request's field") {
  auto dir = testing::temp_dir("optimize-job");
  OptimizeJobSettings settings{dir + "/work", {}, nullptr};
  JobInput input{"j3", json{{"model", "mlp"}, {"cluster", {{"devices", {{{"name", "a"}}}}}}, {"options", {{"seed", "x"}}}}, {}};
  std::atomic<bool> cancel{false};
  Result<json> result = run_optimize_job(input, settings, nullptr, cancel);
  REQUIRE_FALSE(result.is_ok());
  CHECK(result.error_message().rfind("options.seed: ", 0) == 0);
}

TEST_CASE("an uploaded model that cannot be read is named as the user sent it, not by the server's copy") {
  auto dir = testing::temp_dir("optimize-job");
  OptimizeJobSettings settings{dir + "/work", {}, nullptr};
  JobInput input{"j5",
                 json{{"model", "upload:net.pt"},
                      {"model_file", {{"name", "net.pt"}, {"bytes", 17}}},
                      {"cluster", {{"devices", {{{"name", "a"}}}}}},
                      {"options", {{"iterations", 2}}}},
                 "PK\x03\x04 not a module"};
  std::atomic<bool> cancel{false};
  Result<json> result = run_optimize_job(input, settings, nullptr, cancel);
  REQUIRE_FALSE(result.is_ok());
  CHECK_MESSAGE(result.error_message().find("model_file \"net.pt\"") != std::string::npos, result.error_message());
  CHECK_MESSAGE(result.error_message().find(dir) == std::string::npos, result.error_message());
}

TEST_CASE("the real job starts from the newest stored policy unless options.policy is fresh, and says which") {
  auto dir = testing::temp_dir("optimize-job-policy");
  auto store = std::move(JobStore::open(dir + "/jobs.db").value());
  const std::string path = dir + "/p.pt";
  REQUIRE(save_policy_networks(*new_policy_networks(16, 0.005, 3), path, json{{"models", {"mlp"}}}).is_ok());
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  auto stored = store->add_policy(bytes, kPolicyFeatureVersion, json{{"models", {"mlp"}}});
  REQUIRE(stored.is_ok());
  store->add_policy("stale bytes of an older version", kPolicyFeatureVersion - 1, json());  // never chosen

  OptimizeJobSettings settings{dir + "/work", {}, nullptr, {}};
  settings.latest_policy = [&] { return store->latest_policy(kPolicyFeatureVersion); };
  auto run = [&](const std::string& policy) {
    json options = {{"iterations", 2}, {"batch_size", 8}, {"verify", false}, {"baselines", false},
                    {"costs", "estimated"}};
    if (!policy.empty()) options["policy"] = policy;
    JobInput input{"jp", json{{"model", "mlp"}, {"cluster", {{"devices", {{{"name", "a"}}, {{"name", "b"}}}}}},
                              {"options", options}},
                   {}};
    std::atomic<bool> cancel{false};
    Result<json> result = run_optimize_job(input, settings, nullptr, cancel);
    REQUIRE_MESSAGE(result.is_ok(), result.error_message());
    return (*result)["policy"];
  };
  json latest = run("");
  CHECK(latest["started_from"] == "stored policy " + std::to_string(stored->id));
  CHECK(latest["zero_shot_step_ms"].is_number());
  // and the best after the climb from it, before the policy's first sample
  REQUIRE(latest["zero_shot_climbed_step_ms"].is_number());
  CHECK(latest["zero_shot_climbed_step_ms"].get<double>() <= latest["zero_shot_step_ms"].get<double>());
  CHECK(latest["zero_shot_placement"]["groups"].is_array());  // the trained policy's plan before fine-tuning
  // and its odds, keyed by what they are odds of
  CHECK(latest["zero_shot_odds"]["micro_batches"].contains("1"));
  REQUIRE(latest["zero_shot_odds"]["groups"].size() >= 1);
  CHECK(latest["zero_shot_odds"]["groups"][0]["device"].contains("a"));
  CHECK(latest["zero_shot_odds"]["stages"].contains("1"));  // the odds of each number of stages
  CHECK(run("fresh")["started_from"] == "fresh");
  settings.latest_policy = nullptr;  // a server with no policy store: fresh
  CHECK(run("latest")["started_from"] == "fresh");
}
