#include "model/profile_cache.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/model_json.h"
#include <nlohmann/json.hpp>

namespace tapp {
namespace fs = std::filesystem;

std::string FileProfileCache::path_of(const std::string& key) const {
  std::string safe;
  for (char c : key)
    safe += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') ? c : '_';
  return (fs::path(dir_) / (safe + ".json")).string();
}

std::optional<std::string> FileProfileCache::get(const std::string& key) {
  std::ifstream in(path_of(key));
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Status FileProfileCache::put(const std::string& key, const std::string& library_json) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) return Status::error("profile cache " + dir_ + ": " + ec.message());
  const std::string path = path_of(key);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp);
    if (!out) return Status::error("profile cache: cannot write " + tmp);
    out << library_json;
    if (!out) return Status::error("profile cache: write failed for " + tmp);
  }
  fs::rename(tmp, path, ec);
  if (ec) return Status::error("profile cache: cannot rename to " + path + ": " + ec.message());
  return Status::ok();
}

std::string default_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) return std::string(xdg) + "/tapp";
  if (const char* home = std::getenv("HOME"); home && *home) return std::string(home) + "/.cache/tapp";
  return ".tapp-cache";
}

// Bumped when the way layers are timed changes, so older profiles are not reused
// (2: OpenBLAS's pool sized to the device's threads, see compute_threads.h;
// 3: tcmalloc linked into every binary that trains or profiles, so calibrations
// measured by glibc-malloc workers are refused; 4: emulated devices take turns
// on the host's cores and two warm-up steps precede the timed ones, so
// calibrations fitted on steps where they competed are refused).
constexpr int kProfileMethod = 4;

int profile_timing_method() { return kProfileMethod; }

std::string profile_cache_key(const LayerGraph& graph, const std::string& device_kind, int threads,
                              int64_t batch_size, Allocator allocator) {
  std::string shape;
  for (size_t i = 0; i < graph.input_shape.size(); ++i)
    shape += (i ? "x" : "") + std::to_string(graph.input_shape[i]);
  return graph.name + "-" + shape + "-" + graph_fingerprint(graph) + "-" + device_kind + "-t" +
         std::to_string(threads) + "-b" + std::to_string(batch_size) + "-m" + std::to_string(kProfileMethod) +
         "-" + allocator_name(allocator);
}

namespace {
std::string shape_key(const LayerGraph& graph) {
  std::string shape;
  for (size_t i = 0; i < graph.input_shape.size(); ++i) shape += (i ? "x" : "") + std::to_string(graph.input_shape[i]);
  return shape;
}
}  // namespace

std::string worker_profile_cache_key(const LayerGraph& graph, const std::string& worker_device_fingerprint,
                                     int64_t batch_size) {
  return graph.name + "-" + shape_key(graph) + "-" + graph_fingerprint(graph) + "-w" + worker_device_fingerprint +
         "-b" + std::to_string(batch_size);
}

std::optional<LayerLibrary> cached_library(ProfileCache& cache, const LayerGraph& graph,
                                           const std::string& device_kind, int threads, int64_t batch_size) {
  return cached_library_at(cache, graph, profile_cache_key(graph, device_kind, threads, batch_size));
}

std::optional<LayerLibrary> cached_library_at(ProfileCache& cache, const LayerGraph& graph, const std::string& key) {
  auto text = cache.get(key);
  if (!text) return std::nullopt;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  Result<LayerLibrary> lib = library_from_json(j);
  if (!lib || lib->rows.size() != graph.layers.size()) return std::nullopt;
  return std::move(lib.value());
}

}  // namespace tapp
