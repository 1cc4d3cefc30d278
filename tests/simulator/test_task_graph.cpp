#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "model/layer_graph.h"
#include "core/cluster.h"
#include "simulator/task_graph.h"
#include "tests/simulator/fixtures.h"

using namespace tapp;
using namespace tapp::test;

namespace {
// Executes device orders in lock-step; true if every compute task runs.
bool runs_without_deadlock(const TaskGraph& tg) {
  std::vector<bool> done(tg.tasks.size(), false);
  std::vector<size_t> next(tg.num_devices, 0);
  auto ready = [&](int t) {
    for (int d : tg.tasks[t].deps) {
      const Task& dep = tg.tasks[d];
      bool transfer = dep.kind == TaskKind::transfer_activation || dep.kind == TaskKind::transfer_gradient;
      if (!(transfer ? done[dep.deps[0]] : done[d])) return false;
    }
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int d = 0; d < tg.num_devices; ++d)
      if (next[d] < tg.device_order[d].size() && ready(tg.device_order[d][next[d]])) {
        done[tg.device_order[d][next[d]++]] = true;
        progress = true;
      }
  }
  for (int d = 0; d < tg.num_devices; ++d)
    if (next[d] != tg.device_order[d].size()) return false;
  return true;
}
}  // namespace

TEST_CASE("a two-device chain splits into two segments with one transfer each way per micro-batch") {
  LayerGraph g = chain(4);
  auto tg = build_task_graph(g, by_device({0, 0, 1, 1}, 4, Schedule::gpipe), devices(2), 8);
  REQUIRE(tg.is_ok());
  CHECK(tg->segments.size() == 2);
  int acts = 0, grads = 0;
  for (const Task& t : tg->tasks) {
    acts += t.kind == TaskKind::transfer_activation;
    grads += t.kind == TaskKind::transfer_gradient;
    if (t.kind == TaskKind::transfer_activation) CHECK(t.bytes == 8 * 4 * 2);
  }
  CHECK(acts == 4);
  CHECK(grads == 4);
  CHECK(tg->segments[1].computes_loss);
  CHECK(tg->segments[0].reads_model_input);
}

TEST_CASE("a non-contiguous placement gives a device several segments and still runs") {
  LayerGraph g = chain(6);
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b}) {
    auto tg = build_task_graph(g, by_device({0, 1, 0, 2, 1, 0}, 4, s), devices(3), 16);
    REQUIRE(tg.is_ok());
    CHECK(tg->segments.size() == 6);
    CHECK(runs_without_deadlock(*tg));
  }
}

TEST_CASE("gpipe runs every forward before any backward on a device; 1f1b interleaves") {
  LayerGraph g = chain(4);
  auto gp = build_task_graph(g, by_device({0, 1, 2, 3}, 8, Schedule::gpipe), devices(4), 32);
  auto ob = build_task_graph(g, by_device({0, 1, 2, 3}, 8, Schedule::one_f_one_b), devices(4), 32);
  REQUIRE(gp.is_ok());
  REQUIRE(ob.is_ok());
  const auto& order0 = gp->device_order[0];
  for (int i = 0; i < 8; ++i) CHECK(gp->tasks[order0[i]].kind == TaskKind::forward);
  // 1F1B on the first of four stages: four forwards, then a backward.
  const auto& o = ob->device_order[0];
  CHECK(ob->tasks[o[3]].kind == TaskKind::forward);
  CHECK(ob->tasks[o[4]].kind == TaskKind::backward);
  CHECK(runs_without_deadlock(*ob));
}

TEST_CASE("micro-batch sizes add up to the batch when it does not divide evenly") {
  LayerGraph g = chain(2);
  auto tg = build_task_graph(g, by_device({0, 1}, 3, Schedule::gpipe), devices(2), 10);
  REQUIRE(tg.is_ok());
  CHECK(tg->micro_batch_sizes == std::vector<int64_t>{4, 3, 3});
}

TEST_CASE("a placement with more micro-batches than samples is rejected naming the field") {
  LayerGraph g = chain(2);
  auto tg = build_task_graph(g, by_device({0, 1}, 9, Schedule::gpipe), devices(2), 8);
  REQUIRE_FALSE(tg.is_ok());
  CHECK(tg.error_message().find("placement.micro_batches") != std::string::npos);
}

TEST_CASE("micro-batches of one sample are rejected when a BatchNorm layer would see one value per channel") {
  LayerGraph g;
  g.input_shape = {4, 1, 1};
  Layer bn;
  bn.name = "bn";
  bn.op = "batchnorm2d";
  Layer flat;
  flat.name = "flat";
  flat.op = "flatten";
  flat.inputs = {0};
  g.layers = {bn, flat};
  REQUIRE(infer_shapes(g).is_ok());
  auto one_each = build_task_graph(g, by_device({0, 1}, 8, Schedule::gpipe), devices(2), 8);
  REQUIRE_FALSE(one_each.is_ok());
  CHECK(one_each.error_message().find("BatchNorm layer 'bn'") != std::string::npos);
  CHECK(build_task_graph(g, by_device({0, 1}, 4, Schedule::gpipe), devices(2), 8).is_ok());
}

TEST_CASE("data-parallel replicas have no task graph: building one is an error naming the field") {
  LayerGraph g = chain(4);
  auto tg = build_task_graph(g, Placement::replicas(4, {0, 1}), devices(2), 8);
  REQUIRE_FALSE(tg.is_ok());
  CHECK(tg.error_message().find("placement.data_parallel") != std::string::npos);
}
