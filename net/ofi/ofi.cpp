// The libfabric fabric: choosing a provider, opening the endpoint and its completion
// queue, exchanging endpoint addresses through the store. Operations and progress are
// in progress.cpp.
#include "ofi_fabric.hpp"

#include "../common/owned_loop.hpp"

namespace optcast::ofi {

namespace impl {

namespace {

info_ptr make_hints(const std::string& prov, bool ordered) {
  info_ptr h(lf().dupinfo(nullptr));  // fi_allocinfo
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
  h->mode = FI_CONTEXT | FI_CONTEXT2;  // every operation carries an fi_context2
  // Every message carries its call's signature hash as remote CQ data (call_signature).
  h->domain_attr->cq_data_size = 8;
  // The memory registration modes optcast can work with.
  h->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  h->domain_attr->threading = FI_THREAD_DOMAIN;
  if (ordered) {  // messages with equal tags between two ranks match in order
    h->tx_attr->msg_order = FI_ORDER_SAS;
    h->rx_attr->msg_order = FI_ORDER_SAS;
  }
  if (!prov.empty()) h->fabric_attr->prov_name = strdup(prov.c_str());
  return h;
}

bool ip_addressed(const fi_info* i) {
  return i->addr_format == FI_SOCKADDR || i->addr_format == FI_SOCKADDR_IN || i->addr_format == FI_SOCKADDR_IN6;
}

// fi_getinfo for one provider (or any): the first reliable match. Providers addressed by
// IP are bound to `host` (the interface toward the store: loopback for local jobs);
// others (shm names its endpoints itself) are not.
info_ptr find_info(const std::string& prov, const std::string& host, std::string& why) {
  for (bool ordered : {true, false}) {
    fi_info* out = nullptr;
    auto hints = make_hints(prov, ordered);
    if (const int ret = lf().getinfo(api_version, nullptr, nullptr, 0, hints.get(), &out)) {
      why = fi_error(ret);
      continue;
    }
    info_ptr all(out);
    const fi_info* pick = nullptr;
    for (const fi_info* i = out; i && !pick; i = i->next)
      if (!prov.empty() || !unreliable(i->fabric_attr->prov_name)) pick = i;
    if (!pick) {
      why = "only unreliable providers (sockets, udp;ofi_rxd, net) match";
      continue;
    }
    if (!ordered) log(log_level::info, std::string("libfabric provider ") + pick->fabric_attr->prov_name + " gives no send-after-send order");
    if (!ip_addressed(pick) || host.empty()) return info_ptr(lf().dupinfo(pick));
    auto bound_hints = make_hints(pick->fabric_attr->prov_name, ordered);
    fi_info* bound = nullptr;
    if (const int ret = lf().getinfo(api_version, host.c_str(), nullptr, FI_SOURCE, bound_hints.get(), &bound)) {
      why = "cannot bind " + std::string(pick->fabric_attr->prov_name) + " to " + host + ": " + fi_error(ret);
      continue;
    }
    return info_ptr(bound);
  }
  return nullptr;
}

std::string to_hex(const void* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::size_t i = 0; i < n; ++i) {
    const auto b = static_cast<const unsigned char*>(p)[i];
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}
bool from_hex(const std::string& s, std::vector<unsigned char>& out) {
  if (s.size() % 2) return false;
  out.clear();
  for (std::size_t i = 0; i < s.size(); i += 2) {
    auto v = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
    const int hi = v(s[i]), lo = v(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<unsigned char>(hi * 16 + lo));
  }
  return true;
}

}  // namespace

void ofi_fabric::bootstrap() {
  join_job();

  std::string prov = cfg_.provider, why = "no provider";
  if (prov.empty()) {
    const char* e = std::getenv("OPTCAST_OFI_PROVIDER");
    if (e && *e) prov = e;
  }
  if (prov.empty() && !std::getenv("FI_PROVIDER")) {
    for (const char* p : {"tcp;ofi_rxm", "shm"})
      if ((info_ = find_info(p, job_->host(), why))) break;
  } else {
    info_ = find_info(prov, job_->host(), why);
  }
  if (!info_)
    throw setup_error(make_error_code(errc::invalid_argument),
                      "no libfabric RDM provider with tagged messages" + (prov.empty() ? std::string() : " named '" + prov + "'") +
                          " (" + why + "); see fi_info -l");
  provider_ = info_->fabric_attr->prov_name;
  // rxm answers FI_PEEK; shm (1.17) takes the peek and never answers it.
  peek_works_ = provider_.find("ofi_rxm") != std::string::npos;
  survives_ = provider_.find("ofi_rxm") != std::string::npos;
  if (cfg_.rejoin && !survives_)
    throw setup_error(make_error_code(errc::invalid_argument),
                      "libfabric provider " + provider_ + " takes no replacements (OPTCAST_REJOIN): a peer's loss fails it (tcp;ofi_rxm survives one)");
  register_ = cfg_.register_always || (info_->domain_attr->mr_mode & FI_MR_LOCAL);
  max_msg_ = info_->ep_attr->max_msg_size;

  auto check = [&](int ret, const char* what) {
    if (ret) throw setup_error(make_error_code(errc::invalid_argument),
                               std::string("libfabric ") + what + " (" + provider_ + "): " + fi_error(ret));
  };
  fid_fabric* fab = nullptr;
  check(lf().fabric(info_->fabric_attr, &fab, nullptr), "fi_fabric");
  fabric_.reset(fab);
  fid_domain* dom = nullptr;
  check(fi_domain(fabric_.get(), info_.get(), &dom, nullptr), "fi_domain");
  domain_.reset(dom);

  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  const char* progress_env = std::getenv("OPTCAST_OFI_PROGRESS");
  const bool poll = progress_env && std::string(progress_env) == "poll";
  cq_attr.wait_obj = poll ? FI_WAIT_NONE : FI_WAIT_FD;
  fid_cq* cq = nullptr;
  if (fi_cq_open(domain_.get(), &cq_attr, &cq, nullptr)) {
    cq_attr.wait_obj = FI_WAIT_NONE;  // no wait object: progress by polling
    check(fi_cq_open(domain_.get(), &cq_attr, &cq, nullptr), "fi_cq_open");
  }
  cq_.reset(cq);
  if (cq_attr.wait_obj == FI_WAIT_FD) {
    // FI_GETWAITOBJ first: FI_GETWAIT writes a struct, not an fd, for POLLFD providers.
    enum fi_wait_obj obj = FI_WAIT_NONE;
    int fd = -1;
    if (fi_control(&cq_->fid, FI_GETWAITOBJ, &obj) == 0 && obj == FI_WAIT_FD &&
        fi_control(&cq_->fid, FI_GETWAIT, &fd) == 0 && fd >= 0)
      wait_.assign(::dup(fd));
  }

  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  fid_av* av = nullptr;
  check(fi_av_open(domain_.get(), &av_attr, &av, nullptr), "fi_av_open");
  av_.reset(av);
  fid_ep* ep = nullptr;
  check(fi_endpoint(domain_.get(), info_.get(), &ep, nullptr), "fi_endpoint");
  ep_.reset(ep);
  check(fi_ep_bind(ep_.get(), &cq_->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind(cq)");
  check(fi_ep_bind(ep_.get(), &av_->fid, 0), "fi_ep_bind(av)");
  check(fi_enable(ep_.get()), "fi_enable");

  std::array<unsigned char, 512> name{};
  std::size_t len = name.size();
  check(fi_getname(&ep_->fid, name.data(), &len), "fi_getname");
  if (auto r = job_->publish(addr_key(cfg_.rank), provider_ + "|" + to_hex(name.data(), len), cfg_.bootstrap_timeout); !r)
    throw setup_error(r.error(), job_->job_failure().empty() ? "cannot register with the store: " + r.error().message() : job_->job_failure());
  insert_all_peers();
  for (int r = 0; r < cfg_.size && survives_; ++r)
    if (r != cfg_.rank) post_control_receive(r, {});
  // A replacement's endpoint is in the store, and it listens: the members may take it in.
  if (cfg_.rejoin) job_->rejoin();
  log(log_level::debug, rank_name(cfg_.rank) + " on libfabric provider " + provider_ +
                            (wait_.is_open() ? " (progress on the CQ's wait fd)" : " (progress by polling)"));
  arm();
}

void ofi_fabric::insert_all_peers() {
  const auto deadline = std::chrono::steady_clock::now() + cfg_.bootstrap_timeout;
  std::vector<std::string> keys;
  for (int r = 0; r < cfg_.size; ++r) keys.push_back(addr_key(r));
  auto names = job_->lookup_all(std::move(keys), cfg_.bootstrap_timeout);
  if (!names && !job_->job_failure().empty()) throw setup_error(names.error(), job_->job_failure());
  if (!names && names.error() == errc::timeout)
    throw setup_error(make_error_code(errc::timeout), "not every rank published its libfabric endpoint within " +
                                                          std::to_string(cfg_.bootstrap_timeout.count()) + " ms");
  if (!names)
    throw setup_error(names.error(), "cannot learn the ranks' endpoints from the store (" + names.error().message() + ")");
  std::vector<std::vector<unsigned char>> bytes(static_cast<std::size_t>(cfg_.size));
  std::vector<std::size_t> length(static_cast<std::size_t>(cfg_.size));
  for (int r = 0; r < cfg_.size; ++r)
    if (auto why = endpoint_of(r, (*names)[static_cast<std::size_t>(r)], bytes[static_cast<std::size_t>(r)], length[static_cast<std::size_t>(r)]);
        !why.empty())
      throw setup_error(make_error_code(errc::protocol_violation), why);
  addrs_.assign(static_cast<std::size_t>(cfg_.size), FI_ADDR_UNSPEC);
  abandoned_recvs_.assign(static_cast<std::size_t>(cfg_.size), 0);
  const auto insert = [&](int r) {
    fi_addr_t addr = FI_ADDR_UNSPEC;
    if (int n = fi_av_insert(av_.get(), bytes[static_cast<std::size_t>(r)].data(), 1, &addr, 0, nullptr); n != 1)
      throw setup_error(make_error_code(errc::protocol_violation),
                        "fi_av_insert for " + rank_name(r) + ": " + fi_error(n < 0 ? n : -FI_EINVAL));
    addrs_[static_cast<std::size_t>(r)] = addr;
  };
  for (int r = 0; r < cfg_.size; ++r) insert(r);
  // An insert can report success and still lose its entry: shm (libfabric 1.17) does
  // when it cannot map the peer's region yet, and hands the same fi_addr to the next
  // name (seen in CI as two ranks on one endpoint). So every entry is looked up and
  // the lost ones inserted again, until the bootstrap deadline.
  const auto lost = [&] {
    std::vector<int> out;
    for (int r = 0; r < cfg_.size; ++r) {
      std::array<unsigned char, 512> back{};
      std::size_t len = back.size() - 1;
      const int n = fi_av_lookup(av_.get(), addrs_[static_cast<std::size_t>(r)], back.data(), &len);
      if (n == -FI_ENOSYS) return out;  // the provider cannot tell; trust the inserts
      const auto want = length[static_cast<std::size_t>(r)];
      const auto& name = bytes[static_cast<std::size_t>(r)];
      if (n != 0 || len < want || !std::equal(name.begin(), name.begin() + static_cast<std::ptrdiff_t>(want), back.begin()))
        out.push_back(r);
    }
    return out;
  };
  for (auto bad = lost(); !bad.empty(); bad = lost()) {
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string who;
      for (int r : bad) who += (who.empty() ? "" : ", ") + rank_name(r);
      throw setup_error(make_error_code(errc::protocol_violation),
                        "libfabric's address vector does not keep the endpoints of " + who + " (" + provider_ + ")");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    for (int r : bad) insert(r);
  }
  for (int r = 0; r < cfg_.size; ++r)
    if (auto it = std::find(addrs_.begin(), addrs_.begin() + r, addrs_[static_cast<std::size_t>(r)]); it != addrs_.begin() + r)
      throw setup_error(make_error_code(errc::protocol_violation),
                        rank_name(r) + " and " + rank_name(static_cast<int>(it - addrs_.begin())) + " have the same libfabric endpoint");
}

std::string ofi_fabric::endpoint_of(int r, const std::string& published, std::vector<unsigned char>& name, std::size_t& length) const {
  const auto bar = published.find('|');
  if (bar == std::string::npos || !from_hex(published.substr(bar + 1), name)) return "malformed endpoint name for " + rank_name(r);
  if (published.substr(0, bar) != provider_)
    return rank_name(r) + " uses libfabric provider " + published.substr(0, bar) + ", this rank " + provider_ +
           " (set FI_PROVIDER or OPTCAST_OFI_PROVIDER alike on every rank)";
  length = name.size();
  // Providers may read a fixed address length rather than the name's own (shm's names
  // are strings, its AV copies its maximum name length): zeros past the end.
  name.resize(std::max<std::size_t>(name.size(), 512), 0);
  return {};
}

}  // namespace impl

using impl::ofi_fabric;
using impl::api_version;
using impl::make_hints;

bool available() noexcept { return impl::try_lf(nullptr) != nullptr; }

std::vector<std::string> providers() {
  std::vector<std::string> out;
  if (!available()) return out;
  fi_info* list = nullptr;
  auto hints = make_hints("", false);
  if (impl::lf().getinfo(api_version, nullptr, nullptr, 0, hints.get(), &list) == 0) {
    for (fi_info* i = list; i; i = i->next) {
      std::string n = i->fabric_attr->prov_name;
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    }
    impl::lf().freeinfo(list);
  }
  return out;
}

config config::from_env() { return from(job_config::from_env()); }

config config::from(const job_config& job) {
  config c;
  static_cast<job_config&>(c) = job;
  if (const char* p = std::getenv("OPTCAST_OFI_PROVIDER")) c.provider = p;
  if (const char* m = std::getenv("OPTCAST_OFI_MR")) c.register_always = std::string(m) == "always";
  return c;
}

namespace {
std::shared_ptr<impl::ofi_fabric> make(asio::io_context& io, const config& cfg, bool owns_loop) {
  if (cfg.encrypt)
    throw setup_error(make_error_code(errc::invalid_argument),
                      "OPTCAST_ENCRYPT is for the TCP fabric: libfabric moves the data itself, unencrypted");
  auto f = std::make_shared<impl::ofi_fabric>(io, cfg);
  if (owns_loop) f->own_loop(/*arena=*/false);
  f->bootstrap();
  return f;
}
}  // namespace

std::shared_ptr<optcast::fabric> connect(asio::io_context& io, const config& cfg) { return make(io, cfg, false); }

std::shared_ptr<optcast::fabric> connect(const config& cfg) {
  return detail::with_own_loop([&](asio::io_context& io) { return make(io, cfg, true); });
}

std::string provider(const optcast::fabric& f) {
  auto* o = dynamic_cast<const ofi_fabric*>(&f);
  return o ? o->provider() : std::string();
}

}  // namespace optcast::ofi
