// Simulator and calibration: step times that can be computed by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "model/al_form.h"
#include "model/layer_graph.h"
#include "model/layer_library.h"
#include "simulator/calibration.h"
#include "simulator/data_parallel.h"
#include "core/cluster.h"
#include "simulator/simulator.h"
#include "simulator/task_graph.h"
#include "tests/model/flat_library.h"
#include "tests/simulator/fixtures.h"
#include "tests/simulator/task_graph_reference.h"

using namespace tapp;
using namespace tapp::test;

namespace {



// Links fast enough to be free.


StepReport run(const LayerGraph& g, const Cluster& c, const LayerLibrary& lib, const Placement& p, int64_t batch,
               const Calibration& cal = {}) {
  auto cost = CostModel::build(g, c, lib, cal);
  REQUIRE(cost.is_ok());
  Simulator sim(g, c, *cost, batch);
  return sim.evaluate(p);
}

}  // namespace

TEST_CASE("two equal stages with free links take (m + 1) x stage time under GPipe fill-drain") {
  LayerGraph g = chain(2);
  Cluster c = devices(2);
  for (int m : {1, 2, 4, 8}) {
    // Per micro-batch: forward 1 ms, backward 2 ms on each stage.
    const int64_t batch = 8;
    LayerLibrary lib = flat_library(g, batch / m, 1.0, 2.0);
    StepReport r = run(g, c, lib, by_device({0, 1}, m), batch);
    REQUIRE(r.ok);
    CHECK(r.step_ms == doctest::Approx((m + 1) * 3.0));
    CHECK(r.devices[0].busy_ms == doctest::Approx(m * 3.0));
    // As the runtime counts it, waiting for a remote input is communication:
    // stage 0 waits 3 ms for its first gradient, stage 1 1 ms for its first
    // activation and then idles 2 ms while stage 0 runs its last backward.
    CHECK(r.devices[0].comm_ms == doctest::Approx(3.0));
    CHECK(r.devices[0].idle_ms == doctest::Approx(0.0));
    CHECK(r.devices[1].comm_ms == doctest::Approx(1.0));
    CHECK(r.devices[1].idle_ms == doctest::Approx(2.0));
  }
}

TEST_CASE("a branch on another device starts when the fork is done, not after the fork's next layers") {
  // fc0 (the fork) -> fc1 | fc2 -> add3 = fc1 + fc2; fc2 on d1, the rest on d0;
  // every layer 1 ms each way, one micro-batch, free links. The fork ends its
  // segment, so fc2 runs beside fc1: forward fc0 [0, 1], fc1 and fc2 [1, 2],
  // add3 [2, 3]; backward add3 [3, 4], fc1 and fc2 [4, 5], fc0 [5, 6].
  // With fc0 and fc1 in one segment fc2 would wait for fc1: 8 ms, as on d0 alone.
  LayerGraph g;
  g.input_shape = {8};
  add_layer(g, "fc0", "linear", {});
  add_layer(g, "fc1", "linear", {0});
  add_layer(g, "fc2", "linear", {0});
  add_layer(g, "add3", "add", {1, 2});
  REQUIRE(infer_shapes(g).is_ok());
  Cluster c = devices(2);
  LayerLibrary lib = flat_library(g, 4, 1.0, 1.0);
  StepReport alone = run(g, c, lib, by_device({0, 0, 0, 0}, 1), 4);
  StepReport branches = run(g, c, lib, by_device({0, 0, 1, 0}, 1), 4);
  REQUIRE(alone.ok);
  REQUIRE(branches.ok);
  CHECK(alone.step_ms == doctest::Approx(8.0));
  CHECK(branches.step_ms == doctest::Approx(6.0));
  CHECK(branches.devices[1].busy_ms == doctest::Approx(2.0));
  auto tg = build_task_graph(g, by_device({0, 0, 1, 0}, 1), c, 4);
  REQUIRE(tg.is_ok());
  REQUIRE(tg->segments.size() == 4);  // fc0 | fc1 | fc2 | add3
  CHECK(tg->segments[0].stage == tg->segments[1].stage);  // one run on d0: one stage
  CHECK(tg->segments[2].stage == tg->segments[1].stage + 1);
}

TEST_CASE("S equal stages take (m + S - 1) x stage time; a single device takes m x its work") {
  for (int S : {1, 3, 4})
    for (int m : {1, 3, 6}) {
      LayerGraph g = chain(S);
      Cluster c = devices(S);
      std::vector<int> dev(S);
      for (int i = 0; i < S; ++i) dev[i] = i;
      LayerLibrary lib = flat_library(g, 6 / m, 1.5, 2.5);
      StepReport r = run(g, c, lib, by_device(dev, m), 6);
      REQUIRE(r.ok);
      CHECK(r.step_ms == doctest::Approx((m + S - 1) * 4.0));
    }
}

TEST_CASE("unequal stages: GPipe step is fill + (m - 1) x the slowest stage + drain") {
  // Stage 0 has 1 layer (f=1,b=1), stage 1 has 3 layers (f=3,b=3); free links.
  LayerGraph g = chain(4);
  Cluster c = devices(2);
  const int m = 4;
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  StepReport r = run(g, c, lib, by_device({0, 1, 1, 1}, m), m);
  REQUIRE(r.ok);
  // Forward: stage 1 runs its 4 forwards back to back from t=1 (ends 1 + 4*3 = 13),
  // then its 4 backwards (ends 25); stage 0's last backward follows: 26.
  CHECK(r.step_ms == doctest::Approx(1 + m * 3 + m * 3 + 1));
}

TEST_CASE("a transfer-bound link serializes the micro-batches' transfers") {
  LayerGraph g = chain(2);
  Cluster c = devices(2);
  // 2 samples x 32 bytes = 512 bits per message; 0.0512 Mbps -> 10 ms each.
  c.default_link.bandwidth_mbps = 0.0512;
  const int m = 4;
  LayerLibrary lib = flat_library(g, 2, 1.0, 1.0);  // 1 ms per micro-batch (2 samples)
  StepReport r = run(g, c, lib, by_device({0, 1}, m), 8);
  REQUIRE(r.ok);
  // f + m X (activations) + f + b + m X (gradients) + b.
  CHECK(r.step_ms == doctest::Approx(2 + 2 + 2 * m * 10.0));
  CHECK(r.comm_fraction > 0.5);
  CHECK(r.devices[1].busy_ms == doctest::Approx(m * 2.0));
}

TEST_CASE("asymmetric links: a slow up link and a fast down link are costed per direction") {
  LayerGraph g = chain(2);
  Cluster c = devices(2);
  c.links.push_back(Link{"d0", "d1", 0.0512, 0});  // 10 ms per message
  c.links.push_back(Link{"d1", "d0", 1.024, 0});   // 0.5 ms per message
  const int m = 4;
  LayerLibrary lib = flat_library(g, 2, 1.0, 1.0);
  StepReport up_slow = run(g, c, lib, by_device({0, 1}, m), 8);
  REQUIRE(up_slow.ok);
  // 2f + m X + (m + 1) b + Y
  CHECK(up_slow.step_ms == doctest::Approx(2 + 40 + 5 + 0.5));
  // The same placement with the devices swapped sends activations over the fast link.
  Placement swapped = by_device({0, 1}, m);
  swapped.group_device = {1, 0};
  StepReport down_slow = run(g, c, lib, swapped, 8);
  REQUIRE(down_slow.ok);
  // f + X' + m f ... : forwards end at (m + 1) f + 0.5, gradients serialize: + b + m x 10, + b.
  CHECK(down_slow.step_ms == doctest::Approx(5.5 + 1 + 40 + 1));
}

