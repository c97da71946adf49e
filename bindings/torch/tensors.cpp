// Tensors as optcast's buffers, and torch's reduction operators as optcast's, dtype by dtype.
#include "tensors.hpp"

#include <complex>
#include <optional>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <c10/util/complex.h>

namespace optcast::torch_backend {

std::span<std::byte> bytes(const at::Tensor& t) {
  return {static_cast<std::byte*>(t.data_ptr()), t.nbytes()};
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.defined(), "optcast: ", what, ": an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "optcast: ", what, ": tensors must be on the CPU, not ", t.device().str());
  TORCH_CHECK(t.layout() == at::kStrided, "optcast: ", what, ": sparse tensors are not supported");
}

at::Tensor one(std::vector<at::Tensor>& ts, const char* what) {
  TORCH_CHECK(ts.size() == 1, "optcast: ", what, ": takes one tensor per process, got ", ts.size());
  check_tensor(ts[0], what);
  return ts[0];
}

at::Tensor flat(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> parts;
  parts.reserve(ts.size());
  for (const auto& t : ts) parts.push_back(t.reshape(-1));
  return at::cat(parts);
}

void unflat(const at::Tensor& from, const std::vector<at::Tensor>& to) {
  std::int64_t off = 0;
  for (const auto& t : to) {
    t.copy_(from.narrow(0, off, t.numel()).view(t.sizes()));
    off += t.numel();
  }
}

namespace {

// `reduce` on elements of type T, or nothing where torch does not define it.
template <class T>
std::optional<erased_reduction> typed_op(red::RedOpType op) {
  if constexpr (std::is_arithmetic_v<T>) {
    switch (op) {
      case red::SUM: case red::AVG: return reduction<T>(ops::sum).erased();
      case red::PRODUCT: return reduction<T>(ops::product).erased();
      case red::MIN: return reduction<T>(ops::min).erased();
      case red::MAX: return reduction<T>(ops::max).erased();
      default: break;
    }
    if constexpr (std::is_integral_v<T>) {
      switch (op) {
        case red::BAND: return reduction<T>(ops::band).erased();
        case red::BOR: return reduction<T>(ops::bor).erased();
        case red::BXOR: return reduction<T>(ops::bxor).erased();
        default: break;
      }
    }
    return std::nullopt;
  } else {
    // float16, bfloat16 (computed in float, rounded once per pair, as torch's CPU kernels
    // do) and complex numbers (no order, so no min or max).
    constexpr bool is_complex = !std::is_same_v<T, c10::Half> && !std::is_same_v<T, c10::BFloat16>;
    switch (op) {
      case red::SUM: case red::AVG:
        return reduction<T>::custom([](const T& a, const T& b) { return static_cast<T>(a + b); }, commutative).erased();
      case red::PRODUCT:
        return reduction<T>::custom([](const T& a, const T& b) { return static_cast<T>(a * b); }, commutative).erased();
      default: break;
    }
    if constexpr (!is_complex) {
      switch (op) {
        case red::MIN: return reduction<T>::custom([](const T& a, const T& b) { return b < a ? b : a; }, commutative).erased();
        case red::MAX: return reduction<T>::custom([](const T& a, const T& b) { return a < b ? b : a; }, commutative).erased();
        default: break;
      }
    }
    return std::nullopt;
  }
}

const char* op_name(red::RedOpType op) {
  switch (op) {
    case red::SUM: return "SUM";
    case red::AVG: return "AVG";
    case red::PRODUCT: return "PRODUCT";
    case red::MIN: return "MIN";
    case red::MAX: return "MAX";
    case red::BAND: return "BAND";
    case red::BOR: return "BOR";
    case red::BXOR: return "BXOR";
    case red::PREMUL_SUM: return "PREMUL_SUM";
    default: return "an unknown operator";
  }
}

}  // namespace

erased_reduction reduction_for(const red& rop, at::ScalarType dtype) {
  const auto op = rop.op_;
  std::optional<erased_reduction> r;
  switch (dtype) {
    case at::kByte: r = typed_op<std::uint8_t>(op); break;
    case at::kChar: r = typed_op<std::int8_t>(op); break;
    case at::kShort: r = typed_op<std::int16_t>(op); break;
    case at::kInt: r = typed_op<std::int32_t>(op); break;
    case at::kLong: r = typed_op<std::int64_t>(op); break;
    case at::kBool: r = typed_op<bool>(op); break;
    case at::kFloat: r = typed_op<float>(op); break;
    case at::kDouble: r = typed_op<double>(op); break;
    case at::kHalf: r = typed_op<c10::Half>(op); break;
    case at::kBFloat16: r = typed_op<c10::BFloat16>(op); break;
    case at::kComplexFloat: r = typed_op<c10::complex<float>>(op); break;
    case at::kComplexDouble: r = typed_op<c10::complex<double>>(op); break;
    default: TORCH_CHECK(false, "optcast: reductions of ", at::toString(dtype), " tensors are not supported");
  }
  const bool avg_ok = at::isFloatingType(dtype) || at::isComplexType(dtype);
  TORCH_CHECK(r && (op != red::AVG || avg_ok), "optcast: ReduceOp.", op_name(op), " is not defined for ",
              at::toString(dtype), " tensors");
  return *r;
}

}  // namespace optcast::torch_backend
