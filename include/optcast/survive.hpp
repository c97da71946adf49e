// Surviving a failure and carrying on (what ULFM's MPIX_Comm_revoke, MPIX_Comm_agree and
// MPIX_Comm_shrink give MPI programs). When a member of a communicator dies, every
// survivor's pending and later calls on it fail (errc::peer_lost, naming the rank), on
// every communicator that member is in; the fabric and the other communicators stay
// usable. The survivors then agree on who is left and make a communicator of themselves:
//
//   if (auto r = co_await allreduce(comm, ...); !r) {
//     auto survivors = co_await shrink(comm);   // every survivor calls it
//     if (!survivors) ...                       // this rank was left out, or the fabric failed
//     comm = std::move(*survivors);             // ranks renumbered in order, same connections
//   }
//
// On TCP, the in-process fabric and libfabric's tcp;ofi_rxm (fabric::survival(), optcast/survivable.hpp);
// elsewhere (libfabric's shm, the simulator) a member's loss fails the fabric as a whole,
// and agree and shrink refuse (errc::invalid_argument).
// docs/DESIGN.md, "Surviving a failure", says how it works and what it guarantees.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "optcast/communicator.hpp"
#include "optcast/task.hpp"

namespace optcast {

// Interrupts every pending and later call of `c`, on every member: they fail with
// errc::revoked (`why` in their detail), at once, without waiting for deadlines. Agree
// and shrink still work on it. From the thread that drives c's fabric (inside a task, or
// between run() calls); optcast/asio.hpp's async_revoke from anywhere.
void revoke(communicator& c, std::string why = {});

// A fault-tolerant agreement among c's members that are alive: the AND of the flags they
// give and the ranks of c found failed (ascending). Every member that returns gets the
// same decision, however many members fail during it (a member that fails before it
// contributes is among the failed; one that contributes and then fails may or may not
// be). Collective over c in the order of its agree and shrink calls, which are numbered
// apart from its collectives: after a failure the ranks may have made different numbers
// of (failed) collectives. Works on a broken or revoked c. Fails with errc::timeout after
// c's deadline when a member neither answers nor is found dead.
task<result<agreement>> agree(communicator& c, std::uint64_t flag = ~std::uint64_t{0});

// The survivors of c as a communicator of their own: an agreement on who failed, then a
// communicator of the others in c's order (ranks renumbered), over the same connections
// (no new rendezvous), usable for every collective at once. Fails on a rank the others
// took for failed (errc::peer_lost). A member that dies during it may be in the result;
// the result is then broken at once on every rank that learns of it, and shrinking it
// again leaves that member out. Its leave() leaves the job. The store that rank 0 hosts
// is told whom the survivors went on without, and its outcome counts them no more (a
// file, Redis or PMIx job still reports the loss: a failed job).
task<result<communicator>> shrink(communicator& c);

// Growing again (the elastic case): a process started in place of a failed rank, with
// OPTCAST_REJOIN=1 (job_config::rejoin) and that rank's OPTCAST_RANK, joins the job
// through its store, and the members of c (usually a shrunk communicator) take it in:
//
//   members:      auto all = co_await grow(shrunk);                   // every member calls it
//   replacement:  auto all = co_await admitted(world, std::chrono::seconds(30));
//
// grow waits up to c's deadline for `replacements` of them (ranks of the job that are
// not members of c, ready by the store's word), agrees on them among c's members, and
// returns a communicator of the members and the replacements, in job rank order, usable
// for every collective (its first barrier has passed). Fails alike on every member, with
// errc::timeout when not enough came, errc::peer_lost when a member failed before the
// agreement (shrink c, then grow again), errc::invalid_argument where the fabric takes no
// replacements (TCP and libfabric's tcp;ofi_rxm over optcast's TCP store do; not shm, kv stores or PMIx). A
// member or replacement that dies after the agreement may be in the result, as in a
// shrink's: it is then broken on every rank that learns of it; shrink it (every member
// and replacement holds it).
// From then on the store counts the replacement as any rank. A replacement takes its
// predecessor's place in the job's layout: start it where that one ran, or alike.
task<result<communicator>> grow(communicator& c, int replacements = 1);
// On a replacement: waits up to `wait` for the members' grow, and returns the same
// communicator as theirs. `world`: the replacement's own job communicator.
task<result<communicator>> admitted(communicator& world, std::chrono::milliseconds wait);

}  // namespace optcast
