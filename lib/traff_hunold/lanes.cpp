#include "lanes.hpp"

#include <algorithm>

namespace optcast::detail {

std::optional<lane_shape> lane_shape::of(const topology* t, int me) {
  if (!t || t->size() == 0 || me < 0 || me >= t->size()) return std::nullopt;
  lane_shape s;
  s.hosts = t->hosts();
  s.rails = std::max(1, t->rails);
  s.host_of = t->host_of;
  s.local_of.assign(static_cast<std::size_t>(t->size()), 0);
  std::vector<int> count(static_cast<std::size_t>(s.hosts), 0);
  for (int r = 0; r < t->size(); ++r) {
    const auto h = static_cast<std::size_t>(t->host_of[static_cast<std::size_t>(r)]);
    s.local_of[static_cast<std::size_t>(r)] = count[h]++;
  }
  if (std::any_of(count.begin(), count.end(), [&](int c) { return c != count.front(); })) return std::nullopt;
  s.per_host = count.front();
  s.sub = std::max(1, s.rails / s.per_host);
  s.host = t->host_of[static_cast<std::size_t>(me)];
  s.local = s.local_of[static_cast<std::size_t>(me)];
  s.lane_group.assign(static_cast<std::size_t>(s.hosts), -1);
  s.rank_of.assign(static_cast<std::size_t>(t->size()), -1);
  for (int r = 0; r < t->size(); ++r) {
    const auto i = static_cast<std::size_t>(r);
    s.rank_of[static_cast<std::size_t>(s.local_of[i] * s.hosts + s.host_of[i])] = r;
    if (s.host_of[i] == s.host) s.host_group.push_back(r);
    if (s.local_of[i] == s.local) s.lane_group[static_cast<std::size_t>(s.host_of[i])] = r;
  }
  return s;
}

const lane_shape* lane_shape::cached(const topology* t, int me) {
  struct memo {
    bool built = false;
    std::vector<int> host_of;
    int rails = 0, me = -1;
    std::optional<lane_shape> shape;
  };
  thread_local memo m;
  if (!t) return nullptr;
  // Compared whole rather than by address: a topology freed and another made in its place
  // must not be taken for it. O(p) without allocating, against of()'s five vectors.
  if (!m.built || m.me != me || m.rails != t->rails || m.host_of != t->host_of) {
    m.shape = of(t, me);
    m.host_of = t->host_of;
    m.rails = t->rails;
    m.me = me;
    m.built = true;
  }
  return m.shape ? &*m.shape : nullptr;
}

lane_view::lane_view(fabric& base, const std::vector<int>& members, int lane, int region)
    : base_(base), members_(members), lane_(static_cast<std::uint8_t>(lane)), region_(static_cast<std::uint32_t>(region) << step_bits) {
  const auto at = std::find(members_.begin(), members_.end(), base_.rank());
  if (at != members_.end()) rank_ = static_cast<int>(at - members_.begin());
}

bool lane_view::start(operation& op) noexcept {
  if (op.peer != any_peer) op.peer = op.peer >= 0 && op.peer < size() ? members_[static_cast<std::size_t>(op.peer)] : -1;
  op.tg.step = region_ | (op.tg.step & ((1u << step_bits) - 1));
  op.lane = lane_;
  op.owner = &base_;
  return base_.post(op);
}

bool lane_view::start_local(operation& op) noexcept {
  op.peer = base_.rank();
  op.owner = &base_;
  return base_.post(op);
}

}  // namespace optcast::detail
