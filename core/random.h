// Random numbers: the counter-based Philox4x32-10 generator, and uniform and normal fills for
// the floating dtypes.
//
//   hg::manual_seed(42);
//   std::vector<float> w(n);
//   hg::random::fill_normal(hg::kFloat32, w.data(), n, /*mean=*/0.0, /*stddev=*/0.02,
//                           hg::default_generator());
//
// A Generator is only a (seed, offset) pair; the numbers come from a pure function of the
// seed and a counter, so any thread or device can compute any element of any draw. The
// layout every backend follows is NOTE [Philox stream layout].
//
// This header is also compiled by nvcc for the CUDA kernels: it does not include fmt, and
// the functions a kernel needs are HG_HOST_DEVICE.
//
// NOTE [Philox stream layout]
//
// The contract between the CPU fills here and the CUDA kernels, so both draw the same numbers.
//
// State. A Generator holds (seed, offset); offset counts the 128-bit counter blocks already
// handed out. A draw of n elements with P elements per block reserves the B = ceil(n / P)
// blocks [first, first + B), first = offset, and advances offset by B. Nothing else changes
// the state, so get_state before a draw and set_state after replays it.
//
// Block. Block b of a seed is four 32-bit words
//
//   (w0, w1, w2, w3) = philox4x32_10(counter = (lo32(b), hi32(b), 0, 0),
//                                    key     = (lo32(seed), hi32(seed)))
//
// Element. Element i of a draw is a pure function of (seed, first, i); it reads only block
// first + i / P. No element depends on another or on n, so element i of an n-element draw
// equals element i of any longer draw from the same state.
//
//   dtype                       P   uniform, element i          normal, elements of block b
//   float32, float16, bfloat16  4   word i % 4                  (w0, w1) -> 4b, 4b+1
//                                                               (w2, w3) -> 4b+2, 4b+3
//   float64                     2   w0:w1 (i even),             (w0:w1, w2:w3) -> 2b, 2b+1
//                                   w2:w3 (i odd)
//
// (b counts blocks from the draw's first; hi:lo is the 64-bit word (uint64(hi) << 32) | lo.)
//
// Uniform on [low, high). u = (top k bits of the word) * 2^-k, k = the dtype's significand
// width: float32 24, float16 11, bfloat16 8, float64 53 (the top 53 of the 64-bit word).
// u is exactly representable in the dtype and u <= 1 - 2^-k < 1. The value is
// low + (high - low) * u in double, no FMA contraction (random::affine), rounded once to the
// dtype, round to nearest even. Rounding can leave [low, high): in bfloat16 on [1, 2),
// 1 + 255/256 is a tie that rounds to 2. So the result is clamped to [first_ok, last_ok],
// the smallest dtype value >= low and the largest dtype value < high, both found once per
// draw; a range that holds no dtype value is an error.
//
// Normal. Box–Muller in double. A pair of words (a, b) gives
//
//   u1 = (a + 1) * 2^-32 in (0, 1]   (so log never sees 0)
//   u2 =  b      * 2^-32 in [0, 1)
//   r = sqrt(-2 log u1),  t = 2 pi u2,  z0 = r cos t,  z1 = r sin t
//
// float64 does the same with 53-bit uniforms: u1 = ((w0:w1 >> 11) + 1) * 2^-53,
// u2 = (w2:w3 >> 11) * 2^-53. The value is mean + stddev * z in double (no FMA), rounded
// once to the dtype.
//
// Across devices. The Philox words, the uniforms and every uniform value are bit-identical on
// any device (integer math and correctly rounded double + and *). Normals go through
// log, sqrt, cos and sin, whose double results can differ in the last ulp between the host's
// libm and CUDA's; after rounding to float32 or narrower that almost never shows, but float64
// normals are reproducible on one device, not promised bit-identical across devices.
#pragma once

#include <cmath>
#include <cstdint>
#include <mutex>
#include <numbers>

#include "halfgrad/core/dtype.h"
#include "halfgrad/core/host_device.h"

