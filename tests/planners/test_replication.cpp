// Replicated stages: PipeDream's DP against exhaustive enumeration, the
// replication moves, PipeLearn's clients-and-server planner, and the step-time
// lower bound against simulated plans (planners/pipedream.cpp, moves.h,
// pipelearn.cpp, lower_bound.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/allreduce_ring.h"
#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "model/layer_library.h"
#include "model/zoo.h"
#include "planners/lower_bound.h"
#include "planners/planner_support.h"
#include "planners/planners.h"
#include "simulator/cost_model.h"
#include "simulator/data_parallel.h"
#include "simulator/simulator_evaluator.h"
#include "tests/model/flat_library.h"
#include "tests/model/linear_chain.h"
#include "tests/planners/memory_tight.h"

using namespace tapp;

namespace {

using test::linear_chain;

// A cluster of `speeds`, every ordered pair its own random link (asymmetric).
Cluster random_cluster(std::mt19937& rng, int D) {
  Cluster c;
  for (int i = 0; i < D; ++i) {
    Device d;
    d.name = "d" + std::to_string(i);
    d.speed = 0.125 * (1 + rng() % 8);
    d.memory_mb = 64 + 64 * (rng() % 8);
    c.devices.push_back(d);
  }
  for (int a = 0; a < D; ++a)
    for (int b = 0; b < D; ++b)
      if (a != b) c.links.push_back(Link{c.devices[a].name, c.devices[b].name, 1.0 + rng() % 200, 0.01 * (rng() % 20)});
  return c;
}

// Devices d0, d1, ... of these speeds on the default link.
Cluster cluster_of_speeds(const std::vector<double>& speeds) {
  Cluster c;
  for (double speed : speeds) {
    c.devices.push_back(Device{"d" + std::to_string(c.devices.size())});
    c.devices.back().speed = speed;
  }
  return c;
}

// The default link made free (a terabit, no latency): only the links a test names cost.
void free_default_link(Cluster& c) {
  c.default_link.bandwidth_mbps = 1e9;
  c.default_link.latency_ms = 0;
}

// A pipeline: layer l in group layer_group[l], group g on devices[g].
Placement pipeline(std::vector<int> layer_group, std::vector<int> devices, int micro_batches,
                   Schedule schedule = Schedule::gpipe) {
  Placement p;
  p.layer_group = std::move(layer_group);
  p.group_device = std::move(devices);
  p.micro_batches = micro_batches;
  p.schedule = schedule;
  return p;
}

// n equal devices on free links but one, `from` -> `to` at `mbps` without latency.
Cluster equal_devices_one_slow_link(int n, const std::string& from, const std::string& to, double mbps) {
  Cluster c = cluster_of_speeds(std::vector<double>(n, 1.0));
  free_default_link(c);
  c.links.push_back(Link{from, to, mbps, 0});
  return c;
}

// The memory_mb that holds `bytes`.
int64_t mib_to_hold(int64_t bytes) { return (bytes + (int64_t{1} << 20) - 1) >> 20; }

LayerLibrary random_library(std::mt19937& rng, const LayerGraph& g, int64_t batch) {
  LayerLibrary lib = library_skeleton(g);
  lib.batch_size = batch;
  for (auto& row : lib.rows) {
    row.forward_ms = 0.05 + (rng() % 100) / 10.0;
    row.backward_ms = row.forward_ms * (1 + (rng() % 20) / 10.0);
  }
  return lib;
}

struct Case {
  LayerGraph g;
  Cluster c;
  CostModel cost;
  PlannerContext ctx;
  Case(LayerGraph graph, Cluster cl, const std::vector<LayerLibrary>& libs, int64_t batch, const Calibration& cal = {})
      : g(std::move(graph)), c(std::move(cl)), cost(*CostModel::build(g, c, libs, cal)) {
    ctx.graph = &g;
    ctx.cluster = &c;
    ctx.cost = &cost;
    ctx.batch_size = batch;
    ctx.budget = 30;
  }
  SimulatorEvaluator evaluator() const { return SimulatorEvaluator(g, c, cost, ctx.batch_size); }
};

// A chain of L layers of random widths and costs on a random cluster of D devices.
Case random_chain_case(std::mt19937& rng, int L, int D) {
  std::vector<int64_t> widths;
  for (int i = 0; i < L; ++i) widths.push_back(8 << (rng() % 7));
  LayerGraph g = linear_chain(widths);
  return Case(g, random_cluster(rng, D), {random_library(rng, g, 8)}, 8);
}

// Stages in layer order from 0, every device used once, micro-batches >= every stage's replicas.
bool is_valid_replicated(const StagePlan& p, int L, int D) {
  if (p.stage_begin.empty() || p.stage_begin[0] != 0 || p.stage_begin.size() != p.stage_device.size()) return false;
  if (!p.stage_replicas.empty() && p.stage_replicas.size() != p.stage_device.size()) return false;
  for (int k = 1; k < p.num_stages(); ++k)
    if (p.stage_begin[k] <= p.stage_begin[k - 1]) return false;
  if (p.stage_begin.back() >= L) return false;
  std::set<int> seen;
  for (int k = 0; k < p.num_stages(); ++k)
    for (int d : p.devices(k))
      if (d < 0 || d >= D || !seen.insert(d).second) return false;
  return p.micro_batches >= p.max_replica_count();
}

// A move set with the one kind of move `which` and nothing else.
MoveSet only_move(bool MoveSet::*which) {
  MoveSet only;
  only.shift_steps.clear();
  only.merge = only.split = only.swap = only.relocate = only.micro_batches = false;
  only.*which = true;
  return only;
}

}  // namespace

TEST_CASE("PipeDream's DP over stages and replica sets equals exhaustive enumeration on tiny random inputs") {
  std::mt19937 rng(20261123);
  int replicated_optima = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const int L = 2 + static_cast<int>(rng() % 4), D = 2 + static_cast<int>(rng() % 2);
    Case cs = random_chain_case(rng, L, D);
    cs.ctx.schedule = rng() % 2 ? Schedule::gpipe : Schedule::one_f_one_b;
    for (int m : {1, 2, 3, 4}) {
      auto dp = pipedream_min_bottleneck(cs.ctx, m);
      auto ex = exhaustive_replicated_min_bottleneck(cs.ctx, m);
      REQUIRE(dp.is_ok() == ex.is_ok());
      if (!dp) continue;
      CHECK(is_valid_replicated(*dp, L, D));
      const double best = replicated_bottleneck_ms(cs.ctx, *ex);
      CHECK(replicated_bottleneck_ms(cs.ctx, *dp) == doctest::Approx(best));
      replicated_optima += ex->max_replica_count() > 1;
      // Never worse than the unreplicated DP's optimum under the same objective.
      if (auto plain = dp_min_bottleneck(cs.ctx, m); plain)
        CHECK(best <= pipeline_bottleneck_ms(cs.ctx, *plain) * (1 + 1e-12));
    }
  }
  CHECK(replicated_optima > 0);  // the inputs did exercise replication
}

TEST_CASE("of plans with the same bottleneck PipeDream's DP keeps the one a micro-batch crosses fastest") {
  // The heavy first layer on the fast device sets the bottleneck (30 units);
  // the light one after it costs 6 on the device of speed 0.5 and 12 on the
  // one of 0.25, below that either way, but a step's fill and drain pay it.
  // Every order of the devices' indices, so that no order of the DP's loops hides it.
  const LayerGraph g = linear_chain({8, 8});
  LayerLibrary lib = library_skeleton(g);
  lib.batch_size = 8;
  for (size_t i = 0; i < lib.rows.size(); ++i) {
    lib.rows[i].forward_ms = i == 0 ? 10 : 1;
    lib.rows[i].backward_ms = 2 * lib.rows[i].forward_ms;
  }
  std::vector<double> speeds{0.25, 0.5, 1};
  do {
    Cluster c = cluster_of_speeds(speeds);
    free_default_link(c);
    Case cs(g, c, {lib}, 8);
    auto dp = pipedream_min_bottleneck(cs.ctx, 1);
    REQUIRE(dp.is_ok());
    CHECK(replicated_bottleneck_ms(cs.ctx, *dp) == doctest::Approx(30));
    for (int k = 0; k < dp->num_stages(); ++k)
      for (int d : dp->devices(k)) CHECK(speeds[d] >= 0.5);
  } while (std::next_permutation(speeds.begin(), speeds.end()));
}

TEST_CASE("under 1F1B PipeDream's DP gives each stage the memory of its place, as enumeration does") {
  // Activations large against the devices' memory: a stage keeps its
  // in_flight_limit (the devices from it to the last, over its replicas), so
  // a later stage may hold what a first stage could not.
  std::mt19937 rng(20261205);
  int later_stage_holds_more = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const int L = 2 + static_cast<int>(rng() % 4), D = 2 + static_cast<int>(rng() % 2);
    const LayerGraph g = test::wide_chain(rng, L);
    const int64_t batch = 2048;
    const StageMemory mem(g);
    Cluster c = random_cluster(rng, D);
    test::squeeze_memory(rng, c, g, batch / 4);
    Case cs(g, c, {random_library(rng, g, batch)}, batch);
    cs.ctx.schedule = Schedule::one_f_one_b;
    cs.ctx.allow_recompute = trial % 2;
    for (int m : {2, 4}) {
      auto dp = pipedream_min_bottleneck(cs.ctx, m);
      auto ex = exhaustive_replicated_min_bottleneck(cs.ctx, m);
      REQUIRE(dp.is_ok() == ex.is_ok());
      if (!dp) continue;
      CHECK(is_valid_replicated(*dp, L, D));
      CHECK(replicated_bottleneck_ms(cs.ctx, *dp) == doctest::Approx(replicated_bottleneck_ms(cs.ctx, *ex)));
      CHECK(planner_support::fits(cs.ctx, planner_support::planned(cs.ctx, *dp, "pipedream")));
      const int S = dp->num_stages();
      for (int k = 1; k < S && !cs.ctx.allow_recompute; ++k) {
        const int end = k + 1 < S ? dp->stage_begin[k + 1] : L, own = m / static_cast<int>(dp->devices(k).size());
        const Device& d = cs.c.devices[dp->stage_device[k]];
        if (!mem.fits(d, dp->stage_begin[k], end, batch / m, micro_batches_in_flight(cs.ctx.schedule, own, D), false, own))
          ++later_stage_holds_more;
      }
    }
  }
  // The inputs reach the case: without recomputation, a later stage holds what a first stage of every device could not.
  CHECK(later_stage_holds_more > 0);
}

TEST_CASE("on more than 8 devices PipeDream's DP counts interchangeable devices: two nodes of 5 against enumeration of the counts") {
  std::mt19937 rng(20261202);
  int beyond_eight = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const int L = 2 + static_cast<int>(rng() % 2);
    std::vector<int64_t> widths;
    for (int i = 0; i < L; ++i) widths.push_back(8 << (rng() % 5));
    LayerGraph g = linear_chain(widths);
    // Node a: 5 devices of one speed, node b: 5 slower; fast links within a node, a slow one between.
    Cluster c = cluster_of_speeds({0.5, 0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.25, 0.25});
    for (Device& d : c.devices) d.memory_mb = 4096;
    const double cross_mbps = 10.0 + rng() % 1000;
    for (int a = 0; a < 10; ++a)
      for (int b = 0; b < 10; ++b)
        if ((a < 5) != (b < 5)) c.links.push_back(Link{c.devices[a].name, c.devices[b].name, cross_mbps, 0.1});
    Case cs(g, c, {random_library(rng, g, 16)}, 16);
    const int m = 10;
    auto dp = pipedream_min_bottleneck(cs.ctx, m);
    REQUIRE(dp.is_ok());
    CHECK(is_valid_replicated(*dp, L, 10));
    // Every plan of contiguous stages, stage j taking a_j of node a and b_j of node b (the next free of each, faster first).
    double best = std::numeric_limits<double>::infinity();
    std::function<void(int, int, int, StagePlan&)> enumerate = [&](int from, int used_a, int used_b, StagePlan& plan) {
      for (int end = from + 1; end <= L; ++end)
        for (int a = 0; used_a + a <= 5; ++a)
          for (int b = 0; used_b + b <= 5; ++b) {
            if (a + b == 0) continue;
            std::vector<int> set;
            for (int i = 0; i < a; ++i) set.push_back(used_a + i);
            for (int i = 0; i < b; ++i) set.push_back(5 + used_b + i);
            plan.stage_begin.push_back(from);
            plan.stage_device.push_back(set[0]);
            plan.stage_replicas.emplace_back(set.begin() + 1, set.end());
            if (end == L)
              best = std::min(best, replicated_bottleneck_ms(cs.ctx, plan));
            else
              enumerate(end, used_a + a, used_b + b, plan);
            plan.stage_begin.pop_back();
            plan.stage_device.pop_back();
            plan.stage_replicas.pop_back();
          }
    };
    StagePlan plan;
    plan.micro_batches = m;
    enumerate(0, 0, 0, plan);
    CHECK(replicated_bottleneck_ms(cs.ctx, *dp) == doctest::Approx(best));
    int used = 0;
    for (int k = 0; k < dp->num_stages(); ++k) used += static_cast<int>(dp->devices(k).size());
    beyond_eight += used > 8;
  }
  CHECK(beyond_eight > 0);  // the optimum did use devices the 8 fastest alone would not have
}

TEST_CASE("PipeDream's objective without replicas is the DP planner's bottleneck; a replica halves a stage's compute") {
  LayerGraph g = linear_chain({16, 16, 16});
  Cluster c;
  for (int i = 0; i < 3; ++i) c.devices.push_back(Device{"d" + std::to_string(i)});
  c.default_link.bandwidth_mbps = 1e6;
  c.default_link.latency_ms = 0;
  LayerLibrary lib = test::flat_library(g, 4, 1, 1);  // 2 ms per layer for a micro-batch of 4
  Case cs(g, c, {lib}, 8);
  StagePlan plain;
  plain.stage_begin = {0, 2};
  plain.stage_device = {0, 1};
  plain.micro_batches = 2;
  CHECK(replicated_bottleneck_ms(cs.ctx, plain) == doctest::Approx(pipeline_bottleneck_ms(cs.ctx, plain)));
  CHECK(replicated_bottleneck_ms(cs.ctx, plain) == doctest::Approx(4));  // stage 0: 2 layers x 2 ms
  StagePlan replicated = plain;
  replicated.stage_replicas = {{2}, {}};  // stage 0 on d0 and d2: one micro-batch each
  // (1 micro-batch x 4 ms + the all-reduce of a few KB on a fast link) / 2 micro-batches.
  CHECK(replicated_bottleneck_ms(cs.ctx, replicated) == doctest::Approx(2).epsilon(0.01));
  replicated.micro_batches = 1;  // two replicas need two micro-batches
  CHECK(replicated_bottleneck_ms(cs.ctx, replicated) == std::numeric_limits<double>::infinity());
}

