// amp::AutocastTrace (amp/trace.h): the op calls autocast saw, as a table.
#include "halfgrad/amp/trace.h"

#include <algorithm>

#include "halfgrad/core/format.h"
#include "halfgrad/core/tensor.h"

namespace hg::amp {

namespace detail {
thread_local constinit AutocastTrace* current_trace = nullptr;
}  // namespace detail

namespace {

std::string join_dtypes(const std::vector<DType>& dtypes) {
  std::string text;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    if (i > 0) text += ", ";
    text += dtype_name(dtypes[i]);
  }
  return text;
}
}  // namespace

AutocastTrace::AutocastTrace() : previous_(detail::current_trace) { detail::current_trace = this; }
AutocastTrace::~AutocastTrace() { detail::current_trace = previous_; }

void AutocastTrace::on_op(const ops::OpCall& call) {
  if (!call.outermost || detail::current_trace != this) return;
  std::vector<DType> output_dtypes;
  for (const Tensor* out : call.outputs) {
    if (out->defined()) output_dtypes.push_back(out->dtype());
  }
  entries_.push_back({call.op, call.device_type, call.policy,
                      std::vector<DType>(call.given_dtypes.begin(), call.given_dtypes.end()),
                      std::move(output_dtypes), call.fp8});
}

std::string AutocastTrace::table() const {
  struct Row {
    std::string op, device, policy, inputs, outputs;
  };
  std::vector<Row> rows = {{"op", "device", "policy", "inputs", "output"}};
  for (const TraceEntry& e : entries_) {
    rows.push_back({std::string(op_name(e.op)), std::string(device_type_name(e.device_type)),
                    e.fp8      ? std::string("fp8")
                    : e.policy ? std::string(cast_policy_name(*e.policy))
                               : "(autocast off)",
                    join_dtypes(e.input_dtypes), join_dtypes(e.output_dtypes)});
  }
  size_t width[4] = {0, 0, 0, 0};
  for (const Row& r : rows) {
    width[0] = std::max(width[0], r.op.size());
    width[1] = std::max(width[1], r.device.size());
    width[2] = std::max(width[2], r.policy.size());
    width[3] = std::max(width[3], r.inputs.size());
  }
  std::string text;
  for (const Row& r : rows) {
    text += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {}\n", r.op, width[0], r.device, width[1],
                        r.policy, width[2], r.inputs, width[3], r.outputs);
  }
  return text;
}

}  // namespace hg::amp
