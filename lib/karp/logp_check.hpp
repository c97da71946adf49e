// The parameter check every LogP plan shares.
#pragma once

#include <stdexcept>

#include "karp/plans.hpp"

namespace optcast::logp {

inline void check(const params& m) {
  if (!(m.L >= 0 && m.o >= 0 && m.g >= 0) || m.hop() <= 0 || m.gap() <= 0)
    throw std::invalid_argument("optcast::logp: need L, o, g >= 0 with L + 2o > 0 and max(g, o) > 0");
}

}  // namespace optcast::logp
