// runtime/measure_evaluator.h — an Evaluator that measures placements on real workers.
//
// Data flow: Placement -> run_placement (runtime.h) -> StepReport (source "measure").
// Holds the model, the cluster and the run options; every evaluate() starts the
// workers afresh, so one slow or failed candidate cannot affect the next.
// Thread safety: one thread at a time (see core/evaluator.h).
#pragma once

#include "core/evaluator.h"
#include "model/layer_graph.h"
#include "core/cluster.h"
#include "runtime/runtime.h"

namespace tapp {

class MeasureEvaluator : public Evaluator {
 public:
  MeasureEvaluator(LayerGraph graph, Cluster cluster, RunOptions options)
      : graph_(std::move(graph)), cluster_(std::move(cluster)), options_(std::move(options)) {}
  StepReport evaluate(const Placement& placement) override;
  EvaluatorKind kind() const override { return EvaluatorKind::measure; }

 private:
  LayerGraph graph_;
  Cluster cluster_;
  RunOptions options_;
};

}  // namespace tapp
