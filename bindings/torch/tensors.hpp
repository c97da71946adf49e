// Tensors as optcast's buffers, and torch's reduction operators as optcast's.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optcast/reduction.hpp>

namespace optcast::torch_backend {

using red = c10d::ReduceOp;

// A contiguous tensor's storage as bytes.
std::span<std::byte> bytes(const at::Tensor& t);
// Refuses (a Python RuntimeError naming `what`) a tensor optcast cannot take: undefined,
// not on the CPU, or sparse.
void check_tensor(const at::Tensor& t, const char* what);
// The one tensor of a call that takes one per process, checked.
at::Tensor one(std::vector<at::Tensor>& ts, const char* what);
// All of `ts` in one contiguous 1-D tensor of their dtype (a copy).
at::Tensor flat(const std::vector<at::Tensor>& ts);
// Copies consecutive pieces of the 1-D `from` into `to`, each its own numel.
void unflat(const at::Tensor& from, const std::vector<at::Tensor>& to);
// The operator for `dtype`; throws (a Python RuntimeError) where torch does not define it.
erased_reduction reduction_for(const red& rop, at::ScalarType dtype);

}  // namespace optcast::torch_backend
