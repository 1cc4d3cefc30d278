// service/sqlite_profile_cache.h — the profiler's ProfileCache kept in the job database.
//
// Owns nothing but a reference to the JobStore: get/put go to its
// profile_cache table (key -> layer library JSON, and each cluster's fitted
// calibration: simulator/calibration_store.h), so every job of a server shares
// measured profiles and calibrations and they survive restarts with the jobs.
// Data flow: profile_cached() -> ProfileCache::get/put -> JobStore::cache_get/put.
// Thread safety: as JobStore (every call is thread-safe).
#pragma once

#include "model/profile_cache.h"
#include "service/job_store.h"

namespace tapp::service {

class SqliteProfileCache : public ProfileCache {
 public:
  explicit SqliteProfileCache(JobStore& store) : store_(store) {}
  std::optional<std::string> get(const std::string& key) override;
  Status put(const std::string& key, const std::string& library_json) override;

 private:
  JobStore& store_;
};

}  // namespace tapp::service