TEST_CASE("a device's sends share one queue (the runtime's sender thread) unless links are modelled apart") {
  // d0 feeds d1 and d2 from one layer each; each message takes 10 ms.
  LayerGraph g;
  g.name = "fanout";
  g.input_shape = {8};
  add_layer(g, "a", "linear", {});
  add_layer(g, "b", "linear", {0});
  add_layer(g, "c", "linear", {0});
  add_layer(g, "d", "add", {1, 2});
  REQUIRE(infer_shapes(g).is_ok());
  Cluster c = devices(3);
  c.default_link.bandwidth_mbps = 0.0256;  // 1 sample x 32 bytes = 256 bits -> 10 ms
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  Placement p;
  p.layer_group = {0, 1, 2, 0};
  p.group_device = {0, 1, 2};
  auto cost = CostModel::build(g, c, lib);
  REQUIRE(cost.is_ok());
  auto tg = build_task_graph(g, p, c, 1);
  REQUIRE(tg.is_ok());
  StepReport shared = simulate(*tg, *cost);
  SimulateOptions per_link;
  per_link.send_queue_per_device = false;
  StepReport apart = simulate(*tg, *cost, per_link);
  REQUIRE(shared.ok);
  REQUIRE(apart.ok);
  // Per link: F 1 + X 10 + F 1 + X 10 + F 1 + B 1 + G 10 + B 1 + G 10 + B 1 = 46.
  CHECK(apart.step_ms == doctest::Approx(46.0));
  // Shared queue: d0's second activation and second gradient each wait 10 ms more.
  CHECK(shared.step_ms == doctest::Approx(66.0));
}

TEST_CASE("latency is paid once per message and the device's sends do not block its compute") {
  LayerGraph g = chain(2);
  Cluster c = devices(2);
  c.default_link.latency_ms = 0.25;
  const int m = 4;
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  StepReport r = run(g, c, lib, by_device({0, 1}, m), m);
  REQUIRE(r.ok);
  // Two stage crossings (activation of m0 and gradient of m_{m-1}) on the critical path.
  CHECK(r.step_ms == doctest::Approx((m + 1) * 2.0 + 2 * 0.25));
  // Device 0's forwards run back to back although it sends after each one.
  int f_end_3 = -1;
  for (const auto& e : r.timeline)
    if (e.task == "F s0 m3") {
      CHECK(e.end_ms == doctest::Approx(4.0));
      f_end_3 = 1;
    }
  CHECK(f_end_3 == 1);
}

TEST_CASE("1F1B on equal stages finishes in the fill-drain time and keeps fewer activations") {
  LayerGraph g = chain(2);
  Cluster c = devices(2);
  const int m = 8;
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  StepReport gp = run(g, c, lib, by_device({0, 1}, m, Schedule::gpipe), m);
  StepReport ofob = run(g, c, lib, by_device({0, 1}, m, Schedule::one_f_one_b), m);
  REQUIRE(gp.ok);
  REQUIRE(ofob.ok);
  CHECK(ofob.step_ms == doctest::Approx((m + 1) * 2.0));
  CHECK(ofob.devices[0].peak_memory_bytes < gp.devices[0].peak_memory_bytes);
}

TEST_CASE("the timeline names tasks as the runtime does") {
  LayerGraph g = chain(3);
  Cluster c = devices(2);
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  StepReport r = run(g, c, lib, by_device({0, 1, 1}, 2), 2);
  REQUIRE(r.ok);
  std::vector<std::string> names;
  for (const auto& e : r.timeline) names.push_back(e.task);
  for (const char* want : {"F s0 m0", "F s1 m1", "B s1 m0", "B s0 m1", "X s0->s1 m0", "G s1->s0 m1"})
    CHECK_MESSAGE(std::count(names.begin(), names.end(), want) == 1, want);
  CHECK(r.timeline.size() == 2u * (2 + 2 + 2));
  for (const auto& e : r.timeline) CHECK(e.end_ms >= e.start_ms);
}

TEST_CASE("invalid placements come back as failures, never exceptions") {
  LayerGraph g = chain(3);
  Cluster c = devices(2);
  LayerLibrary lib = flat_library(g, 4, 1.0, 1.0);
  auto cost = CostModel::build(g, c, lib);
  REQUIRE(cost.is_ok());
  Simulator sim(g, c, *cost, 4);
  Placement wrong_size = by_device({0, 1}, 1);
  StepReport r = sim.evaluate(wrong_size);
  CHECK_FALSE(r.ok);
  CHECK(r.failure_kind == FailureKind::invalid_placement);
  CHECK(r.message.find("3 layers") != std::string::npos);
  Placement bad_device = by_device({0, 1, 5}, 1);
  CHECK(sim.evaluate(bad_device).failure_kind == FailureKind::invalid_placement);
  Placement too_many_micro_batches = by_device({0, 1, 1}, 9);
  CHECK(sim.evaluate(too_many_micro_batches).failure_kind == FailureKind::invalid_placement);
}

TEST_CASE("a placement over a device's memory is an out_of_memory failure naming the device") {
  LayerGraph g = chain(2);
  Layer big;
  big.name = "big";
  big.op = "linear";
  big.attrs.out = 16384;
  big.inputs = {1};
  g.layers.push_back(big);
  REQUIRE(infer_shapes(g).is_ok());
  Cluster c = devices(2);
  c.devices[1].memory_mb = 1;  // the 8x16384 layer's weights, gradients and state need 3 x 0.5 MB
  LayerLibrary lib = flat_library(g, 4, 1.0, 1.0);
  StepReport fits = run(g, c, lib, by_device({1, 1, 0}, 1), 4);
  CHECK(fits.ok);
  StepReport over = run(g, c, lib, by_device({0, 0, 1}, 1), 4);
  CHECK_FALSE(over.ok);
  CHECK(over.failure_kind == FailureKind::out_of_memory);
  CHECK(over.message.find("d1") != std::string::npos);
}

TEST_CASE("device speed stretches compute by 1/speed") {
  LayerGraph g = chain(1);
  Cluster c = devices(1);
  c.devices[0].speed = 0.5;
  LayerLibrary lib = flat_library(g, 4, 1.0, 3.0);
  StepReport r = run(g, c, lib, by_device({0}, 1), 4);
  REQUIRE(r.ok);
  CHECK(r.step_ms == doctest::Approx(8.0));
}

TEST_CASE("a device faster than this host (speed 4) is simulated with its compute divided by 4") {
  LayerGraph g = chain(1);
  Cluster c = devices(1);
  c.devices[0].speed = 4;
  LayerLibrary lib = flat_library(g, 4, 1.0, 3.0);
  StepReport r = run(g, c, lib, by_device({0}, 1), 4);
  REQUIRE(r.ok);
  CHECK(r.step_ms == doctest::Approx(1.0));
}

TEST_CASE("the optimizer update runs at this host's rate on a slower device and at its speed on a faster one") {
  // The runtime emulates a slower device on its tasks only, so its update is measured at
  // the host's rate; a faster device (simulated only) updates faster by its speed.
  LayerGraph g = chain(1);
  LayerLibrary lib = flat_library(g, 4, 1.0, 3.0);
  Calibration cal;
  cal.update_ms_per_param_mb = 1000;  // 1 ms per kB of parameters
  const double host_update = 1000 * g.layers[0].param_bytes() / 1e6;
  REQUIRE(host_update > 0);
  const std::vector<std::pair<double, double>> speed_and_step{
      {0.5, 8.0 + host_update}, {1.0, 4.0 + host_update}, {4.0, 1.0 + host_update / 4}};
  for (const auto& [speed, step] : speed_and_step) {
    CAPTURE(speed);
    Cluster c = devices(2);
    for (Device& d : c.devices) d.speed = speed;
    StepReport r = run(g, c, lib, by_device({0}, 1), 4, cal);
    REQUIRE(r.ok);
    CHECK(r.step_ms == doctest::Approx(step));
    // Whole-model replicas on both devices: the same update after their compute.
    auto with_update = CostModel::build(g, c, lib, cal);
    auto free_update = CostModel::build(g, c, lib, Calibration{});
    REQUIRE(with_update.is_ok());
    REQUIRE(free_update.is_ok());
    StepReport replicas = simulate_data_parallel(g, c, *with_update, 4, {0, 1}, false);
    StepReport replicas_free = simulate_data_parallel(g, c, *free_update, 4, {0, 1}, false);
    REQUIRE(replicas.ok);
    REQUIRE(replicas_free.ok);
    CHECK(replicas.step_ms - replicas_free.step_ms == doctest::Approx(host_update * std::min(1.0, 1 / speed)));
  }
}

