#include "halfgrad/optim/sgd.h"

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/parallel.h"
#include "halfgrad/optim/fused.h"

namespace hg::optim {
namespace {

std::map<std::string, double> sgd_defaults(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

struct SGDStep {
  double lr, momentum, dampening, weight_decay, inv_scale;
  bool nesterov, maximize, first;
};

// A group's options, each looked up once (the step runs every iteration), checked.
SGDStep sgd_step_of(const std::map<std::string, double>& o, double inv_scale) {
  const SGDStep s{o.at("lr"), o.at("momentum"),      o.at("dampening"),     o.at("weight_decay"),
                  inv_scale,  o.at("nesterov") != 0, o.at("maximize") != 0, false};
  HG_CHECK(s.lr >= 0, "SGD: expected lr >= 0, got {}", s.lr);
  HG_CHECK(s.momentum >= 0, "SGD: expected momentum >= 0, got {}", s.momentum);
  HG_CHECK(s.weight_decay >= 0, "SGD: expected weight_decay >= 0, got {}", s.weight_decay);
  HG_CHECK(!s.nesterov || (s.momentum > 0 && s.dampening == 0),
           "SGD: Nesterov momentum expects momentum > 0 and dampening 0, got momentum {} and "
           "dampening {}",
           s.momentum, s.dampening);
  return s;
}

// T: parameter/gradient/buffer storage type.
template <class T>
void sgd_pass(T* param, const T* grad, T* buffer, int64_t n, const SGDStep& s) {
  using C = detail::compute_t<T>;
  const C lr = C(s.lr), momentum = C(s.momentum), damp = C(1 - s.dampening);
  const C weight_decay = C(s.weight_decay), inv_scale = C(s.inv_scale);
  const bool scaled = s.inv_scale != 1.0;
  if (buffer == nullptr && !s.maximize && weight_decay == 0) {
    // Plain SGD, the general loop's arithmetic without its per-element branches (so it
    // vectorizes): p - lr * g, g unscaled first when scaled.
    if (scaled) {
      parallel_for(n, n, [&](int64_t i) {
        const C g = detail::load<C>(grad, i) * inv_scale;
        detail::store(param, i, detail::load<C>(param, i) - lr * g);
      });
    } else {
      parallel_for(n, n, [&](int64_t i) {
        detail::store(param, i, detail::load<C>(param, i) - lr * detail::load<C>(grad, i));
      });
    }
    return;
  }
  parallel_for(n, n, [&](int64_t i) {
    const C p = detail::load<C>(param, i);
    C g = detail::load<C>(grad, i);
    if (scaled) g *= inv_scale;
    if (s.maximize) g = -g;
    if (weight_decay != 0) g += weight_decay * p;
    if (buffer != nullptr) {
      C b = s.first ? g : momentum * detail::load<C>(buffer, i) + damp * g;
      detail::store(buffer, i, b);
      b = detail::load<C>(buffer, i);  // torch uses the stored (rounded) buffer
      g = s.nesterov ? g + momentum * b : b;
    }
    detail::store(param, i, p - lr * g);
  });
}

}  // namespace

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : Optimizer(std::move(groups), sgd_defaults(options)) {
  sgd_step_of(defaults_, 1.0);
  for (const ParamGroup& group : groups_) sgd_step_of(group.options, 1.0);
}

std::vector<std::string> SGD::state_buffer_names(const ParamGroup& /*group*/) const {
  return {"momentum_buffer"};
}

void SGD::step_scaled(const Tensor& grad_scale, const Tensor& found_inf) {
  const double scale = read_grad_scale(grad_scale);
  if (read_found_inf(found_inf)) return;
  HG_CHECK(scale != 0, "SGD: expected a nonzero grad_scale, got 0");
  NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    SGDStep s = sgd_step_of(group.options, 1.0 / scale);
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& param = group.params[i];
      if (!param.grad().defined()) continue;
      const Tensor grad = checked_grad("SGD", param);
      ParamState& state = mutable_state(g, i);
      Tensor buffer;
      if (s.momentum != 0) {
        auto found = state.buffers.find("momentum_buffer");
        s.first = found == state.buffers.end();
        if (s.first) {
          buffer = empty(param.sizes(), param.options());
          state.buffers["momentum_buffer"] = buffer;
        } else {
          buffer = found->second;
        }
      }
      visit_floating_dtype("SGD", param.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        sgd_pass<T>(param.data_ptr<T>(), grad.data_ptr<T>(),
                    buffer.defined() ? buffer.data_ptr<T>() : nullptr, param.numel(), s);
      });
      param.bump_version();
      if (buffer.defined()) buffer.bump_version();
    }
  }
}

}  // namespace hg::optim
