// The GEMM family: forward through the linalg kernels (kernel/linalg.h), backward written
// with the same ops (dA = dC @ B^T, dB = A^T @ dC), so higher-order gradients work. matmul is
// a composite: it autocasts once, at the outermost call, and records the ops it calls. linear
// is one node (NOTE [Linear is one node]).
#include "halfgrad/ops/linalg.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/view.h"
#include "halfgrad/ops/backward_helpers.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/fp8.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/nn_helpers.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

void check_floating_pair(const char* op, const Tensor& a, const Tensor& b) {
  HG_CHECK(a.is_floating_point() && a.dtype() == b.dtype(),
           "{}: expected two floating tensors of one dtype, got {} and {}", op, a.dtype(),
           b.dtype());
}

void check_operands(const char* op, const Tensor& a, const Tensor& b, int64_t rank) {
  HG_CHECK(a.dim() == rank && b.dim() == rank,
           "{}: expected two {}-D tensors, got shapes {} and {}", op, rank, a.sizes(), b.sizes());
  check_floating_pair(op, a, b);
  HG_CHECK(a.size(-1) == b.size(-2),
           "{}: the shapes {} and {} cannot be multiplied ({} columns against {} rows)", op,
           a.sizes(), b.sizes(), a.size(-1), b.size(-2));
}

// a [B, M, K] @ b [B, K, N], plus beta * input when given, into a new tensor of `shape`
// ([B, M, N], or the same elements without the unit dims, as mm and dot return them). The
// result is a tensor of its own, not a view of a [B, M, N] one, so that autograd can take it
// as a leaf's gradient without a copy (NOTE [Gradient accumulation]).
Tensor product(const Tensor& a, const Tensor& b, const Tensor& input, double beta, double alpha,
               const Shape& shape) {
  const Shape batched{a.size(0), a.size(1), b.size(2)};
  auto as_batched = [&](const Tensor& out) {
    return out.sizes() == batched ? out : core::view(out, batched);
  };
  Tensor out;
  if (input.defined() && beta == 1.0 && alpha == 1.0 && input.dim() == 1 &&
      input.size(0) == b.size(2)) {  // a bias row: addmm(bias, x, w) (NOTE [GEMM with bias])
    out = empty(shape, a.options());
    kernel_for::linalg(a).gemm_bias(a, b, core::to_dtype(input, a.dtype()).contiguous(),
                                    as_batched(out));
    return out;
  }
  if (input.defined() && beta != 0.0) {
    out = core::clone(core::expand(core::to_dtype(input, a.dtype()), shape));
  } else {
    out = empty(shape, a.options());
    beta = 0.0;
  }
  kernel_for::linalg(a).gemm(a, b, as_batched(out), alpha, beta);
  return out;
}

// ---- mm / addmm ------------------------------------------------------------------------------

// NOTE [GEMM gradient layout] The gradient of a column-major operand (a transposed view, as
// linear's weight.t()) is computed transposed, so that it comes out in the operand's own
// layout: d(b) = (g^T @ a)^T rather than a^T @ g, d(a) = (b @ g^T)^T rather than g @ b^T
// (PyTorch's mm_mat1_backward / mm_mat2_backward do the same). The same flops either way,
// but the gradient that flows on through the transpose (to the weight, and through the
// weight's autocast cast) is then contiguous: no strided copy or cast over a large matrix.
bool column_major(const Tensor& t) {
  return t.size(-2) > 1 && t.size(-1) > 1 && t.stride(-2) == 1 && t.stride(-1) == t.size(-2);
}

// g [M, N] @ b^T for a [M, K], in a's layout.
Tensor mm_grad_a(const Tensor& g, const Tensor& a, const Tensor& b) {
  return column_major(a) ? mm(b, g.t()).t() : mm(g, b.t());
}

// a^T @ g [M, N] for b [K, N], in b's layout.
Tensor mm_grad_b(const Tensor& g, const Tensor& a, const Tensor& b) {
  return column_major(b) ? mm(g.t(), a).t() : mm(a.t(), g);
}

struct AddMm {
  static constexpr OpId id = OpId::addmm;
  double beta = 1.0, alpha = 1.0;
  Shape input_sizes{};
  DType input_dtype = kFloat32;
  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& a, const Tensor& b) {
    check_operands("addmm", a, b, 2);
    HG_CHECK(broadcasts_to(input.sizes(), {a.size(0), b.size(1)}),
             "addmm: the input of shape {} does not broadcast to the product's shape [{}, {}]",
             input.sizes(), a.size(0), b.size(1));
    input_sizes = input.sizes();
    input_dtype = input.dtype();
    ctx.save({a, b});
    return product(core::unsqueeze(a, 0), core::unsqueeze(b, 0), input, beta, alpha,
                   {a.size(0), b.size(1)});
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor a = ctx.saved(0), b = ctx.saved(1);
    const Tensor& g = grads[0];
    Grads out(3);
    if (ctx.needs_input_grad(0)) {
      out[0] = ops::reduce_grad(beta == 1.0 ? g : mul(g, beta), input_sizes, input_dtype);
    }
    if (ctx.needs_input_grad(1)) out[1] = scaled(mm_grad_a(g, a, b), alpha);
    if (ctx.needs_input_grad(2)) out[2] = scaled(mm_grad_b(g, a, b), alpha);
    return out;
  }
  static Tensor scaled(const Tensor& t, double s) { return s == 1.0 ? t : mul(t, s); }
};

