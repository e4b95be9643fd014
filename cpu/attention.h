// The CPU attention kernels' own API beside their kernel table (cpu::attention_kernels,
// kernel/attention.h): which path a call takes, for tests, benchmarks and hg-info.
#pragma once

#include <cstdint>

#include "halfgrad/core/dtype.h"

namespace hg::cpu {

enum class AttentionPath {
  Auto,     // bfloat16 heads within the buffers' sizes by heads on a CPU with AVX512-BF16
            // (NOTE [Attention by heads] in cpu/attention_heads_avx512.cpp), the rest batched
  Batched,  // every call on batched GEMMs around the row passes (NOTE [CPU attention])
};

// Fixes the path from now on, for every thread. HALFGRAD_CPU_ATTENTION=batched in the
// environment sets Batched at the first call.
void set_attention_path(AttentionPath path);
AttentionPath get_attention_path();

// "heads" or "batched": the path attention of q [..., L, E] and k, v [..., S, E] in `dtype`
// takes on this CPU and build, under the path set now.
const char* attention_path_name(DType dtype, int64_t L, int64_t S, int64_t E);

}  // namespace hg::cpu
