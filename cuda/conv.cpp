// CUDA kernels of the conv family (kernel/conv.h): conv2d and its backward on cuDNN, with the
// semantics and errors of cpu/conv.cpp's conv2d on one CUDA device.
//
// Dims: N batch, C input channels, G groups (Cg = C / G each), O output channels, H/W input
// height/width, Hout/Wout output height/width, kH/kW kernel height/width.
//   x [N, C, H, W], weight [O, Cg, kH, kW], bias [O], y and dy [N, O, Hout, Wout].
//
// NOTE [cuDNN convolutions]
// - API: cuDNN 9's convolution functions (cudnnConvolutionForward, cudnnConvolutionBackwardData,
//   cudnnConvolutionBackwardFilter) with tensor, filter and convolution descriptors. cuDNN 9
//   marks them deprecated in favour of its graph API, but ships and supports them through 9.x;
//   they say in a few lines what the graph API takes a page to.
// - Handles: one per device, made on first use. A cuDNN handle carries a stream, so each call
//   sequence (set the stream, pick the algorithm, run) holds the device's mutex.
// - Precision: float16/bfloat16 tensors convolve with float accumulation (CUDNN_DATA_FLOAT
//   compute type, tensor-op math) and round once into the output; float32 is restricted to
//   FMA kernels unless TF32 is allowed (NOTE [float32 matmul precision] in core/settings.h);
//   float64 computes in double.
// - Algorithms: cuDNN's heuristics (the _v7 queries) rank the candidates for a shape; the
//   deterministic ones come first (NOTE [Deterministic convolutions]); the first that cuDNN
//   accepts with a workspace of at most kMaxWorkspaceBytes is cached for the shape, so later
//   calls go straight to it. Workspaces come from hg::empty (the caching allocator).
// - 32-bit sizes: the descriptors take int sizes and cuDNN indexes tensors of fewer than 2^31
//   elements, so a large batch runs in chunks of images that fit (dweight accumulates over
//   the chunks).
// - Bias: added by a kernel of halfgrad's after the convolution, in float. For float16 and
//   bfloat16 the output is then rounded twice (the convolution's result, then with the bias)
//   where the CPU rounds once: at most half an ulp more.
//
// NOTE [Deterministic convolutions] Some backward algorithms add partial results with atomics
// (cuDNN reports them as CUDNN_NON_DETERMINISTIC), so the bits of dx or dweight could change
// from run to run. halfgrad promises reproducible runs, so among the candidates the
// heuristics rank, the deterministic ones are tried first; a non-deterministic one runs only
// when no deterministic algorithm accepts the shape.
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <compare>
#include <limits>
#include <map>
#include <mutex>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/settings.h"
#include "halfgrad/cuda/conv_launch.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cuda {

namespace {

// "<op>: <call> failed: CUDNN_STATUS_X".
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* op, const char* call) {
  HG_ERROR("{}: {} failed: {} (cuDNN status {})", op, call, cudnnGetErrorString(status),
           int(status));
}

}  // namespace

// Checks a cudnnStatus_t-returning call: anything but CUDNN_STATUS_SUCCESS throws hg::Error
// naming the op and the call.
#define HG_CUDNN_CHECK(call, op)                                 \
  do {                                                           \
    const cudnnStatus_t hg_cudnn_status_ = (call);               \
    if (hg_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]] { \
      throw_cudnn_error(hg_cudnn_status_, op, #call);            \
    }                                                            \
  } while (false)

namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kMaxWorkspaceBytes = size_t(1) << 30;
constexpr int64_t kMaxCudnnElements = std::numeric_limits<int32_t>::max();

// ---- checks and geometry, the CPU's -------------------------------------------------------

// t is defined and floating; when `read` (the kernel reads its memory), also on `device`.
// The op layer passes stand-ins for tensors whose shape alone matters (conv2d_backward's x
// when dweight is not needed, its weight when dx is not): CPU tensors of stride 0, never read.
void check_input(const char* op, const char* what, const Tensor& t, bool read, Device device) {
  kernel::check_defined(op, what, t);
  if (read) {
    kernel::check_device_type(op, what, t, kCUDA);
    kernel::check_same_device(op, what, t, device, "the input's");
  }
  kernel::check_floating(op, what, t);
}

