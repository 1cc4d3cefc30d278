// placer/refine.h — refinement of the policy's best by iterated local search.
//
// Owns `refine`: after the policy has searched, spend `budget` more
// evaluations through the same Measurer (so its memo, best and counts go on)
// climbing from the best found. Hill-climb by first improvement over the
// neighbours in random order; at a local optimum, kick the best pipeline by
// two random moves and climb again, until the budget is spent or cancel
// (without `kicks`: until the climbs end; with `look_past_unused`, a local
// optimum that leaves a device unused is first looked past by two moves).
// A data-parallel best is first climbed among replica sets (few moves: drop,
// add or swap a replica); the budget then goes to the pipelines, from the best
// one. With the model's parallel branches given, each step also tries a
// random few branch moves (branch_neighbours). (Each plan is scored on both
// synchronous schedules by the Measurer.) Memoised repeats cost no
// evaluation, so the loop is also bounded by attempts (20 x budget).
// Also owns `spread_branches`, which turns a policy decision's spread groups
// into a placement with their forks' branches side by side (the search's).
// Data flow: Measurer.best / best_pipeline -> neighbours (planners/moves.h) -> Measurer.measure.
// Thread safety: one thread (the search's).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/placement.h"
#include "model/branches.h"

namespace tapp {

class Measurer;

struct RefineOptions {
  int budget = 0;  // evaluations (distinct placements); 0 = off
  uint64_t seed = 1;
  int num_devices = 1;
  std::vector<int> micro_batch_choices;
  bool replicas = false;  // also replicate a stage onto an unused device and drop a replica (planners/moves.h)
  // Also give one of a replicated stage's devices half its layers, join two
  // neighbouring stages into one on all their devices, and make a stage's one
  // device a replica of another stage (MoveSet::split_replica, join_replicas, stage_to_replica).
  bool split_and_join_replicas = false;
  // Further starts (placement, step ms), climbed first: the search's own best
  // before it imitated a given plan, whose basin may hold a better plan.
  std::vector<std::pair<Placement, double>> also_from;
  // The model's parallel branches (model/branches.h): when given, a
  // pipeline's neighbours also move one branch to another device, or spread a
  // fork's branches over the devices (branch_neighbours).
  std::vector<ParallelBranches> branches;
  // Where given, each step's moves (shuffled) go through it, which may
  // reorder and add to them: a model's estimates, which cost no evaluation,
  // can put the improving moves first.
  std::function<void(std::vector<Placement>&)> arrange_moves;
  // With arrange_moves, at a local optimum that leaves a device unused: the
  // plans two moves away whose first move puts an unused device to work,
  // the model's best few measured, and the climb goes on from one that
  // improves (a replica added to a stage may only pay once a device leaves it).
  bool look_past_unused = false;
  bool kicks = true;                  // false: stop at the local optima (no kicks)
  std::function<bool()> out_of_time;  // where given, the refinement also stops once it says so
};

// Local moves around a placement: replica moves (drop, add or swap a replica)
// for a data-parallel one; else every move of the one move generator
// (planners/moves.h, MoveSet::wide: boundary shifts by 1, 2, 4, ... layers up
// to a quarter of the model, merges, splits onto an unused device, device
// swaps and moves, the neighbouring micro-batch counts; with `replicas`,
// MoveSet::wide_with_replicas: also replicating a stage onto an unused device
// and dropping a replica; with `split_and_join_replicas`, MoveSet's
// split_replica, join_replicas and stage_to_replica too) on the pipeline of the placement's runs
// (a replicated group's replicas come along).
std::vector<Placement> neighbours(const Placement& p, int num_devices,
                                  const std::vector<int>& micro_batch_choices, bool replicas = false,
                                  bool split_and_join_replicas = false);

// Branch-parallel moves around a pipeline (not data parallel): one branch of a
// fork onto another device (a new group there), and a fork's branches spread
// over the devices (branch k on device (k + r) mod D, each rotation r that
// moves two or more). Layers of replicated groups stay where they are.
// Unused groups are dropped.
std::vector<Placement> branch_neighbours(const Placement& p, const std::vector<ParallelBranches>& branches,
                                         int num_devices);

// The policy's spread (PolicyConfig::forks): in each group `spread[g]`
// names, every fork wholly inside it runs its branches side by side, on the
// group's devices and its helpers. SpreadRule::in_turn: the heaviest branch
// (by `layer_weight`) stays in the group, each next one goes to the next
// helper, in turn. SpreadRule::by_speed: heaviest first, each branch goes
// where it would finish first at the devices' `device_speed` (ties stay in
// the group: no transfer). The branches a helper takes go to a new group on
// it. Helpers: the devices no group holds, dealt out (fastest first, ties in
// index order) to every copy of every spreading group in turn, then the
// devices other groups hold, dealt out to the group's own copies in turn. A
// replicated group spreads only where each copy has a helper, and a
// helper's new group has as many copies, copy j on copy j's helper, so each
// micro-batch's towers run beside the copy that runs it; the layers after
// each fork whose branches left go on in a new group on the same copies (a
// replicated group must be one stage). Forks are taken in order, so a fork
// nested in a branch that left the group stays with that branch.
struct BranchSpread {
  std::vector<ParallelBranches> forks;
  std::vector<double> layer_weight;
  std::vector<double> device_speed;  // per device of the cluster (only ratios count)
};
enum class SpreadRule { in_turn, by_speed };
Placement spread_branches(const Placement& p, const std::vector<bool>& spread, const BranchSpread& how,
                          SpreadRule rule);

// Climbs from options.also_from, then from measurer.best(); evaluations are
// labelled `iteration` in the trace.
void refine(Measurer& measurer, const RefineOptions& options, int iteration, const std::atomic<bool>* cancel);

}  // namespace tapp
