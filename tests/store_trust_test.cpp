// Trust nothing from the wire, at the store: strangers dropped, only those who know the
// job secret admitted and answered, a store that cannot prove it refused; and what the
// store finds when a collective stalls (who does not answer, which calls differ).
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
#include "optcast/when_all.hpp"
#include "wire_peer.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace optcast::testing;
using namespace std::chrono_literals;

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

// Reads one store message (the header's length, then the rest); empty on close.
std::vector<std::byte> read_store_message(asio::ip::tcp::socket& s) {
  auto len = read_some(s, 4);
  if (len.size() < 4) return {};
  auto rest = read_some(s, u32_at(len, 0));
  len.insert(len.end(), rest.begin(), rest.end());
  return len;
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
  late.on_events(nullptr, nullptr, [&](std::uint64_t c, int, std::string why) {
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

TEST_CASE("a rank cannot fill the store: past its share the job fails, naming it", "[store]") {
  const std::string secret = "the secret of a job of two ranks";
  store::server server("127.0.0.1", 0, 2, 0x5707ull, secret);
  asio::io_context io;
  const store::address where{"127.0.0.1", server.port()};
  // Generous deadlines: a sanitized build pushes 200 MiB through the store here (the
  // waits below end as soon as the store has failed).
  store::client a(io.get_executor(), where, 0, 2, 60s, secret), b(io.get_executor(), where, 1, 2, 60s, secret);
  const std::string mib(std::size_t{1} << 19, 'x');  // half a MiB a value
  SECTION("one value set again and again costs its size once") {
    for (int i = 0; i < 400; ++i) REQUIRE(a.set_wait("again", mib, 5s));
    CHECK_FALSE(server.failed());
    CHECK(b.get_wait("again", 5s).value_or("") == mib);
  }
  SECTION("new keys add up") {
    int stored = 0;
    for (int i = 0; i < 400 && a.set_wait("key" + std::to_string(i), mib, 5s); ++i) ++stored;
    INFO("values of half a MiB stored: " << stored);
    CHECK(stored < 400);
    CHECK(stored >= 64);  // a rank's share holds well over what a job needs
    const auto until = std::chrono::steady_clock::now() + 5s;
    while (!server.failed() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
    CHECK(server.failed());
    CHECK_THAT(a.job_failure(), Catch::Contains("rank 0 would hold") && Catch::Contains("more than a rank may"));
    // The other rank is told why.
    while (b.job_failure().empty() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
    CHECK_THAT(b.job_failure(), Catch::Contains("rank 0 would hold"));
  }
  SECTION("gets for keys nobody sets add up too") {
    const std::string long_key(std::size_t{1} << 19, 'k');
    for (int i = 0; i < 400 && !server.failed(); ++i) a.get(long_key + std::to_string(i), [](result<std::string>) {});
    const auto until = std::chrono::steady_clock::now() + 60s;
    while (a.job_failure().empty() && std::chrono::steady_clock::now() < until) {
      io.restart();
      io.run_for(10ms);
    }
    while (!server.failed() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
    CHECK(server.failed());
    CHECK_THAT(a.job_failure(), Catch::Contains("rank 0 would hold"));
  }
}

// Survivors that shrank without some ranks say so (excuse): from then on those ranks'
// death, reports and goodbye do not count, and the others' goodbyes end the job well.
TEST_CASE("ranks the survivors excused no longer fail the job", "[store]") {
  namespace p = store::proto;
  std::vector<std::vector<p::message>> got(4);
  p::table t(4, [&](int r, const p::message& m) { got[static_cast<std::size_t>(r)].push_back(m); });
  for (int r = 0; r < 4; ++r) t.join(r);
  const auto last = [&](int r) { return got[static_cast<std::size_t>(r)].empty() ? p::message{} : got[static_cast<std::size_t>(r)].back(); };
  t.leave(2);  // rank 2 died
  REQUIRE(t.failed());
  CHECK(last(0).type == p::m_peer_lost);
  SECTION("its death is forgotten, the survivors' goodbyes succeed") {
    REQUIRE(t.on_message(1, {p::m_excuse, 0, 0, {}, "2"}));
    CHECK_FALSE(t.failed());
    CHECK(t.excused(2));
    for (int r : {0, 1}) REQUIRE(t.on_message(r, {p::m_bye, 0, 0, {}, {}}));
    CHECK(last(0).type != p::m_farewell);  // rank 3 still runs
    REQUIRE(t.on_message(3, {p::m_bye, 0, 0, {}, {}}));
    for (int r : {0, 1, 3}) CHECK(last(r).type == p::m_farewell);
  }
  SECTION("a later failure of another rank still fails the job; an excused one's does not") {
    REQUIRE(t.on_message(0, {p::m_excuse, 0, 0, {}, "2"}));
    REQUIRE(t.on_message(2, {p::m_failed, 0, 5, {}, "from beyond"}));
    CHECK_FALSE(t.failed());
    t.leave(3);
    REQUIRE(t.failed());
    CHECK(t.failure()->arg == 3);
  }
  SECTION("a list that is not ranks of the job is out of protocol, and so is excusing oneself") {
    CHECK_FALSE(t.on_message(1, {p::m_excuse, 0, 0, {}, "2,x"}));
    CHECK_FALSE(t.on_message(1, {p::m_excuse, 0, 0, {}, "4"}));
    CHECK_FALSE(t.on_message(1, {p::m_excuse, 0, 0, {}, "1"}));
    CHECK_FALSE(t.on_message(1, {p::m_excuse, 0, 0, {}, "2,,3"}));
    CHECK(t.failed());
  }
}

// A replacement for an excused rank (grow): only it may take the slot, and only that
// slot; its readiness reaches the members; until admitted its death fails nothing (the
// members hear of it); once admitted its goodbye is needed, its death fails the job.
TEST_CASE("a replacement takes only a failed rank's slot, and counts once admitted", "[store]") {
  namespace p = store::proto;
  std::vector<std::vector<p::message>> got(4);
  p::table t(4, [&](int r, const p::message& m) { got[static_cast<std::size_t>(r)].push_back(m); });
  for (int r = 0; r < 4; ++r) t.join(r);
  const auto last = [&](int r) { return got[static_cast<std::size_t>(r)].empty() ? p::message{} : got[static_cast<std::size_t>(r)].back(); };
  CHECK(t.judge_rejoin(1, true).has_value());  // alive and never failed: no replacement for it
  CHECK_FALSE(t.judge_rejoin(1, false).has_value());
  t.leave(2);
  REQUIRE(t.on_message(1, {p::m_excuse, 0, 0, {}, "2"}));
  CHECK(t.judge_rejoin(2, false).has_value());  // a plain process in the failed rank's slot
  REQUIRE_FALSE(t.judge_rejoin(2, true).has_value());
  REQUIRE_FALSE(t.taken(2));
  t.join(2);
  CHECK(t.replacing(2));
  CHECK_FALSE(t.on_message(2, {p::m_admit, 0, 0, {}, {}}));  // not ready yet: out of protocol
  SECTION("ready, then dead before its admission: nothing fails, the members hear") {
    REQUIRE(t.on_message(2, {p::m_rejoin, 0, 0, {}, {}}));
    for (int r : {0, 1, 3}) CHECK((last(r).type == p::m_rejoined && last(r).arg == 2));
    CHECK_FALSE(t.on_message(2, {p::m_rejoin, 0, 0, {}, {}}));  // once
    t.leave(2);
    CHECK_FALSE(t.failed());
    for (int r : {0, 1, 3}) CHECK((last(r).type == p::m_peer_lost && last(r).arg == 2));
    for (int r : {0, 1, 3}) REQUIRE(t.on_message(r, {p::m_bye, 0, 0, {}, {}}));
    CHECK(last(0).type == p::m_farewell);
  }
  SECTION("admitted: the job waits for its goodbye, and its death fails the job") {
    REQUIRE(t.on_message(2, {p::m_rejoin, 0, 0, {}, {}}));
    REQUIRE(t.on_message(2, {p::m_admit, 0, 0, {}, {}}));
    CHECK_FALSE(t.excused(2));
    CHECK_FALSE(t.replacing(2));
    for (int r : {0, 1, 3}) REQUIRE(t.on_message(r, {p::m_bye, 0, 0, {}, {}}));
    CHECK(last(0).type != p::m_farewell);
    SECTION("its goodbye ends the job well") {
      REQUIRE(t.on_message(2, {p::m_bye, 0, 0, {}, {}}));
      for (int r : {0, 1, 2, 3}) CHECK(last(r).type == p::m_farewell);
    }
    SECTION("its death fails it") {
      t.leave(2);
      REQUIRE(t.failed());
      CHECK(t.failure()->arg == 2);
    }
  }
}

// The survivors may go on without a rank that never joined the store (found by fuzzing:
// such a rank then joined as a plain process, yet the store took it for an unadmitted
// replacement whose death failed nothing). Its slot is a failed rank's like any other.
TEST_CASE("a rank excused before it ever joined comes back only as a replacement", "[store]") {
  namespace p = store::proto;
  p::table t(3, [](int, const p::message&) {});
  t.join(0);
  t.join(1);
  REQUIRE(t.on_message(0, {p::m_excuse, 0, 0, {}, "2"}));
  const auto plain = t.judge_rejoin(2, false);
  REQUIRE(plain.has_value());
  CHECK(plain->find("comes as a replacement (OPTCAST_REJOIN=1)") != std::string::npos);
  REQUIRE_FALSE(t.judge_rejoin(2, true).has_value());
  SECTION("its not joining fails nothing: the survivors went on without it") {
    t.missing_after(std::chrono::milliseconds(100));
    CHECK_FALSE(t.failed());
  }
  SECTION("a rank neither joined nor excused still fails the job") {
    p::table u(3, [](int, const p::message&) {});
    u.join(0);
    u.join(1);
    u.missing_after(std::chrono::milliseconds(100));
    REQUIRE(u.failed());
    CHECK(u.failure()->val.find("rank 2 did not join") != std::string::npos);
  }
  t.join(2);
  CHECK(t.replacing(2));
}
