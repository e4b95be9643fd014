// CUDA reductions, host side: the checks and shapes of cpu/reduce.cpp (same errors), the [O, N]
// layout of NOTE [CUDA reduction layout] (reduce_launch.h), and the launches of reduce.cu.
// Multi-pass reductions (logsumexp, var) run their passes on the stream one after the other;
// nothing here waits for the GPU.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/cuda/host.h"
#include "halfgrad/cuda/kernel_tables.h"
#include "halfgrad/cuda/reduce_launch.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/kernel/checks.h"
#include "halfgrad/kernel/formulas.h"

namespace hg::cuda {

namespace {

using detail::ReduceKind;
using kernel::Reduction;
using kernel::Scan;

// ---- checks and shapes (the CPU kernels') -----------------------------------------------------

void check_input(const Tensor& x, const char* op) { detail::check_cuda_tensor(x, op, "the input"); }

// The checks and shapes shared with the CPU reductions (kernel/checks.h).
using kernel::check_nonempty;
using kernel::check_out_dtype;
using kernel::reduced_dims;
using kernel::reduced_shape;

// The accumulator's dtype for input of `dtype` (NOTE [Reduction accumulators] in cpu/reduce.cpp).
DType value_dtype(DType dtype) {
  if (dtype == kFloat64) return kFloat64;
  return is_floating_point(dtype) ? kFloat32 : kInt64;
}

// ---- layout ---------------------------------------------------------------------------------

struct Dim {
  int64_t size;
  int64_t stride;
};

// Merges neighbours (outer first) that are back to back in memory.
std::vector<Dim> merge_dims(const std::vector<Dim>& dims) {
  std::vector<Dim> merged;
  for (const Dim& d : dims) {
    if (!merged.empty() && merged.back().stride == d.stride * d.size) {
      merged.back() = {merged.back().size * d.size, d.stride};
    } else {
      merged.push_back(d);
    }
  }
  return merged;
}

bool fill_dim_list(detail::DimList& list, const std::vector<Dim>& dims) {
  if (dims.size() > size_t(detail::kMaxDims)) return false;
  list.dim = int32_t(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    list.sizes[d] = dims[d].size;
    list.strides[d] = dims[d].stride;
  }
  return true;
}

// The geometry of NOTE [CUDA reduction layout], or false when the kept or reduced dims do not
// fit in kMaxDims. sort_reduced: walk the reduced dims by stride (any order is fine for a
// fold); arg reductions keep the row-major order, their index counts in it.
bool try_geometry(const Tensor& x, const std::vector<bool>& reduced, bool sort_reduced,
                  detail::ReduceGeometry& g) {
  std::vector<Dim> kept, folded;
  g.outputs = 1;
  g.count = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t size = x.sizes()[d];
    if (reduced[d]) {
      g.count *= size;
    } else {
      g.outputs *= size;
    }
    if (size == 1) continue;  // never moves the offset
    (reduced[d] ? folded : kept).push_back({size, x.strides()[d]});
  }
  if (sort_reduced) {
    std::stable_sort(folded.begin(), folded.end(), [](const Dim& a, const Dim& b) {
      return std::abs(a.stride) > std::abs(b.stride);
    });
  }
  kept = merge_dims(kept);
  folded = merge_dims(folded);
  g.data = x.data_ptr();
  g.dtype = x.dtype();
  g.column = g.count > 0 && !kept.empty() && kept.back().stride == 1;
  g.columns = 1;
  if (g.column) {
    g.columns = kept.back().size;
    kept.pop_back();
  }
  return fill_dim_list(g.kept, kept) && fill_dim_list(g.reduced, folded);
}

// A reduction's input and geometry; the input is a contiguous copy of x when x's own strides
// need more than kMaxDims dims.
struct Layout {
  Tensor input;
  detail::ReduceGeometry geometry;
};

Layout make_layout(const Tensor& x, const std::vector<bool>& reduced, bool sort_reduced,
                   const char* op) {
  Layout layout{x, {}};
  if (try_geometry(x, reduced, sort_reduced, layout.geometry)) return layout;
  layout.input = x.contiguous();
  HG_CHECK(try_geometry(layout.input, reduced, sort_reduced, layout.geometry),
           "{}: expected at most {} kept and {} reduced dims (after merging neighbours) on CUDA, "
           "got an input of shape {}",
           op, detail::kMaxDims, detail::kMaxDims, x.sizes());
  return layout;
}

// ---- passes ---------------------------------------------------------------------------------

// Launches one pass of `kind` over the layout into `target`, with the scratch memory the
// geometry needs.
void launch_pass(ReduceKind kind, const Layout& layout, detail::ReduceOutput target,
                 const char* op) {
  Tensor workspace;
  const int64_t bytes = detail::reduce_workspace_bytes(layout.geometry);
  if (bytes > 0) {
    workspace = empty({(bytes + 7) / 8}, {.dtype = kInt64, .device = layout.input.device()});
    target.workspace = workspace.data_ptr();
  }
  HG_CUDA_CHECK(detail::launch_reduce(kind, layout.geometry, target, current_stream()), op);
}

// One pass over the layout into a new tensor of out_shape. out_dtype is the accumulator's
// dtype or the input's (then rounded once from the accumulator). shift: per output, in the
// accumulator's dtype.
Tensor run_pass(ReduceKind kind, const Layout& layout, const Shape& out_shape, DType out_dtype,
                const char* op, const Tensor& shift = Tensor(), int64_t correction = 0,
                double p = 2.0) {
  const Tensor& x = layout.input;
  Tensor out = empty(out_shape, {.dtype = out_dtype, .device = x.device()});
  detail::ReduceOutput target;
  target.out = out.data_ptr();
  target.out_as_input = out_dtype == x.dtype();
  target.shift = shift.defined() ? shift.data_ptr() : nullptr;
  target.correction = correction;
  target.p = p;
  launch_pass(kind, layout, target, op);
  return out;
}

// The pass of a one-pass reduction (all but logsumexp, whose two passes reduce() runs).
ReduceKind pass_kind(Reduction op, double p) {
  switch (op) {
    case Reduction::Sum:
    case Reduction::LogSumExp:
      break;
    case Reduction::Prod:
      return ReduceKind::Prod;
    case Reduction::Mean:
      return ReduceKind::Mean;
    case Reduction::Amax:
      return ReduceKind::Amax;
    case Reduction::Amin:
      return ReduceKind::Amin;
    case Reduction::Norm:
      if (p == 0.0) return ReduceKind::NormZero;
      if (p == 1.0) return ReduceKind::NormOne;
      if (p == 2.0) return ReduceKind::NormTwo;
      if (std::isinf(p)) return ReduceKind::NormInf;
      return ReduceKind::NormP;
  }
  return ReduceKind::Sum;
}

template <bool kMax>
kernel::ValuesIndices arg_reduce(const Tensor& x, const std::vector<bool>& reduced, bool keepdim,
                                 const char* op) {
  check_nonempty(x, reduced, op);
  DeviceGuard guard(x.device().index);
  const Layout layout = make_layout(x, reduced, /*sort_reduced=*/false, op);
  const Shape out_shape = reduced_shape(x, reduced, keepdim);
  Tensor values = empty(out_shape, {.dtype = x.dtype(), .device = x.device()});
  Tensor indices = empty(out_shape, {.dtype = kInt64, .device = x.device()});
  detail::ReduceOutput target;
  target.out = values.data_ptr();
  target.out_as_input = true;
  target.indices = indices.data_ptr<int64_t>();
  launch_pass(kMax ? ReduceKind::ArgMax : ReduceKind::ArgMin, layout, target, op);
  return {values, indices};
}

template <bool kMax>
kernel::ValuesIndices arg_reduce_dim(const Tensor& x, int64_t dim, bool keepdim, const char* op) {
  check_input(x, op);
  const int64_t d = wrap_dim(dim, x.dim(), op);
  return arg_reduce<kMax>(x, reduced_dims(x, {d}, op), keepdim, op);
}

Tensor reduce(Reduction op, const Tensor& x, const Shape& dims, bool keepdim, DType out_dtype,
              double p) {
  const char* name = kernel::reduction_name(op);
  check_input(x, name);
  const std::vector<bool> reduced = kernel::check_reduce(op, x, dims, out_dtype, p);
  DeviceGuard guard(x.device().index);
  const Layout layout = make_layout(x, reduced, /*sort_reduced=*/true, name);
  const Shape out_shape = reduced_shape(x, reduced, keepdim);
  const DType value = value_dtype(x.dtype());
  // Written straight in out_dtype when that is the input's or the accumulator's dtype;
  // otherwise in the accumulator's, then converted (one rounding either way).
  const DType written = out_dtype == x.dtype() ? out_dtype : value;
  Tensor out;
  if (op == Reduction::LogSumExp) {
    const Tensor shift = run_pass(ReduceKind::LogSumExpShift, layout, out_shape, value, name);
    out = run_pass(ReduceKind::LogSumExp, layout, out_shape, written, name, shift);
  } else {
    out = run_pass(pass_kind(op, p), layout, out_shape, written, name, Tensor(), 0, p);
  }
  return out.to(out_dtype);
}

kernel::ValuesIndices max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce_dim<true>(x, dim, keepdim, "max");
}

