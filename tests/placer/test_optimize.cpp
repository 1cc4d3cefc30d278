// optimize(): one job end to end in simulate mode on a small model.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "core/cluster.h"
#include "core/cluster_fingerprint.h"
#include "model/layer_library.h"
#include "model/profile_cache.h"
#include "model/zoo.h"
#include "placer/baselines.h"
#include "placer/measurer.h"
#include "placer/optimize.h"
#include "simulator/calibration_store.h"
#include "simulator/cost_model.h"
#include "simulator/simulator_evaluator.h"
#include "tests/model/memory_profile_cache.h"

using nlohmann::json;
using namespace tapp;

namespace {
OptimizeRequest small_request(int iterations) {
  // Profiles go to a temporary cache, not the user's.
  static const std::string cache = (std::filesystem::temp_directory_path() / "tapp-test-placer-cache").string();
  setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  json body = {{"model", "mlp"},
               {"cluster",
                {{"devices", json::array({json{{"name", "a"}, {"speed", 0.5}}, json{{"name", "b"}, {"speed", 0.25}},
                                          json{{"name", "c"}, {"speed", 0.25}}})}}},
               // Simulation only: these tests are about the search and the result; verification by
               // measurement on the workers has its own tests (test_verify.cpp).
               {"options", {{"iterations", iterations}, {"batch_size", 8}, {"seed", 3}, {"verify", false}}}};
  auto r = optimize_request_from_json(body);
  REQUIRE(r.is_ok());
  return r.value();
}
}  // namespace

TEST_CASE("an optimization job returns the best synchronous placement, its source, the baselines table and a timeline") {
  std::atomic<bool> cancel{false};
  std::vector<std::string> phases, planners_started;
  int last_iteration = 0;
  auto r = optimize(small_request(30), [&](const ProgressEvent& e) {
    if (phases.empty() || phases.back() != e.phase) phases.push_back(e.phase);
    if (e.phase == "optimizing") last_iteration = e.iteration;
    if (e.phase == "baselines" && !e.message.empty()) planners_started.push_back(e.message);
  }, cancel);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  const json& j = r.value();
  CHECK(j["model"] == "mlp");
  CHECK(j["evaluator"] == "simulate");
  CHECK(j["step_ms"].get<double>() > 0);
  CHECK(j["predicted_step_ms"].is_number());
  CHECK(j["measured_step_ms"].is_null());
  CHECK(j["placement"].is_object());
  CHECK_FALSE(j["source"].get<std::string>().empty());
  CHECK(j["timeline"].is_array());
  CHECK(j["policy"]["found"] == true);
  CHECK(j["policy"]["step_ms"].get<double>() >= j["step_ms"].get<double>());
  CHECK(j["policy"]["placement"].is_object());
  bool has_bsp = false, has_dp = false;
  for (const auto& b : j["baselines"]) {
    has_bsp = has_bsp || b["name"] == "bsp";
    has_dp = has_dp || b["name"] == "dp";
    if (b["ok"] == true && b["name"] != "hogwild") {  // asynchronous: shown, never the result
      CHECK(b["step_ms"].get<double>() >= j["step_ms"].get<double>());
      CHECK(b["speedup_vs_best_baseline"].get<double>() <= 1.0 + 1e-9);
    }
  }
  CHECK(j["source"] != "hogwild");
  CHECK(has_bsp);
  CHECK(has_dp);
  // A progress line as each baseline planner starts, GPipe's rows then the pipelines' 1F1B ones.
  REQUIRE(planners_started.size() > j["baselines"].size());
  CHECK(planners_started.front().rfind("single (1 of ", 0) == 0);
  CHECK(planners_started.back().find(", 1f1b (" + std::to_string(planners_started.size()) + " of " +
                                     std::to_string(planners_started.size()) + ")") != std::string::npos);
  CHECK(last_iteration >= 1);
  REQUIRE(phases.size() >= 3);
  CHECK(phases.back() == "done");
  // Nothing runs on the workers without verification: no "verifying" phase.
  CHECK(std::find(phases.begin(), phases.end(), "verifying") == phases.end());
}

TEST_CASE("a cancelled job returns promptly with an error") {
  std::atomic<bool> cancel{false};
  auto t0 = std::chrono::steady_clock::now();
  auto r = optimize(small_request(100000), [&](const ProgressEvent& e) {
    if (e.phase == "optimizing" && e.iteration == 5) cancel = true;
  }, cancel);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error_message() == "cancelled");
  (void)t0;
}

