// The memory rule, written once in core/placement.cpp: the per-stage form the
// planners' inner loops use agrees with the per-device estimate check_memory uses.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "model/zoo.h"
#include "tests/model/tiny_transformer.h"
#include "tests/model/linear_chain.h"
#include "tests/core/fake_evaluator.h"

using namespace tapp;

namespace {

using test::linear_chain;

Cluster devices(int n, int64_t memory_mb) { return testing::equal_cluster(n, memory_mb); }

}  // namespace

TEST_CASE("the per-stage memory rule agrees with the per-device estimate for every pipeline of a chain") {
  const LayerGraph g = linear_chain({512, 64, 2048, 32, 1024, 10});
  const Cluster c = devices(3, 4096);
  const StageMemory memory(g);
  std::mt19937_64 rng(5);
  for (int n = 0; n < 200; ++n) {
    // Three stages at random cuts on devices 2, 0, 1.
    int a = 1 + static_cast<int>(rng() % 4), b = a + 1 + static_cast<int>(rng() % (5 - a));
    Placement p;
    for (int i = 0; i < 6; ++i) p.layer_group.push_back(i < a ? 0 : i < b ? 1 : 2);
    p.group_device = {2, 0, 1};
    p.micro_batches = 1 << (rng() % 4);
    p.schedule = rng() % 2 ? Schedule::gpipe : Schedule::one_f_one_b;
    const int64_t batch = 16 + static_cast<int64_t>(rng() % 17);
    const int64_t samples = (batch + p.micro_batches - 1) / p.micro_batches;
    // Stage k keeps what the devices from it to the end allow in flight (1F1B: 3 - k).
    auto in_flight = [&](int stage) { return micro_batches_in_flight(p.schedule, p.micro_batches, 3 - stage); };
    // Any subset of the stages recomputes; with both optimizers.
    p.group_recompute = {static_cast<char>(rng() % 2), static_cast<char>(rng() % 2), static_cast<char>(rng() % 2)};
    p.optimizer = rng() % 2 ? Optimizer::adam : Optimizer::sgd;
    const StageMemory by_stage(g, p.optimizer);
    const auto bytes = estimate_device_memory_bytes(p, g, c, batch);
    const int M = p.micro_batches;  // every receive of the step is posted at its start
    CHECK(bytes[2] == by_stage.bytes(0, a, samples, in_flight(0), p.recomputes(0), M));
    CHECK(bytes[0] == by_stage.bytes(a, b, samples, in_flight(1), p.recomputes(1), M));
    CHECK(bytes[1] == by_stage.bytes(b, 6, samples, in_flight(2), p.recomputes(2), M));
    if (p.optimizer == Optimizer::sgd && !p.recomputes(0))  // the default StageMemory is SGD's
      CHECK(bytes[2] == memory.bytes(0, a, samples, in_flight(0), false, M));
  }
}

TEST_CASE("a stage fits a device exactly when check_memory passes its single-device placement") {
  const LayerGraph g = linear_chain({4096, 4096, 10});
  const StageMemory memory(g);
  const int64_t needed = memory.bytes(0, 3, 8, 1);
  for (int64_t mb : {int64_t{1}, needed / (1024 * 1024), needed / (1024 * 1024) + 1, int64_t{4096}}) {
    const Cluster c = devices(1, mb);
    const bool fits = memory.fits(c.devices[0], 0, 3, 8, 1);
    CHECK(fits == check_memory(Placement::single_device(3, 0), g, c, 8).is_ok());
  }
  // In flight: GPipe keeps every micro-batch, 1F1B at most one per stage.
  CHECK(micro_batches_in_flight(Schedule::gpipe, 8, 2) == 8);
  CHECK(micro_batches_in_flight(Schedule::one_f_one_b, 8, 2) == 2);
  CHECK(micro_batches_in_flight(Schedule::one_f_one_b, 1, 4) == 1);
}

TEST_CASE("a data-parallel placement needs the whole model on each replica at its share of the batch") {
  const LayerGraph g = linear_chain({256, 128, 10});
  const Cluster c = devices(4, 4096);
  const StageMemory memory(g);
  const auto bytes = estimate_device_memory_bytes(Placement::replicas(3, {0, 2, 3}), g, c, 10);
  CHECK(bytes[0] == memory.bytes(0, 3, 4, 1));  // ceil(10 / 3) samples
  CHECK(bytes[1] == 0);
  CHECK(bytes[2] == bytes[0]);
  CHECK(bytes[3] == bytes[0]);
}

