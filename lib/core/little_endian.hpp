// Little-endian encoding helpers for the wire formats: the store's, the TCP fabric's, the call signatures.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

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

// Text from the wire, fit for a log line: printable ASCII kept, the rest escaped, cut.
inline std::string printable(std::string_view s, std::size_t most = 64) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < most; ++i) {
    const auto ch = static_cast<unsigned char>(s[i]);
    if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
      out += static_cast<char>(ch);
    } else {
      char esc[5];
      std::snprintf(esc, sizeof esc, "\\x%02x", ch);
      out += esc;
    }
  }
  if (s.size() > most) out += "... (" + std::to_string(s.size()) + " bytes)";
  return out;
}

}  // namespace optcast::wire