// op(a) @ op(b) (+ bias) for 2-D operands, into a new tensor, on the kernel directly (no 3-D
// views): what mm and linear compute, bit for bit.
Tensor product_2d(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                  const Tensor& bias = {}) {
  Tensor out = empty({a.size(transpose_a ? 1 : 0), b.size(transpose_b ? 0 : 1)}, a.options());
  kernel_for::linalg(a).gemm_2d(a, transpose_a, b, transpose_b, out, bias);
  return out;
}

struct Mm {
  static constexpr OpId id = OpId::mm;
  Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    check_operands("mm", a, b, 2);
    ctx.save({a, b});
    return product_2d(a, false, b, false);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor a = ctx.saved(0), b = ctx.saved(1);
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = mm_grad_a(grads[0], a, b);
    if (ctx.needs_input_grad(1)) out[1] = mm_grad_b(grads[0], a, b);
    return out;
  }
};

// ---- bmm / baddbmm ---------------------------------------------------------------------------

struct BaddBmm {
  static constexpr OpId id = OpId::baddbmm;
  double beta = 1.0, alpha = 1.0;
  Shape input_sizes{};
  DType input_dtype = kFloat32;
  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& a, const Tensor& b) {
    check_operands("baddbmm", a, b, 3);
    HG_CHECK(a.size(0) == b.size(0), "baddbmm: batch sizes differ: {} and {}", a.size(0),
             b.size(0));
    HG_CHECK(
        broadcasts_to(input.sizes(), {a.size(0), a.size(1), b.size(2)}),
        "baddbmm: the input of shape {} does not broadcast to the product's shape [{}, {}, {}]",
        input.sizes(), a.size(0), a.size(1), b.size(2));
    input_sizes = input.sizes();
    input_dtype = input.dtype();
    ctx.save({a, b});
    return product(a, b, input, beta, alpha, {a.size(0), a.size(1), b.size(2)});
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor a = ctx.saved(0), b = ctx.saved(1);
    const Tensor& g = grads[0];
    Grads out(3);
    if (ctx.needs_input_grad(0)) {
      out[0] = ops::reduce_grad(beta == 1.0 ? g : mul(g, beta), input_sizes, input_dtype);
    }
    if (ctx.needs_input_grad(1)) out[1] = AddMm::scaled(bmm(g, b.transpose(1, 2)), alpha);
    if (ctx.needs_input_grad(2)) out[2] = AddMm::scaled(bmm(a.transpose(1, 2), g), alpha);
    return out;
  }
};

struct Bmm {
  static constexpr OpId id = OpId::bmm;
  Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    check_operands("bmm", a, b, 3);
    HG_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: {} and {}", a.size(0), b.size(0));
    ctx.save({a, b});
    return product(a, b, {}, 0.0, 1.0, {a.size(0), a.size(1), b.size(2)});
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor a = ctx.saved(0), b = ctx.saved(1);
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = bmm(grads[0], b.transpose(1, 2));
    if (ctx.needs_input_grad(1)) out[1] = bmm(a.transpose(1, 2), grads[0]);
    return out;
  }
};

// ---- matmul (composite) ----------------------------------------------------------------------

struct Matmul {
  static constexpr OpId id = OpId::matmul;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, const Tensor& a, const Tensor& b) {
    HG_CHECK(a.dim() >= 1 && b.dim() >= 1,
             "matmul: expected tensors of at least 1 dim, got shapes {} and {}", a.sizes(),
             b.sizes());
    if (a.dim() == 1 && b.dim() == 1) return dot(a, b);
    if (a.dim() == 2 && b.dim() == 2) return mm(a, b);
    if (a.dim() == 1 && b.dim() == 2) return mm(a.unsqueeze(0), b).squeeze(0);
    if (a.dim() == 2 && b.dim() == 1) return mm(a, b.unsqueeze(1)).squeeze(1);
    // Batched: broadcast the batch dims, fold them into one, bmm, unfold.
    const Tensor a3 = a.dim() == 1 ? a.unsqueeze(0) : a;
    const Tensor b3 = b.dim() == 1 ? b.unsqueeze(1) : b;
    const Shape a_batch(std::span<const int64_t>(a3.sizes().begin(), a3.sizes().end() - 2));
    const Shape b_batch(std::span<const int64_t>(b3.sizes().begin(), b3.sizes().end() - 2));
    const Shape batch = broadcast_shapes(a_batch, b_batch);
    const int64_t m = a3.size(-2), k = a3.size(-1), n = b3.size(-1);
    HG_CHECK(k == b3.size(-2), "matmul: the shapes {} and {} cannot be multiplied", a.sizes(),
             b.sizes());
    Shape a_shape = batch, b_shape = batch;
    a_shape.push_back(m);
    a_shape.push_back(k);
    b_shape.push_back(k);
    b_shape.push_back(n);
    const int64_t folded = shape_numel(batch);
    Tensor out =
        bmm(a3.expand(a_shape).reshape({folded, m, k}), b3.expand(b_shape).reshape({folded, k, n}));
    Shape out_shape = batch;
    if (a.dim() > 1) out_shape.push_back(m);
    if (b.dim() > 1) out_shape.push_back(n);
    return out.reshape(out_shape);
  }
};

