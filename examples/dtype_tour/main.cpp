// dtype_tour: what float16 and bfloat16 do to float32 values.
//
// Makes a float32 tensor of telling values, casts it to float16 and bfloat16, prints all
// three, and shows each value's rounding error, the formats' limits, and the largest relative
// error over a million normal samples next to the unit roundoff that bounds it.
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

struct Sample {
  double value;
  const char* note;
};

// Whole numbers print in full (65504, not 6.55e+04: float16's largest value is an integer, and
// its last digits are the point); other values with 7 significant digits, about float32's
// precision and far more than float16's (about 3) or bfloat16's (about 2).
std::string readable(double value) {
  if (std::isfinite(value) && value == std::floor(value) && std::abs(value) < 1e15) {
    return fmt::format("{:.0f}", value);
  }
  return fmt::format("{:.7g}", value);
}

// "2^-10 = 0.0009765625" for the limits that are powers of two by construction.
std::string power_of_two(double value) {
  return fmt::format("2^{} = {}", std::ilogb(value), readable(value));
}

std::string relative_error(double exact, double rounded) {
  if (std::isinf(rounded) && !std::isinf(exact)) return "overflow";
  if (rounded == 0.0 && exact != 0.0) return "underflow";
  return fmt::format("{:.2e}", std::abs(rounded - exact) / std::abs(exact));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"dtype_tour: float32 -> float16 / bfloat16, and what rounding costs"};
  int64_t samples = 1'000'000;
  uint64_t seed = 0;
  app.add_option("--samples", samples, "normal samples for the error measurement")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the Philox generator");
  CLI11_PARSE(app, argc, argv);

  const std::vector<Sample> chosen = {
      {0.1, "not exact in binary"},
      {1.0 / 3.0, "1/3"},
      {std::numbers::pi, "pi"},
      {1000.1, "large with a fraction"},
      {65504.0, "float16's largest finite value"},
      {70000.0, "beyond float16's range"},
      {1e-5, "a float16 subnormal: fewer bits"},
      {1e-8, "below float16's smallest subnormal"},
      {3e38, "near float32's largest"},
  };
  std::vector<double> values;
  for (const Sample& s : chosen) values.push_back(s.value);

  const Tensor x = tensor(values, kFloat32);
  const Tensor h = x.to(kFloat16);
  const Tensor b = x.to(kBFloat16);
  fmt::print("halfgrad {} - three ways to store the same numbers\n\n", HALFGRAD_VERSION);
  fmt::print("x                = {}\n", x);
  fmt::print("x.to(kFloat16)   = {}\n", h);
  fmt::print("x.to(kBFloat16)  = {}\n\n", b);

  const std::vector<double> exact32 = x.to_vector<double>();
  const std::vector<double> as16 = h.to_vector<double>();
  const std::vector<double> asbf = b.to_vector<double>();
  fmt::print("{:<36} {:>14} {:>14} {:>10} {:>14} {:>10}\n", "value", "float32", "float16",
             "rel.err", "bfloat16", "rel.err");
  for (size_t i = 0; i < chosen.size(); ++i) {
    fmt::print("{:<36} {:>14} {:>14} {:>10} {:>14} {:>10}\n", chosen[i].note, readable(exact32[i]),
               readable(as16[i]), relative_error(exact32[i], as16[i]), readable(asbf[i]),
               relative_error(exact32[i], asbf[i]));
  }

  // eps, tiny and the smallest subnormal are powers of two: 2^-(mantissa bits), 2^(1 - bias)
  // and 2^(1 - bias - mantissa bits).
  fmt::print("\n{:<9} {:>4}  {:<22} {:>13}  {:<24} {}\n", "dtype", "bits", "eps", "max",
             "smallest normal (tiny)", "smallest subnormal");
  for (DType d : {kFloat32, kFloat16, kBFloat16}) {
    const FInfo f = finfo(d);
    fmt::print("{:<9} {:>4}  {:<22} {:>13}  {:<24} {}\n", dtype_name(d), f.bits,
               power_of_two(f.eps), readable(f.max), power_of_two(f.tiny),
               power_of_two(f.smallest_subnormal));
  }

  // Inside the normal range, round-to-nearest-even never errs by more than half an ulp: a
  // relative error of at most eps/2 (the unit roundoff).
  manual_seed(seed);
  const Tensor normal = randn({samples});
  const std::vector<double> reference = normal.to_vector<double>();
  fmt::print("\nlargest relative error over {} N(0,1) samples (normal range only):\n", samples);
  for (DType d : {kFloat16, kBFloat16}) {
    const std::vector<double> rounded = normal.to(d).to_vector<double>();
    double worst = 0.0;
    for (size_t i = 0; i < reference.size(); ++i) {
      if (std::abs(reference[i]) < finfo(d).tiny) continue;
      worst = std::max(worst, std::abs(rounded[i] - reference[i]) / std::abs(reference[i]));
    }
    const double unit_roundoff = finfo(d).eps / 2;
    fmt::print("  {:<9} {:.4e}   (unit roundoff eps/2 = {:.4e}){}\n", dtype_name(d), worst,
               unit_roundoff, worst <= unit_roundoff ? "" : "  <- exceeds the bound!");
    if (worst > unit_roundoff) return 1;
  }
  return 0;
}
