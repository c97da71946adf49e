// What every collective's entry point shares: its deadline, and what a failure does.
#pragma once

#include <chrono>

#include "optcast/communicator.hpp"

namespace optcast::detail {

// Owns a collective's deadline for as long as its round loop runs.
class deadline_scope {
public:
  deadline_scope(fabric& f, std::uint32_t seq, std::chrono::milliseconds t)
      : f_(f), token_(f.arm_deadline(seq, t)) {}
  ~deadline_scope() { f_.disarm_deadline(token_); }
  deadline_scope(const deadline_scope&) = delete;
  deadline_scope& operator=(const deadline_scope&) = delete;

private:
  fabric& f_;
  std::uint64_t token_;
};

// A failed collective leaves ranks in different places of its schedule, so nothing
// later on this communicator could match up: it is broken from here on (DESIGN.md).
inline result<void> finish(communicator& c, result<void> r) {
  if (!r && r.error() != errc::invalid_argument) {
    auto& f = c.get_fabric();
    f.abort(r.error(), f.last_error());
  }
  return r;
}

// Refuses the call: errc::invalid_argument, with the reason kept for comm.last_error().
inline result<void> refuse(communicator& c, std::string why) {
  c.record_error(std::move(why));
  return fail(errc::invalid_argument);
}

}  // namespace optcast::detail
