// A call's torch Work: its future, and an error that surfaces where torch waits.
// (torch's own Work::create_from_future waits without raising, so that a synchronous
// collective that failed, a rank's death say, would return as if it had succeeded.)
#pragma once

#include <chrono>
#include <exception>
#include <stdexcept>
#include <thread>
#include <vector>

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

namespace optcast::torch_backend {

class future_work final : public c10d::Work {
public:
  explicit future_work(c10::intrusive_ptr<c10::ivalue::Future> f) : fut_(std::move(f)) {}
  bool isCompleted() override { return fut_->completed(); }
  bool isSuccess() const override { return fut_->completed() && !fut_->hasError(); }
  std::exception_ptr exception() const override { return fut_->completed() ? fut_->exception_ptr() : nullptr; }
  std::vector<at::Tensor> result() override { return fut_->value().toTensorVector(); }
  // Raises the call's error. A finite timeout (the call has its own deadline besides)
  // raises if the call has not ended by then.
  bool wait(std::chrono::milliseconds timeout = ::kNoTimeout) override {
    if (timeout == ::kNoTimeout) {
      fut_->wait();
    } else {
      const auto until = std::chrono::steady_clock::now() + timeout;
      while (!fut_->completed()) {
        if (std::chrono::steady_clock::now() >= until)
          throw std::runtime_error("optcast: the call did not end within the wait's " + std::to_string(timeout.count()) + " ms");
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    if (fut_->hasError()) std::rethrow_exception(fut_->exception_ptr());
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return fut_; }

private:
  c10::intrusive_ptr<c10::ivalue::Future> fut_;
};

}  // namespace optcast::torch_backend
