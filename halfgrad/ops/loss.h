// Losses: mse_loss, l1_loss, smooth_l1_loss, nll_loss, cross_entropy, binary_cross_entropy,
// binary_cross_entropy_with_logits, kl_div (ops/loss.cpp).
#pragma once

#include "halfgrad/core/tensor.h"

namespace hg {}  // namespace hg
