// The one dispatch function every op goes through (docs/design.md §2).
//
// An op is a struct: its id in the op list, its attributes, its forward and its backward,
// next to each other:
//
//   struct Mul {
//     static constexpr OpId id = OpId::mul;
//     Tensor forward(OpContext& ctx, const Tensor& a, const Tensor& b) {
//       ctx.save({a, b});                         // exactly what backward needs
//       return kernel_for::elementwise(a).binary(Binary::Mul, a, b, result_dtype, 1.0);
//     }
//     autograd::GradList backward(OpContext& ctx, const autograd::GradList& grads) {
//       ...                                       // halfgrad ops: differentiable again
//     }
//   };
//   Tensor mul(const Tensor& a, const Tensor& b) { return dispatch(Mul{}, a, b); }
//
// dispatch(op, inputs...):
//   1. validate   every tensor input on one device; float8 inputs only to conversions and views
//   2. autocast   if autocast is on for that device type, this is the outermost op, and the
//                 op is eligible: cast the floating inputs as the op's policy says
//   3. kernel     op.forward, with the thread "below autocast" (nested ops run as called)
//                 and grad mode off (the op is one node, whatever it calls)
//   4. autograd   if grad mode is on and an input requires grad: a node holding the op
//                 (its attributes and saved tensors) with edges to the inputs' nodes
//   5. anomaly    in anomaly mode, a non-finite output is an error naming the op
//   6. observe    hand the call to this thread's observers (ops/observer.h): amp's
//                 AutocastTrace records {op, policy, input dtypes, output dtypes}, amp's
//                 OverflowWatch checks the outputs for inf/NaN, the profiler closes the
//                 interval it opened when the observers were told the call began (after step 1)
//
// Variants an op can declare:
//   static constexpr bool kComposite = true;    no backward of its own: autograd records the
//                                               ops it calls (it still autocasts once)
//   bool autocast_eligible() const;             false for calls autocast must not touch
//                                               (an explicit dtype given by the caller)
//   static constexpr bool kFp8 = true;          runs in float8 (ops/fp8.h); observers see it
//   Tensor fp8_form(DelayedScaling&, inputs...) the op's float8 form, which dispatch() runs
//                                               instead of the op in an fp8 region: declared
//                                               by exactly the ops op_list.def lists with
//                                               HG_FP8_OP (NOTE [Fp8 ops])
//   Generator* generator;                       the op draws random numbers from it (or from
//                                               default_generator() when null): a rerun for
//                                               an observer draws the same ones (NOTE [Op reruns])
// Ops of a variable number of inputs (cat, stack) take std::span<const Tensor>.
#pragma once

#include <array>
#include <functional>
#include <span>
#include <tuple>
#include <type_traits>
#include <vector>

#include "halfgrad/autograd/anomaly.h"
#include "halfgrad/autograd/grad_mode.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/core/autocast_mode.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/random.h"
#include "halfgrad/core/small_vector.h"
#include "halfgrad/ops/autocast.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/ops/op.h"

namespace hg::ops {

class DelayedScaling;  // ops/fp8.h

// What forward saves for backward, and which inputs need a gradient.
class OpContext {
 public:
  // True while a node is being built for this call: save only then.
  bool recording() const { return recording_; }
  bool needs_input_grad(size_t input) const {
    return input < needs_input_grad_.size() && needs_input_grad_[input];
  }

  // Saves inputs (or any tensor that is not an output of this op). The list refers to the
  // tensors (no handle copied only to be dropped: a reference count each way).
  void save(std::initializer_list<std::reference_wrapper<const Tensor>> tensors) {
    if (!recording_) return;
    saved_.reserve(saved_.size() + tensors.size());
    for (const Tensor& t : tensors) saved_.emplace_back(t, /*is_output=*/false);
  }
  // Saves an output of this op (held without creating a reference cycle). Its SavedTensor is
  // made by bind_outputs, once the output has its grad_fn.
  void save_output(const Tensor& output) {
    if (!recording_) return;
    saved_.emplace_back();
    saved_outputs_.push_back({saved_.size() - 1, output});
  }
  // The i-th saved tensor, checked against in-place modification.
  Tensor saved(size_t i) const { return saved_.at(i).unpack(node_name_); }
  // Its data alone, checked the same way, without autograd history: for kernels that only
  // read it (cheaper for a saved output, which saved() gives back its place in the graph).
  Tensor saved_data(size_t i) const { return saved_.at(i).unpack_data(node_name_); }