using kernel::ConvGeometry;

// The CPU's checks and geometry (kernel/checks.h), with the device checks for the tensors
// the kernel reads.
ConvGeometry cuda_conv_geometry(const char* op, const Tensor& x, bool read_x, const Tensor& weight,
                                bool read_weight, const kernel::Conv2dParams& p, Device device) {
  check_input(op, "input", x, read_x, device);
  check_input(op, "weight", weight, read_weight, device);
  return kernel::conv_geometry(op, x, weight, p);
}

// The images per cuDNN call: as many as keep x and y under 2^31 elements (NOTE [cuDNN
// convolutions]). Throws when one image, the weight or a parameter is beyond cuDNN's ints.
int64_t images_per_call(const char* op, const ConvGeometry& g) {
  const int64_t x_image = g.C * g.H * g.W, y_image = g.O * g.Hout * g.Wout;
  const int64_t weight = g.O * g.Cg * g.kH * g.kW;
  HG_CHECK(
      x_image <= kMaxCudnnElements && y_image <= kMaxCudnnElements && weight <= kMaxCudnnElements,
      "{}: cuDNN takes tensors of fewer than 2^31 elements, got an image of {} input and {} "
      "output elements and a weight of {}",
      op, x_image, y_image, weight);
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  HG_CHECK(g.sH <= kMaxInt && g.sW <= kMaxInt && g.pH <= kMaxInt && g.pW <= kMaxInt &&
               g.dH <= kMaxInt && g.dW <= kMaxInt && g.groups <= kMaxInt,
           "{}: cuDNN takes int parameters, got stride ({}, {}), padding ({}, {}), dilation "
           "({}, {}) and groups={}",
           op, g.sH, g.sW, g.pH, g.pW, g.dH, g.dW, g.groups);
  const int64_t largest = std::max<int64_t>({x_image, y_image, 1});
  return std::max<int64_t>(1, std::min(g.N, kMaxCudnnElements / largest));
}

// ---- cuDNN handles, descriptors and algorithms -------------------------------------------

enum class Direction { Forward, BackwardData, BackwardFilter };

const char* direction_name(Direction d) {
  switch (d) {
    case Direction::BackwardData:
      return "backward data";
    case Direction::BackwardFilter:
      return "backward filter";
    case Direction::Forward:
      break;
  }
  return "forward";
}

// Everything an algorithm choice depends on (cuDNN convolutions are always on dense NCHW):
// the shapes, and the operands' alignments (a view into a larger buffer, or a chunk of images,
// may start off the boundary a tensor-core algorithm needs).
struct ConvKey {
  int direction = 0, dtype = 0, math = 0;
  std::array<int64_t, 14> sizes{};   // N C H W O kH kW sH sW pH pW dH dW groups
  std::array<uint32_t, 3> aligns{};  // in0, in1, out: the largest power of two up to 256
  auto operator<=>(const ConvKey&) const = default;
};

using detail::alignment_of;

struct ConvChoice {
  int algo = 0;
  size_t workspace_bytes = 0;
};

struct DeviceCudnn {
  std::once_flag once;
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;  // one call sequence on the handle at a time; guards choices
  std::map<ConvKey, ConvChoice> choices;
};

// Never destroyed: a convolution may run during static destruction.
std::array<DeviceCudnn, kMaxDevices>& device_cudnns() {
  static auto* table = new std::array<DeviceCudnn, kMaxDevices>();
  return *table;
}

DeviceCudnn& device_cudnn(int device, const char* op) {
  HG_CHECK(device >= 0 && device < kMaxDevices, "{}: expected a CUDA device index below {}, got {}",
           op, kMaxDevices, device);
  DeviceCudnn& state = device_cudnns()[size_t(device)];
  // The caller's DeviceGuard has made `device` current (a handle belongs to the current device).
  std::call_once(state.once, [&] { HG_CUDNN_CHECK(cudnnCreate(&state.handle), op); });
  return state;
}

cudnnDataType_t cudnn_data_type(DType dtype) {
  switch (dtype) {
    case kFloat16:
      return CUDNN_DATA_HALF;
    case kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    case kFloat64:
      return CUDNN_DATA_DOUBLE;
    default:
      break;
  }
  return CUDNN_DATA_FLOAT;
}