TEST_CASE("each device is priced from its own cost table when it has one, from the shared libraries otherwise") {
  LayerGraph g = chain(2);
  Cluster c = devices(3);
  c.devices[2].speed = 2;
  const LayerLibrary shared = flat_library(g, 4, 1.0, 2.0);
  LayerLibrary measured_elsewhere = flat_library(g, 4, 5.0, 7.0);
  measured_elsewhere.rows[1].forward_ms = 11.0;
  std::vector<std::vector<LayerLibrary>> own(3);
  own[1] = {measured_elsewhere};
  own[2] = {measured_elsewhere};
  auto cost = CostModel::build(g, c, {shared}, own);
  REQUIRE_MESSAGE(cost.is_ok(), cost.error_message());
  CHECK(cost->raw_compute_ms(0, 0, 1, 4, false) == doctest::Approx(2.0));   // this host's profile
  CHECK(cost->raw_compute_ms(1, 0, 1, 4, false) == doctest::Approx(16.0));  // its own table, layer by layer
  CHECK(cost->raw_compute_ms(1, 1, 1, 4, false) == doctest::Approx(11.0));
  CHECK(cost->raw_compute_ms(1, 0, 1, 4, true) == doctest::Approx(14.0));
  CHECK(cost->raw_compute_ms(2, 0, 1, 4, false) == doctest::Approx(8.0));   // its own table / speed 2
  // Every device with its own costs: no shared library needed.
  std::vector<std::vector<LayerLibrary>> all_own(3, std::vector<LayerLibrary>{measured_elsewhere});
  CHECK(CostModel::build(g, c, {}, all_own).is_ok());
  CHECK(CostModel::build(g, c, {}, own).error_message() == "cost model: no layer library");
  // An own table for another model names the device.
  own[1] = {flat_library(chain(3), 4, 1.0, 1.0)};
  auto wrong = CostModel::build(g, c, {shared}, own);
  REQUIRE_FALSE(wrong.is_ok());
  CHECK(wrong.error_message().rfind("devices[1] (d1): layer library 0", 0) == 0);
}

TEST_CASE("a cost model for a library of another model is an error naming both sizes") {
  LayerGraph g = chain(3);
  LayerLibrary lib = flat_library(chain(2), 4, 1.0, 1.0);
  auto cost = CostModel::build(g, devices(2), lib);
  REQUIRE_FALSE(cost.is_ok());
  CHECK(cost.error_message().find("2 rows") != std::string::npos);
  CHECK(cost.error_message().find("3 layers") != std::string::npos);
}

TEST_CASE("calibration recovers known device factors and overheads from measured steps") {
  LayerGraph g = chain(6);
  Cluster c = devices(3);
  c.default_link.bandwidth_mbps = 1.0;
  c.default_link.latency_ms = 0.1;
  LayerLibrary lib = flat_library(g, 4, 1.0, 2.0);
  auto base = CostModel::build(g, c, lib);
  REQUIRE(base.is_ok());
  Calibration truth;
  truth.device_factor = {1.5, 0.8, 1.2};
  truth.task_overhead_ms = 0.3;
  truth.message_overhead_ms = 0.2;
  truth.step_overhead_ms = 1.0;
  CostModel real = base->with_calibration(truth);
  std::mt19937 rng(7);
  std::vector<CalibrationSample> samples;
  Simulator sim(g, c, real, 8);
  for (int i = 0; i < 30; ++i) {
    std::vector<int> dev(6);
    for (int& d : dev) d = static_cast<int>(rng() % 3);
    Placement p;
    p.layer_group = dev;
    p.group_device = {0, 1, 2};
    p.micro_batches = 1 << (rng() % 4);
    StepReport measured = sim.evaluate(p, {false});
    REQUIRE(measured.ok);
    samples.push_back({p, measured});
  }
  CalibrationOptions untied;
  untied.tie_identical_devices = false;
  auto fit = calibrate(g, c, *base, 8, samples, untied);
  REQUIRE(fit.is_ok());
  CHECK(fit->before.median_abs_rel_error > 0.1);
  CHECK(fit->after.median_abs_rel_error < 0.01);
  CHECK(fit->after.spearman > 0.99);
  CHECK(fit->calibration.factor(0) == doctest::Approx(1.5).epsilon(0.05));
  // Tied, identical devices share one factor.
  auto tied = calibrate(g, c, *base, 8, samples);
  REQUIRE(tied.is_ok());
  CHECK(tied->calibration.factor(0) == tied->calibration.factor(1));
  CHECK(tied->calibration.factor(1) == tied->calibration.factor(2));
}

TEST_CASE("one calibration is fitted on the measured steps of two models on the same cluster") {
  // The corrections are the cluster's (device factors, per-task and per-step
  // costs); each model's samples are replayed with its own layer costs.
  Cluster c = devices(2);
  LayerGraph small = chain(4), large = chain(8);
  auto small_base = CostModel::build(small, c, flat_library(small, 4, 1.0, 2.0));
  auto large_base = CostModel::build(large, c, flat_library(large, 4, 3.0, 6.0));
  REQUIRE(small_base.is_ok());
  REQUIRE(large_base.is_ok());
  Calibration truth;
  truth.device_factor = {1.4, 1.4};
  truth.step_overhead_ms = 2.0;
  std::mt19937 rng(11);
  auto measured_samples = [&](const LayerGraph& g, const CostModel& base, int n) {
    Simulator real(g, c, base.with_calibration(truth), 8);
    std::vector<CalibrationSample> out;
    for (int i = 0; i < n; ++i) {
      Placement p;
      p.layer_group.assign(g.layers.size(), 0);
      for (size_t l = g.layers.size() / 2; l < g.layers.size(); ++l) p.layer_group[l] = 1;
      p.group_device = {static_cast<int>(rng() % 2), 0};
      p.group_device[1] = 1 - p.group_device[0];
      p.micro_batches = 1 << (rng() % 3);
      StepReport m = real.evaluate(p, {false});
      REQUIRE(m.ok);
      out.push_back({p, m});
    }
    return out;
  };
  std::vector<CalibrationWorkload> workloads = {{&small, &*small_base, 8, measured_samples(small, *small_base, 4)},
                                                {&large, &*large_base, 8, measured_samples(large, *large_base, 4)}};
  auto fit = calibrate(c, workloads);
  REQUIRE_MESSAGE(fit.is_ok(), fit.error_message());
  CHECK(fit->measured.size() == 8);
  CHECK(fit->before.median_abs_rel_error > 0.1);
  CHECK(fit->after.median_abs_rel_error < 0.02);
  CHECK(fit->calibration.factor(0) == doctest::Approx(1.4).epsilon(0.05));
}

TEST_CASE("spearman is 1 for the same order, -1 for the reverse, and handles ties") {
  CHECK(spearman({1, 2, 3, 4}, {10, 20, 30, 40}) == doctest::Approx(1.0));
  CHECK(spearman({1, 2, 3, 4}, {4, 3, 2, 1}) == doctest::Approx(-1.0));
  CHECK(spearman({1, 1, 2}, {5, 5, 6}) == doctest::Approx(1.0));
  AccuracyStats s = accuracy({11, 9, 20}, {10, 10, 20});
  CHECK(s.median_abs_rel_error == doctest::Approx(0.1));
}

