// CPU kernels for shape and indexing ops (index.h).
//
// Shapes in comments: along the dim an op works on, a tensor is viewed as [O, S, I]:
//   O  the product of the sizes before dim (outer)
//   S  the size at dim of self / x
//   N  the number of indices (index.numel() for 1-D indices)
//   I  the product of the sizes after dim (inner)
//   M  the number of index tuples of index_put (the broadcast shape of its indices)
//   R  the elements of one indexed row of index_put (the product of self.sizes()[K:])
//
// Pure data movement (cat, stack, gather, index_select, where, index_put without accumulate)
// copies elements as unsigned integers of the element's width: no conversion can happen.
// Accumulating kernels convert through cast.h (NOTE [Accumulation of duplicates] in index.h).
#include "halfgrad/cpu/index.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/strided_loop.h"

namespace hg::cpu {

namespace {

// ---- helpers ------------------------------------------------------------------------------------

template <class T>
T load(const char* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <class T>
void store(char* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

char* bytes(const Tensor& t) { return static_cast<char*>(t.data_ptr()); }

int64_t product(const Shape& sizes, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t d = begin; d < end; ++d) n *= sizes[d];
  return n;
}

// Calls f(TypeTag<U>{}) with U the unsigned integer as wide as one element.
template <class F>
decltype(auto) visit_bits(size_t element_size, F&& f) {
  switch (element_size) {
    case 1:
      return f(TypeTag<uint8_t>{});
    case 2:
      return f(TypeTag<uint16_t>{});
    case 4:
      return f(TypeTag<uint32_t>{});
    default:
      return f(TypeTag<uint64_t>{});
  }
}

// Calls f(TypeTag<I>{}) for an index dtype already checked to be int64 or int32.
template <class F>
decltype(auto) visit_index(DType dtype, F&& f) {
  if (dtype == kInt32) return f(TypeTag<int32_t>{});
  return f(TypeTag<int64_t>{});
}

// a + b in an accumulation type: bool adds as `or`, integers wrap modulo 2^n (as PyTorch's
// do, without C++'s undefined signed overflow).
template <class A>
A add(A a, A b) {
  if constexpr (std::is_same_v<A, bool>) {
    return a || b;
  } else if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return A(U(a) + U(b));
  } else {
    return a + b;
  }
}

// A 0-d tensor as the 1-D tensor of size 1 it stands for in gather, scatter_add, index_select
// and index_add (PyTorch's ensure_nonempty_dim).
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.unsqueeze(0) : t; }

void check_tensor(const Tensor& t, const char* op, const char* what) {
  HG_CHECK(t.defined(), "{}: expected a defined {}, got an undefined tensor", op, what);
  HG_CHECK(t.is_cpu(), "{}: expected {} on cpu, got a tensor on {}", op, what, t.device());
}

void check_same_dtype(const Tensor& t, DType expected, const char* op, const char* what,
                      const char* like) {
  HG_CHECK(t.dtype() == expected,
           "{}: expected {} of dtype {} (that of {}), got {}; the op layer promotes before "
           "calling this kernel",
           op, what, expected, like, t.dtype());
}

void check_index_dtype(const Tensor& index, const char* op, bool int32_allowed) {
  const bool ok = index.dtype() == kInt64 || (int32_allowed && index.dtype() == kInt32);
  HG_CHECK(ok, "{}: expected an index of dtype {}, got {}", op,
           int32_allowed ? "int64 or int32" : "int64", index.dtype());
}

// Throws on the first value of index (in row-major order) outside [0, size), or outside
// [-size, size) when negative values wrap. Runs before any output is written.
void check_index_values(const Tensor& index, int64_t size, int64_t dim, const char* op,
                        bool negative_wraps) {
  const int64_t low = negative_wraps ? -size : 0;
  bool found = false;
  int64_t offending = 0;
  visit_index(index.dtype(), [&](auto tag) {
    using I = typename decltype(tag)::type;
    const auto scan = [&](std::array<char*, 1> ptrs, std::array<int64_t, 1> step, int64_t n) {
      for (int64_t k = 0; k < n && !found; ++k) {
        const int64_t value = load<I>(ptrs[0] + k * step[0]);
        if (value < low || value >= size) {
          found = true;
          offending = value;
        }
      }
    };
    for_each_row<1>(index.sizes(), {bytes(index)}, {byte_strides(index)}, scan,
                    /*parallel=*/false);
  });
  HG_CHECK(!found, "{}: index {} is out of range for dim {} of size {}{}", op, offending, dim, size,
           offending < 0 && !negative_wraps ? " (negative indices are not allowed)" : "");
}

// The broadcast shape of a and b, or an error that names the op and both operands.
Shape broadcast_for(const char* op, const Shape& a, const std::string& a_name, const Shape& b,
                    const std::string& b_name) {
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {  // i counts from the last dim
    const int64_t sa = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t sb = i < b.size() ? b[b.size() - 1 - i] : 1;
    HG_CHECK(sa == sb || sa == 1 || sb == 1,
             "{}: {} of shape {} and {} of shape {} cannot be broadcast together: at dim {} "
             "(counting from the end) sizes {} and {} differ and neither is 1",
             op, a_name, a, b_name, b, -int64_t(i) - 1, sa, sb);
  }
  return broadcast_shapes(a, b);
}

// dst = src elementwise (same dtype and shape, any strides; dst is freshly allocated).
void copy_elements(const Tensor& dst, const Tensor& src) {
  visit_bits(dst.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const auto row = [](std::array<char*, 2> ptrs, std::array<int64_t, 2> step, int64_t n) {
      if (step[0] == int64_t(sizeof(U)) && step[1] == int64_t(sizeof(U))) {
        std::memcpy(ptrs[0], ptrs[1], size_t(n) * sizeof(U));
        return;
      }
      for (int64_t k = 0; k < n; ++k)
        store<U>(ptrs[0] + k * step[0], load<U>(ptrs[1] + k * step[1]));
    };
    for_each_row<2>(dst.sizes(), {bytes(dst), bytes(src)}, {byte_strides(dst), byte_strides(src)},
                    row);
  });
}

