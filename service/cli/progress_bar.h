// service/cli/progress_bar.h — the one text progress bar of tapp-cli ("[#####.....]").
//
// Owns `progress_bar`: `fraction` in [0, 1] fills `width` cells (clamped), so
// every command that shows progress draws it the same way.
// Thread safety: a pure function.
#pragma once

#include <algorithm>
#include <string>

namespace tapp::cli {

inline std::string progress_bar(double fraction, int width) {
  const int filled = std::clamp(static_cast<int>(width * fraction), 0, width);
  return "[" + std::string(filled, '#') + std::string(width - filled, '.') + "]";
}

}  // namespace tapp::cli