namespace {
// fc0 -> {fc1, fc2} -> add3 -> fc4 -> add5 (+ fc0): branches and a skip connection.
LayerGraph branchy() {
  LayerGraph g;
  g.name = "branchy";
  g.input_shape = {8};
  add_layer(g, "fc0", "linear", {});
  add_layer(g, "fc1", "linear", {0});
  add_layer(g, "fc2", "linear", {0});
  add_layer(g, "add3", "add", {1, 2});
  add_layer(g, "fc4", "linear", {3});
  add_layer(g, "add5", "add", {4, 0});
  add_layer(g, "fc6", "linear", {5});
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

void check_same(const TaskGraph& a, const TaskGraph& b) {
  REQUIRE(a.segments.size() == b.segments.size());
  for (size_t s = 0; s < a.segments.size(); ++s) {
    CHECK(a.segments[s].devices == b.segments[s].devices);
    CHECK(a.segments[s].layers == b.segments[s].layers);
    CHECK(a.segments[s].preds == b.segments[s].preds);
    CHECK(a.segments[s].succs == b.segments[s].succs);
    CHECK(a.segments[s].reads_model_input == b.segments[s].reads_model_input);
    CHECK(a.segments[s].computes_loss == b.segments[s].computes_loss);
    CHECK(a.segments[s].param_bytes == b.segments[s].param_bytes);
    CHECK(a.segments[s].stage == b.segments[s].stage);
  }
  REQUIRE(a.tasks.size() == b.tasks.size());
  for (size_t t = 0; t < a.tasks.size(); ++t) {
    const Task &x = a.tasks[t], &y = b.tasks[t];
    CHECK(x.kind == y.kind);
    CHECK(x.segment == y.segment);
    CHECK(x.peer_segment == y.peer_segment);
    CHECK(x.micro_batch == y.micro_batch);
    CHECK(x.device == y.device);
    CHECK(x.to_device == y.to_device);
    CHECK(x.bytes == y.bytes);
    CHECK(x.remote_input == y.remote_input);
    CHECK(a.deps(x).to_vector() == b.deps(y).to_vector());
  }
  CHECK(a.device_order == b.device_order);
  CHECK(a.forward_task == b.forward_task);
  CHECK(a.backward_task == b.backward_task);
  CHECK(a.micro_batch_sizes == b.micro_batch_sizes);
  CHECK(a.num_devices == b.num_devices);
}
}  // namespace

TEST_CASE("the buffer-reusing task-graph builder matches the reference builder task for task") {
  std::mt19937 rng(3);
  TaskGraph reused;
  for (const LayerGraph& g : {chain(7), branchy()}) {
    Cluster c = devices(3);
    for (int trial = 0; trial < 150; ++trial) {
      // Timed 1F1B orders by estimated times: devices of other speeds, links of other bandwidths.
      for (Device& d : c.devices) d.speed = std::vector<double>{0.05, 0.5, 1, 4}[rng() % 4];
      c.default_link.bandwidth_mbps = std::vector<double>{1e-3, 1, 1e12}[rng() % 3];
      c.default_link.latency_ms = rng() % 2 ? 0.0 : 0.5;
      Placement p;
      p.group_device = {0, 1, 2};
      for (size_t i = 0; i < g.layers.size(); ++i) p.layer_group.push_back(static_cast<int>(rng() % 3));
      p.micro_batches = 1 + static_cast<int>(rng() % 5);
      p.schedule =
          std::vector<Schedule>{Schedule::gpipe, Schedule::one_f_one_b, Schedule::timed_1f1b}[rng() % 3];
      auto ref = reference::build_task_graph(g, p, c, 9);
      auto fresh = build_task_graph(g, p, c, 9);
      REQUIRE(ref.is_ok());
      REQUIRE(fresh.is_ok());
      check_same(*fresh, *ref);
      REQUIRE(build_task_graph_into(g, p, c, 9, reused).is_ok());
      check_same(reused, *ref);
    }
  }
}

TEST_CASE("costs follow the profiled batch sizes: exact at each, interpolated between, affine above") {
  LayerGraph g = chain(2);
  Cluster c = devices(1);
  LayerLibrary at1 = flat_library(g, 1, 2.0, 4.0);    // 2 ms forward per layer for 1 sample
  LayerLibrary at8 = flat_library(g, 8, 6.0, 12.0);   // 6 ms for 8 samples: far from 8 x 2
  auto cost = CostModel::build(g, c, std::vector<LayerLibrary>{at8, at1});
  REQUIRE(cost.is_ok());
  CHECK(cost->profiled_batch_sizes(0) == std::vector<int64_t>{1, 8});
  CHECK(cost->forward_ms(0, 0, 1, 1) == doctest::Approx(4.0));
  CHECK(cost->forward_ms(0, 0, 1, 8) == doctest::Approx(12.0));
  CHECK(cost->forward_ms(0, 0, 0, 4) == doctest::Approx(2.0 + 4.0 * 3 / 7));
  CHECK(cost->backward_ms(0, 1, 1, 16) == doctest::Approx(12.0 + 8.0 * 8 / 7));
  // One profile: linear in the samples.
  auto linear = CostModel::build(g, c, at8);
  REQUIRE(linear.is_ok());
  CHECK(linear->forward_ms(0, 0, 1, 2) == doctest::Approx(3.0));
  // Micro-batches of one sample pay the batch-1 price in the simulation.
  Simulator sim(g, c, *cost, 8);
  Placement p;
  p.layer_group = {0, 0};
  p.group_device = {0};
  p.micro_batches = 8;
  StepReport r = sim.evaluate(p);
  REQUIRE(r.ok);
  CHECK(r.step_ms == doctest::Approx(8 * (4.0 + 8.0)));
}

TEST_CASE("a noisy profile cannot make a layer cheaper at more samples, nor flatten the extrapolation") {
  LayerGraph g = chain(1);
  Cluster c = devices(1);
  LayerLibrary at1 = flat_library(g, 1, 2.0, 2.0);
  LayerLibrary at4 = flat_library(g, 4, 9.0, 9.0);  // measured while the machine was busy
  LayerLibrary at8 = flat_library(g, 8, 8.0, 8.0);  // less than at 4: noise
  auto cost = CostModel::build(g, c, std::vector<LayerLibrary>{at1, at4, at8});
  REQUIRE(cost.is_ok());
  CHECK(cost->forward_ms(0, 0, 0, 8) == doctest::Approx(9.0));  // raised to the batch-4 figure
  // Above 8: the average marginal cost (9 - 2) / 7 per sample, not the flat 4 -> 8 segment.
  CHECK(cost->forward_ms(0, 0, 0, 15) == doctest::Approx(9.0 + 7.0));
}

TEST_CASE("local devices that compute at once slow each other by the calibrated concurrency slowdown") {
  LayerGraph g = chain(2);
  Cluster c = devices(2);
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  Calibration cal;
  cal.concurrency_slowdown = 0.5;  // each stage's compute x (1 + 0.5 x 1 other local device)
  const int m = 4;
  StepReport two = run(g, c, lib, by_device({0, 1}, m), m, cal);
  REQUIRE(two.ok);
  CHECK(two.step_ms == doctest::Approx((m + 1) * 2.0 * 1.5));
  StepReport one = run(g, c, lib, by_device({0, 0}, m), m, cal);  // alone: no slowdown
  REQUIRE(one.ok);
  CHECK(one.step_ms == doctest::Approx(m * 4.0));
  c.devices[1].where = "10.0.0.2:7000";  // a remote device does not share the machine
  StepReport remote = run(g, c, lib, by_device({0, 1}, m), m, cal);
  REQUIRE(remote.ok);
  CHECK(remote.step_ms == doctest::Approx((m + 1) * 2.0));
}

TEST_CASE("a slow device's sends leave when its stretched task ends, as the runtime releases them") {
  LayerGraph g = chain(2);
  Cluster c = devices(2);
  c.devices[0].speed = 0.5;  // its 1 ms tasks take 2 ms
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  auto cost = CostModel::build(g, c, lib);
  REQUIRE(cost.is_ok());
  auto tg = build_task_graph(g, by_device({0, 1}, 1), c, 1);
  REQUIRE(tg.is_ok());
  // F0 [0, 2]; F1 [2, 3]; B1 [3, 4]; B0 [4, 6].
  CHECK(simulate(*tg, *cost).step_ms == doctest::Approx(6.0));
}

// ---------------------------------------------------------------- replicated groups, branch parallelism

namespace {
Placement with_replicas(const std::vector<int>& layer_group, const std::vector<std::vector<int>>& group_devices,
                        int micro_batches) {
  Placement p;
  p.layer_group = layer_group;
  for (const auto& devs : group_devices) {
    p.group_device.push_back(devs[0]);
    p.group_replicas.emplace_back(devs.begin() + 1, devs.end());
  }
  p.micro_batches = micro_batches;
  return p;
}

// Every link: 1 ms latency, 0.0256 Mbps (one byte = 0.3125 ms): a sample's
// 32 activation bytes take 1 + 10 = 11 ms; a ring step of half of a
// linear(8, 8) layer's 288 parameter bytes takes 1 + 45 = 46 ms.
Cluster slow_links(int n) {
  Cluster c = devices(n);
  c.default_link.bandwidth_mbps = 0.0256;
  c.default_link.latency_ms = 1;
  return c;
}

bool has_line(const StepReport& r, int device, const std::string& name, double start, double end) {
  for (const TimelineEntry& e : r.timeline)
    if (e.device == device && e.task == name && std::abs(e.start_ms - start) < 1e-9 && std::abs(e.end_ms - end) < 1e-9)
      return true;
  return false;
}
}  // namespace

TEST_CASE("a replicated first stage: replicas run alternate micro-batches, then all-reduce over their link") {
  // fc0 on {d0, d1}, fc1 on d2; 2 micro-batches of 1 sample; each layer 1 ms
  // forward and 2 ms backward per sample. GPipe, one send queue per device:
  //   d0: F0 m0 [0, 1], X m0 -> d2 [1, 12]     d1: F0 m1 [0, 1], X m1 -> d2 [1, 12]
  //   d2: F1 m0 [12, 13], F1 m1 [13, 14], B1 m0 [14, 16], B1 m1 [16, 18];
  //       its sends queue: G m0 -> d0 [16, 27], G m1 -> d1 [27, 38]
  //   d0: B0 m0 [27, 29]                        d1: B0 m1 [38, 40]
  //   allreduce of fc0's 288 bytes among {d0, d1}: 2 (r - 1) = 2 ring steps of
  //   144 bytes, 46 ms each (the slowest ring link): [40, 132]. Step: 132 ms.
  LayerGraph g = chain(2);
  Cluster c = slow_links(3);
  REQUIRE(g.layers[0].param_bytes() == 288);
  LayerLibrary lib = flat_library(g, 1, 1.0, 2.0);
  StepReport r = run(g, c, lib, with_replicas({0, 1}, {{0, 1}, {2}}, 2), 2);
  REQUIRE(r.ok);
  CHECK(r.step_ms == doctest::Approx(132.0));
  CHECK(has_line(r, 0, "AR r0", 40, 132));
  CHECK(has_line(r, 1, "AR r0", 40, 132));
  CHECK(has_line(r, 1, "B s0 m1", 38, 40));
  CHECK(r.devices[0].busy_ms == doctest::Approx(3.0));  // one micro-batch each
  CHECK(r.devices[1].busy_ms == doctest::Approx(3.0));
}

TEST_CASE("aggregation_every = K charges the replicas' parameter averaging once every K steps, amortised") {
  // As above without the allreduce task: d0 ends its last backward at 29, d1
  // at 40; each is charged 92 / 4 = 23 ms per step for the averaging. Step: 63 ms.
  LayerGraph g = chain(2);
  Cluster c = slow_links(3);
  LayerLibrary lib = flat_library(g, 1, 1.0, 2.0);
  Placement p = with_replicas({0, 1}, {{0, 1}, {2}}, 2);
  p.aggregation_every = 4;
  StepReport r = run(g, c, lib, p, 2);
  REQUIRE(r.ok);
  CHECK(r.step_ms == doctest::Approx(63.0));
  CHECK(r.devices[1].comm_ms == doctest::Approx(38.0 - 1.0 + 23.0));  // waited for its gradient, then averaging
}

TEST_CASE("a replicated middle stage receives from and sends to whichever replica runs the micro-batch") {
  // fc0 on d0, fc1 on {d1, d2}, fc2 on d3; 2 micro-batches of 1 sample; same costs and links:
  //   d0: F0 m0 [0, 1], F0 m1 [1, 2]; sends X m0 -> d1 [1, 12], X m1 -> d2 [12, 23]
  //   d1: F1 m0 [12, 13], X -> d3 [13, 24]      d2: F1 m1 [23, 24], X -> d3 [24, 35]
  //   d3: F2 m0 [24, 25], F2 m1 [35, 36], B2 m0 [36, 38], B2 m1 [38, 40];
  //       sends G m0 -> d1 [38, 49], G m1 -> d2 [49, 60]
  //   d1: B1 m0 [49, 51], G -> d0 [51, 62]      d2: B1 m1 [60, 62], G -> d0 [62, 73]
  //   d0: B0 m0 [62, 64], B0 m1 [73, 75]
  //   allreduce among {d1, d2}: after B1 m1 (62) and behind d2's last send (73): [73, 165].
  LayerGraph g = chain(3);
  Cluster c = slow_links(4);
  LayerLibrary lib = flat_library(g, 1, 1.0, 2.0);
  StepReport r = run(g, c, lib, with_replicas({0, 1, 2}, {{0}, {1, 2}, {3}}, 2), 2);
  REQUIRE(r.ok);
  CHECK(r.step_ms == doctest::Approx(165.0));
  CHECK(has_line(r, 0, "B s0 m1", 73, 75));
  CHECK(has_line(r, 2, "AR r0", 73, 165));
}

TEST_CASE("heterogeneous replicas: the slow replica decides the step, the slowest ring link the allreduce") {
  // fc0 on {d0, d1}, fc1 on d2; 1 ms per layer per sample both ways; free links.
  //   d0: F0 m0 [0, 1]          d1 (speed 0.5): F0 m1 [0, 2]
  //   d2: F1 m0 [1, 2], F1 m1 [2, 3], B1 m0 [3, 4], B1 m1 [4, 5]
  //   d0: B0 m0 [4, 5]          d1: B0 m1 [5, 7]   -> 7 ms (6 ms when d1 is as fast as d0).
  LayerGraph g = chain(2);
  Cluster c = devices(3);
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  const Placement p = with_replicas({0, 1}, {{0, 1}, {2}}, 2);
  StepReport even = run(g, c, lib, p, 2);
  REQUIRE(even.ok);
  CHECK(even.step_ms == doctest::Approx(6.0));
  c.devices[1].speed = 0.5;
  StepReport slow = run(g, c, lib, p, 2);
  REQUIRE(slow.ok);
  CHECK(slow.step_ms == doctest::Approx(7.0));
  // The ring uses d0 -> d1 and d1 -> d0: a slow d1 -> d0 (144 bytes at
  // 0.1152 Mbps: 10 ms per ring step) decides both steps: 7 + 2 x 10 = 27 ms.
  c.links.push_back(Link{"d1", "d0", 0.1152, 0});
  StepReport slow_link = run(g, c, lib, p, 2);
  REQUIRE(slow_link.ok);
  CHECK(slow_link.step_ms == doctest::Approx(27.0));
}

TEST_CASE("replica weights: a replica twice as fast takes twice the micro-batches and the step shortens") {
  // fc0 on {d0, d1 (speed 0.5)}, fc1 on d2; 1 ms per layer per sample both ways; free links; 3 micro-batches.
  // Round-robin: d0 runs m0, m2 and d1 runs m1:
  //   d0: F0 m0 [0, 1], F0 m2 [1, 2]          d1: F0 m1 [0, 2]
  //   d2: F1 m0 [1, 2], F1 m1 [2, 3], F1 m2 [3, 4], B1 m0 [4, 5], B1 m1 [5, 6], B1 m2 [6, 7]
  //   d0: B0 m0 [5, 6], B0 m2 [7, 8]          d1: B0 m1 [6, 8]     -> 8 ms
  // Four micro-batches, round-robin: d1 runs m1 and m3 (2 ms each way):
  //   d1: F0 m1 [0, 2], F0 m3 [2, 4]; d2: F1 m0..m3 [1, 2] [2, 3] [3, 4] [4, 5], B1 [5, 9];
  //   d1: B0 m1 [7, 9], B0 m3 [9, 11]   -> 11 ms
  // Weights [3, 1] give d0 m0, m1, m3 and d1 m2:
  //   d0: F0 m0 [0, 1], F0 m1 [1, 2], F0 m3 [2, 3]        d1: F0 m2 [0, 2]
  //   d2: F1 m0..m3 [1, 2] [2, 3] [3, 4] [4, 5], B1 m0..m3 [5, 6] [6, 7] [7, 8] [8, 9]
  //   d0: B0 m0 [6, 7], B0 m1 [7, 8], B0 m3 [9, 10]        d1: B0 m2 [8, 10]   -> 10 ms
  LayerGraph g = chain(2);
  Cluster c = devices(3);
  c.devices[1].speed = 0.5;
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  StepReport three = run(g, c, lib, with_replicas({0, 1}, {{0, 1}, {2}}, 3), 3);
  REQUIRE(three.ok);
  CHECK(three.step_ms == doctest::Approx(8.0));
  Placement even = with_replicas({0, 1}, {{0, 1}, {2}}, 4);
  StepReport round_robin = run(g, c, lib, even, 4);
  REQUIRE(round_robin.ok);
  CHECK(round_robin.step_ms == doctest::Approx(11.0));
  Placement weighed = even;
  weighed.group_replica_weights = {{3, 1}, {}};
  REQUIRE(weighed.replica_order(0) == std::vector<int>{0, 0, 1, 0});
  StepReport r = run(g, c, lib, weighed, 4);
  REQUIRE(r.ok);
  CHECK(r.step_ms == doctest::Approx(10.0));
  CHECK(has_line(r, 1, "B s0 m2", 8, 10));
  CHECK(r.devices[0].busy_ms == doctest::Approx(6.0));  // three micro-batches, 1 ms each way
  CHECK(r.devices[1].busy_ms == doctest::Approx(4.0));  // one, 2 ms each way
}

TEST_CASE("a replicated stage's allreduce costs what BSP's gradient exchange costs for the same bytes and devices") {
  LayerGraph g = chain(2);
  Cluster c = slow_links(3);
  auto cost = CostModel::build(g, c, flat_library(g, 1, 1.0, 1.0));
  REQUIRE(cost.is_ok());
  // Two ring steps of ceil(576 / 3) = 192 bytes: 1 + 60 ms each, 4 steps for 3 replicas.
  CHECK(cost->ring_allreduce_ms({0, 1, 2}, 576) == doctest::Approx(4 * 61.0));
  CHECK(cost->ring_allreduce_ms({1}, 576) == 0.0);
}

TEST_CASE("branch-parallel: two parallel branches on different devices overlap") {
  // fc0 -> {a1 -> a2, b3 -> b4} -> add5 -> fc6, 1 ms per layer per sample both
  // ways, free links, one micro-batch. fc0, add5, fc6 on d0; branch a on d1, b on d2:
  //   F fc0 [0, 1]; F a [1, 3] on d1 while F b [1, 3] on d2; F add5 fc6 [3, 5];
  //   B add5 fc6 [5, 7]; B a [7, 9] and B b [7, 9] at once; B fc0 [9, 10]: 10 ms,
  // against 14 ms with both branches on d1 (they run one after the other).
  LayerGraph g;
  g.name = "two_branches";
  g.input_shape = {8};
  add_layer(g, "fc0", "linear", {});
  add_layer(g, "a1", "linear", {0});
  add_layer(g, "a2", "linear", {1});
  add_layer(g, "b3", "linear", {0});
  add_layer(g, "b4", "linear", {3});
  add_layer(g, "add5", "add", {2, 4});
  add_layer(g, "fc6", "linear", {5});
  REQUIRE(infer_shapes(g).is_ok());
  Cluster c = devices(3);
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  StepReport apart = run(g, c, lib, by_device({0, 1, 1, 2, 2, 0, 0}, 1), 1);
  StepReport together = run(g, c, lib, by_device({0, 1, 1, 1, 1, 0, 0}, 1), 1);
  REQUIRE(apart.ok);
  REQUIRE(together.ok);
  CHECK(apart.step_ms == doctest::Approx(10.0));
  CHECK(together.step_ms == doctest::Approx(14.0));
  const double branch_a = 4.0, branch_b = 4.0, rest = 6.0;
  CHECK(apart.step_ms < rest + branch_a + branch_b);
  CHECK(has_line(apart, 1, "F s1 m0", 1, 3));
  CHECK(has_line(apart, 2, "F s2 m0", 1, 3));
}

TEST_CASE("a device order the graph cannot run is reported as a failure, not replayed") {
  LayerGraph g = chain(2);
  Cluster c = devices(2);
  auto cost = CostModel::build(g, c, flat_library(g, 1, 1.0, 1.0));
  REQUIRE(cost.is_ok());
  auto tg = build_task_graph(g, by_device({0, 1}, 2), c, 2);
  REQUIRE(tg.is_ok());
  REQUIRE(simulate(*tg, *cost).ok);
  // Device 0 runs its first backward before its first forward: that backward
  // waits for a gradient that needs the forward behind it.
  std::vector<int>& order = tg->device_order[0];
  std::iter_swap(std::find(order.begin(), order.end(), tg->forward_task[0][0]),
                 std::find(order.begin(), order.end(), tg->backward_task[0][0]));
  StepReport r = simulate(*tg, *cost);
  CHECK_FALSE(r.ok);
  CHECK(r.message.find("cycle") != std::string::npos);
}

TEST_CASE("the one-pass replay in the builder's order and the depth-first replay give the same step") {
  std::mt19937 rng(11);
  LayerGraph g;
  g.name = "branchy";
  g.input_shape = {8};
  add_layer(g, "fc0", "linear", {});
  add_layer(g, "a1", "linear", {0});
  add_layer(g, "b2", "linear", {0});
  add_layer(g, "b3", "linear", {2});
  add_layer(g, "add4", "add", {1, 3});
  add_layer(g, "fc5", "linear", {4});
  add_layer(g, "add6", "add", {5, 0});
  REQUIRE(infer_shapes(g).is_ok());
  Cluster c = slow_links(4);
  c.devices[2].speed = 0.5;
  Calibration cal = default_calibration();
  cal.first_task_overhead_ms = 0.3;
  cal.update_ms_per_param_mb = 5;
  auto cost = CostModel::build(g, c, flat_library(g, 1, 1.0, 2.0), cal);
  REQUIRE(cost.is_ok());
  int compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    Placement p;
    const int G = 1 + static_cast<int>(rng() % 4);
    for (size_t i = 0; i < g.layers.size(); ++i) p.layer_group.push_back(static_cast<int>(rng() % G));
    for (int grp = 0; grp < G; ++grp) {
      std::vector<int> devs{0, 1, 2, 3};
      std::shuffle(devs.begin(), devs.end(), rng);
      p.group_device.push_back(devs[0]);
      p.group_replicas.emplace_back(devs.begin() + 1, devs.begin() + (rng() % 3 == 0 ? 2 : 1));
    }
    p.micro_batches = 2 + static_cast<int>(rng() % 3);
    p.aggregation_every = rng() % 5 == 0 ? 2 : 1;
    p.schedule = static_cast<Schedule>(rng() % 3);
    auto tg = build_task_graph(g, p, c, 8);
    if (!tg) continue;
    for (bool per_device : {true, false}) {
      SimulateOptions o;
      o.send_queue_per_device = per_device;
      TaskTimes fast_times, slow_times;
      StepReport fast = simulate(*tg, *cost, o, &fast_times);
      TaskGraph unordered = *tg;
      unordered.replay_order.clear();  // forces the depth-first replay
      StepReport slow = simulate(unordered, *cost, o, &slow_times);
      REQUIRE(fast.ok);
      REQUIRE(slow.ok);
      CHECK(fast.step_ms == slow.step_ms);
      CHECK(fast_times.start_ms == slow_times.start_ms);
      CHECK(fast_times.critical_pred == slow_times.critical_pred);
      CHECK(fast_times.last_task == slow_times.last_task);
      for (int d = 0; d < 4; ++d) {
        CHECK(fast.devices[d].busy_ms == slow.devices[d].busy_ms);
        CHECK(fast.devices[d].comm_ms == slow.devices[d].comm_ms);
        CHECK(fast.devices[d].peak_memory_bytes == slow.devices[d].peak_memory_bytes);
      }
      ++compared;
    }
  }
  CHECK(compared > 200);
}

