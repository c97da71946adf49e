#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "round_loops.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms {

namespace {

// Tags: step 0 carries a fold-in, 1 + j the window message combined at inner step j,
// fold_out the result going back.
constexpr std::uint32_t fold_out = 1u << 30;

result<void> ok(const result<std::size_t>& r) { return r ? result<void>{} : fail(r.error()); }

}  // namespace

// Karp et al., Section 4.2 (logp.hpp, combining_plan): at inner step j a rank combines
// what rank i - window[j-1] sent it L steps earlier, then sends on.
//
// Receives are posted L + 1 steps ahead, each into its own buffer, so no fabric can
// deadlock here, even one whose sends wait for the matching receive: the rank furthest
// behind, at step j, finds its step-j message already sent (at j - L, by a rank at j or
// later) and its own send (for step j + L) already posted for by a rank at j or later.
task<result<void>> allreduce_combining(fabric& f, std::uint32_t seq, std::span<std::byte> acc,
                                       const erased_reduction& op, const logp::combining_plan& plan,
                                       double step_time) {
  const int P = f.size(), r = f.rank(), I = plan.inner, L = plan.L;
  if (P == 1) co_return result<void>{};
  const std::size_t count = acc.size() / op.elem;
  if (r >= I) {  // fold: hand the value to rank r - I, take the result back
    const auto out = f.scratch().take(acc.size());
    if (!acc.empty()) std::memcpy(out.data(), acc.data(), acc.size());
    co_return co_await when_all(f.send(r - I, {seq, 0}, out.span()), f.recv(r - I, {seq, fold_out}, acc));
  }
  const int T = static_cast<int>(plan.window.size()) - 1;
  const auto ring = static_cast<std::size_t>(L) + 1;
  // The receive slots and the kept copies come from the rank's scratch pool: a call
  // would otherwise fault in fresh pages for each.
  const auto slots = f.scratch().take(ring * acc.size());
  const auto got = [&](std::size_t k) { return slots.span().subspan(k * acc.size(), acc.size()); };
  const auto pending = std::make_unique<posted_op[]>(ring);
  const std::span<posted_op> all(pending.get(), ring);
  const auto at = [I](std::int64_t v) { return static_cast<int>(((v % I) + I) % I); };
  const auto post_step = [&](int j) {
    const auto J = static_cast<std::size_t>(j);
    if (j <= T && plan.from[J] >= 0)
      pending[J % ring].start(f.recv(at(r - plan.window[J - 1]), {seq, static_cast<std::uint32_t>(1 + j)}, got(J % ring)));
  };

  const bool partner = r + I < P;
  if (plan.start > 0) {
    if (partner) {
      const auto in = f.scratch().take(acc.size());
      if (auto x = co_await f.recv(r + I, {seq, 0}, in.span()); !x) co_return co_await settled(all, x.error());
      op(in.data(), acc.data(), acc.data(), count);
    } else if (f.model_time()) {
      // Waiting keeps the schedule's steps on a virtual clock: a message sent at once
      // would reach a partner in the step its fold-in arrives. On a live fabric the tags
      // keep the steps apart, and the wait would only sleep (with the timer's slack).
      if (auto x = co_await f.compute(plan.start * step_time); !x) co_return co_await settled(all, x.error());
    }
  }
  for (int j = 0; j <= L; ++j) post_step(j);
  // The step at which each earlier value is last sent, to keep copies only that long.
  std::vector<int> last_use(static_cast<std::size_t>(T) + 1, -1);
  for (int j = L; j <= T; ++j)
    if (const int t = plan.from[static_cast<std::size_t>(j)]; t >= 0 && t < j - L)
      last_use[static_cast<std::size_t>(t)] = j - L;
  std::map<int, scratch_pool::lease> kept;
  for (int j = 0; j <= T; ++j) {
    const auto J = static_cast<std::size_t>(j);
    if (plan.from[J] >= 0) {
      if (auto x = co_await pending[J % ring].finished(); !x) co_return co_await settled(all, x.error());
      op(got(J % ring).data(), acc.data(), acc.data(), count);  // older operands on the left
    }
    post_step(j + L + 1);  // into the slot just freed
    if (last_use[J] > j) {
      kept[j] = f.scratch().take(acc.size());
      if (!acc.empty()) std::memcpy(kept[j].data(), acc.data(), acc.size());
    }
    if (j + L > T) continue;
    const int t = plan.from[J + static_cast<std::size_t>(L)];
    if (t < 0) continue;
    std::span<const std::byte> value = acc;
    if (t != j) value = kept.at(t).span();
    const int to = at(r + plan.window[J + static_cast<std::size_t>(L) - 1]);
    if (auto x = co_await f.send(to, {seq, static_cast<std::uint32_t>(1 + j + L)}, value); !x)
      co_return co_await settled(all, x.error());
    if (t != j && last_use[static_cast<std::size_t>(t)] == j) kept.erase(t);
  }
  if (partner) co_return ok(co_await f.send(r + I, {seq, fold_out}, acc));
  co_return result<void>{};
}

}  // namespace optcast::algorithms
