#include <doctest/doctest.h>

#include <algorithm>
#include <random>
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
    for (int d : tg.deps(t)) {
      const Task& dep = tg.tasks[d];
      bool transfer = dep.kind == TaskKind::transfer_activation || dep.kind == TaskKind::transfer_gradient;
      if (!(transfer ? done[tg.deps(dep)[0]] : done[d])) return false;
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

// ---------------------------------------------------------------- replicated groups

namespace {
// Layers -> groups, groups -> replica sets (first = group_device).
Placement replicated(const std::vector<int>& layer_group, const std::vector<std::vector<int>>& group_devices,
                     int micro_batches, Schedule s = Schedule::gpipe) {
  Placement p;
  p.layer_group = layer_group;
  for (const auto& devs : group_devices) {
    p.group_device.push_back(devs[0]);
    p.group_replicas.emplace_back(devs.begin() + 1, devs.end());
  }
  p.micro_batches = micro_batches;
  p.schedule = s;
  return p;
}

// Every compute task appears once, on the device that runs it, and nothing else is ordered.
bool orders_cover_compute_tasks(const TaskGraph& tg) {
  std::vector<int> seen(tg.tasks.size(), 0);
  for (int d = 0; d < tg.num_devices; ++d)
    for (int t : tg.device_order[d]) {
      if (!is_compute(tg.tasks[t].kind) || tg.tasks[t].device != d) return false;
      ++seen[t];
    }
  for (size_t t = 0; t < tg.tasks.size(); ++t)
    if (seen[t] != (is_compute(tg.tasks[t].kind) ? 1 : 0)) return false;
  return true;
}

// The replay order holds every task once, after its deps and after the
// tasks before it in its device's order.
bool replay_order_is_feasible(const TaskGraph& tg) {
  std::vector<int> position(tg.tasks.size(), -1);
  if (tg.replay_order.size() != tg.tasks.size()) return false;
  for (size_t k = 0; k < tg.replay_order.size(); ++k) {
    int t = tg.replay_order[k];
    if (position[t] >= 0) return false;
    position[t] = static_cast<int>(k);
  }
  for (size_t t = 0; t < tg.tasks.size(); ++t)
    for (int d : tg.deps(static_cast<int>(t)))
      if (position[d] > position[t]) return false;
  for (const auto& order : tg.device_order)
    for (size_t k = 1; k < order.size(); ++k)
      if (position[order[k - 1]] > position[order[k]]) return false;
  return true;
}
}  // namespace

TEST_CASE("a replicated first stage runs micro-batch m on replica m % r, sends from that replica, and all-reduces once") {
  LayerGraph g = chain(4);
  Placement p = replicated({0, 0, 1, 1}, {{0, 1}, {2}}, 4);
  auto tg = build_task_graph(g, p, devices(3), 8);
  REQUIRE(tg.is_ok());
  REQUIRE(tg->segments.size() == 2);
  CHECK(tg->segments[0].devices == std::vector<int>{0, 1});
  CHECK(tg->segments[0].group == 0);
  CHECK(tg->segments[1].devices == std::vector<int>{2});
  for (int m = 0; m < 4; ++m) {
    CHECK(tg->tasks[tg->forward_task[0][m]].device == m % 2);
    CHECK(tg->tasks[tg->backward_task[0][m]].device == m % 2);
    CHECK(tg->tasks[tg->forward_task[1][m]].device == 2);
  }
  int acts = 0, grads = 0;
  for (const Task& t : tg->tasks) {
    if (t.kind == TaskKind::transfer_activation) {
      ++acts;
      CHECK(t.device == t.micro_batch % 2);
      CHECK(t.to_device == 2);
    }
    if (t.kind == TaskKind::transfer_gradient) {
      ++grads;
      CHECK(t.device == 2);
      CHECK(t.to_device == t.micro_batch % 2);
    }
  }
  CHECK(acts == 4);
  CHECK(grads == 4);
  REQUIRE(tg->replicated_groups.size() == 1);
  const ReplicatedGroup& rg = tg->replicated_groups[0];
  CHECK(rg.group == 0);
  CHECK(rg.devices == std::vector<int>{0, 1});
  CHECK(rg.segments == std::vector<int>{0});
  CHECK(rg.param_bytes == g.layers[0].param_bytes() + g.layers[1].param_bytes());
  REQUIRE(rg.allreduce_task >= 0);
  const Task& ar = tg->tasks[rg.allreduce_task];
  CHECK(ar.kind == TaskKind::allreduce);
  CHECK(ar.replicated_group == 0);
  CHECK(ar.bytes == rg.param_bytes);
  CHECK(tg->deps(ar).to_vector() == std::vector<int>(tg->backward_task[0].begin(), tg->backward_task[0].end()));
  CHECK(rg.allreduce_task == static_cast<int>(tg->tasks.size()) - 1);  // allreduces come last
  // Each replica's order holds exactly its own micro-batches.
  CHECK(tg->device_order[0].size() == 4);
  CHECK(tg->device_order[1].size() == 4);
  CHECK(tg->device_order[2].size() == 8);
  CHECK(orders_cover_compute_tasks(*tg));
  CHECK(runs_without_deadlock(*tg));
  CHECK(replay_order_is_feasible(*tg));
}

TEST_CASE("a replica on the device of the next stage skips the transfer for the micro-batches it runs") {
  LayerGraph g = chain(4);
  auto tg = build_task_graph(g, replicated({0, 0, 1, 1}, {{0, 1}, {1}}, 4), devices(2), 8);
  REQUIRE(tg.is_ok());
  std::vector<int> sent;
  for (const Task& t : tg->tasks)
    if (t.kind == TaskKind::transfer_activation) sent.push_back(t.micro_batch);
  CHECK(sent == std::vector<int>{0, 2});  // odd micro-batches run both segments on device 1
  const Task& f1 = tg->tasks[tg->forward_task[1][1]];
  CHECK(tg->deps(f1).to_vector() == std::vector<int>{tg->forward_task[0][1]});
  CHECK(runs_without_deadlock(*tg));
}

TEST_CASE("a replicated middle stage sends to and receives from whichever replica runs the micro-batch") {
  LayerGraph g = chain(6);
  auto tg = build_task_graph(g, replicated({0, 0, 1, 1, 2, 2}, {{0}, {1, 2, 3}, {4}}, 6), devices(5), 12);
  REQUIRE(tg.is_ok());
  for (const Task& t : tg->tasks) {
    if (t.kind == TaskKind::transfer_activation && t.segment == 0) CHECK(t.to_device == 1 + t.micro_batch % 3);
    if (t.kind == TaskKind::transfer_activation && t.segment == 1) CHECK(t.device == 1 + t.micro_batch % 3);
    if (t.kind == TaskKind::transfer_gradient && t.segment == 1) CHECK(t.to_device == 1 + t.micro_batch % 3);
  }
  REQUIRE(tg->replicated_groups.size() == 1);
  CHECK(tg->replicated_groups[0].devices == std::vector<int>{1, 2, 3});
  CHECK(tg->deps(tg->replicated_groups[0].allreduce_task).size() == 6);
}

TEST_CASE("with aggregation_every > 1 there is no allreduce task; the replicated groups are still listed") {
  LayerGraph g = chain(4);
  Placement p = replicated({0, 0, 1, 1}, {{0, 1}, {2}}, 4);
  p.aggregation_every = 4;
  auto tg = build_task_graph(g, p, devices(3), 8);
  REQUIRE(tg.is_ok());
  CHECK(tg->aggregation_every == 4);
  for (const Task& t : tg->tasks) CHECK(t.kind != TaskKind::allreduce);
  REQUIRE(tg->replicated_groups.size() == 1);
  CHECK(tg->replicated_groups[0].allreduce_task == -1);
}

TEST_CASE("consecutive unreplicated groups on one device share a segment; a replicated group keeps its own") {
  LayerGraph g = chain(4);
  Placement same_device = replicated({0, 1, 2, 2}, {{0}, {0}, {1}}, 2);
  auto merged = build_task_graph(g, same_device, devices(2), 8);
  REQUIRE(merged.is_ok());
  CHECK(merged->segments.size() == 2);
  Placement rep = replicated({0, 1, 1, 2}, {{0, 1}, {0, 1}, {2}}, 2);
  auto split = build_task_graph(g, rep, devices(3), 8);
  REQUIRE(split.is_ok());
  CHECK(split->segments.size() == 3);  // groups 0 and 1 share a replica set but all-reduce separately
  REQUIRE(split->replicated_groups.size() == 2);
  CHECK(split->replicated_groups[1].segments == std::vector<int>{1});
}

TEST_CASE("interleaved 1F1B runs a device's first segment for a chunk of micro-batches before its next segment") {
  LayerGraph g = chain(4);
  // Two devices, each with two virtual stages: d0 holds layers 0 and 2, d1 layers 1 and 3.
  auto tg = build_task_graph(g, by_device({0, 1, 0, 1}, 4, Schedule::interleaved_1f1b), devices(2), 8);
  REQUIRE(tg.is_ok());
  CHECK(tg->schedule == Schedule::interleaved_1f1b);
  std::vector<std::pair<int, int>> forwards;  // (segment, micro-batch) in device 0's order
  for (int t : tg->device_order[0])
    if (tg->tasks[t].kind == TaskKind::forward) forwards.push_back({tg->tasks[t].segment, tg->tasks[t].micro_batch});
  // Chunks of P = 2 micro-batches: segment 0 for m0, m1, then segment 2 for m0, m1 before segment 0 moves on.
  REQUIRE(forwards.size() >= 4);
  CHECK(forwards[0] == std::make_pair(0, 0));
  CHECK(forwards[1] == std::make_pair(0, 1));
  auto at = [&](int s, int m) { return std::find(forwards.begin(), forwards.end(), std::make_pair(s, m)) - forwards.begin(); };
  CHECK(at(2, 0) < at(0, 3));
  CHECK(at(2, 1) < at(0, 3));
  CHECK(runs_without_deadlock(*tg));
  CHECK(orders_cover_compute_tasks(*tg));
}

TEST_CASE("random placements with replicas and several groups per device run without deadlock under every schedule") {
  std::mt19937 rng(7);
  LayerGraph branchy;
  branchy.name = "branchy";
  branchy.input_shape = {8};
  add_layer(branchy, "fc0", "linear", {});
  add_layer(branchy, "a1", "linear", {0});
  add_layer(branchy, "a2", "linear", {1});
  add_layer(branchy, "b3", "linear", {0});
  add_layer(branchy, "b4", "linear", {3});
  add_layer(branchy, "cat5", "add", {2, 4});
  add_layer(branchy, "fc6", "linear", {5});
  add_layer(branchy, "add7", "add", {6, 5});
  add_layer(branchy, "fc8", "linear", {7});
  REQUIRE(infer_shapes(branchy).is_ok());
  const Cluster c = devices(5);
  int built = 0, with_replicas = 0, shared_devices = 0;
  for (const LayerGraph& g : {chain(8), branchy}) {
    const int L = static_cast<int>(g.layers.size());
    for (int trial = 0; trial < 200; ++trial) {
      const int G = 1 + static_cast<int>(rng() % 4);
      Placement p;
      for (int i = 0; i < L; ++i) p.layer_group.push_back(static_cast<int>(rng() % G));
      for (int grp = 0; grp < G; ++grp) {
        std::vector<int> devs{0, 1, 2, 3, 4};
        std::shuffle(devs.begin(), devs.end(), rng);
        const int r = rng() % 3 == 0 ? 2 + static_cast<int>(rng() % 2) : 1;
        p.group_device.push_back(devs[0]);
        p.group_replicas.emplace_back(devs.begin() + 1, devs.begin() + r);
      }
      p.micro_batches = 3 + static_cast<int>(rng() % 4);
      p.aggregation_every = rng() % 4 == 0 ? 3 : 1;
      for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved_1f1b}) {
        p.schedule = s;
        auto tg = build_task_graph(g, p, c, 12);
        if (!tg) {  // a replicated group caught in a cycle of groups: refused, naming the field
          CHECK(tg.error_message().find("placement.") != std::string::npos);
          continue;
        }
        ++built;
        with_replicas += !tg->replicated_groups.empty();
        std::vector<int> segments_on(5, 0);
        for (const Segment& seg : tg->segments)
          for (int d : seg.devices) ++segments_on[d];
        shared_devices += *std::max_element(segments_on.begin(), segments_on.end()) > 1;
        CHECK(runs_without_deadlock(*tg));
        CHECK(orders_cover_compute_tasks(*tg));
        CHECK(replay_order_is_feasible(*tg));
        for (const Task& t : tg->tasks)
          for (int d : tg->deps(t)) CHECK(d < static_cast<int>(&t - tg->tasks.data()));  // tasks are topological
      }
    }
  }
  CHECK(built > 400);
  CHECK(with_replicas > 100);
  CHECK(shared_devices > 200);
}

