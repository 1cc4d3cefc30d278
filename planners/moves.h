// planners/moves.h — contiguous pipelines and the one move generator over them.
//
// Owns `StagePlan` (stages of consecutive layers, a device each, the
// micro-batch count), its conversions to and from `Placement`, and
// `StageMoves`: the local moves between plans that the annealing planner, the
// DP planner's polish and TAPP's refinement (placer/search.cpp) share —
//   shift a stage boundary, merge a stage into its predecessor, split a stage
//   onto an unused device, swap two stages' devices, move a stage to an
//   unused device, step the micro-batch count to the next choice; and, when
//   asked for (MoveSet::replicate / drop_replica, StageMoves' `replicas`),
//   replicate a stage onto an unused device, drop one of its replicas or
//   move a replica to another stage (PipeDream's replicated stages: the
//   stage's micro-batches go round-robin over its devices; moving a replica
//   shifts compute between stages without giving a device up, the step a
//   balanced replicated pipeline needs that drop-then-replicate takes in two),
//   or (MoveSet::split_replica) give one of a stage's replicas half its layers,
//   or (MoveSet::join_replicas) join two neighbouring stages into one on all
//   their devices, or (MoveSet::stage_to_replica) make a stage's one device a
//   replica of another stage.
// Three forms: every neighbour for a set of moves (`neighbours`, in a fixed
// order), one random neighbour (`random_neighbour`), a random plan (`random_plan`).
// Data flow: StagePlan -> StageMoves -> StagePlan(s) -> to_placement -> check_memory -> Evaluator.
// A move never checks memory (callers filter with core's check_memory); every
// plan it returns is structurally valid: stages non-empty and in layer order,
// devices in the cluster and each used once (a replica included), micro-batches
// from the choices and at least every stage's replica count.
// Thread safety: StageMoves is immutable after construction; the caller owns the random engine.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "core/placement.h"

namespace tapp {

struct StagePlan {
  std::vector<int> stage_begin;   // first layer of each stage, ascending, [0] = 0
  std::vector<int> stage_device;  // device of each stage (its first replica)
  // Per stage (empty = no stage replicated): the further devices running a
  // replica of the stage beside stage_device[k] (Placement::group_replicas).
  std::vector<std::vector<int>> stage_replicas;
  int micro_batches = 1;
  int num_stages() const { return static_cast<int>(stage_begin.size()); }
  int replica_count(int k) const {
    return 1 + (stage_replicas.empty() ? 0 : static_cast<int>(stage_replicas[k].size()));
  }
  int max_replica_count() const;
  bool uses_device(int d) const;  // as a stage's device or a replica
  // Stage k's device, then its further replicas (Placement::devices_of_group).
  std::vector<int> devices(int k) const;
};

// Stage k is group k (its replicas the group's); `source` labels the placement.
Placement to_placement(const StagePlan& plan, int num_layers, Schedule schedule, const std::string& source);
// The pipeline of a placement's runs: a new stage wherever the group changes
// from one layer to the next, on that group's device. Exact for a placement
// whose groups are runs of consecutive layers; a group that comes back later
// becomes a stage of its own. A replicated group's replicas come along.
StagePlan stage_plan_of_runs(const Placement& p);

// Which moves `neighbours` enumerates.
struct MoveSet {
  std::vector<int> shift_steps = {1};  // shift each boundary by +step then -step, for each step
  bool merge = true;                   // each stage into its predecessor
  bool split = true;          // each stage of 2+ layers at its middle, the second half on each unused device
  bool swap = true;           // every pair of stages' devices
  bool relocate = true;       // each stage to each unused device
  bool micro_batches = true;  // the previous and next micro-batch choice (never below a stage's replicas)
  bool replicate = false;     // each stage onto each unused device (while micro-batches > its replicas)
  bool drop_replica = false;  // each further replica of each replicated stage
  bool move_replica = false;  // each further replica to each other stage (while micro-batches > its replicas)
  // Each device of each replicated stage of 2+ layers onto a stage of its own,
  // the stage's first or second half at its middle (the rest stays
  // replicated): the step from a model copied onto every device to a
  // pipeline, which no other single move takes once every device is in use.
  bool split_replica = false;
  // Each stage joined to its predecessor: one stage of both their layers on
  // both their devices (while micro-batches >= those devices), split_replica's
  // inverse.
  bool join_replicas = false;
  // Each stage of one device dissolved: its layers to its predecessor (the
  // first stage's to its successor), its device a further replica of each
  // other stage but that one (join_replicas' move), while micro-batches
  // exceed that stage's replicas: the step from a pipeline to PipeDream's
  // replicated stage on devices that are not neighbours in it.
  bool stage_to_replica = false;
  // TAPP's refinement: shifts by 1, 2, 4, ... up to a quarter of the model, every move.
  static MoveSet wide(int num_layers);
  // The DP planner's polish: boundary shifts by one layer and device swaps.
  static MoveSet shifts_and_swaps();
  // `wide` plus replicating a stage, dropping a replica and moving one (the policy's and PipeDream's space).
  static MoveSet wide_with_replicas(int num_layers);
};

class StageMoves {
 public:
  // `micro_batch_choices` ascending (a plan whose count is not among them gets no micro-batch move).
  // `replicas`: random_neighbour also draws "replicate a stage" and "drop a replica".
  StageMoves(int num_layers, int num_devices, std::vector<int> micro_batch_choices, bool replicas = false);

