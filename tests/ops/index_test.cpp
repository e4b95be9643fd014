// Indexing and shape ops (halfgrad/ops/index.h): forwards in float32, float16 and bfloat16
// against float64 references computed here with plain loops on the (already rounded) inputs,
// gradients where the gradcheck sweep cannot reach (max / min along a dim, second
// derivatives, dtypes of gradients), and bad inputs (an hg::Error naming the op, what was
// expected and what was given; the inputs left unchanged).
//
// Tolerances: where, masked_fill, cat, stack, split, chunk, gather, index_select, index_put
// without accumulate, one_hot and max / min only move elements, so they must match the
// reference exactly. scatter_add, index_add and index_put with accumulate sum in float32 and
// round once (NOTE [Accumulation of duplicates] in kernel/index.h); they are held to
// tolerance(dtype) relative to the sum of the magnitudes added into an element (the scale of
// the rounding error of a sum, whatever cancellation leaves of the result).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

constexpr std::array<DType, 3> kFloatDTypes = {kFloat32, kFloat16, kBFloat16};

double tolerance(DType dtype) { return rounding_tolerance(dtype); }



// A tensor's values in row-major order with its sizes: what references read.
struct Ref {
  Sizes sizes;
  std::vector<double> values;
  double at(const Sizes& index) const { return values[ravel(index, sizes)]; }
  // The value at `index` of this tensor broadcast to a shape of index.size() dims.
  double at_broadcast(const Sizes& index) const {
    const size_t lead = index.size() - sizes.size();
    Sizes own(sizes.size());
    for (size_t d = 0; d < sizes.size(); ++d) own[d] = sizes[d] == 1 ? 0 : index[lead + d];
    return at(own);
  }
};

Ref read(const Tensor& t) { return {sizes_of(t), t.to_vector<double>()}; }

// Seeded inputs: normal draws in `dtype` (rounded by the factory), never all zeros.
Tensor normal(const Shape& sizes, DType dtype, uint64_t seed) {
  manual_seed(seed);
  return randn(sizes, dtype);
}

// Seeded int64 indices uniform in [low, high).
Tensor random_index(const Shape& sizes, int64_t low, int64_t high, uint64_t seed) {
  manual_seed(seed);
  const Tensor u = rand(sizes, kFloat64);
  return add(mul(u, double(high - low)), double(low)).to(kInt64);
}

Tensor ints(const std::vector<int64_t>& values, const Shape& sizes) {
  return tensor(values, sizes, kInt64);
}

Tensor bools(const std::vector<int64_t>& values, const Shape& sizes) {
  return tensor(values, sizes, kBool);
}

void check_exact(const Tensor& got, const Sizes& sizes, DType dtype,
                 const std::vector<double>& expected) {
  REQUIRE(sizes_of(got) == sizes);
  REQUIRE(got.dtype() == dtype);
  const std::vector<double> values = got.to_vector<double>();
  REQUIRE(values.size() == expected.size());
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i);
    CHECK(values[i] == expected[i]);
  }
}

// Each element within tolerance(dtype) * scale[i] of expected[i].
void check_close(const Tensor& got, const Sizes& sizes, DType dtype,
                 const std::vector<double>& expected, const std::vector<double>& scale) {
  REQUIRE(sizes_of(got) == sizes);
  REQUIRE(got.dtype() == dtype);
  const std::vector<double> values = got.to_vector<double>();
  REQUIRE(values.size() == expected.size());
  for (size_t i = 0; i < values.size(); ++i) {
    INFO("element " << i << ": got " << values[i] << ", expected " << expected[i]);
    CHECK(std::abs(values[i] - expected[i]) <= tolerance(dtype) * std::max(scale[i], 1e-30));
  }
}

// Values and version of tensors, to check that a failed call left them as they were.
struct Snapshot {
  std::vector<Tensor> tensors;
  std::vector<std::vector<double>> values;
  std::vector<uint64_t> versions;
  explicit Snapshot(std::vector<Tensor> ts) : tensors(std::move(ts)) {
    for (const Tensor& t : tensors) {
      values.push_back(t.to_vector<double>());
      versions.push_back(t.version());
    }
  }
  void check_unchanged() const {
    for (size_t i = 0; i < tensors.size(); ++i) {
      INFO("input " << i);
      CHECK(tensors[i].version() == versions[i]);
      const std::vector<double> now = tensors[i].to_vector<double>();
      REQUIRE(now.size() == values[i].size());
      for (size_t k = 0; k < now.size(); ++k) {
        const bool same =
            now[k] == values[i][k] || (std::isnan(now[k]) && std::isnan(values[i][k]));
        CHECK(same);
      }
    }
  }
};

// Runs f, expects an hg::Error whose message contains every fragment, then checks the inputs.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& fragments,
                  const Snapshot& inputs) {
  try {
    f();
    FAIL("expected an hg::Error");
  } catch (const Error& e) {
    const std::string message = e.what();
    INFO("message: " << message);
    for (const std::string& fragment : fragments) CHECK_THAT(message, Contains(fragment));
  }
  inputs.check_unchanged();
}

// ---- where --------------------------------------------------------------------------------------

TEST_CASE("where picks elementwise over the broadcast shape", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor condition = lt(normal({2, 1, 4}, kFloat32, 1), 0.0);
    const Tensor a = normal({3, 4}, dtype, 2), b = normal({2, 3, 1}, dtype, 3);
    const Ref c = read(condition), ra = read(a), rb = read(b);
    const Sizes out_sizes{2, 3, 4};
    std::vector<double> expected;
    for (int64_t i = 0; i < count(out_sizes); ++i) {
      const Sizes p = unravel(i, out_sizes);
      expected.push_back(c.at_broadcast(p) != 0 ? ra.at_broadcast(p) : rb.at_broadcast(p));
    }
    check_exact(where(condition, a, b), out_sizes, dtype, expected);
    // A number does not promote the tensor.
    std::vector<double> with_zero;
    for (int64_t i = 0; i < count(out_sizes); ++i) {
      const Sizes p = unravel(i, out_sizes);
      with_zero.push_back(c.at_broadcast(p) != 0 ? ra.at_broadcast(p) : 0.0);
    }
    check_exact(where(condition, a, 0.0), out_sizes, dtype, with_zero);
  }
}

