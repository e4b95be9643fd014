// Shape and indexing kernels (cpu::index_kernels, kernel/index.h; masked_fill and where, from
// cpu::elementwise_kernels) against references written here with plain loops over row-major values,
// for every dtype, contiguous and strided inputs.
//
// Inputs are seeded random tensors, then laid out three ways with the same values:
// contiguous, transposed (last two dims swapped in memory) and stepped (every other row of
// a larger tensor). The references read values with to_vector<double> and compute the result
// in double; accumulating references add in the kernels' compute type (float for the 16-bit
// floats, NOTE [Accumulation of duplicates]), in the order the contributions appear, so every
// comparison is exact.
#include <catch2/catch.hpp>

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

constexpr std::array<DType, 10> kAllDTypes = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt64,
                                              kInt32,   kBool,    kUInt8,    kInt8,    kInt16};

Shape to_shape(const Sizes& sizes) { return Shape(std::span<const int64_t>(sizes)); }


Sizes broadcast(const Sizes& a, const Sizes& b) {
  const size_t n = std::max(a.size(), b.size());
  Sizes out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t sa = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t sb = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[n - 1 - i] = sa == 1 ? sb : sa;
  }
  return out;
}

// A tensor's values in row-major order, with its sizes.
struct Ref {
  Sizes sizes;
  std::vector<double> values;

  // The value at `index` of a tensor broadcast to a larger shape (index has the large rank).
  double at_broadcast(const Sizes& index) const {
    const size_t lead = index.size() - sizes.size();
    Sizes own(sizes.size());
    for (size_t d = 0; d < sizes.size(); ++d) own[d] = sizes[d] == 1 ? 0 : index[lead + d];
    return values[ravel(own, sizes)];
  }
};

Ref read(const Tensor& t) { return {sizes_of(t), t.to_vector<double>()}; }

Tensor build(const Ref& ref, DType dtype) { return tensor(ref.values, to_shape(ref.sizes), dtype); }

// a + b as the kernels accumulate in `dtype` (NOTE [Accumulation of duplicates]): float for
// the 16-bit floats and float32, double for float64, integers for integers, `or` for bool.
double accumulate(double a, double b, DType dtype) {
  switch (dtype) {
    case kFloat64:
      return a + b;
    case kInt64:
    case kInt32:
      return double(int64_t(a) + int64_t(b));
    case kInt16:  // the narrow integers wrap
      return double(int16_t(int64_t(a) + int64_t(b)));
    case kInt8:
      return double(int8_t(int64_t(a) + int64_t(b)));
    case kUInt8:
      return double(uint8_t(int64_t(a) + int64_t(b)));
    case kBool:
      return (a != 0 || b != 0) ? 1.0 : 0.0;
    default:
      return double(float(a) + float(b));
  }
}

// ---- inputs -------------------------------------------------------------------------------------

enum class Layout { Contiguous, Transposed, Stepped };
constexpr std::array<Layout, 3> kLayouts = {Layout::Contiguous, Layout::Transposed,
                                            Layout::Stepped};

// The same values as t, laid out in memory another way (never contiguous when it can be).
Tensor relayout(const Tensor& t, Layout layout) {
  if (layout == Layout::Transposed && t.dim() >= 2) {
    return t.transpose(-1, -2).contiguous().transpose(-1, -2);
  }
  if (layout == Layout::Stepped && t.dim() >= 1) {
    Shape base_sizes = t.sizes();
    base_sizes[0] = 2 * base_sizes[0] + 1;
    Tensor base = full(base_sizes, 3, t.dtype());
    Tensor view = base.slice(0, 1, std::nullopt, 2);
    view.copy_(t);
    return view;
  }
  return t;
}

// Random values every dtype stores: floats in [-4, 4) (rounded to the dtype), integers in
// [-20, 20], bools half true.
Tensor random_tensor(const Sizes& sizes, DType dtype, std::mt19937_64& rng,
                     Layout layout = Layout::Contiguous) {
  std::vector<double> values(size_t(count(sizes)));
  std::uniform_real_distribution<double> real(-4.0, 4.0);
  std::uniform_int_distribution<int> integer(-20, 20);
  for (double& v : values) {
    if (is_floating_point(dtype)) {
      v = real(rng);
    } else if (dtype == kBool) {
      v = integer(rng) > 0;
    } else {
      v = dtype == kUInt8 ? integer(rng) + 20 : integer(rng);
    }
  }
  return relayout(tensor(values, to_shape(sizes), dtype), layout);
}

// Random indices in [low, high) of the given shape and integer dtype.
Tensor random_index(const Sizes& sizes, int64_t low, int64_t high, std::mt19937_64& rng,
                    DType dtype = kInt64, Layout layout = Layout::Contiguous) {
  std::vector<int64_t> values(size_t(count(sizes)));
  std::uniform_int_distribution<int64_t> pick(low, high - 1);
  for (int64_t& v : values) v = pick(rng);
  return relayout(tensor(values, to_shape(sizes), dtype), layout);
}

Sizes random_sizes(std::mt19937_64& rng, int64_t rank, int64_t max_size = 4) {
  std::uniform_int_distribution<int64_t> pick(1, max_size);
  Sizes sizes(static_cast<size_t>(rank));
  for (int64_t& s : sizes) s = pick(rng);
  return sizes;
}

// ---- checks -------------------------------------------------------------------------------------

// got is a new contiguous tensor equal to expected in dtype, shape and every value.
void require_equal(const Tensor& got, const Tensor& expected) {
  REQUIRE(got.dtype() == expected.dtype());
  REQUIRE(sizes_of(got) == sizes_of(expected));
  REQUIRE(got.is_contiguous());
  REQUIRE_FALSE(got.is_view());
  REQUIRE(got.to_vector<double>() == expected.to_vector<double>());
}

// Calling f throws an hg::Error whose message contains every piece of `message`, and leaves
// the values and versions of `inputs` as they were.
void require_error(const std::function<void()>& f, const std::vector<std::string>& message,
                   const std::vector<Tensor>& inputs) {
  std::vector<std::vector<double>> values;
  std::vector<uint64_t> versions;
  for (const Tensor& t : inputs) {
    values.push_back(t.to_vector<double>());
    versions.push_back(t.version());
  }
  std::string what;
  try {
    f();
  } catch (const Error& e) {
    what = e.what();
  }
  INFO("message: " << what);
  REQUIRE_FALSE(what.empty());
  for (const std::string& piece : message) REQUIRE_THAT(what, Contains(piece));
  for (size_t i = 0; i < inputs.size(); ++i) {
    REQUIRE(inputs[i].to_vector<double>() == values[i]);
    REQUIRE(inputs[i].version() == versions[i]);
  }
}

// Runs f with exactly `threads` OpenMP threads, then restores the previous setting.
template <class F>
auto with_threads(int threads, F&& f) {
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  auto result = f();
  omp_set_num_threads(before);
  return result;
}

// ---- references ---------------------------------------------------------------------------------

