// The rings as an Asio stream (net/shm/stream.hpp), between two processes each running its
// own loop: asio::async_write and async_read carry every byte through memory, the loops
// sleeping on their doorbells; a peer that dies ends the stream at once, after what it
// wrote; and a stream closed or destroyed with operations waiting aborts them.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <functional>
#include <future>
#include <optional>
#include <random>
#include <vector>

#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <asio/write.hpp>

#include "shm/stream.hpp"
#include "shm_peers.hpp"

using namespace optcast::shm;
using namespace optcast::shm::testing;
using namespace std::chrono_literals;

namespace {

// This process's end: its loop, hub and stream (introduced on `sock`, which it keeps).
struct end {
  asio::io_context io;
  std::shared_ptr<hub> h = std::make_shared<hub>(io.get_executor());
  std::optional<stream> s;
  bool open(int sock, int rank, std::size_t capacity = 1 << 16) {
    auto ch = introduce(sock, as(rank, 1 - rank, capacity), h->bell());
    if (!ch) return false;
    s.emplace(h, std::move(*ch), sock);
    return true;
  }
};


// Two ends of a channel in this process, on one loop, each with its own hub.
struct pair_here {
  listener ear;
  asio::io_context io;
  std::shared_ptr<hub> ha = std::make_shared<hub>(io.get_executor()), hb = std::make_shared<hub>(io.get_executor());
  std::optional<stream> a, b;
  pair_here() {
    const int sa = ear.connect(), sb = ear.accept();
    REQUIRE(sa >= 0);
    REQUIRE(sb >= 0);
    auto fb = std::async(std::launch::async, [&] { return introduce(sb, as(1, 0), hb->bell()); });
    auto ca = introduce(sa, as(0, 1), ha->bell());
    auto cb = fb.get();
    REQUIRE(ca);
    REQUIRE(cb);
    a.emplace(ha, std::move(*ca), sa);
    b.emplace(hb, std::move(*cb), sb);
  }
};


}  // namespace

TEST_CASE("asio::async_write and async_read carry every byte through the rings, both loops sleeping between", "[shm]") {
  listener ear;
  const std::size_t total = 16u << 20;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // reads everything, checks it, writes it back
    end e;
    if (!e.open(ear.connect(), 1)) std::_Exit(10);
    std::vector<std::byte> buf(total);
    int status = 0;
    asio::async_read(*e.s, asio::buffer(buf), [&](std::error_code ec, std::size_t n) {
      if (ec || n != total) return void(status = 11);
      for (std::size_t i = 0; i < total; ++i)
        if (buf[i] != pattern_at(i)) return void(status = 12);
      asio::async_write(*e.s, asio::buffer(buf), [&](std::error_code ec2, std::size_t n2) {
        if (ec2 || n2 != total) status = 13;
        e.io.stop();
      });
    });
    e.io.run_for(60s);  // a stream keeps watching for its peer's end: the loop never runs dry
    std::_Exit(status);
  }
  end e;
  REQUIRE(e.open(ear.accept(), 0));
  CHECK(e.s->peer().pid == child);
  std::vector<std::byte> out(total), back(total);
  for (std::size_t i = 0; i < total; ++i) out[i] = pattern_at(i);
  // Written in pieces of random sizes, each an async_write of its own, as frames are.
  std::mt19937 rng(3);
  std::size_t sent = 0;
  std::error_code write_error, read_error;
  std::size_t got = 0;
  std::function<void()> next = [&] {
    if (sent == total) return;
    const std::size_t n = std::min<std::size_t>(total - sent, 1 + rng() % 300000);
    asio::async_write(*e.s, asio::buffer(out.data() + sent, n), [&, n](std::error_code ec, std::size_t) {
      if (ec) return void(write_error = ec);
      sent += n;
      next();
    });
  };
  next();
  asio::async_read(*e.s, asio::buffer(back), [&](std::error_code ec, std::size_t n) {
    read_error = ec;
    got = n;
    e.io.stop();
  });
  e.io.run_for(60s);  // a lost wake-up would leave both loops asleep until then
  CHECK_FALSE(write_error);
  CHECK_FALSE(read_error);
  CHECK(got == total);
  CHECK(back == out);
  int status = -1;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 11-13: the child's read, check or write failed
}

