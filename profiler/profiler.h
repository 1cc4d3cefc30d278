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

// Where a long profile is, for a progress bar: which profile of a job's set
// (device kind and threads, micro-batch size), which layer of how many.
// `warning` is set instead when something went wrong but profiling goes on
// (the cache could not be written).
struct ProfileProgress {
  std::string device_kind = "cpu";
  int threads = 1;
  int64_t batch_size = 0;
  int device_set = 1, device_sets = 1;  // 1-based position among the job's (kind, threads) sets
  int size_index = 1, sizes = 1;        // 1-based position among the set's micro-batch sizes
  int layer = 0, layers = 0;  // the layer being timed, 1-based; 0: starting; layers + 1: the whole step
  std::string layer_name;
  std::string warning;
  // 0..1 through the job's profiles (sets, then sizes, then layers).
  double fraction() const;
  // "cpu x1, micro-batch size 4 (3/6): layer 12/22 conv3".
  std::string message() const;
};

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
  // Called before each layer is timed and before the whole step (see ProfileProgress).
  std::function<void(const ProfileProgress&)> progress;
};

Result<LayerLibrary> profile_model(const LayerGraph& graph, const ProfileOptions& options);

// Looks the profile up in `cache` (may be null) first; stores new profiles.
// `cache_hit` (optional) tells which happened.
Result<LayerLibrary> profile_cached(const LayerGraph& graph, const ProfileOptions& options,
                                    ProfileCache* cache, bool* cache_hit = nullptr);

}  // namespace tapp
