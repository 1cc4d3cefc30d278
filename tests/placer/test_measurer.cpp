// The search's measurer (memo, best so far, trace, counts) and the one evaluator factory.
#include <doctest/doctest.h>

#include "placer/evaluator_factory.h"
#include "core/allreduce_ring.h"
#include "model/layer_library.h"
#include "placer/measurer.h"
#include "simulator/cost_model.h"
#include "simulator/simulator_evaluator.h"
#include "tests/core/fake_evaluator.h"
#include "tests/core/overfull_chain.h"
#include "tests/model/linear_chain.h"

using namespace tapp;
using namespace tapp::testing;

namespace {
// Two stages of a 4-layer chain (2n = 4 layers) on devices a and b.
Placement two_stages(int a, int b, int micro_batches = 2) {
  Placement p;
  p.layer_group = {0, 0, 1, 1};
  p.group_device = {a, b};
  p.micro_batches = micro_batches;
  return p;
}

// 10 ms a step on GPipe, 9 ms on 1F1B, 1 ms more a group; counts its calls.
class ScheduleEvaluator : public Evaluator {
 public:
  StepReport evaluate(const Placement& p) override {
    ++calls;
    StepReport r;
    r.ok = true;
    r.source = "schedule";
    r.step_ms = (p.schedule == Schedule::one_f_one_b ? 9.0 : 10.0) + p.num_groups();
    return r;
  }
  EvaluatorKind kind() const override { return EvaluatorKind::simulate; }
  int calls = 0;
};
}  // namespace

TEST_CASE("the measurer evaluates a placement once on each schedule and answers repeats from its memo") {
  LayerGraph g = chain_graph(2);
  Cluster c = equal_cluster(2);
  FakeEvaluator ev({1, 1, 1, 1}, c);
  Measurer m(g, c, ev, 8);
  const StepReport first = m.measure(two_stages(0, 1), 1);
  const StepReport again = m.measure(two_stages(0, 1), 2);
  REQUIRE(first.ok);
  CHECK(again.step_ms == first.step_ms);
  CHECK(ev.evaluations() == 2);  // once on each synchronous schedule
  CHECK(m.evaluations() == 1);
  m.measure(two_stages(1, 0), 3);
  CHECK(ev.evaluations() == 4);
  CHECK(m.evaluations() == 2);
  CHECK(m.failures() == 0);
}

TEST_CASE("the measurer keeps the best, traces each improvement and counts failures without evaluating them") {
  LayerGraph g = chain_graph(2);
  Cluster c = equal_cluster(2);
  c.devices[1].speed = 0.5;  // the fake's step: slower where more layers sit on device 1
  FakeEvaluator ev({1, 1, 1, 1}, c);
  Measurer m(g, c, ev, 8);
  Placement all_on_slow;
  all_on_slow.layer_group = {0, 0, 0, 0};
  all_on_slow.group_device = {1};
  all_on_slow.micro_batches = 1;
  const double slow_ms = m.measure(all_on_slow, 1).step_ms;
  const double split_ms = m.measure(two_stages(0, 1), 2).step_ms;
  REQUIRE(split_ms < slow_ms);
  m.measure(all_on_slow, 3);  // a repeat: no new trace point
  REQUIRE(m.found());
  CHECK(m.best_report().step_ms == split_ms);
  CHECK(m.last_improvement() == 2);
  REQUIRE(m.trace().size() == 2);
  CHECK(m.trace()[0].best_step_ms == slow_ms);
  CHECK(m.trace()[1].best_step_ms == split_ms);
  CHECK(m.trace()[1].iteration == 2);
  REQUIRE(m.best_pipeline());
  CHECK(m.best_pipeline()->second == split_ms);

  Placement bad = two_stages(0, 7);  // no device 7: invalid before any evaluation
  const StepReport& r = m.measure(bad, 4);
  CHECK_FALSE(r.ok);
  CHECK(r.failure_kind == FailureKind::invalid_placement);
  CHECK(m.failures() == 1);
  CHECK(m.evaluations() == 3);
  CHECK(ev.evaluations() == 4);
  c.devices[0].memory_mb = c.devices[1].memory_mb = 0;  // (one device of 0 MiB: its layers would move)
  Measurer tight(g, c, ev, 8);
  CHECK(tight.measure(two_stages(0, 1), 1).failure_kind == FailureKind::out_of_memory);
  CHECK(tight.failures() == 1);
  CHECK(ev.evaluations() == 4);
}

