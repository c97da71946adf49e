// What the multi-lane collectives' two files share: pieces of a buffer on whole
// elements, a set of operations awaited at once, the sub-lanes' collectives run at once,
// and the tag regions that keep the phases' messages apart.
#pragma once

#include <deque>
#include <span>
#include <vector>

#include "../blocks.hpp"
#include "lanes.hpp"
#include "optcast/task.hpp"
#include "optcast/when_all.hpp"

namespace optcast::algorithms::lane_phases {

using detail::lane_shape;
using detail::lane_view;

constexpr int first_local = 1, last_local = 2, turn_region = 3, lanes_region = 16;

// `bytes` in `count` pieces of whole elements; pieces [first, first + k) as one span.
struct pieces {
  block_partition part;
  std::size_t elem;
  pieces(std::size_t bytes, std::size_t element, int count)
      : part(bytes / element, static_cast<std::size_t>(count)), elem(element) {}
  std::span<std::byte> of(std::span<std::byte> buf, int first, int k = 1) const noexcept {
    const std::size_t a = part.offset(static_cast<std::size_t>(first)) * elem;
    const std::size_t b = part.offset(static_cast<std::size_t>(first + k)) * elem;
    return buf.subspan(a, b - a);
  }
};

inline task<result<void>> all_of(std::vector<operation>& ops) {
  if (ops.empty()) co_return result<void>{};
  co_return co_await when_all(std::span<operation>(ops));
}

// This rank's sub-lane j as a view (lane local * sub + j), in tag region `region` + j (a
// view's region is 8 bits: below 256); kept in `views` for the call.
inline lane_view& sub_lane(std::deque<lane_view>& views, fabric& f, const lane_shape& s, int j, int region) {
  return views.emplace_back(f, s.lane_group, s.local * s.sub + j, region + j);
}

// The sub-lanes' collectives at once: `run(view, j)` on every sub_lane.
template <class Run>
task<result<void>> on_every_lane(fabric& f, const lane_shape& s, Run run, int region = lanes_region) {
  std::deque<lane_view> views;
  std::vector<task<result<void>>> tasks;
  for (int j = 0; j < s.sub; ++j) tasks.push_back(run(sub_lane(views, f, s, j, region), j));
  for (auto& r : co_await when_all_tasks(std::move(tasks)))
    if (!r) co_return r;
  co_return result<void>{};
}

}  // namespace optcast::algorithms::lane_phases
