// Checking circulant schedules, independently of how they were computed: Träff's four
// correctness conditions (Section 2), the violation bound of Theorem 3, and a
// round-by-round replay of Algorithm 1 at the block level.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace optcast::circulant {

struct condition_report {
  std::optional<std::string> failure;  // the first violated condition, in words
  int max_send_violations = 0;         // most Theorem-3 violations of any rank
};
// The four conditions for every rank of p, and at most four violations per rank.
condition_report check_conditions(int p);

// The same check on given tables (rank-major, q entries per rank): how the checker
// itself is tested against corrupted schedules.
struct schedule_tables {
  int p = 1, q = 0;
  std::vector<int> baseblock;  // p entries
  std::vector<int> recv, send; // p * q entries, entry (r, k) at r * q + k
  int max_violations = 0;
};
schedule_tables compute_tables(int p);
condition_report check_conditions(const schedule_tables& t);

struct replay_report {
  std::optional<std::string> failure;
  int rounds = 0;               // rounds with communication
  std::int64_t messages = 0;    // blocks sent in all
};
// Runs Algorithm 1's plan for every rank of p with n blocks, round by round: each
// rank sends at most one and receives at most one block per round, every send meets
// the matching receive of the same block, nobody sends a block it does not have, and
// after exactly n - 1 + ceil(log2 p) rounds every rank holds all n blocks.
replay_report replay_broadcast(int p, int n);

}  // namespace optcast::circulant
