#include <doctest/doctest.h>

#include <set>

#include "core/cluster_fingerprint.h"

using namespace tapp;

namespace {

Cluster two_devices() {
  Cluster c;
  c.name = "pair";
  c.devices = {{"edge", "cpu", 1, 2048, 0.5, "local"}, {"server", "cpu", 2, 8192, 1.0, "local"}};
  c.links = {{"edge", "server", 100, 2}, {"server", "edge", 400, 2}};
  return c;
}

}  // namespace

TEST_CASE("the same cluster has the same fingerprint, whatever its name or link order") {
  Cluster a = two_devices();
  Cluster b = two_devices();
  b.name = "another display name";
  std::swap(b.links[0], b.links[1]);
  CHECK(cluster_fingerprint(a) == cluster_fingerprint(b));
  CHECK(cluster_fingerprint(a).size() == 16);
}

TEST_CASE("any change to a device or a link gives another fingerprint") {
  std::set<std::string> keys = {cluster_fingerprint(two_devices())};
  auto changed = [&](auto edit) {
    Cluster c = two_devices();
    edit(c);
    return keys.insert(cluster_fingerprint(c)).second;
  };
  CHECK(changed([](Cluster& c) { c.devices[0].name = "edge2"; }));
  CHECK(changed([](Cluster& c) { c.devices[0].kind = "cuda:0"; }));
  CHECK(changed([](Cluster& c) { c.devices[1].threads = 3; }));
  CHECK(changed([](Cluster& c) { c.devices[1].memory_mb = 8191; }));
  CHECK(changed([](Cluster& c) { c.devices[0].speed = 0.5000001; }));
  CHECK(changed([](Cluster& c) { c.devices[1].where = "127.0.0.1:7000"; }));
  CHECK(changed([](Cluster& c) { std::swap(c.devices[0], c.devices[1]); }));
  CHECK(changed([](Cluster& c) { c.devices.pop_back(); c.links.clear(); }));
  CHECK(changed([](Cluster& c) { c.links[0].bandwidth_mbps = 101; }));
  CHECK(changed([](Cluster& c) { c.links[1].latency_ms = 2.5; }));
  CHECK(changed([](Cluster& c) { c.links.pop_back(); }));
  CHECK(changed([](Cluster& c) { c.default_link.bandwidth_mbps = 1000; }));
  CHECK(changed([](Cluster& c) { c.default_link.latency_ms = 1; }));
  CHECK(changed([](Cluster& c) { c.devices[0].speed = 4; }));
}

TEST_CASE("the fingerprint changes with where a device's costs come from, and with the library file") {
  std::set<std::string> keys;
  auto key_with = [&](CostsFrom from, const std::string& path) {
    Cluster c = two_devices();
    c.devices[1].where = "127.0.0.1:7000";
    c.devices[1].costs = {from, path};
    return cluster_fingerprint(c);
  };
  const std::string host = key_with(CostsFrom::host, "");
  CHECK(keys.insert(host).second);
  CHECK(keys.insert(key_with(CostsFrom::worker, "")).second);
  CHECK(keys.insert(key_with(CostsFrom::library, "profiles/a.json")).second);
  CHECK(keys.insert(key_with(CostsFrom::library, "profiles/b.json")).second);
  CHECK(key_with(CostsFrom::library, "profiles/a.json") == key_with(CostsFrom::library, "profiles/a.json"));
  // Costs from this host (the default) keep the fingerprint clusters had before devices could name their costs.
  Cluster plain = two_devices();
  plain.devices[1].where = "127.0.0.1:7000";
  CHECK(cluster_fingerprint(plain) == host);
}
