#include "optcast/net/tcp.hpp"

#include <array>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include <asio/bind_allocator.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include "../bootstrap/wire.hpp"
#include "../common/buffer_pool.hpp"
#include "../common/deadlines.hpp"
#include "../common/handler_memory.hpp"
#include "../common/op_queue.hpp"
#include "optcast/log.hpp"

namespace optcast::tcp {

using asio::ip::tcp;

namespace {

// Handshake: u32 magic, u16 version, u16 flags, u64 job id, u32 rank, u32 size.
constexpr std::uint32_t hs_magic = 0x4354504f;  // "OPTC"
constexpr std::uint16_t hs_version = 1;
constexpr std::size_t hs_bytes = 24;
// Answer: u32 magic, u32 status.
constexpr std::size_t ack_bytes = 8;
enum hs_status : std::uint32_t { hs_ok = 0, hs_bad_version, hs_bad_job, hs_bad_rank, hs_bad_size, hs_duplicate };

const char* status_text(std::uint32_t s) {
  switch (s) {
    case hs_bad_version: return "protocol version differs";
    case hs_bad_job: return "job id differs (a process of another job?)";
    case hs_bad_rank: return "rank out of range";
    case hs_bad_size: return "job size differs";
    case hs_duplicate: return "that rank is already connected";
    default: return "unknown refusal";
  }
}

// Frame header: u32 kind, u32 flags, u64 tag, u64 payload length.
constexpr std::uint32_t frame_data = 0x46444f43;  // "CODF"
// Sent by a rank that fails, before it closes its connections: the tag holds its error
// code, the payload why; receivers fail with peer_lost and that reason.
constexpr std::uint32_t frame_abort = 0x41444f43;  // "CODA"
constexpr std::size_t max_abort_text = 2000;
constexpr std::size_t frame_bytes = 24;
constexpr std::uint64_t max_frame = std::uint64_t{1} << 40;
constexpr auto handshake_timeout = std::chrono::seconds(10);

// Where an operation is, in operation::fabric_state.
enum : std::uintptr_t { st_none = 0, st_queued, st_writing, st_posted, st_reading };

struct unexpected_msg {
  tag tg;
  std::vector<std::byte> data;
};

class tcp_fabric;

struct in_conn {
  explicit in_conn(tcp::socket s) : sock(std::move(s)), timer(sock.get_executor()) {}
  tcp::socket sock;
  asio::steady_timer timer;  // handshake deadline
  detail::handler_memory mem;  // for the one read in flight
  auto bound(auto handler) { return asio::bind_allocator(detail::handler_allocator<int>(mem), std::move(handler)); }
  int peer = -1;
  std::array<std::byte, std::max(hs_bytes, frame_bytes)> hdr{};
  std::array<std::byte, ack_bytes> ack{};
  operation* target = nullptr;     // posted receive being filled in place
  tag pending_tag{};               // unexpected payload being read
  std::vector<std::byte> payload;
  bool open = true;
};

struct out_conn {
  enum class state { idle, resolving, connecting, handshake, ready, failed };
  explicit out_conn(asio::io_context& io) : sock(io) {}
  state st = state::idle;
  tcp::socket sock;
  std::string where;  // "host:port", for messages
  std::array<std::byte, hs_bytes> hs{};
  std::array<std::byte, ack_bytes> ack{};
  std::array<std::byte, frame_bytes> hdr{};
  operation* writing = nullptr;
  std::size_t written = 0;  // of header + payload
  detail::op_queue queue;
  // For the one write in flight; shared, so a handler outliving the fabric keeps it.
  std::shared_ptr<detail::handler_memory> mem = std::make_shared<detail::handler_memory>();
};

struct peer_state {
  explicit peer_state(asio::io_context& io) : out(io) {}
  out_conn out;
  std::shared_ptr<in_conn> in;
  bool in_closed = false;  // its connection to us ended: nothing more will come
  detail::op_queue posted;
  std::vector<unexpected_msg> unexpected;  // arrival order; short, and a deque would allocate chunks
};

// The one-port model has a rank send one message at a time. With the kernel's send
// buffer (autotuned to megabytes) a send "completes" long before its bytes are on the
// wire, the next round's send then shares the link with it, and a pipelined schedule
// slows to the pace of shared links. Keeping at most this many unsent bytes queued makes
// a send complete about when its data has left, while small messages still complete at
// once. OPTCAST_TCP_NOTSENT_LOWAT overrides it (0: the kernel's default behaviour).
std::size_t notsent_lowat() {
  static const std::size_t v = [] {
    const char* e = std::getenv("OPTCAST_TCP_NOTSENT_LOWAT");
    return e ? static_cast<std::size_t>(std::strtoull(e, nullptr, 0)) : std::size_t{128} << 10;
  }();
  return v;
}

// Loopback has no link to share (and the extra wakeups cost it throughput), so only
// connections to other hosts are limited.
void limit_unsent(tcp::socket& s) {
  const int v = static_cast<int>(notsent_lowat());
  std::error_code ec;
  const auto peer = s.remote_endpoint(ec);
  if (v > 0 && !ec && !peer.address().is_loopback())
    ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof v);
}

std::string rank_name(int r) { return "rank " + std::to_string(r); }

std::string endpoint_text(const tcp::socket& s) {
  std::error_code ec;
  auto ep = s.remote_endpoint(ec);
  return ec ? std::string("?") : ep.address().to_string() + ":" + std::to_string(ep.port());
}

class tcp_fabric final : public fabric {
public:
  tcp_fabric(asio::io_context& io, const config& cfg)
      : io_(io), cfg_(cfg), acceptor_(io), deadlines_(io, [this](std::uint32_t seq) { expire(seq); }) {
    peers_.reserve(static_cast<std::size_t>(cfg.size));
    for (int r = 0; r < cfg.size; ++r) peers_.emplace_back(io);
  }

