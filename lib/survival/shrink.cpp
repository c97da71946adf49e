// Revoke, agree, shrink (optcast/survive.hpp): the communicator's side of what the
// fabric's survival layer (survival.hpp, agreement.hpp) does.
#include "optcast/survive.hpp"

#include <algorithm>

#include "optcast/collectives.hpp"

#include "runtime/comm_access.hpp"
#include "survival/survivors.hpp"

namespace optcast {

void revoke(communicator& c, std::string why) {
  std::string text = "rank " + std::to_string(c.rank()) + " of communicator " + std::to_string(c.id()) + " revoked it";
  if (!why.empty()) text += ": " + why;
  auto& f = c.get_fabric();
  if (auto* s = f.survival())
    s->revoke(c.id(), make_error_code(errc::revoked), std::move(text));
  else
    f.abort(make_error_code(errc::revoked), std::move(text));  // it fails as a whole
}

task<result<agreement>> agree(communicator& c, std::uint64_t flag) {
  using namespace detail;
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
  using namespace detail;
  const auto members = job_ranks(c);
  // With the decision, the ids in use on any survivor: the new communicator takes one
  // that none of them uses (as split does).
  agreement mine;
  mine.words = ids_in_use(c);
  auto r = co_await agree_among(c, members, mine);
  if (!r) co_return fail(r.error());
  std::vector<int> survivors;
  for (int j : members)
    if (!std::binary_search(r->failed.begin(), r->failed.end(), j)) survivors.push_back(j);
  if (std::find(survivors.begin(), survivors.end(), job_rank(c, c.rank())) == survivors.end()) {
    comm_access::record_error(c, "shrink: the other members took this rank (" + std::to_string(c.rank()) + ") for failed");
    co_return fail(errc::peer_lost);
  }
  const std::uint32_t id = free_id(r->words);
  if (!id) {
    comm_access::record_error(c, "shrink: every communicator id is in use on some survivor");
    co_return fail(errc::limit_exceeded);
  }
  auto out = member_of(c, std::move(survivors), id);
  // The job's outcome counts them no more (the agreement above had a survival face).
  if (auto* s = job_fabric_of(c)->survival()) s->excuse(r->failed);
  co_return out;
}

}  // namespace optcast
