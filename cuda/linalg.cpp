// The CUDA GEMMs, kernel/linalg.h's table, on cuBLASLt: out[i] = alpha * (a[i] @ b[i]) +
// beta * out[i]. float16/bfloat16 inputs multiply on tensor cores with float32 accumulation
// (CUBLAS_COMPUTE_32F) and round once into the output; float32 is exact float32 unless
// hg::set_float32_matmul_precision("high") allows TF32; float64 is float64. One cuBLASLt
// handle and one workspace per device, made on first use.
//
// Dims: B batch, M rows of a and out, K the reduced dim, N columns of b and out.
// a [B, M, K], b [B, K, N], out [B, M, N] (contiguous).
//
// NOTE [Row-major GEMM on cuBLASLt] cuBLASLt's matrices are column-major. A row-major R x C
// matrix with row stride ld is, read column-major, its transpose: a C x R matrix with leading
// dimension ld. So the contiguous out [M, N] is, to cuBLASLt, out^T: N x M with ld N, and
// out = a @ b is computed as out^T = b^T @ a^T, with b as cuBLASLt's first operand and a as
// its second. Each operand must come in as the transpose of halfgrad's matrix: a row-major
// one (unit column stride) already is, read column-major (CUBLAS_OP_N); a column-major one
// (unit row stride: a transposed view) is stored as the matrix itself and goes in with
// CUBLAS_OP_T. Any other layout is copied to contiguous first, as on the CPU. The bias
// epilogue adds a vector along the rows of cuBLASLt's N x M result, which is bias [N] on
// every row of out.
//
// NOTE [GELU epilogue] linear_gelu's forward asks cuBLASLt for CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
// the pre-activation (a b + bias) goes to an auxiliary buffer laid out as out (which the
// backward needs), GELU of it to out, both from the float32 accumulator in one pass over the
// result. cuBLASLt's GELU is the tanh approximation (gelu(approximate="tanh")), so only that
// form fuses. Where cuBLASLt has no algorithm with the epilogue, the GEMM writes the
// pre-activation with its bias and the GELU kernel follows.
//
// NOTE [cuBLASLt handles, workspaces and plans]
// - One cuBLASLt handle per device, made on first use. It holds no stream, so every thread
//   shares it; each call names the current stream.
// - One 32 MiB workspace per device and stream, allocated with hg::empty on first use and kept
//   for the life of the process. Per stream rather than per device, because two streams
//   running GEMMs at once must not share scratch memory; halfgrad runs on one stream per
//   device unless a StreamGuard says otherwise, so in practice it is one per device. A GEMM
//   captured into a CUDA graph runs without one: a new one would come from the graph's pool,
//   and the stream's own would be shared by replays (on whichever stream is current then) and
//   the eager GEMMs of its stream. (A stream destroyed with GEMMs still pending, and a new one
//   created at the same address, would share one.)
// - The algorithm cuBLASLt's heuristic picks is cached per device, keyed by all it depends on
//   (dtype and compute type, transposes, sizes, leading dims, batch strides, epilogue,
//   pointer alignments, workspace size): after the first call of a shape, a GEMM costs a map
//   lookup, descriptors initialized on the stack, and cublasLtMatmul.
//
// NOTE [16-bit GEMM accumulation] float16 and bfloat16 multiply on tensor cores with
// CUBLAS_COMPUTE_32F: float32 products and sums over the whole K, rounded once into out.
// Split-K algorithms may only reduce their partial sums in the compute type
// (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE), never in out's dtype nor in place in out, so that
// promise holds for them too, and the result does not depend on the order of atomic adds.
#include "halfgrad/cuda/kernel_tables.h"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <compare>
#include <cstdint>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/settings.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/linalg_launch.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/checks.h"

namespace hg::cuda {

namespace {

// "<op>: <call> failed: CUBLAS_STATUS_X (its description)".
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* op, const char* call) {
  HG_ERROR("{}: {} failed: {} ({})", op, call, cublasLtGetStatusName(status),
           cublasLtGetStatusString(status));
}

}  // namespace

// Checks a cublasStatus_t-returning call: anything but CUBLAS_STATUS_SUCCESS throws hg::Error
// naming the op and the call.
#define HG_CUBLAS_CHECK(call, op)                                  \
  do {                                                             \
    const cublasStatus_t hg_cublas_status_ = (call);               \
    if (hg_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] { \
      throw_cublas_error(hg_cublas_status_, op, #call);            \
    }                                                              \
  } while (false)

namespace {

constexpr int kMaxDevices = 64;
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
constexpr size_t kWorkspaceAlignment = 256;

// ---- the problem as cuBLASLt sees it ----------------------------------------------------

// One operand of cuBLASLt (NOTE [Row-major GEMM on cuBLASLt]): the column-major matrix stored
// at data (rows x cols, leading dimension ld), the op that turns it into the transpose of
// halfgrad's matrix, and the element stride between batches (0: one matrix for every batch).
struct Operand {
  const void* data = nullptr;
  cublasOperation_t op = CUBLAS_OP_N;
  int64_t rows = 0, cols = 0, ld = 0;
  int64_t batch_stride = 0;
};

// The operand for halfgrad's rows x cols matrix (rows, cols >= 1) with the given strides, or
// nullopt when it is neither row- nor column-major. Size-1 dims carry no layout: they get the
// strides of a dense layout, so that equal problems have equal plan keys.
std::optional<Operand> operand_of_layout(const void* data, int64_t batch_stride, int64_t rows,
                                         int64_t cols, int64_t row_stride, int64_t col_stride) {
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols)) {
    // Row-major: read column-major it is the cols x rows transpose, which op N keeps.
    return Operand{data, CUBLAS_OP_N, cols, rows, rows == 1 ? cols : row_stride, batch_stride};
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows)) {
    // Column-major: stored as the rows x cols matrix itself; op T makes the transpose.
    return Operand{data, CUBLAS_OP_T, rows, cols, cols == 1 ? rows : col_stride, batch_stride};
  }
  return std::nullopt;
}

