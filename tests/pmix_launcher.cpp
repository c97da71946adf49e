// A PMIx launcher of one host, for the tests: the PMIx server of a job of NP copies of a
// program, as PRRTE's daemon is for its node. It gives each rank its PMIx environment
// (PMIx_server_setup_fork), completes their fences (one host: what the server library
// collected is everyone's), and when a rank ends without finalizing while others still
// run, tells them through PMIx's event notification (PMIX_ERR_PROC_TERM_WO_SYNC, the
// rank as PMIX_EVENT_AFFECTED_PROC), as PRRTE documents with --enable-recovery. Debian 12's
// mpirun and srun send no such event, so this is how the ranks' handling of one is run.
//
//   pmix_launcher NP PROGRAM [ARGS...]
//
// Exits 0 when every rank exited 0 or was killed by SIGKILL (the tests' victims), else 1.
#include <pmix.h>
#include <pmix_server.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

const char* const nspace = "optcast-test-job";
std::mutex mu;
std::vector<bool> finalized;

pmix_status_t connected(const pmix_proc_t*, void*, pmix_op_cbfunc_t, void*) { return PMIX_OPERATION_SUCCEEDED; }

pmix_status_t finalized_cb(const pmix_proc_t* p, void*, pmix_op_cbfunc_t, void*) {
  std::lock_guard l(mu);
  if (p->rank < finalized.size()) finalized[p->rank] = true;
  return PMIX_OPERATION_SUCCEEDED;
}

pmix_status_t aborted(const pmix_proc_t* p, void*, int status, const char msg[], pmix_proc_t*, size_t, pmix_op_cbfunc_t, void*) {
  std::fprintf(stderr, "pmix_launcher: rank %u called PMIx_Abort (%d): %s\n", p->rank, status, msg ? msg : "");
  return PMIX_OPERATION_SUCCEEDED;
}

// The ranks' event handlers: the server library keeps them; nothing to do here.
pmix_status_t events(pmix_status_t*, size_t, const pmix_info_t[], size_t, pmix_op_cbfunc_t, void*) { return PMIX_OPERATION_SUCCEEDED; }

// One host: the server library has collected every local rank's contribution, which is
// every rank's; it goes back to all of them.
pmix_status_t fence(const pmix_proc_t[], size_t, const pmix_info_t[], size_t, char* data, size_t ndata, pmix_modex_cbfunc_t done, void* cbdata) {
  if (done) done(PMIX_SUCCESS, data, ndata, cbdata, nullptr, nullptr);
  return PMIX_SUCCESS;
}

void check(pmix_status_t rc, const char* what) {
  if (rc == PMIX_SUCCESS || rc == PMIX_OPERATION_SUCCEEDED) return;
  std::fprintf(stderr, "pmix_launcher: %s: %s\n", what, PMIx_Error_string(rc));
  std::exit(2);
}

template <class T>
void load(std::vector<pmix_info_t>& v, const char* key, const T* value, pmix_data_type_t type) {
  v.emplace_back();
  PMIX_INFO_CONSTRUCT(&v.back());
  PMIX_INFO_LOAD(&v.back(), key, value, type);
}

}  // namespace

// LeakSanitizer skips this process (the ranks, programs of their own, are checked): what
// libpmix's server keeps at exit is its plugins' (strings allocated in modules it has
// unloaded by then), not this harness's.
extern "C" int __lsan_is_turned_off();
extern "C" int __lsan_is_turned_off() { return 1; }

