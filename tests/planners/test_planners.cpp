// Classical planners: the DP against exhaustive search, memory limits, errors.
#include <doctest/doctest.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "model/layer_library.h"
#include "planners/planner_support.h"
#include "planners/planners.h"
#include "simulator/cost_model.h"
#include "simulator/simulator_evaluator.h"
#include "tests/model/linear_chain.h"
#include "tests/planners/memory_tight.h"

using namespace tapp;

namespace {

using test::linear_chain;

LayerLibrary library(const LayerGraph& g, int64_t batch, const std::vector<double>& fwd_ms) {
  LayerLibrary lib = library_skeleton(g);
  lib.batch_size = batch;
  for (size_t i = 0; i < lib.rows.size(); ++i) {
    lib.rows[i].forward_ms = fwd_ms[i];
    lib.rows[i].backward_ms = 2 * fwd_ms[i];
  }
  return lib;
}

Cluster cluster(const std::vector<double>& speeds, double bandwidth_mbps = 1000, double latency_ms = 0.01) {
  Cluster c;
  for (size_t i = 0; i < speeds.size(); ++i) {
    Device d;
    d.name = "d" + std::to_string(i);
    d.speed = speeds[i];
    c.devices.push_back(d);
  }
  c.default_link.bandwidth_mbps = bandwidth_mbps;
  c.default_link.latency_ms = latency_ms;
  return c;
}

struct Setup {
  LayerGraph g;
  Cluster c;
  CostModel cost;
  PlannerContext ctx;
  Setup(LayerGraph graph, Cluster cl, const LayerLibrary& lib, int64_t batch)
      : g(std::move(graph)), c(std::move(cl)), cost(*CostModel::build(g, c, lib)) {
    ctx.graph = &g;
    ctx.cluster = &c;
    ctx.cost = &cost;
    ctx.batch_size = batch;
    ctx.budget = 60;
  }
  SimulatorEvaluator evaluator() const { return SimulatorEvaluator(g, c, cost, ctx.batch_size); }
};

Setup small_setup(const std::vector<double>& speeds) {
  LayerGraph g = linear_chain({64, 64, 256, 32, 10});
  return Setup(g, cluster(speeds), library(g, 8, {1, 2, 4, 1, 0.5}), 8);
}

}  // namespace

TEST_CASE("the DP's minimum bottleneck equals exhaustive search on small chains") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    int L = 3 + static_cast<int>(rng() % 5);
    int D = 2 + static_cast<int>(rng() % 2);
    std::vector<int64_t> widths;
    std::vector<double> ms;
    for (int i = 0; i < L; ++i) {
      widths.push_back(8 << (rng() % 6));
      ms.push_back(0.1 + (rng() % 100) / 10.0);
    }
    std::vector<double> speeds;
    for (int d = 0; d < D; ++d) speeds.push_back(0.25 + (rng() % 4) * 0.25);
    LayerGraph g = linear_chain(widths);
    Cluster c = cluster(speeds, 1.0 + rng() % 50, 0.01 * (rng() % 5));
    // Asymmetric links between some pairs.
    c.links.push_back(Link{"d0", "d1", 0.5 + rng() % 10, 0.1});
    c.links.push_back(Link{"d1", "d0", 20.0 + rng() % 100, 0.0});
    Setup s(g, c, library(g, 16, ms), 16);
    for (int m : {1, 2, 4})
      for (int stages : {0, 1, 2}) {
        auto dp = dp_min_bottleneck(s.ctx, m, stages);
        auto ex = exhaustive_min_bottleneck(s.ctx, m, stages);
        REQUIRE(dp.is_ok() == ex.is_ok());
        if (!dp) continue;
        CHECK(pipeline_bottleneck_ms(s.ctx, *dp) == doctest::Approx(pipeline_bottleneck_ms(s.ctx, *ex)));
        if (stages > 0) CHECK(static_cast<int>(dp->stage_begin.size()) == stages);
      }
  }
}

