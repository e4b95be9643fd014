// The Philox4x32-10 generator (random.h): seeding, state, the default generator, and the
// uniform and normal fills of host buffers.
#include "halfgrad/core/random.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "halfgrad/core/error.h"
#include "halfgrad/core/parallel.h"

namespace hg {

// ---- Generator ----------------------------------------------------------------------------

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard lock(mutex_);
  seed_ = seed;
  offset_ = 0;
}

uint64_t Generator::seed() const {
  std::lock_guard lock(mutex_);
  return seed_;
}

uint64_t Generator::offset() const {
  std::lock_guard lock(mutex_);
  return offset_;
}

uint64_t Generator::reserve(uint64_t blocks) { return reserve_with_seed(blocks).offset; }

Generator::State Generator::reserve_with_seed(uint64_t blocks) {
  std::lock_guard lock(mutex_);
  HG_CHECK(blocks <= std::numeric_limits<uint64_t>::max() - offset_,
           "Generator::reserve: expected at most {} more counter blocks, got {} (offset {})",
           std::numeric_limits<uint64_t>::max() - offset_, blocks, offset_);
  const State reserved{seed_, offset_};
  offset_ += blocks;
  return reserved;
}

Generator::State Generator::get_state() const {
  std::lock_guard lock(mutex_);
  return {seed_, offset_};
}

void Generator::set_state(State state) {
  std::lock_guard lock(mutex_);
  seed_ = state.seed;
  offset_ = state.offset;
}

Generator& default_generator() {
  static Generator generator;
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace random {

namespace {

template <class T>
T round_to(double value) {
  if constexpr (std::is_same_v<T, double>) {
    return value;
  } else {
    return T(value);  // float: the C++ conversion (RNE); Half, BFloat16: their RNE from double
  }
}

template <class T>
double widen(T value) {
  return static_cast<double>(value);
}

// The neighbours of a finite value in T's value set (T's own ulp, not double's).
template <class T>
T next_below(T value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return std::nextafter(value, -std::numeric_limits<T>::infinity());
  } else {  // sign-magnitude bits: step the magnitude
    if ((value.bits & 0x7FFFu) == 0) return T::from_bits(0x8001u);  // ±0 -> -smallest subnormal
    return T::from_bits(uint16_t((value.bits & 0x8000u) ? value.bits + 1 : value.bits - 1));
  }
}

template <class T>
T next_above(T value) {
  if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
    return std::nextafter(value, std::numeric_limits<T>::infinity());
  } else {
    if ((value.bits & 0x7FFFu) == 0) return T::from_bits(0x0001u);  // ±0 -> +smallest subnormal
    return T::from_bits(uint16_t((value.bits & 0x8000u) ? value.bits - 1 : value.bits + 1));
  }
}

// Runs emit(begin, words, count) for every block of a draw: words is block first + b, and
// it fills elements [begin, begin + count) of the draw. Blocks are independent, so the
// split across threads cannot change the result.
template <class Emit>
void for_each_block(DType dtype, Generator::State reserved, int64_t n, Emit emit) {
  const int per_block = elements_per_block(dtype);
  const int64_t blocks = (n + per_block - 1) / per_block;
  parallel_for(blocks, n, [&](int64_t b) {
    const PhiloxBlock words = philox_block(reserved.seed, reserved.offset + uint64_t(b));
    const int64_t begin = b * per_block;
    emit(begin, words, int(std::min<int64_t>(per_block, n - begin)));
  });
}

Generator::State reserve_for(DType dtype, int64_t n, Generator& gen) {
  return gen.reserve_with_seed(blocks_for(dtype, n));
}

}  // namespace

UniformRange uniform_range(DType dtype, double low, double high) {
  return visit_floating_dtype("uniform", dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T first_ok = round_to<T>(low);
    if (widen(first_ok) < low) first_ok = next_above(first_ok);
    T last_ok = round_to<T>(high);
    if (widen(last_ok) >= high) last_ok = next_below(last_ok);
    return UniformRange{widen(first_ok), widen(last_ok)};
  });
}

