// hg-bench-train: whole training steps of halfgrad against PyTorch's twin
// (benchmarks/twin/train_twin.py: the same models, batches, losses and optimizers). One JSON
// line per measurement on stdout:
//
//   {"bench": "train_mlp", "impl": "halfgrad", "mode": "bf16", "shape": "...", "ms": ...}
//   {"bench": "train_mlp_ratio", "mode": "bf16", "vs": "pytorch", "ratio": ..., "target": 0.5,
//    "met": ...}
//   {"bench": "train_tiny", "impl": "halfgrad", "us": ..., "target_us": 5, "met": ...}
//   {"bench": "train_memory", "impl": "halfgrad", "mode": "bf16", "peak_mib": ...}
//
// Sections (--only picks one):
//   mlp     MLP 1024 -> 4096 -> 4096 -> 10 (Linear, ReLU), batch 512, cross_entropy, AdamW
//           (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01), in three modes: fp32,
//           bf16 (amp::Autocast(kCPU, kBFloat16)) and fp16 (amp::Autocast(kCPU, kFloat16) with
//           a GradScaler; PyTorch 1.13 has no float16 CPU autocast, so this line has no twin).
//           One step = zero_grad, forward, loss, backward, optimizer step; the modes are timed
//           interleaved, the median of --reps steps after --warmup steps each.
//   tiny    MLP 32 -> 32 -> 1 (Linear, ReLU), batch 16, mse_loss, SGD lr 1e-3: the median over
//           reps of --tiny-steps full steps, in microseconds per step (target 5 us).
//   memory  the bf16 MLP run alone: peak resident memory after --memory-steps steps (VmHWM)
//           minus the resident memory just before the model is built (VmRSS), with the
//           high-water mark reset at that point (writing 5 to /proc/self/clear_refs). Run only
//           with --only memory, in a process of its own, so that nothing else raises the mark.
//
// Ratios: --twin-json FILE holds the twin's lines (any number of runs; the median per
// measurement is used). --prior-json FILE holds this program's lines from earlier runs of the
// same session; its halfgrad measurements are pooled with this run's. benchmarks/run-train
// alternates the two programs that way, so the ratios compare medians over the same rounds.
// --small shrinks the models (for the smoke test); its shapes have no twin, so no ratio.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "halfgrad/halfgrad.h"

