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
//   - a device that says where its costs come from (core/cluster.h DeviceCosts)
//     gets its own libraries instead: a layer-library file (refused, naming
//     the device, the file and the field, when it is for another model, input
//     shape or batch), or its remote worker's profile through `worker_costs`
//     (runtime/worker_profile.h), cached by that worker's device fingerprint.
//     Under `cached_only` a worker profile not cached yet falls back to this
//     host's and says so in `notes`; under `estimated` workers are not asked.
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

// A device's own costs (a layer library measured elsewhere, its worker's profile).
struct OwnDeviceCosts {
  std::vector<LayerLibrary> libraries;  // ascending batch size
  std::string detail;       // "layer library 'a.json'", "worker 127.0.0.1:7001 (AMD EPYC, cpu x2 threads, ...)"
  std::string fingerprint;  // a worker's device fingerprint ("" for a library file)
  int measured = 0, cached = 0;
};

// Profiles `device` (costs "worker") on its own worker at `batch_sizes`;
// may_measure false: only what is cached under the worker's fingerprint.
using WorkerCostsFn = std::function<Result<OwnDeviceCosts>(const LayerGraph& graph, const Device& device,
                                                           const std::vector<int64_t>& batch_sizes, uint64_t seed,
                                                           bool may_measure)>;

struct CostProfileOptions {
  int64_t batch_size = 32;
  uint64_t seed = 1;
  CostSource source = CostSource::profile;
  ProfileCache* cache = nullptr;  // null: the per-user file cache (default_cache_dir)
  std::function<void(const ProfileProgress&)> progress;
  WorkerCostsFn worker_costs;  // null: a device whose costs are "worker" is refused
};

struct SkippedProfile {
  std::string device_kind;
  int threads = 1;
  int64_t batch_size = 0;
  std::string error;
};

// Where one device's costs came from, for the result and the command line.
struct DeviceCostsUsed {
  std::string device;
  CostsFrom from = CostsFrom::host;  // what was used (host after a fallback)
  std::string detail;                // see OwnDeviceCosts; "" for host
  std::string fingerprint;           // a worker's device fingerprint
};

struct CostProfiles {
  std::vector<LayerLibrary> libraries;  // every set's, sets in device order, sizes ascending (host-priced devices)
  // [device]: its own libraries (CostModel::build's `own`); empty: priced from `libraries`.
  std::vector<std::vector<LayerLibrary>> device_libraries;
  std::vector<DeviceCostsUsed> devices;  // [device]
  std::vector<std::string> notes;        // "devices[2] (remote): ..." fallbacks worth saying
  std::vector<SkippedProfile> skipped;
  int measured = 0, cached = 0, estimated = 0;  // libraries by where they came from
  // "profiled" (something was measured), "cache" (all cached) or "estimated" (nothing measured or cached).
  std::string origin() const;
  // The distinct micro-batch sizes of the libraries, ascending.
  std::vector<int64_t> batch_sizes() const;
};

// Errors: a device's own costs that cannot be had (its library file, its worker), naming the device.
Result<CostProfiles> cost_profiles(const LayerGraph& graph, const Cluster& cluster, const CostProfileOptions& options);

}  // namespace tapp
