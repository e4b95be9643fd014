// Tensor's autograd methods (declared in core/tensor.h).
#include "halfgrad/autograd/engine.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/format.h"

namespace hg {

bool Tensor::requires_grad() const {
  const autograd::AutogradMeta* m = autograd::meta_or_null(*this);
  return m != nullptr && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  HG_CHECK(!requires_grad || is_floating_point(),
           "requires_grad_: only floating tensors can require gradients, got a {} tensor", dtype());
  autograd::AutogradMeta& m = autograd::meta(*this);
  HG_CHECK(m.grad_fn == nullptr || requires_grad,
           "requires_grad_: only leaves can stop requiring grad; this tensor was made by {} (use "
           "detach() instead)",
           m.grad_fn ? m.grad_fn->name() : "");
  m.requires_grad = requires_grad;
  return *this;
}

const Tensor& Tensor::grad() const {
  static const Tensor undefined;
  const autograd::AutogradMeta* m = autograd::meta_or_null(*this);
  return m ? m->grad : undefined;
}

Tensor& Tensor::mutable_grad() const { return autograd::meta(*this).grad; }

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const autograd::AutogradMeta* m = autograd::meta_or_null(*this);
  return m ? m->grad_fn : nullptr;
}

bool Tensor::is_leaf() const { return grad_fn() == nullptr; }

uint32_t Tensor::output_nr() const {
  const autograd::AutogradMeta* m = autograd::meta_or_null(*this);
  return m ? m->output_nr : 0;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward(*this, gradient, retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  const TensorImpl& self = *impl();
  return Tensor(make_pooled<TensorImpl>(self.storage(), self.dtype(), self.sizes(), self.strides(),
                                        self.storage_offset()));
}

Tensor& Tensor::detach_() {
  if (autograd::AutogradMeta* m = autograd::meta_or_null(*this)) {
    m->grad_fn = nullptr;
    m->requires_grad = false;
    m->output_nr = 0;
  }
  return *this;
}

void Tensor::retain_grad() const {
  HG_CHECK(requires_grad(), "retain_grad: the tensor does not require grad");
  autograd::AutogradMeta& m = autograd::meta(*this);
  if (m.grad_fn == nullptr || m.retains_grad) return;  // leaves keep grad() anyway
  m.retains_grad = true;
  // The hook holds the meta weakly: the tensor owns the node that owns the hook.
  std::weak_ptr<autograd::AutogradMeta> weak = impl()->autograd_meta;
  m.grad_fn->pre_hooks.push_back({m.output_nr, [weak](const Tensor& gradient) {
                                    if (auto held = weak.lock()) {
                                      held->grad = held->grad.defined()
                                                       ? autograd::add_gradients(
                                                             held->grad, gradient.detach())
                                                       : gradient.detach().clone();
                                    }
                                    return Tensor();
                                  }});
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  HG_CHECK(requires_grad(),
           "register_hook: the tensor does not require grad, so it will never "
           "have a gradient to hook");
  autograd::AutogradMeta& m = autograd::meta(*this);
  if (m.grad_fn) {
    m.grad_fn->pre_hooks.push_back({m.output_nr, std::move(hook)});
  } else {
    m.leaf_hooks.push_back(std::move(hook));
  }
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  HG_CHECK(requires_grad(),
           "register_post_accumulate_grad_hook: the tensor does not require grad, so it will "
           "never have a gradient to hook");
  HG_CHECK(is_leaf(),
           "register_post_accumulate_grad_hook: expected a leaf tensor (gradients accumulate "
           "only into leaves), got the output of {}",
           grad_fn()->name());
  autograd::meta(*this).post_accumulate_hooks.push_back(std::move(hook));
}

}  // namespace hg
