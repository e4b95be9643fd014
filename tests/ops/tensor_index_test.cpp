// Tensor::index and index_put_ with libtorch's indices: shapes and values as PyTorch gives them
// (basic indexing as views; advanced indices broadcast, placed by the adjacency rule; bool
// masks), gradients, in-place writes, bad indices.
#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using namespace hg::indexing;
using Catch::Contains;

namespace {

Tensor ints(const std::vector<int64_t>& v, const Shape& sizes) { return tensor(v, sizes, kInt64); }
std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// x[i][j][k] = 100 i + 10 j + k, of shape [2, 3, 4]: every value names its position.
Tensor positional() {
  std::vector<double> v;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) v.push_back(100 * i + 10 * j + k);
  return tensor(v, {2, 3, 4}, kFloat64);
}

}  // namespace

TEST_CASE("basic indexing gives PyTorch's views", "[index]") {
  const Tensor x = positional();
  CHECK(values(x.index({1, 2})) == std::vector<double>{120, 121, 122, 123});
  CHECK(x.index({Slice(), 1}).sizes() == Shape{2, 4});
  CHECK(values(x.index({"...", -1})) == std::vector<double>{3, 13, 23, 103, 113, 123});
  CHECK(values(x.index({Ellipsis, 0, Slice(1, None, 2)})) == std::vector<double>{1, 3, 101, 103});
  const Tensor y = x.index({None, 0, Slice(None, None, 2)});  // x[None, 0, ::2]
  CHECK(y.sizes() == Shape{1, 2, 4});
  CHECK(values(y.select(1, 1)) == std::vector<double>{20, 21, 22, 23});
  CHECK(x.index({Slice(1, None)}).sizes() == Shape{1, 3, 4});
  CHECK(x.index({true}).sizes() == Shape{1, 2, 3, 4});
  CHECK(x.index({false}).sizes() == Shape{0, 2, 3, 4});
  CHECK(x.index({0}).is_view());
  CHECK_THAT(testing::error_message([&] {
               x.index({0, 0, 0, 0});
             }),
             Contains("too many indices for a tensor of 3 dims: 4 given"));
  CHECK_THAT(testing::error_message([&] { x.index({5}); }),
             Contains("index 5 is out of bounds for dim 0 of size 2"));
  CHECK_THAT(testing::error_message([&] { x.index({"..", 0}); }), Contains("expected \"...\""));
}

TEST_CASE("advanced indexing: broadcasting, placement, masks", "[index]") {
  const Tensor x = positional();
  // x[[1, 0]]: whole slices.
  CHECK(values(x.index({ints({1, 0}, {2})}).select(1, 0)) ==
        std::vector<double>{100, 101, 102, 103, 0, 1, 2, 3});
  // x[:, [2, 0]]: B in the place of dim 1.
  const Tensor a = x.index({Slice(), ints({2, 0}, {2})});
  CHECK(a.sizes() == Shape{2, 2, 4});
  CHECK(values(a.select(2, 1)) == std::vector<double>{21, 1, 121, 101});
  // x[:, [0, 2], [3, -1]]: adjacent indexed dims 1 and 2 -> [2, B].
  const Tensor b = x.index({Slice(), ints({0, 2}, {2}), ints({3, -1}, {2})});
  CHECK(b.sizes() == Shape{2, 2});
  CHECK(values(b) == std::vector<double>{3, 23, 103, 123});
  // x[[0, 1], :, [3, 2]]: indexed dims 0 and 2 are not neighbours -> B first: [B, 3].
  const Tensor c = x.index({ints({0, 1}, {2}), Slice(), ints({3, 2}, {2})});
  CHECK(c.sizes() == Shape{2, 3});
  CHECK(values(c) == std::vector<double>{3, 13, 23, 102, 112, 122});
  // x[0, :, [1, 3]]: with a tensor present the integer is an index too -> [B, 3], as PyTorch.
  const Tensor d = x.index({0, Slice(), ints({1, 3}, {2})});
  CHECK(d.sizes() == Shape{2, 3});
  CHECK(values(d) == std::vector<double>{1, 11, 21, 3, 13, 23});
  // Broadcast index tensors: rows [2, 1] with columns [1, 3] -> B = [2, 3].
  const Tensor e = x.index({1, ints({0, 2}, {2, 1}), ints({3, 0, 1}, {1, 3})});
  CHECK(e.sizes() == Shape{2, 3});
  CHECK(values(e) == std::vector<double>{103, 100, 101, 123, 120, 121});
  // A bool mask over the first two dims: x[mask] -> [count, 4].
  const Tensor mask = tensor({1.0, 0, 0, 0, 1, 1}, {2, 3}).to(kBool);
  const Tensor f = x.index({mask});
  CHECK(f.sizes() == Shape{3, 4});
  CHECK(values(f.select(1, 0)) == std::vector<double>{0, 110, 120});
  // A mask over the last dim: x[..., mask].
  const Tensor g = x.index({"...", tensor({0.0, 1, 0, 1}).to(kBool)});
  CHECK(g.sizes() == Shape{2, 3, 2});
  CHECK(values(g.select(0, 1).select(0, 2)) == std::vector<double>{121, 123});
  CHECK(x.index({ints({1}, {1}).to(kInt32)}).sizes() == Shape{1, 3, 4});
  CHECK_THAT(testing::error_message([&] { x.index({ints({2}, {1})}); }),
             Contains("expected indices in [-2, 2) for a dim of size 2, got one outside"));
  CHECK_THAT(testing::error_message([&] { x.index({tensor({0.0})}); }),
             Contains("expected index tensors of an integer or bool dtype, got float32"));
  CHECK_THAT(testing::error_message([&] {
               x.index({tensor({1.0, 0.0}).to(kBool), 0, 0, 0});
             }),
             Contains("too many indices"));
}

