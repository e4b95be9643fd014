// Indexing and shape ops: forward (kernel/index.h and kernel/reduce.h kernels) and backward of
// each, in op_list.def's order, then max / min along a dim (OpId::max / OpId::min, whose
// all-elements forms are in ops/reduce.cpp).
//
// Shapes in comments:
//   K  the number of index tensors given to index_put (they index self's leading K dims)
//   B  the broadcast shape of those index tensors; M = its element count
//   P  the product of self's leading K dims (the positions index_put can address)
//
// NOTE [Adjoint index ops] Every backward here is written with ops of this file, each the
// adjoint of another: gather's gradient is a scatter_add into zeros and scatter_add's
// gradient for src is a gather; index_select's is an index_add into zeros and index_add's
// for source is an index_select; cat and stack hand back slices and selects of the gradient.
// So the gradient of a gradient (create_graph) runs through recorded ops as well.
//
// NOTE [Index ops do not promote their operands] As in PyTorch, scatter_add, index_add and
// index_put need src / source / values of self's dtype (an error otherwise, naming both).
// Under CUDA autocast scatter_add and index_put promote (their policy in op_list.def), which
// makes mixed float16 / float32 operands agree. cat, stack and where promote always, as
// PyTorch's do.
#include <algorithm>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/view.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/kernel_lookup.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/type_promotion.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::dispatch_list;
using ops::OpContext;
using Grads = autograd::GradList;

// The gradient for an input of shape `sizes` and dtype `dtype` from a gradient of the result
// (summed over broadcast dims, converted back to the input's dtype).
Tensor grad_for(const Tensor& grad, const Shape& sizes, DType dtype) {
  const Tensor reduced = grad.sizes() == sizes ? grad : sum_to_size(grad, sizes);
  return reduced.dtype() == dtype ? reduced : reduced.to(dtype);
}

void check_defined(const Tensor& t, const char* op, const char* what) {
  HG_CHECK(t.defined(), "{}: expected a defined {}, got an undefined tensor", op, what);
}

void check_same_dtype(const Tensor& operand, const Tensor& self, const char* op, const char* what) {
  HG_CHECK(operand.dtype() == self.dtype(),
           "{}: expected {} of dtype {} (self's dtype), got {}; convert it with .to({}) first", op,
           what, self.dtype(), operand.dtype(), self.dtype());
}

// ---- where --------------------------------------------------------------------------------------

struct Where {
  static constexpr OpId id = OpId::where;
  Shape input_sizes{}, other_sizes{};
  DType input_dtype = kFloat32, other_dtype = kFloat32;

  Tensor forward(OpContext& ctx, const Tensor& condition, const Tensor& input,
                 const Tensor& other) {
    check_defined(condition, "where", "condition");
    check_defined(input, "where", "input");
    check_defined(other, "where", "other");
    HG_CHECK(condition.dtype() == kBool, "where: expected a condition of dtype bool, got {}",
             condition.dtype());
    const DType dtype = result_type({input, other});
    Tensor out = kernel_for::elementwise(input).where(condition, core::to_dtype(input, dtype),
                                                      core::to_dtype(other, dtype));
    input_sizes = input.sizes();
    other_sizes = other.sizes();
    input_dtype = input.dtype();
    other_dtype = other.dtype();
    ctx.save({condition});
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor condition = ctx.saved(0);
    const Tensor& g = grads[0];
    const Tensor zero = full({}, 0, g.options());
    Grads out(3);
    if (ctx.needs_input_grad(1)) {
      out[1] = grad_for(where(condition, g, zero), input_sizes, input_dtype);
    }
    if (ctx.needs_input_grad(2)) {
      out[2] = grad_for(where(condition, zero, g), other_sizes, other_dtype);
    }
    return out;
  }
};

// ---- masked_fill --------------------------------------------------------------------------------

struct MaskedFill {
  static constexpr OpId id = OpId::masked_fill;
  Scalar value{};
  Shape input_sizes{};