Ref ref_cat(const std::vector<Ref>& inputs, int64_t dim) {
  Ref out;
  for (const Ref& r : inputs) {
    if (r.sizes == Sizes{0}) continue;
    if (out.sizes.empty()) {
      out.sizes = r.sizes;
      out.sizes[dim] = 0;
    }
    out.sizes[dim] += r.sizes[dim];
  }
  if (out.sizes.empty()) return {{0}, {}};
  out.values.resize(size_t(count(out.sizes)));
  int64_t offset = 0;
  for (const Ref& r : inputs) {
    if (r.sizes == Sizes{0}) continue;
    for (int64_t p = 0; p < count(r.sizes); ++p) {
      Sizes index = unravel(p, r.sizes);
      index[dim] += offset;
      out.values[ravel(index, out.sizes)] = r.values[p];
    }
    offset += r.sizes[dim];
  }
  return out;
}

Ref ref_stack(const std::vector<Ref>& inputs, int64_t dim) {
  Ref out{inputs[0].sizes, {}};
  out.sizes.insert(out.sizes.begin() + dim, int64_t(inputs.size()));
  out.values.resize(size_t(count(out.sizes)));
  for (int64_t p = 0; p < count(out.sizes); ++p) {
    Sizes index = unravel(p, out.sizes);
    const int64_t which = index[dim];
    index.erase(index.begin() + dim);
    out.values[p] = inputs[which].values[ravel(index, inputs[which].sizes)];
  }
  return out;
}

Ref ref_gather(const Ref& x, int64_t dim, const Ref& index) {
  Ref out{index.sizes, std::vector<double>(index.values.size())};
  for (int64_t p = 0; p < count(index.sizes); ++p) {
    Sizes at = unravel(p, index.sizes);
    at[dim] = int64_t(index.values[p]);
    out.values[p] = x.values[ravel(at, x.sizes)];
  }
  return out;
}

Ref ref_scatter_add(const Ref& self, int64_t dim, const Ref& index, const Ref& src, DType dtype) {
  Ref out = self;
  for (int64_t p = 0; p < count(index.sizes); ++p) {
    Sizes at = unravel(p, index.sizes);
    const double value = src.values[ravel(at, src.sizes)];
    at[dim] = int64_t(index.values[p]);
    double& dst = out.values[ravel(at, self.sizes)];
    dst = accumulate(dst, value, dtype);
  }
  return out;
}

Ref ref_index_select(const Ref& x, int64_t dim, const std::vector<double>& index) {
  Ref out{x.sizes, {}};
  out.sizes[dim] = int64_t(index.size());
  out.values.resize(size_t(count(out.sizes)));
  for (int64_t p = 0; p < count(out.sizes); ++p) {
    Sizes at = unravel(p, out.sizes);
    at[dim] = int64_t(index[at[dim]]);
    out.values[p] = x.values[ravel(at, x.sizes)];
  }
  return out;
}

Ref ref_index_add(const Ref& self, int64_t dim, const std::vector<double>& index, const Ref& source,
                  DType dtype) {
  Ref out = self;
  for (int64_t p = 0; p < count(source.sizes); ++p) {
    Sizes at = unravel(p, source.sizes);
    at[dim] = int64_t(index[at[dim]]);
    double& dst = out.values[ravel(at, self.sizes)];
    dst = accumulate(dst, source.values[p], dtype);
  }
  return out;
}

Ref ref_index_put(const Ref& self, const std::vector<Ref>& indices, const Ref& values,
                  bool accumulate_values, DType dtype) {
  Sizes B = indices[0].sizes;
  for (const Ref& i : indices) B = broadcast(B, i.sizes);
  const size_t K = indices.size();
  const Sizes tail(self.sizes.begin() + K, self.sizes.end());
  Sizes indexed = B;
  indexed.insert(indexed.end(), tail.begin(), tail.end());
  Ref out = self;
  for (int64_t m = 0; m < count(B); ++m) {
    const Sizes b = unravel(m, B);
    Sizes head(K);
    for (size_t i = 0; i < K; ++i) {
      const int64_t position = int64_t(indices[i].at_broadcast(b));
      head[i] = position < 0 ? position + self.sizes[i] : position;
    }
    for (int64_t r = 0; r < count(tail); ++r) {
      const Sizes t = unravel(r, tail);
      Sizes at = head, in_indexed = b;
      at.insert(at.end(), t.begin(), t.end());
      in_indexed.insert(in_indexed.end(), t.begin(), t.end());
      const double value = values.at_broadcast(in_indexed);
      double& dst = out.values[ravel(at, self.sizes)];
      dst = accumulate_values ? accumulate(dst, value, dtype) : value;
    }
  }
  return out;
}

}  // namespace

// ---- cat ----------------------------------------------------------------------------------------

TEST_CASE("cat matches the loop reference for every dtype and layout", "[index][cat]") {
  std::mt19937_64 rng(101);
  for (DType dtype : kAllDTypes) {
    for (Layout layout : kLayouts) {
      for (int64_t rank = 1; rank <= 3; ++rank) {
        for (int64_t dim = -rank; dim < rank; ++dim) {
          const int64_t d = dim < 0 ? dim + rank : dim;
          const Sizes shape = random_sizes(rng, rank);
          std::vector<Tensor> inputs;
          std::vector<Ref> refs;
          for (int64_t i = 0; i < 3; ++i) {
            Sizes sizes = shape;
            sizes[d] = i == 1 ? 0 : int64_t(rng() % 4) + 1;  // one input is empty along dim
            inputs.push_back(random_tensor(sizes, dtype, rng, layout));
            refs.push_back(read(inputs.back()));
          }
          // A 1-D tensor of shape [0] is skipped whatever the rank (PyTorch's legacy rule).
          inputs.insert(inputs.begin() + 1, empty({0}, dtype));
          refs.insert(refs.begin() + 1, Ref{{0}, {}});
          CAPTURE(dtype_name(dtype), int(layout), rank, dim);
          require_equal(cpu::index_kernels.cat(inputs, dim), build(ref_cat(refs, d), dtype));
        }
      }
    }
  }
}

TEST_CASE("cat edge cases follow torch", "[index][cat]") {
  std::mt19937_64 rng(102);
  SECTION("a single tensor gives a contiguous copy") {
    const Tensor x = random_tensor({3, 4}, kFloat32, rng, Layout::Transposed);
    const Tensor out = cpu::index_kernels.cat(std::vector<Tensor>{x}, 1);
    require_equal(out, x.contiguous());
    REQUIRE_FALSE(out.shares_storage(x));
  }
  SECTION("only skipped tensors give shape [0]") {
    const std::vector<Tensor> inputs = {empty({0}, kBFloat16), empty({0}, kBFloat16)};
    const Tensor out = cpu::index_kernels.cat(inputs, 0);
    REQUIRE(sizes_of(out) == Sizes{0});
    REQUIRE(out.dtype() == kBFloat16);
  }
  SECTION("empty tensors of higher rank take part") {
    const std::vector<Tensor> inputs = {empty({0, 3}, kInt64), random_tensor({2, 3}, kInt64, rng)};
    require_equal(cpu::index_kernels.cat(inputs, 0), inputs[1]);
    const std::vector<Tensor> wide = {empty({2, 0}, kInt64), empty({2, 0}, kInt64)};
    REQUIRE(sizes_of(cpu::index_kernels.cat(wide, 1)) == Sizes{2, 0});
  }
  SECTION("the output is not the storage of any input") {
    const Tensor base = random_tensor({4, 3}, kFloat64, rng);
    const std::vector<Tensor> halves = {base.narrow(0, 0, 2), base.narrow(0, 2, 2)};
    const Tensor out = cpu::index_kernels.cat(halves, 0);
    require_equal(out, base);
    REQUIRE_FALSE(out.shares_storage(base));
  }
}

