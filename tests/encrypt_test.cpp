// OPTCAST_ENCRYPT: a frame altered on the way fails its receive (and is taken as sent
// without it); encryption is all or nothing and needs a secret.
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

// Relays one connection to `to`, flipping the byte at `flip` of what the opener sends
// (none: no_flip), and keeps what went each way.
constexpr std::size_t no_flip = ~std::size_t{0};
class flipping_proxy {
public:
  flipping_proxy(asio::ip::tcp::endpoint to, std::size_t flip)
      : acceptor_(io_, {asio::ip::make_address("127.0.0.1"), 0}), to_(to), flip_(flip) {
    thread_ = std::thread([this] { relay(); });
  }
  ~flipping_proxy() { finish(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port()); }
  std::uint16_t port() const { return acceptor_.local_endpoint().port(); }
  // Once a side has closed (or 5 s without traffic): what the opener sent, and what it got.
  std::pair<std::string, std::string> finish() {
    if (thread_.joinable()) thread_.join();
    return {up_, down_};
  }

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
        up_.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
        if (::send(b.native_handle(), buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) return;
      }
      if (fds[1].revents) {
        const auto n = ::recv(b.native_handle(), buf, sizeof buf, 0);
        if (n <= 0) return;
        down_.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
        if (::send(a.native_handle(), buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) != n) return;
      }
    }
  }
  asio::io_context io_;
  asio::ip::tcp::acceptor acceptor_;
  asio::ip::tcp::endpoint to_;
  std::size_t flip_;
  std::string up_, down_;
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
  store::server server("127.0.0.1", 0, 3, 0x5eedull, secret, encrypt);
  asio::io_context io0, io1, io2;
  // The job has 3 ranks: the third is this test, to redirect rank 0. It joins as a rank
  // does, with an entry of its own (never connected to).
  store::client me(io2.get_executor(), {"127.0.0.1", server.port()}, 2, 3, 5s, secret, 0, encrypt);
  REQUIRE(me.set_wait("optcast/addr/2", "127.0.0.1:9", 5s));
  std::shared_ptr<fabric> f1;
  std::thread t([&] { f1 = tcp::connect(rank_of(1, 3, server.port(), secret, encrypt)); });
  auto f0 = tcp::connect(rank_of(0, 3, server.port(), secret, encrypt));
  t.join();
  flipping_proxy proxy(endpoint_of(tcp::listen_address(*f1)), 56 + 32 + 56 + 500);
  REQUIRE(me.set_wait("optcast/addr/1", proxy.address(), 5s));
  // The communicators hold the only references: the ranks close their connections when
  // they go, before the proxy, which relays until a side closes (else 5 s idle).
  communicator c0(std::move(f0)), c1(std::move(f1));
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
  SECTION("one rank encrypts, the store not, or the other way round: refused at the store with the reason") {
    log_capture log;
    const std::string secret = "the secret of a job of two ranks";
    for (bool store_encrypts : {false, true}) {
      store::server server("127.0.0.1", 0, 2, 0x5eedull, secret, store_encrypts);
      const auto why = setup_failure([&] { tcp::connect(rank_of(1, 2, server.port(), secret, !store_encrypts)); });
      CHECK_THAT(why, Catch::Contains(store_encrypts ? "this store encrypts its traffic (OPTCAST_ENCRYPT=1) and rank 1 does not"
                                                     : "rank 1 encrypts its store traffic (OPTCAST_ENCRYPT=1) and this store does not"));
    }
  }
  SECTION("one rank encrypts, the other not, meeting in a store of the program's: refused on the data connection") {
    log_capture log;
    const std::string secret = "the secret of a job of two ranks";
    auto kv = std::make_shared<memory_kv_store>();
    auto in_kv = [&](int r, bool encrypt) {
      auto c = rank_of(r, 2, 1, secret, encrypt);  // port 1: nobody there, the kv store is used
      c.kv = kv;
      return c;
    };
    std::shared_ptr<fabric> f1;
    std::thread t([&] { f1 = tcp::connect(in_kv(1, true)); });
    communicator c0(tcp::connect(in_kv(0, false)));
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

TEST_CASE("with OPTCAST_ENCRYPT the store's messages show nothing of their keys and values, and an altered one is refused",
          "[store][auth]") {
  log_capture log;
  const std::string secret = "the secret of a job of two ranks";
  const std::string key = "optcast/addr/0", value = "10.1.2.3:4567 a host nobody should learn";
  for (bool encrypt : {true, false}) {
    INFO((encrypt ? "encrypted" : "not encrypted"));
    store::server server("127.0.0.1", 0, 1, 0x5eedull, secret, encrypt);
    flipping_proxy proxy({asio::ip::make_address("127.0.0.1"), server.port()}, no_flip);
    {
      asio::io_context io;
      store::client c(io.get_executor(), {"127.0.0.1", proxy.port()}, 0, 1, 5s, secret, 0, encrypt);
      REQUIRE(c.set_wait(key, value, 5s));
      auto got = c.get_wait(key, 5s);
      REQUIRE(got);
      CHECK(*got == value);
      CHECK(c.bye(5s));
    }
    const auto [up, down] = proxy.finish();
    CHECK((up.find(key) == std::string::npos) == encrypt);
    CHECK((up.find(value) == std::string::npos) == encrypt);
    CHECK((down.find(value) == std::string::npos) == encrypt);
  }
  // One byte of the key of the client's first message after its handshake flipped on the
  // way (its hello, then its proof, then that message's header).
  for (bool encrypt : {true, false}) {
    INFO((encrypt ? "encrypted" : "not encrypted"));
    store::server server("127.0.0.1", 0, 1, 0x5eedull, secret, encrypt);
    const std::size_t hello = 21 + store::proto::hello_key(0, encrypt).size() + 32, proof = 21 + 32;
    flipping_proxy proxy({asio::ip::make_address("127.0.0.1"), server.port()}, hello + proof + 21 + 3);
    asio::io_context io;
    store::client c(io.get_executor(), {"127.0.0.1", proxy.port()}, 0, 1, 5s, secret, 0, encrypt);
    const auto set = c.set_wait(key, value, 5s);
    if (encrypt) {
      CHECK_FALSE(set);
    } else {
      REQUIRE(set);  // taken as sent, under another key
      std::string altered = key;
      altered[3] ^= 0x20;
      auto got = c.get_wait(altered, 5s);
      REQUIRE(got);
      CHECK(*got == value);
    }
  }
  CHECK(log.seen("rank 0's message fails authentication"));
}
