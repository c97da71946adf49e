#include "stream.hpp"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

namespace optcast::shm {

hub::hub(asio::io_context& io) : io_(io), watch_(io) {
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
  wait_bell();
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
    poll();
    wait_bell();
  });
}

bool hub::poll() {
  bool did = false;
  // progress only posts handlers, so no stream goes away meanwhile; one may be armed anew.
  const auto now = waiting_;
  for (stream* s : now) {
    bool waiting = false;
    did |= s->progress(waiting);
    if (!waiting) disarm(s);
  }
  return did;
}

stream::stream(hub& h, channel ch, int unix_socket)
    : hub_(h), out_(std::move(ch.out)), in_(std::move(ch.in)), peer_(ch.peer),
      sock_(h.context(), asio::local::stream_protocol(), unix_socket) {
  std::error_code ignored;
  sock_.non_blocking(true, ignored);
  watch_socket();
}

stream::~stream() {
  close();
  *alive_ = false;
}

void stream::close() noexcept {
  if (!open_) return;
  open_ = false;
  std::error_code ignored;
  sock_.shutdown(asio::socket_base::shutdown_both, ignored);  // the peer sees its end
  sock_.close(ignored);
  abort_all(asio::error::operation_aborted);
  hub_.disarm(this);
}

void stream::watch_socket() {
  // Nothing comes on the socket after the introduction: readable means its end (or a
  // peer breaking the rules), either way the peer is gone.
  sock_.async_wait(asio::socket_base::wait_read, [this, alive = alive_](std::error_code ec) {
    if (!*alive || !open_) return;
    if (ec == asio::error::operation_aborted) return;
    peer_gone();
  });
}

void stream::peer_gone() noexcept {
  gone_ = true;
  bool waiting = false;
  progress(waiting);  // reads take what it wrote first, then see the end
  if (!waiting) hub_.disarm(this);
}

void stream::post(std::unique_ptr<completion> h, std::error_code ec, std::size_t n) { h->post(hub_.context(), ec, n); }

void stream::abort_all(std::error_code ec) noexcept {
  for (pending* p : {&read_, &write_, &wait_})
    if (p->done) post(std::move(p->done), ec, 0);
}

std::size_t stream::read_now(const asio::mutable_buffer* b, std::size_t count, std::error_code& ec) {
  ec = {};
  if (!open_) {
    ec = asio::error::bad_descriptor;
    return 0;
  }
  std::size_t total = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t n = in_.read_some({static_cast<std::byte*>(b[i].data()), b[i].size()});
    total += n;
    if (n < b[i].size()) break;
  }
  if (total != 0 || count == 0) return total;
  if (in_.broken())
    ec = std::make_error_code(std::errc::protocol_error);
  else if (gone_)
    ec = asio::error::eof;
  else
    ec = asio::error::would_block;
  return 0;
}

std::size_t stream::write_now(const asio::const_buffer* b, std::size_t count, std::error_code& ec) {
  ec = {};
  if (!open_) {
    ec = asio::error::bad_descriptor;
    return 0;
  }
  if (gone_) {
    ec = asio::error::broken_pipe;
    return 0;
  }
  std::size_t total = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t n = out_.write_some({static_cast<const std::byte*>(b[i].data()), b[i].size()});
    total += n;
    if (n < b[i].size()) break;
  }
  if (total != 0 || count == 0) return total;
  ec = out_.broken() ? std::make_error_code(std::errc::protocol_error) : asio::error::would_block;
  return 0;
}

void stream::start(pending& p, buffers<asio::mutable_buffer> b, std::unique_ptr<completion> h) {
  if (p.done) return post(std::move(h), asio::error::already_started, 0);
  p.in = b;
  p.done = std::move(h);
  bool waiting = false;
  progress(waiting);
  if (waiting) hub_.arm(this);
}

void stream::start(pending& p, buffers<asio::const_buffer> b, std::unique_ptr<completion> h) {
  if (p.done) return post(std::move(h), asio::error::already_started, 0);
  p.out = b;
  p.done = std::move(h);
  bool waiting = false;
  progress(waiting);
  if (waiting) hub_.arm(this);
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
      const std::size_t n = read_now(r.in.bufs.data(), r.in.count, ec);
      if (ec != asio::error::would_block) {
        post(std::move(r.done), ec, n);
        return true;
      }
    }
    // Nothing yet: say so, then look once more (bytes that came meanwhile are read now).
    if (in_.sleep()) {
      waiting = true;
      return false;
    }
  }
}

bool stream::progress(bool& waiting) {
  waiting = false;
  bool did = try_read(read_, waiting);
  did |= try_read(wait_, waiting);
  while (write_.done) {
    std::error_code ec;
    const std::size_t n = write_now(write_.out.bufs.data(), write_.out.count, ec);
    if (ec != asio::error::would_block) {
      post(std::move(write_.done), ec, n);
      did = true;
      break;
    }
    // The ring was full (any room would have taken a part): wait for a byte of room.
    if (out_.sleep_for_room(1)) {
      waiting = true;
      break;
    }
  }
  return did;
}

}  // namespace optcast::shm