TEST_CASE("where promotes its operands and returns gradients in their dtypes", "[ops][index]") {
  const Tensor condition = bools({1, 0, 1, 0, 0, 1}, {2, 3});
  Tensor a = normal({2, 3}, kFloat16, 4).requires_grad_();
  Tensor b = normal({3}, kBFloat16, 5).requires_grad_();
  const Tensor out = where(condition, a, b);
  CHECK(out.dtype() == kFloat32);  // float16 with bfloat16
  const Ref ra = read(a), rb = read(b);
  const std::vector<double> picked = out.to_vector<double>();
  const std::vector<int64_t> mask{1, 0, 1, 0, 0, 1};
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(picked[i] == (mask[i] ? ra.values[i] : rb.values[i % 3]));
  }
  sum(mul(out, 2.0)).backward();
  REQUIRE(a.grad().dtype() == kFloat16);
  REQUIRE(b.grad().dtype() == kBFloat16);
  CHECK(a.grad().to_vector<double>() == std::vector<double>{2, 0, 2, 0, 0, 2});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{2, 4, 0});
}

TEST_CASE("where rejects bad inputs", "[ops][index][errors]") {
  const Tensor a = normal({2, 3}, kFloat32, 6), b = normal({2, 3}, kFloat32, 7);
  const Tensor condition = bools({1, 0, 1, 0, 0, 1}, {2, 3});
  const Snapshot inputs({a, b, condition});
  expect_error([&] { where(a, a, b); }, {"where", "bool", "float32"}, inputs);
  expect_error([&] { where(condition, a, normal({4}, kFloat32, 8)); },
               {"where", "[2, 3]", "[4]", "cannot be broadcast"}, inputs);
  expect_error(
      [&] {
        where(bools({1, 0}, {2}), a, b);
      },
      {"where", "condition", "[2]", "[2, 3]", "cannot be broadcast"}, inputs);
}

// ---- masked_fill --------------------------------------------------------------------------------

TEST_CASE("masked_fill writes the value where the mask is set", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = normal({3, 1}, dtype, 10);
    const Tensor mask = gt(normal({3, 4}, kFloat32, 11), 0.0);
    const double value = scalar_tensor(0.37, dtype).item<double>();  // 0.37 rounded to dtype
    const Ref rx = read(x), rm = read(mask);
    const Sizes out_sizes{3, 4};
    std::vector<double> expected;
    for (int64_t i = 0; i < 12; ++i) {
      const Sizes p = unravel(i, out_sizes);
      expected.push_back(rm.at(p) != 0 ? value : rx.at_broadcast(p));
    }
    check_exact(masked_fill(x, mask, 0.37), out_sizes, dtype, expected);
    // The 0-d tensor form converts the value to x's dtype.
    check_exact(masked_fill(x, mask, scalar_tensor(0.37, kFloat64)), out_sizes, dtype, expected);
  }
}

TEST_CASE("masked_fill gradients skip the filled positions", "[ops][index]") {
  Tensor x = normal({2, 3}, kFloat16, 12).requires_grad_();
  Tensor value = scalar_tensor(1.5, kFloat32).requires_grad_();
  const Tensor mask = bools({0, 1, 1}, {3});
  sum(masked_fill(x, mask, 0.0)).backward();
  REQUIRE(x.grad().dtype() == kFloat16);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 0, 0, 1, 0, 0});
  const Tensor out = masked_fill(x.detach(), mask, value);
  CHECK(out.dtype() == kFloat16);
  sum(out).backward();
  REQUIRE(value.grad().dtype() == kFloat32);
  CHECK(value.grad().item<double>() == 4.0);
}

TEST_CASE("masked_fill rejects bad inputs", "[ops][index][errors]") {
  const Tensor x = normal({3, 4}, kFloat32, 13);
  const Tensor mask = bools({1, 0, 1, 0}, {4});
  const Snapshot inputs({x, mask});
  expect_error([&] { masked_fill(x, x, 1.0); }, {"masked_fill", "bool", "float32"}, inputs);
  expect_error(
      [&] {
        masked_fill(x, bools({1, 0, 1, 0, 1}, {5}), 1.0);
      },
      {"masked_fill", "[3, 4]", "[5]", "cannot be broadcast"}, inputs);
  expect_error(
      [&] {
        masked_fill(x, mask, tensor({1.0, 2.0}));
      },
      {"masked_fill", "0-d value", "1-D", "[2]"}, inputs);
  expect_error(
      [&] {
        masked_fill(ints({1, 2, 3, 4}, {4}), mask, 1e30);
      },
      {"masked_fill", "1e+30", "int64"}, inputs);
}

// ---- cat / stack --------------------------------------------------------------------------------

// The reference concatenation of refs along dim (all of one rank).
std::vector<double> cat_reference(const std::vector<Ref>& refs, int64_t dim, Sizes& out_sizes) {
  out_sizes = refs[0].sizes;
  out_sizes[dim] = 0;
  for (const Ref& r : refs) out_sizes[dim] += r.sizes[dim];
  std::vector<double> out;
  for (int64_t i = 0; i < count(out_sizes); ++i) {
    Sizes p = unravel(i, out_sizes);
    size_t which = 0;
    while (p[dim] >= refs[which].sizes[dim]) p[dim] -= refs[which++].sizes[dim];
    out.push_back(refs[which].at(p));
  }
  return out;
}

