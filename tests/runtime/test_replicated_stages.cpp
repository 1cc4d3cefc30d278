// Runtime tests of hybrid placements: replicated stages (PipeDream, PipeLearn's
// clients), branch-parallel placements of a model with branches, FedAvg-style
// aggregation every K steps, and their failures. Synchronous hybrid training
// must equal single-device training. Tiny models, few steps.
#include "tests/runtime/runtime_test_support.h"  // first: LibTorch + doctest

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cluster.h"
#include "core/placement.h"
#include "runtime/runtime.h"

using namespace tapp;
using namespace tapp::test;

namespace {

// Groups per layer; each group's devices, the first being group_device.
Placement hybrid(const std::vector<int>& layer_group, const std::vector<std::vector<int>>& group_devices,
                 int micro_batches, Schedule s, int aggregation_every = 1) {
  Placement p;
  p.layer_group = layer_group;
  for (const auto& devices : group_devices) {
    p.group_device.push_back(devices.front());
    p.group_replicas.emplace_back(devices.begin() + 1, devices.end());
  }
  p.micro_batches = micro_batches;
  p.schedule = s;
  p.aggregation_every = aggregation_every;
  p.source = "test";
  return p;
}

bool has_span(const StepReport& r, int device, const std::string& task) {
  for (const TimelineEntry& e : r.timeline)
    if (e.device == device && e.task == task) return true;
  return false;
}

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max<double>(d, std::fabs(a[i] - b[i]));
  return d;
}

// Runs `p` and checks that every replica of every group holds the parameters
// of single-device training, that every device used reports its own busy and
// idle time, and that each replica of a replicated group ran its all-reduce.
StepReport check_hybrid_equals_single(const LayerGraph& g, int devices, const Placement& p, bool replicated = true) {
  RunOptions o = test_options();
  RunResult r = run_placement(g, local_cluster(devices), p, o);
  INFO(failure_kind_name(r.report.failure_kind) << ": " << r.report.message);
  REQUIRE(r.report.ok);
  REQUIRE(r.report.devices.size() == static_cast<size_t>(devices));
  for (int d = 0; d < devices; ++d) {
    INFO("device d" << d);
    CHECK(r.report.devices[d].device == "d" + std::to_string(d));
    CHECK(r.report.devices[d].busy_ms > 0);
    CHECK(r.report.devices[d].idle_ms >= 0);
  }
  const auto want = reference_parameters(g, o);
  check_same_parameters(r.layer_parameters, want, g);
  check_trained(r.layer_parameters, g, o);
  REQUIRE(r.replica_parameters.size() == g.layers.size());
  int replicated_layers = 0;
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const int group = p.layer_group[l];
    if (g.layers[l].params == 0) continue;
    REQUIRE(r.replica_parameters[l].size() == static_cast<size_t>(p.replica_count(group) - 1));
    for (size_t k = 0; k < r.replica_parameters[l].size(); ++k) {
      INFO("layer " << g.layers[l].name << ", replica " << k + 1);
      CHECK(max_difference(r.replica_parameters[l][k], want[l]) < 1e-4);
      ++replicated_layers;
    }
  }
  CHECK((replicated_layers > 0) == replicated);
  // The k-th replicated group's all-reduce is "AR r<k>", as the simulator names it.
  for (int group = 0, k = 0; group < p.num_groups(); ++group)
    if (p.replica_count(group) > 1) {
      for (int d : p.devices_of_group(group)) {
        INFO("group " << group << " on d" << d);
        CHECK(has_span(r.report, d, "AR r" + std::to_string(k)));
      }
      ++k;
    }
  check_no_orphans(r);
  return r.report;
}

