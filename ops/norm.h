// Normalisation ops: softmax, log_softmax, layer_norm, group_norm, batch_norm (ops/norm.cpp).
//
// Names, argument order and defaults are torch.nn.functional's, for these and the other nn
// ops (ops/conv.h, pool.h, embedding.h, dropout.h, activation.h). An undefined Tensor ({})
// stands for an absent optional tensor (weight, bias, running statistics). Each op has a
// backward that can itself be differentiated (create_graph), so gradient penalties work
// through every one.
//
//   Tensor h = conv2d(x, w, b, /*stride=*/{1, 1}, /*padding=*/{1, 1});   // [N, O, H, W]
//   h = max_pool2d(relu(batch_norm(h, rm, rv, gamma, beta, /*training=*/true)), {2, 2});
//   Tensor p = softmax(h.flatten(1), -1);
#pragma once

#include <cstdint>
#include <optional>

#include "halfgrad/core/tensor.h"

namespace hg {

// softmax along dim; dtype: cast the input to it first (then autocast leaves the call alone).
Tensor softmax(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
// softmax(-x, dim): torch.nn.functional.softmin.
Tensor softmin(const Tensor& x, int64_t dim, std::optional<DType> dtype = std::nullopt);
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

}  // namespace hg