TEST_CASE("cat errors name the problem and leave inputs unchanged", "[index][cat][errors]") {
  std::mt19937_64 rng(103);
  const Tensor a = random_tensor({2, 3}, kFloat32, rng);
  const Tensor b = random_tensor({2, 4}, kFloat32, rng);
  const Tensor c = random_tensor({2, 3}, kFloat16, rng);
  const Tensor d = random_tensor({2, 3, 1}, kFloat32, rng);
  const Tensor s = scalar_tensor(1.0);
  require_error([&] { cpu::index_kernels.cat(std::vector<Tensor>{}, 0); },
                {"cat", "non-empty list"}, {});
  require_error(
      [&] {
        cpu::index_kernels.cat(std::vector<Tensor>{a, b}, 0);
      },
      {"cat", "expected size 3 at dim 1", "got size 4 for tensor 1"}, {a, b});
  require_error(
      [&] {
        cpu::index_kernels.cat(std::vector<Tensor>{a, c}, 0);
      },
      {"cat", "dtype float32", "got float16 for tensor 1"}, {a, c});
  require_error(
      [&] {
        cpu::index_kernels.cat(std::vector<Tensor>{a, d}, 0);
      },
      {"cat", "expected tensors of 2 dims", "got 3 dims for tensor 1"}, {a, d});
  require_error(
      [&] {
        cpu::index_kernels.cat(std::vector<Tensor>{a, s}, 0);
      },
      {"cat", "tensor 1 is 0-d"}, {a, s});
  require_error(
      [&] {
        cpu::index_kernels.cat(std::vector<Tensor>{a, a}, 2);
      },
      {"cat", "dim out of range", "got 2"}, {a});
  require_error(
      [&] {
        cpu::index_kernels.cat(std::vector<Tensor>{a, a}, -3);
      },
      {"cat", "dim out of range", "got -3"}, {a});
}

// ---- stack --------------------------------------------------------------------------------------

TEST_CASE("stack matches the loop reference for every dtype and layout", "[index][stack]") {
  std::mt19937_64 rng(201);
  for (DType dtype : kAllDTypes) {
    for (Layout layout : kLayouts) {
      for (int64_t rank = 0; rank <= 3; ++rank) {
        for (int64_t dim = -(rank + 1); dim <= rank; ++dim) {
          const Sizes shape = random_sizes(rng, rank);
          std::vector<Tensor> inputs;
          std::vector<Ref> refs;
          for (int i = 0; i < 3; ++i) {
            inputs.push_back(random_tensor(shape, dtype, rng, layout));
            refs.push_back(read(inputs.back()));
          }
          CAPTURE(dtype_name(dtype), int(layout), rank, dim);
          const int64_t d = dim < 0 ? dim + rank + 1 : dim;
          require_equal(cpu::index_kernels.stack(inputs, dim), build(ref_stack(refs, d), dtype));
        }
      }
    }
  }
  SECTION("empty inputs stack to an empty result") {
    const std::vector<Tensor> inputs = {empty({0, 2}, kFloat32), empty({0, 2}, kFloat32)};
    REQUIRE(sizes_of(cpu::index_kernels.stack(inputs, 1)) == Sizes{0, 2, 2});
  }
}

TEST_CASE("stack errors name the problem and leave inputs unchanged", "[index][stack][errors]") {
  std::mt19937_64 rng(202);
  const Tensor a = random_tensor({2, 3}, kFloat32, rng);
  const Tensor b = random_tensor({3, 2}, kFloat32, rng);
  const Tensor c = random_tensor({2, 3}, kInt64, rng);
  require_error([&] { cpu::index_kernels.stack(std::vector<Tensor>{}, 0); },
                {"stack", "non-empty list"}, {});
  require_error(
      [&] {
        cpu::index_kernels.stack(std::vector<Tensor>{a, b}, 0);
      },
      {"stack", "shape [2, 3]", "got [3, 2] for tensor 1"}, {a, b});
  require_error(
      [&] {
        cpu::index_kernels.stack(std::vector<Tensor>{a, c}, 0);
      },
      {"stack", "dtype float32", "got int64 for tensor 1"}, {a, c});
  require_error(
      [&] {
        cpu::index_kernels.stack(std::vector<Tensor>{a, a}, 3);
      },
      {"stack", "dim out of range", "got 3"}, {a});
  require_error(
      [&] {
        cpu::index_kernels.stack(std::vector<Tensor>{a, a}, -4);
      },
      {"stack", "dim out of range", "got -4"}, {a});
}

// ---- gather, scatter_add ------------------------------------------------------------------------

TEST_CASE("gather matches the loop reference for every dtype and layout", "[index][gather]") {
  std::mt19937_64 rng(301);
  for (DType dtype : kAllDTypes) {
    for (Layout layout : kLayouts) {
      for (int64_t rank = 1; rank <= 3; ++rank) {
        for (int64_t dim = -rank; dim < rank; ++dim) {
          const int64_t d = dim < 0 ? dim + rank : dim;
          const Sizes x_sizes = random_sizes(rng, rank);
          Sizes index_sizes = x_sizes;
          for (int64_t k = 0; k < rank; ++k) {  // at most x's size except along dim
            index_sizes[k] = k == d ? int64_t(rng() % 5) + 1 : int64_t(rng() % x_sizes[k]) + 1;
          }
          const Tensor x = random_tensor(x_sizes, dtype, rng, layout);
          const Tensor index =
              random_index(index_sizes, 0, x_sizes[d], rng, kInt64,
                           layout == Layout::Stepped ? layout : Layout::Transposed);
          CAPTURE(dtype_name(dtype), int(layout), rank, dim);
          require_equal(cpu::index_kernels.gather(x, dim, index),
                        build(ref_gather(read(x), d, read(index)), dtype));
        }
      }
    }
  }
}

