// Karp, Sahay, Santos and Schauser, "Optimal Broadcast and Summation in the LogP Model"
// (SPAA 1993): the LogP parameters of the papers' plans, and the summation plan that
// summation_plan_for() returns (optcast/collectives.hpp). The plans themselves are built
// in lib/karp/.
#pragma once

#include <cstdint>
#include <vector>

namespace optcast::logp {

struct params {
  double L = 1, o = 0, g = 1;
  double gap() const noexcept { return g > o ? g : o; }
  double hop() const noexcept { return L + 2 * o; }
};

// Section 5, optimal summation: n operands on P processors, one application of the
// operator per time unit. Lazy summation algorithms are the time reversal of broadcasts
// with latency L + 1, so the plan is the universal tree for (L + 1, o, g'): node v (label
// d_v) sends its partial sum to its parent at S_v = t - d_v, having received its
// children's at S_v - (o + 1) - (k - 1 - m) g' (m = 0 .. k - 1, the last child of the
// broadcast first), each taking o to receive and 1 to add, and summed operands of its
// own in every other time unit: S_v - k (o + 1) + 1 of them. With every node sending
// once (the root "at t"), Lemma 5.1 counts n = sum_v S_v - o (P - 1) + 1 (the printed
// "- op + 1" drops the parentheses: with P processors P - 1 messages are received).
//
// Choices the paper leaves open, and what this does:
//  - L, o and g are rounded up to whole time units (additions take one).
//  - g' = max(g, o + 1): a reception occupies o + 1 units, so receptions closer than
//    that would overlap (the paper's pattern assumes g >= o + 1, as in Figure 6).
//  - Only nodes with d_v < t - o take part: a later one adds t - d_v + 1 operands but
//    costs its parent o + 1, a loss. With fewer useful nodes than P, ranks stay idle.
//  - t is the least time with N(t) >= n operands; the N(t) - n spare operand slots are
//    left empty (the time does not change), taken from the last nodes first.
//  - Operand order (footnote 2): node v's operands are numbered in the order it
//    combines them: its first local chain, then for each reception the child's whole
//    range followed by the local chain after it. Every partial sum is then a
//    contiguous range combined left to right, so any associative operator works.
struct summation_plan {
  struct segment {
    std::int64_t first = 0, count = 0;  // operand indices [first, first + count)
  };
  struct node {
    int parent = -1;
    std::vector<int> children;          // in the order their sums arrive
    double send = 0;                    // S_v (the root: t)
    std::vector<double> work;           // time of each local chain: before the first reception, after each
    std::vector<segment> local;         // the operands of each chain, numbered as above (one per entry of work)
    std::int64_t total = 0;             // operands in v's subtree
  };
  std::int64_t n = 0;
  double t = 0;                          // when the root has the sum
  int P = 1;                             // processors available
  std::int64_t capacity = 0;             // N(t): operands the pattern can take by t
  params m;                              // as used (rounded, g')
  std::vector<node> nodes;               // the processors taking part; node 0 is the root
};

}  // namespace optcast::logp
