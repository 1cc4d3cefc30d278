// planners/lower_bound.cpp — see lower_bound.h for the derivation.
#include "planners/lower_bound.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <vector>

#include "common/checked_math.h"
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

// Which devices can hold each layer alone (its training state and one
// sample's activations: core's memory rule), and what a layer keeps wherever
// it runs. Memory only: no costs.
class LayerHolders {
 public:
  LayerHolders(const LayerGraph& graph, const Cluster& c)
      : g_(graph), L_(static_cast<int>(graph.layers.size())), D_(c.num_devices()) {
    const StageMemory mem(graph);
    holds.assign(static_cast<size_t>(L_) * D_, 0);
    state_bytes.resize(L_);
    for (int l = 0; l < L_; ++l) {
      state_bytes[l] = training_state_bytes(graph.layers[l].param_bytes());
      for (int d = 0; d < D_; ++d) holds[idx(l, d)] = mem.fits(c.devices[d], l, l + 1, 1, 1);
    }
  }

  // Index of a layer that no device holds, or -1.
  int unplaceable_layer() const {
    for (int l = 0; l < L_; ++l) {
      bool any = false;
      for (int d = 0; d < D_; ++d) any = any || holds[idx(l, d)];
      if (!any) return l;
    }
    return -1;
  }

  // Devices too small together for the layers only they can hold. Each layer
  // keeps its weights, gradients and momentum (SGD's state, the least any
  // optimizer keeps) whole on every device that runs it, so for any set of
  // devices the layers that no other device holds must fit their state into
  // that set's memory. Checked for the sets "the k largest devices", k = 1..D
  // (the sets a layer's holders form, since what fits depends on memory; k = D
  // is the whole model against the whole cluster). Returns why not, or "".
  std::string crowded(const Cluster& c) const {
    std::vector<int> by_memory(D_);
    for (int d = 0; d < D_; ++d) by_memory[d] = d;
    std::stable_sort(by_memory.begin(), by_memory.end(),
                     [&](int a, int b) { return c.devices[a].memory_mb > c.devices[b].memory_mb; });
    std::vector<int> rank(D_);
    for (int k = 0; k < D_; ++k) rank[by_memory[k]] = k;
    // Per layer: the rank of its smallest holder (it is confined to the k largest devices for k above it).
    std::vector<std::vector<int>> confined(D_);
    for (int l = 0; l < L_; ++l) {
      int last = -1;
      for (int d = 0; d < D_; ++d)
        if (holds[idx(l, d)]) last = std::max(last, rank[d]);
      if (last >= 0) confined[last].push_back(l);
    }
    int64_t need = 0, room = 0;
    std::vector<int> layers;
    for (int k = 0; k < D_; ++k) {
      room = sat_add(room, device_memory_bytes(c.devices[by_memory[k]]));
      for (int l : confined[k]) {
        need = sat_add(need, state_bytes[l]);
        layers.push_back(l);
      }
      if (need > room) return crowded_message(c, layers, {by_memory.begin(), by_memory.begin() + k + 1}, need);
    }
    return "";
  }

  std::vector<char> holds;           // [layer x device]
  std::vector<int64_t> state_bytes;  // per layer: training state (sgd's)

 private:
  size_t idx(int l, int d) const { return static_cast<size_t>(l) * D_ + d; }

  std::string crowded_message(const Cluster& c, std::vector<int> layers, const std::vector<int>& devices,
                              int64_t need) const {
    std::sort(layers.begin(), layers.end(), [&](int a, int b) { return state_bytes[a] > state_bytes[b]; });
    auto listed = [](const std::vector<std::string>& names) {
      std::string out;
      const size_t shown = std::min<size_t>(names.size(), 3);
      for (size_t k = 0; k < shown; ++k) out += (k ? ", '" : "'") + names[k] + "'";
      if (names.size() > shown) out += " and " + std::to_string(names.size() - shown) + " more";
      return out;
    };
    std::vector<std::string> layer_names, device_names;
    for (int l : layers) layer_names.push_back(g_.layers[l].name);
    int64_t memory_mb = 0;
    for (int d : devices) {
      device_names.push_back(c.devices[d].name);
      memory_mb = sat_add(memory_mb, c.devices[d].memory_mb);
    }
    const bool all = static_cast<int>(devices.size()) == D_;
    return std::string(all ? "the model's " : "") + std::to_string(layers.size()) + " layer" +
           (layers.size() == 1 ? " " : "s ") + listed(layer_names) +
           (all ? " need" : std::string(layers.size() == 1 ? " fits" : " fit") + " only on " + listed(device_names) +
                                " and need") +
           " " + std::to_string(need >> 20) + " MiB for their weights, gradients and optimizer state alone; " +
           (all ? "the devices have " : devices.size() == 1 ? "it has " : "those devices have ") +
           "memory_mb " + std::to_string(memory_mb) + (devices.size() > 1 ? " together" : "");
  }

