// placer/search.h — the TAPP search loop (paper Algorithm 1).
//
// Owns `search`, which reads as one loop (placer/search.cpp, SearchLoop::run,
// after TVM's SketchPolicyNode::Search): per iteration, *propose* a batch of
// joint actions from the policy (each a Placement: empty groups dropped,
// groups numbered in layer order), *evaluate* them through the Measurer
// (placer/measurer.h: memo, memory check, best so far, trace, counts; a
// failure is data), *update* the policy by REINFORCE, *maybe restart* a
// policy that stopped improving (a fresh seed and positional prior; the
// measurer keeps the best), and *stop early* on the time budget, cancel, or
// when nothing improved for `patience` iterations. A search from trained
// networks first scores their zero-shot plan and climbs from it
// (zero_shot_climb). Then the policy's greedy placement, plans of known shapes
// (turn_variants, the fastest one's cuts searched; two stages on each
// speed_order_splits, the cut searched), the best plan's cuts searched, and the refinement
// of the best by iterated local search (placer/refine.h), through the same measurer, reported apart.
// The first policy may also choose data parallelism (a replica per allocated
// device); restarted ones search pipelines only.
// Data flow: LayerGraph + Cluster -> features -> Policy -> Placement ->
//            Measurer -> Evaluator -> StepReport -> Reinforce -> Policy ...
// Thread safety: a call owns its policy; the evaluator is used by this thread
// only; `progress` is called on this thread.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/evaluator.h"
#include "core/placement.h"
#include "placer/features.h"
#include "placer/measurer.h"
#include "placer/reinforce.h"

