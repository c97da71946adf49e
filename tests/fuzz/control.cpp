// The survival layer's control messages (lib/survival/control_wire.hpp: revocations,
// agreements) from a member that sends anything at all. Each input is a run of messages
// (a 2-byte length, then the bytes) that rank 1 of a 4-rank in-process job sends rank 0
// or rank 2 while ranks 0, 2 and 3 agree; then rank 1 dies. Properties: what decodes
// encodes back to the same bytes; no survivor crashes or leaks; every survivor's
// agreement ends (decided, or failed with a reason), none hangs.
#include <algorithm>

#include <asio/io_context.hpp>

#include "fuzz.hpp"
#include "optcast/collectives.hpp"
#include "optcast/net/local.hpp"
#include "optcast/survive.hpp"
#include "../../lib/survival/control_wire.hpp"

using namespace optcast;

namespace {
task<result<agreement>> agree_on(communicator& c) { co_return co_await agree(c, 1); }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz::input in{{data, size}};
  std::vector<std::vector<std::byte>> messages;
  while (!in.rest.empty() && messages.size() < 64) {
    const std::size_t n = in.byte() | static_cast<std::size_t>(in.byte()) << 8;
    const auto b = in.take(n);
    messages.emplace_back(reinterpret_cast<const std::byte*>(b.data()), reinterpret_cast<const std::byte*>(b.data()) + b.size());
  }
  for (const auto& m : messages)
    if (auto d = detail::control_message::decode(m)) FUZZ_REQUIRE(d->encode() == m);

  // Admissions (grow) are for replacements: to these members they are nothing at all.
  bool any_heeded = false, any_garbage = false;
  for (const auto& m : messages) {
    const auto d = detail::control_message::decode(m);
    any_heeded = any_heeded || (d && d->kind != detail::control_message::admit);
    any_garbage = any_garbage || !d;
  }
  int done = 0;
  std::vector<std::optional<result<agreement>>> got(4);
  {
    asio::io_context io(1);
    local::world w(4, io);
    auto comms = communicators_of(w);
    for (int r : {0, 2, 3})
      spawn(agree_on(comms[static_cast<std::size_t>(r)]),
            [&, r](std::optional<result<agreement>> v, std::exception_ptr e) {
              FUZZ_REQUIRE(!e && v);
              got[static_cast<std::size_t>(r)] = std::move(v);
              ++done;
            });
    // Rank 1's messages go as rank 1's fabric sends them: as a peer's would arrive.
    auto& from = comms[1].get_fabric();
    std::vector<operation> ops;
    ops.reserve(messages.size());
    for (std::size_t i = 0; i < messages.size(); ++i) {
      ops.push_back(from.send(i % 2 ? 2 : 0, tag{seq_layout::control_seq, 0}, messages[i]));
      ops.back().on_complete = [](operation&) noexcept {};
      from.post(ops.back());
      for (int k = 0; k < 4; ++k) io.poll_one();
    }
    w.kill(1);
    io.run();
    FUZZ_REQUIRE(done == 3);  // nobody hangs
  }
  if (!any_heeded) {
    // Garbage and admissions only: a rank that got garbage refused it (and failed, to the
    // others its death); the rest decided alike, rank 1 among the failed.
    std::optional<agreement> first;
    for (int r : {0, 2, 3}) {
      const auto& g = *got[static_cast<std::size_t>(r)];
      if (!g) {
        FUZZ_REQUIRE(any_garbage);  // admissions alone fail nobody
        FUZZ_REQUIRE(g.error() == errc::protocol_violation || g.error() == errc::peer_lost);
        continue;
      }
      FUZZ_REQUIRE(g->flag == 1 && std::find(g->failed.begin(), g->failed.end(), 1) != g->failed.end());
      if (!first) first = *g;
      FUZZ_REQUIRE(*g == *first);
    }
  }
  return 0;
}
