// The TCP fabric's frame headers as a receiver decodes them, one after another, with the
// bytes that follow as an abort frame's text. A data frame (or a reference) never claims
// more than max_frame (a reference: its message's length), a goodbye or a receipt nothing, an abort's text never more than
// max_abort_text; what decodes re-encodes to the same bytes; the signature it carries describes itself whatever its fields; the
// check made before buffering an unexpected payload never lets the budget overflow; and
// an abort's text reaches the error escaped and bounded.
#include <cstring>

#include "fuzz.hpp"
#include "tcp/wire_format.hpp"

using namespace optcast::tcp::impl;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  optcast::fuzz::input in{{data, size}};
  std::uint64_t held = 0;
  const std::uint64_t limit = std::uint64_t{1} << (20 + in.byte() % 20);
  while (in.rest.size() >= frame_bytes) {
    std::array<std::byte, frame_bytes> b{};
    const auto bytes = in.take(frame_bytes);
    std::copy(bytes.begin(), bytes.end(), b.begin());
    const frame_header f = decode_frame(b);
    switch (f.kind) {
      case frame_header::malformed:
        break;
      case frame_header::abort: {
        FUZZ_REQUIRE(f.len <= max_abort_text);
        const auto text = in.take(f.len);
        const std::string why = abort_reason(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), "rank 1 failed");
        FUZZ_REQUIRE(!why.empty() && optcast::fuzz::printable_only(why));
        FUZZ_REQUIRE(why.size() <= 4 * max_abort_text + 32);
        break;
      }
      case frame_header::done: {  // a receipt: a token, nothing after it
        FUZZ_REQUIRE(f.len == 0);
        std::array<std::byte, frame_bytes> again{};
        encode(again, f);
        FUZZ_REQUIRE(again == b);
        break;
      }
      case frame_header::bye:
      case frame_header::ref:
      case frame_header::data: {
        FUZZ_REQUIRE(f.len <= max_frame);
        FUZZ_REQUIRE(f.kind != frame_header::bye || f.len == 0);  // a reference's length is its message's
        std::array<std::byte, frame_bytes> again{};
        encode(again, f);
        FUZZ_REQUIRE(again == b);
        const std::string d = f.sig.describe();
        FUZZ_REQUIRE(!d.empty() && d.size() < 400 && optcast::fuzz::printable_only(d));
        if (may_hold(f.len, held, limit)) {
          held += f.len;
          FUZZ_REQUIRE(held <= limit);
        }
        break;
      }
    }
  }
  return 0;
}
