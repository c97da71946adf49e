// Trust nothing from the wire: what strangers, impostors and admitted peers that break the
// protocol can do to a job (nothing but be refused, or fail it with a clear error), on
// the TCP fabric and the store.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "bootstrap/store_protocol.hpp"
#include "counting_new.hpp"
#include "optcast/log.hpp"
#include "optcast/when_all.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;

namespace {

using testing::bytes;

}  // namespace

namespace {

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
// flags, a nonce (zero).
std::vector<std::byte> handshake(std::uint32_t rank, std::uint32_t size, std::uint64_t job = testing::test_job_id,
                                 std::uint16_t flags = 0) {
  std::vector<std::byte> h(56);
  const std::uint32_t magic = 0x4354504f;
  const std::uint16_t version = 2;
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 2);
  std::memcpy(h.data() + 6, &flags, 2);
  std::memcpy(h.data() + 8, &job, 8);
  std::memcpy(h.data() + 16, &rank, 4);
  std::memcpy(h.data() + 20, &size, 4);
  return h;
}

// Connects to host:port and writes `bytes`, then keeps the socket open for `hold`. Runs
// on a thread of its own, where Catch's assertions are not safe: what the stranger did
// is checked by the caller (in the log, and in the job it tried to harm).
void stranger(const std::string& where, std::vector<std::byte> bytes, std::chrono::milliseconds hold) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  const auto a = store::parse_address(where);
  if (!a) return;
  std::error_code ec;
  s.connect({asio::ip::make_address(a->host, ec), a->port}, ec);
  if (!ec && !bytes.empty()) asio::write(s, asio::buffer(bytes), ec);
  std::this_thread::sleep_for(hold);
}

}  // namespace

TEST_CASE("strangers on a rank's port are refused and the job goes on", "[tcp][fabric]") {
  log_capture log;
  {
    testing::tcp_test_world w(4, {}, {.secret = {}});
    const std::string target = tcp::listen_address(w.comms()[1].get_fabric());
    REQUIRE_FALSE(target.empty());
    // Garbage; a well-formed handshake of another job; a half handshake that stops.
    std::vector<std::byte> garbage(100, std::byte{0x41});
    auto other_job = handshake(1, 4, 0x77);
    std::vector<std::thread> strangers;
    strangers.emplace_back(stranger, target, garbage, 200ms);
    strangers.emplace_back(stranger, target, other_job, 200ms);
    strangers.emplace_back(stranger, target, std::vector<std::byte>(10, std::byte{0x4f}), 200ms);
    std::this_thread::sleep_for(50ms);

    std::vector<std::vector<std::byte>> bufs(4, std::vector<std::byte>(1 << 20));
    const auto want = bytes(1 << 20, 9);
    bufs[0] = want;
    auto res = w.run_all([&](communicator& c) {
      return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0, {.blocks = 4});
    });
    for (auto& t : strangers) t.join();
    for (std::size_t r = 0; r < 4; ++r) {
      REQUIRE(res[r]);
      CHECK(bufs[r] == want);
    }
  }
  CHECK(log.seen("not an optcast peer"));
  CHECK(log.seen("is not this job's"));
}

namespace {

// Connects to the store, sends `bytes`, and returns how long the store took to close the
// connection (at most `wait`; longer means it kept it open).
std::chrono::milliseconds closed_after(std::uint16_t port, const std::vector<std::byte>& bytes, std::chrono::milliseconds wait) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), port});
  const auto t0 = std::chrono::steady_clock::now();
  if (!bytes.empty()) asio::write(s, asio::buffer(bytes));
  pollfd pfd{s.native_handle(), POLLIN, 0};
  while (std::chrono::steady_clock::now() - t0 < wait) {
    if (::poll(&pfd, 1, 50) > 0) {
      char sink[256];
      if (::recv(s.native_handle(), sink, sizeof sink, 0) <= 0) break;  // closed (an answer first is read and skipped)
    }
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
}

// A store message: length, type, id, arg, key length, value length, key, value (`claimed`
// replaces both lengths in the header).
std::vector<std::byte> store_message(std::uint8_t type, std::uint32_t arg, const std::string& key, const std::string& val,
                                     std::optional<std::uint32_t> claimed = {}, std::uint32_t id = 0) {
  std::vector<std::byte> m(21 + key.size() + val.size());
  const std::uint32_t kl = claimed.value_or(static_cast<std::uint32_t>(key.size()));
  const std::uint32_t vl = claimed.value_or(static_cast<std::uint32_t>(val.size()));
  const std::uint32_t len = 17 + kl + vl;
  std::memcpy(m.data(), &len, 4);
  m[4] = static_cast<std::byte>(type);
  std::memcpy(m.data() + 5, &id, 4);
  std::memcpy(m.data() + 9, &arg, 4);
  std::memcpy(m.data() + 13, &kl, 4);
  std::memcpy(m.data() + 17, &vl, 4);
  std::memcpy(m.data() + 21, key.data(), key.size());
  std::memcpy(m.data() + 21 + key.size(), val.data(), val.size());
  return m;
}

}  // namespace

