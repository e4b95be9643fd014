// Tensor's methods that are ops (core/tensor.h, "ops as methods"): each calls the free function
// of the same name on *this. The elementwise functions come from ops/op_list.def, so a function
// added there without its method fails to compile here.
#include "halfgrad/core/tensor.h"
#include "halfgrad/ops/ops.h"

namespace hg {

// ---- reductions -------------------------------------------------------------------------------
Tensor Tensor::sum(DimList dims, bool keepdim, std::optional<DType> dtype) const {
  return hg::sum(*this, dims.shape(), keepdim, dtype);
}
Tensor Tensor::mean(DimList dims, bool keepdim, std::optional<DType> dtype) const {
  return hg::mean(*this, dims.shape(), keepdim, dtype);
}
Tensor Tensor::prod(DimList dims, bool keepdim) const {
  return hg::prod(*this, dims.shape(), keepdim);
}
Tensor Tensor::max() const { return hg::max(*this); }
Tensor Tensor::min() const { return hg::min(*this); }
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const {
  return hg::max(*this, dim, keepdim);
}
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const {
  return hg::min(*this, dim, keepdim);
}
Tensor Tensor::amax(DimList dims, bool keepdim) const {
  return hg::amax(*this, dims.shape(), keepdim);
}
Tensor Tensor::amin(DimList dims, bool keepdim) const {
  return hg::amin(*this, dims.shape(), keepdim);
}
Tensor Tensor::argmax(std::optional<int64_t> dim, bool keepdim) const {
  return hg::argmax(*this, dim, keepdim);
}
Tensor Tensor::argmin(std::optional<int64_t> dim, bool keepdim) const {
  return hg::argmin(*this, dim, keepdim);
}
Tensor Tensor::var(DimList dims, int64_t correction, bool keepdim) const {
  return hg::var(*this, dims.shape(), correction, keepdim);
}
Tensor Tensor::std(DimList dims, int64_t correction, bool keepdim) const {
  return hg::std(*this, dims.shape(), correction, keepdim);
}
Tensor Tensor::all(DimList dims, bool keepdim) const { return hg::all(*this, dims.shape(), keepdim); }
Tensor Tensor::any(DimList dims, bool keepdim) const { return hg::any(*this, dims.shape(), keepdim); }
Tensor Tensor::norm(double p, DimList dims, bool keepdim) const {
  return hg::norm(*this, p, dims.shape(), keepdim);
}
Tensor Tensor::logsumexp(DimList dims, bool keepdim) const {
  return hg::logsumexp(*this, dims.shape(), keepdim);
}
Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const {
  return hg::cumsum(*this, dim, dtype);
}
Tensor Tensor::softmax(int64_t dim, std::optional<DType> dtype) const {
  return hg::softmax(*this, dim, dtype);
}
Tensor Tensor::log_softmax(int64_t dim, std::optional<DType> dtype) const {
  return hg::log_softmax(*this, dim, dtype);
}

// ---- elementwise ------------------------------------------------------------------------------
Tensor Tensor::add(const Tensor& other, Scalar alpha) const { return hg::add(*this, other, alpha); }
Tensor Tensor::add(Scalar other, Scalar alpha) const { return hg::add(*this, other, alpha); }
Tensor Tensor::sub(const Tensor& other, Scalar alpha) const { return hg::sub(*this, other, alpha); }
Tensor Tensor::sub(Scalar other, Scalar alpha) const { return hg::sub(*this, other, alpha); }
Tensor Tensor::mul(const Tensor& other) const { return hg::mul(*this, other); }
Tensor Tensor::mul(Scalar other) const { return hg::mul(*this, other); }
Tensor Tensor::div(const Tensor& other) const { return hg::div(*this, other); }
Tensor Tensor::div(Scalar other) const { return hg::div(*this, other); }
Tensor Tensor::pow(const Tensor& exponent) const { return hg::pow(*this, exponent); }
Tensor Tensor::pow(Scalar exponent) const { return hg::pow(*this, exponent); }
Tensor Tensor::maximum(const Tensor& other) const { return hg::maximum(*this, other); }
Tensor Tensor::minimum(const Tensor& other) const { return hg::minimum(*this, other); }
Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  return hg::clamp(*this, min, max);
}
Tensor Tensor::clamp_min(Scalar min) const { return hg::clamp(*this, min, std::nullopt); }
Tensor Tensor::clamp_max(Scalar max) const { return hg::clamp(*this, std::nullopt, max); }

