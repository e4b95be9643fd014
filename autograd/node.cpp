// The graph's pieces (autograd/node.h): nodes, their teardown, gradient accumulation into
// leaves, and saved tensors with their version checks.
#include "halfgrad/autograd/node.h"

#include <atomic>

#include "halfgrad/autograd/engine.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/format.h"

namespace hg::autograd {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

// NOTE [Graph teardown] Freeing the last tensor of a long graph would free node after node
// recursively (each node owns its edges' nodes) and overflow the stack for deep graphs. So a
// dying node takes over the edges of every node it holds the last reference to, and frees
// them in a loop. An edge to a node that something else also holds (an output's meta, another
// node, a leaf's meta for its AccumulateGrad) is only released, without the list. Saved
// tensors are members of the derived node and are gone by the time this runs, so they add no
// recursion either.
Node::~Node() {
  // (The list is pooled, and used only when a chain of last references is walked.)
  std::vector<std::shared_ptr<Node>, PoolAllocator<std::shared_ptr<Node>>> pending;
  const auto take_last_references = [&pending](EdgeList& edges) {
    for (Edge& edge : edges) {
      if (edge.node && edge.node.use_count() == 1) pending.push_back(std::move(edge.node));
    }
  };
  take_last_references(next_edges);
  while (!pending.empty()) {
    std::shared_ptr<Node> node = std::move(pending.back());
    pending.pop_back();
    take_last_references(node->next_edges);
  }  // each node is freed here with no last reference left to follow
}

// ---- AccumulateGrad -----------------------------------------------------------------------------

// NOTE [Kept AccumulateGrad] A leaf's AccumulateGrad is made the first time an op records
// the leaf and is kept by the leaf's meta, so a training step does not make and free one per
// parameter (with its output list, its sequence number and its teardown). It holds the leaf
// weakly, so the leaf -> meta -> node chain is no cycle: a gradient that arrives after the
// leaf is gone has nowhere to go and is dropped (the same as adding it into a tensor no one
// can reach). nn::set_data, which may change a leaf's dtype in place, drops the kept node, so
// its output metadata is never stale.
AccumulateGrad::AccumulateGrad(const Tensor& leaf) : leaf_(leaf.impl_ptr()) {
  outputs.push_back({leaf.sizes(), leaf.dtype(), leaf.device()});
}

GradList AccumulateGrad::apply(GradList&& grad_outputs) {
  Tensor gradient = std::move(grad_outputs.at(0));
  const std::shared_ptr<TensorImpl> held = leaf_.lock();
  if (!held) return {};
  const Tensor leaf(held);
  AutogradMeta& m = meta(leaf);
  for (const Hook& hook : m.leaf_hooks) {
    Tensor replaced = hook(gradient);
    if (replaced.defined()) gradient = std::move(replaced);
  }
  HG_CHECK(gradient.sizes() == leaf.sizes() && gradient.dtype() == leaf.dtype(),
           "autograd: the gradient of a leaf of shape {} and dtype {} has shape {} and dtype {}",
           leaf.sizes(), leaf.dtype(), gradient.sizes(), gradient.dtype());
  // NOTE [Gradient accumulation] Gradients add into grad(), never overwrite it. The first
  // gradient is taken as it is when no one else holds it (no copy), and copied otherwise,
  // so grad() never aliases another tensor. With create_graph the sum is itself recorded
  // (higher-order gradients), so it is done out of place.
  if (is_grad_enabled()) {
    m.grad = m.grad.defined() ? add_gradients(m.grad, gradient) : gradient;
  } else if (!m.grad.defined()) {
    const bool sole_owner = gradient.impl_ptr().use_count() == 1 &&
                            gradient.impl()->storage().use_count() == 1 &&
                            gradient.is_contiguous() && !gradient.is_view();
    if (!sole_owner) {
      m.grad = gradient.detach().clone();
    } else if (meta_or_null(gradient) == nullptr) {
      m.grad = std::move(gradient);  // no history to cut: the tensor itself, no new handle
    } else {
      m.grad = gradient.detach();
    }
  } else {
    m.grad.add_(gradient);
  }
  for (const PostAccumulateGradHook& hook : m.post_accumulate_hooks) hook(leaf);
  return {};
}

// ---- SavedTensor --------------------------------------------------------------------------------

SavedTensor::SavedTensor(const Tensor& tensor, bool is_output) : is_output_(is_output) {
  if (!tensor.defined()) return;
  version_ = tensor.version();
  if (is_output) {
    data_ = tensor.detach();
    if (const AutogradMeta* m = meta_or_null(tensor)) {
      grad_fn_ = m->grad_fn;
      output_nr_ = m->output_nr;
      requires_grad_ = m->requires_grad;
    }
  } else {
    data_ = tensor;
  }
}

Tensor SavedTensor::unpack(std::string_view saved_by) const {
  Tensor data = unpack_data(saved_by);
  if (!is_output_ || !data.defined()) return data;
  // Give an output back its place in the graph (for create_graph), if the node still lives.
  Tensor restored = data.detach();
  if (std::shared_ptr<Node> node = grad_fn_.lock()) {
    set_history(restored, node, output_nr_);
  } else if (requires_grad_) {
    meta(restored).requires_grad = true;
  }
  return restored;
}

Tensor SavedTensor::unpack_data(std::string_view saved_by) const {
  HG_CHECK(!released_,
           "autograd: trying to run backward through {} a second time, but its saved tensors "
           "were freed after the first backward; pass retain_graph=true to the first backward "
           "if you need to run it again",
           saved_by);
  if (!data_.defined()) return Tensor();
  HG_CHECK(data_.version() == version_,
           "autograd: a {} tensor of shape {} needed by {} was modified by an in-place "
           "operation: it is at version {}, expected version {}; clone it before modifying it",
           data_.dtype(), data_.sizes(), saved_by, data_.version(), version_);
  return data_;
}

// ---- tensor <-> graph ---------------------------------------------------------------------------

AutogradMeta& meta(const Tensor& t) {
  TensorImpl* impl = t.impl();
  HG_CHECK(impl != nullptr, "autograd: expected a defined tensor, got an undefined one");
  if (!impl->autograd_meta) impl->autograd_meta = make_pooled<AutogradMeta>();
  return *impl->autograd_meta;
}

AutogradMeta* meta_or_null(const Tensor& t) {
  return t.defined() ? t.impl()->autograd_meta.get() : nullptr;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = meta_or_null(t);
  if (m == nullptr) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (!m->requires_grad) return {};
  if (!m->grad_accumulator) m->grad_accumulator = make_pooled<AccumulateGrad>(t);
  return {m->grad_accumulator, 0};
}

void set_history(const Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  AutogradMeta& m = meta(t);
  m.grad_fn = node;
  m.output_nr = output_nr;
  m.requires_grad = true;
}

}  // namespace hg::autograd