TEST_CASE("the store drops strangers: no hello in time, oversized fields, wire text escaped in its log", "[tcp][store]") {
  log_capture log;
  {
    store::server server("127.0.0.1", 0, 2, 0x5eedull);
    std::chrono::milliseconds silent{}, oversized{}, evil{};
    std::vector<std::thread> strangers;
    // Says nothing: dropped after the hello deadline (10 s), not held forever.
    strangers.emplace_back([&] { silent = closed_after(server.port(), {}, 15s); });
    // A header claiming 1 MiB key and value before any hello: refused at once, nothing read.
    strangers.emplace_back([&] { oversized = closed_after(server.port(), store_message(1, 0, "", "", 1u << 20), 5s); });
    // A hello whose protocol name is terminal control text.
    strangers.emplace_back([&] { evil = closed_after(server.port(), store_message(1, 0, "\x1b[31m8\nforged line", ""), 5s); });
    for (auto& t : strangers) t.join();
    CHECK(silent >= 9s);
    CHECK(silent < 14s);
    CHECK(oversized < 1s);
    CHECK(evil < 1s);
    // The job is unharmed: both ranks join and exchange a key.
    asio::io_context io;
    store::client a(io.get_executor(), {"127.0.0.1", server.port()}, 0, 2, 5s), b(io.get_executor(), {"127.0.0.1", server.port()}, 1, 2, 5s);
    CHECK(a.job_id() == 0x5eedull);
    CHECK(b.job_id() == 0x5eedull);
  }
  CHECK(log.seen("did not finish its handshake within 10 s"));
  const std::string refused = log.find("the client speaks");
  REQUIRE_FALSE(refused.empty());
  INFO(refused);
  CHECK(refused.find("\\x1b[31m8\\x0aforged line") != std::string::npos);
  CHECK(refused.find('\x1b') == std::string::npos);
  CHECK(refused.find('\n') == std::string::npos);
}

namespace {

// A stranger admitted as rank 2 sends `frame`; rank 1, waiting for rank 2, must fail
// with a protocol violation and be broken by it.
void expect_protocol_violation(const std::vector<std::byte>& frame) {
  auto old = set_log_sink([](log_level, std::string_view) {});
  testing::tcp_test_world w(3, {}, {.secret = {}});  // without a secret anyone with the job id gets this far
  auto bytes = handshake(2, 3);
  bytes.insert(bytes.end(), frame.begin(), frame.end());
  std::thread t(stranger, tcp::listen_address(w.comms()[1].get_fabric()), bytes, 500ms);
  std::vector<std::byte> buf(16);
  auto r = run(w.comms()[1], recv(w.comms()[1], 2, 5, buf));
  t.join();
  set_log_sink(std::move(old));
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::protocol_violation);
  CHECK(w.comms()[1].failure() == errc::protocol_violation);
  CHECK(w.comms()[1].failure_detail().find("malformed frame") != std::string::npos);
}

}  // namespace

TEST_CASE("a malformed frame from an admitted peer is a protocol violation", "[tcp][fabric]") {
  SECTION("bad frame kind") { expect_protocol_violation(std::vector<std::byte>(24 + 32, std::byte{0x13})); }
  SECTION("absurd length") {
    std::vector<std::byte> hdr(24 + 32);
    const std::uint32_t kind = 0x46444f43;
    const std::uint64_t len = ~std::uint64_t{0};
    std::memcpy(hdr.data(), &kind, 4);
    std::memcpy(hdr.data() + 16, &len, 8);
    expect_protocol_violation(hdr);
  }
}

namespace {

// A data frame header as the wire carries it: kind, 0, tag, length, an empty signature.
std::vector<std::byte> data_header(std::uint32_t seq, std::uint32_t step, std::uint64_t len) {
  std::vector<std::byte> h(24 + 32);
  const std::uint32_t kind = 0x46444f43;
  const std::uint64_t tg = (std::uint64_t{seq} << 32) | step;
  std::memcpy(h.data(), &kind, 4);
  std::memcpy(h.data() + 8, &tg, 8);
  std::memcpy(h.data() + 16, &len, 8);
  return h;
}

// A stranger admitted as rank 2 announces `len` bytes for a tag no receive waits for;
// rank 1, waiting for another message of rank 2, must fail with limit_exceeded, having
// asked for no memory near that size (every operator new of this binary is counted).
void expect_refused_length(std::uint64_t len, std::optional<std::size_t> limit) {
  auto old = set_log_sink([](log_level, std::string_view) {});
  testing::tcp_test_world w(3, {}, {.unexpected_limit = limit, .secret = {}});
  auto frame = handshake(2, 3);
  const auto hdr = data_header(9, 0, len);
  frame.insert(frame.end(), hdr.begin(), hdr.end());
  frame.resize(frame.size() + 4096, std::byte{0x5a});  // the start of the announced payload
  counting_new::largest = 0;
  std::thread t(stranger, tcp::listen_address(w.comms()[1].get_fabric()), frame, 500ms);
  std::vector<std::byte> buf(16);
  auto r = run(w.comms()[1], recv(w.comms()[1], 2, 5, buf));
  const std::size_t largest = counting_new::largest;
  t.join();
  set_log_sink(std::move(old));
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::limit_exceeded);
  const auto why = w.comms()[1].failure_detail();
  INFO(why);
  CHECK(why.find("rank 2 sent a message of " + std::to_string(len) + " B") != std::string::npos);
  CHECK(why.find("OPTCAST_UNEXPECTED_LIMIT") != std::string::npos);
  CHECK(largest < (std::size_t{16} << 20));  // nothing near the announced size, nor the limits
}

}  // namespace

