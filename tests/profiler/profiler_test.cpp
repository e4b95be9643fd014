// profiler::Profile: what it records for a small model's forward and backward (checked against an
// amp::AutocastTrace of the same run and the model's structure), its tables, its Chrome trace
// (read back with nlohmann's JSON parser) and when it records.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;
using json = nlohmann::json;

namespace {

// Linear(8, 16), GELU, Linear(16, 4): the model of every test here.
std::shared_ptr<nn::Sequential> make_mlp() {
  manual_seed(0);
  return std::make_shared<nn::Sequential>(nn::Linear(8, 16), nn::GELU(), nn::Linear(16, 4));
}

// One training step's forward and backward, as a user writes it.
void step(nn::Sequential& model, const Tensor& x, const Tensor& target) {
  const Tensor loss = mse_loss(model(x), target);
  loss.backward();
}

std::map<std::string, int64_t> count_by_name(const std::vector<profiler::Event>& events,
                                             bool outermost_only) {
  std::map<std::string, int64_t> counts;
  for (const profiler::Event& e : events) {
    if (!outermost_only || e.depth == 0) counts[e.name] += 1;
  }
  return counts;
}

std::vector<const profiler::Event*> named(const std::vector<profiler::Event>& events,
                                          std::string_view name) {
  std::vector<const profiler::Event*> found;
  for (const profiler::Event& e : events) {
    if (e.name == name) found.push_back(&e);
  }
  return found;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          fmt::format("hg_profiler_{}_{}", ::getpid(), name))
      .string();
}

json read_json_file(const std::string& path) {
  std::ifstream file(path);
  REQUIRE(file.is_open());
  std::stringstream text;
  text << file.rdbuf();
  return json::parse(text.str());  // throws on anything that is not strict JSON
}

}  // namespace

TEST_CASE("every op of a forward and backward is recorded as the autocast trace sees it",
          "[profiler]") {
  auto model = make_mlp();
  const Tensor x = randn({5, 8});
  const Tensor target = randn({5, 4});
  amp::AutocastTrace trace;  // sees the outermost calls, independently of the profiler
  profiler::Profile prof;
  step(*model, x, target);
  prof.stop();

  const std::vector<profiler::Event>& events = prof.events();
  // The outermost op calls (the user's, and those a backward node made), in order, are the
  // trace's entries, with the dtypes as given.
  std::vector<const profiler::Event*> outermost;
  for (const profiler::Event& e : events) {
    if (e.op && (e.parent < 0 || !events[size_t(e.parent)].op)) outermost.push_back(&e);
  }
  REQUIRE(outermost.size() == trace.entries().size());
  for (size_t i = 0; i < outermost.size(); ++i) {
    CHECK(outermost[i]->op == trace.entries()[i].op);
    CHECK(outermost[i]->input_dtypes == trace.entries()[i].input_dtypes);
    CHECK(outermost[i]->policy == trace.entries()[i].policy);
  }
  // By hand from the model: two linears, one gelu, one mse_loss in the forward.
  const auto counts = count_by_name(events, /*outermost_only=*/true);
  CHECK(counts.at("linear") == 2);
  CHECK(counts.at("gelu") == 1);
  CHECK(counts.at("mse_loss") == 1);
  // key_averages counts every call, nested ones too.
  const auto all = count_by_name(events, /*outermost_only=*/false);
  for (const profiler::KeyAverage& a : prof.key_averages()) CHECK(a.count == all.at(a.key));

  // Shapes and dtypes as the caller gave them.
  const auto linears = named(events, "linear");
  REQUIRE(linears.size() == 2);
  CHECK(linears[0]->input_shapes == std::vector<std::vector<int64_t>>{{5, 8}, {16, 8}, {16}});
  CHECK(linears[1]->input_shapes == std::vector<std::vector<int64_t>>{{5, 16}, {4, 16}, {4}});
  CHECK(linears[0]->input_dtypes == std::vector<DType>{kFloat32, kFloat32, kFloat32});
  CHECK(linears[0]->device == Device(kCPU));
  CHECK_FALSE(linears[0]->policy.has_value());  // autocast off

  // Without a model, modules go by class name, outermost first.
  CHECK(linears[0]->module == "Linear");
  CHECK(linears[0]->module_stack == std::vector<std::string>{"Sequential", "Linear"});
  CHECK(named(events, "gelu")[0]->module == "GELU");
  CHECK(named(events, "mse_loss")[0]->module.empty());  // called outside any module

  // The backward nodes, once each, after the forward: the model's linears and GELU, the loss,
  // and one AccumulateGrad per parameter.
  CHECK(counts.at("LinearBackward") == 2);
  CHECK(counts.at("GeluBackward") == 1);
  CHECK(counts.at("MseLossBackward") == 1);
  CHECK(counts.at("AccumulateGrad") == 4);
  const auto first_backward =
      std::find_if(events.begin(), events.end(), [](const profiler::Event& e) { return !e.op; });
  REQUIRE(first_backward != events.end());
  CHECK(first_backward->name == "MseLossBackward");
  CHECK(std::all_of(first_backward, events.end(), [](const profiler::Event& e) {
    return e.module.empty() && !e.policy.has_value();
  }));
}