TEST_CASE("gather with 0-d and empty operands", "[index][gather]") {
  std::mt19937_64 rng(302);
  const Tensor x = random_tensor({5}, kFloat64, rng);
  const Tensor scalar = tensor(std::vector<int64_t>{3}, Shape{});
  const Tensor picked = cpu::index_kernels.gather(x, 0, scalar);
  REQUIRE(picked.dim() == 0);
  REQUIRE(picked.item<double>() == x.to_vector<double>()[3]);
  // A 0-d input counts as 1-D of size 1.
  const Tensor s = scalar_tensor(2.5, kBFloat16);
  require_equal(cpu::index_kernels.gather(s, -1, zeros({3}, kInt64)), full({3}, 2.5, kBFloat16));
  require_equal(cpu::index_kernels.gather(s, 0, zeros({}, kInt64)), s);
  // An empty index gives an empty result, whatever x holds.
  const Tensor y = random_tensor({2, 3}, kFloat16, rng);
  REQUIRE(sizes_of(cpu::index_kernels.gather(y, 1, empty({2, 0}, kInt64))) == Sizes{2, 0});
  REQUIRE(sizes_of(cpu::index_kernels.gather(y, 0, empty({0, 3}, kInt64))) == Sizes{0, 3});
}

TEST_CASE("gather errors name the problem and leave inputs unchanged", "[index][gather][errors]") {
  std::mt19937_64 rng(303);
  const Tensor x = random_tensor({3, 4}, kFloat32, rng);
  const Tensor too_big = tensor(std::vector<int64_t>{0, 1, 4, 2}, Shape{2, 2});
  const Tensor negative = tensor(std::vector<int64_t>{0, -1}, Shape{1, 2});
  const Tensor floats = tensor({0.0, 1.0}, Shape{1, 2});
  const Tensor int32 = tensor(std::vector<int32_t>{0, 1}, Shape{1, 2});
  const Tensor flat = tensor(std::vector<int64_t>{0, 1});
  const Tensor wide = zeros({1, 5}, kInt64);
  require_error([&] { cpu::index_kernels.gather(x, 1, too_big); },
                {"gather", "index 4 is out of range for dim 1 of size 4"}, {x, too_big});
  require_error([&] { cpu::index_kernels.gather(x, 1, negative); },
                {"gather", "index -1 is out of range for dim 1 of size 4", "negative"},
                {x, negative});
  require_error([&] { cpu::index_kernels.gather(x, 0, floats); },
                {"gather", "int64", "got float32"}, {x, floats});
  require_error([&] { cpu::index_kernels.gather(x, 0, int32); }, {"gather", "int64", "got int32"},
                {x, int32});
  require_error([&] { cpu::index_kernels.gather(x, 0, flat); },
                {"gather", "as many dims as the input (2)", "got 1"}, {x, flat});
  require_error([&] { cpu::index_kernels.gather(x, 0, wide); },
                {"gather", "index.size(1) <= input.size(1) = 4", "got 5"}, {x, wide});
  require_error([&] { cpu::index_kernels.gather(x, 2, too_big); },
                {"gather", "dim out of range", "got 2"}, {x, too_big});
}

TEST_CASE("scatter_add matches the loop reference with duplicate indices", "[index][scatter_add]") {
  std::mt19937_64 rng(401);
  for (DType dtype : kAllDTypes) {
    for (Layout layout : kLayouts) {
      for (int64_t rank = 1; rank <= 3; ++rank) {
        for (int64_t dim = -rank; dim < rank; ++dim) {
          const int64_t d = dim < 0 ? dim + rank : dim;
          const Sizes self_sizes = random_sizes(rng, rank);
          Sizes index_sizes = self_sizes, src_sizes = self_sizes;
          for (int64_t k = 0; k < rank; ++k) {
            // Along dim, more indices than self's size: duplicates are certain.
            index_sizes[k] = k == d ? self_sizes[k] + 3 : int64_t(rng() % self_sizes[k]) + 1;
            src_sizes[k] = index_sizes[k] + int64_t(rng() % 2);  // src may be larger
          }
          const Tensor self = random_tensor(self_sizes, dtype, rng, layout);
          const Tensor index = random_index(index_sizes, 0, self_sizes[d], rng, kInt64, layout);
          const Tensor src = random_tensor(src_sizes, dtype, rng, layout);
          const std::vector<double> before = self.to_vector<double>();
          CAPTURE(dtype_name(dtype), int(layout), rank, dim);
          const Tensor out = cpu::index_kernels.scatter_add(self, dim, index, src);
          require_equal(
              out, build(ref_scatter_add(read(self), d, read(index), read(src), dtype), dtype));
          REQUIRE(self.to_vector<double>() == before);
        }
      }
    }
  }
}

TEST_CASE("scatter_add sums 16-bit duplicates in float32 and rounds once", "[index][scatter_add]") {
  // In float16, 2048 + 1 rounds back to 2048 (a tie, to even). Rounding after every addition
  // would lose all four ones; summing in float32 gives 2052 exactly.
  for (DType dtype : {kFloat16, kBFloat16}) {
    const double big = dtype == kFloat16 ? 2048.0 : 256.0;
    const Tensor self = full({2}, big, dtype);
    const Tensor index = zeros({4}, kInt64);
    const Tensor src = ones({4}, dtype);
    const Tensor out = cpu::index_kernels.scatter_add(self, 0, index, src);
    REQUIRE(out.to_vector<double>() == std::vector<double>{big + 4, big});
    const Tensor added = cpu::index_kernels.index_add(self, 0, index, src);
    REQUIRE(added.to_vector<double>() == std::vector<double>{big + 4, big});
    const std::vector<Tensor> indices = {index};
    const Tensor put = cpu::index_kernels.index_put(self, indices, src, /*accumulate=*/true);
    REQUIRE(put.to_vector<double>() == std::vector<double>{big + 4, big});
  }
}

TEST_CASE("scatter_add with 0-d and empty operands", "[index][scatter_add]") {
  const Tensor s = scalar_tensor(1.5);
  const Tensor out =
      cpu::index_kernels.scatter_add(s, 0, zeros({3}, kInt64), full({3}, 2.0, kFloat32));
  REQUIRE(out.dim() == 0);
  REQUIRE(out.item<double>() == 7.5);
  const Tensor self = ones({2, 3}, kInt64);
  require_equal(
      cpu::index_kernels.scatter_add(self, 1, empty({2, 0}, kInt64), empty({2, 0}, kInt64)), self);
}

