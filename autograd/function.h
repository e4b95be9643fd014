// Custom autograd functions, as libtorch's torch::autograd::Function:
//
//   struct ScaledSquare : autograd::Function<ScaledSquare> {
//     // custom_fwd(cast_inputs=float32): under autocast, floating inputs are cast to float32
//     // and forward runs with autocast off (the op is numerically delicate in 16 bits).
//     static constexpr std::optional<DType> kCastInputs = kFloat32;
//     // custom_bwd: backward runs with the autocast state forward ran under (off here, after
//     // the cast, as torch's custom_fwd(cast_inputs=...) with custom_bwd).
//     static constexpr bool kCustomBwd = true;
//
//     static Tensor forward(FunctionContext& ctx, const Tensor& x, double scale) {
//       ctx.save_for_backward({x});
//       ctx.saved_data["scale"] = scale;
//       return mul(mul(x, x), scale);
//     }
//     static std::vector<Tensor> backward(FunctionContext& ctx, const std::vector<Tensor>& grads) {
//       const Tensor x = ctx.saved(0);
//       return {mul(mul(grads[0], x), 2 * std::any_cast<double>(ctx.saved_data["scale"]))};
//     }
//   };
//   Tensor y = ScaledSquare::apply(x, 3.0);
//
// forward runs without recording (the function is one node); backward returns one gradient
// per Tensor argument of forward, in order (undefined where none is needed).
#pragma once

#include <any>
#include <atomic>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/autocast_mode.h"

namespace hg::autograd {

class FunctionContext {
 public:
  void save_for_backward(std::initializer_list<Tensor> tensors) {
    for (const Tensor& t : tensors) saved_.emplace_back(t, /*is_output=*/false);
  }
  Tensor saved(size_t i) const { return saved_.at(i).unpack(name_); }
  size_t num_saved() const { return saved_.size(); }
  bool needs_input_grad(size_t i) const { return i < needs_.size() && needs_[i]; }
  // Anything else backward needs (attributes, shapes).
  std::unordered_map<std::string, std::any> saved_data;

  // For Function<Derived>.
  void start(std::string name, std::vector<bool> needs) {
    name_ = std::move(name);
    needs_ = std::move(needs);
  }
  void release() {
    for (SavedTensor& s : saved_) s.release();
  }

 private:
  std::string name_;
  std::vector<bool> needs_;
  std::vector<SavedTensor> saved_;
};

namespace detail {

// custom_fwd(cast_inputs=dtype)'s cast, as torch.amp's: a floating tensor of the autocast
// device type, other than float64, is cast to dtype (an ordinary, recorded conversion);
// anything else is passed as it is.
inline Tensor cast_for_custom_fwd(const Tensor& t, DType dtype, DeviceType device_type) {
  const bool eligible = t.defined() && t.is_floating_point() && t.dtype() != kFloat64 &&
                        t.device().type == device_type && t.dtype() != dtype;
  return eligible ? t.to(dtype) : t;
}

template <class Derived>
class FunctionNode final : public Node {
 public:
  std::string name() const override { return Derived::kName; }
  GradList apply(GradList&& grad_list) override {
    // A user's backward takes and returns std::vector<Tensor> (the public API).
    const std::vector<Tensor> grads(std::make_move_iterator(grad_list.begin()),
                                    std::make_move_iterator(grad_list.end()));
    std::optional<AutocastModeGuard> replay;  // custom_bwd: the forward's autocast mode
    if constexpr (requires { Derived::kCustomBwd; }) {
      if (Derived::kCustomBwd) replay.emplace(autocast);
    }
    std::vector<Tensor> result = Derived::backward(ctx, grads);
    return GradList(std::make_move_iterator(result.begin()), std::make_move_iterator(result.end()));
  }
  void release_saved() override { ctx.release(); }

