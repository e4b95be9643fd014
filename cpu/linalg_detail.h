// What the files of the CPU GEMM share, and no one else includes: the problem as the paths see
// it (raw pointers and element strides), the per-thread work buffers, and the paths themselves
// (NOTE [CPU GEMM paths] in cpu/linalg.cpp says which runs when).
//
// Dims: B batch, M rows of a and out, K the reduced dim, N columns of b and out.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "halfgrad/core/dtype.h"
#include "halfgrad/cpu/kernel_choices.h"
#include "halfgrad/cpu/linalg.h"

namespace hg::cpu::linalg_detail {

// ---- the problem as the kernels see it --------------------------------------------------

// B matrices of rows x cols elements, each row-major (col_stride == 1) or column-major
// (row_stride == 1, col_stride >= 2); batch_stride is 0 when one matrix serves every batch.
struct MatrixOperand {
  const char* data;  // element [0, 0, 0]
  int64_t batch_stride;
  int64_t row_stride;
  int64_t col_stride;  // all in elements

  bool row_major() const { return col_stride == 1; }
  bool broadcast() const { return batch_stride == 0; }
};

struct Problem {
  DType dtype;
  int64_t batch, m, n, k;
  MatrixOperand a;  // M x K
  MatrixOperand b;  // K x N
  char* out;        // contiguous [B, M, N]
  double alpha, beta;
  // Contiguous [N] added to every row, or null: taken by the oneDNN path, the small kernel and
  // the float32 tiles of 16-bit products (which hand it on to one of those two).
  const char* bias = nullptr;
  // out (and the bias) are float32 while a and b are of dtype: the oneDNN products of the split
  // float16 path (NOTE [float16 as bfloat16 pairs] in cpu/reduced_gemm.cpp).
  bool float32_out = false;
};

// The operand for a rows x cols matrix with the given strides, or nullopt when its layout is
// neither row- nor column-major (a BLAS-style kernel cannot read it). Size-1 dims carry no
// layout information: they get the strides of a dense layout, so equal layouts compare equal
// (the oneDNN cache keys on them).
inline std::optional<MatrixOperand> matrix_operand(const void* data, int64_t batch_stride,
                                                   int64_t rows, int64_t cols, int64_t row_stride,
                                                   int64_t col_stride) {
  MatrixOperand op{static_cast<const char*>(data), batch_stride, 0, 0};
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols)) {
    op.row_stride = rows == 1 ? cols : row_stride;
    op.col_stride = 1;
    return op;
  }
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows)) {
    op.row_stride = 1;
    op.col_stride = cols == 1 ? rows : col_stride;
    return op;
  }
  return std::nullopt;
}

inline const char* element(const MatrixOperand& op, size_t element_size, int64_t batch, int64_t row,
                           int64_t col) {
  return op.data + (batch * op.batch_stride + row * op.row_stride + col * op.col_stride) *
                       int64_t(element_size);
}

// A per-thread buffer of at least `bytes`, 64-byte aligned, kept for the thread's next calls
// (fresh pages on every call would cost as much as the work done in them). Slot tells apart
// the buffers one call needs at once.
void* thread_buffer(int slot, size_t bytes);

enum BufferSlot {
  kScratchpadSlot,
  kATileSlot,
  kBTileSlot,
  kOutTileSlot,
  kSmallPackSlot,
  kBiasSlot,
  kBufferSlots
};

// ---- the paths ------------------------------------------------------------------------------

// p (K > 0) on Eigen, T float or double (cpu/eigen_gemm.cpp).
template <class T>
void eigen_gemm(const Problem& p);

// float32 p (K > 0) on the small kernel, in the widest copy allowed (NOTE [Small GEMM kernel]
// in cpu/small_gemm.cpp). Adds p.bias at its one store.
void small_gemm(const Problem& p);
// The widest copy of the small kernel this CPU runs: 2 AVX-512, 1 AVX2+FMA, 0 baseline.
int small_gemm_cpu_level();

// Runs p on oneDNN, copying the operands to dense row-major when oneDNN has no usable kernel
// for their layouts; false when it has none for the dense layout either, or halfgrad is built
// without oneDNN (cpu/onednn.cpp).
bool onednn_gemm(const Problem& p);
// Whether oneDNN runs bfloat16 (float16) on this CPU with more than its reference kernel.
bool onednn_runs_bf16();
bool onednn_runs_f16();
// The implementation oneDNN picks for a row-major 1024^3 GEMM of dtype ("none" when it has no
// usable one). Defined only in a build with oneDNN.
std::string onednn_probe(DType dtype);