cudnnMathType_t math_type(DType dtype) {
  switch (dtype) {
    case kFloat16:
    case kBFloat16:
      return CUDNN_TENSOR_OP_MATH;
    case kFloat32:
      return float32_matmul_allows_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    default:
      break;
  }
  return CUDNN_DEFAULT_MATH;
}

// The four descriptors of one call: x [n, C, H, W], w [O, Cg, kH, kW], y [n, O, Hout, Wout]
// and the convolution.
class Descriptors {
 public:
  Descriptors(const ConvGeometry& g, DType dtype, int64_t n, const char* op) {
    try {
      set(g, dtype, n, op);
    } catch (...) {
      destroy();  // the destructor does not run for a half-made object
      throw;
    }
  }
  ~Descriptors() { destroy(); }
  Descriptors(const Descriptors&) = delete;
  Descriptors& operator=(const Descriptors&) = delete;

  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

 private:
  void set(const ConvGeometry& g, DType dtype, int64_t n, const char* op) {
    HG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&x), op);
    HG_CUDNN_CHECK(cudnnCreateTensorDescriptor(&y), op);
    HG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&w), op);
    HG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&conv), op);
    const cudnnDataType_t type = cudnn_data_type(dtype);
    HG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, type, int(n), int(g.C),
                                              int(g.H), int(g.W)),
                   op);
    HG_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, type, int(n), int(g.O),
                                              int(g.Hout), int(g.Wout)),
                   op);
    HG_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w, type, CUDNN_TENSOR_NCHW, int(g.O), int(g.Cg),
                                              int(g.kH), int(g.kW)),
                   op);
    const cudnnDataType_t compute = dtype == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    HG_CUDNN_CHECK(
        cudnnSetConvolution2dDescriptor(conv, int(g.pH), int(g.pW), int(g.sH), int(g.sW), int(g.dH),
                                        int(g.dW), CUDNN_CROSS_CORRELATION, compute),
        op);
    HG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv, int(g.groups)), op);
    HG_CUDNN_CHECK(cudnnSetConvolutionMathType(conv, math_type(dtype)), op);
  }
  void destroy() {
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (x) cudnnDestroyTensorDescriptor(x);
    conv = nullptr, w = nullptr, y = nullptr, x = nullptr;
  }
};

struct Candidate {
  int algo;
  bool deterministic;
};

// Appends the heuristics' successful results, best first.
template <class Perf>
void append_candidates(const std::vector<Perf>& perf, int returned, std::vector<Candidate>& out) {
  for (int i = 0; i < returned && i < int(perf.size()); ++i) {
    if (perf[size_t(i)].status != CUDNN_STATUS_SUCCESS) continue;
    out.push_back({int(perf[size_t(i)].algo), perf[size_t(i)].determinism == CUDNN_DETERMINISTIC});
  }
}

// The candidates for d, in the order to try them (NOTE [Deterministic convolutions]).
std::vector<Candidate> candidates(Direction d, cudnnHandle_t handle, const Descriptors& ds,
                                  const char* op) {
  std::vector<Candidate> result;
  int count = 0, returned = 0;
  switch (d) {
    case Direction::Forward: {
      HG_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &count), op);
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(size_t(std::max(count, 1)));
      HG_CUDNN_CHECK(
          cudnnGetConvolutionForwardAlgorithm_v7(handle, ds.x, ds.w, ds.conv, ds.y,
                                                 int(perf.size()), &returned, perf.data()),
          op);
      append_candidates(perf, returned, result);
      break;
    }
    case Direction::BackwardData: {
      HG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &count), op);
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(size_t(std::max(count, 1)));
      HG_CUDNN_CHECK(
          cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, ds.w, ds.y, ds.conv, ds.x,
                                                      int(perf.size()), &returned, perf.data()),
          op);
      append_candidates(perf, returned, result);
      break;
    }
    case Direction::BackwardFilter: {
      HG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &count), op);
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(size_t(std::max(count, 1)));
      HG_CUDNN_CHECK(
          cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, ds.x, ds.y, ds.conv, ds.w,
                                                        int(perf.size()), &returned, perf.data()),
          op);
      append_candidates(perf, returned, result);
      break;
    }
  }
  std::stable_partition(result.begin(), result.end(),
                        [](const Candidate& c) { return c.deterministic; });
  return result;
}

