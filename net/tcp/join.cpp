// The TCP fabric's joining: a listening socket on every rail, this rank's entry in the
// store (its addresses and host identity), and the job's layout (which host each rank is
// on, its rails), from which the connections toward each peer are sized.
#include "tcp_fabric.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "../bootstrap/launcher_detect.hpp"
#include "../bootstrap/parse_number.hpp"

namespace optcast::tcp::impl {

void tcp_fabric::bootstrap() {
  join_job();
  job_id_ = job_->id();
  key_ = auth::key::from_secret(cfg_.secret);
  // A listening socket on each rail's address: a peer's connection on rail i comes to
  // this rank's address on rail i, over interface i.
  std::string published;
  acceptors_.reserve(job_->rails().size());
  for (const std::string& host : job_->rails()) {
    std::error_code ec;
    const auto addr = asio::ip::make_address(host, ec);
    if (ec) throw setup_error(ec, "OPTCAST_HOST '" + host + "' is not an IP address of this host");
    tcp::endpoint ep(addr, 0);
    auto& a = acceptors_.emplace_back(ex_);
    a.open(ep.protocol(), ec);
    if (!ec) a.bind(ep, ec);
    if (!ec) a.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) throw setup_error(ec, "cannot listen on " + host + ": " + ec.message());
    const std::string at = store::address{host, a.local_endpoint().port()}.str();
    if (listen_.empty()) listen_ = at;
    published += (published.empty() ? "" : ",") + at;
  }
  // A peer may connect on any of them as soon as they listen (the loop may run already).
  // The connections' slots too, one per rail of this rank's, before a failure handled on
  // the loop may walk them: learn_peers then only says how many each peer uses.
  for (auto& pe : peers_) {
    pe.in.resize(acceptors_.size());
    while (pe.out.size() < acceptors_.size()) pe.out.emplace_back(ex_);
  }
  for (auto& a : acceptors_) accept_next(a);
  // And for the rings of this host's ranks, before any of them can know where.
  listen_memory(listen_);
  // With who this host is, so that a peer can tell a loopback address of another host's
  // (a host name that means 127.0.1.1 there) from one it can reach, and its own host's
  // ranks from the others'.
  if (auto r = job_->publish(addr_key(cfg_.rank), published + " " + launcher::host_identity(), cfg_.bootstrap_timeout); !r)
    throw setup_error(r.error(), job_->job_failure().empty() ? "cannot register with the store: " + r.error().message() : job_->job_failure());
  log(log_level::debug, rank_name(cfg_.rank) + " of job " + std::to_string(job_id_) + " listens on " + published);
  learn_peers();
  // A replacement listens, and the job knows where: the members may take it in.
  if (cfg_.rejoin) job_->rejoin();
}

