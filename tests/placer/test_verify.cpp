// Verification by measurement (placer/verify.h) and the calibration it feeds
// (placer/calibration_update.h), through optimize() on a small mlp and local
// workers (tapp-worker next to this test binary).
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/cluster_fingerprint.h"
#include "model/profile_cache.h"
#include "placer/optimize.h"
#include "model/layer_graph.h"
#include "placer/verify.h"
#include "simulator/calibration_store.h"
#include "tests/model/memory_profile_cache.h"

using nlohmann::json;
using namespace tapp;

namespace {

// An in-memory store for the job's profiles and the cluster's calibration.
using MemoryStore = test::MemoryProfileCache;

// mlp at batch 8 on three local devices; verification on (the default).
OptimizeRequest mlp_request(MemoryStore& store) {
  static const std::string cache = (std::filesystem::temp_directory_path() / "tapp-test-verify-cache").string();
  setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  json body = {{"model", "mlp"},
               {"cluster",
                {{"devices", json::array({json{{"name", "a"}, {"speed", 0.5}}, json{{"name", "b"}, {"speed", 0.5}},
                                          json{{"name", "c"}, {"speed", 1.0}}})}}},
               {"options", {{"iterations", 5}, {"batch_size", 8}, {"seed", 3}}}};
  auto r = optimize_request_from_json(body);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  r->profile_cache = &store;
  r->verify_run.timeout_s = 30;
  return r.value();
}

json run_optimize(const OptimizeRequest& request) {
  std::atomic<bool> cancel{false};
  auto r = optimize(request, nullptr, cancel);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  return r.value();
}

const json& plan_of(const json& verification, const std::string& role) {
  for (const json& p : verification["plans"])
    if (p["role"] == role) return p;
  FAIL("no plan with role " << role);
  static json none;
  return none;
}

std::string calibration_entry(const MemoryStore& store, const Cluster& c) {
  auto it = store.entries.find(calibration_key(cluster_fingerprint(c)));
  return it == store.entries.end() ? "" : it->second;
}

}  // namespace

TEST_CASE("optimize measures its best plan and the best baseline on the workers and reports the pairs") {
  MemoryStore store;
  const json r = run_optimize(mlp_request(store));
  CHECK(r["evaluator"] == "simulate");
  const json& v = r["verification"];
  CAPTURE(v.dump(2));
  REQUIRE(v["state"] == "verified");
  CHECK(v["steps"].get<int>() >= 1);
  REQUIRE(v["plans"].size() == 2);
  for (const json& p : v["plans"]) {
    REQUIRE(p["ok"] == true);
    const double predicted = p["predicted_ms"], measured = p["measured_ms"];
    CHECK(predicted > 0);
    CHECK(measured > 0);
    CHECK(p["relative_difference"].get<double>() == doctest::Approx((measured - predicted) / measured));
    CHECK(p["disagrees"] == (std::abs(measured - predicted) / measured > 0.10));
  }
  const json& best = plan_of(v, "best");
  const json& baseline = plan_of(v, "best_baseline");
  CHECK(best["name"] == r["source"]);
  CHECK(baseline["name"] == r["best_baseline"]);
  CHECK(best["predicted_ms"].get<double>() == doctest::Approx(r["predicted_step_ms"].get<double>()));
  CHECK(r["measured_step_ms"] == best["measured_ms"]);  // the best's measurement is the result's
  CHECK(v["disagrees"] == (best["disagrees"] == true || baseline["disagrees"] == true));
}

TEST_CASE("verify false skips the measurement and stores nothing") {
  MemoryStore store;
  OptimizeRequest request = mlp_request(store);
  request.verify = false;
  const json r = run_optimize(request);
  CHECK(r["verification"]["state"] == "off");
  CHECK(r["verification"]["plans"].empty());
  CHECK(r["verification"]["reason"].get<std::string>().find("--no-verify") != std::string::npos);
  CHECK(r["measured_step_ms"].is_null());
  CHECK(calibration_entry(store, request.cluster).empty());
}

TEST_CASE("a prediction more than 10% off the measurement is flagged") {
  MemoryStore store;
  OptimizeRequest request = mlp_request(store);
  // A deliberately wrong calibration: every predicted step pays a second the workers never spend.
  StoredCalibration wrong;
  wrong.cluster_fingerprint = cluster_fingerprint(request.cluster);
  wrong.timing_method = profile_timing_method();
  wrong.fitted_at = "2026-11-23T10:00:00Z";
  wrong.measurements = 3;
  wrong.calibration.step_overhead_ms = 1000;
  REQUIRE(save_calibration(store, wrong).is_ok());
  const json r = run_optimize(request);
  CHECK(r["calibration"]["kind"] == "fitted");
  const json& v = r["verification"];
  CAPTURE(v.dump(2));
  REQUIRE(v["state"] == "verified");
  const json& best = plan_of(v, "best");
  REQUIRE(best["ok"] == true);
  CHECK(best["predicted_ms"].get<double>() >= 1000);
  CHECK(best["measured_ms"].get<double>() < 500);  // mlp at batch 8 trains in milliseconds
  CHECK(best["relative_difference"].get<double>() < -0.10);
  CHECK(best["disagrees"] == true);
  CHECK(v["disagrees"] == true);
}

