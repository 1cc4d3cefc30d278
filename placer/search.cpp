// placer/search.cpp — see search.h.
#include "placer/search.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "core/cluster.h"
#include "model/layer_graph.h"
#include "placer/features.h"
#include "placer/measurer.h"
#include "placer/refine.h"
#include "planners/context.h"
#include "planners/moves.h"
#include "planners/planners.h"
#include "profiler/compute_threads.h"
#include "simulator/cost_model.h"

namespace tapp {

namespace {

// Where the search's last third begins (a fraction of it done): its restarts search around the best.
constexpr double kLastThird = 2.0 / 3.0;
// The odds at which a restart beside a plan of few groups explores each choice (room_for).
constexpr double kMostExplore = 0.2;
// Without SearchOptions::max_restarts: 8 restarts per 600 iterations, at least 8.
constexpr int kLeastRestarts = 8;
constexpr int kIterationsPerRestart = 600 / kLeastRestarts;

// What trained networks were trained with (train_policy.h) and a fresh
// search's networks and restarts go without: the compute prior, the
// stage-count head and the replica balance; and the order replicas are
// offered in (the trained head learned fewest copies first).
void use_trained_inputs(PolicyConfig& pc, bool trained) {
  pc.prior_axis = trained ? PriorAxis::compute : PriorAxis::depth;
  pc.choose_stage_count = trained;
  pc.balance_replicas = trained;
  pc.replica_offers = trained ? ReplicaOffers::fewest_copies : ReplicaOffers::heaviest_first;
}

// A device that cannot hold the smallest layer (the whole batch as one
// micro-batch, by core's memory rule) is masked out of the allocation.
std::vector<bool> devices_that_fit(const StageMemory& memory, const LayerGraph& g, const Cluster& c,
                                   int64_t batch_size) {
  std::vector<bool> ok(c.num_devices(), false);
  for (int d = 0; d < c.num_devices(); ++d)
    for (int l = 0; l < static_cast<int>(g.layers.size()) && !ok[d]; ++l)
      ok[d] = memory.fits(c.devices[d], l, l + 1, batch_size, 1);
  return ok;
}

// [k - 1][device]: whether a data-parallel replica at ceil(batch / k) fits
// there, by core's own count (estimate_device_memory_bytes of k replicas).
std::vector<std::vector<bool>> data_parallel_fits(const LayerGraph& g, const Cluster& c, int64_t batch_size,
                                                  Optimizer optimizer) {
  std::vector<std::vector<bool>> fits;
  std::vector<int> devices;
  for (int k = 1; k <= c.num_devices(); ++k) {
    devices.push_back(k - 1);
    Placement replicas = Placement::replicas(static_cast<int>(g.layers.size()), devices);
    replicas.optimizer = optimizer;
    const int64_t need = estimate_device_memory_bytes(replicas, g, c, batch_size)[0];
    std::vector<bool> row;
    for (const Device& d : c.devices) row.push_back(need <= device_memory_bytes(d));
    fits.push_back(std::move(row));
  }
  return fits;
}

// Whether data parallelism can run at all: for some k >= 2, at least k
// devices each hold a whole replica with its share of the batch, ceil(batch /
// k) (BSP over 8 small devices may fit where two halves do not). Otherwise
// every data-parallel proposal fails its memory check, and offering it only
// teaches the policy a failure.
bool some_replica_set_fits(const std::vector<std::vector<bool>>& fits) {
  for (size_t k = 2; k <= fits.size(); ++k)
    if (std::count(fits[k - 1].begin(), fits[k - 1].end(), true) >= static_cast<std::ptrdiff_t>(k)) return true;
  return false;
}

// Stage ends (fractions of the depth) that split the model's multiply-adds
// into `stages` equal parts.
std::vector<double> compute_balanced_cuts(const LayerGraph& g, int stages) {
  const int L = static_cast<int>(g.layers.size());
  double total = 0;
  for (const Layer& l : g.layers) total += static_cast<double>(l.macs);
  std::vector<double> cuts;
  if (stages < 2 || L < 2 || !(total > 0)) return cuts;
  double acc = 0;
  for (int i = 0; i < L && static_cast<int>(cuts.size()) < stages - 1; ++i) {
    acc += static_cast<double>(g.layers[i].macs);
    while (static_cast<int>(cuts.size()) < stages - 1 && acc >= total * (cuts.size() + 1) / stages)
      cuts.push_back(std::clamp((i + 1.0) / L, 0.02, 0.98));
  }
  while (static_cast<int>(cuts.size()) < stages - 1) cuts.push_back(0.98);
  return cuts;
}

// A restarted policy starts from another positional prior, so restarts
// explore other basins. In turn (restart 1, 2, 3, 4, then again): stages of
// equal multiply-adds (G of them, ceil(G/2) the next time round); G + 1
// stages ending at depths that move by the golden ratio from restart to
// restart (every other time round the devices taking turns instead:
// takes_turns); fewer stages than devices with replicas as likely as not (when the
// policy may replicate: max(1, G/4) stages the first time round, then a
// random number in [2, G - 1], the second time round only where restart 7
// has no plan of two replicated stages to imitate (kReplicatedStagesRestart);
// without replicas: one stage, then [2, G]);
// the equal-stage prior (only the seed changes; with restart_around_best, the
// restart imitates the best instead, room_for, as every restart in the
// search's last third does, without this prior). The ceil(G/2)-stage restarts
// also start replicas at even odds: replicated stages need devices no stage holds.
// The golden-ratio restarts draw one group more than devices and may give a
// device several groups while others are free (no distinct-device mask): a
// fast device around a slow device's middle stages, which no planner row can
// express (the DP and PipeDream give each device one stage). They
// also offer replicas on devices other groups hold (a copy of the
// convolutions beside the classifier's stage), which the other priors keep
// to free devices: there the wider offers cost the replicated plans they found.
void vary_prior(PolicyConfig& pc, int restart, uint64_t search_seed, std::mt19937_64& rng, const LayerGraph& g) {
  const int G = pc.num_groups;
  if (G < 2 || restart % 4 == 0) return;
  const int cycle = restart / 4;  // 0, 1, 2, ...
  const bool replicas = pc.max_replicas > 0;
  if (restart % 4 == 1) {
    pc.prior_groups = cycle % 2 == 0 ? G : (G + 1) / 2;
    pc.prior_cuts = compute_balanced_cuts(g, pc.prior_groups);
    if (replicas && pc.prior_groups < G) pc.replica_bias = 0.0;
    return;
  }
  int stages = G;
  const int L = static_cast<int>(g.layers.size());
  if (restart % 4 == 2 && G < L) {
    pc.num_groups = stages = G + 1;
    pc.distinct_devices = false;
    pc.replicas_on_held_devices = true;
  }
  if (restart % 4 == 3) {
    if (replicas) {
      stages = cycle == 0 ? std::max(1, G / 4) : std::uniform_int_distribution<int>(std::min(2, G - 1), G - 1)(rng);
      pc.replica_bias = 0.0;
    } else {
      stages = cycle == 0 ? 1 : std::uniform_int_distribution<int>(2, G)(rng);
    }
  }
  // Each stage end moves by the golden ratio from restart to restart (from
  // a random start per search), so successive restarts spread it over the
  // depth instead of drawing it independently.
  std::vector<double> cuts(stages - 1);
  std::mt19937_64 start_rng(search_seed * 0x2545F4914F6CDD1DULL + 3);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double phi = 0.6180339887498949;
  for (double& c : cuts) {
    double x = u(start_rng) + restart * phi;
    c = 0.02 + 0.96 * (x - std::floor(x));
  }
  std::sort(cuts.begin(), cuts.end());
  pc.prior_groups = stages;
  pc.prior_cuts = cuts;
}

// Every other time round, restart 2 of the cycle (6, 14, ...) imitates the
// devices taking turns (devices_taking_turns, kTurns each) instead of a
// golden-ratio prior: the refinement's best plans on machines of different
// speeds (resnet50 at batch 4 on 4hetero: 16 groups, the fast device in 6
// of them, the slower ones a few layers each between) are that shape, which
// the priors' partitions with their drawn devices did not reach; from the
// imitation the policy searches beside it as around the best (room_for).
// (A prior of four groups per device had this restart: docs/placer.md.)
constexpr int kTurns = 3;
bool takes_turns(int restart) { return restart % 4 == 2 && (restart / 4) % 2 == 1; }

// Restart 7 (restart 3 of the second time round) imitates the fastest of
// two_replicated_stages (where the policy may replicate, on more than one
// device) instead of its prior of [2, G - 1] stages with replicas at even
// odds: the best plans known on random LAN clusters for alexnet, vgg16 and
// resnet50 are often two stages, each on several devices of different
// speeds (alexnet at batch 4 on lan445: the convolutions on the three
// fastest, the classifier on the two slowest, 0.80 of the best row), which
// the policy's own draws reached in one seed of three. Not at restart 3:
// there the plan became the best early, and the restarts around the best
// stayed by it (vgg16 at batch 4 on mixed_speeds_lan: 0.960 of the best row
// in seeds 1 and 3, against 0.896 and 0.898 without). Measuring the
// candidates costs their count (at most 7 cuts x the devices), once a search.
constexpr int kReplicatedStagesRestart = 7;

// The allowed devices, fastest first by compute.
std::vector<int> fastest_first(const DeviceTraits& devices, const std::vector<bool>& allowed) {
  std::vector<int> order;
  for (int d = 0; d < devices.size(); ++d)
    if (allowed.empty() || allowed[d]) order.push_back(d);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return devices.compute[a] > devices.compute[b]; });
  return order;
}

