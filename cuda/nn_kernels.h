// CUDA kernels of the neural-network ops: the functions, semantics and errors of
// cpu/nn_kernels.h on one CUDA device (conv2d through cuDNN, the rest hand-written).
#pragma once

#include "halfgrad/core/random.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/kernel/conv.h"
#include "halfgrad/kernel/dropout.h"
#include "halfgrad/kernel/norm.h"
#include "halfgrad/kernel/pool.h"

namespace hg::cuda {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim);

kernel::NormForward layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                            const Tensor& bias, double eps);
kernel::NormBackward layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Shape& normalized_shape,
                                      const Tensor& weight, bool has_bias);
kernel::NormForward group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight,
                            const Tensor& bias, double eps);
kernel::NormBackward group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, int64_t num_groups, const Tensor& weight,
                                      bool has_bias);
kernel::NormForward batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                            const Tensor& weight, const Tensor& bias, bool training,
                            double momentum, double eps);
kernel::NormBackward batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& weight, bool has_bias,
                                      bool training);

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const kernel::Conv2dParams& p);
kernel::Conv2dBackward conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                    bool has_bias, const kernel::Conv2dParams& p,
                                    std::array<bool, 3> needed);
kernel::MaxPoolForward max_pool2d(const Tensor& x, const kernel::Pool2dParams& p);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape);
Tensor avg_pool2d(const Tensor& x, const kernel::Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& input_shape, const kernel::Pool2dParams& p);

Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                          int64_t padding_idx);
kernel::DropoutForward dropout(const Tensor& x, double p, Generator& gen);

}  // namespace hg::cuda