  ~tcp_fabric() override { close(); }

  void bootstrap() {
    job_ = std::make_unique<job>(io_, cfg_);
    job_id_ = job_->id();
    job_->on_failure(
        [this, alive = alive_](int r) {
          if (*alive && !closing_) abort(make_error_code(errc::peer_lost), rank_name(r) + " died (its store connection closed without goodbye)");
        },
        [this, alive = alive_](std::string why) {
          if (*alive && !closing_) abort(make_error_code(errc::peer_lost), why);
        });
    const std::string& host = job_->host();
    std::error_code ec;
    const auto addr = asio::ip::make_address(host, ec);
    if (ec) throw setup_error(ec, "OPTCAST_HOST '" + host + "' is not an IP address of this host");
    tcp::endpoint ep(addr, 0);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw setup_error(ec, "cannot listen on " + host + ": " + ec.message());
    listen_ = host + ":" + std::to_string(acceptor_.local_endpoint().port());
    accept_next();
    if (auto r = job_->store().set_wait(addr_key(cfg_.rank), listen_, cfg_.bootstrap_timeout); !r)
      throw setup_error(r.error(), "cannot register with the store: " + r.error().message());
    log(log_level::debug, rank_name(cfg_.rank) + " of job " + std::to_string(job_id_) + " listens on " + listen_);
  }

  int rank() const noexcept override { return cfg_.rank; }
  int size() const noexcept override { return cfg_.size; }
  int ports() const noexcept override { return cfg_.ports; }
  std::string_view name() const noexcept override { return "tcp"; }
  const std::string& listen_address() const noexcept { return listen_; }
  connection_counts counts() const noexcept { return counts_; }

  bool start(operation& op) noexcept override {
    if (auto ec = check_op(*this, op)) return fail_now(op, ec, "bad operation");
    if (failure()) return fail_now(op, failure(), failure_detail());
    auto& pe = peer(op.peer);
    op.fabric_state = st_none;
    return op.kind == op_kind::send ? start_send(op, pe) : start_recv(op, pe);
  }

