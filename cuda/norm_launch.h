// Launchers of the CUDA softmax and normalization kernels (norm.cu), called by norm.cpp. Free of
// fmt (NOTE [CUDA headers without fmt] in probe.h): plain pointers and sizes, cudaError_t
// results.
//
// Every tensor here is contiguous. T is the input's dtype; A its accumulation dtype (float32,
// float64 for float64 input): the saved statistics (mean, rstd), the parameters (weight, bias,
// converted by the host; null when absent) and the parameter gradients are A. Dims: N batch,
// C channels, G groups, S the flattened spatial size, M a normalized row's length.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "halfgrad/core/dtype.h"

namespace hg::cuda::detail {

// ---- softmax: x viewed as [outer, D, inner] around the softmax dim ---------------------------

struct SoftmaxGeometry {
  int64_t outer = 1;
  int64_t size = 1;  // D
  int64_t inner = 1;
};
cudaError_t launch_softmax(bool log, const void* x, void* y, DType dtype, const SoftmaxGeometry& g,
                           cudaStream_t stream);
// softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy).
cudaError_t launch_softmax_backward(bool log, const void* dy, const void* y, void* dx, DType dtype,
                                    const SoftmaxGeometry& g, cudaStream_t stream);

// ---- layer_norm and group_norm: statistics over contiguous rows of M values -----------------

// layer_norm: rows of M = prod(normalized_shape), groups = 1, spatial = 1 (weight index i).
// group_norm: rows = N G of M = Cg S, groups = G, spatial = S: element i of row r has channel
// (r % G) Cg + i / S.
struct RowNormGeometry {
  int64_t rows = 0;
  int64_t M = 0;
  int64_t groups = 1;
  int64_t spatial = 1;
};
// out = (x - mean) rstd weight + bias; mean and rstd [rows] written too.
cudaError_t launch_row_norm_forward(const void* x, void* out, DType dtype, const void* weight,
                                    const void* bias, void* mean, void* rstd,
                                    const RowNormGeometry& g, double eps, cudaStream_t stream);

// dx, and (when dweight/dbias are not null) the parameter gradients [M], summed over the rows in
// pieces written to the workspace, then in piece order.
int64_t layer_norm_backward_workspace_bytes(int64_t rows, int64_t M, DType dtype);
cudaError_t launch_layer_norm_backward(const void* dy, const void* x, const void* mean,
                                       const void* rstd, const void* weight, void* dx,
                                       void* dweight, void* dbias, void* workspace, DType dtype,
                                       int64_t rows, int64_t M, cudaStream_t stream);

// x [N, C, S] with G groups; dweight/dbias [C] (null: not wanted).
int64_t group_norm_backward_workspace_bytes(int64_t N, int64_t C, int64_t G, DType dtype);
cudaError_t launch_group_norm_backward(const void* dy, const void* x, const void* mean,
                                       const void* rstd, const void* weight, void* dx,
                                       void* dweight, void* dbias, void* workspace, DType dtype,
                                       int64_t N, int64_t C, int64_t S, int64_t G,
                                       cudaStream_t stream);

// ---- batch_norm: per channel of x [N, C, S] --------------------------------------------------

struct BatchNormGeometry {
  int64_t N = 0;
  int64_t C = 0;
  int64_t S = 1;
};
int64_t batch_norm_workspace_bytes(const BatchNormGeometry& g, DType dtype);
// training: mean/rstd from the batch and, when running_mean is not null, new_running_mean and
// new_running_var (float64 [C]) from running_mean/running_var (float64 [C]) as torch updates
// them. Eval: mean/rstd from running_mean/running_var. Then out = (x - mean) rstd weight + bias.
cudaError_t launch_batch_norm_forward(const void* x, void* out, DType dtype, const void* weight,
                                      const void* bias, void* mean, void* rstd,
                                      const double* running_mean, const double* running_var,
                                      double* new_running_mean, double* new_running_var,
                                      bool training, double momentum, double eps, void* workspace,
                                      const BatchNormGeometry& g, cudaStream_t stream);
// dx (through the batch statistics when training), dweight = sum dy xhat, dbias = sum dy [C].
cudaError_t launch_batch_norm_backward(const void* dy, const void* x, const void* mean,
                                       const void* rstd, const void* weight, void* dx,
                                       void* dweight, void* dbias, bool training, void* workspace,
                                       DType dtype, const BatchNormGeometry& g,
                                       cudaStream_t stream);

}  // namespace hg::cuda::detail