TEST_CASE("with_pipedream_cuts moves a pipeline's cuts towards its faster stage, by fill, drain and bottleneck") {
  // Six equal layers, d0 twice as fast as d1, a free link: c = one layer's
  // forward + backward of a micro-batch on d1, d0 takes j layers. Step =
  // latency + (m - 1) x bottleneck = (j/2 + 6 - j) c + 3 max(j/2, 6 - j) c:
  // j = 3 13.5c, j = 4 10c, j = 5 11c. So three and three become four and two.
  LayerGraph g = linear_chain({16, 16, 16, 16, 16, 16});
  Cluster c;
  c.devices = {Device{"fast"}, Device{"slow"}};
  c.devices[0].speed = 2;
  free_default_link(c);
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  Placement p = pipeline({0, 0, 0, 1, 1, 1}, {0, 1}, 4);
  Placement moved = with_pipedream_cuts(cs.ctx, p);
  CHECK(moved.layer_group == std::vector<int>{0, 0, 0, 0, 1, 1});
  CHECK(moved.group_device == p.group_device);
  CHECK(moved.micro_batches == 4);
  // One micro-batch has no interval to repeat, only latency: (6 - j/2) c, least at j = 5, where
  // the bottleneck alone would still say four and two.
  Placement one = p;
  one.micro_batches = 1;
  CHECK(with_pipedream_cuts(cs.ctx, one).layer_group == std::vector<int>{0, 0, 0, 0, 0, 1});
  // Cuts that are already best, one group, data parallelism: unchanged.
  CHECK(with_pipedream_cuts(cs.ctx, moved).layer_group == moved.layer_group);
  CHECK(with_pipedream_cuts(cs.ctx, Placement::single_device(6, 1, 4)).layer_group == std::vector<int>(6, 0));
  const Placement dp = Placement::replicas(6, {0, 1});
  CHECK(with_pipedream_cuts(cs.ctx, dp).layer_group == dp.layer_group);
  // Groups that interleave become consecutive, in the order of their first layers.
  p.layer_group = {1, 0, 1, 0, 0, 1};
  p.group_device = {1, 0};
  CHECK(with_pipedream_cuts(cs.ctx, p).layer_group == std::vector<int>{1, 1, 1, 1, 0, 0});
}

TEST_CASE("with_pipedream_cuts counts a slow gradient link where each schedule waits for it") {
  // Six equal layers on two equal devices, c = 0.5 ms a layer's forward +
  // backward of a micro-batch (2 samples, the two halves equal). Activations
  // go d0 -> d1 free; gradients come back on a slow link: 1 ms = 2c after the
  // wide layers 0-2, 1/64 ms after the narrow 3-5. d0 takes j layers, m = 4.
  // A bottleneck over stage and link alone: j = 3 costs 6c + 2c + 3 max(3c,
  // 2c) = 17c, j = 4 6c + 3 x 4c = 18c, so three and three would stay. But
  //  * 1F1B keeps two micro-batches in flight on d0, each a round trip of 6c
  //    + the gradient's time: j = 3 waits 3 x (8c / 2) = 12c on it (20c in
  //    all), j = 4 fits it in its 4c interval (18c);
  //  * GPipe runs every backward after every forward, so d1's backward
  //    phase lasts as long as its gradients' sends: j = 3 costs 8c + 3 x
  //    (1.5c + 2c) = 18.5c, j = 4 18c (what the simulator gives: 9.25 and 9.02 ms).
  // Four and two either way, and the simulator agrees.
  LayerGraph g = linear_chain({1024, 1024, 1024, 16, 16, 16});
  Cluster c = equal_devices_one_slow_link(2, "d1", "d0", 65.536);  // 1024 floats x 2 samples in 1 ms
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  SimulatorEvaluator ev = cs.evaluator();
  for (Schedule schedule : {Schedule::one_f_one_b, Schedule::gpipe}) {
    CAPTURE(schedule_name(schedule));
    const Placement p = pipeline({0, 0, 0, 1, 1, 1}, {0, 1}, 4, schedule);
    const Placement moved = with_pipedream_cuts(cs.ctx, p);
    CHECK(moved.layer_group == std::vector<int>{0, 0, 0, 0, 1, 1});
    const StepReport before = ev.evaluate(p), after = ev.evaluate(moved);
    REQUIRE(before.ok);
    REQUIRE(after.ok);
    CHECK(after.step_ms < before.step_ms);
  }
}

TEST_CASE("with_pipedream_cuts charges each stage the micro-batches it keeps in flight, as the memory rule does") {
  // Six equal layers on two equal devices, 1F1B at m = 4: the first stage
  // keeps two micro-batches' activations, the last one. d1 holds three layers
  // with one in flight but not with two: a model that charged every stage the
  // first's two would have d1 recompute, and move a layer to d0 (4/2, which
  // the simulator finds slower); three and three fit as they are.
  LayerGraph g = linear_chain({1024, 1024, 1024, 1024, 1024, 1024});
  Cluster c = cluster_of_speeds({1.0, 1.0});
  free_default_link(c);
  Case cs(g, c, {test::flat_library(g, 2048, 1, 1)}, 2048);
  const Placement p = pipeline({0, 0, 0, 1, 1, 1}, {0, 1}, 4, Schedule::one_f_one_b);
  const MemoryBreakdown need = estimate_device_memory(p, cs.g, cs.c, 2048)[1];
  cs.c.devices[1].memory_mb = mib_to_hold(need.total());
  REQUIRE(need.total() + need.activations > device_memory_bytes(cs.c.devices[1]));  // two in flight do not fit
  const Placement moved = with_pipedream_cuts(cs.ctx, p);
  CHECK(moved.layer_group == p.layer_group);
  Placement four_two = p;
  four_two.layer_group = {0, 0, 0, 0, 1, 1};
  REQUIRE(check_memory(p, cs.g, cs.c, 2048).is_ok());
  REQUIRE(check_memory(four_two, cs.g, cs.c, 2048).is_ok());
  SimulatorEvaluator ev = cs.evaluator();
  CHECK(ev.evaluate(p).step_ms < ev.evaluate(four_two).step_ms);
}

TEST_CASE("modelled_step_ms ranks cuts as the simulator does, prices a data-parallel plan, and not a group in two runs") {
  // Six equal layers on two equal devices, free links, four micro-batches.
  LayerGraph g = linear_chain({64, 64, 64, 64, 64, 64});
  Cluster c = cluster_of_speeds({1.0, 1.0});
  free_default_link(c);
  Case cs(g, c, {test::flat_library(g, 32, 1, 2)}, 32);
  SimulatorEvaluator ev = cs.evaluator();
  const Placement even = pipeline({0, 0, 0, 1, 1, 1}, {0, 1}, 4);
  const Placement four_two = pipeline({0, 0, 0, 0, 1, 1}, {0, 1}, 4);
  const Placement five_one = pipeline({0, 0, 0, 0, 0, 1}, {0, 1}, 4);
  const double even_ms = modelled_step_ms(cs.ctx, even), four_two_ms = modelled_step_ms(cs.ctx, four_two);
  CHECK(even_ms < four_two_ms);
  CHECK(four_two_ms < modelled_step_ms(cs.ctx, five_one));
  CHECK(ev.evaluate(even).step_ms < ev.evaluate(four_two).step_ms);
  CHECK(ev.evaluate(four_two).step_ms < ev.evaluate(five_one).step_ms);
  // The less of the two schedules, whichever the plan names (the measurer keeps the faster).
  Placement one_f_one_b = even;
  one_f_one_b.schedule = Schedule::one_f_one_b;
  CHECK(modelled_step_ms(cs.ctx, one_f_one_b) == doctest::Approx(even_ms));
  // Data parallelism: one stage on both devices, a micro-batch each.
  Placement copied = pipeline({0, 0, 0, 0, 0, 0}, {0}, 2);
  copied.group_replicas = {{1}};
  const double data_parallel_ms = modelled_step_ms(cs.ctx, Placement::replicas(6, {0, 1}));
  CHECK(data_parallel_ms < std::numeric_limits<double>::infinity());
  CHECK(data_parallel_ms == doctest::Approx(modelled_step_ms(cs.ctx, copied)));
  // A group whose layers are two runs is no chain the model prices.
  CHECK(modelled_step_ms(cs.ctx, pipeline({0, 0, 1, 1, 0, 0}, {0, 1}, 4)) == std::numeric_limits<double>::infinity());
}

TEST_CASE("the replicated-stage model shares a stage's micro-batches by speed where replicas are weighed, as the simulator runs weighed replicas") {
  // One stage on d0 with a replica on d1, 0.4 as fast, at twenty
  // micro-batches, free links. In equal shares d1 takes ten (25 of d0's), so
  // d0 alone (20) is faster; weighed by speed, d0 takes fourteen and d1 six
  // (15 of d0's), so the copy is faster.
  LayerGraph g = linear_chain({64, 64, 64, 64});
  Cluster c = cluster_of_speeds({1.0, 0.4});
  free_default_link(c);
  Case cs(g, c, {test::flat_library(g, 40, 1, 2)}, 40);
  Placement copied = pipeline({0, 0, 0, 0}, {0}, 20);
  copied.group_replicas = {{1}};
  const Placement alone = pipeline({0, 0, 0, 0}, {0}, 20);
  Placement weighed = copied;
  weighed.group_replica_weights = {{7, 3}};
  SimulatorEvaluator ev = cs.evaluator();
  REQUIRE(ev.evaluate(copied).step_ms > ev.evaluate(alone).step_ms);
  REQUIRE(ev.evaluate(weighed).step_ms < ev.evaluate(alone).step_ms);
  CHECK(modelled_step_ms(cs.ctx, copied) > modelled_step_ms(cs.ctx, alone));
  cs.ctx.replicas_weighed = true;
  CHECK(modelled_step_ms(cs.ctx, copied) < modelled_step_ms(cs.ctx, alone));
  // By hand, t a micro-batch on d0 (alone: t + 19 intervals of t = 20 t):
  // d1's 6 take 15 t against d0's 14, both from the start (a first stage's
  // copies start together): 15 t, as the simulator runs the weighed copies
  // (the fill and drain of one micro-batch on top, 15.25 t, before).
  const double t = modelled_step_ms(cs.ctx, alone) / 20;
  CHECK(modelled_step_ms(cs.ctx, copied) == doctest::Approx(15 * t).epsilon(1e-6));
  CHECK(modelled_step_ms(cs.ctx, copied) == doctest::Approx(ev.evaluate(weighed).step_ms).epsilon(1e-6));
}

TEST_CASE(
    "the cut model charges the first stage's all-reduce in full after the step, a later stage's spread over "
    "its micro-batches") {
  // Six linear layers of 256 in two stages of three, eight micro-batches; one
  // stage copied on d0 and d1, the other on d2. Every link free but d0 <-> d1
  // (each way), so the copies' all-reduce is what that link's speed changes.
  LayerGraph g = linear_chain({256, 256, 256, 256, 256, 256});
  const auto at = [&](double mbps) {
    Cluster c = equal_devices_one_slow_link(3, "d0", "d1", mbps);
    c.links.push_back(Link{"d1", "d0", mbps, 0});
    return Case(g, c, {test::flat_library(g, 32, 1, 2)}, 32);
  };
  const Case fast = at(1e9), slow = at(10);
  const auto bytes_of = [&](int a, int b) {
    int64_t bytes = 0;
    for (int l = a; l < b; ++l) bytes += g.layers[l].param_bytes();
    return bytes;
  };
  Placement first = pipeline({0, 0, 0, 1, 1, 1}, {0, 2}, 8);
  first.group_replicas = {{1}, {}};
  Placement last = pipeline({0, 0, 0, 1, 1, 1}, {2, 0}, 8);
  last.group_replicas = {{}, {1}};
  const auto added = [&](const Placement& p, auto&& step) { return step(slow, p) - step(fast, p); };
  const auto model = [](const Case& cs, const Placement& p) { return modelled_step_ms(cs.ctx, p); };
  const auto simulated = [](const Case& cs, const Placement& p) {
    return cs.evaluator().evaluate(p).step_ms;
  };
  // The first stage's last backward is the step's last compute: nothing hides
  // its all-reduce (spread over the micro-batches, the model charged 87% of it).
  const double first_ar = slow.cost.ring_allreduce_ms({0, 1}, bytes_of(0, 3));
  REQUIRE(first_ar > 10 * model(fast, first) / 8);  // an interval's worth and more
  CHECK(added(first, model) == doctest::Approx(first_ar).epsilon(0.01));
  CHECK(added(first, simulated) == doctest::Approx(first_ar).epsilon(0.01));
  // The last stage's runs while the first stage's backward of the last
  // micro-batch does: it adds less, to the model and the simulator.
  const double last_ar = slow.cost.ring_allreduce_ms({0, 1}, bytes_of(3, 6));
  CHECK(added(last, model) < last_ar);
  CHECK(added(last, simulated) < last_ar);
}

TEST_CASE("the cut model starts a copied first stage's replicas together, as the simulator does") {
  // Eight linear layers on four equal devices, free links. Every replica of
  // a first stage has its input from the start: m micro-batches on r copies
  // take m / r micro-batches' time, not a micro-batch more less one interval
  // (the model charged 1.75 x for four copies of four).
  LayerGraph g = linear_chain(std::vector<int64_t>(8, 256));
  Cluster c = cluster_of_speeds({1.0, 1.0, 1.0, 1.0});
  free_default_link(c);
  Case cs(g, c, {test::flat_library(g, 32, 1, 2)}, 32);
  SimulatorEvaluator ev = cs.evaluator();
  const auto check_against_simulator = [&](const Placement& p) {
    CHECK(modelled_step_ms(cs.ctx, p) == doctest::Approx(ev.evaluate(p).step_ms).epsilon(0.02));
  };
  for (int m : {4, 8, 16}) {
    CAPTURE(m);
    Placement copies = pipeline(std::vector<int>(8, 0), {0}, m);
    copies.group_replicas = {{1, 2, 3}};
    check_against_simulator(copies);
  }
  check_against_simulator(Placement::replicas(8, {0, 1, 2, 3}));
  // Two copies of the first seven layers pace a pipeline whose last stage,
  // one layer on d2, has time to spare: m / 2 micro-batches' time and at
  // most the last micro-batch's way through d2 (the old model: 16% more).
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b}) {
    CAPTURE(static_cast<int>(schedule));
    Placement first = pipeline({0, 0, 0, 0, 0, 0, 0, 1}, {0, 2}, 8, schedule);
    first.group_replicas = {{1}, {}};
    CHECK(modelled_step_ms(cs.ctx, first) == doctest::Approx(ev.evaluate(first).step_ms).epsilon(0.05));
  }
}

TEST_CASE("with_pipedream_cuts prices a copied first stage's all-reduce over all of its layers") {
  // Twelve linear layers of 256: the first stage copied on d0 and d1, which
  // a link of `mbps` joins each way, the second on d2. The copies halve the
  // first stage's compute and its all-reduce grows with its layers: the cut
  // placed is as good as the best of all eleven by the model.
  const int L = 12;
  LayerGraph g = linear_chain(std::vector<int64_t>(L, 256));
  const auto cut_at = [&](int at) {
    std::vector<int> group(L, 0);
    std::fill(group.begin() + at, group.end(), 1);
    Placement p = pipeline(group, {0, 2}, 8, Schedule::one_f_one_b);
    p.group_replicas = {{1}, {}};
    return p;
  };
  for (double mbps : {100.0, 300.0, 1000.0, 3000.0}) {
    CAPTURE(mbps);
    Cluster c = equal_devices_one_slow_link(3, "d0", "d1", mbps);
    c.links.push_back(Link{"d1", "d0", mbps, 0});
    const Case cs(g, c, {test::flat_library(g, 32, 1, 2)}, 32);
    double best = std::numeric_limits<double>::infinity();
    for (int at = 1; at < L; ++at) best = std::min(best, modelled_step_ms(cs.ctx, cut_at(at)));
    CHECK(modelled_step_ms(cs.ctx, with_pipedream_cuts(cs.ctx, cut_at(L / 2))) == doctest::Approx(best));
  }
}