  Tensor forward(OpContext& ctx, const Tensor& input, const Tensor& mask) {
    Tensor out = kernel_for::elementwise(input).masked_fill(input, mask, value);
    input_sizes = input.sizes();
    ctx.save({mask});
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor mask = ctx.saved(0);
    const Tensor& g = grads[0];
    return {grad_for(masked_fill(g, mask, 0), input_sizes, g.dtype()), Tensor()};
  }
};

// The 0-d tensor form: where(mask, value, input) with value in input's dtype, recorded as the
// ops it calls (value's gradient is the sum of the gradient over the masked positions).
struct MaskedFillTensor {
  static constexpr OpId id = OpId::masked_fill;
  static constexpr bool kComposite = true;

  Tensor forward(OpContext&, const Tensor& input, const Tensor& mask, const Tensor& value) {
    check_defined(input, "masked_fill", "input");
    check_defined(mask, "masked_fill", "mask");
    check_defined(value, "masked_fill", "value");
    HG_CHECK(value.dim() == 0,
             "masked_fill: expected a 0-d value tensor, got a {}-D tensor of shape {} (use where "
             "for a value per element)",
             value.dim(), value.sizes());
    HG_CHECK(mask.dtype() == kBool, "masked_fill: expected a mask of dtype bool, got {}",
             mask.dtype());
    return where(mask, value.to(input.dtype()), input);
  }
};

// ---- cat / stack --------------------------------------------------------------------------------

// The inputs of cat or stack converted to their common dtype (result_type), as PyTorch does.
std::vector<Tensor> promoted(std::span<const Tensor> tensors, const char* op) {
  HG_CHECK(!tensors.empty(), "{}: expected a non-empty list of tensors, got an empty one", op);
  for (size_t i = 0; i < tensors.size(); ++i) {
    HG_CHECK(tensors[i].defined(), "{}: expected defined tensors, got an undefined tensor {}", op,
             i);
  }
  const DType dtype = result_type(tensors);
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors) out.push_back(core::to_dtype(t, dtype));
  return out;
}

struct Cat {
  static constexpr OpId id = OpId::cat;
  int64_t dim = 0;
  std::vector<Shape> input_sizes{};
  std::vector<DType> input_dtypes{};

  Tensor forward(OpContext&, std::span<const Tensor> tensors) {
    const std::vector<Tensor> inputs = promoted(tensors, "cat");
    Tensor out = kernel_for::index(inputs).cat(inputs, dim);
    dim = wrap_dim(dim, out.dim(), "cat");  // resolved for backward
    for (const Tensor& t : tensors) {
      input_sizes.push_back(t.sizes());
      input_dtypes.push_back(t.dtype());
    }
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor& g = grads[0];
    Grads out(input_sizes.size());
    int64_t offset = 0;
    for (size_t i = 0; i < input_sizes.size(); ++i) {
      const Shape& sizes = input_sizes[i];
      // A skipped 1-D tensor of shape [0] (IndexKernels::cat) has nothing of the result.
      if (sizes.size() == 1 && sizes[0] == 0) {
        if (ctx.needs_input_grad(i)) {
          out[i] = zeros(sizes, {.dtype = input_dtypes[i], .device = g.device()});
        }
        continue;
      }
      if (ctx.needs_input_grad(i)) {
        out[i] = g.narrow(dim, offset, sizes[dim]).to(input_dtypes[i]);
      }
      offset += sizes[dim];
    }
    return out;
  }
};

struct Stack {
  static constexpr OpId id = OpId::stack;
  int64_t dim = 0;
  std::vector<DType> input_dtypes{};

