#include "fold.hpp"

namespace optcast::algorithms {

namespace {
constexpr std::uint32_t unfold_step = 0x7fffffffu;  // after every exchange's step
}

folded fold_shape(int p, int r) noexcept {
  folded k;
  while (k.pof2 * 2 <= p) k.pof2 *= 2;
  k.rem = p - k.pof2;
  k.v = r - k.rem;
  return k;
}

task<result<folded>> fold(fabric& f, std::uint32_t seq, std::uint32_t& step, std::span<std::byte> mine,
                          std::span<std::byte> result, std::span<std::byte> in, const erased_reduction* op) {
  const int r = f.rank();
  folded k = fold_shape(f.size(), r);
  if (k.rem == 0) co_return k;
  if (r < 2 * k.rem) {
    if (r % 2 == 1) {
      if (auto res = co_await f.send(r - 1, {seq, step}, mine); !res) co_return fail(res.error());
      if (auto res = co_await f.recv(r - 1, {seq, unfold_step}, result); !res) co_return fail(res.error());
      k.v = -1;
      co_return k;
    }
    if (auto res = co_await f.recv(r + 1, {seq, step}, in); !res) co_return fail(res.error());
    if (op) (*op)(mine.data(), in.data(), mine.data(), mine.size() / op->elem);
    k.v = r / 2;
  } else if (auto res = co_await f.idle_round(); !res) {
    co_return fail(res.error());
  }
  ++step;
  co_return k;
}

task<result<void>> unfold(fabric& f, std::uint32_t seq, const folded& k, std::span<const std::byte> work) {
  const int r = f.rank();
  if (k.v >= 0 && r < 2 * k.rem)
    if (auto res = co_await f.send(r + 1, {seq, unfold_step}, work); !res) co_return fail(res.error());
  co_return result<void>{};
}

}  // namespace optcast::algorithms
