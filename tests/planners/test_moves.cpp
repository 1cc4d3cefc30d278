// The one move generator over contiguous pipelines (planners/moves.h).
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <set>
#include <vector>

#include "planners/moves.h"

using namespace tapp;

namespace {

// Stages non-empty and in layer order from layer 0, one device each in the
// cluster, micro-batches among the choices.
bool is_valid(const StagePlan& p, const StageMoves& m) {
  if (p.stage_begin.empty() || p.stage_begin.size() != p.stage_device.size() || p.stage_begin[0] != 0)
    return false;
  for (int k = 1; k < p.num_stages(); ++k)
    if (p.stage_begin[k] <= p.stage_begin[k - 1]) return false;
  if (p.stage_begin.back() >= m.num_layers()) return false;
  for (int d : p.stage_device)
    if (d < 0 || d >= m.num_devices()) return false;
  const auto& c = m.micro_batch_choices();
  return std::find(c.begin(), c.end(), p.micro_batches) != c.end();
}

bool has_distinct_devices(const StagePlan& p) {
  return std::set<int>(p.stage_device.begin(), p.stage_device.end()).size() == p.stage_device.size();
}

StagePlan plan(std::vector<int> begin, std::vector<int> device, int micro_batches) {
  StagePlan p;
  p.stage_begin = std::move(begin);
  p.stage_device = std::move(device);
  p.micro_batches = micro_batches;
  return p;
}

bool contains(const std::vector<StagePlan>& v, const StagePlan& p) {
  return std::any_of(v.begin(), v.end(), [&](const StagePlan& q) {
    return q.stage_begin == p.stage_begin && q.stage_device == p.stage_device &&
           q.micro_batches == p.micro_batches;
  });
}

}  // namespace

TEST_CASE("every neighbour of a random plan is a valid pipeline on distinct devices, enumerated or drawn") {
  std::mt19937_64 rng(7);
  for (int L : {1, 2, 3, 9, 40})
    for (int D : {1, 2, 5}) {
      const StageMoves moves(L, D, {1, 2, 4, 8});
      for (int n = 0; n < 30; ++n) {
        StagePlan p = moves.random_plan(rng);
        REQUIRE(is_valid(p, moves));
        REQUIRE(has_distinct_devices(p));
        for (const MoveSet& set : {MoveSet::wide(L), MoveSet::shifts_and_swaps(), MoveSet{}})
          for (const StagePlan& q : moves.neighbours(p, set)) {
            CHECK(is_valid(q, moves));
            CHECK(has_distinct_devices(q));
          }
        for (int k = 0; k < 20; ++k) {
          StagePlan q = moves.random_neighbour(p, rng);
          CHECK(is_valid(q, moves));
          CHECK(has_distinct_devices(q));
        }
      }
    }
}

TEST_CASE(
    "the neighbours of a pipeline are its shifts, merges, splits, swaps, relocations and micro-batch steps") {
  // 8 layers, stages [0,3) [3,6) [6,8) on devices 2, 0, 1; devices 3 and 4 unused.
  const StageMoves moves(8, 5, {1, 2, 4});
  const StagePlan p = plan({0, 3, 6}, {2, 0, 1}, 2);
  const auto all = moves.neighbours(p, MoveSet::wide(8));     // shift steps 1 and 2
  CHECK(contains(all, plan({0, 4, 6}, {2, 0, 1}, 2)));        // boundary 1 by +1
  CHECK(contains(all, plan({0, 2, 6}, {2, 0, 1}, 2)));        // boundary 1 by -1
  CHECK(contains(all, plan({0, 1, 6}, {2, 0, 1}, 2)));        // boundary 1 by -2
  CHECK(contains(all, plan({0, 3, 7}, {2, 0, 1}, 2)));        // boundary 2 by +1
  CHECK(contains(all, plan({0, 3, 4}, {2, 0, 1}, 2)));        // boundary 2 by -2
  CHECK(contains(all, plan({0, 5, 6}, {2, 0, 1}, 2)));        // boundary 1 by +2
  CHECK_FALSE(contains(all, plan({0, 3, 8}, {2, 0, 1}, 2)));  // boundary 2 by +2 would empty the last stage
  CHECK(contains(all, plan({0, 6}, {2, 1}, 2)));              // merge stage 1 into stage 0
  CHECK(contains(all, plan({0, 3}, {2, 0}, 2)));              // merge stage 2 into stage 1
  CHECK(contains(all, plan({0, 1, 3, 6}, {2, 3, 0, 1}, 2)));  // split stage 0 at its middle onto device 3
  CHECK(contains(all, plan({0, 3, 4, 6}, {2, 0, 4, 1}, 2)));  // split stage 1 onto device 4
  CHECK(contains(all, plan({0, 3, 6, 7}, {2, 0, 1, 3}, 2)));  // split stage 2 onto device 3
  CHECK(contains(all, plan({0, 3, 6}, {0, 2, 1}, 2)));        // swap stages 0 and 1
  CHECK(contains(all, plan({0, 3, 6}, {1, 0, 2}, 2)));        // swap stages 0 and 2
  CHECK(contains(all, plan({0, 3, 6}, {2, 4, 1}, 2)));        // stage 1 to unused device 4
  CHECK(contains(all, plan({0, 3, 6}, {2, 0, 1}, 1)));        // fewer micro-batches
  CHECK(contains(all, plan({0, 3, 6}, {2, 0, 1}, 4)));        // more micro-batches
  // Counts: shifts (+1,-1,+2,-2 at two boundaries, one of which empties a stage: +2 at boundary 2),
  // 2 merges, 3 stages x 2 unused devices of splits, 3 swaps, 3 x 2 relocations, 2 micro-batch steps.
  CHECK(all.size() == 7 + 2 + 6 + 3 + 6 + 2);
  const auto polish = moves.neighbours(p, MoveSet::shifts_and_swaps());
  CHECK(polish.size() == 4 + 3);  // +-1 at each boundary, 3 swaps
}

