// simulator/cost_model.h — what each task of a task graph costs on its device and link.
//
// Owns `CostModel`: a per-device cost table of per-layer forward/backward
// milliseconds on every device of a cluster — from the device's own
// libraries where it has them (a layer library measured on its hardware, its
// worker's profile: core/cluster.h DeviceCosts), else from the shared
// libraries of its kind (this host's profile); one library per profiled batch
// size; divided by the device's speed (above 1 for a device faster than this
// host), corrected by the device's calibration factor — transfer times from
// link bandwidth and latency, and the calibrated overheads (per compute task,
// per layer run, per message, per step). Segments are contiguous layer ranges,
// so a segment's cost is a difference of per-device prefix sums: O(1).
// Data flow: LayerLibrary (+ Calibration) + Cluster -> CostModel -> simulate().
// Costs follow the profiled batch sizes (a batch of 1 is far from 1/32 of a
// batch of 32 on a CPU); with one profile they scale linearly with the
// micro-batch size, and task_overhead_ms / layer_overhead_ms capture fixed costs.
// Thread safety: immutable after build; share freely.
#pragma once

#include <algorithm>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace tapp {

struct LayerGraph;
struct LayerLibrary;
struct Cluster;

// Fitted corrections (simulator/calibration.h fits them from measured steps).
struct Calibration {
  std::vector<double> device_factor;  // per device index; multiplies compute; empty = all 1
  double task_overhead_ms = 0;     // per compute task (one segment, one micro-batch)
  double layer_overhead_ms = 0;    // per layer per compute task
  double message_overhead_ms = 0;  // per transfer
  double message_ms_per_mb = 0;    // per MB moved (the real copy behind an emulated link)
  // Local devices share one machine: a local device's compute is multiplied by
  // factor + concurrency_slowdown x (other local devices the placement uses).
  double concurrency_slowdown = 0;
  // Backward compute in a pipeline vs its profile: multiplier = factor + backward_extra.
  double backward_extra = 0;
  // A worker's first compute task of a step pays extra (allocator, wake-up).
  double first_task_overhead_ms = 0;
  double wire_factor = 1;          // multiplies latency + bytes / bandwidth
  double step_overhead_ms = 0;     // per training step (barriers, bookkeeping)
  double update_ms_per_param_mb = 0;  // optimizer step per MB of a device's parameters (fitted)
  double factor(int device) const {
    return device < static_cast<int>(device_factor.size()) ? device_factor[device] : 1.0;
  }
};

// Without a fitted calibration: fixed costs a LibTorch CPU step pays per task
// (0.2 ms), layer (0.05 ms) and message (0.2 ms), typical of `tapp-cli
// calibrate` fits on this machine, so that many tiny micro-batches do not look free,
// and the optimizer update measured on one thread here (0.165 ms per MB of
// parameters: an AL block updates after every micro-batch, so it is not free either).
Calibration default_calibration();

nlohmann::json calibration_to_json(const Calibration& c);
Result<Calibration> calibration_from_json(const nlohmann::json& j);

class CostModel {
 public:
  // Libraries per device kind, thread count and batch size; each device uses
  // the libraries of its kind with the nearest thread count (all their batch
  // sizes), scaled by the thread ratio. Errors: no library, a library whose
  // rows do not match the graph.
  static Result<CostModel> build(const LayerGraph& g, const Cluster& c,
                                 const std::vector<LayerLibrary>& libraries,
                                 const Calibration& calibration = {});
  static Result<CostModel> build(const LayerGraph& g, const Cluster& c, const LayerLibrary& library,
                                 const Calibration& calibration = {});
  // As above; device d prices its layers from `own[d]` when that is not empty
  // (its own libraries, all batch sizes, thread ratio and speed applied as to
  // the shared ones), from the shared libraries otherwise.
  static Result<CostModel> build(const LayerGraph& g, const Cluster& c, const std::vector<LayerLibrary>& shared,
                                 const std::vector<std::vector<LayerLibrary>>& own,
                                 const Calibration& calibration = {});

  int num_devices() const { return num_devices_; }
  int num_layers() const { return num_layers_; }
  const Calibration& calibration() const { return calibration_; }

