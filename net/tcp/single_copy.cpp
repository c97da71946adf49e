// Single copy between ranks of one host. Over loopback TCP a message is copied twice (into
// the kernel and out of it) in segments, each with its system calls; here the receiver
// copies it once, straight from the sender's memory into its posted receive, with
// process_vm_readv (Linux's cross-memory attach, as Open MPI's vader uses). The TCP
// connection still carries everything else: small messages, the references
// (frame_ref: the message's address and a token), and, back the other way, the receipts
// (frame_done) that end the sends; so order, matching, signatures, goodbyes and failures
// work as for any frame.
//
// Whether the receiver can read the sender (same kernel and process namespace, ptrace
// permission, no seccomp filter in the way) is proven once per connection: the sender's
// hello names 8 bytes of its memory and what they hold, and the acceptor reads them. Only
// ranks the job's layout puts on one host offer it (emulated hosts share a kernel but
// must talk through their links), and only in jobs with a secret unless the user asks
// (OPTCAST_SHM=1): a peer proves who it is before another reads memory it names.
#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <random>
#include <sstream>
#include <string>

#include "tcp_fabric.hpp"

namespace optcast::tcp::impl {

namespace {

// What this process's probe holds: fixed for its life, random so that another
// process's memory does not hold it by chance.
const std::uint64_t& probe_cookie() {
  static const std::uint64_t cookie = [] {
    std::random_device rd;
    return (std::uint64_t{rd()} << 32 | rd()) | 1;
  }();
  return cookie;
}

// Copies len bytes at `from` in process pid to `to`: 0, or the errno of the failure.
int read_peer(std::uint32_t pid, std::uint64_t from, std::byte* to, std::uint64_t len) {
  std::uint64_t done = 0;
  while (done < len) {
    iovec local{to + done, static_cast<std::size_t>(len - done)};
    iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(from + done)), static_cast<std::size_t>(len - done)};
    const ssize_t n = ::process_vm_readv(static_cast<pid_t>(pid), &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EFAULT;  // a range that ends in unmapped memory reads short
    done += static_cast<std::uint64_t>(n);
  }
  return 0;
}

// Whether process pid is gone or on its way out. Its memory is torn down before it is
// gone, and a read meanwhile fails with EFAULT, not ESRCH: a peer dying mid-send, not one
// that named memory it does not have. PF_EXITING (0x4) is set as exit begins.
bool exiting(std::uint32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  const auto name_end = line.rfind(')');  // the name may hold spaces and parentheses
  if (name_end == std::string::npos) return false;
  std::istringstream fields(line.substr(name_end + 1));
  std::string state;
  long long skipped = 0;
  unsigned long long flags = 0;
  fields >> state >> skipped >> skipped >> skipped >> skipped >> skipped >> flags;  // ppid pgrp session tty tpgid
  if (!fields) return false;
  return state == "Z" || state == "X" || (flags & 0x4) != 0;
}

}  // namespace

bool tcp_fabric::offers_single_copy(int p) const noexcept {
  const auto& host = layout_.host_of;
  return single_copy_allowed() && host.size() == peers_.size() && host[static_cast<std::size_t>(p)] == host[static_cast<std::size_t>(cfg_.rank)];
}

void tcp_fabric::offer_single_copy(hello& h, int p) {
  if (!offers_single_copy(p)) return;
  // Where Yama restricts ptrace to descendants (ptrace_scope 1), let the peers read.
  static const bool allowed = [] {
#ifdef PR_SET_PTRACER
    ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
#endif
    return true;
  }();
  (void)allowed;
  h.pid = static_cast<std::uint32_t>(::getpid());
  h.probe = reinterpret_cast<std::uintptr_t>(&probe_cookie());
  h.cookie = probe_cookie();
}

bool tcp_fabric::probe_reads(const hello& h) const {
  std::array<std::byte, 8> got{};
  if (const int e = read_peer(h.pid, h.probe, got.data(), got.size())) {
    log(log_level::debug, rank_name(cfg_.rank) + ": cannot read rank " + std::to_string(h.rank) + "'s memory (" + std::strerror(e) +
                              "): its messages come through the socket");
    return false;
  }
  return wire::get_u64(got.data()) == h.cookie;
}

void tcp_fabric::take_ref(const std::shared_ptr<in_conn>& c, tag tg, const call_signature& sig, std::uint64_t len) {
  const std::uint64_t from = wire::get_u64(c->ref.data()), token = wire::get_u64(c->ref.data() + 8);
  auto alive = alive_;
  operation* op = take_posted(c->peer, tg);
  if (op)
    if (auto bad = arrival_error(*op, sig, len)) {
      op->transport.state = st_none;
      op->complete(bad);
      if (!*alive) return;
      op = nullptr;  // copied aside, as a data frame's payload is read aside
    }
  std::optional<detail::message_buffer> held;
  if (!op && !(held = hold_unexpected(c, tg, len))) return;
  std::byte* into = op ? op->data : held->data();
  if (op) {
    op->transport.state = st_reading;
    c->target = op;
  }
  if (const int e = read_peer(c->pid, from, into, len)) {
    if (held) release_unexpected(peer(c->peer), len);
    // Gone: its process ended (its connection's end says how, or the loss grace decides).
    if (e == ESRCH || exiting(c->pid)) return in_ended(c, "its process is gone (" + std::string(std::strerror(e)) + ")");
    return protocol_error(c, "a message by reference that cannot be read from its memory (" + std::string(std::strerror(e)) + ")");
  }
  ++counts_.single_copies;
  send_receipt(c, token);
  if (!op) {
    c->pending_tag = tg;
    c->pending_sig = sig;
    c->payload = std::move(*held);
    return stash(c);
  }
  c->target = nullptr;
  op->transport.state = st_none;
  op->complete({});
  if (*alive && c->open) read_frame(c);
}

