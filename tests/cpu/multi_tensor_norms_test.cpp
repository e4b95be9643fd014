// Tests for the CPU multi_tensor kernels of norms, clipping and checks (cpu/multi_tensor_norms.h,
// kernel/multi_tensor.h): each against a float64 reference computed here, and against the ops
// its callers ran before the family existed, bit for bit (NOTE [Multi-tensor norms as the ops
// computed them]); their argument checks; and the callers on the CPU.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/nn_test_util.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/multi_tensor_norms.h"
#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
namespace mt = hg::cpu::multi_tensor_detail;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kNormTypes[] = {0.5, 1.0, 2.0, 3.0, kInf};

// A list of every floating dtype and layout the kernels take: contiguous, transposed, sliced
// with a step, 0-d, empty, and long ones for the reductions' pieces and threads (the last a
// transposed float32 one, which the norm reads in its own layout).
std::vector<Tensor> mixed_tensors(uint64_t seed, double scale = 2.0) {
  return {
      random_tensor({300}, seed, kFloat32, -scale, scale),
      strided_copy(random_tensor({17, 9}, seed + 1, kFloat16, -scale, scale)),
      random_tensor({40}, seed + 2, kBFloat16, -scale, scale).slice(0, 1, 40, 3),
      random_tensor({7, 5}, seed + 3, kFloat64, -scale, scale).transpose(0, 1),
      random_tensor({}, seed + 4, kFloat32, -scale, scale),
      empty({0}, kFloat32),
      random_tensor({100003}, seed + 5, kFloat16, -scale, scale),
      strided_copy(random_tensor({301, 257}, seed + 6, kFloat32, -scale, scale)),
  };
}

std::vector<Tensor> clones(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(t.clone());
  return out;
}

// What clip_grad_norm_ computed on the CPU before the family: ops, tensor by tensor. (Its amax
// threw on an empty tensor, whose inf-norm the kernel counts as 0: a max of norms the same
// without it, so it is left out here.)
Tensor ops_total_norm(const std::vector<Tensor>& tensors, double norm_type) {
  std::vector<Tensor> norms;
  for (const Tensor& g : tensors) {
    if (std::isinf(norm_type) && g.numel() == 0) continue;
    const Tensor g32 = g.to(kFloat32);
    norms.push_back(std::isinf(norm_type) ? amax(abs(g32)) : norm(g32, norm_type));
  }
  const Tensor stacked = stack(norms);
  return std::isinf(norm_type) ? amax(stacked) : norm(stacked, norm_type);
}

// The float64 norm of every value of the tensors rounded to float32 (float64's too).
double reference_norm(const std::vector<Tensor>& tensors, double norm_type) {
  double sum = 0.0, max = 0.0;
  for (const Tensor& t : tensors) {
    for (double v : t.to_vector<double>()) {
      const double a = std::abs(double(float(v)));
      max = std::max(max, a);
      sum += std::pow(a, norm_type);
    }
  }
  return std::isinf(norm_type) ? max : std::pow(sum, 1.0 / norm_type);
}

// x * factor as the contract says: in double for float64; otherwise in float, the factor and the
// product rounded to float32, the product then rounded to a 16-bit dtype (float to float16 or
// bfloat16 rounds as double to it does, for a value float32 holds).
Tensor reference_scaled(const Tensor& t, double factor) {
  std::vector<double> out;
  for (double v : t.to_vector<double>()) {
    out.push_back(t.dtype() == kFloat64 ? v * factor : double(float(v) * float(factor)));
  }
  return tensor(out, t.sizes(), kFloat64).to(t.dtype());
}

// clamp(x, low, high) with the bounds in the compute type, NaN kept, one rounding to dtype.
Tensor reference_clamped(const Tensor& t, double low, double high) {
  const bool wide = t.dtype() == kFloat64;
  const double lo = wide ? low : double(float(low)), hi = wide ? high : double(float(high));
  std::vector<double> out;
  for (double v : t.to_vector<double>()) out.push_back(v < lo ? lo : v > hi ? hi : v);
  return tensor(out, t.sizes(), kFloat64).to(t.dtype());
}

