// A job bootstrapped through the program's own key-value store (job_config::kv,
// optcast/net/kv_store.hpp): the in-memory store's semantics, TCP and libfabric ranks
// that meet in a store of the test's (and could not reach optcast's), the job's first
// failure and its outcome through the store, and a store that already served a job.
#include <catch2/catch.hpp>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <fstream>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "optcast/collectives.hpp"
#include "bootstrap/job_session.hpp"
#include "bootstrap/file_store.hpp"
#include "optcast/net/kv_store.hpp"
#include "bootstrap/redis_store.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;
using testing::in_store;

namespace {

// The service's store: what optcast asked of it is recorded.
class recording_store final : public kv_store {
public:
  result<void> set(const std::string& k, const std::string& v) override {
    note(k);
    return m_.set(k, v);
  }
  result<std::string> get(const std::string& k, std::chrono::milliseconds t) override {
    note(k);
    return m_.get(k, t);
  }
  result<std::int64_t> add(const std::string& k, std::int64_t d) override {
    note(k);
    return m_.add(k, d);
  }
  result<void> wait(const std::vector<std::string>& ks, std::chrono::milliseconds t) override {
    for (const auto& k : ks) note(k);
    return m_.wait(ks, t);
  }
  std::set<std::string> keys() {
    std::lock_guard l(mu_);
    return keys_;
  }

private:
  void note(const std::string& k) {
    std::lock_guard l(mu_);
    keys_.insert(k);
  }
  memory_kv_store m_;
  std::mutex mu_;
  std::set<std::string> keys_;
};

std::vector<std::string> kinds() {
  if (testing::ofi_run()) return {"ofi:tcp;ofi_rxm"};
  return {"tcp"};
}

// Every rank's leave() at once (each waits for the others' goodbyes).
std::vector<result<void>> leave_all(std::vector<communicator>& comms) {
  std::vector<result<void>> out(comms.size());
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < comms.size(); ++r) ts.emplace_back([&, r] { out[r] = comms[r].leave(); });
  for (auto& t : ts) t.join();
  return out;
}


// What every store must do (kv_store.hpp): `make()` gives another object on the same
// store, as another process would have.
void check_store_semantics(const std::function<std::unique_ptr<kv_store>()>& make) {
  auto own = make();
  kv_store& s = *own;
  const auto t0 = std::chrono::steady_clock::now();
  auto missing = s.get("absent", 50ms);
  CHECK(std::chrono::steady_clock::now() - t0 >= 50ms);
  REQUIRE_FALSE(missing);
  CHECK(missing.error() == errc::timeout);
  CHECK_FALSE(s.get("absent", 0ms));

  REQUIRE(s.set("a", "1"));
  REQUIRE(s.set("a", std::string("x\0y", 3)));  // replaced; bytes, not C strings
  CHECK(*s.get("a", 0ms) == std::string("x\0y", 3));

  // A get and a wait that another thread satisfies.
  std::thread later([&] {
    std::this_thread::sleep_for(30ms);
    (void)s.set("b", "B");
    (void)s.set("c", "C");
  });
  auto b = s.get("b", 5s);
  auto both = s.wait({"b", "c"}, 5s);
  later.join();
  REQUIRE(b);
  CHECK(*b == "B");
  CHECK(both);
  CHECK(s.wait({"b", "nope"}, 20ms).error() == errc::timeout);

  // Four threads counting 1000 each, each through a store object of its own where the
  // store has several (as processes on other hosts would): no increment lost.
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      auto mine = make();
      kv_store& a = mine ? *mine : s;
      for (int i = 0; i < 1000; ++i) (void)a.add("n", 1);
    });
  for (auto& t : ts) t.join();
  CHECK(*s.add("n", 0) == 4000);
  CHECK(*s.add("n", -4001) == -1);
  CHECK_FALSE(s.add("a", 1));  // not a number: refused, kept
  CHECK(*s.get("a", 0ms) == std::string("x\0y", 3));
}

}  // namespace

TEST_CASE("the stores: set, get that waits, atomic add, wait for keys", "[local][kv]") {
  const std::string kind = GENERATE(as<std::string>{}, "memory", "file");
  INFO(kind);
  testing::temp_dir dir;
  if (kind == "memory") {
    auto m = std::make_shared<memory_kv_store>();
    struct view final : kv_store {  // the one memory store, seen through many objects
      std::shared_ptr<memory_kv_store> m;
      result<void> set(const std::string& k, const std::string& v) override { return m->set(k, v); }
      result<std::string> get(const std::string& k, std::chrono::milliseconds t) override { return m->get(k, t); }
      result<std::int64_t> add(const std::string& k, std::int64_t d) override { return m->add(k, d); }
      result<void> wait(const std::vector<std::string>& ks, std::chrono::milliseconds t) override { return m->wait(ks, t); }
    };
    check_store_semantics([m]() -> std::unique_ptr<kv_store> {
      auto v = std::make_unique<view>();
      v->m = m;
      return v;
    });
  } else {
    check_store_semantics([&]() -> std::unique_ptr<kv_store> { return std::make_unique<file_kv_store>(dir.path() + "/store", "job7/"); });
    CHECK(file_kv_store(dir.path() + "/store", "job7/").add("a", 1).error() == errc::invalid_argument);
  }
}

