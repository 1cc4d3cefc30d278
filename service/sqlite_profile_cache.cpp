// service/sqlite_profile_cache.cpp — ProfileCache over JobStore (see sqlite_profile_cache.h).
#include "service/sqlite_profile_cache.h"

namespace tapp::service {

std::optional<std::string> SqliteProfileCache::get(const std::string& key) {
  Result<std::optional<std::string>> v = store_.cache_get(key);
  if (!v) return std::nullopt;  // a read error is a cache miss: the profile is measured again
  return *v;
}

Status SqliteProfileCache::put(const std::string& key, const std::string& library_json) {
  return store_.cache_put(key, library_json);
}

}  // namespace tapp::service
