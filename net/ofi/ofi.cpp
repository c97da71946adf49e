#include "optcast/net/ofi.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <sched.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/post.hpp>
#include <asio/posix/stream_descriptor.hpp>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include "../common/deadlines.hpp"
#include "../common/op_queue.hpp"
#include "optcast/log.hpp"

namespace optcast::ofi {

namespace {

constexpr auto api_version = FI_VERSION(1, 17);

std::string fi_error(int ret) { return std::string(fi_strerror(ret < 0 ? -ret : ret)); }

template <class T>
struct fid_deleter {
  void operator()(T* p) const noexcept {
    if (p) fi_close(&p->fid);
  }
};
template <class T>
using fid_ptr = std::unique_ptr<T, fid_deleter<T>>;
struct info_deleter {
  void operator()(fi_info* i) const noexcept { fi_freeinfo(i); }
};
using info_ptr = std::unique_ptr<fi_info, info_deleter>;

// Providers that fail optcast's tests with Debian 12's libfabric 1.17: sockets and
// udp;ofi_rxd hang on large messages; net loses messages once a rank talks to more than
// two peers (a 4-rank barrier waits forever, with or without its wait fd).
bool unreliable(const std::string& prov) { return prov == "sockets" || prov == "udp;ofi_rxd" || prov == "net"; }

info_ptr make_hints(const std::string& prov, bool ordered) {
  info_ptr h(fi_allocinfo());
  h->ep_attr->type = FI_EP_RDM;
  h->caps = FI_TAGGED | FI_MSG | FI_DIRECTED_RECV;
  h->mode = FI_CONTEXT | FI_CONTEXT2;  // every operation carries an fi_context2
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
    if (const int ret = fi_getinfo(api_version, nullptr, nullptr, 0, hints.get(), &out)) {
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
    if (!ip_addressed(pick) || host.empty()) return info_ptr(fi_dupinfo(pick));
    auto bound_hints = make_hints(pick->fabric_attr->prov_name, ordered);
    fi_info* bound = nullptr;
    if (const int ret = fi_getinfo(api_version, host.c_str(), nullptr, FI_SOURCE, bound_hints.get(), &bound)) {
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

std::string rank_name(int r) { return "rank " + std::to_string(r); }

// Where an operation is, in operation::fabric_state's low bits; registered memory, if
// any, is kept in fabric_ctx after the provider's fi_context2.
enum : std::uintptr_t { st_none = 0, st_retry, st_posted, st_cancelling };
static_assert(sizeof(fi_context2) <= sizeof(operation::fabric_ctx) - sizeof(void*));
fid_mr*& mr_of(operation& op) { return *reinterpret_cast<fid_mr**>(&op.fabric_ctx[9]); }

class ofi_fabric final : public fabric {
public:
  ofi_fabric(asio::io_context& io, const config& cfg)
      : io_(io), cfg_(cfg), wait_(io), deadlines_(io, [this](std::uint32_t seq) { expire(seq); }) {}

  ~ofi_fabric() override {
    closing_ = true;
    abort(make_error_code(errc::cancelled), "the communicator was closed");
    *alive_ = false;
    std::error_code ignored;
    wait_.close(ignored);
    if (job_) job_->leave();
  }

  void bootstrap() {
    job_ = std::make_unique<job>(io_, cfg_);
    job_->on_failure(
        [this, alive = alive_](int r) {
          if (*alive && !closing_) abort(make_error_code(errc::peer_lost), rank_name(r) + " died (its store connection closed without goodbye)");
        },
        [this, alive = alive_](std::string why) {
          if (*alive && !closing_) abort(make_error_code(errc::peer_lost), why);
        });

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
    register_ = cfg_.register_always || (info_->domain_attr->mr_mode & FI_MR_LOCAL);
    max_msg_ = info_->ep_attr->max_msg_size;

    auto check = [&](int ret, const char* what) {
      if (ret) throw setup_error(make_error_code(errc::invalid_argument),
                                 std::string("libfabric ") + what + " (" + provider_ + "): " + fi_error(ret));
    };
    fid_fabric* fab = nullptr;
    check(fi_fabric(info_->fabric_attr, &fab, nullptr), "fi_fabric");
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
    if (auto r = job_->store().set_wait(addr_key(cfg_.rank), provider_ + "|" + to_hex(name.data(), len), cfg_.bootstrap_timeout); !r)
      throw setup_error(r.error(), "cannot register with the store: " + r.error().message());
    insert_all_peers();
    log(log_level::debug, rank_name(cfg_.rank) + " on libfabric provider " + provider_ +
                              (wait_.is_open() ? " (progress on the CQ's wait fd)" : " (progress by polling)"));
    arm();
  }

  // Every rank's endpoint goes into the address vector before anything is sent: a
  // message from a source the receiver has not inserted could not match a directed
  // receive (shm, rxm).
  void insert_all_peers() {
    std::vector<std::optional<result<std::string>>> names(static_cast<std::size_t>(cfg_.size));
    int answered = 0;
    for (int r = 0; r < cfg_.size; ++r)  // all requests in flight at once
      job_->store().get(addr_key(r), [&names, &answered, r](result<std::string> v) {
        names[static_cast<std::size_t>(r)] = std::move(v);
        ++answered;
      });
    const auto deadline = std::chrono::steady_clock::now() + cfg_.bootstrap_timeout;
    while (answered < cfg_.size && std::chrono::steady_clock::now() < deadline) {
      if (io_.stopped()) io_.restart();
      io_.run_one_until(deadline);
    }
    if (answered < cfg_.size)
      throw setup_error(make_error_code(errc::timeout), "not every rank published its libfabric endpoint within " +
                                                            std::to_string(cfg_.bootstrap_timeout.count()) + " ms");
    std::vector<std::vector<unsigned char>> bytes(static_cast<std::size_t>(cfg_.size));
    std::vector<std::size_t> length(static_cast<std::size_t>(cfg_.size));
    for (int r = 0; r < cfg_.size; ++r) {
      const auto& v = *names[static_cast<std::size_t>(r)];
      auto& name = bytes[static_cast<std::size_t>(r)];
      const auto bar = v ? v->find('|') : std::string::npos;
      std::string why;
      if (!v)
        why = "cannot learn " + rank_name(r) + "'s endpoint from the store (" + v.error().message() + ")";
      else if (bar == std::string::npos || !from_hex(v->substr(bar + 1), name))
        why = "malformed endpoint name for " + rank_name(r);
      else if (v->substr(0, bar) != provider_)
        why = rank_name(r) + " uses libfabric provider " + v->substr(0, bar) + ", this rank " + provider_ +
              " (set FI_PROVIDER or OPTCAST_OFI_PROVIDER alike on every rank)";
      if (!why.empty()) throw setup_error(make_error_code(errc::protocol_violation), why);
      length[static_cast<std::size_t>(r)] = name.size();
      // Providers may read a fixed address length rather than the name's own (shm's
      // names are strings, its AV copies its maximum name length): zeros past the end.
      name.resize(std::max<std::size_t>(name.size(), 512), 0);
    }
    addrs_.assign(static_cast<std::size_t>(cfg_.size), FI_ADDR_UNSPEC);
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

  int rank() const noexcept override { return cfg_.rank; }
  int size() const noexcept override { return cfg_.size; }
  int ports() const noexcept override { return cfg_.ports; }
  std::string_view name() const noexcept override { return "ofi"; }
  const std::string& provider() const noexcept { return provider_; }

  bool start(operation& op) noexcept override {
    if (auto ec = check_op(*this, op)) return fail_now(op, ec, "bad operation");
    if (failure()) return fail_now(op, failure(), failure_detail());
    if (op.size > max_msg_)
      return fail_now(op, make_error_code(errc::invalid_argument), "message larger than the provider's " + std::to_string(max_msg_) + " B");
    op.fabric_state = st_none;
    mr_of(op) = nullptr;
    if (auto ec = submit(op); ec) return fail_now(op, ec, last_error());
    return false;
  }

  void cancel(operation& op, std::error_code ec) noexcept override {
    if (op.finished) return;
    switch (op.fabric_state) {
      case st_retry:
        retry_.remove(op);
        break;
      case st_posted:
        // With the endpoint closed, abort() is completing everything already.
        if (!ep_) return;
        // The provider finishes it with FI_ECANCELED (or normally, if too late); the
        // error to report waits in op.ec until then.
        op.fabric_state = st_cancelling;
        op.ec = ec;
        fi_cancel(&ep_->fid, op.fabric_ctx);
        return;
      default:
        return;
    }
    op.fabric_state = st_none;
    op.complete(ec);
  }

  std::uint64_t arm_deadline(std::uint32_t seq, std::chrono::nanoseconds t) override { return deadlines_.arm(seq, t); }
  void disarm_deadline(std::uint64_t token) noexcept override { deadlines_.disarm(token); }

  void run_until(stop_predicate done) override {
    while (!done()) {
      if (io_.stopped()) io_.restart();
      io_.run_one();
    }
  }

  // Closing the endpoint makes the provider drop every outstanding operation (no
  // completion, no further access to their buffers); only then are they completed here.
  void abort(std::error_code ec, std::string detail) noexcept override {
    note_failure(ec, detail);
    ep_.reset();
    auto alive = alive_;
    auto fail_all = [&](detail::op_queue& q) {
      while (operation* op = q.pop_front()) {
        release_mr(*op);
        op->fabric_state = st_none;
        note_error(detail + ": " + describe_op(*op));
        op->complete(ec);
        if (!*alive) return false;
      }
      return true;
    };
    if (fail_all(posted_)) fail_all(retry_);
  }

private:
  static std::string addr_key(int r) { return "optcast/ofi/" + std::to_string(r); }

  bool fail_now(operation& op, std::error_code ec, const std::string& why) {
    note_error(why + ": " + describe_op(op));
    return op.finish_now(ec);
  }

  enum class posted { yes, again, failed };

  // Hands an operation to the provider, or queues it behind those the provider refused
  // with -FI_EAGAIN (they are retried, in order, after progress).
  std::error_code submit(operation& op) {
    std::error_code ec;
    if (retry_.empty()) {
      const auto r = try_post(op, ec);
      if (r != posted::again) return ec;
    }
    op.fabric_state = st_retry;
    retry_.push_back(op);
    progress_soon();
    return {};
  }

  posted try_post(operation& op, std::error_code& ec) {
    if (!ep_) {
      ec = failure() ? failure() : make_error_code(errc::broken);
      return posted::failed;
    }
    void* desc = nullptr;
    if (register_ && op.size) {
      fid_mr* mr = nullptr;
      // Keys are ours to choose, and must be unique, unless the provider picks them.
      const std::uint64_t key = (info_->domain_attr->mr_mode & FI_MR_PROV_KEY) ? 0 : ++last_key_;
      const int ret = fi_mr_reg(domain_.get(), op.data, op.size, op.kind == op_kind::send ? FI_SEND : FI_RECV, 0, key, 0, &mr, nullptr);
      if (ret) {
        note_error("fi_mr_reg: " + fi_error(ret) + ": " + describe_op(op));
        ec = make_error_code(errc::invalid_argument);
        return posted::failed;
      }
      mr_of(op) = mr;
      desc = fi_mr_desc(mr);
    }
    static std::byte empty{};
    std::byte* buf = op.size ? op.data : &empty;
    const fi_addr_t addr = addrs_[static_cast<std::size_t>(op.peer)];
    const ssize_t ret = op.kind == op_kind::send
                            ? fi_tsend(ep_.get(), buf, op.size, desc, addr, op.tg.packed(), op.fabric_ctx)
                            : fi_trecv(ep_.get(), buf, op.size, desc, addr, op.tg.packed(), 0, op.fabric_ctx);
    if (ret == -FI_EAGAIN) {
      release_mr(op);
      return posted::again;
    }
    if (ret) {
      release_mr(op);
      note_error(std::string(op.kind == op_kind::send ? "fi_tsend: " : "fi_trecv: ") + fi_error(static_cast<int>(ret)) + ": " + describe_op(op));
      ec = make_error_code(errc::peer_lost);
      return posted::failed;
    }
    op.fabric_state = st_posted;
    posted_.push_back(op);
    if (!wait_.is_open()) progress_soon();  // polling providers need us to come back
    return posted::yes;
  }

  void release_mr(operation& op) {
    if (fid_mr*& mr = mr_of(op)) {
      fi_close(&mr->fid);
      mr = nullptr;
    }
  }

  static operation& op_of(void* ctx) {
    return *reinterpret_cast<operation*>(static_cast<char*>(ctx) - offsetof(operation, fabric_ctx));
  }

  void finish(operation& op, std::error_code ec) {
    posted_.remove(op);
    release_mr(op);
    op.fabric_state = st_none;
    op.complete(ec);
  }

  // Reads the CQ until it is empty; completions resume their coroutines. Returns whether
  // anything completed.
  bool drain() {
    bool any = false;
    auto alive = alive_;
    std::array<fi_cq_tagged_entry, 16> entries{};
    while (cq_ && ep_) {
      const ssize_t n = fi_cq_read(cq_.get(), entries.data(), entries.size());
      if (n == -FI_EAGAIN) break;
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry err{};
        if (fi_cq_readerr(cq_.get(), &err, 0) != 1) break;
        operation& op = op_of(err.op_context);
        std::error_code ec;
        const int code = err.err < 0 ? -err.err : err.err;  // shm reports it negated
        if (code == FI_ETRUNC) {
          // olen, the bytes that did not fit, is not reported by every provider (shm
          // leaves it 0). Either way the provider wrote only what fits.
          note_error("size mismatch: " + describe_op(op) + " got a larger message" +
                     (err.olen ? " of " + std::to_string(op.size + err.olen) + " B" : std::string()));
          ec = make_error_code(errc::size_mismatch);
        } else if (code == FI_ECANCELED && op.fabric_state == st_cancelling) {
          ec = op.ec;  // ours (a failed sibling, a deadline)
        } else {  // including FI_ECANCELED we did not ask for: shm's for a dead peer
          note_error(describe_op(op) + ": " + fi_cq_strerror(cq_.get(), err.prov_errno, err.err_data, nullptr, 0) + " (" + fi_error(err.err) + ")");
          ec = make_error_code(errc::peer_lost);
        }
        any = true;
        finish(op, ec);
        if (!*alive) return true;
        continue;
      }
      if (n < 0) {
        abort(make_error_code(errc::protocol_violation), "fi_cq_read: " + fi_error(static_cast<int>(n)));
        return true;
      }
      for (ssize_t i = 0; i < n; ++i) {
        operation& op = op_of(entries[static_cast<std::size_t>(i)].op_context);
        std::error_code ec;
        if (op.kind == op_kind::recv && entries[static_cast<std::size_t>(i)].len != op.size) {
          note_error("size mismatch: " + describe_op(op) + " got a message of " + std::to_string(entries[static_cast<std::size_t>(i)].len) + " B");
          ec = make_error_code(errc::size_mismatch);
        }
        any = true;
        finish(op, ec);
        if (!*alive) return true;
      }
    }
    // Operations the provider could not take before (-FI_EAGAIN), in order.
    while (ep_ && !retry_.empty()) {
      operation& op = *retry_.pop_front();
      std::error_code ec;
      const auto r = try_post(op, ec);  // links it into posted_ when taken
      if (r == posted::yes) continue;
      if (r == posted::again) {  // still full: back at the head, after more progress
        retry_.push_front(op);
        break;
      }
      op.fabric_state = st_none;
      op.complete(ec);
      if (!*alive) return true;
    }
    return any;
  }

  void progress() {
    progress_posted_ = false;
    auto alive = alive_;
    const bool any = drain();
    if (!*alive) return;
    // Polling without a wait object: when nothing arrived, give the processor to the
    // ranks we are waiting for (several ranks commonly share a core).
    if (!any && !wait_.is_open()) sched_yield();
    arm();
  }

  void progress_soon() {
    if (progress_posted_) return;
    progress_posted_ = true;
    asio::post(io_, [this, alive = alive_] {
      if (*alive) progress();
    });
  }

  // Sleeps on the CQ's fd when libfabric says nothing is pending (fi_trywait); polls
  // while operations are outstanding when there is no fd.
  void arm() {
    if (!cq_ || !ep_) return;
    if (!wait_.is_open()) {
      if (!posted_.empty() || !retry_.empty()) progress_soon();
      return;
    }
    if (waiting_) return;
    fid* f = &cq_->fid;
    if (fi_trywait(fabric_.get(), &f, 1) != FI_SUCCESS) return progress_soon();
    waiting_ = true;
    wait_.async_wait(asio::posix::stream_descriptor::wait_read, [this, alive = alive_](std::error_code ec) {
      if (!*alive) return;
      waiting_ = false;
      if (!ec) progress();
    });
  }

  void expire(std::uint32_t seq) {
    std::string waiting;
    for (operation* op = posted_.front(); op; op = op->next)
      if (op->tg.seq == seq) waiting += "; " + describe_op(*op);
    abort(make_error_code(errc::timeout), "deadline of collective " + std::to_string(seq) + " passed on " + rank_name(cfg_.rank) +
                                              (waiting.empty() ? "" : " waiting for" + waiting.substr(1)));
  }

  asio::io_context& io_;
  config cfg_;
  std::unique_ptr<job> job_;
  std::string provider_;
  bool register_ = false;
  std::size_t max_msg_ = 0;
  std::uint64_t last_key_ = 0;
  std::vector<fi_addr_t> addrs_;  // per rank, from the address vector
  info_ptr info_;
  fid_ptr<fid_fabric> fabric_;
  fid_ptr<fid_domain> domain_;
  fid_ptr<fid_cq> cq_;
  fid_ptr<fid_av> av_;
  fid_ptr<fid_ep> ep_;
  asio::posix::stream_descriptor wait_;
  bool waiting_ = false;
  bool progress_posted_ = false;
  bool closing_ = false;
  detail::op_queue posted_;  // with the provider
  detail::op_queue retry_;   // refused with -FI_EAGAIN, to post after progress
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
  detail::deadline_table deadlines_;
};

}  // namespace

bool available() noexcept { return true; }

std::vector<std::string> providers() {
  std::vector<std::string> out;
  fi_info* list = nullptr;
  auto hints = make_hints("", false);
  if (fi_getinfo(api_version, nullptr, nullptr, 0, hints.get(), &list) == 0) {
    for (fi_info* i = list; i; i = i->next) {
      std::string n = i->fabric_attr->prov_name;
      if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
    }
    fi_freeinfo(list);
  }
  return out;
}

config config::from_env() {
  config c;
  static_cast<job_config&>(c) = job_config::from_env();
  if (const char* p = std::getenv("OPTCAST_OFI_PROVIDER")) c.provider = p;
  if (const char* m = std::getenv("OPTCAST_OFI_MR")) c.register_always = std::string(m) == "always";
  return c;
}

std::shared_ptr<optcast::fabric> connect(asio::io_context& io, const config& cfg) {
  auto f = std::make_shared<ofi_fabric>(io, cfg);
  f->bootstrap();
  return f;
}

std::string provider(const optcast::fabric& f) {
  auto* o = dynamic_cast<const ofi_fabric*>(&f);
  return o ? o->provider() : std::string();
}

}  // namespace optcast::ofi