TEST_CASE("scatter_add errors name the problem and leave inputs unchanged",
          "[index][scatter_add][errors]") {
  std::mt19937_64 rng(402);
  const Tensor self = random_tensor({3, 4}, kFloat32, rng);
  const Tensor src = random_tensor({3, 4}, kFloat32, rng);
  const Tensor src_half = random_tensor({3, 4}, kFloat16, rng);
  const Tensor too_big = tensor(std::vector<int64_t>{0, 3, 1}, Shape{3, 1});
  const Tensor negative = tensor(std::vector<int64_t>{0, -2, 1}, Shape{1, 3});
  const Tensor floats = zeros({3, 1}, kFloat32);
  const Tensor flat = zeros({3}, kInt64);
  const Tensor wide = zeros({2, 5}, kInt64);
  const Tensor tall = zeros({4, 1}, kInt64);
  const Tensor narrow_src = random_tensor({3, 1}, kFloat32, rng);
  const Tensor index = zeros({3, 2}, kInt64);
  require_error([&] { cpu::index_kernels.scatter_add(self, 0, too_big, src); },
                {"scatter_add", "index 3 is out of range for dim 0 of size 3"},
                {self, too_big, src});
  require_error([&] { cpu::index_kernels.scatter_add(self, 1, negative, src); },
                {"scatter_add", "index -2 is out of range for dim 1 of size 4", "negative"},
                {self, negative, src});
  require_error([&] { cpu::index_kernels.scatter_add(self, 0, floats, src); },
                {"scatter_add", "int64", "got float32"}, {self, floats, src});
  require_error([&] { cpu::index_kernels.scatter_add(self, 0, flat, src); },
                {"scatter_add", "as many dims as self (2)", "got 1"}, {self, flat, src});
  require_error([&] { cpu::index_kernels.scatter_add(self, 0, wide, src); },
                {"scatter_add", "index.size(1) <= src.size(1) = 4", "got 5"}, {self, wide, src});
  require_error(
      [&] {
        cpu::index_kernels.scatter_add(self, 1, tall, random_tensor({4, 4}, kFloat32, rng));
      },
      {"scatter_add", "index.size(0) <= self.size(0) = 3", "got 4"}, {self, tall});
  require_error([&] { cpu::index_kernels.scatter_add(self, 1, index, narrow_src); },
                {"scatter_add", "index.size(1) <= src.size(1) = 1", "got 2"},
                {self, index, narrow_src});
  require_error([&] { cpu::index_kernels.scatter_add(self, 0, index, src_half); },
                {"scatter_add", "src of dtype float32", "got float16"}, {self, index, src_half});
  require_error(
      [&] {
        cpu::index_kernels.scatter_add(self, 0, zeros({3, 2, 1}, kInt64), src);
      },
      {"scatter_add", "as many dims as self (2)", "got 3"}, {self, src});
}

// ---- index_select, index_add --------------------------------------------------------------------

TEST_CASE("index_select matches the loop reference for every dtype and layout",
          "[index][index_select]") {
  std::mt19937_64 rng(501);
  for (DType dtype : kAllDTypes) {
    for (Layout layout : kLayouts) {
      for (DType index_dtype : {kInt64, kInt32}) {
        for (int64_t rank = 1; rank <= 3; ++rank) {
          for (int64_t dim = -rank; dim < rank; ++dim) {
            const int64_t d = dim < 0 ? dim + rank : dim;
            const Sizes x_sizes = random_sizes(rng, rank);
            const Tensor x = random_tensor(x_sizes, dtype, rng, layout);
            const int64_t n = int64_t(rng() % 6);
            const Tensor index = random_index({n}, 0, x_sizes[d], rng, index_dtype, layout);
            CAPTURE(dtype_name(dtype), int(layout), dtype_name(index_dtype), rank, dim, n);
            require_equal(cpu::index_kernels.index_select(x, dim, index),
                          build(ref_index_select(read(x), d, index.to_vector<double>()), dtype));
          }
        }
      }
    }
  }
}

TEST_CASE("index_select with 0-d and large operands", "[index][index_select]") {
  std::mt19937_64 rng(502);
  SECTION("a 0-d index keeps the dim with size 1") {
    const Tensor x = random_tensor({3, 4}, kFloat16, rng);
    const Tensor out =
        cpu::index_kernels.index_select(x, 1, tensor(std::vector<int32_t>{2}, Shape{}));
    require_equal(out, x.narrow(1, 2, 1).contiguous());
  }
  SECTION("a 0-d input takes one index and stays 0-d") {
    const Tensor s = scalar_tensor(int64_t{9});
    const Tensor out = cpu::index_kernels.index_select(s, 0, zeros({1}, kInt64));
    REQUIRE(out.dim() == 0);
    REQUIRE(out.item<int64_t>() == 9);
  }
  SECTION("large inputs on several threads equal the reference") {
    for (Layout layout : {Layout::Contiguous, Layout::Transposed}) {
      const Tensor x = random_tensor({300, 200}, kBFloat16, rng, layout);
      const Tensor index = random_index({500}, 0, 300, rng);
      const Tensor out =
          with_threads(3, [&] { return cpu::index_kernels.index_select(x, 0, index); });
      require_equal(out, build(ref_index_select(read(x), 0, index.to_vector<double>()), kBFloat16));
    }
  }
}

TEST_CASE("index_select errors name the problem and leave inputs unchanged",
          "[index][index_select][errors]") {
  std::mt19937_64 rng(503);
  const Tensor x = random_tensor({3, 4}, kFloat64, rng);
  const Tensor too_big = tensor(std::vector<int64_t>{0, 4});
  const Tensor negative = tensor(std::vector<int32_t>{-1});
  const Tensor floats = tensor({0.0, 1.0});
  const Tensor matrix = zeros({2, 2}, kInt64);
  const Tensor two = zeros({2}, kInt64);
  require_error([&] { cpu::index_kernels.index_select(x, 1, too_big); },
                {"index_select", "index 4 is out of range for dim 1 of size 4"}, {x, too_big});
  require_error([&] { cpu::index_kernels.index_select(x, -2, negative); },
                {"index_select", "index -1 is out of range for dim 0 of size 3", "negative"},
                {x, negative});
  require_error([&] { cpu::index_kernels.index_select(x, 0, floats); },
                {"index_select", "int64 or int32", "got float32"}, {x, floats});
  require_error([&] { cpu::index_kernels.index_select(x, 0, matrix); },
                {"index_select", "1-D or 0-d index", "2-D index of shape [2, 2]"}, {x, matrix});
  require_error([&] { cpu::index_kernels.index_select(scalar_tensor(1.0), 0, two); },
                {"index_select", "exactly one index", "got 2"}, {two});
  require_error([&] { cpu::index_kernels.index_select(x, 2, two); },
                {"index_select", "dim out of range", "got 2"}, {x, two});
}

TEST_CASE("index_add matches the loop reference with duplicate indices", "[index][index_add]") {
  std::mt19937_64 rng(601);
  for (DType dtype : kAllDTypes) {
    for (Layout layout : kLayouts) {
      for (DType index_dtype : {kInt64, kInt32}) {
        for (int64_t rank = 1; rank <= 3; ++rank) {
          for (int64_t dim = -rank; dim < rank; ++dim) {
            const int64_t d = dim < 0 ? dim + rank : dim;
            const Sizes self_sizes = random_sizes(rng, rank);
            const int64_t n = self_sizes[d] + int64_t(rng() % 4);  // duplicates when n > size
            Sizes source_sizes = self_sizes;
            source_sizes[d] = n;
            const Tensor self = random_tensor(self_sizes, dtype, rng, layout);
            const Tensor index = random_index({n}, 0, self_sizes[d], rng, index_dtype, layout);
            const Tensor source = random_tensor(source_sizes, dtype, rng, layout);
            const std::vector<double> before = self.to_vector<double>();
            CAPTURE(dtype_name(dtype), int(layout), dtype_name(index_dtype), rank, dim, n);
            require_equal(
                cpu::index_kernels.index_add(self, dim, index, source),
                build(ref_index_add(read(self), d, index.to_vector<double>(), read(source), dtype),
                      dtype));
            REQUIRE(self.to_vector<double>() == before);
          }
        }
      }
    }
  }
}