TEST_CASE("the cut model rings a stage's copies in the order the measurer runs them, around a slow link") {
  // Three equal devices, every link free but d0 -> d1: in the order d0, d1,
  // d2 the ring would pace on it; cheapest_ring goes d0, d2, d1 (d1 -> d0 is free).
  LayerGraph g = linear_chain({256, 256, 256, 256});
  Case slow(g, equal_devices_one_slow_link(3, "d0", "d1", 1), {test::flat_library(g, 32, 1, 2)}, 32);
  Case fast(g, equal_devices_one_slow_link(3, "d0", "d1", 1e9), {test::flat_library(g, 32, 1, 2)}, 32);
  const Placement copies = Placement::replicas(4, {0, 1, 2});
  REQUIRE(cheapest_ring(slow.c, {0, 1, 2}, int64_t{1} << 20) == std::vector<int>{0, 2, 1});
  CHECK(modelled_step_ms(slow.ctx, copies) == doctest::Approx(modelled_step_ms(fast.ctx, copies)));
  Placement first_copied = pipeline({0, 0, 1, 1}, {0, 2}, 4);
  first_copied.group_replicas = {{1, 2}, {}};
  CHECK(modelled_step_ms(slow.ctx, first_copied) ==
        doctest::Approx(modelled_step_ms(fast.ctx, first_copied)));
}

// Layers of random widths, each reading the one before and now and then also
// an earlier one (a shortcut: an add of equal widths).
LayerGraph random_shortcut_graph(std::mt19937& rng, int L) {
  LayerGraph g;
  g.name = "shortcuts";
  g.input_shape = {16};
  std::vector<int64_t> width;
  for (int i = 0; i < L; ++i) {
    Layer l;
    l.name = "l" + std::to_string(i);
    std::vector<int> same;  // earlier layers (not the one before) as wide as the one before
    for (int p = 0; i >= 2 && p < i - 1; ++p)
      if (width[p] == width[i - 1]) same.push_back(p);
    if (!same.empty() && rng() % 2) {
      l.op = "add";
      l.inputs = {i - 1, same[rng() % same.size()]};
      width.push_back(width[i - 1]);
    } else {
      l.op = "linear";
      l.attrs.out = 8 << (rng() % 3);
      if (i > 0) l.inputs = {i - 1};
      width.push_back(l.attrs.out);
    }
    g.layers.push_back(l);
  }
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

TEST_CASE(
    "StagePassing counts the tensors made before a stage and read after it, and those it does not read; its "
    "table agrees") {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 30; ++trial) {
    const LayerGraph g = random_shortcut_graph(rng, 3 + static_cast<int>(rng() % 20));
    const int L = static_cast<int>(g.layers.size());
    const planner_support::StagePassing passing(g);
    for (int a = 0; a < L; ++a)
      for (int b = a + 1; b <= L; ++b) {
        int64_t over = 0, past = 0;  // by definition
        for (int p = 0; p < a; ++p) {
          bool read_inside = false, read_after = false;
          for (int r = a; r < L; ++r)
            for (int in : g.layers[r].inputs)
              if (in == p) (r < b ? read_inside : read_after) = true;
          if (read_after) over += g.layers[p].activation_bytes();
          if (read_after && !read_inside) past += g.layers[p].activation_bytes();
        }
        CAPTURE(a);
        CAPTURE(b);
        REQUIRE(passing.bytes(a, b).over == over);
        REQUIRE(passing.bytes(a, b).past == past);
      }
    std::vector<int> P = {0, L};  // some positions, ascending
    for (int l = 1; l < L; ++l)
      if (rng() % 2) P.push_back(l);
    std::sort(P.begin(), P.end());
    const std::vector<planner_support::StagePassing::Bytes> table = passing.table(P);
    for (size_t i = 0; i < P.size(); ++i)
      for (size_t j = i + 1; j < P.size(); ++j) {
        CHECK(table[i * P.size() + j].over == passing.bytes(P[i], P[j]).over);
        CHECK(table[i * P.size() + j].past == passing.bytes(P[i], P[j]).past);
      }
  }
}

TEST_CASE(
    "the cut model does not charge a thin stage the shortcut that passes it by, as the simulator sends it") {
  // l0 (wide) -> l1 -> l2 (narrow) -> l3 (wide) -> add(l3, l0) -> l5 on d0 |
  // d1 | d2, d1's link to d2 slow: l0's output goes from d0 to d2 on a free
  // link; only l2's narrow one crosses the slow link. Charging l0's on both
  // of the middle stage's boundaries (every byte across each cut) priced the
  // slow link at 65 times what it carries, and moved l1 off d1.
  LayerGraph g;
  g.name = "shortcut";
  g.input_shape = {16};
  const auto add = [&](const std::string& op, int64_t out, std::vector<int> inputs) {
    Layer l;
    l.name = "l" + std::to_string(g.layers.size());
    l.op = op;
    l.attrs.out = out;
    l.inputs = std::move(inputs);
    g.layers.push_back(l);
  };
  add("linear", 1024, {});
  add("linear", 16, {0});
  add("linear", 16, {1});
  add("linear", 1024, {2});
  add("add", 0, {3, 0});
  add("linear", 16, {4});
  REQUIRE(infer_shapes(g).is_ok());
  Cluster c = equal_devices_one_slow_link(3, "d1", "d2", 6.5536);  // 1024 floats x 2 samples in 10 ms
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  SimulatorEvaluator ev = cs.evaluator();
  for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b}) {
    CAPTURE(schedule_name(schedule));
    const Placement p = pipeline({0, 1, 1, 2, 2, 2}, {0, 1, 2}, 4, schedule);
    const StepReport simulated = ev.evaluate(p);
    REQUIRE(simulated.ok);
    CHECK(modelled_step_ms(cs.ctx, p) == doctest::Approx(simulated.step_ms).epsilon(0.02));  // was 5.7 x
    // Its cuts are the best there are (under 1F1B moving l1 to d0 made it 22% slower).
    CHECK(with_pipedream_cuts(cs.ctx, p).layer_group == p.layer_group);
  }
}

TEST_CASE(
    "the cut model paces GPipe's forwards by the slowest forward and its backwards by the slowest backward") {
  // Three layers on two equal devices, free links, GPipe, per micro-batch
  // (forward, backward): l0 (3, 0.1), l1 (0.1, 3), l2 (1, 1). GPipe runs every
  // forward before any backward: the forwards go at the slowest forward's
  // pace, then the backwards at the slowest backward's. Cut before l1: stages
  // (3, 0.1) and (1.1, 4), 3 + 4 = 7 a micro-batch, though neither stage's
  // forward + backward is over 5.1; cut before l2: (3.1, 3.1) and (1, 1), 6.2.
  // So the cut goes before l2, as the simulator finds faster (the least
  // latency under a bound on the intervals found the cut before l1 too).
  LayerGraph g = linear_chain({16, 16, 16});
  Cluster c = cluster_of_speeds({1.0, 1.0});
  free_default_link(c);
  LayerLibrary lib = library_skeleton(g);
  lib.batch_size = 8;
  const double forward[] = {3, 0.1, 1}, backward[] = {0.1, 3, 1};
  for (int l = 0; l < 3; ++l)
    lib.rows[l].forward_ms = 8 * forward[l], lib.rows[l].backward_ms = 8 * backward[l];
  Case cs(g, c, {lib}, 8);
  const Placement before_l1 = pipeline({0, 1, 1}, {0, 1}, 8, Schedule::gpipe);
  const Placement moved = with_pipedream_cuts(cs.ctx, before_l1);
  CHECK(moved.layer_group == std::vector<int>{0, 0, 1});
  SimulatorEvaluator ev = cs.evaluator();
  // 8.2 units for one micro-batch, then 7 more of 7 units against 6.2.
  CHECK(ev.evaluate(before_l1).step_ms == doctest::Approx(57.2));
  CHECK(ev.evaluate(moved).step_ms == doctest::Approx(51.6));
}

TEST_CASE("the cut model's round trip counts the forward a recomputing stage runs again") {
  // l0 | l1 l2 | l3 on d0 | d1 | d2, 25 ms each way per layer and micro-batch
  // of 128 samples, 1F1B over 16 micro-batches; d1 holds its stage's two in
  // flight only recomputing, and its links to d2 are slow both ways, so a
  // micro-batch's round trip from d1 over its window of two is the
  // bottleneck, and it runs l1 and l2's forward twice, which the round trip
  // had left out: the model 3,023 ms against the simulator's 3,398.
  const LayerGraph g = linear_chain({1024, 1024, 1024, 1024});
  const double mbps = 42;  // 0.5 MiB, a micro-batch's activations, in 100 ms
  Cluster c = equal_devices_one_slow_link(3, "d1", "d2", mbps);
  c.links.push_back(Link{"d2", "d1", mbps, 0});
  Case cs(g, c, {test::flat_library(g, 2048, 400, 400)}, 2048);
  const StageMemory mem(cs.g);
  cs.c.devices[1].memory_mb = mib_to_hold(mem.bytes(1, 3, 128, 2, true, 16));
  REQUIRE_FALSE(mem.fits(cs.c.devices[1], 1, 3, 128, 2, false, 16));
  Placement p = pipeline({0, 1, 1, 2}, {0, 1, 2}, 16, Schedule::one_f_one_b);
  REQUIRE(recompute_where_needed(p, cs.g, cs.c, 2048));
  REQUIRE(p.recomputes(1));
  const StepReport simulated = cs.evaluator().evaluate(p);
  REQUIRE(simulated.ok);
  CHECK(modelled_step_ms(cs.ctx, p) == doctest::Approx(simulated.step_ms).epsilon(0.02));
}

TEST_CASE("the cut model's 1F1B round trip between two stages paces a pipeline whose last stage is light") {
  // l0 l1 | l2 l3 | l4 on d0 | d1 | d2, 25 ms each way per layer and
  // micro-batch of 128 samples but l4 a tenth of that, 1F1B over 16
  // micro-batches; d1's gradients back to d0 take 100 ms. d0's backward of
  // micro-batch t frees its forward of t + 3, and d1 runs its forward of u
  // before its backward of u - 1: so d0's and d1's forward + backward and the
  // link back (300 ms) recur every two micro-batches, 150 ms each, though
  // neither stage's interval is over 100 and the round trip to the last stage
  // is 305 ms over three. The model had 1,829 ms against the simulator's 2,549.
  LayerGraph g = linear_chain({1024, 1024, 1024, 1024, 1024});
  Cluster c =
      equal_devices_one_slow_link(3, "d1", "d0", 42);  // 0.5 MiB, a micro-batch's activations, in 100 ms
  LayerLibrary lib = test::flat_library(g, 2048, 400, 400);
  lib.rows[4].forward_ms = lib.rows[4].backward_ms = 40;
  Case cs(g, c, {lib}, 2048);
  // GPipe's sixteen micro-batches in flight do not fit d0, and none recompute:
  // the model's step is 1F1B's.
  const StageMemory mem(cs.g);
  cs.c.devices[0].memory_mb = mib_to_hold(mem.bytes(0, 2, 128, 3, false, 16));
  REQUIRE_FALSE(mem.fits(cs.c.devices[0], 0, 2, 128, 16, false, 16));
  cs.ctx.allow_recompute = false;
  const Placement p = pipeline({0, 0, 1, 1, 2}, {0, 1, 2}, 16, Schedule::one_f_one_b);
  const StepReport simulated = cs.evaluator().evaluate(p);
  REQUIRE(simulated.ok);
  CHECK(modelled_step_ms(cs.ctx, p) == doctest::Approx(simulated.step_ms).epsilon(0.02));
}

TEST_CASE("the cut model's 1F1B interval counts a stage's sends on and back one after the other") {
  // l0 | l1 | l2 on d0 | d1 | d2, 25 ms each way per layer and micro-batch of
  // 128 samples, 1F1B over 32 micro-batches; d1's links to d0 and to d2 take
  // 100 ms each a micro-batch. Its gradients back and activations on leave
  // from one send queue, 200 ms a micro-batch, where each boundary alone is
  // 100 and the round trip 350 over three: the model had 3,964 ms against the
  // simulator's 6,466.
  LayerGraph g = linear_chain({1024, 1024, 1024});
  Cluster c =
      equal_devices_one_slow_link(3, "d1", "d0", 42);  // 0.5 MiB, a micro-batch's activations, in 100 ms
  c.links.push_back(Link{"d1", "d2", 42, 0});
  Case cs(g, c, {test::flat_library(g, 4096, 800, 800)}, 4096);
  // GPipe's 32 micro-batches in flight do not fit d0, and none recompute:
  // the model's step is 1F1B's.
  const StageMemory mem(cs.g);
  cs.c.devices[0].memory_mb = mib_to_hold(mem.bytes(0, 1, 128, 3, false, 32));
  REQUIRE_FALSE(mem.fits(cs.c.devices[0], 0, 1, 128, 32, false, 32));
  cs.ctx.allow_recompute = false;
  const Placement p = pipeline({0, 1, 2}, {0, 1, 2}, 32, Schedule::one_f_one_b);
  const StepReport simulated = cs.evaluator().evaluate(p);
  REQUIRE(simulated.ok);
  CHECK(modelled_step_ms(cs.ctx, p) == doctest::Approx(simulated.step_ms).epsilon(0.02));
}

TEST_CASE("with_pipedream_cuts moves the cuts of one micro-batch off a stage that does not fit") {
  // Six wide layers on two equal devices, one micro-batch: d1 holds two of
  // them, even recomputing not three, so three and three do not fit; four and
  // two do. One micro-batch's round trip exceeds every stage's interval, so no
  // interval is a bound that holds; and an infeasible stage must make the
  // step infinite, not 0 x infinity, for other cuts to beat it.
  LayerGraph g = linear_chain({1024, 1024, 1024, 1024, 1024, 1024});
  Case cs(g, cluster_of_speeds({1.0, 1.0}), {test::flat_library(g, 8, 1, 1)}, 8);
  const StageMemory mem(cs.g);
  cs.c.devices[1].memory_mb = mib_to_hold(mem.bytes(4, 6, 8, 1));
  REQUIRE_FALSE(mem.fits(cs.c.devices[1], 3, 6, 8, 1, true));
  const Placement p = pipeline({0, 0, 0, 1, 1, 1}, {0, 1}, 1);
  Placement moved = with_pipedream_cuts(cs.ctx, p);
  CHECK(moved.layer_group == std::vector<int>{0, 0, 0, 0, 1, 1});
  CHECK(recompute_where_needed(moved, cs.g, cs.c, 8));
}

// Two stages of a chain of L layers, d0 then d1, cut before layer `at`, 8 micro-batches.
Placement cut_once(int L, int at, Schedule schedule) {
  std::vector<int> group(L, 0);
  std::fill(group.begin() + at, group.end(), 1);
  return pipeline(group, {0, 1}, 8, schedule);
}

