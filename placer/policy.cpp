// placer/policy.cpp — the partition and allocation networks in LibTorch (see policy.h).
#include "placer/policy.h"

#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <cmath>

#include "core/cluster.h"
#include "model/layer_graph.h"

namespace tapp {

namespace {

constexpr float kMasked = -1e9f;
constexpr int kPositionFrequencies = 6;  // sin/cos pairs of the layer's relative depth

// Draws an index from probabilities with our own generator.
int draw(const float* p, int n, std::mt19937_64& rng) {
  double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  double acc = 0;
  int last_nonzero = 0;
  for (int k = 0; k < n; ++k) {
    if (p[k] > 0) last_nonzero = k;
    acc += p[k];
    if (u < acc) return k;
  }
  return last_nonzero;
}

// The (fractional) group a layer at relative depth x in (0, 1) leans to:
// stage k spans [cut_{k-1}, cut_k) and the centre moves linearly across it
// from k - 1/2 to k + 1/2 (equal stages: x * stages - 1/2).
double prior_centre(const std::vector<double>& cuts, int stages, double x) {
  if (static_cast<int>(cuts.size()) != stages - 1) return x * stages - 0.5;
  int k = 0;
  while (k < static_cast<int>(cuts.size()) && x >= cuts[k]) ++k;
  const double lo = k == 0 ? 0.0 : cuts[k - 1], hi = k == static_cast<int>(cuts.size()) ? 1.0 : cuts[k];
  return k + (hi > lo ? (x - lo) / (hi - lo) : 0.5) - 0.5;
}

int argmax(const float* p, int n) { return static_cast<int>(std::max_element(p, p + n) - p); }

torch::Tensor to_tensor(const FeatureMatrix& m) {
  return torch::from_blob(const_cast<float*>(m.data.data()), {m.rows, m.cols}, torch::kFloat32).clone();
}

std::vector<std::vector<float>> to_rows(const torch::Tensor& t) {
  auto c = t.contiguous();
  std::vector<std::vector<float>> out(c.size(0));
  const float* p = c.data_ptr<float>();
  for (int64_t r = 0; r < c.size(0); ++r) out[r].assign(p + r * c.size(1), p + (r + 1) * c.size(1));
  return out;
}

}  // namespace

PolicyMemory policy_memory(const LayerGraph& graph, const Cluster& cluster, int64_t batch_size, Schedule schedule,
                           Optimizer optimizer) {
  PolicyMemory m;
  for (size_t i = 0; i < graph.layers.size(); ++i) {
    const Layer& l = graph.layers[i];
    m.layer_param_bytes.push_back(l.param_bytes());
    m.layer_activation_bytes.push_back(l.activation_bytes());
    m.layer_kept_bytes.push_back(kept_bytes_per_sample(graph, static_cast<int>(i)));  // the loss's on the last
  }
  for (const Device& d : cluster.devices) m.device_bytes.push_back(device_memory_bytes(d));
  // A tied lm_head is charged its table's copy wherever it goes: the mask
  // cannot see which device holds the embedding, and it must never be laxer
  // than check_memory (which charges the copy only on another device).
  for (const TiedTable& t : tied_tables(graph)) m.layer_param_bytes[t.head] += t.bytes;
  m.batch_size = batch_size;
  m.schedule = schedule;
  m.optimizer = optimizer;
  return m;
}

struct Policy::Impl {
  PolicyConfig cfg;
  std::vector<std::vector<int>> consumers;
  std::vector<std::vector<int>> producers;  // per layer: its inputs (earlier layers)
  FeatureMatrix layer_rows;
  int L = 0, G = 0, D = 0, M = 0;  // M: micro-batch head outputs (choices + data parallel)
  std::vector<float> prior;  // L x G positional prior logits (contiguous mode)
  bool all_masked = false;  // no device fits: nothing is masked
  torch::Tensor layer_input;  // L x (30 + 1): features | position
  torch::Tensor device_mask;  // D: 0 or kMasked

  // Partition network.
  torch::nn::Linear p1{nullptr}, p2{nullptr}, p3{nullptr};
  // Allocation network.
  torch::nn::Linear a_embed{nullptr}, a_q{nullptr}, a_k{nullptr}, a_v{nullptr}, a_out{nullptr}, a_micro{nullptr};
  torch::nn::Linear a_replica{nullptr};  // per group x device: logit of a replica there (max_replicas > 0)
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::Adam> optimizer;