TEST_CASE("of plans with the same bottleneck the DP keeps the one a micro-batch crosses fastest") {
  // The middle layer on the fast device sets the bottleneck (33 units) in
  // every two-stage plan worth having; the light layer beside it costs 6 on
  // d1 and 12 on d2, below that bottleneck either way, but a step's fill and
  // drain pay it.
  // Every order of the devices' indices, so that no order of the DP's loops hides it.
  LayerGraph g = linear_chain({8, 8, 8});
  std::vector<double> speeds{0.25, 0.5, 1};
  do {
    Setup s(g, cluster(speeds), library(g, 8, {1, 10, 1}), 8);
    auto dp = dp_min_bottleneck(s.ctx, 1, 2);
    REQUIRE(dp.is_ok());
    CHECK(pipeline_bottleneck_ms(s.ctx, *dp) == doctest::Approx(33).epsilon(0.01));
    for (int d : dp->stage_device) CHECK(speeds[d] >= 0.5);
  } while (std::next_permutation(speeds.begin(), speeds.end()));
}

TEST_CASE("under 1F1B the DP gives each stage the memory of its place in the pipeline, as exhaustive search does") {
  // Activations large against the devices' memory: a stage keeps as many
  // micro-batches as stages from it to the last, so a later stage may hold
  // layers a first stage could not. Exact against exhaustive search.
  std::mt19937 rng(23);
  int later_stage_holds_more = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int L = 3 + static_cast<int>(rng() % 4), D = 2 + static_cast<int>(rng() % 2);
    LayerGraph g = test::wide_chain(rng, L);
    std::vector<double> ms;
    for (int i = 0; i < L; ++i) ms.push_back(0.1 + (rng() % 100) / 10.0);
    const int64_t batch = 2048;
    const int m = rng() % 2 ? 2 : 4;
    const StageMemory mem(g);
    std::vector<double> speeds;
    for (int d = 0; d < D; ++d) speeds.push_back(0.25 + (rng() % 4) * 0.25);
    Cluster c = cluster(speeds, 1.0 + rng() % 50);
    test::squeeze_memory(rng, c, g, batch / m);
    Setup s(g, c, library(g, batch, ms), batch);
    s.ctx.schedule = Schedule::one_f_one_b;
    s.ctx.allow_recompute = trial % 2;
    for (int stages : {0, 2, 3}) {
      auto dp = dp_min_bottleneck(s.ctx, m, stages);
      auto ex = exhaustive_min_bottleneck(s.ctx, m, stages);
      REQUIRE(dp.is_ok() == ex.is_ok());
      if (!dp) continue;
      CHECK(pipeline_bottleneck_ms(s.ctx, *dp) == doctest::Approx(pipeline_bottleneck_ms(s.ctx, *ex)));
      // The plan fits by core's memory rule (recomputing only where the context allows).
      CHECK(planner_support::fits(s.ctx, planner_support::planned(s.ctx, *dp, "dp")));
      const int S = static_cast<int>(dp->stage_begin.size());
      for (int k = 1; k < S && !s.ctx.allow_recompute; ++k) {
        const int end = k + 1 < S ? dp->stage_begin[k + 1] : L;
        const Device& d = c.devices[dp->stage_device[k]];
        const int64_t samples = batch / m;
        if (!mem.fits(d, dp->stage_begin[k], end, samples, micro_batches_in_flight(s.ctx.schedule, m, S), false, m) &&
            mem.fits(d, dp->stage_begin[k], end, samples, micro_batches_in_flight(s.ctx.schedule, m, S - k), false, m))
          ++later_stage_holds_more;
      }
    }
  }
  // The inputs reach the case: without recomputation, a later stage holds what a first stage could not.
  CHECK(later_stage_holds_more > 0);
}

TEST_CASE("the DP planner reaches the contiguous exhaustive optimum of the simulator on small chains") {
  for (auto speeds : {std::vector<double>{1, 1}, std::vector<double>{1, 0.5, 0.5}, std::vector<double>{0.3, 1}}) {
    Setup s = small_setup(speeds);
    s.ctx.exhaustive_contiguous_only = true;
    SimulatorEvaluator ev = s.evaluator();
    auto dp = plan_dynamic_programming(s.ctx, ev, 3);
    auto ex = plan_exhaustive(s.ctx, ev);
    REQUIRE(dp.is_ok());
    REQUIRE(ex.is_ok());
    double dp_ms = ev.evaluate(*dp).step_ms, ex_ms = ev.evaluate(*ex).step_ms;
    CHECK(ex_ms <= dp_ms + 1e-9);
    CHECK(dp_ms == doctest::Approx(ex_ms));
  }
}