// t with the element at row-major position `flat` set to value.
Tensor with_value(Tensor t, int64_t flat, double value) {
  const Sizes index = unravel(flat, sizes_of(t));
  Tensor element = t;
  for (int64_t i : index) element = element.select(0, i);
  element.fill_(value);
  return t;
}

std::vector<uint64_t> versions(const std::vector<Tensor>& tensors) {
  std::vector<uint64_t> out;
  for (const Tensor& t : tensors) out.push_back(t.version());
  return out;
}

// True when each tensor keeps the bits of its copy in `before`.
bool unchanged(const std::vector<Tensor>& tensors, const std::vector<Tensor>& before) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!bit_identical(tensors[i], before[i])) return false;
  }
  return true;
}

}  // namespace

// ---- total_norm ---------------------------------------------------------------------------------

TEST_CASE("total_norm matches a float64 reference over mixed dtypes and strides",
          "[multi_tensor]") {
  const std::vector<Tensor> tensors = mixed_tensors(11);
  for (double norm_type : kNormTypes) {
    INFO("norm_type " << norm_type);
    const Tensor total = mt::total_norm(tensors, norm_type);
    CHECK(total.dim() == 0);
    CHECK(total.dtype() == kFloat32);
    CHECK(total.is_cpu());
    const double want = reference_norm(tensors, norm_type);
    if (std::isinf(norm_type)) {
      CHECK(total.item<double>() == double(float(want)));  // a max: exact
    } else {
      CHECK(total.item<double>() == Approx(want).epsilon(2e-5));
    }
  }
}

TEST_CASE("total_norm gives the bits of the ops clip_grad_norm_ used", "[multi_tensor]") {
  for (uint64_t seed : {21, 22}) {
    const std::vector<Tensor> tensors = mixed_tensors(seed, seed == 21 ? 2.0 : 3e4);
    for (double norm_type : kNormTypes) {
      INFO("seed " << seed << " norm_type " << norm_type);
      const Tensor total = mt::total_norm(tensors, norm_type);
      CHECK(bit_identical(total, ops_total_norm(tensors, norm_type)));
      // Through the CPU table, as kernel_for::multi_tensor(kCPU) hands it out.
      CHECK(bit_identical(cpu::multi_tensor_kernels.total_norm(tensors, norm_type), total));
    }
    // One tensor still goes through the norm of the norms, as stack did.
    const std::vector<Tensor> one = {tensors[0]};
    CHECK(bit_identical(mt::total_norm(one, 3.0), ops_total_norm(one, 3.0)));
  }
}

TEST_CASE("total_norm of float16 values whose squares overflow float16", "[multi_tensor]") {
  const std::vector<Tensor> tensors = {tensor({30000.0, 40000.0}, kFloat16)};
  CHECK(mt::total_norm(tensors, 2.0).item<double>() == 50000.0);
}

TEST_CASE("total_norm propagates inf and NaN", "[multi_tensor]") {
  const std::vector<Tensor> finite = mixed_tensors(31);
  std::vector<Tensor> with_inf = clones(finite);
  with_inf[1] = strided_copy(with_value(with_inf[1].contiguous(), 5, -kInf));
  std::vector<Tensor> with_nan = clones(finite);
  with_nan[2] = with_value(with_nan[2], 3, kNaN);
  std::vector<Tensor> with_both = clones(with_inf);
  with_both[6] = with_value(with_both[6], 99999, kNaN);
  for (double norm_type : kNormTypes) {
    INFO("norm_type " << norm_type);
    CHECK(mt::total_norm(with_inf, norm_type).item<double>() == kInf);
    CHECK(std::isnan(mt::total_norm(with_nan, norm_type).item<double>()));
    CHECK(std::isnan(mt::total_norm(with_both, norm_type).item<double>()));
    CHECK(
        bit_identical(mt::total_norm(with_both, norm_type), ops_total_norm(with_both, norm_type)));
  }
}

