// tests/planners/memory_tight.h — random chains whose activations weigh
// against their devices' memory, for the planners' memory-per-stage tests.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "tests/model/linear_chain.h"

namespace tapp::test {

// L linear layers 256 to 2048 wide: megabytes of weights, kilobytes of
// activations per sample, so a batch in the thousands makes the micro-batches
// in flight count.
inline LayerGraph wide_chain(std::mt19937& rng, int L) {
  std::vector<int64_t> widths;
  for (int i = 0; i < L; ++i) widths.push_back(256 << (rng() % 4));
  return linear_chain(widths);
}

// Each device's memory 20-99% of what the whole of `g` needs with one
// micro-batch of `samples` in flight.
inline void squeeze_memory(std::mt19937& rng, Cluster& c, const LayerGraph& g, int64_t samples) {
  const int64_t whole_mb = StageMemory(g).bytes(0, static_cast<int>(g.layers.size()), samples, 1) >> 20;
  for (Device& d : c.devices) d.memory_mb = std::max<int64_t>(1, whole_mb * (20 + rng() % 80) / 100);
}

}  // namespace tapp::test
