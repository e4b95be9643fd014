// CPU reductions. One engine (run_reduction) walks any strided input for every reduction
// here; an op is a small struct saying how to start, fold in values and finish.
//
// NOTE [Reduction accumulators] Values are loaded into a value type V and accumulated in V:
// float for float16/bfloat16/float32, double for float64, int64 for integers and bool. The
// engine writes finished results as V into a contiguous tensor, which is then converted to
// the requested dtype: the only rounding of the result. float16/bfloat16 rows are widened to
// float in blocks (convert.h), so no arithmetic ever happens in 16 bits.
//
// NOTE [Reduction layout] The input's dims are split into kept and reduced ones. Size-1 dims
// are dropped, the rest ordered by input stride (outermost first) and neighbours of the same
// kind that are back to back in memory (and, for kept dims, in the output) are merged. The
// innermost dim then decides the walk:
//   - reduced ("inner" walk): each output folds runs along that dim, read contiguously when
//     its stride is 1, with several partial accumulators (fold_row) so the loop vectorizes;
//   - kept ("outer" walk): a block of up to kMaxColumns neighbouring outputs is accumulated
//     one input row at a time (acc[j] = combine(acc[j], x[r, j])), so memory is read in rows.
//
// NOTE [Deterministic reductions] The order in which an output's elements are combined
// depends only on the shapes, strides and dtypes, never on the number of OpenMP threads:
// each output is folded by one thread in a fixed order, except that an output of a
// reduction with few outputs (< kFewOutputs) is cut into pieces of kPiece elements (inner
// walk; rows totalling about as many in the outer walk) that threads fold separately and
// that are combined in piece order afterwards, so that a full reduction still uses every
// thread. The outer walk's column blocks are narrowed to give every thread work; that
// changes which thread folds an output, not how.
#include "halfgrad/cpu/reduce.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/convert.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/strided_loop.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/kernel/checks.h"
#include "halfgrad/kernel/formulas.h"
#include "halfgrad/kernel/kinds.h"
#include "halfgrad/kernel/reduce.h"

