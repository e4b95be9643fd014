// Views: sizes, strides and offsets of views and chains of views, writes through views,
// contiguous() and reshape().
//
// The base tensor holds arange(n) as float64, so every element's value is its own index
// into the storage. A view is then checked against a reference model: a function from the
// view's multi-index to the base index, composed op by op in plain C++ below.
#include <catch2/catch.hpp>

#include <functional>
#include <random>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

using Index = std::vector<int64_t>;

struct RefView {
  std::vector<int64_t> sizes;
  std::function<int64_t(const Index&)> base_index;
};

int64_t count(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Index unravel(int64_t flat, const std::vector<int64_t>& sizes) {
  Index index(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    index[d] = flat % sizes[d];
    flat /= sizes[d];
  }
  return index;
}

int64_t ravel(const Index& index, const std::vector<int64_t>& sizes) {
  int64_t flat = 0;
  for (size_t d = 0; d < sizes.size(); ++d) flat = flat * sizes[d] + index[d];
  return flat;
}

// Every element of `view`, read two ways (the strided copy in to_vector, and raw pointer
// arithmetic with the view's strides), equals the reference's base index.
void check_matches(const Tensor& view, const RefView& ref) {
  REQUIRE(std::vector<int64_t>(view.sizes().begin(), view.sizes().end()) == ref.sizes);
  const std::vector<double> values = view.to_vector<double>();
  const double* data = view.data_ptr<double>();
  for (int64_t flat = 0; flat < count(ref.sizes); ++flat) {
    const Index index = unravel(flat, ref.sizes);
    int64_t offset = 0;
    for (size_t d = 0; d < index.size(); ++d) offset += index[d] * view.strides()[d];
    const double expected = double(ref.base_index(index));
    CAPTURE(flat);
    REQUIRE(values[flat] == expected);
    REQUIRE(data[offset] == expected);
  }
}

}  // namespace

TEST_CASE("random chains of views address the right elements", "[tensor][view]") {
  std::mt19937 rng(1234);
  const auto pick = [&](int64_t n) {
    return int64_t(std::uniform_int_distribution<int64_t>(0, n - 1)(rng));
  };

  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<int64_t> base_sizes = {2 + pick(3), 1 + pick(4), 2 + pick(3)};
    Tensor base =
        arange(count(base_sizes), kFloat64).reshape(Shape(std::span<const int64_t>(base_sizes)));
    Tensor view = base;
    RefView ref{base_sizes, [base_sizes](const Index& i) { return ravel(i, base_sizes); }};

    for (int step = 0; step < 6; ++step) {
      const int64_t ndim = int64_t(ref.sizes.size());
      const auto prev = ref;  // the reference before this op
      switch (pick(8)) {
        case 0: {  // transpose
          if (ndim < 2) break;
          const int64_t a = pick(ndim), b = pick(ndim);
          view = view.transpose(a, b);
          std::swap(ref.sizes[a], ref.sizes[b]);
          ref.base_index = [prev, a, b](Index i) {
            std::swap(i[a], i[b]);
            return prev.base_index(i);
          };
          break;
        }
        case 1: {  // permute (reverse the dims)
          Shape dims;
          for (int64_t d = ndim - 1; d >= 0; --d) dims.push_back(d);
          view = view.permute(dims);
          std::reverse(ref.sizes.begin(), ref.sizes.end());
          ref.base_index = [prev](Index i) {
            std::reverse(i.begin(), i.end());
            return prev.base_index(i);
          };
          break;
        }
        case 2: {  // narrow
          if (ndim == 0) break;
          const int64_t d = pick(ndim);
          if (ref.sizes[d] < 2) break;
          const int64_t start = pick(ref.sizes[d] - 1);
          const int64_t length = 1 + pick(ref.sizes[d] - start);
          view = view.narrow(d, start, length);
          ref.sizes[d] = length;
          ref.base_index = [prev, d, start](Index i) {
            i[d] += start;
            return prev.base_index(i);
          };
          break;
        }
        case 3: {  // slice with a step
          if (ndim == 0) break;
          const int64_t d = pick(ndim);
          const int64_t start = pick(ref.sizes[d]);
          const int64_t stride = 1 + pick(3);
          view = view.slice(d, start, std::nullopt, stride);
          ref.sizes[d] = (ref.sizes[d] - start + stride - 1) / stride;
          ref.base_index = [prev, d, start, stride](Index i) {
            i[d] = start + i[d] * stride;
            return prev.base_index(i);
          };
          break;
        }
        case 4: {  // select
          if (ndim <= 1) break;
          const int64_t d = pick(ndim);
          const int64_t at = pick(ref.sizes[d]);
          view = view.select(d, at);
          ref.sizes.erase(ref.sizes.begin() + d);
          ref.base_index = [prev, d, at](Index i) {
            i.insert(i.begin() + d, at);
            return prev.base_index(i);
          };
          break;
        }
        case 5: {  // unsqueeze, then maybe expand the new dim
          const int64_t d = pick(ndim + 1);
          const int64_t copies = 1 + pick(3);
          view = view.unsqueeze(d);
          Shape target(std::span<const int64_t>(ref.sizes));
          target.insert(d, copies);
          view = view.expand(target);
          ref.sizes.insert(ref.sizes.begin() + d, copies);
          ref.base_index = [prev, d](Index i) {
            i.erase(i.begin() + d);
            return prev.base_index(i);
          };
          break;
        }
        case 6: {  // squeeze a size-1 dim if there is one
          for (int64_t d = 0; d < ndim; ++d) {
            if (ref.sizes[d] != 1) continue;
            view = view.squeeze(d);
            ref.sizes.erase(ref.sizes.begin() + d);
            ref.base_index = [prev, d](Index i) {
              i.insert(i.begin() + d, 0);
              return prev.base_index(i);
            };
            break;
          }
          break;
        }
        default: {  // reshape to (all but last, last) or flatten: a view or a copy
          const int64_t n = count(ref.sizes);
          std::vector<int64_t> sizes =
              ndim >= 2 && pick(2) ? std::vector<int64_t>{n / ref.sizes.back(), ref.sizes.back()}
                                   : std::vector<int64_t>{n};
          if (n == 0) break;
          view = view.reshape(Shape(std::span<const int64_t>(sizes)));
          ref.sizes = sizes;
          ref.base_index = [prev, sizes](const Index& i) {
            return prev.base_index(unravel(ravel(i, sizes), prev.sizes));
          };
          break;
        }
      }
      check_matches(view, ref);
    }
  }
}

