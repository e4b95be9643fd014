// The copies, fills and random fills core/ needs for CUDA storage (registered as core's device
// hooks, cuda/device_hooks.cpp), beside the CUDA elementwise kernels (cuda/elementwise.cpp).
// They run on the current stream of the tensors' device; nothing here waits for the GPU.
#pragma once

#include "halfgrad/core/random.h"
#include "halfgrad/core/scalar.h"
#include "halfgrad/core/tensor.h"

namespace hg::cuda {

// dst = src converted to dst's dtype, element by element; both on one CUDA device, src
// already of dst's shape (expanded if needed), any strides, no overlap between them.
// Floating -> integer conversions saturate, NaN giving 0 (NOTE [Float to integer on CUDA] in
// core/copy.cpp). A float8 dtype converts to and from float32, float16 and bfloat16 only
// (NOTE [Float8 is conversion only] in core/dtype.h); options.saturate as core::to_dtype.
void copy_elements(const Tensor& dst, const Tensor& src, CastOptions options = {});
// Every element of dst (any strides, no element twice) set to value in dst's dtype.
void fill(const Tensor& dst, Scalar value);
// dst (contiguous, floating) filled as random::fill_uniform / fill_normal fill a host buffer:
// the same numbers for the same generator state (NOTE [Philox stream layout] in
// core/random.h), the generator advanced the same way.
void fill_uniform(const Tensor& dst, double low, double high, Generator& gen);
void fill_normal(const Tensor& dst, double mean, double stddev, Generator& gen);

}  // namespace hg::cuda
