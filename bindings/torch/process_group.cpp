#include "process_group.hpp"

#include <atomic>
#include <cctype>
#include <complex>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <stdexcept>

#include <asio/executor_work_guard.hpp>
#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <ATen/core/ivalue.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/complex.h>

#include <pybind11/pybind11.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <optcast/asio.hpp>
#include <optcast/net/tcp.hpp>

#include "net/bootstrap/poll.hpp"

namespace optcast::torch_backend {

namespace {

using red = c10d::ReduceOp;

// --- the store -------------------------------------------------------------------------

}  // namespace

// torch's stores throw when they cannot answer: the server gone (rank 0's TCPStore), a
// file store's directory unreadable. Waits never reach them (poll_until times out
// here), so what they throw is a lost store, kept for last_error().
template <class F>
auto store_adapter::guarded(F&& f) -> result<decltype(f())> {
  std::lock_guard lock(mu_);
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      return {};
    } else {
      return f();
    }
  } catch (const std::exception& e) {
    last_error_ = e.what();
    return fail(errc::peer_lost);
  }
}

result<bool> store_adapter::has(const std::vector<std::string>& keys) {
  return guarded([&] { return store_->check(keys); });
}

result<void> store_adapter::set(const std::string& key, const std::string& value) {
  return guarded([&] { store_->set(key, std::vector<uint8_t>(value.begin(), value.end())); });
}

result<std::string> store_adapter::get(const std::string& key, std::chrono::milliseconds timeout) {
  if (auto r = detail::poll_until([&] { return has({key}); }, timeout); !r) return fail(r.error());
  return guarded([&] {
    auto v = store_->get(key);
    return std::string(v.begin(), v.end());
  });
}

result<std::int64_t> store_adapter::add(const std::string& key, std::int64_t delta) {
  return guarded([&] { return store_->add(key, delta); });
}

result<void> store_adapter::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return detail::poll_until([&] { return has(keys); }, timeout);
}

std::string store_adapter::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_.empty() ? std::string() : "torch's store: " + last_error_;
}

namespace {

// --- tensors ---------------------------------------------------------------------------

std::span<std::byte> bytes(const at::Tensor& t) {
  return {static_cast<std::byte*>(t.data_ptr()), t.nbytes()};
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "optcast: ", what, ": an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "optcast: ", what, ": tensors must be on the CPU, not ", t.device().str());
  TORCH_CHECK(t.layout() == at::kStrided, "optcast: ", what, ": sparse tensors are not supported");
}

at::Tensor one(std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "optcast: ", what, ": takes one tensor per process, got ", ts.size());
  check_tensor(ts[0], what);
  return ts[0];
}

// All of `ts` in one contiguous 1-D tensor of their dtype (a copy).
at::Tensor flat(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> parts;
  parts.reserve(ts.size());
  for (const auto& t : ts) parts.push_back(t.reshape(-1));
  return at::cat(parts);
}