namespace hg::cpu {

namespace {

using kernel::Reduction;
using kernel::reduction_name;
using kernel::Scan;
using kernel::ValuesIndices;

// Values converted at a time by the inner walk and cumsum.
constexpr int64_t kBlock = 512;
// Outputs accumulated together by the outer walk: at most a row of this many (the
// accumulators stay in L1/L2), at least this few per block when splitting for threads.
constexpr int64_t kMaxColumns = 4096;
constexpr int64_t kMinColumns = 256;
// Fewer outputs than this split their elements into pieces (NOTE [Deterministic reductions]).
constexpr int64_t kFewOutputs = 64;
constexpr int64_t kPiece = 32768;
// Partial accumulators per row in fold_row.
constexpr int kPartials = 16;

// The value (and accumulator) type for storage type T: NOTE [Reduction accumulators].
template <class T>
using value_t = std::conditional_t<std::is_same_v<T, double>, double,
                                   std::conditional_t<is_floating_v<T>, float, int64_t>>;

// int64 arithmetic that wraps on overflow (as unsigned arithmetic does) instead of being
// undefined; float and double use the plain operators.
template <class V>
V add(V a, V b) {
  if constexpr (std::is_integral_v<V>) {
    return V(uint64_t(a) + uint64_t(b));
  } else {
    return a + b;
  }
}
template <class V>
V multiply(V a, V b) {
  if constexpr (std::is_integral_v<V>) {
    return V(uint64_t(a) * uint64_t(b));
  } else {
    return a * b;
  }
}

template <class V>
bool is_nan(V v) {
  if constexpr (std::is_floating_point_v<V>) {
    return v != v;
  } else {
    return false;
  }
}

// max/min that propagate NaN: once an operand is NaN, so is the result.
template <class V>
V nan_max(V a, V b) {
  return (b > a || is_nan(b)) ? b : a;
}
template <class V>
V nan_min(V a, V b) {
  return (b < a || is_nan(b)) ? b : a;
}

// ---- Loading values -----------------------------------------------------------------------

// n values of T starting at p, `stride` elements apart, as V: p itself when no conversion is
// needed, otherwise `buffer` (room for n values) filled with the converted values.
template <class T, class V>
const V* load_values(const T* p, int64_t stride, int64_t n, V* buffer) {
  if constexpr (std::is_same_v<T, V>) {
    if (stride == 1) return p;
  }
  if (stride == 1) {
    if constexpr (std::is_same_v<T, Half>) {
      convert::half_to_float(p, buffer, n);
      return buffer;
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      convert::bfloat16_to_float(p, buffer, n);
      return buffer;
    }
  }
  for (int64_t i = 0; i < n; ++i) buffer[i] = cast_value<V>(p[i * stride]);
  return buffer;
}

// ---- Folds --------------------------------------------------------------------------------
// A fold reduces with acc = combine(acc, map(x, shift)), starting from identity(), and ends
// with finish(acc, shift, count). `shift` is a per-output value from an earlier pass (the
// max for logsumexp, the mean for var); folds that do not use it ignore it.

template <class V>
struct SumFold {
  static constexpr bool kUsesShift = false;
  V identity() const { return V(0); }
  V map(V x, V) const { return x; }
  V combine(V a, V b) const { return add(a, b); }
  V finish(V acc, V, int64_t) const { return acc; }
};

template <class V>
struct ProdFold {
  static constexpr bool kUsesShift = false;
  V identity() const { return V(1); }
  V map(V x, V) const { return x; }
  V combine(V a, V b) const { return multiply(a, b); }
  V finish(V acc, V, int64_t) const { return acc; }
};

template <class V>
struct MeanFold : SumFold<V> {
  // Over zero elements 0 / 0 gives NaN, as in PyTorch.
  V finish(V acc, V, int64_t count) const { return V(double(acc) / double(count)); }
};

template <class V>
struct MaxFold {
  static constexpr bool kUsesShift = false;
  V identity() const {
    if constexpr (std::is_floating_point_v<V>) return -std::numeric_limits<V>::infinity();
    return std::numeric_limits<V>::lowest();
  }
  V map(V x, V) const { return x; }
  V combine(V a, V b) const { return nan_max(a, b); }
  V finish(V acc, V, int64_t) const { return acc; }
};

template <class V>
struct MinFold {
  static constexpr bool kUsesShift = false;
  V identity() const {
    if constexpr (std::is_floating_point_v<V>) return std::numeric_limits<V>::infinity();
    return std::numeric_limits<V>::max();
  }
  V map(V x, V) const { return x; }
  V combine(V a, V b) const { return nan_min(a, b); }
  V finish(V acc, V, int64_t) const { return acc; }
};

// logsumexp, pass 1: the max, made 0 where it is infinite so that pass 2 never computes
// inf - inf (all -inf then gives log(0) = -inf, and any +inf gives log(inf) = inf).
template <class V>
struct LogSumExpShiftFold : MaxFold<V> {
  V finish(V acc, V, int64_t) const { return std::isinf(acc) ? V(0) : acc; }
};

// logsumexp, pass 2.
template <class V>
struct LogSumExpFold {
  static constexpr bool kUsesShift = true;
  V identity() const { return V(0); }
  V map(V x, V shift) const { return std::exp(x - shift); }
  V combine(V a, V b) const { return a + b; }
  V finish(V acc, V shift, int64_t) const { return std::log(acc) + shift; }
};

template <class V>
struct NormZeroFold : SumFold<V> {  // the count of nonzeros (NaN counts)
  V map(V x, V) const { return x != V(0) ? V(1) : V(0); }
};

template <class V>
struct NormOneFold : SumFold<V> {
  V map(V x, V) const { return std::abs(x); }
};

template <class V>
struct NormTwoFold : SumFold<V> {
  V map(V x, V) const { return x * x; }
  V finish(V acc, V, int64_t) const { return std::sqrt(acc); }
};

template <class V>
struct NormInfFold : SumFold<V> {
  V map(V x, V) const { return std::abs(x); }
  V combine(V a, V b) const { return nan_max(a, b); }
};

template <class V>
struct NormPFold : SumFold<V> {
  V p;
  V map(V x, V) const { return std::pow(std::abs(x), p); }
  V finish(V acc, V, int64_t) const { return std::pow(acc, V(1) / p); }
};

// var, pass 2 (pass 1 is MeanFold): the sum of squared deviations from the mean.
template <class V>
struct VarFold {
  static constexpr bool kUsesShift = true;
  int64_t correction;
  V identity() const { return V(0); }
  V map(V x, V mean) const { return (x - mean) * (x - mean); }
  V combine(V a, V b) const { return a + b; }
  V finish(V acc, V, int64_t count) const {
    const int64_t dof = count - correction;
    return dof > 0 ? V(double(acc) / double(dof)) : std::numeric_limits<V>::quiet_NaN();
  }
};

// Folds n contiguous values with kPartials independent accumulators (combined as a tree at
// the end, unrolled so that they stay in registers), so the loop vectorizes. Which path a
// row takes depends only on n, so results stay deterministic.
template <class V, class Fold>
V fold_row(const Fold& fold, const V* x, int64_t n, V shift) {
  if (n < 4 * kPartials) {
    // Short rows: four accumulators in named variables (an array's tree, spilled to the
    // stack, would cost more than the fold).
    V a0 = fold.identity(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      a0 = fold.combine(a0, fold.map(x[i], shift));
      a1 = fold.combine(a1, fold.map(x[i + 1], shift));
      a2 = fold.combine(a2, fold.map(x[i + 2], shift));
      a3 = fold.combine(a3, fold.map(x[i + 3], shift));
    }
    for (; i < n; ++i) a0 = fold.combine(a0, fold.map(x[i], shift));
    return fold.combine(fold.combine(a0, a1), fold.combine(a2, a3));
  }
  std::array<V, kPartials> part;
  part.fill(fold.identity());
  int64_t i = 0;
  for (; i + kPartials <= n; i += kPartials) {
    for (int k = 0; k < kPartials; ++k) part[k] = fold.combine(part[k], fold.map(x[i + k], shift));
  }
  // The tail goes to its own accumulator: indexing the partials with a runtime k would keep
  // them in memory.
  V tail = fold.identity();
  for (; i < n; ++i) tail = fold.combine(tail, fold.map(x[i], shift));
#pragma GCC unroll 16
  for (int width = kPartials / 2; width > 0; width /= 2) {
#pragma GCC unroll 16
    for (int k = 0; k < width; ++k) part[k] = fold.combine(part[k], part[k + width]);
  }
  return fold.combine(part[0], tail);
}

// ---- Ops: what the engine calls -----------------------------------------------------------
// An op has a Value type V and an accumulator type Acc, and
//   identity()                                     the accumulator of zero elements
//   reduce_row(x, n, shift, first_index) -> Acc    folds n >= 1 contiguous values
//   accumulate_cols(acc, x, n, shifts, row_index)  acc[j] = combine(acc[j], x[j]), j < n
//   combine(a, b) -> Acc                           a's elements come before b's
//   shift_at(o) -> V                               output o's shift (V() when unused)
//   store(o, acc)                                  finishes output o
// Indices are positions in the reduced dims; only the arg ops use them.

template <class V, class Fold>
struct FoldOp {
  using Value = V;
  using Acc = V;
  static constexpr bool kUsesShift = Fold::kUsesShift;

