#include "core/cluster.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <filesystem>
#include <set>

#include "common/host_port.h"
#include "common/json_fields.h"
#include "common/read_file.h"

namespace tapp {
namespace jf = json_fields;
using nlohmann::json;

int Cluster::index_of(const std::string& device_name) const {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i].name == device_name) return static_cast<int>(i);
  return -1;
}

const Link& Cluster::link(int from, int to) const {
  for (const Link& l : links)
    if (l.from == devices[from].name && l.to == devices[to].name) return l;
  return default_link;
}

double Cluster::emulated_core_demand() const {
  double demand = 0;
  for (const Device& d : devices)
    if (d.is_local()) demand += d.speed * d.threads;
  return demand;
}

namespace {

Status read_link_fields(const json& j, const std::string& path, Link& l) {
  if (Status s = jf::read(j, "bandwidth_mbps", l.bandwidth_mbps, path); !s) return s;
  if (Status s = jf::read(j, "latency_ms", l.latency_ms, path); !s) return s;
  if (!(l.bandwidth_mbps >= kMinBandwidthMbps) || l.bandwidth_mbps > kMaxBandwidthMbps)
    return jf::field_error(jf::join(path, "bandwidth_mbps"), "must be in [0.001, 1e9] (1 kbit/s to 1 Pbit/s)");
  if (!(l.latency_ms >= 0) || l.latency_ms > kMaxLatencyMs)
    return jf::field_error(jf::join(path, "latency_ms"), "must be in [0, 60000]");
  return Status::ok();
}

// `costs`: absent, "host", "worker" (a remote device only) or {"library": "path"}.
Status read_costs(const json& j, const std::string& path, Device& d) {
  auto it = j.find("costs");
  if (it == j.end()) return Status::ok();
  const std::string field = jf::join(path, "costs");
  const std::string expected = "expected \"host\", \"worker\" or {\"library\": \"path/to/layer_library.json\"}";
  if (it->is_string()) {
    const std::string v = it->get<std::string>();
    if (v == "host") return Status::ok();
    if (v != "worker") return jf::field_error(field, expected + ", got \"" + v + "\"");
    if (d.is_local())
      return jf::field_error(field, "\"worker\" needs a device hosted by a remote tapp-worker (where: \"host:port\")");
    d.costs.from = CostsFrom::worker;
    return Status::ok();
  }
  if (!it->is_object()) return jf::field_error(field, expected + ", got " + std::string(it->type_name()));
  if (Status s = jf::known_fields(*it, field, {"library"}); !s) return s;
  if (Status s = jf::read(*it, "library", d.costs.library_path, field, true); !s) return s;
  if (d.costs.library_path.empty()) return jf::field_error(jf::join(field, "library"), "must not be empty");
  d.costs.from = CostsFrom::library;
  return Status::ok();
}

Status read_device(const json& j, const std::string& path, Device& d) {
  if (Status s = jf::expect_object(j, path); !s) return s;
  if (Status s = jf::known_fields(j, path, {"name", "kind", "threads", "memory_mb", "speed", "costs", "where"}); !s)
    return s;
  if (Status s = jf::read(j, "name", d.name, path, true); !s) return s;
  if (Status s = jf::read(j, "kind", d.kind, path); !s) return s;
  if (Status s = jf::read(j, "threads", d.threads, path); !s) return s;
  if (Status s = jf::read(j, "memory_mb", d.memory_mb, path); !s) return s;
  if (Status s = jf::read(j, "speed", d.speed, path); !s) return s;
  if (Status s = jf::read(j, "where", d.where, path); !s) return s;
  if (d.name.empty()) return jf::field_error(jf::join(path, "name"), "must not be empty");
  if (d.kind != "cpu" && !cuda_index(d.kind))
    return jf::field_error(jf::join(path, "kind"), "must be \"cpu\" or \"cuda:N\", got \"" + d.kind + "\"");
  if (d.threads < 1 || d.threads > kMaxThreads) return jf::field_error(jf::join(path, "threads"), "must be in [1, 256]");
  if (d.memory_mb < 1 || d.memory_mb > kMaxMemoryMb)
    return jf::field_error(jf::join(path, "memory_mb"), "must be in [1, 2^30]");
  // A tinier speed stretches a step past what a double keeps meaningful (5e-324 gave a 0.0 ms step);
  // a larger one makes a step of a real model vanish below the fixed costs per task.
  if (!(d.speed >= kMinSpeed && d.speed <= kMaxSpeed))
    return jf::field_error(jf::join(path, "speed"),
                           "must be in [0.001, 1000] (relative to this host; above 1 can only be simulated)");
  if (!d.is_local()) {
    const std::string where_field = jf::join(path, "where");
    auto endpoint = parse_host_port(d.where, where_field);
    if (!endpoint)
      return Status::error(endpoint.error_message() + " (\"local\" or the host:port of a tapp-worker)")
          .at_field(where_field)
          .with_code(ErrorCode::invalid_argument);
  }
  return read_costs(j, path, d);
}

}  // namespace

