// planners/partition_export.h and stage_breakdown.h: hand-made placements as
// Pipe's balance, DeepSpeed's parts, Megatron's stage sizes and pipelining's
// split points; the refusals name the group and why; the per-stage breakdown
// is the simulator's replay.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/cluster.h"
#include "core/placement.h"
#include "model/layer_graph.h"
#include "model/layer_library.h"
#include "planners/partition_export.h"
#include "planners/stage_breakdown.h"
#include "simulator/cost_model.h"
#include "simulator/simulator.h"
#include "tests/model/linear_chain.h"
#include "tests/core/fake_evaluator.h"

using namespace tapp;
using test::linear_chain;

namespace {

Cluster devices(int n, int64_t memory_mb = 4096) { return testing::equal_cluster(n, memory_mb); }

Placement placement(std::vector<int> layer_group, std::vector<int> group_device, int micro_batches = 4) {
  Placement p;
  p.layer_group = std::move(layer_group);
  p.group_device = std::move(group_device);
  p.micro_batches = micro_batches;
  return p;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

bool any_note(const PartitionExport& e, const std::string& part) {
  for (const auto& n : e.notes)
    if (has(n, part)) return true;
  return false;
}

// fc0 -> {fc1, fc2} -> add3 (reads both) -> fc4: two parallel branches.
LayerGraph diamond() {
  LayerGraph g;
  g.name = "diamond";
  g.input_shape = {16};
  auto add = [&](std::string name, std::string op, std::vector<int> inputs, int64_t out = 0) {
    Layer l;
    l.name = std::move(name);
    l.op = std::move(op);
    l.inputs = std::move(inputs);
    l.attrs.out = out;
    g.layers.push_back(l);
  };
  add("fc0", "linear", {}, 16);
  add("fc1", "linear", {0}, 16);
  add("fc2", "linear", {0}, 16);
  add("add3", "add", {1, 2});
  add("fc4", "linear", {3}, 10);
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

}  // namespace

TEST_CASE("a contiguous placement exports as balance, parts, layers per stage and split points") {
  const LayerGraph g = linear_chain({16, 16, 16, 16, 16, 10});
  const Cluster c = devices(3);
  const Placement p = placement({0, 0, 1, 1, 1, 2}, {2, 0, 1});

  auto pipe = export_partition(p, g, c, PartitionFormat::pipe, 32);
  REQUIRE(pipe.is_ok());
  CHECK(pipe->balance == std::vector<int>{2, 3, 1});
  REQUIRE(pipe->stages.size() == 3u);
  CHECK(pipe->stages[0].devices == std::vector<int>{2});
  CHECK(pipe->stages[1].devices == std::vector<int>{0});
  CHECK(pipe->micro_batches == 4);
  CHECK(pipe->micro_batch_size == 8);
  CHECK(pipe->notes.empty());
  nlohmann::json pj = partition_export_to_json(*pipe, g, c);
  CHECK(pj["balance"] == nlohmann::json({2, 3, 1}));
  CHECK(pj["devices"] == nlohmann::json({"d2", "d0", "d1"}));
  CHECK(pj["chunks"] == 4);
  CHECK(pj["stages"][1]["layers"] == nlohmann::json({"fc2", "fc3", "fc4"}));

  auto ds = export_partition(p, g, c, PartitionFormat::deepspeed, 32);
  REQUIRE(ds.is_ok());
  CHECK(ds->parts == std::vector<int>{0, 2, 5, 6});
  CHECK(any_note(*ds, "1F1B"));  // the plan is gpipe, DeepSpeed's schedule is not

  auto mg = export_partition(p, g, c, PartitionFormat::megatron, 32);
  REQUIRE(mg.is_ok());
  CHECK(mg->balance == std::vector<int>{2, 3, 1});
  nlohmann::json mj = partition_export_to_json(*mg, g, c);
  CHECK(mj["layers_per_stage"] == nlohmann::json({2, 3, 1}));
  CHECK(mj["settings"].dump().find("--decoder-first-pipeline-num-layers 2") != std::string::npos);
  CHECK(mj["settings"].dump().find("t*2|t*3|t*1") != std::string::npos);

  auto pp = export_partition(p, g, c, PartitionFormat::pippy, 32);
  REQUIRE(pp.is_ok());
  CHECK(pp->split_points == std::vector<std::string>{"fc2", "fc5"});
  nlohmann::json ppj = partition_export_to_json(*pp, g, c);
  CHECK(ppj["split_spec"] ==
        nlohmann::json({{"fc2", "SplitPoint.BEGINNING"}, {"fc5", "SplitPoint.BEGINNING"}}));
  CHECK(ppj["settings"].dump().find("ScheduleGPipe") != std::string::npos);
}

TEST_CASE("consecutive groups on the same device are one stage, and the export says so") {
  const LayerGraph g = linear_chain({16, 16, 16, 10});
  const Placement p = placement({0, 1, 2, 2}, {0, 0, 1});
  auto e = export_partition(p, g, devices(2), PartitionFormat::pipe);
  REQUIRE(e.is_ok());
  CHECK(e->balance == std::vector<int>{2, 2});
  CHECK(e->stages[0].groups == std::vector<int>{0, 1});
  CHECK(any_note(*e, "groups 0, 1 run back to back on d0"));
}

TEST_CASE(
    "a group that is not contiguous is refused for every format, naming the group and the layer between") {
  const LayerGraph g = linear_chain({16, 16, 16, 16, 16, 10});
  const Placement p = placement({0, 0, 1, 1, 0, 0}, {0, 1});
  for (PartitionFormat f : all_partition_formats()) {
    auto e = export_partition(p, g, devices(2), f);
    REQUIRE_FALSE(e.is_ok());
    CHECK(has(e.error_message(), "group 0 (on d0) is not contiguous"));
    CHECK(has(e.error_message(), "'fc4' after 'fc3' of group 1"));
  }
}

TEST_CASE("a data-parallel placement has no pipeline to export") {
  const LayerGraph g = linear_chain({16, 10});
  auto e = export_partition(Placement::replicas(2, {0, 1}), g, devices(2), PartitionFormat::deepspeed);
  REQUIRE_FALSE(e.is_ok());
  CHECK(has(e.error_message(), "data parallel (bsp over 2 devices)"));
}

TEST_CASE(
    "replicas: Pipe refuses them, the others take one count for the whole pipeline and say what it means") {
  const LayerGraph g = linear_chain({16, 16, 16, 10});
  const Cluster c = devices(4);
  Placement uniform = placement({0, 0, 1, 1}, {0, 2});
  uniform.group_replicas = {{1}, {3}};

  auto pipe = export_partition(uniform, g, c, PartitionFormat::pipe);
  REQUIRE_FALSE(pipe.is_ok());
  CHECK(has(pipe.error_message(),
            "group 0 of stage 0 (fc0..fc1 on d0+d1) has 2 replicas: Pipe has no replicas"));

  auto ds = export_partition(uniform, g, c, PartitionFormat::deepspeed, 32);
  REQUIRE(ds.is_ok());
  CHECK(ds->data_parallel_degree == 2);
  CHECK(ds->micro_batch_size == 4);  // 32 samples / 2 pipelines / 4 micro-batches
  CHECK(any_note(*ds, "DeepSpeed replicates the whole pipeline"));
  auto pp = export_partition(uniform, g, c, PartitionFormat::pippy);
  REQUIRE(pp.is_ok());
  CHECK(any_note(*pp, "DDP/FSDP"));

  Placement mixed = placement({0, 0, 1, 1}, {0, 2});
  mixed.group_replicas = {{1}, {}};
  auto mg = export_partition(mixed, g, c, PartitionFormat::megatron);
  REQUIRE_FALSE(mg.is_ok());
  CHECK(has(mg.error_message(), "group 1 of stage 1 (fc2..fc3 on d2) has 1 replica(s) but stage 0 has 2"));

  Placement averaged = uniform;
  averaged.aggregation_every = 4;
  auto av = export_partition(averaged, g, c, PartitionFormat::pippy);
  REQUIRE_FALSE(av.is_ok());
  CHECK(has(av.error_message(), "placement.aggregation_every: 4"));
}

TEST_CASE(
    "branch-parallel and skip-connection cuts: refused where stages pass one activation, noted for "
    "pipelining") {
  const LayerGraph g = diamond();
  const Cluster c = devices(4);
  // fc1 and fc2 on different devices run side by side.
  const Placement branches = placement({0, 1, 2, 3, 3}, {0, 1, 2, 3});
  for (PartitionFormat f : {PartitionFormat::pipe, PartitionFormat::deepspeed, PartitionFormat::megatron}) {
    auto e = export_partition(branches, g, c, f);
    REQUIRE_FALSE(e.is_ok());
    CHECK(has(e.error_message(), "stage 2 (fc2 on d2) does not read stage 1 (fc1 on d1)"));
    CHECK(has(e.error_message(), "parallel branches"));
  }
  auto pp = export_partition(branches, g, c, PartitionFormat::pippy);
  REQUIRE(pp.is_ok());
  CHECK(pp->split_points == std::vector<std::string>{"fc1", "fc2", "add3"});
  CHECK(any_note(*pp, "will not overlap"));

  // fc0 | fc1 fc2 add3 fc4 is a chain cut; fc0 fc1 | fc2 add3 fc4 cuts the branch fc0 -> fc2.
  auto chain_cut = export_partition(placement({0, 1, 1, 1, 1}, {0, 1}), g, c, PartitionFormat::pipe);
  REQUIRE(chain_cut.is_ok());
  CHECK(chain_cut->balance == std::vector<int>{1, 4});
  CHECK(any_note(*chain_cut, "the model is not a chain (layer 'fc2' reads 'fc0')"));
  auto skip = export_partition(placement({0, 0, 1, 1, 1}, {0, 1}), g, c, PartitionFormat::pipe);
  REQUIRE_FALSE(skip.is_ok());
  CHECK(has(skip.error_message(),
            "layer 'fc2' of stage 1 (fc2..fc4 on d1) reads 'fc0' of stage 0 (fc0..fc1 on d0)"));
  CHECK(has(skip.error_message(), "torch.distributed.pipeline.sync.skip"));
}

TEST_CASE(
    "a device with two stages: Pipe and pipelining take it with a note, DeepSpeed and Megatron refuse") {
  const LayerGraph g = linear_chain({16, 16, 16, 10});
  const Placement p = placement({0, 1, 2, 2}, {0, 1, 0});
  auto pipe = export_partition(p, g, devices(2), PartitionFormat::pipe);
  REQUIRE(pipe.is_ok());
  CHECK(pipe->balance == std::vector<int>{1, 1, 2});
  CHECK(any_note(*pipe, "device d0 runs stage 0 (fc0 on d0) and stage 2 (fc2..fc3 on d0)"));
  auto ds = export_partition(p, g, devices(2), PartitionFormat::deepspeed);
  REQUIRE_FALSE(ds.is_ok());
  CHECK(has(ds.error_message(), "its own rank"));
  CHECK(partition_format_from_name("megatron").is_ok());
  CHECK(has(partition_format_from_name("fsdp").error_message(), "format: unknown \"fsdp\""));
}

TEST_CASE(
    "the stage breakdown is the simulator's replay: compute from the cost model, device figures from the "
    "report") {
  const LayerGraph g = linear_chain({64, 64, 64, 10});
  const Cluster c = devices(2);
  const int64_t batch = 16;
  auto cost = CostModel::build(g, c, estimated_library(g, batch), Calibration{});
  REQUIRE(cost.is_ok());
  const Placement p = placement({0, 0, 1, 1}, {0, 1}, 4);
  auto stages = pipeline_stages(p, g, c);
  REQUIRE(stages.is_ok());
  auto b = stage_breakdown(g, c, *cost, p, *stages, batch);
  REQUIRE(b.is_ok());
  CHECK(b->memory_error.empty());
  REQUIRE(b->stages.size() == 2u);
  Simulator sim(g, c, *cost, batch);
  const StepReport same = sim.evaluate(p);
  REQUIRE(same.ok);
  CHECK(b->report.step_ms == doctest::Approx(same.step_ms));
  for (int s = 0; s < 2; ++s) {
    const StageDeviceCost& dc = b->stages[s].devices.at(0);
    CHECK(dc.device == s);
    CHECK(dc.micro_batches == 4);
    const int first = (*stages)[s].first_layer, last = (*stages)[s].end_layer - 1;
    // Four micro-batches of 4 samples, no calibration overheads, no other local device slowdown.
    CHECK(dc.forward_ms == doctest::Approx(4 * cost->forward_ms(s, first, last, 4, 1)));
    CHECK(dc.backward_ms == doctest::Approx(4 * cost->backward_ms(s, first, last, 4, 1)));
    CHECK(dc.send_ms > 0);  // activations forward from stage 0, gradients back from stage 1
    // The report's waiting (comm + idle), split into time on the wire and the pipeline's bubble.
    CHECK(dc.report_comm_ms == doctest::Approx(same.devices[s].comm_ms));
    CHECK(dc.comm_ms <= same.devices[s].comm_ms + 1e-9);
    CHECK(dc.comm_ms + dc.bubble_ms == doctest::Approx(same.devices[s].comm_ms + same.devices[s].idle_ms));
    CHECK(dc.peak_memory_bytes == same.devices[s].peak_memory_bytes);
  }
  nlohmann::json j = stage_breakdown_to_json(*b, g, c);
  CHECK(j["stages"][1]["layers"] == nlohmann::json({"fc2", "fc3"}));
  CHECK(j["stages"][0]["devices"][0]["device"] == "d0");
}

TEST_CASE(
    "the pipeline's fill and drain are bubble, not communication, though the report counts them as waiting") {
  const LayerGraph g = linear_chain({1024, 1024, 1024, 1024});
  const Cluster c = devices(2);  // the default link: 10 Gbit/s, 0.05 ms
  const int64_t batch = 16;
  auto cost = CostModel::build(g, c, estimated_library(g, batch), Calibration{});
  REQUIRE(cost.is_ok());
  const Placement p = placement({0, 0, 1, 1}, {0, 1}, 4);
  auto b = stage_breakdown(g, c, *cost, p, *pipeline_stages(p, g, c), batch);
  REQUIRE(b.is_ok());
  // GPipe: stage 0 waits for stage 1's last forward and first backward
  // before its own backwards start; the gradient is on the wire a fraction of that.
  const StageDeviceCost& first = b->stages[0].devices[0];
  CHECK(first.bubble_ms > 2 * first.comm_ms);
  CHECK(first.report_comm_ms == doctest::Approx(first.comm_ms + first.bubble_ms));
}

TEST_CASE("a placement over a device's memory is still broken down, and the breakdown names the device") {
  const LayerGraph g = linear_chain({4096, 4096, 10});
  const Cluster c = devices(2, 1);  // 1 MiB each
  auto cost = CostModel::build(g, c, estimated_library(g, 8), Calibration{});
  REQUIRE(cost.is_ok());
  const Placement p = placement({0, 1, 1}, {0, 1}, 2);
  auto b = stage_breakdown(g, c, *cost, p, *pipeline_stages(p, g, c), 8);
  REQUIRE(b.is_ok());
  // The error names the first device over its memory under core's rule.
  const std::vector<int64_t> need = estimate_device_memory_bytes(p, g, c, 8);
  int over = -1;
  for (int d = 0; d < c.num_devices() && over < 0; ++d)
    if (need[d] > device_memory_bytes(c.devices[d])) over = d;
  REQUIRE(over >= 0);
  CHECK(has(b->memory_error, "device '" + c.devices[over].name + "'"));
  CHECK(b->stages[1].devices[0].peak_memory_bytes > 1048576);
}

TEST_CASE("a batch that does not split into equal micro-batches is said where the format needs them equal") {
  const LayerGraph g = linear_chain({16, 16, 16, 16, 16, 10});
  const Cluster c = devices(2);
  Placement p = placement({0, 0, 0, 1, 1, 1}, {0, 1});
  p.micro_batches = 3;
  for (PartitionFormat f : {PartitionFormat::deepspeed, PartitionFormat::megatron}) {
    auto uneven = export_partition(p, g, c, f, 8);
    REQUIRE(uneven.is_ok());
    CHECK(uneven->micro_batch_size == 3);
    bool said = false;
    for (const std::string& n : uneven->notes)
      said = said || n.find("the batch of 8 does not split into 1 replica(s) x 3 equal micro-batches") != std::string::npos;
    CHECK_MESSAGE(said, partition_format_name(f));
    auto even = export_partition(p, g, c, f, 9);
    REQUIRE(even.is_ok());
    for (const std::string& n : even->notes) CHECK(n.find("does not split") == std::string::npos);
  }
  auto pipe = export_partition(p, g, c, PartitionFormat::pipe, 8);  // torch's Pipe chunks unevenly itself
  REQUIRE(pipe.is_ok());
  for (const std::string& n : pipe->notes) CHECK(n.find("does not split") == std::string::npos);
}