  // For dispatch: the inputs' requires_grad flags (recording when any is set).
  template <class Inputs>
  void start(const Inputs& inputs, std::string_view node_name) {
    needs_input_grad_.resize(inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      needs_input_grad_[i] = inputs[i].defined() && inputs[i].requires_grad();
      recording_ = recording_ || needs_input_grad_[i];
    }
    node_name_ = node_name;
  }
  // Makes the saved outputs' SavedTensors (after set_history gave the outputs their node).
  void bind_outputs();
  void release() {
    for (autograd::SavedTensor& s : saved_) s.release();
  }
  // A context for a node rerun (NOTE [Node reruns]): the same flags, and each saved floating
  // tensor narrower than float64 as a float64 copy (the others as they are).
  OpContext widened() const;

 private:
  bool recording_ = false;
  SmallVector<bool, 8> needs_input_grad_;
  std::vector<autograd::SavedTensor, PoolAllocator<autograd::SavedTensor>> saved_;
  // Outputs to save, until bind_outputs (which drops these handles: the node must not own
  // its outputs).
  std::vector<std::pair<size_t, Tensor>, PoolAllocator<std::pair<size_t, Tensor>>> saved_outputs_;
  std::string_view node_name_;  // from backward_node_name's table: lives as long as the program
};

// "mul" -> "MulBackward", "layer_norm" -> "LayerNormBackward". The names are made once.
std::string_view backward_node_name(OpId op);

template <class Op>
class OpNode final : public autograd::Node {
 public:
  OpNode(Op op, OpContext ctx) : op_(std::move(op)), ctx_(std::move(ctx)) {}
  std::string name() const override { return std::string(backward_node_name(Op::id)); }
  autograd::GradList apply(autograd::GradList&& grad_outputs) override {
    if (!has_observers()) return op_.backward(ctx_, grad_outputs);
    // Observed (NOTE [Node reruns]): a rerun starts from the op as it was before its backward.
    RerunFn rerun;
    if (reruns_requested()) rerun = make_rerun();
    autograd::GradList grad_inputs = op_.backward(ctx_, grad_outputs);
    notify_node({.op = Op::id,
                 .node = this,
                 .grad_outputs = std::span<const Tensor>(grad_outputs.data(), grad_outputs.size()),
                 .grad_inputs = std::span<const Tensor>(grad_inputs.data(), grad_inputs.size()),
                 .rerun = rerun ? &rerun : nullptr});
    return grad_inputs;
  }
  void release_saved() override { ctx_.release(); }
  OpContext& context() { return ctx_; }

 private:
  // The backward once more in float64, valid while this node holds its saved tensors.
  RerunFn make_rerun() const {
    constexpr bool fp8 = requires { Op::kFp8; };
    if constexpr (!std::is_copy_constructible_v<Op> || fp8) {
      return {};
    } else {
      ++detail::reruns_built;
      return [op = op_, ctx = &ctx_](std::span<const Tensor> given) {
        Op copy = op;
        detail::HiddenObservers hidden;
        BelowAutocastGuard below;
        NoGradGuard no_grad;
        OpContext wide = ctx->widened();
        const autograd::GradList grads(given.begin(), given.end());
        autograd::GradList result = copy.backward(wide, grads);
        return std::vector<Tensor>(result.begin(), result.end());
      };
    }
  }

