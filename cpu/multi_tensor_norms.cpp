// The CPU multi_tensor kernels of the norm, clipping and checking part of the family
// (multi_tensor_norms.h, kernel/multi_tensor.h): one tensor after another, through the CPU
// elementwise and reduce kernels.
//
// NOTE [Multi-tensor norms as the ops computed them] Before the multi_tensor family, the CPU
// paths of clip_grad_norm_, clip_grad_value_, FP16Optimizer's unscale, the loss scalers, anomaly
// mode and OverflowWatch were ops: norm(g.to(kFloat32), p) (amax(abs(...)) for p = inf) per
// gradient, the same of the stacked norms, g.mul_(coef), g.copy_(clamp(g, low, high)), and
// host scans of the values. These kernels sit below ops, so they call what those ops' forwards
// called, with the same arguments: core::to_dtype, then the reduce kernel over every dim
// (resolved as ops resolves them, on the same strided tensor, since the order of accumulation
// follows the layout), one float32 [n] tensor of the per-tensor norms in list order for the
// second reduction; binary_(Mul) and clamp as mul_ and clamp call them. So a clip on the CPU
// gives the bits it gave before. Two things differ: the ops' dispatch is skipped (no autocast,
// which leaves these ops untouched on the CPU anyway, no anomaly check of the intermediate
// norms, no observers), and the inf-norm of an empty tensor counts as 0 where amax threw.
#include "halfgrad/cpu/multi_tensor_norms.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/strided_loop.h"
#include "halfgrad/core/view.h"
#include "halfgrad/cpu/kernel_tables.h"

namespace hg::cpu::multi_tensor_detail {

namespace {

using kernel::Binary;
using kernel::Reduction;
using kernel::Unary;

std::string describe(const Tensor& t) {
  if (!t.defined()) return "an undefined tensor";
  return fmt::format("{} element(s) of {} on {}", t.numel(), t.dtype(), t.device());
}

// What a kernel does with its tensors: Read converts each to float32 (float64 as it is) before
// looking at it, so float8 is welcome; Write computes in the tensor's own dtype, which float8
// has not (NOTE [Float8 is conversion only]).
enum class Access : bool { Read, Write };

// Throws unless every tensor is a defined floating CPU tensor (float8 only for Read), before
// anything is written. `op` names the kernel in the message.
void check_tensors(std::span<const Tensor> tensors, const char* op, Access access) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    HG_CHECK(t.defined(), "{}: expected defined tensors, got an undefined one (index {})", op, i);
    HG_CHECK(t.is_cpu(), "{}: expected tensors on the CPU, got one on {} (index {})", op,
             t.device(), i);
    HG_CHECK(t.is_floating_point(), "{}: expected floating tensors, got one of {} (index {})", op,
             t.dtype(), i);
    HG_CHECK(access == Access::Read || !is_float8(t.dtype()),
             "{}: expected tensors of float32, float16, bfloat16 or float64 to write into, got "
             "one of {} (index {}), which supports conversion only",
             op, t.dtype(), i);
  }
}

// Throws unless t is a one-element float32 CPU tensor.
void check_scalar(const Tensor& t, const char* op, const char* what) {
  HG_CHECK(t.defined() && t.is_cpu() && t.numel() == 1 && t.dtype() == kFloat32,
           "{}: expected {} to be a one-element float32 tensor on the CPU, got {}", op, what,
           describe(t));
}

// The dims ops pass the reduce kernel for a reduction over all of x: every dim, in order.
Shape every_dim(const Tensor& x) {
  Shape dims{};
  for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

Tensor amax_of(const Tensor& x) {
  return reduce_kernels.reduce(Reduction::Amax, x, every_dim(x), /*keepdim=*/false, x.dtype(),
                               /*p=*/2.0);
}
Tensor norm_of(const Tensor& x, double p) {
  return reduce_kernels.reduce(Reduction::Norm, x, every_dim(x), /*keepdim=*/false, x.dtype(), p);
}

// One tensor's norm in float32: norm(x.to(kFloat32), p), or amax(abs(...)) for p = inf.
float tensor_norm(const Tensor& t, double norm_type) {
  const Tensor t32 = core::to_dtype(t, kFloat32);
  if (!std::isinf(norm_type)) return *norm_of(t32, norm_type).data_ptr<float>();
  if (t32.numel() == 0) return 0.0f;  // amax has no identity; 0 changes no max of norms
  return *amax_of(elementwise_kernels.unary(Unary::Abs, t32)).data_ptr<float>();
}

// t *= factor in place with mul_'s bits: binary_'s t * (alpha * 1) in the compute type, which
// is t * float(factor) (double for float64), as mul_ computes it for every floating dtype (a
// 16-bit t takes the number as alpha; a float32 or float64 t a 0-d operand of the number, times
// alpha 1).
void scale_tensor(const Tensor& t, double factor) {
  elementwise_kernels.binary_(Binary::Mul, t, full({}, 1, {.dtype = t.dtype()}), factor);
}

// Calls visit(value) for each element of x (floating, float8 excepted), converted to its
// compute type (float, double for float64), on this thread; once `done` returns true, the
// contiguous runs left are skipped.
template <class Visit, class Done>
void for_each_value(const Tensor& x, Visit&& visit, Done&& done) {
  visit_floating_dtype("multi_tensor", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    for_each_row<1>(
        x.sizes(), {byte_data(x)}, {byte_strides(x)},
        [&](std::array<char*, 1> p, std::array<int64_t, 1> s, int64_t n) {
          if (done()) return;
          for (int64_t i = 0; i < n; ++i) visit(cast_value<C>(load_bytes<T>(p[0] + i * s[0])));
        },
        /*parallel=*/false);
  });
}

