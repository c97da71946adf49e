#include "process_group.hpp"

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <stdexcept>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <ATen/core/ivalue.h>

#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <optcast/asio.hpp>
#include <optcast/net/tcp.hpp>

#include "tensors.hpp"
#include "work.hpp"

namespace optcast::torch_backend {

namespace {

// torch names every group ("0" the default one, then "1", "2", ... in the order all
// processes create them) and hands the backend a PrefixStore with that name, the only
// place a backend learns it; PrefixStore keeps it protected.
struct group_name_of : c10d::PrefixStore {
  static std::optional<std::string> get(const c10::intrusive_ptr<c10d::Store>& s) {
    const auto* p = dynamic_cast<const c10d::PrefixStore*>(s.get());
    if (!p) return std::nullopt;
    return p->*(&group_name_of::prefix_);
  }
};

// OPTCAST_TRACE=DIR: the default group traces into DIR (rank<r>.json, its ranks the
// global ones), every other group into DIR/group-<name>, so that each group's files can
// be merged as one job (`optcast trace merge DIR/group-1`) and none overwrites another's.
collective_settings settings_for(const c10::intrusive_ptr<c10d::Store>& store) {
  auto s = collective_settings::from_env();
  if (s.trace.empty()) return s;
  const auto name = group_name_of::get(store);
  if (name && *name == "0") return s;
  std::string dir = "group-";
  for (char ch : name ? *name : std::string("unnamed")) dir += std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' ? ch : '_';
  s.trace = (std::filesystem::path(s.trace) / dir).string();
  return s;
}

}  // namespace

// --- the process group -----------------------------------------------------------------

process_group::process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                             std::chrono::milliseconds timeout)
    : ProcessGroup(rank, size), loop_(std::make_shared<event_loop>()), timeout_(timeout) {
  job_config cfg;
  cfg.rank = rank;
  cfg.size = size;
  cfg.kv = std::make_shared<store_adapter>(store);
  cfg.launcher = "torch.distributed";
  cfg.timeout = timeout;
  cfg.bootstrap_timeout = timeout;
  // Where to listen, the secret, k ports: as job_config::from_env reads them.
  cfg.read_rank_env([](const char* name) -> const char* { return std::getenv(name); });
  // Without OPTCAST_SECRET(_FILE), the data connections prove a secret the group's ranks
  // share through torch's store (as trusted as the job: whoever holds it can join anyway).
  if (cfg.secret.empty()) {
    const std::string key = "optcast-torch/secret";
    if (rank == 0) {
      std::random_device rd;
      std::string secret(32, '\0');
      for (auto& ch : secret) ch = "0123456789abcdef"[rd() & 15];
      store->set(key, std::vector<uint8_t>(secret.begin(), secret.end()));
      cfg.secret = secret;
    } else {
      store->wait({key}, timeout);
      auto v = store->get(key);
      cfg.secret.assign(v.begin(), v.end());
    }
  }
  comm_ = std::make_unique<communicator>(make_communicator(tcp::connect(*loop_->io, cfg), cfg, settings_for(store)));
  comm_->options().timeout = timeout;
}

process_group::process_group(std::shared_ptr<event_loop> loop, communicator comm, std::chrono::milliseconds timeout)
    : ProcessGroup(comm.rank(), comm.size()), loop_(std::move(loop)), comm_(std::make_unique<communicator>(std::move(comm))), timeout_(timeout) {
  comm_->options().timeout = timeout;
}

event_loop::event_loop() : io(std::make_unique<asio::io_context>()) {
  thread = std::thread([io = io.get()] {
    auto guard = asio::make_work_guard(*io);
    io->run();
  });
}

event_loop::~event_loop() {
  io->stop();
  if (thread.get_id() == std::this_thread::get_id()) {  // the last group went from a call's end on the loop
    thread.detach();
    (void)io.release();
    return;
  }
  thread.join();
}

