// placer/refine.cpp — see refine.h.
#include "placer/refine.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "placer/measurer.h"
#include "planners/moves.h"

namespace tapp {

namespace {

// Local moves around a data-parallel placement: drop a replica, add an unused
// device as one, or swap a replica for an unused device.
std::vector<Placement> replica_neighbours(const Placement& p, int num_devices) {
  std::vector<Placement> out;
  const int L = static_cast<int>(p.layer_group.size());
  std::vector<bool> used(num_devices, false);
  for (int d : p.group_device) used[d] = true;
  auto with = [&](std::vector<int> devices) {
    Placement q = Placement::replicas(L, devices, p.data_parallel);
    q.source = p.source;
    out.push_back(std::move(q));
  };
  for (size_t k = 0; k < p.group_device.size() && p.group_device.size() > 1; ++k) {
    auto fewer = p.group_device;
    fewer.erase(fewer.begin() + static_cast<long>(k));
    with(fewer);
  }
  for (int d = 0; d < num_devices; ++d) {
    if (used[d]) continue;
    auto more = p.group_device;
    more.push_back(d);
    with(more);
    for (size_t k = 0; k < p.group_device.size(); ++k) {
      auto other = p.group_device;
      other[k] = d;
      with(other);
    }
  }
  return out;
}

// `p` with `layers` in a new group on `device` (replicated groups' layers stay).
Placement with_layers_on(const Placement& p, const std::vector<int>& layers, int device) {
  Placement q = p;
  const int grp = q.add_group(device);
  for (int l : layers)
    if (p.replica_count(p.layer_group[l]) == 1) q.layer_group[l] = grp;
  return q;
}

bool all_on(const Placement& p, const std::vector<int>& layers, int device) {
  return std::all_of(layers.begin(), layers.end(), [&](int l) {
    return p.replica_count(p.layer_group[l]) > 1 || p.device_of_layer(l) == device;
  });
}

}  // namespace

std::vector<Placement> branch_neighbours(const Placement& p, const std::vector<ParallelBranches>& branches,
                                         int num_devices) {
  std::vector<Placement> out;
  if (p.is_data_parallel()) return out;
  for (const ParallelBranches& fork : branches) {
    for (const std::vector<int>& branch : fork.branches)
      for (int d = 0; d < num_devices; ++d)
        if (!all_on(p, branch, d)) out.push_back(with_layers_on(p, branch, d));
    for (int r = 0; r < num_devices && num_devices > 1; ++r) {
      Placement q = p;
      int moved = 0;  // a spread moving one branch only is a move above
      for (size_t k = 0; k < fork.branches.size(); ++k) {
        const int d = static_cast<int>((k + static_cast<size_t>(r)) % num_devices);
        if (all_on(q, fork.branches[k], d)) continue;
        q = with_layers_on(q, fork.branches[k], d);
        ++moved;
      }
      if (moved >= 2) out.push_back(std::move(q));
    }
  }
  for (Placement& q : out) {
    drop_unused_groups(q);
    q.source = p.source;
  }
  return out;
}

namespace {

// Per branch of `fork`, the slot it runs in, heaviest first. in_turn: the
// heaviest in slot 0 (the group's own), each next one in the next helper
// slot, in turn. by_speed: each where it would finish first (its slot's load
// so far over the slot's slowest copy's speed), slot 0 on a tie (no transfer).
std::vector<int> slots_of_branches(const ParallelBranches& fork,
                                   const std::vector<std::vector<int>>& slot_copies, const BranchSpread& how,
                                   SpreadRule rule) {
  std::vector<std::pair<double, int>> by_weight;  // heaviest first, then in order
  for (size_t k = 0; k < fork.branches.size(); ++k) {
    double w = 0;
    for (int l : fork.branches[k]) w += how.layer_weight[l];
    by_weight.emplace_back(-w, static_cast<int>(k));
  }
  std::sort(by_weight.begin(), by_weight.end());
  std::vector<int> slot_of_branch(fork.branches.size(), 0);
  if (rule == SpreadRule::in_turn) {
    for (size_t r = 1; r < by_weight.size(); ++r)
      slot_of_branch[by_weight[r].second] = 1 + static_cast<int>((r - 1) % (slot_copies.size() - 1));
    return slot_of_branch;
  }
  std::vector<double> slot_speed;
  for (const std::vector<int>& copies : slot_copies) {
    double slowest = std::numeric_limits<double>::infinity();
    for (int d : copies) slowest = std::min(slowest, how.device_speed[d]);
    slot_speed.push_back(slowest);
  }
  std::vector<double> load(slot_copies.size(), 0.0);
  for (const auto& [minus_w, k] : by_weight) {
    const double w = -minus_w;
    size_t best = 0;
    for (size_t s = 1; s < load.size(); ++s)
      if ((load[s] + w) / slot_speed[s] < (load[best] + w) / slot_speed[best]) best = s;
    load[best] += w;
    slot_of_branch[k] = static_cast<int>(best);
  }
  return slot_of_branch;
}

}  // namespace

Placement spread_branches(const Placement& p, const std::vector<bool>& spread, const BranchSpread& how,
                          SpreadRule rule) {
  const int G = p.num_groups();
  std::vector<int> fastest_first(how.device_speed.size());
  std::iota(fastest_first.begin(), fastest_first.end(), 0);
  std::stable_sort(fastest_first.begin(), fastest_first.end(),
                   [&](int a, int b) { return how.device_speed[a] > how.device_speed[b]; });
  std::vector<bool> held(how.device_speed.size(), false);  // devices some group holds (a copy included)
  for (int g = 0; g < G; ++g)
    for (int d : p.devices_of_group(g)) held[d] = true;
  // Per spreading group and copy its helpers: the free devices dealt out in
  // turn (fastest first) to every copy of every spreading group; then the
  // devices other groups hold, dealt out to the group's own copies in turn.
  std::vector<std::vector<std::vector<int>>> helpers(G);
  std::vector<std::pair<int, int>> slots;  // (group, copy)
  for (int g = 0; g < G && g < static_cast<int>(spread.size()); ++g)
    if (spread[g])
      for (int j = 0; j < p.replica_count(g); ++j) slots.emplace_back(g, j);
  if (slots.empty()) return p;
  for (const auto& [g, j] : slots) helpers[g].resize(p.replica_count(g));
  size_t dealt = 0;
  for (int d : fastest_first)
    if (!held[d]) {
      const auto& [g, j] = slots[dealt++ % slots.size()];
      helpers[g][j].push_back(d);
    }
  for (int g = 0; g < G; ++g) {
    const std::vector<int> own = p.devices_of_group(g);
    size_t next = 0;
    for (int d : fastest_first)
      if (!helpers[g].empty() && held[d] && std::find(own.begin(), own.end(), d) == own.end())
        helpers[g][next++ % helpers[g].size()].push_back(d);
  }
  // A group spreads only where each of its copies has a helper. A fork's
  // branches go to slots (slots_of_branches): slot 0 the group's own copies,
  // slot s each copy's helper s - 1; the branches of slot s go to a new group
  // whose copy j is copy j's helper, so micro-batch m's towers run beside the
  // copy that runs m.
  auto ready = [&](int g) {
    return !helpers[g].empty() && std::all_of(helpers[g].begin(), helpers[g].end(),
                                              [](const std::vector<int>& h) { return !h.empty(); });
  };
  // A replicated group must stay one stage (core's rule): where its fork's
  // branches leave, the layers after the fork go on in a new group on the
  // same copies. `origin`: per group of q, the group of p it continues (-1: a branch).
  Placement q = p;
  std::vector<int> origin(G);
  std::iota(origin.begin(), origin.end(), 0);
  auto add_group = [&](const std::vector<int>& copies, int from, bool recompute) {
    const int added = q.add_group(copies[0], recompute);
    if (copies.size() > 1) {
      if (q.group_replicas.empty()) q.group_replicas.assign(q.num_groups(), {});
      q.group_replicas[added].assign(copies.begin() + 1, copies.end());
    }
    origin.push_back(from);
    return added;
  };
  for (const ParallelBranches& fork : how.forks) {
    const int at = group_holding(fork, q.layer_group);
    if (at < 0 || origin[at] < 0 || !ready(origin[at])) continue;
    const int g = origin[at];
    std::vector<std::vector<int>> slot_copies = {q.devices_of_group(at)};
    const size_t helper_slots =
        std::min_element(helpers[g].begin(), helpers[g].end(), [](const auto& a, const auto& b) {
          return a.size() < b.size();
        })->size();
    for (size_t s = 0; s < helper_slots; ++s) {
      slot_copies.emplace_back();
      for (const std::vector<int>& h : helpers[g]) slot_copies.back().push_back(h[s]);
    }
    const std::vector<int> slot_of_branch = slots_of_branches(fork, slot_copies, how, rule);
    std::vector<int> slot_group(slot_copies.size(), at);
    for (size_t k = 0; k < fork.branches.size(); ++k) {
      const int s = slot_of_branch[k];
      if (s == 0) continue;
      if (slot_group[s] == at) slot_group[s] = add_group(slot_copies[s], -1, q.recomputes(at));
      for (int l : fork.branches[k]) q.layer_group[l] = slot_group[s];
    }
    const bool moved =
        std::any_of(slot_of_branch.begin(), slot_of_branch.end(), [](int s) { return s != 0; });
    if (moved && q.replica_count(at) > 1) {
      const int next = add_group(q.devices_of_group(at), g, q.recomputes(at));
      for (int l = fork.fork + 1; l < static_cast<int>(q.layer_group.size()); ++l)
        if (q.layer_group[l] == at) q.layer_group[l] = next;
    }
  }
  drop_unused_groups(q);
  return q;
}

std::vector<Placement> neighbours(const Placement& p, int num_devices, const std::vector<int>& choices,
                                  bool replicas, bool split_and_join_replicas) {
  if (p.is_data_parallel()) return replica_neighbours(p, num_devices);
  const int L = static_cast<int>(p.layer_group.size());
  const StageMoves moves(L, num_devices, choices, replicas);
  MoveSet set = replicas ? MoveSet::wide_with_replicas(L) : MoveSet::wide(L);
  set.split_replica = set.join_replicas = set.stage_to_replica = split_and_join_replicas;
  std::vector<Placement> out;
  for (const StagePlan& n : moves.neighbours(stage_plan_of_runs(p), set))
    out.push_back(to_placement(n, L, p.schedule, "policy"));
  return out;
}

namespace {

constexpr size_t kBranchMovesPerStep = 32;
// look_past_unused: first moves followed, second moves measured.
constexpr size_t kPastUnusedFirsts = 4;
constexpr int64_t kPastUnusedMeasured = 4;

// How many of the cluster's devices a pipeline's runs (and their replicas) use.
int devices_in_use(const Placement& p, int num_devices) {
  const StagePlan plan = stage_plan_of_runs(p);
  int used = 0;
  for (int d = 0; d < num_devices; ++d) used += plan.uses_device(d);
  return used;
}

// First-improvement hill climbing and kicks, within a budget of evaluations.
class IteratedLocalSearch {
 public:
  IteratedLocalSearch(Measurer& m, const RefineOptions& o, int iteration, const std::atomic<bool>* cancel)
      : m_(m), o_(o), iteration_(iteration), cancel_(cancel), stop_at_(m.evaluations() + o.budget),
        rng_(o.seed * 0x9E3779B97F4A7C15ULL + 101) {}