TEST_CASE("nested ops are children and self times add up to the total", "[profiler]") {
  auto model = make_mlp();
  const Tensor x = randn({5, 8});
  const Tensor target = randn({5, 4});
  profiler::Profile prof;
  step(*model, x, target);
  prof.stop();
  const std::vector<profiler::Event>& events = prof.events();

  int64_t top_level_ns = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const profiler::Event& e = events[i];
    CHECK(e.cpu_ns >= 0);
    CHECK_FALSE(e.failed);
    if (e.parent < 0) {
      CHECK(e.depth == 0);
      top_level_ns += e.cpu_ns;
      continue;
    }
    const profiler::Event& parent = events[size_t(e.parent)];
    CHECK(size_t(e.parent) < i);
    CHECK(e.depth == parent.depth + 1);
    CHECK(e.start_ns >= parent.start_ns);
    CHECK(e.start_ns + e.cpu_ns <= parent.start_ns + parent.cpu_ns);
  }
  // Self time: each group's is at most its total, and all of them together are the time of the
  // outermost calls (every nanosecond is some op's own).
  double self_total_us = 0.0;
  for (const profiler::KeyAverage& a : prof.key_averages()) {
    CHECK(a.self_cpu_time_total <= a.cpu_time_total + 1e-9);
    CHECK(a.self_cpu_time_total >= -1e-9);
    CHECK(a.cuda_time_total == 0.0);
    self_total_us += a.self_cpu_time_total;
  }
  CHECK(self_total_us == Approx(double(top_level_ns) / 1e3).epsilon(1e-9));
  CHECK_THAT(prof.table(), Contains(fmt::format("Self CPU time total: ")));
}

TEST_CASE("with a model modules are named by their path", "[profiler]") {
  auto model = make_mlp();
  const Tensor x = randn({5, 8});
  profiler::Profile prof({.model = model.get()});
  (*model)(x);
  prof.stop();
  const auto linears = named(prof.events(), "linear");
  REQUIRE(linears.size() == 2);
  CHECK(linears[0]->module == "0");
  CHECK(linears[1]->module == "2");
  CHECK(linears[1]->module_stack == std::vector<std::string>{"Sequential", "2"});
  CHECK(named(prof.events(), "gelu")[0]->module == "1");

  const auto by_module = prof.key_averages({.module = true});
  int64_t linear_groups = 0;
  for (const profiler::KeyAverage& a : by_module) {
    if (a.key == "linear") {
      ++linear_groups;
      CHECK(a.count == 1);
      CHECK((a.module == "0" || a.module == "2"));
    }
  }
  CHECK(linear_groups == 2);
}

