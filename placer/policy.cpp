// placer/policy.cpp — the partition and allocation networks in LibTorch (see policy.h).
#include "placer/policy.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <sstream>
#include <set>

#include "common/read_file.h"
#include "core/cluster.h"
#include "model/layer_graph.h"

namespace tapp {

namespace {

constexpr float kMasked = -1e9f;
constexpr int kPositionFrequencies = 6;  // sin/cos pairs of the layer's relative depth
constexpr int kComputeFrequencies = 3;   // sin/cos pairs of the FLOPs done before the layer
constexpr int kMedianDraws = 64;         // partitions drawn for the typical (median) partition
constexpr uint64_t kMedianSeed = 0x6d656469616eULL;

// Whose odds a decision is scored by: those it was drawn with (the networks'
// mixed with even ones where the policy explores), or the networks' own
// (imitation teaches the networks: the mixture's floor would leave a target
// choice the networks give almost nothing almost no gradient).
enum class Odds { drawn, networks };

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

// draw's choice among n from the mixture (1 - eps) p + eps uniform over the
// open choices (PolicyConfig::explore): with odds eps, any choice the masks
// leave. is_open(k) is asked only then, so a policy that does not explore
// builds no list of open choices.
template <class IsOpen>
int draw_exploring(const float* p, int n, double eps, std::mt19937_64& rng, IsOpen is_open) {
  if (eps > 0 && std::uniform_real_distribution<double>(0.0, 1.0)(rng) < eps) {
    int count = 0;
    for (int k = 0; k < n; ++k) count += is_open(k) ? 1 : 0;
    if (count > 0) {
      int pick = std::uniform_int_distribution<int>(0, count - 1)(rng);
      for (int k = 0; k < n; ++k)
        if (is_open(k) && pick-- == 0) return k;
    }
  }
  return draw(p, n, rng);
}

// log of (1 - eps) pi + eps uniform over the open choices (along `dim`), from
// log pi: the log-probability of draw_exploring's choice. A closed choice's
// value is clamped, not -inf, so its zero gradient stays zero.
torch::Tensor explored_logp(const torch::Tensor& logp, const torch::Tensor& open, int64_t dim, double eps) {
  const auto share = open / open.sum(dim, true).clamp_min(1);
  return torch::log(((1 - eps) * logp.exp() + eps * share).clamp_min(1e-30));
}

// The odds of taking a refusable offer of probability p under that mixture
// (a double when sampling, a tensor of them when scoring).
template <class Probability>
Probability explored_odds(const Probability& p, double eps) {
  return (1 - eps) * p + eps / 2;
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

// The positional prior's sharpness for `stages` stages of `layers` layers,
// ln(layers / stages) but at least 1/2, and its logit for group g of a layer
// centred on group c (prior_centre).
double prior_sharpness(int layers, int stages) {
  return std::max(0.5, std::log(static_cast<double>(std::max(1, layers)) / stages));
}
float prior_logit(double sharpness, int g, double c) { return static_cast<float>(-sharpness * (g - c) * (g - c)); }

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

// features | depth and its sin/cos | compute position (time, else FLOPs) and its sin/cos
constexpr int kLayerInputWidth =
    kLayerFeatureWidth + 1 + 2 * kPositionFrequencies + 1 + 2 * kComputeFrequencies;  // 50
constexpr int kGroupPositionWidth = 8;   // log2 G, g/(G-1) and its sin/cos at 3 frequencies
constexpr int kPairWidth = 5;            // per (group, device): load, memory, receive time, shared device, replica sync
constexpr int kBalanceWidth = 3;         // per replica offer: load per copy, against the others', with it
constexpr int kMicroSlots = 8;           // micro-batch counts 1, 2, 4, ..., 128
constexpr int kMicroHead = kMicroSlots + 1;  // and data parallelism
constexpr int kMicroInputExtra = kDeviceFeatureWidth + 4;  // mean device row, spread, batch, devices
// What the group queries see of the problem: the micro-batch head's view of
// the cluster, the fastest device's share, and the model's size (FLOPs,
// parameters, largest activation of a batch), so one network can cut a model
// into one stage for a cluster with a dominant device and into many for equals.
constexpr int kPartitionContextWidth = kMicroInputExtra + 4;

// The model's size for a batch, log-scaled to about [-1, 1]: GFLOPs, parameter
// MB, the largest layer output in MB (what a cut may have to send).
torch::Tensor model_size_row(const LayerTotals& t, int64_t batch) {
  double largest_output = 0;
  for (double mb : t.output_mb) largest_output = std::max(largest_output, mb);
  auto scaled = [](double v) { return static_cast<float>(std::clamp(std::log10(std::max(1e-3, v)) / 3.0, -1.0, 1.5)); };
  const double b = static_cast<double>(batch);
  return torch::tensor({scaled(t.total_gflops() * b), scaled(t.total_params_mb()), scaled(largest_output * b)});
}

// [log2 G / 4, x, sin/cos(2^k pi x) k = 0..2], x = g / (G - 1).
std::vector<float> group_positions(int G) {
  std::vector<float> v(static_cast<size_t>(G) * kGroupPositionWidth);
  for (int g = 0; g < G; ++g) {
    float* r = &v[static_cast<size_t>(g) * kGroupPositionWidth];
    const double x = G > 1 ? static_cast<double>(g) / (G - 1) : 0.0;
    r[0] = static_cast<float>(std::log2(static_cast<double>(G)) / 4.0);
    r[1] = static_cast<float>(x);
    for (int k = 0; k < 3; ++k) {
      const double w = 3.141592653589793 * static_cast<double>(1 << k) * x;
      r[2 + 2 * k] = static_cast<float>(std::sin(w));
      r[3 + 2 * k] = static_cast<float>(std::cos(w));
    }
  }
  return v;
}

// Whether items of these sizes (sorted here) can go into bins of these
// sizes (largest first), several in one bin where they add up within it:
// necessary, not sufficient. The items over the (k+1)-th largest bin can go
// only in the k largest, so they must fit in those together, for every k
// (and all of them in all the bins).
bool fit_together(std::vector<double>& items, const std::vector<double>& bins_largest_first) {
  std::sort(items.rbegin(), items.rend());
  const size_t K = bins_largest_first.size();
  double over = 0, within = 0;  // the items over bin k; the k largest bins together
  size_t n = 0;
  for (size_t k = 0; k <= K; ++k) {
    const double below = k < K ? bins_largest_first[k] : 0.0;
    while (n < items.size() && items[n] > below) over += items[n++];
    if (over > within) return false;
    if (k < K) within += bins_largest_first[k];
  }
  return true;
}

}  // namespace

class PolicyNetworks {
 public:
  PolicyNetworks(int hidden, double learning_rate) : hidden(hidden) {
    const int H = hidden;
    p1 = torch::nn::Linear(kLayerInputWidth, H);
    p2 = torch::nn::Linear(H, H);
    p3 = torch::nn::Linear(H, H);
    p_group1 = torch::nn::Linear(kGroupPositionWidth + kPartitionContextWidth, H);
    p_group2 = torch::nn::Linear(H, H);
    a_embed = torch::nn::Linear(kGroupFeatureWidth, H);
    a_q = torch::nn::Linear(H, H);
    a_k = torch::nn::Linear(H, H);
    a_v = torch::nn::Linear(H, H);
    a_pair1 = torch::nn::Linear(H + kDeviceFeatureWidth + kPairWidth, H);
    a_pair2 = torch::nn::Linear(H, 2);
    a_micro = torch::nn::Linear(H + kMicroInputExtra, kMicroHead);
    a_group_query = torch::nn::Linear(H, H);
    a_device_key = torch::nn::Linear(kDeviceFeatureWidth + kPairWidth, H);
    p_count1 = torch::nn::Linear(kGroupPositionWidth + kPartitionContextWidth, H);
    p_count2 = torch::nn::Linear(H, 1);
    a_balance = torch::nn::Linear(kBalanceWidth, 1);
    a_spread = torch::nn::Linear(H, 1);
    for (auto* lin : layers()) {
      params.push_back((*lin)->weight);
      params.push_back((*lin)->bias);
    }
    optimizer = std::make_unique<torch::optim::Adam>(params, torch::optim::AdamOptions(learning_rate));
  }

  std::vector<torch::nn::Linear*> layers() {
    // The stage-count head and the replica balance last: init draws the
    // weights in this order, so the others' (a fresh search's networks) did
    // not move when they came.
    return {&p1,       &p2,       &p3,        &p_group1, &p_group2, &a_embed,       &a_q,
            &a_k,      &a_v,      &a_pair1,   &a_pair2,  &a_micro,  &a_group_query, &a_device_key,
            &p_count1, &p_count2, &a_balance, &a_spread};
  }
  static std::vector<std::string> names() {
    return {"p1",       "p2",       "p3",        "p_group1", "p_group2", "a_embed",       "a_q",
            "a_k",      "a_v",      "a_pair1",   "a_pair2",  "a_micro",  "a_group_query", "a_device_key",
            "p_count1", "p_count2", "a_balance", "a_spread"};
  }
  // Heads a policy file may lack (written before they came): they keep their
  // initial weights (init_spread).
  static bool optional(const std::string& name) { return name == "a_spread"; }

  void init(uint64_t seed, double replica_bias) {
    torch::NoGradGuard ng;
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + 17);
    for (auto& p : params) {
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
    // Output layers start near uniform so the first samples explore; replicas
    // start rare (bias -2: p ~ 0.12 each), so the first proposals are mostly
    // plain pipelines and replication is learned where it pays.
    p3->weight.mul_(0.1);
    a_pair2->weight.mul_(0.1);
    a_micro->weight.mul_(0.1);
    a_group_query->weight.mul_(0.1);
    p_group2->weight.mul_(0.1);
    p_count2->weight.mul_(0.1);
    a_pair2->bias[1].fill_(replica_bias);
    // The balance starts neutral: the replica logits are the scorer's alone
    // until training weighs a group's load per copy.
    a_balance->weight.zero_();
    init_spread();
  }
  // Spreads start rarer than replicas (bias -3: p ~ 0.05 a group): at the
  // batch sizes most searches run, a fork's branches on other devices only
  // add transfers, and the policy learns to spread where it pays.
  void init_spread() {
    torch::NoGradGuard ng;
    a_spread->weight.mul_(0.1);
    a_spread->bias.fill_(-3.0);
  }

