// service/cli/text_cells.h — the cells of the command line's tables.
//
// Owns `cell` (a value right-aligned in its column) and `label` (a name
// left-aligned in its column), each with at least one space on its open side,
// so that a value wider than its column (a step of 43,389,660 ms, a 46.19x
// speed-up) pushes the rest of its row right instead of running into its neighbour.
#pragma once

#include <string>

namespace tapp::cli {

inline std::string cell(const std::string& text, size_t width) {
  return std::string(text.size() < width ? width - text.size() : 1, ' ') + text;
}

inline std::string label(const std::string& text, size_t width) {
  return text + std::string(text.size() < width ? width - text.size() : 1, ' ');
}

}  // namespace tapp::cli
