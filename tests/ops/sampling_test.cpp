// bernoulli, multinomial, randint and randperm: what each draws (ranges, distinctness, zero
// probabilities never drawn), frequencies within five standard deviations of the
// probabilities, the generator's reproducibility, bad input.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;

namespace {

// |count - n p| within five binomial standard deviations.
void check_frequency(int64_t count, int64_t n, double p) {
  CAPTURE(count, n, p);
  CHECK(std::abs(double(count) - double(n) * p) <= 5 * std::sqrt(double(n) * p * (1 - p)) + 1);
}

int64_t count_equal(const std::vector<int64_t>& values, int64_t v) {
  return std::count(values.begin(), values.end(), v);
}

}  // namespace

TEST_CASE("bernoulli draws 1 with probability p", "[sampling]") {
  manual_seed(21);
  const int64_t n = 40000;
  const Tensor p = full({n}, 0.3);
  const Tensor draws = bernoulli(p);
  CHECK(draws.dtype() == kFloat32);
  const std::vector<double> v = draws.to_vector<double>();
  CHECK(std::all_of(v.begin(), v.end(), [](double x) { return x == 0.0 || x == 1.0; }));
  check_frequency(int64_t(sum(draws).item<double>()), n, 0.3);
  CHECK(sum(bernoulli(zeros({100}))).item<double>() == 0.0);
  CHECK(sum(bernoulli(ones({100}))).item<double>() == 100.0);
  CHECK(bernoulli(zeros({3}, kBFloat16), 0.5).dtype() == kBFloat16);
  // The draw is u < p for the generator's float64 uniforms: the same seed, the same draw.
  manual_seed(5);
  const Tensor first = bernoulli(full({64}, 0.5));
  manual_seed(5);
  const Tensor u = rand({64}, kFloat64);
  CHECK(first.to_vector<double>() == lt(u, 0.5).to(kFloat32).to_vector<double>());
  CHECK_THAT(testing::error_message([] { bernoulli(full({2}, 1.5)); }),
             Contains("expected probabilities in [0, 1]"));
}

TEST_CASE("randint and randperm draw uniformly", "[sampling]") {
  manual_seed(22);
  const int64_t n = 60000;
  const std::vector<int64_t> v = randint(-3, 3, {n}).to_vector<int64_t>();
  for (int64_t k = -3; k < 3; ++k) check_frequency(count_equal(v, k), n, 1.0 / 6);
  CHECK(randint(10, {2, 3}, {.dtype = kInt32}).dtype() == kInt32);
  const std::vector<int64_t> big = randint(int64_t(1) << 40, {1000}).to_vector<int64_t>();
  CHECK(*std::min_element(big.begin(), big.end()) >= 0);
  CHECK(*std::max_element(big.begin(), big.end()) < (int64_t(1) << 40));
  CHECK_THAT(testing::error_message([] { randint(3, 3, {1}); }), Contains("expected low < high"));
  // A floating dtype holds the same whole numbers (torch's randint allows it too).
  const std::vector<double> whole = randint(-4, 4, {100}, {.dtype = kFloat32}).to_vector<double>();
  CHECK(std::all_of(whole.begin(), whole.end(),
                    [](double w) { return w == std::floor(w) && w >= -4 && w < 4; }));
  CHECK_THAT(testing::error_message([] { randint(3, {1}, {.dtype = kBool}); }),
             Contains("expected a numeric dtype, got bool"));

  const std::vector<int64_t> perm = randperm(1000).to_vector<int64_t>();
  CHECK(std::set<int64_t>(perm.begin(), perm.end()).size() == 1000);
  CHECK(*std::max_element(perm.begin(), perm.end()) == 999);
  // Where element 0 lands in 3000 permutations of 4: each place a quarter of the time.
  std::vector<int64_t> place(4, 0);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::vector<int64_t> p = randperm(4).to_vector<int64_t>();
    ++place[size_t(std::find(p.begin(), p.end(), 0) - p.begin())];
  }
  for (int64_t count : place) check_frequency(count, 3000, 0.25);
  CHECK(randperm(0).numel() == 0);
}

TEST_CASE("multinomial draws categories by weight, with and without replacement", "[sampling]") {
  manual_seed(23);
  // Unnormalised weights with a zero.
  const Tensor weights = tensor({1.0, 0.0, 3.0, 6.0});
  const int64_t n = 50000;
  const Tensor draws = multinomial(weights, n, /*replacement=*/true);
  CHECK(draws.dtype() == kInt64);
  CHECK(draws.sizes() == Shape{n});
  const std::vector<int64_t> v = draws.to_vector<int64_t>();
  CHECK(count_equal(v, 1) == 0);
  check_frequency(count_equal(v, 0), n, 0.1);
  check_frequency(count_equal(v, 2), n, 0.3);
  check_frequency(count_equal(v, 3), n, 0.6);

  // Without replacement: distinct, zero weight never drawn; the first draw by weight.
  std::vector<int64_t> first(4, 0);
  for (int trial = 0; trial < 4000; ++trial) {
    const std::vector<int64_t> s = multinomial(weights, 3).to_vector<int64_t>();
    CHECK(std::set<int64_t>(s.begin(), s.end()).size() == 3);
    CHECK(count_equal(s, 1) == 0);
    ++first[size_t(s[0])];
  }
  check_frequency(first[0], 4000, 0.1);
  check_frequency(first[3], 4000, 0.6);

  // Rows of a batch each draw from their own weights.
  const Tensor batch = tensor({0.0, 1.0, 0.0, 0.0, 0.0, 2.0}, {2, 3});
  const Tensor b = multinomial(batch, 5, true);
  CHECK(b.sizes() == Shape{2, 5});
  CHECK(b.select(0, 0).to_vector<int64_t>() == std::vector<int64_t>(5, 1));
  CHECK(b.select(0, 1).to_vector<int64_t>() == std::vector<int64_t>(5, 2));
  CHECK(multinomial(softmax(randn({3, 10}, kBFloat16), -1), 2).sizes() == Shape{3, 2});

  manual_seed(7);
  const Tensor again1 = multinomial(weights, 20, true);
  manual_seed(7);
  CHECK(multinomial(weights, 20, true).to_vector<int64_t>() == again1.to_vector<int64_t>());

  CHECK_THAT(testing::error_message([&] { multinomial(weights, 4); }),
             Contains("categories of nonzero probability"));
  CHECK_THAT(testing::error_message([&] { multinomial(weights, 5); }),
             Contains("expected num_samples <= the number of categories (4)"));
  CHECK_THAT(testing::error_message([] {
               multinomial(tensor({1.0, -1.0}), 1);
             }),
             Contains("expected finite probabilities >= 0"));
  CHECK_THAT(testing::error_message([] { multinomial(zeros({3}), 1); }),
             Contains("sum to more than 0"));
}
