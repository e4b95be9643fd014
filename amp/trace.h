// AutocastTrace: the teaching view of autocast. While a trace is alive, every op dispatched
// on this thread is recorded with its cast policy and the dtypes that went in and came out.
//
//   amp::AutocastTrace trace;
//   { amp::Autocast autocast(kCPU); y = model(x); }
//   fmt::print("{}", trace.table());
//   // op          device  policy              inputs             output
//   // linear      cpu     lower_precision_fp  float32, float32   bfloat16
//   // layer_norm  cpu     unlisted            bfloat16, ...      bfloat16
//
// An op that ran in float8 under amp::Fp8Autocast shows "fp8" as its policy.
//
// Only the outermost call of a composite op is recorded, as autocast sees it; the casts
// autocast inserts are not separate entries (the inputs column shows the dtypes before).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/ops/observer.h"
#include "halfgrad/ops/op.h"

namespace hg::amp {

struct TraceEntry {
  OpId op;
  DeviceType device_type;
  std::optional<CastPolicy> policy;  // nullopt: autocast was off for this device
  std::vector<DType> input_dtypes;   // floating and integer tensor inputs, as given
  std::vector<DType> output_dtypes;
  bool fp8 = false;  // ran in float8 under amp::Fp8Autocast (NOTE [Fp8 ops]); policy is nullopt
};

// A dispatch observer (ops/observer.h); only the innermost live trace of a thread records.
class AutocastTrace final : public ops::DispatchObserver {
 public:
  AutocastTrace();
  ~AutocastTrace() override;

  const std::vector<TraceEntry>& entries() const { return entries_; }
  // The entries as an aligned text table, one op per line.
  std::string table() const;

  // Records an outermost op call while this is the thread's innermost trace.
  void on_op(const ops::OpCall& call) override;

 private:
  std::vector<TraceEntry> entries_;
  AutocastTrace* previous_;
};

namespace detail {
extern thread_local constinit AutocastTrace* current_trace;
}  // namespace detail

// The innermost live trace of this thread, or null (read inline by every op).
inline AutocastTrace* active_trace() { return detail::current_trace; }

}  // namespace hg::amp