namespace {

using hg::Tensor;
using hg::bench::Candidate;
using hg::bench::median;

struct TrainOptions : hg::bench::Options {
  int tiny_steps = 1000;
  int memory_steps = 3;
  bool small = false;
  std::vector<std::string> modes = {"fp32", "bf16", "fp16"};
  std::vector<std::string> twin_json, prior_json;
};

// The measurements read from earlier runs, keyed by impl, bench, mode and shape.
using Pool = std::map<std::string, std::vector<double>>;

std::string pool_key(const std::string& impl, const std::string& bench, const std::string& mode,
                     const std::string& shape) {
  return fmt::format("{}|{}|{}|{}", impl, bench, mode, shape);
}

// Adds the timed lines of `path` (train_mlp: ms; train_tiny: us; train_memory: peak_mib) to
// pool; other lines (ratios, notes) are skipped.
void read_lines_into(const std::string& path, Pool& pool) {
  std::ifstream in(path);
  HG_CHECK(in.good(), "hg-bench-train: expected a readable JSON-lines file, got '{}'", path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json record = nlohmann::json::parse(line);
    const std::string bench = record.value("bench", "");
    const char* value = bench == "train_mlp"      ? "ms"
                        : bench == "train_tiny"   ? "us"
                        : bench == "train_memory" ? "peak_mib"
                                                  : nullptr;
    if (value == nullptr || !record.contains(value) || !record.contains("impl")) continue;
    pool[pool_key(record["impl"], bench, record.value("mode", ""), record.value("shape", ""))]
        .push_back(record[value].get<double>());
  }
}

struct Peers {
  Pool twin;   // pytorch's lines
  Pool prior;  // halfgrad's lines from earlier rounds
};

// The median of halfgrad's value over the earlier rounds and this one, and how many rounds.
std::pair<double, size_t> pooled(const Peers& peers, const std::string& key, double now) {
  std::vector<double> values = {now};
  if (auto found = peers.prior.find(key); found != peers.prior.end()) {
    values.insert(values.end(), found->second.begin(), found->second.end());
  }
  return {median(values), values.size()};
}

std::optional<double> twin_value(const Peers& peers, const std::string& bench,
                                 const std::string& mode, const std::string& shape) {
  auto found = peers.twin.find(pool_key("pytorch", bench, mode, shape));
  if (found == peers.twin.end() || found->second.empty()) return std::nullopt;
  return median(found->second);
}

const char* json_bool(bool value) { return value ? "true" : "false"; }

// {"bench": "<bench>_ratio", ...}: halfgrad's value over the peer's, against `target` when
// it has one (the target is met when ratio <= target).
void print_ratio(const std::string& bench, const std::string& mode, const std::string& vs,
                 double halfgrad, double peer, size_t rounds, std::optional<double> target) {
  const double ratio = halfgrad / peer;
  std::string line = fmt::format(
      "{{\"bench\": \"{}_ratio\", \"mode\": \"{}\", \"vs\": \"{}\", \"halfgrad\": {:.4g}, "
      "\"peer\": {:.4g}, \"rounds\": {}, \"ratio\": {:.3f}",
      bench, mode, vs, halfgrad, peer, rounds, ratio);
  if (target)
    line += fmt::format(", \"target\": {}, \"met\": {}", *target, json_bool(ratio <= *target));
  fmt::print("{}}}\n", line);
}

// ---- the models -----------------------------------------------------------------------------

std::shared_ptr<hg::nn::Sequential> mlp(const std::vector<int64_t>& sizes) {
  auto model = std::make_shared<hg::nn::Sequential>();
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    model->push_back(std::make_shared<hg::nn::Linear>(sizes[i], sizes[i + 1]));
    if (i + 2 < sizes.size()) model->push_back(std::make_shared<hg::nn::ReLU>());
  }
  return model;
}

std::string shape_name(const std::vector<int64_t>& sizes) {
  return fmt::format("{}", fmt::join(sizes, "x"));
}

// Labels uniform in [0, classes).
Tensor random_labels(int64_t batch, int64_t classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> label(0, classes - 1);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (int64_t& l : labels) l = label(rng);
  return hg::tensor(labels, {batch});
}

enum class Mode { Fp32, Bf16, Fp16 };

const char* mode_name(Mode mode) {
  return mode == Mode::Fp32 ? "fp32" : mode == Mode::Bf16 ? "bf16" : "fp16";
}

// The big MLP's model, data and optimizer in one mode; step() is one training step.
class MlpRun {
 public:
  MlpRun(Mode mode, const std::vector<int64_t>& sizes, int64_t batch)
      : mode_(mode),
        model_((hg::manual_seed(0), mlp(sizes))),
        x_(hg::randn({batch, sizes.front()})),
        y_(random_labels(batch, sizes.back(), 0)),
        opt_(model_->parameters(),
             {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01}),
        scaler_({.enabled = mode == Mode::Fp16}) {}

  void step() {
    opt_.zero_grad();
    Tensor loss;
    {
      hg::amp::Autocast autocast(hg::kCPU, mode_ == Mode::Fp16 ? hg::kFloat16 : hg::kBFloat16,
                                 /*enabled=*/mode_ != Mode::Fp32);
      loss = hg::cross_entropy(model_->forward(x_), y_);
    }
    scaler_.scale(loss).backward();
    scaler_.step(opt_);
    scaler_.update();
  }

 private:
  Mode mode_;
  std::shared_ptr<hg::nn::Sequential> model_;
  Tensor x_, y_;
  hg::optim::AdamW opt_;
  hg::amp::GradScaler scaler_;
};

