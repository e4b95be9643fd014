// The path each CPU GEMM takes (NOTE [GEMM path by measurement]): the per-process table of
// choices, the measurement that fills it, the paths set by set_gemm_path or HALFGRAD_CPU_GEMM,
// and what hg-info and the profiler print of them.
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "halfgrad/config.h"
#include "halfgrad/core/error.h"
#include "halfgrad/core/format.h"
#include "halfgrad/core/storage.h"
#include "halfgrad/cpu/kernel_choices.h"
#include "halfgrad/cpu/linalg.h"
#include "halfgrad/cpu/linalg_detail.h"

namespace hg::cpu {

// NOTE [GEMM path by measurement] Which kernel multiplies fastest depends on the CPU, the dtype,
// the shape and the thread count: oneDNN's bfloat16 kernel is 8x its float32 one on a core
// with AMX and about 2x on AVX512-BF16 (Zen 4), and no faster than float32 FMAs on a Xeon with
// AVX512-BF16 alone; a product of a few thousand multiply-adds costs less on halfgrad's small
// kernel than one oneDNN call. So gemm does not fix the path by dtype: the first product of
// each shape class, per dtype and OpenMP thread count, runs every candidate path (GemmPath)
// into a scratch output, a warm-up call each and then three timed rounds, the candidates taking
// turns within a round so that a noisy moment hurts them alike; each candidate's time is its
// best round. A class is the dtype, the thread count, the batch and M, N and K rounded up to
// powers of two, whether a or b is transposed, and whether a bias or beta applies.
//
// The fastest candidate is kept for the class for the rest of the process, unless the path
// today's rule would take (the small kernel under kTinyGemm multiply-adds, else the dtype's
// native kernel, else float32 tiles) is within 10 % of it: then that path stays, so that
// timings a noisy machine cannot tell apart do not change which kernel runs. The product that
// measured then runs on the kept path, so its result has the bits of every later product of
// the class: a choice never changes bits within a process. Two processes can choose
// differently where two paths time alike (the sums' order differs, so the last bits of a
// result may): HALFGRAD_CPU_GEMM or set_gemm_path fixes the path for reproducible bits across
// runs, as torch.backends.cudnn.benchmark = False does for convolutions.
//
// Candidates: float32 native (oneDNN; Eigen without it) and the small kernel; bfloat16 native,
// float32 tiles and the small kernel; float16 native (where oneDNN has an f16 kernel), tiles,
// the small kernel and bfloat16 pairs (NOTE [float16 as bfloat16 pairs]) where oneDNN runs
// bfloat16 natively. The small kernel is a candidate only under kSmallCandidate multiply-adds
// (above it, one of its calls would cost the measurement more than it can win). float64 has
// one path, Eigen. Measuring costs each candidate a warm-up run and three timed rounds (of about
// 20 us or one run each) once per class: hg-info's nine classes, up to 1024^3 in three dtypes,
// took 0.46 s in all on a 2-core Xeon with AMX; a thread's later lookups of a class were 0.35 %
// of hg-bench-train's tiny-MLP step there (perf).

namespace linalg_detail {

namespace {

using Clock = std::chrono::steady_clock;

// ---- the paths set for each dtype ----------------------------------------------------------

constexpr std::array<DType, 4> kChoosing = {kFloat32, kBFloat16, kFloat16, kFloat64};

size_t dtype_slot(DType dtype) {
  for (size_t i = 0; i < kChoosing.size(); ++i) {
    if (kChoosing[i] == dtype) return i;
  }
  HG_ERROR("gemm path: expected a floating dtype (float32, bfloat16, float16, float64), got {}",
           dtype);
}

std::array<std::atomic<GemmPath>, 4> set_paths{};

std::atomic<int64_t> generation{0};
void forget_choices();

// Sets dtype's path after checking that it can run here (`by` names who asked, for the error).
void store_path(DType dtype, GemmPath path, std::string_view by) {
  const std::vector<GemmPath> paths = gemm_paths(dtype);
  if (path != GemmPath::Auto && std::find(paths.begin(), paths.end(), path) == paths.end()) {
    std::vector<std::string_view> names;
    for (GemmPath p : paths) names.push_back(gemm_path_name(p));
    HG_ERROR("{}: {} GEMMs on this CPU and build run on auto or {}, not on {}", by, dtype,
             fmt::join(names, ", "), gemm_path_name(path));
  }
  set_paths[dtype_slot(dtype)] = path;
  forget_choices();  // the classes choose again under the new setting
}

// The choices and their generation: set_gemm_path and clear_gemm_choices bump it, and each
// thread's own table of the choices it has looked up is dropped when it sees a new one.
using Table = ChoiceTable<GemmChoice, 12>;
using Choice = Table::Choice;
using ClassKey = Table::Key;

Table& table() {
  static Table instance;
  return instance;
}

void forget_choices() {
  table().clear();
  generation.fetch_add(1, std::memory_order_acq_rel);
}

GemmPath parse_path(std::string_view name, std::string_view setting) {
  for (GemmPath path :
       {GemmPath::Auto, GemmPath::Native, GemmPath::Tiles, GemmPath::Small, GemmPath::Split}) {
    if (gemm_path_name(path) == name) return path;
  }
  HG_ERROR(
      "HALFGRAD_CPU_GEMM={}: expected auto, native, tiles, small or split, optionally after a "
      "dtype and a colon (fp32:, bf16:, fp16:), comma-separated; got \"{}\"",
      setting, name);
}

DType parse_dtype(std::string_view name, std::string_view setting) {
  if (name == "fp32" || name == "float32") return kFloat32;
  if (name == "bf16" || name == "bfloat16") return kBFloat16;
  if (name == "fp16" || name == "float16") return kFloat16;
  HG_ERROR("HALFGRAD_CPU_GEMM={}: expected fp32, bf16 or fp16 before a colon, got \"{}\"",
           setting, name);
}

// HALFGRAD_CPU_GEMM: "PATH" for every dtype that has the path, or "DTYPE:PATH,...".
void read_environment() {
  const char* raw = std::getenv("HALFGRAD_CPU_GEMM");
  if (raw == nullptr || *raw == '\0') return;
  const std::string_view setting(raw);
  size_t begin = 0;
  while (begin <= setting.size()) {
    const size_t end = std::min(setting.find(',', begin), setting.size());
    const std::string_view item = setting.substr(begin, end - begin);
    const size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      const GemmPath path = parse_path(item, setting);
      bool any = false;
      for (DType dtype : {kFloat32, kBFloat16, kFloat16}) {
        if (path == GemmPath::Auto || path_available(dtype, path)) {
          set_paths[dtype_slot(dtype)] = path;
          any = true;
        }
      }
      HG_CHECK(any, "HALFGRAD_CPU_GEMM={}: no dtype can take the path \"{}\" on this CPU", setting,
               item);
    } else {
      store_path(parse_dtype(item.substr(0, colon), setting),
                 parse_path(item.substr(colon + 1), setting),
                 fmt::format("HALFGRAD_CPU_GEMM={}", setting));
    }
    begin = end + 1;
  }
}

// Reads the environment once, before the first path is looked up. An error there is thrown
// from every GEMM, as a bad setting must not be ignored.
void ensure_environment_read() {
  static const std::string failure = [] {
    try {
      read_environment();
      return std::string();
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  if (!failure.empty()) HG_ERROR("{}", failure);
}

// ---- shape classes --------------------------------------------------------------------------

int64_t ceil_log2(int64_t x) { return x <= 1 ? 0 : int64_t(std::bit_width(uint64_t(x - 1))); }

int threads_here() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

ClassKey class_of(const Problem& p) {
  return {int64_t(p.dtype),
          threads_here(),
          ceil_log2(p.batch),
          ceil_log2(p.m),
          ceil_log2(p.n),
          ceil_log2(p.k),
          p.a.row_major() ? 0 : 1,
          p.b.row_major() ? 0 : 1,
          p.bias != nullptr,
          p.beta != 0,
          p.a.broadcast() && p.batch > 1,
          p.float32_out};
}

std::string class_name(const Problem& p) {
  std::string name = fmt::format("B {}, M <= {}, N <= {}, K <= {}", int64_t(1) << ceil_log2(p.batch),
                                 int64_t(1) << ceil_log2(p.m), int64_t(1) << ceil_log2(p.n),
                                 int64_t(1) << ceil_log2(p.k));
  if (!p.a.row_major()) name += ", a transposed";
  if (!p.b.row_major()) name += ", b transposed";
  if (p.a.broadcast() && p.batch > 1) name += ", a shared";
  if (p.bias != nullptr) name += ", bias";
  if (p.beta != 0) name += ", beta";
  if (p.float32_out) name += ", float32 out";
  return name;
}

// The path today's rule takes (kept unless another is clearly faster).
GemmPath default_path(const Problem& p) {
  const int64_t macs = p.batch * p.m * p.n * p.k;
  if (macs < kTinyGemm && path_available(p.dtype, GemmPath::Small)) return GemmPath::Small;
  if (path_available(p.dtype, GemmPath::Native)) return GemmPath::Native;
  return GemmPath::Tiles;
}

std::vector<GemmPath> candidates(const Problem& p) {
  const int64_t macs = p.batch * p.m * p.n * p.k;
  std::vector<GemmPath> found;
  for (GemmPath path : gemm_paths(p.dtype)) {
    if (path == GemmPath::Small && macs >= kSmallCandidate) continue;
    found.push_back(path);
  }
  return found;
}

// ---- the measurement ------------------------------------------------------------------------

// Runs p on path `reps` times; seconds in all.
double time_runs(const Problem& p, GemmPath path, int reps) {
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < reps; ++i) run_path(p, path);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct FreeDeleter {
  void operator()(void* memory) const { std::free(memory); }
};

// Each candidate's best time per product, in microseconds, on a scratch copy of p's output.
std::vector<std::pair<GemmPath, double>> measure(const Problem& p,
                                                 const std::vector<GemmPath>& paths) {
  const size_t out_bytes =
      size_t(p.batch * p.m * p.n) * (p.float32_out ? sizeof(float) : element_size(p.dtype));
  const size_t allocated = (out_bytes + kCpuAlignment - 1) / kCpuAlignment * kCpuAlignment;
  std::unique_ptr<void, FreeDeleter> scratch(std::aligned_alloc(kCpuAlignment, allocated));
  HG_CHECK(scratch != nullptr, "gemm: could not allocate a {}-byte output to measure paths in",
           allocated);
  // beta reads the output: the scratch starts as out does (its values then grow from run to
  // run, which changes no kernel's speed).
  if (p.beta != 0) std::memcpy(scratch.get(), p.out, out_bytes);
  Problem q = p;
  q.out = static_cast<char*>(scratch.get());
  // A warm-up run each (primitives made, buffers grown), which also sizes the rounds: enough
  // runs that a round lasts about 20 us, where the clock's steps no longer count.
  std::vector<int> reps;
  for (GemmPath path : paths) {
    const double once = time_runs(q, path, 1);
    reps.push_back(int(std::clamp(20e-6 / std::max(once, 1e-9), 1.0, 1000.0)));
  }
  std::vector<double> best(paths.size(), 1e30);
  for (int round = 0; round < 3; ++round) {
    for (size_t i = 0; i < paths.size(); ++i) {
      best[i] = std::min(best[i], time_runs(q, paths[i], reps[i]) / reps[i]);
    }
  }
  std::vector<std::pair<GemmPath, double>> times;
  for (size_t i = 0; i < paths.size(); ++i) times.emplace_back(paths[i], best[i] * 1e6);
  return times;
}

// The kept path of a measurement (the default unless another is over 10 % faster).
GemmPath pick(const std::vector<std::pair<GemmPath, double>>& times, GemmPath fallback) {
  const auto fastest = std::min_element(times.begin(), times.end(), [](const auto& x, const auto& y) {
    return x.second < y.second;
  });
  const auto kept = std::find_if(times.begin(), times.end(),
                                 [&](const auto& time) { return time.first == fallback; });
  if (kept != times.end() && kept->second <= fastest->second * 1.1) return fallback;
  return fastest->first;
}

std::shared_ptr<Choice> make_choice(const Problem& p) {
  auto made = std::make_shared<Choice>();
  made->info.dtype = p.dtype;
  made->info.shape_class = class_name(p);
  made->info.threads = threads_here();
  const GemmPath set = set_paths[dtype_slot(p.dtype)].load();
  const std::vector<GemmPath> paths = candidates(p);
  if (set != GemmPath::Auto) {
    made->info.path = set;
    made->info.set = true;
  } else if (paths.size() == 1) {
    made->info.path = paths.front();
  } else {
    made->info.microseconds = measure(p, paths);
    made->info.path = pick(made->info.microseconds, default_path(p));
    made->info.measured = true;
  }
  return made;
}

// The choice for p's class: this thread's table first, then the process's, measuring there when
// the class is new. Two threads meeting a new class at once may both measure; the first to
// finish is kept, and both run its path.
Choice& choice_for(const Problem& p) {
  struct ThreadTable {
    int64_t generation = -1;
    std::map<ClassKey, std::shared_ptr<Choice>> choices;
  };
  thread_local ThreadTable mine;
  const int64_t now = generation.load(std::memory_order_acquire);
  if (mine.generation != now) {
    mine.choices.clear();
    mine.generation = now;
  }
  const ClassKey key = class_of(p);
  if (auto found = mine.choices.find(key); found != mine.choices.end()) return *found->second;
  Table& shared = table();
  {
    std::lock_guard<std::mutex> lock(shared.mutex);
    if (auto found = shared.choices.find(key); found != shared.choices.end()) {
      return *mine.choices.emplace(key, found->second).first->second;
    }
  }
  std::shared_ptr<Choice> made = make_choice(p);
  std::lock_guard<std::mutex> lock(shared.mutex);
  auto [entry, inserted] = shared.choices.emplace(key, made);
  if (inserted) shared.in_order.push_back(made);
  return *mine.choices.emplace(key, entry->second).first->second;
}

}  // namespace

GemmPath path_for(const Problem& p) {
  ensure_environment_read();
  if (p.dtype == kFloat64) return GemmPath::Native;
  Choice& choice = choice_for(p);
  choice.calls.fetch_add(1, std::memory_order_relaxed);
  return choice.info.path;
}

}  // namespace linalg_detail

using linalg_detail::dtype_slot;
using linalg_detail::path_available;

std::string_view gemm_path_name(GemmPath path) {
  switch (path) {
    case GemmPath::Auto:
      return "auto";
    case GemmPath::Native:
      return "native";
    case GemmPath::Tiles:
      return "tiles";
    case GemmPath::Small:
      return "small";
    case GemmPath::Split:
      return "split";
  }
  return "unknown";
}

std::vector<GemmPath> gemm_paths(DType dtype) {
  dtype_slot(dtype);  // a floating dtype, or an error naming it
  std::vector<GemmPath> paths;
  for (GemmPath path : {GemmPath::Native, GemmPath::Tiles, GemmPath::Small, GemmPath::Split}) {
    if (path_available(dtype, path)) paths.push_back(path);
  }
  return paths;
}

void set_gemm_path(DType dtype, GemmPath path) {
  linalg_detail::ensure_environment_read();  // so that the environment cannot undo this later
  linalg_detail::store_path(dtype, path, "set_gemm_path");
}

GemmPath get_gemm_path(DType dtype) {
  linalg_detail::ensure_environment_read();
  return linalg_detail::set_paths[dtype_slot(dtype)].load();
}

std::vector<GemmChoice> gemm_choices() {
  linalg_detail::Table& shared = linalg_detail::table();
  std::lock_guard<std::mutex> lock(shared.mutex);
  std::vector<GemmChoice> choices;
  for (const auto& choice : shared.in_order) {
    choices.push_back(choice->info);
    choices.back().calls = choice->calls.load(std::memory_order_relaxed);
  }
  return choices;
}

std::string describe(const GemmChoice& choice) {
  std::string text = fmt::format("{} {}; {} thread{}: {}", dtype_name(choice.dtype),
                                 choice.shape_class, choice.threads, choice.threads == 1 ? "" : "s",
                                 gemm_path_name(choice.path));
  if (choice.measured) {
    std::vector<std::string> times;
    for (const auto& [path, us] : choice.microseconds) {
      times.push_back(fmt::format("{} {:.3g} us", gemm_path_name(path), us));
    }
    text += fmt::format(" (measured: {})", fmt::join(times, ", "));
  } else {
    text += choice.set        ? " (set)"
            : choice.restored ? " (restored)"
                              : " (the one candidate)";
  }
  return text + fmt::format(", {} call{}", choice.calls, choice.calls == 1 ? "" : "s");
}

namespace kernel_choices_detail {

std::vector<SavedChoice> saved_gemm_choices() {
  return linalg_detail::table().saved([](GemmPath path) { return gemm_path_name(path); });
}

int64_t restore_gemm_choices(const std::vector<SavedChoice>& saved) {
  linalg_detail::ensure_environment_read();
  int64_t taken = 0;
  for (const SavedChoice& entry : saved) {
    if (entry.key.size() != std::tuple_size_v<linalg_detail::ClassKey>) continue;
    const auto dtype = std::find_if(
        linalg_detail::kChoosing.begin(), linalg_detail::kChoosing.end() - 1,
        [&](DType d) { return int64_t(d) == entry.key[0]; });  // float64 has one path
    if (dtype == linalg_detail::kChoosing.end() - 1) continue;
    if (linalg_detail::set_paths[dtype_slot(*dtype)].load() != GemmPath::Auto) continue;
    const std::vector<GemmPath> paths = gemm_paths(*dtype);
    const auto path = std::find_if(paths.begin(), paths.end(),
                                   [&](GemmPath p) { return gemm_path_name(p) == entry.path; });
    if (path == paths.end()) continue;
    auto made = std::make_shared<linalg_detail::Choice>();
    made->info.dtype = *dtype;
    made->info.shape_class = entry.shape_class;
    made->info.threads = int(entry.key[1]);
    made->info.path = *path;
    made->info.restored = true;
    linalg_detail::ClassKey key;
    std::copy(entry.key.begin(), entry.key.end(), key.begin());
    linalg_detail::table().replace(key, std::move(made));
    ++taken;
  }
  // Each thread drops the choices it has looked up, so that it finds the restored ones.
  linalg_detail::generation.fetch_add(1, std::memory_order_acq_rel);
  return taken;
}

}  // namespace kernel_choices_detail

namespace detail {

int64_t clear_gemm_choices() {
  const auto cleared = int64_t(gemm_choices().size());
  linalg_detail::forget_choices();
  return cleared;
}

}  // namespace detail

}  // namespace hg::cpu