  void init_weights() {
    std::mt19937_64 rng(cfg.seed * 0x9E3779B97F4A7C15ULL + 17);
    for (auto& p : params) {
      torch::NoGradGuard ng;
      auto flat = torch::empty({p.numel()}, torch::kFloat32);
      float* d = flat.data_ptr<float>();
      if (p.dim() == 2) {
        double bound = 1.0 / std::sqrt(static_cast<double>(p.size(1)));
        std::uniform_real_distribution<double> u(-bound, bound);
        for (int64_t i = 0; i < p.numel(); ++i) d[i] = static_cast<float>(u(rng));
      } else {
        for (int64_t i = 0; i < p.numel(); ++i) d[i] = 0.f;
      }
      p.copy_(flat.view(p.sizes()));
    }
    // Start the output layers near uniform so the first samples explore.
    torch::NoGradGuard ng;
    p3->weight.mul_(0.1);
    a_out->weight.mul_(0.1);
    a_micro->weight.mul_(0.1);
    // Replicas start rare by default (bias -2: p ~ 0.12 each), so the first
    // proposals are mostly the plain pipelines and replication is learned where it pays.
    if (a_replica) {
      a_replica->weight.mul_(0.1);
      a_replica->bias.fill_(cfg.replica_bias);
    }
  }

  torch::Tensor partition_logits() { return p3(torch::relu(p2(torch::relu(p1(layer_input))))); }

  struct AllocationLogits {
    torch::Tensor device;   // G x D, devices that fit no layer masked
    torch::Tensor micro;    // M
    torch::Tensor replica;  // G x D, undefined without a replica head
  };
  AllocationLogits allocation_logits(const std::vector<int>& layer_group) {
    FeatureMatrix rows = encode_groups(layer_rows, layer_group, G, consumers);
    auto x = to_tensor(rows);
    auto e = torch::relu(a_embed(x));
    auto q = a_q(e), k = a_k(e), v = a_v(e);
    auto att = torch::softmax(torch::matmul(q, k.t()) / std::sqrt(static_cast<double>(cfg.hidden)), 1);
    auto h = e + torch::matmul(att, v);
    auto dev = a_out(h) + device_mask.unsqueeze(0);
    auto micro = a_micro(h.mean(0));
    return {dev, micro, a_replica ? a_replica(h) : torch::Tensor()};
  }

  static std::vector<bool> nonempty(const std::vector<int>& layer_group, int groups) {
    std::vector<bool> used(groups, false);
    for (int g : layer_group) used[g] = true;
    return used;
  }

  // The lowest group layer i may take: contiguous, its predecessor's;
  // follows_dag, the highest of its inputs' (so every edge of the groups'
  // graph goes up in id: acyclic); free, 0.
  int lowest_group(int i, const std::vector<int>& layer_group) const {
    if (cfg.partition == PartitionMode::contiguous) return i == 0 ? 0 : layer_group[i - 1];
    int lo = 0;
    if (cfg.partition == PartitionMode::follows_dag)
      for (int p : producers[i]) lo = std::max(lo, layer_group[p]);
    return lo;
  }

  // Additive mask (L x G) of an ordered partition: layer i may take any group
  // >= lowest_group (groups left empty are dropped), plus the positional prior.
  torch::Tensor order_mask(const std::vector<int>& layer_group) const {
    std::vector<float> m(static_cast<size_t>(L) * G);
    for (int i = 0; i < L; ++i) {
      int lo = lowest_group(i, layer_group);
      for (int g = 0; g < G; ++g) m[static_cast<size_t>(i) * G + g] = g < lo ? kMasked : prior[static_cast<size_t>(i) * G + g];
    }
    return torch::from_blob(m.data(), {L, G}, torch::kFloat32).clone();
  }

  bool device_allowed(int k) const { return cfg.device_allowed.empty() || cfg.device_allowed[k] || all_masked; }

  torch::Tensor partition_log_softmax(const torch::Tensor& logits, const std::vector<int>& layer_group) const {
    if (cfg.partition == PartitionMode::free) return torch::log_softmax(logits, 1);
    return torch::log_softmax(logits + order_mask(layer_group), 1);
  }

  int micro_batches_of(int micro_index) const {
    const auto& c = cfg.micro_batch_choices;
    return c[std::clamp(micro_index, 0, static_cast<int>(c.size()) - 1)];
  }
  bool is_data_parallel(int micro_index) const {
    return cfg.offer_data_parallel && micro_index == static_cast<int>(cfg.micro_batch_choices.size());
  }

