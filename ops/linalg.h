// Linear algebra: the GEMM family (ops/linalg.cpp), outer and einsum (ops/einsum.cpp). Under
// autocast the GEMMs and einsum run in the lower precision dtype (tensor-core / AMX semantics:
// 16-bit inputs, float32 accumulation, one rounding at the output).
//
//   B batch, M rows, K the reduced dim, N columns.
#pragma once

#include <initializer_list>
#include <optional>
#include <span>
#include <string_view>

#include "halfgrad/core/scalar.h"
#include "halfgrad/core/tensor.h"

namespace hg {

// [M, K] @ [K, N] -> [M, N].
Tensor mm(const Tensor& a, const Tensor& b);
// [B, M, K] @ [B, K, N] -> [B, M, N].
Tensor bmm(const Tensor& a, const Tensor& b);
// beta * input + alpha * (a @ b); input broadcasts to [M, N].
Tensor addmm(const Tensor& input, const Tensor& a, const Tensor& b, Scalar beta = 1,
             Scalar alpha = 1);
// beta * input + alpha * bmm(a, b); input broadcasts to [B, M, N].
Tensor baddbmm(const Tensor& input, const Tensor& a, const Tensor& b, Scalar beta = 1,
               Scalar alpha = 1);
// beta * input + alpha * (mat @ vec): mat [n, m], vec [m], input broadcasts to [n].
Tensor addmv(const Tensor& input, const Tensor& mat, const Tensor& vec, Scalar beta = 1,
             Scalar alpha = 1);
// beta * input + alpha * outer(vec1, vec2): input broadcasts to [n, m].
Tensor addr(const Tensor& input, const Tensor& vec1, const Tensor& vec2, Scalar beta = 1,
            Scalar alpha = 1);
// beta * input + alpha * the sum over i of batch1[i] @ batch2[i]: batch1 [B, n, m], batch2
// [B, m, p], input broadcasts to [n, p].
Tensor addbmm(const Tensor& input, const Tensor& batch1, const Tensor& batch2, Scalar beta = 1,
              Scalar alpha = 1);
// torch.matmul: vector . vector, matrix @ vector, vector @ matrix, and batched products with
// the batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// (a * scale_a) @ (b * scale_b) + bias for float8 a [M, K] and b [K, N] (torch._scaled_mm):
// scale_a and scale_b are float32 tensors of one element that turn the stored float8 values
// into the values they stand for (dequantization scales), bias [N] is of out_dtype (float32,
// float16 or bfloat16) or undefined. Products are exact and summed in float32, then scaled,
// biased and rounded once to out_dtype (NOTE [Scaled fp8 GEMM] in cpu/linalg.cpp). At most
// one operand may be float8_e5m2. On CUDA it needs compute capability 8.9 or newer and K and N
// multiples of 16, and runs fastest when b is the transpose of a contiguous [N, K] tensor (as
// torch asks): any other layout is copied first. Not differentiable: fp8 training goes through
// amp::Fp8Autocast, whose linear layers have their own backward.
Tensor scaled_mm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 DType out_dtype = kFloat32, const Tensor& bias = Tensor());
// x @ weight^T + bias: x [*, in], weight [out, in] (PyTorch's layout), bias [out] or undefined.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// gelu(linear(x, weight, bias), approximate) as one op: a transformer MLP's first layer. On a
// GPU the tanh form runs the GELU in the GEMM's epilogue (cuBLASLt's GELU is the tanh
// approximation); otherwise, and for approximate "none", the GEMM and the GELU kernel run one
// after the other. Its result and gradients are those of the two ops (autocast: linear's).
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                   std::string_view approximate = "tanh");
// The product of a chain of matrices in the order of fewest scalar products, as
// torch.linalg.multi_dot (NOTE [Matrix chains]): at least two, all 2-D except that the first
// may be a row vector and the last a column vector (1-D), whose dims the result drops.
Tensor multi_dot(std::span<const Tensor> tensors);
Tensor multi_dot(std::initializer_list<Tensor> tensors);
// torch.chain_matmul: multi_dot of one or more 2-D matrices (one: a copy).
Tensor chain_matmul(std::span<const Tensor> matrices);
Tensor chain_matmul(std::initializer_list<Tensor> matrices);
// The sum over a's last `dims` dims against b's first `dims` (torch.tensordot(a, b, dims)), or
// over dims_a of a paired with dims_b of b: a's other dims, then b's.
Tensor tensordot(const Tensor& a, const Tensor& b, int64_t dims = 2);
Tensor tensordot(const Tensor& a, const Tensor& b, const Shape& dims_a, const Shape& dims_b);
// y[..., o] = input1[...]^T weight[o] input2[...] + bias[o]: input1 [*, in1], input2 [*, in2],
// weight [out, in1, in2], bias [out] or undefined (torch.nn.functional.bilinear).
Tensor bilinear(const Tensor& input1, const Tensor& input2, const Tensor& weight,
                const Tensor& bias = Tensor());
// The cross product of 3-vectors along dim of input and other broadcast together; without a
// dim, along input's first dim of size 3 (torch.cross).
Tensor cross(const Tensor& input, const Tensor& other, std::optional<int64_t> dim = std::nullopt);
// torch.linalg.cross: cross along dim (-1 by default).
Tensor linalg_cross(const Tensor& input, const Tensor& other, int64_t dim = -1);
// The sum of a matrix's main diagonal (torch.trace; integers sum as int64).
Tensor trace(const Tensor& input);
// The inner product of two 1-D tensors (a 0-d tensor).
Tensor dot(const Tensor& a, const Tensor& b);
// The outer product of two 1-d tensors: [len(a), len(b)] (ops/einsum.cpp).
Tensor outer(const Tensor& a, const Tensor& b);
// torch.einsum: "ij,jk->ik", implicit outputs ("ij,jk"), "..." for broadcast dims, a subscript
// repeated in one operand for its diagonal. Contracted pairwise left to right through bmm
// (NOTE [Einsum as bmm] in ops/einsum.cpp), so it autocasts as matmul does.
Tensor einsum(std::string_view equation, std::span<const Tensor> operands);
Tensor einsum(std::string_view equation, std::initializer_list<Tensor> operands);

}  // namespace hg
