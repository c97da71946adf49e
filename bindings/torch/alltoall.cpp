// torch's all-to-alls, even and uneven, on optcast's: uneven pieces are padded to the
// largest any rank sends or receives, which one small allreduce finds.
#include <algorithm>

#include "process_group.hpp"
#include "tensors.hpp"

namespace optcast::torch_backend {

namespace {

// torch's all-to-all with uneven splits: every block padded to the largest any rank sends
// or receives (an allreduce of one number finds it), then optcast's all-to-all;
// `size_buffers(block)` makes *in and *out p blocks of `block` bytes each.
task<result<void>> padded_alltoall(communicator& c, std::shared_ptr<at::Tensor> in, std::shared_ptr<at::Tensor> out,
                                   std::int64_t mine, std::function<void(std::int64_t)> size_buffers,
                                   collective_options o) {
  std::int64_t block = mine;
  if (auto r = co_await allreduce<std::int64_t>(c, std::span(&block, 1), std::span(&block, 1), ops::max, o); !r)
    co_return r;
  size_buffers(block);
  co_return co_await alltoall<std::byte>(c, bytes(*in), bytes(*out), o);
}

// Splits of `n` rows among p ranks: given, or even (then n must divide).
std::vector<std::int64_t> splits_of(const std::vector<int64_t>& given, std::int64_t rows, int p, const char* which) {
  if (given.empty()) {
    TORCH_CHECK(rows % p == 0, "optcast: alltoall_base: the ", which, " tensor's ", rows,
                " rows do not split evenly among ", p, " ranks; pass split sizes");
    return std::vector<std::int64_t>(static_cast<std::size_t>(p), rows / p);
  }
  TORCH_CHECK(static_cast<int>(given.size()) == p, "optcast: alltoall_base: ", given.size(), " ", which,
              " split sizes for a group of ", p);
  std::int64_t sum = 0;
  for (auto s : given) {
    TORCH_CHECK(s >= 0, "optcast: alltoall_base: a negative split size");
    sum += s;
  }
  TORCH_CHECK(sum == rows, "optcast: alltoall_base: the ", which, " split sizes add up to ", sum, ", the tensor has ",
              rows, " rows");
  return {given.begin(), given.end()};
}

}  // namespace

// The all-to-all of byte pieces: piece j of `ins` to rank j, piece j of `outs` from rank
// j, each padded to the largest piece of any rank (one small allreduce finds it).
c10::intrusive_ptr<c10d::Work> process_group::exchange(std::vector<at::Tensor> ins, std::vector<at::Tensor> outs,
                                                       std::vector<at::Tensor> results, collective_options o,
                                                       const char* what) {
  const int p = size_;
  std::int64_t mine = 0;
  for (int j = 0; j < p; ++j)
    mine = std::max({mine, static_cast<std::int64_t>(ins[j].nbytes()), static_cast<std::int64_t>(outs[j].nbytes())});
  auto in = std::make_shared<at::Tensor>(), out = std::make_shared<at::Tensor>();
  auto block = std::make_shared<std::int64_t>(0);
  // Runs on the event loop once the block size is known.
  auto size_buffers = [ins, in, out, block, p](std::int64_t b) {
    *block = b;
    *in = at::zeros({p * b}, at::kByte);
    *out = at::empty({p * b}, at::kByte);
    for (int j = 0; j < p; ++j)
      if (ins[j].nbytes() > 0)
        in->narrow(0, j * b, static_cast<std::int64_t>(ins[j].nbytes()))
            .copy_(ins[j].contiguous().view({-1}).view(at::kByte));
  };
  return enqueue({[this, in, out, mine, size_buffers, o] { return padded_alltoall(*comm_, in, out, mine, size_buffers, o); },
                  [outs, out, block, p] {
                    for (int j = 0; j < p; ++j)
                      if (outs[j].nbytes() > 0)
                        outs[j].copy_(out->narrow(0, j * *block, static_cast<std::int64_t>(outs[j].nbytes()))
                                          .view(outs[j].scalar_type())
                                          .view(outs[j].sizes()));
                  },
                  std::move(results), {}, what});
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall_base(at::Tensor& output, at::Tensor& input,
                                                            std::vector<int64_t>& output_splits,
                                                            std::vector<int64_t>& input_splits,
                                                            const c10d::AllToAllOptions& opts) {
  check_tensor(output, "alltoall_base");
  check_tensor(input, "alltoall_base");
  TORCH_CHECK(output.scalar_type() == input.scalar_type(), "optcast: alltoall_base: input and output dtypes differ");
  collective_options o{.timeout = deadline(opts.timeout)};
  const std::int64_t in_rows = input.dim() ? input.size(0) : 1, out_rows = output.dim() ? output.size(0) : 1;
  const auto in_split = splits_of(input_splits, in_rows, size_, "input");
  const auto out_split = splits_of(output_splits, out_rows, size_, "output");
  if (input_splits.empty() && output_splits.empty()) {
    TORCH_CHECK(input.numel() == output.numel(), "optcast: alltoall_base: input and output sizes differ");
    at::Tensor in = input.contiguous(), out = output.contiguous();
    return enqueue({[this, in, out, o] { return optcast::alltoall<std::byte>(*comm_, bytes(in), bytes(out), o); },
                    [output, out] { if (!output.is_same(out)) output.copy_(out); }, {output}, {}, "alltoall_base"});
  }
  std::vector<at::Tensor> ins, outs;
  std::int64_t ioff = 0, ooff = 0;
  at::Tensor in = input.contiguous();
  for (int j = 0; j < size_; ++j) {
    ins.push_back(in.narrow(0, ioff, in_split[j]));
    outs.push_back(output.narrow(0, ooff, out_split[j]));
    ioff += in_split[j];
    ooff += out_split[j];
  }
  return exchange(std::move(ins), std::move(outs), {output}, o, "alltoall_base");
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  TORCH_CHECK(static_cast<int>(inputs.size()) == size_ && static_cast<int>(outputs.size()) == size_,
              "optcast: alltoall: takes ", size_, " input and ", size_, " output tensors");
  for (int j = 0; j < size_; ++j) {
    check_tensor(inputs[j], "alltoall");
    check_tensor(outputs[j], "alltoall");
    TORCH_CHECK(inputs[j].scalar_type() == inputs[0].scalar_type() && outputs[j].scalar_type() == inputs[0].scalar_type(),
                "optcast: alltoall: tensors of different dtypes");
  }
  return exchange(inputs, outputs, outputs, {.timeout = deadline(opts.timeout)}, "alltoall");
}

}  // namespace optcast::torch_backend
