// What shrink and grow (optcast/survive.hpp) share: a communicator's members as job
// ranks, the agreement among them, the ids in use on them, and a communicator made of
// chosen job ranks over the job's connections. Not installed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "optcast/communicator.hpp"
#include "optcast/fabric.hpp"
#include "optcast/task.hpp"

namespace optcast::detail {

std::vector<int> job_ranks(const communicator& c);
// The agreement among c's members (job ranks, `members`; failed ranks too). The caller's
// frame keeps `members` and `mine`.
task<result<agreement>> agree_among(communicator& c, const std::vector<int>& members, const agreement& mine);
// The ids in use in c's process, as agreement words (their OR over members: in use anywhere).
std::vector<std::uint64_t> ids_in_use(communicator& c);
// The lowest id no word marks (0: none is free).
std::uint32_t free_id(const std::vector<std::uint64_t>& words);
// The job's fabric under c (a sub-communicator's base).
std::shared_ptr<fabric> job_fabric_of(communicator& c);
// Communicator `id` of job ranks `members` (this rank among them, in their order) over
// c's job fabric and id space; it leaves the job when left.
communicator member_of(communicator& c, std::vector<int> members, std::uint32_t id);

}  // namespace optcast::detail
