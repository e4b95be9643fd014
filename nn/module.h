// nn::Module: the base of every layer, as torch.nn.Module / libtorch's torch::nn::Module.
//
//   struct Net : nn::Module {
//     std::shared_ptr<nn::Linear> fc;
//     Net() { fc = register_module("fc", std::make_shared<nn::Linear>(4, 2)); }
//     std::string name() const override { return "Net"; }
//     Tensor forward(const Tensor& x) override { return (*fc)(x); }
//   };
//   auto net = std::make_shared<Net>();
//   net->named_parameters();   // {"fc.weight", [2, 4]}, {"fc.bias", [2]}
//   net->to(kBFloat16);        // the same parameter tensors, now bfloat16
//
// Modules are held by shared_ptr. Parameters and buffers are Tensor handles: a module's
// member (`weight`) and its registry entry are the same tensor, so an optimizer built from
// parameters() keeps seeing them across to(dtype) (NOTE [Module.to keeps parameter identity]).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "halfgrad/core/tensor.h"

namespace hg::nn {

class Module;

// name -> tensor, as module.state_dict(). Keys are sorted (std::map), not in registration
// order as PyTorch's OrderedDict; named_parameters() keeps registration order.
using StateDict = std::map<std::string, Tensor>;

// What load_state_dict(strict = false) skipped (PyTorch's _IncompatibleKeys).
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// Runs before forward; may return a replacement input.
using ForwardPreHook = std::function<std::optional<Tensor>(Module& module, const Tensor& input)>;
// Runs after forward; may return a replacement output.
using ForwardHook =
    std::function<std::optional<Tensor>(Module& module, const Tensor& input, const Tensor& output)>;

namespace detail {
// A bool as Python prints it, for extra_repr.
inline const char* py_bool(bool value) { return value ? "True" : "False"; }

struct HookTable {
  int64_t next_id = 0;
  std::map<int64_t, ForwardPreHook> pre_hooks;
  std::map<int64_t, ForwardHook> hooks;
};
}  // namespace detail

// Removes the hook it was returned for (torch.utils.hooks.RemovableHandle). Removing twice,
// or after the module is gone, does nothing.
class RemovableHandle {
 public:
  RemovableHandle() = default;
  RemovableHandle(std::weak_ptr<detail::HookTable> table, int64_t id)
      : table_(std::move(table)), id_(id) {}
  void remove();

 private:
  std::weak_ptr<detail::HookTable> table_;
  int64_t id_ = -1;
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  virtual ~Module() = default;
  // A copy shares the parameters, buffers and children (handles), not the hooks.
  Module(const Module& other);
  Module& operator=(const Module&) = delete;

  // The class name used when printing ("Linear").
  virtual std::string name() const { return "Module"; }
  // The text between the parentheses when printing ("in_features=4, out_features=2, ...").
  virtual std::string extra_repr() const { return ""; }
  // PyTorch's repr: the name, extra_repr and children, indented.
  std::string to_string() const;

  // NOTE [Module forward signature] C++ has no *args: the virtual forward, and with it
  // operator() and the hooks, take one tensor. A module with more inputs (MultiheadAttention's
  // forward(query, key, value)) adds overloads; those are called directly and run no hooks.
  virtual Tensor forward(const Tensor& input);
  // forward with the forward pre-hooks and hooks, in registration order.
  Tensor operator()(const Tensor& input);

  // ---- registration -----------------------------------------------------------------------
  // Registers a parameter (a leaf; requires_grad is set to requires_grad) and returns it. The
  // name must be new to this module, non-empty and free of '.'.
  Tensor& register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor& register_buffer(const std::string& name, Tensor tensor);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    register_child(name, module);
    return module;
  }

  // ---- traversal (registration order, each tensor once) ------------------------------------
  std::vector<Tensor> parameters(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // This module ("") and every descendant, depth first, with dotted names.
  // (Needs this module to be held by a shared_ptr.)
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_modules();
  // Calls fn on every descendant, then on this module (torch's module.apply); usable from a
  // constructor.
  Module& apply(const std::function<void(Module&)>& fn);

  // ---- mode --------------------------------------------------------------------------------
  // Sets training mode here and in every descendant.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- dtype and device --------------------------------------------------------------------
  // Converts every floating parameter and buffer (and their gradients) in place; integer
  // buffers are left alone. NOTE [Module.to keeps parameter identity].
  Module& to(DType dtype);
  Module& half() { return to(kFloat16); }
  Module& bfloat16() { return to(kBFloat16); }
  // C++ cannot name a method `float`; float32() is the spelling here.
  Module& float32() { return to(kFloat32); }
  // Moves every parameter and buffer (integer buffers too) to `device`; the same device is a
  // no-op, and a device this build cannot reach is Tensor::to's error, raised before anything
  // moves.
  Module& to(Device device);

  // ---- state -------------------------------------------------------------------------------
  // Every parameter and buffer by dotted name, detached, sharing storage with the module.
  StateDict state_dict() const;
  // Copies values in (converting dtype). Checks every key and shape before writing anything:
  // on an error nothing has changed. strict: missing or unexpected keys are errors.
  LoadStateDictResult load_state_dict(const StateDict& state, bool strict = true);

  // ---- hooks -------------------------------------------------------------------------------
  RemovableHandle register_forward_pre_hook(ForwardPreHook hook);
  RemovableHandle register_forward_hook(ForwardHook hook);
  // Whether a forward pre-hook or hook is registered here (a model that fuses modules' work
  // into one op fuses only those without).
  bool has_forward_hooks() const { return !hooks_->pre_hooks.empty() || !hooks_->hooks.empty(); }

 protected:
  void register_child(const std::string& name, std::shared_ptr<Module> module);
  // The direct children in registration order, without copying the list (a container's
  // forward walks it on every call).
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& child_entries() const {
    return children_;
  }
  // This module's own parameters in registration order (for the parameter containers).
  const std::vector<std::pair<std::string, Tensor>>& parameter_entries() const {
    return parameters_;
  }
  // Registers the child or parameter under `name`, or replaces the one registered there
  // already in its place (torch's module_dict[key] = module); a name taken by the other kind,
  // or by a buffer, is an error.
  void set_child(const std::string& name, std::shared_ptr<Module> module);
  Tensor& set_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);

 private:
  void check_new_name(const std::string& name, const char* what) const;
  void collect(const std::string& prefix, bool recurse, bool want_buffers,
               std::vector<std::pair<std::string, Tensor>>& out,
               std::vector<const TensorImpl*>& seen) const;
  // Applies convert to every parameter and buffer (only the floating ones when floating_only):
  // all conversions first, then the swaps, so a conversion that throws leaves the module
  // unchanged.
  void convert_tensors(const std::function<Tensor(const Tensor&)>& convert, bool floating_only);

  bool training_ = true;
  std::vector<std::pair<std::string, Tensor>> parameters_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::shared_ptr<detail::HookTable> hooks_ = std::make_shared<detail::HookTable>();
};

// Replaces the data of `tensor` by that of `data` while keeping the handle's identity and its
// autograd state (requires_grad, grad, hooks): NOTE [Module.to keeps parameter identity].
void set_data(const Tensor& tensor, const Tensor& data);

}  // namespace hg::nn
