// planners/lower_bound.cpp — see lower_bound.h for the derivation.
#include "planners/lower_bound.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "simulator/cost_model.h"

namespace tapp {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A lower bound on layer l's share of any segment's raw compute on d for
// `samples` samples that sums over layers: the cost model's own value where it
// interpolates (additive), and above the largest profiled batch the layer's
// own last slope (the segment's slope is the max of its summed slopes and the
// summed average slopes, so never below the sum of the layers' last slopes).
double additive_raw_ms(const CostModel& cost, int d, int l, int64_t samples, bool backward) {
  const std::vector<int64_t>& sizes = cost.profiled_batch_sizes(d);
  if (sizes.size() < 2 || samples <= sizes.back()) return cost.raw_compute_ms(d, l, l, samples, backward);
  const int64_t b0 = sizes[sizes.size() - 2], b1 = sizes.back();
  const double t0 = cost.raw_compute_ms(d, l, l, b0, backward), t1 = cost.raw_compute_ms(d, l, l, b1, backward);
  const double slope = std::max(0.0, (t1 - t0) / static_cast<double>(b1 - b0));
  return t1 + slope * static_cast<double>(samples - b1);
}

class BoundTerms {
 public:
  BoundTerms(const LayerGraph& g, const Cluster& c, const CostModel& cost, int64_t batch)
      : g_(g), cost_(cost), batch_(batch), L_(static_cast<int>(g.layers.size())), D_(c.num_devices()) {
    const Calibration& cal = cost.calibration();
    const StageMemory mem(g);
    holds_.assign(static_cast<size_t>(L_) * D_, 0);
    for (int l = 0; l < L_; ++l)
      for (int d = 0; d < D_; ++d) holds_[idx(l, d)] = mem.fits(c.devices[d], l, l + 1, 1, 1);
    overhead_.resize(D_);
    for (int d = 0; d < D_; ++d) overhead_[d] = 2 * cal.layer_overhead_ms * cost.inverse_speed(d);
    work_terms();
  }

  // Index of a layer that no device holds, or -1.
  int unplaceable_layer() const {
    for (int l = 0; l < L_; ++l) {
      bool any = false;
      for (int d = 0; d < D_; ++d) any = any || holds_[idx(l, d)];
      if (!any) return l;
    }
    return -1;
  }

  double work(int m) const { return (batch_ * unit_work_ + L_ * m * min_overhead_per_unit_) / capacity_; }

  double chain(int m) const {
    const int64_t s = (batch_ + m - 1) / m;
    std::vector<double> path(L_, 0);
    for (int l = 0; l < L_; ++l) {
      double h = kInf;
      for (int d = 0; d < D_; ++d)
        if (holds_[idx(l, d)]) h = std::min(h, compute(l, d, s) + overhead_[d]);
      double before = 0;
      for (int p : g_.layers[l].inputs) before = std::max(before, path[p]);
      path[l] = before + h;
    }
    return path[L_ - 1];
  }

 private:
  size_t idx(int l, int d) const { return static_cast<size_t>(l) * D_ + d; }

  double compute(int l, int d, int64_t s) const {
    const Calibration& cal = cost_.calibration();
    return additive_raw_ms(cost_, d, l, s, false) * cal.factor(d) +
           additive_raw_ms(cost_, d, l, s, true) * (cal.factor(d) + cal.backward_extra);
  }

  // Per-sample cost is (a + b s) / s on each piece between these sizes, so its
  // minimum over [1, B] is at one of them.
  std::vector<int64_t> candidate_sizes(int d) const {
    std::vector<int64_t> sizes = {1, batch_};
    for (int64_t b : cost_.profiled_batch_sizes(d))
      if (b > 1 && b < batch_) sizes.push_back(b);
    return sizes;
  }

