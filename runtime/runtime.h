// runtime/runtime.h — execute a placement (or a baseline) on real workers and measure it.
//
// Owns the coordinator API. Data flow:
//   (LayerGraph, Cluster, Placement, RunOptions) -> check_memory + build_task_graph
//   -> c10d::TCPStore hosted here (free port) holding the job JSON
//   -> one tapp-worker process per device used, a WorkerGroup
//      (runtime/worker_group.h; local: fork/exec'd here with PR_SET_PDEATHSIG;
//      remote: `tapp-worker --listen HOST:PORT` told its rank and the store
//      address over a one-line control message)
//   -> workers train (tensors over c10d::ProcessGroupGloo, never through here;
//      every replica of a replicated group is a worker of its own, and the
//      replicas exchange gradients or parameters among themselves:
//      runtime/replica_group.h)
//   -> per-worker reports in the store -> StepReport (median of the timed steps).
// Every message between the two ends is runtime/control_channel.h.
// Failures (bad input, memory, a worker that dies or hangs, an unreachable
// remote worker) come back as StepReport::failure, never as exceptions; every
// local worker is killed and reaped before a call returns (the WorkerGroup's
// destructor), also when on_started throws.
// A device faster than this host (speed > 1) cannot be emulated: a placement
// (or strategy) that uses one is refused up front (invalid_options, naming
// the device: core/cluster.h measurable_here).
// Emulation: a device of speed < 1 sleeps after each compute task until the
// task has lasted its cost / speed (cost: the thread's CPU time on a
// one-thread device, the wall time otherwise: emulated_sleep_ms in worker.h);
// emulated devices take turns on the host's cores (runtime/compute_gate.h), so
// they do not slow each other as devices of a real cluster would not;
// links pace each send by latency + bytes*8/bandwidth on a sender thread. Both are reported as emulated in the StepReport warnings.
// Thread safety: calls are independent; run one at a time per process when
// local workers are used (children are reaped with waitpid on their pids).
// No LibTorch in this header.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/placement.h"
#include "core/step_report.h"

namespace tapp {

struct LayerGraph;
struct Cluster;

// Untimed steps before the timed ones. Two, because the first optimizer step
// allocates its state (momentum, Adam's moments) in memory the first step's
// freed temporaries had, so the second step is the first to map fresh pages
// for them: measured, vgg16 (64x64, batch 16) on examples/cluster_4equal.json
// stepped 6.3, 9.9, 5.0, 4.7, 4.9 s from the first step on.
constexpr int kWarmupSteps = 2;

struct RunOptions {
  int warmup_steps = kWarmupSteps;
  int steps = 3;              // timed steps; the report's step_ms is their median
  int64_t batch_size = 32;
  uint64_t seed = 1;          // weights from (seed, layer); data of step k from seed + k
  double learning_rate = 0.01;
  double momentum = 0.9;      // SGD with momentum, stepped once per batch
  // The baselines (run_strategy) train with this optimizer; run_placement
  // trains with the placement's own (Placement::optimizer: what its memory
  // was checked for). SGD uses learning_rate and momentum, Adam learning_rate
  // and LibTorch's defaults (betas 0.9, 0.999; eps 1e-8).
  Optimizer optimizer = Optimizer::sgd;
  double timeout_s = 60;      // no worker progress for this long -> "timeout" failure
  std::string worker_binary;  // empty: tapp-worker next to the running binary (/proc/self/exe)
  bool collect_parameters = false;  // RunResult::layer_parameters after the last step
  // Fault injection (tests): worker `fault_rank` exits (fault_mode "exit") or
  // hangs ("hang") at the start of step `fault_step`, or exits where it would
  // start that step's all-reduce of a replicated group ("exit_at_allreduce").
  int fault_rank = -1;
  int fault_step = -1;
  std::string fault_mode = "exit";
  int physical_cores = 0;  // 0: detect (sysconf); for the emulation warning and the compute gate
  // Emulated devices take turns on the host's cores (runtime/compute_gate.h);
  // false lets them compete, as before (for measuring what the gate changes).
  bool gate_emulated_compute = true;
  // Called once every worker was started, with the local workers' pids (tests: kill -9 one).
  std::function<void(const std::vector<int>& local_pids)> on_started;
};

struct RunResult {
  StepReport report;
  // Per layer, its parameters flattened and concatenated in LayerGraph order
  // (empty for layers without parameters). Filled when collect_parameters.
  std::vector<std::vector<float>> layer_parameters;
  // A replicated group's layers: layer_parameters holds its first replica's
  // (group_device); replica_parameters[layer][k - 1] holds replica k's (its
  // k-th device in devices_of_group order), empty for unreplicated layers.
  std::vector<std::vector<std::vector<float>>> replica_parameters;
  std::vector<int> local_worker_pids;  // every local worker started (all reaped on return)
};

// Pipelined training of `placement` (task graph schedule gpipe or 1f1b); a
// data-parallel placement runs as "bsp" (or "hogwild" when that is its source)
// on its replicas only.
RunResult run_placement(const LayerGraph& graph, const Cluster& cluster, const Placement& placement,
                        const RunOptions& options);
StepReport measure_placement(const LayerGraph& graph, const Cluster& cluster, const Placement& placement,
                             const RunOptions& options);

// Baselines on the same runtime:
//   "single"  every layer on the cluster's first device, one worker;
//   "bsp"     data parallel: each device a full replica on its share of the
//             batch, gradients summed with Gloo allreduce before every step;
//   "hogwild" asynchronous data parallel on local devices: one process per
//             device, parameters in one shared-memory segment updated
//             lock-free by plain SGD, no gradient exchange.
RunResult run_strategy(const LayerGraph& graph, const Cluster& cluster, const std::string& strategy,
                       const RunOptions& options);

// The directory of the running binary (from /proc/self/exe), "" if unknown.
std::string self_exe_dir();

}  // namespace tapp
