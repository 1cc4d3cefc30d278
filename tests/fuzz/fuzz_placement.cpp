// tests/fuzz/fuzz_placement.cpp — fuzzes the placement document (core/placement.h placement_from_json).
//
// Input: any bytes; JSON text is read as a placement of a fixed five-layer MLP
// (fc0 relu0 fc1 relu1 fc2, as in schemas/examples/placement) on a fixed
// cluster of four devices (cpu0 cpu1 a b; b with little memory).
// Properties: no crash, no exception and no undefined behaviour; a placement
// that parses writes back (placement_to_json) to one that parses to the same
// document; one that also validates (batch 32) has a memory estimate per
// device and a memory verdict.
// Seeds: schemas/examples/placement/{valid,invalid}, examples/placement_*.json.
#include "core/cluster.h"
#include "core/placement.h"
#include "fuzz_support.h"
#include "model/model_json.h"

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
  return 0;
}
