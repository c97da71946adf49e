// Meeting through optcast's TCP store (store.hpp): rank 0 hosts it (unless
// job_config::host_store says it runs elsewhere); every rank keeps its connection for the
// job's lifetime, which tells it at once of a rank that died or failed, and through which
// the store looks into a stall.
#include <asio/any_io_executor.hpp>

#include "launcher_detect.hpp"
#include "optcast/log.hpp"
#include "rendezvous.hpp"
#include "store.hpp"

namespace optcast {

namespace {

class via_store final : public rendezvous {
public:
  via_store(const asio::any_io_executor& events, const job_config& cfg) : cfg_(cfg) {
    if (cfg.rejoin && cfg.rank == 0 && cfg.host_store)
      throw setup_error(make_error_code(errc::invalid_argument), "a replacement for rank 0 needs a store apart from it (job_config::host_store false)");
    if (cfg.rank == 0 && cfg.host_store) host(cfg);
    // A name with addresses of both families: the family asked for (IPv4 unless 6), as
    // for the address this rank advertises, so that a job does not mix them by accident.
    std::string why;
    auto store_ip = launcher::resolve(cfg.store.host, cfg.family, &why);
    if (!store_ip) throw setup_error(store_ip.error(), "the store's host: " + why);
    client_ = std::make_unique<store::client>(events, store::address{*store_ip, cfg.store.port}, cfg.rank, cfg.size,
                                              cfg.bootstrap_timeout, cfg.secret, cfg.job_id, cfg.encrypt, cfg.rejoin);
    id_ = client_->job_id();
    if (cfg.job_id && cfg.job_id != id_)
      throw setup_error(make_error_code(errc::protocol_violation),
                        "OPTCAST_JOB_ID differs from the job id the store hands out: another job's store?");
  }

  std::uint64_t id() const noexcept override { return id_; }
  std::string toward_store() const override { return client_->local_host(); }
  std::string job_failure() const override { return client_->job_failure(); }

  result<void> publish(std::string key, std::string value, std::chrono::milliseconds timeout) override {
    return client_->set_wait(std::move(key), std::move(value), timeout);
  }
  result<std::vector<std::string>> lookup_all(std::vector<std::string> keys, std::chrono::milliseconds timeout) override {
    return client_->get_all_wait(std::move(keys), timeout);
  }
  void lookup(std::string key, std::function<void(result<std::string>)> done) override {
    client_->get(std::move(key), std::move(done));
  }
  void on_failure(std::function<void(int)> lost, std::function<void(std::string)> gone,
                  std::function<void(std::uint64_t, int, std::string)> failed) override {
    client_->on_events(
        std::move(lost),
        [gone = std::move(gone), where = where(), hosted = cfg_.host_store](std::error_code ec) {
          gone("lost the connection to the store " + where + " (" + ec.message() + ")" + (hosted ? ": rank 0 died?" : ""));
        },
        std::move(failed), std::move(rejoined_));
  }
  void on_rejoined(std::function<void(int)> rejoined) override { rejoined_ = std::move(rejoined); }
  void rejoin() override { client_->rejoin(); }
  void admitted() override { client_->admitted(); }
  void excuse(const std::vector<int>& ranks) override { client_->excuse(ranks); }
  void report_failure(int code, std::string why) override {
    client_->report_failure(static_cast<std::uint32_t>(code), std::move(why));
  }
  void report_stall(std::uint32_t seq, std::string why, std::function<void()> nobody_stuck) override {
    client_->report_stall(seq, std::move(why), std::move(nobody_stuck), call_of_ ? call_of_(seq) : std::string());
  }
  void answer_inquiries(std::function<std::string(std::uint32_t)> call_of) override {
    call_of_ = call_of;
    client_->answer_inquiries(std::move(call_of));
  }

  result<void> leave(std::chrono::milliseconds wait, bool failed, last_call last, std::string& detail) noexcept override {
    client_->on_events(nullptr, nullptr);
    auto outcome = client_->bye(wait, &detail, last.seq, std::move(last.signature));
    // The store stays while the other ranks finish (up to the deadline), and take the
    // outcome; when the job failed, they have been told: a little longer for those told
    // just now, not a deadline for a stalled one.
    const auto grace = !outcome && outcome.error() != errc::timeout ? std::chrono::milliseconds(1000)
                       : failed || (server_ && server_->failed())   ? std::chrono::milliseconds(1000)
                                                                    : cfg_.timeout;
    if (server_ && !server_->wait_all_done(grace) && grace == cfg_.timeout)
      log(log_level::warn, "rank 0 closed before every rank had finished (waited " + std::to_string(cfg_.timeout.count()) + " ms)");
    client_.reset();
    server_.reset();
    return outcome;
  }

private:
  std::string where() const { return cfg_.host_store ? "on rank 0" : "at " + cfg_.store.str(); }

  void host(const job_config& cfg) {
    const std::uint64_t id = cfg.job_id ? cfg.job_id : draw_job_id();
    if (cfg.store_fd >= 0) {
      server_ = std::make_unique<store::server>(cfg.store_fd, cfg.size, id, cfg.secret, cfg.encrypt);
    } else if (launcher::resolve(cfg.store.host, 0) == cfg.store.host) {
      server_ = std::make_unique<store::server>(cfg.store.host, cfg.store.port, cfg.size, id, cfg.secret, cfg.encrypt);
    } else {
      // A name (a Slurm node's, MASTER_ADDR) may mean loopback here and an interface's
      // address elsewhere (Debian's "127.0.1.1 host" line): every address, as
      // torch.distributed's store does, so that the other hosts reach it either way.
      try {
        server_ = std::make_unique<store::server>("::", cfg.store.port, cfg.size, id, cfg.secret, cfg.encrypt);
      } catch (const setup_error&) {  // a kernel without IPv6
        server_ = std::make_unique<store::server>("0.0.0.0", cfg.store.port, cfg.size, id, cfg.secret, cfg.encrypt);
      }
      log(log_level::info, "the store listens on every address, port " + std::to_string(cfg.store.port) + " (the ranks reach it as " +
                               cfg.store.str() + ")");
    }
    server_->expect_all_within(cfg.bootstrap_timeout);
    if (cfg.secret.empty() && cfg.size > 1)
      log(log_level::warn, "no job secret (OPTCAST_SECRET or OPTCAST_SECRET_FILE): any process that reaches the store at " +
                               cfg.store.str() + " can join this job or disturb it");
  }

  job_config cfg_;
  std::unique_ptr<store::server> server_;
  std::unique_ptr<store::client> client_;
  std::uint64_t id_ = 0;
  std::function<std::string(std::uint32_t)> call_of_;
  std::function<void(int)> rejoined_;
};

}  // namespace

std::unique_ptr<rendezvous> store_rendezvous(const asio::any_io_executor& events, const job_config& cfg) {
  return std::make_unique<via_store>(events, cfg);
}

}  // namespace optcast