TEST_CASE("exhaustive search enumerates every layer-to-device assignment when the space is small") {
  Setup s = small_setup({1, 1});
  s.ctx.micro_batches = 2;
  SimulatorEvaluator ev = s.evaluator();
  auto ex = plan_exhaustive(s.ctx, ev);
  REQUIRE(ex.is_ok());
  CHECK(ev.evaluations() == 32 + 1 - 1);  // 2^5 assignments, one micro-batch choice
  // Non-contiguous placements can beat every contiguous one.
  s.ctx.exhaustive_contiguous_only = true;
  auto contiguous = plan_exhaustive(s.ctx, ev);
  REQUIRE(contiguous.is_ok());
  CHECK(ev.evaluate(*ex).step_ms <= ev.evaluate(*contiguous).step_ms);
  s.ctx.exhaustive_limit = 5;
  auto too_big = plan_exhaustive(s.ctx, ev);
  REQUIRE_FALSE(too_big.is_ok());
  CHECK(too_big.error_message().find("exceed the limit of 5") != std::string::npos);
}

TEST_CASE("every planner respects the devices' memory limits") {
  // d0 is tiny: it cannot hold the 256-wide layer (and its weights x 3).
  LayerGraph g = linear_chain({1024, 1024, 1024, 64, 10});
  Cluster c = cluster({1, 1, 1});
  c.devices[0].memory_mb = 10;  // the whole model needs ~ 3 x 8.5 MB
  c.devices[1].memory_mb = 20;
  Setup s(g, c, library(g, 8, {1, 1, 1, 1, 1}), 8);
  SimulatorEvaluator ev = s.evaluator();
  for (const std::string& name : planner_names()) {
    auto p = run_planner(name, s.ctx, ev);
    if (name == "bsp" || name == "hogwild" || name == "single") {
      if (name == "single") {
        REQUIRE(p.is_ok());
        CHECK(p->group_device == std::vector<int>{2});
      } else {
        REQUIRE_FALSE(p.is_ok());
        CHECK(p.error_message().find("full replica") != std::string::npos);
      }
      continue;
    }
    REQUIRE_MESSAGE(p.is_ok(), name << ": " << p.error_message());
    CHECK_MESSAGE(check_memory(*p, s.g, s.c, s.ctx.batch_size).is_ok(), name);
    CHECK_MESSAGE(ev.evaluate(*p).ok, name);
  }
}

TEST_CASE("a planner that finds no placement that fits says so") {
  LayerGraph g = linear_chain({4096, 4096, 10});
  Cluster c = cluster({1, 1});
  for (Device& d : c.devices) d.memory_mb = 1;
  Setup s(g, c, library(g, 8, {1, 1, 1}), 8);
  SimulatorEvaluator ev = s.evaluator();
  for (const std::string& name : planner_names()) {
    auto p = run_planner(name, s.ctx, ev);
    REQUIRE_FALSE_MESSAGE(p.is_ok(), name);
    const std::string& msg = p.error_message();
    CHECK_MESSAGE((msg.find("memory") != std::string::npos || msg.find("MB") != std::string::npos), name << ": " << msg);
  }
}

