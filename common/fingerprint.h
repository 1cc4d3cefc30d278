// common/fingerprint.h — the one hash behind every fingerprint and digest.
//
// Owns `fnv1a64` (64-bit FNV-1a; another seed gives an independent digest)
// and `hex16` (its 16-digit lowercase hex form): the layer graph's fingerprint
// (model/model_json.h), the cluster's (core/cluster_fingerprint.h) and the
// token comparison's digests (service/http/router.cpp). Not cryptographic.
// Thread safety: pure functions. Header-only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tapp {

constexpr uint64_t kFnv1aOffset = 1469598103934665603ULL;

inline uint64_t fnv1a64(std::string_view text, uint64_t seed = kFnv1aOffset) {
  uint64_t h = seed;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

inline std::string hex16(uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

}  // namespace tapp
