#include "core/placement.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <set>

#include "common/checked_math.h"
#include "common/json_fields.h"
#include "common/read_file.h"
#include "model/layer_graph.h"
#include "core/cluster.h"

namespace tapp {
namespace jf = json_fields;
using nlohmann::json;

std::string schedule_name(Schedule s) {
  switch (s) {
    case Schedule::gpipe:
      return "gpipe";
    case Schedule::one_f_one_b:
      return "1f1b";
    case Schedule::interleaved_1f1b:
      return "interleaved_1f1b";
    case Schedule::al:
      return "al";
    case Schedule::timed_1f1b:
      return "timed_1f1b";
  }
  return "gpipe";
}

Result<Schedule> schedule_from_name(const std::string& name) {
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved_1f1b, Schedule::al,
                     Schedule::timed_1f1b})
    if (name == schedule_name(s)) return s;
  return Status::error("unknown schedule \"" + name +
                       "\"; expected \"gpipe\", \"1f1b\", \"interleaved_1f1b\", \"al\" or \"timed_1f1b\"");
}

std::string data_parallel_mode_name(DataParallelMode m) {
  switch (m) {
    case DataParallelMode::none:
      return "none";
    case DataParallelMode::bsp:
      return "bsp";
    case DataParallelMode::hogwild:
      return "hogwild";
  }
  return "none";
}

Result<DataParallelMode> data_parallel_mode_from_name(const std::string& name) {
  for (DataParallelMode m : {DataParallelMode::none, DataParallelMode::bsp, DataParallelMode::hogwild})
    if (name == data_parallel_mode_name(m)) return m;
  return Status::error("unknown data-parallel mode \"" + name +
                       "\"; expected \"none\", \"bsp\" or \"hogwild\"");
}

std::vector<int> Placement::layer_devices() const {
  std::vector<int> d(layer_group.size());
  for (size_t i = 0; i < d.size(); ++i) d[i] = device_of_layer(static_cast<int>(i));
  return d;
}

int Placement::add_group(int device, bool recompute) {
  group_device.push_back(device);
  if (!group_replicas.empty()) group_replicas.emplace_back();
  if (!group_replica_weights.empty()) group_replica_weights.emplace_back();
  if (recompute && group_recompute.empty()) group_recompute.assign(group_device.size() - 1, 0);
  if (!group_recompute.empty()) group_recompute.push_back(recompute ? 1 : 0);
  return num_groups() - 1;
}

std::vector<int> Placement::devices_of_group(int g) const {
  std::vector<int> d{group_device[g]};
  if (!group_replicas.empty()) d.insert(d.end(), group_replicas[g].begin(), group_replicas[g].end());
  return d;
}

void drop_unused_groups(Placement& p) {
  const int G = p.num_groups();
  std::vector<int> renamed(G, -1);
  int next = 0;
  for (int& g : p.layer_group) {
    if (renamed[g] < 0) renamed[g] = next++;
    g = renamed[g];
  }
  if (next == G && std::is_sorted(renamed.begin(), renamed.end())) return;
  auto keep = [&](auto& per_group) {
    if (per_group.empty()) return;
    auto old = per_group;
    per_group.assign(next, {});
    for (int g = 0; g < G; ++g)
      if (renamed[g] >= 0) per_group[renamed[g]] = old[g];
  };
  keep(p.group_device);
  keep(p.group_replicas);
  keep(p.group_replica_weights);
  keep(p.group_recompute);
}

std::vector<int> micro_batches_by_speed(int micro_batches, const std::vector<double>& ms) {
  const int r = static_cast<int>(ms.size());
  std::vector<int> counts(r, 1);
  // Equal times take turns, the first replicas one more where they do not divide evenly
  // (what the loop below gives them, without its m x r steps).
  if (micro_batches >= r && std::all_of(ms.begin(), ms.end(), [&](double x) { return x == ms[0]; })) {
    for (int i = 0; i < r; ++i) counts[i] = (micro_batches - i + r - 1) / r;
    return counts;
  }
  for (int m = r; m < micro_batches; ++m) {
    int next = 0;
    for (int k = 1; k < r; ++k)
      if ((counts[k] + 1) * ms[k] < (counts[next] + 1) * ms[next]) next = k;
    ++counts[next];
  }
  return counts;
}

std::vector<int> replica_micro_batch_counts(int micro_batches, const std::vector<int>& weights) {
  const int r = static_cast<int>(weights.size());
  std::vector<int> counts(r, 1);
  int64_t total = 0;
  for (int w : weights) total += w;
  // Each further micro-batch to the replica furthest below its exact share
  // micro_batches * w / total (compared as integers: no rounding ties).
  for (int k = r; k < micro_batches; ++k) {
    int best = 0;
    int64_t best_deficit = std::numeric_limits<int64_t>::min();
    for (int i = 0; i < r; ++i) {
      const int64_t deficit = int64_t{micro_batches} * weights[i] - int64_t{counts[i]} * total;
      if (deficit > best_deficit) best = i, best_deficit = deficit;
    }
    ++counts[best];
  }
  return counts;
}

std::vector<int> weighted_replica_order(int micro_batches, const std::vector<int>& weights) {
  const int r = static_cast<int>(weights.size());
  std::vector<int> order(std::max(0, micro_batches));
  const bool equal = std::all_of(weights.begin(), weights.end(), [&](int w) { return w == weights.front(); });
  if (r <= 1 || equal) {
    for (int m = 0; m < micro_batches; ++m) order[m] = r <= 1 ? 0 : m % r;
    return order;
  }
  const std::vector<int> counts = replica_micro_batch_counts(micro_batches, weights);
  std::vector<int> given(r, 0);
  // Next: the replica with the least of its share given, (given + 1/2) / count.
  for (int m = 0; m < micro_batches; ++m) {
    int best = -1;
    for (int i = 0; i < r; ++i) {
      if (given[i] >= counts[i]) continue;
      if (best < 0 || int64_t{2 * given[i] + 1} * counts[best] < int64_t{2 * given[best] + 1} * counts[i]) best = i;
    }
    order[m] = best;
    ++given[best];
  }
  return order;
}

std::vector<int> Placement::replica_order(int g) const {
  const int r = replica_count(g);
  return weighted_replica_order(micro_batches, has_replica_weights(g) ? group_replica_weights[g] : std::vector<int>(r, 1));
}