  // log pi(d) and entropy (with gradient) for one decision, given the
  // partition logits: every choice in the order it is drawn (policy.h),
  // under the masks it was drawn with (AllocationMasks replays them).
  std::pair<torch::Tensor, torch::Tensor> score(const Decision& d, const torch::Tensor& part_logits) {
    auto part_logp = partition_log_softmax(part_logits, d.layer_group);
    auto idx = torch::tensor(std::vector<int64_t>(d.layer_group.begin(), d.layer_group.end()), torch::kInt64);
    auto lp = part_logp.gather(1, idx.unsqueeze(1)).sum();
    auto ent = -(part_logp.exp() * part_logp).sum();
    auto logits = allocation_logits(d.layer_group);
    auto micro_logp = torch::log_softmax(logits.micro, 0);
    lp = lp + micro_logp[d.micro_batch_index];
    ent = ent - (micro_logp.exp() * micro_logp).sum();

    AllocationMasks masks(*this, d.layer_group, d.micro_batch_index);
    std::vector<float> rows(static_cast<size_t>(G) * D, 0.f);
    for (int g = 0; g < G; ++g) {
      masks.primary_row(g, &rows[static_cast<size_t>(g) * D]);
      masks.take_primary(g, d.group_device[g]);
    }
    auto dev_logp = torch::log_softmax(logits.device + torch::from_blob(rows.data(), {G, D}, torch::kFloat32).clone(), 1);
    auto used = nonempty(d.layer_group, G);
    for (int g = 0; g < G; ++g) {
      if (!used[g]) continue;
      lp = lp + dev_logp[g][d.group_device[g]];
      ent = ent - (dev_logp[g].exp() * dev_logp[g]).sum();
    }
    if (logits.replica.defined()) {
      // Each replica choice the masks offered: a Bernoulli, taken or not.
      std::vector<float> offered(static_cast<size_t>(G) * D, 0.f), taken(static_cast<size_t>(G) * D, 0.f);
      for (int g = 0; g < G; ++g)
        for (int k = 0; k < D; ++k) {
          if (!masks.replica_allowed(g, k)) continue;
          offered[static_cast<size_t>(g) * D + k] = 1.f;
          if (has_replica(d, g, k)) {
            taken[static_cast<size_t>(g) * D + k] = 1.f;
            masks.take_replica(g, k);
          }
        }
      auto off = torch::from_blob(offered.data(), {G, D}, torch::kFloat32).clone();
      auto yes = torch::from_blob(taken.data(), {G, D}, torch::kFloat32).clone();
      auto log_yes = torch::log_sigmoid(logits.replica), log_no = torch::log_sigmoid(-logits.replica);
      lp = lp + (off * (yes * log_yes + (1 - yes) * log_no)).sum();
      ent = ent - (off * (log_yes.exp() * log_yes + log_no.exp() * log_no)).sum();
    }
    return {lp, ent};
  }

  static bool has_replica(const Decision& d, int g, int k) {
    if (d.group_replicas.size() <= static_cast<size_t>(g)) return false;
    const auto& r = d.group_replicas[g];
    return std::find(r.begin(), r.end(), k) != r.end();
  }

