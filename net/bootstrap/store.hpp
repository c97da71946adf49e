// The rendezvous store: a small TCP key-value server where the ranks of a job meet.
//
// Rank 0 hosts it on a thread of its own (so it answers even while rank 0 computes);
// every rank keeps one client connection to it for the job's lifetime. Besides set/get
// (a get waits until the key exists), that connection carries the job's liveness: a
// rank whose connection drops without saying goodbye has died, and the store tells
// every other rank at once, so their collectives fail with errc::peer_lost instead of
// waiting for a deadline. The server stays up until every rank has said goodbye.
//
// With a job secret, every connection starts with a mutual challenge–response
// (net/auth/auth.hpp): the store answers nothing but a refusal, and hands out no slot and
// no job id, until the client has proved it knows the secret; the client then checks
// the store's proof. Without one, anyone who reaches the store may join. With
// OPTCAST_ENCRYPT (which needs a secret) every message after the handshake is sealed
// under a key of its connection and direction (ChaCha20-Poly1305, auth::channel): its
// header in the clear but authenticated, its key and value encrypted, its tag after them;
// a message that fails to open ends the connection. Ranks and store must agree on it.
//
// Wire format (little-endian): u32 length of the rest, u8 type, u32 id, u32 arg,
// u32 key length, u32 value length, key, value. Values up to 1 MiB; nothing before the
// handshake is done longer than 64 bytes, and a client has 10 s to finish it. The
// messages and their meaning: net/bootstrap/store_protocol.hpp.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "optcast/error.hpp"
#include "optcast/net/job.hpp"

namespace asio {
class any_io_executor;
}

namespace optcast::store {

// The protocol's name and version, the first thing a client says.
inline constexpr std::string_view protocol = "optcast-store/6";

// "host:port" split (optcast/net/job.hpp's store::address); the port must be given.
result<address> parse_address(std::string_view s);

class server {
public:
  // Listens on host:port (port 0: any free port) for a job of `size` ranks.
  // `secret`: the job secret (empty: none; else at least 16 bytes, setup_error if not).
  // `encrypt`: seal every connection's messages after its handshake (needs the secret).
  server(const std::string& host, std::uint16_t port, int size, std::uint64_t job_id, std::string_view secret = {},
         bool encrypt = false);
  // Serves on a socket that is already bound and listening (handed over by a launcher,
  // which avoids racing another process for the port).
  server(int listening_fd, int size, std::uint64_t job_id, std::string_view secret = {}, bool encrypt = false);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  std::uint16_t port() const noexcept;
  std::uint64_t job_id() const noexcept;
  // Waits until every rank's connection has closed (after its goodbye and the job's
  // outcome, or dead); false if `timeout` passed first.
  bool wait_all_done(std::chrono::milliseconds timeout);
  // The same, or the job failed and every rank that joined has gone (one that never came
  // will not): what a store that outlives no rank waits for.
  bool wait_over(std::chrono::milliseconds timeout);
  // The job fails, and every rank hears which ranks are missing, if not every rank has
  // joined within `timeout` from now (rather than each waiting for its first deadline).
  void expect_all_within(std::chrono::milliseconds timeout);
  // Whether a rank reported a failure or died.
  bool failed() const;