  Tensor forward(OpContext&, std::span<const Tensor> tensors) {
    const std::vector<Tensor> inputs = promoted(tensors, "stack");
    Tensor out = kernel_for::index(inputs).stack(inputs, dim);
    dim = wrap_dim(dim, out.dim(), "stack");
    for (const Tensor& t : tensors) input_dtypes.push_back(t.dtype());
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    Grads out(input_dtypes.size());
    for (size_t i = 0; i < input_dtypes.size(); ++i) {
      if (ctx.needs_input_grad(i)) out[i] = grads[0].select(dim, int64_t(i)).to(input_dtypes[i]);
    }
    return out;
  }
};

// ---- split / chunk ------------------------------------------------------------------------------

// Views of x along dim, one per size.
std::vector<Tensor> narrow_pieces(const Tensor& x, int64_t dim, const std::vector<int64_t>& sizes) {
  std::vector<Tensor> pieces;
  pieces.reserve(sizes.size());
  int64_t offset = 0;
  for (int64_t size : sizes) {
    pieces.push_back(x.narrow(dim, offset, size));
    offset += size;
  }
  return pieces;
}

int64_t split_dim(const Tensor& x, int64_t dim, const char* op) {
  check_defined(x, op, "input");
  HG_CHECK(x.dim() > 0, "{}: expected a tensor with at least 1 dim, got a 0-d tensor", op);
  return wrap_dim(dim, x.dim(), op);
}

// NOTE [Split is one node] split and chunk record one node for all their pieces, as torch's
// SplitBackward0 does: its backward joins the pieces' gradients with one cat (a piece whose
// gradient never arrives gives zeros, from the engine). Recorded as slices, each piece's
// gradient would be a zero tensor of the whole input with the piece copied in, and the pieces'
// gradients would then be added: for a [B, T, 3C] projection cut into q, k and v
// (nn::MultiheadAttention), three zero-filled [B, T, 3C] tensors and two sums of them where
// one [B, T, 3C] write does. The pieces are views of x (in-place ops on views are refused
// under autograd, ops/inplace.cpp, so no piece is written through).
struct Split {
  static constexpr OpId id = OpId::split;
  int64_t split_size = 0;
  std::vector<int64_t> split_sizes{};  // when given, used instead of split_size
  bool with_sizes = false;
  int64_t dim = 0;

  std::vector<Tensor> forward(OpContext&, const Tensor& x) {
    dim = split_dim(x, dim, "split");
    const int64_t size = x.size(dim);
    if (!with_sizes) return narrow_pieces(x, dim, hg::split_sizes(size, split_size));
    int64_t total = 0;
    for (int64_t s : split_sizes) {
      HG_CHECK(s >= 0, "split: expected split sizes >= 0, got {} in {}", s,
               fmt::join(split_sizes, ", "));
      total += s;
    }
    HG_CHECK(total == size,
             "split: expected split sizes that sum to {} (the size of dim {}, input shape {}), got "
             "[{}] (sum {})",
             size, dim, x.sizes(), fmt::join(split_sizes, ", "), total);
    return narrow_pieces(x, dim, split_sizes);
  }
  Grads backward(OpContext&, const Grads& grads) { return {cat(grads, dim)}; }
};

struct Chunk {
  static constexpr OpId id = OpId::chunk;
  int64_t chunks = 1;
  int64_t dim = 0;

  std::vector<Tensor> forward(OpContext&, const Tensor& x) {
    dim = split_dim(x, dim, "chunk");
    return narrow_pieces(x, dim, hg::chunk_sizes(x.size(dim), chunks));
  }
  Grads backward(OpContext&, const Grads& grads) { return {cat(grads, dim)}; }
};

// ---- gather / scatter_add -----------------------------------------------------------------------

struct Gather {
  static constexpr OpId id = OpId::gather;
  int64_t dim = 0;
  Shape input_sizes{};

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& index) {
    Tensor out = kernel_for::index(x).gather(x, dim, index);
    dim = wrap_dim(dim, x.dim(), "gather");
    input_sizes = x.sizes();
    ctx.save({index});
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor index = ctx.saved(0);
    const Tensor& g = grads[0];
    return {scatter_add(zeros(input_sizes, g.options()), dim, index, g), Tensor()};
  }
};

