// halfgrad's ops: free functions named as in PyTorch, each a thin call into the dispatcher
// (ops/dispatch.h). Tensor's methods and operators (t.sum(), a + b, t.transpose(0, 1)) call
// the same ops.
//
// Type promotion follows PyTorch (ops/type_promotion.h): float16 + bfloat16 -> float32, a C++
// number does not promote a tensor (half_tensor * 2.0 stays half), and float ops on integer
// tensors compute in float32.
#pragma once

#include <optional>
#include <string_view>

#include "halfgrad/core/scalar.h"
#include "halfgrad/core/tensor.h"

namespace hg {

// ---- elementwise (ops/elementwise.cpp) --------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor add(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha = 1);
Tensor sub(const Tensor& a, Scalar b, Scalar alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, Scalar b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, const Tensor& exponent);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// The elementwise functions of one tensor (exp, log, sin, relu, ...): `Tensor name(const
// Tensor& x)` for each HG_UNARY_OP line of op_list.def. Integer inputs compute in float32,
// except where the kind takes integers (kernel/unary.def: neg, abs, relu keep them).
#define HG_OP(name, cuda, cpu, differentiable)
#define HG_UNARY_OP(name, kind, cuda, cpu, domain) Tensor name(const Tensor& x);
#include "halfgrad/ops/op_list.def"
#undef HG_UNARY_OP
#undef HG_OP
// approximate: "none" (exact, with erf) or "tanh", as torch.nn.functional.gelu.
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
Tensor sign(const Tensor& x);
// Bool masks of NaN, of +-inf, and of finite values, as torch's (integer and bool tensors have
// no NaN and no infinity).
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);
Tensor isfinite(const Tensor& x);
// x with NaN, +inf and -inf replaced, as torch.nan_to_num: by `nan`, and by `posinf` and
// `neginf`, which default to the dtype's largest and most negative finite values. The
// gradient passes where x is finite, 0 where a value was replaced. Integer and bool tensors
// come back as a copy.
Tensor nan_to_num(const Tensor& x, double nan = 0.0, std::optional<double> posinf = std::nullopt,
                  std::optional<double> neginf = std::nullopt);
Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max);
Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value = 1);
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value = 1);

// Comparisons: bool tensors, no gradient.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, Scalar b);
Tensor ne(const Tensor& a, Scalar b);
Tensor lt(const Tensor& a, Scalar b);
Tensor le(const Tensor& a, Scalar b);
Tensor gt(const Tensor& a, Scalar b);
Tensor ge(const Tensor& a, Scalar b);

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, Scalar b);
Tensor operator+(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, Scalar b);
Tensor operator-(Scalar a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, Scalar b);
Tensor operator*(Scalar a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, Scalar b);
Tensor operator/(Scalar a, const Tensor& b);
Tensor operator-(const Tensor& x);

// ---- reductions (ops/reduce.cpp) ----------------------------------------------------------------
// dims empty = all dims. dtype: compute and return in this dtype (not autocast).
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false,
           std::optional<DType> dtype = std::nullopt);
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false,
            std::optional<DType> dtype = std::nullopt);
Tensor prod(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// The largest / smallest element (a 0-d tensor); the gradient is split among ties.
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Index of the largest element (of the flattened tensor when dim is absent); int64.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// Variance with `correction` (1: the unbiased estimate, torch's default).
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// The p-norm (p = 2 by default; inf for the max-norm).
Tensor norm(const Tensor& x, double p = 2.0, const Shape& dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// ---- shapes (ops/shape.cpp) -------------------------------------------------------------------
// Reduces a gradient of a broadcast result back to `sizes` (sums the broadcast dims).
Tensor sum_to_size(const Tensor& x, const Shape& sizes);

}  // namespace hg

#include "halfgrad/ops/activation.h"
#include "halfgrad/ops/attention.h"
#include "halfgrad/ops/conv.h"
#include "halfgrad/ops/dropout.h"
#include "halfgrad/ops/embedding.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/linalg.h"
#include "halfgrad/ops/loss.h"
#include "halfgrad/ops/norm.h"
#include "halfgrad/ops/pool.h"
