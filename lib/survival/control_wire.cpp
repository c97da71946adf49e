// Control messages on the wire (control_wire.hpp): a 36-byte header, little-endian, then
// the words, the failed ranks' bits and the text.
//
//   0  'O' 'C'   magic          4  comm (u32)     16 code (u32)     24 text length (u16)
//   2  kind (u8)                8  n (u32)        20 words (u16)    26 0 (u16)
//   3  version 1 (u8)          12  ballot (u32)   22 failed words   28 flag (u64)
#include "control_wire.hpp"

#include <algorithm>

#include "optcast/fabric.hpp"

namespace optcast::detail {

namespace {

constexpr std::uint8_t version = 1;

void put(std::vector<std::byte>& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}

std::uint64_t get(std::span<const std::byte> in, std::size_t at, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(in[at + static_cast<std::size_t>(i)]) << (8 * i);
  return v;
}

}  // namespace

std::vector<std::byte> control_message::encode() const {
  const std::size_t nw = std::min(words.size(), max_words), nf = std::min(failed.size(), max_failed_words),
                    nt = std::min(text.size(), max_text);
  std::vector<std::byte> out;
  out.reserve(header_bytes + 8 * (nw + nf) + nt);
  out.push_back(std::byte{'O'});
  out.push_back(std::byte{'C'});
  put(out, kind, 1);
  put(out, version, 1);
  put(out, comm, 4);
  put(out, n, 4);
  put(out, ballot, 4);
  put(out, code, 4);
  put(out, nw, 2);
  put(out, nf, 2);
  put(out, nt, 2);
  put(out, 0, 2);
  put(out, flag, 8);
  for (std::size_t i = 0; i < nw; ++i) put(out, words[i], 8);
  for (std::size_t i = 0; i < nf; ++i) put(out, failed[i], 8);
  for (std::size_t i = 0; i < nt; ++i) out.push_back(static_cast<std::byte>(text[i]));
  return out;
}

std::optional<control_message> control_message::decode(std::span<const std::byte> in) {
  if (in.size() < header_bytes || in[0] != std::byte{'O'} || in[1] != std::byte{'C'} || get(in, 3, 1) != version ||
      get(in, 26, 2) != 0)
    return std::nullopt;
  control_message m;
  const auto kind = get(in, 2, 1);
  if (kind < revoke || kind > admit) return std::nullopt;
  m.kind = static_cast<kind_t>(kind);
  m.comm = static_cast<std::uint32_t>(get(in, 4, 4));
  if (m.comm >= seq_layout::reserved_id) return std::nullopt;  // no communicator has such an id
  m.n = static_cast<std::uint32_t>(get(in, 8, 4));
  m.ballot = static_cast<std::uint32_t>(get(in, 12, 4));
  m.code = static_cast<std::uint32_t>(get(in, 16, 4));
  const std::size_t nw = get(in, 20, 2), nf = get(in, 22, 2), nt = get(in, 24, 2);
  if (nw > max_words || nf > max_failed_words || nt > max_text) return std::nullopt;
  if (in.size() != header_bytes + 8 * (nw + nf) + nt) return std::nullopt;
  m.flag = get(in, 28, 8);
  std::size_t at = header_bytes;
  for (std::size_t i = 0; i < nw; ++i, at += 8) m.words.push_back(get(in, at, 8));
  for (std::size_t i = 0; i < nf; ++i, at += 8) m.failed.push_back(get(in, at, 8));
  m.text.assign(reinterpret_cast<const char*>(in.data() + at), nt);
  return m;
}

}  // namespace optcast::detail
