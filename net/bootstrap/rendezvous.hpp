// How a rank meets the others and learns the job's fate: one interface, three backends,
// chosen once from job_config by class job_session (net/bootstrap/job_session.hpp):
//   store_rendezvous  optcast's TCP store (store.hpp): rank 0 hosts it; every rank keeps
//                     a connection to it, which reports dead and failed ranks at once
//                     and finds the root of a stall
//   kv_rendezvous     a store of the program's own (optcast/net/kv_store.hpp: file://,
//                     redis://, torch's): keys only; a worker thread polls for the job's
//                     first failure and for stall inquiries, which it answers
//   pmix_rendezvous   the PMIx server of the launcher (mpirun, srun --mpi=pmix): fences
//                     collect what the ranks publish, and one more their goodbyes
// Each says in its own file what it cannot do.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optcast/error.hpp"
#include "optcast/net/job.hpp"

namespace asio {
class any_io_executor;
}

namespace optcast {

// The newest collective a rank finished, which its goodbye names to the store.
struct last_call {
  std::uint32_t seq = 0;
  std::string signature;  // call_signature's wire bytes; empty: none
};

class rendezvous {
public:
  virtual ~rendezvous() = default;
  // The job's id: the launcher's or the configuration's, else the one rank 0 drew.
  virtual std::uint64_t id() const noexcept = 0;
  // This host's address toward the store, the one to advertise when nothing says
  // otherwise; empty: there is no connection to go by.
  virtual std::string toward_store() const { return {}; }
  // Why the job failed, where the rendezvous was told before the fabric listens (a rank
  // that did not join, sizes that differ); empty if it was not.
  virtual std::string job_failure() const { return {}; }
  // class job_session's methods of the same names say what these do.
  virtual result<void> publish(std::string key, std::string value, std::chrono::milliseconds timeout) = 0;
  virtual result<std::vector<std::string>> lookup_all(std::vector<std::string> keys, std::chrono::milliseconds timeout) = 0;
  virtual void lookup(std::string key, std::function<void(result<std::string>)> done) = 0;
  virtual void on_failure(std::function<void(int rank)> lost, std::function<void(std::string why)> gone,
                          std::function<void(std::uint64_t code, int rank, std::string why)> failed) = 0;
  virtual void report_failure(int code, std::string why) = 0;
  // The survivors went on without `ranks` (optcast::shrink): their loss no longer fails
  // the job. optcast's TCP store and the kv stores keep count; PMIx's outcome still
  // counts them.
  virtual void excuse(const std::vector<int>& ranks) { (void)ranks; }
  // Replacements (optcast::grow), on optcast's TCP store only: `rejoined(rank)` when one
  // is ready, set before on_failure; a replacement says it is ready (rejoin) and, taken
  // in, that it is a member again (admitted).
  virtual void on_rejoined(std::function<void(int rank)> rejoined) { (void)rejoined; }
  virtual void rejoin() {}
  virtual void admitted() {}
  virtual void report_stall(std::uint32_t seq, std::string why, std::function<void()> nobody_stuck) = 0;
  virtual void answer_inquiries(std::function<std::string(std::uint32_t seq)>) {}
  // Once; never throws: a failure is its error, and `detail` says which rank and why.
  virtual result<void> leave(std::chrono::milliseconds wait, bool failed, last_call last, std::string& detail) noexcept = 0;
};

std::unique_ptr<rendezvous> store_rendezvous(const asio::any_io_executor& events, const job_config& cfg);
std::unique_ptr<rendezvous> kv_rendezvous(const asio::any_io_executor& events, const job_config& cfg);
std::unique_ptr<rendezvous> pmix_rendezvous(const asio::any_io_executor& events, const job_config& cfg);

// What the kv and PMIx backends keep per rank: its goodbye, and a failure as "code why".
std::string bye_key(int rank);
std::pair<std::uint64_t, std::string> parse_failure(const std::string& v);
// A job id no other job is likely to have, never 0.
std::uint64_t draw_job_id();

}  // namespace optcast
