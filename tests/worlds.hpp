// Test worlds: P ranks on one fabric kind, with one call to run a coroutine on every
// rank at once. "local" puts them on one event loop; "tcp" gives each rank its own
// event loop and thread and real sockets on loopback, with a store the world hosts.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>

#include "optcast/collectives.hpp"
#include "optcast/net/local.hpp"
#include "optcast/net/store.hpp"
#include "optcast/net/tcp.hpp"

namespace optcast::testing {

using rank_fn = std::function<task<result<void>>(communicator&)>;

class test_world {
public:
  virtual ~test_world() = default;
  virtual std::vector<communicator>& comms() = 0;
  virtual std::vector<result<void>> run_all(const rank_fn& fn) = 0;
  int size() { return static_cast<int>(comms().size()); }
};

class local_test_world final : public test_world {
public:
  explicit local_test_world(int p, communicator_options o = {}) : w_(p), comms_(w_.communicators(o)) {}
  std::vector<communicator>& comms() override { return comms_; }
  std::vector<result<void>> run_all(const rank_fn& fn) override { return w_.run_all(comms_, fn); }
  local::world& world() { return w_; }

private:
  local::world w_;
  std::vector<communicator> comms_;
};

class tcp_test_world final : public test_world {
public:
  explicit tcp_test_world(int p, communicator_options o = {}, int ports = 1)
      : server_("127.0.0.1", 0, p, 0x0b7c457ull), ios_(static_cast<std::size_t>(p)) {
    for (int r = 0; r < p; ++r) {
      tcp::config c;
      c.rank = r;
      c.size = p;
      c.store = {"127.0.0.1", server_.port()};
      c.host_store = false;
      c.ports = ports;
      c.bootstrap_timeout = std::chrono::seconds(20);
      ios_[static_cast<std::size_t>(r)] = std::make_unique<asio::io_context>(1);
      comms_.emplace_back(tcp::connect(*ios_[static_cast<std::size_t>(r)], c), o);
    }
  }
  ~tcp_test_world() override { comms_.clear(); }

  std::vector<communicator>& comms() override { return comms_; }
  std::vector<result<void>> run_all(const rank_fn& fn) override {
    std::vector<result<void>> out(comms_.size());
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < comms_.size(); ++r)
      threads.emplace_back([&, r] { out[r] = run(comms_[r], fn(comms_[r])); });
    for (auto& t : threads) t.join();
    return out;
  }
  asio::io_context& io(int r) { return *ios_[static_cast<std::size_t>(r)]; }

private:
  store::server server_;
  std::vector<std::unique_ptr<asio::io_context>> ios_;
  std::vector<communicator> comms_;
};

inline std::unique_ptr<test_world> make_world(const std::string& kind, int p, communicator_options o = {}) {
  if (kind == "tcp") return std::make_unique<tcp_test_world>(p, o);
  return std::make_unique<local_test_world>(p, o);
}

}  // namespace optcast::testing
