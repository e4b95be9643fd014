// A Scalar stored as one element of a tensor's type, checked: the one conversion fill_, full,
// masked_fill and the ops' number operands share.
#pragma once

#include <type_traits>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/scalar.h"

namespace hg {

// `value` as an element of type T. A floating value stored in an integer type must fit after
// truncation (fits_in_integer), an integral one must fit the type (integer_fits: uint8 also
// takes [-255, -1], wrapping); otherwise an hg::Error naming `op`, the value and the dtype.
// Floating types round once, to nearest even; bool takes value != 0.
template <class T>
T scalar_value_as(Scalar value, const char* op) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (value.is_floating()) {
      HG_CHECK(fits_in_integer<T>(value.to_double()), "{}: value {} cannot be converted to {}", op,
               value.to_double(), dtype_name(dtype_of<T>));
    } else {
      HG_CHECK(value.is_boolean() || integer_fits<T>(value.to_int64()),
               "{}: value {} cannot be converted to {} without overflow", op, value.to_int64(),
               dtype_name(dtype_of<T>));
    }
  }
  if (value.is_floating()) return cast_value<T>(value.to_double());
  return cast_value<T>(value.to_int64());
}

}  // namespace hg
