// amp::OverflowWatch (amp/overflow_watch.h): finds the first op whose output overflowed.
#include "halfgrad/amp/overflow_watch.h"

#include <algorithm>
#include <bit>

#include "halfgrad/autograd/engine.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/half.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/ops/kernel_lookup.h"

namespace hg::amp {

namespace detail {
thread_local constinit OverflowWatch* active_watch = nullptr;
}  // namespace detail

using detail::active_watch;

namespace {

// float16's largest finite value.
constexpr double kFloat16Max = 65504.0;

TensorRange range_of(const Tensor& t) {
  // Reduced where t lives: for a CUDA tensor the host reads two numbers, not the tensor. Float64
  // values as they are, the other dtypes through float32.
  const std::vector<int64_t> values =
      kernel_for::multi_tensor(t).value_range(t).to_vector<int64_t>();
  TensorRange range{.dtype = t.dtype(), .shape = t.sizes()};
  range.max_abs = std::bit_cast<double>(values[0]);
  range.non_finite = values[1];
  range.all_finite = range.non_finite == 0;
  return range;
}

std::string describe(const TensorRange& range) {
  if (!range.all_finite) {
    return fmt::format("{} {}: {} inf/NaN, max finite |x| = {:g}", dtype_name(range.dtype),
                       range.shape, range.non_finite, range.max_abs);
  }
  return fmt::format("{} {}: finite, max |x| = {:g}", dtype_name(range.dtype), range.shape,
                     range.max_abs);
}

std::string describe(const OverflowFinding& finding) {
  std::string where =
      finding.module_type.empty()
          ? std::string("outside any module")
          : fmt::format("in module \"{}\" ({})", finding.module, finding.module_type);
  std::string what(op_name(finding.op));
  if (finding.backward && finding.node.empty()) {
    what += " between backward nodes";
  } else if (finding.backward) {
    what = fmt::format("{} (the backward of {}{})", finding.node, op_name(finding.op),
                       finding.inner_op ? fmt::format(", in its {}", op_name(*finding.inner_op))
                                        : std::string(", in its kernel"));
  }
  std::string out = fmt::format("{} {} (op #{}), output {}\n", what, where, finding.op_index,
                                describe(finding.output));
  const char* input = finding.backward && !finding.inner_op ? "gradient given" : "input";
  for (size_t i = 0; i < finding.inputs.size(); ++i) {
    out += fmt::format("  {} {}: {}\n", input, i, describe(finding.inputs[i]));
  }
  return out;
}

}  // namespace

OverflowWatch::OverflowWatch(nn::Module* model) : previous_(active_watch) {
  if (model) {
    for (auto& [path, module] : model->named_modules()) {
      const std::string name = path;
      nn::RemovableHandle pre = module->register_forward_pre_hook(
          [this, name](nn::Module& m, const nn::Args&) -> std::optional<nn::Args> {
            module_stack_.emplace_back(name, m.name());
            return std::nullopt;
          });
      nn::RemovableHandle post = module->register_forward_hook(
          [this](nn::Module&, const nn::Args&, const nn::Value&) -> std::optional<nn::Value> {
            if (!module_stack_.empty()) module_stack_.pop_back();
            return std::nullopt;
          });
      remove_hooks_.push_back([pre, post]() mutable {
        pre.remove();
        post.remove();
      });
    }
  }
  active_watch = this;
}

OverflowWatch::~OverflowWatch() {
  for (auto& remove : remove_hooks_) remove();
  active_watch = previous_;
}

void OverflowWatch::reset() {
  first_non_finite_.reset();
  first_beyond_float16_.reset();
  ops_checked_ = 0;
}

void OverflowWatch::on_node_begin(const autograd::Node& node) { running_nodes_.push_back(&node); }

void OverflowWatch::on_node_end(const autograd::Node& node) noexcept {
  if (!running_nodes_.empty() && running_nodes_.back() == &node) running_nodes_.pop_back();
}

const OverflowWatch::NodeOrigin* OverflowWatch::origin_of(const autograd::Node* node) const {
  const auto found = node_origins_.find(node);
  if (found == node_origins_.end() || found->second.node.expired()) return nullptr;
  return &found->second;
}

void OverflowWatch::on_op(const ops::OpCall& call) {
  if (checking_ || active_watch != this) return;
  const bool backward = autograd::is_backward_running();
  const autograd::Node* node =
      backward && !running_nodes_.empty() ? running_nodes_.back() : nullptr;
  const NodeOrigin* origin = node != nullptr ? origin_of(node) : nullptr;
  OverflowFinding context{};
  context.op = call.op;
  context.backward = backward;
  if (node != nullptr) {
    context.node = node->name();
    if (origin != nullptr) {
      context.op = origin->op;
      context.inner_op = call.op;
      context.module = origin->module;
      context.module_type = origin->module_type;
    } else {
      context.inner_op = call.op;
    }
  } else if (!backward && !module_stack_.empty()) {
    context.module = module_stack_.back().first;
    context.module_type = module_stack_.back().second;
  }
  const bool loss_scaling = ops::in_loss_scaling() || (origin != nullptr && origin->loss_scaling);
  if (!backward) {
    // Remember where each node comes from, for the backward pass (forgetting the nodes gone).
    if (node_origins_.size() >= 2 * origins_kept_ + 64) {
      std::erase_if(node_origins_, [](const auto& entry) { return entry.second.node.expired(); });
      origins_kept_ = node_origins_.size();
    }
    for (Tensor* output : call.outputs) {
      if (!output->defined()) continue;
      if (std::shared_ptr<autograd::Node> made = output->grad_fn()) {
        node_origins_[made.get()] = {.node = made,
                                     .op = call.op,
                                     .module = context.module,
                                     .module_type = context.module_type,
                                     .loss_scaling = loss_scaling};
      }
    }
  }
  if (!loss_scaling && !(first_non_finite_ && first_beyond_float16_)) {
    std::vector<const Tensor*> outputs(call.outputs.begin(), call.outputs.end());
    check(call.inputs, outputs, std::move(context));
  }
  ++ops_checked_;
}

void OverflowWatch::on_node(const ops::NodeCall& call) {
  if (checking_ || active_watch != this) return;
  const NodeOrigin* origin = origin_of(call.node);
  const bool loss_scaling = ops::in_loss_scaling() || (origin != nullptr && origin->loss_scaling);
  if (!loss_scaling && !(first_non_finite_ && first_beyond_float16_)) {
    OverflowFinding context{};
    context.op = call.op;
    context.backward = true;
    context.node = call.node->name();
    if (origin != nullptr) {
      context.module = origin->module;
      context.module_type = origin->module_type;
    }
    std::vector<const Tensor*> outputs;
    for (const Tensor& grad : call.grad_inputs) outputs.push_back(&grad);
    check(call.grad_outputs, outputs, std::move(context));
  }
  ++ops_checked_;
}

void OverflowWatch::check(std::span<const Tensor> inputs, std::span<const Tensor* const> outputs,
                          OverflowFinding context) {
  checking_ = true;
  struct Reset {
    bool& flag;
    ~Reset() { flag = false; }
  } reset_flag{checking_};
  NoGradGuard no_grad;

  std::optional<std::vector<TensorRange>> input_ranges;  // read once, when an output is flagged
  for (const Tensor* output : outputs) {
    if (!output->defined() || !output->is_floating_point() || output->numel() == 0) continue;
    const TensorRange range = range_of(*output);
    const bool non_finite = !range.all_finite && !first_non_finite_;
    const bool beyond = range.all_finite && range.max_abs > kFloat16Max && !first_beyond_float16_;
    if (!non_finite && !beyond) continue;
    if (!input_ranges) {
      input_ranges.emplace();
      for (const Tensor& input : inputs) {
        if (input.defined() && input.is_floating_point()) input_ranges->push_back(range_of(input));
      }
    }
    // An inf or a NaN that came in is passed on, not made here.
    const bool inputs_finite = std::all_of(input_ranges->begin(), input_ranges->end(),
                                           [](const TensorRange& r) { return r.all_finite; });
    if (non_finite && !inputs_finite) continue;
    OverflowFinding finding = context;
    finding.op_index = ops_checked_;
    finding.inputs = *input_ranges;
    finding.output = range;
    (non_finite ? first_non_finite_ : first_beyond_float16_) = std::move(finding);
  }
}

std::string OverflowWatch::report() const {
  std::string out = fmt::format("OverflowWatch: {} ops checked\n", ops_checked_);
  if (first_non_finite_) {
    out += "first non-finite output: " + describe(*first_non_finite_);
  } else {
    out += "no op produced an inf or a NaN\n";
  }
  if (first_beyond_float16_) {
    out += "first output beyond float16's range: " + describe(*first_beyond_float16_);
  }
  return out;
}

}  // namespace hg::amp