TEST_CASE("an evaluator kind is parsed once, and an unknown one is refused naming the field") {
  CHECK(evaluator_kind_from_name("hybrid", "options.evaluator").value() == EvaluatorKind::hybrid);
  Result<EvaluatorKind> bad = evaluator_kind_from_name("simulator", "options.evaluator");
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.error_message() == "options.evaluator: must be simulate, measure or hybrid, got \"simulator\"");
  for (EvaluatorKind k : {EvaluatorKind::simulate, EvaluatorKind::measure, EvaluatorKind::hybrid})
    CHECK(evaluator_kind_from_name(evaluator_kind_name(k), "x").value() == k);
}

TEST_CASE("the evaluator factory builds each kind with its handles and refuses an unknown kind naming the field") {
  LayerGraph g = chain_graph(2);
  Cluster c = equal_cluster(2);
  Result<CostModel> cost = CostModel::build(g, c, estimated_library(g, 8), default_calibration());
  REQUIRE(cost.is_ok());
  EvaluatorInputs in;
  in.graph = &g;
  in.cluster = &c;
  in.cost = &*cost;
  in.batch_size = 8;

  Result<JobEvaluator> sim = make_evaluator(EvaluatorKind::simulate, in);
  REQUIRE(sim.is_ok());
  CHECK(sim->evaluator->kind() == EvaluatorKind::simulate);
  CHECK(sim->simulator == sim->evaluator.get());
  CHECK_FALSE(sim->measures());
  CHECK_FALSE(sim->strategy_evaluator);
  CHECK(sim->evaluator->evaluate(two_stages(0, 1)).ok);

  Result<JobEvaluator> measure = make_evaluator(EvaluatorKind::measure, in);
  REQUIRE(measure.is_ok());
  CHECK(measure->evaluator->name() == "measure");
  CHECK(measure->measures());
  CHECK(static_cast<bool>(measure->strategy_evaluator));  // BSP and HOGWILD run on the workers too

  Result<JobEvaluator> hybrid = make_evaluator(EvaluatorKind::hybrid, in);
  REQUIRE(hybrid.is_ok());
  CHECK(hybrid->hybrid != nullptr);
  CHECK(hybrid->evaluator->kind() == EvaluatorKind::hybrid);

  Result<JobEvaluator> unknown = make_evaluator(static_cast<EvaluatorKind>(7), in, "--evaluator");
  REQUIRE_FALSE(unknown.is_ok());
  CHECK(unknown.error_message().rfind("--evaluator: unknown evaluator kind 7", 0) == 0);
  in.cost = nullptr;
  Result<JobEvaluator> no_cost = make_evaluator(EvaluatorKind::simulate, in);
  REQUIRE_FALSE(no_cost.is_ok());
  CHECK(no_cost.error_message().rfind("options.evaluator: ", 0) == 0);
}

TEST_CASE("the measurer sets its optimizer on every placement it measures, and the memo tells recomputation apart") {
  LayerGraph g = chain_graph(2);
  Cluster c = equal_cluster(2);
  FakeEvaluator ev({1, 1, 1, 1}, c);
  Measurer m(g, c, ev, 8, Optimizer::adam);
  REQUIRE(m.measure(two_stages(0, 1), 1).ok);
  REQUIRE(m.found());
  CHECK(m.best().optimizer == Optimizer::adam);
  Placement recomputing = two_stages(0, 1);
  recomputing.group_recompute = {1, 0};
  CHECK(placement_key(recomputing) != placement_key(two_stages(0, 1)));
  m.measure(recomputing, 2);
  CHECK(ev.evaluations() == 4);
}

TEST_CASE("the measurer recomputes the activations of a device that does not fit without it, as the planners do") {
  // 16 -> 4096 -> 4096 -> 10, batch 8192 in 8 micro-batches on devices of 512 MiB: device 0
  // fits only recomputing (tests/core/test_memory.cpp has the arithmetic).
  const LayerGraph g = test::linear_chain({4096, 4096, 10});
  Cluster c = equal_cluster(2);
  for (Device& d : c.devices) d.memory_mb = 512;
  Placement p;
  p.layer_group = {0, 0, 1};
  p.group_device = {0, 1};
  p.micro_batches = 8;
  REQUIRE_FALSE(check_memory(p, g, c, 8192).is_ok());
  FakeEvaluator ev({1, 1, 1}, c);
  Measurer m(g, c, ev, 8192);
  const StepReport& r = m.measure(p, 1);
  CHECK_MESSAGE(r.ok, r.message);
  REQUIRE(m.found());
  CHECK(m.best().recomputes(0));  // kept as evaluated
  CHECK_FALSE(m.best().recomputes(1));
  CHECK(m.moved() == 0);  // recomputing was enough: no layer moved
  m.measure(p, 2);  // the proposal as given is memoised
  CHECK(ev.evaluations() == 2);
  // A placement that fits is evaluated as given.
  const Cluster big = equal_cluster(2);  // the measurer keeps a reference
  Measurer roomy(g, big, ev, 8);
  REQUIRE(roomy.measure(p, 1).ok);
  CHECK(roomy.best().group_recompute.empty());
}

