// tests/service/fake_job.cpp — a made-up but well-formed optimize() stand-in (see fake_job.h).
#include "fake_job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "model/zoo.h"

namespace tapp::testing {
using nlohmann::json;
using service::JobInput;

namespace {

struct FakeLayer {
  std::string name, op;
  double cost = 1;  // relative compute
};

std::vector<FakeLayer> fake_layers(const json& request) {
  std::vector<FakeLayer> layers;
  const json& model = request.value("model", json());
  if (model.is_string()) {
    Result<LayerGraph> g = zoo_model(model.get<std::string>());
    if (g) {
      for (const Layer& l : g->layers)
        layers.push_back({l.name, l.op, 1.0 + static_cast<double>(l.macs) / 1e7});
      return layers;
    }
  } else if (model.is_object() && model.contains("layers") && model["layers"].is_array()) {
    int i = 0;
    for (const json& l : model["layers"]) {
      std::string name = l.is_object() && l.contains("name") && l["name"].is_string() ? l["name"].get<std::string>()
                                                                                        : "layer" + std::to_string(i);
      std::string op = l.is_object() && l.contains("op") && l["op"].is_string() ? l["op"].get<std::string>() : "op";
      layers.push_back({name, op, 1.0 + (i % 3)});
      ++i;
    }
    if (!layers.empty()) return layers;
  }
  for (int i = 0; i < 8; ++i) layers.push_back({"layer" + std::to_string(i), i < 5 ? "conv2d" : "linear", 1.0 + i % 3});
  return layers;
}

std::vector<std::string> device_names(const json& request) {
  std::vector<std::string> names;
  if (request.contains("cluster") && request["cluster"].is_object() && request["cluster"].contains("devices") &&
      request["cluster"]["devices"].is_array())
    for (const json& d : request["cluster"]["devices"])
      if (d.is_object() && d.contains("name") && d["name"].is_string()) names.push_back(d["name"].get<std::string>());
  if (names.empty()) names = {"cpu0"};
  return names;
}

// GPipe fill-drain over `stages` (one per device) with per-stage forward cost.
json gpipe_timeline(const std::vector<double>& fwd_ms, int micro_batches, double transfer_ms, double& step_ms) {
  int s_count = static_cast<int>(fwd_ms.size());
  std::vector<std::vector<double>> f_end(s_count, std::vector<double>(micro_batches, 0));
  std::vector<double> device_free(s_count, 0);
  json timeline = json::array();
  for (int m = 0; m < micro_batches; ++m)
    for (int s = 0; s < s_count; ++s) {
      double ready = s == 0 ? 0 : f_end[s - 1][m] + transfer_ms;
      double start = std::max(ready, device_free[s]);
      double end = start + fwd_ms[s];
      f_end[s][m] = end;
      device_free[s] = end;
      timeline.push_back({{"device", s}, {"task", "F s" + std::to_string(s) + " m" + std::to_string(m)},
                          {"start_ms", start}, {"end_ms", end}});
      if (s > 0)
        timeline.push_back({{"device", s}, {"task", "X s" + std::to_string(s - 1) + "->s" + std::to_string(s) + " m" + std::to_string(m)},
                            {"start_ms", ready - transfer_ms}, {"end_ms", ready}});
    }
  std::vector<std::vector<double>> b_end(s_count, std::vector<double>(micro_batches, 0));
  for (int m = micro_batches - 1; m >= 0; --m)
    for (int s = s_count - 1; s >= 0; --s) {
      double ready = s == s_count - 1 ? f_end[s][micro_batches - 1] : b_end[s + 1][m] + transfer_ms;
      double start = std::max(ready, device_free[s]);
      double end = start + 2 * fwd_ms[s];
      b_end[s][m] = end;
      device_free[s] = end;
      timeline.push_back({{"device", s}, {"task", "B s" + std::to_string(s) + " m" + std::to_string(m)},
                          {"start_ms", start}, {"end_ms", end}});
    }
  step_ms = *std::max_element(device_free.begin(), device_free.end());
  return timeline;
}

json make_result(const json& request, double best_step_ms, int iterations, double elapsed_s) {
  std::vector<FakeLayer> layers = fake_layers(request);
  std::vector<std::string> devices = device_names(request);
  int d_count = static_cast<int>(std::min(devices.size(), layers.size()));
  // Contiguous split by cost into d_count groups.
  double total = 0;
  for (const FakeLayer& l : layers) total += l.cost;
  std::vector<int> group(layers.size());
  std::vector<double> stage_cost(d_count, 0);
  double acc = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    int g = std::min(d_count - 1, static_cast<int>(acc / total * d_count));
    group[i] = g;
    stage_cost[g] += layers[i].cost;
    acc += layers[i].cost;
  }
  int micro_batches = 4;
  std::vector<double> fwd_ms(d_count);
  for (int s = 0; s < d_count; ++s) fwd_ms[s] = std::max(0.05, stage_cost[s] / total * best_step_ms / 3.0 / micro_batches * 1.6);
  double step_ms = 0;
  json timeline = gpipe_timeline(fwd_ms, micro_batches, 0.02 * best_step_ms / micro_batches, step_ms);

