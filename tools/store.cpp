// optcast store: optcast's TCP store run on its own, apart from the ranks, so that any
// rank (rank 0 too) may die and the others go on (optcast/survive.hpp). The ranks set
// OPTCAST_STORE=HOST:PORT and OPTCAST_STORE_EXTERNAL=1 (and the same secret).
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "../net/bootstrap/rendezvous.hpp"
#include "../net/bootstrap/store.hpp"
#include "optcast/net/job.hpp"
#include "tools.hpp"

namespace optcast::tools {

namespace {
volatile std::sig_atomic_t stop_signal = 0;
void on_stop(int sig) { stop_signal = sig; }
}  // namespace

int cmd_store(int argc, char** argv) {
  CLI::App app{"Serves optcast's TCP store for one job of N ranks, apart from them: the ranks meet here, and any of them, rank 0\n"
               "too, may die while the others go on. Give the ranks OPTCAST_STORE=HOST:PORT, OPTCAST_STORE_EXTERNAL=1 and the\n"
               "job's secret (OPTCAST_SECRET or OPTCAST_SECRET_FILE, read here from the same variables; OPTCAST_ENCRYPT=1 seals\n"
               "the store's messages). Exits when every rank has left: 0 if the job ended well, 1 if a rank failed or died\n"
               "(and was not excused by the survivors' shrink), 2 on a usage error, 3 if the store cannot serve.",
               "optcast store"};
  int np = 0, join_s = 60;
  std::string host = "0.0.0.0";
  int port = 29500;
  std::uint64_t job_id = 0;
  app.add_option("--np", np, "the job's number of ranks")->required()->check(CLI::Range(1, 1 << 20));
  app.add_option("--host", host, "address to listen on (default: every IPv4 address)");
  app.add_option("--port", port, "port to listen on (0: any free one, printed)")->check(CLI::Range(0, 65535));
  app.add_option("--job-id", job_id, "the job id to hand out (default: drawn here; the ranks take it from the store)")
      ->check(CLI::Range(std::uint64_t{1}, ~std::uint64_t{0}));
  app.add_option("--join-within", join_s, "seconds for every rank to join before the job fails, naming the missing")
      ->check(CLI::Range(1, 86400));
  try {
    app.parse(argc - 1, argv + 1);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  job_config cfg;
  try {
    cfg.read_rank_env([](const char* n) { return std::getenv(n); });
  } catch (const setup_error& e) {
    std::fprintf(stderr, "optcast store: %s\n", e.what());
    return 2;
  }
  if (!job_id) job_id = draw_job_id();
  std::unique_ptr<store::server> server;
  try {
    server = std::make_unique<store::server>(host, static_cast<std::uint16_t>(port), np, job_id, cfg.secret, cfg.encrypt);
  } catch (const setup_error& e) {
    std::fprintf(stderr, "optcast store: %s\n", e.what());
    return 3;
  }
  server->expect_all_within(std::chrono::seconds(join_s));
  const store::address at{host, server->port()};
  std::printf("optcast store: serving a job of %d ranks at %s (job id %llu%s%s)\n", np, at.str().c_str(),
              static_cast<unsigned long long>(job_id), cfg.secret.empty() ? ", no secret: anyone who reaches it may join" : "",
              cfg.encrypt ? ", sealed" : "");
  std::printf("ranks: OPTCAST_STORE=%s OPTCAST_STORE_EXTERNAL=1\n", (host == "0.0.0.0" || host == "::" ? "<this host>:" + std::to_string(at.port) : at.str()).c_str());
  std::fflush(stdout);
  struct sigaction act{};
  act.sa_handler = on_stop;
  sigaction(SIGINT, &act, nullptr);
  sigaction(SIGTERM, &act, nullptr);
  while (!server->wait_over(std::chrono::milliseconds(200)))
    if (stop_signal) {
      std::fprintf(stderr, "optcast store: stopped by signal %d before every rank had left\n", static_cast<int>(stop_signal));
      return 128 + stop_signal;
    }
  const bool failed = server->failed();
  std::printf("optcast store: every rank has left; the job %s\n", failed ? "failed" : "ended well");
  return failed ? 1 : 0;
}

}  // namespace optcast::tools
