// What a rank's call of a collective was, as its messages carry it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace optcast {

// What a rank's call of a collective was, carried by every message of it (on TCP, the
// local fabric and the simulator whole; on libfabric as a 64-bit hash), so that a
// receiver whose own call differs fails with errc::call_mismatch naming both calls,
// instead of reducing with the wrong operator or taking a message from the wrong root.
// All zero: no collective (point-to-point, or a fabric's own traffic).
struct call_signature {
  std::uint8_t coll = 0;  // optcast::collective + 1
  std::uint8_t alg = 0;   // optcast::algorithm + 1 (the one running, after the automatic choice)
  std::uint8_t op = 0;    // reduction operator (reduction.hpp's reduction_op), 0: none
  std::uint8_t type = 0;  // element type of a reduction (reduction_type), 0: none
  std::uint32_t root = 0xffffffffu;  // none
  std::uint32_t blocks = 0;
  std::uint32_t elem = 0;    // element size, bytes
  std::uint64_t bytes = 0;   // the call's size (total bytes of its shape)
  std::uint64_t counts = 0;  // hash of a v-collective's counts, 0: none

  static constexpr std::size_t wire_bytes = 32;
  bool operator==(const call_signature&) const = default;
  bool empty() const noexcept { return *this == call_signature{}; }
  void encode(std::byte* out) const noexcept;  // wire_bytes, little-endian
  static call_signature decode(const std::byte* in) noexcept;
  std::uint64_t hash() const noexcept;  // 0 for the empty signature
  // "broadcast (circulant, root 1, 1000 B, 4 blocks)".
  std::string describe() const;
};

// The one wording of a call mismatch, wherever it is found: "collective SEQ was called
// differently: HOW".
std::string called_differently(std::uint32_t seq, std::string_view how);
// HOW when both calls are known: "rank A called X, rank B Y".
std::string calls_of(int them, const call_signature& theirs, int me, const call_signature& mine);

}  // namespace optcast
