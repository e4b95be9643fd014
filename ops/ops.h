// halfgrad's ops: free functions named as in PyTorch, each a thin call into the dispatcher
// (ops/dispatch.h). Tensor's methods and operators (t.sum(), a + b, a == b, t.argmax(1);
// ops/tensor_methods.cpp) call the same ops.
//
// Type promotion follows PyTorch (ops/type_promotion.h): float16 + bfloat16 -> float32, a C++
// number does not promote a tensor (half_tensor * 2.0 stays half), and float ops on integer
// tensors compute in float32.
#pragma once

#include <optional>
#include <string_view>
#include <tuple>

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
// base ** exponent for a number base (torch's number ** tensor, __rpow__): the dtype of the
// two as a binary op's; a 16-bit exponent computes with the base in float32 and rounds once.
Tensor pow(Scalar base, const Tensor& exponent);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// The remainder of a / b: fmod's has the sign of a (C's fmod), remainder's the sign of b
// (Python's %). Integer dtypes stay integers; an integer divisor of 0 is an error.
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, Scalar b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, Scalar b);
Tensor remainder(Scalar a, const Tensor& b);
// a / b rounded: "trunc" toward zero (C's integer division), "floor" down (Python's //, as
// floor_divide). Integer dtypes stay integers (a divisor of 0 is an error); no gradient.
Tensor div(const Tensor& a, const Tensor& b, std::string_view rounding_mode);
Tensor div(const Tensor& a, Scalar b, std::string_view rounding_mode);
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, Scalar b);
// The angle of the point (b, a), in (-pi, pi]; sqrt(a^2 + b^2) without overflow. Integers
// compute in float32.
Tensor atan2(const Tensor& a, const Tensor& b);
Tensor hypot(const Tensor& a, const Tensor& b);
// start + weight (end - start), weight a tensor (broadcast) or a number.
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight);
Tensor lerp(const Tensor& start, const Tensor& end, Scalar weight);
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
// Comparisons as operators, as libtorch's (bool tensors): x == y, logits > 0, 0 < x.
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, Scalar b);
Tensor operator==(Scalar a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, Scalar b);
Tensor operator!=(Scalar a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, Scalar b);
Tensor operator<(Scalar a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, Scalar b);
Tensor operator<=(Scalar a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, Scalar b);
Tensor operator>(Scalar a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, Scalar b);
Tensor operator>=(Scalar a, const Tensor& b);

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
// The largest / smallest elements over dims (all dims when empty).
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// Index of the largest element (of the flattened tensor when dim is absent); int64.
Tensor argmax(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// Variance with `correction` (1: the unbiased estimate, torch's default).
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// The p-norm (p = 2 by default; inf for the max-norm).
Tensor norm(const Tensor& x, double p = 2.0, const Shape& dims = {}, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// The running product along dim (integers in int64); the gradient handles zeros exactly.
Tensor cumprod(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// log(cumsum(exp(x))) along dim, without overflow.
Tensor logcumsumexp(const Tensor& x, int64_t dim);
// Index of the smallest element (the first among ties; NaN counts as the smallest, as torch's).
Tensor argmin(const Tensor& x, std::optional<int64_t> dim = std::nullopt, bool keepdim = false);
// Whether any / every element over dims is nonzero (NaN is nonzero): bool. Over zero elements,
// any is false and all true.
Tensor any(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor all(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
// The standard deviation, sqrt(var(x, dims, correction, keepdim)). Called as hg::std where
// `using namespace hg` is in force (an unqualified std(...) also names namespace std).
Tensor std(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
// {var, mean} and {std, mean} over the same dims.
std::tuple<Tensor, Tensor> var_mean(const Tensor& x, const Shape& dims = {}, int64_t correction = 1,
                                    bool keepdim = false);
std::tuple<Tensor, Tensor> std_mean(const Tensor& x, const Shape& dims = {}, int64_t correction = 1,
                                    bool keepdim = false);
// x / max(||x||_p, eps) along dim, as torch.nn.functional.normalize.
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
// The cosine of the angle between x1 and x2 (broadcast) along dim, each normalised by
// max(||x||, eps) first.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
// The p-norm distance between the rows of x1 [*, P, M] and those of x2 [*, R, M]: [*, P, R].
Tensor cdist(const Tensor& x1, const Tensor& x2, double p = 2.0);
// norm(input - other, p) over all elements, the two broadcast together (torch.dist).
Tensor dist(const Tensor& input, const Tensor& other, double p = 2.0);
// norm(x1 - x2 + eps, p) over the last dim, the two broadcast together
// (torch.nn.functional.pairwise_distance).
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6,
                         bool keepdim = false);
// input with each slice along dim whose p-norm exceeds maxnorm scaled down to it
// (torch.renorm: the factor maxnorm / (norm + 1e-7)).
Tensor renorm(const Tensor& input, double p, int64_t dim, double maxnorm);
// The p-norm distances of the pairs of rows i < j of input [N, M], [N (N - 1) / 2] in
// row-major order of the pairs (torch.pdist).
Tensor pdist(const Tensor& input, double p = 2.0);

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
#include "halfgrad/ops/mask.h"
#include "halfgrad/ops/norm.h"
#include "halfgrad/ops/pool.h"
#include "halfgrad/ops/rearrange.h"
#include "halfgrad/ops/rnn.h"
#include "halfgrad/ops/sampling.h"
#include "halfgrad/ops/sort.h"