// The gather walk, shared by gather and index_select: for every position p of `sizes`,
//   out[p] = x[p with coordinate `dim` replaced by index[p]].
// x_strides are x's byte strides (their entry at dim is replaced by the index's offset), and
// index_strides walk the index over `sizes` (0 where it does not vary).
template <class I>
void gather_walk(const Shape& sizes, const Tensor& out, const Tensor& x, int64_t dim,
                 const char* index, const Shape& index_strides) {
  Shape x_strides = byte_strides(x);
  const int64_t dim_stride = x_strides[dim];
  x_strides[dim] = 0;
  visit_bits(x.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const auto row = [dim_stride](std::array<char*, 3> ptrs, std::array<int64_t, 3> step,
                                  int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        const int64_t j = load<I>(ptrs[2] + k * step[2]);
        store<U>(ptrs[0] + k * step[0], load<U>(ptrs[1] + k * step[1] + j * dim_stride));
      }
    };
    for_each_row<3>(sizes, {bytes(out), bytes(x), const_cast<char*>(index)},
                    {byte_strides(out), x_strides, index_strides}, row);
  });
}

// ---- grouped row accumulation (index_add, index_put) --------------------------------------------

// Contributions grouped by destination row: group g adds (or writes) the source rows
// rows[begin[g]] .. rows[begin[g + 1] - 1], in that order, to the destination row target[g].
struct RowGroups {
  std::vector<int64_t> target;
  std::vector<int64_t> begin{0};
  std::vector<int64_t> rows;
};

// Rows are cut into blocks of this many elements, so that one long row still spreads over
// threads and the accumulator fits on the stack.
constexpr int64_t kRowBlock = 1024;

// out is [O, S, R] contiguous of element type T; for every o the groups apply to out[o]:
// row out[o, target[g]] receives the source rows source_row(o, m) for the m of group g.
// Source elements are source_step bytes apart (0 for a row broadcast from one value). Each
// (o, group, block) task owns its destination elements, so tasks run in parallel and the
// result does not depend on the number of threads.
template <class T, class SourceRow>
void apply_row_groups(const Tensor& out, int64_t O, int64_t S, int64_t R, const RowGroups& groups,
                      const SourceRow& source_row, int64_t source_step, bool accumulate) {
  using Acc = compute_t<T>;
  const int64_t group_count = int64_t(groups.target.size());
  const int64_t blocks = (R + kRowBlock - 1) / kRowBlock;
  const int64_t tasks = O * group_count * blocks;
  const int64_t work = O * (int64_t(groups.rows.size()) + group_count) * R;
  char* const out_data = bytes(out);
  const auto run_task = [&](int64_t task) {
    const int64_t o = task / (group_count * blocks);
    const int64_t g = task / blocks % group_count;
    const int64_t first = (task % blocks) * kRowBlock;
    const int64_t length = std::min(kRowBlock, R - first);
    char* const dst = out_data + ((o * S + groups.target[g]) * R + first) * int64_t(sizeof(T));
    const int64_t begin = groups.begin[g], end = groups.begin[g + 1];
    if (!accumulate) {  // the last write wins
      const char* src = source_row(o, groups.rows[end - 1]) + first * source_step;
      if (source_step == int64_t(sizeof(T))) {
        std::memcpy(dst, src, size_t(length) * sizeof(T));
      } else {
        for (int64_t k = 0; k < length; ++k) store<T>(dst + k * sizeof(T), load<T>(src));
      }
      return;
    }
    std::array<Acc, kRowBlock> sums;
    for (int64_t k = 0; k < length; ++k) {
      sums[k] = cast_value<Acc>(load<T>(dst + k * int64_t(sizeof(T))));
    }
    for (int64_t r = begin; r < end; ++r) {
      const char* src = source_row(o, groups.rows[r]) + first * source_step;
      for (int64_t k = 0; k < length; ++k) {
        sums[k] = add(sums[k], cast_value<Acc>(load<T>(src + k * source_step)));
      }
    }
    for (int64_t k = 0; k < length; ++k) {
      store<T>(dst + k * int64_t(sizeof(T)), cast_value<T>(sums[k]));
    }
  };
  if (work >= kParallelGrain && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(guided)
    for (int64_t task = 0; task < tasks; ++task) run_task(task);
  } else {
    for (int64_t task = 0; task < tasks; ++task) run_task(task);
  }
}

}  // namespace

