// Copies and dtype conversions: copy_, fill_, clone, to(dtype), to(device), pin_memory, item,
// to_vector.
//
// Every copy is one strided walk (for_each_row) with a row kernel picked from a table
// indexed by (destination dtype, source dtype). Rounding happens in cast_value (cast.h);
// contiguous float32 <-> float16/bfloat16 rows use the vector conversions of convert.h.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "halfgrad/core/cast.h"
#include "halfgrad/core/convert.h"
#include "halfgrad/core/device_hooks.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/parallel.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/scalar_value.h"
#include "halfgrad/core/stochastic_rounding.h"
#include "halfgrad/core/strided_loop.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/core/view.h"

namespace hg {

namespace {

using CastRow = void (*)(char* dst, int64_t dst_step, const char* src, int64_t src_step, int64_t n);

// Contiguous float32 <-> float16/bfloat16 rows go through the vector conversions (same
// bits as cast_value, whole vectors at a time). Returns false for other pairs.
template <class To, class From>
bool vector_cast(char* dst, const char* src, int64_t n) {
  if constexpr (std::is_same_v<To, Half> && std::is_same_v<From, float>) {
    convert::float_to_half(reinterpret_cast<const float*>(src), reinterpret_cast<Half*>(dst), n);
  } else if constexpr (std::is_same_v<To, float> && std::is_same_v<From, Half>) {
    convert::half_to_float(reinterpret_cast<const Half*>(src), reinterpret_cast<float*>(dst), n);
  } else if constexpr (std::is_same_v<To, BFloat16> && std::is_same_v<From, float>) {
    convert::float_to_bfloat16(reinterpret_cast<const float*>(src),
                               reinterpret_cast<BFloat16*>(dst), n);
  } else if constexpr (std::is_same_v<To, float> && std::is_same_v<From, BFloat16>) {
    convert::bfloat16_to_float(reinterpret_cast<const BFloat16*>(src),
                               reinterpret_cast<float*>(dst), n);
  } else {
    return false;
  }
  return true;
}

template <class To, class From, Overflow kOverflow = Overflow::NonFinite>
void cast_row(char* dst, int64_t dst_step, const char* src, int64_t src_step, int64_t n) {
  if (dst_step == sizeof(To) && src_step == sizeof(From)) {
    if constexpr (std::is_same_v<To, From>) {
      std::memcpy(dst, src, size_t(n) * sizeof(To));
      return;
    }
    if (vector_cast<To, From>(dst, src, n)) return;
  }
  if constexpr (std::is_same_v<To, From>) {  // a strided copy moves bits (a transpose, say)
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_step, src + i * src_step, sizeof(To));
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    From value;
    std::memcpy(&value, src + i * src_step, sizeof(From));
    const To converted = cast_value<To>(value, kOverflow);
    std::memcpy(dst + i * dst_step, &converted, sizeof(To));
  }
}

// Saturating rows exist for float8 destinations only (check_cast_options refuses the rest).
CastRow cast_row_for(DType to, DType from, CastOptions options) {
  return visit_any_dtype(to, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    return visit_any_dtype(from, [&](auto from_tag) -> CastRow {
      using From = typename decltype(from_tag)::type;
      if constexpr (is_float8_v<To>) {
        if (options.saturate) return &cast_row<To, From, Overflow::Saturate>;
      }
      return &cast_row<To, From>;
    });
  });
}

// True when every value of `from` is a value of `to` (both floating): nothing would round.
bool holds_every_value(DType to, DType from) {
  const FInfo wide = finfo(to), narrow = finfo(from);
  return wide.eps <= narrow.eps && wide.max >= narrow.max &&
         wide.smallest_subnormal <= narrow.smallest_subnormal;
}

