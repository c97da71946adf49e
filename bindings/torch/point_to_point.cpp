// torch's send, recv and recv from any source on optcast's point-to-point calls.
#include <atomic>

#include <ATen/core/ivalue.h>

#include "process_group.hpp"
#include "tensors.hpp"

namespace optcast::torch_backend {

c10::intrusive_ptr<c10d::Work> process_group::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  at::Tensor t = one(tensors, "send");
  TORCH_CHECK(dst >= 0 && dst < size_ && dst != rank_, "optcast: send: ", dst, " is not another rank of this group of ", size_);
  TORCH_CHECK(tag >= 0 && static_cast<std::uint32_t>(tag) <= seq_layout::max_user_tag, "optcast: send: tag ", tag,
              " is outside 0..", seq_layout::max_user_tag);
  at::Tensor b = t.contiguous();
  return start_now({[this, b, dst, tag] { return optcast::send(*comm_, dst, static_cast<std::uint32_t>(tag), bytes(b), timeout_); },
                    nullptr, {t}, {}, "send"});
}

c10::intrusive_ptr<c10d::Work> process_group::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  at::Tensor t = one(tensors, "recv");
  TORCH_CHECK(src >= 0 && src < size_ && src != rank_, "optcast: recv: ", src, " is not another rank of this group of ", size_);
  TORCH_CHECK(tag >= 0 && static_cast<std::uint32_t>(tag) <= seq_layout::max_user_tag, "optcast: recv: tag ", tag,
              " is outside 0..", seq_layout::max_user_tag);
  at::Tensor b = t.contiguous();
  return start_now({[this, b, src, tag] { return optcast::recv(*comm_, src, static_cast<std::uint32_t>(tag), bytes(b), timeout_); },
                    [t, b] { if (!t.is_same(b)) t.copy_(b); }, {t}, {}, "recv"});
}

namespace {

// The Work of a receive from any source: torch asks it who sent (recv(src=None) returns
// work._source_rank()), which a future alone cannot say.
class any_source_work final : public c10d::Work {
public:
  any_source_work(c10::intrusive_ptr<c10::ivalue::Future> f, std::shared_ptr<std::atomic<int>> source)
      : Work(-1, c10d::OpType::RECVANYSOURCE), future_(std::move(f)), source_(std::move(source)) {}
  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override { return future_->completed() ? future_->exception_ptr() : nullptr; }
  int sourceRank() const override { return source_->load(); }
  std::vector<at::Tensor> result() override { return future_->value().toTensorVector(); }
  bool wait(std::chrono::milliseconds) override {
    future_->wait();
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

private:
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<std::atomic<int>> source_;
};

task<result<void>> receive_from_any(communicator& c, std::uint32_t tag, at::Tensor b, std::chrono::milliseconds t,
                                    std::shared_ptr<std::atomic<int>> source) {
  auto r = co_await recv_any(c, tag, bytes(b), t);
  if (!r) co_return fail(r.error());
  source->store(*r);
  co_return result<void>{};
}

}  // namespace

c10::intrusive_ptr<c10d::Work> process_group::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  at::Tensor t = one(tensors, "recv");
  TORCH_CHECK(tag >= 0 && static_cast<std::uint32_t>(tag) <= seq_layout::max_user_tag, "optcast: recv: tag ", tag,
              " is outside 0..", seq_layout::max_user_tag);
  at::Tensor b = t.contiguous();
  auto source = std::make_shared<std::atomic<int>>(-1);
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  start_now({[this, b, tag, source] { return receive_from_any(*comm_, static_cast<std::uint32_t>(tag), b, timeout_, source); },
             [t, b] { if (!t.is_same(b)) t.copy_(b); }, {t}, future, "recv from any source"});
  return c10::make_intrusive<any_source_work>(future, source);
}

}  // namespace optcast::torch_backend
