// planners/planners.h — the classical planners: the baselines every TAPP result is shown against.
//
// Owns the planners (single device, BSP data parallel, uniform split,
// parameter-balanced split, balance-by-time, the dynamic-programming planner
// over heterogeneous devices and asymmetric links, random search, simulated
// annealing, exhaustive search) and `run_planners`, which runs them all through
// one Evaluator and returns the table.
// Data flow: (LayerGraph, Cluster, CostModel, batch) = PlannerContext
//   -> planner (cost-model estimates; search planners spend an Evaluator budget)
//   -> Placement (never over a device's memory: check_memory) or an error saying
//      why none fits -> Evaluator -> StepReport.
// Data parallel (BSP, HOGWILD) is not a pipeline: its Placement has a
// data-parallel mode (every layer in group 0, group_device = the replicas); the
// SimulatorEvaluator costs it with simulate_data_parallel and the runtime runs
// it as that mode's strategy on the replicas. run_planners takes a hook to run the baselines' strategies.
// Files, one per family: single_and_replicas.cpp, balanced_splits.cpp,
// dynamic_programming.cpp (with exhaustive), pipedream.cpp (replicated
// stages), pipelearn.cpp (clients and a server), stochastic_search.cpp (random,
// annealing), baseline_table.cpp (by name, the table); moves.h is the one
// move generator over contiguous pipelines; lower_bound.h what no plan beats;
// context.h the shared inputs.
// Thread safety: stateless functions (each call owns its estimator); the
// context's references must outlive calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"
#include "core/evaluator.h"
#include "core/placement.h"
#include "core/step_report.h"
#include "planners/context.h"
#include "planners/moves.h"
#include "simulator/data_parallel.h"  // simulate_data_parallel, which run_planners falls back on

