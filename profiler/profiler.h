// profiler/profiler.h — measuring a layer graph, layer by layer, with LibTorch.
//
// Owns `profile_model`: builds a GraphModel, runs one forward pass to get
// every layer's inputs, then for each layer times forward (autograd on, as in
// training) and backward (autograd from that layer's output with a random
// gradient, its inputs requiring grad), warm-up runs first and then the median
// of several runs. It also times a whole training step (forward +
// cross-entropy + backward) and reports sum(per-layer) / whole step as the
// profile's self-check. `profile_cached` wraps it with a ProfileCache.
// Data flow: LayerGraph -> GraphModel -> timings -> LayerLibrary (-> cache).
// No LibTorch in this header. Thread safety: sets LibTorch's global intra-op
// thread count; run one profile per process at a time.
#pragma once

#include <functional>
#include <string>

#include "common/status.h"
#include "model/layer_graph.h"
#include "model/layer_library.h"
#include "model/profile_cache.h"

namespace tapp {

struct ProfileOptions {
  std::string device = "cpu";  // "cpu" (Debian's LibTorch has no CUDA)
  int threads = 1;             // at::set_num_threads
  int64_t batch_size = 16;
  int warmup_runs = 2;
  int runs = 5;  // median of these
  uint64_t seed = 1;
  // Time with this thread's CPU clock instead of the wall clock (threads = 1
  // only): robust to other processes sharing the cores, blind to waiting.
  bool cpu_clock = false;
  // Called with short progress lines ("layer 12/40 conv3") on long profiles.
  std::function<void(const std::string&)> progress;
};

Result<LayerLibrary> profile_model(const LayerGraph& graph, const ProfileOptions& options);

// Looks the profile up in `cache` (may be null) first; stores new profiles.
// `cache_hit` (optional) tells which happened.
Result<LayerLibrary> profile_cached(const LayerGraph& graph, const ProfileOptions& options,
                                    ProfileCache* cache, bool* cache_hit = nullptr);

}  // namespace tapp