// g padded with zeros at the end of each dim up to `sizes` (g's sizes are <= sizes; a 0-d
// tensor counts as 1-D of size 1), through recorded cats.
Tensor pad_to(const Tensor& g, const Shape& sizes) {
  const Shape target = sizes.empty() ? Shape{1} : sizes;
  Tensor padded = g.dim() == 0 ? g.reshape({1}) : g;
  for (int64_t k = 0; k < padded.dim(); ++k) {
    if (padded.size(k) == target[k]) continue;
    Shape rest = padded.sizes();
    rest[k] = target[k] - padded.size(k);
    padded = cat({padded, zeros(rest, padded.options())}, k);
  }
  return padded.reshape(sizes);
}

struct ScatterAdd {
  static constexpr OpId id = OpId::scatter_add;
  int64_t dim = 0;
  Shape src_sizes{};

  Tensor forward(OpContext& ctx, const Tensor& self, const Tensor& index, const Tensor& src) {
    check_defined(self, "scatter_add", "self");
    check_defined(src, "scatter_add", "src");
    check_same_dtype(src, self, "scatter_add", "src");
    Tensor out = kernel_for::index(self).scatter_add(self, dim, index, src);
    dim = wrap_dim(dim, self.dim(), "scatter_add");
    src_sizes = src.sizes();
    ctx.save({index});
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor& g = grads[0];
    Grads out(3);
    if (ctx.needs_input_grad(0)) out[0] = g;
    if (ctx.needs_input_grad(2)) {
      // src elements beyond index's extent were not added anywhere: zero gradient there.
      const Tensor picked = gather(g, dim, ctx.saved(0));
      out[2] = picked.sizes() == src_sizes ? picked : pad_to(picked, src_sizes);
    }
    return out;
  }
};

// ---- index_select / index_add -------------------------------------------------------------------

struct IndexSelect {
  static constexpr OpId id = OpId::index_select;
  int64_t dim = 0;
  Shape input_sizes{};

  Tensor forward(OpContext& ctx, const Tensor& x, const Tensor& index) {
    Tensor out = kernel_for::index(x).index_select(x, dim, index);
    dim = wrap_dim(dim, x.dim(), "index_select");
    input_sizes = x.sizes();
    ctx.save({index});
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor& g = grads[0];
    return {index_add(zeros(input_sizes, g.options()), dim, ctx.saved(0), g), Tensor()};
  }
};

struct IndexAdd {
  static constexpr OpId id = OpId::index_add;
  int64_t dim = 0;
  Scalar alpha = 1;

  Tensor forward(OpContext& ctx, const Tensor& self, const Tensor& index, const Tensor& source) {
    check_defined(self, "index_add", "self");
    check_defined(source, "index_add", "source");
    check_same_dtype(source, self, "index_add", "source");
    Tensor scaled = source;
    if (alpha.to_double() != 1.0) {
      HG_CHECK(self.is_floating_point() || !alpha.is_floating(),
               "index_add: expected an integral alpha for a {} tensor, got alpha = {}",
               self.dtype(), alpha.to_double());
      scaled = core::to_dtype(mul(source, alpha), self.dtype());
    }
    Tensor out = kernel_for::index(self).index_add(self, dim, index, scaled);
    dim = wrap_dim(dim, self.dim(), "index_add");
    ctx.save({index});
    return out;
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor& g = grads[0];
    Grads out(3);
    if (ctx.needs_input_grad(0)) out[0] = g;
    if (ctx.needs_input_grad(2)) {
      const Tensor picked = index_select(g, dim, ctx.saved(0));
      out[2] = alpha.to_double() == 1.0 ? picked : mul(picked, alpha);
    }
    return out;
  }
};

// ---- index_put ----------------------------------------------------------------------------------

