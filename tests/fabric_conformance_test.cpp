// The fabric contract (fabric.hpp), checked the same way on every fabric: tag matching,
// unexpected messages, zero bytes, size mismatches, failures inside a round, deadlines,
// several collectives in flight.
#include <catch2/catch.hpp>

#include <chrono>
#include <vector>

#include "optcast/log.hpp"
#include "optcast/when_all.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;

namespace {

std::vector<std::byte> bytes(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>(((i * 7 + static_cast<std::size_t>(seed) * 131) ^ (i >> 9)) & 0xff);
  return v;
}

result<void> as_void(const result<std::size_t>& r) { return r ? result<void>{} : fail(r.error()); }

}  // namespace

TEST_CASE("messages match by tag, arrive before their receive, and may be empty", "[local][tcp][fabrics][fabric]") {
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), 2);
  // The large one exceeds any socket buffer, so it is still arriving while posted.
  const auto a = bytes(100, 1), b = bytes(7, 2), big = bytes((8u << 20) + 3, 3);
  std::vector<std::byte> ra(100), rb(7), rz, rbig(big.size());
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    if (c.rank() == 0) {
      for (auto [t, data] : {std::pair{tag{5, 1}, std::span<const std::byte>(a)}, {tag{5, 2}, std::span<const std::byte>(b)},
                             {tag{5, 3}, std::span<const std::byte>()}, {tag{6, 0}, std::span<const std::byte>(big)}})
        if (auto r = co_await f.send(1, t, data); !r) co_return fail(r.error());
      co_return result<void>{};
    }
    // Received in the reverse order of sending: matched by tag, not by arrival.
    if (auto r = co_await f.recv(0, {6, 0}, rbig); !r) co_return fail(r.error());
    if (auto r = co_await f.recv(0, {5, 3}, rz); !r) co_return fail(r.error());
    if (auto r = co_await f.recv(0, {5, 2}, rb); !r) co_return fail(r.error());
    co_return as_void(co_await f.recv(0, {5, 1}, ra));
  });
  REQUIRE(res[0]);
  REQUIRE(res[1]);
  CHECK(ra == a);
  CHECK(rb == b);
  CHECK(rbig == big);
}

TEST_CASE("messages with equal tags between two ranks arrive in order", "[local][tcp][fabrics][fabric]") {
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), 2);
  std::vector<std::uint32_t> got(50);
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    for (std::uint32_t i = 0; i < 50; ++i) {
      result<std::size_t> r;
      if (c.rank() == 0)
        r = co_await f.send(1, {9, 9}, std::as_bytes(std::span(&i, 1)));
      else
        r = co_await f.recv(0, {9, 9}, std::as_writable_bytes(std::span(&got[i], 1)));
      if (!r) co_return fail(r.error());
    }
    co_return result<void>{};
  });
  REQUIRE(res[0]);
  REQUIRE(res[1]);
  for (std::uint32_t i = 0; i < 50; ++i) CHECK(got[i] == i);
}

TEST_CASE("a receive of the wrong size fails without overflow", "[local][tcp][fabrics][fabric]") {
  const std::string kind = GENERATE(from_range(testing::fabric_kinds()));
  INFO("fabric " << kind);
  const bool posted_first = GENERATE(false, true);
  auto w = testing::make_world(kind, 2);
  const auto big = bytes(64, 3);
  std::vector<std::byte> small(32 + 16, std::byte{0x5A});  // 32 wanted, then a guard
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    if (c.rank() == 0) {
      if (auto r = co_await f.send(1, {1, 0}, big); !r) co_return fail(r.error());
      co_return as_void(co_await f.send(1, {1, 1}, std::span<const std::byte>()));
    }
    if (!posted_first)  // the empty marker comes after the message: it is buffered by now
      if (auto r = co_await f.recv(0, {1, 1}, std::span<std::byte>()); !r) co_return fail(r.error());
    co_return as_void(co_await f.recv(0, {1, 0}, std::span(small).first(32)));
  });
  REQUIRE_FALSE(res[1]);
  CHECK(res[1].error() == errc::size_mismatch);
  for (std::size_t i = 32; i < small.size(); ++i) CHECK(small[i] == std::byte{0x5A});
  const auto& why = w->comms()[1].get_fabric().last_error();
  CHECK(why.find("size mismatch") != std::string::npos);
  if (kind.rfind("ofi:", 0) != 0) CHECK(why.find("64 B") != std::string::npos);  // libfabric may not say
}

