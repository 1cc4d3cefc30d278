// runtime/measure_evaluator.h — an Evaluator that measures placements on real workers.
//
// Data flow: Placement -> run_placement (runtime.h) -> StepReport (source "measure").
// Holds the model, the cluster and the run options; every evaluate() starts the
// workers afresh, so one slow or failed candidate cannot affect the next.
// With a step estimate (the simulator's prediction) a run waits for worker
// progress as long as the step needs (step_timeout_s), not only the run
// options' fixed limit: a BSP step over a slow link takes minutes.
// Thread safety: one thread at a time (see core/evaluator.h).
#pragma once

#include <functional>

#include "core/evaluator.h"
#include "model/layer_graph.h"
#include "core/cluster.h"
#include "runtime/runtime.h"

namespace tapp {

// Predicted step of a placement in ms; 0 or less when it has none.
using StepEstimate = std::function<double(const Placement&)>;

// How long a run may go without worker progress: the fixed limit, or
// kTimeoutOverStep times the step it waits for, whichever is longer (a
// prediction can be off, and the first step also starts the workers).
constexpr double kTimeoutOverStep = 3;
double step_timeout_s(double fixed_timeout_s, double step_ms);

class MeasureEvaluator : public Evaluator {
 public:
  MeasureEvaluator(LayerGraph graph, Cluster cluster, RunOptions options, StepEstimate estimate = {})
      : graph_(std::move(graph)), cluster_(std::move(cluster)), options_(std::move(options)),
        estimate_(std::move(estimate)) {}
  // Waits as long as the placement's predicted step needs, but never for more
  // than the best step measured so far needs: a plan slower than that cannot
  // be the best, so a search does not spend minutes on it.
  StepReport evaluate(const Placement& placement) override;
  EvaluatorKind kind() const override { return EvaluatorKind::measure; }

 private:
  LayerGraph graph_;
  Cluster cluster_;
  RunOptions options_;
  StepEstimate estimate_;
  double best_measured_ms_ = 0;  // 0: nothing measured yet
};

}  // namespace tapp