process_group::~process_group() {
  // Tensors the loop thread lets go of may need the GIL (their Python objects): the
  // thread that drops the last reference (Python's, in destroy_process_group) must not
  // hold it while it waits for the loop.
  std::optional<pybind11::gil_scoped_release> nogil;
  if (Py_IsInitialized() && PyGILState_Check()) nogil.emplace();
  const bool on_loop = loop_->thread.get_id() == std::this_thread::get_id();
  bool drained = true;
  if (!on_loop) {
    std::unique_lock lock(mu_);
    drained = idle_.wait_for(lock, timeout_, [&] { return outstanding_ == 0; });
  }
  if (!drained || on_loop) {
    // Calls still running refer to this group and its communicator: both stay, with the
    // loop, for the rest of the process, rather than be freed under them.
    if (!drained) log(log_level::warn, "a torch process group was destroyed with calls still unfinished after its timeout; they keep it");
    (void)comm_.release();
    (void)new std::shared_ptr<event_loop>(std::move(loop_));
    return;
  }
  comm_.reset();  // says goodbye (the last communicator of the fabric): closed on its strand while the loop runs
  loop_.reset();
}

std::optional<std::chrono::milliseconds> process_group::deadline(std::chrono::milliseconds t) const {
  return t == c10d::kUnsetTimeout ? timeout_ : t;
}

c10::intrusive_ptr<c10d::Work> process_group::enqueue(call c) {
  c.future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  auto work = c10::make_intrusive<future_work>(c.future);
  bool start = false;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(c));
    start = !std::exchange(running_, true);
    ++outstanding_;
  }
  if (start) asio::post(*loop_->io, [this] { start_next(); });
  return work;
}

c10::intrusive_ptr<c10d::Work> process_group::start_now(call c) {
  if (!c.future) c.future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  auto work = c10::make_intrusive<future_work>(c.future);
  {
    std::lock_guard lock(mu_);
    ++outstanding_;
  }
  asio::post(*loop_->io, [this, c = std::move(c)]() mutable {
    auto t = c.make();
    async_run(*comm_, std::move(t), [this, c = std::move(c)](std::error_code ec) mutable {
      finish(c, ec ? result<void>(fail(ec)) : result<void>());
    });
  });
  return work;
}

void process_group::start_next() {
  call c;
  {
    std::lock_guard lock(mu_);
    if (queue_.empty()) {
      running_ = false;
      return;
    }
    c = std::move(queue_.front());
    queue_.pop_front();
  }
  auto t = c.make();
  async_run(*comm_, std::move(t), [this, c = std::move(c)](std::error_code ec) mutable {
    finish(c, ec ? result<void>(fail(ec)) : result<void>());
    start_next();
  });
}

void process_group::finish(call& c, result<void> r) {
  if (r) {
    try {
      if (c.done) c.done();
      c.future->markCompleted(c10::IValue(c.outputs));
    } catch (...) {
      c.future->setError(std::current_exception());
    }
  } else {
    c.future->setError(std::make_exception_ptr(std::runtime_error(
        std::string("optcast: ") + c.what + " failed: " + describe(r.error(), comm_->failure_detail()))));
  }
  // The call's tensors go now, on this thread, before the group may be destroyed.
  c = call{};
  std::lock_guard lock(mu_);
  if (--outstanding_ == 0) idle_.notify_all();
}

