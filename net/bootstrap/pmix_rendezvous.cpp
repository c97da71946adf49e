// Meeting through the PMIx server of the launcher that started the ranks (mpirun,
// prterun, srun --mpi=pmix; pmix.hpp): what each rank publishes is collected by a fence
// every rank reaches as often as the others, and one more fence collects the goodbyes.
// A rank's death comes through PMIx's own event notification where the launcher sends
// it (tests/pmix_launcher.cpp does; PRRTE documents it with --enable-recovery, not run here),
// else through the data connections: Debian 12's mpirun (Open MPI 4.1.4 with PMIx 4.2.2)
// delivers none (with --enable-recovery its server logs BAD-PARAM in
// pmix_event_notification.c and the clients' handlers hear nothing of a rank killed;
// without it mpirun ends the job itself), nor does Slurm's mpi/pmix plugin (it does not
// import PMIx_Notify_event). Nobody looks into a stall.
#include <asio/any_io_executor.hpp>
#include <asio/post.hpp>
#include <optional>

#include "optcast/fabric_base.hpp"
#include "optcast/log.hpp"
#include "pmix.hpp"
#include "rendezvous.hpp"

namespace optcast {

namespace {

class via_pmix final : public rendezvous {
public:
  // The launcher names the job.
  via_pmix(const asio::any_io_executor& events, const job_config& cfg) : cfg_(cfg), events_(events) {}

  std::uint64_t id() const noexcept override { return cfg_.job_id; }

  result<void> publish(std::string key, std::string value, std::chrono::milliseconds timeout) override {
    std::string why;
    auto r = pmix::publish(key, value, timeout, &why);
    if (!r) log(log_level::error, why);
    return r;
  }

  // Collected by the fence of every rank's publish.
  result<std::vector<std::string>> lookup_all(std::vector<std::string> keys, std::chrono::milliseconds) override {
    std::vector<std::string> out;
    for (const auto& k : keys) {
      std::string why;
      auto v = pmix::get(k, &why);
      if (!v) {
        log(log_level::error, why);
        return fail(v.error());
      }
      out.push_back(std::move(*v));
    }
    return out;
  }

  void lookup(std::string key, std::function<void(result<std::string>)> done) override {
    std::string why;
    auto v = pmix::get(key, &why);
    if (!v) log(log_level::error, why);
    asio::post(events_, [done = std::move(done), v = std::move(v)] { done(v); });
  }

  // A rank's death, where the launcher's PMIx server tells of it (pmix::on_death): named
  // to the fabric as the TCP store's word of a dead rank is.
  void on_failure(std::function<void(int)>, std::function<void(std::string)>, std::function<void(std::uint64_t, int, std::string)> failed) override {
    pmix::on_death([events = events_, failed = std::move(failed)](int r, std::string why) {
      asio::post(events, [failed, r, why = std::move(why)] { failed(static_cast<std::uint64_t>(errc::peer_lost), r, why); });
    });
  }
  ~via_pmix() override { pmix::on_death(nullptr); }

  // Said in its goodbye, for the job's outcome.
  void report_failure(int code, std::string why) override {
    if (!failure_) failure_ = std::to_string(code) + " " + why;
  }

  void report_stall(std::uint32_t, std::string, std::function<void()> nobody_stuck) override {
    asio::post(events_, std::move(nobody_stuck));
  }

  // Every rank's goodbye (ok, or its failure) collected by one more fence: the job's
  // outcome is its first failure by rank. Not from the destructor of a job never left (a
  // fence the others may never reach).
  result<void> leave(std::chrono::milliseconds wait, bool failed, last_call, std::string& detail) noexcept override {
    try {
      return goodbye(wait, failed, detail);
    } catch (const std::exception& e) {
      detail = e.what();
      return fail(errc::protocol_violation);
    }
  }

private:
  result<void> goodbye(std::chrono::milliseconds wait, bool failed, std::string& detail) {
    if (wait.count() == 0) {
      detail = "left without waiting for the others";
      return fail(errc::timeout);
    }
    const std::string mine = failure_ ? "failed " + *failure_ : failed ? std::string("failed") : std::string("ok");
    std::string why;
    if (auto r = pmix::publish(bye_key(cfg_.rank), mine, wait, &why); !r) {
      detail = why;
      return fail(r.error());
    }
    for (int r = 0; r < cfg_.size; ++r) {
      auto v = pmix::get(bye_key(r), &why);
      if (!v) {
        detail = why;
        return fail(v.error());
      }
      if (v->starts_with("failed")) {
        auto [code, text] = parse_failure(v->size() > 7 ? v->substr(7) : std::string("0"));
        detail = text.empty() ? "rank " + std::to_string(r) + " failed" : text;
        return fail(code ? told_error(code) : make_error_code(errc::peer_lost));
      }
    }
    return {};
  }

  job_config cfg_;
  asio::any_io_executor events_;
  std::optional<std::string> failure_;  // "code why" of this rank's failure
};

}  // namespace

std::unique_ptr<rendezvous> pmix_rendezvous(const asio::any_io_executor& events, const job_config& cfg) {
  return std::make_unique<via_pmix>(events, cfg);
}

}  // namespace optcast
