// The dropout family's op: dropout, forward (the kernel of kernel/dropout.h) and backward
// (an op formula, NOTE [Differentiable nn backwards] in ops/norm.cpp).
#include "halfgrad/core/format.h"
#include "halfgrad/core/random.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

// ---- dropout ----------------------------------------------------------------------------------

struct Dropout {
  static constexpr OpId id = OpId::dropout;
  double p = 0.5;
  Generator* generator = nullptr;

  Tensor forward(OpContext& ctx, const Tensor& x) {
    kernel::DropoutForward r =
        kernel_for::dropout(x).dropout(x, p, generator ? *generator : default_generator());
    ctx.save({r.mask});
    return r.out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) { return {mul(grads[0], ctx.saved(0))}; }
};

}  // namespace

// ---- the public functions -------------------------------------------------------------------

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  HG_CHECK(p >= 0.0 && p <= 1.0, "dropout: expected a probability p in [0, 1], got p={}", p);
  if (!training) return x;  // as torch: the input itself
  return dispatch(Dropout{.p = p, .generator = generator}, x);
}

}  // namespace hg
