// The virtual-time simulator: P ranks in one process, one thread, a discrete-event
// engine. It runs the unchanged collective coroutines and charges every message by a
// cost model, so each algorithm's optimality claim is checked by running its code.
//
// Time is a double in model units (rounds, or the cycles of L, o, g, G). The run is
// deterministic: events are ordered by (time, the order in which they were created).
//
// Timing rules. A rank has k ports (model::ports): k outgoing and k incoming channels
// that work independently and at the same time (send||recv, full duplex, as in every
// paper optcast implements). A message takes the free channel that lets it go first.
//
// rounds (Träff; Bruck, Cypher and Ho; Bar-Noy and Ho): time is counted in rounds.
//   A message sent at time t occupies one outgoing channel of the sender and one
//   incoming channel of the receiver during round [t, t+1); the receiver has it, and
//   the sender may reuse its buffer, at t + 1. A rank that starts a send while all its
//   k outgoing channels are busy, or a message that finds all k incoming channels of
//   its receiver busy, is a port violation: the run fails with errc::port_violation,
//   naming the ranks and the round. The finish time is the number of rounds.
//
// LogGP(L, o, g, G) (Alexandrov et al., Section 2 and Figure 1); LogP(L, o, g) is
//   G = 0 (Karp et al., Section 1); postal(L) is LogP(L, 0, 1) (Bar-Noy and Kipnis).
//   For a message of m bytes (m' = max(m, 1)) posted at time t on an outgoing channel:
//     start = max(t, channel's next start)          sending overhead begins
//     first = start + o                              first byte enters the network
//     last  = first + (m' - 1) G                     last byte enters; the send completes
//     next start = max(start + o, last + g - o)      consecutive injections g apart,
//                                                    overheads back to back (Figure 1)
//   The bytes reach the receiver from first + L to last + L. On the receiver's incoming
//   channel that window starts no earlier than g after the previous message's window
//   ended (it waits in the network otherwise); then the receiving overhead runs,
//   start no earlier than the window's end and the previous receive overhead's end,
//   and the data is there o later. A receive posted after that completes when posted.
//   So one message costs o + (m-1)G + L + o, consecutive sends and receives at a rank
//   are max(g, o) apart, and a rank's sending and receiving overheads do not contend
//   (the papers' analyses, e.g. Karp et al.'s all-to-all in L + 2o + (P-2)g, need this).
//   Waiting for a channel is the model, not a violation.
//
// Choosing receivers (model::choose): as above, but an arrived message waits in the
//   receiver's buffer until its receive is posted; whenever an incoming channel is
//   free, it takes, of the buffered messages whose receives are posted, the one posted
//   first (its window then starts, and the overhead follows as above).
//
// Hosts and rails (world_options::layout; LogGP-family models): ranks grouped into hosts
//   share their host's rails. A message between two hosts leaves on rail (its lane mod
//   rails): the sender pays its overhead o on its own CPU (its out channel), then its
//   bytes go out when the rail is free (first = max(start + o, rail's next start);
//   next start = last + g), and at the receiving host the same rail's incoming side
//   takes its window as above before the receiver's own overhead. Ranks of one host that
//   send to other hosts at once therefore share each rail's bandwidth, and k rails carry
//   k messages at once. A message between two ranks of one host takes neither rail: it
//   uses the ranks' own channels for host-local traffic, timed as above with the host
//   link's parameters (model::host; the network's if none). Under the rounds model and
//   when choosing receivers the layout is for the algorithms only: every rank keeps
//   ports of its own.
//
// Computation costs what fabric::compute(t) says: t passes for the rank. Deadlines: the simulator does
// not use wall-clock deadlines; a rank that can never progress is found at once instead:
// when no message is in flight and some rank still waits, the run fails with
// errc::deadlock naming the waiting ranks, their peers and tags.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "optcast/cost_model.hpp"
#include "optcast/fabric.hpp"

