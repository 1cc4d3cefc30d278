// tests/fuzz/fuzz_support.h — what every fuzz target shares.
//
// FUZZ_CHECK states a property the parser must keep for every input (a parsed
// document writes back to one that parses to the same thing); a broken one
// aborts, which libFuzzer and the ctest replay both report as a crash.
// Parsers are called through their public headers only, so the targets keep
// compiling while the parsers' insides change.
// Thread safety: none needed (libFuzzer and the replay call one input at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#define FUZZ_CHECK(cond, what)                                                          \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  %s\n", __FILE__, __LINE__, \
                   #cond, std::string(what).c_str());                                   \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

namespace tapp::fuzz {

inline std::string as_text(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// The input as JSON, or a discarded value when it is not JSON (no exception:
// the JSON library's own parser is not what these targets test).
inline nlohmann::json as_json(const uint8_t* data, size_t size) {
  return nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
}

}  // namespace tapp::fuzz
