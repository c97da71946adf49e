// optcast as a torch.distributed backend (PyTorch 1.13's c10d::ProcessGroup).
//
//   import optcast_torch                      # registers backend "optcast"
//   dist.init_process_group("optcast", ...)   # any init_method: env://, tcp://, file://
//
// torch hands the backend its c10d::Store (prefixed per group); the ranks bootstrap
// through it (store_adapter: optcast's kv_store interface over torch's), and torch's
// timeout becomes the collectives' deadline.
//
// Threading: the communicator runs on an io_context of its own, driven by one thread of
// the process group's; Python's thread only enqueues. Collectives run one at a time in
// the order they were called, as torch requires of every backend (ranks must call them
// in the same order); point-to-point sends and receives start at once, in call order,
// so that a receive posted before a send on both sides does not wait behind it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <optcast/net/kv_store.hpp>
#include <optcast/optcast.hpp>

namespace asio {
class io_context;
}

namespace optcast::torch_backend {

// optcast's kv_store over torch's c10d::Store. torch's store clients are not safe for
// calls from several threads at once and their waits block the client, so every call is
// a short one under a lock and waits poll (as the file and Redis stores do).
class store_adapter final : public kv_store {
public:
  explicit store_adapter(c10::intrusive_ptr<c10d::Store> s) : store_(std::move(s)) {}
  result<void> set(const std::string& key, const std::string& value) override;
  result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  result<std::int64_t> add(const std::string& key, std::int64_t delta) override;
  result<void> wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  std::string last_error() const override;

private:
  result<bool> has(const std::vector<std::string>& keys);
  // Runs f under the lock; what torch's store throws becomes an error code.
  template <class F>
  auto guarded(F&& f) -> result<decltype(f())>;
  c10::intrusive_ptr<c10d::Store> store_;
  mutable std::mutex mu_;
  std::string last_error_;
};

// The event loop of a group's communicator and the thread that runs it, shared with the
// groups shrunk from it (their communicators are on the same fabric). The last owner
// stops it.
struct event_loop {
  event_loop();
  ~event_loop();
  event_loop(const event_loop&) = delete;
  event_loop& operator=(const event_loop&) = delete;
  std::unique_ptr<asio::io_context> io;
  std::thread thread;
};

class process_group final : public c10d::ProcessGroup {
public:
  process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout);
  // A group of `comm`, a communicator on `loop`'s fabric (a shrunk one).
  process_group(std::shared_ptr<event_loop> loop, communicator comm, std::chrono::milliseconds timeout);
  ~process_group() override;

  // After a failure (a rank died, a call failed): every surviving rank calls it, and gets
  // a group of the survivors, ranks renumbered in order (optcast::shrink), on the same
  // connections. Waits for this group's calls to end first (a broken communicator fails
  // them at once). Throws std::runtime_error with the reason.
  c10::intrusive_ptr<process_group> shrink();
  // The members' ranks in this group's job (the group that bootstrapped), in order.
  std::vector<int> members() const;

  const std::string getBackendName() const override { return "optcast"; }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // One queued call: `make` builds its task on the event loop; `done` runs there after it
  // (copies results back into non-contiguous outputs, say); the future gets `outputs`.
  struct call {
    std::function<task<result<void>>()> make;
    std::function<void()> done;
    std::vector<at::Tensor> outputs;
    c10::intrusive_ptr<c10::ivalue::Future> future;
    const char* what = "";
  };

private:
  c10::intrusive_ptr<c10d::Work> enqueue(call c);
  c10::intrusive_ptr<c10d::Work> start_now(call c);
  c10::intrusive_ptr<c10d::Work> exchange(std::vector<at::Tensor> ins, std::vector<at::Tensor> outs,
                                          std::vector<at::Tensor> results, collective_options o, const char* what);
  c10::intrusive_ptr<c10d::Work> reduce_scatter_flat(at::Tensor output, at::Tensor in,
                                                     const c10d::ReduceScatterOptions& opts, const char* what);
  void start_next();  // on the event loop
  void finish(call& c, result<void> r);
  std::optional<std::chrono::milliseconds> deadline(std::chrono::milliseconds t) const;

  std::shared_ptr<event_loop> loop_;
  std::unique_ptr<communicator> comm_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::deque<call> queue_;  // collectives waiting for the running one
  bool running_ = false;
  int outstanding_ = 0;  // calls not finished yet (queued, running, point-to-point)
};

}  // namespace optcast::torch_backend
