#include "optcast/communicator.hpp"

#include "comm_access.hpp"

namespace optcast {

const std::shared_ptr<detail::comm_space>& communicator::space() {
  if (!space_) space_ = std::make_shared<detail::comm_space>();
  return space_;
}

void communicator::release() noexcept {
  if (!space_ || id_ == 0) return;
  if (auto* s = fabric_ ? fabric_->survival() : nullptr) s->retire(id_);
  std::lock_guard lock(space_->mu);
  space_->in_use.reset(id_);
}

}  // namespace optcast
