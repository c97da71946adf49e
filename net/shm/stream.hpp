// A channel's two rings as an Asio stream: read_some, write_some, their asynchronous forms
// and async_wait, the members a TCP socket offers to asio::async_read and async_write, so
// that a fabric reads and writes frames through memory with the code it uses on sockets.
//
// A stream whose operation cannot go on says in its ring that it sleeps, and the loop's
// hub waits on this process's doorbell for every such stream at once: one descriptor in
// the loop's epoll however many peers share the host. A peer rings only for a side that
// said it sleeps, so a loop that is polling (hub::poll) moves messages without a system
// call on either side. The unix socket the channel was introduced on is watched for its
// end: a peer that dies ends its streams at once (what it wrote before is read first).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <system_error>
#include <vector>

#include <asio/async_result.hpp>
#include <asio/buffer.hpp>
#include <asio/error.hpp>
#include <asio/io_context.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/socket_base.hpp>

#include "introduce.hpp"

namespace optcast::shm {

class stream;

// One per loop: this process's doorbell, waited on in the loop for the streams that sleep.
class hub {
public:
  explicit hub(asio::io_context& io);
  ~hub();
  hub(const hub&) = delete;
  hub& operator=(const hub&) = delete;

  // The doorbell peers are given (introduce's `mine`).
  const doorbell& bell() const noexcept { return bell_; }
  asio::io_context& context() noexcept { return io_; }
  // Moves every waiting stream on as far as its rings allow, without a system call: true
  // if an operation completed (its handler posted). For a loop that polls.
  bool poll();

private:
  friend class stream;
  void arm(stream* s);
  void disarm(stream* s) noexcept;
  void wait_bell();

  asio::io_context& io_;
  doorbell bell_;
  asio::posix::stream_descriptor watch_;  // a second descriptor of bell_, for the loop
  std::vector<stream*> waiting_;          // streams with an operation that could not go on
  bool watching_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

class stream {
public:
  using executor_type = asio::io_context::executor_type;
  using wait_type = asio::socket_base::wait_type;

  // Takes the channel and the unix socket it was introduced on (watched for its end).
  stream(hub& h, channel ch, int unix_socket);
  ~stream();  // what still waits completes with operation_aborted
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  executor_type get_executor() noexcept { return hub_.context().get_executor(); }
  const peer_identity& peer() const noexcept { return peer_; }
  bool is_open() const noexcept { return open_; }
  // Ends the streams both ways: the peer sees its end; what waits here is aborted.
  void close() noexcept;

  // Without waiting: what was there (would_block if nothing; eof once the peer is gone
  // and everything it wrote is read).
  template <class MutableBuffers>
  std::size_t read_some(const MutableBuffers& b, std::error_code& ec) {
    const auto v = gather<asio::mutable_buffer>(b);
    return read_now(v.bufs.data(), v.count, ec);
  }
  // Without waiting: as much as there is room for (would_block if none; broken_pipe once
  // the peer is gone).
  template <class ConstBuffers>
  std::size_t write_some(const ConstBuffers& b, std::error_code& ec) {
    const auto v = gather<asio::const_buffer>(b);
    return write_now(v.bufs.data(), v.count, ec);
  }

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& b, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& bufs) {
          start(read_, gather<asio::mutable_buffer>(bufs), erase(std::move(handler)));
        },
        token, b);
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& b, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& bufs) {
          start(write_, gather<asio::const_buffer>(bufs), erase(std::move(handler)));
        },
        token, b);
  }
  // Until there is something to read (or the peer is gone); only wait_read.
  template <class Token>
  auto async_wait(wait_type w, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [this, w](auto handler) {
          auto h = erase([inner = std::move(handler)](std::error_code ec, std::size_t) mutable { inner(ec); });
          if (w != wait_type::wait_read) return post(std::move(h), asio::error::operation_not_supported, 0);
          start(wait_, buffers<asio::mutable_buffer>{}, std::move(h));
        },
        token);
  }

private:
  friend class hub;
  static constexpr std::size_t max_buffers = 16;  // more are left for the next call, as a partial transfer
  template <class B>
  struct buffers {
    std::array<B, max_buffers> bufs{};
    std::size_t count = 0;
  };
  template <class B, class Seq>
  static buffers<B> gather(const Seq& seq) {
    buffers<B> out;
    for (auto it = asio::buffer_sequence_begin(seq); it != asio::buffer_sequence_end(seq) && out.count < max_buffers; ++it)
      if (B b(*it); b.size() != 0) out.bufs[out.count++] = b;
    return out;
  }
  // A handler, type-erased and move-only, completed through the loop.
  struct completion {
    virtual ~completion() = default;
    virtual void post(asio::io_context& io, std::error_code ec, std::size_t n) = 0;
  };
  template <class Handler>
  struct completion_of final : completion {
    explicit completion_of(Handler h) : handler(std::move(h)) {}
    void post(asio::io_context& io, std::error_code ec, std::size_t n) override {
      auto ex = asio::get_associated_executor(handler, io.get_executor());
      asio::post(ex, [h = std::move(handler), ec, n]() mutable { h(ec, n); });
    }
    Handler handler;
  };
  template <class Handler>
  static std::unique_ptr<completion> erase(Handler h) {
    return std::make_unique<completion_of<Handler>>(std::move(h));
  }
  // One kind of operation in wait: its buffers and its handler (none: nothing waits).
  struct pending {
    buffers<asio::mutable_buffer> in;
    buffers<asio::const_buffer> out;
    std::unique_ptr<completion> done;
  };
  void start(pending& p, buffers<asio::mutable_buffer> b, std::unique_ptr<completion> h);
  void start(pending& p, buffers<asio::const_buffer> b, std::unique_ptr<completion> h);
  void post(std::unique_ptr<completion> h, std::error_code ec, std::size_t n);
  std::size_t read_now(const asio::mutable_buffer* b, std::size_t count, std::error_code& ec);
  std::size_t write_now(const asio::const_buffer* b, std::size_t count, std::error_code& ec);
  // Completes what can complete; the rest say in their rings that they sleep. True if
  // something completed; `waiting` says whether anything still waits.
  bool progress(bool& waiting);
  // The rest of the reading side: true if r completed.
  bool try_read(pending& r, bool& waiting);
  void watch_socket();
  void peer_gone() noexcept;
  void abort_all(std::error_code ec) noexcept;

  hub& hub_;
  ring_writer out_;
  ring_reader in_;
  peer_identity peer_;
  asio::local::stream_protocol::socket sock_;
  pending read_, write_, wait_;
  bool open_ = true, gone_ = false;
  std::array<std::byte, 1> probe_{};
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace optcast::shm