TEST_CASE("when_all: a failing send cancels its receive at once", "[local][tcp][fabrics][fabric]") {
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), 2);
  std::vector<std::byte> buf(8);
  const auto start = std::chrono::steady_clock::now();
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    if (c.rank() == 1) co_return result<void>{};
    auto& f = c.get_fabric();
    // The send names a rank that does not exist; the receive would wait forever.
    co_return co_await when_all(f.send(7, {1, 0}, buf), f.recv(1, {1, 0}, buf));
  });
  REQUIRE_FALSE(res[0]);
  CHECK(res[0].error() == errc::invalid_argument);
  CHECK(std::chrono::steady_clock::now() - start < 2s);
}

TEST_CASE("a stalled root yields a timeout, not a hang", "[local][tcp][fabrics][fabric]") {
  const std::string kind = GENERATE(from_range(testing::fabric_kinds()));
  // The simulator has no wall-clock deadlines: it finds the stall at once (sim_test).
  if (kind.starts_with("sim")) return;
  auto w = testing::make_world(kind, 3);
  std::vector<std::vector<std::byte>> bufs(3, std::vector<std::byte>(1000));
  const auto start = std::chrono::steady_clock::now();
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    if (c.rank() == 0) co_return result<void>{};  // the root never joins
    co_return co_await broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 0, {.timeout = 200ms});
  });
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  for (int r : {1, 2}) {
    INFO("rank " << r);
    REQUIRE_FALSE(res[static_cast<std::size_t>(r)]);
    CHECK(res[static_cast<std::size_t>(r)].error() == errc::timeout);
    CHECK(w->comms()[static_cast<std::size_t>(r)].broken());
    CHECK(w->comms()[static_cast<std::size_t>(r)].failure_detail().find("deadline") != std::string::npos);
  }
  // A broken communicator refuses further collectives at once.
  auto& c1 = w->comms()[1];
  auto again = run(c1, broadcast(c1, std::span(bufs[1]), 0));
  REQUIRE_FALSE(again);
  CHECK(again.error() == errc::broken);
}

TEST_CASE("several collectives in flight on one communicator do not cross-match", "[local][tcp][fabrics][fabric]") {
  const int p = 7;
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), p);
  std::vector<std::vector<std::byte>> a(p, std::vector<std::byte>(5000)), b(p, std::vector<std::byte>(5000));
  const auto want_a = bytes(5000, 11), want_b = bytes(5000, 12);
  a[2] = want_a;
  b[5] = want_b;
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    const auto r = static_cast<std::size_t>(c.rank());
    // Both started before either finishes; same sizes, so only the tags keep them apart.
    std::vector<task<result<void>>> both;
    both.push_back(broadcast(c, std::span(a[r]), 2, {.blocks = 5}));
    both.push_back(broadcast(c, std::span(b[r]), 5, {.blocks = 3}));
    auto out = co_await when_all_tasks(std::move(both));
    for (auto& x : out)
      if (!x) co_return x;
    co_return result<void>{};
  });
  for (std::size_t r = 0; r < p; ++r) {
    INFO("rank " << r);
    CHECK(res[r]);
    CHECK(a[r] == want_a);
    CHECK(b[r] == want_b);
  }
}

TEST_CASE("bad arguments are refused without breaking the communicator", "[local][tcp][fabrics][fabric]") {
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), 3);
  auto& c = w->comms()[0];
  std::vector<std::byte> buf(10);
  for (auto [root, blocks] : {std::pair{3, 0}, {-1, 0}, {0, -2}}) {
    auto r = run(c, broadcast(c, std::span(buf), root, {.blocks = blocks}));
    REQUIRE_FALSE(r);
    CHECK(r.error() == errc::invalid_argument);
  }
  auto r = run(c, send(c, 0, 1, buf));  // to itself
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::invalid_argument);
  CHECK_FALSE(c.broken());
}

