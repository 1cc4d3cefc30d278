// placer/measurer.h — the search's one door to its evaluator: memo, best so far, trace, counts.
//
// Owns `Measurer` (after TVM auto_scheduler's ProgramMeasurer): every
// placement the policy, a restart or the refinement wants scored goes through
// measure(). A placement seen before is answered from the memo (so `measure`
// never runs a duplicate on the workers); a new one is validated, gets
// activation recomputation on the stages of a device that does not fit
// without it (the planners' rule, core's recompute_where_needed) and, where
// that is not enough, layers moved off the devices it overfills (core's
// move_layers_to_fit: a proposal of the policy's on devices far apart in
// memory, which its masks, by lower bounds, let through), gets
// replica weights by its devices' speeds where replicated groups have none
// and the search gave those speeds (replicas that differ in speed take
// micro-batches in proportion, when that still fits memory), is scored with
// its replica rings also in their cheapest order for the all-reduce (the
// policy offers replicas in index order; the faster is kept) and on both
// synchronous schedules (GPipe and 1F1B; the faster is kept), is
// memory-checked (a failure is data: "invalid_placement", "out_of_memory")
// and only then evaluated; the best kept is the placement as evaluated. It keeps the best valid
// placement, the best valid pipeline (not data parallel: the refinement
// climbs from it), a trace point each time the best improves, and the counts
// of distinct placements evaluated and failed.
// Data flow: Placement -> placement_key -> memo | validate -> both schedules -> order rings, weigh replicas ->
//            recompute where needed | move layers to fit -> check_memory -> Evaluator -> StepReport
//            -> memo, best, trace.
// Thread safety: one thread (the search's); the evaluator is used by it only.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/evaluator.h"
#include "core/memory_fit.h"
#include "core/placement.h"
#include "core/step_report.h"

namespace tapp {

struct LayerGraph;
struct Cluster;

// A canonical string of a placement (groups, devices and replicas, micro-batches, schedule).
std::string placement_key(const Placement& p);

struct TracePoint {
  int iteration = 0;
  int64_t evaluations = 0;
  double elapsed_s = 0;
  double best_step_ms = 0;
};

// `p` on the other synchronous schedule, GPipe <-> 1F1B (the same gradients,
// another order of the micro-batches), without its recomputation marks (what
// that schedule keeps in flight decides them anew); none for data
// parallelism or the interleaved and AL schedules.
std::optional<Placement> with_other_schedule(const Placement& p);

class Measurer {
 public:
  // `graph`, `cluster` and `evaluator` must outlive the measurer; its clock starts now.
  // Every placement it measures trains with `optimizer` (set on it before the
  // memory check; best() carries it).
  Measurer(const LayerGraph& graph, const Cluster& cluster, Evaluator& evaluator, int64_t batch_size,
           Optimizer optimizer = Optimizer::sgd);

  // Per device: its time per sample (any unit; only ratios count). From now
  // on, replicated groups without weights are also scored weighed by it
  // (weigh_replicas), and the faster of that and the even split is kept.
  void weigh_replicas_by(std::vector<double> device_sample_ms) { device_sample_ms_ = std::move(device_sample_ms); }

  // The report of `p` (without a timeline): from the memo, or checked and
  // evaluated once. `iteration` labels an improvement in the trace.
  const StepReport& measure(const Placement& p, int iteration);
  // `p` as measure() scored it (its schedule, replica rings and weights,
  // recomputation, layers moved to fit), which reproduces its report; `p`
  // itself where it was not measured.
  Placement as_evaluated(const Placement& p) const;

  bool found() const { return best_.has_value(); }
  const Placement& best() const { return best_->first; }
  const StepReport& best_report() const { return best_->second; }
  // The best valid placement that is not data parallel, with its step.
  const std::optional<std::pair<Placement, double>>& best_pipeline() const { return best_pipeline_; }
  int last_improvement() const { return last_improvement_; }  // iteration of the last new best

  int64_t evaluations() const { return evaluations_; }  // distinct placements evaluated
  int64_t failures() const { return failures_; }        // of which failed
  int64_t moved() const { return moved_; }              // of which fitted only with layers moved
  const std::vector<TracePoint>& trace() const { return trace_; }
  double elapsed_s() const;
  // Marks the best as improved by a later stage ("policy+refine").
  void relabel_best(const std::string& source) { best_->first.source = source; }

 private:
  // Each may change p into what it scored: replica rings reordered,
  // recomputation marked, replica weights set.
  StepReport check_and_evaluate(Placement& p);  // valid, then on GPipe and on 1F1B, the faster
  StepReport rings_and_evaluate(Placement& p);  // as given or on the cheapest rings, the faster
  StepReport split_and_evaluate(Placement& p);  // the even split or, where faster, the one weighed by speed
  StepReport fit_and_evaluate(Placement& p);    // recomputes, else moves layers, where that makes p fit
  void keep_if_best(const Placement& p, const StepReport& r, int iteration);

  const LayerGraph& graph_;
  const Cluster& cluster_;
  Evaluator& evaluator_;
  int64_t batch_size_;
  Optimizer optimizer_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::string keyed(Placement& p) const;  // sets p's optimizer to this one; its memo key
  struct Scored {
    StepReport report;
    Placement placement;  // as evaluated
  };
  std::map<std::string, Scored> memo_;
  std::optional<std::pair<Placement, StepReport>> best_;
  std::optional<std::pair<Placement, double>> best_pipeline_;
  int last_improvement_ = 0;
  int64_t evaluations_ = 0, failures_ = 0, moved_ = 0;
  bool moving_ = false;  // the placement being measured had layers moved to fit
  std::vector<TracePoint> trace_;
  std::vector<double> device_sample_ms_;
  LayerMover mover_;  // built once: every proposal that recomputing does not fit goes through it
};

// Gives each replicated group of `p` whose replicas differ in speed the
// weights that let them finish together: its micro-batches counted out one
// at a time to the replica that would finish it first (time per sample from
// `device_sample_ms`, one entry per device), those counts as the weights.
// Groups that already have weights, and equally fast replica sets, are left
// as they are. Returns whether any group was given weights.
bool weigh_replicas(Placement& p, const std::vector<double>& device_sample_ms);

// Whether `p` has replica rings whose order counts: replicated groups of a
// pipeline, or a BSP data-parallel placement's replicas.
bool has_replica_rings(const Placement& p);

// Puts each group of `p` replicated on three devices or more on the ring
// whose all-reduce of the group's parameters is cheapest on `cluster`'s links
// (cheapest_ring), where that is strictly cheaper than its order now, turned
// so that its fastest replicas come first (round-robin gives them the
// micro-batches that do not divide evenly). Fastest: by `device_sample_ms`
// (time per sample, one per device) where given, else by the devices' speed.
// Weights follow their devices. A BSP data-parallel placement's replicas
// (equal shares) go on their cheapest ring. Returns whether any group changed.
bool order_replica_rings(Placement& p, const LayerGraph& graph, const Cluster& cluster,
                         const std::vector<double>& device_sample_ms);

}  // namespace tapp