c10::intrusive_ptr<c10d::Work> process_group::broadcast(std::vector<at::Tensor>& tensors,
                                                        const c10d::BroadcastOptions& opts) {
  at::Tensor t = one(tensors, "broadcast");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "optcast: broadcast: root ", opts.rootRank,
              " is not a rank of this group of ", size_);
  at::Tensor b = t.contiguous();
  collective_options o{.timeout = deadline(opts.timeout)};
  const int root = static_cast<int>(opts.rootRank);
  return enqueue({[this, b, root, o] { return optcast::broadcast(*comm_, bytes(b), root, o); },
                  [t, b] { if (!t.is_same(b)) t.copy_(b); }, {t}, {}, "broadcast"});
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::AllreduceOptions& opts) {
  at::Tensor t = one(tensors, "allreduce");
  auto op = reduction_for(opts.reduceOp, t.scalar_type());
  at::Tensor b = t.contiguous();
  collective_options o{.timeout = deadline(opts.timeout)};
  const bool avg = opts.reduceOp.op_ == red::AVG;
  const int p = size_;
  return enqueue({[this, b, op, o] { return erased::allreduce(*comm_, bytes(b), bytes(b), op, o); },
                  [t, b, avg, p] {
                    if (avg) b.div_(p);
                    if (!t.is_same(b)) t.copy_(b);
                  },
                  {t}, {}, "allreduce"});
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                                  const c10d::AllreduceCoalescedOptions& opts) {
  TORCH_CHECK(!tensors.empty(), "optcast: allreduce_coalesced: no tensors");
  for (const auto& t : tensors) {
    check_tensor(t, "allreduce_coalesced");
    TORCH_CHECK(t.scalar_type() == tensors[0].scalar_type(), "optcast: allreduce_coalesced: tensors of ",
                at::toString(tensors[0].scalar_type()), " and ", at::toString(t.scalar_type()), " in one call");
  }
  auto op = reduction_for(opts.reduceOp, tensors[0].scalar_type());
  at::Tensor b = flat(tensors);
  collective_options o{.timeout = deadline(opts.timeout)};
  const bool avg = opts.reduceOp.op_ == red::AVG;
  const int p = size_;
  return enqueue({[this, b, op, o] { return erased::allreduce(*comm_, bytes(b), bytes(b), op, o); },
                  [tensors, b, avg, p] {
                    if (avg) b.div_(p);
                    unflat(b, tensors);
                  },
                  tensors, {}, "allreduce_coalesced"});
}

c10::intrusive_ptr<c10d::Work> process_group::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  at::Tensor t = one(tensors, "reduce");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "optcast: reduce: root ", opts.rootRank,
              " is not a rank of this group of ", size_);
  auto op = reduction_for(opts.reduceOp, t.scalar_type());
  at::Tensor in = t.contiguous();
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor out = rank_ == root ? at::empty_like(in) : at::empty({0}, in.options());
  collective_options o{.timeout = deadline(opts.timeout)};
  const bool avg = opts.reduceOp.op_ == red::AVG;
  const int p = size_;
  const bool at_root = rank_ == root;
  return enqueue({[this, in, out, op, root, o] { return erased::reduce(*comm_, bytes(in), bytes(out), op, root, o); },
                  [t, out, avg, p, at_root] {
                    if (!at_root) return;
                    if (avg) out.div_(p);
                    t.copy_(out);
                  },
                  {t}, {}, "reduce"});
}

c10::intrusive_ptr<c10d::Work> process_group::allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                                        std::vector<at::Tensor>& inputs,
                                                        const c10d::AllgatherOptions& opts) {
  at::Tensor t = one(inputs, "allgather");
  TORCH_CHECK(outputs.size() == 1, "optcast: allgather: takes one output list per process, got ", outputs.size());
  auto outs = outputs[0];
  TORCH_CHECK(static_cast<int>(outs.size()) == size_, "optcast: allgather: the output list has ", outs.size(),
              " tensors, the group ", size_, " ranks");
  for (const auto& o : outs) {
    check_tensor(o, "allgather");
    TORCH_CHECK(o.numel() == t.numel() && o.scalar_type() == t.scalar_type(),
                "optcast: allgather: every output tensor must have the input's size and dtype");
  }
  at::Tensor in = t.contiguous();
  at::Tensor all = at::empty({size_ * t.numel()}, t.options());
  collective_options o{.timeout = deadline(opts.timeout)};
  return enqueue({[this, in, all, o] { return optcast::allgather<std::byte>(*comm_, bytes(in), bytes(all), o); },
                  [outs, all] { unflat(all, outs); }, outs, {}, "allgather"});
}

