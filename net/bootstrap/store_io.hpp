// What the store's server and its clients share on the wire's side of the protocol:
// reading one message, a connection's queue of outgoing ones, the proofs' transcript.
// Internal to net/bootstrap (store_server.cpp, store_client.cpp).
#pragma once

#include "store.hpp"

#include <array>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/any_io_executor.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>

#include "../auth/auth.hpp"
#include "optcast/fabric_base.hpp"
#include "optcast/log.hpp"
#include "store_protocol.hpp"
#include "core/little_endian.hpp"

namespace optcast::store::io {

using namespace proto;
using asio::ip::tcp;
using clock = std::chrono::steady_clock;
constexpr auto use_nothrow = asio::experimental::as_tuple(asio::use_awaitable);

// A connection that has not finished its handshake by then is dropped: strangers must
// not hold the store's sockets (or the rank's file descriptors) open.
constexpr auto hello_timeout = std::chrono::seconds(10);

constexpr std::string_view client_label = "optcast/store/client", server_label = "optcast/store/server";
// The keys of an encrypted connection's two directions, from the same transcript.
constexpr std::string_view client_seal_label = "optcast/store/sealed/client", server_seal_label = "optcast/store/sealed/server";

// What both proofs cover: the claimed rank and size and both nonces (the store's proof
// adds the job id it hands out).
struct transcript {
  std::array<std::byte, 8> rank_size{};
  auth::nonce client_nonce{}, server_nonce{};
  std::array<std::byte, 8> job{};
  transcript(std::uint32_t rank, std::uint32_t size) {
    wire::put_u32(rank_size.data(), rank);
    wire::put_u32(rank_size.data() + 4, size);
  }
  std::array<std::span<const std::byte>, 3> client_parts() const { return {rank_size, client_nonce, server_nonce}; }
  std::array<std::span<const std::byte>, 4> server_parts() const { return {rank_size, client_nonce, server_nonce, job}; }
};

inline std::string as_string(std::span<const std::byte> b) { return std::string(reinterpret_cast<const char*>(b.data()), b.size()); }
template <std::size_t N>
inline bool copy_exact(std::array<std::byte, N>& to, std::string_view from) {
  if (from.size() != N) return false;
  std::memcpy(to.data(), from.data(), N);
  return true;
}

// A message as it goes on the wire; sealed (`ch` set): the header in the clear and
// authenticated, key and value encrypted, the tag after them.
inline std::string on_wire(const message& m, auth::channel* ch) {
  std::string s = encode(m);
  if (!ch) return s;
  const std::size_t body = s.size() - header_bytes;
  s.resize(s.size() + auth::channel::tag_bytes);
  auto* b = reinterpret_cast<std::byte*>(s.data());
  ch->seal(std::span<const std::byte>(b, header_bytes), b + header_bytes, b + header_bytes, body, b + header_bytes + body);
  return s;
}

// Reads one message; a malformed one is a protocol violation, and so is a sealed one
// (`sealed` set) that does not open. `field_limit` bounds the key and the value before
// anything is allocated for them.
inline asio::awaitable<result<message>> read_message(tcp::socket& s, std::uint32_t field_limit = max_field,
                                                     auth::channel* sealed = nullptr) {
  std::array<std::byte, header_bytes> h{};
  auto [ec, n] = co_await asio::async_read(s, asio::buffer(h), use_nothrow);
  if (ec) co_return fail(ec);
  const auto hd = decode_header(h, field_limit);
  if (!hd) co_return fail(hd.error());
  message m{hd->type, hd->id, hd->arg, {}, {}};
  if (sealed) {
    const std::size_t body = std::size_t{hd->key_bytes} + hd->val_bytes;
    std::string b;
    try {
      b.resize(body + auth::channel::tag_bytes);
    } catch (const std::exception&) {
      co_return fail(errc::limit_exceeded);
    }
    auto [ec2, n2] = co_await asio::async_read(s, asio::buffer(b), use_nothrow);
    if (ec2) co_return fail(ec2);
    auto* p = reinterpret_cast<std::byte*>(b.data());
    if (!sealed->open(h, p, body, p + body)) co_return fail(errc::protocol_violation);
    m.key.assign(b.data(), hd->key_bytes);
    m.val.assign(b.data() + hd->key_bytes, hd->val_bytes);
    co_return m;
  }
  try {
    m.key.resize(hd->key_bytes);
    m.val.resize(hd->val_bytes);
  } catch (const std::exception&) {  // an error, not an exception through the event loop
    co_return fail(errc::limit_exceeded);
  }
  std::array<asio::mutable_buffer, 2> bufs{asio::buffer(m.key), asio::buffer(m.val)};
  auto [ec2, n2] = co_await asio::async_read(s, bufs, use_nothrow);
  if (ec2) co_return fail(ec2);
  co_return m;
}

// A connection's outgoing messages, written one after another.
struct outbox {
  std::deque<std::string> queue;
  bool writing = false;
  std::function<void()> drained;

  template <class Self>
  void send(Self self, tcp::socket& s, std::string bytes) {
    queue.push_back(std::move(bytes));
    if (!writing) pump(std::move(self), s);
  }
  // `f` once everything queued so far is written (or the connection failed).
  void on_drained(std::function<void()> f) {
    if (!writing) return f();
    drained = std::move(f);
  }
  template <class Self>
  void pump(Self self, tcp::socket& s) {
    if (queue.empty()) {
      writing = false;
      if (drained) std::exchange(drained, nullptr)();
      return;
    }
    writing = true;
    asio::async_write(s, asio::buffer(queue.front()),
                      [this, self, &s](std::error_code ec, std::size_t) {
                        queue.pop_front();
                        if (ec) {
                          queue.clear();
                          writing = false;
                          if (drained) std::exchange(drained, nullptr)();
                          return;
                        }
                        pump(self, s);
                      });
  }
};

inline std::string describe_peer(const tcp::socket& s) {
  std::error_code ec;
  auto ep = s.remote_endpoint(ec);
  return ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
}


}  // namespace optcast::store::io