TEST_CASE("under bf16 autocast linear runs in lower precision", "[profiler]") {
  auto model = make_mlp();
  const Tensor x = randn({5, 8});
  profiler::Profile prof;
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    (*model)(x);
  }
  prof.stop();
  const auto linears = named(prof.events(), "linear");
  REQUIRE(linears.size() == 2);
  for (const profiler::Event* linear : linears) {
    REQUIRE(linear->policy.has_value());
    CHECK(*linear->policy == CastPolicy::LowerPrecision);
  }
  // The first linear was given float32 (autocast cast it inside); the second, GELU's output,
  // already bfloat16.
  CHECK(linears[0]->input_dtypes[0] == kFloat32);
  CHECK(linears[1]->input_dtypes[0] == kBFloat16);
  // The casts autocast made belong to the linear: its children.
  bool cast_child = false;
  for (const profiler::Event& e : prof.events()) {
    const bool child_of_first = e.parent >= 0 && &prof.events()[size_t(e.parent)] == linears[0];
    cast_child = cast_child || (child_of_first && e.op == OpId::to_dtype);
  }
  CHECK(cast_child);
}

TEST_CASE("key averages group by input shape", "[profiler]") {
  const Tensor a = randn({2, 3}), b = randn({4, 3});
  profiler::Profile prof;
  add(a, a);
  add(b, b);
  add(a, a);
  prof.stop();
  const auto plain = prof.key_averages();
  REQUIRE(plain.size() == 1);
  CHECK(plain[0].count == 3);
  const auto grouped = prof.key_averages({.input_shape = true});
  REQUIRE(grouped.size() == 2);
  CHECK(grouped[0].input_shapes == "[[2, 3], [2, 3]]");
  CHECK(grouped[0].count == 2);
  CHECK(grouped[1].input_shapes == "[[4, 3], [4, 3]]");
  CHECK(grouped[1].count == 1);
  CHECK_THAT(prof.table("count", -1, {.input_shape = true}), Contains("[[4, 3], [4, 3]]"));
}

TEST_CASE("the table is sorted by the chosen key and keeps row_limit rows", "[profiler]") {
  auto model = make_mlp();
  const Tensor x = randn({5, 8});
  const Tensor target = randn({5, 4});
  profiler::Profile prof;
  step(*model, x, target);
  prof.stop();
  const auto averages = prof.key_averages();
  REQUIRE(averages.size() > 4);

  for (std::string_view key : {"count", "cpu_time_total", "self_cpu_time_total"}) {
    const std::string table = prof.table(key, 3);
    std::vector<std::string> lines;
    std::istringstream in(table);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    // rule, header, rule, 3 rows, rule, the total; then the GEMM paths' heading and lines.
    const size_t gemm_lines = prof.gemm_choices().empty() ? 0 : prof.gemm_choices().size() + 1;
    REQUIRE(lines.size() == 8 + gemm_lines);
    CHECK_THAT(lines[1], Contains("Name") && Contains("Self CPU %") && Contains("# of Calls"));
    CHECK(lines[7].rfind("Self CPU time total: ", 0) == 0);
    // The three rows are the three largest groups by the key, largest first.
    std::vector<profiler::KeyAverage> sorted = averages;
    auto value = [&](const profiler::KeyAverage& a) {
      if (key == "count") return double(a.count);
      return key == "cpu_time_total" ? a.cpu_time_total : a.self_cpu_time_total;
    };
    std::stable_sort(sorted.begin(), sorted.end(),
                     [&](const auto& p, const auto& q) { return value(p) > value(q); });
    for (size_t row = 0; row < 3; ++row) {
      std::istringstream cells(lines[3 + row]);
      std::string name;
      cells >> name;
      CHECK(name == sorted[row].key);
      // The last cell is the call count.
      const std::string count = lines[3 + row].substr(
          lines[3 + row].find_last_not_of(' ') - fmt::format("{}", sorted[row].count).size() + 1);
      CHECK(std::stoll(count) == sorted[row].count);
    }
  }
  const std::string every = prof.table("count", -1);
  const size_t gemm_lines = prof.gemm_choices().empty() ? 0 : prof.gemm_choices().size() + 1;
  CHECK(std::count(every.begin(), every.end(), '\n') == int64_t(averages.size() + 5 + gemm_lines));
  CHECK_THROWS_WITH(prof.table("cpu_time"), Contains("expected sort_by") && Contains("'cpu_time'"));
}

