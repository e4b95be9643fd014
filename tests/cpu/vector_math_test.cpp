// The vector math passes (cpu/vector_math.h, NOTE [Vector math]) against float64: each
// function's error in ulps over a sweep of inputs with the special values and the edges, on
// every instruction set this CPU has; and the elementwise ops that use them.
#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "halfgrad/config.h"
#include "halfgrad/core/cpu_features.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/cpu/vector_math.h"
#include "halfgrad/halfgrad.h"
#include "halfgrad/kernel/constants.h"
#include "halfgrad/kernel/formulas.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using cpu::VectorFn;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// fn(x) computed in T by the scalar formula of kernel/unary.def (kernel::unary_fn): in float
// it is the scalar loop (libm per element), in double the reference.
template <class T>
T formula(VectorFn fn, T x) {
  using kernel::Unary;
  using kernel::unary_fn;
  switch (fn) {
    case VectorFn::Exp:
      return unary_fn<Unary::Exp, T>(x);
    case VectorFn::Expm1:
      return unary_fn<Unary::Expm1, T>(x);
    case VectorFn::Log:
      return unary_fn<Unary::Log, T>(x);
    case VectorFn::Log1p:
      return unary_fn<Unary::Log1p, T>(x);
    case VectorFn::Log2:
      return unary_fn<Unary::Log2, T>(x);
    case VectorFn::Log10:
      return unary_fn<Unary::Log10, T>(x);
    case VectorFn::Sin:
      return unary_fn<Unary::Sin, T>(x);
    case VectorFn::Cos:
      return unary_fn<Unary::Cos, T>(x);
    case VectorFn::Tanh:
      return unary_fn<Unary::Tanh, T>(x);
    case VectorFn::Erf:
      return unary_fn<Unary::Erf, T>(x);
    case VectorFn::Sigmoid:
      return unary_fn<Unary::Sigmoid, T>(x);
    case VectorFn::Silu:
      return unary_fn<Unary::Silu, T>(x);
    case VectorFn::Gelu:
      return unary_fn<Unary::Gelu, T>(x);
    case VectorFn::GeluTanh:
      return unary_fn<Unary::GeluTanh, T>(x);
    case VectorFn::GeluGrad:
      return unary_fn<Unary::GeluGrad, T>(x);
    case VectorFn::GeluTanhGrad:
      return unary_fn<Unary::GeluTanhGrad, T>(x);
    case VectorFn::Softplus:
      return unary_fn<Unary::Softplus, T>(x);
  }
  return T(kNaN);
}
double reference(VectorFn fn, float x) { return formula<double>(fn, double(x)); }
float scalar(VectorFn fn, float x) { return formula<float>(fn, x); }

// |got - want| in units of the last place of want rounded to float (the smallest subnormal
// at 0); 0 when both are the same infinity, or both NaN; infinite when only one is.
double ulps(float got, double want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got) ? 0 : kInf;
  const float rounded = float(want);
  if (std::isinf(rounded) || std::isinf(got)) {
    // want beyond FLT_MAX: got may be FLT_MAX or inf, of want's sign
    if (std::isinf(got) && std::isinf(rounded)) return got == rounded ? 0 : kInf;
    if (std::fabs(want) > std::numeric_limits<float>::max()) {
      return std::signbit(got) == std::signbit(want) &&
                     std::fabs(got) == std::numeric_limits<float>::max()
                 ? 1
                 : kInf;
    }
    return kInf;
  }
  const float magnitude = std::fabs(rounded);
  const double ulp = magnitude == 0 ? double(std::numeric_limits<float>::denorm_min())
                                    : double(std::nextafter(magnitude, kInf)) - magnitude;
  return std::fabs(double(got) - want) / ulp;
}

// How a function's error is bounded.
enum class Kind {
  Elementary,  // one SLEEF function: at most kElementaryUlps of the exact value
  Formula,     // a formula of them: at most the scalar loop's error + kFormulaSlack ulps
  Cancelling,  // a formula whose terms cancel: at most kCancellingUlps of its terms' scale
};

struct Bound {
  VectorFn fn;
  const char* name;
  Kind kind;
};