TEST_CASE("total_norm of empty tensors is 0, the inf-norm too", "[multi_tensor]") {
  const std::vector<Tensor> tensors = {empty({0}, kFloat16), empty({3, 0}, kFloat64)};
  for (double norm_type : kNormTypes) {
    INFO("norm_type " << norm_type);
    CHECK(mt::total_norm(tensors, norm_type).item<double>() == 0.0);
  }
  // Among others an empty tensor changes nothing.
  const std::vector<Tensor> some = {tensor({-3.0, 4.0}), empty({0})};
  CHECK(mt::total_norm(some, kInf).item<double>() == 4.0);
  CHECK(mt::total_norm(some, 2.0).item<double>() == 5.0);
}

TEST_CASE("total_norm reads float8 through float32", "[multi_tensor]") {
  const Tensor t = tensor({3.0, -4.0}).to(kFloat8_e4m3fn);
  CHECK(mt::total_norm(std::vector<Tensor>{t}, 2.0).item<double>() == 5.0);
  CHECK(mt::total_norm(std::vector<Tensor>{t}, kInf).item<double>() == 4.0);
}

// ---- clip_by_total_norm_ ------------------------------------------------------------------------

TEST_CASE("clip_by_total_norm_ scales with mul_'s bits below a coefficient of 1",
          "[multi_tensor]") {
  const std::vector<Tensor> original = mixed_tensors(41);
  for (double norm_type : {2.0, kInf}) {
    const Tensor total = mt::total_norm(original, norm_type);
    const double max_norm = 0.37;
    const double coef = max_norm / (total.item<double>() + 1e-6);
    REQUIRE(coef < 1.0);
    // mixed_tensors again: the same values in the same layouts, strided ones written in place.
    std::vector<Tensor> tensors = mixed_tensors(41), by_ops = clones(original);
    mt::clip_by_total_norm_(tensors, total, max_norm);
    for (Tensor& g : by_ops) g.mul_(coef);
    for (size_t i = 0; i < tensors.size(); ++i) {
      INFO("norm_type " << norm_type << " tensor " << i << " " << tensors[i].dtype());
      CHECK(bit_identical(tensors[i], by_ops[i]));
      CHECK(bit_identical(tensors[i], reference_scaled(original[i], coef)));
    }
  }
}

TEST_CASE("clip_by_total_norm_ writes nothing at a coefficient of 1 or more", "[multi_tensor]") {
  std::vector<Tensor> tensors = mixed_tensors(51);
  const std::vector<Tensor> before = clones(tensors);
  const std::vector<uint64_t> versions_before = versions(tensors);
  const Tensor total = mt::total_norm(tensors, 2.0);
  mt::clip_by_total_norm_(tensors, total, total.item<double>() + 1.0);
  mt::clip_by_total_norm_(tensors, zeros({}), 1.0);  // coefficient 1e6
  CHECK(unchanged(tensors, before));
  CHECK(versions(tensors) == versions_before);
}

TEST_CASE("clip_by_total_norm_ with a NaN or inf total", "[multi_tensor]") {
  std::vector<Tensor> tensors = {tensor({1.0, -2.0}), tensor({3.0}, kBFloat16)};
  mt::clip_by_total_norm_(tensors, full({1}, kNaN), 1.0);  // a NaN coefficient scales by NaN
  for (const Tensor& t : tensors) {
    for (double v : t.to_vector<double>()) CHECK(std::isnan(v));
  }
  tensors = {tensor({1.0, -2.0}), tensor({3.0}, kFloat16)};
  mt::clip_by_total_norm_(tensors, full({1}, kInf), 1.0);  // coefficient 0
  CHECK(tensors[0].to_vector<double>() == std::vector<double>{0.0, -0.0});
  CHECK(std::signbit(tensors[0].to_vector<double>()[1]));
  CHECK(tensors[1].to_vector<double>() == std::vector<double>{0.0});
}

// ---- scale_ and clamp_ --------------------------------------------------------------------------

