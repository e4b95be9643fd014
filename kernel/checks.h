// Argument checks and shape helpers shared by the CPU kernels (cpu/reduce.cpp, cpu/norm.cpp,
// cpu/conv.cpp, ...) and the host side of the CUDA kernels of the same names (cuda/*.cpp):
// one copy of each, so both backends compute the same shapes and throw the same hg::Error for
// the same bad input. Where a message names the device, the backend is a parameter
// (DeviceType): "on the CPU" or "on a CUDA device". Host code only (tensor.h brings fmt).
//
// Each backend still checks the tensors' own devices where its rules differ (the CUDA
// kernels also check that every tensor they read is on the input's device index), then calls
// these for the rest, in the CPU kernel's order.
//
// Dims: N batch, C channels, G groups (Cg = C / G), O output channels (Og = O / groups),
// S the flattened spatial size, H/W height/width, kH/kW kernel, Hout/Wout output.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "halfgrad/core/tensor.h"
#include "halfgrad/kernel/conv.h"
#include "halfgrad/kernel/kinds.h"
#include "halfgrad/kernel/pool.h"

namespace hg::kernel {

// ---- small helpers --------------------------------------------------------------------------

// The dtype the nn kernels accumulate in, and in which the norms save their statistics.
inline DType acc_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// The product of sizes[begin, end).
inline int64_t product(const Shape& sizes, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= sizes[d];
  return n;
}

// Whether the memory x's elements occupy and the memory y's occupy overlap (empty tensors
// overlap nothing).
bool spans_overlap(const Tensor& x, const Tensor& y);

// ---- tensor checks: "<op>: expected <what> ..." ---------------------------------------------

void check_defined(const char* op, const char* what, const Tensor& t);
// t on a device of this type: "on the CPU" or "on a CUDA device".
void check_device_type(const char* op, const char* what, const Tensor& t, DeviceType device);
void check_floating(const char* op, const char* what, const Tensor& t);
// All three: defined, on the backend's devices, floating.
void check_input(const char* op, const char* what, const Tensor& t, DeviceType device);
void check_shape(const char* op, const char* what, const Tensor& t, const Shape& expected);
// expected: the input's dtype.
void check_same_dtype(const char* op, const char* what, const Tensor& t, DType expected);
// t on `device`, the device of another argument; whose: "the input's", "grad_output's".
void check_same_device(const char* op, const char* what, const Tensor& t, Device device,
                       const char* whose);

// ---- the scaled float8 GEMM (kernel/linalg.h) ------------------------------------------------

// LinalgKernels::scaled_gemm's arguments, on `device`'s backend; returns {M, N, K}.
std::array<int64_t, 3> check_scaled_gemm(const char* op, const Tensor& a, const Tensor& b,
                                         const Tensor& scale_a, const Tensor& scale_b,
                                         const Tensor& bias, const Tensor& out,
                                         DeviceType device);

// LinalgKernels::quantize_fp8's arguments, on `device`'s backend; returns x's numel.
int64_t check_quantize_fp8(const char* op, const Tensor& x, const Tensor& scale,
                           const Tensor& amax, const Tensor& out, DeviceType device);

// LinalgKernels::gelu_backward's arguments, on `device`'s backend: g and pre contiguous [M, N]
// of one floating dtype on one device, bias_grad undefined or a contiguous [N] of that dtype
// there.
void check_gelu_backward(const char* op, const Tensor& g, const Tensor& pre,
                         const Tensor& bias_grad, DeviceType device);

// ---- reductions (kernel/reduce.h) -----------------------------------------------------------

// "sum", "prod", "mean", "amax", "amin", "logsumexp", "norm": the name errors use.
const char* reduction_name(Reduction op);

void check_floating_input(const Tensor& x, const char* op);
// A floating accumulator rounds to a floating dtype only (NaN and fractions have no integer).
void check_out_dtype(const Tensor& x, DType out_dtype, const char* op);
// A scan's checks after the backend's own on x (ReduceKernels::scan): dim one of x's dims,
// out_dtype (check_out_dtype), floating x for LogSumExp. Returns dim wrapped.
int64_t check_scan(Scan kind, const Tensor& x, int64_t dim, DType out_dtype);
// Which dims of x `dims` reduces (every dim when dims is empty); throws on a dim given twice.
std::vector<bool> reduced_dims(const Tensor& x, const Shape& dims, const char* op);
Shape reduced_shape(const Tensor& x, const std::vector<bool>& reduced, bool keepdim);
// For reductions without an identity: throws when a reduced dim is empty.
void check_nonempty(const Tensor& x, const std::vector<bool>& reduced, const char* op);

// The checks of reduce() and var() after those of x itself (defined, on the backend); they
// return reduced_dims(x, dims).
std::vector<bool> check_reduce(Reduction op, const Tensor& x, const Shape& dims, DType out_dtype,
                               double p);
std::vector<bool> check_var(const Tensor& x, const Shape& dims, int64_t correction,
                            DType out_dtype);
// The dims sum_to(x, target) sums over: the leading ones and those target has as 1. Throws
// unless target broadcasts to x's shape.
Shape sum_to_dims(const Tensor& x, const Shape& target);

// ---- softmax and the norms (kernel/norm.h) --------------------------------------------------
//
// The checks of a parameter, a saved statistic or grad_output against the input x take x
// after its own checks: the tensor must be on x's device (so of x's backend).

// x viewed as [outer, D, inner] around the softmax dim.
struct DimSplit {
  int64_t outer;
  int64_t size;
  int64_t inner;
};
DimSplit split_at(const Tensor& x, int64_t dim, const char* op);

// dy and y (the forward's output) on the backend, one device, one shape and one dtype.
void check_softmax_backward(const char* op, const Tensor& dy, const Tensor& y, DeviceType device);

// An optional per-channel (or per-feature) parameter: absent, or floating, on x's device and
// of the given shape.
void check_optional_param(const char* op, const char* what, const Tensor& t, const Shape& shape,
                          const Tensor& x);
// Saved statistics: `shape`'s element count, any floating dtype, on x's device.
void check_saved_stat(const char* op, const char* what, const Tensor& t, const Shape& shape,
                      const Tensor& x);
// A norm's grad_output: floating, of x's device, shape and dtype.
void check_grad_output(const char* op, const Tensor& dy, const Tensor& x);

// x [rows, M] once flattened, M = prod(normalized_shape). Checks x (on the backend) too.
struct LayerNormGeometry {
  int64_t rows;
  int64_t M;
};
LayerNormGeometry layer_norm_geometry(const char* op, const Tensor& x,
                                      const Shape& normalized_shape, DeviceType device);

// x [N, C, S]. Checks x (on the backend) and num_groups too.
struct GroupNormGeometry {
  int64_t N, C, S, G, Cg;
};
GroupNormGeometry group_norm_geometry(const char* op, const Tensor& x, int64_t num_groups,
                                      DeviceType device);

// x [N, C, S]. Checks x (on the backend) too.
struct BatchNormGeometry {
  int64_t N, C, S;
};
BatchNormGeometry batch_norm_geometry(const char* op, const Tensor& x, DeviceType device);
// batch_norm's parameters and running statistics, and what training or eval needs of them.
void check_batch_norm(const char* op, const Tensor& x, const BatchNormGeometry& bn,
                      const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                      const Tensor& bias, bool training);

// ---- conv2d ---------------------------------------------------------------------------------

struct ConvGeometry {
  int64_t N, C, H, W, O, kH, kW, Hout, Wout;
  int64_t sH, sW, pH, pW, dH, dW;
  int64_t groups, Cg, Og;
  int64_t K() const { return Cg * kH * kW; }  // rows of a group's im2col matrix
  int64_t L() const { return Hout * Wout; }   // its columns
};
// x [N, C, H, W] and weight [O, Cg, kH, kW] of one dtype, and p; the caller has checked each
// tensor on its own (defined, floating, where it must be).
ConvGeometry conv_geometry(const char* op, const Tensor& x, const Tensor& weight,
                           const Conv2dParams& p);
// bias [O] and dy [N, O, Hout, Wout] of x's dtype (after their own checks).
void check_conv_bias(const char* op, const Tensor& bias, const ConvGeometry& g, DType dtype);
void check_conv_grad_output(const char* op, const Tensor& dy, const ConvGeometry& g, DType dtype);

// ---- pooling --------------------------------------------------------------------------------

// A pooling problem (stride resolved: never 0). planes = N C; a 3-D input has N = 1.
struct PoolGeometry {
  int64_t N, C, planes, H, W, Hout, Wout, kH, kW, sH, sW, pH, pW, dH, dW;
  int64_t divisor_override;  // 0: none
  Shape out_shape;           // input_shape with Hout, Wout
};
PoolGeometry pool_geometry(const char* op, const Shape& input_shape, const Pool2dParams& p);
// max_pool2d_backward's dy (after its own check) against input_shape, and int64 indices of
// dy's shape.
void check_max_pool2d_backward(const char* op, const Tensor& dy, const Tensor& indices,
                               const Shape& input_shape);

// ---- embedding and dropout ------------------------------------------------------------------

// int64 or int32 indices.
void check_embedding_indices(const char* op, const Tensor& indices);
// num_embeddings, padding_idx, and dy [*indices' shape, D].
void check_embedding_sizes(const char* op, const Tensor& dy, const Tensor& indices,
                           int64_t num_embeddings, int64_t padding_idx);
// x on the backend and floating, p in [0, 1].
void check_dropout(const char* op, const Tensor& x, double p, DeviceType device);

}  // namespace hg::kernel
