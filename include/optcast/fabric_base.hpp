// For writers of fabrics: the base every fabric that carries messages derives from (TCP,
// libfabric, the in-process and simulated ones), with the bookkeeping of the calls in
// flight that lets a receiver tell a message of a call unlike its own (errc::call_mismatch,
// naming both calls) from one of another size, one that came late, or a peer that left.
// A fabric that is a view of another (a sub-communicator's) derives from fabric itself and
// forwards sign, unsign and signature_of to the one it views.
//
// Installed: a fabric of one's own is written against this and optcast/fabric.hpp
// (CONTRIBUTING.md, "Adding a fabric"; tests/fault_fabric.hpp is a small one).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "optcast/fabric.hpp"

namespace optcast {

namespace detail {
class survival;  // lib/survival/survival.hpp: dead peers, revocations, agreements
}

class fabric_base : public fabric, public survivable {
public:
  // The longest control message there is: a transport that must post a buffer for one
  // before it arrives (libfabric) posts this many bytes (lib/survival/control_wire.hpp's
  // limits; it checks the two agree).
  static constexpr std::size_t max_control_bytes = 36 + 8 * (64 + 1024) + 1024;

  fabric_base();
  ~fabric_base() override;

  // Surviving a failure (optcast/survivable.hpp): kept here for every fabric that derives
  // from this one, and offered as its survival() where the transport says it survives
  // (survives_failures(); it calls the protected hooks below). The others fail as a whole
  // on a peer's loss or a revocation (abort) and refuse agreements.
  survivable* survival() const noexcept override;
  bool peer_alive(int r) const noexcept override;
  void enroll(std::uint32_t id, std::vector<int> members) override;
  void retire(std::uint32_t id) noexcept override;
  void revoke(std::uint32_t id, std::error_code ec, std::string detail) noexcept override;
  std::error_code revoked(std::uint32_t id) const noexcept override;
  std::string revocation(std::uint32_t id) const override;
  void agree(std::uint32_t id, std::uint32_t n, std::vector<int> members, agreement mine, std::chrono::milliseconds timeout,
             agreement_done done) override;
  // The job's outcome counts `gone` no more: the multi-process fabrics tell their store.
  void excuse(std::vector<int> gone) override { (void)gone; }

  // ---- replacements (optcast::grow): a process that takes a failed rank's place
  // Whether this fabric can take one in (TCP and libfabric's tcp;ofi_rxm, over
  // optcast's TCP store).
  virtual bool takes_replacements() const noexcept { return false; }
  // Whether this process is one, waiting to be taken in (job_config::rejoin).
  virtual bool replacement() const noexcept { return false; }
  // Job ranks whose replacements are ready and that this rank has not admitted.
  std::vector<int> joiners() const;
  // Tells replacement `to` that it is a member of communicator `id` (job ranks `members`,
  // ascending); it tells the store itself once it takes the word (admitted()).
  void admit_replacement(int to, std::uint32_t id, const std::vector<int>& members);
  // On a replacement: the communicator a member admitted it to, once (nullopt until then).
  std::optional<std::pair<std::uint32_t, std::vector<int>>> take_admission();
  // On a replacement, once admitted: its death fails the job from now on (the store hears).
  virtual void admitted() noexcept {}

  void sign(std::uint32_t seq, const call_signature& s) override;
  void unsign(std::uint32_t seq) noexcept override;
  call_signature signature_of(std::uint32_t seq) const noexcept override;