// A random placement of g on n devices that the parser would take or refuse:
// each layer joins its inputs' latest group or a later one (so the stage graph
// is acyclic, and parallel branches may part), a group gets one device or a
// replica set (weighted or not), any micro-batch count and schedule, some
// groups recompute, SGD or Adam.
Placement random_placement(const LayerGraph& g, int n, std::mt19937& rng) {
  auto coin = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const int max_groups = pick(1, 5);
  std::vector<int> group(g.layers.size());
  for (size_t l = 0; l < g.layers.size(); ++l) {
    int lo = 0;
    for (int in : g.layers[l].inputs) lo = std::max(lo, group[in]);
    group[l] = coin(0.2) ? pick(lo, std::max(lo, max_groups - 1)) : coin(0.25) ? std::min(lo + 1, max_groups - 1) : lo;
  }
  std::vector<int> renumber(max_groups, -1);
  Placement p;
  for (int& gr : group) {
    if (renumber[gr] < 0) renumber[gr] = p.add_group(pick(0, n - 1), coin(0.15));
    gr = renumber[gr];
  }
  p.layer_group = group;
  p.group_replicas.assign(p.num_groups(), {});
  p.group_replica_weights.assign(p.num_groups(), {});
  int most_replicas = 1;
  for (int gr = 0; gr < p.num_groups(); ++gr) {
    if (!coin(0.4)) continue;
    std::vector<int> others;
    for (int d = 0; d < n; ++d)
      if (d != p.group_device[gr]) others.push_back(d);
    std::shuffle(others.begin(), others.end(), rng);
    others.resize(pick(1, static_cast<int>(others.size())));
    p.group_replicas[gr] = others;
    if (coin(0.5))
      for (int k = 0; k <= static_cast<int>(others.size()); ++k) p.group_replica_weights[gr].push_back(pick(1, 3));
    most_replicas = std::max(most_replicas, 1 + static_cast<int>(others.size()));
  }
  const int counts[] = {1, 2, 3, 4, 6, 12};
  p.micro_batches = std::max(counts[pick(0, 5)], most_replicas);
  const Schedule schedules[] = {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved_1f1b,
                                Schedule::timed_1f1b};
  p.schedule = schedules[pick(0, 3)];
  p.optimizer = coin(0.3) ? Optimizer::adam : Optimizer::sgd;
  p.source = "random";
  return p;
}

// chain layers: fc0 relu0 fc1 | relu1 fc2 relu2 fc3
const std::vector<int> kChainTwoStages = {0, 0, 0, 1, 1, 1, 1};
// chain layers: fc0 relu0 | fc1 relu1 fc2 | relu2 fc3
const std::vector<int> kChainThreeStages = {0, 0, 1, 1, 1, 2, 2};
// branch_model: stem stem_relu | a a_relu | b b_tanh | cat c res flat fc
const std::vector<int> kBranchGroups = {0, 0, 1, 1, 2, 2, 3, 3, 3, 3, 3};

}  // namespace

TEST_SUITE("replicated stages") {

TEST_CASE("a replicated first stage (two clients, one server) trains like one device, GPipe and 1F1B") {
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b}) {
    INFO(schedule_name(s));
    check_hybrid_equals_single(chain_model(), 3, hybrid(kChainTwoStages, {{0, 1}, {2}}, 4, s));
  }
}

TEST_CASE("a replicated middle stage trains like one device, GPipe, 1F1B and timed 1F1B") {
  // d0 holds the first and the last stage; the middle one runs on d1 and d2.
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b, Schedule::timed_1f1b}) {
    INFO(schedule_name(s));
    check_hybrid_equals_single(chain_model(), 3, hybrid(kChainThreeStages, {{0}, {1, 2}, {0}}, 4, s));
  }
}

TEST_CASE("parallel branches on different devices, one of them replicated, train like one device, GPipe and 1F1B") {
  // Branch a on d1, branch b on d2 and d1 (d1 also holds branch a), stem and tail on d0.
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b}) {
    INFO(schedule_name(s));
    check_hybrid_equals_single(branch_model(), 3, hybrid(kBranchGroups, {{0}, {1}, {2, 1}, {0}}, 4, s));
  }
}

TEST_CASE("a copied group's towers on paired copies (the policy's spread) train like one device, GPipe and 1F1B") {
  // The stem on d0 and d1, branch b on d2 and d3 (micro-batch m's copy beside
  // the stem's copy of m), branch a and the tail on d0 and d1 again, in a
  // group of their own: placer/refine.h's spread_branches of a copied group.
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b}) {
    INFO(schedule_name(s));
    check_hybrid_equals_single(branch_model(), 4,
                               hybrid({0, 0, 1, 1, 2, 2, 1, 1, 1, 1, 1}, {{0, 1}, {0, 1}, {2, 3}}, 4, s));
  }
}

