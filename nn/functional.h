// nn::functional: torch.nn.functional's names for halfgrad's ops, so that
// `nn::functional::cross_entropy(logits, targets)` reads as in PyTorch. These are the ops
// themselves (using-declarations), not wrappers.
#pragma once

#include "halfgrad/ops/ops.h"

namespace hg::nn::functional {

// activations
using hg::elu;
using hg::gelu;
using hg::glu;
using hg::hardswish;
using hg::leaky_relu;
using hg::log_softmax;
using hg::mish;
using hg::prelu;
using hg::relu;
using hg::sigmoid;
using hg::silu;
using hg::softmax;
using hg::softplus;
using hg::tanh;

// layers
using hg::adaptive_avg_pool2d;
using hg::avg_pool1d;
using hg::avg_pool2d;
using hg::batch_norm;
using hg::conv1d;
using hg::conv2d;
using hg::conv_transpose2d;
using hg::dropout;
using hg::embedding;
using hg::group_norm;
using hg::interpolate;
using hg::layer_norm;
using hg::linear;
using hg::max_pool1d;
using hg::max_pool2d;
using hg::one_hot;
using hg::pad;
using hg::scaled_dot_product_attention;

// distances and normalisation
using hg::cosine_similarity;
using hg::normalize;

// losses
using hg::binary_cross_entropy;
using hg::binary_cross_entropy_with_logits;
using hg::cross_entropy;
using hg::kl_div;
using hg::l1_loss;
using hg::mse_loss;
using hg::nll_loss;
using hg::smooth_l1_loss;

}  // namespace hg::nn::functional
