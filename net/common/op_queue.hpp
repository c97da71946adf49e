// An intrusive FIFO of operations, linked through operation::next/prev: queuing an
// operation never allocates.
#pragma once

#include "optcast/fabric.hpp"

namespace optcast::detail {

class op_queue {
public:
  bool empty() const noexcept { return head_ == nullptr; }
  operation* front() const noexcept { return head_; }

  void push_back(operation& op) noexcept {
    op.transport.next = nullptr;
    op.transport.prev = tail_;
    if (tail_)
      tail_->transport.next = &op;
    else
      head_ = &op;
    tail_ = &op;
  }
  void push_front(operation& op) noexcept {
    op.transport.prev = nullptr;
    op.transport.next = head_;
    if (head_)
      head_->transport.prev = &op;
    else
      tail_ = &op;
    head_ = &op;
  }
  void remove(operation& op) noexcept {
    (op.transport.prev ? op.transport.prev->transport.next : head_) = op.transport.next;
    (op.transport.next ? op.transport.next->transport.prev : tail_) = op.transport.prev;
    op.transport.next = op.transport.prev = nullptr;
  }
  operation* pop_front() noexcept {
    operation* op = head_;
    if (op) remove(*op);
    return op;
  }
  template <class Pred>
  operation* find(Pred pred) const noexcept {
    for (operation* op = head_; op; op = op->transport.next)
      if (pred(*op)) return op;
    return nullptr;
  }
  // Removes every operation matching pred and hands it to fn (which may complete it).
  template <class Pred, class Fn>
  void drain_if(Pred pred, Fn fn) {
    for (operation* op = head_; op;) {
      operation* next = op->transport.next;
      if (pred(*op)) {
        remove(*op);
        fn(*op);
      }
      op = next;
    }
  }

private:
  operation* head_ = nullptr;
  operation* tail_ = nullptr;
};

}  // namespace optcast::detail