TEST_CASE("index_add with 0-d and empty operands", "[index][index_add]") {
  const Tensor s = scalar_tensor(1.0, kFloat64);
  const Tensor out =
      cpu::index_kernels.index_add(s, 0, zeros({}, kInt64), scalar_tensor(2.0, kFloat64));
  REQUIRE(out.dim() == 0);
  REQUIRE(out.item<double>() == 3.0);
  const Tensor self = ones({3, 2}, kFloat32);
  require_equal(cpu::index_kernels.index_add(self, 0, empty({0}, kInt64), empty({0, 2}, kFloat32)),
                self);
}

TEST_CASE("index_add errors name the problem and leave inputs unchanged",
          "[index][index_add][errors]") {
  std::mt19937_64 rng(602);
  const Tensor self = random_tensor({3, 4}, kFloat32, rng);
  const Tensor source = random_tensor({2, 4}, kFloat32, rng);
  const Tensor too_big = tensor(std::vector<int64_t>{1, 3});
  const Tensor negative = tensor(std::vector<int64_t>{-3, 0});
  const Tensor floats = tensor({0.0, 1.0});
  const Tensor three = tensor(std::vector<int64_t>{0, 1, 2});
  const Tensor two = tensor(std::vector<int64_t>{0, 1});
  const Tensor source_wide = random_tensor({2, 5}, kFloat32, rng);
  const Tensor source_half = random_tensor({2, 4}, kFloat16, rng);
  const Tensor source_flat = random_tensor({8}, kFloat32, rng);
  require_error([&] { cpu::index_kernels.index_add(self, 0, too_big, source); },
                {"index_add", "index 3 is out of range for dim 0 of size 3"},
                {self, too_big, source});
  require_error([&] { cpu::index_kernels.index_add(self, 0, negative, source); },
                {"index_add", "index -3 is out of range for dim 0 of size 3", "negative"},
                {self, negative, source});
  require_error([&] { cpu::index_kernels.index_add(self, 0, floats, source); },
                {"index_add", "int64 or int32", "got float32"}, {self, floats, source});
  require_error([&] { cpu::index_kernels.index_add(self, 0, three, source); },
                {"index_add", "source.size(0) == 3", "got 2"}, {self, three, source});
  require_error([&] { cpu::index_kernels.index_add(self, 0, two, source_wide); },
                {"index_add", "source.size(1) == 4", "got 5"}, {self, two, source_wide});
  require_error([&] { cpu::index_kernels.index_add(self, 0, two, source_half); },
                {"index_add", "source of dtype float32", "got float16"}, {self, two, source_half});
  require_error([&] { cpu::index_kernels.index_add(self, 0, two, source_flat); },
                {"index_add", "as many dims as self (2)", "got 1"}, {self, two, source_flat});
  require_error(
      [&] {
        cpu::index_kernels.index_add(self, 0, zeros({2, 1}, kInt64), source);
      },
      {"index_add", "1-D or 0-d index"}, {self, source});
}

// ---- index_put ----------------------------------------------------------------------------------

TEST_CASE("index_put matches the loop reference for every dtype and layout", "[index][index_put]") {
  std::mt19937_64 rng(701);
  for (DType dtype : kAllDTypes) {
    for (Layout layout : kLayouts) {
      for (bool accumulate_values : {false, true}) {
        for (int64_t rank = 1; rank <= 3; ++rank) {
          for (int64_t K = 1; K <= rank; ++K) {
            const Sizes self_sizes = random_sizes(rng, rank);
            const Tensor self = random_tensor(self_sizes, dtype, rng, layout);
            // Indices of length M (more than some dims hold: duplicates), negative values
            // included; with K >= 2 the second index is 0-d and broadcasts.
            const int64_t M = int64_t(rng() % 6) + 1;
            std::vector<Tensor> indices;
            std::vector<Ref> index_refs;
            for (int64_t i = 0; i < K; ++i) {
              const Sizes shape = (i == 1) ? Sizes{} : Sizes{M};
              indices.push_back(random_index(shape, -self_sizes[i], self_sizes[i], rng,
                                             i == 2 ? kInt32 : kInt64, layout));
              index_refs.push_back(read(indices.back()));
            }
            Sizes indexed = {M};
            indexed.insert(indexed.end(), self_sizes.begin() + K, self_sizes.end());
            // values: the full indexed shape, one row broadcast to all, or a single value.
            for (int shape_kind = 0; shape_kind < 3; ++shape_kind) {
              Sizes value_sizes = indexed;
              if (shape_kind == 1) value_sizes.erase(value_sizes.begin());
              if (shape_kind == 2) value_sizes = {};
              const Tensor values = random_tensor(value_sizes, dtype, rng, layout);
              CAPTURE(dtype_name(dtype), int(layout), accumulate_values, rank, K, M, shape_kind);
              const Tensor out =
                  cpu::index_kernels.index_put(self, indices, values, accumulate_values);
              require_equal(out, build(ref_index_put(read(self), index_refs, read(values),
                                                     accumulate_values, dtype),
                                       dtype));
            }
          }
        }
      }
    }
  }
}

TEST_CASE("index_put with duplicates: the last write wins or the writes sum",
          "[index][index_put]") {
  const Tensor self = zeros({3, 2}, kFloat32);
  const std::vector<Tensor> indices = {tensor(std::vector<int64_t>{1, -2, 0, 1})};
  const Tensor values = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0}, Shape{4, 2});
  require_equal(cpu::index_kernels.index_put(self, indices, values, false),
                tensor({5.0, 6.0, 7.0, 8.0, 0.0, 0.0}, Shape{3, 2}));
  require_equal(cpu::index_kernels.index_put(self, indices, values, true),
                tensor({5.0, 6.0, 1.0 + 3.0 + 7.0, 2.0 + 4.0 + 8.0, 0.0, 0.0}, Shape{3, 2}));
  // Two 1-D indices pick elements; 0-d indices pick a single element.
  const Tensor grid = zeros({2, 3}, kInt64);
  const std::vector<Tensor> pairs = {tensor(std::vector<int64_t>{0, 1, 0}),
                                     tensor(std::vector<int64_t>{2, 0, 2})};
  require_equal(
      cpu::index_kernels.index_put(grid, pairs, tensor(std::vector<int64_t>{4, 5, 6}), true),
      tensor(std::vector<int64_t>{0, 0, 10, 5, 0, 0}, Shape{2, 3}));
  const std::vector<Tensor> point = {zeros({}, kInt64), full({}, -1, kInt64)};
  require_equal(cpu::index_kernels.index_put(grid, point, scalar_tensor(int64_t{7}), false),
                tensor(std::vector<int64_t>{0, 0, 7, 0, 0, 0}, Shape{2, 3}));
  // Empty indices change nothing.
  const std::vector<Tensor> none = {empty({0}, kInt64)};
  require_equal(cpu::index_kernels.index_put(self, none, scalar_tensor(1.0), true), self);
}