void check_cast_options(DType to, DType from, CastOptions options) {
  HG_CHECK(!options.saturate || is_float8(to),
           "to: saturate applies to float8 destinations (float8_e4m3fn, float8_e5m2), got {}",
           dtype_name(to));
  if (options.rounding != Rounding::Stochastic) return;
  HG_CHECK(to == kFloat16 || to == kBFloat16 || is_float8(to),
           "to: stochastic rounding goes to float16, bfloat16, float8_e4m3fn or float8_e5m2, got "
           "{} (from {})",
           dtype_name(to), dtype_name(from));
  HG_CHECK(is_floating_point(from),
           "to: stochastic rounding takes a floating source (float32, float64, float16, "
           "bfloat16, float8), got {} (to {})",
           dtype_name(from), dtype_name(to));
  HG_CHECK(!holds_every_value(to, from),
           "to: stochastic rounding needs a narrowing cast, got {} to {}, which holds every {} "
           "value exactly",
           dtype_name(from), dtype_name(to), dtype_name(from));
}

// dst (contiguous, of To) = src (contiguous, of From) rounded stochastically, element i from
// word i % 4 of counter block draw.offset + i / 4 (NOTE [Stochastic rounding]).
template <class To, class From>
void stochastic_round_rows(const Tensor& dst, const Tensor& src, Generator::State draw,
                           Overflow overflow) {
  const int64_t n = dst.numel();
  const int64_t blocks = (n + 3) / 4;
  To* out = static_cast<To*>(dst.data_ptr());
  const From* in = static_cast<const From*>(src.data_ptr());
  parallel_for(blocks, n * 8, [&](int64_t b) {
    const PhiloxBlock words = random::philox_block(draw.seed, draw.offset + uint64_t(b));
    const int64_t first = b * 4, count = std::min<int64_t>(4, n - first);
    for (int64_t k = 0; k < count; ++k) {
      if constexpr (std::is_same_v<To, BFloat16> && std::is_same_v<From, float>) {
        out[first + k] = stochastic_round_bfloat16(in[first + k], words.x[k]);
      } else {
        out[first + k] =
            stochastic_round<To>(static_cast<double>(in[first + k]), words.x[k], overflow);
      }
    }
  });
}

// The pair's loop: To a float8 or 16-bit float, From floating (check_cast_options has
// refused the rest). Each test sits in the lambda of its own type, so no compiler instantiates
// the loop for another pair.
void stochastic_round_cpu(const Tensor& dst, const Tensor& src, Generator::State draw,
                          Overflow overflow) {
  visit_any_dtype(dst.dtype(), [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    if constexpr (is_float8_v<To> || is_reduced_float_v<To>) {
      visit_any_dtype(src.dtype(), [&](auto from_tag) {
        using From = typename decltype(from_tag)::type;
        if constexpr (is_floating_v<From>) {
          stochastic_round_rows<To, From>(dst, src, draw, overflow);
        }
      });
    }
  });
}

// Floating -> integer conversion is defined only for values whose truncation fits; NaN, inf
// and out-of-range values are an error. Checked over the whole source before anything is
// written, so a failed copy leaves the destination untouched.
void check_fits_integer(const Tensor& src, DType to) {
  if (!src.is_floating_point() || is_floating_point(to) || to == kBool) return;
  std::atomic<bool> found{false};
  std::atomic<double> offending{0.0};
  // Both dtypes are chosen once, outside the scan: the loop tests one range per element.
  visit_any_dtype(src.dtype(), [&](auto from_tag) {
    using From = typename decltype(from_tag)::type;
    visit_any_dtype(to, [&](auto to_tag) {
      using To = typename decltype(to_tag)::type;
      if constexpr (is_floating_v<From> && std::is_integral_v<To> && !std::is_same_v<To, bool>) {
        const auto scan = [&](std::array<char*, 1> ptrs, std::array<int64_t, 1> step, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            From value;
            std::memcpy(&value, ptrs[0] + i * step[0], sizeof(From));
            if (!fits_in_integer<To>(value) && !found.exchange(true)) {
              offending = static_cast<double>(value);
            }
          }
        };
        const Shape strides = byte_strides(src);
        for_each_row<1>(src.sizes(), {static_cast<char*>(src.data_ptr())}, {strides}, scan);
      }
    });
  });
  HG_CHECK(!found.load(), "cannot convert {} value {} to {}: {}", dtype_name(src.dtype()),
           offending.load(), dtype_name(to),
           std::isnan(offending.load()) ? "NaN has no integer value"
                                        : "it is outside the integer range");
}