TEST_CASE("a peer that dies ends the stream at once, after what it wrote", "[shm]") {
  listener ear;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // writes 100 bytes and exits without a word
    end e;
    if (!e.open(ear.connect(), 1)) std::_Exit(10);
    std::vector<std::byte> hundred(100, std::byte{5});
    std::error_code ec;
    if (e.s->write_some(asio::buffer(hundred), ec) != 100) std::_Exit(11);
    std::_Exit(0);
  }
  end e;
  REQUIRE(e.open(ear.accept(), 0));
  std::vector<std::byte> buf(100);
  std::error_code first, second, write_after;
  std::size_t n = 0;
  asio::async_read(*e.s, asio::buffer(buf), [&](std::error_code ec, std::size_t k) {
    first = ec;
    n = k;
    e.s->async_read_some(asio::buffer(buf), [&](std::error_code ec2, std::size_t) {
      second = ec2;
      e.s->async_write_some(asio::buffer(buf), [&](std::error_code ec3, std::size_t) {
        write_after = ec3;
        e.io.stop();
      });
    });
  });
  const auto t0 = std::chrono::steady_clock::now();
  e.io.run_for(10s);
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);  // told by the socket's end, not a timeout
  CHECK_FALSE(first);
  CHECK(n == 100);
  CHECK(buf == std::vector<std::byte>(100, std::byte{5}));
  CHECK(second == asio::error::eof);
  CHECK(write_after == asio::error::broken_pipe);
  int status = -1;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a full ring keeps a write waiting until the peer reads, and async_wait sees bytes come", "[shm]") {
  listener ear;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // waits for the parent's word (a byte through the ring), then drains 64 KiB and writes one byte
    end e;
    if (!e.open(ear.connect(), 1, 4096)) std::_Exit(10);
    std::vector<std::byte> buf(1 << 16);
    int status = 1;
    asio::async_read(*e.s, asio::buffer(buf), [&](std::error_code ec, std::size_t) {
      if (ec) return;
      const std::byte one{1};
      std::error_code wec;
      status = e.s->write_some(asio::buffer(&one, 1), wec) == 1 ? 0 : 12;
      e.io.stop();
    });
    e.io.run_for(20s);
    std::_Exit(status);
  }
  end e;
  REQUIRE(e.open(ear.accept(), 0, 4096));
  // Nothing to read yet: read_some says so at once.
  std::byte b{};
  std::error_code ec;
  CHECK(e.s->read_some(asio::buffer(&b, 1), ec) == 0);
  CHECK(ec == asio::error::would_block);
  std::vector<std::byte> data(1 << 16, std::byte{3});
  std::error_code wrote, waited;
  bool write_done = false, wait_done = false;
  asio::async_write(*e.s, asio::buffer(data), [&](std::error_code e2, std::size_t) {
    wrote = e2;
    write_done = true;
  });
  e.s->async_wait(stream::wait_type::wait_read, [&](std::error_code e2) {
    waited = e2;
    wait_done = true;
    e.io.stop();  // the write completed before: the peer reads all of it before it answers
  });
  e.io.run_for(15s);
  CHECK(write_done);  // 64 KiB through a 4 KiB ring: the write slept for room many times
  CHECK_FALSE(wrote);
  CHECK(wait_done);
  CHECK_FALSE(waited);
  CHECK(e.s->read_some(asio::buffer(&b, 1), ec) == 1);
  CHECK(b == std::byte{1});
  int status = -1;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a stream closed or destroyed with operations waiting aborts them, and its peer sees the end", "[shm]") {
  listener ear;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // reads until the end: exit 0 if it came as eof
    end e;
    if (!e.open(ear.connect(), 1)) std::_Exit(10);
    std::byte b{};
    int status = 11;
    e.s->async_read_some(asio::buffer(&b, 1), [&](std::error_code ec, std::size_t) {
      status = ec == asio::error::eof ? 0 : 12;
      e.io.stop();
    });
    e.io.run_for(20s);
    std::_Exit(status);
  }
  std::error_code aborted;
  bool called = false;
  {
    end e;
    REQUIRE(e.open(ear.accept(), 0));
    std::byte b{};
    e.s->async_read_some(asio::buffer(&b, 1), [&](std::error_code ec, std::size_t) {
      aborted = ec;
      called = true;
    });
    e.io.poll();
    CHECK_FALSE(called);  // nothing came: it waits
    SECTION("closed") {
      e.s->close();
      e.io.poll();
      CHECK(called);
    }
    SECTION("destroyed") {
      e.s.reset();
      e.io.poll();
      CHECK(called);
    }
  }
  CHECK(aborted == asio::error::operation_aborted);
  int status = -1;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WEXITSTATUS(status) == 0);  // the child's read ended with eof
}