// The least modelled step (modelled_step_ms: the faster schedule) over every cut_once of L layers.
double best_single_cut_ms(const PlannerContext& ctx, int L) {
  double best = std::numeric_limits<double>::infinity();
  for (int at = 1; at < L; ++at)
    best = std::min(best, modelled_step_ms(ctx, cut_once(L, at, Schedule::gpipe)));
  return best;
}

TEST_CASE("with_pipedream_cuts places the cut of a model longer than its quantiles to the layer") {
  // 300 layers of random costs on two devices of random speeds, free links,
  // 1F1B (with two stages and free links never modelled slower than GPipe):
  // the cut it places is as good as the best of all 299 by the model, where
  // the quantiles of the fastest device's time alone (129 positions) missed
  // it in 3 of 8 chains.
  std::mt19937 rng(20261204);
  for (int trial = 0; trial < 8; ++trial) {
    const LayerGraph g = linear_chain(std::vector<int64_t>(300, 64));
    Cluster c = cluster_of_speeds({0.3 + (rng() % 100) / 100.0, 0.3 + (rng() % 100) / 100.0});
    free_default_link(c);
    Case cs(g, c, {random_library(rng, g, 16)}, 16);
    const int L = 300;
    const double best = best_single_cut_ms(cs.ctx, L);
    const Placement moved = with_pipedream_cuts(
        cs.ctx, cut_once(L, 1 + static_cast<int>(rng() % (L - 1)), Schedule::one_f_one_b));
    CHECK(modelled_step_ms(cs.ctx, moved) <= best * (1 + 1e-9));
  }
}

TEST_CASE(
    "with_pipedream_cuts places the cut of a long model on a slow link at a narrow point the quantiles "
    "miss") {
  // 300 wide layers of equal, light cost and a few narrow ones, one of them
  // 12-19 layers past where the two devices' speeds balance the compute, on a
  // slow link: the better of the cuts it places for GPipe and for 1F1B is as
  // good as the best of all 299 by the model (a narrow one). On quantiles of
  // time alone (129 positions) the cut moves to the layer only between its
  // neighbours there, and missed it in 4 of 8 chains.
  std::mt19937 rng(20261205);
  for (int trial = 0; trial < 8; ++trial) {
    const int L = 300;
    const double s0 = 0.3 + (rng() % 100) / 100.0, s1 = 0.3 + (rng() % 100) / 100.0;
    std::vector<int64_t> widths(L, 512);
    const int balanced = static_cast<int>(L * s0 / (s0 + s1));
    widths[std::clamp(balanced + 12 + static_cast<int>(rng() % 8), 1, L - 2)] = 8;
    for (int k = 0; k < 4; ++k) widths[1 + rng() % (L - 2)] = 8 << (rng() % 4);
    const LayerGraph g = linear_chain(widths);
    Cluster c = cluster_of_speeds({s0, s1});
    for (Device& d : c.devices) d.memory_mb = 1 << 16;
    c.default_link.bandwidth_mbps = 0.5 + (rng() % 100) / 100.0;
    Case cs(g, c, {test::flat_library(g, 16, 0.2, 0.4)}, 16);
    const double best = best_single_cut_ms(cs.ctx, L);
    // The measurer keeps the faster schedule: the better of the two placed.
    const int from = 1 + static_cast<int>(rng() % (L - 1));
    double placed = std::numeric_limits<double>::infinity();
    for (Schedule schedule : {Schedule::gpipe, Schedule::one_f_one_b})
      placed = std::min(placed,
                        modelled_step_ms(cs.ctx, with_pipedream_cuts(cs.ctx, cut_once(L, from, schedule))));
    CHECK(placed <= best * (1 + 1e-9));
  }
}

TEST_CASE("with_pipedream_cuts keeps each group's devices, replicas and order on random chains, clusters and plans") {
  std::mt19937 rng(20261201);
  for (int trial = 0; trial < 40; ++trial) {
    const int L = 3 + static_cast<int>(rng() % 10), D = 2 + static_cast<int>(rng() % 4);
    Case cs = random_chain_case(rng, L, D);
    std::mt19937_64 walk(rng());
    const StageMoves moves(L, D, {1, 2, 4, 8}, /*replicas=*/true);
    const StagePlan plan = moves.random_plan(walk);
    const Placement p = to_placement(plan, L, rng() % 2 ? Schedule::gpipe : Schedule::one_f_one_b, "t");
    const Placement moved = with_pipedream_cuts(cs.ctx, p);
    REQUIRE_MESSAGE(validate_placement(moved, cs.g, cs.c, 8).is_ok(), validate_placement(moved, cs.g, cs.c, 8).message());
    CHECK(moved.group_device == p.group_device);
    CHECK(moved.group_replicas == p.group_replicas);
    CHECK(moved.micro_batches == p.micro_batches);
    CHECK(moved.schedule == p.schedule);
    // Still one run per group, in the same order, none emptied.
    const StagePlan runs = stage_plan_of_runs(moved);
    CHECK(runs.stage_device == plan.stage_device);
    CHECK(runs.num_stages() == plan.num_stages());
  }
}

TEST_CASE("with_pipedream_orders deals a pipeline's stages to the chain so that no boundary crosses a slow link") {
  // Three equal devices, every pair fast but d0-d2 (1 Mbps, 50 ms each way).
  // The plan d0, d2, d1 crosses it once per micro-batch each way; dealt again,
  // the first of the orders that avoid it: d0, d1, d2.
  LayerGraph g = linear_chain({16, 16, 16, 16, 16, 16});
  Cluster c = cluster_of_speeds({1.0, 1.0, 1.0});
  c.links.push_back(Link{"d0", "d2", 1, 50});
  c.links.push_back(Link{"d2", "d0", 1, 50});
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  Placement p;
  p.layer_group = {0, 0, 1, 1, 2, 2};
  p.group_device = {0, 2, 1};
  p.micro_batches = 4;
  const std::vector<Placement> orders = with_pipedream_orders(cs.ctx, p);
  REQUIRE_FALSE(orders.empty());
  const Placement& ordered = orders.front();
  CHECK(ordered.group_device == std::vector<int>{0, 1, 2});
  CHECK(ordered.layer_group == std::vector<int>{0, 0, 1, 1, 2, 2});  // equal devices: equal stages
  REQUIRE(validate_placement(ordered, cs.g, cs.c, 8).is_ok());
  SimulatorEvaluator sim = cs.evaluator();
  CHECK(sim.evaluate(ordered).step_ms < sim.evaluate(p).step_ms);
  // Its replicas and weights travel with the stage.
  p.group_replicas = {{}, {}, {}};
  p.group_replica_weights = {{}, {}, {}};
  Cluster four = c;
  four.devices.push_back(Device{"d3"});
  four.links.push_back(Link{"d3", "d0", 1, 50});
  four.links.push_back(Link{"d0", "d3", 1, 50});
  Case cs4(g, four, {test::flat_library(g, 8, 1, 1)}, 8);
  p.group_replicas[1] = {3};
  p.group_replica_weights[1] = {1, 1};
  const std::vector<Placement> copies = with_pipedream_orders(cs4.ctx, p);
  REQUIRE_FALSE(copies.empty());
  const Placement& copied = copies.front();
  REQUIRE(validate_placement(copied, cs4.g, cs4.c, 8).is_ok());
  for (int gr = 0; gr < 3; ++gr)
    if (copied.group_device[gr] == 2) {
      CHECK(copied.group_replicas[gr] == std::vector<int>{3});
      CHECK(copied.group_replica_weights[gr] == std::vector<int>{1, 1});
    }
  CHECK(copied.group_device[0] == 0);  // no neighbour of d0 on a slow link: d0 first, then d1
  CHECK(copied.group_device[1] == 1);
  // Data-parallel or one group: as it is.
  CHECK(with_pipedream_orders(cs.ctx, Placement::replicas(6, {0, 1})).empty());
  CHECK(with_pipedream_orders(cs.ctx, Placement::single_device(6, 2, 4)).empty());
  // Dealt already, at the count the objective prefers: nothing more to offer.
  CHECK(with_pipedream_orders(cs.ctx, ordered).empty());
}

// A chain of wide layers on devices of `speeds`, d0 fast but holding two of
// the layers, and a slow link d0-d2; `p` (its groups and their devices)
// crosses it. with_pipedream_orders offers orders, each valid, with no
// boundary on d0-d2, and each simulated faster than `p`.
void check_orders_fit_off_the_slow_link(const std::vector<double>& speeds,
                                        const std::vector<int>& layer_group,
                                        const std::vector<int>& devices) {
  const int L = static_cast<int>(layer_group.size());
  LayerGraph g = linear_chain(std::vector<int64_t>(L, 1024));
  Cluster c = cluster_of_speeds(speeds);
  c.links.push_back(Link{"d0", "d2", 1, 50});
  c.links.push_back(Link{"d2", "d0", 1, 50});
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  const StageMemory mem(cs.g);
  int64_t two = 0;
  for (int a = 1; a + 2 <= L; ++a) two = std::max(two, mem.bytes(a, a + 2, 8, 8));
  cs.c.devices[0].memory_mb = mib_to_hold(two);
  for (int a = 0; a + 4 <= L; ++a) REQUIRE_FALSE(mem.fits(cs.c.devices[0], a, a + 4, 8, 1, true));
  const Placement p = pipeline(layer_group, devices, 4);
  REQUIRE(check_memory(p, cs.g, cs.c, 8).is_ok());
  const std::vector<Placement> orders = with_pipedream_orders(cs.ctx, p);
  REQUIRE_FALSE(orders.empty());
  SimulatorEvaluator sim = cs.evaluator();
  for (Placement ordered : orders) {
    REQUIRE(validate_placement(ordered, cs.g, cs.c, 8).is_ok());
    const std::vector<int> chain = stage_plan_of_runs(ordered).stage_device;
    for (size_t k = 1; k < chain.size(); ++k) CHECK(chain[k - 1] + chain[k] != 2);  // d0 next to d2
    REQUIRE(recompute_where_needed(ordered, cs.g, cs.c, 8));
    CHECK(sim.evaluate(ordered).step_ms < sim.evaluate(p).step_ms);
  }
}

TEST_CASE("with_pipedream_orders ranks orders by cuts that fit where the capacity split does not") {
  // A fast device (speed 4) that holds two of the wide layers, two slow ones,
  // and a slow link d0-d2. By capacity d0 would take two thirds of the work,
  // which fits in no order; the plan d0, d2, d1 crosses the slow link. Its
  // stages dealt with their cuts placed to fit: no boundary on d0-d2.
  check_orders_fit_off_the_slow_link({4.0, 1.0, 1.0}, {0, 0, 0, 1, 1, 2, 2}, {0, 2, 1});
}

TEST_CASE("with_pipedream_orders deals six stages by cuts that fit where no order's capacity split does") {
  // As above with six devices: d0's capacity share (4 of 9) fits in no
  // order, and beyond five stages the orders were ranked by capacity alone:
  // none was offered. The plan d0, d2, d1, ... crosses the slow link; dealt
  // with cuts that fit, it does not.
  check_orders_fit_off_the_slow_link({4.0, 1.0, 1.0, 1.0, 1.0, 1.0}, {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 5},
                                     {0, 2, 1, 3, 4, 5});
}

TEST_CASE("interchangeable_classes groups devices alike in speed, memory and every link") {
  // d0, d1 and d4 alike; d2 slower; d3 as fast but with a slow link to d2;
  // d5 as fast with less memory. d4's links to the others are the default's too.
  LayerGraph g = linear_chain({16, 16, 16, 16});
  Cluster c = cluster_of_speeds({1.0, 1.0, 0.5, 1.0, 1.0, 1.0});
  for (auto& d : c.devices) d.memory_mb = 4096;
  c.devices[5].memory_mb = 2048;
  c.links.push_back(Link{"d3", "d2", 10, 5});
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  CHECK(planner_support::interchangeable_classes(cs.ctx) == std::vector<int>{0, 0, 2, 3, 0, 5});
  // A link in one direction only sets d3 apart from d0 just as well.
  Cluster one_way = cluster_of_speeds({1.0, 1.0, 1.0, 1.0});
  one_way.links.push_back(Link{"d1", "d3", 10, 5});
  Case cs1(g, one_way, {test::flat_library(g, 8, 1, 1)}, 8);
  // d1 sends slowly to d3, d3 receives slowly from d1: both stand apart; d2 is like d0.
  CHECK(planner_support::interchangeable_classes(cs1.ctx) == std::vector<int>{0, 1, 0, 3});
}

TEST_CASE("with_pipedream_orders keeps each stage's devices and gives valid plans on random chains, clusters and plans") {
  std::mt19937 rng(20261203);
  for (int trial = 0; trial < 40; ++trial) {
    const int L = 3 + static_cast<int>(rng() % 10), D = 2 + static_cast<int>(rng() % 5);
    Case cs = random_chain_case(rng, L, D);
    cs.ctx.max_micro_batches = 8;
    std::mt19937_64 walk(rng());
    const StageMoves moves(L, D, {1, 2, 4, 8}, /*replicas=*/true);
    const Placement p = to_placement(moves.random_plan(walk), L, rng() % 2 ? Schedule::gpipe : Schedule::one_f_one_b, "t");
    const std::vector<Placement> orders = with_pipedream_orders(cs.ctx, p);
    CHECK(orders.size() <= 2);
    std::multiset<std::vector<int>> before;
    for (int gr = 0; gr < p.num_groups(); ++gr) before.insert(p.devices_of_group(gr));
    for (const Placement& ordered : orders) {
      REQUIRE_MESSAGE(validate_placement(ordered, cs.g, cs.c, 8).is_ok(), validate_placement(ordered, cs.g, cs.c, 8).message());
      // The same stages' device sets, dealt to positions; one run per group, none emptied.
      std::multiset<std::vector<int>> after;
      for (int gr = 0; gr < ordered.num_groups(); ++gr) after.insert(ordered.devices_of_group(gr));
      CHECK(before == after);
      CHECK(stage_plan_of_runs(ordered).num_stages() == p.num_groups());
      for (int gr = 0; gr < ordered.num_groups(); ++gr) CHECK(ordered.micro_batches >= ordered.replica_count(gr));
    }
    if (orders.size() == 2) CHECK((orders[0].layer_group != orders[1].layer_group || orders[0].group_device != orders[1].group_device ||
                                   orders[0].micro_batches != orders[1].micro_batches));
  }
}

