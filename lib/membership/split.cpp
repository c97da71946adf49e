// Sub-communicators: a view of the job's fabric with ranks renumbered, and the
// collective that agrees on one (split, subset).
#include <algorithm>
#include <array>
#include <numeric>

#include "optcast/collectives.hpp"
#include "runtime/comm_access.hpp"
#include "membership/sub_fabric.hpp"

namespace optcast {

using detail::sub_fabric;

namespace {

// What each rank of the parent contributes.
enum class stance : std::int64_t { ok = 0, bad_list = 1, busy = 2 };
struct contribution {
  std::int64_t color, key, list_hash, why;
};
constexpr std::size_t id_words = seq_layout::ids / 64;

std::uint64_t hash_list(const std::vector<int>& ranks) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (int r : ranks) h = (h ^ static_cast<std::uint32_t>(r)) * 0x100000001b3ull;
  return h;
}

result<std::optional<communicator>> refuse_all(communicator& c, std::string why) {
  detail::comm_access::record_error(c, std::move(why));
  return fail(errc::invalid_argument);
}

// One creation at a time per process: two in flight could both pick an id free at both.
struct creation_guard {
  std::shared_ptr<detail::comm_space> space;
  bool held = false;
  explicit creation_guard(std::shared_ptr<detail::comm_space> s) : space(std::move(s)) {
    std::lock_guard lock(space->mu);
    if (!space->creating) held = space->creating = true;
  }
  ~creation_guard() {
    if (!held) return;
    std::lock_guard lock(space->mu);
    space->creating = false;
  }
};

task<result<std::optional<communicator>>> create(communicator& parent, std::string_view what, int color, int key,
                                                  std::uint64_t list_hash, std::string bad_list) {
  using out_t = result<std::optional<communicator>>;
  if (parent.broken()) co_return out_t(fail(errc::broken));
  creation_guard guard(detail::comm_access::space(parent));
  const int p = parent.size(), me = parent.rank();
  contribution mine{color, key, static_cast<std::int64_t>(list_hash),
                    static_cast<std::int64_t>(!bad_list.empty() ? stance::bad_list : guard.held ? stance::ok : stance::busy)};
  std::vector<contribution> all(static_cast<std::size_t>(p));
  static_assert(sizeof(contribution) == 4 * sizeof(std::int64_t));
  if (auto r = co_await allgather(parent, std::span<const std::int64_t>(&mine.color, 4),
                                  std::span(reinterpret_cast<std::int64_t*>(all.data()), 4 * all.size()));
      !r)
    co_return out_t(fail(r.error()));
  // Every rank sees the same contributions and refuses alike, so none waits for another.
  // A rank's own wrong list is the most useful thing to say, then the first rank's.
  auto who = [&](int r) { return std::string(what) + ": rank " + std::to_string(r) + " of the parent "; };
  if (!bad_list.empty()) co_return refuse_all(parent, std::string(what) + ": " + bad_list);
  for (int r = 0; r < p; ++r) {
    const auto& c = all[static_cast<std::size_t>(r)];
    if (c.why == static_cast<std::int64_t>(stance::bad_list))
      co_return refuse_all(parent, who(r) + "gave a list of ranks that is not valid");
    if (c.why == static_cast<std::int64_t>(stance::busy))
      co_return refuse_all(parent, who(r) + "is making another communicator at the same time; a process makes them "
                                            "one at a time, in the same order as its peers");
  }
  for (int r = 0; r < p; ++r)
    if (all[static_cast<std::size_t>(r)].list_hash != mine.list_hash)
      co_return refuse_all(parent, who(r) + "gave another list of ranks than rank " + std::to_string(me));
  // The lowest id that no rank of the parent uses: then no two ranks of the new
  // communicator share another under it, and all colors may take the same one (their
  // members are disjoint).
  std::array<std::uint64_t, id_words> used{};
  {
    std::lock_guard lock(detail::comm_access::space(parent)->mu);
    for (std::size_t i = 0; i < seq_layout::ids; ++i)
      if (detail::comm_access::space(parent)->in_use.test(i)) used[i / 64] |= std::uint64_t{1} << (i % 64);
  }
  if (auto r = co_await allreduce(parent, std::span<const std::uint64_t>(used), std::span<std::uint64_t>(used), ops::bor); !r)
    co_return out_t(fail(r.error()));
  std::uint32_t id = 0;
  for (std::uint32_t i = 1; i < seq_layout::reserved_id && !id; ++i)
    if (!(used[i / 64] >> (i % 64) & 1)) id = i;
  if (color < 0) co_return out_t(std::optional<communicator>{});
  if (!id) {
    detail::comm_access::record_error(parent, std::string(what) + ": every communicator id is in use on some rank (" +
                        std::to_string(seq_layout::reserved_id - 1) + " sub-communicators alive)");
    co_return out_t(fail(errc::limit_exceeded));
  }
  std::vector<int> order;  // parent ranks of my color, by (key, parent rank)
  for (int r = 0; r < p; ++r)
    if (all[static_cast<std::size_t>(r)].color == color) order.push_back(r);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return all[static_cast<std::size_t>(a)].key < all[static_cast<std::size_t>(b)].key;
  });
  auto* parent_view = dynamic_cast<sub_fabric*>(&parent.get_fabric());
  std::shared_ptr<fabric> base = parent_view ? parent_view->base() : nullptr;
  std::vector<int> members;
  int sub_rank = -1;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (order[i] == me) sub_rank = static_cast<int>(i);
    members.push_back(parent_view ? parent_view->member(order[i]) : order[i]);
  }
  if (!parent_view) base = parent.shared_fabric();
  {
    std::lock_guard lock(detail::comm_access::space(parent)->mu);
    detail::comm_access::space(parent)->in_use.set(id);
  }
  if (auto* s = base->survival()) s->enroll(id, members);
  auto view = std::make_shared<sub_fabric>(std::move(base), std::move(members), sub_rank);
  co_return out_t(std::optional<communicator>(detail::comm_access::sub(std::move(view), parent.options(), detail::comm_access::space(parent), id)));
}

}  // namespace

task<result<std::optional<communicator>>> split(communicator& parent, int color, int key) {
  return create(parent, "split", color < 0 ? -1 : color, key, 0, {});
}

task<result<std::optional<communicator>>> subset(communicator& parent, std::vector<int> ranks) {
  std::string bad;
  std::vector<char> seen(static_cast<std::size_t>(parent.size()), 0);
  for (std::size_t i = 0; i < ranks.size() && bad.empty(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= parent.size())
      bad = "ranks[" + std::to_string(i) + "] = " + std::to_string(r) + " is not a rank of the " +
            std::to_string(parent.size()) + "-rank parent";
    else if (seen[static_cast<std::size_t>(r)]++)
      bad = "rank " + std::to_string(r) + " is listed twice";
  }
  if (ranks.empty() && bad.empty()) bad = "the list of ranks is empty";
  const auto at = std::find(ranks.begin(), ranks.end(), parent.rank());
  const bool member = bad.empty() && at != ranks.end();
  return create(parent, "subset", member ? 0 : -1, member ? static_cast<int>(at - ranks.begin()) : 0,
                hash_list(ranks), std::move(bad));
}

int job_rank(const communicator& c, int r) {
  if (const auto* v = dynamic_cast<const sub_fabric*>(&c.get_fabric())) return v->member(r);
  return r;
}

}  // namespace optcast
