// A job bootstrapped through the program's own key-value store (job_config::kv,
// optcast/net/kv_store.hpp): the in-memory store's semantics, TCP and libfabric ranks
// that meet in a store of the test's (and could not reach optcast's), the job's first
// failure and its outcome through the store, and a store that already served a job.
#include <catch2/catch.hpp>

#include <asio/io_context.hpp>

#include <atomic>
#include <fstream>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "optcast/collectives.hpp"
#include "optcast/net/job.hpp"
#include "optcast/net/file_store.hpp"
#include "optcast/net/kv_store.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;

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

// Rank `rank` of a job of `size` that meets in `s`.
job_config in_store(const std::shared_ptr<kv_store>& s, int rank, int size) {
  job_config c;
  c.rank = rank;
  c.size = size;
  c.kv = s;
  c.bootstrap_timeout = 10s;
  return c;
}

}  // namespace

TEST_CASE("the stores: set, get that waits, atomic add, wait for keys", "[local][kv]") {
  const std::string kind = GENERATE(as<std::string>{}, "memory", "file");
  INFO(kind);
  testing::temp_dir dir;
  std::unique_ptr<kv_store> own;
  if (kind == "memory") own = std::make_unique<memory_kv_store>();
  else own = std::make_unique<file_kv_store>(dir.path() + "/store", "job7/");
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

  // Four threads counting 1000 each (on files, each through a store of its own, as
  // processes on other hosts would): no increment lost.
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      std::unique_ptr<kv_store> mine;
      if (kind == "file") mine = std::make_unique<file_kv_store>(dir.path() + "/store", "job7/");
      kv_store& a = mine ? *mine : s;
      for (int i = 0; i < 1000; ++i) (void)a.add("n", 1);
    });
  for (auto& t : ts) t.join();
  CHECK(*s.add("n", 0) == 4000);
  CHECK(*s.add("n", -4001) == -1);
  CHECK(s.add("a", 1).error() == errc::invalid_argument);  // not a number: refused, kept
  CHECK(*s.get("a", 0ms) == std::string("x\0y", 3));
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
  CHECK_FALSE(store->get("optcast/failure", 0ms));
  for (const auto& k : store->keys()) CHECK(k.starts_with("optcast/"));  // as kv_store.hpp promises
}

TEST_CASE("through the program's store: the first failure reaches every rank and is the job's outcome", "[local][kv]") {
  auto store = std::make_shared<memory_kv_store>();
  asio::io_context io;
  const int p = 3;
  std::vector<std::unique_ptr<job>> jobs(p);
  std::vector<std::thread> ts;
  for (int r = 0; r < p; ++r)
    ts.emplace_back([&, r] { jobs[static_cast<std::size_t>(r)] = std::make_unique<job>(io.get_executor(), in_store(store, r, p)); });
  for (auto& t : ts) t.join();
  for (int r = 1; r < p; ++r) CHECK(jobs[static_cast<std::size_t>(r)]->id() == jobs[0]->id());
  CHECK(jobs[0]->id() != 0);

  std::vector<std::string> told(p);
  std::vector<std::uint64_t> codes(p, 0);
  for (int r = 0; r < p; ++r)
    jobs[static_cast<std::size_t>(r)]->on_failure(nullptr, nullptr, [&, r](std::uint64_t code, std::string why) {
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
  job a(io.get_executor(), in_store(store, 0, 2));
  job b(io.get_executor(), in_store(store, 1, 2));
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
    job first(io.get_executor(), c);
    CHECK(first.leave(1s));
  }
  try {
    job second(io.get_executor(), c);
    FAIL("a second job joined a store that served one");
  } catch (const setup_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("already served a job") && Catch::Contains("optcast/joined"));
  }
  // A rank that waits for a job id nobody publishes: a bootstrap timeout, said so.
  auto empty = std::make_shared<memory_kv_store>();
  auto d = in_store(empty, 1, 2);
  d.bootstrap_timeout = 200ms;
  CHECK_THROWS_WITH(job(io.get_executor(), d), Catch::Contains("rank 0 did not publish the job id") && Catch::Contains("200 ms"));
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
