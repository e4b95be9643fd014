// Factories (factory.h): empty, zeros, ones, full, arange, linspace, tensors from values,
// rand/randn from the Philox generator, and tensors over user memory.
#include "halfgrad/core/factory.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/device_hooks.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/view.h"

namespace hg {

namespace {

DType dtype_for(Scalar value) {
  switch (value.kind()) {
    case Scalar::Kind::Boolean:
      return kBool;
    case Scalar::Kind::Integral:
      return kInt64;
    default:
      return kFloat32;
  }
}

// Writes values[i] = f(i) (a double or an int64) into a new contiguous tensor, rounding
// each value once to the dtype.
template <class F>
Tensor generate(const Shape& sizes, DType dtype, const char* op, F&& f) {
  Tensor out = empty(sizes, dtype);
  visit_dtype(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* data = static_cast<T*>(out.data_ptr());
    for (int64_t i = 0; i < out.numel(); ++i) {
      const auto value = f(i);
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        if constexpr (std::is_floating_point_v<decltype(value)>) {
          HG_CHECK(fits_in_integer<T>(value), "{}: value {} does not fit in {}", op, value,
                   dtype_name(dtype));
        }
      }
      data[i] = cast_value<T>(value);
    }
  });
  return out;
}

}  // namespace

Tensor empty(const Shape& sizes, TensorOptions options) {
  const int64_t numel = shape_numel(sizes);
  const size_t nbytes = size_t(numel) * element_size(options.dtype);
  if (options.pin_memory) {
    HG_CHECK(options.device.is_cpu(),
             "empty: pin_memory applies to CPU tensors (page-locked host memory), got device {}",
             options.device);
    return Tensor(make_pooled<TensorImpl>(make_pinned_storage(nbytes, "empty(pin_memory)"),
                                          options.dtype, sizes, numel));
  }
  return Tensor(
      make_pooled<TensorImpl>(make_storage(nbytes, options.device), options.dtype, sizes, numel));
}

Tensor zeros(const Shape& sizes, TensorOptions options) {
  Tensor out = empty(sizes, options);
  if (out.is_cuda()) return out.fill_(0);
  std::memset(out.data_ptr(), 0, out.nbytes());  // all-zero bits are 0 in every dtype
  return out;
}

Tensor ones(const Shape& sizes, TensorOptions options) { return full(sizes, 1, options); }

Tensor full(const Shape& sizes, Scalar value, std::optional<DType> dtype) {
  return full(sizes, value, {.dtype = dtype.value_or(dtype_for(value))});
}

Tensor full(const Shape& sizes, Scalar value, TensorOptions options) {
  Tensor out = empty(sizes, options);
  out.fill_(value);
  return out;
}

Tensor empty_like(const Tensor& like) { return empty(like.sizes(), like.options()); }
Tensor zeros_like(const Tensor& like) { return zeros(like.sizes(), like.options()); }
Tensor ones_like(const Tensor& like) { return ones(like.sizes(), like.options()); }
Tensor full_like(const Tensor& like, Scalar value) {
  return full(like.sizes(), value, like.options());
}

Tensor scalar_tensor(Scalar value, std::optional<DType> dtype) { return full({}, value, dtype); }

Tensor arange(Scalar end, std::optional<DType> dtype) { return arange(0, end, 1, dtype); }

Tensor arange(Scalar start, Scalar end, Scalar step, std::optional<DType> dtype) {
  const bool integral = !start.is_floating() && !end.is_floating() && !step.is_floating();
  const DType out_dtype = dtype.value_or(integral ? kInt64 : kFloat32);
  const double first = start.to_double(), last = end.to_double(), delta = step.to_double();
  HG_CHECK(std::isfinite(first) && std::isfinite(last) && std::isfinite(delta),
           "arange: expected finite start, end and step, got {}, {}, {}", first, last, delta);
  HG_CHECK(delta != 0.0, "arange: expected a nonzero step, got 0");
  HG_CHECK((delta > 0 && last >= first) || (delta < 0 && last <= first),
           "arange: a step of {} never goes from {} to {}", delta, first, last);
  if (integral) {
    const int64_t a = start.to_int64(), b = end.to_int64(), s = step.to_int64();
    const int64_t length = s > 0 ? (b - a + s - 1) / s : (a - b - s - 1) / -s;
    return generate({length}, out_dtype, "arange", [=](int64_t i) { return a + i * s; });
  }
  const double count = std::ceil((last - first) / delta);
  HG_CHECK(count < 9.0e15, "arange: {} values from {} to {} in steps of {} are too many", count,
           first, last, delta);
  return generate({int64_t(count)}, out_dtype, "arange",
                  [=](int64_t i) { return first + double(i) * delta; });
}

Tensor linspace(double start, double end, int64_t steps, TensorOptions options) {
  HG_CHECK(steps >= 0, "linspace: expected steps >= 0, got {}", steps);
  const double delta = steps > 1 ? (end - start) / double(steps - 1) : 0.0;
  // The first half counts up from start and the second half down from end, so both ends are
  // exact and the error stays symmetric (as PyTorch does).
  const int64_t half = steps / 2;
  return generate({steps}, options.dtype, "linspace",
                  [=](int64_t i) {
                    if (steps == 1) return start;
                    return i < half ? start + delta * double(i)
                                    : end - delta * double(steps - 1 - i);
                  })
      .to(options.device);
}

