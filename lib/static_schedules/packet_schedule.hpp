// A multi-packet broadcast written out round by round: for every processor, which packet
// it sends to whom and receives from whom in which round. The form shared by the
// broadcasts whose papers give a static schedule in the rounds model (Bruck, Cypher and
// Ho's generalized Fibonacci trees; Bar-Noy and Ho's k-tree and rotation algorithms), so
// that one checker and one round loop serve them all.
//
// Processor 0 is the broadcaster and has every packet from the start; the executor maps
// processor q to rank (root + q) mod n. Pure data, no I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace optcast::packets {

struct transfer {
  int round = 0;  // 0-based
  int peer = 0;   // the receiver of a send, the sender of a receive
  int packet = 0;  // 0 <= packet < m
};

struct schedule {
  std::string name;  // what built it, for errors and reports
  int n = 1;      // processors, the broadcaster included
  int m = 0;      // packets
  int ports = 1;  // k of the k-port model the schedule is meant for
  int rounds = 0; // the last round used, plus one
  std::vector<std::vector<transfer>> sends, recvs;  // per processor, by round

  schedule() = default;
  schedule(std::string what, int processors, int packets, int k);

  // packet goes from `from` to `to` in `round`.
  void add(int round, int from, int to, int packet);
  // Sorts every list by round (then packet) and sets `rounds`; call once all is added.
  void finish();
};

// The first rule `s` breaks, or "" if none: every processor but 0 receives every packet
// exactly once, from a processor that had it at the start of that round (the
// broadcaster, or one that received it in an earlier round); each send is its receiver's
// receive; no processor sends or receives more than `s.ports` messages in one round.
std::string verify(const schedule& s);

}  // namespace optcast::packets
