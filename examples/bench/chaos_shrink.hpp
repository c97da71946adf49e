// optcast-bench chaos --shrink and --grow: the trials (chaos_shrink.cpp) and their ranks
// (chaos_survivors.cpp).
#pragma once

#include <cstdint>
#include <string>

#include <optcast/optcast.hpp>

namespace optcast::bench {

struct shrink_setup {
  std::string fabric, store, mode = "both";
  int np = 8, trials = 20, victim = -1, timeout_ms = 2000;
  long ops_after = 20;
  std::uint64_t seed = 1;
  bool second = false, grow = false, json = false, quiet = false;
};

// The trials; `self` is this program (argv[0]).
int shrink_trials(const char* self, const shrink_setup& s);

// One rank of a trial (or, with OPTCAST_REJOIN=1, the replacement of one).
int shrink_rank_main(const std::string& fabric, const std::string& store, const std::string& report, std::uint64_t seed, int timeout_ms,
                     long ops_after, bool growing);

// A communicator's members as "J0,J1,..." (job ranks), and whether such a list holds r.
std::string members_of(const communicator& c);
bool holds(const std::string& members, int r);

}  // namespace optcast::bench
