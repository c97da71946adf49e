// Waiting on a store that cannot tell anyone when a key arrives (a directory, Redis
// without subscriptions): look again, often at first and then less.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

#include "optcast/error.hpp"

namespace optcast::detail {

// Polls `ready` (which returns false while what it waits for is missing) until it holds,
// it fails otherwise, or `timeout` passes (a zero timeout looks once); 1 ms at first,
// backing off to 20 ms.
template <class Ready>
result<void> poll_until(Ready ready, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    auto r = ready();
    if (!r) return fail(r.error());
    if (*r) return {};
    const auto now = std::chrono::steady_clock::now();
    if (now >= until) return fail(errc::timeout);
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(pause, until - now));
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
}

}  // namespace optcast::detail
