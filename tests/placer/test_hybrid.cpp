// The hybrid evaluator: simulate, measure the best candidates, recalibrate.
#include <doctest/doctest.h>

#include <memory>

#include "placer/hybrid_evaluator.h"
#include "planners/planners.h"
#include "placer/search.h"
#include "model/layer_library.h"
#include "model/model_json.h"
#include "simulator/simulator_evaluator.h"
#include "simulator/cost_model.h"
#include "tests/core/fake_evaluator.h"
#include "tests/model/flat_library.h"

using namespace tapp;

namespace {
// "Measures" a placement as twice the uncalibrated simulator's prediction
// (data parallel: twice simulate_data_parallel's).
class SlowWorld : public Evaluator {
 public:
  SlowWorld(const LayerGraph& g, const Cluster& c, CostModel cost, int64_t batch)
      : g_(g), c_(c), batch_(batch), sim_(g, c, std::move(cost), batch) {}
  StepReport evaluate(const Placement& p) override {
    ++evaluations_;
    StepReport r = p.is_data_parallel() ? simulate_data_parallel(g_, c_, sim_.cost(), batch_, p)
                                   : sim_.evaluate(p, SimulateOptions{false});
    if (!r.ok) return r;
    r.step_ms *= 2;
    for (auto& d : r.devices) d.busy_ms *= 2;
    r.source = "measure";
    return r;
  }
  EvaluatorKind kind() const override { return EvaluatorKind::measure; }

 private:
  const LayerGraph& g_;
  const Cluster& c_;
  int64_t batch_;
  Simulator sim_;
};

// A 4-layer chain on 2 equal devices, costed from multiply-add estimates at batch 8.
struct ChainOnTwo {
  LayerGraph g = tapp::testing::chain_graph(4, 256);
  Cluster c = tapp::testing::equal_cluster(2);
  CostModel cost;
  ChainOnTwo() {
    Result<CostModel> built = CostModel::build(g, c, estimated_library(g, 8));
    REQUIRE_MESSAGE(built.is_ok(), built.error_message());
    cost = built.value();
  }
};
}  // namespace

TEST_CASE("the hybrid evaluator measures its best candidates and moves predictions towards the measurements") {
  ChainOnTwo t;
  const LayerGraph& g = t.g;
  const Cluster& c = t.c;
  auto world = std::make_unique<SlowWorld>(g, c, t.cost, 8);
  HybridOptions ho;
  ho.verify_every = 4;
  ho.top_k = 2;
  ho.max_measurements = 4;
  HybridEvaluator hybrid(g, c, t.cost, 8, std::move(world), ho);
  Placement p = Placement::single_device(8, 0);
  const double before = hybrid.evaluate(p).step_ms;
  REQUIRE(before > 0);
  Placement split = p;
  split.layer_group = {0, 0, 0, 0, 1, 1, 1, 1};
  split.group_device = {0, 1};
  split.micro_batches = 2;
  hybrid.evaluate(split);
  hybrid.evaluate(split);
  hybrid.evaluate(p);  // 4th evaluation: verification
  REQUIRE(hybrid.measurements().size() == 2u);
  for (const auto& m : hybrid.measurements()) CHECK(m.measured.ok);
  REQUIRE(hybrid.measured(p) != nullptr);
  CHECK(hybrid.measured(p)->step_ms == doctest::Approx(2 * before).epsilon(1e-6));
  const double after = hybrid.evaluate(p).step_ms;
  CHECK(std::abs(after - 2 * before) < std::abs(before - 2 * before));
}

TEST_CASE("the hybrid evaluator predicts a data-parallel plan as BSP and keeps its measurement out of the calibration") {
  ChainOnTwo t;
  const LayerGraph& g = t.g;
  const Cluster& c = t.c;
  HybridEvaluator hybrid(g, c, t.cost, 8, std::make_unique<SlowWorld>(g, c, t.cost, 8), HybridOptions{});
  Placement replicas = Placement::replicas(8, {0, 1});
  const double bsp = simulate_data_parallel(g, c, t.cost, 8, {0, 1}).step_ms;
  CHECK(hybrid.evaluate(replicas).step_ms == doctest::Approx(bsp));
  Placement one = Placement::single_device(8, 0);
  const double one_before = hybrid.evaluate(one).step_ms;
  StepReport m = hybrid.measure_now(replicas);
  REQUIRE(m.ok);
  CHECK(m.step_ms == doctest::Approx(2 * bsp));
  REQUIRE(hybrid.measurements().size() == 1u);
  CHECK(hybrid.measurements()[0].predicted_ms == doctest::Approx(bsp));
  CHECK(hybrid.evaluate(one).step_ms == doctest::Approx(one_before));  // no refit from it
}

TEST_CASE("the search finds a device around another device's middle stage, which no planner row can express") {
  // fc0 -> relu0 -> fc1: the two linear layers (4 MB of weights each) fit only
  // d0; relu0 (no weights) fits d1, a device at half speed. Each layer costs
  // 1 ms per sample each way on d0. d0 alone: 3 x 2 x 32 = 192 ms. d0, d1, d0
  // (fc0 | relu0 | fc1) gives d0 128 ms and d1 128 ms of work per step, so a
  // pipeline of many micro-batches approaches 128 ms. The DP and PipeDream
  // give each device one stage, so their only plan is d0 alone.
  auto g = parse_model_json(R"({"name": "sandwich", "input_shape": [1024], "layers": [
      {"name": "fc0", "op": "linear", "attrs": {"out": 1024}},
      {"name": "relu0", "op": "relu", "inputs": ["fc0"]},
      {"name": "fc1", "op": "linear", "inputs": ["relu0"], "attrs": {"out": 1024}}]})");
  REQUIRE(g.is_ok());
  Cluster c = testing::equal_cluster(2);
  c.devices[1].speed = 0.5;
  c.devices[1].memory_mb = 8;
  LayerLibrary lib = test::flat_library(*g, 32, 32.0, 32.0);
  auto cost = CostModel::build(*g, c, lib);
  REQUIRE(cost.is_ok());
  SimulatorEvaluator ev(*g, c, *cost, 32);
  const StepReport single = ev.evaluate(Placement::single_device(3, 0, 1));
  REQUIRE(single.ok);
  CHECK(single.step_ms == doctest::Approx(192.0).epsilon(0.02));
  SearchOptions o;
  o.batch_size = 32;
  o.iterations = 400;
  o.seed = 3;
  SearchResult r = search(*g, c, ev, o, nullptr);
  REQUIRE(r.policy_found);
  const Placement& p = r.policy_best;
  INFO("best " << r.policy_best_report.step_ms << " ms, groups " << p.num_groups());
  CHECK(r.policy_best_report.step_ms < 0.8 * single.step_ms);
  // fc0 and fc1 on d0 in two groups, relu0 on d1 between them.
  CHECK(p.device_of_layer(0) == 0);
  CHECK(p.device_of_layer(1) == 1);
  CHECK(p.device_of_layer(2) == 0);
  CHECK(p.layer_group[0] != p.layer_group[2]);
}
