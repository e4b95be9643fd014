// amp::Fp8Autocast: the guard that opens an fp8 region. Inside it the linear layers (linear and
// linear_gelu, NOTE [Fp8 ops]) multiply in float8 with delayed scaling: E4M3 inputs and weights
// in forward, E5M2 output gradients in backward (the hybrid format), the scales computed from
// amax histories on the device, the weights' master copies and the optimizer in float32.
//
//   amp::DelayedScaling recipe({.amax_history_len = 16});   // one per model, kept across steps
//   for (...) {
//     {
//       amp::Autocast autocast(kCUDA, kBFloat16);            // the other ops: bf16 autocast
//       amp::Fp8Autocast fp8(recipe);                        // the linear layers: fp8
//       loss = cross_entropy(model(x), y);
//     }
//     loss.backward();                                       // gradients in E5M2
//     optimizer.step();
//   }
//
// Each region is a step of the recipe: opening one updates the scales from the amaxes the
// previous steps recorded (NOTE [Delayed scaling] in ops/fp8.h) and starts a new weight cache.
// The machinery (the recipe, its per-layer state, the fp8 ops) is ops/fp8.h's; this header
// names it in amp::. The CPU emulates the float8 products exactly (NOTE [Scaled fp8 GEMM]);
// CUDA runs them on fp8 tensor cores (compute capability 8.9 or newer).
#pragma once

#include "halfgrad/ops/fp8.h"

namespace hg::amp {

using ops::AmaxCompute;
using ops::DelayedScaling;
using ops::DelayedScalingOptions;
using ops::Fp8Format;
using ops::Fp8LayerState;

// An fp8 region under `recipe` for this thread. Regions nest: an inner one with
// enabled = false runs its linear layers as autocast says (outside fp8); an inner one with the
// same recipe as the enclosing region continues its step. Leaving restores the enclosing
// region exactly (also when an exception unwinds).
class Fp8Autocast {
 public:
  explicit Fp8Autocast(DelayedScaling& recipe, bool enabled = true);
  Fp8Autocast(const Fp8Autocast&) = delete;
  Fp8Autocast& operator=(const Fp8Autocast&) = delete;

 private:
  static DelayedScaling* start(DelayedScaling& recipe, bool enabled);
  ops::Fp8RecipeGuard guard_;
};

// True inside an fp8 region (enabled) on this thread.
inline bool is_fp8_enabled() { return ops::fp8_recipe() != nullptr; }

}  // namespace hg::amp