  struct impl;

private:
  std::shared_ptr<impl> impl_;
};

// One rank's connection. It runs on a thread of its own, so the blocking calls work
// whoever runs the rank's event loop (or nobody); what the rank is told runs on its loop.
class client {
public:
  // Connects (retrying while the server is not up yet, until `timeout`) and introduces
  // itself as `rank` of a job of `size`, proving it knows `secret` if there is one.
  // Callbacks (set's, get's, on_events', report_stall's) run on `events`. Throws
  // optcast::setup_error with the reason on failure.
  // `job_id` (nonzero): the job this rank belongs to; a store serving another job refuses
  // it before it joins, so that a second job sent to one store does not disturb the first.
  // `encrypt`: every message after the handshake sealed (needs the secret, and a store
  // that encrypts too). `rejoin`: a replacement for a rank that failed (optcast::grow),
  // which the store admits only into the slot of a rank the survivors went on without.
  client(const asio::any_io_executor& events, const address& server, int rank, int size,
         std::chrono::milliseconds timeout, std::string_view secret = {}, std::uint64_t job_id = 0, bool encrypt = false,
         bool rejoin = false);
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  std::uint64_t job_id() const noexcept;
  // The address of this end of the connection: the local interface that reaches the store.
  std::string local_host() const;
  // Why the store said the job failed, if it did (empty: it did not); its pending
  // requests failed with it.
  std::string job_failure() const;

  // Asynchronous; callbacks run on `events`.
  void set(std::string key, std::string value, std::function<void(result<void>)> done);
  void get(std::string key, std::function<void(result<std::string>)> done);
  // Blocking, from any thread: until answered or `timeout`.
  result<void> set_wait(std::string key, std::string value, std::chrono::milliseconds timeout);
  result<std::string> get_wait(std::string key, std::chrono::milliseconds timeout);
  // Every key's value, in order, asked all at once; the first failure otherwise.
  result<std::vector<std::string>> get_all_wait(std::vector<std::string> keys, std::chrono::milliseconds timeout);

  // `lost(rank)` when a rank dies; `closed(ec)` when the store itself goes away;
  // `failed(code, why)` when another rank reported the job's first failure (the text says
  // which rank, escaped and cut); `rejoined(rank)` when a replacement for a failed rank
  // is ready to be taken in (rejoin).
  void on_events(std::function<void(int rank)> lost, std::function<void(std::error_code)> closed,
                 std::function<void(std::uint64_t code, int rank, std::string why)> failed = nullptr,
                 std::function<void(int rank)> rejoined = nullptr);
  // Tells the store this rank failed (an optcast::errc value and why), which tells every
  // other rank; without waiting.
  void report_failure(std::uint32_t code, std::string why);
  // A replacement: it listens and has published where; every other rank is told.
  void rejoin();
  // A replacement taken into the members' communicator: from now on a rank like the others.
  void admitted();
  // The survivors went on without `ranks` (store_protocol.hpp, excuse).
  void excuse(const std::vector<int>& ranks);
  // This rank's collective `seq` nears its deadline waiting for `why`: the store asks
  // every rank whether it is alive, and tells every rank the root cause (job_failed, to
  // the `failed` callback) when one does not answer, or calls `nobody_stuck` when all do.
  // `call`: this rank's signature of collective seq (call_signature's wire bytes), which
  // the store compares with the other ranks' (calls that differ are the root cause then).
  void report_stall(std::uint32_t seq, std::string why, std::function<void()> nobody_stuck, std::string call = {});
  // How this rank answers the store's inquiries: its signature of collective `seq`
  // (call_signature's wire bytes, empty if it has made no such call). Runs on `events`.
  void answer_inquiries(std::function<std::string(std::uint32_t seq)> call_of);
  // Says goodbye (this rank is done) and waits, up to `wait`, for the job's outcome:
  // success once every rank has said goodbye, else the job's first failure (with the
  // reason in *why), or timeout. Closes the connection. Later calls return the same.
  // `last_seq`, `last_call`: the newest collective this rank finished and its signature
  // (empty: none), for the store's inquiries after this rank has gone.
  result<void> bye(std::chrono::milliseconds wait, std::string* why = nullptr, std::uint32_t last_seq = 0, std::string last_call = {});

  struct impl;

private:
  void handshake(const address& server, int rank, int size, std::chrono::milliseconds timeout, std::string_view secret,
                 std::uint64_t job_id, bool encrypt, bool rejoin);
  void say(std::uint8_t type);
  std::shared_ptr<impl> impl_;
};

}  // namespace optcast::store
