// DType: names, sizes and kinds from the one list, promote_types against PyTorch's rules,
// visit_dtype and finfo.
#include <catch2/catch.hpp>

#include <array>

#include "halfgrad/core/dtype.h"
#include "halfgrad/core/format.h"

using namespace hg;

namespace {

constexpr std::array<DType, 7> kAll = {kFloat32, kFloat16, kBFloat16, kFloat64,
                                       kInt64,   kInt32,   kBool};

// PyTorch's promotion rules written as rules, independently of the table in dtype.cpp:
// a floating dtype beats any integral one; among floating dtypes the wider wins, and the two
// 16-bit formats meet at float32; among integral dtypes bool < int32 < int64.
DType reference_promote(DType a, DType b) {
  const auto floating_rank = [](DType d) {
    return d == kFloat64 ? 3 : d == kFloat32 ? 2 : (d == kFloat16 || d == kBFloat16) ? 1 : 0;
  };
  const auto integral_rank = [](DType d) { return d == kInt64 ? 2 : d == kInt32 ? 1 : 0; };
  const int fa = floating_rank(a), fb = floating_rank(b);
  if (fa == 0 && fb == 0) return integral_rank(a) >= integral_rank(b) ? a : b;
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