// float32 p (K > 0) on impl (Small, OneDNN or Eigen; OneDNN falls back to Eigen where oneDNN
// has no kernel) (cpu/linalg.cpp).
void float32_gemm(const Problem& p, GemmImpl impl);
// float32 p (alpha 1, beta 0, K > 0) with p.bias added to every row, on impl: the small kernel
// and oneDNN take the bias; elsewhere (Eigen, or a layout oneDNN refuses) the bias rows are
// written into out first and the product added with beta = 1 (NOTE [GEMM with bias]).
void float32_gemm_bias(Problem p, GemmImpl impl);
// out's rows, every one set to the bias row (both of p.dtype).
void fill_rows(const Problem& p, const char* bias);

// float16 or bfloat16 p (K > 0) through float32 tiles on the float32 implementation
// float32_impl (NOTE [fp16 GEMM through fp32 tiles] in cpu/reduced_gemm.cpp); p.bias (of p's
// dtype, with alpha 1 and beta 0) is added in the tiles' float32 accumulators.
void reduced_gemm_via_float32(const Problem& p, GemmImpl float32_impl);
// float16 p (K > 0) as bfloat16 pairs on oneDNN's bfloat16 kernel (NOTE [float16 as bfloat16
// pairs] in cpu/reduced_gemm.cpp); p.bias as for reduced_gemm_via_float32. False, with out
// untouched, where oneDNN does not run bfloat16 natively.
bool split_gemm_via_bfloat16(const Problem& p);

// ---- the path of each problem (NOTE [GEMM path by measurement] in cpu/gemm_path.cpp) --------

// Runs p (K > 0; with p.bias only where alpha is 1 and beta 0) on path, which must be one of
// gemm_paths(p.dtype) (cpu/linalg.cpp).
void run_path(const Problem& p, GemmPath path);
// The path gemm takes for p: the dtype's set path, or the one measured fastest for p's shape
// class and thread count (measured at the first problem of the class), counting the call.
GemmPath path_for(const Problem& p);
// Whether path can run p's dtype on this CPU and build (GemmPath::Auto: false).
bool path_available(DType dtype, GemmPath path);
// Problems under this many multiply-adds in all are small: the small kernel is a candidate
// for them, and below kTinyGemm it is the path kept unless another is clearly faster.
constexpr int64_t kTinyGemm = int64_t(1) << 15;
constexpr int64_t kSmallCandidate = int64_t(1) << 20;

// The process-wide table of choices made by measurement, by class (the GEMM's paths, NOTE
// [GEMM path by measurement]; conv2d's, NOTE [oneDNN convolutions]): each choice once, in the
// order first met, with its call count; `mutex` guards the map and the list.
template <class Info, size_t KeySize>
struct ChoiceTable {
  struct Choice {
    Info info;
    std::atomic<int64_t> calls{0};
  };
  using Key = std::array<int64_t, KeySize>;

  std::mutex mutex;
  std::map<Key, std::shared_ptr<Choice>> choices;
  std::vector<std::shared_ptr<Choice>> in_order;

  void clear() {
    std::lock_guard<std::mutex> lock(mutex);
    choices.clear();
    in_order.clear();
  }

  // Each choice with its key, in the order first met.
  std::vector<std::pair<Key, std::shared_ptr<Choice>>> keyed_in_order() {
    std::lock_guard<std::mutex> lock(mutex);
    std::map<const Choice*, const Key*> keys;
    for (const auto& [key, choice] : choices) keys.emplace(choice.get(), &key);
    std::vector<std::pair<Key, std::shared_ptr<Choice>>> keyed;
    for (const auto& choice : in_order) keyed.emplace_back(*keys.at(choice.get()), choice);
    return keyed;
  }

  // The choices measured or restored, in the order first met, as a checkpoint keeps them
  // (NOTE [Kernel choices across processes] in cpu/kernel_choices.cpp); path_name names the
  // path of each.
  template <class PathName>
  std::vector<kernel_choices_detail::SavedChoice> saved(PathName path_name) {
    std::vector<kernel_choices_detail::SavedChoice> kept;
    for (const auto& [key, choice] : keyed_in_order()) {
      if (!choice->info.measured && !choice->info.restored) continue;
      kept.push_back({std::vector<int64_t>(key.begin(), key.end()),
                      std::string(path_name(choice->info.path)), choice->info.shape_class});
    }
    return kept;
  }

  // Makes `made` the choice of `key`, in place of one there was (restore_kernel_choices).
  void replace(const Key& key, std::shared_ptr<Choice> made) {
    std::lock_guard<std::mutex> lock(mutex);
    auto [entry, inserted] = choices.emplace(key, made);
    if (inserted) {
      in_order.push_back(std::move(made));
      return;
    }
    std::replace(in_order.begin(), in_order.end(), entry->second, made);
    entry->second = std::move(made);
  }
};

}  // namespace hg::cpu::linalg_detail
