// bench/bench_simulator.cpp — simulator evaluations per second (Google Benchmark, one thread).
//
// One "evaluation" = placement -> StepReport: validate, check memory, build the
// segments and the schedule's run order, replay them (SimulatorEvaluator::evaluate,
// timeline off as in a search: simulate_segments; no task is built). Costs come from estimated_library (multiply-adds), which does not
// change the amount of work. Placements: the 4-stage uniform split (contiguous),
// random layer -> device assignments (non-contiguous: many segments), hybrid
// placements (2 or 3 contiguous stages over the 4 devices, one stage
// replicated on 2 devices: PipeDream's space) and branch-parallel ones (each
// Inception block's parallel branches on different devices, the trunk on one).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <random>

#include "planners/planners.h"
#include "simulator/simulator_evaluator.h"
#include "model/layer_library.h"
#include "model/zoo.h"
#include "core/cluster.h"
#include "core/memory_fit.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"
#include "simulator/task_graph.h"

namespace {
using namespace tapp;

struct Fixture {
  LayerGraph graph;
  Cluster cluster;
  std::unique_ptr<SimulatorEvaluator> ev;
  std::vector<Placement> contiguous, random, one_f_one_b, replicated, branch_parallel;
  // The same hybrid and branch-parallel placements on 1F1B: the search scores every proposal on both schedules.
  std::vector<Placement> replicated_1f1b, branch_parallel_1f1b;
};

// Hybrid: 2 or 3 contiguous stages, random cuts, one stage on 2 devices.
Placement random_hybrid(int L, std::mt19937& rng) {
  Placement p;
  const int S = 2 + static_cast<int>(rng() % 2);
  std::vector<int> cuts;
  while (static_cast<int>(cuts.size()) < S - 1) {
    int cut = 1 + static_cast<int>(rng() % (L - 1));
    if (std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) cuts.push_back(cut);
  }
  std::sort(cuts.begin(), cuts.end());
  for (int i = 0, s = 0; i < L; ++i) {
    while (s < S - 1 && i >= cuts[s]) ++s;
    p.layer_group.push_back(s);
  }
  std::vector<int> devs{0, 1, 2, 3};
  std::shuffle(devs.begin(), devs.end(), rng);
  const int replicated = static_cast<int>(rng() % S);
  p.group_replicas.resize(S);
  for (int s = 0, next = 0; s < S; ++s) {
    p.group_device.push_back(devs[next++]);
    if (s == replicated) p.group_replicas[s].push_back(devs[next++]);
  }
  p.micro_batches = 8;
  return p;
}

// Each block's parallel branches (what feeds its concat, traced back to the
// block's input) on distinct devices in a random order; the trunk on one device.
Placement random_branch_parallel(const LayerGraph& g, std::mt19937& rng) {
  const int L = static_cast<int>(g.layers.size());
  const int trunk = static_cast<int>(rng() % 4);
  Placement p;
  p.layer_group.assign(L, trunk);
  p.group_device = {0, 1, 2, 3};
  p.micro_batches = 8;
  int block_start = 0;
  for (int c = 0; c < L; ++c) {
    const Layer& l = g.layers[c];
    if (l.op != "concat" || l.name.find(".branch") != std::string::npos) continue;  // block-level concats
    std::vector<int> devs{0, 1, 2, 3};
    std::shuffle(devs.begin(), devs.end(), rng);
    std::vector<int> label(L, -1);
    for (size_t j = 0; j < l.inputs.size(); ++j) label[l.inputs[j]] = static_cast<int>(j);
    for (int i = c - 1; i >= block_start; --i) {  // inputs come first: walk back from the concat
      if (label[i] < 0) continue;
      p.layer_group[i] = devs[label[i] % 4];
      for (int in : g.layers[i].inputs)
        if (in >= block_start && label[in] < 0) label[in] = label[i];
    }
    block_start = c + 1;
  }
  return p;
}

// Devices dev0, dev1, ... of these memories.
Cluster devices_of(const std::vector<int64_t>& memory_mb) {
  Cluster cluster;
  for (int64_t mb : memory_mb) {
    Device d;
    d.name = "dev" + std::to_string(cluster.devices.size());
    d.memory_mb = mb;
    cluster.devices.push_back(d);
  }
  return cluster;
}

Fixture& fixture(const std::string& model) {
  static std::map<std::string, Fixture> cache;
  auto it = cache.find(model);
  if (it != cache.end()) return it->second;
  Fixture f;
  f.graph = *zoo_model(model);
  f.cluster = devices_of(std::vector<int64_t>(4, 1 << 20));
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
    f.replicated.push_back(random_hybrid(L, rng));
    f.branch_parallel.push_back(random_branch_parallel(f.graph, rng));
  }
  for (Placement p : f.replicated) {
    p.schedule = Schedule::one_f_one_b;
    f.replicated_1f1b.push_back(p);
  }
  for (Placement p : f.branch_parallel) {
    p.schedule = Schedule::one_f_one_b;
    f.branch_parallel_1f1b.push_back(p);
  }
  return cache.emplace(model, std::move(f)).first->second;
}