int Placement::device_of_micro_batch(int g, int m) const {
  const int r = replica_count(g);
  if (r == 1) return group_device[g];
  const int k = has_replica_weights(g) ? replica_order(g)[m] : m % r;
  return k == 0 ? group_device[g] : group_replicas[g][k - 1];
}

bool Placement::has_replicated_groups() const {
  for (const auto& r : group_replicas)
    if (!r.empty()) return true;
  return false;
}

Placement Placement::single_device(int num_layers, int device, int micro_batches) {
  Placement p;
  p.layer_group.assign(num_layers, 0);
  p.group_device = {device};
  p.micro_batches = micro_batches;
  p.source = "single";
  return p;
}

Placement Placement::replicas(int num_layers, const std::vector<int>& devices, DataParallelMode mode) {
  Placement p;
  p.layer_group.assign(num_layers, 0);
  p.group_device = devices;
  p.data_parallel = mode;
  p.source = data_parallel_mode_name(mode);
  return p;
}

int64_t Placement::replica_share(int64_t batch_size) const {
  const int64_t r = std::max<int64_t>(1, static_cast<int64_t>(group_device.size()));
  return (batch_size + r - 1) / r;
}

// Data parallel: distinct replicas, at most one per sample, whole model in group 0.
Status validate_replicas(const Placement& p, int64_t batch_size) {
  std::set<int> seen;
  for (size_t i = 0; i < p.group_device.size(); ++i)
    if (!seen.insert(p.group_device[i]).second)
      return Status::error("placement.groups[" + std::to_string(i) + "]: a data-parallel placement names each device once");
  if (static_cast<int64_t>(p.group_device.size()) > batch_size)
    return Status::error("placement.groups: " + std::to_string(p.group_device.size()) +
                         " replicas need a batch of at least as many samples, got " + std::to_string(batch_size));
  for (size_t i = 0; i < p.layer_group.size(); ++i)
    if (p.layer_group[i] != 0)
      return Status::error("placement.layers: a data-parallel placement puts every layer in group 0");
  if (p.micro_batches != 1) return Status::error("placement.micro_batches: a data-parallel placement uses 1");
  return Status::ok();
}

namespace {
// A replicated group's devices: in the cluster, each named once, at least one
// micro-batch per replica, not mixed with whole-model data parallelism.
Status validate_group_replicas(const Placement& p, const Cluster& c) {
  if (p.group_replicas.empty()) return Status::ok();
  if (p.group_replicas.size() != p.group_device.size())
    return Status::error("placement.groups: replica lists for " + std::to_string(p.group_replicas.size()) +
                         " groups, but there are " + std::to_string(p.group_device.size()) + " groups");
  for (int g = 0; g < p.num_groups(); ++g) {
    const std::vector<int> devices = p.devices_of_group(g);
    std::set<int> seen;
    for (size_t k = 0; k < devices.size(); ++k) {
      const std::string where = "placement.groups[" + std::to_string(g) + "][" + std::to_string(k) + "]";
      if (devices[k] < 0 || devices[k] >= c.num_devices())
        return Status::error(where + ": device index " + std::to_string(devices[k]) + " is not in the cluster");
      if (!seen.insert(devices[k]).second)
        return Status::error(where + ": device '" + c.devices[devices[k]].name + "' is named twice in this group");
    }
    if (devices.size() > 1 && p.is_data_parallel())
      return Status::error("placement.groups[" + std::to_string(g) +
                           "]: a data-parallel placement lists its replicas as groups, not as a replicated group");
    if (static_cast<int>(devices.size()) > p.micro_batches)
      return Status::error("placement.micro_batches: group " + std::to_string(g) + " has " +
                           std::to_string(devices.size()) + " replicas, each needs at least one micro-batch; got " +
                           std::to_string(p.micro_batches));
  }
  return Status::ok();
}

// Replica weights: per group, none or one positive integer per replica.
Status validate_replica_weights(const Placement& p) {
  if (p.group_replica_weights.empty()) return Status::ok();
  if (p.group_replica_weights.size() != p.group_device.size())
    return Status::error("placement.replica_weights: weights for " + std::to_string(p.group_replica_weights.size()) +
                         " groups, but there are " + std::to_string(p.group_device.size()) + " groups");
  for (int g = 0; g < p.num_groups(); ++g) {
    const std::vector<int>& w = p.group_replica_weights[g];
    if (w.empty()) continue;
    const std::string where = "placement.replica_weights." + std::to_string(g);
    if (static_cast<int>(w.size()) != p.replica_count(g))
      return Status::error(where + ": " + std::to_string(w.size()) + " weights for a group of " +
                           std::to_string(p.replica_count(g)) + " device(s); give one per device");
    for (size_t k = 0; k < w.size(); ++k)
      if (w[k] < 1 || w[k] > kMaxReplicaWeight)
        return Status::error(where + "[" + std::to_string(k) + "]: a weight is an integer in [1, " +
                             std::to_string(kMaxReplicaWeight) + "], got " + std::to_string(w[k]));
  }
  return Status::ok();
}

// A replicated group is one stage: one all-reduce after its backward pass.
// It must not be both upstream and downstream of another group (a cycle in
// the groups' graph through it). Returns the offending pair or {-1, -1}.
std::pair<int, int> replicated_group_in_cycle(const Placement& p, const LayerGraph& g) {
  if (!p.has_replicated_groups()) return {-1, -1};  // (search loops validate every candidate)
  const size_t G = static_cast<size_t>(p.num_groups());
  thread_local std::vector<char> reach;  // reach[i * G + j]: group j reads (transitively) from group i
  reach.assign(G * G, 0);
  for (size_t l = 0; l < g.layers.size(); ++l)
    for (int in : g.layers[l].inputs)
      if (p.layer_group[in] != p.layer_group[l])
        reach[static_cast<size_t>(p.layer_group[in]) * G + static_cast<size_t>(p.layer_group[l])] = 1;
  for (size_t k = 0; k < G; ++k)  // transitive closure; G is small
    for (size_t i = 0; i < G; ++i)
      if (reach[i * G + k])
        for (size_t j = 0; j < G; ++j)
          if (reach[k * G + j]) reach[i * G + j] = 1;
  for (size_t a = 0; a < G; ++a) {
    if (p.replica_count(static_cast<int>(a)) == 1) continue;
    for (size_t b = 0; b < G; ++b)
      if (b != a && reach[a * G + b] && reach[b * G + a]) return {static_cast<int>(a), static_cast<int>(b)};
  }
  return {-1, -1};
}
}  // namespace