TEST_CASE("a failed measurement keeps the prediction and says why, and the job still succeeds") {
  MemoryStore store;
  OptimizeRequest request = mlp_request(store);
  request.verify_run.fault_rank = 0;  // the first worker of every run exits at its first step
  request.verify_run.fault_step = 0;
  request.verify_run.fault_mode = "exit";
  const json r = run_optimize(request);
  const json& v = r["verification"];
  CAPTURE(v.dump(2));
  CHECK(v["state"] == "verified");
  const json& best = plan_of(v, "best");
  CHECK(best["ok"] == false);
  CHECK(best["failure_kind"] == "worker_failed");
  CHECK_FALSE(best["message"].get<std::string>().empty());
  CHECK(best["measured_ms"].is_null());
  CHECK(best["predicted_ms"].get<double>() > 0);
  CHECK(best["disagrees"] == false);
  CHECK(r["measured_step_ms"].is_null());
  CHECK(r["predicted_step_ms"].get<double>() == doctest::Approx(best["predicted_ms"].get<double>()));
  CHECK_FALSE(v.contains("calibration"));  // nothing measured, nothing joins the calibration
  CHECK(calibration_entry(store, request.cluster).empty());
}

TEST_CASE("devices that cannot run here skip the verification with the reason") {
  MemoryStore store;
  SUBCASE("a device faster than this host") {
    // A plan that is only simulated may name one; measuring it here cannot, so verification is skipped.
    OptimizeRequest request = mlp_request(store);
    request.cluster.devices[2].speed = 2.0;
    CHECK(cannot_run_here(request.cluster) ==
          "devices[2].speed: 2 cannot be emulated on this host (device \"c\"; measurement needs speed <= 1)");
    PlanToVerify plan{"best", "single", {}, 5.0, std::nullopt};
    plan.placement.layer_group.assign(6, 0);
    plan.placement.group_device = {2};
    std::atomic<bool> cancel{false};
    Verification v = verify_plans(LayerGraph{}, request.cluster, 8, {plan}, VerifyOptions{}, cancel);
    CHECK(v.state == VerificationState::skipped);
    CHECK(v.reason.find("speed <= 1") != std::string::npos);
    CHECK(v.plans.empty());
    request.cluster.devices[2].speed = 1.0;
    CHECK(cannot_run_here(request.cluster).empty());
  }
  SUBCASE("a remote tapp-worker that cannot be reached") {
    OptimizeRequest request = mlp_request(store);
    for (Device& d : request.cluster.devices) d.where = "127.0.0.1:9";  // nothing listens on the discard port
    request.verify_run.timeout_s = 2;
    const json r = run_optimize(request);
    const json& v = r["verification"];
    CAPTURE(v.dump(2));
    CHECK(v["state"] == "skipped");
    CHECK(v["reason"].get<std::string>().find("a remote tapp-worker cannot be reached") != std::string::npos);
    CHECK(plan_of(v, "best")["failure_kind"] == "worker_unreachable");
    CHECK(plan_of(v, "best")["predicted_ms"].get<double>() > 0);
  }
}

TEST_CASE("the measured steps join the cluster's calibration and the next run predicts with the refit") {
  MemoryStore store;
  OptimizeRequest request = mlp_request(store);
  const json first = run_optimize(request);
  CHECK(first["calibration"]["kind"] == "default");
  const json& update = first["verification"]["calibration"];
  CAPTURE(update.dump(2));
  REQUIRE(update["stored"] == true);
  const int added = update["samples_added"];
  CHECK(added >= 1);
  CHECK(update["samples_kept"] == added);
  CHECK(update["fitted_from"] == added);

  // The stored record keeps the samples with the model they are of.
  const json record = json::parse(calibration_entry(store, request.cluster));
  CHECK(record["format"] == "tapp-calibration-v2");
  REQUIRE(record["workloads"].size() == 1);
  CHECK(record["workloads"][0]["batch_size"] == 8);
  CHECK(record["workloads"][0]["samples"].size() == static_cast<size_t>(added));

  // A fit from fewer than kMinMeasurementsToUse measurements is kept but not
  // used (it overfits); the runs add samples until the fit is used.
  int kept = added;
  for (int run = 2; run <= 6; ++run) {
    const json next = run_optimize(request);
    CAPTURE(next["calibration"].dump(2));
    if (kept < kMinMeasurementsToUse) {
      CHECK(next["calibration"]["kind"] == "default");
      CHECK(next["calibration"]["waiting"].get<std::string>().find("a fit from " + std::to_string(kept)) == 0);
    } else {
      CHECK(next["calibration"]["kind"] == "fitted");
      CHECK(next["calibration"]["measurements"] == kept);
      CHECK_FALSE(next["calibration"]["fitted_at"].get<std::string>().empty());
    }
    const json& update2 = next["verification"]["calibration"];
    CAPTURE(update2.dump(2));
    REQUIRE(update2["stored"] == true);
    CHECK(update2["fitted_from"].get<int>() > kept);  // the earlier runs' samples and this one's
    CHECK(update2["samples_kept"] == update2["fitted_from"]);
    const bool was_used = kept >= kMinMeasurementsToUse;
    kept = update2["fitted_from"];
    if (was_used) break;
  }
  CHECK(kept > kMinMeasurementsToUse);
}

