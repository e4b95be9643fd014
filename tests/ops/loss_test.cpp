// Losses (ops/loss.cpp): each forward in float32, float16 and bfloat16 against a float64
// reference computed here from the rounded inputs; gradients against finite differences, option
// by option; cross_entropy's fused backward against its op formula; torch's conventions on small
// cases worked by hand; bad inputs; and the autocast policies of the losses.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;
using Values = std::vector<double>;

namespace {

const DType kLossDtypes[] = {kFloat32, kFloat16, kBFloat16};
const char* const kReductions[] = {"none", "mean", "sum"};

double tolerance(DType dtype) { return rounding_tolerance(dtype); }

// actual (of `dtype`) against the reference, within `roundings` times the tolerance of one
// rounding to dtype. Values below `floor` (0.1) in magnitude are held to the
// tolerance at 0.1: the terms a loss adds are of order one, so a small result is a cancellation
// and its float32 error is absolute, not relative.
void check_close(const Tensor& actual, const Values& expected, DType dtype, double roundings = 1.0,
                 double floor = 0.1) {
  REQUIRE(actual.dtype() == dtype);
  const Values got = actual.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i, got[i], expected[i]);
    if (std::isnan(expected[i])) {  // "mean" of nothing but ignored targets
      CHECK(std::isnan(got[i]));
      continue;
    }
    CHECK(std::abs(got[i] - expected[i]) <=
          roundings * tolerance(dtype) * std::max(std::abs(expected[i]), floor));
  }
}

Values values(const Tensor& t) { return t.to_vector<double>(); }

// Seeded draws, rounded to dtype.
Tensor normal(const Shape& sizes, DType dtype) { return randn(sizes, kFloat32).to(dtype); }
Tensor uniform(const Shape& sizes, double low, double high, DType dtype) {
  return (rand(sizes, kFloat32) * (high - low) + low).to(dtype);
}
Tensor class_indices(const Shape& sizes, int64_t C) {
  std::vector<int64_t> indices;
  for (double u : values(rand(sizes, kFloat64))) {
    indices.push_back(std::min<int64_t>(int64_t(u * double(C)), C - 1));
  }
  return tensor(indices, sizes, kInt64);
}

Values reduce_reference(const Values& losses, const std::string& reduction, double divisor) {
  if (reduction == "none") return losses;
  double total = 0.0;
  for (double l : losses) total += l;
  return {reduction == "sum" ? total : total / divisor};
}

// Calls f, which must throw an hg::Error containing every fragment, and checks that the tensors
// kept their values and versions.
void check_rejects(const std::vector<Tensor>& tensors, const std::function<void()>& f,
                   const std::vector<std::string>& fragments) {
  std::vector<Values> before;
  std::vector<uint64_t> versions;
  for (const Tensor& t : tensors) {
    before.push_back(values(t));
    versions.push_back(t.version());
  }
  const std::string message = hg::testing::error_message(f);
  INFO("message: " << message);
  CHECK_FALSE(message.empty());
  for (const std::string& fragment : fragments) CHECK_THAT(message, Contains(fragment));
  for (size_t i = 0; i < tensors.size(); ++i) {
    CHECK(values(tensors[i]) == before[i]);
    CHECK(tensors[i].version() == versions[i]);
  }
}

// Rows of a classification input [N, C, S] (flattened: (n C + c) S + s).
struct Rows {
  int64_t N, C, S;
  size_t at(int64_t r, int64_t c) const { return size_t(((r / S) * C + c) * S + r % S); }
};

Values log_softmax_reference(const Values& x, const Rows& rows) {
  Values out(x.size());
  for (int64_t r = 0; r < rows.N * rows.S; ++r) {
    double max = -INFINITY, total = 0.0;
    for (int64_t c = 0; c < rows.C; ++c) max = std::max(max, x[rows.at(r, c)]);
    for (int64_t c = 0; c < rows.C; ++c) total += std::exp(x[rows.at(r, c)] - max);
    for (int64_t c = 0; c < rows.C; ++c)
      out[rows.at(r, c)] = x[rows.at(r, c)] - max - std::log(total);
  }
  return out;
}

// torch's cross_entropy with class indices, from log-probabilities: nll_loss when eps = 0.
// `total_weight` gets the weight of the targets not ignored.
Values class_loss_reference(const Values& logp, const std::vector<int64_t>& t, const Values& w,
                            int64_t ignore_index, double eps, const Rows& rows,
                            double& total_weight) {
  Values out;
  total_weight = 0.0;
  const auto weight = [&](int64_t c) { return w.empty() ? 1.0 : w[size_t(c)]; };
  for (int64_t r = 0; r < rows.N * rows.S; ++r) {
    const int64_t k = t[size_t(r)];
    if (k == ignore_index) {
      out.push_back(0.0);
      continue;
    }
    total_weight += weight(k);
    double smooth = 0.0;
    for (int64_t c = 0; c < rows.C; ++c) smooth += weight(c) * logp[rows.at(r, c)];
    out.push_back(-(1 - eps) * weight(k) * logp[rows.at(r, k)] - eps / double(rows.C) * smooth);
  }
  return out;
}

// torch's cross_entropy with class probabilities y.
Values probability_loss_reference(const Values& logp, const Values& y, const Values& w, double eps,
                                  const Rows& rows) {
  Values out;
  for (int64_t r = 0; r < rows.N * rows.S; ++r) {
    double total = 0.0;
    for (int64_t c = 0; c < rows.C; ++c) {
      const size_t i = rows.at(r, c);
      total +=
          (w.empty() ? 1.0 : w[size_t(c)]) * ((1 - eps) * y[i] + eps / double(rows.C)) * logp[i];
    }
    out.push_back(-total);
  }
  return out;
}

Rows rows_of(const Shape& sizes) {
  if (sizes.size() == 1) return {1, sizes[0], 1};
  int64_t S = 1;
  for (size_t d = 2; d < sizes.size(); ++d) S *= sizes[d];
  return {sizes[0], sizes[1], S};
}

Shape without_class_dim(const Shape& sizes) {
  Shape out{};
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (d != (sizes.size() == 1 ? 0 : 1)) out.push_back(sizes[d]);
  }
  return out;
}

// Restores op_list.def's policies however the test ends.
struct ResetPoliciesAtExit {
  ~ResetPoliciesAtExit() { amp::reset_cast_policies(); }
};

}  // namespace

// ---- forward against float64 references -----------------------------------------------------

TEST_CASE("mse_loss l1_loss and smooth_l1_loss match a float64 reference", "[loss]") {
  manual_seed(101);
  for (DType dtype : kLossDtypes) {
    const Tensor x = normal({4, 5}, dtype), y = normal({4, 5}, dtype);
    const Values xv = values(x), yv = values(y);
    for (const char* reduction : kReductions) {
      CAPTURE(dtype, reduction);
      Values squared, absolute;
      for (size_t i = 0; i < xv.size(); ++i) {
        squared.push_back((xv[i] - yv[i]) * (xv[i] - yv[i]));
        absolute.push_back(std::abs(xv[i] - yv[i]));
      }
      check_close(mse_loss(x, y, reduction), reduce_reference(squared, reduction, 20), dtype);
      check_close(l1_loss(x, y, reduction), reduce_reference(absolute, reduction, 20), dtype);
      for (double beta : {1.0, 0.5, 0.0}) {
        CAPTURE(beta);
        Values smooth;
        for (double d : absolute) smooth.push_back(d < beta ? 0.5 * d * d / beta : d - 0.5 * beta);
        check_close(smooth_l1_loss(x, y, reduction, beta), reduce_reference(smooth, reduction, 20),
                    dtype);
      }
    }
  }
}

