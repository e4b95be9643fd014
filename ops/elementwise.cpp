// Elementwise ops: forward and backward of each, in op_list.def's order.
//
// Backward formulas are written with halfgrad's ops (so create_graph gives higher-order
// gradients) and return each input's gradient in that input's shape and dtype (a broadcast
// input gets the gradient summed over its broadcast dims).
#include <cmath>
#include <limits>
#include <numbers>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/kernel/formulas.h"
#include "halfgrad/ops/backward_helpers.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/type_promotion.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;
using Grads = autograd::GradList;

// The gradient for an input of `input`'s shape and dtype from a gradient of the result.
Tensor grad_for(const Tensor& grad, const Tensor& input) {
  return ops::reduce_grad(grad, input.sizes(), input.dtype());
}

// A scalar as a 0-d tensor on `device` (a CUDA op gets its operand on the GPU, made there by
// a fill: no copy from the host).
Tensor as_operand(Scalar value, DType dtype, Device device) {
  return full({}, value, {.dtype = dtype, .device = device});
}

// ---- add / sub: a + alpha * b, a - alpha * b ------------------------------------------------

template <OpId Id>
struct AddSub {
  static constexpr OpId id = Id;
  double alpha = 1.0;
  Shape a_sizes{}, b_sizes{};  // backward needs the inputs' shapes and dtypes, not their data
  DType a_dtype = kFloat32, b_dtype = kFloat32;

  Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    if (ctx.recording()) {
      a_sizes = a.sizes();
      b_sizes = b.sizes();
      a_dtype = a.dtype();
      b_dtype = b.dtype();
    }
    const kernel::Binary kernel = Id == OpId::add ? kernel::Binary::Add : kernel::Binary::Sub;
    return kernel_for::elementwise(a).binary(kernel, a, b, result_type({a, b}), alpha);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor& g = grads[0];
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = ops::reduce_grad(g, a_sizes, a_dtype);
    if (ctx.needs_input_grad(1)) {
      const double scale = Id == OpId::add ? alpha : -alpha;
      out[1] = ops::reduce_grad(scale == 1.0 ? g : mul(g, scale), b_sizes, b_dtype);
    }
    return out;
  }
};

// ---- mul -------------------------------------------------------------------------------------

struct Mul {
  static constexpr OpId id = OpId::mul;
  Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    ctx.save({a, b});
    return kernel_for::elementwise(a).binary(kernel::Binary::Mul, a, b, result_type({a, b}), 1.0);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor a = ctx.saved(0), b = ctx.saved(1);
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = grad_for(mul(grads[0], b), a);
    if (ctx.needs_input_grad(1)) out[1] = grad_for(mul(grads[0], a), b);
    return out;
  }
};

// ---- div -------------------------------------------------------------------------------------

struct Div {
  static constexpr OpId id = OpId::div;
  Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    ctx.save({a, b});
    return kernel_for::elementwise(a).binary(kernel::Binary::Div, a, b,
                                             floating_result(result_type({a, b})), 1.0);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor a = ctx.saved(0), b = ctx.saved(1);
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = grad_for(div(grads[0], b), a);
    if (ctx.needs_input_grad(1)) out[1] = grad_for(neg(div(mul(grads[0], a), mul(b, b))), b);
    return out;
  }
};

// ---- pow: a ^ b --------------------------------------------------------------------------------

struct Pow {
  static constexpr OpId id = OpId::pow;
  Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    Tensor out =
        kernel_for::elementwise(a).binary(kernel::Binary::Pow, a, b, result_type({a, b}), 1.0);
    ctx.save({a, b});
    ctx.save_output(out);
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor a = ctx.saved(0), b = ctx.saved(1), out = ctx.saved(2);
    Grads result(2);
    // d/da = b a^(b-1); d/db = a^b log a (taken as 0 where a == 0, as torch).
    if (ctx.needs_input_grad(0)) result[0] = grad_for(mul(grads[0], mul(b, pow(a, sub(b, 1)))), a);
    if (ctx.needs_input_grad(1)) {
      const Tensor log_a = log(a);
      result[1] = grad_for(mul(grads[0], mul(out, log_a)), b);
    }
    return result;
  }
};

// ---- a tensor and a number: add, sub, mul, div, pow -----------------------------------------

