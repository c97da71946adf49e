// Little-endian encoding helpers shared by the store and the TCP fabric's wire formats.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace optcast::wire {

inline void put_u16(std::byte* p, std::uint16_t v) noexcept {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline void put_u32(std::byte* p, std::uint32_t v) noexcept {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline void put_u64(std::byte* p, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
}
inline std::uint16_t get_u16(const std::byte* p) noexcept {
  std::uint16_t v = 0;
  for (int i = 0; i < 2; ++i) v = static_cast<std::uint16_t>(v | std::to_integer<std::uint16_t>(p[i]) << (8 * i));
  return v;
}
inline std::uint32_t get_u32(const std::byte* p) noexcept {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::to_integer<std::uint32_t>(p[i]) << (8 * i);
  return v;
}
inline std::uint64_t get_u64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= std::to_integer<std::uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace optcast::wire
