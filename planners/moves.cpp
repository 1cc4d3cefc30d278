// planners/moves.cpp — see moves.h.
#include "planners/moves.h"

#include <algorithm>
#include <numeric>

namespace tapp {

Placement to_placement(const StagePlan& plan, int num_layers, Schedule schedule, const std::string& source) {
  Placement p;
  p.layer_group.assign(num_layers, 0);
  const int S = plan.num_stages();
  for (int k = 0; k < S; ++k) {
    int end = k + 1 < S ? plan.stage_begin[k + 1] : num_layers;
    for (int i = plan.stage_begin[k]; i < end; ++i) p.layer_group[i] = k;
  }
  p.group_device = plan.stage_device;
  if (plan.max_replica_count() > 1) {
    p.group_replicas = plan.stage_replicas;
    p.group_replicas.resize(S);
  }
  p.micro_batches = plan.micro_batches;
  p.schedule = schedule;
  p.source = source;
  return p;
}

StagePlan stage_plan_of_runs(const Placement& p) {
  StagePlan plan;
  for (size_t i = 0; i < p.layer_group.size(); ++i)
    if (i == 0 || p.layer_group[i] != p.layer_group[i - 1]) {
      plan.stage_begin.push_back(static_cast<int>(i));
      plan.stage_device.push_back(p.group_device[p.layer_group[i]]);
      if (p.has_replicated_groups()) {
        plan.stage_replicas.resize(plan.stage_begin.size() - 1);
        plan.stage_replicas.push_back(p.group_replicas[p.layer_group[i]]);
      }
    }
  plan.micro_batches = p.micro_batches;
  return plan;
}

int StagePlan::max_replica_count() const {
  int r = 1;
  for (int k = 0; k < static_cast<int>(stage_replicas.size()); ++k) r = std::max(r, replica_count(k));
  return r;
}

std::vector<int> StagePlan::devices(int k) const {
  std::vector<int> out = {stage_device[k]};
  if (!stage_replicas.empty()) out.insert(out.end(), stage_replicas[k].begin(), stage_replicas[k].end());
  return out;
}

bool StagePlan::uses_device(int d) const {
  if (std::find(stage_device.begin(), stage_device.end(), d) != stage_device.end()) return true;
  for (const auto& r : stage_replicas)
    if (std::find(r.begin(), r.end(), d) != r.end()) return true;
  return false;
}

MoveSet MoveSet::wide_with_replicas(int num_layers) {
  MoveSet set = wide(num_layers);
  set.replicate = set.drop_replica = set.move_replica = true;
  return set;
}

MoveSet MoveSet::wide(int num_layers) {
  MoveSet set;
  set.shift_steps.clear();
  for (int step = 1; step == 1 || step <= num_layers / 4; step *= 2) set.shift_steps.push_back(step);
  return set;
}

MoveSet MoveSet::shifts_and_swaps() {
  MoveSet set;
  set.merge = set.split = set.relocate = set.micro_batches = false;
  return set;
}

StageMoves::StageMoves(int num_layers, int num_devices, std::vector<int> micro_batch_choices, bool replicas)
    : num_layers_(num_layers), num_devices_(num_devices), choices_(std::move(micro_batch_choices)), replicas_(replicas) {}

void StageMoves::insert_stage(StagePlan& plan, int k, int begin, int device) {
  plan.stage_begin.insert(plan.stage_begin.begin() + k, begin);
  plan.stage_device.insert(plan.stage_device.begin() + k, device);
  if (!plan.stage_replicas.empty()) plan.stage_replicas.insert(plan.stage_replicas.begin() + k, std::vector<int>{});
}

void StageMoves::erase_stage(StagePlan& plan, int k) {
  plan.stage_begin.erase(plan.stage_begin.begin() + k);
  plan.stage_device.erase(plan.stage_device.begin() + k);
  if (!plan.stage_replicas.empty()) plan.stage_replicas.erase(plan.stage_replicas.begin() + k);
}

bool StageMoves::step_micro_batches(const StagePlan& plan, int j, StagePlan& out) const {
  if (j < 0 || j >= static_cast<int>(choices_.size()) || choices_[j] < plan.max_replica_count()) return false;
  out = plan;
  out.micro_batches = choices_[j];
  return true;
}

bool StageMoves::move_replica(const StagePlan& plan, int from, int r, int to, StagePlan& out) {
  if (plan.micro_batches <= plan.replica_count(to)) return false;
  out = plan;
  auto& source = out.stage_replicas[from];
  const int device = source[r];
  source.erase(source.begin() + r);
  out.stage_replicas[to].push_back(device);
  return true;
}

int StageMoves::stage_end(const StagePlan& plan, int k) const {
  return k + 1 < plan.num_stages() ? plan.stage_begin[k + 1] : num_layers_;
}

std::vector<int> StageMoves::unused_devices(const StagePlan& plan) const {
  std::vector<int> unused;
  for (int d = 0; d < num_devices_; ++d)
    if (!plan.uses_device(d)) unused.push_back(d);
  return unused;
}

int StageMoves::choice_index(int micro_batches) const {
  auto it = std::find(choices_.begin(), choices_.end(), micro_batches);
  return it == choices_.end() ? -1 : static_cast<int>(it - choices_.begin());
}

std::vector<StagePlan> StageMoves::neighbours(const StagePlan& plan, const MoveSet& set) const {
  std::vector<StagePlan> out;
  const int S = plan.num_stages();
  for (int k = 1; k < S; ++k) {
    for (int step : set.shift_steps)
      for (int delta : {step, -step}) {
        const int moved = plan.stage_begin[k] + delta;
        if (moved <= plan.stage_begin[k - 1] || moved >= stage_end(plan, k)) continue;  // a stage would empty
        StagePlan n = plan;
        n.stage_begin[k] = moved;
        out.push_back(std::move(n));
      }
    if (set.merge) {
      StagePlan n = plan;
      erase_stage(n, k);
      out.push_back(std::move(n));
    }
  }
  const std::vector<int> unused = unused_devices(plan);
  if (set.split)
    for (int k = 0; k < S; ++k) {
      const int a = plan.stage_begin[k], b = stage_end(plan, k);
      if (b - a < 2) continue;
      for (int d : unused) {
        StagePlan n = plan;
        insert_stage(n, k + 1, (a + b) / 2, d);
        out.push_back(std::move(n));
      }
    }
  for (int a = 0; a < S; ++a) {
    if (set.swap)
      for (int b = a + 1; b < S; ++b) {
        StagePlan n = plan;
        std::swap(n.stage_device[a], n.stage_device[b]);
        out.push_back(std::move(n));
      }
    if (set.relocate)
      for (int d : unused) {
        StagePlan n = plan;
        n.stage_device[a] = d;
        out.push_back(std::move(n));
      }
  }
  if (set.micro_batches) {
    const int i = choice_index(plan.micro_batches);
    StagePlan n;
    for (int j : {i - 1, i + 1})
      if (i >= 0 && step_micro_batches(plan, j, n)) out.push_back(std::move(n));
  }
  if (set.replicate || set.drop_replica || set.move_replica)
    for (int k = 0; k < S; ++k) {
      if (set.replicate && plan.micro_batches > plan.replica_count(k))
        for (int d : unused) {
          StagePlan n = plan;
          n.stage_replicas.resize(S);
          n.stage_replicas[k].push_back(d);
          out.push_back(std::move(n));
        }
      if (set.drop_replica)
        for (int r = 0; r + 1 < plan.replica_count(k); ++r) {
          StagePlan n = plan;
          n.stage_replicas[k].erase(n.stage_replicas[k].begin() + r);
          out.push_back(std::move(n));
        }
      if (set.move_replica)
        for (int r = 0; r + 1 < plan.replica_count(k); ++r)
          for (int j = 0; j < S; ++j) {
            StagePlan n;
            if (j != k && move_replica(plan, k, r, j, n)) out.push_back(std::move(n));
          }
    }
  if (set.split_replica)
    for (int k = 0; k < S; ++k) {
      if (plan.replica_count(k) < 2 || stage_end(plan, k) - plan.stage_begin[k] < 2) continue;
      for (int r = 0; r < plan.replica_count(k); ++r)
        for (bool second_half : {true, false}) out.push_back(replica_split_off(plan, k, r, second_half));
    }
  if (set.join_replicas)
    for (int k = 1; k < S; ++k)
      if (plan.micro_batches >= plan.replica_count(k - 1) + plan.replica_count(k))
        out.push_back(stage_made_replica(plan, k, k - 1));
  if (set.stage_to_replica)
    for (int k = 0; k < S; ++k) {
      if (plan.replica_count(k) > 1) continue;
      const int layers_to = k > 0 ? k - 1 : 1;
      for (int j = 0; j < S; ++j)
        if (j != k && j != layers_to && plan.micro_batches > plan.replica_count(j))
          out.push_back(stage_made_replica(plan, k, j));
    }
  return out;
}

StagePlan StageMoves::stage_made_replica(const StagePlan& plan, int k, int j) {
  StagePlan n = plan;
  n.stage_replicas.resize(n.num_stages());
  const std::vector<int> moved = plan.devices(k);
  n.stage_replicas[j].insert(n.stage_replicas[j].end(), moved.begin(), moved.end());
  erase_stage(n, k);
  n.stage_begin[0] = 0;  // the first stage's layers went to its successor
  return n;
}

StagePlan StageMoves::replica_split_off(const StagePlan& plan, int k, int r, bool second_half) const {
  StagePlan n = plan;
  std::vector<int> devices = plan.devices(k);
  const int alone = devices[r];
  devices.erase(devices.begin() + r);
  n.stage_device[k] = devices.front();
  n.stage_replicas[k].assign(devices.begin() + 1, devices.end());
  const int middle = (plan.stage_begin[k] + stage_end(plan, k)) / 2;
  insert_stage(n, second_half ? k + 1 : k, middle, alone);
  if (!second_half) std::swap(n.stage_begin[k], n.stage_begin[k + 1]);
  return n;
}

StagePlan StageMoves::random_neighbour(const StagePlan& plan, std::mt19937_64& rng) const {
  const int L = num_layers_;
  StagePlan n = plan;
  const int S = n.num_stages();
  const std::vector<int> unused = unused_devices(n);
  for (int tries = 0; tries < 20; ++tries) {
    switch (rng() % (replicas_ ? 9 : 6)) {
      case 0:  // shift a boundary
        if (S > 1) {
          int k = 1 + static_cast<int>(rng() % (S - 1));
          // Mostly a layer or two; sometimes up to a tenth of the model.
          int span = (rng() % 4) ? 2 : std::max(2, L / 10);
          int delta = 1 + static_cast<int>(rng() % span);
          int nb = n.stage_begin[k] + ((rng() & 1) ? delta : -delta);
          nb = std::max(n.stage_begin[k - 1] + 1, std::min(stage_end(n, k) - 1, nb));
          if (nb != n.stage_begin[k]) {
            n.stage_begin[k] = nb;
            return n;
          }
        }
        break;
      case 1:  // swap two stages' devices
        if (S > 1) {
          int a = static_cast<int>(rng() % S), b = static_cast<int>(rng() % S);
          if (a != b) {
            std::swap(n.stage_device[a], n.stage_device[b]);
            return n;
          }
        }
        break;
      case 2:  // move a stage to an unused device
        if (!unused.empty()) {
          n.stage_device[rng() % S] = unused[rng() % unused.size()];
          return n;
        }
        break;
      case 3: {  // micro-batches up or down
        const int i = choice_index(n.micro_batches);
        const int j = i + ((rng() & 1) ? 1 : -1);
        if (i >= 0 && step_micro_batches(plan, j, n)) return n;
        break;
      }
      case 4: {  // split a stage onto an unused device
        if (unused.empty()) break;
        int k = static_cast<int>(rng() % S);
        int a = n.stage_begin[k], b = stage_end(n, k);
        if (b - a < 2) break;
        int cut = a + 1 + static_cast<int>(rng() % (b - a - 1));
        insert_stage(n, k + 1, cut, unused[rng() % unused.size()]);
        return n;
      }
      case 5:  // merge a stage into its predecessor
        if (S > 1) {
          int k = 1 + static_cast<int>(rng() % (S - 1));
          erase_stage(n, k);
          return n;
        }
        break;
      case 6: {  // replicate a stage onto an unused device
        if (unused.empty()) break;
        int k = static_cast<int>(rng() % S);
        if (n.micro_batches <= n.replica_count(k)) break;
        n.stage_replicas.resize(S);
        n.stage_replicas[k].push_back(unused[rng() % unused.size()]);
        return n;
      }
      case 7: {  // drop a replica
        int k = static_cast<int>(rng() % S);
        if (n.replica_count(k) < 2) break;
        auto& r = n.stage_replicas[k];
        r.erase(r.begin() + static_cast<int>(rng() % r.size()));
        return n;
      }
      case 8: {  // move a replica to another stage
        int k = static_cast<int>(rng() % S), j = static_cast<int>(rng() % S);
        if (j == k || n.replica_count(k) < 2) break;
        StagePlan moved;
        if (move_replica(n, k, static_cast<int>(rng() % (n.replica_count(k) - 1)), j, moved)) return moved;
        break;
      }
    }
  }
  return n;
}

StagePlan StageMoves::random_plan(std::mt19937_64& rng) const {
  const int L = num_layers_, D = num_devices_;
  const int S = 1 + static_cast<int>(rng() % std::min(D, L));
  StagePlan plan;
  // S - 1 distinct cuts among the L - 1 positions between layers.
  std::vector<int> cuts(L - 1);
  std::iota(cuts.begin(), cuts.end(), 1);
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(S - 1);
  cuts.push_back(0);
  std::sort(cuts.begin(), cuts.end());
  plan.stage_begin = cuts;
  std::vector<int> devs(D);
  std::iota(devs.begin(), devs.end(), 0);
  std::shuffle(devs.begin(), devs.end(), rng);
  plan.stage_device.assign(devs.begin(), devs.begin() + S);
  plan.micro_batches = choices_[rng() % choices_.size()];
  return plan;
}

}  // namespace tapp
