// hg::profiler::Profile (profiler/profiler.h): a dispatch observer that records op intervals,
// and the tables and trace made from them.
#include "halfgrad/profiler/profiler.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <tuple>
#include <unordered_map>

#include "halfgrad/autograd/engine.h"
#include "halfgrad/autograd/node.h"
#include "halfgrad/config.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/tensor.h"
#include "halfgrad/core/text_file.h"
#include "halfgrad/nn/module.h"
#include "halfgrad/ops/observer.h"
#if HALFGRAD_HAS_CUDA
#include "halfgrad/cuda/cuda.h"
#include "halfgrad/cuda/stream.h"
#endif

namespace hg::profiler {

namespace {

int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A small number per thread for the trace's tid (the first thread to profile is 1).
int64_t thread_ordinal() {
  static std::atomic<int64_t> next{1};
  thread_local const int64_t ordinal = next.fetch_add(1);
  return ordinal;
}

// The device track of CUDA device d is tid kCudaTrack + d, beside the host threads' small tids.
constexpr int64_t kCudaTrack = 1'000'000;

void add_paths(const nn::Module& module, const std::string& path,
               std::unordered_map<const nn::Module*, std::string>& paths) {
  for (const auto& [name, child] : module.named_children()) {
    const std::string child_path = path.empty() ? name : path + "." + name;
    paths.emplace(child.get(), child_path);  // a module registered twice keeps its first path
    add_paths(*child, child_path, paths);
  }
}

}  // namespace

// ---- recording --------------------------------------------------------------------------------

// The observer of one recording stretch: made by start(), destroyed by stop().
class Recorder final : public ops::DispatchObserver, public autograd::NodeObserver {
 public:
  Recorder(const ProfileOptions& options, int64_t origin_ns, std::vector<Event>& events)
      : origin_ns_(origin_ns), events_(events) {
    if (options.model != nullptr) add_paths(*options.model, "", module_paths_);
  }

  void on_op_begin(const ops::OpBegin& call) override {
    Event event;
    event.op = call.op;
    event.name = op_name(call.op);
    event.device = Device(call.device_type);
    for (const Tensor& input : call.inputs) {
      if (!input.defined()) continue;
      if (event.input_shapes.empty()) event.device = input.device();
      event.input_shapes.emplace_back(input.sizes().begin(), input.sizes().end());
      event.input_dtypes.push_back(input.dtype());
    }
    for (const nn::Module* module : nn::forward_stack()) {
      event.module_stack.push_back(module_name(*module));
    }
    if (!event.module_stack.empty()) event.module = event.module_stack.back();
    open(std::move(event), {.op = call.op});
  }

  void on_op(const ops::OpCall& call) override {
    close({.op = call.op}, call.policy, /*failed=*/false);
  }

  void on_op_failed(OpId op) noexcept override { close_noexcept({.op = op}, /*failed=*/true); }

  // A backward node: the engine's device is the one of the node's first output.
  void on_node_begin(const autograd::Node& node) override {
    Event event;
    event.name = node.name();
    if (!node.outputs.empty()) event.device = node.outputs.front().device;
    open(std::move(event), {.op = std::nullopt, .node = &node});
  }

  void on_node_end(const autograd::Node& node) noexcept override {
    close_noexcept({.op = std::nullopt, .node = &node}, /*failed=*/false);
  }

  // A range of host code (NOTE [Recorded ranges]): on the host, in the modules running.
  void on_range_begin(const void* range, std::string_view name, ops::RangeKind) override {
    Event event;
    event.range = true;
    event.name = std::string(name);
    for (const nn::Module* module : nn::forward_stack()) {
      event.module_stack.push_back(module_name(*module));
    }
    if (!event.module_stack.empty()) event.module = event.module_stack.back();
    open(std::move(event), {.op = std::nullopt, .range = range});
  }

  void on_range_end(const void* range) noexcept override {
    close_noexcept({.op = std::nullopt, .range = range}, /*failed=*/false);
  }

