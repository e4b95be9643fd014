// Tensor's methods and comparison operators (core/tensor.h, ops/tensor_methods.cpp): the
// spellings a libtorch user types, checked against float64 loops written here and against the
// free functions they stand for.
#include <cmath>
#include <cstdint>
#include <tuple>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

std::vector<double> values(const Tensor& t) { return t.to(kFloat64).to_vector<double>(); }

// x [3, 4] with a tie, a negative row and a zero.
Tensor sample() {
  return tensor({1.0, 5.0, -2.0, 5.0,  //
                 -1.0, -3.0, -0.5, -4.0,  //
                 0.0, 2.0, 7.0, 3.0},
                {3, 4});
}

}  // namespace

TEST_CASE("reductions as methods match loops over the elements", "[ops][methods]") {
  const Tensor x = sample();
  const std::vector<double> v = values(x);
  CHECK(x.sum().item<double>() == Approx(12.5));
  CHECK(values(x.sum(1)) == std::vector<double>{9.0, -8.5, 12.0});
  CHECK(values(x.sum({0})) == std::vector<double>{0.0, 4.0, 4.5, 4.0});
  CHECK(x.sum(1, true).sizes() == Shape{3, 1});
  CHECK(x.sum({0, 1}).item<double>() == Approx(12.5));
  CHECK(x.sum(kFloat64).dtype() == kFloat64);  // a dtype alone: every element, in it
  CHECK(x.sum(kFloat64).item<double>() == 12.5);
  CHECK(x.sum({}, false, kFloat64).dtype() == kFloat64);
  CHECK(x.mean(kFloat64).dtype() == kFloat64);
  CHECK(x.mean().item<double>() == Approx(12.5 / 12));
  const std::vector<double> column_means = values(x.mean(0));
  const std::vector<double> want_means = {0.0, 4.0 / 3, 1.5, 4.0 / 3};
  for (size_t i = 0; i < 4; ++i) CHECK(column_means[i] == Approx(want_means[i]));
  CHECK(values(x.prod(1)) == std::vector<double>{-50.0, 6.0, 0.0});
  // {} is every dim, not dim 0; {1} is dim 1.
  CHECK(x.sum({}).item<double>() == Approx(12.5));
  CHECK(values(x.sum({1})) == values(x.sum(1)));
  CHECK(x.max().item<double>() == 7.0);
  CHECK(x.min().item<double>() == -4.0);
  const auto [row_max, where] = x.max(1);
  CHECK(values(row_max) == std::vector<double>{5.0, -0.5, 7.0});
  CHECK(where.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 2});  // the first of a tie
  const auto [row_min, at] = x.min(1, true);
  CHECK(row_min.sizes() == Shape{3, 1});
  CHECK(at.to_vector<int64_t>() == std::vector<int64_t>{2, 3, 0});
  CHECK(x.argmax().item<int64_t>() == 10);
  CHECK(x.argmax(1).to_vector<int64_t>() == std::vector<int64_t>{1, 2, 2});
  CHECK(x.argmin(0).to_vector<int64_t>() == std::vector<int64_t>{1, 1, 0, 1});
  CHECK(values(x.amax({0})) == std::vector<double>{1.0, 5.0, 7.0, 5.0});
  CHECK(values(x.amin({1})) == std::vector<double>{-2.0, -4.0, 0.0});
  // Variance of row 0 by hand: mean 2.25, squares 1.5625 + 7.5625 + 18.0625 + 7.5625 = 34.75.
  CHECK(x.var(1).to_vector<double>()[0] == Approx(34.75 / 3));
  CHECK(x.var(1, 0).to_vector<double>()[0] == Approx(34.75 / 4));
  CHECK(x.std(1).to_vector<double>()[0] == Approx(std::sqrt(34.75 / 3)));
  double mean = 0, squares = 0;
  for (double e : v) mean += e / 12;
  for (double e : v) squares += (e - mean) * (e - mean);
  CHECK(x.var().item<double>() == Approx(squares / 11));
  CHECK(x.std({}, 0).item<double>() == Approx(std::sqrt(squares / 12)));
  CHECK(x.all().item<bool>() == false);  // one zero
  CHECK(x.any().item<bool>() == true);
  CHECK(values(x.all(1)) == std::vector<double>{1.0, 1.0, 0.0});
  CHECK(x.norm().item<double>() ==
        Approx(std::sqrt(1 + 25 + 4 + 25 + 1 + 9 + 0.25 + 16 + 4 + 49 + 9)));
  CHECK(values(x.cumsum(1)).back() == Approx(12.0));
  for (double row : values(x.softmax(1).sum(1))) CHECK(row == Approx(1.0));
  const std::vector<double> p = values(x.softmax(1)), q = values(x.log_softmax(1).exp());
  for (size_t i = 0; i < p.size(); ++i) CHECK(q[i] == Approx(p[i]).epsilon(1e-6));
}

