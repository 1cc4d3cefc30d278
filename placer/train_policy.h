// placer/train_policy.h — one policy trained across many (model, cluster) problems (issue 17).
//
// Owns `train_policy`: a single PolicyNetworks (placer/policy.h; its shapes do
// not depend on the model or the cluster) trained by REINFORCE over a set of
// problems in turn, simulated. Each problem keeps its own Policy view of the
// shared networks, its measurer (memo, best) and its learner, whose reward
// scale is the problem's best classical plan (single device or DP planner), so
// rewards mean the same on every problem: -1 is as fast as that plan.
// Iterations visit the problems in a shuffled round robin. Checkpoints are
// written every `checkpoint_every` iterations through save_policy_networks
// (temporary file, then rename), and once more at the end.
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
};

struct TrainedProblem {
  std::string name;
  double reference_ms = 0;  // best classical plan (single, dp)
  double best_ms = 0;       // best the policy sampled during training (0 = none valid)
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