namespace tapp {

struct LayerGraph;
struct Cluster;
class CostModel;

struct SearchOptions {
  int iterations = 600;
  // 0 = none. The search stops before an evaluation (zero-shot candidates past
  // the first, the climb from them, a proposal within a batch) once the time
  // left is under two evaluations at the mean so far, kept for the greedy and typical decisions;
  // the refinement after it has its own budget (refine_budget).
  double time_budget_s = 0;
  int samples_per_iteration = 16;
  int patience = 0;              // 0 = max(100, iterations / 2), counted after the last restart
  uint64_t seed = 1;
  int64_t batch_size = 32;
  int num_groups = 0;            // 0 = number of devices
  int max_micro_batches = 32;
  Schedule schedule = Schedule::gpipe;
  Optimizer optimizer = Optimizer::sgd;  // what every placement trains with (the measurer sets it)
  double reference_step_ms = 0;  // reward scale; 0 = the first valid step
  std::optional<Placement> warm_start;  // imitate this plan before searching
  // The first restart's fresh policy imitates this plan (the best classical
  // one; `optimize` passes it) and searches on from it: the search explores
  // on its own first, then also around the best plan known.
  std::optional<Placement> restart_from;
  int restart_after = 60;        // fresh policy after this many iterations without improvement (0 = never)
  // 0 = 8 per 600 iterations, at least 8: a longer search (--iterations,
  // --time-budget) buys restarts too; with 8 alone, twice the iterations spent
  // them all before the last third's restarts around the best came.
  int max_restarts = 0;
  // Restarts draw another positional prior (stages, depths) or imitate a plan
  // of a known shape (devices taking turns, two replicated stages), and the
  // search ends by measuring the devices taking turns in other numbers (turn_variants),
  // the fastest one's cuts searched.
  bool vary_prior_on_restart = true;
  // Every fourth restart (4, 8, ...), and every restart in the search's last
  // third (of its iterations or time budget), imitates the best plan found so
  // far (a pipeline) and searches on from it, exploring beside it, with room
  // to copy it (twice its groups, shared devices, replicas on held devices),
  // instead of a fresh prior.
  bool restart_around_best = true;
  int refine_budget = 0;         // evaluations for local refinement of the policy's best (0 = off)
  // Partitions follow the DAG by default: pipeline stages in layer order on a
  // chain, and parallel branches may take different groups (PolicyConfig::partition).
  PartitionMode partition = PartitionMode::follows_dag;
  bool replicate_stages = true;  // a group may take replicas on free devices (PolicyConfig::max_replicas)
  bool distinct_devices = true;  // stages on distinct devices (PolicyConfig::distinct_devices)
  bool data_parallel = true;     // data parallelism is one of the policy's choices (PolicyConfig::offer_data_parallel)
  // A group may spread its forks' branches over other devices (PolicyConfig::forks).
  bool spread_branches = true;
  // Per device: its time per sample (the cost model's whole-model forward +
  // backward); replicated groups then take micro-batches in proportion to
  // their devices' speeds (Measurer::weigh_replicas_by). Empty = equal shares.
  std::vector<double> device_sample_ms;
  // Per layer its forward + backward time on the cluster (layer_compute_ms):
  // where a trained policy's compute positions are measured. Empty = by FLOPs.
  std::vector<double> layer_ms;
  int hidden = 64;
  double learning_rate = 0.005;
  ReinforceConfig reinforce;
  // Start the first policy from these trained networks (a copy: the search
  // fine-tunes its own) instead of fresh ones (tapp-cli train-policy, issue 17);
  // restarts still draw fresh networks.
  std::shared_ptr<const PolicyNetworks> initial_policy;
  // Where set (with initial_policy), each zero-shot decision is also scored
  // with its replicas and stages repaired and its cuts placed under these
  // costs (zero_shot_candidates, below), and the fastest kept. Null: the
  // decisions as they are.
  const CostModel* zero_shot_costs = nullptr;
  // With zero_shot_costs: at most this many evaluations climbing from the
  // zero-shot plan before the policy fine-tunes, the moves in the order the
  // planners' model ranks them (SearchLoop::climb_from_zero_shot; 0 = none).
  int zero_shot_climb = 0;
};

struct SearchProgress {
  int iteration = 0, total_iterations = 0;
  double best_step_ms = 0;  // 0 until a valid placement was found
  double mean_reward = 0;
  double elapsed_s = 0;
};


// The trained networks' odds behind a zero-shot plan, for a user to see how
// sure they were: the micro-batch head's per choice (micro_batch_choices,
// then data parallelism where offered); per non-empty group of the decision
// (by first layer: for a pipeline, the plan's groups) and device, the
// allocation's (under the masks it drew with) and the replica head's (before
// masks; empty without one); the stage-count head's per count 1..G (empty
// without it).
struct ZeroShotOdds {
  std::vector<int> micro_batch_choices;
  std::vector<float> micro_batches;
  std::vector<float> stages;
  std::vector<std::vector<float>> devices, replicas;
};

// Which of a trained policy's deterministic decisions its zero-shot plan is.
enum class ZeroShotFrom { typical, greedy };
const char* zero_shot_from_name(ZeroShotFrom f);

// What a zero-shot plan did to the decision's replicas and stages: nothing,
// dropped the replicas (planners' without_replicas), added the devices it left
// idle as more (with_idle_devices), merged its stages into one copied onto its
// devices (as_one_stage), ran data parallel on its devices (as_data_parallel),
// made every device a stage (as_pipeline_of_every_device), moved to the
// fastest devices (on_fastest_devices), dropped the
// slowest device's stage (without_slowest_stage), or merged and replicated
// stages where the cut model finds fewer faster (with_fewer_stages_by_model).
enum class ZeroShotReplicas {
  as_decided,
  dropped,
  idle_devices_added,
  one_stage,
  data_parallel,
  every_device_a_stage,
  pipelined,               // a data-parallel decision's groups as a pipeline
  slowest_device_dropped,  // without the slowest device's stage (without_slowest_stage)
  fewer_stages,            // stages merged or joined onto their devices (with_fewer_stages_by_model)
  fastest_devices          // on the cluster's fastest devices, as many (on_fastest_devices)
};
const char* zero_shot_replicas_name(ZeroShotReplicas r);

// How a zero-shot plan came from the policy's decision (SearchResult::zero_shot_how).
struct ZeroShotRepair {
  ZeroShotFrom from = ZeroShotFrom::typical;
  ZeroShotReplicas replicas = ZeroShotReplicas::as_decided;
  bool cuts_moved = false;  // with its cuts placed for its stages (with_pipedream_cuts)
  // With its stages reordered along the chain and its micro-batches chosen
  // for them, then its cuts placed (with_pipedream_orders; cuts_moved too).
  bool reordered = false;
};

struct SearchResult {
  bool found = false;
  Placement best;
  StepReport best_report;
  int iterations = 0;
  int64_t evaluations = 0;  // distinct placements evaluated
  int64_t failures = 0;     // of which failed (memory, evaluator)
  int64_t moved = 0;        // of which fitted only with layers moved (core/memory_fit.h)
  bool cancelled = false;
  int restarts = 0;
  // Distinct placements evaluated when the first restart began imitating
  // SearchOptions::restart_from (0: it never did): what came before is the
  // policy's own search, what came after starts from the classical plan.
  int64_t evaluations_before_imitation = 0;
  std::string stop_reason;  // "iterations" | "time_budget" | "patience" | "cancelled"
  double elapsed_s = 0;
  std::vector<TracePoint> trace;  // one point each time the best improved
  // What the policy found by itself, before any refinement (best = after).
  bool policy_found = false;
  Placement policy_best;
  StepReport policy_best_report;
  int64_t policy_evaluations = 0;
  int64_t policy_failures = 0;  // of those, failed
  int64_t policy_moved = 0;     // of those, fitted only with layers moved
  // Started from a trained policy (SearchOptions::initial_policy): its plan
  // before any fine-tuning (zero-shot), the fastest of its typical and greedy
  // decisions (Policy::typical, Policy::greedy) and their repairs (replicas
  // dropped, cuts placed), the search's first evaluations.
  std::optional<StepReport> zero_shot_report;
  Placement zero_shot;  // its placement (set with zero_shot_report)
  ZeroShotRepair zero_shot_how;  // which decision, and with which repairs (zero_shot_candidates)
  ZeroShotOdds zero_shot_odds;  // the odds behind it (set with zero_shot_report)
  // The best step after the climb from it (SearchOptions::zero_shot_climb; none: no climb).
  std::optional<double> climbed_step_ms;
  double policy_elapsed_s = 0;
};

// The Placement of a decision: empty groups dropped, the rest renumbered by
// their first layer (with their replicas), micro-batches from `choices`;
// index choices.size(): data parallel over the distinct devices of the non-empty
// groups and their replicas.
Placement decision_to_placement(const Decision& d, const std::vector<int>& micro_batch_choices, Schedule schedule);
// The Decision of a placement (for warm start); group ids kept when < num_groups.
Decision placement_to_decision(const Placement& p, const std::vector<int>& micro_batch_choices, int num_groups);

// The plan one of the search's restarts imitates (vary_prior_on_restart):
// the allowed devices, fastest first by `devices.compute`, take `rounds`
// turns each; a turn is a run of layers in order whose share of the compute
// (totals.time_ms where given, else gflops) is the device's share of the
// devices' compute, over `rounds`. Turns that get no layer are left out.
Placement devices_taking_turns(const LayerTotals& totals, const DeviceTraits& devices,
                               const std::vector<bool>& allowed, int rounds, int micro_batches,
                               Schedule schedule);

// The plans the search measures once the policy is done (with
// vary_prior_on_restart), so that its best may be one of them: the m fastest
// allowed devices (m = 2 .. all) taking 1, 2, 3, 4 or 6 turns each. The
// search then moves the fastest one's cuts while its step falls.
std::vector<Placement> turn_variants(const LayerTotals& totals, const DeviceTraits& devices,
                                     const std::vector<bool>& allowed, int micro_batches, Schedule schedule);

// The plans another restart chooses from: the model cut once in layer order,
// each of the two stages replicated over a set of the allowed devices. The
// cuts: nearest a third, half and two thirds of the compute (as
// devices_taking_turns weighs it), and the four boundaries (between 5% and
// 95% of the compute, 5% apart) whose layer hands on the least activation.
// The devices: the m fastest (m = 2 .. all), dealt fastest first to the stage
// furthest below its share of their compute (its share of the model's); and
// split in speed order, the faster ones on either stage, as near its share as
// a split comes (replicas of like speeds: a stage's micro-batches go
// round-robin, so its slowest replica paces it). Each distinct deal once.
std::vector<Placement> two_replicated_stages(const LayerTotals& totals, const DeviceTraits& devices,
                                             const std::vector<bool>& allowed, int micro_batches,
                                             Schedule schedule);

// Where the policy may replicate stages, the search ends by searching, on each
// of these, the cut of two stages whose step is least (two_stage_plan): the
// device sets of two stages that split the m fastest allowed devices in
// speed order (m = 2 .. all): the k fastest (k = 1 .. m - 1) on one stage and
// the rest on the other, either stage first; the first stage's replicas
// slowest first, the second's fastest first, so that round-robin hands the
// micro-batch of the first stage's slowest replica to the second's fastest.
std::vector<std::array<std::vector<int>, 2>> speed_order_splits(const DeviceTraits& devices,
                                                                const std::vector<bool>& allowed);

// Layers [0, cut) on `stage[0]`, the rest on `stage[1]` (each stage's first
// device its group's own, the rest its replicas).
Placement two_stage_plan(int layers, const std::array<std::vector<int>, 2>& stage, int cut, int micro_batches,
                         Schedule schedule);

// Supervised steps (and their Adam rate) that make a plan a policy's mode (a
// warm start's classical plan); tests/placer checks that they do on random problems.
constexpr int kImitationSteps = 80;
constexpr double kImitationRate = 0.05;
constexpr int kImitationRounds = 4;  // of kImitationSteps, until the greedy decision is the plan

// A trained policy's zero-shot candidates, in the order they are built (the
// search scores them in_scoring_order, below): its
// typical, then its greedy decision (Policy::typical, Policy::greedy), each as
// decided, then data parallel on its devices (as_data_parallel: one
// evaluation, no schedule to choose), then the decision with its cuts placed
// for its stages (with_pipedream_cuts) and with its stages reordered and its
// micro-batches chosen for them, cuts placed (with_pipedream_orders, up to
// two), then with its replicas dropped (planners' without_replicas), with the
// devices it leaves idle added as replicas (with_idle_devices), as one stage
// copied onto its devices (as_one_stage), with every device a stage
// (as_pipeline_of_every_device) and on the cluster's fastest devices
// (on_fastest_devices), each of those as it is and with the same cut and
// order variants (one stage copied onto several devices: its micro-batches
// chosen by the model, with_micro_batches_by_model); the variants are placed for the candidate's
// schedule, then for the other synchronous one (with_other_schedule: 1F1B
// keeps fewer micro-batches in flight, so its memory and its window differ;
// the measurer scores both anyway); a repair or variant that changes nothing
// is left out; a data-parallel decision is also scored as the pipeline of its
// groups at the micro-batch head's likeliest count, and with its variants;
// after all of these, each decision without its slowest device's stage
// (planners' without_slowest_stage), and with its variants; then, each at
// the one variant the model prices least, the decision and its every-device
// pipeline with fewer stages (with_fewer_stages_by_model) and the decision
// with smaller idle devices added where the model finds the step faster
// (with_idle_devices, IdleDevices::or_faster_by_model).
// Without costs (`cost` null): the two decisions as they are.
// `replicas_weighed`: the cuts are placed for replicas that take their
// stage's micro-batches by speed, as the search's measurer weighs them
// (SearchOptions::device_sample_ms); else for equal shares.
// The fastest is the zero-shot plan (`optimize --policy`, train-policy's
// summary); equal candidates are the measurer's memo.
struct ZeroShotCandidate {
  Decision decided;
  Placement placement;
  ZeroShotRepair how;
  // Its step by the planners' model (modelled_step_ms; infinite where it
  // prices none: a group in several runs, or no costs given).
  double modelled_ms = std::numeric_limits<double>::infinity();
};
std::vector<ZeroShotCandidate> zero_shot_candidates(Policy& policy, const LayerGraph& graph,
                                                    const Cluster& cluster, const CostModel* cost,
                                                    int64_t batch_size, Schedule schedule,
                                                    bool replicas_weighed = false);
// The order the search scores `candidates` (zero_shot_candidates') in: the
// first (the typical decision as it is: the policy's own plan) first, then
// the rest by their modelled step, least first (ties, and those the model
// does not price, in the order built). The model costs no evaluation, so
// the candidate it prices least comes second: on random clusters of
// asymmetric links it was within 2% of the best classical planner where
// the order built reached that at the 15th to 28th evaluation.
void in_scoring_order(std::vector<ZeroShotCandidate>& candidates);

// {1, 2, 4, ...} up to min(batch_size, max).
std::vector<int> micro_batch_choices(int64_t batch_size, int max_micro_batches);

// The policy's configuration a search uses for this model and cluster: as
// many groups as devices (at most one per layer), the micro-batch counts the
// batch allows, the devices that can hold a layer, the memory masks, what the
// networks see of the model and the cluster.
PolicyConfig search_policy_config(const LayerGraph& graph, const Cluster& cluster, const SearchOptions& options);

// Per layer: its forward + backward time for a micro-batch of batch / devices
// samples, summed over the cluster's devices (the cost model's).
std::vector<double> layer_compute_ms(const LayerGraph& graph, const Cluster& cluster, const CostModel& cost,
                                     int64_t batch_size);

SearchResult search(const LayerGraph& graph, const Cluster& cluster, Evaluator& evaluator,
                    const SearchOptions& options, const std::function<void(const SearchProgress&)>& progress,
                    const std::atomic<bool>* cancel = nullptr);

}  // namespace tapp
