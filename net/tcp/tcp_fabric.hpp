// The TCP fabric's one class, shared by the files of net/tcp: tcp.cpp (bootstrap, the
// operations' lifecycle, sending, failure), join.cpp (connecting to the job), receive.cpp
// (accepting, handshakes, matching arrivals with receives), frames.cpp (reading frames
// off a connection), memory.cpp (links through shared memory to ranks of this host),
// by_reference.cpp (messages between ranks of one host read by process_vm_readv),
// goodbye.cpp (leaving) and survive.cpp (a peer's death, its replacement); its
// connections' state is connections.hpp's. Internal to net/tcp.
#pragma once

#include "optcast/net/tcp.hpp"
#include <array>
#include <atomic>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <cstdlib>
#include <stdexcept>
#include <cstring>
#include <optional>
#include <random>
#include <vector>
#include <asio/any_io_executor.hpp>
#include <asio/bind_allocator.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/local/stream_protocol.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/strand.hpp>
#include <asio/write.hpp>
#include "../auth/auth.hpp"
#include "core/little_endian.hpp"
#include "../common/buffer_pool.hpp"
#include "../common/job_fabric.hpp"
#include "../common/handler_memory.hpp"
#include "../common/op_queue.hpp"
#include "../common/stall.hpp"
#include "connections.hpp"
#include "held.hpp"
#include "link.hpp"
#include "wire_format.hpp"
#include "optcast/log.hpp"