TEST_CASE("scale_ gives the bits of mul_ by a number", "[multi_tensor]") {
  for (double factor : {1.0 / 65536.0, 1.0 / 3.0, 1e-30, 7.3}) {
    INFO("factor " << factor);
    const std::vector<Tensor> original = mixed_tensors(61, 3e4);
    std::vector<Tensor> tensors = mixed_tensors(61, 3e4), by_ops = clones(original);
    mt::scale_(tensors, factor);
    for (Tensor& g : by_ops) g.mul_(Scalar(factor));
    for (size_t i = 0; i < tensors.size(); ++i) {
      INFO("tensor " << i << " " << tensors[i].dtype());
      CHECK(bit_identical(tensors[i], by_ops[i]));
      CHECK(bit_identical(tensors[i], reference_scaled(original[i], factor)));
    }
  }
}

TEST_CASE("scale_ writes through strided views and bumps versions", "[multi_tensor]") {
  Tensor base = arange(12.0).reshape({3, 4});
  const Tensor column = base.select(1, 2);  // [2, 6, 10], stride 4
  const uint64_t before = base.version();
  mt::scale_(std::vector<Tensor>{column}, 0.5);
  CHECK(base.to_vector<double>() == std::vector<double>{0, 1, 1, 3, 4, 5, 3, 7, 8, 9, 5, 11});
  CHECK(base.version() > before);
  mt::scale_({}, 2.0);  // an empty list is nothing to do
}

TEST_CASE("clamp_ gives the bits of copy_(clamp(...)), NaN kept", "[multi_tensor]") {
  std::vector<Tensor> original = mixed_tensors(71);
  original[0] = with_value(with_value(with_value(original[0], 3, kNaN), 4, kInf), 5, -kInf);
  original[1] = strided_copy(with_value(original[1].contiguous(), 7, kNaN));
  for (const auto& [low, high] : std::vector<std::pair<double, double>>{{-0.7, 0.7}, {-1.1, 0.3}}) {
    INFO("low " << low << " high " << high);
    std::vector<Tensor> tensors = clones(original), by_ops = clones(original);
    tensors[1] = strided_copy(tensors[1]);  // keep one strided target
    mt::clamp_(tensors, low, high);
    for (Tensor& g : by_ops) g.copy_(clamp(g, low, high));
    for (size_t i = 0; i < tensors.size(); ++i) {
      INFO("tensor " << i << " " << tensors[i].dtype());
      CHECK(bit_identical(tensors[i], by_ops[i]));
      CHECK(bit_identical(tensors[i], reference_clamped(original[i], low, high)));
    }
    CHECK(std::isnan(tensors[0].to_vector<double>()[3]));
    CHECK(tensors[0].to_vector<double>()[4] == double(float(high)));
    CHECK(tensors[0].to_vector<double>()[5] == double(float(low)));
  }
}

// ---- non_finite_flag and value_range ------------------------------------------------------------

TEST_CASE("non_finite_flag finds an inf or NaN in any tensor of the list", "[multi_tensor]") {
  const std::vector<Tensor> finite = mixed_tensors(81, 6e4);
  const Tensor clean = mt::non_finite_flag(finite);
  CHECK(clean.sizes() == Shape{1});
  CHECK(clean.dtype() == kFloat32);
  CHECK(clean.item<float>() == 0.0f);
  const std::vector<std::pair<size_t, double>> cases = {{0, kInf}, {1, kNaN}, {2, -kInf},
                                                        {3, kNaN}, {4, kInf}, {6, kNaN}};
  for (const auto& [which, value] : cases) {
    INFO("tensor " << which << " value " << value);
    std::vector<Tensor> tensors = clones(finite);
    tensors[which] = with_value(tensors[which], tensors[which].numel() - 1, value);
    CHECK(mt::non_finite_flag(tensors).item<float>() == 1.0f);
  }
  // Overflow to float16's inf is found; float16's largest value is finite.
  CHECK(mt::non_finite_flag(std::vector<Tensor>{tensor({65504.0}, kFloat16)}).item<float>() == 0);
  CHECK(mt::non_finite_flag(std::vector<Tensor>{tensor({7e4}).to(kFloat16)}).item<float>() == 1);
  // float8 is read through float32 (e4m3fn has NaN, no inf).
  const Tensor f8 = tensor({1.0, kNaN}).to(kFloat8_e4m3fn);
  CHECK(mt::non_finite_flag(std::vector<Tensor>{f8}).item<float>() == 1.0f);
  CHECK(mt::non_finite_flag(std::vector<Tensor>{f8.narrow(0, 0, 1)}).item<float>() == 0.0f);
}

