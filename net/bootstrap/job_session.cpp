// A rank's part in its job: the checks of its configuration, the address it advertises,
// and the rendezvous job_config chooses (rendezvous.hpp), behind one set of methods that
// stop reporting once the rank has left.
#include "job_session.hpp"

#include <random>

#include <asio/any_io_executor.hpp>

#include "launcher_detect.hpp"
#include "optcast/log.hpp"

namespace optcast {

std::string bye_key(int rank) { return "optcast/bye/" + std::to_string(rank); }

std::pair<std::uint64_t, std::string> parse_failure(const std::string& v) {
  const auto sp = v.find(' ');
  std::uint64_t code = 0;
  try {
    code = std::stoull(v.substr(0, sp));
  } catch (...) {
  }
  return {code, sp == std::string::npos ? std::string() : v.substr(sp + 1)};
}

std::uint64_t draw_job_id() {
  std::uint64_t id = 0;
  while (id == 0) id = (std::uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  return id;
}

job_session::job_session(const asio::any_io_executor& events, const job_config& cfg) : cfg_(cfg) {
  if (cfg.size < 1 || cfg.rank < 0 || cfg.rank >= cfg.size)
    throw setup_error(make_error_code(errc::invalid_argument),
                      "rank " + std::to_string(cfg.rank) + " is not in a job of " + std::to_string(cfg.size));
  if (cfg.ports < 1) throw setup_error(make_error_code(errc::invalid_argument), "ports must be at least 1");
  if (cfg.rejoin && (cfg.kv || cfg.pmix))
    throw setup_error(make_error_code(errc::invalid_argument), "a replacement (rejoin) joins through optcast's TCP store only, not a kv store or PMIx");
  if (cfg.encrypt && cfg.secret.empty())
    throw setup_error(make_error_code(errc::invalid_argument),
                      "OPTCAST_ENCRYPT needs a job secret (OPTCAST_SECRET or OPTCAST_SECRET_FILE): the connections' keys come from it");
  // Where this rank listens, when the environment says: checked before anything else,
  // so that a bad OPTCAST_IFNAME or OPTCAST_HOST is what this rank reports.
  if (!cfg.host.empty() || !cfg.ifname.empty()) host_ = choose_host({});
  via_ = cfg.kv ? kv_rendezvous(events, cfg) : cfg.pmix ? pmix_rendezvous(events, cfg) : store_rendezvous(events, cfg);
  if (host_.empty()) host_ = choose_host(via_->toward_store());
  rails_ = choose_rails();
}

std::vector<std::string> job_session::choose_rails() const {
  const auto& cfg = cfg_;
  std::vector<std::string> rails;
  if (cfg.host.find(',') != std::string::npos) {
    for (std::size_t p = 0; p <= cfg.host.size();) {
      const auto comma = std::min(cfg.host.find(',', p), cfg.host.size());
      const std::string one = cfg.host.substr(p, comma - p);
      std::string why;
      auto a = launcher::resolve(one, cfg.family, &why);
      if (one.empty() || !a)
        throw setup_error(make_error_code(errc::invalid_argument), "OPTCAST_HOST='" + cfg.host + "': " + (one.empty() ? "an empty address" : why));
      rails.push_back(*a);
      p = comma + 1;
    }
  } else if (cfg.host.empty()) {
    rails = launcher::rail_addresses(cfg.ifname, host_);
  } else {
    rails = {host_};
  }
  if (rails.size() > max_rails)
    throw setup_error(make_error_code(errc::invalid_argument),
                      std::to_string(rails.size()) + " rails (OPTCAST_HOST or OPTCAST_IFNAME), at most " + std::to_string(max_rails));
  if (rails.size() > 1) {
    std::string list;
    for (const auto& r : rails) list += (list.empty() ? "" : ", ") + r;
    log(log_level::info, "rank " + std::to_string(cfg.rank) + " sends through " + std::to_string(rails.size()) + " rails: " + list);
  }
  return rails;
}

std::string job_session::choose_host(const std::string& toward_store) const {
  const auto& cfg = cfg_;
  const std::string me = "rank " + std::to_string(cfg.rank);
  std::string why;
  if (!cfg.host.empty()) {
    // A list is the rails (choose_rails); the first is the one advertised.
    auto a = launcher::resolve(cfg.host.substr(0, cfg.host.find(',')), cfg.family, &why);
    if (!a) throw setup_error(a.error(), "OPTCAST_HOST: " + why);
    log(log_level::info, me + " advertises " + *a + (*a == cfg.host ? std::string(" (OPTCAST_HOST)") : " (OPTCAST_HOST=" + cfg.host + ")"));
    return *a;
  }
  if (!cfg.ifname.empty()) {
    auto a = launcher::choose_address(cfg.ifname, cfg.family, &why);
    if (!a) throw setup_error(a.error(), me + ": " + why);
    log(log_level::info, me + " advertises " + *a + " (OPTCAST_IFNAME=" + cfg.ifname + ")");
    return *a;
  }
  const bool named = launcher::resolve(cfg.store.host, 0) != cfg.store.host;
  const bool local_name = cfg.store.host == "localhost" || cfg.store.host.starts_with("localhost.") || cfg.store.host == "ip6-localhost";
  if (!toward_store.empty() && !(launcher::is_loopback(toward_store) && named && !local_name)) {
    log(log_level::info, me + " advertises " + toward_store + " (its address toward the store; OPTCAST_IFNAME chooses)");
    return toward_store;
  }
  // No store connection to go by, or one over loopback only because the store's host name
  // means loopback here: the first interface that is up and not loopback.
  auto a = launcher::choose_address("", cfg.family, &why);
  const std::string host = a ? *a : std::string("127.0.0.1");
  log(log_level::info, me + " advertises " + host + " (the first interface up that is not loopback; OPTCAST_IFNAME chooses)");
  return host;
}

job_session::~job_session() { leave(std::chrono::milliseconds(0)); }

result<void> job_session::publish(std::string key, std::string value, std::chrono::milliseconds timeout) {
  return via_->publish(std::move(key), std::move(value), timeout);
}

result<std::vector<std::string>> job_session::lookup_all(std::vector<std::string> keys, std::chrono::milliseconds timeout) {
  return via_->lookup_all(std::move(keys), timeout);
}

void job_session::lookup(std::string key, std::function<void(result<std::string>)> done) { via_->lookup(std::move(key), std::move(done)); }

void job_session::on_failure(std::function<void(int)> lost, std::function<void(std::string)> gone,
                     std::function<void(std::uint64_t, int, std::string)> failed, std::function<void(int)> rejoined) {
  via_->on_rejoined(std::move(rejoined));
  via_->on_failure(std::move(lost), std::move(gone), std::move(failed));
}

void job_session::report_failure(int code, std::string why) {
  if (!left_) via_->report_failure(code, std::move(why));
}

void job_session::report_stall(std::uint32_t seq, std::string why, std::function<void()> nobody_stuck) {
  if (!left_) via_->report_stall(seq, std::move(why), std::move(nobody_stuck));
}

void job_session::answer_inquiries(std::function<std::string(std::uint32_t)> call_of) { via_->answer_inquiries(std::move(call_of)); }

result<void> job_session::leave(std::chrono::milliseconds wait, bool failed, last_call last) noexcept {
  if (left_) return outcome_;
  left_ = true;
  outcome_ = via_->leave(wait, failed, std::move(last), outcome_detail_);
  return outcome_;
}

}  // namespace optcast