  void cancel(operation& op, std::error_code ec) noexcept override {
    if (op.finished) return;
    auto& pe = peer(op.peer);
    switch (op.fabric_state) {
      case st_queued:
        pe.out.queue.remove(op);
        break;
      case st_posted:
        pe.posted.remove(op);
        break;
      case st_writing:
        // Half a frame may be on the wire: the connection cannot carry anything more.
        pe.out.writing = nullptr;
        fail_out(op.peer, ec, "cancelled in the middle of a frame");
        break;
      case st_reading:
        if (pe.in) pe.in->target = nullptr;
        drop_in(op.peer, ec, "cancelled in the middle of a frame");
        break;
      default:
        return;
    }
    op.fabric_state = st_none;
    if (!op.finished) op.complete(ec);
  }

  std::uint64_t arm_deadline(std::uint32_t seq, std::chrono::nanoseconds t) override {
    return deadlines_.arm(seq, t);
  }
  void disarm_deadline(std::uint64_t token) noexcept override { deadlines_.disarm(token); }

  void run_until(stop_predicate done) override {
    while (!done()) {
      if (io_.stopped()) io_.restart();
      io_.run_one();
    }
  }

  // Fails everything pending and closes every data connection, so that peers waiting
  // on this rank fail at once too (they see the connection end) rather than at their
  // deadlines.
  void abort(std::error_code ec, std::string detail) noexcept override {
    note_failure(ec, detail);
    if (!closing_) tell_peers(failure_detail());
    auto alive = alive_;
    for (int r = 0; r < cfg_.size && *alive; ++r) {
      if (r == cfg_.rank) continue;
      fail_out(r, ec, detail);
      drop_in(r, ec, detail);
    }
  }

  // Best effort, without blocking: an abort frame on every idle connection, so that the
  // peers' errors name the cause rather than "rank r closed its connection".
  void tell_peers(const std::string& why) noexcept {
    const std::string text = rank_name(cfg_.rank) + " failed: " + why.substr(0, max_abort_text - 40);
    std::array<std::byte, frame_bytes> h{};
    wire::put_u32(h.data(), frame_abort);
    wire::put_u64(h.data() + 8, static_cast<std::uint64_t>(failure().value()));
    wire::put_u64(h.data() + 16, text.size());
    for (int r = 0; r < cfg_.size; ++r) {
      auto& out = peer(r).out;
      if (r == cfg_.rank || out.st != out_conn::state::ready || out.writing) continue;
      std::array<asio::const_buffer, 2> bufs{asio::buffer(h), asio::buffer(text)};
      std::error_code ignored;
      out.sock.write_some(bufs, ignored);  // a partial frame is harmless: the socket closes next
    }
  }

  void close() noexcept {
    if (closing_) return;
    closing_ = true;
    abort(make_error_code(errc::cancelled), "the communicator was closed");
    std::error_code ignored;
    acceptor_.close(ignored);
    for (auto& c : handshaking_) c->sock.close(ignored);
    handshaking_.clear();
    if (job_) job_->leave();
    *alive_ = false;
    job_.reset();
  }

private:
  static std::string addr_key(int r) { return "optcast/addr/" + std::to_string(r); }
  peer_state& peer(int r) { return peers_[static_cast<std::size_t>(r)]; }

  bool fail_now(operation& op, std::error_code ec, const std::string& why) {
    note_error(why + ": " + describe_op(op));
    return op.finish_now(ec);
  }

  // ------------------------------------------------------------------ sending