std::optional<int> cuda_index(const std::string& kind) {
  const std::string prefix = "cuda:";
  if (kind.rfind(prefix, 0) != 0 || kind.size() == prefix.size() ||
      kind.find_first_not_of("0123456789", prefix.size()) != std::string::npos)
    return std::nullopt;
  int64_t n = 0;
  for (size_t i = prefix.size(); i < kind.size(); ++i)
    n = std::min<int64_t>(std::numeric_limits<int>::max(), n * 10 + (kind[i] - '0'));
  return static_cast<int>(n);
}

Result<Cluster> cluster_from_json(const json& j) {
  Cluster c;
  if (Status s = jf::expect_object(j, "cluster"); !s) return s;
  if (Status s = jf::known_fields(j, "", {"$schema", "name", "description", "devices", "default_link", "links"}); !s)
    return s;
  if (Status s = jf::read(j, "name", c.name, ""); !s) return s;
  if (Status s = jf::text_field(j, "description", ""); !s) return s;
  auto devs = j.find("devices");
  if (devs == j.end()) return jf::field_error("devices", "missing required field");
  if (!devs->is_array()) return jf::field_error("devices", "expected an array, got " + std::string(devs->type_name()));
  if (devs->empty()) return jf::field_error("devices", "must name at least one device");
  if (devs->size() > static_cast<size_t>(kMaxDevices)) return jf::field_error("devices", "at most " + std::to_string(kMaxDevices) + " devices");
  std::set<std::string> names;
  for (size_t i = 0; i < devs->size(); ++i) {
    Device d;
    std::string path = "devices[" + std::to_string(i) + "]";
    if (Status s = read_device((*devs)[i], path, d); !s) return s;
    if (!names.insert(d.name).second)
      return jf::field_error(path + ".name", "device name \"" + d.name + "\" is used twice");
    c.devices.push_back(d);
  }
  if (auto dl = j.find("default_link"); dl != j.end()) {
    if (Status s = jf::expect_object(*dl, "default_link"); !s) return s;
    if (Status s = jf::known_fields(*dl, "default_link", {"bandwidth_mbps", "latency_ms"}); !s) return s;
    if (Status s = read_link_fields(*dl, "default_link", c.default_link); !s) return s;
  }
  if (auto links = j.find("links"); links != j.end()) {
    if (!links->is_array()) return jf::field_error("links", "expected an array, got " + std::string(links->type_name()));
    if (links->size() > static_cast<size_t>(kMaxDevices * kMaxDevices))
      return jf::field_error("links", "at most " + std::to_string(kMaxDevices * kMaxDevices) + " links");
    std::map<std::pair<std::string, std::string>, size_t> link_index;  // (from, to) -> its entry
    for (size_t i = 0; i < links->size(); ++i) {
      std::string path = "links[" + std::to_string(i) + "]";
      const json& lj = (*links)[i];
      if (Status s = jf::expect_object(lj, path); !s) return s;
      if (Status s = jf::known_fields(lj, path, {"from", "to", "bandwidth_mbps", "latency_ms"}); !s) return s;
      Link l = c.default_link;
      if (Status s = jf::read(lj, "from", l.from, path, true); !s) return s;
      if (Status s = jf::read(lj, "to", l.to, path, true); !s) return s;
      if (!names.count(l.from)) return jf::field_error(path + ".from", "unknown device \"" + l.from + "\"");
      if (!names.count(l.to)) return jf::field_error(path + ".to", "unknown device \"" + l.to + "\"");
      if (l.from == l.to) return jf::field_error(path + ".to", "a link joins two devices, got \"" + l.to + "\" twice");
      if (auto [earlier, fresh] = link_index.try_emplace({l.from, l.to}, i); !fresh)
        return jf::field_error(path, "the link " + l.from + " -> " + l.to + " is already links[" +
                                         std::to_string(earlier->second) + "] (each direction once)");
      if (Status s = read_link_fields(lj, path, l); !s) return s;
      c.links.push_back(l);
    }
  }
  return c;
}