  void run() {
    for (const auto& [start, ms] : o_.also_from) climb(start, ms);
    // A data-parallel best is climbed among replica sets first (few moves).
    if (m_.best().is_data_parallel()) climb(m_.best(), m_.best_report().step_ms);
    if (m_.best_pipeline()) climb(m_.best_pipeline()->first, m_.best_pipeline()->second);
    while (o_.kicks && !spent()) {
      Placement kicked = kick(m_.best_pipeline() ? m_.best_pipeline()->first : m_.best());
      const StepReport& r = m_.measure(kicked, iteration_);
      if (r.ok) climb(kicked, r.step_ms);
    }
  }

 private:
  bool spent() {
    return m_.evaluations() >= stop_at_ || ++attempts_ > 20LL * o_.budget || (cancel_ && cancel_->load()) ||
           (o_.out_of_time && o_.out_of_time());
  }
  std::vector<Placement> moves(const Placement& p) {
    auto nb = neighbours(p, o_.num_devices, o_.micro_batch_choices, o_.replicas, o_.split_and_join_replicas);
    // A random few of the branch moves per step: a transformer has a q / k / v
    // fork per layer, and all its branch moves would crowd out the pipeline's.
    auto branch = branch_neighbours(p, o_.branches, o_.num_devices);
    std::shuffle(branch.begin(), branch.end(), rng_);
    const size_t keep = std::min(branch.size(), std::max<size_t>(kBranchMovesPerStep, nb.size() / 4));
    for (size_t k = 0; k < keep; ++k) nb.push_back(std::move(branch[k]));
    std::shuffle(nb.begin(), nb.end(), rng_);
    if (o_.arrange_moves) o_.arrange_moves(nb);
    return nb;
  }
  // Takes the first improving move until none improves (or the budget is spent).
  void climb(Placement current, double current_ms) {
    for (;;) {
      if (first_improvement(moves(current), current, current_ms)) continue;
      if (!o_.look_past_unused || spent() ||
          !first_improvement(past_unused(current), current, current_ms, kPastUnusedMeasured))
        return;
    }
  }
  // Measures `candidates` in order, up to `most` new evaluations; the first
  // that beats `current` replaces it (true).
  bool first_improvement(const std::vector<Placement>& candidates, Placement& current, double& current_ms,
                         int64_t most = std::numeric_limits<int64_t>::max()) {
    const int64_t before = m_.evaluations();
    for (const Placement& q : candidates) {
      if (spent() || m_.evaluations() - before >= most) return false;
      const StepReport& r = m_.measure(q, iteration_);
      if (r.ok && r.step_ms < current_ms) {
        current = q, current_ms = r.step_ms;
        return true;
      }
    }
    return false;
  }
  // Where `p` leaves a device unused: the second moves after the model's
  // best few first moves that use more devices, in the model's order.
  std::vector<Placement> past_unused(const Placement& p) {
    if (p.is_data_parallel() || !o_.arrange_moves) return {};
    const int used = devices_in_use(p, o_.num_devices);
    if (used >= o_.num_devices) return {};
    const auto pipeline_moves = [this](const Placement& q) {
      return neighbours(q, o_.num_devices, o_.micro_batch_choices, o_.replicas, o_.split_and_join_replicas);
    };
    std::vector<Placement> firsts;
    for (Placement& q : pipeline_moves(p))
      if (devices_in_use(q, o_.num_devices) > used) firsts.push_back(std::move(q));
    o_.arrange_moves(firsts);
    if (firsts.size() > kPastUnusedFirsts) firsts.resize(kPastUnusedFirsts);
    std::vector<Placement> seconds;
    for (const Placement& q : firsts)
      for (Placement& r : pipeline_moves(q)) seconds.push_back(std::move(r));
    o_.arrange_moves(seconds);
    return seconds;
  }
  // Two random moves away from `from`.
  Placement kick(Placement from) {
    for (int k = 0; k < 2; ++k) {
      auto nb = moves(from);
      if (!nb.empty()) from = nb.front();
    }
    return from;
  }

  Measurer& m_;
  const RefineOptions& o_;
  const int iteration_;
  const std::atomic<bool>* cancel_;
  const int64_t stop_at_;
  std::mt19937_64 rng_;
  int64_t attempts_ = 0;
};

}  // namespace

void refine(Measurer& measurer, const RefineOptions& options, int iteration, const std::atomic<bool>* cancel) {
  if (options.budget <= 0 || !measurer.found() || (cancel && cancel->load())) return;
  IteratedLocalSearch(measurer, options, iteration, cancel).run();
}

}  // namespace tapp