TEST_CASE("a job with an unknown model names the field") {
  std::atomic<bool> cancel{false};
  OptimizeRequest req = small_request(5);
  req.model = "no_such_model";
  auto r = optimize(req, nullptr, cancel);
  REQUIRE_FALSE(r.is_ok());
  CHECK(r.error_message().rfind("model: ", 0) == 0);
}

namespace {
// A zoo model on an example cluster, multiply-add costs, simulated at batch 32.
struct ZooOnExample {
  ZooOnExample(const std::string& model, const std::string& cluster_file)
      : graph(*zoo_model(model)),
        cluster(*load_cluster(std::string(TAPP_SOURCE_DIR) + "/examples/" + cluster_file)),
        cost(*CostModel::build(graph, cluster, estimated_library(graph, 32))),
        evaluator(graph, cluster, cost, 32) {}
  const LayerGraph graph;
  const Cluster cluster;
  const CostModel cost;
  SimulatorEvaluator evaluator;
};
}  // namespace

TEST_CASE("a job's baselines also plan for 1F1B, each row keeping the faster plan") {
  // gpt2 at batch 32 on two 4 GB devices: every GPipe plan recomputes (each micro-batch's
  // activations kept until its backward); on 1F1B at most as many as stages are, and no group need.
  ZooOnExample p("gpt2", "cluster_fast_and_slow.json");
  BaselineOptions bo;
  bo.planners = {"dp", "pipedream", "bsp"};
  const std::vector<BaselineResult> gpipe = run_baselines(p.graph, p.cluster, p.cost, p.evaluator, bo);
  bo.both_schedules = true;
  const std::vector<BaselineResult> both = run_baselines(p.graph, p.cluster, p.cost, p.evaluator, bo);
  REQUIRE(gpipe.size() == 3);
  REQUIRE(both.size() == 3);
  for (int k = 0; k < 2; ++k) {  // dp, pipedream
    CAPTURE(gpipe[k].name);
    REQUIRE(gpipe[k].report.ok);
    REQUIRE(both[k].report.ok);
    CHECK(gpipe[k].placement->schedule == Schedule::gpipe);
    CHECK(gpipe[k].placement->recomputes(0));
    CHECK(both[k].placement->schedule == Schedule::one_f_one_b);
    CHECK(both[k].report.step_ms < 0.9 * gpipe[k].report.step_ms);
  }
  CHECK(both[2].report.ok == gpipe[2].report.ok);  // data parallelism has no pipeline schedule
  CHECK(both[2].report.step_ms == gpipe[2].report.step_ms);
}

TEST_CASE("timed 1F1B runs a plan whose device holds copies of two groups faster than 1F1B's unit steps") {
  // resnet50 at batch 4 on a LAN cluster of five devices: the convolutions
  // to layer4.0 copied on d2, d1, d3 (weighed 2:1:1), the rest on d3 and d4
  // (3:1). d3 runs copies of both groups; in 1F1B's unit steps it waits for
  // d4's gradient while a forward's input is there.
  const LayerGraph graph = *zoo_model("resnet50");
  Cluster cluster;
  for (double speed : {0.206, 0.449, 0.765, 0.584, 0.225})
    cluster.devices.push_back(Device{"d" + std::to_string(cluster.devices.size()), "cpu", 1, 8192, speed});
  cluster.default_link.bandwidth_mbps = 33077;
  cluster.default_link.latency_ms = 0.099;
  const CostModel cost = *CostModel::build(graph, cluster, estimated_library(graph, 4));
  SimulatorEvaluator evaluator(graph, cluster, cost, 4);
  Placement two;
  const int tail = graph.index_of("layer4.1.conv1");
  REQUIRE(tail > 0);
  for (int i = 0; i < static_cast<int>(graph.layers.size()); ++i) two.layer_group.push_back(i < tail ? 0 : 1);
  two.group_device = {2, 3};
  two.group_replicas = {{1, 3}, {4}};
  two.group_replica_weights = {{2, 1, 1}, {3, 1}};
  two.micro_batches = 4;
  two.schedule = Schedule::one_f_one_b;
  const StepReport unit = evaluator.evaluate(two);
  two.schedule = Schedule::timed_1f1b;
  const StepReport timed = evaluator.evaluate(two);
  REQUIRE(unit.ok);
  REQUIRE(timed.ok);
  CHECK(timed.step_ms < 0.8 * unit.step_ms);
}