  int hidden;
  // The group queries: a hidden layer over [position | problem context], not a
  // linear map, since a context added to every query alike would cancel in the softmax.
  torch::nn::Linear p1{nullptr}, p2{nullptr}, p3{nullptr}, p_group1{nullptr}, p_group2{nullptr};
  torch::nn::Linear a_embed{nullptr}, a_q{nullptr}, a_k{nullptr}, a_v{nullptr};
  torch::nn::Linear a_pair1{nullptr}, a_pair2{nullptr}, a_micro{nullptr};
  // The device logit's second term: attention of the group's query on the
  // device's key (its row and the pair features), so a group can prefer a
  // device by what it is without the scorer's hidden layer learning the product.
  torch::nn::Linear a_group_query{nullptr}, a_device_key{nullptr};
  // The stage-count head (PolicyConfig::choose_stage_count): per count k a
  // hidden layer over the group queries' input of group k-1, one logit.
  torch::nn::Linear p_count1{nullptr}, p_count2{nullptr};
  // The replica balance (PolicyConfig::balance_replicas): a linear term of
  // each replica offer's logit over the group's load per copy at that offer.
  torch::nn::Linear a_balance{nullptr};
  // The spread head (PolicyConfig::forks): per group one logit over its embedding.
  torch::nn::Linear a_spread{nullptr};
  std::vector<torch::Tensor> params;
  std::unique_ptr<torch::optim::Adam> optimizer;
  // Optimizer steps taken: what a Policy's values derived from the weights (device_sized_cuts) are kept against.
  uint64_t steps = 0;
};

std::shared_ptr<PolicyNetworks> new_policy_networks(int hidden, double learning_rate, uint64_t seed,
                                                    double replica_bias) {
  auto n = std::make_shared<PolicyNetworks>(std::max(1, hidden), learning_rate);
  n->init(seed, replica_bias);
  return n;
}

int policy_hidden_width(const PolicyNetworks& networks) { return networks.hidden; }

std::shared_ptr<PolicyNetworks> clone_policy_networks(const PolicyNetworks& from, double learning_rate) {
  auto n = std::make_shared<PolicyNetworks>(from.hidden, learning_rate);
  torch::NoGradGuard ng;
  for (size_t i = 0; i < n->params.size(); ++i) n->params[i].copy_(from.params[i]);
  return n;
}

Status save_policy_networks(const PolicyNetworks& networks, const std::string& path, const nlohmann::json& trained_on) {
  const std::string tmp = path + ".tmp";
  try {
    torch::serialize::OutputArchive a;
    a.write("format", c10::IValue(std::string("tapp-policy")));
    a.write("feature_version", c10::IValue(static_cast<int64_t>(kPolicyFeatureVersion)));
    a.write("hidden", c10::IValue(static_cast<int64_t>(networks.hidden)));
    a.write("trained_on", c10::IValue(trained_on.dump()));
    auto& n = const_cast<PolicyNetworks&>(networks);
    const auto names = PolicyNetworks::names();
    const auto layers = n.layers();
    for (size_t i = 0; i < layers.size(); ++i) {
      a.write(names[i] + ".weight", (*layers[i])->weight.detach());
      a.write(names[i] + ".bias", (*layers[i])->bias.detach());
    }
    a.save_to(tmp);
  } catch (const std::exception& e) {
    std::remove(tmp.c_str());
    return Status::error(path + ": cannot write the policy: " + std::string(e.what()).substr(0, 200));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return Status::error(path + ": cannot write the policy (rename failed)");
  }
  return Status::ok();
}

Result<std::shared_ptr<PolicyNetworks>> load_policy_networks(const std::string& path, PolicyFileInfo* info) {
  Result<std::string> bytes = read_file(path);
  if (!bytes && bytes.status().code() == ErrorCode::not_found) return Status::error(path + ": no such policy file");
  if (!bytes) return bytes.status().with_context(path);
  return load_policy_bytes(*bytes, path, info);
}

Result<std::shared_ptr<PolicyNetworks>> load_policy_bytes(const std::string& bytes, const std::string& path,
                                                          PolicyFileInfo* info) {
  PolicyFileInfo read;
  std::shared_ptr<PolicyNetworks> n;
  try {
    torch::serialize::InputArchive a;
    std::istringstream stream(bytes);
    a.load_from(stream);
    c10::IValue v;
    if (!a.try_read("format", v) || !v.isString() || v.toStringRef() != "tapp-policy")
      return Status::error(path + ": not a TAPP policy file");
    if (!a.try_read("feature_version", v) || !v.isInt())
      return Status::error(path + ": policy file without a feature version");
    read.feature_version = static_cast<int>(v.toInt());
    if (read.feature_version != kPolicyFeatureVersion)
      return Status::error(path + ": policy of feature version " + std::to_string(read.feature_version) +
                           "; this TAPP reads version " + std::to_string(kPolicyFeatureVersion) +
                           " (train a new one with tapp-cli train-policy)");
    if (!a.try_read("hidden", v) || !v.isInt() || v.toInt() < 1 || v.toInt() > 4096)
      return Status::error(path + ": policy file without a valid hidden width");
    read.hidden = static_cast<int>(v.toInt());
    if (a.try_read("trained_on", v) && v.isString()) {
      read.trained_on = nlohmann::json::parse(v.toStringRef(), nullptr, false);
      if (read.trained_on.is_discarded()) read.trained_on = nullptr;
    }
    n = std::make_shared<PolicyNetworks>(read.hidden, PolicyConfig{}.learning_rate);
    {
      torch::NoGradGuard ng;
      n->a_spread->weight.zero_();  // what a file without the head gets: no spread unless trained
      n->init_spread();
    }
    const auto names = PolicyNetworks::names();
    const auto layers = n->layers();
    torch::NoGradGuard ng;
    for (size_t i = 0; i < layers.size(); ++i)
      for (const char* part : {".weight", ".bias"}) {
        torch::Tensor t;
        if (!a.try_read(names[i] + part, t)) {
          if (PolicyNetworks::optional(names[i])) continue;
          return Status::error(path + ": policy file lacks " + names[i] + part);
        }
        torch::Tensor& dst = std::string(part) == ".weight" ? (*layers[i])->weight : (*layers[i])->bias;
        if (t.sizes() != dst.sizes()) return Status::error(path + ": " + names[i] + part + " has the wrong shape");
        // A NaN or infinite weight makes every decision NaN: a corrupt file, whatever its format says.
        if (!t.isfinite().all().item<bool>())
          return Status::error(path + ": " + names[i] + part + " holds a NaN or infinite value (corrupt policy file)");
        dst.copy_(t);
      }
  } catch (const std::exception& e) {
    return Status::error(path + ": not a readable policy file (truncated or corrupt)");
  }
  if (info) *info = read;
  return n;
}

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
  m.layer_tied_copy_bytes.assign(graph.layers.size(), 0);
  for (const TiedTable& t : tied_tables(graph)) {
    m.layer_param_bytes[t.head] += t.bytes;
    m.layer_tied_copy_bytes[t.head] += t.bytes;
  }
  m.batch_size = batch_size;
  m.schedule = schedule;
  m.optimizer = optimizer;
  return m;
}

struct Policy::Impl {
  class AllocationMasks;  // below: the sequential masks of one joint action
  PolicyConfig cfg;
  std::vector<std::vector<int>> consumers;
  std::vector<std::vector<int>> producers;  // per layer: its inputs (earlier layers)
  FeatureMatrix layer_rows;
  int L = 0, G = 0, D = 0, M = 0;  // M: micro-batch choices (+ data parallel)
  std::vector<float> prior;  // L x G positional prior logits (contiguous mode)
  // The stage-count head (PolicyConfig::choose_stage_count in an ordered mode, G > 1).
  bool count_head = false;
  std::vector<double> prior_x;     // per layer: its position on the prior's axis (the head's priors)
  // Per stage count k: where the head's prior's k stages end (device_sized_cuts),
  // kept for the networks' weights after `sized_cuts_steps` optimizer steps.
  std::vector<std::optional<std::vector<double>>> sized_cuts;
  uint64_t sized_cuts_steps = 0;
  std::vector<int> suffix_stages;  // per layer i: the fewest groups layers i.. fit in (memory floors; else 1)
  torch::Tensor count_mask;        // G: kMasked on the counts below suffix_stages[0]
  bool all_masked = false;  // no device fits: nothing is masked
  // The least a group of layers needs on any device it runs on (policy.h's
  // memory masks, a lower bound of core's rule): the training state of its
  // weights and, for a micro-batch of `samples`, its kept activations and
  // backward's working memory (the largest weight's gradient, two of the
  // largest outputs). One per layer, summed into one per group.
  struct MemoryFloor {
    double state = 0, kept_per_sample = 0, largest_grad = 0, largest_output = 0;
    void add(const MemoryFloor& layer) {
      state += layer.state;
      kept_per_sample += layer.kept_per_sample;
      largest_grad = std::max(largest_grad, layer.largest_grad);
      largest_output = std::max(largest_output, layer.largest_output);
    }
    double bytes(double samples) const { return state + (kept_per_sample + 2 * largest_output) * samples + largest_grad; }
  };
  std::vector<MemoryFloor> layer_floor;  // empty: no memory masks
  std::vector<MemoryFloor> suffix_floor;  // per layer i: the floor of layers i.. in one group
  double floor_samples = 0;  // the smallest micro-batch any choice runs a group copy at
  std::vector<double> allowed_capacity;  // the allowed devices' bytes, largest first (memory masks only)
  bool replica_head = false;  // max_replicas > 0 and more than one device
  bool balance_head = false;  // PolicyConfig::balance_replicas with a replica head
  bool spread_head = false;   // PolicyConfig::forks and more than one device
  std::vector<int> device_class;  // per device: device_classes(), fixed by the config
  torch::Tensor layer_input;  // L x 50: features | depth | compute position
  torch::Tensor group_query_input;  // G x (8 + kPartitionContextWidth): position | problem context
  torch::Tensor device_rows;  // D x 7 (encode_devices)
  torch::Tensor micro_extra;  // mean device row | spread | log2 batch / 8 | log2 D / 4
  torch::Tensor micro_slots;  // M: the head's slot of each choice (data parallel last)
  torch::Tensor device_mask;  // D: 0 or kMasked
  double total_gflops = 0, total_compute = 0;
  int64_t batch = 32;
  std::shared_ptr<PolicyNetworks> net;

  torch::Tensor partition_logits() {
    auto h = torch::relu(net->p2(torch::relu(net->p1(layer_input))));
    auto q = net->p_group2(torch::relu(net->p_group1(group_query_input)));
    return torch::matmul(net->p3(h), q.t());
  }