TEST_CASE("broadcast over TCP threads, several p, roots and sizes", "[tcp][broadcast]") {
  for (int p : {1, 2, 3, 5, 8}) {
    testing::tcp_test_world w(p);
    for (int root : {0, p - 1, p / 2})
      for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{100003}, std::size_t{3u << 20}}) {
        std::vector<std::vector<std::byte>> bufs(static_cast<std::size_t>(p), std::vector<std::byte>(size));
        const auto want = bytes(size, root + 1);
        bufs[static_cast<std::size_t>(root)] = want;
        auto res = w.run_all([&](communicator& c) {
          return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), root, {.blocks = size > 1000 ? 7 : 1});
        });
        for (int r = 0; r < p; ++r) {
          INFO("p=" << p << " root=" << root << " size=" << size << " rank=" << r);
          REQUIRE(res[static_cast<std::size_t>(r)]);
          REQUIRE(bufs[static_cast<std::size_t>(r)] == want);
        }
      }
  }
}

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


// Connects to host:port and writes `bytes`, then keeps the socket open for `hold`.
void stranger(const std::string& where, std::vector<std::byte> bytes, std::chrono::milliseconds hold) {
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  auto a = store::parse_address(where);
  REQUIRE(a);
  s.connect({asio::ip::make_address(a->host), a->port});
  if (!bytes.empty()) asio::write(s, asio::buffer(bytes));
  std::this_thread::sleep_for(hold);
}

}  // namespace

TEST_CASE("strangers on a rank's port are refused and the job goes on", "[tcp][fabric]") {
  log_capture log;
  {
    testing::tcp_test_world w(4);
    const std::string target = tcp::listen_address(w.comms()[1].get_fabric());
    REQUIRE_FALSE(target.empty());
    // Garbage; a well-formed handshake of another job; a half handshake that stops.
    std::vector<std::byte> garbage(100, std::byte{0x41});
    std::vector<std::byte> other_job(24);
    const std::uint32_t magic = 0x4354504f;
    std::memcpy(other_job.data(), &magic, 4);
    other_job[4] = std::byte{1};
    other_job[8] = std::byte{0x77};  // job id 0x77, not this job's
    other_job[20] = std::byte{4};    // size 4
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

// A store message: length, type, id, arg, key length, value length, key, value.
std::vector<std::byte> store_message(std::uint8_t type, std::uint32_t arg, const std::string& key, const std::string& val,
                                     std::optional<std::uint32_t> claimed = {}) {
  std::vector<std::byte> m(21 + key.size() + val.size());
  const std::uint32_t kl = claimed.value_or(static_cast<std::uint32_t>(key.size()));
  const std::uint32_t vl = claimed.value_or(static_cast<std::uint32_t>(val.size()));
  const std::uint32_t len = 17 + kl + vl, id = 0;
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
    // A hello whose job size is terminal control text.
    strangers.emplace_back([&] {
      evil = closed_after(server.port(), store_message(1, 0, "optcast-store/1", "\x1b[31m8\nforged line"), 5s);
    });
    for (auto& t : strangers) t.join();
    CHECK(silent >= 9s);
    CHECK(silent < 14s);
    CHECK(oversized < 1s);
    CHECK(evil < 1s);
    // The job is unharmed: both ranks join and exchange a key.
    asio::io_context io;
    store::client a(io, {"127.0.0.1", server.port()}, 0, 2, 5s), b(io, {"127.0.0.1", server.port()}, 1, 2, 5s);
    CHECK(a.job_id() == 0x5eedull);
    CHECK(b.job_id() == 0x5eedull);
  }
  CHECK(log.seen("said no hello"));
  const std::string refused = log.find("expects a job of");
  REQUIRE_FALSE(refused.empty());
  INFO(refused);
  CHECK(refused.find("\\x1b[31m8\\x0aforged line") != std::string::npos);
  CHECK(refused.find('\x1b') == std::string::npos);
  CHECK(refused.find('\n') == std::string::npos);
}

TEST_CASE("a circulant broadcast opens about 2 log2 p connections per rank", "[tcp][fabric]") {
  const int p = 16;  // q = 4
  testing::tcp_test_world w(p);
  std::vector<std::vector<std::byte>> bufs(p, std::vector<std::byte>(1 << 16));
  auto res = w.run_all([&](communicator& c) {
    return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 5, {.alg = algorithm::circulant, .blocks = 8});
  });
  for (int r = 0; r < p; ++r) {
    REQUIRE(res[static_cast<std::size_t>(r)]);
    const auto n = tcp::connections(w.comms()[static_cast<std::size_t>(r)].get_fabric());
    INFO("rank " << r << ": " << n.outgoing << " out, " << n.incoming << " in");
    CHECK(n.outgoing <= 4);  // to r + skip[k], k < q
    CHECK(n.incoming <= 4);  // from r - skip[k]
  }
}