  Decision choose(std::mt19937_64* rng) {
    torch::NoGradGuard ng;
    Decision d;
    d.layer_group.resize(L);
    if (cfg.partition != PartitionMode::free) {
      auto lg = partition_logits().contiguous();
      const float* z = lg.data_ptr<float>();
      std::vector<float> p(G);
      for (int i = 0; i < L; ++i) {
        int lo = lowest_group(i, d.layer_group);
        double mx = -1e30;
        for (int g = lo; g < G; ++g) mx = std::max(mx, static_cast<double>(z[i * G + g] + prior[i * G + g]));
        double sum = 0;
        for (int g = 0; g < G; ++g) {
          p[g] = g < lo ? 0.f : static_cast<float>(std::exp(z[i * G + g] + prior[i * G + g] - mx));
          sum += p[g];
        }
        for (int g = 0; g < G; ++g) p[g] = static_cast<float>(p[g] / sum);
        d.layer_group[i] = rng ? draw(p.data(), G, *rng) : argmax(p.data(), G);
      }
    } else {
      auto pp = torch::softmax(partition_logits(), 1).contiguous();
      const float* p = pp.data_ptr<float>();
      for (int i = 0; i < L; ++i) d.layer_group[i] = rng ? draw(p + i * G, G, *rng) : argmax(p + i * G, G);
    }
    auto logits = allocation_logits(d.layer_group);
    // The micro-batch count first: the memory masks and the replica cap depend on it.
    auto mp = torch::softmax(logits.micro, 0).contiguous();
    d.micro_batch_index = rng ? draw(mp.data_ptr<float>(), M, *rng) : argmax(mp.data_ptr<float>(), M);

    auto dl = logits.device.contiguous();
    const float* z = dl.data_ptr<float>();
    d.group_device.assign(G, 0);
    AllocationMasks masks(*this, d.layer_group, d.micro_batch_index);
    std::vector<float> row(D), p(D);
    for (int g = 0; g < G; ++g) {
      masks.primary_row(g, row.data());
      double mx = -1e30;
      for (int k = 0; k < D; ++k) mx = std::max(mx, static_cast<double>(z[g * D + k]) + row[k]);
      double sum = 0;
      for (int k = 0; k < D; ++k) {
        p[k] = static_cast<float>(std::exp(z[g * D + k] + row[k] - mx));
        sum += p[k];
      }
      for (int k = 0; k < D; ++k) p[k] = static_cast<float>(p[k] / sum);
      d.group_device[g] = rng ? draw(p.data(), D, *rng) : argmax(p.data(), D);
      masks.take_primary(g, d.group_device[g]);
    }
    d.group_replicas.assign(G, {});
    if (logits.replica.defined()) {
      auto rp = torch::sigmoid(logits.replica).contiguous();
      const float* q = rp.data_ptr<float>();
      for (int g = 0; g < G; ++g)
        for (int k = 0; k < D; ++k) {
          if (!masks.replica_allowed(g, k)) continue;
          const double u = rng ? std::uniform_real_distribution<double>(0.0, 1.0)(*rng) : 0.5;
          if (u < q[g * D + k]) {
            d.group_replicas[g].push_back(k);
            masks.take_replica(g, k);
          }
        }
    }
    return d;
  }

  // The sequential masks of one joint action's allocation (policy.h), the
  // same when sampling and when scoring: which devices a group's primary may
  // take given the groups before it, and which free devices may take a replica.
  class AllocationMasks {
   public:
    AllocationMasks(const Impl& m, const std::vector<int>& layer_group, int micro_index)
        : m_(m),
          used_(nonempty(layer_group, m.G)),
          data_parallel_(m.is_data_parallel(micro_index)),
          micro_batches_(data_parallel_ ? 1 : m.micro_batches_of(micro_index)),
          taken_(m.D, false),
          load_(m.D, 0.0),
          replicas_(m.G, 0),
          in_cycle_(m.groups_in_cycle(layer_group)) {
      if (m.cfg.memory.empty() || data_parallel_) return;
      const PolicyMemory& mem = m.cfg.memory;
      state_bytes_.assign(m.G, 0.0);
      activation_bytes_.assign(m.G, 0.0);
      boundary_bytes_.assign(m.G, 0.0);
      pair_bytes_.assign(static_cast<size_t>(m.G) * m.G, 0.0);
      device_of_.assign(m.G, -1);
      workspace_.assign(m.D, 0.0);
      largest_param_.assign(m.G, 0.0);
      largest_output_.assign(m.G, 0.0);
      // core counts a producer's output as a received input again whenever the
      // consuming group changes from one reader to the next (input_counted_by).
      std::vector<int> input_counted_by(m.L, -1);
      std::set<int> counted_grad;
      for (int i = 0; i < m.L; ++i) {
        const int g = layer_group[i];
        state_bytes_[g] += static_cast<double>(training_state_bytes(mem.layer_param_bytes[i], mem.optimizer));
        activation_bytes_[g] += static_cast<double>(mem.kept_bytes(i));
        largest_param_[g] = std::max(largest_param_[g], static_cast<double>(mem.layer_param_bytes[i]));
        largest_output_[g] = std::max(largest_output_[g], static_cast<double>(mem.layer_activation_bytes[i]));
        // core's received buffers: an input from another group here, its gradient there (at least what core
        // counts when the groups land on different devices; a device taking both pays them twice).
        for (int p : m.producers[i]) {
          if (layer_group[p] == g) continue;
          const double out = static_cast<double>(mem.layer_activation_bytes[p]);
          if (input_counted_by[p] != g) {
            input_counted_by[p] = g;
            boundary_bytes_[g] += out;
            pair_bytes_[static_cast<size_t>(g) * m.G + layer_group[p]] += out;
          }
          if (counted_grad.insert(p).second) {
            boundary_bytes_[layer_group[p]] += out;
            pair_bytes_[static_cast<size_t>(layer_group[p]) * m.G + g] += out;
          }
        }
      }
      // core's rule counts the stages as the distinct devices in use; the
      // non-empty groups are at least as many, and more stages never keep
      // fewer micro-batches in flight, so the mask is never laxer than check_memory.
      stages_ = static_cast<int>(std::count(used_.begin(), used_.end(), true));
      samples_ = static_cast<double>((mem.batch_size + micro_batches_ - 1) / micro_batches_);
    }

