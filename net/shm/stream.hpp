// A channel's two rings as an Asio stream: read_some, write_some, their asynchronous forms
// and async_wait, the members a TCP socket offers to asio::async_read and async_write, so
// that a fabric reads and writes frames through memory with the code it uses on sockets.
//
// A stream whose operation cannot go on waits in its hub, one per loop: while the loop
// polls (hub::polling), the hub looks at the rings between the loop's turns (hub::poll)
// and nobody rings anybody, so messages move without a system call on either side; once
// the loop would sleep, each waiting stream says in its ring that it sleeps, and the hub
// waits on this process's doorbell for all of them at once (one descriptor in the loop's
// epoll however many peers share the host), rung by a peer only for a side that said so. The unix socket the channel was introduced on is watched for its
// end: a peer that dies ends its streams at once (what it wrote before is read first).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <system_error>
#include <span>
#include <vector>

#include <asio/async_result.hpp>
#include <asio/buffer.hpp>
#include <asio/error.hpp>
#include <asio/any_io_executor.hpp>
#include <asio/associated_allocator.hpp>
#include <asio/associated_executor.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <asio/post.hpp>
#include <asio/socket_base.hpp>

#include "introduce.hpp"

namespace optcast::shm {

class stream;

// A handler, type-erased and move-only, run by the hub (in the order completions
// happened), in memory from its own allocator (a fabric's per-connection slot, say).
struct completion {
  virtual void invoke(std::error_code ec, std::size_t n) = 0;  // here and now, and frees itself
  virtual void destroy() noexcept = 0;  // without running it
protected:
  ~completion() = default;
};
template <class Handler>
struct completion_of final : completion {
  using alloc_type = typename std::allocator_traits<asio::associated_allocator_t<Handler>>::template rebind_alloc<completion_of>;
  explicit completion_of(Handler h) : handler(std::move(h)) {}
  static completion_of* make(Handler h) {
    alloc_type a(asio::get_associated_allocator(h));
    completion_of* p = std::allocator_traits<alloc_type>::allocate(a, 1);
    return new (p) completion_of(std::move(h));
  }
  void free() noexcept {
    alloc_type a(asio::get_associated_allocator(handler));
    this->~completion_of();
    std::allocator_traits<alloc_type>::deallocate(a, this, 1);
  }
  void invoke(std::error_code ec, std::size_t n) override {
    Handler h = std::move(handler);
    free();
    std::move(h)(ec, n);
  }
  void destroy() noexcept override { free(); }
  Handler handler;
};
struct completion_ptr {
  completion* p = nullptr;
  completion_ptr() = default;
  explicit completion_ptr(completion* c) noexcept : p(c) {}
  completion_ptr(completion_ptr&& o) noexcept : p(std::exchange(o.p, nullptr)) {}
  completion_ptr& operator=(completion_ptr&& o) noexcept {
    if (this != &o) {
      reset();
      p = std::exchange(o.p, nullptr);
    }
    return *this;
  }
  ~completion_ptr() { reset(); }
  void reset() noexcept {
    if (p) std::exchange(p, nullptr)->destroy();
  }
  explicit operator bool() const noexcept { return p != nullptr; }
};
template <class Handler>
completion_ptr erase(Handler h) {
  return completion_ptr(completion_of<Handler>::make(std::move(h)));
}

// One per loop: this process's doorbell, waited on in the loop for the streams that sleep.
// Held by its streams (shared), so a stream that outlives its owner still finds it.
class hub {
public:
  // Completions and the doorbell's wait run on `ex` (a fabric's strand, say).
  explicit hub(const asio::any_io_executor& ex);
  ~hub();
  hub(const hub&) = delete;
  hub& operator=(const hub&) = delete;

  // The doorbell peers are given (introduce's `mine`).
  const doorbell& bell() const noexcept { return bell_; }
  const asio::any_io_executor& executor() const noexcept { return ex_; }
  // Moves every waiting stream on as far as its rings allow, without a system call, and
  // runs the handlers of what completed here: true if anything did. On the executor (the
  // doorbell's wait calls it there), or from the loop's own thread between its turns
  // where nothing else runs the executor (a handler posted from outside the loop's run
  // costs the loop a wake-up).
  bool poll_here();
  // Whether the loop polls (calls poll() between its turns) rather than sleeping in epoll:
  // while it does, no waiting stream asks its peer to ring. Turned off (before the loop
  // sleeps), each waiting stream says it sleeps or, if its bytes came meanwhile,
  // completes: true then.
  bool polling(bool on);
  bool is_polling() const noexcept { return polling_; }

private:
  friend class stream;
  void arm(stream* s);
  void disarm(stream* s) noexcept;
  void wait_bell();

  // Every stream's completions, in the order they happened: run by poll_here, or by one
  // handler posted for all of them. Never posted one by one: a handler posted earlier and
  // one run in place later would run out of order.
  struct ready_completion;
  std::vector<ready_completion> ready_, spare_;  // spare_: the last batch's, emptied
  std::vector<ready_completion>* batch_ = nullptr;  // the one run_ready is running
  stream* reading_ = nullptr;                       // whose kept reader run_ready is calling
  bool running_ = false;       // run_ready is on the stack: it takes what comes meanwhile
  bool collecting_ = false;    // poll_here's poll: its run_ready takes what comes
  bool drain_posted_ = false;  // a handler to run them is on its way
  void poll();
  void completed(completion_ptr h, std::error_code ec, std::size_t n);
  // s's reader (stream::keep_reading) is to run, in its place among the completions.
  void reader_ready(stream* s);
  // s goes away, or keeps no reader: its reader's turns still queued are dropped.
  void forget(stream* s) noexcept;
  void queued();
  bool run_ready();