// The devices' compute together.
double compute_of(const DeviceTraits& devices, const std::vector<int>& ids) {
  double compute = 0;
  for (int d : ids) compute += devices.compute[d];
  return compute;
}

// Where boundary b (the layers from b on after it) falls in the compute, by the layers' compute_positions.
double boundary_position(const std::vector<double>& at, int b) { return 0.5 * (at[b - 1] + at[b]); }

// The boundary (1 .. L - 1) nearest `share` of the compute; `at`: the layers' compute_positions.
int nearest_boundary(const std::vector<double>& at, double share) {
  int best = 1;
  for (int b = 2; b < static_cast<int>(at.size()); ++b)
    if (std::abs(boundary_position(at, b) - share) < std::abs(boundary_position(at, best) - share)) best = b;
  return best;
}

// Where two_replicated_stages cuts: boundary b starts the second stage at layer b.
// `at`: the layers' compute_positions; `output_mb`: each layer's activation (empty = unknown).
std::vector<int> replicated_stage_cuts(const std::vector<double>& at, const std::vector<double>& output_mb) {
  const int L = static_cast<int>(at.size());
  auto position = [&](int b) { return boundary_position(at, b); };
  std::vector<int> cuts;
  for (double share : {1.0 / 3, 0.5, 2.0 / 3}) cuts.push_back(nearest_boundary(at, share));
  std::vector<int> by_activation;
  for (int b = 1; b < L; ++b)
    if (position(b) >= 0.05 && position(b) <= 0.95) by_activation.push_back(b);
  const bool sized = output_mb.size() == at.size();
  std::stable_sort(by_activation.begin(), by_activation.end(),
                   [&](int a, int b) { return sized && output_mb[a - 1] < output_mb[b - 1]; });
  std::vector<int> chosen;
  for (int b : by_activation) {
    if (chosen.size() == 4) break;
    if (std::all_of(chosen.begin(), chosen.end(),
                    [&](int c) { return std::abs(position(c) - position(b)) >= 0.05; }))
      chosen.push_back(b);
  }
  cuts.insert(cuts.end(), chosen.begin(), chosen.end());
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  return cuts;
}

// `fastest` (fastest first) dealt to two stages, each device to the stage
// furthest below its share of their compute (`first_share` and the rest);
// neither stage left empty.
std::array<std::vector<int>, 2> deal_by_share(const DeviceTraits& devices, const std::vector<int>& fastest,
                                              double first_share) {
  const double compute = compute_of(devices, fastest);
  const double want[2] = {first_share * compute, (1 - first_share) * compute};
  double have[2] = {0, 0};
  std::array<std::vector<int>, 2> stage;
  for (int d : fastest) {
    const int s = want[0] - have[0] >= want[1] - have[1] ? 0 : 1;
    stage[s].push_back(d);
    have[s] += devices.compute[d];
  }
  for (int s = 0; s < 2; ++s)
    if (stage[s].empty()) stage[s].push_back(stage[1 - s].back()), stage[1 - s].pop_back();
  return stage;
}

// `fastest` (fastest first) split in speed order: the first k to stage
// `fast_stage`, the rest to the other, k (neither stage empty) nearest that
// stage's share of their compute, so each stage's replicas run at like speeds.
std::array<std::vector<int>, 2> split_in_speed_order(const DeviceTraits& devices,
                                                     const std::vector<int>& fastest, double first_share,
                                                     int fast_stage) {
  const double compute = compute_of(devices, fastest);
  const double want = (fast_stage == 0 ? first_share : 1 - first_share) * compute;
  size_t k = 1;
  double have = devices.compute[fastest[0]], best_miss = std::abs(have - want);
  for (size_t i = 1; i + 1 < fastest.size(); ++i) {
    have += devices.compute[fastest[i]];
    if (std::abs(have - want) < best_miss) best_miss = std::abs(have - want), k = i + 1;
  }
  std::array<std::vector<int>, 2> stage;
  stage[fast_stage].assign(fastest.begin(), fastest.begin() + k);
  stage[1 - fast_stage].assign(fastest.begin() + k, fastest.end());
  return stage;
}

// The distinct ways two_replicated_stages deals `fastest` to the two stages:
// by share, then in speed order with the faster devices on either stage.
std::vector<std::array<std::vector<int>, 2>> ways_to_deal(const DeviceTraits& devices,
                                                          const std::vector<int>& fastest,
                                                          double first_share) {
  std::vector<std::array<std::vector<int>, 2>> ways = {deal_by_share(devices, fastest, first_share)};
  for (int fast_stage : {0, 1}) {
    auto way = split_in_speed_order(devices, fastest, first_share, fast_stage);
    if (std::find(ways.begin(), ways.end(), way) == ways.end()) ways.push_back(std::move(way));
  }
  return ways;
}

// What a restart around `best` needs to copy it: twice its groups (at least
// G, at most one per layer), so the policy may also split its stages; and
// devices shared by groups and replicas on devices other groups hold, as
// the best found by the golden-ratio restarts may have them.
// And to search beside it: the imitation leaves the networks' odds saturated
// on the best, which they then sampled again and again (0-23 new plans in a
// whole restart). Exploring (PolicyConfig::explore), each choice after the
// partition is drawn evenly at odds of 0.2, or of 1/G beside a plan of G > 5
// groups, and one layer a decision on average between its predecessor's
// group and the next: the plans a device, a copy, a micro-batch count or a
// cut away, as the refinement's moves. (At 0.2 a draw beside a plan of G
// groups redrew 0.2 G of its devices, ten of a 50-group plan's; at 1/G,
// about one: docs/placer.md, "Exploring one device a draw".)
void room_for(const Placement& best, PolicyConfig& pc) {
  const int L = static_cast<int>(best.layer_group.size());
  pc.num_groups = std::max(pc.num_groups, std::min(2 * best.num_groups(), L));
  pc.distinct_devices = false;
  pc.replicas_on_held_devices = true;
  pc.explore = std::min(kMostExplore, 1.0 / best.num_groups());
  pc.explore_partition = 1.0 / L;
}

}  // namespace

const char* zero_shot_from_name(ZeroShotFrom f) { return f == ZeroShotFrom::greedy ? "greedy" : "typical"; }

const char* zero_shot_replicas_name(ZeroShotReplicas r) {
  switch (r) {
    case ZeroShotReplicas::dropped: return "dropped";
    case ZeroShotReplicas::idle_devices_added: return "idle_devices_added";
    case ZeroShotReplicas::one_stage: return "one_stage";
    case ZeroShotReplicas::data_parallel: return "data_parallel";
    case ZeroShotReplicas::every_device_a_stage: return "every_device_a_stage";
    case ZeroShotReplicas::pipelined: return "pipelined";
    case ZeroShotReplicas::slowest_device_dropped:
      return "slowest_device_dropped";
    case ZeroShotReplicas::fewer_stages:
      return "fewer_stages";
    case ZeroShotReplicas::fastest_devices:
      return "fastest_devices";
    default: return "as_decided";
  }
}

