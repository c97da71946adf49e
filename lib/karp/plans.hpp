// Karp, Sahay, Santos and Schauser, "Optimal Broadcast and Summation in the LogP Model"
// (SPAA 1993): the plans of its sections. Section 2, the universal optimal broadcast tree;
// 4.2, the combining broadcast; 5, summation; 3.2-3.5, k-item broadcasts.
//
// Pure computation, no I/O. A node that has the item at time t sends it to its children
// at t, t + gap, t + 2 gap, ...; child i has it at t + i gap + L + 2o (Definition 2.3).
// Definition 2.3 spaces siblings by g, which assumes g >= o (ERRATA.md): a sender is
// busy o per message, so here gap = max(g, o), which is what the LogP model allows.
#pragma once

#include "optcast/logp.hpp"  // params, summation_plan

#include "core/huge_vector.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace optcast::logp {

// B(P): the P nodes of the universal tree with the smallest labels (Definition 2.4),
// ties broken by (label, parent, child index), numbered 0..P-1 in that order (0 is the
// root). Optimal for single-item broadcast (Theorem 2.1). O(P log P) to build.
class broadcast_tree {
public:
  broadcast_tree(int P, params m);

  int size() const noexcept { return static_cast<int>(label_.size()); }
  // When node v has the item (its delay).
  double label(int v) const noexcept { return label_[static_cast<std::size_t>(v)]; }
  int parent(int v) const noexcept { return parent_[static_cast<std::size_t>(v)]; }
  // v's children in the order v sends to them.
  std::span<const int> children(int v) const noexcept {
    return {child_.data() + first_[static_cast<std::size_t>(v)],
            first_[static_cast<std::size_t>(v) + 1] - first_[static_cast<std::size_t>(v)]};
  }
  double finish() const noexcept { return label_.empty() ? 0 : label_.back(); }

private:
  // On huge pages (core/huge_vector.hpp): a million nodes each.
  detail::huge_vector<double> label_;
  detail::huge_vector<int> parent_;
  detail::huge_vector<int> child_;            // children of every node, grouped by parent
  detail::huge_vector<std::size_t> first_;    // node v's children are child_[first_[v] .. first_[v+1])
};

// B(P; L, o, g) (Definition 2.1): the time of an optimal single-item broadcast.
double B(int P, params m);

// P(t; L, o, g) (Definition 2.2): how many processors a broadcast reaches by time t, up
// to `cap` (the count grows exponentially in t).
std::int64_t P_of(double t, params m, std::int64_t cap = std::int64_t{1} << 24);

// The tree for (P, m), built once per process while a caller holds it.
std::shared_ptr<const broadcast_tree> tree_for(int P, params m);

// Section 4.2, the combining broadcast (every rank ends with the reduction of all P
// values) in the postal model: a step sends one message and receives one, a message
// sent at step s is combined at s + L (L >= 1 steps), combining is free.
//
// The paper's schedule, for P = f_T (= P(T; L, 0, 1)): at step j every rank i sends its
// value to i + f_{j+L-1}; rank i then holds the f_j values x[i - f_j + 1 .. i] (indices
// mod P) at step j, all P at T = B(P), the time of a reduction to one rank.
//
// Other P (ERRATA.md: the wrap-around would count values twice). Two constructions,
// the faster one taken:
//  - chain: the same shift-invariant pattern with windows w_0 = 1, w_j = w_{j-1} + w_t
//    for a chosen t <= j - L (or w_j = w_{j-1}): rank i receives at step j the value of
//    w_t operands rank i - w_{j-1} had at step t and sent at j - L, keeping the window
//    contiguous and disjoint. A limited discrepancy search around the largest windows
//    looks for a chain with w_T = P for T = B(P), B(P) + 1, ... (for L = 1 these are
//    Brauer's star addition chains, which need more than ceil(log2 P) steps for most P).
//    Measured for P <= 5000: T = B(P) for 50-93% of P (L = 2 .. 8), never above B(P) + 1;
//    for sampled P up to 2^24 - 1 (1000, 4095, 65535, 10^5, 10^6) within B(P) + 3.
//  - fold: P' = f_{T'} <= P < f_{T'+1}; the P - P' < P' other ranks send their values to
//    ranks 0 .. P-P'-1 first, the P' ranks run the paper's schedule from step L, and send
//    the result back: T' + 2L = B(P) + 2L - 1 steps.
// So T = B(P) for P = f_T, and B(P) <= T <= B(P) + 2L - 1 for every P.
struct combining_plan {
  enum class kind { fibonacci, chain, fold };
  int P = 1, L = 1;
  int T = 0;                         // steps until every rank holds the reduction
  kind how = kind::fibonacci;
  int inner = 1;                     // ranks on the window schedule (P, or P' in the fold)
  int start = 0;                     // its first step (L in the fold)
  std::vector<std::int64_t> window;  // window[j]: operands in a rank's value after inner step j
  std::vector<int> from;             // from[j] = t: the window[t] value arriving at step j; -1: none
  std::int64_t searched = 0;         // search nodes visited (diagnostics)
};
std::string_view to_string(combining_plan::kind k) noexcept;

