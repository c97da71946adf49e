#include "auth.hpp"

#include <sodium.h>

#include <cstring>

#include "core/little_endian.hpp"
#include "optcast/error.hpp"

namespace optcast::auth {

namespace {

void start_sodium() {
  static const int ok = sodium_init();
  if (ok < 0) throw setup_error(make_error_code(errc::invalid_argument), "libsodium failed to initialise (no entropy source?)");
}

}  // namespace

nonce fresh_nonce() {
  start_sodium();
  nonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

std::string fresh_secret() {
  const nonce n = fresh_nonce();
  std::string hex(2 * n.size() + 1, '\0');
  sodium_bin2hex(hex.data(), hex.size(), reinterpret_cast<const unsigned char*>(n.data()), n.size());
  hex.pop_back();
  return hex;
}

std::optional<key> key::from_secret(std::string_view secret) {
  if (secret.empty()) return std::nullopt;
  if (secret.size() < min_secret)
    throw setup_error(make_error_code(errc::invalid_argument),
                      "the job secret is " + std::to_string(secret.size()) + " bytes; use at least " +
                          std::to_string(min_secret) + " (for example: head -c 32 /dev/urandom | base64)");
  start_sodium();
  static constexpr std::string_view domain = "optcast job secret v1";
  key k;
  crypto_generichash(k.k_.data(), k.k_.size(), reinterpret_cast<const unsigned char*>(secret.data()), secret.size(),
                     reinterpret_cast<const unsigned char*>(domain.data()), domain.size());
  return k;
}

proof key::prove(std::string_view label, std::span<const std::span<const std::byte>> parts) const {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, k_.data(), k_.size());
  auto add = [&](const void* p, std::size_t n) {
    std::byte len[8];
    wire::put_u64(len, n);
    crypto_auth_hmacsha256_update(&st, reinterpret_cast<const unsigned char*>(len), sizeof len);
    crypto_auth_hmacsha256_update(&st, static_cast<const unsigned char*>(p), n);
  };
  add(label.data(), label.size());
  for (auto part : parts) add(part.data(), part.size());
  proof out;
  crypto_auth_hmacsha256_final(&st, reinterpret_cast<unsigned char*>(out.data()));
  sodium_memzero(&st, sizeof st);
  return out;
}

bool key::check(const proof& p, std::string_view label, std::span<const std::span<const std::byte>> parts) const {
  const proof want = prove(label, parts);
  return sodium_memcmp(want.data(), p.data(), p.size()) == 0;
}

channel::channel(const proof& session_key) noexcept {
  static_assert(crypto_aead_chacha20poly1305_ietf_KEYBYTES == 32 && crypto_aead_chacha20poly1305_ietf_NPUBBYTES == 12 &&
                crypto_aead_chacha20poly1305_ietf_ABYTES == tag_bytes);
  std::memcpy(k_.data(), session_key.data(), k_.size());
}

channel::~channel() { sodium_memzero(k_.data(), k_.size()); }

std::array<unsigned char, 12> channel::next_nonce() noexcept {
  std::array<unsigned char, 12> n{};
  wire::put_u64(reinterpret_cast<std::byte*>(n.data()), count_++);
  return n;
}

namespace {
// libsodium declares its buffers non-null, also when empty.
std::byte empty_payload[1];
}  // namespace

void channel::seal(std::span<const std::byte> ad, const std::byte* in, std::byte* out, std::size_t n, std::byte* tag) noexcept {
  const auto n96 = next_nonce();
  if (!in) in = empty_payload;
  if (!out) out = empty_payload;
  crypto_aead_chacha20poly1305_ietf_encrypt_detached(
      reinterpret_cast<unsigned char*>(out), reinterpret_cast<unsigned char*>(tag), nullptr,
      reinterpret_cast<const unsigned char*>(in), n, reinterpret_cast<const unsigned char*>(ad.data()), ad.size(), nullptr,
      n96.data(), k_.data());
}

bool channel::open(std::span<const std::byte> ad, std::byte* data, std::size_t n, const std::byte* tag) noexcept {
  const auto n96 = next_nonce();
  if (!data) data = empty_payload;
  return crypto_aead_chacha20poly1305_ietf_decrypt_detached(
             reinterpret_cast<unsigned char*>(data), nullptr, reinterpret_cast<const unsigned char*>(data), n,
             reinterpret_cast<const unsigned char*>(tag), reinterpret_cast<const unsigned char*>(ad.data()), ad.size(),
             n96.data(), k_.data()) == 0;
}

}  // namespace optcast::auth