TEST_CASE(
    "timed 1f1b orders a device by estimated times: a gradient that is there before one a slow device "
    "computes") {
  // Layer 0 on d0, d1, d2 (micro-batch m on m % 3), layer 1 on the slow d3
  // and d2 (m % 2): micro-batch 0 of layer 0 runs on d0 and its layer 1 on
  // d3, micro-batch 3 on d0 and d2. 1F1B's unit steps (every task one step)
  // have d0 wait for micro-batch 0's gradient, the lower micro-batch, first.
  LayerGraph g = chain(2);
  Cluster c = devices(4);
  c.devices[3].speed = 0.05;
  const Placement p = replicated({0, 1}, {{0, 1, 2}, {3, 2}}, 4, Schedule::timed_1f1b);
  auto order = [](const TaskGraph& tg, int d) {
    std::string s;
    for (int t : tg.device_order[d]) {
      const Task& x = tg.tasks[t];
      s += (x.kind == TaskKind::forward ? " F" : " B") + std::to_string(x.segment) + "m" +
           std::to_string(x.micro_batch);
    }
    return s;
  };
  auto timed = build_task_graph(g, p, c, 4);
  REQUIRE(timed.is_ok());
  CHECK(order(*timed, 0) == " F0m0 F0m3 B0m3 B0m0");
  CHECK(order(*timed, 2) == " F0m2 F1m1 B1m1 F1m3 B1m3 B0m2");
  CHECK(order(*timed, 3) == " F1m0 B1m0 F1m2 B1m2");
  CHECK(runs_without_deadlock(*timed));
  Placement unit = p;
  unit.schedule = Schedule::one_f_one_b;
  auto stepped = build_task_graph(g, unit, c, 4);
  REQUIRE(stepped.is_ok());
  CHECK(order(*stepped, 0) == " F0m0 F0m3 B0m0 B0m3");
  // With every device equally fast the timed order is 1F1B's.
  c.devices[3].speed = 1;
  timed = build_task_graph(g, p, c, 4);
  REQUIRE(timed.is_ok());
  for (int d = 0; d < 4; ++d) CHECK(order(*timed, d) == order(*stepped, d));
}