  bool start_send(operation& op, peer_state& pe) {
    auto& out = pe.out;
    if (out.st == out_conn::state::failed)
      return fail_now(op, make_error_code(errc::peer_lost), "the connection to " + rank_name(op.peer) + " failed");
    if (out.st == out_conn::state::ready && !out.writing && out.queue.empty()) {
      // Most frames fit the socket buffer: write now and finish without a trip through
      // the event loop.
      fill_header(out, op);
      std::error_code ec;
      const std::size_t n = out.sock.write_some(frame_buffers(out, op, 0), ec);
      if (ec && ec != asio::error::would_block && ec != asio::error::try_again) {
        fail_out(op.peer, ec, "writing to " + rank_name(op.peer) + ": " + ec.message());
        return fail_now(op, make_error_code(errc::peer_lost), "writing to " + rank_name(op.peer) + ": " + ec.message());
      }
      if (n == frame_bytes + op.size) return op.finish_now({});
      out.writing = &op;
      out.written = n;
      op.fabric_state = st_writing;
      continue_write(op.peer);
      return false;
    }
    op.fabric_state = st_queued;
    out.queue.push_back(op);
    if (out.st == out_conn::state::idle) open_out(op.peer);
    return false;
  }

  void fill_header(out_conn& out, const operation& op) {
    wire::put_u32(out.hdr.data(), frame_data);
    wire::put_u32(out.hdr.data() + 4, 0);
    wire::put_u64(out.hdr.data() + 8, op.tg.packed());
    wire::put_u64(out.hdr.data() + 16, op.size);
  }

  static std::array<asio::const_buffer, 2> frame_buffers(const out_conn& out, const operation& op, std::size_t skip) {
    if (skip < frame_bytes)
      return {asio::buffer(out.hdr.data() + skip, frame_bytes - skip), asio::buffer(op.data, op.size)};
    return {asio::buffer(op.data + (skip - frame_bytes), op.size - (skip - frame_bytes)), asio::const_buffer()};
  }

  void continue_write(int p) {
    auto& out = peer(p).out;
    asio::async_write(out.sock, frame_buffers(out, *out.writing, out.written),
                      asio::bind_allocator(detail::handler_allocator<int>(*out.mem),
                      [this, alive = alive_, p, mem = out.mem](std::error_code ec, std::size_t) {
                        if (!*alive) return;
                        auto& o = peer(p).out;
                        operation* op = std::exchange(o.writing, nullptr);
                        if (ec) {
                          if (op) {
                            op->fabric_state = st_none;
                            note_error("writing to " + rank_name(p) + ": " + ec.message());
                            op->complete(make_error_code(errc::peer_lost));
                          }
                          if (*alive) fail_out(p, make_error_code(errc::peer_lost), "writing to " + rank_name(p) + ": " + ec.message());
                          return;
                        }
                        if (op) {
                          op->fabric_state = st_none;
                          op->complete({});
                        }
                        if (*alive) write_next(p);
                      }));
  }

  void write_next(int p) {
    auto& out = peer(p).out;
    if (out.writing || out.st != out_conn::state::ready) return;
    operation* op = out.queue.pop_front();
    if (!op) return;
    fill_header(out, *op);
    out.writing = op;
    out.written = 0;
    op->fabric_state = st_writing;
    continue_write(p);
  }

  // Connection on first use: ask the store where the peer listens, connect, handshake.
  void open_out(int p) {
    auto& out = peer(p).out;
    out.st = out_conn::state::resolving;
    job_->store().get(addr_key(p), [this, alive = alive_, p](result<std::string> a) {
      if (!*alive) return;
      auto& o = peer(p).out;
      if (o.st != out_conn::state::resolving) return;
      if (!a) return fail_out(p, make_error_code(errc::peer_lost), "the store does not know where " + rank_name(p) + " listens");
      auto where = store::parse_address(*a);
      std::error_code ec;
      asio::ip::address ip;
      if (where) ip = asio::ip::make_address(where->host, ec);
      if (!where || ec) return fail_out(p, make_error_code(errc::protocol_violation), "bad address '" + *a + "' for " + rank_name(p));
      o.where = *a;
      o.st = out_conn::state::connecting;
      o.sock.async_connect(tcp::endpoint(ip, where->port), [this, alive, p](std::error_code ec2) {
        if (!*alive) return;
        if (ec2) return fail_out(p, make_error_code(errc::peer_lost), "cannot connect to " + rank_name(p) + " at " + peer(p).out.where + ": " + ec2.message());
        send_hello(p);
      });
    });
  }