TEST_CASE("without_replicas keeps each replicated group on its fastest device alone, and a data-parallel plan on its fastest replica") {
  LayerGraph g = linear_chain({16, 16, 16, 16});
  const Cluster c = cluster_of_speeds({0.5, 2.0, 1.0, 0.25});
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  // Group 0 on d0 with replicas d1 (the fastest) and d3; group 1 on d2 alone.
  Placement p;
  p.layer_group = {0, 0, 1, 1};
  p.group_device = {0, 2};
  p.group_replicas = {{1, 3}, {}};
  p.group_replica_weights = {{2, 4, 1}, {}};
  p.aggregation_every = 2;
  p.micro_batches = 4;
  p.schedule = Schedule::one_f_one_b;
  const Placement dropped = without_replicas(cs.ctx, p);
  CHECK(dropped.group_device == std::vector<int>{1, 2});
  CHECK_FALSE(dropped.has_replicated_groups());
  CHECK(dropped.group_replica_weights.empty());
  CHECK(dropped.aggregation_every == 1);
  CHECK(dropped.layer_group == p.layer_group);
  CHECK(dropped.micro_batches == 4);
  CHECK(dropped.schedule == Schedule::one_f_one_b);
  CHECK(validate_placement(dropped, cs.g, cs.c, 8).is_ok());
  // Data parallelism over d0, d2 and d3: the whole model on d2, one group, not data-parallel.
  const Placement dp = without_replicas(cs.ctx, Placement::replicas(4, {0, 2, 3}));
  CHECK_FALSE(dp.is_data_parallel());
  CHECK(dp.group_device == std::vector<int>{2});
  CHECK(dp.layer_group == std::vector<int>(4, 0));
  CHECK(validate_placement(dp, cs.g, cs.c, 8).is_ok());
  // One group copied onto d0 and d1: d1 alone is left, with one micro-batch (nothing to pipeline).
  Placement copied;
  copied.layer_group = {0, 0, 0, 0};
  copied.group_device = {0};
  copied.group_replicas = {{1}};
  copied.micro_batches = 4;
  const Placement alone = without_replicas(cs.ctx, copied);
  CHECK(alone.group_device == std::vector<int>{1});
  CHECK_FALSE(alone.has_replicated_groups());
  CHECK(alone.micro_batches == 1);
  // One device and nothing replicated: one micro-batch.
  CHECK(without_replicas(cs.ctx, Placement::single_device(4, 3, 4)).micro_batches == 1);
  // Nothing replicated on several devices: unchanged.
  Placement plain = p;
  plain.group_replicas.clear();
  plain.group_replica_weights.clear();
  plain.aggregation_every = 1;
  const Placement same = without_replicas(cs.ctx, plain);
  CHECK(same.group_device == plain.group_device);
  CHECK(same.layer_group == plain.layer_group);
  CHECK(same.micro_batches == plain.micro_batches);
}

TEST_CASE("with_idle_devices copies the group with the most work per unit of speed onto each idle device, fastest first") {
  // Six equal layers; d0 and d1 speed 1 run stages of 4 and 2 layers; idle d2
  // (speed 2) and d3 (speed 1). d2 first: to the first stage (4 per unit of
  // speed against 2), which then has 4 / 3; d3 to the second (2 against 4 / 3).
  LayerGraph g = linear_chain({16, 16, 16, 16, 16, 16});
  const Cluster c = cluster_of_speeds({1.0, 1.0, 2.0, 1.0});
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  Placement p;
  p.layer_group = {0, 0, 0, 0, 1, 1};
  p.group_device = {0, 1};
  p.micro_batches = 4;
  const Placement added = with_idle_devices(cs.ctx, p);
  CHECK(added.group_device == p.group_device);
  CHECK(added.layer_group == p.layer_group);
  REQUIRE(added.group_replicas.size() == 2);
  CHECK(added.group_replicas[0] == std::vector<int>{2});
  CHECK(added.group_replicas[1] == std::vector<int>{3});
  CHECK(validate_placement(added, cs.g, cs.c, 8).is_ok());
  // Each copy needs a micro-batch: one stage on d0 with two micro-batches takes
  // d2, d1 and d3 at four, or at most two copies where two is the largest count.
  Placement one;
  one.layer_group.assign(6, 0);
  one.group_device = {0};
  one.micro_batches = 2;
  const Placement four = with_idle_devices(cs.ctx, one);
  CHECK(four.group_replicas == std::vector<std::vector<int>>{{2, 1, 3}});
  CHECK(four.micro_batches == 4);
  CHECK(validate_placement(four, cs.g, cs.c, 8).is_ok());
  PlannerContext at_most_two = cs.ctx;
  at_most_two.max_micro_batches = 2;
  const Placement two = with_idle_devices(at_most_two, one);
  CHECK(two.group_replicas == std::vector<std::vector<int>>{{2}});
  CHECK(two.micro_batches == 2);
  // Data parallelism over d0 takes every other device.
  const Placement dp = with_idle_devices(cs.ctx, Placement::replicas(6, {0}));
  CHECK(dp.is_data_parallel());
  CHECK(dp.group_device == std::vector<int>{0, 2, 1, 3});
  // Every device in use: unchanged.
  p.group_device = {0, 1};
  p.group_replicas = {{2}, {3}};
  CHECK(with_idle_devices(cs.ctx, p).group_replicas == p.group_replicas);
  // A device with less memory than the devices of the group it would join stays idle.
  Cluster small = c;
  small.devices[2].memory_mb = 0;
  small.devices[3].memory_mb = 0;
  Case tight(g, small, {test::flat_library(g, 8, 1, 1)}, 8);
  Placement plain;
  plain.layer_group = {0, 0, 0, 0, 1, 1};
  plain.group_device = {0, 1};
  plain.micro_batches = 4;
  CHECK_FALSE(with_idle_devices(tight.ctx, plain).has_replicated_groups());
  CHECK_FALSE(with_idle_devices(tight.ctx, plain, IdleDevices::or_faster_by_model).has_replicated_groups());
  // One with less memory than they have joins where asked to and the model
  // finds the step faster with it (its copy fits): d2 of 64 MiB beside d0 and
  // d1 of 4 GiB (six layers of 16 need a few KiB), twice their speed on free links.
  Cluster smaller = c;
  smaller.devices[2].memory_mb = 64;
  Case roomy_enough(g, smaller, {test::flat_library(g, 8, 1, 1)}, 8);
  REQUIRE(modelled_step_ms(roomy_enough.ctx, pipeline({0, 0, 0, 0, 0, 0}, {2}, 4)) <
          std::numeric_limits<double>::infinity());
  const Placement as_roomy = with_idle_devices(roomy_enough.ctx, plain);
  for (int gr = 0; gr < as_roomy.num_groups(); ++gr) {
    const std::vector<int> devices = as_roomy.devices_of_group(gr);
    CHECK(std::find(devices.begin(), devices.end(), 2) == devices.end());
  }
  const Placement joined = with_idle_devices(roomy_enough.ctx, plain, IdleDevices::or_faster_by_model);
  REQUIRE(joined.group_replicas.size() == 2);
  CHECK(joined.group_replicas[0] == std::vector<int>{2});
  CHECK(validate_placement(joined, roomy_enough.g, roomy_enough.c, 8).is_ok());
}

TEST_CASE(
    "with_micro_batches_by_model takes the count the model prices least, never below a stage's copies") {
  // Six equal layers copied onto two equal devices at 8 micro-batches; every
  // compute task costs 5 ms more, so one stage with nothing to pipeline is
  // fastest at the fewest micro-batches that give each copy one: 2.
  LayerGraph g = linear_chain({16, 16, 16, 16, 16, 16});
  Cluster c = cluster_of_speeds({1.0, 1.0, 1.0});
  free_default_link(c);
  Calibration cal;
  cal.task_overhead_ms = 5;
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8, cal);
  Placement copied = pipeline({0, 0, 0, 0, 0, 0}, {0}, 8);
  copied.group_replicas = {{1}};
  const Placement fewer = with_micro_batches_by_model(cs.ctx, copied);
  CHECK(fewer.micro_batches == 2);
  CHECK(modelled_step_ms(cs.ctx, fewer) < modelled_step_ms(cs.ctx, copied));
  CHECK(fewer.layer_group == copied.layer_group);
  CHECK(fewer.group_replicas == copied.group_replicas);
  CHECK(with_micro_batches_by_model(cs.ctx, fewer).micro_batches == 2);  // at its least already
  // Three copies: 4, the fewest choice that gives each one.
  copied.group_replicas = {{1, 2}};
  CHECK(with_micro_batches_by_model(cs.ctx, copied).micro_batches == 4);
  // Data parallelism has a micro-batch per copy: as it is.
  const Placement dp = Placement::replicas(6, {0, 1});
  CHECK(with_micro_batches_by_model(cs.ctx, dp).micro_batches == dp.micro_batches);
}

TEST_CASE("as_one_stage copies one stage of every layer onto each device the plan uses, fastest first") {
  LayerGraph g = linear_chain({16, 16, 16, 16, 16, 16});
  const Cluster c = cluster_of_speeds({1.0, 1.5, 2.0, 0.5});
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  // Two stages: d0 with a weighed copy on d3, then d1; d2 idle; two micro-batches.
  Placement p;
  p.layer_group = {0, 0, 0, 0, 1, 1};
  p.group_device = {0, 1};
  p.group_replicas = {{3}, {}};
  p.group_replica_weights = {{2, 1}, {}};
  p.group_recompute = {1, 0};
  p.micro_batches = 2;
  p.schedule = Schedule::interleaved_1f1b;
  const Placement merged = as_one_stage(cs.ctx, p);
  CHECK(merged.layer_group == std::vector<int>(6, 0));
  CHECK(merged.group_device == std::vector<int>{1});
  CHECK(merged.group_replicas == std::vector<std::vector<int>>{{0, 3}});
  CHECK(merged.group_replica_weights.empty());
  CHECK_FALSE(merged.recomputes(0));
  CHECK(merged.micro_batches == 4);  // a micro-batch for each of the three copies
  CHECK(merged.schedule == Schedule::one_f_one_b);
  CHECK_FALSE(merged.is_data_parallel());
  CHECK(validate_placement(merged, cs.g, cs.c, 8).is_ok());
  // With at most two micro-batches three copies cannot each get one: as it is.
  PlannerContext at_most_two = cs.ctx;
  at_most_two.max_micro_batches = 2;
  CHECK(as_one_stage(at_most_two, p).layer_group == p.layer_group);
  // Already one stage (copied or not), or data-parallel: as it is.
  Placement one = merged;
  CHECK(as_one_stage(cs.ctx, one).group_replicas == one.group_replicas);
  CHECK(as_one_stage(cs.ctx, Placement::single_device(6, 2, 4)).group_device == std::vector<int>{2});
  const Placement dp = as_one_stage(cs.ctx, Placement::replicas(6, {0, 2}));
  CHECK(dp.is_data_parallel());
  CHECK(dp.group_device == std::vector<int>{0, 2});
}

TEST_CASE("as_data_parallel copies the whole model onto each device the plan uses, fastest first, one replica each") {
  LayerGraph g = linear_chain({16, 16, 16, 16, 16, 16});
  const Cluster c = cluster_of_speeds({1.0, 1.5, 2.0, 0.5});
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  // Two stages: d0 with a copy on d3, then d1; d2 idle; eight micro-batches.
  Placement p;
  p.layer_group = {0, 0, 0, 0, 1, 1};
  p.group_device = {0, 1};
  p.group_replicas = {{3}, {}};
  p.micro_batches = 8;
  p.source = "policy";
  const Placement dp = as_data_parallel(cs.ctx, p);
  CHECK(dp.is_data_parallel());
  CHECK(dp.group_device == std::vector<int>{1, 0, 3});
  CHECK(dp.layer_group == std::vector<int>(6, 0));
  CHECK(dp.source == "policy");
  CHECK(validate_placement(dp, cs.g, cs.c, 8).is_ok());
  // One device, already data-parallel, or more devices than samples: as it is.
  CHECK_FALSE(as_data_parallel(cs.ctx, Placement::single_device(6, 2, 4)).is_data_parallel());
  CHECK(as_data_parallel(cs.ctx, Placement::replicas(6, {2, 0})).group_device == std::vector<int>{2, 0});
  Case two_samples(g, c, {test::flat_library(g, 8, 1, 1)}, 2);
  CHECK_FALSE(as_data_parallel(two_samples.ctx, p).is_data_parallel());
}

TEST_CASE("as_pipeline_of_every_device keeps each group's fastest device and cuts a stage for every other device") {
  // Six equal layers. Group 0 (layers 0-4) on d0 with a copy on d2 (speed 2),
  // group 1 (layer 5) on d1; d3 idle. Dropped copies: group 0 on d2 (5 units
  // at speed 2: 2.5 per unit of speed), group 1 on d1 (1). d0 first: group 0
  // keeps 5 * 2 / 3 = 3.33 units (layers 0-2, by each layer's midpoint) and d0
  // takes layers 3-4 (2 per unit); then d3 splits those: layer 3 stays, layer 4 goes.
  LayerGraph g = linear_chain({16, 16, 16, 16, 16, 16});
  const Cluster c = cluster_of_speeds({1.0, 1.0, 2.0, 1.0});
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  Placement p;
  p.layer_group = {0, 0, 0, 0, 0, 1};
  p.group_device = {0, 1};
  p.group_replicas = {{2}, {}};
  p.micro_batches = 2;
  const Placement staged = as_pipeline_of_every_device(cs.ctx, p);
  CHECK(staged.layer_group == std::vector<int>{0, 0, 0, 2, 3, 1});
  CHECK(staged.group_device == std::vector<int>{2, 1, 0, 3});
  CHECK_FALSE(staged.has_replicated_groups());
  CHECK(staged.micro_batches == 4);  // a micro-batch for each of the four stages
  CHECK(validate_placement(staged, cs.g, cs.c, 8).is_ok());
  // A device with two groups keeps the first; the second goes to the fastest
  // idle device (d2), then d3 takes the tail of the heaviest per unit of speed (group 0).
  const Placement twice = pipeline({0, 0, 1, 1, 2, 2}, {0, 1, 0}, 4);
  const Placement spread = as_pipeline_of_every_device(cs.ctx, twice);
  CHECK(spread.group_device == std::vector<int>{0, 1, 2, 3});
  CHECK(spread.layer_group == std::vector<int>{0, 3, 1, 1, 2, 2});
  // Every device a stage already: as it is; data-parallel: as it is.
  Placement four;
  four.layer_group = {0, 0, 1, 1, 2, 3};
  four.group_device = {3, 2, 1, 0};
  four.micro_batches = 4;
  CHECK(as_pipeline_of_every_device(cs.ctx, four).layer_group == four.layer_group);
  CHECK(as_pipeline_of_every_device(cs.ctx, Placement::replicas(6, {0, 1})).is_data_parallel());
}

TEST_CASE("without_slowest_stage merges the stage of the slowest device into its neighbour") {
  LayerGraph g = linear_chain({16, 16, 16, 16, 16, 16});
  Case cs(g, cluster_of_speeds({1.0, 0.25, 1.0, 0.5}), {test::flat_library(g, 8, 1, 1)}, 8);
  Placement p = pipeline({0, 0, 1, 1, 2, 2}, {0, 1, 2}, 4);
  // d1's stage (the middle) joins the stage before it; the groups after it move down.
  Placement out = without_slowest_stage(cs.ctx, p);
  CHECK(out.layer_group == std::vector<int>{0, 0, 0, 0, 1, 1});
  CHECK(out.group_device == std::vector<int>{0, 2});
  CHECK(out.micro_batches == 4);
  CHECK(validate_placement(out, cs.g, cs.c, 8).is_ok());
  // A first stage joins the one after it.
  p.group_device = {1, 0, 2};
  out = without_slowest_stage(cs.ctx, p);
  CHECK(out.layer_group == std::vector<int>{0, 0, 0, 0, 1, 1});
  CHECK(out.group_device == std::vector<int>{0, 2});
  // The slowest device the plan uses runs two groups, or a replicated one:
  // as it is (d3, at 0.5, is not the slowest).
  p.layer_group = {0, 0, 1, 1, 2, 2};
  p.group_device = {1, 3, 1};
  CHECK(without_slowest_stage(cs.ctx, p).group_device == p.group_device);
  p.group_device = {0, 1, 3};
  p.group_replicas = {{}, {2}, {}};
  CHECK(without_slowest_stage(cs.ctx, p).group_device == p.group_device);
  // Without d1, d3 is the slowest: its stage (the last) joins the one before it.
  p.group_device = {0, 2, 3};
  p.group_replicas.clear();
  out = without_slowest_stage(cs.ctx, p);
  CHECK(out.layer_group == std::vector<int>{0, 0, 1, 1, 1, 1});
  CHECK(out.group_device == std::vector<int>{0, 2});
  // Among equal devices none is the slowest: as it is.
  p.group_device = {0, 2, 1};
  Case equal(g, cluster_of_speeds({1.0, 1.0, 1.0}), {test::flat_library(g, 8, 1, 1)}, 8);
  CHECK(without_slowest_stage(equal.ctx, p).group_device == p.group_device);
  // Data parallel, or one group: as it is.
  CHECK(without_slowest_stage(cs.ctx, Placement::replicas(6, {0, 1})).is_data_parallel());
  CHECK(without_slowest_stage(cs.ctx, Placement::single_device(6, 1, 4)).layer_group == std::vector<int>(6, 0));
}

