// simulator/simulator_evaluator.h — the Evaluator that predicts instead of measuring.
//
// Owns `SimulatorEvaluator`: Placement -> Simulator (build the task graph,
// check memory, replay with the CostModel) -> StepReport (source "simulate").
// A data-parallel marker (planners/planners.h, source "bsp") is costed by
// simulate_data_parallel. Deterministic: the same placement gives the same report.
// Keeps its own copies of the model and the cluster.
// Thread safety: one thread at a time (see core/evaluator.h).
#pragma once

#include <memory>

#include "core/evaluator.h"
#include "model/layer_graph.h"
#include "core/cluster.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"

namespace tapp {

class SimulatorEvaluator : public Evaluator {
 public:
  SimulatorEvaluator(LayerGraph graph, Cluster cluster, CostModel cost, int64_t batch_size);
  StepReport evaluate(const Placement& placement) override;
  EvaluatorKind kind() const override { return EvaluatorKind::simulate; }

  bool timeline = false;  // fill StepReport::timeline (slower; off for searches)
  const CostModel& cost() const { return sim_->cost(); }
  void set_cost(CostModel cost) { sim_->set_cost(std::move(cost)); }  // e.g. after calibration
  const LayerGraph& graph() const { return *graph_; }
  const Cluster& cluster() const { return *cluster_; }
  int64_t batch_size() const { return sim_->batch_size(); }

 private:
  std::unique_ptr<LayerGraph> graph_;
  std::unique_ptr<Cluster> cluster_;
  std::unique_ptr<Simulator> sim_;
};

}  // namespace tapp
