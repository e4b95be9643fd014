// Launchers of the CUDA elementwise kernels (elementwise.cu), called by the host wrappers in
// elementwise.cpp. Free of fmt (NOTE [CUDA headers without fmt] in probe.h): plain arguments
// in, a cudaError_t out (cudaGetLastError() after the launch).
//
// NOTE [Elementwise iteration] Every elementwise kernel walks the same description of its
// operands, made on the host by make_elementwise_args (elementwise.cpp):
//   1. the output's shape; each input is read as if expanded to it (stride 0 along the dims
//      it broadcasts over); dims of size 1 are dropped (they never move an offset);
//   2. the dims are ordered by the output's strides, largest first, so the output's fastest
//      dim is the innermost one (a no-op for a new contiguous output);
//   3. neighbouring dims that are contiguous with each other in every operand are merged
//      (stride[d] == stride[d + 1] * size[d + 1] for all operands), down to at most kMaxDims;
//   4. `contiguous`: everything merged into one dim of stride 1 in every operand, except
//      inputs of stride 0 (`scalars`: a 0-d operand such as the 2 of x * 2, read once per
//      vector). Such a loop needs no index math and reads and writes 16 bytes at a time when
//      the pointers allow it; any other loop maps each linear index to one offset per
//      operand, in 32-bit arithmetic when the element count and every offset fit (`index32`),
//      else in 64-bit.
// The kernel for an op is that loop with a small functor: out = f(in...) on storage values
// (the functor converts to the compute type and rounds once on the way out).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "halfgrad/core/dtype.h"
#include "halfgrad/kernel/kinds.h"
#include "halfgrad/cuda/kernel_args.h"

namespace hg::cuda::detail {

// The output plus at most three inputs (addcmul, addcdiv, where).
inline constexpr int kMaxOperands = 4;

struct ElementwiseArgs {
  int32_t dim = 0;       // dims left after step 3 of the NOTE (0: a single element)
  int32_t operands = 0;  // the output first, then the inputs
  int64_t numel = 0;
  bool contiguous = false;
  bool index32 = false;
  uint32_t scalars = 0;  // with `contiguous`: bit k set when operand k has stride 0
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};  // in elements; 0 along broadcast dims
  void* data[kMaxOperands] = {};                 // element [0, 0, ...] of each operand
};

// In the launchers below, every operand of `args` has the dtype named, unless said otherwise.

// (out, x): out = op(x). Integer dtypes only for Neg, Abs, Sign, Relu and Square; no bool.
cudaError_t launch_unary(kernel::Unary op, DType dtype, const ElementwiseArgs& args,
                         cudaStream_t stream);
// (out, a, b): out = op(a, b), alpha scaling b for Add and Sub. No bool.
cudaError_t launch_binary(kernel::Binary op, DType dtype, double alpha, const ElementwiseArgs& args,
                          cudaStream_t stream);
// (out, a, b): out (bool) = op(a, b), a and b of dtype.
cudaError_t launch_compare(kernel::Compare op, DType dtype, const ElementwiseArgs& args,
                           cudaStream_t stream);
// (out, grad, x): out = x <= threshold ? 0 : grad. No bool.
cudaError_t launch_threshold_backward(DType dtype, double threshold, const ElementwiseArgs& args,
                                      cudaStream_t stream);
// (out, x): out = min(max(x, low), high), a bound applying only when present. No bool.
cudaError_t launch_clamp(DType dtype, bool has_low, double low, bool has_high, double high,
                         const ElementwiseArgs& args, cudaStream_t stream);
// (out, self, t1, t2): out = self + value * t1 * t2 (addcmul), or self + value * t1 / t2 when
// divide (addcdiv). No bool.
cudaError_t launch_addc(bool divide, DType dtype, double value, const ElementwiseArgs& args,
                        cudaStream_t stream);
// (out, condition, a, b): out = condition ? a : b; condition bool, the others elements of
// element_size bytes (copied as bits).
cudaError_t launch_where(size_t element_size, const ElementwiseArgs& args, cudaStream_t stream);
// (out, x, mask): out = mask ? fill : x; mask bool, fill_bits the fill value's bytes.
cudaError_t launch_masked_fill(size_t element_size, uint64_t fill_bits, const ElementwiseArgs& args,
                               cudaStream_t stream);
// (dst, src): dst = src converted from `from` to `to` (core/cast.h's rules).
cudaError_t launch_copy(DType to, DType from, const ElementwiseArgs& args, cudaStream_t stream);
// The same where one of `to` and `from` is a float8 dtype and the other float32, float16 or
// bfloat16 (the host checked); saturate: Overflow::Saturate for a float8 `to`.
cudaError_t launch_float8_copy(DType to, DType from, bool saturate, const ElementwiseArgs& args,
                               cudaStream_t stream);
// (dst): every element set to the element_size bytes of value_bits.
cudaError_t launch_fill(size_t element_size, uint64_t value_bits, const ElementwiseArgs& args,
                        cudaStream_t stream);

// dst[0, n) (dtype floating, contiguous) filled as random::fill_uniform / fill_normal fill a
// host buffer from the counter blocks [first_block, ...) of `seed` (NOTE [Philox stream layout]
// in core/random.h). Uniform values are affine(low, span, u) rounded to dtype and clamped to
// [first_ok, last_ok] (the dtype's values inside [low, high), found by the host).
cudaError_t launch_fill_uniform(DType dtype, void* dst, int64_t n, uint64_t seed,
                                uint64_t first_block, double low, double span, double first_ok,
                                double last_ok, cudaStream_t stream);
cudaError_t launch_fill_normal(DType dtype, void* dst, int64_t n, uint64_t seed,
                               uint64_t first_block, double mean, double stddev,
                               cudaStream_t stream);

}  // namespace hg::cuda::detail