enum class Kind { contiguous, one_f_one_b, random, replicated, branch_parallel, replicated_1f1b, branch_parallel_1f1b };

// A switch, so that a Kind added without its placements fails -Wswitch.
const std::vector<Placement>& placements_of(const Fixture& f, Kind kind) {
  switch (kind) {
    case Kind::contiguous: return f.contiguous;
    case Kind::one_f_one_b: return f.one_f_one_b;
    case Kind::random: return f.random;
    case Kind::replicated: return f.replicated;
    case Kind::branch_parallel: return f.branch_parallel;
    case Kind::replicated_1f1b: return f.replicated_1f1b;
    case Kind::branch_parallel_1f1b: return f.branch_parallel_1f1b;
  }
  return f.contiguous;
}

void run(benchmark::State& state, const std::string& model, Kind kind) {
  Fixture& f = fixture(model);
  const auto& ps = placements_of(f, kind);
  // The placements' average size (outside the timed loop).
  double segments = 0, tasks = 0;
  TaskGraph tg;
  for (const Placement& p : ps) {
    if (!build_task_graph_into(f.graph, p, f.cluster, 32, tg)) continue;
    segments += static_cast<double>(tg.segments.size()) / static_cast<double>(ps.size());
    tasks += static_cast<double>(tg.tasks.size()) / static_cast<double>(ps.size());
  }
  state.counters["segments"] = segments;
  state.counters["tasks"] = tasks;
  size_t i = 0;
  for (auto _ : state) {
    StepReport r = f.ev->evaluate(ps[i++ % ps.size()]);
    if (!r.ok) state.SkipWithError(r.message.c_str());
    benchmark::DoNotOptimize(r.step_ms);
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_alexnet_4dev_8mb_uniform(benchmark::State& s) { run(s, "alexnet", Kind::contiguous); }
void BM_alexnet_4dev_8mb_random(benchmark::State& s) { run(s, "alexnet", Kind::random); }
void BM_inception_v3_4dev_8mb_uniform(benchmark::State& s) { run(s, "inception_v3", Kind::contiguous); }
void BM_inception_v3_4dev_8mb_random(benchmark::State& s) { run(s, "inception_v3", Kind::random); }
void BM_alexnet_4dev_8mb_uniform_1f1b(benchmark::State& s) { run(s, "alexnet", Kind::one_f_one_b); }
void BM_inception_v3_4dev_replicated(benchmark::State& s) { run(s, "inception_v3", Kind::replicated); }
void BM_inception_v3_4dev_branch_parallel(benchmark::State& s) { run(s, "inception_v3", Kind::branch_parallel); }
void BM_inception_v3_4dev_replicated_1f1b(benchmark::State& s) { run(s, "inception_v3", Kind::replicated_1f1b); }
void BM_inception_v3_4dev_branch_parallel_1f1b(benchmark::State& s) {
  run(s, "inception_v3", Kind::branch_parallel_1f1b);
}
BENCHMARK(BM_alexnet_4dev_8mb_uniform);
BENCHMARK(BM_alexnet_4dev_8mb_uniform_1f1b);
BENCHMARK(BM_alexnet_4dev_8mb_random);
BENCHMARK(BM_inception_v3_4dev_8mb_uniform);
BENCHMARK(BM_inception_v3_4dev_8mb_random);
BENCHMARK(BM_inception_v3_4dev_replicated);
BENCHMARK(BM_inception_v3_4dev_branch_parallel);
BENCHMARK(BM_inception_v3_4dev_replicated_1f1b);
BENCHMARK(BM_inception_v3_4dev_branch_parallel_1f1b);

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

// The task graph's path (a timeline, the runtime): build the tasks, replay them; buffers reused.
void BM_inception_v3_branch_parallel_build_only(benchmark::State& state) {
  Fixture& f = fixture("inception_v3");
  TaskGraph tg;
  size_t i = 0;
  for (auto _ : state) {
    Status s = build_task_graph_into(f.graph, f.branch_parallel[i++ % f.branch_parallel.size()], f.cluster, 32, tg);
    benchmark::DoNotOptimize(s.ok());
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_inception_v3_branch_parallel_simulate_only(benchmark::State& state) {
  Fixture& f = fixture("inception_v3");
  TaskGraph tg = *build_task_graph(f.graph, f.branch_parallel[0], f.cluster, 32);
  for (auto _ : state) {
    StepReport r = simulate(tg, f.ev->cost(), {false});
    benchmark::DoNotOptimize(r.step_ms);
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_inception_v3_branch_parallel_validate_and_memory(benchmark::State& state) {
  Fixture& f = fixture("inception_v3");
  size_t i = 0;
  for (auto _ : state) {
    const Placement& p = f.branch_parallel[i++ % f.branch_parallel.size()];
    Status s = validate_placement(p, f.graph, f.cluster, 32);
    Status m = check_memory(p, f.graph, f.cluster, 32);
    benchmark::DoNotOptimize(s.ok() && m.ok());
  }
  state.SetItemsProcessed(state.iterations());
}
// The search's two parts: the segments and run order, then their replay.
void segments_only(benchmark::State& state, Kind kind) {
  Fixture& f = fixture("inception_v3");
  const auto& placements = placements_of(f, kind);
  SegmentGraph sg;
  size_t i = 0;
  for (auto _ : state) {
    Status s = build_segment_graph_into(f.graph, placements[i++ % placements.size()], f.cluster, 32, sg);
    benchmark::DoNotOptimize(s.ok());
  }
  state.SetItemsProcessed(state.iterations());
}
void BM_inception_v3_branch_parallel_segments_only(benchmark::State& state) {
  segments_only(state, Kind::branch_parallel);
}
void BM_inception_v3_branch_parallel_1f1b_segments_only(benchmark::State& state) {
  segments_only(state, Kind::branch_parallel_1f1b);
}
void BM_inception_v3_branch_parallel_segment_replay_only(benchmark::State& state) {
  Fixture& f = fixture("inception_v3");
  SegmentGraph sg;
  if (!build_segment_graph_into(f.graph, f.branch_parallel[0], f.cluster, 32, sg)) state.SkipWithError("no graph");
  for (auto _ : state) {
    StepReport r = simulate_segments(sg, f.ev->cost(), {false});
    benchmark::DoNotOptimize(r.step_ms);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_inception_v3_branch_parallel_build_only);
BENCHMARK(BM_inception_v3_branch_parallel_simulate_only);
BENCHMARK(BM_inception_v3_branch_parallel_segments_only);
BENCHMARK(BM_inception_v3_branch_parallel_1f1b_segments_only);
BENCHMARK(BM_inception_v3_branch_parallel_segment_replay_only);
BENCHMARK(BM_inception_v3_branch_parallel_validate_and_memory);

// What a proposal that recomputing does not fit costs the measurer before it
// is evaluated (core/memory_fit.h), with the LayerMover built once as the
// measurer builds it: gpt2_medium at batch 32 in `groups` equal groups, all
// on device `on` of a cluster of devices of `memory_mb` (group g's further
// replicas: `replicas[g]`, where given). The counter says whether it fits
// after its moves.
void move_layers_bench(benchmark::State& state, const std::vector<int64_t>& memory_mb, int groups, int on,
                       int micro_batches, const std::vector<std::vector<int>>& replicas = {}) {
  static const LayerGraph graph = *zoo_model("gpt2_medium");
  const Cluster cluster = devices_of(memory_mb);
  const int L = static_cast<int>(graph.layers.size());
  Placement p;
  for (int i = 0; i < L; ++i) p.layer_group.push_back(groups * i / L);
  p.group_device.assign(groups, on);
  p.group_replicas = replicas;
  p.micro_batches = micro_batches;
  const LayerMover mover(graph, cluster, 32);
  int64_t fitted = 0;
  for (auto _ : state) {
    Placement q = p;
    fitted += mover.fit(q);
  }
  state.counters["fitted"] = static_cast<double>(fitted) / static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations());
}
// Four groups on the 8 GB device of an edge cluster (1, 1 and 0.5 GB beside it), 32 micro-batches:
// runs of blocks go to the idle devices.
void BM_gpt2_medium_move_layers_to_fit(benchmark::State& state) {
  move_layers_bench(state, {8192, 1024, 1024, 512}, 4, 0, 32);
}
// One group on an 8 GB server beside a 1 GB edge device, 8 micro-batches: two doublings, then a
// run from the middle (neither end fits the edge device).
void BM_gpt2_medium_move_middle_run_to_fit(benchmark::State& state) {
  move_layers_bench(state, {1024, 8192}, 1, 1, 8);
}
// Three groups on the 8 GB device, the first also on two 1 GB devices: runs leave the replicated
// group, and the other groups' runs go to the idle devices.
void BM_gpt2_medium_move_replicated_to_fit(benchmark::State& state) {
  move_layers_bench(state, {8192, 1024, 1024, 1024, 1024}, 3, 0, 32, {{1, 2}, {}, {}});
}
// Four groups on a 2 GB device beside a 1 GB one, where nothing fits: what a hopeless proposal
// costs, every step's search included (no pair is looked for: more is over than is free).
void BM_gpt2_medium_move_nothing_fits(benchmark::State& state) {
  move_layers_bench(state, {2048, 1024}, 4, 0, 32);
}
BENCHMARK(BM_gpt2_medium_move_layers_to_fit);
BENCHMARK(BM_gpt2_medium_move_middle_run_to_fit);
BENCHMARK(BM_gpt2_medium_move_replicated_to_fit);
BENCHMARK(BM_gpt2_medium_move_nothing_fits);

}  // namespace

BENCHMARK_MAIN();
