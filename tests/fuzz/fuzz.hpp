// Shared by the fuzz targets: the libFuzzer entry point's signature, and a check that
// stops the run loudly (abort: libFuzzer saves the input, the replay test fails) when a
// property of the code under test does not hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <algorithm>

#define FUZZ_REQUIRE(cond)                                                              \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

namespace optcast::fuzz {

// Consumes the input from the front.
struct input {
  std::span<const std::uint8_t> rest;
  std::uint8_t byte() {
    if (rest.empty()) return 0;
    const auto b = rest.front();
    rest = rest.subspan(1);
    return b;
  }
  std::span<const std::byte> take(std::size_t n) {
    n = std::min(n, rest.size());
    auto out = std::as_bytes(rest.first(n));
    rest = rest.subspan(n);
    return out;
  }
};

inline bool printable_only(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c >= 0x7f) return false;
  return true;
}

}  // namespace optcast::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
