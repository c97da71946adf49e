// The TCP fabric's wire format, and every judgement made of bytes from the wire before
// they touch the fabric's state: pure functions, so the fuzz targets (tests/fuzz/) drive
// exactly the code the fabric runs. Internal to net/tcp.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "../auth/auth.hpp"
#include "core/little_endian.hpp"
#include "optcast/fabric.hpp"

namespace optcast::tcp::impl {

// Handshake. The rank that opens a connection sends its hello: u32 magic, u16 version,
// u16 flags (hs_auth: it has the job secret), u64 job id, u32 rank, u32 size, a 32-byte
// nonce (zero without a secret). The acceptor answers with a reply: u32 magic, u32
// status, 32 bytes. With a secret, the first reply is hs_challenge with the acceptor's
// nonce, the opener sends its 32-byte proof (net/auth/auth.hpp) over the hello and that
// nonce, and only then does the acceptor look at the job id and rank; its final reply
// (hs_ok) carries its own proof. Without a secret the first reply is the final one.
// hs_encrypt (OPTCAST_ENCRYPT, which needs a secret): both ends then derive a key for the
// connection from the handshake, and every frame's payload is encrypted and followed by a
// 16-byte tag that authenticates it and its header (auth::channel).
// Then, toward a rank of its own host, the opener's offer of single copy (zero without):
// u32 pid, u32 zero, u64 the address of 8 bytes in its memory, u64 what they hold. The
// acceptor that can read them there says so in its final reply (hs_reads_you in the
// status word's high half), and frames by reference may then come (by_reference.cpp).
// hs_duplex: the opener reads frames written back on its connection; an acceptor that has
// not read its probe says it may write them (hs_writes_back in the final reply), and then
// sends its own messages to the opener on this connection rather than opening another,
// so that a pair's exchange is one segment each way with the ACKs riding on the data.
// Its frames are sealed with reverse_label's key. Two ranks that open toward each other at
// once keep one: an acceptor whose own connection to the opener is up, or still opening
// from the lower rank of the two, answers hs_use_mine (with its proof), and the opener
// sends on the acceptor's connection once that is in.
constexpr std::uint32_t hs_magic = 0x4354504f;  // "OPTC"
constexpr std::uint16_t hs_version = 3;
constexpr std::uint16_t hs_auth = 1, hs_encrypt = 2, hs_duplex = 4;
constexpr std::size_t hs_bytes = 48 + auth::nonce_bytes;
constexpr std::size_t reply_bytes = 8 + auth::proof_bytes;
// session_label's key seals the opener's frames; receipts_label's the receipts the
// acceptor writes back on the same connection, reverse_label's the acceptor's own frames
// on a duplex one (each its own key: no nonce is used twice).
constexpr std::string_view opener_label = "optcast/tcp/opener", acceptor_label = "optcast/tcp/acceptor",
                           session_label = "optcast/tcp/session", receipts_label = "optcast/tcp/receipts",
                           reverse_label = "optcast/tcp/reverse";
enum hs_status : std::uint32_t {
  hs_ok = 0, hs_bad_version, hs_bad_job, hs_bad_rank, hs_bad_size, hs_duplicate, hs_challenge, hs_auth_differs, hs_auth_failed,
  hs_encrypt_differs,
  // Not a refusal of the pair: the acceptor is connected (or connecting) to the opener
  // itself, duplex, and the opener is to send on that connection (with the acceptor's proof).
  hs_use_mine,
  hs_taken_dead  // the acceptor took the opener for dead (and revoked what it was in)
};
// In the final reply's status word, beside hs_ok: the acceptor read the opener's probe.
constexpr std::uint32_t hs_reads_you = 1u << 16;
// And: the acceptor may send its own frames back on this connection (hs_duplex).
constexpr std::uint32_t hs_writes_back = 1u << 17;
constexpr std::uint32_t status_of(std::uint32_t word) noexcept { return word & 0xffff; }

inline const char* status_text(std::uint32_t s) {
  switch (s) {
    case hs_bad_version: return "protocol version differs";
    case hs_bad_job: return "job id differs (a process of another job?)";
    case hs_bad_rank: return "rank out of range";
    case hs_bad_size: return "job size differs";
    case hs_duplicate: return "that rank is already connected";
    case hs_auth_differs: return "one side has a job secret and the other none (OPTCAST_SECRET set for some ranks only?)";
    case hs_auth_failed: return "wrong job secret";
    case hs_encrypt_differs: return "one side encrypts and the other not (OPTCAST_ENCRYPT set for some ranks only?)";
    case hs_use_mine: return "it connects to this rank itself";
    case hs_taken_dead: return "it took this rank for dead (its survivors went on without it)";
    default: return "unknown refusal";
  }
}

struct hello {
  std::uint16_t version = hs_version;
  std::uint16_t flags = 0;
  std::uint64_t job = 0;
  std::uint32_t rank = 0, size = 0;
  auth::nonce nonce{};
  // Which of the opener's rails (connections to the acceptor) this is: the flags' high byte.
  std::uint8_t rail = 0;
  // Its offer of single copy: where the acceptor may read `cookie` in process `pid`.
  std::uint32_t pid = 0;
  std::uint64_t probe = 0, cookie = 0;
};

inline std::array<std::byte, hs_bytes> encode(const hello& h) noexcept {
  std::array<std::byte, hs_bytes> b{};
  wire::put_u32(b.data(), hs_magic);
  wire::put_u16(b.data() + 4, h.version);
  wire::put_u16(b.data() + 6, static_cast<std::uint16_t>((h.flags & 0xff) | h.rail << 8));
  wire::put_u64(b.data() + 8, h.job);
  wire::put_u32(b.data() + 16, h.rank);
  wire::put_u32(b.data() + 20, h.size);
  std::memcpy(b.data() + 24, h.nonce.data(), h.nonce.size());
  wire::put_u32(b.data() + 24 + auth::nonce_bytes, h.pid);
  wire::put_u64(b.data() + 32 + auth::nonce_bytes, h.probe);
  wire::put_u64(b.data() + 40 + auth::nonce_bytes, h.cookie);
  return b;
}

inline hello decode_hello(std::span<const std::byte, hs_bytes> b) noexcept {
  hello h;
  h.version = wire::get_u16(b.data() + 4);
  h.flags = wire::get_u16(b.data() + 6);
  h.rail = static_cast<std::uint8_t>(h.flags >> 8);
  h.flags &= 0xff;
  h.job = wire::get_u64(b.data() + 8);
  h.rank = wire::get_u32(b.data() + 16);
  h.size = wire::get_u32(b.data() + 20);
  std::memcpy(h.nonce.data(), b.data() + 24, h.nonce.size());
  h.pid = wire::get_u32(b.data() + 24 + auth::nonce_bytes);
  h.probe = wire::get_u64(b.data() + 32 + auth::nonce_bytes);
  h.cookie = wire::get_u64(b.data() + 40 + auth::nonce_bytes);
  return h;
}

// Why the acceptor refuses; status hs_ok means "not an optcast peer": closed unanswered.
struct refusal {
  std::uint32_t status = hs_ok;
  std::string why;
};

// What the acceptor knows when it judges a hello.
struct acceptor_view {
  bool secret = false, encrypt = false;
  std::uint64_t job = 0;
  int size = 0, rank = 0;
};

// Before any proof: is it an optcast peer of this protocol, with this job's security
// settings? Nothing job-specific is judged (or told) yet.
inline std::optional<refusal> judge_opening(std::span<const std::byte, hs_bytes> b, const acceptor_view& me) {
  if (wire::get_u32(b.data()) != hs_magic) return refusal{hs_ok, "not an optcast peer (bad magic)"};
  const hello h = decode_hello(b);
  if (h.version != hs_version)
    return refusal{hs_bad_version, "protocol version " + std::to_string(h.version) + ", this is " + std::to_string(hs_version)};
  if (wire::get_u32(b.data() + 28 + auth::nonce_bytes) != 0) return refusal{hs_ok, "not an optcast peer (malformed hello)"};
  const bool offers = (h.flags & hs_auth) != 0;
  if (offers != me.secret)
    return refusal{hs_auth_differs, offers ? "the peer has a job secret and this rank none (OPTCAST_SECRET set for some ranks only?)"
                                           : "this job has a secret and the peer offered none"};
  if (((h.flags & hs_encrypt) != 0) != me.encrypt)
    return refusal{hs_encrypt_differs, me.encrypt ? "this job encrypts and the peer does not (OPTCAST_ENCRYPT)"
                                                  : "the peer encrypts and this rank does not (OPTCAST_ENCRYPT)"};
  return std::nullopt;
}

// After the proof (with a secret): is it a member of this job, a rank other than this
// one? Whether that rank is connected already is the fabric's to judge.
inline std::optional<refusal> judge_member(std::span<const std::byte, hs_bytes> b, const acceptor_view& me) {
  const hello h = decode_hello(b);
  if (h.job != me.job) return refusal{hs_bad_job, "job id " + std::to_string(h.job) + " is not this job's"};
  if (h.size != static_cast<std::uint32_t>(me.size))
    return refusal{hs_bad_size, "job size " + std::to_string(h.size) + ", this job has " + std::to_string(me.size)};
  if (h.rank >= static_cast<std::uint32_t>(me.size) || static_cast<int>(h.rank) == me.rank)
    return refusal{hs_bad_rank, "rank " + std::to_string(h.rank) + " out of range"};
  return std::nullopt;
}

// Frame header: u32 kind, u32 flags, u64 tag, u64 payload length, the call's signature
// (call_signature::wire_bytes).
constexpr std::uint32_t frame_data = 0x46444f43;  // "CODF"
// Sent by a rank that fails, before it closes its connections: the tag holds its error
// code, the payload why; receivers fail with peer_lost and that reason.
constexpr std::uint32_t frame_abort = 0x41444f43;  // "CODA"
constexpr std::size_t max_abort_text = 2000;
// Sent by a rank that closes its communicator in good order (no failure, nothing in
// flight), after its last data frame: nothing more will come on this connection, and the
// close that follows is a goodbye, not a loss. The tag's seq and the signature name the
// newest collective it finished (all zero: none), so that a receive still waiting on it
// fails at once, as the mismatch it is; the tag's step, on how many connections (rails) it
// says goodbye: it has left once every one of them has (0: one, from a rank of one rail).
// No payload (with encryption, its tag alone).
constexpr std::uint32_t frame_bye = 0x42444f43;  // "CODB"
// A message by reference (by_reference.cpp), on a connection whose acceptor read the
// opener's probe: the header as a data frame's (its length the message's), then 16 bytes,
// u64 the message's address in the sender, u64 the sender's token for it.
constexpr std::uint32_t frame_ref = 0x52444f43;  // "CODR"
constexpr std::size_t ref_bytes = 16;
// The receiver has copied it: the tag word holds the token; no payload. Written back on
// the connection the reference came on (the only frame that goes against its direction,
// so that no other connection needs opening, or progress, for it); the sender's send
// then completes, and its buffer is the caller's again.
constexpr std::uint32_t frame_done = 0x4b444f43;  // "CODK"
constexpr std::size_t frame_bytes = 24 + call_signature::wire_bytes;
// The largest payload any frame may claim; a data frame must also fit what the receiver
// expects (its posted receive, or its unexpected-message budget) before a byte is held.
constexpr std::uint64_t max_frame = std::uint64_t{1} << 40;

struct frame_header {
  enum kind_t : std::uint8_t { malformed, data, abort, bye, ref, done } kind = malformed;
  tag tg{};
  std::uint64_t abort_code = 0;  // abort: the sender's error code; done: the token
  std::uint64_t len = 0;
  call_signature sig{};
};

inline void encode(std::span<std::byte, frame_bytes> b, const frame_header& f) noexcept {
  const std::uint32_t kinds[] = {frame_data, frame_data, frame_abort, frame_bye, frame_ref, frame_done};
  wire::put_u32(b.data(), kinds[f.kind]);
  wire::put_u32(b.data() + 4, 0);
  const bool word = f.kind == frame_header::abort || f.kind == frame_header::done;
  wire::put_u64(b.data() + 8, word ? f.abort_code : f.tg.packed());
  wire::put_u64(b.data() + 16, f.len);
  f.sig.encode(b.data() + 24);
}

inline frame_header decode_frame(std::span<const std::byte, frame_bytes> b) noexcept {
  frame_header f;
  const std::uint32_t kind = wire::get_u32(b.data());
  f.len = wire::get_u64(b.data() + 16);
  if (kind == frame_abort && f.len <= max_abort_text) {
    f.kind = frame_header::abort;
    f.abort_code = wire::get_u64(b.data() + 8);
    return f;
  }
  if (kind == frame_done && f.len == 0 && wire::get_u32(b.data() + 4) == 0) {
    f.kind = frame_header::done;
    f.abort_code = wire::get_u64(b.data() + 8);
    f.sig = call_signature::decode(b.data() + 24);
    return f;
  }
  if ((kind != frame_data && kind != frame_bye && kind != frame_ref) || wire::get_u32(b.data() + 4) != 0 || f.len > max_frame) return f;
  if (kind == frame_bye && f.len != 0) return f;
  f.kind = kind == frame_bye ? frame_header::bye : kind == frame_ref ? frame_header::ref : frame_header::data;
  f.tg = tag::unpack(wire::get_u64(b.data() + 8));
  f.sig = call_signature::decode(b.data() + 24);
  return f;
}

// Whether an unexpected payload of `len` bytes may be held, with `held` bytes already
// waiting for receives and at most `limit` allowed: the check made before allocating.
constexpr bool may_hold(std::uint64_t len, std::uint64_t held, std::uint64_t limit) noexcept {
  return len <= limit && held <= limit - len;
}

// An abort frame's text, fit for the error a rank reports.
inline std::string abort_reason(std::string_view text, std::string_view fallback) {
  return text.empty() ? std::string(fallback) : wire::printable(text, max_abort_text);
}

}  // namespace optcast::tcp::impl