// ---- cat, stack ---------------------------------------------------------------------------------

Tensor cat(std::span<const Tensor> tensors, int64_t dim) {
  HG_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors, got an empty one");
  for (size_t i = 0; i < tensors.size(); ++i) check_tensor(tensors[i], "cat", "tensor");
  const DType dtype = tensors[0].dtype();
  for (size_t i = 1; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].dtype() == dtype,
             "cat: expected every tensor to have dtype {} (that of tensor 0), got {} for tensor "
             "{}; the op layer promotes before calling this kernel",
             dtype, tensors[i].dtype(), i);
  }
  // PyTorch's legacy rule: 1-D tensors of shape [0] take no part in the shape checks.
  const auto skipped = [](const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; };
  int64_t first = -1;
  for (size_t i = 0; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].dim() > 0,
             "cat: tensor {} is 0-d; expected tensors with at least 1 dim (unsqueeze 0-d tensors "
             "first)",
             i);
    if (first < 0 && !skipped(tensors[i])) first = int64_t(i);
  }
  if (first < 0) return empty({0}, dtype);

  const Shape& ref = tensors[first].sizes();
  const int64_t d = wrap_dim(dim, int64_t(ref.size()), "cat");
  Shape out_sizes = ref;
  out_sizes[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (skipped(t)) continue;
    HG_CHECK(t.dim() == int64_t(ref.size()),
             "cat: expected tensors of {} dims (like tensor {}, shape {}), got {} dims for tensor "
             "{} (shape {})",
             ref.size(), first, ref, t.dim(), i, t.sizes());
    for (int64_t k = 0; k < t.dim(); ++k) {
      HG_CHECK(k == d || t.size(k) == ref[k],
               "cat: expected size {} at dim {} (like tensor {}, shape {}), got size {} for tensor "
               "{} (shape {}); sizes must match except at the cat dim {}",
               ref[k], k, first, ref, t.size(k), i, t.sizes(), d);
    }
    out_sizes[d] += t.size(d);
  }
  Tensor out = empty(out_sizes, dtype);
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (skipped(t)) continue;
    if (t.numel() > 0) copy_elements(out.narrow(d, offset, t.size(d)), t);
    offset += t.size(d);
  }
  return out;
}

Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  HG_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors, got an empty one");
  for (size_t i = 0; i < tensors.size(); ++i) check_tensor(tensors[i], "stack", "tensor");
  const Tensor& ref = tensors[0];
  for (size_t i = 1; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].dtype() == ref.dtype(),
             "stack: expected every tensor to have dtype {} (that of tensor 0), got {} for tensor "
             "{}; the op layer promotes before calling this kernel",
             ref.dtype(), tensors[i].dtype(), i);
    HG_CHECK(tensors[i].sizes() == ref.sizes(),
             "stack: expected every tensor to have shape {} (that of tensor 0), got {} for tensor "
             "{}",
             ref.sizes(), tensors[i].sizes(), i);
  }
  const int64_t d = wrap_dim(dim, ref.dim() + 1, "stack");
  Shape out_sizes = ref.sizes();
  out_sizes.insert(size_t(d), int64_t(tensors.size()));
  Tensor out = empty(out_sizes, ref.dtype());
  if (out.numel() == 0) return out;
  for (size_t i = 0; i < tensors.size(); ++i) copy_elements(out.select(d, int64_t(i)), tensors[i]);
  return out;
}