  void send_hello(int p) {
    auto& out = peer(p).out;
    out.st = out_conn::state::handshake;
    std::error_code ec;
    out.sock.set_option(tcp::no_delay(true), ec);
    wire::put_u32(out.hs.data(), hs_magic);
    wire::put_u16(out.hs.data() + 4, hs_version);
    wire::put_u16(out.hs.data() + 6, 0);
    wire::put_u64(out.hs.data() + 8, job_id_);
    wire::put_u32(out.hs.data() + 16, static_cast<std::uint32_t>(cfg_.rank));
    wire::put_u32(out.hs.data() + 20, static_cast<std::uint32_t>(cfg_.size));
    asio::async_write(out.sock, asio::buffer(out.hs), [this, alive = alive_, p](std::error_code e, std::size_t) {
      if (!*alive) return;
      if (e) return fail_out(p, make_error_code(errc::peer_lost), "handshake with " + rank_name(p) + ": " + e.message());
      auto& o = peer(p).out;
      asio::async_read(o.sock, asio::buffer(o.ack), [this, alive, p](std::error_code e2, std::size_t) {
        if (!*alive) return;
        auto& o2 = peer(p).out;
        if (e2) return fail_out(p, make_error_code(errc::peer_lost), "handshake with " + rank_name(p) + ": " + e2.message());
        const auto status = wire::get_u32(o2.ack.data() + 4);
        if (wire::get_u32(o2.ack.data()) != hs_magic || status != hs_ok)
          return fail_out(p, make_error_code(errc::protocol_violation),
                          rank_name(p) + " at " + o2.where + " refused the connection: " + status_text(status));
        std::error_code ignored;
        o2.sock.non_blocking(true, ignored);
        limit_unsent(o2.sock);
        o2.st = out_conn::state::ready;
        ++counts_.outgoing;
        write_next(p);
      });
    });
  }

  // The connection to p cannot carry more: fail what waits on it.
  void fail_out(int p, std::error_code ec, const std::string& why) {
    auto& out = peer(p).out;
    if (out.st != out_conn::state::failed) {
      out.st = out_conn::state::failed;
      std::error_code ignored;
      out.sock.close(ignored);
    }
    auto alive = alive_;
    if (operation* op = std::exchange(out.writing, nullptr)) {
      op->fabric_state = st_none;
      note_error(why + ": " + describe_op(*op));
      op->complete(ec);
      if (!*alive) return;
    }
    while (operation* op = out.queue.pop_front()) {
      op->fabric_state = st_none;
      note_error(why + ": " + describe_op(*op));
      op->complete(ec);
      if (!*alive) return;
    }
  }

  // ------------------------------------------------------------------ receiving

  bool start_recv(operation& op, peer_state& pe) {
    for (auto it = pe.unexpected.begin(); it != pe.unexpected.end(); ++it) {
      if (it->tg != op.tg) continue;
      std::error_code ec;
      if (it->data.size() != op.size) {
        note_error("size mismatch: " + describe_op(op) + " got a message of " + std::to_string(it->data.size()) + " B");
        ec = make_error_code(errc::size_mismatch);
      } else if (op.size) {
        std::memcpy(op.data, it->data.data(), op.size);
      }
      give_back(std::move(it->data));
      pe.unexpected.erase(it);
      return op.finish_now(ec);
    }
    if (pe.in_closed)
      return fail_now(op, make_error_code(errc::peer_lost), rank_name(op.peer) + " closed its connection");
    op.fabric_state = st_posted;
    pe.posted.push_back(op);
    return false;
  }

  void fail_posted(int p, std::error_code ec, const std::string& why) {
    auto alive = alive_;
    auto& pe = peer(p);
    while (operation* op = pe.posted.pop_front()) {
      op->fabric_state = st_none;
      note_error(why + ": " + describe_op(*op));
      op->complete(ec);
      if (!*alive) return;
    }
  }