namespace {

PlannerContext zero_shot_context(const LayerGraph& graph, const Cluster& cluster, const CostModel* cost,
                                 int64_t batch_size, const std::vector<int>& choices, bool replicas_weighed) {
  PlannerContext ctx;
  ctx.graph = &graph;
  ctx.cluster = &cluster;
  ctx.cost = cost;
  ctx.batch_size = batch_size;
  ctx.max_micro_batches = choices.back();
  ctx.replicas_weighed = replicas_weighed;
  return ctx;
}

// `moves` with each pipeline's cuts also placed by the planners' model
// (with_pipedream_cuts, where that differs: a move that changes a stage's
// devices leaves the cuts where the old devices had them), in ascending order
// of the model's step (modelled_step_ms; ties as given).
void arrange_by_model(const PlannerContext& ctx, std::vector<Placement>& moves) {
  std::vector<std::pair<double, Placement>> ranked;
  std::set<std::string> seen;
  const auto add = [&](Placement p) {
    if (seen.insert(placement_key(p)).second) ranked.push_back({modelled_step_ms(ctx, p), std::move(p)});
  };
  for (Placement& p : moves) {
    Placement recut = with_pipedream_cuts(ctx, p);
    add(std::move(p));
    add(std::move(recut));
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  moves.clear();
  for (auto& [estimate, p] : ranked) moves.push_back(std::move(p));
}

}  // namespace

std::vector<ZeroShotCandidate> zero_shot_candidates(Policy& policy, const LayerGraph& graph,
                                                    const Cluster& cluster, const CostModel* cost,
                                                    int64_t batch_size, Schedule schedule,
                                                    bool replicas_weighed) {
  std::vector<ZeroShotCandidate> out;
  const std::vector<int>& choices = policy.config().micro_batch_choices;
  // For the repairs (planners.h); their micro-batch counts are the policy's own choices.
  const PlannerContext ctx = zero_shot_context(graph, cluster, cost, batch_size, choices, replicas_weighed);
  std::vector<ZeroShotCandidate> last;  // the candidates scored after every other
  const Decision typical = policy.typical();
  for (ZeroShotFrom from : {ZeroShotFrom::typical, ZeroShotFrom::greedy}) {
    const Decision d = from == ZeroShotFrom::typical ? typical : policy.greedy();
    // The argmax decision where it is the typical one adds only candidates
    // already scored (the measurer memoises them): not repaired twice.
    if (from == ZeroShotFrom::greedy && d == typical) break;
    const Placement as_decided = decision_to_placement(d, choices, schedule);
    if (!ctx.cost) {
      out.push_back({d, as_decided, {from, ZeroShotReplicas::as_decided, false}});
      continue;
    }
    // Two candidates alike in what an evaluation measures are scored once.
    const auto differs = [](const Placement& a, const Placement& b) {
      return a.layer_group != b.layer_group || a.group_device != b.group_device ||
             a.group_replicas != b.group_replicas || a.micro_batches != b.micro_batches ||
             a.data_parallel != b.data_parallel;
    };
    // A candidate with its cuts placed for its stages, and reordered; then its
    // cuts placed for the other schedule too, whose memory differs (1F1B keeps
    // fewer micro-batches in flight, so a fast device may take the long stage
    // GPipe could hold only by recomputing), since the measurer scores both.
    const auto add_cut_variants = [&](const Decision& decided, ZeroShotReplicas replicas, const Placement& p,
                                      std::vector<ZeroShotCandidate>& into) {
      std::vector<Placement> seen{p};
      const auto add = [&](Placement v, bool reordered) {
        for (const Placement& s : seen)
          if (!differs(v, s)) return;
        seen.push_back(v);
        into.push_back({decided, std::move(v), {from, replicas, true, reordered}});
      };
      std::vector<Placement> schedules{p};
      if (std::optional<Placement> other = with_other_schedule(p)) schedules.push_back(std::move(*other));
      for (const Placement& q : schedules) {
        add(with_pipedream_cuts(ctx, q), false);
        for (Placement& o : with_pipedream_orders(ctx, q)) add(std::move(o), true);
      }
      if (p.num_groups() == 1 && p.replica_count(0) > 1) add(with_micro_batches_by_model(ctx, p), true);
    };
    // Data parallelism on the decision's devices is one evaluation (it has
    // no pipeline schedule to choose): built right after the decision, before
    // even its own cut and order variants, so that where the model prices it
    // as another candidate it is scored first of the two.
    const Placement data_parallel = as_data_parallel(ctx, as_decided);
    out.push_back({d, as_decided, {from, ZeroShotReplicas::as_decided, false}});
    if (differs(data_parallel, as_decided)) out.push_back({d, data_parallel, {from, ZeroShotReplicas::data_parallel, false}});
    add_cut_variants(d, ZeroShotReplicas::as_decided, as_decided, out);
    const Placement every_device = as_pipeline_of_every_device(ctx, as_decided);
    const Placement idle_added = with_idle_devices(ctx, as_decided);
    const std::pair<ZeroShotReplicas, Placement> repaired[] = {
        {ZeroShotReplicas::dropped, without_replicas(ctx, as_decided)},
        {ZeroShotReplicas::idle_devices_added, idle_added},
        {ZeroShotReplicas::one_stage, as_one_stage(ctx, as_decided)},
        {ZeroShotReplicas::every_device_a_stage, every_device},
        {ZeroShotReplicas::fastest_devices, on_fastest_devices(ctx, as_decided)}};
    for (const auto& [replicas, p] : repaired) {
      if (!differs(p, as_decided)) continue;
      out.push_back({d, p, {from, replicas, false}});
      add_cut_variants(d, replicas, p, out);
    }
    // A data-parallel decision as the pipeline its groups were drawn as, at
    // the micro-batch head's likeliest count: copies all-reduce the whole
    // model every step, which a slow network makes dearer than stages.
    if (d.micro_batch_index == static_cast<int>(choices.size())) {
      Decision pipelined = d;
      const std::vector<float> odds = policy.micro_batch_probs(d.layer_group);
      pipelined.micro_batch_index =
          static_cast<int>(std::max_element(odds.begin(), odds.begin() + choices.size()) - odds.begin());
      const Placement p = decision_to_placement(pipelined, choices, schedule);
      out.push_back({pipelined, p, {from, ZeroShotReplicas::pipelined, false}});
      add_cut_variants(pipelined, ZeroShotReplicas::pipelined, p, out);
    }
    // Without the slowest device's stage: scored after everything else, as
    // it is the one repair that gives up a device the decision chose.
    const Placement fewer = without_slowest_stage(ctx, as_decided);
    if (differs(fewer, as_decided)) {
      last.push_back({d, fewer, {from, ZeroShotReplicas::slowest_device_dropped, false}});
      add_cut_variants(d, ZeroShotReplicas::slowest_device_dropped, fewer, last);
    }
    // The plans whose devices the model chose: of each one's cut variants
    // (itself where it has none) only the one the model prices least (one
    // evaluation each, where the repair finds nothing better).
    std::vector<Placement> by_model;
    const auto add_least_modelled = [&](ZeroShotReplicas replicas, const Placement& q) {
      std::vector<ZeroShotCandidate> variants;
      add_cut_variants(d, replicas, q, variants);
      if (variants.empty()) variants.push_back({d, q, {from, replicas, false}});
      std::vector<double> modelled;
      for (const ZeroShotCandidate& v : variants) modelled.push_back(modelled_step_ms(ctx, v.placement));
      ZeroShotCandidate& least =
          variants[std::min_element(modelled.begin(), modelled.end()) - modelled.begin()];
      if (std::any_of(by_model.begin(), by_model.end(),
                      [&](const Placement& b) { return !differs(least.placement, b); }))
        return;
      by_model.push_back(least.placement);
      last.push_back(std::move(least));
    };
    // With fewer stages where the model finds it faster so (merged, or joined
    // onto both stages' devices), from the decision and from its every-device
    // pipeline (the classical plans may leave out a device the decision
    // chose, and use some it left idle).
    for (const Placement& from_plan : {as_decided, every_device}) {
      const Placement q = with_fewer_stages_by_model(ctx, from_plan);
      if (differs(q, from_plan) && differs(q, as_decided) && differs(q, fewer))
        add_least_modelled(ZeroShotReplicas::fewer_stages, q);
    }
    // With idle devices added that have less memory than the stage's own,
    // where the model finds the step faster with them.
    const Placement smaller_added = with_idle_devices(ctx, as_decided, IdleDevices::or_faster_by_model);
    if (differs(smaller_added, as_decided) && differs(smaller_added, idle_added))
      add_least_modelled(ZeroShotReplicas::idle_devices_added, smaller_added);
  }
  out.insert(out.end(), last.begin(), last.end());
  if (ctx.cost)
    for (ZeroShotCandidate& c : out) c.modelled_ms = modelled_step_ms(ctx, c.placement);
  return out;
}

void in_scoring_order(std::vector<ZeroShotCandidate>& candidates) {
  if (candidates.size() < 3) return;
  std::stable_sort(
      candidates.begin() + 1, candidates.end(),
      [](const ZeroShotCandidate& a, const ZeroShotCandidate& b) { return a.modelled_ms < b.modelled_ms; });
}

std::vector<int> micro_batch_choices(int64_t batch_size, int max_micro_batches) {
  std::vector<int> v;
  for (int m = 1; m <= batch_size && m <= std::max(1, max_micro_batches); m *= 2) v.push_back(m);
  return v;
}

Placement decision_to_placement(const Decision& d, const std::vector<int>& choices, Schedule schedule) {
  if (!choices.empty() && d.micro_batch_index == static_cast<int>(choices.size())) {
    // Data parallel: a replica on each device the non-empty groups got (each
    // once, in group order), then on each of their replicas' devices.
    std::vector<bool> nonempty(d.group_device.size(), false);
    for (int g : d.layer_group) nonempty[g] = true;
    std::vector<int> devices;
    auto add = [&](int device) {
      if (std::find(devices.begin(), devices.end(), device) == devices.end()) devices.push_back(device);
    };
    for (size_t g = 0; g < d.group_device.size(); ++g)
      if (nonempty[g]) add(d.group_device[g]);
    for (size_t g = 0; g < d.group_replicas.size(); ++g)
      if (nonempty[g])
        for (int device : d.group_replicas[g]) add(device);
    Placement p = Placement::replicas(static_cast<int>(d.layer_group.size()), devices);
    p.schedule = schedule;
    p.source = "policy";
    return p;
  }
  Placement p;
  std::map<int, int> renumber;
  p.layer_group.resize(d.layer_group.size());
  for (size_t i = 0; i < d.layer_group.size(); ++i) {
    int g = d.layer_group[i];
    auto it = renumber.find(g);
    if (it == renumber.end()) {
      it = renumber.emplace(g, static_cast<int>(p.group_device.size())).first;
      p.group_device.push_back(d.group_device[g]);
    }
    p.layer_group[i] = it->second;
  }
  p.micro_batches = choices.empty() ? 1 : choices[std::clamp(d.micro_batch_index, 0, static_cast<int>(choices.size()) - 1)];
  p.schedule = schedule;
  p.source = "policy";
  // Replicas of the non-empty groups, under their new numbers (none: left empty).
  bool replicated = false;
  for (const auto& [raw, g] : renumber)
    replicated = replicated || (raw < static_cast<int>(d.group_replicas.size()) && !d.group_replicas[raw].empty());
  if (replicated) {
    p.group_replicas.assign(p.group_device.size(), {});
    for (const auto& [raw, g] : renumber)
      if (raw < static_cast<int>(d.group_replicas.size())) p.group_replicas[g] = d.group_replicas[raw];
  }
  return p;
}

Decision placement_to_decision(const Placement& p, const std::vector<int>& choices, int num_groups) {
  if (p.is_data_parallel()) {
    // One group per replica (as many as fit), layers spread evenly over them.
    const int R = std::max(1, std::min<int>(num_groups, p.num_groups()));
    const int L = static_cast<int>(p.layer_group.size());
    Decision d;
    d.group_device.assign(num_groups, p.group_device.front());
    d.group_replicas.assign(num_groups, {});  // none, as the policy draws a data-parallel decision
    for (int r = 0; r < R; ++r) d.group_device[r] = p.group_device[r];
    for (int i = 0; i < L; ++i) d.layer_group.push_back(std::min(R - 1, i * R / std::max(1, L)));
    d.micro_batch_index = static_cast<int>(choices.size());
    return d;
  }
  // Stages in layer order: a new stage wherever the device changes (at most
  // num_groups; the rest stay in the last one), as the contiguous policy sees
  // it; a stage keeps the replicas of the group it starts with.
  Decision d;
  d.group_device.assign(num_groups, 0);
  d.group_replicas.assign(num_groups, {});
  d.layer_group.resize(p.layer_group.size());
  int stage = 0;
  for (size_t i = 0; i < p.layer_group.size(); ++i) {
    int dev = p.device_of_layer(static_cast<int>(i));
    if (i > 0 && dev != p.device_of_layer(static_cast<int>(i - 1)) && stage + 1 < num_groups) ++stage;
    d.layer_group[i] = stage;
    if (i == 0 || d.layer_group[i - 1] != stage) {
      d.group_device[stage] = dev;
      const int g = p.layer_group[i];
      d.group_replicas[stage] = p.group_replicas.empty() ? std::vector<int>{} : p.group_replicas[g];
      std::sort(d.group_replicas[stage].begin(), d.group_replicas[stage].end());
    }
  }
  d.micro_batch_index = 0;
  for (size_t k = 0; k < choices.size(); ++k)
    if (choices[k] <= p.micro_batches) d.micro_batch_index = static_cast<int>(k);
  return d;
}

Placement devices_taking_turns(const LayerTotals& totals, const DeviceTraits& devices,
                               const std::vector<bool>& allowed, int rounds, int micro_batches,
                               Schedule schedule) {
  const int L = static_cast<int>(totals.gflops.size());
  Placement p;
  p.micro_batches = micro_batches;
  p.schedule = schedule;
  p.source = "policy";
  p.layer_group.assign(L, 0);
  const std::vector<int> order = fastest_first(devices, allowed);
  const double compute = compute_of(devices, order);
  if (order.empty() || !(compute > 0)) {  // no device to weigh: all on the first
    p.add_group(0);
    return p;
  }
  // Where each turn's share of the compute ends, turn by turn.
  std::vector<double> turn_end;
  double end = 0;
  for (int r = 0; r < rounds; ++r)
    for (int d : order) turn_end.push_back(end += devices.compute[d] / compute / rounds);
  // A layer goes to the turn its middle falls in.
  const std::vector<double> at = compute_positions(totals, L);
  size_t turn = 0;
  int group = -1, group_turn = -1;
  for (int i = 0; i < L; ++i) {
    while (turn + 1 < turn_end.size() && at[i] > turn_end[turn]) ++turn;
    if (static_cast<int>(turn) != group_turn) {
      group = p.add_group(order[turn % order.size()]);
      group_turn = static_cast<int>(turn);
    }
    p.layer_group[i] = group;
  }
  return p;
}

std::vector<Placement> turn_variants(const LayerTotals& totals, const DeviceTraits& devices,
                                     const std::vector<bool>& allowed, int micro_batches, Schedule schedule) {
  const std::vector<int> order = fastest_first(devices, allowed);
  std::vector<Placement> plans;
  for (size_t m = 2; m <= order.size(); ++m) {
    std::vector<bool> fastest(devices.size(), false);
    for (size_t i = 0; i < m; ++i) fastest[order[i]] = true;
    for (int rounds : {1, 2, 3, 4, 6})
      plans.push_back(devices_taking_turns(totals, devices, fastest, rounds, micro_batches, schedule));
  }
  return plans;
}

std::vector<Placement> two_replicated_stages(const LayerTotals& totals, const DeviceTraits& devices,
                                             const std::vector<bool>& allowed, int micro_batches,
                                             Schedule schedule) {
  const int L = static_cast<int>(totals.gflops.size());
  const std::vector<int> order = fastest_first(devices, allowed);
  std::vector<Placement> plans;
  if (L < 2 || order.size() < 2) return plans;
  const std::vector<double> at = compute_positions(totals, L);
  for (int cut : replicated_stage_cuts(at, totals.output_mb)) {
    const double first_share = boundary_position(at, cut);
    for (size_t m = 2; m <= order.size(); ++m) {
      const std::vector<int> fastest(order.begin(), order.begin() + m);
      for (const auto& stage_devices : ways_to_deal(devices, fastest, first_share))
        plans.push_back(two_stage_plan(L, stage_devices, cut, micro_batches, schedule));
    }
  }
  return plans;
}

std::vector<std::array<std::vector<int>, 2>> speed_order_splits(const DeviceTraits& devices,
                                                                const std::vector<bool>& allowed) {
  const std::vector<int> order = fastest_first(devices, allowed);
  std::vector<std::array<std::vector<int>, 2>> splits;
  for (size_t m = 2; m <= order.size(); ++m)
    for (size_t k = 1; k < m; ++k) {
      std::vector<int> fast(order.begin(), order.begin() + k), slow(order.begin() + k, order.begin() + m);
      for (bool fast_first : {true, false}) {
        std::array<std::vector<int>, 2> stage = {fast, slow};
        if (!fast_first) std::swap(stage[0], stage[1]);
        std::reverse(stage[0].begin(), stage[0].end());
        splits.push_back(std::move(stage));
      }
    }
  return splits;
}

namespace {

// The pipeline two_stage_plan places: stage s on stage[s]'s devices, the second from layer `cut`.
StagePlan two_stages(const std::array<std::vector<int>, 2>& stage, int cut, int micro_batches) {
  StagePlan plan;
  plan.stage_begin = {0, cut};
  for (const std::vector<int>& devices : stage) {
    plan.stage_device.push_back(devices[0]);
    plan.stage_replicas.emplace_back(devices.begin() + 1, devices.end());
  }
  plan.micro_batches = micro_batches;
  return plan;
}

}  // namespace

Placement two_stage_plan(int layers, const std::array<std::vector<int>, 2>& stage, int cut, int micro_batches,
                         Schedule schedule) {
  return to_placement(two_stages(stage, cut, micro_batches), layers, schedule, "policy");
}

namespace {

// One search: the policy, its learner and the measurer, stepped by run().
class SearchLoop {
 public:
  SearchLoop(const LayerGraph& graph, const Cluster& cluster, Evaluator& evaluator, const SearchOptions& opt,
             const std::function<void(const SearchProgress&)>& progress, const std::atomic<bool>* cancel)
      : graph_(graph),
        cluster_(cluster),
        opt_(opt),
        progress_(progress),
        cancel_(cancel),
        measurer_(graph, cluster, evaluator, opt.batch_size, opt.optimizer),
        features_(encode_layers(graph, dictionary_)),
        consumers_(graph.consumers()),
        config_(search_policy_config(graph, cluster, opt)),
        spread_(branch_spread(graph, cluster, opt)),
        policy_(std::make_unique<Policy>(
            features_, consumers_, config_,
            opt.initial_policy ? clone_policy_networks(*opt.initial_policy, opt.learning_rate) : nullptr)),
        rng_(opt.seed),
        total_(std::max(1, opt.iterations)),
        patience_(opt.patience > 0 ? opt.patience : std::max(100, total_ / 2)),
        max_restarts_(opt.max_restarts > 0 ? opt.max_restarts
                                           : std::max(kLeastRestarts, total_ / kIterationsPerRestart)),
        reference_ms_(opt.reference_step_ms) {
    if (!opt.device_sample_ms.empty()) measurer_.weigh_replicas_by(opt.device_sample_ms);
    if (opt.warm_start) imitate(*opt.warm_start, config_.num_groups);
  }

