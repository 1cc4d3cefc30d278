// placer/policy.h — the TAPP prediction network: partition + attention allocation (paper 4.1, 4.2).
//
// Owns `Policy`, three LibTorch networks trained jointly:
//   partition:  per layer, a feedforward net over [layer features | depth
//               i/(L-1) | its sin/cos at 6 doubling frequencies] gives a key;
//               per group, a linear map of its position g/(G-1) (and sin/cos)
//               gives a query; logit = key . query -> softmax over G groups;
//   allocation: group rows (encode_groups of the sampled partition) -> embedding
//               -> self-attention over groups; then per group and device a
//               scorer over [attended group | the device's row (encode_devices)
//               | the pair: the group's FLOPs share against the device's compute
//               share, its parameters against the device's memory, the time to
//               receive its inputs from the devices its producer groups took,
//               a producer on this device, and for the replica head the time
//               to all-reduce its gradients with its primary over their link]
//               -> per group a softmax over devices;
//   micro-batches: [mean of the attended groups | mean device row | batch,
//               devices] -> softmax over {1, 2, 4, ...} up to the batch size,
//               and (offer_data_parallel) one more choice: data parallelism, a
//               full replica of the model on each device the allocation gave a group
//               and on each device a group took as its replica;
//   replicas:   (max_replicas > 0) per group and free device, a Bernoulli
//               "run a replica of this group there too": the scorer's second
//               output (PipeDream's replicated stages), and (balance_replicas)
//               a linear term over the group's load per copy at that offer;
//   stages:     (choose_stage_count) before the partition, how many groups it
//               may use: per count k, an MLP over the same [position of group
//               k-1 | problem context] the group queries see -> softmax over 1..G.
//   spread:     (forks) per group, a linear map of its attended embedding ->
//               a Bernoulli "run this group's forks' branches side by side
//               on other devices" (the search's spread_branches, placer/refine.h).
// No weight's shape depends on the model or the cluster (issue 17): one
// `PolicyNetworks` places any number of layers on any number of devices, may
// be shared by the Policy objects of many problems while it trains across
// them (tapp-cli train-policy), and is saved to and loaded from a file that
// carries kPolicyFeatureVersion (placer/features.h).
// One joint action is sampled in this order: (choose_stage_count) the stage
// count k; partition; micro-batch count;
// per non-empty group (in id order) its device; then per device still free
// (with replicas_on_held_devices: every device; in index order), offered to
// the groups that run no copy on it, in the order replica_offers says
// (fewest copies so far, or slowest per copy first), whether the group takes
// a replica there (the first that does holds it); then (forks) per group
// offered a spread, whether it spreads. Its log
// probability is the sum of every choice's, each under the masks it was drawn with.
// Masking keeps proposals executable:
//  - devices that cannot hold even the smallest layer get probability 0;
//    micro-batch counts above the batch size are not offered, and (with
//    `memory`) nor are counts at which some group of the partition fits no
//    device even recomputing (the same floor at ceil(batch / count) samples),
//    unless every count is such;
//  - partition (PartitionMode): contiguous: a layer may only take a group >=
//    its predecessor's, so every partition is a sequence of pipeline stages;
//    follows_dag: a group >= the groups of its inputs in the DAG, so parallel
//    branches may go to different groups while the groups' graph stays
//    acyclic (every edge goes to an equal or higher group id); free: any
//    group (the paper's). A fixed positional prior spreads the first
//    proposals over the groups in the first two modes; in those two, with
//    `memory`, a layer may not join a group that with it would need more
//    than the largest allowed device holds under any micro-batch count,
//    replicas or recomputation (a lower bound of core's rule: the group's
//    training state, one smallest micro-batch's kept activations, and
//    backward's working memory: its largest weight's gradient and two of its
//    largest outputs for that micro-batch), unless every group it may take would;
//  - stage count (choose_stage_count, ordered modes): the layers take groups
//    0..k-1 only and the last layer takes group k-1 (so k is the decision's
//    last group + 1); with `memory`, counts below the fewest groups the
//    layers fit in (greedy in layer order under the floors above) are not
//    offered, and a layer may take a group only where the layers after it
//    still fit in the groups left, going on in layer order from the highest
//    group's content (a completion both ordered modes allow; exact for
//    contiguous stages);
//  - allocation: each non-empty group may not reuse an earlier group's device
//    while a free one remains (distinct_devices); with `memory`, a device
//    whose load plus the group would pass its memory_mb (core's rule, for the
//    micro-batch count drawn) even recomputing is masked unless no device
//    fits; a group its device holds only recomputing is counted so (the
//    measurer recomputes it, as the planners' plans do);
//  - data parallelism: offered for a partition of k non-empty groups only
//    where k devices hold a replica at ceil(batch / k), and then only on those;
//  - replicas: only on a device no group holds yet (replicas_on_held_devices:
//    on any device that runs no copy of the group), while the group has fewer
//    replicas than micro-batches, and (free mode)
//    never for a group on a cycle of groups; with `memory`, only where some
//    number of copies the devices left can reach fits the group (each copy
//    runs its share of the micro-batches), and forced where it is the only
//    way left for the group to fit; a group's device may be one it fits only
//    once replicated. With data parallelism a group's replicas are more
//    whole-model replicas beside the groups' devices, each only on a device
//    that holds one at the share of the devices taken so far.
// Sampling uses the caller's std::mt19937_64 and the weights are initialised
// from the seed with our own RNG, so a search is deterministic for a seed
// without touching LibTorch's global generator.
// LibTorch stays in policy.cpp (pimpl); this header is torch-free.
// Thread safety: one Policy per search, used by one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/placement.h"
#include "model/branches.h"
#include "placer/features.h"

