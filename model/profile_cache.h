// model/profile_cache.h — where measured layer libraries are kept between runs.
//
// Owns the `ProfileCache` interface (get/put of a LayerLibrary's JSON text by
// key), its file-directory implementation, and the key: model name, graph
// fingerprint, input size, device kind, threads, batch size, timing method and
// the allocator this process runs with. The service
// plugs its SQLite store in through the same interface.
// Data flow: profile_cached() -> key -> get (hit: parse) | profile -> put.
// Thread safety: FileProfileCache writes each entry atomically (temp file +
// rename), so concurrent processes never read half an entry; one object is
// not meant to be shared between threads without external locking.
#pragma once

#include <optional>
#include <string>

#include "common/allocator.h"
#include "common/status.h"
#include "model/layer_graph.h"
#include "model/layer_library.h"

namespace tapp {

class ProfileCache {
 public:
  virtual ~ProfileCache() = default;
  virtual std::optional<std::string> get(const std::string& key) = 0;
  virtual Status put(const std::string& key, const std::string& library_json) = 0;
};

// One <key>.json file per entry in a directory (created on first put).
class FileProfileCache : public ProfileCache {
 public:
  explicit FileProfileCache(std::string dir) : dir_(std::move(dir)) {}
  std::optional<std::string> get(const std::string& key) override;
  Status put(const std::string& key, const std::string& library_json) override;
  const std::string& dir() const { return dir_; }
  std::string path_of(const std::string& key) const;

 private:
  std::string dir_;
};

// $XDG_CACHE_HOME/tapp, else $HOME/.cache/tapp, else ./.tapp-cache.
std::string default_cache_dir();

// The timing method measured costs are taken with (thread pools, allocator):
// part of every cache key, and of a stored calibration (simulator/calibration_store.h),
// so figures measured another way are never reused.
int profile_timing_method();

// "<model>-<input shape>-<fingerprint>-<device>-t<threads>-b<batch>-m<method>-<allocator>".
// The allocator this process runs with is in the key as well: a step under
// glibc's malloc ran 2.5x slower than under tcmalloc, so a profile timed under
// one is not reused under the other (common/allocator.h).
std::string profile_cache_key(const LayerGraph& graph, const std::string& device_kind, int threads,
                              int64_t batch_size, Allocator allocator = running_allocator());

// A profile a remote tapp-worker measured on its own hardware:
// "<model>-<input shape>-<fingerprint>-w<worker device fingerprint>-b<batch>".
// The worker's device fingerprint (runtime/control_channel.h WorkerDevice)
// covers its CPU model, the device's kind and threads, its LibTorch version,
// timing method and allocator, so two workers' profiles never share a key.
std::string worker_profile_cache_key(const LayerGraph& graph, const std::string& worker_device_fingerprint,
                                     int64_t batch_size);

// The library under `key` if it is readable and its rows match the graph.
std::optional<LayerLibrary> cached_library_at(ProfileCache& cache, const LayerGraph& graph, const std::string& key);

// The cached library of `graph` under that key, if there is a readable entry
// whose rows match the graph; a missing, corrupt or stale entry is nullopt.
std::optional<LayerLibrary> cached_library(ProfileCache& cache, const LayerGraph& graph,
                                           const std::string& device_kind, int threads, int64_t batch_size);

}  // namespace tapp