// The modelled step of `p` with its cuts placed for its stages.
double placed_step_ms(const PlannerContext& ctx, const Placement& p) {
  return modelled_step_ms(ctx, with_pipedream_cuts(ctx, p));
}

TEST_CASE(
    "with_fewer_stages_by_model leaves out the stage behind a slow link, not the slowest device's, and joins "
    "stages onto both devices") {
  // d1 as fast as d0 but behind slow links both ways; d2 half as fast on free links.
  LayerGraph g = linear_chain(std::vector<int64_t>(12, 4096));
  Cluster c = cluster_of_speeds({1.0, 1.0, 0.5});
  free_default_link(c);
  for (const auto& [from, to] : {std::pair{"d0", "d1"}, {"d1", "d0"}, {"d1", "d2"}, {"d2", "d1"}})
    c.links.push_back(Link{from, to, 20, 0});
  Case cs(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
  const Placement p = pipeline({0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}, {0, 1, 2}, 4);
  const Placement slowest_out = without_slowest_stage(cs.ctx, p);
  REQUIRE(slowest_out.group_device == std::vector<int>{0, 1});
  const Placement out = with_fewer_stages_by_model(cs.ctx, p);
  REQUIRE(validate_placement(out, cs.g, cs.c, 8).is_ok());
  CHECK(out.group_device == std::vector<int>{0, 2});
  CHECK(out.micro_batches == 4);
  CHECK(placed_step_ms(cs.ctx, out) < placed_step_ms(cs.ctx, slowest_out));
  CHECK(placed_step_ms(cs.ctx, out) < placed_step_ms(cs.ctx, p));
  // On free links every device is worth keeping, d0 and d1 as copies of one
  // stage (which start together) before d2's: faster in the simulator than
  // a stage each, their cuts placed either way (13.0 against 14.5).
  Cluster free = cluster_of_speeds({1.0, 1.0, 0.5});
  free_default_link(free);
  Case fast(g, free, {test::flat_library(g, 8, 1, 1)}, 8);
  const Placement kept = with_fewer_stages_by_model(fast.ctx, p);
  CHECK(kept.group_device == std::vector<int>{0, 2});
  CHECK(kept.devices_of_group(0) == std::vector<int>{0, 1});
  SimulatorEvaluator free_links = fast.evaluator();
  CHECK(free_links.evaluate(with_pipedream_cuts(fast.ctx, kept)).step_ms <
        free_links.evaluate(with_pipedream_cuts(fast.ctx, p)).step_ms);
  // Equal devices, weights too small to cost an all-reduce, activations
  // that a 100 Mbit/s link sends slowly: the two stages joined into one on
  // both devices, which sends no activations.
  LayerGraph thin = linear_chain(std::vector<int64_t>(8, 16));
  Cluster two = cluster_of_speeds({1.0, 1.0});
  two.default_link = Link{"", "", 100, 0};
  Case joined(thin, two, {test::flat_library(thin, 512, 1, 1)}, 512);
  const Placement two_stages = pipeline({0, 0, 0, 0, 1, 1, 1, 1}, {0, 1}, 4);
  const Placement one = with_fewer_stages_by_model(joined.ctx, two_stages);
  REQUIRE(validate_placement(one, joined.g, joined.c, 512).is_ok());
  CHECK(one.layer_group == std::vector<int>(8, 0));
  CHECK(one.devices_of_group(0) == std::vector<int>{0, 1});
  CHECK(placed_step_ms(joined.ctx, one) < placed_step_ms(joined.ctx, two_stages));
  // Data parallel, or one group: as it is.
  CHECK(with_fewer_stages_by_model(cs.ctx, Placement::replicas(12, {0, 1})).is_data_parallel());
  CHECK(with_fewer_stages_by_model(cs.ctx, Placement::single_device(12, 1, 4)).num_groups() == 1);
}

TEST_CASE("with_fewer_stages_by_model copies a stage onto a device that is not its neighbour") {
  // A pipeline d0, d1, d2: d0 and d2 fast, d1 half as fast; every message to
  // d2 takes 200 ms, the rest are free, and compute dwarfs one all-reduce
  // over d0 and d2. What pays is d0 and d2 copies of one stage beside d1's
  // (nothing of the pipeline's sent to d2): two stages from three that no
  // join of neighbours reaches, as d0 and d2 are not neighbours.
  LayerGraph g = linear_chain(std::vector<int64_t>(12, 16));
  Cluster c = cluster_of_speeds({1.0, 0.5, 1.0});
  free_default_link(c);
  for (const char* from : {"d0", "d1"}) c.links.push_back(Link{from, "d2", 1e6, 200});
  Case cs(g, c, {test::flat_library(g, 8, 200, 200)}, 8);
  const Placement p = pipeline({0, 0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 2}, {0, 1, 2}, 8);
  const Placement out = with_fewer_stages_by_model(cs.ctx, p);
  REQUIRE(validate_placement(out, cs.g, cs.c, 8).is_ok());
  bool d0_and_d2 = false;
  for (int gr = 0; gr < out.num_groups(); ++gr) {
    const std::vector<int> devices = out.devices_of_group(gr);
    d0_and_d2 |=
        std::count(devices.begin(), devices.end(), 0) && std::count(devices.begin(), devices.end(), 2);
  }
  CHECK(d0_and_d2);
  CHECK(out.num_groups() == 2);
  CHECK(placed_step_ms(cs.ctx, out) < placed_step_ms(cs.ctx, p));
}

TEST_CASE("with_fewer_stages_by_model finds the narrow cut of a model of 40 layers that keeps two stages") {
  // Two equal devices on a 1 Mbit/s link; 40 equal layers 1024 wide but for
  // layer 20's output, 16 wide: cut there, two stages send little and beat one
  // device; cut anywhere else they send 128 KiB a batch each way, and lose to
  // it. The narrow cut (position 21) is not among a coarse table's quantiles.
  std::vector<int64_t> widths(40, 1024);
  widths[20] = 16;
  LayerGraph g = linear_chain(widths);
  Cluster c = cluster_of_speeds({1.0, 1.0});
  c.default_link = Link{"", "", 1, 0};
  Case cs(g, c, {test::flat_library(g, 32, 10, 20)}, 32);
  std::vector<int> layer_group(40, 0);
  std::fill(layer_group.begin() + 10, layer_group.end(), 1);
  const Placement p = pipeline(layer_group, {0, 1}, 4);
  const Placement narrow = with_pipedream_cuts(cs.ctx, p);
  REQUIRE(narrow.layer_group[20] == 0);
  REQUIRE(narrow.layer_group[21] == 1);
  REQUIRE(modelled_step_ms(cs.ctx, narrow) < modelled_step_ms(cs.ctx, Placement::single_device(40, 0, 4)));
  const Placement out = with_fewer_stages_by_model(cs.ctx, p);
  CHECK(out.num_groups() == 2);
  CHECK(out.group_device == p.group_device);
}

TEST_CASE(
    "as_one_stage, as_data_parallel, without_slowest_stage, as_pipeline_of_every_device, "
    "with_fewer_stages_by_model and with_micro_batches_by_model give valid plans on random chains, clusters "
    "and plans") {
  std::mt19937 rng(20261202);
  for (int trial = 0; trial < 40; ++trial) {
    const int L = 3 + static_cast<int>(rng() % 10), D = 2 + static_cast<int>(rng() % 4);
    Case cs = random_chain_case(rng, L, D);
    std::mt19937_64 walk(rng());
    const StageMoves moves(L, D, {1, 2, 4, 8}, /*replicas=*/true);
    const Placement p = to_placement(moves.random_plan(walk), L, rng() % 2 ? Schedule::gpipe : Schedule::one_f_one_b, "t");
    std::set<int> used;
    for (int gr = 0; gr < p.num_groups(); ++gr)
      for (int d : p.devices_of_group(gr)) used.insert(d);
    const Placement merged = as_one_stage(cs.ctx, p);
    REQUIRE_MESSAGE(validate_placement(merged, cs.g, cs.c, 8).is_ok(), validate_placement(merged, cs.g, cs.c, 8).message());
    if (p.num_groups() > 1) {
      CHECK(merged.num_groups() == 1);
      const std::vector<int> copies = merged.devices_of_group(0);
      CHECK(std::set<int>(copies.begin(), copies.end()) == used);
    }
    const Placement dp = as_data_parallel(cs.ctx, p);
    REQUIRE_MESSAGE(validate_placement(dp, cs.g, cs.c, 8).is_ok(), validate_placement(dp, cs.g, cs.c, 8).message());
    if (used.size() > 1) CHECK(std::set<int>(dp.group_device.begin(), dp.group_device.end()) == used);
    const Placement fewer = without_slowest_stage(cs.ctx, p);
    REQUIRE_MESSAGE(validate_placement(fewer, cs.g, cs.c, 8).is_ok(), validate_placement(fewer, cs.g, cs.c, 8).message());
    CHECK(fewer.num_groups() >= p.num_groups() - 1);
    for (int gr = 0; gr < fewer.num_groups(); ++gr)
      CHECK(std::count(fewer.layer_group.begin(), fewer.layer_group.end(), gr) > 0);
    const Placement staged = as_pipeline_of_every_device(cs.ctx, p);
    REQUIRE_MESSAGE(validate_placement(staged, cs.g, cs.c, 8).is_ok(), validate_placement(staged, cs.g, cs.c, 8).message());
    CHECK_FALSE(staged.has_replicated_groups());
    // Every device a stage where there are layers enough; no group emptied.
    std::set<int> devices(staged.group_device.begin(), staged.group_device.end());
    CHECK(devices.size() == staged.group_device.size());
    if (L >= 2 * D) CHECK(static_cast<int>(devices.size()) == D);
    for (int gr = 0; gr < staged.num_groups(); ++gr)
      CHECK(std::count(staged.layer_group.begin(), staged.layer_group.end(), gr) > 0);
    const Placement by_model = with_fewer_stages_by_model(cs.ctx, p);
    REQUIRE_MESSAGE(validate_placement(by_model, cs.g, cs.c, 8).is_ok(),
                    validate_placement(by_model, cs.g, cs.c, 8).message());
    CHECK(by_model.num_groups() <= p.num_groups());
    CHECK(by_model.micro_batches >= p.micro_batches);  // joined copies take a micro-batch each
    for (int gr = 0; gr < by_model.num_groups(); ++gr)
      CHECK(std::count(by_model.layer_group.begin(), by_model.layer_group.end(), gr) > 0);
    if (by_model.num_groups() < p.num_groups())
      CHECK(placed_step_ms(cs.ctx, by_model) < placed_step_ms(cs.ctx, p));
    const Placement counted = with_micro_batches_by_model(cs.ctx, p);
    REQUIRE_MESSAGE(validate_placement(counted, cs.g, cs.c, 8).is_ok(),
                    validate_placement(counted, cs.g, cs.c, 8).message());
    CHECK(counted.layer_group == p.layer_group);
    CHECK(counted.group_device == p.group_device);
    CHECK(modelled_step_ms(cs.ctx, counted) <= modelled_step_ms(cs.ctx, p));
  }
}

TEST_CASE("the pipedream planner returns a placement that fits and beats or ties dp under its evaluator on a wide stage") {
  // One heavy layer in the middle: replicating it is the only way to split its work.
  LayerGraph g = linear_chain({32, 32, 32, 32});
  Cluster c;
  for (int i = 0; i < 4; ++i) c.devices.push_back(Device{"d" + std::to_string(i)});
  c.default_link.bandwidth_mbps = 10000;
  c.default_link.latency_ms = 0.01;
  LayerLibrary lib = library_skeleton(g);
  lib.batch_size = 8;
  const double ms[] = {0.1, 20, 0.1, 0.1};
  for (size_t i = 0; i < lib.rows.size(); ++i) lib.rows[i].forward_ms = lib.rows[i].backward_ms = ms[i];
  Case cs(g, c, {lib}, 8);
  SimulatorEvaluator ev = cs.evaluator();
  auto pd = plan_pipedream(cs.ctx, ev);
  REQUIRE_MESSAGE(pd.is_ok(), pd.error_message());
  CHECK(check_memory(*pd, cs.g, cs.c, 8).is_ok());
  CHECK(validate_placement(*pd, cs.g, cs.c, 8).is_ok());
  CHECK(pd->source == "pipedream");
  // Under its own objective the replicated optimum splits the heavy layer's micro-batches.
  auto best = pipedream_min_bottleneck(cs.ctx, 8);
  REQUIRE(best.is_ok());
  CHECK(best->max_replica_count() > 1);
  auto plain = dp_min_bottleneck(cs.ctx, 8);
  REQUIRE(plain.is_ok());
  CHECK(replicated_bottleneck_ms(cs.ctx, *best) < 0.5 * pipeline_bottleneck_ms(cs.ctx, *plain));
}

TEST_CASE("replication moves keep every plan a valid placement: a device used once, enough micro-batches") {
  std::mt19937_64 rng(99);
  for (int L : {1, 3, 8})
    for (int D : {1, 2, 5}) {
      const StageMoves moves(L, D, {1, 2, 4, 8}, /*replicas=*/true);
      LayerGraph g = linear_chain(std::vector<int64_t>(L, 16));
      Cluster c;
      for (int d = 0; d < D; ++d) c.devices.push_back(Device{"d" + std::to_string(d)});
      for (int n = 0; n < 20; ++n) {
        StagePlan p = moves.random_plan(rng);
        for (int walk = 0; walk < 30; ++walk) {
          MoveSet every = MoveSet::wide_with_replicas(L);
          every.split_replica = every.join_replicas = every.stage_to_replica = true;
          for (const StagePlan& q : moves.neighbours(p, every)) {
            REQUIRE(is_valid_replicated(q, L, D));
            CHECK(validate_placement(to_placement(q, L, Schedule::gpipe, "t"), g, c, 8).is_ok());
          }
          p = moves.random_neighbour(p, rng);
          REQUIRE(is_valid_replicated(p, L, D));
          Placement pl = to_placement(p, L, Schedule::one_f_one_b, "t");
          REQUIRE_MESSAGE(validate_placement(pl, g, c, 8).is_ok(), validate_placement(pl, g, c, 8).message());
          // The placement's runs give the plan back, replicas included.
          StagePlan back = stage_plan_of_runs(pl);
          CHECK(back.stage_begin == p.stage_begin);
          CHECK(back.stage_device == p.stage_device);
          for (int k = 0; k < p.num_stages(); ++k) CHECK(back.devices(k) == p.devices(k));
        }
      }
    }
}

TEST_CASE("replication moves: replicate onto each unused device, drop each replica, never fewer micro-batches than replicas") {
  const StageMoves moves(6, 4, {1, 2, 4});
  StagePlan p;
  p.stage_begin = {0, 3};
  p.stage_device = {2, 0};
  p.micro_batches = 2;
  const MoveSet only = only_move(&MoveSet::replicate);
  const auto reps = moves.neighbours(p, only);
  REQUIRE(reps.size() == 4);  // 2 stages x unused devices 1 and 3
  CHECK(reps[0].devices(0) == std::vector<int>{2, 1});
  CHECK(reps[1].devices(0) == std::vector<int>{2, 3});
  CHECK(reps[3].devices(1) == std::vector<int>{0, 3});
  // With 2 micro-batches, a stage of 2 replicas may not grow, nor the count drop to 1.
  StagePlan two = reps[0];
  MoveSet grow_or_step = only;
  grow_or_step.micro_batches = true;
  for (const StagePlan& q : moves.neighbours(two, grow_or_step)) {
    CHECK(q.replica_count(0) == 2);
    CHECK(q.micro_batches >= 2);
  }
  MoveSet drop = only;
  drop.replicate = false;
  drop.drop_replica = true;
  const auto dropped = moves.neighbours(two, drop);
  REQUIRE(dropped.size() == 1);
  CHECK(dropped[0].max_replica_count() == 1);
  // Without the replica moves asked for, no neighbour is replicated.
  for (const StagePlan& q : moves.neighbours(p, MoveSet::wide(6))) CHECK(q.max_replica_count() == 1);
}

TEST_CASE("replication moves: a replica moves to every other stage that has micro-batches to spare for it") {
  const StageMoves moves(6, 5, {1, 2, 4});
  StagePlan p;
  p.stage_begin = {0, 2, 4};
  p.stage_device = {2, 0, 4};
  p.stage_replicas = {{1, 3}, {}, {}};
  p.micro_batches = 4;
  const MoveSet only = only_move(&MoveSet::move_replica);
  const auto moved = moves.neighbours(p, only);
  REQUIRE(moved.size() == 4);  // replicas 1 and 3 of stage 0, each to stage 1 or 2
  CHECK(moved[0].devices(0) == std::vector<int>{2, 3});
  CHECK(moved[0].devices(1) == std::vector<int>{0, 1});
  CHECK(moved[1].devices(2) == std::vector<int>{4, 1});
  CHECK(moved[3].devices(0) == std::vector<int>{2, 1});
  CHECK(moved[3].devices(2) == std::vector<int>{4, 3});
  for (const StagePlan& q : moved) {
    CHECK(q.stage_begin == p.stage_begin);
    CHECK(q.micro_batches == 4);
    int replicas = 0;
    for (int k = 0; k < q.num_stages(); ++k) replicas += q.replica_count(k);
    CHECK(replicas == 5);  // no device given up or added
  }
  // With 2 micro-batches, stage 1 may take one replica but not a second.
  StagePlan tight = moved[0];
  tight.micro_batches = 2;
  for (const StagePlan& q : moves.neighbours(tight, only)) CHECK(q.replica_count(1) <= 2);
  // The random form keeps the same invariants.
  const StageMoves random_moves(6, 5, {1, 2, 4}, true);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    StagePlan q = random_moves.random_neighbour(p, rng);
    for (int k = 0; k < q.num_stages(); ++k) CHECK(q.replica_count(k) <= q.micro_batches);
  }
}