TEST_CASE("uniform, parameter-balanced and time-balanced splits balance what they say") {
  LayerGraph g = linear_chain({16, 16, 16, 16, 2048, 16});
  Setup s(g, cluster({1, 1}), library(g, 8, {1, 1, 1, 1, 1, 7}), 8);
  s.ctx.micro_batches = 2;
  auto uniform = plan_uniform(s.ctx);
  REQUIRE(uniform.is_ok());
  CHECK(std::count(uniform->layer_group.begin(), uniform->layer_group.end(), 0) == 3);
  auto params = plan_param_balanced(s.ctx);
  REQUIRE(params.is_ok());
  // The 16->2048 and 2048->16 layers hold nearly all parameters: one on each side.
  CHECK(params->layer_group[4] != params->layer_group[5]);
  auto time = plan_balance_by_time(s.ctx);
  REQUIRE(time.is_ok());
  // Layer 5 costs 7 of 12: it stands alone.
  CHECK(std::count(time->layer_group.begin(), time->layer_group.end(), time->layer_group[5]) == 1);
  // On a faster and a slower device, balance-by-time gives the fast one more layers.
  Setup hetero(g, cluster({1, 0.25}), library(g, 8, {1, 1, 1, 1, 1, 1}), 8);
  auto t2 = plan_balance_by_time(hetero.ctx);
  REQUIRE(t2.is_ok());
  int on_fast = 0;
  for (size_t i = 0; i < g.layers.size(); ++i) on_fast += t2->device_of_layer(static_cast<int>(i)) == 0;
  CHECK(on_fast >= 4);
}

TEST_CASE("random search and annealing spend at most their budget and keep the best") {
  Setup s = small_setup({1, 0.5, 0.8});
  s.ctx.budget = 25;
  SimulatorEvaluator ev = s.evaluator();
  auto r = plan_random_search(s.ctx, ev);
  REQUIRE(r.is_ok());
  CHECK(ev.evaluations() <= 25);
  SimulatorEvaluator ev2 = s.evaluator();
  auto a = plan_annealing(s.ctx, ev2);
  REQUIRE(a.is_ok());
  CHECK(ev2.evaluations() <= 25);
  // Annealing starts from the balance-by-time plan and never returns worse.
  auto t = plan_balance_by_time(s.ctx);
  REQUIRE(t.is_ok());
  CHECK(ev2.evaluate(*a).step_ms <= ev2.evaluate(*t).step_ms + 1e-9);
  // Deterministic for a seed.
  SimulatorEvaluator ev3 = s.evaluator();
  auto a2 = plan_annealing(s.ctx, ev3);
  CHECK(a2->layer_group == a->layer_group);
  CHECK(a2->group_device == a->group_device);
}

TEST_CASE("BSP data parallel costs compute on its share plus a ring allreduce of the parameters") {
  LayerGraph g = linear_chain({64, 10});  // 16*64+64 + 64*10+10 = 1738 params = 6952 bytes
  Cluster c = cluster({1, 1}, 8.0, 0.5);  // 8 Mbps: 1 ms per 1000 bytes
  Setup s(g, c, library(g, 8, {2, 2}), 8);
  auto p = plan_data_parallel(s.ctx);
  REQUIRE(p.is_ok());
  CHECK(is_data_parallel(*p));
  StepReport r = simulate_data_parallel(s.g, s.c, s.cost, 8, p->group_device);
  REQUIRE(r.ok);
  // Share 4 of 8: forward 2, backward 4 -> 6 ms; allreduce 2 (R-1) x (0.5 + 3476 B / 1000 B/ms).
  CHECK(r.step_ms == doctest::Approx(6 + 2 * (0.5 + 3.476)));
  SimulatorEvaluator ev = s.evaluator();
  CHECK(ev.evaluate(*p).step_ms == doctest::Approx(r.step_ms));
  // HOGWILD: the same replicas without the allreduce.
  auto h = plan_hogwild(s.ctx);
  REQUIRE(h.is_ok());
  CHECK(is_data_parallel(*h));
  CHECK(ev.evaluate(*h).step_ms == doctest::Approx(6.0));
  s.c.devices[1].where = "10.0.0.2:7000";
  auto remote = plan_hogwild(s.ctx);
  REQUIRE_FALSE(remote.is_ok());
  CHECK(remote.error_message().find("remote") != std::string::npos);
}

