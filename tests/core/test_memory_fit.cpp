// move_layers_to_fit: layers leave the devices a placement overfills, for
// the proposals that recomputation alone does not fit.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/cluster.h"
#include "core/memory_fit.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "model/zoo.h"
#include "tests/core/fake_evaluator.h"
#include "tests/core/overfull_chain.h"
#include "tests/model/linear_chain.h"
#include "tests/model/tiny_transformer.h"

using namespace tapp;

namespace {

constexpr int64_t kMiB = 1 << 20;

// The memory each device needs for p with every group recomputing (the least recomputation gives).
std::vector<int64_t> least_bytes(Placement p, const LayerGraph& g, const Cluster& c, int64_t batch) {
  p.group_recompute.assign(p.num_groups(), 1);
  return estimate_device_memory_bytes(p, g, c, batch);
}

// A chain cut into `groups` contiguous groups at random, on a random order of the devices.
Placement random_pipeline(int layers, int groups, std::mt19937_64& rng) {
  Placement p;
  std::vector<int> cuts;
  for (int i = 1; i < layers; ++i) cuts.push_back(i);
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(static_cast<size_t>(groups - 1));
  std::sort(cuts.begin(), cuts.end());
  for (int i = 0, g = 0; i < layers; ++i) {
    while (g < groups - 1 && i >= cuts[g]) ++g;
    p.layer_group.push_back(g);
  }
  for (int g = 0; g < groups; ++g) p.group_device.push_back(g);
  std::shuffle(p.group_device.begin(), p.group_device.end(), rng);
  p.micro_batches = 1 << (rng() % 4);
  return p;
}

// Group g of p also on the first device (of `devices`) that holds no group.
void replicate_on_idle(Placement& p, int g, int devices) {
  for (int d = 0; d < devices; ++d) {
    if (std::find(p.group_device.begin(), p.group_device.end(), d) != p.group_device.end()) continue;
    p.group_replicas.assign(p.num_groups(), {});
    p.group_replicas[g] = {d};
    return;
  }
}

}  // namespace

TEST_CASE("move_layers_to_fit moves a chain's end to an idle device when one device holds it all") {
  const testing::OverfullChain chain;
  const LayerGraph& g = chain.graph;
  const Cluster& c = chain.cluster;
  Placement p = chain.placement;
  const int64_t batch = chain.batch;
  REQUIRE_FALSE(recompute_where_needed(p, g, c, batch));
  const Placement before = p;
  REQUIRE(move_layers_to_fit(p, g, c, batch));
  CHECK(check_memory(p, g, c, batch).is_ok());
  CHECK(validate_placement(p, g, c, batch).is_ok());
  // The moved layers are a run at one end of the chain, in one new group on d1.
  std::vector<int> on_d1;
  for (int i = 0; i < 6; ++i)
    if (p.device_of_layer(i) == 1) on_d1.push_back(i);
  REQUIRE_FALSE(on_d1.empty());
  CHECK(on_d1.size() < 6);
  CHECK(on_d1.back() - on_d1.front() + 1 == static_cast<int>(on_d1.size()));
  CHECK((on_d1.front() == 0 || on_d1.back() == 5));
  CHECK(p.num_groups() == 2);
  CHECK(p.micro_batches == before.micro_batches);
}

TEST_CASE("move_layers_to_fit opens a group beside another device's groups where no device is idle") {
  // 16 -> 2048 x 4 -> 10 at batch 64 in three groups on three devices: the last (a 2048 x 2048 layer,
  // 48 MiB of training state, and the head: 65 MiB) on a 40 MiB device; its only neighbour's device
  // holds 114 MiB of 120, while the first group's device (65 MiB) has room (256 MiB).
  const LayerGraph g = test::linear_chain({2048, 2048, 2048, 2048, 2048, 10});
  Cluster c = testing::equal_cluster(3, 256);
  c.devices[1].memory_mb = 120;
  c.devices[2].memory_mb = 40;
  Placement p;
  p.layer_group = {0, 0, 1, 1, 2, 2};
  p.group_device = {0, 1, 2};
  p.micro_batches = 2;
  const int64_t batch = 64;
  REQUIRE_FALSE(recompute_where_needed(p, g, c, batch));
  REQUIRE(move_layers_to_fit(p, g, c, batch));
  CHECK(check_memory(p, g, c, batch).is_ok());
  CHECK(validate_placement(p, g, c, batch).is_ok());
  CHECK(p.device_of_layer(4) == 0);  // beside layers 0-1, in a group of its own after d1's
  CHECK(p.layer_group[4] != p.layer_group[0]);
  CHECK(p.device_of_layer(2) == 1);
  CHECK(p.device_of_layer(3) == 1);
}