// ---- gather, scatter_add ------------------------------------------------------------------------

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_tensor(x, "gather", "input");
  check_tensor(index, "gather", "index");
  check_index_dtype(index, "gather", /*int32_allowed=*/false);
  const Tensor x1 = at_least_1d(x), index1 = at_least_1d(index);
  const int64_t d = wrap_dim(dim, x1.dim(), "gather");
  HG_CHECK(index1.dim() == x1.dim(),
           "gather: expected an index with as many dims as the input ({}), got {} (input shape {}, "
           "index shape {})",
           x1.dim(), index1.dim(), x.sizes(), index.sizes());
  for (int64_t k = 0; k < x1.dim(); ++k) {
    HG_CHECK(k == d || index1.size(k) <= x1.size(k),
             "gather: expected index.size({}) <= input.size({}) = {} (every dim but dim {}), got "
             "{} (input shape {}, index shape {})",
             k, k, x1.size(k), d, index1.size(k), x.sizes(), index.sizes());
  }
  check_index_values(index1, x1.size(d), d, "gather", /*negative_wraps=*/false);

  Tensor out = empty(index.sizes(), x.dtype());
  if (out.numel() == 0) return out;
  gather_walk<int64_t>(index1.sizes(), at_least_1d(out), x1, d, bytes(index1),
                       byte_strides(index1));
  return out;
}

namespace {

// Accumulators a thread keeps for 16-bit scatter_add: columns are summed in float32 this many
// elements at a time.
constexpr int64_t kColumnBuffer = 16384;

// For every position p of index with coordinate dim fixed at 0, the column out[p, :] along dim
// receives src[p, k] at index[p, k] for k = 0, 1, ...; within a column the additions run in
// index order. Neighbouring columns are processed together (k outer, p inner) so that reads
// along the innermost dims stay sequential whatever dim is. Runs on the calling thread.
template <class T>
void scatter_add_columns(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  using Acc = compute_t<T>;
  const int64_t S = out.size(dim), K = index.size(dim);
  const int64_t out_step = out.stride(dim) * int64_t(sizeof(T));
  const int64_t index_step = index.stride(dim) * int64_t(sizeof(int64_t));
  const int64_t src_step = src.stride(dim) * int64_t(sizeof(T));
  const auto columns = [=](std::array<char*, 3> ptrs, std::array<int64_t, 3> step, int64_t n) {
    if constexpr (std::is_same_v<T, Acc>) {
      const auto add_one = [&](int64_t p, int64_t k) {
        const int64_t j = load<int64_t>(ptrs[1] + p * step[1] + k * index_step);
        char* const dst = ptrs[0] + p * step[0] + j * out_step;
        store<T>(dst, add(load<T>(dst), load<T>(ptrs[2] + p * step[2] + k * src_step)));
      };
      if (std::abs(index_step) < std::abs(step[1])) {  // dim is the innermost: walk along it
        for (int64_t p = 0; p < n; ++p) {
          for (int64_t k = 0; k < K; ++k) add_one(p, k);
        }
      } else {
        for (int64_t k = 0; k < K; ++k) {
          for (int64_t p = 0; p < n; ++p) add_one(p, k);
        }
      }
    } else {  // sum in Acc, round once (NOTE [Accumulation of duplicates])
      const int64_t block = std::clamp<int64_t>(kColumnBuffer / std::max<int64_t>(S, 1), 1, n);
      thread_local std::vector<Acc> sums;  // [S, block]
      sums.resize(size_t(S * block));
      for (int64_t first = 0; first < n; first += block) {
        const int64_t width = std::min(block, n - first);
        char* const column = ptrs[0] + first * step[0];
        const char* const where = ptrs[1] + first * step[1];
        const char* const values = ptrs[2] + first * step[2];
        for (int64_t j = 0; j < S; ++j) {
          for (int64_t p = 0; p < width; ++p) {
            sums[j * width + p] = cast_value<Acc>(load<T>(column + p * step[0] + j * out_step));
          }
        }
        const auto add_one = [&](int64_t p, int64_t k) {
          const int64_t j = load<int64_t>(where + p * step[1] + k * index_step);
          Acc& sum = sums[j * width + p];
          sum = add(sum, cast_value<Acc>(load<T>(values + p * step[2] + k * src_step)));
        };
        if (std::abs(index_step) < std::abs(step[1])) {
          for (int64_t p = 0; p < width; ++p) {
            for (int64_t k = 0; k < K; ++k) add_one(p, k);
          }
        } else {
          for (int64_t k = 0; k < K; ++k) {
            for (int64_t p = 0; p < width; ++p) add_one(p, k);
          }
        }
        for (int64_t j = 0; j < S; ++j) {
          for (int64_t p = 0; p < width; ++p) {
            store<T>(column + p * step[0] + j * out_step, cast_value<T>(sums[j * width + p]));
          }
        }
      }
    }
  };
  Shape walk = index.sizes();
  walk[dim] = 1;
  for_each_row<3>(walk, {bytes(out), bytes(index), bytes(src)},
                  {byte_strides(out), byte_strides(index), byte_strides(src)}, columns,
                  /*parallel=*/false);
}

// Columns are disjoint, so threads split them: each takes a slab of the longest dim other than
// dim (for_each_row's own split counts columns, not the work in each, so it is not used).
template <class T>
void scatter_add_parallel(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) {
  int64_t split = -1;
  for (int64_t k = 0; k < index.dim(); ++k) {
    if (k != dim && (split < 0 || index.size(k) > index.size(split))) split = k;
  }
  const int64_t work = index.numel() + out.numel();
  if (split < 0 || index.size(split) < 2 || work < kParallelGrain || omp_get_max_threads() == 1 ||
      omp_in_parallel()) {
    scatter_add_columns<T>(out, dim, index, src);
    return;
  }
  const int64_t length = index.size(split);
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = length * t / nt, end = length * (t + 1) / nt;
    if (end > begin) {
      scatter_add_columns<T>(out.narrow(split, begin, end - begin), dim,
                             index.narrow(split, begin, end - begin),
                             src.narrow(split, begin, end - begin));
    }
  }
}

}  // namespace

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  check_tensor(self, "scatter_add", "self");
  check_tensor(index, "scatter_add", "index");
  check_tensor(src, "scatter_add", "src");
  check_index_dtype(index, "scatter_add", /*int32_allowed=*/false);
  check_same_dtype(src, self.dtype(), "scatter_add", "src", "self");
  const Tensor self1 = at_least_1d(self), index1 = at_least_1d(index), src1 = at_least_1d(src);
  const int64_t d = wrap_dim(dim, self1.dim(), "scatter_add");
  HG_CHECK(index1.dim() == self1.dim(),
           "scatter_add: expected an index with as many dims as self ({}), got {} (self shape {}, "
           "index shape {})",
           self1.dim(), index1.dim(), self.sizes(), index.sizes());
  HG_CHECK(src1.dim() == self1.dim(),
           "scatter_add: expected src with as many dims as self ({}), got {} (self shape {}, src "
           "shape {})",
           self1.dim(), src1.dim(), self.sizes(), src.sizes());
  for (int64_t k = 0; k < self1.dim(); ++k) {
    HG_CHECK(index1.size(k) <= src1.size(k),
             "scatter_add: expected index.size({}) <= src.size({}) = {}, got {} (index shape {}, "
             "src shape {})",
             k, k, src1.size(k), index1.size(k), index.sizes(), src.sizes());
    HG_CHECK(k == d || index1.size(k) <= self1.size(k),
             "scatter_add: expected index.size({}) <= self.size({}) = {} (every dim but dim {}), "
             "got {} (self shape {}, index shape {})",
             k, k, self1.size(k), d, index1.size(k), self.sizes(), index.sizes());
  }
  check_index_values(index1, self1.size(d), d, "scatter_add", /*negative_wraps=*/false);

  Tensor out = self.clone();
  if (index.numel() == 0) return out;
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    scatter_add_parallel<T>(at_least_1d(out), d, index1, src1);
  });
  return out;
}