namespace optcast::tcp {

using asio::ip::tcp;

namespace impl {

// The one-port model has a rank send one message at a time. With the kernel's send
// buffer (autotuned to megabytes) a send "completes" long before its bytes are on the
// wire, the next round's send then shares the link with it, and a pipelined schedule
// slows to the pace of shared links. Keeping at most this many unsent bytes queued makes
// a send complete about when its data has left, while small messages still complete at
// once. OPTCAST_TCP_NOTSENT_LOWAT overrides it (0: the kernel's default behaviour).
inline std::size_t notsent_lowat() {
  static const std::size_t v = [] {
    const char* e = std::getenv("OPTCAST_TCP_NOTSENT_LOWAT");
    return e ? static_cast<std::size_t>(std::strtoull(e, nullptr, 0)) : std::size_t{128} << 10;
  }();
  return v;
}

// Loopback has no link to share (and the extra wakeups cost it throughput), so only
// connections to other hosts are limited.
inline void limit_unsent(link& l) {
  if (l.in_memory()) return;
  auto& s = l.socket();
  const int v = static_cast<int>(notsent_lowat());
  std::error_code ec;
  const auto peer = s.remote_endpoint(ec);
  if (v > 0 && !ec && !peer.address().is_loopback())
    ::setsockopt(s.native_handle(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &v, sizeof v);
}

// A rank's entry in the store: "ADDRESS[,ADDRESS...] HOST-IDENTITY" (one address per rail).
inline std::pair<std::vector<std::string>, std::string> split_entry(const std::string& a) {
  const auto space = a.find(' ');
  const std::string list = a.substr(0, space), id = space == std::string::npos ? std::string() : a.substr(space + 1);
  std::vector<std::string> rails;
  for (std::size_t p = 0; p <= list.size();) {
    const auto comma = std::min(list.find(',', p), list.size());
    rails.push_back(list.substr(p, comma - p));
    p = comma + 1;
  }
  return {rails, id};
}

// Ends a connection for both ends at once: a socket may have a second descriptor (one
// connection both ways, a reader and a writer), and closing one alone would leave the
// connection open, the peer waiting on it.
inline void shut(link& s) noexcept { s.end(); }

inline std::string rank_name(int r) { return "rank " + std::to_string(r); }

inline std::string endpoint_text(const link& s) { return s.remote(); }

class tcp_fabric final : public detail::job_fabric {
public:
  tcp_fabric(asio::io_context& io, const config& cfg) : job_fabric(io), cfg_(cfg) {
    set_held_limits(cfg_.limits_for(1));  // until the layout says how many share this host
    peers_.reserve(static_cast<std::size_t>(cfg.size));
    for (int r = 0; r < cfg.size; ++r) peers_.emplace_back(ex_);
  }

  ~tcp_fabric() override { close(); }

  void bootstrap();

  bool receives_from_any() const noexcept override { return true; }
  std::string_view name() const noexcept override { return "tcp"; }
  const std::string& listen_address() const noexcept { return listen_; }
  const topology* layout() const noexcept override { return &layout_; }
  connection_counts counts() const noexcept { return counts_; }
  job_config::held_limits held_limits() const noexcept { return {held_total_.load(), held_peer_.load()}; }

  bool start(operation& op) noexcept override;
  void cancel(operation& op, std::error_code ec) noexcept override;

  // Fails everything pending and closes every data connection, so that peers waiting
  // on this rank fail at once too (they see the connection end) rather than at their
  // deadlines.
  void abort(std::error_code ec, std::string detail) noexcept override;
  void sign(std::uint32_t seq, const call_signature& s) override;
  std::error_code leftover(std::uint32_t seq) override;
  // A connection broke (read or write): lost_connection after closing it.
  void out_lost(int p, int rail, const std::string& why);
  // `seq`: a collective that waits on the connection (0 and `waits` false: none known).
  void lost_connection(const std::string& why, std::uint32_t seq = 0, bool waits = false);

private:
  const job_config& job_settings() const noexcept override { return cfg_; }
  // Surviving a peer's loss (survive.cpp): its connections cut, what waits on it failed,
  // its communicators revoked; the other peers' connections stay.
  bool survives_failures() const noexcept override { return true; }
  void lose_peer(int r, std::error_code ec, const std::string& why) noexcept override;
  // Replacements come through optcast's TCP store (job_fabric::reset_peer).
  bool takes_replacements() const noexcept override { return !cfg_.kv && !cfg_.pmix; }
  void reset_peer(int r) noexcept override;
  void grace_over(const std::string& why) noexcept override;
  void fail_communicator(std::uint32_t id, std::error_code ec, const std::string& why) noexcept override;
  // A connection to or from p broke, and p has not said goodbye.
  bool link_broken(int p) const noexcept;
  // Gives back every held message of p's that pred(tag) takes.
  template <class Pred>
  void drop_held(peer_state& pe, Pred pred) {
    pe.unexpected.drop_if(pred, [&](held_message& m) {
      release_unexpected(pe, m.data.size());
      give_back(std::move(m.data));
    });
  }
  // Best effort, without blocking: an abort frame on every idle connection, so that the
  // peers' errors name the cause rather than "rank r closed its connection".
  void tell_peers(const std::string& why) noexcept override;
  // A rank with no failure and nothing in flight says goodbye on every connection
  // (say_goodbye); then the acceptor and half-done handshakes close.
  void on_closing(bool failed) noexcept override;
  void on_closed() noexcept override;
  void on_left(std::chrono::milliseconds wait) noexcept override;

  static std::string addr_key(int r) { return "optcast/addr/" + std::to_string(r); }
  peer_state& peer(int r) { return peers_[static_cast<std::size_t>(r)]; }
  out_conn& out(int p, int rail) { return peer(p).out[static_cast<std::size_t>(rail)]; }
  // Where every rank listens and which host it is on: the topology, and each peer's
  // addresses and connections (one rail to a rank of this host).
  void learn_peers();
  // The connection that carries `op`: its lane's rail toward a rank of another host.
  int rail_of(const operation& op) { return op.lane % peer(op.peer).rails; }

  bool fail_now(operation& op, std::error_code ec, const std::string& why);

  // ------------------------------------------------------------------ sending

  bool start_send(operation& op, peer_state& pe);
  // The header and the body (the payload, or a reference to it), with encryption the
  // body sealed; false when there is no memory for it.
  [[nodiscard]] bool fill_header(out_conn& out, operation& op) noexcept;
  static std::size_t frame_total(const out_conn& out) { return frame_bytes + out.body_len; }
  static std::array<asio::const_buffer, 2> frame_buffers(const out_conn& out, std::size_t skip);
  // A reference written: the send waits for its receipt (receipt_came).
  void lend(operation& op);
  auth::proof session_key(std::span<const std::byte> hello, const auth::nonce& acceptor_nonce,
                          std::string_view label = session_label) const {
    const std::array<std::span<const std::byte>, 2> parts{hello, std::span(acceptor_nonce)};
    return key_->prove(label, parts);
  }
  void continue_write(int p, int rail);
  void write_next(int p, int rail);

  // Connection on first use: the peer's own toward this rank where it is duplex (adopt),
  // else ask the store where the peer listens, connect, handshake.
  bool adopt(int p, int rail);
  void open_out(int p, int rail);
  // The opener's side of a duplex connection: a reader of the frames its peer writes back.
  void read_back(int p, int rail);
  void send_hello(int p, int rail);
  void read_reply(int p, int rail);
  void handshake_done(int p, int rail);

  // The connections to p cannot carry more: fail what waits on them.
  void fail_out(int p, std::error_code ec, const std::string& why);
  void fail_out(int p, int rail, std::error_code ec, const std::string& why);

  // Nothing in flight: no operation posted, queued, or being read or written.
  bool idle() const noexcept;
  // A goodbye frame on every connection this rank opened, written now where the socket
  // takes it (the kernel delivers it, and then the close, after the data before it);
  // a socket that cannot take it all now is kept, with the rest, for finish_goodbyes.
  void say_goodbye() noexcept;
  // After the job's outcome: the goodbyes that did not fit their sockets at close are
  // written within `within` (0: not at all, the peers having left as well), then closed.
  void finish_goodbyes(std::chrono::milliseconds within) noexcept;

  // ------------------------------------------------------------------ shared memory
  // (memory.cpp) toward the ranks of this host: the same frames through rings.

  bool same_host(int p) const noexcept {
    const auto& host = layout_.host_of;
    return host.size() == peers_.size() && host[static_cast<std::size_t>(p)] == host[static_cast<std::size_t>(cfg_.rank)];
  }
  // Whether this rank's links to p go through memory.
  bool memory_to(int p) const noexcept { return hub_ && same_host(p); }
  // The unix socket a rank of this host listens on for its peers' rings: abstract, so
  // per network namespace (an emulated host's ranks never find another's), and named by
  // the job, the rank and its TCP address (unique on the host while it listens).
  std::string memory_name(int r, const std::string& address) const;
  // Bootstrap: the hub and the unix socket, before this rank says where it listens.
  void listen_memory(const std::string& address);
  void accept_memory();
  void meet_accepted(const std::shared_ptr<meeting>& m);
  // The opener's side: rings with p, then the handshake over them; a peer that does not
  // answer there is connected to at `fallback` over TCP instead.
  void open_memory(int p, int rail, const std::string& address, tcp::endpoint fallback);
  void met(const std::shared_ptr<meeting>& m);
  void over_tcp_instead(const std::shared_ptr<meeting>& m, log_level level, const std::string& why);
  void drop_meeting(const std::shared_ptr<meeting>& m) noexcept;
  // The size of the ring this rank reads from each peer of its host.
  std::size_t ring_capacity() const noexcept;
  bool check_network() override { return hub_ && hub_->poll_here(); }
  // The hub runs every stream's completions in order, and TCP's own sockets stay on
  // the loop (every 16th turn): where some peer shares this host. Where none does, the
  // rings carry nothing, every message comes through the loop's reactor, and a look
  // there only every 16th turn held each one up (docs/DESIGN.md, the hosts2-loop
  // table). Hosts of both kinds of peers keep the rings first (a system call every turn
  // measured slower there while such ranks still spun); where they yield, the poller
  // looks at the reactor before each yield too (poller::check_first's `elsewhere`).
  bool network_first() const noexcept override {
    return hub_ != nullptr && ranks_on_my_host() > 1;
  }
  int ranks_on_this_machine() const noexcept override { return machine_ranks_; }
  void loop_polls(bool polling) override {
    if (hub_) hub_->polling(polling);
  }
  // Over TCP.
  void connect_socket(int p, int rail, tcp::endpoint ep);

  // ------------------------------------------------------------------ single copy
  // (by_reference.cpp) between ranks of one host.

  // On a link through memory the kernel vouches for the peer's process; over TCP only
  // a job secret makes its hello's word good enough to read memory it names.
  bool single_copy_allowed(bool in_memory) const noexcept { return cfg_.shm && (in_memory || key_.has_value()); }
  // The hello's offer toward a rank of this host (nothing toward others).
  bool offers_single_copy(int p, bool in_memory) const noexcept { return same_host(p) && single_copy_allowed(in_memory); }
  void offer_single_copy(hello& h, int p, bool in_memory);
  // Whether the opener's probe reads as it said (the acceptor's answer to the offer).
  bool probe_reads(const hello& h) const;
  // A frame_ref's reference, then the copy into the posted receive (else a held buffer).
  void read_ref(const std::shared_ptr<in_conn>& c, tag tg, const call_signature& sig, std::uint64_t len);
  void take_ref(const std::shared_ptr<in_conn>& c, tag tg, const call_signature& sig, std::uint64_t len);
  // The receipt for a message copied, written back on the connection it came on.
  void send_receipt(const std::shared_ptr<in_conn>& c, std::uint64_t token);
  void write_receipts(const std::shared_ptr<in_conn>& c);
  // The sender's side: receipts read from its connection to p, each ending a lent send.
  void read_receipts(int p, int rail);
  void fail_lent(int p, std::error_code ec, const std::string& why);

  // ------------------------------------------------------------------ receiving

  bool start_recv(operation& op, peer_state& pe);
  // A receive from any peer: the earliest message with its tag that is here, else it
  // waits in any_posted_ for the first to come.
  bool start_recv_any(operation& op);
  // The receive posted for a message tagged tg from p: p's own, else one from any peer
  // (which becomes p's); taken off its queue. Null if none.
  operation* take_posted(int p, tag tg);
  // Posted receives carry the order they were posted in (their first context word).
  void stamp_posted(operation& op) noexcept { op.transport.ctx[0] = reinterpret_cast<void*>(++posts_); }
  static std::uintptr_t posted_stamp(const operation& op) noexcept {
    return reinterpret_cast<std::uintptr_t>(op.transport.ctx[0]);
  }
  void fail_posted(int p, std::error_code ec, const std::string& why);
  void fail_posted_any(std::error_code ec, const std::string& why);
  void accept_next(tcp::acceptor& a);

  void end_handshake(const std::shared_ptr<in_conn>& c) { std::erase(handshaking_, c); }
  // Ends a handshake that cannot go on and gives its descriptor back now, not at its
  // deadline: a stranger that opens and closes connections must not pile them up.
  void drop_handshake(const std::shared_ptr<in_conn>& c);
  // How many handshakes may be pending at once: twice what every peer opening all its
  // connections at the same moment needs, and at least 64. A peer's handshake takes
  // milliseconds; past the limit the oldest pending one (a stranger's that holds its
  // connection open, most likely) is dropped for the new one.
  std::size_t most_handshakes() const noexcept {
    return std::max<std::size_t>(64, 2 * static_cast<std::size_t>(cfg_.size - 1) * acceptors_.size());
  }
  // A new connection, past the limit of pending handshakes or not.
  void admit_handshake(const std::shared_ptr<in_conn>& c);

  void refuse(const std::shared_ptr<in_conn>& c, std::uint32_t status, const std::string& why);
  // Of two connections of a pair opening at once, the one to keep (hs_use_mine); true
  // when it answered so.
  bool keep_mine(const std::shared_ptr<in_conn>& c, const hello& h);
  // The acceptor's final reply, proof included, in c->ack.
  void final_reply(const std::shared_ptr<in_conn>& c, std::uint32_t word);
  void read_hello(const std::shared_ptr<in_conn>& c);
  acceptor_view view() const noexcept { return {key_.has_value(), cfg_.encrypt, job_id_, cfg_.size, cfg_.rank}; }
  void challenge(const std::shared_ptr<in_conn>& c);
  // Authenticated (or no secret): the job id and rank are checked, and the peer admitted.
  void admit(const std::shared_ptr<in_conn>& c);
  // Takes the connection's frames one after another, from its buffer while it holds a
  // whole header, else reading the socket (frames.cpp).
  void read_frame(const std::shared_ptr<in_conn>& c);
  // One frame, its header in c->hdr.
  void on_frame(const std::shared_ptr<in_conn>& c);
  // Reads what has come on the socket into the connection's buffer, then read_frame.
  // Over a socket: a read of what has come (memory links: read_ring).
  void fill(const std::shared_ptr<in_conn>& c);
  // A read between frames ended with ec (eof: the peer closed, mid-header or not).
  void reading_ended(const std::shared_ptr<in_conn>& c, std::error_code ec);
  // Through memory: what the rings hold into rx, without waiting: true if bytes came; else
  // the stream's kept reader (ring_ready) calls read_frame when they come, or the link
  // ended (in_ended).
  bool read_ring(const std::shared_ptr<in_conn>& c);
  static void ring_ready(void* ctx);

  // The payload goes straight into the posted receive.
  void read_into(const std::shared_ptr<in_conn>& c, std::uint64_t len);
  void finish_into(const std::shared_ptr<in_conn>& c);

  // A buffer for a message with no receive posted yet (or one of another size), within
  // cfg_.unexpected_limit, and cfg_.unexpected_peer_limit from one peer; else the job
  // fails (nullopt).
  std::optional<detail::message_buffer> hold_unexpected(const std::shared_ptr<in_conn>& c, tag tg, std::uint64_t len);
  // Reads such a payload into one, and stashes it.
  void read_payload(const std::shared_ptr<in_conn>& c, tag tg, const call_signature& sig, std::uint64_t len);
  // What a held message costs beyond its payload, counted against the limits, so that
  // empty messages cannot be held without end.
  static constexpr std::size_t held_overhead = held_messages::overhead;
  // A held message of `bytes` (its payload's size) received, or given up.
  void release_unexpected(peer_state& pe, std::size_t bytes) noexcept {
    const std::size_t cost = bytes + held_overhead;
    unexpected_bytes_ -= std::min(cost, unexpected_bytes_);
    pe.unexpected_bytes -= std::min(cost, pe.unexpected_bytes);
  }
  void stash(const std::shared_ptr<in_conn>& c);
  void read_abort(const std::shared_ptr<in_conn>& c, std::uint64_t len);
  // A goodbye: what waits on its sender fails (peer_left), and its connection's end is
  // read as the orderly close it is.
  // `connections`: on how many it says goodbye (the frame's step).
  void read_bye(const std::shared_ptr<in_conn>& c, std::uint32_t seq, const call_signature& sig, std::uint32_t connections);
  // Reads a frame's payload (len bytes to data) and, when encrypted, its tag, and opens
  // it in place; then `then()`. A payload that fails to open is a protocol violation.
  template <class Then>
  void read_body(const std::shared_ptr<in_conn>& c, std::byte* data, std::uint64_t len, Then then);
  void protocol_error(const std::shared_ptr<in_conn>& c, const std::string& what);

  // The peer's stream to us ended (cleanly between frames when `error` is empty).
  void in_ended(const std::shared_ptr<in_conn>& c, const std::string& error);

  // Nothing more will come from p: what waits for it fails with ec.
  void drop_in(int p, std::error_code ec, const std::string& why);
  // "; send to rank 2 (collective 5, step 1); ..." for every operation of seq still waiting.
  std::string waiting_for(std::uint32_t seq) const override;

  detail::message_buffer take_buffer(std::size_t n) { return pool_.take(n); }
  void give_back(detail::message_buffer&& b) { pool_.give_back(std::move(b)); }

  void set_held_limits(job_config::held_limits l) noexcept {
    held_total_ = l.total;
    held_peer_ = l.peer;
  }

  config cfg_;
  // cfg_.limits_for this rank's host, in force (read by held_limits() off the strand).
  std::atomic<std::size_t> held_total_{0}, held_peer_{0};
  std::uint64_t job_id_ = 0;
  std::optional<auth::key> key_;
  std::vector<tcp::acceptor> acceptors_;  // one per rail
  std::string listen_;  // rail 0's
  topology layout_;
  // The smallest message no reduction combines that goes by reference (join: shm_move_min
  // where the host's ranks have a core each, else shm_copy_min).
  std::size_t move_min_ = std::numeric_limits<std::size_t>::max();
  std::vector<peer_state> peers_;
  std::vector<std::shared_ptr<in_conn>> handshaking_;
  std::shared_ptr<shm::hub> hub_;  // null: no shared memory (job_config::shm)
  int machine_ranks_ = 0;  // the job's ranks on this machine (join): 0 before
  std::optional<asio::local::stream_protocol::acceptor> memory_acceptor_;
  std::vector<std::shared_ptr<meeting>> meetings_;  // introductions under way, either side
  std::uint64_t handshakes_dropped_ = 0;  // for the pending limit (logged at powers of two)
  bool accept_failing_ = false;           // accept fails (out of descriptors): said once
  detail::buffer_pool pool_;
  std::size_t unexpected_bytes_ = 0;  // held for receives not yet posted, and being read aside
  detail::op_queue any_posted_;       // receives from any peer, in the order posted
  detail::op_queue failing_;          // fail_communicator's, being completed
  held_messages::spares spares_;      // the peers' held messages' emptied nodes
  std::uint64_t arrivals_ = 0;        // messages stashed so far (held_message::arrival)
  std::uintptr_t posts_ = 0;          // receives posted so far (stamp_posted)
  std::uint64_t tokens_ = 0;          // sends by reference so far (their tokens)
  std::uint64_t breaks_ = 0;          // links broken so far (peer_state::broke)
  connection_counts counts_;
  struct lingering_goodbye {
    link sock;
    std::vector<std::byte> rest;  // of the goodbye frame, unwritten
  };
  std::vector<lingering_goodbye> goodbyes_;
};

}  // namespace impl

}  // namespace optcast::tcp