// The plan for P ranks and latency L steps; the search is bounded by `budget` nodes per
// candidate T (beyond it the fold is taken). Deterministic: every rank computes the same.
combining_plan combining_schedule(int P, int L, std::int64_t budget = std::int64_t{1} << 17);
std::shared_ptr<const combining_plan> combining_for(int P, int L);

// The plan for n >= 1 operands on P processors. O(P log n).
summation_plan summation_schedule(std::int64_t n, int P, params m);
// N(t) for P processors: the most operands the optimal lazy pattern sums by time t.
std::int64_t summation_capacity(double t, int P, params m);

// Section 3.5, k-item broadcast when receives may be chosen from what has arrived (the
// paper's "modified model": a buffer per processor, one reception per step), in the
// postal model with latency L steps. Processor 0 is the source; it sends item i
// (0-based) once, at step i, to the root of item i's tree; the others (1 .. P-1) run
// the optimal tree T for P - 1 nodes per item with the block-cyclic assignment of
// Section 3.2/3.4: an internal node with r children gets a block of r processors, the
// j-th of which plays it for the items i = j (mod r), so its r sends of one item end
// before its next item arrives; the leaves of item i go, in label order, to the
// processors not internal for item i, in processor order. The one processor left over
// is receive-only. Each processor receives an item for which it is internal as it
// arrives and the rest oldest first.
//
// The paper omits the assignment of leaves and the proof. This one is checked by
// kitem_buffered_test against the lower bound B(P - 1) + L + k - 1 (plan.finish) for
// every P <= 200, L <= 8 and k in a grid up to 40.
struct kitem_plan {
  struct transfer {
    int item = 0;
    int peer = 0;            // to (a send) or from (a receive)
    std::int64_t time = 0;   // a send's step; a receive's step (its arrival is at or before)
  };
  int P = 1, L = 1, k = 1;
  std::int64_t finish = 0;   // the last reception's step
  std::vector<std::vector<transfer>> sends;     // per processor, in step order
  std::vector<std::vector<transfer>> receives;  // per processor, in the order received
};
kitem_plan kitem_buffered(int P, int L, int k);
std::shared_ptr<const kitem_plan> kitem_buffered_for(int P, int L, int k);  // cached

// Section 3.4 (Theorem 3.7), k-item broadcast in the plain postal model: no buffer to
// choose from, every message is received in the step it arrives, and no processor gets
// two in one step. The source sends item i once, at step i. The optimal broadcast
// phase is the buffered plan's: the internal nodes of the optimal tree for P - 1, block-
// cyclic, get each item on the tree's schedule. The end game is the paper's in spirit
// but not in letter (its blocks-and-digraph construction is given only for odd L and
// P - 1 = P(t), and in part): step by step, the free sending ports give the items
// still missing to the free receiving ports, as a maximum matching that serves the
// oldest missing items first, each from whichever processor already holds it (not
// only its tree parent).
//
// Theorem 3.7 promises B(P - 1) + 2L + k - 2. This end game is checked (logp_test)
// to stay within that for every P <= 200, L <= 8, k <= 40, and it mostly reaches the
// single-sending lower bound B(P - 1) + L + k - 1 (docs/GUIDE.md gives the counts), never
// more than one step above it there. Outside that range the bound is measured, not
// proved: k up to 1000 and P up to 500 stayed within one step of the lower bound. The
// plan always completes (once the optimal phase is over every item has a holder, and a
// step with a receiver missing something matches it to some free holder). Planning
// costs about (B + k) steps of N augmenting searches over N/64-word masks, N = P - 1:
// 12 ms for P = 200, L = 8, k = 40; once per (P, L, k).
kitem_plan kitem_single(int P, int L, int k);
std::shared_ptr<const kitem_plan> kitem_single_for(int P, int L, int k);  // cached

