// core/memory_fit.h — moves layers off the devices that a placement overfills.
//
// Owns `move_layers_to_fit`: the step after recompute_where_needed for a
// proposal that recomputation alone does not fit (a learned placer's
// proposal on devices far apart in memory: four groups on the one large
// device while three small ones stand idle). One layer at a time, the move
// that most lowers the bytes by which devices are over their memory:
// a layer at the edge of its group, on a device that is over, goes to a group
// it exchanges tensors with on another device, or opens a group of its own on
// a device that holds none. Replicated groups, data parallelism and AL
// placements are left as they are. Memory is core's rule (estimate_device_memory).
// Data flow: Placement (over memory) -> moved layers -> Placement (fits) | unchanged.
// Thread safety: plain functions.
#pragma once
#include <cstdint>

namespace tapp {

struct LayerGraph;
struct Cluster;
struct Placement;

// Moves layers of `p` (as above) until every device fits with every group
// recomputing, or no single move lowers the overflow; where it fits, clears
// the recompute flags and marks recomputation where needed
// (recompute_where_needed) and returns true. Otherwise `p` is left unchanged
// and it returns false. Deterministic; at most 2 x devices + 8 moves.
bool move_layers_to_fit(Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size);

}  // namespace tapp
