// SGD (sgd.h): momentum, dampening, weight decay, Nesterov and maximize: options and their check,
// the momentum buffers, and the step through the multi_tensor family's fused_sgd_
// (kernel/multi_tensor.h) on the parameters' device.
#include "halfgrad/optim/sgd.h"

#include <cmath>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/optim/fused_optimizer_impl.h"

namespace hg::optim {

template class FusedOptimizer<kernel::SGDTensors, kernel::SGDArgs>;

namespace {

std::map<std::string, double> sgd_defaults(const SGDOptions& o) {
  return {{"lr", o.lr},
          {"momentum", o.momentum},
          {"dampening", o.dampening},
          {"weight_decay", o.weight_decay},
          {"nesterov", o.nesterov ? 1.0 : 0.0},
          {"maximize", o.maximize ? 1.0 : 0.0}};
}

}  // namespace

// NOTE [One check per option] in optimizer.h: the table's ranges (torch.optim.SGD's checks, the
// booleans, and a finite dampening: torch does not check it, and a NaN one would make every
// update NaN), then Nesterov's condition on the other two.
void SGD::check_options(const std::map<std::string, double>& o) const {
  Optimizer::check_options(o);
  HG_CHECK(o.at("nesterov") == 0 || (o.at("momentum") > 0 && o.at("dampening") == 0),
           "SGD: Nesterov momentum expects momentum > 0 and dampening 0, got momentum {} and "
           "dampening {}",
           o.at("momentum"), o.at("dampening"));
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{std::move(params), {}}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions options)
    : FusedOptimizer(std::move(groups), sgd_defaults(options), "SGD",
                     &kernel::MultiTensorKernels::fused_sgd_, options.bf16_params,
                     options.generator) {
  check_constructed();
}

DType SGD::state_dtype(const Tensor& param) const {
  return bf16_params() ? kFloat32 : param.dtype();
}

std::vector<std::string> SGD::state_buffer_names(const ParamGroup& /*group*/) const {
  return {"momentum_buffer"};
}

kernel::SGDArgs SGD::step_args(const ParamGroup& group) const {
  const std::map<std::string, double>& o = group.options;
  return {o.at("lr"),           o.at("momentum"),      o.at("dampening"),
          o.at("weight_decay"), o.at("nesterov") != 0, o.at("maximize") != 0};
}

void SGD::add_state(kernel::SGDTensors& tensors, const kernel::SGDArgs& args, const Tensor& param,
                    ParamState& state) {
  if (args.momentum == 0) return;
  // The buffer's step count says whether it holds a value yet (0: torch's first step sets it to
  // the gradient); on CUDA only the device knows, as a first step may be skipped there (NOTE
  // [Step counts on the device] in optimizer.h).
  auto found = state.buffers.find("momentum_buffer");
  const bool created = found == state.buffers.end();
  if (created) {
    // Zeros rather than garbage until the first step taken writes it.
    found =
        state.buffers
            .emplace("momentum_buffer",
                     zeros(param.sizes(), {.dtype = state_dtype(param), .device = param.device()}))
            .first;
  }
  const double count = created ? 0.0 : 1.0;  // a loaded buffer holds a value
  if (param.is_cuda() && (created || !state.device_step.defined())) {
    state.device_step = full({1}, count, {.dtype = kFloat32, .device = param.device()});
  }
  tensors.momentum_buffers.push_back(found->second);
  tensors.steps.push_back(param.is_cuda() ? state.device_step : full({1}, count, kInt64));
}

}  // namespace hg::optim