cudnnStatus_t workspace_size(Direction d, cudnnHandle_t handle, const Descriptors& ds, int algo,
                             size_t* bytes) {
  switch (d) {
    case Direction::BackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(
          handle, ds.w, ds.y, ds.conv, ds.x, cudnnConvolutionBwdDataAlgo_t(algo), bytes);
    case Direction::BackwardFilter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(
          handle, ds.x, ds.y, ds.conv, ds.w, cudnnConvolutionBwdFilterAlgo_t(algo), bytes);
    case Direction::Forward:
      break;
  }
  return cudnnGetConvolutionForwardWorkspaceSize(handle, ds.x, ds.w, ds.conv, ds.y,
                                                 cudnnConvolutionFwdAlgo_t(algo), bytes);
}

// The memory of one call. Forward: in0 = x, in1 = w, out = y. Backward data: in0 = w,
// in1 = dy, out = dx. Backward filter: in0 = x, in1 = dy, out = dw. accumulate: out += result
// (beta = 1) instead of out = result.
struct ConvPointers {
  const void* in0;
  const void* in1;
  void* out;
  bool accumulate;
};

cudnnStatus_t execute(Direction d, cudnnHandle_t handle, const Descriptors& ds, DType dtype,
                      int algo, void* workspace, size_t workspace_bytes, const ConvPointers& p) {
  // Scaling factors are double for double data, float otherwise.
  const double alpha64 = 1.0, beta64 = p.accumulate ? 1.0 : 0.0;
  const float alpha32 = 1.0f, beta32 = p.accumulate ? 1.0f : 0.0f;
  const void* alpha = dtype == kFloat64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = dtype == kFloat64 ? static_cast<const void*>(&beta64) : &beta32;
  switch (d) {
    case Direction::BackwardData:
      return cudnnConvolutionBackwardData(handle, alpha, ds.w, p.in0, ds.y, p.in1, ds.conv,
                                          cudnnConvolutionBwdDataAlgo_t(algo), workspace,
                                          workspace_bytes, beta, ds.x, p.out);
    case Direction::BackwardFilter:
      return cudnnConvolutionBackwardFilter(handle, alpha, ds.x, p.in0, ds.y, p.in1, ds.conv,
                                            cudnnConvolutionBwdFilterAlgo_t(algo), workspace,
                                            workspace_bytes, beta, ds.w, p.out);
    case Direction::Forward:
      break;
  }
  return cudnnConvolutionForward(handle, alpha, ds.x, p.in0, ds.w, p.in1, ds.conv,
                                 cudnnConvolutionFwdAlgo_t(algo), workspace, workspace_bytes, beta,
                                 ds.y, p.out);
}

// cuDNN refuses a candidate for this shape: BAD_PARAM or NOT_SUPPORTED, with their sub-codes.
bool refused(cudnnStatus_t status) {
  const int family = int(status) / 1000;
  return family == int(CUDNN_STATUS_BAD_PARAM) / 1000 ||
         family == int(CUDNN_STATUS_NOT_SUPPORTED) / 1000;
}

Tensor workspace_tensor(size_t bytes, Device device) {
  if (bytes == 0) return {};
  return empty({int64_t((bytes + 7) / 8)}, {.dtype = kInt64, .device = device});
}