  Fold fold;
  V* out;
  const V* shift = nullptr;
  int64_t count = 0;

  Acc identity() const { return fold.identity(); }
  Acc reduce_row(const V* x, int64_t n, V s, int64_t) const { return fold_row(fold, x, n, s); }
  void accumulate_cols(Acc* acc, const V* x, int64_t n, const V* s, int64_t) const {
    if constexpr (kUsesShift) {
      for (int64_t j = 0; j < n; ++j) acc[j] = fold.combine(acc[j], fold.map(x[j], s[j]));
    } else {
      for (int64_t j = 0; j < n; ++j) acc[j] = fold.combine(acc[j], fold.map(x[j], V()));
    }
  }
  Acc combine(Acc a, Acc b) const { return fold.combine(a, b); }
  V shift_at(int64_t o) const {
    if constexpr (kUsesShift) return shift[o];
    return V();
  }
  void store(int64_t o, Acc acc) const { out[o] = fold.finish(acc, shift_at(o), count); }
};

// The extreme value and its (first) index, for max_dim / min_dim / argmax.
template <class V, bool kMax>
struct ArgOp {
  struct Acc {
    V value;
    int64_t index;  // -1: no element yet
  };
  using Value = V;
  static constexpr bool kUsesShift = false;

  V* values;
  int64_t* indices;

  // True when a is strictly beyond b. NaN is beyond every number, and a later NaN is not
  // beyond an earlier one, so the first NaN wins.
  static bool beyond(V a, V b) {
    if (is_nan(b)) return false;
    if (is_nan(a)) return true;
    return kMax ? a > b : a < b;
  }

