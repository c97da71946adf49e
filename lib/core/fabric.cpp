#include "optcast/fabric.hpp"

#include <algorithm>

#include "little_endian.hpp"
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

std::error_code fabric::leftover(std::uint32_t) { return {}; }

result<void> fabric::leave() {
  if (failure()) return fail(failure());
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