TEST_CASE("the baselines say which planner starts and how far through the table they are") {
  // vgg16 on eight devices: exhaustive's space is over its limit, so its row is
  // skipped and does not run again for 1F1B; the count shrinks once that is known.
  ZooOnExample p("vgg16", "cluster_8equal.json");
  BaselineOptions bo;
  bo.planners = {"dp", "exhaustive", "bsp"};
  bo.both_schedules = true;
  std::vector<std::pair<std::string, double>> seen;
  bo.progress_every_s = 1e9;  // the starts only (the next test counts evaluations)
  bo.progress = [&](const std::string& message, double fraction) { seen.emplace_back(message, fraction); };
  const std::vector<BaselineResult> rows = run_baselines(p.graph, p.cluster, p.cost, p.evaluator, bo);
  REQUIRE(rows.size() == 3);
  CHECK(rows[1].skipped);
  const std::vector<std::pair<std::string, double>> want = {
      {"dp (1 of 5)", 0.0}, {"exhaustive (2 of 5)", 0.2}, {"bsp (3 of 5)", 0.4}, {"dp, 1f1b (4 of 4)", 0.75}};
  REQUIRE(seen.size() == want.size());
  for (size_t k = 0; k < want.size(); ++k) {
    CHECK(seen[k].first == want[k].first);
    CHECK(seen[k].second == doctest::Approx(want[k].second));
  }
}

TEST_CASE("random search and annealing say how much of their budget they have spent") {
  ZooOnExample p("alexnet", "cluster_4hetero.json");
  BaselineOptions bo;
  bo.planners = {"random", "anneal"};
  bo.search_budget = 40;
  bo.progress_every_s = 0;  // every evaluation
  std::vector<std::pair<std::string, double>> seen;
  bo.progress = [&](const std::string& message, double fraction) { seen.emplace_back(message, fraction); };
  run_baselines(p.graph, p.cluster, p.cost, p.evaluator, bo);
  auto said = [&](const std::string& message) {
    for (const auto& [m, f] : seen)
      if (m == message) return f;
    return -1.0;
  };
  CHECK(said("random (1 of 2)") == doctest::Approx(0.0));
  CHECK(said("random (1 of 2): 20 of 40 evaluations") == doctest::Approx(0.25));
  CHECK(said("random (1 of 2): 40 of 40 evaluations") == doctest::Approx(0.5));
  CHECK(said("anneal (2 of 2)") == doctest::Approx(0.5));
  CHECK(said("anneal (2 of 2): 1 of 40 evaluations") == doctest::Approx(0.5125));
  CHECK(said("anneal (2 of 2): 40 of 40 evaluations") == doctest::Approx(1.0));
  for (size_t k = 1; k < seen.size(); ++k) CHECK(seen[k].second >= seen[k - 1].second);
}