namespace {
// A module whose class name needs escaping in JSON.
struct OddlyNamed : nn::Module {
  std::string name() const override { return "Odd \"quoted\" \\ name\n"; }
  Tensor forward(const Tensor& x) override { return relu(x); }
};
}  // namespace

TEST_CASE("the table names the CPU GEMM paths the recorded ops ran", "[profiler]") {
  auto model = make_mlp();
  const Tensor x = randn({5, 8});
  const Tensor target = randn({5, 4});
  step(*model, x, target);  // the paths are measured here, before recording
  profiler::Profile once;
  step(*model, x, target);
  once.stop();
  profiler::Profile twice;
  step(*model, x, target);
  twice.stop();
  twice.start();  // a second recording adds to the same lines
  step(*model, x, target);
  twice.stop();
  REQUIRE_FALSE(once.gemm_choices().empty());
  REQUIRE(twice.gemm_choices().size() == once.gemm_choices().size());
  const std::string table = twice.table();
  CHECK_THAT(table, Contains("CPU GEMM paths (calls while recording):\n"));
  for (size_t i = 0; i < once.gemm_choices().size(); ++i) {
    const cpu::GemmChoice& one = once.gemm_choices()[i];
    const cpu::GemmChoice& two = twice.gemm_choices()[i];
    INFO(cpu::describe(one));
    CHECK(one.dtype == kFloat32);
    CHECK(two.shape_class == one.shape_class);
    CHECK(two.path == one.path);
    CHECK(one.calls > 0);
    CHECK(two.calls == 2 * one.calls);
    CHECK_THAT(table, Contains("  " + cpu::describe(two) + "\n"));
  }
  // Linear(8, 16)'s forward: 5 x 8 x 16 with its bias.
  CHECK(std::any_of(once.gemm_choices().begin(), once.gemm_choices().end(), [](const auto& c) {
    return c.shape_class == "B 1, M <= 8, N <= 16, K <= 8, b transposed, bias";
  }));
  // A recording without products has no GEMM lines.
  profiler::Profile none;
  add(x, x);
  none.stop();
  CHECK(none.gemm_choices().empty());
  CHECK_THAT(none.table(), !Contains("CPU GEMM paths"));
}

TEST_CASE("the Chrome trace is JSON whose events nest on each track", "[profiler]") {
  auto model = make_mlp();
  auto odd = std::make_shared<OddlyNamed>();
  const Tensor x = randn({5, 8});
  const Tensor target = randn({5, 4});
  profiler::Profile prof({.model = model.get()});
  step(*model, x, target);
  (*odd)(x);
  prof.stop();
  const std::string path = temp_path("trace.json");
  prof.export_chrome_trace(path);
  const json trace = read_json_file(path);
  std::remove(path.c_str());

  REQUIRE(trace.contains("traceEvents"));
  struct Interval {
    int64_t start, end;  // nanoseconds
  };
  std::map<int64_t, std::vector<Interval>> tracks;
  size_t complete = 0;
  bool saw_odd = false;
  for (const json& e : trace["traceEvents"]) {
    REQUIRE(e.contains("name"));
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("pid"));
    REQUIRE(e.contains("tid"));
    if (e["ph"] != "X") {
      CHECK(e["ph"] == "M");  // track names
      continue;
    }
    ++complete;
    REQUIRE(e.contains("ts"));
    REQUIRE(e.contains("dur"));
    REQUIRE(e.contains("cat"));
    const json& args = e["args"];
    for (const char* key : {"shapes", "dtypes", "policy", "module", "device"}) {
      CHECK(args.contains(key));
    }
    saw_odd = saw_odd || args["module"] == "Odd \"quoted\" \\ name\n";
    // Times are microseconds with three decimals: whole nanoseconds.
    const auto ns = [](const json& us) { return int64_t(std::llround(us.get<double>() * 1e3)); };
    tracks[e["tid"].get<int64_t>()].push_back({ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])});
  }
  CHECK(saw_odd);
  CHECK(complete == prof.events().size());  // CPU ops only here: one event each
  // On each track, in order of start, every interval lies inside the open ones or after them.
  for (auto& [tid, intervals] : tracks) {
    std::stable_sort(intervals.begin(), intervals.end(),
                     [](const Interval& a, const Interval& b) { return a.start < b.start; });
    std::vector<Interval> open;
    for (const Interval& interval : intervals) {
      while (!open.empty() && open.back().end <= interval.start) open.pop_back();
      if (!open.empty()) CHECK(interval.end <= open.back().end);
      open.push_back(interval);
    }
  }
  // The module path and shapes reach the trace.
  CHECK_THAT(prof.chrome_trace(),
             Contains("\"module\": \"0\"") && Contains("\"shapes\": [[5, 8], [16, 8], [16]]"));
}

