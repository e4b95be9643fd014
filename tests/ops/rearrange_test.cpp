// triu, tril, diag, repeat, tile, repeat_interleave, flip, roll, pad, meshgrid, unbind, outer and
// einsum: values from torch's documentation and float64 loops, dtypes kept, bad input refused.
#include <catch2/catch.hpp>

#include <cmath>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// 1, 2, ..., n as a float64 tensor of `sizes`.
Tensor counting(const Shape& sizes, DType dtype = kFloat64) {
  return add(arange(shape_numel(sizes), dtype), 1).reshape(sizes);
}

void check_close(const Tensor& got, const Tensor& want, double rtol) {
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<double> g = values(got), w = values(want);
  for (size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i, g[i], w[i]);
    CHECK(std::abs(g[i] - w[i]) <= rtol * (1 + std::abs(w[i])));
  }
}

}  // namespace

TEST_CASE("triu, tril and diag as torch's", "[rearrange]") {
  const Tensor m = counting({3, 4});
  CHECK(values(triu(m)) == std::vector<double>{1, 2, 3, 4, 0, 6, 7, 8, 0, 0, 11, 12});
  CHECK(values(triu(m, 1)) == std::vector<double>{0, 2, 3, 4, 0, 0, 7, 8, 0, 0, 0, 12});
  CHECK(values(tril(m, -1)) == std::vector<double>{0, 0, 0, 0, 5, 0, 0, 0, 9, 10, 0, 0});
  CHECK(values(tril(m, 5)) == values(m));
  // Batched: each matrix of [2, 2, 2].
  CHECK(values(tril(counting({2, 2, 2}))) == std::vector<double>{1, 0, 3, 4, 5, 0, 7, 8});
  CHECK(triu(m.to(kBFloat16)).dtype() == kBFloat16);
  CHECK(values(triu(tensor(std::vector<int64_t>{1, 2, 3, 4}, {2, 2}))) ==
        std::vector<double>{1, 2, 0, 4});
  CHECK_THAT(testing::error_message([] { triu(ones({3})); }),
             Contains("expected a tensor of at least 2 dims"));

  CHECK(values(diag(m)) == std::vector<double>{1, 6, 11});
  CHECK(values(diag(m, 1)) == std::vector<double>{2, 7, 12});
  CHECK(values(diag(m, -2)) == std::vector<double>{9});
  CHECK(diag(m, 4).numel() == 0);
  const Tensor v = tensor({1.0, 2.0});
  CHECK(values(diag(v)) == std::vector<double>{1, 0, 0, 2});
  CHECK(values(diag(v, 1)) == std::vector<double>{0, 1, 0, 0, 0, 2, 0, 0, 0});
  CHECK(values(diag(v, -1)) == std::vector<double>{0, 0, 0, 1, 0, 0, 0, 2, 0});
  // A matrix from an inf keeps its zeros (no 0 * inf).
  CHECK(values(diag(tensor({INFINITY, 1.0})))[1] == 0.0);
}