  const LayerGraph& g_;
  int L_, D_;
};

class BoundTerms {
 public:
  // `holders`: of g on c (memory_admits_placement's, kept for the bound).
  BoundTerms(const LayerGraph& g, const Cluster& c, const CostModel& cost, int64_t batch, const LayerHolders& holders)
      : g_(g), cost_(cost), batch_(batch), L_(static_cast<int>(g.layers.size())), D_(c.num_devices()),
        holds_(holders.holds) {
    const Calibration& cal = cost.calibration();
    held_bytes_.resize(L_);
    for (int l = 0; l < L_; ++l) held_bytes_[l] = holders.state_bytes[l] + kept_bytes_per_sample(g, l);
    overhead_.resize(D_);
    for (int d = 0; d < D_; ++d) overhead_[d] = 2 * cal.layer_overhead_ms * cost.inverse_speed(d);
    work_terms();
    share_caps(c);
    cheapest_links();
  }

  double work(int m) const { return (batch_ * unit_work_ + L_ * m * min_overhead_per_unit_) / capacity_; }

  // The smallest T at which the devices' capped shares (share_caps) add up to
  // the batch's u-work: sum_d min(rate_d T, cap_d) >= B x sum_l u_l, solved
  // exactly over the breakpoints cap_d / rate_d. 0 where the caps never add up
  // (no placement fits the memory rule then; the plain terms stand).
  double capped_work() const { return capped_work(rate_); }

  // Synchronous placements (each step all-reduces every replicated group's
  // gradients) where at most one device runs every layer: each other one runs
  // each sample it runs only in part, so its links cap it as they cap a device
  // that cannot hold the model (share_caps). The least capped_work over which
  // device, if any, is left uncapped; infinite where none adds up. Only where
  // capped_work adds up.
  double one_whole_device() const {
    auto or_never = [&](const std::vector<double>& rate) {
      const double t = capped_work(rate);
      return t > 0 ? t : kInf;
    };
    std::vector<double> rate = link_rate_;
    double least = or_never(rate);
    for (int d = 0; d < D_; ++d) {
      if (link_rate_[d] >= rate_[d]) continue;  // its links do not cap it: as above
      rate[d] = rate_[d];
      least = std::min(least, or_never(rate));
      rate[d] = link_rate_[d];
    }
    return least;
  }

  // Two devices that run every layer: every group with parameters is
  // replicated on both and ends in an allreduce on their send queues, at most
  // D - 1 each, so the step is at least the ring floor of the largest layer's
  // parameters and of all of them over D - 1 queues. Infinite where fewer
  // than two devices can hold the whole model.
  double allreduce_floor() const {
    if (std::count(whole_.begin(), whole_.end(), 1) < 2) return kInf;
    double all = 0, largest = 0;
    for (const Layer& l : g_.layers) {
      all += static_cast<double>(l.param_bytes());
      largest = std::max(largest, static_cast<double>(l.param_bytes()));
    }
    return ring_floor(std::max(largest, all / (D_ - 1)));
  }

  // Synchronous placements: a layer on two devices or more is in a
  // replicated group, whose allreduce moves at least the layer's parameters;
  // a layer on one device runs all B samples there. The most over layers of
  // the cheaper of the two.
  double lone_layers() const {
    double most = 0;
    for (int l = 0; l < L_; ++l) {
      if (u_[l] == kInf) continue;
      const double alone = static_cast<double>(batch_) * u_[l] + min_overhead_;
      most = std::max(most, std::min(ring_floor(static_cast<double>(g_.layers[l].param_bytes())), alone));
    }
    return most;
  }

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

