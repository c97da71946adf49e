#include "optcast/scratch.hpp"

#include <algorithm>

namespace optcast {

scratch_pool::lease scratch_pool::take(std::size_t bytes) {
  // The smallest kept buffer that is large enough, so a small request does not tie up
  // the big one a concurrent large collective could use.
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->size >= bytes && (best == free_.end() || it->size < best->size)) best = it;
  if (best != free_.end()) {
    buffer b = std::move(*best);
    free_.erase(best);
    kept_ -= b.size;
    return {this, std::move(b), bytes};
  }
  // Not value-initialised: nothing reads scratch before writing it.
  return {this, buffer{std::make_unique_for_overwrite<std::byte[]>(std::max<std::size_t>(bytes, 1)), bytes}, bytes};
}

void scratch_pool::give_back(buffer b) noexcept {
  if (!b.data || b.size > limit_) return;
  // Over the limit: the smallest kept buffers go first (the large ones are the costly
  // ones to fault in again).
  std::sort(free_.begin(), free_.end(), [](const buffer& x, const buffer& y) { return x.size > y.size; });
  while ((kept_ + b.size > limit_ || free_.size() >= 16) && !free_.empty()) {
    kept_ -= free_.back().size;
    free_.pop_back();
  }
  kept_ += b.size;
  free_.push_back(std::move(b));
}

void scratch_pool::set_limit(std::size_t bytes) noexcept {
  limit_ = bytes;
  std::sort(free_.begin(), free_.end(), [](const buffer& x, const buffer& y) { return x.size > y.size; });
  while (kept_ > limit_ && !free_.empty()) {
    kept_ -= free_.back().size;
    free_.pop_back();
  }
}

void scratch_pool::release() noexcept {
  free_.clear();
  kept_ = 0;
}

}  // namespace optcast
