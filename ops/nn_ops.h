// Neural-network ops: softmax, log_softmax, layer_norm, group_norm, batch_norm, embedding,
// dropout, conv2d, max_pool2d, avg_pool2d, prelu (ops/nn_ops.cpp).
//
// Names, argument order and defaults are torch.nn.functional's. An undefined Tensor ({}) stands
// for an absent optional tensor (weight, bias, running statistics). Each op has a backward that
// can itself be differentiated (create_graph), so gradient penalties work through every one.
//
//   Tensor h = conv2d(x, w, b, /*stride=*/{1, 1}, /*padding=*/{1, 1});   // [N, O, H, W]
//   h = max_pool2d(relu(batch_norm(h, rm, rv, gamma, beta, /*training=*/true)), {2, 2});
//   Tensor p = softmax(h.flatten(1), -1);
#pragma once

#include <array>
#include <cstdint>
#include <optional>

#include "halfgrad/core/tensor.h"

namespace hg {

class Generator;

// softmax along dim; dtype: cast the input to it first (then autocast leaves the call alone).
Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// log(softmax(x)) along dim, computed without forming softmax; dtype as for softmax.
Tensor log_softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);

// Normalises over the trailing dims normalized_shape, then * weight + bias (both of
// normalized_shape, optional). weight/bias may be float32 for a float16/bfloat16 input.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// x: [N, C, *]; normalises each of num_groups channel groups per sample, then * weight + bias
// ([C], optional).
Tensor group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);
// x: [N, C, *]; per-channel batch statistics when training (updating running_mean/running_var in
// place when given), the running statistics otherwise; then * weight + bias ([C], optional).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                  double momentum = 0.1, double eps = 1e-5);

// The rows of weight [num_embeddings, D] picked by indices (int64 or int32) -> [*indices, D].
// Row padding_idx (-1: none) gets no gradient.
Tensor embedding(const Tensor& weight, const Tensor& indices, int64_t padding_idx = -1);

// Zeroes each element with probability p and scales the rest by 1 / (1 - p); returns x itself
// when not training. generator: nullptr draws from default_generator().
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
               Generator* generator = nullptr);

// x: [N, C, H, W] or [C, H, W]; weight: [O, C / groups, kH, kW]; bias: [O] (optional).
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              std::array<int64_t, 2> stride = {1, 1}, std::array<int64_t, 2> padding = {0, 0},
              std::array<int64_t, 2> dilation = {1, 1}, int64_t groups = 1);

// x: [N, C, H, W] or [C, H, W]. stride {0, 0} (the default) means stride = kernel_size.
Tensor max_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride = {}, std::array<int64_t, 2> padding = {0, 0});
// As max_pool2d; count_include_pad: padded positions count in each window's divisor.
Tensor avg_pool2d(const Tensor& x, std::array<int64_t, 2> kernel_size,
                  std::array<int64_t, 2> stride = {}, std::array<int64_t, 2> padding = {0, 0},
                  bool count_include_pad = true);

// max(0, x) + weight * min(0, x); weight has 1 element or one per channel (x's dim 1).
Tensor prelu(const Tensor& x, const Tensor& weight);

}  // namespace hg
