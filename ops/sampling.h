// Random sampling (ops/sampling.cpp): bernoulli, multinomial, randint, randperm.
//
//   Tensor next = hg::multinomial(hg::softmax(logits, -1), 1);   // [B, 1] token ids
//   Tensor order = hg::randperm(n);                              // a shuffle of 0..n-1
//
// Every draw is made of float64 uniforms from the Philox generator (NOTE [Philox stream
// layout] in core/random.h), which are the same bits on the CPU and on CUDA, so a seed draws
// the same samples on either device (multinomial's log and running sums can differ in a last
// bit between devices, which moves a sample only when a uniform falls within that bit of a
// category's edge). `generator` defaults to the default generator.
#pragma once

#include <cstdint>

#include "halfgrad/core/random.h"
#include "halfgrad/core/tensor.h"

namespace hg {

// 1 with probability p (each element of p, in [0, 1]), else 0, in p's dtype; or with one p.
Tensor bernoulli(const Tensor& p, Generator* generator = nullptr);
Tensor bernoulli(const Tensor& like, double p, Generator* generator = nullptr);
// num_samples category indices (int64) per row of probs ([K] or [B, K], weights >= 0 with a
// positive sum, not normalised): with replacement, independent draws; without, distinct
// categories in the order drawn (as torch's). [num_samples] or [B, num_samples].
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* generator = nullptr);
// Integers uniform in [low, high), of `sizes`, in options.dtype (int64 by default; a floating
// dtype holds the same whole numbers, as torch's). TensorOptions{.device = d} alone names
// float32: give the dtype with the device.
Tensor randint(int64_t low, int64_t high, const Shape& sizes,
               TensorOptions options = {.dtype = kInt64}, Generator* generator = nullptr);
Tensor randint(int64_t high, const Shape& sizes, TensorOptions options = {.dtype = kInt64},
               Generator* generator = nullptr);
// A uniformly random permutation of 0..n-1, in options.dtype (int64 by default).
Tensor randperm(int64_t n, TensorOptions options = {.dtype = kInt64},
                Generator* generator = nullptr);

}  // namespace hg