// NOTE [Number operands of 16-bit ops] torch applies a number given to a float16 or bfloat16
// op (x * 1.7, x + 0.1, x / 3, x ** 2.5) in float32, the compute type, without first rounding
// it to 16 bits: bfloat16 3 * 1.7 is 5.09375, where 1.7 rounded to bfloat16 (1.703125) would
// give 5.125. Such a number reaches the kernels as their alpha, op(a, alpha * b) with b a 0-d
// one, computed in the compute type (kernel::binary_fn). Backward keeps the number as it is.
// Other dtypes compute in their own type, where the 0-d operand of the number is already exact
// as torch's (float32 1.7 is float(1.7) either way).
template <OpId Id>
struct WithNumber {
  static constexpr OpId id = Id;
  double value = 0.0;

  static constexpr kernel::Binary kind() {
    switch (Id) {
      case OpId::add:
        return kernel::Binary::Add;
      case OpId::sub:
        return kernel::Binary::Sub;
      case OpId::mul:
        return kernel::Binary::Mul;
      case OpId::div:
        return kernel::Binary::Div;
      default:
        return kernel::Binary::Pow;
    }
  }

  Tensor forward(OpContext& ctx, const Tensor& a) {
    if constexpr (Id == OpId::pow) ctx.save({a});
    const Tensor one = full({}, 1, {.dtype = a.dtype(), .device = a.device()});
    return kernel_for::elementwise(a).binary(kind(), a, one, a.dtype(), value);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor& g = grads[0];
    if constexpr (Id == OpId::add || Id == OpId::sub) {
      return {g};
    } else if constexpr (Id == OpId::mul) {
      return {mul(g, value)};
    } else if constexpr (Id == OpId::div) {
      return {div(g, value)};
    } else {
      const Tensor a = ctx.saved(0);
      if (value == 0.0) return {zeros_like(g)};  // torch: a^0 has no gradient, even at 0
      return {mul(g, mul(pow(a, value - 1.0), value)).to(a.dtype())};
    }
  }
};

// ---- maximum / minimum -----------------------------------------------------------------------

template <OpId Id>
struct Extremum {
  static constexpr OpId id = Id;
  Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    ctx.save({a, b});
    return kernel_for::elementwise(a).binary(
        Id == OpId::maximum ? kernel::Binary::Maximum : kernel::Binary::Minimum, a, b,
        result_type({a, b}), 1.0);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor a = ctx.saved(0), b = ctx.saved(1);
    // The gradient goes to the chosen input; ties split it evenly, as torch.
    const Tensor a_wins = (Id == OpId::maximum ? gt(a, b) : lt(a, b)).to(grads[0].dtype());
    const Tensor tie = eq(a, b).to(grads[0].dtype());
    const Tensor share_a = add(a_wins, mul(tie, 0.5));
    Grads out(2);
    if (ctx.needs_input_grad(0)) out[0] = grad_for(mul(grads[0], share_a), a);
    if (ctx.needs_input_grad(1)) out[1] = grad_for(mul(grads[0], 1.0 - share_a), b);
    return out;
  }
};

// ---- fmod, remainder, atan2, hypot ---------------------------------------------------------

template <OpId Id>
constexpr kernel::Binary binary_math_kind() {
  if constexpr (Id == OpId::fmod) {
    return kernel::Binary::Fmod;
  } else if constexpr (Id == OpId::remainder) {
    return kernel::Binary::Remainder;
  } else if constexpr (Id == OpId::atan2) {
    return kernel::Binary::Atan2;
  } else if constexpr (Id == OpId::floor_divide) {
    return kernel::Binary::FloorDiv;
  } else if constexpr (Id == OpId::trunc_divide) {
    return kernel::Binary::TruncDiv;
  } else {
    static_assert(Id == OpId::hypot);
    return kernel::Binary::Hypot;
  }
}