TEST_CASE("ranks meet in the program's store, run collectives and leave with the job's success", "[fabrics][kv]") {
  const std::string kind = GENERATE(from_range(kinds()));
  const int p = 5;
  auto store = std::make_shared<recording_store>();
  testing::job_options jo;
  jo.kv = [store](int) { return store; };
  testing::process_test_world w(kind, p, {}, jo);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    std::vector<std::int64_t> x(1000, c.rank() == 3 ? 7 : 0);
    if (auto r = co_await broadcast(c, std::span(x), 3); !r) co_return r;
    std::vector<std::int64_t> y(1000, c.rank() + 1);
    if (auto r = co_await allreduce(c, std::span<const std::int64_t>(y), std::span(y), ops::sum); !r) co_return r;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (x[i] != 7 || y[i] != p * (p + 1) / 2) co_return fail(errc::protocol_violation);
    co_return result<void>{};
  });
  for (int r = 0; r < p; ++r) {
    INFO(kind << " rank " << r << ": " << w.comms()[static_cast<std::size_t>(r)].failure_detail());
    CHECK(res[static_cast<std::size_t>(r)]);
  }
  for (auto& out : leave_all(w.comms())) CHECK(out);
  // Through the store: the job id, where every rank listens (its fabric's key), and
  // every rank's goodbye; no failure.
  const std::string addr = kind == "tcp" ? "optcast/addr/" : "optcast/ofi/";
  CHECK(store->get("optcast/job", 0ms));
  for (int r = 0; r < p; ++r) {
    CHECK(store->get(addr + std::to_string(r), 0ms));
    CHECK(store->get("optcast/bye/" + std::to_string(r), 0ms).value_or("") == "ok");
  }
  CHECK_FALSE(store->get("optcast/failure/1", 0ms));
  for (const auto& k : store->keys()) CHECK(k.starts_with("optcast/"));  // as kv_store.hpp promises
}

TEST_CASE("through the program's store: the first failure reaches every rank and is the job's outcome", "[local][kv]") {
  auto store = std::make_shared<memory_kv_store>();
  asio::io_context io;
  const int p = 3;
  std::vector<std::unique_ptr<job_session>> jobs(p);
  std::vector<std::thread> ts;
  for (int r = 0; r < p; ++r)
    ts.emplace_back([&, r] { jobs[static_cast<std::size_t>(r)] = std::make_unique<job_session>(io.get_executor(), in_store(store, r, p)); });
  for (auto& t : ts) t.join();
  for (int r = 1; r < p; ++r) CHECK(jobs[static_cast<std::size_t>(r)]->id() == jobs[0]->id());
  CHECK(jobs[0]->id() != 0);

  std::vector<std::string> told(p);
  std::vector<std::uint64_t> codes(p, 0);
  for (int r = 0; r < p; ++r)
    jobs[static_cast<std::size_t>(r)]->on_failure(nullptr, nullptr, [&, r](std::uint64_t code, int, std::string why) {
      codes[static_cast<std::size_t>(r)] = code;
      told[static_cast<std::size_t>(r)] = std::move(why);
    });
  jobs[1]->report_failure(static_cast<int>(errc::size_mismatch), "rank 1 failed: a test's failure");
  const auto until = std::chrono::steady_clock::now() + 10s;
  while ((told[0].empty() || told[2].empty()) && std::chrono::steady_clock::now() < until) {
    io.restart();
    io.run_for(10ms);
  }
  for (int r : {0, 2}) {
    CHECK(told[static_cast<std::size_t>(r)] == "rank 1 failed: a test's failure");
    CHECK(codes[static_cast<std::size_t>(r)] == static_cast<std::uint64_t>(errc::size_mismatch));
  }
  CHECK(told[1].empty());  // the rank that failed is not told its own news
  // A later failure (a consequence) does not replace the first.
  jobs[2]->report_failure(static_cast<int>(errc::peer_lost), "rank 2 failed: a consequence");

  // Every rank's outcome: the first failure, with its reason.
  for (int r = 0; r < p; ++r) {
    auto out = jobs[static_cast<std::size_t>(r)]->leave(5s, r != 0);
    REQUIRE_FALSE(out);
    CHECK(out.error() == errc::size_mismatch);
    CHECK(jobs[static_cast<std::size_t>(r)]->outcome_detail() == "rank 1 failed: a test's failure");
  }
}