TEST_CASE("cat concatenates along any dim", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor a = normal({2, 3, 2}, dtype, 20), b = normal({2, 1, 2}, dtype, 21),
                 c = normal({2, 4, 2}, dtype, 22);
    Sizes out_sizes;
    const std::vector<double> expected = cat_reference({read(a), read(b), read(c)}, 1, out_sizes);
    check_exact(cat({a, b, c}, 1), out_sizes, dtype, expected);
    check_exact(cat({a, b, c}, -2), out_sizes, dtype, expected);
    // A strided input, and PyTorch's legacy skip of 1-D empty tensors.
    const Tensor t = normal({3, 2}, dtype, 23).t();
    const std::vector<double> rows = cat_reference({read(t), read(t)}, 0, out_sizes);
    const std::vector<Tensor> list{t, empty({0}, dtype), t};
    check_exact(cat(list, 0), out_sizes, dtype, rows);
  }
}

TEST_CASE("cat and stack promote dtypes and return each input's gradient in its dtype",
          "[ops][index]") {
  Tensor a = normal({2, 2}, kFloat16, 24).requires_grad_();
  Tensor b = normal({1, 2}, kBFloat16, 25).requires_grad_();
  const Tensor c = ints({7, 8}, {1, 2});
  const Tensor joined = cat({a, b, c}, 0);
  REQUIRE(joined.dtype() == kFloat32);
  Sizes out_sizes;
  check_exact(joined, {4, 2}, kFloat32, cat_reference({read(a), read(b), read(c)}, 0, out_sizes));
  const Tensor weights = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0}, {4, 2});
  sum(mul(joined, weights)).backward();
  REQUIRE(a.grad().dtype() == kFloat16);
  REQUIRE(b.grad().dtype() == kBFloat16);
  CHECK(a.grad().to_vector<double>() == std::vector<double>{1, 2, 3, 4});
  CHECK(b.grad().to_vector<double>() == std::vector<double>{5, 6});

  Tensor x = normal({3}, kBFloat16, 26).requires_grad_();
  Tensor y = normal({3}, kFloat32, 27).requires_grad_();
  const Tensor stacked = stack({x, y}, 1);  // [3, 2]
  REQUIRE(stacked.dtype() == kFloat32);
  sum(mul(stacked, tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {3, 2}))).backward();
  REQUIRE(x.grad().dtype() == kBFloat16);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 3, 5});
  CHECK(y.grad().to_vector<double>() == std::vector<double>{2, 4, 6});
}

TEST_CASE("stack joins along a new dim", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor a = normal({2, 3}, dtype, 30), b = normal({2, 3}, dtype, 31);
    const Ref ra = read(a), rb = read(b);
    for (int64_t dim : {0, 1, 2, -1}) {
      CAPTURE(dim);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Sizes out_sizes{2, 3};
      out_sizes.insert(out_sizes.begin() + d, 2);
      std::vector<double> expected;
      for (int64_t i = 0; i < 12; ++i) {
        Sizes p = unravel(i, out_sizes);
        const int64_t which = p[d];
        p.erase(p.begin() + d);
        expected.push_back(which == 0 ? ra.at(p) : rb.at(p));
      }
      check_exact(stack({a, b}, dim), out_sizes, dtype, expected);
    }
  }
}

TEST_CASE("cat and stack reject bad inputs", "[ops][index][errors]") {
  const Tensor a = normal({2, 3}, kFloat32, 32), b = normal({3, 3}, kFloat32, 33);
  const Snapshot inputs({a, b});
  expect_error([&] { cat(std::vector<Tensor>{}, 0); }, {"cat", "non-empty", "empty one"}, inputs);
  expect_error([&] { cat({a, b}, 1); }, {"cat", "expected size 2 at dim 0", "got size 3"}, inputs);
  expect_error([&] { cat({a, b}, 2); }, {"cat", "dim out of range", "[-2, 1]", "got 2"}, inputs);
  expect_error(
      [&] {
        cat({a, normal({2, 3, 1}, kFloat32, 34)}, 0);
      },
      {"cat", "expected tensors of 2 dims", "got 3 dims"}, inputs);
  expect_error([&] { cat({scalar_tensor(1.0), scalar_tensor(2.0)}, 0); }, {"cat", "0-d"}, inputs);
  expect_error([&] { stack({a, b}, 0); }, {"stack", "shape [2, 3]", "got [3, 3]"}, inputs);
  expect_error(
      [&] {
        stack({a, a}, 3);
      },
      {"stack", "dim out of range", "[-3, 2]", "got 3"}, inputs);
  expect_error([&] { stack(std::vector<Tensor>{}, 0); }, {"stack", "non-empty"}, inputs);
}

// ---- split / chunk ------------------------------------------------------------------------------

// Checks that pieces are views of x along dim with the given sizes and x's values.
void check_pieces(const std::vector<Tensor>& pieces, const Tensor& x, int64_t dim,
                  const Sizes& piece_sizes) {
  REQUIRE(pieces.size() == piece_sizes.size());
  const Ref rx = read(x);
  int64_t offset = 0;
  for (size_t k = 0; k < pieces.size(); ++k) {
    CAPTURE(k);
    Sizes sizes = rx.sizes;
    sizes[dim] = piece_sizes[k];
    std::vector<double> expected;
    for (int64_t i = 0; i < count(sizes); ++i) {
      Sizes p = unravel(i, sizes);
      p[dim] += offset;
      expected.push_back(rx.at(p));
    }
    check_exact(pieces[k], sizes, x.dtype(), expected);
    CHECK(pieces[k].shares_storage(x));
    offset += piece_sizes[k];
  }
}