  // capped_work's sum over the devices at these rates (share_caps' caps).
  double capped_work(const std::vector<double>& rates) const {
    const double total = static_cast<double>(batch_) * unit_work_;
    std::vector<int> order;
    double rate = 0, capped = 0, most = 0;
    for (int d = 0; d < D_; ++d)
      if (rates[d] > 0 && cap_[d] > 0) {
        order.push_back(d);
        rate += rates[d];
        most += cap_[d];
      }
    if (total <= 0 || most < total * (1 - 1e-12)) return 0;
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return cap_[a] / rates[a] < cap_[b] / rates[b]; });
    for (int d : order) {
      const double t = (total - capped) / rate;  // every device not yet at its cap still rising
      if (t <= cap_[d] / rates[d]) return t;
      capped += cap_[d];
      rate -= rates[d];
    }
    return cap_[order.back()] / rates[order.back()];
  }

  // The least CostModel::ring_allreduce_ms of `bytes` over any ring of two or
  // more devices: 2 (r - 1) steps of bytes / r each on the ring's slowest link,
  // so at least 2 x the cheapest link's fixed cost + bytes x the cheapest
  // per-byte cost. 0 for no bytes; infinite with one device.
  double ring_floor(double bytes) const {
    if (bytes <= 0) return 0;
    return 2 * cheapest_fixed_ms_ + cheapest_ms_per_byte_ * bytes;
  }

  // The link's time per byte (the cost model's transfers are affine in the bytes).
  double ms_per_byte(int from, int to) const {
    constexpr int64_t kProbe = int64_t{1} << 20;
    return (cost_.transfer_ms(from, to, kProbe) - cost_.transfer_ms(from, to, 0)) / kProbe;
  }

  // ring_floor's prices: the least fixed cost and per-byte cost over the links (infinite with one device).
  void cheapest_links() {
    cheapest_fixed_ms_ = cheapest_ms_per_byte_ = kInf;
    for (int from = 0; from < D_; ++from)
      for (int to = 0; to < D_; ++to)
        if (from != to) {
          cheapest_fixed_ms_ = std::min(cheapest_fixed_ms_, std::max(0.0, cost_.transfer_ms(from, to, 0)));
          cheapest_ms_per_byte_ = std::min(cheapest_ms_per_byte_, std::max(0.0, ms_per_byte(from, to)));
        }
  }

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
    std::vector<double> per_sample(static_cast<size_t>(L_) * D_, kInf);
    std::vector<double>& u = u_;
    u.assign(L_, kInf);
    rho_.assign(D_, 0);
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
      rho_[d] = rho;
      capacity_ += 1 / rho;
      min_overhead_per_unit_ = std::min(min_overhead_per_unit_, overhead_[d] / rho);
    }
    if (min_overhead_per_unit_ == kInf) min_overhead_per_unit_ = 0;
    min_overhead_ = *std::min_element(overhead_.begin(), overhead_.end());
  }

  // Per device d: cap_d, the most u-work it can do in a step, B x the most u
  // per sample over the layers its memory holds together (their training
  // state and one sample's kept activations; a fractional knapsack, so an
  // upper bound); rate_d, the most u-work per ms: 1 / rho_d, and for a device
  // that cannot hold that for the whole model (every sample it runs also runs
  // elsewhere, so an edge crosses to or from d and moves at least the smallest
  // layer output a_min per sample over d's links) also (its most u per
  // sample) x (d's bytes per ms over all its links, in and out) / a_min.
  void share_caps(const Cluster& c) {
    rate_.assign(D_, 0);
    cap_.assign(D_, 0);
    link_rate_.assign(D_, 0);
    whole_.assign(D_, 0);
    const int64_t a_min = smallest_crossing_bytes();
    for (int d = 0; d < D_; ++d) {
      if (rho_[d] <= 0) continue;  // holds no layer
      bool whole = true;
      const double most_u = most_u_held(d, device_memory_bytes(c.devices[d]), &whole);
      cap_[d] = static_cast<double>(batch_) * most_u;
      rate_[d] = 1 / rho_[d];
      const double by_links = a_min > 0 ? most_u * bytes_per_ms(d) / static_cast<double>(a_min) : kInf;
      if (!whole) rate_[d] = std::min(rate_[d], by_links);
      whole_[d] = whole;
      link_rate_[d] = std::min(rate_[d], by_links);
    }
  }

  // Fractional knapsack of the layers d holds: value u_l, weight held_bytes_;
  // `whole` says whether all fit.
  double most_u_held(int d, int64_t memory, bool* whole) const {
    std::vector<std::pair<double, int>> held;  // (u per byte, layer), the free layers first
    double all_bytes = 0;
    for (int l = 0; l < L_; ++l) {
      if (!holds_[idx(l, d)]) {
        *whole = false;
        continue;
      }
      all_bytes += static_cast<double>(held_bytes_[l]);
      if (u_[l] > 0) held.push_back({held_bytes_[l] > 0 ? u_[l] / static_cast<double>(held_bytes_[l]) : kInf, l});
    }
    if (*whole && all_bytes <= static_cast<double>(memory)) return unit_work_;
    *whole = false;
    std::sort(held.begin(), held.end(), std::greater<>());
    double room = static_cast<double>(memory), most = 0;
    for (auto [value, l] : held) {
      const double w = static_cast<double>(held_bytes_[l]);
      if (w <= room) {
        most += u_[l];
        room -= w;
      } else {
        most += u_[l] * room / w;
        break;
      }
    }
    return most;
  }

  // The smallest output any layer sends to a consumer (per sample); 0 where
  // the graph is not connected (a sample could then split without crossing).
  int64_t smallest_crossing_bytes() const {
    std::vector<int> root(L_);
    for (int l = 0; l < L_; ++l) root[l] = l;
    auto find = [&](int x) {
      while (root[x] != x) x = root[x] = root[root[x]];
      return x;
    };
    int64_t smallest = std::numeric_limits<int64_t>::max();
    int parts = L_;
    for (int l = 0; l < L_; ++l)
      for (int p : g_.layers[l].inputs) {
        smallest = std::min(smallest, g_.layers[p].activation_bytes());
        const int a = find(p), b = find(l);
        if (a != b) {
          root[a] = b;
          --parts;
        }
      }
    return parts == 1 && L_ > 1 ? smallest : 0;
  }

  // Bytes per ms d can move at once over all its links, each way.
  double bytes_per_ms(int d) const {
    double rate = 0;
    for (int k = 0; k < D_; ++k) {
      if (k == d) continue;
      for (auto [from, to] : {std::pair<int, int>{d, k}, {k, d}}) {
        const double per_byte = ms_per_byte(from, to);
        if (per_byte <= 0) return kInf;
        rate += 1 / per_byte;
      }
    }
    return rate;
  }

  const LayerGraph& g_;
  const CostModel& cost_;
  int64_t batch_;
  int L_, D_;
  const std::vector<char>& holds_;  // LayerHolders::holds
  std::vector<double> overhead_;
  std::vector<int64_t> held_bytes_;  // per layer: training state (sgd's) + one sample's kept activations
  std::vector<double> u_, rho_;     // per layer: u_l; per device: rho_d (0: holds no layer)
  std::vector<double> rate_, cap_;  // share_caps
  std::vector<double> link_rate_;  // share_caps: rate_, capped by the links even where d holds the model
  std::vector<char> whole_;        // share_caps: d's memory holds the whole model
  double unit_work_ = 0, capacity_ = 1, min_overhead_per_unit_ = 0, min_overhead_ = 0;
  double cheapest_fixed_ms_ = 0, cheapest_ms_per_byte_ = 0;  // cheapest_links
};

}  // namespace

