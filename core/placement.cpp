#include "core/placement.h"

#include <algorithm>
#include <fstream>
#include <set>

#include "common/checked_math.h"
#include "common/json_fields.h"
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
  }
  return "gpipe";
}

Result<Schedule> schedule_from_name(const std::string& name) {
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved_1f1b})
    if (name == schedule_name(s)) return s;
  return Status::error("unknown schedule \"" + name + "\"; expected \"gpipe\", \"1f1b\" or \"interleaved_1f1b\"");
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

std::vector<int> Placement::devices_of_group(int g) const {
  std::vector<int> d{group_device[g]};
  if (!group_replicas.empty()) d.insert(d.end(), group_replicas[g].begin(), group_replicas[g].end());
  return d;
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

// A replicated group is one stage: one all-reduce after its backward pass.
// It must not be both upstream and downstream of another group (a cycle in
// the groups' graph through it). Returns the offending pair or {-1, -1}.
std::pair<int, int> replicated_group_in_cycle(const Placement& p, const LayerGraph& g) {
  const int G = p.num_groups();
  std::vector<std::vector<char>> reach(G, std::vector<char>(G, 0));
  for (size_t l = 0; l < g.layers.size(); ++l)
    for (int in : g.layers[l].inputs)
      if (p.layer_group[in] != p.layer_group[l]) reach[p.layer_group[in]][p.layer_group[l]] = 1;
  for (int k = 0; k < G; ++k)  // transitive closure; G is small
    for (int i = 0; i < G; ++i)
      if (reach[i][k])
        for (int j = 0; j < G; ++j)
          if (reach[k][j]) reach[i][j] = 1;
  for (int a = 0; a < G; ++a) {
    if (p.replica_count(a) == 1) continue;
    for (int b = 0; b < G; ++b)
      if (b != a && reach[a][b] && reach[b][a]) return {a, b};
  }
  return {-1, -1};
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
  if (p.aggregation_every > 1 && !p.has_replicated_groups())
    return Status::error("placement.aggregation_every: " + std::to_string(p.aggregation_every) +
                         " needs a replicated group (a group with several devices)");
  if (auto [a, b] = replicated_group_in_cycle(p, g); a >= 0)
    return Status::error("placement.groups[" + std::to_string(a) + "]: replicated group " + std::to_string(a) +
                         " is both before and after group " + std::to_string(b) +
                         " (a cycle in the groups' graph); a replicated group must be one stage — split it");
  // Training-mode BatchNorm needs more than one value per channel in a micro-batch.
  const int64_t smallest_micro_batch = p.is_data_parallel()
                                           ? batch_size / static_cast<int64_t>(p.group_device.size())
                                           : batch_size / p.micro_batches;
  static const std::string kBatchNorm = "batchnorm2d";  // string == string compares sizes first (search loops)
  for (const Layer& l : g.layers) {
    if (l.op != kBatchNorm || l.input_shapes.empty() || l.input_shapes[0].size() != 3) continue;
    if (smallest_micro_batch * l.input_shapes[0][1] * l.input_shapes[0][2] <= 1)
      return Status::error("placement.micro_batches: " + std::to_string(p.micro_batches) + " micro-batches of " +
                           std::to_string(smallest_micro_batch) + " sample(s) leave BatchNorm layer '" + l.name +
                           "' one value per channel; use fewer micro-batches");
  }
  return Status::ok();
}

namespace {
// One layer's share of a device's memory: weights, gradients and optimizer
// state, plus its activations kept for backward by the micro-batches in flight.
int64_t layer_memory_bytes(const Layer& l, int64_t samples, int64_t in_flight) {
  // Saturating: a model whose size overflows 64 bits is simply over every device.
  return sat_add(training_state_bytes(l.param_bytes()), sat_mul(sat_mul(l.activation_bytes(), samples), in_flight));
}
}  // namespace

int64_t device_memory_bytes(const Device& d) { return sat_mul(d.memory_mb, 1024 * 1024); }

int64_t training_state_bytes(int64_t param_bytes) { return sat_mul(3, param_bytes); }

int64_t micro_batches_in_flight(Schedule schedule, int micro_batches, int stages) {
  // Interleaved 1F1B keeps one more round of warm-up micro-batches than 1F1B (Megatron).
  switch (schedule) {
    case Schedule::gpipe:
      return micro_batches;
    case Schedule::one_f_one_b:
      return std::min(micro_batches, stages);
    case Schedule::interleaved_1f1b:
      return std::min(micro_batches, stages + 1);
  }
  return micro_batches;
}

StageMemory::StageMemory(const LayerGraph& g) {
  param_prefix_.assign(g.layers.size() + 1, 0);
  activation_prefix_.assign(g.layers.size() + 1, 0);
  for (size_t i = 0; i < g.layers.size(); ++i) {
    param_prefix_[i + 1] = sat_add(param_prefix_[i], g.layers[i].param_bytes());
    activation_prefix_[i + 1] = sat_add(activation_prefix_[i], g.layers[i].activation_bytes());
  }
}

int64_t StageMemory::bytes(int first, int end, int64_t samples, int64_t in_flight) const {
  return sat_add(training_state_bytes(param_bytes(first, end)),
                 sat_mul(sat_mul(activation_prefix_[end] - activation_prefix_[first], samples), in_flight));
}

std::vector<int64_t> estimate_device_memory_bytes(const Placement& p, const LayerGraph& g, const Cluster& c,
                                                  int64_t batch_size) {
  std::vector<int64_t> bytes(c.num_devices(), 0);
  if (p.is_data_parallel()) {
    const int64_t share = p.replica_share(batch_size);
    for (int d : p.group_device)
      for (const Layer& l : g.layers) bytes[d] = sat_add(bytes[d], layer_memory_bytes(l, share, 1));
    return bytes;
  }
  // (Search loops call this for every candidate: no allocation per layer.)
  std::vector<char> used(c.num_devices(), 0);
  for (size_t i = 0; i < g.layers.size(); ++i) used[p.device_of_layer(static_cast<int>(i))] = 1;
  const int stages = static_cast<int>(std::count(used.begin(), used.end(), 1));
  const int64_t mb = (batch_size + p.micro_batches - 1) / p.micro_batches;
  for (size_t i = 0; i < g.layers.size(); ++i) {
    const int grp = p.layer_group[i];
    const int replicas = p.replica_count(grp);
    // Each replica runs every replicas-th micro-batch of the group.
    const int own_micro_batches = (p.micro_batches + replicas - 1) / replicas;
    const int64_t in_flight = micro_batches_in_flight(p.schedule, own_micro_batches, stages);
    const int64_t layer_bytes = layer_memory_bytes(g.layers[i], mb, in_flight);
    bytes[p.group_device[grp]] = sat_add(bytes[p.group_device[grp]], layer_bytes);
    if (replicas > 1)
      for (int d : p.group_replicas[grp]) bytes[d] = sat_add(bytes[d], layer_bytes);
  }
  return bytes;
}

Status check_memory(const Placement& p, const LayerGraph& g, const Cluster& c, int64_t batch_size) {
  auto bytes = estimate_device_memory_bytes(p, g, c, batch_size);
  for (int d = 0; d < c.num_devices(); ++d) {
    if (bytes[d] > device_memory_bytes(c.devices[d]))
      return Status::error("device '" + c.devices[d].name + "' needs " + std::to_string(bytes[d] / (1024 * 1024)) +
                           " MB for its layers but has memory_mb " + std::to_string(c.devices[d].memory_mb));
  }
  return Status::ok();
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
}  // namespace

json placement_to_json(const Placement& p, const LayerGraph& g, const Cluster& c) {
  json j;
  j["micro_batches"] = p.micro_batches;
  j["schedule"] = schedule_name(p.schedule);
  if (!p.source.empty()) j["source"] = p.source;
  // BSP as it has always been written; other modes named.
  if (p.is_data_parallel()) j["data_parallel"] = true;
  if (p.data_parallel == DataParallelMode::hogwild)
    j["data_parallel_mode"] = data_parallel_mode_name(p.data_parallel);
  if (p.aggregation_every != 1) j["aggregation_every"] = p.aggregation_every;
  j["groups"] = json::array();
  for (int grp = 0; grp < p.num_groups(); ++grp) {
    if (p.replica_count(grp) == 1) {
      j["groups"].push_back(c.devices.at(p.group_device[grp]).name);
      continue;
    }
    json names = json::array();
    for (int d : p.devices_of_group(grp)) names.push_back(c.devices.at(d).name);
    j["groups"].push_back(names);
  }
  j["layers"] = json::object();
  for (size_t i = 0; i < g.layers.size(); ++i) j["layers"][g.layers[i].name] = p.layer_group[i];
  return j;
}

Result<Placement> placement_from_json(const json& j, const LayerGraph& g, const Cluster& c) {
  Placement p;
  if (Status s = jf::expect_object(j, "placement"); !s) return s;
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
    if (!it->is_number_integer()) return jf::field_error(where, std::string("expected a group index, got ") + it->type_name());
    int64_t grp = it->get<int64_t>();
    if (grp < 0 || grp >= p.num_groups())
      return jf::field_error(where, "group " + std::to_string(grp) + " does not exist");
    p.layer_group[idx] = static_cast<int>(grp);
  }
  for (size_t i = 0; i < g.layers.size(); ++i)
    if (p.layer_group[i] < 0) return jf::field_error("placement.layers." + g.layers[i].name, "missing");
  return p;
}

Result<Placement> load_placement(const std::string& path, const LayerGraph& g, const Cluster& c) {
  std::ifstream in(path);
  if (!in) return Status::error("cannot open placement file '" + path + "'");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) return Status::error("placement file '" + path + "' is not valid JSON");
  auto p = placement_from_json(j, g, c);
  if (!p) return p.status().with_context(path);
  return p;
}

}  // namespace tapp