  // Propose, evaluate, update, keep the best (the measurer), maybe restart,
  // stop early; then the policy's greedy and typical placements and the refinement.
  SearchResult run() {
    std::string stop_reason = "iterations";
    if (opt_.initial_policy && !cancelled()) {
      measure_zero_shot();
      climb_from_zero_shot();
    }
    int it = 1;
    for (; it <= total_; ++it) {
      std::vector<Decision> proposals = propose();
      std::vector<StepReport> reports = evaluate(proposals, it);
      if (cancelled()) {
        stop_reason = "cancelled";
        break;
      }
      if (reports.size() < proposals.size()) {  // out of time within the batch: no update on part of it
        stop_reason = "time_budget";
        break;
      }
      update(proposals, reports, it);
      iterations_ = it;
      if (out_of_time()) {
        stop_reason = "time_budget";
        break;
      }
      if (maybe_restart(it)) continue;
      if (out_of_patience(it)) {
        stop_reason = "patience";
        break;
      }
    }
    SearchResult result;
    result.stop_reason = stop_reason;
    result.cancelled = stop_reason == "cancelled";
    // The final decisions, where the policy has learnt since they were its first
    // (no update: the first batch cut short by the time budget) or nothing was found.
    if (!result.cancelled && !cancelled() && (iterations_ > 0 || !measurer_.found())) {
      measure_decision(policy_->greedy(), iterations_);
      measure_decision(policy_->typical(), iterations_);  // memoised where the same
    }
    if (!result.cancelled && !cancelled() && stop_reason != "time_budget") {
      search_turn_variants();
      search_split_cuts();
      search_best_cuts();
    }
    keep_policy_result(result);
    if (!result.cancelled && !cancelled()) refine_best(result);
    keep_final_result(result);
    return result;
  }

