// 2x2 matrices of uint32 (arithmetic mod 2^32) under multiplication: associative, not
// commutative, so a result equal to the left-to-right product shows the order was kept.
#pragma once

#include <cstdint>

namespace optcast::testing {

struct mat2 {
  std::uint32_t a = 1, b = 0, c = 0, d = 1;
  friend bool operator==(const mat2&, const mat2&) = default;
};

inline mat2 mul(const mat2& x, const mat2& y) {
  return {x.a * y.a + x.b * y.c, x.a * y.b + x.b * y.d, x.c * y.a + x.d * y.c, x.c * y.b + x.d * y.d};
}

}  // namespace optcast::testing
