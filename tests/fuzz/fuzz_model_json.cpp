// tests/fuzz/fuzz_model_json.cpp — fuzzes the JSON layer-graph format (model/model_json.h).
//
// Input: any bytes, read as the text of a model document (parse_model_json).
// Properties: no crash, no exception and no undefined behaviour on any input;
// a graph that parses writes back (model_to_json) to a document that parses to
// the same graph, and its fingerprint is 16 hex digits.
// Seeds: schemas/examples/model/{valid,invalid}, tests/fixtures/models.
#include "fuzz_support.h"
#include "model/model_json.h"

using namespace tapp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Result<LayerGraph> graph = parse_model_json(fuzz::as_text(data, size));
  if (!graph) return 0;
  const nlohmann::json written = model_to_json(*graph);
  Result<LayerGraph> again = model_from_json(written);
  FUZZ_CHECK(again, "a parsed graph writes back to a document that does not parse: " + written.dump());
  FUZZ_CHECK(model_to_json(*again) == written, "the round trip changed the graph: " + written.dump());
  FUZZ_CHECK(graph_fingerprint(*graph).size() == 16, "fingerprint is not 16 hex digits");
  return 0;
}