namespace {

// A valid handshake of the tcp_test_world's job as `rank` of `size`.
std::vector<std::byte> handshake(std::uint32_t rank, std::uint32_t size) {
  std::vector<std::byte> h(24);
  const std::uint32_t magic = 0x4354504f;
  const std::uint16_t version = 1;
  const std::uint64_t job = 0x0b7c457ull;
  std::memcpy(h.data(), &magic, 4);
  std::memcpy(h.data() + 4, &version, 2);
  std::memcpy(h.data() + 8, &job, 8);
  std::memcpy(h.data() + 16, &rank, 4);
  std::memcpy(h.data() + 20, &size, 4);
  return h;
}

// A stranger admitted as rank 2 sends `frame`; rank 1, waiting for rank 2, must fail
// with a protocol violation and be broken by it.
void expect_protocol_violation(const std::vector<std::byte>& frame) {
  auto old = set_log_sink([](log_level, std::string_view) {});
  testing::tcp_test_world w(3);
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
  SECTION("bad frame kind") { expect_protocol_violation(std::vector<std::byte>(24, std::byte{0x13})); }
  SECTION("absurd length") {
    std::vector<std::byte> hdr(24);
    const std::uint32_t kind = 0x46444f43;
    const std::uint64_t len = ~std::uint64_t{0};
    std::memcpy(hdr.data(), &kind, 4);
    std::memcpy(hdr.data() + 16, &len, 8);
    expect_protocol_violation(hdr);
  }
}

namespace {

// A data frame header as the wire carries it: kind, 0, tag, length.
std::vector<std::byte> data_header(std::uint32_t seq, std::uint32_t step, std::uint64_t len) {
  std::vector<std::byte> h(24);
  const std::uint32_t kind = 0x46444f43;
  const std::uint64_t tg = (std::uint64_t{seq} << 32) | step;
  std::memcpy(h.data(), &kind, 4);
  std::memcpy(h.data() + 8, &tg, 8);
  std::memcpy(h.data() + 16, &len, 8);
  return h;
}

long rss_kib() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "VmRSS: %ld kB", &kib) == 1) break;
  std::fclose(f);
  return kib;
}

// A stranger admitted as rank 2 announces `len` bytes for a tag no receive waits for;
// rank 1, waiting for another message of rank 2, must fail with limit_exceeded, having
// allocated nothing for it.
void expect_refused_length(std::uint64_t len, std::optional<std::size_t> limit) {
  auto old = set_log_sink([](log_level, std::string_view) {});
  testing::tcp_test_world w(3, {}, 1, limit);
  auto frame = handshake(2, 3);
  const auto hdr = data_header(9, 0, len);
  frame.insert(frame.end(), hdr.begin(), hdr.end());
  frame.resize(frame.size() + 4096, std::byte{0x5a});  // the start of the announced payload
  const long before = rss_kib();
  std::thread t(stranger, tcp::listen_address(w.comms()[1].get_fabric()), frame, 500ms);
  std::vector<std::byte> buf(16);
  auto r = run(w.comms()[1], recv(w.comms()[1], 2, 5, buf));
  const long after = rss_kib();
  t.join();
  set_log_sink(std::move(old));
  REQUIRE_FALSE(r);
  CHECK(r.error() == errc::limit_exceeded);
  const auto why = w.comms()[1].failure_detail();
  INFO(why);
  CHECK(why.find("rank 2 sent a message of " + std::to_string(len) + " B") != std::string::npos);
  CHECK(why.find("OPTCAST_UNEXPECTED_LIMIT") != std::string::npos);
  CHECK(after - before < 64 * 1024);  // KiB: nothing near the announced size was committed
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
  testing::tcp_test_world w(2, {}, 1, std::size_t{3} << 19);
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

TEST_CASE("a failing rank tells its peers why", "[tcp][fabric]") {
  testing::tcp_test_world w(2);
  std::vector<std::byte> buf(8);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    auto& f = c.get_fabric();
    if (c.rank() == 0) {
      // Open the connection to rank 1 with one message, then fail.
      if (auto r = co_await f.send(1, {3, 0}, buf); !r) co_return fail(r.error());
      f.abort(make_error_code(errc::timeout), "the reason of rank 0");
      co_return result<void>{};
    }
    if (auto r = co_await f.recv(0, {3, 0}, buf); !r) co_return fail(r.error());
    co_return as_void(co_await f.recv(0, {3, 1}, buf));  // never sent: rank 0 failed
  });
  REQUIRE_FALSE(res[1]);
  CHECK(res[1].error() == errc::peer_lost);
  CHECK(w.comms()[1].failure_detail().find("rank 0 failed: the reason of rank 0") != std::string::npos);
}