namespace optcast::sim {

struct rank_stats {
  double finish = 0;  // when the rank's last operation completed
  // When it could start another communication: its last operation done and, under the
  // LogP models, its last send's gap over (Alexandrov et al.'s communication finishing
  // time, footnote 4: one item sent with g > L finishes at g, not L).
  double comm_finish = 0;
  // Steps: the distinct times at which the rank started operations. In a round loop
  // that is the rounds the rank took part in.
  std::uint64_t steps = 0;
  std::uint64_t sent = 0, received = 0;
  std::uint64_t bytes_sent = 0, bytes_received = 0;
  // The longest chain of messages, each sent after its sender received the one before,
  // that ends in a message this rank received.
  std::uint32_t chain = 0;
};

// One message of a recorded run (world_options::record), in model time. Under the
// rounds model start = first = last = the round it was sent in, and it is available
// one round later.
struct message_record {
  int src = 0, dst = 0;
  tag tg{};
  std::uint64_t bytes = 0;
  double posted = 0;       // the send was posted
  double start = 0;        // its sending overhead began
  double first = 0;        // its first byte entered the network (start + o)
  double last = 0;         // its last byte did; the send completed
  double window = -1;      // its arrival window began at the receiver (-1: never)
  double rx_start = -1;    // the receiving overhead began
  double available = -1;   // the data was at the receiver
  double received = -1;    // a receive completed with it
  std::uintptr_t src_data = 0, dst_data = 0;  // the send's and the receive's buffer addresses
  int block = -1;          // set by whoever knows the buffers' layout (sim::simulate)
  int part = -1;
};

// An idle round (rounds model) or a computation: time a rank spent without a message.
struct local_record {
  int rank = 0;
  bool compute = false;
  double start = 0, end = 0;
};

struct report {
  std::string model;
  double finish_time = 0;     // the latest rank finish
  double comm_finish_time = 0;  // the latest rank_stats::comm_finish
  std::uint64_t rounds = 0;   // rounds model: finish_time; otherwise the most steps of a rank
  std::uint64_t messages = 0;
  std::uint64_t bytes = 0;
  std::uint32_t longest_chain = 0;
  std::uint64_t unreceived = 0;  // messages sent and never received (a bug in the caller)
  std::vector<rank_stats> ranks;
  std::error_code error;         // port_violation or deadlock, with the details
  std::string error_detail;
  // With world_options::record: every message in the order sent, every local span in the
  // order posted (a run of idle rounds as the rounds it stands for, posted together).
  std::vector<message_record> log;
  std::vector<local_record> local;

  // One JSON object: model, finish_time, comm_finish_time, rounds, messages, bytes, longest_chain,
  // unreceived, error, per_rank_finish, per_rank_steps.
  std::string json() const;
};

struct world_options {
  // Copy message payloads. Off: only timing is simulated (every receive buffer keeps
  // what it had), for sizes whose buffers would not fit in memory.
  bool move_payload = true;
  // Keep a record of every message and local span for the report (report::log), for
  // pictures of the run (optcast/picture.hpp). Off: one test per message.
  bool record = false;
  // Called every 65536 events with the virtual time and the messages sent so far (a
  // progress line for long runs); nothing else may be done to the world from it.
  std::function<void(double now, std::uint64_t messages)> progress;
  // The ranks grouped into hosts with rails (fabric.hpp's topology): for the algorithms
  // that decompose by it (multi_lane), and for the timing of every message (the header's
  // "Hosts and rails").
  std::optional<topology> layout;
};

struct world_state;

// The world must outlive the fabrics it hands out (and the communicators made of them:
// communicators_of(world), optcast/communicator.hpp).
class world {
public:
  world(int p, model m, world_options o = {});
  ~world();
  world(const world&) = delete;
  world& operator=(const world&) = delete;

  int size() const noexcept;
  const sim::model& model() const noexcept;
  double now() const noexcept;

  std::shared_ptr<optcast::fabric> fabric(int rank) const;

  // What happened since the world was made or last reset.
  report take_report() const;
  // Back to time 0 with empty statistics and a clean failure state, for the next run.
  // Only while nothing is pending.
  void reset();

private:
  std::shared_ptr<world_state> state_;
};

}  // namespace optcast::sim
