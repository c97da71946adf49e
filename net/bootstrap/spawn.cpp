#include "spawn.hpp"

#include "optcast/launch.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <random>
#include <string>
#include <string_view>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "../auth/auth.hpp"
#include "store.hpp"
#include "optcast/net/job.hpp"
#include "optcast/error.hpp"

namespace optcast {

namespace {

volatile std::sig_atomic_t interrupted = 0;
void on_signal(int sig) { interrupted = sig; }

int fail(const std::string& msg) {
  std::fprintf(stderr, "optcast launcher: %s\n", msg.c_str());
  return 2;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

loopback_store listen_loopback_store() {
  auto refuse = [](const std::string& why) -> loopback_store { throw setup_error(make_error_code(errc::invalid_argument), why); };
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (lfd < 0) return refuse(std::string("socket: ") + std::strerror(errno));
  const int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) || ::listen(lfd, 4096) ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&sa), &len)) {
    ::close(lfd);
    return refuse(std::string("cannot listen on loopback: ") + std::strerror(errno));
  }
  return {lfd, ntohs(sa.sin_port)};
}

struct launcher_store::impl {
  std::unique_ptr<store::server> server;
};

launcher_store::launcher_store() : impl_(std::make_unique<impl>()) {}
launcher_store::~launcher_store() = default;

bool launcher_store::wait_all_done(std::chrono::milliseconds timeout) { return !impl_->server || impl_->server->wait_all_done(timeout); }

bool launcher_store::failed() const { return impl_->server && impl_->server->failed(); }

namespace {

// The environment of rank `rank` of `job`: this process's, with the job's settings over
// it. Made before fork: a child of a process with threads (a launcher_store's) may only
// exec, since another thread may have held the allocator's lock at the fork.
std::vector<std::string> rank_env(const local_job& job, int rank, int np, std::vector<std::string> more = {}) {
  std::vector<std::string> mine{"OPTCAST_RANK=" + std::to_string(rank), "OPTCAST_SIZE=" + std::to_string(np), "OPTCAST_STORE=" + job.store,
                                "OPTCAST_JOB_ID=" + std::to_string(job.id)};
  if (!job.secret.empty()) mine.push_back("OPTCAST_SECRET=" + job.secret);
  if (job.store_apart) mine.push_back("OPTCAST_STORE_EXTERNAL=1");
  mine.insert(mine.end(), more.begin(), more.end());
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string_view v(*e);
    const auto named = [&](const std::string& m) { return v.substr(0, v.find('=') + 1) == std::string_view(m).substr(0, m.find('=') + 1); };
    if (std::none_of(mine.begin(), mine.end(), named)) env.emplace_back(v);
  }
  env.insert(env.end(), mine.begin(), mine.end());
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& v) {
  std::vector<char*> p;
  for (auto& s : v) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

// Forks and runs this program with `args` and `env`; the child closes `close_fd` (if not -1) first.
pid_t start(std::vector<std::string> args, std::vector<std::string> env, int close_fd) {
  auto argv = pointers(args), envp = pointers(env);
  const std::string name = args.empty() ? "?" : args[0];
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  if (close_fd >= 0) ::close(close_fd);
  ::execve("/proc/self/exe", argv.data(), envp.data());
  // After a failed exec only what is safe in a child: write(2) and _exit.
  const char msg[] = "optcast launcher: cannot start the program (execve of /proc/self/exe failed)\n";
  [[maybe_unused]] auto w = ::write(2, msg, sizeof msg - 1);
  ::_exit(127);
}

[[noreturn]] void refuse(const std::string& why) { throw setup_error(make_error_code(errc::invalid_argument), why); }

}  // namespace

local_job spawn_local_job(int np, const std::vector<std::string>& args, launcher_store* apart) {
  // The store's socket is bound here and handed to rank 0 (inherited: not close-on-exec),
  // or served here.
  auto [lfd, port] = listen_loopback_store();
  local_job job;
  job.store = "127.0.0.1:" + std::to_string(port);
  std::random_device rd;
  job.id = (std::uint64_t{rd()} << 32 | rd()) | 1;
  job.store_apart = apart != nullptr;
  // The ranks authenticate each other with a secret only they (and this user) can read;
  // one the user gave (OPTCAST_SECRET or OPTCAST_SECRET_FILE) is passed on instead.
  if (!std::getenv("OPTCAST_SECRET") && !std::getenv("OPTCAST_SECRET_FILE")) job.secret = auth::fresh_secret();
  // A store served here takes the user's settings as the ranks do (secret, encryption);
  // read before forking, so that a bad one fails here, not in every rank.
  job_config store_cfg;
  if (apart) store_cfg.read_rank_env([](const char* n) { return std::getenv(n); });

  for (int r = 0; r < np; ++r) {
    const bool hosts = !apart && r == 0;
    const pid_t pid = start(args, rank_env(job, r, np, hosts ? std::vector<std::string>{"OPTCAST_STORE_FD=" + std::to_string(lfd)}
                                                              : std::vector<std::string>{}),
                            hosts ? -1 : lfd);
    if (pid < 0) {
      const int e = errno;
      for (pid_t p : job.pids) ::kill(p, SIGTERM);
      ::close(lfd);
      refuse(std::string("fork: ") + std::strerror(e));
    }
    job.pids.push_back(pid);
  }
  if (!apart) {
    ::close(lfd);
    return job;
  }
  // Served once every rank is forked (a child of a process with threads could inherit a
  // held lock); the ranks' connections wait in the socket's backlog meanwhile.
  try {
    apart->impl_->server =
        std::make_unique<store::server>(lfd, np, job.id, job.secret.empty() ? store_cfg.secret : job.secret, store_cfg.encrypt);
  } catch (...) {
    for (pid_t p : job.pids) ::kill(p, SIGTERM);
    throw;
  }
  apart->impl_->server->expect_all_within(store_cfg.bootstrap_timeout);
  return job;
}

