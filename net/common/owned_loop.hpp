// A fabric that owns its event loop: the blocking form of connect() for plain programs,
// where nothing else runs an io_context. The loop outlives the fabric (whose close may
// still drive it), and nothing outside can reach it.
#pragma once

#include <functional>
#include <memory>

#include <asio/io_context.hpp>

#include "optcast/fabric.hpp"

namespace optcast::detail {

template <class Connect>
std::shared_ptr<fabric> with_own_loop(Connect connect) {
  struct holder {
    asio::io_context io;
    std::shared_ptr<fabric> f;
    ~holder() { f.reset(); }  // the fabric first, while its loop still exists
  };
  auto h = std::make_shared<holder>();
  h->f = connect(h->io);
  fabric* raw = h->f.get();
  return std::shared_ptr<fabric>(std::move(h), raw);
}

// Runs fn with the fabric's strand held, from any thread, and returns when it has run:
// at once on the fabric's own loop, on its strand, or on a stopped loop; else through
// the strand, waited for (a thread of the loop runs the loop meanwhile). If nothing runs
// the loop at all (a probe unanswered for a second), fn runs on this thread: closing a
// fabric must not hang. fn runs exactly once. (lib/runtime/borrowed_loop.cpp)
void on_strand(fabric& f, const std::function<void()>& fn) noexcept;

}  // namespace optcast::detail
