// A stall looked into through the program's own key-value store (job_config::kv,
// net/bootstrap/kv_rendezvous.cpp): the rank whose event loop does not answer the
// inquiry is named to every waiting rank; when every loop answers, nobody is stuck.
#include <catch2/catch.hpp>

#include <asio/io_context.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/job_session.hpp"
#include "optcast/net/kv_store.hpp"
#include "worlds.hpp"

using namespace optcast;
using namespace std::chrono_literals;
using testing::in_store;

TEST_CASE("through the program's store, a stall is looked into: the rank whose loop does not answer is named to every rank",
          "[local][kv]") {
  for (const bool stopped : {true, false}) {
    INFO((stopped ? "rank 2's loop stopped" : "every loop runs"));
    auto store = std::make_shared<memory_kv_store>();
    const int p = 3;
    std::vector<std::unique_ptr<asio::io_context>> ios;
    for (int r = 0; r < p; ++r) ios.push_back(std::make_unique<asio::io_context>());
    std::vector<std::unique_ptr<job_session>> jobs(p);
    std::vector<std::thread> ts;
    for (int r = 0; r < p; ++r)
      ts.emplace_back([&, r] {
        jobs[static_cast<std::size_t>(r)] = std::make_unique<job_session>(ios[static_cast<std::size_t>(r)]->get_executor(), in_store(store, r, p));
      });
    for (auto& t : ts) t.join();
    std::vector<std::string> told(p);
    std::vector<std::uint64_t> codes(p, 0);
    std::vector<int> nobody(p, 0);
    for (int r = 0; r < p; ++r) {
      auto& j = *jobs[static_cast<std::size_t>(r)];
      j.on_failure(nullptr, nullptr, [&, r](std::uint64_t code, int, std::string why) {
        codes[static_cast<std::size_t>(r)] = code;
        told[static_cast<std::size_t>(r)] = std::move(why);
      });
      j.answer_inquiries([](std::uint32_t) { return std::string(); });
    }
    // Ranks 0 and 1 wait in collective 7; rank 2's loop is run, or not (a stopped process).
    jobs[0]->report_stall(7, "receive from rank 2", [&] { ++nobody[0]; });
    std::this_thread::sleep_for(20ms);
    jobs[1]->report_stall(7, "receive from rank 0", [&] { ++nobody[1]; });
    const auto until = std::chrono::steady_clock::now() + 3s;
    const auto settled = [&] { return stopped ? !told[0].empty() && !told[1].empty() : nobody[0] && nobody[1]; };
    while (!settled() && std::chrono::steady_clock::now() < until)
      for (int r = 0; r < p; ++r)
        if (!stopped || r != 2) {
          ios[static_cast<std::size_t>(r)]->restart();
          ios[static_cast<std::size_t>(r)]->run_for(5ms);
        }
    if (stopped) {
      for (int r : {0, 1}) {
        INFO("rank " << r);
        CHECK(codes[static_cast<std::size_t>(r)] == static_cast<std::uint64_t>(errc::timeout));
        CHECK_THAT(told[static_cast<std::size_t>(r)], Catch::StartsWith("rank 2 stopped responding") && Catch::Contains("ranks 0, 1 waited in collective 7"));
      }
    } else {
      CHECK(nobody[0] == 1);
      CHECK(nobody[1] == 1);
      CHECK(told[0].empty());
      CHECK(told[1].empty());
      CHECK_FALSE(store->get("optcast/failure/1", 0ms));
    }
    for (auto& j : jobs) j->leave(0ms, false);
  }
}