  Op op_;
  OpContext ctx_;
};

namespace detail {

template <class Op>
concept HasAutocastEligible = requires(const Op& op) {
  { op.autocast_eligible() } -> std::convertible_to<bool>;
};

template <class Op>
constexpr bool is_fp8() {
  if constexpr (requires { Op::kFp8; }) {
    return Op::kFp8;
  } else {
    return false;
  }
}

template <class Op, class... Ts>
concept HasFp8Form = requires(const Op& op, DelayedScaling& recipe, const Ts&... inputs) {
  { op.fp8_form(recipe, inputs...) } -> std::same_as<Tensor>;
};

// The recipe of this thread's fp8 region when a call whose first input is `x` runs in fp8
// there (NOTE [Fp8 ops]): at the outermost call, and never for float64 inputs, which no
// precision policy lowers. Null otherwise.
inline DelayedScaling* fp8_recipe_for(const Tensor& x) {
  void* recipe = autocast_mode().fp8_recipe;
  return recipe != nullptr && !is_below_autocast() && x.defined() && x.dtype() != kFloat64
             ? static_cast<DelayedScaling*>(recipe)
             : nullptr;
}

template <class Op>
constexpr bool is_composite() {
  if constexpr (requires { Op::kComposite; }) {
    return Op::kComposite;
  } else {
    return false;
  }
}

// The outputs of a forward as a list of pointers, whatever shape the result has.
using OutputList = SmallVector<Tensor*, 4>;
inline void collect_outputs(Tensor& t, OutputList& out) { out.push_back(&t); }
inline void collect_outputs(std::vector<Tensor>& ts, OutputList& out) {
  for (Tensor& t : ts) out.push_back(&t);
}
template <class... Ts>
void collect_outputs(std::tuple<Ts...>& ts, OutputList& out) {
  std::apply([&](auto&... t) { (collect_outputs(t, out), ...); }, ts);
}

// Step 1: every defined tensor input on one device; returns its type.
DeviceType common_device_type(OpId op, std::span<const Tensor> inputs);
// Step 1: no float8 input unless the op converts or views (NOTE [Float8 is conversion only]).
void check_float8_inputs(OpId op, std::span<const Tensor> inputs);
// Step 2: applies `policy` to the inputs in place (Banned throws).
void apply_cast_policy(OpId op, CastPolicy policy, DeviceType device_type,
                       std::span<Tensor> inputs);
// Steps 4 and 6 helpers.
autograd::EdgeList collect_edges(std::span<const Tensor> inputs);
std::vector<DType> dtypes_of(std::span<const Tensor> inputs);

template <class Op, class Inputs>
auto call_forward(Op& op, OpContext& ctx, Inputs& inputs) {
  if constexpr (std::is_same_v<Inputs, std::vector<Tensor>>) {
    return op.forward(ctx, std::span<const Tensor>(inputs));
  } else {
    return std::apply([&](const auto&... t) { return op.forward(ctx, t...); }, inputs);
  }
}

template <class Inputs>
Inputs inputs_from(OpId op, std::span<const Tensor> given) {
  if constexpr (std::is_same_v<Inputs, std::vector<Tensor>>) {
    return Inputs(given.begin(), given.end());
  } else {
    Inputs inputs;
    HG_CHECK(given.size() == inputs.size(), "{}: a rerun takes {} tensor inputs, got {}",
             op_name(op), inputs.size(), given.size());
    std::copy(given.begin(), given.end(), inputs.begin());
    return inputs;
  }
}

// Sets a generator back to where a call started while a rerun draws, then to where the call
// left it.
class GeneratorReplay {
 public:
  GeneratorReplay(Generator* generator, Generator::State start) : generator_(generator) {
    if (generator_ == nullptr) return;
    after_ = generator_->get_state();
    generator_->set_state(start);
  }
  ~GeneratorReplay() {
    if (generator_ != nullptr) generator_->set_state(after_);
  }
  GeneratorReplay(const GeneratorReplay&) = delete;
  GeneratorReplay& operator=(const GeneratorReplay&) = delete;