TEST_CASE("one doorbell serves every stream of a loop: two peers writing at once are both read", "[shm]") {
  listener ear;
  const std::size_t total = 4u << 20;
  std::vector<pid_t> children;
  for (int c = 0; c < 2; ++c) {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {  // writes the pattern, shifted by its number, then waits for the end
      end e;
      if (!e.open(ear.connect(), 1, 4096)) std::_Exit(10);
      std::vector<std::byte> data(total);
      for (std::size_t i = 0; i < total; ++i) data[i] = pattern_at(i + static_cast<std::size_t>(c));
      int status = 11;
      asio::async_write(*e.s, asio::buffer(data), [&](std::error_code ec, std::size_t) {
        if (ec) return e.io.stop();
        e.s->async_read_some(asio::buffer(data.data(), 1), [&](std::error_code ec2, std::size_t) {
          status = ec2 == asio::error::eof ? 0 : 12;
          e.io.stop();
        });
      });
      e.io.run_for(60s);
      std::_Exit(status);
    }
    children.push_back(child);
  }
  asio::io_context io;
  auto h = std::make_shared<hub>(io.get_executor());
  std::vector<std::unique_ptr<stream>> streams;
  std::vector<std::vector<std::byte>> bufs(2, std::vector<std::byte>(total));
  for (int c = 0; c < 2; ++c) {
    const int sock = ear.accept();
    REQUIRE(sock >= 0);
    auto ch = introduce(sock, as(0, 1, 4096), h->bell());
    REQUIRE(ch);
    streams.push_back(std::make_unique<stream>(h, std::move(*ch), sock));
  }
  int done = 0;
  std::vector<std::error_code> errors(2);
  for (std::size_t c = 0; c < 2; ++c)
    asio::async_read(*streams[c], asio::buffer(bufs[c]), [&, c](std::error_code ec, std::size_t) {
      errors[c] = ec;
      if (++done == 2) io.stop();
    });
  io.run_for(60s);
  CHECK(done == 2);
  for (std::size_t c = 0; c < 2; ++c) {
    CHECK_FALSE(errors[c]);
    // Which child came first is the kernel's choice: each buffer is one child's whole pattern.
    const std::size_t shift = bufs[c][0] == pattern_at(0) && bufs[c][1] == pattern_at(1) ? 0 : 1;
    bool whole = true;
    for (std::size_t i = 0; i < total && whole; ++i) whole = bufs[c][i] == pattern_at(i + shift);
    CHECK(whole);
  }
  streams.clear();  // the children see their ends
  for (const pid_t child : children) {
    int status = -1;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WEXITSTATUS(status) == 0);
  }
}

