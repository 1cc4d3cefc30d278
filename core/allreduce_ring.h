// core/allreduce_ring.h — a ring all-reduce's cost on a cluster's links, and its cheapest order.
//
// A replicated group's devices all-reduce its gradients in a ring, in their
// order (the runtime's ReplicaGroup and the simulator's CostModel both pace it
// by the ring's slowest hop). On links of different speeds the order decides
// that hop: six devices of a random cluster took 187.4 ms a step in index
// order and 131.1 ms in PipeDream's. `cheapest_ring` picks the order.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace tapp {

struct Cluster;

// Seconds a ring all-reduce of `bytes` among `devices` (cluster indices, ring
// in this order) takes: 2 (r-1) steps, each moving bytes / r over every ring
// link at once, so paced by the ring's slowest link.
double ring_allreduce_s(const Cluster& cluster, const std::vector<int>& devices, int64_t bytes);

// Rings up to this many devices are searched exhaustively ((r-1)! orders).
inline constexpr int kExhaustiveRingDevices = 7;

// `devices` reordered so that their ring all-reduce of `bytes` is cheapest:
// the least slowest hop, ties broken by the least total over the hops. Exact
// up to kExhaustiveRingDevices; beyond, the best of the given order and a
// greedy ring (the fastest next hop) from each start. The given order is kept
// unless another is strictly cheaper (so the result of the result is itself).
std::vector<int> cheapest_ring(const Cluster& cluster, const std::vector<int>& devices, int64_t bytes);

}  // namespace tapp
