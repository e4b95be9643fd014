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
#include <span>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "halfgrad/core/tensor.h"
#include "halfgrad/nn/value.h"

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

// Runs before forward with the call's arguments; may return replacement arguments.
using ForwardPreHook = std::function<std::optional<Args>(Module& module, const Args& args)>;
// Runs after forward with the arguments forward received and its result; may return a
// replacement result.
using ForwardHook =
    std::function<std::optional<Value>(Module& module, const Args& args, const Value& output)>;
// The same for a module called with one tensor and returning one, in tensor terms. Called on
// any other call, such a hook raises an hg::Error naming the module and the call's kinds.
using TensorForwardPreHook =
    std::function<std::optional<Tensor>(Module& module, const Tensor& input)>;
using TensorForwardHook =
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

  // NOTE [Module forward signature] torch's forward takes any arguments and returns anything;
  // C++ needs the signature in the type. A module has one of two kinds of forward:
  // - one tensor in, one out: it overrides the virtual forward(const Tensor&) below, and
  //   operator()(tensor) runs it (every layer of this folder but the ones below);
  // - any other: it derives from CustomForward<Itself> (after this class) and declares one
  //   non-template forward with the parameters and result it wants (LSTM's
  //   forward(input, optional<tuple<Tensor, Tensor>>) -> tuple<Tensor, tuple<...>>);
  //   CustomForward's operator()(args...) calls it with the arguments as given.
  // Either way the hooks and nn::Sequential see the call type-erased: its arguments as Args
  // and its result as one Value (value.h), and `call(args)` runs any module that way.
  // Without hooks, operator() calls forward directly: no Value is made.
  virtual Tensor forward(const Tensor& input);
  // forward with the forward pre-hooks and hooks, in registration order.
  Tensor operator()(const Tensor& input);
  // torch's module(*args): the pre-hooks (which may replace the arguments), forward_args, the
  // hooks (which may replace the result).
  Value call(Args args);
  // forward with type-erased arguments and result, without hooks. The base takes one Tensor
  // (an hg::Error naming the kinds given otherwise) and calls forward(tensor); CustomForward
  // converts the arguments to its forward's parameter types.
  virtual Value forward_args(const Args& args);

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
  RemovableHandle register_forward_pre_hook(TensorForwardPreHook hook);
  RemovableHandle register_forward_hook(TensorForwardHook hook);
  // A lambda chooses its form by its parameters.
  template <class F>
  requires std::is_invocable_v<F&, Module&, const Tensor&> RemovableHandle
  register_forward_pre_hook(F hook) {
    return register_forward_pre_hook(TensorForwardPreHook(std::move(hook)));
  }
  template <class F>
  requires std::is_invocable_v<F&, Module&, const Tensor&, const Tensor&> RemovableHandle
  register_forward_hook(F hook) {
    return register_forward_hook(TensorForwardHook(std::move(hook)));
  }
  template <class F>
  requires std::is_invocable_v<F&, Module&, const Args&> RemovableHandle
  register_forward_pre_hook(F hook) {
    return register_forward_pre_hook(ForwardPreHook(std::move(hook)));
  }
  template <class F>
  requires std::is_invocable_v<F&, Module&, const Args&, const Value&> RemovableHandle
  register_forward_hook(F hook) {
    return register_forward_hook(ForwardHook(std::move(hook)));
  }
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

// The modules whose forward is running on this thread, outermost first (what a profiler
// attributes an op to). operator(), call and CustomForward's operator() push the module for the
// time of its forward.
std::span<const Module* const> forward_stack();

namespace detail {
// Pushes `module` on this thread's forward stack while alive.
class ForwardScope {
 public:
  explicit ForwardScope(const Module* module);
  ~ForwardScope();
  ForwardScope(const ForwardScope&) = delete;
  ForwardScope& operator=(const ForwardScope&) = delete;
};

template <class F>
struct ForwardSignature;
template <class C, class R, class... P>
struct ForwardSignature<R (C::*)(P...)> {
  using owner = C;
  using result = R;
  using params = std::tuple<std::remove_cvref_t<P>...>;
};
template <class C, class R, class... P>
struct ForwardSignature<R (C::*)(P...) const> : ForwardSignature<R (C::*)(P...)> {};

template <class T>
inline constexpr bool is_optional_v = false;
template <class T>
inline constexpr bool is_optional_v<std::optional<T>> = true;

// "LSTM.forward argument 1", for the conversion errors.
std::string forward_argument_name(const Module& module, size_t index);
// An hg::Error: forward needs at least (or takes at most) `count` arguments and was called
// with `args`.
[[noreturn]] void throw_forward_arity(const Module& module, const char* bound, size_t count,
                                      const Args& args);

// Argument `index` of a type-erased call as the parameter type T; an argument left out is None
// (the caller has checked that only std::optional parameters are left out: the C++ default
// arguments are not in the type).
template <class T>
T forward_argument(const Module& module, const Args& args, size_t index) {
  if constexpr (is_optional_v<T>) {
    if (index >= args.size()) return std::nullopt;
  }
  return args[index].template to<T>(forward_argument_name(module, index).c_str());
}
}  // namespace detail

