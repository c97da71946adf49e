// A TCP fabric's connections: what it keeps for each peer, and for each link to and from
// it (a socket, or rings in memory toward a rank of this host: link.hpp). Internal to
// net/tcp.
#pragma once

#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <asio/bind_allocator.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/steady_timer.hpp>

#include "../auth/auth.hpp"
#include "../common/buffer_pool.hpp"
#include "../common/handler_memory.hpp"
#include "../common/op_queue.hpp"
#include "held.hpp"
#include "link.hpp"
#include "wire_format.hpp"

namespace optcast::tcp::impl {

using asio::ip::tcp;

constexpr auto handshake_timeout = std::chrono::seconds(10);

// Where an operation is, in operation::transport.state.
// st_lent: a send by reference, written, whose receiver has not yet copied it.
// st_failing: taken off its queue by fail_communicator, about to complete.
enum : std::uintptr_t { st_none = 0, st_queued, st_writing, st_posted, st_reading, st_posted_any, st_lent, st_failing };

class tcp_fabric;

// Two ranks of a host setting up their rings (net/shm/introduce.hpp) over a unix socket,
// before the link's handshake runs over them (memory.cpp).
struct meeting {
  explicit meeting(const asio::any_io_executor& ex) : sock(ex), timer(ex) {}
  meeting(asio::local::stream_protocol::socket s) : sock(std::move(s)), timer(sock.get_executor()) {}  // NOLINT: accepted
  asio::local::stream_protocol::socket sock;
  asio::steady_timer timer;  // handshake_timeout
  int peer = -1, rail = 0;   // the opener's: whom it meets
  tcp::endpoint fallback;    // the opener's: where it connects if the meeting fails
  shm::introduction me;      // the opener's, kept from its offer to the meeting
  std::optional<shm::offer> mine;
  shm::peer_identity who;
};

struct in_conn : std::enable_shared_from_this<in_conn> {
  explicit in_conn(link s) : sock(std::move(s)), timer(sock.get_executor()) {}
  link sock;
  asio::steady_timer timer;  // handshake deadline
  detail::handler_memory mem;  // for the one read in flight
  auto bound(auto handler) { return asio::bind_allocator(detail::handler_allocator<int>(mem), std::move(handler)); }
  int peer = -1;
  int rail = 0;           // which of the peer's connections to this rank it is
  bool said_bye = false;  // its goodbye came: the end of the stream is no loss
  std::array<std::byte, std::max(hs_bytes, frame_bytes)> hdr{};  // the hello, then frame headers
  std::array<std::byte, reply_bytes> ack{};
  auth::nonce nonce{};  // ours, for its proof
  auth::proof proof{};  // its answer to it
  std::unique_ptr<auth::channel> chan;  // OPTCAST_ENCRYPT
  std::array<std::byte, auth::channel::tag_bytes> mac{};
  std::uint32_t pid = 0;   // the peer's process, when
  bool readable = false;   // this rank read its probe there: it may send by reference
  int introduced_as = -1;  // through memory: the rank the peer named when the rings were set up
  // Duplex (hs_writes_back): this rank may send its own frames to the peer on this
  // connection (the acceptor's side, with the key for them until they are taken), or
  // `reverse`: the connection is this rank's own, read for the frames the peer writes back.
  bool duplex = false, reverse = false;
  std::unique_ptr<auth::channel> reverse_chan;
  bool heard = false;      // a frame came on it
  std::array<std::byte, ref_bytes> ref{};  // the reference being read
  // Receipts written back to the peer: those waiting and those being written.
  std::unique_ptr<auth::channel> back;  // OPTCAST_ENCRYPT: theirs
  std::vector<std::byte> receipts, receipts_writing;
  operation* target = nullptr;     // posted receive being filled in place
  std::error_code cancelled;       // target was cancelled: it ends so once its bytes are in
  tag pending_tag{};               // unexpected payload being read
  call_signature pending_sig{};
  std::uint64_t abort_code = 0;    // of the abort frame being read
  detail::message_buffer payload;
  bool open = true;