TEST_CASE("a job where no placement fits says why: the layer no device holds, else a planner's reason") {
  // Three 2048 x 2048 layers (48 MiB of training state each) after a small one.
  json layers = json::array({json{{"name", "fc0"}, {"op", "linear"}, {"inputs", json::array()},
                                  {"attrs", {{"out", 2048}}}}});
  for (const char* name : {"fc1", "fc2", "fc3"})
    layers.push_back({{"name", name}, {"op", "linear"}, {"inputs", {layers.back()["name"]}}, {"attrs", {{"out", 2048}}}});
  std::vector<std::string> phases;
  auto job = [&](int memory_mb, int b_memory_mb = 0, bool baselines = true) {
    phases.clear();
    json devices = json::array();
    for (const char* name : {"a", "b"})
      devices.push_back({{"name", name}, {"memory_mb", *name == 'b' && b_memory_mb ? b_memory_mb : memory_mb}});
    json body = {{"model", {{"name", "wide"}, {"input_shape", {16}}, {"layers", layers}}},
                 {"cluster", {{"devices", devices}}},
                 {"options", {{"iterations", 5}, {"batch_size", 4}, {"verify", false}, {"costs", "estimated"},
                              {"baselines", baselines}}}};
    auto req = optimize_request_from_json(body);
    REQUIRE_MESSAGE(req.is_ok(), req.error_message());
    std::atomic<bool> cancel{false};
    return optimize(req.value(), [&](const ProgressEvent& e) { phases.push_back(e.phase); }, cancel);
  };
  auto reached = [&](const char* phase) { return std::count(phases.begin(), phases.end(), phase) > 0; };
  // 32 MiB devices: fc1 fits neither; the error names it and the largest device, before any search.
  auto none = job(32);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.error_message().rfind("no placement fits", 0) == 0);
  CHECK(none.error_message().find("layer 'fc1'") != std::string::npos);
  CHECK(none.error_message().find("memory_mb 32") != std::string::npos);
  CHECK_FALSE(reached("baselines"));
  CHECK_FALSE(reached("optimizing"));
  // 80 and 40 MiB: only a holds fc1, fc2 or fc3, and their training state alone takes 144 MiB:
  // said before profiling, naming the layers, the device and its memory.
  auto crowded = job(80, 40);
  REQUIRE_FALSE(crowded.is_ok());
  CHECK_MESSAGE(crowded.error_message().rfind("no placement fits: 3 layers 'fc1', 'fc2', 'fc3' fit only on 'a'", 0) == 0,
                crowded.error_message());
  CHECK(crowded.error_message().find("it has memory_mb 80") != std::string::npos);
  CHECK(phases.empty());
  // 96 MiB devices: each layer fits one, but no device holds two of the three (their buffers
  // besides the training state): the memory's necessary conditions hold, the DP planner says so.
  auto split = job(96);
  REQUIRE_FALSE(split.is_ok());
  CHECK(split.error_message().rfind("no placement fits", 0) == 0);
  CHECK(split.error_message().find("(dp: ") != std::string::npos);
  CHECK(split.error_message().find("needs") == std::string::npos);  // not the bound's per-layer reason
  CHECK(reached("optimizing"));  // found out by the search
  MESSAGE(split.error_message());
  // With the baselines off the search alone fails; the DP planner still says why.
  auto alone = job(96, 0, false);
  REQUIRE_FALSE(alone.is_ok());
  CHECK_MESSAGE(alone.error_message().rfind("no placement fits: every candidate of the search failed (baselines off) (dp: ", 0) == 0,
                alone.error_message());
  CHECK_FALSE(reached("baselines"));
}

namespace {
// An in-memory ProfileCache that records what the job reads and writes.
using RecordingCache = test::MemoryProfileCache;
}  // namespace

TEST_CASE("a job keeps its measured profiles (micro-batch sizes 1 to 8) in the cache the request names, and reuses them") {
  RecordingCache cache;
  OptimizeRequest request = small_request(5);
  request.model = "vgg5";  // not in the test's file cache
  request.profile_cache = &cache;
  std::atomic<bool> cancel{false};
  auto first = optimize(request, nullptr, cancel);
  REQUIRE_MESSAGE(first.is_ok(), first.error_message());
  CHECK(first.value()["profile"]["origin"] == "profiled");
  REQUIRE(cache.entries.size() == 4);  // batch 8: profiles at 1, 2, 4 and 8
  for (const auto& entry : cache.entries) CHECK(entry.first.rfind("vgg5-", 0) == 0);
  CHECK(first.value()["profile"]["batch_sizes"] == json::array({1, 2, 4, 8}));
  auto second = optimize(request, nullptr, cancel);
  REQUIRE(second.is_ok());
  CHECK(second.value()["profile"]["origin"] == "cache");
}

TEST_CASE("a model that cannot train one sample at a time is profiled at the other micro-batch sizes") {
  // A BatchNorm on a 1x1 map: training needs more than one value per channel.
  OptimizeRequest request = small_request(5);
  request.model = "bn_on_1x1_test";
  request.model_graph = json::parse(R"({
    "name": "bn_on_1x1_test", "input_shape": [3, 4, 4],
    "layers": [
      {"name": "conv", "op": "conv2d", "inputs": [], "attrs": {"out": 8, "kernel": 4}},
      {"name": "bn", "op": "batchnorm2d", "inputs": ["conv"]},
      {"name": "flat", "op": "flatten", "inputs": ["bn"]},
      {"name": "fc", "op": "linear", "inputs": ["flat"], "attrs": {"out": 3}}
    ]})");
  RecordingCache cache;
  request.profile_cache = &cache;
  std::atomic<bool> cancel{false};
  auto r = optimize(request, nullptr, cancel);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  const json& profile = r.value()["profile"];
  CHECK(profile["origin"] == "profiled");  // not the multiply-add estimate
  CHECK(profile["batch_sizes"] == json::array({2, 4, 8}));
  REQUIRE(profile["skipped"].size() == 1);
  CHECK(profile["skipped"][0]["batch_size"] == 1);
  CHECK(profile["skipped"][0]["error"].get<std::string>().find("value per channel") != std::string::npos);
}

