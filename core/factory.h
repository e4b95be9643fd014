// Factories: new tensors from sizes, ranges, values, random draws or user memory.
//
//   hg::zeros({2, 3})                           float32 zeros
//   hg::ones({4}, kBFloat16)                    a dtype as the second argument...
//   hg::full({2, 2}, 0.5, {.dtype = kFloat16})  ...or options with designated initializers
//   hg::arange(6)                               int64 0..5 (integer arguments give int64)
//   hg::randn({128, 64})                        N(0, 1) from the Philox generator
//   hg::tensor({1.0, 2.0, 3.0})                 from values (float32 unless a dtype is given)
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg {

class Generator;

Tensor empty(const Shape& sizes, TensorOptions options = {});
Tensor zeros(const Shape& sizes, TensorOptions options = {});
Tensor ones(const Shape& sizes, TensorOptions options = {});
// dtype defaults to the kind of `value`: floating -> float32, integral -> int64, bool -> bool.
Tensor full(const Shape& sizes, Scalar value, std::optional<DType> dtype = std::nullopt);
Tensor full(const Shape& sizes, Scalar value, TensorOptions options);
inline Tensor empty(const Shape& sizes, DType dtype) { return empty(sizes, {.dtype = dtype}); }
inline Tensor zeros(const Shape& sizes, DType dtype) { return zeros(sizes, {.dtype = dtype}); }
inline Tensor ones(const Shape& sizes, DType dtype) { return ones(sizes, {.dtype = dtype}); }

// Same sizes, dtype and device as `like`, contiguous.
Tensor empty_like(const Tensor& like);
Tensor zeros_like(const Tensor& like);
Tensor ones_like(const Tensor& like);
Tensor full_like(const Tensor& like, Scalar value);

// A 0-d tensor holding value.
Tensor scalar_tensor(Scalar value, std::optional<DType> dtype = std::nullopt);

// Values start, start + step, ... below end (above end for a negative step), as Python's
// range. dtype defaults to int64 when every argument is integral, float32 otherwise.
Tensor arange(Scalar end, std::optional<DType> dtype = std::nullopt);
Tensor arange(Scalar start, Scalar end, Scalar step = 1, std::optional<DType> dtype = std::nullopt);
// `steps` values evenly spaced from start to end inclusive.
Tensor linspace(double start, double end, int64_t steps, TensorOptions options = {});
// An n x m matrix with ones on the diagonal (m defaults to n).
Tensor eye(int64_t n, std::optional<int64_t> m = std::nullopt, TensorOptions options = {});

// Uniform on [0, 1) and standard normal draws from `generator` (default: the global one,
// seeded by hg::manual_seed). Floating dtypes only.
Tensor rand(const Shape& sizes, TensorOptions options = {}, Generator* generator = nullptr);
Tensor randn(const Shape& sizes, TensorOptions options = {}, Generator* generator = nullptr);
inline Tensor rand(const Shape& sizes, DType dtype) { return rand(sizes, {.dtype = dtype}); }
inline Tensor randn(const Shape& sizes, DType dtype) { return randn(sizes, {.dtype = dtype}); }
Tensor rand_like(const Tensor& like, Generator* generator = nullptr);
Tensor randn_like(const Tensor& like, Generator* generator = nullptr);

// A tensor holding a copy of `values`, of the given shape (1-D when no shape is given),
// converted to dtype with correct rounding. The dtype defaults to that of the values, except
// that double values give float32 (PyTorch's default dtype for floating literals).
template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& sizes,
              std::optional<DType> dtype = std::nullopt);
template <class T>
Tensor tensor(const std::vector<T>& values, std::optional<DType> dtype = std::nullopt) {
  return tensor(values, Shape{int64_t(values.size())}, dtype);
}
Tensor tensor(std::initializer_list<double> values, std::optional<DType> dtype = std::nullopt);
Tensor tensor(std::initializer_list<double> values, const Shape& sizes,
              std::optional<DType> dtype = std::nullopt);

// A tensor over memory the caller owns (no copy). Strides default to row-major. `deleter`,
// when given, runs once the last tensor using the memory is gone; otherwise the memory must
// outlive every tensor made from it.
Tensor from_blob(void* data, const Shape& sizes, DType dtype,
                 std::optional<Shape> strides = std::nullopt,
                 std::function<void(void*)> deleter = nullptr);

}  // namespace hg