TEST_CASE("random neighbours draw every kind of move") {
  const StageMoves moves(8, 5, {1, 2, 4});
  const StagePlan p = plan({0, 3, 6}, {2, 0, 1}, 2);
  std::mt19937_64 rng(3);
  bool shifted = false, merged = false, split = false, swapped = false, relocated = false, stepped = false;
  for (int n = 0; n < 2000; ++n) {
    StagePlan q = moves.random_neighbour(p, rng);
    if (q.micro_batches != p.micro_batches) {
      stepped = true;
    } else if (q.num_stages() < p.num_stages()) {
      merged = true;
    } else if (q.num_stages() > p.num_stages()) {
      split = true;
    } else if (q.stage_begin != p.stage_begin) {
      shifted = true;
    } else {
      std::set<int> before(p.stage_device.begin(), p.stage_device.end()),
          after(q.stage_device.begin(), q.stage_device.end());
      (before == after ? swapped : relocated) = true;
    }
  }
  CHECK(shifted);
  CHECK(merged);
  CHECK(split);
  CHECK(swapped);
  CHECK(relocated);
  CHECK(stepped);
}

TEST_CASE(
    "a plan with no applicable move comes back unchanged, and a count outside the choices gets no step") {
  const StageMoves moves(1, 1, {1, 2});
  const StagePlan one = plan({0}, {0}, 1);
  std::mt19937_64 rng(1);
  for (const StagePlan& q : moves.neighbours(one, MoveSet::wide(1))) CHECK(q.micro_batches == 2);
  const StagePlan odd = plan({0}, {0}, 3);
  CHECK(moves.neighbours(odd, MoveSet::wide(1)).empty());
  CHECK(moves.random_neighbour(odd, rng).micro_batches == 3);
}

TEST_CASE("a pipeline's placement and the stages of its runs round-trip") {
  const StagePlan p = plan({0, 2, 5}, {3, 1, 0}, 4);
  Placement pl = to_placement(p, 7, Schedule::one_f_one_b, "dp");
  CHECK(pl.layer_group == std::vector<int>{0, 0, 1, 1, 1, 2, 2});
  CHECK(pl.group_device == std::vector<int>{3, 1, 0});
  CHECK(pl.source == "dp");
  StagePlan back = stage_plan_of_runs(pl);
  CHECK(back.stage_begin == p.stage_begin);
  CHECK(back.stage_device == p.stage_device);
  CHECK(back.micro_batches == 4);
  // A group that comes back later is a stage of its own.
  Placement split;
  split.layer_group = {0, 1, 0};
  split.group_device = {2, 1};
  StagePlan runs = stage_plan_of_runs(split);
  CHECK(runs.stage_begin == std::vector<int>{0, 1, 2});
  CHECK(runs.stage_device == std::vector<int>{2, 1, 2});
}