TEST_CASE("comparison operators and methods give bool tensors", "[ops][methods]") {
  const Tensor x = sample();
  const Tensor y = tensor({1.0, 0.0, -2.0, 6.0, -1.0, -3.0, 0.5, -4.0, 0.0, 2.0, 8.0, 3.0}, {3, 4});
  const std::vector<double> a = values(x), b = values(y);
  const auto expect = [&](const Tensor& got, auto relation) {
    CHECK(got.dtype() == kBool);
    std::vector<double> want;
    for (size_t i = 0; i < a.size(); ++i) want.push_back(relation(a[i], b[i]) ? 1.0 : 0.0);
    CHECK(values(got) == want);
  };
  expect(x == y, [](double p, double q) { return p == q; });
  expect(x != y, [](double p, double q) { return p != q; });
  expect(x < y, [](double p, double q) { return p < q; });
  expect(x <= y, [](double p, double q) { return p <= q; });
  expect(x > y, [](double p, double q) { return p > q; });
  expect(x >= y, [](double p, double q) { return p >= q; });
  expect(x.eq(y), [](double p, double q) { return p == q; });
  expect(x.ge(y), [](double p, double q) { return p >= q; });
  // With a number on either side: 0 < x is x > 0.
  CHECK(values(x > 0) == values(0 < x));
  CHECK(values(x <= 1.0) == values(1.0 >= x));
  CHECK(values(x == 5) == std::vector<double>{0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0});
  CHECK(values(5 != x) == values(x.ne(5)));
  // The accuracy of a classifier, as a torch user writes it.
  const Tensor logits = tensor({0.1, 0.9, 0.8, 0.2, 0.3, 0.7, 0.6, 0.4}, {4, 2});
  const Tensor labels = tensor(std::vector<int64_t>{1, 0, 0, 0});
  CHECK((logits.argmax(1) == labels).sum().item<int64_t>() == 3);
}

TEST_CASE("elementwise methods are their ops", "[ops][methods]") {
  manual_seed(5);
  const Tensor x = rand({2, 3}) * 0.5 + 0.25;  // in (0, 1): every function's domain
  const Tensor y = randn({2, 3});
  // Every elementwise function of the op list has its method, equal to the function.
#define HG_OP(name, cuda, cpu, differentiable)
#define HG_UNARY_OP(name, kind, cuda, cpu, domain) \
  CHECK(values(x.name()) == values(hg::name(x)));
#include "halfgrad/ops/op_list.def"
#undef HG_UNARY_OP
#undef HG_OP
  const std::vector<double> a = values(x), b = values(y);
  const auto each = [&](const Tensor& got, auto f) {
    const std::vector<double> g = values(got);
    REQUIRE(g.size() == a.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK(g[i] == Approx(f(a[i], b[i])).epsilon(1e-6));
  };
  each(x.add(y, 2), [](double p, double q) { return p + 2 * q; });
  each(x.sub(y), [](double p, double q) { return p - q; });
  each(x.mul(y), [](double p, double q) { return p * q; });
  each(x.div(y), [](double p, double q) { return p / q; });
  each(x.pow(2), [](double p, double) { return p * p; });
  each(x.add(1), [](double p, double) { return p + 1; });
  each(x.maximum(y), [](double p, double q) { return std::max(p, q); });
  each(y.clamp(-0.5, 0.5), [](double, double q) { return std::clamp(q, -0.5, 0.5); });
  each(y.clamp_min(0), [](double, double q) { return std::max(q, 0.0); });
  each(y.abs(), [](double, double q) { return std::abs(q); });
  each(x.log(), [](double p, double) { return std::log(p); });
  CHECK(values(y.sign()) == values(sign(y)));
  CHECK(values(x.type_as(tensor({1.0}, {1}, kFloat64))) == a);
  CHECK(x.type_as(tensor({1.0}, {1}, kFloat64)).dtype() == kFloat64);
}

TEST_CASE("product and rearranging methods are their ops", "[ops][methods]") {
  manual_seed(6);
  const Tensor a = randn({2, 3, 4}), b = randn({2, 4, 5});
  CHECK(values(a.matmul(b)) == values(matmul(a, b)));
  CHECK(values(a.bmm(b)) == values(bmm(a, b)));
  CHECK(values(a[0].mm(b[0])) == values(mm(a[0], b[0])));
  const Tensor x = sample();
  CHECK(values(x.masked_fill(x < 0, 0.0)) ==
        std::vector<double>{1, 5, 0, 5, 0, 0, 0, 0, 0, 2, 7, 3});
  CHECK(values(x.tril()) == values(tril(x)));
  CHECK(values(x.flip({1})) == values(flip(x, {1})));
  CHECK(values(x.repeat({2, 1})) == values(repeat(x, {2, 1})));
  CHECK(x.chunk(2, 1).size() == 2);
  CHECK(x.split(1, 0).size() == 3);
  const auto [top, index] = x.topk(2, 1);
  CHECK(values(top) == std::vector<double>{5, 5, -0.5, -1, 7, 3});
  const auto [sorted, order] = x.sort(1, true);
  CHECK(values(sorted)[0] == 5.0);
  CHECK(values(x.index_select(0, tensor(std::vector<int64_t>{2, 0}))) ==
        std::vector<double>{0, 2, 7, 3, 1, 5, -2, 5});
  CHECK(values(x.gather(1, tensor(std::vector<int64_t>{3, 0, 2}, {3, 1}))) ==
        std::vector<double>{5, -1, 7});
}