  json placement{{"micro_batches", micro_batches}, {"schedule", "gpipe"}, {"source", "policy"},
                 {"groups", json::array()}, {"layers", json::object()}};
  for (int g = 0; g < d_count; ++g) placement["groups"].push_back(devices[g]);
  json layer_order = json::array();
  for (size_t i = 0; i < layers.size(); ++i) {
    placement["layers"][layers[i].name] = group[i];
    layer_order.push_back(layers[i].name);
  }
  json device_stats = json::array();
  for (int s = 0; s < d_count; ++s) {
    double busy = 3 * fwd_ms[s] * micro_batches;
    device_stats.push_back({{"device", devices[s]}, {"busy_ms", busy}, {"comm_ms", 0.05 * busy},
                            {"idle_ms", std::max(0.0, step_ms - 1.05 * busy)}, {"peak_memory_bytes", 1 << 26}});
  }
  json report{{"ok", true}, {"source", "simulate"}, {"step_ms", step_ms}, {"comm_fraction", 0.05},
              {"devices", device_stats}};
  double bsp = step_ms * 1.31, single = step_ms * 2.4, dp = step_ms * 1.02;
  json baselines = json::array();
  auto add = [&](const char* name, double ms, double comm) {
    baselines.push_back({{"name", name}, {"ok", true}, {"step_ms", ms}, {"speedup_vs_bsp", bsp / ms},
                         {"speedup_vs_best_baseline", dp / ms}, {"comm_fraction", comm}});
  };
  add("single", single, 0.0);
  add("bsp", bsp, 0.31);
  add("uniform", step_ms * 1.12, 0.06);
  add("dp", dp, 0.05);
  // Verification by measurement, made up like the rest: the best "measured"
  // 25% slower than predicted (flagged: over 10%), the best baseline 5%.
  auto checked = [](const char* role, const char* name, double predicted, double measured) {
    const double diff = (measured - predicted) / measured;
    return json{{"role", role},         {"name", name},      {"predicted_ms", predicted},
                {"measured_ms", measured}, {"relative_difference", diff}, {"disagrees", std::abs(diff) > 0.10},
                {"ok", true},           {"by_evaluator", false}};
  };
  json verification = {{"state", "verified"},
                        {"threshold", 0.10},
                        {"disagrees", true},
                        {"warmup_steps", 1},
                        {"steps", 3},
                        {"plans", json::array({checked("best", "policy", step_ms, step_ms * 1.25),
                                               checked("best_baseline", "dp", dp, dp * 1.05)})}};
  // The flat shape of placer's optimize() result (schemas/job.schema.json $defs/result).
  json result{{"fake", true},
              {"model", request.value("model", json()).is_string() ? request["model"] : json("inline")},
              {"layers", layers.size()},
              {"devices", devices.size()},
              {"evaluator", "simulate"},
              {"source", "policy"},
              {"placement", placement},
              {"layer_order", layer_order},
              {"predicted_step_ms", step_ms},
              {"measured_step_ms", step_ms * 1.25},
              {"step_ms", step_ms},
              {"comm_fraction", 0.05},
              {"speedup_vs_bsp", bsp / step_ms},
              {"speedup_vs_best_baseline", dp / step_ms},
              {"best_baseline", "dp"},
              {"baselines", baselines},
              {"policy", {{"found", true}, {"iterations", iterations}, {"step_ms", step_ms}}},
              {"report", report},
              {"timeline", timeline},
              {"verification", verification},
              {"elapsed_s", elapsed_s}};
  // options.allow_al: an AL row from the best's groups, made up as the rest (10% faster).
  const json options = request.value("options", json::object());
  if (options.is_object() && options.value("allow_al", false))
    result["al"] = {{"found", true}, {"from", "policy"}, {"step_ms", step_ms / 1.1}, {"micro_batches", micro_batches},
                    {"blocks", d_count}, {"cuts", json::array()}, {"target_width", 128},
                    {"speedup_vs_best", 1.1}, {"faster_than_best", true}, {"placement", placement},
                    {"candidates", 1}, {"refused", json::array()}};
  return result;
}

}  // namespace

JobFn make_fake_job(FakeJobOptions options) {
  return [options](const JobInput& input, const ProgressFn& progress, const std::atomic<bool>& cancel) -> Result<json> {
    auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    auto sleep_or_cancel = [&](int ms) {
      for (int waited = 0; waited < ms; waited += 10) {
        if (cancel.load()) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(std::min(10, ms - waited)));
      }
      return !cancel.load();
    };
    int iterations = options.default_iterations;
    if (input.request.contains("options") && input.request["options"].is_object())
      if (int it = input.request["options"].value("iterations", 0); it > 0) iterations = std::min(it, 100000);
    std::mt19937 rng(std::hash<std::string>{}(input.id));
    std::uniform_real_distribution<double> noise(0.0, 1.0);
    ProgressEvent e;
    e.total_iterations = iterations;
    e.phase = "profiling";
    progress(e);
    if (!sleep_or_cancel(options.iteration_ms)) return Status::error("cancelled");
    e.phase = "baselines";
    progress(e);
    if (!sleep_or_cancel(options.iteration_ms)) return Status::error("cancelled");
    double best = 0;
    e.phase = "optimizing";
    for (int i = 1; i <= iterations; ++i) {
      double step = 40.0 + 60.0 * std::exp(-4.0 * i / iterations) + 10 * noise(rng);
      if (best == 0 || step < best) best = step;
      e.iteration = i;
      e.best_step_ms = best;
      e.reward = -step / 100.0;
      e.elapsed_s = elapsed();
      progress(e);
      if (!sleep_or_cancel(options.iteration_ms)) return Status::error("cancelled");
    }
    if (options.fail) return Status::error("fake job failed on purpose");
    e.phase = "done";
    e.elapsed_s = elapsed();
    progress(e);
    return make_result(input.request, best, iterations, elapsed());
  };
}

}  // namespace tapp::testing
