// The hybrid evaluator: simulate, measure the best candidates, recalibrate.
#include <doctest/doctest.h>

#include <memory>

#include "placer/hybrid_evaluator.h"
#include "planners/planners.h"
#include "placer/search.h"
#include "model/layer_library.h"
#include "simulator/cost_model.h"
#include "tests/core/fake_evaluator.h"

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