TEST_CASE("value_range gives the largest finite |x| and the count of infs and NaNs",
          "[multi_tensor]") {
  auto range_of = [](const Tensor& t) {
    const std::vector<int64_t> r = mt::value_range(t).to_vector<int64_t>();
    return std::pair<double, int64_t>{std::bit_cast<double>(r[0]), r[1]};
  };
  for (const Tensor& t : mixed_tensors(91, 5.0)) {
    INFO(t.dtype() << " " << t.sizes());
    const Tensor out = mt::value_range(t);
    CHECK(out.sizes() == Shape{2});
    CHECK(out.dtype() == kInt64);
    // OverflowWatch's scan: float64 as it is, the other dtypes through float32.
    double want = 0.0;
    for (double v : t.to_vector<double>()) {
      want = std::max(want, std::abs(t.dtype() == kFloat64 ? v : double(float(v))));
    }
    CHECK(range_of(t) == std::pair<double, int64_t>{want, 0});
  }
  Tensor t = strided_copy(random_tensor({6, 5}, 92, kFloat32));
  t = with_value(with_value(with_value(t, 3, -12345.0), 8, kInf), 20, kNaN);
  CHECK(range_of(t) == std::pair<double, int64_t>{12345.0, 2});
  CHECK(range_of(t.to(kFloat16)) == std::pair<double, int64_t>{12344.0, 2});  // rounded
  CHECK(range_of(tensor({1e300, -kInf}, kFloat64)) == std::pair<double, int64_t>{1e300, 1});
  CHECK(range_of(tensor({kNaN, kInf}, kBFloat16)) == std::pair<double, int64_t>{0.0, 2});
  CHECK(range_of(empty({0, 3}, kFloat16)) == std::pair<double, int64_t>{0.0, 0});
  CHECK(range_of(tensor({-3.0, kNaN}).to(kFloat8_e5m2)) == std::pair<double, int64_t>{3.0, 1});
}

// ---- argument checks ----------------------------------------------------------------------------

TEST_CASE("bad arguments are refused by name before anything is written", "[multi_tensor]") {
  std::vector<Tensor> tensors = {tensor({1.0, 2.0}), arange(3)};  // int64 second
  const std::vector<Tensor> before = clones(tensors);
  const std::vector<uint64_t> versions_before = versions(tensors);
  const std::string not_floating = "expected floating tensors, got one of int64 (index 1)";
  CHECK(error_message([&] { mt::total_norm(tensors, 2.0); }) == "total_norm: " + not_floating);
  CHECK(error_message([&] { mt::clip_by_total_norm_(tensors, full({1}, 100.0), 1.0); }) ==
        "clip_by_total_norm_: " + not_floating);
  CHECK(error_message([&] { mt::scale_(tensors, 0.5); }) == "scale_: " + not_floating);
  CHECK(error_message([&] { mt::clamp_(tensors, -0.5, 0.5); }) == "clamp_: " + not_floating);
  CHECK(error_message([&] { mt::non_finite_flag(tensors); }) == "non_finite_flag: " + not_floating);
  CHECK(error_message([&] { mt::value_range(arange(3)); }) ==
        "value_range: expected floating tensors, got one of int64 (index 0)");

  const std::vector<Tensor> with_undefined = {tensors[0], Tensor()};
  CHECK(error_message([&] { mt::scale_(with_undefined, 0.5); }) ==
        "scale_: expected defined tensors, got an undefined one (index 1)");

  const std::vector<Tensor> with_float8 = {tensors[0], tensor({1.0}).to(kFloat8_e5m2)};
  CHECK(error_message([&] { mt::clamp_(with_float8, -0.5, 0.5); }) ==
        "clamp_: expected tensors of float32, float16, bfloat16 or float64 to write into, got "
        "one of float8_e5m2 (index 1), which supports conversion only");

  const std::vector<Tensor> good = {tensors[0]};
  for (double norm_type : {0.0, -2.0, kNaN}) {
    CHECK(error_message([&] { mt::total_norm(good, norm_type); }) ==
          fmt::format("total_norm: expected norm_type > 0 (or infinity), got {}", norm_type));
  }
  CHECK(error_message([&] { mt::total_norm({}, 2.0); }) ==
        "total_norm: expected at least one tensor, got none");
  CHECK(error_message([&] { mt::non_finite_flag({}); }) ==
        "non_finite_flag: expected at least one tensor, got none");

  CHECK(error_message([&] { mt::clip_by_total_norm_(good, full({1}, 100.0, kFloat64), 1.0); }) ==
        "clip_by_total_norm_: expected the total norm to be a one-element float32 tensor on the "
        "CPU, got 1 element(s) of float64 on cpu");
  CHECK(error_message([&] { mt::clip_by_total_norm_(good, zeros({2}), 1.0); }) ==
        "clip_by_total_norm_: expected the total norm to be a one-element float32 tensor on the "
        "CPU, got 2 element(s) of float32 on cpu");
  CHECK(error_message([&] { mt::clip_by_total_norm_(good, Tensor(), 1.0); }) ==
        "clip_by_total_norm_: expected the total norm to be a one-element float32 tensor on the "
        "CPU, got an undefined tensor");

  CHECK(unchanged(tensors, before));
  CHECK(versions(tensors) == versions_before);
}

