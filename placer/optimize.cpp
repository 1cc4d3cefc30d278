// placer/optimize.cpp — one optimization job end to end (see optimize.h).
#include "placer/optimize.h"

namespace tapp {

Result<nlohmann::json> optimize(const OptimizeRequest&, const ProgressFn&, const std::atomic<bool>&) {
  return Status::error("optimize: not built yet");
}

}  // namespace tapp
