// What carries the frames between two ranks: a TCP socket, or toward a rank of this host a
// shared-memory stream (net/shm). The frames, handshake, goodbye and failures are the same
// on either; only how a connection is made and what its end looks like differ. A link
// has the members asio::async_read and async_write use, and those the fabric uses on a
// socket, each doing what it does on a socket.
#pragma once

#include <cstdio>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include <asio/any_io_executor.hpp>
#include <asio/ip/tcp.hpp>

#include "../shm/stream.hpp"

namespace optcast::tcp::impl {

class link {
public:
  using executor_type = asio::any_io_executor;
  using wait_type = asio::socket_base::wait_type;
  using tcp = asio::ip::tcp;

  explicit link(const asio::any_io_executor& ex) : sock_(ex) {}
  explicit link(tcp::socket s) : sock_(std::move(s)) {}
  explicit link(std::shared_ptr<shm::stream> s) : sock_(s->get_executor()), shm_(std::move(s)) {}
  link(link&& o) noexcept : sock_(std::move(o.sock_)), shm_(std::move(o.shm_)), reading_(std::exchange(o.reading_, false)) {}
  link& operator=(link&& o) noexcept {
    if (this != &o) {
      stop_reading();
      sock_ = std::move(o.sock_);
      shm_ = std::move(o.shm_);
      reading_ = std::exchange(o.reading_, false);
    }
    return *this;
  }
  ~link() { stop_reading(); }

  executor_type get_executor() { return sock_.get_executor(); }
  // Through memory, not a socket.
  bool in_memory() const noexcept { return shm_ != nullptr; }
  // The socket itself, for what only TCP has (connecting, its options).
  tcp::socket& socket() noexcept { return sock_; }
  const shm::stream* memory() const noexcept { return shm_.get(); }
  bool is_open() const noexcept { return shm_ ? shm_->is_open() : sock_.is_open(); }

  template <class B>
  std::size_t read_some(const B& b, std::error_code& ec) {
    return shm_ ? shm_->read_some(b, ec) : sock_.read_some(b, ec);
  }
  template <class B>
  std::size_t write_some(const B& b, std::error_code& ec) {
    return shm_ ? shm_->write_some(b, ec) : sock_.write_some(b, ec);
  }
  template <class B, class Handler>
  void async_read_some(const B& b, Handler&& h) {
    if (shm_) shm_->async_read_some(b, std::forward<Handler>(h));
    else sock_.async_read_some(b, std::forward<Handler>(h));
  }
  template <class B, class Handler>
  void async_write_some(const B& b, Handler&& h) {
    if (shm_) shm_->async_write_some(b, std::forward<Handler>(h));
    else sock_.async_write_some(b, std::forward<Handler>(h));
  }
  template <class Handler>
  void async_wait(wait_type w, Handler&& h) {
    if (shm_) shm_->async_wait(w, std::forward<Handler>(h));
    else sock_.async_wait(w, std::forward<Handler>(h));
  }

  // Through memory: `ready(ctx)` runs whenever bytes wait and no read does
  // (shm::stream::keep_reading), until this link closes, ends or goes.
  void keep_reading(void (*ready)(void*), void* ctx) {
    if (!shm_) return;
    reading_ = true;
    shm_->keep_reading(ready, ctx);
  }

  // This end only, as closing one descriptor of a socket: a link shared (share()) stays
  // open for the other holder.
  void close(std::error_code& ec) {
    ec = {};
    stop_reading();
    if (shm_) {
      shm_.reset();  // the last holder's reset closes the stream (its destructor)
      return;
    }
    sock_.close(ec);
  }
  // Ends the connection for both ends at once, whoever else holds it.
  void end() noexcept {
    std::error_code ignored;
    stop_reading();
    if (shm_) {
      shm_->close();
      shm_.reset();
      return;
    }
    if (sock_.is_open()) sock_.shutdown(tcp::socket::shutdown_both, ignored);
    sock_.close(ignored);
  }
  // `to` becomes a second holder of this connection (a second descriptor of a socket):
  // each half of a connection used both ways keeps a lifetime of its own.
  std::error_code share(link& to) const {
    if (shm_) {
      to.shm_ = shm_;
      return {};
    }
    std::error_code ec;
    const auto protocol = sock_.local_endpoint(ec).protocol();
    if (ec) return ec;
    const int fd = ::fcntl(const_cast<tcp::socket&>(sock_).native_handle(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return {errno, std::system_category()};
    to.sock_.assign(protocol, fd, ec);
    if (ec) ::close(fd);
    else to.sock_.non_blocking(true, ec);
    return ec;
  }
  // Reads and writes that find nothing to do say would_block rather than wait (a
  // shared-memory stream never waits in them).
  void non_blocking(std::error_code& ec) {
    ec = {};
    if (!shm_) sock_.non_blocking(true, ec);
  }
  // Who is at the other end, for messages.
  std::string remote() const {
    if (shm_) return "process " + std::to_string(shm_->peer().pid) + " (shared memory)";
    std::error_code ec;
    auto ep = sock_.remote_endpoint(ec);
    return ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

private:
  void stop_reading() noexcept {
    if (std::exchange(reading_, false) && shm_) shm_->keep_reading(nullptr, nullptr);
  }
  tcp::socket sock_;
  std::shared_ptr<shm::stream> shm_;
  bool reading_ = false;  // this holder set the stream's kept reader
};

}  // namespace optcast::tcp::impl
