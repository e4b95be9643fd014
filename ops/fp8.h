// fp8 training inside the dispatcher: the delayed-scaling recipe and its per-layer state, the
// thread's fp8 region, and the fp8 forms of linear and linear_gelu. Users open regions with
// amp::Fp8Autocast (amp/fp8.h), which names these types in amp::.
//
// NOTE [Delayed scaling] A float8 tensor holds x * scale rounded to E4M3 (or E5M2), and the
// GEMM multiplies back by 1 / scale (scaled_mm's dequantization scales). The scale should
// bring the tensor's largest magnitude (its amax) near the format's largest value: E4M3 448,
// E5M2 57344. Computing it from the tensor itself costs a pass over the tensor before the cast;
// delayed scaling (Transformer Engine's default recipe) uses the amaxes of earlier steps
// instead, and records this step's amax as a side product of the cast:
//
//   every layer keeps, for its input (E4M3), weight (E4M3) and output gradient (E5M2 under the
//   hybrid format, E4M3 under E4M3), a history of `amax_history_len` amaxes, row 0 this step's;
//   each cast takes max(|x|) into row 0 and quantizes with the current scale (saturating);
//   when the next step's region opens, for each layer that ran:
//     amax  = the history's max (AmaxCompute::Max) or row 0 (AmaxCompute::MostRecent)
//     scale = fp8_max / amax / 2^margin, kept as it was where amax is 0, inf or NaN, or the
//             quotient is not finite
//     the rows move down one, the oldest drops out, and row 0 starts again at 0.
//
// Everything is tensor ops on the layer's device, so nothing waits for the GPU: the host never
// reads an amax or a scale. A value above 448 / scale (the tensor grew faster than the history
// knew) saturates to +-448 instead of becoming NaN, and the next step's scale shrinks.
//
// NOTE [Fp8 weight cache] A weight is quantized once per region (step) and the cast reused by
// every call that reads it there, forward and backward, as the weight-cast cache does for
// autocast: the cache entry is the layer's, and is used only while the weight's version is the
// one it was made from (an in-place update, the optimizer's step, makes a new cast).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "halfgrad/core/autocast_mode.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/core/tensor.h"

namespace hg::ops {

// Which float8 format each tensor of a layer gets.
enum class Fp8Format : uint8_t {
  E4M3,    // E4M3 everywhere
  Hybrid,  // E4M3 for inputs and weights (forward), E5M2 for output gradients (backward)
};

// How a layer's amax history turns into the amax its scale is computed from.
enum class AmaxCompute : uint8_t {
  Max,         // the largest amax of the history
  MostRecent,  // the last step's
};

// Transformer Engine's DelayedScaling defaults.
struct DelayedScalingOptions {
  int margin = 0;  // scale = fp8_max / amax / 2^margin
  Fp8Format fp8_format = Fp8Format::Hybrid;
  int64_t amax_history_len = 1024;
  AmaxCompute amax_compute_algo = AmaxCompute::Max;
};

// The rows of a layer's amax history and scale: input, weight, output gradient.
enum Fp8Slot : int64_t { kFp8Input = 0, kFp8Weight = 1, kFp8GradOutput = 2 };

// One layer's delayed-scaling state, made on the weight's device when the layer first runs in
// a region of the recipe.
struct Fp8LayerState {
  Tensor amax_history;  // float32 [amax_history_len, 3]: row 0 is the current step's
  Tensor scale;         // float32 [3]: x * scale is what is stored in float8
  // float32 [3]: 1 / scale, the GEMM's dequantization factors. A new tensor each step, so the
  // operands saved by an earlier step keep theirs; one per step, not one per cast.
  Tensor scale_inv;
  Tensor fp8_max;       // float32 [3]: the largest value of each slot's format
  bool ran = false;     // recorded an amax since the last update (host-side flag)

  // The weight cast of this step (NOTE [Fp8 weight cache]).
  Tensor weight_fp8;        // float8_e4m3fn, [out, in]
  Tensor weight_scale_inv;  // float32 [1]: 1 / the scale weight_fp8 was made with
  uint64_t weight_step = 0;
  uint64_t weight_version = 0;
};

// A delayed-scaling recipe: its options and the state of every layer that ran under it. A
// layer is known by its weight (the state lives while the weight does). One recipe serves a
// model; it may be used from one thread at a time.
class DelayedScaling {
 public:
  explicit DelayedScaling(DelayedScalingOptions options = {});
  DelayedScaling(const DelayedScaling&) = delete;
  DelayedScaling& operator=(const DelayedScaling&) = delete;

  const DelayedScalingOptions& options() const { return options_; }
  // The float8 dtype of a slot under this recipe's format.
  DType fp8_dtype(Fp8Slot slot) const;

  // The state of the layer whose weight this is, or null when it has not run under the recipe.
  std::shared_ptr<Fp8LayerState> find(const Tensor& weight) const;
  // The state of the layer whose weight this is, made on first use.
  std::shared_ptr<Fp8LayerState> state_for(const Tensor& weight);
  size_t num_layers() const;

  // Starts a step: updates the scales of every layer that ran since the last call from its
  // amax history, and moves the histories on (NOTE [Delayed scaling]). amp::Fp8Autocast calls
  // it when its region opens. Invalidates every cached weight cast.
  void begin_step();
  uint64_t step() const { return step_; }
  // Weight casts made so far (each cache miss), for tests and teaching.
  uint64_t weight_casts() const { return weight_casts_; }
  void count_weight_cast() { ++weight_casts_; }

 private:
  struct Entry {
    std::weak_ptr<TensorImpl> weight;  // to tell a live weight from a reused address
    std::shared_ptr<Fp8LayerState> state;
  };
  DelayedScalingOptions options_;
  mutable std::mutex mutex_;
  std::unordered_map<const TensorImpl*, Entry> layers_;
  uint64_t step_ = 1;
  uint64_t weight_casts_ = 0;
};

// ---- the thread's fp8 region ------------------------------------------------------------------

// The recipe of the innermost open fp8 region of this thread, or null (none, or one opened with
// enabled = false). It is part of the thread's autocast mode (core/autocast_mode.h), so the
// autograd engine runs backward without it and a checkpointed segment recomputes with it.
inline DelayedScaling* fp8_recipe() {
  return static_cast<DelayedScaling*>(autocast_mode().fp8_recipe);
}

// Sets the thread's fp8 recipe while it lives (amp::Fp8Autocast holds one).
class Fp8RecipeGuard {
 public:
  explicit Fp8RecipeGuard(DelayedScaling* recipe)
      : previous_(hg::detail::autocast_mode.fp8_recipe) {
    hg::detail::autocast_mode.fp8_recipe = recipe;
  }
  ~Fp8RecipeGuard() { hg::detail::autocast_mode.fp8_recipe = previous_; }
  Fp8RecipeGuard(const Fp8RecipeGuard&) = delete;
  Fp8RecipeGuard& operator=(const Fp8RecipeGuard&) = delete;

 private:
  void* previous_;
};

// linear and linear_gelu in fp8 under `recipe` (NOTE [Fp8 ops]): the fp8_form of their ops,
// which dispatch() runs in an fp8 region. The output is the autocast dtype when autocast
// is on for the input's device, else the input's dtype.
Tensor fp8_linear(DelayedScaling& recipe, const Tensor& x, const Tensor& weight,
                  const Tensor& bias);
Tensor fp8_linear_gelu(DelayedScaling& recipe, const Tensor& x, const Tensor& weight,
                       const Tensor& bias, bool tanh_approximation);

}  // namespace hg::ops