struct Problem {
  DType dtype = kFloat32;
  int64_t batch = 1, m = 0, n = 0, k = 0;
  Operand a;            // halfgrad's a: M x K
  Operand b;            // halfgrad's b: K x N
  void* out = nullptr;  // contiguous [B, M, N]
  double alpha = 1.0, beta = 0.0;
  const void* bias = nullptr;  // contiguous [N] added to every row, or null
  void* gelu_pre = nullptr;    // NOTE [GELU epilogue]: out's layout, or null (no GELU)

  bool has_epilogue() const { return bias != nullptr || gelu_pre != nullptr; }
};

// A batch of row-major a matrices that follow each other row after row, against one b, is
// one GEMM with B * M rows: out is contiguous, so its rows follow the same way.
void fold_batch_into_rows(Problem& p) {
  if (p.batch > 1 && p.b.batch_stride == 0 && p.a.op == CUBLAS_OP_N &&
      p.a.batch_stride == p.m * p.a.ld) {
    p.m *= p.batch;
    p.a.cols = p.m;
    p.batch = 1;
    p.a.batch_stride = 0;
  }
}

// ---- handles, workspaces, plans ---------------------------------------------------------

// The key of a plan: everything cuBLASLt's algorithm choice depends on.
struct PlanKey {
  int dtype = 0, compute = 0, op_first = 0, op_second = 0;
  int fp8_first = 0, fp8_second = 0;  // the float8 operands' types (scaled_gemm), else 0
  int64_t m = 0, n = 0, k = 0, ld_first = 0, ld_second = 0;
  int64_t batch = 0, stride_first = 0, stride_second = 0;
  uint32_t align_first = 0, align_second = 0, align_out = 0, align_bias = 0, align_pre = 0;
  bool bias = false, gelu = false;
  uint64_t workspace = 0;
  auto operator<=>(const PlanKey&) const = default;
};

struct Workspace {
  Tensor memory;            // kWorkspaceBytes and the room to align them
  void* aligned = nullptr;  // the first 256-byte boundary in memory
};

// What each device gets once (NOTE [cuBLASLt handles, workspaces and plans]).
struct DeviceGemm {
  std::once_flag once;
  cublasLtHandle_t handle = nullptr;
  std::mutex mutex;  // guards workspaces and plans
  std::unordered_map<cudaStream_t, Workspace> workspaces;
  // nullopt: cuBLASLt has no algorithm for the key (only asked with an epilogue).
  std::map<PlanKey, std::optional<cublasLtMatmulAlgo_t>> plans;
};

// Never destroyed: tensors (the workspaces) and handles must not go away during static
// destruction while other objects may still run GEMMs.
std::array<DeviceGemm, kMaxDevices>& device_gemms() {
  static auto* table = new std::array<DeviceGemm, kMaxDevices>();
  return *table;
}

DeviceGemm& device_gemm(int device, const char* op) {
  HG_CHECK(device >= 0 && device < kMaxDevices, "{}: expected a CUDA device index below {}, got {}",
           op, kMaxDevices, device);
  DeviceGemm& state = device_gemms()[size_t(device)];
  // The caller's DeviceGuard has made `device` current. An exception leaves the flag unset,
  // so a later call tries again.
  std::call_once(state.once, [&] { HG_CUBLAS_CHECK(cublasLtCreate(&state.handle), op); });
  return state;
}

// The workspace of `stream` (state.mutex held): its address, 256-byte aligned, or null while
// the stream captures a graph and has none yet.
void* workspace_of(DeviceGemm& state, int device, cudaStream_t stream, const char* op) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  HG_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture), op);
  if (capture != cudaStreamCaptureStatusNone) return nullptr;
  if (auto it = state.workspaces.find(stream); it != state.workspaces.end()) {
    return it->second.aligned;
  }
  Workspace workspace;
  workspace.memory = empty({int64_t((kWorkspaceBytes + kWorkspaceAlignment) / sizeof(float))},
                           {.dtype = kFloat32, .device = Device(kCUDA, device)});
  const auto address = reinterpret_cast<uintptr_t>(workspace.memory.data_ptr());
  workspace.aligned = reinterpret_cast<void*>((address + kWorkspaceAlignment - 1) &
                                              ~uintptr_t(kWorkspaceAlignment - 1));
  return state.workspaces.emplace(stream, std::move(workspace)).first->second.aligned;
}

