#include "core/cluster.h"

#include <fstream>
#include <set>

#include "common/host_port.h"
#include "common/json_fields.h"

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

Status read_device(const json& j, const std::string& path, Device& d) {
  if (Status s = jf::expect_object(j, path); !s) return s;
  if (Status s = jf::read(j, "name", d.name, path, true); !s) return s;
  if (Status s = jf::read(j, "kind", d.kind, path); !s) return s;
  if (Status s = jf::read(j, "threads", d.threads, path); !s) return s;
  if (Status s = jf::read(j, "memory_mb", d.memory_mb, path); !s) return s;
  if (Status s = jf::read(j, "speed", d.speed, path); !s) return s;
  if (Status s = jf::read(j, "where", d.where, path); !s) return s;
  if (d.name.empty()) return jf::field_error(jf::join(path, "name"), "must not be empty");
  bool cuda = d.kind.rfind("cuda:", 0) == 0 && d.kind.size() > 5 &&
              d.kind.find_first_not_of("0123456789", 5) == std::string::npos;
  if (d.kind != "cpu" && !cuda)
    return jf::field_error(jf::join(path, "kind"), "must be \"cpu\" or \"cuda:N\", got \"" + d.kind + "\"");
  if (d.threads < 1 || d.threads > kMaxThreads) return jf::field_error(jf::join(path, "threads"), "must be in [1, 256]");
  if (d.memory_mb < 1 || d.memory_mb > kMaxMemoryMb)
    return jf::field_error(jf::join(path, "memory_mb"), "must be in [1, 2^30]");
  if (!(d.speed > 0 && d.speed <= 1)) return jf::field_error(jf::join(path, "speed"), "must be in (0, 1]");
  // A tinier speed stretches a step past what a double keeps meaningful (5e-324 gave a 0.0 ms step).
  if (d.speed < kMinSpeed)
    return jf::field_error(jf::join(path, "speed"), "must be at least 0.001 (1/1000 of this host's speed)");
  if (!d.is_local()) {
    const std::string where_field = jf::join(path, "where");
    auto endpoint = parse_host_port(d.where, where_field);
    if (!endpoint)
      return Status::error(endpoint.error_message() + " (\"local\" or the host:port of a tapp-worker)")
          .at_field(where_field)
          .with_code(ErrorCode::invalid_argument);
  }
  return Status::ok();
}

}  // namespace

Result<Cluster> cluster_from_json(const json& j) {
  Cluster c;
  if (Status s = jf::expect_object(j, "cluster"); !s) return s;
  if (Status s = jf::read(j, "name", c.name, ""); !s) return s;
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
    if (Status s = read_link_fields(*dl, "default_link", c.default_link); !s) return s;
  }
  if (auto links = j.find("links"); links != j.end() && !links->is_null()) {
    if (!links->is_array()) return jf::field_error("links", "expected an array, got " + std::string(links->type_name()));
    if (links->size() > static_cast<size_t>(kMaxDevices * kMaxDevices))
      return jf::field_error("links", "at most " + std::to_string(kMaxDevices * kMaxDevices) + " links");
    for (size_t i = 0; i < links->size(); ++i) {
      std::string path = "links[" + std::to_string(i) + "]";
      const json& lj = (*links)[i];
      if (Status s = jf::expect_object(lj, path); !s) return s;
      Link l = c.default_link;
      if (Status s = jf::read(lj, "from", l.from, path, true); !s) return s;
      if (Status s = jf::read(lj, "to", l.to, path, true); !s) return s;
      if (!names.count(l.from)) return jf::field_error(path + ".from", "unknown device \"" + l.from + "\"");
      if (!names.count(l.to)) return jf::field_error(path + ".to", "unknown device \"" + l.to + "\"");
      if (Status s = read_link_fields(lj, path, l); !s) return s;
      c.links.push_back(l);
    }
  }
  return c;
}

Result<Cluster> load_cluster(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::error("cannot open cluster file '" + path + "'");
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) return Status::error("cluster file '" + path + "' is not valid JSON");
  auto c = cluster_from_json(j);
  if (!c) return c.status().with_context(path);
  return c;
}

json cluster_to_json(const Cluster& c) {
  json j;
  if (!c.name.empty()) j["name"] = c.name;
  j["devices"] = json::array();
  for (const Device& d : c.devices)
    j["devices"].push_back({{"name", d.name}, {"kind", d.kind}, {"threads", d.threads},
                            {"memory_mb", d.memory_mb}, {"speed", d.speed}, {"where", d.where}});
  j["default_link"] = {{"bandwidth_mbps", c.default_link.bandwidth_mbps},
                       {"latency_ms", c.default_link.latency_ms}};
  j["links"] = json::array();
  for (const Link& l : c.links)
    j["links"].push_back({{"from", l.from}, {"to", l.to}, {"bandwidth_mbps", l.bandwidth_mbps},
                          {"latency_ms", l.latency_ms}});
  return j;
}

}  // namespace tapp