// Copies consecutive pieces of the 1-D `from` into `to`, each its own numel.
void unflat(const at::Tensor& from, const std::vector<at::Tensor>& to) {
  std::int64_t off = 0;
  for (const auto& t : to) {
    t.copy_(from.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

// `reduce` on elements of type T, or nothing where torch does not define it.
template <class T>
std::optional<detail::erased_reduction> typed_op(red::RedOpType op) {
  if constexpr (std::is_arithmetic_v<T>) {
    switch (op) {
      case red::SUM: case red::AVG: return reduction<T>(ops::sum).erased();
      case red::PRODUCT: return reduction<T>(ops::product).erased();
      case red::MIN: return reduction<T>(ops::min).erased();
      case red::MAX: return reduction<T>(ops::max).erased();
      default: break;
    }
    if constexpr (std::is_integral_v<T>) {
      switch (op) {
        case red::BAND: return reduction<T>(ops::band).erased();
        case red::BOR: return reduction<T>(ops::bor).erased();
        case red::BXOR: return reduction<T>(ops::bxor).erased();
        default: break;
      }
    }
    return std::nullopt;
  } else {
    // float16, bfloat16 (computed in float, rounded once per pair, as torch's CPU kernels
    // do) and complex numbers (no order, so no min or max).
    constexpr bool is_complex = !std::is_same_v<T, c10::Half> && !std::is_same_v<T, c10::BFloat16>;
    switch (op) {
      case red::SUM: case red::AVG:
        return reduction<T>::custom([](const T& a, const T& b) { return static_cast<T>(a + b); }, commutative).erased();
      case red::PRODUCT:
        return reduction<T>::custom([](const T& a, const T& b) { return static_cast<T>(a * b); }, commutative).erased();
      default: break;
    }
    if constexpr (!is_complex) {
      switch (op) {
        case red::MIN: return reduction<T>::custom([](const T& a, const T& b) { return b < a ? b : a; }, commutative).erased();
        case red::MAX: return reduction<T>::custom([](const T& a, const T& b) { return a < b ? b : a; }, commutative).erased();
        default: break;
      }
    }
    return std::nullopt;
  }
}

const char* op_name(red::RedOpType op) {
  switch (op) {
    case red::SUM: return "SUM";
    case red::AVG: return "AVG";
    case red::PRODUCT: return "PRODUCT";
    case red::MIN: return "MIN";
    case red::MAX: return "MAX";
    case red::BAND: return "BAND";
    case red::BOR: return "BOR";
    case red::BXOR: return "BXOR";
    case red::PREMUL_SUM: return "PREMUL_SUM";
    default: return "an unknown operator";
  }
}

// The operator for `dtype`; throws (a Python RuntimeError) where torch does not define it.
detail::erased_reduction reduction_for(const red& rop, at::ScalarType dtype) {
  const auto op = rop.op_;
  std::optional<detail::erased_reduction> r;
  switch (dtype) {
    case at::kByte: r = typed_op<std::uint8_t>(op); break;
    case at::kChar: r = typed_op<std::int8_t>(op); break;
    case at::kShort: r = typed_op<std::int16_t>(op); break;
    case at::kInt: r = typed_op<std::int32_t>(op); break;
    case at::kLong: r = typed_op<std::int64_t>(op); break;
    case at::kBool: r = typed_op<bool>(op); break;
    case at::kFloat: r = typed_op<float>(op); break;
    case at::kDouble: r = typed_op<double>(op); break;
    case at::kHalf: r = typed_op<c10::Half>(op); break;
    case at::kBFloat16: r = typed_op<c10::BFloat16>(op); break;
    case at::kComplexFloat: r = typed_op<c10::complex<float>>(op); break;
    case at::kComplexDouble: r = typed_op<c10::complex<double>>(op); break;
    default: TORCH_CHECK(false, "optcast: reductions of ", at::toString(dtype), " tensors are not supported");
  }
  const bool avg_ok = at::isFloatingType(dtype) || at::isComplexType(dtype);
  TORCH_CHECK(r && (op != red::AVG || avg_ok), "optcast: ReduceOp.", op_name(op), " is not defined for ",
              at::toString(dtype), " tensors");
  return *r;
}

// --- calls that need more than one of optcast's ----------------------------------------

// torch's all-to-all with uneven splits: every block padded to the largest any rank sends
// or receives (an allreduce of one number finds it), then optcast's all-to-all;
// `size_buffers(block)` makes *in and *out p blocks of `block` bytes each.
task<result<void>> padded_alltoall(communicator& c, std::shared_ptr<at::Tensor> in, std::shared_ptr<at::Tensor> out,
                                   std::int64_t mine, std::function<void(std::int64_t)> size_buffers,
                                   collective_options o) {
  std::int64_t block = mine;
  if (auto r = co_await allreduce<std::int64_t>(c, std::span(&block, 1), std::span(&block, 1), ops::max, o); !r)
    co_return r;
  size_buffers(block);
  co_return co_await alltoall<std::byte>(c, bytes(*in), bytes(*out), o);
}

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
    : ProcessGroup(rank, size), io_(std::make_unique<asio::io_context>()), timeout_(timeout) {
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
  loop_ = std::thread([io = io_.get()] {
    auto guard = asio::make_work_guard(*io);
    io->run();
  });
  try {
    comm_ = std::make_unique<communicator>(make_communicator(tcp::connect(*io_, cfg), cfg, settings_for(store)));
  } catch (...) {
    io_->stop();
    loop_.join();
    throw;
  }
  comm_->options().timeout = timeout;
}

process_group::~process_group() {
  // Tensors the loop thread lets go of may need the GIL (their Python objects): the
  // thread that drops the last reference (Python's, in destroy_process_group) must not
  // hold it while it waits for the loop.
  std::optional<pybind11::gil_scoped_release> nogil;
  if (Py_IsInitialized() && PyGILState_Check()) nogil.emplace();
  const bool on_loop = loop_.get_id() == std::this_thread::get_id();
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
    (void)io_.release();
    loop_.detach();
    return;
  }
  comm_.reset();  // says goodbye: the fabric is closed on its strand while the loop runs
  io_->stop();
  loop_.join();
}

std::optional<std::chrono::milliseconds> process_group::deadline(std::chrono::milliseconds t) const {
  return t == c10d::kUnsetTimeout ? timeout_ : t;
}

c10::intrusive_ptr<c10d::Work> process_group::enqueue(call c) {
  c.future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  auto work = c10d::Work::create_from_future(c.future);
  bool start = false;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(c));
    start = !std::exchange(running_, true);
    ++outstanding_;
  }
  if (start) asio::post(*io_, [this] { start_next(); });
  return work;
}

