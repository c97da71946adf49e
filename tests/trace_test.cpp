// The operation timeline (optcast/trace.hpp): every send and receive of a run, each once,
// with its peer, tag, size and times, on the simulator's clock and on the wall clock.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "optcast/collectives.hpp"
#include "optcast/join.hpp"
#include "optcast/net/local.hpp"
#include "optcast/net/sim.hpp"
#include "optcast/trace.hpp"

using namespace optcast;

namespace {

using key = std::tuple<int, int, std::uint32_t, std::uint32_t>;  // from, to, seq, step

}  // namespace

TEST_CASE("a traced circulant broadcast: every message once on each side, in its round", "[trace][sim]") {
  const int p = 7, n = 5;
  sim::world w(p, sim::model::rounds());
  std::vector<std::shared_ptr<trace_log>> logs;
  for (int r = 0; r < p; ++r) logs.push_back(std::make_shared<trace_log>());
  std::vector<communicator> comms;
  for (int r = 0; r < p; ++r) {
    comms.emplace_back(w.fabric(r));
    comms.back().get_fabric().set_trace(logs[static_cast<std::size_t>(r)]);
  }
  std::vector<std::vector<std::byte>> bufs(p, std::vector<std::byte>(1000, std::byte{0}));
  for (std::size_t i = 0; i < 1000; ++i) bufs[2][i] = static_cast<std::byte>(i * 3);
  auto res = run_all(comms, [&](communicator& c) {
    return broadcast(c, std::span(bufs[static_cast<std::size_t>(c.rank())]), 2, {.alg = algorithm::circulant, .blocks = n});
  });
  for (auto& r : res) REQUIRE(r);
  const auto rep = w.take_report();

  std::map<key, trace_event> sends, recvs;
  for (int r = 0; r < p; ++r) {
    REQUIRE(logs[static_cast<std::size_t>(r)]->dropped() == 0);
    for (const auto& e : logs[static_cast<std::size_t>(r)]->events()) {
      if (e.kind == op_kind::idle) continue;
      CHECK(e.error == 0);
      CHECK(e.done >= e.posted);
      // The rounds model: everything completes at the end of a round.
      CHECK(e.done == std::floor(e.done));
      auto& into = e.kind == op_kind::send ? sends : recvs;
      const key k = e.kind == op_kind::send ? key{r, e.peer, e.tg.seq, e.tg.step} : key{e.peer, r, e.tg.seq, e.tg.step};
      CHECK(into.emplace(k, e).second);  // once
    }
  }
  CHECK(sends.size() == rep.messages);
  REQUIRE(recvs.size() == sends.size());
  std::size_t bytes = 0;
  for (const auto& [k, s] : sends) {
    REQUIRE(recvs.count(k));
    CHECK(recvs.at(k).bytes == s.bytes);
    CHECK(recvs.at(k).done == s.done);  // both ends of a message finish in its round
    bytes += s.bytes;
  }
  CHECK(bytes == rep.bytes);
  // Every rank's last completion is its finish (the loop's rounds end with a message).
  for (int r = 0; r < p; ++r) {
    double last = 0;
    for (const auto& e : logs[static_cast<std::size_t>(r)]->events()) last = std::max(last, e.done);
    CHECK(last == Approx(rep.ranks[static_cast<std::size_t>(r)].finish));
  }
}

TEST_CASE("trace: a full log counts what it drops; a failed receive keeps its error; JSON", "[trace][local]") {
  local::world w(2);
  auto comms = communicators_of(w);
  auto small = std::make_shared<trace_log>(1);
  auto log1 = std::make_shared<trace_log>();
  comms[0].get_fabric().set_trace(small);
  comms[1].get_fabric().set_trace(log1);
  std::vector<std::byte> a(16), b(8);
  auto res = run_all(comms, [&](communicator& c) -> task<result<void>> {
    if (c.rank() == 0) {
      if (auto r = co_await send(c, 1, 1, a); !r) co_return fail(r.error());
      co_return co_await send(c, 1, 2, a);
    }
    if (auto r = co_await recv(c, 0, 1, std::span(a)); !r) co_return fail(r.error());
    co_return co_await recv(c, 0, 2, std::span(b));  // 16 bytes sent, 8 expected
  });
  CHECK(res[1].error() == errc::size_mismatch);
  CHECK(small->events().size() == 1);
  CHECK(small->dropped() == 1);
  REQUIRE(log1->events().size() == 2);
  CHECK(log1->events()[0].error == 0);
  CHECK(log1->events()[1].error == static_cast<int>(errc::size_mismatch));
  CHECK(log1->events()[1].done >= log1->events()[1].posted);
  const auto j = nlohmann::json::parse(log1->chrome_json());
  CHECK(j["optcast"]["rank"] == 1);
  CHECK(j["optcast"]["clock"] == "monotonic");
  CHECK(j["optcast"]["clock_offset_s"].is_null());  // not measured
  std::vector<nlohmann::json> slices;
  int waits = 0;  // rank 0 may send before rank 1 posts: such waits have slices of their own
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["cat"] == "unexpected") ++waits;
    else slices.push_back(e);
  }
  CHECK(waits <= 2);
  REQUIRE(slices.size() == 2);
  CHECK(slices[1]["cat"] == "recv");
  CHECK(slices[1]["args"]["peer"] == 0);
  CHECK(slices[1]["args"]["bytes"] == 8);
  CHECK(slices[1]["args"]["error"].get<std::string>().find("size") != std::string::npos);
  CHECK(slices[1]["ts"].get<double>() == Approx(log1->events()[1].posted * 1e6));
  // The failed receive took no message: one flow end, the first receive's.
  int ends = 0;
  for (const auto& e : j["traceEvents"]) ends += e["ph"] == "f";
  CHECK(ends == 1);
}