TEST_CASE("a job profiles micro-batch sizes above 8, up to its batch, when that is cheap") {
  RecordingCache cache;
  OptimizeRequest request = small_request(5);
  request.model = "vgg5";
  request.batch_size = 32;
  request.profile_cache = &cache;
  std::atomic<bool> cancel{false};
  auto r = optimize(request, nullptr, cancel);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  // vgg5 (CIFAR size) trains a batch of 32 in milliseconds: every size is measured, none extrapolated.
  CHECK(r.value()["profile"]["batch_sizes"] == json::array({1, 2, 4, 8, 16, 32}));
  CHECK(cache.entries.size() == 6);
}

TEST_CASE("proposals over a device's memory are counted where layers moved to fit them") {
  // mlp's fc1 (3072 x 512) holds 19 MB of training state; the fast device has 8 MB, so every
  // proposal that puts fc1 there fits only with layers moved (core/memory_fit.h).
  OptimizeRequest request = small_request(30);
  request.cluster.devices[0].speed = 1.0;
  request.cluster.devices[0].memory_mb = 8;
  std::atomic<bool> cancel{false};
  auto r = optimize(request, nullptr, cancel);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  const json& policy = r.value()["policy"];
  CHECK(policy["moved_to_fit"].get<int64_t>() > 0);
  CHECK(policy["moved_to_fit"].get<int64_t>() <= policy["evaluations"].get<int64_t>());
  CHECK(policy["policy_failures"].get<int64_t>() <= policy["failures"].get<int64_t>());
  CHECK(policy["policy_moved_to_fit"].get<int64_t>() <= policy["moved_to_fit"].get<int64_t>());
  CHECK(policy["found"] == true);
}

namespace {
std::set<std::string> keys_of(const json& j) {
  std::set<std::string> keys;
  for (auto it = j.begin(); it != j.end(); ++it) keys.insert(it.key());
  return keys;
}
}  // namespace

TEST_CASE("the result JSON written by the phases has the keys the page and the job schema read") {
  std::atomic<bool> cancel{false};
  auto r = optimize(small_request(5), nullptr, cancel);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  const json& j = r.value();
  // The keys of the result before optimize() was split into phases, plus
  // layer_order (which the server used to add by loading the model again) and
  // the calibration the predictions used.
  CHECK(keys_of(j) == std::set<std::string>{"model", "layers", "layer_order", "calibration", "cluster", "devices", "batch_size",
                                            "evaluator", "seed", "profile", "source", "placement", "groups",
                                            "predicted_step_ms", "measured_step_ms", "step_ms", "comm_fraction",
                                            "speedup_vs_bsp", "speedup_vs_best_baseline", "best_baseline",
                                            "baselines", "policy", "report", "timeline", "verification",
                                            "elapsed_s",
                                            // how good is good (placer/result_bounds.h)
                                            "lower_bound_ms", "lower_bound", "gap_to_bound", "subspace_optima"});
  CHECK(j["lower_bound_ms"].get<double>() > 0);
  CHECK(j["lower_bound_ms"].get<double>() <= j["step_ms"].get<double>());
  CHECK(j["gap_to_bound"].get<double>() >= 0);
  CHECK(keys_of(j["profile"]) == std::set<std::string>{"origin", "measured", "batch_size", "batch_sizes", "skipped"});
  CHECK(keys_of(j["policy"]) ==
        std::set<std::string>{"found", "step_ms", "refined_step_ms", "refine_evaluations", "policy_elapsed_s",
                              "speedup_vs_bsp", "speedup_vs_best_baseline", "refined_speedup_vs_bsp",
                              "refined_speedup_vs_best_baseline", "iterations", "evaluations", "failures",
                              "policy_failures", "moved_to_fit", "policy_moved_to_fit",
                              "stop_reason", "elapsed_s", "time_to_within_5pct_s", "trace", "restarts",
                              "evaluations_before_imitation", "started_from",
                              "zero_shot_step_ms", "zero_shot_climbed_step_ms", "placement",
                              "refined_placement"});
  CHECK(j["layer_order"] == json::array({"flatten", "fc1", "relu1", "fc2", "relu2", "fc3"}));
  for (const json& b : j["baselines"]) {
    CAPTURE(b.dump());
    std::set<std::string> expected = {"name", "ok", "step_ms", "speedup_vs_bsp", "speedup_vs_best_baseline",
                                      "gap_to_bound", "optimal_within"};
    if (b["ok"] == true) {
      expected.insert({"comm_fraction", "micro_batches", "groups", "placement"});
    } else {
      expected.insert({"failure_kind", "message"});
      if (b.contains("skipped")) expected.insert("skipped");
    }
    CHECK(keys_of(b) == expected);
  }
}

