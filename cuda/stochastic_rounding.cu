// The stochastic-rounding cast on CUDA: one thread per Philox block of four elements, each
// rounded by core/stochastic_rounding.h's functions (the CPU cast's), so both give the same bits.
#include <cstdint>
#include <type_traits>

#include "halfgrad/core/random.h"
#include "halfgrad/core/stochastic_rounding.h"
#include "halfgrad/cuda/stochastic_rounding_launch.h"

namespace hg::cuda::detail {

namespace {

constexpr int kThreads = 256;

// The host storage types (structs of bits, constexpr conversions) serve on the device too.
template <class To, class From>
__global__ void __launch_bounds__(kThreads)
    stochastic_round_kernel(To* dst, const From* src, int64_t n, uint64_t seed,
                            uint64_t first_block, Overflow overflow) {
  const int64_t blocks = (n + 3) / 4;
  const int64_t step = int64_t(gridDim.x) * blockDim.x;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += step) {
    const PhiloxBlock words = random::philox_block(seed, first_block + uint64_t(b));
    const int64_t first = b * 4;
    const int count = int(n - first < 4 ? n - first : 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (k < count) {
        if constexpr (std::is_same_v<To, BFloat16> && std::is_same_v<From, float>) {
          dst[first + k] = stochastic_round_bfloat16(src[first + k], words.x[k]);
        } else {
          dst[first + k] =
              stochastic_round<To>(static_cast<double>(src[first + k]), words.x[k], overflow);
        }
      }
    }
  }
}

// f(tag) with tag::type the host storage type of a floating dtype; false for the others.
template <class F>
cudaError_t visit_floating(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32:
      return f(std::type_identity<float>{});
    case DType::Float64:
      return f(std::type_identity<double>{});
    case DType::Float16:
      return f(std::type_identity<Half>{});
    case DType::BFloat16:
      return f(std::type_identity<BFloat16>{});
    case DType::Float8_e4m3fn:
      return f(std::type_identity<Float8_e4m3fn>{});
    case DType::Float8_e5m2:
      return f(std::type_identity<Float8_e5m2>{});
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_stochastic_round(DType to, DType from, void* dst, const void* src, int64_t n,
                                    uint64_t seed, uint64_t first_block, bool saturate,
                                    cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const Overflow overflow = saturate ? Overflow::Saturate : Overflow::NonFinite;
  return visit_floating(to, [&](auto to_tag) {
    using To = typename decltype(to_tag)::type;
    return visit_floating(from, [&](auto from_tag) -> cudaError_t {
      using From = typename decltype(from_tag)::type;
      if constexpr (std::is_same_v<To, float> || std::is_same_v<To, double> ||
                    std::is_same_v<To, From>) {
        return cudaErrorInvalidValue;  // not a destination (the host checked)
      } else {
        const int64_t blocks = (n + 3) / 4;
        const int64_t grid = (blocks + kThreads - 1) / kThreads;
        stochastic_round_kernel<To, From>
            <<<unsigned(grid < 65535 * 8 ? grid : 65535 * 8), kThreads, 0, stream>>>(
                static_cast<To*>(dst), static_cast<const From*>(src), n, seed, first_block,
                overflow);
        return cudaGetLastError();
      }
    });
  });
}

}  // namespace hg::cuda::detail
