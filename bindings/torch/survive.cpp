// Going on after a failure (optcast/survive.hpp) from torch: a process group of the
// survivors, on the same loop and connections.
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>

#include <asio/io_context.hpp>
#include <asio/post.hpp>

#include <optcast/asio.hpp>

#include "process_group.hpp"

namespace optcast::torch_backend {

c10::intrusive_ptr<process_group> process_group::shrink() {
  {
    // The calls before it (DDP's buckets, say) end first: on a broken communicator they
    // fail at once; a call still waiting on live ranks waits out its deadline.
    std::unique_lock lock(mu_);
    if (!idle_.wait_for(lock, timeout_ + std::chrono::seconds(1), [&] { return outstanding_ == 0; }))
      throw std::runtime_error("optcast: shrink: this group's calls are still unfinished after its timeout (" +
                               std::to_string(timeout_.count()) + " ms)");
  }
  struct outcome {
    std::promise<void> done;
    std::error_code ec;
    std::optional<communicator> comm;
  };
  auto o = std::make_shared<outcome>();
  auto finished = o->done.get_future();
  asio::post(*loop_->io, [this, o] {
    async_shrink(*comm_, [o](std::error_code ec, std::optional<communicator> c) {
      o->ec = ec;
      o->comm = std::move(c);
      o->done.set_value();
    });
  });
  // The agreement waits for every member not found dead, up to the deadline: twice that
  // here, then give up on it (it holds the outcome, not this frame).
  if (finished.wait_for(2 * timeout_ + std::chrono::seconds(1)) != std::future_status::ready)
    throw std::runtime_error("optcast: shrink did not end within twice the group's timeout");
  if (o->ec || !o->comm) throw std::runtime_error("optcast: shrink failed: " + describe(o->ec, comm_->last_error()));
  return c10::make_intrusive<process_group>(loop_, std::move(*o->comm), timeout_);
}

std::vector<int> process_group::members() const {
  std::vector<int> m;
  for (int r = 0; r < comm_->size(); ++r) m.push_back(job_rank(*comm_, r));
  return m;
}

}  // namespace optcast::torch_backend
