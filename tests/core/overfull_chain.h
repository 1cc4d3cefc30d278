// tests/core/overfull_chain.h — a chain that no recomputation fits on one device.
//
// 16 -> 2048 x 4 -> 10 at batch 64: each 2048 x 2048 layer holds 16 MiB of
// weights (48 MiB with its gradients and momentum); all six layers on d0
// (160 MiB) do not fit even recomputing, while d1 (128 MiB) stands idle.
// Moving layers to d1 (core/memory_fit.h) fits it.
#pragma once

#include <cstdint>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "tests/core/fake_evaluator.h"
#include "tests/model/linear_chain.h"

namespace tapp::testing {

struct OverfullChain {
  LayerGraph graph = test::linear_chain({2048, 2048, 2048, 2048, 2048, 10});
  Cluster cluster = [] {
    Cluster c = equal_cluster(2, 160);
    c.devices[1].memory_mb = 128;
    return c;
  }();
  Placement placement = Placement::single_device(6, 0, 2);  // every layer on d0
  int64_t batch = 64;
};

}  // namespace tapp::testing
