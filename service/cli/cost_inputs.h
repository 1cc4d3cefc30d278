// service/cli/cost_inputs.h — the simulator's inputs for the command line (plan, calibrate).
//
// Owns how tapp-cli turns (model, cluster, batch) into a CostModel: the layer
// libraries by the rule every job follows (profiler/cost_profiles.h: one set
// per distinct device kind and threads, at micro-batch sizes 1, 2, 4, ... up
// to the batch) — cached profiles only ("auto", the multiply-add estimate
// where none is cached), cached or measured ("profile", as the server's jobs)
// or multiply-add estimates ("estimated") — plus a calibration: the file's,
// else default fixed costs per task (0.2 ms), layer (0.05 ms) and message
// (0.2 ms). A device that names its own costs (a layer-library file, its
// remote worker's profile) gets them (profiler/cost_profiles.h). Progress of a
// measured profile goes to stderr. Errors name the input.
// Thread safety: one call at a time (profiling sets LibTorch's thread count).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"
#include "model/layer_library.h"
#include "profiler/cost_profiles.h"  // CostSource
#include "simulator/cost_model.h"

namespace tapp {
struct LayerGraph;
struct Cluster;
}  // namespace tapp

namespace tapp::cli {

struct CostInputs {
  std::vector<LayerLibrary> libraries;
  std::vector<std::vector<LayerLibrary>> device_libraries;  // [device]: its own costs (cluster `costs`); empty: shared
  std::vector<std::string> device_costs;  // "fast: layer library 'a.json'", "remote: worker ... device fingerprint ..." 
  std::string costs_note;  // "cached profiles at ...", "measured profiles at ...", "estimated from multiply-adds"
  std::vector<std::string> skipped;  // "cpu x1 at micro-batch size 1: <why>"
  Calibration calibration;
  std::string calibration_note;  // "default", or "fitted <when> from N measurements (...)"
};

// --costs MODE as a source: "auto" or "cached" (optimize's and the HTTP API's
// word for it) | "profile" | "estimated"; else an error naming --costs.
Result<CostSource> cost_source(const std::string& mode);

// mode: as cost_source. calibration_path: a file from
// `tapp-cli calibrate --out` (refused when it is for another cluster or timing
// method); empty = the calibration stored for this cluster, else the default
// (a stored one that cannot be used is named on stderr and not used).
Result<CostInputs> load_cost_inputs(const LayerGraph& g, const Cluster& c, int64_t batch_size,
                                    const std::string& mode, const std::string& calibration_path);

}  // namespace tapp::cli