namespace tapp {

struct LayerGraph;
struct Cluster;

// How the partition network may group layers (see the masks above).
enum class PartitionMode { contiguous, follows_dag, free };

// In which order a free device is offered to the groups for a replica (the
// sampling order above): fewest_copies: the group with the fewest copies so far first;
// heaviest_first: the group with the most FLOPs per unit of its devices'
// compute so far first (its step time per copy), then fewest copies. Ties
// go by group id.
enum class ReplicaOffers { fewest_copies, heaviest_first };

// The inputs of core's memory rule (core/placement.h, estimate_device_memory_bytes),
// so the allocation can mask in O(groups) a choice: per layer its parameter
// and per-sample activation bytes, per device its capacity. Empty = no memory masks.
struct PolicyMemory {
  std::vector<int64_t> layer_param_bytes;
  std::vector<int64_t> layer_activation_bytes;  // per sample: outputs (sent, received, their gradients)
  std::vector<int64_t> layer_kept_bytes;        // per sample: what backward keeps (core's kept_bytes_per_sample)
  int64_t kept_bytes(int i) const {
    return layer_kept_bytes.empty() ? layer_activation_bytes[i] : layer_kept_bytes[i];
  }
  // Per layer the share of layer_param_bytes that is a tied table's charged
  // copy (a tied lm_head's; empty = none): core charges it only on a device
  // without the table, so the partition's lower bound leaves it out.
  std::vector<int64_t> layer_tied_copy_bytes;
  std::vector<int64_t> device_bytes;
  int64_t batch_size = 0;
  Schedule schedule = Schedule::gpipe;
  Optimizer optimizer = Optimizer::sgd;
  bool empty() const { return device_bytes.empty(); }
};
PolicyMemory policy_memory(const LayerGraph& graph, const Cluster& cluster, int64_t batch_size, Schedule schedule,
                           Optimizer optimizer = Optimizer::sgd);

enum class PriorAxis { depth, compute };

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
  // contiguous (pipeline stages): layer i may only take a group >= the group
  // of layer i-1 (smaller ones are masked); follows_dag: >= the groups of its
  // inputs; in both a positional prior centres layer i on group (i + 0.5) G / L.
  // free: the paper's free choice.
  PartitionMode partition = PartitionMode::contiguous;
  // At most this many further replicas per group (0 = no replica head).
  int max_replicas = 0;
  // The replica head's initial bias: -2 (p ~ 0.12 an offered replica) leaves
  // the first proposals mostly plain pipelines; the search's restarts that
  // explore replication start at 0 (p = 0.5).
  double replica_bias = -2.0;
  // Replicas also on devices that hold other groups (never on one that holds
  // the group already); off: only on devices no group holds yet.
  bool replicas_on_held_devices = false;
  // Trained networks learned their replica head with fewest_copies; a fresh
  // search offers heaviest_first (search.cpp's use_trained_inputs).
  ReplicaOffers replica_offers = ReplicaOffers::fewest_copies;
  PolicyMemory memory;  // empty = no memory masks
  // With offer_data_parallel: [k - 1][device] whether a data-parallel replica
  // at ceil(batch / k) samples fits that device (core's rule). Masks the
  // data-parallel choice of a partition with k non-empty groups unless k
  // allowed devices hold one, and its devices to those that do. Empty = no such masks.
  std::vector<std::vector<bool>> replica_fits;
  // What the networks see of the problem beyond the layer rows: per layer
  // FLOPs, parameters and outputs (empty = zeros), the devices (empty = D
  // identical ones) and the batch size (0 = memory.batch_size, else 32).
  LayerTotals totals;
  DeviceTraits devices;
  int64_t batch_size = 0;
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
  // What the prior's positions measure: the depth (a fresh search's
  // restarts are tuned to it), or the share of the model's compute before a
  // layer, by totals.time_ms where given, else by FLOPs (trained policies: a
  // stage boundary of balanced compute sits at the same position in any
  // model; needs `totals`, else the depth).
  PriorAxis prior_axis = PriorAxis::depth;
  // The stage-count head chooses k, the number of groups the partition may
  // use, before the partition (ordered modes, G > 1); the prior then centres
  // the layers on k equal stages along prior_axis. Off: the partition has all
  // G groups and the prior prior_groups, as a fresh search's restarts need.
  // Trained networks choose it (search_policy_config): the stage count was
  // the trained partition's commonest miss (8 stages on 8 devices where the
  // classical best has 2-3 replicated ones; docs/transfer.md).
  bool choose_stage_count = false;
  // Each replica offer's logit also weighs the group's load per copy at that
  // offer (its FLOPs over its devices' compute so far, against an even spread,
  // against the slowest other group, and with the device offered): so a
  // group can stop at some copies and its neighbour go on. Without it a
  // group's logit is the same at every offer of like devices, so the groups
  // take all or none of them (inception_v3 on 8 equal devices: stages of 7
  // copies and 1 where PipeDream's best has 2, 4 and 2). Trained networks
  // (search_policy_config), like choose_stage_count.
  bool balance_replicas = false;
  // The model's forks (model/branches.h). Non-empty (and more than one
  // device): the spread head.
  // After the replicas, each group that holds every layer of some fork (of
  // a decision that is not data parallel) draws whether it spreads its forks'
  // branches over other devices (a Bernoulli on the group's embedding; the
  // search applies it, a copied group's copies each on their own devices:
  // spread_branches, placer/refine.h). Where the batch is smaller than the
  // devices, neither stages nor copies keep them busy and a fork's branches
  // can run side by side; elsewhere the head learns to leave them.
  std::vector<ParallelBranches> forks;
  // Exploration: each sampled choice after the partition (the micro-batch
  // count, a group's device, a replica or spread offer) is, at these odds,
  // drawn evenly from the choices its masks leave (a Bernoulli: either way
  // at even odds) instead of from the networks; update and log_prob take
  // the mixture's probability, imitation the networks' own. A policy that
  // has converged onto one plan still proposes the plans a device, a copy
  // or a micro-batch count away. 0 = off; greedy() and typical() never explore.
  double explore = 0;
  // The same for each layer of an ordered partition, drawn from its
  // predecessor's group and the next (where its masks leave them; else any
  // group they leave): a stage boundary one layer on, or a stage cut short.
  double explore_partition = 0;
  int hidden = 64;
  double learning_rate = 0.005;
  uint64_t seed = 1;
};

