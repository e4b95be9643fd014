// Manual master-parameter management (apex.fp16_utils' prep_param_lists,
// model_grads_to_master_grads, master_params_to_model_params, network_to_half,
// convert_network):
//
//   auto net = amp::network_to_half(model);  // norm layers stay float32; takes float32 input
//   auto [model_params, master_params] = amp::prep_param_lists(*net);
//   optim::SGD opt(master_params, {.lr = 0.1});
//   (loss.to(kFloat32) * scale).backward();
//   amp::model_grads_to_master_grads(model_params, master_params);
//   for (Tensor& m : master_params) m.mutable_grad().div_(scale);
//   opt.step();
//   amp::master_params_to_model_params(model_params, master_params);  // fp32 -> fp16, RNE
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "halfgrad/core/tensor.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/nn/modules.h"

namespace hg::amp {

// (model_params, master_params): the model's parameters that require grad, and float32
// copies of them that require grad. flat_master: master_params holds one flat float32 tensor
// (every model parameter in order) with a zero gradient; the model's parameters must then
// share one dtype.
std::pair<std::vector<Tensor>, std::vector<Tensor>> prep_param_lists(nn::Module& model,
                                                                     bool flat_master = false);

// master.grad = model.grad converted to float32 (undefined where the model grad is). With
// flat_master every model parameter needs a gradient; they are copied, flattened, into the
// flat master's gradient.
void model_grads_to_master_grads(const std::vector<Tensor>& model_params,
                                 const std::vector<Tensor>& master_params,
                                 bool flat_master = false);

// model.data = master.data, converted to the model's dtype (round to nearest even).
void master_params_to_model_params(const std::vector<Tensor>& model_params,
                                   const std::vector<Tensor>& master_params,
                                   bool flat_master = false);

// Converts the model to float16 or bfloat16 in place, then returns its normalization layers
// (BatchNorm1d, BatchNorm2d, LayerNorm, GroupNorm) to float32, as apex's convert_network
// (BN_convert_float). Parameter identity is kept (nn::set_data). Returns the model.
nn::Module& convert_network(nn::Module& model, DType dtype);

// apex's tofp16: casts a floating input to dtype (other inputs pass as they are).
class InputCast : public nn::Module {
 public:
  explicit InputCast(DType dtype);
  std::string name() const override { return "InputCast"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;

  DType dtype;
};

// apex's network_to_half: convert_network(*model, float16), then Sequential(InputCast(float16),
// model), so that a float32 input works (the result's keys are the model's under "1.").
// network_to_bfloat16 does the same in bfloat16.
std::shared_ptr<nn::Sequential> network_to_half(std::shared_ptr<nn::Module> model);
std::shared_ptr<nn::Sequential> network_to_bfloat16(std::shared_ptr<nn::Module> model);

}  // namespace hg::amp