// ---- linear: x [*, K] @ weight [N, K]^T + bias [N] -> [*, N] ----------------------------------

// NOTE [Linear is one node] torch's linear is a composite (t() then addmm); halfgrad records it
// as one node instead. Its backward forms the weight's gradient g^T x directly in weight's
// [N, K] layout, a tensor of its own that autograd hands to weight.grad() without a copy,
// where the composite made x^T g, transposed it back through a TransposeBackward node (a
// view) and copied it into grad(). It autocasts once, at linear, as the composite did. The
// result has x's dtype; a bias of another dtype is converted to it (as the composite's 2-D
// path did; its N-D path promoted instead, and torch refuses mixed dtypes).
using ops::leading_rows;

// linear's argument checks, for linear and linear_gelu (`op`).
void check_linear(std::string_view op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  ops::check_linear_shapes(op, x, weight, bias);
  HG_CHECK(x.is_floating_point() && x.dtype() == weight.dtype(),
           "{}: expected an input and a weight of one floating dtype, got {} and {}", op, x.dtype(),
           weight.dtype());
}

// The bias in x's dtype, contiguous (or undefined).
Tensor bias_like(const Tensor& bias, const Tensor& x) {
  return !bias.defined() ? bias : core::to_dtype(bias, x.dtype()).contiguous();
}

// What linear and linear_gelu remember for backward.
struct LinearShapes {
  Shape x_sizes{};
  DType bias_dtype = kFloat32;

  void remember(const OpContext& ctx, const Tensor& x, const Tensor& bias) {
    if (!ctx.recording()) return;
    x_sizes = x.sizes();
    bias_dtype = bias.defined() ? bias.dtype() : x.dtype();
  }

  // NOTE [Linear backward without a graph] A backward pass that records nothing (grad mode
  // off: not create_graph) calls the kernels the ops would call, on the same operands, so the
  // gradients are the same bits, without the dispatch, the transposed views and the nodes'
  // bookkeeping of three ops (the most of a small layer's backward). Under create_graph the
  // ops run, and are recorded; for an observer that reruns ops (NOTE [Op reruns]) they run
  // unrecorded, so that it sees the backward's products.
  //
  // The gradients of x, weight and bias from g = dL/d(x weight^T + bias), [M, N]; the bias's
  // from `bias_sums` (g's column sums, in g's dtype) when the caller has them.
  Grads grads(const OpContext& ctx, const Tensor& g, const Tensor& x, const Tensor& weight,
              const Tensor& bias_sums = {}) const {
    const int64_t M = leading_rows(x_sizes), K = weight.size(1);
    const Tensor x2 = x.dim() == 2 ? x : x.reshape({M, K});
    const bool record = autograd::is_grad_enabled() || ops::reruns_requested();
    Grads out(3);
    if (ctx.needs_input_grad(0)) {  // g @ weight: [M, K]
      const Tensor dx = record ? mm(g, weight) : product_2d(g, false, weight, false);
      out[0] = x.dim() == 2 ? dx : dx.reshape(x_sizes);
    }
    if (ctx.needs_input_grad(1)) {  // g^T @ x: [N, K], weight's layout
      out[1] = record ? mm(g.t(), x2) : product_2d(g, true, x2, false);
    }
    if (ctx.needs_input_grad(2)) {  // the sum of g's rows
      const Tensor db = bias_sums.defined() ? bias_sums
                        : record            ? sum(g, {0})
                                 : kernel_for::reduce(g).reduce(kernel::Reduction::Sum, g, {0},
                                                                false, g.dtype(), 2.0);
      out[2] = db.dtype() == bias_dtype ? db
               : record                 ? db.to(bias_dtype)
                                        : core::to_dtype(db, bias_dtype);
    }
    return out;
  }

  // The incoming gradient [*, N] as [M, N].
  Tensor rows_of(const Tensor& grad, int64_t N) const {
    return grad.dim() == 2 ? grad : grad.reshape({leading_rows(x_sizes), N});
  }
};

