#include "pmix.hpp"

#include <pmix.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "optcast/log.hpp"

namespace optcast::pmix {

namespace {

std::mutex mu;
bool ready = false;
pmix_proc_t me;

std::string says(pmix_status_t rc) { return std::string(PMIx_Error_string(rc)); }

// Deaths, from PMIx's event notification (on_death).
std::mutex death_mu;
std::function<void(int, std::string)> death_to;
bool death_registered = false;

void death_event(size_t, pmix_status_t status, const pmix_proc_t* source, pmix_info_t info[], size_t ninfo, pmix_info_t*, size_t,
                 pmix_event_notification_cbfunc_fn_t done, void* done_data) {
  const pmix_proc_t* who = source;
  int exit_code = 0;
  bool has_exit = false;
  for (size_t i = 0; i < ninfo; ++i) {
    if (PMIX_CHECK_KEY(&info[i], PMIX_EVENT_AFFECTED_PROC) && info[i].value.type == PMIX_PROC) who = info[i].value.data.proc;
    if (PMIX_CHECK_KEY(&info[i], PMIX_EXIT_CODE) && info[i].value.type == PMIX_INT) {
      exit_code = info[i].value.data.integer;
      has_exit = true;
    }
  }
  // One of this job's ranks, not this one; a rank's rank, not a wildcard.
  if (who && PMIX_CHECK_NSPACE(who->nspace, me.nspace) && who->rank != me.rank && who->rank < PMIX_RANK_VALID) {
    std::function<void(int, std::string)> f;
    {
      std::lock_guard l(death_mu);
      f = death_to;
    }
    const int r = static_cast<int>(who->rank);
    if (f)
      f(r, "rank " + std::to_string(r) + " ended abnormally, says the launcher's PMIx server (" + says(status) +
               (has_exit ? ", exit code " + std::to_string(exit_code) : std::string()) + ")");
  }
  if (done) done(PMIX_EVENT_ACTION_COMPLETE, nullptr, 0, nullptr, nullptr, done_data);
}

}  // namespace

bool available() noexcept { return true; }

place init() {
  std::lock_guard l(mu);
  if (!ready) {
    const pmix_status_t rc = PMIx_Init(&me, nullptr, 0);
    if (rc != PMIX_SUCCESS)
      throw setup_error(make_error_code(errc::invalid_argument),
                        "started by a PMIx launcher (PMIX_RANK is set), but its PMIx server cannot be reached: " + says(rc));
    ready = true;
    // Once, as the process ends: a launcher takes a client that never finalizes for one
    // that crashed.
    std::atexit([] { PMIx_Finalize(nullptr, 0); });
  }
  place p;
  p.rank = static_cast<int>(me.rank);
  p.nspace = me.nspace;
  pmix_proc_t job;
  PMIX_PROC_CONSTRUCT(&job);
  PMIX_LOAD_PROCID(&job, me.nspace, PMIX_RANK_WILDCARD);
  pmix_value_t* v = nullptr;
  const pmix_status_t rc = PMIx_Get(&job, PMIX_JOB_SIZE, nullptr, 0, &v);
  if (rc != PMIX_SUCCESS || !v || v->type != PMIX_UINT32) {
    if (v) PMIX_VALUE_RELEASE(v);
    throw setup_error(make_error_code(errc::invalid_argument), "the PMIx server does not say the job's size: " + says(rc));
  }
  p.size = static_cast<int>(v->data.uint32);
  PMIX_VALUE_RELEASE(v);
  return p;
}

result<void> publish(const std::string& key, const std::string& value, std::chrono::milliseconds timeout, std::string* why) {
  pmix_value_t v;
  PMIX_VALUE_CONSTRUCT(&v);
  v.type = PMIX_BYTE_OBJECT;
  v.data.bo.bytes = const_cast<char*>(value.data());  // PMIx copies it; the cast is its C API's
  v.data.bo.size = value.size();
  pmix_status_t rc = PMIx_Put(PMIX_GLOBAL, key.c_str(), &v);
  if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
  if (rc != PMIX_SUCCESS) {
    if (why) *why = "PMIx would not take '" + key + "': " + says(rc);
    return fail(errc::protocol_violation);
  }
  pmix_info_t info[2];
  PMIX_INFO_CONSTRUCT(&info[0]);
  PMIX_INFO_CONSTRUCT(&info[1]);
  bool collect = true;
  int seconds = static_cast<int>(std::max<long long>(1, (timeout.count() + 999) / 1000));
  PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
  PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
  pmix_proc_t all;
  PMIX_PROC_CONSTRUCT(&all);
  PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
  rc = PMIx_Fence(&all, 1, info, 2);
  PMIX_INFO_DESTRUCT(&info[0]);
  PMIX_INFO_DESTRUCT(&info[1]);
  if (rc != PMIX_SUCCESS) {
    if (why) *why = "not every rank reached the PMIx fence within " + std::to_string(seconds) + " s: " + says(rc);
    return fail(rc == PMIX_ERR_TIMEOUT ? make_error_code(errc::timeout) : make_error_code(errc::peer_lost));
  }
  return {};
}

result<std::string> get(const std::string& key, std::string* why) {
  pmix_proc_t any;
  PMIX_PROC_CONSTRUCT(&any);
  PMIX_LOAD_PROCID(&any, me.nspace, PMIX_RANK_UNDEF);
  pmix_value_t* v = nullptr;
  const pmix_status_t rc = PMIx_Get(&any, key.c_str(), nullptr, 0, &v);
  if (rc != PMIX_SUCCESS || !v) {
    if (why) *why = "PMIx does not know '" + key + "': " + says(rc);
    return fail(errc::peer_lost);
  }
  std::string out;
  if (v->type == PMIX_BYTE_OBJECT) out.assign(v->data.bo.bytes, v->data.bo.size);
  else if (v->type == PMIX_STRING && v->data.string) out = v->data.string;
  PMIX_VALUE_RELEASE(v);
  return out;
}

void on_death(std::function<void(int, std::string)> died) {
  {
    std::lock_guard l(death_mu);
    death_to = std::move(died);
    if (death_registered || !death_to) return;
    death_registered = true;
  }
  // Once per process: a rank that ended abnormally, in each of PMIx's words for it.
  pmix_status_t codes[] = {PMIX_ERR_PROC_ABORTED, PMIX_ERR_PROC_ABORTING, PMIX_ERR_PROC_ABORTED_BY_SIG, PMIX_ERR_PROC_TERM_WO_SYNC};
  pmix_info_t name;
  PMIX_INFO_CONSTRUCT(&name);
  PMIX_INFO_LOAD(&name, PMIX_EVENT_HDLR_NAME, "optcast: a rank's death", PMIX_STRING);
  // Without a callback the registration completes before it returns (its id, or an error).
  const pmix_status_t rc = PMIx_Register_event_handler(codes, sizeof codes / sizeof codes[0], &name, 1, death_event, nullptr, nullptr);
  PMIX_INFO_DESTRUCT(&name);
  if (rc < 0) log(log_level::info, "PMIx: no event handler for ranks' deaths (" + says(rc) + "): they are found by the data connections");
}

}  // namespace optcast::pmix