  asio::any_io_executor ex_;
  doorbell bell_;
  asio::posix::stream_descriptor watch_;  // a second descriptor of bell_, for the loop
  std::vector<stream*> waiting_;          // streams with an operation that could not go on
  bool watching_ = false, polling_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

class stream {
public:
  using executor_type = asio::any_io_executor;
  using wait_type = asio::socket_base::wait_type;

  // Takes the channel and the unix socket it was introduced on (watched for its end).
  stream(std::shared_ptr<hub> h, channel ch, int unix_socket);
  ~stream();  // what still waits completes with operation_aborted
  stream(const stream&) = delete;
  stream& operator=(const stream&) = delete;

  executor_type get_executor() const noexcept { return hub_->executor(); }
  const peer_identity& peer() const noexcept { return peer_; }
  bool is_open() const noexcept { return open_; }
  // Ends the streams both ways: the peer sees its end; what waits here is aborted.
  void close() noexcept;

  // Without waiting: what was there (would_block if nothing; eof once the peer is gone
  // and everything it wrote is read).
  template <class MutableBuffers>
  std::size_t read_some(const MutableBuffers& b, std::error_code& ec) {
    const auto v = gather<asio::mutable_buffer>(b);
    return read_now(v, ec);
  }
  // One buffer (a kept reader's every read): without gathering a sequence first.
  std::size_t read_some(const asio::mutable_buffer& b, std::error_code& ec);
  // Without waiting: as much as there is room for (would_block if none; broken_pipe once
  // the peer is gone).
  template <class ConstBuffers>
  std::size_t write_some(const ConstBuffers& b, std::error_code& ec) {
    const auto v = gather<asio::const_buffer>(b);
    return write_now(v, ec);
  }
  // A frame's header and body (every small send): without gathering a sequence first.
  std::size_t write_some(const std::array<asio::const_buffer, 2>& b, std::error_code& ec);

  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& b, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& bufs) {
          if (!read_.done) read_.in = gather<asio::mutable_buffer>(bufs);  // else start() refuses it
          start(read_, erase(std::move(handler)));
        },
        token, b);
  }
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& b, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& bufs) {
          if (!write_.done) write_.out = gather<asio::const_buffer>(bufs);  // else start() refuses it
          start(write_, erase(std::move(handler)));
        },
        token, b);
  }
  // A reader that stays, instead of a read started again for every frame: `ready(ctx)`
  // runs, through the hub in order with the completions, whenever bytes wait in the ring
  // (or once the peer is gone) and no read does; the owner then reads with read_some until
  // would_block. Nothing is allocated or armed again per frame. `ready` null: none (as
  // before the stream closes, or its owner goes: no turn of it runs after).
  void keep_reading(void (*ready)(void*), void* ctx);

  // Until there is something to read (or the peer is gone); only wait_read.
  template <class Token>
  auto async_wait(wait_type w, Token&& token) {
    return asio::async_initiate<Token, void(std::error_code)>(
        [this, w](auto handler) {
          auto h = erase([inner = std::move(handler)](std::error_code ec, std::size_t) mutable { inner(ec); });
          if (w != wait_type::wait_read) return post(std::move(h), asio::error::operation_not_supported, 0);
          start(wait_, std::move(h));
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
  // One kind of operation in wait: its buffers (a read's or a write's) and its handler
  // (none: nothing waits).
  struct pending {
    buffers<asio::mutable_buffer> in;
    buffers<asio::const_buffer> out;
    completion_ptr done;
  };
  void start(pending& p, completion_ptr h);
  void post(completion_ptr h, std::error_code ec, std::size_t n);
  std::size_t read_now(const buffers<asio::mutable_buffer>& b, std::error_code& ec);
  // Why a read took nothing: would_block, eof once the peer is gone, or a broken ring.
  std::error_code nothing_read() const noexcept;
  std::size_t write_now(const buffers<asio::const_buffer>& b, std::error_code& ec);
  std::size_t write_parts(std::span<const std::span<const std::byte>> parts, std::error_code& ec);
  // Completes what can complete; the rest, unless the hub polls, say in their rings that
  // they sleep. True if something completed; `waiting` says whether anything still waits.
  bool progress(bool& waiting);
  // The rest of the reading side: true if r completed.
  bool try_read(pending& r, bool& waiting);
  // The kept reader's: true if its turn was queued.
  bool try_reader(bool& waiting);
  // For a polling hub, between progress() calls: nothing it could complete has changed
  // (reads wait and their ring has nothing new; no write waits; the peer is there).
  bool quiet() const noexcept {
    return open_ && !gone_ && !write_.done && (read_.done || wait_.done || reader_) && !in_.changed();
  }
  // The hub turned to polling: the peer need not ring for this stream now.
  void stop_sleeping() noexcept;
  void watch_socket();
  void peer_gone() noexcept;
  void abort_all(std::error_code ec) noexcept;

  std::shared_ptr<hub> hub_;
  ring_writer out_;
  ring_reader in_;
  peer_identity peer_;
  asio::local::stream_protocol::socket sock_;
  pending read_, write_, wait_;
  void (*reader_)(void*) = nullptr;
  void* reader_ctx_ = nullptr;
  bool reader_queued_ = false;  // its turn waits in the hub
  bool gone_told_ = false;      // its turn for the peer's end has run or waits
  bool open_ = true, gone_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

// A completion to run, or (done empty) a stream's reader to call.
struct hub::ready_completion {
  completion_ptr done;
  std::error_code ec;
  std::size_t n = 0;
  stream* reader = nullptr;
};

}  // namespace optcast::shm
