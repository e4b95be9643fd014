// vector_map (vector_math.h): picks the instruction set once, at the first call.
#include "halfgrad/cpu/vector_math.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "halfgrad/config.h"
#include "halfgrad/core/cpu_features.h"

namespace hg::cpu {

namespace {

enum class Isa { None, Avx2, Avx512 };

// HALFGRAD_VECTOR_MATH=0 in the environment turns the vector passes off for the process (to
// compare with the scalar loops); "avx2" keeps them off AVX-512.
Isa detect() {
  const char* setting = std::getenv("HALFGRAD_VECTOR_MATH");
  if (setting != nullptr && std::string_view(setting) == "0") return Isa::None;
#if defined(__x86_64__) && HALFGRAD_HAS_SLEEF
  if (setting != nullptr && std::string_view(setting) == "avx2") {
    return cpu_has_avx2_fma() ? Isa::Avx2 : Isa::None;
  }
  if (cpu_has_avx512f()) return Isa::Avx512;
  if (cpu_has_avx2_fma()) return Isa::Avx2;
#endif
  return Isa::None;
}

Isa isa() {
  static const Isa found = detect();
  return found;
}

std::atomic<bool> enabled{true};

}  // namespace

namespace {

// The pass of the ISA in use, of the two a function has, or null where vector math is off or
// the CPU has neither.
template <class Pass>
Pass pick([[maybe_unused]] Pass avx512, [[maybe_unused]] Pass avx2) {
  if (!enabled.load(std::memory_order_relaxed)) return nullptr;
  switch (isa()) {
    case Isa::Avx512:
      return avx512;
    case Isa::Avx2:
      return avx2;
    case Isa::None:
      break;
  }
  return nullptr;
}

}  // namespace

VectorMap vector_mapper() {
#if defined(__x86_64__) && HALFGRAD_HAS_SLEEF
  return pick<VectorMap>(&detail::vector_map_avx512, &detail::vector_map_avx2);
#else
  return nullptr;
#endif
}

VectorPow vector_power() {
#if defined(__x86_64__) && HALFGRAD_HAS_SLEEF
  return pick<VectorPow>(&detail::vector_pow_avx512, &detail::vector_pow_avx2);
#else
  return nullptr;
#endif
}

bool vector_map(VectorFn fn, const float* x, float* y, int64_t n) {
  const VectorMap pass = vector_mapper();
  if (pass == nullptr) return false;
  pass(fn, x, y, n);
  return true;
}

const char* vector_math_isa() {
  switch (isa()) {
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx2:
      return "avx2";
    case Isa::None:
      break;
  }
  return "none";
}

void set_vector_math_enabled(bool on) { enabled.store(on, std::memory_order_relaxed); }

}  // namespace hg::cpu