// ---- index_select, index_add --------------------------------------------------------------------

namespace {

// The checks index_select and index_add share: a 1-D or 0-d integer index.
void check_index_vector(const Tensor& index, const char* op) {
  check_tensor(index, op, "index");
  check_index_dtype(index, op, /*int32_allowed=*/true);
  HG_CHECK(index.dim() <= 1, "{}: expected a 1-D or 0-d index, got a {}-D index of shape {}", op,
           index.dim(), index.sizes());
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_tensor(x, "index_select", "input");
  check_index_vector(index, "index_select");
  const Tensor x1 = at_least_1d(x);
  const int64_t d = wrap_dim(dim, x1.dim(), "index_select");
  const int64_t N = index.numel();
  HG_CHECK(x.dim() > 0 || N == 1,
           "index_select: a 0-d input takes exactly one index, got {} (index shape {})", N,
           index.sizes());
  check_index_values(index, x1.size(d), d, "index_select", /*negative_wraps=*/false);

  Shape out_sizes = x.sizes();
  if (x.dim() > 0) out_sizes[d] = N;
  Tensor out = empty(out_sizes, x.dtype());
  if (out.numel() == 0) return out;
  const Tensor out1 = at_least_1d(out);
  const int64_t index_stride =
      index.dim() == 0 ? 0 : index.stride(0) * int64_t(index.element_size());

  visit_index(index.dtype(), [&](auto tag) {
    using I = typename decltype(tag)::type;
    const char* const where = bytes(index);
    if (!x1.is_contiguous()) {  // any strides: the gather walk with a broadcast index
      Shape index_strides(size_t(out1.dim()), 0);
      index_strides[d] = index_stride;
      gather_walk<I>(out1.sizes(), out1, x1, d, where, index_strides);
      return;
    }
    // Contiguous x [O, S, I] -> out [O, N, I]: one memcpy per selected slice.
    const int64_t O = product(x1.sizes(), 0, size_t(d)), S = x1.size(d);
    const int64_t slice_bytes =
        product(x1.sizes(), size_t(d) + 1, x1.sizes().size()) * int64_t(x1.element_size());
    const char* const x_data = bytes(x1);
    char* const out_data = bytes(out1);
    parallel_for(O * N, out.numel(), [&](int64_t row) {
      const int64_t o = row / N, n = row % N;
      const int64_t j = load<I>(where + n * index_stride);
      std::memcpy(out_data + row * slice_bytes, x_data + (o * S + j) * slice_bytes,
                  size_t(slice_bytes));
    });
  });
  return out;
}

Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  check_tensor(self, "index_add", "self");
  check_tensor(source, "index_add", "source");
  check_index_vector(index, "index_add");
  check_same_dtype(source, self.dtype(), "index_add", "source", "self");
  const Tensor self1 = at_least_1d(self), source1 = at_least_1d(source);
  const int64_t d = wrap_dim(dim, self1.dim(), "index_add");
  const int64_t N = index.numel();
  HG_CHECK(source1.dim() == self1.dim(),
           "index_add: expected source with as many dims as self ({}), got {} (self shape {}, "
           "source shape {})",
           self1.dim(), source1.dim(), self.sizes(), source.sizes());
  for (int64_t k = 0; k < self1.dim(); ++k) {
    const int64_t expected = k == d ? N : self1.size(k);
    HG_CHECK(source1.size(k) == expected,
             "index_add: expected source.size({}) == {} ({}), got {} (self shape {}, source shape "
             "{}, {} indices)",
             k, expected, k == d ? "the number of indices" : "self's size there", source1.size(k),
             self.sizes(), source.sizes(), N);
  }
  check_index_values(index, self1.size(d), d, "index_add", /*negative_wraps=*/false);