int spawn_replacement(const local_job& job, int rank, const std::vector<std::string>& args) {
  const int np = static_cast<int>(job.pids.size());
  if (rank < 0 || rank >= np) refuse("a replacement for rank " + std::to_string(rank) + " of a job of " + std::to_string(np) + " ranks");
  if (rank == 0 && !job.store_apart) refuse("no replacement for rank 0: the store it hosted died with it (serve the store apart)");
  const pid_t pid = start(args, rank_env(job, rank, np, {"OPTCAST_REJOIN=1"}), -1);
  if (pid < 0) refuse(std::string("fork: ") + std::strerror(errno));
  return pid;
}

std::vector<int> spawn_local_ranks(int np, const std::vector<std::string>& args) { return spawn_local_job(np, args).pids; }

std::vector<int> spawn_local_ranks(int np, const std::vector<std::string>& args, launcher_store& store) {
  return spawn_local_job(np, args, &store).pids;
}

std::optional<int> launch_local(int argc, char** argv) {
  std::vector<char*> child_args{argv[0]};
  std::string np_text;
  bool has_np = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--np") {
      if (i + 1 >= argc) return fail("--np needs a number of ranks");
      np_text = argv[++i];
      has_np = true;
    } else if (a.rfind("--np=", 0) == 0) {
      np_text = a.substr(5);
      has_np = true;
    } else {
      child_args.push_back(argv[i]);
    }
  }
  if (!has_np) return std::nullopt;
  if (std::getenv("OPTCAST_RANK"))
    return fail("--np given to a process that is already a rank (OPTCAST_RANK is set)");
  char* end = nullptr;
  const long np = std::strtol(np_text.c_str(), &end, 10);
  if (np_text.empty() || *end || np < 1 || np > 4096)
    return fail("--np '" + np_text + "': need a number of ranks from 1 to 4096");

  std::vector<std::string> args;
  for (char* a : child_args)
    if (a) args.emplace_back(a);
  struct sigaction act{};
  act.sa_handler = on_signal;
  sigaction(SIGINT, &act, nullptr);
  sigaction(SIGTERM, &act, nullptr);
  std::vector<pid_t> pids;
  try {
    pids = spawn_local_ranks(static_cast<int>(np), args);
  } catch (const std::exception& e) {
    return fail(e.what());
  }

  const char* g = std::getenv("OPTCAST_LAUNCH_GRACE");
  const auto grace = std::chrono::seconds(g ? std::max(0L, std::strtol(g, nullptr, 10)) : 30);
  int status_out = 0, running = static_cast<int>(np);
  std::optional<std::chrono::steady_clock::time_point> stop_at;
  bool terminated = false, killed = false;
  while (running > 0) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      --running;
      long r = 0;
      while (r < np && pids[static_cast<std::size_t>(r)] != pid) ++r;
      pids[static_cast<std::size_t>(r)] = -1;
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      if (!ok) {
        std::fprintf(stderr, "optcast launcher: rank %ld (pid %d) %s\n", r, pid, describe_status(st).c_str());
        if (!status_out) status_out = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (!stop_at) stop_at = std::chrono::steady_clock::now() + grace;
      }
      continue;
    }
    if (pid < 0 && errno != EINTR) break;
    const auto now = std::chrono::steady_clock::now();
    if (interrupted && !stop_at) {
      std::fprintf(stderr, "optcast launcher: signal %d, stopping the ranks\n", static_cast<int>(interrupted));
      stop_at = now;
      if (!status_out) status_out = 128 + interrupted;
    }
    if (stop_at && now >= *stop_at && !terminated) {
      terminated = true;
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGTERM);
    }
    if (stop_at && now >= *stop_at + std::chrono::seconds(5) && !killed) {
      killed = true;
      for (pid_t p : pids)
        if (p > 0) ::kill(p, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_out;
}

}  // namespace optcast
