// Ops that rearrange elements (ops/rearrange.h): composites of where, index_select, cat and
// the views, so each runs on either device and its gradient is that of the ops it calls.
//
// The index tensors they select with are made on the host and copied to the input's device:
// a few int64 per output slice along one dim, not per element.
#include <algorithm>
#include <numeric>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/nn_helpers.h"
#include "halfgrad/ops/ops.h"
#include "halfgrad/ops/rearrange.h"

namespace hg {

namespace ops {
Tensor positions_on(const std::vector<int64_t>& positions, Device device) {
  const Tensor index = tensor(positions, kInt64);
  return device.is_cpu() ? index : index.to(device);
}
}  // namespace ops

namespace {

using ops::dispatch;
using ops::OpContext;

void check_defined(const Tensor& x, OpId id) {
  HG_CHECK(x.defined(), "{}: expected a defined tensor, got an undefined one", op_name(id));
}

// x's slices along dim at `positions`.
Tensor select_along(const Tensor& x, int64_t dim, const std::vector<int64_t>& positions) {
  return index_select(x, dim, ops::positions_on(positions, x.device()));
}

// The dims of a call, wrapped, each at most once.
Shape wrap_dims(const Shape& dims, int64_t ndim, OpId id) {
  Shape out{};
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, ndim, op_name(id).data());
    HG_CHECK(std::find(out.begin(), out.end(), w) == out.end(),
             "{}: expected each dim at most once, got dim {} twice in {}", op_name(id), w, dims);
    out.push_back(w);
  }
  return out;
}

// ---- triu / tril -----------------------------------------------------------------------------

template <OpId Id>
struct Triangle {
  static constexpr OpId id = Id;
  static constexpr bool kComposite = true;
  int64_t diagonal = 0;
  Tensor forward(OpContext&, const Tensor& x) {
    check_defined(x, Id);
    HG_CHECK(x.dim() >= 2, "{}: expected a tensor of at least 2 dims ([*, H, W]), got {}",
             op_name(Id), x.sizes());
    const int64_t rows = x.size(-2), cols = x.size(-1);
    // column - row, compared with diagonal: kept at >= (triu) or <= (tril).
    const Tensor offset =
        sub(arange(cols, kInt64).view({1, cols}), arange(rows, kInt64).view({rows, 1}));
    const Tensor keep = Id == OpId::triu ? ge(offset, diagonal) : le(offset, diagonal);
    return where(x.is_cpu() ? keep : keep.to(x.device()), x, Scalar(0));
  }
};

// ---- diag ------------------------------------------------------------------------------------

struct Diag {
  static constexpr OpId id = OpId::diag;
  static constexpr bool kComposite = true;
  int64_t diagonal = 0;
  Tensor forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    HG_CHECK(x.dim() == 1 || x.dim() == 2, "diag: expected a 1-d or 2-d tensor, got {}", x.sizes());
    const int64_t k = diagonal;
    const int64_t row_shift = k < 0 ? -k : 0, col_shift = k > 0 ? k : 0;
    if (x.dim() == 1) {
      // The flat matrix picks from [x..., 0]: x[i] at (i + row_shift, i + col_shift).
      const int64_t n = x.size(0), side = n + (k < 0 ? -k : k);
      const int64_t zero = n;
      std::vector<int64_t> positions(size_t(side * side), zero);
      for (int64_t i = 0; i < n; ++i) positions[(i + row_shift) * side + i + col_shift] = i;
      const Tensor source = cat({x, zeros({1}, x.options())});
      return select_along(source, 0, positions).view({side, side});
    }
    const int64_t rows = x.size(0), cols = x.size(1);
    const int64_t length = std::max<int64_t>(0, std::min(rows - row_shift, cols - col_shift));
    std::vector<int64_t> positions(static_cast<size_t>(length));
    for (int64_t i = 0; i < length; ++i) positions[i] = (i + row_shift) * cols + i + col_shift;
    return select_along(x.reshape({-1}), 0, positions);
  }
};

// ---- repeat, tile, repeat_interleave --------------------------------------------------------

