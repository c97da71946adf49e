#include "optcast/launch.hpp"

#include <arpa/inet.h>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <netinet/in.h>
#include <random>
#include <string>
#include <sys/socket.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "../../net/auth/auth.hpp"
#include "../../net/bootstrap/store.hpp"
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

std::vector<int> spawn(int np, const std::vector<std::string>& args, launcher_store* apart) {
  auto refuse = [](const std::string& why) -> std::vector<int> { throw setup_error(make_error_code(errc::invalid_argument), why); };
  std::vector<char*> child_args;
  for (const auto& a : args) child_args.push_back(const_cast<char*>(a.c_str()));
  child_args.push_back(nullptr);
  // The store's socket is bound here and handed to rank 0 (inherited: not close-on-exec),
  // or served here.
  auto [lfd, port] = listen_loopback_store();
  const std::string store = "127.0.0.1:" + std::to_string(port);
  std::random_device rd;
  const std::uint64_t job_id = (std::uint64_t{rd()} << 32 | rd()) | 1;
  const std::string job = std::to_string(job_id);
  // The ranks authenticate each other with a secret only they (and this user) can read;
  // one the user gave (OPTCAST_SECRET or OPTCAST_SECRET_FILE) is passed on instead.
  std::string secret;
  if (!std::getenv("OPTCAST_SECRET") && !std::getenv("OPTCAST_SECRET_FILE")) secret = auth::fresh_secret();
  // A store served here takes the user's settings as the ranks do (secret, encryption);
  // read before forking, so that a bad one fails here, not in every rank.
  job_config store_cfg;
  if (apart) store_cfg.read_rank_env([](const char* n) { return std::getenv(n); });

  std::vector<int> pids;
  for (int r = 0; r < np; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      for (pid_t p : pids) ::kill(p, SIGTERM);
      ::close(lfd);
      return refuse(std::string("fork: ") + std::strerror(errno));
    }
    if (pid == 0) {
      ::setenv("OPTCAST_RANK", std::to_string(r).c_str(), 1);
      ::setenv("OPTCAST_SIZE", std::to_string(np).c_str(), 1);
      ::setenv("OPTCAST_STORE", store.c_str(), 1);
      ::setenv("OPTCAST_JOB_ID", job.c_str(), 1);
      if (!secret.empty()) ::setenv("OPTCAST_SECRET", secret.c_str(), 1);
      if (apart) {
        ::setenv("OPTCAST_STORE_EXTERNAL", "1", 1);
        ::close(lfd);
      } else if (r == 0) {
        ::setenv("OPTCAST_STORE_FD", std::to_string(lfd).c_str(), 1);
      } else {
        ::close(lfd);
      }
      ::execv("/proc/self/exe", child_args.data());
      std::fprintf(stderr, "optcast launcher: cannot start %s: %s\n", child_args[0], std::strerror(errno));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  if (!apart) {
    ::close(lfd);
    return pids;
  }
  // Served once every rank is forked (a child of a process with threads could inherit a
  // held lock); the ranks' connections wait in the socket's backlog meanwhile.
  try {
    apart->impl_->server =
        std::make_unique<store::server>(lfd, np, job_id, secret.empty() ? store_cfg.secret : secret, store_cfg.encrypt);
  } catch (...) {
    for (pid_t p : pids) ::kill(p, SIGTERM);
    throw;
  }
  apart->impl_->server->expect_all_within(store_cfg.bootstrap_timeout);
  return pids;
}

}  // namespace

std::vector<int> spawn_local_ranks(int np, const std::vector<std::string>& args) { return spawn(np, args, nullptr); }

std::vector<int> spawn_local_ranks(int np, const std::vector<std::string>& args, launcher_store& store) {
  return spawn(np, args, &store);
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
