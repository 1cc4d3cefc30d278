// core/cluster.h — the devices a placement runs on and the links between them.
//
// Owns `Cluster` (devices + directed links + a default link for unnamed pairs)
// and its JSON form (schemas/cluster.schema.json). Links may be asymmetric:
// A->B and B->A are separate entries, as PipeLearn's up and down links.
// A device's `speed` and a link's bandwidth/latency are *emulated* by the
// runtime (sleep after compute, paced sends); see DESIGN.md. A speed above 1
// (a device faster than this host) is a plan that can only be simulated:
// `measurable_here` refuses it for every measuring path, naming the device.
// A device may also say where its costs come from (`DeviceCosts`): this host's
// profile divided by its speed (the default), a layer library measured
// elsewhere, or the profile its own remote tapp-worker takes on its hardware.
// Thread safety: plain values.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace tapp {

// The sane ranges cluster_from_json enforces (schemas/cluster.schema.json says the same):
//   speed in [0.001, 1000] (relative to this host; a tinier speed made a 0.0 ms step,
//   and only speed <= 1 can be emulated by measurement), threads in [1, 256], memory_mb in [1, 2^30] (1 MiB .. 1 PiB),
//   bandwidth_mbps in [0.001, 1e9], latency_ms in [0, 60000], at most 64 devices
//   and 64 x 64 links. Every figure derived from them stays finite and positive.
inline constexpr double kMinSpeed = 1e-3;
inline constexpr double kMaxSpeed = 1e3;
inline constexpr double kMaxEmulatedSpeed = 1.0;  // measuring stretches compute; it cannot shrink it
inline constexpr int kMaxThreads = 256;
inline constexpr int64_t kMaxMemoryMb = int64_t{1} << 30;
inline constexpr double kMinBandwidthMbps = 1e-3;
inline constexpr double kMaxBandwidthMbps = 1e9;
inline constexpr double kMaxLatencyMs = 60000;
inline constexpr int kMaxDevices = 64;

// Where a device's per-layer costs come from (cluster JSON `costs`).
enum class CostsFrom {
  host,     // absent or "host": this host's profile at the device's kind and threads, / speed
  library,  // {"library": "path"}: a layer library measured elsewhere (tapp-cli profile --json)
  worker,   // "worker": its remote tapp-worker profiles the model on its own hardware
};

struct DeviceCosts {
  CostsFrom from = CostsFrom::host;
  std::string library_path;  // CostsFrom::library; load_cluster resolves it against the cluster file
  bool operator==(const DeviceCosts& o) const { return from == o.from && library_path == o.library_path; }
};

// N of a device kind "cuda:N" (decimal digits; saturates at INT_MAX); nullopt
// for "cpu" or anything else.
std::optional<int> cuda_index(const std::string& kind);

struct Device {
  std::string name;
  std::string kind = "cpu";  // "cpu" or "cuda:N" (cuda_index)
  int threads = 1;
  int64_t memory_mb = 4096;
  double speed = 1.0;           // relative to this host; costs are divided by it (measured: stretched, <= 1 only)
  std::string where = "local";  // "local" or "host:port" of a tapp-worker
  DeviceCosts costs;
  bool is_local() const { return where == "local"; }
};

struct Link {
  std::string from, to;  // device names; empty in the default link
  double bandwidth_mbps = 10000.0;
  double latency_ms = 0.05;
  // Seconds to move `bytes` over this link.
  double transfer_s(int64_t bytes) const {
    return latency_ms / 1e3 + static_cast<double>(bytes) * 8.0 / (bandwidth_mbps * 1e6);
  }
};

struct Cluster {
  std::string name;
  std::vector<Device> devices;
  std::vector<Link> links;
  Link default_link;

  int num_devices() const { return static_cast<int>(devices.size()); }
  int index_of(const std::string& device_name) const;  // -1 if absent
  // The link used from device index `from` to `to` (the default if unnamed).
  const Link& link(int from, int to) const;
  // Sum over local devices of speed * threads: what the emulation needs of the cores.
  double emulated_core_demand() const;
};

// Parses and validates; errors name the field: "devices[1].speed: must be in [0.001, 1000]".
Result<Cluster> cluster_from_json(const nlohmann::json& j);
// As cluster_from_json; a relative `costs.library` path is taken from the cluster file's folder.
Result<Cluster> load_cluster(const std::string& path);
// In a cluster file's JSON read from `path`, each relative `costs.library` path made
// relative to the file's folder instead of the working directory (what load_cluster
// does; for callers that pass the JSON on, as tapp-cli optimize does). Other shapes
// are left for cluster_from_json to report.
void resolve_library_paths(nlohmann::json& cluster, const std::string& path);
nlohmann::json cluster_to_json(const Cluster& c);

// ok when measurement can emulate every device in `devices` (all when empty);
// else the first that it cannot, as "devices[2].speed: 4 cannot be emulated on
// this host (measurement needs speed <= 1); use --evaluator simulate", with
// the field set (`prefix` + "devices[2].speed", e.g. prefix "cluster.").
Status measurable_here(const Cluster& c, const std::vector<int>& devices = {}, const std::string& prefix = "");

// "host" | "library" | "worker".
std::string costs_from_name(CostsFrom from);

}  // namespace tapp
