// GradScaler: dynamic loss scaling with torch.amp.GradScaler's semantics.
//
//   amp::GradScaler scaler;                      // init_scale 65536, growth 2, backoff 0.5
//   for (...) {
//     opt.zero_grad();
//     Tensor loss;
//     { amp::Autocast autocast(kCUDA, kFloat16); loss = mse_loss(model(x), y); }
//     scaler.scale(loss).backward();             // fp16 grads stay above the underflow line
//     scaler.unscale_(opt);                      // optional: true grads, e.g. for clipping
//     scaler.step(opt);                          // skipped when a grad is inf or NaN
//     scaler.update();                           // backoff on inf, growth after clean runs
//   }
//
// NOTE [Scaler state machine] Each optimizer (identified by its address) goes through
// READY -> UNSCALED -> STEPPED between two update() calls; unscale_ twice, unscale_ after
// step, and step twice are errors, as in PyTorch. update() combines the found_inf flags
// of every optimizer of the iteration and resets them all to READY.
//
// The scale and the growth tracker live in one-element tensors (float32, int32) on the
// device of the first tensor scale() sees; found_inf is a one-element float32 tensor per
// device. With enabled = false every method is a pass-through: scale() returns its input,
// step() calls optimizer.step(), the rest do nothing.
//
// NOTE [GradScaler on CUDA] With the scale on a CUDA device, scale, unscale_, step and update
// enqueue work and never wait for it (NOTE [No host sync in the step] in cuda/multi_tensor.cpp):
// unscale_ runs one multi-tensor kernel per (device, dtype) group that writes found_inf on the
// device; step hands found_inf to the optimizer's scaled step, which skips on the device; update
// is one kernel, hysteresis and the min/max bounds included. Reading a device value on the host
// waits for the device, and happens only where a method must answer on the host: get_scale(),
// state_dict(), last_step_skipped(), consecutive_skipped_iterations(), the bool of
// step()'s result, the history (record_history), and an optimizer without a scaled step (step()
// must decide on the host whether to call it, as PyTorch's non-fused path does). The collapse
// alarm needs no wait: the update kernel counts alarms into mapped host memory, and update()
// raises the ones it finds there, usually a few iterations after the iteration that raised
// them (the message gives that iteration's values; in error mode the update() that finds one
// throws, after doing its own update).
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "halfgrad/amp/overflow_report.h"
#include "halfgrad/core/device.h"
#include "halfgrad/core/tensor.h"

namespace hg::optim {
class Optimizer;
}

namespace hg::amp {

namespace detail {

// NOTE [Scaling nested outputs] torch's scale(outputs) takes a tensor or any iterable of them,
// nested, and returns the same structure. Here the structure is a type: a Tensor, or a
// std::vector, std::array, std::pair, std::tuple or std::optional of such, or a std::map or
// std::unordered_map whose values are such (the keys are kept). TensorTree says whether a type
// is one, so that anything else fails to compile instead of passing through unscaled.
template <class T>
struct TensorTree : std::false_type {};
template <>
struct TensorTree<Tensor> : std::true_type {};
template <class T, class A>
struct TensorTree<std::vector<T, A>> : TensorTree<T> {};
template <class T, size_t N>
struct TensorTree<std::array<T, N>> : TensorTree<T> {};
template <class T>
struct TensorTree<std::optional<T>> : TensorTree<T> {};
template <class A, class B>
struct TensorTree<std::pair<A, B>> : std::bool_constant<TensorTree<A>::value && TensorTree<B>::value> {};
template <class... T>
struct TensorTree<std::tuple<T...>> : std::bool_constant<(TensorTree<T>::value && ...)> {};
template <class K, class V, class C, class A>
struct TensorTree<std::map<K, V, C, A>> : TensorTree<V> {};
template <class K, class V, class H, class E, class A>
struct TensorTree<std::unordered_map<K, V, H, E, A>> : TensorTree<V> {};

template <class T>
concept TensorStructure = TensorTree<std::remove_cvref_t<T>>::value;

// The same structure with f applied to every tensor, in order.
template <class T, class F>
T map_tensors(const T& tree, F& f) {
  if constexpr (std::is_same_v<T, Tensor>) {
    return f(tree);
  } else if constexpr (requires { std::tuple_size<T>::value; }) {  // array, pair, tuple
    return std::apply([&](const auto&... e) { return T{map_tensors(e, f)...}; }, tree);
  } else if constexpr (requires { typename T::mapped_type; }) {  // map, unordered_map
    T out;
    for (const auto& [key, value] : tree) out.emplace(key, map_tensors(value, f));
    return out;
  } else if constexpr (requires { tree.has_value(); }) {  // optional
    return tree ? T(map_tensors(*tree, f)) : T();
  } else {  // vector
    T out;
    out.reserve(tree.size());
    for (const auto& e : tree) out.push_back(map_tensors(e, f));
    return out;
  }
}

// f applied to every tensor of the structure, in map_tensors' order.
template <class T, class F>
void for_each_tensor(const T& tree, F& f) {
  if constexpr (std::is_same_v<T, Tensor>) {
    f(tree);
  } else if constexpr (requires { std::tuple_size<T>::value; }) {  // array, pair, tuple
    std::apply([&](const auto&... e) { (for_each_tensor(e, f), ...); }, tree);
  } else if constexpr (requires { typename T::mapped_type; }) {  // map, unordered_map
    for (const auto& [key, value] : tree) for_each_tensor(value, f);
  } else if constexpr (requires { tree.has_value(); }) {  // optional
    if (tree) for_each_tensor(*tree, f);
  } else {  // vector
    for (const auto& e : tree) for_each_tensor(e, f);
  }
}

}  // namespace detail

struct GradScalerOptions {
  // PyTorch's parameters and defaults.
  double init_scale = 65536.0;
  double growth_factor = 2.0;      // must be > 1
  double backoff_factor = 0.5;     // must be in (0, 1)
  int64_t growth_interval = 2000;  // clean steps in a row before the scale grows
  bool enabled = true;

