// Gradcheck samples of the nn ops (ops/norm.cpp, conv.cpp, pool.cpp, embedding.cpp,
// dropout.cpp, activation.cpp), and of their backward ops, reached by differentiating a
// gradient (create_graph).
#include "../gradcheck_samples.h"

namespace hg::testing {
namespace {

// The gradient of sum(f(x)^3) with respect to x, recorded: its backward runs the backward
// ops of whatever f used (the cube makes the gradient depend on x).
Tensor recorded_grad(const Tensor& y, const Tensor& x) {
  return autograd::grad({sum(mul(mul(y, y), y))}, {x}, {}, /*retain_graph=*/true,
                        /*create_graph=*/true)[0];
}

const bool registered = register_samples([](std::map<OpId, Sample>& s) {
  s[OpId::softmax] = one([](auto& x) { return softmax(x, 1); }, [] { return input({2, 4}); });
  s[OpId::softmin] = one([](auto& x) { return softmin(x, 1); }, [] { return input({2, 4}); });
  s[OpId::log_softmax] = one([](auto& x) { return log_softmax(x, 0); },
                             [] {
                               return input({3, 2});
                             });
  s[OpId::layer_norm] =
      Sample{[](const Inputs& in) { return layer_norm(in[0], {4}, in[1], in[2]); },
             [] {
               return Inputs{input({2, 3, 4}), input({4}), input({4})};
             }};
  s[OpId::group_norm] = Sample{[](const Inputs& in) { return group_norm(in[0], 2, in[1], in[2]); },
                               [] {
                                 return Inputs{input({2, 4, 3}), input({4}), input({4})};
                               }};
  // Training and eval (with constant running statistics) in one sample.
  s[OpId::batch_norm] =
      Sample{[](const Inputs& in) {
               const Tensor running_mean = placed(tensor({0.3, -0.2}, kFloat64));
               const Tensor running_var = placed(tensor({0.8, 1.5}, kFloat64));
               return add(batch_norm(in[0], {}, {}, in[1], in[2], true),
                          batch_norm(in[0], running_mean, running_var, in[1], in[2], false));
             },
             [] {
               return Inputs{input({3, 2, 2}), input({2}), input({2})};
             }};
  s[OpId::embedding] = one(
      [](auto& weight) {
        return embedding(weight, placed(tensor(std::vector<int64_t>{4, 0, 2, 4, 1, 0}, {2, 3})));
      },
      [] {
        return input({5, 3});
      });
  // A generator seeded afresh on every call: the same mask for each finite difference.
  s[OpId::dropout] = one(
      [](auto& x) {
        Generator generator(7);
        return dropout(x, 0.4, true, &generator);
      },
      [] {
        return input({3, 5});
      });
  s[OpId::conv2d] = Sample{[](const Inputs& in) {
                             return conv2d(in[0], in[1], in[2], {2, 1}, {1, 2}, {1, 2}, 2);
                           },
                           [] {
                             return Inputs{input({2, 4, 5, 5}), input({4, 2, 3, 3}), input({4})};
                           }};
  s[OpId::conv1d] = Sample{[](const Inputs& in) { return conv1d(in[0], in[1], in[2], 2, 1, 2, 2); },
                           [] {
                             return Inputs{input({2, 4, 9}), input({4, 2, 3}), input({4})};
                           }};
  s[OpId::conv_transpose2d] =
      Sample{[](const Inputs& in) {
               return conv_transpose2d(in[0], in[1], in[2], {2, 1}, {1, 0}, {1, 0}, 2, {1, 2});
             },
             [] {
               return Inputs{input({2, 4, 3, 3}), input({4, 3, 2, 2}), input({6})};
             }};
  s[OpId::interpolate] = one(
      [](auto& x) {
        return interpolate(x, std::vector<int64_t>{5, 3}, std::nullopt, "bilinear") +
               interpolate(x, std::vector<int64_t>{5, 3}, std::nullopt, "bilinear", true) +
               interpolate(x, std::vector<int64_t>{5, 3});
      },
      [] {
        return input({1, 2, 3, 4});
      });
  // grid_sample: points inside and outside the input, each mode, each padding.
  s[OpId::grid_sample] = two(
      [](auto& x, auto& grid) {
        return grid_sample(x, grid) + grid_sample(x, grid, "bilinear", "border", true) +
               grid_sample(x, grid, "bilinear", "reflection") +
               grid_sample(x, grid, "bicubic", "zeros", true) +
               grid_sample(x, grid, "bicubic", "reflection") + grid_sample(x, grid, "nearest");
      },
      [] {
        return Inputs{input({1, 2, 3, 4}), input({1, 2, 3, 2}, -1.2, 1.2)};
      });
  s[OpId::max_pool1d] = one([](auto& x) { return max_pool1d(x, 3, 2, 1); },
                            [] {
                              return input({2, 3, 7});
                            });
  s[OpId::avg_pool1d] = one([](auto& x) { return avg_pool1d(x, 3, 2, 1, false, false); },
                            [] {
                              return input({2, 3, 7});
                            });
  s[OpId::adaptive_avg_pool2d] = one(
      [](auto& x) {
        return adaptive_avg_pool2d(x, {3, 4});
      },
      [] {
        return input({1, 2, 5, 7});
      });
  s[OpId::max_pool2d] = one(
      [](auto& x) {
        return add(sum(max_pool2d(x, {2, 3}, {1, 2}, {1, 1})),
                   sum(max_pool2d(x, {2, 2}, {2, 1}, {1, 0}, {2, 2}, true)));
      },
      [] {
        return input({1, 2, 5, 5});
      });
  s[OpId::avg_pool2d] = one(
      [](auto& x) {
        return add(add(avg_pool2d(x, {3, 2}, {2, 1}, {1, 1}, false, true),
                       avg_pool2d(x, {3, 2}, {2, 1}, {1, 1}, false, false)),
                   avg_pool2d(x, {3, 2}, {2, 1}, {1, 1}, true, true, 5));
      },
      [] {
        return input({2, 5, 4});
      });
  s[OpId::prelu] =
      Sample{[](const Inputs& in) { return add(prelu(in[0], in[1]), mean(prelu(in[0], in[2]))); },
             [] {
               return Inputs{input({2, 3, 4}), input({3}), input({1})};
             }};
  // Backward ops.
  s[OpId::embedding_backward] = one(
      [](auto& weight) {
        const Tensor indices = placed(tensor(std::vector<int64_t>{3, 1, 3, 0, 2}, kInt64));
        return recorded_grad(embedding(weight, indices, /*padding_idx=*/1), weight);
      },
      [] {
        return input({4, 2});
      });
  s[OpId::avg_pool2d_backward] = one(
      [](auto& x) {
        return recorded_grad(avg_pool2d(x, {2, 2}, {1, 1}, {1, 0}, false, false), x);
      },
      [] {
        return input({1, 3, 4});
      });
  s[OpId::conv2d_input_backward] =
      Sample{[](const Inputs& in) {
               return recorded_grad(conv2d(in[0], in[1], {}, {1, 2}, {1, 1}), in[0]);
             },
             [] {
               return Inputs{input({1, 2, 4, 4}), input({3, 2, 2, 2})};
             }};
  s[OpId::conv2d_weight_backward] =
      Sample{[](const Inputs& in) {
               return recorded_grad(conv2d(in[0], in[1], {}, {1, 1}, {0, 1}, {2, 1}), in[1]);
             },
             [] {
               return Inputs{input({2, 2, 5, 3}), input({2, 2, 2, 2})};
             }};
});

}  // namespace
}  // namespace hg::testing