 private:
  Generator* generator_;
  Generator::State after_{};
};

// OpCall::rerun for a call of `op`, made before its forward runs (NOTE [Op reruns]).
template <class Op, class Inputs>
RerunFn make_rerun(const Op& op) {
  if constexpr (!std::is_copy_constructible_v<Op>) {
    return {};
  } else {
    ++reruns_built;
    Generator* generator = nullptr;
    Generator::State start{};
    if constexpr (requires { { op.generator } -> std::convertible_to<Generator*>; }) {
      generator = op.generator != nullptr ? op.generator : &default_generator();
      start = generator->get_state();
    }
    return [op, generator, start](std::span<const Tensor> given) {
      Op copy = op;  // a forward may write its op's members: each rerun starts from the original
      Inputs inputs = inputs_from<Inputs>(Op::id, given);
      GeneratorReplay replay(generator, start);
      HiddenObservers hidden;
      BelowAutocastGuard below;
      NoGradGuard no_grad;
      OpContext ctx;
      auto result = call_forward(copy, ctx, inputs);
      OutputList outputs;
      collect_outputs(result, outputs);
      std::vector<Tensor> values;
      values.reserve(outputs.size());
      for (Tensor* out : outputs) values.push_back(*out);
      return values;
    };
  }
}

// The six steps of a dispatch (above) for one call; run() puts the op's name on its errors.
template <class Op, class Inputs>
auto run_six_steps(Op op, Inputs inputs) {
  constexpr OpId id = Op::id;
  const std::span<Tensor> input_span(inputs.data(), inputs.size());

  // 1. validate
  const DeviceType device_type = common_device_type(id, input_span);
  check_float8_inputs(id, input_span);

  // 2. autocast (once, at the outermost op)
  const bool outermost = !is_below_autocast();
  const bool observed = has_observers();
  std::vector<DType> given_dtypes;
  // From here on, an observer that saw the call begin hears how it ended.
  ObservedCallGuard observed_call(id, observed);
  if (observed) {
    given_dtypes = dtypes_of(input_span);
    notify_op_begin({.op = id, .device_type = device_type, .outermost = outermost,
                     .inputs = input_span});
  }
  std::optional<CastPolicy> policy;
  if (outermost && is_autocast_enabled(device_type)) {
    bool eligible = true;
    if constexpr (HasAutocastEligible<Op>) eligible = op.autocast_eligible();
    if (eligible) {
      policy = cast_policy(id, device_type);
      apply_cast_policy(id, *policy, device_type, input_span);
    }
  }

  // An observer that reruns ops gets a copy of the op as it is before its forward.
  RerunFn rerun;
  if (observed && reruns_requested()) rerun = make_rerun<Op, Inputs>(op);

  // 3. kernel
  constexpr bool composite = is_composite<Op>();
  OpContext ctx;
  if constexpr (!composite) {
    if (autograd::is_grad_enabled()) ctx.start(inputs, backward_node_name(id));
  }
  const bool record = ctx.recording();
  auto result = [&] {
    BelowAutocastGuard below;
    if constexpr (composite) {
      return call_forward(op, ctx, inputs);
    } else {
      NoGradGuard no_grad;
      return call_forward(op, ctx, inputs);
    }
  }();
  const bool anomaly = autograd::is_anomaly_enabled() && !autograd::forward_checks_suspended();
  OutputList outputs;
  if (record || anomaly || observed) collect_outputs(result, outputs);

  // 4. autograd (a composite records the ops it called instead)
  if constexpr (!composite) {
    if (record) {
      auto node = make_pooled<OpNode<Op>>(std::move(op), std::move(ctx));
      node->next_edges = collect_edges(input_span);
      uint32_t output_nr = 0;
      for (Tensor* out : outputs) {
        if (!out->defined() || !out->is_floating_point()) continue;  // indices get no gradient
        node->outputs.push_back({out->sizes(), out->dtype(), out->device()});
        autograd::set_history(*out, node, output_nr++);
      }
      node->context().bind_outputs();
      if (autograd::is_anomaly_enabled()) {
        node->creation_context = autograd::describe_call(op_name(id), input_span);
      }
    }
  }

  // 5. anomaly
  if (anomaly) {
    std::vector<Tensor> values;
    for (Tensor* out : outputs) values.push_back(*out);
    autograd::check_forward_outputs(op_name(id), input_span, values);
  }

  // 6. observers (amp's trace and overflow watch)
  if (observed) {
    notify_observers({.op = id,
                      .device_type = device_type,
                      .outermost = outermost,
                      .policy = policy,
                      .fp8 = is_fp8<Op>(),
                      .given_dtypes = given_dtypes,
                      .inputs = input_span,
                      .outputs = outputs,
                      .rerun = rerun ? &rerun : nullptr});
    // After the observers: one that threw leaves the others a failed call to close.
    observed_call.finish();
  }
  return result;
}

// Rethrows an error from inside an op with the op's name in front, unless the message already
// starts with it ("mul: shapes [2, 3] and [4, 3] cannot be broadcast ..."), so every op's
// errors name the op, whichever helper found the problem.
[[noreturn]] void rethrow_naming(OpId op, const Error& error);

template <class Op, class Inputs>
auto run(Op op, Inputs inputs) {
  try {
    return run_six_steps(std::move(op), std::move(inputs));
  } catch (const Error& error) {
    rethrow_naming(Op::id, error);
  }
}

}  // namespace detail

// Dispatches an op with a fixed number of tensor inputs (an HG_FP8_OP op, in an fp8 region:
// its fp8_form instead).
template <class Op, class... Ts>
requires(std::is_same_v<std::remove_cvref_t<Ts>, Tensor>&&...) auto dispatch(Op op,
                                                                             const Ts&... inputs) {
  if constexpr (op_runs_in_fp8(Op::id) && !detail::is_fp8<Op>()) {
    static_assert(detail::HasFp8Form<Op, Ts...>,
                  "an op listed with HG_FP8_OP in op_list.def declares its fp8_form");
    const Tensor& first = std::get<0>(std::forward_as_tuple(inputs...));
    if (DelayedScaling* recipe = detail::fp8_recipe_for(first)) {
      return op.fp8_form(*recipe, inputs...);
    }
  } else {
    static_assert(!detail::HasFp8Form<Op, Ts...>,
                  "an op with an fp8_form is listed with HG_FP8_OP in op_list.def");
  }
  return detail::run(std::move(op), std::array<Tensor, sizeof...(Ts)>{inputs...});
}

// Dispatches an op that takes a list of tensors.
template <class Op>
auto dispatch_list(Op op, std::span<const Tensor> inputs) {
  return detail::run(std::move(op), std::vector<Tensor>(inputs.begin(), inputs.end()));
}

}  // namespace hg::ops
