// The dispatcher's out-of-line steps (ops/dispatch.h): device checks, cast policies, edges,
// backward node names, error naming, the list of dispatch observers and the recorded ranges
// (ops/observer.h).
#include "halfgrad/ops/dispatch.h"

#include <array>
#include <cctype>
#include <string>

#include "halfgrad/core/format.h"

namespace hg::ops {

void OpContext::bind_outputs() {
  // The handles share the outputs' TensorImpl, whose meta now names the node.
  for (const auto& [index, output] : saved_outputs_) {
    saved_[index] = autograd::SavedTensor(output, /*is_output=*/true);
  }
  saved_outputs_.clear();
}

OpContext OpContext::widened() const {
  OpContext wide;
  wide.recording_ = true;
  wide.needs_input_grad_ = needs_input_grad_;
  wide.node_name_ = node_name_;
  wide.saved_.reserve(saved_.size());
  for (const autograd::SavedTensor& saved : saved_) {
    Tensor t = saved.unpack_data(node_name_);
    if (t.defined() && t.is_floating_point() && t.dtype() != kFloat64) t = t.to(kFloat64);
    wide.saved_.emplace_back(t, /*is_output=*/false);
  }
  return wide;
}

std::string_view backward_node_name(OpId op) {
  static const std::array<std::string, kNumOps> names = [] {
    std::array<std::string, kNumOps> made;
    for (const OpInfo& info : all_ops()) {
      std::string& name = made[size_t(info.id)];
      bool upper = true;
      for (char c : info.name) {
        if (c == '_') {
          upper = true;
          continue;
        }
        name.push_back(upper ? char(std::toupper(static_cast<unsigned char>(c))) : c);
        upper = false;
      }
      name += "Backward";
    }
    return made;
  }();
  return names[size_t(op)];
}

namespace detail {

void rethrow_naming(OpId op, const Error& error) {
  const std::string_view message = error.what();
  const std::string_view name = op_name(op);
  if (message.starts_with(name) && message.substr(name.size()).starts_with(":")) throw;
  throw Error(fmt::format("{}: {}", name, message), error.file(), error.line());
}

DeviceType common_device_type(OpId op, std::span<const Tensor> inputs) {
  const Tensor* first = nullptr;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    if (first == nullptr) {
      first = &inputs[i];
      continue;
    }
    HG_CHECK(inputs[i].device() == first->device(),
             "{}: expected all tensors on one device, got {} for the first and {} for input {}",
             op_name(op), first->device(), inputs[i].device(), i);
  }
  return first ? first->device().type : kCPU;
}

void check_float8_inputs(OpId op, std::span<const Tensor> inputs) {
  switch (op) {  // NOTE [Float8 is conversion only] (core/dtype.h): these move elements only
    case OpId::to_dtype:
    case OpId::scaled_mm:  // float8 operands by definition (ops/linalg.h)
    case OpId::clone:
    case OpId::view:
    case OpId::reshape:
    case OpId::expand:
    case OpId::transpose:
    case OpId::permute:
    case OpId::slice:
    case OpId::select:
    case OpId::squeeze:
    case OpId::unsqueeze:
      return;
    default:
      break;
  }
  for (const Tensor& t : inputs) {
    if (t.defined() && is_float8(t.dtype())) throw_float8_conversion_only(t.dtype());
  }
}

void apply_cast_policy(OpId op, CastPolicy policy, DeviceType device_type,
                       std::span<Tensor> inputs) {
  // The casts are ops themselves; they are not autocast entries of their own.
  BelowAutocastGuard below;
  switch (policy) {
    case CastPolicy::LowerPrecision: {
      const DType target = get_autocast_dtype(device_type);
      for (Tensor& t : inputs) t = autocast_input(t, target, device_type);
      return;
    }
    case CastPolicy::Fp32:
      for (Tensor& t : inputs) t = autocast_input(t, kFloat32, device_type);
      return;
    case CastPolicy::Promote: {
      std::optional<DType> widest;
      for (const Tensor& t : inputs) {
        if (t.defined() && t.is_floating_point()) {
          widest = widest ? promote_types(*widest, t.dtype()) : t.dtype();
        }
      }
      if (!widest) return;
      for (Tensor& t : inputs) {
        if (t.defined() && t.is_floating_point() && t.dtype() != *widest) t = t.to(*widest);
      }
      return;
    }
    case CastPolicy::Banned:
      HG_ERROR(
          "{} is unsafe to autocast on {}: its gradient cannot be represented in lower "
          "precision. Use binary_cross_entropy_with_logits (which fuses the sigmoid and is safe "
          "under autocast), or call {} outside the autocast region (or in a region with "
          "amp::Autocast(..., std::nullopt, /*enabled=*/false))",
          op_name(op), device_type_name(device_type), op_name(op));
    case CastPolicy::Unlisted:
      return;
  }
}

autograd::EdgeList collect_edges(std::span<const Tensor> inputs) {
  autograd::EdgeList edges;
  edges.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    edges.push_back(t.defined() ? autograd::gradient_edge(t) : autograd::Edge{});
  }
  return edges;
}