Tensor repeat_impl(const Tensor& x, const Shape& repeats) {
  HG_CHECK(int64_t(repeats.size()) >= x.dim(),
           "repeat: expected at least as many repeats as the tensor has dims ({}), got {}", x.dim(),
           repeats.size());
  for (int64_t r : repeats) {
    HG_CHECK(r >= 0, "repeat: expected repeats >= 0, got {}", repeats);
  }
  // x as [1.., sizes], then [r0, s0, r1, s1, ...] by unsqueeze and expand, merged pairwise.
  const size_t n = repeats.size();
  Shape padded(n - size_t(x.dim()), 1);
  for (int64_t s : x.sizes()) padded.push_back(s);
  Shape interleaved{}, expanded{}, result{};
  for (size_t d = 0; d < n; ++d) {
    interleaved.push_back(1);
    interleaved.push_back(padded[d]);
    expanded.push_back(repeats[d]);
    expanded.push_back(padded[d]);
    result.push_back(repeats[d] * padded[d]);
  }
  return x.reshape(interleaved).expand(expanded).reshape(result);
}

struct Repeat {
  static constexpr OpId id = OpId::repeat;
  static constexpr bool kComposite = true;
  Shape repeats{};
  Tensor forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    return repeat_impl(x, repeats);
  }
};

struct Tile {
  static constexpr OpId id = OpId::tile;
  static constexpr bool kComposite = true;
  Shape reps{};
  Tensor forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    Shape full_reps(size_t(std::max<int64_t>(0, x.dim() - int64_t(reps.size()))), 1);
    for (int64_t r : reps) full_reps.push_back(r);
    return repeat_impl(x, full_reps);
  }
};

struct RepeatInterleave {
  static constexpr OpId id = OpId::repeat_interleave;
  static constexpr bool kComposite = true;
  std::vector<int64_t> counts{};  // one per slice, or one for all
  std::optional<int64_t> dim{};
  Tensor forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    const Tensor source = dim ? x : x.reshape({-1});
    const int64_t d = dim ? wrap_dim(*dim, x.dim(), "repeat_interleave") : 0;
    const int64_t slices = source.dim() == 0 ? 1 : source.size(d);
    HG_CHECK(counts.size() == 1 || int64_t(counts.size()) == slices,
             "repeat_interleave: expected one repeat count or one per slice ({}), got {}", slices,
             counts.size());
    std::vector<int64_t> positions;
    for (int64_t i = 0; i < slices; ++i) {
      const int64_t count = counts.size() == 1 ? counts[0] : counts[size_t(i)];
      HG_CHECK(count >= 0, "repeat_interleave: expected repeat counts >= 0, got {}", count);
      positions.insert(positions.end(), size_t(count), i);
    }
    return select_along(source.dim() == 0 ? source.reshape({1}) : source, d, positions);
  }
};

// ---- flip, roll ------------------------------------------------------------------------------

struct Flip {
  static constexpr OpId id = OpId::flip;
  static constexpr bool kComposite = true;
  Shape dims{};
  Tensor forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    const Shape wrapped = wrap_dims(dims, std::max<int64_t>(x.dim(), 1), id);
    if (wrapped.empty() || x.dim() == 0) return x.clone();  // nothing (or a scalar) reversed
    Tensor out = x;
    for (int64_t d : wrapped) {
      std::vector<int64_t> positions(size_t(x.size(d)));
      std::iota(positions.rbegin(), positions.rend(), int64_t(0));
      out = select_along(out, d, positions);
    }
    return out;
  }
};

struct Roll {
  static constexpr OpId id = OpId::roll;
  static constexpr bool kComposite = true;
  Shape shifts{}, dims{};
  Tensor forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    if (dims.empty()) {
      HG_CHECK(shifts.size() == 1,
               "roll: expected one shift when no dims are given (x flattened), got {}", shifts);
      const Tensor flat = x.reshape({-1});
      return roll_along(flat, shifts[0], 0).reshape(x.sizes());
    }
    HG_CHECK(shifts.size() == dims.size(), "roll: expected one shift per dim, got {} and {}",
             shifts, dims);
    Tensor out = x;
    const Shape wrapped = wrap_dims(dims, std::max<int64_t>(x.dim(), 1), id);
    for (size_t i = 0; i < wrapped.size(); ++i) out = roll_along(out, shifts[i], wrapped[i]);
    return out;
  }
  // out[j] = x[(j - shift) mod n] along dim.
  static Tensor roll_along(const Tensor& x, int64_t shift, int64_t dim) {
    const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
    if (n == 0 || x.dim() == 0) return x.clone();
    std::vector<int64_t> positions(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) positions[j] = (((j - shift) % n) + n) % n;
    return select_along(x, dim, positions);
  }
};

