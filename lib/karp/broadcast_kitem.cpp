#include <memory>
#include <vector>

#include "round_loops.hpp"
#include "blocks.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

// Karp et al., Sections 3.4-3.5 (logp.hpp, kitem_plan): plan processor q is rank
// root + q. A rank posts all its receives at once, in the order the plan receives them
// (under the simulator's choosing receivers that order decides which buffered message a
// free port takes), then sends in the plan's order, each once its item is in and, on a
// fabric with a model clock, not before the plan's step: a message sent early could
// meet another at its receiver, which a plan without buffering rules out only for the
// planned steps. Step 0 is when the rank enters the call: the steps are the plan's
// when the ranks enter together. With every receive posted from the start no send can wait on a
// receiver forever.
task<result<void>> broadcast_kitem(fabric& f, std::uint32_t seq, std::span<std::byte> buf, int root,
                                   const logp::kitem_plan& plan, double step) {
  const int P = f.size();
  const detail::rooted ranks{P, root};
  const int q = ranks.virt(f.rank());
  const double t0 = f.model_time().value_or(0);  // step 0: when this rank enters
  const block_partition parts(buf.size(), static_cast<std::size_t>(plan.k));
  const auto item = [&](int i) { return buf.subspan(parts.offset(static_cast<std::size_t>(i)), parts.size(static_cast<std::size_t>(i))); };

  const auto& rs = plan.receives[static_cast<std::size_t>(q)];
  const auto pending = std::make_unique<posted_op[]>(rs.size());
  const std::span<posted_op> all(pending.get(), rs.size());
  std::vector<int> slot(static_cast<std::size_t>(plan.k), -1);  // item -> its receive
  for (std::size_t j = 0; j < rs.size(); ++j) {
    pending[j].start(f.recv(ranks.real(rs[j].peer), {seq, static_cast<std::uint32_t>(rs[j].item)}, item(rs[j].item)));
    slot[static_cast<std::size_t>(rs[j].item)] = static_cast<int>(j);
  }
  std::vector<char> have(static_cast<std::size_t>(plan.k), q == 0);
  for (const auto& s : plan.sends[static_cast<std::size_t>(q)]) {
    const auto i = static_cast<std::size_t>(s.item);
    if (!have[i]) {
      if (auto r = co_await pending[static_cast<std::size_t>(slot[i])].finished(); !r) co_return co_await settled(all, r.error());
      have[i] = 1;
    }
    if (const auto now = f.model_time(); now && *now < t0 + static_cast<double>(s.time) * step)
      if (auto r = co_await f.compute(t0 + static_cast<double>(s.time) * step - *now); !r) co_return co_await settled(all, r.error());
    if (auto r = co_await f.send(ranks.real(s.peer), {seq, static_cast<std::uint32_t>(s.item)}, item(s.item)); !r)
      co_return co_await settled(all, r.error());
  }
  for (std::size_t j = 0; j < rs.size(); ++j)
    if (!have[static_cast<std::size_t>(rs[j].item)])
      if (auto r = co_await pending[j].finished(); !r) co_return co_await settled(all, r.error());
  co_return result<void>{};
}

}  // namespace optcast::algorithms