namespace {

// Schedule al runs a model in AL form, one group per block; nothing else runs one.
Status validate_al(const Placement& p, const LayerGraph& g) {
  if (!g.is_al_form())
    return Status::error("placement.schedule: al trains a model in its Associated Learning form; build it with "
                         "cut points first (tapp-cli --allow-al, model/al_form.h)");
  if (p.schedule != Schedule::al || p.is_data_parallel())
    return Status::error("placement.schedule: the model is in AL form, which trains by local losses: its schedule "
                         "must be al, not " + (p.is_data_parallel() ? data_parallel_mode_name(p.data_parallel) : schedule_name(p.schedule)));
  if (p.has_replicated_groups()) return Status::error("placement.groups: al runs each block on one device (no replicas)");
  if (p.num_groups() != static_cast<int>(g.al_blocks.size()))
    return Status::error("placement.groups: al needs one group per AL block (" + std::to_string(g.al_blocks.size()) +
                         "), got " + std::to_string(p.num_groups()));
  for (size_t b = 0; b < g.al_blocks.size(); ++b)
    for (int i = g.al_blocks[b].first; i <= g.al_blocks[b].last; ++i)
      if (p.layer_group[i] != p.layer_group[g.al_blocks[b].first] ||
          (b > 0 && p.layer_group[i] == p.layer_group[g.al_blocks[b - 1].first]))
        return Status::error("placement.layers[" + std::to_string(i) + "] ('" + g.layers[i].name + "'): in AL block " +
                             std::to_string(b + 1) + ", so it must share its block's group, and only it");
  return Status::ok();
}

}  // namespace

Status validate_placement(const Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size) {
  if (p.layer_group.size() != g.layers.size())
    return Status::error("placement.layers: has " + std::to_string(p.layer_group.size()) +
                         " entries, the model has " + std::to_string(g.layers.size()) + " layers");
  if (p.group_device.empty()) return Status::error("placement.groups: must not be empty");
  for (size_t i = 0; i < p.layer_group.size(); ++i)
    if (p.layer_group[i] < 0 || p.layer_group[i] >= p.num_groups())
      return Status::error("placement.layers[" + std::to_string(i) + "] ('" + g.layers[i].name +
                           "'): group " + std::to_string(p.layer_group[i]) + " does not exist");
  for (size_t i = 0; i < p.group_device.size(); ++i)
    if (p.group_device[i] < 0 || p.group_device[i] >= c.num_devices())
      return Status::error("placement.groups[" + std::to_string(i) + "]: device index " +
                           std::to_string(p.group_device[i]) + " is not in the cluster");
  if (batch_size < 1) return Status::error("batch_size: must be at least 1");
  if (p.is_data_parallel()) {
    if (Status s = validate_replicas(p, batch_size); !s) return s;
  }
  if (p.micro_batches < 1 || p.micro_batches > batch_size)
    return Status::error("placement.micro_batches: must be in [1, batch size " + std::to_string(batch_size) +
                         "], got " + std::to_string(p.micro_batches));
  if (p.aggregation_every < 1)
    return Status::error("placement.aggregation_every: must be at least 1 (1 = every step, synchronous), got " +
                         std::to_string(p.aggregation_every));
  if (Status s = validate_group_replicas(p, c); !s) return s;
  if (Status s = validate_replica_weights(p); !s) return s;
  if (!p.group_recompute.empty() && static_cast<int>(p.group_recompute.size()) != p.num_groups())
    return Status::error("placement.recompute: flags for " + std::to_string(p.group_recompute.size()) +
                         " groups, but there are " + std::to_string(p.num_groups()) + " groups");
  if (p.is_data_parallel() && p.recomputes(0))
    return Status::error("placement.recompute: a data-parallel placement has no stage to recompute");
  if (p.aggregation_every > 1 && !p.has_replicated_groups())
    return Status::error("placement.aggregation_every: " + std::to_string(p.aggregation_every) +
                         " needs a replicated group (a group with several devices)");
  if (p.schedule == Schedule::al || g.is_al_form()) {
    if (Status s = validate_al(p, g); !s) return s;
  }
  if (auto [a, b] = replicated_group_in_cycle(p, g); a >= 0)
    return Status::error("placement.groups[" + std::to_string(a) + "]: replicated group " + std::to_string(a) +
                         " is both before and after group " + std::to_string(b) +
                         " (a cycle in the groups' graph); a replicated group must be one stage — split it");
  // Training-mode BatchNorm needs more than one value per channel in a micro-batch.
  const int64_t smallest_micro_batch = p.is_data_parallel()
                                           ? batch_size / static_cast<int64_t>(p.group_device.size())
                                           : batch_size / p.micro_batches;
  static const std::string kBatchNorm = "batchnorm2d";  // (see lm_head_op)
  for (const Layer& l : g.layers) {
    if (l.op != kBatchNorm || l.input_shapes.empty() || l.input_shapes[0].size() != 3) continue;
    if (smallest_micro_batch * l.input_shapes[0][1] * l.input_shapes[0][2] <= 1)
      return Status::error("placement.micro_batches: " + std::to_string(p.micro_batches) + " micro-batches of " +
                           std::to_string(smallest_micro_batch) + " sample(s) leave BatchNorm layer '" + l.name +
                           "' one value per channel; use fewer micro-batches");
  }
  return Status::ok();
}

std::string optimizer_name(Optimizer o) { return o == Optimizer::adam ? "adam" : "sgd"; }

Result<Optimizer> optimizer_from_name(const std::string& name) {
  for (Optimizer o : {Optimizer::sgd, Optimizer::adam})
    if (name == optimizer_name(o)) return o;
  return Status::error("unknown optimizer \"" + name + "\"; expected \"sgd\" (with momentum) or \"adam\"");
}

int optimizer_state_copies(Optimizer o) { return o == Optimizer::adam ? 2 : 1; }

int64_t MemoryBreakdown::total() const {
  return sat_add(sat_add(sat_add(params, grads), sat_add(optimizer_state, activations)), buffers);
}

MemoryBreakdown& MemoryBreakdown::operator+=(const MemoryBreakdown& o) {
  params = sat_add(params, o.params);
  grads = sat_add(grads, o.grads);
  optimizer_state = sat_add(optimizer_state, o.optimizer_state);
  activations = sat_add(activations, o.activations);
  buffers = sat_add(buffers, o.buffers);
  return *this;
}

// The one switch for what backward keeps per layer (see the header): infer_shapes's saved_bytes
// (attention keeps its probabilities too); the output where shapes were not inferred.
int64_t kept_bytes_per_sample(const Layer& l) { return l.saved_bytes > 0 ? l.saved_bytes : l.activation_bytes(); }

