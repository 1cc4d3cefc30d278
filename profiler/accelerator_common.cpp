#include "profiler/accelerator.h"

#include <cctype>

namespace tapp {

std::optional<int> cuda_index(const std::string& kind) {
  const std::string prefix = "cuda:";
  if (kind.rfind(prefix, 0) != 0 || kind.size() == prefix.size() || kind.size() > prefix.size() + 4) return std::nullopt;
  int n = 0;
  for (size_t i = prefix.size(); i < kind.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(kind[i]))) return std::nullopt;
    n = n * 10 + (kind[i] - '0');
  }
  return n;
}

}  // namespace tapp