kernel::ValuesIndices min_dim(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_reduce_dim<false>(x, dim, keepdim, "min");
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (dim) return arg_reduce_dim<true>(x, *dim, keepdim, "argmax").indices;
  check_input(x, "argmax");
  HG_CHECK(x.numel() > 0, "argmax: expected a non-empty input, got one of shape {}", x.sizes());
  // Every dim reduced in row-major order: the index into x flattened, with no copy of x.
  const std::vector<bool> all(size_t(x.dim()), true);
  return arg_reduce<true>(x, all, keepdim, "argmax").indices;
}

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim, DType out_dtype) {
  check_input(x, "var");
  const std::vector<bool> reduced = kernel::check_var(x, dims, correction, out_dtype);
  DeviceGuard guard(x.device().index);
  const Layout layout = make_layout(x, reduced, /*sort_reduced=*/true, "var");
  const Shape out_shape = reduced_shape(x, reduced, keepdim);
  const DType value = value_dtype(x.dtype());
  const DType written = out_dtype == x.dtype() ? out_dtype : value;
  // Two passes, as on the CPU: the mean, then the squared deviations from it.
  const Tensor mean = run_pass(ReduceKind::Mean, layout, out_shape, value, "var");
  const Tensor out = run_pass(ReduceKind::Var, layout, out_shape, written, "var", mean, correction);
  return out.to(out_dtype);
}