using detail::alignment_of;

cudaDataType_t cuda_data_type(DType dtype) {
  switch (dtype) {
    case kFloat16:
      return CUDA_R_16F;
    case kBFloat16:
      return CUDA_R_16BF;
    case kFloat64:
      return CUDA_R_64F;
    default:
      break;
  }
  return CUDA_R_32F;
}

// NOTE [float32 matmul precision] in core/settings.h: float32 is exact unless TF32 is allowed.
cublasComputeType_t compute_type(DType dtype) {
  if (dtype == kFloat64) return CUBLAS_COMPUTE_64F;
  if (dtype == kFloat32 && float32_matmul_allows_tf32()) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;
}

template <class T>
void set_attribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   const T& value, const char* op) {
  HG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)), op);
}
template <class T>
void set_attribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute,
                   const T& value, const char* op) {
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)), op);
}
template <class T>
void set_attribute(cublasLtMatmulPreference_t preference,
                   cublasLtMatmulPreferenceAttributes_t attribute, const T& value, const char* op) {
  HG_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)), op);
}

// A column-major rows x cols layout with leading dimension ld, `batch` matrices apart by
// `stride` elements.
void init_layout(cublasLtMatrixLayoutOpaque_t& storage, cudaDataType_t type, int64_t rows,
                 int64_t cols, int64_t ld, int64_t batch, int64_t stride, const char* op) {
  HG_CUBLAS_CHECK(cublasLtMatrixLayoutInit(&storage, type, uint64_t(rows), uint64_t(cols), ld), op);
  if (batch > 1) {
    set_attribute(&storage, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, int32_t(batch), op);
    set_attribute(&storage, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride, op);
  }
}

struct PreferenceHandle {
  cublasLtMatmulPreference_t preference = nullptr;
  explicit PreferenceHandle(const char* op) {
    HG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference), op);
  }
  ~PreferenceHandle() { cublasLtMatmulPreferenceDestroy(preference); }
  PreferenceHandle(const PreferenceHandle&) = delete;
  PreferenceHandle& operator=(const PreferenceHandle&) = delete;
};

// A plan's preferences: key's workspace and alignments, and with restrict_reduction the
// reduction scheme of NOTE [16-bit GEMM accumulation].
void set_preferences(cublasLtMatmulPreference_t preference, const PlanKey& key,
                     bool restrict_reduction, const char* op) {
  set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, key.workspace, op);
  if (restrict_reduction) {
    set_attribute(preference, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                  uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE), op);
  }
  set_attribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_first, op);
  set_attribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_second, op);
  set_attribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_out, op);
  set_attribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_out, op);
}

