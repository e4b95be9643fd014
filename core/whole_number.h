// whole_number: a double read from a file or a state dict (a step count, a tracker, an
// interval) turned into an integer only after checking that the integer type holds it.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

#include "halfgrad/core/error.h"

namespace hg {

// NOTE [Loaded integers] Converting a double outside an integer type's range (1e20, inf, NaN)
// to that type is undefined behaviour (UBSan's float-cast-overflow), and a fractional one is
// silently truncated. Every loaded number that becomes an integer goes through
// checked_whole_number, which checks before it converts: finite, whole, and in [min, max]
// (compared as integers once the value is known to lie in int64's range, so the bounds need not
// be exactly representable as doubles). `what` names the value in the error ("\"step\" of
// parameter 0"), which also gives the value and the allowed range.
inline bool is_whole_number_in(double value, int64_t min, int64_t max) {
  // [-2^63, 2^63) is int64's range in doubles, both bounds exact.
  if (!std::isfinite(value) || std::trunc(value) != value) return false;
  if (!(value >= -0x1p63 && value < 0x1p63)) return false;
  const int64_t whole = static_cast<int64_t>(value);
  return whole >= min && whole <= max;
}

inline int64_t checked_whole_number(double value, int64_t min, int64_t max, std::string_view what) {
  HG_CHECK(is_whole_number_in(value, min, max), "{}: expected a whole number in [{}, {}], got {}",
           what, min, max, value);
  return static_cast<int64_t>(value);
}

}  // namespace hg
