// common/checked_math.h — integer arithmetic that cannot overflow silently.
//
// Owns the helpers model sizes are computed with (parameter counts, multiply-
// adds, activation and memory bytes): `checked_mul`/`checked_add` say whether
// the exact result fits in int64; `sat_mul`/`sat_add` clamp at INT64_MAX for
// sums that are compared against a limit afterwards (a saturated size is
// always over any limit, never wrapped to a small or negative one).
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <limits>

namespace tapp {

inline constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// false when a * b does not fit in int64.
inline bool checked_mul(int64_t a, int64_t b, int64_t& out) { return !__builtin_mul_overflow(a, b, &out); }
inline bool checked_add(int64_t a, int64_t b, int64_t& out) { return !__builtin_add_overflow(a, b, &out); }

// For non-negative operands: the product or sum, or INT64_MAX when it would not fit.
inline int64_t sat_mul(int64_t a, int64_t b) {
  int64_t out;
  return checked_mul(a, b, out) ? out : kInt64Max;
}
inline int64_t sat_add(int64_t a, int64_t b) {
  int64_t out;
  return checked_add(a, b, out) ? out : kInt64Max;
}

}  // namespace tapp
