#include <algorithm>
#include <vector>

#include "round_loops.hpp"
#include "blocks.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

// A static round schedule (packet_schedule.hpp) run as written: in each round the rank
// starts that round's sends and receives together (at most k of each on a k-port
// schedule) and waits for all of them; a round without any is an idle round, so that
// under the simulator's rounds model every transfer happens in its planned round and a
// schedule that breaks the port rule is reported, not hidden. A run of idle rounds is
// one wait (idle_rounds), as long as the rounds it stands for.
task<result<void>> broadcast_packets(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root,
                                     const packets::schedule& plan) {
  const int P = f.size();
  const detail::rooted ranks{P, root};
  const int q = ranks.virt(f.rank());
  const block_partition parts(buf.size(), static_cast<std::size_t>(std::max(plan.m, 1)));
  const auto packet = [&](int i) { return parts.block(buf, static_cast<std::size_t>(i)); };

  const auto& sends = plan.sends[static_cast<std::size_t>(q)];
  const auto& recvs = plan.recvs[static_cast<std::size_t>(q)];
  const int last = std::max(sends.empty() ? -1 : sends.back().round, recvs.empty() ? -1 : recvs.back().round);
  std::vector<operation> ops;
  ops.reserve(2 * static_cast<std::size_t>(plan.ports));
  std::size_t si = 0, ri = 0;
  for (int r = 0; r <= last; ++r) {
    ops.clear();
    // Port i of the k-port model is rail i where the fabric has rails (operation::lane);
    // every packet has a tag of its own, so any lane keeps the order.
    for (std::uint8_t port = 0; si < sends.size() && sends[si].round == r; ++si, ++port) {
      ops.push_back(f.send(ranks.real(sends[si].peer), {seq, static_cast<std::uint32_t>(sends[si].packet)}, packet(sends[si].packet)));
      ops.back().lane = port;
    }
    for (; ri < recvs.size() && recvs[ri].round == r; ++ri)
      ops.push_back(f.recv(ranks.real(recvs[ri].peer), {seq, static_cast<std::uint32_t>(recvs[ri].packet)}, packet(recvs[ri].packet)));
    if (ops.empty()) {
      // Idle until the next round with a transfer: one wait for all of them.
      const int next = std::min(si < sends.size() ? sends[si].round : last + 1, ri < recvs.size() ? recvs[ri].round : last + 1);
      if (auto res = co_await f.idle_rounds(next - r); !res) co_return fail(res.error());
      r = next - 1;
      continue;
    }
    if (auto res = co_await op_span_awaiter(ops); !res) co_return res;
  }
  co_return result<void>{};
}

}  // namespace optcast::algorithms
