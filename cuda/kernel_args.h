// What a kernel launcher receives for a tensor: plain data, no fmt, no Tensor (NOTE [CUDA
// headers without fmt] in probe.h). Host code makes them with detail::tensor_arg (host.h).
#pragma once

#include <cstdint>

#include "halfgrad/core/dtype.h"

namespace hg::cuda::detail {

// Dims a kernel indexes through. Size-1 dims are dropped first, so this bounds the real ones.
inline constexpr int kMaxDims = 8;

struct TensorArg {
  void* data = nullptr;  // the address of element [0, 0, ...]
  DType dtype = kFloat32;
  int32_t dim = 0;
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};  // in elements
  bool contiguous = false;         // row-major dense: offset == linear index
};

// NOTE [Index checks on the device] (cuda/index.cpp). A kernel that finds a bad index (or a bad
// class target) reports it here and skips that element; the first report wins. The slot is
// mapped host memory, one per device: the host reads it after each wait (item(), copies to
// the CPU, synchronize()) and throws hg::Error naming the op, the value and its bound.
enum class DeviceError : int32_t {
  None = 0,
  IndexSelect,
  IndexAdd,
  Gather,
  ScatterAdd,
  IndexPut,
  OneHot,
  Embedding,
  EmbeddingBackward,
  MaxPool2dBackward,
  NllLossTarget,
  CrossEntropyTarget,
  BinaryCrossEntropyInput,  // value: the offending input's float64 bits
};
struct DeviceErrorSlot {
  int32_t code;   // a DeviceError; None while nothing went wrong
  int32_t dim;    // the dim indexed, when the op has one
  int64_t value;  // the offending index
  int64_t bound;  // the size it had to be below
};

}  // namespace hg::cuda::detail
