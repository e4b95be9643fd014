// conv2d's oneDNN convolution primitives and the choice, by measurement, between them and
// conv2d's im2col path (NOTE [oneDNN convolutions] in cpu/onednn_conv.cpp). cpu/conv.cpp runs
// the primitives; tools and tests set and read the choices.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "halfgrad/core/dtype.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cpu {

// The ways a conv2d product can run: Auto measures both per shape class, OneDNN the
// convolution primitives (im2col where oneDNN has no kernel for the problem), Im2col the
// per-image columns and the CPU GEMM.
enum class ConvPath { Auto, OneDNN, Im2col };
// The three products of a convolution: y, dx, dweight (with dbias).
enum class ConvDirection { Forward, InputGrad, WeightGrad };

std::string_view conv_path_name(ConvPath path);         // "auto", "onednn", "im2col"
std::string_view conv_direction_name(ConvDirection d);  // "forward", "input grad", ...

// Fixes the path of every conv2d product from now on; Auto goes back to measuring. The
// environment's HALFGRAD_CPU_CONV (auto, onednn or im2col) sets it at the first conv2d.
// Forgets the choices made so far.
void set_conv_path(ConvPath path);
ConvPath get_conv_path();

// One shape class's path, as conv2d chose it (or was told).
struct ConvChoice {
  DType dtype;
  ConvDirection direction;
  std::string shape_class;  // "x [128, 32, 28, 28], w [64, 32, 3, 3], stride 1, padding 1, ..."
  int threads;
  ConvPath path;
  bool measured = false;      // chosen by timing both paths
  bool set = false;           // by set_conv_path or HALFGRAD_CPU_CONV
  bool restored = false;      // from another process's record (cpu/kernel_choices.h)
  std::string onednn_kernel;  // oneDNN's implementation, or why there is none
  std::vector<std::pair<ConvPath, double>> microseconds;  // each path's best time
  int64_t calls = 0;
};
// Every class chosen so far in this process, in the order first met.
std::vector<ConvChoice> conv_choices();
// One line for a choice: "float32 forward x [...]; 1 thread: onednn (onednn 812 us, im2col
// 930 us) [brg:avx512_core], 12 calls".
std::string describe(const ConvChoice& choice);

namespace conv_detail {

using kernel::ConvGeometry;

// Runs a product of `direction` on the path chosen for its class, measuring the class first
// when it is new and the path is Auto. `onednn` runs the primitive and returns false (having
// written nothing) when oneDNN has no kernel for the problem; `im2col` runs today's path. Both
// write the whole output, so the measurement runs them into it, the kept path last.
void run_conv(ConvDirection direction, DType dtype, const ConvGeometry& g, bool bias,
              const std::function<bool()>& onednn, const std::function<void()>& im2col);

// The dtype the primitives run a dtype's convolution in: its own, except float16, which
// oneDNN 2.6 convolves on no x86 CPU, and bfloat16 where oneDNN has no bfloat16 kernel (a CPU
// without AVX-512, where its matmul has none either: gemm_runs_natively): their tensors are
// widened once to float32 (as conv2d's im2col path widens them) and the float32 primitive's y
// or dx is rounded once to the dtype.
DType onednn_conv_dtype(DType dtype);

// Whether the oneDNN path is worth asking about for dtype (a build with oneDNN; float32,
// bfloat16 or float16).
bool onednn_conv_candidate(DType dtype);

// The primitives on contiguous NCHW tensors of one dtype (weight [O, Cg, kH, kW]); false, with
// the outputs untouched, when oneDNN has no non-reference kernel for the problem.
// y = conv(x, w) + bias (bias undefined: none); y of x's dtype.
bool onednn_conv_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                         const ConvGeometry& g);
// dx = conv_transpose(dy, w); dx of dy's dtype.
bool onednn_conv_input_grad(const Tensor& dy, const Tensor& w, const Tensor& dx,
                            const ConvGeometry& g);
// dw (float32, or the dtype's accumulation type) = sum over images of dy * x; dbias (float32,
// or undefined: not wanted) = sum of dy over images and positions.
bool onednn_conv_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw,
                             const Tensor& dbias, const ConvGeometry& g);

}  // namespace conv_detail

namespace detail {
// Forgets every conv choice; returns how many there were.
int64_t clear_conv_choices();
}  // namespace detail

}  // namespace hg::cpu
