// nn::utils: gradient clipping, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_, and
// parameters_to_vector / vector_to_parameters.
//
//   Tensor total = nn::utils::clip_grad_norm_(model->parameters(), 1.0);
#pragma once

#include <limits>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::nn::utils {

// The norm (norm_type: p > 0, or infinity) of all gradients together, as if concatenated,
// returned as a 0-d float32 tensor (0 when no parameter has a gradient). When it exceeds
// max_norm every gradient is multiplied, in place, by max_norm / (total + 1e-6). A non-finite
// total is an error when error_if_nonfinite; otherwise the gradients are scaled by the
// (NaN or 0) coefficient, as torch does. Parameters without a gradient are skipped.
Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm,
                       double norm_type = 2.0, bool error_if_nonfinite = false);

// Clamps every gradient, in place, to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& parameters, double clip_value);

// The parameters flattened and concatenated into one 1-d tensor (a copy, recorded by autograd
// as torch's); they must share a dtype and device.
Tensor parameters_to_vector(const std::vector<Tensor>& parameters);
// Copies consecutive slices of `vec` (1-d, as many elements as the parameters together, on
// their device) into the parameters, in place and without recording; an hg::Error naming the
// sizes otherwise, with nothing copied.
void vector_to_parameters(const Tensor& vec, const std::vector<Tensor>& parameters);

}  // namespace hg::nn::utils