  // Closes the calls still open (stop() from inside an op, as from a hook) and reads the
  // CUDA times.
  void finish() {
    const int64_t now = steady_now_ns() - origin_ns_;
    for (const OpenCall& open : open_)
      events_[open.event].cpu_ns = now - events_[open.event].start_ns;
    open_.clear();
#if HALFGRAD_HAS_CUDA
    read_cuda_times();
#endif
    // A range has no device interval of its own: its CUDA time is its children's (so its self
    // CUDA time is 0). Children come after their parent, so the innermost ranges sum first.
    std::vector<int64_t> child_cuda_ns(events_.size(), 0);
    for (size_t i = events_.size(); i-- > 0;) {
      Event& event = events_[i];
      if (event.range) event.cuda_ns = child_cuda_ns[i];
      if (event.parent >= 0) child_cuda_ns[size_t(event.parent)] += event.cuda_ns;
    }
  }

 private:
  // What an end notification names: the op, or the backward node.
  struct CallKey {
    std::optional<OpId> op;
    const autograd::Node* node = nullptr;
    const void* range = nullptr;
    bool operator==(const CallKey&) const = default;
  };
  struct OpenCall {
    size_t event;
    CallKey key;
    int64_t cuda_interval = -1;
  };

  void open(Event event, CallKey key) {
    event.parent = open_.empty() ? -1 : int64_t(open_.back().event);
    event.depth = int(open_.size());
    events_.push_back(std::move(event));
    open_.push_back({.event = events_.size() - 1, .key = key});
#if HALFGRAD_HAS_CUDA
    if (events_.back().device.is_cuda()) begin_cuda(open_.back(), events_.back().device.index);
#endif
    // Last, so that the bookkeeping above counts to the caller, not to this call.
    events_.back().start_ns = steady_now_ns() - origin_ns_;
  }

  void close_noexcept(CallKey key, bool failed) noexcept {
    try {
      close(key, std::nullopt, failed);
    } catch (...) {
      // A CUDA error while recording the end event: the call's device time stays unknown.
    }
  }

  // Closes the innermost open call when it is `key` (a call that began before this recorder,
  // or a failure heard after its on_op, has nothing to close).
  void close(CallKey key, std::optional<CastPolicy> policy, bool failed) {
    const int64_t end_ns = steady_now_ns() - origin_ns_;
    if (open_.empty() || !(open_.back().key == key)) return;
    const OpenCall open = open_.back();
    open_.pop_back();
    Event& event = events_[open.event];
    event.cpu_ns = end_ns - event.start_ns;
    event.policy = policy;
    event.failed = failed;
#if HALFGRAD_HAS_CUDA
    if (open.cuda_interval >= 0) end_cuda(cuda_intervals_[size_t(open.cuda_interval)]);
#endif
  }

  const std::string& module_name(const nn::Module& module) {
    if (auto it = module_paths_.find(&module); it != module_paths_.end()) return it->second;
    // Outside the model (or no model): the class name, looked up each time (the address may be
    // reused by another module later).
    class_name_ = module.name();
    return class_name_;
  }

  int64_t origin_ns_;
  std::vector<Event>& events_;
  std::vector<OpenCall> open_;
  std::unordered_map<const nn::Module*, std::string> module_paths_;
  std::string class_name_;

#if HALFGRAD_HAS_CUDA
  struct CudaInterval {
    size_t event;
    int device;
    cudaStream_t stream;
    std::unique_ptr<cuda::Event> start, end;
    bool ended = false;
  };
  // Where a device's intervals sit on the host's clock (NOTE [Profiler timing]).
  struct DeviceClock {
    std::unique_ptr<cuda::Event> reference;
    int64_t host_ns = 0;
  };