c10::intrusive_ptr<c10d::Work> process_group::start_now(call c) {
  if (!c.future) c.future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  auto work = c10d::Work::create_from_future(c.future);
  {
    std::lock_guard lock(mu_);
    ++outstanding_;
  }
  asio::post(*io_, [this, c = std::move(c)]() mutable {
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
  return enqueue({[this, b, op, o] { return detail::allreduce_bytes(*comm_, bytes(b), bytes(b), op, o); },
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
  return enqueue({[this, b, op, o] { return detail::allreduce_bytes(*comm_, bytes(b), bytes(b), op, o); },
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
  return enqueue({[this, in, out, op, root, o] { return detail::reduce_bytes(*comm_, bytes(in), bytes(out), op, root, o); },
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
  std::vector<std::int64_t> counts(static_cast<std::size_t>(size_), output.numel());
  collective_options o{.timeout = deadline(opts.timeout)};
  const bool avg = opts.reduceOp.op_ == red::AVG;
  const int p = size_;
  return enqueue({[this, in, out, counts, op, o] {
                    return detail::reduce_scatter_bytes(*comm_, bytes(in), bytes(out), counts, op, true, o);
                  },
                  [output, out, avg, p] {
                    if (avg) out.div_(p);
                    if (!output.is_same(out)) output.copy_(out);
                  },
                  {output}, {}, what});
}

namespace {

// Splits of `n` rows among p ranks: given, or even (then n must divide).
std::vector<std::int64_t> splits_of(const std::vector<int64_t>& given, std::int64_t rows, int p, const char* which) {
  if (given.empty()) {
    TORCH_CHECK(rows % p == 0, "optcast: alltoall_base: the ", which, " tensor's ", rows,
                " rows do not split evenly among ", p, " ranks; pass split sizes");
    return std::vector<std::int64_t>(static_cast<std::size_t>(p), rows / p);
  }
  TORCH_CHECK(static_cast<int>(given.size()) == p, "optcast: alltoall_base: ", given.size(), " ", which,
              " split sizes for a group of ", p);
  std::int64_t sum = 0;
  for (auto s : given) {
    TORCH_CHECK(s >= 0, "optcast: alltoall_base: a negative split size");
    sum += s;
  }
  TORCH_CHECK(sum == rows, "optcast: alltoall_base: the ", which, " split sizes add up to ", sum, ", the tensor has ",
              rows, " rows");
  return {given.begin(), given.end()};
}

}  // namespace

// The all-to-all of byte pieces: piece j of `ins` to rank j, piece j of `outs` from rank
// j, each padded to the largest piece of any rank (one small allreduce finds it).
c10::intrusive_ptr<c10d::Work> process_group::exchange(std::vector<at::Tensor> ins, std::vector<at::Tensor> outs,
                                                       std::vector<at::Tensor> results, collective_options o,
                                                       const char* what) {
  const int p = size_;
  std::int64_t mine = 0;
  for (int j = 0; j < p; ++j)
    mine = std::max({mine, static_cast<std::int64_t>(ins[j].nbytes()), static_cast<std::int64_t>(outs[j].nbytes())});
  auto in = std::make_shared<at::Tensor>(), out = std::make_shared<at::Tensor>();
  auto block = std::make_shared<std::int64_t>(0);
  // Runs on the event loop once the block size is known.
  auto size_buffers = [ins, in, out, block, p](std::int64_t b) {
    *block = b;
    *in = at::zeros({p * b}, at::kByte);
    *out = at::empty({p * b}, at::kByte);
    for (int j = 0; j < p; ++j)
      if (ins[j].nbytes() > 0)
        in->narrow(0, j * b, static_cast<std::int64_t>(ins[j].nbytes()))
            .copy_(ins[j].contiguous().view({-1}).view(at::kByte));
  };
  return enqueue({[this, in, out, mine, size_buffers, o] { return padded_alltoall(*comm_, in, out, mine, size_buffers, o); },
                  [outs, out, block, p] {
                    for (int j = 0; j < p; ++j)
                      if (outs[j].nbytes() > 0)
                        outs[j].copy_(out->narrow(0, j * *block, static_cast<std::int64_t>(outs[j].nbytes()))
                                          .view(outs[j].scalar_type())
                                          .view(outs[j].sizes()));
                  },
                  std::move(results), {}, what});
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& output_splits,
                                                            std::vector<int64_t>& input_splits,
                                                            const c10d::AllToAllOptions& opts) {
  check_tensor(output, "alltoall_base");
  check_tensor(input, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "optcast: alltoall_base: input and output dtypes differ");
  collective_options o{.timeout = deadline(opts.timeout)};
  const std::int64_t in_rows = input.dim() ? input.size(0) : 1, out_rows = output.dim() ? output.size(0) : 1;
  const auto in_split = splits_of(input_splits, in_rows, size_, "input");
  const auto out_split = splits_of(output_splits, out_rows, size_, "output");
  if (input_splits.empty() && output_splits.empty()) {
    TORCH_CHECK(input.numel() == output.numel(), "optcast: alltoall_base: input and output sizes differ");
    at::Tensor in = input.contiguous(), out = output.contiguous();
    return enqueue({[this, in, out, o] { return optcast::alltoall<std::byte>(*comm_, bytes(in), bytes(out), o); },
                    [output, out] { if (!output.is_same(out)) output.copy_(out); }, {output}, {}, "alltoall_base"});
  }
  std::vector<at::Tensor> ins, outs;
  std::int64_t ioff = 0, ooff = 0;
  at::Tensor in = input.contiguous();
  for (int j = 0; j < size_; ++j) {
    ins.push_back(in.narrow(0, ioff, in_split[j]));
    outs.push_back(output.narrow(0, ooff, out_split[j]));
    ioff += in_split[j];
    ooff += out_split[j];
  }
  return exchange(std::move(ins), std::move(outs), {output}, o, "alltoall_base");
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "optcast: alltoall: takes ", size_, " input and ", size_, " output tensors");
  for (int j = 0; j < size_; ++j) {
    check_tensor(inputs[j], "alltoall");
    check_tensor(outputs[j], "alltoall");
    TORCH_CHECK(inputs[j].scalar_type() == inputs[0].scalar_type() && outputs[j].scalar_type() == inputs[0].scalar_type(),
                "optcast: alltoall: tensors of different dtypes");
  }
  return exchange(inputs, outputs, outputs, {.timeout = deadline(opts.timeout)}, "alltoall");
}

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

c10::intrusive_ptr<c10d::Work> process_group::barrier(const c10d::BarrierOptions& opts) {
  // Every rank's call must reach every other: an allreduce of one byte.
  at::Tensor b = at::zeros({1}, at::kByte);
  auto op = reduction_for(red(red::MAX), at::kByte);
  collective_options o{.timeout = deadline(opts.timeout)};
  return enqueue({[this, b, op, o] { return detail::allreduce_bytes(*comm_, bytes(b), bytes(b), op, o); }, nullptr, {},
                  {}, "barrier"});
}

}  // namespace optcast::torch_backend