  Tensor out = self.clone();
  if (source.numel() == 0) return out;
  // out [O, S, I], source [O, N, I]: for every o, row j of out[o] receives the rows n of
  // source[o] with index[n] == j, in increasing n (a stable counting sort by j).
  const int64_t O = product(self1.sizes(), 0, size_t(d)), S = self1.size(d);
  const int64_t I = product(self1.sizes(), size_t(d) + 1, self1.sizes().size());
  const std::vector<int64_t> targets = index.to_vector<int64_t>();
  std::vector<int64_t> count(size_t(S) + 1, 0);
  for (int64_t j : targets) ++count[j + 1];
  for (int64_t j = 0; j < S; ++j) count[j + 1] += count[j];
  RowGroups groups;
  groups.rows.resize(size_t(N));
  {
    std::vector<int64_t> next(count.begin(), count.end() - 1);
    for (int64_t n = 0; n < N; ++n) groups.rows[next[targets[n]]++] = n;
  }
  for (int64_t j = 0; j < S; ++j) {
    if (count[j] == count[j + 1]) continue;
    groups.target.push_back(j);
    groups.begin.push_back(count[j + 1]);
  }
  const Tensor source_rows = source.contiguous();
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const char* const data = bytes(source_rows);
    const int64_t row_bytes = I * int64_t(sizeof(T));
    const auto source_row = [=](int64_t o, int64_t n) { return data + (o * N + n) * row_bytes; };
    apply_row_groups<T>(out, O, S, I, groups, source_row, int64_t(sizeof(T)),
                        /*accumulate=*/true);
  });
  return out;
}

// ---- index_put ----------------------------------------------------------------------------------

