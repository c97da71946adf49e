// Continuous broadcast (Karp et al., Sections 3.1-3.3): the root pushes items one after
// another, every other rank takes them in order, each item on its way while the next
// ones are pushed.
//
//   auto s = optcast::broadcast_stream::open(comm, root, item_bytes);   // every rank
//   if (comm.rank() == root) {
//     for (...) co_await (*s)->push(item);
//     co_await (*s)->close();
//   } else {
//     while (auto more = co_await (*s)->next(item); more && *more) use(item);
//   }
//
// The schedule is the postal model's (L from the call's or the fabric's LogP model, in
// steps of max(g, o)): item i leaves the root at step i, once (single-sending). Where
// logp::continuous_schedule has block-cyclic words (P - 1 = P(t) for 3 <= L <= 10, the
// paper's case, and most other P for L >= 3), every item reaches every rank exactly
// L + B(P - 1) steps after it is pushed, the lower bound. Elsewhere (most P for L <= 2)
// the stream runs windows of `window` items, each the single-sending k-item plan of
// Theorem 3.7 (logp::kitem_single), one after the other: an item then takes at most
// delay_steps() (the plan's worst, within one step of the bound in the cases measured).
// A window starts as soon as it can overlap the one before without a port busy twice:
// with the default window the stream takes 1.1 to 1.2 steps per item, against 1 for
// block-cyclic words.
//
// Every rank must read the stream to its end (next() returning false): until then it
// forwards items to others. close() pushes a few end markers so that no rank waits for
// an item that will never come (delay_steps() of them, or the rest of the window).
// One stream takes one sequence number of the communicator for its whole life; other
// collectives may run on the communicator meanwhile, in the same order on every rank.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "optcast/communicator.hpp"
#include "optcast/logp.hpp"

namespace optcast {

struct stream_options {
  // LogP(GP) parameters for the schedule; default: the fabric's own model (the
  // simulator's), else the communicator's.
  std::optional<loggp_params> model;
  // Items per window where there are no block-cyclic words; 0: 4 (L + B(P - 1)), at
  // least 8.
  int window = 0;
  std::optional<std::chrono::milliseconds> timeout;  // per call; default: the communicator's
};

class broadcast_stream {
public:
  // Every rank of `c` opens the stream with the same root, item size and options.
  // errc::invalid_argument (reason in c.last_error()) for a bad root, window or model.
  static result<std::unique_ptr<broadcast_stream>> open(communicator& c, int root, std::size_t item_bytes,
                                                        stream_options o = {});
  ~broadcast_stream();
  broadcast_stream(const broadcast_stream&) = delete;
  broadcast_stream& operator=(const broadcast_stream&) = delete;

  // The root: the next item (item_bytes of it); returns once it has left.
  task<result<void>> push(std::span<const std::byte> item);
  // The root: no more items.
  task<result<void>> close();
  // Any other rank: the next item, in push order, into `item`; false once the stream
  // has ended and this rank has passed on everything it had to.
  task<result<bool>> next(std::span<std::byte> item);

  bool block_cyclic() const noexcept;
  // Steps (of max(g, o)) from an item's push until every rank has it, at most.
  std::int64_t delay_steps() const noexcept;
  // The step (from the rank's open) at which the root sends item i: i where block-
  // cyclic; with windows, i's place in its window after the windows before it.
  std::int64_t push_step(std::int64_t i) const noexcept;
  // The lower bound L + B(P - 1).
  std::int64_t bound_steps() const noexcept;
  std::size_t item_bytes() const noexcept;

private:
  struct state;
  explicit broadcast_stream(std::unique_ptr<state> s);
  std::unique_ptr<state> s_;
};

}  // namespace optcast