// ---- pad -------------------------------------------------------------------------------------

enum class PadMode { Constant, Reflect, Replicate, Circular };

PadMode pad_mode(std::string_view mode) {
  if (mode == "constant") return PadMode::Constant;
  if (mode == "reflect") return PadMode::Reflect;
  if (mode == "replicate") return PadMode::Replicate;
  if (mode == "circular") return PadMode::Circular;
  HG_ERROR(
      "pad: expected mode \"constant\", \"reflect\", \"replicate\" or \"circular\", got \"{}\"",
      mode);
}

struct Pad {
  static constexpr OpId id = OpId::pad;
  static constexpr bool kComposite = true;
  std::vector<int64_t> widths{};
  PadMode mode = PadMode::Constant;
  double value = 0.0;

  Tensor forward(OpContext&, const Tensor& x) {
    check_defined(x, id);
    HG_CHECK(widths.size() % 2 == 0 && int64_t(widths.size()) <= 2 * x.dim(),
             "pad: expected an even number of pads, at most 2 per dim ({} dims), got {}", x.dim(),
             widths.size());
    Tensor out = x;
    for (size_t pair = 0; pair < widths.size() / 2; ++pair) {
      const int64_t d = x.dim() - 1 - int64_t(pair);
      out = pad_dim(out, d, widths[2 * pair], widths[2 * pair + 1]);
    }
    return out;
  }

  Tensor pad_dim(const Tensor& x, int64_t d, int64_t left, int64_t right) const {
    const int64_t n = x.size(d);
    if (mode == PadMode::Constant) {
      HG_CHECK(n + left + right >= 0,
               "pad: expected pads that leave a size >= 0, got {} and {} for dim {} of size {}",
               left, right, d, n);
      const Tensor kept = x.narrow(d, std::max<int64_t>(0, -left),
                                   n - std::max<int64_t>(0, -left) - std::max<int64_t>(0, -right));
      const auto block = [&](int64_t width) {
        Shape sizes = x.sizes();
        sizes[size_t(d)] = width;
        return full(sizes, value, x.options());
      };
      std::vector<Tensor> parts;
      if (left > 0) parts.push_back(block(left));
      parts.push_back(kept);
      if (right > 0) parts.push_back(block(right));
      return parts.size() == 1 ? kept.clone() : cat(parts, d);
    }
    HG_CHECK(left >= 0 && right >= 0, "pad: expected pads >= 0 in mode {}, got {} and {}",
             mode_name(), left, right);
    if (mode == PadMode::Reflect) {
      HG_CHECK(left < n && right < n,
               "pad: expected reflect pads < the dim's size ({} for dim {}), got {} and {}", n, d,
               left, right);
    } else if (mode == PadMode::Circular) {
      HG_CHECK(left <= n && right <= n,
               "pad: expected circular pads <= the dim's size ({} for dim {}), got {} and {}", n, d,
               left, right);
    } else {
      HG_CHECK(n > 0, "pad: expected a non-empty dim {} to replicate, got size 0", d);
    }
    std::vector<int64_t> positions;
    for (int64_t j = -left; j < n + right; ++j) positions.push_back(source_position(j, n));
    return select_along(x, d, positions);
  }

  // The position of x's dim that padded position j (in [-left, n + right)) reads.
  int64_t source_position(int64_t j, int64_t n) const {
    if (j >= 0 && j < n) return j;
    switch (mode) {
      case PadMode::Reflect:
        return j < 0 ? -j : 2 * (n - 1) - j;
      case PadMode::Replicate:
        return j < 0 ? 0 : n - 1;
      default:
        return ((j % n) + n) % n;
    }
  }
  const char* mode_name() const {
    return mode == PadMode::Reflect     ? "\"reflect\""
           : mode == PadMode::Replicate ? "\"replicate\""
                                        : "\"circular\"";
  }
};