TEST_CASE("move_layers_to_fit moves a run from a group's middle where no end of it can go") {
  // 16 -> 4096 -> 1024 x 3 -> 4096 -> 10 at batch 64, all on d0. The devices are sized to the
  // placement that keeps the two 4096 x 1024 layers (48 MiB of training state each) on d0 and puts
  // the two 1024 x 1024 layers between them on d1, which cannot hold either large one.
  const LayerGraph g = test::linear_chain({4096, 1024, 1024, 1024, 4096, 10});
  Placement middle;
  middle.layer_group = {0, 0, 1, 1, 2, 2};
  middle.group_device = {0, 1, 0};
  middle.micro_batches = 2;
  Cluster c = testing::equal_cluster(2);
  const std::vector<int64_t> need = least_bytes(middle, g, c, 64);
  for (int d = 0; d < 2; ++d) c.devices[d].memory_mb = need[d] / kMiB + 1;
  Placement p = Placement::single_device(6, 0, 2);
  REQUIRE_FALSE(recompute_where_needed(p, g, c, 64));
  REQUIRE(move_layers_to_fit(p, g, c, 64));
  CHECK(check_memory(p, g, c, 64).is_ok());
  CHECK(validate_placement(p, g, c, 64).is_ok());
  for (int i : {0, 1, 4, 5}) CHECK(p.device_of_layer(i) == 0);
  for (int i : {2, 3}) CHECK(p.device_of_layer(i) == 1);
  CHECK(p.layer_group[1] != p.layer_group[4]);  // d0's layers after the run: a group of their own
}

TEST_CASE("move_layers_to_fit looks for a middle run in every group that is over, not only the first") {
  // gpt2_medium at batch 32 in 32 micro-batches, in two groups on an 8 GB server (the embedding and
  // the first block's start, then the rest; 126 MiB over), a 1 GB device idle: a policy's proposal.
  // No end run fits the small device (one end holds the embedding, the other the head that shares
  // its table). The first group's middle runs lower the overflow most, but no move fits after them
  // (70 MiB over); a run of the second group's blocks leaves both devices fitting.
  const LayerGraph g = *zoo_model("gpt2_medium");
  const int L = static_cast<int>(g.layers.size());
  Placement p;
  p.layer_group.assign(L, 1);
  for (int i = 0; i < 16; ++i) p.layer_group[i] = 0;
  p.group_device = {1, 1};
  p.micro_batches = 32;
  Cluster c = testing::equal_cluster(2);
  c.devices[0].memory_mb = 1024;
  c.devices[1].memory_mb = 8192;
  REQUIRE_FALSE(recompute_where_needed(p, g, c, 32));
  REQUIRE(move_layers_to_fit(p, g, c, 32));
  CHECK(check_memory(p, g, c, 32).is_ok());
  CHECK(validate_placement(p, g, c, 32).is_ok());
  CHECK(p.device_of_layer(0) == 1);
  CHECK(p.device_of_layer(L - 1) == 1);
  int on_small = 0;
  for (int i = 16; i < L; ++i) on_small += p.device_of_layer(i) == 0;
  CHECK(on_small > 0);
  for (int i = 0; i < 16; ++i) CHECK(p.device_of_layer(i) == 1);  // the first group stays
}

