// What a fabric implements to survive a member's death (fabric::survival()). A fabric
// that has no such face (libfabric's shm, the simulator) fails as a whole when a member
// is lost (abort), and agree and shrink refuse on it.
//
// One that has it (TCP, the in-process fabric, libfabric's tcp;ofi_rxm: all through
// fabric_base, lib/survival/) marks the dead peer, fails what waits on it and revokes
// every communicator it belongs to; the other communicators, and the fabric, stay usable.
// The user's calls built on this face are optcast/survive.hpp's (revoke, agree, shrink,
// grow); docs/DESIGN.md, "Surviving a failure", says how it works.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <system_error>
#include <vector>

#include "optcast/error.hpp"

namespace optcast {

// What an agreement decides (survivable::agree): the AND of the flags and the OR of the
// words the ranks that took part gave, and the ranks found failed, ascending (job ranks at
// the fabric, the communicator's in optcast::agree).
struct agreement {
  std::uint64_t flag = ~std::uint64_t{0};
  std::vector<std::uint64_t> words;
  std::vector<int> failed;
  bool operator==(const agreement&) const = default;
};
using agreement_done = std::function<void(result<agreement>)>;

class survivable {
public:
  // Whether job rank r is alive as far as this rank knows.
  virtual bool peer_alive(int r) const noexcept = 0;
  // Communicator `id`'s members (job ranks, in its order), so that a peer's death revokes
  // exactly the communicators it is in, and a revocation reaches their members. Id 0, the
  // job's, is every rank without enrolling. A member already dead revokes it at once.
  virtual void enroll(std::uint32_t id, std::vector<int> members) = 0;
  virtual void retire(std::uint32_t id) noexcept = 0;
  // Revokes communicator `id`: every operation of it pending here fails with `ec`, and
  // every later one; its other members are told, and do the same (each tells the others
  // once, so the word survives failures on the way). Control messages and agreements on
  // it go on.
  virtual void revoke(std::uint32_t id, std::error_code ec, std::string detail) noexcept = 0;
  // Why `id` was revoked; none if it was not.
  virtual std::error_code revoked(std::uint32_t id) const noexcept = 0;
  virtual std::string revocation(std::uint32_t id) const = 0;
  // The survivors went on without job ranks `gone` (shrink): the job's outcome no longer
  // counts them, where its store can tell (optcast's TCP store).
  virtual void excuse(std::vector<int> gone) = 0;
  // Agreement number `n` of communicator `id` among `members` (job ranks in its order,
  // this rank among them): `done` gets the same decision on every member that returns,
  // whatever members fail meanwhile, or an error (timeout after `timeout`, the fabric's
  // failure). Fault-tolerant: docs/DESIGN.md, "Agreeing among survivors".
  virtual void agree(std::uint32_t id, std::uint32_t n, std::vector<int> members, agreement mine,
                     std::chrono::milliseconds timeout, agreement_done done) = 0;

protected:
  ~survivable() = default;
};

}  // namespace optcast
