// The CPU attention kernels' per-head path for bfloat16 on AVX512-BF16 (attention_heads_avx512.cpp,
// the one file compiled with -mavx512bf16; NOTE [Attention by heads] there). cpu/attention.cpp
// calls these one head at a time, only where the CPU has AVX512-BF16 and the shape is within
// heads_fit; each call computes one head's forward or backward from its operands' bfloat16 bits
// in a workspace of heads_workspace_bytes (64-byte aligned, one per thread). No inline code here
// (NOTE [Vector math] in cpu/vector_math.h says why).
#pragma once

#include <cstddef>
#include <cstdint>

namespace hg::cpu::detail {

// One head's matrix in bfloat16 bits: rows of E values, each row `stride` values after the last.
struct HeadRows {
  const uint16_t* data;
  int64_t stride;
};

struct HeadShape {
  int64_t L, S, E;  // queries, keys, head dim
  bool causal;      // query l sees keys 0..l (top-left aligned, as torch's is_causal)
  float scale;
};

// Whether a head of this shape fits the kernels' buffers: L and S up to 1024, E up to 256, and
// L times S rounded up to 16 at most 32768.
bool heads_fit(int64_t L, int64_t S, int64_t E);
size_t heads_workspace_bytes(const HeadShape& shape);

// out [L, E] (dense), lse [L] float32; probs [L, S] (dense) where the forward keeps P, else null.
void head_forward_avx512bf16(const HeadShape& shape, HeadRows q, HeadRows k, HeadRows v,
                             uint16_t* out, float* lse, uint16_t* probs, void* workspace);

// dq [L, E], dk and dv [S, E] (dense) from dout and the forward's out, lse and (when kept) probs
// [L, S]; with probs null, P is computed again from q, k and lse.
void head_backward_avx512bf16(const HeadShape& shape, HeadRows dout, HeadRows q, HeadRows k,
                              HeadRows v, HeadRows out, const float* lse, const uint16_t* probs,
                              uint16_t* dq, uint16_t* dk, uint16_t* dv, void* workspace);

}  // namespace hg::cpu::detail
