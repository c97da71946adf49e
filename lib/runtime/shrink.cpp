// Revoke, agree, shrink (optcast/survive.hpp): the communicator's side of what the
// fabric's survival layer (survival.hpp, agreement.hpp) does.
#include "optcast/survive.hpp"

#include <algorithm>
#include <array>
#include <coroutine>
#include <optional>

#include "optcast/collectives.hpp"
#include "runtime/comm_access.hpp"
#include "runtime/sub_fabric.hpp"

namespace optcast {

namespace {

// fabric::agree as something to co_await. It refers to the members and the contribution
// where they live (the awaiting coroutine's frame), and copies them at the start.
class agreement_awaiter {
public:
  agreement_awaiter(fabric& f, std::uint32_t id, std::uint32_t n, const std::vector<int>& members, const agreement& mine,
                    std::chrono::milliseconds timeout)
      : f_(f), id_(id), n_(n), members_(members), mine_(mine), timeout_(timeout) {}

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) {
    f_.agree(id_, n_, members_, mine_, timeout_, [this](result<agreement> r) {
      out_ = std::move(r);
      if (waiting_) waiting_.resume();
    });
    if (out_) return false;  // decided at once (alone, or the fabric refused)
    waiting_ = h;
    return true;
  }
  result<agreement> await_resume() { return std::move(*out_); }

private:
  fabric& f_;
  std::uint32_t id_, n_;
  const std::vector<int>& members_;
  const agreement& mine_;
  std::chrono::milliseconds timeout_;
  std::optional<result<agreement>> out_;
  std::coroutine_handle<> waiting_;
};

std::vector<int> job_ranks(const communicator& c) {
  std::vector<int> m(static_cast<std::size_t>(c.size()));
  for (int r = 0; r < c.size(); ++r) m[static_cast<std::size_t>(r)] = job_rank(c, r);
  return m;
}

// The agreement among c's members (job ranks, `members`), its failed ranks still the
// job's. The caller's frame keeps `members` and `mine`.
task<result<agreement>> agree_among(communicator& c, const std::vector<int>& members, const agreement& mine) {
  auto& f = c.get_fabric();
  const std::uint32_t n = detail::comm_access::next_agreement(c);
  agreement_awaiter wait(f, c.id(), n, members, mine, c.options().timeout);
  auto r = co_await wait;
  if (!r) detail::comm_access::record_error(c, f.last_error());
  co_return r;
}

constexpr std::size_t id_words = seq_layout::ids / 64;

}  // namespace

void revoke(communicator& c, std::string why) {
  std::string text = "rank " + std::to_string(c.rank()) + " of communicator " + std::to_string(c.id()) + " revoked it";
  if (!why.empty()) text += ": " + why;
  c.get_fabric().revoke(c.id(), make_error_code(errc::revoked), std::move(text));
}

task<result<agreement>> agree(communicator& c, std::uint64_t flag) {
  const auto members = job_ranks(c);
  agreement mine;
  mine.flag = flag;
  auto r = co_await agree_among(c, members, mine);
  if (!r) co_return r;
  // Job ranks to c's.
  std::vector<int> failed;
  for (int j : r->failed)
    if (auto it = std::find(members.begin(), members.end(), j); it != members.end()) failed.push_back(static_cast<int>(it - members.begin()));
  std::sort(failed.begin(), failed.end());
  r->failed = std::move(failed);
  co_return r;
}

task<result<communicator>> shrink(communicator& c) {
  const auto members = job_ranks(c);
  auto space = detail::comm_access::space(c);
  // With the decision, the ids in use on any survivor: the new communicator takes one
  // that none of them uses (as split does).
  agreement mine;
  mine.words.assign(id_words, 0);
  {
    std::lock_guard lock(space->mu);
    for (std::size_t i = 0; i < seq_layout::ids; ++i)
      if (space->in_use.test(i)) mine.words[i / 64] |= std::uint64_t{1} << (i % 64);
  }
  auto r = co_await agree_among(c, members, mine);
  if (!r) co_return fail(r.error());
  std::vector<int> survivors;
  for (int j : members)
    if (!std::binary_search(r->failed.begin(), r->failed.end(), j)) survivors.push_back(j);
  auto& f = c.get_fabric();
  const auto me = std::find(survivors.begin(), survivors.end(), job_rank(c, c.rank()));
  if (me == survivors.end()) {
    detail::comm_access::record_error(c, "shrink: the other members took this rank (" + std::to_string(c.rank()) + ") for failed");
    co_return fail(errc::peer_lost);
  }
  std::uint32_t id = 0;
  for (std::uint32_t i = 1; i < seq_layout::reserved_id && !id; ++i)
    if (i / 64 >= r->words.size() || !(r->words[i / 64] >> (i % 64) & 1)) id = i;
  if (!id) {
    detail::comm_access::record_error(c, "shrink: every communicator id is in use on some survivor");
    co_return fail(errc::limit_exceeded);
  }
  auto* view = dynamic_cast<detail::sub_fabric*>(&f);
  std::shared_ptr<fabric> base = view ? view->base() : c.shared_fabric();
  {
    std::lock_guard lock(space->mu);
    space->in_use.set(id);
  }
  base->enroll(id, survivors);
  base->excuse(r->failed);  // the job's outcome counts them no more
  const int rank = static_cast<int>(me - survivors.begin());
  auto sub = std::make_shared<detail::sub_fabric>(std::move(base), std::move(survivors), rank);
  sub->leaves_job = true;
  co_return detail::comm_access::sub(std::move(sub), c.options(), space, id);
}

}  // namespace optcast
