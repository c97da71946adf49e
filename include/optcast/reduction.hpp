// The elementwise operators of reduce, reduce_scatter and allreduce.
//
//   optcast::reduce(comm, in, out, optcast::ops::sum, root)
//   optcast::allreduce(comm, in, out, optcast::reduction<int>::custom(gcd, optcast::commutative))
//
// Built-in: sum, product, min, max over arithmetic types; band, bor, bxor over integral
// types (a compile-time error elsewhere). All built-ins are commutative.
//
// Order. A commutative operator may be applied in any order and bracketing: the
// circulant algorithms combine partial results along their schedule's trees. For a
// non-commutative (but associative) operator, the result is
//   in_0 (+) in_1 (+) ... (+) in_{p-1}
// in rank order, computed on the binomial tree over ranks (rank v combines its range
// [v, v + 2^j) with [v + 2^j, v + 2^(j+1)), left operand first), so the bracketing is
// fixed and documented: ((a0 a1)(a2 a3))((a4 a5)(a6 a7)) for p = 8. Asking for the
// circulant algorithm with a non-commutative operator is refused (invalid_argument).
// Floating-point sums are commutative operators whose bracketing the circulant
// algorithms choose; results agree between ranks bit for bit (each element is reduced
// once, on one rank, and then distributed).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <type_traits>

#include "optcast/error.hpp"

namespace optcast {

// An operator on elements whose type is known only at run time: the one the algorithms
// see, which reduction<T>::erased() gives for a typed one, and which a language binding
// (optcast/erased.hpp) fills in for its own element types (a tensor's dtype). out[i] =
// left[i] (+) right[i] for `count` elements of `elem` bytes; out may alias left or right.
struct erased_reduction {
  std::size_t elem = 1;
  bool commutative = true;
  const void* self = nullptr;
  std::shared_ptr<const void> hold;  // keeps a user operator alive in a running collective
  void (*apply)(const void* self, const std::byte* left, const std::byte* right, std::byte* out,
                std::size_t count) = nullptr;
  // parts[i] = (the next parts[i].size() bytes of `in`) (+) parts[i], for every part: one
  // indirect call per message, however many small blocks it carries.
  void (*apply_parts)(const void* self, const std::byte* in, const std::span<std::byte>* parts,
                      std::size_t nparts) = nullptr;
  // The result's bits do not depend on the order or bracketing of the operands (the
  // built-ins on integers): an algorithm that combines in a different order on every
  // rank (the combining broadcast) still gives every rank the same bits.
  bool order_free = false;
  // What the operator and element type are, so that ranks calling with different ones
  // are told (call_signature): reduction_op and reduction_type codes.
  std::uint8_t op_code = 0;
  std::uint8_t type_code = 0;