TEST_CASE("through the program's store: a rank that never says goodbye makes leave time out, named", "[local][kv]") {
  auto store = std::make_shared<memory_kv_store>();
  asio::io_context io;
  job_session a(io.get_executor(), in_store(store, 0, 2));
  job_session b(io.get_executor(), in_store(store, 1, 2));
  const auto t0 = std::chrono::steady_clock::now();
  auto out = a.leave(300ms);
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(out);
  CHECK(out.error() == errc::timeout);
  CHECK_THAT(a.outcome_detail(), Catch::Contains("not every rank finished within 300 ms"));
  CHECK(took >= 300ms);
  CHECK(took < 5s);
  CHECK(b.leave(1s));  // rank 0's goodbye is there: rank 1 sees the whole job done
}

TEST_CASE("a store that already served a job is refused, naming the key", "[local][kv]") {
  auto store = std::make_shared<memory_kv_store>();
  asio::io_context io;
  const auto c = in_store(store, 0, 1);
  {
    job_session first(io.get_executor(), c);
    CHECK(first.leave(1s));
  }
  try {
    job_session second(io.get_executor(), c);
    FAIL("a second job joined a store that served one");
  } catch (const setup_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("already served a job") && Catch::Contains("optcast/joined"));
  }
  // A rank that waits for a job id nobody publishes: a bootstrap timeout, said so.
  auto empty = std::make_shared<memory_kv_store>();
  auto d = in_store(empty, 1, 2);
  d.bootstrap_timeout = 200ms;
  CHECK_THROWS_WITH(job_session(io.get_executor(), d), Catch::Contains("rank 0 did not publish the job id") && Catch::Contains("200 ms"));
}

TEST_CASE("the file store: keys stay inside their directory, jobs apart by prefix, bad directories refused", "[local][kv]") {
  testing::temp_dir dir;
  file_kv_store a(dir.path() + "/s", "job1/"), b(dir.path() + "/s", "job2/");
  for (const std::string& k : std::vector<std::string>{"../escape", "/etc/passwd", ".hidden", "a/b\\c", std::string("nul\0byte", 8)}) {
    INFO(k);
    const auto path = a.path_of(k);
    CHECK(path.rfind(dir.path() + "/s/", 0) == 0);
    CHECK(path.find('/', dir.path().size() + 3) == std::string::npos);  // one name, no subdirectory
    REQUIRE(a.set(k, "v"));
    CHECK(*a.get(k, 0ms) == "v");
    CHECK_FALSE(b.get(k, 0ms));  // another job's prefix: not its key
  }
  CHECK(a.path_of("x") != a.path_of("X"));
  std::ofstream(dir.path() + "/plain") << "a file";
  CHECK_THROWS_WITH(file_kv_store(dir.path() + "/plain"), Catch::Contains("is not a directory"));
  CHECK_THROWS_WITH(file_kv_store(dir.path() + "/no/such/parent"), Catch::Contains("cannot create the store's directory"));
}

TEST_CASE("ranks meet in a file store, each through its own (as on other hosts)", "[fabrics][kv]") {
  const std::string kind = GENERATE(from_range(kinds()));
  testing::temp_dir dir;
  const int p = 4;
  testing::job_options jo;
  jo.kv = [&](int) { return std::make_shared<file_kv_store>(dir.path() + "/store"); };
  testing::process_test_world w(kind, p, {}, jo);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    std::vector<std::int32_t> x(5000, c.rank() == 1 ? 42 : 0);
    if (auto r = co_await broadcast(c, std::span(x), 1); !r) co_return r;
    for (auto v : x)
      if (v != 42) co_return fail(errc::protocol_violation);
    co_return result<void>{};
  });
  for (auto& r : res) CHECK(r);
  for (auto& out : leave_all(w.comms())) CHECK(out);
}

// ---------------------------------------------------------------------------- Redis
// These run where redis-server is installed (meson's kv_store_redis test; main.cpp
// reports them skipped elsewhere), each against a server of its own.