namespace tapp {

// ---- Contiguous pipelines (stages of consecutive layers: StagePlan, planners/moves.h) ----
// The DP planner's objective for one plan: the pipeline's bottleneck — the
// largest of every stage's forward + backward per micro-batch and every
// boundary's transfer per micro-batch on its link (activations forward,
// gradients backward; each direction its own link). Infinity when a stage
// does not fit its device's memory with the micro-batches it keeps in flight
// (under 1F1B, stage k of S keeps S - k).
double pipeline_bottleneck_ms(const PlannerContext& ctx, const StagePlan& plan);

// Minimum bottleneck over all contiguous plans with `stages` stages (0: any
// number) on distinct devices, in any device order, for `micro_batches`:
// dynamic programming over (layer suffix, set of used devices, first device).
Result<StagePlan> dp_min_bottleneck(const PlannerContext& ctx, int micro_batches, int stages = 0);
// The same objective by enumerating every plan (tests, tiny inputs).
Result<StagePlan> exhaustive_min_bottleneck(const PlannerContext& ctx, int micro_batches, int stages = 0);

// ---- Contiguous pipelines with replicated stages (PipeDream; planners/pipedream.cpp) ----
// PipeDream's objective for one plan, on heterogeneous devices: the largest of
// every stage's (max over its replicas of their micro-batches' forward +
// backward, plus the ring all-reduce of the stage's parameters) / m and every
// boundary's busiest sender / m; equal to pipeline_bottleneck_ms for a plan
// without replicas. Infinity when a replica does not fit or a stage has more
// replicas than micro-batches.
double replicated_bottleneck_ms(const PlannerContext& ctx, const StagePlan& plan);
// `p` as a pipeline of its groups in the order of their first layers, each
// keeping its devices, replicas and everything else, cut where a pipeline's
// step is least for p's micro-batches and schedule: one micro-batch's latency
// through the stages and boundaries (slowest replica) plus m - 1 intervals of
// the slowest by that objective, over bounds on it (GPipe's fill and drain,
// which a bottleneck alone ignores). A pipeline whose own cuts are best comes
// back unchanged, as does a data-parallel or one-group placement; groups that
// interleave (branches apart) are made consecutive. Analytic: nothing is simulated.
Placement with_pipedream_cuts(const PlannerContext& ctx, const Placement& p);
// with_pipedream_cuts' objective for `p` as it is cut (its runs of layers the
// stages, in layer order; a data-parallel `p` one stage on its replicas, a
// micro-batch each), the less of GPipe's and 1F1B's (the measurer keeps the
// faster schedule); infinity where a stage does not fit, or a group's layers
// are not one run (branches apart: not a chain the model prices). Analytic,
// no simulation: a guide to which of several plans to evaluate first.
double modelled_step_ms(const PlannerContext& ctx, const Placement& p);
// `p`'s stages (each group with its devices, replicas and weights, in the
// order of their first layers) dealt to the chain's positions, and its
// micro-batches chosen among ctx.micro_batch_choices(), by with_pipedream_cuts'
// objective: every order of up to six stages (pairwise swaps beyond) ranked
// with each stage's share of the work its devices' share of the speed, the
// best few then with their cuts placed as with_pipedream_cuts places them. Up
// to two plans, cuts placed: the first by the capacity split (unless it is
// p's own order and count), and the best with its cuts placed where that one
// differs and beats p's own so placed; none for a data-parallel or one-group
// `p`. Two, because the two rankings disagree with each other and with the
// simulator often enough (docs/placer.md). On a cluster whose every device
// pair has its own link, which device follows which decides what each
// boundary costs; a trained policy's order was learnt on other clusters.
std::vector<Placement> with_pipedream_orders(const PlannerContext& ctx, const Placement& p);
// `p` with every replicated group on the fastest of its own devices alone
// (its further replicas and their weights dropped), and a data-parallel `p`
// as the whole model on its fastest replica; everything else kept, but where
// one device is left (or was all there was) it takes one micro-batch if that
// fits. A trained policy's zero-shot decision sometimes copies a stage that
// one device runs faster than the copies do once the all-reduce is paid, or
// splits one device's batch into micro-batches with nothing to pipeline.
Placement without_replicas(const PlannerContext& ctx, const Placement& p);
// Which idle devices with_idle_devices takes: those with at least the memory
// of each of the group's own devices, or also any other where the model prices
// the step with it less (modelled_step_ms, memory included: a smaller device
// that holds its copy, not one it would slow down).
enum class IdleDevices { as_roomy, or_faster_by_model };
// `p` with every device it leaves idle (fastest first) added as a replica of
// the group with the most work per unit of its devices' speed (PipeDream's
// rule for a further device), where `which` takes the device; where the copies outnumber the micro-batches,
// the micro-batches become the next of ctx.micro_batch_choices() (a group that would need more stays as it
// is); a data-parallel `p` takes each such idle device as one more replica. Its opposite: a trained policy's
// zero-shot decision sometimes leaves equal devices idle that the classical plans copy its stage onto.
Placement with_idle_devices(const PlannerContext& ctx, const Placement& p,
                            IdleDevices which = IdleDevices::as_roomy);
// `p`'s stages merged into one stage copied onto every device p uses (its
// fastest first), PipeDream's one-stage plan on the decision's own devices;
// where the copies outnumber the micro-batches, the micro-batches become the
// next of ctx.micro_batch_choices() (none: `p` as it is). A data-parallel or
// one-stage `p` comes back as it is. Where a trained policy pipelines a model
// whose stages' transfers cost more than all-reducing its weights (a
// transformer on equal devices), the classical plans copy one stage instead.
Placement as_one_stage(const PlannerContext& ctx, const Placement& p);
// BSP data parallelism over the devices `p` uses (its fastest first): as_one_stage
// with a micro-batch per copy and no pipeline to fill, the count a replicated
// stage's own choice of micro-batches may exceed. A data-parallel `p`, one on one
// device, or one with more devices than samples comes back as it is.
Placement as_data_parallel(const PlannerContext& ctx, const Placement& p);
// `p` with every device a stage of its own: each replicated group on its
// fastest device alone (as without_replicas); a device's groups after its
// first (by first layer) each on a device left over, fastest first, while
// any is; then every device still left over (its dropped replicas and the
// idle ones, fastest first) a further stage cut
// from the tail of the group with the most work per unit of its device's
// speed, by the two devices' speeds; where the stages outnumber the
// micro-batches, the micro-batches become the next choice. The opposite of
// as_one_stage (with_pipedream_cuts then places the cuts for the stages).
// A data-parallel `p` comes back as it is.
Placement as_pipeline_of_every_device(const PlannerContext& ctx, const Placement& p);
// `p` without the stage of its slowest device (one that runs a single,
// unreplicated group, slower than every other device `p` uses): its layers
// join the group of the layer before its first (after its last, for a first
// stage). The policy puts a stage on every
// device, where the classical plans leave out one several times slower than
// the rest (with_pipedream_cuts then places the cuts for the stages left).
// A data-parallel or one-group `p` comes back as it is.
Placement without_slowest_stage(const PlannerContext& ctx, const Placement& p);
// `p` on the fastest devices of the cluster: the i-th fastest device it
// uses replaced by the cluster's i-th fastest, so that it uses as many
// devices, in the same order of speed; `p` as it is where that does not fit.
// A trained policy sometimes puts a small model on a slower device than the
// classical plans' one (one with more memory than the model needs).
Placement on_fastest_devices(const PlannerContext& ctx, const Placement& p);
// `p` with the micro-batch count (among ctx.micro_batch_choices(), at least
// its largest replica count) the model prices least (modelled_step_ms); `p`
// as it is where none prices less, and for data parallelism. with_pipedream_orders
// chooses it for a pipeline's stages; nothing else does for one stage copied
// onto several devices, whose micro-batches are the decision's.
Placement with_micro_batches_by_model(const PlannerContext& ctx, const Placement& p);
// `p` with fewer stages where the model finds it faster so: each round,
// every group in turn joined to its neighbour on the neighbour's devices (as
// without_slowest_stage joins it: its own devices left out) and to the
// group after it on both groups' devices (one stage replicated, PipeDream's),
// and, in a plan of up to six stages, merged into its neighbour with its
// devices copies of any other stage (the stage to copy need not be its neighbour),
// each priced by with_pipedream_cuts' objective with its cuts placed on a
// coarse table (17 positions; every position on a model of up to 64
// layers), for its schedule, and the least kept while
// that step falls. The classical plans may leave
// out a device that is not the slowest (one behind slow links) and copy one
// stage onto two devices the decision gave a stage each. Returned with its
// cuts as joined; a data-parallel or one-group `p` as it is.
Placement with_fewer_stages_by_model(const PlannerContext& ctx, const Placement& p);
// Minimum of that objective over contiguous plans whose stages take disjoint
// device sets (each set's replicas fastest first), for `micro_batches`: DP over
// (layer suffix, used devices, first stage's set). On more than 8 devices the
// sets are counts of interchangeable devices (PipeDream's replica counts), the
// fastest devices kept while the DP stays as small as on 8.
Result<StagePlan> pipedream_min_bottleneck(const PlannerContext& ctx, int micro_batches);
// The same by enumerating every such plan among the 8 fastest devices (tests, tiny inputs).
Result<StagePlan> exhaustive_replicated_min_bottleneck(const PlannerContext& ctx, int micro_batches);

// ---- Planners ----
Result<Placement> plan_single_device(const PlannerContext& ctx);    // the fastest device that fits
Result<Placement> plan_data_parallel(const PlannerContext& ctx);    // BSP marker over the replicas
Result<Placement> plan_hogwild(const PlannerContext& ctx);          // HOGWILD marker (local devices)
Result<Placement> plan_uniform(const PlannerContext& ctx);          // equal layer counts per device
Result<Placement> plan_param_balanced(const PlannerContext& ctx);   // DeepSpeed "parameters"
Result<Placement> plan_balance_by_time(const PlannerContext& ctx);  // torchgpipe balance_by_time
// PipeDream / Pipe-Torch style: for every micro-batch count and stage count the
// DP's best plan, polished by a local search on the cost model's simulation
// (boundary moves, device swaps) and ranked by it; the best `verify` are evaluated.
Result<Placement> plan_dynamic_programming(const PlannerContext& ctx, Evaluator& evaluator, int verify = 3);
// PipeDream with stage replication: for every micro-batch count the DP's best
// replicated plan per number of devices used, polished by a local search on the
// cost model's simulation (boundary shifts, swaps, a replica added or dropped)
// and ranked by it; the best `verify` are evaluated.
Result<Placement> plan_pipedream(const PlannerContext& ctx, Evaluator& evaluator, int verify = 3);
// PipeLearn: clients (every device but the server, the fastest) replicate
// layers [0, k), the server runs [k, L); k and the micro-batch count chosen
// by the cost model's simulation (planners/pipelearn.cpp).
Result<Placement> plan_pipelearn(const PlannerContext& ctx, Evaluator& evaluator);
Result<Placement> plan_random_search(const PlannerContext& ctx, Evaluator& evaluator);
Result<Placement> plan_annealing(const PlannerContext& ctx, Evaluator& evaluator);
// Every layer -> device assignment when devices^layers x micro-batch choices fits
// exhaustive_limit, else every contiguous plan when that fits; else an error.
Result<Placement> plan_exhaustive(const PlannerContext& ctx, Evaluator& evaluator);
// Why exhaustive search does not run on `ctx`: "N candidates > limit L" (N the
// contiguous plans it would fall back to); nullopt when its space fits the limit.
std::optional<std::string> exhaustive_skip_reason(const PlannerContext& ctx);

// "single", "bsp", "uniform", "params", "time", "dp", "random", "anneal", "exhaustive", "hogwild",
// "pipedream", "pipelearn".
const std::vector<std::string>& planner_names();
// For a planner whose plan is the exact optimum of a subspace under a stated
// objective, that statement ("dp: optimal among ..."); nullopt for heuristics.
std::optional<std::string> planner_optimality(const std::string& name);
Result<Placement> run_planner(const std::string& name, const PlannerContext& ctx, Evaluator& evaluator);

// `n` distinct random placements that fit memory (for calibration and accuracy):
// contiguous plans (random stage count, cuts, devices, micro-batches from the
// context's choices) and, for a `noncontiguous_fraction` of them, random
// layer -> device runs of a few layers each (on a model with branches, branches
// on different devices); a `replicated_fraction` of the contiguous ones get
// 1..3 stages replicated onto unused devices (hybrid placements: replicas
// all-reduce their gradients). Fewer when not enough distinct ones fit.
std::vector<Placement> random_placements(const PlannerContext& ctx, int n,
                                         double noncontiguous_fraction = 0.25,
                                         double replicated_fraction = 0);

// ---- BSP data parallel ----
// Replicas are Placement::replicas(num_layers, devices, DataParallelMode::bsp | hogwild)
// (core/placement.h): bsp synchronous, gradients all-reduced; hogwild asynchronous,
// lock-free updates of shared parameters on local devices, no gradient exchange.
bool is_data_parallel(const Placement& p);  // p.is_data_parallel()

// ---- The baseline table ----
struct PlannerRow {
  std::string name;                    // planner_names()
  std::optional<Placement> placement;  // none when the planner failed
  StepReport report;                   // failed with the planner's error when it found nothing
  double plan_s = 0;                   // wall time of planning + evaluation
  // The planner did not run (exhaustive over a space larger than its limit):
  // report is failed with kind "skipped" and the reason as its message.
  bool skipped = false;
};
struct PlannerRunOptions {
  std::vector<std::string> planners;  // empty: all of planner_names()
  // Evaluates a data-parallel strategy (data_parallel_mode_name of the
  // placement's mode: "bsp", "hogwild") on the evaluator's backend (the
  // runtime's run_strategy); empty: simulate_data_parallel.
  std::function<StepReport(const std::string& strategy)> strategy_evaluator;
  // Called as each planner starts (progress on long tables: a search planner
  // spends its whole budget, a measured row runs the workers).
  std::function<void(const std::string& planner)> on_planner;
};
// Runs each planner and evaluates its placement with `evaluator` (search
// planners spend ctx.budget evaluations of it). Stable entry point for
// `tapp-cli optimize`'s baseline table (placer/baselines.h).
std::vector<PlannerRow> run_planners(const PlannerContext& ctx, Evaluator& evaluator,
                                     const PlannerRunOptions& options = {});

}  // namespace tapp
