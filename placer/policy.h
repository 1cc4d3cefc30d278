// placer/policy.h — the TAPP prediction network: partition + attention allocation (paper 4.1, 4.2).
//
// Owns `Policy`, three LibTorch networks trained jointly:
//   partition:  per layer, a feedforward net over [layer features | depth
//               i/(L-1) | its sin/cos at 6 doubling frequencies] -> softmax
//               over G groups;
//   allocation: group rows (encode_groups of the sampled partition) -> embedding
//               -> self-attention over groups -> per group a softmax over devices;
//   micro-batches: mean of the attended group embeddings -> softmax over
//               {1, 2, 4, ...} up to the batch size, and (offer_data_parallel)
//               one more choice: data parallelism, a full replica of the model
//               on each device the allocation gave a group.
// Masking: devices that cannot hold even the smallest layer get probability 0;
// micro-batch counts above the batch size are not offered; in contiguous mode
// (default) a layer may only take a group >= its predecessor's, so every
// partition is a sequence of pipeline stages, and a fixed positional prior
// spreads the first proposals over the groups; each non-empty group may not
// reuse an earlier group's device while a free one remains (distinct_devices).
// Sampling uses the caller's std::mt19937_64 and the weights are initialised
// from the seed with our own RNG, so a search is deterministic for a seed
// without touching LibTorch's global generator.
// LibTorch stays in policy.cpp (pimpl); this header is torch-free.
// Thread safety: one Policy per search, used by one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "placer/features.h"

namespace tapp {

struct PolicyConfig {
  int num_groups = 4;
  int num_devices = 1;
  std::vector<int> micro_batch_choices = {1};  // ascending, each <= batch size
  std::vector<bool> device_allowed;            // per device; empty = all allowed
  // The micro-batch head also offers "data parallel" (index = number of
  // micro-batch choices): the distinct devices of the non-empty groups each
  // train a full replica (BSP), so the policy can weigh replication against
  // pipelining instead of leaving that to the BSP baseline.
  bool offer_data_parallel = false;
  // Contiguous partitions (pipeline stages): layer i may only take a group >=
  // the group of layer i-1 (smaller ones are masked), and a positional prior
  // centres layer i on group (i + 0.5) G / L. Off: the paper's free choice.
  bool contiguous = true;
  // Each non-empty group (in order) may not take a device an earlier group
  // took, while an allowed device is still free (pipeline stages on distinct
  // devices, as the DP planner's). Off: devices may repeat.
  bool distinct_devices = true;
  // The positional prior centres the layers on `prior_groups` stages (0 =
  // num_groups; fewer leaves the last groups mostly empty) with sharpness
  // max(1/2, ln(L / prior_groups)); prior_cuts: where those stages end, as
  // ascending fractions of the depth in (0, 1) (prior_groups - 1 of them;
  // otherwise equal stages). The search's restarts vary both.
  int prior_groups = 0;
  std::vector<double> prior_cuts;
  int hidden = 64;
  double learning_rate = 0.005;
  uint64_t seed = 1;
};

// One joint action. layer_group uses the raw group ids 0..G-1 (groups may be
// empty); group_device has G entries (those of empty groups are not scored).
// micro_batch_index indexes micro_batch_choices; one past the end = data parallel.
struct Decision {
  std::vector<int> layer_group;
  std::vector<int> group_device;
  int micro_batch_index = 0;
};

struct UpdateStats {
  double loss = 0;
  double entropy = 0;     // mean per-decision entropy of the batch
  double grad_norm = 0;   // before clipping
};

class Policy {
 public:
  Policy(const FeatureMatrix& layer_features, std::vector<std::vector<int>> consumers, PolicyConfig config);
  ~Policy();
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  const PolicyConfig& config() const;

  // Samples partition, then allocation given the partition, then micro-batches.
  Decision sample(std::mt19937_64& rng);
  // The most probable action (argmax at every step).
  Decision greedy();

  // log pi(decision) under the current weights (empty groups' allocation excluded).
  double log_prob(const Decision& d);
  std::vector<std::vector<float>> partition_probs();                                  // L x G
  std::vector<std::vector<float>> allocation_probs(const std::vector<int>& layer_group);  // G x D
  std::vector<float> micro_batch_probs(const std::vector<int>& layer_group);  // choices (+ data parallel)

  // One joint REINFORCE step: minimise -sum_i adv_i * log pi(d_i) / n
  // - entropy_coef * mean entropy, clip the gradient norm, one Adam step.
  UpdateStats update(const std::vector<Decision>& decisions, const std::vector<double>& advantages,
                     double entropy_coef, double max_grad_norm);

  // Supervised steps towards `target` (warm start from a classical plan).
  void imitate(const Decision& target, int steps);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tapp
