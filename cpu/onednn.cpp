// halfgrad's use of oneDNN: whether it is built in and its version (onednn.h), and the CPU
// GEMM's oneDNN path, matmul primitives kept in a process-wide cache (NOTE [oneDNN matmul
// cache]), which cpu/linalg.cpp calls through cpu/linalg_detail.h.
#include "halfgrad/cpu/onednn.h"

#include <omp.h>

#include <array>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

#include <fmt/format.h>

#include "halfgrad/config.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/linalg_detail.h"

#if HALFGRAD_HAS_ONEDNN
#include <dnnl.h>
#include <dnnl.hpp>

#include "halfgrad/cpu/onednn_runtime.h"
#endif

namespace hg::cpu {

bool onednn_enabled() { return HALFGRAD_HAS_ONEDNN; }

std::string onednn_version() {
#if HALFGRAD_HAS_ONEDNN
  const dnnl_version_t* v = dnnl_version();
  const char* runtime = v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OMP"
                        : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                        : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                             : "other";
  return fmt::format("{}.{}.{} (cpu runtime: {})", v->major, v->minor, v->patch, runtime);
#else
  return "not built";
#endif
}

// ---- the GEMM's oneDNN path -----------------------------------------------------------------

namespace linalg_detail {

#if HALFGRAD_HAS_ONEDNN

namespace {

// NOTE [oneDNN matmul cache] Creating a matmul primitive costs far more than running a small
// one, so primitives are kept in a process-wide map keyed by everything that shapes them:
// dtype, B, M, N, K, each operand's batch size and strides, alpha, beta, and the OpenMP
// thread count (a primitive splits its work for the threads it was made for, so a call after
// omp_set_num_threads gets its own). The map is behind a mutex; the engine is created once,
// each thread has its own stream, and the scratchpad is the caller's (scratchpad_mode::user,
// a per-thread thread_buffer): with oneDNN's own scratchpad a primitive must run on the
// thread that created it, which a shared cache cannot promise. A layout for which oneDNN
// offers only its reference kernel ("ref:any") is cached as unusable; gemm then copies the
// operands to dense row-major and asks again. Each thread keeps the memory objects it runs a
// primitive with (thread_args), pointing them at each call's data.

// A tensor viewing an operand's matrices (one matrix when it is broadcast).
Tensor operand_view(const MatrixOperand& op, DType dtype, int64_t batch, int64_t rows,
                    int64_t cols) {
  const int64_t matrices = op.broadcast() ? 1 : batch;
  const int64_t batch_stride = op.broadcast() ? rows * cols : op.batch_stride;
  return from_blob(const_cast<char*>(op.data), {matrices, rows, cols}, dtype,
                   Shape{batch_stride, op.row_stride, op.col_stride});
}

// The operand as a dense row-major copy, which `keep` owns.
MatrixOperand densify(const MatrixOperand& op, DType dtype, int64_t batch, int64_t rows,
                      int64_t cols, Tensor& keep) {
  keep = operand_view(op, dtype, batch, rows, cols).clone();
  return *matrix_operand(keep.data_ptr(), op.broadcast() ? 0 : rows * cols, rows, cols, cols, 1);
}

struct CachedMatmul {
  dnnl::matmul primitive;
  dnnl::memory::desc a_desc, b_desc, bias_desc, out_desc, scratchpad_desc;
  std::string implementation;  // oneDNN's name for the kernel, e.g. "brg:avx512_core_amx"
  bool usable = false;
};

using MatmulKey = std::array<int64_t, 16>;

using onednn_runtime::thread_stream;

dnnl::engine& cpu_engine() { return onednn_runtime::engine(); }

dnnl::memory::data_type onednn_type(DType dtype) {
  return onednn_runtime::data_type(dtype, "gemm: matmul");
}

// oneDNN's view of op: [matrices, rows, cols] with op's strides.
dnnl::memory::desc onednn_desc(const MatrixOperand& op, DType dtype, int64_t batch, int64_t rows,
                               int64_t cols) {
  const int64_t matrices = op.broadcast() ? 1 : batch;
  const int64_t batch_stride = op.broadcast()
                                   ? (op.row_major() ? rows * op.row_stride : cols * op.col_stride)
                                   : op.batch_stride;
  return dnnl::memory::desc({matrices, rows, cols}, onednn_type(dtype),
                            {batch_stride, op.row_stride, op.col_stride});
}

// The primitive for p with p.batch matrices (1 when both operands are broadcast: gemm then
// runs it once per batch).
std::shared_ptr<const CachedMatmul> create_matmul(const Problem& p, int64_t batch) {
  auto made = std::make_shared<CachedMatmul>();
  made->a_desc = onednn_desc(p.a, p.dtype, batch, p.m, p.k);
  made->b_desc = onednn_desc(p.b, p.dtype, batch, p.k, p.n);
  const DType out_dtype = p.float32_out ? kFloat32 : p.dtype;
  made->out_desc = dnnl::memory::desc({batch, p.m, p.n}, onednn_type(out_dtype), {p.m * p.n, p.n, 1});
  if (p.bias != nullptr) {
    made->bias_desc = dnnl::memory::desc({1, 1, p.n}, onednn_type(out_dtype), {p.n, p.n, 1});
  }
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  // float32 stays float32 even when ONEDNN_DEFAULT_FPMATH_MODE allows down-conversion.
  attr.set_fpmath_mode(dnnl::fpmath_mode::strict);
  if (p.alpha != 1) attr.set_output_scales(0, {float(p.alpha)});
  if (p.beta != 0) {
    dnnl::post_ops ops;
    ops.append_sum(float(p.beta));
    attr.set_post_ops(ops);
  }
  try {
    const dnnl::matmul::desc desc =
        p.bias != nullptr
            ? dnnl::matmul::desc(made->a_desc, made->b_desc, made->bias_desc, made->out_desc)
            : dnnl::matmul::desc(made->a_desc, made->b_desc, made->out_desc);
    const dnnl::matmul::primitive_desc pd(desc, attr, cpu_engine());
    made->implementation = pd.impl_info_str();
    made->usable = !made->implementation.starts_with("ref");
    if (made->usable) {
      made->primitive = dnnl::matmul(pd);
      made->scratchpad_desc = pd.scratchpad_desc();
    }
  } catch (const dnnl::error& e) {  // no implementation for this dtype or layout
    made->implementation = e.what();
    made->usable = false;
  }
  return made;
}

// Per thread, the memory objects of at most this many primitives are kept.
constexpr size_t kMaxThreadArgs = 256;

class MatmulCache {
 public:
  std::shared_ptr<const CachedMatmul> get(const Problem& p, int64_t batch) {
    const MatmulKey key = {int64_t(p.dtype),
                           batch,
                           p.m,
                           p.n,
                           p.k,
                           p.a.batch_stride,
                           p.a.row_stride,
                           p.a.col_stride,
                           p.b.batch_stride,
                           p.b.row_stride,
                           p.b.col_stride,
                           std::bit_cast<int64_t>(p.alpha),
                           std::bit_cast<int64_t>(p.beta),
                           omp_get_max_threads(),
                           p.bias != nullptr,
                           p.float32_out};
    return cache_.get(key, [&] { return create_matmul(p, batch); });
  }

