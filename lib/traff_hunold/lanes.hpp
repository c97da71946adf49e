// The decomposition of Träff and Hunold, "Decomposing MPI collectives for exploiting
// multi-lane communication" (IEEE Cluster 2020, arXiv 1910.13373): a job of H hosts with
// n ranks each is n lanes, lane l being the ranks of local index l on every host; a
// collective is a node-local phase, concurrent inter-node collectives, one per lane, each
// on a 1/n-th of the data, and a node-local phase. A host with k rails and fewer ranks
// than rails gives each rank c = k / n lanes of its own (sub-lanes), so that every rail
// carries one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "optcast/fabric.hpp"

namespace optcast::detail {

struct lane_shape {
  int hosts = 1, per_host = 1, rails = 1;
  int sub = 1;            // lanes per rank: max(1, rails / per_host)
  int host = 0, local = 0;  // this rank's host and index on it
  std::vector<int> host_group;  // the ranks of this host, by local index
  std::vector<int> lane_group;  // the ranks of this local index, by host
  std::vector<int> host_of, local_of;  // every rank's
  std::vector<int> rank_of;            // [local * hosts + host]: the rank there

  int rank_at(int h, int l) const noexcept {
    return rank_of[static_cast<std::size_t>(l) * static_cast<std::size_t>(hosts) + static_cast<std::size_t>(h)];
  }

  int lanes() const noexcept { return per_host * sub; }
  // Whether decomposing gains anything: several hosts, and several ranks on each or
  // several rails.
  bool worth_it() const noexcept { return hosts > 1 && (per_host > 1 || rails > 1); }
  // The shape of `t` for rank `me`; nullopt where hosts differ in their number of ranks
  // (lanes would be incomplete) or there is no topology.
  static std::optional<lane_shape> of(const topology* t, int me);
  // The same, built once per thread for the topology it last asked about (every
  // collective call asks, and building takes five vectors of p): valid until this thread
  // asks about another topology or rank; null where of() gives nullopt.
  static const lane_shape* cached(const topology* t, int me);
};

// A collective's view of its fabric restricted to `members` (its ranks are their indices
// there), whose messages travel on lane `lane` and carry steps in a region of their own
// (`region` in the step's top byte), so that the phases and lanes of one collective never
// take each other's messages. Everything else is the fabric's.
class lane_view final : public fabric {
public:
  lane_view(fabric& base, const std::vector<int>& members, int lane, int region);

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return static_cast<int>(members_.size()); }
  int ports() const noexcept override { return base_.ports(); }
  std::string_view name() const noexcept override { return base_.name(); }
  std::optional<loggp_params> cost_model() const noexcept override { return base_.cost_model(); }
  std::optional<double> model_time() const noexcept override { return base_.model_time(); }
  bool carries_data() const noexcept override { return base_.carries_data(); }
  trace_log* call_trace() const noexcept override { return base_.call_trace(); }
  // A view lives for one call: its own pool would fault in fresh pages every call (6% of
  // the CPU of a 16 MiB allreduce on 4 x 4 went to zeroing them).
  scratch_pool& scratch() noexcept override { return base_.scratch(); }

  bool start(operation& op) noexcept override;
  bool start_local(operation& op) noexcept override;
  void cancel(operation& op, std::error_code ec) noexcept override { base_.cancel(op, ec); }
  std::uint64_t arm_deadline(std::uint32_t seq, std::chrono::nanoseconds t) override { return base_.arm_deadline(seq, t); }
  void disarm_deadline(std::uint64_t token) noexcept override { base_.disarm_deadline(token); }
  void run_until(stop_predicate done) override { base_.run_until(done); }
  detail::frame_arena* frames() const noexcept override { return base_.frames(); }
  void abort(std::error_code ec, std::string detail) noexcept override { base_.abort(ec, std::move(detail)); }
  void sign(std::uint32_t seq, const call_signature& s) override { base_.sign(seq, s); }
  void unsign(std::uint32_t seq) noexcept override { base_.unsign(seq); }
  call_signature signature_of(std::uint32_t seq) const noexcept override { return base_.signature_of(seq); }
  std::error_code failure() const noexcept override { return base_.failure(); }
  const std::string& failure_detail() const noexcept override { return base_.failure_detail(); }
  const std::string& last_error() const noexcept override { return base_.last_error(); }

  // The steps a view's round loop may use: below 2^24.
  static constexpr int step_bits = 24;

private:
  fabric& base_;
  const std::vector<int>& members_;
  int rank_ = -1;
  std::uint8_t lane_;
  std::uint32_t region_;
};

}  // namespace optcast::detail