// Inputs: self, values, then the K index tensors.
// A copy of input with the slices along dim at the positions in index replaced by source's:
// index_put on input with dim moved to the front, so a position given twice keeps the last
// write, as index_put's, and autograd runs through index_put.
struct IndexCopy {
  static constexpr OpId id = OpId::index_copy;
  static constexpr bool kComposite = true;
  int64_t dim = 0;
  Tensor forward(OpContext&, const Tensor& input, const Tensor& index, const Tensor& source) {
    check_defined(input, "index_copy", "input");
    check_defined(source, "index_copy", "source");
    HG_CHECK(index.defined() && index.dtype() == kInt64 && index.dim() <= 1,
             "index_copy: expected a 1-D or 0-d int64 index, got {} of shape {}",
             index.defined() ? index.dtype() : kInt64, index.defined() ? index.sizes() : Shape{});
    HG_CHECK(source.dtype() == input.dtype(),
             "index_copy: expected source of input's dtype {}, got {}", input.dtype(),
             source.dtype());
    const int64_t rank = std::max<int64_t>(input.dim(), 1);
    const int64_t d = wrap_dim(dim, rank, "index_copy");
    const Tensor self = input.dim() == 0 ? input.reshape({1}) : input;
    const Tensor src = source.dim() == 0 ? source.reshape({1}) : source;
    Shape expected = self.sizes();
    expected[size_t(d)] = index.numel();
    HG_CHECK(src.sizes() == expected,
             "index_copy: expected source of shape {} (input's {} with {} index positions at dim "
             "{}), got {}",
             expected, input.sizes(), index.numel(), d, source.sizes());
    const Tensor flat_index = index.reshape({index.numel()});
    const Tensor out = index_put(self.transpose(0, d), {flat_index}, src.transpose(0, d));
    const Tensor moved = out.transpose(0, d);
    return input.dim() == 0 ? moved.reshape({}) : moved;
  }
};

struct IndexPut {
  static constexpr OpId id = OpId::index_put;
  bool accumulate = false;
  int64_t index_count = 0;  // K
  Shape values_sizes{};
  DType values_dtype = kFloat32;

  Tensor forward(OpContext& ctx, std::span<const Tensor> inputs) {
    const Tensor &self = inputs[0], &values = inputs[1];
    const std::span<const Tensor> indices = inputs.subspan(2);
    check_defined(self, "index_put", "self");
    check_defined(values, "index_put", "values");
    check_same_dtype(values, self, "index_put", "values");
    Tensor out = kernel_for::index(self).index_put(self, indices, values, accumulate);
    index_count = int64_t(indices.size());
    values_sizes = values.sizes();
    values_dtype = values.dtype();
    for (const Tensor& index : indices) ctx.save({index});
    if (ctx.needs_input_grad(1)) {
      const auto [positions, winners] = flat_positions(self, indices);
      ctx.save({positions, winners});
    }
    return out;
  }