// One cuDNN call of direction d over n images (all sizes checked to fit), on the current
// device and stream: the cached algorithm for the shape, or the first candidate that runs.
void run_conv(Direction d, const ConvGeometry& g, int64_t n, DType dtype, Device device,
              const ConvPointers& pointers, const char* op) {
  DeviceCudnn& state = device_cudnn(device.index, op);
  const std::lock_guard lock(state.mutex);
  HG_CUDNN_CHECK(cudnnSetStream(state.handle, current_stream(device.index)), op);
  const Descriptors ds(g, dtype, n, op);
  const ConvKey key{
      int(d),
      int(dtype),
      int(math_type(dtype)),
      {n, g.C, g.H, g.W, g.O, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW, g.dH, g.dW, g.groups},
      {alignment_of(pointers.in0), alignment_of(pointers.in1), alignment_of(pointers.out)}};
  if (auto it = state.choices.find(key); it != state.choices.end()) {
    const Tensor workspace = workspace_tensor(it->second.workspace_bytes, device);
    const cudnnStatus_t status = execute(d, state.handle, ds, dtype, it->second.algo,
                                         workspace.defined() ? workspace.data_ptr() : nullptr,
                                         it->second.workspace_bytes, pointers);
    if (status == CUDNN_STATUS_SUCCESS) return;
    if (!refused(status)) throw_cudnn_error(status, op, "a convolution");
    state.choices.erase(it);  // refused after all: search again
  }
  // Candidates are tried on scratch memory when the call accumulates into out (backward
  // filter's later chunks): one that fails after launching part of its work must not have
  // added that part to the result.
  Tensor scratch;
  ConvPointers trial = pointers;
  if (pointers.accumulate) {
    const int64_t dw_bytes = g.O * g.Cg * g.kH * g.kW * int64_t(element_size(dtype));
    scratch = workspace_tensor(size_t(dw_bytes), device);
    trial.out = scratch.data_ptr();
    trial.accumulate = false;
  }
  cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
  for (const Candidate& candidate : candidates(d, state.handle, ds, op)) {
    size_t bytes = 0;
    last = workspace_size(d, state.handle, ds, candidate.algo, &bytes);
    if (last != CUDNN_STATUS_SUCCESS || bytes > kMaxWorkspaceBytes) continue;
    Tensor workspace;
    try {
      workspace = workspace_tensor(bytes, device);
    } catch (const Error&) {
      continue;  // no memory for this candidate's workspace: the next may need less
    }
    void* const space = workspace.defined() ? workspace.data_ptr() : nullptr;
    last = execute(d, state.handle, ds, dtype, candidate.algo, space, bytes, trial);
    if (last == CUDNN_STATUS_SUCCESS) {
      if (pointers.accumulate) {
        HG_CUDNN_CHECK(execute(d, state.handle, ds, dtype, candidate.algo, space, bytes, pointers),
                       op);
      }
      state.choices.emplace(key, ConvChoice{candidate.algo, bytes});
      return;
    }
    if (!refused(last)) throw_cudnn_error(last, op, "a convolution");
  }
  HG_ERROR(
      "{}: cuDNN has no {} algorithm for a {} convolution of input [{}, {}, {}, {}] with weight "
      "[{}, {}, {}, {}], stride ({}, {}), padding ({}, {}), dilation ({}, {}), groups={} (last "
      "status: {})",
      op, direction_name(d), dtype, n, g.C, g.H, g.W, g.O, g.Cg, g.kH, g.kW, g.sH, g.sW, g.pH, g.pW,
      g.dH, g.dW, g.groups, cudnnGetErrorString(last));
}

// Runs d over all N images in chunks of `per_call` (NOTE [cuDNN convolutions]); the image
// operands (x, y, dy, dx) advance per chunk, the weight (or dweight) stays. Backward filter
// accumulates the chunks after the first into dw.
void run_conv_chunks(Direction d, const ConvGeometry& g, DType dtype, Device device,
                     ConvPointers pointers, const char* op) {
  const int64_t per_call = images_per_call(op, g);
  const auto element = int64_t(element_size(dtype));
  const int64_t x_image = g.C * g.H * g.W * element, y_image = g.O * g.Hout * g.Wout * element;
  for (int64_t start = 0; start < g.N; start += per_call) {
    const int64_t n = std::min(per_call, g.N - start);
    ConvPointers chunk = pointers;
    switch (d) {
      case Direction::Forward:  // x, w -> y
        chunk.in0 = static_cast<const char*>(pointers.in0) + start * x_image;
        chunk.out = static_cast<char*>(pointers.out) + start * y_image;
        break;
      case Direction::BackwardData:  // w, dy -> dx
        chunk.in1 = static_cast<const char*>(pointers.in1) + start * y_image;
        chunk.out = static_cast<char*>(pointers.out) + start * x_image;
        break;
      case Direction::BackwardFilter:  // x, dy -> dw
        chunk.in0 = static_cast<const char*>(pointers.in0) + start * x_image;
        chunk.in1 = static_cast<const char*>(pointers.in1) + start * y_image;
        chunk.accumulate = start > 0;
        break;
    }
    run_conv(d, g, n, dtype, device, chunk, op);
  }
}