const Bound kBounds[] = {
    {VectorFn::Exp, "exp", Kind::Elementary},
    {VectorFn::Expm1, "expm1", Kind::Elementary},
    {VectorFn::Log, "log", Kind::Elementary},
    {VectorFn::Log1p, "log1p", Kind::Elementary},
    {VectorFn::Log2, "log2", Kind::Elementary},
    {VectorFn::Log10, "log10", Kind::Elementary},
    {VectorFn::Sin, "sin", Kind::Elementary},
    {VectorFn::Cos, "cos", Kind::Elementary},
    {VectorFn::Tanh, "tanh", Kind::Elementary},
    {VectorFn::Erf, "erf", Kind::Elementary},
    {VectorFn::Sigmoid, "sigmoid", Kind::Formula},
    {VectorFn::Silu, "silu", Kind::Formula},
    {VectorFn::Gelu, "gelu", Kind::Formula},
    {VectorFn::GeluTanh, "gelu_tanh", Kind::Formula},
    {VectorFn::Softplus, "softplus", Kind::Formula},
    {VectorFn::GeluGrad, "gelu_grad", Kind::Cancelling},
    {VectorFn::GeluTanhGrad, "gelu_tanh_grad", Kind::Cancelling},
};
static_assert(std::size(kBounds) == size_t(cpu::kVectorFnCount));

// SLEEF documents 1.0 ulp for its u10 functions; measured against the exact value the sweep
// finds up to 1.05 (erf near FLT_MIN).
constexpr double kElementaryUlps = 1.1;
// The formulas round each operation as the scalar loops do, on the same arguments; only the
// elementary functions inside differ (SLEEF's 1.0 or 1.5 ulps, libm's 0.5 to 1), and the
// formula's last operations carry that difference.
constexpr double kFormulaSlack = 4.0;
// Near underflow the values have fewer significant bits, and SLEEF's bounds hold for normal
// results: there the slack is larger. A formula's intermediate can be subnormal while its
// result is not (gelu: erfc(-x / sqrt 2) = 2 gelu(x) / x), so "near" is below 256 FLT_MIN.
constexpr double kSubnormalSlack = 64.0;
constexpr double kNearUnderflow = 256.0 * double(std::numeric_limits<float>::min());
// gelu_grad crosses 0 (near x = -0.75) as its two terms cancel, and gelu_tanh_grad's terms
// are made of 1 + t and 1 - t^2 with t = tanh(...) near -1: their errors are at most this
// many ulps of the terms' scale (terms_scale below), as the scalar loops' are.
constexpr double kCancellingUlps = 8.0;

// The magnitude of the terms a cancelling formula adds, in float64.
double terms_scale(VectorFn fn, float xf) {
  using namespace hg::kernel;
  const double x = xf;
  if (fn == VectorFn::GeluGrad) {
    return std::fabs(0.5 * std::erfc(-x * kSqrtHalf)) +
           std::fabs(x * kInvSqrt2Pi * std::exp(-0.5 * x * x));
  }
  // gelu_tanh_grad: 0.5 (1 + t) + 0.5 x (1 - t t) d_inner, t's error times 0.5 and x d_inner
  return 0.5 + std::fabs(x) * kSqrt2OverPi * (1 + 3 * kGeluCoef * x * x);
}

// The inputs: the special values, the edges of each function, and sweeps.
std::vector<float> inputs() {
  const float max = std::numeric_limits<float>::max(), tiny = std::numeric_limits<float>::min(),
              denorm = std::numeric_limits<float>::denorm_min();
  std::vector<float> x = {
      0.0f,         -0.0f,       denorm,      -denorm,    tiny,       -tiny,
      tiny / 2,     -tiny / 2,   1.0f,        -1.0f,      0.5f,       -0.5f,
      2.0f,         -2.0f,       max,         -max,       kInf,       -kInf,
      kNaN,         -kNaN,       20.0f,       20.000002f, 19.999998f,  // softplus' switch
      88.72283f,    88.72284f,   88.7229f,    89.0f,                   // exp's overflow
      -87.33654f,   -103.27893f, -103.97208f, -104.0f,                 // its underflow
      -0.99999994f, -1.0f,       -1.0000001f,                          // log1p's pole
      1e-8f,        -1e-8f,      1e-30f,      -1e-30f,    3.1415927f, 1e4f,
      -1e4f,        1e6f};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> moderate(-30.0f, 30.0f), small(-1.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 60000; ++i) x.push_back(moderate(rng));
  for (int i = 0; i < 20000; ++i) x.push_back(small(rng) * 1e-3f);
  for (int i = 0; i < 60000; ++i) x.push_back(std::bit_cast<float>(bits(rng)));  // any float
  return x;
}

