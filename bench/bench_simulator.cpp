// bench/bench_simulator.cpp — simulator evaluations per second (Google Benchmark, one thread).
//
// One "evaluation" = placement -> StepReport: validate, check memory, build the
// task graph, replay it (SimulatorEvaluator::evaluate, timeline off as in a
// search). Costs come from estimated_library (multiply-adds), which does not
// change the amount of work. Placements: the 4-stage uniform split (contiguous)
// and random layer -> device assignments (non-contiguous: many segments).
#include <benchmark/benchmark.h>

#include <random>

#include "planners/planners.h"
#include "simulator/simulator_evaluator.h"
#include "model/layer_library.h"
#include "model/zoo.h"
#include "core/cluster.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"
#include "simulator/task_graph.h"

namespace {
using namespace tapp;

struct Fixture {
  LayerGraph graph;
  Cluster cluster;
  std::unique_ptr<SimulatorEvaluator> ev;
  std::vector<Placement> contiguous, random, one_f_one_b;
};

Fixture& fixture(const std::string& model) {
  static std::map<std::string, Fixture> cache;
  auto it = cache.find(model);
  if (it != cache.end()) return it->second;
  Fixture f;
  f.graph = *zoo_model(model);
  for (int i = 0; i < 4; ++i) {
    Device d;
    d.name = "dev" + std::to_string(i);
    d.memory_mb = 1 << 20;
    f.cluster.devices.push_back(d);
  }
  f.cluster.default_link.bandwidth_mbps = 1000;
  const int64_t batch = 32;
  CostModel cost = *CostModel::build(f.graph, f.cluster, estimated_library(f.graph, batch));
  f.ev = std::make_unique<SimulatorEvaluator>(f.graph, f.cluster, cost, batch);
  PlannerContext ctx;
  ctx.graph = &f.graph;
  ctx.cluster = &f.cluster;
  ctx.cost = &cost;
  ctx.batch_size = batch;
  ctx.micro_batches = 8;
  Placement uniform = *plan_uniform(ctx);
  f.contiguous.push_back(uniform);
  uniform.schedule = Schedule::one_f_one_b;
  f.one_f_one_b.push_back(uniform);
  std::mt19937 rng(1);
  const int L = static_cast<int>(f.graph.layers.size());
  for (int k = 0; k < 64; ++k) {
    Placement p;
    p.group_device = {0, 1, 2, 3};
    p.micro_batches = 8;
    for (int i = 0; i < L; ++i) p.layer_group.push_back(static_cast<int>(rng() % 4));
    f.random.push_back(p);
  }
  return cache.emplace(model, std::move(f)).first->second;
}

void run(benchmark::State& state, const std::string& model, bool random, bool ofob = false) {
  Fixture& f = fixture(model);
  const auto& ps = ofob ? f.one_f_one_b : random ? f.random : f.contiguous;
  size_t i = 0;
  for (auto _ : state) {
    StepReport r = f.ev->evaluate(ps[i++ % ps.size()]);
    if (!r.ok) state.SkipWithError(r.message.c_str());
    benchmark::DoNotOptimize(r.step_ms);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_alexnet_4dev_8mb_uniform(benchmark::State& s) { run(s, "alexnet", false); }
void BM_alexnet_4dev_8mb_random(benchmark::State& s) { run(s, "alexnet", true); }
void BM_inception_v3_4dev_8mb_uniform(benchmark::State& s) { run(s, "inception_v3", false); }
void BM_inception_v3_4dev_8mb_random(benchmark::State& s) { run(s, "inception_v3", true); }
void BM_alexnet_4dev_8mb_uniform_1f1b(benchmark::State& s) { run(s, "alexnet", false, true); }
BENCHMARK(BM_alexnet_4dev_8mb_uniform);
BENCHMARK(BM_alexnet_4dev_8mb_uniform_1f1b);
BENCHMARK(BM_alexnet_4dev_8mb_random);
BENCHMARK(BM_inception_v3_4dev_8mb_uniform);
BENCHMARK(BM_inception_v3_4dev_8mb_random);

// The parts of one evaluation, for alexnet's uniform split.
void BM_alexnet_build_task_graph(benchmark::State& state) {
  Fixture& f = fixture("alexnet");
  for (auto _ : state) {
    auto tg = build_task_graph(f.graph, f.contiguous[0], f.cluster, 32);
    benchmark::DoNotOptimize(tg.is_ok());
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_alexnet_simulate_only(benchmark::State& state) {
  Fixture& f = fixture("alexnet");
  TaskGraph tg = *build_task_graph(f.graph, f.contiguous[0], f.cluster, 32);
  for (auto _ : state) {
    StepReport r = simulate(tg, f.ev->cost(), {false});
    benchmark::DoNotOptimize(r.step_ms);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_alexnet_build_task_graph);
BENCHMARK(BM_alexnet_simulate_only);

}  // namespace

BENCHMARK_MAIN();
