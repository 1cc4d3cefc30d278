// The ring all-reduce's cost on a cluster's links, and its cheapest order (core/allreduce_ring.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "core/allreduce_ring.h"
#include "core/cluster.h"
#include "tests/core/fake_evaluator.h"

using namespace tapp;
using namespace tapp::testing;

namespace {

// `n` devices whose every directed link has a random bandwidth (1-1000 Mbit/s) and latency (0-5 ms).
Cluster random_links(int n, std::mt19937_64& rng) {
  Cluster c = equal_cluster(n);
  std::uniform_real_distribution<double> log_mbps(0.0, 3.0), latency(0.0, 5.0);
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b)
        c.links.push_back({c.devices[a].name, c.devices[b].name, std::pow(10.0, log_mbps(rng)), latency(rng)});
  return c;
}

// The least ring_allreduce_s over every order of `devices`.
double brute_force_least(const Cluster& c, std::vector<int> devices, int64_t bytes) {
  std::sort(devices.begin(), devices.end());
  double least = std::numeric_limits<double>::infinity();
  do least = std::min(least, ring_allreduce_s(c, devices, bytes));
  while (std::next_permutation(devices.begin(), devices.end()));
  return least;
}

bool same_devices(std::vector<int> a, std::vector<int> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  return a == b;
}

}  // namespace

TEST_CASE("a ring all-reduce is paced by its slowest hop, and the cheapest ring avoids slow links") {
  // Four equal devices; the hops 0->1 and 2->3 are slow (1 Mbit/s), every other 1000 Mbit/s.
  Cluster c = equal_cluster(4);
  c.default_link = {"", "", 1000.0, 0.0};
  c.links.push_back({"d0", "d1", 1.0, 0.0});
  c.links.push_back({"d2", "d3", 1.0, 0.0});
  const int64_t bytes = 4'000'000;  // 1 MB a chunk: 8 s over a slow hop, 8 ms over a fast one
  CHECK(ring_allreduce_s(c, {0, 1, 2, 3}, bytes) == doctest::Approx(2 * 3 * 8.0));
  const std::vector<int> ring = cheapest_ring(c, {0, 1, 2, 3}, bytes);
  CHECK(same_devices(ring, {0, 1, 2, 3}));
  CHECK(ring_allreduce_s(c, ring, bytes) == doctest::Approx(2 * 3 * 0.008));
  CHECK(cheapest_ring(c, ring, bytes) == ring);  // already cheapest: kept as given
  // Two devices form one ring either way; one has none.
  CHECK(cheapest_ring(c, {1, 0}, bytes) == std::vector<int>{1, 0});
  CHECK(ring_allreduce_s(c, {2}, bytes) == 0.0);
  // On equal links every order ties, and the given one is kept.
  Cluster even = equal_cluster(5);
  CHECK(cheapest_ring(even, {4, 2, 0, 1, 3}, bytes) == std::vector<int>{4, 2, 0, 1, 3});
}

TEST_CASE("on random asymmetric links the cheapest ring is the least of all orders up to seven devices") {
  std::mt19937_64 rng(2026);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 3 + trial % (kExhaustiveRingDevices - 2);
    Cluster c = random_links(n + 2, rng);
    // A subset of the cluster's devices in a shuffled order.
    std::vector<int> devices(n + 2);
    std::iota(devices.begin(), devices.end(), 0);
    std::shuffle(devices.begin(), devices.end(), rng);
    devices.resize(n);
    const int64_t bytes = std::uniform_int_distribution<int64_t>(1, 100'000'000)(rng);
    const std::vector<int> ring = cheapest_ring(c, devices, bytes);
    CAPTURE(trial);
    CHECK(same_devices(ring, devices));
    const double least = brute_force_least(c, devices, bytes);
    CHECK(ring_allreduce_s(c, ring, bytes) == doctest::Approx(least).epsilon(1e-12));
    CHECK(cheapest_ring(c, ring, bytes) == ring);
  }
}

TEST_CASE("beyond seven devices the ring is searched greedily and never costs more than the given order") {
  std::mt19937_64 rng(77);
  int cheaper = 0;
  for (int trial = 0; trial < 10; ++trial) {
    const int n = 8 + trial % 3;
    Cluster c = random_links(n, rng);
    std::vector<int> devices(n);
    std::iota(devices.begin(), devices.end(), 0);
    const std::vector<int> ring = cheapest_ring(c, devices, 10'000'000);
    CHECK(same_devices(ring, devices));
    const double given = ring_allreduce_s(c, devices, 10'000'000);
    const double found = ring_allreduce_s(c, ring, 10'000'000);
    CHECK(found <= given);
    cheaper += found < 0.9 * given;
  }
  CHECK(cheaper >= 5);  // random links: index order is rarely near the best ring
}
