// The Asio tests' worlds: ranks on io_contexts of the test's, and loops run until each
// rank's work is done (asio_test.cpp, asio_survive_test.cpp).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <asio/io_context.hpp>

#include "worlds.hpp"

namespace optcast::testing {

using namespace std::chrono_literals;

// Runs `body(io, rank)` on every rank's event loop, then runs the loops until
// `finished(rank)` holds for all: one loop for the local world, one per rank (each on its
// own thread) for TCP. (Not until run() returns: a fabric keeps work pending, such as
// its listening socket's accept, for as long as it lives.)
template <class Body, class Finished>
inline void run_on_loops(testing::test_world& w, const std::string& kind, Body body, Finished finished) {
  auto drive = [&](asio::io_context& io, auto done) {
    io.restart();
    while (!done()) io.run_one_for(20ms);
  };
  if (kind == "local") {
    auto& io = static_cast<testing::local_test_world&>(w).world().io();
    for (int r = 0; r < w.size(); ++r) body(io, r);
    drive(io, [&] {
      for (int r = 0; r < w.size(); ++r)
        if (!finished(r)) return false;
      return true;
    });
    return;
  }
  auto& pw = static_cast<testing::process_test_world&>(w);
  std::vector<std::thread> threads;
  for (int r = 0; r < w.size(); ++r)
    threads.emplace_back([&, r] {
      auto& io = pw.io(r);
      body(io, r);
      drive(io, [&] { return finished(r); });
    });
  for (auto& t : threads) t.join();
}

// The local world (its loop the test runs), or TCP ranks on io_contexts of the test's.
inline std::unique_ptr<testing::test_world> make_asio_world(const std::string& kind, int p) {
  if (kind == "local") return testing::make_world(kind, p);
  return std::make_unique<testing::process_test_world>(kind, p, communicator_options{},
                                                       testing::job_options{.caller_loops = true});
}

}  // namespace optcast::testing
