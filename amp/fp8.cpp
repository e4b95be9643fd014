// amp::Fp8Autocast (amp/fp8.h): opens a step of a delayed-scaling recipe.
#include "halfgrad/amp/fp8.h"

namespace hg::amp {

DelayedScaling* Fp8Autocast::start(DelayedScaling& recipe, bool enabled) {
  if (!enabled) return nullptr;
  // A region nested in one of the same recipe is part of that step.
  if (ops::fp8_recipe() != &recipe) recipe.begin_step();
  return &recipe;
}

Fp8Autocast::Fp8Autocast(DelayedScaling& recipe, bool enabled) : guard_(start(recipe, enabled)) {}

}  // namespace hg::amp
