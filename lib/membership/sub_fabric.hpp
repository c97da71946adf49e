// A sub-communicator's fabric: a view of the job's fabric with ranks renumbered (split,
// subset, shrink). Not installed.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "optcast/fabric.hpp"

namespace optcast::detail {

// The members' ranks on the job's fabric, in the sub-communicator's order. Operations
// are renumbered and handed to the job's fabric, which completes, cancels and times
// them out as its own (their owner becomes it); everything about the job (failure,
// signatures, deadlines, the event loop) is the job fabric's.
class sub_fabric final : public fabric {
public:
  sub_fabric(std::shared_ptr<fabric> base, std::vector<int> members, int rank)
      : base_(std::move(base)), members_(std::move(members)), rank_(rank) {
    if (const auto* t = base_->layout()) layout_ = t->restricted(members_);
  }

  const std::shared_ptr<fabric>& base() const noexcept { return base_; }
  int member(int r) const noexcept { return members_[static_cast<std::size_t>(r)]; }
  const std::vector<int>& members() const noexcept { return members_; }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return static_cast<int>(members_.size()); }
  int ports() const noexcept override { return base_->ports(); }
  bool receives_from_any() const noexcept override { return base_->receives_from_any(); }
  std::string_view name() const noexcept override { return base_->name(); }
  trace_log* call_trace() const noexcept override { return base_->call_trace(); }
  std::optional<loggp_params> cost_model() const noexcept override { return base_->cost_model(); }
  std::optional<double> model_time() const noexcept override { return base_->model_time(); }
  const topology* layout() const noexcept override { return layout_ ? &*layout_ : nullptr; }
  bool carries_data() const noexcept override { return base_->carries_data(); }

  bool start(operation& op) noexcept override {
    // Out of range stays out of range (-1), and the job fabric refuses it as it would.
    // Any peer stays any peer: only members send with this communicator's tags.
    if (op.peer != any_peer) op.peer = op.peer >= 0 && op.peer < size() ? member(op.peer) : -1;
    op.owner = base_.get();
    return base_->post(op);  // post, not start: the job fabric's trace sees it
  }
  bool start_local(operation& op) noexcept override {
    op.peer = base_->rank();
    op.owner = base_.get();
    return base_->post(op);
  }
  void cancel(operation& op, std::error_code ec) noexcept override { base_->cancel(op, ec); }
  std::uint64_t arm_deadline(std::uint32_t seq, std::chrono::nanoseconds t) override {
    return base_->arm_deadline(seq, t);
  }
  void disarm_deadline(std::uint64_t token) noexcept override { base_->disarm_deadline(token); }
  void run_until(stop_predicate done) override { base_->run_until(done); }
  asio::io_context* borrowed_loop() const noexcept override { return base_->borrowed_loop(); }
  // The job's loop: optcast/asio.hpp's forms work on a split's or a shrink's communicator.
  const asio::any_io_executor* executor() const noexcept override { return base_->executor(); }
  detail::frame_arena* frames() const noexcept override { return base_->frames(); }
  void abort(std::error_code ec, std::string detail) noexcept override { base_->abort(ec, std::move(detail)); }
  // Surviving a failure: the job fabric's, in job ranks.
  survivable* survival() const noexcept override { return base_->survival(); }
  void sign(std::uint32_t seq, const call_signature& s) override { base_->sign(seq, s); }
  void unsign(std::uint32_t seq) noexcept override { base_->unsign(seq); }
  call_signature signature_of(std::uint32_t seq) const noexcept override { return base_->signature_of(seq); }
  std::error_code leftover(std::uint32_t seq) override { return base_->leftover(seq); }
  std::error_code failure() const noexcept override { return base_->failure(); }
  const std::string& failure_detail() const noexcept override { return base_->failure_detail(); }
  const std::string& last_error() const noexcept override { return base_->last_error(); }
  // The job is left through its own communicator, or through a shrunk one (which is the
  // job from then on); a split's reports the shared state only.
  result<void> leave() override {
    if (leaves_job) return base_->leave();
    if (auto ec = failure()) return fail(ec);
    return {};
  }
  bool leaves_job = false;

private:
  std::shared_ptr<fabric> base_;
  std::vector<int> members_;
  int rank_;
  std::optional<topology> layout_;
};

}  // namespace optcast::detail