namespace {

// A redis-server on a free port of loopback, with nothing saved, stopped at the end.
class redis_server {
public:
  redis_server() {
    dir_ = std::make_unique<testing::temp_dir>();
    {
      asio::io_context io;
      asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
      port_ = a.local_endpoint().port();
    }
    const std::string port = std::to_string(port_), log = dir_->path() + "/redis.log";
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execlp("redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", dir_->path().c_str(), "--logfile", log.c_str(), static_cast<char*>(nullptr));
      std::_Exit(127);
    }
    // Up once it answers.
    redis_kv_store::options o;
    o.port = port_;
    o.connect_timeout = 10s;
    redis_kv_store probe(o);
    if (!probe.set("optcast-test/up", "1")) throw std::runtime_error("redis-server did not start: " + probe.last_error());
  }
  ~redis_server() {
    ::kill(pid_, SIGTERM);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }
  std::uint16_t port() const noexcept { return port_; }
  redis_kv_store::options options(std::string prefix) const {
    redis_kv_store::options o;
    o.port = port_;
    o.prefix = std::move(prefix);
    o.connect_timeout = 5s;
    return o;
  }
  // redis-cli's answer to `args`, one line.
  std::string cli(const std::string& args) const {
    std::string out;
    FILE* f = ::popen(("redis-cli -p " + std::to_string(port_) + " " + args).c_str(), "r");
    char buf[256];
    while (f && std::fgets(buf, sizeof buf, f)) out += buf;
    if (f) ::pclose(f);
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

private:
  std::unique_ptr<testing::temp_dir> dir_;
  std::uint16_t port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace

TEST_CASE("the Redis store: set, get that waits, atomic add across connections, wait for keys", "[.][redis]") {
  redis_server server;
  check_store_semantics([&]() -> std::unique_ptr<kv_store> { return std::make_unique<redis_kv_store>(server.options("t/job-1")); });
  // Under the prefix, each key with a lifetime (a shared server does not fill up).
  CHECK(server.cli("GET t/job-1/b") == "B");
  const auto ttl = std::stol(server.cli("TTL t/job-1/n"));
  CHECK(ttl > 0);
  CHECK(ttl <= 86400);
  CHECK(std::stol(server.cli("TTL t/job-1/b")) > 0);
  // Another job's prefix: none of these.
  redis_kv_store other(server.options("t/job-2"));
  CHECK_FALSE(other.get("b", 0ms));
  CHECK(*other.add("n", 1) == 1);
}

TEST_CASE("ranks meet in a Redis store, each through its own connection", "[.][redis]") {
  redis_server server;
  const std::string kind = GENERATE(from_range(kinds()));
  const int p = 4;
  testing::job_options jo;
  jo.kv = [&](int) { return std::make_shared<redis_kv_store>(server.options("svc/job-9")); };
  testing::process_test_world w(kind, p, {}, jo);
  auto res = w.run_all([&](communicator& c) -> task<result<void>> {
    std::vector<std::int64_t> y(3000, c.rank() + 1);
    if (auto r = co_await allreduce(c, std::span<const std::int64_t>(y), std::span(y), ops::sum); !r) co_return r;
    for (auto v : y)
      if (v != p * (p + 1) / 2) co_return fail(errc::protocol_violation);
    co_return result<void>{};
  });
  for (auto& r : res) CHECK(r);
  for (auto& out : leave_all(w.comms())) CHECK(out);
  CHECK(server.cli("GET svc/job-9/optcast/bye/3") == "ok");
  // The same job id again: the store says it served that job already.
  asio::io_context io;
  job_config c;
  c.rank = 0;
  c.size = p;
  c.kv = std::make_shared<redis_kv_store>(server.options("svc/job-9"));
  CHECK_THROWS_WITH(job_session(io.get_executor(), c), Catch::Contains("already served a job"));
}

TEST_CASE("a Redis store that is not there: an error naming it within the connect timeout", "[.][redis]") {
  // A port bound and never listened on: connecting is refused, and no other process can
  // take it meanwhile (a port closed again was taken by a parallel test's server once,
  // which reset the job's connection instead: a TSan run in CI).
  asio::io_context held_io;
  asio::ip::tcp::socket held(held_io);
  held.open(asio::ip::tcp::v4());
  held.bind({asio::ip::make_address("127.0.0.1"), 0});
  const std::uint16_t closed = held.local_endpoint().port();
  redis_kv_store::options o;
  o.port = closed;
  o.connect_timeout = 700ms;
  redis_kv_store s(o);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = s.set("k", "v");
  const auto took = std::chrono::steady_clock::now() - t0;
  REQUIRE_FALSE(r);
  CHECK(took >= 700ms);
  CHECK(took < 5s);
  CHECK_THAT(s.last_error(), Catch::Contains("cannot reach Redis at 127.0.0.1:" + std::to_string(closed)));
  // A job on it says so, on every rank, within its bootstrap timeout.
  asio::io_context io;
  job_config c;
  c.rank = 1;
  c.size = 2;
  c.bootstrap_timeout = 700ms;
  o.connect_timeout = c.bootstrap_timeout;
  c.kv = std::make_shared<redis_kv_store>(o);
  CHECK_THROWS_WITH(job_session(io.get_executor(), c), Catch::Contains("cannot reach Redis"));
}