TEST_CASE("a refused stored calibration is replaced by one fitted on the new measurements, and says so") {
  MemoryStore store;
  OptimizeRequest request = mlp_request(store);
  store.entries[calibration_key(cluster_fingerprint(request.cluster))] = "{\"format\": \"tapp-calibration-v1\"";
  const json r = run_optimize(request);
  CHECK(r["calibration"]["kind"] == "default");
  CHECK(r["calibration"]["refused"].get<std::string>().find("corrupt") != std::string::npos);
  const json& update = r["verification"]["calibration"];
  REQUIRE(update["stored"] == true);
  CHECK(update["replaced_refused"].get<std::string>().find("corrupt") != std::string::npos);
  const json again = run_optimize(request);
  CHECK_FALSE(again["calibration"].contains("refused"));  // the new record is read back
  const int fitted_from = update["fitted_from"];
  CHECK(again["calibration"]["kind"] == (fitted_from >= kMinMeasurementsToUse ? "fitted" : "default"));
}

TEST_CASE("the verification keeps to its time limit: fewer timed steps, or none with the reason") {
  Cluster one;
  one.devices = {Device{}};
  one.devices[0].name = "a";
  PlanToVerify slow{"best", "single", {}, 1000.0, std::nullopt};  // predicted 1 s a step
  slow.placement.layer_group = {0};
  slow.placement.group_device = {0};
  std::atomic<bool> cancel{false};
  VerifyOptions o;
  o.warmup_steps = 1;
  o.limit_s = 8;  // 1 + 3 steps of a predicted second (with its margin) do not fit; 1 + 1 do
  Verification fewer = verify_plans(LayerGraph{}, one, 8, {slow}, o, cancel);
  CHECK(fewer.state == VerificationState::verified);
  CHECK(fewer.warmup_steps == 1);
  CHECK(fewer.steps == 1);
  REQUIRE(fewer.plans.size() == 1);
  CHECK_FALSE(fewer.plans[0].ok());  // the empty test graph cannot run: a failure, as data
  CHECK(fewer.plans[0].predicted_ms == doctest::Approx(1000.0));

  o.limit_s = 2;
  o.limit_why = "a quarter of the time budget";
  Verification none = verify_plans(LayerGraph{}, one, 8, {slow}, o, cancel);
  CHECK(none.state == VerificationState::skipped);
  CHECK(none.reason.find("over the verification's limit of 2") != std::string::npos);
  CHECK(none.reason.find("a quarter of the time budget") != std::string::npos);
}

TEST_CASE("a second model's measurements join the same cluster's calibration with the first model's") {
  MemoryStore store;
  OptimizeRequest mlp = mlp_request(store);
  int mlp_samples = 0;
  for (int run = 0; run < 4 && mlp_samples < kMinMeasurementsToUse; ++run) {  // until the fit is used
    const json r = run_optimize(mlp);
    REQUIRE(r["verification"]["calibration"]["stored"] == true);
    mlp_samples = r["verification"]["calibration"]["samples_kept"];
  }
  REQUIRE(mlp_samples >= kMinMeasurementsToUse);

  OptimizeRequest other = mlp_request(store);  // the same cluster, another model
  other.model = "tiny_cnn_test";
  other.model_graph = json::parse(R"({
    "name": "tiny_cnn_test", "input_shape": [3, 8, 8],
    "layers": [
      {"name": "conv", "op": "conv2d", "inputs": [], "attrs": {"out": 4, "kernel": 3, "padding": 1}},
      {"name": "relu", "op": "relu", "inputs": ["conv"]},
      {"name": "flat", "op": "flatten", "inputs": ["relu"]},
      {"name": "fc", "op": "linear", "inputs": ["flat"], "attrs": {"out": 3}}
    ]})");
  const json second = run_optimize(other);
  CHECK(second["calibration"]["kind"] == "fitted");  // fitted on mlp's steps, used for this model too
  const json& update = second["verification"]["calibration"];
  CAPTURE(update.dump(2));
  REQUIRE(update["stored"] == true);
  // Both workloads are replayed: mlp's graph from the record, its layer costs from the cached profiles.
  CHECK(update["fitted_from"] == mlp_samples + update["samples_added"].get<int>());
  const json record = json::parse(calibration_entry(store, other.cluster));
  CHECK(record["workloads"].size() == 2);
}