// One joint action. layer_group uses the raw group ids 0..G-1 (groups may be
// empty); group_device has G entries (those of empty groups are not scored).
// micro_batch_index indexes micro_batch_choices; one past the end = data parallel.
// group_replicas: per group the further devices running a replica, ascending
// (empty, or G entries). group_spread: per group whether it spreads its
// forks' branches (PolicyConfig::forks; empty = none).
struct Decision {
  std::vector<int> layer_group;
  std::vector<int> group_device;
  int micro_batch_index = 0;
  std::vector<std::vector<int>> group_replicas;
  std::vector<uint8_t> group_spread;
  bool spreads(int g) const { return g < static_cast<int>(group_spread.size()) && group_spread[g] != 0; }
  bool operator==(const Decision& o) const {
    for (size_t g = 0; g < std::max(group_spread.size(), o.group_spread.size()); ++g)
      if (spreads(static_cast<int>(g)) != o.spreads(static_cast<int>(g))) return false;
    return micro_batch_index == o.micro_batch_index && layer_group == o.layer_group &&
           group_device == o.group_device && group_replicas == o.group_replicas;
  }
};

struct UpdateStats {
  double loss = 0;
  double entropy = 0;     // mean per-decision entropy of the batch
  double grad_norm = 0;   // before clipping
};

// The networks' weights and their Adam state (pimpl): shape-independent of the
// model and cluster, so any number of Policy objects may share one.
class PolicyNetworks;

// Fresh networks from `seed` (our own RNG; output layers start near uniform;
// the replica logit's bias at `replica_bias`).
std::shared_ptr<PolicyNetworks> new_policy_networks(int hidden, double learning_rate, uint64_t seed,
                                                    double replica_bias = -2.0);

// What a policy file says of itself besides its weights.
struct PolicyFileInfo {
  int feature_version = 0;
  int hidden = 0;
  nlohmann::json trained_on;  // free-form: models, clusters, iterations, seed
};