  // Beyond PyTorch; the defaults leave PyTorch's behaviour unchanged.
  // Bounds the scale that update() computes (growth stops at max_scale, backoff stops at
  // min_scale). A scale set explicitly by update(new_scale) is not bounded.
  std::optional<double> min_scale = std::nullopt;
  std::optional<double> max_scale = std::nullopt;
  // Overflowing steps in a row that are skipped without backing off; the next one backs
  // off (and each one after it). Every overflowing step is skipped and resets the growth
  // tracker; a clean step resets the count. 0: back off on every overflow (PyTorch).
  int64_t hysteresis = 0;
  // Keep one HistoryEntry per update() (a host read of the flags each iteration).
  bool record_history = false;
  // NOTE [Scale collapse alarm] A healthy float16 run skips a few steps while the scale
  // comes down from init_scale, then rarely. Many skips in a row, or a scale that keeps
  // falling, mean the loss or the gradients are inf/NaN for a reason no scale fixes. update()
  // then raises the alarm, once per run of skips (a clean iteration rearms it) and once per
  // fall below the floor (growing back above it rearms it): a warning through the warning
  // handler, or an hg::Error thrown by update() after the scale was updated. The message says
  // what to try. The steps are skipped and the scale updated exactly as in PyTorch either way.
  // Iterations in a row with a skipped step that raise the alarm; 0: never.
  int64_t alarm_after_consecutive_skips = 25;
  // A scale below this raises the alarm; nullopt: never.
  std::optional<double> alarm_scale_floor = std::nullopt;
  enum class AlarmAction { kWarn, kError };
  AlarmAction alarm_action = AlarmAction::kWarn;
};

// One iteration as update() saw it: the scale the iteration ran with and whether any
// optimizer step of it was skipped.
struct HistoryEntry {
  int64_t step;  // 0 for the first update()
  double scale;
  bool skipped;
};

// What GradScaler::step returns: whether the optimizer stepped (PyTorch returns step()'s
// value, or None when it skipped). On the CPU the answer is known when step() returns. With
// CUDA gradients it is a flag on the device: converting the result to bool reads it, which
// waits for the device, so a loop that ignores step()'s result never waits.
//
//   if (!scaler.step(opt)) fmt::print("skipped\n");   // a wait for the device on CUDA
class StepResult {
 public:
  StepResult() = default;
  explicit StepResult(bool stepped) : stepped_(stepped) {}
  // A result still on the device: skipped when found_inf[0] != 0.
  static StepResult pending(Tensor found_inf);

  // Implicit, so `bool stepped = scaler.step(opt)` and `if (scaler.step(opt))` read as they
  // would for a bool.
  operator bool() const;  // NOLINT(google-explicit-constructor)
  // True when converting reads the device.
  bool is_pending() const { return found_inf_.defined(); }