  Acc identity() const { return {V(), -1}; }
  Acc reduce_row(const V* x, int64_t n, V, int64_t first_index) const {
    Acc best{x[0], first_index};
    for (int64_t i = 1; i < n; ++i) {
      if (beyond(x[i], best.value)) best = {x[i], first_index + i};
    }
    return best;
  }
  void accumulate_cols(Acc* acc, const V* x, int64_t n, const V*, int64_t row_index) const {
    for (int64_t j = 0; j < n; ++j) {
      if (acc[j].index < 0 || beyond(x[j], acc[j].value)) acc[j] = {x[j], row_index};
    }
  }
  Acc combine(Acc a, Acc b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    return beyond(b.value, a.value) ? b : a;
  }
  V shift_at(int64_t) const { return V(); }
  void store(int64_t o, Acc acc) const {
    values[o] = acc.value;
    indices[o] = acc.index;
  }
};

// ---- Layout -------------------------------------------------------------------------------

// Dims walked together, outer first, with input and output strides in elements.
struct WalkDims {
  Shape sizes;
  Shape in_strides;
  Shape out_strides;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
};

// NOTE [Reduction layout].
struct ReducePlan {
  int64_t outputs = 1;  // O: output elements
  int64_t count = 1;    // elements folded into each output
  bool inner = true;    // the innermost dim is reduced
  // The innermost dim: reduced (inner walk) or kept (outer walk).
  int64_t row_size = 1;
  int64_t row_in_stride = 0;
  int64_t row_out_stride = 0;
  WalkDims kept;     // kept dims other than the innermost dim
  WalkDims reduced;  // reduced dims other than the innermost dim
};

ReducePlan make_plan(const Tensor& x, const std::vector<bool>& reduced) {
  struct Dim {
    int64_t size, in_stride, out_stride;
    bool reduced;
  };
  ReducePlan plan;
  std::vector<Dim> dims(size_t(x.dim()));
  int64_t out_stride = 1;
  for (int64_t d = x.dim() - 1; d >= 0; --d) {
    const int64_t size = x.sizes()[d];
    dims[d] = {size, x.strides()[d], reduced[d] ? 0 : out_stride, reduced[d]};
    if (reduced[d]) {
      plan.count *= size;
    } else {
      plan.outputs *= size;
      out_stride *= size;
    }
  }
  std::erase_if(dims, [](const Dim& d) { return d.size == 1; });
  std::stable_sort(dims.begin(), dims.end(), [](const Dim& a, const Dim& b) {
    return std::abs(a.in_stride) > std::abs(b.in_stride);
  });
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty()) {
      Dim& outer = merged.back();
      if (outer.reduced == d.reduced && outer.in_stride == d.in_stride * d.size &&
          outer.out_stride == d.out_stride * d.size) {
        outer = {outer.size * d.size, d.in_stride, d.out_stride, d.reduced};
        continue;
      }
    }
    merged.push_back(d);
  }
  // Every reduced dim had size 1: fold over a single element.
  if (std::none_of(merged.begin(), merged.end(), [](const Dim& d) { return d.reduced; })) {
    merged.insert(merged.begin(), Dim{1, 0, 0, true});
  }
  const Dim row = merged.back();
  merged.pop_back();
  plan.inner = row.reduced;
  plan.row_size = row.size;
  plan.row_in_stride = row.in_stride;
  plan.row_out_stride = row.out_stride;
  for (const Dim& d : merged) {
    WalkDims& into = d.reduced ? plan.reduced : plan.kept;
    into.sizes.push_back(d.size);
    into.in_strides.push_back(d.in_stride);
    into.out_strides.push_back(d.out_stride);
  }
  return plan;
}

// Walks the multi-indices of some WalkDims in row-major order, tracking the input and output
// offsets of the current one.
class Odometer {
 public:
  explicit Odometer(const WalkDims& dims) : dims_(dims), index_(dims.sizes.size(), 0) {}

  void seek(int64_t flat) {
    in_ = out_ = 0;
    if (flat == 0) {
      std::fill(index_.begin(), index_.end(), 0);
      return;
    }
    for (int64_t d = int64_t(index_.size()) - 1; d >= 0; --d) {
      index_[d] = flat % dims_.sizes[d];
      flat /= dims_.sizes[d];
      in_ += index_[d] * dims_.in_strides[d];
      out_ += index_[d] * dims_.out_strides[d];
    }
  }
  void next() {
    for (int64_t d = int64_t(index_.size()) - 1; d >= 0; --d) {
      in_ += dims_.in_strides[d];
      out_ += dims_.out_strides[d];
      if (++index_[d] < dims_.sizes[d]) return;
      in_ -= dims_.in_strides[d] * dims_.sizes[d];
      out_ -= dims_.out_strides[d] * dims_.sizes[d];
      index_[d] = 0;
    }
  }
  int64_t in() const { return in_; }
  int64_t out() const { return out_; }

 private:
  const WalkDims& dims_;
  Shape index_;
  int64_t in_ = 0;
  int64_t out_ = 0;
};

// Runs tasks [0, tasks) as one contiguous range per OpenMP thread, or all on the calling
// thread when the work is small. run_range must not throw.
template <class RunRange>
void run_tasks(int64_t tasks, int64_t work, const RunRange& run_range) {
  const int threads = omp_get_max_threads();
  if (work < kParallelGrain || tasks < 2 || threads == 1 || omp_in_parallel()) {
    run_range(int64_t(0), tasks);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = tasks * t / nt, end = tasks * (t + 1) / nt;
    if (end > begin) run_range(begin, end);
  }
}

// Folds a run of n >= 1 elements of T (stride in elements) into acc.
template <class T, class Op>
typename Op::Acc fold_run(const Op& op, const T* p, int64_t stride, int64_t n,
                          typename Op::Value shift, int64_t first_index, typename Op::Acc acc) {
  using V = typename Op::Value;
  if constexpr (std::is_same_v<T, V>) {
    if (stride == 1) return op.combine(acc, op.reduce_row(p, n, shift, first_index));
  }
  std::array<V, kBlock> buffer;
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t m = std::min(kBlock, n - i);
    const V* values = load_values(p + i * stride, stride, m, buffer.data());
    acc = op.combine(acc, op.reduce_row(values, m, shift, first_index + i));
  }
  return acc;
}