void zero_fill(const Tensor& t, const char* op) {
  HG_CUDA_CHECK(cudaMemsetAsync(t.data_ptr(), 0, t.nbytes(), current_stream(t.device().index)), op);
}

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const kernel::Conv2dParams& p) {
  const char* op = "conv2d";
  kernel::check_defined(op, "input", x);
  const Device device = x.device();
  const ConvGeometry g = cuda_conv_geometry(op, x, true, weight, true, p, device);
  if (bias.defined()) {
    check_input(op, "bias ([O])", bias, true, device);
    kernel::check_conv_bias(op, bias, g, x.dtype());
  }
  DeviceGuard guard(device.index);
  Tensor y = empty({g.N, g.O, g.Hout, g.Wout}, {.dtype = x.dtype(), .device = device});
  if (y.numel() == 0) return y;
  if (x.numel() == 0 || weight.numel() == 0) {
    zero_fill(y, op);  // an empty sum over C, H or W
  } else {
    const Tensor xc = x.contiguous(), wc = weight.contiguous();
    run_conv_chunks(Direction::Forward, g, x.dtype(), device,
                    {xc.data_ptr(), wc.data_ptr(), y.data_ptr(), false}, op);
  }
  if (bias.defined()) {
    const Tensor bc = bias.contiguous();
    HG_CUDA_CHECK(detail::launch_conv_add_bias(y.data_ptr(), bc.data_ptr(), y.dtype(), g.N, g.O,
                                               g.Hout * g.Wout, current_stream(device.index)),
                  op);
  }
  return y;
}

kernel::Conv2dBackward conv2d_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                       bool has_bias, const kernel::Conv2dParams& p,
                                       std::array<bool, 3> needed) {
  const char* op = "conv2d_backward";
  kernel::check_defined(op, "grad_output", dy);
  const Device device = dy.device();
  // dx reads the weight, dweight reads x: the other may be a shape-only stand-in.
  const ConvGeometry g = cuda_conv_geometry(op, x, needed[1], weight, needed[0], p, device);
  check_input(op, "grad_output", dy, true, device);
  kernel::check_conv_grad_output(op, dy, g, x.dtype());
  DeviceGuard guard(device.index);
  const TensorOptions options{.dtype = x.dtype(), .device = device};
  const Tensor dyc = dy.contiguous();
  kernel::Conv2dBackward result;
  if (needed[0]) {
    result.dx = empty(x.sizes(), options);
    if (result.dx.numel() > 0) {
      if (dy.numel() == 0 || weight.numel() == 0) {
        zero_fill(result.dx, op);
      } else {
        const Tensor wc = weight.contiguous();
        run_conv_chunks(Direction::BackwardData, g, x.dtype(), device,
                        {wc.data_ptr(), dyc.data_ptr(), result.dx.data_ptr(), false}, op);
      }
    }
  }
  if (needed[1]) {
    result.dweight = empty(weight.sizes(), options);
    if (result.dweight.numel() > 0) {
      if (dy.numel() == 0 || x.numel() == 0) {
        zero_fill(result.dweight, op);
      } else {
        const Tensor xc = x.contiguous();
        run_conv_chunks(Direction::BackwardFilter, g, x.dtype(), device,
                        {xc.data_ptr(), dyc.data_ptr(), result.dweight.data_ptr(), false}, op);
      }
    }
  }
  if (needed[2] && has_bias) {
    // The sum of dy over N, Hout and Wout, accumulated in float (double for float64).
    result.dbias =
        cuda::reduce_kernels.reduce(kernel::Reduction::Sum, dyc, {0, 2, 3}, false, dy.dtype(), 2.0);
  }
  return result;
}

}  // namespace

const kernel::ConvKernels conv_kernels = HG_CONV_KERNELS;

}  // namespace hg::cuda