TEST_CASE("split and chunk cut views", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = normal({5, 4}, dtype, 40);
    check_pieces(split(x, 2), x, 0, {2, 2, 1});
    check_pieces(split(x, 4, -1), x, 1, {4});
    check_pieces(split(x, std::vector<int64_t>{1, 0, 3}, 1), x, 1, {1, 0, 3});
    check_pieces(chunk(x, 4), x, 0, {2, 2, 1});  // torch: ceil(5 / 4) = 2, so 3 pieces
    check_pieces(chunk(x, 2, 1), x, 1, {2, 2});
    check_pieces(chunk(x, 8, 1), x, 1, {1, 1, 1, 1});
  }
  // Gradients of the pieces land in the input's positions.
  Tensor x = normal({5}, kFloat16, 41).requires_grad_();
  const std::vector<Tensor> pieces = chunk(x, 2);  // [3], [2]
  add(sum(pieces[0]), mul(sum(pieces[1]), 2.0)).backward();
  REQUIRE(x.grad().dtype() == kFloat16);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 1, 1, 2, 2});
}

TEST_CASE("split and chunk record one node whose backward joins the pieces' gradients",
          "[ops][index]") {
  // x [2, 6] = 0..11; the pieces' gradients come from sums weighted 2 and -3, the middle piece
  // unused (its gradient is zeros).
  Tensor x = arange(12, kFloat32).reshape({2, 6}).detach().requires_grad_();
  const std::vector<Tensor> pieces = split(x, std::vector<int64_t>{1, 2, 3}, 1);
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[0].grad_fn() != nullptr);
  CHECK(pieces[0].grad_fn() == pieces[1].grad_fn());
  CHECK(pieces[0].grad_fn() == pieces[2].grad_fn());
  CHECK(pieces[0].grad_fn()->name() == "SplitBackward");
  add(mul(sum(pieces[0]), 2.0), mul(sum(pieces[2]), -3.0)).backward();
  CHECK(x.grad().to_vector<float>() ==
        std::vector<float>{2, 0, 0, -3, -3, -3, 2, 0, 0, -3, -3, -3});

  // chunk, with an empty piece from split next to it: the gradient of x2 * pieces.
  Tensor y = arange(6, kFloat64).detach().requires_grad_();
  const std::vector<Tensor> chunks = chunk(y, 2);  // [3], [3]
  CHECK(chunks[0].grad_fn()->name() == "ChunkBackward");
  const std::vector<Tensor> with_empty = split(y, std::vector<int64_t>{4, 0, 2}, 0);
  CHECK(with_empty[1].numel() == 0);
  add(add(sum(mul(chunks[1], chunks[1])), sum(with_empty[1])), sum(with_empty[2])).backward();
  // d/dy: 2 y on the last three, plus 1 on the last two
  CHECK(y.grad().to_vector<double>() == std::vector<double>{0, 0, 0, 6, 9, 11});
}

TEST_CASE("split and chunk reject bad inputs", "[ops][index][errors]") {
  const Tensor x = normal({5, 4}, kFloat32, 42);
  const Snapshot inputs({x});
  expect_error(
      [&] {
        split(x, std::vector<int64_t>{1, 2}, 1);
      },
      {"split", "sum to 4", "dim 1", "[1, 2]", "sum 3"}, inputs);
  expect_error(
      [&] {
        split(x, std::vector<int64_t>{5, -1}, 1);
      },
      {"split", "sizes >= 0", "got -1"}, inputs);
  expect_error([&] { split(x, 0, 0); }, {"split", "split_size can be 0 only", "size 5"}, inputs);
  expect_error([&] { split(x, 2, 2); }, {"split", "dim out of range", "[-2, 1]", "got 2"}, inputs);
  expect_error([&] { split(scalar_tensor(1.0), 1); }, {"split", "at least 1 dim", "0-d"}, inputs);
  expect_error([&] { chunk(x, 0); }, {"chunk", "chunks > 0", "got 0"}, inputs);
  expect_error([&] { chunk(x, 2, -3); }, {"chunk", "dim out of range", "got -3"}, inputs);
}

// ---- gather / scatter_add -----------------------------------------------------------------------

TEST_CASE("gather picks along a dim", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = normal({3, 5}, dtype, 50);
    const Ref rx = read(x);
    for (int64_t dim : {0, 1}) {
      CAPTURE(dim);
      const Shape index_sizes = dim == 1 ? Shape{3, 4} : Shape{2, 5};
      const Tensor index = random_index(index_sizes, 0, rx.sizes[dim], 51 + dim);
      const Ref ri = read(index);
      std::vector<double> expected;
      for (int64_t i = 0; i < count(ri.sizes); ++i) {
        Sizes p = unravel(i, ri.sizes);
        p[dim] = int64_t(ri.values[i]);
        expected.push_back(rx.at(p));
      }
      check_exact(gather(x, dim, index), ri.sizes, dtype, expected);
    }
  }
}

TEST_CASE("scatter_add accumulates along a dim", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor self = normal({3, 5}, dtype, 52), src = normal({3, 6}, dtype, 53);
    const Tensor index = random_index({3, 4}, 0, 5, 54);  // repeats, and src wider than index
    const Ref rs = read(self), rsrc = read(src), ri = read(index);
    std::vector<double> expected = rs.values, scale;
    for (double v : rs.values) scale.push_back(std::abs(v));
    for (int64_t i = 0; i < count(ri.sizes); ++i) {
      Sizes p = unravel(i, ri.sizes);
      const double v = rsrc.at(p);
      p[1] = int64_t(ri.values[i]);
      expected[ravel(p, rs.sizes)] += v;
      scale[ravel(p, rs.sizes)] += std::abs(v);
    }
    check_close(scatter_add(self, 1, index, src), rs.sizes, dtype, expected, scale);
  }
}

