// float8_e4m3fn and float8_e5m2 on CUDA: conversions to and from float32, float16 and
// bfloat16 in both overflow modes give the CPU's bits (the CPU's are checked against the
// formats' definitions in tests/core/float8_test.cpp); other pairs and arithmetic are refused.
#include <catch2/catch.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Matchers::Contains;

namespace {

constexpr DType kFloat8Dtypes[] = {kFloat8_e4m3fn, kFloat8_e5m2};
constexpr DType kPartners[] = {kFloat32, kFloat16, kBFloat16};

// Every float16 pattern as float32 (each float8 value, its midpoints and the overflow region
// are among them), then seeded normal values scaled over float8's range, on the CPU.
Tensor float_inputs() {
  std::vector<uint16_t> patterns(1 << 16);
  for (uint32_t i = 0; i < patterns.size(); ++i) patterns[i] = uint16_t(i);
  Tensor halves = empty({int64_t(patterns.size())}, kFloat16);
  std::memcpy(halves.data_ptr(), patterns.data(), halves.nbytes());
  manual_seed(8);
  const Tensor scaled = mul(randn({4096}), 300.0);
  return cat({halves.to(kFloat32), scaled});
}

// Every float8 pattern of dtype, on the CPU.
Tensor all_patterns(DType dtype) {
  Tensor out = empty({256}, dtype);
  auto* bytes = static_cast<uint8_t*>(out.data_ptr());
  for (int i = 0; i < 256; ++i) bytes[i] = uint8_t(i);
  return out;
}

}  // namespace

TEST_CASE("cuda float8: narrowing gives the CPU's bits in both modes", "[cuda][float8]") {
  HG_REQUIRE_CUDA();
  const Tensor inputs = float_inputs();
  for (const DType to : kFloat8Dtypes) {
    for (const DType from : kPartners) {
      const Tensor x = inputs.to(from);
      for (const bool saturate : {false, true}) {
        INFO(dtype_name(from) << " -> " << dtype_name(to) << (saturate ? " saturating" : ""));
        const Tensor want = x.to(to, {.saturate = saturate});
        CHECK(bit_identical(host(to_cuda(x).to(to, {.saturate = saturate})), want));
        // A strided source takes the strided loop.
        const Tensor columns = x.slice(0, 0, 4096).reshape({64, 64}).t();
        CHECK(bit_identical(host(to_cuda(columns).to(to, {.saturate = saturate})),
                            columns.to(to, {.saturate = saturate})));
      }
    }
  }
}

TEST_CASE("cuda float8: widening every pattern gives the CPU's bits", "[cuda][float8]") {
  HG_REQUIRE_CUDA();
  for (const DType dtype : kFloat8Dtypes) {
    const Tensor patterns = all_patterns(dtype);
    for (const DType to : kPartners) {
      INFO(dtype_name(dtype) << " -> " << dtype_name(to));
      CHECK(bit_identical(host(to_cuda(patterns).to(to)), patterns.to(to)));
    }
    // Moves, views and same-dtype copies keep the bits.
    const Tensor on_gpu = to_cuda(patterns);
    CHECK(bit_identical(host(on_gpu), patterns));
    CHECK(bit_identical(host(on_gpu.reshape({16, 16}).t().contiguous()),
                        patterns.reshape({16, 16}).t().contiguous()));
    CHECK(bit_identical(host(zeros({5}, {.dtype = dtype, .device = kGpu})), zeros({5}, dtype)));
  }
}

TEST_CASE("cuda float8: other conversions and arithmetic are refused", "[cuda][float8][errors]") {
  HG_REQUIRE_CUDA();
  const Tensor x8 = to_cuda(tensor({1.0, 2.0})).to(kFloat8_e4m3fn);
  CHECK_THROWS_WITH(x8.to(kFloat64), Contains("float32, float16 and bfloat16 only") &&
                                         Contains("float8_e4m3fn to float64"));
  CHECK_THROWS_WITH(x8.to(kFloat8_e5m2), Contains("float32, float16 and bfloat16 only"));
  CHECK_THROWS_WITH(to_cuda(tensor(std::vector<int32_t>{1})).to(kFloat8_e5m2),
                    Contains("float32, float16 and bfloat16 only"));
  CHECK_THROWS_WITH(add(x8, x8), Contains("float8_e4m3fn tensors support conversion only"));
  CHECK(values_of(x8) == std::vector<double>{1.0, 2.0});
}
