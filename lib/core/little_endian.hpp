// Little-endian encoding helpers for the wire formats: the store's, the TCP fabric's, the call signatures.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

namespace optcast::wire {

// On a little-endian host a copy (one move each way); elsewhere byte by byte. The loops
// alone were not merged into moves by the compiler: a frame header's fields cost a few
// hundred instructions a message.
template <class T>
inline void put_le(std::byte* p, T v) noexcept {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(p, &v, sizeof v);
  } else {
    for (std::size_t i = 0; i < sizeof v; ++i) p[i] = static_cast<std::byte>(v >> (8 * i));
  }
}
template <class T>
inline T get_le(const std::byte* p) noexcept {
  T v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, sizeof v);
  } else {
    for (std::size_t i = 0; i < sizeof v; ++i) v = static_cast<T>(v | static_cast<T>(std::to_integer<T>(p[i]) << (8 * i)));
  }
  return v;
}
inline void put_u16(std::byte* p, std::uint16_t v) noexcept { put_le(p, v); }
inline void put_u32(std::byte* p, std::uint32_t v) noexcept { put_le(p, v); }
inline void put_u64(std::byte* p, std::uint64_t v) noexcept { put_le(p, v); }
inline std::uint16_t get_u16(const std::byte* p) noexcept { return get_le<std::uint16_t>(p); }
inline std::uint32_t get_u32(const std::byte* p) noexcept { return get_le<std::uint32_t>(p); }
inline std::uint64_t get_u64(const std::byte* p) noexcept { return get_le<std::uint64_t>(p); }

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