TEST_CASE("replication moves: each device of a replicated stage takes half its layers, the rest copied") {
  const StageMoves moves(8, 4, {1, 2, 4});
  StagePlan p;  // one stage of eight layers on 2, 0 and 3; device 1 unused
  p.stage_begin = {0};
  p.stage_device = {2};
  p.stage_replicas = {{0, 3}};
  p.micro_batches = 4;
  const auto split = moves.neighbours(p, only_move(&MoveSet::split_replica));
  REQUIRE(split.size() == 6);  // three devices x either half
  // Device 2 (the stage's own) alone on the second half, then on the first.
  CHECK(split[0].stage_begin == std::vector<int>{0, 4});
  CHECK(split[0].devices(0) == std::vector<int>{0, 3});
  CHECK(split[0].devices(1) == std::vector<int>{2});
  CHECK(split[1].stage_begin == std::vector<int>{0, 4});
  CHECK(split[1].devices(0) == std::vector<int>{2});
  CHECK(split[1].devices(1) == std::vector<int>{0, 3});
  CHECK(split[5].devices(0) == std::vector<int>{3});
  CHECK(split[5].devices(1) == std::vector<int>{2, 0});
  for (const StagePlan& q : split) {
    CHECK(q.micro_batches == 4);
    CHECK_FALSE(q.uses_device(1));  // no device added
    CHECK(q.replica_count(0) + q.replica_count(1) == 3);
  }
  // A stage of one device, or of one layer, has nothing to split.
  StagePlan plain = p;
  plain.stage_replicas.clear();
  CHECK(moves.neighbours(plain, only_move(&MoveSet::split_replica)).empty());
  const StageMoves one_layer(1, 4, {1, 2, 4});
  StagePlan tiny = p;
  CHECK(one_layer.neighbours(tiny, only_move(&MoveSet::split_replica)).empty());
}

TEST_CASE("replication moves: two neighbouring stages join into one on all their devices") {
  const StageMoves moves(9, 5, {1, 2, 4});
  StagePlan p;  // layers 0-2 on 2, 3-5 on 0 and 1, 6-8 on 4
  p.stage_begin = {0, 3, 6};
  p.stage_device = {2, 0, 4};
  p.stage_replicas = {{}, {1}, {}};
  p.micro_batches = 4;
  const auto joined = moves.neighbours(p, only_move(&MoveSet::join_replicas));
  REQUIRE(joined.size() == 2);
  CHECK(joined[0].stage_begin == std::vector<int>{0, 6});
  CHECK(joined[0].devices(0) == std::vector<int>{2, 0, 1});
  CHECK(joined[0].devices(1) == std::vector<int>{4});
  CHECK(joined[1].stage_begin == std::vector<int>{0, 3});
  CHECK(joined[1].devices(1) == std::vector<int>{0, 1, 4});
  // Three devices on one stage need three micro-batches.
  StagePlan two = p;
  two.micro_batches = 2;
  CHECK(moves.neighbours(two, only_move(&MoveSet::join_replicas)).empty());
  // Splitting a joined stage's device off again is among its neighbours: the moves undo each other.
  const StageMoves halves(6, 2, {1, 2, 4});
  StagePlan pair;
  pair.stage_begin = {0, 3};
  pair.stage_device = {0, 1};
  pair.micro_batches = 2;
  const auto copied = halves.neighbours(pair, only_move(&MoveSet::join_replicas));
  REQUIRE(copied.size() == 1);
  bool undone = false;
  for (const StagePlan& q : halves.neighbours(copied[0], only_move(&MoveSet::split_replica)))
    undone = undone || (q.stage_begin == pair.stage_begin && q.stage_device == pair.stage_device &&
                        q.max_replica_count() == 1);
  CHECK(undone);
}

TEST_CASE("replication moves: a stage's one device becomes a replica of a stage that is not its neighbour") {
  const StageMoves moves(8, 5, {1, 2, 4});
  StagePlan p;  // layers 0-1 on 3, 2-3 on 0 and 1, 4-5 on 2, 6-7 on 4
  p.stage_begin = {0, 2, 4, 6};
  p.stage_device = {3, 0, 2, 4};
  p.stage_replicas = {{}, {1}, {}, {}};
  p.micro_batches = 4;
  const auto made = moves.neighbours(p, only_move(&MoveSet::stage_to_replica));
  // Stages 0, 2 and 3 have one device each; each may join any stage but the
  // one its layers go to (that is join_replicas' move): 2 + 2 + 2.
  REQUIRE(made.size() == 6);
  // Stage 0's device onto stage 2: its layers go to its successor, the first stage now.
  CHECK(made[0].stage_begin == std::vector<int>{0, 4, 6});
  CHECK(made[0].devices(0) == std::vector<int>{0, 1});
  CHECK(made[0].devices(1) == std::vector<int>{2, 3});
  CHECK(made[1].devices(2) == std::vector<int>{4, 3});
  // Stage 2's device onto stage 0: its layers go to stage 1.
  CHECK(made[2].stage_begin == std::vector<int>{0, 2, 6});
  CHECK(made[2].devices(0) == std::vector<int>{3, 2});
  CHECK(made[2].devices(1) == std::vector<int>{0, 1});
  // Stage 3's device onto stage 1: three replicas, within 4 micro-batches.
  CHECK(made[5].stage_begin == std::vector<int>{0, 2, 4});
  CHECK(made[5].devices(1) == std::vector<int>{0, 1, 4});
  for (const StagePlan& q : made) {
    CHECK(q.num_stages() == 3);
    CHECK(q.micro_batches == 4);
    CHECK(is_valid_replicated(q, 8, 5));
  }
  // With 2 micro-batches, stage 1 (two devices already) takes no third.
  StagePlan tight = p;
  tight.micro_batches = 2;
  for (const StagePlan& q : moves.neighbours(tight, only_move(&MoveSet::stage_to_replica)))
    CHECK(q.max_replica_count() <= 2);
  // Two stages: a device can only join the stage its layers go to.
  StagePlan two;
  two.stage_begin = {0, 4};
  two.stage_device = {0, 1};
  two.micro_batches = 4;
  CHECK(moves.neighbours(two, only_move(&MoveSet::stage_to_replica)).empty());
}

TEST_CASE("pipelearn: clients replicate the first layers, the fastest device serves the rest") {
  LayerGraph g = linear_chain({256, 64, 256, 256, 10});
  Cluster c;
  c.devices = {Device{"server", "cpu", 1, 4096, 1.0}, Device{"c1", "cpu", 1, 1024, 0.25},
               Device{"c2", "cpu", 1, 1024, 0.25}, Device{"c3", "cpu", 1, 1024, 0.25}};
  for (const char* client : {"c1", "c2", "c3"}) {
    c.links.push_back(Link{client, "server", 20, 1});  // slow uplink
    c.links.push_back(Link{"server", client, 80, 1});
  }
  LayerLibrary lib = test::flat_library(g, 16, 2, 2);
  Case cs(g, c, {lib}, 16);
  SimulatorEvaluator ev = cs.evaluator();
  auto p = plan_pipelearn(cs.ctx, ev);
  REQUIRE_MESSAGE(p.is_ok(), p.error_message());
  CHECK(p->source == "pipelearn");
  REQUIRE(p->num_groups() == 2);
  CHECK(p->group_device[1] == 0);  // the server
  CHECK(p->devices_of_group(0).size() == 3);
  CHECK(p->micro_batches >= 3);
  CHECK(p->layer_group.front() == 0);
  CHECK(p->layer_group.back() == 1);
  CHECK(validate_placement(*p, cs.g, cs.c, 16).is_ok());
  CHECK(check_memory(*p, cs.g, cs.c, 16).is_ok());
  // One device: no clients, an error that says so.
  Cluster one;
  one.devices = {Device{"only"}};
  Case single(g, one, {lib}, 16);
  SimulatorEvaluator ev1 = single.evaluator();
  auto none = plan_pipelearn(single.ctx, ev1);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.error_message().find("client") != std::string::npos);
}

