// DType (dtype.h): names, type promotion between dtypes, and finfo.
#include "halfgrad/core/dtype.h"

#include <array>
#include <cmath>

#include "halfgrad/core/error.h"

namespace hg {

namespace {

constexpr std::array<std::string_view, kNumDTypes> kNames = {
#define HG_DTYPE_NAME(cpp, name, str) str,
    HG_FORALL_DTYPES(HG_DTYPE_NAME)
#undef HG_DTYPE_NAME
};

int index(DType dtype) { return static_cast<int>(dtype); }

}  // namespace

std::string_view dtype_name(DType dtype) { return kNames[index(dtype)]; }

DType promote_types(DType a, DType b) {
  if (is_float8(a) || is_float8(b)) {
    HG_CHECK(a == b,
             "Promotion for Float8 Types is not supported: expected {} with itself, got {} and {}; "
             "convert both to a wider dtype first",
             dtype_name(is_float8(a) ? a : b), dtype_name(a), dtype_name(b));
    return a;
  }
  // NOTE [Type promotion] PyTorch's table (c10's promoteTypes) for halfgrad's dtypes.
  // Read a row for `a` and a column for `b`; the table is symmetric.
  constexpr DType f4 = kFloat32, f2 = kFloat16, bf = kBFloat16, f8 = kFloat64, i8 = kInt64,
                  i4 = kInt32, b1 = kBool, u1 = kUInt8, i1 = kInt8, i2 = kInt16;
#define HG_DTYPE_COUNT_ONE(cpp, name, str) +1
  constexpr int kNumCompute = 0 HG_FORALL_COMPUTE_DTYPES(HG_DTYPE_COUNT_ONE);
#undef HG_DTYPE_COUNT_ONE
  static constexpr DType kTable[kNumCompute][kNumCompute] = {
      //         f4  f2  bf  f8  i8  i4  b1  u1  i1  i2
      /* f4 */ {f4, f4, f4, f8, f4, f4, f4, f4, f4, f4},
      /* f2 */ {f4, f2, f4, f8, f2, f2, f2, f2, f2, f2},
      /* bf */ {f4, f4, bf, f8, bf, bf, bf, bf, bf, bf},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
      /* i8 */ {f4, f2, bf, f8, i8, i8, i8, i8, i8, i8},
      /* i4 */ {f4, f2, bf, f8, i8, i4, i4, i4, i4, i4},
      /* b1 */ {f4, f2, bf, f8, i8, i4, b1, u1, i1, i2},
      /* u1 */ {f4, f2, bf, f8, i8, i4, u1, u1, i2, i2},
      /* i1 */ {f4, f2, bf, f8, i8, i4, i1, i2, i1, i2},
      /* i2 */ {f4, f2, bf, f8, i8, i4, i2, i2, i2, i2},
  };
  return kTable[index(a)][index(b)];
}

void throw_float8_conversion_only(DType dtype) {
  HG_ERROR("{} tensors support conversion only; convert to a wider dtype first (to(float32), "
           "to(float16) or to(bfloat16))",
           dtype_name(dtype));
}

void throw_not_floating(const char* op, DType dtype) {
  if (is_float8(dtype)) {
    HG_ERROR("{}: {} tensors support conversion only; convert to a wider dtype first", op,
             dtype_name(dtype));
  }
  HG_ERROR("{}: expected a floating dtype (float32, float16, bfloat16 or float64), got {}", op,
           dtype_name(dtype));
}

FInfo finfo(DType dtype) {
  HG_CHECK(is_floating_point(dtype), "finfo: expected a floating dtype, got {}", dtype_name(dtype));
  switch (dtype) {
    case kFloat8_e4m3fn:  // S.1111.110 = 1.75 * 2^8; NOTE [Float8 formats] in float8.h
      return {8, 0.125, 448.0, -448.0, std::ldexp(1.0, -6), std::ldexp(1.0, -9)};
    case kFloat8_e5m2:  // S.11110.11 = 1.75 * 2^15
      return {8, 0.25, 57344.0, -57344.0, std::ldexp(1.0, -14), std::ldexp(1.0, -16)};
    case kFloat16:
      return {16,       std::ldexp(1.0, -10), 65504.0,
              -65504.0, std::ldexp(1.0, -14), std::ldexp(1.0, -24)};
    case kBFloat16: {
      const double max = std::ldexp(255.0, 120);  // 0x7F7F = (2 - 2^-7) * 2^127
      return {16, std::ldexp(1.0, -7), max, -max, std::ldexp(1.0, -126), std::ldexp(1.0, -133)};
    }
    case kFloat32:
      return {32,
              std::ldexp(1.0, -23),
              std::numeric_limits<float>::max(),
              -double(std::numeric_limits<float>::max()),
              std::ldexp(1.0, -126),
              std::ldexp(1.0, -149)};
    default:
      return {64,
              std::ldexp(1.0, -52),
              std::numeric_limits<double>::max(),
              -std::numeric_limits<double>::max(),
              std::ldexp(1.0, -1022),
              std::ldexp(1.0, -1074)};
  }
}

}  // namespace hg