struct MlpConfig {
  std::vector<int64_t> sizes;
  int64_t batch;
};

MlpConfig mlp_config(const TrainOptions& options) {
  if (options.small) return {{64, 128, 128, 10}, 32};
  return {{1024, 4096, 4096, 10}, 512};
}

// ---- sections -------------------------------------------------------------------------------

void run_mlp(const TrainOptions& options, const Peers& peers) {
  const MlpConfig config = mlp_config(options);
  const std::string shape = shape_name(config.sizes);
  std::vector<std::unique_ptr<MlpRun>> runs;
  std::vector<Candidate> candidates;
  for (Mode mode : {Mode::Fp32, Mode::Bf16, Mode::Fp16}) {
    if (std::find(options.modes.begin(), options.modes.end(), mode_name(mode)) ==
        options.modes.end()) {
      continue;
    }
    runs.push_back(std::make_unique<MlpRun>(mode, config.sizes, config.batch));
    MlpRun* run = runs.back().get();
    candidates.push_back({"halfgrad", mode_name(mode), [run] { run->step(); }});
  }
  hg::bench::time_interleaved(options, candidates);
  std::map<std::string, std::pair<double, size_t>> ms;  // mode -> pooled median, rounds
  for (const Candidate& c : candidates) {
    fmt::print(
        "{{\"bench\": \"train_mlp\", \"impl\": \"halfgrad\", \"mode\": \"{}\", \"shape\": \"{}\", "
        "\"batch\": {}, \"ms\": {:.3f}{}}}\n",
        c.kernel, shape, config.batch, c.us * 1e-3,
        c.kernel == "fp16" ? ", \"note\": \"GradScaler on; PyTorch 1.13 has no fp16 CPU autocast\""
                           : "");
    ms[c.kernel] = pooled(peers, pool_key("halfgrad", "train_mlp", c.kernel, shape), c.us * 1e-3);
  }
  for (const char* mode : {"fp32", "bf16"}) {
    if (ms.count(mode) == 0) continue;
    if (auto torch_ms = twin_value(peers, "train_mlp", mode, shape)) {
      const std::optional<double> target =
          std::string(mode) == "bf16" ? std::optional<double>(0.5) : std::nullopt;
      print_ratio("train_mlp", mode, "pytorch", ms[mode].first, *torch_ms, ms[mode].second, target);
    }
  }
  if (ms.count("bf16") && ms.count("fp32")) {
    print_ratio("train_mlp", "bf16", "halfgrad_fp32", ms["bf16"].first, ms["fp32"].first,
                ms["bf16"].second, 0.4);
  }
  std::fflush(stdout);
}

void run_tiny(const TrainOptions& options, const Peers& peers) {
  const std::vector<int64_t> sizes = {32, 32, 1};
  const int64_t batch = 16;
  hg::manual_seed(0);
  auto model = mlp(sizes);
  const Tensor x = hg::randn({batch, sizes.front()});
  const Tensor y = hg::randn({batch, sizes.back()});
  hg::optim::SGD opt(model->parameters(), {.lr = 1e-3});
  const int steps = options.tiny_steps;
  std::vector<Candidate> candidates = {{"halfgrad", "tiny", [&] {
                                          for (int i = 0; i < steps; ++i) {
                                            opt.zero_grad();
                                            hg::mse_loss(model->forward(x), y).backward();
                                            opt.step();
                                          }
                                        }}};
  hg::bench::Options timing = options;
  timing.warmup = 1;
  timing.reps = std::max(options.reps, 5);
  hg::bench::time_interleaved(timing, candidates);
  const double us = candidates[0].us / steps;
  const std::string shape = shape_name(sizes);
  constexpr double kTargetUs = 5;
  fmt::print(
      "{{\"bench\": \"train_tiny\", \"impl\": \"halfgrad\", \"shape\": \"{}\", \"batch\": {}, "
      "\"us\": {:.3f}, \"target_us\": {}, \"met\": {}}}\n",
      shape, batch, us, kTargetUs, json_bool(us <= kTargetUs));
  const auto [pooled_us, rounds] = pooled(peers, pool_key("halfgrad", "train_tiny", "", shape), us);
  if (auto torch_us = twin_value(peers, "train_tiny", "", shape)) {
    print_ratio("train_tiny", "fp32", "pytorch", pooled_us, *torch_us, rounds, std::nullopt);
  }
  std::fflush(stdout);
}

