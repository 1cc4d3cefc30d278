// tests/model/memory_profile_cache.h — an in-memory ProfileCache for tests:
// the profiles and calibrations a job stores, kept in a map the test can read,
// with a count of the reads (whether a job asked the cache at all).
#pragma once

#include <map>
#include <optional>
#include <string>

#include "model/profile_cache.h"

namespace tapp::test {

class MemoryProfileCache : public ProfileCache {
 public:
  std::optional<std::string> get(const std::string& key) override {
    ++gets;
    auto it = entries.find(key);
    return it == entries.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  Status put(const std::string& key, const std::string& value) override {
    entries[key] = value;
    return Status::ok();
  }
  std::map<std::string, std::string> entries;
  int gets = 0;
};

}  // namespace tapp::test
