// Process-wide numeric settings (settings.h).
#include "halfgrad/core/settings.h"

#include <atomic>

#include "halfgrad/core/error.h"

namespace hg {

namespace {

// Relaxed is enough: the setting orders nothing else; a kernel reads whichever value is
// current when it is called.
std::atomic<Float32MatmulPrecision> g_float32_matmul_precision{Float32MatmulPrecision::Highest};

}  // namespace

void set_float32_matmul_precision(std::string_view precision) {
  Float32MatmulPrecision value;
  if (precision == "highest") {
    value = Float32MatmulPrecision::Highest;
  } else if (precision == "high") {
    value = Float32MatmulPrecision::High;
  } else if (precision == "medium") {
    value = Float32MatmulPrecision::Medium;
  } else {
    HG_ERROR(
        "set_float32_matmul_precision: expected \"highest\", \"high\" or \"medium\", got \"{}\"",
        precision);
  }
  g_float32_matmul_precision.store(value, std::memory_order_relaxed);
}

std::string get_float32_matmul_precision() {
  switch (float32_matmul_precision()) {
    case Float32MatmulPrecision::High:
      return "high";
    case Float32MatmulPrecision::Medium:
      return "medium";
    case Float32MatmulPrecision::Highest:
      break;
  }
  return "highest";
}

Float32MatmulPrecision float32_matmul_precision() {
  return g_float32_matmul_precision.load(std::memory_order_relaxed);
}

bool float32_matmul_allows_tf32() {
  return float32_matmul_precision() != Float32MatmulPrecision::Highest;
}

}  // namespace hg
