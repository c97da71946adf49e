// A communicator's numbering of its calls and its place among the communicators of one
// fabric, which only the collectives (that take the numbers) and split (that makes
// sub-communicators) touch; not installed.
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "optcast/communicator.hpp"

namespace optcast::detail {

// The communicator ids in use in one process on one fabric, shared by a communicator and
// every sub-communicator made from it (split.cpp).
struct comm_space {
  std::mutex mu;
  std::bitset<seq_layout::ids> in_use{1};  // id 0 is the job's
  bool creating = false;                   // a split in flight: they go one at a time
  comm_space() { in_use.set(seq_layout::reserved_id); }
};

struct comm_access {
  // The next collective's seq (communicator::next_seq).
  static std::uint32_t next_seq(communicator& c) noexcept { return c.next_seq(); }
  static std::uint32_t next_agreement(communicator& c) noexcept { return c.next_agreement(); }
  static std::uint32_t p2p_seq(const communicator& c, std::uint32_t user_tag) noexcept { return c.p2p_seq(user_tag); }
  static const std::shared_ptr<comm_space>& space(communicator& c) { return c.space(); }
  // Why the call refused its arguments, for communicator::last_error.
  static void record_error(communicator& c, std::string why) { c.record_error(std::move(why)); }
  // A sub-communicator on `view`, holding id `id` of `space`.
  static communicator sub(std::shared_ptr<fabric> view, communicator_options o, std::shared_ptr<comm_space> space, std::uint32_t id) {
    return communicator(std::move(view), o, std::move(space), id);
  }
};

}  // namespace optcast::detail