TEST_CASE("a length from the wire is checked before anything is allocated for it", "[tcp][fabric]") {
  SECTION("2^40 bytes, the most a frame may announce, against the default limit") {
    expect_refused_length(std::uint64_t{1} << 40, std::nullopt);
  }
  SECTION("1 GiB against a 64 MiB limit") { expect_refused_length(std::uint64_t{1} << 30, std::size_t{64} << 20); }
}

TEST_CASE("unexpected messages within the limit are held, and the room comes back when they are received",
          "[tcp][fabric]") {
  // 1.5 MiB of room: each 1 MiB message fits only if the one before was counted out.
  testing::tcp_test_world w(2, {}, {.unexpected_limit = std::size_t{3} << 19});
  const std::size_t m = 1 << 20;
  std::vector<std::vector<std::byte>> got(4, std::vector<std::byte>(m));
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    std::vector<std::byte> one(1);
    for (std::uint32_t i = 0; i < 4; ++i) {
      if (c.rank() == 0) {
        // The message, then a note on another tag: rank 1 waits only for the note, so
        // the message, ahead of it on the connection, arrives with no receive posted.
        const auto b = bytes(m, static_cast<int>(i));
        if (auto r = co_await f.send(1, {4, i}, b); !r) co_return fail(r.error());
        if (auto r = co_await f.send(1, {6, i}, one); !r) co_return fail(r.error());
        if (auto r = co_await f.recv(1, {5, i}, one); !r) co_return fail(r.error());
      } else {
        if (auto r = co_await f.recv(0, {6, i}, one); !r) co_return fail(r.error());
        if (auto r = co_await f.recv(0, {4, i}, got[i]); !r) co_return fail(r.error());
        if (auto r = co_await f.send(0, {5, i}, one); !r) co_return fail(r.error());
      }
    }
    co_return result<void>{};
  });
  REQUIRE(res[0]);
  REQUIRE(res[1]);
  for (std::uint32_t i = 0; i < 4; ++i) CHECK(got[i] == bytes(m, static_cast<int>(i)));
}

TEST_CASE("one peer cannot take all the room for unexpected messages", "[tcp][fabric]") {
  // 4 MiB in all, 1.5 MiB from one peer: rank 2 holds 1 MiB from each of ranks 0 and 1,
  // but not a second 1 MiB from rank 0, though the total would still fit.
  auto old = set_log_sink([](log_level, std::string_view) {});
  testing::tcp_test_world w(3, {}, {.unexpected_limit = std::size_t{4} << 20, .unexpected_peer_limit = std::size_t{3} << 19});
  const std::size_t m = 1 << 20;
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    std::vector<std::byte> one(1), big = bytes(m, c.rank());
    if (c.rank() == 0) {
      if (auto r = co_await f.send(2, {4, 0}, big); !r) co_return fail(r.error());
      if (auto r = co_await f.send(2, {4, 1}, big); !r) co_return fail(r.error());
      if (auto r = co_await f.send(2, {6, 0}, one); !r) co_return fail(r.error());
    } else if (c.rank() == 1) {
      if (auto r = co_await f.send(2, {4, 0}, big); !r) co_return fail(r.error());
      if (auto r = co_await f.send(2, {6, 0}, one); !r) co_return fail(r.error());
    } else {
      if (auto r = co_await f.recv(1, {6, 0}, one); !r) co_return fail(r.error());
      if (auto r = co_await f.recv(0, {6, 0}, one); !r) co_return fail(r.error());
    }
    co_return result<void>{};
  });
  set_log_sink(std::move(old));
  REQUIRE_FALSE(res[2]);
  CHECK(res[2].error() == errc::limit_exceeded);
  const auto why = w.comms()[2].failure_detail();
  INFO(why);
  CHECK(why.find("rank 0 sent a message of 1048576 B") != std::string::npos);
  CHECK(why.find("OPTCAST_UNEXPECTED_PEER_LIMIT") != std::string::npos);
}

// ------------------------------------------------------------------- job secrets