TEST_CASE("nothing is recorded after stop or outside the profile or from another thread",
          "[profiler]") {
  const Tensor a = randn({3});
  profiler::Profile prof;
  CHECK(prof.recording());
  CHECK_THROWS_WITH(prof.events(), Contains("expected a stopped profile"));
  neg(a);
  std::thread other([&] { exp(a); });  // another thread's ops are its own
  other.join();
  prof.stop();
  neg(a);  // after stop
  REQUIRE(prof.events().size() == 1);
  CHECK(prof.events()[0].op == OpId::neg);
  CHECK_THROWS_WITH(prof.stop(), Contains("expected a recording profile"));

  prof.start();  // records again, after the first events
  sqrt(a);
  prof.stop();
  REQUIRE(prof.events().size() == 2);
  CHECK(prof.events()[1].op == OpId::sqrt);
  CHECK(prof.events()[1].start_ns >= prof.events()[0].start_ns + prof.events()[0].cpu_ns);

  // A destroyed profile stops recording: the ops after it reach only the outer one.
  profiler::Profile outer;
  {
    profiler::Profile inner;
    abs(a);
  }
  neg(a);
  outer.stop();
  REQUIRE(outer.events().size() == 2);
  CHECK(outer.events()[0].op == OpId::abs);
  CHECK(outer.events()[1].op == OpId::neg);
}

TEST_CASE("a profile is started and stopped on its own thread only", "[profiler]") {
  profiler::Profile prof;
  prof.stop();
  std::string refused;
  std::thread other([&] {
    try {
      prof.start();
    } catch (const Error& error) {
      refused = error.what();
    }
  });
  other.join();
  CHECK_THAT(refused, Contains("Profile::start: expected the thread that made the profile"));
  CHECK_FALSE(prof.recording());
}

TEST_CASE("nested profiles record independently", "[profiler]") {
  const Tensor a = randn({3});
  profiler::Profile outer;
  neg(a);
  profiler::Profile inner;
  exp(a);
  inner.stop();
  abs(a);
  outer.stop();
  REQUIRE(inner.events().size() == 1);
  CHECK(inner.events()[0].op == OpId::exp);
  REQUIRE(outer.events().size() == 3);
  CHECK(outer.events()[1].op == OpId::exp);
  CHECK(outer.events()[2].op == OpId::abs);
}

TEST_CASE("an op that throws is closed and the ops after it nest correctly", "[profiler]") {
  const Tensor a = randn({2, 3}), b = randn({4, 5});
  profiler::Profile prof;
  CHECK_THROWS(matmul(a, b));
  neg(a);
  prof.stop();
  const std::vector<profiler::Event>& events = prof.events();
  REQUIRE(!events.empty());
  CHECK(events.back().op == OpId::neg);
  CHECK(events.back().depth == 0);  // not a child of the failed call
  bool failed = false;
  for (const profiler::Event& e : events) failed = failed || e.failed;
  CHECK(failed);
}

TEST_CASE("a profile on each thread records that thread's ops", "[profiler]") {
  const Tensor a = randn({3});
  std::vector<std::vector<OpId>> seen(2);
  auto work = [&](size_t i, int n) {
    profiler::Profile prof;
    for (int k = 0; k < n; ++k) (i == 0 ? neg(a) : exp(a));
    prof.stop();
    for (const profiler::Event& e : prof.events()) seen[i].push_back(e.op.value());
  };
  std::thread t0(work, 0, 3), t1(work, 1, 5);
  t0.join();
  t1.join();
  CHECK(seen[0] == std::vector<OpId>(3, OpId::neg));
  CHECK(seen[1] == std::vector<OpId>(5, OpId::exp));
}

