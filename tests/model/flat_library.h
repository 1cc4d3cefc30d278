// tests/model/flat_library.h — a layer library where every layer costs the same, shared by the
// simulator, planner and placer tests.
#pragma once

#include <cstdint>

#include "model/layer_graph.h"
#include "model/layer_library.h"

namespace tapp::test {

// Every layer of `g` costs fwd_ms forward and bwd_ms backward per `batch` samples.
inline LayerLibrary flat_library(const LayerGraph& g, int64_t batch, double fwd_ms, double bwd_ms) {
  LayerLibrary lib = library_skeleton(g);
  lib.batch_size = batch;
  for (auto& r : lib.rows) {
    r.forward_ms = fwd_ms;
    r.backward_ms = bwd_ms;
  }
  return lib;
}

}  // namespace tapp::test