struct Linear {
  static constexpr OpId id = OpId::linear;
  LinearShapes shapes{};

  Tensor fp8_form(ops::DelayedScaling& recipe, const Tensor& x, const Tensor& weight,
                  const Tensor& bias) const {
    return ops::fp8_linear(recipe, x, weight, bias);
  }

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    check_linear("linear", x, weight, bias);
    shapes.remember(ctx, x, bias);
    ctx.save({x, weight});
    const Tensor bias_as_x = bias_like(bias, x);
    if (x.dim() == 2) return product_2d(x, false, weight, true, bias_as_x);
    Shape out_sizes = x.sizes();
    out_sizes.back() = weight.size(0);
    const int64_t M = leading_rows(x.sizes());
    Tensor out = empty(out_sizes, x.options());
    kernel_for::linalg(x).gemm_2d(core::reshape(x, {M, weight.size(1)}), false, weight, true,
                                  core::view(out, {M, weight.size(0)}), bias_as_x);
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), weight = ctx.saved(1);
    return shapes.grads(ctx, shapes.rows_of(grads[0], weight.size(0)), x, weight);
  }
};

// ---- linear_gelu: gelu(linear(x, weight, bias)) ----------------------------------------------

// One node, so that the GEMM's epilogue can apply the GELU (NOTE [GELU epilogue] in
// cuda/linalg.cpp; the tanh form only). It saves the pre-activation x weight^T + bias, which
// its backward needs and the epilogue writes anyway: dL/dpre = g gelu'(pre), then linear's
// gradients.
struct LinearGelu {
  static constexpr OpId id = OpId::linear_gelu;
  bool tanh_approximation = true;
  LinearShapes shapes{};

  Tensor fp8_form(ops::DelayedScaling& recipe, const Tensor& x, const Tensor& weight,
                  const Tensor& bias) const {
    return ops::fp8_linear_gelu(recipe, x, weight, bias, tanh_approximation);
  }

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& weight, const Tensor& bias) {
    check_linear("linear_gelu", x, weight, bias);
    shapes.remember(ctx, x, bias);
    const int64_t M = leading_rows(x.sizes()), N = weight.size(0);
    const Tensor x2 = x.dim() == 2 ? x : core::reshape(x, {M, weight.size(1)});
    const Tensor bias_as_x = bias_like(bias, x);
    const Tensor pre = empty({M, N}, x.options());
    Tensor out;
    if (tanh_approximation) {
      out = kernel_for::linalg(x2).gemm_2d_gelu(x2, false, weight, true, bias_as_x, pre);
    } else {
      kernel_for::linalg(x2).gemm_2d(x2, false, weight, true, pre, bias_as_x);
      out = kernel_for::elementwise(pre).unary(kernel::Unary::Gelu, pre);
    }
    ctx.save({x, weight, bias, pre});
    Shape out_sizes = x.sizes();
    out_sizes.back() = N;
    return x.dim() == 2 ? out : core::view(out, out_sizes);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0), weight = ctx.saved(1);
    const int64_t N = weight.size(0);
    const Tensor g = shapes.rows_of(grads[0], N);
    // Under create_graph the pre-activation is computed again with ops, so that the second
    // derivative reaches x, weight and bias through it.
    const Tensor pre = autograd::is_grad_enabled()
                           ? shapes.rows_of(linear(x, weight, ctx.saved(2)).to(x.dtype()), N)
                           : ctx.saved(3);
    if (!autograd::is_grad_enabled() && !ops::reruns_requested() && g.dtype() == pre.dtype()) {
      // The derivative, its product with g and the bias's sums in one kernel (NOTE [GELU
      // backward with the bias sum] in cpu/linalg.cpp).
      const Tensor bias_sums = ctx.needs_input_grad(2) ? empty({N}, g.options()) : Tensor();
      const Tensor g_pre = kernel_for::linalg(g).gelu_backward(g.contiguous(), pre.contiguous(),
                                                               tanh_approximation, bias_sums);
      return shapes.grads(ctx, g_pre, x, weight, bias_sums);
    }
    const Tensor g_pre = mul(g, ops::gelu_derivative(pre, tanh_approximation));
    return shapes.grads(ctx, g_pre, x, weight);
  }
};

// ---- addmv, addr, addbmm: addmm on reshaped operands --------------------------------------

// NOTE [addmm's relatives] torch's addmv, addr and addbmm are each one addmm over other shapes:
// mat @ vec is [n, m] @ [m, 1], the outer product vec1 vec2^T is [n, 1] @ [1, m], and the sum of
// a batch of products b1[i] @ b2[i] is one product over K = B m, [n, B m] @ [B m, p]. halfgrad
// writes them so, as composites: the GEMM's float32 sums over the whole K, beta * input added
// before the one rounding (and ignored, NaN or not, when beta is 0), autocast once at the call,
// and autograd through addmm.