// fmod, remainder and the rounded divisions keep integer dtypes (an integer divisor of 0 is an
// error, as torch's ZeroDivisionError); atan2 and hypot compute integers in float32, as
// torch's. The rounded divisions have no gradient (torch's is zero).
template <OpId Id>
struct BinaryMath {
  static constexpr OpId id = Id;
  static constexpr bool kRounded = Id == OpId::floor_divide || Id == OpId::trunc_divide;
  static constexpr bool kKeepsIntegers = Id == OpId::fmod || Id == OpId::remainder || kRounded;
  // Set by the overloads that take the divisor as a number, checked on the host there: the
  // divisor tensor is then not read back (on CUDA, a wait for the device).
  bool divisor_checked = false;

  Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
    DType dtype = result_type({a, b});
    if (!kKeepsIntegers) dtype = floating_result(dtype);
    if (kKeepsIntegers && !is_floating_point(dtype)) {
      HG_CHECK(dtype != kBool, "{}: expected numeric tensors, got bool", op_name(Id));
      HG_CHECK(divisor_checked || !any(eq(b, 0)).item<bool>(),
               "{}: expected a nonzero integer divisor, got a divisor of 0", op_name(Id));
    }
    Tensor out = kernel_for::elementwise(a).binary(binary_math_kind<Id>(), a, b, dtype, 1.0);
    ctx.save({a, b});
    if constexpr (Id == OpId::hypot) ctx.save_output(out);
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    if constexpr (kRounded) return Grads(2);
    const Tensor& g = grads[0];
    const Tensor a = ctx.saved(0).to(g.dtype()), b = ctx.saved(1).to(g.dtype());
    Tensor da, db;
    if constexpr (Id == OpId::fmod || Id == OpId::remainder) {
      // a - b q with q = trunc(a / b) (fmod) or floor(a / b) (remainder), q piecewise constant.
      da = g;
      const Tensor quotient = div(a, b);
      db = mul(neg(g), Id == OpId::fmod ? trunc(quotient) : floor(quotient));
    } else if constexpr (Id == OpId::atan2) {
      const Tensor denominator = add(mul(a, a), mul(b, b));
      da = mul(g, div(b, denominator));
      db = mul(g, div(neg(a), denominator));
    } else {
      const Tensor out = ctx.saved(2);
      da = mul(g, div(a, out));
      db = mul(g, div(b, out));
    }
    Grads result(2);
    if (ctx.needs_input_grad(0)) result[0] = grad_for(da, ctx.saved(0));
    if (ctx.needs_input_grad(1)) result[1] = grad_for(db, ctx.saved(1));
    return result;
  }
};

// ---- lerp: start + weight (end - start) --------------------------------------------------------
//
// torch's two-sided form: from start where |weight| < 0.5, from end otherwise, so weight 1 gives
// end exactly. A composite of the elementwise ops; where passes each side its own gradient.
struct Lerp {
  static constexpr OpId id = OpId::lerp;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, const Tensor& start, const Tensor& end, const Tensor& weight) {
    HG_CHECK(start.is_floating_point() && end.is_floating_point() && weight.is_floating_point(),
             "lerp: expected floating tensors, got {}, {} and {}", start.dtype(), end.dtype(),
             weight.dtype());
    HG_CHECK(start.dtype() == end.dtype(),
             "lerp: expected start and end of one dtype, got {} and {}", start.dtype(),
             end.dtype());
    const Tensor difference = sub(end, start);
    const Tensor w = weight.to(start.dtype());
    const Tensor from_start = add(start, mul(w, difference));
    const Tensor from_end = add(end, mul(difference, sub(w, 1)));  // end - (end - start)(1 - w)
    return where(lt(abs(w.detach()), 0.5), from_start, from_end);
  }
};

// ---- unary ops ---------------------------------------------------------------------------------

// A unary op of op_list.def's HG_UNARY_OP lines: forward runs the kernel of its kind (integers
// computed in float32 unless the kind takes them); backward multiplies by the derivative
// (unary_derivative), from the input x and/or the output y.
template <OpId Id>
Tensor unary_derivative(const Tensor& x, const Tensor& y) = delete;

template <OpId Id, kernel::Unary Kind>
struct UnaryOp {
  static constexpr OpId id = Id;
  Tensor forward(OpContext& ctx, const Tensor& x) {
    const Tensor in = kernel::unary_takes_integers(Kind) ? x : x.to(floating_result(x.dtype()));
    Tensor y = kernel_for::elementwise(in).unary(Kind, in);
    ctx.save({x});
    ctx.save_output(y);
    return y;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0);
    if constexpr (Id == OpId::relu) {
      // torch's threshold_backward on the output: the gradient where y = relu(x) is not <= 0
      // (y > 0, or NaN), else 0, a select rather than a product (an infinite gradient where
      // relu is flat gives 0, not NaN). One fused pass, unless the backward pass is recorded
      // (create_graph): then the same select as ops, which give the same bits.
      if (!autograd::is_grad_enabled() && grads[0].dtype() == x.dtype()) {
        return {kernel_for::elementwise(x).threshold_backward(grads[0], ctx.saved_data(1), 0.0)};
      }
      const Tensor y = ctx.saved(1);
      return {grad_for(where(le(y, 0), 0, grads[0]), x)};
    } else if constexpr (Kind == kernel::Unary::Floor || Kind == kernel::Unary::Ceil ||
                         Kind == kernel::Unary::Trunc || Kind == kernel::Unary::Round) {
      // Piecewise constant: torch's zeros_like(grad), so an inf or NaN gradient gives 0 too.
      return {grad_for(zeros_like(grads[0]), x)};
    } else {
      const Tensor y = ctx.saved(1);
      return {grad_for(mul(grads[0], unary_derivative<Id>(x.to(y.dtype()), y)), x)};
    }
  }
};

