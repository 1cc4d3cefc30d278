#include "simulator/simulator_evaluator.h"

#include "simulator/data_parallel.h"

namespace tapp {

SimulatorEvaluator::SimulatorEvaluator(LayerGraph graph, Cluster cluster, CostModel cost, int64_t batch_size)
    : graph_(std::make_unique<LayerGraph>(std::move(graph))),
      cluster_(std::make_unique<Cluster>(std::move(cluster))),
      sim_(std::make_unique<Simulator>(*graph_, *cluster_, std::move(cost), batch_size)) {}

StepReport SimulatorEvaluator::evaluate(const Placement& placement) {
  ++evaluations_;
  if (placement.is_data_parallel()) {
    // The same rules as a pipeline's (core's validate_placement: replicas named once, one micro-batch, ...).
    if (Status s = validate_placement(placement, *graph_, *cluster_, sim_->batch_size()); !s)
      return StepReport::failure(FailureKind::invalid_placement, s.message(), "simulate");
    StepReport r = simulate_data_parallel(*graph_, *cluster_, sim_->cost(), sim_->batch_size(), placement);
    if (!timeline) r.timeline.clear();
    return r;
  }
  SimulateOptions options;
  options.timeline = timeline;
  return sim_->evaluate(placement, options);
}

}  // namespace tapp