int64_t kept_bytes_per_sample(const LayerGraph& g, int i) {
  const Layer& l = g.layers[i];
  const bool output = i + 1 == static_cast<int>(g.layers.size());
  return sat_add(kept_bytes_per_sample(l), output ? l.activation_bytes() : 0);
}

int64_t device_memory_bytes(const Device& d) { return sat_mul(d.memory_mb, 1024 * 1024); }

int64_t training_state_bytes(int64_t param_bytes, Optimizer o) {
  return sat_mul(2 + optimizer_state_copies(o), param_bytes);
}

int64_t micro_batches_in_flight(Schedule schedule, int micro_batches, int stages) {
  // Interleaved 1F1B keeps one more round of warm-up micro-batches than 1F1B (Megatron).
  switch (schedule) {
    case Schedule::gpipe:
      return micro_batches;
    case Schedule::one_f_one_b:
    case Schedule::timed_1f1b:
      return std::min(micro_batches, stages);
    case Schedule::interleaved_1f1b:
      return std::min(micro_batches, stages + 1);
    case Schedule::al:  // each block's backward follows its own forward
      return std::min(micro_batches, 1);
  }
  return micro_batches;
}

void in_flight_limits(const Placement& p, const LayerGraph& g, int num_devices, std::vector<int>& limit) {
  thread_local std::vector<char> seen;
  seen.assign(num_devices, 0);
  limit.assign(num_devices, 0);
  int count = 0;
  for (int i = static_cast<int>(g.layers.size()) - 1; i >= 0; --i) {
    const int grp = p.layer_group[i];
    const int r = p.replica_count(grp);
    auto visit = [&](int d) {
      count += !seen[d];
      seen[d] = 1;
    };
    visit(p.group_device[grp]);
    if (r > 1)
      for (int d : p.group_replicas[grp]) visit(d);
    const int here = r == 1 ? count : (count + r - 1) / r;  // (no division per layer: search loops)
    limit[p.group_device[grp]] = here;                      // ends as the device's first layer's
    if (r > 1)
      for (int d : p.group_replicas[grp]) limit[d] = here;
  }
}

namespace {
// Weights, gradients and optimizer state of `param_bytes` (saturating).
MemoryBreakdown state_of(int64_t param_bytes, Optimizer o) {
  MemoryBreakdown m;
  m.params = param_bytes;
  m.grads = param_bytes;
  m.optimizer_state = sat_mul(optimizer_state_copies(o), param_bytes);
  return m;
}

// Backward's working memory on a device whose largest layer has
// `largest_param` parameter bytes and `largest_output` output bytes per
// sample: that layer's weight gradient before it is accumulated into .grad
// and an activation gradient in and out for one micro-batch.
int64_t workspace_bytes(int64_t largest_param, int64_t largest_output, int64_t samples) {
  return sat_add(largest_param, sat_mul(sat_mul(2, largest_output), samples));
}

// The weight gradient layer i's backward makes before it is accumulated: its
// own parameters', or a tied lm_head's table's.
// string == string compares sizes first; == "literal" runs strlen and memcmp (search loops call these per layer).
const std::string& lm_head_op() {
  static const std::string op = "lm_head";
  return op;
}

int64_t weight_gradient_bytes(const LayerGraph& g, int i) {
  const Layer& l = g.layers[i];
  if (l.op != lm_head_op()) return l.param_bytes();
  const int t = g.index_of(l.attrs.tie);
  return t >= 0 ? g.layers[t].param_bytes() : 0;
}

// The update runs after the step's backward, when activations and received
// buffers are freed: Adam's two temporaries of the largest weight (its sqrt
// and the quotient) count only where they pass what backward held. SGD's
// momentum update is in place.
void add_update_workspace(MemoryBreakdown& m, int64_t largest_param, Optimizer o) {
  if (o != Optimizer::adam) return;
  const int64_t update = sat_mul(2, largest_param), backward = sat_add(m.activations, m.buffers);
  if (update > backward) m.buffers = sat_add(m.buffers, update - backward);
}

// The largest of [first, end) from a sparse table (first < end).
int64_t range_max(const std::vector<std::vector<int64_t>>& table, int first, int end) {
  int k = 0;
  while ((2 << k) <= end - first) ++k;
  return std::max(table[k][first], table[k][end - (1 << k)]);
}

std::vector<std::vector<int64_t>> sparse_table(const std::vector<int64_t>& values) {
  std::vector<std::vector<int64_t>> t{values};
  for (size_t k = 1; (size_t{1} << k) <= values.size(); ++k) {
    const size_t half = size_t{1} << (k - 1);
    std::vector<int64_t> row(values.size() - (size_t{1} << k) + 1);
    for (size_t i = 0; i < row.size(); ++i) row[i] = std::max(t[k - 1][i], t[k - 1][i + half]);
    t.push_back(std::move(row));
  }
  return t;
}

void add_to_group(const Placement& p, int grp, const MemoryBreakdown& m, std::vector<MemoryBreakdown>& out) {
  out[p.group_device[grp]] += m;
  if (p.replica_count(grp) > 1)
    for (int d : p.group_replicas[grp]) out[d] += m;
}

// "1.4" in the unit (2^30 or 2^20 bytes).
std::string in_unit(int64_t bytes, double unit) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(bytes) / unit);
  return buf;
}

std::string breakdown_in(const MemoryBreakdown& m, Optimizer o, double unit) {
  return "params " + in_unit(m.params, unit) + ", grads " + in_unit(m.grads, unit) + ", " +
         (o == Optimizer::adam ? "Adam " : "momentum ") + in_unit(m.optimizer_state, unit) + ", activations " +
         in_unit(m.activations, unit) + ", buffers " + in_unit(m.buffers, unit);
}
}  // namespace

std::string mib_rounded_up(int64_t bytes) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  if (bytes % kMiB == 0) return std::to_string(bytes / kMiB);
  if (bytes > (int64_t{1} << 56)) return std::to_string(bytes / kMiB + 1);  // hundredths would overflow
  const int64_t hundredths = (bytes * 100 + kMiB - 1) / kMiB;
  char text[32];
  std::snprintf(text, sizeof text, "%lld.%02lld", static_cast<long long>(hundredths / 100),
                static_cast<long long>(hundredths % 100));
  return text;
}