TEST_CASE("a recomputing stage's backward is charged one more forward and its device keeps fewer activations") {
  LayerGraph g = chain(2);
  Cluster c = devices(2);
  const int m = 4;
  // Per micro-batch: forward 1 ms, backward 2 ms on each stage.
  LayerLibrary lib = flat_library(g, 1, 1.0, 2.0);
  Placement plain = by_device({0, 1}, m);
  Placement recompute = plain;
  recompute.group_recompute = {0, 1};  // the last stage recomputes: its backward takes 2 + 1 ms
  StepReport a = run(g, c, lib, plain, m);
  StepReport b = run(g, c, lib, recompute, m);
  REQUIRE(a.ok);
  REQUIRE(b.ok);
  CHECK(b.devices[1].busy_ms == doctest::Approx(a.devices[1].busy_ms + m * 1.0));
  CHECK(b.devices[0].busy_ms == doctest::Approx(a.devices[0].busy_ms));
  CHECK(b.step_ms > a.step_ms);
  CHECK(b.devices[1].peak_memory_bytes < a.devices[1].peak_memory_bytes);
  // The task graph keeps the flag on the segment.
  auto tg = build_task_graph(g, recompute, c, m);
  REQUIRE(tg.is_ok());
  CHECK_FALSE(tg->segments[0].recompute);
  CHECK(tg->segments[1].recompute);
}