TEST_CASE("replicas with unequal weights (3 : 1 of the micro-batches) train like one device, GPipe and 1F1B") {
  for (Schedule s : {Schedule::gpipe, Schedule::one_f_one_b}) {
    INFO(schedule_name(s));
    Placement p = hybrid(kChainThreeStages, {{0}, {1, 2}, {0}}, 4, s);
    p.group_replica_weights = {{}, {3, 1}, {}};
    const StepReport r = check_hybrid_equals_single(chain_model(), 3, p);
    // The weights' order 0, 0, 1, 0: d2 runs micro-batch 2 of the middle stage, d1 the others.
    CHECK(has_span(r, 2, "F s1 m2"));
    for (int m : {0, 1, 3}) {
      CHECK(has_span(r, 1, "F s1 m" + std::to_string(m)));
      CHECK_FALSE(has_span(r, 2, "F s1 m" + std::to_string(m)));
    }
  }
}

TEST_CASE("two devices holding two stages each run interleaved 1F1B and train like one device") {
  // Virtual stages: d0 runs groups 0 and 2, d1 groups 1 and 3.
  check_hybrid_equals_single(chain_model(), 2, hybrid({0, 0, 1, 1, 2, 2, 3}, {{0}, {1}, {0}, {1}}, 4, Schedule::interleaved_1f1b),
                             false);
}

TEST_CASE("random hybrid placements of a chain and of a model with branches train like one device") {
  // Replicas (weighted or not), branches parted, devices holding several
  // groups, recomputation, the three synchronous schedules, SGD and Adam, drawn
  // at random: every one the parser takes must train exactly like one device.
  std::mt19937 rng(20261203);
  const int trials = 10;
  int ran = 0;
  for (int t = 0; t < trials; ++t) {
    const LayerGraph g = t % 2 ? branch_model() : chain_model();
    const int n = 3 + t % 2;
    Placement p = random_placement(g, n, rng);
    const Cluster c = local_cluster(n);
    RunOptions o = test_options();
    o.optimizer = p.optimizer;
    INFO("trial " << t << ": " << placement_to_json(p, g, c).dump());
    if (!validate_placement(p, g, c, o.batch_size)) continue;
    ++ran;
    RunResult r = run_placement(g, c, p, o);
    INFO(failure_kind_name(r.report.failure_kind) << ": " << r.report.message);
    REQUIRE(r.report.ok);
    const auto want = reference_parameters(g, o);
    check_same_parameters(r.layer_parameters, want, g);
    for (size_t l = 0; l < g.layers.size(); ++l)
      for (size_t k = 0; k < r.replica_parameters[l].size(); ++k) {
        INFO("layer " << g.layers[l].name << ", replica " << k + 1);
        CHECK(max_difference(r.replica_parameters[l][k], want[l]) < 1e-4);
      }
    check_no_orphans(r);
  }
  CHECK(ran >= trials / 2);  // the draw is not mostly refused placements
}

TEST_CASE("with aggregation every 2 steps the replicas differ after one step and hold the same average after two") {
  LayerGraph g = chain_model();
  RunOptions o = test_options();
  o.steps = 1;  // the timed step (its timeline is the report's) is the last one
  const Placement p = hybrid(kChainTwoStages, {{0, 1}, {2}}, 4, Schedule::one_f_one_b, 2);
  for (int steps : {1, 2}) {
    INFO(steps << " step(s)");
    o.warmup_steps = steps - 1;
    RunResult r = run_placement(g, local_cluster(3), p, o);
    INFO(failure_kind_name(r.report.failure_kind) << ": " << r.report.message);
    REQUIRE(r.report.ok);
    double replica_gap = 0;
    for (int l : {0, 2}) {  // fc0, fc1: the replicated stage's layers
      REQUIRE(r.replica_parameters[l].size() == 1);
      replica_gap = std::max(replica_gap, max_difference(r.layer_parameters[l], r.replica_parameters[l][0]));
    }
    if (steps == 1) {
      CHECK(replica_gap > 1e-5);  // each replica took a local step on its own share
      CHECK_FALSE(has_span(r.report, 0, "average r0"));
    } else {
      CHECK(replica_gap < 1e-6);  // averaged after the second update
      CHECK(has_span(r.report, 0, "average r0"));
      CHECK(has_span(r.report, 1, "average r0"));
    }
    CHECK_FALSE(has_span(r.report, 0, "AR r0"));  // no per-step gradient exchange
    check_trained(r.layer_parameters, g, o);
    for (int d = 0; d < 3; ++d) CHECK(r.report.devices[d].busy_ms > 0);
  }
}