TEST_CASE("where recomputing is not enough, layers move to a device that holds none, and the move is kept") {
  const OverfullChain chain;  // all six layers on d0, which no recomputation fits; d1 holds nothing
  const LayerGraph& g = chain.graph;
  const Cluster& c = chain.cluster;
  const Placement& p = chain.placement;
  FakeEvaluator ev(std::vector<double>(6, 1.0), c);
  Measurer m(g, c, ev, chain.batch);
  const StepReport& r = m.measure(p, 1);
  CHECK_MESSAGE(r.ok, r.message);
  REQUIRE(m.found());
  CHECK(check_memory(m.best(), g, c, chain.batch).is_ok());  // kept as evaluated: some layers on d1
  int on_d1 = 0;
  for (int i = 0; i < 6; ++i) on_d1 += m.best().device_of_layer(i) == 1;
  CHECK(on_d1 > 0);
  CHECK(on_d1 < 6);
  m.measure(p, 2);  // the proposal as given is memoised
  CHECK(ev.evaluations() == 2);
  CHECK(m.failures() == 0);
  CHECK(m.moved() == 1);
}

TEST_CASE("replicas of different speeds are weighed so they finish together; equal ones are left round-robin") {
  Placement p = two_stages(0, 2, 8);
  p.group_replicas = {{1}, {}};
  // Device 1 takes twice as long per sample: 8 micro-batches go 6 : 2 (d0
  // busy 6 units, d1 4; round-robin's 4 : 4 keeps d1 busy 8).
  Placement weighed = p;
  CHECK(weigh_replicas(weighed, {1.0, 2.0, 1.0}));
  CHECK(weighed.group_replica_weights == std::vector<std::vector<int>>{{6, 2}, {}});
  Placement equal = p;
  CHECK_FALSE(weigh_replicas(equal, {1.0, 1.0, 3.0}));
  CHECK(equal.group_replica_weights.empty());
  // Equally fast replicas stay round-robin even where the count does not divide (8 over 3).
  Placement three = p;
  three.group_replicas = {{1, 2}, {}};
  three.group_device = {0, 3};
  CHECK_FALSE(weigh_replicas(three, {1.0, 1.0, 1.0, 5.0}));
  // Weights a placement already has are kept.
  Placement given = p;
  given.group_replica_weights = {{1, 1}, {}};
  CHECK_FALSE(weigh_replicas(given, {1.0, 4.0, 1.0}));
  CHECK(given.group_replica_weights == std::vector<std::vector<int>>{{1, 1}, {}});

  // Through the measurer: the best it keeps is the placement as weighed.
  LayerGraph g = chain_graph(2);
  Cluster c = equal_cluster(3);
  c.devices[1].speed = 0.5;
  Result<CostModel> cost = CostModel::build(g, c, estimated_library(g, 8), default_calibration());
  REQUIRE(cost.is_ok());
  SimulatorEvaluator sim(g, c, *cost, 8);
  Measurer plain(g, c, sim, 8);
  Measurer by_speed(g, c, sim, 8);
  by_speed.weigh_replicas_by({1.0, 2.0, 1.0});
  const StepReport even = plain.measure(p, 1);
  const StepReport fast = by_speed.measure(p, 1);
  REQUIRE(even.ok);
  REQUIRE(fast.ok);
  CHECK(fast.step_ms < even.step_ms);
  CHECK(by_speed.best().group_replica_weights == std::vector<std::vector<int>>{{6, 2}, {}});
}

TEST_CASE("where the faster replica's link is slow, the measurer keeps the even split it also scores") {
  // Device 0 computes twice as fast as device 1 but sends its outputs to
  // device 2 over a slow link: weighing by speed alone gives it 6 of 8
  // micro-batches to send, round-robin 4.
  LayerGraph g = chain_graph(2, 4096);
  Cluster c = equal_cluster(3);
  c.devices[1].speed = 0.5;
  c.links.push_back({c.devices[0].name, c.devices[2].name, 20.0, 1.0});
  Result<CostModel> cost = CostModel::build(g, c, estimated_library(g, 8), default_calibration());
  REQUIRE(cost.is_ok());
  SimulatorEvaluator sim(g, c, *cost, 8);
  Placement p = two_stages(0, 2, 8);
  p.group_replicas = {{1}, {}};
  Placement weighed = p;
  REQUIRE(weigh_replicas(weighed, {1.0, 2.0, 1.0}));
  const StepReport by_speed_alone = sim.evaluate(weighed);
  Measurer plain(g, c, sim, 8);
  const StepReport even = plain.measure(p, 1);
  REQUIRE(even.ok);
  REQUIRE(by_speed_alone.ok);
  REQUIRE(even.step_ms < by_speed_alone.step_ms);  // the case this test is about
  Measurer both(g, c, sim, 8);
  both.weigh_replicas_by({1.0, 2.0, 1.0});
  const StepReport kept = both.measure(p, 1);
  CHECK(kept.step_ms == doctest::Approx(even.step_ms));
  CHECK(both.best().group_replica_weights.empty());
  CHECK(both.evaluations() == 1);  // one proposal, however many splits it was scored at
}