// A field of /proc/self/status in KiB ("VmRSS", "VmHWM").
int64_t proc_status_kib(const std::string& field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with(field + ":")) return std::stoll(line.substr(field.size() + 1));
  }
  HG_ERROR("hg-bench-train: expected a {} line in /proc/self/status, found none", field);
}

void run_memory(const TrainOptions& options, const Peers& peers) {
  {
    std::ofstream clear_refs("/proc/self/clear_refs");
    clear_refs << "5";  // resets VmHWM to the current VmRSS
    HG_CHECK(clear_refs.good(), "hg-bench-train: could not reset the peak RSS via {}",
             "/proc/self/clear_refs");
  }
  const int64_t baseline = proc_status_kib("VmRSS");
  const MlpConfig config = mlp_config(options);
  const std::string shape = shape_name(config.sizes);
  {
    MlpRun run(Mode::Bf16, config.sizes, config.batch);
    for (int i = 0; i < options.memory_steps; ++i) run.step();
  }
  const double peak_mib = double(proc_status_kib("VmHWM") - baseline) / 1024;
  fmt::print(
      "{{\"bench\": \"train_memory\", \"impl\": \"halfgrad\", \"mode\": \"bf16\", \"shape\": "
      "\"{}\", \"definition\": \"VmHWM after the steps minus VmRSS before the model, HWM reset "
      "there\", \"steps\": {}, \"peak_mib\": {:.1f}}}\n",
      shape, options.memory_steps, peak_mib);
  const auto [pooled_mib, rounds] =
      pooled(peers, pool_key("halfgrad", "train_memory", "bf16", shape), peak_mib);
  if (auto torch_mib = twin_value(peers, "train_memory", "bf16", shape)) {
    print_ratio("train_memory", "bf16", "pytorch", pooled_mib, *torch_mib, rounds, 1.0);
  }
  std::fflush(stdout);
}

struct Section {
  const char* name;
  void (*run)(const TrainOptions&, const Peers&);
};

// memory is not part of "all": it must run alone in its process.
constexpr Section kSections[] = {{"mlp", run_mlp}, {"tiny", run_tiny}, {"memory", run_memory}};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hg-bench-train: training steps of halfgrad against its PyTorch twin"};
  TrainOptions options;
  std::vector<std::string> names;
  for (const Section& section : kSections) names.push_back(section.name);
  hg::bench::add_common_options(app, options, names);
  app.add_option("--tiny-steps", options.tiny_steps, "tiny: steps per timed rep")
      ->check(CLI::PositiveNumber);
  app.add_option("--memory-steps", options.memory_steps, "memory: training steps run")
      ->check(CLI::PositiveNumber);
  app.add_option("--modes", options.modes, "mlp: the modes to time")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_flag("--small", options.small, "mlp and memory: a small MLP (for smoke tests)");
  app.add_option("--twin-json", options.twin_json, "the PyTorch twin's JSON lines")
      ->check(CLI::ExistingFile);
  app.add_option("--prior-json", options.prior_json, "this program's lines from earlier rounds")
      ->check(CLI::ExistingFile);
  CLI11_PARSE(app, argc, argv);

  omp_set_num_threads(options.threads);
  Peers peers;
  for (const std::string& path : options.twin_json) read_lines_into(path, peers.twin);
  for (const std::string& path : options.prior_json) read_lines_into(path, peers.prior);
  for (const Section& section : kSections) {
    const bool alone = std::string(section.name) == "memory";
    if (options.only == section.name || (options.only == "all" && !alone)) {
      section.run(options, peers);
    }
  }
  return 0;
}
