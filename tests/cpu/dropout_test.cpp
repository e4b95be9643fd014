// Tests for the CPU dropout kernel (kernel/dropout.h, cpu/dropout.cpp): reproducible masks,
// the same pattern in every dtype, and the exact cases p 0 and 1.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "cpu/nn_test_util.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;

// ---- dropout ------------------------------------------------------------------------------

TEST_CASE("dropout is reproducible by seed and keeps 1 - p of the elements",
          "[nn_kernels][dropout]") {
  const int64_t n = 200000;
  const Tensor x = random_tensor({n / 100, 100}, 5000, kFloat32);
  for (double p : {0.1, 0.5, 0.8}) {
    INFO("p " << p);
    Generator gen(42), same(42), other(43);
    const kernel::DropoutForward d = cpu::dropout_kernels.dropout(x, p, gen);
    expect_result(d.out, kFloat32, x.sizes());
    expect_result(d.mask, kFloat32, x.sizes());
    CHECK(values(cpu::dropout_kernels.dropout(x, p, same).mask) == values(d.mask));
    CHECK(values(cpu::dropout_kernels.dropout(x, p, other).mask) != values(d.mask));
    CHECK(values(cpu::dropout_kernels.dropout(x, p, gen).mask) !=
          values(d.mask));  // the stream moved on

    const std::vector<double> mask = values(d.mask), xv = values(x), out = values(d.out);
    const double scale = double(float(1.0 / (1.0 - p)));
    int64_t kept = 0;
    double mask_sum = 0;
    bool values_ok = true, out_ok = true;
    for (size_t i = 0; i < mask.size(); ++i) {
      kept += mask[i] != 0.0;
      mask_sum += mask[i];
      values_ok = values_ok && (mask[i] == 0.0 || mask[i] == scale);
      out_ok = out_ok && out[i] == double(float(xv[i]) * float(mask[i]));
    }
    CHECK(values_ok);
    CHECK(out_ok);
    // Six standard deviations of a binomial fraction and of the mask's mean.
    const double kept_fraction = double(kept) / double(n);
    CHECK(std::abs(kept_fraction - (1 - p)) <= 6 * std::sqrt(p * (1 - p) / double(n)));
    CHECK(std::abs(mask_sum / double(n) - 1.0) <= 6 * std::sqrt(p / (1 - p) / double(n)));
  }
}

TEST_CASE("dropout draws the same mask pattern for every dtype", "[nn_kernels][dropout]") {
  const Tensor x32 = random_tensor({50, 40}, 5100, kFloat32, 0.5, 1.5);
  Generator reference_gen(7);
  const std::vector<double> reference =
      values(cpu::dropout_kernels.dropout(x32, 0.3, reference_gen).mask);
  for (DType dtype : kAllDTypes) {
    INFO(dtype);
    Generator gen(7);
    const Tensor x = x32.to(dtype);
    const kernel::DropoutForward d = cpu::dropout_kernels.dropout(strided_copy(x), 0.3, gen);
    expect_result(d.mask, dtype, x.sizes());
    const std::vector<double> mask = values(d.mask), out = values(d.out), xv = values(x);
    const double scale = values(tensor({1.0 / 0.7}, dtype))[0];
    bool same_pattern = true, out_ok = true;
    for (size_t i = 0; i < mask.size(); ++i) {
      same_pattern = same_pattern && ((mask[i] != 0) == (reference[i] != 0));
      same_pattern = same_pattern && (mask[i] == 0 || mask[i] == scale);
      const double expected = values(tensor({xv[i] * mask[i]}, dtype))[0];
      out_ok = out_ok && (dtype == kFloat32 || dtype == kFloat64
                              ? std::abs(out[i] - expected) <= 1e-6 * std::abs(expected)
                              : out[i] == expected);
    }
    CHECK(same_pattern);
    CHECK(out_ok);
  }
}

TEST_CASE("dropout with p 0 is the identity and with p 1 zeros", "[nn_kernels][dropout]") {
  for (DType dtype : kAllDTypes) {
    INFO(dtype);
    const Tensor x = random_tensor({7, 9}, 5200, dtype);
    Generator gen(3);
    const kernel::DropoutForward keep_all = cpu::dropout_kernels.dropout(x, 0.0, gen);
    CHECK(values(keep_all.out) == values(x));
    CHECK(values(keep_all.mask) == std::vector<double>(63, 1.0));
    CHECK_FALSE(keep_all.out.shares_storage(x));
    const kernel::DropoutForward drop_all = cpu::dropout_kernels.dropout(x, 1.0, gen);
    CHECK(values(drop_all.out) == std::vector<double>(63, 0.0));
    CHECK(values(drop_all.mask) == std::vector<double>(63, 0.0));
    CHECK(gen.offset() == 0);  // neither drew
  }
}
