// CPU kernels for shape and indexing ops: the table cpu::index_kernels (kernel/index.h).
//
// Shapes in comments: along the dim an op works on, a tensor is viewed as [O, S, I]:
//   O  the product of the sizes before dim (outer)
//   S  the size at dim of self / x
//   N  the number of indices (index.numel() for 1-D indices)
//   I  the product of the sizes after dim (inner)
//   M  the number of index tuples of index_put (the broadcast shape of its indices)
//   R  the elements of one indexed row of index_put (the product of self.sizes()[K:])
//
// Pure data movement (cat, stack, gather, index_select, index_put without accumulate)
// copies elements as unsigned integers of the element's width: no conversion can happen.
// Accumulating kernels convert through cast.h (NOTE [Accumulation of duplicates] in
// kernel/index.h).
#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <span>
#include <type_traits>
#include <vector>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/strided_loop.h"
#include "halfgrad/cpu/kernel_tables.h"
#include "halfgrad/kernel/formulas.h"
#include "halfgrad/kernel/index.h"
#include "halfgrad/kernel/index_checks.h"

namespace hg::cpu {

namespace {

using kernel::visit_bits;
using kernel::index_checks::at_least_1d;
using kernel::index_checks::product;

// ---- helpers ------------------------------------------------------------------------------------

// Calls f(TypeTag<I>{}) for an index dtype already checked to be int64 or int32.
template <class F>
decltype(auto) visit_index(DType dtype, F&& f) {
  if (dtype == kInt32) return f(TypeTag<int32_t>{});
  return f(TypeTag<int64_t>{});
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
        const int64_t value = load_bytes<I>(ptrs[0] + k * step[0]);
        if (value < low || value >= size) {
          found = true;
          offending = value;
        }
      }
    };
    for_each_row<1>(index.sizes(), {byte_data(index)}, {byte_strides(index)}, scan,
                    /*parallel=*/false);
  });
  HG_CHECK(!found, "{}: index {} is out of range for dim {} of size {}{}", op, offending, dim, size,
           offending < 0 && !negative_wraps ? " (negative indices are not allowed)" : "");
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
        store_bytes<U>(ptrs[0] + k * step[0], load_bytes<U>(ptrs[1] + k * step[1]));
    };
    for_each_row<2>(dst.sizes(), {byte_data(dst), byte_data(src)},
                    {byte_strides(dst), byte_strides(src)}, row);
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
        const int64_t j = load_bytes<I>(ptrs[2] + k * step[2]);
        store_bytes<U>(ptrs[0] + k * step[0],
                       load_bytes<U>(ptrs[1] + k * step[1] + j * dim_stride));
      }
    };
    for_each_row<3>(sizes, {byte_data(out), byte_data(x), const_cast<char*>(index)},
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
  char* const out_data = byte_data(out);
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
        for (int64_t k = 0; k < length; ++k)
          store_bytes<T>(dst + k * sizeof(T), load_bytes<T>(src));
      }
      return;
    }
    std::array<Acc, kRowBlock> sums;
    for (int64_t k = 0; k < length; ++k) {
      sums[k] = cast_value<Acc>(load_bytes<T>(dst + k * int64_t(sizeof(T))));
    }
    for (int64_t r = begin; r < end; ++r) {
      const char* src = source_row(o, groups.rows[r]) + first * source_step;
      for (int64_t k = 0; k < length; ++k) {
        sums[k] =
            kernel::add_wrapping(sums[k], cast_value<Acc>(load_bytes<T>(src + k * source_step)));
      }
    }
    for (int64_t k = 0; k < length; ++k) {
      store_bytes<T>(dst + k * int64_t(sizeof(T)), cast_value<T>(sums[k]));
    }
  };
  if (work >= kParallelGrain && omp_get_max_threads() > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(guided)
    for (int64_t task = 0; task < tasks; ++task) run_task(task);
  } else {
    for (int64_t task = 0; task < tasks; ++task) run_task(task);
  }
}

// ---- cat, stack ---------------------------------------------------------------------------------

Tensor cat(std::span<const Tensor> tensors, int64_t dim) {
  const kernel::index_checks::CatShape shape = kernel::index_checks::check_cat(tensors, dim, kCPU);
  Tensor out = empty(shape.sizes, shape.dtype);
  const int64_t d = shape.dim;
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (kernel::index_checks::cat_skips(t)) continue;
    if (t.numel() > 0) copy_elements(out.narrow(d, offset, t.size(d)), t);
    offset += t.size(d);
  }
  return out;
}

Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  // (Named fields, not a structured binding: clang 14 cannot capture those in lambdas.)
  const kernel::index_checks::DimShape checked =
      kernel::index_checks::check_stack(tensors, dim, kCPU);
  const int64_t d = checked.dim;
  const Shape& out_sizes = checked.sizes;
  Tensor out = empty(out_sizes, tensors[0].dtype());
  if (out.numel() == 0) return out;
  for (size_t i = 0; i < tensors.size(); ++i) copy_elements(out.select(d, int64_t(i)), tensors[i]);
  return out;
}