Tensor scan(Scan kind, const Tensor& x, int64_t dim, DType out_dtype) {
  const char* name = kernel::scan_name(kind);
  check_input(x, name);
  const int64_t d = kernel::check_scan(kind, x, dim, out_dtype);
  if (x.dim() == 0) return scan(kind, x.reshape({1}), 0, out_dtype).reshape({});
  // The lines along d: the other dims, walked with x's strides and the output's (contiguous)
  // ones; neighbours merge when they are back to back in both.
  struct Line {
    int64_t size, x_stride, out_stride;
  };
  const Shape out_strides = contiguous_strides(x.sizes());
  std::vector<Line> lines;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i == d || x.sizes()[i] == 1) continue;
    const Line line{x.sizes()[i], x.strides()[i], out_strides[i]};
    if (!lines.empty() && lines.back().x_stride == line.x_stride * line.size &&
        lines.back().out_stride == line.out_stride * line.size) {
      lines.back() = {lines.back().size * line.size, line.x_stride, line.out_stride};
    } else {
      lines.push_back(line);
    }
  }
  // A contiguous copy merges them into at most two (before and after d).
  if (lines.size() > size_t(detail::kMaxDims)) return scan(kind, x.contiguous(), d, out_dtype);
  DeviceGuard guard(x.device().index);
  const DType written = out_dtype == x.dtype() ? out_dtype : value_dtype(x.dtype());
  Tensor out = empty(x.sizes(), {.dtype = written, .device = x.device()});
  if (x.numel() > 0) {
    detail::ScanGeometry g;
    g.x = x.data_ptr();
    g.dtype = x.dtype();
    g.out = out.data_ptr();
    g.out_as_input = written == x.dtype();
    g.rows = x.numel() / x.sizes()[d];
    g.length = x.sizes()[d];
    g.x_step = x.strides()[d];
    g.out_step = out_strides[d];
    g.x_rows.dim = g.out_rows.dim = int32_t(lines.size());
    for (size_t i = 0; i < lines.size(); ++i) {
      g.x_rows.sizes[i] = g.out_rows.sizes[i] = lines[i].size;
      g.x_rows.strides[i] = lines[i].x_stride;
      g.out_rows.strides[i] = lines[i].out_stride;
    }
    HG_CUDA_CHECK(detail::launch_scan(kind, g, current_stream()), name);
  }
  return out.to(out_dtype);
}

Tensor sum_to(const Tensor& x, const Shape& target) {
  check_input(x, "sum_to");
  const Shape dims = kernel::sum_to_dims(x, target);
  if (dims.empty()) return x.clone();  // same shape: a new contiguous copy
  return reduce(Reduction::Sum, x, dims, /*keepdim=*/false, x.dtype(), /*p=*/2.0).view(target);
}

}  // namespace

const kernel::ReduceKernels reduce_kernels = HG_REDUCE_KERNELS;

}  // namespace hg::cuda
