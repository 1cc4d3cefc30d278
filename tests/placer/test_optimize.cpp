// optimize(): one job end to end in simulate mode on a small model.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include <map>
#include <optional>

#include "placer/optimize.h"
#include "model/profile_cache.h"

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
               {"options", {{"iterations", iterations}, {"batch_size", 8}, {"seed", 3}}}};
  auto r = optimize_request_from_json(body);
  REQUIRE(r.is_ok());
  return r.value();
}
}  // namespace

TEST_CASE("an optimization job returns the best synchronous placement, its source, the baselines table and a timeline") {
  std::atomic<bool> cancel{false};
  std::vector<std::string> phases;
  int last_iteration = 0;
  auto r = optimize(small_request(30), [&](const ProgressEvent& e) {
    if (phases.empty() || phases.back() != e.phase) phases.push_back(e.phase);
    if (e.phase == "optimizing") last_iteration = e.iteration;
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
  CHECK(last_iteration >= 1);
  REQUIRE(phases.size() >= 3);
  CHECK(phases.back() == "done");
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
// An in-memory ProfileCache that records what the job reads and writes.
class RecordingCache : public ProfileCache {
 public:
  std::optional<std::string> get(const std::string& key) override {
    ++gets;
    auto it = entries.find(key);
    return it == entries.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  Status put(const std::string& key, const std::string& library_json) override {
    entries[key] = library_json;
    return Status::ok();
  }
  std::map<std::string, std::string> entries;
  int gets = 0;
};
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
