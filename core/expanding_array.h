// ExpandingArray<N>: the sizes of a spatial op's options (kernel, stride, padding, dilation,
// output size), one per spatial dim, as libtorch's ExpandingArray. One number stands for every
// dim; a braced list must give all N.
//
//   nn::Conv2d(1, 32, 3, {.padding = 1});       // padding (1, 1)
//   nn::Conv2d(1, 32, 3, {.padding = {1, 0}});  // padding (1, 0)
//   hg::max_pool2d(x, 2);                       // kernel (2, 2)
//
// NOTE [Expanding sizes] The options held std::array<int64_t, 2>, whose aggregate
// initialisation takes `.padding = 1` as {1, 0} without a warning: a silent difference from
// torch, where one number means every dim. ExpandingArray takes one number for all N dims
// (implicitly, so `= 1` reads as it does in Python), a std::array as it is, and a braced list
// only when it has exactly N values (anything else is an hg::Error naming both counts, never a
// partly filled array). It converts to const std::array<int64_t, N>& wherever one is expected.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "halfgrad/core/error.h"

namespace hg {

template <size_t N>
class ExpandingArray {
 public:
  static_assert(N > 0, "ExpandingArray: at least one dim");

  // Zeros (the value a pooling op's stride takes to mean "the kernel size").
  constexpr ExpandingArray() : values_{} {}
  // One number for every dim.
  constexpr ExpandingArray(int64_t value) {  // NOLINT(google-explicit-constructor): as libtorch
    values_.fill(value);
  }
  // Exactly N numbers, one per dim.
  ExpandingArray(std::initializer_list<int64_t> values) {
    HG_CHECK(values.size() == N,
             "expected {} values (one per spatial dim) or a single number for all of them, got "
             "a list of {}",
             N, values.size());
    size_t i = 0;
    for (int64_t value : values) values_[i++] = value;
  }
  constexpr ExpandingArray(const std::array<int64_t, N>& values)  // NOLINT: as libtorch
      : values_(values) {}

  constexpr operator const std::array<int64_t, N>&() const { return values_; }  // NOLINT
  constexpr const std::array<int64_t, N>& operator*() const { return values_; }
  constexpr const std::array<int64_t, N>* operator->() const { return &values_; }

  constexpr int64_t operator[](size_t i) const { return values_[i]; }
  constexpr int64_t& operator[](size_t i) { return values_[i]; }
  static constexpr size_t size() { return N; }
  constexpr const int64_t* begin() const { return values_.data(); }
  constexpr const int64_t* end() const { return values_.data() + N; }

  friend constexpr bool operator==(const ExpandingArray& a, const ExpandingArray& b) {
    return a.values_ == b.values_;
  }

 private:
  std::array<int64_t, N> values_;
};

}  // namespace hg