// The engine: reduces x as `plan` says, calling op.store once for every output.
template <class T, class Op>
void run_reduction(const Tensor& x, const ReducePlan& plan, const Op& op) {
  using V = typename Op::Value;
  using Acc = typename Op::Acc;
  const int64_t outputs = plan.outputs, count = plan.count;
  if (outputs == 0) return;
  if (count == 0) {
    for (int64_t o = 0; o < outputs; ++o) op.store(o, op.identity());
    return;
  }
  const T* data = static_cast<const T*>(x.data_ptr());
  const int64_t work = outputs * count;
  const int64_t row_size = plan.row_size;
  const bool few_outputs = outputs < kFewOutputs;

  // Pieces per output and elements (inner) or rows (outer) per piece.
  const int64_t per_output = plan.inner ? count : plan.reduced.numel();
  int64_t pieces = 1, piece_length = per_output;
  if (few_outputs) {
    const int64_t length = plan.inner ? kPiece : std::max<int64_t>(1, kPiece / row_size);
    if (per_output > length) {
      piece_length = length;
      pieces = (per_output + length - 1) / length;
    }
  }
  std::vector<Acc> partials(pieces > 1 ? size_t(outputs * pieces) : 0);
  const auto finish = [&](int64_t o, int64_t piece, const Acc& acc) {
    if (pieces == 1) {
      op.store(o, acc);
    } else {
      partials[size_t(o * pieces + piece)] = acc;
    }
  };

  if (plan.inner) {
    // Task t: piece t % pieces of output t / pieces (in the kept dims' walk order).
    const int64_t stride = plan.row_in_stride;
    run_tasks(outputs * pieces, work, [&](int64_t first, int64_t last) {
      Odometer kept(plan.kept), reduced(plan.reduced);
      kept.seek(first / pieces);
      for (int64_t t = first; t < last; ++t) {
        // (Divisions only when there are pieces: they would dominate short rows.)
        const int64_t piece = pieces == 1 ? 0 : t % pieces;
        if (t > first && piece == 0) kept.next();
        const int64_t begin = piece * piece_length, end = std::min(count, begin + piece_length);
        const V shift = op.shift_at(kept.out());
        Acc acc = op.identity();
        reduced.seek(piece == 0 ? 0 : begin / row_size);
        for (int64_t position = begin, i = piece == 0 ? 0 : begin % row_size; position < end;
             i = 0) {
          const int64_t n = std::min(row_size - i, end - position);
          acc = fold_run(op, data + kept.in() + reduced.in() + i * stride, stride, n, shift,
                         position, acc);
          position += n;
          reduced.next();
        }
        finish(kept.out(), piece, acc);
      }
    });
  } else {
    // Task t: piece t % pieces of column block (t / pieces) % blocks of the outputs at
    // kept index t / (pieces * blocks). Blocks are as wide as kMaxColumns allows (whole rows
    // read contiguously), narrower when that leaves threads idle. Their width does not
    // change any output's order of accumulation, so it may depend on the thread count.
    const int64_t kept_count = plan.kept.numel();
    int64_t width = std::min(row_size, kMaxColumns);
    const int64_t threads = omp_get_max_threads();
    if (kept_count * pieces < threads) {
      const int64_t split = (threads + kept_count * pieces - 1) / (kept_count * pieces);
      width = std::min(width, std::max(kMinColumns, (row_size + split - 1) / split));
    }
    const int64_t blocks = (row_size + width - 1) / width;
    const int64_t rows = plan.reduced.numel();
    const int64_t in_stride = plan.row_in_stride, out_stride = plan.row_out_stride;
    run_tasks(kept_count * blocks * pieces, work, [&](int64_t first, int64_t last) {
      Odometer kept(plan.kept), reduced(plan.reduced);
      kept.seek(first / (pieces * blocks));
      std::vector<Acc> acc(static_cast<size_t>(width));
      std::vector<V> shifts(Op::kUsesShift ? static_cast<size_t>(width) : 0);
      std::vector<V> buffer(static_cast<size_t>(width));
      for (int64_t t = first; t < last; ++t) {
        if (t > first && t % (pieces * blocks) == 0) kept.next();
        const int64_t piece = t % pieces;
        const int64_t j0 = (t / pieces) % blocks * width;
        const int64_t n = std::min(width, row_size - j0);
        const int64_t out0 = kept.out() + j0 * out_stride;
        for (int64_t j = 0; j < n; ++j) {
          acc[j] = op.identity();
          if constexpr (Op::kUsesShift) shifts[j] = op.shift_at(out0 + j * out_stride);
        }
        const int64_t row_begin = piece * piece_length;
        const int64_t row_end = std::min(rows, row_begin + piece_length);
        reduced.seek(row_begin);
        for (int64_t r = row_begin; r < row_end; ++r) {
          const T* p = data + kept.in() + reduced.in() + j0 * in_stride;
          op.accumulate_cols(acc.data(), load_values(p, in_stride, n, buffer.data()), n,
                             shifts.data(), r);
          reduced.next();
        }
        for (int64_t j = 0; j < n; ++j) finish(out0 + j * out_stride, piece, acc[j]);
      }
    });
  }

  if (pieces > 1) {
    for (int64_t o = 0; o < outputs; ++o) {
      Acc acc = partials[size_t(o * pieces)];
      for (int64_t piece = 1; piece < pieces; ++piece) {
        acc = op.combine(acc, partials[size_t(o * pieces + piece)]);
      }
      op.store(o, acc);
    }
  }
}