std::vector<TiedTable> tied_tables(const LayerGraph& g) {
  std::vector<TiedTable> out;
  for (size_t i = 0; i < g.layers.size(); ++i) {
    if (g.layers[i].op != lm_head_op()) continue;
    const int t = g.index_of(g.layers[i].attrs.tie);
    if (t >= 0) out.push_back({static_cast<int>(i), t, g.layers[t].param_bytes()});
  }
  return out;
}

StageMemory::StageMemory(const LayerGraph& g, Optimizer o) : optimizer_(o), tied_(tied_tables(g)) {
  const size_t L = g.layers.size();
  param_prefix_.assign(L + 1, 0);
  kept_prefix_.assign(L + 1, 0);
  for (size_t i = 0; i < L; ++i) {
    param_prefix_[i + 1] = sat_add(param_prefix_[i], g.layers[i].param_bytes());
    kept_prefix_[i + 1] = sat_add(kept_prefix_[i], kept_bytes_per_sample(g, static_cast<int>(i)));
  }
  // Layer p's output crosses every cut j in (p, its last reader].
  std::vector<int64_t> delta(L + 2, 0);
  std::vector<int> last_reader(L, -1);
  for (size_t i = 0; i < L; ++i)
    for (int in : g.layers[i].inputs) last_reader[in] = std::max(last_reader[in], static_cast<int>(i));
  for (size_t q = 0; q < L; ++q)
    if (last_reader[q] > static_cast<int>(q)) {
      delta[q + 1] = sat_add(delta[q + 1], g.layers[q].activation_bytes());
      delta[last_reader[q] + 1] -= g.layers[q].activation_bytes();
    }
  cut_.assign(L + 1, 0);
  int64_t run = 0;
  for (size_t j = 0; j <= L; ++j) cut_[j] = run = sat_add(run, delta[j]);
  std::vector<int64_t> params(L), outputs(L);
  for (size_t i = 0; i < L; ++i) {
    params[i] = weight_gradient_bytes(g, static_cast<int>(i));
    outputs[i] = g.layers[i].activation_bytes();
  }
  param_max_ = sparse_table(params);
  output_max_ = sparse_table(outputs);
}

MemoryBreakdown StageMemory::breakdown(int first, int end, int64_t samples, int64_t in_flight, bool recompute,
                                       int64_t micro_batches) const {
  MemoryBreakdown m = state_of(param_bytes(first, end), optimizer_);
  for (const TiedTable& t : tied_)
    if (t.head >= first && t.head < end && (t.table < first || t.table >= end)) m += state_of(t.bytes, optimizer_);
  m.activations = sat_mul(sat_mul(kept_prefix_[end] - kept_prefix_[first], samples), recompute ? 1 : in_flight);
  const int L = static_cast<int>(cut_.size()) - 1;
  const int64_t received = micro_batches > 0 ? micro_batches : in_flight;
  if (first > 0) m.buffers = sat_mul(sat_mul(cut_[first], samples), received);
  if (end < L) m.buffers = sat_add(m.buffers, sat_mul(sat_mul(cut_[end], samples), received));
  if (first < end) {
    const int64_t largest_param = range_max(param_max_, first, end);
    m.buffers = sat_add(m.buffers, workspace_bytes(largest_param, range_max(output_max_, first, end), samples));
    add_update_workspace(m, largest_param, optimizer_);
  }
  return m;
}

namespace {
// A tied lm_head's devices that do not hold its embedding keep a copy of the table.
void add_tied_copy(const Placement& p, const LayerGraph& g, int head, std::vector<MemoryBreakdown>& out) {
  const int table = g.index_of(g.layers[head].attrs.tie);
  if (table < 0) return;
  const std::vector<int> table_devices = p.devices_of_group(p.layer_group[table]);
  for (int d : p.devices_of_group(p.layer_group[head]))
    if (std::find(table_devices.begin(), table_devices.end(), d) == table_devices.end())
      out[d] += state_of(g.layers[table].param_bytes(), p.optimizer);
}
}  // namespace