namespace {

// Reads up to n bytes, until the peer closes or `wait` passes.
std::vector<std::byte> read_some(asio::ip::tcp::socket& s, std::size_t n, std::chrono::milliseconds wait = 5s) {
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

bool closed_within(asio::ip::tcp::socket& s, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  pollfd pfd{s.native_handle(), POLLIN, 0};
  while (std::chrono::steady_clock::now() < until) {
    if (::poll(&pfd, 1, 50) <= 0) continue;
    std::byte buf[256];
    if (::recv(s.native_handle(), buf, sizeof buf, 0) <= 0) return true;
  }
  return false;
}

std::uint32_t u32_at(const std::vector<std::byte>& v, std::size_t at) {
  std::uint32_t x = 0;
  if (v.size() >= at + 4) std::memcpy(&x, v.data() + at, 4);
  return x;
}

asio::ip::tcp::endpoint endpoint_of(const std::string& where) {
  auto a = store::parse_address(where);
  REQUIRE(a);
  return {asio::ip::make_address(a->host), a->port};
}

// What a stranger without the secret gets from a rank: the statuses of the replies to
// its hello (with `offer`, the auth flag and then 32 bytes posing as a proof), followed
// by `then` (a frame it hopes is read), and whether the rank closed the connection.
struct stranger_outcome {
  std::vector<std::uint32_t> statuses;
  bool nonce_given = false;
  bool closed = false;
};

stranger_outcome try_without_secret(const std::string& where, std::uint64_t job, bool offer, const std::vector<std::byte>& then) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  s.connect(endpoint_of(where));
  asio::write(s, asio::buffer(handshake(2, 3, job, offer ? 1 : 0)));
  stranger_outcome out;
  auto reply = read_some(s, 40);
  if (reply.size() == 40) out.statuses.push_back(u32_at(reply, 4));
  if (offer && u32_at(reply, 4) == 6) {  // the challenge
    out.nonce_given = std::any_of(reply.begin() + 8, reply.end(), [](std::byte b) { return b != std::byte{0}; });
    std::vector<std::byte> guess(32, std::byte{0x42});
    guess.insert(guess.end(), then.begin(), then.end());
    std::error_code ignored;
    asio::write(s, asio::buffer(guess), ignored);
    reply = read_some(s, 40);
    if (reply.size() == 40) out.statuses.push_back(u32_at(reply, 4));
  } else {
    std::error_code ignored;
    asio::write(s, asio::buffer(then), ignored);
  }
  out.closed = closed_within(s, 5s);
  return out;
}

// A frame announcing 2^40 bytes, and an abort frame with the attacker's text.
std::vector<std::byte> evil_frames() {
  auto f = data_header(9, 0, std::uint64_t{1} << 40);
  const std::string text = "forged: give up";
  std::vector<std::byte> abort_hdr(24 + 32);
  const std::uint32_t kind = 0x41444f43;
  const std::uint64_t code = 5, len = text.size();
  std::memcpy(abort_hdr.data(), &kind, 4);
  std::memcpy(abort_hdr.data() + 8, &code, 8);
  std::memcpy(abort_hdr.data() + 16, &len, 8);
  f.insert(f.end(), abort_hdr.begin(), abort_hdr.end());
  for (char ch : text) f.push_back(static_cast<std::byte>(ch));
  return f;
}

// Every rank sends to every other one: all p(p-1) connections carry a checked message.
// Ranks other than `host` first wait for `hold` (their threads block, while host's event
// loop runs and meets whoever connects to it).
std::vector<result<void>> all_pairs(testing::test_world& w, std::size_t m, std::vector<std::vector<std::vector<std::byte>>>& got,
                                    int host = -1, std::shared_future<void> hold = {}) {
  const int p = static_cast<int>(w.comms().size());
  got.assign(static_cast<std::size_t>(p), std::vector<std::vector<std::byte>>(static_cast<std::size_t>(p), std::vector<std::byte>(m)));
  return w.run_all([&, p, host, hold](communicator& c) -> task<result<void>> {
    const int r = c.rank();
    if (r != host && hold.valid()) hold.wait();
    const auto mine = bytes(m, r);
    for (int k = 1; k < p; ++k) {
      auto x = co_await exchange(c.get_fabric(), (r + k) % p, mine, (r + p - k) % p,
                                 got[static_cast<std::size_t>(r)][static_cast<std::size_t>((r + p - k) % p)], {4, static_cast<std::uint32_t>(k)});
      if (!x) co_return x;
    }
    co_return result<void>{};
  });
}

}  // namespace

TEST_CASE("with a job secret, a party without it is refused before any frame is read and learns nothing", "[tcp][auth]") {
  log_capture log;
  {
    testing::tcp_test_world w(3);  // with a secret
    const std::string target = tcp::listen_address(w.comms()[1].get_fabric());
    // Before rank 2 has connected to rank 1, strangers who know the job id claim its slot.
    stranger_outcome plain, guess, other;
    std::shared_future<void> strangers = std::async(std::launch::async, [&] {
      // Without a secret: refused at once (a job with a secret takes no other kind).
      plain = try_without_secret(target, testing::test_job_id, false, evil_frames());
      // Offering a secret it does not have: challenged, its guess refused, and closed.
      guess = try_without_secret(target, testing::test_job_id, true, evil_frames());
      // With another job id: the same.
      other = try_without_secret(target, 0x77, true, evil_frames());
    }).share();
    std::vector<std::vector<std::vector<std::byte>>> got;
    auto res = all_pairs(w, 100000, got, 1, strangers);
    CHECK(plain.statuses == std::vector<std::uint32_t>{7});  // hs_auth_differs
    CHECK(plain.closed);
    CHECK(guess.statuses == std::vector<std::uint32_t>{6, 8});  // hs_challenge, hs_auth_failed
    CHECK(guess.nonce_given);
    CHECK(guess.closed);
    CHECK(other.statuses == guess.statuses);  // the job id it knows is no help
    for (int r = 0; r < 3; ++r) {
      INFO("rank " << r);
      REQUIRE(res[static_cast<std::size_t>(r)]);
      for (int s = 0; s < 3; ++s)
        if (s != r) CHECK(got[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)] == bytes(100000, s));
      CHECK_FALSE(w.comms()[static_cast<std::size_t>(r)].failure());
    }
  }
  CHECK(log.seen("this job has a secret and the peer offered none"));
  CHECK(log.seen("it does not know the job secret"));
  CHECK_FALSE(log.seen("forged"));
}

