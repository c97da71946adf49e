// Bar-Noy and Ho, "Broadcasting Multiple Messages in the Multiport Model" (1998): m
// messages from processor 0 to n processors where every processor sends k and receives
// k messages per round. Pure computation, no I/O: the schedules are packets::schedule
// (processor 0 the broadcaster), run by the same round loop as every static schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "static_schedules/packet_schedule.hpp"

namespace optcast::multiport {

// The least e with base^e >= x (x >= 1, base >= 2).
int ceil_log(int base, std::int64_t x);

// Lemma 2: ceil(m/k) - 1 + ceil(log_{k+1} n) rounds at least.
int lemma_2(int n, int m, int k);
// Lemma 3: one more than Lemma 2 where (n - 1) beta > n' - 1, with n' = (k+1)^ceil(log_{k+1} n)
// and beta = ((m - 1) mod k) + 1; Lemma 2 otherwise.
int lemma_3(int n, int m, int k);

// Section 3, the k-tree algorithm: k spanning trees shaped T'_k (a root above an almost
// complete k-ary tree), every processor a non-leaf in at most one of them (3.3), the
// alpha = (n - 2) mod k processors beyond a multiple added by the paper's counter loop
// (3.4), or, below k + 2, onto the n = 2 trees with the second leaf taken as the first
// leaf's first child (3.5). Message i goes down tree i mod k, one level per round.
packets::schedule ktree(int n, int m, int k);
// The height of those trees (the edges from the broadcaster to the deepest node): the
// schedule takes ceil(m/k) + height - 1 rounds (Theorem 6) when m >= k.
int ktree_height(int n, int k);
// The time Section 3.6 states before its approximation, ceil(m/k) +
// ceil(log_k((n - 1 - alpha + 2k)(k - 1) + 1)) - 1 (n >= k + 2), which Table 1 lists
// against Lemma 2; the trees built are never taller (see multiport_test).
int ktree_stated(int n, int m, int k);

// Section 4's broadcasting black boxes, chained (Theorem 7).
enum class box_kind { nice, special, small };
struct box {
  box_kind kind;
  int size;   // processors in the box
  int d = 0;  // nice: (k+1)^d - 1 processors; special: a (k+1)^(d-1) + k - a
  int a = 0;  // special only
  // Rounds after a batch's injection round until every processor in the box has it:
  // d for nice and special boxes (Theorems 12, 14); for a small box of x processors 0
  // when x = 1, 1 when x floor(k / (x-1)) >= k (height-2 trees, Theorem 6: each of the
  // x takes about k/x of the messages and sends them to the x - 1 others), else the
  // height of 3.5's k-tree less one (at most 2, Section 4.3).
  int t(int k) const;
  // Rounds from a batch's injection to its output: d (nice), 1 (special); none (small).
  int delay() const noexcept { return kind == box_kind::nice ? d : kind == box_kind::special ? 1 : 0; }
};
// Proposition 8's decomposition of n = 1 + n_1 + ... + n_{l+1}: special boxes with
// strictly decreasing d, ending with a nice box or a small one (fewer than 2k).
std::vector<box> decompose(int n, int k);
// The chain of those boxes (any order of nice, special and a last small box) that takes
// the least time, by dynamic programming over the processors left: Proposition 8's
// greedy choice is one candidate.
std::vector<box> best_chain(int n, int k);
// Theorem 7's time of a chain, max over its boxes of the delays before it plus its t:
// the rounds after the broadcaster's send until all know a batch. A broadcast of m
// messages on it takes ceil(m/k) + chain_time rounds.
int chain_time(const std::vector<box>& chain, int k);

// The rotation algorithm (Section 4): the broadcaster injects k messages per round into
// best_chain(n, k). ceil(m/k) + ceil(log_{k+1} n) rounds (Theorem 10) wherever the
// boxes allow it: for every n <= 1000 with k = 2, 3, 4, while with k = 5 some n (the ones
// whose last box would be 4 processors, which no box of the paper serves in one round)
// take one round more; multiport_test lists them.
packets::schedule rotation(int n, int m, int k);

// Built once per process while a caller holds them.
std::shared_ptr<const packets::schedule> ktree_for(int n, int m, int k);
std::shared_ptr<const packets::schedule> rotation_for(int n, int m, int k);

}  // namespace optcast::multiport