// Simulates ~50 plans of each of 25 random small cases (random contiguous and
// non-contiguous, replicated walks of the move generator, dp, pipedream,
// single, BSP) and checks the bound against every one that runs; returns how
// many ran. Each synchronous plan is held to synchronous_ms; asynchronous
// ones (hogwild, the walks' plans averaged every 3 steps) to ms.
// `shares_bind`: the cases whose bound is the shares term;
// `synchronous_above`: those whose synchronous bound is above the plain one.
enum class Squeeze {
  none,              // narrow layers (8-256 wide), 4 GiB devices, the random cluster's links
  memory_and_links,  // wide layers (512-2048), memories around the model's training state (some
                     // devices cannot hold it whole, so the shares' link caps apply), 0.1-20 Mbit/s
  links,             // wide layers, 4 GiB devices (each holds the model), 0.001-2000 Mbit/s
};
int check_bound_on_random_cases(uint32_t seed, Squeeze squeeze, int* shares_bind = nullptr,
                                int* synchronous_above = nullptr) {
  const bool wide = squeeze != Squeeze::none, tight = squeeze == Squeeze::memory_and_links;
  std::mt19937 rng(seed);
  int checked = 0;
  for (int trial = 0; trial < 25; ++trial) {
    const bool branches = trial % 3 == 0;
    LayerGraph g;
    if (branches) {
      g = *zoo_model("tiny_inception");
    } else {
      std::vector<int64_t> widths;
      const int L = 2 + static_cast<int>(rng() % 6);
      for (int i = 0; i < L; ++i) widths.push_back(wide ? 512 << (rng() % 3) : 8 << (rng() % 6));
      g = linear_chain(widths);
    }
    const int64_t batch = 4 << (rng() % 3);
    // Profiles at two batch sizes (the larger sometimes below the batch: extrapolated).
    std::vector<LayerLibrary> libs = {random_library(rng, g, 2), random_library(rng, g, 4 + rng() % 4)};
    for (size_t i = 0; i < libs[1].rows.size(); ++i) {
      libs[1].rows[i].forward_ms += libs[0].rows[i].forward_ms;
      libs[1].rows[i].backward_ms += libs[0].rows[i].backward_ms;
    }
    Calibration cal;
    if (rng() % 2) {
      cal = default_calibration();
      cal.backward_extra = 0.1 * (rng() % 3);
      cal.step_overhead_ms = 0.5 * (rng() % 3);
      cal.concurrency_slowdown = 0.05 * (rng() % 3);
      cal.first_task_overhead_ms = 0.3;
      cal.update_ms_per_param_mb = 0.1;
    }
    const int D = 1 + static_cast<int>(rng() % 4);
    Cluster cluster = random_cluster(rng, D);
    int64_t need_mb = 0;  // the whole model's state and one sample's activations
    for (int l = 0; l < static_cast<int>(g.layers.size()); ++l)
      need_mb += training_state_bytes(g.layers[l].param_bytes()) + kept_bytes_per_sample(g, l);
    need_mb >>= 20;
    for (Device& d : cluster.devices)
      d.memory_mb = tight ? std::max<int64_t>(1, need_mb * (1 + static_cast<int64_t>(rng() % 12)) / 10) : 4096;
    if (wide) {
      const double unit = tight ? 0.1 : std::pow(10.0, -3.0 + static_cast<double>(rng() % 5));
      for (Link& link : cluster.links) link.bandwidth_mbps = unit * (1 + rng() % 200);
    }
    Case cs(g, cluster, libs, batch, cal);
    for (int d = 0; d < D; ++d) cal.device_factor.push_back(0.8 + 0.1 * (rng() % 4));
    cs.cost = cs.cost.with_calibration(cal);
    auto bound = step_lower_bound(cs.g, cs.c, cs.cost, batch);
    if (tight && !bound.is_ok()) continue;  // a layer no device holds: the error has its own test
    REQUIRE_MESSAGE(bound.is_ok(), bound.error_message());
    CHECK(bound->ms > 0);
    if (shares_bind && bound->shares_ms > std::max(bound->work_ms, bound->chain_ms)) ++*shares_bind;
    CHECK(bound->synchronous_ms >= bound->ms);
    if (synchronous_above && bound->synchronous_ms > bound->ms * (1 + 1e-9)) ++*synchronous_above;
    SimulatorEvaluator ev = cs.evaluator();
    std::vector<Placement> plans = random_placements(cs.ctx, 25);
    // Replicated pipelines from the replication moves, and whole-model data parallelism.
    std::mt19937_64 walk(trial);
    const StageMoves moves(static_cast<int>(g.layers.size()), D, cs.ctx.micro_batch_choices(), true);
    StagePlan p = moves.random_plan(walk);
    for (int n = 0; n < 25; ++n) {
      p = moves.random_neighbour(p, walk);
      plans.push_back(to_placement(p, static_cast<int>(g.layers.size()), Schedule::one_f_one_b, "walk"));
    }
    for (const std::string& name : {"dp", "pipedream", "single"})
      if (auto planned = run_planner(name, cs.ctx, ev); planned) plans.push_back(*planned);
    // One to three groups in layer order, each replicated on devices 0 and 1
    // and some others, in a random ring order: two devices run every layer.
    for (int n = 0; D >= 2 && n < 6; ++n) {
      const int L = static_cast<int>(g.layers.size()), groups = 1 + n % 3;
      Placement pl;
      pl.source = "two whole devices";
      pl.micro_batches = static_cast<int>(batch);
      for (int l = 0; l < L; ++l) pl.layer_group.push_back(std::min(groups - 1, l * groups / L));
      for (int k = 0; k < groups; ++k) {
        std::vector<int> ring = {0, 1};
        for (int d = 2; d < D; ++d)
          if (walk() % 2) ring.push_back(d);
        std::shuffle(ring.begin(), ring.end(), walk);
        pl.group_device.push_back(ring[0]);
        pl.group_replicas.emplace_back(ring.begin() + 1, ring.end());
      }
      plans.push_back(pl);
    }
    for (size_t k = 0, walks = 0, n = plans.size(); k < n; ++k)  // every fifth walk, averaged every 3 steps
      if (plans[k].source == "walk" && walks++ % 5 == 0) {
        plans.push_back(plans[k]);
        plans.back().aggregation_every = 3;
      }
    for (const Placement& pl : plans) {
      StepReport r = ev.evaluate(pl);
      if (!r.ok) continue;
      const double held_to = bound_for(*bound, pl);
      CHECK(held_to == (pl.aggregation_every == 1 ? bound->synchronous_ms : bound->ms));
      if (pl.source == "two whole devices" && pl.aggregation_every == 1)
        CHECK(bound->allreduce_ms <= r.step_ms * (1 + 1e-9));
      CHECK_MESSAGE(held_to <= r.step_ms * (1 + 1e-9),
                    "trial " << trial << ": bound " << held_to << " > step " << r.step_ms << " (" << pl.source
                             << ", aggregation_every " << pl.aggregation_every << ")");
      ++checked;
    }
    std::vector<int> all(D);
    for (int d = 0; d < D; ++d) all[d] = d;
    for (int R = 1; R <= D; ++R) {
      const std::vector<int> replicas(all.begin(), all.begin() + R);
      StepReport r = simulate_data_parallel(cs.g, cs.c, cs.cost, batch, replicas);
      if (r.ok) {
        CHECK_MESSAGE(bound->synchronous_ms <= r.step_ms * (1 + 1e-9), "trial " << trial << ": bsp on " << R);
        ++checked;
      }
      StepReport hogwild = simulate_data_parallel(cs.g, cs.c, cs.cost, batch, replicas, false);
      if (hogwild.ok) {
        CHECK(bound_for(*bound, Placement::replicas(static_cast<int>(g.layers.size()), replicas,
                                                    DataParallelMode::hogwild)) == bound->ms);
        CHECK_MESSAGE(bound->ms <= hogwild.step_ms * (1 + 1e-9), "trial " << trial << ": hogwild on " << R);
        ++checked;
      }
    }
  }
  return checked;
}

TEST_CASE("the lower bound is at most every plan's simulated step on random small cases") {
  CHECK(check_bound_on_random_cases(5150, Squeeze::none) > 500);
}

TEST_CASE("the lower bound is at most every plan's simulated step where devices cannot hold the model and links are slow") {
  int shares_bind = 0;
  for (uint32_t seed : {7, 71, 711})
    CHECK(check_bound_on_random_cases(seed, Squeeze::memory_and_links, &shares_bind) > 150);
  MESSAGE("the shares term is the bound in " << shares_bind << " of 75 cases");
  CHECK(shares_bind >= 3);  // the caps are exercised, not only the plain terms
}

// g on devices a and b, linked both ways at `mbps`, every layer 1 + 1 ms for the batch of 8.
Case pair_behind_link(const LayerGraph& g, const Device& a, const Device& b, double mbps) {
  Cluster c;
  c.devices = {a, b};
  c.links = {Link{a.name, b.name, mbps, 0}, Link{b.name, a.name, mbps, 0}};
  return Case(g, c, {test::flat_library(g, 8, 1, 1)}, 8);
}

TEST_CASE("the bound's shares: a device that cannot hold the model, behind a slow link, adds little") {
  // Four 512 x 512 layers after a 16 x 512 one (~3 MB of state each); "big"
  // holds them all, "small" one; between them 0.01 Mbit/s, so whatever part
  // small runs must cross it.
  LayerGraph g = linear_chain({512, 512, 512, 512, 512});
  const Device big{"big", "cpu", 1, 256}, small{"small", "cpu", 1, 4};
  Case cs = pair_behind_link(g, big, small, 0.01);
  auto bound = step_lower_bound(cs.g, cs.c, cs.cost, 8);
  REQUIRE_MESSAGE(bound.is_ok(), bound.error_message());
  SimulatorEvaluator ev = cs.evaluator();
  const StepReport alone = ev.evaluate(Placement::single_device(static_cast<int>(g.layers.size()), 0, 1));
  REQUIRE(alone.ok);
  // The plain work term splits the batch's compute over both devices; the
  // shares leave small almost nothing, so the bound is nearly big alone.
  CHECK(bound->work_ms < 0.6 * alone.step_ms);
  CHECK(bound->shares_ms > 0.95 * alone.step_ms);
  CHECK(bound->ms <= alone.step_ms * (1 + 1e-9));
  // A fast link lifts the cap: the shares term falls back towards the plain work.
  Case fast = pair_behind_link(g, big, small, 1e6);
  auto loose = step_lower_bound(fast.g, fast.c, fast.cost, 8);
  REQUIRE(loose.is_ok());
  CHECK(loose->shares_ms < 0.9 * bound->shares_ms);
}

TEST_CASE(
    "the lower bound is at most every plan's simulated step behind slow links: the synchronous bound rises") {
  int synchronous_above = 0;
  for (uint32_t seed = 2026; seed < 2046; ++seed)
    CHECK(check_bound_on_random_cases(seed, Squeeze::links, nullptr, &synchronous_above) > 150);
  MESSAGE("the synchronous bound is above the plain one in " << synchronous_above << " of 500 cases");
  CHECK(synchronous_above >= 50);  // its terms are exercised, not only the plain ones
}

TEST_CASE("the synchronous bound: behind a slow link a second device helps only asynchronous replicas") {
  // Four equal layers, 2 ms each for the batch of 8 on either device, and
  // 0.01 Mbit/s between the two: a pipeline's activations or an allreduce of
  // any layer's 16 KiB would take seconds.
  LayerGraph g = linear_chain({64, 64, 64, 64});
  Case cs = pair_behind_link(g, Device{"a"}, Device{"b"}, 0.01);
  auto bound = step_lower_bound(cs.g, cs.c, cs.cost, 8);
  REQUIRE_MESSAGE(bound.is_ok(), bound.error_message());
  SimulatorEvaluator ev = cs.evaluator();
  const StepReport alone = ev.evaluate(Placement::single_device(4, 0, 1));
  REQUIRE(alone.ok);
  CHECK(alone.step_ms == doctest::Approx(8));
  // Both devices can hold the model, so the plain terms split the batch over them.
  CHECK(bound->ms == doctest::Approx(4));
  // A synchronous plan cannot: the bound is one device's step.
  CHECK(bound->synchronous_ms > 0.98 * alone.step_ms);
  CHECK(bound->synchronous_ms <= alone.step_ms);
  CHECK(bound_for(*bound, Placement::replicas(4, {0, 1})) == bound->synchronous_ms);
  // Asynchronous replicas can, which is why `ms` stays the bound for them.
  const StepReport hogwild = simulate_data_parallel(cs.g, cs.c, cs.cost, 8, {0, 1}, false);
  REQUIRE(hogwild.ok);
  CHECK(hogwild.step_ms < bound->synchronous_ms);
  CHECK(bound->ms <= hogwild.step_ms * (1 + 1e-9));
  CHECK(bound_for(*bound, Placement::replicas(4, {0, 1}, DataParallelMode::hogwild)) == bound->ms);
  // A fast link costs a pipeline or replicas little: the two bounds meet.
  Case fast = pair_behind_link(g, Device{"a"}, Device{"b"}, 1e6);
  auto loose = step_lower_bound(fast.g, fast.c, fast.cost, 8);
  REQUIRE(loose.is_ok());
  CHECK(loose->synchronous_ms == doctest::Approx(loose->ms));
}

TEST_CASE("the lower bound is tight for one device and one micro-batch without overheads") {
  LayerGraph g = linear_chain({16, 16, 16});
  Cluster c;
  c.devices = {Device{"only"}};
  LayerLibrary lib = test::flat_library(g, 8, 1, 1);
  Case cs(g, c, {lib}, 8);
  auto bound = step_lower_bound(cs.g, cs.c, cs.cost, 8);
  REQUIRE(bound.is_ok());
  SimulatorEvaluator ev = cs.evaluator();
  CHECK(bound->ms == doctest::Approx(ev.evaluate(Placement::single_device(3, 0, 1)).step_ms));
  CHECK(bound->ms == doctest::Approx(6));
  CHECK(gap_to_bound(9, bound->ms) == doctest::Approx(0.5));
}

TEST_CASE("a layer no device can hold: the bound and every planner say which layer and which device") {
  LayerGraph g = linear_chain({4096, 4096, 10});
  Cluster c;
  c.devices = {Device{"small", "cpu", 1, 2}, Device{"smaller", "cpu", 1, 1}};
  LayerLibrary lib = test::flat_library(g, 8, 1, 1);
  Case cs(g, c, {lib}, 8);
  auto bound = step_lower_bound(cs.g, cs.c, cs.cost, 8);
  REQUIRE_FALSE(bound.is_ok());
  CHECK(bound.error_message().find("layer 'fc1'") != std::string::npos);
  CHECK(bound.error_message().find("'small'") != std::string::npos);
  SimulatorEvaluator ev = cs.evaluator();
  for (const std::string& name : {"dp", "pipedream", "anneal", "random"}) {
    auto p = run_planner(name, cs.ctx, ev);
    REQUIRE_FALSE(p.is_ok());
    CHECK_MESSAGE(p.error_message().find("'small' has memory_mb 2") != std::string::npos, name << ": " << p.error_message());
  }
}

TEST_CASE("layers that only one device holds, too many for it together: the bound says which layers and which device") {
  // fc1 and fc2 (512 x 512) keep 3 MiB of weights, gradients and momentum each;
  // "big" holds either one but not both, "small" neither.
  LayerGraph g = linear_chain({512, 512, 512, 10});
  Cluster c;
  c.devices = {Device{"small", "cpu", 1, 2}, Device{"big", "cpu", 1, 5}};
  LayerLibrary lib = test::flat_library(g, 8, 1, 1);
  Case cs(g, c, {lib}, 8);
  auto bound = step_lower_bound(cs.g, cs.c, cs.cost, 8);
  REQUIRE_FALSE(bound.is_ok());
  const std::string why = bound.error_message();
  CHECK_MESSAGE(why.find("'fc1'") != std::string::npos, why);
  CHECK(why.find("'fc2'") != std::string::npos);
  CHECK(why.find("only on 'big'") != std::string::npos);
  CHECK(why.find("memory_mb 5") != std::string::npos);
  SimulatorEvaluator ev = cs.evaluator();
  CHECK_FALSE(run_planner("exhaustive", cs.ctx, ev).is_ok());
  // With room for both on big, the bound stands and a placement fits.
  cs.c.devices[1].memory_mb = 16;
  Case roomy(g, cs.c, {lib}, 8);
  REQUIRE(step_lower_bound(roomy.g, roomy.c, roomy.cost, 8).is_ok());
  SimulatorEvaluator ev2 = roomy.evaluator();
  CHECK(run_planner("exhaustive", roomy.ctx, ev2).is_ok());
}

TEST_CASE("a model larger than the whole cluster: the bound says so before any search") {
  LayerGraph g = linear_chain({512, 512, 512, 512, 512, 512, 10});  // five 3 MiB layers, each fits any device
  Cluster c;
  c.devices = {Device{"a", "cpu", 1, 5}, Device{"b", "cpu", 1, 5}, Device{"c", "cpu", 1, 5}};
  LayerLibrary lib = test::flat_library(g, 8, 1, 1);
  Case cs(g, c, {lib}, 8);
  auto bound = step_lower_bound(cs.g, cs.c, cs.cost, 8);
  REQUIRE_FALSE(bound.is_ok());
  CHECK_MESSAGE(bound.error_message().find("the model's 7 layers") == 0, bound.error_message());
  CHECK(bound.error_message().find("memory_mb 15 together") != std::string::npos);
}

TEST_CASE("the bound refuses only problems no placement fits (random chains and clusters against exhaustive search)") {
  std::mt19937 rng(41);
  const int64_t widths[] = {16, 128, 256, 512, 768};
  int refused = 0, crowded = 0, placed = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int64_t> w;
    const int L = 3 + static_cast<int>(rng() % 4);
    for (int i = 0; i < L; ++i) w.push_back(widths[rng() % 5]);
    LayerGraph g = linear_chain(w);
    Cluster c;
    const int D = 2 + static_cast<int>(rng() % 2);
    for (int d = 0; d < D; ++d) c.devices.push_back(Device{"d" + std::to_string(d), "cpu", 1, 1 + static_cast<int64_t>(rng() % 10)});
    LayerLibrary lib = test::flat_library(g, 8, 1, 1);
    Case cs(g, c, {lib}, 8);
    auto bound = step_lower_bound(cs.g, cs.c, cs.cost, 8);
    SimulatorEvaluator ev = cs.evaluator();
    auto best = run_planner("exhaustive", cs.ctx, ev);
    if (!bound) {
      ++refused;
      crowded += bound.error_message().find("optimizer state alone") != std::string::npos;
      CHECK_MESSAGE(!best.is_ok(), bound.error_message());
    } else {
      placed += best.is_ok();
    }
  }
  MESSAGE(refused << " refused (" << crowded << " for devices too small together), " << placed << " placed of 300");
  CHECK(crowded >= 8);
  CHECK(placed >= 10);
}
