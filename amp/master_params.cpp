// Master-parameter utilities of the apex recipe (master_params.h): prep_param_lists, the
// copies between model and master gradients and parameters, convert_network, network_to_half /
// _bfloat16.
#include "halfgrad/amp/master_params.h"

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/nn/modules.h"
#include "halfgrad/ops/index.h"
#include "halfgrad/ops/ops.h"

namespace hg::amp {

namespace {

Tensor flatten_all(const std::vector<Tensor>& tensors) {
  std::vector<Tensor> flat;
  flat.reserve(tensors.size());
  for (const Tensor& t : tensors) flat.push_back(t.detach().reshape({-1}).to(kFloat32));
  return cat(std::span<const Tensor>(flat), 0).contiguous();
}

int64_t total_numel(const std::vector<Tensor>& tensors) {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.numel();
  return n;
}

void check_flat(const char* fn, const std::vector<Tensor>& model_params,
                const std::vector<Tensor>& master_params) {
  HG_CHECK(master_params.size() == 1,
           "{}: expected one flat master tensor with flat_master, got {} tensors", fn,
           master_params.size());
  HG_CHECK(master_params[0].numel() == total_numel(model_params),
           "{}: expected a flat master of {} elements (the model parameters'), got {}", fn,
           total_numel(model_params), master_params[0].numel());
}

void check_pairs(const char* fn, const std::vector<Tensor>& model_params,
                 const std::vector<Tensor>& master_params) {
  HG_CHECK(model_params.size() == master_params.size(),
           "{}: expected as many master params as model params ({}), got {}", fn,
           model_params.size(), master_params.size());
  for (size_t i = 0; i < model_params.size(); ++i) {
    HG_CHECK(model_params[i].sizes() == master_params[i].sizes(),
             "{}: expected master param {} of shape {}, got shape {}", fn, i,
             model_params[i].sizes(), master_params[i].sizes());
  }
}

std::shared_ptr<nn::Sequential> network_to(std::shared_ptr<nn::Module> model, DType dtype) {
  HG_CHECK(model != nullptr, "network_to_{}: expected a model, got a null pointer",
           dtype == kFloat16 ? "half" : "bfloat16");
  convert_network(*model, dtype);
  auto wrapped = std::make_shared<nn::Sequential>();
  wrapped->push_back(std::make_shared<InputCast>(dtype));
  wrapped->push_back(std::move(model));
  return wrapped;
}

}  // namespace

InputCast::InputCast(DType dtype) : dtype(dtype) {
  HG_CHECK(is_floating_point(dtype), "InputCast: expected a floating dtype, got {}", dtype);
}

std::string InputCast::extra_repr() const { return fmt::format("dtype={}", dtype); }

Tensor InputCast::forward(const Tensor& x) { return x.is_floating_point() ? x.to(dtype) : x; }

nn::Module& convert_network(nn::Module& model, DType dtype) {
  HG_CHECK(dtype == kFloat16 || dtype == kBFloat16,
           "convert_network: expected float16 or bfloat16, got {}", dtype);
  model.to(dtype);
  model.apply([](nn::Module& m) {
    // Every batch norm (1d and 2d share BatchNormBase), as apex's _BatchNorm test.
    if (dynamic_cast<nn::BatchNormBase*>(&m) != nullptr ||
        dynamic_cast<nn::LayerNorm*>(&m) != nullptr ||
        dynamic_cast<nn::GroupNorm*>(&m) != nullptr) {
      m.to(kFloat32);
    }
  });
  return model;
}

std::pair<std::vector<Tensor>, std::vector<Tensor>> prep_param_lists(nn::Module& model,
                                                                     bool flat_master) {
  std::vector<Tensor> model_params;
  for (const Tensor& p : model.parameters()) {
    if (p.requires_grad()) model_params.push_back(p);
  }
  NoGradGuard no_grad;
  std::vector<Tensor> master_params;
  if (flat_master) {
    HG_CHECK(!model_params.empty(),
             "prep_param_lists: expected a model with parameters for flat_master, got none");
    for (const Tensor& p : model_params) {
      HG_CHECK(p.dtype() == model_params[0].dtype(),
               "prep_param_lists: flat_master expected every model parameter to be {}, got {} "
               "(use flat_master=false for mixed dtypes)",
               dtype_name(model_params[0].dtype()), dtype_name(p.dtype()));
    }
    Tensor flat = flatten_all(model_params);
    flat.requires_grad_();
    flat.mutable_grad() = zeros_like(flat);
    master_params.push_back(flat);
  } else {
    for (const Tensor& p : model_params) {
      Tensor master = p.detach().to(kFloat32).clone().contiguous();
      master.requires_grad_();
      master_params.push_back(master);
    }
  }
  return {model_params, master_params};
}

void model_grads_to_master_grads(const std::vector<Tensor>& model_params,
                                 const std::vector<Tensor>& master_params, bool flat_master) {
  NoGradGuard no_grad;
  if (flat_master) {
    check_flat("model_grads_to_master_grads", model_params, master_params);
    std::vector<Tensor> grads;
    for (size_t i = 0; i < model_params.size(); ++i) {
      HG_CHECK(model_params[i].grad().defined(),
               "model_grads_to_master_grads: flat_master expected every model param to have a "
               "gradient, param {} has none",
               i);
      grads.push_back(model_params[i].grad());
    }
    Tensor flat = flatten_all(grads);
    Tensor& mg = master_params[0].mutable_grad();
    if (!mg.defined()) mg = zeros_like(master_params[0]);
    mg.copy_(flat.view(mg.sizes()));
    return;
  }
  check_pairs("model_grads_to_master_grads", model_params, master_params);
  for (size_t i = 0; i < model_params.size(); ++i) {
    const Tensor& g = model_params[i].grad();
    Tensor& mg = master_params[i].mutable_grad();
    if (!g.defined()) {
      mg = Tensor();
      continue;
    }
    if (!mg.defined()) mg = zeros_like(master_params[i]);
    mg.copy_(g);
  }
}

void master_params_to_model_params(const std::vector<Tensor>& model_params,
                                   const std::vector<Tensor>& master_params, bool flat_master) {
  NoGradGuard no_grad;
  if (flat_master) {
    check_flat("master_params_to_model_params", model_params, master_params);
    Tensor flat = master_params[0].detach().reshape({-1});
    int64_t offset = 0;
    for (const Tensor& p : model_params) {
      p.detach().copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
    }
    return;
  }
  check_pairs("master_params_to_model_params", model_params, master_params);
  for (size_t i = 0; i < model_params.size(); ++i) {
    model_params[i].detach().copy_(master_params[i].detach());
  }
}

std::shared_ptr<nn::Sequential> network_to_half(std::shared_ptr<nn::Module> model) {
  return network_to(std::move(model), kFloat16);
}
std::shared_ptr<nn::Sequential> network_to_bfloat16(std::shared_ptr<nn::Module> model) {
  return network_to(std::move(model), kBFloat16);
}

}  // namespace hg::amp