void fill_uniform(DType dtype, void* dst, int64_t n, double low, double high, Generator& gen) {
  visit_floating_dtype("uniform", dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    HG_CHECK(n >= 0, "uniform: expected n >= 0, got n={}", n);
    HG_CHECK(dst != nullptr || n == 0, "uniform: got a null destination for n={} elements", n);
    HG_CHECK(std::isfinite(low) && std::isfinite(high),
             "uniform: expected finite bounds, got low={} and high={}", low, high);
    HG_CHECK(low < high, "uniform: expected low < high, got low={} and high={}", low, high);
    const FInfo info = finfo(dtype);
    HG_CHECK(low >= info.min && high <= info.max,
             "uniform: expected bounds within {}'s range [{}, {}], got low={} and high={}",
             dtype_name(dtype), info.min, info.max, low, high);
    const double span = high - low;
    HG_CHECK(std::isfinite(span),
             "uniform: expected high - low to be finite in double, got low={} and high={}", low,
             high);

    // Rounding low + span * u to T can step outside [low, high); clamp to the T values
    // inside (NOTE [Philox stream layout]).
    const UniformRange range = uniform_range(dtype, low, high);
    const double first_ok_value = range.first_ok, last_ok_value = range.last_ok;
    const T first_ok = round_to<T>(first_ok_value), last_ok = round_to<T>(last_ok_value);
    HG_CHECK(first_ok_value <= last_ok_value, "uniform: no {} value lies in [low={}, high={})",
             dtype_name(dtype), low, high);

    const int bits = uniform_bits(dtype);
    T* out = static_cast<T*>(dst);
    auto value_of = [&](double u) {
      const T value = round_to<T>(affine(low, span, u));
      const double wide = widen(value);
      return wide < first_ok_value ? first_ok : wide > last_ok_value ? last_ok : value;
    };
    const Generator::State reserved = reserve_for(dtype, n, gen);
    for_each_block(dtype, reserved, n, [&](int64_t begin, const PhiloxBlock& words, int count) {
      if constexpr (std::is_same_v<T, double>) {
        const double u[2] = {unit53_from_words(words.x[0], words.x[1]),
                             unit53_from_words(words.x[2], words.x[3])};
        for (int k = 0; k < count; ++k) out[begin + k] = value_of(u[k]);
      } else {
        for (int k = 0; k < count; ++k) out[begin + k] = value_of(unit_from_word(words.x[k], bits));
      }
    });
  });
}

void fill_normal(DType dtype, void* dst, int64_t n, double mean, double stddev, Generator& gen) {
  visit_floating_dtype("normal", dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    HG_CHECK(n >= 0, "normal: expected n >= 0, got n={}", n);
    HG_CHECK(dst != nullptr || n == 0, "normal: got a null destination for n={} elements", n);
    HG_CHECK(std::isfinite(mean), "normal: expected a finite mean, got mean={}", mean);
    HG_CHECK(std::isfinite(stddev) && stddev >= 0, "normal: expected a finite std >= 0, got std={}",
             stddev);

    T* out = static_cast<T*>(dst);
    const Generator::State reserved = reserve_for(dtype, n, gen);
    for_each_block(dtype, reserved, n, [&](int64_t begin, const PhiloxBlock& words, int count) {
      double z[4] = {};
      if constexpr (std::is_same_v<T, double>) {
        const NormalPair pair = box_muller(open_unit53_from_words(words.x[0], words.x[1]),
                                           unit53_from_words(words.x[2], words.x[3]));
        z[0] = pair.z0;
        z[1] = pair.z1;
      } else {
        for (int half = 0; half < 2; ++half) {
          const NormalPair pair = box_muller(open_unit_from_word(words.x[2 * half]),
                                             unit_from_word(words.x[2 * half + 1], 32));
          z[2 * half] = pair.z0;
          z[2 * half + 1] = pair.z1;
        }
      }
      for (int k = 0; k < count; ++k) out[begin + k] = round_to<T>(affine(mean, stddev, z[k]));
    });
  });
}

}  // namespace random

}  // namespace hg