// A 3-layer chain 16 -> 8 -> 4 -> 2 (fc0: 136 parameters, 32 bytes out per
// sample; fc1: 36 and 16; fc2: 10 and 8), fc0 and fc1 on d0, fc2 on d1;
// batch 8 in 4 micro-batches of 2 samples. Every number below is worked out by hand.
// Buffers = received inputs and gradients (each micro-batch the device runs)
// + backward's working memory: the largest layer's weight gradient and two
// of its largest activation gradients for one micro-batch — d0: 544 + 2 x 32
// x 2 = 672; d1: 40 + 2 x 8 x 2 = 72. fc2, the output, also keeps the loss's
// log-probabilities: 8 more bytes per sample.
namespace {
struct SmallChain {
  LayerGraph g = linear_chain({8, 4, 2});
  Cluster c = devices(3, 4096);
  Placement p;
  SmallChain() {
    p.layer_group = {0, 0, 1};
    p.group_device = {0, 1};
    p.micro_batches = 4;
  }
  std::vector<MemoryBreakdown> estimate() const { return estimate_device_memory(p, g, c, 8); }
};

void check_parts(const MemoryBreakdown& m, int64_t params, int64_t optimizer, int64_t activations, int64_t buffers) {
  CHECK(m.params == params);
  CHECK(m.grads == params);
  CHECK(m.optimizer_state == optimizer);
  CHECK(m.activations == activations);
  CHECK(m.buffers == buffers);
  CHECK(m.total() == 2 * params + optimizer + activations + buffers);
}
}  // namespace

TEST_CASE("a 3-layer chain on 2 devices under GPipe with SGD: every micro-batch's activations, momentum once") {
  SmallChain s;
  const auto m = s.estimate();
  // d0: 688 bytes of parameters; (32 + 16) x 2 samples x 4 micro-batches; fc1's output gradient x 4 + 672.
  check_parts(m[0], 688, 688, 384, 128 + 672);
  // d1: 40 bytes; (8 + 8) x 2 x 4; fc1's output received for each of the 4 micro-batches + 72.
  check_parts(m[1], 40, 40, 128, 128 + 72);
  check_parts(m[2], 0, 0, 0, 0);
  CHECK(estimate_device_memory_bytes(s.p, s.g, s.c, 8) == std::vector<int64_t>{3248, 448, 0});
}

TEST_CASE("1F1B keeps as many micro-batches as there are devices from a stage to the end") {
  SmallChain s;
  s.p.schedule = Schedule::one_f_one_b;
  const auto m = s.estimate();
  check_parts(m[0], 688, 688, 192, 128 + 672);  // 2 in flight on the first stage; every receive posted
  check_parts(m[1], 40, 40, 32, 128 + 72);     // 1 on the last
}

TEST_CASE("Adam keeps two copies of the parameters where SGD with momentum keeps one") {
  SmallChain s;
  s.p.optimizer = Optimizer::adam;
  auto m = s.estimate();
  // Its update's two temporaries of fc0's weight (2 x 544) come after backward,
  // which held more (384 + 800): nothing is added.
  check_parts(m[0], 688, 1376, 384, 128 + 672);
  check_parts(m[1], 40, 80, 128, 128 + 72);
  // One sample through 16 -> 1024 -> 1024 -> 10: backward holds 8,272 bytes of
  // activations and fc1's 4,198,400-byte weight gradient + 2 x 4,096, under the
  // update's 2 x 4,198,400: activations and buffers come to exactly that.
  const LayerGraph g = linear_chain({1024, 1024, 10});
  Placement one = Placement::single_device(3, 0);
  one.optimizer = Optimizer::adam;
  const MemoryBreakdown d0 = estimate_device_memory(one, g, devices(1, 4096), 1)[0];
  CHECK(d0.activations == 8272);
  CHECK(d0.activations + d0.buffers == 2 * 4198400);
  one.optimizer = Optimizer::sgd;
  CHECK(estimate_device_memory(one, g, devices(1, 4096), 1)[0].buffers == 4198400 + 2 * 4096);
  CHECK(training_state_bytes(100, Optimizer::adam) == 400);
  CHECK(training_state_bytes(100) == 300);
}

TEST_CASE("a recomputing stage keeps its inputs and one micro-batch's activations") {
  SmallChain s;
  s.p.group_recompute = {1, 0};
  auto m = s.estimate();
  check_parts(m[0], 688, 688, 96, 128 + 672);  // (32 + 16) x 2 once; its input is the model's
  check_parts(m[1], 40, 40, 128, 128 + 72);    // unchanged
  s.p.group_recompute = {0, 1};
  m = s.estimate();
  check_parts(m[1], 40, 40, 32, 128 + 72);  // (8 + 8) x 2 once; the received inputs stay
}

