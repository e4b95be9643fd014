// Neural-network ops: softmax, log_softmax, layer_norm, group_norm, batch_norm, embedding,
// dropout, conv2d, max_pool2d, avg_pool2d, prelu (ops/nn_ops.cpp).
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg {}  // namespace hg