TEST_CASE("a polling hub moves bytes with no doorbell rung and runs their handlers in place; a sleeping one is rung", "[shm]") {
  pair_here both;
  auto& io = both.io;
  auto& ha = both.ha;
  auto &a = *both.a, &b = *both.b;
  std::array<std::byte, 8> out{}, in{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = pattern_at(i);
  std::error_code ec;

  ha->polling(true);
  std::size_t got = 0;
  a.async_read_some(asio::buffer(in), [&](std::error_code e, std::size_t n) { got = e ? 0 : n; });
  CHECK_FALSE(ha->poll_here());  // nothing there yet
  CHECK(b.write_some(asio::buffer(out), ec) == out.size());
  CHECK_FALSE(ha->bell().drain());  // a polls: b had no reason to ring
  CHECK(ha->poll_here());           // the handler ran here, with no loop run
  CHECK(got == out.size());
  CHECK(in == out);

  // Sleeping, a asks b to ring: only the doorbell gets the loop to read.
  ha->polling(false);
  got = 0;
  in = {};
  a.async_read_some(asio::buffer(in), [&](std::error_code e, std::size_t n) {
    got = e ? 0 : n;
    io.stop();
  });
  CHECK(b.write_some(asio::buffer(out), ec) == out.size());
  io.run_for(std::chrono::seconds(10));
  CHECK(got == out.size());
  CHECK(in == out);
}

TEST_CASE("a kept reader is called when bytes come, after the completions before them, sleeping or polling, and never after it is dropped", "[shm]") {
  pair_here both;
  auto& io = both.io;
  auto& ha = both.ha;
  auto &a = *both.a, &b = *both.b;
  struct reader {
    stream* s;
    std::vector<std::byte> got;
    std::vector<std::string> events;
    asio::io_context* io;
    std::size_t stop_at = 0;
  } r{&a, {}, {}, &io};
  auto on_ready = [](void* ctx) {
    auto& me = *static_cast<reader*>(ctx);
    me.events.push_back("reader");
    std::array<std::byte, 64> buf{};
    std::error_code e;
    for (;;) {  // what there is, until would_block
      const std::size_t n = me.s->read_some(asio::buffer(buf), e);
      if (e) break;
      me.got.insert(me.got.end(), buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    }
    CHECK(e == asio::error::would_block);
    if (me.got.size() >= me.stop_at) me.io->stop();
  };
  std::error_code ec;
  const auto bytes_of = [](std::size_t from, std::size_t n) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = pattern_at(from + i);
    return v;
  };

  // Polling: bytes there are seen by the next poll, with no doorbell, one call for all.
  ha->polling(true);
  a.keep_reading(on_ready, &r);
  CHECK_FALSE(ha->poll_here());
  CHECK(r.events.empty());
  CHECK(b.write_some(asio::buffer(bytes_of(0, 100)), ec) == 100);
  CHECK(b.write_some(asio::buffer(bytes_of(100, 100)), ec) == 100);
  CHECK_FALSE(ha->bell().drain());
  CHECK(ha->poll_here());
  CHECK(r.events == std::vector<std::string>{"reader"});
  CHECK(r.got == bytes_of(0, 200));
  CHECK_FALSE(ha->poll_here());  // nothing new: not called again

  // A read started (a frame's body) takes the bytes first; the reader is not called
  // while it waits, and comes after its completion.
  std::array<std::byte, 10> body{};
  a.async_read_some(asio::buffer(body), [&](std::error_code e, std::size_t n) {
    r.events.push_back("read " + std::to_string(e ? 0 : n));
  });
  CHECK(b.write_some(asio::buffer(bytes_of(200, 30)), ec) == 30);
  CHECK(ha->poll_here());
  REQUIRE(r.events.size() >= 2);
  CHECK(r.events[1] == "read 10");
  CHECK(std::vector<std::byte>(body.begin(), body.end()) == bytes_of(200, 10));
  if (r.events.size() == 2) CHECK(ha->poll_here());  // the rest, next look
  CHECK(r.events.back() == "reader");
  CHECK(r.got == [&] {
    auto v = bytes_of(0, 200);
    auto rest = bytes_of(210, 20);
    v.insert(v.end(), rest.begin(), rest.end());
    return v;
  }());

  // Sleeping: the reader's ring says so, the writer rings, the loop wakes to read;
  // again after the reader ran (the writer's ring took the word back).
  ha->polling(false);
  for (std::size_t round = 0; round < 3; ++round) {
    const std::size_t before = r.got.size();
    r.stop_at = before + 50;
    CHECK(b.write_some(asio::buffer(bytes_of(1000 + round * 50, 50)), ec) == 50);
    io.restart();
    io.run_for(std::chrono::seconds(10));
    REQUIRE(r.got.size() == before + 50);
    CHECK(std::vector<std::byte>(r.got.end() - 50, r.got.end()) == bytes_of(1000 + round * 50, 50));
  }

  // Dropped: bytes that come are left for whoever reads next.
  a.keep_reading(nullptr, nullptr);
  const auto calls = r.events.size();
  ha->polling(true);
  CHECK(b.write_some(asio::buffer(bytes_of(5000, 20)), ec) == 20);
  ha->poll_here();
  io.restart();
  io.poll();
  CHECK(r.events.size() == calls);
  std::array<std::byte, 20> left{};
  CHECK(a.read_some(asio::buffer(left), ec) == 20);
  CHECK(std::vector<std::byte>(left.begin(), left.end()) == bytes_of(5000, 20));
}