  // Compute of layers [first, last] (inclusive) for `samples` samples on
  // `device`: the profiled time at that micro-batch size (interpolated between
  // profiled batch sizes, extrapolated affinely above the largest, proportional
  // below the smallest), x the device factor, / speed, + overheads.
  // `other_local` = how many other local devices the placement uses (they
  // compete for the same cores; see Calibration::concurrency_slowdown).
  double forward_ms(int device, int first, int last, int64_t samples, int other_local = 0) const {
    return raw_ms(device, first, last, samples, false) * multiplier(device, other_local) +
           overhead_ms(device, first, last);
  }
  double backward_ms(int device, int first, int last, int64_t samples, int other_local = 0) const {
    return raw_ms(device, first, last, samples, true) * (multiplier(device, other_local) + calibration_.backward_extra) +
           overhead_ms(device, first, last);
  }
  // Added to each device's first compute task of a step (stretched by 1/speed).
  double first_task_ms(int device) const { return calibration_.first_task_overhead_ms * inv_speed_[device]; }
  bool is_local(int device) const { return is_local_[device]; }
  // Compute without overheads and device factor (what the factor multiplies), for calibration.
  double raw_compute_ms(int device, int first, int last, int64_t samples, bool backward) const {
    return raw_ms(device, first, last, samples, backward);
  }
  double inverse_speed(int device) const { return inv_speed_[device]; }
  // The profiled batch sizes behind `device`'s costs, ascending.
  const std::vector<int64_t>& profiled_batch_sizes(int device) const { return devices_[device].batch; }
  // Link time from -> to for `bytes`, including the message overhead.
  double transfer_ms(int from, int to, int64_t bytes) const {
    const size_t k = static_cast<size_t>(from) * num_devices_ + to;
    return transfer_fixed_ms_[k] + static_cast<double>(bytes) * transfer_ms_per_byte_[k];
  }
  // Ring allreduce of `bytes` among `devices` (in ring order): 2 (r - 1) steps,
  // each moving ceil(bytes / r) on every ring link at once, so each step takes
  // the slowest ring link's transfer_ms (its latency and message overhead
  // included). 0 for fewer than two devices. BSP's gradient exchange and a
  // replicated stage's allreduce both cost this.
  double ring_allreduce_ms(const std::vector<int>& devices, int64_t bytes) const;
  double wire_ms(int from, int to, int64_t bytes) const {  // uncalibrated latency + bytes / bandwidth
    const size_t k = static_cast<size_t>(from) * num_devices_ + to;
    return latency_ms_[k] + static_cast<double>(bytes) * ms_per_byte_[k];
  }
  double step_overhead_ms() const { return calibration_.step_overhead_ms; }
  // Optimizer update of `param_bytes` of parameters at this host's speed.
  double host_update_ms(int64_t param_bytes) const {
    return calibration_.update_ms_per_param_mb * static_cast<double>(param_bytes) / 1e6;
  }
  // Optimizer update after the last backward on `device`. The runtime emulates a
  // slower device on its tasks only, so a device no faster than this host updates
  // at the host's rate, as measured; a faster one (simulated only) at its speed.
  double update_ms(int device, int64_t param_bytes) const {
    return host_update_ms(param_bytes) * std::min(1.0, inv_speed_[device]);
  }
  // Output bytes per sample of layers [first, last]: the activations kept for backward.
  int64_t activation_bytes_per_sample(int first, int last) const { return act_prefix_[last + 1] - act_prefix_[first]; }
  const std::string& device_name(int device) const { return device_names_[device]; }

  // A copy with other calibration factors (same libraries and cluster).
  CostModel with_calibration(const Calibration& calibration) const;

 private:
  double multiplier(int device, int other_local) const {
    return calibration_.factor(device) + (is_local_[device] ? calibration_.concurrency_slowdown * other_local : 0.0);
  }
  // Fixed costs run on the device too, so they stretch with 1/speed.
  double overhead_ms(int device, int first, int last) const {
    return (calibration_.task_overhead_ms + calibration_.layer_overhead_ms * (last - first + 1)) * inv_speed_[device];
  }
  double raw_ms(int device, int first, int last, int64_t samples, bool backward) const;

  // One device's profiled times: prefix sums over layers at each profiled batch
  // size, thread ratio and 1/speed included, device factor not.
  struct DeviceCosts {
    std::vector<int64_t> batch;                 // ascending
    std::vector<std::vector<double>> fwd, bwd;  // [point][layer + 1]
  };
  int num_devices_ = 0, num_layers_ = 0;
  Calibration calibration_;
  std::vector<DeviceCosts> devices_;
  std::vector<double> latency_ms_, ms_per_byte_;         // [from][to]
  // transfer_ms = fixed + bytes x per_byte, the calibration folded in (price_links).
  std::vector<double> transfer_fixed_ms_, transfer_ms_per_byte_;  // [from][to]
  void price_links();
  std::vector<double> inv_speed_;                        // [device]: 1 / speed
  std::vector<char> is_local_;                           // [device]
  std::vector<int64_t> act_prefix_;                      // [layer + 1]
  std::vector<std::string> device_names_;
};

}  // namespace tapp