TEST_CASE("gather and scatter_add reject bad inputs", "[ops][index][errors]") {
  const Tensor x = normal({3, 5}, kFloat32, 55);
  const Tensor index = ints({0, 4, 1, 2, 3, 0}, {3, 2});
  const Snapshot inputs({x, index});
  expect_error([&] { gather(x, 1, index.to(kFloat32)); }, {"gather", "int64", "float32"}, inputs);
  expect_error(
      [&] {
        gather(x, 1, ints({0, 5}, {1, 2}));
      },
      {"gather", "index 5 is out of range", "dim 1 of size 5"}, inputs);
  expect_error(
      [&] {
        gather(x, 1, ints({-1}, {1, 1}));
      },
      {"gather", "index -1", "negative indices are not allowed"}, inputs);
  expect_error(
      [&] {
        gather(x, 1, ints({0, 1}, {2}));
      },
      {"gather", "as many dims as the input (2)", "got 1"}, inputs);
  expect_error([&] { gather(x, 2, index); }, {"gather", "dim out of range", "got 2"}, inputs);
  expect_error(
      [&] {
        gather(x, 1, ints({0, 0, 0, 0}, {4, 1}));
      },
      {"gather", "index.size(0) <= input.size(0) = 3", "got 4"}, inputs);

  const Tensor src = normal({3, 2}, kFloat32, 56);
  const Snapshot more({x, index, src});
  expect_error([&] { scatter_add(x, 1, index, src.to(kFloat16)); },
               {"scatter_add", "src of dtype float32", "got float16"}, more);
  expect_error([&] { scatter_add(x, 1, index.to(kFloat64), src); },
               {"scatter_add", "int64", "float64"}, more);
  expect_error(
      [&] {
        scatter_add(x, 1, ints({0, 9}, {1, 2}), src);
      },
      {"scatter_add", "index 9 is out of range", "size 5"}, more);
  expect_error(
      [&] {
        scatter_add(x, 1, index, normal({3, 1}, kFloat32, 57));
      },
      {"scatter_add", "index.size(1) <= src.size(1) = 1", "got 2"}, more);
  expect_error([&] { scatter_add(x, -3, index, src); }, {"scatter_add", "dim out of range"}, more);
}

// ---- index_select / index_add -------------------------------------------------------------------

TEST_CASE("index_select picks slices", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor x = normal({4, 3, 2}, dtype, 60);
    const Ref rx = read(x);
    for (DType index_dtype : {kInt64, kInt32}) {
      const Tensor index = ints({2, 0, 2, 1}, {4}).to(index_dtype);
      Sizes out_sizes{4, 4, 2};
      std::vector<double> expected;
      for (int64_t i = 0; i < count(out_sizes); ++i) {
        Sizes p = unravel(i, out_sizes);
        p[1] = std::vector<int64_t>{2, 0, 2, 1}[p[1]];
        expected.push_back(rx.at(p));
      }
      check_exact(index_select(x, 1, index), out_sizes, dtype, expected);
    }
  }
}

TEST_CASE("index_add accumulates slices scaled by alpha", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor self = normal({4, 3}, dtype, 61), source = normal({5, 3}, dtype, 62);
    const std::vector<int64_t> positions{1, 3, 1, 0, 1};
    const Ref rs = read(self), rsrc = read(source);
    for (double alpha : {1.0, 2.0}) {  // 2 scales exactly, so the reference needs no rounding
      CAPTURE(alpha);
      std::vector<double> expected = rs.values, scale;
      for (double v : rs.values) scale.push_back(std::abs(v));
      for (int64_t n = 0; n < 5; ++n) {
        for (int64_t k = 0; k < 3; ++k) {
          expected[positions[n] * 3 + k] += alpha * rsrc.at({n, k});
          scale[positions[n] * 3 + k] += std::abs(alpha * rsrc.at({n, k}));
        }
      }
      check_close(index_add(self, 0, ints(positions, {5}), source, alpha), rs.sizes, dtype,
                  expected, scale);
    }
  }
}

TEST_CASE("index_select and index_add reject bad inputs", "[ops][index][errors]") {
  const Tensor x = normal({4, 3}, kFloat32, 63);
  const Tensor index = ints({0, 3}, {2});
  const Tensor source = normal({2, 3}, kFloat32, 64);
  const Snapshot inputs({x, index, source});
  expect_error(
      [&] {
        index_select(x, 0, ints({0, 1}, {1, 2}));
      },
      {"index_select", "1-D or 0-d index", "2-D", "[1, 2]"}, inputs);
  expect_error([&] { index_select(x, 0, ints({4}, {1})); },
               {"index_select", "index 4 is out of range", "dim 0 of size 4"}, inputs);
  expect_error([&] { index_select(x, 0, index.to(kFloat32)); },
               {"index_select", "int64 or int32", "float32"}, inputs);
  expect_error([&] { index_select(x, 2, index); }, {"index_select", "dim out of range"}, inputs);
  expect_error([&] { index_add(x, 0, index, source.to(kBFloat16)); },
               {"index_add", "source of dtype float32", "got bfloat16"}, inputs);
  expect_error(
      [&] {
        index_add(x, 0, index, normal({3, 3}, kFloat32, 65));
      },
      {"index_add", "source.size(0) == 2", "got 3"}, inputs);
  expect_error(
      [&] {
        index_add(x, 0, ints({0, -1}, {2}), source);
      },
      {"index_add", "index -1", "negative"}, inputs);
  expect_error(
      [&] {
        index_add(ints({1, 2}, {2}), 0, index.slice(0, 0, 1), ints({1}, {1}), 0.5);
      },
      {"index_add", "integral alpha", "int64", "0.5"}, inputs);
}

// ---- index_put ----------------------------------------------------------------------------------

