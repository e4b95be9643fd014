// nn::Module (module.h): parameters, buffers and children by name, hooks, train/eval,
// to(device/dtype), state dicts.
#include "halfgrad/nn/module.h"

#include <algorithm>
#include <set>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/format.h"

namespace hg::nn {

// NOTE [Module.to keeps parameter identity]
//
// PyTorch's module.to(dtype) keeps every Parameter object and gives it new data
// (param.data = param.data.to(dtype)), so an optimizer that already holds the parameters keeps
// updating the right tensors. halfgrad does the same through set_data: the TensorImpl behind
// the handle is overwritten with one that describes the converted storage (new storage, dtype,
// sizes, strides), and its autograd metadata (requires_grad, grad, hooks) is put back. Every
// handle to the parameter (the module's member, the registry, an optimizer's param group)
// sees the new data. The gradient, when there is one, is converted the same way, as PyTorch's
// _apply does.
//
// What this does not do: a graph recorded before the conversion still refers to the old
// storage through its saved tensors, and views made earlier of a parameter keep the old
// storage. Convert between training steps, never between forward and backward.
void set_data(const Tensor& tensor, const Tensor& data) {
  HG_CHECK(tensor.defined() && data.defined(),
           "set_data: expected two defined tensors, got an undefined one");
  HG_CHECK(tensor.sizes() == data.sizes(), "set_data: expected data of shape {}, got shape {}",
           tensor.sizes(), data.sizes());
  TensorImpl* impl = tensor.impl();
  auto autograd_meta = impl->autograd_meta;
  // Its kept AccumulateGrad knows the old dtype (NOTE [Kept AccumulateGrad]).
  if (autograd_meta) autograd_meta->grad_accumulator.reset();
  const TensorImpl& source = *data.impl();
  *impl = TensorImpl(source.storage(), source.dtype(), source.sizes(), source.strides(),
                     source.storage_offset());
  impl->autograd_meta = std::move(autograd_meta);
}

void RemovableHandle::remove() {
  if (auto table = table_.lock()) {
    table->pre_hooks.erase(id_);
    table->hooks.erase(id_);
  }
  table_.reset();
}

Module::Module(const Module& other)
    : std::enable_shared_from_this<Module>(other),
      training_(other.training_),
      parameters_(other.parameters_),
      buffers_(other.buffers_),
      children_(other.children_),
      hooks_(std::make_shared<detail::HookTable>(*other.hooks_)) {}

Tensor Module::forward(const Tensor&) {
  HG_ERROR("{}: expected a module with forward(Tensor), got one that does not define it", name());
}

// ---- calls ----------------------------------------------------------------------------------

namespace {
thread_local std::vector<const Module*> forward_stack_;
}  // namespace

std::span<const Module* const> forward_stack() { return forward_stack_; }

namespace detail {
ForwardScope::ForwardScope(const Module* module) { forward_stack_.push_back(module); }
ForwardScope::~ForwardScope() { forward_stack_.pop_back(); }

std::string forward_argument_name(const Module& module, size_t index) {
  return fmt::format("{}.forward argument {}", module.name(), index);
}

void throw_forward_arity(const Module& module, const char* bound, size_t count, const Args& args) {
  HG_ERROR("{}.forward: expected {} {} argument{}, got {} {}", module.name(), bound, count,
           count == 1 ? "" : "s", args.size(), describe(args));
}
}  // namespace detail

Tensor Module::operator()(const Tensor& input) {
  if (!has_forward_hooks()) {
    detail::ForwardScope scope(this);
    return forward(input);
  }
  const std::string what = name() + " output";
  return call(Args{input}).tensor(what.c_str());
}

Value Module::call(Args args) {
  if (!has_forward_hooks()) {  // every Sequential child without hooks: no map copies
    detail::ForwardScope scope(this);
    return forward_args(args);
  }
  // Copies: a hook may remove itself (or add others) while running.
  const auto pre_hooks = hooks_->pre_hooks;
  for (const auto& [id, hook] : pre_hooks) {
    if (auto replaced = hook(*this, args)) args = std::move(*replaced);
  }
  Value output;
  {
    detail::ForwardScope scope(this);
    output = forward_args(args);
  }
  const auto hooks = hooks_->hooks;
  for (const auto& [id, hook] : hooks) {
    if (auto replaced = hook(*this, args, output)) output = std::move(*replaced);
  }
  return output;
}

Value Module::forward_args(const Args& args) {
  if (args.size() != 1 || !args[0].is_tensor()) {
    HG_ERROR("{}.forward: expected one Tensor, got {}", name(), describe(args));
  }
  return forward(args[0].tensor());
}

RemovableHandle Module::register_forward_pre_hook(ForwardPreHook hook) {
  const int64_t id = hooks_->next_id++;
  hooks_->pre_hooks.emplace(id, std::move(hook));
  return RemovableHandle(hooks_, id);
}

RemovableHandle Module::register_forward_hook(ForwardHook hook) {
  const int64_t id = hooks_->next_id++;
  hooks_->hooks.emplace(id, std::move(hook));
  return RemovableHandle(hooks_, id);
}

namespace {
const Tensor& sole_tensor(const Module& module, const Args& args, const char* hook) {
  HG_CHECK(args.size() == 1 && args[0].is_tensor(),
           "{}: a forward {} that takes one Tensor is registered, but the module was called "
           "with {}; register one that takes nn::Args",
           module.name(), hook, describe(args));
  return args[0].tensor();
}
}  // namespace

RemovableHandle Module::register_forward_pre_hook(TensorForwardPreHook hook) {
  return register_forward_pre_hook(ForwardPreHook(
      [hook = std::move(hook)](Module& module, const Args& args) -> std::optional<Args> {
        auto replaced = hook(module, sole_tensor(module, args, "pre-hook"));
        if (!replaced) return std::nullopt;
        return Args{*replaced};
      }));
}

RemovableHandle Module::register_forward_hook(TensorForwardHook hook) {
  return register_forward_hook(
      ForwardHook([hook = std::move(hook)](Module& module, const Args& args,
                                           const Value& output) -> std::optional<Value> {
        const Tensor& input = sole_tensor(module, args, "hook");
        const std::string what = module.name() + " output";
        auto replaced = hook(module, input, output.tensor(what.c_str()));
        if (!replaced) return std::nullopt;
        return Value(*replaced);
      }));
}

// ---- registration ---------------------------------------------------------------------------

void Module::check_new_name(const std::string& name, const char* what) const {
  HG_CHECK(!name.empty(), "{}: register_{}: expected a non-empty name, got \"\"", this->name(),
           what);
  HG_CHECK(name.find('.') == std::string::npos,
           "{}: register_{}: expected a name without '.', got \"{}\"", this->name(), what, name);
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  HG_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_),
           "{}: register_{}: expected a new name, got \"{}\" which is already registered",
           this->name(), what, name);
}

