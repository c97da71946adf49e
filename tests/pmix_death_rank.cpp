// A rank of tests/pmix_death_test.sh, under tests/pmix_launcher: every rank joins over TCP
// through the launcher's PMIx server (no store); the last rank then dies (SIGKILL) before
// any collective, so no data connection to it ever exists; each other rank must learn of
// its death, through PMIx's event notification alone, within --wait-ms, and prints after
// how long. Exits 0 on learning of it, 1 if not.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <asio/steady_timer.hpp>

#include "optcast/join.hpp"

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--help") {
    std::printf("usage: pmix_death_rank [--wait-ms MS]: run by tests/pmix_launcher; the last rank dies, the others must hear of it\n");
    return 0;
  }
  const long wait_ms = argc > 2 && std::string(argv[1]) == "--wait-ms" ? std::atol(argv[2]) : 5000;
  optcast::communicator world = optcast::join("tcp");
  const int victim = world.size() - 1;
  if (world.rank() == victim) ::raise(SIGKILL);
  auto& f = world.get_fabric();
  if (!f.survival()) {
    std::printf("rank %d: the fabric (%s) does not survive a death, so it cannot say who died\n", world.rank(), std::string(f.name()).c_str());
    std::exit(1);
  }
  const auto alive = [&](int r) { return f.survival()->peer_alive(r); };
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::milliseconds(wait_ms);
  // The loop runs (a timer wakes it) until the fabric takes the victim for dead.
  asio::steady_timer tick(*f.executor());
  bool woke = false;
  const auto arm = [&](auto& self) -> void {
    tick.expires_after(std::chrono::milliseconds(1));
    tick.async_wait([&, self](std::error_code ec) {
      woke = true;
      if (!ec && alive(victim) && std::chrono::steady_clock::now() < until) self(self);
    });
  };
  arm(arm);
  auto heard = [&] { return !alive(victim) || std::chrono::steady_clock::now() >= until; };
  f.run_until(heard);
  tick.cancel();
  auto ended = [&] { return woke; };
  f.run_until(ended);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (alive(victim)) {
    std::printf("rank %d: no word of rank %d's death within %ld ms\n", world.rank(), victim, wait_ms);
    std::fflush(stdout);
    std::exit(1);
  }
  std::printf("rank %d: rank %d taken for dead after %.1f ms\n", world.rank(), victim, ms);
  std::fflush(stdout);
  // Not leave(): the goodbye is a PMIx fence the dead rank never reaches. exit() runs
  // PMIx_Finalize (atexit), so the launcher takes this rank's end for a clean one.
  std::exit(0);
}