// The derivatives, from x and y = op(x).
template <>
Tensor unary_derivative<OpId::neg>(const Tensor& x, const Tensor&) {
  return full_like(x, -1);
}
template <>
Tensor unary_derivative<OpId::exp>(const Tensor&, const Tensor& y) {
  return y;
}
template <>
Tensor unary_derivative<OpId::expm1>(const Tensor&, const Tensor& y) {
  return add(y, 1);
}
template <>
Tensor unary_derivative<OpId::log>(const Tensor& x, const Tensor&) {
  return reciprocal(x);
}
template <>
Tensor unary_derivative<OpId::log1p>(const Tensor& x, const Tensor&) {
  return reciprocal(add(x, 1));
}
template <>
Tensor unary_derivative<OpId::log2>(const Tensor& x, const Tensor&) {
  return reciprocal(mul(x, std::numbers::ln2));
}
template <>
Tensor unary_derivative<OpId::log10>(const Tensor& x, const Tensor&) {
  return reciprocal(mul(x, std::numbers::ln10));
}
template <>
Tensor unary_derivative<OpId::sqrt>(const Tensor&, const Tensor& y) {
  return 0.5 / y;
}
template <>
Tensor unary_derivative<OpId::rsqrt>(const Tensor&, const Tensor& y) {
  return mul(pow(y, 3), -0.5);
}
template <>
Tensor unary_derivative<OpId::reciprocal>(const Tensor&, const Tensor& y) {
  return neg(mul(y, y));
}
template <>
Tensor unary_derivative<OpId::abs>(const Tensor& x, const Tensor&) {
  return sign(x);
}
template <>
Tensor unary_derivative<OpId::square>(const Tensor& x, const Tensor&) {
  return mul(x, 2);
}
template <>
Tensor unary_derivative<OpId::sin>(const Tensor& x, const Tensor&) {
  return cos(x);
}
template <>
Tensor unary_derivative<OpId::cos>(const Tensor& x, const Tensor&) {
  return neg(sin(x));
}
template <>
Tensor unary_derivative<OpId::tanh>(const Tensor&, const Tensor& y) {
  return 1.0 - mul(y, y);
}
template <>
Tensor unary_derivative<OpId::tan>(const Tensor&, const Tensor& y) {
  return 1.0 + mul(y, y);  // 1 / cos^2 x = 1 + tan^2 x
}
template <>
Tensor unary_derivative<OpId::asin>(const Tensor& x, const Tensor&) {
  return rsqrt(1.0 - mul(x, x));
}
template <>
Tensor unary_derivative<OpId::acos>(const Tensor& x, const Tensor& y) {
  return neg(unary_derivative<OpId::asin>(x, y));  // acos = pi / 2 - asin
}
template <>
Tensor unary_derivative<OpId::sinh>(const Tensor& x, const Tensor&) {
  return cosh(x);
}
template <>
Tensor unary_derivative<OpId::cosh>(const Tensor& x, const Tensor&) {
  return sinh(x);
}
template <>
Tensor unary_derivative<OpId::sigmoid>(const Tensor&, const Tensor& y) {
  return mul(y, 1.0 - y);
}
template <>
Tensor unary_derivative<OpId::silu>(const Tensor& x, const Tensor&) {
  const Tensor s = sigmoid(x);  // s (1 + x (1 - s))
  return mul(s, add(mul(x, 1.0 - s), 1));
}
template <>
Tensor unary_derivative<OpId::softplus>(const Tensor& x, const Tensor&) {
  return sigmoid(x);
}
template <>
Tensor unary_derivative<OpId::hardswish>(const Tensor& x, const Tensor&) {
  // torch's: 0 below -3, 1 above 3, x / 3 + 1 / 2 between (both ends inclusive there).
  return where(lt(x, -3.0), 0.0, where(le(x, 3.0), add(mul(x, 1.0 / 3.0), 0.5), ones_like(x)));
}
template <>
Tensor unary_derivative<OpId::mish>(const Tensor& x, const Tensor&) {
  // t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x)).
  const Tensor t = tanh(softplus(x));
  return add(t, mul(mul(x, sigmoid(x)), 1.0 - mul(t, t)));
}
template <>
Tensor unary_derivative<OpId::erf>(const Tensor& x, const Tensor&) {
  return mul(exp(neg(mul(x, x))), 2.0 / std::sqrt(std::numbers::pi));
}
template <>
Tensor unary_derivative<OpId::erfinv>(const Tensor&, const Tensor& y) {
  return mul(exp(mul(y, y)), kernel::kHalfSqrtPi);  // 1 / erf'(y) = sqrt(pi) / 2 e^(y^2)
}