// The functions' arguments where their float formula is defined by the test's reference:
// sin and cos only where float arguments still carry their reduction (libm and SLEEF agree to
// 1 ulp up to 1e5 here; the sweep's larger values are left to the special-value checks).
bool in_checked_domain(VectorFn fn, float x) {
  if (fn == VectorFn::Sin || fn == VectorFn::Cos) return std::fabs(x) <= 1e5f || !std::isfinite(x);
  return true;
}

void check_pass(cpu::VectorMap pass, const char* isa) {
  const std::vector<float> x = inputs();
  for (const Bound& bound : kBounds) {
    CAPTURE(isa, bound.name);
    std::vector<float> y(x.size(), kNaN);
    // Odd run lengths, so that tails of every length up to a vector are exercised.
    for (size_t start = 0; start < x.size();) {
      const size_t n = std::min(x.size() - start, size_t(1 + start % 37));
      pass(bound.fn, x.data() + start, y.data() + start, int64_t(n));
      start += n;
    }
    double worst = 0, worst_x = 0;
    size_t failures = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (!in_checked_domain(bound.fn, x[i])) continue;
      const double want = reference(bound.fn, x[i]);
      const double err = ulps(y[i], want);
      const float scalar_y = scalar(bound.fn, x[i]);
      const double scalar_err = ulps(scalar_y, want);
      const bool near_underflow = std::fabs(want) < kNearUnderflow;
      // The scalar loop's own result (NaN where the float formula overflows, as gelu_tanh_grad's
      // does for |x| near FLT_MAX) is always accepted: the vector pass changes nothing there.
      bool ok = std::bit_cast<uint32_t>(y[i]) == std::bit_cast<uint32_t>(scalar_y) ||
                (std::isnan(y[i]) && std::isnan(scalar_y));
      switch (bound.kind) {
        case Kind::Elementary:
          ok = ok || err <= kElementaryUlps + (near_underflow ? kSubnormalSlack : 0);
          break;
        case Kind::Formula:
          ok = ok || err <= scalar_err + (near_underflow ? kSubnormalSlack : kFormulaSlack);
          break;
        case Kind::Cancelling: {
          ok = ok || err <= scalar_err + (near_underflow ? kSubnormalSlack : kFormulaSlack);
          if (!ok && std::isfinite(want) && std::isfinite(y[i])) {
            const float scale = float(terms_scale(bound.fn, x[i]));
            const double unit = double(std::nextafter(scale, kInf)) - scale;
            ok = std::fabs(double(y[i]) - want) <= kCancellingUlps * unit;
          }
          break;
        }
      }
      if (!ok) {
        if (failures++ < 5) {
          UNSCOPED_INFO("x = " << x[i] << " (bits " << std::bit_cast<uint32_t>(x[i]) << "): got "
                               << y[i] << ", float64 " << want << ", " << err
                               << " ulps; the scalar loop " << scalar(bound.fn, x[i]) << ", "
                               << scalar_err << " ulps");
        }
      }
      if (std::isfinite(err) && err > worst) {
        worst = err;
        worst_x = x[i];
      }
    }
    CAPTURE(worst, worst_x);
    CHECK(failures == 0);
    // The special values come out as the scalar loop's: NaN for NaN, the same infinities and
    // the same signed zeros.
    for (const float v : {0.0f, -0.0f, kInf, -kInf, kNaN}) {
      float got = 0;
      pass(bound.fn, &v, &got, 1);
      const float want = scalar(bound.fn, v);
      CAPTURE(v, got, want);
      if (std::isnan(want)) {
        CHECK(std::isnan(got));
      } else {
        CHECK(std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(want));
      }
    }
  }
}

