// placer/optimize.cpp — one optimization job end to end (see optimize.h).
//
// run_job reads as its phases, each returning a typed result:
//   load_phase      -> LayerGraph           (the model; the request's basic checks)
//   costs_phase     -> JobCosts             (layer libraries by the one profiling rule, the cost model)
//   make_evaluator  -> JobEvaluator         (placer/evaluator_factory.h)
//   baselines_phase -> vector<BaselineResult>
//   search_phase    -> SearchResult         (TAPP: policy, restarts, refinement)
//   pick_best       -> BestPlan             (the fastest synchronous plan of all)
//   verify_phase    -> Verified             (its simulated timeline; hybrid: measured)
//   measure_phase   -> Verification         (the best and the best baseline on the workers, placer/verify.h)
//   calibration_phase -> CalibrationUpdate  (the measured steps join the cluster's calibration)
//   result_json     -> the result JSON, the only place its keys are written.
// Every exception from LibTorch, JSON or the runtime is caught in optimize()
// and returned as a Status.
#include "placer/optimize.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "core/placement.h"
#include "model/layer_library.h"
#include "model/model_json.h"
#include "planners/lower_bound.h"
#include "planners/planners.h"
#include "placer/al_phase.h"
#include "placer/baselines.h"
#include "placer/calibration_update.h"
#include "placer/evaluator_factory.h"
#include "placer/hybrid_evaluator.h"
#include "placer/result_bounds.h"
#include "placer/search.h"
#include "placer/verify.h"
#include "profiler/cost_profiles.h"
#include "runtime/worker_profile.h"
#include "profiler/model_loader.h"
#include "model/profile_cache.h"
#include "simulator/calibration_store.h"
#include "simulator/cost_model.h"
#include "simulator/data_parallel.h"
#include "simulator/simulator.h"
#include "simulator/simulator_evaluator.h"

namespace tapp {

using nlohmann::json;

namespace {

// ---- Budgets: how much search a job gets, by evaluator kind ----
// Simulated evaluations cost microseconds to milliseconds, measured ones
// seconds (every candidate starts the workers), so the two get budgets three
// orders of magnitude apart (their iterations: optimize.h's kSimulatedIterations, kMeasuredIterations).
constexpr int kMeasuredSamplesPerIteration = 4;  // (simulating: SearchOptions' default, 16)
constexpr int kRefineEvaluations = 2000;         // local refinement after the policy (not when measuring)
constexpr int kZeroShotClimbEvaluations = 200;   // a trained policy's climb from its zero-shot plan (idem)
constexpr int kUntilTimeBudget = 1000000;        // iterations when a time budget is what stops the search
// Random search and annealing get TAPP's evaluation budget (policy + refinement), capped:
constexpr int kSimulatedBaselineEvaluations = 20000;
constexpr int kMeasuredBaselineEvaluations = 8;  // measure and hybrid: each one may run the workers
// Verification by measurement: the whole of it gets this long without a time
// budget, and this share of the budget with one.
constexpr double kVerifyLimitS = 120;
constexpr double kVerifyBudgetShare = 0.25;

struct Clock {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
};

// The job's progress callback with its clock.
class Reporter {
 public:
  Reporter(const ProgressFn& fn, const Clock& clock) : fn_(fn), clock_(clock) {}
  void operator()(const std::string& phase, int it, int total, double best, double reward) const {
    if (fn_) fn_({phase, it, total, best, reward, clock_.s()});
  }
  void profiling(const ProfileProgress& p) const { where("profiling", p.message(), p.fraction()); }
  // Where a phase without iterations is: its message and how far through it (0..1).
  void where(const std::string& phase, const std::string& message, double fraction) const {
    if (!fn_) return;
    ProgressEvent e{phase, 0, 0, 0, 0, clock_.s()};
    e.message = message;
    e.phase_fraction = fraction;
    fn_(e);
  }

