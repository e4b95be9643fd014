// CUDA kernels of the neural-network ops: the functions, semantics and errors of
// cpu/nn_kernels.h on one CUDA device (conv2d through cuDNN, the rest hand-written).
#pragma once

#include "halfgrad/core/random.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/cpu/nn_kernels.h"  // the parameter and result structs

namespace hg::cuda {

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
Tensor softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim);
Tensor log_softmax_backward(const Tensor& dy, const Tensor& y, int64_t dim);

cpu::NormForward layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                            const Tensor& bias, double eps);
cpu::NormBackward layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Shape& normalized_shape,
                                      const Tensor& weight, bool has_bias);
cpu::NormForward group_norm(const Tensor& x, int64_t num_groups, const Tensor& weight,
                            const Tensor& bias, double eps);
cpu::NormBackward group_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, int64_t num_groups, const Tensor& weight,
                                      bool has_bias);
cpu::NormForward batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                            const Tensor& weight, const Tensor& bias, bool training,
                            double momentum, double eps);
cpu::NormBackward batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& weight, bool has_bias,
                                      bool training);

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const cpu::Conv2dParams& p);
cpu::Conv2dBackward conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                    bool has_bias, const cpu::Conv2dParams& p,
                                    std::array<bool, 3> needed);
cpu::MaxPoolForward max_pool2d(const Tensor& x, const cpu::Pool2dParams& p);
Tensor max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Shape& input_shape);
Tensor avg_pool2d(const Tensor& x, const cpu::Pool2dParams& p);
Tensor avg_pool2d_backward(const Tensor& dy, const Shape& input_shape, const cpu::Pool2dParams& p);

Tensor embedding_backward(const Tensor& dy, const Tensor& indices, int64_t num_embeddings,
                          int64_t padding_idx);
cpu::DropoutForward dropout(const Tensor& x, double p, Generator& gen);

}  // namespace hg::cuda