// True when some element of t is reached through two different indices (a stride-0 dim of
// size > 1, as made by expand): writing to it would be ambiguous.
bool has_internal_overlap(const Tensor& t) {
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.strides()[d] == 0 && t.sizes()[d] > 1) return true;
  }
  return false;
}

// NOTE [Short strided casts] A cast walks its operands row by row (for_each_row), and a
// float32 <-> 16-bit row converts in vector lanes. A view whose rows are short, such as the
// [B, H, T, D] heads of an attention's transposed q, k and v (D = 12 in the demo's GPT), pays
// a row's calls for a dozen values: 2 ns a value against 0.2 in one long run (2-core AMD
// EPYC, AVX2). Such a source is first copied in its own dtype into a dense tensor (a memcpy
// per row), which then converts as one run into the dense destination: 55 -> 31 us for the
// demo's [64, 4, 9, 12] bfloat16 views.
bool short_strided_rows(const Tensor& dst, const Tensor& src) {
  constexpr int64_t kShortRow = 64;
  const bool vector_pair =
      (dst.dtype() == kFloat32 && (src.dtype() == kFloat16 || src.dtype() == kBFloat16)) ||
      (src.dtype() == kFloat32 && (dst.dtype() == kFloat16 || dst.dtype() == kBFloat16));
  if (!vector_pair || dst.numel() < 4 * kShortRow || !dst.is_contiguous() ||
      src.is_contiguous()) {
    return false;
  }
  const RowLayout<2> layout =
      simplify_layout<2>(dst.sizes(), {byte_strides(dst), byte_strides(src)});
  return layout.sizes.back() < kShortRow ||
         layout.strides[1].back() != int64_t(src.element_size());
}

// Copies src (already of dst's shape) into dst; no checks, no version bump.
void copy_elements(const Tensor& dst, const Tensor& src, CastOptions options = {}) {
  if (dst.is_cuda()) {
    // NOTE [Float to integer on CUDA] The CPU checks that floating values fit the integer
    // dtype they are copied to; on CUDA that check would read the values on the host (a sync
    // per copy), so the conversion saturates instead, NaN giving 0.
    // A CUDA tensor exists: its hooks do.
    device_hooks(kCUDA)->copy_elements(dst, src, options);
    return;
  }
  check_fits_integer(src, dst.dtype());
  if (short_strided_rows(dst, src)) {
    copy_elements(dst, core::clone(src), options);
    return;
  }
  const CastRow row = cast_row_for(dst.dtype(), src.dtype(), options);
  for_each_row<2>(dst.sizes(),
                  {static_cast<char*>(dst.data_ptr()), static_cast<char*>(src.data_ptr())},
                  {byte_strides(dst), byte_strides(src)},
                  [row](std::array<char*, 2> ptrs, std::array<int64_t, 2> step, int64_t n) {
                    row(ptrs[0], step[0], ptrs[1], step[1], n);
                  });
}

}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  HG_CHECK(src.defined(), "copy_: expected a defined source tensor, got an undefined one");
  const Shape target = sizes();
  HG_CHECK(broadcasts_to(src.sizes(), target),
           "copy_: the source of shape {} cannot be broadcast to the destination's shape {}",
           src.sizes(), target);
  HG_CHECK(!has_internal_overlap(*this),
           "copy_: the destination (shape {}, strides {}) has elements that share memory "
           "(an expanded tensor); clone() it before writing to it",
           sizes(), strides());
  // A source that shares memory with the destination is read in full before any write; one on
  // another device is first copied to this one.
  const Tensor source = src.device() != device() ? src.to(device())
                        : shares_storage(src)    ? core::clone(src)
                                                 : src;
  copy_elements(*this, core::expand(source, target));
  bump_version();
  return *this;
}