// x, or x in float32 when it is float8 (the scans read every dtype as float or double).
Tensor readable(const Tensor& x) { return is_float8(x.dtype()) ? core::to_dtype(x, kFloat32) : x; }

}  // namespace

Tensor total_norm(std::span<const Tensor> tensors, double norm_type) {
  constexpr const char* kOp = "total_norm";
  HG_CHECK(!tensors.empty(), "{}: expected at least one tensor, got none", kOp);
  HG_CHECK(norm_type > 0, "{}: expected norm_type > 0 (or infinity), got {}", kOp, norm_type);
  check_tensors(tensors, kOp, Access::Read);
  // stack(norms): the per-tensor norms as one float32 [n] tensor, in list order.
  Tensor norms = empty({int64_t(tensors.size())}, kFloat32);
  float* out = norms.data_ptr<float>();
  for (size_t i = 0; i < tensors.size(); ++i) out[i] = tensor_norm(tensors[i], norm_type);
  return std::isinf(norm_type) ? amax_of(norms) : norm_of(norms, norm_type);
}

void clip_by_total_norm_(std::span<const Tensor> tensors, const Tensor& total_norm,
                         double max_norm) {
  constexpr const char* kOp = "clip_by_total_norm_";
  if (tensors.empty()) return;
  check_tensors(tensors, kOp, Access::Write);
  check_scalar(total_norm, kOp, "the total norm");
  // torch: clip_coef = max_norm / (total + 1e-6), clamped to at most 1 (NaN stays NaN).
  const double total = double(*static_cast<const float*>(total_norm.data_ptr()));
  const double clip_coef = max_norm / (total + 1e-6);
  if (!(clip_coef < 1.0 || std::isnan(clip_coef))) return;
  for (const Tensor& t : tensors) scale_tensor(t, clip_coef);
}

void scale_(std::span<const Tensor> tensors, double factor) {
  check_tensors(tensors, "scale_", Access::Write);
  for (const Tensor& t : tensors) scale_tensor(t, factor);
}

void clamp_(std::span<const Tensor> tensors, double low, double high) {
  check_tensors(tensors, "clamp_", Access::Write);
  // t.copy_(clamp(t, low, high)): the clamp kernel's new tensor, copied back in t's dtype.
  for (Tensor t : tensors) t.copy_(elementwise_kernels.clamp(t, low, high));
}

Tensor non_finite_flag(std::span<const Tensor> tensors) {
  constexpr const char* kOp = "non_finite_flag";
  HG_CHECK(!tensors.empty(), "{}: expected at least one tensor, got none", kOp);
  check_tensors(tensors, kOp, Access::Read);
  bool found = false;
  for (const Tensor& t : tensors) {
    if (found) break;
    for_each_value(
        readable(t), [&](auto value) { found = found || !std::isfinite(value); },
        [&] { return found; });
  }
  return full({1}, found ? 1.0 : 0.0, {.dtype = kFloat32});
}

Tensor value_range(const Tensor& t) {
  constexpr const char* kOp = "value_range";
  check_tensors(std::span<const Tensor>(&t, 1), kOp, Access::Read);
  // OverflowWatch's scan: float64 in double, every other dtype through float32.
  double max_abs = 0.0;
  int64_t non_finite = 0;
  for_each_value(
      readable(t),
      [&](auto value) {
        const double v = double(value);
        if (std::isfinite(v)) {
          max_abs = std::max(max_abs, std::abs(v));
        } else {
          ++non_finite;
        }
      },
      [] { return false; });
  Tensor out = empty({2}, kInt64);
  out.data_ptr<int64_t>()[0] = std::bit_cast<int64_t>(max_abs);
  out.data_ptr<int64_t>()[1] = non_finite;
  return out;
}

}  // namespace hg::cpu::multi_tensor_detail
