// Tests for ops/dropout.h: the kept share and scale, reproducibility by seed, and the exact
// cases (not training, p 0 and 1).
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "ops/nn_test_util.h"

using namespace hg;
using namespace hg::testing;

// ---- dropout ------------------------------------------------------------------------------

TEST_CASE("dropout keeps 1 - p of the elements scaled and is reproducible by seed",
          "[nn_ops][dropout]") {
  const double p = 0.3;
  std::vector<bool> first_pattern;
  for (DType dtype : kDTypes) {
    Tensor x = random_input({64, 64}, dtype, 81).requires_grad_();
    Generator generator(5);
    const Tensor y = dropout(x, p, true, &generator);
    REQUIRE(y.dtype() == dtype);
    // The scale is 1 / (1 - p) rounded to dtype, applied in float and rounded once.
    const double scale = scalar_tensor(1.0 / (1.0 - p), dtype).item<double>();
    const std::vector<double> xv = values(x), yv = values(y);
    std::vector<bool> kept(yv.size());
    std::vector<double> expected(yv.size());
    size_t kept_count = 0;
    for (size_t i = 0; i < yv.size(); ++i) {
      kept[i] = yv[i] != 0.0;
      kept_count += kept[i];
      expected[i] = kept[i] ? xv[i] * scale : 0.0;
    }
    expect_close(y, expected, forward_tolerance(dtype), "dropout values");
    // 4096 draws: the kept fraction is within 4 standard deviations (0.007 each) of 1 - p.
    CHECK(std::abs(double(kept_count) / double(yv.size()) - (1 - p)) < 0.03);
    // One seed, one mask, whatever the dtype.
    if (first_pattern.empty()) first_pattern = kept;
    CHECK(kept == first_pattern);
    // Backward multiplies by the same mask.
    sum(y).backward();
    std::vector<double> mask(kept.size());
    for (size_t i = 0; i < kept.size(); ++i) mask[i] = kept[i] ? scale : 0.0;
    expect_result(x.grad(), dtype, {64, 64}, mask, "dropout grad", Tolerance{0, 0});
  }
}

TEST_CASE("dropout outside training returns the input and p 0 or 1 are exact",
          "[nn_ops][dropout]") {
  const Tensor x = random_input({5, 3}, kFloat16, 82);
  CHECK(dropout(x, 0.5, /*training=*/false).is_same(x));
  CHECK(values(dropout(x, 0.0)) == values(x));
  CHECK(values(dropout(x, 1.0)) == std::vector<double>(15, 0.0));
  // The default generator: seeding it repeats the mask.
  manual_seed(9);
  const std::vector<double> a = values(dropout(x));
  manual_seed(9);
  CHECK(values(dropout(x)) == a);
}
