// The memory rule, written once in core/placement.cpp: the per-stage form the
// planners' inner loops use agrees with the per-device estimate check_memory uses.
#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "tests/model/linear_chain.h"

using namespace tapp;

namespace {

using test::linear_chain;

Cluster devices(int n, int64_t memory_mb) {
  Cluster c;
  for (int i = 0; i < n; ++i) {
    Device d;
    d.name = "d" + std::to_string(i);
    d.memory_mb = memory_mb;
    c.devices.push_back(d);
  }
  return c;
}

}  // namespace

TEST_CASE("the per-stage memory rule agrees with the per-device estimate for every pipeline of a chain") {
  const LayerGraph g = linear_chain({512, 64, 2048, 32, 1024, 10});
  const Cluster c = devices(3, 4096);
  const StageMemory memory(g);
  std::mt19937_64 rng(5);
  for (int n = 0; n < 200; ++n) {
    // Three stages at random cuts on devices 2, 0, 1.
    int a = 1 + static_cast<int>(rng() % 4), b = a + 1 + static_cast<int>(rng() % (5 - a));
    Placement p;
    for (int i = 0; i < 6; ++i) p.layer_group.push_back(i < a ? 0 : i < b ? 1 : 2);
    p.group_device = {2, 0, 1};
    p.micro_batches = 1 << (rng() % 4);
    p.schedule = rng() % 2 ? Schedule::gpipe : Schedule::one_f_one_b;
    const int64_t batch = 16 + static_cast<int64_t>(rng() % 17);
    const int64_t samples = (batch + p.micro_batches - 1) / p.micro_batches;
    const int64_t in_flight = micro_batches_in_flight(p.schedule, p.micro_batches, 3);
    const auto bytes = estimate_device_memory_bytes(p, g, c, batch);
    CHECK(bytes[2] == memory.bytes(0, a, samples, in_flight));
    CHECK(bytes[0] == memory.bytes(a, b, samples, in_flight));
    CHECK(bytes[1] == memory.bytes(b, 6, samples, in_flight));
  }
}

TEST_CASE("a stage fits a device exactly when check_memory passes its single-device placement") {
  const LayerGraph g = linear_chain({4096, 4096, 10});
  const StageMemory memory(g);
  const int64_t needed = memory.bytes(0, 3, 8, 1);
  for (int64_t mb : {int64_t{1}, needed / (1024 * 1024), needed / (1024 * 1024) + 1, int64_t{4096}}) {
    const Cluster c = devices(1, mb);
    const bool fits = memory.fits(c.devices[0], 0, 3, 8, 1);
    CHECK(fits == check_memory(Placement::single_device(3, 0), g, c, 8).is_ok());
  }
  // In flight: GPipe keeps every micro-batch, 1F1B at most one per stage.
  CHECK(micro_batches_in_flight(Schedule::gpipe, 8, 2) == 8);
  CHECK(micro_batches_in_flight(Schedule::one_f_one_b, 8, 2) == 2);
  CHECK(micro_batches_in_flight(Schedule::one_f_one_b, 1, 4) == 1);
}

TEST_CASE("a data-parallel placement needs the whole model on each replica at its share of the batch") {
  const LayerGraph g = linear_chain({256, 128, 10});
  const Cluster c = devices(4, 4096);
  const StageMemory memory(g);
  const auto bytes = estimate_device_memory_bytes(Placement::replicas(3, {0, 2, 3}), g, c, 10);
  CHECK(bytes[0] == memory.bytes(0, 3, 4, 1));  // ceil(10 / 3) samples
  CHECK(bytes[1] == 0);
  CHECK(bytes[2] == bytes[0]);
  CHECK(bytes[3] == bytes[0]);
}
