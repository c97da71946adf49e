// Test worlds: P ranks on one fabric kind, with one call to run a coroutine on every
// rank at once. "local" puts them on one event loop; "tcp" gives each rank its own
// event loop and thread and real sockets on loopback, with a store the world hosts.
#pragma once

#include <optional>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <stdexcept>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>
#include <asio/steady_timer.hpp>

#include "optcast/collectives.hpp"
#include "optcast/net/local.hpp"
#include "optcast/fabrics.hpp"
#include "optcast/net/ofi.hpp"
#include "optcast/net/sim.hpp"
#include "bootstrap/store.hpp"
#include "optcast/net/tcp.hpp"

namespace optcast::testing {

// n bytes of a pattern that differs with the seed and has no short period.
// A byte count's result as a plain success or its error, for tasks that return result<void>.
inline result<void> as_void(const result<std::size_t>& r) { return r ? result<void>{} : fail(r.error()); }

inline std::vector<std::byte> bytes(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::byte>(((i * 7 + static_cast<std::size_t>(seed) * 131) ^ (i >> 9)) & 0xff);
  return v;
}

using rank_fn = std::function<task<result<void>>(communicator&)>;

class test_world {
public:
  virtual ~test_world() = default;
  virtual std::vector<communicator>& comms() = 0;
  virtual std::vector<result<void>> run_all(const rank_fn& fn) = 0;
  int size() { return static_cast<int>(comms().size()); }
  // Lets every rank handle what reaches it (another rank's report of a failure) for up
  // to `most`, until `done(rank's communicator)` holds on every rank; whether it does.
  virtual bool settle(const std::function<bool(communicator&)>& done, std::chrono::milliseconds most) {
    (void)most;
    for (auto& c : comms())
      if (!done(c)) return false;
    return true;
  }
};

class local_test_world final : public test_world {
public:
  explicit local_test_world(int p, communicator_options o = {}, int ports = 1) : w_(p, ports), comms_(optcast::communicators_of(w_, o)) {}
  std::vector<communicator>& comms() override { return comms_; }
  std::vector<result<void>> run_all(const rank_fn& fn) override { return optcast::run_all(comms_, fn); }
  local::world& world() { return w_; }

private:
  local::world w_;
  std::vector<communicator> comms_;
};

// The simulator, under the rounds model unless told otherwise.
class sim_test_world final : public test_world {
public:
  explicit sim_test_world(int p, communicator_options o = {}, sim::model m = sim::model::rounds())
      : w_(p, m), comms_(optcast::communicators_of(w_, o)) {}
  std::vector<communicator>& comms() override { return comms_; }
  std::vector<result<void>> run_all(const rank_fn& fn) override { return optcast::run_all(comms_, fn); }
  sim::world& world() { return w_; }

private:
  sim::world w_;
  std::vector<communicator> comms_;
};

// What a process_test_world's ranks take from their job_config beyond rank and size.
struct job_options {
  int ports = 1;
  std::optional<std::size_t> unexpected_limit;
  std::optional<std::size_t> unexpected_peer_limit;
  // The store's and every rank's. Worlds authenticate as --np jobs do; tests of what an
  // unauthenticated job lets in clear it.
  std::string secret = "a test job's secret, 32 bytes..";
  // Each rank on an io_context of the test's (tcp::connect(io, cfg)), which the test runs:
  // io(r). Otherwise each fabric owns its loop (tcp::connect(cfg)) and run() drives it.
  bool caller_loops = false;
  // Rank r meets the others in kv(r) (job_config::kv) instead of the world's TCP store,
  // whose address the ranks are then not given: one object for all, or each its own.
  std::function<std::shared_ptr<kv_store>(int rank)> kv;
  // Rank r's settings, changed last (one rank's shared memory off, say).
  std::function<void(int rank, job_config&)> adjust;
};

// A directory of the test's own, removed with everything in it.
class temp_dir {
public:
  temp_dir() {
    std::string t = (std::filesystem::temp_directory_path() / "optcast-test-XXXXXX").string();
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    path_ = t;
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  const std::string& path() const noexcept { return path_; }

private:
  std::string path_;
};

// Rank `rank` of a job of `size` that meets in the program's store `s` (job_config::kv).
inline job_config in_store(const std::shared_ptr<kv_store>& s, int rank, int size) {
  job_config c;
  c.rank = rank;
  c.size = size;
  c.kv = s;
  c.bootstrap_timeout = std::chrono::seconds(10);
  return c;
}

// The job id of every process_test_world: tests that forge handshakes need it.
constexpr std::uint64_t test_job_id = 0x0b7c457ull;

// One event loop and thread per rank, each rank its own fabric over real transports
// (TCP sockets or a libfabric provider), and a store this world hosts.
class process_test_world final : public test_world {
public:
  // kind: a fabric table row and its variant: "tcp", "tcp:encrypt", "tcp:shm" or
  // "ofi:<provider>". The ranks of a test world share a host: plain tcp (and encrypt)
  // run as ranks of different hosts do, through loopback TCP; tcp:shm through shared
  // memory, messages of 4 KiB and more by single copy (both paths in every test).
  // (optcast/fabrics.hpp).
  process_test_world(const std::string& kind, int p, communicator_options o = {}, const job_options& jo = {})
      : server_("127.0.0.1", 0, p, test_job_id, jo.secret, kind.ends_with(":encrypt")), ios_(static_cast<std::size_t>(p)), caller_loops_(jo.caller_loops) {
    std::vector<std::shared_ptr<fabric>> fabrics(static_cast<std::size_t>(p));
    std::vector<std::string> errors(static_cast<std::size_t>(p));
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r) {
      ios_[static_cast<std::size_t>(r)] = std::make_unique<asio::io_context>(1);
      // Concurrently: a libfabric rank waits in its bootstrap for every rank's endpoint.
      threads.emplace_back([&, r] {
        job_config c;
        c.rank = r;
        c.size = p;
        c.store = {"127.0.0.1", server_.port()};
        if (jo.kv) {
          c.kv = jo.kv(r);
          c.store = {"127.0.0.1", 1};  // nobody there: the bootstrap must not need it
        }
        c.host_store = false;
        c.ports = jo.ports;
        c.secret = jo.secret;
        c.bootstrap_timeout = std::chrono::seconds(20);
        c.shm = false;
        c.shm_copy_min = 4096;
        if (jo.unexpected_limit) c.unexpected_limit = *jo.unexpected_limit;
        if (jo.unexpected_peer_limit) c.unexpected_peer_limit = *jo.unexpected_peer_limit;
        if (jo.adjust) jo.adjust(r, c);
        auto& io = *ios_[static_cast<std::size_t>(r)];
        try {
          // The fabric table's row, and its variant after the colon.
          const auto colon = kind.find(':');
          const auto* f = find_fabric(kind.substr(0, colon));
          if (!f) throw std::invalid_argument("no fabric '" + kind + "'");
          fabrics[static_cast<std::size_t>(r)] = f->connect(caller_loops_ ? &io : nullptr, c, colon == std::string::npos ? "" : kind.substr(colon + 1));
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (!e.empty()) throw std::runtime_error(kind + " world: " + e);
    for (auto& f : fabrics) comms_.emplace_back(std::move(f), o);
  }
  ~process_test_world() override {
    // A service stops its loop before it drops its communicators (else each close waits
    // a second to learn that nothing runs the loop): so do tests that run their own.
    if (caller_loops_)
      for (auto& io : ios_) io->stop();
    comms_.clear();
  }

  std::vector<communicator>& comms() override { return comms_; }
  // Rank r's event loop, with caller_loops (its fabric runs on it; the test runs it).
  asio::io_context& io(int r) {
    if (!caller_loops_) throw std::logic_error("process_test_world: io(r) needs job_options::caller_loops");
    return *ios_[static_cast<std::size_t>(r)];
  }
  std::vector<result<void>> run_all(const rank_fn& fn) override {
    std::vector<result<void>> out(comms_.size());
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < comms_.size(); ++r)
      threads.emplace_back([&, r] { out[r] = run(comms_[r], fn(comms_[r])); });
    for (auto& t : threads) t.join();
    return out;
  }

  bool settle(const std::function<bool(communicator&)>& done, std::chrono::milliseconds most) override {
    std::vector<std::thread> threads;
    std::vector<char> ok(comms_.size(), 0);
    const auto until = std::chrono::steady_clock::now() + most;
    for (std::size_t r = 0; r < comms_.size(); ++r)
      threads.emplace_back([&, r] { ok[r] = drive_until(comms_[r], done, until); });
    for (auto& t : threads) t.join();
    return std::all_of(ok.begin(), ok.end(), [](char x) { return x != 0; });
  }


private:
  // Runs c's loop (its own, or the test's) on this thread until done(c), or false at
  // `until`; a timer wakes the loop every 5 ms to look.
  bool drive_until(communicator& c, const std::function<bool(communicator&)>& done,
                   std::chrono::steady_clock::time_point until) {
    asio::steady_timer tick(*c.get_fabric().executor());
    bool ticking = true;
    // cancel() misses a wait that has expired but whose handler has not run yet (on a
    // strand that is two hops of the loop): the handler looks at `wanted` as well.
    bool wanted = true;
    std::function<void()> arm = [&] {
      tick.expires_after(std::chrono::milliseconds(5));
      tick.async_wait([&](std::error_code ec) {
        if (ec || !wanted) ticking = false;
        else arm();
      });
    };
    arm();
    bool ok = false;
    auto stop = [&] { return (ok = done(c)) || std::chrono::steady_clock::now() >= until; };
    auto stopped = [&] { return !ticking; };
    if (auto* io = c.get_fabric().borrowed_loop()) {
      if (io->stopped()) io->restart();
      while (!stop()) io->run_one();
      wanted = false;
      tick.cancel();
      while (!stopped()) io->run_one();
    } else {
      c.get_fabric().run_until(stop);
      wanted = false;
      tick.cancel();
      c.get_fabric().run_until(stopped);  // the cancelled wait's handler refers to this frame
    }
    return ok;
  }

  store::server server_;
  std::vector<std::unique_ptr<asio::io_context>> ios_;
  bool caller_loops_ = false;
  std::vector<communicator> comms_;
};

class tcp_test_world final : public test_world {
public:
  explicit tcp_test_world(int p, communicator_options o = {}, const job_options& jo = {}) : w_("tcp", p, o, jo) {}
  std::vector<communicator>& comms() override { return w_.comms(); }
  std::vector<result<void>> run_all(const rank_fn& fn) override { return w_.run_all(fn); }
  bool settle(const std::function<bool(communicator&)>& done, std::chrono::milliseconds most) override { return w_.settle(done, most); }

private:
  process_test_world w_;
};

inline bool provider_present(const std::string& prov) {
  const auto ps = ofi::providers();
  return std::find(ps.begin(), ps.end(), prov) != ps.end();
}

// The libfabric providers the tests run on. Their test cases (tagged [fabrics] or [ofi])
// run in meson tests of their own, NAME_ofi, with OPTCAST_TEST_OFI set: those exit 77
// (skipped, with the reason) where a provider is missing (tests/main.cpp), and the other
// runs leave libfabric out.
inline const std::vector<std::string>& ofi_providers() {
  static const std::vector<std::string> ps{"tcp;ofi_rxm", "shm"};
  return ps;
}
inline bool ofi_run() { return std::getenv("OPTCAST_TEST_OFI") != nullptr; }

// How a multi-process test ([fabrics][process]) runs a row of the fabric table: the
// environment for its ranks, or nullopt where this run leaves it out (libfabric's row
// runs only in the libfabric run, on its first provider; every other row elsewhere).
inline std::optional<std::string> job_env_for(std::string_view fabric) {
  const bool ofi = fabric == "ofi";
  if (ofi != ofi_run()) return std::nullopt;
  return ofi ? "FI_PROVIDER='" + ofi_providers().front() + "'" : std::string();
}

// The fabrics every conformance test runs on: local, the simulator (rounds and LogGP),
// tcp (loopback sockets), tcp with every frame encrypted, and tcp through shared memory
// (the ranks of a test world share a host); in the libfabric run, libfabric's
// tcp;ofi_rxm and shm.
inline std::vector<std::string> fabric_kinds() {
  if (!ofi_run()) return {"local", "sim", "sim:logp", "tcp", "tcp:encrypt", "tcp:shm"};
  std::vector<std::string> kinds;
  for (const auto& prov : ofi_providers()) kinds.push_back("ofi:" + prov);
  return kinds;
}

inline std::unique_ptr<test_world> make_world(const std::string& kind, int p, communicator_options o);

// The kinds of this run whose fabric has `property` (asked of a one-rank world of each):
// a case that applies only to them generates from this list, rather than returning early
// (with no assertion) on the others.
inline std::vector<std::string> fabric_kinds_where(bool (*property)(const fabric&)) {
  std::vector<std::string> out;
  for (const auto& k : fabric_kinds())
    if (property(make_world(k, 1, {})->comms()[0].get_fabric())) out.push_back(k);
  return out;
}

// The worlds a data test runs on: local and TCP with the given sizes; in the libfabric
// run, libfabric's tcp provider with 5 ranks.
struct world_case {
  std::string kind;
  int p;
};

inline std::vector<world_case> world_cases(std::initializer_list<int> local, std::initializer_list<int> tcp) {
  if (ofi_run()) return {{"ofi:tcp;ofi_rxm", 5}, {"split:ofi:tcp;ofi_rxm", 3}};
  std::vector<world_case> out;
  for (int p : local) out.push_back({"local", p});
  for (int p : tcp) out.push_back({"tcp", p});
  // Encrypted TCP once, on the largest world of at most 7 ranks (enough for every peer
  // pattern, without doubling the suite's time).
  int enc = 0;
  for (int p : tcp)
    if (p <= 7) enc = std::max(enc, p);
  if (enc) out.push_back({"tcp:encrypt", enc});
  if (enc) out.push_back({"tcp:shm", enc});  // and through shared memory
  // And on sub-communicators (split_test_world): once on each kind, at a middle size.
  int sub_local = 0, sub_tcp = 0;
  for (int p : local)
    if (p <= 8) sub_local = std::max(sub_local, p);
  for (int p : tcp)
    if (p <= 5) sub_tcp = std::max(sub_tcp, p);
  if (sub_local) out.push_back({"split:local", sub_local});
  if (sub_tcp) out.push_back({"split:tcp", sub_tcp});
  return out;
}

inline std::unique_ptr<test_world> make_split_world(const std::string& base, int p, communicator_options o);

inline std::unique_ptr<test_world> make_world(const std::string& kind, int p, communicator_options o = {}) {
  if (kind == "local") return std::make_unique<local_test_world>(p, o);
  // Rounds with 8 ports: the contract tests run several collectives at once, which one
  // port forbids (sim_test checks that).
  if (kind == "sim") return std::make_unique<sim_test_world>(p, o, sim::model::rounds(8));
  if (kind == "sim:logp") return std::make_unique<sim_test_world>(p, o, sim::model::loggp(6, 2, 4, 0.01));
  if (kind.starts_with("split:")) return make_split_world(kind.substr(6), p, o);
  return std::make_unique<process_test_world>(kind, p, o);
}

// p ranks of a sub-communicator that split() made from a world of p + 2 ranks of kind
// `base`: the parent's ranks in reverse order (key -rank), without parent ranks 1 and
// p + 1, which form a communicator of their own and stay idle. A test run on it runs
// every collective through the renumbering and the sub-communicator's tags.
class split_test_world final : public test_world {
public:
  split_test_world(const std::string& base, int p, communicator_options o) : parent_(make_world(base, p + 2, o)) {
    const int P = p + 2;
    auto color = [P](int r) { return r == 1 || r == P - 1 ? 1 : 0; };
    std::vector<std::optional<communicator>> made(static_cast<std::size_t>(P));
    auto res = parent_->run_all([&](communicator& c) -> task<result<void>> {
      auto s = co_await split(c, color(c.rank()), -c.rank());
      if (!s) co_return fail(s.error());
      made[static_cast<std::size_t>(c.rank())] = std::move(*s);
      co_return result<void>{};
    });
    sub_of_.assign(static_cast<std::size_t>(P), -1);
    std::string failed;  // every rank's cause, with what it was waiting for (a stall is otherwise mute)
    for (int r = 0; r < P; ++r)
      if (!res[static_cast<std::size_t>(r)])
        failed += "\n  rank " + std::to_string(r) + ": " + res[static_cast<std::size_t>(r)].error().message() + ": " +
                  parent_->comms()[static_cast<std::size_t>(r)].failure_detail();
    if (!failed.empty()) throw std::runtime_error("split failed on a " + base + " world of " + std::to_string(P) + failed);
    for (int r = P - 1; r >= 0; --r) {
      auto& m = made[static_cast<std::size_t>(r)];
      if (!m) throw std::runtime_error("split gave rank " + std::to_string(r) + " no communicator");
      if (color(r) != 0) continue;
      sub_of_[static_cast<std::size_t>(r)] = static_cast<int>(comms_.size());
      comms_.push_back(std::move(*m));
    }
  }
  std::vector<communicator>& comms() override { return comms_; }
  std::vector<result<void>> run_all(const rank_fn& fn) override {
    auto res = parent_->run_all([&](communicator& c) -> task<result<void>> {
      const int s = sub_of_[static_cast<std::size_t>(c.rank())];
      if (s >= 0) return fn(comms_[static_cast<std::size_t>(s)]);
      return []() -> task<result<void>> { co_return result<void>{}; }();
    });
    std::vector<result<void>> out(comms_.size());
    for (std::size_t r = 0; r < res.size(); ++r)
      if (sub_of_[r] >= 0) out[static_cast<std::size_t>(sub_of_[r])] = res[r];
    return out;
  }
  bool settle(const std::function<bool(communicator&)>& done, std::chrono::milliseconds most) override {
    return parent_->settle(
        [&](communicator& c) {
          const int s = sub_of_[static_cast<std::size_t>(c.rank())];
          return s < 0 || done(comms_[static_cast<std::size_t>(s)]);
        },
        most);
  }

private:
  std::unique_ptr<test_world> parent_;  // outlives the sub-communicators
  std::vector<communicator> comms_;
  std::vector<int> sub_of_;  // parent rank -> rank here, -1: not a member
};

inline std::unique_ptr<test_world> make_split_world(const std::string& base, int p, communicator_options o) {
  return std::make_unique<split_test_world>(base, p, o);
}

}  // namespace optcast::testing