    // Additive row (0 or kMasked per device) for group g's device.
    void primary_row(int g, float* row) const {
      std::fill(row, row + m_.D, 0.f);
      if (!used_[g]) return;
      bool free_left = false;
      for (int k = 0; k < m_.D; ++k) free_left = free_left || (!taken_[k] && m_.device_allowed(k));
      const bool distinct = m_.cfg.distinct_devices && free_left;
      if (distinct)
        for (int k = 0; k < m_.D; ++k)
          if (taken_[k]) row[k] = kMasked;
      if (state_bytes_.empty()) return;
      // Memory: the devices still offered that fit the group; if none does,
      // any allowed device that fits (a repeat); if none, no memory mask
      // (the measurer then reports the proposal out of memory).
      auto fits = [&](int k) {
        return m_.device_allowed(k) && with_primary(g, k) <= capacity(k) && later_groups_still_fit(g, k);
      };
      bool any = false;
      for (int k = 0; k < m_.D; ++k) any = any || (row[k] == 0.f && fits(k));
      if (any) {
        for (int k = 0; k < m_.D; ++k)
          if (!fits(k)) row[k] = kMasked;
        return;
      }
      for (int k = 0; k < m_.D; ++k) any = any || fits(k);
      if (any) {
        for (int k = 0; k < m_.D; ++k) row[k] = fits(k) ? 0.f : kMasked;
        return;
      }
      // Nothing fits by the mask's count (it charges every boundary buffer,
      // which core does not where groups share a device): the device with the
      // most room left, where core's count is likeliest to fit.
      int roomiest = -1;
      for (int k = 0; k < m_.D; ++k)
        if (m_.device_allowed(k) &&
            (roomiest < 0 || capacity(k) - with_primary(g, k) > capacity(roomiest) - with_primary(g, roomiest)))
          roomiest = k;
      if (roomiest >= 0)
        for (int k = 0; k < m_.D; ++k) row[k] = k == roomiest ? 0.f : kMasked;
    }

    void take_primary(int g, int k) {
      if (!used_[g]) return;
      taken_[k] = true;
      if (state_bytes_.empty()) return;
      load_[k] = with_primary(g, k) - std::max(workspace_[k], workspace(g));
      workspace_[k] = std::max(workspace_[k], workspace(g));
      device_of_[g] = k;
    }

    bool replica_allowed(int g, int k) const {
      if (!m_.a_replica || data_parallel_ || !used_[g] || in_cycle_[g] || taken_[k] || !m_.device_allowed(k) ||
          m_.all_masked)
        return false;
      const int r = 1 + replicas_[g];
      if (replicas_[g] >= m_.cfg.max_replicas || r + 1 > micro_batches_) return false;
      if (state_bytes_.empty()) return true;
      if (with(g, r + 1, k) > capacity(k)) return false;
      // A first replica makes g's exchanges with the groups sharing its device cross devices.
      const int home = device_of_[g];
      return replicas_[g] > 0 || home < 0 || load_[home] + shared_bytes(g, home) + workspace_[home] <= capacity(home);
    }

    void take_replica(int g, int k) {
      if (!state_bytes_.empty() && replicas_[g] == 0 && device_of_[g] >= 0) load_[device_of_[g]] += shared_bytes(g, device_of_[g]);
      ++replicas_[g];
      taken_[k] = true;
      if (!state_bytes_.empty()) add(g, 1 + replicas_[g], k);
    }

