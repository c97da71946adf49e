// What shrink and grow share (membership.hpp).
#include "survival/survivors.hpp"

#include <coroutine>
#include <mutex>
#include <optional>

#include "optcast/collectives.hpp"

#include "runtime/comm_access.hpp"
#include "membership/sub_fabric.hpp"

namespace optcast::detail {

namespace {

// survivable::agree as something to co_await. It refers to the members and the contribution
// where they live (the awaiting coroutine's frame), and copies them at the start.
class agreement_awaiter {
public:
  agreement_awaiter(survivable& s, std::uint32_t id, std::uint32_t n, const std::vector<int>& members, const agreement& mine,
                    std::chrono::milliseconds timeout)
      : s_(s), id_(id), n_(n), members_(members), mine_(mine), timeout_(timeout) {}

  bool await_ready() const noexcept { return false; }
  bool await_suspend(std::coroutine_handle<> h) {
    s_.agree(id_, n_, members_, mine_, timeout_, [this](result<agreement> r) {
      out_ = std::move(r);
      if (waiting_) waiting_.resume();
    });
    if (out_) return false;  // decided at once (alone, or the fabric refused)
    waiting_ = h;
    return true;
  }
  result<agreement> await_resume() { return std::move(*out_); }

private:
  survivable& s_;
  std::uint32_t id_, n_;
  const std::vector<int>& members_;
  const agreement& mine_;
  std::chrono::milliseconds timeout_;
  std::optional<result<agreement>> out_;
  std::coroutine_handle<> waiting_;
};

constexpr std::size_t id_words = seq_layout::ids / 64;

}  // namespace

std::vector<int> job_ranks(const communicator& c) {
  std::vector<int> m(static_cast<std::size_t>(c.size()));
  for (int r = 0; r < c.size(); ++r) m[static_cast<std::size_t>(r)] = job_rank(c, r);
  return m;
}

task<result<agreement>> agree_among(communicator& c, const std::vector<int>& members, const agreement& mine) {
  auto& f = c.get_fabric();
  auto* s = f.survival();
  if (!s) {  // a fabric that fails as a whole has no survivors to agree among
    comm_access::record_error(c, "this fabric (" + std::string(f.name()) + ") cannot agree among survivors");
    co_return fail(errc::invalid_argument);
  }
  const std::uint32_t n = comm_access::next_agreement(c);
  agreement_awaiter wait(*s, c.id(), n, members, mine, c.options().timeout);
  auto r = co_await wait;
  if (!r) comm_access::record_error(c, f.last_error());
  co_return r;
}

std::vector<std::uint64_t> ids_in_use(communicator& c) {
  std::vector<std::uint64_t> words(id_words, 0);
  auto space = comm_access::space(c);
  std::lock_guard lock(space->mu);
  for (std::size_t i = 0; i < seq_layout::ids; ++i)
    if (space->in_use.test(i)) words[i / 64] |= std::uint64_t{1} << (i % 64);
  return words;
}

std::uint32_t free_id(const std::vector<std::uint64_t>& words) {
  for (std::uint32_t i = 1; i < seq_layout::reserved_id; ++i)
    if (i / 64 >= words.size() || !(words[i / 64] >> (i % 64) & 1)) return i;
  return 0;
}

std::shared_ptr<fabric> job_fabric_of(communicator& c) {
  auto* view = dynamic_cast<sub_fabric*>(&c.get_fabric());
  return view ? view->base() : c.shared_fabric();
}

communicator member_of(communicator& c, std::vector<int> members, std::uint32_t id) {
  auto space = comm_access::space(c);
  auto base = job_fabric_of(c);
  {
    std::lock_guard lock(space->mu);
    space->in_use.set(id);
  }
  if (auto* s = base->survival()) s->enroll(id, members);
  const int me = base->rank();
  const int rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());
  auto sub = std::make_shared<sub_fabric>(std::move(base), std::move(members), rank);
  sub->leaves_job = true;
  return comm_access::sub(std::move(sub), c.options(), std::move(space), id);
}

}  // namespace optcast::detail
