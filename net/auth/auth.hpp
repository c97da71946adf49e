// Proving knowledge of the job secret: the mutual challenge–response that the store and
// the TCP fabric run on every connection before anything else is read from it.
//
// The secret (any text of at least min_secret bytes) is hashed into a 32-byte key
// (BLAKE2b, libsodium's crypto_generichash). Each side sends a fresh 32-byte nonce; each
// proves itself with HMAC-SHA-256 under the key over a transcript of both nonces and
// the fields it claims (rank, size, job id), with a label per protocol and direction, so
// a proof can neither be replayed on another connection nor reflected back to its sender.
// The party that accepts the connection proves itself only after the one that opened it
// has: a stranger learns nothing, not even whether its job id was right.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace optcast::auth {

constexpr std::size_t nonce_bytes = 32;
constexpr std::size_t proof_bytes = 32;
constexpr std::size_t min_secret = 16;
using nonce = std::array<std::byte, nonce_bytes>;
using proof = std::array<std::byte, proof_bytes>;

// Unpredictable bytes from the operating system (libsodium's randombytes).
nonce fresh_nonce();
// A new secret for a launcher to hand its ranks: 32 random bytes, hex.
std::string fresh_secret();

class key {
public:
  // nullopt for an empty secret (no authentication). Throws setup_error when the secret
  // is shorter than min_secret, or libsodium cannot start.
  static std::optional<key> from_secret(std::string_view secret);

  // HMAC-SHA-256 over label and the parts, each length-prefixed so no two transcripts
  // collide.
  proof prove(std::string_view label, std::span<const std::span<const std::byte>> parts) const;
  // In constant time.
  bool check(const proof& p, std::string_view label, std::span<const std::span<const std::byte>> parts) const;

private:
  std::array<unsigned char, 32> k_{};
};

// One direction of an encrypted connection (OPTCAST_ENCRYPT): ChaCha20-Poly1305 (IETF)
// under a key both ends derive from their handshake, the nonce counting frames. A
// connection carries frames in order and its key is its own, so no nonce repeats.
class channel {
public:
  static constexpr std::size_t tag_bytes = 16;
  explicit channel(const proof& session_key) noexcept;
  ~channel();
  channel(const channel&) = delete;
  channel& operator=(const channel&) = delete;

  // Encrypts n bytes from `in` into `out` (the same place is allowed) and authenticates
  // `ad` (the frame header) with them; the tag goes to `tag`.
  void seal(std::span<const std::byte> ad, const std::byte* in, std::byte* out, std::size_t n, std::byte* tag) noexcept;
  // Decrypts in place; false (data unusable) when the frame was not sealed by the other
  // end under this key, in this place of the stream, with this header.
  [[nodiscard]] bool open(std::span<const std::byte> ad, std::byte* data, std::size_t n, const std::byte* tag) noexcept;

private:
  std::array<unsigned char, 12> next_nonce() noexcept;
  std::array<unsigned char, 32> k_{};
  std::uint64_t count_ = 0;
};

}  // namespace optcast::auth
