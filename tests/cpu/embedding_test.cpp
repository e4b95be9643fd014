// Tests for the CPU embedding kernel (kernel/embedding.h, cpu/embedding.cpp): embedding_backward
// against a float64 reference written here with plain loops and against finite differences.
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

// ---- embedding ----------------------------------------------------------------------------

namespace {

Tensor gather_rows(const Tensor& weight, const std::vector<int64_t>& rows, const Shape& shape) {
  const int64_t D = weight.size(1);
  const std::vector<double> w = values(weight);
  std::vector<double> out;
  for (int64_t row : rows) {
    out.insert(out.end(), w.begin() + row * D, w.begin() + (row + 1) * D);
  }
  Shape out_shape = shape;
  out_shape.push_back(D);
  return tensor(out, out_shape, kFloat64);
}

std::vector<double> embedding_backward_reference(const Tensor& dy, const std::vector<int64_t>& rows,
                                                 int64_t num_embeddings, int64_t padding_idx) {
  const int64_t D = dy.size(-1);
  const std::vector<double> g = values(dy);
  std::vector<double> dw(size_t(num_embeddings * D), 0.0);
  for (size_t t = 0; t < rows.size(); ++t) {
    if (rows[t] == padding_idx) continue;
    for (int64_t j = 0; j < D; ++j) dw[size_t(rows[t] * D + j)] += g[t * size_t(D) + size_t(j)];
  }
  return dw;
}

}  // namespace

TEST_CASE("embedding_backward adds rows of dy into the rows they came from",
          "[nn_kernels][embedding]") {
  const int64_t num_embeddings = 10;
  // Repeats (rows 3 and 7 several times) so additions pile up; row 2 is the padding row.
  const std::vector<int64_t> rows{3, 7, 2, 3, 0, 9, 7, 3, 2, 5, 7, 1};
  const Shape index_shape{3, 4};
  const Tensor indices = tensor(rows, index_shape);
  for (int64_t D : {5, 70}) {
    for (int64_t padding_idx : {-1, 2}) {
      for (DType dtype : kAllDTypes) {
        INFO("D " << D << " padding_idx " << padding_idx << " " << dtype);
        const Tensor dy = random_tensor({3, 4, D}, 4000 + uint64_t(D), dtype);
        const Tensor dw =
            cpu::embedding_kernels.embedding_backward(dy, indices, num_embeddings, padding_idx);
        expect_result(dw, dtype, {num_embeddings, D});
        expect_close(values(dw),
                     embedding_backward_reference(dy, rows, num_embeddings, padding_idx),
                     forward_tolerance(dtype), "dweight");
        if (padding_idx >= 0) {
          for (int64_t j = 0; j < D; ++j) CHECK(values(dw)[size_t(padding_idx * D + j)] == 0.0);
        }
        CHECK(values(cpu::embedding_kernels.embedding_backward(
                  dy, indices.to(kInt32), num_embeddings, padding_idx)) == values(dw));
      }
    }
  }
}

TEST_CASE("embedding_backward matches finite differences of the gather",
          "[nn_kernels][embedding]") {
  const std::vector<int64_t> rows{4, 1, 4, 0, 2, 4};
  const Tensor weight = random_tensor({5, 3}, 4100);
  const Tensor R = random_tensor({2, 3, 3}, 4101);
  check_gradient(
      "weight", weight,
      [&] {
        return gather_rows(weight, rows, {2, 3});
      },
      R, cpu::embedding_kernels.embedding_backward(R, tensor(rows, {2, 3}), 5, -1));
}
