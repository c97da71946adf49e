// Bruck, Cypher and Ho, "Multiple Message Broadcasting with Generalized Fibonacci
// Trees" (1992), Section 3: the generalized Fibonacci trees FT_d(t), their sizes F_d(t),
// f_d(n), and base-x labelings. Pure computation, no I/O.
//
// FT_d(t) is one node for 0 <= t < d; for t >= d a root whose i-th child (1 <= i <= d) is
// the root of FT_d(t - i) (Definition 3.4). The base-x labeling gives the root x and the
// i-th child's subtree the base-(x + i) labeling (Definition 3.5): a node that has a
// packet in round l sends it to its children in rounds l + 1, ..., l + d, so the label
// is the round a node first has the packet, and the children of a node have labels
// distinct mod d (what lets a new packet enter every d rounds).
#pragma once

#include "core/huge_vector.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "static_schedules/packet_schedule.hpp"

namespace optcast::fibonacci {

// F_d(t) (Definition 3.6), saturating at `cap`: 1 for t < d, 1 + F_d(t-1) + ... + F_d(t-d).
std::int64_t F(int d, int t, std::int64_t cap = std::int64_t{1} << 62);
// f_d(n) = min { t : F_d(t) >= n } (Definition 3.8), n >= 1.
int f(int d, std::int64_t n);

// A treetop of FT_d(t) (Definition 3.3) that is itself a full d-ary tree, with its
// base-x labeling. Nodes are numbered in breadth-first order (0 is the root); the
// children of a node are in child order, child i (0-based) labelled parent + i + 1.
class tree {
public:
  // FT_d(t) whole: F_d(t) nodes (at most 2^24).
  tree(int d, int t, std::int64_t x = 0);
  // The treetop with `s` nodes (s = 1 mod d, 1 <= s <= F_d(t)) that FT_d(t) becomes when
  // leaf sibling sets are removed, those with the largest labels first (ties: the last
  // in breadth-first order), so that the largest label left is as small as this
  // removal order makes it. Section 4.2's T_0 is tree(d, f_d(s), s).
  tree(int d, int t, std::int64_t x, std::int64_t s);

  int d() const noexcept { return d_; }
  int order() const noexcept { return t_; }
  int size() const noexcept { return static_cast<int>(label_.size()); }
  std::int64_t label(int v) const noexcept { return label_[static_cast<std::size_t>(v)]; }
  int parent(int v) const noexcept { return parent_[static_cast<std::size_t>(v)]; }
  // v's children in child order (d of them, or none: the tree is full).
  std::span<const int> children(int v) const noexcept;
  bool leaf(int v) const noexcept { return children(v).empty(); }
  std::int64_t max_label() const noexcept;

private:
  void build(std::int64_t x, std::int64_t keep);

  int d_, t_;
  // On huge pages (core/huge_vector.hpp): FT_d(t) may have millions of nodes.
  detail::huge_vector<std::int64_t> label_;
  detail::huge_vector<int> parent_;
  detail::huge_vector<int> first_;  // node v's children are the d consecutive ids from first_[v], or -1
  detail::huge_vector<int> ids_;    // 0, 1, 2, ...: what children() spans
};

// Section 4: broadcasting m packets among n processors on d trees.
//
// The n - 1 processors other than the broadcaster are laid out as d groups of s
// (s = 1 mod d), each spanned by T_i, the full treetop of FT_d(f_d(s)) with s nodes and
// its base-i labeling; `inserted` = beta * d processors sit on the edges into the first
// beta leaf sibling sets of every extended tree (4.3, one round more for those leaves);
// `array` processors form the linear array whose head plays the virtual processor v
// (4.4). With n >= d^2 + d + 1 the paper's choice (the largest s) has array <= d - 1 and
// fits; for smaller n a smaller s with a longer array does (documented bound: the
// rounds the layout gives, which schedule() reports). d = 1 is the Hamiltonian path of
// Section 2.2 (s = n - 1, m + n - 2 rounds), the only layout for n <= 3.
struct layout {
  int d = 1;
  int s = 0;
  int inserted = 0;
  int array = 0;
  int processors() const noexcept { return 1 + d * s + inserted + array; }
};

// The layouts for n processors on degree d (odd >= 3, or 1), the paper's first, then the
// ones with smaller groups that still fit; empty if there is none (n < d + 1).
std::vector<layout> layouts(int n, int d);
// The rounds m packets take on `lay` (the last round used, plus one), from the labels
// alone: what schedule(lay, m).rounds is, without writing the schedule out.
int rounds(const layout& lay, int m);
// A lower bound on rounds(lay, m) in O(d log n), without building the trees (choose()
// passes over the layouts it shows cannot beat the best so far).
int rounds_at_least(const layout& lay, int m);
// Lemma 4.8's bound m + f_d(ceil((n-1)/d)) + 2d - 2 (n >= d^2 + d + 1, d odd >= 3).
int lemma_4_8(int n, int m, int d);

// The layout with the fewest rounds for n and m over d in {1, 3, 5, ..., 15} (ties: the
// smaller d), as Section 4 leaves d to be chosen per n (about log log n for large n).
layout choose(int n, int m);

// The schedule of Lemmas 4.6-4.8 on `lay`: packet j goes to tree j mod d, the
// broadcaster sends it in round j, and every processor receives packet j of tree i in
// round l_i(p) + j - i (Definition 4.2's labels). Rounds reached (fibonacci_test): at
// least one under Lemma 4.8 for every n from d^2 + d + 1 to 3000; Lemma 4.7 as stated;
// Lemma 4.6 plus one, as its labels run from 0 to f_d + d and round 0 (the broadcaster's
// first send) is a round.
packets::schedule schedule(const layout& lay, int m);
// choose(n, m)'s schedule, built once per process while a caller holds it.
std::shared_ptr<const packets::schedule> schedule_for(int n, int m);

}  // namespace optcast::fibonacci