TEST_CASE("repeat, tile and repeat_interleave as torch's", "[rearrange]") {
  const Tensor x = tensor({1.0, 2.0, 3.0});
  // x.repeat(4, 2): [4, 6], rows [1, 2, 3, 1, 2, 3].
  const Tensor r = repeat(x, {4, 2});
  CHECK(r.sizes() == Shape{4, 6});
  CHECK(values(r.select(0, 3)) == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(repeat(x, {4, 2, 1}).sizes() == Shape{4, 2, 3});
  const Tensor m = counting({2, 2});
  CHECK(values(repeat(m, {1, 2})) == std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4});
  CHECK(values(repeat(m, {2, 1})) == std::vector<double>{1, 2, 3, 4, 1, 2, 3, 4});
  CHECK(repeat(m, {0, 3}).sizes() == Shape{0, 6});
  CHECK_THAT(testing::error_message([&] { repeat(m, {2}); }),
             Contains("expected at least as many repeats as the tensor has dims (2), got 1"));
  // torch.tile(x, (2,)) = [1, 2, 3, 1, 2, 3]; fewer reps than dims pad with 1s.
  CHECK(values(tile(x, {2})) == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(values(tile(m, {2})) == std::vector<double>{1, 2, 1, 2, 3, 4, 3, 4});

  CHECK(values(repeat_interleave(x, 2)) == std::vector<double>{1, 1, 2, 2, 3, 3});
  CHECK(values(repeat_interleave(m, 2)) == std::vector<double>{1, 1, 2, 2, 3, 3, 4, 4});
  // torch.repeat_interleave(y, torch.tensor([1, 2]), dim=0) with y = [[1, 2], [3, 4]].
  CHECK(values(repeat_interleave(m, tensor(std::vector<int64_t>{1, 2}), 0)) ==
        std::vector<double>{1, 2, 3, 4, 3, 4});
  CHECK(values(repeat_interleave(m, 3, 1)).size() == 12);
  CHECK_THAT(testing::error_message([&] {
               repeat_interleave(m, tensor(std::vector<int64_t>{1, 2, 3}), 0);
             }),
             Contains("expected one repeat count or one per slice (2), got 3"));
}

TEST_CASE("flip and roll as torch's", "[rearrange]") {
  const Tensor x = counting({2, 2, 2});
  // torch.flip(x, [0, 1]) of arange(8).view(2, 2, 2) (here 1-based).
  CHECK(values(flip(x, {0, 1})) == std::vector<double>{7, 8, 5, 6, 3, 4, 1, 2});
  CHECK(values(flip(x, {-1})) == std::vector<double>{2, 1, 4, 3, 6, 5, 8, 7});
  CHECK_THAT(testing::error_message([&] { flip(x, {0, 0}); }), Contains("at most once"));
  // torch.roll's examples on [1..8].view(4, 2).
  const Tensor r = counting({4, 2});
  CHECK(values(roll(r, {1})) == std::vector<double>{8, 1, 2, 3, 4, 5, 6, 7});
  CHECK(values(roll(r, {1}, {0})) == std::vector<double>{7, 8, 1, 2, 3, 4, 5, 6});
  CHECK(values(roll(r, {-1}, {0})) == std::vector<double>{3, 4, 5, 6, 7, 8, 1, 2});
  CHECK(values(roll(r, {2, 1}, {0, 1})) == std::vector<double>{6, 5, 8, 7, 2, 1, 4, 3});
  CHECK(values(roll(r, {9}, {0})) == values(roll(r, {1}, {0})));
  CHECK_THAT(testing::error_message([&] {
               roll(r, {1, 2}, {0});
             }),
             Contains("expected one shift per dim"));
}

TEST_CASE("pad in its four modes as torch.nn.functional.pad", "[rearrange]") {
  const Tensor x = counting({1, 1, 2, 3});  // [[1, 2, 3], [4, 5, 6]]
  // constant: the last dim by (1, 2), the one before by (1, 0), value -1.
  const Tensor c = pad(x, {1, 2, 1, 0}, "constant", -1);
  CHECK(c.sizes() == Shape{1, 1, 3, 6});
  CHECK(values(c) ==
        std::vector<double>{-1, -1, -1, -1, -1, -1, -1, 1, 2, 3, -1, -1, -1, 4, 5, 6, -1, -1});
  // Negative pads crop.
  CHECK(values(pad(x, {-1, 0})) == std::vector<double>{2, 3, 5, 6});
  // reflect: [3, 2, 1, 2, 3, 2] for pads (2, 1) of [1, 2, 3].
  CHECK(values(pad(x, {2, 1}, "reflect").select(2, 0).flatten()) ==
        std::vector<double>{3, 2, 1, 2, 3, 2});
  CHECK(values(pad(x, {0, 0, 1, 1}, "reflect")) ==
        std::vector<double>{4, 5, 6, 1, 2, 3, 4, 5, 6, 1, 2, 3});
  CHECK(values(pad(x, {2, 1}, "replicate").select(2, 1).flatten()) ==
        std::vector<double>{4, 4, 4, 5, 6, 6});
  CHECK(values(pad(x, {2, 3}, "circular").select(2, 0).flatten()) ==
        std::vector<double>{2, 3, 1, 2, 3, 1, 2, 3});
  CHECK(pad(x.to(kFloat16), {1, 1}, "reflect").dtype() == kFloat16);
  CHECK_THAT(testing::error_message([&] {
               pad(x, {3, 0}, "reflect");
             }),
             Contains("expected reflect pads < the dim's size (3 for dim 3), got 3 and 0"));
  CHECK_THAT(testing::error_message([&] {
               pad(x, {4, 0}, "circular");
             }),
             Contains("expected circular pads <= the dim's size"));
  CHECK_THAT(testing::error_message([&] { pad(x, {1}, "constant"); }),
             Contains("expected an even number of pads"));
  CHECK_THAT(testing::error_message([&] {
               pad(x, {1, 1}, "mirror");
             }),
             Contains("expected mode \"constant\", \"reflect\", \"replicate\" or \"circular\""));
}

TEST_CASE("pad autocasts as the op torch's mode reaches (NOTE [Pads as torch's ops])",
          "[rearrange][autocast]") {
  const Tensor x = counting({1, 2, 3, 4}).to(kBFloat16);
  amp::Autocast autocast(kCPU);  // bfloat16
  // reflection_pad1d/2d and replication_pad1d/2d/3d: float32 on the CPU, as torch's list.
  CHECK(pad(x, {1, 1}, "reflect").dtype() == kFloat32);
  CHECK(pad(x, {1, 1, 1, 1}, "reflect").dtype() == kFloat32);
  CHECK(pad(x, {1, 1}, "replicate").dtype() == kFloat32);
  CHECK(pad(x, {1, 1, 1, 1, 0, 1}, "replicate").dtype() == kFloat32);
  // reflect over three dims (reflection_pad3d is not on torch 1.13's list), constant, circular.
  CHECK(pad(x, {1, 1, 1, 1, 0, 1}, "reflect").dtype() == kBFloat16);
  CHECK(pad(x, {1, 1}).dtype() == kBFloat16);
  CHECK(pad(x, {1, 1}, "circular").dtype() == kBFloat16);
  // The values are pad's either way: float32 widens the bfloat16 values exactly.
  CHECK(values(pad(x, {2, 1}, "reflect")) == values(pad(x.to(kFloat32), {2, 1}, "reflect")));
}

TEST_CASE("meshgrid, unbind and outer as torch's", "[rearrange]") {
  const Tensor a = tensor({1.0, 2.0, 3.0}), b = tensor({4.0, 5.0});
  const std::vector<Tensor> ij = meshgrid({a, b});
  CHECK(ij[0].sizes() == Shape{3, 2});
  CHECK(values(ij[0]) == std::vector<double>{1, 1, 2, 2, 3, 3});
  CHECK(values(ij[1]) == std::vector<double>{4, 5, 4, 5, 4, 5});
  const std::vector<Tensor> xy = meshgrid({a, b}, "xy");
  CHECK(xy[0].sizes() == Shape{2, 3});
  CHECK(values(xy[0]) == std::vector<double>{1, 2, 3, 1, 2, 3});
  CHECK(values(xy[1]) == std::vector<double>{4, 4, 4, 5, 5, 5});
  CHECK_THAT(testing::error_message([&] { meshgrid({a}, "ji"); }),
             Contains("expected indexing \"ij\" or \"xy\""));

  const std::vector<Tensor> rows = unbind(counting({3, 2}));
  REQUIRE(rows.size() == 3);
  CHECK(values(rows[2]) == std::vector<double>{5, 6});
  CHECK(unbind(counting({3, 2}), 1).size() == 2);

  CHECK(values(outer(a, b)) == std::vector<double>{4, 5, 8, 10, 12, 15});
  CHECK_THAT(testing::error_message([&] {
               outer(counting({2, 2}), b);
             }),
             Contains("expected two 1-d tensors"));
}

TEST_CASE("einsum agrees with loops and the ops it stands for", "[rearrange][einsum]") {
  manual_seed(11);
  const Tensor a = randn({3, 4}, kFloat64), b = randn({4, 5}, kFloat64),
               c = randn({5, 2}, kFloat64);
  const Tensor sq = randn({4, 4}, kFloat64);
  const Tensor batch_a = randn({2, 3, 4}, kFloat64), batch_b = randn({2, 4, 5}, kFloat64);
  check_close(einsum("ij,jk->ik", {a, b}), matmul(a, b), 1e-14);
  check_close(einsum("ij,jk", {a, b}), matmul(a, b), 1e-14);  // implicit output
  check_close(einsum("ij,jk->ki", {a, b}), matmul(a, b).t(), 1e-14);
  check_close(einsum("ij,jk,kl->il", {a, b, c}), matmul(matmul(a, b), c), 1e-13);
  check_close(einsum("bij,bjk->bik", {batch_a, batch_b}), matmul(batch_a, batch_b), 1e-14);
  check_close(einsum("...ij,...jk->...ik", {batch_a, batch_b}), matmul(batch_a, batch_b), 1e-14);
  check_close(einsum("...ij,jk", {batch_a, b}), matmul(batch_a, b), 1e-14);
  check_close(einsum("ij->ji", {a}), a.t(), 0.0);
  check_close(einsum("ij->", {a}), sum(a), 1e-14);
  check_close(einsum("ij->j", {a}), sum(a, {0}), 1e-14);
  check_close(einsum("ii", {sq}), sum(diag(sq)), 1e-14);  // trace
  check_close(einsum("ii->i", {sq}), diag(sq), 0.0);
  check_close(einsum("i,j->ij", {a.select(0, 0), b.select(1, 0)}),
              outer(a.select(0, 0), b.select(1, 0)), 0.0);
  check_close(einsum("ij,ij->i", {a, a}), sum(mul(a, a), {1}), 1e-14);
  // A labelled dim of size 1 broadcasts.
  check_close(einsum("bij,bjk->bik", {batch_a.narrow(0, 0, 1), batch_b}),
              matmul(batch_a.narrow(0, 0, 1), batch_b), 1e-14);
  // Uppercase labels, and the implicit order (uppercase first).
  check_close(einsum("Ab,bC", {a, b}), matmul(a, b), 1e-14);
  check_close(einsum("ba", {a}), a.t(), 0.0);
  // A loop for a diagonal of a 3-index operand against another operand: "iij,jk->ik".
  const Tensor t3 = randn({3, 3, 4}, kFloat64);
  const std::vector<double> tv = values(t3), bv = values(b);
  std::vector<double> want(15, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int k = 0; k < 5; ++k)
      for (int j = 0; j < 4; ++j)
        want[size_t(i * 5 + k)] += tv[size_t((i * 3 + i) * 4 + j)] * bv[size_t(j * 5 + k)];
  check_close(einsum("iij,jk->ik", {t3, b}), tensor(want, {3, 5}, kFloat64), 1e-14);

  // Through the GEMM path: autocast runs it in the lower precision, as matmul.
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    CHECK(einsum("ij,jk->ik", {a.to(kFloat32), b.to(kFloat32)}).dtype() == kBFloat16);
  }
  // Gradients reach every operand.
  const Tensor ga = a.clone().requires_grad_(), gb = b.clone().requires_grad_();
  sum(einsum("ij,jk->ik", {ga, gb})).backward();
  check_close(ga.grad(), sum(b, {1}).unsqueeze(0).expand({3, 4}), 1e-14);

  CHECK_THAT(testing::error_message([&] { einsum("ij,jk->ik", {a}); }),
             Contains("names 2 operands, got 1 tensors"));
  CHECK_THAT(testing::error_message([&] { einsum("ijk->i", {a}); }),
             Contains("operand 0 has 2 dims but"));
  CHECK_THAT(testing::error_message([&] {
               einsum("ij,jk->ik", {a, a});
             }),
             Contains("do not broadcast"));
  CHECK_THAT(testing::error_message([&] { einsum("ij->iz", {a}); }),
             Contains("a subscript no operand has"));
  CHECK_THAT(testing::error_message([&] { einsum("i1->i", {a}); }), Contains("[a-zA-Z]"));
}
