#include "stream.hpp"

#include <fcntl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace optcast::shm {

hub::hub(const asio::any_io_executor& ex) : ex_(ex), watch_(ex) {
  const int fd = ::fcntl(bell_.fd(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "shared-memory hub: dup");
  watch_.assign(fd);
}

hub::~hub() {
  *alive_ = false;
  std::error_code ignored;
  watch_.close(ignored);
}

void hub::arm(stream* s) {
  if (std::find(waiting_.begin(), waiting_.end(), s) == waiting_.end()) waiting_.push_back(s);
  if (!polling_) wait_bell();
}

void hub::disarm(stream* s) noexcept { std::erase(waiting_, s); }

void hub::wait_bell() {
  if (watching_ || waiting_.empty()) return;
  watching_ = true;
  watch_.async_wait(asio::posix::stream_descriptor::wait_read, [this, alive = alive_](std::error_code ec) {
    if (!*alive) return;
    watching_ = false;
    if (ec) return;  // closed with the hub
    // Drained before the streams look: a ring after this is seen by them or wakes the
    // loop again, never lost between.
    bell_.drain();
    poll_here();
    if (*alive && !polling_) wait_bell();
  });
}

void hub::poll() {
  // progress only collects completions: no stream goes away or is armed meanwhile.
  for (std::size_t i = 0; i < waiting_.size();) {
    if (polling_ && waiting_[i]->quiet()) {  // the common look: one load of its ring's counter
      ++i;
      continue;
    }
    bool waiting = false;
    waiting_[i]->progress(waiting);
    if (waiting) {
      ++i;
    } else {
      waiting_[i] = waiting_.back();
      waiting_.pop_back();
    }
  }
}

void hub::completed(completion_ptr h, std::error_code ec, std::size_t n) {
  ready_.push_back({std::move(h), ec, n});
  queued();
}

void hub::reader_ready(stream* s) {
  ready_.push_back({{}, {}, 0, s});
  queued();
}

void hub::forget(stream* s) noexcept {
  if (reading_ == s) reading_ = nullptr;
  for (auto* q : {&ready_, batch_})
    if (q)
      for (auto& r : *q)
        if (r.reader == s) r.reader = nullptr;
}

void hub::queued() {
  if (running_ || drain_posted_ || collecting_) return;  // run_ready on the stack, or a handler on its way, takes it
  drain_posted_ = true;
  asio::post(ex_, [this, alive = alive_] {
    if (!*alive) return;
    drain_posted_ = false;
    run_ready();
  });
}

bool hub::run_ready() {
  if (running_ || ready_.empty()) return false;  // the one on the stack takes them
  running_ = true;
  bool did = false;
  const auto alive = alive_;  // a handler may end the fabric, and with it this hub
  // What the handlers start and completes at once comes after, never inside its own
  // initiation.
  // The two vectors trade places, keeping their capacity: a batch costs no allocation.
  auto batch = std::move(spare_);
  batch_ = &batch;
  while (!ready_.empty()) {
    did = true;
    batch.swap(ready_);
    for (auto& r : batch) {
      if (!*alive) return true;  // the rest are destroyed with the batch
      if (r.done) {
        std::exchange(r.done.p, nullptr)->invoke(r.ec, r.n);
      } else if (stream* s = std::exchange(r.reader, nullptr)) {
        s->reader_queued_ = false;
        // A read started meanwhile (a frame's body) comes first; its end looks again.
        if (!s->open_ || !s->reader_ || s->read_.done) continue;
        reading_ = s;  // forget() clears it if the reader ends the stream
        s->reader_(s->reader_ctx_);
        if (!*alive) return true;
        // A loop about to sleep: the stream says so in its ring again (a writer that rang
        // has cleared it), or finds what came meanwhile and queues another turn.
        if (std::exchange(reading_, nullptr) && !polling_) {
          bool waiting = false;
          s->progress(waiting);
        }
      }
    }
    if (!*alive) return true;
    batch.clear();
  }
  batch_ = nullptr;
  spare_ = std::move(batch);
  running_ = false;
  return did;
}

bool hub::poll_here() {
  if (running_) {  // from a handler run_ready runs: its loop takes what completes
    poll();
    return !ready_.empty();
  }
  collecting_ = true;  // run_ready follows at once: nothing to post for what poll finds
  poll();
  collecting_ = false;
  return run_ready();
}

bool hub::polling(bool on) {
  if (on == polling_) return false;
  polling_ = on;
  if (on) {
    for (stream* s : waiting_) s->stop_sleeping();
    return false;
  }
  // Each stream says it sleeps, or finds what came since the last poll.
  const bool did = poll_here();
  wait_bell();
  return did;
}

stream::stream(std::shared_ptr<hub> h, channel ch, int unix_socket)
    : hub_(std::move(h)), out_(std::move(ch.out)), in_(std::move(ch.in)), peer_(ch.peer),
      sock_(hub_->executor(), asio::local::stream_protocol(), unix_socket) {
  std::error_code ignored;
  sock_.non_blocking(true, ignored);
  watch_socket();
}

stream::~stream() {
  close();
  *alive_ = false;
}

void stream::keep_reading(void (*ready)(void*), void* ctx) {
  reader_ = ready;
  reader_ctx_ = ctx;
  if (!ready) {
    reader_queued_ = false;
    hub_->forget(this);
    return;
  }
  if (!open_) return;
  bool waiting = false;
  progress(waiting);
  if (waiting) hub_->arm(this);
}

void stream::close() noexcept {
  if (!open_) return;
  reader_queued_ = false;
  hub_->forget(this);
  open_ = false;
  std::error_code ignored;
  sock_.shutdown(asio::socket_base::shutdown_both, ignored);  // the peer sees its end
  sock_.close(ignored);
  abort_all(asio::error::operation_aborted);
  hub_->disarm(this);
}

void stream::watch_socket() {
  // Nothing comes on the socket after the introduction: its end (or a peer breaking the
  // rules) means the peer is gone. But a wake-up is no proof of either: Asio's reactor,
  // run by several threads, can hand this descriptor a readiness meant for the one that
  // had its slot before (the introduction's socket, released here just now), and a
  // handshake then failed on a live peer (asio_test's 4 threads: about one run in 30).
  // So the socket is asked: nothing there and no end, and the wait starts again.
  sock_.async_wait(asio::socket_base::wait_read, [this, alive = alive_](std::error_code ec) {
    if (!*alive || !open_) return;
    if (ec == asio::error::operation_aborted) return;
    if (!ec) {
      std::byte b{};
      const ssize_t n = ::recv(sock_.native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return watch_socket();
    }
    peer_gone();
  });
}

void stream::peer_gone() noexcept {
  gone_ = true;
  bool waiting = false;
  progress(waiting);  // reads take what it wrote first, then see the end
  if (!waiting) hub_->disarm(this);
}

void stream::post(completion_ptr h, std::error_code ec, std::size_t n) { hub_->completed(std::move(h), ec, n); }

void stream::abort_all(std::error_code ec) noexcept {
  for (pending* p : {&read_, &write_, &wait_})
    if (p->done) post(std::move(p->done), ec, 0);
}

std::size_t stream::read_now(const buffers<asio::mutable_buffer>& b, std::error_code& ec) {
  ec = {};
  if (!open_) {
    ec = asio::error::bad_descriptor;
    return 0;
  }
  std::size_t total = 0;
  for (std::size_t i = 0; i < b.count; ++i) {
    const std::size_t n = in_.read_some({static_cast<std::byte*>(b.bufs[i].data()), b.bufs[i].size()});
    total += n;
    if (n < b.bufs[i].size()) break;
  }
  if (total != 0 || b.count == 0) return total;
  ec = nothing_read();
  return 0;
}

std::size_t stream::read_some(const asio::mutable_buffer& b, std::error_code& ec) {
  ec = {};
  if (!open_) {
    ec = asio::error::bad_descriptor;
    return 0;
  }
  if (b.size() == 0) return 0;
  if (const std::size_t n = in_.read_some({static_cast<std::byte*>(b.data()), b.size()})) return n;
  ec = nothing_read();
  return 0;
}

std::error_code stream::nothing_read() const noexcept {
  if (in_.broken()) return std::make_error_code(std::errc::protocol_error);
  if (gone_) return asio::error::eof;
  return asio::error::would_block;
}

std::size_t stream::write_now(const buffers<asio::const_buffer>& b, std::error_code& ec) {
  std::array<std::span<const std::byte>, max_buffers> parts;
  for (std::size_t i = 0; i < b.count; ++i) parts[i] = {static_cast<const std::byte*>(b.bufs[i].data()), b.bufs[i].size()};
  return write_parts(std::span<const std::span<const std::byte>>(parts.data(), b.count), ec);
}

std::size_t stream::write_some(const std::array<asio::const_buffer, 2>& b, std::error_code& ec) {
  const std::array<std::span<const std::byte>, 2> parts{std::span(static_cast<const std::byte*>(b[0].data()), b[0].size()),
                                                        std::span(static_cast<const std::byte*>(b[1].data()), b[1].size())};
  return write_parts(parts, ec);
}

std::size_t stream::write_parts(std::span<const std::span<const std::byte>> parts, std::error_code& ec) {
  ec = {};
  if (!open_) {
    ec = asio::error::bad_descriptor;
    return 0;
  }
  if (gone_) {
    ec = asio::error::broken_pipe;
    return 0;
  }
  const std::size_t total = out_.write_some(parts);
  if (total != 0) return total;
  const bool empty = std::all_of(parts.begin(), parts.end(), [](const auto& q) { return q.empty(); });
  if (!empty) ec = out_.broken() ? std::make_error_code(std::errc::protocol_error) : asio::error::would_block;
  return 0;
}

void stream::start(pending& p, completion_ptr h) {
  if (p.done) return post(std::move(h), asio::error::already_started, 0);
  if (!open_) return post(std::move(h), asio::error::bad_descriptor, 0);
  p.done = std::move(h);
  bool waiting = false;
  progress(waiting);
  if (waiting) hub_->arm(this);
}

bool stream::try_read(pending& r, bool& waiting) {
  if (!r.done) return false;
  for (;;) {
    if (&r == &wait_) {
      if (!open_ || gone_ || in_.broken() || in_.available() > 0) {
        post(std::move(r.done), open_ ? std::error_code() : asio::error::operation_aborted, 0);
        return true;
      }
    } else {
      std::error_code ec;
      const std::size_t n = read_now(r.in, ec);
      if (ec != asio::error::would_block) {
        post(std::move(r.done), ec, n);
        return true;
      }
    }
    // Nothing yet. A polling loop looks again at its next turn; else say so in the ring,
    // then look once more (bytes that came meanwhile are read now).
    if (hub_->is_polling() || in_.sleep()) {
      waiting = true;
      return false;
    }
  }
}

bool stream::try_reader(bool& waiting) {
  waiting = true;  // a kept reader stays armed
  if (reader_queued_) return false;
  for (;;) {
    if (in_.changed() || (gone_ && !gone_told_)) {
      gone_told_ = gone_;
      reader_queued_ = true;
      hub_->reader_ready(this);
      return true;
    }
    if (gone_ || hub_->is_polling() || in_.sleep()) return false;
  }
}

bool stream::progress(bool& waiting) {
  waiting = false;
  bool did = try_read(read_, waiting);
  did |= try_read(wait_, waiting);
  if (reader_ && !read_.done && open_) did |= try_reader(waiting);
  while (write_.done) {
    std::error_code ec;
    const std::size_t n = write_now(write_.out, ec);
    if (ec != asio::error::would_block) {
      post(std::move(write_.done), ec, n);
      did = true;
      break;
    }
    // The ring was full (any room would have taken a part): wait for a byte of room.
    if (hub_->is_polling() || out_.sleep_for_room(1)) {
      waiting = true;
      break;
    }
  }
  return did;
}

void stream::stop_sleeping() noexcept {
  if (read_.done || wait_.done || reader_) in_.awake();
  if (write_.done) out_.awake();
}

}  // namespace optcast::shm
