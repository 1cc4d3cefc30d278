// tests/fuzz/fuzz_torchscript.cpp — fuzzes TorchScript loading (profiler/torchscript_import.h).
//
// Input: any bytes, written to a temp file that import_torchscript loads (the
// path an uploaded model_file takes). LibTorch (prebuilt, not instrumented)
// reads the zip archive and the pickles; our importer walks the graph.
// Properties: no crash, no exception and no undefined behaviour: LibTorch's
// refusals come back as an error; a module that imports is a graph that
// writes as a JSON layer graph that reads back (tapp-cli export-model).
// Seeds: the modules tests/profiler/make_torchscript.py saves (scripts/fuzz.sh
// makes them with python3-torch). Most mutations break the archive's CRCs, so
// this target mainly checks that broken files are refused cleanly; run it
// longer from the saved modules to reach the importer's graph walk.
#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "fuzz_support.h"
#include "model/model_json.h"
#include "profiler/torchscript_import.h"

using namespace tapp;

namespace {

// One file per process, removed at exit.
struct TempFile {
  std::string path = "/tmp/tapp-fuzz-torchscript-" + std::to_string(getpid()) + ".pt";
  ~TempFile() { std::remove(path.c_str()); }
};

const std::string& temp_path() {
  static TempFile f;
  return f.path;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = temp_path();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    FUZZ_CHECK(out.good(), "cannot write " + path);
  }
  Result<LayerGraph> graph = import_torchscript(path);
  if (!graph) return 0;
  const nlohmann::json written = model_to_json(*graph);
  FUZZ_CHECK(model_from_json(written), "an imported module writes a JSON graph that does not read back: " +
                                           written.dump());
  return 0;
}