TEST_CASE("index_put writes or accumulates at index tuples", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor self = normal({4, 3}, dtype, 70);
    const Ref rs = read(self);
    // One index tensor, negative indices wrap, values [3] broadcast over the 3 picked rows.
    {
      const Tensor values = normal({3}, dtype, 71);
      const Ref rv = read(values);
      std::vector<double> expected = rs.values;
      for (int64_t row : {0, 2, 3}) {
        for (int64_t k = 0; k < 3; ++k) expected[row * 3 + k] = rv.values[k];
      }
      check_exact(index_put(self, {ints({0, 2, -1}, {3})}, values), rs.sizes, dtype, expected);
    }
    // Two broadcast index tensors ([3, 1] with [2]) with repeated positions.
    {
      const Tensor rows = ints({1, 1, 3}, {3, 1}), cols = ints({0, 2}, {2});
      const Tensor values = normal({3, 2}, dtype, 72);
      const Ref rv = read(values);
      std::vector<double> written = rs.values, summed = rs.values, scale;
      for (double v : rs.values) scale.push_back(std::abs(v));
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < 2; ++j) {
          const int64_t at = std::vector<int64_t>{1, 1, 3}[i] * 3 + std::vector<int64_t>{0, 2}[j];
          written[at] = rv.at({i, j});  // row-major order: the last write wins
          summed[at] += rv.at({i, j});
          scale[at] += std::abs(rv.at({i, j}));
        }
      }
      check_exact(index_put(self, {rows, cols}, values), rs.sizes, dtype, written);
      check_close(index_put(self, {rows, cols}, values, /*accumulate=*/true), rs.sizes, dtype,
                  summed, scale);
    }
  }
}

TEST_CASE("index_put gives a gradient only to the values whose write survives", "[ops][index]") {
  Tensor self = normal({3}, kFloat32, 73).requires_grad_();
  Tensor values = normal({3}, kFloat32, 74).requires_grad_();
  const Tensor out = index_put(self, {ints({1, 0, 1}, {3})}, values);
  sum(mul(out, tensor({1.0, 2.0, 3.0}))).backward();
  CHECK(self.grad().to_vector<double>() == std::vector<double>{0, 0, 3});
  CHECK(values.grad().to_vector<double>() == std::vector<double>{0, 1, 2});
}

TEST_CASE("index_put rejects bad inputs", "[ops][index][errors]") {
  const Tensor self = normal({4, 3}, kFloat32, 75);
  const Tensor values = normal({3}, kFloat32, 76);
  const Tensor index = ints({0, 2}, {2});
  const Snapshot inputs({self, values, index});
  expect_error([&] { index_put(self, {index}, values.to(kFloat16)); },
               {"index_put", "values of dtype float32", "got float16"}, inputs);
  expect_error(
      [&] {
        index_put(self, {bools({1, 0, 1, 0}, {4})}, values);
      },
      {"index_put", "bool mask", "int64 or int32"}, inputs);
  expect_error([&] { index_put(self, {index.to(kFloat32)}, values); },
               {"index_put", "int64 or int32", "float32"}, inputs);
  expect_error([&] { index_put(self, {ints({-5}, {1})}, values); },
               {"index_put", "index -5 is out of range", "dim 0 of size 4"}, inputs);
  expect_error([&] { index_put(self, {index}, normal({4}, kFloat32, 77)); },
               {"index_put", "values of shape [4]", "indexed shape [2, 3]"}, inputs);
  expect_error(
      [&] {
        index_put(self, {index, index, index}, values);
      },
      {"index_put", "between 1 and self.dim() = 2", "got 3"}, inputs);
  expect_error(
      [&] {
        index_put(self, {index, ints({0, 1, 2}, {3})}, values);
      },
      {"index_put", "[2]", "[3]", "cannot be broadcast"}, inputs);
}

// ---- index_copy ---------------------------------------------------------------------------------

TEST_CASE("index_copy replaces slices along a dim, the last of a repeated position kept",
          "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    const Tensor self = normal({4, 3}, dtype, 80);
    const Ref rs = read(self);
    // Rows 3 and 0, row 3 given twice: its second slice wins.
    const Tensor rows = normal({3, 3}, dtype, 81);
    const Ref rr = read(rows);
    std::vector<double> expected = rs.values;
    const std::vector<int64_t> positions{3, 0, 3};
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t k = 0; k < 3; ++k) expected[positions[i] * 3 + k] = rr.at({i, k});
    }
    check_exact(index_copy(self, 0, ints({3, 0, 3}, {3}), rows), rs.sizes, dtype, expected);
    // Column 1 of every row, along the last dim (negative dim).
    const Tensor column = normal({4, 1}, dtype, 82);
    const Ref rc = read(column);
    std::vector<double> by_column = rs.values;
    for (int64_t i = 0; i < 4; ++i) by_column[i * 3 + 1] = rc.at({i, 0});
    check_exact(index_copy(self, -1, ints({1}, {1}), column), rs.sizes, dtype, by_column);
  }
  // Gradients: input's where not overwritten, source's slices in place.
  Tensor self = normal({3, 2}, kFloat32, 83).requires_grad_();
  Tensor source = normal({2, 2}, kFloat32, 84).requires_grad_();
  const Tensor weights = tensor({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {3, 2});
  sum(mul(index_copy(self, 0, ints({2, 0}, {2}), source), weights)).backward();
  CHECK(self.grad().to_vector<double>() == std::vector<double>{0, 0, 3, 4, 0, 0});
  CHECK(source.grad().to_vector<double>() == std::vector<double>{5, 6, 1, 2});
  // CPU autocast promotes input and source to the wider dtype, as torch's CPU list.
  {
    amp::Autocast autocast(kCPU);
    const Tensor promoted =
        index_copy(normal({3, 2}, kBFloat16, 85), 0, ints({1}, {1}), normal({1, 2}, kFloat32, 86));
    CHECK(promoted.dtype() == kFloat32);
  }
}