  // The attended group embeddings of a partition (G x H) and its group stats.
  struct Groups {
    torch::Tensor h;
    GroupTotals stats;
    std::vector<float> micro_mask;  // M: micro_mask_row of the partition
  };
  Groups groups_of(const std::vector<int>& layer_group) {
    torch::Tensor stacked;
    return std::move(groups_of({&layer_group}, stacked)[0]);
  }
  // The groups of several partitions, embedded in one pass: `stacked` gets
  // the embeddings (n x G x H), and each Groups' h is its row.
  std::vector<Groups> groups_of(const std::vector<const std::vector<int>*>& partitions, torch::Tensor& stacked) {
    const auto n = static_cast<int64_t>(partitions.size());
    std::vector<Groups> out(partitions.size());
    auto features = torch::empty({n, G, kGroupFeatureWidth}, torch::kFloat32);
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<int>& layer_group = *partitions[i];
      out[i].stats = group_totals(cfg.totals, layer_group, G, consumers);
      const FeatureMatrix f = encode_groups(layer_rows, layer_group, out[i].stats);
      std::copy(f.data.begin(), f.data.end(), features.data_ptr<float>() + i * G * kGroupFeatureWidth);
      out[i].micro_mask = micro_mask_row(layer_group);
    }
    stacked = embed_groups(features);
    for (int64_t i = 0; i < n; ++i) out[i].h = stacked[i];
    return out;
  }
  // The attended group embeddings (... x G x H) of group features (... x G x F):
  // one partition, or a batch of them stacked in front.
  torch::Tensor embed_groups(const torch::Tensor& features) {
    auto e = torch::relu(net->a_embed(features));
    auto q = net->a_q(e), k = net->a_k(e), v = net->a_v(e);
    auto att = torch::softmax(torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(net->hidden)), -1);
    return e + torch::matmul(att, v);
  }

  // Logits of the micro-batch choices (M) given the groups, masked (micro_mask_row).
  torch::Tensor micro_logits(const Groups& gr) {
    auto logits = micro_head(gr.h);
    if (std::any_of(gr.micro_mask.begin(), gr.micro_mask.end(), [](float v) { return v != 0.f; }))
      logits = logits + torch::tensor(gr.micro_mask);
    return logits;
  }
  // The micro-batch head's additive mask (M) for a partition: the counts at
  // which a group would not fit (micro_memory_row), and data parallelism
  // where its replicas, one per non-empty group, would not (replicas_fit).
  std::vector<float> micro_mask_row(const std::vector<int>& layer_group) const {
    std::vector<float> row = micro_memory_row(layer_group);
    if (cfg.offer_data_parallel) {
      const auto used = nonempty(layer_group, G);
      if (!replicas_fit(static_cast<int>(std::count(used.begin(), used.end(), true)))) row[M - 1] += kMasked;
    }
    return row;
  }

  // The micro-batch head's logits of each choice (... x M, unmasked) from group
  // embeddings (... x G x H).
  torch::Tensor micro_head(const torch::Tensor& h) {
    auto mean = h.mean(-2);
    std::vector<int64_t> shape = mean.sizes().vec();
    shape.back() = micro_extra.size(0);
    auto all = net->a_micro(torch::cat({mean, micro_extra.expand(shape)}, -1));
    return all.index_select(-1, micro_slots);
  }

  // Whether k data-parallel replicas (one per non-empty group) at ceil(batch / k)
  // samples find k allowed devices that hold one (PolicyConfig::replica_fits).
  bool replicas_fit(int k) const {
    if (cfg.replica_fits.empty() || k < 1 || k > static_cast<int>(cfg.replica_fits.size())) return true;
    int fitting = 0;
    for (int d = 0; d < D; ++d) fitting += cfg.replica_fits[k - 1][d] && device_allowed(d) ? 1 : 0;
    return fitting >= k;
  }

  // Moving mb megabytes from a to b and mb back (latency and bandwidth of each
  // direction): equal to twice one way on a symmetric link.
  double round_trip_ms(int a, int b, double mb) const {
    const auto& t = cfg.devices;
    const size_t there = static_cast<size_t>(a) * D + b, back = static_cast<size_t>(b) * D + a;
    return t.link_latency_ms[there] + t.link_latency_ms[back] +
           mb * 8.0 * 1e3 * (1.0 / std::max(1e-3, t.link_mbps[there]) + 1.0 / std::max(1e-3, t.link_mbps[back]));
  }

  // Pair features of group g on each device, given the devices of the groups before it
  // (device[p] for p < g; producers placed later are not seen, so sampling and scoring agree).
  // for_replicas: the replica head's rows, where g's primary device[g] is
  // known (the device head scores g before it has one; feature 4 is 0 there).
  void pair_features(const GroupTotals& st, int g, const std::vector<int>& device, bool for_replicas, float* out) const {
    const auto& t = cfg.devices;
    for (int k = 0; k < D; ++k) {
      float* f = out + static_cast<size_t>(k) * kPairWidth;
      const double flops_share = total_gflops > 0 ? st.gflops[g] / total_gflops : 0.0;
      const double compute_share = total_compute > 0 ? t.compute[k] / total_compute : 1.0 / D;
      f[0] = flops_share > 0 ? static_cast<float>(std::clamp(std::log2(flops_share / compute_share) / 4.0, -2.0, 2.0))
                             : -2.f;
      f[1] = st.params_mb[g] > 0
                 ? static_cast<float>(std::clamp(std::log2(4.0 * st.params_mb[g] / std::max(1.0, t.memory_mb[k])) / 4.0,
                                                 -3.0, 1.0))
                 : -3.f;
      double receive_ms = 0;
      bool shared = false;
      for (int p = 0; p < g; ++p) {
        const double mb = st.received_mb[static_cast<size_t>(p) * G + g];
        if (mb <= 0 || device[p] < 0) continue;
        if (device[p] == k) {
          shared = true;
          continue;
        }
        // The activations come over p -> k and their gradients go back over
        // k -> p (feature version 10: counting p -> k twice told the networks that
        // a device after the fast end of an asymmetric link receives 4x cheaper
        // than the reverse order, where both pay each direction once).
        receive_ms += round_trip_ms(device[p], k, mb * batch);
      }
      f[2] = static_cast<float>(std::log10(1.0 + receive_ms) / 3.0);
      f[3] = shared ? 1.f : 0.f;
      // What a replica on k costs each step: the group's gradients over the
      // link from its primary and back (a two-device ring all-reduce), so the
      // replica head can tell a replica across a slow link from one on the
      // LAN (feature version 5: a policy trained without it replicated
      // resnet50 from the LAN onto a device behind a slow link, twice the best step).
      double sync_ms = 0;
      const int home = for_replicas ? device[g] : -1;
      if (home >= 0 && home != k && st.params_mb[g] > 0) sync_ms = round_trip_ms(home, k, st.params_mb[g]);
      f[4] = static_cast<float>(std::log10(1.0 + sync_ms) / 3.0);
    }
  }

  // pair_features of every group (G x D x kPairWidth at `out`).
  void pair_features_of_groups(const GroupTotals& st, const std::vector<int>& device, bool for_replicas,
                               float* out) const {
    for (int g = 0; g < G; ++g) pair_features(st, g, device, for_replicas, out + static_cast<size_t>(g) * D * kPairWidth);
  }
  // The scorer on group embeddings (... x H) and their pair features (... x D x
  // kPairWidth): ... x D x 2.
  torch::Tensor score_pairs(const torch::Tensor& group_h, const torch::Tensor& pairs) {
    std::vector<int64_t> shape = pairs.sizes().vec();
    shape.back() = net->hidden;
    auto h = group_h.unsqueeze(-2).expand(shape);
    shape.back() = kDeviceFeatureWidth;
    auto dev = device_rows.expand(shape);
    auto x = torch::cat({h, dev, pairs}, -1);
    auto out = net->a_pair2(torch::relu(net->a_pair1(x)));
    auto attention = (net->a_group_query(h) * net->a_device_key(torch::cat({dev, pairs}, -1))).sum(-1) /
                     std::sqrt(static_cast<double>(net->hidden));
    return torch::stack({out.select(-1, 0) + attention, out.select(-1, 1)}, -1);
  }

  int greedy_micro(const Groups& gr);

  class AllocationMasks;
  // The replica balance over one allocation's offers: each offer's features
  // (kBalanceWidth, log2 ratios, within +-3, of the group's FLOPs per unit of
  // the compute of the devices running it so far, as the masks count it:
  // against the model spread evenly over the cluster, against the slowest
  // other group, and with the offered device too against the even spread).
  class ReplicaBalance {
   public:
    ReplicaBalance(const Impl& m, const AllocationMasks& masks) : m_(m), masks_(masks) {}
    void features(int g, int k, float* out) const {
      const double even = m_.total_compute > 0 ? m_.total_gflops / m_.total_compute : 0.0;
      double slowest_other = 0;
      for (int h = 0; h < m_.G; ++h)
        if (masks_.in_use(h) && h != g) slowest_other = std::max(slowest_other, masks_.time_per_copy(h));
      const double own = masks_.time_per_copy(g);
      out[0] = ratio(own, even);
      out[1] = slowest_other > 0 ? ratio(own, slowest_other) : 3.f;  // the only group: the slowest
      out[2] = ratio(masks_.time_per_copy(g, m_.cfg.devices.compute[k]), even);
    }
    // The balance's term of the offer's logit, from the network's weights (no gradient).
    float shift(int g, int k) const {
      float f[kBalanceWidth];
      features(g, k, f);
      const float* w = m_.net->a_balance->weight.data_ptr<float>();
      float z = m_.net->a_balance->bias.data_ptr<float>()[0];
      for (int i = 0; i < kBalanceWidth; ++i) z += w[i] * f[i];
      return z;
    }

   private:
    static float ratio(double a, double b) {
      if (!(a > 0) || !(b > 0)) return -3.f;
      return static_cast<float>(std::clamp(std::log2(a / b), -3.0, 3.0));
    }
    const Impl& m_;
    const AllocationMasks& masks_;  // the groups in use, the devices taken so far
  };

  static std::vector<bool> nonempty(const std::vector<int>& layer_group, int groups) {
    std::vector<bool> used(groups, false);
    for (int g : layer_group) used[g] = true;
    return used;
  }

  // What the groups of a partition drawn so far need at least (layer by
  // layer, in order), for the partition's memory mask.
  class GroupFloors {
   public:
    explicit GroupFloors(const Impl& m) : m_(m), group_(m.layer_floor.empty() ? 0 : m.G) {}
    bool active() const { return !group_.empty(); }
    // Group g's floor at the smallest micro-batch were layer i to join it.
    double with(int i, int g) const {
      MemoryFloor f = group_[g];
      f.add(m_.layer_floor[i]);
      return f.bytes(m_.floor_samples);
    }
    void add(int i, int g) {
      top_ = std::max(top_, g);
      if (active()) group_[g].add(m_.layer_floor[i]);
    }
    // The highest group taken so far (-1 before the first layer).
    int top() const { return top_; }
    // The groups above top() that layers j.. need if they go on from top's
    // content in layer order, each group as long as it fits: what a
    // stage-count head's partition must leave room for (partition_row).
    int groups_after(int j) const {
      if (j >= m_.L) return 0;
      if (top_ < 0) return m_.suffix_stages[j];
      if (!active()) return 0;
      MemoryFloor all = group_[top_];
      all.add(m_.suffix_floor[j]);
      if (all.bytes(m_.floor_samples) <= m_.largest_device_bytes()) return 0;
      const int x = m_.first_overflow(group_[top_], j);
      return x < m_.L ? m_.suffix_stages[x] : 0;
    }

   private:
    const Impl& m_;
    std::vector<MemoryFloor> group_;
    int top_ = -1;
  };

  // The partition memory mask's per-layer floors (policy.h). Every choice
  // after the partition runs at least ceil(batch / max(micro-batches,
  // devices)) samples on a copy of a group (a replica or a data-parallel
  // copy takes at least one micro-batch, or its share of the batch), and
  // recomputation keeps at least one micro-batch's activations.
  void set_partition_floors() {
    const PolicyMemory& mem = cfg.memory;
    layer_floor.clear();
    allowed_capacity.clear();
    if (mem.empty()) return;
    for (int k = 0; k < D; ++k)
      if (device_allowed(k)) allowed_capacity.push_back(static_cast<double>(mem.device_bytes[k]));
    std::sort(allowed_capacity.rbegin(), allowed_capacity.rend());
    if (largest_device_bytes() <= 0) return;
    const int64_t copies = std::max<int64_t>(std::max(cfg.micro_batch_choices.back(), D), 1);
    floor_samples = static_cast<double>((mem.batch_size + copies - 1) / copies);
    layer_floor.resize(L);
    for (int i = 0; i < L; ++i) {
      const int64_t copy = mem.layer_tied_copy_bytes.size() == static_cast<size_t>(L) ? mem.layer_tied_copy_bytes[i] : 0;
      const int64_t own = std::max<int64_t>(0, mem.layer_param_bytes[i] - copy);
      layer_floor[i] = {static_cast<double>(training_state_bytes(own, mem.optimizer)),
                        static_cast<double>(mem.kept_bytes(i)), static_cast<double>(own),
                        static_cast<double>(mem.layer_activation_bytes[i])};
    }
  }

  // The micro-batch memory mask of a partition (M: 0 or kMasked): a count
  // is masked where its non-empty groups, even recomputing (one micro-batch
  // of ceil(batch / count) samples kept, and backward's working memory for
  // it), cannot go onto the allowed devices, several on one where their
  // needs add up (fit_together): replicas share micro-batches but never
  // shrink one, and a group's primary holds it whole. Not "each group a
  // device of its own" (the r-th largest need on the r-th largest device):
  // the allocation's mask repeats a device where no free one holds a group,
  // and that rule masked every count of 582 of 962 partitions of gpt2 on
  // edge_uplinks (an 8 GB server and edge devices of 1 GB or less), where
  // the mask then gave way and the draw took counts at which no device held
  // the groups, though at 16 or 32 micro-batches the server holds them all.
  // Not where every count would be masked; data parallelism keeps
  // replicas_fit.
  std::vector<float> micro_memory_row(const std::vector<int>& layer_group) const {
    std::vector<float> row(M, 0.f);
    if (layer_floor.empty()) return row;
    std::vector<MemoryFloor> group(G);
    std::vector<bool> used(G, false);
    for (int i = 0; i < L; ++i) {
      group[layer_group[i]].add(layer_floor[i]);
      used[layer_group[i]] = true;
    }
    const int counts = static_cast<int>(cfg.micro_batch_choices.size());
    const int64_t batch_size = cfg.memory.batch_size;
    int masked = 0;
    std::vector<double> need;
    for (int j = 0; j < counts; ++j) {
      const int64_t m = std::max(1, cfg.micro_batch_choices[j]);
      const double samples = static_cast<double>((batch_size + m - 1) / m);
      need.clear();
      for (int g = 0; g < G; ++g)
        if (used[g]) need.push_back(group[g].bytes(samples));
      if (!fit_together(need, allowed_capacity)) {
        row[j] = kMasked;
        ++masked;
      }
    }
    if (masked == counts) std::fill(row.begin(), row.begin() + counts, 0.f);
    return row;
  }

  // The largest allowed device's bytes (0 without memory masks).
  double largest_device_bytes() const { return allowed_capacity.empty() ? 0.0 : allowed_capacity.front(); }

  // Layer i's additive partition row (G) for a partition into `stages`
  // groups: kMasked below `lo`, with the stage-count head from `stages` on
  // (the last layer: all but stages - 1) and on a group after which the
  // layers from i on would not fit in the groups left (leaves_room), and on
  // the groups it would make too big for every device (unless every group
  // still open would be, as when the layer alone is); else the positional prior.
  void partition_row(int i, int lo, int stages, const std::vector<double>& cuts, const GroupFloors& floors,
                     float* row) const {
    const int hi = count_head ? stages : G;
    const bool last = count_head && i == L - 1;
    const Room room = count_head ? Room(*this, i, floors) : Room{};
    // The head's prior: `stages` stages along the prior's axis ending at `cuts`
    // (device_sized_cuts; none: equal stages), else the fixed `prior`.
    const double sharpness = count_head ? prior_sharpness(L, stages) : 0;
    const double centre = count_head ? prior_centre(cuts, stages, prior_x[i]) : 0;
    for (int g = 0; g < G; ++g) {
      const bool open = g >= lo && g < hi && (!last || g == hi - 1) && (!count_head || room.leaves(g, hi));
      row[g] = !open ? kMasked : count_head ? prior_logit(sharpness, g, centre) : prior[static_cast<size_t>(i) * G + g];
    }
    if (!floors.active() || cfg.partition == PartitionMode::free) return;
    const double cap = largest_device_bytes();
    bool any_fits = false;
    for (int g = lo; g < G; ++g) any_fits = any_fits || (row[g] != kMasked && floors.with(i, g) <= cap);
    if (!any_fits) return;
    for (int g = lo; g < G; ++g)
      if (floors.with(i, g) > cap) row[g] = kMasked;
  }

  // Whether layer i in group g leaves the layers after it room in groups
  // below `stages`, going on in layer order from the highest group's content
  // (a completion that every ordered mode allows). Kept from the first layer
  // on (the count mask), it always leaves a fitting group open: the highest,
  // where layer i fits with it, else the next one up. Two scans a layer
  // (GroupFloors::groups_after), whatever the number of groups.
  struct Room {
    Room() = default;
    Room(const Impl& m, int i, const GroupFloors& floors)
        : top(floors.top()), from_i(m.suffix_stages[i]), here(floors.groups_after(i)), next(floors.groups_after(i + 1)) {}
    bool leaves(int g, int stages) const {
      if (g > top) return g + from_i <= stages;     // a new highest group, from layer i on
      if (g == top) return top + here <= stages - 1;  // i goes on in it where it fits
      return top + next <= stages - 1;              // a branch joins a lower group
    }
    int top = -1, from_i = 1, here = 0, next = 0;
  };

  // The groups a partition may use: with the head, its last layer's group + 1.
  int stages_of(const std::vector<int>& layer_group) const {
    if (!count_head || layer_group.size() != static_cast<size_t>(L)) return G;
    return std::clamp(layer_group[L - 1] + 1, 1, G);
  }

  // Per layer i the fewest groups layers i.. fit in, under the partition's
  // floors, greedily in layer order (each group as long as it fits; exact
  // for contiguous groups, whose floor only grows with a layer): the head's
  // count mask and its rule that a layer opens group g only where g +
  // suffix_stages[i] <= k. A layer that fits nowhere alone takes a group.
  void set_stage_floors() {
    suffix_stages.assign(static_cast<size_t>(L), 1);
    count_mask = torch::zeros({G});
    if (!count_head || layer_floor.empty()) return;
    suffix_floor.assign(static_cast<size_t>(L), MemoryFloor{});
    for (int i = L - 1; i >= 0; --i) {
      suffix_floor[i] = layer_floor[i];
      if (i + 1 < L) suffix_floor[i].add(suffix_floor[i + 1]);
    }
    for (int i = L - 1; i >= 0; --i) {
      const int j = first_overflow(layer_floor[i], i + 1);
      suffix_stages[i] = 1 + (j < L ? suffix_stages[j] : 0);
    }
    if (suffix_stages[0] > G) return;  // no count fits: none is masked
    if (suffix_stages[0] > 1) count_mask.slice(0, 0, suffix_stages[0] - 1).fill_(kMasked);
  }

  // The first layer x >= j at which a group holding `group` and layers j..x
  // would pass the largest device (L if none does).
  int first_overflow(MemoryFloor group, int j) const {
    for (; j < L; ++j) {
      group.add(layer_floor[j]);
      if (group.bytes(floor_samples) > largest_device_bytes()) return j;
    }
    return L;
  }

  // The stage-count head's logits (G: counts 1..G), masked.
  torch::Tensor count_logits() {
    auto z = net->p_count2(torch::relu(net->p_count1(group_query_input))).squeeze(1);
    return z + count_mask;
  }
  // Per stream its stage count, drawn (a stream) or the likeliest (null); G without the head.
  std::vector<int> choose_stages(const std::vector<std::mt19937_64*>& rngs) {
    if (!count_head) return std::vector<int>(rngs.size(), G);
    auto p = torch::softmax(count_logits(), 0).contiguous();
    std::vector<int> stages;
    for (std::mt19937_64* rng : rngs)
      stages.push_back(1 + (rng ? draw(p.data_ptr<float>(), G, *rng) : argmax(p.data_ptr<float>(), G)));
    return stages;
  }

  // Where the stage-count head's prior's k stages end along its axis: each
  // stage as large as its devices' share of the compute of all the devices
  // the allocation gives k equal stages (its typical choice, by class: each
  // stage's device and replicas), in that order. So the stages' sizes follow
  // the devices the networks put them on (a fast device mid-chain: a large
  // middle stage; three copies of a stage beside one: three times its size);
  // sized largest first instead (version 9), they disagreed with the
  // allocation. Equal devices, one each: equal stages. Kept until the weights change.
  const std::vector<double>& device_sized_cuts(int stages) {
    static const std::vector<double> kEqualStages;
    if (!count_head || stages < 2 || stages > G) return kEqualStages;
    if (sized_cuts.empty() || sized_cuts_steps != net->steps) {
      sized_cuts.assign(static_cast<size_t>(G) + 1, std::nullopt);
      sized_cuts_steps = net->steps;
    }
    auto& cached = sized_cuts[stages];
    if (!cached) cached = cuts_on_allocated_devices(stages);
    return *cached;
  }

  std::vector<double> cuts_on_allocated_devices(int stages) {
    torch::NoGradGuard ng;
    // k equal stages on the prior's axis (non-decreasing in layer order, so
    // every ordered mode allows them); a stage with no layer: equal stages.
    std::vector<int> equal(L);
    for (int i = 0; i < L; ++i) equal[i] = std::clamp(static_cast<int>(prior_x[i] * stages), 0, stages - 1);
    const std::vector<bool> used = nonempty(equal, stages);
    if (std::find(used.begin(), used.end(), false) != used.end()) return {};
    Groups gr = groups_of(equal);
    const int micro = greedy_micro(gr);
    AllocationMasks masks(*this, equal, micro);
    const std::vector<int> device = allocate(gr, equal, masks, nullptr, nullptr, true);
    // A stage's replicas share its micro-batches, so its compute is theirs too
    // (data parallelism's copies hold the whole model: no stage of their own).
    const auto replicas = is_data_parallel(micro) ? std::vector<std::vector<int>>(G)
                                                  : choose_replicas(gr, equal, device, masks, nullptr);
    std::vector<double> ends(static_cast<size_t>(stages));  // the compute of stages 0..g
    for (int g = 0; g < stages; ++g) {
      double compute = std::max(0.0, cfg.devices.compute[device[g]]);
      for (int k : replicas[g]) compute += std::max(0.0, cfg.devices.compute[k]);
      ends[g] = (g > 0 ? ends[g - 1] : 0.0) + compute;
    }
    if (!(ends.back() > 0)) return {};
    std::vector<double> cuts;
    for (int g = 0; g + 1 < stages; ++g) cuts.push_back(ends[g] / ends.back());
    return cuts;
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

  // Additive mask (L x G) of an ordered partition: each layer's partition_row,
  // replayed in the order the layers were drawn.
  std::vector<float> order_rows(const std::vector<int>& layer_group, const std::vector<double>& cuts) const {
    std::vector<float> m(static_cast<size_t>(L) * G);
    GroupFloors floors(*this);
    const int stages = stages_of(layer_group);
    for (int i = 0; i < L; ++i) {
      partition_row(i, lowest_group(i, layer_group), stages, cuts, floors, &m[static_cast<size_t>(i) * G]);
      floors.add(i, layer_group[i]);
    }
    return m;
  }

  bool device_allowed(int k) const { return cfg.device_allowed.empty() || cfg.device_allowed[k] || all_masked; }

  int micro_batches_of(int micro_index) const {
    const auto& c = cfg.micro_batch_choices;
    return c[std::clamp(micro_index, 0, static_cast<int>(c.size()) - 1)];
  }
  bool is_data_parallel(int micro_index) const {
    return cfg.offer_data_parallel && micro_index == static_cast<int>(cfg.micro_batch_choices.size());
  }

  // What scoring a batch reads of its decisions, laid out per decision (the
  // leading N) before any network runs: every mask a choice was drawn under
  // (AllocationMasks replays them), every choice, and the networks' inputs.
  struct ScoreInputs {
    torch::Tensor part_mask;       // N x L x G, undefined in free mode
    torch::Tensor part_idx;        // N x L: each layer's group
    torch::Tensor stages;          // N: stage count - 1
    torch::Tensor micro_idx;       // N
    torch::Tensor micro_mask;      // N x M (micro_mask_row)
    torch::Tensor group_features;  // N x G x kGroupFeatureWidth
    torch::Tensor device_pairs;    // N x G x D x kPairWidth: the device head's pair features
    torch::Tensor device_masked;   // N x G x D: each group's allocation mask as drawn
    torch::Tensor chosen;          // N x G: its device (0 for an empty group)
    torch::Tensor used;            // N x G: 1 for a group with a layer
    // With a replica head: its pair features, each offer the masks made (refusable)
    // and whether it was taken, and (balance head) each offer's balance features.
    torch::Tensor replica_pairs, offered, taken, balanced;
    // With a spread head: per group whether it was offered a spread, and taken.
    torch::Tensor spread_offered, spread_taken;  // N x G
  };

  ScoreInputs lay_out(const std::vector<const Decision*>& ds) {
    const int64_t N = static_cast<int64_t>(ds.size());
    auto floats = [](std::initializer_list<int64_t> shape) { return torch::zeros(shape, torch::kFloat32); };
    auto longs = [](std::initializer_list<int64_t> shape) { return torch::zeros(shape, torch::kInt64); };
    ScoreInputs in;
    if (cfg.partition != PartitionMode::free) in.part_mask = floats({N, L, G});
    in.part_idx = longs({N, L});
    in.stages = longs({N});
    in.micro_idx = longs({N});
    in.micro_mask = floats({N, M});
    in.group_features = floats({N, G, kGroupFeatureWidth});
    in.device_pairs = floats({N, G, D, kPairWidth});
    in.device_masked = floats({N, G, D});
    in.chosen = longs({N, G});
    in.used = floats({N, G});
    if (replica_head) {
      in.replica_pairs = floats({N, G, D, kPairWidth});
      in.offered = floats({N, G, D});
      in.taken = floats({N, G, D});
      if (balance_head) in.balanced = floats({N, G, D, kBalanceWidth});
    }
    if (spread_head) {
      in.spread_offered = floats({N, G});
      in.spread_taken = floats({N, G});
    }
    for (int64_t n = 0; n < N; ++n) lay_out_one(*ds[n], n, in);
    return in;
  }

  void lay_out_one(const Decision& d, int64_t n, ScoreInputs& in) {
    const size_t LG = static_cast<size_t>(L) * G, GD = static_cast<size_t>(G) * D;
    const int stages = stages_of(d.layer_group);
    if (in.part_mask.defined()) {
      const std::vector<float> rows = order_rows(d.layer_group, device_sized_cuts(stages));
      std::copy(rows.begin(), rows.end(), in.part_mask.data_ptr<float>() + n * LG);
    }
    std::copy(d.layer_group.begin(), d.layer_group.end(), in.part_idx.data_ptr<int64_t>() + n * L);
    in.stages.data_ptr<int64_t>()[n] = stages - 1;
    in.micro_idx.data_ptr<int64_t>()[n] = d.micro_batch_index;
    const std::vector<float> micro_mask = micro_mask_row(d.layer_group);
    std::copy(micro_mask.begin(), micro_mask.end(), in.micro_mask.data_ptr<float>() + n * M);
    const GroupTotals totals = group_totals(cfg.totals, d.layer_group, G, consumers);
    const FeatureMatrix gf = encode_groups(layer_rows, d.layer_group, totals);
    std::copy(gf.data.begin(), gf.data.end(), in.group_features.data_ptr<float>() + n * G * kGroupFeatureWidth);
    float* pairs = in.device_pairs.data_ptr<float>() + n * GD * kPairWidth;
    pair_features_of_groups(totals, d.group_device, false, pairs);
    const auto used = nonempty(d.layer_group, G);
    AllocationMasks masks(*this, d.layer_group, d.micro_batch_index);
    float* rows = in.device_masked.data_ptr<float>() + n * GD;
    int64_t* chosen = in.chosen.data_ptr<int64_t>() + n * G;
    float* used_n = in.used.data_ptr<float>() + n * G;
    for (int g = 0; g < G; ++g) {
      masks.primary_row(g, rows + g * D);
      masks.take_primary(g, d.group_device[g]);
      chosen[g] = used[g] ? d.group_device[g] : 0;
      used_n[g] = used[g] ? 1.f : 0.f;
    }
    if (spread_head) {
      const std::vector<bool> offered = spread_offers(d);
      for (int g = 0; g < G; ++g) {
        in.spread_offered.data_ptr<float>()[n * G + g] = offered[g] ? 1.f : 0.f;
        in.spread_taken.data_ptr<float>()[n * G + g] = d.spreads(g) ? 1.f : 0.f;
      }
    }
    if (!replica_head) return;
    float* rpairs = in.replica_pairs.data_ptr<float>() + n * GD * kPairWidth;
    pair_features_of_groups(totals, d.group_device, true, rpairs);
    // Each replica choice the masks offered: a Bernoulli, taken or not; a
    // forced one (the only way left for its group to fit) is no choice.
    float* off = in.offered.data_ptr<float>() + n * GD;
    float* yes = in.taken.data_ptr<float>() + n * GD;
    float* bal = balance_head ? in.balanced.data_ptr<float>() + n * GD * kBalanceWidth : nullptr;
    std::optional<ReplicaBalance> balance;
    if (balance_head) balance.emplace(*this, masks);
    offer_replicas(masks, [&](int g, int k, bool refusable) {
      const size_t at = static_cast<size_t>(g) * D + k;
      off[at] = refusable ? 1.f : 0.f;
      yes[at] = has_replica(d, g, k) ? 1.f : 0.f;
      if (balance) balance->features(g, k, bal + at * kBalanceWidth);
      return yes[at] > 0.f;
    });
  }

  // near_group's groups for every layer of every decision laid out (N x L x G, 0 or 1).
  torch::Tensor near_groups(const ScoreInputs& in) const {
    const int64_t N = in.part_idx.size(0);
    const auto previous =
        torch::cat({torch::zeros({N, 1}, torch::kInt64), in.part_idx.slice(1, 0, L - 1)}, 1).unsqueeze(2);
    const auto k = torch::arange(G, torch::kInt64).view({1, 1, G});
    const auto open = in.part_mask > kMasked / 2;
    const auto near = open & ((k == previous) | (k == previous + 1));
    return torch::where(near.any(2, true), near, open).to(torch::kFloat32);
  }

  // log pi(d) and entropy (with gradient) of each decision (N of them: N and
  // N), given the partition logits: every choice in the order it is drawn
  // (policy.h), under the masks it was drawn with. The inputs are laid out
  // first (lay_out), then each network runs once over all of them: one
  // autograd graph for a batch (one per decision made the update most of the
  // search's time).
  std::pair<torch::Tensor, torch::Tensor> score(const std::vector<const Decision*>& ds,
                                                const torch::Tensor& part_logits, Odds odds = Odds::drawn) {
    const ScoreInputs in = lay_out(ds);
    const int64_t N = static_cast<int64_t>(ds.size());
    const bool drawn = odds == Odds::drawn;
    const double eps = drawn ? cfg.explore : 0, eps_partition = drawn ? cfg.explore_partition : 0;
    // Where the policy explores: a categorical choice's log-probability under
    // the mixture, its open choices those its masks leave in `masked_logits`.
    const auto drawn_logp = [eps](const torch::Tensor& logp, const torch::Tensor& masked_logits,
                                  int64_t dim) {
      return eps > 0 ? explored_logp(logp, (masked_logits > kMasked / 2).to(torch::kFloat32), dim, eps)
                     : logp;
    };
    const auto explored_bernoulli = [eps](const torch::Tensor& log_p) {
      return eps > 0 ? torch::log(explored_odds(log_p.exp(), eps)) : log_p;
    };
    auto part_logp = in.part_mask.defined() ? torch::log_softmax(part_logits.unsqueeze(0) + in.part_mask, 2)
                                            : torch::log_softmax(part_logits, 1).unsqueeze(0).expand({N, L, G});
    const auto part_explored = in.part_mask.defined() && eps_partition > 0
                                   ? explored_logp(part_logp, near_groups(in), 2, eps_partition)
                                   : part_logp;
    auto lp = part_explored.gather(2, in.part_idx.unsqueeze(2)).squeeze(2).sum(1);
    auto ent = -(part_logp.exp() * part_logp).sum({1, 2});
    if (count_head) {
      auto count_logp = torch::log_softmax(count_logits(), 0);
      lp = lp + count_logp.index_select(0, in.stages);
      ent = ent - (count_logp.exp() * count_logp).sum();
    }
    auto h = embed_groups(in.group_features);  // N x G x H
    auto micro_logp = torch::log_softmax(micro_head(h) + in.micro_mask, 1);
    lp = lp + drawn_logp(micro_logp, in.micro_mask, 1).gather(1, in.micro_idx.unsqueeze(1)).squeeze(1);
    ent = ent - (micro_logp.exp() * micro_logp).sum(1);

    auto device_logits = score_pairs(h, in.device_pairs).select(3, 0) + device_mask;
    const auto masked_devices = device_logits + in.device_masked;
    auto dev_logp = torch::log_softmax(masked_devices, 2);
    lp = lp + (drawn_logp(dev_logp, masked_devices, 2).gather(2, in.chosen.unsqueeze(2)).squeeze(2) * in.used)
                  .sum(1);
    ent = ent - ((dev_logp.exp() * dev_logp).sum(2) * in.used).sum(1);
    if (replica_head) {
      auto replica = score_pairs(h, in.replica_pairs).select(3, 1);
      if (balance_head) replica = replica + net->a_balance(in.balanced).squeeze(3);
      auto log_yes = torch::log_sigmoid(replica), log_no = torch::log_sigmoid(-replica);
      lp = lp + (in.offered *
                 (in.taken * explored_bernoulli(log_yes) + (1 - in.taken) * explored_bernoulli(log_no)))
                    .sum({1, 2});
      ent = ent - (in.offered * (log_yes.exp() * log_yes + log_no.exp() * log_no)).sum({1, 2});
    }
    if (spread_head) {
      auto spread = net->a_spread(h).squeeze(2);
      auto log_yes = torch::log_sigmoid(spread), log_no = torch::log_sigmoid(-spread);
      const auto& off = in.spread_offered;
      lp = lp + (off * (in.spread_taken * explored_bernoulli(log_yes) +
                        (1 - in.spread_taken) * explored_bernoulli(log_no)))
                    .sum(1);
      ent = ent - (off * (log_yes.exp() * log_yes + log_no.exp() * log_no)).sum(1);
    }
    return {lp, ent};
  }
  // One decision's log pi and entropy (scalars).
  std::pair<torch::Tensor, torch::Tensor> score(const Decision& d, const torch::Tensor& part_logits,
                                                Odds odds = Odds::drawn) {
    auto [lp, ent] = score({&d}, part_logits, odds);
    return {lp[0], ent[0]};
  }

  // Replicas are offered device by device (policy.h): each device, in index
  // order, to the groups that may take it, fewest copies first (then by id);
  // the first that takes it holds it. A group for which it is the only way
  // left to fit is offered it first, as a forced choice. Drawn group by group,
  // the first group that wanted replicas took every free device (gpt2 on 8
  // devices: 6 copies of one stage beside two single ones). `offer(g, k,
  // refusable)` says whether g takes k; sampling and scoring share this order.
  // With ReplicaOffers::heaviest_first the group with the most FLOPs per
  // unit of its devices' compute goes first: a device goes where it shortens
  // the slowest group most, so a heavy group's copies are not held to the
  // count of a light one's (alexnet on seven devices of speeds 0.53-0.86 on
  // one network: conv1-conv5 on six weighed by speed, the rest on the
  // seventh, 786.7 ms, where fewest copies first left the policy's best at
  // four groups of 3, 1, 2 and 1 copies, 872.3 ms; docs/placer.md).
  template <class Offer>
  void offer_replicas(AllocationMasks& masks, Offer offer) const {
    std::vector<int> order(G);
    const bool heaviest = cfg.replica_offers == ReplicaOffers::heaviest_first;
    for (int k = 0; k < D; ++k) {
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        if (heaviest && masks.time_per_copy(a) != masks.time_per_copy(b))
          return masks.time_per_copy(a) > masks.time_per_copy(b);
        return masks.copies(a) < masks.copies(b);
      });
      bool held = false;
      for (int g : order)
        if (masks.replica_allowed(g, k) && !masks.replica_refusable(g, k)) {
          held = offer(g, k, false);
          if (held) masks.take_replica(g, k);
          break;
        }
      for (size_t i = 0; i < order.size() && !held; ++i) {
        const int g = order[i];
        if (!masks.replica_allowed(g, k)) continue;
        held = offer(g, k, masks.replica_refusable(g, k));
        if (held) masks.take_replica(g, k);
      }
    }
  }

  // Per device the lowest index of a device interchangeable with it: the same
  // traits and permission, the same links both ways between them and to and
  // from every other device. Swapping two such devices leaves the cluster as
  // it was, so any permutation within a class does.
  std::vector<int> device_classes() const {  // once, in the constructor: device_class
    const DeviceTraits& t = cfg.devices;
    auto link_equal = [&](int a, int b, int x, int y) {  // link a->b equals link x->y
      return t.link_mbps[static_cast<size_t>(a) * D + b] == t.link_mbps[static_cast<size_t>(x) * D + y] &&
             t.link_latency_ms[static_cast<size_t>(a) * D + b] == t.link_latency_ms[static_cast<size_t>(x) * D + y];
    };
    auto swappable = [&](int a, int b) {
      if (t.compute[a] != t.compute[b] || t.memory_mb[a] != t.memory_mb[b] || t.gpu[a] != t.gpu[b] ||
          t.threads[a] != t.threads[b] || device_allowed(a) != device_allowed(b) || !link_equal(a, b, b, a))
        return false;
      if (!cfg.memory.empty() && cfg.memory.device_bytes[a] != cfg.memory.device_bytes[b]) return false;
      for (const auto& fits : cfg.replica_fits)
        if (fits.size() == static_cast<size_t>(D) && fits[a] != fits[b]) return false;
      for (int x = 0; x < D; ++x)
        if (x != a && x != b && !(link_equal(a, x, b, x) && link_equal(x, a, x, b))) return false;
      return true;
    };
    std::vector<int> cls(D);
    for (int k = 0; k < D; ++k) {
      cls[k] = k;
      for (int r = 0; r < k; ++r)
        if (cls[r] == r && swappable(r, k)) {
          cls[k] = r;
          break;
        }
    }
    return cls;
  }

  // The lowest unmasked device of the class with the most probability (a
  // trained network may give that member almost none: the class is the choice).
  static int class_argmax(const std::vector<float>& p, const std::vector<bool>& open, const std::vector<int>& cls) {
    std::vector<double> mass(p.size(), 0.0);
    for (size_t k = 0; k < p.size(); ++k) mass[cls[k]] += p[k];
    const int best = static_cast<int>(std::max_element(mass.begin(), mass.end()) - mass.begin());
    for (size_t k = 0; k < p.size(); ++k)
      if (cls[k] == best && open[k]) return static_cast<int>(k);
    return argmax(p.data(), static_cast<int>(p.size()));
  }

  // `d` with its devices renamed within classes of interchangeable devices,
  // in the order the policy draws them: each non-empty group, in id order,
  // renames its device to the lowest of its class not yet given; then each
  // device, in the order replicas are offered, goes to the first group offered
  // it that still runs a replica on that class. The same placement, up to
  // symmetry, in the one form the policy can learn from any expert (one
  // planner's stages on dev4, dev3, ..., another's on a random order).
  // Nullopt where the masks do not replay it (the caller keeps `d`).
  std::optional<Decision> canonical(const Decision& d) {
    if (static_cast<int>(d.group_device.size()) != G || static_cast<int>(d.layer_group.size()) != L)
      return std::nullopt;
    const std::vector<int>& cls = device_class;
    const auto used = nonempty(d.layer_group, G);
    Decision c = d;
    std::vector<int> renamed(D, -1);
    std::vector<bool> given(D, false);
    for (int g = 0; g < G; ++g) {
      if (!used[g]) continue;
      const int k = d.group_device[g];
      if (k < 0 || k >= D) return std::nullopt;
      if (renamed[k] < 0) {
        int to = cls[k];
        while (given[to] || cls[to] != cls[k]) ++to;  // k's class has a free member: k itself is not given
        renamed[k] = to;
        given[to] = true;
      }
      c.group_device[g] = renamed[k];
    }
    c.group_replicas.assign(G, {});
    const bool replicated = std::any_of(d.group_replicas.begin(), d.group_replicas.end(),
                                        [](const std::vector<int>& r) { return !r.empty(); });
    if (replicated) {
      if (!replica_head) return std::nullopt;
      std::vector<int> wanted(static_cast<size_t>(G) * D, 0);  // [group][class]: replicas still to place
      for (int g = 0; g < static_cast<int>(d.group_replicas.size()) && g < G; ++g)
        for (int k : d.group_replicas[g]) {
          if (k < 0 || k >= D) return std::nullopt;
          ++wanted[static_cast<size_t>(g) * D + cls[k]];
        }
      AllocationMasks masks(*this, c.layer_group, c.micro_batch_index);
      for (int g = 0; g < G; ++g) masks.take_primary(g, c.group_device[g]);
      offer_replicas(masks, [&](int g, int k, bool) {
        int& left = wanted[static_cast<size_t>(g) * D + cls[k]];
        if (left == 0) return false;
        --left;
        c.group_replicas[g].push_back(k);
        return true;
      });
      if (std::any_of(wanted.begin(), wanted.end(), [](int w) { return w > 0; })) return std::nullopt;
    }
    // Nothing renamed (every class a single device, or already canonical): `d`
    // either way, so the caller's own check stands and no scoring is needed.
    if (c.group_device == d.group_device && c.group_replicas == d.group_replicas) return c;
    if (!allows(c)) return std::nullopt;
    return c;
  }

  // Whether the masks allow every choice of `d`: a masked choice adds kMasked
  // to its logit, so its log probability is about kMasked; any real one is far
  // above a thousandth of it.
  bool allows(const Decision& d) {
    return score(d, partition_logits(), Odds::networks).first.item<double>() > kMasked / 1000;
  }

  static bool has_replica(const Decision& d, int g, int k) {
    if (d.group_replicas.size() <= static_cast<size_t>(g)) return false;
    const auto& r = d.group_replicas[g];
    return std::find(r.begin(), r.end(), k) != r.end();
  }

  // Per stream a partition into stages[k] groups (the head's; else G), drawn
  // (a stream) or by argmax at every layer (null), each layer under the masks
  // of the layers before it; the logits once for all.
  std::vector<std::vector<int>> choose_partitions(const std::vector<std::mt19937_64*>& rngs,
                                                  const std::vector<int>& stages) {
    std::vector<std::vector<int>> partitions(rngs.size());
    if (cfg.partition == PartitionMode::free) {
      auto pp = torch::softmax(partition_logits(), 1).contiguous();
      const float* p = pp.data_ptr<float>();
      for (size_t k = 0; k < rngs.size(); ++k) {
        partitions[k].resize(L);
        for (int i = 0; i < L; ++i) partitions[k][i] = rngs[k] ? draw(p + i * G, G, *rngs[k]) : argmax(p + i * G, G);
      }
      return partitions;
    }
    auto lg = partition_logits().contiguous();
    for (size_t k = 0; k < rngs.size(); ++k)
      partitions[k] = choose_ordered_partition(lg.data_ptr<float>(), rngs[k], stages[k], device_sized_cuts(stages[k]));
    return partitions;
  }

  // The groups an exploring draw of a layer picks from (PolicyConfig::explore_partition):
  // its predecessor's group and the next, where the layer's row leaves them
  // open; else every open group. A predicate over the groups, asked only when
  // the draw explores (about once a decision), not a list built for every layer.
  auto near_group(const float* row, int previous) const {
    const auto open = [row](int k) { return row[k] > kMasked / 2; };
    const bool any_near = open(previous) || (previous + 1 < G && open(previous + 1));
    return [open, any_near, previous](int k) {
      return open(k) && (!any_near || k == previous || k == previous + 1);
    };
  }

  // choose_partition of the ordered modes, from the partition logits z (L x G).
  std::vector<int> choose_ordered_partition(const float* z, std::mt19937_64* rng, int stages,
                                            const std::vector<double>& cuts) const {
    std::vector<int> layer_group(L);
    std::vector<float> p(G), row(G);
    GroupFloors floors(*this);
    for (int i = 0; i < L; ++i) {
      partition_row(i, lowest_group(i, layer_group), stages, cuts, floors, row.data());
      masked_softmax(z + static_cast<size_t>(i) * G, row.data(), p.data());
      if (rng && cfg.explore_partition > 0) {
        layer_group[i] = draw_exploring(p.data(), G, cfg.explore_partition, *rng,
                                        near_group(row.data(), i > 0 ? layer_group[i - 1] : 0));
      } else {
        layer_group[i] = rng ? draw(p.data(), G, *rng) : argmax(p.data(), G);
      }
      floors.add(i, layer_group[i]);
    }
    return layer_group;
  }

  // p = softmax(z + row) over the entries row does not mask.
  void masked_softmax(const float* z, const float* row, float* p) const {
    double mx = -1e30;
    for (int g = 0; g < G; ++g)
      if (row[g] != kMasked) mx = std::max(mx, static_cast<double>(z[g] + row[g]));
    double sum = 0;
    for (int g = 0; g < G; ++g) {
      p[g] = row[g] == kMasked ? 0.f : static_cast<float>(std::exp(z[g] + row[g] - mx));
      sum += p[g];
    }
    for (int g = 0; g < G; ++g) p[g] = static_cast<float>(p[g] / sum);
  }

  // The typical partition (free mode: the argmax): each layer's median group over
  // kMedianDraws partitions drawn with a fixed seed, kept to the masks in
  // order (the allowed group nearest the median). Not the argmax at every
  // layer: the network gives each layer the odds of opening a group given
  // that it was not opened before, and where it is unsure at which of n
  // layers to cut, each has odds about 1/n, so the argmax cuts late or never
  // (a neutral network's argmax is its positional prior's stages exactly,
  // which the search's restarts rely on; its draws cut earlier).
  // Every draw puts a layer at or above its inputs' groups, so the medians do
  // too: the median partition keeps the draws' order.
  std::vector<int> median_partition(int stages) {
    if (cfg.partition == PartitionMode::free) return choose_partitions({nullptr}, {stages})[0];  // group ids have no order
    auto logits = partition_logits().contiguous();
    const std::vector<double>& cuts = device_sized_cuts(stages);
    std::mt19937_64 rng(kMedianSeed);
    std::vector<int> count(static_cast<size_t>(L) * G, 0);
    for (int s = 0; s < kMedianDraws; ++s) {
      const std::vector<int> lg = choose_ordered_partition(logits.data_ptr<float>(), &rng, stages, cuts);
      for (int i = 0; i < L; ++i) ++count[static_cast<size_t>(i) * G + lg[i]];
    }
    std::vector<int> layer_group(L);
    std::vector<float> row(G);
    GroupFloors floors(*this);
    for (int i = 0; i < L; ++i) {
      int median = 0;
      for (int seen = 0; median < G; ++median) {
        seen += count[static_cast<size_t>(i) * G + median];
        if (2 * seen >= kMedianDraws) break;
      }
      partition_row(i, lowest_group(i, layer_group), stages, cuts, floors, row.data());
      layer_group[i] = nearest_allowed(row.data(), std::min(median, G - 1));
      floors.add(i, layer_group[i]);
    }
    return layer_group;
  }

  // The unmasked entry of `row` nearest `g` (the higher on a tie).
  int nearest_allowed(const float* row, int g) const {
    for (int step = 0; step < G; ++step) {
      if (g + step < G && row[g + step] != kMasked) return g + step;
      if (g - step >= 0 && row[g - step] != kMasked) return g - step;
    }
    return g;
  }

  // Joint actions, one per stream of `rngs`: drawn (a stream), the argmax at
  // every step (null), or with `typical` (null streams) the median partition
  // and then the argmax at every step. Each is drawn from its own stream
  // alone, in the order policy.h gives, so it does not depend on the others
  // in the batch; the networks run once a step for the whole batch (one
  // sample at a time, sampling was most of the search's policy time once the
  // update was batched).
  std::vector<Decision> choose(const std::vector<std::mt19937_64*>& rngs, bool typical = false) {
    // Inference mode, not just no gradient: nothing drawn here is kept for a
    // backward pass, and skipping autograd's bookkeeping made the search's
    // policy time 0.96x (inception_v3 on cluster_4hetero; the same decisions).
    c10::InferenceMode inference;
    const size_t n = rngs.size();
    std::vector<Decision> ds(n);
    // The stage count and the partition: their logits do not depend on the sample.
    const std::vector<int> stages = choose_stages(rngs);
    if (typical) {
      for (size_t i = 0; i < n; ++i) ds[i].layer_group = median_partition(stages[i]);
    } else {
      std::vector<std::vector<int>> partitions = choose_partitions(rngs, stages);
      for (size_t i = 0; i < n; ++i) ds[i].layer_group = std::move(partitions[i]);
    }
    std::vector<const std::vector<int>*> partitions(n);
    for (size_t i = 0; i < n; ++i) partitions[i] = &ds[i].layer_group;
    torch::Tensor h;
    const std::vector<Groups> groups = groups_of(partitions, h);
    // The micro-batch count first: the memory masks and the replica cap depend on it.
    auto micro_masks = torch::empty({static_cast<int64_t>(n), M}, torch::kFloat32);
    for (size_t i = 0; i < n; ++i)
      std::copy(groups[i].micro_mask.begin(), groups[i].micro_mask.end(), micro_masks.data_ptr<float>() + i * M);
    auto mp = torch::softmax(micro_head(h) + micro_masks, 1).contiguous();
    std::vector<AllocationMasks> masks;
    masks.reserve(n);
    std::vector<Draft> drafts(n);
    for (size_t i = 0; i < n; ++i) {
      const float* p = mp.data_ptr<float>() + i * M;
      const auto open = [&](int k) { return groups[i].micro_mask[k] > kMasked / 2; };
      ds[i].micro_batch_index = rngs[i] ? draw_exploring(p, M, cfg.explore, *rngs[i], open) : argmax(p, M);
      masks.emplace_back(*this, ds[i].layer_group, ds[i].micro_batch_index);
      drafts[i] = {rngs[i], &ds[i], &groups[i], &masks[i]};
    }
    allocate(drafts, h, nullptr, typical);
    choose_replicas(drafts, h);
    choose_spreads(drafts, h);
    return ds;
  }

  // One joint action of a batch being drawn (choose): its stream (null: the
  // argmax), its decision so far, its groups and its allocation's masks.
  struct Draft {
    std::mt19937_64* rng = nullptr;
    Decision* d = nullptr;
    const Groups* gr = nullptr;
    AllocationMasks* masks = nullptr;
  };

  // One draft's allocation or replicas (the rest of the policy asks for one partition's).
  std::vector<int> allocate(const Groups& gr, const std::vector<int>& layer_group, AllocationMasks& masks,
                            std::mt19937_64* rng, std::vector<std::vector<float>>* probs, bool by_class = false) {
    Decision d;
    d.layer_group = layer_group;
    std::vector<Draft> one{{rng, &d, &gr, &masks}};
    allocate(one, gr.h.unsqueeze(0), probs, by_class);
    return d.group_device;
  }
  std::vector<std::vector<int>> choose_replicas(const Groups& gr, const std::vector<int>& layer_group,
                                                const std::vector<int>& device, AllocationMasks& masks,
                                                std::mt19937_64* rng) {
    Decision d;
    d.layer_group = layer_group;
    d.group_device = device;
    std::vector<Draft> one{{rng, &d, &gr, &masks}};
    choose_replicas(one, gr.h.unsqueeze(0));
    return d.group_replicas;
  }

  // Each draft's replicas (drawn, or each offer taken at odds above one
  // half without a stream), offered in its masks after its primaries; `h`:
  // the drafts' group embeddings (n x G x H).
  void choose_replicas(std::vector<Draft>& drafts, const torch::Tensor& h) {
    const auto n = static_cast<int64_t>(drafts.size());
    for (Draft& dr : drafts) dr.d->group_replicas.assign(G, {});
    if (!replica_head || n == 0) return;
    const size_t GD = static_cast<size_t>(G) * D;
    auto pairs = torch::empty({n, G, D, kPairWidth}, torch::kFloat32);
    for (int64_t i = 0; i < n; ++i)
      pair_features_of_groups(drafts[i].gr->stats, drafts[i].d->group_device, true,
                              pairs.data_ptr<float>() + i * GD * kPairWidth);
    // The logits with the balance (its term changes offer by offer), else the probabilities.
    auto z = score_pairs(h, pairs).select(3, 1);
    z = (balance_head ? z : torch::sigmoid(z)).contiguous();
    for (int64_t i = 0; i < n; ++i) {
      Draft& dr = drafts[i];
      const float* q = z.data_ptr<float>() + i * GD;
      std::optional<ReplicaBalance> balance;
      if (balance_head) balance.emplace(*this, *dr.masks);
      auto& replicas = dr.d->group_replicas;
      offer_replicas(*dr.masks, [&](int g, int k, bool refusable) {
        const double u = dr.rng ? std::uniform_real_distribution<double>(0.0, 1.0)(*dr.rng) : 0.5;
        const float p = balance ? 1.f / (1.f + std::exp(-(q[g * D + k] + balance->shift(g, k)))) : q[g * D + k];
        const bool take = !refusable || u < explored_odds(p, cfg.explore);
        if (take) replicas[g].push_back(k);
        return take;
      });
    }
  }

  // Per group whether `d` offers it a spread (PolicyConfig::forks): the
  // decision is not data parallel and the group holds some fork whole.
  std::vector<bool> spread_offers(const Decision& d) const {
    std::vector<bool> offered(G, false);
    if (!spread_head || is_data_parallel(d.micro_batch_index)) return offered;
    for (const ParallelBranches& fork : cfg.forks)
      if (const int g = group_holding(fork, d.layer_group); g >= 0) offered[g] = true;
    return offered;
  }

  // Each draft's spreads (drawn, or taken at odds above one half without a
  // stream), group by group where offered; a stream draws only for an offer.
  void choose_spreads(std::vector<Draft>& drafts, const torch::Tensor& h) {
    if (!spread_head || drafts.empty()) return;
    const auto p = torch::sigmoid(net->a_spread(h).squeeze(2)).contiguous();  // n x G
    for (size_t i = 0; i < drafts.size(); ++i) {
      Decision& d = *drafts[i].d;
      d.group_spread.assign(G, 0);
      const std::vector<bool> offered = spread_offers(d);
      for (int g = 0; g < G; ++g) {
        if (!offered[g]) continue;
        const double u =
            drafts[i].rng ? std::uniform_real_distribution<double>(0.0, 1.0)(*drafts[i].rng) : 0.5;
        d.group_spread[g] = u < explored_odds(p.data_ptr<float>()[i * G + g], cfg.explore) ? 1 : 0;
      }
    }
  }

  // Each draft's device of each group in id order (drawn, or the argmax
  // without a stream), each scored knowing the devices of the groups before
  // it and taken in the draft's masks (which the replicas then continue
  // from); one pass of the scorer a group for the whole batch. `h`: the
  // drafts' group embeddings (n x G x H); `probs` (optional, one draft) gets
  // each group's distribution under its masks.
  // `by_class` (no rng): each group takes the class of interchangeable
  // devices (device_classes) with the most probability, at its lowest free
  // member: the form train-policy imitates (canonical), where the argmax of
  // single devices splits between members (0.46 / 0.54 for dev2 / dev3 of
  // four equal devices left the stage on dev3 and dev2 idle).
  void allocate(std::vector<Draft>& drafts, const torch::Tensor& h, std::vector<std::vector<float>>* probs,
                bool by_class = false) {
    const size_t n = drafts.size();
    std::vector<std::vector<bool>> used(n);
    for (size_t i = 0; i < n; ++i) {
      used[i] = nonempty(drafts[i].d->layer_group, G);
      drafts[i].d->group_device.assign(G, -1);
    }
    std::vector<float> row(D), p(D);
    std::vector<bool> open(D);
    std::vector<int64_t> scored;  // the drafts whose group g has a layer
    std::vector<float> pf;
    for (int g = 0; g < G; ++g) {
      scored.clear();
      for (size_t i = 0; i < n; ++i) {
        if (used[i][g]) {
          scored.push_back(static_cast<int64_t>(i));
          continue;
        }
        drafts[i].d->group_device[g] = 0;  // not scored
        if (probs) probs->push_back(std::vector<float>(D, 1.f / D));
      }
      if (scored.empty()) continue;
      const auto R = static_cast<int64_t>(scored.size());
      pf.resize(static_cast<size_t>(R) * D * kPairWidth);
      for (int64_t r = 0; r < R; ++r) {
        const Draft& dr = drafts[scored[r]];
        pair_features(dr.gr->stats, g, dr.d->group_device, false, &pf[static_cast<size_t>(r) * D * kPairWidth]);
      }
      auto pairs = torch::from_blob(pf.data(), {R, D, kPairWidth}, torch::kFloat32);
      auto group_h = h.select(1, g).index_select(0, torch::tensor(scored, torch::kInt64));
      auto z = (score_pairs(group_h, pairs).select(2, 0) + device_mask).contiguous();
      for (int64_t r = 0; r < R; ++r) {
        Draft& dr = drafts[scored[r]];
        const float* zp = z.data_ptr<float>() + r * D;
        dr.masks->primary_row(g, row.data());
        double mx = -1e30;
        for (int k = 0; k < D; ++k) mx = std::max(mx, static_cast<double>(zp[k]) + row[k]);
        double sum = 0;
        for (int k = 0; k < D; ++k) {
          p[k] = static_cast<float>(std::exp(zp[k] + row[k] - mx));
          sum += p[k];
        }
        for (int k = 0; k < D; ++k) p[k] = static_cast<float>(p[k] / sum);
        const bool classes = by_class && !dr.rng;
        const auto is_open = [&](int k) { return zp[k] + row[k] > kMasked / 2; };
        if (classes)
          for (int k = 0; k < D; ++k) open[k] = is_open(k);
        const int k = dr.rng    ? draw_exploring(p.data(), D, cfg.explore, *dr.rng, is_open)
                      : classes ? class_argmax(p, open, device_class)
                                : argmax(p.data(), D);
        dr.d->group_device[g] = k;
        if (probs) probs->push_back(p);
        dr.masks->take_primary(g, k);
      }
    }
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
          replica_devices_(m.G),
          device_of_(m.G, -1),
          in_cycle_(m.groups_in_cycle(layer_group)) {
      // core's rule counts the stages as the distinct devices in use; the
      // non-empty groups are at least as many, and more stages never keep
      // fewer micro-batches in flight, so the mask is never laxer than
      // check_memory. Data parallelism trains one replica per non-empty group.
      stages_ = static_cast<int>(std::count(used_.begin(), used_.end(), true));
      group_gflops_.assign(m.G, 0.0);
      group_compute_.assign(m.G, 0.0);
      if (m.cfg.totals.gflops.size() == layer_group.size())
        for (size_t i = 0; i < layer_group.size(); ++i) group_gflops_[layer_group[i]] += m.cfg.totals.gflops[i];
      if (m.cfg.memory.empty() || data_parallel_) return;
      const PolicyMemory& mem = m.cfg.memory;
      state_bytes_.assign(m.G, 0.0);
      activation_bytes_.assign(m.G, 0.0);
      boundary_bytes_.assign(m.G, 0.0);
      pair_bytes_.assign(static_cast<size_t>(m.G) * m.G, 0.0);
      device_param_.assign(m.D, 0.0);
      device_output_.assign(m.D, 0.0);
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
            // core counts it at p's first reader on another device: it is saved
            // by sharing g's device only when g is p's one reading group.
            if (reading_groups(p, layer_group) == 1) pair_bytes_[static_cast<size_t>(layer_group[p]) * m.G + g] += out;
          }
        }
      }
      samples_ = static_cast<double>((mem.batch_size + micro_batches_ - 1) / micro_batches_);
      mark_groups_that_must_recompute();
    }

    // A group that fits no allowed device without recomputing, at the most
    // copies it may run on and with the device to itself, recomputes in every
    // plan that runs (the measurer's recompute_where_needed marks it, as the
    // planners do): its masks count it recomputing, one micro-batch's
    // activations kept. Without this, the whole of gpt2 at batch 32 on 4 GB
    // devices fitted nowhere, its mask was lifted onto one device, and its
    // replicas (which PipeDream's plan takes, recomputing, at a quarter of the
    // step) were never offered. Every other group is counted as before.
    void mark_groups_that_must_recompute() {
      must_recompute_.assign(m_.G, false);
      // At most the allowed devices the other non-empty groups' primaries leave (gpt2 on 8
      // devices: a last stage that fits at 8 copies, in 3 stages, never gets more than 6).
      int allowed = 0;
      for (int k = 0; k < m_.D; ++k) allowed += m_.device_allowed(k) ? 1 : 0;
      const int reachable = std::max(1, allowed - (stages_ - 1));
      const int copies = m_.replica_head ? std::min(most_copies(), reachable) : 1;
      for (int g = 0; g < m_.G; ++g) {
        if (!used_[g]) continue;
        const double least = bytes(g, copies) + workspace_of(largest_param_[g], largest_output_[g]);
        must_recompute_[g] = least > m_.largest_device_bytes();
      }
    }

    // How many groups other than its own read layer p's output.
    int reading_groups(int p, const std::vector<int>& layer_group) const {
      std::vector<int> groups;
      for (int j : m_.consumers[p])
        if (layer_group[j] != layer_group[p] && std::find(groups.begin(), groups.end(), layer_group[j]) == groups.end())
          groups.push_back(layer_group[j]);
      return static_cast<int>(groups.size());
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
      if (data_parallel_) return mask_replica_devices(row);
      if (state_bytes_.empty()) return;
      // Memory: the devices still offered that fit the group; if none does,
      // any allowed device that fits (a repeat); if none, no memory mask
      // (the measurer then reports the proposal out of memory).
      // (Each device's fit once: how_it_fits looks ahead at every later group.)
      thread_local std::vector<char> fits;
      fits.resize(m_.D);
      bool offered = false, anywhere = false;
      for (int k = 0; k < m_.D; ++k) {
        fits[k] = m_.device_allowed(k) && how_it_fits(g, k) != Fit::none;
        offered = offered || (row[k] == 0.f && fits[k]);
        anywhere = anywhere || fits[k];
      }
      if (offered) {
        for (int k = 0; k < m_.D; ++k)
          if (!fits[k]) row[k] = kMasked;
        return;
      }
      if (anywhere) {
        for (int k = 0; k < m_.D; ++k) row[k] = fits[k] ? 0.f : kMasked;
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

    // Data parallelism: the devices still offered that hold a replica at the
    // share of its `stages_` replicas (core's rule); none: no mask (the
    // measurer then reports the proposal out of memory).
    void mask_replica_devices(float* row) const {
      const auto& fits = m_.cfg.replica_fits;
      if (fits.empty() || stages_ < 1 || stages_ > static_cast<int>(fits.size())) return;
      const std::vector<bool>& holds = fits[stages_ - 1];
      bool any = false;
      for (int k = 0; k < m_.D; ++k) any = any || (row[k] == 0.f && holds[k] && m_.device_allowed(k));
      if (!any) return;
      for (int k = 0; k < m_.D; ++k)
        if (!holds[k]) row[k] = kMasked;
    }

    void take_primary(int g, int k) {
      if (!used_[g]) return;
      taken_[k] = true;
      device_of_[g] = k;
      group_compute_[g] += m_.cfg.devices.compute[k];
      if (state_bytes_.empty()) return;
      // A group that fits its device only recomputing recomputes (the
      // measurer's recompute_where_needed marks it, as the planners do): its
      // load, and its replicas', are counted so. Before, the device was masked,
      // and every classical plan that recomputes a stage was one the policy
      // could not draw (33 of the 460 training problems lost their expert).
      // So does one that leaves later groups room only recomputing
      // (how_it_fits), and one on a device the mask gave way to that it
      // overfills as it is (core recomputes there first).
      const Fit fit = how_it_fits(g, k);
      if (fit == Fit::recomputing || (fit == Fit::none && !fits_on(g, k))) must_recompute_[g] = true;
      load_[k] = with_primary(g, k) - workspace_with(g, k);
      note_workspace(g, k);
    }

    // Whether group g has a layer; how many devices run it so far (its primary and its replicas).
    bool in_use(int g) const { return used_[g]; }
    int copies(int g) const { return 1 + replicas(g); }
    // Group g's FLOPs over the compute of the devices running it so far
    // (with `extra_compute`: one device more); 0 without FLOPs.
    double time_per_copy(int g, double extra_compute = 0.0) const {
      return group_gflops_[g] / std::max(1e-12, group_compute_[g] + extra_compute);
    }

    // Whether device k is one a replica of g may go to at all: a device no
    // group holds, or (replicas_on_held_devices; not for data parallelism,
    // whose replicas are whole models) any device that runs no copy of g.
    bool offered_to(int g, int k) const {
      if (!m_.cfg.replicas_on_held_devices || data_parallel_) return !taken_[k];
      const auto& copies = replica_devices_[g];
      return device_of_[g] != k && std::find(copies.begin(), copies.end(), k) == copies.end();
    }

    // Whether device k may take a replica of group g (devices in index order,
    // offer_replicas). With memory masks, only where some completion of g's
    // replicas still fits: a group whose share of the micro-batches fits
    // only once it has several replicas (PipeDream's replicated stages on
    // small devices) must be able to get there one replica at a time.
    bool replica_allowed(int g, int k) const {
      if (!m_.replica_head || !used_[g] || in_cycle_[g] || !offered_to(g, k) || !m_.device_allowed(k) ||
          m_.all_masked)
        return false;
      if (replicas(g) >= m_.cfg.max_replicas) return false;
      if (data_parallel_) return data_parallel_replica_fits(k);
      if (replicas(g) + 2 > micro_batches_) return false;
      return state_bytes_.empty() || completion_fits(g, k, true);
    }

    // Data parallelism: one more whole-model replica on device k (offered like
    // any replica; whichever group takes it, it trains a whole replica), where
    // k holds it at the share of one more than the devices taken so far and
    // every replica keeps a sample. Without these, a data-parallel decision
    // had one replica per non-empty group: tiny_inception's zero-shot plan on
    // four equal devices was BSP over the two of its two groups (+63.9%).
    // The devices taken before hold theirs at that smaller share too.
    bool data_parallel_replica_fits(int k) const {
      const int after = static_cast<int>(std::count(taken_.begin(), taken_.end(), true)) + 1;
      if (after > m_.batch) return false;
      const auto& fits = m_.cfg.replica_fits;
      return fits.empty() || (after <= static_cast<int>(fits.size()) && fits[after - 1][k]);
    }

    // Where replica_allowed(g, k): whether g may go without a replica on k
    // (false: the replica is forced, as the only way left for g to fit).
    bool replica_refusable(int g, int k) const { return state_bytes_.empty() || completion_fits(g, k, false); }

    void take_replica(int g, int k) {
      const int r = 1 + replicas(g);
      if (!state_bytes_.empty()) {
        // g's bytes stay counted at its current number of copies on each of its devices.
        const double shrink = bytes(g, r + 1) - bytes(g, r);
        const int home = device_of_[g];
        if (home >= 0) load_[home] += shrink + (replicas(g) == 0 ? shared_bytes(g, home) : 0.0);
        for (int d : replica_devices_[g]) load_[d] += shrink;
      }
      taken_[k] = true;
      group_compute_[g] += m_.cfg.devices.compute[k];
      replica_devices_[g].push_back(k);
      if (!state_bytes_.empty()) add(g, 1 + replicas(g), k);
    }

   private:
    // core's rule for group g on one of its r replicas (the job optimizer's state): its
    // training state, its activations for its own share of the micro-batches
    // in flight and the buffers it receives for each of its micro-batches;
    // the device's working memory (its largest layer's) is kept per device.
    // The buffers are counted as if every producer and consumer of another
    // group ran on another device: where they share one, core counts none, so
    // the mask is at most stricter than check_memory, never laxer (a group
    // that must recompute: than check_memory once recompute_where_needed ran).
    // `recompute`: as if g recomputed (one micro-batch's activations kept).
    double bytes(int g, int r, bool recompute = false) const {
      const int own = (micro_batches_ + r - 1) / r;
      const int64_t kept =
          must_recompute_[g] || recompute ? 1 : micro_batches_in_flight(m_.cfg.memory.schedule, own, stages_);
      return state_bytes_[g] + activation_bytes_[g] * samples_ * static_cast<double>(kept) + buffer_bytes(g, r);
    }
    // Of bytes(g, r): the buffers of g's micro-batches on one of its r copies.
    double buffer_bytes(int g, int r) const { return boundary_bytes_[g] * samples_ * ((micro_batches_ + r - 1) / r); }
    // At least core's working memory: backward's weight and activation gradients, with Adam's two
    // update temporaries of the largest weight on top (core counts them only where they pass
    // what backward held), so the mask is never laxer.
    // Core takes a device's largest weight and largest output over all its
    // groups, each on its own (workspace_bytes), so two groups on one device
    // need more than the larger of their own workspaces.
    double workspace_of(double largest_param, double largest_output) const {
      const double updates = m_.cfg.memory.optimizer == Optimizer::adam ? 2 : 1;
      return updates * largest_param + 2 * largest_output * samples_;
    }
    double device_workspace(int k) const { return workspace_of(device_param_[k], device_output_[k]); }
    // Device k's workspace with group g on it too.
    double workspace_with(int g, int k) const {
      return workspace_of(std::max(device_param_[k], largest_param_[g]), std::max(device_output_[k], largest_output_[g]));
    }
    void note_workspace(int g, int k) {
      device_param_[k] = std::max(device_param_[k], largest_param_[g]);
      device_output_[k] = std::max(device_output_[k], largest_output_[g]);
    }
    // How group g fits device k leaving every later group a device
    // (later_groups_still_fit) as it is, or only recomputing: g recomputes
    // where it fits k only so, or where, kept whole, it would crowd a later
    // group out of the only device that holds it (gpt2 at 32 micro-batches
    // on edge_uplinks: its first group, kept whole, took 6.8 of the server's
    // 8.6 GB, and its last group, which only the server holds, fitted nowhere:
    // the mask gave way on most proposals). core's recompute_where_needed
    // recomputes a device's groups, the most activations first, until it
    // fits, so counting g recomputing is never laxer than check_memory then.
    enum class Fit { none, as_is, recomputing };
    Fit how_it_fits(int g, int k) const {
      if (fits_on(g, k) && later_groups_still_fit(g, k)) return Fit::as_is;
      if (fits_on(g, k, true) && later_groups_still_fit(g, k, true)) return Fit::recomputing;
      return Fit::none;
    }
    // Whether, with group g on device k (`recompute`: g recomputing), every
    // later group still fits on some allowed device, each alone and all of
    // them together (later_groups_fit_together): a look-ahead, so an early
    // group does not take the room a later, larger one fits in (a dead end
    // where the mask could only give up). O(G D) a query, so it is skipped
    // above 16 groups x 16 devices.
    bool later_groups_still_fit(int g, int k, bool recompute = false) const {
      if (m_.G * m_.D > 256) return true;
      for (int h = g + 1; h < m_.G; ++h) {
        if (!used_[h]) continue;
        // h beside g on k: the workspace of all three maxima, over what g alone on k already counts.
        const double extra_workspace =
            workspace_of(std::max({device_param_[k], largest_param_[g], largest_param_[h]}),
                         std::max({device_output_[k], largest_output_[g], largest_output_[h]})) -
            workspace_with(g, k);
        bool somewhere = false;
        for (int j = 0; j < m_.D && !somewhere; ++j) {
          if (!m_.device_allowed(j)) continue;
          // h fits j plainly or recomputing (bytes(h, 1, true) is the smaller),
          // less the buffers it would exchange with the groups there.
          const double need = j == k ? with_primary(g, k, recompute) + bytes(h, 1, true) - shared_bytes(h, k) -
                                           pair_buffer_bytes(g, h) + std::max(0.0, extra_workspace)
                                     : with_primary(h, j, true);
          somewhere = need <= capacity(j);
        }
        if (!somewhere) return false;
      }
      return later_groups_fit_together(g, k, recompute);
    }
    // With group g on device k, whether the later groups, each recomputing,
    // go together onto the room the devices have left (fit_together): one at
    // a time above, each of three groups of gpt2 found room on the server
    // while all of them did not, and the last was left to an edge device it
    // overfilled. Without the buffers g and the later groups receive, which
    // core does not count where they share a device, as they do on a server
    // beside small devices.
    bool later_groups_fit_together(int g, int k, bool recompute) const {
      thread_local std::vector<double> need, room;
      need.clear();
      room.clear();
      for (int h = g + 1; h < m_.G; ++h)
        if (used_[h]) need.push_back(bytes(h, 1, true) - buffer_bytes(h, 1));
      if (need.empty()) return true;
      const double on_k = with_primary(g, k, recompute) - buffer_bytes(g, 1);
      for (int j = 0; j < m_.D; ++j)
        if (m_.device_allowed(j))
          room.push_back(std::max(0.0, capacity(j) - (j == k ? on_k : load_[j] + device_workspace(j))));
      std::sort(room.rbegin(), room.rend());
      return fit_together(need, room);
    }
    // Bytes per step of the buffers between g and the groups already on device
    // k without replicas, which core does not count while they share it.
    double shared_bytes(int g, int k) const {
      double b = 0;
      for (int h = 0; h < m_.G; ++h)
        if (h != g && device_of_[h] == k && replicas(h) == 0) b += pair_buffer_bytes(g, h);
      return b;
    }
    // Bytes per step of the buffers between groups g and h, both ways.
    double pair_buffer_bytes(int g, int h) const {
      return (pair_bytes_[static_cast<size_t>(g) * m_.G + h] + pair_bytes_[static_cast<size_t>(h) * m_.G + g]) * samples_ *
             micro_batches_;
    }
    // Whether g with its primary on k could fit once replicated: at some
    // number of copies k holds its share and enough free devices besides k,
    // after one for each later group's primary, hold theirs.
    bool fits_replicated(int g, int k, bool recompute = false) const {
      if (!m_.replica_head || data_parallel_ || in_cycle_[g] || m_.cfg.max_replicas < 1) return false;
      int later_groups = 0;
      for (int h = g + 1; h < m_.G; ++h) later_groups += used_[h];
      for (int copies = 2; copies <= most_copies(); ++copies)
        if (with(g, copies, k, recompute) <= capacity(k) &&
            candidates(g, copies, 0, k, recompute) - later_groups >= copies - 1)
          return true;
      return false;
    }
    // Whether g's devices so far (its primary's and its replicas') hold it
    // when it runs on `copies` devices (each with that share of the micro-batches).
    bool fits_at(int g, int copies) const {
      const double change = bytes(g, copies) - bytes(g, 1 + replicas(g));
      const int home = device_of_[g];
      const double crossing = replicas(g) == 0 && copies > 1 && home >= 0 ? shared_bytes(g, home) : 0.0;
      if (home >= 0 && load_[home] + change + crossing + device_workspace(home) > capacity(home)) return false;
      for (int d : replica_devices_[g])
        if (load_[d] + change + device_workspace(d) > capacity(d)) return false;
      return true;
    }
    int replicas(int g) const { return static_cast<int>(replica_devices_[g].size()); }
    // The most copies a group may run on: its replicas, each with at least one micro-batch.
    int most_copies() const { return std::min(1 + m_.cfg.max_replicas, micro_batches_); }
    // Free allowed devices from index `from` on, other than `except`, that
    // would hold a replica of g at `copies` copies.
    int candidates(int g, int copies, int from, int except, bool recompute = false) const {
      int n = 0;
      for (int j = from; j < m_.D; ++j)
        if (j != except && !taken_[j] && m_.device_allowed(j) && with(g, copies, j, recompute) <= capacity(j)) ++n;
      return n;
    }
    // Whether, after deciding device k (a replica there or not), some number
    // of copies reachable with the devices after k fits g on all of them.
    bool completion_fits(int g, int k, bool take_k) const {
      const int now = 1 + replicas(g) + (take_k ? 1 : 0);
      for (int copies = now; copies <= most_copies(); ++copies) {
        if (take_k && with(g, copies, k) > capacity(k)) continue;
        if (fits_at(g, copies) && candidates(g, copies, k + 1, k) >= copies - now) return true;
      }
      return false;
    }
    // Device k's need with group g's primary added: bytes(g, 1) less the
    // buffers g and the groups already on k (unreplicated) would exchange,
    // counted on both sides so far.
    double with_primary(int g, int k, bool recompute = false) const {
      return with(g, 1, k, recompute) - shared_bytes(g, k);
    }
    // Whether device k holds g (`recompute`: as if g recomputed), alone or once replicated.
    bool fits_on(int g, int k, bool recompute = false) const {
      return with_primary(g, k, recompute) <= capacity(k) || fits_replicated(g, k, recompute);
    }
    // Device k's need with group g (on one of its r replicas) added.
    double with(int g, int r, int k, bool recompute = false) const {
      return load_[k] + bytes(g, r, recompute) + workspace_with(g, k);
    }
    void add(int g, int r, int k) {
      load_[k] += bytes(g, r);
      note_workspace(g, k);
    }
    double capacity(int k) const { return static_cast<double>(m_.cfg.memory.device_bytes[k]); }

    const Impl& m_;
    std::vector<bool> used_;
    bool data_parallel_;
    int micro_batches_;
    std::vector<bool> taken_;
    std::vector<double> load_;
    std::vector<std::vector<int>> replica_devices_;  // per group: the devices of its replicas so far
    std::vector<int> device_of_;                     // per group: its primary's device once taken (-1 before)
    std::vector<double> group_gflops_, group_compute_;  // per group: its FLOPs, its devices' compute so far
    std::vector<bool> in_cycle_;
    // Per group, with the memory masks: it recomputes (mark_groups_that_must_recompute,
    // or its device holds it only so: take_primary).
    std::vector<bool> must_recompute_;
    std::vector<double> state_bytes_, activation_bytes_;  // per group; empty = no memory masks
    std::vector<double> boundary_bytes_, largest_param_, largest_output_;
    std::vector<double> pair_bytes_;  // G x G: per sample, what g receives because of h (inputs from h, gradients for h)
    std::vector<double> device_param_, device_output_;  // per device: the largest weight and output of its groups so far
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

Policy::Policy(const FeatureMatrix& layer_features, std::vector<std::vector<int>> consumers, PolicyConfig config,
               std::shared_ptr<PolicyNetworks> networks)
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
  // Positional prior (contiguous mode): layer i leans towards group x G - 1/2,
  // x its position ((i + 0.5) / L by depth, its compute position by compute:
  // PriorAxis), with a width of about one group, so a neutral network
  // proposes stages spread over the model; the network learns where to cut.
  // Sharpness ln(L/G): on track, a layer opens the next group with odds
  // about G/L, so a neutral network makes ~G-1 cuts whatever the depth.
  if (m.cfg.totals.gflops.size() != static_cast<size_t>(m.L)) m.cfg.totals = LayerTotals{};
  const std::vector<double> compute_at = compute_positions(m.cfg.totals, m.L);
  m.count_head = m.cfg.choose_stage_count && m.cfg.partition != PartitionMode::free && m.G > 1;
  m.prior_x.resize(static_cast<size_t>(m.L));
  for (int i = 0; i < m.L; ++i)
    m.prior_x[i] = m.cfg.prior_axis == PriorAxis::compute ? compute_at[i] : (i + 0.5) / std::max(1, m.L);
  m.prior.assign(static_cast<size_t>(m.L) * m.G, 0.f);
  const int PG = m.cfg.prior_groups > 0 ? std::min(m.cfg.prior_groups, m.G) : m.G;
  const double sharpness = prior_sharpness(m.L, PG);
  for (int i = 0; i < m.L; ++i) {
    const double c = prior_centre(m.cfg.prior_cuts, PG, m.prior_x[i]);
    for (int g = 0; g < m.G; ++g) m.prior[static_cast<size_t>(i) * m.G + g] = prior_logit(sharpness, g, c);
  }
  FeatureMatrix in;
  in.rows = m.L;
  in.cols = kLayerInputWidth;
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
    // Where the layer sits in the model's compute: a cut that balances compute
    // sits at the same value in a deep model as in a shallow one, where the
    // depth above does not (a policy trained on 20-layer models cut resnet50 at 44 / 87 of 175 layers).
    float* at = row + layer_features.cols + 1 + 2 * kPositionFrequencies;
    at[0] = static_cast<float>(compute_at[i]);
    for (int k = 0; k < kComputeFrequencies; ++k) {
      const double w = 3.141592653589793 * static_cast<double>(1 << k) * compute_at[i];
      at[1 + 2 * k] = static_cast<float>(std::sin(w));
      at[2 + 2 * k] = static_cast<float>(std::cos(w));
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

  if (m.cfg.devices.size() != m.D) m.cfg.devices = uniform_devices(m.D);
  m.total_gflops = m.cfg.totals.total_gflops();
  for (double c : m.cfg.devices.compute) m.total_compute += c;
  m.batch = m.cfg.batch_size > 0 ? m.cfg.batch_size : m.cfg.memory.batch_size > 0 ? m.cfg.memory.batch_size : 32;
  const double state_mb = 4.0 * m.cfg.totals.total_params_mb();
  m.device_rows = to_tensor(encode_devices(m.cfg.devices, state_mb));
  // The cluster as the micro-batch head sees it: its mean device, how unequal
  // its compute is (the spread and the slowest device's share: data
  // parallelism waits for the slowest replica), the batch and the device count.
  const auto share = m.device_rows.select(1, 0);
  m.micro_extra = torch::cat({m.device_rows.mean(0),
                              torch::stack({share.std(false), share.min()}),
                              torch::tensor({static_cast<float>(std::log2(static_cast<double>(m.batch)) / 8.0),
                                             static_cast<float>(std::log2(static_cast<double>(m.D)) / 4.0)})});
  auto pos = group_positions(m.G);
  auto context = torch::cat({m.micro_extra, share.max().reshape({1}), model_size_row(m.cfg.totals, m.batch)});
  m.group_query_input = torch::cat(
      {torch::from_blob(pos.data(), {m.G, kGroupPositionWidth}, torch::kFloat32).clone(),
       context.unsqueeze(0).expand({m.G, kPartitionContextWidth})}, 1);
  // Each micro-batch choice's slot in the head: log2 of the count (counts that
  // are not powers of two take the nearest), data parallelism the last.
  std::vector<int64_t> slots;
  for (int c : m.cfg.micro_batch_choices)
    slots.push_back(std::clamp<int64_t>(std::lround(std::log2(std::max(1, c))), 0, kMicroSlots - 1));
  if (m.cfg.offer_data_parallel) slots.push_back(kMicroSlots);
  m.micro_slots = torch::tensor(slots, torch::kInt64);
  m.replica_head = m.cfg.max_replicas > 0 && m.D > 1;
  m.balance_head = m.replica_head && m.cfg.balance_replicas;
  m.spread_head = !m.cfg.forks.empty() && m.D > 1;
  m.net = networks ? std::move(networks) : new_policy_networks(m.cfg.hidden, m.cfg.learning_rate, m.cfg.seed,
                                                               m.cfg.replica_bias);
  m.cfg.hidden = m.net->hidden;
  const auto& mem = m.cfg.memory;
  if (!mem.empty() && (static_cast<int>(mem.device_bytes.size()) != m.D ||
                       static_cast<int>(mem.layer_param_bytes.size()) != m.L ||
                       static_cast<int>(mem.layer_activation_bytes.size()) != m.L || mem.batch_size < 1))
    m.cfg.memory = PolicyMemory{};  // sizes that do not match the model and cluster: no memory masks
  m.set_partition_floors();
  m.set_stage_floors();
  m.device_class = m.device_classes();
}

Policy::~Policy() = default;

const PolicyConfig& Policy::config() const { return impl_->cfg; }
const std::shared_ptr<PolicyNetworks>& Policy::networks() const { return impl_->net; }

Decision Policy::sample(std::mt19937_64& rng) { return impl_->choose({&rng})[0]; }
std::vector<Decision> Policy::sample(int n, std::mt19937_64& rng) {
  std::vector<std::mt19937_64> streams;
  for (int i = 0; i < n; ++i) streams.emplace_back(rng());
  std::vector<std::mt19937_64*> rngs;
  for (auto& s : streams) rngs.push_back(&s);
  return impl_->choose(rngs);
}
Decision Policy::greedy() { return impl_->choose({nullptr})[0]; }
Decision Policy::typical() { return impl_->choose({nullptr}, true)[0]; }
Decision Policy::canonical(const Decision& d) {
  torch::NoGradGuard ng;
  return impl_->canonical(d).value_or(d);
}

double Policy::log_prob(const Decision& d) {
  torch::NoGradGuard ng;
  return impl_->score(d, impl_->partition_logits()).first.item<double>();
}

bool Policy::allows(const Decision& d) {
  torch::NoGradGuard ng;
  return impl_->allows(d);
}

bool Policy::partition_allowed(const std::vector<int>& layer_group) const {
  const Impl& m = *impl_;
  if (static_cast<int>(layer_group.size()) != m.L) return false;
  for (int g : layer_group)
    if (g < 0 || g >= m.G) return false;
  if (m.cfg.partition == PartitionMode::free) return true;
  const std::vector<float> rows = m.order_rows(layer_group, {});  // the masks: the prior's cuts do not change them
  for (int i = 0; i < m.L; ++i)
    if (rows[static_cast<size_t>(i) * m.G + layer_group[i]] == kMasked) return false;
  return true;
}

std::vector<std::vector<float>> Policy::partition_probs() {
  torch::NoGradGuard ng;
  return to_rows(torch::softmax(impl_->partition_logits(), 1));
}

// The most probable micro-batch choice of a partition (what the allocation below assumes).
int Policy::Impl::greedy_micro(const Groups& gr) {
  auto p = torch::softmax(micro_logits(gr), 0).contiguous();
  return argmax(p.data_ptr<float>(), M);
}

std::vector<std::vector<float>> Policy::allocation_probs(const std::vector<int>& layer_group) {
  torch::NoGradGuard ng;
  Impl& m = *impl_;
  auto gr = m.groups_of(layer_group);
  std::vector<std::vector<float>> probs;
  Impl::AllocationMasks masks(m, layer_group, m.greedy_micro(gr));
  m.allocate(gr, layer_group, masks, nullptr, &probs);
  return probs;
}

std::vector<std::vector<float>> Policy::replica_probs(const std::vector<int>& layer_group) {
  torch::NoGradGuard ng;
  Impl& m = *impl_;
  if (!m.replica_head) return {};
  auto gr = m.groups_of(layer_group);
  Impl::AllocationMasks masks(m, layer_group, m.greedy_micro(gr));
  auto device = m.allocate(gr, layer_group, masks, nullptr, nullptr);
  auto pairs = torch::empty({m.G, m.D, kPairWidth}, torch::kFloat32);
  m.pair_features_of_groups(gr.stats, device, true, pairs.data_ptr<float>());
  auto z = m.score_pairs(gr.h, pairs).select(2, 1).contiguous();
  if (m.balance_head) {  // as first offered: each group on its primary alone
    Impl::ReplicaBalance balance(m, masks);
    float* zq = z.data_ptr<float>();
    for (int g = 0; g < m.G; ++g)
      for (int k = 0; k < m.D; ++k)
        if (masks.in_use(g)) zq[g * m.D + k] += balance.shift(g, k);
  }
  return to_rows(torch::sigmoid(z));
}

std::vector<float> Policy::stage_count_probs() {
  torch::NoGradGuard ng;
  if (!impl_->count_head) return {};
  auto p = torch::softmax(impl_->count_logits(), 0).contiguous();
  return std::vector<float>(p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
}

std::vector<float> Policy::micro_batch_probs(const std::vector<int>& layer_group) {
  torch::NoGradGuard ng;
  auto p = torch::softmax(impl_->micro_logits(impl_->groups_of(layer_group)), 0).contiguous();
  return std::vector<float>(p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
}

namespace {

// The distinct decisions of a batch in the order they first come, each with
// its advantages summed and how often it came (a batch is a few dozen
// decisions: the quadratic scan costs nothing beside scoring one).
struct DistinctDecisions {
  std::vector<const Decision*> decisions;
  std::vector<double> advantage_sums;
  std::vector<float> counts;
};

DistinctDecisions distinct_decisions(const std::vector<Decision>& decisions, const std::vector<double>& advantages) {
  DistinctDecisions out;
  for (size_t i = 0; i < decisions.size(); ++i) {
    size_t k = 0;
    while (k < out.decisions.size() && !(*out.decisions[k] == decisions[i])) ++k;
    if (k == out.decisions.size()) {
      out.decisions.push_back(&decisions[i]);
      out.advantage_sums.push_back(0);
      out.counts.push_back(0);
    }
    out.advantage_sums[k] += advantages[i];
    ++out.counts[k];
  }
  return out;
}

}  // namespace

UpdateStats Policy::update(const std::vector<Decision>& decisions, const std::vector<double>& advantages,
                           double entropy_coef, double max_grad_norm) {
  Impl& m = *impl_;
  UpdateStats st;
  if (decisions.empty()) return st;
  m.net->optimizer->zero_grad();
  auto part_logits = m.partition_logits();
  // A batch repeats decisions once the policy settles; identical ones have
  // one log pi and one entropy, so each distinct decision is scored once
  // with its advantages summed and its entropy counted as often as it came.
  const DistinctDecisions distinct = distinct_decisions(decisions, advantages);
  auto [lp, e] = m.score(distinct.decisions, part_logits);
  auto advantage_sums = torch::tensor(distinct.advantage_sums).to(torch::kFloat32);
  torch::Tensor pg = -(lp * advantage_sums).sum(), ent = (e * torch::tensor(distinct.counts)).sum();
  const double n = static_cast<double>(decisions.size());
  auto loss = pg / n - entropy_coef * ent / n;
  loss.backward();
  st.grad_norm = torch::nn::utils::clip_grad_norm_(m.net->params, max_grad_norm);
  m.net->optimizer->step();
  ++m.net->steps;
  st.loss = loss.item<double>();
  st.entropy = ent.item<double>() / n;
  return st;
}

void Policy::imitate(const Decision& target, int steps, double learning_rate) {
  Impl& m = *impl_;
  auto& options = static_cast<torch::optim::AdamOptions&>(m.net->optimizer->param_groups()[0].options());
  const double own_rate = options.lr();
  if (learning_rate > 0) options.lr(learning_rate);
  for (int s = 0; s < steps; ++s) {
    m.net->optimizer->zero_grad();
    auto loss = -m.score(target, m.partition_logits(), Odds::networks).first;
    loss.backward();
    torch::nn::utils::clip_grad_norm_(m.net->params, 5.0);
    m.net->optimizer->step();
    ++m.net->steps;
  }
  options.lr(own_rate);
}

}  // namespace tapp
