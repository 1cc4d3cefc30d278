// planners/planner_support.h — helpers the planner families share (not API).
//
// Owns the checks of a PlannerContext, the per-call estimator (`PlanEstimator`:
// one Simulator over the context's cost model, owned by the planner call that
// makes it; nothing outlives the call), the per-stage bottleneck model of the
// DP and the enumerations, the best-so-far of the search planners, and the
// entry points of the families that also return their evaluator's report
// (run_planners reuses it instead of evaluating twice).
// Thread safety: plain functions; a PlanEstimator is used by one thread at a time.
#pragma once

#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "core/evaluator.h"
#include "core/placement.h"
#include "core/step_report.h"
#include "planners/context.h"
#include "planners/moves.h"
#include "simulator/simulator.h"

namespace tapp::planner_support {

constexpr double kInf = std::numeric_limits<double>::infinity();

int num_layers(const PlannerContext& ctx);
int num_devices(const PlannerContext& ctx);
bool cancelled(const PlannerContext& ctx);
Status check_context(const PlannerContext& ctx);
// Samples in one micro-batch of m (the last one may be smaller).
int64_t micro_batch_samples(const PlannerContext& ctx, int m);
// Forward + backward of layers [a, b) on device d for `samples` samples.
double stage_ms(const PlannerContext& ctx, int d, int a, int b, int64_t samples);
// Per device the lowest index of a device interchangeable with it under the
// cost model: as fast on this model, as much memory, the same links to and
// from every other device (and each way between the two).
std::vector<int> interchangeable_classes(const PlannerContext& ctx);
// Devices by estimated speed on this model (fastest first).
std::vector<int> devices_fastest_first(const PlannerContext& ctx);
// Stage boundaries a DP over cut positions considers (0 and L included):
// every layer when there are at most `max_positions`, else the layers where
// the cumulative time on the fastest device crosses a quantile.
std::vector<int> cut_positions(const PlannerContext& ctx, int max_positions);
// The move generator over the context's layers, devices and micro-batch choices.
StageMoves stage_moves(const PlannerContext& ctx);
// check_memory(p) passes.
bool fits(const PlannerContext& ctx, const Placement& p);
// The context's placement of a plan: its schedule and optimizer, and (when
// ctx.allow_recompute) recomputation for the stages of a device that would
// not fit otherwise (core's recompute_where_needed; a plan that fits is left alone).
Placement planned(const PlannerContext& ctx, const StagePlan& plan, const std::string& source);
// Like check_memory, but first lets recompute_where_needed mark stages when the context allows it.
Status fit_with_recompute(const PlannerContext& ctx, Placement& p);
// Why nothing fits, naming the device: a layer the largest device cannot hold
// even for one sample, else the model's training state against the devices' memory.
std::string memory_shortfall(const PlannerContext& ctx);
Status nothing_fits(const PlannerContext& ctx, const std::string& planner);

// Predicted steps under the context's cost model, reusing one Simulator (and
// its task-graph buffers) for every estimate of one planner call.
class PlanEstimator {
 public:
  explicit PlanEstimator(const PlannerContext& ctx);
  double step_ms(const Placement& p);  // infinity when the simulation fails

 private:
  Simulator sim_;
};

// Picks the micro-batch count with the best estimate among placements that fit.
Result<Placement> best_micro_batches(const PlannerContext& ctx, PlanEstimator& estimator, Placement p,
                                     const std::string& what);

// Hill climbing on the cost model's simulation through the move generator:
// the best improving neighbour by `set` each round (at most 100 rounds).
// Returns the final estimate (infinity when nothing fits) and plan.
std::pair<double, StagePlan> polish_by_simulation(const PlannerContext& ctx, PlanEstimator& estimator, StagePlan plan,
                                                 const MoveSet& set, const std::string& source);

// Per-sample bytes of the tensors made before a stage [a, b) and read at or
// after b. The task graph sends a tensor from its maker to each stage that
// reads it, so the stage sends none of these on (`over`), where the bytes
// across each cut (BottleneckModel::cut) count them at both of its cuts; and
// of those, the ones it does not read (`past`: no gradient of theirs goes back
// from it either).
class StagePassing {
 public:
  struct Bytes {
    int64_t over = 0, past = 0;
  };
  explicit StagePassing(const LayerGraph& g);
  Bytes bytes(int a, int b) const;
  // bytes(P[i], P[j]) at [i * P.size() + j] for i < j (0 elsewhere); P ascending.
  std::vector<Bytes> table(const std::vector<int>& P) const;

 private:
  std::vector<std::vector<int>>
      readers_;                 // per layer, the layers that read it, ascending (LayerGraph::consumers)
  std::vector<int64_t> bytes_;  // each layer's activation bytes per sample
};

// Bottleneck of one stage / boundary, shared by the DP and the enumerations:
// a stage's forward + backward per micro-batch (infinity when it does not fit
// its device's memory with the micro-batches it keeps in flight, which under
// 1F1B depend on `stages_to_end`, the stages from it to the last, itself
// included; when it fits only by recomputing and the context allows that, one
// more forward), a boundary's transfer per micro-batch on the slower direction
// of its link.
struct BottleneckModel {
  BottleneckModel(const PlannerContext& c, int micro_batches);
  double stage(int d, int a, int b, int stages_to_end) const;
  double boundary(int from, int to, int j) const;

  const PlannerContext& ctx;
  std::vector<int64_t> cut;  // per-sample bytes crossing the cut before layer j
  StageMemory mem;
  int m;
  int64_t samples;
};

// The evaluator's best ok report so far, and the first failure to run (a
// worker that failed or was lost, a step over its time), not to fit.
struct Best {
  std::optional<Placement> placement;
  StepReport report;
  std::optional<StepReport> failed_to_run;
  bool consider(const Placement& p, const StepReport& r);
  // Why the planner has no plan: that failure where there was one (the plans
  // fit: the evaluator could not run them), else nothing_fits.
  Status none_found(const PlannerContext& ctx, const std::string& planner) const;
};

struct Outcome {
  Placement placement;
  std::optional<StepReport> report;  // the evaluator's report when the planner already has it
};

// The families that evaluate while planning.
Result<Outcome> dynamic_programming(const PlannerContext& ctx, Evaluator& ev, int verify);
Result<Outcome> exhaustive(const PlannerContext& ctx, Evaluator& ev);
Result<Outcome> random_search(const PlannerContext& ctx, Evaluator& ev);
Result<Outcome> annealing(const PlannerContext& ctx, Evaluator& ev);
Result<Outcome> pipedream(const PlannerContext& ctx, Evaluator& ev, int verify);
Result<Outcome> pipelearn(const PlannerContext& ctx, Evaluator& ev);

}  // namespace tapp::planner_support