  // Events are made on the op's device, as its stream is.
  void begin_cuda(OpenCall& open, int device) {
    // A graph being captured replays later: its ops get no device time.
    if (cuda::is_current_stream_capturing(device)) return;
    cuda::DeviceGuard on_device(device);
    const cudaStream_t stream = cuda::current_stream(device);
    DeviceClock& clock = clocks_[device];
    if (clock.reference == nullptr) {
      clock.reference = std::make_unique<cuda::Event>();
      clock.reference->record(stream);
      clock.host_ns = steady_now_ns() - origin_ns_;
    }
    CudaInterval interval{.event = open.event,
                          .device = device,
                          .stream = stream,
                          .start = std::make_unique<cuda::Event>(),
                          .end = std::make_unique<cuda::Event>()};
    interval.start->record(stream);
    open.cuda_interval = int64_t(cuda_intervals_.size());
    cuda_intervals_.push_back(std::move(interval));
  }

  void end_cuda(CudaInterval& interval) {
    cuda::DeviceGuard on_device(interval.device);
    interval.end->record(interval.stream);
    interval.ended = true;
  }

  // The one host wait of a profile: for each interval's end event, then the times.
  void read_cuda_times() {
    for (CudaInterval& interval : cuda_intervals_) {
      if (!interval.ended) continue;
      interval.end->synchronize();
      const DeviceClock& clock = clocks_.at(interval.device);
      Event& event = events_[interval.event];
      event.cuda_start_ns =
          clock.host_ns + int64_t(double(clock.reference->elapsed_ms(*interval.start)) * 1e6);
      event.cuda_ns = int64_t(double(interval.start->elapsed_ms(*interval.end)) * 1e6);
    }
    cuda_intervals_.clear();
  }

  std::vector<CudaInterval> cuda_intervals_;
  std::map<int, DeviceClock> clocks_;
#endif
};

// ---- Profile ----------------------------------------------------------------------------------

Profile::Profile(ProfileOptions options) : options_(options), origin_ns_(steady_now_ns()) {
  thread_id_ = thread_ordinal();
  start();
}

Profile::~Profile() {
  try {
    if (recording()) stop();
  } catch (...) {
    // A CUDA error reading the times: nothing to report it to from a destructor.
  }
}

void Profile::check_thread(std::string_view what) const {
  HG_CHECK(thread_ordinal() == thread_id_,
           "Profile::{}: expected the thread that made the profile (thread {}), got thread {}",
           what, thread_id_, thread_ordinal());
}

void Profile::start() {
  check_thread("start");
  HG_CHECK(!recording(), "Profile::start: expected a stopped profile, got one recording");
  recorder_ = std::make_unique<Recorder>(options_, origin_ns_, events_);
  gemm_choices_at_start_ = cpu::gemm_choices();
}

namespace {

// The classes of `now` whose calls grew since `before`, with the growth as their calls.
std::vector<cpu::GemmChoice> grown_choices(const std::vector<cpu::GemmChoice>& before,
                                           std::vector<cpu::GemmChoice> now) {
  std::vector<cpu::GemmChoice> grown;
  for (cpu::GemmChoice& choice : now) {
    for (const cpu::GemmChoice& old : before) {
      if (old.dtype == choice.dtype && old.threads == choice.threads &&
          old.shape_class == choice.shape_class && old.path == choice.path) {
        choice.calls -= old.calls;
        break;
      }
    }
    if (choice.calls > 0) grown.push_back(std::move(choice));
  }
  return grown;
}

}  // namespace

void Profile::stop() {
  check_thread("stop");
  HG_CHECK(recording(), "Profile::stop: expected a recording profile, got one stopped");
  // The recorder leaves the thread's observers even when reading the CUDA times throws.
  const std::unique_ptr<Recorder> recorder = std::move(recorder_);
  for (cpu::GemmChoice& choice : grown_choices(gemm_choices_at_start_, cpu::gemm_choices())) {
    // A class met in an earlier recording of this profile adds to its line.
    const auto same = std::find_if(gemm_choices_.begin(), gemm_choices_.end(), [&](const auto& c) {
      return c.dtype == choice.dtype && c.threads == choice.threads &&
             c.shape_class == choice.shape_class && c.path == choice.path;
    });
    if (same != gemm_choices_.end()) {
      same->calls += choice.calls;
    } else {
      gemm_choices_.push_back(std::move(choice));
    }
  }
  recorder->finish();
}

const std::vector<cpu::GemmChoice>& Profile::gemm_choices() const {
  check_stopped("gemm_choices");
  return gemm_choices_;
}

void Profile::check_stopped(std::string_view what) const {
  HG_CHECK(!recording(),
           "Profile::{}: expected a stopped profile (call stop() first), got one "
           "recording",
           what);
}

const std::vector<Event>& Profile::events() const {
  check_stopped("events");
  return events_;
}

// ---- key averages and the table ---------------------------------------------------------------

namespace {

std::string shapes_text(const std::vector<std::vector<int64_t>>& shapes) {
  std::string text = "[";
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i > 0) text += ", ";
    text += fmt::format("[{}]", fmt::join(shapes[i], ", "));
  }
  return text + "]";
}