TEST_CASE("move_layers_to_fit makes two moves where no single one lowers the overflow") {
  // 16 -> 2048 -> 256 -> 256 -> 2048 -> 2048 -> 10 at batch 64 in 64 micro-batches (none to double),
  // three groups on d2, d0, d1. d1 is 2 MiB short of its group (the 2048 x 2048 layer and the head);
  // d0 and d2 are sized to the plant (layers 0-3 on d2, 4-5 on d0), so the large layer overfills d0 by
  // more than that, and d2 has no room for it: only d0's layers going to d2 and then d1's to d0 fit.
  const LayerGraph g = test::linear_chain({2048, 256, 256, 2048, 2048, 10});
  Placement planted;
  planted.layer_group = {0, 0, 0, 0, 1, 1};
  planted.group_device = {2, 0};
  planted.micro_batches = 64;
  Placement p;
  p.layer_group = {0, 0, 1, 1, 2, 2};
  p.group_device = {2, 0, 1};
  p.micro_batches = 64;
  Cluster c = testing::equal_cluster(3);
  const std::vector<int64_t> need = least_bytes(planted, g, c, 64), start = least_bytes(p, g, c, 64);
  c.devices[0].memory_mb = need[0] / kMiB + 1;
  c.devices[2].memory_mb = need[2] / kMiB + 1;
  c.devices[1].memory_mb = start[1] / kMiB - 2;
  REQUIRE_FALSE(recompute_where_needed(p, g, c, 64));
  REQUIRE(move_layers_to_fit(p, g, c, 64));
  CHECK(check_memory(p, g, c, 64).is_ok());
  CHECK(validate_placement(p, g, c, 64).is_ok());
  for (int i : {2, 3}) CHECK(p.device_of_layer(i) == 2);
  CHECK(p.device_of_layer(4) == 0);
}

namespace {

// gpt2_medium at batch 32 on examples/cluster_edge_uplinks.json (an 8 GB
// server, devices 0; 1 GB edge1 and edge2, 1 and 2; a 512 MB edge3, 3) in
// groups of layers [begin, end) on their devices: a policy's proposal.
Placement edge_uplinks_proposal(const std::vector<std::pair<int, int>>& ranges,
                                const std::vector<std::vector<int>>& devices, int micro_batches) {
  Placement p;
  for (int g = 0; g < static_cast<int>(ranges.size()); ++g) {
    for (int i = ranges[g].first; i < ranges[g].second; ++i) p.layer_group.push_back(g);
    p.group_device.push_back(devices[g][0]);
    p.group_replicas.push_back({devices[g].begin() + 1, devices[g].end()});
  }
  p.micro_batches = micro_batches;
  return p;
}

Cluster edge_uplinks() {
  return *load_cluster(std::string(TAPP_SOURCE_DIR) + "/examples/cluster_edge_uplinks.json");
}

void check_fits_after_moves(Placement& p, const LayerGraph& g, const Cluster& c) {
  REQUIRE(p.layer_group.size() == g.layers.size());
  REQUIRE_FALSE(recompute_where_needed(p, g, c, 32));
  REQUIRE(move_layers_to_fit(p, g, c, 32));
  CHECK(check_memory(p, g, c, 32).is_ok());
  CHECK(validate_placement(p, g, c, 32).is_ok());
}

}  // namespace

TEST_CASE("move_layers_to_fit lets a replica leave its group where no move or pair lowers the overflow") {
  // The token embedding replicated on edge1 and edge2, the rest on the server (250 MiB over). No
  // move or pair fits it while both edge devices hold the embedding: one of them leaves the group.
  const LayerGraph g = *zoo_model("gpt2_medium");
  const Cluster c = edge_uplinks();
  Placement p = edge_uplinks_proposal({{0, 1}, {1, 3}, {3, 169}, {169, 175}, {175, 196}},
                                      {{2, 1}, {0}, {0}, {0}, {0}}, 32);
  check_fits_after_moves(p, g, c);
  CHECK_FALSE(p.has_replicated_groups());
  int off_server = 0;
  for (int i = 0; i < static_cast<int>(g.layers.size()); ++i) off_server += p.device_of_layer(i) != 0;
  CHECK(off_server > 1);  // blocks went to the edge device the embedding left
}

TEST_CASE("move_layers_to_fit moves block after block where the devices are nearly full") {
  // 136 layers on the 1 GB edge1 and 6 on the 512 MB edge3 (6.8 GiB over), the end replicated on
  // the server and edge2: more than 2 x devices + 8 moves, a block or two at a time once the server
  // is full.
  const LayerGraph g = *zoo_model("gpt2_medium");
  const Cluster c = edge_uplinks();
  Placement p =
      edge_uplinks_proposal({{0, 3}, {3, 139}, {139, 145}, {145, 196}}, {{0}, {1}, {3}, {0, 2}}, 32);
  check_fits_after_moves(p, g, c);
}