TEST_CASE("writing through a view changes the base", "[tensor][view]") {
  Tensor base = zeros({3, 4});
  base.transpose(0, 1).select(0, 2).fill_(7);               // column 2
  base.narrow(0, 1, 1).fill_(5);                            // row 1
  base.slice(1, 0, std::nullopt, 3).select(0, 2).fill_(9);  // row 2, columns 0 and 3
  const std::vector<float> expected = {0, 0, 7, 0,          //
                                       5, 5, 5, 5,          //
                                       9, 0, 7, 9};
  CHECK(base.to_vector<float>() == expected);

  Tensor flat = base.view({12});
  flat.narrow(0, 0, 2).copy_(tensor({-1.0, -2.0}));
  CHECK(base.to_vector<float>()[0] == -1.0f);
  CHECK(base.to_vector<float>()[1] == -2.0f);
  CHECK(flat.shares_storage(base));
  CHECK(flat.is_view());
  CHECK(flat.impl()->view_base() == base.impl_ptr());
  CHECK(base.unsqueeze(0).squeeze(0).unflatten(1, {2, 2}).shares_storage(base));
}

TEST_CASE("views of views record the root as their base", "[tensor][view]") {
  Tensor base = zeros({4, 4});
  Tensor v = base.transpose(0, 1).narrow(0, 1, 2).select(1, 3);
  CHECK(v.impl()->view_base() == base.impl_ptr());
  CHECK_FALSE(base.is_view());
}

TEST_CASE("views share the version counter of their storage", "[tensor][view]") {
  Tensor base = zeros({2, 3});
  Tensor view = base.t();
  const uint64_t before = base.version();
  view.fill_(1);
  CHECK(base.version() == before + 1);
  CHECK(view.version() == base.version());
}

TEST_CASE("contiguous copies non-contiguous tensors and keeps contiguous ones", "[tensor][view]") {
  Tensor base = arange(24, kFloat32).reshape({2, 3, 4});
  CHECK(base.is_contiguous());
  CHECK(base.contiguous().is_same(base));

  Tensor permuted = base.permute({2, 0, 1});
  CHECK_FALSE(permuted.is_contiguous());
  Tensor copy = permuted.contiguous();
  CHECK(copy.is_contiguous());
  CHECK_FALSE(copy.shares_storage(base));
  CHECK(copy.strides() == Shape{6, 3, 1});
  CHECK(copy.to_vector<float>() == permuted.to_vector<float>());
  for (int64_t k = 0; k < 4; ++k) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        CHECK(copy[k][i][j].item<float>() == float(i * 12 + j * 4 + k));
      }
    }
  }
}