TEST_CASE("run_planners gives one row per planner, failures as rows, BSP through the hook") {
  Setup s = small_setup({1, 1});
  SimulatorEvaluator ev = s.evaluator();
  PlannerRunOptions options;
  int hook_calls = 0;
  options.strategy_evaluator = [&](const std::string& strategy) {
    ++hook_calls;
    StepReport r;
    r.ok = true;
    r.step_ms = 42;
    r.source = strategy;
    return r;
  };
  auto rows = run_planners(s.ctx, ev, options);
  REQUIRE(rows.size() == planner_names().size());
  for (size_t i = 0; i < rows.size(); ++i) {
    CHECK(rows[i].name == planner_names()[i]);
    CHECK_MESSAGE(rows[i].report.ok, rows[i].name << ": " << rows[i].report.message);
    CHECK(rows[i].placement.has_value());
  }
  CHECK(hook_calls == 2);  // bsp and hogwild
  CHECK(rows[1].report.step_ms == 42);
  CHECK(rows[9].name == "hogwild");
  CHECK(rows[9].report.source == "hogwild");
  options.planners = {"nonsense"};
  auto bad = run_planners(s.ctx, ev, options);
  REQUIRE(bad.size() == 1);
  CHECK_FALSE(bad[0].report.ok);
  CHECK(bad[0].report.message.find("expected one of") != std::string::npos);
}

TEST_CASE("exhaustive search over a space larger than its limit is a skipped row saying why, not a failure") {
  Setup s = small_setup({1, 1});  // 5 layers, 2 devices
  s.ctx.micro_batches = 2;
  SimulatorEvaluator ev = s.evaluator();
  CHECK_FALSE(exhaustive_skip_reason(s.ctx).has_value());  // 2^5 assignments fit the default limit
  s.ctx.exhaustive_limit = 5;  // 2^5 assignments and 10 contiguous plans: neither fits
  REQUIRE(exhaustive_skip_reason(s.ctx).has_value());
  CHECK(*exhaustive_skip_reason(s.ctx) == "10 candidates > limit 5");
  PlannerRunOptions options;
  options.planners = {"exhaustive", "uniform"};
  auto rows = run_planners(s.ctx, ev, options);
  REQUIRE(rows.size() == 2);
  CHECK(rows[0].skipped);
  CHECK_FALSE(rows[0].report.ok);
  CHECK(rows[0].report.failure_kind == FailureKind::skipped);
  CHECK(rows[0].report.message == "10 candidates > limit 5");
  CHECK_FALSE(rows[0].placement.has_value());
  CHECK_FALSE(rows[1].skipped);
  CHECK(rows[1].report.ok);
  s.ctx.exhaustive_limit = 10;  // the contiguous plans fit: it runs
  CHECK_FALSE(exhaustive_skip_reason(s.ctx).has_value());
  CHECK_FALSE(run_planners(s.ctx, ev, options)[0].skipped);
}

TEST_CASE("bad clusters get clear errors") {
  LayerGraph g = linear_chain({16, 10});
  LayerLibrary lib = library(g, 8, {1, 1});
  Cluster slow = cluster({1, 1});
  slow.devices[1].speed = 0;
  auto cost = CostModel::build(g, slow, lib);
  REQUIRE_FALSE(cost.is_ok());
  CHECK(cost.error_message().find("devices[1].speed") != std::string::npos);
  Cluster empty;
  auto none = CostModel::build(g, empty, lib);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.error_message().find("cluster.devices") != std::string::npos);
  Cluster dead_link = cluster({1, 1});
  dead_link.links.push_back(Link{"d0", "d1", 0.0, 0.1});
  auto link = CostModel::build(g, dead_link, lib);
  REQUIRE_FALSE(link.is_ok());
  CHECK(link.error_message().find("d0 -> d1") != std::string::npos);
  auto parsed = cluster_from_json(nlohmann::json::parse(R"({"devices": [{"name": "a", "speed": 2000}]})"));
  REQUIRE_FALSE(parsed.is_ok());
  CHECK(parsed.error_message().find("speed") != std::string::npos);
}

TEST_CASE("the simulating evaluator counts its evaluations and is deterministic") {
  Setup s = small_setup({1, 1});
  SimulatorEvaluator ev = s.evaluator();
  auto p = plan_uniform(s.ctx);
  REQUIRE(p.is_ok());
  StepReport a = ev.evaluate(*p), b = ev.evaluate(*p);
  CHECK(ev.evaluations() == 2);
  CHECK(a.step_ms == b.step_ms);
  CHECK(a.source == "simulate");
  CHECK(a.timeline.empty());
  ev.timeline = true;
  CHECK_FALSE(ev.evaluate(*p).timeline.empty());
}