TEST_CASE("index_put errors name the problem and leave inputs unchanged",
          "[index][index_put][errors]") {
  std::mt19937_64 rng(702);
  const Tensor self = random_tensor({3, 4}, kFloat32, rng);
  const Tensor values = random_tensor({2, 4}, kFloat32, rng);
  const Tensor too_big = tensor(std::vector<int64_t>{0, 3});
  const Tensor too_small = tensor(std::vector<int64_t>{0, -4});
  const Tensor floats = tensor({0.0, 1.0});
  const Tensor mask = tensor(std::vector<bool>{true, false, true});
  const Tensor two = tensor(std::vector<int64_t>{0, 1});
  const Tensor three = tensor(std::vector<int64_t>{0, 1, 2});
  const Tensor values_half = random_tensor({2, 4}, kFloat16, rng);
  const Tensor values_wide = random_tensor({2, 5}, kFloat32, rng);
  const auto put = [&](std::vector<Tensor> indices, const Tensor& v) {
    return cpu::index_kernels.index_put(self, indices, v, true);
  };
  require_error([&] { put({too_big}, values); },
                {"index_put", "index 3 is out of range for dim 0 of size 3"},
                {self, too_big, values});
  require_error([&] { put({too_small}, values); },
                {"index_put", "index -4 is out of range for dim 0 of size 3"},
                {self, too_small, values});
  require_error(
      [&] {
        put({two, tensor(std::vector<int64_t>{1, 4})}, zeros({2}, kFloat32));
      },
      {"index_put", "index 4 is out of range for dim 1 of size 4"}, {self, two});
  require_error([&] { put({floats}, values); }, {"index_put", "int64 or int32", "got float32"},
                {self, floats, values});
  require_error([&] { put({mask}, values); }, {"index_put", "bool mask"}, {self, mask, values});
  require_error(
      [&] {
        put({two, two, two}, values);
      },
      {"index_put", "between 1 and self.dim() = 2", "got 3"}, {self, two, values});
  require_error([&] { put({}, values); }, {"index_put", "got 0"}, {self, values});
  require_error(
      [&] {
        put({two, three}, values);
      },
      {"index_put", "indices 0..0 of shape [2] and index 1 of shape [3]",
       "cannot be broadcast together"},
      {self, two, three});
  require_error([&] { put({two}, values_wide); },
                {"index_put", "values of shape [2, 5]", "indexed shape [2, 4]"},
                {self, two, values_wide});
  require_error([&] { put({two}, values_half); },
                {"index_put", "values of dtype float32", "got float16"}, {self, two, values_half});
}

// ---- one_hot ------------------------------------------------------------------------------------

TEST_CASE("one_hot matches the loop reference", "[index][one_hot]") {
  std::mt19937_64 rng(801);
  for (Layout layout : kLayouts) {
    for (int64_t rank = 0; rank <= 3; ++rank) {
      for (int64_t num_classes : {-1, 1, 3, 7}) {
        const Sizes sizes = random_sizes(rng, rank);
        const int64_t high = num_classes == -1 ? 5 : num_classes;
        const Tensor x = random_index(sizes, 0, high, rng, kInt64, layout);
        const std::vector<double> classes = x.to_vector<double>();
        const int64_t C = num_classes == -1
                              ? int64_t(*std::max_element(classes.begin(), classes.end())) + 1
                              : num_classes;
        Ref expected{sizes, std::vector<double>(size_t(count(sizes) * C), 0.0)};
        expected.sizes.push_back(C);
        for (size_t m = 0; m < classes.size(); ++m) {
          expected.values[m * size_t(C) + size_t(classes[m])] = 1.0;
        }
        CAPTURE(int(layout), rank, num_classes);
        require_equal(cpu::index_kernels.one_hot(x, num_classes), build(expected, kInt64));
      }
    }
  }
  REQUIRE(sizes_of(cpu::index_kernels.one_hot(empty({0, 2}, kInt64), 4)) == Sizes{0, 2, 4});
  REQUIRE(sizes_of(cpu::index_kernels.one_hot(empty({0}, kInt64), 0)) == Sizes{0, 0});
}

TEST_CASE("one_hot errors name the problem and leave inputs unchanged",
          "[index][one_hot][errors]") {
  const Tensor x = tensor(std::vector<int64_t>{0, 3, 1});
  const Tensor negative = tensor(std::vector<int64_t>{0, -1});
  const Tensor floats = tensor({0.0, 1.0});
  require_error([&] { cpu::index_kernels.one_hot(x, 3); },
                {"one_hot", "class index 3 is out of range", "dim 1 of size num_classes = 3"}, {x});
  require_error([&] { cpu::index_kernels.one_hot(negative, -1); },
                {"one_hot", "class index -1 is out of range"}, {negative});
  require_error([&] { cpu::index_kernels.one_hot(floats, 3); }, {"one_hot", "int64", "got float32"},
                {floats});
  require_error([&] { cpu::index_kernels.one_hot(empty({0}, kInt64), -1); },
                {"one_hot", "empty tensor"}, {});
  require_error([&] { cpu::index_kernels.one_hot(x, -2); }, {"one_hot", "num_classes = -2"}, {x});
}

// ---- masked_fill, where -------------------------------------------------------------------------

TEST_CASE("masked_fill matches the loop reference with broadcasting", "[index][masked_fill]") {
  std::mt19937_64 rng(901);
  for (DType dtype : kAllDTypes) {
    for (Layout layout : kLayouts) {
      // (x shape, mask shape): equal, mask broadcast to x, and both broadcast (torch's
      // out-of-place rule).
      const std::vector<std::pair<Sizes, Sizes>> cases = {
          {{3, 4}, {3, 4}}, {{2, 3, 4}, {3, 1}}, {{4}, {3, 1}}, {{}, {2}}, {{2, 3}, {}}};
      for (const auto& [x_sizes, mask_sizes] : cases) {
        const Tensor x = random_tensor(x_sizes, dtype, rng, layout);
        const Tensor mask = random_tensor(mask_sizes, kBool, rng, layout);
        const double fill = dtype == kBool ? 1.0 : dtype == kUInt8 ? 3.0 : -3.0;
        const Scalar value = dtype == kBool ? Scalar(true) : Scalar(int64_t(fill));
        const Ref xr = read(x), mr = read(mask);
        Ref expected{broadcast(x_sizes, mask_sizes), {}};
        for (int64_t p = 0; p < count(expected.sizes); ++p) {
          const Sizes at = unravel(p, expected.sizes);
          expected.values.push_back(mr.at_broadcast(at) != 0 ? fill : xr.at_broadcast(at));
        }
        CAPTURE(dtype_name(dtype), int(layout), x_sizes, mask_sizes);
        require_equal(cpu::elementwise_kernels.masked_fill(x, mask, value), build(expected, dtype));
      }
    }
  }
  SECTION("the value converts as fill_ does") {
    const Tensor mask = tensor(std::vector<bool>{true, false});
    require_equal(cpu::elementwise_kernels.masked_fill(zeros({2}, kInt64), mask, 2.75),
                  tensor(std::vector<int64_t>{2, 0}));
    require_equal(cpu::elementwise_kernels.masked_fill(zeros({2}, kFloat16), mask, 0.1),
                  tensor({0.1, 0.0}, kFloat16));
  }
}

