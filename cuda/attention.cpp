// The CUDA fused attention kernels (kernel/attention.h), host side: which operands the kernels
// take, the views they read, the outputs, and the launches of attention.cu. Nothing here waits
// for the GPU.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/attention_launch.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/attention.h"

namespace hg::cuda {

namespace {

using kernel::FlashBackward;
using kernel::FlashForward;

constexpr const char* kOp = "scaled_dot_product_flash_attention";

// What a device offers the kernels: its compute capability (WMMA on bfloat16 needs 8.0), the
// shared memory a block may opt in to, and whether this build has the kernels for it (a build
// for older targets only would JIT their 7.x code, which traps). Asked once per device.
struct DeviceLimits {
  int major = 0;
  int64_t smem_per_block = 0;
  bool compiled = false;
};

DeviceLimits device_limits(int device) {
  static std::mutex mutex;
  static std::vector<std::optional<DeviceLimits>> known;
  const std::lock_guard lock(mutex);
  if (size_t(device) >= known.size()) known.resize(size_t(device) + 1);
  if (!known[size_t(device)]) {
    int major = 0, smem = 0;
    HG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), kOp);
    HG_CUDA_CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
                  kOp);
    bool compiled = false;
    {
      DeviceGuard guard(device);
      HG_CUDA_CHECK(detail::flash_kernels_compiled_for_current_device(&compiled), kOp);
    }
    known[size_t(device)] = DeviceLimits{major, smem, compiled};
  }
  return *known[size_t(device)];
}

// t [N..., rows, E] as the kernels' [B, H, rows, E]: unit last stride, data and the other
// strides on 8 elements (16-byte vectors). A view when t already is so, else a copy into new
// (aligned) memory: contiguous() would hand back a contiguous view that starts off the
// 16-byte boundary (a narrow of a larger buffer) as it is.
Tensor as_4d(const Tensor& t) {
  Tensor v = t;
  if (v.dim() == 2) {
    v = v.unsqueeze(0).unsqueeze(0);
  } else if (v.dim() == 3) {
    v = v.unsqueeze(0);
  } else if (v.dim() > 4) {
    int64_t batch = 1;
    for (int64_t d = 0; d < v.dim() - 2; ++d) batch *= v.size(d);
    v = v.reshape({batch, 1, v.size(-2), v.size(-1)});
  }
  bool vectors = v.stride(3) == 1 && reinterpret_cast<uintptr_t>(v.data_ptr()) % 16 == 0;
  for (int64_t d = 0; d < 3; ++d) vectors = vectors && (v.size(d) == 1 || v.stride(d) % 8 == 0);
  if (vectors) return v;
  Tensor packed = empty(v.sizes(), v.options());
  packed.copy_(v);
  return packed;
}

detail::FlashStrides strides_of(const Tensor& t4) {
  return {t4.stride(0), t4.stride(1), t4.stride(2)};
}

detail::FlashGeometry geometry(const Tensor& q4, const Tensor& k4, bool causal, double scale) {
  return {.B = q4.size(0),
          .H = q4.size(1),
          .L = q4.size(2),
          .S = k4.size(2),
          .E = q4.size(3),
          .scale = float(scale),
          .causal = causal};
}

// q's shape without its last dim: the per-row vectors (lse, delta).
Shape rows_of(const Tensor& q) {
  Shape rows = q.sizes();
  rows.resize(rows.size() - 1);
  return rows;
}

TensorOptions like(const Tensor& t, DType dtype) { return {.dtype = dtype, .device = t.device()}; }

bool flash_attention_fits(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined() || !q.is_cuda()) return false;
  if (k.device() != q.device() || v.device() != q.device()) return false;
  const DType dtype = q.dtype();
  if ((dtype != kFloat16 && dtype != kBFloat16) || k.dtype() != dtype || v.dtype() != dtype) {
    return false;
  }
  const int64_t dims = q.dim();
  if (dims < 2 || k.dim() != dims || v.dim() != dims) return false;
  for (int64_t d = 0; d < dims - 2; ++d) {
    if (k.size(d) != q.size(d) || v.size(d) != q.size(d)) return false;
  }
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return false;  // the math path
  const int64_t E = q.size(-1), L = q.size(-2), S = k.size(-2);
  if (E % 8 != 0 || E < 8 || E > detail::kFlashMaxHead) return false;
  if (k.size(-1) != E || v.size(-1) != E || v.size(-2) != S || L < 1 || S < 1) return false;
  // One block per 64-row tile of every (batch, head): the grid's x dim.
  const int64_t heads = q.numel() / (L * E);
  if (heads * ((std::max(L, S) + 63) / 64) >= (int64_t(1) << 31)) return false;
  const DeviceLimits limits = device_limits(q.device().index);
  return limits.major >= 8 && limits.compiled &&
         limits.smem_per_block >=
             std::max(detail::flash_forward_smem_bytes(E), detail::flash_backward_smem_bytes(E));
}