Tensor& Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name, "parameter");
  HG_CHECK(tensor.defined(), "{}: register_parameter(\"{}\"): expected a defined tensor",
           this->name(), name);
  HG_CHECK(tensor.is_leaf(),
           "{}: register_parameter(\"{}\"): expected a leaf tensor, got one with a grad_fn "
           "(detach it first)",
           this->name(), name);
  if (requires_grad) tensor.requires_grad_(true);
  parameters_.emplace_back(name, std::move(tensor));
  return parameters_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name, "buffer");
  HG_CHECK(tensor.defined(), "{}: register_buffer(\"{}\"): expected a defined tensor", this->name(),
           name);
  buffers_.emplace_back(name, std::move(tensor));
  return buffers_.back().second;
}

void Module::register_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name, "module");
  HG_CHECK(module != nullptr, "{}: register_module(\"{}\"): expected a module, got nullptr",
           this->name(), name);
  children_.emplace_back(name, std::move(module));
}

void Module::set_child(const std::string& name, std::shared_ptr<Module> module) {
  for (auto& [key, child] : children_) {
    if (key == name) {
      HG_CHECK(module != nullptr, "{}: expected a module for \"{}\", got nullptr", this->name(),
               name);
      child = std::move(module);
      return;
    }
  }
  register_child(name, std::move(module));
}

Tensor& Module::set_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  for (auto& [key, parameter] : parameters_) {
    if (key == name) {
      HG_CHECK(tensor.defined() && tensor.is_leaf(),
               "{}: expected a defined leaf tensor for \"{}\"", this->name(), name);
      if (requires_grad) tensor.requires_grad_(true);
      parameter = std::move(tensor);
      return parameter;
    }
  }
  return register_parameter(name, std::move(tensor), requires_grad);
}

// ---- traversal ------------------------------------------------------------------------------

void Module::collect(const std::string& prefix, bool recurse, bool want_buffers,
                     std::vector<std::pair<std::string, Tensor>>& out,
                     std::vector<const TensorImpl*>& seen) const {
  for (const auto& [name, tensor] : want_buffers ? buffers_ : parameters_) {
    if (std::find(seen.begin(), seen.end(), tensor.impl()) != seen.end()) continue;
    seen.push_back(tensor.impl());
    out.emplace_back(prefix + name, tensor);
  }
  if (!recurse) return;
  for (const auto& [name, child] : children_) {
    child->collect(prefix + name + ".", true, want_buffers, out, seen);
  }
}

std::vector<std::pair<std::string, Tensor>> Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<const TensorImpl*> seen;
  collect("", recurse, false, out, seen);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<const TensorImpl*> seen;
  collect("", recurse, true, out, seen);
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters(recurse)) out.push_back(tensor);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_buffers(recurse)) out.push_back(tensor);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [name, child] : children_) out.push_back(child);
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_modules() {
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> out;
  out.emplace_back("", shared_from_this());
  for (const auto& [name, child] : children_) {
    for (auto& [sub, module] : child->named_modules()) {
      out.emplace_back(sub.empty() ? name : name + "." + sub, module);
    }
  }
  return out;
}

