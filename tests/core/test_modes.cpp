// Typed modes in core: the data-parallel mode of a Placement (JSON round trip,
// backward compatibility, refusals naming the field) and the failure kinds of a StepReport.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/cluster.h"
#include "core/placement.h"
#include "core/step_report.h"
#include "model/layer_graph.h"

using namespace tapp;

namespace {

LayerGraph two_layers() {
  LayerGraph g;
  g.name = "two";
  g.input_shape = {8};
  for (int i = 0; i < 2; ++i) {
    Layer l;
    l.name = "fc" + std::to_string(i);
    l.op = "linear";
    l.attrs.out = 4;
    if (i > 0) l.inputs = {0};
    g.layers.push_back(l);
  }
  REQUIRE(infer_shapes(g).is_ok());
  return g;
}

Cluster two_devices() {
  Cluster c;
  for (const char* name : {"cpu0", "cpu1"}) {
    Device d;
    d.name = name;
    c.devices.push_back(d);
  }
  return c;
}

}  // namespace

TEST_CASE("each data-parallel mode survives a JSON round trip, and the source is only a label") {
  const LayerGraph g = two_layers();
  const Cluster c = two_devices();
  for (DataParallelMode mode : {DataParallelMode::bsp, DataParallelMode::hogwild}) {
    Placement p = Placement::replicas(2, {1, 0}, mode);
    p.source = "user";  // a label: it must not change the mode
    const nlohmann::json j = placement_to_json(p, g, c);
    CHECK(j["data_parallel"] == true);
    auto back = placement_from_json(j, g, c);
    REQUIRE(back.is_ok());
    CHECK(back->data_parallel == mode);
    CHECK(back->source == "user");
    CHECK(back->group_device == std::vector<int>{1, 0});
  }
  Placement pipeline = Placement::single_device(2, 1);
  const nlohmann::json j = placement_to_json(pipeline, g, c);
  CHECK_FALSE(j.contains("data_parallel"));
  CHECK_FALSE(j.contains("data_parallel_mode"));
  CHECK(placement_from_json(j, g, c)->data_parallel == DataParallelMode::none);
  // A source of "hogwild" no longer selects anything.
  Placement labelled = Placement::replicas(2, {0, 1});
  labelled.source = "hogwild";
  CHECK(placement_from_json(placement_to_json(labelled, g, c), g, c)->data_parallel == DataParallelMode::bsp);
}

TEST_CASE("\"data_parallel\": true alone still parses as BSP, and the mode alone is enough") {
  const LayerGraph g = two_layers();
  const Cluster c = two_devices();
  nlohmann::json j = {
      {"micro_batches", 1}, {"groups", {"cpu0", "cpu1"}}, {"layers", {{"fc0", 0}, {"fc1", 0}}}};
  j["data_parallel"] = true;
  CHECK(placement_from_json(j, g, c)->data_parallel == DataParallelMode::bsp);
  j.erase("data_parallel");
  j["data_parallel_mode"] = "hogwild";
  CHECK(placement_from_json(j, g, c)->data_parallel == DataParallelMode::hogwild);
  j["data_parallel_mode"] = "bsp";
  CHECK(placement_from_json(j, g, c)->data_parallel == DataParallelMode::bsp);
}

TEST_CASE(
    "an unknown data-parallel mode, or one that contradicts data_parallel, is refused naming the field") {
  const LayerGraph g = two_layers();
  const Cluster c = two_devices();
  nlohmann::json j = {
      {"micro_batches", 1}, {"groups", {"cpu0", "cpu1"}}, {"layers", {{"fc0", 0}, {"fc1", 0}}}};
  j["data_parallel_mode"] = "async";
  auto bad = placement_from_json(j, g, c);
  REQUIRE_FALSE(bad.is_ok());
  CHECK(bad.error_message().rfind("placement.data_parallel_mode: ", 0) == 0);
  CHECK(bad.error_message().find("\"async\"") != std::string::npos);
  CHECK(bad.error_message().find("hogwild") != std::string::npos);
  j["data_parallel_mode"] = 3;
  CHECK(placement_from_json(j, g, c).error_message().rfind("placement.data_parallel_mode: expected a string",
                                                           0) == 0);
  j["data_parallel_mode"] = "hogwild";
  j["data_parallel"] = false;
  auto contradiction = placement_from_json(j, g, c);
  REQUIRE_FALSE(contradiction.is_ok());
  CHECK(contradiction.error_message().rfind("placement.data_parallel_mode: ", 0) == 0);
  j["data_parallel_mode"] = "none";
  j["data_parallel"] = true;
  CHECK_FALSE(placement_from_json(j, g, c).is_ok());
}

TEST_CASE("mode names round-trip, and failure kinds keep the names the JSON has always carried") {
  for (DataParallelMode m : {DataParallelMode::none, DataParallelMode::bsp, DataParallelMode::hogwild})
    CHECK(*data_parallel_mode_from_name(data_parallel_mode_name(m)) == m);
  CHECK_FALSE(data_parallel_mode_from_name("BSP").is_ok());
  CHECK(failure_kind_name(FailureKind::invalid_placement) == "invalid_placement");
  CHECK(failure_kind_name(FailureKind::out_of_memory) == "out_of_memory");
  CHECK(failure_kind_name(FailureKind::worker_failed) == "worker_failed");
  CHECK(failure_kind_name(FailureKind::worker_unreachable) == "worker_unreachable");
  CHECK(failure_kind_name(FailureKind::timeout) == "timeout");
  CHECK(failure_kind_name(FailureKind::invalid_options) == "invalid_options");
  CHECK(failure_kind_name(FailureKind::invalid_strategy) == "invalid_strategy");
  CHECK(failure_kind_name(FailureKind::no_placement) == "no_placement");
  CHECK(failure_kind_name(FailureKind::skipped) == "skipped");
  const nlohmann::json j =
      step_report_to_json(StepReport::failure(FailureKind::out_of_memory, "too big", "simulate"));
  CHECK(j["ok"] == false);
  CHECK(j["failure_kind"] == "out_of_memory");
  CHECK(j["message"] == "too big");
}