// Writes the weights (not the Adam state) with kPolicyFeatureVersion and
// `trained_on` to a temporary file beside `path`, then renames it: a reader
// never sees half a file. Errors name the path.
Status save_policy_networks(const PolicyNetworks& networks, const std::string& path, const nlohmann::json& trained_on);
// Reads a file of save_policy_networks; a missing, truncated or corrupt file,
// or one of another feature version, is refused naming the file. The result
// is a template: a search fine-tunes a clone_policy_networks copy at its own rate.
Result<std::shared_ptr<PolicyNetworks>> load_policy_networks(const std::string& path, PolicyFileInfo* info = nullptr);
// The networks' hidden width.
int policy_hidden_width(const PolicyNetworks& networks);
// As load_policy_networks, from the bytes of such a file (`name` in errors).
Result<std::shared_ptr<PolicyNetworks>> load_policy_bytes(const std::string& bytes, const std::string& name,
                                                          PolicyFileInfo* info = nullptr);
// A copy with its own weights and a fresh optimizer (a job fine-tunes its own copy).
std::shared_ptr<PolicyNetworks> clone_policy_networks(const PolicyNetworks& networks, double learning_rate);

class Policy {
 public:
  // `networks` null: fresh ones from config.seed and config.hidden.
  Policy(const FeatureMatrix& layer_features, std::vector<std::vector<int>> consumers, PolicyConfig config,
         std::shared_ptr<PolicyNetworks> networks = nullptr);
  ~Policy();
  Policy(const Policy&) = delete;
  Policy& operator=(const Policy&) = delete;

  const PolicyConfig& config() const;
  const std::shared_ptr<PolicyNetworks>& networks() const;

  // Samples partition, then allocation given the partition, then micro-batches.
  Decision sample(std::mt19937_64& rng);
  // n samples at once (the networks run once a step for all of them): the
  // i-th is sample(stream) for stream = std::mt19937_64(rng()), the streams
  // seeded in turn, so it does not depend on the others.
  std::vector<Decision> sample(int n, std::mt19937_64& rng);
  // The most probable action (argmax at every step): for a neutral network,
  // its positional prior's stages.
  Decision greedy();
  // The typical action: each layer's median group over draws of the
  // partition (a fixed seed; contiguous and follows_dag modes, else the
  // argmax), then the argmax at every later step. Where the network is
  // unsure at which layer to cut, the argmax cuts late or never; this cuts
  // where most draws have. Each group's device is the likeliest class of
  // interchangeable devices, at its lowest free member (the form
  // train-policy imitates: canonical). A trained policy's zero-shot plan.
  Decision typical();

  // `d` with its devices renamed within classes of interchangeable devices
  // (equal traits and links), in the order the policy draws them: the same
  // placement up to symmetry, in one form however a planner numbered its
  // devices (an imitation target the networks can learn). `d` itself where
  // the masks would not replay the renamed one.
  Decision canonical(const Decision& d);

  // log pi(decision) under the current weights (empty groups' allocation
  // excluded), as sample draws it (the explore mixture included).
  double log_prob(const Decision& d);
  // Whether the masks allow every choice of `d` (a plan from elsewhere may not fit them).
  bool allows(const Decision& d);
  // Whether the partition's masks (order and memory) allow this grouping.
  bool partition_allowed(const std::vector<int>& layer_group) const;
  // Per group x device: the replica head's probability of a replica there for
  // this partition, before masks (empty without a replica head; with
  // balance_replicas, at each group's first offer: its primary alone).
  std::vector<std::vector<float>> replica_probs(const std::vector<int>& layer_group);
  std::vector<std::vector<float>> partition_probs();                                  // L x G
  std::vector<std::vector<float>> allocation_probs(const std::vector<int>& layer_group);  // G x D
  std::vector<float> micro_batch_probs(const std::vector<int>& layer_group);  // choices (+ data parallel)
  // Per stage count 1..G the head's probability under its masks (empty without the head).
  std::vector<float> stage_count_probs();

  // One joint REINFORCE step: minimise -sum_i adv_i * log pi(d_i) / n
  // - entropy_coef * mean entropy, clip the gradient norm, one Adam step.
  UpdateStats update(const std::vector<Decision>& decisions, const std::vector<double>& advantages,
                     double entropy_coef, double max_grad_norm);

  // Supervised steps towards `target` (warm start from a classical plan), at
  // `learning_rate` when > 0 (then back to the policy's own rate), else at
  // the policy's own; on the networks' own odds (no explore mixture).
  void imitate(const Decision& target, int steps, double learning_rate = 0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tapp
