// A key-value store the ranks of a job meet in, provided by the program: a service that
// already runs a coordination store (a database, etcd, Redis, its own) bootstraps optcast
// through it instead of optcast's TCP store (net/bootstrap/store.hpp), by setting
// job_config::kv. The ranks publish where they listen, learn where the others do, report
// the job's first failure and say goodbye through it.
//
// What optcast asks of an implementation: every call may come from any thread, several
// at once; get waits (up to its timeout) for a key another rank sets; add is atomic
// across the job's ranks. Keys are short printable strings (optcast's begin with
// "optcast/"), values are byte strings up to a few hundred bytes.
//
// One job per store (or per key prefix the implementation adds): a store that another
// job used is refused (the ranks count themselves in with add). What the store holds is
// trusted as the job's own: it is the service's, behind the service's own access control;
// the data connections still prove the job secret (job_config::secret) if there is one.
//
// Without optcast's store, a rank that dies is found by its data connections (TCP: the
// connection closes; libfabric: the provider's error, then a grace period), and a rank
// stopped without dying by an inquiry through keys of this store near a collective's
// deadline, which every live rank's thread answers (it looks every 50 ms).
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "optcast/error.hpp"

namespace optcast {

class kv_store {
public:
  virtual ~kv_store() = default;
  // Sets `key` to `value`, replacing what was there.
  virtual result<void> set(const std::string& key, const std::string& value) = 0;
  // The value of `key` once it is set, waiting up to `timeout` (then errc::timeout; a
  // zero timeout looks once).
  virtual result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Adds `delta` to the integer at `key` (absent: 0), atomically; the sum.
  virtual result<std::int64_t> add(const std::string& key, std::int64_t delta) = 0;
  // Waits until every key is set, up to `timeout` (then errc::timeout).
  virtual result<void> wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  // The last failure in the store's own words ("cannot reach Redis at h:6379: Connection
  // refused"), for optcast's error messages; empty: the error code says all.
  virtual std::string last_error() const { return {}; }
};

// A store in this process's memory, for ranks that are threads of one process (each with
// its own fabric), and as the model of what an implementation does.
class memory_kv_store final : public kv_store {
public:
  result<void> set(const std::string& key, const std::string& value) override;
  result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  result<std::int64_t> add(const std::string& key, std::int64_t delta) override;
  result<void> wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string, std::less<>> kv_;
};

// For an implementation whose store cannot tell anyone when a key arrives (a directory,
// Redis without subscriptions, a client that blocks): get and wait look again, often at
// first and then less. Polls `ready` (a result<bool>: false while what it waits for is
// missing) until it holds, it fails (its error), or `timeout` passes (errc::timeout; a
// zero timeout looks once): 1 ms at first, backing off to 20 ms.
template <class Ready>
result<void> poll_until(Ready ready, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    auto r = ready();
    if (!r) return fail(r.error());
    if (*r) return {};
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return fail(errc::timeout);
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, until - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace optcast