void tcp_fabric::send_receipt(const std::shared_ptr<in_conn>& c, std::uint64_t token) {
  if (!c->open) return;
  frame_header f;
  f.kind = frame_header::done;
  f.abort_code = token;
  std::array<std::byte, frame_bytes + auth::channel::tag_bytes> b{};
  const std::span<std::byte, frame_bytes> h(b.data(), frame_bytes);
  encode(h, f);
  std::size_t n = frame_bytes;
  if (c->back) {
    c->back->seal(h, nullptr, nullptr, 0, b.data() + frame_bytes);
    n += auth::channel::tag_bytes;
  }
  c->receipts.insert(c->receipts.end(), b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
  if (c->receipts_writing.empty()) write_receipts(c);
}

void tcp_fabric::write_receipts(const std::shared_ptr<in_conn>& c) {
  // Nothing else goes this way on the connection: the socket almost always takes them at
  // once, and the receive completes with its receipt on the way without a trip through
  // the loop (whose next run may be the rank's next call).
  std::error_code ec;
  std::size_t n = 0;
  if (!c->receipts.empty()) n = c->sock.write_some(asio::buffer(c->receipts), ec);
  if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
  if (ec) return;  // the connection is failing: its reading side says so
  c->receipts.erase(c->receipts.begin(), c->receipts.begin() + static_cast<std::ptrdiff_t>(n));
  if (c->receipts.empty()) return;
  c->receipts_writing.swap(c->receipts);
  asio::async_write(c->sock, asio::buffer(c->receipts_writing), [this, alive = alive_, c](std::error_code e, std::size_t) {
    if (!*alive) return;
    c->receipts_writing.clear();
    if (!e && c->open) write_receipts(c);
  });
}

void tcp_fabric::read_receipts(int p, int rail) {
  auto& o = out(p, rail);
  const std::size_t n = frame_bytes + (o.back ? auth::channel::tag_bytes : 0);
  asio::async_read(o.sock, asio::buffer(o.receipt.data(), n),
                   asio::bind_allocator(detail::handler_allocator<int>(*o.read_mem),
                                        [this, alive = alive_, p, rail, mem = o.read_mem](std::error_code ec, std::size_t) {
    if (!*alive) return;
    auto& o2 = out(p, rail);
    auto& pe = peer(p);
    // The peer closes its end when it leaves: no loss unless a send still waits on it.
    if (ec) {
      if (!pe.lent.empty() && o2.st == out_conn::state::ready) out_lost(p, rail, "reading receipts from " + rank_name(p) + ": " + ec.message());
      return;
    }
    const std::span<const std::byte, frame_bytes> h(o2.receipt.data(), frame_bytes);
    const frame_header f = decode_frame(h);
    const bool sound = f.kind == frame_header::done && (!o2.back || o2.back->open(h, nullptr, 0, o2.receipt.data() + frame_bytes));
    operation* op = !sound ? nullptr : pe.lent.find([&](const operation& x) {
      return reinterpret_cast<std::uintptr_t>(x.transport.ctx[1]) == f.abort_code;
    });
    // A receipt whose send has already failed (fail_lent: this rank aborted, or took the
    // peer for lost on the store's word) is no peer's fault: it was on its way.
    if (!op && sound && (failure() || !peer_alive(p))) return;
    if (!op) {
      const std::string why = (sound ? "a receipt for a message by reference it was not sent" : "a malformed receipt") + std::string(" from ") + rank_name(p);
      log(log_level::error, rank_name(cfg_.rank) + ": " + why);
      return abort(make_error_code(errc::protocol_violation), why);
    }
    pe.lent.remove(*op);
    op->transport.state = st_none;
    const bool cancelled = op->transport.ctx[2] != nullptr;  // cancel()'s, deferred to here
    op->complete(cancelled ? op->ec : std::error_code());
    if (*alive) read_receipts(p, rail);
  }));
}

void tcp_fabric::fail_lent(int p, std::error_code ec, const std::string& why) {
  auto alive = alive_;
  while (operation* op = peer(p).lent.pop_front()) {
    op->transport.state = st_none;
    note_error(why + ": " + describe_op(*op));
    op->complete(ec);
    if (!*alive) return;
  }
}

}  // namespace optcast::tcp::impl