  void work_terms() {
    std::vector<double> per_sample(static_cast<size_t>(L_) * D_, kInf), u(L_, kInf);
    for (int d = 0; d < D_; ++d) {
      const std::vector<int64_t> sizes = candidate_sizes(d);
      for (int l = 0; l < L_; ++l) {
        if (!holds_[idx(l, d)]) continue;
        double best = kInf;
        for (int64_t s : sizes) best = std::min(best, compute(l, d, s) / static_cast<double>(s));
        per_sample[idx(l, d)] = best;
        u[l] = std::min(u[l], best);
      }
    }
    unit_work_ = 0;
    for (int l = 0; l < L_; ++l)
      if (u[l] < kInf) unit_work_ += u[l];
    capacity_ = 0;
    min_overhead_per_unit_ = kInf;
    for (int d = 0; d < D_; ++d) {
      double rho = kInf;
      bool holds_any = false;
      for (int l = 0; l < L_; ++l) {
        if (!holds_[idx(l, d)]) continue;
        holds_any = true;
        if (u[l] > 0) rho = std::min(rho, per_sample[idx(l, d)] / u[l]);
      }
      if (!holds_any) continue;
      if (rho == kInf) rho = 1;  // every layer it holds costs nothing anywhere
      capacity_ += 1 / rho;
      min_overhead_per_unit_ = std::min(min_overhead_per_unit_, overhead_[d] / rho);
    }
    if (min_overhead_per_unit_ == kInf) min_overhead_per_unit_ = 0;
  }

  const LayerGraph& g_;
  const CostModel& cost_;
  int64_t batch_;
  int L_, D_;
  std::vector<char> holds_;
  std::vector<double> overhead_;
  double unit_work_ = 0, capacity_ = 1, min_overhead_per_unit_ = 0;
};

}  // namespace

Result<StepLowerBound> step_lower_bound(const LayerGraph& g, const Cluster& c, const CostModel& cost,
                                        int64_t batch_size) {
  if (g.layers.empty()) return Status::error("model: has no layers");
  if (c.devices.empty()) return Status::error("cluster.devices: must not be empty");
  if (batch_size < 1) return Status::error("batch_size: must be at least 1");
  if (cost.num_devices() != c.num_devices() || cost.num_layers() != static_cast<int>(g.layers.size()))
    return Status::error("lower bound: the cost model was built for another model or cluster");
  const BoundTerms terms(g, c, cost, batch_size);
  if (int l = terms.unplaceable_layer(); l >= 0) {
    const StageMemory mem(g);
    int64_t largest = 0;
    std::string largest_name;
    for (const Device& d : c.devices)
      if (d.memory_mb > largest) {
        largest = d.memory_mb;
        largest_name = d.name;
      }
    return Status::error("layer '" + g.layers[l].name + "' needs " + std::to_string(mem.bytes(l, l + 1, 1, 1) >> 20) +
                         " MiB for one sample (weights, gradients, optimizer state and activations); the largest "
                         "device, '" + largest_name + "', has memory_mb " + std::to_string(largest));
  }
  // Smallest m with work(m) >= chain(m); work rises with m, chain falls.
  const int max_m = static_cast<int>(std::min<int64_t>(batch_size, 1 << 30));
  int lo = 1, hi = max_m + 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (terms.work(mid) >= terms.chain(mid))
      hi = mid;
    else
      lo = mid + 1;
  }
  StepLowerBound b;
  auto take = [&](int m) {
    const double w = terms.work(m), ch = terms.chain(m);
    if (b.ms == 0 || std::max(w, ch) < b.ms) {
      b.ms = std::max(w, ch);
      b.work_ms = w;
      b.chain_ms = ch;
      b.micro_batches = m;
    }
  };
  if (lo <= max_m) take(lo);
  if (lo > 1) take(lo - 1);
  b.ms += cost.step_overhead_ms();
  b.basis =
      "simulator cost model: max(compute of the batch spread over the devices at their speeds, one micro-batch's "
      "forward+backward along the longest path), minimised over micro-batch counts";
  return b;
}

double gap_to_bound(double step_ms, double bound_ms) { return bound_ms > 0 ? (step_ms - bound_ms) / bound_ms : 0; }

}  // namespace tapp
