// placer/train_policy.h — one policy trained across many (model, cluster) problems (issue 17).
//
// Owns `train_policy`: a single PolicyNetworks (placer/policy.h; its shapes do
// not depend on the model or the cluster) trained over a set of problems in
// turn, simulated. Each problem keeps its own Policy view of the shared
// networks, its measurer (memo, best), its learner and its expert. The
// classical planners (single, bsp, time, dp, pipedream, pipelearn) run once per
// problem: their fastest plan is the reward scale (-1 is as fast as it, the
// same meaning on every problem) and, as the Decision the policy would draw,
// the first expert; any faster plan the policy samples replaces it
// (self-imitation). Each iteration takes a REINFORCE step on the problem's
// samples, then `imitation_steps` supervised steps towards its expert: 24
// REINFORCE iterations a problem (6,000 over 255) do not teach which plans are
// good, the experts do, and REINFORCE keeps exploring beyond them.
// Iterations visit the problems in a shuffled round robin. Checkpoints are
// written every `checkpoint_every` iterations through save_policy_networks
// (temporary file, then rename), and once more at the end. The networks learn
// against the compute prior (PriorAxis::compute), as `optimize --policy`
// starts them: stages of equal FLOPs by default, whatever the model's depth.
// Data flow: problems -> (Policy per problem, shared networks) -> Measurer ->
//            SimulatorEvaluator -> Reinforce -> shared networks -> policy file.
// Thread safety: one call per thread; `progress` is called on it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/cluster.h"
#include "model/layer_graph.h"
#include "placer/policy.h"
#include "simulator/cost_model.h"

namespace tapp {

// One training problem: a model on a cluster with its simulated costs.
struct TrainProblem {
  std::string name;  // "resnet50 @ cluster_4hetero"
  LayerGraph graph;
  Cluster cluster;
  CostModel cost;
};

struct TrainPolicyOptions {
  int iterations = 0;          // policy updates over all problems (0 = only the time budget)
  double time_budget_s = 0;    // 0 = none; at least one of the two is set
  int samples_per_iteration = 16;
  // Supervised steps towards the problem's expert after each REINFORCE step
  // (0 = REINFORCE alone): the fastest plan known for it, classical or sampled.
  int imitation_steps = 1;
  int cloning_epochs = 200;  // supervised epochs over the classical experts before the iterations
  int64_t batch_size = 32;
  uint64_t seed = 1;
  int hidden = 64;
  double learning_rate = 0.005;
  std::string out;             // the policy file ("" = none written)
  int checkpoint_every = 200;  // iterations between checkpoints of `out`
  nlohmann::json trained_on;   // what the file says it was trained on
};

struct TrainProgress {
  int iteration = 0, total_iterations = 0;  // total 0 when only a time budget bounds it
  double elapsed_s = 0, time_budget_s = 0;
  std::string problem;
  double gap = 0;  // this problem's best so far against its reference (0.05 = 5% slower)
  int cloning_epoch = 0, cloning_epochs = 0;  // during behaviour cloning (iteration 0): the epoch done
  int planned = 0, problems = 0;  // while the classical planners run (iteration 0): problems done
};

struct TrainedProblem {
  std::string name;
  double reference_ms = 0;  // best classical plan (the expert planners')
  double best_ms = 0;       // best plan known: classical or sampled (0 = none valid)
  // The trained networks' own plan at the end: the fastest of
  // zero_shot_candidates, as optimize's zero-shot picks it (0 = none valid).
  double zero_shot_ms = 0;
  int64_t evaluations = 0;
};

struct TrainPolicyResult {
  std::shared_ptr<PolicyNetworks> networks;
  int iterations = 0;
  double elapsed_s = 0;
  bool cancelled = false;
  std::vector<TrainedProblem> problems;
};

Result<TrainPolicyResult> train_policy(std::vector<TrainProblem>& problems, const TrainPolicyOptions& options,
                                       const std::function<void(const TrainProgress&)>& progress,
                                       const std::atomic<bool>* cancel = nullptr);

}  // namespace tapp
