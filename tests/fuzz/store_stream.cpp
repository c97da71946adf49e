// The store's message stream as either end reads it: arbitrary bytes decoded message by
// message, with the limit before the handshake (64-byte fields) or after it (1 MiB).
// Every length is checked before anything is held; what decodes re-encodes to exactly
// the bytes it took; a malformed header stops the stream; and a partial message takes
// nothing.
#include <algorithm>
#include <cstring>

#include "fuzz.hpp"
#include "bootstrap/store_protocol.hpp"

using namespace optcast::store::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  optcast::fuzz::input in{{data, size}};
  const std::uint32_t limit = (in.byte() & 1) ? max_hello_field : max_field;
  auto rest = std::as_bytes(in.rest);
  for (;;) {
    auto d = decode(rest, limit);
    if (!d) {
      FUZZ_REQUIRE(rest.size() >= header_bytes);
      FUZZ_REQUIRE(!decode_header(rest.first<header_bytes>(), limit));
      return 0;
    }
    if (!*d) {  // incomplete: nothing taken, and the header (if whole) was valid
      if (rest.size() >= header_bytes) {
        const auto h = decode_header(rest.first<header_bytes>(), limit);
        FUZZ_REQUIRE(h && rest.size() < header_bytes + std::size_t{h->key_bytes} + h->val_bytes);
      }
      return 0;
    }
    const message& m = (*d)->msg;
    FUZZ_REQUIRE(m.key.size() <= limit && m.val.size() <= limit);
    FUZZ_REQUIRE(m.type >= m_hello && m.type <= m_last);
    const std::string again = encode(m);
    FUZZ_REQUIRE(again.size() == (*d)->used);
    FUZZ_REQUIRE(std::memcmp(again.data(), rest.data(), again.size()) == 0);
    rest = rest.subspan((*d)->used);
  }
}
