// Alexandrov, Ionescu, Schauser and Scheiman, "LogGP: Incorporating Long Messages into the
// LogP Model" (1995), Section 4: scatter (one-to-all personalized) trees. Pure
// computation, no I/O.
//
// A scatter tree splits: a processor that owns the item sets of P processors (its own
// first) sends the last s of them as one message to the first processor of that group,
// which scatters them in turn, and goes on with the P - s it keeps. The split sizes S(P)
// decide the algorithm: S(P) = floor(P/2) is the Binomial Tree (4.4), the s minimising
// the recurrence t(P) is A_t (4.5) and, with item sets of k items, A_t^k (4.7).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace optcast::loggp {

// The cost of messages as the simulator's LogGP model charges them (net/sim.hpp): a
// message of b bytes started at 0 is at its receiver at o + (b - 1) G + L + o, and the
// sender may start the next at max(o, (b - 1) G + g). The paper's simplified model
// (Section 4.1) is o = 0 with L standing for L + 2o and G = 1 per item.
struct cost {
  double L = 1, o = 0, g = 1, G = 0;
  double arrival(double bytes) const noexcept;  // when the receiver has b bytes
  double next_send(double bytes) const noexcept;  // when the sender may start another
};

// t(P) for every P up to `P` with item sets of `set_bytes` bytes, and S(P):
//   t(1) = 0,  t(P) = min over 0 < s < P of max{arrival(s b) + t(s), next_send(s b) + t(P - s)}
// which for o = 0, G = 1, b = k is the paper's (s k - 1) + max{L + t(s), g + t(P - s)}.
// S(P) is the smallest minimising s. `binomial` fixes S(P) = floor(P/2) (Lemma 2's
// recurrence). O(P^2) to build up to P = 4096; beyond, s is searched in a window around
// where L + t(s) meets g + t(P - s), which is where the minimum lies for every P <= 4096
// tested (loggp_test).
class split_table {
public:
  split_table(int P, cost c, double set_bytes, bool binomial = false);
  int size() const noexcept { return static_cast<int>(t_.size()) - 1; }
  double t(int P) const noexcept { return t_[static_cast<std::size_t>(P)]; }
  int S(int P) const noexcept { return s_[static_cast<std::size_t>(P)]; }

private:
  std::vector<double> t_;
  std::vector<int> s_;
};

// The table for (P, c, b, binomial), built once per process while a caller holds it.
std::shared_ptr<const split_table> split_table_for(int P, cost c, double set_bytes, bool binomial);

// Where virtual processor v (the source is 0) sits in the scatter tree of `table` over P:
// the processor it receives its group from, the group [v, v + size), and the children
// it sends to in order, each the first of the group it takes.
struct tree_node {
  int parent = -1;
  int size = 1;
  struct child {
    int first, size;
  };
  std::vector<child> children;
};
tree_node node_of(const split_table& table, int P, int v);

// Scatter plans whose messages may carry parts of item sets (Section 4.7, Figures 9-10):
// A_t^k never splits a processor's set, and the paper shows that moving some of a late
// set through a processor that is idle by then can finish sooner (P = 6, k = 10: 63 ->
// 61). A plan lists, per processor (virtual, the source 0), its messages in sending
// order; a message is a list of pieces, each `bytes` of destination `dest`'s segment
// from byte `from` on. Pieces are forwarded whole.
struct piece {
  int dest;
  std::size_t from, bytes;
};
struct scatter_message {
  int to;
  std::vector<piece> pieces;
  std::size_t bytes() const noexcept;
};
struct scatter_plan {
  int P = 1;
  std::vector<std::vector<scatter_message>> sends;  // per processor, in order
  double time = 0;  // evaluate()'s, under the cost it was made for
};
// The tree of `table` as a plan: every set whole, along its tree path.
scatter_plan tree_plan(const split_table& table, int P, const std::vector<std::size_t>& segment);
// The communication finishing time of `plan` under `c`: sends one after another per
// processor, each when its pieces are in; a receiver's overheads are not serialised
// (the plans here give no processor two arrivals at once).
double evaluate(const scatter_plan& plan, cost c);
// From the tree plan, greedily: take the destination whose data arrives last and move
// the tail of its set to a route through the processor (not in its subtree) whose move
// finishes the plan soonest, over every split of the set (a sample of 64 for large
// sets) and the 16 processors free earliest; repeat while the time drops.
scatter_plan split_sets_plan(const split_table& table, int P, const std::vector<std::size_t>& segment, cost c);
// The same, built once per process while a caller holds it.
std::shared_ptr<const scatter_plan> split_sets_plan_for(const split_table& table, int P, const std::vector<std::size_t>& segment,
                                                        cost c);

// Table 2's closed forms (simplified model, G = 1 per item, P a power of two for the
// Binomial Tree) and Lemma 2's for any P with L >= g, with its max{L, g} form for L < g.
double short_message_time(int P, int k, double L, double g);
double long_message_time(int P, int k, double L, double g);
double binomial_time_lemma2(int P, int k, double L, double g);

}  // namespace optcast::loggp