int main(int argc, char** argv) {
  if (argc < 3 || std::string(argv[1]) == "--help") {
    std::fprintf(argc < 3 ? stderr : stdout, "usage: pmix_launcher NP PROGRAM [ARGS...]: NP ranks of PROGRAM under a PMIx server that tells them of a rank's death\n");
    return argc < 3 ? 2 : 0;
  }
  const int np = std::atoi(argv[1]);
  if (np < 1 || np > 64) {
    std::fprintf(stderr, "pmix_launcher: NP '%s' is not in [1, 64]\n", argv[1]);
    return 2;
  }
  finalized.assign(static_cast<std::size_t>(np), false);
  // PMIx's hash store, for the server and (inherited) its ranks: with the shared-memory
  // one (gds/ds21) the ranks' PMIx_Get of what the others published failed NOT-FOUND
  // under this server's few job-level keys.
  ::setenv("PMIX_MCA_gds", "hash", 1);
  char tmp[] = "/tmp/pmix-launcher-XXXXXX";  // mkdtemp replaces the Xs
  if (!::mkdtemp(tmp)) {
    std::perror("pmix_launcher: mkdtemp");
    return 2;
  }
  pmix_server_module_t module{};
  module.client_connected = connected;
  module.client_finalized = finalized_cb;
  module.abort = aborted;
  module.fence_nb = fence;
  module.register_events = events;
  std::vector<pmix_info_t> sinfo;
  load(sinfo, PMIX_SERVER_TMPDIR, tmp, PMIX_STRING);
  check(PMIx_server_init(&module, sinfo.data(), sinfo.size()), "PMIx_server_init");

  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  char* node_map = nullptr;
  char* proc_map = nullptr;
  std::string peers;
  for (int r = 0; r < np; ++r) peers += (r ? "," : "") + std::to_string(r);
  check(PMIx_generate_regex(host, &node_map), "PMIx_generate_regex");
  check(PMIx_generate_ppn(peers.c_str(), &proc_map), "PMIx_generate_ppn");
  const auto size = static_cast<std::uint32_t>(np);
  std::vector<pmix_info_t> job;
  load(job, PMIX_UNIV_SIZE, &size, PMIX_UINT32);
  load(job, PMIX_JOB_SIZE, &size, PMIX_UINT32);
  load(job, PMIX_LOCAL_SIZE, &size, PMIX_UINT32);
  load(job, PMIX_LOCAL_PEERS, peers.c_str(), PMIX_STRING);
  load(job, PMIX_NODE_MAP, node_map, PMIX_REGEX);
  load(job, PMIX_PROC_MAP, proc_map, PMIX_REGEX);
  check(PMIx_server_register_nspace(nspace, np, job.data(), job.size(), nullptr, nullptr), "PMIx_server_register_nspace");
  for (auto& i : job) PMIX_INFO_DESTRUCT(&i);
  std::free(node_map);
  std::free(proc_map);

  std::vector<pid_t> pids(static_cast<std::size_t>(np), -1);
  for (int r = 0; r < np; ++r) {
    pmix_proc_t proc;
    PMIX_LOAD_PROCID(&proc, nspace, static_cast<pmix_rank_t>(r));
    check(PMIx_server_register_client(&proc, ::getuid(), ::getgid(), nullptr, nullptr, nullptr), "PMIx_server_register_client");
    char** env = nullptr;
    for (char** e = environ; *e; ++e) pmix_argv_append_nosize(&env, *e);
    check(PMIx_server_setup_fork(&proc, &env), "PMIx_server_setup_fork");
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execve(argv[2], argv + 2, env);
      std::fprintf(stderr, "pmix_launcher: cannot run %s: %s\n", argv[2], std::strerror(errno));
      ::_exit(127);
    }
    pids[static_cast<std::size_t>(r)] = pid;
  }

  int running = np, bad = 0;
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0 && errno == EINTR) continue;
    if (pid < 0) break;
    int r = 0;
    while (r < np && pids[static_cast<std::size_t>(r)] != pid) ++r;
    if (r == np) continue;
    --running;
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (!killed && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) ++bad;
    bool clean = false;
    {
      std::lock_guard l(mu);
      clean = finalized[static_cast<std::size_t>(r)];
    }
    if (clean || running == 0) continue;
    // Ended without finalizing, the others still running: they hear of it.
    pmix_proc_t dead;
    PMIX_LOAD_PROCID(&dead, nspace, static_cast<pmix_rank_t>(r));
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::vector<pmix_info_t> info;
    load(info, PMIX_EVENT_AFFECTED_PROC, &dead, PMIX_PROC);
    load(info, PMIX_EXIT_CODE, &code, PMIX_INT);
    std::fprintf(stderr, "pmix_launcher: rank %d ended without finalizing (%d); telling the others\n", r, code);
    // From this server (no source): a source of the job's namespace with the wildcard rank
    // would count every rank as the event's source, and the library sends none of them it.
    const pmix_status_t rc = PMIx_Notify_event(PMIX_ERR_PROC_TERM_WO_SYNC, nullptr, PMIX_RANGE_LOCAL, info.data(), info.size(), nullptr, nullptr);
    if (rc != PMIX_SUCCESS && rc != PMIX_OPERATION_SUCCEEDED) std::fprintf(stderr, "pmix_launcher: PMIx_Notify_event: %s\n", PMIx_Error_string(rc));
  }
  PMIx_server_finalize();
  std::string rm = std::string("rm -rf '") + tmp + "'";
  (void)std::system(rm.c_str());
  return bad ? 1 : 0;
}
