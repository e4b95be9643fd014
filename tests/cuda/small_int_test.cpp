// uint8, int8 and int16 on CUDA: every elementwise kind that takes integers, the comparisons,
// reductions, scans and conversions give the CPU's values (wrapping modulo 2^n the same way).
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;

namespace {

// Values spread over the whole range of dtype, from a seeded generator.
Tensor spread(const Shape& shape, DType dtype) {
  const double low = dtype == kUInt8 ? 0 : dtype == kInt8 ? -128 : -32768;
  const double high = dtype == kUInt8 ? 256 : dtype == kInt8 ? 128 : 32768;
  return floor(add(mul(rand(shape, kFloat64), high - low), low)).to(dtype);
}

void check_same(const Tensor& got, const Tensor& want) {
  REQUIRE(got.is_cuda());
  CHECK(got.dtype() == want.dtype());
  CHECK(got.sizes() == want.sizes());
  CHECK(bit_identical(got.to(kCPU), want));
}

}  // namespace

TEST_CASE("CUDA arithmetic on small integers wraps as the CPU's", "[cuda][dtype]") {
  HG_REQUIRE_CUDA();
  manual_seed(21);
  for (DType dtype : {kUInt8, kInt8, kInt16}) {
    CAPTURE(dtype_name(dtype));
    const Tensor a = spread({33, 65}, dtype), b = spread({33, 65}, dtype);
    // Divisors without zero (an integer divisor of 0 is an error).
    const Tensor d = where(eq(b, 0), ones_like(b), b);
    const Tensor ga = a.to(kCUDA), gb = b.to(kCUDA), gd = d.to(kCUDA);
    check_same(add(ga, gb), add(a, b));
    check_same(sub(ga, gb, 3), sub(a, b, 3));
    check_same(mul(ga, gb), mul(a, b));
    check_same(neg(ga), neg(a));
    check_same(abs(ga), abs(a));
    check_same(sign(ga), sign(a));
    check_same(square(ga), square(a));
    check_same(relu(ga), relu(a));
    check_same(pow(ga, 3), pow(a, 3));
    check_same(maximum(ga, gb), maximum(a, b));
    check_same(minimum(ga, gb), minimum(a, b));
    check_same(floor_divide(ga, gd), floor_divide(a, d));
    check_same(div(ga, gd, "trunc"), div(a, d, "trunc"));
    check_same(remainder(ga, gd), remainder(a, d));
    check_same(fmod(ga, gd), fmod(a, d));
    check_same(clamp(ga, 5, 100), clamp(a, 5, 100));
    check_same(gt(ga, gb), gt(a, b));
    check_same(div(ga, gd), div(a, d));  // true division: float32 on both
    check_same(add(ga, 1), add(a, 1));
    check_same(mul(ga, 0.5), mul(a, 0.5));
    // Reductions into int64, extremes in the dtype, scans.
    check_same(sum(ga, {1}), sum(a, {1}));
    check_same(amax(ga, {0}), amax(a, {0}));
    check_same(amin(ga, {1}), amin(a, {1}));
    check_same(argmax(ga, 1), argmax(a, 1));
    check_same(cumsum(ga, 1), cumsum(a, 1));
    // Conversions to and from every other dtype.
    for (DType to :
         {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64, kInt32, kInt16, kInt8, kUInt8, kBool}) {
      CAPTURE(dtype_name(to));
      check_same(ga.to(to), a.to(to));
    }
  }
  // The promoted dtype of uint8 with int8 is int16 on CUDA too.
  const Tensor u = spread({100}, kUInt8), s = spread({100}, kInt8);
  check_same(add(u.to(kCUDA), s.to(kCUDA)), add(u, s));
}

TEST_CASE("CUDA moves small integers through index and mask ops unchanged", "[cuda][dtype]") {
  HG_REQUIRE_CUDA();
  manual_seed(22);
  for (DType dtype : {kUInt8, kInt8, kInt16}) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = spread({40, 30}, dtype);
    const Tensor gx = x.to(kCUDA);
    const Tensor index = randint(0, 40, {17});
    check_same(index_select(gx, 0, index.to(kCUDA)), index_select(x, 0, index));
    const Tensor mask = gt(rand({40, 30}), 0.5);
    check_same(masked_select(gx, mask.to(kCUDA)), masked_select(x, mask));
    check_same(masked_fill(gx, mask.to(kCUDA), 7), masked_fill(x, mask, 7));
    check_same(gx.t().contiguous(), x.t().contiguous());
    check_same(cat({gx, gx}, 1), cat({x, x}, 1));
    auto [values, indices] = sort(gx, 1);
    auto [want_values, want_indices] = sort(x, 1);
    check_same(values, want_values);
    check_same(indices, want_indices);
  }
}
