#include "optcast/fabric.hpp"

#include <algorithm>

#include "../../net/bootstrap/wire.hpp"
#include "optcast/algorithm.hpp"
#include "optcast/reduction.hpp"
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
  s += op.peer == any_peer ? std::string(" any rank") : " rank " + std::to_string(op.peer);
  s += " (collective " + std::to_string(op.tg.seq) +
       ", step " + std::to_string(op.tg.step) + ")";
  return s;
}

void call_signature::encode(std::byte* out) const noexcept {
  out[0] = std::byte{coll};
  out[1] = std::byte{alg};
  out[2] = std::byte{op};
  out[3] = std::byte{type};
  wire::put_u32(out + 4, root);
  wire::put_u32(out + 8, blocks);
  wire::put_u32(out + 12, elem);
  wire::put_u64(out + 16, bytes);
  wire::put_u64(out + 24, counts);
}

call_signature call_signature::decode(const std::byte* in) noexcept {
  call_signature s;
  s.coll = std::to_integer<std::uint8_t>(in[0]);
  s.alg = std::to_integer<std::uint8_t>(in[1]);
  s.op = std::to_integer<std::uint8_t>(in[2]);
  s.type = std::to_integer<std::uint8_t>(in[3]);
  s.root = wire::get_u32(in + 4);
  s.blocks = wire::get_u32(in + 8);
  s.elem = wire::get_u32(in + 12);
  s.bytes = wire::get_u64(in + 16);
  s.counts = wire::get_u64(in + 24);
  return s;
}

std::uint64_t call_signature::hash() const noexcept {
  if (empty()) return 0;
  std::byte b[wire_bytes];
  encode(b);
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (std::byte x : b) h = (h ^ std::to_integer<std::uint64_t>(x)) * 0x100000001b3ull;
  return h ? h : 1;
}

namespace {

std::string_view op_name(std::uint8_t op) {
  static constexpr std::string_view names[] = {"?", "sum", "product", "min", "max", "band", "bor", "bxor", "a custom operator"};
  return op < std::size(names) ? names[op] : "?";
}

std::string_view type_name(std::uint8_t t) {
  static constexpr std::string_view names[] = {"?",       "int8",   "uint8",  "int16", "uint16", "int32",  "uint32", "int64",
                                               "uint64",  "float",  "double", "long double", "bool", "char", "a struct"};
  return t < std::size(names) ? names[t] : "?";
}

}  // namespace

std::string called_differently(std::uint32_t seq, std::string_view how) {
  return "collective " + std::to_string(seq) + " was called differently: " + std::string(how);
}

std::string calls_of(int them, const call_signature& theirs, int me, const call_signature& mine) {
  return "rank " + std::to_string(them) + " called " + theirs.describe() + ", rank " + std::to_string(me) + " " + mine.describe();
}

std::string call_signature::describe() const {
  if (empty()) return "no collective (point-to-point)";
  std::string s = coll ? std::string(to_string(static_cast<collective>(coll - 1))) : "?";
  s += " (";
  s += alg ? std::string(to_string(static_cast<algorithm>(alg - 1))) : "?";
  if (root != 0xffffffffu) s += ", root " + std::to_string(root);
  s += ", " + std::to_string(bytes) + " B";
  if (counts) s += ", counts #" + std::to_string(counts % 100000);
  if (op) s += ", " + std::string(op_name(op)) + " of " + std::string(type_name(type)) + "s";
  else if (elem > 1) s += ", " + std::to_string(elem) + "-byte elements";
  s += ", " + std::to_string(blocks) + (blocks == 1 ? " block)" : " blocks)");
  return s;
}

void fabric::sign(std::uint32_t seq, const call_signature& s) {
  if (s.empty()) return;
  if (signed_one_.second.empty())
    signed_one_ = {seq, s};
  else
    signed_more_.emplace_back(seq, s);
}

void fabric::unsign(std::uint32_t seq) noexcept {
  signed_call done;
  if (auto it = std::find_if(signed_more_.rbegin(), signed_more_.rend(), [&](const signed_call& c) { return c.first == seq; });
      it != signed_more_.rend()) {
    done = *it;
    signed_more_.erase(std::next(it).base());
  } else if (signed_one_.first == seq && !signed_one_.second.empty()) {
    done = std::exchange(signed_one_, {});
  } else {
    return;
  }
  constexpr std::size_t kept = 31;  // and the newest
  if (!finished_newest_.second.empty()) {
    if (finished_.empty()) finished_.reserve(kept);  // once, not at every doubling
    if (finished_.size() < kept)
      finished_.push_back(finished_newest_);
    else
      finished_[finished_next_++ % kept] = finished_newest_;
  }
  finished_newest_ = done;
}

call_signature fabric::signature_of(std::uint32_t seq) const noexcept {
  for (auto it = signed_more_.rbegin(); it != signed_more_.rend(); ++it)
    if (it->first == seq) return it->second;
  if (signed_one_.first == seq) return signed_one_.second;
  return {};
}

call_signature fabric::call_made(std::uint32_t seq) const noexcept {
  if (auto s = signature_of(seq); !s.empty()) return s;
  if (finished_newest_.first == seq) return finished_newest_.second;
  for (const auto& [q, sig] : finished_)
    if (q == seq) return sig;
  return {};
}

