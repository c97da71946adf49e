// What a multi-process fabric tells its job's store of its calls: its signature of a
// collective the store inquires about (a stall), and the newest collective it finished,
// named in its goodbye. Calls that differ between ranks are found there when no message
// of theirs ever meets (a mismatch that deadlocks, or whose other side has left).
#pragma once

#include <cstdint>
#include <string>

#include "optcast/fabric.hpp"

namespace optcast::detail {

inline std::string wire_bytes(const call_signature& s) {
  if (s.empty()) return {};
  std::string b(call_signature::wire_bytes, '\0');
  s.encode(reinterpret_cast<std::byte*>(b.data()));
  return b;
}

}  // namespace optcast::detail