TEST_CASE("each replica of a stage keeps only its own micro-batches") {
  SmallChain s;
  s.p.group_replicas = {{2}, {}};  // fc0, fc1 on d0 and d2: two micro-batches each
  const auto m = s.estimate();
  check_parts(m[0], 688, 688, 192, 64 + 672);  // gradients for its own 2 micro-batches
  check_parts(m[2], 688, 688, 192, 64 + 672);
  check_parts(m[1], 40, 40, 128, 128 + 72);  // every micro-batch arrives from a replica
}

TEST_CASE("a plan that does not fit names the device, its need by part and the overage") {
  // 16 -> 1024 -> 1024 -> 10 on one device of 8 MiB, batch 32: 4.1 MiB of parameters;
  // working memory: fc1's 4.0 MiB weight gradient + 2 x 1024 x 4 x 32 bytes.
  const LayerGraph g = linear_chain({1024, 1024, 10});
  const Cluster c = devices(1, 8);
  Status s = check_memory(Placement::single_device(3, 0), g, c, 32);
  CHECK(s.message() ==
        "device 'd0' needs 16.8 MB (params 4.1, grads 4.1, momentum 4.1, activations 0.3, buffers 4.3) but has "
        "8.0 MB: over by 8.8 MB");
  // In GB on devices of a GB or more; Adam named as such.
  const LayerGraph big = linear_chain({16384, 16384, 16384, 10});
  Cluster gpus = devices(2, 10240);
  gpus.devices[1].name = "gpu1";
  Placement p;
  p.layer_group = {1, 1, 1, 0};
  p.group_device = {0, 1};
  p.optimizer = Optimizer::adam;
  s = check_memory(p, big, gpus, 4096);
  CHECK(s.message() ==
        "device 'gpu1' needs 10.5 GB (params 2.0, grads 2.0, Adam 4.0, activations 0.8, buffers 1.8) but has 10.0 GB: "
        "over by 0.5 GB");  // buffers: 0.25 received gradients + 1.0 weight gradient + 2 x 0.25 activation
                            // gradients (Adam's 2 x 1.0 update temporaries come after backward, under its 2.5)
  p.optimizer = Optimizer::sgd;
  CHECK(check_memory(p, big, gpus, 4096).is_ok());  // 6.0 + 0.75 + 0.25 + 1.0 + 0.5 fits
}

TEST_CASE("recompute_where_needed recomputes the stages of a device that does not fit and leaves a fitting plan alone") {
  SmallChain s;
  s.c.devices[0].memory_mb = 1;
  Placement fits = s.p;
  CHECK(recompute_where_needed(fits, s.g, s.c, 8));
  CHECK(fits.group_recompute.empty());
  // 16 -> 4096 -> 4096 -> 10, batch 8192 in 8 micro-batches of 1024 on devices of 512 MiB:
  // d0 needs 202 MB of state + 268 MB of activations (8 in flight) + 134 MB of received gradients
  // + 96 MB of working memory; recomputing, 34 MB of activations.
  const LayerGraph g = linear_chain({4096, 4096, 10});
  Cluster c = devices(2, 512);
  Placement p;
  p.layer_group = {0, 0, 1};
  p.group_device = {0, 1};
  p.micro_batches = 8;
  const int64_t batch = 8192;
  REQUIRE_FALSE(check_memory(p, g, c, batch).is_ok());
  Placement fixed = p;
  CHECK(recompute_where_needed(fixed, g, c, batch));
  CHECK(fixed.recomputes(0));
  CHECK_FALSE(fixed.recomputes(1));
  CHECK(check_memory(fixed, g, c, batch).is_ok());
}