 private:
  bool cancelled() const { return cancel_ && cancel_->load(); }
  // Out of time: the time budget less what the greedy and typical decisions
  // measured after the loop will take (two evaluations at the mean so far), so
  // that a search whose evaluations take seconds (measuring) ends near it.
  bool out_of_time() const {
    if (!(opt_.time_budget_s > 0)) return false;
    const double elapsed = measurer_.elapsed_s();
    const int64_t n = measurer_.evaluations();
    return elapsed + (n > 0 ? 2 * elapsed / static_cast<double>(n) : 0.0) >= opt_.time_budget_s;
  }

  // How far the search is after iteration `it`: of its iterations, or of its time budget where further.
  double fraction_done(int it) const {
    double frac = static_cast<double>(it) / total_;
    if (opt_.time_budget_s > 0) frac = std::max(frac, measurer_.elapsed_s() / opt_.time_budget_s);
    return frac;
  }

  // A batch of joint actions sampled from the current policy.
  std::vector<Decision> propose() {
    return policy_->sample(std::max(1, opt_.samples_per_iteration), rng_);
  }

  // Each proposal's report through the measurer (memoised); stops at cancel
  // and when out of time (fewer reports than decisions).
  std::vector<StepReport> evaluate(const std::vector<Decision>& decisions, int it) {
    std::vector<StepReport> reports;
    for (const Decision& d : decisions) {
      if (cancelled() || out_of_time()) break;
      reports.push_back(measure_decision(d, it));
    }
    return reports;
  }

  // The decision's placement, its spread groups' forks spread in turn.
  Placement to_placement(const Decision& d) const {
    Placement p = decision_to_placement(d, config_.micro_batch_choices, opt_.schedule);
    return spreads_any(d) ? spread(d, p, SpreadRule::in_turn) : p;
  }

  static bool spreads_any(const Decision& d) {
    return std::any_of(d.group_spread.begin(), d.group_spread.end(), [](uint8_t s) { return s != 0; });
  }

  // `p`, the decision's placement, with its spread groups' forks spread by `rule` (spread_branches).
  Placement spread(const Decision& d, const Placement& p, SpreadRule rule) const {
    std::vector<bool> spreading(p.num_groups(), false);
    for (size_t i = 0; i < d.layer_group.size(); ++i)
      if (d.spreads(d.layer_group[i])) spreading[p.layer_group[i]] = true;
    return spread_branches(p, spreading, spread_, rule);
  }

  // The decision's report. One that spreads is scored with its branches dealt
  // in turn and balanced by speed (SpreadRule), and the faster kept: neither
  // wins everywhere. inception_v3 spread whole from the fastest device: with
  // one sample on cluster_4hetero balanced is 2.8% faster; with four copies
  // at batch 4 on cluster_8equal, each beside a helper of half its speed, in
  // turn is 9.9% faster (balanced keeps more layers on the copies, and more
  // parameters for the all-reduce that ends the step).
  StepReport measure_decision(const Decision& d, int it) {
    const Placement p = decision_to_placement(d, config_.micro_batch_choices, opt_.schedule);
    if (!spreads_any(d)) return measurer_.measure(p, it);
    StepReport in_turn = measurer_.measure(spread(d, p, SpreadRule::in_turn), it);
    const StepReport& by_speed = measurer_.measure(spread(d, p, SpreadRule::by_speed), it);
    return by_speed.ok && (!in_turn.ok || by_speed.step_ms < in_turn.step_ms) ? by_speed : in_turn;
  }