TEST_CASE("a data-parallel placement: JSON round trip, memory per replica at its share, errors name the field") {
  Setup s = small_setup({1, 1, 1});
  const int L = static_cast<int>(s.g.layers.size());
  Placement p = Placement::replicas(L, {2, 0});
  p.source = "policy";
  CHECK(is_data_parallel(p));
  CHECK(p.replica_share(7) == 4);
  nlohmann::json j = placement_to_json(p, s.g, s.c);
  CHECK(j["data_parallel"] == true);
  auto back = placement_from_json(j, s.g, s.c);
  REQUIRE(back.is_ok());
  CHECK(back->is_data_parallel());
  CHECK(back->group_device == std::vector<int>{2, 0});
  CHECK(back->source == "policy");
  j.erase("data_parallel");
  CHECK_FALSE(placement_from_json(j, s.g, s.c)->is_data_parallel());

  // Each replica holds the whole model at its share of the batch; the third device nothing.
  auto bytes = estimate_device_memory_bytes(p, s.g, s.c, 8);
  const auto whole = estimate_device_memory_bytes(Placement::single_device(L, 0), s.g, s.c, 4);
  CHECK(bytes[0] == whole[0]);
  CHECK(bytes[2] == whole[0]);
  CHECK(bytes[1] == 0);

  CHECK(validate_placement(p, s.g, s.c, 8).is_ok());
  Placement twice = Placement::replicas(L, {1, 1});
  Status dup = validate_placement(twice, s.g, s.c, 8);
  REQUIRE_FALSE(dup.is_ok());
  CHECK(dup.message().find("placement.groups[1]") != std::string::npos);
  Status small = validate_placement(Placement::replicas(L, {0, 1, 2}), s.g, s.c, 2);
  REQUIRE_FALSE(small.is_ok());
  CHECK(small.message().find("placement.groups") != std::string::npos);
  Placement split = p;
  split.layer_group[1] = 1;
  CHECK(validate_placement(split, s.g, s.c, 8).message().find("placement.layers") != std::string::npos);

  // The simulator costs the replicas it names, not the whole cluster.
  SimulatorEvaluator ev = s.evaluator();
  StepReport two = ev.evaluate(p);
  REQUIRE(two.ok);
  CHECK(two.step_ms == doctest::Approx(simulate_data_parallel(s.g, s.c, s.cost, 8, {2, 0}).step_ms));
  CHECK(two.devices[1].busy_ms == 0);
  // ... and refuses, as for a pipeline, replicas that break the rules (a device twice, micro-batches).
  for (const Placement& bad : {twice, [&] {
         Placement q = p;
         q.micro_batches = 4;
         return q;
       }()}) {
    StepReport r = ev.evaluate(bad);
    CHECK_FALSE(r.ok);
    CHECK(r.failure_kind == FailureKind::invalid_placement);
    CHECK(r.message.find("placement.") == 0);
  }
}

namespace {
// 16 -> 4096 -> 4096 -> 10, batch 8192 in 8 micro-batches under GPipe: on a device of
// 512 MiB the first two layers keep 268 MB of activations beside 202 MB of
// training state, 134 MB of received gradients and 96 MB of working memory;
// recomputing, 34 MB of activations. `planner` must return a plan that
// recomputes, fits and runs; without recomputation it must fail.
void check_recomputes_where_only_that_fits(const std::string& planner, int64_t second_device_mb) {
  CAPTURE(planner);
  LayerGraph g = linear_chain({4096, 4096, 10});
  Cluster c = cluster({1, 1});
  c.devices[0].memory_mb = 512;
  c.devices[1].memory_mb = second_device_mb;
  Setup s(g, c, library(g, 8192, {1, 1, 1}), 8192);
  s.ctx.micro_batches = 8;
  SimulatorEvaluator ev = s.evaluator();
  auto p = run_planner(planner, s.ctx, ev);
  REQUIRE_MESSAGE(p.is_ok(), p.error_message());
  CHECK(check_memory(*p, s.g, s.c, 8192).is_ok());
  bool recomputes = false;
  for (int grp = 0; grp < p->num_groups(); ++grp) recomputes = recomputes || p->recomputes(grp);
  CHECK(recomputes);
  CHECK(ev.evaluate(*p).ok);
  s.ctx.allow_recompute = false;
  auto none = run_planner(planner, s.ctx, ev);
  REQUIRE_FALSE(none.is_ok());
  CHECK(none.error_message().find("no placement that fits") != std::string::npos);
}
}  // namespace

