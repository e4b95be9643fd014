// Tests for ops/embedding.h: embedding's rows and gradients, and its bad inputs, which must
// throw naming the op, what was expected and what was given, and leave every input as it was.
//
// Dims: D embedding width.
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

// ---- embedding ----------------------------------------------------------------------------

TEST_CASE("embedding gathers rows and adds gradients back into them", "[nn_ops][embedding]") {
  for (DType dtype : kDTypes) {
    Tensor weight = random_input({6, 4}, dtype, 71).requires_grad_();
    const std::vector<int64_t> rows{5, 0, 2, 5, 3, 2};
    for (DType index_dtype : {kInt64, kInt32}) {
      const Tensor indices = tensor(rows, {2, 3}, index_dtype);
      const Tensor y = embedding(weight, indices);
      std::vector<double> expected;
      const std::vector<double> w = values(weight);
      for (int64_t r : rows) {
        for (int64_t j = 0; j < 4; ++j) expected.push_back(w[size_t(r * 4 + j)]);
      }
      expect_result(y, dtype, {2, 3, 4}, expected, "embedding", Tolerance{0, 0});
    }
    // A 0-d index gives one row.
    const std::vector<double> all_rows = values(weight);
    expect_result(embedding(weight, scalar_tensor(3, kInt64)), dtype, {4},
                  std::vector<double>(all_rows.begin() + 12, all_rows.begin() + 16),
                  "embedding of a 0-d index", Tolerance{0, 0});
    // Backward: each token's gradient row added to its row; padding_idx 2 gets none.
    const Tensor indices = tensor(rows, {2, 3});
    const Tensor r = random_input({2, 3, 4}, dtype, 72);
    sum(mul(embedding(weight, indices, /*padding_idx=*/2), r)).backward();
    std::vector<double> expected(24, 0.0);
    const std::vector<double> rv = values(r);
    for (size_t t = 0; t < rows.size(); ++t) {
      if (rows[t] == 2) continue;
      for (size_t j = 0; j < 4; ++j) expected[size_t(rows[t]) * 4 + j] += rv[t * 4 + j];
    }
    REQUIRE(weight.grad().defined());
    expect_result(weight.grad(), dtype, {6, 4}, expected, "embedding grad");
  }
}

// ---- bad inputs ---------------------------------------------------------------------------

TEST_CASE("embedding rejects bad inputs with messages", "[nn_ops][errors]") {
  const Tensor weight = random_input({5, 3}, kFloat32, 151);
  const Tensor indices = tensor(std::vector<int64_t>{0, 4, 5, 1});
  const Tensor negative = tensor(std::vector<int64_t>{0, -1});
  const Tensor float_indices = tensor({0.0, 1.0});
  const Tensor row = random_input({5}, kFloat32, 152);
  expect_rejected([&] { embedding(weight, indices); }, {weight, indices},
                  {"embedding", "[0, 5)", "got 5 at element 2"});
  expect_rejected([&] { embedding(weight, negative); }, {weight, negative},
                  {"embedding", "[0, 5)", "got -1 at element 1"});
  expect_rejected([&] { embedding(weight, float_indices); }, {weight, float_indices},
                  {"embedding", "int64 or int32", "float32"});
  expect_rejected([&] { embedding(row, tensor(std::vector<int64_t>{0})); }, {row},
                  {"embedding", "2-D weight", "1-D (shape [5])"});
  expect_rejected([&] { embedding(weight, tensor(std::vector<int64_t>{0}), 5); }, {weight},
                  {"embedding", "padding_idx in [-1, 5)", "got 5"});
}