   private:
    // core's rule for group g on one of its r replicas (the job optimizer's state): its
    // training state, its activations for its own share of the micro-batches
    // in flight and the buffers it receives for each of its micro-batches;
    // the device's working memory (its largest layer's) is kept per device.
    // The buffers are counted as if every producer and consumer of another
    // group ran on another device: where they share one, core counts none, so
    // the mask is at most stricter than check_memory, never laxer.
    double bytes(int g, int r) const {
      const int own = (micro_batches_ + r - 1) / r;
      const double in_flight = static_cast<double>(micro_batches_in_flight(m_.cfg.memory.schedule, own, stages_));
      return state_bytes_[g] + activation_bytes_[g] * samples_ * in_flight + boundary_bytes_[g] * samples_ * own;
    }
    // At least core's working memory: backward's weight and activation gradients, with Adam's two
    // update temporaries of the largest weight on top (core counts them only where they pass
    // what backward held), so the mask is never laxer.
    double workspace(int g) const {
      const double updates = m_.cfg.memory.optimizer == Optimizer::adam ? 2 : 1;
      return updates * largest_param_[g] + 2 * largest_output_[g] * samples_;
    }
    // Whether, with group g on device k, every later group still fits on some
    // allowed device (one group at a time): a look-ahead of one step, so an
    // early group does not take the only device a later, larger one fits on
    // (a dead end where the mask could only give up). O(G D) a query, so it is
    // skipped above 16 groups x 16 devices.
    bool later_groups_still_fit(int g, int k) const {
      if (m_.G * m_.D > 256) return true;
      for (int h = g + 1; h < m_.G; ++h) {
        if (!used_[h]) continue;
        bool somewhere = false;
        for (int j = 0; j < m_.D && !somewhere; ++j) {
          if (!m_.device_allowed(j)) continue;
          const double need = j == k ? with(g, 1, k) + bytes(h, 1) + std::max(0.0, workspace(h) - std::max(workspace_[k], workspace(g)))
                                     : with(h, 1, j);
          somewhere = need <= capacity(j);
        }
        if (!somewhere) return false;
      }
      return true;
    }
    // Bytes per step of the buffers between g and the groups already on device
    // k without replicas, which core does not count while they share it.
    double shared_bytes(int g, int k) const {
      double b = 0;
      for (int h = 0; h < m_.G; ++h)
        if (h != g && device_of_[h] == k && replicas_[h] == 0)
          b += (pair_bytes_[static_cast<size_t>(g) * m_.G + h] + pair_bytes_[static_cast<size_t>(h) * m_.G + g]);
      return b * samples_ * micro_batches_;
    }
    // Device k's need with group g's primary added: bytes(g, 1) less the
    // buffers g and the groups already on k (unreplicated) would exchange,
    // counted on both sides so far.
    double with_primary(int g, int k) const { return with(g, 1, k) - shared_bytes(g, k); }
    // Device k's need with group g (on one of its r replicas) added.
    double with(int g, int r, int k) const { return load_[k] + bytes(g, r) + std::max(workspace_[k], workspace(g)); }
    void add(int g, int r, int k) {
      load_[k] += bytes(g, r);
      workspace_[k] = std::max(workspace_[k], workspace(g));
    }
    double capacity(int k) const { return static_cast<double>(m_.cfg.memory.device_bytes[k]); }

    const Impl& m_;
    std::vector<bool> used_;
    bool data_parallel_;
    int micro_batches_;
    std::vector<bool> taken_;
    std::vector<double> load_;
    std::vector<int> replicas_;
    std::vector<bool> in_cycle_;
    std::vector<double> state_bytes_, activation_bytes_;  // per group; empty = no memory masks
    std::vector<double> boundary_bytes_, largest_param_, largest_output_;
    std::vector<double> pair_bytes_;  // G x G: per sample, what g receives because of h (inputs from h, gradients for h)
    std::vector<int> device_of_;      // per group: its primary's device once taken (-1 before)  // per group (per sample where bytes of outputs)
    std::vector<double> workspace_;  // per device: the largest working memory of its groups so far
    int stages_ = 1;
    double samples_ = 1;
  };