struct AddMv {
  static constexpr OpId id = OpId::addmv;
  static constexpr bool kComposite = true;
  Scalar beta = 1, alpha = 1;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& mat, const Tensor& vec) {
    HG_CHECK(mat.dim() == 2 && vec.dim() == 1 && mat.size(1) == vec.size(0),
             "addmv: expected a matrix [n, m] and a vector [m], got shapes {} and {}", mat.sizes(),
             vec.sizes());
    check_floating_pair("addmv", mat, vec);
    HG_CHECK(broadcasts_to(input.sizes(), {mat.size(0)}),
             "addmv: the input of shape {} does not broadcast to the product's shape [{}]",
             input.sizes(), mat.size(0));
    const Tensor column = input.dim() == 1 ? input.unsqueeze(1) : input;
    return addmm(column, mat, vec.unsqueeze(1), beta, alpha).squeeze(1);
  }
};

struct AddR {
  static constexpr OpId id = OpId::addr;
  static constexpr bool kComposite = true;
  Scalar beta = 1, alpha = 1;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& vec1, const Tensor& vec2) {
    HG_CHECK(vec1.dim() == 1 && vec2.dim() == 1, "addr: expected two vectors, got shapes {} and {}",
             vec1.sizes(), vec2.sizes());
    check_floating_pair("addr", vec1, vec2);
    HG_CHECK(broadcasts_to(input.sizes(), {vec1.size(0), vec2.size(0)}),
             "addr: the input of shape {} does not broadcast to the outer product's shape [{}, {}]",
             input.sizes(), vec1.size(0), vec2.size(0));
    return addmm(input, vec1.unsqueeze(1), vec2.unsqueeze(0), beta, alpha);
  }
};

struct AddBmm {
  static constexpr OpId id = OpId::addbmm;
  static constexpr bool kComposite = true;
  Scalar beta = 1, alpha = 1;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& batch1, const Tensor& batch2) {
    HG_CHECK(batch1.dim() == 3 && batch2.dim() == 3 && batch1.size(0) == batch2.size(0) &&
                 batch1.size(2) == batch2.size(1),
             "addbmm: expected batches [B, n, m] and [B, m, p], got shapes {} and {}",
             batch1.sizes(), batch2.sizes());
    check_floating_pair("addbmm", batch1, batch2);
    const int64_t B = batch1.size(0), n = batch1.size(1), m = batch1.size(2), p = batch2.size(2);
    HG_CHECK(broadcasts_to(input.sizes(), {n, p}),
             "addbmm: the input of shape {} does not broadcast to the product's shape [{}, {}]",
             input.sizes(), n, p);
    return addmm(input, batch1.permute({1, 0, 2}).reshape({n, B * m}), batch2.reshape({B * m, p}),
                 beta, alpha);
  }
};

// ---- multi_dot, chain_matmul, tensordot, bilinear, cross, trace ------------------------------

// NOTE [Matrix chains] multi_dot multiplies its matrices in the order that takes the fewest
// scalar products, as torch's linalg.multi_dot does: for three, (AB)C unless A(BC) is strictly
// cheaper; for more, the textbook dynamic programme over the splits, the first (leftmost) split
// of least cost kept. The order decides the roundings, so halfgrad keeps torch's. A 1-D first
// operand is a row [1, n] and a 1-D last one a column [n, 1], their unit dims dropped from the
// result. Each product is an mm, so the chain autocasts once, as mm does, and differentiates
// through mm.

// The product of mats[i..j] in the order split[i][j] chose.
Tensor chain_product(const std::vector<Tensor>& mats, const std::vector<std::vector<size_t>>& split,
                     size_t i, size_t j) {
  if (i == j) return mats[i];
  const size_t k = split[i][j];
  return mm(chain_product(mats, split, i, k), chain_product(mats, split, k + 1, j));
}

