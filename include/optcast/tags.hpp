// A message's tag, and how a communicator's calls are numbered in it.
#pragma once

#include <cstdint>

namespace optcast {

// (collective sequence number, step within the collective).
struct tag {
  std::uint32_t seq = 0;
  std::uint32_t step = 0;

  constexpr std::uint64_t packed() const noexcept {
    return (static_cast<std::uint64_t>(seq) << 32) | step;
  }
  static constexpr tag unpack(std::uint64_t v) noexcept {
    return {static_cast<std::uint32_t>(v >> 32), static_cast<std::uint32_t>(v)};
  }
  friend constexpr bool operator==(tag, tag) = default;
};

// How a communicator's calls are numbered in a tag's seq, so that calls on
// different communicators of one fabric never match each other: the top bit says
// point-to-point (then the low bits are the user's tag), the next 11 bits are the
// communicator's id (0: the job's own; a sub-communicator's is one that none of its
// members uses for another), and the low 20 bits number its collectives, wrapping after
// 2^20 calls (messages between two ranks with equal tags match in order, so only a rank
// more than a million calls ahead of another could be confused).
namespace seq_layout {
inline constexpr std::uint32_t p2p_bit = 0x80000000u;
inline constexpr int id_shift = 20;
inline constexpr std::uint32_t ids = 1u << 11;
inline constexpr std::uint32_t reserved_id = ids - 1;  // the fabrics' own traffic (libfabric's credits)
inline constexpr std::uint32_t number_mask = (1u << id_shift) - 1;
inline constexpr std::uint32_t max_user_tag = number_mask;
constexpr std::uint32_t collective(std::uint32_t id, std::uint32_t n) noexcept { return id << id_shift | (n & number_mask); }
constexpr std::uint32_t p2p(std::uint32_t id, std::uint32_t user_tag) noexcept {
  return p2p_bit | id << id_shift | (user_tag & number_mask);
}
// The communicator a seq belongs to.
constexpr std::uint32_t id_of(std::uint32_t seq) noexcept { return (seq >> id_shift) & (ids - 1); }
// The seq of the fabrics' control messages (revocations, agreements: fabric_base's), which
// no receive is ever posted for: a fabric hands each one to fabric_base::control_arrived.
inline constexpr std::uint32_t control_seq = p2p(reserved_id, max_user_tag - 1);
}  // namespace seq_layout

}  // namespace optcast
