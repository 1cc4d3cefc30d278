// placer/baselines.cpp — see baselines.h.
#include "placer/baselines.h"

#include <algorithm>
#include <chrono>

#include "planners/planners.h"

namespace tapp {
namespace {

bool plans_a_pipeline(const std::string& planner) { return planner != "bsp" && planner != "hogwild"; }

// The pipeline planners of `rows` that ran, which plan again for 1F1B.
std::vector<std::string> pipeline_planners(const std::vector<PlannerRow>& rows) {
  std::vector<std::string> names;
  for (const PlannerRow& row : rows)
    if (plans_a_pipeline(row.name) && !row.skipped) names.push_back(row.name);
  return names;
}

// The pipeline planners of `rows` (planned for GPipe) run again for 1F1B;
// each row keeps the faster of its two plans and the time of both.
void keep_faster_on_1f1b(std::vector<PlannerRow>& rows, PlannerContext ctx, Evaluator& evaluator,
                         PlannerRunOptions ro) {
  ro.planners = pipeline_planners(rows);
  ctx.schedule = Schedule::one_f_one_b;
  for (PlannerRow& other : run_planners(ctx, evaluator, ro)) {
    PlannerRow& row =
        *std::find_if(rows.begin(), rows.end(), [&](const PlannerRow& r) { return r.name == other.name; });
    row.plan_s += other.plan_s;
    if (runs_faster(other.report, row.report)) {
      row.placement = std::move(other.placement);
      row.report = std::move(other.report);
    }
  }
}

// Passes every evaluation to `inner` and, at most every `every_s`, says how
// many the current planner has spent: random search and annealing spend the
// policy's whole budget, tens of seconds on a large model, under one line.
class CountingEvaluator : public Evaluator {
 public:
  CountingEvaluator(Evaluator& inner, double every_s, std::function<void(int64_t)> tick)
      : inner_(inner), every_(std::chrono::duration<double>(every_s)), tick_(std::move(tick)) {}
  StepReport evaluate(const Placement& placement) override {
    ++evaluations_;
    ++since_start_;
    StepReport r = inner_.evaluate(placement);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_tick_ >= every_) {
      last_tick_ = now;
      tick_(since_start_);
    }
    return r;
  }
  EvaluatorKind kind() const override { return inner_.kind(); }
  void planner_started() {
    since_start_ = 0;
    last_tick_ = std::chrono::steady_clock::now();
  }

 private:
  Evaluator& inner_;
  std::chrono::duration<double> every_;
  std::function<void(int64_t)> tick_;
  int64_t since_start_ = 0;
  std::chrono::steady_clock::time_point last_tick_ = std::chrono::steady_clock::now();
};

bool spends_budget(const std::string& planner) { return planner == "random" || planner == "anneal"; }

}  // namespace

std::vector<BaselineResult> run_baselines(const LayerGraph& graph, const Cluster& cluster, const CostModel& cost,
                                          Evaluator& evaluator, const BaselineOptions& o) {
  PlannerContext ctx;
  ctx.graph = &graph;
  ctx.cluster = &cluster;
  ctx.cost = &cost;
  ctx.batch_size = o.batch_size;
  ctx.optimizer = o.optimizer;
  ctx.seed = o.seed;
  ctx.budget = o.search_budget;
  ctx.cancel = o.cancel;
  PlannerRunOptions ro;
  ro.planners = o.planners;
  ro.strategy_evaluator = o.strategy_evaluator;
  // Progress: the rows of the first pass, then the 1F1B pass's (all but the data-parallel
  // rows; the count is exact once the first pass has said which rows it skipped).
  const std::vector<std::string>& names = o.planners.empty() ? planner_names() : o.planners;
  int started = 0, total = static_cast<int>(names.size());
  if (o.both_schedules)
    total += static_cast<int>(std::count_if(names.begin(), names.end(), plans_a_pipeline));
  std::string pass, current;  // current: the running planner's message
  bool budgeted = false;
  // Within a planner: its evaluations so far, and for the search planners the
  // share of their budget in the fraction.
  CountingEvaluator counted(evaluator, o.progress_every_s, [&](int64_t evaluations) {
    const double done = budgeted ? std::min(1.0, static_cast<double>(evaluations) / std::max(1, ctx.budget)) : 0;
    o.progress(current + ": " + std::to_string(evaluations) + (budgeted ? " of " + std::to_string(ctx.budget) : "") +
                   (evaluations == 1 && !budgeted ? " evaluation" : " evaluations"),
               (started - 1 + done) / total);
  });
  Evaluator& ev = o.progress ? static_cast<Evaluator&>(counted) : evaluator;
  if (o.progress)
    ro.on_planner = [&](const std::string& name) {
      current = name + pass + " (" + std::to_string(started + 1) + " of " + std::to_string(total) + ")";
      budgeted = spends_budget(name);
      o.progress(current, static_cast<double>(started) / total);
      ++started;
      counted.planner_started();
    };
  std::vector<PlannerRow> rows = run_planners(ctx, ev, ro);
  if (o.both_schedules) {
    total = started + static_cast<int>(pipeline_planners(rows).size());
    pass = ", 1f1b";
    keep_faster_on_1f1b(rows, ctx, ev, ro);
  }
  std::vector<BaselineResult> out;
  for (PlannerRow& row : rows)
    out.push_back({row.name, std::move(row.placement), row.plan_s, std::move(row.report), row.skipped});
  return out;
}

}  // namespace tapp