Tensor& Tensor::fill_(Scalar value) {
  const bool dense = is_contiguous();  // (a contiguous tensor has no element twice)
  HG_CHECK(dense || !has_internal_overlap(*this),
           "fill_: the tensor (shape {}, strides {}) has elements that share memory (an "
           "expanded tensor); clone() it before writing to it",
           sizes(), strides());
  if (is_cuda()) {
    device_hooks(kCUDA)->fill(*this, value);
    bump_version();
    return *this;
  }
  visit_any_dtype(dtype(), [&](auto tag) {  // float8 included: zeros and full make them
    using T = typename decltype(tag)::type;
    const T fill = scalar_value_as<T>(value, "fill_");
    if (dense) {  // one run, without the walk's set-up (a scalar, a new tensor of ones)
      std::fill_n(static_cast<T*>(data_ptr()), numel(), fill);
      return;
    }
    const Shape strides = byte_strides(*this);
    for_each_row<1>(sizes(), {static_cast<char*>(data_ptr())}, {strides},
                    [fill](std::array<char*, 1> ptrs, std::array<int64_t, 1> step, int64_t n) {
                      for (int64_t i = 0; i < n; ++i) {
                        std::memcpy(ptrs[0] + i * step[0], &fill, sizeof(T));
                      }
                    });
  });
  bump_version();
  return *this;
}

Tensor core::clone(const Tensor& self) {
  Tensor out = empty(self.sizes(), self.options());
  copy_elements(out, self);
  return out;
}

Tensor core::to_dtype(const Tensor& self, DType dtype, CastOptions options) {
  check_cast_options(dtype, self.dtype(), options);
  if (dtype == self.dtype()) return self;
  Tensor out = empty(self.sizes(), {.dtype = dtype, .device = self.device()});
  if (options.rounding == Rounding::Stochastic) {
    // Element i is the i-th in row-major order: a strided source is made dense first.
    const Tensor source = self.is_contiguous() ? self : core::clone(self);
    if (out.is_cuda()) {  // it reserves its blocks of the generator as the CPU does below
      device_hooks(kCUDA)->copy_elements(out, source, options);
      return out;
    }
    const Generator::State draw = reserve_rounding_words(options.generator, out.numel());
    stochastic_round_cpu(out, source, draw,
                         options.saturate ? Overflow::Saturate : Overflow::NonFinite);
    return out;
  }
  copy_elements(out, self, options);
  return out;
}

Tensor Tensor::to(Device device) const { return to(device, /*non_blocking=*/false); }

Tensor Tensor::to(Device device, bool non_blocking) const {
  if (device == this->device()) return *this;
  const DeviceHooks* hooks = device_hooks(kCUDA);
  HG_CHECK(hooks != nullptr,
           "to: cannot move a tensor from {} to {}: halfgrad was built without its CUDA backend",
           this->device(), device);
  return hooks->copy_to_device(*this, device, non_blocking);
}

Tensor Tensor::pin_memory() const {
  HG_CHECK(is_cpu(),
           "pin_memory: expected a CPU tensor (only host memory can be pinned), got one on {}",
           device());
  if (is_pinned()) return *this;
  Tensor out(make_pooled<TensorImpl>(make_pinned_storage(nbytes(), "pin_memory"), dtype(), sizes(),
                                     numel()));
  copy_elements(out, *this);
  return out;
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor values = core::to_dtype(to(Device(kCPU)), dtype_of<T>);
  if (!values.is_contiguous()) values = core::clone(values);
  const T* data = static_cast<const T*>(values.data_ptr());
  return std::vector<T>(data, data + values.numel());
}

template <class T>
T Tensor::item() const {
  HG_CHECK(numel() == 1, "item: expected a tensor with one element, got {} elements (shape {})",
           numel(), sizes());
  return to_vector<T>()[0];
}

#define HG_INSTANTIATE_ITEM(cpp, name, str)                 \
  template std::vector<cpp> Tensor::to_vector<cpp>() const; \
  template cpp Tensor::item<cpp>() const;
HG_FORALL_DTYPES(HG_INSTANTIATE_ITEM)
#undef HG_INSTANTIATE_ITEM

}  // namespace hg
