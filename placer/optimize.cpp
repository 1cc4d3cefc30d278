// placer/optimize.cpp — one optimization job end to end (see optimize.h).
//
// Phases: load the model -> layer libraries at micro-batch sizes 1..8 (profile
// cache or measured; else estimated from multiply-adds) -> evaluator (simulate | measure | hybrid) ->
// classical baselines through that evaluator -> TAPP search -> verification
// (hybrid: measure the best) -> result JSON. Every exception from LibTorch,
// JSON or the runtime is caught here and returned as a Status.
#include "placer/optimize.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>

#include "placer/baselines.h"
#include "placer/hybrid_evaluator.h"
#include "core/placement.h"
#include "planners/planners.h"
#include "placer/search.h"
#include "simulator/simulator_evaluator.h"
#include "model/layer_library.h"
#include "model/model_json.h"
#include "profiler/profiler.h"
#include "model/zoo.h"
#include "profiler/model_loader.h"
#include "simulator/cost_model.h"
#include "runtime/measure_evaluator.h"
#include "runtime/runtime.h"
#include "simulator/simulator.h"

namespace tapp {

using nlohmann::json;

namespace {

struct Clock {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};

Result<LayerGraph> load_request_model(const OptimizeRequest& r) {
  if (!r.model_graph.is_null()) {
    Result<LayerGraph> g = model_from_json(r.model_graph);
    if (!g) return g.status().with_context("model");
    return g;
  }
  ModelOptions mo;
  mo.input_size = r.input_size;
  mo.num_classes = r.num_classes;
  Result<LayerGraph> g = load_model(r.model, mo);
  if (!g) return g.status().with_context("model");
  return g;
}

// The profiles for the job: one per micro-batch size 1, 2, 4, ... up to the
// batch, so the cost model interpolates between measured sizes instead of
// assuming a micro-batch of 1 costs 1/32 of a batch of 32 (on a CPU it costs
// several times that). Sizes up to kAlwaysProfiledBatch are always profiled;
// larger ones (up to the full batch) when cached, or when profiling them is
// expected to take at most kLargeProfileBudgetS in all (a profile costs about
// 8 whole steps; above that the cost model extrapolates, which overestimates
// models whose per-sample cost still falls with the batch: inception_v3 at
// 75x75, batch 16, was predicted at twice its measured single-device step).
// Each comes from the cache or is measured (1 thread, 1 warm-up + median of 3)
// and cached. A size that cannot be profiled is skipped (e.g. one sample
// through a BatchNorm on a 1x1 map, which training cannot run; the search
// never proposes it either) and named in `skipped`; if no size can be, the
// estimate from multiply-adds.
constexpr int64_t kAlwaysProfiledBatch = 8;
constexpr double kLargeProfileBudgetS = 30;

std::vector<LayerLibrary> job_libraries(const LayerGraph& g, const OptimizeRequest& r, std::string& origin,
                                        json& skipped, const ProgressFn& progress, const Clock& clock) {
  FileProfileCache file_cache(default_cache_dir());
  ProfileCache& cache = r.profile_cache ? *r.profile_cache : file_cache;
  std::vector<LayerLibrary> libs;
  int measured = 0;
  double large_spent_s = 0;
  for (int64_t b : profile_batch_sizes(r.batch_size)) {
    if (auto hit = cached_library(cache, g, "cpu", 1, b)) {
      libs.push_back(std::move(*hit));
      continue;
    }
    if (b > kAlwaysProfiledBatch) {
      const double expected_s = libs.empty() ? kLargeProfileBudgetS + 1
                                             : 8.0 * libs.back().whole_step_ms / 1e3 * b / libs.back().batch_size;
      if (large_spent_s + expected_s > kLargeProfileBudgetS) continue;  // a cached larger size is still used
    }
    if (progress) progress({"profiling", 0, 0, 0, 0, clock.s()});
    ProfileOptions po;
    po.threads = 1;
    po.batch_size = b;
    po.warmup_runs = 1;
    po.runs = 3;
    po.seed = r.seed;
    const double t0 = clock.s();
    Result<LayerLibrary> lib = profile_cached(g, po, &cache);
    if (b > kAlwaysProfiledBatch) large_spent_s += clock.s() - t0;
    if (!lib || lib->rows.size() != g.layers.size()) {
      skipped.push_back({{"batch_size", b}, {"error", lib ? "profile has the wrong number of layers" : lib.error_message()}});
      continue;
    }
    libs.push_back(std::move(lib.value()));
    ++measured;
  }
  if (libs.empty()) {
    origin = "estimated";
    return {estimated_library(g, r.batch_size)};
  }
  origin = measured ? "profiled" : "cache";
  return libs;
}

json baseline_row(const std::string& name, const StepReport& r) {
  json row = {{"name", name}, {"ok", r.ok}};
  if (r.ok) {
    row["step_ms"] = r.step_ms;
    row["comm_fraction"] = r.comm_fraction;
  } else {
    row["step_ms"] = nullptr;
    row["failure_kind"] = failure_kind_name(r.failure_kind);
    row["message"] = r.message;
  }
  return row;
}

// Per group in layer order: its device and its layers (first, last, count);
// data parallel: one row per replica, each with every layer.
json groups_summary(const Placement& p, const LayerGraph& g, const Cluster& c) {
  json out = json::array();
  if (p.is_data_parallel()) {
    for (int r = 0; r < p.num_groups(); ++r)
      out.push_back({{"group", r},
                     {"device", c.devices.at(p.group_device[r]).name},
                     {"first_layer", g.layers.front().name},
                     {"last_layer", g.layers.back().name},
                     {"layers", g.layers.size()},
                     {"replica", true}});
    return out;
  }
  std::vector<int> order;
  std::vector<std::vector<int>> members(p.num_groups());
  for (size_t i = 0; i < g.layers.size(); ++i) {
    int gi = p.layer_group[i];
    if (members[gi].empty()) order.push_back(gi);
    members[gi].push_back(static_cast<int>(i));
  }
  for (int gi : order)
    out.push_back({{"group", gi},
                   {"device", c.devices.at(p.group_device[gi]).name},
                   {"first_layer", g.layers[members[gi].front()].name},
                   {"last_layer", g.layers[members[gi].back()].name},
                   {"layers", members[gi].size()}});
  return out;
}

// HOGWILD trains asynchronously (other semantics than synchronous SGD): it is
// shown in the table but is never the job's result nor the reference baseline.
bool asynchronous(const std::string& baseline) { return baseline == "hogwild"; }

// First time the best-so-far came within 5% of the final best.
double time_to_within(const std::vector<TracePoint>& trace, double final_ms, double fraction) {
  for (const auto& t : trace)
    if (t.best_step_ms <= final_ms * (1 + fraction)) return t.elapsed_s;
  return trace.empty() ? 0 : trace.back().elapsed_s;
}

Result<json> run_job(const OptimizeRequest& req, const ProgressFn& progress, const std::atomic<bool>& cancel) {
  Clock clock;
  auto report = [&](const std::string& phase, int it, int total, double best, double reward) {
    if (progress) progress({phase, it, total, best, reward, clock.s()});
  };
  if (req.cluster.devices.empty()) return Status::error("cluster.devices: must name at least one device");
  if (req.batch_size < 1) return Status::error("options.batch_size: must be at least 1");
  Result<LayerGraph> graph_r = load_request_model(req);
  if (!graph_r) return graph_r.status();
  const LayerGraph graph = std::move(graph_r.value());
  const Cluster& cluster = req.cluster;

  std::string library_origin;
  json skipped_profiles = json::array();
  std::vector<LayerLibrary> libraries = job_libraries(graph, req, library_origin, skipped_profiles, progress, clock);
  Result<CostModel> cost = CostModel::build(graph, cluster, libraries, default_calibration());
  if (!cost) return cost.status().with_context("cost model");
  if (cancel) return Status::error("cancelled");

  // The evaluator every candidate and every baseline goes through.
  RunOptions run;
  run.batch_size = req.batch_size;
  run.seed = req.seed;
  std::unique_ptr<Evaluator> evaluator;
  HybridEvaluator* hybrid = nullptr;
  if (req.evaluator == "simulate") {
    evaluator = std::make_unique<SimulatorEvaluator>(graph, cluster, cost.value(), req.batch_size);
  } else if (req.evaluator == "measure") {
    evaluator = std::make_unique<MeasureEvaluator>(graph, cluster, run);
  } else if (req.evaluator == "hybrid") {
    auto h = std::make_unique<HybridEvaluator>(graph, cluster, cost.value(), req.batch_size,
                                               std::make_unique<MeasureEvaluator>(graph, cluster, run));
    hybrid = h.get();
    evaluator = std::move(h);
  } else {
    return Status::error("options.evaluator: must be simulate, measure or hybrid, got \"" + req.evaluator + "\"");
  }
  const bool measures = req.evaluator != "simulate";

  // TAPP search.
  SearchOptions so;
  so.seed = req.seed;
  so.batch_size = req.batch_size;
  so.time_budget_s = req.time_budget_s;
  if (req.iterations > 0)
    so.iterations = req.iterations;
  else if (req.time_budget_s > 0)
    so.iterations = 1000000;
  else
    so.iterations = req.evaluator == "measure" ? 10 : 600;
  so.refine_budget = 2000;
  if (req.evaluator == "measure") {
    so.samples_per_iteration = 4;
    so.restart_after = 0;
    so.refine_budget = 0;
  }
  // Baselines, through the same evaluator.
  std::vector<BaselineResult> baselines;
  if (req.baselines || req.warm_start) {
    report("baselines", 0, 0, 0, 0);
    BaselineOptions bo;
    bo.batch_size = req.batch_size;
    bo.seed = req.seed;
    bo.cancel = &cancel;
    bo.search_budget = static_cast<int>(std::min<int64_t>(
        static_cast<int64_t>(so.iterations) * so.samples_per_iteration + so.refine_budget,
        req.evaluator == "simulate" ? 20000 : 8));  // random search and annealing: TAPP's budget (policy + refinement)
    if (req.evaluator == "measure") {
      bo.planners = {"single", "bsp", "uniform", "params", "time", "dp"};
      bo.strategy_evaluator = [&graph, &cluster, run](const std::string& strategy) {
        return run_strategy(graph, cluster, strategy, run).report;
      };
    }
    baselines = run_baselines(graph, cluster, cost.value(), *evaluator, bo);
  }
  if (cancel) return Status::error("cancelled");

  // TAPP search.
  if (req.warm_start) {
    const BaselineResult* best = nullptr;
    for (const auto& b : baselines)
      if (b.report.ok && b.placement && !is_data_parallel(*b.placement) && (!best || b.report.step_ms < best->report.step_ms)) best = &b;
    if (best) so.warm_start = *best->placement;
  }
  const int shown_total = req.iterations > 0 || req.time_budget_s <= 0 ? so.iterations : 0;
  SearchResult sr = search(graph, cluster, *evaluator, so, [&](const SearchProgress& p) {
    report("optimizing", p.iteration, shown_total, p.best_step_ms, p.mean_reward);
  }, &cancel);
  if (sr.cancelled) return Status::error("cancelled");

  // Best of everything evaluated.
  std::string best_source;
  std::optional<Placement> best_placement;
  StepReport best_report;
  if (sr.found) {
    best_source = sr.best.source.empty() ? "policy" : sr.best.source;
    best_placement = sr.best;
    best_report = sr.best_report;
  }
  for (const auto& b : baselines)
    if (b.report.ok && !asynchronous(b.name) && (best_source.empty() || b.report.step_ms < best_report.step_ms)) {
      best_source = b.name;
      best_placement = b.placement;
      best_report = b.report;
    }
  if (best_source.empty())
    return Status::error("no placement fits: every candidate and baseline failed (e.g. over a device's memory)");

  // Predicted (simulated, with timeline) and measured step of the best.
  report("verifying", sr.iterations, shown_total, best_report.step_ms, 0);
  std::optional<StepReport> predicted, measured;
  if (measures && best_report.source == "measure") measured = best_report;
  if (best_placement && is_data_parallel(*best_placement)) {
    if (best_report.source != "measure") predicted = best_report;
    if (hybrid && !cancel && !measured) measured = hybrid->measure_now(*best_placement);
  } else if (best_placement) {
    Simulator sim(graph, cluster, hybrid ? hybrid->simulator().cost() : cost.value(), req.batch_size);
    predicted = sim.evaluate(*best_placement, SimulateOptions{true});
    if (hybrid && !cancel) measured = hybrid->measure_now(*best_placement);
  } else if (best_report.source != "measure") {
    predicted = best_report;
  }
  if (cancel) return Status::error("cancelled");

  // Baselines table: speedups against BSP and against the best baseline.
  double bsp_ms = 0, best_baseline_ms = 0;
  std::string best_baseline;
  for (const auto& b : baselines) {
    if (!b.report.ok) continue;
    if (b.name == "bsp") bsp_ms = b.report.step_ms;
    if (!asynchronous(b.name) && (best_baseline.empty() || b.report.step_ms < best_baseline_ms)) {
      best_baseline_ms = b.report.step_ms;
      best_baseline = b.name;
    }
  }
  auto speedup = [](double ref, double x) -> json { return ref > 0 && x > 0 ? json(ref / x) : json(nullptr); };
  json table = json::array();
  for (const auto& b : baselines) {
    json row = baseline_row(b.name, b.report);
    if (b.placement && b.report.ok) {
      row["micro_batches"] = b.placement->micro_batches;
      row["groups"] = groups_summary(*b.placement, graph, cluster);
      row["placement"] = placement_to_json(*b.placement, graph, cluster);
    }
    row["speedup_vs_bsp"] = b.report.ok ? speedup(bsp_ms, b.report.step_ms) : json(nullptr);
    row["speedup_vs_best_baseline"] = b.report.ok ? speedup(best_baseline_ms, b.report.step_ms) : json(nullptr);
    table.push_back(row);
  }

  // "step_ms": what the policy found by itself; "refined_step_ms": after the
  // local refinement of its best (equal when refinement found nothing better).
  const double policy_ms = sr.policy_found ? sr.policy_best_report.step_ms : 0;
  json policy = {{"found", sr.policy_found},
                 {"step_ms", sr.policy_found ? json(policy_ms) : json(nullptr)},
                 {"refined_step_ms", sr.found ? json(sr.best_report.step_ms) : json(nullptr)},
                 {"refine_evaluations", sr.evaluations - sr.policy_evaluations},
                 {"policy_elapsed_s", sr.policy_elapsed_s},
                 {"speedup_vs_bsp", sr.policy_found ? speedup(bsp_ms, policy_ms) : json(nullptr)},
                 {"speedup_vs_best_baseline", sr.policy_found ? speedup(best_baseline_ms, policy_ms) : json(nullptr)},
                 {"refined_speedup_vs_bsp", sr.found ? speedup(bsp_ms, sr.best_report.step_ms) : json(nullptr)},
                 {"refined_speedup_vs_best_baseline", sr.found ? speedup(best_baseline_ms, sr.best_report.step_ms) : json(nullptr)},
                 {"iterations", sr.iterations},
                 {"evaluations", sr.evaluations},
                 {"failures", sr.failures},
                 {"stop_reason", sr.stop_reason},
                 {"elapsed_s", sr.elapsed_s},
                 {"time_to_within_5pct_s", sr.policy_found ? time_to_within(sr.trace, policy_ms, 0.05) : 0.0}};
  json trace = json::array();
  for (const auto& t : sr.trace)
    trace.push_back({{"iteration", t.iteration}, {"evaluations", t.evaluations}, {"elapsed_s", t.elapsed_s},
                     {"best_step_ms", t.best_step_ms}});
  policy["trace"] = trace;
  policy["restarts"] = sr.restarts;
  if (sr.policy_found) policy["placement"] = placement_to_json(sr.policy_best, graph, cluster);
  if (sr.found) policy["refined_placement"] = placement_to_json(sr.best, graph, cluster);

  const StepReport& shown = measured && measured->ok ? *measured : (predicted ? *predicted : best_report);
  json result;
  result["model"] = graph.name;
  result["layers"] = graph.layers.size();
  result["cluster"] = cluster.name;
  result["devices"] = cluster.num_devices();
  result["batch_size"] = req.batch_size;
  result["evaluator"] = req.evaluator;
  result["seed"] = req.seed;
  json profile_batches = json::array();
  for (const LayerLibrary& l : libraries) profile_batches.push_back(l.batch_size);
  result["profile"] = {{"origin", library_origin},
                       {"measured", libraries.front().measured},
                       {"batch_size", libraries.back().batch_size},
                       {"batch_sizes", profile_batches},
                       {"skipped", skipped_profiles}};
  result["source"] = best_source;
  result["placement"] = best_placement ? placement_to_json(*best_placement, graph, cluster) : json(nullptr);
  result["groups"] = best_placement ? groups_summary(*best_placement, graph, cluster) : json::array();
  result["predicted_step_ms"] = predicted && predicted->ok ? json(predicted->step_ms) : json(nullptr);
  result["measured_step_ms"] = measured && measured->ok ? json(measured->step_ms) : json(nullptr);
  result["step_ms"] = best_report.step_ms;
  result["comm_fraction"] = shown.comm_fraction;
  result["speedup_vs_bsp"] = speedup(bsp_ms, best_report.step_ms);
  result["speedup_vs_best_baseline"] = speedup(best_baseline_ms, best_report.step_ms);
  result["best_baseline"] = best_baseline.empty() ? json(nullptr) : json(best_baseline);
  result["baselines"] = table;
  result["policy"] = policy;
  result["report"] = step_report_to_json(shown, false);
  result["timeline"] = step_report_to_json(shown, true)["timeline"];
  if (hybrid) {
    json ms = json::array();
    for (const auto& m : hybrid->measurements())
      ms.push_back({{"predicted_ms", m.predicted_ms},
                    {"measured_ms", m.measured.ok ? json(m.measured.step_ms) : json(nullptr)},
                    {"ok", m.measured.ok}});
    result["hybrid"] = {{"measurements", ms},
                        {"median_abs_rel_error_before", hybrid->accuracy_before().median_abs_rel_error},
                        {"median_abs_rel_error_after", hybrid->accuracy_after().median_abs_rel_error}};
  }
  result["elapsed_s"] = clock.s();
  report("done", sr.iterations, shown_total, best_report.step_ms, 0);
  return result;
}

}  // namespace

Result<json> optimize(const OptimizeRequest& request, const ProgressFn& progress, const std::atomic<bool>& cancel) {
  try {
    return run_job(request, progress, cancel);
  } catch (const std::exception& e) {
    return Status::error(std::string("optimize: ") + e.what());
  }
}

}  // namespace tapp
