// The CPU multi_tensor kernels' AVX-512 passes (multi_tensor_avx512.cpp, the one file compiled
// with -mavx512f), one per update rule and the unscale: float32 parameters and state, blocks
// [first_block, last_block) of 16 elements of n, masked at the tail. Called only where the CPU has
// AVX-512 (cpu/multi_tensor.cpp checks), each pass instantiates the update rule the scalar loops
// instantiate (kernel/update_rules.h) on 16 float lanes, so its results are the scalar loop's bits.
#pragma once

#include <cstdint>

#include "halfgrad/kernel/update_rules.h"

namespace hg::cpu::detail {

// max_exp_avg_sq: null unless k.amsgrad.
void adam_blocks_avx512(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                        float* max_exp_avg_sq, int64_t n, int64_t first_block, int64_t last_block,
                        const kernel::rules::AdamConstants<float>& k);
// buffer: null without momentum.
void sgd_blocks_avx512(float* param, const float* grad, float* buffer, int64_t n,
                       int64_t first_block, int64_t last_block,
                       const kernel::rules::SGDConstants<float>& k);
// grad_avg: null unless centered; momentum_buffer: null without momentum.
void rmsprop_blocks_avx512(float* param, const float* grad, float* square_avg, float* grad_avg,
                           float* momentum_buffer, int64_t n, int64_t first_block,
                           int64_t last_block, const kernel::rules::RMSpropConstants<float>& k);
void adagrad_blocks_avx512(float* param, const float* grad, float* sum, int64_t n,
                           int64_t first_block, int64_t last_block,
                           const kernel::rules::AdagradConstants<float>& k);
// Adamax, Adadelta, RAdam and NAdam, by their constants: first and second their two buffers
// (exp_avg and exp_inf; square_avg and acc_delta; exp_avg and exp_avg_sq).
void two_buffer_blocks_avx512(float* param, const float* grad, float* first, float* second,
                              int64_t n, int64_t first_block, int64_t last_block,
                              const kernel::rules::AdamaxConstants<float>& k);
void two_buffer_blocks_avx512(float* param, const float* grad, float* first, float* second,
                              int64_t n, int64_t first_block, int64_t last_block,
                              const kernel::rules::AdadeltaConstants<float>& k);
void two_buffer_blocks_avx512(float* param, const float* grad, float* first, float* second,
                              int64_t n, int64_t first_block, int64_t last_block,
                              const kernel::rules::RAdamConstants<float>& k);
void two_buffer_blocks_avx512(float* param, const float* grad, float* first, float* second,
                              int64_t n, int64_t first_block, int64_t last_block,
                              const kernel::rules::NAdamConstants<float>& k);
// data *= inv_scale in place; true when a value read was not finite.
bool unscale_blocks_avx512(float* data, int64_t n, int64_t first_block, int64_t last_block,
                           float inv_scale);

}  // namespace hg::cpu::detail