Module& Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, child] : children_) child->apply(fn);
  fn(*this);
  return *this;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

// ---- dtype and device -----------------------------------------------------------------------

void Module::convert_tensors(const std::function<Tensor(const Tensor&)>& convert,
                             bool floating_only) {
  std::vector<Tensor> targets;
  for (auto& [name, t] : named_parameters()) targets.push_back(t);
  for (auto& [name, t] : named_buffers()) targets.push_back(t);
  std::vector<std::pair<Tensor, Tensor>> swaps;  // (target, new data), grads included
  {
    NoGradGuard no_grad;
    for (const Tensor& t : targets) {
      if (floating_only && !t.is_floating_point()) continue;
      swaps.emplace_back(t, convert(t.detach()));
      if (t.grad().defined()) swaps.emplace_back(t.grad(), convert(t.grad().detach()));
    }
  }
  for (auto& [target, data] : swaps) {
    if (data.shares_storage(target)) continue;  // already of that dtype and device
    set_data(target, data);
  }
}

Module& Module::to(DType dtype) {
  HG_CHECK(is_floating_point(dtype), "{}.to: expected a floating dtype, got {}", name(),
           dtype_name(dtype));
  convert_tensors([dtype](const Tensor& t) { return t.to(dtype).contiguous(); },
                  /*floating_only=*/true);
  return *this;
}

Module& Module::to(Device device) {
  // Tensor::to raises for a device this build cannot reach; checked before anything moves.
  // Every tensor moves, integer buffers included.
  convert_tensors([device](const Tensor& t) { return t.to(device); }, /*floating_only=*/false);
  return *this;
}

// ---- state ----------------------------------------------------------------------------------

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [name, t] : named_parameters()) out.emplace(name, t.detach());
  for (auto& [name, t] : named_buffers()) out.emplace(name, t.detach());
  return out;
}

LoadStateDictResult Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::pair<std::string, Tensor>> own = named_parameters();
  for (auto& entry : named_buffers()) own.push_back(entry);

  LoadStateDictResult result;
  std::set<std::string> own_names;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (destination, source)
  for (const auto& [key, destination] : own) {
    own_names.insert(key);
    auto found = state.find(key);
    if (found == state.end()) {
      HG_CHECK(!strict, "{}.load_state_dict: expected key \"{}\" in the state dict, it is missing",
               name(), key);
      result.missing_keys.push_back(key);
      continue;
    }
    const Tensor& source = found->second;
    HG_CHECK(source.defined(),
             "{}.load_state_dict: key \"{}\": expected a tensor of shape {}, "
             "got an undefined tensor",
             name(), key, destination.sizes());
    HG_CHECK(source.sizes() == destination.sizes(),
             "{}.load_state_dict: key \"{}\": expected shape {}, got shape {}", name(), key,
             destination.sizes(), source.sizes());
    copies.emplace_back(destination, source);
  }
  for (const auto& [key, tensor] : state) {
    if (own_names.count(key)) continue;
    HG_CHECK(!strict,
             "{}.load_state_dict: unexpected key \"{}\" (expected only the module's "
             "{} parameter and buffer names)",
             name(), key, own_names.size());
    result.unexpected_keys.push_back(key);
  }
  NoGradGuard no_grad;
  for (auto& [destination, source] : copies) {
    if (destination.shares_storage(source)) continue;  // its own state_dict: nothing to do
    destination.copy_(source);
  }
  return result;
}

// ---- printing -------------------------------------------------------------------------------

// torch's Module.__repr__: a one-line extra_repr without children stays inline; otherwise
// every extra_repr line and every child's (indented) block on a line of its own.
std::string Module::to_string() const {
  std::vector<std::string> lines;
  const std::string extra = extra_repr();
  size_t extra_lines = 0;
  for (size_t start = 0; !extra.empty() && start <= extra.size(); ++extra_lines) {
    const size_t end = std::min(extra.find('\n', start), extra.size());
    lines.push_back(extra.substr(start, end - start));
    start = end + 1;
  }
  for (const auto& [child_name, child] : children_) {
    std::string line = "(" + child_name + "): ";
    for (char c : child->to_string()) {
      line += c;
      if (c == '\n') line += "  ";
    }
    lines.push_back(std::move(line));
  }
  std::string out = name() + "(";
  if (extra_lines == 1 && children_.empty()) {
    out += lines[0];
  } else if (!lines.empty()) {
    for (const std::string& line : lines) out += "\n  " + line;
    out += "\n";
  }
  return out + ")";
}

}  // namespace hg::nn