  FunctionContext ctx;
  AutocastMode autocast;  // the autocast mode forward ran under (replayed by custom_bwd)
};

// NOTE [Autocast for custom functions] A Function declares its autocast behaviour at compile
// time (kCastInputs, torch's custom_fwd), or a program registers one at run time for a device
// type with amp::register_autocast<F>(device_type, policy) (torch.library.register_autocast),
// which takes precedence. The registry is amp's (amp/autocast.cpp), above this layer: it installs
// the lookup below with its first registration, so apply() reaches it through one pointer and,
// in a program that registers nothing, pays one atomic load under autocast and nothing outside.
// A registered policy other than Unlisted casts the floating inputs of the device type
// (LowerPrecision: to the autocast dtype, Fp32: to float32, Promote: to the widest floating
// input) and runs forward with autocast off for it, as kCastInputs does; Banned is an error.
struct FunctionCast {
  bool registered = false;           // false: do what the Function declares
  std::optional<DType> cast_to;      // registered: the inputs' dtype, or none (Unlisted)
};
using FunctionCastLookup = FunctionCast (*)(const void* function, DeviceType device_type,
                                            const std::vector<Tensor>& inputs);
extern std::atomic<FunctionCastLookup> function_cast_lookup;

// One address per Function type, the registry's key.
template <class Derived>
const void* function_id() {
  static constexpr char id = 0;
  return &id;
}

inline void collect(std::vector<Tensor>& out, const Tensor& t) { out.push_back(t); }
template <class T>
void collect(std::vector<Tensor>&, const T&) {}

}  // namespace detail

template <class Derived>
struct Function {
  // Node name in messages; a Derived may define its own `static constexpr const char* kName`.
  static constexpr const char* kName = "CustomFunctionBackward";

  template <class... Args>
  static auto apply(Args&&... args) {
    std::vector<Tensor> given;
    (detail::collect(given, args), ...);

    // custom_fwd(cast_inputs=...): cast floating inputs (recorded, so gradients flow back
    // through the casts in each input's dtype) and run forward with autocast off.
    std::optional<DeviceType> device_type;
    for (const Tensor& t : given) {
      if (t.defined()) {
        device_type = t.device().type;
        break;
      }
    }
    bool cast = false;
    DType cast_to = kFloat32;
    if (device_type && is_autocast_enabled(*device_type)) {
      detail::FunctionCast registered;
      if (const auto lookup = detail::function_cast_lookup.load(std::memory_order_acquire)) {
        registered = lookup(detail::function_id<Derived>(), *device_type, given);
      }
      if (registered.registered) {
        cast = registered.cast_to.has_value();
        if (cast) cast_to = *registered.cast_to;
      } else if constexpr (requires { Derived::kCastInputs; }) {
        if (Derived::kCastInputs) {
          cast = true;
          cast_to = *Derived::kCastInputs;
        }
      }
    }
    const auto prepare = [&](auto&& arg) {
      if constexpr (std::is_same_v<std::remove_cvref_t<decltype(arg)>, Tensor>) {
        return cast ? detail::cast_for_custom_fwd(arg, cast_to, *device_type) : Tensor(arg);
      } else {
        return std::remove_cvref_t<decltype(arg)>(std::forward<decltype(arg)>(arg));
      }
    };
    auto prepared = std::make_tuple(prepare(std::forward<Args>(args))...);
    std::vector<Tensor> inputs;
    std::apply([&](const auto&... a) { (detail::collect(inputs, a), ...); }, prepared);

    std::vector<bool> needs;
    bool record = is_grad_enabled();
    bool any = false;
    for (const Tensor& t : inputs) {
      needs.push_back(record && t.defined() && t.requires_grad());
      any = any || needs.back();
    }
    record = record && any;

    // The mode forward runs under: the caller's, with autocast off for the inputs' device type
    // when they were cast. custom_bwd replays it, so that backward too runs with autocast off
    // after a cast (torch's custom_fwd records _fwd_used_autocast = False there).
    AutocastMode forward_mode = autocast_mode();
    if (cast) forward_mode.enabled[size_t(*device_type)] = false;
    auto node = std::make_shared<detail::FunctionNode<Derived>>();
    node->autocast = forward_mode;
    node->ctx.start(Derived::kName, needs);
    auto result = [&] {
      NoGradGuard no_grad;
      std::optional<AutocastModeGuard> off;
      if (cast) off.emplace(forward_mode);
      return std::apply([&](auto&... a) { return Derived::forward(node->ctx, a...); }, prepared);
    }();

    if (record) {
      for (const Tensor& t : inputs) {
        node->next_edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
      }
      std::vector<Tensor*> outputs;
      if constexpr (std::is_same_v<decltype(result), Tensor>) {
        outputs.push_back(&result);
      } else {
        for (Tensor& t : result) outputs.push_back(&t);
      }
      uint32_t output_nr = 0;
      for (Tensor* out : outputs) {
        if (!out->defined() || !out->is_floating_point()) continue;
        node->outputs.push_back({out->sizes(), out->dtype(), out->device()});
        set_history(*out, node, output_nr++);
      }
    }
    return result;
  }
};

}  // namespace hg::autograd