  // How spread decisions place their branches: the model's forks, each
  // layer's compute (opt.layer_ms, else its FLOPs), the devices' speeds
  // (opt.device_sample_ms; else all equal).
  static BranchSpread branch_spread(const LayerGraph& graph, const Cluster& cluster,
                                    const SearchOptions& opt) {
    BranchSpread s;
    s.forks = parallel_branches(graph);
    const bool timed = opt.layer_ms.size() == graph.layers.size();
    for (size_t i = 0; i < graph.layers.size(); ++i)
      s.layer_weight.push_back(timed ? opt.layer_ms[i] : static_cast<double>(graph.layers[i].macs));
    s.device_speed.assign(cluster.num_devices(), 1.0);
    if (opt.device_sample_ms.size() == s.device_speed.size())
      for (size_t d = 0; d < s.device_speed.size(); ++d)
        if (opt.device_sample_ms[d] > 0) s.device_speed[d] = 1.0 / opt.device_sample_ms[d];
    return s;
  }

  // The zero-shot plan: the fastest of zero_shot_candidates (at most 100
  // evaluations, fewer where they agree: the measurer memoises; no sampling;
  // the measurer keeps the faster schedule of each), in_scoring_order until
  // out of time (the first always).
  void measure_zero_shot() {
    std::vector<ZeroShotCandidate> candidates = zero_shot_candidates(
        *policy_, graph_, cluster_, opt_.zero_shot_costs, opt_.batch_size, opt_.schedule, replicas_weighed());
    in_scoring_order(candidates);
    for (const ZeroShotCandidate& c : candidates) {
      if (zero_shot_ && (cancelled() || out_of_time())) break;
      if (keep_zero_shot(c.placement, c.how)) note_zero_shot_odds(c.decided);
    }
  }

  // Whether the measurer weighs replicas by speed (the planners' model then shares as it does).
  bool replicas_weighed() const { return !opt_.device_sample_ms.empty(); }

  // The fine-tuning's first evaluations: a climb from the zero-shot plan (and
  // the best pipeline among its candidates, where that plan is data
  // parallel), its moves tried in the order the planners' model ranks them,
  // to the local optimum (looked past by two moves where it leaves a device
  // unused) or zero_shot_climb evaluations. A policy trained to
  // one plan samples little else, and REINFORCE from there found nothing
  // better in the evaluations a fresh start needs.
  void climb_from_zero_shot() {
    if (opt_.zero_shot_climb <= 0 || !opt_.zero_shot_costs || !measurer_.found() || cancelled() ||
        out_of_time())
      return;
    const PlannerContext ctx = zero_shot_context(graph_, cluster_, opt_.zero_shot_costs, opt_.batch_size,
                                                 config_.micro_batch_choices, replicas_weighed());
    RefineOptions ro = refine_options(opt_.zero_shot_climb);
    ro.kicks = false;
    ro.split_and_join_replicas = true;
    ro.look_past_unused = true;
    ro.out_of_time = [this] { return out_of_time(); };
    ro.arrange_moves = [&ctx](std::vector<Placement>& moves) { arrange_by_model(ctx, moves); };
    refine(measurer_, ro, 0, cancel_);
    climbed_ms_ = measurer_.best_report().step_ms;
  }

  // Measures `p`; keeps it as the zero-shot plan where it is the first or faster. True when kept.
  bool keep_zero_shot(const Placement& p, ZeroShotRepair how) {
    const StepReport& r = measurer_.measure(p, 0);
    if (zero_shot_ && (!r.ok || (zero_shot_->ok && r.step_ms >= zero_shot_->step_ms))) return false;
    zero_shot_ = r;
    zero_shot_placement_ = measurer_.as_evaluated(p);
    zero_shot_how_ = how;
    return true;
  }

  // One REINFORCE step on the batch (the reward scale fixed by the first
  // valid step unless given), the policy's own best, and a progress report.
  void update(const std::vector<Decision>& decisions, const std::vector<StepReport>& reports, int it) {
    for (const auto& r : reports)
      if (r.ok && r.step_ms < own_best_ms_) own_best_ms_ = r.step_ms, own_last_improvement_ = it;
    if (!reinforce_) {
      if (!(reference_ms_ > 0))
        for (const auto& r : reports)
          if (r.ok && (!(reference_ms_ > 0) || r.step_ms < reference_ms_)) reference_ms_ = r.step_ms;
      reinforce_.emplace(*policy_, opt_.reinforce, reference_ms_ > 0 ? reference_ms_ : 1.0);
    }
    reinforce_->step(decisions, reports, fraction_done(it));
    double mean_reward = 0;
    for (const auto& r : reports) mean_reward += reinforce_->reward(r);
    mean_reward /= std::max<size_t>(1, reports.size());
    if (progress_)
      progress_({it, total_, measurer_.found() ? measurer_.best_report().step_ms : 0.0, mean_reward,
                 measurer_.elapsed_s()});
  }

  // A policy that has not improved its own best for `restart_after`
  // iterations (or the overall best for twice that) has converged: score its
  // greedy placement, then start a fresh policy (another seed and prior) to
  // escape the local optimum, or (restart_around_best: every fourth restart,
  // and every one in the search's last third) one that imitates the best so
  // far, to search near it (and every eighth from restart 6, takes_turns:
  // the devices taking turns); the measurer keeps the best. In the last third a
  // fresh policy has little time left to overtake the best, and searching
  // beside it pays more (docs/placer.md, "The last third searches around the best").
  bool maybe_restart(int it) {
    if (!restarts_left()) return false;
    const bool own_stalled = it - std::max(own_last_improvement_, last_restart_) >= opt_.restart_after;
    const bool all_stalled = it - std::max(measurer_.last_improvement(), last_restart_) >= 2 * opt_.restart_after;
    if (!own_stalled && !all_stalled) return false;
    measure_decision(policy_->greedy(), it);
    ++restarts_;
    last_restart_ = it;
    own_best_ms_ = std::numeric_limits<double>::infinity();
    PolicyConfig next = config_;
    next.seed = config_.seed + 7919ULL * restarts_;
    use_trained_inputs(next, false);  // fresh networks: the restarts' priors are depths
    // Data-parallel plans are few (a set of devices) and the first policy
    // has weighed them; restarted policies search the pipelines, so a
    // replicated plan found early cannot hold every restart in its basin.
    next.offer_data_parallel = false;
    const bool around_best = opt_.restart_around_best &&
                             (restarts_ % 4 == 0 || fraction_done(it) >= kLastThird) && measurer_.found() &&
                             !measurer_.best().is_data_parallel();
    // The plan this restart imitates and searches beside, if any (a
    // prior's cuts would hold the imitation off its devices).
    std::optional<Placement> start;
    if (around_best)
      start = measurer_.best();
    else if (opt_.vary_prior_on_restart && takes_turns(restarts_) && config_.num_devices > 1)
      start = devices_taking_turns(config_.totals, config_.devices, config_.device_allowed, kTurns,
                                   turn_micro_batches(), opt_.schedule);
    else if (opt_.vary_prior_on_restart && restarts_ == kReplicatedStagesRestart && config_.num_devices > 1 &&
             config_.max_replicas > 0)
      start = fastest_of(two_replicated_stages(config_.totals, config_.devices, config_.device_allowed,
                                               turn_micro_batches(), opt_.schedule),
                         it);
    if (!start && opt_.vary_prior_on_restart) vary_prior(next, restarts_, config_.seed, rng_, graph_);
    if (start) room_for(*start, next);
    reinforce_.reset();
    policy_ = std::make_unique<Policy>(features_, consumers_, next);
    if (start) measurer_.measure(imitate(*start, next.num_groups).greedy, it);
    if (restarts_ == 1 && opt_.restart_from) {
      evaluations_before_imitation_ = measurer_.evaluations();
      if (measurer_.found()) explored_best_ = {measurer_.best(), measurer_.best_report().step_ms};
      const Imitation learned = imitate(*opt_.restart_from, config_.num_groups);
      measurer_.measure(learned.greedy, it);
      if (!learned.exact) measurer_.measure(learned.target, it);
    }
    return true;
  }