void tcp_fabric::learn_peers() {
  // Which host each rank is on and how many rails it has. Rank 0 reads every rank's entry
  // and publishes the job's layout ("HOST:RAILS" per rank), which the others read: one
  // lookup each, where every rank reading every entry would be p^2 of them. Under PMIx
  // every rank has every entry after the fence already, and reads them all. The
  // addresses themselves are looked up on first use (open_out).
  const auto failed = [&](std::error_code ec, const std::string& what) {
    // The store's word (who did not join, and why) is due at the same deadline as this
    // rank's own wait, and on a loaded host may come a little after it: wait for it
    // briefly rather than report the bare timeout.
    std::string said = job_->job_failure();
    for (int i = 0; said.empty() && i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      said = job_->job_failure();
    }
    return setup_error(ec, said.empty() ? what + ": " + ec.message() : said);
  };
  const std::string key = "optcast/layout";
  std::string summary;
  // A replacement reads the layout its predecessor's job made: it takes that one's place.
  if ((cfg_.rank == 0 && !cfg_.rejoin) || job_->via_pmix()) {
    std::vector<std::string> keys;
    for (int r = 0; r < cfg_.size; ++r) keys.push_back(addr_key(r));
    auto all = job_->lookup_all(std::move(keys), cfg_.bootstrap_timeout);
    if (!all) throw failed(all.error(), "not every rank said where it listens within " + std::to_string(cfg_.bootstrap_timeout.count()) + " ms");
    std::vector<std::string> ids, machine_ids;
    for (int r = 0; r < cfg_.size; ++r) {
      const auto id = split_entry((*all)[static_cast<std::size_t>(r)]).second;
      ids.push_back(id.empty() ? "rank " + std::to_string(r) : id);  // no identity: a host of its own
      // The identity's boot id (launcher::host_identity: boot id, then the network
      // namespace): the machine whose cores its processes share.
      machine_ids.push_back(id.empty() ? ids.back() : id.substr(0, id.find('/')));
    }
    const auto t = topology::of_identities(ids, 1), machines = topology::of_identities(machine_ids, 1);
    for (int r = 0; r < cfg_.size; ++r) {
      const auto n = std::min(split_entry((*all)[static_cast<std::size_t>(r)]).first.size(), job_session::max_rails);
      summary += (r ? " " : "") + std::to_string(t.host_of[static_cast<std::size_t>(r)]) + ":" + std::to_string(n) + ":" +
                 std::to_string(machines.host_of[static_cast<std::size_t>(r)]);
    }
    if (!job_->via_pmix())
      if (auto ok = job_->publish(key, summary, cfg_.bootstrap_timeout); !ok) throw failed(ok.error(), "cannot publish the job's layout");
  } else {
    // Rank 0 has the bootstrap timeout, counted from its own start, to hear from every rank
    // before it publishes: waiting only as long from this rank's start, a rank that started
    // first gave up before the store said who was missing (which ends this wait at once).
    const auto wait = 2 * cfg_.bootstrap_timeout;
    auto got = job_->lookup_all({key}, wait);
    if (!got) throw failed(got.error(), "rank 0 did not publish the job's layout within " + std::to_string(wait.count()) + " ms");
    summary = got->front();
  }
  // Each rank's "host:rails:machine".
  std::vector<std::string> ids;
  std::vector<int> rails, machine_of;
  for (std::size_t p = 0; p <= summary.size();) {
    const auto end = std::min(summary.find(' ', p), summary.size());
    const std::string_view one = std::string_view(summary).substr(p, end - p);
    const auto colon = one.find(':'), second = one.find(':', colon == std::string_view::npos ? colon : colon + 1);
    int host = -1, n = 0, machine = -1;
    const bool ok = colon != std::string_view::npos && second != std::string_view::npos &&
                    launcher::parse_number(one.substr(0, colon), host) && launcher::parse_number(one.substr(colon + 1, second - colon - 1), n) &&
                    launcher::parse_number(one.substr(second + 1), machine);
    if (!ok || host >= cfg_.size || machine >= cfg_.size || n < 1 || n > static_cast<int>(job_session::max_rails) ||
        ids.size() >= static_cast<std::size_t>(cfg_.size))
      throw setup_error(make_error_code(errc::protocol_violation), "the job's layout in the store is malformed: '" + summary.substr(0, 200) + "'");
    ids.push_back(std::to_string(host));
    rails.push_back(n);
    machine_of.push_back(machine);
    p = end + 1;
  }
  if (ids.size() != static_cast<std::size_t>(cfg_.size))
    throw setup_error(make_error_code(errc::protocol_violation), "the job's layout in the store names " + std::to_string(ids.size()) + " ranks, not " + std::to_string(cfg_.size));
  const int mine = static_cast<int>(acceptors_.size());
  layout_ = topology::of_identities(ids, mine);
  machine_ranks_ = static_cast<int>(std::count(machine_of.begin(), machine_of.end(), machine_of[static_cast<std::size_t>(cfg_.rank)]));
  // To a rank of this host, one connection (every lane is memory there); to another host,
  // one per rail both have.
  for (int r = 0; r < cfg_.size; ++r) {
    const bool local = layout_.host_of[static_cast<std::size_t>(r)] == layout_.host_of[static_cast<std::size_t>(cfg_.rank)];
    const auto n = static_cast<std::size_t>(local ? 1 : std::min(mine, rails[static_cast<std::size_t>(r)]));
    peer(r).rails = static_cast<int>(n);
  }
  move_min_ = sharers() == 1 ? std::min(cfg_.shm_move_min, cfg_.shm_copy_min) : cfg_.shm_copy_min;
  set_held_limits(cfg_.limits_for(ranks_on_my_host()));
  if (cfg_.rank == 0) log(log_level::info, "job " + std::to_string(job_id_) + ": " + layout_.describe());
}

}  // namespace optcast::tcp::impl