TEST_CASE("a replicated group is also scored on its cheapest all-reduce ring, its fastest replicas first") {
  // One group of a chain replicated on four equal devices whose hops 0->1 and
  // 2->3 are slow: the index order's ring crosses both, another ring neither.
  LayerGraph g = chain_graph(2, 512);
  Cluster c = equal_cluster(4);
  c.default_link = {"", "", 1000.0, 0.05};
  c.links.push_back({"d0", "d1", 1.0, 0.05});
  c.links.push_back({"d2", "d3", 1.0, 0.05});
  Result<CostModel> cost = CostModel::build(g, c, estimated_library(g, 8), default_calibration());
  REQUIRE(cost.is_ok());
  SimulatorEvaluator sim(g, c, *cost, 8);
  Placement p;
  p.layer_group = {0, 0, 0, 0};
  p.group_device = {0};
  p.group_replicas = {{1, 2, 3}};
  p.micro_batches = 4;
  const StepReport index_order = sim.evaluate(p);
  REQUIRE(index_order.ok);
  Measurer m(g, c, sim, 8);
  const StepReport kept = m.measure(p, 1);
  REQUIRE(kept.ok);
  CHECK(kept.step_ms < 0.5 * index_order.step_ms);
  const std::vector<int> ring = m.best().devices_of_group(0);
  CHECK(ring_allreduce_s(c, ring, 1) < ring_allreduce_s(c, {0, 1, 2, 3}, 1));
  CHECK(sim.evaluate(m.best()).step_ms == doctest::Approx(kept.step_ms));
  CHECK(m.evaluations() == 1);
  // So are BSP's replicas (equal shares: only the ring changes).
  const Placement bsp = Placement::replicas(4, {0, 1, 2, 3});
  const StepReport bsp_index_order = sim.evaluate(bsp);
  REQUIRE(bsp_index_order.ok);
  CHECK(m.measure(bsp, 2).step_ms < 0.5 * bsp_index_order.step_ms);
  CHECK(ring_allreduce_s(c, m.best().group_device, 1) < ring_allreduce_s(c, {0, 1, 2, 3}, 1));

  // The ring is turned so that the replicas round-robin gives one more
  // micro-batch (5 over 4: the first) is the fastest; weights follow their devices.
  c.devices[2].speed = 2.0;
  Placement five = p;
  five.micro_batches = 5;
  REQUIRE(order_replica_rings(five, g, c, {}));
  CHECK(five.group_device[0] == 2);
  Placement weighed = p;
  weighed.group_replica_weights = {{1, 2, 3, 4}};
  REQUIRE(order_replica_rings(weighed, g, c, {1.0, 1.0, 1.0, 0.25}));
  CHECK(weighed.group_device[0] == 3);  // by time per sample where given
  const std::vector<int> order = weighed.devices_of_group(0);
  for (size_t k = 0; k < order.size(); ++k) CHECK(weighed.group_replica_weights[0][k] == order[k] + 1);
  // Already on its cheapest ring: left as it is.
  Placement again = weighed;
  CHECK_FALSE(order_replica_rings(again, g, c, {}));
}

TEST_CASE("the measurer scores a pipeline on both synchronous schedules and keeps the faster") {
  const LayerGraph g = chain_graph(3);
  const Cluster c = equal_cluster(2);
  ScheduleEvaluator ev;
  Measurer m(g, c, ev, 8);
  Placement start = Placement::single_device(static_cast<int>(g.layers.size()), 0, 2);
  REQUIRE(start.schedule == Schedule::gpipe);
  CHECK(m.measure(start, 0).step_ms == doctest::Approx(10.0));
  CHECK(m.best().schedule == Schedule::one_f_one_b);
  CHECK(ev.calls == 2);
  CHECK(m.evaluations() == 1);
  // Data parallelism has no pipeline schedule: scored once.
  m.measure(Placement::replicas(static_cast<int>(g.layers.size()), {0, 1}, DataParallelMode::bsp), 1);
  CHECK(ev.calls == 3);
}