  // Trains the policy towards `plan` until its greedy decision is the plan
  // (at most kImitationRounds rounds) and returns that greedy placement: one
  // round left resnet50's last cut on a random six-device cluster 10 layers
  // off the annealed plan it imitated, 2.4% slower, and the search never
  // found its way back.
  // Where the rounds do not get there (gpt2_medium's 202 layers on
  // edge_uplinks: the greedy partition still moved from round to round, and
  // PipeDream's 1F1B plan puts a group on the 512 MB device where it fits
  // only with the two micro-batches 1F1B keeps in flight there, more than the
  // allocation's memory mask counts for a GPipe proposal), the restart also
  // proposes the plan itself: the search after it starts from the best
  // classical plan either way.
  struct Imitation {
    Placement greedy, target;
    bool exact = false;
  };
  Imitation imitate(const Placement& plan, int num_groups) {
    const Decision target = placement_to_decision(plan, config_.micro_batch_choices, num_groups);
    Imitation out;
    out.target = to_placement(target);
    const std::string wanted = placement_key(out.target);
    for (int round = 0; round < kImitationRounds && !out.exact; ++round) {
      policy_->imitate(target, kImitationSteps, kImitationRate);
      out.greedy = to_placement(policy_->greedy());
      out.exact = placement_key(out.greedy) == wanted;
    }
    return out;
  }

  // Nothing improved for `patience` iterations and no restart is left.
  bool out_of_patience(int it) const {
    return it - std::max(measurer_.last_improvement(), last_restart_) >= patience_ && !restarts_left();
  }

  bool restarts_left() const { return opt_.restart_after > 0 && restarts_ < max_restarts_; }

  // The fastest of `plans` (each measured, within the time budget), if any runs.
  std::optional<Placement> fastest_of(const std::vector<Placement>& plans, int it) {
    std::optional<Placement> best;
    double best_ms = std::numeric_limits<double>::infinity();
    for (const Placement& p : plans) {
      if (out_of_time()) break;
      const StepReport& r = measurer_.measure(p, it);
      if (r.ok && r.step_ms < best_ms) best_ms = r.step_ms, best = p;
    }
    return best;
  }

  // The devices taking turns in other numbers (turn_variants: the m fastest,
  // 1-6 turns each), measured once the policy is done, so that its best may be
  // one of them: resnet50 at batch 4 on lan446, the four fastest of six
  // taking six turns each, 0.871-0.893 -> 0.831 of the best row in seeds 1-3.
  // Not at restart 6, where the best so far became one early and the
  // restarts around the best then stayed by it: a loss as often as a gain
  // (imitating the fastest: resnet50 at batch 32 on mixed_generations seed 6,
  // 0.953 -> 0.999; docs/placer.md, "Devices taking turns in other numbers").
  // Within the time budget, as the search's own evaluations. Then the
  // fastest one's cuts are searched (descend_stage_cuts, from steps of half a
  // turn): a turn's share of the compute leaves out what its cut hands on
  // (resnet50 at batch 8 on lan442, seeds 1-2: three devices taking six
  // turns, 0.923 -> 0.901 of the best row).
  void search_turn_variants() {
    if (!opt_.vary_prior_on_restart || config_.num_devices < 2) return;
    const std::optional<Placement> fastest =
        fastest_of(turn_variants(config_.totals, config_.devices, config_.device_allowed,
                                 turn_micro_batches(), opt_.schedule),
                   iterations_);
    if (!fastest) return;
    descend_stage_cuts(stage_plan_of_runs(*fastest), opt_.schedule, fastest->source);
  }

  // The best plan's cuts searched (descend_stage_cuts), where its groups are
  // runs of layers: the policy draws its cuts from a distribution, which
  // rarely lands where the step is least (inception_v3 at batch 4 on
  // mixed_speeds_lan seed 3: 53 groups, 0.909 -> 0.876 of the best row).
  // After the turns and the splits, which may have found it.
  void search_best_cuts() {
    if (!measurer_.found() || measurer_.best().is_data_parallel()) return;
    const Placement best = measurer_.best();
    const StagePlan runs = stage_plan_of_runs(best);
    if (runs.num_stages() > 1 && runs.num_stages() == best.num_groups())
      descend_stage_cuts(runs, best.schedule, best.source);
  }

  // The cuts of `plan` descended (descend_cuts) from steps of half a stage's layers.
  void descend_stage_cuts(const StagePlan& plan, Schedule schedule, const std::string& source) {
    const int L = static_cast<int>(config_.totals.gflops.size());
    descend_cuts(plan, std::max(1, L / (2 * plan.num_stages())), schedule, source);
  }

  // Two stages on each speed-order split of the devices (speed_order_splits),
  // at the smallest micro-batch choice that gives each replica one and is
  // no fewer than the best pipeline's, the cut searched (search_cut).
  // Measured once the policy is done, as the turn variants: the cut that a
  // split's step is least at is where the policy's draws rarely land (vgg16
  // at batch 4 on lan444: the four fastest devices on the first 24 layers, the
  // next two on the last 16, 0.900 of the best row, which two seeds of three
  // missed, 0.939).
  void search_split_cuts() {
    const int L = static_cast<int>(config_.totals.gflops.size());
    if (L < 2 || config_.max_replicas == 0) return;
    const std::vector<double> at = compute_positions(config_.totals, L);
    const std::vector<int>& choices = config_.micro_batch_choices;
    for (const auto& stage : speed_order_splits(config_.devices, config_.device_allowed)) {
      const int replicas = static_cast<int>(std::max(stage[0].size(), stage[1].size()));
      auto fits = std::lower_bound(choices.begin(), choices.end(), std::max(replicas, turn_micro_batches()));
      if (fits != choices.end()) search_cut(at, stage, *fits);
    }
  }

  // The cut of two stages on `stage` (two_stage_plan) whose step is least, by
  // descent (descend_cuts) from the boundary nearest each tenth of the compute
  // that is fastest, in steps of L/16 layers, halving.
  void search_cut(const std::vector<double>& at, const std::array<std::vector<int>, 2>& stage,
                  int micro_batches) {
    const int L = static_cast<int>(at.size());
    int best_cut = -1;
    double best_ms = std::numeric_limits<double>::infinity();
    for (int tenth = 1; tenth <= 9; ++tenth) {
      const int cut = nearest_boundary(at, tenth / 10.0);
      const double ms = step_of(two_stage_plan(L, stage, cut, micro_batches, opt_.schedule));
      if (ms < best_ms) best_ms = ms, best_cut = cut;
    }
    if (best_cut >= 0)
      descend_cuts(two_stages(stage, best_cut, micro_batches), std::max(1, L / 16), opt_.schedule, "policy");
  }

  // A plan's step, infinite where it fails (out of memory) or the search is out of time.
  double step_of(const Placement& p) {
    if (out_of_time()) return std::numeric_limits<double>::infinity();
    const StepReport& r = measurer_.measure(p, iterations_);
    return r.ok ? r.step_ms : std::numeric_limits<double>::infinity();
  }

  // Coordinate descent on the cuts between `plan`'s stages, the stages keeping
  // their devices: each cut moved `step` layers either way, between its
  // neighbours, while the step time falls; steps from `first_step`, halving.
  void descend_cuts(StagePlan plan, int first_step, Schedule schedule, const std::string& source) {
    const int L = static_cast<int>(config_.totals.gflops.size());
    auto step_at = [&](const StagePlan& p) { return step_of(tapp::to_placement(p, L, schedule, source)); };
    double best_ms = step_at(plan);
    const size_t S = plan.stage_begin.size();
    for (int step = first_step; step >= 1; step /= 2)
      for (bool moved = true; moved;) {
        moved = false;
        for (size_t k = 1; k < S; ++k) {
          const int low = plan.stage_begin[k - 1] + 1, high = (k + 1 == S ? L : plan.stage_begin[k + 1]) - 1;
          for (int to : {plan.stage_begin[k] - step, plan.stage_begin[k] + step}) {
            if (to < low || to > high) continue;
            StagePlan tried = plan;
            tried.stage_begin[k] = to;
            const double ms = step_at(tried);
            if (ms < best_ms) best_ms = ms, plan = std::move(tried), moved = true;
          }
        }
      }
  }

