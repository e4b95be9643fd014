// Launchers of the fused attention kernels (attention.cu), called by attention.cpp. Free of fmt
// (NOTE [CUDA headers without fmt] in probe.h): plain pointers and sizes, cudaError_t results.
//
// Every operand is viewed as [B, H, rows, E] (B batch, H heads, E the head width): q and out
// have L rows, k and v have S rows. Its last dim is contiguous; the other three strides (in
// elements) are given. lse and delta are float32 [B, H, L], contiguous.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "halfgrad/core/dtype.h"

namespace hg::cuda::detail {

// The widest head the kernels take: E is padded up to 32, 64 or 128 in shared memory.
inline constexpr int64_t kFlashMaxHead = 128;

struct FlashStrides {
  int64_t batch = 0;
  int64_t head = 0;
  int64_t row = 0;
};

struct FlashGeometry {
  int64_t B = 1, H = 1, L = 0, S = 0, E = 0;
  float scale = 1.0f;   // multiplies q k^T
  bool causal = false;  // key j > query i is masked (top-left aligned, as torch's is_causal)
};

// Whether the kernels this build holds for the current device come from code for compute
// capability 8.0 or newer (a build for older targets only has them trap).
cudaError_t flash_kernels_compiled_for_current_device(bool* compiled);

// The row tiles of 16 queries each warp of the forward and dQ kernels owns (NOTE [Two row tiles
// per warp] in attention.cu): 1, 2 (heads up to 64 wide; wider ones take 1), or 0 for the
// default. For the benchmarks and tests that compare the two; each launch reads the setting
// once, and the two give the same bits.
void set_flash_query_row_tiles(int row_tiles);

// Shared memory the forward and the backward kernels ask for with head width E; the host checks
// it against the device's opt-in limit before launching.
int64_t flash_forward_smem_bytes(int64_t E);
int64_t flash_backward_smem_bytes(int64_t E);

// out = softmax(q k^T scale, masked) v, and lse = log(sum(exp(q k^T scale))) per query row
// (natural log, of the scaled scores). dtype: Float16 or BFloat16.
cudaError_t launch_flash_attention_forward(const void* q, const void* k, const void* v, void* out,
                                           float* lse, DType dtype, const FlashGeometry& g,
                                           const FlashStrides& qs, const FlashStrides& ks,
                                           const FlashStrides& vs, const FlashStrides& os,
                                           cudaStream_t stream);

// dq, dk, dv (contiguous [B, H, rows, E], the dtype) from dout and the forward's out and lse.
// delta: float32 [B, H, L] scratch (rowsum(dout * out)). Each gradient is written by one block
// per row tile, in a fixed order: no atomics, the same bits every run.
cudaError_t launch_flash_attention_backward(const void* q, const void* k, const void* v,
                                            const void* out, const void* dout, const float* lse,
                                            float* delta, void* dq, void* dk, void* dv, DType dtype,
                                            const FlashGeometry& g, const FlashStrides& qs,
                                            const FlashStrides& ks, const FlashStrides& vs,
                                            const FlashStrides& os, const FlashStrides& dos,
                                            cudaStream_t stream);

}  // namespace hg::cuda::detail
