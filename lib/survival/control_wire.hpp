// The control messages fabric_base's survival layer sends (revocations and agreements),
// on the wire: one layout, checked field by field on arrival (a peer's bytes are trusted
// no further than their authentication, and a wrong one must not crash a survivor).
// Not installed; tests/fuzz/control.cpp feeds decode() arbitrary bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "optcast/fabric_base.hpp"

namespace optcast::detail {

struct control_message {
  // admit: to a replacement (optcast::grow), the communicator `comm` it is taken into, its
  // members as bits by job rank in `failed`.
  enum kind_t : std::uint8_t { revoke = 1, contribute = 2, decide = 3, admit = 4 };
  kind_t kind = revoke;
  std::uint32_t comm = 0;    // the communicator's id
  std::uint32_t n = 0;       // the agreement's number on it
  std::uint32_t ballot = 0;  // the coordinator's index among the members (agreements)
  std::uint32_t code = 0;    // a revocation's error code (optcast::errc)
  std::uint64_t flag = 0;
  std::vector<std::uint64_t> words;
  std::vector<std::uint64_t> failed;  // bits by member index
  std::string text;                   // a revocation's cause

  static constexpr std::size_t header_bytes = 36;
  static constexpr std::size_t max_words = 64;
  static constexpr std::size_t max_failed_words = 1024;  // 65,536 members
  static constexpr std::size_t max_text = 1024;
  // The longest encode() makes: a transport that must post a buffer for one (libfabric) posts this.
  static constexpr std::size_t max_bytes = header_bytes + 8 * (max_words + max_failed_words) + max_text;
  static_assert(max_bytes == fabric_base::max_control_bytes, "fabric_base's control buffers must hold every message");

  bool operator==(const control_message&) const = default;
  // Fields past their limits are cut to them.
  std::vector<std::byte> encode() const;
  // Nothing unless `bytes` is exactly one well-formed message (of a communicator id below
  // seq_layout::reserved_id).
  static std::optional<control_message> decode(std::span<const std::byte> bytes);
};

}  // namespace optcast::detail