// The epilogue p asks for.
cublasLtEpilogue_t epilogue_of(const Problem& p) {
  if (p.gelu_pre != nullptr) {
    return p.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
  }
  return p.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

// Runs p (K >= 1, B at most INT32_MAX) on cuBLASLt on the current device and stream. Returns
// false, having run nothing, when p has an epilogue (bias, GELU) and cuBLASLt has no
// algorithm with it for p (the caller then does the epilogue's work another way).
bool run_cublaslt(const Problem& p, int device, const char* op) {
  const cudaStream_t stream = current_stream(device);
  DeviceGemm& state = device_gemm(device, op);
  const cudaDataType_t type = cuda_data_type(p.dtype);
  const cublasComputeType_t compute = compute_type(p.dtype);
  const cudaDataType_t scale_type = p.dtype == kFloat64 ? CUDA_R_64F : CUDA_R_32F;
  const auto element = int64_t(element_size(p.dtype));

  // cuBLASLt's first operand is b, its second a; the result is out^T, N x M.
  const Operand& first = p.b;
  const Operand& second = p.a;
  cublasLtMatmulDescOpaque_t desc_storage;
  cublasLtMatmulDesc_t desc = &desc_storage;
  HG_CUBLAS_CHECK(cublasLtMatmulDescInit(desc, compute, scale_type), op);
  set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(first.op), op);
  set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(second.op), op);
  if (p.has_epilogue()) {
    set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(epilogue_of(p)), op);
  }
  if (p.bias != nullptr) set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias, op);
  if (p.gelu_pre != nullptr) {  // laid out as out^T: N x M, leading dim N
    set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.gelu_pre, op);
    set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(p.n), op);
    if (p.batch > 1) {
      set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, int64_t(p.m * p.n), op);
    }
  }
  cublasLtMatrixLayoutOpaque_t first_layout, second_layout, out_layout;
  init_layout(first_layout, type, first.rows, first.cols, first.ld, p.batch, first.batch_stride,
              op);
  init_layout(second_layout, type, second.rows, second.cols, second.ld, p.batch,
              second.batch_stride, op);
  init_layout(out_layout, type, p.n, p.m, p.n, p.batch, p.m * p.n, op);

  std::unique_lock lock(state.mutex);
  void* workspace = workspace_of(state, device, stream, op);
  const uint64_t workspace_bytes = workspace != nullptr ? kWorkspaceBytes : 0;
  const PlanKey key{
      .dtype = int(p.dtype),
      .compute = int(compute),
      .op_first = int(first.op),
      .op_second = int(second.op),
      .m = p.m,
      .n = p.n,
      .k = p.k,
      .ld_first = first.ld,
      .ld_second = second.ld,
      .batch = p.batch,
      .stride_first = p.batch > 1 ? first.batch_stride : 0,
      .stride_second = p.batch > 1 ? second.batch_stride : 0,
      .align_first = alignment_of(first.data, p.batch > 1 ? first.batch_stride * element : 0),
      .align_second = alignment_of(second.data, p.batch > 1 ? second.batch_stride * element : 0),
      .align_out = alignment_of(p.out, p.batch > 1 ? p.m * p.n * element : 0),
      .align_bias = p.bias != nullptr ? alignment_of(p.bias, 0) : 0,
      .align_pre = p.gelu_pre != nullptr
                       ? alignment_of(p.gelu_pre, p.batch > 1 ? p.m * p.n * element : 0)
                       : 0,
      .bias = p.bias != nullptr,
      .gelu = p.gelu_pre != nullptr,
      .workspace = workspace_bytes,
  };
  auto plan = state.plans.find(key);
  if (plan == state.plans.end()) {
    std::optional<cublasLtMatmulAlgo_t> algo;
    // The second try lifts the reduction-scheme restriction, in case a cuBLASLt release has
    // no algorithm within it for some shape: a result beats an error.
    for (const bool restrict_reduction : {true, false}) {
      PreferenceHandle preference(op);
      set_preferences(preference.preference, key, restrict_reduction, op);
      cublasLtMatmulHeuristicResult_t result{};
      int returned = 0;
      const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
          state.handle, desc, &first_layout, &second_layout, &out_layout, &out_layout,
          preference.preference, 1, &result, &returned);
      if (status == CUBLAS_STATUS_SUCCESS && returned > 0) {
        algo = result.algo;
        break;
      }
      // With an epilogue, any refusal means "no epilogue here": the caller's other way is
      // always right, and a real fault shows again in the plain GEMM it runs.
      if (status != CUBLAS_STATUS_NOT_SUPPORTED && status != CUBLAS_STATUS_SUCCESS &&
          !p.has_epilogue()) {
        throw_cublas_error(status, op, "cublasLtMatmulAlgoGetHeuristic");
      }
    }
    HG_CHECK(algo.has_value() || p.has_epilogue(),
             "{}: cuBLASLt has no algorithm for a {} GEMM of B={} x (M={}, K={}) @ (K, N={}) "
             "(leading dims {} and {}, alignments {}, {} and {} bytes)",
             op, p.dtype, p.batch, p.m, p.k, p.n, second.ld, first.ld, key.align_second,
             key.align_first, key.align_out);
    plan = state.plans.emplace(key, algo).first;
  }
  if (!plan->second.has_value()) return false;
  const cublasLtMatmulAlgo_t algo = *plan->second;
  lock.unlock();

  const float alpha32 = float(p.alpha), beta32 = float(p.beta);
  const void* alpha = p.dtype == kFloat64 ? static_cast<const void*>(&p.alpha) : &alpha32;
  const void* beta = p.dtype == kFloat64 ? static_cast<const void*>(&p.beta) : &beta32;
  HG_CUBLAS_CHECK(cublasLtMatmul(state.handle, desc, alpha, first.data, &first_layout, second.data,
                                 &second_layout, beta, p.out, &out_layout, p.out, &out_layout,
                                 &algo, workspace, workspace_bytes, stream),
                  op);
  return true;
}

// Runs p (K >= 1), in batch chunks that cuBLASLt's int32 batch count can hold. Returns false as
// run_cublaslt does (only possible with an epilogue).
bool run(Problem p, int device, const char* op) {
  fold_batch_into_rows(p);
  constexpr int64_t kMaxBatch = std::numeric_limits<int32_t>::max();
  if (p.batch <= kMaxBatch) return run_cublaslt(p, device, op);
  const int64_t element = int64_t(element_size(p.dtype));
  const int64_t total = p.batch;
  for (int64_t start = 0; start < total; start += kMaxBatch) {
    Problem chunk = p;
    chunk.batch = std::min(kMaxBatch, total - start);
    chunk.a.data = static_cast<const char*>(p.a.data) + start * p.a.batch_stride * element;
    chunk.b.data = static_cast<const char*>(p.b.data) + start * p.b.batch_stride * element;
    chunk.out = static_cast<char*>(p.out) + start * p.m * p.n * element;
    if (p.gelu_pre != nullptr) {
      chunk.gelu_pre = static_cast<char*>(p.gelu_pre) + start * p.m * p.n * element;
    }
    if (!run_cublaslt(chunk, device, op)) return false;
  }
  return true;
}

// Runs p (K >= 1) with its bias row added to every output row: by the bias epilogue, or where
// cuBLASLt has none for the problem, by writing the bias rows into out and accumulating the
// product onto them (beta = 1).
void run_with_bias(Problem p, int device, const char* op) {
  p.gelu_pre = nullptr;
  if (run(p, device, op)) return;
  HG_CUDA_CHECK(detail::launch_gemm_fill_rows(p.out, p.bias, p.dtype, p.batch * p.m, p.n,
                                              current_stream(device)),
                op);
  p.bias = nullptr;
  p.beta = 1.0;
  run(p, device, op);
}