TEST_CASE("the simulated peak counts Adam's two moments where SGD keeps one momentum copy") {
  LayerGraph g = chain(2);
  Cluster c = devices(2);
  LayerLibrary lib = flat_library(g, 1, 1.0, 1.0);
  Placement p = by_device({0, 1}, 2);
  StepReport sgd = run(g, c, lib, p, 2);
  p.optimizer = Optimizer::adam;
  StepReport adam = run(g, c, lib, p, 2);
  REQUIRE(sgd.ok);
  REQUIRE(adam.ok);
  CHECK(adam.devices[0].peak_memory_bytes - sgd.devices[0].peak_memory_bytes == g.layers[0].param_bytes());
}

// Associated Learning (schedule al) on chain(2) cut in two: block 1 has 8 layers (labels, fc0,
// bridge + sigmoid, target + sigmoid, decoder + sigmoid), block 2 has 7 (fc1 and its six), each
// layer 1 ms forward and 2 ms backward.
namespace {
LayerGraph al_chain() {
  auto al = make_al_form(chain(2), {1}, 8);
  REQUIRE_MESSAGE(al.is_ok(), al.error_message());
  return *al;
}
Placement al_blocks_on(const LayerGraph& al, const std::vector<int>& block_device, int micro_batches) {
  Placement p;
  for (int i = 0; i < static_cast<int>(al.layers.size()); ++i) p.layer_group.push_back(al_block_of(al, i));
  p.group_device = block_device;
  p.micro_batches = micro_batches;
  p.schedule = Schedule::al;
  return p;
}
}  // namespace

