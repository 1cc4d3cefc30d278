// tests/fuzz/fuzz_placement.cpp — fuzzes the placement document (core/placement.h placement_from_json).
//
// Input: any bytes; JSON text is read as a placement of a fixed five-layer MLP
// (fc0 relu0 fc1 relu1 fc2, as in schemas/examples/placement) on a fixed
// cluster of four devices (cpu0 cpu1 a b; b with little memory).
// Properties: no crash, no exception and no undefined behaviour; a placement
// that parses writes back (placement_to_json) to one that parses to the same
// document; one that also validates (batch 32) has a memory estimate per
// device and a memory verdict, and the simulator's search path (no tasks
// built, simulate_segments) reports what its task graph's replay reports.
// Seeds: schemas/examples/placement/{valid,invalid}, examples/placement_*.json.
#include "core/cluster.h"
#include "core/placement.h"
#include "fuzz_support.h"
#include "model/layer_library.h"
#include "model/model_json.h"
#include "simulator/simulator.h"

using namespace tapp;

namespace {

constexpr int64_t kBatchSize = 32;

const LayerGraph& fixed_model() {
  static const LayerGraph g = *parse_model_json(R"({"name": "mlp", "input_shape": [64], "layers": [
      {"name": "fc0", "op": "linear", "attrs": {"out": 128}},
      {"name": "relu0", "op": "relu", "inputs": ["fc0"]},
      {"name": "fc1", "op": "linear", "inputs": ["relu0"], "attrs": {"out": 64}},
      {"name": "relu1", "op": "relu", "inputs": ["fc1"]},
      {"name": "fc2", "op": "linear", "inputs": ["relu1"], "attrs": {"out": 10}}]})");
  return g;
}

const Cluster& fixed_cluster() {
  static const Cluster c = *cluster_from_json(nlohmann::json::parse(R"({"devices": [
      {"name": "cpu0"}, {"name": "cpu1", "speed": 0.5},
      {"name": "a", "threads": 2}, {"name": "b", "memory_mb": 1}]})"));
  return c;
}

// The simulator of the fixed model and cluster, costs estimated.
Simulator& fixed_simulator() {
  static Simulator sim(fixed_model(), fixed_cluster(),
                       *CostModel::build(fixed_model(), fixed_cluster(), estimated_library(fixed_model(), kBatchSize)),
                       kBatchSize);
  return sim;
}

// The search's evaluation (no timeline: the segment replay) against the task graph's.
void check_search_path(const Placement& p, const std::string& doc) {
  SimulateOptions search;
  search.timeline = false;
  const StepReport fast = fixed_simulator().evaluate(p, search);
  const StepReport full = fixed_simulator().evaluate(p);
  FUZZ_CHECK(fast.ok == full.ok && fast.failure_kind == full.failure_kind,
             "the search's path and the task graph's disagree on whether it runs: " + doc);
  if (!fast.ok) return;
  bool same = fast.step_ms == full.step_ms && fast.devices.size() == full.devices.size();
  for (size_t d = 0; same && d < fast.devices.size(); ++d)
    same = fast.devices[d].busy_ms == full.devices[d].busy_ms && fast.devices[d].comm_ms == full.devices[d].comm_ms &&
           fast.devices[d].peak_memory_bytes == full.devices[d].peak_memory_bytes;
  FUZZ_CHECK(same, "the search's path and the task graph's report different steps: " + doc);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const LayerGraph& g = fixed_model();
  const Cluster& c = fixed_cluster();
  const nlohmann::json doc = fuzz::as_json(data, size);
  if (doc.is_discarded()) return 0;
  Result<Placement> placement = placement_from_json(doc, g, c);
  if (!placement) return 0;
  const nlohmann::json written = placement_to_json(*placement, g, c);
  Result<Placement> again = placement_from_json(written, g, c);
  FUZZ_CHECK(again, "a parsed placement writes back to a document that does not parse: " + written.dump());
  FUZZ_CHECK(placement_to_json(*again, g, c) == written, "the round trip changed the placement: " + written.dump());
  if (!validate_placement(*placement, g, c, kBatchSize)) return 0;
  std::vector<int64_t> bytes = estimate_device_memory_bytes(*placement, g, c, kBatchSize);
  FUZZ_CHECK(bytes.size() == static_cast<size_t>(c.num_devices()), "one memory estimate per device");
  for (int64_t b : bytes) FUZZ_CHECK(b >= 0, "a negative memory estimate: " + written.dump());
  (void)check_memory(*placement, g, c, kBatchSize);
  check_search_path(*placement, written.dump());
  return 0;
}