// Each event's children's times, summed: its total minus these is its self time.
struct ChildTimes {
  std::vector<int64_t> cpu_ns, cuda_ns;
};
ChildTimes child_times(const std::vector<Event>& events) {
  ChildTimes sums{std::vector<int64_t>(events.size(), 0), std::vector<int64_t>(events.size(), 0)};
  for (const Event& event : events) {
    if (event.parent < 0) continue;
    sums.cpu_ns[size_t(event.parent)] += event.cpu_ns;
    sums.cuda_ns[size_t(event.parent)] += event.cuda_ns;
  }
  return sums;
}

// torch's time format: "812.000us", "1.234ms", "2.500s".
std::string format_us(double us) {
  if (us >= 1e6) return fmt::format("{:.3f}s", us / 1e6);
  if (us >= 1e3) return fmt::format("{:.3f}ms", us / 1e3);
  return fmt::format("{:.3f}us", us);
}

std::string format_percent(double part, double whole) {
  return fmt::format("{:.2f}%", whole > 0.0 ? 100.0 * part / whole : 0.0);
}

}  // namespace

std::vector<KeyAverage> Profile::key_averages(GroupBy group_by) const {
  check_stopped("key_averages");
  const ChildTimes children = child_times(events_);
  std::vector<KeyAverage> averages;
  std::map<std::tuple<std::string_view, std::string, std::string>, size_t> index;
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& event = events_[i];
    std::string shapes = group_by.input_shape ? shapes_text(event.input_shapes) : "";
    std::string module = group_by.module ? event.module : "";
    auto [it, added] = index.try_emplace({event.name, shapes, module}, averages.size());
    if (added) {
      averages.push_back(
          {.key = event.name, .input_shapes = std::move(shapes), .module = std::move(module)});
    }
    KeyAverage& average = averages[it->second];
    average.count += 1;
    average.cpu_time_total += double(event.cpu_ns) / 1e3;
    average.self_cpu_time_total += double(event.cpu_ns - children.cpu_ns[i]) / 1e3;
    average.cuda_time_total += double(event.cuda_ns) / 1e3;
    average.self_cuda_time_total += double(event.cuda_ns - children.cuda_ns[i]) / 1e3;
  }
  return averages;
}