  // The position in self's leading K dims (flattened row-major) that each index tuple writes,
  // an int64 tensor of shape B; and, when accumulate is off and a position is written more
  // than once, a bool tensor of shape B marking the tuples whose write survives (the last,
  // IndexKernels::index_put), else undefined.
  std::pair<Tensor, Tensor> flat_positions(const Tensor& self,
                                           std::span<const Tensor> indices) const {
    Shape B = indices[0].sizes();
    for (const Tensor& index : indices.subspan(1)) B = broadcast_shapes(B, index.sizes());
    const int64_t M = shape_numel(B);
    std::vector<int64_t> target(size_t(M), 0);
    for (size_t k = 0; k < indices.size(); ++k) {
      const int64_t size = self.size(int64_t(k));
      const std::vector<int64_t> position = core::expand(indices[k], B).to_vector<int64_t>();
      for (int64_t m = 0; m < M; ++m) {
        target[m] = target[m] * size + (position[m] < 0 ? position[m] + size : position[m]);
      }
    }
    Tensor winners;
    if (!accumulate) {
      std::vector<int64_t> sorted = target;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
        std::vector<double> survives(size_t(M), 0.0);
        std::vector<int64_t> seen;  // targets already written by a later tuple
        for (int64_t m = M - 1; m >= 0; --m) {
          const auto at = std::lower_bound(seen.begin(), seen.end(), target[m]);
          if (at != seen.end() && *at == target[m]) continue;
          seen.insert(at, target[m]);
          survives[m] = 1.0;
        }
        winners = tensor(survives, B, kBool).to(self.device());
      }
    }
    // (Computed on the host: a CUDA self waits here, only when values needs a gradient.)
    return {tensor(target, B, kInt64).to(self.device()), winners};
  }

  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor& g = grads[0];
    const int64_t K = index_count;
    std::vector<Tensor> indices;
    for (int64_t k = 0; k < K; ++k) indices.push_back(ctx.saved(size_t(k)));
    Grads out(size_t(2 + K));
    if (ctx.needs_input_grad(0)) {
      // Overwritten positions took nothing from self.
      out[0] = accumulate ? g : index_put(g, indices, full({}, 0, g.options()));
    }
    if (ctx.needs_input_grad(1)) {
      const Tensor positions = ctx.saved(size_t(K)), winners = ctx.saved(size_t(K) + 1);
      // g [P, tail...] -> the rows the tuples wrote [M, tail...] -> [B..., tail...].
      Shape rows{1}, indexed = positions.sizes(), survivors = positions.sizes();
      for (int64_t d = 0; d < K; ++d) rows[0] *= g.size(d);
      for (int64_t d = K; d < g.dim(); ++d) {
        rows.push_back(g.size(d));
        indexed.push_back(g.size(d));
        survivors.push_back(1);
      }
      Tensor picked = index_select(g.reshape(rows), 0, positions.reshape({-1})).reshape(indexed);
      if (winners.defined()) picked = mul(picked, winners.to(g.dtype()).reshape(survivors));
      out[1] = grad_for(picked, values_sizes, values_dtype);
    }
    return out;
  }
};

// ---- one_hot ------------------------------------------------------------------------------------

struct OneHot {
  static constexpr OpId id = OpId::one_hot;
  int64_t num_classes = -1;
  Tensor forward(OpContext&, const Tensor& x) {
    return kernel_for::index(x).one_hot(x, num_classes);
  }
  Grads backward(OpContext&, const Grads&) { return Grads(1); }
};

// ---- max / min along a dim ----------------------------------------------------------------------

template <OpId Id>
struct ExtremeDim {
  static constexpr OpId id = Id;
  int64_t dim = 0;
  bool keepdim = false;
  Shape input_sizes{};

  std::tuple<Tensor, Tensor> forward(OpContext& ctx, const Tensor& x) {
    const char* name = Id == OpId::max ? "max" : "min";
    check_defined(x, name, "input");
    auto [values, indices] = Id == OpId::max ? kernel_for::reduce(x).max_dim(x, dim, keepdim)
                                             : kernel_for::reduce(x).min_dim(x, dim, keepdim);
    dim = wrap_dim(dim, x.dim(), name);
    input_sizes = x.sizes();
    ctx.save_output(indices);
    return {values, indices};
  }
  Grads backward(OpContext& ctx, const Grads& grads) {
    const Tensor indices = ctx.saved(0);
    const Tensor& g = grads[0];
    if (input_sizes.empty()) return {g};  // a 0-d input is its own extreme
    // Only the element at the returned index gets the gradient (ties: the first), as torch.
    const Tensor g_kept = keepdim ? g : g.unsqueeze(dim);
    const Tensor indices_kept = keepdim ? indices : indices.unsqueeze(dim);
    return {scatter_add(zeros(input_sizes, g.options()), dim, indices_kept, g_kept)};
  }
};

}  // namespace

