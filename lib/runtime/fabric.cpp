#include "optcast/fabric.hpp"

#include "optcast/when_all.hpp"

namespace optcast {

bool operation::await_suspend(std::coroutine_handle<> h) noexcept {
  on_complete = [](operation& op) noexcept {
    std::coroutine_handle<>::from_address(op.context).resume();
  };
  context = h.address();
  return !owner->post(*this);
}

std::string describe_op(const operation& op) {
  if (op.kind == op_kind::idle) return "an idle round";
  if (op.kind == op_kind::compute) return "a computation";
  std::string s = op.kind == op_kind::send ? "send of " : "receive of ";
  s += std::to_string(op.size) + " B ";
  s += op.kind == op_kind::send ? "to" : "from";
  s += " rank " + std::to_string(op.peer) + " (collective " + std::to_string(op.tg.seq) +
       ", step " + std::to_string(op.tg.step) + ")";
  return s;
}

std::error_code check_op(const fabric& f, const operation& op) noexcept {
  if (op.peer < 0 || op.peer >= f.size() || op.peer == f.rank())
    return make_error_code(errc::invalid_argument);
  if (op.size > 0 && op.data == nullptr) return make_error_code(errc::invalid_argument);
  return {};
}

namespace detail {

bool op_group::start(std::span<operation> ops, std::coroutine_handle<> h) noexcept {
  ops_ = ops;
  pending_ = 1;  // held while starting, so no completion can resume us early
  for (auto& op : ops_) {
    if (first_error_) {  // a sibling failed already: do not start the rest
      op.finish_now(make_error_code(errc::cancelled));
      continue;
    }
    op.on_complete = &on_one;
    op.context = this;
    ++pending_;
    if (op.owner->post(op)) {
      --pending_;
      if (op.ec) failed(op.ec);
    }
  }
  if (--pending_ == 0) return false;
  waiting_ = h;
  return true;
}

void op_group::on_one(operation& op) noexcept {
  auto& g = *static_cast<op_group*>(op.context);
  if (op.ec) {
    ++g.pending_;
    g.failed(op.ec);
    --g.pending_;
  }
  g.release();
}

void op_group::failed(std::error_code ec) noexcept {
  if (first_error_) return;
  first_error_ = ec;
  for (auto& other : ops_)
    if (other.on_complete == &on_one && !other.finished)
      other.owner->cancel(other, make_error_code(errc::cancelled));
}

}  // namespace detail

}  // namespace optcast