  // When a message for receive `op` arrives signed `theirs`: true if it matches this
  // rank's call; otherwise records why (both calls) and returns false, and the fabric
  // fails `op` with errc::call_mismatch.
  bool signature_matches(const operation& op, const call_signature& theirs);
  bool signature_hash_matches(const operation& op, std::uint64_t theirs);
  // The same for a message of collective `seq` from `src` (-1: unknown) that only its
  // signature's hash tells of.
  bool signature_hash_matches(std::uint32_t seq, int src, std::uint64_t theirs);
  // A message of `bytes` signed `theirs` arrived for receive `op`: call_mismatch if the
  // calls differ, else size_mismatch if the sizes do (with the reason recorded), else none.
  std::error_code arrival_error(const operation& op, const call_signature& theirs, std::size_t bytes);
  // A message of another size than receive `op`'s (`got` says what arrived): in a
  // collective, where equal calls exchange equal sizes, call_mismatch; else
  // size_mismatch. The reason is recorded.
  std::error_code size_error(const operation& op, const std::string& got);
  // A message of collective `seq` signed `theirs` arrived from `src` with no receive
  // posted for it: false (with both calls recorded) if this rank has signed that
  // collective differently, which no later receive could put right (another root or
  // schedule may never post one). Fabrics check on arrival and, for what arrived before
  // the call started, in sign().
  bool unexpected_consistent(int src, std::uint32_t seq, const call_signature& theirs);

protected:
  // ---- for transports that survive a peer's death
  // A transport that does (it calls the hooks below) says so.
  virtual bool survives_failures() const noexcept { return false; }
  // A message tagged control_seq arrived from `src` (no receive is posted for one): its
  // meaning is handled here. A malformed one fails the fabric (protocol_violation).
  void control_arrived(int src, std::span<const std::byte> payload) noexcept;
  // Job rank r died, or is to be taken for dead (its own report, the store's word, a
  // broken link with no word within loss_grace): what waits on it is the transport's to
  // fail first (its connections); this revokes every communicator r is in, with `ec` and
  // `why`, and tells agreements in progress. False if r was known dead already.
  bool peer_died(int r, std::error_code ec, const std::string& why) noexcept;
  // A replacement for dead job rank r is ready, and the transport has made room for it
  // (fresh connections): it is alive again, a member of communicators made from now on.
  void peer_replaced(int r);
  // The transport fails every pending operation of communicator `id` (not control
  // messages) with `ec`, drops what it holds for it, and drops what comes for it later
  // (revoked() says so).
  virtual void fail_communicator(std::uint32_t id, std::error_code ec, const std::string& why) noexcept {
    (void)id, (void)ec, (void)why;
  }
  // Why `op` may not start (its peer is dead, or its communicator revoked), with what to
  // say in `why`; none if it may.
  std::error_code refusal(const operation& op, std::string& why) const;
  // The fabric failed as a whole: agreements in progress end with `ec`.
  void end_agreements(std::error_code ec, const std::string& why) noexcept;
  // Control messages posted and not yet sent: a closing fabric gives them a moment (a
  // survivor that exits right after its failure still tells the others why).
  std::size_t control_in_flight() const noexcept;
  // Control messages in flight or an agreement under way: a polling transport keeps
  // polling for their messages.
  bool surviving_busy() const noexcept;
  // "; agreement 2 of communicator 0 waiting for rank 3" for each agreement that waits
  // (on a peer's word), for a stall's inquiry into control_seq's deadline.
  std::string agreements_waiting() const;

  // Records that a message of collective `seq` from `src`, signed `theirs`, was never
  // received by this rank's call `mine` (leftover()).
  void note_unreceived(int src, std::uint32_t seq, const call_signature& theirs, const call_signature& mine);
  // The outcome of leave(), from the job's (`job`, `job_detail`) and this rank's own
  // failure before it closed (`own`, a closing's `cancelled` not counted).
  result<void> settle_outcome(const result<void>& job, const std::string& job_detail, std::error_code own, const std::string& own_detail);
  // The newest collective this rank finished (seq, signature; an empty signature: none),
  // which a goodbye to the peers names.
  std::pair<std::uint32_t, call_signature> newest_finished() const noexcept { return finished_newest_; }
  // This rank's signature of collective `seq`, running or among the latest it finished
  // (empty: neither), for the store's inquiry into a stall.
  call_signature call_made(std::uint32_t seq) const noexcept;
  // Receive `op` waits on a peer that has left the job in good order, whose newest
  // finished collective was `their_seq`, signed `theirs`: nothing more will come from it.
  // Records why (the calls that differ, where it can tell) and returns call_mismatch.
  std::error_code peer_left(const operation& op, std::uint32_t their_seq, const call_signature& theirs);

private:
  friend class detail::survival;
  detail::survival& survival_state();
  // Made at the first death, revocation, enrollment or agreement: a simulated world's
  // million fabrics mostly see none.
  std::unique_ptr<detail::survival> survival_;

  using signed_call = std::pair<std::uint32_t, call_signature>;  // empty signature: none
  // Collectives in flight on this rank: few, so searched from the newest; the first in
  // place, the others in a vector (a simulated world's million ranks, each making one
  // call, allocate nothing for them).
  signed_call signed_one_;
  std::vector<signed_call> signed_more_;
  // The latest collectives this rank finished (up to 32), for messages of theirs that
  // come late: the newest in place, the older in a ring grown as calls finish.
  signed_call finished_newest_;
  std::vector<signed_call> finished_;
  std::size_t finished_next_ = 0;
};

// The error a rank fails with when another rank reports (by an abort frame or through
// the store) that it failed with `code`: the same, so that a mismatch or a timeout reads
// as one on every rank; peer_lost for codes that are not the other rank's job's failure
// (its shutdown, a refused call) or that are not optcast's at all.
std::error_code told_error(std::uint64_t code) noexcept;

// How long the operations a broken connection (TCP) or a failed transfer (libfabric)
// leaves waiting hold out for the reason — another rank's report of its failure, or the
// store's word that it died — before they fail with errc::peer_lost. The peer that
// failed closes its connections at once, and its report travels a round trip behind.
inline constexpr std::chrono::milliseconds loss_grace{250};

// Validates the parts of an operation every fabric checks the same way.
std::error_code check_op(const fabric& f, const operation& op) noexcept;

}  // namespace optcast
