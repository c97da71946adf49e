// Grow (optcast/survive.hpp): a replacement for a failed rank joins a running job through
// its store, and the members take it into a communicator of them all.
#include <algorithm>
#include <chrono>
#include <coroutine>
#include <cstdint>

#include <asio/steady_timer.hpp>

#include "optcast/collectives.hpp"
#include "optcast/fabric_base.hpp"
#include "optcast/survive.hpp"
#include "runtime/comm_access.hpp"
#include "survival/survivors.hpp"

namespace optcast {

namespace {

using clock = std::chrono::steady_clock;
using detail::comm_access;
constexpr auto look_every = std::chrono::milliseconds(2);

// A moment on the fabric's loop, between looks at what the store has said. The timer is
// a named variable of the awaiting frame: GCC 12 may end a temporary of a co_await's
// operand before the coroutine resumes (it did here, and the handler ran on a freed one).
struct pause {
  asio::steady_timer& timer;
  bool await_ready() const noexcept { return false; }
  void await_suspend(std::coroutine_handle<> h) {
    timer.expires_after(look_every);
    timer.async_wait([h](std::error_code) { h.resume(); });
  }
  void await_resume() const noexcept {}
};
// The job's fabric under c as the one that takes replacements, or null (with why in c).
fabric_base* growing_fabric(communicator& c, const std::shared_ptr<fabric>& base, const char* what) {
  auto* fb = dynamic_cast<fabric_base*>(base.get());
  if (!fb || !fb->takes_replacements() || !base->executor()) {
    comm_access::record_error(c, std::string(what) + ": this fabric (" + std::string(base->name()) +
                                     ") takes no replacements (TCP and libfabric's tcp;ofi_rxm over optcast's TCP store do)");
    return nullptr;
  }
  return fb;
}

// Everyone in, the replacements too: then the communicator works for every collective.
// Past the agreement every member and replacement holds `out`, so a death now returns it
// all the same (broken where that is known, as a shrink's result with a member that died
// during it): every one of them can then shrink the same communicator. Another failure
// (the deadline, no death known) fails.
task<result<communicator>> first_barrier(communicator& c, communicator out, collective_options o, const char* what) {
  auto b = co_await barrier(out, o);
  if (b || b.error() == make_error_code(errc::peer_lost) || b.error() == make_error_code(errc::revoked) ||
      b.error() == make_error_code(errc::broken))
    co_return out;
  comm_access::record_error(c, std::string(what) + ": the grown communicator's first barrier failed: " + out.last_error());
  co_return fail(b.error());
}

}  // namespace

task<result<communicator>> grow(communicator& c, int replacements) {
  using namespace detail;
  auto base = job_fabric_of(c);
  auto* fb = growing_fabric(c, base, "grow");
  if (!fb) co_return fail(errc::invalid_argument);
  const auto members = job_ranks(c);
  const int outside = base->size() - c.size();
  if (replacements < 1 || replacements > outside) {
    comm_access::record_error(c, "grow: " + std::to_string(replacements) + " replacements, and " + std::to_string(outside) +
                                     " ranks of the job are not members of this communicator");
    co_return fail(errc::invalid_argument);
  }
  const auto is_member = [&](int j) { return std::find(members.begin(), members.end(), j) != members.end(); };
  const auto timeout = c.options().timeout;
  asio::steady_timer timer(*base->executor());

  // Rank 0 of c names the replacements, the first that are ready here (up to the deadline).
  std::vector<std::int32_t> named(static_cast<std::size_t>(replacements), -1);
  if (c.rank() == 0) {
    const auto until = clock::now() + timeout;
    for (;;) {
      std::vector<int> ready;
      for (int j : fb->joiners())
        if (!is_member(j)) ready.push_back(j);
      if (static_cast<int>(ready.size()) >= replacements || clock::now() >= until || fb->failure()) {
        for (std::size_t i = 0; i < named.size() && i < ready.size(); ++i) named[i] = ready[i];
        break;
      }
      co_await pause{timer};
    }
  }
  collective_options o;
  o.timeout = 2 * timeout + std::chrono::seconds(1);  // rank 0 may wait out `timeout` first
  // A failed broadcast (a member died) goes on to the agreement with nothing named: every
  // member then learns the same failure there, and fails alike (shrink, then grow again).
  if (auto b = co_await broadcast(c, std::span<std::int32_t>(named), 0, o); !b) std::fill(named.begin(), named.end(), -1);
  std::vector<int> joining;
  for (auto j : named)
    if (j >= 0 && j < base->size() && !is_member(j) && std::find(joining.begin(), joining.end(), j) == joining.end()) joining.push_back(j);
  const bool all_named = static_cast<int>(joining.size()) == replacements;

  // Every member's fabric must have made room for them (the store tells each on its own).
  const auto ready_here = [&] {
    const auto js = fb->joiners();
    return std::all_of(joining.begin(), joining.end(), [&](int j) { return std::find(js.begin(), js.end(), j) != js.end(); });
  };
  for (const auto until = clock::now() + timeout; all_named && !ready_here() && clock::now() < until && !fb->failure();)
    co_await pause{timer};

  agreement mine;
  mine.words = ids_in_use(c);
  mine.flag = all_named && ready_here() ? 1 : 0;
  auto r = co_await agree_among(c, members, mine);
  if (!r) co_return fail(r.error());
  if (!r->failed.empty()) {
    comm_access::record_error(c, "grow: rank " + std::to_string(r->failed.front()) + " of the job failed meanwhile (shrink, then grow)");
    co_return fail(errc::peer_lost);
  }
  if (!(r->flag & 1)) {
    comm_access::record_error(c, all_named ? "grow: a replacement was not ready on every member within " + std::to_string(timeout.count()) + " ms"
                                           : "grow: " + std::to_string(joining.size()) + " of " + std::to_string(replacements) +
                                                 " replacements came within " + std::to_string(timeout.count()) + " ms");
    co_return fail(errc::timeout);
  }
  const std::uint32_t id = free_id(r->words);
  if (!id) {
    comm_access::record_error(c, "grow: every communicator id is in use on some member");
    co_return fail(errc::limit_exceeded);
  }
  std::vector<int> all = members;
  all.insert(all.end(), joining.begin(), joining.end());
  std::sort(all.begin(), all.end());
  auto out = member_of(c, all, id);
  // From every member: the word reaches the replacements while any of them lives (they
  // take the first), so every holder of `out` can shrink it with them.
  for (int j : joining) fb->admit_replacement(j, id, all);
  co_return co_await first_barrier(c, std::move(out), o, "grow");
}

task<result<communicator>> admitted(communicator& world, std::chrono::milliseconds wait) {
  using namespace detail;
  auto base = job_fabric_of(world);
  auto* fb = growing_fabric(world, base, "admitted");
  if (!fb) co_return fail(errc::invalid_argument);
  if (!fb->replacement()) {
    comm_access::record_error(world, "admitted: this process is no replacement (OPTCAST_REJOIN=1, job_config::rejoin)");
    co_return fail(errc::invalid_argument);
  }
  const auto until = clock::now() + wait;
  asio::steady_timer timer(*base->executor());
  std::optional<std::pair<std::uint32_t, std::vector<int>>> a;
  while (!(a = fb->take_admission())) {
    if (auto ec = fb->failure()) {
      comm_access::record_error(world, "admitted: " + fb->failure_detail());
      co_return fail(ec);
    }
    if (clock::now() >= until) {
      comm_access::record_error(world, "admitted: no member took this replacement in within " + std::to_string(wait.count()) +
                                           " ms (do the members call grow?)");
      co_return fail(errc::timeout);
    }
    co_await pause{timer};
  }
  auto out = member_of(world, std::move(a->second), a->first);
  fb->admitted();  // from now on its death fails the job as any member's
  collective_options o;
  o.timeout = 2 * world.options().timeout + std::chrono::seconds(1);
  co_return co_await first_barrier(world, std::move(out), o, "admitted");
}

}  // namespace optcast
