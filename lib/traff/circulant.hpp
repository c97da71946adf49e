// Träff's round-optimal broadcast schedules on circulant graphs.
//
// J. L. Träff, "Optimal Broadcast Schedules in Logarithmic Time with Applications to
// Broadcast, All-Broadcast, Reduction and All-Reduction" (2024), Sections 2-2.3.
//
// Pure computation: no I/O, and no allocation except for the all-roots table. Every function works for one rank with the
// root renumbered to 0 and costs O(log p) (Theorems 2 and 3).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace optcast::circulant {

// ceil(log2 p) for p >= 1; ranks are ints, so q <= 31.
int ceil_log2(std::int64_t p) noexcept;

inline constexpr int max_q = 31;

// The communication pattern of one p (Algorithm 2): q = ceil(log2 p) skips with
// skip[k] = ceil(skip[k+1] / 2) and skip[q] = p. Round k of every phase sends to
// r + skip[k] and receives from r - skip[k] (mod p).
class skips {
public:
  explicit skips(int p);  // p >= 1

  int p() const noexcept { return p_; }
  int q() const noexcept { return q_; }
  // 0 <= k <= q+1; skip(q) = p, skip(q+1) = 2p is the sentinel ALLBLOCKS may read once
  // it has found all q blocks (see ERRATA.md: equivalent to stopping there).
  std::int64_t operator[](int k) const noexcept { return skip_[static_cast<unsigned>(k)]; }
  const std::int64_t* data() const noexcept { return skip_.data(); }

  // For 0 <= r < p and k < q (skip[k] < p): one compare instead of a division.
  int to(int r, int k) const noexcept {
    const std::int64_t t = r + skip_[k];
    return static_cast<int>(t >= p_ ? t - p_ : t);
  }
  int from(int r, int k) const noexcept {
    const std::int64_t f = r - skip_[k];
    return static_cast<int>(f < 0 ? f + p_ : f);
  }

private:
  int p_;
  int q_;
  std::array<std::int64_t, max_q + 2> skip_{};
};

// Algorithm 3: the first skip index of r's canonical skip sequence; q for r = 0.
int baseblock(const skips& s, int r) noexcept;

// Algorithms 4-5: recv[k] for k < q, the block r receives in round k of the first phase
// (negative: nothing yet; the baseblock is the only non-negative entry).
void recv_schedule(const skips& s, int r, std::span<int> recv) noexcept;

// Algorithm 6: send[k] for k < q, the block r sends in round k of the first phase.
// `violations`, if given, counts the rounds that needed a receive schedule of the
// to-processor (Theorem 3: at most four).
void send_schedule(const skips& s, int r, std::span<int> send, int* violations = nullptr) noexcept;

// Both schedules of one rank, as Algorithm 1 uses them.
// Entries from q on are 0.
struct rank_schedule {
  int q = 0;
  int baseblock = 0;
  std::array<int, max_q> recv;  // NOLINT(cppcoreguidelines-pro-type-member-init)
  std::array<int, max_q> send;  // NOLINT(cppcoreguidelines-pro-type-member-init)
};
rank_schedule schedule_for(const skips& s, int r) noexcept;

// What rank r (root renumbered to 0) does in each round of Algorithm 1 for n blocks:
// the schedules shifted by the x virtual rounds, blocks past n - 1 capped to n - 1,
// nothing sent to the root and nothing received by it (ERRATA.md). Rounds are visited
// in order, first_round() <= i < end_round(): exactly n - 1 + q of them.
class broadcast_plan {
public:
  struct step {
    int to = -1;          // send send_block to virtual rank `to`, if send_block >= 0
    int send_block = -1;
    int from = -1;        // receive recv_block from virtual rank `from`, if recv_block >= 0
    int recv_block = -1;
  };

  broadcast_plan(const skips& s, int r, int n) noexcept;

  int first_round() const noexcept { return x_; }
  int end_round() const noexcept { return s_->q() == 0 ? x_ : n_ + s_->q() - 1 + x_; }
  // Round i's step; advances round i mod q to the next phase.
  step round(int i) noexcept;
  // Round i's step for rounds in any order (the reduction runs them backwards);
  // round(i) and at(i) agree for a plan not yet advanced.
  step at(int i) const noexcept;

private:
  const skips* s_;
  int r_, n_, x_;
  rank_schedule sch_;
};

// The receive schedules of all p ranks (root 0), for the collectives in which every
// rank is a root at once (Algorithm 7): rank r's schedule for root j is that of
// (r - j) mod p, and its send block for root j in round k is what its to-processor
// r + skip[k] receives for root j. O(p log p) to build, shared by every rank of one
// process through table_for().
class schedule_table {
public:
  explicit schedule_table(int p);
  const circulant::skips& skips() const noexcept { return s_; }
  int p() const noexcept { return s_.p(); }
  int q() const noexcept { return s_.q(); }
  // recvblock[k] of rank v in the first phase.
  int recv(int k, int v) const noexcept { return row(k)[v]; }
  const int* row(int k) const noexcept { return t_.data() + static_cast<std::size_t>(k) * static_cast<std::size_t>(s_.p()); }
  // How many of the ranks v = 1 .. p-1 have recvblock[k] = value: with every rank a
  // root and equal segments, the bytes of round i's message are the same for every rank
  // and follow from these counts alone (the simulator's timing-only runs, which move no
  // bytes, need no pass over p per message). Values lie in [lowest(), highest()].
  int lowest() const noexcept { return lo_; }
  int highest() const noexcept { return lo_ + width_ - 1; }
  int count(int k, int value) const noexcept {
    return hist_[static_cast<std::size_t>(k) * static_cast<std::size_t>(width_) + static_cast<std::size_t>(value - lo_)];
  }

private:
  circulant::skips s_;
  std::vector<int> t_;  // q rows of p
  int lo_ = 0, width_ = 0;
  std::vector<int> hist_;  // q rows of width_
};

// The table for p, built once per process while some caller holds it.
std::shared_ptr<const schedule_table> table_for(int p);

}  // namespace optcast::circulant
