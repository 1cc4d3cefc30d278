// profiler/cost_profiles.h — the one rule for the layer libraries a job's simulated costs come from.
//
// Owns `cost_profiles`, used by both `tapp-cli plan`/`calibrate` and
// optimize() (the server's jobs), so the two simulate the same job with the
// same costs (docs/placer.md, "Cost inputs"):
//   - one set of libraries per distinct (device kind, threads) of the cluster,
//     in device order: a device's costs come from a profile taken the way it
//     runs (a 4-thread device is not 4 one-thread devices);
//   - each set at the micro-batch sizes 1, 2, 4, ... up to the batch
//     (profile_batch_sizes), so the cost model interpolates between measured
//     sizes instead of assuming a micro-batch of 1 costs 1/32 of a batch of 32;
//   - a cached profile is always used; a missing one is measured (mode
//     `profile`: 1 warm-up + the median of kProfileRuns runs, on the device's
//     thread count) for sizes up to kAlwaysProfiledBatch, and for larger sizes
//     while their expected time stays within kLargeProfileBudgetS per set
//     (a profile costs about 8 whole steps; above that the cost model
//     extrapolates);
//   - a size that cannot be profiled (one sample through a BatchNorm on a 1x1
//     map; a CUDA device on a CPU-only LibTorch) is skipped and named; a set
//     with no library at all gets the multiply-add estimate.
// Modes: `profile` (measure what is not cached: jobs, `--costs profile`),
// `cached_only` (never measure: `--costs auto`), `estimated` (multiply-adds only).
// Progress: `progress` is called per micro-batch size and per layer of every
// profile measured (ProfileProgress, profiler.h).
// Thread safety: one call at a time per process (profiling sets LibTorch's threads).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "model/layer_graph.h"
#include "model/layer_library.h"
#include "model/profile_cache.h"
#include "profiler/profiler.h"

namespace tapp {

enum class CostSource { profile, cached_only, estimated };

constexpr int64_t kAlwaysProfiledBatch = 8;    // micro-batch sizes up to this are always measured
constexpr double kLargeProfileBudgetS = 30;    // seconds per set for the larger sizes
constexpr int kProfileWarmupRuns = 1;
constexpr int kProfileRuns = 3;                // median of these

struct CostProfileOptions {
  int64_t batch_size = 32;
  uint64_t seed = 1;
  CostSource source = CostSource::profile;
  ProfileCache* cache = nullptr;  // null: the per-user file cache (default_cache_dir)
  std::function<void(const ProfileProgress&)> progress;
};

struct SkippedProfile {
  std::string device_kind;
  int threads = 1;
  int64_t batch_size = 0;
  std::string error;
};

struct CostProfiles {
  std::vector<LayerLibrary> libraries;  // every set's, sets in device order, sizes ascending
  std::vector<SkippedProfile> skipped;
  int measured = 0, cached = 0, estimated = 0;  // libraries by where they came from
  // "profiled" (something was measured), "cache" (all cached) or "estimated" (nothing measured or cached).
  std::string origin() const;
  // The distinct micro-batch sizes of the libraries, ascending.
  std::vector<int64_t> batch_sizes() const;
};

CostProfiles cost_profiles(const LayerGraph& graph, const Cluster& cluster, const CostProfileOptions& options);

}  // namespace tapp
