// A whole string as a number, or false: no sign, no spaces, nothing after it.
#pragma once

#include <charconv>
#include <string_view>

namespace optcast::launcher {

template <class T>
bool parse_number(std::string_view s, T& out) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size();
}

}  // namespace optcast::launcher