TEST_CASE("index_copy rejects bad inputs", "[ops][index][errors]") {
  const Tensor self = normal({4, 3}, kFloat32, 87);
  const Tensor source = normal({2, 3}, kFloat32, 88);
  const Tensor index = ints({0, 2}, {2});
  const Snapshot inputs({self, source, index});
  expect_error([&] { index_copy(self, 0, index, source.to(kFloat16)); },
               {"index_copy: expected source of input's dtype float32, got float16"}, inputs);
  expect_error([&] { index_copy(self, 0, index.to(kInt32), source); },
               {"index_copy: expected a 1-D or 0-d int64 index, got int32 of shape [2]"}, inputs);
  expect_error(
      [&] {
        index_copy(self, 0, ints({0, 1, 2}, {3}), source);
      },
      {"index_copy: expected source of shape [3, 3] (input's [4, 3] with 3 index "
       "positions at dim 0), got [2, 3]"},
      inputs);
  expect_error([&] { index_copy(self, 2, index, source); }, {"index_copy", "dim"}, inputs);
  expect_error(
      [&] {
        index_copy(self, 0, ints({0, 4}, {2}), source);
      },
      {"index_copy", "out of range"}, inputs);
}

// ---- one_hot ------------------------------------------------------------------------------------

TEST_CASE("one_hot encodes class indices", "[ops][index]") {
  const Tensor classes = random_index({2, 3}, 0, 4, 80);
  const Ref rc = read(classes);
  for (int64_t num_classes : {5, -1}) {
    CAPTURE(num_classes);
    const int64_t C = num_classes > 0
                          ? num_classes
                          : int64_t(*std::max_element(rc.values.begin(), rc.values.end())) + 1;
    std::vector<double> expected;
    for (double c : rc.values) {
      for (int64_t k = 0; k < C; ++k) expected.push_back(k == int64_t(c) ? 1.0 : 0.0);
    }
    check_exact(one_hot(classes, num_classes), {2, 3, C}, kInt64, expected);
  }
}

TEST_CASE("one_hot rejects bad inputs", "[ops][index][errors]") {
  const Tensor classes = ints({0, 3, 1}, {3});
  const Snapshot inputs({classes});
  expect_error([&] { one_hot(classes.to(kFloat32), 4); }, {"one_hot", "int64", "float32"}, inputs);
  expect_error([&] { one_hot(classes, 3); },
               {"one_hot", "class index 3 is out of range", "num_classes = 3"}, inputs);
  expect_error([&] { one_hot(classes, -2); }, {"one_hot", "num_classes >= 0", "-2"}, inputs);
}

// ---- max / min along a dim ----------------------------------------------------------------------

TEST_CASE("max and min along a dim return values and first indices", "[ops][index]") {
  for (DType dtype : kFloatDTypes) {
    CAPTURE(dtype_name(dtype));
    Tensor x = normal({3, 4, 5}, dtype, 90);
    {
      // A tie in row [0, :, 0]: the first index wins.
      NoGradGuard no_grad;
      x.select(2, 0).select(0, 0).copy_(tensor({1.5, 3.0, 3.0, -1.0}));
    }
    const Ref rx = read(x);
    for (bool is_max : {true, false}) {
      for (int64_t dim : {0, 1, -1}) {
        for (bool keepdim : {false, true}) {
          CAPTURE(is_max, dim, keepdim);
          const int64_t d = dim < 0 ? dim + 3 : dim;
          Sizes kept = rx.sizes;
          kept[d] = 1;
          std::vector<double> best, where_best;
          for (int64_t i = 0; i < count(kept); ++i) {
            Sizes p = unravel(i, kept);
            int64_t arg = 0;
            for (int64_t j = 1; j < rx.sizes[d]; ++j) {
              Sizes q = p, r = p;
              q[d] = j;
              r[d] = arg;
              if (is_max ? rx.at(q) > rx.at(r) : rx.at(q) < rx.at(r)) arg = j;
            }
            p[d] = arg;
            best.push_back(rx.at(p));
            where_best.push_back(double(arg));
          }
          Sizes out_sizes = kept;
          if (!keepdim) out_sizes.erase(out_sizes.begin() + d);
          const auto [values, indices] = is_max ? max(x, dim, keepdim) : min(x, dim, keepdim);
          check_exact(values, out_sizes, dtype, best);
          check_exact(indices, out_sizes, kInt64, where_best);
        }
      }
    }
  }
}

TEST_CASE("max and min along a dim send the gradient to the returned index", "[ops][index]") {
  Tensor x = tensor({1.0, 3.0, 3.0, -2.0, 0.5, -2.0}, {2, 3}, kBFloat16).requires_grad_();
  const auto [top, top_at] = max(x, 1);
  const auto [low, low_at] = min(x, 1, /*keepdim=*/true);
  CHECK(top_at.to_vector<int64_t>() == std::vector<int64_t>{1, 1});
  CHECK(low_at.to_vector<int64_t>() == std::vector<int64_t>{0, 0});
  CHECK_FALSE(top_at.requires_grad());
  add(sum(mul(top, 2.0)), sum(low)).backward();
  REQUIRE(x.grad().dtype() == kBFloat16);
  CHECK(x.grad().to_vector<double>() == std::vector<double>{1, 2, 0, 1, 2, 0});

  // Against finite differences (float64), first and second order.
  for (bool keepdim : {false, true}) {
    CAPTURE(keepdim);
    const Tensor input = normal({3, 4}, kFloat64, 91).requires_grad_();
    CHECK_NOTHROW(autograd::gradcheck(
        [keepdim](const std::vector<Tensor>& in) {
          return add(std::get<0>(max(in[0], 1, keepdim)),
                     mul(std::get<0>(min(in[0], 1, keepdim)), 3.0));
        },
        {input}));
    CHECK_NOTHROW(autograd::gradcheck(
        [keepdim](const std::vector<Tensor>& in) {
          const Tensor y = std::get<0>(max(in[0], 0, keepdim));
          return autograd::grad({sum(mul(mul(y, y), y))}, {in[0]}, {}, true, true)[0];
        },
        {input}));
  }
}