TEST_CASE("trace: a message that waited for its receive shows that wait; one that found its receive does not", "[trace][local]") {
  local::world w(2);
  auto comms = communicators_of(w);
  auto log0 = std::make_shared<trace_log>(), log1 = std::make_shared<trace_log>();
  comms[0].get_fabric().set_trace(log0);
  comms[1].get_fabric().set_trace(log1);
  std::vector<std::byte> a(8), b(8), c(8);
  // Rank 0 waits for rank 1's message on tag 9; meanwhile rank 1 posts its receive for tag
  // 1. Then rank 0 sends tag 1 (its receive is there) and tag 3 (rank 1 has not posted it
  // yet: the fabric holds it until rank 1 does).
  auto res = run_all(comms, [&](communicator& cm) -> task<result<void>> {
    if (cm.rank() == 0) {
      if (auto r = co_await recv(cm, 1, 9, std::span(a)); !r) co_return fail(r.error());
      if (auto r = co_await send(cm, 1, 1, b); !r) co_return fail(r.error());
      co_return co_await send(cm, 1, 3, c);
    }
    if (auto r = co_await send(cm, 0, 9, a); !r) co_return fail(r.error());
    if (auto r = co_await recv(cm, 0, 1, std::span(b)); !r) co_return fail(r.error());
    co_return co_await recv(cm, 0, 3, std::span(c));
  });
  for (auto& r : res) REQUIRE(r);
  std::vector<trace_event> recvs;
  for (const auto& e : log1->events())
    if (e.kind == op_kind::recv) recvs.push_back(e);
  REQUIRE(recvs.size() == 2);
  CHECK(recvs[0].arrived < 0);  // tag 1 found its receive posted
  CHECK(recvs[1].arrived >= 0);  // tag 3 waited for it
  CHECK(recvs[1].arrived <= recvs[1].posted);
  const auto j = nlohmann::json::parse(log1->chrome_json());
  int waits = 0;
  for (const auto& e : j["traceEvents"])
    if (e.value("cat", "") == "unexpected") {
      ++waits;
      CHECK(e["name"] == "unexpected from 0");
      CHECK(e["args"]["step"] == recvs[1].tg.step);
      CHECK(e["ts"].get<double>() == Approx(recvs[1].arrived * 1e6));
    }
  CHECK(waits == 1);
  // The sender's log has no waits of its own.
  CHECK(nlohmann::json::parse(log0->chrome_json()).dump().find("unexpected from") == std::string::npos);
}

TEST_CASE("trace: two live communicators of one process never trace into the same file", "[trace][local]") {
  const auto dir = std::filesystem::temp_directory_path() / ("optcast-trace-claim-" + std::to_string(::getpid()));
  local::world a(1), b(1);
  auto ca = communicators_of(a), cb = communicators_of(b);
  start_trace(ca[0], dir.string());
  // Both are rank 0: the second would overwrite the first's rank0.json when it ends.
  try {
    start_trace(cb[0], dir.string());
    FAIL("a second communicator traced into the same file");
  } catch (const setup_error& e) {
    CHECK(std::string(e.what()).find("another traced communicator") != std::string::npos);
    CHECK(std::string(e.what()).find("rank0.json") != std::string::npos);
  }
  CHECK(!cb[0].get_fabric().trace());
  start_trace(cb[0], (dir / "other").string());  // a directory of its own is fine
  // Once the first log has written its file, its name is free again.
  ca[0].get_fabric().set_trace(nullptr);
  CHECK(std::filesystem::exists(dir / "rank0.json"));
  cb[0].get_fabric().set_trace(nullptr);
  start_trace(cb[0], dir.string());
  cb[0].get_fabric().set_trace(nullptr);
  std::filesystem::remove_all(dir);
}
