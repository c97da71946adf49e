// The TCP fabric's reader (net/tcp/frames.cpp) against a peer on the wire that cuts its
// stream anywhere: frames of every size around the reader's 16 KiB buffer, written all
// at once (many frames to one read) and a few bytes at a time (a header or a payload
// across many reads), must all arrive whole, in order, into the receives they match.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include <asio/ip/tcp.hpp>
#include <asio/write.hpp>

#include "optcast/when_all.hpp"
#include "wire_peer.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace optcast::testing;
using namespace std::chrono_literals;

namespace {

const std::vector<std::size_t> sizes = {0,     1,     7,     8,     55,    100,   1000,  4096,  16383,
                                        16384, 16385, 16400, 20000, 32768, 65536, 100000, 200000, 3};

std::vector<std::byte> payload(std::size_t i, std::size_t n) {
  std::vector<std::byte> b(n);
  for (std::size_t k = 0; k < n; ++k) b[k] = static_cast<std::byte>((k * 131 + i * 17 + 5) & 0xff);
  return b;
}

// The handshake of rank 2 of 3, then every frame; written `piece` bytes at a time
// (0: all at once), pausing now and then so that the reader sees the stream cut there.
void peer_writes(const std::string& where, std::size_t piece) {
  auto bytes = handshake(2, 3);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const auto h = data_header(9, static_cast<std::uint32_t>(i), sizes[i]);
    const auto p = payload(i, sizes[i]);
    bytes.insert(bytes.end(), h.begin(), h.end());
    bytes.insert(bytes.end(), p.begin(), p.end());
  }
  asio::io_context io;
  asio::ip::tcp::socket s(io);
  std::error_code ec;
  s.connect(endpoint_of(where), ec);
  if (ec) return;
  s.set_option(asio::ip::tcp::no_delay(true), ec);
  if (piece == 0) piece = bytes.size();
  std::size_t writes = 0;
  for (std::size_t at = 0; at < bytes.size() && !ec; at += piece) {
    asio::write(s, asio::buffer(bytes.data() + at, std::min(piece, bytes.size() - at)), ec);
    if (++writes % 256 == 0) std::this_thread::sleep_for(200us);
  }
  std::this_thread::sleep_for(300ms);  // the reader finishes before the stream ends
}

}  // namespace

TEST_CASE("frames of every size arrive whole and in order however the stream is cut", "[tcp][fabric]") {
  for (std::size_t piece : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{55}, std::size_t{5000}}) {
    for (bool all_posted : {false, true}) {
      INFO("written " << piece << " bytes at a time (0: all at once); receives " << (all_posted ? "all posted first" : "one by one"));
      auto old = set_log_sink([](log_level, std::string_view) {});
      testing::tcp_test_world w(3, {}, {.secret = {}});  // without a secret, anyone with the job id is admitted
      auto& c = w.comms()[1];
      std::vector<std::vector<std::byte>> got;
      for (std::size_t n : sizes) got.emplace_back(n + 1, std::byte{0xee});  // one byte more: a receive may be larger
      std::thread t(peer_writes, tcp::listen_address(c.get_fabric()), piece);
      auto receive = [&]() -> task<result<void>> {
        auto& f = c.get_fabric();
        std::vector<operation> all;
        for (std::size_t i = 0; i < sizes.size(); ++i) {
          auto one = f.recv(2, {9, static_cast<std::uint32_t>(i)}, std::span(got[i]).first(sizes[i]));
          if (all_posted) {
            all.push_back(one);
          } else if (auto r = co_await one; !r) {
            co_return fail(r.error());
          }
        }
        if (all_posted) co_return co_await when_all(std::span(all));
        co_return result<void>{};
      };
      auto r = run(c, receive());
      t.join();
      set_log_sink(std::move(old));
      INFO((r ? std::string() : r.error().message() + ": " + c.failure_detail()));
      REQUIRE(r);
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        INFO("frame " << i << " of " << sizes[i] << " B");
        auto want = payload(i, sizes[i]);
        want.push_back(std::byte{0xee});
        CHECK(got[i] == want);
      }
    }
  }
}