TEST_CASE("a replica that dies where it would start its all-reduce fails the step with the reason, within the timeout") {
  RunOptions o = test_options();
  o.fault_rank = 1;  // d1: the second replica of the first stage
  o.fault_step = 1;
  o.fault_mode = "exit_at_allreduce";
  o.timeout_s = 20;
  auto t0 = std::chrono::steady_clock::now();
  RunResult r = run_placement(chain_model(), local_cluster(3), hybrid(kChainTwoStages, {{0, 1}, {2}}, 4, Schedule::gpipe), o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK_FALSE(r.report.ok);
  CHECK(r.report.failure_kind == FailureKind::worker_failed);
  CHECK(r.report.message.find("device 'd1'") != std::string::npos);
  INFO(r.report.message);
  CHECK(r.report.message.find("exited with code 3") != std::string::npos);
  // The surviving replica's reason follows the root cause.
  CHECK(r.report.message.find("then worker 0 (device 'd0')") != std::string::npos);
  CHECK(r.report.message.find("gradient all-reduce of group 0 (devices 'd0', 'd1') failed") != std::string::npos);
  CHECK(s < o.timeout_s);  // the failure is noticed, not waited out
  check_no_orphans(r);
}

TEST_CASE("replicated placements the runtime cannot run are refused before any worker starts, naming the field") {
  LayerGraph g = chain_model();
  Cluster c = local_cluster(3);
  RunOptions o = test_options();
  auto refused = [&](const Placement& p, FailureKind kind, const std::string& field) {
    RunResult r = run_placement(g, c, p, o);
    INFO(r.report.message);
    CHECK_FALSE(r.report.ok);
    CHECK(r.report.failure_kind == kind);
    CHECK(r.report.message.find(field) != std::string::npos);
    CHECK(r.local_worker_pids.empty());
  };
  refused(hybrid(kChainTwoStages, {{0, 0}, {2}}, 4, Schedule::gpipe), FailureKind::invalid_placement,
          "placement.groups[0][1]");
  refused(hybrid(kChainTwoStages, {{0, 7}, {2}}, 4, Schedule::gpipe), FailureKind::invalid_placement,
          "placement.groups[0][1]");
  refused(hybrid(kChainTwoStages, {{0, 1}, {2}}, 4, Schedule::gpipe, 0), FailureKind::invalid_placement,
          "placement.aggregation_every");
  // Two replicas need at least two micro-batches.
  refused(hybrid(kChainTwoStages, {{0, 1}, {2}}, 1, Schedule::gpipe), FailureKind::invalid_placement,
          "placement.micro_batches");
  // A replicated stage over its second replica's memory: fc0 12 -> 8192, fc1 8192 -> 16 (~0.23 M parameters).
  LayerGraph big = g;
  big.layers[0].attrs.out = 8192;
  REQUIRE(infer_shapes(big).is_ok());
  Cluster small = c;
  small.devices[1].memory_mb = 1;
  RunResult r = run_placement(big, small, hybrid(kChainTwoStages, {{0, 1}, {2}}, 4, Schedule::gpipe), o);
  CHECK(r.report.failure_kind == FailureKind::out_of_memory);
  CHECK(r.report.message.find("device 'd1' needs") != std::string::npos);
  CHECK(r.local_worker_pids.empty());
  o.fault_mode = "explode";
  o.fault_rank = 0;
  refused(hybrid(kChainTwoStages, {{0, 1}, {2}}, 4, Schedule::gpipe), FailureKind::invalid_options, "fault_mode");
}

}  // TEST_SUITE