TEST_CASE("move_layers_to_fit tries more first moves of a pair than the four nearest") {
  // The embeddings and 12 blocks on the server, the rest on the 1 GB edge2, in 4 micro-batches:
  // after the doublings and runs the 512 MB edge3 is 72 MiB over, and none of the four moves that
  // raise the overflow least is the first of a pair that fits.
  const LayerGraph g = *zoo_model("gpt2_medium");
  const Cluster c = edge_uplinks();
  Placement p = edge_uplinks_proposal({{0, 101}, {101, 104}, {104, 196}}, {{0}, {1}, {2}}, 4);
  check_fits_after_moves(p, g, c);
}

TEST_CASE("move_layers_to_fit moves a run off a replicated group whose replicas are over") {
  // 16 -> 2048 x 3 -> 10 at batch 64: layers 0-2 replicated on d0 and d1 (80 MiB each; two 2048 x 2048
  // layers hold 96 MiB of training state), the head on d2 (256 MiB). A run off one end of the
  // replicated group goes to d2; the rest stays replicated and the placement valid (no replicated
  // group both before and after another).
  const LayerGraph g = test::linear_chain({2048, 2048, 2048, 10});
  Cluster c = testing::equal_cluster(3, 256);
  c.devices[0].memory_mb = c.devices[1].memory_mb = 80;
  Placement r;
  r.layer_group = {0, 0, 0, 1};
  r.group_device = {0, 2};
  r.group_replicas = {{1}, {}};
  r.micro_batches = 2;
  REQUIRE_FALSE(recompute_where_needed(r, g, c, 64));
  REQUIRE(move_layers_to_fit(r, g, c, 64));
  CHECK(check_memory(r, g, c, 64).is_ok());
  CHECK(validate_placement(r, g, c, 64).is_ok());
  // One run's layers stay replicated on d0 and d1; the others went to d2.
  int replicated = 0;
  for (int i = 0; i < 4; ++i) {
    if (r.replica_count(r.layer_group[i]) == 1) {
      CHECK(r.device_of_layer(i) == 2);
      continue;
    }
    CHECK(r.devices_of_group(r.layer_group[i]) == std::vector<int>{0, 1});
    ++replicated;
  }
  CHECK(replicated >= 1);
  CHECK(replicated < 3);
}

TEST_CASE("move_layers_to_fit makes no move that puts a replicated group both before and after another") {
  // A tiny gpt2 (28 layers): wte, wpe on d0; the first block's ln_1 and attn replicated on d1 and d2;
  // the rest on d3, sized to hold it without layers 4-9. Layer 4 (h.0.add_1) adds attn's output to
  // wpe's, so a run from it joining d0's group would put that group before and after the replicated
  // one; the run goes to a group of its own on d0 instead.
  const LayerGraph g = *zoo_model("gpt2", test::tiny_transformer(16, 500, 3, 64, 4));
  REQUIRE(g.layers.size() == 28);
  Placement p;
  p.layer_group.assign(28, 2);
  p.layer_group[0] = p.layer_group[1] = 0;
  p.layer_group[2] = p.layer_group[3] = 1;
  p.group_device = {0, 1, 3};
  p.group_replicas = {{}, {2}, {}};
  p.micro_batches = 2;
  Placement planted = p;
  const int own = planted.add_group(0);
  for (int i = 4; i <= 9; ++i) planted.layer_group[i] = own;
  Cluster c = testing::equal_cluster(4, 1024);
  c.devices[3].memory_mb = least_bytes(planted, g, c, 64)[3] / kMiB + 1;
  REQUIRE_FALSE(recompute_where_needed(p, g, c, 64));
  REQUIRE(move_layers_to_fit(p, g, c, 64));
  CHECK(check_memory(p, g, c, 64).is_ok());
  CHECK(validate_placement(p, g, c, 64).is_ok());
  CHECK(p.device_of_layer(4) == 0);
  CHECK(p.layer_group[4] != p.layer_group[0]);
}

