// placer/refine.cpp — see refine.h.
#include "placer/refine.h"

#include <algorithm>
#include <random>

#include "placer/measurer.h"
#include "placer/search.h"

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
    Placement q = Placement::replicas(L, devices);
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

// Local moves around a placement whose groups are stages in layer order:
// shift a stage boundary by 1, 2, 4, ... layers (up to a quarter of the
// model), merge two adjacent stages, split a stage onto an unused device, swap
// two stages' devices, move a stage to an unused device, halve or double the
// micro-batches (replica moves for a data-parallel placement).
}  // namespace

std::vector<Placement> neighbours(const Placement& p, int num_devices, const std::vector<int>& choices) {
  if (p.data_parallel) return replica_neighbours(p, num_devices);
  std::vector<Placement> out;
  const int L = static_cast<int>(p.layer_group.size());
  // q's groups renumbered as stages in layer order (emptied groups dropped).
  auto as_stages = [](const Placement& q) {
    Placement c = decision_to_placement(Decision{q.layer_group, q.group_device, 0}, {q.micro_batches}, q.schedule);
    c.source = "policy";
    return c;
  };
  for (int i = 1; i < L; ++i) {
    if (p.layer_group[i] == p.layer_group[i - 1]) continue;  // i starts a new group
    for (int step = 1; step == 1 || step <= L / 4; step *= 2)
      for (int delta : {step, -step}) {
        int lo = delta > 0 ? i : i + delta, hi = delta > 0 ? i + delta : i;  // layers [lo, hi) change side
        if (lo < 0 || hi > L) continue;
        Placement q = p;
        const int g = delta > 0 ? p.layer_group[i - 1] : p.layer_group[i];
        for (int k = lo; k < hi; ++k) q.layer_group[k] = g;
        Placement c = as_stages(q);
        if (c.num_groups() == p.num_groups()) out.push_back(std::move(c));
      }
    // Merge the stage that starts at i into the one before it.
    Placement q = p;
    for (int k = i; k < L && p.layer_group[k] == p.layer_group[i]; ++k) q.layer_group[k] = p.layer_group[i - 1];
    out.push_back(as_stages(q));
  }
  std::vector<bool> used(num_devices, false);
  for (int d : p.group_device) used[d] = true;
  // Split a stage at its middle layer, the second half on an unused device.
  for (int i = 0; i < L;) {
    int end = i;
    while (end < L && p.layer_group[end] == p.layer_group[i]) ++end;
    for (int d = 0; d < num_devices && end - i >= 2; ++d)
      if (!used[d]) {
        Placement q = p;
        q.group_device.push_back(d);
        for (int k = (i + end) / 2; k < end; ++k) q.layer_group[k] = p.num_groups();
        out.push_back(as_stages(q));
      }
    i = end;
  }
  for (int a = 0; a < p.num_groups(); ++a) {
    for (int b = a + 1; b < p.num_groups(); ++b) {
      Placement q = p;
      std::swap(q.group_device[a], q.group_device[b]);
      out.push_back(q);
    }
    for (int d = 0; d < num_devices; ++d)
      if (!used[d]) {
        Placement q = p;
        q.group_device[a] = d;
        out.push_back(q);
      }
  }
  for (size_t k = 0; k < choices.size(); ++k)
    if (choices[k] == p.micro_batches) {
      if (k > 0) out.push_back(p), out.back().micro_batches = choices[k - 1];
      if (k + 1 < choices.size()) out.push_back(p), out.back().micro_batches = choices[k + 1];
    }
  return out;
}

namespace {

// First-improvement hill climbing and kicks, within a budget of evaluations.
class IteratedLocalSearch {
 public:
  IteratedLocalSearch(Measurer& m, const RefineOptions& o, int iteration, const std::atomic<bool>* cancel)
      : m_(m), o_(o), iteration_(iteration), cancel_(cancel), stop_at_(m.evaluations() + o.budget),
        rng_(o.seed * 0x9E3779B97F4A7C15ULL + 101) {}

  void run() {
    // A data-parallel best is climbed among replica sets first (few moves).
    if (m_.best().data_parallel) climb(m_.best(), m_.best_report().step_ms);
    if (m_.best_pipeline()) climb(m_.best_pipeline()->first, m_.best_pipeline()->second);
    while (!spent()) {
      Placement kicked = kick(m_.best_pipeline() ? m_.best_pipeline()->first : m_.best());
      const StepReport& r = m_.measure(kicked, iteration_);
      if (r.ok) climb(kicked, r.step_ms);
    }
  }

 private:
  bool spent() {
    return m_.evaluations() >= stop_at_ || ++attempts_ > 20LL * o_.budget || (cancel_ && cancel_->load());
  }
  std::vector<Placement> moves(const Placement& p) {
    auto nb = neighbours(p, o_.num_devices, o_.micro_batch_choices);
    std::shuffle(nb.begin(), nb.end(), rng_);
    return nb;
  }
  // Takes the first improving move until none improves (or the budget is spent).
  void climb(Placement current, double current_ms) {
    for (bool improved = true; improved;) {
      improved = false;
      for (const Placement& q : moves(current)) {
        if (spent()) return;
        const StepReport& r = m_.measure(q, iteration_);
        if (r.ok && r.step_ms < current_ms) {
          current = q, current_ms = r.step_ms, improved = true;
          break;
        }
      }
    }
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