TEST_CASE("a rank refuses a listener that cannot prove it knows the job secret", "[tcp][auth]") {
  auto old = set_log_sink([](log_level, std::string_view) {});
  const std::string secret = "the secret of a job of two ranks";
  store::server server("127.0.0.1", 0, 2, 0x5eedull, secret);
  // An impostor listens where rank 1 should: it challenges, takes the proof, and answers
  // "ok" with a proof of its own that it cannot compute.
  asio::io_context fake_io;
  asio::ip::tcp::acceptor fake(fake_io, {asio::ip::make_address("127.0.0.1"), 0});
  std::vector<std::byte> proof_seen;
  std::thread impostor([&] {
    asio::ip::tcp::socket s(fake_io);
    fake.accept(s);
    auto hello = read_some(s, 56);
    std::vector<std::byte> challenge(40, std::byte{0x17});
    const std::uint32_t magic = 0x4354504f, st_challenge = 6, st_ok = 0;
    std::memcpy(challenge.data(), &magic, 4);
    std::memcpy(challenge.data() + 4, &st_challenge, 4);
    asio::write(s, asio::buffer(challenge));
    proof_seen = read_some(s, 32);
    std::vector<std::byte> ok(40, std::byte{0x99});
    std::memcpy(ok.data(), &magic, 4);
    std::memcpy(ok.data() + 4, &st_ok, 4);
    asio::write(s, asio::buffer(ok));
    closed_within(s, 5s);
  });
  asio::io_context io;
  // The store is the job's (it needs the secret to be told where rank 1 listens).
  store::client rank1(io.get_executor(), {"127.0.0.1", server.port()}, 1, 2, 5s, secret);
  REQUIRE(rank1.set_wait("optcast/addr/1", "127.0.0.1:" + std::to_string(fake.local_endpoint().port()), 5s));
  job_config c;
  c.rank = 0;
  c.size = 2;
  c.store = {"127.0.0.1", server.port()};
  c.host_store = false;
  c.secret = secret;
  communicator comm(tcp::connect(c));
  std::vector<std::byte> msg(8);
  auto r = run(comm, send(comm, 1, 3, msg));
  impostor.join();
  set_log_sink(std::move(old));
  CHECK(proof_seen.size() == 32);
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::protocol_violation);
  INFO(comm.failure_detail());
  CHECK(comm.failure_detail().find("could not prove it knows the job secret") != std::string::npos);
}

