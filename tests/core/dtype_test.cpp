// DType: names, sizes and kinds from the one list, promote_types against PyTorch's rules,
// visit_dtype and finfo.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>

#include "halfgrad/core/dtype.h"
#include "halfgrad/core/format.h"

using namespace hg;

namespace {

constexpr std::array<DType, 10> kAll = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64,
                                        kInt32,   kBool,    kUInt8,    kInt8,    kInt16};

// PyTorch's promotion rules written as rules, independently of the table in dtype.cpp:
// a floating dtype beats any integral one; among floating dtypes the wider wins, and the two
// 16-bit formats meet at float32; two integral dtypes give the narrowest integral dtype whose
// range holds both ranges (so uint8 with int8 is int16).
DType reference_promote(DType a, DType b) {
  const auto floating_rank = [](DType d) {
    return d == kFloat64 ? 3 : d == kFloat32 ? 2 : (d == kFloat16 || d == kBFloat16) ? 1 : 0;
  };
  const int fa = floating_rank(a), fb = floating_rank(b);
  if (fa == 0 && fb == 0) {
    struct Range {
      DType dtype;
      double low, high;
    };
    constexpr std::array<Range, 6> kByWidth = {{{kBool, 0, 1},
                                                {kUInt8, 0, 255},
                                                {kInt8, -128, 127},
                                                {kInt16, -32768, 32767},
                                                {kInt32, -2147483648.0, 2147483647.0},
                                                {kInt64, -9.3e18, 9.3e18}}};
    const auto range = [&](DType d) {
      for (const Range& r : kByWidth) {
        if (r.dtype == d) return r;
      }
      FAIL("not an integral dtype");
      return kByWidth[0];
    };
    const Range ra = range(a), rb = range(b);
    for (const Range& r : kByWidth) {
      if (r.low <= std::min(ra.low, rb.low) && r.high >= std::max(ra.high, rb.high)) {
        return r.dtype;
      }
    }
    return kInt64;
  }
  if (fa != fb) return fa > fb ? a : b;
  if (a == b) return a;
  return kFloat32;  // float16 with bfloat16
}

}  // namespace

TEST_CASE("dtype names and sizes and kinds come from the one list", "[dtype]") {
  CHECK(dtype_name(kFloat32) == "float32");
  CHECK(dtype_name(kFloat16) == "float16");
  CHECK(dtype_name(kBFloat16) == "bfloat16");
  CHECK(dtype_name(kFloat64) == "float64");
  CHECK(dtype_name(kInt64) == "int64");
  CHECK(dtype_name(kInt32) == "int32");
  CHECK(dtype_name(kBool) == "bool");
  CHECK(element_size(kFloat32) == 4);
  CHECK(element_size(kFloat16) == 2);
  CHECK(element_size(kBFloat16) == 2);
  CHECK(element_size(kFloat64) == 8);
  CHECK(element_size(kInt64) == 8);
  CHECK(element_size(kInt32) == 4);
  CHECK(element_size(kBool) == 1);
  CHECK(dtype_name(kUInt8) == "uint8");
  CHECK(dtype_name(kInt8) == "int8");
  CHECK(dtype_name(kInt16) == "int16");
  CHECK(element_size(kUInt8) == 1);
  CHECK(element_size(kInt8) == 1);
  CHECK(element_size(kInt16) == 2);
  CHECK(is_unsigned(kUInt8));
  CHECK(!is_unsigned(kInt8));
  STATIC_REQUIRE(std::is_same_v<cpp_type_t<kUInt8>, uint8_t>);
  STATIC_REQUIRE(std::is_same_v<cpp_type_t<kInt8>, int8_t>);
  STATIC_REQUIRE(std::is_same_v<cpp_type_t<kInt16>, int16_t>);
  CHECK(kByte == kUInt8);
  CHECK(kChar == kInt8);
  CHECK(kShort == kInt16);
  for (DType d : kAll) {
    const bool floating = d == kFloat32 || d == kFloat16 || d == kBFloat16 || d == kFloat64;
    CHECK(is_floating_point(d) == floating);
    CHECK(is_reduced_precision(d) == (d == kFloat16 || d == kBFloat16));
  }
  CHECK(dtype_of<Half> == kFloat16);
  CHECK(dtype_of<const BFloat16> == kBFloat16);
  STATIC_REQUIRE(std::is_same_v<cpp_type_t<kInt32>, int32_t>);
  CHECK(kHalf == kFloat16);
  CHECK(kLong == kInt64);
}

TEST_CASE("promote_types follows PyTorch's rules for every pair", "[dtype]") {
  for (DType a : kAll) {
    for (DType b : kAll) {
      CAPTURE(a, b);
      CHECK(promote_types(a, b) == reference_promote(a, b));
      CHECK(promote_types(a, b) == promote_types(b, a));
    }
  }
  // The cases the design calls out by name.
  CHECK(promote_types(kFloat16, kBFloat16) == kFloat32);
  CHECK(promote_types(kFloat16, kFloat32) == kFloat32);
  CHECK(promote_types(kInt64, kFloat16) == kFloat16);
  CHECK(promote_types(kInt32, kInt64) == kInt64);
  CHECK(promote_types(kBool, kInt32) == kInt32);
  CHECK(promote_types(kBFloat16, kFloat64) == kFloat64);
  // torch.promote_types as PyTorch prints them for the 8- and 16-bit integers.
  CHECK(promote_types(kUInt8, kInt8) == kInt16);
  CHECK(promote_types(kUInt8, kBool) == kUInt8);
  CHECK(promote_types(kInt8, kBool) == kInt8);
  CHECK(promote_types(kUInt8, kInt16) == kInt16);
  CHECK(promote_types(kInt8, kInt32) == kInt32);
  CHECK(promote_types(kUInt8, kFloat16) == kFloat16);
  CHECK(promote_types(kInt16, kBFloat16) == kBFloat16);
  CHECK(promote_types(kInt8, kInt64) == kInt64);
}

TEST_CASE("visit_dtype calls the lambda with the dtype's C++ type", "[dtype]") {
  for (DType d : kAll) {
    const size_t size =
        visit_dtype(d, [](auto tag) { return sizeof(typename decltype(tag)::type); });
    CHECK(size == element_size(d));
  }
}

TEST_CASE("finfo rejects integral dtypes", "[dtype]") {
  CHECK_THROWS_WITH(finfo(kInt32), Catch::Contains("expected a floating dtype, got int32"));
}