Tensor multiply_chain(std::span<const Tensor> tensors, const char* op) {
  const size_t n = tensors.size();
  HG_CHECK(n >= 2, "{}: expected at least 2 tensors, got {}", op, n);
  std::vector<Tensor> mats;
  for (size_t i = 0; i < n; ++i) {
    const Tensor& t = tensors[i];
    HG_CHECK(t.defined(), "{}: tensor {} is undefined", op, i);
    const bool end = i == 0 || i == n - 1;
    HG_CHECK(t.dim() == 2 || (end && t.dim() == 1), "{}: expected tensor {} to be {}, got shape {}",
             op, i, end ? "1-D or 2-D" : "2-D (only the first and last may be 1-D)", t.sizes());
    HG_CHECK(t.is_floating_point() && t.dtype() == tensors[0].dtype(),
             "{}: expected floating tensors of one dtype, got {} (tensor 0) and {} (tensor {})", op,
             tensors[0].dtype(), t.dtype(), i);
    mats.push_back(t.dim() == 2 ? t : i == 0 ? t.unsqueeze(0) : t.unsqueeze(1));
    if (i > 0) {
      HG_CHECK(mats[i - 1].size(1) == mats[i].size(0),
               "{}: tensors {} and {} of shapes {} and {} cannot be multiplied", op, i - 1, i,
               tensors[i - 1].sizes(), t.sizes());
    }
  }
  // dims[i], dims[i + 1]: the rows and columns of mats[i].
  std::vector<int64_t> dims{mats[0].size(0)};
  for (const Tensor& m : mats) dims.push_back(m.size(1));
  std::vector<std::vector<size_t>> split(n, std::vector<size_t>(n, 0));
  if (n == 3) {
    const int64_t a = dims[0], b = dims[1], c = dims[2], d = dims[3];
    split[0][2] = (a * c) * (b + d) > (b * d) * (a + c) ? 0 : 1;  // A(BC) where strictly cheaper
    split[1][2] = 1;
    split[0][1] = 0;
  } else {
    std::vector<std::vector<int64_t>> cost(n, std::vector<int64_t>(n, 0));
    for (size_t length = 1; length < n; ++length) {
      for (size_t i = 0; i + length < n; ++i) {
        const size_t j = i + length;
        cost[i][j] = std::numeric_limits<int64_t>::max();
        for (size_t k = i; k < j; ++k) {
          const int64_t q = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1];
          if (q < cost[i][j]) {
            cost[i][j] = q;
            split[i][j] = k;
          }
        }
      }
    }
  }
  Tensor out = chain_product(mats, split, 0, n - 1);
  if (tensors[n - 1].dim() == 1) out = out.squeeze(1);
  if (tensors[0].dim() == 1) out = out.squeeze(0);
  return out;
}

struct MultiDot {
  static constexpr OpId id = OpId::multi_dot;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, std::span<const Tensor> tensors) {
    return multiply_chain(tensors, "multi_dot");
  }
};

struct ChainMatmul {
  static constexpr OpId id = OpId::chain_matmul;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, std::span<const Tensor> matrices) {
    HG_CHECK(!matrices.empty(), "chain_matmul: expected one or more matrices, got none");
    for (size_t i = 0; i < matrices.size(); ++i) {
      HG_CHECK(matrices[i].defined() && matrices[i].dim() == 2,
               "chain_matmul: expected 2-D matrices, got shape {} (matrix {})",
               matrices[i].defined() ? matrices[i].sizes() : Shape{}, i);
    }
    return matrices.size() == 1 ? matrices[0].clone() : multiply_chain(matrices, "chain_matmul");
  }
};

// a's dims_a against b's dims_b (pairwise, of equal sizes), summed: the free dims of a, then
// those of b. One mm of a permuted to [free, contracted] by b permuted to [contracted, free].
struct Tensordot {
  static constexpr OpId id = OpId::tensordot;
  static constexpr bool kComposite = true;
  Shape dims_a{}, dims_b{};
  Tensor forward(OpContext&, const Tensor& a, const Tensor& b) {
    check_floating_pair("tensordot", a, b);
    HG_CHECK(dims_a.size() == dims_b.size(),
             "tensordot: expected as many dims of b as of a to contract, got {} and {}", dims_a,
             dims_b);
    std::vector<bool> contracted_a(size_t(a.dim()), false), contracted_b(size_t(b.dim()), false);
    Shape perm_a, perm_b, free_sizes;
    int64_t K = 1;
    for (size_t i = 0; i < dims_a.size(); ++i) {
      const int64_t da = wrap_dim(dims_a[i], a.dim(), "tensordot");
      const int64_t db = wrap_dim(dims_b[i], b.dim(), "tensordot");
      HG_CHECK(!contracted_a[size_t(da)] && !contracted_b[size_t(db)],
               "tensordot: a dim is contracted twice in {} and {}", dims_a, dims_b);
      HG_CHECK(a.size(da) == b.size(db),
               "tensordot: contracted dims of different sizes: a's dim {} ({}) and b's dim {} ({})",
               da, a.size(da), db, b.size(db));
      contracted_a[size_t(da)] = contracted_b[size_t(db)] = true;
      K *= a.size(da);
    }
    int64_t M = 1, N = 1;
    for (int64_t d = 0; d < a.dim(); ++d) {
      if (contracted_a[size_t(d)]) continue;
      perm_a.push_back(d);
      free_sizes.push_back(a.size(d));
      M *= a.size(d);
    }
    for (size_t i = 0; i < dims_a.size(); ++i) {
      perm_a.push_back(wrap_dim(dims_a[i], a.dim(), "tensordot"));
      perm_b.push_back(wrap_dim(dims_b[i], b.dim(), "tensordot"));
    }
    for (int64_t d = 0; d < b.dim(); ++d) {
      if (contracted_b[size_t(d)]) continue;
      perm_b.push_back(d);
      free_sizes.push_back(b.size(d));
      N *= b.size(d);
    }
    const Tensor left = a.permute(perm_a).reshape({M, K});
    const Tensor right = b.permute(perm_b).reshape({K, N});
    return mm(left, right).reshape(free_sizes);
  }
};