Tensor index_put(const Tensor& self, std::span<const Tensor> indices, const Tensor& values,
                 bool accumulate) {
  check_tensor(self, "index_put", "self");
  check_tensor(values, "index_put", "values");
  check_same_dtype(values, self.dtype(), "index_put", "values", "self");
  const int64_t K = int64_t(indices.size());
  HG_CHECK(K >= 1 && K <= self.dim(),
           "index_put: expected between 1 and self.dim() = {} index tensors (self shape {}), got "
           "{}",
           self.dim(), self.sizes(), K);
  Shape B;
  for (int64_t i = 0; i < K; ++i) {
    const Tensor& index = indices[i];
    check_tensor(index, "index_put", "index");
    HG_CHECK(index.dtype() != kBool,
             "index_put: index {} is a bool mask; expected int64 or int32 indices (turn masks "
             "into indices with nonzero first)",
             i);
    check_index_dtype(index, "index_put", /*int32_allowed=*/true);
    B = i == 0 ? index.sizes()
               : broadcast_for("index_put", B, fmt::format("indices 0..{}", i - 1), index.sizes(),
                               fmt::format("index {}", i));
  }
  Shape indexed = B;
  for (int64_t k = K; k < self.dim(); ++k) indexed.push_back(self.size(k));
  HG_CHECK(broadcasts_to(values.sizes(), indexed),
           "index_put: values of shape {} cannot be broadcast to the indexed shape {} (indices of "
           "shape {}, then self's sizes after dim {})",
           values.sizes(), indexed, B, K - 1);
  for (int64_t i = 0; i < K; ++i) {
    check_index_values(indices[i], self.size(i), i, "index_put", /*negative_wraps=*/true);
  }

  Tensor out = self.clone();
  const int64_t M = shape_numel(B), R = product(self.sizes(), size_t(K), self.sizes().size());
  if (M == 0 || R == 0) return out;

  // The destination row of each index tuple: self's leading K dims flattened row-major.
  std::vector<int64_t> target(size_t(M), 0);
  for (int64_t i = 0; i < K; ++i) {
    const int64_t size = self.size(i);
    const std::vector<int64_t> position = indices[i].expand(B).to_vector<int64_t>();
    for (int64_t m = 0; m < M; ++m) {
      target[m] = target[m] * size + (position[m] < 0 ? position[m] + size : position[m]);
    }
  }
  std::vector<int64_t> order(static_cast<size_t>(M));
  for (int64_t m = 0; m < M; ++m) order[m] = m;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return target[a] < target[b]; });
  RowGroups groups;
  groups.rows = std::move(order);
  for (int64_t r = 0; r < M; ++r) {
    if (r + 1 < M && target[groups.rows[r]] == target[groups.rows[r + 1]]) continue;
    groups.target.push_back(target[groups.rows[r]]);
    groups.begin.push_back(r + 1);
  }

  // values over the indexed shape [B..., tail...]: row m starts at the offset of B's m-th
  // position; within a row the elements are contiguous, or all one value (step 0), or else
  // the broadcast values are materialized.
  Tensor spread = values.expand(indexed);
  const Shape tail_sizes(std::span<const int64_t>(indexed).subspan(B.size()));
  Shape tail_strides(std::span<const int64_t>(spread.strides()).subspan(B.size()));
  bool constant_rows = true;
  for (size_t k = 0; k < tail_sizes.size(); ++k) {
    constant_rows = constant_rows && (tail_sizes[k] == 1 || tail_strides[k] == 0);
  }
  int64_t step = 0;
  if (!constant_rows) {
    if (!is_contiguous_layout(tail_sizes, tail_strides)) spread = spread.contiguous();
    step = 1;
  }
  std::vector<int64_t> row_offset(size_t(M), 0);
  for (int64_t m = 0; m < M; ++m) {
    int64_t rest = m;
    for (size_t k = B.size(); k-- > 0;) {
      row_offset[m] += (rest % B[k]) * spread.stride(int64_t(k));
      rest /= B[k];
    }
  }
  visit_dtype(self.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const char* const data = bytes(spread);
    const auto source_row = [&](int64_t, int64_t m) {
      return data + row_offset[m] * int64_t(sizeof(T));
    };
    const int64_t destination_rows = out.numel() / R;
    apply_row_groups<T>(out, 1, destination_rows, R, groups, source_row, step * int64_t(sizeof(T)),
                        accumulate);
  });
  return out;
}

// ---- one_hot ------------------------------------------------------------------------------------

Tensor one_hot(const Tensor& x, int64_t num_classes) {
  check_tensor(x, "one_hot", "input");
  HG_CHECK(x.dtype() == kInt64, "one_hot: expected an int64 tensor of class indices, got {}",
           x.dtype());
  HG_CHECK(num_classes >= -1,
           "one_hot: expected num_classes >= 0, or -1 to infer it, got num_classes = {}",
           num_classes);
  const std::vector<int64_t> classes = x.to_vector<int64_t>();
  if (num_classes == -1) {
    HG_CHECK(!classes.empty(),
             "one_hot: cannot infer num_classes from an empty tensor (shape {}); pass it",
             x.sizes());
    num_classes = *std::max_element(classes.begin(), classes.end()) + 1;
  }
  for (int64_t c : classes) {
    HG_CHECK(c >= 0 && c < num_classes,
             "one_hot: class index {} is out of range for the new last dim {} of size "
             "num_classes = {}",
             c, x.dim(), num_classes);
  }
  Shape out_sizes = x.sizes();
  out_sizes.push_back(num_classes);
  Tensor out = zeros(out_sizes, kInt64);
  int64_t* const data = out.data_ptr<int64_t>();
  const int64_t n = int64_t(classes.size());
  parallel_for(n, n, [&](int64_t m) { data[m * num_classes + classes[m]] = 1; });
  return out;
}

