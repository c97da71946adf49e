// The TCP fabric's handshake as the accepting rank judges it: a hello of arbitrary bytes,
// against a job with or without a secret. What is admitted must be a member of the job
// (right magic, version, security settings, job id, size; a rank in range, not the
// acceptor's own), and what is refused says why in plain text.
#include <cstring>

#include "fuzz.hpp"
#include "tcp/wire_format.hpp"

using namespace optcast::tcp::impl;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  optcast::fuzz::input in{{data, size}};
  const std::uint8_t setting = in.byte();
  acceptor_view me;
  me.secret = setting & 1;
  me.encrypt = me.secret && (setting & 2);
  me.job = 0x1234'5678'9abc'def0ull;
  me.size = 1 + (setting >> 2) % 16;
  me.rank = (setting >> 2) % me.size;

  std::array<std::byte, hs_bytes> b{};
  const auto bytes = in.take(hs_bytes);
  std::copy(bytes.begin(), bytes.end(), b.begin());  // memcpy from an empty span is UB
  const std::span<const std::byte, hs_bytes> hs(b);

  if (auto no = judge_opening(hs, me)) {
    FUZZ_REQUIRE(!no->why.empty() && optcast::fuzz::printable_only(no->why));
    FUZZ_REQUIRE(no->status == hs_ok || std::string_view(status_text(no->status)) != "unknown refusal");
    return 0;
  }
  const hello h = decode_hello(hs);
  FUZZ_REQUIRE(optcast::wire::get_u32(b.data()) == hs_magic && h.version == hs_version);
  FUZZ_REQUIRE(((h.flags & hs_auth) != 0) == me.secret && ((h.flags & hs_encrypt) != 0) == me.encrypt);
  FUZZ_REQUIRE(encode(h) == b);  // nothing of the hello is lost or invented in decoding

  if (auto no = judge_member(hs, me)) {
    FUZZ_REQUIRE(no->status == hs_bad_job || no->status == hs_bad_size || no->status == hs_bad_rank);
    FUZZ_REQUIRE(optcast::fuzz::printable_only(no->why));
    return 0;
  }
  FUZZ_REQUIRE(h.job == me.job && h.size == static_cast<std::uint32_t>(me.size));
  FUZZ_REQUIRE(h.rank < h.size && static_cast<int>(h.rank) != me.rank);
  return 0;
}