// sign: no gradient (zero almost everywhere).
struct Sign {
  static constexpr OpId id = OpId::sign;
  Tensor forward(OpContext&, const Tensor& x) {
    return kernel_for::elementwise(x).unary(kernel::Unary::Sign, x);
  }
  Grads backward(OpContext&, const Grads&) { return Grads(1); }
};

// ---- NaN and infinity masks, nan_to_num -------------------------------------------------------
//
// Composites of the comparisons and where (both backends have them): NaN is the value unequal
// to itself, an infinity the value whose magnitude is inf, a finite value one whose x - x is
// 0 (NaN for both). The masks are constant false (true for isfinite) on integer and bool
// tensors.

template <OpId Id>
struct FloatMask {
  static constexpr OpId id = Id;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, const Tensor& x) {
    HG_CHECK(x.defined(), "{}: expected a defined tensor, got an undefined one", op_name(Id));
    if (!x.is_floating_point()) {
      return full(x.sizes(), Id == OpId::isfinite, {.dtype = kBool, .device = x.device()});
    }
    const Tensor v = x.detach();
    if constexpr (Id == OpId::isnan) {
      return ne(v, v);
    } else if constexpr (Id == OpId::isinf) {
      return eq(abs(v), std::numeric_limits<double>::infinity());
    } else {
      return eq(sub(v, v), 0);
    }
  }
};

struct NanToNum {
  static constexpr OpId id = OpId::nan_to_num;
  static constexpr bool kComposite = true;
  double nan = 0.0;
  std::optional<double> posinf, neginf;

  Tensor forward(OpContext&, const Tensor& x) {
    HG_CHECK(x.defined(), "nan_to_num: expected a defined tensor, got an undefined one");
    if (!x.is_floating_point()) return x.clone();
    const FInfo limits = finfo(x.dtype());
    const double inf = std::numeric_limits<double>::infinity();
    const Tensor v = x.detach();
    Tensor out = where(ne(v, v), nan, x);
    out = where(eq(v, inf), posinf.value_or(limits.max), out);
    return where(eq(v, -inf), neginf.value_or(limits.min), out);
  }
};

// ---- gelu ------------------------------------------------------------------------------------

}  // namespace

namespace ops {

Tensor gelu_derivative(const Tensor& x, bool tanh_approximation) {
  // One fused kernel, unless the backward pass is recorded (create_graph): then the
  // derivative is written with ops so that it can be differentiated again.
  if (!autograd::is_grad_enabled()) {
    return kernel_for::elementwise(x).unary(
        tanh_approximation ? kernel::Unary::GeluTanhGrad : kernel::Unary::GeluGrad, x);
  }
  if (!tanh_approximation) {  // Phi(x) + x phi(x)
    const Tensor cdf = mul(add(erf(mul(x, std::numbers::sqrt2 / 2)), 1), 0.5);
    const Tensor pdf = mul(exp(mul(mul(x, x), -0.5)), 1.0 / std::sqrt(2 * std::numbers::pi));
    return add(cdf, mul(x, pdf));
  }
  const double k = std::sqrt(2.0 / std::numbers::pi);
  const Tensor t = tanh(mul(add(x, mul(pow(x, 3), 0.044715)), k));
  const Tensor d_inner = mul(add(mul(mul(x, x), 3 * 0.044715), 1), k);
  return add(mul(add(t, 1), 0.5), mul(mul(mul(x, 1.0 - mul(t, t)), d_inner), 0.5));
}

}  // namespace ops

