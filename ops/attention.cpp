// Scaled dot-product attention as a composite of matmul, masked_fill/add, softmax and
// dropout: autocast casts q, k, v once (lower precision, as torch.amp lists it) and autograd
// records the parts. The softmax runs in float32 for 16-bit inputs and the weights are cast
// back, which keeps the probabilities accurate without changing the result dtype.
//
// A call the backend's attention kernels take (no attn_mask, no dropout; kernel/attention.h says
// which operands) goes to scaled_dot_product_flash_attention instead, one node, as torch picks
// its flash kernel: on a GPU its forward and backward never write the [L, S] scores (NOTE
// [Fused attention] in cuda/attention.cu), on the CPU they are batched GEMMs around one pass
// over the score rows (NOTE [CPU attention] in cpu/attention.cpp).
#include "halfgrad/ops/attention.h"

#include <cmath>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/kernel/attention.h"
#include "halfgrad/kernel/checks.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernel_lookup.h"
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

double default_scale(const Tensor& q) { return 1.0 / std::sqrt(double(q.size(-1))); }

// The backend's attention kernels take these operands.
bool flash_fits(const Tensor& q, const Tensor& k, const Tensor& v) {
  const kernel::AttentionKernels* fused = kernel_for::attention(q);
  return fused != nullptr && fused->fits(q, k, v);
}

// q k^T * factor, the future masked with -inf when causal: [N..., L, S].
Tensor scores(const Tensor& q, const Tensor& k, double factor, bool causal) {
  const Tensor s = mul(matmul(q, k.transpose(-2, -1)), factor);
  return causal ? masked_fill(s, causal_future(q.size(-2), k.size(-2), q.device()), -INFINITY) : s;
}

using Grads = autograd::GradList;

// softmax(q k^T * scale, causal) v as one node. Where the backend's kernels fit, they run
// forward and backward (saving the rows' logsumexp, and the weights only where the kernels keep
// them: NOTE [CPU attention keeps P] in cpu/attention.cpp); elsewhere, and in a
// backward that is itself recorded (create_graph), the same math runs as halfgrad ops in the
// accumulation dtype (float32 for 16-bit inputs), recomputing the weights.
struct ScaledDotProductFlashAttention {
  static constexpr OpId id = OpId::scaled_dot_product_flash_attention;
  bool is_causal = false;
  std::optional<double> scale{};
  bool fused = false;  // set by forward: the backend's kernels ran, and saved lse and out
  bool kept_probs = false;  // set by forward: the kernels kept P too (saved after out)

  double factor(const Tensor& q) const { return scale.value_or(default_scale(q)); }

  Tensor forward(OpContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v) {
    HG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(),
             "expected q, k and v of one rank, at least 2, got shapes {}, {} and {}", q.sizes(),
             k.sizes(), v.sizes());
    bool same_batch = true;
    for (int64_t d = 0; d < q.dim() - 2; ++d) {
      same_batch = same_batch && k.size(d) == q.size(d) && v.size(d) == q.size(d);
    }
    HG_CHECK(same_batch && k.size(-1) == q.size(-1) && v.size(-1) == q.size(-1) &&
                 v.size(-2) == k.size(-2),
             "expected q [N..., L, E], k and v [N..., S, E] (one batch shape, one head width "
             "E), got {}, {} and {}",
             q.sizes(), k.sizes(), v.sizes());
    HG_CHECK(q.is_floating_point() && q.dtype() == k.dtype() && q.dtype() == v.dtype(),
             "expected floating q, k and v of one dtype, got {}, {} and {}", q.dtype(), k.dtype(),
             v.dtype());
    if (flash_fits(q, k, v)) {
      kernel::FlashForward r =
          kernel_for::attention(q)->forward(q, k, v, is_causal, factor(q), ctx.recording());
      fused = true;
      ctx.save({q, k, v, r.lse});
      ctx.save_output(r.out);
      kept_probs = r.probs.defined();  // only when asked: only while recording
      if (kept_probs) ctx.save({r.probs});
      return r.out;
    }
    ctx.save({q, k, v});
    const DType acc = kernel::acc_dtype(q.dtype());
    const Tensor weights = softmax(scores(q.to(acc), k.to(acc), factor(q), is_causal), -1);
    return matmul(weights, v.to(acc)).to(q.dtype());
  }

  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor q = ctx.saved(0), k = ctx.saved(1), v = ctx.saved(2);
    if (fused && !autograd::is_grad_enabled()) {
      kernel::FlashBackward r = kernel_for::attention(q)->backward(
          grads[0], q, k, v, ctx.saved_data(4), ctx.saved_data(3),
          kept_probs ? ctx.saved_data(5) : Tensor(), is_causal, factor(q));
      return {r.dq, r.dk, r.dv};
    }
    // P = softmax(S), dV = P^T dO, dP = dO V^T, dS = P (dP - rowsum(dP P)), dQ = dS K scale,
    // dK = dS^T Q scale: differentiable again.
    const DType acc = kernel::acc_dtype(q.dtype());
    const double f = factor(q);
    const Tensor qa = q.to(acc), ka = k.to(acc), va = v.to(acc), dout = grads[0].to(acc);
    const Tensor p = softmax(scores(qa, ka, f, is_causal), -1);
    Grads out(3);
    if (ctx.needs_input_grad(2)) out[2] = matmul(p.transpose(-2, -1), dout).to(v.dtype());
    if (ctx.needs_input_grad(0) || ctx.needs_input_grad(1)) {
      const Tensor dp = matmul(dout, va.transpose(-2, -1));
      const Tensor ds = mul(mul(p, sub(dp, sum(mul(dp, p), {-1}, true))), f);
      if (ctx.needs_input_grad(0)) out[0] = matmul(ds, ka).to(q.dtype());
      if (ctx.needs_input_grad(1)) out[1] = matmul(ds.transpose(-2, -1), qa).to(k.dtype());
    }
    return out;
  }
};

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
    if (!attn_mask.defined() && dropout_p == 0.0 && flash_fits(q, k, v)) {
      return scaled_dot_product_flash_attention(q, k, v, is_causal, scale);
    }
    const double factor = scale.value_or(default_scale(q));

    Tensor scores = hg::scores(q, k, factor, is_causal);  // [N..., L, S]
    if (attn_mask.defined()) {
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

Tensor scaled_dot_product_flash_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                          bool is_causal, std::optional<double> scale) {
  return ops::dispatch(ScaledDotProductFlashAttention{.is_causal = is_causal, .scale = scale}, q, k,
                       v);
}

}  // namespace hg