Result<Cluster> load_cluster(const std::string& path) {
  Result<std::string> text = read_file(path);
  if (!text) return text.status().with_context("cluster file '" + path + "'");
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded()) return Status::error("cluster file '" + path + "' is not valid JSON");
  resolve_library_paths(j, path);
  auto c = cluster_from_json(j);
  if (!c) return c.status().with_context(path);
  return c;
}

void resolve_library_paths(json& cluster, const std::string& path) {
  if (!cluster.is_object()) return;
  const auto devices = cluster.find("devices");
  if (devices == cluster.end() || !devices->is_array()) return;
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  for (json& d : *devices) {
    if (!d.is_object()) continue;
    const auto costs = d.find("costs");
    if (costs == d.end() || !costs->is_object()) continue;
    const auto library = costs->find("library");
    if (library == costs->end() || !library->is_string()) continue;
    const std::string given = library->get<std::string>();
    if (!given.empty() && std::filesystem::path(given).is_relative())
      *library = (folder / given).lexically_normal().string();
  }
}

json cluster_to_json(const Cluster& c) {
  json j;
  if (!c.name.empty()) j["name"] = c.name;
  j["devices"] = json::array();
  for (const Device& d : c.devices) {
    json dj = {{"name", d.name},           {"kind", d.kind},   {"threads", d.threads},
               {"memory_mb", d.memory_mb}, {"speed", d.speed}, {"where", d.where}};
    if (d.costs.from == CostsFrom::worker) dj["costs"] = "worker";
    if (d.costs.from == CostsFrom::library) dj["costs"] = {{"library", d.costs.library_path}};
    j["devices"].push_back(std::move(dj));
  }
  j["default_link"] = {{"bandwidth_mbps", c.default_link.bandwidth_mbps},
                       {"latency_ms", c.default_link.latency_ms}};
  j["links"] = json::array();
  for (const Link& l : c.links)
    j["links"].push_back({{"from", l.from}, {"to", l.to}, {"bandwidth_mbps", l.bandwidth_mbps},
                          {"latency_ms", l.latency_ms}});
  return j;
}

Status measurable_here(const Cluster& c, const std::vector<int>& devices, const std::string& prefix) {
  auto check = [&](int i) -> Status {
    const Device& d = c.devices[i];
    if (d.speed <= kMaxEmulatedSpeed) return Status::ok();
    char speed[32];
    std::snprintf(speed, sizeof speed, "%g", d.speed);
    const std::string field = prefix + "devices[" + std::to_string(i) + "].speed";
    return Status::field_error(field, std::string(speed) + " cannot be emulated on this host (device \"" + d.name +
                                          "\"; measurement needs speed <= 1)");
  };
  if (devices.empty()) {
    for (int i = 0; i < c.num_devices(); ++i)
      if (Status s = check(i); !s) return s;
  }
  for (int i : devices)
    if (i >= 0 && i < c.num_devices())
      if (Status s = check(i); !s) return s;
  return Status::ok();
}

std::string costs_from_name(CostsFrom from) {
  switch (from) {
    case CostsFrom::host: return "host";
    case CostsFrom::library: return "library";
    case CostsFrom::worker: return "worker";
  }
  return "host";
}

}  // namespace tapp