namespace {

// Reads one store message (the header's length, then the rest); empty on close.
std::vector<std::byte> read_store_message(asio::ip::tcp::socket& s) {
  auto len = read_some(s, 4);
  if (len.size() < 4) return {};
  auto rest = read_some(s, u32_at(len, 0));
  len.insert(len.end(), rest.begin(), rest.end());
  return len;
}

std::string setup_failure(const std::function<void()>& f) {
  try {
    f();
  } catch (const setup_error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("with a job secret, the store admits, and answers, only those who know it", "[store][auth]") {
  log_capture log;
  const std::string secret = "the secret of a job of two ranks";
  const std::uint64_t id = 0x5eed5eed5eedull;
  store::server server("127.0.0.1", 0, 2, id, secret);
  const store::address where{"127.0.0.1", server.port()};
  asio::io_context io;
  auto join = [&](int rank, const std::string& s) { store::client c(io.get_executor(), where, rank, 2, 5s, s); };
  CHECK_THAT(setup_failure([&] { join(0, ""); }), Catch::Contains("has a secret") && Catch::Contains("did not offer one"));
  CHECK_THAT(setup_failure([&] { join(0, "another job's secret, 32 bytes.."); }), Catch::Contains("does not know the job secret"));
  // A stranger squatting on rank 0's slot with a guessed proof hears no welcome and no job id.
  {
    asio::ip::tcp::socket s(io);
    s.connect(endpoint_of(where.str()));
    asio::write(s, asio::buffer(store_message(1, 0, std::string(store::protocol), std::string(32, 'n'), {}, 2)));
    const auto challenge = read_store_message(s);
    REQUIRE(challenge.size() == 21 + 32);
    CHECK(std::to_integer<int>(challenge[4]) == 10);
    asio::write(s, asio::buffer(store_message(11, 0, "", std::string(32, 'p'))));
    const auto answer = read_store_message(s);
    REQUIRE(answer.size() > 21);
    CHECK(std::to_integer<int>(answer[4]) == 3);  // error
    std::vector<std::byte> id_bytes(8);
    std::memcpy(id_bytes.data(), &id, 8);
    CHECK(std::search(answer.begin(), answer.end(), id_bytes.begin(), id_bytes.end()) == answer.end());
    CHECK(closed_within(s, 5s));
  }
  // The real ranks take their slots.
  store::client a(io.get_executor(), where, 0, 2, 5s, secret), b(io.get_executor(), where, 1, 2, 5s, secret);
  CHECK(a.job_id() == id);
  CHECK(b.job_id() == id);
  // A store without the secret cannot take in a rank that has one.
  store::server open_store("127.0.0.1", 0, 2, id);
  CHECK_THAT(setup_failure([&] { store::client c(io.get_executor(), {"127.0.0.1", open_store.port()}, 0, 2, 5s, secret); }),
             Catch::Contains("has a job secret and this store has none"));
  CHECK(log.seen("the client does not know the job secret"));
}

TEST_CASE("a rank refuses a store that cannot prove it knows the job secret", "[store][auth]") {
  const std::string secret = "the secret of a job of two ranks";
  asio::io_context fake_io;
  asio::ip::tcp::acceptor fake(fake_io, {asio::ip::make_address("127.0.0.1"), 0});
  std::thread impostor([&] {
    asio::ip::tcp::socket s(fake_io);
    fake.accept(s);
    read_store_message(s);  // hello
    asio::write(s, asio::buffer(store_message(10, 0, "", std::string(32, 'c'))));
    read_store_message(s);  // proof
    std::string welcome(8, '\x01');
    welcome += std::string(32, '\x99');
    asio::write(s, asio::buffer(store_message(2, 0, "", welcome)));
    closed_within(s, 5s);
  });
  asio::io_context io;
  const auto why = setup_failure([&] { store::client c(io.get_executor(), {"127.0.0.1", fake.local_endpoint().port()}, 0, 2, 5s, secret); });
  impostor.join();
  CHECK_THAT(why, Catch::Contains("could not prove it knows the job secret"));
}

TEST_CASE("a job secret shorter than 16 bytes is refused with the reason", "[store][auth]") {
  CHECK_THAT(setup_failure([&] { store::server s("127.0.0.1", 0, 2, 1, "short"); }), Catch::Contains("at least 16"));
}

// ------------------------------------------------------------------- encryption

namespace {

// Relays one connection to `to`, flipping the byte at `flip` of what the opener sends.
class flipping_proxy {
public:
  flipping_proxy(asio::ip::tcp::endpoint to, std::size_t flip)
      : acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}), to_(to), flip_(flip) {
    thread_ = std::thread([this] { relay(); });
  }
  ~flipping_proxy() { thread_.join(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }

private:
  void relay() {
    asio::ip::tcp::socket a(io_), b(io_);
    acceptor_.accept(a);
    b.connect(to_);
    std::size_t at = 0;
    pollfd fds[2] = {{a.native_handle(), POLLIN, 0}, {b.native_handle(), POLLIN, 0}};
    for (int idle = 0; idle < 100;) {  // 5 s without traffic ends it
      if (::poll(fds, 2, 50) <= 0) {
        ++idle;
        continue;
      }
      idle = 0;
      std::byte buf[65536];
      if (fds[0].revents) {
        const auto n = ::recv(a.native_handle(), buf, sizeof buf, 0);
        if (n <= 0) return;
        if (flip_ >= at && flip_ < at + static_cast<std::size_t>(n)) buf[flip_ - at] ^= std::byte{0x20};
        at += static_cast<std::size_t>(n);
        if (::send(b.native_handle(), buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) return;
      }
      if (fds[1].revents) {
        const auto n = ::recv(b.native_handle(), buf, sizeof buf, 0);
        if (n <= 0) return;
        if (::send(a.native_handle(), buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) return;
      }
    }
  }
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::ip::tcp::endpoint to_;
  std::size_t flip_;
  std::thread thread_;
};

// Rank r of a job of `size` whose store (not hosted by a rank) is at 127.0.0.1:port.
job_config rank_of(int r, int size, std::uint16_t port, const std::string& secret, bool encrypt) {
  job_config c;
  c.rank = r;
  c.size = size;
  c.store = {"127.0.0.1", port};
  c.host_store = false;
  c.secret = secret;
  c.encrypt = encrypt;
  return c;
}

// Rank 0 sends 1000 bytes to rank 1 through a proxy that flips one payload byte (the
// opener's hello is 56 bytes, its proof 32, the frame header 56). What rank 1 got, or
// why it failed.
result<std::vector<std::byte>> send_through_flipper(bool encrypt) {
  const std::string secret = "the secret of a job of two ranks";
  store::server server("127.0.0.1", 0, 3, 0x5eedull, secret);
  asio::io_context io0, io1, io2;
  // The job has 3 ranks: the third is this test, to redirect rank 0.
  std::shared_ptr<fabric> f1;
  std::thread t([&] { f1 = tcp::connect(rank_of(1, 3, server.port(), secret, encrypt)); });
  auto f0 = tcp::connect(rank_of(0, 3, server.port(), secret, encrypt));
  t.join();
  store::client me(io2.get_executor(), {"127.0.0.1", server.port()}, 2, 3, 5s, secret);
  flipping_proxy proxy(endpoint_of(tcp::listen_address(*f1)), 56 + 32 + 56 + 500);
  REQUIRE(me.set_wait("optcast/addr/1", proxy.address(), 5s));
  communicator c0(f0), c1(f1);
  const auto sent = bytes(1000, 3);
  std::vector<std::byte> got(1000);
  result<void> r0, r1;
  std::thread receiver([&] { r1 = run(c1, recv(c1, 0, 7, got)); });
  r0 = run(c0, send(c0, 1, 7, sent));
  receiver.join();
  me.bye(0ms);
  if (!r1) return fail(r1.error());
  return got;
}

}  // namespace

TEST_CASE("with OPTCAST_ENCRYPT a frame altered on the way fails its receive; without, it is taken as sent", "[tcp][auth]") {
  log_capture log;
  const auto sent = bytes(1000, 3);
  SECTION("encrypted") {
    auto got = send_through_flipper(true);
    REQUIRE_FALSE(got);
    CHECK(got.error() == errc::protocol_violation);
    CHECK(log.seen("fails authentication"));
  }
  SECTION("not encrypted: the proxy does alter the data") {
    auto got = send_through_flipper(false);
    REQUIRE(got);
    CHECK(*got != sent);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < sent.size(); ++i) differ += (*got)[i] != sent[i];
    CHECK(differ == 1);
  }
}

TEST_CASE("encryption is all or nothing, and needs a secret", "[tcp][auth]") {
  SECTION("one rank encrypts, the other not: refused with the reason") {
    log_capture log;
    const std::string secret = "the secret of a job of two ranks";
    store::server server("127.0.0.1", 0, 2, 0x5eedull, secret);
    std::shared_ptr<fabric> f1;
    std::thread t([&] { f1 = tcp::connect(rank_of(1, 2, server.port(), secret, true)); });
    communicator c0(tcp::connect(rank_of(0, 2, server.port(), secret, false)));
    t.join();
    communicator c1(f1);
    std::vector<std::byte> msg(8);
    result<void> r1;
    std::thread receiver([&] { r1 = run(c1, recv(c1, 0, 7, msg, std::chrono::milliseconds(3000))); });
    auto r0 = run(c0, send(c0, 1, 7, msg));
    receiver.join();
    REQUIRE_FALSE(r0);
    CHECK(c0.failure_detail().find("one side encrypts and the other not") != std::string::npos);
    CHECK(log.seen("the peer does not (OPTCAST_ENCRYPT)"));
  }
  SECTION("no secret") {
    job_config c;
    c.encrypt = true;
    CHECK_THAT(setup_failure([&] { tcp::connect(c); }), Catch::Contains("OPTCAST_ENCRYPT needs a job secret"));
  }
}

// A collective stuck past its deadline: the store asks every rank that did not report the
// stall itself whether it is alive, and the one that does not answer is the root cause.
TEST_CASE("the store names the rank that does not answer a stall inquiry, or tells the reporters nobody is stuck", "[store]") {
  namespace p = store::proto;
  std::vector<std::vector<p::message>> got(4);
  p::table t(4, [&](int r, const p::message& m) { got[static_cast<std::size_t>(r)].push_back(m); });
  for (int r = 0; r < 4; ++r) t.join(r);
  const auto last = [&](int r) { return got[static_cast<std::size_t>(r)].empty() ? p::message{} : got[static_cast<std::size_t>(r)].back(); };

  REQUIRE(t.on_message(1, {p::m_stalled, 0, 17, {}, "waiting for receive from rank 2"}));
  const std::uint32_t q = t.inquiry();
  REQUIRE(q != 0);
  for (int r : {0, 2, 3}) CHECK(last(r).type == p::m_ping);
  CHECK(got[1].empty());  // the reporter is not asked

  SECTION("every rank answers: only the reporters hear that nobody is stuck") {
    REQUIRE(t.on_message(3, {p::m_stalled, 0, 17, {}, {}}));  // a second reporter joins the inquiry
    REQUIRE(t.on_message(0, {p::m_pong, q, 0, {}, {}}));
    CHECK(t.inquiry() == q);
    REQUIRE(t.on_message(2, {p::m_pong, q, 0, {}, {}}));
    CHECK(t.inquiry() == 0);  // all accounted for: no need to wait out the window
    CHECK(last(1).type == p::m_verdict);
    CHECK(last(3).type == p::m_verdict);
    CHECK(last(0).type == p::m_ping);
    CHECK(last(2).type == p::m_ping);
    CHECK_FALSE(t.failed());
  }
  SECTION("a stale answer does not count; the silent rank is named to every rank") {
    REQUIRE(t.on_message(2, {p::m_pong, q + 7, 0, {}, {}}));
    REQUIRE(t.on_message(0, {p::m_pong, q, 0, {}, {}}));
    REQUIRE(t.on_message(3, {p::m_pong, q, 0, {}, {}}));
    CHECK(t.inquiry() == q);  // rank 2 has not answered: the store waits for its window
    t.conclude();
    REQUIRE(t.failed());
    CHECK(t.failure()->type == p::m_job_failed);
    CHECK(t.failure()->id == static_cast<std::uint32_t>(errc::timeout));
    CHECK(t.failure()->arg == 2);
    CHECK_THAT(t.failure()->val, Catch::StartsWith("rank 2 stopped responding") && Catch::Contains("rank 1 waited in collective 17 near its deadline"));
    for (int r = 0; r < 4; ++r) CHECK(last(r) == *t.failure());
    SECTION("a later report gets the failure at once") {
      got[3].clear();
      REQUIRE(t.on_message(3, {p::m_stalled, 0, 18, {}, {}}));
      CHECK(t.inquiry() == 0);
      CHECK(last(3) == *t.failure());
    }
  }
  SECTION("a rank that said goodbye is not asked to answer") {
    REQUIRE(t.on_message(3, {p::m_bye, 0, 0, {}, {}}));
    REQUIRE(t.on_message(0, {p::m_pong, q, 0, {}, {}}));
    REQUIRE(t.on_message(2, {p::m_pong, q, 0, {}, {}}));
    CHECK(t.inquiry() == 0);
    CHECK_FALSE(t.failed());
    CHECK(last(1).type == p::m_verdict);
  }
}

// Calls that differ and wait on each other never exchange a message that would show it:
// the store, inquiring into the stall, compares the ranks' signatures of the collective
// (the reporters', the answers', and the goodbyes that name it).
TEST_CASE("the store finds calls that differ when a collective stalls", "[store]") {
  namespace p = store::proto;
  std::vector<std::vector<p::message>> got(4);
  p::table t(4, [&](int r, const p::message& m) { got[static_cast<std::size_t>(r)].push_back(m); });
  for (int r = 0; r < 4; ++r) t.join(r);
  const auto sig = [](std::uint32_t root) {
    call_signature s;
    s.coll = static_cast<std::uint8_t>(collective::gather) + 1;
    s.alg = 1;
    s.root = root;
    s.bytes = 4000;
    s.blocks = 1;
    std::string b(call_signature::wire_bytes, '\0');
    s.encode(reinterpret_cast<std::byte*>(b.data()));
    return b;
  };
  const auto mismatch = static_cast<std::uint32_t>(errc::call_mismatch);
  REQUIRE(t.on_message(0, {p::m_stalled, 0, 17, sig(0), "waiting for receive from rank 2"}));
  const std::uint32_t q = t.inquiry();
  for (int r : {1, 2, 3}) CHECK(got[static_cast<std::size_t>(r)].back().arg == 17);  // the ping names the collective

  SECTION("an answer with another root") {
    REQUIRE(t.on_message(1, {p::m_pong, q, 0, sig(0), {}}));
    REQUIRE(t.on_message(2, {p::m_pong, q, 0, {}, {}}));  // it has not made the call
    REQUIRE(t.on_message(3, {p::m_pong, q, 0, sig(1), {}}));
    REQUIRE(t.failed());
    CHECK(t.failure()->id == mismatch);
    CHECK_THAT(t.failure()->val, Catch::StartsWith("collective 17 was called differently: rank 3 called gather") &&
                                     Catch::Contains("root 1") && Catch::Contains("rank 0 gather") && Catch::Contains("root 0"));
    for (int r = 0; r < 4; ++r) CHECK(got[static_cast<std::size_t>(r)].back() == *t.failure());
  }
  SECTION("a goodbye that names the collective with another root; one that names another does not count") {
    REQUIRE(t.on_message(2, {p::m_bye, 0, 16, sig(5), {}}));
    REQUIRE(t.on_message(3, {p::m_bye, 0, 17, sig(3), {}}));
    REQUIRE(t.on_message(1, {p::m_pong, q, 0, sig(0), {}}));
    REQUIRE(t.failed());
    CHECK(t.failure()->id == mismatch);
    CHECK_THAT(t.failure()->val, Catch::Contains("rank 3 called gather") && Catch::Contains("root 3") && !Catch::Contains("root 5"));
  }
  SECTION("alike calls: the reporters hear that nobody is stuck") {
    for (int r : {1, 2, 3}) REQUIRE(t.on_message(r, {p::m_pong, q, 0, sig(0), {}}));
    CHECK_FALSE(t.failed());
    CHECK(got[0].back().type == p::m_verdict);
  }
  SECTION("a signature of the wrong length is not taken for a call") {
    for (int r : {1, 2, 3}) REQUIRE(t.on_message(r, {p::m_pong, q, 0, sig(1).substr(0, 31), {}}));
    CHECK_FALSE(t.failed());
  }
}

TEST_CASE("a rank that joins after the job failed is told, though it sets its callbacks later", "[store]") {
  // A slow rank (a sanitizer build, a loaded host) may reach the store after the others
  // have failed: the store tells it at once, before its fabric has set the callbacks.
  const std::string secret = "the secret of a job of two ranks";
  store::server server("127.0.0.1", 0, 2, 0x1a7eull, secret);
  asio::io_context io;
  const store::address where{"127.0.0.1", server.port()};
  store::client first(io.get_executor(), where, 0, 2, 5s, secret);
  first.report_failure(static_cast<std::uint32_t>(errc::call_mismatch), "rank 0 failed: called differently");
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (!server.failed() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
  REQUIRE(server.failed());
  store::client late(io.get_executor(), where, 1, 2, 5s, secret);
  std::this_thread::sleep_for(100ms);  // the store's word is here before the callbacks
  std::string told;
  std::uint64_t code = 0;
  late.on_events(nullptr, nullptr, [&](std::uint64_t c, std::string why) {
    code = c;
    told = std::move(why);
  });
  while (told.empty() && std::chrono::steady_clock::now() < until + 5s) {
    io.restart();
    io.run_for(10ms);
  }
  CHECK(told == "rank 0 failed: called differently");
  CHECK(code == static_cast<std::uint64_t>(errc::call_mismatch));
}