TEST_CASE("with 16 devices the DP planner still finds pipelines over many devices, as good as a balanced split") {
  // On 16 devices the DP over device sets affords only 4 cut positions (at most
  // 3 stages); the DP over every boundary with the devices in order must find
  // the long pipeline: 40 equal layers, 16 equal devices, cheap links.
  std::vector<int64_t> widths(40, 64);
  widths.back() = 10;
  LayerGraph g = linear_chain(widths);
  Setup s(g, cluster(std::vector<double>(16, 1.0), 100000), library(g, 64, std::vector<double>(40, 5.0)), 64);
  s.ctx.micro_batches = 16;
  SimulatorEvaluator ev = s.evaluator();
  auto dp = run_planner("dp", s.ctx, ev);
  REQUIRE_MESSAGE(dp.is_ok(), dp.error_message());
  CHECK(dp->num_groups() >= 8);
  auto balanced = run_planner("uniform", s.ctx, ev);
  REQUIRE(balanced.is_ok());
  CHECK(ev.evaluate(*dp).step_ms <= ev.evaluate(*balanced).step_ms * 1.0001);
}

TEST_CASE("the DP planner recomputes a stage that fits its device only that way, and says nothing fits when it may not") {
  check_recomputes_where_only_that_fits("dp", 512);  // no other split fits two such devices
}

TEST_CASE("PipeDream prices and marks recomputation where a stage fits its devices only that way") {
  // A second device too small for a replica of the first layers (their training
  // state alone is 202 MB): every plan recomputes on d0.
  check_recomputes_where_only_that_fits("pipedream", 180);
}

TEST_CASE("a planner's placements train with the context's optimizer, and Adam's state is counted") {
  LayerGraph g = linear_chain({256, 256, 10});
  Setup s(g, cluster({1, 1}), library(g, 8, {1, 1, 1}), 8);
  s.ctx.optimizer = Optimizer::adam;
  SimulatorEvaluator ev = s.evaluator();
  for (const std::string& name : {std::string("dp"), std::string("single"), std::string("bsp"), std::string("anneal")}) {
    auto p = run_planner(name, s.ctx, ev);
    REQUIRE_MESSAGE(p.is_ok(), name << ": " << p.error_message());
    CHECK_MESSAGE(p->optimizer == Optimizer::adam, name);
  }
}

TEST_CASE("planners whose every evaluated plan failed to run say why, not that nothing fits") {
  // An evaluator that cannot start its workers (a tapp-cli copied without its
  // tapp-worker): the plans fit, so the reason is the evaluator's own.
  struct NoWorkers : Evaluator {
    StepReport evaluate(const Placement&) override {
      return StepReport::failure(FailureKind::worker_failed, "worker binary 'x/tapp-worker' not found", "measure");
    }
    EvaluatorKind kind() const override { return EvaluatorKind::measure; }
  };
  Setup s = small_setup({1.0, 0.5, 0.25});
  NoWorkers ev;
  for (auto run : {+[](const PlannerContext& c, Evaluator& e) { return plan_dynamic_programming(c, e, 3); },
                   +[](const PlannerContext& c, Evaluator& e) { return plan_pipedream(c, e, 3); },
                   +[](const PlannerContext& c, Evaluator& e) { return plan_random_search(c, e); }}) {
    const auto r = run(s.ctx, ev);
    REQUIRE_FALSE(r);
    CHECK(r.status().message().find("every plan it evaluated failed to run (worker_failed: worker binary 'x/tapp-worker' not found)") !=
          std::string::npos);
    CHECK(r.status().message().find("fits the devices' memory") == std::string::npos);
  }
}
