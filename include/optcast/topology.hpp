// Where the ranks of a fabric run (fabric::layout()): hosts and rails.
#pragma once

#include <string>
#include <vector>

namespace optcast {

// Where the ranks run: which host each is on (ranks of one host reach each other without
// the network, through memory) and how many rails, network interfaces of their own, the
// hosts send through (the ports of the k-port model made real: an operation's lane picks
// its rail, operation::lane). A fabric without one (layout() null) is every rank a host
// of its own with one rail.
struct topology {
  std::vector<int> host_of;  // per rank; hosts numbered in the order of their lowest rank
  int rails = 1;

  int size() const noexcept { return static_cast<int>(host_of.size()); }
  int hosts() const noexcept;
  // The ranks of `host`, ascending.
  std::vector<int> ranks_on(int host) const;
  // r's place among the ranks of its host.
  int local_rank(int r) const noexcept;
  // Every host has the same number of ranks (ranks_per_host()), and a host's ranks are
  // consecutive: host h has ranks h n .. h n + n - 1 (what a launcher's block placement gives).
  bool blocked() const noexcept;
  int ranks_per_host() const noexcept { return hosts() ? size() / hosts() : 0; }
  // Of ranks[i] of this topology, in that order (a sub-communicator's).
  topology restricted(const std::vector<int>& ranks) const;
  // From each rank's host identity (equal strings: one host).
  static topology of_identities(const std::vector<std::string>& ids, int rails);
  // "4 hosts x 2 ranks, 2 rails" for logs and reports.
  std::string describe() const;
};

}  // namespace optcast