// x1^T A x2 + b for each output feature: input1 [*, in1], input2 [*, in2], weight [out, in1,
// in2], bias [out] or undefined -> [*, out]. One mm of x1 against A laid out [in1, out in2],
// then the products with x2 summed over in2.
struct Bilinear {
  static constexpr OpId id = OpId::bilinear;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, const Tensor& input1, const Tensor& input2, const Tensor& weight,
                 const Tensor& bias) {
    HG_CHECK(input1.dim() >= 1 && input1.dim() == input2.dim(),
             "bilinear: expected inputs with one number of dims (at least 1), got shapes {} and {}",
             input1.sizes(), input2.sizes());
    for (int64_t d = 0; d + 1 < input1.dim(); ++d) {
      HG_CHECK(input1.size(d) == input2.size(d),
               "bilinear: expected inputs of one batch shape, got shapes {} and {}", input1.sizes(),
               input2.sizes());
    }
    HG_CHECK(
        weight.dim() == 3 && weight.size(1) == input1.size(-1) && weight.size(2) == input2.size(-1),
        "bilinear: expected weight of shape [out, {}, {}], got {}", input1.size(-1),
        input2.size(-1), weight.sizes());
    check_floating_pair("bilinear", input1, input2);
    check_floating_pair("bilinear", input1, weight);
    const int64_t out = weight.size(0), in1 = weight.size(1), in2 = weight.size(2);
    if (bias.defined()) {
      check_floating_pair("bilinear", input1, bias);
      HG_CHECK(bias.dim() == 1 && bias.size(0) == out,
               "bilinear: expected bias of shape [{}], got {}", out, bias.sizes());
    }
    Shape batch;  // input1's leading dims, then out
    for (int64_t d = 0; d + 1 < input1.dim(); ++d) batch.push_back(input1.size(d));
    const Tensor x1 = input1.reshape({-1, in1}), x2 = input2.reshape({-1, in2});
    const Tensor a = weight.permute({1, 0, 2}).reshape({in1, out * in2});
    const Tensor x1_a = mm(x1, a).reshape({x1.size(0), out, in2});
    Tensor y = sum(mul(x1_a, x2.unsqueeze(1)), {2});
    if (bias.defined()) y = add(y, bias);
    batch.push_back(out);
    return y.reshape(batch);
  }
};

// The cross product along dim (of size 3) of input and other broadcast together.
struct Cross {
  static constexpr OpId id = OpId::cross;
  static constexpr bool kComposite = true;
  std::optional<int64_t> dim;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& other) {
    HG_CHECK(input.dim() == other.dim(),
             "cross: expected inputs with one number of dims, got shapes {} and {}", input.sizes(),
             other.sizes());
    const Shape shape = broadcast_shapes(input.sizes(), other.sizes());
    int64_t d = -1;
    if (dim) {
      d = wrap_dim(*dim, int64_t(shape.size()), "cross");
    } else {  // torch.cross without dim: the first dim of size 3
      for (int64_t i = 0; i < input.dim() && d < 0; ++i) {
        if (input.size(i) == 3) d = i;
      }
      HG_CHECK(d >= 0, "cross: expected a dim of size 3 in input of shape {}", input.sizes());
    }
    HG_CHECK(input.size(d) == 3 && other.size(d) == 3,
             "cross: expected inputs of size 3 at dim {}, got {} and {}", d, input.size(d),
             other.size(d));
    const Tensor a = input.expand(shape), b = other.expand(shape);
    const auto component = [&](int64_t i, int64_t j) {
      return sub(mul(a.select(d, i), b.select(d, j)), mul(a.select(d, j), b.select(d, i)));
    };
    return stack({component(1, 2), component(2, 0), component(0, 1)}, d);
  }
};

// The sum of the main diagonal of a matrix (integers summed as int64).
struct Trace {
  static constexpr OpId id = OpId::trace;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, const Tensor& input) {
    HG_CHECK(input.dim() == 2, "trace: expected a matrix, got shape {}", input.sizes());
    return sum(diag(input));
  }
};

// ---- dot -------------------------------------------------------------------------------------