// keep_probs is a hint the flash kernels never take: they keep no weights (the backward
// recomputes them tile by tile from lse).
FlashForward flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                     double scale, bool /*keep_probs*/) {
  HG_CHECK(flash_attention_fits(q, k, v),
           "{}: the fused CUDA kernels do not take q {} {}, k {} {}, v {} {} (see "
           "cuda::flash_attention_fits)",
           kOp, q.sizes(), q.dtype(), k.sizes(), k.dtype(), v.sizes(), v.dtype());
  DeviceGuard guard(q.device().index);
  const Tensor q4 = as_4d(q), k4 = as_4d(k), v4 = as_4d(v);
  const detail::FlashGeometry g = geometry(q4, k4, causal, scale);
  const Shape row_shape = rows_of(q);
  FlashForward result{empty(q.sizes(), like(q, q.dtype())), empty(row_shape, like(q, kFloat32))};
  const detail::FlashStrides os{g.H * g.L * g.E, g.L * g.E, g.E};  // out: contiguous
  HG_CUDA_CHECK(detail::launch_flash_attention_forward(
                    q4.data_ptr(), k4.data_ptr(), v4.data_ptr(), result.out.data_ptr(),
                    result.lse.data_ptr<float>(), q.dtype(), g, strides_of(q4), strides_of(k4),
                    strides_of(v4), os, current_stream(q.device().index)),
                kOp);
  return result;
}

FlashBackward flash_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                       const Tensor& v, const Tensor& out, const Tensor& lse,
                                       const Tensor& /*probs*/, bool causal, double scale) {
  HG_CHECK(flash_attention_fits(q, k, v),
           "{}_backward: the fused CUDA kernels do not take q {} {}, k {} {}, v {} {}", kOp,
           q.sizes(), q.dtype(), k.sizes(), k.dtype(), v.sizes(), v.dtype());
  HG_CHECK(dout.defined() && dout.sizes() == q.sizes() && out.sizes() == q.sizes() &&
               dout.device() == q.device(),
           "{}_backward: expected grad_output and out of q's shape {} on {}, got {} and {}", kOp,
           q.sizes(), q.device(), dout.sizes(), out.sizes());
  const Shape row_shape = rows_of(q);
  HG_CHECK(lse.dtype() == kFloat32 && lse.sizes() == row_shape && lse.is_contiguous(),
           "{}_backward: expected the forward's lse, contiguous float32 of shape {}, got {} {}",
           kOp, row_shape, lse.dtype(), lse.sizes());
  DeviceGuard guard(q.device().index);
  const Tensor q4 = as_4d(q), k4 = as_4d(k), v4 = as_4d(v);
  const Tensor out4 = as_4d(out.to(q.dtype())), dout4 = as_4d(dout.to(q.dtype()));
  const detail::FlashGeometry g = geometry(q4, k4, causal, scale);
  FlashBackward result{empty(q.sizes(), like(q, q.dtype())), empty(k.sizes(), like(k, k.dtype())),
                       empty(v.sizes(), like(v, v.dtype()))};
  const Tensor delta = empty(row_shape, like(q, kFloat32));
  HG_CUDA_CHECK(
      detail::launch_flash_attention_backward(
          q4.data_ptr(), k4.data_ptr(), v4.data_ptr(), out4.data_ptr(), dout4.data_ptr(),
          lse.data_ptr<float>(), delta.data_ptr<float>(), result.dq.data_ptr(),
          result.dk.data_ptr(), result.dv.data_ptr(), q.dtype(), g, strides_of(q4), strides_of(k4),
          strides_of(v4), strides_of(out4), strides_of(dout4), current_stream(q.device().index)),
      kOp);
  return result;
}

}  // namespace

// clang-format off
const kernel::AttentionKernels attention_kernels{.fits = flash_attention_fits,
    .forward = flash_attention_forward, .backward = flash_attention_backward};
// clang-format on

}  // namespace hg::cuda