 private:
  Tensor found_inf_;
  bool stepped_ = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  ~GradScaler();
  GradScaler(const GradScaler&) = delete;
  GradScaler& operator=(const GradScaler&) = delete;

  // outputs * scale (the result is float32 or wider, as PyTorch's promotion of a
  // one-element float32 tensor makes it). Disabled: the input itself.
  Tensor scale(const Tensor& outputs);
  std::vector<Tensor> scale(const std::vector<Tensor>& outputs);
  // torch's scale over nested containers (NOTE [Scaling nested outputs]): the same structure,
  // every tensor scaled, e.g. scale(std::pair{loss_a, std::map<std::string, Tensor>{...}}).
  // The tensors go through the same scale_all as the other forms, in one "GradScaler.scale"
  // range (NOTE [Recorded ranges]), then back into the structure.
  template <class Outputs>
    requires detail::TensorStructure<Outputs>
  Outputs scale(const Outputs& outputs) {
    if (!options_.enabled) return outputs;
    std::vector<Tensor> flat;
    auto collect = [&flat](const Tensor& t) { flat.push_back(t); };
    detail::for_each_tensor(outputs, collect);
    const std::vector<Tensor> scaled = scale_all(flat);
    size_t next = 0;
    auto take_scaled = [&scaled, &next](const Tensor&) { return scaled[next++]; };
    return detail::map_tensors(outputs, take_scaled);
  }

  // Multiplies every gradient of the optimizer's parameters by 1/scale (the reciprocal in
  // float64, applied in float32) and records, per device, whether any gradient held an inf
  // or a NaN (on CUDA, also one that overflows when unscaled: NOTE [Unscale checks input and
  // result] in cuda/multi_tensor.cu). float16 gradients are an error (the parameters the
  // optimizer updates should be float32), as in PyTorch.
  void unscale_(optim::Optimizer& optimizer);

  // Unscales (unless unscale_ already did) and calls optimizer.step() unless a gradient was
  // not finite, in which case the parameters are left untouched. Returns whether the
  // optimizer stepped (see StepResult). An optimizer with a scaled step (SGD, Adam, AdamW) is
  // handed the found_inf flag and skips on its own, on the device for CUDA parameters.
  StepResult step(optim::Optimizer& optimizer);
  // torch's step(optimizer, closure): the closure recomputes the loss and the gradients
  // (zero_grad, forward, scale(loss).backward(), and unscale_ if it clips) and returns what it
  // wants returned, usually the loss. It is called once, first, as SGD's and Adam's
  // step(closure) call it; then the step goes as step(optimizer). Returns the closure's value
  // when the optimizer stepped and nullopt when the step was skipped (torch returns None
  // then), or, for a closure returning nothing, the StepResult. Reading whether it stepped waits
  // for the device on CUDA. The optimizer must be where an iteration starts (no unscale_ or
  // step since the last update()): the closure's gradients replace whatever was unscaled.
  template <class Closure>
    requires std::invocable<Closure&>
  auto step(optim::Optimizer& optimizer, Closure&& closure) {
    using Value = std::invoke_result_t<Closure&>;
    check_ready_for_closure(optimizer);
    if constexpr (std::is_void_v<Value>) {
      closure();
      return step(optimizer);
    } else {
      std::optional<std::remove_cvref_t<Value>> value(closure());
      if (!step(optimizer)) value.reset();
      return value;
    }
  }

  // Updates the scale from this iteration's found_inf flags, or sets it to new_scale (finite
  // and > 0, or hg::Error).
  void update(std::optional<double> new_scale = std::nullopt);
  // torch's other form: new_scale a one-element float32 tensor that does not require grad. Its
  // value is read on the host (on CUDA, a wait for the device), then as update(double).
  void update(const Tensor& new_scale);

  // The current scale (init_scale before the first scale(); 1 when disabled). A scale on a
  // CUDA device is read on the host: this waits for the device.
  double get_scale() const;
  // The setters check as the constructor does (hg::Error, nothing changed, when out of range).
  double get_growth_factor() const { return options_.growth_factor; }
  void set_growth_factor(double growth_factor);
  double get_backoff_factor() const { return options_.backoff_factor; }
  void set_backoff_factor(double backoff_factor);
  int64_t get_growth_interval() const { return options_.growth_interval; }
  void set_growth_interval(int64_t growth_interval);
  bool is_enabled() const { return options_.enabled; }