std::vector<MemoryBreakdown> estimate_device_memory(const Placement& p, const LayerGraph& g, const Cluster& c,
                                                    int64_t batch_size) {
  std::vector<MemoryBreakdown> out(c.num_devices());
  if (p.is_data_parallel()) {
    const int64_t share = p.replica_share(batch_size);
    MemoryBreakdown whole;
    int64_t largest_param = 0, largest_output = 0;
    for (size_t i = 0; i < g.layers.size(); ++i) {
      const Layer& l = g.layers[i];
      whole += state_of(l.param_bytes(), p.optimizer);
      whole.activations = sat_add(whole.activations, sat_mul(kept_bytes_per_sample(g, static_cast<int>(i)), share));
      largest_param = std::max(largest_param, weight_gradient_bytes(g, static_cast<int>(i)));
      largest_output = std::max(largest_output, l.activation_bytes());
    }
    whole.buffers = workspace_bytes(largest_param, largest_output, share);
    add_update_workspace(whole, largest_param, p.optimizer);
    for (int d : p.group_device) out[d] += whole;
    return out;
  }
  // (Search loops call this for every candidate: scratch kept per thread.)
  thread_local std::vector<int> limit, input_counted_by, grad_counted;
  thread_local std::vector<int64_t> largest_param, largest_output;  // per device
  in_flight_limits(p, g, c.num_devices(), limit);
  largest_param.assign(c.num_devices(), 0);
  largest_output.assign(c.num_devices(), 0);
  const int L = static_cast<int>(g.layers.size());
  input_counted_by.assign(L, -1);  // the last group that counted this layer's output as its received input
  grad_counted.assign(L, 0);
  const int64_t mb = (batch_size + p.micro_batches - 1) / p.micro_batches;
  // The micro-batches each device of a group runs: round-robin's share, or
  // by the group's weights (each replica is charged its own count). Flat, per
  // group from own_at[grp] (search loops call this for every candidate).
  thread_local std::vector<int> own_at, own_count;
  own_at.assign(p.num_groups() + 1, 0);
  own_count.clear();
  for (int grp = 0; grp < p.num_groups(); ++grp) {
    const int replicas = p.replica_count(grp);
    if (replicas > 1 && p.has_replica_weights(grp)) {
      for (int n : replica_micro_batch_counts(p.micro_batches, p.group_replica_weights[grp])) own_count.push_back(n);
    } else {
      own_count.insert(own_count.end(), replicas, (p.micro_batches + replicas - 1) / replicas);
    }
    own_at[grp + 1] = static_cast<int>(own_count.size());
  }
  // Per group, summed over its layers (a layer's charge is linear in its
  // sizes, so each replica is charged once per group, not once per layer):
  // parameter bytes, kept bytes per sample, bytes per sample received (each
  // crossing input once per group that reads it) and gradient bytes per
  // sample received for the outputs it sends; the largest layer's sizes.
  const int G = p.num_groups();
  thread_local std::vector<int64_t> param_sum, kept_sum, recv_sum, grad_sum, group_param, group_output, layers_in;
  for (auto* v : {&param_sum, &kept_sum, &recv_sum, &grad_sum, &group_param, &group_output, &layers_in}) v->assign(G, 0);
  // Per group: its device, or -1 when replicated. Micro-batches of two groups
  // can run on different devices unless both are this one device.
  thread_local std::vector<int> solo_device;
  solo_device.resize(G);
  for (int grp = 0; grp < G; ++grp) solo_device[grp] = p.replica_count(grp) > 1 ? -1 : p.group_device[grp];
  for (int i = 0; i < L; ++i) {
    const Layer& l = g.layers[i];
    const int grp = p.layer_group[i];
    ++layers_in[grp];
    param_sum[grp] = sat_add(param_sum[grp], l.param_bytes());
    kept_sum[grp] = sat_add(kept_sum[grp], kept_bytes_per_sample(g, i));
    group_param[grp] = std::max(group_param[grp], weight_gradient_bytes(g, i));
    group_output[grp] = std::max(group_output[grp], l.activation_bytes());
    for (size_t k = 0; k < l.inputs.size(); ++k) {  // a receive per micro-batch, all posted at the step's start
      const int in = l.inputs[k];
      const int from = p.layer_group[in];
      if (from == grp || (solo_device[from] == solo_device[grp] && solo_device[grp] >= 0)) continue;
      const bool repeated = std::find(l.inputs.begin(), l.inputs.begin() + static_cast<long>(k), in) !=
                            l.inputs.begin() + static_cast<long>(k);  // the same input twice: one receive
      if (input_counted_by[in] != grp && !repeated) recv_sum[grp] = sat_add(recv_sum[grp], g.layers[in].activation_bytes());
      input_counted_by[in] = grp;
      if (!grad_counted[in]) {  // the producer receives its gradient for each of its micro-batches
        grad_counted[in] = 1;
        grad_sum[from] = sat_add(grad_sum[from], g.layers[in].activation_bytes());
      }
    }
    if (l.op == lm_head_op()) add_tied_copy(p, g, i, out);
  }
  static const std::vector<int> no_replicas;
  for (int grp = 0; grp < G; ++grp) {
    const std::vector<int>& others = p.replica_count(grp) > 1 ? p.group_replicas[grp] : no_replicas;
    for (size_t k = 0; k <= others.size(); ++k) {
      const int d = k == 0 ? p.group_device[grp] : others[k - 1];
      const int64_t own = own_count[static_cast<size_t>(own_at[grp]) + k];
      // Micro-batches in flight on a replica: its own, up to the schedule's limit at its (first) device.
      const int64_t flight = micro_batches_in_flight(p.schedule, static_cast<int>(own), limit[p.group_device[grp]]);
      MemoryBreakdown m = state_of(param_sum[grp], p.optimizer);
      m.activations = sat_mul(sat_mul(kept_sum[grp], mb), p.recomputes(grp) ? 1 : flight);
      m.buffers = sat_mul(sat_mul(sat_add(recv_sum[grp], grad_sum[grp]), mb), own);
      out[d] += m;
      if (layers_in[grp] > 0) {
        largest_param[d] = std::max(largest_param[d], group_param[grp]);
        largest_output[d] = std::max(largest_output[d], group_output[grp]);
      }
    }
  }
  for (int d = 0; d < c.num_devices(); ++d)
    if (largest_param[d] > 0 || largest_output[d] > 0) {
      out[d].buffers = sat_add(out[d].buffers, workspace_bytes(largest_param[d], largest_output[d], mb));
      add_update_workspace(out[d], largest_param[d], p.optimizer);
    }
  return out;
}

std::vector<int64_t> estimate_device_memory_bytes(const Placement& p, const LayerGraph& g, const Cluster& c,
                                                  int64_t batch_size) {
  const std::vector<MemoryBreakdown> parts = estimate_device_memory(p, g, c, batch_size);
  std::vector<int64_t> bytes(parts.size());
  for (size_t d = 0; d < parts.size(); ++d) bytes[d] = parts[d].total();
  return bytes;
}

std::string memory_breakdown_text(const MemoryBreakdown& m, Optimizer o) {
  return breakdown_in(m, o, 1024.0 * 1024 * 1024);
}

Status check_memory(const Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size) {
  const std::vector<MemoryBreakdown> parts = estimate_device_memory(p, g, c, batch_size);
  for (int d = 0; d < c.num_devices(); ++d) {
    const int64_t need = parts[d].total(), have = device_memory_bytes(c.devices[d]);
    if (need <= have) continue;
    // GB (2^30) for devices of a GB or more, else MB (2^20), so small devices read sensibly.
    const bool big = have >= (int64_t{1} << 30);
    const double unit = big ? 1024.0 * 1024 * 1024 : 1024.0 * 1024;
    const char* u = big ? " GB" : " MB";
    return Status::error("device '" + c.devices[d].name + "' needs " + in_unit(need, unit) + u + " (" +
                         breakdown_in(parts[d], p.optimizer, unit) +
                         ") but has " + in_unit(have, unit) + u + ": over by " + in_unit(need - have, unit) + u);
  }
  return Status::ok();
}

bool recompute_where_needed(Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size) {
  std::vector<int64_t> bytes = estimate_device_memory_bytes(p, g, c, batch_size);
  auto over = [&](int d) { return bytes[d] > device_memory_bytes(c.devices[d]); };
  bool any_over = false;
  for (int d = 0; d < c.num_devices(); ++d) any_over = any_over || over(d);
  if (!any_over) return true;
  if (p.is_data_parallel()) return false;
  // Per group: the activation bytes per sample it keeps (the larger first).
  const int G = p.num_groups();
  std::vector<int64_t> kept(G, 0);
  for (size_t i = 0; i < g.layers.size(); ++i)
    kept[p.layer_group[i]] = sat_add(kept[p.layer_group[i]], kept_bytes_per_sample(g, static_cast<int>(i)));
  std::vector<int> order(G);
  for (int k = 0; k < G; ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return kept[a] > kept[b]; });
  if (p.group_recompute.empty()) p.group_recompute.assign(G, 0);
  for (int grp : order) {
    if (p.group_recompute[grp]) continue;
    bool on_over = false;
    for (int d : p.devices_of_group(grp)) on_over = on_over || over(d);
    if (!on_over) continue;
    p.group_recompute[grp] = 1;
    bytes = estimate_device_memory_bytes(p, g, c, batch_size);
  }
  for (int d = 0; d < c.num_devices(); ++d)
    if (over(d)) return false;
  return true;
}