TEST_CASE("al: no gradient crosses blocks, so the step is block 1's m cycles plus block 2's last forward and backward") {
  LayerGraph g = al_chain();
  REQUIRE(g.al_blocks[0].last - g.al_blocks[0].first + 1 == 8);
  REQUIRE(g.al_blocks[1].last - g.al_blocks[1].first + 1 == 7);
  Cluster c = devices(2);
  for (int m : {1, 2, 4}) {
    const int64_t batch = 8;
    LayerLibrary lib = flat_library(g, batch / m, 1.0, 2.0);
    StepReport al = run(g, c, lib, al_blocks_on(g, {0, 1}, m), batch);
    REQUIRE_MESSAGE(al.ok, al.message);
    // Block 1 (8 + 16 ms a micro-batch) paces block 2 (7 + 14): 24 m, then block 2's last 7 + 14,
    // less the 16 ms block 1's last backward overlaps with it.
    CHECK(al.step_ms == doctest::Approx(24.0 * m + 5.0));
    CHECK(al.devices[0].busy_ms == doctest::Approx(m * 24.0));
    CHECK(al.devices[1].busy_ms == doctest::Approx(m * 21.0));
    // Backpropagation's fill-drain pays at least (m + 1) x the slowest stage (the GPipe cases above).
    CHECK(al.step_ms < (m + 1) * 24.0);
  }
}

TEST_CASE("al: each backward carries its block's update, stretched like the task on a slow device") {
  LayerGraph g = al_chain();
  Cluster c = devices(2);
  c.devices[0].speed = 0.5;
  const int m = 4;
  LayerLibrary lib = flat_library(g, 2, 1.0, 2.0);
  Calibration cal;
  cal.update_ms_per_param_mb = 1000;  // 1 ms per kB of parameters
  double params[2] = {0, 0};
  for (int i = 0; i < static_cast<int>(g.layers.size()); ++i) params[al_block_of(g, i)] += g.layers[i].param_bytes() / 1e6;
  StepReport free_update = run(g, c, lib, al_blocks_on(g, {0, 1}, m), 8);
  StepReport with_update = run(g, c, lib, al_blocks_on(g, {0, 1}, m), 8, cal);
  REQUIRE(free_update.ok);
  REQUIRE(with_update.ok);
  // m updates a step on each device, the speed-0.5 device's twice as long; none at the step's end.
  CHECK(with_update.devices[0].busy_ms - free_update.devices[0].busy_ms == doctest::Approx(m * 1000 * params[0] * 2));
  CHECK(with_update.devices[1].busy_ms - free_update.devices[1].busy_ms == doctest::Approx(m * 1000 * params[1]));
}

TEST_CASE("al: a block's backward waits for its own forward only, never for a later block") {
  LayerGraph g = al_chain();
  auto tg = build_task_graph(g, al_blocks_on(g, {0, 1}, 4), devices(2), 8);
  REQUIRE_MESSAGE(tg.is_ok(), tg.error_message());
  for (const Task& t : tg->tasks) CHECK(t.kind != TaskKind::transfer_gradient);
  for (int m = 0; m < 4; ++m)
    for (int s = 0; s < 2; ++s) CHECK(tg->deps(tg->backward_task[s][m]).to_vector() == std::vector<int>{tg->forward_task[s][m]});
  // Everything block 1's backwards depend on, transitively, is block 1's.
  std::vector<int> stack;
  std::vector<char> seen(tg->tasks.size(), 0);
  for (int m = 0; m < 4; ++m) stack.push_back(tg->backward_task[0][m]);
  while (!stack.empty()) {
    const int t = stack.back();
    stack.pop_back();
    if (seen[t]) continue;
    seen[t] = 1;
    CHECK(tg->tasks[t].segment == 0);
    for (int d : tg->deps(t)) stack.push_back(d);
  }
  // Each device runs F0 B0 F1 B1 ...: the backward (and the update) right after its forward.
  for (int d = 0; d < 2; ++d) {
    const auto& order = tg->device_order[d];
    REQUIRE(order.size() == 8);
    for (int m = 0; m < 4; ++m) {
      CHECK(order[2 * m] == tg->forward_task[d][m]);
      CHECK(order[2 * m + 1] == tg->backward_task[d][m]);
    }
  }
}

TEST_CASE("al placements are refused, naming the field, where model and schedule disagree") {
  LayerGraph g = al_chain();
  Cluster c = devices(2);
  Placement gpipe = al_blocks_on(g, {0, 1}, 2);
  gpipe.schedule = Schedule::gpipe;
  Status s = validate_placement(gpipe, g, c, 8);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.message().find("placement.schedule") == 0);
  Placement plain = by_device({0, 1}, 2, Schedule::al);
  s = validate_placement(plain, chain(2), c, 8);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.message().find("placement.schedule") == 0);
  Placement one_group = al_blocks_on(g, {0}, 2);
  std::fill(one_group.layer_group.begin(), one_group.layer_group.end(), 0);
  s = validate_placement(one_group, g, c, 8);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.message().find("placement.groups") == 0);
  Placement split = al_blocks_on(g, {0, 1}, 2);
  split.layer_group[g.al_blocks[0].decoder] = 1;  // a decoder away from its block
  s = validate_placement(split, g, c, 8);
  REQUIRE_FALSE(s.is_ok());
  CHECK(s.message().find("placement.layers[" + std::to_string(g.al_blocks[0].decoder) + "]") == 0);
  CHECK(validate_placement(al_blocks_on(g, {1, 0}, 2), g, c, 8).is_ok());
}

