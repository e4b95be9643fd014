// What a kernel launcher receives for a tensor: plain data, no fmt, no Tensor (NOTE [CUDA
// headers without fmt] in probe.h). Host code makes them with detail::tensor_arg (host.h).
#pragma once

#include <cstdint>

#include "halfgrad/core/dtype.h"

namespace hg::cuda::detail {

// Dims a kernel indexes through. Size-1 dims are dropped first, so this bounds the real ones.
inline constexpr int kMaxDims = 8;

struct TensorArg {
  void* data = nullptr;   // the address of element [0, 0, ...]
  DType dtype = kFloat32;
  int32_t dim = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements
  bool contiguous = false;        // row-major dense: offset == linear index
};

}  // namespace hg::cuda::detail
