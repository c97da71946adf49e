// Trust nothing from the wire, on the TCP fabric: what strangers, impostors and admitted
// peers that break the protocol can do to a job (nothing but be refused, or fail it with a
// clear error). The store's side: store_trust_test.cpp; encryption: encrypt_test.cpp.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <optional>
#include <thread>
#include <vector>

#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include "bootstrap/store_protocol.hpp"
#include "counting_new.hpp"
#include "optcast/when_all.hpp"
#include "wire_peer.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace optcast::testing;
using namespace std::chrono_literals;

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

// A stranger admitted as rank 2 sends `frame`; rank 1, waiting for rank 2, must fail
// with a protocol violation and be broken by it.
void expect_protocol_violation(const std::vector<std::byte>& frame, const std::string& why = "malformed frame") {
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
  CHECK(w.comms()[1].failure_detail().find(why) != std::string::npos);
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
  SECTION("a receipt, which only ever goes the other way") {
    std::vector<std::byte> hdr(24 + 32);
    const std::uint32_t kind = 0x4b444f43;
    std::memcpy(hdr.data(), &kind, 4);
    expect_protocol_violation(hdr);
  }
  SECTION("a message by reference on a connection that did not prove it can carry one") {
    // Read from whose memory? Only a peer whose probe this rank read may name an address.
    std::vector<std::byte> hdr(24 + 32 + 16, std::byte{0});
    const std::uint32_t kind = 0x52444f43;
    const std::uint64_t tg = std::uint64_t{5} << 32, len = 16;
    std::memcpy(hdr.data(), &kind, 4);
    std::memcpy(hdr.data() + 8, &tg, 8);
    std::memcpy(hdr.data() + 16, &len, 8);
    expect_protocol_violation(hdr, "a message by reference on a connection that cannot carry one");
  }
}

namespace {

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

TEST_CASE("empty messages count against the room for unexpected messages too", "[tcp][fabric]") {
  // 64 KiB of room: 2,000 empty messages nobody receives are more than it holds (each costs
  // its record and buffer), where their payloads alone would be nothing.
  auto old = set_log_sink([](log_level, std::string_view) {});
  testing::tcp_test_world w(2, {}, {.unexpected_limit = std::size_t{64} << 10});
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    std::vector<std::byte> one(1);
    if (c.rank() == 0) {
      for (std::uint32_t i = 0; i < 2000; ++i)
        if (auto r = co_await f.send(1, {4, i}, std::span<const std::byte>()); !r) co_return fail(r.error());
      if (auto r = co_await f.send(1, {6, 0}, one); !r) co_return fail(r.error());
    } else {
      if (auto r = co_await f.recv(0, {6, 0}, one); !r) co_return fail(r.error());
    }
    co_return result<void>{};
  });
  set_log_sink(std::move(old));
  REQUIRE_FALSE(res[1]);
  CHECK(res[1].error() == errc::limit_exceeded);
  const auto why = w.comms()[1].failure_detail();
  INFO(why);
  CHECK(why.find("rank 0 sent a message of 0 B") != std::string::npos);
}

// ------------------------------------------------------------------- job secrets

namespace {

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