namespace {
// "data_parallel" (bool, true = bsp) and "data_parallel_mode" (a name); when
// both are given they must agree.
Status read_data_parallel_mode(const json& j, DataParallelMode& mode) {
  bool flag = false;
  if (Status s = jf::read(j, "data_parallel", flag, "placement"); !s) return s;
  mode = flag ? DataParallelMode::bsp : DataParallelMode::none;
  auto given = [&](const char* key) { return j.contains(key) && !j.at(key).is_null(); };
  if (!given("data_parallel_mode")) return Status::ok();
  std::string name;
  if (Status s = jf::read(j, "data_parallel_mode", name, "placement"); !s) return s;
  auto named = data_parallel_mode_from_name(name);
  if (!named) return named.status().with_context("placement.data_parallel_mode");
  if (given("data_parallel") && flag != (*named != DataParallelMode::none))
    return Status::error("placement.data_parallel_mode: \"" + name +
                         "\" contradicts \"data_parallel\": " + (flag ? "true" : "false"));
  mode = *named;
  return Status::ok();
}

// "optimizer": "sgd" (default) or "adam".
Status read_optimizer(const json& j, Optimizer& o) {
  if (!j.contains("optimizer") || j.at("optimizer").is_null()) return Status::ok();
  std::string name;
  if (Status s = jf::read(j, "optimizer", name, "placement"); !s) return s;
  auto named = optimizer_from_name(name);
  if (!named) return jf::field_error("placement.optimizer", named.error_message());
  o = *named;
  return Status::ok();
}

// "recompute": the indices of the groups that recompute their forward in backward.
Status read_recompute(const json& j, Placement& p) {
  auto it = j.find("recompute");
  if (it == j.end() || it->is_null()) return Status::ok();
  if (!it->is_array()) return jf::field_error("placement.recompute", std::string("expected an array of group indices, got ") + it->type_name());
  if (it->empty()) return Status::ok();
  p.group_recompute.assign(p.num_groups(), 0);
  for (size_t k = 0; k < it->size(); ++k) {
    const json& v = (*it)[k];
    const std::string where = "placement.recompute[" + std::to_string(k) + "]";
    int64_t grp = 0;
    if (!jf::integer_value(v, grp)) return jf::field_error(where, std::string("expected a group index, got ") + v.type_name());
    if (grp < 0 || grp >= p.num_groups()) return jf::field_error(where, "group " + std::to_string(grp) + " does not exist");
    if (p.group_recompute[grp]) return jf::field_error(where, "group " + std::to_string(grp) + " is named twice");
    p.group_recompute[grp] = 1;
  }
  return Status::ok();
}

// "replica_weights": {"<group index>": [one positive integer per device of the group], ...}.
Status read_replica_weights(const json& j, Placement& p) {
  auto it = j.find("replica_weights");
  if (it == j.end() || it->is_null()) return Status::ok();
  if (!it->is_object())
    return jf::field_error("placement.replica_weights",
                           std::string("expected an object of group index -> weights, got ") + it->type_name());
  if (it->empty()) return Status::ok();
  p.group_replica_weights.assign(p.num_groups(), {});
  for (auto w = it->begin(); w != it->end(); ++w) {
    const std::string where = "placement.replica_weights." + w.key();
    const std::string& key = w.key();
    if (key.empty() || key.size() > 6 || !std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
      return jf::field_error(where, "expected a group index as the key");
    const int grp = std::stoi(key);
    if (grp >= p.num_groups()) return jf::field_error(where, "group " + key + " does not exist");
    if (!w->is_array() || w->empty())
      return jf::field_error(where, std::string("expected a non-empty array of weights, got ") + w->type_name());
    for (size_t k = 0; k < w->size(); ++k) {
      const json& v = (*w)[k];
      int64_t weight = 0;
      if (!jf::integer_value(v, weight) || weight < 1 || weight > kMaxReplicaWeight)
        return jf::field_error(where + "[" + std::to_string(k) + "]",
                               "expected an integer in [1, " + std::to_string(kMaxReplicaWeight) + "]");
      p.group_replica_weights[grp].push_back(static_cast<int>(weight));
    }
  }  // one weight per device of the group: validate_placement
  return Status::ok();
}

// A group's devices: one name, or a non-empty array of names (replicas).
Result<std::vector<int>> read_group_devices(const json& gj, const Cluster& c, const std::string& where) {
  auto index = [&](const json& name, const std::string& at) -> Result<int> {
    if (!name.is_string())
      return jf::field_error(at, std::string("expected a device name, got ") + name.type_name());
    int d = c.index_of(name.get<std::string>());
    if (d < 0) return jf::field_error(at, "unknown device \"" + name.get<std::string>() + "\"");
    return d;
  };
  std::vector<int> devices;
  if (!gj.is_array()) {
    auto d = index(gj, where);
    if (!d) return d.status();
    return std::vector<int>{*d};
  }
  if (gj.empty()) return jf::field_error(where, "a replicated group names at least one device");
  for (size_t k = 0; k < gj.size(); ++k) {
    auto d = index(gj[k], where + "[" + std::to_string(k) + "]");
    if (!d) return d.status();
    if (std::find(devices.begin(), devices.end(), *d) != devices.end())
      return jf::field_error(where + "[" + std::to_string(k) + "]",
                             "device \"" + gj[k].get<std::string>() + "\" is named twice in this group");
    devices.push_back(*d);
  }
  return devices;
}

// Each group's number among those that hold a layer, in order (-1: none); a
// data-parallel placement's groups are its replicas, each kept.
std::vector<int> groups_holding_layers(const Placement& p) {
  std::vector<int> ids(p.num_groups(), -1);
  std::vector<char> used(p.num_groups(), p.is_data_parallel() ? 1 : 0);
  for (int grp : p.layer_group)
    if (grp >= 0 && grp < p.num_groups()) used[grp] = 1;
  int next = 0;
  for (int grp = 0; grp < p.num_groups(); ++grp)
    if (used[grp]) ids[grp] = next++;
  return ids;
}

}  // namespace

json placement_to_json(const Placement& p, const LayerGraph& g, const Cluster& c) {
  const std::vector<int> ids = groups_holding_layers(p);  // groups without layers are left out
  // Data parallelism on one device is that device's own plan (the whole batch
  // at once, nothing to all-reduce): written as one, a single group,
  // which every reader takes (export refuses data parallelism).
  const bool replicated = p.is_data_parallel() && p.group_device.size() > 1;
  json j;
  j["micro_batches"] = p.micro_batches;  // 1 for data parallelism
  j["schedule"] = schedule_name(p.schedule);
  if (!p.source.empty()) j["source"] = p.source;
  // BSP as it has always been written; other modes named.
  if (replicated) j["data_parallel"] = true;
  if (replicated && p.data_parallel == DataParallelMode::hogwild)
    j["data_parallel_mode"] = data_parallel_mode_name(p.data_parallel);
  if (p.aggregation_every != 1) j["aggregation_every"] = p.aggregation_every;
  if (p.optimizer != Optimizer::sgd) j["optimizer"] = optimizer_name(p.optimizer);
  json recompute = json::array();
  for (int grp = 0; grp < p.num_groups(); ++grp)
    if (ids[grp] >= 0 && p.recomputes(grp)) recompute.push_back(ids[grp]);
  if (!recompute.empty()) j["recompute"] = recompute;
  json weights = json::object();
  for (int grp = 0; grp < p.num_groups(); ++grp)
    if (ids[grp] >= 0 && p.replica_count(grp) > 1 && p.has_replica_weights(grp))
      weights[std::to_string(ids[grp])] = p.group_replica_weights[grp];
  if (!weights.empty()) j["replica_weights"] = weights;
  j["groups"] = json::array();
  for (int grp = 0; grp < p.num_groups(); ++grp) {
    if (ids[grp] < 0) continue;
    if (p.replica_count(grp) == 1) {
      j["groups"].push_back(c.devices.at(p.group_device[grp]).name);
      continue;
    }
    json names = json::array();
    for (int d : p.devices_of_group(grp)) names.push_back(c.devices.at(d).name);
    j["groups"].push_back(names);
  }
  j["layers"] = json::object();
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const int grp = p.layer_group[i];
    j["layers"][g.layers[i].name] = grp >= 0 && grp < p.num_groups() ? ids[grp] : grp;  // a bad one as it is
  }
  return j;
}