TEST_CASE("exchange: every rank sends right and receives from the left at once", "[local][tcp][fabrics][fabric]") {
  const int p = 5;
  auto w = testing::make_world(GENERATE(from_range(testing::fabric_kinds())), p);
  std::vector<std::vector<std::byte>> out(p), in(p, std::vector<std::byte>(3000));
  for (int r = 0; r < p; ++r) out[static_cast<std::size_t>(r)] = bytes(3000, r);
  auto res = w->run_all([&](communicator& c) -> task<result<void>> {
    const int r = c.rank();
    co_return co_await exchange(c.get_fabric(), (r + 1) % p, out[static_cast<std::size_t>(r)], (r + p - 1) % p,
                                in[static_cast<std::size_t>(r)], {4, 0});
  });
  for (int r = 0; r < p; ++r) {
    REQUIRE(res[static_cast<std::size_t>(r)]);
    CHECK(in[static_cast<std::size_t>(r)] == out[static_cast<std::size_t>((r + p - 1) % p)]);
  }
}

TEST_CASE("one event loop serves a TCP fabric and a libfabric fabric at once", "[ofi][fabric]") {
  // Runs in the libfabric run only (tagged [ofi]), where tests/main.cpp found the provider.
  const int p = 3;
  // Two jobs (a store each: a store admits a rank once), each rank in both, with one
  // io_context per rank driving both of its fabrics.
  store::server tcp_store("127.0.0.1", 0, p, 101), ofi_store("127.0.0.1", 0, p, 202);
  std::vector<std::unique_ptr<asio::io_context>> ios;
  for (int r = 0; r < p; ++r) ios.push_back(std::make_unique<asio::io_context>(1));
  std::vector<std::optional<communicator>> tcp_comms(p), ofi_comms(p);
  {
    std::vector<std::thread> starting;
    for (int r = 0; r < p; ++r)
      starting.emplace_back([&, r] {
        ofi::config c;
        c.rank = r;
        c.size = p;
        c.host_store = false;
        c.store = {"127.0.0.1", tcp_store.port()};
        tcp_comms[static_cast<std::size_t>(r)].emplace(tcp::connect(*ios[static_cast<std::size_t>(r)], c));
        c.store = {"127.0.0.1", ofi_store.port()};
        c.provider = "tcp;ofi_rxm";
        ofi_comms[static_cast<std::size_t>(r)].emplace(ofi::connect(*ios[static_cast<std::size_t>(r)], c));
      });
    for (auto& t : starting) t.join();
  }
  std::vector<std::vector<std::byte>> a(p, std::vector<std::byte>(1 << 20)), b(p, std::vector<std::byte>(1 << 20));
  const auto want_a = bytes(1 << 20, 21), want_b = bytes(1 << 20, 22);
  a[0] = want_a;
  b[2] = want_b;
  std::vector<std::vector<result<void>>> res(p);
  std::vector<std::thread> ranks;
  for (int r = 0; r < p; ++r)
    ranks.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      auto both = [&]() -> task<std::vector<result<void>>> {
        std::vector<task<result<void>>> ts;
        ts.push_back(broadcast(*tcp_comms[i], std::span(a[i]), 0, {.blocks = 8}));
        ts.push_back(broadcast(*ofi_comms[i], std::span(b[i]), 2, {.blocks = 8}));
        co_return co_await when_all_tasks(std::move(ts));
      };
      // Either communicator's run drives the shared loop, which serves both.
      res[i] = run(*tcp_comms[i], both());
    });
  for (auto& t : ranks) t.join();
  for (std::size_t r = 0; r < p; ++r) {
    INFO("rank " << r);
    REQUIRE(res[r].size() == 2);
    CHECK(res[r][0]);
    CHECK(res[r][1]);
    CHECK(a[r] == want_a);
    CHECK(b[r] == want_b);
  }
  tcp_comms.clear();
  ofi_comms.clear();
}
