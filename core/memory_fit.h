// core/memory_fit.h — moves layers off the devices that a placement overfills.
//
// Owns `LayerMover` and `move_layers_to_fit`: the step after
// recompute_where_needed for a proposal that recomputation alone does not fit
// (a learned placer's proposal on devices far apart in memory: four groups on
// the one large device while three small ones stand idle). One move at a
// time, the one that most lowers the bytes by which devices are over their
// memory: a run of layers at the edge of a group on a device that is over (a
// replicated group's too) goes to a group it exchanges tensors with on
// another device, or opens a group of its own on another device (an idle one
// first); or the micro-batches double; where no single move lowers it, a pair
// that does; where no pair does either, a replica leaves its group (alone or
// before a move). Data parallelism and AL placements are left as they are.
// Memory is core's rule (estimate_device_memory).
// Data flow: Placement (over memory) -> moved layers -> Placement (fits) | unchanged.
// Thread safety: a LayerMover is immutable once built; move_layers_to_fit is a plain function.
#pragma once
#include <cstdint>
#include <memory>

namespace tapp {

struct LayerGraph;
struct Cluster;
struct Placement;

// What the moves of one graph on one cluster share (the graph's consumers,
// the bytes each cut in layer order crosses): a search builds it once and
// calls fit() for each proposal that recomputing does not fit.
class LayerMover {
 public:
  // `g` and `c` must outlive the mover.
  LayerMover(const LayerGraph& g, const Cluster& c, int64_t batch_size);
  ~LayerMover();

  // Moves layers of `p` (as above) until every device fits with every group
  // recomputing, or no single move lowers the overflow; where it fits, clears
  // the recompute flags and marks recomputation where needed
  // (recompute_where_needed) and returns true. Otherwise `p` is left unchanged
  // and it returns false. Deterministic; at most 2 x devices + layers / 2 + 8
  // layer moves.
  bool fit(Placement& p) const;

 private:
  class Moves;
  std::unique_ptr<const Moves> moves_;
};

// LayerMover(g, c, batch_size).fit(p), for a single placement.
bool move_layers_to_fit(Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size);

}  // namespace tapp
