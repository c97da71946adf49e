// The TCP fabric's links through memory toward the ranks of its host (net/shm): each rank
// listens on an abstract unix socket; an opener connects there, the two set up their
// rings (the kernel vouching for the peer's user and process), and the link's handshake,
// frames, goodbye and failures then run over the rings exactly as over a socket. Where a
// peer does not answer there (shared memory off on its side, or its listener gone), the
// opener connects over TCP instead.
#include "tcp_fabric.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <bit>

namespace optcast::tcp::impl {

namespace {

using unix_socket = asio::local::stream_protocol::socket;

// How long a peer that connected may take to send its half of the introduction once its
// socket is readable: it sends it in one message, so this bounds only a broken peer.
constexpr int offer_wait_ms = 1000;

}  // namespace

std::string tcp_fabric::memory_name(int r, const std::string& address) const {
  return std::string(1, '\0') + "optcast/" + std::to_string(job_id_) + "/" + std::to_string(r) + "/" + address;
}

std::size_t tcp_fabric::ring_capacity() const noexcept {
  // 256 KiB a ring (below single copy's threshold, a message fits at once) with up to 16
  // ranks on the host, shrinking with more so that a host of many ranks, each talking
  // with log p of them, keeps its rings' memory in bounds (64 KiB at 64 ranks and more).
  const auto here = static_cast<std::size_t>(ranks_on_my_host());
  const std::size_t share = (std::size_t{4} << 20) / std::max<std::size_t>(here, 1);
  return std::clamp(std::bit_floor(share), std::size_t{64} << 10, std::size_t{256} << 10);
}

void tcp_fabric::listen_memory(const std::string& address) {
  if (!cfg_.shm) return;
  try {
    hub_ = std::make_shared<shm::hub>(ex_);
  } catch (const std::exception& e) {
    log(log_level::warn, rank_name(cfg_.rank) + ": no shared memory (" + e.what() + "): the ranks of this host talk over TCP");
    return;
  }
  std::error_code ec;
  auto& a = memory_acceptor_.emplace(ex_);
  const asio::local::stream_protocol::endpoint ep(memory_name(cfg_.rank, address));
  a.open(ep.protocol(), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    // Its peers find nobody there and connect over TCP; its own links go through memory
    // to those that listen.
    log(log_level::warn, rank_name(cfg_.rank) + " cannot listen for shared memory (" + ec.message() +
                             "): the ranks of this host reach it over TCP");
    memory_acceptor_.reset();
    return;
  }
  accept_memory();
}

void tcp_fabric::accept_memory() {
  memory_acceptor_->async_accept([this, alive = alive_](std::error_code ec, unix_socket s) {
    if (!*alive || ec == asio::error::operation_aborted || !memory_acceptor_ || !memory_acceptor_->is_open()) return;
    if (!ec) {
      meet_accepted(std::make_shared<meeting>(std::move(s)));
      return accept_memory();
    }
    // As accept_next: out of descriptors most likely; again shortly.
    log(log_level::warn, rank_name(cfg_.rank) + " cannot accept a shared-memory link (" + ec.message() + "); trying again in 50 ms");
    auto retry = std::make_shared<asio::steady_timer>(ex_, std::chrono::milliseconds(50));
    retry->async_wait([this, alive = alive_, retry](std::error_code e) {
      if (*alive && !e && memory_acceptor_ && memory_acceptor_->is_open()) accept_memory();
    });
  });
}

void tcp_fabric::drop_meeting(const std::shared_ptr<meeting>& m) noexcept {
  std::erase(meetings_, m);
  std::error_code ignored;
  m->timer.cancel();
  m->sock.close(ignored);
}

void tcp_fabric::meet_accepted(const std::shared_ptr<meeting>& m) {
  if (meetings_.size() >= most_handshakes()) drop_meeting(meetings_.front());  // a stranger's, most likely
  const auto who = shm::vouch(m->sock.native_handle(), ::geteuid());
  if (!who) {
    log(log_level::warn, rank_name(cfg_.rank) + " refused a shared-memory link: " + who.error());
    return drop_meeting(m);
  }
  m->who = *who;
  meetings_.push_back(m);
  m->timer.expires_after(handshake_timeout);
  m->timer.async_wait([this, alive = alive_, m](std::error_code ec) {
    if (!*alive || ec) return;
    log(log_level::warn, rank_name(cfg_.rank) + " dropped a shared-memory link from process " + std::to_string(m->who.pid) +
                             " that did not set up its rings within 10 s");
    drop_meeting(m);
  });
  m->sock.async_wait(unix_socket::wait_read, [this, alive = alive_, m](std::error_code ec) {
    if (!*alive || ec || !m->sock.is_open()) return;
    auto refuse_it = [&](const std::string& why) {
      log(log_level::warn, rank_name(cfg_.rank) + " refused a shared-memory link from process " + std::to_string(m->who.pid) + ": " + why);
      drop_meeting(m);
    };
    std::byte peek{};
    if (::recv(m->sock.native_handle(), &peek, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {  // it gave up (closing, or it connected over TCP)
      log(log_level::info, rank_name(cfg_.rank) + ": a shared-memory link from process " + std::to_string(m->who.pid) + " closed before its rings were set up");
      return drop_meeting(m);
    }
    auto theirs = shm::take_offer(m->sock.native_handle(), job_id_, offer_wait_ms);
    if (!theirs) return refuse_it(theirs.error());
    const int r = theirs->rank;
    if (r < 0 || r >= cfg_.size || r == cfg_.rank || theirs->peer_rank != cfg_.rank)
      return refuse_it("it says it is rank " + std::to_string(r) + " meeting rank " + std::to_string(theirs->peer_rank));
    const shm::introduction me{job_id_, cfg_.rank, r, ring_capacity(), ::geteuid()};
    std::optional<shm::offer> mine;
    try {
      mine.emplace(shm::make_offer(me));
    } catch (const std::exception& e) {
      return refuse_it(std::string("no ring for it here: ") + e.what());
    }
    if (auto e = shm::send_offer(m->sock.native_handle(), *mine, hub_->bell()); !e.empty()) return refuse_it(e);
    auto ch = shm::meet(me, std::move(*mine), std::move(*theirs), m->who);
    if (!ch) return refuse_it(ch.error());
    std::error_code rel;
    const int fd = m->sock.release(rel);
    std::erase(meetings_, m);
    m->timer.cancel();
    if (rel) return refuse_it("its socket: " + rel.message());
    log(log_level::debug, rank_name(cfg_.rank) + ": rings with " + rank_name(r) + " (process " + std::to_string(m->who.pid) + "), through shared memory");
    auto c = std::make_shared<in_conn>(link(std::make_shared<shm::stream>(hub_, std::move(*ch), fd)));
    c->introduced_as = r;
    admit_handshake(c);  // the handshake, as on a socket
  });
}

void tcp_fabric::open_memory(int p, int rail, const std::string& address, tcp::endpoint fallback) {
  auto m = std::make_shared<meeting>(ex_);
  m->peer = p;
  m->rail = rail;
  m->fallback = fallback;
  meetings_.push_back(m);
  out(p, rail).st = out_conn::state::connecting;
  m->sock.async_connect(asio::local::stream_protocol::endpoint(memory_name(p, address)), [this, alive = alive_, m](std::error_code ec) {
    if (!*alive || out(m->peer, m->rail).st != out_conn::state::connecting) return;
    // Nobody listens there: its shared memory is off, or it is gone (not worth a warning).
    if (ec) return over_tcp_instead(m, log_level::debug, ec.message());
    const auto who = shm::vouch(m->sock.native_handle(), ::geteuid());
    if (!who) return over_tcp_instead(m, log_level::warn, who.error());
    m->who = *who;
    m->me = shm::introduction{job_id_, cfg_.rank, m->peer, ring_capacity(), ::geteuid()};
    try {
      m->mine.emplace(shm::make_offer(m->me));
    } catch (const std::exception& e) {
      return over_tcp_instead(m, log_level::warn, std::string("no ring for it here: ") + e.what());
    }
    if (auto e = shm::send_offer(m->sock.native_handle(), *m->mine, hub_->bell()); !e.empty())
      return over_tcp_instead(m, log_level::warn, e);
    m->timer.expires_after(handshake_timeout);
    m->timer.async_wait([m](std::error_code e) {
      std::error_code ignored;
      if (!e) m->sock.close(ignored);  // its wait below ends, and the link goes over TCP
    });
    m->sock.async_wait(unix_socket::wait_read, [this, alive, m](std::error_code e) {
      if (!*alive || out(m->peer, m->rail).st != out_conn::state::connecting) return;
      if (e) return over_tcp_instead(m, log_level::warn, "it did not set up its rings within 10 s");
      met(m);
    });
  });
}

void tcp_fabric::over_tcp_instead(const std::shared_ptr<meeting>& m, log_level level, const std::string& why) {
  log(level, rank_name(cfg_.rank) + ": no shared memory with " + rank_name(m->peer) + " (" + why + "): over TCP");
  drop_meeting(m);
  connect_socket(m->peer, m->rail, m->fallback);
}

void tcp_fabric::met(const std::shared_ptr<meeting>& m) {
  m->timer.cancel();
  auto theirs = shm::take_offer(m->sock.native_handle(), job_id_, offer_wait_ms);
  if (!theirs) return over_tcp_instead(m, log_level::warn, theirs.error());
  auto ch = shm::meet(m->me, std::move(*m->mine), std::move(*theirs), m->who);
  if (!ch) return over_tcp_instead(m, log_level::warn, ch.error());
  std::error_code rel;
  const int fd = m->sock.release(rel);
  if (rel) return over_tcp_instead(m, log_level::warn, "its socket: " + rel.message());
  std::erase(meetings_, m);
  const int p = m->peer, rail = m->rail;
  log(log_level::debug, rank_name(cfg_.rank) + ": rings with " + rank_name(p) + " (process " + std::to_string(m->who.pid) + "), through shared memory");
  out(p, rail).sock = link(std::make_shared<shm::stream>(hub_, std::move(*ch), fd));
  send_hello(p, rail);
}

}  // namespace optcast::tcp::impl
