// The one entry path every collective takes: its sequence number, the broken check,
// the caller's options against the registry, the model, the deadline, and what a
// failure does. Each entry point adds only its own argument checks and buffers.
#pragma once

#include <chrono>
#include <cmath>
#include <optional>
#include <string>

#include "optcast/collectives.hpp"
#include "optcast/communicator.hpp"
#include "registry.hpp"
#include "traff_hunold/lanes.hpp"
#include "runtime/comm_access.hpp"

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

// The call's signature on the fabric while its messages are in flight.
class signature_scope {
public:
  signature_scope(fabric& f, std::uint32_t seq, const call_signature& s) : f_(f), seq_(seq) { f.sign(seq, s); }
  ~signature_scope() { f_.unsign(seq_); }
  signature_scope(const signature_scope&) = delete;
  signature_scope& operator=(const signature_scope&) = delete;

private:
  fabric& f_;
  std::uint32_t seq_;
};

// A failed collective leaves ranks in different places of its schedule, so nothing
// later on this communicator could match up: it is broken from here on (docs/DESIGN.md).
// A member's loss (or a revocation) revokes the communicator on every member, and leaves
// the fabric to the survivors (optcast/survive.hpp); any other failure of this rank's
// fails its fabric (and so, to the others, this rank).
inline result<void> finish(communicator& c, result<void> r) {
  if (!r && r.error() != errc::invalid_argument) {
    auto& f = c.get_fabric();
    // Revoked (a member's death, with its cause: lost, stopped, failed otherwise), or a
    // peer found lost here: the survivors go on.
    // A fabric that does not survive fails as a whole.
    auto* s = f.survival();
    const bool lost = s && (r.error() == errc::peer_lost || r.error() == errc::revoked || s->revoked(c.id()));
    if (f.failure() || !lost)
      f.abort(r.error(), f.last_error());
    else
      s->revoke(c.id(), r.error(), f.last_error());
  }
  return r;
}

// Refuses the call: errc::invalid_argument, with the reason kept for comm.last_error().
inline result<void> refuse(communicator& c, std::string why) {
  detail::comm_access::record_error(c, std::move(why));
  return fail(errc::invalid_argument);
}

// The LogP(GP) parameters an algorithm shaped by them uses: the caller's, else the
// fabric's own (the simulator's), else the communicator's. Nothing if the caller's are
// impossible; `why` then says so.
std::optional<loggp_params> model_for(communicator& c, const collective_options& o, std::string_view what,
                                      std::string& why);

// What a call runs, once refusal() has accepted its options: the caller's algorithm, or
// the automatic choice: broadcast by plan_broadcast's model rule; allreduce with an
// order-free operator the circulant pair or the combining broadcast by their predictions
// (choose_allreduce); every other collective the first row flagged automatic that the
// traits allow (registry order is preference order). The block count by the row's rule
// unless the caller gave one.
struct resolved {
  const entry* row;
  int blocks;
};
// The start of a collective call, in the order every entry point needs it. Each check
// returns false after recording the refusal; the entry point then co_returns `early`.
class call_start {
public:
  // Takes the sequence number before any check, so that a call refused on one rank does
  // not shift the numbering of later collectives against the other ranks; then the
  // broken check and the block count's sign.
  call_start(communicator& c, collective coll, const collective_options& o);

  communicator& comm;
  const collective coll;
  const collective_options& opts;
  const std::uint32_t seq;
  result<void> early;  // what the call returns when a check failed
  // What this rank's call is, as far as the checks below have seen it (root, counts,
  // operator, the resolved algorithm, blocks and size); run() signs the call's messages
  // with it. An entry point that chooses its algorithm without resolve() fills it in.
  call_signature sig;

  bool ok() const noexcept { return static_cast<bool>(early); }
  // Records "<collective>: why" and fails the call.
  bool refuse(const std::string& why);
  bool check_root(int root);
  // One count per rank, none negative (checked_counts makes one too large for int64
  // negative); empty after a refusal.
  std::vector<std::size_t> counts(const std::vector<std::int64_t>& given);
  // Every rank n elements (scatter, gather): signed as counts() signs p counts of n, in
  // O(1), so a rank that calls scatterv with equal counts agrees with one calling scatter.
  void equal_counts(std::size_t n) noexcept;
  // The caller's algorithm checked against the registry for this call's traits (ports,
  // operator); false after a refusal.
  bool accepts(const call_traits& traits);
  // The model (model_for), checked; a refusal if the caller's is impossible.
  std::optional<loggp_params> model();
  // The row and block count the call runs (resolve() below).
  resolved resolve(const call_traits& traits, const loggp_params& m, const call_shape& shape);
  // Records the algorithm and block count the call runs.
  void ran(algorithm alg, int blocks) noexcept;
  // Runs `body` (the round loop) under the call's deadline, and breaks the communicator
  // if it fails. The task keeps a copy of what it needs of the call: it may outlive this
  // call_start (and the options it refers to).
  task<result<void>> run(task<result<void>> body);

  // Also records the operator and element type in the signature. Entry points ask twice
  // (accepts, then resolve): the topology is looked at once.
  call_traits traits(const erased_reduction* op = nullptr) noexcept;
  // The multi-lane rows take equal parts only: with counts that differ, `t` loses its
  // lanes (the automatic choice keeps to the one-lane rows) and multi_lane asked for by
  // name is refused; false after that refusal.
  bool equal_parts_only(const std::vector<std::size_t>& counts, call_traits& t);

private:
  signed char lanes_ = -1;  // has_lanes(comm), once known
};

resolved resolve(const communicator& c, collective coll, const collective_options& o, const call_traits& traits,
                 const loggp_params& m, const call_shape& shape);
// The same for `p` ranks of `ports` ports (a lane's collective, lib/traff_hunold).
// `lanes`: the communicator's topology where it has lanes (call_traits::lanes); the
// flat rows are then predicted with the host's ranks sharing one rail (G times the ranks
// per host), the multi-lane rows by their decomposition (multi_lane_runners.hpp).
// `predicted`: the chosen row's predicted time, INFINITY where none was predicted.
resolved resolve_for(int p, int ports, const communicator_options& opts, collective coll, const collective_options& o,
                     const call_traits& traits, const loggp_params& m, const call_shape& shape,
                     const lane_shape* lanes = nullptr, double* predicted = nullptr);
// The communicator's topology has lanes (call_traits::lanes).
bool has_lanes(const communicator& c);

}  // namespace optcast::detail
