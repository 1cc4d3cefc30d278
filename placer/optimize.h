// placer/optimize.h — one optimization job, end to end: the API the CLI and the service call.
//
// Data flow, as phases (placer/optimize.cpp, each returning a typed result):
// load the model -> costs (layer libraries by the one profiling rule,
// profiler/cost_profiles.h, and the cost model) -> the evaluator
// (placer/evaluator_factory.h) -> baselines through it -> TAPP search through
// it -> verify the best (its simulated timeline; hybrid: measure it) ->
// verify by measurement (placer/verify.h: the best and the best baseline run on
// the workers, predicted vs measured; on by default, off with `verify`) -> the
// measurements join the cluster's calibration (placer/calibration_update.h) ->
// the result JSON, written in one place (schemas/job.schema.json "result").
// Progress is reported through a callback (phase, iteration, best so far, and
// while profiling a message per micro-batch size and layer); `cancel` is
// polled between iterations and stops the job within a second.
// Errors (bad model, bad cluster, nothing fits in memory) come back as a
// Status naming the field; nothing here throws.
// Thread safety: `optimize` may run on several threads at once for different
// requests; the callback is called on the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "core/cluster.h"
#include "core/evaluator.h"
#include "model/zoo.h"
#include "profiler/cost_profiles.h"
#include "runtime/runtime.h"

namespace tapp {

class ProfileCache;
class PolicyNetworks;

// Where the search's policy starts (request `options.policy`): the server's
// newest stored trained policy (POST /policies) when there is one, or fresh weights.
enum class PolicyStart { latest, fresh };

struct OptimizeRequest {
  std::string model;            // zoo name, or a path to a JSON layer graph / TorchScript file
  nlohmann::json model_graph;   // or an inline JSON layer graph (takes precedence when not null)
  int64_t input_size = 0;       // 0 = model default
  int64_t num_classes = 0;      // 0 = model default
  ScriptImport torchscript = ScriptImport::automatic;  // how a TorchScript model is imported
  int64_t batch_size = 32;
  Optimizer optimizer = Optimizer::sgd;  // what the plans train with: their memory and the verification runs
  Cluster cluster;
  EvaluatorKind evaluator = EvaluatorKind::simulate;
  int iterations = 0;           // 0 = default for the evaluator
  double time_budget_s = 0;     // 0 = no time limit
  uint64_t seed = 1;
  bool warm_start = false;      // seed the policy with the best classical plan
  PolicyStart policy_start = PolicyStart::latest;  // the service resolves it into initial_policy
  // Start the policy from these trained networks (tapp-cli train-policy;
  // `optimize --policy FILE`) and fine-tune a copy on the job; null = fresh.
  std::shared_ptr<const PolicyNetworks> initial_policy;
  std::string initial_policy_name;  // what the result says it started from (the file)
  bool baselines = true;        // evaluate the classical baselines too
  // Also price Associated Learning (schedule al) over the proposed plans' cut
  // points and show the fastest as its own row (result "al"); AL changes the
  // learning algorithm, so it is never the returned best.
  bool allow_al = false;
  // Where the simulated costs come from (profiler/cost_profiles.h): measured
  // profiles (default; what is not cached is profiled), cached profiles only
  // (else the estimate), or multiply-adds only (a model too large to profile here).
  CostSource costs = CostSource::profile;
  // Measure the best plan and the best baseline on the workers after the
  // search (placer/verify.h), whatever the evaluator, and add the measured
  // steps to the cluster's calibration. Skipped, with the reason, when the
  // devices cannot run here.
  bool verify = true;
  // How verification runs the workers: worker binary, seed, timeout bound and
  // (tests) fault injection; its steps and batch size are set by the job.
  RunOptions verify_run;
  // Where measured profiles and the cluster's fitted calibration
  // (`tapp-cli calibrate`, simulator/calibration_store.h) are kept: the server
  // passes its SQLite cache; null = the per-user file cache (model/profile_cache.h).
  // The result says which calibration its predictions used.
  ProfileCache* profile_cache = nullptr;
};

struct ProgressEvent {
  std::string phase;  // "profiling" | "baselines" | "optimizing" | "verifying" (when it measures) | "done"
  int iteration = 0;
  int total_iterations = 0;
  double best_step_ms = 0;  // 0 until something valid was evaluated
  double reward = 0;
  double elapsed_s = 0;
  // Profiling: where it is ("cpu x1, micro-batch size 4 (3/6): layer 12/22 conv3")
  // and how far through the job's profiles (0..1); baselines: the planner that
  // starts ("anneal, 1f1b (18 of 20)") and the share of rows started before
  // it; empty / negative otherwise.
  std::string message;
  double phase_fraction = -1;
};

using ProgressFn = std::function<void(const ProgressEvent&)>;

// The result as JSON (schemas/job.schema.json "result"): best placement with its
// source, predicted/measured step time, baselines table with speedups, timeline,
// and the model's layer names in order (layer_order).
Result<nlohmann::json> optimize(const OptimizeRequest& request, const ProgressFn& progress,
                                const std::atomic<bool>& cancel);

// Parses the request JSON of POST /placements (model, cluster, options); errors name the field.
Result<OptimizeRequest> optimize_request_from_json(const nlohmann::json& j);
// Policy iterations when options.iterations is 0 and no time budget is set
// (tapp-cli optimize's help says them too). Simulating (and hybrid): 1200 and
// its 16 restarts found better plans than 600 in every set measured, at about
// twice the job's time (docs/placer.md, "A longer search buys restarts").
constexpr int kSimulatedIterations = 1200;
constexpr int kMeasuredIterations = 10;  // when every candidate runs on the workers
// Its options' upper bounds (tapp-cli optimize checks its flags by them too).
constexpr int kMaxIterations = 1000000;
constexpr double kMaxTimeBudgetS = 7 * 24 * 3600.0;  // 604800
constexpr int64_t kMaxBatchSize = 65536;
constexpr int64_t kMaxInputSize = 4096;

}  // namespace tapp
