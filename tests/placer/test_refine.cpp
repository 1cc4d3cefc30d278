// The refinement's branch moves (placer/refine.h): which placements they
// propose, and that climbing with them finds a branch-parallel plan.
#include <doctest/doctest.h>

#include <algorithm>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include "model/branches.h"
#include "model/layer_library.h"
#include "placer/measurer.h"
#include "placer/refine.h"
#include "placer/search.h"
#include "placer/training_set.h"
#include "simulator/cost_model.h"
#include "simulator/simulator_evaluator.h"
#include "tests/core/fake_evaluator.h"
#include "tests/model/flat_library.h"
#include "tests/model/linear_chain.h"
#include "tests/simulator/fixtures.h"

using namespace tapp;
using namespace tapp::testing;

namespace {

// An Inception-like block of linear layers: 0 input, 1 fork; towers [2, 3],
// [4], [5 -> (6, 7) -> 8 = add]; 9 = add of the towers; 10 output.
LayerGraph towers() {
  LayerGraph g;
  g.input_shape = {8};
  const std::vector<std::pair<std::string, std::vector<int>>> layers = {
      {"linear", {}},  {"linear", {0}}, {"linear", {1}}, {"linear", {2}},    {"linear", {1}}, {"linear", {1}},
      {"linear", {5}}, {"linear", {5}}, {"add", {6, 7}}, {"add", {3, 4, 8}}, {"linear", {9}}};
  for (const auto& [op, inputs] : layers) test::add_layer(g, "l" + std::to_string(g.layers.size()), op, inputs);
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

// A stem, `blocks` blocks of `towers` towers of two linear layers (a fork,
// the towers, an add of their ends), an output.
LayerGraph tower_blocks(int blocks, int towers) {
  LayerGraph g;
  g.input_shape = {8};
  test::add_layer(g, "stem", "linear", {});
  for (int b = 0; b < blocks; ++b) {
    const int fork = static_cast<int>(g.layers.size());
    test::add_layer(g, "fork" + std::to_string(b), "linear", {fork - 1});
    std::vector<int> ends;
    for (int t = 0; t < towers; ++t) {
      const int first = static_cast<int>(g.layers.size());
      test::add_layer(g, "t" + std::to_string(t) + "a_" + std::to_string(b), "linear", {fork});
      test::add_layer(g, "t" + std::to_string(t) + "b_" + std::to_string(b), "linear", {first});
      ends.push_back(first + 1);
    }
    test::add_layer(g, "add" + std::to_string(b), "add", ends);
  }
  test::add_layer(g, "out", "linear", {static_cast<int>(g.layers.size()) - 1});
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

bool every_group_used(const Placement& p) {
  std::set<int> used(p.layer_group.begin(), p.layer_group.end());
  return static_cast<int>(used.size()) == p.num_groups() && p.group_replicas.size() <= static_cast<size_t>(p.num_groups());
}

// A chain of eight linear layers of `width`, 1 ms each way per layer and
// micro-batch, on two equal devices whose link has `bandwidth_mbps` and no latency.
struct EightLayersOnTwo {
  LayerGraph g;
  Cluster c = equal_cluster(2);
  std::optional<CostModel> cost;
  EightLayersOnTwo(int64_t width, double bandwidth_mbps)
      : g(test::linear_chain(std::vector<int64_t>(8, width))) {
    c.default_link.bandwidth_mbps = bandwidth_mbps;
    c.default_link.latency_ms = 0;
    auto built = CostModel::build(g, c, test::flat_library(g, 8, 1.0, 1.0));
    REQUIRE(built.is_ok());
    cost.emplace(std::move(*built));
  }
  SimulatorEvaluator evaluator() const { return SimulatorEvaluator(g, c, *cost, 8); }
};

}  // namespace

TEST_CASE("branch moves put one tower on another device, or spread a fork's towers over the devices") {
  LayerGraph g = towers();
  const auto branches = parallel_branches(g);
  REQUIRE(branches.size() == 2);  // the block's fork (3 towers) and the third tower's inner fork (2)
  const Placement one = Placement::single_device(static_cast<int>(g.layers.size()), 0, 2);
  const auto moves = branch_neighbours(one, branches, 3);
  // Each tower on each of the 2 other devices (3 x 2 + 2 x 2), and the
  // rotations that move two or more towers (3 of the block's, 1 of the inner fork's).
  CHECK(moves.size() == 10 + 4);
  int single_tower_moves = 0;
  for (const Placement& q : moves) {
    CHECK(every_group_used(q));
    CHECK(q.micro_batches == 2);
    std::vector<int> moved;
    for (int l = 0; l < static_cast<int>(g.layers.size()); ++l)
      if (q.device_of_layer(l) != 0) moved.push_back(l);
    CHECK(!moved.empty());
    for (const ParallelBranches& fork : branches)
      for (const auto& tower : fork.branches)
        single_tower_moves += moved == tower;
    // The fork, the join and the layers outside the block stay.
    for (int l : {0, 1, 9, 10}) CHECK(q.device_of_layer(l) == 0);
  }
  CHECK(single_tower_moves == 10);
}

TEST_CASE("branch moves leave a replicated group's layers and a data-parallel plan alone") {
  LayerGraph g = towers();
  const auto branches = parallel_branches(g);
  Placement p = Placement::single_device(static_cast<int>(g.layers.size()), 0, 2);
  p.group_replicas = {{1}};  // the whole model replicated on d0 and d1
  for (const Placement& q : branch_neighbours(p, branches, 3))
    for (int l = 0; l < static_cast<int>(g.layers.size()); ++l) CHECK(q.devices_of_group(q.layer_group[l]).size() == 2);
  CHECK(branch_neighbours(Placement::replicas(static_cast<int>(g.layers.size()), {0, 1}), branches, 3).empty());
}

TEST_CASE(
    "a spread group runs a fork's towers side by side: the heaviest at home, the others on free devices "
    "first") {
  LayerGraph g = towers();
  BranchSpread how;
  how.forks = parallel_branches(g);
  how.layer_weight.assign(g.layers.size(), 1.0);  // tower [5, 6, 7, 8] is the heaviest, then [2, 3], then [4]
  how.device_speed = {0.5, 0.25, 1.0, 0.125};     // fastest first: d2, d0, d1, d3
  const int L = static_cast<int>(g.layers.size());
  // Layers 0-4 on d0 (group 0), 5-10 on d1 (group 1): the block's fork is in
  // neither whole, the inner fork (5 -> 6, 7 -> 8) in group 1.
  Placement two = Placement::single_device(L, 0, 1);
  two.layer_group = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  two.group_device = {0, 1};
  const Placement inner = spread_branches(two, {false, true}, how, SpreadRule::in_turn);
  CHECK(every_group_used(inner));
  CHECK(inner.device_of_layer(6) == 1);  // the first of equal towers stays home
  CHECK(inner.device_of_layer(7) == 2);  // the other on the fastest free device
  for (int l : {0, 1, 2, 3, 4}) CHECK(inner.device_of_layer(l) == 0);
  for (int l : {5, 8, 9, 10}) CHECK(inner.device_of_layer(l) == 1);
  CHECK(spread_branches(two, {true, false}, how, SpreadRule::in_turn).layer_group ==
        two.layer_group);  // no whole fork in group 0

  // The whole model on d0: the block's towers on d0 (the heaviest), then
  // d2 and d1 (the free devices, fastest first); the inner fork stays in its
  // tower at home and spreads too (its second branch to the first helper).
  const Placement one = Placement::single_device(L, 0, 1);
  const Placement spread = spread_branches(one, {true}, how, SpreadRule::in_turn);
  CHECK(every_group_used(spread));
  for (int l : {0, 1, 5, 6, 8, 9, 10}) CHECK(spread.device_of_layer(l) == 0);
  for (int l : {2, 3}) CHECK(spread.device_of_layer(l) == 2);
  CHECK(spread.device_of_layer(4) == 1);
  CHECK(spread.device_of_layer(7) == 2);
  // Two spreading groups share the free devices out in turn: d2 to group 0, d3 to group 1.
  Placement halves = two;
  halves.layer_group = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
  const Placement dealt = spread_branches(halves, {true, true}, how, SpreadRule::in_turn);
  CHECK(dealt.device_of_layer(2) == 2);
  CHECK(dealt.device_of_layer(4) ==
        1);  // group 0's next helper: held devices after its free one, fastest first
  // A copied group: each copy gets its own helpers (d2 for the copy on d0,
  // d3 for the one on d1), each tower a new group copied on them, and the
  // layers after each spread fork a new group on d0 and d1 (a replicated
  // group must be one stage).
  Placement copied = Placement::single_device(L, 0, 2);
  copied.group_replicas = {{1}};
  const Placement pairs = spread_branches(copied, {true}, how, SpreadRule::in_turn);
  const auto on = [&](int l) { return pairs.devices_of_group(pairs.layer_group[l]); };
  for (int l : {0, 1, 5, 6, 8, 9, 10}) CHECK(on(l) == std::vector<int>{0, 1});
  for (int l : {2, 3, 4, 7}) CHECK(on(l) == std::vector<int>{2, 3});
  CHECK(pairs.layer_group[1] != pairs.layer_group[5]);  // the trunk split after the block's fork
  CHECK(pairs.layer_group[5] != pairs.layer_group[6]);  // and after the inner one
  CHECK(validate_placement(pairs, g, equal_cluster(4), 2).is_ok());
  // With no device left for one of its copies, a copied group stays as it is.
  Placement all_held = copied;
  all_held.group_replicas = {{1, 2, 3}};
  all_held.micro_batches = 4;
  CHECK(spread_branches(all_held, {true}, how, SpreadRule::in_turn).layer_group == all_held.layer_group);
}

TEST_CASE("a spread group balances a fork's towers by the devices' speeds: a slow helper takes a small one") {
  LayerGraph g = towers();
  const int L = static_cast<int>(g.layers.size());
  BranchSpread how;
  how.forks = parallel_branches(g);
  how.layer_weight.assign(g.layers.size(), 1.0);  // towers of 4 ([5, 6, 7, 8]), 2 ([2, 3]) and 1 ([4])
  // d0 four times as fast as d1 and d2: at home the towers of 4 and 2 finish
  // at 1.5, so only the tower of 1 goes to the first helper (it finishes at 1
  // there, 1.75 at home) and d2 takes nothing. In turn, d1 took the tower of
  // 2 (finishing at 2, later than d0 with all three).
  how.device_speed = {4.0, 1.0, 1.0};
  const Placement fast_home =
      spread_branches(Placement::single_device(L, 0, 1), {true}, how, SpreadRule::by_speed);
  CHECK(every_group_used(fast_home));
  CHECK(fast_home.device_of_layer(4) == 1);
  for (int l : {0, 1, 2, 3, 5, 6, 7, 8, 9, 10}) CHECK(fast_home.device_of_layer(l) == 0);
  CHECK(validate_placement(fast_home, g, equal_cluster(3), 1).is_ok());
  // A helper four times as fast as home takes the heaviest towers (the inner
  // fork goes with its tower): home keeps the tower of 1 only.
  how.device_speed = {1.0, 4.0, 1.0};
  const Placement fast_helper =
      spread_branches(Placement::single_device(L, 0, 1), {true}, how, SpreadRule::by_speed);
  for (int l : {2, 3, 5, 6, 7, 8}) CHECK(fast_helper.device_of_layer(l) == 1);
  for (int l : {0, 1, 4, 9, 10}) CHECK(fast_helper.device_of_layer(l) == 0);
  CHECK(fast_helper.layer_group[2] == fast_helper.layer_group[5]);  // one new group per helper
  CHECK(validate_placement(fast_helper, g, equal_cluster(3), 1).is_ok());
  // A helper so slow that every tower finishes first at home: nothing moves.
  how.device_speed = {100.0, 1.0};
  Placement two_devices = Placement::single_device(L, 0, 1);
  CHECK(spread_branches(two_devices, {true}, how, SpreadRule::by_speed).layer_group ==
        two_devices.layer_group);
}

TEST_CASE(
    "with one sample per copy, the policy alone spreads every block's towers where pipelines and copies "
    "cannot help") {
  // A stem, four blocks of two towers of two layers (fork, towers, add), an
  // output; every layer 1 ms each way per sample, free links. One sample on
  // two devices, or two on four: nothing to pipeline or split beyond one
  // sample a copy, so a copy takes 26 x 2 = 52 ms for its sample, and towers
  // side by side save 4 ms a block (36 ms). Groups that follow the DAG reach
  // one block at most on two devices (every edge goes up in group id), two on four.
  LayerGraph g = tower_blocks(4, 2);
  REQUIRE(parallel_branches(g).size() == 4);
  for (const auto& [batch, devices, without_ms] : {std::tuple{1, 2, 48.0}, std::tuple{2, 4, 44.0}}) {
    Cluster c = equal_cluster(devices);
    for (Device& d : c.devices) d.memory_mb = 1024;
    c.default_link.bandwidth_mbps = 1e12;
    c.default_link.latency_ms = 0;
    auto cost = CostModel::build(g, c, test::flat_library(g, 1, 1.0, 1.0));
    REQUIRE(cost.is_ok());
    for (uint64_t seed : {1, 2, 3})
      for (bool spread : {true, false}) {
        SimulatorEvaluator ev(g, c, *cost, batch);
        SearchOptions o;
        o.iterations = batch == 1 ? 40 : 150;
        o.batch_size = batch;
        o.seed = seed;
        o.spread_branches = spread;
        // Without spreads, no plan of the search's own: the turn variants it
        // measures when it ends are many groups in layer order, which put
        // towers side by side where a turn ends between them.
        o.vary_prior_on_restart = spread;
        const SearchResult r = search(g, c, ev, o, nullptr);
        REQUIRE(r.found);
        INFO("batch " << batch << ", seed " << seed << ", spreads offered: " << spread << ", best "
                      << r.best_report.step_ms << " ms");
        CHECK(validate_placement(r.best, g, c, batch).is_ok());
        if (spread)
          CHECK(r.best_report.step_ms <= 40.0);  // at least three blocks side by side (all four: 36 ms)
        else
          CHECK(r.best_report.step_ms >= without_ms - 1e-9);
      }
  }
}

TEST_CASE(
    "with one sample on devices of different speeds, the policy alone balances each fork's towers by speed") {
  // A stem, four blocks of four towers of two layers (fork, towers, add), an
  // output; every layer 1 ms each way per sample at speed 1; free links; one
  // sample on d0 (speed 1) and two helpers of speed 0.5. One device: 84 ms.
  // Towers dealt in turn (one at home, two on d1, one on d2) leave a block as
  // slow as at home (16 ms); balanced by speed (two at home, one on each
  // helper) it takes 8 ms: 52 ms with all four blocks spread.
  LayerGraph g = tower_blocks(4, 4);
  Cluster c = equal_cluster(3);
  for (Device& d : c.devices) d.memory_mb = 1024;
  c.devices[1].speed = c.devices[2].speed = c.devices[0].speed / 2;
  c.default_link.bandwidth_mbps = 1e12;
  c.default_link.latency_ms = 0;
  auto cost = CostModel::build(g, c, test::flat_library(g, 1, 1.0, 1.0));
  REQUIRE(cost.is_ok());
  SimulatorEvaluator ev(g, c, *cost, 1);
  Measurer m(g, c, ev, 1);
  REQUIRE(m.measure(Placement::single_device(static_cast<int>(g.layers.size()), 0, 1), 0).step_ms ==
          doctest::Approx(84.0));
  for (uint64_t seed : {1, 2, 3}) {
    SearchOptions o;
    o.iterations = 150;
    o.batch_size = 1;
    o.seed = seed;
    o.device_sample_ms = {1.0, 2.0, 2.0};
    const SearchResult r = search(g, c, ev, o, nullptr);
    REQUIRE(r.policy_found);
    INFO("seed " << seed << ", the policy alone: " << r.policy_best_report.step_ms << " ms");
    CHECK(validate_placement(r.policy_best, g, c, 1).is_ok());
    // At least three blocks balanced (60 ms); with spreads dealt in turn only,
    // the search reached 72-76 ms in these seeds.
    CHECK(r.policy_best_report.step_ms <= 60.0 + 1e-9);
  }
}

TEST_CASE("the refinement climbs from one device to towers side by side on two") {
  // Every layer 1 ms each way per micro-batch, free links, one micro-batch: no
  // pipeline over the layer order overlaps anything, so only towers on
  // different devices at once beat one device (11 layers: 22 ms).
  LayerGraph g = towers();
  Cluster c = equal_cluster(2);
  for (Device& d : c.devices) d.memory_mb = 1024;
  c.default_link.bandwidth_mbps = 1e12;
  c.default_link.latency_ms = 0;
  LayerLibrary lib = test::flat_library(g, 8, 1.0, 1.0);
  auto cost = CostModel::build(g, c, lib);
  REQUIRE(cost.is_ok());
  SimulatorEvaluator ev(g, c, *cost, 8);
  const int L = static_cast<int>(g.layers.size());
  for (bool with_branches : {false, true}) {
    Measurer m(g, c, ev, 8);
    const StepReport& start = m.measure(Placement::single_device(L, 0, 1), 0);
    REQUIRE(start.ok);
    CHECK(start.step_ms == doctest::Approx(22.0));
    RefineOptions o;
    o.budget = 200;
    o.num_devices = 2;
    o.micro_batch_choices = {1};
    if (with_branches) o.branches = parallel_branches(g);
    refine(m, o, 1, nullptr);
    INFO("with branch moves: " << with_branches << ", best " << m.best_report().step_ms << " ms");
    if (with_branches)
      CHECK(m.best_report().step_ms < 0.85 * start.step_ms);
    else
      CHECK(m.best_report().step_ms >= start.step_ms - 1e-9);
  }
}

TEST_CASE("without kicks the refinement stops at its local optimum, and arrange_moves orders and adds to each step's moves") {
  // A chain of eight layers, 1 ms each way, on two equal devices with free
  // links, from seven layers on d0 and one on d1 at four micro-batches.
  const EightLayersOnTwo chain(64, 1e12);
  const LayerGraph& g = chain.g;
  const Cluster& c = chain.c;
  SimulatorEvaluator ev = chain.evaluator(), oracle_ev = chain.evaluator();
  const int L = static_cast<int>(g.layers.size());
  RefineOptions o;
  o.budget = 200;
  o.num_devices = 2;
  o.micro_batch_choices = {1, 2, 4};
  o.kicks = false;
  Placement start = Placement::single_device(L, 0, 4);
  start.layer_group = {0, 0, 0, 0, 0, 0, 0, 1};
  start.group_device = {0, 1};
  const double start_ms = ev.evaluate(start).step_ms;
  // Each climb from the start: its evaluations and best.
  const auto climb = [&](const RefineOptions& options) {
    Measurer m(g, c, ev, 8);
    REQUIRE(m.measure(start, 0).ok);
    refine(m, options, 1, nullptr);
    return std::make_pair(m.evaluations(), m.best_report().step_ms);
  };
  const auto [random_evaluations, random_ms] = climb(o);
  CHECK(random_evaluations < 1 + o.budget);  // stopped at the local optimum, not by the budget
  CHECK(random_ms < 0.8 * start_ms);
  // Best first (by a second simulator, which costs the climb nothing): fewer evaluations.
  RefineOptions best_first = o;
  best_first.arrange_moves = [&](std::vector<Placement>& moves) {
    std::stable_sort(moves.begin(), moves.end(), [&](const Placement& a, const Placement& b) {
      return oracle_ev.evaluate(a).step_ms < oracle_ev.evaluate(b).step_ms;
    });
  };
  const auto [ordered_evaluations, ordered_ms] = climb(best_first);
  INFO("random order: " << random_evaluations << " evaluations to " << random_ms
                        << " ms; best first: " << ordered_evaluations << " to " << ordered_ms << " ms");
  CHECK(ordered_evaluations < random_evaluations);
  CHECK(ordered_ms <= random_ms + 1e-9);
  // A move it adds is measured, and taken where it improves: halves at eight
  // micro-batches, a count no move reaches here.
  Placement halves = Placement::single_device(L, 0, 8);
  halves.layer_group = {0, 0, 0, 0, 1, 1, 1, 1};
  halves.group_device = {0, 1};
  const double halves_ms = ev.evaluate(halves).step_ms;
  REQUIRE(halves_ms < random_ms);
  RefineOptions added = o;
  added.arrange_moves = [&](std::vector<Placement>& moves) { moves.insert(moves.begin(), halves); };
  CHECK(climb(added).second <= halves_ms + 1e-9);
}

TEST_CASE("split_and_join_replicas climbs from a model copied onto every device to a pipeline") {
  // Eight layers, 1 ms each way, copied onto two equal devices over a slow
  // link: the all-reduce of every layer's parameters costs more than the
  // pipeline's fill and drain. Every device in use, no single move but a
  // split leaves the copy without first giving a device up, which is slower.
  const EightLayersOnTwo chain(512, 12000);
  const LayerGraph& g = chain.g;
  const Cluster& c = chain.c;
  SimulatorEvaluator ev = chain.evaluator();
  const int L = static_cast<int>(g.layers.size());
  Placement copied = Placement::single_device(L, 0, 4);
  copied.group_replicas = {{1}};
  Placement halves = Placement::single_device(L, 0, 4);
  halves.layer_group = {0, 0, 0, 0, 1, 1, 1, 1};
  halves.group_device = {0, 1};
  const double copied_ms = ev.evaluate(copied).step_ms;
  INFO("copied " << copied_ms << " ms, halves " << ev.evaluate(halves).step_ms << " ms, one device "
                 << ev.evaluate(Placement::single_device(L, 0, 4)).step_ms << " ms");
  REQUIRE(ev.evaluate(halves).step_ms < copied_ms);
  REQUIRE(ev.evaluate(Placement::single_device(L, 0, 4)).step_ms > copied_ms);
  for (bool split : {false, true}) {
    Measurer m(g, c, ev, 8);
    REQUIRE(m.measure(copied, 0).ok);
    RefineOptions o;
    o.budget = 100;
    o.num_devices = 2;
    o.micro_batch_choices = {4};
    o.replicas = true;
    o.kicks = false;
    o.split_and_join_replicas = split;
    refine(m, o, 1, nullptr);
    INFO("split_and_join_replicas " << split << ": best " << m.best_report().step_ms << " ms");
    if (split) {
      CHECK(m.best_report().step_ms < copied_ms);
      CHECK_FALSE(m.best().has_replicated_groups());
    } else {
      CHECK(m.best_report().step_ms == doctest::Approx(copied_ms));
    }
  }
}

TEST_CASE(
    "look_past_unused: a climb stopped with a device unused goes on through two moves, never ending worse") {
  // Random chains on the training set's random mesh clusters (devices of
  // different speeds and memories, every pair its own link each way), from
  // two stages on d0 and d1; moves ordered by a second simulator, as the
  // search orders them by its model.
  std::mt19937_64 rng(20261204);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int stopped_unused = 0, went_on = 0;
  for (int n = 0; n < 30; ++n) {
    const int L = 6 + static_cast<int>(rng() % 6);
    std::vector<int64_t> widths(L);
    for (auto& w : widths) w = int64_t{16} << (rng() % 8);
    const LayerGraph g = test::linear_chain(widths);
    const Cluster c = random_mesh_cluster(rng, "mesh");
    const int D = c.num_devices();
    LayerLibrary lib = test::flat_library(g, 8, 1.0, 2.0);
    for (auto& r : lib.rows) r.forward_ms = 0.2 + 2 * unit(rng), r.backward_ms = 2 * r.forward_ms;
    auto cost = CostModel::build(g, c, lib);
    REQUIRE(cost.is_ok());
    SimulatorEvaluator ev(g, c, *cost, 8), oracle(g, c, *cost, 8);
    Placement start = Placement::single_device(L, 0, 4);
    for (int l = L / 2; l < L; ++l) start.layer_group[l] = 1;
    start.group_device = {0, 1};
    const auto climb = [&](bool look) {
      Measurer m(g, c, ev, 8);
      REQUIRE(m.measure(start, 0).ok);
      RefineOptions o;
      o.budget = 400;
      o.num_devices = D;
      o.micro_batch_choices = {1, 2, 4, 8};
      o.replicas = o.split_and_join_replicas = true;
      o.kicks = false;
      o.look_past_unused = look;
      o.arrange_moves = [&](std::vector<Placement>& moves) {
        std::stable_sort(moves.begin(), moves.end(), [&](const Placement& a, const Placement& b) {
          return oracle.evaluate(a).step_ms < oracle.evaluate(b).step_ms;
        });
      };
      refine(m, o, 1, nullptr);
      std::set<int> used;
      for (int l = 0; l < L; ++l)
        for (int d : m.best().devices_of_group(m.best().layer_group[l])) used.insert(d);
      return std::make_tuple(m.best_report().step_ms, m.evaluations(), static_cast<int>(used.size()) < D);
    };
    const auto [plain_ms, plain_evaluations, left_unused] = climb(false);
    const auto [look_ms, look_evaluations, still_unused] = climb(true);
    INFO("problem " << n << ": " << plain_ms << " ms in " << plain_evaluations
                    << " evaluations, looking past: " << look_ms << " ms in " << look_evaluations);
    // The same climb up to its local optimum, then only improvements.
    CHECK(look_ms <= plain_ms * (1 + 1e-12));
    if (!left_unused) CHECK(look_evaluations == plain_evaluations);
    stopped_unused += left_unused;
    went_on += look_ms < plain_ms * (1 - 1e-9);
  }
  MESSAGE(stopped_unused << " of 30 climbs stopped with a device unused; looking past it improved "
                         << went_on);
  CHECK(stopped_unused > 0);
  CHECK(went_on > 0);
}
