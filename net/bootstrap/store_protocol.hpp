// The store's protocol without its sockets: the message format, the judgement of a
// client's hello, and the table a store keeps for the ranks of its job. store.cpp moves
// bytes between these and the network; the fuzz targets (tests/fuzz/) drive the same
// code with arbitrary bytes. Internal to net/bootstrap.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "optcast/error.hpp"
#include "store.hpp"

namespace optcast::store::proto {

constexpr std::string_view magic = protocol;
constexpr std::size_t header_bytes = 21;
constexpr std::uint32_t max_field = 1u << 20;
// A hello carries the protocol name and a nonce, a proof its HMAC: nothing before the
// handshake is done may be longer, so a stranger's header commits no more than this.
constexpr std::uint32_t max_hello_field = 64;
// A failure's text, as a rank reports it and as the store passes it on.
constexpr std::size_t max_failure_text = 2000;
constexpr auto lost_code = static_cast<std::uint32_t>(errc::peer_lost);
// What one rank may hold in the store at once: the keys and values it set last and the
// gets it waits on (each counted with its key). A job's own keys are its ranks' addresses
// and layout; past this the rank is taken to be broken or hostile and the job fails,
// naming it, before the store's memory goes (issue 47 found 400 sets of 1 MiB all kept).
constexpr std::size_t client_limit = std::size_t{64} << 20;
// What a held entry costs beyond its bytes (the map's node, the strings' headers).
constexpr std::size_t entry_overhead = 64;

// The handshake: hello {id: job size, arg: rank, key: magic (hello_key), val: the client's
// nonce, or empty without a secret}; with a secret, challenge {val: the store's nonce} and proof
// {val: the client's HMAC}; then welcome {val: job id, and with a secret the store's
// HMAC}, or error {val: why}. A rank whose collective failed says failed {arg: error
// code, val: why}; the store passes the job's first failure on to every other rank as
// job_failed {id: code, arg: rank, val: why}, also to ranks that connect later. A rank
// done says bye and keeps its connection until the job's outcome: farewell once every
// rank has said bye, or job_failed (peer_lost for a rank that died); then it closes.
//
// A rank's bye may name its newest finished collective {arg: seq, key: its signature}.
//
// A stall: a rank whose collective nears its deadline waiting on a peer says stalled
// {arg: seq, key: its call's signature, val: what it waits for} (net/common/stall.hpp).
// The store then asks every other rank ping {id: inquiry, arg: seq}, which a live rank's
// event loop answers at once with pong {id, key: its signature of that collective, if it
// made the call}. Calls that differ (among the answers, the stalled ranks' and the
// goodbyes naming that collective) are the root cause: job_failed {id: call_mismatch}
// names two of them to every rank. Else a rank that neither answers within
// inquiry_window nor reported a stall itself is (stopped, or not calling the collective
// at all): job_failed {id: timeout, arg: that rank} goes to every rank. When every rank
// answers alike, the ranks that reported get verdict {}: nobody is stuck, the collective
// was just too slow for its deadline.
//
// Survivors that went on without some ranks (optcast::shrink) say excuse {val: those
// ranks, comma-separated}: from then on their death, their failure and their goodbye no
// longer count (the job's first failure is forgotten if it was one of theirs), and the
// job has succeeded once every other rank has said bye.
//
// A replacement (optcast::grow) takes an excused rank's slot: its hello's key carries
// rejoin_mark, which is refused for any other slot, as a plain hello is for an excused
// one. Once it has published where it listens it says rejoin {}, and every other rank
// hears rejoined {arg: its rank}. It stays excused (its death fails nothing, though the
// others hear of it as peer_lost) until it says admit {} on being admitted to the
// members' communicator; from then on it is a rank like any other.
enum type : std::uint8_t {
  m_hello = 1, m_welcome, m_error, m_set, m_ok, m_get, m_value, m_bye, m_peer_lost, m_challenge, m_proof,
  m_failed, m_job_failed, m_farewell, m_stalled, m_ping, m_pong, m_verdict, m_excuse, m_rejoin, m_rejoined,
  m_admit, m_last = m_admit
};
// How long the store waits for the answers to its ping. A rank reporting a stall waits
// longer for the verdict (net/common/stall.hpp) before failing on its own word.
constexpr auto inquiry_window = std::chrono::milliseconds(200);
constexpr auto timeout_code = static_cast<std::uint32_t>(errc::timeout);

struct message {
  std::uint8_t type = 0;
  std::uint32_t id = 0, arg = 0;
  std::string key, val;
  bool operator==(const message&) const = default;
};

std::string encode(const message& m);

struct header {
  std::uint8_t type = 0;
  std::uint32_t id = 0, arg = 0;
  std::uint32_t key_bytes = 0, val_bytes = 0;
};
// A header is valid when its type is known, its lengths agree and neither field is
// longer than `field_limit`: checked before anything is allocated for them.
result<header> decode_header(std::span<const std::byte, header_bytes> b, std::uint32_t field_limit);

// One message from the front of `in`: the message and the bytes it took, nullopt with
// nothing taken when `in` holds only part of one, or protocol_violation.
struct decoded {
  message msg;
  std::size_t used = 0;
};
result<std::optional<decoded>> decode(std::span<const std::byte> in, std::uint32_t field_limit);

// The store's judgement of a client's first message, before any proof: refused with the
// reason (a stranger is told no more than that), or nullopt to go on.
std::optional<std::string> judge_hello(const message& hello, bool store_has_secret);
// The hello's key: the protocol, after '#' the job the client belongs to, if it knows,
// and last sealed_mark if it seals its messages after the handshake (OPTCAST_ENCRYPT).
// A replacement's hello says rejoin_mark before it.
constexpr std::string_view sealed_mark = "+sealed";
constexpr std::string_view rejoin_mark = "+rejoin";
std::string hello_key(std::uint64_t job_id, bool sealed = false, bool rejoin = false);
bool rejoins(const message& hello);
// After the proof: whether the client belongs to the job this store serves (a client
// that does not say is taken to).
std::optional<std::string> judge_job(const message& hello, std::uint64_t job_id);
// After the proof: whether the client seals its messages as this store does.
std::optional<std::string> judge_sealing(const message& hello, bool store_seals);
// After the proof: whether it may take the rank it claims in a job of `size`.
std::optional<std::string> judge_member(const message& hello, int size, const std::function<bool(int)>& taken);

// What a store knows of its job once ranks have joined: the keys, the waiting gets, who
// said goodbye, the job's first failure. Every answer goes out through `send(rank, m)`.
class table {
public:
  using sender = std::function<void(int rank, const message&)>;
  table(int size, sender send);