// Sections 3.1-3.3, continuous broadcast in the postal model: the source sends item i
// (i = 0, 1, ...) at step i, once, and every item must reach all P - 1 others with the
// least delay, L + B(P - 1) (each item's root starting an optimal broadcast at once).
// The block-cyclic assignment does it without interference: an internal node with r
// children gets a block of r processors that take its items in turn, and each block
// receives, between two of its own items, a fixed word of leaf labels (continuous_schedule.cpp
// explains the rule that words must keep). The paper proves such words exist for
// 3 <= L <= 10 and P - 1 = P(t), t >= t(L), by an induction from L base cases found by
// search; this builds them the same way at set-up time (memoized per L): I(t) from
// I(t - 1) and I(t - L) where those exist, a search where not (Lemma 3.1's words first,
// then any legal words). Measured: for 3 <= L <= 12 every P - 1 = P(t) up to 20000 has
// words except P - 1 = L + 3 for even L. For other P it searches the words directly (a
// budget of 400000 positions, trees up to 4000 nodes): found for all but one or three
// P <= 120 for each L >= 3, for P - 1 a power of two when L = 1, and for about half
// when L = 2 (Theorem 3.4: the delay L + B(P - 1) is impossible for infinitely many P).
// Where nothing is found block_cyclic() is false (broadcast_stream then runs windows of
// the single-sending k-item plan).
class continuous_schedule {
public:
  continuous_schedule(int P, int L);  // P >= 2, L >= 1

  struct action {
    std::int64_t recv_item = -1;  // received at this step (-1: none; may be < 0 early on)
    int recv_from = -1;
    std::int64_t send_item = -1;  // sent at this step (-1: none)
    int send_to = -1;
  };
  bool block_cyclic() const noexcept { return how_ != nullptr; }
  const char* how() const noexcept { return how_ ? how_ : "none"; }
  int P() const noexcept { return P_; }
  int L() const noexcept { return L_; }
  // Every item reaches everyone this many steps after the source sends it.
  std::int64_t delay() const noexcept { return L_ + B_; }
  // What processor q (0 = the source) does at step t >= 0, items numbered from 0; an
  // item < 0 means nothing. O(P) per call. Needs block_cyclic().
  action at(int q, std::int64_t t) const;
  // The word of internal node v of tree_for(P - 1) and the receive-only letter.
  const std::vector<std::int64_t>& word(int v) const { return words_[static_cast<std::size_t>(v)]; }
  std::int64_t receive_only_letter() const noexcept { return receive_only_; }

private:
  bool legal() const;
  int proc(int v, std::int64_t i) const;
  int holder(int v, std::int64_t i) const;  // the processor playing node v for item i
  std::vector<int> receivers(std::int64_t x, std::int64_t T) const;  // letter x at step T, ascending

  int P_, L_;
  std::shared_ptr<const broadcast_tree> tree_;
  std::int64_t B_ = 0;
  std::vector<int> block_;                               // per node: first processor, -1 for a leaf
  std::vector<std::vector<std::int64_t>> words_;         // per internal node: positions 1..r-1
  std::map<std::int64_t, std::vector<int>> leaves_;      // label -> leaves, node order
  std::vector<std::map<std::int64_t, std::vector<int>>> positions_;  // per node: letter -> positions
  int receive_only_proc_ = 0;
  std::int64_t receive_only_ = 0;
  const char* how_ = nullptr;
};
std::shared_ptr<const continuous_schedule> continuous_for(int P, int L);  // cached

// Corollary 3.1: the first k items of a block-cyclic continuous schedule, a k-item
// broadcast in L + B(P - 1) + k - 1 steps, every message received as it arrives.
kitem_plan kitem_continuous(const continuous_schedule& s, int k);

// The postal latency, in steps of max(g, o), of a LogP machine: a value sent at step s
// can be combined and forwarded ceil((L + 2o) / max(g, o)) steps later.
int postal_steps(params m);

}  // namespace optcast::logp