namespace hg {

// ---- Philox4x32-10 ------------------------------------------------------------------------

// 128 bits: a Philox counter going in, four random words coming out.
struct PhiloxBlock {
  uint32_t x[4];
};

namespace detail {

// The constants of Salmon et al. (SC'11): the two round multipliers, and the two key
// increments (the golden ratio and sqrt(3) - 1, as 32-bit fractions).
inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

HG_HOST_DEVICE constexpr PhiloxBlock philox_round(PhiloxBlock c, uint32_t key0, uint32_t key1) {
  const uint64_t product0 = uint64_t(kPhiloxM0) * c.x[0];
  const uint64_t product1 = uint64_t(kPhiloxM1) * c.x[2];
  const uint32_t hi0 = uint32_t(product0 >> 32), lo0 = uint32_t(product0);
  const uint32_t hi1 = uint32_t(product1 >> 32), lo1 = uint32_t(product1);
  return PhiloxBlock{{hi1 ^ c.x[1] ^ key0, lo1, hi0 ^ c.x[3] ^ key1, lo0}};
}

}  // namespace detail

// Philox4x32 with 10 rounds: a bijection of the 128-bit counter keyed by 64 bits. The key is
// bumped by the Weyl increments between rounds (9 bumps for 10 rounds).
HG_HOST_DEVICE constexpr PhiloxBlock philox4x32_10(PhiloxBlock counter, uint32_t key0,
                                                   uint32_t key1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += detail::kPhiloxW0;
      key1 += detail::kPhiloxW1;
    }
    counter = detail::philox_round(counter, key0, key1);
  }
  return counter;
}

// ---- Generator ----------------------------------------------------------------------------

// A (seed, offset) pair behind a mutex; see NOTE [Philox stream layout].
class Generator {
 public:
  // PyTorch's default seed, so an unseeded run is still reproducible.
  static constexpr uint64_t kDefaultSeed = 67280421310721ull;

  struct State {
    uint64_t seed;
    uint64_t offset;
  };

  explicit Generator(uint64_t seed = kDefaultSeed) : seed_(seed) {}
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Sets the seed and restarts the stream at block 0.
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  // The next unused counter block.
  uint64_t offset() const;

  // Reserves `blocks` consecutive counter blocks for one draw and returns the first.
  uint64_t reserve(uint64_t blocks);
  // reserve(), also returning the seed those blocks belong to, read under the same lock (a
  // concurrent manual_seed cannot come between them). Draws use this one.
  State reserve_with_seed(uint64_t blocks);

  State get_state() const;
  void set_state(State state);

 private:
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide CPU generator.
Generator& default_generator();
// Seeds default_generator() (and, once the CUDA backend has generators, those too).
void manual_seed(uint64_t seed);

namespace random {

// ---- The element -> counter mapping, shared with the CUDA kernels ---------------------------

// Words of counter block `block` of `seed`.
HG_HOST_DEVICE constexpr PhiloxBlock philox_block(uint64_t seed, uint64_t block) {
  const PhiloxBlock counter{{uint32_t(block), uint32_t(block >> 32), 0u, 0u}};
  return philox4x32_10(counter, uint32_t(seed), uint32_t(seed >> 32));
}

// Elements of a draw per counter block: 4, or 2 for float64 (two words per element).
HG_HOST_DEVICE constexpr int elements_per_block(DType dtype) {
  return dtype == DType::Float64 ? 2 : 4;
}

// Random bits in one uniform: the significand width of the (floating) dtype.
HG_HOST_DEVICE constexpr int uniform_bits(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return 24;
    case DType::Float16:
      return 11;
    case DType::BFloat16:
      return 8;
    default:
      return 53;
  }
}

// The top `bits` bits (1..32) of a word as a uniform in [0, 1), exact in any dtype with
// `bits` significand bits.
HG_HOST_DEVICE constexpr double unit_from_word(uint32_t word, int bits) {
  return double(word >> (32 - bits)) * (1.0 / double(uint64_t(1) << bits));
}

// The top 53 bits of hi:lo as a uniform in [0, 1).
HG_HOST_DEVICE constexpr double unit53_from_words(uint32_t hi, uint32_t lo) {
  return double(((uint64_t(hi) << 32) | lo) >> 11) * 0x1p-53;
}

// A full word as a uniform in (0, 1]: the Box–Muller radius takes log of it.
HG_HOST_DEVICE constexpr double open_unit_from_word(uint32_t word) {
  return (double(word) + 1.0) * 0x1p-32;
}

// The top 53 bits of hi:lo as a uniform in (0, 1].
HG_HOST_DEVICE constexpr double open_unit53_from_words(uint32_t hi, uint32_t lo) {
  return double((((uint64_t(hi) << 32) | lo) >> 11) + 1) * 0x1p-53;
}

// offset + scale * x with two roundings, never fused into one FMA, so that every device
// computes the same double.
HG_HOST_DEVICE inline double affine(double offset, double scale, double x) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(offset, __dmul_rn(scale, x));
#else
  // The product is stored before the sum, so no compiler fuses the two into an FMA (clang
  // does by default when the target has one), which would round once where CUDA rounds twice.
  volatile double product = scale * x;
  return offset + product;
#endif
}