namespace {
// A random DAG of n width-8 layers: each reads the one before it, and one in
// three adds a skip from an earlier layer (so segments get several preds and succs).
LayerGraph random_dag(int n, std::mt19937& rng) {
  LayerGraph g;
  g.name = "random_dag";
  g.input_shape = {8};
  add_layer(g, "fc0", "linear", {});
  for (int i = 1; i < n; ++i) {
    if (i >= 2 && rng() % 3 == 0)
      add_layer(g, "add" + std::to_string(i), "add", {i - 1, static_cast<int>(rng() % (i - 1))});
    else
      add_layer(g, "fc" + std::to_string(i), "linear", {i - 1});
  }
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

// Four devices of random speeds, random asymmetric links, some of them remote.
Cluster random_cluster(std::mt19937& rng) {
  Cluster c = devices(4);
  std::uniform_real_distribution<double> u(0, 1);
  for (Device& d : c.devices) {
    d.speed = 0.25 + 0.75 * u(rng);
    if (rng() % 4 == 0) d.where = "10.0.0.1:9000";
  }
  c.default_link.bandwidth_mbps = 0.01 + 0.1 * u(rng);
  c.default_link.latency_ms = u(rng);
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b)
      if (a != b && rng() % 2) c.links.push_back({c.devices[a].name, c.devices[b].name, 0.01 + 0.1 * u(rng), u(rng)});
  return c;
}

// Random groups on random devices: either every layer in a random group
// (non-contiguous: a device holds several segments), or contiguous runs
// (a device may still hold several), some replicated (with weights now and
// then); some recomputing.
Placement random_hybrid(int layers, std::mt19937& rng) {
  Placement p;
  const int G = 1 + static_cast<int>(rng() % 5);
  const bool scattered = rng() % 2;
  for (int i = 0, grp = 0; i < layers; ++i) {
    if (scattered) grp = static_cast<int>(rng() % G);
    else if (i > 0 && grp < G - 1 && rng() % (layers / G + 1) == 0) ++grp;
    p.layer_group.push_back(grp);
  }
  for (int grp = 0; grp < G; ++grp) {
    std::vector<int> devs{0, 1, 2, 3};
    std::shuffle(devs.begin(), devs.end(), rng);
    p.group_device.push_back(devs[0]);
    const int replicas = !scattered && rng() % 2 == 0 ? 1 + static_cast<int>(rng() % 2) : 0;
    p.group_replicas.emplace_back(devs.begin() + 1, devs.begin() + 1 + replicas);
    p.group_recompute.push_back(rng() % 4 == 0);
  }
  if (rng() % 3 == 0) {
    p.group_replica_weights.resize(G);
    for (int grp = 0; grp < G; ++grp)
      if (!p.group_replicas[grp].empty())
        for (size_t r = 0; r <= p.group_replicas[grp].size(); ++r) p.group_replica_weights[grp].push_back(1 + static_cast<int>(rng() % 3));
  }
  p.micro_batches = 1 + static_cast<int>(rng() % 8);
  p.aggregation_every = rng() % 5 == 0 ? 3 : 1;
  return p;
}

void check_same_report(const StepReport& fast, const StepReport& full) {
  REQUIRE(fast.ok == full.ok);
  if (!fast.ok) return;
  CHECK(fast.step_ms == full.step_ms);
  CHECK(fast.comm_fraction == full.comm_fraction);
  REQUIRE(fast.devices.size() == full.devices.size());
  for (size_t d = 0; d < fast.devices.size(); ++d) {
    CHECK(fast.devices[d].busy_ms == full.devices[d].busy_ms);
    CHECK(fast.devices[d].comm_ms == full.devices[d].comm_ms);
    CHECK(fast.devices[d].idle_ms == full.devices[d].idle_ms);
    CHECK(fast.devices[d].peak_memory_bytes == full.devices[d].peak_memory_bytes);
  }
}
}  // namespace

TEST_CASE("the segment replay (the search's path) gives the task graph's step on random DAGs, clusters and placements") {
  std::mt19937 rng(17);
  const Schedule schedules[] = {Schedule::gpipe, Schedule::one_f_one_b, Schedule::interleaved_1f1b};
  int compared = 0, replicated = 0, several_preds = 0;
  SegmentGraph reused;
  for (int trial = 0; trial < 400; ++trial) {
    LayerGraph g = random_dag(4 + static_cast<int>(rng() % 14), rng);
    Cluster c = random_cluster(rng);
    Calibration cal = default_calibration();
    cal.first_task_overhead_ms = 0.3 * (rng() % 2);
    cal.update_ms_per_param_mb = 5;
    cal.concurrency_slowdown = 0.1 * (rng() % 2);
    auto cost = CostModel::build(g, c, flat_library(g, 1, 1.0, 2.0), cal);
    REQUIRE(cost.is_ok());
    Placement p = random_hybrid(static_cast<int>(g.layers.size()), rng);
    p.schedule = schedules[rng() % 3];
    auto tg = build_task_graph(g, p, c, 16);
    if (!tg) continue;
    REQUIRE(build_segment_graph_into(g, p, c, 16, reused).is_ok());
    for (bool per_device : {true, false}) {
      SimulateOptions o;
      o.send_queue_per_device = per_device;
      o.timeline = false;
      check_same_report(simulate_segments(reused, *cost, o), simulate(*tg, *cost, o));
      ++compared;
    }
    replicated += !tg->replicated_groups.empty();
    for (const Segment& s : tg->segments) several_preds += s.preds.size() > 1;
  }
  CHECK(compared > 600);
  CHECK(replicated > 100);
  CHECK(several_preds > 50);
  // Associated Learning: no gradient crosses blocks.
  LayerGraph al = al_chain();
  for (int trial = 0; trial < 30; ++trial) {
    Cluster c = random_cluster(rng);
    auto cost = CostModel::build(al, c, flat_library(al, 1, 1.0, 2.0));
    REQUIRE(cost.is_ok());
    Placement p = al_blocks_on(al, {static_cast<int>(rng() % 4), static_cast<int>(rng() % 4)}, 1 + static_cast<int>(rng() % 4));
    auto tg = build_task_graph(al, p, c, 8);
    REQUIRE_MESSAGE(tg.is_ok(), tg.error_message());
    REQUIRE(build_segment_graph_into(al, p, c, 8, reused).is_ok());
    SimulateOptions o;
    o.timeline = false;
    check_same_report(simulate_segments(reused, *cost, o), simulate(*tg, *cost, o));
  }
}

TEST_CASE("Simulator::evaluate without a timeline (the segment replay) reports what it does with one") {
  std::mt19937 rng(29);
  LayerGraph g = random_dag(12, rng);
  Cluster c = random_cluster(rng);
  auto cost = CostModel::build(g, c, flat_library(g, 1, 1.0, 2.0));
  REQUIRE(cost.is_ok());
  Simulator sim(g, c, *cost, 16);
  int ok = 0;
  for (int trial = 0; trial < 100; ++trial) {
    Placement p = random_hybrid(12, rng);
    p.schedule = rng() % 2 ? Schedule::gpipe : Schedule::one_f_one_b;
    SimulateOptions search;
    search.timeline = false;
    const StepReport fast = sim.evaluate(p, search);
    const StepReport full = sim.evaluate(p);
    CHECK(fast.failure_kind == full.failure_kind);
    CHECK(fast.timeline.empty());
    check_same_report(fast, full);
    ok += fast.ok;
  }
  CHECK(ok > 50);
}
