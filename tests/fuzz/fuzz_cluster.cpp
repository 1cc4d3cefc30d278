// tests/fuzz/fuzz_cluster.cpp — fuzzes the cluster document (core/cluster.h cluster_from_json).
//
// Input: any bytes; JSON text is handed to cluster_from_json (other bytes are
// skipped: nlohmann's own parser is not under test).
// Properties: no crash, no exception and no undefined behaviour; a cluster that
// parses writes back (cluster_to_json) to one that parses to the same document;
// every pair of devices has a link and the emulated core demand is a number.
// Seeds: schemas/examples/cluster/{valid,invalid}, examples/cluster_*.json.
#include <cmath>

#include "core/cluster.h"
#include "fuzz_support.h"

using namespace tapp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json doc = fuzz::as_json(data, size);
  if (doc.is_discarded()) return 0;
  Result<Cluster> cluster = cluster_from_json(doc);
  if (!cluster) return 0;
  const nlohmann::json written = cluster_to_json(*cluster);
  Result<Cluster> again = cluster_from_json(written);
  FUZZ_CHECK(again, "a parsed cluster writes back to a document that does not parse: " + written.dump());
  FUZZ_CHECK(cluster_to_json(*again) == written, "the round trip changed the cluster: " + written.dump());
  const int n = cluster->num_devices();
  for (int from = 0; from < n; ++from) {
    FUZZ_CHECK(cluster->index_of(cluster->devices[from].name) >= 0, "a device is not found by its name");
    for (int to = 0; to < n; ++to) (void)cluster->link(from, to).transfer_s(1 << 20);
  }
  FUZZ_CHECK(!std::isnan(cluster->emulated_core_demand()), "the emulated core demand is NaN");
  return 0;
}
