#include "core/cluster_fingerprint.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/fingerprint.h"

namespace tapp {
namespace {

// Exact text of a double (17 significant digits round-trip).
std::string exact(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

std::string link_text(const Link& l) {
  return l.from + "\x1f" + l.to + "\x1f" + exact(l.bandwidth_mbps) + "\x1f" + exact(l.latency_ms);
}

// Empty for this host's profile, so every fingerprint stored before devices
// could name their costs stays the same.
std::string costs_text(const DeviceCosts& c) {
  if (c.from == CostsFrom::host) return "";
  return "\x1f" + costs_from_name(c.from) + (c.from == CostsFrom::library ? "=" + c.library_path : "");
}

}  // namespace

std::string cluster_fingerprint(const Cluster& cluster) {
  std::string text = "cluster-v1\x1e";
  for (const Device& d : cluster.devices)
    text += d.name + "\x1f" + d.kind + "\x1f" + std::to_string(d.threads) + "\x1f" + std::to_string(d.memory_mb) +
            "\x1f" + exact(d.speed) + "\x1f" + d.where + costs_text(d.costs) + "\x1e";
  std::vector<std::string> links;
  for (const Link& l : cluster.links) links.push_back(link_text(l));
  std::sort(links.begin(), links.end());
  for (const std::string& l : links) text += l + "\x1e";
  text += "default\x1f" + link_text(cluster.default_link);
  return hex16(fnv1a64(text));
}

}  // namespace tapp