std::string Profile::table(std::string_view sort_by, int64_t row_limit, GroupBy group_by) const {
  check_stopped("table");
  std::vector<KeyAverage> rows = key_averages(group_by);
  const bool has_cuda = std::any_of(events_.begin(), events_.end(),
                                    [](const Event& e) { return e.device.is_cuda(); });
  if (sort_by.empty()) sort_by = has_cuda ? "cuda_time_total" : "cpu_time_total";
  using Key = double (*)(const KeyAverage&);
  static const std::map<std::string_view, Key> keys = {
      {"cpu_time_total", [](const KeyAverage& a) { return a.cpu_time_total; }},
      {"self_cpu_time_total", [](const KeyAverage& a) { return a.self_cpu_time_total; }},
      {"cuda_time_total", [](const KeyAverage& a) { return a.cuda_time_total; }},
      {"self_cuda_time_total", [](const KeyAverage& a) { return a.self_cuda_time_total; }},
      {"count", [](const KeyAverage& a) { return double(a.count); }},
  };
  const auto key = keys.find(sort_by);
  HG_CHECK(key != keys.end(),
           "Profile::table: expected sort_by cpu_time_total, self_cpu_time_total, "
           "cuda_time_total, self_cuda_time_total or count, got '{}'",
           sort_by);
  std::stable_sort(rows.begin(), rows.end(), [&](const KeyAverage& a, const KeyAverage& b) {
    return key->second(a) > key->second(b);
  });
  if (row_limit >= 0 && size_t(row_limit) < rows.size()) rows.resize(size_t(row_limit));

  double self_cpu_total = 0.0, self_cuda_total = 0.0;
  for (const KeyAverage& a : key_averages(group_by)) {
    self_cpu_total += a.self_cpu_time_total;
    self_cuda_total += a.self_cuda_time_total;
  }

  // Columns: the name is as wide as the longest, the numbers 12 wide, all right-aligned.
  constexpr size_t kNameCap = 55;
  size_t name_width = 4;
  for (const KeyAverage& a : rows) name_width = std::max(name_width, a.key.size());
  name_width = std::min(name_width, kNameCap);
  struct Column {
    std::string title;
    size_t width;
  };
  std::vector<Column> columns = {{"Name", name_width}, {"Self CPU %", 12}, {"Self CPU", 12},
                                 {"CPU total %", 12},  {"CPU total", 12},  {"CPU time avg", 12}};
  if (has_cuda) {
    for (const char* title : {"Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"}) {
      columns.push_back({title, 12});
    }
  }
  columns.push_back({"# of Calls", 12});
  size_t module_width = 6, shapes_width = 12;
  for (const KeyAverage& a : rows) {
    module_width = std::max(module_width, a.module.size());
    shapes_width = std::max(shapes_width, a.input_shapes.size());
  }
  if (group_by.module) columns.push_back({"Module", module_width});
  if (group_by.input_shape) columns.push_back({"Input Shapes", shapes_width});

  std::string rule, text;
  for (const Column& c : columns) rule += std::string(c.width, '-') + "  ";
  rule += "\n";
  auto add_line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) {
      text += fmt::format("{:>{}}  ", cells[i], columns[i].width);
    }
    text += "\n";
  };
  text += rule;
  std::vector<std::string> titles;
  for (const Column& c : columns) titles.push_back(c.title);
  add_line(titles);
  text += rule;
  for (const KeyAverage& a : rows) {
    std::string name = a.key;
    if (name.size() > kNameCap) name = name.substr(0, kNameCap - 3) + "...";
    std::vector<std::string> cells = {name,
                                      format_percent(a.self_cpu_time_total, self_cpu_total),
                                      format_us(a.self_cpu_time_total),
                                      format_percent(a.cpu_time_total, self_cpu_total),
                                      format_us(a.cpu_time_total),
                                      format_us(a.cpu_time_avg())};
    if (has_cuda) {
      cells.push_back(format_us(a.self_cuda_time_total));
      cells.push_back(format_percent(a.self_cuda_time_total, self_cuda_total));
      cells.push_back(format_us(a.cuda_time_total));
      cells.push_back(format_us(a.cuda_time_avg()));
    }
    cells.push_back(fmt::format("{}", a.count));
    if (group_by.module) cells.push_back(a.module);
    if (group_by.input_shape) cells.push_back(a.input_shapes);
    add_line(cells);
  }
  text += rule;
  text += fmt::format("Self CPU time total: {}\n", format_us(self_cpu_total));
  if (has_cuda) text += fmt::format("Self CUDA time total: {}\n", format_us(self_cuda_total));
  if (!gemm_choices_.empty()) {
    text += "CPU GEMM paths (calls while recording):\n";
    for (const cpu::GemmChoice& choice : gemm_choices_) text += "  " + cpu::describe(choice) + "\n";
  }
  return text;
}

// ---- Chrome trace -----------------------------------------------------------------------------