TEST_CASE("max and min along a dim reject bad inputs", "[ops][index][errors]") {
  const Tensor x = normal({2, 3}, kFloat32, 92);
  const Snapshot inputs({x});
  expect_error([&] { max(x, 2); }, {"max", "dim out of range", "[-2, 1]", "got 2"}, inputs);
  expect_error([&] { min(x, -3); }, {"min", "dim out of range", "got -3"}, inputs);
  expect_error([&] { max(empty({2, 0}), 1); }, {"max", "[2, 0]"}, inputs);
}

// ---- 0-d and empty inputs -----------------------------------------------------------------------

TEST_CASE("index ops take 0-d and empty inputs as torch does", "[ops][index]") {
  // A 0-d tensor counts as 1-D of size 1 for gather, scatter_add, index_select and max.
  Tensor x = scalar_tensor(2.5, kFloat32).requires_grad_();
  const Tensor zero = scalar_tensor(int64_t{0}, kInt64);
  const auto [value, at] = max(x, 0);
  CHECK(value.dim() == 0);
  CHECK(at.item<int64_t>() == 0);
  const Tensor picked = gather(x, 0, zero);
  const Tensor selected = index_select(x, 0, zero);
  CHECK(picked.item<double>() == 2.5);
  CHECK(selected.item<double>() == 2.5);
  add(add(value, picked), mul(selected, 2.0)).backward();
  CHECK(x.grad().item<double>() == 4.0);

  Tensor src = scalar_tensor(1.25, kFloat32).requires_grad_();
  const Tensor scattered = scatter_add(zeros({3}), 0, ints({2}, {1}), src.reshape({1}));
  CHECK(scattered.to_vector<double>() == std::vector<double>{0, 0, 1.25});
  sum(mul(scattered, tensor({1.0, 2.0, 3.0}))).backward();
  CHECK(src.grad().item<double>() == 3.0);

  // Empty pieces: cat of 1-D [0] tensors only, index tensors with no entries.
  Tensor e = empty({0}, kFloat32).requires_grad_();
  const Tensor joined = cat({e, e}, 0);
  CHECK(sizes_of(joined) == Sizes{0});
  sum(joined).backward();
  CHECK(sizes_of(e.grad()) == Sizes{0});
  const Tensor none = index_select(normal({3, 2}, kFloat32, 96), 0, ints({}, {0}));
  CHECK(sizes_of(none) == Sizes{0, 2});
  Tensor fill = scalar_tensor(5.0).requires_grad_();
  const Tensor unchanged = index_put(ones({2, 2}), {ints({}, {0})}, fill);
  CHECK(unchanged.to_vector<double>() == std::vector<double>{1, 1, 1, 1});
  sum(unchanged).backward();
  CHECK(fill.grad().item<double>() == 0.0);
}

// ---- second derivatives (NOTE [Adjoint index ops]) ----------------------------------------------

TEST_CASE("index ops give second derivatives through create_graph", "[ops][index]") {
  const auto second = [](std::function<Tensor(const Tensor&)> f) {
    return [f](const std::vector<Tensor>& in) {
      const Tensor y = f(in[0]);
      return autograd::grad({sum(mul(mul(y, y), y))}, {in[0]}, {}, true, true)[0];
    };
  };
  const Tensor x = normal({4, 3}, kFloat64, 93).requires_grad_();
  const Tensor index = ints({2, 0, 2, 1, 3, 3}, {2, 3});
  CHECK_NOTHROW(
      autograd::gradcheck(second([&](const Tensor& t) { return gather(t, 0, index); }), {x}));
  CHECK_NOTHROW(autograd::gradcheck(second([&](const Tensor& t) {
                                      return index_select(t, 0, ints({3, 0, 3}, {3}));
                                    }),
                                    {x}));
  CHECK_NOTHROW(autograd::gradcheck(
      second([&](const Tensor& t) { return scatter_add(t, 0, index, mul(t, 0.5)); }), {x}));
  CHECK_NOTHROW(
      autograd::gradcheck(second([&](const Tensor& t) {
                            return index_add(t, 1, ints({2, 2, 0}, {3}), t.slice(1, 0, 3), 2.0);
                          }),
                          {x}));
  CHECK_NOTHROW(autograd::gradcheck(second([&](const Tensor& t) {
                                      return cat({t, mul(t, 2.0)}, 1);
                                    }),
                                    {x}));
  CHECK_NOTHROW(autograd::gradcheck(second([&](const Tensor& t) {
                                      return stack({t, t.select(0, 1).expand({4, 3})}, 0);
                                    }),
                                    {x}));
  CHECK_NOTHROW(autograd::gradcheck(
      second([&](const Tensor& t) { return where(gt(t.detach(), 0.0), t, mul(t, -0.5)); }), {x}));
  CHECK_NOTHROW(autograd::gradcheck(
      second([&](const Tensor& t) {
        return index_put(t, {ints({1, 3}, {2})}, mul(t.select(0, 0), 2.0), true);
      }),
      {x}));
}

// ---- autocast -----------------------------------------------------------------------------------

TEST_CASE("cat and stack promote under CPU autocast", "[ops][index][autocast]") {
  const Tensor a = normal({2, 2}, kBFloat16, 94), b = normal({2, 2}, kFloat32, 95);
  amp::Autocast autocast(kCPU, kBFloat16);
  CHECK(cat({a, b}, 0).dtype() == kFloat32);
  CHECK(stack({a, b}, 0).dtype() == kFloat32);
  CHECK(amp::cast_policy(OpId::cat, kCPU) == CastPolicy::Promote);
  CHECK(amp::cast_policy(OpId::scatter_add, kCUDA) == CastPolicy::Promote);
  CHECK(amp::cast_policy(OpId::index_put, kCUDA) == CastPolicy::Promote);
  CHECK(amp::cast_policy(OpId::gather, kCUDA) == CastPolicy::Unlisted);
}

}  // namespace