TEST_CASE("reshape is a view when the layout allows and a copy otherwise", "[tensor][view]") {
  Tensor base = arange(12, kFloat32).reshape({3, 4});
  Tensor as_view = base.reshape({2, 6});
  CHECK(as_view.shares_storage(base));

  Tensor transposed = base.t();  // [4, 3], strides [1, 4]
  Tensor copied = transposed.reshape({12});
  CHECK_FALSE(copied.shares_storage(base));
  CHECK_FALSE(copied.is_view());
  CHECK(copied.to_vector<float>() == std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  CHECK_THROWS_WITH(transposed.view({12}), Contains("use reshape()"));

  // Merging dims that are contiguous with each other stays a view even inside a
  // non-contiguous tensor.
  Tensor strided = arange(24, kFloat32).reshape({2, 3, 4}).slice(0, 0, std::nullopt, 2);
  CHECK(strided.reshape({12}).shares_storage(strided));
  CHECK(strided.flatten().to_vector<float>() == arange(12, kFloat32).to_vector<float>());
}

TEST_CASE("bad view arguments throw hg::Error naming the values and change nothing",
          "[tensor][view][errors]") {
  Tensor base = arange(6, kFloat32).reshape({2, 3});
  const std::vector<float> before = base.to_vector<float>();
  const uint64_t version = base.version();

  CHECK_THROWS_WITH(base.view({4, 2}),
                    Contains("shape [4, 2] is invalid for a tensor of 6 elements"));
  CHECK_THROWS_WITH(base.reshape({5}),
                    Contains("reshape: shape [5] is invalid for a tensor of 6 elements"));
  CHECK_THROWS_WITH(
      base.transpose(0, 2),
      Contains("transpose: dim out of range (expected in [-2, 1] for a 2-D tensor, got 2)"));
  CHECK_THROWS_WITH(base.select(1, 3),
                    Contains("select: index 3 is out of range for dim 1 of size 3"));
  CHECK_THROWS_WITH(base.select(0, -3), Contains("index -3 is out of range"));
  CHECK_THROWS_WITH(base.narrow(1, 2, 2),
                    Contains("narrow: start 2 + length 2 exceeds dim 1 of size 3"));
  CHECK_THROWS_WITH(base.slice(1, 0, 2, 0), Contains("slice: expected step > 0, got 0"));
  CHECK_THROWS_WITH(base.permute({0, 0}), Contains("permute: dim 0 appears more than once"));
  CHECK_THROWS_WITH(base.permute({0}), Contains("permute: expected 2 dims"));
  CHECK_THROWS_WITH(base.expand({4, 3, 2}), Contains("cannot expand shape [2, 3] to [4, 3, 2]"));
  CHECK_THROWS_WITH(base.expand({3}), Contains("fewer dims"));
  CHECK_THROWS_WITH(base.unsqueeze(4), Contains("unsqueeze: dim out of range"));
  CHECK_THROWS_WITH(base.flatten(1, 0),
                    Contains("flatten: start_dim 1 must not come after end_dim 0"));
  CHECK_THROWS_WITH(base.as_strided({2, 3}, {3, 2}), Contains("the storage holds 6 elements"));
  CHECK_THROWS_WITH(scalar_tensor(1.0).select(0, 0), Contains("got a 0-d tensor"));
  CHECK_THROWS_AS(Tensor().sizes(), hg::Error);

  CHECK(base.to_vector<float>() == before);
  CHECK(base.version() == version);
  CHECK(base.sizes() == Shape{2, 3});
}

TEST_CASE("negative dims and python-style slice bounds", "[tensor][view]") {
  Tensor base = arange(10, kInt64);
  CHECK(base.slice(0, -3).to_vector<int64_t>() == std::vector<int64_t>{7, 8, 9});
  CHECK(base.slice(0, 2, -5).to_vector<int64_t>() == std::vector<int64_t>{2, 3, 4});
  CHECK(base.slice(0, 8, 3).numel() == 0);
  CHECK(base.slice(0, -100, 100, 4).to_vector<int64_t>() == std::vector<int64_t>{0, 4, 8});
  CHECK(base.select(0, -1).item<int64_t>() == 9);
  CHECK(base.narrow(0, -2, 2).to_vector<int64_t>() == std::vector<int64_t>{8, 9});
  CHECK(base.reshape({2, 5}).size(-1) == 5);
  CHECK(base.reshape({2, 5}).stride(-2) == 5);
}