// pow: within kElementaryUlps of float64's pow over a grid of bases and exponents (the
// results' exponents across float's range, negative bases with integer exponents), and C's
// special cases bit for bit as std::pow gives them.
void check_pow(cpu::VectorPow power, const char* isa) {
  CAPTURE(isa);
  std::vector<float> a, b;
  for (float base = -9.75f; base <= 9.75f; base += 0.3125f) {
    for (float exponent = -7.5f; exponent <= 7.5f; exponent += 0.25f) {
      a.push_back(base);
      b.push_back(exponent);
    }
  }
  for (float base : {1e-30f, 3e-7f, 0.999f, 1.001f, 7e5f, 2e18f}) {  // large and tiny results
    for (float exponent : {-4.0f, -1.5f, 0.5f, 1.0f, 2.5f, 3.0f}) {
      a.push_back(base);
      b.push_back(exponent);
    }
  }
  const float special[] = {0.0f, -0.0f, 1.0f,  -1.0f, 2.0f,  -2.0f,
                           0.5f, 3.0f,  -3.0f, kInf,  -kInf, kNaN};
  for (float x : special) {
    for (float y : special) {
      a.push_back(x);
      b.push_back(y);
    }
  }
  std::vector<float> got(a.size());
  power(a.data(), b.data(), got.data(), int64_t(a.size()));
  int64_t failures = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const float want_float = std::pow(a[i], b[i]);
    const double err = ulps(got[i], std::pow(double(a[i]), double(b[i])));
    const bool special_case = !std::isfinite(want_float) || want_float == 0 ||
                              !std::isfinite(a[i]) || !std::isfinite(b[i]) || a[i] == 0 ||
                              std::fabs(a[i]) == 1;
    const bool ok = special_case
                        ? (std::isnan(want_float) ? std::isnan(got[i])
                                                  : std::bit_cast<uint32_t>(got[i]) ==
                                                        std::bit_cast<uint32_t>(want_float))
                        : err <= kElementaryUlps;
    if (!ok && failures++ < 5) {
      UNSCOPED_INFO("pow(" << a[i] << ", " << b[i] << ") = " << got[i] << ", std::pow "
                           << want_float << ", " << err << " ulps");
    }
  }
  CHECK(failures == 0);
}

// check(pass, name) on the pass of each instruction set this CPU has (null passes: none).
template <class Pass, class Check>
void on_each_isa(Pass avx512, Pass avx2, Check check) {
  bool any = false;
#if defined(__x86_64__)
  if (avx512 != nullptr && cpu_has_avx512f()) {
    check(avx512, "avx512");
    any = true;
  }
  if (avx2 != nullptr && cpu_has_avx2_fma()) {
    check(avx2, "avx2");
    any = true;
  }
#endif
  if (!any) WARN("skipped: no vector math on this CPU or build (" << cpu::vector_math_isa() << ")");
}

}  // namespace

TEST_CASE("vector math is within its ulp bounds of float64 on every instruction set here") {
#if defined(__x86_64__) && HALFGRAD_HAS_SLEEF
  on_each_isa(&cpu::detail::vector_map_avx512, &cpu::detail::vector_map_avx2, check_pass);
#else
  on_each_isa<cpu::VectorMap>(nullptr, nullptr, check_pass);
#endif
}

TEST_CASE("vector pow is within its ulp bound and keeps C's special cases") {
#if defined(__x86_64__) && HALFGRAD_HAS_SLEEF
  on_each_isa(&cpu::detail::vector_pow_avx512, &cpu::detail::vector_pow_avx2, check_pow);
#else
  on_each_isa<cpu::VectorPow>(nullptr, nullptr, check_pow);
#endif
}

