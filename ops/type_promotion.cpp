// result_type (type_promotion.h): the dtype an op computes in, as PyTorch's.
#include "halfgrad/ops/type_promotion.h"

#include <optional>

namespace hg {

namespace {

int category(DType dtype) {
  if (dtype == kBool) return 0;
  return is_floating_point(dtype) ? 2 : 1;
}

int category(const Scalar& s) { return s.is_boolean() ? 0 : s.is_floating() ? 2 : 1; }

void fold(std::optional<DType>& acc, DType dtype) {
  acc = acc ? promote_types(*acc, dtype) : dtype;
}

}  // namespace

DType result_type(std::span<const Tensor> tensors, std::span<const Scalar> scalars) {
  std::optional<DType> dimensioned, zero_dim, number;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    fold(t.dim() > 0 ? dimensioned : zero_dim, t.dtype());
  }
  for (const Scalar& s : scalars) {
    const DType as_dtype = s.is_boolean() ? kBool : s.is_floating() ? kFloat32 : kInt64;
    if (!number || category(s) > category(*number)) number = as_dtype;
  }
  std::optional<DType> result = dimensioned;
  if (zero_dim && (!result || category(*zero_dim) > category(*result))) result = zero_dim;
  if (number && (!result || category(*number) > category(*result))) result = number;
  return result.value_or(kFloat32);
}

DType result_type(std::initializer_list<Tensor> tensors, std::initializer_list<Scalar> scalars) {
  return result_type(std::span<const Tensor>(tensors.begin(), tensors.size()),
                     std::span<const Scalar>(scalars.begin(), scalars.size()));
}

DType floating_result(DType dtype) { return is_floating_point(dtype) ? dtype : kFloat32; }

bool number_in_compute_type(const Tensor& t, Scalar number) {
  return is_reduced_precision(t.dtype()) && result_type({t}, {number}) == t.dtype();
}

}  // namespace hg
