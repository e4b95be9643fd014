// DType: the element types a tensor can hold, generated from one list.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "halfgrad/core/float8.h"
#include "halfgrad/core/half.h"

namespace hg {

// The one list: C++ type, enum name, printed name. Everything about a dtype derives from it.
// The order is the enum's order and the index of the promotion table in dtype.cpp. The
// float8 dtypes come last and apart, for the visitors that take the others only
// (NOTE [Float8 is conversion only]).
#define HG_FORALL_COMPUTE_DTYPES(_)       \
  _(float, Float32, "float32")            \
  _(::hg::Half, Float16, "float16")       \
  _(::hg::BFloat16, BFloat16, "bfloat16") \
  _(double, Float64, "float64")           \
  _(int64_t, Int64, "int64")              \
  _(int32_t, Int32, "int32")              \
  _(bool, Bool, "bool")                   \
  _(uint8_t, UInt8, "uint8")              \
  _(int8_t, Int8, "int8")                 \
  _(int16_t, Int16, "int16")
#define HG_FORALL_FLOAT8_DTYPES(_)                       \
  _(::hg::Float8_e4m3fn, Float8_e4m3fn, "float8_e4m3fn") \
  _(::hg::Float8_e5m2, Float8_e5m2, "float8_e5m2")
#define HG_FORALL_DTYPES(_)  \
  HG_FORALL_COMPUTE_DTYPES(_) \
  HG_FORALL_FLOAT8_DTYPES(_)

enum class DType : int8_t {
#define HG_DTYPE_ENUM(cpp, name, str) name,
  HG_FORALL_DTYPES(HG_DTYPE_ENUM)
#undef HG_DTYPE_ENUM
};

#define HG_DTYPE_COUNT_ONE(cpp, name, str) +1
inline constexpr int kNumDTypes = 0 HG_FORALL_DTYPES(HG_DTYPE_COUNT_ONE);
#undef HG_DTYPE_COUNT_ONE

inline constexpr DType kFloat32 = DType::Float32;
inline constexpr DType kFloat16 = DType::Float16;
inline constexpr DType kBFloat16 = DType::BFloat16;
inline constexpr DType kFloat64 = DType::Float64;
inline constexpr DType kInt64 = DType::Int64;
inline constexpr DType kInt32 = DType::Int32;
inline constexpr DType kBool = DType::Bool;
inline constexpr DType kUInt8 = DType::UInt8;
inline constexpr DType kInt8 = DType::Int8;
inline constexpr DType kInt16 = DType::Int16;
inline constexpr DType kFloat8_e4m3fn = DType::Float8_e4m3fn;
inline constexpr DType kFloat8_e5m2 = DType::Float8_e5m2;
// libtorch's spellings, for code ported line by line.
inline constexpr DType kFloat = kFloat32;
inline constexpr DType kHalf = kFloat16;
inline constexpr DType kDouble = kFloat64;
inline constexpr DType kLong = kInt64;
inline constexpr DType kInt = kInt32;
inline constexpr DType kShort = kInt16;
inline constexpr DType kChar = kInt8;
inline constexpr DType kByte = kUInt8;

// The printed name: "float32", "bfloat16", ...
std::string_view dtype_name(DType dtype);
// Bytes per element.
constexpr size_t element_size(DType dtype) {
  constexpr size_t kSizes[] = {
#define HG_DTYPE_SIZE(cpp, name, str) sizeof(cpp),
      HG_FORALL_DTYPES(HG_DTYPE_SIZE)
#undef HG_DTYPE_SIZE
  };
  return kSizes[static_cast<int>(dtype)];
}
// True for float32, float16, bfloat16, float64 and the two float8 dtypes.
constexpr bool is_floating_point(DType dtype) {
  constexpr bool kFloating[] = {
#define HG_DTYPE_FLOATING(cpp, name, str) !std::is_integral_v<cpp>,
      HG_FORALL_DTYPES(HG_DTYPE_FLOATING)
#undef HG_DTYPE_FLOATING
  };
  return kFloating[static_cast<int>(dtype)];
}
// True for the 16-bit floating types autocast computes in.
constexpr bool is_reduced_precision(DType dtype) { return dtype == kFloat16 || dtype == kBFloat16; }

// True for float8_e4m3fn and float8_e5m2: storage only (NOTE [Float8 is conversion only]).
constexpr bool is_float8(DType dtype) {
  return dtype == DType::Float8_e4m3fn || dtype == DType::Float8_e5m2;
}

// True for uint8 and bool, the dtypes without negative values.
constexpr bool is_unsigned(DType dtype) { return dtype == DType::UInt8 || dtype == DType::Bool; }

// PyTorch's type promotion for two tensor operands: the smallest dtype that holds both.
// bool < {uint8, int8} < int16 < int32 < int64 < {float16, bfloat16} < float32 < float64,
// uint8 + int8 -> int16 and float16 + bfloat16 -> float32 (neither holds the other).
// A float8 dtype promotes with nothing but itself: any other pair is an hg::Error, as in torch.
DType promote_types(DType a, DType b);

class Generator;

// How to(dtype) rounds a value that falls between two values of a narrower dtype.
enum class Rounding : uint8_t {
  NearestEven,  // to the nearer one, ties to the even one (the IEEE default)
  Stochastic,   // to either, with probabilities that make the mean exact (NOTE [Stochastic
                // rounding] in core/stochastic_rounding.h)
};

// How to(dtype) narrows.
struct CastOptions {
  // Values past a float8 destination's range (inf included) become its largest finite value
  // of their sign, instead of NaN (float8_e4m3fn) or inf (float8_e5m2); NOTE [Float8 formats].
  // Only float8 destinations take it: for any other it is an hg::Error.
  bool saturate = false;
  // Stochastic: floating sources to float16, bfloat16, float8_e4m3fn or float8_e5m2 when the
  // destination cannot hold every source value (an hg::Error otherwise, as for float32).
  Rounding rounding = Rounding::NearestEven;
  // The stochastic rounding's random words (nullptr: default_generator()); unused otherwise.
  Generator* generator = nullptr;
};

// Limits of a floating dtype, like torch.finfo.
struct FInfo {
  int bits;
  double eps;                 // 1.0's ulp: 2^-(mantissa bits)
  double max;                 // largest finite value
  double min;                 // most negative finite value (-max)
  double tiny;                // smallest positive normal
  double smallest_subnormal;  // smallest positive subnormal
};
FInfo finfo(DType dtype);

// ---- C++ type <-> DType -------------------------------------------------------------------

template <class T>
struct DTypeOf;
#define HG_DTYPE_OF(cpp, name, str)             \
  template <>                                   \
  struct DTypeOf<cpp> {                         \
    static constexpr DType value = DType::name; \
  };
HG_FORALL_DTYPES(HG_DTYPE_OF)
#undef HG_DTYPE_OF

template <class T>
inline constexpr DType dtype_of = DTypeOf<std::remove_cv_t<T>>::value;

template <DType D>
struct CppTypeOf;
#define HG_CPP_TYPE_OF(cpp, name, str) \
  template <>                          \
  struct CppTypeOf<DType::name> {      \
    using type = cpp;                  \
  };
HG_FORALL_DTYPES(HG_CPP_TYPE_OF)
#undef HG_CPP_TYPE_OF

template <DType D>
using cpp_type_t = typename CppTypeOf<D>::type;

// A type carried as a value, for generic lambdas:
//   visit_dtype(t.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <class T>
struct TypeTag {
  using type = T;
};

// Throws the hg::Error of visit_floating_dtype (out of line: dtype.h does not format).
[[noreturn]] void throw_not_floating(const char* op, DType dtype);
// Throws "float8_e4m3fn tensors support conversion only; ...": the error of every visitor
// below that meets a float8 dtype.
[[noreturn]] void throw_float8_conversion_only(DType dtype);

// NOTE [Float8 is conversion only] float8_e4m3fn and float8_e5m2 are storage for weights and
// activations that are scaled and widened before anything is computed, so halfgrad (like
// torch) computes nothing in them: a float8 tensor can be converted (to, copy_, clone),
// viewed, printed and saved, and every other op raises "<dtype> tensors support conversion
// only; convert to a wider dtype first". Two checks make that hold without touching each op:
// dispatch refuses float8 inputs to any op but the conversions and views (ops/dispatch.cpp),
// and visit_dtype, which every CPU kernel goes through to pick its element type, visits the
// compute dtypes only and raises the same error for float8. Conversion code visits all dtypes
// with visit_any_dtype. On CUDA, float8 converts to and from float32, float16 and bfloat16
// only (cuda/elementwise.cu), which keeps the number of cast kernels small.

// Calls f(TypeTag<T>{}) with T the C++ type of dtype; float8 dtypes are an hg::Error.
template <class F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
#define HG_VISIT_CASE(cpp, name, str) \
  case DType::name:                   \
    return f(TypeTag<cpp>{});
    HG_FORALL_COMPUTE_DTYPES(HG_VISIT_CASE)
#undef HG_VISIT_CASE
    default:
      throw_float8_conversion_only(dtype);
  }
}

// The same for every dtype, float8 included: for code that only converts or moves elements.
template <class F>
decltype(auto) visit_any_dtype(DType dtype, F&& f) {
  switch (dtype) {
#define HG_VISIT_CASE(cpp, name, str) \
  case DType::name:                   \
    return f(TypeTag<cpp>{});
    HG_FORALL_DTYPES(HG_VISIT_CASE)
#undef HG_VISIT_CASE
  }
  __builtin_unreachable();
}

// Calls f(TypeTag<T>{}) for the four floating dtypes; any other dtype is an hg::Error naming
// `op` and the dtype given.
template <class F>
decltype(auto) visit_floating_dtype(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      return f(TypeTag<float>{});
    case DType::Float16:
      return f(TypeTag<Half>{});
    case DType::BFloat16:
      return f(TypeTag<BFloat16>{});
    case DType::Float64:
      return f(TypeTag<double>{});
    default:
      throw_not_floating(op, dtype);
  }
}

}  // namespace hg