  // Keys "scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"
  // (and "_overflow_tracker" when hysteresis is on); empty when disabled, as in PyTorch.
  // Waits for the device when the scale is on one.
  std::map<std::string, double> state_dict() const;
  // A missing key, or a value the constructor or a setter would reject (NOTE [Scaler checks]
  // in grad_scaler.cpp: a scale finite and >= 0, whole trackers in [0, 2^31 - 1], a whole
  // growth_interval >= 1), is an error naming it, before anything changes. Disabled: does
  // nothing.
  void load_state_dict(const std::map<std::string, double>& state);

  // ---- beyond PyTorch ----------------------------------------------------------------------

  // Whether the most recent step() skipped the optimizer step (on CUDA a read of the flag on
  // the device: it waits for the device).
  bool last_step_skipped() const { return !static_cast<bool>(last_step_); }
  // Iterations in a row, up to the last update(), in which a step was skipped (on CUDA a read
  // of the device's count: it waits for the device).
  int64_t consecutive_skipped_iterations() const;
  // The parameters of `optimizer` whose gradients hold an inf or a NaN, named by `model`
  // when given (amp/overflow_report.h): after a skipped step, which ones overflowed.
  OverflowReport overflow_report(const optim::Optimizer& optimizer,
                                 const nn::Module* model = nullptr) const;
  const std::vector<HistoryEntry>& history() const { return history_; }
  // "step,scale,skipped" and one line per entry.
  void write_history_csv(const std::string& path) const;
  // Where the warnings go (stderr by default): the one-time warning about scaling a bfloat16
  // loss, and the scale collapse alarm when it warns.
  void set_warning_handler(std::function<void(std::string_view)> handler);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct OptimizerState {
    Stage stage = Stage::kReady;
    std::vector<std::pair<Device, Tensor>> found_inf_per_device;
  };

  // The CUDA half of the scaler (grad_scaler_detail.h): the device's counters and the alarm
  // monitor; null while the scale is not on a CUDA device.
  struct DeviceState;

  // The state machine and the host's update (grad_scaler.cpp).
  void check_scale_initialized(const char* method) const;
  void check_ready_for_closure(const optim::Optimizer& optimizer) const;
  // Every form of scale() comes here: one "GradScaler.scale" range of kind kLossScaling around
  // the multiplies (the scaler's own ops, which OverflowWatch skips and the profiler shows).
  std::vector<Tensor> scale_all(const std::vector<Tensor>& outputs);
  Tensor scale_one(const Tensor& output);
  // Sum of every found_inf flag recorded since the last update (a host read).
  double found_inf_sum() const;
  void apply_update_rule(bool found_inf);

  // Where the scale lives, and the CUDA paths (grad_scaler_device.cpp; NOTE [GradScaler on
  // CUDA]).
  void lazy_init_scale(Device device);
  bool scale_on_cuda() const;
  Tensor inv_scale_on(Device device) const;
  StepResult step_with_device_flags(optim::Optimizer& optimizer, OptimizerState& state);
  void update_on_device(std::optional<double> new_scale);
  void raise_device_alarms();
  int64_t overflow_tracker() const;
  void set_overflow_tracker(int64_t overflow_tracker);

  // The scale collapse alarm (grad_scaler_alarms.cpp).
  void check_collapse(bool skipped);
  // Warns, or throws in error mode, with the advice appended to `alarm`.
  void raise_alarm(const std::string& alarm);

  GradScalerOptions options_;
  Tensor scale_;                     // [1] float32
  Tensor growth_tracker_;            // [1] int32
  int64_t init_growth_tracker_ = 0;  // the tracker lazy_init_scale starts from
  int64_t overflow_tracker_ = 0;     // consecutive overflowing steps (hysteresis)
  int64_t consecutive_skips_ = 0;    // iterations in a row with a skipped step
  bool below_floor_ = false;         // the alarm for alarm_scale_floor was raised
  std::unordered_map<const optim::Optimizer*, OptimizerState> per_optimizer_states_;
  StepResult last_step_;
  std::unique_ptr<DeviceState> device_;
  bool warned_bfloat16_ = false;
  int64_t update_count_ = 0;
  std::vector<HistoryEntry> history_;
  std::function<void(std::string_view)> warning_handler_;
};

}  // namespace hg::amp