// The base of a module whose forward is not one tensor in, one out (NOTE [Module forward
// signature]):
//
//   struct Scale : nn::CustomForward<Scale> {
//     std::string name() const override { return "Scale"; }
//     std::tuple<Tensor, Tensor> forward(const Tensor& x, std::optional<double> factor) {...}
//   };
//   auto [y, z] = (*scale)(x, 2.0);         // hooks run; they see (Tensor, float)
//   nn::Value v = scale->call({x});          // the same, type-erased; factor is None
//
// Derived declares exactly one forward, not a template and not overloaded, so its signature
// can be read. forward(const Tensor&) is Module's one-tensor virtual and must return a Tensor:
// a forward of one tensor returning anything else takes it by value (forward(Tensor x)).
//
// Base, when given, is the Module subclass to derive from (a shared base such as RNNBase);
// its constructors are inherited.
template <class Derived, class Base = Module>
requires std::is_base_of_v<Module, Base>
class CustomForward : public Base {
 public:
  using Base::Base;

  // Derived::forward(args...), run between the hooks (which see the arguments as Args) when
  // there are any.
  template <class... A>
  auto operator()(A&&... args) {
    using Result = std::remove_cvref_t<decltype(derived().forward(std::forward<A>(args)...))>;
    if (!this->has_forward_hooks()) {
      detail::ForwardScope scope(this);
      return derived().forward(std::forward<A>(args)...);
    }
    const std::string what = this->name() + " output";
    return this->call(Args{Value::from(std::forward<A>(args))...})
        .template to<Result>(what.c_str());
  }

  // Derived::forward with each argument converted to its parameter's type.
  Value forward_args(const Args& args) override {
    using Signature = detail::ForwardSignature<decltype(&Derived::forward)>;
    static_assert(std::is_same_v<typename Signature::owner, Derived>,
                  "a CustomForward module declares its own forward");
    using Params = typename Signature::params;
    constexpr size_t count = std::tuple_size_v<Params>;
    // Every parameter up to the last that is not a std::optional needs its argument.
    constexpr size_t required = []<size_t... I>(std::index_sequence<I...>) {
      size_t n = 0;
      ((n = detail::is_optional_v<std::tuple_element_t<I, Params>> ? n : I + 1), ...);
      return n;
    }
    (std::make_index_sequence<count>{});
    if (args.size() > count) detail::throw_forward_arity(*this, "at most", count, args);
    if (args.size() < required) detail::throw_forward_arity(*this, "at least", required, args);
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return Value::from(derived().forward(
          detail::forward_argument<std::tuple_element_t<I, Params>>(*this, args, I)...));
    }
    (std::make_index_sequence<count>{});
  }

  // Called through a Module& with one tensor (a base-class pointer, nn::Sequential's fast
  // path): forward_args with that tensor, whose result must be a tensor. Derived's own forward
  // hides it by design (NOTE [CustomForward hides Module's forward] in nn/rnn.h); GCC 13's
  // -Wall reports the hiding here, at the hidden function, for every such module (a user's
  // too), so the warning is off around it. clang reports it at Derived's forward instead.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  Tensor forward(const Tensor& input) override {
    const std::string what = this->name() + " output";
    return forward_args(Args{input}).tensor(what.c_str());
  }
#pragma GCC diagnostic pop

 private:
  Derived& derived() { return static_cast<Derived&>(*this); }
};

// Replaces the data of `tensor` by that of `data` while keeping the handle's identity and its
// autograd state (requires_grad, grad, hooks): NOTE [Module.to keeps parameter identity].
void set_data(const Tensor& tensor, const Tensor& data);

}  // namespace hg::nn