#define HG_COMPARISON_METHODS(name)                                                      \
  Tensor Tensor::name(const Tensor& other) const { return hg::name(*this, other); } \
  Tensor Tensor::name(Scalar other) const { return hg::name(*this, other); }
HG_COMPARISON_METHODS(eq)
HG_COMPARISON_METHODS(ne)
HG_COMPARISON_METHODS(lt)
HG_COMPARISON_METHODS(le)
HG_COMPARISON_METHODS(gt)
HG_COMPARISON_METHODS(ge)
#undef HG_COMPARISON_METHODS

#define HG_OP(name, cuda, cpu, differentiable)
#define HG_UNARY_OP(name, kind, cuda, cpu, domain) \
  Tensor Tensor::name() const { return hg::name(*this); }
#include "halfgrad/ops/op_list.def"
#undef HG_UNARY_OP
#undef HG_OP
Tensor Tensor::sign() const { return hg::sign(*this); }
Tensor Tensor::isnan() const { return hg::isnan(*this); }
Tensor Tensor::isinf() const { return hg::isinf(*this); }
Tensor Tensor::isfinite() const { return hg::isfinite(*this); }

// ---- products, selection and rearranging -----------------------------------------------------
Tensor Tensor::matmul(const Tensor& other) const { return hg::matmul(*this, other); }
Tensor Tensor::mm(const Tensor& other) const { return hg::mm(*this, other); }
Tensor Tensor::bmm(const Tensor& other) const { return hg::bmm(*this, other); }
Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const {
  return hg::masked_fill(*this, mask, value);
}
Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  return hg::gather(*this, dim, index);
}
Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  return hg::index_select(*this, dim, index);
}
std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  return hg::split(*this, split_size, dim);
}
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  return hg::chunk(*this, chunks, dim);
}
Tensor Tensor::repeat(const Shape& repeats) const { return hg::repeat(*this, repeats); }
Tensor Tensor::flip(const Shape& dims) const { return hg::flip(*this, dims); }
Tensor Tensor::tril(int64_t diagonal) const { return hg::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return hg::triu(*this, diagonal); }
std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const {
  return hg::sort(*this, dim, descending);
}
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return hg::topk(*this, k, dim, largest, sorted);
}

// ---- comparison operators ----------------------------------------------------------------------
#define HG_COMPARISON_OPERATOR(op, name)                                                      \
  Tensor operator op(const Tensor& a, const Tensor& b) { return hg::name(a, b); }            \
  Tensor operator op(const Tensor& a, Scalar b) { return hg::name(a, b); }                   \
  Tensor operator op(Scalar a, const Tensor& b) { return hg::name(b, a); }
HG_COMPARISON_OPERATOR(==, eq)
HG_COMPARISON_OPERATOR(!=, ne)
#undef HG_COMPARISON_OPERATOR
// a < b is b > a: the reversed forms swap the comparison.
Tensor operator<(const Tensor& a, const Tensor& b) { return hg::lt(a, b); }
Tensor operator<(const Tensor& a, Scalar b) { return hg::lt(a, b); }
Tensor operator<(Scalar a, const Tensor& b) { return hg::gt(b, a); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return hg::le(a, b); }
Tensor operator<=(const Tensor& a, Scalar b) { return hg::le(a, b); }
Tensor operator<=(Scalar a, const Tensor& b) { return hg::ge(b, a); }
Tensor operator>(const Tensor& a, const Tensor& b) { return hg::gt(a, b); }
Tensor operator>(const Tensor& a, Scalar b) { return hg::gt(a, b); }
Tensor operator>(Scalar a, const Tensor& b) { return hg::lt(b, a); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return hg::ge(a, b); }
Tensor operator>=(const Tensor& a, Scalar b) { return hg::ge(a, b); }
Tensor operator>=(Scalar a, const Tensor& b) { return hg::le(b, a); }

}  // namespace hg
