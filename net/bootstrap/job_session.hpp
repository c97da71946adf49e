// A rank's session with its job (not installed): the rank's rendezvous with the others, through one of
// the backends job_config chooses (net/bootstrap/rendezvous.hpp), and the job's
// outcome. The fabrics that run one process per rank (net/common/job_fabric.hpp) hold one.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "optcast/error.hpp"
#include "optcast/net/job.hpp"
#include "rendezvous.hpp"

namespace asio {
class any_io_executor;
}

namespace optcast {

// Joining a job: through the rendezvous job_config names (optcast's TCP store, whose
// connection reports dead peers; the program's kv_store; PMIx), the rank learns the job
// id and its peers' addresses; leave() says goodbye and learns the job's outcome. Throws
// setup_error on failure.
class job_session {
public:
  // What the store tells this rank runs on `events`, its event loop.
  job_session(const asio::any_io_executor& events, const job_config& cfg);
  ~job_session();
  job_session(const job_session&) = delete;
  job_session& operator=(const job_session&) = delete;

  const job_config& config() const noexcept { return cfg_; }
  std::uint64_t id() const noexcept { return via_->id(); }
  // What the fabric publishes for its peers (where it listens), and learns of theirs.
  // Blocking, from any thread: until stored / until every key is there, or `timeout`.
  result<void> publish(std::string key, std::string value, std::chrono::milliseconds timeout);
  result<std::vector<std::string>> lookup_all(std::vector<std::string> keys, std::chrono::milliseconds timeout);
  // Without blocking: `done` runs on the job's event loop, once the key is there (up to
  // the bootstrap timeout).
  void lookup(std::string key, std::function<void(result<std::string>)> done);
  // The address this rank listens on and advertises to its peers.
  const std::string& host() const noexcept { return host_; }
  // rendezvous::job_failure.
  std::string job_failure() const { return via_->job_failure(); }
  bool via_pmix() const noexcept { return cfg_.pmix && !cfg_.kv; }
  // The addresses this rank sends and listens on, one per rail (launcher::rail_addresses,
  // or OPTCAST_HOST's list); host() among them.
  const std::vector<std::string>& rails() const noexcept { return rails_; }
  static constexpr std::size_t max_rails = 8;

  // `lost(rank)` when a rank dies; `gone(why)` when the store itself goes away;
  // `failed(code, why)` when another rank reports that it failed (report_failure).
  // `rejoined(rank)` when a replacement for failed rank `rank` is ready (optcast::grow).
  void on_failure(std::function<void(int rank)> lost, std::function<void(std::string why)> gone,
                  std::function<void(std::uint64_t code, int rank, std::string why)> failed = nullptr,
                  std::function<void(int rank)> rejoined = nullptr);
  // This rank failed: every other rank hears of it through the store.
  void report_failure(int code, std::string why);
  // The survivors went on without `ranks` (rendezvous::excuse).
  void excuse(const std::vector<int>& ranks) {
    if (!left_) via_->excuse(ranks);
  }
  // A replacement: ready to be taken in; taken in (rendezvous::rejoin, admitted).
  void rejoin() {
    if (!left_) via_->rejoin();
  }
  void admitted() {
    if (!left_) via_->admitted();
  }
  // This rank's collective `seq` waits on a peer near its deadline: the store finds the root cause
  // (store::client::report_stall); `nobody_stuck` when every rank answers.
  void report_stall(std::uint32_t seq, std::string why, std::function<void()> nobody_stuck);
  // This rank's signature of collective `seq` (call_signature's wire bytes, empty if it
  // made no such call), for the store's inquiries into a stall: calls that differ are
  // found there. Runs on the job's event loop.
  void answer_inquiries(std::function<std::string(std::uint32_t seq)> call_of);

  // Says goodbye and waits, up to `wait`, for the job's outcome: success once every
  // rank has said goodbye, else the job's first failure (outcome_detail() says which
  // rank and why), or timeout. On rank 0 the store then closes (after the other ranks
  // have left, up to config().timeout, or a second once the job has failed). Once only;
  // later calls return the same.
  // `failed`: this rank knows the job failed (its own failure, or told of another's).
  result<void> leave(std::chrono::milliseconds wait, bool failed = false, last_call last = {}) noexcept;
  const std::string& outcome_detail() const noexcept { return outcome_detail_; }

private:
  // The address to advertise (job_config::host, ifname, else this), logged at info.
  std::string choose_host(const std::string& toward_store) const;
  std::vector<std::string> choose_rails() const;

  job_config cfg_;
  std::string host_;
  std::vector<std::string> rails_;
  std::unique_ptr<rendezvous> via_;
  bool left_ = false;
  result<void> outcome_;
  std::string outcome_detail_;
};

}  // namespace optcast
