// optimize(): one job end to end in simulate mode on a small model.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "placer/optimize.h"

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
