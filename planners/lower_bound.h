// planners/lower_bound.h — how good is good: a lower bound on the step time of
// any placement of a model on a cluster, under the simulator's cost model.
//
// Owns `StepLowerBound` and `step_lower_bound`. Data flow: (LayerGraph,
// Cluster, CostModel, batch) -> bound (ms, and the two terms it is the best
// of) -> each result's gap to it (`gap_to_bound`).
// Why it is a bound (the simulator's model: simulate() and
// simulate_data_parallel(); any pipeline, replicated or branch-parallel
// placement, any micro-batch count m in [1, B], any schedule):
//  * Per layer l, device d, s samples, c(l, d, s) = forward + backward compute
//    without overheads, device factor included, concurrency slowdown (>= 0)
//    left out; a segment's compute is never below the sum of its layers'
//    c (the profiled prefix sums are additive; above the largest profiled batch
//    the segment's slope is at least the sum of its layers' own slopes), and
//    each (layer, micro-batch) pays 2 x layer_overhead_ms / speed.
//  * Work: every sample of every layer is computed on some device that can
//    hold that layer (its training state and one sample's activations fit).
//    With u_l the cheapest per-sample cost of l over devices and batch sizes,
//    and rho_d = min_l (device d's per-sample cost of l) / u_l, a device busy
//    for T does at most T / rho_d of "u work"; with m chunks per layer
//    (micro-batches, or BSP replicas) paying the overhead o_d on some device:
//      T >= (B x sum_l u_l + L x m x min_d o_d / rho_d) / sum_d 1 / rho_d.
//  * Chain: micro-batch 0 (ceil(B / m) samples) runs forward along every path
//    to the last layer (the loss) and backward along it again, on one device
//    per layer: T >= the longest such path of min_d (c(l, d, s) + o_d).
//  * Work grows with m and the chain shrinks, so the bound is
//    min over m of max(work(m), chain(m)) (+ the per-step overhead), found by
//    bisection. Transfers, all-reduces, updates and first-task costs only add.
//  * Shares: device d's u-work is at most B x H_d, where H_d is the most u per
//    sample over layers whose training state (sgd's, the smallest) and one
//    sample's kept activations (what a device that runs a layer keeps, even
//    recomputing) fit d's memory together (a fractional knapsack). A device that cannot hold all of
//    that for the whole model runs every sample only in part, so (the graph being
//    connected) each sample it runs crosses to or from it at least the
//    smallest layer output a_min (its forward activation; each transfer is
//    bytes x per-byte time on its own (sender, receiver) queue, and d's
//    queues in and out move at most BW_d bytes per ms together); it runs at
//    least u-work_d / H_d samples, so u-work_d <= T x H_d x BW_d / a_min. With
//    u-work_d <= T / rho_d as well: T >= the smallest T with
//    sum_d min(T x rate_d, B x H_d) >= B x sum_l u_l. This holds in every
//    mode (asynchronous and FedAvg replicas included: they hold the whole model).
//  * Synchronous placements (`synchronous_ms`: each step all-reduces every
//    replicated group's gradients, BSP's replicas included). A layer that two
//    devices run is in a replicated group, whose ring allreduce
//    (CostModel::ring_allreduce_ms) ends before the step and costs at least
//    2 x the cheapest link's fixed cost + its bytes x the cheapest per-byte
//    cost; a layer that one device runs has all B samples there. So T >= the
//    most over layers of the cheaper of the two (`lone_layers_ms`). And either
//    at most one device runs every layer, so each other one runs every sample
//    it runs only in part and its links cap it as above even where its memory
//    holds the whole model (the least T over which device, if any, is left
//    uncapped); or two devices run every layer, every group with parameters is
//    replicated on both and their allreduces share each one's send queues, at
//    most D - 1: T >= that floor for max(the largest layer's parameters, all
//    parameters / (D - 1)) (`allreduce_ms`). Asynchronous modes have only `ms`.
// It is not a bound on measured steps (the runtime is not the model).
// Thread safety: a pure function.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"

namespace tapp {

struct LayerGraph;
struct Cluster;
struct Placement;
class CostModel;

struct StepLowerBound {
  double ms = 0;        // no placement's simulated step is shorter
  double synchronous_ms = 0;  // no synchronous placement's (is_synchronous) is: >= ms
  double work_ms = 0;   // the work term at the bounding micro-batch count
  double chain_ms = 0;  // the chain term at that count
  double shares_ms = 0;  // the capped-shares term (0 where the caps cannot be met)
  // Synchronous plans' terms: the most over layers of the cheaper of its
  // allreduce and its whole batch on one device; two devices that run every
  // layer: their allreduces (0 where fewer than two devices hold the model).
  double lone_layers_ms = 0;
  double allreduce_ms = 0;
  int micro_batches = 1;
  std::string basis;  // one line: what it is a bound under
};

// Whether the devices' memory admits any placement, by two necessary
// conditions (memory only, no costs: a job checks it before profiling): every
// layer fits some device alone (else an error naming the layer, its size and
// the largest device), and for every k the layers that only the k largest
// devices hold keep their weights, gradients and momentum within those
// devices' memory together (else an error naming the layers, the devices, the
// bytes and the memory). ok does not promise that a placement fits.
Status memory_admits_placement(const LayerGraph& g, const Cluster& c);

// Errors: memory_admits_placement's.
Result<StepLowerBound> step_lower_bound(const LayerGraph& g, const Cluster& c, const CostModel& cost,
                                        int64_t batch_size);

// {"ms", "work_ms", "chain_ms", "shares_ms", "micro_batches", "basis"}, or
// {"error"} (schemas/job.schema.json).
nlohmann::json lower_bound_json(const Result<StepLowerBound>& r);

// Whether every step all-reduces p's replicas (aggregation_every 1, not
// hogwild): the placements synchronous_ms bounds.
bool is_synchronous(const Placement& p);
// The bound that holds for p: synchronous_ms or ms.
double bound_for(const StepLowerBound& b, const Placement& p);
// A row's: its plan's, or synchronous_ms where it found none.
double bound_for(const StepLowerBound& b, const std::optional<Placement>& p);

// (step - bound) / bound; 0 when the bound is not positive.
double gap_to_bound(double step_ms, double bound_ms);

}  // namespace tapp
