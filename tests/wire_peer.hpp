// What the trust tests share: a sink that captures the library's log, and a peer on the
// wire that says what a test tells it to (a stranger, an impostor, a broken peer).
#pragma once

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>
#include <catch2/catch.hpp>

#include "bootstrap/store.hpp"
#include "optcast/fabric.hpp"
#include "optcast/log.hpp"
#include "worlds.hpp"

namespace optcast::testing {

// Collects what the library logs while it lives (from any thread), then puts the
// previous sink back.
class log_capture {
public:
  log_capture()
      : old_(set_log_sink([this](log_level, std::string_view m) {
          std::lock_guard lock(mu_);
          lines_.emplace_back(m);
        })) {}
  ~log_capture() { set_log_sink(std::move(old_)); }
  // The first line containing `what`, or empty.
  std::string find(const std::string& what) {
    std::lock_guard lock(mu_);
    for (auto& l : lines_)
      if (l.find(what) != std::string::npos) return l;
    return {};
  }
  bool seen(const std::string& what) { return !find(what).empty(); }

private:
  std::mutex mu_;
  std::vector<std::string> lines_;
  log_sink old_;
};


// A handshake as a rank without the job secret sends it: `rank` of `size` in job `job`,
// flags, a nonce (zero), no offer of single copy (zero).
inline std::vector<std::byte> handshake(std::uint32_t rank, std::uint32_t size, std::uint64_t job = test_job_id,
                                 std::uint16_t flags = 0) {
  std::vector<std::byte> h(80);
  const std::uint32_t magic = 0x4354504f;
  const std::uint16_t version = 3;
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 2);
  std::memcpy(h.data() + 6, &flags, 2);
  std::memcpy(h.data() + 8, &job, 8);
  std::memcpy(h.data() + 16, &rank, 4);
  std::memcpy(h.data() + 20, &size, 4);
  return h;
}

// A data frame header as the wire carries it (net/tcp/wire_format.hpp): kind, 0, tag,
// length, the signature of no collective (a point-to-point message's).
inline std::vector<std::byte> data_header(std::uint32_t seq, std::uint32_t step, std::uint64_t len) {
  std::vector<std::byte> h(24 + 32);
  const std::uint32_t kind = 0x46444f43;
  const std::uint64_t tg = (std::uint64_t{seq} << 32) | step;
  std::memcpy(h.data(), &kind, 4);
  std::memcpy(h.data() + 8, &tg, 8);
  std::memcpy(h.data() + 16, &len, 8);
  call_signature{}.encode(h.data() + 24);
  return h;
}

// Connects to host:port and writes `bytes`, then keeps the socket open for `hold`. Runs
// on a thread of its own, where Catch's assertions are not safe: what the stranger did
// is checked by the caller (in the log, and in the job it tried to harm).
inline void stranger(const std::string& where, std::vector<std::byte> bytes, std::chrono::milliseconds hold) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  const auto a = store::parse_address(where);
  if (!a) return;
  std::error_code ec;
  s.connect({asio::ip::make_address(a->host, ec), a->port}, ec);
  if (!ec && !bytes.empty()) asio::write(s, asio::buffer(bytes), ec);
  std::this_thread::sleep_for(hold);
}

// Reads up to n bytes, until the peer closes or `wait` passes.
inline std::vector<std::byte> read_some(asio::ip::tcp::socket& s, std::size_t n, std::chrono::milliseconds wait = std::chrono::seconds(5)) {
  std::vector<std::byte> got;
  const auto until = std::chrono::steady_clock::now() + wait;
  pollfd pfd{s.native_handle(), POLLIN, 0};
  while (got.size() < n && std::chrono::steady_clock::now() < until) {
    if (::poll(&pfd, 1, 50) <= 0) continue;
    std::byte buf[256];
    const auto k = ::recv(s.native_handle(), buf, std::min(sizeof buf, n - got.size()), 0);
    if (k <= 0) break;
    got.insert(got.end(), buf, buf + k);
  }
  return got;
}

inline bool closed_within(asio::ip::tcp::socket& s, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  pollfd pfd{s.native_handle(), POLLIN, 0};
  while (std::chrono::steady_clock::now() < until) {
    if (::poll(&pfd, 1, 50) <= 0) continue;
    std::byte buf[256];
    if (::recv(s.native_handle(), buf, sizeof buf, 0) <= 0) return true;
  }
  return false;
}

inline std::uint32_t u32_at(const std::vector<std::byte>& v, std::size_t at) {
  std::uint32_t x = 0;
  if (v.size() >= at + 4) std::memcpy(&x, v.data() + at, 4);
  return x;
}

inline asio::ip::tcp::endpoint endpoint_of(const std::string& where) {
  auto a = store::parse_address(where);
  REQUIRE(a);
  return {asio::ip::make_address(a->host), a->port};
}

inline std::string setup_failure(const std::function<void()>& f) {
  try {
    f();
  } catch (const setup_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace optcast::testing