namespace {

// The index of the only event named `name` (a failed check when there is not exactly one).
size_t only_event(const std::vector<profiler::Event>& events, const std::string& name) {
  size_t found = events.size(), count = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].name == name) {
      found = i;
      ++count;
    }
  }
  INFO(name);
  REQUIRE(count == 1);
  return found;
}

// True when `child` lies below `ancestor` in the recorded nesting.
bool inside(const std::vector<profiler::Event>& events, size_t child, size_t ancestor) {
  for (int64_t parent = events[child].parent; parent >= 0; parent = events[size_t(parent)].parent) {
    if (size_t(parent) == ancestor) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("the optimizer's step and GradScaler's work are ranges of the profile", "[profiler]") {
  auto model = make_mlp();
  optim::AdamW opt(model->parameters());
  amp::GradScaler scaler({.init_scale = 1024.0});
  const Tensor x = randn({5, 8});
  const Tensor target = randn({5, 4});
  profiler::Profile prof({.model = model.get()});
  const Tensor loss = mse_loss((*model)(x), target);
  scaler.scale(loss).backward();
  CHECK(scaler.step(opt));
  scaler.update();
  {
    ops::RecordFunction user_range("my block");
    opt.zero_grad();
  }
  prof.stop();

  const std::vector<profiler::Event>& events = prof.events();
  const size_t scale = only_event(events, "GradScaler.scale");
  const size_t unscale = only_event(events, "GradScaler.unscale_");
  const size_t scaler_step = only_event(events, "GradScaler.step");
  const size_t optimizer_step = only_event(events, "Optimizer.step#AdamW.step");
  const size_t update = only_event(events, "GradScaler.update");
  const size_t user = only_event(events, "my block");
  for (size_t i : {scale, unscale, scaler_step, optimizer_step, update, user}) {
    CHECK(events[i].range);
    CHECK_FALSE(events[i].op);
    CHECK(events[i].cpu_ns > 0);
    CHECK(events[i].device == Device(kCPU));
  }
  // The ranges the user's calls opened are outermost; step's work nests inside it.
  CHECK(events[scale].parent == -1);
  CHECK(events[scaler_step].parent == -1);
  CHECK(events[update].parent == -1);
  CHECK(int64_t(scaler_step) == events[unscale].parent);
  CHECK(int64_t(scaler_step) == events[optimizer_step].parent);
  CHECK(events[optimizer_step].depth == 1);
  CHECK(events[unscale].start_ns + events[unscale].cpu_ns <= events[optimizer_step].start_ns);
  // The scaling multiply is the scale range's child; the backward ran outside every range.
  bool scaling_mul = false;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].op == OpId::mul && inside(events, i, scale)) scaling_mul = true;
    if (!events[i].op && !events[i].range) {  // a backward node
      const bool in_range = events[i].parent >= 0 && events[size_t(events[i].parent)].range;
      CHECK_FALSE(in_range);
    }
  }
  CHECK(scaling_mul);

  // key_averages, the table and the trace show them under their names.
  std::map<std::string, profiler::KeyAverage> by_key;
  for (const profiler::KeyAverage& a : prof.key_averages()) by_key[a.key] = a;
  REQUIRE(by_key.count("Optimizer.step#AdamW.step") == 1);
  const profiler::KeyAverage& step_average = by_key["Optimizer.step#AdamW.step"];
  CHECK(step_average.count == 1);
  CHECK(step_average.cpu_time_total >= step_average.self_cpu_time_total);
  CHECK(step_average.self_cpu_time_total >= 0);
  CHECK(by_key["GradScaler.step"].cpu_time_total >= step_average.cpu_time_total);
  const std::string table = prof.table("cpu_time_total", -1);
  for (const char* name : {"Optimizer.step#AdamW.step", "GradScaler.scale", "GradScaler.unscale_",
                           "GradScaler.step", "GradScaler.update", "my block"}) {
    CHECK_THAT(table, Contains(name));
  }
  const json trace = json::parse(prof.chrome_trace());
  std::map<std::string, std::string> category;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X") category[e["name"].get<std::string>()] = e["cat"].get<std::string>();
  }
  CHECK(category["Optimizer.step#AdamW.step"] == "user_annotation");
  CHECK(category["GradScaler.unscale_"] == "user_annotation");
  CHECK(category["my block"] == "user_annotation");
  CHECK(category["mul"] == "cpu_op");
  CHECK(category["LinearBackward"] == "backward");
}

