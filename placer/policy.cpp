// placer/policy.cpp — the partition and allocation networks in LibTorch (see policy.h).
#include "placer/policy.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

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

struct Policy::Impl {
  PolicyConfig cfg;
  std::vector<std::vector<int>> consumers;
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
  }

  torch::Tensor partition_logits() { return p3(torch::relu(p2(torch::relu(p1(layer_input))))); }

  // Returns (device logits G x D masked, micro logits M) for a partition.
  std::pair<torch::Tensor, torch::Tensor> allocation_logits(const std::vector<int>& layer_group) {
    FeatureMatrix rows = encode_groups(layer_rows, layer_group, G, consumers);
    auto x = to_tensor(rows);
    auto e = torch::relu(a_embed(x));
    auto q = a_q(e), k = a_k(e), v = a_v(e);
    auto att = torch::softmax(torch::matmul(q, k.t()) / std::sqrt(static_cast<double>(cfg.hidden)), 1);
    auto h = e + torch::matmul(att, v);
    auto dev = a_out(h) + device_mask.unsqueeze(0);
    auto micro = a_micro(h.mean(0));
    return {dev, micro};
  }

  static std::vector<bool> nonempty(const std::vector<int>& layer_group, int groups) {
    std::vector<bool> used(groups, false);
    for (int g : layer_group) used[g] = true;
    return used;
  }

  // Additive mask (L x G) of a contiguous partition: layer i may take any
  // group >= the group of layer i-1 (groups left empty are dropped), plus the
  // positional prior.
  torch::Tensor contiguous_mask(const std::vector<int>& layer_group) const {
    std::vector<float> m(static_cast<size_t>(L) * G);
    for (int i = 0; i < L; ++i) {
      int prev = i == 0 ? 0 : layer_group[i - 1];
      for (int g = 0; g < G; ++g) m[static_cast<size_t>(i) * G + g] = g < prev ? kMasked : prior[static_cast<size_t>(i) * G + g];
    }
    return torch::from_blob(m.data(), {L, G}, torch::kFloat32).clone();
  }

  bool device_allowed(int k) const { return cfg.device_allowed.empty() || cfg.device_allowed[k] || all_masked; }

  // Additive mask (G x D) for distinct devices: each non-empty group masks the
  // devices of the non-empty groups before it, while an allowed device is free.
  torch::Tensor distinct_mask(const std::vector<int>& layer_group, const std::vector<int>& group_device) const {
    std::vector<float> m(static_cast<size_t>(G) * D, 0.f);
    auto used = nonempty(layer_group, G);
    std::vector<bool> taken(D, false);
    for (int g = 0; g < G; ++g) {
      if (!used[g]) continue;
      bool free_left = false;
      for (int k = 0; k < D; ++k) free_left = free_left || (!taken[k] && device_allowed(k));
      if (free_left)
        for (int k = 0; k < D; ++k)
          if (taken[k]) m[static_cast<size_t>(g) * D + k] = kMasked;
      taken[group_device[g]] = true;
    }
    return torch::from_blob(m.data(), {G, D}, torch::kFloat32).clone();
  }

  torch::Tensor partition_log_softmax(const torch::Tensor& logits, const std::vector<int>& layer_group) const {
    if (!cfg.contiguous) return torch::log_softmax(logits, 1);
    return torch::log_softmax(logits + contiguous_mask(layer_group), 1);
  }

  // log pi(d) and entropy (with gradient) for one decision, given the partition logits.
  std::pair<torch::Tensor, torch::Tensor> score(const Decision& d, const torch::Tensor& part_logits) {
    auto part_logp = partition_log_softmax(part_logits, d.layer_group);
    auto idx = torch::tensor(std::vector<int64_t>(d.layer_group.begin(), d.layer_group.end()), torch::kInt64);
    auto lp = part_logp.gather(1, idx.unsqueeze(1)).sum();
    auto ent = -(part_logp.exp() * part_logp).sum();
    auto [dev, micro] = allocation_logits(d.layer_group);
    if (cfg.distinct_devices) dev = dev + distinct_mask(d.layer_group, d.group_device);
    auto dev_logp = torch::log_softmax(dev, 1);
    auto used = nonempty(d.layer_group, G);
    for (int g = 0; g < G; ++g) {
      if (!used[g]) continue;
      lp = lp + dev_logp[g][d.group_device[g]];
      ent = ent - (dev_logp[g].exp() * dev_logp[g]).sum();
    }
    auto micro_logp = torch::log_softmax(micro, 0);
    lp = lp + micro_logp[d.micro_batch_index];
    ent = ent - (micro_logp.exp() * micro_logp).sum();
    return {lp, ent};
  }

  Decision choose(std::mt19937_64* rng) {
    torch::NoGradGuard ng;
    Decision d;
    d.layer_group.resize(L);
    if (cfg.contiguous) {
      auto lg = partition_logits().contiguous();
      const float* z = lg.data_ptr<float>();
      std::vector<float> p(G);
      for (int i = 0; i < L; ++i) {
        int prev = i == 0 ? 0 : d.layer_group[i - 1];
        double mx = -1e30;
        for (int g = prev; g < G; ++g) mx = std::max(mx, static_cast<double>(z[i * G + g] + prior[i * G + g]));
        double sum = 0;
        for (int g = 0; g < G; ++g) {
          p[g] = g < prev ? 0.f : static_cast<float>(std::exp(z[i * G + g] + prior[i * G + g] - mx));
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
    auto [dev, micro] = allocation_logits(d.layer_group);
    auto dl = dev.contiguous();
    const float* z = dl.data_ptr<float>();
    d.group_device.assign(G, 0);
    auto nonempty_groups = nonempty(d.layer_group, G);
    std::vector<bool> taken(D, false);
    std::vector<float> p(D);
    for (int g = 0; g < G; ++g) {
      // Devices of earlier groups are masked (distinct_devices) while a free allowed one remains.
      bool free_left = false;
      for (int k = 0; k < D; ++k) free_left = free_left || (!taken[k] && device_allowed(k));
      const bool mask_taken = cfg.distinct_devices && nonempty_groups[g] && free_left;
      double mx = -1e30;
      for (int k = 0; k < D; ++k) mx = std::max(mx, static_cast<double>(z[g * D + k]) + (mask_taken && taken[k] ? kMasked : 0.f));
      double sum = 0;
      for (int k = 0; k < D; ++k) {
        double v = z[g * D + k] + (mask_taken && taken[k] ? kMasked : 0.f);
        p[k] = static_cast<float>(std::exp(v - mx));
        sum += p[k];
      }
      for (int k = 0; k < D; ++k) p[k] = static_cast<float>(p[k] / sum);
      d.group_device[g] = rng ? draw(p.data(), D, *rng) : argmax(p.data(), D);
      if (nonempty_groups[g]) taken[d.group_device[g]] = true;
    }
    auto mp = torch::softmax(micro, 0).contiguous();
    d.micro_batch_index = rng ? draw(mp.data_ptr<float>(), M, *rng) : argmax(mp.data_ptr<float>(), M);
    return d;
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
  return to_rows(torch::softmax(impl_->allocation_logits(layer_group).first, 1));
}

std::vector<float> Policy::micro_batch_probs(const std::vector<int>& layer_group) {
  torch::NoGradGuard ng;
  auto p = torch::softmax(impl_->allocation_logits(layer_group).second, 0).contiguous();
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