struct Dot {
  static constexpr OpId id = OpId::dot;
  Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    HG_CHECK(a.dim() == 1 && b.dim() == 1 && a.size(0) == b.size(0),
             "dot: expected two 1-D tensors of one length, got shapes {} and {}", a.sizes(),
             b.sizes());
    HG_CHECK(a.is_floating_point() && a.dtype() == b.dtype(),
             "dot: expected two floating tensors of one dtype, got {} and {}", a.dtype(),
             b.dtype());
    ctx.save({a, b});
    return product(core::view(a, {1, 1, a.size(0)}), core::view(b, {1, b.size(0), 1}), {}, 0.0, 1.0,
                   {});
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor a = ctx.saved(0), b = ctx.saved(1);
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = mul(b, grads[0]);
    if (ctx.needs_input_grad(1)) out[1] = mul(a, grads[0]);
    return out;
  }
};

}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) { return dispatch(Mm{}, a, b); }
Tensor bmm(const Tensor& a, const Tensor& b) { return dispatch(Bmm{}, a, b); }
Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  return dispatch(AddMm{.beta = beta.to_double(), .alpha = alpha.to_double()}, input, a, b);
}
Tensor baddbmm(const Tensor& input, const Tensor& a, const Tensor& b, Scalar beta, Scalar alpha) {
  return dispatch(BaddBmm{.beta = beta.to_double(), .alpha = alpha.to_double()}, input, a, b);
}
Tensor addmv(const Tensor& input, const Tensor& mat, const Tensor& vec, Scalar beta, Scalar alpha) {
  return dispatch(AddMv{.beta = beta, .alpha = alpha}, input, mat, vec);
}
Tensor addr(const Tensor& input, const Tensor& vec1, const Tensor& vec2, Scalar beta,
            Scalar alpha) {
  return dispatch(AddR{.beta = beta, .alpha = alpha}, input, vec1, vec2);
}
Tensor addbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, Scalar beta,
              Scalar alpha) {
  return dispatch(AddBmm{.beta = beta, .alpha = alpha}, input, batch1, batch2);
}
Tensor multi_dot(std::span<const Tensor> tensors) {
  return ops::dispatch_list(MultiDot{}, tensors);
}
Tensor multi_dot(std::initializer_list<Tensor> tensors) {
  return multi_dot(std::span<const Tensor>(tensors.begin(), tensors.size()));
}
Tensor chain_matmul(std::span<const Tensor> matrices) {
  return ops::dispatch_list(ChainMatmul{}, matrices);
}
Tensor chain_matmul(std::initializer_list<Tensor> matrices) {
  return chain_matmul(std::span<const Tensor>(matrices.begin(), matrices.size()));
}
Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims) {
  HG_CHECK(dims >= 0 && dims <= a.dim() && dims <= b.dim(),
           "tensordot: expected dims in [0, {}] for shapes {} and {}, got {}",
           std::min(a.dim(), b.dim()), a.sizes(), b.sizes(), dims);
  Shape dims_a, dims_b;
  for (int64_t i = 0; i < dims; ++i) {
    dims_a.push_back(a.dim() - dims + i);
    dims_b.push_back(i);
  }
  return dispatch(Tensordot{.dims_a = dims_a, .dims_b = dims_b}, a, b);
}
Tensor tensordot(const Tensor& a, const Tensor& b, const Shape& dims_a, const Shape& dims_b) {
  return dispatch(Tensordot{.dims_a = dims_a, .dims_b = dims_b}, a, b);
}
Tensor bilinear(const Tensor& input1, const Tensor& input2, const Tensor& weight,
                const Tensor& bias) {
  return dispatch(Bilinear{}, input1, input2, weight, bias);
}
Tensor cross(const Tensor& input, const Tensor& other, std::optional<int64_t> dim) {
  return dispatch(Cross{.dim = dim}, input, other);
}
Tensor linalg_cross(const Tensor& input, const Tensor& other, int64_t dim) {
  return cross(input, other, dim);
}
Tensor trace(const Tensor& input) { return dispatch(Trace{}, input); }
Tensor matmul(const Tensor& a, const Tensor& b) { return dispatch(Matmul{}, a, b); }
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return dispatch(Linear{}, x, weight, bias);
}
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   std::string_view approximate) {
  HG_CHECK(approximate == "none" || approximate == "tanh",
           "linear_gelu: expected approximate to be \"none\" or \"tanh\", got \"{}\"", approximate);
  return dispatch(LinearGelu{.tanh_approximation = approximate == "tanh"}, x, weight, bias);
}
Tensor dot(const Tensor& a, const Tensor& b) { return dispatch(Dot{}, a, b); }

namespace ops {

int64_t leading_rows(const Shape& sizes) {
  int64_t m = 1;
  for (size_t d = 0; d + 1 < sizes.size(); ++d) m *= sizes[d];
  return m;
}

void check_linear_shapes(std::string_view op, const Tensor& x, const Tensor& weight,
                         const Tensor& bias) {
  HG_CHECK(weight.dim() == 2, "{}: expected a 2-D weight [out_features, in_features], got shape {}",
           op, weight.sizes());
  HG_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1),
           "{}: the input's last dim ({}) must equal in_features ({}); input shape {}, weight "
           "shape {}",
           op, x.dim() >= 1 ? x.size(-1) : 0, weight.size(1), x.sizes(), weight.sizes());
  HG_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)),
           "{}: expected a bias of shape [{}], got {}", op, weight.size(0),
           bias.defined() ? bias.sizes() : Shape{});
}

}  // namespace ops

}  // namespace hg