  int64_t size() { return cache_.size(); }

 private:
  onednn_runtime::PrimitiveCache<MatmulKey, CachedMatmul, 4096> cache_;
};

MatmulCache& matmul_cache() {
  static MatmulCache cache;
  return cache;
}

// The memory objects a thread runs a cached primitive with (NOTE [oneDNN matmul cache]): made
// the first time the thread runs it, then only pointed at each call's data. Creating them per
// call (an allocation each, and a hash map of them) was a third of a small GEMM's 1.5 us.
struct ThreadArgs {
  std::shared_ptr<const CachedMatmul> matmul;  // keeps the key's primitive, and address, alive
  std::unordered_map<int, dnnl::memory> args;
};

std::unordered_map<int, dnnl::memory>& thread_args(const std::shared_ptr<const CachedMatmul>& m,
                                                   const Problem& p) {
  thread_local std::unordered_map<const CachedMatmul*, ThreadArgs> cache;
  auto found = cache.find(m.get());
  if (found != cache.end()) return found->second.args;
  if (cache.size() >= kMaxThreadArgs) cache.clear();  // a thread cycling through endless shapes
  const dnnl::engine& engine = cpu_engine();
  ThreadArgs made{m, {}};
  made.args.emplace(DNNL_ARG_SRC, dnnl::memory(m->a_desc, engine, const_cast<char*>(p.a.data)));
  made.args.emplace(DNNL_ARG_WEIGHTS, dnnl::memory(m->b_desc, engine, const_cast<char*>(p.b.data)));
  made.args.emplace(DNNL_ARG_DST, dnnl::memory(m->out_desc, engine, p.out));
  if (p.bias != nullptr) {
    made.args.emplace(DNNL_ARG_BIAS, dnnl::memory(m->bias_desc, engine, const_cast<char*>(p.bias)));
  }
  const size_t scratchpad_bytes = m->scratchpad_desc.get_size();
  if (scratchpad_bytes > 0) {
    made.args.emplace(
        DNNL_ARG_SCRATCHPAD,
        dnnl::memory(m->scratchpad_desc, engine, thread_buffer(kScratchpadSlot, scratchpad_bytes)));
  }
  return cache.emplace(m.get(), std::move(made)).first->second.args;
}

// Runs p on oneDNN with p's layouts; false when oneDNN has no usable kernel for them.
bool onednn_gemm_as_is(const Problem& p) {
  const bool both_broadcast = p.a.broadcast() && p.b.broadcast();
  const std::shared_ptr<const CachedMatmul> matmul =
      matmul_cache().get(p, both_broadcast ? 1 : p.batch);
  if (!matmul->usable) return false;
  const size_t out_matrix_bytes =
      size_t(p.m * p.n) * (p.float32_out ? sizeof(float) : element_size(p.dtype));
  const int64_t launches = both_broadcast ? p.batch : 1;
  try {
    std::unordered_map<int, dnnl::memory>& args = thread_args(matmul, p);
    args.at(DNNL_ARG_SRC).set_data_handle(const_cast<char*>(p.a.data));
    args.at(DNNL_ARG_WEIGHTS).set_data_handle(const_cast<char*>(p.b.data));
    if (p.bias != nullptr) args.at(DNNL_ARG_BIAS).set_data_handle(const_cast<char*>(p.bias));
    const size_t scratchpad_bytes = matmul->scratchpad_desc.get_size();
    if (scratchpad_bytes > 0) {
      args.at(DNNL_ARG_SCRATCHPAD)
          .set_data_handle(thread_buffer(kScratchpadSlot, scratchpad_bytes));
    }
    dnnl::stream& stream = thread_stream();
    for (int64_t i = 0; i < launches; ++i) {
      args.at(DNNL_ARG_DST).set_data_handle(p.out + i * out_matrix_bytes);
      matmul->primitive.execute(stream, args);
    }
    stream.wait();
  } catch (const dnnl::error& e) {
    HG_ERROR("gemm: oneDNN's matmul ({}) failed on {} [{}, {}, {}] x [{}, {}, {}]: {}",
             matmul->implementation, p.dtype, p.batch, p.m, p.k, p.batch, p.k, p.n, e.what());
  }
  return true;
}

}  // namespace

// Runs p on oneDNN, copying the operands to dense row-major when oneDNN has no usable kernel
// for their layouts; false when it has none for the dense layout either.
bool onednn_gemm(const Problem& p) {
  if (onednn_gemm_as_is(p)) return true;
  const bool dense_already =
      p.a.row_major() && p.a.row_stride == p.k && p.b.row_major() && p.b.row_stride == p.n;
  if (dense_already) return false;
  Tensor a_copy, b_copy;
  Problem dense = p;
  dense.a = densify(p.a, p.dtype, p.batch, p.m, p.k, a_copy);
  dense.b = densify(p.b, p.dtype, p.batch, p.k, p.n, b_copy);
  return onednn_gemm_as_is(dense);
}

// The implementation oneDNN picks for a row-major 1024^3 GEMM of dtype.
std::string onednn_probe(DType dtype) {
  const int64_t size = 1024;
  const MatrixOperand dense{nullptr, size * size, size, 1};
  const Problem p{dtype, 1, size, size, size, dense, dense, nullptr, 1.0, 0.0};
  const std::shared_ptr<const CachedMatmul> matmul = matmul_cache().get(p, 1);
  return matmul->usable ? matmul->implementation : "none";
}

bool onednn_runs_bf16() {
  static const bool runs = onednn_probe(kBFloat16) != "none";
  return runs;
}

bool onednn_runs_f16() {
  static const bool runs = onednn_probe(kFloat16) != "none";
  return runs;
}

#else

bool onednn_gemm(const Problem&) { return false; }
bool onednn_runs_bf16() { return false; }
bool onednn_runs_f16() { return false; }

#endif  // HALFGRAD_HAS_ONEDNN

}  // namespace linalg_detail

namespace detail {

int64_t onednn_matmul_cache_size() {
#if HALFGRAD_HAS_ONEDNN
  return linalg_detail::matmul_cache().size();
#else
  return 0;
#endif
}

}  // namespace detail

}  // namespace hg::cpu
