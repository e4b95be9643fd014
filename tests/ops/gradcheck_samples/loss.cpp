// Gradcheck samples of the losses. Each sample adds up the loss under several reductions and
// options, so one Jacobian covers them; loss_test.cpp checks them one by one as well.
#include "../gradcheck_samples.h"

namespace hg::testing {
namespace {

Tensor indices(const std::vector<int64_t>& values, const Shape& sizes) {
  return placed(tensor(values, sizes, kInt64));
}

const bool registered = register_samples([](std::map<OpId, Sample>& s) {
  s[OpId::mse_loss] =
      two([](auto& x,
             auto& y) { return mse_loss(x, y, "none") + mse_loss(x, y) + mse_loss(x, y, "sum"); },
          [] {
            return Inputs{input({2, 3}), input({2, 3})};
          });
  s[OpId::margin_ranking_loss] = Sample{
      [](const Inputs& in) {
        const Tensor sign = placed(tensor({1.0, -1.0, -1.0, 1.0, 1.0, -1.0}, {2, 3}, kFloat64));
        return margin_ranking_loss(in[0], in[1], sign, 0.2, "none") +
               margin_ranking_loss(in[0], in[1], in[2]) +
               margin_ranking_loss(in[0], in[1], sign, 0.0, "sum");
      },
      [] {
        return Inputs{input({2, 3}), input({2, 3}), input({2, 3})};
      }};
  s[OpId::hinge_embedding_loss] = one(
      [](auto& x) {
        const Tensor t = placed(tensor({1.0, -1.0, 0.0, -1.0, 1.0, -1.0}, {2, 3}, kFloat64));
        return hinge_embedding_loss(x, t, 2.5, "none") + hinge_embedding_loss(x, t) +
               hinge_embedding_loss(x, t, 3.0, "sum");
      },
      [] {
        return input({2, 3});
      });
  s[OpId::soft_margin_loss] = two(
      [](auto& x, auto& y) {
        return soft_margin_loss(x, y, "none") + soft_margin_loss(x, y) +
               soft_margin_loss(x, y, "sum");
      },
      [] {
        return Inputs{input({2, 3}), input({2, 3})};
      });
  s[OpId::huber_loss] = two(
      [](auto& x, auto& y) {
        return huber_loss(x, y, "none", 0.7) + huber_loss(x, y) + huber_loss(x, y, "sum", 2.0);
      },
      [] {
        return Inputs{input({3, 4}), input({3, 4})};
      });
  s[OpId::cosine_embedding_loss] =
      Sample{[](const Inputs& in) {
               const Tensor sign = placed(tensor({1.0, -1.0, -1.0}, {3}, kFloat64));
               return cosine_embedding_loss(in[0], in[1], sign, -0.9, "none") +
                      cosine_embedding_loss(in[0], in[1], sign) +
                      cosine_embedding_loss(in[2], in[1].select(0, 0),
                                            placed(full(Shape{}, -1.0, kFloat64)), -0.5);
             },
             [] {
               return Inputs{input({3, 4}), input({3, 4}), input({4})};
             }};
  // poisson_nll_loss: log rates, rates (positive), and the Stirling term for targets above 1
  // (target gets a gradient too).
  s[OpId::poisson_nll_loss] =
      Sample{[](const Inputs& in) {
               return poisson_nll_loss(in[0], in[2], true, false, 1e-8, "none") +
                      poisson_nll_loss(in[1], in[2], false, false, 0.5) +
                      poisson_nll_loss(in[0], in[2], true, true, 1e-8, "sum");
             },
             [] {
               return Inputs{input({2, 3}), positive({2, 3}), input({2, 3}, 0.0, 3.0)};
             }};
  s[OpId::triplet_margin_loss] =
      Sample{[](const Inputs& in) {
               return triplet_margin_loss(in[0], in[1], in[2], 3.0, 2.0, 1e-6, false, "none") +
                      triplet_margin_loss(in[0], in[1], in[2], 4.0, 1.0, 1e-6, true) +
                      triplet_margin_loss(in[0], in[1], in[2], 3.5, 3.0, 1e-3, true, "sum");
             },
             [] {
               return Inputs{input({3, 4}), input({3, 4}), input({3, 4})};
             }};
  s[OpId::multi_margin_loss] = two(
      [](auto& x, auto& weight) {
        const Tensor t = indices({2, 0, 3}, {3});
        return multi_margin_loss(x, t, 1, 1.5, {}, "none") +
               multi_margin_loss(x, t, 2, 2.0, weight) +
               multi_margin_loss(x.select(0, 1), indices({1}, {}), 1, 1.0, weight, "sum");
      },
      [] {
        return Inputs{input({3, 4}), input({4}, 0.5, 1.5)};
      });
  s[OpId::multilabel_margin_loss] = one(
      [](auto& x) {
        // Row 0: classes 3 and 1 (the 2 after the -1 does not count); row 1: every class; row
        // 2: none; row 3: class 0 twice (counted twice, as torch's kernel).
        const Tensor t = indices({3, 1, -1, 2, 0, 1, 2, 3, -1, 0, 0, 0, 0, 0, -1, 1}, {4, 4});
        return multilabel_margin_loss(x, t, "none") + multilabel_margin_loss(x, t) +
               multilabel_margin_loss(x.select(0, 0), t.select(0, 0), "sum");
      },
      [] {
        return input({4, 4});
      });
  s[OpId::l1_loss] = two(
      [](auto& x, auto& y) { return l1_loss(x, y, "none") + l1_loss(x, y) + l1_loss(x, y, "sum"); },
      [] {
        return Inputs{input({2, 3}), input({2, 3})};
      });
  s[OpId::smooth_l1_loss] = two(
      [](auto& x, auto& y) {
        return smooth_l1_loss(x, y, "none", 0.7) + smooth_l1_loss(x, y) +
               smooth_l1_loss(x, y, "sum", 0.0);
      },
      [] {
        return Inputs{input({3, 4}), input({3, 4})};
      });
  // nll_loss: [N, C] with a weight and an ignored target, and [N, C, d] without.
  s[OpId::nll_loss] = two(
      [](auto& x, auto& x_spatial) {
        const Tensor weight = placed(tensor({0.5, 1.0, 2.0, 1.5}, kFloat64));
        const Tensor t = indices({0, 3, 2}, {3});
        const Tensor t_spatial = indices({1, 0, 2, 2}, {2, 2});
        return nll_loss(x, t, weight, /*ignore_index=*/2, "none") +
               nll_loss(x, t, weight, /*ignore_index=*/2) + nll_loss(x, t, {}, -100, "sum") +
               nll_loss(x_spatial, t_spatial);
      },
      [] {
        return Inputs{input({3, 4}), input({2, 3, 2})};
      });
  // cross_entropy: class indices (weight, ignore_index, label smoothing), class probabilities
  // (weight, label smoothing; the target gets a gradient too) and trailing dims.
  s[OpId::cross_entropy] =
      Sample{[](const Inputs& in) {
               const Tensor &x = in[0], &probabilities = in[1], &x_spatial = in[2];
               const Tensor weight = placed(tensor({0.5, 1.0, 2.0, 1.5}, kFloat64));
               const Tensor t = indices({0, 3, 2}, {3});
               const Tensor t_spatial = indices({1, 0, 2, 2}, {2, 2});
               return cross_entropy(x, t, weight, /*ignore_index=*/2, "mean", 0.1) +
                      cross_entropy(x, t, {}, -100, "none") +
                      cross_entropy(x, probabilities, weight, -100, "sum", 0.2) +
                      cross_entropy(x_spatial, t_spatial, {}, -100, "none", 0.3).reshape({4, 1});
             },
             [] {
               return Inputs{input({3, 4}), input({3, 4}, 0.0, 1.0), input({2, 3, 2})};
             }};
  s[OpId::binary_cross_entropy] = Sample{
      [](const Inputs& in) {
        return binary_cross_entropy(in[0], in[1], in[2], "none") +
               binary_cross_entropy(in[0], in[1]);
      },
      [] {
        return Inputs{input({2, 3}, 0.1, 0.9), input({2, 3}, 0.0, 1.0), input({3}, 0.5, 1.5)};
      }};
  s[OpId::binary_cross_entropy_with_logits] =
      Sample{[](const Inputs& in) {
               return binary_cross_entropy_with_logits(in[0], in[1], in[2], "none", in[3]) +
                      binary_cross_entropy_with_logits(in[0], in[1]) +
                      binary_cross_entropy_with_logits(in[0], in[1], in[2], "sum");
             },
             [] {
               return Inputs{input({2, 3}), input({2, 3}, 0.0, 1.0), input({2, 1}, 0.5, 1.5),
                             input({3}, 0.5, 3.0)};
             }};
  s[OpId::kl_div] = Sample{[](const Inputs& in) {
                             return kl_div(in[0], in[1], "none") +
                                    kl_div(in[0], in[1], "batchmean") +
                                    kl_div(in[0], in[2], "mean", /*log_target=*/true);
                           },
                           [] {
                             return Inputs{input({2, 3}), positive({2, 3}), input({2, 3})};
                           }};
});

}  // namespace
}  // namespace hg::testing
