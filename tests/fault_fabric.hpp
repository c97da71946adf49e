// A fabric decorator for tests: forwards everything, and runs `trigger` just before the
// n-th operation starts, so a fault lands at a known point inside a collective (nth < 0:
// never); `seen`, where given, is shown every operation as it starts.
#pragma once

#include <functional>
#include <memory>

#include "optcast/fabric.hpp"

namespace optcast::testing {

class fault_fabric final : public fabric {
public:
  fault_fabric(std::shared_ptr<fabric> inner, int nth, std::function<void()> trigger,
               std::function<void(const operation&)> seen = {})
      : inner_(std::move(inner)), left_(nth), trigger_(std::move(trigger)), seen_(std::move(seen)) {}

  int rank() const noexcept override { return inner_->rank(); }
  int size() const noexcept override { return inner_->size(); }
  int ports() const noexcept override { return inner_->ports(); }
  std::string_view name() const noexcept override { return inner_->name(); }
  bool start(operation& op) noexcept override {
    if (left_ >= 0 && left_-- == 0) trigger_();
    if (seen_) seen_(op);
    op.owner = inner_.get();  // completions and cancels go straight to the real fabric
    return inner_->start(op);
  }
  void cancel(operation& op, std::error_code ec) noexcept override { inner_->cancel(op, ec); }
  void sign(std::uint32_t seq, const call_signature& s) override { inner_->sign(seq, s); }
  void unsign(std::uint32_t seq) noexcept override { inner_->unsign(seq); }
  call_signature signature_of(std::uint32_t seq) const noexcept override { return inner_->signature_of(seq); }
  std::uint64_t arm_deadline(std::uint32_t seq, std::chrono::nanoseconds t) override {
    return inner_->arm_deadline(seq, t);
  }
  void disarm_deadline(std::uint64_t token) noexcept override { inner_->disarm_deadline(token); }
  void run_until(stop_predicate done) override { inner_->run_until(done); }
  void abort(std::error_code ec, std::string detail) noexcept override {
    note_failure(ec, detail);
    inner_->abort(ec, std::move(detail));
  }

private:
  std::shared_ptr<fabric> inner_;
  int left_;
  std::function<void()> trigger_;
  std::function<void(const operation&)> seen_;
};

}  // namespace optcast::testing
