// Tests for ops/activation.h: prelu's forward and gradients.
//
// Dims: N batch, C channels.
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

// ---- prelu --------------------------------------------------------------------------------

TEST_CASE("prelu scales the negative part per channel", "[nn_ops][prelu]") {
  for (DType dtype : kDTypes) {
    const Shape shape{2, 3, 4, 2};
    const Tensor x = random_input(shape, dtype, 111);
    const std::vector<double> xv = values(x);
    const Tensor per_channel = random_input({3}, dtype, 112, 0.5);
    const std::vector<double> w = values(per_channel);
    std::vector<double> expected(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      expected[i] = xv[i] > 0 ? xv[i] : w[i / 8 % 3] * xv[i];
    }
    expect_result(prelu(x, per_channel), dtype, shape, expected, "prelu per channel");
    for (const Tensor& single : {full({1}, 0.25, dtype), scalar_tensor(0.25, dtype)}) {
      for (size_t i = 0; i < xv.size(); ++i) expected[i] = xv[i] > 0 ? xv[i] : 0.25 * xv[i];
      expect_result(prelu(x, single), dtype, shape, expected, "prelu one weight");
    }
    // A 1-D input takes a single weight.
    const Tensor v = random_input({7}, dtype, 113);
    std::vector<double> v_expected;
    for (double value : values(v)) v_expected.push_back(value > 0 ? value : 0.25 * value);
    expect_result(prelu(v, full({1}, 0.25, dtype)), dtype, {7}, v_expected, "prelu 1-D");
  }
}