  // Per group: whether it lies on a cycle of the groups' graph (only the
  // free mode can make one; a replicated group must be one stage).
  std::vector<bool> groups_in_cycle(const std::vector<int>& layer_group) const {
    std::vector<bool> out(G, false);
    if (cfg.partition != PartitionMode::free) return out;
    std::vector<std::vector<char>> reach(G, std::vector<char>(G, 0));
    for (int i = 0; i < L && i < static_cast<int>(consumers.size()); ++i)
      for (int j : consumers[i])
        if (layer_group[i] != layer_group[j]) reach[layer_group[i]][layer_group[j]] = 1;
    for (int k = 0; k < G; ++k)
      for (int i = 0; i < G; ++i)
        if (reach[i][k])
          for (int j = 0; j < G; ++j)
            if (reach[k][j]) reach[i][j] = 1;
    for (int a = 0; a < G; ++a)
      for (int b = 0; b < G; ++b)
        if (a != b && reach[a][b] && reach[b][a]) out[a] = true;
    return out;
  }
};

Policy::Policy(const FeatureMatrix& layer_features, std::vector<std::vector<int>> consumers, PolicyConfig config)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = std::move(config);
  if (m.cfg.micro_batch_choices.empty()) m.cfg.micro_batch_choices = {1};
  m.consumers = std::move(consumers);
  m.layer_rows = layer_features;
  m.L = layer_features.rows;
  m.producers.assign(m.L, {});
  for (int i = 0; i < static_cast<int>(m.consumers.size()) && i < m.L; ++i)
    for (int j : m.consumers[i])
      if (j > i && j < m.L) m.producers[j].push_back(i);
  m.G = std::max(1, m.cfg.num_groups);
  m.D = std::max(1, m.cfg.num_devices);
  m.M = static_cast<int>(m.cfg.micro_batch_choices.size()) + (m.cfg.offer_data_parallel ? 1 : 0);
  const int H = m.cfg.hidden;
  // Positional prior (contiguous mode): layer i leans towards group
  // (i + 0.5) G / L with a width of about one group, so a neutral network
  // proposes stages spread over the model; the network learns where to cut.
  // Sharpness ln(L/G): on track, a layer opens the next group with odds
  // about G/L, so a neutral network makes ~G-1 cuts whatever the depth.
  m.prior.assign(static_cast<size_t>(m.L) * m.G, 0.f);
  const int PG = m.cfg.prior_groups > 0 ? std::min(m.cfg.prior_groups, m.G) : m.G;
  const double kappa = std::max(0.5, std::log(static_cast<double>(std::max(1, m.L)) / PG));
  for (int i = 0; i < m.L; ++i)
    for (int g = 0; g < m.G; ++g) {
      double c = prior_centre(m.cfg.prior_cuts, PG, (i + 0.5) / std::max(1, m.L));
      m.prior[static_cast<size_t>(i) * m.G + g] = static_cast<float>(-kappa * (g - c) * (g - c));
    }
  FeatureMatrix in;
  in.rows = m.L;
  in.cols = layer_features.cols + 1 + 2 * kPositionFrequencies;
  in.data.resize(static_cast<size_t>(in.rows) * in.cols);
  for (int i = 0; i < m.L; ++i) {
    float* row = &in.data[static_cast<size_t>(i) * in.cols];
    for (int c = 0; c < layer_features.cols; ++c) row[c] = layer_features.at(i, c);
    const double x = m.L > 1 ? static_cast<double>(i) / (m.L - 1) : 0.0;
    row[layer_features.cols] = static_cast<float>(x);
    // sin/cos of the position at doubling frequencies: neighbouring layers of
    // a deep model differ in these, so the network can place a cut between them.
    for (int k = 0; k < kPositionFrequencies; ++k) {
      const double w = 3.141592653589793 * static_cast<double>(1 << k) * x;
      row[layer_features.cols + 1 + 2 * k] = static_cast<float>(std::sin(w));
      row[layer_features.cols + 2 + 2 * k] = static_cast<float>(std::cos(w));
    }
  }
  m.layer_input = to_tensor(in);

  std::vector<float> mask(m.D, 0.f);
  bool any = false;
  for (int d = 0; d < m.D; ++d) {
    bool ok = m.cfg.device_allowed.empty() || m.cfg.device_allowed[d];
    mask[d] = ok ? 0.f : kMasked;
    any = any || ok;
  }
  if (!any) std::fill(mask.begin(), mask.end(), 0.f);
  m.all_masked = !any;
  m.device_mask = torch::tensor(mask);

