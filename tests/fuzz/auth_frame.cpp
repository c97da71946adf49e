// What a party without the key can send: a proof on the handshake, and on an encrypted
// connection a sealed frame. Arbitrary bytes never pass either check; a frame sealed by
// the real sender with the fuzzer's header and payload does, once, and not altered.
#include <cstring>
#include <string>
#include <vector>

#include "fuzz.hpp"
#include "auth/auth.hpp"

using namespace optcast::auth;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const auto k = key::from_secret("fuzzing secret, 32 bytes or so..");
  static const proof session = [] { proof p{}; p[0] = std::byte{7}; return p; }();
  optcast::fuzz::input in{{data, size}};

  proof p{};
  const auto pb = in.take(p.size());
  std::copy(pb.begin(), pb.end(), p.begin());  // memcpy from an empty span is UB
  const auto part = in.take(in.byte());
  const std::array<std::span<const std::byte>, 1> parts{part};
  FUZZ_REQUIRE(!k->check(p, "optcast/tcp/opener", parts));
  FUZZ_REQUIRE(k->check(k->prove("optcast/tcp/opener", parts), "optcast/tcp/opener", parts));
  FUZZ_REQUIRE(!k->check(k->prove("optcast/tcp/opener", parts), "optcast/tcp/acceptor", parts));

  const auto ad = in.take(56);
  std::array<std::byte, channel::tag_bytes> tag{};
  const auto tb = in.take(tag.size());
  std::copy(tb.begin(), tb.end(), tag.begin());
  const auto body = in.take(in.rest.size());
  std::vector<std::byte> forged(body.begin(), body.end());
  channel receiver(session);
  FUZZ_REQUIRE(!receiver.open(ad, forged.data(), forged.size(), tag.data()));

  // The real sender's frame opens on a fresh receiver (same place in the stream), and
  // one flipped bit anywhere makes it fail.
  channel sender(session), fresh(session);
  std::vector<std::byte> sealed(body.begin(), body.end());
  std::array<std::byte, channel::tag_bytes> real{};
  sender.seal(ad, sealed.data(), sealed.data(), sealed.size(), real.data());
  std::vector<std::byte> copy = sealed;
  FUZZ_REQUIRE(fresh.open(ad, copy.data(), copy.size(), real.data()));
  FUZZ_REQUIRE(std::equal(copy.begin(), copy.end(), body.begin(), body.end()));
  if (!sealed.empty()) {
    channel again(session);
    sealed[sealed.size() / 2] ^= std::byte{1};
    FUZZ_REQUIRE(!again.open(ad, sealed.data(), sealed.size(), real.data()));
  }
  return 0;
}