// ---- checks, as the CPU's (cpu/linalg.cpp) ----------------------------------------------

using kernel::spans_overlap;

bool on_one_cuda_device(const Tensor& a, const Tensor& b, const Tensor& out) {
  return a.is_cuda() && b.is_cuda() && out.is_cuda() && a.device() == out.device() &&
         b.device() == out.device();
}

void check_arguments(const char* op, const Tensor& a, const Tensor& b, const Tensor& out) {
  HG_CHECK(a.defined() && b.defined() && out.defined(),
           "{}: expected defined tensors a, b and out, got an undefined one", op);
  HG_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3,
           "{}: expected 3-D tensors a [B, M, K], b [B, K, N] and out [B, M, N], got a of "
           "shape {}, b of shape {} and out of shape {}",
           op, a.sizes(), b.sizes(), out.sizes());
  HG_CHECK(on_one_cuda_device(a, b, out),
           "{}: expected tensors on one CUDA device, got a on {}, b on {} and out on {}", op,
           a.device(), b.device(), out.device());
  HG_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype() && a.is_floating_point(),
           "{}: expected a, b and out of one floating dtype, got a {} {}, b {} {} and out {} {}",
           op, a.dtype(), a.sizes(), b.dtype(), b.sizes(), out.dtype(), out.sizes());
  HG_CHECK(a.size(2) == b.size(1),
           "{}: a of shape {} and b of shape {} cannot be multiplied: a has K = {} columns, "
           "b has {} rows",
           op, a.sizes(), b.sizes(), a.size(2), b.size(1));
  const int64_t batch = out.size(0);
  HG_CHECK(out.size(1) == a.size(1) && out.size(2) == b.size(2) &&
               (a.size(0) == batch || a.size(0) == 1) && (b.size(0) == batch || b.size(0) == 1),
           "{}: out of shape {} does not fit a of shape {} times b of shape {}: expected out "
           "[B, {}, {}] with a's and b's batch size B or 1",
           op, out.sizes(), a.sizes(), b.sizes(), a.size(1), b.size(2));
  HG_CHECK(out.is_contiguous(), "{}: out (shape {}, strides {}) must be contiguous", op,
           out.sizes(), out.strides());
  HG_CHECK(!spans_overlap(out, a) && !spans_overlap(out, b),
           "{}: out (shape {}) overlaps a (shape {}) or b (shape {}) in memory", op, out.sizes(),
           a.sizes(), b.sizes());
}

void check_bias(const char* op, const Tensor& bias, int64_t n, const Tensor& out) {
  HG_CHECK(bias.dim() == 1 && bias.size(0) == n && bias.dtype() == out.dtype() &&
               bias.device() == out.device() && bias.is_contiguous(),
           "{}: expected a contiguous bias of shape [{}] and dtype {} on {}, got {} {} on {}", op,
           n, out.dtype(), out.device(), bias.dtype(), bias.sizes(), bias.device());
}

// The operand for t [B or 1, rows, cols] (rows, cols >= 1); copies t to contiguous (into
// `keep`) when its matrices are neither row- nor column-major.
Operand operand_3d(const Tensor& t, Tensor& keep) {
  const bool broadcast = t.size(0) == 1 || t.stride(0) == 0;
  const int64_t rows = t.size(1), cols = t.size(2);
  if (auto op = operand_of_layout(t.data_ptr(), broadcast ? 0 : t.stride(0), rows, cols,
                                  t.stride(1), t.stride(2))) {
    return *op;
  }
  keep = (broadcast ? t.narrow(0, 0, 1) : t).contiguous();
  return *operand_of_layout(keep.data_ptr(), broadcast ? 0 : rows * cols, rows, cols, cols, 1);
}

// The operand for op(t), t 2-D (op: transpose or not); copies as operand_3d does.
Operand operand_2d(const Tensor& t, bool transpose, Tensor& keep) {
  const int64_t rows = t.size(transpose ? 1 : 0), cols = t.size(transpose ? 0 : 1);
  const int64_t row_stride = t.stride(transpose ? 1 : 0), col_stride = t.stride(transpose ? 0 : 1);
  if (auto op = operand_of_layout(t.data_ptr(), 0, rows, cols, row_stride, col_stride)) return *op;
  keep = t.contiguous();  // [R0, R1] row-major: op(t) is row-major, or column-major transposed
  return transpose ? *operand_of_layout(keep.data_ptr(), 0, rows, cols, 1, rows)
                   : *operand_of_layout(keep.data_ptr(), 0, rows, cols, cols, 1);
}

// The problem of a checked 3-D out = a @ b (K >= 1), operands copied into a_copy / b_copy where
// their layout needs it.
Problem problem_3d(const Tensor& a, const Tensor& b, const Tensor& out, Tensor& a_copy,
                   Tensor& b_copy) {
  return Problem{.dtype = out.dtype(),
                 .batch = out.size(0),
                 .m = out.size(1),
                 .n = out.size(2),
                 .k = a.size(2),
                 .a = operand_3d(a, a_copy),
                 .b = operand_3d(b, b_copy),
                 .out = out.data_ptr()};
}