bool fabric::signature_matches(const operation& op, const call_signature& theirs) {
  const auto mine = signature_of(op.tg.seq);
  if (mine == theirs) return true;
  note_error(called_differently(op.tg.seq, calls_of(op.peer, theirs, rank(), mine)));
  return false;
}

bool fabric::signature_hash_matches(const operation& op, std::uint64_t theirs) {
  return signature_hash_matches(op.tg.seq, op.peer, theirs);
}

bool fabric::signature_hash_matches(std::uint32_t seq, int src, std::uint64_t theirs) {
  const auto mine = signature_of(seq);
  if (mine.hash() == theirs) return true;
  note_error(called_differently(seq, (src >= 0 ? "rank " + std::to_string(src) + "'s call" : "another rank's call") + " (signature " +
                                         std::to_string(theirs) + ") differs from rank " + std::to_string(rank()) + "'s " + mine.describe()));
  return false;
}

bool fabric::unexpected_consistent(int src, std::uint32_t seq, const call_signature& theirs) {
  if (theirs.empty() || failure()) return true;  // not a collective's; or nothing to save
  const auto mine = signature_of(seq);
  if (!mine.empty()) {
    if (mine == theirs) return true;
    note_error(called_differently(seq, calls_of(src, theirs, rank(), mine)));
    return false;
  }
  // Every message of a collective is received within it: one for a collective this rank
  // has finished was sent by a call that differs from this rank's.
  if (finished_newest_.first == seq && !finished_newest_.second.empty()) {
    note_unreceived(src, seq, theirs, finished_newest_.second);
    return false;
  }
  for (const auto& [s, sig] : finished_)
    if (s == seq && !sig.empty()) {
      note_unreceived(src, seq, theirs, sig);
      return false;
    }
  return true;  // not started here yet: checked when it is (sign)
}

void fabric::note_unreceived(int src, std::uint32_t seq, const call_signature& theirs, const call_signature& mine) {
  note_error(mine == theirs ? "rank " + std::to_string(src) + " sent a message of collective " + std::to_string(seq) + " (" +
                                  theirs.describe() + ") that rank " + std::to_string(rank()) +
                                  " finished without receiving it: the ranks' calls differ"
                            : called_differently(seq, calls_of(src, theirs, rank(), mine)));
}

std::error_code fabric::peer_left(const operation& op, std::uint32_t their_seq, const call_signature& theirs) {
  const auto mine = signature_of(op.tg.seq);
  const std::string them = "rank " + std::to_string(op.peer);
  if (!theirs.empty() && their_seq == op.tg.seq && !mine.empty() && mine != theirs)
    note_error(called_differently(op.tg.seq, calls_of(op.peer, theirs, rank(), mine)));
  else
    note_error(them + " has left the job (closed its communicator) " +
               (theirs.empty() ? std::string("without finishing a collective")
                               : "after collective " + std::to_string(their_seq) + ", " + theirs.describe() + ",") +
               " while " + describe_op(op) + " waits for it: the ranks' calls differ (not every rank made this call, or not alike)");
  return make_error_code(errc::call_mismatch);
}

std::error_code fabric::leftover(std::uint32_t) { return {}; }

result<void> fabric::leave() {
  if (failure()) return fail(failure());
  return {};
}

result<void> fabric::settle_outcome(const result<void>& job, const std::string& job_detail, std::error_code own,
                                    const std::string& own_detail) {
  if (!job) {
    failure_ = job.error();
    failure_detail_ = job_detail;
    return job;
  }
  if (own && own != errc::cancelled) {  // never reached the store (it went first)
    failure_ = own;
    failure_detail_ = own_detail;
    return fail(own);
  }
  return {};
}

std::error_code fabric::arrival_error(const operation& op, const call_signature& theirs, std::size_t bytes) {
  if (!signature_matches(op, theirs)) return make_error_code(errc::call_mismatch);
  if (bytes != op.size) return size_error(op, "a message of " + std::to_string(bytes) + " B");
  return {};
}

std::error_code fabric::size_error(const operation& op, const std::string& got) {
  const auto mine = signature_of(op.tg.seq);
  if (!mine.empty()) {
    note_error(called_differently(op.tg.seq, "size mismatch: " + describe_op(op) + " got " + got + ", rank " + std::to_string(rank()) +
                                                 " called " + mine.describe()));
    return make_error_code(errc::call_mismatch);
  }
  note_error("size mismatch: " + describe_op(op) + " got " + got);
  return make_error_code(errc::size_mismatch);
}

std::error_code told_error(std::uint64_t code) noexcept {
  switch (static_cast<errc>(code)) {
    case errc::timeout:
    case errc::protocol_violation:
    case errc::size_mismatch:
    case errc::limit_exceeded:
    case errc::call_mismatch:
    case errc::deadlock:
    case errc::port_violation:
      return make_error_code(static_cast<errc>(code));
    default:
      return make_error_code(errc::peer_lost);
  }
}

std::error_code check_op(const fabric& f, const operation& op) noexcept {
  if (op.peer == any_peer && (op.kind != op_kind::recv || !f.receives_from_any()))
    return make_error_code(errc::invalid_argument);
  if (op.peer != any_peer && (op.peer < 0 || op.peer >= f.size() || op.peer == f.rank()))
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
