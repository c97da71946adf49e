// For the fabrics' close: runs fn with the fabric's strand held, from any thread, and
// returns when it has run: at once on the fabric's own loop, on its strand, or on a
// stopped loop; else through the strand, waited for (a thread of the loop runs the loop
// meanwhile). If nothing runs the loop at all (a probe unanswered for a second), fn runs
// on this thread: closing a fabric must not hang. fn runs exactly once.
#pragma once

#include <functional>

#include "optcast/fabric.hpp"

namespace optcast::detail {

void on_strand(fabric& f, const std::function<void()>& fn) noexcept;

}  // namespace optcast::detail
