// The messages of one peer that arrived before their receive was posted, found by tag in
// O(log n) however many are held: a receive's match, a collective's start (sign) and end
// (leftover) look up only their own collective's messages, so a peer that floods a rank
// with messages nobody receives costs each call a few steps, not a pass over the flood.
// Internal to net/tcp.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "optcast/fabric.hpp"
#include "optcast/net/job.hpp"
#include "../common/buffer_pool.hpp"

namespace optcast::tcp::impl {

struct held_message {
  call_signature sig;
  detail::message_buffer data;
  std::uint64_t arrival = 0;  // the fabric's count of held messages: which came first
  double arrived = -1;        // when, on the trace's clock (traced fabrics only)
};

class held_messages {
  // Keyed by the packed tag (seq in the high half): one collective's messages are one
  // range, and messages of one tag keep their arrival order (a multimap inserts at the
  // end of its equal range).
  using index = std::multimap<std::uint64_t, held_message>;

public:
  using node = index::node_type;
  // Emptied nodes kept for the next message, so that holding and taking messages
  // allocates nothing once a job runs; shared by a fabric's peers.
  struct spares {
    static constexpr std::size_t most = 256;
    std::vector<node> nodes;
  };

  // What one held message costs beyond its payload: its node (the tree's links, the tag,
  // held_message: 112 B on x86-64) from a 128 B chunk of glibc's malloc (8 B header,
  // 16 B steps), and the payload's own chunk header (optcast-bench flood measures it).
  static constexpr std::size_t overhead = job_config::held_message_overhead;
  static_assert(sizeof(index::value_type) + 4 * sizeof(void*) + sizeof(std::size_t) <= 128,
                "a held message's node outgrew the overhead counted for it");

  bool empty() const noexcept { return by_tag_.empty(); }
  std::size_t size() const noexcept { return by_tag_.size(); }

  // The first held with tg (the earliest of its tag), or null.
  held_message* find(tag tg) noexcept {
    auto it = by_tag_.find(tg.packed());
    return it == by_tag_.end() ? nullptr : &it->second;
  }

  // Takes the first held with tg (find's), its payload moved out.
  held_message take(tag tg, spares& s) {
    auto nh = by_tag_.extract(by_tag_.find(tg.packed()));
    held_message m = std::move(nh.mapped());
    if (s.nodes.size() < spares::most) s.nodes.push_back(std::move(nh));
    return m;
  }

  void hold(tag tg, held_message m, spares& s) {
    if (s.nodes.empty()) {
      by_tag_.emplace(tg.packed(), std::move(m));
      return;
    }
    node nh = std::move(s.nodes.back());
    s.nodes.pop_back();
    nh.key() = tg.packed();
    nh.mapped() = std::move(m);
    by_tag_.insert(std::move(nh));
  }

  // f(tag, message) for each held of collective seq.
  template <class F>
  void each_of(std::uint32_t seq, F&& f) const {
    const auto end = by_tag_.upper_bound(tag{seq, 0xffffffffu}.packed());
    for (auto it = by_tag_.lower_bound(tag{seq, 0}.packed()); it != end; ++it)
      f(tag::unpack(it->first), it->second);
  }

  // Removes every message whose tag satisfies pred, handing each to f(message) first.
  template <class Pred, class F>
  void drop_if(Pred pred, F&& f) {
    for (auto it = by_tag_.begin(); it != by_tag_.end();)
      if (pred(tag::unpack(it->first))) {
        f(it->second);
        it = by_tag_.erase(it);
      } else {
        ++it;
      }
  }

private:
  index by_tag_;
};

}  // namespace optcast::tcp::impl