// ---- the callers on the CPU ---------------------------------------------------------------------

TEST_CASE("clip_grad_norm_ and clip_grad_value_ on the CPU keep the ops' bits", "[multi_tensor]") {
  for (double norm_type : kNormTypes) {
    INFO("norm_type " << norm_type);
    // The gradients keep mixed_tensors' layouts (the norm's order of accumulation follows
    // them); `grads` holds the same values in the same layouts, for the ops.
    const std::vector<Tensor> grads = mixed_tensors(101, 3.0);
    std::vector<Tensor> params;
    for (const Tensor& g : mixed_tensors(101, 3.0)) {
      Tensor p = zeros(g.sizes(), g.dtype()).requires_grad_();
      p.mutable_grad() = g;
      params.push_back(p);
    }
    const Tensor want_total = ops_total_norm(grads, norm_type);
    const double coef = 1.0 / (want_total.item<double>() + 1e-6);
    const Tensor total = nn::utils::clip_grad_norm_(params, 1.0, norm_type);
    CHECK(bit_identical(total, want_total));
    for (size_t i = 0; i < grads.size(); ++i) {
      Tensor want = grads[i].clone();
      want.mul_(coef);
      CHECK(bit_identical(params[i].grad(), want));
    }
    nn::utils::clip_grad_value_(params, 1e-3);
    for (size_t i = 0; i < grads.size(); ++i) {
      Tensor want = grads[i].clone();
      want.mul_(coef);
      want.copy_(clamp(want, -1e-3, 1e-3));
      CHECK(bit_identical(params[i].grad(), want));
    }
  }
}

TEST_CASE("anomaly mode's all_finite and the loss scaler's check on the CPU", "[multi_tensor]") {
  CHECK(autograd::all_finite(tensor({1.0, -2.0}, kBFloat16)));
  CHECK_FALSE(autograd::all_finite(tensor({1.0, kInf}, kFloat16)));
  CHECK_FALSE(autograd::all_finite(strided_copy(tensor({1.0, 2.0, kNaN, 4.0}, {2, 2}))));
  CHECK(autograd::all_finite(empty({0})));
  CHECK(autograd::all_finite(arange(3)));  // integers are always finite

  Tensor a = zeros({2}).requires_grad_();
  Tensor b = zeros({1}, kFloat16).requires_grad_();
  a.mutable_grad() = tensor({1.0, 2.0});
  b.mutable_grad() = tensor({3.0}, kFloat16);
  CHECK_FALSE(amp::grads_have_inf_or_nan({a, b}));
  b.mutable_grad() = tensor({kNaN}, kFloat16);
  CHECK(amp::grads_have_inf_or_nan({a, b}));
}