// NOTE [Pads as torch's ops] torch.nn.functional.pad calls one ATen op per mode and padded
// rank, and torch's CPU autocast list has reflection_pad1d/2d and replication_pad1d/2d/3d as
// float32 ops, the constant and circular pads unlisted. halfgrad's pad is one composite, so it
// dispatches under the op torch would reach: reflection_pad for "reflect" over one or two dims,
// replication_pad for "replicate" over one to three, pad otherwise. Same result either way;
// only the autocast policy (and the profiler's name) follows the op.
struct ReflectionPad : Pad {
  static constexpr OpId id = OpId::reflection_pad;
};
struct ReplicationPad : Pad {
  static constexpr OpId id = OpId::replication_pad;
};

}  // namespace

Tensor triu(const Tensor& x, int64_t diagonal) {
  return dispatch(Triangle<OpId::triu>{.diagonal = diagonal}, x);
}
Tensor tril(const Tensor& x, int64_t diagonal) {
  return dispatch(Triangle<OpId::tril>{.diagonal = diagonal}, x);
}
Tensor diag(const Tensor& x, int64_t diagonal) { return dispatch(Diag{.diagonal = diagonal}, x); }
Tensor repeat(const Tensor& x, const Shape& repeats) {
  return dispatch(Repeat{.repeats = repeats}, x);
}
Tensor tile(const Tensor& x, const Shape& reps) { return dispatch(Tile{.reps = reps}, x); }
Tensor repeat_interleave(const Tensor& x, int64_t repeats, std::optional<int64_t> dim) {
  return dispatch(RepeatInterleave{.counts = {repeats}, .dim = dim}, x);
}
Tensor repeat_interleave(const Tensor& x, const Tensor& repeats, std::optional<int64_t> dim) {
  HG_CHECK(repeats.defined() && repeats.dim() <= 1 && !repeats.is_floating_point() &&
               repeats.dtype() != kBool,
           "repeat_interleave: expected repeats as an integer tensor of at most 1 dim, got {}",
           repeats.defined() ? fmt::format("{} {}", repeats.dtype(), repeats.sizes())
                             : std::string("an undefined tensor"));
  return dispatch(RepeatInterleave{.counts = repeats.to(kInt64).to_vector<int64_t>(), .dim = dim},
                  x);
}
Tensor flip(const Tensor& x, const Shape& dims) { return dispatch(Flip{.dims = dims}, x); }
Tensor roll(const Tensor& x, const Shape& shifts, const Shape& dims) {
  return dispatch(Roll{.shifts = shifts, .dims = dims}, x);
}
Tensor pad(const Tensor& x, const std::vector<int64_t>& pad, std::string_view mode, double value) {
  const Pad op{.widths = pad, .mode = pad_mode(mode), .value = value};
  const size_t dims = (pad.size() + 1) / 2;
  if (op.mode == PadMode::Reflect && dims >= 1 && dims <= 2) {
    return dispatch(ReflectionPad{op}, x);
  }
  if (op.mode == PadMode::Replicate && dims >= 1 && dims <= 3) {
    return dispatch(ReplicationPad{op}, x);
  }
  return dispatch(op, x);
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, std::string_view indexing) {
  HG_CHECK(indexing == "ij" || indexing == "xy",
           "meshgrid: expected indexing \"ij\" or \"xy\", got \"{}\"", indexing);
  Shape sizes{};
  for (const Tensor& t : tensors) {
    HG_CHECK(t.defined() && t.dim() <= 1, "meshgrid: expected 0-d or 1-d tensors, got {}",
             t.defined() ? fmt::format("{}", t.sizes()) : std::string("an undefined tensor"));
    sizes.push_back(t.numel());
  }
  const bool swap = indexing == "xy" && tensors.size() >= 2;
  if (swap) std::swap(sizes[0], sizes[1]);
  std::vector<Tensor> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t axis = swap && i < 2 ? 1 - i : i;
    Shape shape(sizes.size(), 1);
    shape[axis] = sizes[axis];
    out.push_back(tensors[i].reshape(shape).expand(sizes));
  }
  return out;
}

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  HG_CHECK(x.defined() && x.dim() > 0, "unbind: expected a tensor of at least 1 dim, got {}",
           x.defined() ? fmt::format("{}", x.sizes()) : std::string("an undefined tensor"));
  const int64_t d = wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < x.size(d); ++i) out.push_back(x.select(d, i));
  return out;
}

}  // namespace hg