// ---- Checks and shapes --------------------------------------------------------------------

void check_cpu(const Tensor& x, const char* op) {
  HG_CHECK(x.defined(), "{}: expected a defined tensor, got an undefined one", op);
  HG_CHECK(x.is_cpu(), "{}: expected a CPU tensor, got one on {}", op, x.device());
}

// The checks and shapes shared with the CUDA reductions (kernel/checks.h).
using kernel::check_nonempty;
using kernel::check_out_dtype;
using kernel::reduced_dims;
using kernel::reduced_shape;

// Runs a fold over x into a new contiguous tensor of x's value dtype and shape out_shape.
template <class T, class Fold>
Tensor fold_into(const Tensor& x, const ReducePlan& plan, const Shape& out_shape, Fold fold,
                 const value_t<T>* shift = nullptr) {
  using V = value_t<T>;
  Tensor out = empty(out_shape, dtype_of<V>);
  run_reduction<T>(x, plan, FoldOp<V, Fold>{fold, out.data_ptr<V>(), shift, plan.count});
  return out;
}

template <class T>
Tensor reduce_typed(Reduction op, const Tensor& x, const ReducePlan& plan, const Shape& out_shape,
                    double p) {
  using V = value_t<T>;
  switch (op) {
    case Reduction::Sum:
      return fold_into<T>(x, plan, out_shape, SumFold<V>{});
    case Reduction::Prod:
      return fold_into<T>(x, plan, out_shape, ProdFold<V>{});
    case Reduction::Amax:
      return fold_into<T>(x, plan, out_shape, MaxFold<V>{});
    case Reduction::Amin:
      return fold_into<T>(x, plan, out_shape, MinFold<V>{});
    default:
      break;
  }
  if constexpr (std::is_floating_point_v<V>) {  // the callers checked for floating input
    switch (op) {
      case Reduction::Mean:
        return fold_into<T>(x, plan, out_shape, MeanFold<V>{});
      case Reduction::LogSumExp: {
        const Tensor shift = fold_into<T>(x, plan, out_shape, LogSumExpShiftFold<V>{});
        return fold_into<T>(x, plan, out_shape, LogSumExpFold<V>{}, shift.data_ptr<V>());
      }
      case Reduction::Norm:
        if (p == 0.0) return fold_into<T>(x, plan, out_shape, NormZeroFold<V>{});
        if (p == 1.0) return fold_into<T>(x, plan, out_shape, NormOneFold<V>{});
        if (p == 2.0) return fold_into<T>(x, plan, out_shape, NormTwoFold<V>{});
        if (std::isinf(p)) return fold_into<T>(x, plan, out_shape, NormInfFold<V>{});
        return fold_into<T>(x, plan, out_shape, NormPFold<V>{{}, V(p)});
      default:
        break;
    }
  }
  HG_ERROR("{}: not supported for {} input", reduction_name(op), dtype_of<T>);
}

template <bool kMax>
ValuesIndices arg_reduce(const Tensor& x, int64_t dim, bool keepdim, const char* op) {
  check_cpu(x, op);
  const int64_t d = wrap_dim(dim, x.dim(), op);
  const std::vector<bool> reduced = reduced_dims(x, {d}, op);
  check_nonempty(x, reduced, op);
  const ReducePlan plan = make_plan(x, reduced);
  const Shape out_shape = reduced_shape(x, reduced, keepdim);
  Tensor indices = empty(out_shape, kInt64);
  Tensor values = visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using V = value_t<T>;
    Tensor out = empty(out_shape, dtype_of<V>);
    run_reduction<T>(x, plan, ArgOp<V, kMax>{out.data_ptr<V>(), indices.data_ptr<int64_t>()});
    return out;
  });
  return {values.to(x.dtype()), indices};
}