TEST_CASE("index gradients reach the indexed elements, duplicates summed", "[index]") {
  const Tensor x = positional().requires_grad_();
  const Tensor picked = x.index({ints({0, 0, 1}, {3}), Slice(), 1});  // [3, 3]
  sum(picked).backward();
  const Tensor grad = x.grad();
  CHECK(values(grad.index({0, Slice(), 1})) == std::vector<double>{2, 2, 2});
  CHECK(values(grad.index({1, Slice(), 1})) == std::vector<double>{1, 1, 1});
  CHECK(sum(grad).item<double>() == 9.0);
}

TEST_CASE("index_put_ writes what index reads", "[index]") {
  Tensor y = zeros({3, 4}, kFloat64);
  y.index_put_({Slice(), 1}, 5.0);
  y.index_put_({ints({0, 2}, {2}), ints({3, 0}, {2})}, tensor({7.0, 8.0}, kFloat64));
  y.index_put_({1, "..."}, tensor({1.0, 2.0, 3.0, 4.0}, kFloat64));
  CHECK(values(y) == std::vector<double>{0, 5, 0, 7, 1, 2, 3, 4, 8, 5, 0, 0});
  y.index_put_({gt(y, 4.5)}, -1.0);
  CHECK(values(y) == std::vector<double>{0, -1, 0, -1, 1, 2, 3, 4, -1, -1, 0, 0});
  // Into a view, and an integer tensor taking float values (converted, as torch's).
  Tensor z = zeros({2, 3}, kInt64);
  Tensor row = z.select(0, 1);
  row.index_put_({ints({0, 2}, {2})}, tensor({2.0, 9.0}));
  CHECK(z.to_vector<int64_t>() == std::vector<int64_t>{0, 0, 0, 2, 0, 9});

  // With autograd: recorded out of place, the written elements take the values' gradient.
  const Tensor x = ones({2, 3}, kFloat64).requires_grad_();
  const Tensor v = tensor({4.0, 5.0}, kFloat64).requires_grad_();
  Tensor w = mul(x, 2.0);
  w.index_put_({Slice(), 0}, v);
  sum(mul(w, w)).backward();
  CHECK(values(x.grad()) == std::vector<double>{0, 8, 8, 0, 8, 8});
  CHECK(values(v.grad()) == std::vector<double>{8, 10});
  CHECK_THAT(testing::error_message([&] {
               Tensor leaf = ones({2}, kFloat64).requires_grad_();
               leaf.index_put_({0}, 3.0);
             }),
             Contains("a leaf tensor that requires grad"));
}
