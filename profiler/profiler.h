// hg::profiler::Profile: torch.profiler for halfgrad. While a Profile records, every op its
// thread dispatches is kept with its inputs' shapes and dtypes, the autocast policy applied,
// its device, its module, its time and the ops it called.
//
//   profiler::Profile prof({.model = model.get()});     // records from here
//   Tensor loss = nn::functional::mse_loss((*model)(x), y);
//   loss.backward();
//   prof.stop();
//   fmt::print("{}", prof.table("self_cpu_time_total", 10));
//   prof.export_chrome_trace("trace.json");              // open in Perfetto or chrome://tracing
//
// NOTE [Profiler timing] An op's CPU interval is wall time (std::chrono::steady_clock) from the
// dispatcher's begin notification to its end notification (ops/observer.h), so it covers the
// autocast casts, the kernel, the autograd node and the ops it called; its self time is that
// minus its children's intervals. A CUDA op also gets two CUDA events recorded on halfgrad's
// current stream of its device around it, read once when the profile stops (one host sync per
// stop, never one per op): its CUDA time is the device time between them. The trace places the
// device intervals on the host's clock by one reference event recorded beside a host time when
// the first CUDA op began; that alignment assumes the device was idle then (otherwise the
// device track sits early by the queue's depth), while durations are exact.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "halfgrad/core/device.h"
#include "halfgrad/core/dtype.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/ops/op.h"

namespace hg::nn {
class Module;
}

namespace hg::profiler {

struct ProfileOptions {
  // When set, each module below the model is named by its dotted path in
  // model->named_modules() ("blocks.0.attn"); the model itself, the modules outside it, and
  // every module without a model, by their class name (Module::name()). The model must outlive
  // the recording.
  const nn::Module* model = nullptr;
};

// One recorded op call, one node the autograd engine applied (its backward function, named
// as the node: "LinearBackward", with the ops it dispatched as children), or one range of host
// code (an ops::RecordFunction, NOTE [Recorded ranges]: the optimizer's step and zero_grad,
// "Optimizer.step#AdamW.step" and "Optimizer.zero_grad#AdamW.zero_grad", and GradScaler's "GradScaler.scale", "GradScaler.unscale_",
// "GradScaler.step", "GradScaler.update", with the ops they ran as children). Times are
// nanoseconds since the profile was made.
struct Event {
  std::optional<OpId> op;  // nullopt for a backward node or a range
  bool range = false;      // a range: on the CPU, its CUDA time that of the ops inside it
  std::string name;        // op_name(op), the node's name, or the range's
  Device device;
  std::optional<CastPolicy> policy;  // nullopt: autocast applied none
  // The defined tensor inputs as the caller gave them (before autocast's casts).
  std::vector<std::vector<int64_t>> input_shapes;
  std::vector<DType> input_dtypes;
  // The modules whose forward was running, outermost first; module is the innermost ("" when
  // none, as in backward).
  std::vector<std::string> module_stack;
  std::string module;
  int64_t start_ns = 0;
  int64_t cpu_ns = 0;  // host wall time, children included
  // A CUDA op's device interval (its start on the host's clock, NOTE [Profiler timing]); -1 and
  // 0 for a CPU op.
  int64_t cuda_start_ns = -1;
  int64_t cuda_ns = 0;
  int64_t parent = -1;  // index in events() of the op that called this one
  int depth = 0;        // 0 for an op the user called
  bool failed = false;  // the op threw
};

// key_averages' grouping: always by op name, then optionally by these.
struct GroupBy {
  bool input_shape = false;  // torch's group_by_input_shape
  bool module = false;       // the innermost module
};

// The events of one group, summed (times in microseconds, as torch's tables).
struct KeyAverage {
  std::string key;           // the op name
  std::string input_shapes;  // "[[4, 8], [16, 8], [16]]" when grouped by input shape
  std::string module;        // when grouped by module
  int64_t count = 0;
  double cpu_time_total = 0.0;
  double self_cpu_time_total = 0.0;
  double cuda_time_total = 0.0;
  double self_cuda_time_total = 0.0;
  double cpu_time_avg() const { return count > 0 ? cpu_time_total / double(count) : 0.0; }
  double cuda_time_avg() const { return count > 0 ? cuda_time_total / double(count) : 0.0; }
};

class Recorder;

// Records the ops (and backward nodes) of the thread that makes it, from construction (or start())
// to stop() or its destruction. Profiles nest, and a profile on one thread never sees another
// thread's ops. A Profile is used from the thread that made it and is not moved while it records.
class Profile {
 public:
  explicit Profile(ProfileOptions options = {});
  ~Profile();
  Profile(const Profile&) = delete;
  Profile& operator=(const Profile&) = delete;

  // Records again, after the events so far (an error while recording).
  void start();
  // Stops recording and reads the CUDA events' times (an error when not recording).
  void stop();
  bool recording() const { return recorder_ != nullptr; }

  // The recorded calls in the order they began. These read a stopped profile only (an error
  // while it records: its CUDA times are not known yet).
  const std::vector<Event>& events() const;
  // Per op name (and per input shapes or module, as `group_by` says), in order of first call.
  std::vector<KeyAverage> key_averages(GroupBy group_by = {}) const;
  // torch's key_averages().table(): the `row_limit` largest groups by `sort_by`
  // ("cpu_time_total", "self_cpu_time_total", "cuda_time_total", "self_cuda_time_total",
  // "count"; "" for cuda_time_total when a CUDA op was recorded and cpu_time_total otherwise),
  // then the totals, then the CPU GEMM paths of gemm_choices() (a heading and a line each).
  // row_limit < 0: every row.
  std::string table(std::string_view sort_by = "", int64_t row_limit = 100,
                    GroupBy group_by = {}) const;
  // The Chrome trace event format (chrome://tracing, ui.perfetto.dev): one complete event per
  // op, node and range on its thread's track (category cpu_op, backward or user_annotation)
  // and, for CUDA ops, one on the device's track; times in microseconds.
  void export_chrome_trace(const std::string& path) const;
  std::string chrome_trace() const;
  // The CPU GEMMs' shape classes that ran while recording, each with the path it ran on (NOTE
  // [GEMM path by measurement] in cpu/gemm_path.cpp) and, in `calls`, its products while
  // recording. The counts are the process's: another thread's products of a class count too.
  const std::vector<cpu::GemmChoice>& gemm_choices() const;

 private:
  void check_stopped(std::string_view what) const;
  // Observers are per thread: start and stop on another one would miss or corrupt its list.
  void check_thread(std::string_view what) const;

  ProfileOptions options_;
  int64_t origin_ns_;  // steady_clock time the event times count from
  int64_t thread_id_;  // the trace's tid of the thread that made the profile
  std::vector<Event> events_;
  std::vector<cpu::GemmChoice> gemm_choices_;
  std::vector<cpu::GemmChoice> gemm_choices_at_start_;
  std::unique_ptr<Recorder> recorder_;
};

}  // namespace hg::profiler