// NOTE [Column sums] The sum over dim 0 of a small contiguous float32 matrix (a linear
// layer's bias gradient) without the plan: for at most kPiece elements the outer walk folds
// each column in one piece, row after row from 0, which is what this loop does, so the bits
// are the same; what it saves is the walk's set-up, several times the work at 16 x 32.
// The sums are held in registers down the rows, 16 columns at a time (and the last columns
// one by one): summed in memory, each row's adds waited for the previous row's stores.
Tensor column_sums(const Tensor& x, bool keepdim) {
  const int64_t rows = x.size(0), cols = x.size(1);
  Tensor out = empty(keepdim ? Shape{1, cols} : Shape{cols}, kFloat32);
  float* __restrict const sums = out.data_ptr<float>();  // a new tensor: no alias of x
  const float* __restrict const data = x.data_ptr<float>();
  if (rows == 0) {
    std::fill(sums, sums + cols, 0.0f);
    return out;
  }
  constexpr int64_t kBlock = 16;
  int64_t j0 = 0;
  for (; j0 + kBlock <= cols; j0 += kBlock) {
    float acc[kBlock];
    for (int64_t j = 0; j < kBlock; ++j) acc[j] = 0.0f + data[j0 + j];  // 0 + row 0
    for (int64_t r = 1; r < rows; ++r) {
      const float* row = data + r * cols + j0;
      for (int64_t j = 0; j < kBlock; ++j) acc[j] += row[j];
    }
    for (int64_t j = 0; j < kBlock; ++j) sums[j0 + j] = acc[j];
  }
  for (int64_t j = j0; j < cols; ++j) {
    float acc = 0.0f + data[j];
    for (int64_t r = 1; r < rows; ++r) acc += data[r * cols + j];
    sums[j] = acc;
  }
  return out;
}

// The sum of every element of a small contiguous float32 tensor (a mean loss over a batch)
// without the plan (sum_floats' order, the walk's); the result is the float accumulator
// converted once to out_dtype.
Tensor full_sum(const Tensor& x, bool keepdim, DType out_dtype) {
  const float sum = sum_floats(x.data_ptr<float>(), x.numel());
  Tensor out = empty(keepdim ? Shape(size_t(x.dim()), 1) : Shape{}, out_dtype);
  visit_floating_dtype("sum", out_dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    *out.data_ptr<T>() = cast_value<T>(sum);
  });
  return out;
}

}  // namespace

// The inner walk's order for one output over a contiguous float run (NOTE [Deterministic
// reductions]): pieces of kPiece elements, each folded by fold_row into the identity, then
// combined in piece order.
float sum_floats(const float* x, int64_t n) {
  const SumFold<float> fold;
  float total = fold.identity();
  for (int64_t begin = 0; begin < n; begin += kPiece) {
    const float piece =
        fold.combine(fold.identity(), fold_row(fold, x + begin, std::min(kPiece, n - begin), 0.0f));
    total = begin == 0 ? piece : fold.combine(total, piece);
  }
  return total;
}

namespace {

Tensor reduce(Reduction op, const Tensor& x, const Shape& dims, bool keepdim, DType out_dtype,
              double p) {
  const char* name = reduction_name(op);
  check_cpu(x, name);
  if (op == Reduction::Sum && x.dtype() == kFloat32 && out_dtype == kFloat32 && x.dim() == 2 &&
      dims.size() == 1 && (dims[0] == 0 || dims[0] == -2) && x.is_contiguous() &&
      x.numel() <= kPiece) {
    return column_sums(x, keepdim);  // (dims {0} of a matrix: nothing to check)
  }
  const std::vector<bool> reduced = kernel::check_reduce(op, x, dims, out_dtype, p);
  if (op == Reduction::Sum && x.dtype() == kFloat32 && is_floating_point(out_dtype) &&
      x.is_contiguous() && x.numel() > 0 && x.numel() <= kPiece &&
      std::find(reduced.begin(), reduced.end(), false) == reduced.end()) {
    return full_sum(x, keepdim, out_dtype);
  }
  const ReducePlan plan = make_plan(x, reduced);
  const Shape out_shape = reduced_shape(x, reduced, keepdim);
  const Tensor out = visit_dtype(x.dtype(), [&](auto tag) {
    return reduce_typed<typename decltype(tag)::type>(op, x, plan, out_shape, p);
  });
  return out.to(out_dtype);
}

ValuesIndices max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce<true>(x, dim, keepdim, "max");
}