c10::intrusive_ptr<c10d::Work> process_group::_allgather_base(at::Tensor& output, at::Tensor& input,
                                                              const c10d::AllgatherOptions& opts) {
  check_tensor(output, "_allgather_base");
  check_tensor(input, "_allgather_base");
  TORCH_CHECK(output.numel() == size_ * input.numel() && output.scalar_type() == input.scalar_type(),
              "optcast: _allgather_base: the output must hold the group's ", size_, " inputs of the input's dtype");
  at::Tensor in = input.contiguous(), out = output.contiguous();
  collective_options o{.timeout = deadline(opts.timeout)};
  return enqueue({[this, in, out, o] { return optcast::allgather<std::byte>(*comm_, bytes(in), bytes(out), o); },
                  [output, out] { if (!output.is_same(out)) output.copy_(out); }, {output}, {}, "_allgather_base"});
}

c10::intrusive_ptr<c10d::Work> process_group::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                                  std::vector<at::Tensor>& inputs,
                                                                  const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == size_, "optcast: allgather_coalesced: ", outputs.size(),
              " output lists for a group of ", size_);
  std::int64_t in_bytes = 0;
  std::vector<at::Tensor> in_bytes_views;
  for (const auto& t : inputs) {
    check_tensor(t, "allgather_coalesced");
    in_bytes += static_cast<std::int64_t>(t.nbytes());
  }
  std::vector<at::Tensor> flat_outs;
  for (const auto& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "optcast: allgather_coalesced: every output list must match the inputs");
    for (std::size_t i = 0; i < list.size(); ++i) {
      check_tensor(list[i], "allgather_coalesced");
      TORCH_CHECK(list[i].numel() == inputs[i].numel() && list[i].scalar_type() == inputs[i].scalar_type(),
                  "optcast: allgather_coalesced: output ", i, " differs from input ", i, " in size or dtype");
      flat_outs.push_back(list[i]);
    }
  }
  // Moved as bytes: the inputs may be of different dtypes.
  std::vector<at::Tensor> in_views;
  for (const auto& t : inputs) in_views.push_back(t.contiguous().view({-1}).view(at::kByte));
  at::Tensor in = in_views.empty() ? at::empty({0}, at::kByte) : at::cat(in_views);
  at::Tensor all = at::empty({size_ * in_bytes}, at::kByte);
  collective_options o{.timeout = deadline(opts.timeout)};
  return enqueue({[this, in, all, o] { return optcast::allgather<std::byte>(*comm_, bytes(in), bytes(all), o); },
                  [flat_outs, all] {
                    std::int64_t off = 0;
                    for (const auto& t : flat_outs) {
                      const auto n = static_cast<std::int64_t>(t.nbytes());
                      t.copy_(all.narrow(0, off, n).view(t.scalar_type()).view(t.sizes()));
                      off += n;
                    }
                  },
                  flat_outs, {}, "allgather_coalesced"});
}

c10::intrusive_ptr<c10d::Work> process_group::gather(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  at::Tensor t = one(inputs, "gather");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "optcast: gather: root ", opts.rootRank,
              " is not a rank of this group of ", size_);
  const int root = static_cast<int>(opts.rootRank);
  std::vector<at::Tensor> outs;
  if (rank_ == root) {
    TORCH_CHECK(outputs.size() == 1 && static_cast<int>(outputs[0].size()) == size_,
                "optcast: gather: the root takes one list of ", size_, " output tensors");
    outs = outputs[0];
    for (const auto& o : outs) {
      check_tensor(o, "gather");
      TORCH_CHECK(o.numel() == t.numel() && o.scalar_type() == t.scalar_type(),
                  "optcast: gather: every output tensor must have the input's size and dtype");
    }
  } else {
    TORCH_CHECK(outputs.empty() || (outputs.size() == 1 && outputs[0].empty()),
                "optcast: gather: only the root passes output tensors");
  }
  at::Tensor in = t.contiguous();
  at::Tensor all = at::empty({rank_ == root ? size_ * t.numel() : 0}, t.options());
  collective_options o{.timeout = deadline(opts.timeout)};
  return enqueue({[this, in, all, root, o] { return optcast::gather<std::byte>(*comm_, bytes(in), bytes(all), root, o); },
                  [outs, all] { if (!outs.empty()) unflat(all, outs); }, outs, {}, "gather"});
}