std::vector<DType> dtypes_of(std::span<const Tensor> inputs) {
  std::vector<DType> dtypes;
  for (const Tensor& t : inputs) {
    if (t.defined()) dtypes.push_back(t.dtype());
  }
  return dtypes;
}

}  // namespace detail

// ---- observers ---------------------------------------------------------------------------------

namespace detail {
thread_local constinit DispatchObserver* first_observer = nullptr;
thread_local constinit int64_t reruns_built = 0;
}  // namespace detail

bool reruns_requested() {
  for (DispatchObserver* observer = detail::first_observer; observer != nullptr;
       observer = observer->next_) {
    if (observer->wants_reruns_) return true;
  }
  return false;
}

DispatchObserver::DispatchObserver() : next_(detail::first_observer) {
  detail::first_observer = this;
}

DispatchObserver::~DispatchObserver() {
  DispatchObserver** link = &detail::first_observer;
  while (*link != nullptr && *link != this) link = &(*link)->next_;
  if (*link == this) *link = next_;
}

void notify_observers(const OpCall& call) {
  for (DispatchObserver* observer = detail::first_observer; observer != nullptr;
       observer = observer->next_) {
    observer->on_op(call);
  }
}

void notify_op_begin(const OpBegin& call) {
  for (DispatchObserver* observer = detail::first_observer; observer != nullptr;
       observer = observer->next_) {
    observer->on_op_begin(call);
  }
}

void notify_node(const NodeCall& call) {
  for (DispatchObserver* observer = detail::first_observer; observer != nullptr;
       observer = observer->next_) {
    observer->on_node(call);
  }
}

// ---- recorded ranges (NOTE [Recorded ranges]) -------------------------------------------------

namespace detail {
thread_local constinit RecordFunction* innermost_range = nullptr;
}  // namespace detail

RecordFunction::RecordFunction(std::string_view name, RangeKind kind)
    : enclosing_(detail::innermost_range), kind_(kind), observed_(has_observers()) {
  detail::innermost_range = this;
  if (!observed_) return;
  for (DispatchObserver* observer = detail::first_observer; observer != nullptr;
       observer = observer->next_) {
    observer->on_range_begin(this, name, kind);
  }
}

RecordFunction::~RecordFunction() {
  detail::innermost_range = enclosing_;
  if (!observed_) return;
  for (DispatchObserver* observer = detail::first_observer; observer != nullptr;
       observer = observer->next_) {
    observer->on_range_end(this);
  }
}

void notify_op_failed(OpId op) noexcept {
  for (DispatchObserver* observer = detail::first_observer; observer != nullptr;
       observer = observer->next_) {
    observer->on_op_failed(op);
  }
}

}  // namespace hg::ops