TEST_CASE("masked_fill errors name the problem and leave inputs unchanged",
          "[index][masked_fill][errors]") {
  std::mt19937_64 rng(902);
  const Tensor x = random_tensor({3, 4}, kFloat32, rng);
  const Tensor wrong = random_tensor({3, 3}, kBool, rng);
  const Tensor floats = random_tensor({3, 4}, kFloat32, rng);
  const Tensor mask = random_tensor({3, 4}, kBool, rng);
  const Tensor ints = random_tensor({3, 4}, kInt64, rng);
  require_error([&] { cpu::elementwise_kernels.masked_fill(x, wrong, 1.0); },
                {"masked_fill", "the input of shape [3, 4]", "the mask of shape [3, 3]",
                 "cannot be broadcast"},
                {x, wrong});
  require_error([&] { cpu::elementwise_kernels.masked_fill(x, floats, 1.0); },
                {"masked_fill", "mask of dtype bool", "got float32"}, {x, floats});
  require_error([&] { cpu::elementwise_kernels.masked_fill(ints, mask, std::nan("")); },
                {"masked_fill", "cannot be converted to int64"}, {ints, mask});
}

TEST_CASE("where matches the loop reference with broadcasting", "[index][where]") {
  std::mt19937_64 rng(1001);
  for (DType dtype : kAllDTypes) {
    for (Layout layout : kLayouts) {
      const std::vector<std::array<Sizes, 3>> cases = {{Sizes{3, 4}, Sizes{3, 4}, Sizes{3, 4}},
                                                       {Sizes{3, 1}, Sizes{4}, Sizes{2, 1, 1}},
                                                       {Sizes{}, Sizes{2, 3}, Sizes{}},
                                                       {Sizes{2, 3}, Sizes{}, Sizes{3}},
                                                       {Sizes{0, 3}, Sizes{3}, Sizes{1}}};
      for (const auto& [c_sizes, a_sizes, b_sizes] : cases) {
        const Tensor c = random_tensor(c_sizes, kBool, rng, layout);
        const Tensor a = random_tensor(a_sizes, dtype, rng, layout);
        const Tensor b = random_tensor(b_sizes, dtype, rng, layout);
        const Ref cr = read(c), ar = read(a), br = read(b);
        Ref expected{broadcast(c_sizes, broadcast(a_sizes, b_sizes)), {}};
        for (int64_t p = 0; p < count(expected.sizes); ++p) {
          const Sizes at = unravel(p, expected.sizes);
          expected.values.push_back(cr.at_broadcast(at) != 0 ? ar.at_broadcast(at)
                                                             : br.at_broadcast(at));
        }
        CAPTURE(dtype_name(dtype), int(layout), c_sizes, a_sizes, b_sizes);
        require_equal(cpu::elementwise_kernels.where(c, a, b), build(expected, dtype));
      }
    }
  }
}

TEST_CASE("where errors name the problem and leave inputs unchanged", "[index][where][errors]") {
  std::mt19937_64 rng(1002);
  const Tensor c = random_tensor({3, 4}, kBool, rng);
  const Tensor a = random_tensor({3, 4}, kFloat32, rng);
  const Tensor b = random_tensor({3, 4}, kFloat32, rng);
  const Tensor b_half = random_tensor({3, 4}, kFloat16, rng);
  const Tensor b_wrong = random_tensor({2, 4}, kFloat32, rng);
  const Tensor c_wrong = random_tensor({5, 1}, kBool, rng);
  const Tensor c_float = random_tensor({3, 4}, kFloat32, rng);
  require_error([&] { cpu::elementwise_kernels.where(c_float, a, b); },
                {"where", "condition of dtype bool", "got float32"}, {c_float, a, b});
  require_error([&] { cpu::elementwise_kernels.where(c, a, b_half); },
                {"where", "b of dtype float32", "got float16"}, {c, a, b_half});
  require_error([&] { cpu::elementwise_kernels.where(c, a, b_wrong); },
                {"where", "a of shape [3, 4]", "b of shape [2, 4]"}, {c, a, b_wrong});
  require_error([&] { cpu::elementwise_kernels.where(c_wrong, a, b); },
                {"where", "the condition of shape [5, 1]", "cannot be broadcast"}, {c_wrong, a, b});
}

// ---- threads ------------------------------------------------------------------------------------

TEST_CASE("accumulating kernels give the same bits on any number of threads", "[index][threads]") {
  std::mt19937_64 rng(1101);
  for (DType dtype : {kFloat16, kFloat32, kBFloat16}) {
    CAPTURE(dtype_name(dtype));
    SECTION("index_add " + std::string(dtype_name(dtype))) {
      const Tensor self = random_tensor({64, 600}, dtype, rng);
      const Tensor index = random_index({400}, 0, 64, rng);
      const Tensor source = random_tensor({400, 600}, dtype, rng, Layout::Transposed);
      const auto run = [&] { return cpu::index_kernels.index_add(self, 0, index, source); };
      const Tensor one = with_threads(1, run), three = with_threads(3, run);
      REQUIRE(one.to_vector<double>() == three.to_vector<double>());
      require_equal(
          three, build(ref_index_add(read(self), 0, index.to_vector<double>(), read(source), dtype),
                       dtype));
    }
    SECTION("scatter_add " + std::string(dtype_name(dtype))) {
      const Tensor self = random_tensor({50, 700}, dtype, rng);
      const Tensor index = random_index({120, 700}, 0, 50, rng);
      const Tensor src = random_tensor({120, 700}, dtype, rng);
      const auto run = [&] { return cpu::index_kernels.scatter_add(self, 0, index, src); };
      const Tensor one = with_threads(1, run), three = with_threads(3, run);
      REQUIRE(one.to_vector<double>() == three.to_vector<double>());
      require_equal(three,
                    build(ref_scatter_add(read(self), 0, read(index), read(src), dtype), dtype));
    }
    SECTION("index_put " + std::string(dtype_name(dtype))) {
      const Tensor self = random_tensor({40, 30, 50}, dtype, rng);
      const std::vector<Tensor> indices = {random_index({900}, -40, 40, rng),
                                           random_index({900}, 0, 30, rng)};
      const Tensor values = random_tensor({900, 50}, dtype, rng);
      for (bool accumulate_values : {false, true}) {
        const auto run = [&] {
          return cpu::index_kernels.index_put(self, indices, values, accumulate_values);
        };
        const Tensor one = with_threads(1, run), three = with_threads(3, run);
        REQUIRE(one.to_vector<double>() == three.to_vector<double>());
        require_equal(three, build(ref_index_put(read(self), {read(indices[0]), read(indices[1])},
                                                 read(values), accumulate_values, dtype),
                                   dtype));
      }
    }
  }
}
