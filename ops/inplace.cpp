// In-place arithmetic: Tensor::add_, sub_, mul_, div_.
//
// NOTE [In-place ops and autograd] Without autograd involved the kernel writes into the
// tensor and bumps its version (which invalidates earlier saves of it: NOTE [Version
// counter]). With autograd involved (grad mode on, and the tensor or the operand requires
// grad) the op is recorded out of place, the result is written into the tensor, and the
// tensor's history moves to the new node, as PyTorch does. Two cases PyTorch allows are
// refused: a leaf that requires grad (as in PyTorch), and a view whose base takes part in
// autograd (PyTorch rewrites the base's history there; halfgrad asks for a clone instead).
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/type_promotion.h"

namespace hg {

namespace {

int category(DType dtype) { return dtype == kBool ? 0 : is_floating_point(dtype) ? 2 : 1; }

template <class OutOfPlace>
Tensor& inplace(Tensor& self, const Tensor& other, const char* op, kernel::Binary kernel, double alpha,
                OutOfPlace out_of_place) {
  HG_CHECK(self.defined() && other.defined(), "{}: expected defined tensors", op);
  const DType computed = result_type({self, other});
  HG_CHECK(category(computed) <= category(self.dtype()),
           "{}: the result type {} cannot be stored in the {} tensor written to", op, computed,
           self.dtype());
  const bool tracked =
      autograd::is_grad_enabled() && (self.requires_grad() || other.requires_grad());
  if (!tracked) {
    kernel_for::elementwise(self).binary_(kernel, self, other, alpha);
    return self;
  }
  HG_CHECK(!(self.is_leaf() && self.requires_grad()),
           "{}: a leaf tensor that requires grad (shape {}) cannot be modified in place while "
           "grad mode is on; modify it under NoGradGuard, or work on a clone",
           op, self.sizes());
  HG_CHECK(!self.is_view(),
           "{}: in-place ops on a view are not recorded by autograd in halfgrad; clone() the "
           "view first (shape {})",
           op, self.sizes());
  // The op reads a copy of self's old value: the node may save it, and self is about to be
  // overwritten. The copy is recorded (clone), so the gradient still reaches self's history.
  // An operand that shares self's memory (self itself, or a view of it) is read from a copy
  // too: it is overwritten as well, and saving it would tie self's new history to itself.
  const Tensor old = self.clone();
  const Tensor operand = other.is_same(self)          ? old
                         : other.shares_storage(self) ? other.clone()
                                                      : other;
  Tensor result = out_of_place(old, operand);
  if (result.dtype() != self.dtype()) result = result.to(self.dtype());
  self.copy_(result.detach());
  autograd::set_history(self, result.grad_fn(), result.output_nr());
  return self;
}

Tensor operand(Scalar value, const Tensor& like) {
  return full({}, value, {.dtype = result_type({like}, {value}), .device = like.device()});
}

// self op= number for a float16/bfloat16 self: the number goes to the kernel as its alpha,
// against a 0-d one (NOTE [Number operands of 16-bit ops] in ops/elementwise.cpp); recorded as
// out_of_place(old), the op with the number.
template <class OutOfPlace>
Tensor& inplace_number(Tensor& self, const char* op, kernel::Binary kernel, double alpha,
                       OutOfPlace out_of_place) {
  const Tensor one = full({}, 1, {.dtype = self.dtype(), .device = self.device()});
  return inplace(self, one, op, kernel, alpha,
                 [&](const Tensor& old, const Tensor&) { return out_of_place(old); });
}

}  // namespace

Tensor& Tensor::add_(const Tensor& other, Scalar alpha) {
  return inplace(
      *this, other, "add_", kernel::Binary::Add, alpha.to_double(),
      [&](const Tensor& old, const Tensor& operand) { return hg::add(old, operand, alpha); });
}
Tensor& Tensor::add_(Scalar other, Scalar alpha) {
  if (number_in_compute_type(*this, other)) {
    return inplace_number(*this, "add_", kernel::Binary::Add, other.to_double() * alpha.to_double(),
                          [&](const Tensor& old) { return hg::add(old, other, alpha); });
  }
  return add_(operand(other, *this), alpha);
}
Tensor& Tensor::sub_(const Tensor& other, Scalar alpha) {
  return inplace(
      *this, other, "sub_", kernel::Binary::Sub, alpha.to_double(),
      [&](const Tensor& old, const Tensor& operand) { return hg::sub(old, operand, alpha); });
}
Tensor& Tensor::sub_(Scalar other, Scalar alpha) {
  if (number_in_compute_type(*this, other)) {
    return inplace_number(*this, "sub_", kernel::Binary::Sub, other.to_double() * alpha.to_double(),
                          [&](const Tensor& old) { return hg::sub(old, other, alpha); });
  }
  return sub_(operand(other, *this), alpha);
}
Tensor& Tensor::mul_(const Tensor& other) {
  return inplace(*this, other, "mul_", kernel::Binary::Mul, 1.0,
                 [&](const Tensor& old, const Tensor& operand) { return hg::mul(old, operand); });
}
Tensor& Tensor::mul_(Scalar other) {
  if (number_in_compute_type(*this, other)) {
    return inplace_number(*this, "mul_", kernel::Binary::Mul, other.to_double(),
                          [&](const Tensor& old) { return hg::mul(old, other); });
  }
  return mul_(operand(other, *this));
}
Tensor& Tensor::div_(const Tensor& other) {
  HG_CHECK(is_floating_point(), "div_: true division needs a floating tensor to write into, got {}",
           dtype());
  return inplace(*this, other, "div_", kernel::Binary::Div, 1.0,
                 [&](const Tensor& old, const Tensor& operand) { return hg::div(old, operand); });
}
Tensor& Tensor::div_(Scalar other) {
  if (number_in_compute_type(*this, other)) {
    return inplace_number(*this, "div_", kernel::Binary::Div, other.to_double(),
                          [&](const Tensor& old) { return hg::div(old, other); });
  }
  return div_(operand(other, *this));
}

}  // namespace hg