  void operator()(const std::byte* left, const std::byte* right, std::byte* out, std::size_t count) const {
    apply(self, left, right, out, count);
  }
};

// The summation's operands, one at a time: writes operand `index` (one element) to `out`.
using operand_loader = std::function<void(std::int64_t index, std::byte* out)>;

namespace detail {

// Codes of call_signature::op and ::type.
enum reduction_op : std::uint8_t { op_sum = 1, op_product, op_min, op_max, op_band, op_bor, op_bxor, op_custom };
enum reduction_type : std::uint8_t {
  t_int8 = 1, t_uint8, t_int16, t_uint16, t_int32, t_uint32, t_int64, t_uint64, t_float, t_double, t_long_double, t_bool,
  t_char, t_other
};
template <class T>
constexpr std::uint8_t type_code() noexcept {
  if constexpr (std::is_same_v<T, bool>) return t_bool;
  else if constexpr (std::is_same_v<T, char>) return t_char;
  else if constexpr (std::is_same_v<T, float>) return t_float;
  else if constexpr (std::is_same_v<T, double>) return t_double;
  else if constexpr (std::is_same_v<T, long double>) return t_long_double;
  else if constexpr (std::is_integral_v<T>) {
    constexpr int size_rank = sizeof(T) == 1 ? 0 : sizeof(T) == 2 ? 1 : sizeof(T) == 4 ? 2 : 3;
    return static_cast<std::uint8_t>(t_int8 + 2 * size_rank + (std::is_unsigned_v<T> ? 1 : 0));
  } else return t_other;
}

template <class T, class F>
void apply_elementwise(const void* self, const std::byte* l, const std::byte* r, std::byte* o, std::size_t n) {
  const F& f = *static_cast<const F*>(self);
  const T* a = reinterpret_cast<const T*>(l);
  const T* b = reinterpret_cast<const T*>(r);
  T* c = reinterpret_cast<T*>(o);
  for (std::size_t i = 0; i < n; ++i) c[i] = static_cast<T>(f(a[i], b[i]));
}

template <class T, class F>
void apply_to_parts(const void* self, const std::byte* in, const std::span<std::byte>* parts, std::size_t nparts) {
  const F& f = *static_cast<const F*>(self);
  const T* a = reinterpret_cast<const T*>(in);
  for (std::size_t k = 0; k < nparts; ++k) {
    T* c = reinterpret_cast<T*>(parts[k].data());
    const std::size_t n = parts[k].size() / sizeof(T);
    if (n == 1) {  // the common part of a wide all-roots collective: one element
      *c = static_cast<T>(f(*a, *c));
      ++a;
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) c[i] = static_cast<T>(f(a[i], c[i]));
    a += n;
  }
}

struct min_fn {
  template <class T>
  T operator()(const T& a, const T& b) const { return b < a ? b : a; }
};
struct max_fn {
  template <class T>
  T operator()(const T& a, const T& b) const { return a < b ? b : a; }
};

}  // namespace detail

// Operator tags: pass one where a reduction<T> is expected.
namespace ops {
struct sum_t {};
struct product_t {};
struct min_t {};
struct max_t {};
struct band_t {};
struct bor_t {};
struct bxor_t {};
inline constexpr sum_t sum{};
inline constexpr product_t product{};
inline constexpr min_t min{};
inline constexpr max_t max{};
inline constexpr band_t band{};
inline constexpr bor_t bor{};
inline constexpr bxor_t bxor{};
}  // namespace ops

enum class commutativity { commutative, non_commutative };
inline constexpr commutativity commutative = commutativity::commutative;
inline constexpr commutativity non_commutative = commutativity::non_commutative;

template <class T>
  requires std::is_trivially_copyable_v<T>
class reduction {
public:
  reduction(ops::sum_t) requires std::is_arithmetic_v<T> : reduction(builtin<std::plus<T>, detail::op_sum>()) {}
  reduction(ops::product_t) requires std::is_arithmetic_v<T> : reduction(builtin<std::multiplies<T>, detail::op_product>()) {}
  reduction(ops::min_t) requires std::is_arithmetic_v<T> : reduction(builtin<detail::min_fn, detail::op_min>()) {}
  reduction(ops::max_t) requires std::is_arithmetic_v<T> : reduction(builtin<detail::max_fn, detail::op_max>()) {}
  reduction(ops::band_t) requires std::integral<T> : reduction(builtin<std::bit_and<T>, detail::op_band>()) {}
  reduction(ops::bor_t) requires std::integral<T> : reduction(builtin<std::bit_or<T>, detail::op_bor>()) {}
  reduction(ops::bxor_t) requires std::integral<T> : reduction(builtin<std::bit_xor<T>, detail::op_bxor>()) {}

  // A user operator T f(const T& left, const T& right); it must be associative, and is
  // taken as commutative only when the caller says so. It is copied and kept alive by
  // the reduction (and its copies).
  template <class F>
    requires std::is_invocable_r_v<T, const F&, const T&, const T&>
  static reduction custom(F f, commutativity c) {
    auto held = std::make_shared<const F>(std::move(f));
    reduction r;
    r.erased_ = {sizeof(T), c == commutativity::commutative, held.get(), held, &detail::apply_elementwise<T, F>,
                 &detail::apply_to_parts<T, F>, false, detail::op_custom, detail::type_code<T>()};
    return r;
  }

  // A built-in by name ("sum", "product", "min", "max", "band", "bor", "bxor"), for
  // command lines; errc::invalid_argument for an unknown name or bitwise on non-integers.
  static result<reduction> named(std::string_view name) {
    if (name == "sum") return reduction(ops::sum);
    if (name == "product") return reduction(ops::product);
    if (name == "min") return reduction(ops::min);
    if (name == "max") return reduction(ops::max);
    if constexpr (std::integral<T>) {
      if (name == "band") return reduction(ops::band);
      if (name == "bor") return reduction(ops::bor);
      if (name == "bxor") return reduction(ops::bxor);
    }
    return fail(errc::invalid_argument);
  }

  bool is_commutative() const noexcept { return erased_.commutative; }
  // out[i] = left[i] (+) right[i].
  void apply(const T* left, const T* right, T* out, std::size_t n) const {
    erased_(reinterpret_cast<const std::byte*>(left), reinterpret_cast<const std::byte*>(right),
            reinterpret_cast<std::byte*>(out), n);
  }
  const erased_reduction& erased() const noexcept { return erased_; }

private:
  reduction() = default;
  template <class F, std::uint8_t Op>
  static reduction builtin() {
    static const F f{};
    reduction r;
    r.erased_ = {sizeof(T), true, &f, nullptr, &detail::apply_elementwise<T, F>, &detail::apply_to_parts<T, F>, std::integral<T>,
                 Op, detail::type_code<T>()};
    return r;
  }

  erased_reduction erased_{};
};

}  // namespace optcast