void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta) {
  const char* op = "gemm";
  check_arguments(op, a, b, out);
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  if (batch == 0 || m == 0 || n == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  if (k == 0) {  // an empty sum: out = beta * out
    HG_CUDA_CHECK(detail::launch_gemm_scale(out.data_ptr(), out.dtype(), out.numel(), beta,
                                            current_stream(device)),
                  op);
    return;
  }
  Tensor a_copy, b_copy;
  Problem p = problem_3d(a, b, out, a_copy, b_copy);
  p.alpha = alpha;
  p.beta = beta;
  run(p, device, op);
}

void gemm_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out) {
  const char* op = "gemm_bias";
  check_arguments(op, a, b, out);
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  HG_CHECK(bias.defined(), "{}: expected a bias of shape [{}], got an undefined tensor", op, n);
  check_bias(op, bias, n, out);
  if (batch == 0 || m == 0 || n == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  if (k == 0) {
    HG_CUDA_CHECK(detail::launch_gemm_fill_rows(out.data_ptr(), bias.data_ptr(), out.dtype(),
                                                batch * m, n, current_stream(device)),
                  op);
    return;
  }
  Tensor a_copy, b_copy;
  Problem p = problem_3d(a, b, out, a_copy, b_copy);
  p.bias = bias.data_ptr();
  run_with_bias(p, device, op);
}

// gemm_2d's checks and problem; once the checks pass, `guard` makes out's device current.
// nullopt when nothing is left to multiply (M, N or K zero), out then being written already.
std::optional<Problem> problem_2d(const char* op, const Tensor& a, bool transpose_a,
                                  const Tensor& b, bool transpose_b, const Tensor& out,
                                  const Tensor& bias, Tensor& a_copy, Tensor& b_copy,
                                  std::optional<DeviceGuard>& guard) {
  HG_CHECK(a.defined() && b.defined() && out.defined(),
           "{}: expected defined tensors a, b and out, got an undefined one", op);
  HG_CHECK(a.dim() == 2 && b.dim() == 2 && out.dim() == 2,
           "{}: expected 2-D tensors a, b and out, got shapes {}, {} and {}", op, a.sizes(),
           b.sizes(), out.sizes());
  HG_CHECK(on_one_cuda_device(a, b, out),
           "{}: expected tensors on one CUDA device, got a on {}, b on {} and out on {}", op,
           a.device(), b.device(), out.device());
  HG_CHECK(a.dtype() == b.dtype() && a.dtype() == out.dtype() && a.is_floating_point(),
           "{}: expected a, b and out of one floating dtype, got {}, {} and {}", op, a.dtype(),
           b.dtype(), out.dtype());
  const int64_t m = a.size(transpose_a ? 1 : 0), k = a.size(transpose_a ? 0 : 1);
  const int64_t n = b.size(transpose_b ? 0 : 1);
  HG_CHECK(b.size(transpose_b ? 1 : 0) == k && out.size(0) == m && out.size(1) == n,
           "{}: a of shape {}{} times b of shape {}{} does not fit out of shape {}", op, a.sizes(),
           transpose_a ? " (transposed)" : "", b.sizes(), transpose_b ? " (transposed)" : "",
           out.sizes());
  HG_CHECK(out.is_contiguous(), "{}: out (shape {}, strides {}) must be contiguous", op,
           out.sizes(), out.strides());
  HG_CHECK(!spans_overlap(out, a) && !spans_overlap(out, b),
           "{}: out (shape {}) overlaps a (shape {}) or b (shape {}) in memory", op, out.sizes(),
           a.sizes(), b.sizes());
  if (bias.defined()) check_bias(op, bias, n, out);
  if (m == 0 || n == 0) return std::nullopt;
  guard.emplace(out.device().index);
  const cudaStream_t stream = current_stream(out.device().index);
  if (k == 0) {
    if (bias.defined()) {
      HG_CUDA_CHECK(
          detail::launch_gemm_fill_rows(out.data_ptr(), bias.data_ptr(), out.dtype(), m, n, stream),
          op);
    } else {
      HG_CUDA_CHECK(
          detail::launch_gemm_scale(out.data_ptr(), out.dtype(), out.numel(), 0.0, stream), op);
    }
    return std::nullopt;
  }
  return Problem{.dtype = out.dtype(),
                 .m = m,
                 .n = n,
                 .k = k,
                 .a = operand_2d(a, transpose_a, a_copy),
                 .b = operand_2d(b, transpose_b, b_copy),
                 .out = out.data_ptr(),
                 .bias = bias.defined() ? bias.data_ptr() : nullptr};
}

// Runs p with its bias, if any.
void run_2d(const Problem& p, int device, const char* op) {
  if (p.bias != nullptr) return run_with_bias(p, device, op);
  run(p, device, op);
}

void gemm_2d(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
             const Tensor& out, const Tensor& bias) {
  const char* op = "gemm_2d";
  std::optional<DeviceGuard> guard;
  Tensor a_copy, b_copy;
  if (auto p = problem_2d(op, a, transpose_a, b, transpose_b, out, bias, a_copy, b_copy, guard)) {
    run_2d(*p, out.device().index, op);
  }
}

Tensor gemm_2d_gelu(const Tensor& a, bool transpose_a, const Tensor& b, bool transpose_b,
                    const Tensor& bias, const Tensor& pre) {
  const char* op = "gemm_2d_gelu";
  HG_CHECK(pre.defined() && pre.is_cuda(),
           "{}: expected the pre-activation buffer on a CUDA device, got {}", op,
           pre.defined() ? fmt::format("one on {}", pre.device()) : std::string("none"));
  const int device = pre.device().index;
  std::optional<DeviceGuard> guard;
  Tensor a_copy, b_copy;
  if (auto p = problem_2d(op, a, transpose_a, b, transpose_b, pre, bias, a_copy, b_copy, guard)) {
    // cuBLASLt asks the auxiliary buffer's leading dim (N) to be a multiple of 8.
    if (p->n % 8 == 0) {
      Tensor out = empty(pre.sizes(), pre.options());
      Problem fused = *p;
      fused.out = out.data_ptr();
      fused.gelu_pre = pre.data_ptr();
      if (run(fused, device, op)) return out;  // NOTE [GELU epilogue]
    }
    run_2d(*p, device, op);
  }
  return elementwise_kernels.unary(kernel::Unary::GeluTanh, pre);
}

// The derivative, the product and the column sum as three of the backend's kernels: a 16-bit
// derivative is rounded before the product here, where the CPU's single pass rounds once
// (kernel/linalg.h).
Tensor gelu_backward(const Tensor& g, const Tensor& pre, bool tanh_approximation,
                     const Tensor& bias_grad) {
  kernel::check_gelu_backward("gelu_backward", g, pre, bias_grad, kCUDA);
  const Tensor derivative = elementwise_kernels.unary(
      tanh_approximation ? kernel::Unary::GeluTanhGrad : kernel::Unary::GeluGrad, pre);
  const Tensor out = elementwise_kernels.binary(kernel::Binary::Mul, g, derivative, g.dtype(), 1.0);
  if (bias_grad.defined()) {
    Tensor(bias_grad).copy_(
        reduce_kernels.reduce(kernel::Reduction::Sum, out, {0}, false, g.dtype(), 2.0));
  }
  return out;
}

// ---- the scaled float8 GEMM (NOTE [Scaled fp8 GEMM] in cpu/linalg.cpp) -----------------------

cudaDataType_t float8_data_type(DType dtype) {
  return dtype == kFloat8_e4m3fn ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2;
}

// out [M, N] = (a [M, K] @ b [N, K]^T) * scale_a * scale_b (+ bias), on cuBLASLt's fp8 matmul.
// As NOTE [Row-major GEMM on cuBLASLt] says, out^T (N x M) = b x a^T: cuBLASLt's first
// operand is b, stored K x N column-major with ld K and taken with op T, its second a, K x M
// with op N. That is the one layout ("TN") fp8 tensor cores take, which is why both operands
// are K-contiguous. The scales stay in device memory (A/B_SCALE_POINTER): no host sync.
void scaled_gemm(const Tensor& a, const Tensor& b, const Tensor& scale_a, const Tensor& scale_b,
                 const Tensor& bias, const Tensor& out) {
  const char* op = "scaled_gemm";
  const auto [m, n, k] =
      kernel::check_scaled_gemm(op, a, b, scale_a, scale_b, bias, out, kCUDA);
  if (m == 0 || n == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  int major = 0, minor = 0;
  HG_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), op);
  HG_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), op);
  HG_CHECK(major * 10 + minor >= 89,
           "{}: float8 matrix products need fp8 tensor cores (compute capability 8.9 or newer: "
           "Ada, Hopper), got a device of compute capability {}.{}",
           op, major, minor);
  HG_CHECK(k % 16 == 0 && n % 16 == 0,
           "{}: cuBLASLt's fp8 matmul needs K and N to be multiples of 16, got M = {}, K = {}, "
           "N = {}",
           op, m, k, n);
  const cudaStream_t stream = current_stream(device);
  if (k == 0) {  // an empty sum: out is the bias rows, or zeros
    if (bias.defined()) {
      HG_CUDA_CHECK(detail::launch_gemm_fill_rows(out.data_ptr(), bias.data_ptr(), out.dtype(), m,
                                                  n, stream),
                    op);
    } else {
      HG_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, out.nbytes(), stream), op);
    }
    return;
  }

  DeviceGemm& state = device_gemm(device, op);
  const cudaDataType_t out_type = cuda_data_type(out.dtype());
  cublasLtMatmulDescOpaque_t desc_storage;
  cublasLtMatmulDesc_t desc = &desc_storage;
  HG_CUBLAS_CHECK(cublasLtMatmulDescInit(desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), op);
  set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_T), op);
  set_attribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, int32_t(CUBLAS_OP_N), op);
  const void* scale_first = scale_b.data_ptr();
  const void* scale_second = scale_a.data_ptr();
  set_attribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_first, op);
  set_attribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_second, op);
  cublasLtMatrixLayoutOpaque_t first_layout, second_layout, out_layout;
  init_layout(first_layout, float8_data_type(b.dtype()), k, n, k, 1, 0, op);
  init_layout(second_layout, float8_data_type(a.dtype()), k, m, k, 1, 0, op);
  init_layout(out_layout, out_type, n, m, n, 1, 0, op);

  // The plan with the bias epilogue, or without it (then the bias rows are written into out
  // first and the product added to them, beta = 1).
  auto plan_for = [&](bool with_bias, uint64_t workspace_bytes) {
    cublasLtMatmulDescOpaque_t trial = desc_storage;
    set_attribute(&trial, CUBLASLT_MATMUL_DESC_EPILOGUE,
                  uint32_t(with_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT), op);
    const PlanKey key{.dtype = int(out.dtype()),
                      .compute = int(CUBLAS_COMPUTE_32F),
                      .op_first = int(CUBLAS_OP_T),
                      .op_second = int(CUBLAS_OP_N),
                      .fp8_first = int(b.dtype()),
                      .fp8_second = int(a.dtype()),
                      .m = m,
                      .n = n,
                      .k = k,
                      .ld_first = k,
                      .ld_second = k,
                      .batch = 1,
                      .align_first = alignment_of(b.data_ptr(), 0),
                      .align_second = alignment_of(a.data_ptr(), 0),
                      .align_out = alignment_of(out.data_ptr(), 0),
                      .align_bias = with_bias ? alignment_of(bias.data_ptr(), 0) : 0,
                      .bias = with_bias,
                      .workspace = workspace_bytes};
    auto plan = state.plans.find(key);
    if (plan != state.plans.end()) return plan->second;
    PreferenceHandle preference(op);
    set_preferences(preference.preference, key, /*restrict_reduction=*/false, op);
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        state.handle, &trial, &first_layout, &second_layout, &out_layout, &out_layout,
        preference.preference, 1, &result, &returned);
    std::optional<cublasLtMatmulAlgo_t> algo;
    if (status == CUBLAS_STATUS_SUCCESS && returned > 0) {
      algo = result.algo;
    } else if (!with_bias && status != CUBLAS_STATUS_NOT_SUPPORTED &&
               status != CUBLAS_STATUS_SUCCESS) {
      throw_cublas_error(status, op, "cublasLtMatmulAlgoGetHeuristic");
    }
    return state.plans.emplace(key, algo).first->second;
  };

  std::unique_lock lock(state.mutex);
  void* workspace = workspace_of(state, device, stream, op);
  const uint64_t workspace_bytes = workspace != nullptr ? kWorkspaceBytes : 0;
  bool with_bias = bias.defined();
  std::optional<cublasLtMatmulAlgo_t> algo = plan_for(with_bias, workspace_bytes);
  if (with_bias && !algo.has_value()) {
    with_bias = false;
    algo = plan_for(false, workspace_bytes);
  }
  HG_CHECK(algo.has_value(),
           "{}: cuBLASLt has no fp8 algorithm for ({} [M={}, K={}]) x ({} [N={}, K]) into {} "
           "(alignments {}, {} and {} bytes)",
           op, a.dtype(), m, k, b.dtype(), n, out.dtype(), alignment_of(a.data_ptr(), 0),
           alignment_of(b.data_ptr(), 0), alignment_of(out.data_ptr(), 0));
  lock.unlock();
  set_attribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                uint32_t(with_bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT), op);
  float beta = 0.0f;
  if (with_bias) {
    set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias.data_ptr(), op);
  } else if (bias.defined()) {
    HG_CUDA_CHECK(detail::launch_gemm_fill_rows(out.data_ptr(), bias.data_ptr(), out.dtype(), m,
                                                n, stream),
                  op);
    beta = 1.0f;
  }
  const float alpha = 1.0f;
  HG_CUBLAS_CHECK(cublasLtMatmul(state.handle, desc, &alpha, b.data_ptr(), &first_layout,
                                 a.data_ptr(), &second_layout, &beta, out.data_ptr(), &out_layout,
                                 out.data_ptr(), &out_layout, &*algo, workspace, workspace_bytes,
                                 stream),
                  op);
}