struct NormalPair {
  double z0;
  double z1;
};

// Two independent standard normals from u1 in (0, 1] and u2 in [0, 1).
HG_HOST_DEVICE inline NormalPair box_muller(double u1, double u2) {
  const double radius = ::sqrt(-2.0 * ::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  return NormalPair{radius * ::cos(angle), radius * ::sin(angle)};
}

// Element i's uniform u in [0, 1) for a draw of `dtype` (floating) starting at `first_block`.
// The value written is affine(low, high - low, u), rounded and clamped as the NOTE says.
HG_HOST_DEVICE constexpr double uniform_unit(DType dtype, uint64_t seed, uint64_t first_block,
                                             uint64_t i) {
  if (dtype == DType::Float64) {
    const PhiloxBlock words = philox_block(seed, first_block + i / 2);
    const int pair = int(i % 2) * 2;
    return unit53_from_words(words.x[pair], words.x[pair + 1]);
  }
  const PhiloxBlock words = philox_block(seed, first_block + i / 4);
  return unit_from_word(words.x[i % 4], uniform_bits(dtype));
}

// Element i's standard normal z for a draw of `dtype` (floating) starting at `first_block`.
// The value written is affine(mean, stddev, z) rounded once to the dtype.
HG_HOST_DEVICE inline double standard_normal(DType dtype, uint64_t seed, uint64_t first_block,
                                             uint64_t i) {
  if (dtype == DType::Float64) {
    const PhiloxBlock words = philox_block(seed, first_block + i / 2);
    const NormalPair z = box_muller(open_unit53_from_words(words.x[0], words.x[1]),
                                    unit53_from_words(words.x[2], words.x[3]));
    return i % 2 == 0 ? z.z0 : z.z1;
  }
  const PhiloxBlock words = philox_block(seed, first_block + i / 4);
  const int pair = int(i % 4) / 2 * 2;
  const NormalPair z =
      box_muller(open_unit_from_word(words.x[pair]), unit_from_word(words.x[pair + 1], 32));
  return i % 2 == 0 ? z.z0 : z.z1;
}

// ---- CPU fills ----------------------------------------------------------------------------

// The counter blocks a draw of n elements of dtype reserves: ceil(n / elements_per_block).
inline uint64_t blocks_for(DType dtype, int64_t n) {
  const int64_t per_block = elements_per_block(dtype);
  return uint64_t((n + per_block - 1) / per_block);
}

// The smallest and the largest value of dtype (floating) inside [low, high), as doubles
// (exactly: both are dtype values). A uniform draw clamps into them, on every device, since
// low + (high - low) * u rounded to dtype can step outside [low, high). For bounds that
// fill_uniform accepts (it checks them first); last_ok < first_ok when no value lies between.
struct UniformRange {
  double first_ok;
  double last_ok;
};
UniformRange uniform_range(DType dtype, double low, double high);

// Fills dst[0, n) (elements of `dtype`: float32, float16, bfloat16 or float64) with uniform
// draws on [low, high), reserving ceil(n / elements_per_block(dtype)) blocks of `gen`.
// Needs finite low < high inside the dtype's finite range, with some dtype value in between.
void fill_uniform(DType dtype, void* dst, int64_t n, double low, double high, Generator& gen);

// Fills dst[0, n) with normal draws of the given mean and standard deviation (finite,
// stddev >= 0), reserving blocks as fill_uniform does.
void fill_normal(DType dtype, void* dst, int64_t n, double mean, double stddev, Generator& gen);

}  // namespace random

}  // namespace hg