TEST_CASE("optimizer and recompute round-trip through JSON and bad values name the field") {
  const LayerGraph g = linear_chain({8, 4, 2});
  const Cluster c = devices(2, 64);
  auto parsed = placement_from_json(nlohmann::json::parse(R"({"micro_batches": 2, "optimizer": "adam", "recompute": [1],
      "groups": ["d0", "d1"], "layers": {"fc0": 0, "fc1": 0, "fc2": 1}})"), g, c);
  REQUIRE(parsed.is_ok());
  CHECK(parsed->optimizer == Optimizer::adam);
  CHECK(parsed->group_recompute == std::vector<char>{0, 1});
  nlohmann::json back = placement_to_json(*parsed, g, c);
  CHECK(back["optimizer"] == "adam");
  CHECK(back["recompute"] == nlohmann::json::parse("[1]"));
  parsed->optimizer = Optimizer::sgd;
  parsed->group_recompute.clear();
  back = placement_to_json(*parsed, g, c);
  CHECK_FALSE(back.contains("optimizer"));
  CHECK_FALSE(back.contains("recompute"));
  auto error = [&](const char* text) {
    auto r = placement_from_json(nlohmann::json::parse(text), g, c);
    return r.is_ok() ? std::string() : r.error_message();
  };
  CHECK(error(R"({"micro_batches": 2, "optimizer": "rmsprop", "groups": ["d0"], "layers": {"fc0": 0, "fc1": 0, "fc2": 0}})")
            .find("placement.optimizer: unknown optimizer \"rmsprop\"") == 0);
  CHECK(error(R"({"micro_batches": 2, "recompute": [3], "groups": ["d0"], "layers": {"fc0": 0, "fc1": 0, "fc2": 0}})") ==
        "placement.recompute[0]: group 3 does not exist");
  CHECK(error(R"({"micro_batches": 2, "recompute": "all", "groups": ["d0"], "layers": {"fc0": 0, "fc1": 0, "fc2": 0}})") ==
        "placement.recompute: expected an array of group indices, got string");
}

TEST_CASE("a device holding a tied lm_head without its embedding keeps its own copy of the table") {
  Result<LayerGraph> made = zoo_model("gpt2", test::tiny_transformer(8, 50, 2, 32, 4));
  REQUIRE(made.is_ok());
  const LayerGraph& g = *made;
  const int head = g.index_of("lm_head"), table = g.index_of("wte");
  REQUIRE(head == static_cast<int>(g.layers.size()) - 1);
  REQUIRE(table >= 0);
  CHECK(g.layers[head].param_bytes() == 0);  // the parameters are the embedding's
  const int64_t table_bytes = g.layers[table].param_bytes();
  REQUIRE(table_bytes == 50 * 32 * 4);
  const int L = static_cast<int>(g.layers.size());
  const Cluster c = devices(3, 1024);
  for (Optimizer opt : {Optimizer::sgd, Optimizer::adam}) {
    INFO(optimizer_name(opt));
    Placement together = Placement::single_device(L, 0);
    together.optimizer = opt;
    Placement apart = together;  // the head alone on d1
    apart.layer_group.assign(L, 0);
    apart.layer_group[head] = 1;
    apart.group_device = {0, 1};
    REQUIRE(validate_placement(apart, g, c, 4).is_ok());
    const MemoryBreakdown head_device = estimate_device_memory(apart, g, c, 4)[1];
    CHECK(head_device.params == table_bytes);
    CHECK(head_device.grads == table_bytes);
    CHECK(head_device.optimizer_state == training_state_bytes(table_bytes, opt) - 2 * table_bytes);
    CHECK(estimate_device_memory(together, g, c, 4)[0].params == g.total_params() * 4);  // one table
    // The per-stage form agrees: [head, L) holds a copy, [0, L) does not.
    const StageMemory stages(g, opt);
    CHECK(stages.breakdown(head, L, 4, 1).params == table_bytes);
    CHECK(stages.breakdown(0, L, 4, 1).params == g.total_params() * 4);
    // A replica of the head group beside the embedding keeps none; one on d2 does.
    apart.group_replicas = {{}, {0}};
    apart.micro_batches = 2;
    REQUIRE(validate_placement(apart, g, c, 4).is_ok());
    CHECK(estimate_device_memory(apart, g, c, 4)[0].params == g.total_params() * 4);
    apart.group_replicas = {{}, {2}};
    REQUIRE(validate_placement(apart, g, c, 4).is_ok());
    CHECK(estimate_device_memory(apart, g, c, 4)[2].params == table_bytes);
  }
}

TEST_CASE("a need beside a device's memory_mb is rounded up, never down to what would fit") {
  CHECK(mib_rounded_up(int64_t{128} << 20) == "128");
  CHECK(mib_rounded_up((int64_t{128} << 20) + 1) == "128.01");
  CHECK(mib_rounded_up((int64_t{128} << 20) + (int64_t{1} << 20) / 16) == "128.07");  // 128.0625
  CHECK(mib_rounded_up(1) == "0.01");
  CHECK(mib_rounded_up((int64_t{1} << 60) + 1) == std::to_string((int64_t{1} << 40) + 1));
}