// Every element of got within the rounding to dtype of want (float64): a relative tolerance,
// and float16's subnormal spacing (2^-24) as an absolute one, since its subnormal results
// keep fewer bits.
void check_near(const Tensor& got, const Tensor& want, DType dtype, const char* what) {
  const double rtol = rounding_tolerance(dtype),
               atol = dtype == kFloat16 ? std::ldexp(1.0, -24) : 0.0;
  const std::vector<double> g = got.to(kFloat64).contiguous().to_vector<double>();
  const std::vector<double> w = want.contiguous().to_vector<double>();
  REQUIRE(g.size() == w.size());
  size_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = std::fabs(g[i] - w[i]) <= rtol * std::fabs(w[i]) + atol;
    if (!ok && bad++ < 3) {
      UNSCOPED_INFO(what << ": element " << i << " got " << g[i] << ", want " << w[i]);
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("unary ops take the vector passes, in every floating dtype and layout") {
  if (cpu::vector_mapper() == nullptr) {
    WARN("skipped: no vector math on this CPU or build");
    return;
  }
  manual_seed(11);
  // Contiguous inputs (the vector passes) and transposed ones (the scalar loop) of 37 x 29
  // values: both match float64 within the dtype's rounding.
  const Tensor base = randn({37, 29}) * 3.0;
  struct Op {
    const char* name;
    Tensor (*fn)(const Tensor&);
  };
  const Op ops[] = {
      {"exp", [](const Tensor& t) { return exp(t); }},
      // A scalar exponent takes the tensor's dtype (as every scalar operand does): 1.75 is
      // exact in 16 bits, so the float64 reference sees the same exponent.
      {"pow, a scalar exponent", [](const Tensor& t) { return pow(abs(t), 1.75); }},
      {"pow, a tensor exponent", [](const Tensor& t) { return pow(abs(t), t * 0.5); }},
      {"tanh", [](const Tensor& t) { return tanh(t); }},
      {"sigmoid", [](const Tensor& t) { return sigmoid(t); }},
      {"silu", [](const Tensor& t) { return silu(t); }},
      {"gelu", [](const Tensor& t) { return gelu(t); }},
      {"gelu tanh", [](const Tensor& t) { return gelu(t, "tanh"); }},
      {"softplus", [](const Tensor& t) { return softplus(t); }},
      {"erf", [](const Tensor& t) { return erf(t); }},
      {"log1p", [](const Tensor& t) { return log1p(abs(t)); }}};
  for (const Op& op : ops) {
    for (const DType dtype : {kFloat32, kFloat16, kBFloat16}) {
      CAPTURE(op.name, dtype);
      const Tensor x = base.to(dtype);
      const Tensor want = op.fn(x.to(kFloat64));
      check_near(op.fn(x), want, dtype, "vector passes");
      check_near(op.fn(x.t().contiguous().t()), want, dtype, "scalar loop");
    }
  }
}

TEST_CASE("vector math can be turned off, and the ops then run their scalar loops") {
  manual_seed(12);
  const Tensor x = randn({1000});
  cpu::set_vector_math_enabled(false);
  CHECK(cpu::vector_mapper() == nullptr);
  const Tensor scalar_result = tanh(x);
  cpu::set_vector_math_enabled(true);
  const Tensor vector_result = tanh(x);
  // The scalar loop is libm's tanhf, bit for bit.
  const std::vector<float> xs = x.to_vector<float>(), ys = scalar_result.to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) REQUIRE(ys[i] == std::tanh(xs[i]));
  check_near(vector_result, tanh(x.to(kFloat64)), kFloat32, "vector tanh");
}

TEST_CASE("softmax and log_softmax rows take the vector exp, with the scalar loops' results") {
  if (cpu::vector_mapper() == nullptr) {
    WARN("skipped: no vector math on this CPU or build");
    return;
  }
  manual_seed(13);
  // Rows of 1 to 300 values over the last dim, with -inf entries, a row all -inf, a NaN and a
  // +inf: the vector rows against the slab loops (vector math off) and float64.
  for (const int64_t D : {1, 7, 16, 33, 300}) {
    Tensor x = randn({5, D}) * 4.0;
    std::vector<float> values = x.to_vector<float>();
    values[0] = -kInf;
    for (int64_t d = 0; d < D; ++d) values[size_t(D + d)] = -kInf;  // row 1: all -inf
    values[size_t(2 * D)] = kNaN;
    values[size_t(3 * D)] = kInf;
    x = tensor(values).reshape({5, D});
    for (const DType dtype : {kFloat32, kFloat16, kBFloat16}) {
      CAPTURE(D, dtype);
      const Tensor xd = x.to(dtype);
      cpu::set_vector_math_enabled(false);
      const Tensor slab_softmax = softmax(xd, -1), slab_log = log_softmax(xd, -1);
      cpu::set_vector_math_enabled(true);
      const Tensor row_softmax = softmax(xd, -1), row_log = log_softmax(xd, -1);
      const Tensor want_softmax = softmax(xd.to(kFloat64), -1);
      const Tensor want_log = log_softmax(xd.to(kFloat64), -1);
      for (const auto& [got, slab, want] : {std::tuple{row_softmax, slab_softmax, want_softmax},
                                            std::tuple{row_log, slab_log, want_log}}) {
        const std::vector<double> g = got.to(kFloat64).to_vector<double>();
        const std::vector<double> sl = slab.to(kFloat64).to_vector<double>();
        const std::vector<double> w = want.to_vector<double>();
        for (size_t i = 0; i < g.size(); ++i) {
          CAPTURE(i, g[i], sl[i], w[i]);
          REQUIRE(std::isnan(g[i]) == std::isnan(sl[i]));  // NaN where the slab loops give it
          if (std::isnan(g[i]) || std::isinf(w[i])) {
            CHECK((std::isnan(g[i]) || g[i] == w[i]));
            continue;
          }
          CHECK(std::fabs(g[i] - w[i]) <=
                rounding_tolerance(dtype) * std::fabs(w[i]) + (dtype == kFloat16 ? 1e-7 : 0.0));
        }
      }
    }
  }
}

TEST_CASE("log_softmax's backward rows take the vector exp") {
  if (cpu::vector_mapper() == nullptr) {
    WARN("skipped: no vector math on this CPU or build");
    return;
  }
  manual_seed(14);
  // dx = g - exp(y) sum(g) over each row, from the stored (rounded) output y, in float64.
  for (const DType dtype : {kFloat32, kBFloat16}) {
    CAPTURE(dtype);
    const Tensor x = (randn({6, 45}) * 3.0).to(dtype).requires_grad_();
    const Tensor g = randn({6, 45}).to(dtype);
    const Tensor y = log_softmax(x, -1);
    y.backward(g);
    const Tensor y64 = y.detach().to(kFloat64), g64 = g.to(kFloat64);
    const Tensor want = g64 - exp(y64) * sum(g64, {1}, true);
    check_near(x.grad(), want, dtype, "log_softmax backward");
  }
}

TEST_CASE("16-bit unary runs in float32 chunks give the per-element casts' bits") {
  // With vector math off, a contiguous float16 or bfloat16 run of any unary kind is widened in
  // chunks, computed with the scalar formula and rounded back in vectors (cpu/elementwise.cpp);
  // a strided one casts element by element. Both must be the formula's bits on each value.
  struct VectorMathOff {
    VectorMathOff() { cpu::set_vector_math_enabled(false); }
    ~VectorMathOff() { cpu::set_vector_math_enabled(true); }
  } off;
  constexpr kernel::Unary kinds[] = {
#define HG_UNARY(kind, takes_integers, formula) kernel::Unary::kind,
#include "halfgrad/kernel/unary.def"
#undef HG_UNARY
  };
  manual_seed(13);
  // 3 x 700 values in (0.05, 0.95) and past 1 (in the domain of most kinds; NaN results
  // compare by their bits too), more than one chunk a row.
  const Tensor base = rand({3, 700}) * 1.5 + 0.05;
  for (const kernel::Unary kind : kinds) {
    for (const DType dtype : {kFloat16, kBFloat16}) {
      CAPTURE(int(kind), dtype);
      const Tensor x = base.to(dtype);
      const Tensor strided = x.t().contiguous().t();
      REQUIRE_FALSE(strided.is_contiguous());
      const Tensor run = cpu::elementwise_kernels.unary(kind, x);
      const Tensor one_by_one = cpu::elementwise_kernels.unary(kind, strided);
      const std::vector<double> xs = x.to_vector<double>();
      const Tensor want = empty(x.sizes(), dtype);
      kernel::with_unary(kind, [&](auto tag) {
        for (size_t i = 0; i < xs.size(); ++i) {
          const float y = kernel::unary_fn<decltype(tag)::value, float>(float(xs[i]));
          if (dtype == kFloat16) want.data_ptr<Half>()[i] = Half(y);
          if (dtype == kBFloat16) want.data_ptr<BFloat16>()[i] = BFloat16(y);
        }
      });
      const auto bits = [](const Tensor& t) {
        const Tensor dense = t.contiguous();
        const auto* p = static_cast<const uint16_t*>(dense.data_ptr());
        return std::vector<uint16_t>(p, p + dense.numel());
      };
      CHECK(bits(run) == bits(want));
      CHECK(bits(one_by_one) == bits(want));
    }
  }
}