  // Every neighbour by the moves in `set`, in this order: per boundary (in layer
  // order) its shifts then its merge; the splits; per stage its swaps with later
  // stages then its relocations; fewer then more micro-batches; per stage its
  // replications (unused devices ascending), its dropped replicas, then its
  // replicas moved to each other stage (stages ascending); per replicated
  // stage, each of its devices with the second half then the first; each
  // stage (from the second) joined to its predecessor; per stage of one
  // device, its device onto each other stage (stages ascending).
  std::vector<StagePlan> neighbours(const StagePlan& plan, const MoveSet& set) const;

  // One random move of any kind: a boundary shift of mostly one or two layers,
  // sometimes up to a tenth of the model; a swap; a relocation; a micro-batch
  // step; a split at a random layer onto a random unused device; a merge;
  // with `replicas`, also a stage replicated onto a random unused device,
  // one replica dropped or one replica moved to another stage. Kinds that do not apply are redrawn (20 tries);
  // `plan` itself if none applied.
  StagePlan random_neighbour(const StagePlan& plan, std::mt19937_64& rng) const;

  // A random plan: 1..min(devices, layers) stages at random cuts on distinct
  // random devices, a random micro-batch choice.
  StagePlan random_plan(std::mt19937_64& rng) const;

  int num_layers() const { return num_layers_; }
  int num_devices() const { return num_devices_; }
  const std::vector<int>& micro_batch_choices() const { return choices_; }

 private:
  int stage_end(const StagePlan& plan, int k) const;
  std::vector<int> unused_devices(const StagePlan& plan) const;
  int choice_index(int micro_batches) const;  // -1 when not a choice
  static void insert_stage(StagePlan& plan, int k, int begin, int device);
  static void erase_stage(StagePlan& plan, int k);
  // The plan with micro-batch choice j, or false when it would leave a stage
  // with more replicas than micro-batches.
  bool step_micro_batches(const StagePlan& plan, int j, StagePlan& out) const;
  // The plan with stage `from`'s further replica r run by stage `to`, or false
  // when `to` would have more replicas than micro-batches.
  static bool move_replica(const StagePlan& plan, int from, int r, int to, StagePlan& out);
  // The plan with stage k's r-th device (0: stage_device) alone on the
  // stage's second (or first) half, the rest of its devices on the other.
  StagePlan replica_split_off(const StagePlan& plan, int k, int r, bool second_half) const;
  // The plan with stage k's layers on its predecessor (k = 0: its successor)
  // and its devices further replicas of stage j (j = k - 1: the two stages
  // joined on all their devices, k - 1's first).
  static StagePlan stage_made_replica(const StagePlan& plan, int k, int j);

  int num_layers_;
  int num_devices_;
  std::vector<int> choices_;
  bool replicas_ = false;
};

}  // namespace tapp