Tensor where(const Tensor& condition, const Tensor& input, const Tensor& other) {
  return dispatch(Where{}, condition, input, other);
}
Tensor where(const Tensor& condition, const Tensor& input, Scalar other) {
  check_defined(input, "where", "input");
  return where(condition, input,
               full({}, other, {.dtype = result_type({input}, {other}), .device = input.device()}));
}
Tensor where(const Tensor& condition, Scalar input, const Tensor& other) {
  check_defined(other, "where", "other");
  return where(condition,
               full({}, input, {.dtype = result_type({other}, {input}), .device = other.device()}),
               other);
}

Tensor masked_fill(const Tensor& input, const Tensor& mask, Scalar value) {
  return dispatch(MaskedFill{.value = value}, input, mask);
}
Tensor masked_fill(const Tensor& input, const Tensor& mask, const Tensor& value) {
  return dispatch(MaskedFillTensor{}, input, mask, value);
}

Tensor cat(std::span<const Tensor> tensors, int64_t dim) {
  return dispatch_list(Cat{.dim = dim}, tensors);
}
Tensor cat(std::initializer_list<Tensor> tensors, int64_t dim) {
  return cat(std::span<const Tensor>(tensors.begin(), tensors.size()), dim);
}
Tensor stack(std::span<const Tensor> tensors, int64_t dim) {
  return dispatch_list(Stack{.dim = dim}, tensors);
}
Tensor stack(std::initializer_list<Tensor> tensors, int64_t dim) {
  return stack(std::span<const Tensor>(tensors.begin(), tensors.size()), dim);
}

std::vector<Tensor> split(const Tensor& input, int64_t split_size, int64_t dim) {
  return dispatch(Split{.split_size = split_size, .dim = dim}, input);
}
std::vector<Tensor> split(const Tensor& input, const std::vector<int64_t>& split_sizes,
                          int64_t dim) {
  return dispatch(Split{.split_sizes = split_sizes, .with_sizes = true, .dim = dim}, input);
}
std::vector<Tensor> chunk(const Tensor& input, int64_t chunks, int64_t dim) {
  return dispatch(Chunk{.chunks = chunks, .dim = dim}, input);
}

Tensor gather(const Tensor& input, int64_t dim, const Tensor& index) {
  return dispatch(Gather{.dim = dim}, input, index);
}
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src) {
  return dispatch(ScatterAdd{.dim = dim}, self, index, src);
}
Tensor index_select(const Tensor& input, int64_t dim, const Tensor& index) {
  return dispatch(IndexSelect{.dim = dim}, input, index);
}
Tensor index_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& source,
                 Scalar alpha) {
  return dispatch(IndexAdd{.dim = dim, .alpha = alpha}, self, index, source);
}
Tensor index_put(const Tensor& self, std::span<const Tensor> indices, const Tensor& values,
                 bool accumulate) {
  std::vector<Tensor> inputs{self, values};
  inputs.insert(inputs.end(), indices.begin(), indices.end());
  return dispatch_list(IndexPut{.accumulate = accumulate}, inputs);
}
Tensor index_put(const Tensor& self, std::initializer_list<Tensor> indices, const Tensor& values,
                 bool accumulate) {
  return index_put(self, std::span<const Tensor>(indices.begin(), indices.size()), values,
                   accumulate);
}

Tensor index_copy(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& source) {
  return dispatch(IndexCopy{.dim = dim}, input, index, source);
}

Tensor one_hot(const Tensor& input, int64_t num_classes) {
  return dispatch(OneHot{.num_classes = num_classes}, input);
}

std::tuple<Tensor, Tensor> max(const Tensor& input, int64_t dim, bool keepdim) {
  return dispatch(ExtremeDim<OpId::max>{.dim = dim, .keepdim = keepdim}, input);
}
std::tuple<Tensor, Tensor> min(const Tensor& input, int64_t dim, bool keepdim) {
  return dispatch(ExtremeDim<OpId::min>{.dim = dim, .keepdim = keepdim}, input);
}

}  // namespace hg