namespace {

struct Gelu {
  static constexpr OpId id = OpId::gelu;
  bool tanh_approximation = false;
  Tensor forward(OpContext& ctx, const Tensor& x) {
    ctx.save({x});
    const Tensor in = x.to(floating_result(x.dtype()));
    return kernel_for::elementwise(in).unary(
        tanh_approximation ? kernel::Unary::GeluTanh : kernel::Unary::Gelu, in);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0);
    return {grad_for(mul(grads[0], derivative(x)), x)};
  }
  Tensor derivative(const Tensor& x) const { return ops::gelu_derivative(x, tanh_approximation); }
};

// ---- clamp -----------------------------------------------------------------------------------

struct Clamp {
  static constexpr OpId id = OpId::clamp;
  std::optional<double> low{}, high{};
  Tensor forward(OpContext& ctx, const Tensor& x) {
    ctx.save({x});
    return kernel_for::elementwise(x).clamp(x, low, high);
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor x = ctx.saved(0);
    // The gradient passes where low <= x <= high.
    Tensor pass = ones_like(x).to(kBool);
    if (low) pass = mul(pass.to(x.dtype()), ge(x, *low).to(x.dtype()));
    if (high) pass = mul(pass.to(x.dtype()), le(x, *high).to(x.dtype()));
    return {grad_for(mul(grads[0], pass.to(grads[0].dtype())), x)};
  }
};

// ---- addcmul / addcdiv -----------------------------------------------------------------------

template <OpId Id>
struct AddC {
  static constexpr OpId id = Id;
  double value = 1.0;
  Tensor forward(OpContext& ctx, const Tensor& self, const Tensor& t1, const Tensor& t2) {
    ctx.save({self, t1, t2});
    const DType dtype = result_type({self, t1, t2});
    const kernel::ElementwiseKernels& k = kernel_for::elementwise(self);
    return Id == OpId::addcmul ? k.addcmul(self, t1, t2, value, dtype)
                               : k.addcdiv(self, t1, t2, value, floating_result(dtype));
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor self = ctx.saved(0), t1 = ctx.saved(1), t2 = ctx.saved(2);
    const Tensor& g = grads[0];
    Grads out(3);
    if (ctx.needs_input_grad(0)) out[0] = grad_for(g, self);
    if (Id == OpId::addcmul) {
      if (ctx.needs_input_grad(1)) out[1] = grad_for(mul(mul(g, t2), value), t1);
      if (ctx.needs_input_grad(2)) out[2] = grad_for(mul(mul(g, t1), value), t2);
    } else {
      if (ctx.needs_input_grad(1)) out[1] = grad_for(mul(div(g, t2), value), t1);
      if (ctx.needs_input_grad(2)) {
        out[2] = grad_for(mul(div(mul(g, t1), mul(t2, t2)), -value), t2);
      }
    }
    return out;
  }
};

// ---- comparisons (no gradient) -----------------------------------------------------------------

template <OpId Id, kernel::Compare Kernel>
struct Comparison {
  static constexpr OpId id = Id;
  Tensor forward(OpContext&, const Tensor& a, const Tensor& b) {
    return kernel_for::elementwise(a).compare(Kernel, a, b, result_type({a, b}));
  }
  Grads backward(OpContext&, const Grads&) { return Grads(2); }
};

template <class Op>
Tensor compare_with_scalar(const Tensor& a, Scalar b) {
  return dispatch(Op{}, a, as_operand(b, result_type({a}, {b}), a.device()));
}

// number ** tensor (torch's __rpow__): pow of the number as a 0-d operand of the result dtype,
// or, for a 16-bit result, of float32 (the base unrounded, the power rounded once, as NOTE
// [Number operands of 16-bit ops]). A composite: autograd runs through pow to the exponent.
struct PowOfNumber {
  static constexpr OpId id = OpId::rpow;
  static constexpr bool kComposite = true;
  Scalar base;
  Tensor forward(OpContext&, const Tensor& exponent) {
    const DType dtype = result_type({exponent}, {base});
    const bool narrow = dtype == kFloat16 || dtype == kBFloat16;
    const DType compute = narrow ? kFloat32 : dtype;
    const Tensor power = pow(as_operand(base, compute, exponent.device()),
                             exponent.dtype() == compute ? exponent : exponent.to(compute));
    return narrow ? power.to(dtype) : power;
  }
};

}  // namespace

// ---- the public functions -------------------------------------------------------------------