TEST_CASE("a job reports its profiling per micro-batch size and per layer, with a message and how far it is") {
  RecordingCache cache;
  OptimizeRequest request = small_request(2);
  request.model = "vgg5";
  request.profile_cache = &cache;
  std::atomic<bool> cancel{false};
  std::set<std::string> messages;
  double last_fraction = 0;
  bool fraction_monotonic = true;
  auto r = optimize(request, [&](const ProgressEvent& e) {
    if (e.phase != "profiling") return;
    messages.insert(e.message);
    fraction_monotonic = fraction_monotonic && e.phase_fraction >= last_fraction;
    last_fraction = e.phase_fraction;
  }, cancel);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  const int layers = r.value()["layers"];
  // Batch 8: sizes 1, 2, 4, 8, each started, then each layer, then the whole step.
  CHECK(messages.size() == 4 * (1 + layers + 1));
  CHECK(messages.count("cpu x1, micro-batch size 4 (3/4): starting") == 1);
  CHECK(messages.count("cpu x1, micro-batch size 2 (2/4): layer 1/" + std::to_string(layers) + " conv1") == 1);
  CHECK(fraction_monotonic);
  CHECK(last_fraction > 0.9);
}

TEST_CASE("optimize predicts with the calibration stored for its cluster and says which one it used") {
  std::atomic<bool> cancel{false};
  OptimizeRequest request = small_request(5);
  RecordingCache store;  // profiles and the calibration
  request.profile_cache = &store;
  auto plain = optimize(request, nullptr, cancel);
  REQUIRE_MESSAGE(plain.is_ok(), plain.error_message());
  CHECK(plain.value()["calibration"] == json{{"kind", "default"}});
  // The profiles are cached in `store`, so every run below predicts from the
  // same costs: a fixed bound on this one (mlp at batch 8 takes milliseconds)
  // failed on a loaded host (1,478 ms profiled at nice 19 beside two benches).
  const double plain_ms = plain.value()["step_ms"].get<double>();

  StoredCalibration fitted;
  fitted.cluster_fingerprint = cluster_fingerprint(request.cluster);
  fitted.timing_method = profile_timing_method();
  fitted.fitted_at = "2026-11-23T10:00:00Z";
  fitted.measurements = 6;
  fitted.calibration.step_overhead_ms = 1000;  // every predicted step pays it
  REQUIRE(save_calibration(store, fitted).is_ok());
  auto calibrated = optimize(request, nullptr, cancel);
  REQUIRE_MESSAGE(calibrated.is_ok(), calibrated.error_message());
  CHECK(calibrated.value()["calibration"]["kind"] == "fitted");
  CHECK(calibrated.value()["calibration"]["measurements"] == 6);
  CHECK(calibrated.value()["calibration"]["fitted_at"] == "2026-11-23T10:00:00Z");
  CHECK(calibrated.value()["step_ms"].get<double>() >= 1000);  // every plan pays the 1,000 ms

  fitted.timing_method = profile_timing_method() + 1;  // measured another way: refused, never used
  REQUIRE(save_calibration(store, fitted).is_ok());
  auto refused = optimize(request, nullptr, cancel);
  REQUIRE_MESSAGE(refused.is_ok(), refused.error_message());
  CHECK(refused.value()["calibration"]["kind"] == "default");
  CHECK(refused.value()["calibration"]["refused"].get<std::string>().find("timing_method") != std::string::npos);
  CHECK(refused.value()["step_ms"].get<double>() == doctest::Approx(plain_ms));
}

TEST_CASE("a plan for a device faster than this host is simulated, and its verification is skipped with the reason") {
  OptimizeRequest request = small_request(5);
  request.cluster.devices[2].speed = 4;  // "c": four times this host
  request.verify = true;
  std::atomic<bool> cancel{false};
  auto r = optimize(request, [](const ProgressEvent&) {}, cancel);
  REQUIRE_MESSAGE(r.is_ok(), r.error_message());
  const json& j = r.value();
  CHECK(j["step_ms"].get<double>() > 0);
  CHECK(j["verification"]["state"] == "skipped");
  CHECK(j["verification"]["reason"] ==
        "devices[2].speed: 4 cannot be emulated on this host (device \"c\"; measurement needs speed <= 1)");
}
