// The CUDA argsort (NOTE [Sorting rows on CUDA]): the same positions as the CPU kernel, bit for
// bit, since both sort the same keys stably; rows long and short, every dtype, NaN and ties.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;

TEST_CASE("CUDA argsort gives the CPU's positions in every dtype", "[cuda][sort]") {
  HG_REQUIRE_CUDA();
  manual_seed(9);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Shape& shape : {Shape{7}, Shape{3, 1000}, Shape{40, 33}, Shape{2, 5000, 3}}) {
    // Rounded values repeat (ties); a few NaN, infinities and zeros of both signs.
    Tensor x = round(mul(randn(shape, kFloat64), 4.0));
    std::vector<double> v = x.to_vector<double>();
    for (size_t i = 0; i < v.size(); i += 17) v[i] = nan;
    for (size_t i = 5; i < v.size(); i += 29) v[i] = -INFINITY;
    for (size_t i = 11; i < v.size(); i += 31) v[i] = -0.0;
    x = tensor(v, shape, kFloat64);
    for (DType dtype :
         {kFloat64, kFloat32, kFloat16, kBFloat16, kInt64, kInt32, kInt16, kInt8, kUInt8}) {
      // uint8 around 128, so that bytes above 127 (negative as int8 bits) sort too.
      const Tensor typed = is_floating_point(dtype) ? x.to(dtype)
                           : dtype == kUInt8        ? add(nan_to_num(x, 0, 9, -9), 128).to(dtype)
                                                    : nan_to_num(x, 0, 9, -9).to(dtype);
      for (int64_t dim : {int64_t(0), int64_t(-1)}) {
        for (bool descending : {false, true}) {
          CAPTURE(shape, dtype, dim, descending);
          const Tensor want = argsort(typed, dim, descending);
          const Tensor got = argsort(typed.to(kCUDA), dim, descending);
          CHECK(got.to(kCPU).to_vector<int64_t>() == want.to_vector<int64_t>());
        }
      }
    }
  }
  // sort and topk on CUDA: values gathered at those positions.
  const Tensor y = randn({6, 50});
  auto [values, indices] = topk(y.to(kCUDA), 5);
  auto [want_values, want_indices] = topk(y, 5);
  CHECK(indices.to(kCPU).to_vector<int64_t>() == want_indices.to_vector<int64_t>());
  CHECK(values.to(kCPU).to_vector<double>() == want_values.to_vector<double>());
}
