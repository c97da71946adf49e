// What every collective's entry point shares: its deadline, and what a failure does.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "optcast/collectives.hpp"
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

// The LogP(GP) parameters an algorithm shaped by them uses: the caller's, else the
// fabric's own (the simulator's), else the communicator's. Nothing if the caller's are
// impossible; `why` then says so.
inline std::optional<loggp_params> model_for(communicator& c, const collective_options& o, const char* what,
                                             std::string& why) {
  if (o.model) {
    const auto& m = *o.model;
    if (!(m.L >= 0 && m.o >= 0 && m.g >= 0 && m.G >= 0) || m.L + 2 * m.o <= 0 || std::max(m.g, m.o) <= 0) {
      why = std::string(what) + ": model parameters must be >= 0, with L + 2o > 0 and max(g, o) > 0";
      return std::nullopt;
    }
    return m;
  }
  return c.get_fabric().cost_model().value_or(c.options().model);
}

}  // namespace optcast::detail
