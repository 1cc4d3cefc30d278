// tests/fuzz/fuzz_layer_library.cpp — fuzzes the layer library's JSON form (model/layer_library.h).
//
// Input: any bytes; JSON text is handed to library_from_json (other bytes are
// skipped: nlohmann's own parser is not under test).
// Properties: no crash, no exception and no undefined behaviour; a library that
// parses writes back (library_to_json) to one that parses to the same document,
// and its totals are computable.
// Seeds: schemas/examples/layer_library/{valid,invalid}.
#include "fuzz_support.h"
#include "model/layer_library.h"

using namespace tapp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json doc = fuzz::as_json(data, size);
  if (doc.is_discarded()) return 0;
  Result<LayerLibrary> lib = library_from_json(doc);
  if (!lib) return 0;
  const nlohmann::json written = library_to_json(*lib);
  Result<LayerLibrary> again = library_from_json(written);
  FUZZ_CHECK(again, "a parsed library writes back to a document that does not parse: " + written.dump());
  FUZZ_CHECK(library_to_json(*again) == written, "the round trip changed the library: " + written.dump());
  (void)lib->total_forward_ms();
  (void)lib->total_backward_ms();
  return 0;
}