TEST_CASE("nll_loss and cross_entropy with class indices match a float64 reference", "[loss]") {
  manual_seed(202);
  const Shape shapes[] = {{6, 5}, {2, 4, 3}, {5}};
  for (DType dtype : kLossDtypes) {
    for (const Shape& sizes : shapes) {
      const Rows rows = rows_of(sizes);
      const Tensor x = normal(sizes, dtype);
      Tensor t = class_indices(without_class_dim(sizes), rows.C);
      std::vector<int64_t> tv = t.to_vector<int64_t>();
      tv[0] = 1;  // so that ignore_index = 1 ignores at least one target
      t = tensor(tv, t.sizes(), kInt64);
      const Tensor weight = uniform({rows.C}, 0.5, 2.0, dtype);
      const Values xv = values(x), logp = log_softmax_reference(xv, rows);
      for (const bool weighted : {false, true}) {
        for (const int64_t ignore_index : {int64_t(-100), int64_t(1)}) {
          for (const char* reduction : kReductions) {
            CAPTURE(dtype, sizes, weighted, ignore_index, reduction);
            const Tensor w = weighted ? weight : Tensor();
            const Values wv = weighted ? values(weight) : Values{};
            double total_weight = 0.0;
            const Values nll =
                class_loss_reference(xv, tv, wv, ignore_index, 0.0, rows, total_weight);
            const Tensor nll_result = nll_loss(x, t, w, ignore_index, reduction);
            check_close(nll_result, reduce_reference(nll, reduction, total_weight), dtype);
            if (std::string(reduction) == "none") CHECK(nll_result.sizes() == t.sizes());
            for (double eps : {0.0, 0.15}) {
              CAPTURE(eps);
              const Values ce =
                  class_loss_reference(logp, tv, wv, ignore_index, eps, rows, total_weight);
              check_close(cross_entropy(x, t, w, ignore_index, reduction, eps),
                          reduce_reference(ce, reduction, total_weight), dtype);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("cross_entropy with class probabilities matches a float64 reference", "[loss]") {
  manual_seed(303);
  const Shape shapes[] = {{6, 5}, {2, 4, 3}, {5}};
  for (DType dtype : kLossDtypes) {
    for (const Shape& sizes : shapes) {
      const Rows rows = rows_of(sizes);
      const Tensor x = normal(sizes, dtype), y = uniform(sizes, 0.0, 1.0, dtype);
      const Tensor weight = uniform({rows.C}, 0.5, 2.0, dtype);
      const Values logp = log_softmax_reference(values(x), rows), yv = values(y);
      for (const bool weighted : {false, true}) {
        for (double eps : {0.0, 0.2}) {
          for (const char* reduction : kReductions) {
            CAPTURE(dtype, sizes, weighted, eps, reduction);
            const Values losses = probability_loss_reference(
                logp, yv, weighted ? values(weight) : Values{}, eps, rows);
            // "mean" divides by the number of rows, whatever the weights (as torch).
            check_close(cross_entropy(x, y, weighted ? weight : Tensor(), -100, reduction, eps),
                        reduce_reference(losses, reduction, double(rows.N * rows.S)), dtype);
          }
        }
      }
    }
  }
}

TEST_CASE("binary cross entropies match a float64 reference", "[loss]") {
  manual_seed(404);
  for (DType dtype : kLossDtypes) {
    const Tensor p = uniform({3, 4}, 0.02, 0.98, dtype), logits = normal({3, 4}, dtype) * 3.0;
    const Tensor y = uniform({3, 4}, 0.0, 1.0, dtype);
    const Tensor weight = uniform({3, 1}, 0.5, 2.0, dtype);
    const Tensor pos_weight = uniform({4}, 0.5, 3.0, dtype);
    const Values pv = values(p), xv = values(logits), yv = values(y);
    const Values wv = values(weight), posv = values(pos_weight);
    for (const bool weighted : {false, true}) {
      for (const char* reduction : kReductions) {
        CAPTURE(dtype, weighted, reduction);
        Values bce, with_logits, with_pos_weight;
        for (size_t i = 0; i < pv.size(); ++i) {
          const double w = weighted ? wv[i / 4] : 1.0, pos = posv[i % 4];
          bce.push_back(-w * (yv[i] * std::max(std::log(pv[i]), -100.0) +
                              (1 - yv[i]) * std::max(std::log1p(-pv[i]), -100.0)));
          const double s = 1.0 / (1.0 + std::exp(-xv[i]));
          with_logits.push_back(-w * (yv[i] * std::log(s) + (1 - yv[i]) * std::log(1 - s)));
          with_pos_weight.push_back(-w *
                                    (pos * yv[i] * std::log(s) + (1 - yv[i]) * std::log(1 - s)));
        }
        const Tensor w = weighted ? weight : Tensor();
        check_close(binary_cross_entropy(p, y, w, reduction), reduce_reference(bce, reduction, 12),
                    dtype);
        check_close(binary_cross_entropy_with_logits(logits, y, w, reduction),
                    reduce_reference(with_logits, reduction, 12), dtype);
        check_close(binary_cross_entropy_with_logits(logits, y, w, reduction, pos_weight),
                    reduce_reference(with_pos_weight, reduction, 12), dtype);
      }
    }
  }
}

TEST_CASE("kl_div matches a float64 reference", "[loss]") {
  manual_seed(505);
  for (DType dtype : kLossDtypes) {
    const Tensor x = normal({3, 4}, dtype), y = uniform({3, 4}, 0.05, 1.0, dtype);
    const Tensor log_y = normal({3, 4}, dtype);
    const Values xv = values(x), yv = values(y), log_yv = values(log_y);
    Values plain, from_log;
    for (size_t i = 0; i < xv.size(); ++i) {
      plain.push_back(yv[i] * (std::log(yv[i]) - xv[i]));
      from_log.push_back(std::exp(log_yv[i]) * (log_yv[i] - xv[i]));
    }
    for (const char* reduction : {"none", "mean", "sum", "batchmean"}) {
      CAPTURE(dtype, reduction);
      const bool batchmean = std::string(reduction) == "batchmean";
      const std::string reference_reduction = batchmean ? "mean" : reduction;
      const double divisor = batchmean ? 3.0 : 12.0;  // "mean" is over all elements, as torch
      check_close(kl_div(x, y, reduction), reduce_reference(plain, reference_reduction, divisor),
                  dtype);
      check_close(kl_div(x, log_y, reduction, /*log_target=*/true),
                  reduce_reference(from_log, reference_reduction, divisor), dtype);
    }
  }
}

TEST_CASE("margin_ranking, hinge_embedding, soft_margin and huber losses match float64", "[loss]") {
  manual_seed(506);
  for (DType dtype : kLossDtypes) {
    const Tensor a = normal({3, 4}, dtype), b = normal({3, 4}, dtype) * 2.0;
    // Targets of 1 and -1 (and, for the hinge, a 0 that takes both terms, as torch's).
    const Tensor sign =
        tensor({1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0, 1.0, -1.0, -1.0, 1.0, -1.0}, {3, 4})
            .to(dtype);
    const Tensor hinge_target =
        tensor({1.0, -1.0, 0.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 0.0, 1.0, -1.0}, {3, 4}).to(dtype);
    const Values av = values(a), bv = values(b), sv = values(sign), hv = values(hinge_target);
    Values ranking, hinge, soft, huber;
    const double margin = 0.3, hinge_margin = 1.5, delta = 0.8;
    for (size_t i = 0; i < av.size(); ++i) {
      ranking.push_back(std::max(0.0, -sv[i] * (av[i] - bv[i]) + margin));
      hinge.push_back((hv[i] != 1 ? std::max(0.0, hinge_margin - av[i]) : 0.0) +
                      (hv[i] != -1 ? av[i] : 0.0));
      soft.push_back(std::log1p(std::exp(-sv[i] * av[i])));
      const double d = std::abs(av[i] - bv[i]);
      huber.push_back(d < delta ? 0.5 * d * d : delta * (d - 0.5 * delta));
    }
    for (const char* reduction : kReductions) {
      CAPTURE(dtype, reduction);
      check_close(margin_ranking_loss(a, b, sign, margin, reduction),
                  reduce_reference(ranking, reduction, 12), dtype);
      check_close(hinge_embedding_loss(a, hinge_target, hinge_margin, reduction),
                  reduce_reference(hinge, reduction, 12), dtype);
      check_close(soft_margin_loss(a, sign, reduction), reduce_reference(soft, reduction, 12),
                  dtype);
      check_close(huber_loss(a, b, reduction, delta), reduce_reference(huber, reduction, 12),
                  dtype);
    }
  }
}

TEST_CASE("huber_loss is delta times smooth_l1_loss, and the compositions' errors", "[loss]") {
  manual_seed(507);
  const Tensor a = normal({5}, kFloat64), b = normal({5}, kFloat64);
  CHECK(values(huber_loss(a, b, "none", 1.0)) == values(smooth_l1_loss(a, b, "none", 1.0)));
  const Values scaled = values(smooth_l1_loss(a, b, "none", 2.5) * 2.5);
  const Values huber = values(huber_loss(a, b, "none", 2.5));
  for (size_t i = 0; i < huber.size(); ++i) CHECK(huber[i] == Approx(scaled[i]).epsilon(1e-15));
  const Tensor ones = full({5}, 1.0, kFloat64);
  // soft_margin_loss stays finite, with a finite gradient, where exp(-target input) overflows.
  const Tensor far = tensor({-100.0, 100.0}, {2}).requires_grad_();
  const Tensor far_loss = soft_margin_loss(far, tensor({1.0, 1.0}, {2}), "none");
  REQUIRE(far_loss.dtype() == kFloat32);
  const Values far_values = values(far_loss);
  CHECK(far_values[0] == 100.0);
  CHECK(std::abs(far_values[1]) < 1e-30);
  sum(far_loss).backward();
  const Values far_grad = values(far.grad());
  CHECK(far_grad[0] == -1.0);
  CHECK(std::abs(far_grad[1]) < 1e-30);
  check_rejects({a, b}, [&] { huber_loss(a, b, "mean", 0.0); }, {"huber_loss", "delta > 0", "0"});
  check_rejects({a},
                [&] {
                  huber_loss(a, b.reshape({5, 1}));
                },
                {"huber_loss: expected target of input's shape [5], got [5, 1]"});
  check_rejects({a, b}, [&] { huber_loss(a, b, "avg"); }, {"huber_loss", "reduction", "avg"});
  check_rejects({a, b}, [&] { margin_ranking_loss(a, b, full({4}, 1.0, kFloat64)); },
                {"margin_ranking_loss", "target of input's shape [5]", "[4]"});
  check_rejects({a},
                [&] {
                  margin_ranking_loss(a, b.reshape({5, 1}), ones);
                },
                {"margin_ranking_loss", "input2 of input's shape [5]", "[5, 1]"});
  check_rejects({a},
                [&] {
                  hinge_embedding_loss(a, ones.reshape({1, 5}));
                },
                {"hinge_embedding_loss", "target of input's shape"});
  check_rejects({a}, [&] { soft_margin_loss(a, ones, "batchmean"); },
                {"soft_margin_loss", "reduction", "batchmean"});
  check_rejects({},
                [&] {
                  soft_margin_loss(tensor(std::vector<int64_t>{1, 2}, {2}, kInt64),
                                   tensor(std::vector<int64_t>{1, -1}, {2}, kInt64));
                },
                {"soft_margin_loss", "expected a floating input", "int64"});
}

TEST_CASE(
    "cosine_embedding, poisson_nll, triplet_margin and the two multi-class margin losses "
    "match float64",
    "[loss]") {
  manual_seed(508);
  const double pi = 3.14159265358979323846;
  for (DType dtype : kLossDtypes) {
    CAPTURE(dtype);
    const Tensor a = normal({4, 5}, dtype), b = normal({4, 5}, dtype), c = normal({4, 5}, dtype);
    const Values av = values(a), bv = values(b), cv = values(c);
    const auto at = [](const Values& v, int64_t n, int64_t i) { return v[size_t(n * 5 + i)]; };

    // cosine_embedding_loss, target 1, -1 and a 0 that takes neither term.
    const Tensor sign = tensor({1.0, -1.0, 0.0, -1.0}, {4}).to(dtype);
    const double margin = -0.2;
    Values cosine;
    for (int64_t n = 0; n < 4; ++n) {
      double dot = 0, aa = 1e-12, bb = 1e-12;
      for (int64_t i = 0; i < 5; ++i) {
        dot += at(av, n, i) * at(bv, n, i);
        aa += at(av, n, i) * at(av, n, i);
        bb += at(bv, n, i) * at(bv, n, i);
      }
      const double cos = dot / std::sqrt(aa * bb), y = values(sign)[size_t(n)];
      cosine.push_back(y == 1 ? 1 - cos : y == -1 ? std::max(0.0, cos - margin) : 0.0);
    }

    // poisson_nll_loss over counts 0 to 4 and a fraction, as log rates and as rates.
    const Tensor counts = tensor({0.0, 1.0, 2.0, 3.0, 4.0, 0.5, 1.5, 2.5, 0.0, 1.0,
                                  2.0, 3.0, 4.0, 0.5, 1.5, 2.5, 7.0, 1.0, 0.0, 2.0},
                                 {4, 5})
                              .to(dtype);
    const Tensor rates = (rand({4, 5}, kFloat32) * 3.0 + 0.1).to(dtype);
    const Values tv = values(counts), rv = values(rates);
    Values poisson_log, poisson_rate;
    for (size_t i = 0; i < tv.size(); ++i) {
      const double t = tv[i];
      const double stirling = t > 1 ? t * std::log(t) - t + 0.5 * std::log(2 * pi * t) : 0.0;
      poisson_log.push_back(std::exp(av[i]) - t * av[i] + stirling);
      poisson_rate.push_back(rv[i] - t * std::log(rv[i] + 1e-3));
    }

    // triplet_margin_loss: p = 2 and p = 1 (eps added to each difference), swap on.
    const auto distance = [&](const Values& x, const Values& y, int64_t n, double p, double eps) {
      double total = 0;
      for (int64_t i = 0; i < 5; ++i)
        total += std::pow(std::abs(at(x, n, i) - at(y, n, i) + eps), p);
      return std::pow(total, 1 / p);
    };
    Values triplet2, triplet1_swap;
    double distances = 0.0;  // the largest distance of a row
    for (int64_t n = 0; n < 4; ++n) {
      for (const Values* other : {&bv, &cv}) {
        distances =
            std::max({distances, distance(av, *other, n, 2, 0), distance(av, *other, n, 1, 0)});
      }
      triplet2.push_back(
          std::max(0.0, 1.5 + distance(av, bv, n, 2, 1e-6) - distance(av, cv, n, 2, 1e-6)));
      const double to_negative =
          std::min(distance(av, cv, n, 1, 1e-6), distance(bv, cv, n, 1, 1e-6));
      triplet1_swap.push_back(std::max(0.0, 2.0 + distance(av, bv, n, 1, 1e-6) - to_negative));
    }

    // multi_margin_loss with p 1 and 2, a weight on the second.
    const Tensor classes = tensor(std::vector<int64_t>{1, 4, 0, 1}, {4}, kInt64);
    const Tensor weight = tensor({0.5, 1.0, 1.5, 2.0, 0.25}, {5}).to(dtype);
    const Values wv = values(weight);
    Values multi1, multi2;
    for (int64_t n = 0; n < 4; ++n) {
      const int64_t y = classes.to_vector<int64_t>()[size_t(n)];
      double one = 0, two = 0;
      for (int64_t i = 0; i < 5; ++i) {
        if (i == y) continue;
        const double z = std::max(0.0, 0.8 - at(av, n, y) + at(av, n, i));
        one += z;
        two += wv[size_t(y)] * z * z;
      }
      multi1.push_back(one / 5);
      multi2.push_back(two / 5);
    }

    // multilabel_margin_loss: targets up to the first -1 (what follows it ignored).
    const std::vector<int64_t> labels = {3, 0, -1, 1, 1, 4,  -1, -1, -1, -1,
                                         0, 1, 2,  3, 4, -1, 2,  2,  2,  2};
    const Tensor label_tensor = tensor(labels, {4, 5}, kInt64);
    Values multilabel;
    for (int64_t n = 0; n < 4; ++n) {
      std::vector<int64_t> targets;
      for (int64_t j = 0; j < 5 && labels[size_t(n * 5 + j)] != -1; ++j) {
        targets.push_back(labels[size_t(n * 5 + j)]);
      }
      double total = 0;
      for (int64_t y : targets) {
        for (int64_t i = 0; i < 5; ++i) {
          if (std::find(targets.begin(), targets.end(), i) != targets.end()) continue;
          total += std::max(0.0, 1 - (at(av, n, y) - at(av, n, i)));
        }
      }
      multilabel.push_back(total / 5);
    }

    // Each loss rounds once per op it is made of (NOTE [Composite losses]), several times on a
    // path, and the 16-bit results are held to four roundings.
    // A triplet loss is a difference of distances (about 3 here) rounded to dtype: its error is
    // relative to them, not to the difference.
    const auto check = [&](const char* loss, const Tensor& actual, const Values& expected,
                           double floor = 0.1) {
      INFO(loss);
      check_close(actual, expected, dtype, 4.0, floor);
    };
    for (const char* reduction : kReductions) {
      CAPTURE(reduction);
      check("cosine_embedding_loss", cosine_embedding_loss(a, b, sign, margin, reduction),
            reduce_reference(cosine, reduction, 4));
      check("poisson_nll_loss of log rates",
            poisson_nll_loss(a, counts, true, true, 1e-8, reduction),
            reduce_reference(poisson_log, reduction, 20));
      check("poisson_nll_loss of rates",
            poisson_nll_loss(rates, counts, false, false, 1e-3, reduction),
            reduce_reference(poisson_rate, reduction, 20));
      check("triplet_margin_loss p 2",
            triplet_margin_loss(a, b, c, 1.5, 2.0, 1e-6, false, reduction),
            reduce_reference(triplet2, reduction, 4), distances);
      check("triplet_margin_loss p 1 swapped",
            triplet_margin_loss(a, b, c, 2.0, 1.0, 1e-6, true, reduction),
            reduce_reference(triplet1_swap, reduction, 4), distances);
      check("multi_margin_loss p 1", multi_margin_loss(a, classes, 1, 0.8, {}, reduction),
            reduce_reference(multi1, reduction, 4));
      check("multi_margin_loss p 2 weighted",
            multi_margin_loss(a, classes, 2, 0.8, weight, reduction),
            reduce_reference(multi2, reduction, 4));
      check("multilabel_margin_loss", multilabel_margin_loss(a, label_tensor, reduction),
            reduce_reference(multilabel, reduction, 4));
    }
    // One sample: [D] inputs with a 0-d target give a 0-d loss.
    const Tensor one_row =
        cosine_embedding_loss(a.select(0, 1), b.select(0, 1), sign[1], margin, "none");
    CHECK(one_row.dim() == 0);
    check("cosine_embedding_loss of one row", one_row, {cosine[1]});
    const Tensor one_multi = multi_margin_loss(a.select(0, 2), classes[2], 1, 0.8, {}, "none");
    CHECK(one_multi.dim() == 0);
    check("multi_margin_loss of one row", one_multi, {multi1[2]});
    CHECK(multi_margin_loss(a.select(0, 2), classes.slice(0, 2, 3), 1, 0.8, {}, "none").sizes() ==
          Shape{1});
    const Tensor one_label = multilabel_margin_loss(a.select(0, 0), label_tensor[0], "none");
    CHECK(one_label.dim() == 0);
    check("multilabel_margin_loss of one row", one_label, {multilabel[0]});
  }
}

TEST_CASE("the margin and embedding losses reject bad inputs and leave them unchanged",
          "[loss][errors]") {
  manual_seed(509);
  const Tensor a = normal({3, 4}, kFloat32), b = normal({3, 4}, kFloat32);
  const Tensor sign = tensor({1.0, -1.0, 1.0}, {3});
  check_rejects({a, b}, [&] { cosine_embedding_loss(a, b, sign.slice(0, 0, 2)); },
                {"cosine_embedding_loss: expected target of shape [3] for inputs of shape [3, 4], "
                 "got [2]"});
  check_rejects({a, b}, [&] { cosine_embedding_loss(a, b.slice(1, 0, 3), sign); },
                {"cosine_embedding_loss", "input2 of input's shape [3, 4]", "[3, 3]"});
  check_rejects({},
                [&] {
                  cosine_embedding_loss(a.reshape({3, 2, 2}), b.reshape({3, 2, 2}), sign);
                },
                {"cosine_embedding_loss: expected inputs of shape [D] or [N, D], got [3, 2, 2]"});
  check_rejects({a},
                [&] {
                  poisson_nll_loss(a, b.reshape({4, 3}));
                },
                {"poisson_nll_loss", "target of input's shape [3, 4]", "[4, 3]"});
  check_rejects({a, b}, [&] { poisson_nll_loss(a, b, true, false, 1e-8, "batchmean"); },
                {"poisson_nll_loss", "reduction", "batchmean"});
  check_rejects({a, b}, [&] { triplet_margin_loss(a, b, b.slice(0, 0, 2)); },
                {"triplet_margin_loss", "negative of input's shape [3, 4]", "[2, 4]"});
  check_rejects({},
                [&] {
                  triplet_margin_loss(a.reshape({12}).reshape({2, 2, 3}), b, b);
                },
                {"triplet_margin_loss: expected anchor of shape [D] or [N, D], got [2, 2, 3]"});
  const Tensor classes = tensor(std::vector<int64_t>{0, 3, 1}, {3}, kInt64);
  check_rejects({a, classes}, [&] { multi_margin_loss(a, classes, 3); },
                {"multi_margin_loss: expected p 1 or 2, got 3"});
  check_rejects(
      {a, classes},
      [&] {
        multi_margin_loss(a, tensor(std::vector<int64_t>{0, 4, 1}, {3}, kInt64));
      },
      {"multi_margin_loss: expected class indices in [0, 4) with C = 4, got values from 0 "
       "to 4"});
  check_rejects({a, classes}, [&] { multi_margin_loss(a, classes.slice(0, 0, 2)); },
                {"multi_margin_loss: expected target of shape [3], got [2]"});
  check_rejects({a}, [&] { multi_margin_loss(a, sign); },
                {"multi_margin_loss: expected int64 class indices as target, got float32"});
  check_rejects({a, classes}, [&] { multi_margin_loss(a, classes, 1, 1.0, ones({3})); },
                {"multi_margin_loss: expected a floating weight of shape [4], got float32 of shape "
                 "[3]"});
  const Tensor labels =
      tensor(std::vector<int64_t>{0, -1, 0, 0, 1, 2, -1, 0, -2, -1, 0, 0}, {3, 4}, kInt64);
  check_rejects({a, labels}, [&] { multilabel_margin_loss(a, labels); },
                {"multilabel_margin_loss: expected class indices in [-1, 4) with C = 4, got "
                 "values from -2 to 2"});
  check_rejects({a}, [&] { multilabel_margin_loss(a, classes); },
                {"multilabel_margin_loss: expected target of input's shape [3, 4], got [3]"});
}

// ---- torch's conventions, on cases worked by hand ------------------------------------------

TEST_CASE("nll_loss mean divides by the weights of the targets not ignored", "[loss]") {
  const Tensor logp = tensor({-1.0, -2.0, -3.0, -4.0, -5.0, -6.0}, {3, 2});
  const Tensor t = tensor(std::vector<int64_t>{0, 1, 1}, {3}, kInt64);
  const Tensor weight = tensor({1.0, 3.0});
  // Losses 1 * 1, 3 * 4, 3 * 6 (ignoring nothing); ignore_index 1 leaves the first alone.
  CHECK(nll_loss(logp, t, weight).item<double>() == Approx((1.0 + 12.0 + 18.0) / 7.0));
  CHECK(nll_loss(logp, t, weight, /*ignore_index=*/1).item<double>() == Approx(1.0));
  CHECK(nll_loss(logp, t, {}, -100, "sum").item<double>() == Approx(1.0 + 4.0 + 6.0));
  CHECK(values(nll_loss(logp, t, weight, 0, "none")) == Values{0.0, 12.0, 18.0});
}

TEST_CASE("nll_loss and cross_entropy with every target ignored", "[loss]") {
  Tensor x = randn({3, 4}, kFloat64).requires_grad_();
  const Tensor t = full({3}, int64_t(-100), kInt64);
  // mean is 0 / 0 (NaN, as torch); sum is 0; the gradient is zero, not NaN.
  CHECK(std::isnan(nll_loss(x, t).item<double>()));
  CHECK(std::isnan(cross_entropy(x, t).item<double>()));
  CHECK(cross_entropy(x, t, {}, -100, "sum").item<double>() == 0.0);
  for (bool create_graph : {false, true}) {
    CAPTURE(create_graph);
    const Tensor g_nll = autograd::grad({nll_loss(x, t)}, {x}, {}, false, create_graph)[0];
    const Tensor g_ce = autograd::grad({cross_entropy(x, t)}, {x}, {}, false, create_graph)[0];
    CHECK(values(g_nll) == Values(12, 0.0));
    CHECK(values(g_ce) == Values(12, 0.0));
  }
}

TEST_CASE("cross_entropy of equal logits is log C and matches one-hot probabilities", "[loss]") {
  manual_seed(606);
  CHECK(cross_entropy(zeros({2, 5}), tensor(std::vector<int64_t>{1, 4}, {2}, kInt64))
            .item<double>() == Approx(std::log(5.0)));
  // Class indices and their one-hot distribution give the same loss and the same gradient,
  // with label smoothing too (unweighted, nothing ignored).
  const Tensor x = randn({4, 3}, kFloat64).requires_grad_();
  const std::vector<int64_t> tv = {2, 0, 1, 2};
  const Tensor t = tensor(tv, {4}, kInt64);
  Values one_hot(12, 0.0);
  for (size_t i = 0; i < tv.size(); ++i) one_hot[i * 3 + size_t(tv[i])] = 1.0;
  const Tensor y = tensor(one_hot, {4, 3}, kFloat64);
  for (double eps : {0.0, 0.3}) {
    const Tensor from_indices = cross_entropy(x, t, {}, -100, "mean", eps);
    const Tensor from_probabilities = cross_entropy(x, y, {}, -100, "mean", eps);
    CHECK(from_indices.item<double>() == Approx(from_probabilities.item<double>()));
    const Values g1 = values(autograd::grad({from_indices}, {x})[0]);
    const Values g2 = values(autograd::grad({from_probabilities}, {x})[0]);
    for (size_t i = 0; i < g1.size(); ++i) CHECK(g1[i] == Approx(g2[i]).margin(1e-12));
  }
}

TEST_CASE("binary_cross_entropy clamps its logs at -100", "[loss]") {
  const Tensor p = tensor({0.0, 1.0, 0.0, 1.0});
  const Tensor y = tensor({1.0, 0.0, 0.0, 1.0});
  CHECK(values(binary_cross_entropy(p, y, {}, "none")) == Values{100.0, 100.0, 0.0, 0.0});
}

TEST_CASE("binary_cross_entropy_with_logits stays finite for large logits", "[loss]") {
  Tensor x = tensor({100.0, -100.0, 100.0, -100.0}).requires_grad_();
  const Tensor y = tensor({0.0, 1.0, 1.0, 0.0});
  const Tensor losses = binary_cross_entropy_with_logits(x, y, {}, "none");
  const Values v = values(losses);  // 100 + log1p(exp(-100)), ..., log1p(exp(-100)) in float32
  CHECK(v[0] == 100.0);
  CHECK(v[1] == 100.0);
  CHECK(v[2] == Approx(0.0).margin(1e-40));
  CHECK(v[3] == Approx(0.0).margin(1e-40));
  losses.backward(ones({4}));
  CHECK(values(x.grad()) == Values{1.0, -1.0, 0.0, 0.0});  // sigmoid(x) - y
}

TEST_CASE("kl_div gives a zero target no loss and batchmean divides by the batch", "[loss]") {
  const Tensor x = tensor({-1.0, -2.0, -0.5, -3.0}, {2, 2});
  const Tensor y = tensor({0.0, 1.0, 0.5, 0.5}, {2, 2});
  const Values none = values(kl_div(x, y, "none"));
  CHECK(none[0] == 0.0);
  CHECK(none[1] == Approx(2.0));
  const double total = kl_div(x, y, "sum").item<double>();
  CHECK(kl_div(x, y, "batchmean").item<double>() == Approx(total / 2.0));
  CHECK(kl_div(x, y, "mean").item<double>() == Approx(total / 4.0));
}

TEST_CASE("losses promote mixed dtypes and give each input a gradient of its dtype", "[loss]") {
  Tensor x = randn({3}, kFloat16).requires_grad_();
  Tensor y = randn({3}, kFloat32).requires_grad_();
  const Tensor loss = mse_loss(x, y);
  CHECK(loss.dtype() == kFloat32);
  loss.backward();
  CHECK(x.grad().dtype() == kFloat16);
  CHECK(y.grad().dtype() == kFloat32);
  // Class indices: the result has input's dtype.
  Tensor logits = randn({2, 3}, kBFloat16).requires_grad_();
  const Tensor ce = cross_entropy(logits, tensor(std::vector<int64_t>{0, 2}, {2}, kInt64));
  CHECK(ce.dtype() == kBFloat16);
  ce.backward();
  CHECK(logits.grad().dtype() == kBFloat16);
}

// ---- gradients ---------------------------------------------------------------------------------

TEST_CASE("loss gradients match finite differences option by option", "[loss][gradcheck]") {
  manual_seed(707);
  const auto in = [](const Shape& sizes, double low = -2.0, double high = 2.0) {
    return (rand(sizes, kFloat64) * (high - low) + low).requires_grad_();
  };
  const Tensor weight = tensor({0.5, 2.0, 1.0, 1.5}, kFloat64);
  const Tensor t = tensor(std::vector<int64_t>{3, 1, 0, 1, 2, 1}, {2, 3}, kInt64);  // [N, d1]
  using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
  struct Case {
    const char* name;
    Fn fn;
    std::vector<Tensor> inputs;
  };
  const std::vector<Case> cases = {
      {"smooth_l1_loss beta 0",
       [](auto& v) { return smooth_l1_loss(v[0], v[1], "none", 0.0); },
       {in({5}), in({5})}},
      {"nll_loss [N C d1] weighted, ignoring 1",
       [&](auto& v) { return nll_loss(v[0], t, weight, 1, "none"); },
       {in({2, 4, 3})}},
      {"nll_loss [C]",
       [](auto& v) { return nll_loss(v[0], tensor(std::vector<int64_t>{2}, Shape{}, kInt64)); },
       {in({4})}},
      {"cross_entropy [N C d1] weighted smoothed ignoring 1 mean",
       [&](auto& v) { return cross_entropy(v[0], t, weight, 1, "mean", 0.25); },
       {in({2, 4, 3})}},
      {"cross_entropy [N C d1] none",
       [&](auto& v) { return cross_entropy(v[0], t, {}, -100, "none"); },
       {in({2, 4, 3})}},
      {"cross_entropy [C] with probabilities",
       [](auto& v) { return cross_entropy(v[0], v[1], {}, -100, "mean", 0.1); },
       {in({4}), in({4}, 0.0, 1.0)}},
      {"cross_entropy [N C d1] with probabilities weighted none",
       [&](auto& v) { return cross_entropy(v[0], v[1], weight, -100, "none"); },
       {in({2, 4, 3}), in({2, 4, 3}, 0.0, 1.0)}},
      {"binary_cross_entropy sum",
       [](auto& v) { return binary_cross_entropy(v[0], v[1], v[2], "sum"); },
       {in({2, 3}, 0.1, 0.9), in({2, 3}, 0.0, 1.0), in({2, 1}, 0.5, 1.5)}},
      {"binary_cross_entropy_with_logits mean with pos_weight",
       [](auto& v) { return binary_cross_entropy_with_logits(v[0], v[1], {}, "mean", v[2]); },
       {in({2, 3}), in({2, 3}, 0.0, 1.0), in({3}, 0.5, 3.0)}},
      {"kl_div log_target none",
       [](auto& v) { return kl_div(v[0], v[1], "none", true); },
       {in({2, 3}), in({2, 3})}},
      {"kl_div sum",
       [](auto& v) { return kl_div(v[0], v[1], "sum"); },
       {in({2, 3}), in({2, 3}, 0.2, 1.5)}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CHECK_NOTHROW(autograd::gradcheck(c.fn, c.inputs));
  }
}

TEST_CASE("cross_entropy's fused backward equals its op formula", "[loss][gradcheck]") {
  manual_seed(808);
  const Tensor x = randn({3, 5, 2}, kFloat64).requires_grad_();
  const Tensor y = rand({3, 5, 2}, kFloat64).requires_grad_();
  const Tensor t = tensor(std::vector<int64_t>{4, 0, 2, 2, 1, 3}, {3, 2}, kInt64);
  const Tensor weight = rand({5}, kFloat64) + 0.5;
  const Tensor g = randn({3, 2}, kFloat64);
  for (const char* reduction : kReductions) {
    for (double eps : {0.0, 0.2}) {
      CAPTURE(reduction, eps);
      const std::vector<Tensor> grad_output =
          std::string(reduction) == "none" ? std::vector<Tensor>{g} : std::vector<Tensor>{};
      // First order: the fused pass. create_graph: the op formula.
      const auto both = [&](const std::function<Tensor()>& loss, const std::vector<Tensor>& wrt) {
        const auto fused = autograd::grad({loss()}, wrt, grad_output, false, false);
        const auto with_ops = autograd::grad({loss()}, wrt, grad_output, false, true);
        for (size_t k = 0; k < wrt.size(); ++k) {
          const Values a = values(fused[k]), b = values(with_ops[k]);
          REQUIRE(a.size() == b.size());
          for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).margin(1e-12));
        }
      };
      both([&] { return cross_entropy(x, t, weight, 2, reduction, eps); }, {x});
      both([&] { return cross_entropy(x, y, weight, -100, reduction, eps); }, {x, y});
    }
  }
}

TEST_CASE("second derivatives of losses through create_graph", "[loss][gradcheck]") {
  manual_seed(909);
  const Tensor t = tensor(std::vector<int64_t>{1, 0, 3}, {3}, kInt64);
  const Tensor weight = tensor({0.5, 2.0, 1.0, 1.5}, kFloat64);
  const auto gradient_of = [](const std::function<Tensor(const std::vector<Tensor>&)>& loss) {
    return [loss](const std::vector<Tensor>& in) {
      return autograd::grad({loss(in)}, {in[0]}, {}, true, true)[0];
    };
  };
  const Tensor x = randn({3, 4}, kFloat64).requires_grad_();
  const Tensor y = rand({3, 4}, kFloat64).requires_grad_();
  CHECK_NOTHROW(autograd::gradcheck(
      gradient_of([&](auto& in) { return cross_entropy(in[0], t, weight, 0, "mean", 0.2); }), {x}));
  CHECK_NOTHROW(autograd::gradcheck(
      gradient_of([](auto& in) { return cross_entropy(in[0], in[1], {}, -100, "sum", 0.1); }),
      {x, y}));
  CHECK_NOTHROW(autograd::gradcheck(
      gradient_of([](auto& in) { return binary_cross_entropy_with_logits(in[0], in[1]); }),
      {x, y}));
  CHECK_NOTHROW(autograd::gradcheck(
      gradient_of([](auto& in) { return smooth_l1_loss(in[0], in[1], "sum", 0.8); }), {x, y}));
}

TEST_CASE("nll_loss and cross_entropy do not differentiate weight", "[loss][errors]") {
  Tensor x = randn({2, 3}, kFloat64).requires_grad_();
  Tensor weight = ones({3}, kFloat64).requires_grad_();
  const Tensor t = tensor(std::vector<int64_t>{0, 2}, {2}, kInt64);
  CHECK_THROWS_WITH(nll_loss(x, t, weight).backward(),
                    Contains("nll_loss: expected a weight that does not require grad"));
  CHECK_THROWS_WITH(cross_entropy(x, t, weight).backward(),
                    Contains("cross_entropy: expected a weight that does not require grad"));
  CHECK_NOTHROW(cross_entropy(x, t, weight.detach()).backward());
}

// ---- bad inputs ------------------------------------------------------------------------------

TEST_CASE("pointwise losses reject bad inputs and leave them unchanged", "[loss][errors]") {
  manual_seed(1001);
  const Tensor x = randn({2, 3}), y = randn({2, 3}), column = randn({2, 1});
  const Tensor integers = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3}, kInt64);
  check_rejects({x, column}, [&] { mse_loss(x, column); },
                {"mse_loss: expected target of input's shape [2, 3], got [2, 1]"});
  check_rejects({x, y}, [&] { l1_loss(x, y.t()); },
                {"l1_loss: expected target of input's shape [2, 3], got [3, 2]"});
  check_rejects({integers, y}, [&] { mse_loss(integers, y); },
                {"mse_loss: expected a floating input, got int64"});
  check_rejects({x, integers}, [&] { smooth_l1_loss(x, integers); },
                {"smooth_l1_loss: expected a floating target, got int64"});
  check_rejects({x, y}, [&] { smooth_l1_loss(x, y, "mean", -0.5); },
                {"smooth_l1_loss: expected beta >= 0, got -0.5"});
  check_rejects({x, y}, [&] { mse_loss(x, y, "avg"); },
                {"mse_loss: expected reduction \"none\", \"mean\", or \"sum\", got \"avg\""});
  check_rejects({x, y}, [&] { l1_loss(x, y, "batchmean"); },
                {"l1_loss: expected reduction", "got \"batchmean\""});
  check_rejects({x, y}, [&] { kl_div(x, y, "batch"); },
                {"kl_div: expected reduction \"none\", \"mean\", \"batchmean\" or \"sum\", got "
                 "\"batch\""});
  check_rejects({x, column}, [&] { kl_div(x, column); },
                {"kl_div: expected target of input's shape [2, 3], got [2, 1]"});
}

TEST_CASE("binary cross entropies reject bad inputs and leave them unchanged", "[loss][errors]") {
  manual_seed(1002);
  const Tensor p = rand({2, 3}), y = rand({2, 3}), logits = randn({2, 3});
  const Tensor outside = tensor({0.5, 1.5, 0.25, -0.25, 0.5, 0.5}, {2, 3});
  check_rejects({outside, y}, [&] { binary_cross_entropy(outside, y); },
                {"binary_cross_entropy: expected every element of input in [0, 1]",
                 "got values from -0.25 to 1.5"});
  const Tensor with_nan = tensor({0.5, NAN, 0.25, 0.5, 0.5, 0.5}, {2, 3});
  CHECK_THROWS_WITH(binary_cross_entropy(with_nan, y),
                    Contains("binary_cross_entropy: expected every element of input in [0, 1]"));
  const Tensor bad_weight = ones({2});
  check_rejects({p, y, bad_weight}, [&] { binary_cross_entropy(p, y, bad_weight); },
                {"binary_cross_entropy: expected weight broadcastable to input's shape [2, 3], "
                 "got [2]"});
  check_rejects({logits, y, bad_weight},
                [&] { binary_cross_entropy_with_logits(logits, y, {}, "mean", bad_weight); },
                {"binary_cross_entropy_with_logits: expected pos_weight broadcastable to input's "
                 "shape [2, 3], got [2]"});
  const Tensor labels = tensor(std::vector<int64_t>{0, 1, 1, 0, 1, 0}, {2, 3}, kInt64);
  check_rejects({logits, labels}, [&] { binary_cross_entropy_with_logits(logits, labels); },
                {"binary_cross_entropy_with_logits: expected a floating target, got int64"});
  check_rejects({p, y},
                [&] {
                  binary_cross_entropy(p, y.reshape({3, 2}));
                },
                {"binary_cross_entropy: expected target of input's shape [2, 3], got [3, 2]"});
}

TEST_CASE("nll_loss and cross_entropy reject bad targets and leave inputs unchanged",
          "[loss][errors]") {
  manual_seed(1003);
  const Tensor x = randn({3, 4});
  const Tensor t = tensor(std::vector<int64_t>{0, 3, 1}, {3}, kInt64);
  const Tensor too_large = tensor(std::vector<int64_t>{0, 7, 1}, {3}, kInt64);
  const Tensor negative = tensor(std::vector<int64_t>{0, -1, 1}, {3}, kInt64);
  check_rejects({x, too_large}, [&] { nll_loss(x, too_large); },
                {"nll_loss: expected class indices in [0, C) with C = 4 (or ignore_index -100)",
                 "got 7 at target element 1"});
  check_rejects({x, negative}, [&] { cross_entropy(x, negative); },
                {"cross_entropy: expected class indices in [0, C) with C = 4", "got -1"});
  CHECK_NOTHROW(cross_entropy(x, negative, {}, /*ignore_index=*/-1));
  const Tensor float_target = tensor({0.0, 3.0, 1.0});
  check_rejects({x, float_target}, [&] { nll_loss(x, float_target); },
                {"nll_loss: expected an int64 target of class indices, got float32"});
  const Tensor int32_target = tensor(std::vector<int32_t>{0, 3, 1}, {3}, kInt32);
  check_rejects({x, int32_target}, [&] { cross_entropy(x, int32_target); },
                {"cross_entropy: expected an int64 target of class indices, got int32"});
  const Tensor long_target = tensor(std::vector<int64_t>{0, 3, 1, 2}, {4}, kInt64);
  check_rejects({x, long_target}, [&] { nll_loss(x, long_target); },
                {"nll_loss: expected a target of shape [3] for input of shape [3, 4], got [4]"});
  const Tensor probabilities = rand({3, 5});
  check_rejects({x, probabilities}, [&] { cross_entropy(x, probabilities); },
                {"cross_entropy: expected a target of class probabilities of input's shape [3, 4], "
                 "got [3, 5]"});
  const Tensor weight = ones({5});
  check_rejects({x, t, weight}, [&] { nll_loss(x, t, weight); },
                {"nll_loss: expected a weight of shape [4] (one per class), got [5]"});
  const Tensor scalar = tensor({1.0}).reshape({});
  check_rejects({scalar},
                [&] { nll_loss(scalar, tensor(std::vector<int64_t>{0}, Shape{}, kInt64)); },
                {"nll_loss: expected input of shape [C], [N, C] or [N, C, d1, ...], got a 0-d "
                 "tensor"});
  const Tensor integer_input = tensor(std::vector<int64_t>{1, 2, 3, 4}, {1, 4}, kInt64);
  check_rejects({integer_input}, [&] { cross_entropy(integer_input, t.slice(0, 0, 1)); },
                {"cross_entropy: expected a floating input, got int64"});
  check_rejects({x, t}, [&] { cross_entropy(x, t, {}, -100, "mean", 1.5); },
                {"cross_entropy: expected label_smoothing in [0, 1], got 1.5"});
  check_rejects({x, t}, [&] { nll_loss(x, t, {}, -100, "Mean"); },
                {"nll_loss: expected reduction", "got \"Mean\""});
}

// ---- autocast ----------------------------------------------------------------------------------

TEST_CASE("the losses' cast policies are torch's", "[loss][autocast]") {
  for (OpId op : {OpId::mse_loss, OpId::l1_loss, OpId::smooth_l1_loss, OpId::nll_loss,
                  OpId::cross_entropy, OpId::binary_cross_entropy_with_logits, OpId::kl_div,
                  OpId::cosine_embedding_loss, OpId::poisson_nll_loss, OpId::triplet_margin_loss,
                  OpId::multi_margin_loss, OpId::multilabel_margin_loss}) {
    CAPTURE(op_name(op));
    CHECK(amp::cast_policy(op, kCUDA) == CastPolicy::Fp32);
    CHECK(amp::cast_policy(op, kCPU) == CastPolicy::Fp32);
  }
  CHECK(amp::cast_policy(OpId::binary_cross_entropy, kCUDA) == CastPolicy::Banned);
  CHECK(amp::cast_policy(OpId::binary_cross_entropy, kCPU) == CastPolicy::Fp32);
}

TEST_CASE("a banned binary_cross_entropy names the with-logits form", "[loss][autocast]") {
  ResetPoliciesAtExit reset;
  const Tensor p = rand({2, 3}), y = rand({2, 3});
  amp::set_cast_policy(OpId::binary_cross_entropy, kCPU, CastPolicy::Banned);
  {
    amp::Autocast autocast(kCPU);
    check_rejects({p, y}, [&] { binary_cross_entropy(p, y); },
                  {"binary_cross_entropy is unsafe to autocast on cpu",
                   "Use binary_cross_entropy_with_logits"});
    CHECK_NOTHROW(binary_cross_entropy_with_logits(p, y));
  }
  CHECK_NOTHROW(binary_cross_entropy(p, y));  // outside autocast it runs
  amp::reset_cast_policies();
  CHECK(amp::cast_policy(OpId::binary_cross_entropy, kCPU) == CastPolicy::Fp32);
}

TEST_CASE("losses run in float32 under CPU autocast", "[loss][autocast]") {
  manual_seed(1101);
  Tensor x = randn({3, 4}, kBFloat16).requires_grad_();
  const Tensor y = rand({3, 4}, kBFloat16);
  const Tensor p = (rand({3, 4}, kFloat32) * 0.9 + 0.05).to(kBFloat16);
  const Tensor t = tensor(std::vector<int64_t>{0, 3, 1}, {3}, kInt64);
  const Tensor weight = rand({4}, kBFloat16) + 0.5;
  // Each loss of its inputs converted to d (nothing to convert for bfloat16).
  using Loss = std::function<Tensor(DType)>;
  const std::vector<std::pair<const char*, Loss>> losses = {
      {"mse_loss", [&](DType d) { return mse_loss(x.to(d), y.to(d)); }},
      {"l1_loss", [&](DType d) { return l1_loss(x.to(d), y.to(d)); }},
      {"smooth_l1_loss", [&](DType d) { return smooth_l1_loss(x.to(d), y.to(d)); }},
      {"nll_loss", [&](DType d) { return nll_loss(x.to(d), t, weight.to(d)); }},
      {"cross_entropy", [&](DType d) { return cross_entropy(x.to(d), t, weight.to(d)); }},
      {"cross_entropy with probabilities",
       [&](DType d) { return cross_entropy(x.to(d), y.to(d)); }},
      {"binary_cross_entropy", [&](DType d) { return binary_cross_entropy(p.to(d), y.to(d)); }},
      {"binary_cross_entropy_with_logits",
       [&](DType d) {
         return binary_cross_entropy_with_logits(x.to(d), y.to(d), weight.to(d), "mean",
                                                 weight.to(d));
       }},
      {"kl_div", [&](DType d) { return kl_div(x.to(d), y.to(d), "batchmean"); }},
      {"cosine_embedding_loss",
       [&](DType d) { return cosine_embedding_loss(x.to(d), y.to(d), t.to(kFloat32) - 1.0); }},
      {"poisson_nll_loss", [&](DType d) { return poisson_nll_loss(x.to(d), (y * 3.0).to(d)); }},
      {"triplet_margin_loss",
       [&](DType d) { return triplet_margin_loss(x.to(d), y.to(d), p.to(d), 0.5); }},
      {"multi_margin_loss",
       [&](DType d) { return multi_margin_loss(x.to(d), t, 2, 1.0, weight.to(d)); }},
      {"multilabel_margin_loss",
       [&](DType d) { return multilabel_margin_loss(x.to(d), one_hot(t, 4) - 1); }},
  };
  for (const auto& [name, loss] : losses) {
    CAPTURE(name);
    Tensor under_autocast;
    {
      amp::Autocast autocast(kCPU, kBFloat16);
      under_autocast = loss(kBFloat16);
    }
    CHECK(under_autocast.dtype() == kFloat32);
    // Autocast widens the inputs to float32 exactly: the loss of float32 copies.
    CHECK(under_autocast.item<double>() == loss(kFloat32).item<double>());
    if (under_autocast.requires_grad()) {
      x.mutable_grad() = Tensor();
      under_autocast.backward();
      CHECK(x.grad().dtype() == kBFloat16);  // the gradient flows back through the cast
    }
  }
}