namespace {

// A JSON string literal: quotes, backslashes and control characters escaped; other bytes (UTF-8)
// as they are.
std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

// Nanoseconds as microseconds with three decimals, exactly (no rounding through a double).
std::string json_us(int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  const uint64_t magnitude = ns < 0 ? uint64_t(-(ns + 1)) + 1 : uint64_t(ns);
  return fmt::format("{}{}.{:03}", sign, magnitude / 1000, magnitude % 1000);
}

// The trace's category, as torch's: an op, a backward node, or a range (record_function).
const char* category(const Event& event) {
  if (event.range) return "user_annotation";
  return event.op ? "cpu_op" : "backward";
}

std::string event_args(const Event& event) {
  std::string shapes = "[";
  for (size_t i = 0; i < event.input_shapes.size(); ++i) {
    if (i > 0) shapes += ", ";
    shapes += fmt::format("[{}]", fmt::join(event.input_shapes[i], ", "));
  }
  shapes += "]";
  std::string dtypes = "[", stack = "[";
  for (size_t i = 0; i < event.input_dtypes.size(); ++i) {
    if (i > 0) dtypes += ", ";
    dtypes += json_string(dtype_name(event.input_dtypes[i]));
  }
  for (size_t i = 0; i < event.module_stack.size(); ++i) {
    if (i > 0) stack += ", ";
    stack += json_string(event.module_stack[i]);
  }
  dtypes += "]";
  stack += "]";
  return fmt::format(
      "{{\"shapes\": {}, \"dtypes\": {}, \"policy\": {}, \"module\": {}, \"module_stack\": {}, "
      "\"device\": {}{}}}",
      shapes, dtypes,
      event.policy ? json_string(cast_policy_name(*event.policy)) : std::string("null"),
      json_string(event.module), stack, json_string(fmt::format("{}", event.device)),
      event.failed ? ", \"failed\": true" : "");
}

}  // namespace

std::string Profile::chrome_trace() const {
  check_stopped("chrome_trace");
  const int64_t pid = getpid();
  std::string out = "{\"traceEvents\": [\n";
  bool first = true;
  auto add = [&](const std::string& line) {
    if (!first) out += ",\n";
    out += line;
    first = false;
  };
  std::vector<int> devices;
  for (const Event& event : events_) {
    const std::string args = event_args(event);
    add(fmt::format(
        "{{\"name\": {}, \"ph\": \"X\", \"cat\": \"{}\", \"ts\": {}, \"dur\": {}, \"pid\": {}, "
        "\"tid\": {}, \"args\": {}}}",
        json_string(event.name), category(event), json_us(event.start_ns), json_us(event.cpu_ns),
        pid, thread_id_, args));
    if (event.cuda_start_ns >= 0) {
      add(fmt::format(
          "{{\"name\": {}, \"ph\": \"X\", \"cat\": \"cuda_op\", \"ts\": {}, \"dur\": {}, "
          "\"pid\": {}, \"tid\": {}, \"args\": {}}}",
          json_string(event.name), json_us(event.cuda_start_ns), json_us(event.cuda_ns), pid,
          kCudaTrack + event.device.index, args));
      if (std::find(devices.begin(), devices.end(), event.device.index) == devices.end()) {
        devices.push_back(event.device.index);
      }
    }
  }
  // Track names (metadata events: no time of their own).
  add(
      fmt::format("{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, "
                  "\"args\": {{\"name\": \"CPU thread {}\"}}}}",
                  pid, thread_id_, thread_id_));
  for (int device : devices) {
    add(
        fmt::format("{{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": {}, \"tid\": {}, "
                    "\"args\": {{\"name\": \"CUDA device {} (halfgrad's stream)\"}}}}",
                    pid, kCudaTrack + device, device));
  }
  out += "\n], \"displayTimeUnit\": \"ms\"}\n";
  return out;
}

void Profile::export_chrome_trace(const std::string& path) const {
  write_text_file(path, chrome_trace(), "Profile::export_chrome_trace");
}

}  // namespace hg::profiler