TEST_CASE("the optimizer's zero_grad is a range of the profile named as torch names it",
          "[profiler]") {
  auto model = make_mlp();
  step(*model, randn({5, 8}), randn({5, 4}));
  const std::vector<Tensor> params = model->parameters();
  optim::SGD sgd(params);
  optim::Adam adam(params);
  optim::AdamW adamw(params);
  optim::RMSprop rmsprop(params);
  optim::Adagrad adagrad(params);
  profiler::Profile prof;
  sgd.zero_grad(false);  // zero-filled
  for (const Tensor& p : params) {
    REQUIRE(p.grad().defined());
    for (float g : p.grad().to_vector<float>()) CHECK(g == 0.0f);
  }
  adam.zero_grad(false);
  rmsprop.zero_grad(false);
  adagrad.zero_grad(false);
  {
    ops::RecordFunction user_range("my block");
    adamw.zero_grad();  // set to none
  }
  prof.stop();
  for (const Tensor& p : params) CHECK_FALSE(p.grad().defined());

  // torch's names: "Optimizer.zero_grad#" + the class name + ".zero_grad".
  const std::vector<profiler::Event>& events = prof.events();
  const size_t user = only_event(events, "my block");
  for (const char* name : {"SGD", "Adam", "RMSprop", "Adagrad", "AdamW"}) {
    const size_t range = only_event(events, fmt::format("Optimizer.zero_grad#{}.zero_grad", name));
    INFO(name);
    CHECK(events[range].range);
    CHECK_FALSE(events[range].op);
    CHECK(events[range].device == Device(kCPU));
    if (std::string_view(name) == "AdamW") {
      CHECK(events[range].parent == int64_t(user));
      CHECK(events[range].depth == 1);
    } else {
      CHECK(events[range].parent == -1);
    }
  }
  // In order: SGD's range ends before Adam's begins.
  const size_t sgd_range = only_event(events, "Optimizer.zero_grad#SGD.zero_grad");
  const size_t adam_range = only_event(events, "Optimizer.zero_grad#Adam.zero_grad");
  CHECK(events[sgd_range].start_ns + events[sgd_range].cpu_ns <= events[adam_range].start_ns);
  const json trace = json::parse(prof.chrome_trace());
  bool in_trace = false;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "Optimizer.zero_grad#SGD.zero_grad") {
      CHECK(e["cat"] == "user_annotation");
      in_trace = true;
    }
  }
  CHECK(in_trace);
}

TEST_CASE("ranges nest as scopes do and a profile records those it saw begin", "[profiler]") {
  CHECK_FALSE(ops::in_loss_scaling());
  {
    ops::RecordFunction scaling("GradScaler.update", ops::RangeKind::kLossScaling);
    CHECK(ops::in_loss_scaling());
    {
      ops::RecordFunction user("Optimizer.step#SGD.step");
      CHECK_FALSE(ops::in_loss_scaling());
    }
    CHECK(ops::in_loss_scaling());
  }
  CHECK_FALSE(ops::in_loss_scaling());
  // A range begun before the profile is not recorded, and its end closes nothing.
  std::optional<ops::RecordFunction> early;
  early.emplace("early");
  profiler::Profile prof;
  Tensor y = add(ones({2}), 1.0);
  early.reset();  // heard by the recorder, which never opened it
  Tensor z = mul(y, 2.0);
  prof.stop();
  REQUIRE(prof.events().size() == 2);
  CHECK(prof.events()[1].name == "mul");
  CHECK(prof.events()[1].parent == -1);
  for (const profiler::Event& event : prof.events()) CHECK(event.name != "early");
}