  // The devices taking turns pipeline as many micro-batches as the best
  // pipeline so far (the search's largest choice before one is found).
  int turn_micro_batches() const {
    if (measurer_.found() && !measurer_.best().is_data_parallel()) return measurer_.best().micro_batches;
    return config_.micro_batch_choices.back();
  }

  // The policy's odds behind its zero-shot decision, per non-empty group by
  // first layer (as decision_to_placement numbers a pipeline's groups).
  void note_zero_shot_odds(const Decision& decided) {
    ZeroShotOdds& odds = zero_shot_odds_;
    odds = {};
    odds.micro_batch_choices = config_.micro_batch_choices;
    odds.micro_batches = policy_->micro_batch_probs(decided.layer_group);
    odds.stages = policy_->stage_count_probs();
    const auto devices = policy_->allocation_probs(decided.layer_group);
    const auto replicas = policy_->replica_probs(decided.layer_group);
    std::vector<bool> seen(devices.size(), false);
    for (int g : decided.layer_group) {
      if (seen[g]) continue;
      seen[g] = true;
      odds.devices.push_back(devices[g]);
      if (!replicas.empty()) odds.replicas.push_back(replicas[g]);
    }
  }

  // What the policy found by itself, before any refinement.
  void keep_policy_result(SearchResult& r) const {
    r.iterations = iterations_;
    r.restarts = restarts_;
    r.evaluations_before_imitation = evaluations_before_imitation_;
    r.zero_shot_report = zero_shot_;
    r.zero_shot = zero_shot_placement_;
    r.zero_shot_how = zero_shot_how_;
    r.zero_shot_odds = zero_shot_odds_;
    r.climbed_step_ms = climbed_ms_;
    r.policy_found = measurer_.found();
    if (r.policy_found) {
      r.policy_best = measurer_.best();
      r.policy_best_report = measurer_.best_report();
    }
    r.policy_evaluations = measurer_.evaluations();
    r.policy_failures = measurer_.failures();
    r.policy_moved = measurer_.moved();
    r.policy_elapsed_s = measurer_.elapsed_s();
  }

  RefineOptions refine_options(int budget) const {
    RefineOptions ro;
    ro.budget = budget;
    ro.seed = opt_.seed;
    ro.num_devices = config_.num_devices;
    ro.micro_batch_choices = config_.micro_batch_choices;
    ro.replicas = opt_.replicate_stages;
    ro.branches = spread_.forks;
    return ro;
  }

  void refine_best(const SearchResult& r) {
    RefineOptions ro = refine_options(opt_.refine_budget);
    if (explored_best_ && placement_key(explored_best_->first) != placement_key(measurer_.best()))
      ro.also_from.push_back(*explored_best_);
    refine(measurer_, ro, iterations_, cancel_);
    if (measurer_.found() && r.policy_found && measurer_.best_report().step_ms < r.policy_best_report.step_ms)
      measurer_.relabel_best("policy+refine");
  }

  void keep_final_result(SearchResult& r) const {
    r.found = measurer_.found();
    if (r.found) {
      r.best = measurer_.best();
      r.best_report = measurer_.best_report();
    }
    r.evaluations = measurer_.evaluations();
    r.failures = measurer_.failures();
    r.moved = measurer_.moved();
    r.trace = measurer_.trace();
    r.elapsed_s = measurer_.elapsed_s();
  }

  const LayerGraph& graph_;
  const Cluster& cluster_;
  const SearchOptions& opt_;
  const std::function<void(const SearchProgress&)>& progress_;
  const std::atomic<bool>* cancel_;
  Measurer measurer_;
  OpDictionary dictionary_;
  FeatureMatrix features_;
  std::vector<std::vector<int>> consumers_;
  PolicyConfig config_;
  BranchSpread spread_;
  std::unique_ptr<Policy> policy_;
  std::optional<Reinforce> reinforce_;
  std::mt19937_64 rng_;
  const int total_, patience_, max_restarts_;
  double reference_ms_;
  int iterations_ = 0, restarts_ = 0, last_restart_ = 0;
  int64_t evaluations_before_imitation_ = 0;
  // The best plan found before the first restart imitated `restart_from`: a second start for the refinement.
  std::optional<std::pair<Placement, double>> explored_best_;
  std::optional<StepReport> zero_shot_;
  Placement zero_shot_placement_;
  ZeroShotRepair zero_shot_how_;
  ZeroShotOdds zero_shot_odds_;
  std::optional<double> climbed_ms_;
  // The current policy's own best since its (re)start: a restarted policy is
  // judged by its own progress, not by whether it already beats the best of
  // the policies before it.
  double own_best_ms_ = std::numeric_limits<double>::infinity();
  int own_last_improvement_ = 0;
};

}  // namespace

// The policy's configuration for this model and cluster: as many groups as
// devices (at most one per layer), the micro-batch counts the batch allows,
// the devices that can hold a layer at all.
PolicyConfig search_policy_config(const LayerGraph& graph, const Cluster& cluster, const SearchOptions& opt) {
  PolicyConfig pc;
  pc.num_devices = cluster.num_devices();
  pc.num_groups = opt.num_groups > 0 ? opt.num_groups : cluster.num_devices();
  pc.num_groups = std::max(1, std::min<int>(pc.num_groups, static_cast<int>(graph.layers.size())));
  // BatchNorm in training needs more than one value per channel: a model with
  // a BatchNorm on a 1x1 feature map cannot run micro-batches of one sample.
  int64_t max_micro = opt.max_micro_batches;
  for (const Layer& l : graph.layers)
    if (l.op == "batchnorm2d" && l.output_shape.size() == 3 && l.output_shape[1] * l.output_shape[2] == 1)
      max_micro = std::min<int64_t>(max_micro, std::max<int64_t>(1, opt.batch_size / 2));
  pc.micro_batch_choices = micro_batch_choices(opt.batch_size, static_cast<int>(max_micro));
  const StageMemory memory(graph, opt.optimizer);
  pc.device_allowed = devices_that_fit(memory, graph, cluster, opt.batch_size);
  pc.hidden = opt.hidden;
  pc.partition = opt.partition;
  pc.max_replicas = opt.replicate_stages ? std::max(0, cluster.num_devices() - 1) : 0;
  pc.memory = policy_memory(graph, cluster, opt.batch_size, opt.schedule, opt.optimizer);
  pc.distinct_devices = opt.distinct_devices;
  if (opt.data_parallel && cluster.num_devices() > 1) {
    pc.replica_fits = data_parallel_fits(graph, cluster, opt.batch_size, opt.optimizer);
    pc.offer_data_parallel = some_replica_set_fits(pc.replica_fits);
  }
  pc.learning_rate = opt.learning_rate;
  pc.seed = opt.seed;
  pc.totals = layer_totals(graph);
  if (opt.layer_ms.size() == graph.layers.size()) pc.totals.time_ms = opt.layer_ms;
  use_trained_inputs(pc, opt.initial_policy != nullptr);
  pc.devices = device_traits(cluster);
  pc.batch_size = opt.batch_size;
  if (opt.spread_branches) pc.forks = parallel_branches(graph);
  return pc;
}

std::vector<double> layer_compute_ms(const LayerGraph& graph, const Cluster& cluster, const CostModel& cost,
                                     int64_t batch_size) {
  const int64_t samples = std::max<int64_t>(1, batch_size / std::max(1, cluster.num_devices()));
  std::vector<double> ms(graph.layers.size(), 0.0);
  for (int i = 0; i < static_cast<int>(ms.size()); ++i)
    for (int d = 0; d < cluster.num_devices(); ++d)
      ms[i] += cost.forward_ms(d, i, i, samples) + cost.backward_ms(d, i, i, samples);
  return ms;
}

SearchResult search(const LayerGraph& graph, const Cluster& cluster, Evaluator& evaluator, const SearchOptions& opt,
                    const std::function<void(const SearchProgress&)>& progress, const std::atomic<bool>* cancel) {
  // One thread: the networks' matrices are small, and OpenBLAS's default pool
  // of every core spun (sched_yield) between their calls the whole search,
  // a third of the job's CPU time (inception_v3 on cluster_4hetero).
  ScopedComputeThreads one_thread(1);
  return SearchLoop(graph, cluster, evaluator, opt, progress, cancel).run();
}


}  // namespace tapp
