// Scaled dot-product attention as a composite of matmul, masked_fill/add, softmax and
// dropout: autocast casts q, k, v once (lower precision, as torch.amp lists it) and autograd
// records the parts. The softmax runs in float32 for 16-bit inputs and the weights are cast
// back, which keeps the probabilities accurate without changing the result dtype.
#include "halfgrad/ops/attention.h"

#include <cmath>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::OpContext;

// The bool [L, S] mask of j > i (keys after the query). On a GPU it is made there, by
// cumulative sums of ones, not copied from the host: a copy from pageable host memory cannot
// be captured into a CUDA graph, and a training step must be capturable.
Tensor causal_future(int64_t L, int64_t S, Device device) {
  if (device.is_cpu()) return gt(arange(S).unsqueeze(0), arange(L).unsqueeze(1));
  const TensorOptions on{.dtype = kInt64, .device = device};
  return gt(cumsum(ones({1, S}, on), 1), cumsum(ones({L, 1}, on), 0));
}

struct ScaledDotProductAttention {
  static constexpr OpId id = OpId::scaled_dot_product_attention;
  static constexpr bool kComposite = true;
  double dropout_p = 0.0;
  bool is_causal = false;
  std::optional<double> scale{};
  Generator* generator = nullptr;

  Tensor forward(OpContext&, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& attn_mask) {
    HG_CHECK(q.dim() >= 2 && k.dim() >= 2 && v.dim() >= 2,
             "expected q, k and v of at least 2 dims, got shapes {}, {} and {}", q.sizes(),
             k.sizes(), v.sizes());
    HG_CHECK(q.size(-1) == k.size(-1), "q and k must have the same last dim (E), got q {} and k {}",
             q.sizes(), k.sizes());
    HG_CHECK(k.size(-2) == v.size(-2), "k and v must have the same length (S), got k {} and v {}",
             k.sizes(), v.sizes());
    HG_CHECK(q.is_floating_point() && q.dtype() == k.dtype() && q.dtype() == v.dtype(),
             "expected floating q, k and v of one dtype, got {}, {} and {}", q.dtype(), k.dtype(),
             v.dtype());
    HG_CHECK(!(is_causal && attn_mask.defined()),
             "is_causal and attn_mask are exclusive: pass one of them");
    HG_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, "expected dropout_p in [0, 1], got {}",
             dropout_p);
    const int64_t L = q.size(-2), S = k.size(-2);
    const double factor = scale.value_or(1.0 / std::sqrt(double(q.size(-1))));

    Tensor scores = mul(matmul(q, k.transpose(-2, -1)), factor);  // [N..., L, S]
    if (is_causal) {
      scores = masked_fill(scores, causal_future(L, S, q.device()), -INFINITY);
    } else if (attn_mask.defined()) {
      HG_CHECK(broadcasts_to(attn_mask.sizes(), scores.sizes()),
               "attn_mask of shape {} does not broadcast to the scores' shape {}",
               attn_mask.sizes(), scores.sizes());
      scores = attn_mask.dtype() == kBool ? masked_fill(scores, eq(attn_mask, false), -INFINITY)
                                          : add(scores, attn_mask.to(scores.dtype()));
    }
    const DType dtype = scores.dtype();
    const bool widen = is_reduced_precision(dtype);
    Tensor weights = softmax(widen ? scores.to(kFloat32) : scores, -1);
    if (widen) weights = weights.to(dtype);
    if (dropout_p > 0.0) weights = dropout(weights, dropout_p, true, generator);
    return matmul(weights, v);
  }
};

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* generator) {
  return ops::dispatch(
      ScaledDotProductAttention{
          .dropout_p = dropout_p, .is_causal = is_causal, .scale = scale, .generator = generator},
      q, k, v, attn_mask);
}

}  // namespace hg