 private:
  const ProgressFn& fn_;
  const Clock& clock_;
};

Status cancelled_status() { return Status::error("cancelled"); }

// ---- load ----
Result<LayerGraph> load_phase(const OptimizeRequest& r) {
  if (r.cluster.devices.empty()) return Status::error("cluster.devices: must name at least one device");
  if (r.batch_size < 1) return Status::error("options.batch_size: must be at least 1");
  ModelOptions options{r.input_size, r.num_classes};
  options.torchscript = r.torchscript;
  Result<LayerGraph> g = r.model_graph.is_null() ? load_model(r.model, options) : model_from_json(r.model_graph);
  if (!g) return g.status().with_context("model");
  return g;
}

// ---- costs ----
struct JobCosts {
  CostProfiles profiles;
  CostModel cost;
  CalibrationUsed calibration;  // default, or fitted on this cluster (simulator/calibration_store.h)
  std::string calibration_refused;  // why a stored calibration was not used ("" = none was refused)
  std::string calibration_waiting;  // a stored fit too small to use yet
};

Result<JobCosts> costs_phase(const LayerGraph& g, const OptimizeRequest& r, const Reporter& report) {
  CostProfileOptions o;
  o.batch_size = r.batch_size;
  o.seed = r.seed;
  o.source = r.costs;
  o.cache = r.profile_cache;
  o.progress = [&report](const ProfileProgress& p) { report.profiling(p); };
  o.worker_costs = worker_costs(r.profile_cache);
  Result<CostProfiles> profiles = cost_profiles(g, r.cluster, o);
  if (!profiles) return profiles.status().with_context("cluster");
  FileProfileCache user_cache(default_cache_dir());
  ChosenCalibration chosen = choose_calibration(r.profile_cache ? *r.profile_cache : user_cache, r.cluster);
  Result<CostModel> cost =
      CostModel::build(g, r.cluster, profiles->libraries, profiles->device_libraries, chosen.calibration);
  if (!cost) return cost.status().with_context("cost model");
  return JobCosts{std::move(*profiles), std::move(cost.value()), chosen.used, chosen.refused, chosen.waiting};
}

// ---- budgets ----
SearchOptions search_options(const OptimizeRequest& r) {
  SearchOptions so;
  so.seed = r.seed;
  so.batch_size = r.batch_size;
  so.optimizer = r.optimizer;
  so.time_budget_s = r.time_budget_s;
  so.initial_policy = r.initial_policy;
  const bool measure = r.evaluator == EvaluatorKind::measure;
  if (r.iterations > 0)
    so.iterations = r.iterations;
  else if (r.time_budget_s > 0)
    so.iterations = kUntilTimeBudget;
  else
    so.iterations = measure ? kMeasuredIterations : kSimulatedIterations;
  so.refine_budget = measure ? 0 : kRefineEvaluations;
  so.zero_shot_climb = measure ? 0 : kZeroShotClimbEvaluations;
  if (measure) {
    so.samples_per_iteration = kMeasuredSamplesPerIteration;
    so.restart_after = 0;
  }
  return so;
}

// Per device: the whole model's forward + backward for one sample (from a
// micro-batch of batch / devices), the speeds by which replicas share work.
std::vector<double> device_sample_ms(const LayerGraph& g, const Cluster& c, const CostModel& cost, int64_t batch_size) {
  const int last = static_cast<int>(g.layers.size()) - 1;
  const int64_t samples = std::max<int64_t>(1, batch_size / std::max(1, c.num_devices()));
  std::vector<double> ms;
  for (int d = 0; d < c.num_devices(); ++d)
    ms.push_back((cost.forward_ms(d, 0, last, samples) + cost.backward_ms(d, 0, last, samples)) / samples);
  return ms;
}

int baseline_search_budget(const OptimizeRequest& r, const SearchOptions& so) {
  const int64_t tapp_budget = static_cast<int64_t>(so.iterations) * so.samples_per_iteration + so.refine_budget;
  const int cap = r.evaluator == EvaluatorKind::simulate ? kSimulatedBaselineEvaluations : kMeasuredBaselineEvaluations;
  return static_cast<int>(std::min<int64_t>(tapp_budget, cap));
}

// ---- baselines ----
// HOGWILD trains asynchronously (other semantics than synchronous SGD): it is
// shown in the table but is never the job's result nor the reference baseline.
bool asynchronous(const std::string& baseline) { return baseline == "hogwild"; }

// The planners the baselines table shows: all when simulating; when every
// evaluation measures, the analytic ones (the search planners' budgets would
// each run the workers again and again).
std::vector<std::string> baseline_planners(EvaluatorKind kind) {
  if (kind == EvaluatorKind::measure) return {"single", "bsp", "uniform", "params", "time", "dp"};
  return {};
}

// What every baseline run of a job plans for: its batch, optimizer and seed.
BaselineOptions job_baseline_options(const OptimizeRequest& r) {
  BaselineOptions bo;
  bo.batch_size = r.batch_size;
  bo.optimizer = r.optimizer;
  bo.seed = r.seed;
  return bo;
}

std::vector<BaselineResult> baselines_phase(const LayerGraph& g, const OptimizeRequest& r, const JobCosts& costs,
                                            JobEvaluator& ev, int search_budget, const Reporter& report,
                                            const std::atomic<bool>& cancel) {
  BaselineOptions bo = job_baseline_options(r);
  bo.cancel = &cancel;
  bo.search_budget = search_budget;
  bo.planners = baseline_planners(r.evaluator);
  bo.strategy_evaluator = ev.strategy_evaluator;
  bo.both_schedules = true;
  bo.progress = [&](const std::string& message, double fraction) { report.where("baselines", message, fraction); };
  return run_baselines(g, r.cluster, costs.cost, *ev.evaluator, bo);
}

// ---- search ----
// The best synchronous pipeline among the baselines (for a warm start).
std::optional<Placement> best_classical_pipeline(const std::vector<BaselineResult>& baselines) {
  const BaselineResult* best = nullptr;
  for (const auto& b : baselines)
    if (b.report.ok && b.placement && !is_data_parallel(*b.placement) &&
        (!best || b.report.step_ms < best->report.step_ms))
      best = &b;
  if (!best) return std::nullopt;
  return *best->placement;
}

SearchResult search_phase(const LayerGraph& g, const OptimizeRequest& r, SearchOptions so,
                          const std::vector<BaselineResult>& baselines, Evaluator& evaluator, int shown_total,
                          const Reporter& report, const std::atomic<bool>& cancel) {
  if (r.warm_start)
    so.warm_start = best_classical_pipeline(baselines);
  else
    so.restart_from = best_classical_pipeline(baselines);
  return search(
      g, r.cluster, evaluator, so,
      [&](const SearchProgress& p) { report("optimizing", p.iteration, shown_total, p.best_step_ms, p.mean_reward); },
      &cancel);
}

// ---- pick the best ----
struct BestPlan {
  std::string source;  // "policy", "policy+refine" or a baseline's name; empty: nothing valid
  std::optional<Placement> placement;
  StepReport report;
};

BestPlan pick_best(const SearchResult& sr, const std::vector<BaselineResult>& baselines) {
  BestPlan best;
  if (sr.found) best = {sr.best.source.empty() ? "policy" : sr.best.source, sr.best, sr.best_report};
  for (const auto& b : baselines)
    if (b.report.ok && !asynchronous(b.name) && (best.source.empty() || b.report.step_ms < best.report.step_ms))
      best = {b.name, b.placement, b.report};
  return best;
}

// ---- Associated Learning (request allow_al) ----
// The AL form of the plans the policy and the planners proposed, fastest
// first as they were evaluated; the row is shown beside the best, not in its place.
std::optional<AlRow> al_phase(const LayerGraph& g, const OptimizeRequest& r, const CostProfiles& profiles,
                              const CostModel& cost, const SearchResult& sr,
                              const std::vector<BaselineResult>& baselines, const std::atomic<bool>& cancel) {
  if (!r.allow_al) return std::nullopt;
  std::vector<std::pair<double, AlCandidate>> ranked;
  if (sr.found) ranked.push_back({sr.best_report.step_ms, {sr.best.source.empty() ? "policy" : sr.best.source, sr.best}});
  if (sr.policy_found) ranked.push_back({sr.policy_best_report.step_ms, {"policy", sr.policy_best}});
  for (const auto& b : baselines)
    if (b.report.ok && b.placement && !asynchronous(b.name)) ranked.push_back({b.report.step_ms, {b.name, *b.placement}});
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::vector<AlCandidate> candidates;
  for (auto& [ms, c] : ranked) candidates.push_back(std::move(c));
  AlPricing pricing;
  pricing.libraries = &profiles.libraries;
  pricing.device_libraries = &profiles.device_libraries;
  pricing.calibration = cost.calibration();
  pricing.batch_size = r.batch_size;
  return best_al_row(g, r.cluster, candidates, pricing, cancel);
}

// ---- verify ----
// The best's predicted step (simulated, with the timeline) and measured step.
struct Verified {
  std::optional<StepReport> predicted, measured;
  // What the result shows: measured when it is, else predicted, else as evaluated.
  const StepReport& shown(const StepReport& evaluated) const {
    return measured && measured->ok ? *measured : (predicted ? *predicted : evaluated);
  }
};

bool was_measured(const StepReport& r) { return r.source == evaluator_kind_name(EvaluatorKind::measure); }

Verified verify_phase(const LayerGraph& g, const OptimizeRequest& r, const JobCosts& costs, const JobEvaluator& ev,
                      const BestPlan& best, const std::atomic<bool>& cancel) {
  Verified v;
  HybridEvaluator* hybrid = ev.hybrid;
  if (ev.measures() && was_measured(best.report)) v.measured = best.report;
  if (best.placement && is_data_parallel(*best.placement)) {
    if (!was_measured(best.report)) v.predicted = best.report;
    if (hybrid && !cancel && !v.measured) v.measured = hybrid->measure_now(*best.placement);
  } else if (best.placement) {
    Simulator sim(g, r.cluster, hybrid ? hybrid->simulator().cost() : costs.cost, r.batch_size);
    v.predicted = sim.evaluate(*best.placement, SimulateOptions{true});
    if (hybrid && !cancel) v.measured = hybrid->measure_now(*best.placement);
  } else if (!was_measured(best.report)) {
    v.predicted = best.report;
  }
  return v;
}

// ---- verify by measurement ----
// The costs the job predicted with (hybrid: its recalibrated ones).
const CostModel& prediction_costs(const JobCosts& costs, const JobEvaluator& ev) {
  return ev.hybrid ? ev.hybrid->simulator().cost() : costs.cost;
}

double predicted_ms(const LayerGraph& g, const OptimizeRequest& r, const CostModel& cost, const Placement& p) {
  StepReport predicted = p.is_data_parallel() ? simulate_data_parallel(g, r.cluster, cost, r.batch_size, p)
                                              : Simulator(g, r.cluster, cost, r.batch_size).evaluate(p);
  return predicted.ok ? predicted.step_ms : 0;
}

// The measurement the job's evaluator already has of `p`, if any.
std::optional<StepReport> measured_by_evaluator(const JobEvaluator& ev, const Placement& p, const StepReport& report) {
  if (was_measured(report) && report.ok) return report;
  if (ev.hybrid)
    if (const StepReport* m = ev.hybrid->measured(p); m && m->ok) return *m;
  return std::nullopt;
}

// The best plan, and the best synchronous baseline (the fastest classical row).
std::vector<PlanToVerify> plans_to_verify(const LayerGraph& g, const OptimizeRequest& r, const JobCosts& costs,
                                          const JobEvaluator& ev, const BestPlan& best, const Verified& verified,
                                          const std::vector<BaselineResult>& baselines) {
  const CostModel& cost = prediction_costs(costs, ev);
  std::vector<PlanToVerify> plans;
  if (best.placement) {
    PlanToVerify p{"best", best.source, *best.placement, predicted_ms(g, r, cost, *best.placement), std::nullopt};
    p.measured = verified.measured && verified.measured->ok ? verified.measured
                                                            : measured_by_evaluator(ev, *best.placement, best.report);
    plans.push_back(std::move(p));
  }
  const BaselineResult* fastest = nullptr;
  for (const auto& b : baselines)
    if (b.report.ok && b.placement && !asynchronous(b.name) && (!fastest || b.report.step_ms < fastest->report.step_ms))
      fastest = &b;
  if (fastest) {
    PlanToVerify p{"best_baseline", fastest->name, *fastest->placement,
                   predicted_ms(g, r, cost, *fastest->placement), std::nullopt};
    p.measured = measured_by_evaluator(ev, *fastest->placement, fastest->report);
    plans.push_back(std::move(p));
  }
  return plans;
}

VerifyOptions verify_options(const OptimizeRequest& r) {
  VerifyOptions o;
  o.enabled = r.verify;
  o.limit_s = r.time_budget_s > 0 ? kVerifyBudgetShare * r.time_budget_s : kVerifyLimitS;
  o.limit_why = r.time_budget_s > 0 ? "a quarter of the time budget" : "the default without a time budget";
  o.run = r.verify_run;
  o.run.seed = r.seed;
  o.run.optimizer = r.optimizer;
  return o;
}

Verification measure_phase(const LayerGraph& g, const OptimizeRequest& r, const JobCosts& costs,
                           const JobEvaluator& ev, const BestPlan& best, const Verified& verified,
                           const std::vector<BaselineResult>& baselines, const std::atomic<bool>& cancel) {
  if (!r.verify) return verify_plans(g, r.cluster, r.batch_size, {}, verify_options(r), cancel);
  return verify_plans(g, r.cluster, r.batch_size, plans_to_verify(g, r, costs, ev, best, verified, baselines),
                      verify_options(r), cancel);
}

// The verification's measured pipelines (one per distinct plan) join the
// cluster's calibration; data-parallel plans stay out (the fit models task graphs).
std::optional<CalibrationUpdate> calibration_phase(const LayerGraph& g, const OptimizeRequest& r,
                                                   const JobCosts& costs, const Verification& v) {
  std::vector<CalibrationSample> samples;
  for (const PlanCheck& p : v.plans)
    if (p.ok() && p.same_plan_as.empty() && !p.placement.is_data_parallel()) samples.push_back({p.placement, p.measured});
  if (samples.empty()) return std::nullopt;
  FileProfileCache user_cache(default_cache_dir());
  ProfileCache& store = r.profile_cache ? *r.profile_cache : user_cache;
  return join_calibration(store, g, r.cluster, r.batch_size, costs.cost, samples);
}

// ---- the result JSON ----
struct JobOutcome {
  const OptimizeRequest& request;
  const LayerGraph& graph;
  const JobCosts& costs;
  const JobEvaluator& evaluator;
  const std::vector<BaselineResult>& baselines;
  const SearchResult& search;
  const BestPlan& best;
  const Verified& verified;
  const Verification& verification;
  const std::optional<CalibrationUpdate>& calibration_update;
  const std::optional<AlRow>& al;
  double elapsed_s = 0;
};

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
  for (int gi : order) {
    out.push_back({{"group", gi},
                   {"device", c.devices.at(p.group_device[gi]).name},
                   {"first_layer", g.layers[members[gi].front()].name},
                   {"last_layer", g.layers[members[gi].back()].name},
                   {"layers", members[gi].size()}});
    if (p.replica_count(gi) > 1) {  // a replicated stage: its further devices
      json replicas = json::array();
      for (int d : p.group_replicas[gi]) replicas.push_back(c.devices.at(d).name);
      out.back()["replicas"] = replicas;
      // How many of the step's micro-batches each device of the group runs.
      const auto w = p.has_replica_weights(gi) ? p.group_replica_weights[gi] : std::vector<int>(p.replica_count(gi), 1);
      out.back()["micro_batches_per_device"] = replica_micro_batch_counts(p.micro_batches, w);
    }
  }
  return out;
}

// First time the best-so-far came within `fraction` of the final best.
double time_to_within(const std::vector<TracePoint>& trace, double final_ms, double fraction) {
  for (const auto& t : trace)
    if (t.best_step_ms <= final_ms * (1 + fraction)) return t.elapsed_s;
  return trace.empty() ? 0 : trace.back().elapsed_s;
}

json speedup(double reference_ms, double ms) { return reference_ms > 0 && ms > 0 ? json(reference_ms / ms) : json(); }

// The references speedups are given against: BSP and the best synchronous baseline.
struct References {
  double bsp_ms = 0, best_baseline_ms = 0;
  std::string best_baseline;
};

References references(const std::vector<BaselineResult>& baselines) {
  References ref;
  for (const auto& b : baselines) {
    if (!b.report.ok) continue;
    if (b.name == "bsp") ref.bsp_ms = b.report.step_ms;
    if (!asynchronous(b.name) && (ref.best_baseline.empty() || b.report.step_ms < ref.best_baseline_ms)) {
      ref.best_baseline_ms = b.report.step_ms;
      ref.best_baseline = b.name;
    }
  }
  return ref;
}

json profile_json(const CostProfiles& p) {
  json skipped = json::array();
  for (const SkippedProfile& s : p.skipped)
    skipped.push_back({{"batch_size", s.batch_size},
                       {"device", s.device_kind + " x" + std::to_string(s.threads)},
                       {"error", s.error}});
  // Every device may have its own libraries (then the shared list is empty).
  const std::vector<LayerLibrary>* libs = &p.libraries;
  for (const auto& own : p.device_libraries)
    if (libs->empty() && !own.empty()) libs = &own;
  const std::vector<int64_t> sizes = p.batch_sizes();
  json out = {{"origin", p.origin()},
              {"measured", !libs->empty() && libs->front().measured},
              {"batch_size", sizes.empty() ? json() : json(sizes.back())},
              {"batch_sizes", sizes},
              {"skipped", skipped}};
  // Where each device's costs came from, when any device names its own.
  const bool any_own = std::any_of(p.devices.begin(), p.devices.end(),
                                   [](const DeviceCostsUsed& d) { return d.from != CostsFrom::host; });
  if (any_own || !p.notes.empty()) {
    json devices = json::array();
    for (const DeviceCostsUsed& d : p.devices) {
      json row = {{"device", d.device}, {"costs", costs_from_name(d.from)}};
      if (!d.detail.empty()) row["detail"] = d.detail;
      if (!d.fingerprint.empty()) row["fingerprint"] = d.fingerprint;
      devices.push_back(std::move(row));
    }
    out["devices"] = devices;
    out["notes"] = p.notes;
  }
  return out;
}

json baselines_json(const JobOutcome& o, const References& ref) {
  json table = json::array();
  for (const auto& b : o.baselines) {
    json row = {{"name", b.name}, {"ok", b.report.ok}};
    if (b.report.ok) {
      row["step_ms"] = b.report.step_ms;
      row["comm_fraction"] = b.report.comm_fraction;
    } else {
      row["step_ms"] = nullptr;
      row["failure_kind"] = failure_kind_name(b.report.failure_kind);
      row["message"] = b.report.message;
      if (b.skipped) row["skipped"] = true;  // not a failure: the planner did not run, message says why
    }
    if (b.placement && b.report.ok) {
      row["micro_batches"] = b.placement->micro_batches;
      row["groups"] = groups_summary(*b.placement, o.graph, o.request.cluster);
      row["placement"] = placement_to_json(*b.placement, o.graph, o.request.cluster);
    }
    row["speedup_vs_bsp"] = b.report.ok ? speedup(ref.bsp_ms, b.report.step_ms) : json();
    row["speedup_vs_best_baseline"] = b.report.ok ? speedup(ref.best_baseline_ms, b.report.step_ms) : json();
    table.push_back(row);
  }
  return table;
}

// "step_ms": what the policy found by itself; "refined_step_ms": after the
// local refinement of its best (equal when refinement found nothing better).
// ZeroShotOdds keyed by what they are odds of: micro-batch counts (and
// "data_parallel"), device names per group of the zero-shot placement,
// stage counts ("stages", where the networks choose them).
json zero_shot_odds_json(const ZeroShotOdds& odds, const Cluster& c) {
  json micro = json::object();
  for (size_t i = 0; i < odds.micro_batches.size(); ++i)
    micro[i < odds.micro_batch_choices.size() ? std::to_string(odds.micro_batch_choices[i]) : "data_parallel"] =
        odds.micro_batches[i];
  auto per_device = [&](const std::vector<float>& row) {
    json j = json::object();
    for (size_t d = 0; d < row.size() && d < c.devices.size(); ++d) j[c.devices[d].name] = row[d];
    return j;
  };
  json groups = json::array();
  for (size_t g = 0; g < odds.devices.size(); ++g) {
    json group = {{"device", per_device(odds.devices[g])}};
    if (g < odds.replicas.size()) group["replica"] = per_device(odds.replicas[g]);
    groups.push_back(group);
  }
  json out = {{"micro_batches", micro}, {"groups", groups}};
  if (!odds.stages.empty()) {
    json stages = json::object();
    for (size_t k = 0; k < odds.stages.size(); ++k) stages[std::to_string(k + 1)] = odds.stages[k];
    out["stages"] = stages;
  }
  return out;
}

json policy_json(const JobOutcome& o, const References& ref) {
  const SearchResult& sr = o.search;
  const double policy_ms = sr.policy_found ? sr.policy_best_report.step_ms : 0;
  const double refined_ms = sr.found ? sr.best_report.step_ms : 0;
  auto if_policy = [&](json v) { return sr.policy_found ? v : json(); };
  auto if_found = [&](json v) { return sr.found ? v : json(); };
  json trace = json::array();
  for (const auto& t : sr.trace)
    trace.push_back({{"iteration", t.iteration},
                     {"evaluations", t.evaluations},
                     {"elapsed_s", t.elapsed_s},
                     {"best_step_ms", t.best_step_ms}});
  json policy = {{"found", sr.policy_found},
                 {"step_ms", if_policy(policy_ms)},
                 {"refined_step_ms", if_found(refined_ms)},
                 {"refine_evaluations", sr.evaluations - sr.policy_evaluations},
                 {"policy_elapsed_s", sr.policy_elapsed_s},
                 {"speedup_vs_bsp", if_policy(speedup(ref.bsp_ms, policy_ms))},
                 {"speedup_vs_best_baseline", if_policy(speedup(ref.best_baseline_ms, policy_ms))},
                 {"refined_speedup_vs_bsp", if_found(speedup(ref.bsp_ms, refined_ms))},
                 {"refined_speedup_vs_best_baseline", if_found(speedup(ref.best_baseline_ms, refined_ms))},
                 {"iterations", sr.iterations},
                 {"evaluations", sr.evaluations},
                 {"failures", sr.failures},
                 // of the policy's own evaluations (before the refinement), and of all;
                 // fitted only with layers moved: of all, and of the policy's own
                 {"policy_failures", sr.policy_failures},
                 {"moved_to_fit", sr.moved},
                 {"policy_moved_to_fit", sr.policy_moved},
                 {"stop_reason", sr.stop_reason},
                 {"elapsed_s", sr.elapsed_s},
                 {"time_to_within_5pct_s", sr.policy_found ? time_to_within(sr.trace, policy_ms, 0.05) : 0.0},
                 {"trace", trace},
                 {"restarts", sr.restarts},
                 // The trace's evaluations up to this count are the policy's own; the first
                 // restart then imitated the best classical plan (null: it never did).
                 {"evaluations_before_imitation",
                  sr.evaluations_before_imitation > 0 ? json(sr.evaluations_before_imitation) : json()},
                 {"started_from", o.request.initial_policy ? o.request.initial_policy_name : "fresh"},
                 {"zero_shot_step_ms", sr.zero_shot_report && sr.zero_shot_report->ok ? json(sr.zero_shot_report->step_ms)
                                                                                      : json()},
                 // The best after the climb from that plan, before the policy's first sample.
                 {"zero_shot_climbed_step_ms", sr.climbed_step_ms ? json(*sr.climbed_step_ms) : json()}};
  if (sr.policy_found) policy["placement"] = placement_to_json(sr.policy_best, o.graph, o.request.cluster);
  if (sr.zero_shot_report) {
    policy["zero_shot_placement"] = placement_to_json(sr.zero_shot, o.graph, o.request.cluster);
    policy["zero_shot_odds"] = zero_shot_odds_json(sr.zero_shot_odds, o.request.cluster);
    // Which decision (typical or greedy), what was done to its replicas, and whether its cuts were
    // placed for its stages (zero_shot_candidates).
    policy["zero_shot_from"] = zero_shot_from_name(sr.zero_shot_how.from);
    policy["zero_shot_cuts_moved"] = sr.zero_shot_how.cuts_moved;
    policy["zero_shot_reordered"] = sr.zero_shot_how.reordered;
    policy["zero_shot_replicas"] = zero_shot_replicas_name(sr.zero_shot_how.replicas);
  }
  if (sr.found) policy["refined_placement"] = placement_to_json(sr.best, o.graph, o.request.cluster);
  return policy;
}

json hybrid_json(const HybridEvaluator& hybrid) {
  json ms = json::array();
  for (const auto& m : hybrid.measurements())
    ms.push_back({{"predicted_ms", m.predicted_ms},
                  {"measured_ms", m.measured.ok ? json(m.measured.step_ms) : json()},
                  {"ok", m.measured.ok}});
  return {{"measurements", ms},
          {"median_abs_rel_error_before", hybrid.accuracy_before().median_abs_rel_error},
          {"median_abs_rel_error_after", hybrid.accuracy_after().median_abs_rel_error}};
}

// Which calibration the predictions used, and a stored one refused with its reason.
json calibration_json(const JobCosts& costs) {
  json j = calibration_used_to_json(costs.calibration);
  if (!costs.calibration_refused.empty()) j["refused"] = costs.calibration_refused;
  if (!costs.calibration_waiting.empty()) j["waiting"] = costs.calibration_waiting;
  return j;
}

json accuracy_json(const AccuracyStats& s) {
  return {{"n", s.n}, {"median_abs_rel_error", s.median_abs_rel_error}, {"spearman", s.spearman}};
}

json calibration_update_json(const CalibrationUpdate& u) {
  json j = {{"stored", u.stored}, {"samples_added", u.samples_added}, {"samples_kept", u.samples_kept}};
  if (u.stored) {
    j["fitted_from"] = u.fitted_from;
    j["fitted_at"] = u.fitted_at;
    j["default_calibration"] = accuracy_json(u.before);
    j["refitted"] = accuracy_json(u.after);
  } else {
    j["error"] = u.error;
  }
  if (!u.replaced_refused.empty()) j["replaced_refused"] = u.replaced_refused;
  return j;
}

// Predicted and measured side by side, per verified plan.
json verification_json(const Verification& v, const std::optional<CalibrationUpdate>& update) {
  json plans = json::array();
  for (const PlanCheck& p : v.plans) {
    json row = {{"role", p.role},
                {"name", p.name},
                {"predicted_ms", p.predicted_ms > 0 ? json(p.predicted_ms) : json()},
                {"measured_ms", p.ok() ? json(p.measured.step_ms) : json()},
                {"relative_difference", p.ok() && p.predicted_ms > 0 ? json(p.relative_difference()) : json()},
                {"disagrees", p.disagrees()},
                {"ok", p.ok()},
                {"by_evaluator", p.by_evaluator}};
    if (!p.ok()) {
      row["failure_kind"] = failure_kind_name(p.measured.failure_kind);
      row["message"] = p.measured.message;
    }
    if (!p.same_plan_as.empty()) row["same_plan_as"] = p.same_plan_as;
    plans.push_back(row);
  }
  json j = {{"state", verification_state_name(v.state)},
            {"threshold", kDisagreement},
            {"disagrees", v.any_disagrees()},
            {"plans", plans}};
  if (!v.reason.empty()) j["reason"] = v.reason;
  if (v.state == VerificationState::verified) {
    j["warmup_steps"] = v.warmup_steps;
    j["steps"] = v.steps;
  }
  if (update) j["calibration"] = calibration_update_json(*update);
  return j;
}

// The AL row: its plan as the source model's pipeline whose groups are the
// blocks (what `tapp-cli run --placement P --schedule al` takes), its
// predicted step, and against the best plan.
json al_json(const AlRow& al, const JobOutcome& o) {
  const LayerGraph& g = o.graph;
  const Cluster& c = o.request.cluster;
  json refused = al.refused;
  if (!al.found)
    return {{"found", false}, {"candidates", al.candidates}, {"refused", refused},
            {"message", al.candidates ? "no AL plan fits" : "no proposed plan has an AL form"}};
  json cuts = json::array();
  for (int i : al_cuts_of(al.plan.graph)) cuts.push_back(g.layers[i].name);
  const double best_ms = o.best.report.step_ms;
  return {{"found", true},
          {"from", al.from},
          {"step_ms", al.report.step_ms},
          {"micro_batches", al.pipeline.micro_batches},
          {"blocks", al.plan.graph.al_blocks.size()},
          {"cuts", cuts},
          {"target_width", al_target_width(al.plan.graph)},
          {"speedup_vs_best", speedup(best_ms, al.report.step_ms)},
          {"faster_than_best", al.report.step_ms < best_ms},
          {"placement", placement_to_json(al.pipeline, g, c)},
          {"groups", groups_summary(al.pipeline, g, c)},
          {"candidates", al.candidates},
          {"refused", refused},
          {"costs", "the job's profiles; the added bridge, target and decoder maps estimated from their throughput"}};
}

// The one place the result's keys are written (schemas/job.schema.json "result").
json result_json(const JobOutcome& o) {
  const LayerGraph& g = o.graph;
  const Cluster& c = o.request.cluster;
  const References ref = references(o.baselines);
  // The best's measurement: the evaluator's, else the verification's.
  const PlanCheck* verified_best = o.verification.plan("best");
  const std::optional<StepReport> measured =
      o.verified.measured && o.verified.measured->ok
          ? o.verified.measured
          : (verified_best && verified_best->ok() ? std::optional<StepReport>(verified_best->measured) : std::nullopt);
  const StepReport& shown = measured ? *measured : o.verified.shown(o.best.report);
  const std::optional<Placement>& best = o.best.placement;
  auto ok_ms = [](const std::optional<StepReport>& r) { return r && r->ok ? json(r->step_ms) : json(); };
  json layer_order = json::array();
  for (const Layer& l : g.layers) layer_order.push_back(l.name);
  json result = {
      {"model", g.name},
      {"layers", g.layers.size()},
      {"layer_order", layer_order},
      {"cluster", c.name},
      {"devices", c.num_devices()},
      {"batch_size", o.request.batch_size},
      {"evaluator", evaluator_kind_name(o.request.evaluator)},
      {"seed", o.request.seed},
      {"profile", profile_json(o.costs.profiles)},
      {"calibration", calibration_json(o.costs)},
      {"source", o.best.source},
      {"placement", best ? placement_to_json(*best, g, c) : json()},
      {"groups", best ? groups_summary(*best, g, c) : json::array()},
      {"predicted_step_ms", ok_ms(o.verified.predicted)},
      {"measured_step_ms", ok_ms(measured)},
      {"step_ms", o.best.report.step_ms},
      {"comm_fraction", shown.comm_fraction},
      {"speedup_vs_bsp", speedup(ref.bsp_ms, o.best.report.step_ms)},
      {"speedup_vs_best_baseline", speedup(ref.best_baseline_ms, o.best.report.step_ms)},
      {"best_baseline", ref.best_baseline.empty() ? json() : json(ref.best_baseline)},
      {"baselines", baselines_json(o, ref)},
      {"policy", policy_json(o, ref)},
      {"report", step_report_to_json(shown, false)},
      {"timeline", step_report_to_json(shown, true)["timeline"]},
      {"verification", verification_json(o.verification, o.calibration_update)},
      {"elapsed_s", o.elapsed_s},
  };
  if (o.evaluator.hybrid) result["hybrid"] = hybrid_json(*o.evaluator.hybrid);
  if (o.al) result["al"] = al_json(*o.al, o);
  add_bounds(result, g, c, o.costs.cost, o.request.batch_size, o.baselines, o.best.report.step_ms,
             o.request.evaluator != EvaluatorKind::simulate);
  return result;
}

// Why no candidate and no baseline ran, for the user: a failed baseline's own
// reason (dp's, pipedream's, else the first: the DP planners say what does
// not fit where), else where each planner's reason is. (What the devices'
// memory cannot admit at all is said before profiling: run_job.)
// `baselines_ran`: false where the request turned them off and only the DP
// planner ran afterwards, to say why.
Status no_plan_status(const std::vector<BaselineResult>& baselines, bool baselines_ran) {
  const std::string head = baselines_ran ? "no placement fits: every candidate and baseline failed"
                                         : "no placement fits: every candidate of the search failed (baselines off)";
  auto failed = [](const BaselineResult& b) { return !b.skipped && !b.report.ok && !b.report.message.empty(); };
  for (const char* planner : {"dp", "pipedream", ""})
    for (const BaselineResult& b : baselines)
      if (failed(b) && (!*planner || b.name == planner)) return Status::error(head + " (" + b.report.message + ")");
  return Status::error(head + " (over a device's memory or failing to run; `tapp-cli plan --planner all` gives "
                              "each planner's reason)");
}

// ---- the job ----
Result<json> run_job(const OptimizeRequest& req, const ProgressFn& progress, const std::atomic<bool>& cancel) {
  Clock clock;
  Reporter report(progress, clock);
  Result<LayerGraph> graph_r = load_phase(req);
  if (!graph_r) return graph_r.status();
  const LayerGraph graph = std::move(graph_r.value());
  // A layer that no device holds even for one sample, or layers that only
  // some devices hold and that do not fit them together: said now, before
  // profiling, not after a search whose every candidate fails (gpt2 on 256 MB
  // devices: 16 s; a random model whose three largest layers fit only one
  // device: 91 s of profiling and 23 s of search).
  if (Status fits = memory_admits_placement(graph, req.cluster); !fits)
    return Status::error("no placement fits: " + fits.message());

  Result<JobCosts> costs = costs_phase(graph, req, report);
  if (!costs) return costs.status();
  if (cancel) return cancelled_status();

  EvaluatorInputs inputs;
  inputs.graph = &graph;
  inputs.cluster = &req.cluster;
  inputs.cost = &costs->cost;
  inputs.batch_size = req.batch_size;
  inputs.run.seed = req.seed;
  Result<JobEvaluator> evaluator = make_evaluator(req.evaluator, inputs);
  if (!evaluator) return evaluator.status();

  SearchOptions so = search_options(req);
  so.device_sample_ms = device_sample_ms(graph, req.cluster, costs->cost, req.batch_size);
  so.layer_ms = layer_compute_ms(graph, req.cluster, costs->cost, req.batch_size);
  so.zero_shot_costs = &costs->cost;
  std::vector<BaselineResult> baselines;
  if (req.baselines || req.warm_start) {
    report("baselines", 0, 0, 0, 0);
    baselines = baselines_phase(graph, req, *costs, *evaluator, baseline_search_budget(req, so), report, cancel);
  }
  if (cancel) return cancelled_status();

  // The bar's total: known unless a time budget alone stops the search.
  const int shown_total = req.iterations > 0 || req.time_budget_s <= 0 ? so.iterations : 0;
  SearchResult sr = search_phase(graph, req, so, baselines, *evaluator->evaluator, shown_total, report, cancel);
  if (sr.cancelled) return cancelled_status();

  const BestPlan best = pick_best(sr, baselines);
  if (best.source.empty()) {
    if (!baselines.empty()) return no_plan_status(baselines, true);
    // The baselines were off, so nothing has said why: the DP planner does
    // (what fits where), simulated, as it only explains.
    SimulatorEvaluator simulated(graph, req.cluster, costs->cost, req.batch_size);
    BaselineOptions bo = job_baseline_options(req);
    bo.planners = {"dp"};
    return no_plan_status(run_baselines(graph, req.cluster, costs->cost, simulated, bo), false);
  }

  const std::optional<AlRow> al =
      al_phase(graph, req, costs->profiles, prediction_costs(*costs, *evaluator), sr, baselines, cancel);
  if (cancel) return cancelled_status();

  // Only where something runs on the workers: a job without verification
  // (and not hybrid) goes from optimizing to done.
  if (req.verify || evaluator->hybrid) report("verifying", sr.iterations, shown_total, best.report.step_ms, 0);
  const Verified verified = verify_phase(graph, req, *costs, *evaluator, best, cancel);
  if (cancel) return cancelled_status();
  const Verification verification = measure_phase(graph, req, *costs, *evaluator, best, verified, baselines, cancel);
  if (cancel) return cancelled_status();
  const std::optional<CalibrationUpdate> calibration_update = calibration_phase(graph, req, *costs, verification);

  json result = result_json({req, graph, *costs, *evaluator, baselines, sr, best, verified, verification,
                             calibration_update, al, clock.s()});
  report("done", sr.iterations, shown_total, best.report.step_ms, 0);
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
