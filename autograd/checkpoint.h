// Gradient checkpointing, as torch.utils.checkpoint.checkpoint (non-reentrant):
//
//   Tensor y = hg::utils::checkpoint([&](const Tensor& x) { return (*block)(x); }, x);
//
// The forward of fn keeps none of its activations: the graph fn records is dropped once the
// tensors it reaches from outside (its inputs, and the parameters it uses) are known, and
// one node stands for it. Backward runs fn again, under the autocast mode and from the
// random-generator state of the forward (so dropout draws the same masks), and takes the
// gradients of that recomputation for the inputs and the parameters. Memory then holds each
// checkpointed segment's inputs instead of its activations, for one more forward per segment.
//
// NOTE [Checkpoint boundary] The tensors fn reaches from outside are found by walking the
// graph fn recorded back to the nodes made before fn began (sequence numbers) and to leaves.
// Leaves (parameters) are found from their AccumulateGrad nodes; a tensor with history must be
// one of the inputs: fn using any other tensor that has a grad_fn is an hg::Error, since its
// gradient could not be routed (pass it as an input). Without grad mode, or when nothing fn
// touches requires grad, fn simply runs. A backward with create_graph through a segment
// is an hg::Error (torch's non-reentrant checkpoint supports it).
#pragma once

#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::utils {

Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                  const std::vector<Tensor>& inputs);

// fn(inputs...) for a function of tensors.
template <class F, class... Inputs>
requires(sizeof...(Inputs) > 0 && (std::is_convertible_v<const Inputs&, Tensor> && ...)) Tensor
    checkpoint(F&& fn, const Inputs&... inputs) {
  // fn is copied into the segment's node: backward calls it after this call has returned.
  return checkpoint(
      [fn = std::decay_t<F>(std::forward<F>(fn))](const std::vector<Tensor>& xs) {
        return [&]<size_t... I>(std::index_sequence<I...>) { return fn(xs[I]...); }
        (std::index_sequence_for<Inputs...>{});
      },
      std::vector<Tensor>{inputs...});
}

}  // namespace hg::utils