  // What one read took from the socket beyond the frame in hand: a read takes every frame
  // that has come (small messages come several to a read), and frames are taken from here
  // before the socket is read again (frames.cpp).
  static constexpr std::size_t rx_capacity = 16 << 10;
  // Not zeroed: only what a read brings is ever read, and zeroing touched four pages a
  // connection at once (a host of 1,024 ranks spent its start-up's seconds faulting them in).
  std::unique_ptr<std::byte[]> rx = std::make_unique_for_overwrite<std::byte[]>(rx_capacity);
  std::size_t rx_begin = 0, rx_end = 0;
  bool drained = false;  // the last read left the socket empty: wait before reading again
  bool in_loop = false;  // read_frame's loop is on the stack: a nested call asks it for more
  bool more = false;
  // Through memory, the fabric whose frames.cpp the ring's kept reader calls (set with it).
  tcp_fabric* owner = nullptr;
  std::shared_ptr<bool> owner_alive;
  bool reading_body = false;  // a payload's rest is being read (asio::async_read)
  std::size_t buffered() const noexcept { return rx_end - rx_begin; }
  // Up to n buffered bytes to dst; how many.
  std::size_t take(std::byte* dst, std::size_t n) noexcept {
    const std::size_t k = std::min(n, buffered());
    if (k != 0 && dst != nullptr) std::memcpy(dst, rx.get() + rx_begin, k);
    rx_begin += k;
    if (rx_begin == rx_end) rx_begin = rx_end = 0;
    return k;
  }
  void compact() noexcept {
    if (rx_begin == 0) return;
    std::memmove(rx.get(), rx.get() + rx_begin, buffered());
    rx_end -= rx_begin;
    rx_begin = 0;
  }
};

struct out_conn {
  // awaiting: its peer answered hs_use_mine; the peer's connection is to carry these.
  enum class state { idle, resolving, connecting, handshake, awaiting, ready, failed };
  explicit out_conn(const asio::any_io_executor& ex) : sock(ex) {}
  state st = state::idle;
  link sock;
  std::string where;  // "host:port", for messages
  std::array<std::byte, hs_bytes> hs{};
  std::array<std::byte, reply_bytes> ack{};
  auth::nonce acceptor_nonce{};
  auth::proof proof{};
  std::unique_ptr<auth::channel> chan;  // OPTCAST_ENCRYPT
  detail::message_buffer sealed;        // the frame being written, encrypted, and its tag
  std::array<std::byte, frame_bytes> hdr{};
  const std::byte* body = nullptr;      // what follows hdr on the wire, and its length
  std::size_t body_len = 0;
  bool offered = false;       // single copy, in its hello; and the acceptor's yes to it:
  bool by_reference = false;  // large messages go as references (frame_ref)
  bool lending = false;       // the frame being written is one
  bool borrowed = false;      // on the peer's connection (duplex), not one this rank opened
  std::array<std::byte, ref_bytes> ref{};
  // The receipts the peer writes back (frame_done), read one at a time.
  std::unique_ptr<auth::channel> back;  // OPTCAST_ENCRYPT
  std::array<std::byte, frame_bytes + auth::channel::tag_bytes> receipt{};
  std::shared_ptr<detail::handler_memory> read_mem = std::make_shared<detail::handler_memory>();
  operation* writing = nullptr;
  std::error_code cancelled;  // writing was cancelled: it ends so once its frame is out
  std::size_t written = 0;  // of header + payload
  detail::op_queue queue;
  // For the one write in flight; shared, so a handler outliving the fabric keeps it.
  std::shared_ptr<detail::handler_memory> mem = std::make_shared<detail::handler_memory>();
};

struct peer_state {
  explicit peer_state(const asio::any_io_executor& ex) {
    out.emplace_back(ex);
    in.resize(1);
  }
  // A connection per rail toward it (one only to a rank of this host, or of one rail),
  // and from it.
  std::vector<out_conn> out;
  std::vector<std::shared_ptr<in_conn>> in;
  std::vector<std::string> where;  // the addresses it listens on, one per rail
  int rails = 1;                   // of `out`, those its operations use (1 toward this host)
  bool in_closed = false;  // a connection of its to us ended: nothing more will come
  std::uint64_t broke = 0;  // when a link with it broke (tcp_fabric::breaks_), 0: none
  int byes = 0;            // of its connections to us, those that said goodbye
  // Its goodbye (frame_bye) on every connection: the newest collective it finished, and
  // that it left in good order; its connections' ends are then no loss.
  std::optional<std::pair<std::uint32_t, call_signature>> left;
  detail::op_queue posted;
  detail::op_queue lent;  // sends by reference awaiting its receipt
  held_messages unexpected;
  std::size_t unexpected_bytes = 0;  // its share of tcp_fabric::unexpected_bytes_
};

}  // namespace optcast::tcp::impl
