#include <doctest/doctest.h>

#include "core/pipeline_efficiency.h"

using namespace tapp;

namespace {

// Two stages, two micro-batches: stage 0 computes F/B of 10/20 ms per micro-batch, stage 1 5/10.
StepReport two_stage_step(double step_ms) {
  StepReport r;
  r.ok = true;
  r.step_ms = step_ms;
  r.timeline = {{0, "F s0 m0", 0, 10},  {0, "F s0 m1", 10, 20}, {1, "F s1 m0", 10, 15},
                {1, "F s1 m1", 20, 25}, {1, "B s1 m0", 25, 35}, {1, "B s1 m1", 35, 45},
                {0, "B s0 m0", 35, 55}, {0, "B s0 m1", 55, 75}, {0, "X s0->s1 m0", 10, 11},
                {0, "optimizer", 75, 80}, {1, "optimizer", 45, 47}};
  return r;
}

Placement two_stages(int micro_batches) {
  Placement p;
  p.layer_group = {0, 1};
  p.group_device = {0, 1};
  p.micro_batches = micro_batches;
  return p;
}

}  // namespace

TEST_CASE("pipeline efficiency is the largest stage's compute over the fill and drain, against the measured step") {
  auto e = pipeline_efficiency(two_stage_step(80), two_stages(2));
  REQUIRE(e.has_value());
  CHECK(e->stages == 2);
  CHECK(e->largest_stage_compute_ms == doctest::Approx(60));  // 2 x (10 + 20); sends and the update excluded
  CHECK(e->ideal_step_ms == doctest::Approx(60 * 3.0 / 2.0));
  CHECK(e->efficiency == doctest::Approx(90.0 / 80.0));
  auto slower = pipeline_efficiency(two_stage_step(180), two_stages(2));
  REQUIRE(slower.has_value());
  CHECK(slower->efficiency == doctest::Approx(0.5));
}

TEST_CASE("no pipeline efficiency for a failed step, a step without timeline, or replicas") {
  StepReport failed = two_stage_step(80);
  failed.ok = false;
  CHECK_FALSE(pipeline_efficiency(failed, two_stages(2)).has_value());
  StepReport bare = two_stage_step(80);
  bare.timeline.clear();
  CHECK_FALSE(pipeline_efficiency(bare, two_stages(2)).has_value());
  Placement replicas = Placement::replicas(2, {0, 1});
  CHECK_FALSE(pipeline_efficiency(two_stage_step(80), replicas).has_value());
}