void quantize_fp8(const Tensor& x, const Tensor& scale, const Tensor& amax, const Tensor& out) {
  const char* op = "quantize_fp8";
  const int64_t n = kernel::check_quantize_fp8(op, x, scale, amax, out, kCUDA);
  const int device = x.device().index;
  DeviceGuard guard(device);
  HG_CUDA_CHECK(detail::launch_quantize_fp8(x.data_ptr(), x.dtype(),
                                            static_cast<const float*>(scale.data_ptr()),
                                            static_cast<float*>(amax.data_ptr()), out.data_ptr(),
                                            out.dtype(), n, current_stream(device)),
                op);
}

std::string gemm_backend(DType dtype) {
  switch (dtype) {
    case kFloat16:
    case kBFloat16:
      return "cuBLASLt (tensor cores, fp32 accumulate)";
    case kFloat32:
      return float32_matmul_allows_tf32() ? "cuBLASLt (TF32 tensor cores, fp32 accumulate)"
                                          : "cuBLASLt (fp32)";
    case kFloat64:
      return "cuBLASLt (fp64)";
    default:
      HG_ERROR("gemm_backend: expected a floating dtype, got {}", dtype);
  }
}

}  // namespace

const kernel::LinalgKernels linalg_kernels = HG_LINALG_KERNELS;

}  // namespace hg::cuda