Tensor add(const Tensor& a, const Tensor& b, Scalar alpha) {
  return dispatch(AddSub<OpId::add>{.alpha = alpha.to_double()}, a, b);
}
Tensor add(const Tensor& a, Scalar b, Scalar alpha) {
  if (number_in_compute_type(a, b)) {
    return dispatch(WithNumber<OpId::add>{.value = b.to_double() * alpha.to_double()}, a);
  }
  return add(a, as_operand(b, result_type({a}, {b}), a.device()), alpha);
}
Tensor sub(const Tensor& a, const Tensor& b, Scalar alpha) {
  return dispatch(AddSub<OpId::sub>{.alpha = alpha.to_double()}, a, b);
}
Tensor sub(const Tensor& a, Scalar b, Scalar alpha) {
  if (number_in_compute_type(a, b)) {
    return dispatch(WithNumber<OpId::sub>{.value = b.to_double() * alpha.to_double()}, a);
  }
  return sub(a, as_operand(b, result_type({a}, {b}), a.device()), alpha);
}
Tensor mul(const Tensor& a, const Tensor& b) { return dispatch(Mul{}, a, b); }
Tensor mul(const Tensor& a, Scalar b) {
  if (number_in_compute_type(a, b))
    return dispatch(WithNumber<OpId::mul>{.value = b.to_double()}, a);
  return mul(a, as_operand(b, result_type({a}, {b}), a.device()));
}
Tensor div(const Tensor& a, const Tensor& b) { return dispatch(Div{}, a, b); }
Tensor div(const Tensor& a, Scalar b) {
  if (number_in_compute_type(a, b))
    return dispatch(WithNumber<OpId::div>{.value = b.to_double()}, a);
  return div(a, as_operand(b, result_type({a}, {b}), a.device()));
}
Tensor pow(const Tensor& a, const Tensor& exponent) { return dispatch(Pow{}, a, exponent); }
Tensor pow(const Tensor& a, Scalar exponent) {
  if (number_in_compute_type(a, exponent)) {
    return dispatch(WithNumber<OpId::pow>{.value = exponent.to_double()}, a);
  }
  return pow(a, as_operand(exponent, result_type({a}, {exponent}), a.device()));
}
Tensor pow(Scalar base, const Tensor& exponent) {
  return dispatch(PowOfNumber{.base = base}, exponent);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return dispatch(Extremum<OpId::maximum>{}, a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return dispatch(Extremum<OpId::minimum>{}, a, b);
}

Tensor fmod(const Tensor& a, const Tensor& b) { return dispatch(BinaryMath<OpId::fmod>{}, a, b); }
namespace {
// op(a, b) for a divisor given as a number: an integer zero is refused here, on the host.
template <OpId Id>
Tensor binary_math_by_number(const Tensor& a, Scalar b) {
  const DType dtype = result_type({a}, {b});
  HG_CHECK(is_floating_point(dtype) || b.to_double() != 0.0,
           "{}: expected a nonzero integer divisor, got a divisor of 0", op_name(Id));
  return dispatch(BinaryMath<Id>{.divisor_checked = true}, a, as_operand(b, dtype, a.device()));
}
}  // namespace

Tensor fmod(const Tensor& a, Scalar b) { return binary_math_by_number<OpId::fmod>(a, b); }
Tensor remainder(const Tensor& a, const Tensor& b) {
  return dispatch(BinaryMath<OpId::remainder>{}, a, b);
}
Tensor remainder(const Tensor& a, Scalar b) { return binary_math_by_number<OpId::remainder>(a, b); }
Tensor remainder(Scalar a, const Tensor& b) {
  return remainder(as_operand(a, result_type({b}, {a}), b.device()), b);
}
Tensor floor_divide(const Tensor& a, const Tensor& b) {
  return dispatch(BinaryMath<OpId::floor_divide>{}, a, b);
}
Tensor floor_divide(const Tensor& a, Scalar b) {
  return binary_math_by_number<OpId::floor_divide>(a, b);
}
Tensor div(const Tensor& a, const Tensor& b, std::string_view rounding_mode) {
  if (rounding_mode == "floor") return floor_divide(a, b);
  HG_CHECK(rounding_mode == "trunc",
           "div: expected rounding_mode \"trunc\" or \"floor\", got \"{}\"", rounding_mode);
  return dispatch(BinaryMath<OpId::trunc_divide>{}, a, b);
}
Tensor div(const Tensor& a, Scalar b, std::string_view rounding_mode) {
  if (rounding_mode == "floor") return floor_divide(a, b);
  HG_CHECK(rounding_mode == "trunc",
           "div: expected rounding_mode \"trunc\" or \"floor\", got \"{}\"", rounding_mode);
  return binary_math_by_number<OpId::trunc_divide>(a, b);
}
Tensor atan2(const Tensor& a, const Tensor& b) { return dispatch(BinaryMath<OpId::atan2>{}, a, b); }
Tensor hypot(const Tensor& a, const Tensor& b) { return dispatch(BinaryMath<OpId::hypot>{}, a, b); }
Tensor lerp(const Tensor& start, const Tensor& end, const Tensor& weight) {
  return dispatch(Lerp{}, start, end, weight);
}
Tensor lerp(const Tensor& start, const Tensor& end, Scalar weight) {
  return lerp(start, end,
              as_operand(weight, start.defined() ? start.dtype() : kFloat32,
                         start.defined() ? start.device() : Device(kCPU)));
}

#define HG_OP(name, cuda, cpu, differentiable)
#define HG_UNARY_OP(name, kind, cuda, cpu, domain) \
  Tensor name(const Tensor& x) { return dispatch(UnaryOp<OpId::name, kernel::Unary::kind>{}, x); }
#include "halfgrad/ops/op_list.def"
#undef HG_UNARY_OP
#undef HG_OP
Tensor sign(const Tensor& x) { return dispatch(Sign{}, x); }
Tensor isnan(const Tensor& x) { return dispatch(FloatMask<OpId::isnan>{}, x); }
Tensor isinf(const Tensor& x) { return dispatch(FloatMask<OpId::isinf>{}, x); }
Tensor isfinite(const Tensor& x) { return dispatch(FloatMask<OpId::isfinite>{}, x); }
Tensor nan_to_num(const Tensor& x, double nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  return dispatch(NanToNum{.nan = nan, .posinf = posinf, .neginf = neginf}, x);
}

Tensor gelu(const Tensor& x, std::string_view approximate) {
  HG_CHECK(approximate == "none" || approximate == "tanh",
           "gelu: expected approximate to be \"none\" or \"tanh\", got \"{}\"", approximate);
  return dispatch(Gelu{.tanh_approximation = approximate == "tanh"}, x);
}

Tensor clamp(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max) {
  HG_CHECK(min || max, "clamp: expected at least one of min and max, got neither");
  const std::optional<double> low = min ? std::optional(min->to_double()) : std::nullopt;
  const std::optional<double> high = max ? std::optional(max->to_double()) : std::nullopt;
  return dispatch(Clamp{.low = low, .high = high}, x);
}

Tensor addcmul(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  return dispatch(AddC<OpId::addcmul>{.value = value.to_double()}, self, t1, t2);
}
Tensor addcdiv(const Tensor& self, const Tensor& t1, const Tensor& t2, Scalar value) {
  return dispatch(AddC<OpId::addcdiv>{.value = value.to_double()}, self, t1, t2);
}

using Eq = Comparison<OpId::eq, kernel::Compare::Eq>;
using Ne = Comparison<OpId::ne, kernel::Compare::Ne>;
using Lt = Comparison<OpId::lt, kernel::Compare::Lt>;
using Le = Comparison<OpId::le, kernel::Compare::Le>;
using Gt = Comparison<OpId::gt, kernel::Compare::Gt>;
using Ge = Comparison<OpId::ge, kernel::Compare::Ge>;
Tensor eq(const Tensor& a, const Tensor& b) { return dispatch(Eq{}, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return dispatch(Ne{}, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return dispatch(Lt{}, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return dispatch(Le{}, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return dispatch(Gt{}, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return dispatch(Ge{}, a, b); }
Tensor eq(const Tensor& a, Scalar b) { return compare_with_scalar<Eq>(a, b); }
Tensor ne(const Tensor& a, Scalar b) { return compare_with_scalar<Ne>(a, b); }
Tensor lt(const Tensor& a, Scalar b) { return compare_with_scalar<Lt>(a, b); }
Tensor le(const Tensor& a, Scalar b) { return compare_with_scalar<Le>(a, b); }
Tensor gt(const Tensor& a, Scalar b) { return compare_with_scalar<Gt>(a, b); }
Tensor ge(const Tensor& a, Scalar b) { return compare_with_scalar<Ge>(a, b); }

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return add(a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return add(b, a); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return sub(a, b); }
Tensor operator-(Scalar a, const Tensor& b) { return add(neg(b), a); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return mul(a, b); }
Tensor operator*(Scalar a, const Tensor& b) { return mul(b, a); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return div(a, b); }
Tensor operator/(Scalar a, const Tensor& b) { return mul(reciprocal(b), a); }
Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace hg