TEST_CASE(
    "move_layers_to_fit leaves a placement unchanged where nothing fits, and a replicated group that fits") {
  const LayerGraph g = test::linear_chain({2048, 2048, 2048, 10});
  const int64_t batch = 64;
  // Two devices of 40 MiB: a 2048 x 2048 layer's training state alone is 48 MiB.
  Cluster tiny = testing::equal_cluster(2, 40);
  Placement p = Placement::single_device(4, 0, 2);
  const Placement before = p;
  CHECK_FALSE(move_layers_to_fit(p, g, tiny, batch));
  CHECK(p.layer_group == before.layer_group);
  CHECK(p.group_device == before.group_device);
  CHECK(p.micro_batches == before.micro_batches);
  // A replicated group keeps its layers; the other group's layers (96 MiB of training state,
  // on 100 MiB) move in part to the idle device.
  Cluster c = testing::equal_cluster(4, 128);
  c.devices[0].memory_mb = c.devices[1].memory_mb = 80;
  c.devices[2].memory_mb = 100;
  Placement r;
  r.layer_group = {0, 1, 1, 1};
  r.group_device = {0, 2};
  r.group_replicas = {{1}, {}};
  r.micro_batches = 2;
  REQUIRE_FALSE(recompute_where_needed(r, g, c, batch));
  REQUIRE(move_layers_to_fit(r, g, c, batch));
  CHECK(check_memory(r, g, c, batch).is_ok());
  CHECK(r.layer_group[0] == 0);
  CHECK(r.devices_of_group(0) == std::vector<int>{0, 1});
  for (int i = 1; i < 4; ++i) CHECK(r.group_device[r.layer_group[i]] >= 2);
}

TEST_CASE("move_layers_to_fit finds a fit where a planted one exists, on random chains, DAGs and clusters") {
  // Each case plants a placement, sizes every device to what that placement needs of it (recomputing)
  // plus up to 30%, and starts from another placement that does not fit. What comes back fits and is
  // valid; a failure leaves the placement unchanged.
  std::mt19937_64 rng(20261130);
  const LayerGraph inception = *zoo_model("tiny_inception");
  const LayerGraph transformer = *zoo_model("gpt2", test::tiny_transformer(16, 500, 3, 64, 4));  // tied head
  int tried = 0, fitted = 0, tried_replicated = 0, fitted_replicated = 0;
  for (int n = 0; n < 120; ++n) {
    std::vector<int64_t> widths;
    const int chain = 4 + static_cast<int>(rng() % 12);
    for (int i = 0; i < chain; ++i) widths.push_back(64 << (rng() % 6));
    const LayerGraph random_chain = test::linear_chain(widths);
    const LayerGraph& g = n % 3 == 0 ? random_chain : n % 3 == 1 ? inception : transformer;
    const int L = static_cast<int>(g.layers.size());
    const int D = 2 + static_cast<int>(rng() % 5);
    const int64_t batch = 32 << (rng() % 3);
    Cluster c = testing::equal_cluster(D, 1);
    const Placement planted = random_pipeline(L, std::min(D, L), rng);
    const std::vector<int64_t> need = least_bytes(planted, g, c, batch);
    for (int d = 0; d < D; ++d) {
      const double slack = 1.0 + 0.3 * std::uniform_real_distribution<double>(0, 1)(rng);
      c.devices[d].memory_mb = std::max<int64_t>(1, static_cast<int64_t>(need[d] * slack / kMiB) + 1);
    }
    // The start: the planted groups on other devices, or fewer groups (possibly one).
    Placement start =
        n % 2 == 0 ? random_pipeline(L, 1 + static_cast<int>(rng() % std::min(D, L)), rng) : planted;
    if (n % 2 == 1) std::shuffle(start.group_device.begin(), start.group_device.end(), rng);
    start.micro_batches = planted.micro_batches;
    // Every other start of fewer groups than devices has a group replicated on an idle device.
    const bool replicated = n % 4 == 0 && start.num_groups() < D;
    if (replicated) replicate_on_idle(start, static_cast<int>(rng() % start.num_groups()), D);
    if (recompute_where_needed(start, g, c, batch)) continue;
    ++tried;
    tried_replicated += replicated;
    const Placement before = start;
    if (move_layers_to_fit(start, g, c, batch)) {
      ++fitted;
      fitted_replicated += replicated;
      CHECK(check_memory(start, g, c, batch).is_ok());
      CHECK(validate_placement(start, g, c, batch).is_ok());
    } else {
      CHECK(start.layer_group == before.layer_group);
      CHECK(start.group_device == before.group_device);
    }
  }
  MESSAGE("fitted " << fitted << " of " << tried << ", with a replicated group " << fitted_replicated
                    << " of " << tried_replicated);
  REQUIRE(tried >= 40);
  CHECK(fitted * 10 >= tried * 9);
  REQUIRE(tried_replicated >= 10);
  CHECK(fitted_replicated * 10 >= tried_replicated * 9);
}