  void accept_next() {
    acceptor_.async_accept([this, alive = alive_](std::error_code ec, tcp::socket s) {
      if (!*alive || ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
      if (!ec) {
        auto c = std::make_shared<in_conn>(std::move(s));
        handshaking_.push_back(c);
        read_hello(c);
      }
      accept_next();
    });
  }

  void end_handshake(const std::shared_ptr<in_conn>& c) { std::erase(handshaking_, c); }

  void refuse(const std::shared_ptr<in_conn>& c, std::uint32_t status, const std::string& why) {
    log(log_level::warn, rank_name(cfg_.rank) + " refused a connection from " + endpoint_text(c->sock) + ": " + why);
    end_handshake(c);
    std::error_code ignored;
    c->timer.cancel();
    if (status == hs_ok) {  // not even an optcast peer: no answer
      c->sock.close(ignored);
      return;
    }
    wire::put_u32(c->ack.data(), hs_magic);
    wire::put_u32(c->ack.data() + 4, status);
    asio::async_write(c->sock, asio::buffer(c->ack), [c](std::error_code, std::size_t) {
      std::error_code e;
      c->sock.close(e);
    });
  }

  void read_hello(const std::shared_ptr<in_conn>& c) {
    c->timer.expires_after(handshake_timeout);
    c->timer.async_wait([this, alive = alive_, c](std::error_code ec) {
      if (!*alive || ec) return;
      log(log_level::warn, rank_name(cfg_.rank) + " dropped a connection from " + endpoint_text(c->sock) + " that sent no handshake within 10 s");
      end_handshake(c);
      std::error_code ignored;
      c->sock.close(ignored);
    });
    asio::async_read(c->sock, asio::buffer(c->hdr.data(), hs_bytes), [this, alive = alive_, c](std::error_code ec, std::size_t) {
      if (!*alive) return;
      if (ec) {
        if (ec != asio::error::operation_aborted)
          log(log_level::info, rank_name(cfg_.rank) + ": a connection from " + endpoint_text(c->sock) + " closed during the handshake");
        end_handshake(c);
        return;
      }
      const std::byte* h = c->hdr.data();
      if (wire::get_u32(h) != hs_magic) return refuse(c, hs_ok, "not an optcast peer (bad magic)");
      if (wire::get_u16(h + 4) != hs_version)
        return refuse(c, hs_bad_version, "protocol version " + std::to_string(wire::get_u16(h + 4)) + ", this is " + std::to_string(hs_version));
      if (wire::get_u64(h + 8) != job_id_) return refuse(c, hs_bad_job, "job id " + std::to_string(wire::get_u64(h + 8)) + " is not this job's");
      const auto r = wire::get_u32(h + 16);
      if (wire::get_u32(h + 20) != static_cast<std::uint32_t>(cfg_.size))
        return refuse(c, hs_bad_size, "job size " + std::to_string(wire::get_u32(h + 20)) + ", this job has " + std::to_string(cfg_.size));
      if (r >= static_cast<std::uint32_t>(cfg_.size) || static_cast<int>(r) == cfg_.rank)
        return refuse(c, hs_bad_rank, "rank " + std::to_string(r) + " out of range");
      auto& pe = peer(static_cast<int>(r));
      if (pe.in && pe.in->open) return refuse(c, hs_duplicate, rank_name(static_cast<int>(r)) + " is already connected");
      end_handshake(c);
      c->timer.cancel();
      c->peer = static_cast<int>(r);
      pe.in = c;
      pe.in_closed = false;
      ++counts_.incoming;
      std::error_code ignored;
      c->sock.set_option(tcp::no_delay(true), ignored);
      wire::put_u32(c->ack.data(), hs_magic);
      wire::put_u32(c->ack.data() + 4, hs_ok);
      asio::async_write(c->sock, asio::buffer(c->ack), [c](std::error_code, std::size_t) {});
      read_frame(c);
    });
  }

  void read_frame(const std::shared_ptr<in_conn>& c) {
    asio::async_read(c->sock, asio::buffer(c->hdr.data(), frame_bytes), c->bound([this, alive = alive_, c](std::error_code ec, std::size_t) {
      if (!*alive || !c->open) return;
      if (ec) return in_ended(c, ec == asio::error::eof ? "" : ec.message());
      const std::byte* h = c->hdr.data();
      const std::uint64_t len = wire::get_u64(h + 16);
      const tag tg = tag::unpack(wire::get_u64(h + 8));
      if (wire::get_u32(h) == frame_abort && len <= max_abort_text) return read_abort(c, len);
      if (wire::get_u32(h) != frame_data || wire::get_u32(h + 4) != 0 || len > max_frame)
        return protocol_error(c, "malformed frame header");
      auto& pe = peer(c->peer);
      operation* op = pe.posted.find([&](const operation& o) { return o.tg == tg; });
      if (op) {
        pe.posted.remove(*op);
        if (len != op->size) {
          note_error("size mismatch: " + describe_op(*op) + " got a message of " + std::to_string(len) + " B");
          op->fabric_state = st_none;
          op->complete(make_error_code(errc::size_mismatch));
          if (!*alive) return;
          return read_payload(c, tg, len);  // keep the stream in step: read it aside
        }
        op->fabric_state = st_reading;
        c->target = op;
        return read_into(c, len);
      }
      read_payload(c, tg, len);
    }));
  }

  // The payload goes straight into the posted receive.
  void read_into(const std::shared_ptr<in_conn>& c, std::uint64_t len) {
    if (len == 0) return finish_into(c);
    asio::async_read(c->sock, asio::buffer(c->target->data, len), c->bound([this, alive = alive_, c](std::error_code ec, std::size_t) {
      if (!*alive || !c->open) return;
      if (ec) return in_ended(c, ec.message());
      finish_into(c);
    }));
  }
  void finish_into(const std::shared_ptr<in_conn>& c) {
    auto alive = alive_;
    if (operation* op = std::exchange(c->target, nullptr)) {
      op->fabric_state = st_none;
      op->complete({});
      if (!*alive) return;
    }
    if (c->open) read_frame(c);
  }

  // No receive posted yet: buffer the payload until one is.
  void read_payload(const std::shared_ptr<in_conn>& c, tag tg, std::uint64_t len) {
    c->pending_tag = tg;
    c->payload = take_buffer(len);
    if (len == 0) return stash(c);
    asio::async_read(c->sock, asio::buffer(c->payload), c->bound([this, alive = alive_, c](std::error_code ec, std::size_t) {
      if (!*alive || !c->open) return;
      if (ec) return in_ended(c, ec.message());
      stash(c);
    }));
  }
  void stash(const std::shared_ptr<in_conn>& c) {
    auto& pe = peer(c->peer);
    // A receive may have been posted while the payload was arriving.
    if (operation* op = pe.posted.find([&](const operation& o) { return o.tg == c->pending_tag; })) {
      pe.posted.remove(*op);
      std::error_code ec;
      if (op->size != c->payload.size()) {
        note_error("size mismatch: " + describe_op(*op) + " got a message of " + std::to_string(c->payload.size()) + " B");
        ec = make_error_code(errc::size_mismatch);
      } else if (op->size) {
        std::memcpy(op->data, c->payload.data(), op->size);
      }
      give_back(std::move(c->payload));
      op->fabric_state = st_none;
      auto alive = alive_;
      op->complete(ec);
      if (!*alive) return;
    } else {
      pe.unexpected.push_back({c->pending_tag, std::move(c->payload)});
    }
    if (c->open) read_frame(c);
  }

  void read_abort(const std::shared_ptr<in_conn>& c, std::uint64_t len) {
    c->payload.resize(len);
    asio::async_read(c->sock, asio::buffer(c->payload), c->bound([this, alive = alive_, c](std::error_code ec, std::size_t) {
      if (!*alive || !c->open) return;
      const int p = c->peer;
      if (ec) return in_ended(c, ec.message());
      const std::string why(reinterpret_cast<const char*>(c->payload.data()), c->payload.size());
      abort(make_error_code(errc::peer_lost), why.empty() ? rank_name(p) + " failed" : why);
    }));
  }

  void protocol_error(const std::shared_ptr<in_conn>& c, const std::string& what) {
    const std::string why = what + " from " + rank_name(c->peer);
    log(log_level::error, rank_name(cfg_.rank) + ": " + why);
    abort(make_error_code(errc::protocol_violation), why);
  }

  // The peer's stream to us ended (cleanly between frames when `error` is empty).
  void in_ended(const std::shared_ptr<in_conn>& c, const std::string& error) {
    const int p = c->peer;
    const std::string why = error.empty() ? rank_name(p) + " closed its connection"
                                          : "the connection from " + rank_name(p) + " failed: " + error;
    drop_in(p, make_error_code(errc::peer_lost), why);
  }

  // Nothing more will come from p: what waits for it fails with ec.
  void drop_in(int p, std::error_code ec, const std::string& why) {
    auto& pe = peer(p);
    pe.in_closed = true;
    auto alive = alive_;
    if (auto c = pe.in) {
      c->open = false;
      std::error_code ignored;
      c->sock.close(ignored);
      if (operation* op = std::exchange(c->target, nullptr)) {
        op->fabric_state = st_none;
        note_error(why + ": " + describe_op(*op));
        op->complete(ec);
        if (!*alive) return;
      }
    }
    fail_posted(p, ec, why);
  }

  void expire(std::uint32_t seq) {
    std::string waiting;
    for (auto& pe : peers_) {
      for (operation* op = pe.posted.front(); op; op = op->next)
        if (op->tg.seq == seq) waiting += "; " + describe_op(*op);
      for (operation* op = pe.out.queue.front(); op; op = op->next)
        if (op->tg.seq == seq) waiting += "; " + describe_op(*op);
      if (pe.out.writing && pe.out.writing->tg.seq == seq) waiting += "; " + describe_op(*pe.out.writing);
      if (pe.in && pe.in->target && pe.in->target->tg.seq == seq) waiting += "; " + describe_op(*pe.in->target);
    }
    abort(make_error_code(errc::timeout), "deadline of collective " + std::to_string(seq) + " passed on " +
                                              rank_name(cfg_.rank) + (waiting.empty() ? "" : " waiting for" + waiting.substr(1)));
  }

  std::vector<std::byte> take_buffer(std::size_t n) { return pool_.take(n); }
  void give_back(std::vector<std::byte>&& b) { pool_.give_back(std::move(b)); }

  asio::io_context& io_;
  config cfg_;
  std::uint64_t job_id_ = 0;
  std::unique_ptr<job> job_;
  tcp::acceptor acceptor_;
  std::string listen_;
  std::vector<peer_state> peers_;
  std::vector<std::shared_ptr<in_conn>> handshaking_;
  detail::buffer_pool pool_;
  connection_counts counts_;
  bool closing_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  detail::deadline_table deadlines_;
};

}  // namespace

std::shared_ptr<optcast::fabric> connect(asio::io_context& io, const config& cfg) {
  auto f = std::make_shared<tcp_fabric>(io, cfg);
  f->bootstrap();
  return f;
}

std::string listen_address(const optcast::fabric& f) {
  auto* t = dynamic_cast<const tcp_fabric*>(&f);
  return t ? t->listen_address() : std::string();
}

connection_counts connections(const optcast::fabric& f) {
  auto* t = dynamic_cast<const tcp_fabric*>(&f);
  return t ? t->counts() : connection_counts{};
}

}  // namespace optcast::tcp