  m.p1 = torch::nn::Linear(in.cols, H);
  m.p2 = torch::nn::Linear(H, H);
  m.p3 = torch::nn::Linear(H, m.G);
  m.a_embed = torch::nn::Linear(layer_features.cols + m.G, H);
  m.a_q = torch::nn::Linear(H, H);
  m.a_k = torch::nn::Linear(H, H);
  m.a_v = torch::nn::Linear(H, H);
  m.a_out = torch::nn::Linear(H, m.D);
  m.a_micro = torch::nn::Linear(H, m.M);
  for (auto* lin : {&m.p1, &m.p2, &m.p3, &m.a_embed, &m.a_q, &m.a_k, &m.a_v, &m.a_out, &m.a_micro}) {
    m.params.push_back((*lin)->weight);
    m.params.push_back((*lin)->bias);
  }
  if (m.cfg.max_replicas > 0 && m.D > 1) {
    // Last, so that the other networks start from the same weights with or without it.
    m.a_replica = torch::nn::Linear(H, m.D);
    m.params.push_back(m.a_replica->weight);
    m.params.push_back(m.a_replica->bias);
  }
  const auto& mem = m.cfg.memory;
  if (!mem.empty() && (static_cast<int>(mem.device_bytes.size()) != m.D ||
                       static_cast<int>(mem.layer_param_bytes.size()) != m.L ||
                       static_cast<int>(mem.layer_activation_bytes.size()) != m.L || mem.batch_size < 1))
    m.cfg.memory = PolicyMemory{};  // sizes that do not match the model and cluster: no memory masks
  m.init_weights();
  m.optimizer = std::make_unique<torch::optim::Adam>(m.params, torch::optim::AdamOptions(m.cfg.learning_rate));
}

Policy::~Policy() = default;

const PolicyConfig& Policy::config() const { return impl_->cfg; }

Decision Policy::sample(std::mt19937_64& rng) { return impl_->choose(&rng); }
Decision Policy::greedy() { return impl_->choose(nullptr); }

double Policy::log_prob(const Decision& d) {
  torch::NoGradGuard ng;
  return impl_->score(d, impl_->partition_logits()).first.item<double>();
}

std::vector<std::vector<float>> Policy::partition_probs() {
  torch::NoGradGuard ng;
  return to_rows(torch::softmax(impl_->partition_logits(), 1));
}

std::vector<std::vector<float>> Policy::allocation_probs(const std::vector<int>& layer_group) {
  torch::NoGradGuard ng;
  return to_rows(torch::softmax(impl_->allocation_logits(layer_group).device, 1));
}

std::vector<std::vector<float>> Policy::replica_probs(const std::vector<int>& layer_group) {
  torch::NoGradGuard ng;
  auto r = impl_->allocation_logits(layer_group).replica;
  return r.defined() ? to_rows(torch::sigmoid(r)) : std::vector<std::vector<float>>{};
}

std::vector<float> Policy::micro_batch_probs(const std::vector<int>& layer_group) {
  torch::NoGradGuard ng;
  auto p = torch::softmax(impl_->allocation_logits(layer_group).micro, 0).contiguous();
  return std::vector<float>(p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
}

UpdateStats Policy::update(const std::vector<Decision>& decisions, const std::vector<double>& advantages,
                           double entropy_coef, double max_grad_norm) {
  Impl& m = *impl_;
  UpdateStats st;
  if (decisions.empty()) return st;
  m.optimizer->zero_grad();
  auto part_logits = m.partition_logits();
  torch::Tensor pg = torch::zeros({}), ent = torch::zeros({});
  for (size_t i = 0; i < decisions.size(); ++i) {
    auto [lp, e] = m.score(decisions[i], part_logits);
    pg = pg - lp * advantages[i];
    ent = ent + e;
  }
  const double n = static_cast<double>(decisions.size());
  auto loss = pg / n - entropy_coef * ent / n;
  loss.backward();
  st.grad_norm = torch::nn::utils::clip_grad_norm_(m.params, max_grad_norm);
  m.optimizer->step();
  st.loss = loss.item<double>();
  st.entropy = ent.item<double>() / n;
  return st;
}

void Policy::imitate(const Decision& target, int steps) {
  Impl& m = *impl_;
  for (int s = 0; s < steps; ++s) {
    m.optimizer->zero_grad();
    auto loss = -m.score(target, m.partition_logits()).first;
    loss.backward();
    torch::nn::utils::clip_grad_norm_(m.params, 5.0);
    m.optimizer->step();
  }
}

}  // namespace tapp