// ---- gather, scatter_add ------------------------------------------------------------------------

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  const int64_t d = kernel::index_checks::check_gather(x, dim, index, kCPU);
  const Tensor x1 = at_least_1d(x), index1 = at_least_1d(index);
  check_index_values(index1, x1.size(d), d, "gather", /*negative_wraps=*/false);

  Tensor out = empty(index.sizes(), x.dtype());
  if (out.numel() == 0) return out;
  gather_walk<int64_t>(index1.sizes(), at_least_1d(out), x1, d, byte_data(index1),
                       byte_strides(index1));
  return out;
}

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
        const int64_t j = load_bytes<int64_t>(ptrs[1] + p * step[1] + k * index_step);
        char* const dst = ptrs[0] + p * step[0] + j * out_step;
        store_bytes<T>(dst,
                       kernel::add_wrapping(load_bytes<T>(dst),
                                            load_bytes<T>(ptrs[2] + p * step[2] + k * src_step)));
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
            sums[j * width + p] =
                cast_value<Acc>(load_bytes<T>(column + p * step[0] + j * out_step));
          }
        }
        const auto add_one = [&](int64_t p, int64_t k) {
          const int64_t j = load_bytes<int64_t>(where + p * step[1] + k * index_step);
          Acc& sum = sums[j * width + p];
          sum = kernel::add_wrapping(
              sum, cast_value<Acc>(load_bytes<T>(values + p * step[2] + k * src_step)));
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
            store_bytes<T>(column + p * step[0] + j * out_step, cast_value<T>(sums[j * width + p]));
          }
        }
      }
    }
  };
  Shape walk = index.sizes();
  walk[dim] = 1;
  for_each_row<3>(walk, {byte_data(out), byte_data(index), byte_data(src)},
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

Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  const int64_t d = kernel::index_checks::check_scatter_add(self, dim, index, src, kCPU);
  const Tensor self1 = at_least_1d(self), index1 = at_least_1d(index), src1 = at_least_1d(src);
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

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  const kernel::index_checks::DimShape checked =
      kernel::index_checks::check_index_select(x, dim, index, kCPU);
  const int64_t d = checked.dim;
  const Shape& out_sizes = checked.sizes;
  const Tensor x1 = at_least_1d(x);
  const int64_t N = index.numel();
  check_index_values(index, x1.size(d), d, "index_select", /*negative_wraps=*/false);

  Tensor out = empty(out_sizes, x.dtype());
  if (out.numel() == 0) return out;
  const Tensor out1 = at_least_1d(out);
  const int64_t index_stride =
      index.dim() == 0 ? 0 : index.stride(0) * int64_t(index.element_size());

  visit_index(index.dtype(), [&](auto tag) {
    using I = typename decltype(tag)::type;
    const char* const where = byte_data(index);
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
    const char* const x_data = byte_data(x1);
    char* const out_data = byte_data(out1);
    parallel_for(O * N, out.numel(), [&](int64_t row) {
      const int64_t o = row / N, n = row % N;
      const int64_t j = load_bytes<I>(where + n * index_stride);
      std::memcpy(out_data + row * slice_bytes, x_data + (o * S + j) * slice_bytes,
                  size_t(slice_bytes));
    });
  });
  return out;
}

Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source) {
  const int64_t d = kernel::index_checks::check_index_add(self, dim, index, source, kCPU);
  const Tensor self1 = at_least_1d(self);
  const int64_t N = index.numel();
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
    const char* const data = byte_data(source_rows);
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
  const kernel::index_checks::IndexPutShape checked =
      kernel::index_checks::check_index_put(self, indices, values, kCPU);
  const Shape& B = checked.indices;
  const Shape& indexed = checked.indexed;
  const int64_t K = int64_t(indices.size());
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
    const char* const data = byte_data(spread);
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
  kernel::index_checks::check_one_hot(x, num_classes, kCPU);
  const std::vector<int64_t> classes = x.to_vector<int64_t>();
  if (num_classes == -1) num_classes = *std::max_element(classes.begin(), classes.end()) + 1;
  for (int64_t c : classes) {
    if (c < 0 || c >= num_classes) [[unlikely]] {
      kernel::index_checks::one_hot_class_error(c, x.dim(), num_classes);
    }
  }
  Shape out_sizes = x.sizes();
  out_sizes.push_back(num_classes);
  Tensor out = zeros(out_sizes, kInt64);
  int64_t* const data = out.data_ptr<int64_t>();
  const int64_t n = int64_t(classes.size());
  parallel_for(n, n, [&](int64_t m) { data[m * num_classes + classes[m]] = 1; });
  return out;
}

// ---- argsort ------------------------------------------------------------------------------
//
// Each row along dim: its keys (NOTE [Sort keys] in kernel/formulas.h, the order CUDA sorts by
// too), then a stable sort of its positions by key. Rows in parallel.

Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  kernel::index_checks::check_argsort(x, dim);
  if (x.dim() == 0) return zeros({}, kInt64);
  const int64_t d = wrap_dim(dim, x.dim(), "argsort");
  const Tensor rows = x.transpose(d, -1).contiguous();
  const int64_t length = x.size(d), count = rows.numel();
  Tensor out = empty(rows.sizes(), kInt64);
  if (count == 0) return out.transpose(d, -1).contiguous();
  int64_t* const positions = out.data_ptr<int64_t>();
  const DType dtype = x.dtype();
  visit_bits(element_size(dtype), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* const bits = static_cast<const U*>(rows.data_ptr());
    parallel_for(count / length, count * 8, [&](int64_t row) {
      thread_local std::vector<uint64_t> keys;  // one buffer per thread, not per row
      keys.resize(static_cast<size_t>(length));
      const U* const in = bits + row * length;
      for (int64_t j = 0; j < length; ++j) {
        keys[size_t(j)] = kernel::sort_key(uint64_t(in[j]), dtype, descending);
      }
      int64_t* const order = positions + row * length;
      for (int64_t j = 0; j < length; ++j) order[j] = j;
      std::stable_sort(order, order + length,
                       [&](int64_t a, int64_t b) { return keys[size_t(a)] < keys[size_t(b)]; });
    });
  });
  return out.transpose(d, -1).contiguous();
}

}  // namespace

const kernel::IndexKernels index_kernels = HG_INDEX_KERNELS;

}  // namespace hg::cpu