Tensor eye(int64_t n, std::optional<int64_t> m, TensorOptions options) {
  const int64_t columns = m.value_or(n);
  HG_CHECK(n >= 0 && columns >= 0, "eye: expected non-negative sizes, got n={} m={}", n, columns);
  Tensor out = zeros({n, columns}, options);
  const int64_t diagonal = std::min(n, columns);
  if (diagonal > 0) {
    core::as_strided(out, {diagonal}, {columns + 1}, 0).fill_(1);
  }
  return out;
}

Tensor rand(const Shape& sizes, TensorOptions options, Generator* generator) {
  HG_CHECK(is_floating_point(options.dtype), "rand: expected a floating dtype, got {}",
           options.dtype);
  Tensor out = empty(sizes, options);
  Generator& gen = generator ? *generator : default_generator();
  if (out.is_cuda()) {
    device_hooks(kCUDA)->fill_uniform(out, 0.0, 1.0, gen);
    return out;
  }
  random::fill_uniform(options.dtype, out.data_ptr(), out.numel(), 0.0, 1.0, gen);
  return out;
}

Tensor randn(const Shape& sizes, TensorOptions options, Generator* generator) {
  HG_CHECK(is_floating_point(options.dtype), "randn: expected a floating dtype, got {}",
           options.dtype);
  Tensor out = empty(sizes, options);
  Generator& gen = generator ? *generator : default_generator();
  if (out.is_cuda()) {
    device_hooks(kCUDA)->fill_normal(out, 0.0, 1.0, gen);
    return out;
  }
  random::fill_normal(options.dtype, out.data_ptr(), out.numel(), 0.0, 1.0, gen);
  return out;
}

Tensor rand_like(const Tensor& like, Generator* generator) {
  return rand(like.sizes(), like.options(), generator);
}

Tensor randn_like(const Tensor& like, Generator* generator) {
  return randn(like.sizes(), like.options(), generator);
}

template <class T>
Tensor tensor(const std::vector<T>& values, const Shape& sizes, std::optional<DType> dtype) {
  using Stored = T;
  const DType natural = std::is_same_v<T, double> ? kFloat32 : dtype_of<T>;
  const int64_t numel = shape_numel(sizes);
  HG_CHECK(numel == int64_t(values.size()), "tensor: {} values cannot fill shape {} ({} elements)",
           values.size(), sizes, numel);
  // The values as a tensor of their own type (copied: std::vector<bool> has no data()),
  // then converted once to the dtype asked for.
  Tensor source = empty(sizes, dtype_of<Stored>);
  Stored* data = static_cast<Stored*>(source.data_ptr());
  for (size_t i = 0; i < values.size(); ++i) data[i] = static_cast<Stored>(values[i]);
  return core::to_dtype(source, dtype.value_or(natural));
}

template Tensor tensor(const std::vector<float>&, const Shape&, std::optional<DType>);
template Tensor tensor(const std::vector<double>&, const Shape&, std::optional<DType>);
template Tensor tensor(const std::vector<Half>&, const Shape&, std::optional<DType>);
template Tensor tensor(const std::vector<BFloat16>&, const Shape&, std::optional<DType>);
template Tensor tensor(const std::vector<int64_t>&, const Shape&, std::optional<DType>);
template Tensor tensor(const std::vector<int32_t>&, const Shape&, std::optional<DType>);
template Tensor tensor(const std::vector<bool>&, const Shape&, std::optional<DType>);
template Tensor tensor(const std::vector<uint8_t>&, const Shape&, std::optional<DType>);
template Tensor tensor(const std::vector<int8_t>&, const Shape&, std::optional<DType>);
template Tensor tensor(const std::vector<int16_t>&, const Shape&, std::optional<DType>);

Tensor tensor(std::initializer_list<double> values, std::optional<DType> dtype) {
  return tensor(std::vector<double>(values), dtype);
}

Tensor tensor(std::initializer_list<double> values, const Shape& sizes,
              std::optional<DType> dtype) {
  return tensor(std::vector<double>(values), sizes, dtype);
}

Tensor from_blob(void* data, const Shape& sizes, DType dtype, std::optional<Shape> strides,
                 std::function<void(void*)> deleter) {
  const Shape layout = strides.value_or(contiguous_strides(sizes));
  HG_CHECK(layout.size() == sizes.size(),
           "from_blob: expected as many strides as sizes, got sizes {} and strides {}", sizes,
           layout);
  const int64_t numel = shape_numel(sizes);
  HG_CHECK(numel == 0 || data != nullptr,
           "from_blob: expected a non-null pointer for {} elements, got nullptr", numel);
  int64_t extent = numel == 0 ? 0 : 1;  // elements spanned: last index + 1
  for (size_t d = 0; d < sizes.size() && numel > 0; ++d) {
    HG_CHECK(layout[d] >= 0, "from_blob: expected strides >= 0, got {}", layout);
    extent += (sizes[d] - 1) * layout[d];
  }
  Storage storage =
      wrap_storage(data, size_t(extent) * element_size(dtype), Device(kCPU), std::move(deleter));
  return Tensor(make_pooled<TensorImpl>(std::move(storage), dtype, sizes, layout, 0));
}

}  // namespace hg