Result<Placement> placement_from_json(const json& j, const LayerGraph& g, const Cluster& c) {
  Placement p;
  if (Status s = jf::expect_object(j, "placement"); !s) return s;
  if (Status s = jf::known_fields(j, "placement",
                                  {"$schema", "description", "source", "micro_batches", "data_parallel",
                                   "data_parallel_mode", "schedule", "aggregation_every", "optimizer",
                                   "replica_weights", "recompute", "groups", "layers"});
      !s)
    return s;
  if (Status s = jf::text_field(j, "description", "placement"); !s) return s;
  if (Status s = jf::read(j, "micro_batches", p.micro_batches, "placement", true); !s) return s;
  std::string sched = "gpipe";
  if (Status s = jf::read(j, "schedule", sched, "placement"); !s) return s;
  auto schedule = schedule_from_name(sched);
  if (!schedule) return jf::field_error("placement.schedule", schedule.error_message());
  p.schedule = *schedule;
  if (Status s = jf::read(j, "source", p.source, "placement"); !s) return s;
  if (Status s = read_data_parallel_mode(j, p.data_parallel); !s) return s;
  auto groups = j.find("groups");
  if (groups == j.end()) return jf::field_error("placement.groups", "missing required field");
  if (!groups->is_array() || groups->empty())
    return jf::field_error("placement.groups", "expected a non-empty array of device names");
  if (Status s = jf::read(j, "aggregation_every", p.aggregation_every, "placement"); !s) return s;
  std::vector<std::vector<int>> replicas;
  for (size_t i = 0; i < groups->size(); ++i) {
    std::string where = "placement.groups[" + std::to_string(i) + "]";
    auto devices = read_group_devices((*groups)[i], c, where);
    if (!devices) return devices.status();
    p.group_device.push_back(devices->front());
    replicas.emplace_back(devices->begin() + 1, devices->end());
  }
  for (const auto& r : replicas)
    if (!r.empty()) p.group_replicas = replicas;
  auto layers = j.find("layers");
  if (layers == j.end()) return jf::field_error("placement.layers", "missing required field");
  if (!layers->is_object()) return jf::field_error("placement.layers", "expected an object of layer name -> group");
  p.layer_group.assign(g.layers.size(), -1);
  for (auto it = layers->begin(); it != layers->end(); ++it) {
    std::string where = "placement.layers." + it.key();
    int idx = g.index_of(it.key());
    if (idx < 0) return jf::field_error(where, "the model has no layer with this name");
    int64_t grp = 0;
    if (!jf::integer_value(*it, grp)) return jf::field_error(where, std::string("expected a group index, got ") + it->type_name());
    if (grp < 0 || grp >= p.num_groups())
      return jf::field_error(where, "group " + std::to_string(grp) + " does not exist");
    p.layer_group[idx] = static_cast<int>(grp);
  }
  for (size_t i = 0; i < g.layers.size(); ++i)
    if (p.layer_group[i] < 0) return jf::field_error("placement.layers." + g.layers[i].name, "missing");
  if (!p.is_data_parallel()) {  // a data-parallel placement's groups are its replicas
    const std::vector<int> ids = groups_holding_layers(p);
    for (int grp = 0; grp < p.num_groups(); ++grp)
      if (ids[grp] < 0)
        return jf::field_error("placement.groups[" + std::to_string(grp) + "]",
                               "no layer is in this group (device \"" + c.devices[p.group_device[grp]].name +
                                   "\"); put layers in it or remove it");
  }
  if (Status s = read_optimizer(j, p.optimizer); !s) return s;
  if (Status s = read_recompute(j, p); !s) return s;
  if (Status s = read_replica_weights(j, p); !s) return s;
  return p;
}

Result<Placement> load_placement(const std::string& path, const LayerGraph& g, const Cluster& c) {
  Result<std::string> text = read_file(path);
  if (!text) return text.status().with_context("placement file '" + path + "'");
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Status::error("placement file '" + path + "' is not valid JSON");
  auto p = placement_from_json(j, g, c);
  if (!p) return p.status().with_context(path);
  return p;
}

}  // namespace tapp