// ---- masked_fill, where -------------------------------------------------------------------------

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  check_tensor(x, "masked_fill", "input");
  check_tensor(mask, "masked_fill", "mask");
  HG_CHECK(mask.dtype() == kBool, "masked_fill: expected a mask of dtype bool, got {}",
           mask.dtype());
  const Shape shape =
      broadcast_for("masked_fill", x.sizes(), "the input", mask.sizes(), "the mask");
  Tensor out = empty(shape, x.dtype());
  if (out.numel() == 0) return out;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    T fill;
    if (value.is_floating()) {
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        HG_CHECK(fits_in_integer<T>(value.to_double()),
                 "masked_fill: value {} cannot be converted to {}", value.to_double(), x.dtype());
      }
      fill = cast_value<T>(value.to_double());
    } else {
      fill = cast_value<T>(value.to_int64());
    }
    const auto row = [fill](std::array<char*, 3> ptrs, std::array<int64_t, 3> step, int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        const bool masked = load<bool>(ptrs[2] + k * step[2]);
        store<T>(ptrs[0] + k * step[0], masked ? fill : load<T>(ptrs[1] + k * step[1]));
      }
    };
    const Tensor x_spread = x.expand(shape), mask_spread = mask.expand(shape);
    for_each_row<3>(shape, {bytes(out), bytes(x_spread), bytes(mask_spread)},
                    {byte_strides(out), byte_strides(x_spread), byte_strides(mask_spread)}, row);
  });
  return out;
}

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  check_tensor(condition, "where", "condition");
  check_tensor(a, "where", "a");
  check_tensor(b, "where", "b");
  HG_CHECK(condition.dtype() == kBool, "where: expected a condition of dtype bool, got {}",
           condition.dtype());
  check_same_dtype(b, a.dtype(), "where", "b", "a");
  const Shape ab = broadcast_for("where", a.sizes(), "a", b.sizes(), "b");
  const Shape shape = broadcast_for("where", condition.sizes(), "the condition", ab, "a and b");
  Tensor out = empty(shape, a.dtype());
  if (out.numel() == 0) return out;
  const Tensor c_spread = condition.expand(shape), a_spread = a.expand(shape),
               b_spread = b.expand(shape);
  visit_bits(a.element_size(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const auto row = [](std::array<char*, 4> ptrs, std::array<int64_t, 4> step, int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        const bool pick_a = load<bool>(ptrs[1] + k * step[1]);
        const char* src = pick_a ? ptrs[2] + k * step[2] : ptrs[3] + k * step[3];
        store<U>(ptrs[0] + k * step[0], load<U>(src));
      }
    };
    for_each_row<4>(
        shape, {bytes(out), bytes(c_spread), bytes(a_spread), bytes(b_spread)},
        {byte_strides(out), byte_strides(c_spread), byte_strides(a_spread), byte_strides(b_spread)},
        row);
  });
  return out;
}

// ---- split, chunk sizes -------------------------------------------------------------------------

std::vector<int64_t> split_sizes(int64_t size, int64_t split_size) {
  HG_CHECK(size >= 0, "split: expected a dim size >= 0, got {}", size);
  HG_CHECK(split_size >= 0, "split: expected split_size >= 0, got {}", split_size);
  if (split_size == 0) {
    HG_CHECK(size == 0, "split: split_size can be 0 only for a dim of size 0, got a dim of size {}",
             size);
    return {0};
  }
  const int64_t pieces = std::max<int64_t>((size + split_size - 1) / split_size, 1);
  std::vector<int64_t> sizes(size_t(pieces), split_size);
  sizes.back() = size - split_size * (pieces - 1);
  return sizes;
}

std::vector<int64_t> chunk_sizes(int64_t size, int64_t chunks) {
  HG_CHECK(size >= 0, "chunk: expected a dim size >= 0, got {}", size);
  HG_CHECK(chunks > 0, "chunk: expected chunks > 0, got {}", chunks);
  if (size == 0) return std::vector<int64_t>(size_t(chunks), 0);
  return split_sizes(size, (size + chunks - 1) / chunks);
}

}  // namespace hg::cpu