namespace {

// memory_admits_placement's conditions, on holders of g on c.
Status admits(const LayerGraph& g, const Cluster& c, const LayerHolders& holders) {
  if (int l = holders.unplaceable_layer(); l >= 0) {
    const StageMemory mem(g);
    int64_t largest = 0;
    std::string largest_name;
    for (const Device& d : c.devices)
      if (d.memory_mb > largest) {
        largest = d.memory_mb;
        largest_name = d.name;
      }
    return Status::error("layer '" + g.layers[l].name + "' needs " + mib_rounded_up(mem.bytes(l, l + 1, 1, 1)) +
                         " MiB for one sample (weights, gradients, optimizer state and activations); the largest "
                         "device, '" + largest_name + "', has memory_mb " + std::to_string(largest));
  }
  if (std::string why = holders.crowded(c); !why.empty()) return Status::error(why);
  return Status::ok();
}

}  // namespace

Status memory_admits_placement(const LayerGraph& g, const Cluster& c) {
  if (c.devices.empty()) return Status::error("cluster.devices: must not be empty");
  return admits(g, c, LayerHolders(g, c));
}

Result<StepLowerBound> step_lower_bound(const LayerGraph& g, const Cluster& c, const CostModel& cost,
                                        int64_t batch_size) {
  if (g.layers.empty()) return Status::error("model: has no layers");
  if (c.devices.empty()) return Status::error("cluster.devices: must not be empty");
  if (batch_size < 1) return Status::error("batch_size: must be at least 1");
  if (cost.num_devices() != c.num_devices() || cost.num_layers() != static_cast<int>(g.layers.size()))
    return Status::error("lower bound: the cost model was built for another model or cluster");
  const LayerHolders holders(g, c);
  if (Status fits = admits(g, c, holders); !fits) return fits;
  const BoundTerms terms(g, c, cost, batch_size, holders);
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
  b.shares_ms = terms.capped_work();
  const double plain = b.ms;
  b.ms = std::max(plain, b.shares_ms) + cost.step_overhead_ms();
  // Synchronous plans: at most one device runs every layer, or two do.
  b.lone_layers_ms = terms.lone_layers();
  const double allreduce = terms.allreduce_floor();
  b.allreduce_ms = allreduce < kInf ? allreduce : 0;
  double spread = b.shares_ms > 0 ? std::min(terms.one_whole_device(), std::max(b.shares_ms, allreduce)) : 0;
  if (spread == kInf) spread = b.shares_ms;
  b.synchronous_ms = std::max({plain, b.shares_ms, b.lone_layers_ms, spread}) + cost.step_overhead_ms();
  b.basis =
      "simulator cost model: the largest of the compute of the batch spread over the devices at their speeds, "
      "one micro-batch's forward+backward along the longest path (minimised over micro-batch counts), and the "
      "batch's compute spread with each device's share capped by the layers its memory holds and, for a device "
      "that cannot hold the whole model, by the activations its links can move; for a synchronous plan also, per "
      "layer, its allreduce where two devices run it or its whole batch on one device, and the links of every "
      "device but one that runs every layer (or the whole model's allreduce)";
  return b;
}

nlohmann::json lower_bound_json(const Result<StepLowerBound>& r) {
  if (!r) return {{"error", r.error_message()}};
  const StepLowerBound& b = *r;
  return {{"ms", b.ms},
          {"synchronous_ms", b.synchronous_ms},
          {"work_ms", b.work_ms},
          {"chain_ms", b.chain_ms},
          {"shares_ms", b.shares_ms},
          {"lone_layers_ms", b.lone_layers_ms},
          {"allreduce_ms", b.allreduce_ms},
          {"micro_batches", b.micro_batches},
          {"basis", b.basis}};
}

bool is_synchronous(const Placement& p) {
  return p.aggregation_every == 1 && p.data_parallel != DataParallelMode::hogwild;
}

double bound_for(const StepLowerBound& b, const Placement& p) {
  return is_synchronous(p) ? b.synchronous_ms : b.ms;
}

double bound_for(const StepLowerBound& b, const std::optional<Placement>& p) {
  return p ? bound_for(b, *p) : b.synchronous_ms;
}

double gap_to_bound(double step_ms, double bound_ms) { return bound_ms > 0 ? (step_ms - bound_ms) / bound_ms : 0; }

}  // namespace tapp
