// simulator/data_parallel.h — the predicted step of whole-model replicas (BSP, HOGWILD).
//
// Owns `simulate_data_parallel`: replicas have no pipeline task graph, so their
// step is costed here in closed form from the same CostModel as the simulator:
// the slowest replica's forward + backward on its share of the batch, a ring
// allreduce of every parameter (BSP only), then the update.
// Data flow: (LayerGraph, Cluster, CostModel, replicas) -> StepReport.
// Thread safety: stateless functions.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cluster.h"
#include "core/placement.h"
#include "core/step_report.h"
#include "model/layer_graph.h"
#include "simulator/cost_model.h"

namespace tapp {

// Each replica runs the whole model on ceil(batch / replicas) samples; then a
// ring allreduce of all parameters (2 (R-1)/R x bytes over the slowest link of
// the ring, 2 latencies); then the optimizer update.
StepReport simulate_data_parallel(const LayerGraph& g, const Cluster& c, const CostModel& cost, int64_t batch_size,
                                  const std::vector<int>& devices, bool exchange_gradients = true);
// The marker's strategy: BSP, or HOGWILD (the same without the allreduce).
StepReport simulate_data_parallel(const LayerGraph& g, const Cluster& c, const CostModel& cost, int64_t batch_size,
                                  const Placement& marker);

}  // namespace tapp