  int size() const noexcept { return static_cast<int>(joined_.size()); }
  bool joined(int rank) const noexcept { return joined_[static_cast<std::size_t>(rank)]; }
  // A rank's slot is taken while it is connected, and for good once it said goodbye (a
  // second process in its place must not count a second goodbye).
  bool taken(int rank) const noexcept { return joined(rank) || said_bye(rank); }
  // Why a hello for `rank` (a replacement's or not, `rejoin`) may not take its slot, given
  // taken(): a failed rank's slot only to a replacement, a replacement only that.
  std::optional<std::string> judge_rejoin(int rank, bool rejoin) const;
  // A replacement that has joined and is not yet admitted (the store keeps it connected,
  // though its slot is excused).
  bool replacing(int rank) const noexcept { return replacing_[static_cast<std::size_t>(rank)]; }
  bool failed() const noexcept { return failure_.has_value(); }
  const std::optional<message>& failure() const noexcept { return failure_; }

  // A rank passed its handshake (judge_member said yes, given taken()).
  void join(int rank);
  // A process that proved it belongs to the job but whose setup cannot work with it (it
  // counts another size): the job fails, and every rank hears `why`.
  void misfit(std::uint32_t rank, const std::string& why);
  // The time to join has passed: if some rank never joined, the job fails, naming them.
  void missing_after(std::chrono::milliseconds waited);
  // A message from a joined rank; false: out of protocol, the store closes the connection.
  bool on_message(int rank, const message& m);
  // Its connection closed; without goodbye it died and every other rank is told.
  void leave(int rank);
  bool said_bye(int rank) const noexcept { return bye_[static_cast<std::size_t>(rank)]; }
  // A stall inquiry: its number while open (0: none). The store closes it after
  // inquiry_window with conclude(), unless every rank answered first.
  std::uint32_t inquiry() const noexcept { return inquiring_ ? inquiry_ : 0; }
  void conclude();
  bool excused(int rank) const noexcept { return excused_[static_cast<std::size_t>(rank)]; }

private:
  // Ranks the survivors went on without (m_excuse): false if `list` is not ranks of the job.
  bool excuse(int from, const std::string& list);
  // Every rank said bye or is excused.
  bool all_done() const noexcept;
  void fail_job(int from, message m, bool tell);
  // Two calls of the inquiry's collective that differ, as the failure's text; empty if
  // every signature known for it is alike.
  std::string differing_calls() const;
  sender send_;
  std::vector<bool> joined_, bye_, ever_joined_, excused_, replacing_, ready_;  // ready_: said rejoin
  struct entry {
    std::string val;
    int owner = -1;  // the rank that set it last: its share of held_
  };
  std::map<std::string, entry, std::less<>> kv_;
  std::vector<std::size_t> held_;  // per rank, within client_limit
  // Counts `bytes` more against `rank` (fails the job, naming it, past client_limit).
  bool charge(int rank, std::size_t bytes);
  void refund(int rank, std::size_t bytes) noexcept {
    auto& h = held_[static_cast<std::size_t>(rank)];
    h -= std::min(h, bytes);
  }
  std::map<std::string, std::vector<std::pair<int, std::uint32_t>>, std::less<>> waiting_;
  std::optional<message> failure_;
  bool inquiring_ = false;
  std::uint32_t inquiry_ = 0;
  std::uint32_t stalled_seq_ = 0;
  std::vector<bool> stalled_, answered_;
  // Per rank: its signature of the inquiry's collective (call_signature::wire_bytes, or
  // empty), and its goodbye's newest finished collective.
  std::vector<std::string> call_;
  std::vector<std::pair<std::uint32_t, std::string>> last_call_;
};

}  // namespace optcast::store::proto