c10::intrusive_ptr<c10d::Work> process_group::scatter(std::vector<at::Tensor>& outputs,
                                                      std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  at::Tensor t = one(outputs, "scatter");
  TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "optcast: scatter: root ", opts.rootRank,
              " is not a rank of this group of ", size_);
  const int root = static_cast<int>(opts.rootRank);
  at::Tensor all;
  if (rank_ == root) {
    TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
                "optcast: scatter: the root takes one list of ", size_, " input tensors");
    for (const auto& i : inputs[0]) {
      check_tensor(i, "scatter");
      TORCH_CHECK(i.numel() == t.numel() && i.scalar_type() == t.scalar_type(),
                  "optcast: scatter: every input tensor must have the output's size and dtype");
    }
    all = flat(inputs[0]);
  } else {
    TORCH_CHECK(inputs.empty() || (inputs.size() == 1 && inputs[0].empty()),
                "optcast: scatter: only the root passes input tensors");
    all = at::empty({0}, t.options());
  }
  at::Tensor out = t.contiguous();
  collective_options o{.timeout = deadline(opts.timeout)};
  return enqueue({[this, all, out, root, o] { return optcast::scatter<std::byte>(*comm_, bytes(all), bytes(out), root, o); },
                  [t, out] { if (!t.is_same(out)) t.copy_(out); }, {t}, {}, "scatter"});
}

c10::intrusive_ptr<c10d::Work> process_group::reduce_scatter(std::vector<at::Tensor>& outputs,
                                                             std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  at::Tensor t = one(outputs, "reduce_scatter");
  TORCH_CHECK(inputs.size() == 1 && static_cast<int>(inputs[0].size()) == size_,
              "optcast: reduce_scatter: takes one list of ", size_, " input tensors");
  for (const auto& i : inputs[0]) {
    check_tensor(i, "reduce_scatter");
    TORCH_CHECK(i.numel() == t.numel() && i.scalar_type() == t.scalar_type(),
                "optcast: reduce_scatter: every input tensor must have the output's size and dtype");
  }
  return reduce_scatter_flat(t, flat(inputs[0]), opts, "reduce_scatter");
}

c10::intrusive_ptr<c10d::Work> process_group::_reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                                   const c10d::ReduceScatterOptions& opts) {
  check_tensor(output, "_reduce_scatter_base");
  check_tensor(input, "_reduce_scatter_base");
  TORCH_CHECK(input.numel() == size_ * output.numel() && output.scalar_type() == input.scalar_type(),
              "optcast: _reduce_scatter_base: the input must hold ", size_, " outputs of the output's dtype");
  return reduce_scatter_flat(output, input.contiguous(), opts, "_reduce_scatter_base");
}

// `in` holds p blocks of output's size; block j's reduction over the ranks lands on rank j.
c10::intrusive_ptr<c10d::Work> process_group::reduce_scatter_flat(at::Tensor output, at::Tensor in,
                                                                  const c10d::ReduceScatterOptions& opts,
                                                                  const char* what) {
  auto op = reduction_for(opts.reduceOp, output.scalar_type());
  at::Tensor out = output.contiguous();
  collective_options o{.timeout = deadline(opts.timeout)};
  const bool avg = opts.reduceOp.op_ == red::AVG;
  const int p = size_;
  return enqueue({[this, in, out, op, o] {
                    return erased::reduce_scatter_block(*comm_, bytes(in), bytes(out), op, o);
                  },
                  [output, out, avg, p] {
                    if (avg) out.div_(p);
                    if (!output.is_same(out)) output.copy_(out);
                  },
                  {output}, {}, what});
}

c10::intrusive_ptr<c10d::Work> process_group::barrier(const c10d::BarrierOptions& opts) {
  collective_options o{.timeout = deadline(opts.timeout)};
  return enqueue({[this, o] { return optcast::barrier(*comm_, o); }, nullptr, {}, {}, "barrier"});
}

}  // namespace optcast::torch_backend