ValuesIndices min_dim(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce<false>(x, dim, keepdim, "min");
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (dim) return arg_reduce<true>(x, *dim, keepdim, "argmax").indices;
  check_cpu(x, "argmax");
  HG_CHECK(x.numel() > 0, "argmax: expected a non-empty input, got one of shape {}", x.sizes());
  const Tensor indices = arg_reduce<true>(x.reshape({-1}), 0, false, "argmax").indices;
  return keepdim ? indices.reshape(Shape(size_t(x.dim()), 1)) : indices;
}

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim, DType out_dtype) {
  check_cpu(x, "var");
  const std::vector<bool> reduced = kernel::check_var(x, dims, correction, out_dtype);
  const ReducePlan plan = make_plan(x, reduced);
  const Shape out_shape = reduced_shape(x, reduced, keepdim);
  const Tensor out = visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using V = value_t<T>;
    if constexpr (std::is_floating_point_v<V>) {
      const Tensor mean = fold_into<T>(x, plan, out_shape, MeanFold<V>{});
      return fold_into<T>(x, plan, out_shape, VarFold<V>{correction}, mean.data_ptr<V>());
    } else {
      HG_ERROR("var: not supported for {} input", x.dtype());
      return Tensor();
    }
  });
  return out.to(out_dtype);
}

// The scan of kind K along dim d of x (storage type T) into a new tensor of the accumulator's
// dtype.
template <Scan K, class T>
Tensor scan_rows(const Tensor& x, int64_t d) {
  using V = value_t<T>;
  if constexpr (K == Scan::LogSumExp && std::is_integral_v<V>) {
    HG_ERROR("logcumsumexp: expected a floating tensor, got {}", x.dtype());
  } else {
    Tensor result = empty(x.sizes(), dtype_of<V>);
    if (x.numel() == 0) return result;
    // Walk the lines along dim: for_each_row visits x and result with dim at size 1, and the
    // kernel runs each visited start along dim.
    const int64_t length = x.sizes()[d];
    const int64_t x_step = x.strides()[d], out_step = result.strides()[d];
    Shape lines = x.sizes();
    lines[d] = 1;
    std::array<Shape, 2> byte_strides{result.strides(), x.strides()};
    for (int64_t& s : byte_strides[0]) s *= int64_t(sizeof(V));
    for (int64_t& s : byte_strides[1]) s *= int64_t(sizeof(T));
    const auto line_kernel = [&](std::array<char*, 2> ptrs, std::array<int64_t, 2> steps,
                                 int64_t n) {
      V* out_row = reinterpret_cast<V*>(ptrs[0]);
      const T* x_row = reinterpret_cast<const T*>(ptrs[1]);
      const int64_t out_inner = steps[0] / int64_t(sizeof(V));
      const int64_t x_inner = steps[1] / int64_t(sizeof(T));
      if (n == 1 || std::abs(x_step) <= std::abs(x_inner)) {
        // dim is the faster-moving one: one line at a time.
        for (int64_t i = 0; i < n; ++i) {
          V acc = kernel::scan_identity<K, V>();
          for (int64_t k = 0; k < length; ++k) {
            acc = kernel::scan_combine<K, V>(acc, cast_value<V>(x_row[i * x_inner + k * x_step]));
            out_row[i * out_inner + k * out_step] = acc;
          }
        }
        return;
      }
      // Otherwise: up to kBlock lines side by side, reading x a row at a time.
      std::array<V, kBlock> acc, buffer;
      for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
        const int64_t m = std::min(kBlock, n - j0);
        std::fill_n(acc.begin(), m, kernel::scan_identity<K, V>());
        for (int64_t k = 0; k < length; ++k) {
          const V* values =
              load_values(x_row + j0 * x_inner + k * x_step, x_inner, m, buffer.data());
          V* out_k = out_row + j0 * out_inner + k * out_step;
          for (int64_t j = 0; j < m; ++j) {
            acc[j] = kernel::scan_combine<K, V>(acc[j], values[j]);
            out_k[j * out_inner] = acc[j];
          }
        }
      }
    };
    for_each_row<2>(lines,
                    {static_cast<char*>(result.data_ptr()), static_cast<char*>(x.data_ptr())},
                    byte_strides, line_kernel, x.numel() >= kParallelGrain);
    return result;
  }
}

Tensor scan(Scan kind, const Tensor& x, int64_t dim, DType out_dtype) {
  check_cpu(x, kernel::scan_name(kind));
  const int64_t d = kernel::check_scan(kind, x, dim, out_dtype);
  if (x.dim() == 0) return scan(kind, x.reshape({1}), 0, out_dtype).reshape({});
  const Tensor out = visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    return kernel::with_scan(
        kind, [&](auto scan_kind) { return scan_rows<decltype(scan_kind)::value, T>(x, d); });
  });
  return out.to(out_dtype);
}

Tensor sum_to(const Tensor& x, const Shape& target) {
  check_cpu(x, "sum_to");
  const Shape dims = kernel::sum_to_dims(x, target);
  if (dims.empty()) return x.clone();  // same shape: a new contiguous copy
  return reduce(Reduction::Sum, x, dims, /*keepdim=*/false, x.dtype(), /*p=*/2.0).view(target);
}

}  // namespace

const kernel::ReduceKernels reduce_kernels = HG_REDUCE_KERNELS;

}  // namespace hg::cpu
