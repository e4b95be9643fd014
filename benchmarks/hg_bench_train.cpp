// hg-bench-train: whole training steps of halfgrad against PyTorch's twin
// (benchmarks/twin/train_twin.py: the same models, batches, losses and optimizers). One JSON
// line per measurement on stdout:
//
//   {"bench": "train_mlp", "impl": "halfgrad", "mode": "bf16", "shape": "...", "ms": ...}
//   {"bench": "train_mlp_ratio", "mode": "bf16", "vs": "pytorch", "ratio": ..., "target": 0.5,
//    "met": ...}
//   {"bench": "train_tiny", "impl": "halfgrad", "us": ..., "target_us": 5, "met": ...}
//   {"bench": "train_memory", "impl": "halfgrad", "mode": "bf16", "peak_mib": ...}
//   {"bench": "overflow_watch", "mode": "bf16", "ms_off": ..., "ms_on": ..., "overhead": ...}
//
// Sections (--only picks one):
//   mlp     MLP 1024 -> 4096 -> 4096 -> 10 (Linear, ReLU), batch 512, cross_entropy, AdamW
//           (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01), in three modes: fp32,
//           bf16 (amp::Autocast(kCPU, kBFloat16)) and fp16 (amp::Autocast(kCPU, kFloat16) with
//           a GradScaler; the twin runs it where its PyTorch has float16 CPU autocast, 2.3 on).
//           One step = zero_grad, forward, loss, backward, optimizer step; the modes are timed
//           interleaved, the median of --reps steps after --warmup steps each.
//   cnn     a CNN on synthetic 28 x 28 single-channel images (MNIST's shape), batch 128: two
//           blocks of Conv2d 3x3 (padding 1), BatchNorm2d, ReLU, MaxPool2d 2 (1 -> 32 -> 64
//           channels), Linear(3136, 10); loss, optimizer, modes and timing as the MLP's
//           (--small: 4 and 8 channels, batch 8).
//           With --threads 2 or more, the mlp and cnn sections (and gpt-cpu's larger size, at
//           its two threads) also time their fp32 and bf16 steps on one thread against the same
//           steps on that many, interleaved:
//             {"bench": "train_cnn_threads", "mode": "bf16", "threads": 2, "ratio": ..., ...}
//   tiny    MLP 32 -> 32 -> 1 (Linear, ReLU), batch 16, mse_loss, SGD lr 1e-3: the median over
//           reps of --tiny-steps full steps, in microseconds per step (target 5 us).
//   watch   the cost of amp::OverflowWatch: the MLP's bf16 and fp16 steps with and without a
//           watch over the whole step, as "overhead" = watched time / plain time.
//   gpt-cpu nn::GPT on the CPU in two sizes, each at its own thread count: "demo", the demo's
//           model (2 layers, 48 wide, 4 heads, T = 9, vocabulary 13, batch 64), one thread;
//           "larger" (4 layers, 256 wide, 8 heads, T = 64, vocabulary 256, batch 16), two
//           threads; random tokens and targets. The step is the gpt section's (AdamW, clipping,
//           the GradScaler on in fp16) in fp32, bf16, fp16 and fp8 (the fp8 products emulated:
//           its ratio is over halfgrad's bf16): halfgrad's modes interleaved
//           among themselves for the ratios over halfgrad's fp32, then fp32 and bf16
//           interleaved with the twin's for the ratios over PyTorch (run_gpt_cpu says why):
//             {"bench": "train_gpt_cpu", "impl": "halfgrad", "mode": "bf16", "size": "demo", ...}
//             {"bench": "train_gpt_cpu_demo_ratio", "mode": "bf16", "vs": "halfgrad_fp32", ...}
//           and then, per mode, where its step goes (the CPU form of train_gpt_ops, per step
//           over 10 steps):
//             {"bench": "train_gpt_cpu_demo_ops", "mode": "bf16", "phase": "backward", ...}
//           --small: a 1-layer, 32-wide model (smoke tests; no twin).
//   checkpoint  the "larger" CPU GPT (--small: the small one) in fp32 and bf16 with and
//           without gradient checkpointing of its blocks (nn::GPT::checkpoint_blocks): step
//           times interleaved, and the peak of live bytes a step adds (no twin):
//             {"bench": "train_gpt_checkpoint", "mode": "bf16", "checkpoint": true, "ms": ...,
//              "step_peak_mib": ...}
//             {"bench": "train_gpt_checkpoint_ratio", "mode": "bf16", "time_ratio": ...,
//              "memory_ratio": ...}
//   memory  the bf16 MLP run alone: peak resident memory after --memory-steps steps (VmHWM)
//           minus the resident memory just before the model is built (VmRSS), with the
//           high-water mark reset at that point (writing 5 to /proc/self/clear_refs). Run only
//           with --only memory, in a process of its own, so that nothing else raises the mark.
//
// Ratios against PyTorch: --twin-cmd CMD starts the twin as a child process
// (`train_twin.py --serve`) and times its steps interleaved with halfgrad's, step by step, so
// that a machine whose load changes slows both alike (the twin times its own steps, leaving
// out the pipe). --twin-modes says which modes the twin runs (default fp32 and bf16, Debian's
// PyTorch 1.13; PyTorch 2.x runs fp16 too) and --twin-compile times each twin step under
// torch.compile as well ("impl": "pytorch-compile"; ratios "vs": "pytorch_compile", target
// 1.0). --twin-json FILE instead reads the twin's lines from an earlier run (the median per
// measurement); the memory section uses it, since each side must measure its peak in a process
// of its own. benchmarks/run-train does both. --small shrinks the models (for the
// smoke tests); its shapes have no twin, so no ratio against PyTorch.
//
// --device cuda runs the GPU section instead (its PyTorch twin is benchmarks/twin/gpt_twin.py:
// the same model in PyTorch eager with torch.autocast and GradScaler; benchmarks/run-gpu runs
// both and prints the ratios against PyTorch):
//
//   {"bench": "train_gpt", "impl": "halfgrad", "mode": "bf16", "shape": "gpt-L12-H12-C768-..",
//    "batch": 8, "tokens": 8192, "ms": ..., "tokens_per_s": ..., "peak_mib": ..., ...}
//   {"bench": "train_gpt_speedup", "mode": "bf16", "vs": "halfgrad_fp32", "halfgrad": ...,
//    "peer": ..., "speedup": ..., "target": 3, "met": ...}
//   {"bench": "train_gpt_phases", "impl": "halfgrad", "mode": "bf16", "forward_ms": ...,
//    "backward_ms": ..., "optimizer_ms": ..., "host_ms": ...}
//   {"bench": "train_gpt_ops", "impl": "halfgrad", "mode": "bf16", "phase": "backward",
//    "op": "LinearBackward", "calls": ..., "ms": ...}
//   {"bench": "train_gpt_graph", "impl": "halfgrad", "mode": "bf16", "host_syncs": 0, "ms": ...,
//    "eager_ms": ..., "eager_over_graph": ...}
//
//   gpt     a GPT-2-small-like nn::GPT (12 layers, 768 wide, 12 heads, T = 1024, vocabulary
//           --vocab, default 50304; lm_head untied, so 163M parameters), batch --batch
//           (default 8) of random tokens, on the GPU. One step = zero_grad, forward and
//           cross_entropy (under amp::Autocast(kCUDA, dtype) in fp16 and bf16),
//           scaler.scale(loss).backward(), scaler.unscale_, clip_grad_norm_ 1.0, scaler.step,
//           scaler.update; AdamW lr 6e-4, betas (0.9, 0.95), eps 1e-8, weight_decay 0.1 on
//           the matrices and embeddings, 0 on biases and LayerNorm. Modes (--modes): fp32
//           (true float32), fp16 (GradScaler on), bf16 (GradScaler off) and fp8 (bf16 with
//           the linear layers in float8 under amp::Fp8Autocast, delayed scaling with
//           Transformer Engine's defaults; then train_gpt_speedup of fp8 over bf16); parameters,
//           gradients and optimizer state stay float32. Each mode is built, timed (NOTE [GPU
//           timing] in bench_util.h: --iters steps per repeat) and freed before the next, so
//           peak_mib (hg::cuda::max_memory_allocated since just before the model is built) is
//           that mode's alone. Then per mode the phases of single steps (forward and loss,
//           backward, the optimizer's part from unscale_ to update) by events, and for bf16
//           the 60 largest (phase, op or node) GPU times of one step and the step captured into a
//           CUDA graph and replayed (capturing fails on any host sync). --small: a 2-layer,
//           128-wide model on T = 64 (smoke tests; no twin).
#include <omp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "halfgrad/halfgrad.h"
#include "halfgrad/ops/observer.h"

namespace {

using hg::Tensor;
using hg::bench::Candidate;
using hg::bench::median;

struct TrainOptions : hg::bench::Options {
  int tiny_steps = 1000;
  int memory_steps = 3;
  int64_t batch = 8;      // gpt
  int64_t vocab = 50304;  // gpt
  bool small = false;
  std::vector<std::string> modes = {"fp32", "bf16", "fp16", "fp8"};
  std::vector<std::string> twin_json;
  std::string twin_cmd;
  // The modes the live twin runs (Debian's PyTorch 1.13: fp32 and bf16; 2.3 and later fp16
  // too), and whether it also runs each under torch.compile ("pytorch-compile").
  std::vector<std::string> twin_modes = {"fp32", "bf16"};
  bool twin_compile = false;

  bool twin_runs(const std::string& mode) const {
    return std::find(twin_modes.begin(), twin_modes.end(), mode) != twin_modes.end();
  }
};



// The twin's measurements read from --twin-json, keyed by bench, mode and shape.
using TwinLines = std::map<std::string, std::vector<double>>;

std::string twin_key(const std::string& bench, const std::string& mode, const std::string& shape) {
  return fmt::format("{}|{}|{}", bench, mode, shape);
}

// Adds the PyTorch lines of `path` (train_mlp: ms; train_tiny: us; train_memory: peak_mib) to
// lines; other lines (ratios, halfgrad's) are skipped.
void read_twin_lines(const std::string& path, TwinLines& lines) {
  std::ifstream in(path);
  HG_CHECK(in.good(), "hg-bench-train: expected a readable JSON-lines file, got '{}'", path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    const nlohmann::json record = nlohmann::json::parse(line);
    const std::string bench = record.value("bench", "");
    const char* value = bench == "train_mlp" || bench == "train_cnn" ? "ms"
                        : bench == "train_tiny"   ? "us"
                        : bench == "train_memory" ? "peak_mib"
                                                  : nullptr;
    if (value == nullptr || !record.contains(value) || record.value("impl", "") != "pytorch") {
      continue;
    }
    lines[twin_key(bench, record.value("mode", ""), record.value("shape", ""))].push_back(
        record[value].get<double>());
  }
}

std::optional<double> twin_line(const TwinLines& lines, const std::string& bench,
                                const std::string& mode, const std::string& shape) {
  auto found = lines.find(twin_key(bench, mode, shape));
  if (found == lines.end() || found->second.empty()) return std::nullopt;
  return median(found->second);
}

// The twin as a child process (`sh -c CMD`, train_twin.py --serve): one command line in, one
// JSON line out.
//
// NOTE [Settling between the sides] Alternating steps, the side that runs second must not share
// the cores with work the first one left running. PyTorch's process keeps both cores busy for
// some 25 ms after it has answered (its CPU time, sampled every 25 ms after each larger-GPT
// step: 30 ms in the first 25, then none), whatever OMP_WAIT_POLICY says; halfgrad's step
// right after it took 65 ms instead of the 36-40 it takes alone or after a twin that only
// sleeps or only streams through 256 MB. So each request waits kSettle, untimed, before it is
// sent and after its answer: neither side's step starts while the other's work still runs.
class TwinProcess {
 public:
  static constexpr std::chrono::milliseconds kSettle{50};

  explicit TwinProcess(std::string command) : command_(std::move(command)) {
    std::signal(SIGPIPE, SIG_IGN);  // a twin that died is reported when its answer is missing
    int to_child[2], from_child[2];
    HG_CHECK(pipe(to_child) == 0 && pipe(from_child) == 0,
             "hg-bench-train: could not make the pipes to the twin '{}'", command_);
    pid_ = fork();
    HG_CHECK(pid_ >= 0, "hg-bench-train: could not start the twin '{}'", command_);
    if (pid_ == 0) {
      dup2(to_child[0], STDIN_FILENO);
      dup2(from_child[1], STDOUT_FILENO);
      for (int fd : {to_child[0], to_child[1], from_child[0], from_child[1]}) close(fd);
      execl("/bin/sh", "sh", "-c", command_.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    to_ = fdopen(to_child[1], "w");
    from_ = fdopen(from_child[0], "r");
  }
  TwinProcess(const TwinProcess&) = delete;
  TwinProcess& operator=(const TwinProcess&) = delete;
  ~TwinProcess() {
    std::fputs("quit\n", to_);
    std::fclose(to_);
    std::fclose(from_);
    int status = 0;
    waitpid(pid_, &status, 0);
  }

  // Sends `command`; returns the number `field` of the answer. Each request waits kSettle
  // before it is sent and after the answer (NOTE [Settling between the sides]).
  double request(const std::string& command, const char* field) {
    std::this_thread::sleep_for(kSettle);
    std::fprintf(to_, "%s\n", command.c_str());
    std::fflush(to_);
    std::string answer;
    for (int c = std::fgetc(from_); c != EOF && c != '\n'; c = std::fgetc(from_)) {
      answer += char(c);
    }
    HG_CHECK(!answer.empty(), "hg-bench-train: the twin '{}' ended without answering '{}'",
             command_, command);
    std::this_thread::sleep_for(kSettle);
    const nlohmann::json record = nlohmann::json::parse(answer);
    HG_CHECK(record.contains(field) && record[field].is_number(),
             "hg-bench-train: expected the twin's answer to '{}' to hold \"{}\", got {}", command,
             field, answer);
    return record[field].get<double>();
  }

 private:
  std::string command_;
  pid_t pid_ = -1;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
};

struct Peers {
  TwinLines lines;                    // --twin-json
  std::unique_ptr<TwinProcess> live;  // --twin-cmd
};

const char* json_bool(bool value) { return value ? "true" : "false"; }

// The live twin's steps for `command` ("cnn bf16", "gpt-cpu larger fp16", ...) as candidates:
// PyTorch eager ("pytorch") and, with --twin-compile, torch.compile ("pytorch-compile").
std::vector<Candidate> twin_candidates(const TrainOptions& options, Peers& peers,
                                       const std::string& command, const std::string& mode) {
  std::vector<Candidate> found;
  TwinProcess* twin = peers.live.get();
  found.push_back({"pytorch", mode, nullptr, 0,
                   [twin, command] { return 1e3 * twin->request(command, "ms"); }});
  if (options.twin_compile) {
    const std::string compiled = command + " compile";
    found.push_back({"pytorch-compile", mode, nullptr, 0,
                     [twin, compiled] { return 1e3 * twin->request(compiled, "ms"); }});
  }
  return found;
}

// {"bench": "<bench>_ratio", ...}: halfgrad's value over the peer's, against `target` when
// it has one (the target is met when ratio <= target).
void print_ratio(const std::string& bench, const std::string& mode, const std::string& vs,
                 double halfgrad, double peer, std::optional<double> target) {
  const double ratio = halfgrad / peer;
  std::string line = fmt::format(
      "{{\"bench\": \"{}_ratio\", \"mode\": \"{}\", \"vs\": \"{}\", \"halfgrad\": {:.4g}, "
      "\"peer\": {:.4g}, \"ratio\": {:.3f}",
      bench, mode, vs, halfgrad, peer, ratio);
  if (target) {
    line += fmt::format(", \"target\": {}, \"met\": {}", *target, json_bool(ratio <= *target));
  }
  fmt::print("{}}}\n", line);
}

// halfgrad's step over each PyTorch side measured for `mode`: eager against target_eager,
// compiled against 1.0 (the targets).
void print_torch_ratios(const std::string& bench, const std::string& mode, double halfgrad_ms,
                        const std::map<std::string, double>& torch_ms,
                        std::optional<double> target_eager) {
  if (auto eager = torch_ms.find("pytorch|" + mode); eager != torch_ms.end()) {
    print_ratio(bench, mode, "pytorch", halfgrad_ms, eager->second, target_eager);
  }
  if (auto compiled = torch_ms.find("pytorch-compile|" + mode); compiled != torch_ms.end()) {
    print_ratio(bench, mode, "pytorch_compile", halfgrad_ms, compiled->second, 1.0);
  }
}

// A step on one thread against the same step on `threads` (the target: at most 0.6 of
// the one-thread time), the two interleaved:
//   {"bench": "<bench>_threads", "mode": "bf16", "threads": 2, "one_thread_ms": ..., "ms": ...,
//    "ratio": ..., "target": 0.6, "met": ...}
void print_thread_scaling(const TrainOptions& options, const std::string& bench, const char* mode,
                          int threads, const std::function<void()>& step) {
  std::vector<Candidate> candidates = {{"halfgrad", "1",
                                        [&step] {
                                          omp_set_num_threads(1);
                                          step();
                                        }},
                                       {"halfgrad", "n", [&step, threads] {
                                          omp_set_num_threads(threads);
                                          step();
                                        }}};
  hg::bench::time_interleaved(options, candidates);
  omp_set_num_threads(options.threads);
  const double one = candidates[0].us * 1e-3, many = candidates[1].us * 1e-3;
  fmt::print(
      "{{\"bench\": \"{}_threads\", \"mode\": \"{}\", \"threads\": {}, \"one_thread_ms\": "
      "{:.3f}, \"ms\": {:.3f}, \"ratio\": {:.3f}, \"target\": 0.6, \"met\": {}}}\n",
      bench, mode, threads, one, many, many / one, json_bool(many / one <= 0.6));
  std::fflush(stdout);
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

// Fp8: bf16 autocast with the linear layers in float8 under amp::Fp8Autocast (the GPT runs
// only; on the CPU the fp8 products are emulated, on the GPU they run on fp8 tensor cores).
enum class Mode { Fp32, Bf16, Fp16, Fp8 };

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::Fp32:
      return "fp32";
    case Mode::Bf16:
      return "bf16";
    case Mode::Fp16:
      return "fp16";
    default:
      return "fp8";
  }
}

// A classifier's model, data and optimizer in one mode (the MLP's and the CNN's); step() is one
// training step.
class ClassifierRun {
 public:
  ClassifierRun(Mode mode, std::shared_ptr<hg::nn::Sequential> model, Tensor x, Tensor y)
      : mode_(mode),
        model_(std::move(model)),
        x_(std::move(x)),
        y_(std::move(y)),
        opt_(model_->parameters(),
             {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01}),
        scaler_({.enabled = mode == Mode::Fp16}) {}

  Mode mode() const { return mode_; }

  // watched: the whole step under an amp::OverflowWatch (the watch section).
  void step(bool watched = false) {
    std::optional<hg::amp::OverflowWatch> watch;
    if (watched) watch.emplace(model_.get());
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

// The big MLP's run: model, then inputs, then labels, from seed 0.
std::unique_ptr<ClassifierRun> mlp_run(Mode mode, const MlpConfig& config) {
  hg::manual_seed(0);
  auto model = mlp(config.sizes);
  Tensor x = hg::randn({config.batch, config.sizes.front()});
  return std::make_unique<ClassifierRun>(mode, std::move(model), std::move(x),
                                         random_labels(config.batch, config.sizes.back(), 0));
}

// The CNN: two blocks of Conv2d 3x3 (padding 1), BatchNorm2d, ReLU and MaxPool2d 2 on 28 x 28
// single-channel images (1 -> 32 -> 64 channels), then Linear(64 * 7 * 7, 10).
std::shared_ptr<hg::nn::Sequential> cnn(int64_t width) {
  namespace nn = hg::nn;
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Conv2d>(1, width, 3, nn::Conv2dOptions{.padding = {1, 1}}));
  model->push_back(std::make_shared<nn::BatchNorm2d>(width));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::MaxPool2d>(2));
  model->push_back(
      std::make_shared<nn::Conv2d>(width, 2 * width, 3, nn::Conv2dOptions{.padding = {1, 1}}));
  model->push_back(std::make_shared<nn::BatchNorm2d>(2 * width));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::MaxPool2d>(2));
  model->push_back(std::make_shared<nn::Flatten>());
  model->push_back(std::make_shared<nn::Linear>(2 * width * 7 * 7, 10));
  return model;
}

struct CnnConfig {
  int64_t width, batch;
};

CnnConfig cnn_config(const TrainOptions& options) {
  if (options.small) return {4, 8};
  return {32, 128};
}

// The CNN's run on synthetic images (normal values, MNIST's shape) and labels, from seed 0.
std::unique_ptr<ClassifierRun> cnn_run(Mode mode, const CnnConfig& config) {
  hg::manual_seed(0);
  auto model = cnn(config.width);
  Tensor x = hg::randn({config.batch, 1, 28, 28});
  return std::make_unique<ClassifierRun>(mode, std::move(model), std::move(x),
                                         random_labels(config.batch, 10, 0));
}

// ---- sections -------------------------------------------------------------------------------

// A classifier section: halfgrad's fp32, bf16 and fp16 steps interleaved with the twin's
// ("<twin> fp32|bf16") and the ratios; bf16 over PyTorch against target_torch, bf16 over
// halfgrad's fp32 against target_fp32.
void run_classifier(const TrainOptions& options, Peers& peers, const std::string& bench,
                    const std::string& twin, const std::string& shape, int64_t batch,
                    const std::function<std::unique_ptr<ClassifierRun>(Mode)>& make_run,
                    double target_torch, double target_fp32) {
  const bool twin_live = peers.live && !options.small;
  std::vector<std::unique_ptr<ClassifierRun>> runs;
  // Two passes, as gpt-cpu's: halfgrad's modes interleaved among themselves (its lines and the
  // ratios over its fp32: a step right after the twin's starts with colder caches, which would
  // skew them), then, with a live twin, each mode interleaved with the twin's steps of that
  // mode only (a halfgrad step right after PyTorch's 2-second float16 CNN step, whose buffers
  // push halfgrad's out of the caches, took 59 ms where it takes 39-40 after a float32 one).
  std::vector<Candidate> own;
  std::vector<std::vector<Candidate>> against_torch;  // one list per mode
  for (Mode mode : {Mode::Fp32, Mode::Bf16, Mode::Fp16}) {
    if (std::find(options.modes.begin(), options.modes.end(), mode_name(mode)) ==
        options.modes.end()) {
      continue;
    }
    runs.push_back(make_run(mode));
    ClassifierRun* run = runs.back().get();
    const Candidate step{"halfgrad", mode_name(mode), [run] { run->step(); }};
    own.push_back(step);
    if (twin_live && options.twin_runs(mode_name(mode))) {
      std::vector<Candidate>& list = against_torch.emplace_back();
      list.push_back(step);
      for (Candidate& c :
           twin_candidates(options, peers, fmt::format("{} {}", twin, mode_name(mode)),
                           mode_name(mode))) {
        list.push_back(std::move(c));
      }
    }
  }
  const auto print_steps = [&](const std::vector<Candidate>& candidates, bool interleaved) {
    std::map<std::string, double> ms;  // by "impl|mode"
    for (const Candidate& c : candidates) {
      std::string note = interleaved ? ", \"interleaved\": true" : "";
      if (c.kernel == "fp16") note += ", \"note\": \"GradScaler on\"";
      fmt::print(
          "{{\"bench\": \"{}\", \"impl\": \"{}\", \"mode\": \"{}\", \"shape\": \"{}\", "
          "\"batch\": {}, \"ms\": {:.3f}{}}}\n",
          bench, c.impl, c.kernel, shape, batch, c.us * 1e-3, note);
      ms[c.impl + "|" + c.kernel] = c.us * 1e-3;
    }
    return ms;
  };
  hg::bench::time_interleaved(options, own);
  std::map<std::string, double> halfgrad_ms = print_steps(own, false);
  const auto has = [&](const std::string& mode) { return halfgrad_ms.count("halfgrad|" + mode); };
  for (const char* mode : {"bf16", "fp16"}) {
    if (has(mode) && has("fp32")) {
      // No 16-bit mode slower than fp32 anywhere; bf16 at target_fp32 where the CPU has fast
      // 16-bit dot products.
      print_ratio(bench, mode, "halfgrad_fp32", halfgrad_ms[std::string("halfgrad|") + mode],
                  halfgrad_ms["halfgrad|fp32"], std::string(mode) == "bf16" ? target_fp32 : 1.0);
    }
  }
  if (options.threads >= 2) {  // the same runs on one thread and on options.threads
    for (const auto& run : runs) {
      const std::string mode = mode_name(run->mode());
      if (mode == "fp16") continue;
      ClassifierRun* r = run.get();
      print_thread_scaling(options, bench, mode.c_str(), options.threads, [r] { r->step(); });
    }
  }
  std::map<std::string, double> torch_ms;
  for (std::vector<Candidate>& list : against_torch) {
    hg::bench::time_interleaved(options, list);
    torch_ms.merge(print_steps(list, true));
  }
  for (const char* mode : {"fp32", "bf16", "fp16"}) {
    if (!has(mode)) continue;
    double halfgrad = halfgrad_ms[std::string("halfgrad|") + mode];
    if (twin_live) {
      if (!torch_ms.count(std::string("halfgrad|") + mode)) continue;
      halfgrad = torch_ms[std::string("halfgrad|") + mode];  // the interleaved pass's own step
    } else if (auto ms = twin_line(peers.lines, bench, mode, shape)) {
      torch_ms[std::string("pytorch|") + mode] = *ms;
    }
    const std::optional<double> target =
        std::string(mode) != "fp32" ? std::optional<double>(target_torch) : std::nullopt;
    print_torch_ratios(bench, mode, halfgrad, torch_ms, target);
  }
  std::fflush(stdout);
}

void run_mlp(const TrainOptions& options, Peers& peers) {
  const MlpConfig config = mlp_config(options);
  run_classifier(options, peers, "train_mlp", "mlp", shape_name(config.sizes), config.batch,
                 [&](Mode mode) { return mlp_run(mode, config); }, 0.5, 0.6);
}

void run_cnn(const TrainOptions& options, Peers& peers) {
  const CnnConfig config = cnn_config(options);
  const std::string shape = fmt::format("cnn-{}-{}-28x28", config.width, 2 * config.width);
  run_classifier(options, peers, "train_cnn", "cnn", shape, config.batch,
                 [&](Mode mode) { return cnn_run(mode, config); }, 0.8, 0.7);
}

void run_tiny(const TrainOptions& options, Peers& peers) {
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
  if (peers.live) {
    // The twin runs the same number of steps per call and answers per step.
    TwinProcess* twin = peers.live.get();
    const std::string command = fmt::format("tiny {}", steps);
    candidates.push_back({"pytorch", "tiny", nullptr, 0,
                          [twin, steps, command] { return steps * twin->request(command, "us"); }});
  }
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
  std::optional<double> torch_us = twin_line(peers.lines, "train_tiny", "", shape);
  if (peers.live) {
    torch_us = candidates[1].us / steps;
    fmt::print(
        "{{\"bench\": \"train_tiny\", \"impl\": \"pytorch\", \"shape\": \"{}\", \"batch\": {}, "
        "\"us\": {:.3f}, \"interleaved\": true}}\n",
        shape, batch, *torch_us);
  }
  if (torch_us) print_ratio("train_tiny", "fp32", "pytorch", us, *torch_us, std::nullopt);
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

// Resets VmHWM to the current VmRSS; false where the kernel refuses (the peak then also covers
// what the process reached before, in a fresh process its start-up; the line says so).
bool reset_peak_rss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5" << std::flush;
  return clear_refs.good();
}

void run_memory(const TrainOptions& options, Peers& peers) {
  const bool hwm_reset = reset_peak_rss();
  const int64_t baseline = proc_status_kib("VmRSS");
  const MlpConfig config = mlp_config(options);
  const std::string shape = shape_name(config.sizes);
  {
    const std::unique_ptr<ClassifierRun> made = mlp_run(Mode::Bf16, config);
    ClassifierRun& run = *made;
    for (int i = 0; i < options.memory_steps; ++i) run.step();
  }
  const double peak_mib = double(proc_status_kib("VmHWM") - baseline) / 1024;
  fmt::print(
      "{{\"bench\": \"train_memory\", \"impl\": \"halfgrad\", \"mode\": \"bf16\", \"shape\": "
      "\"{}\", \"definition\": \"VmHWM after the steps minus VmRSS before the model, HWM reset "
      "there\", \"hwm_reset\": {}, \"steps\": {}, \"peak_mib\": {:.1f}}}\n",
      shape, json_bool(hwm_reset), options.memory_steps, peak_mib);
  if (auto torch_mib = twin_line(peers.lines, "train_memory", "bf16", shape)) {
    print_ratio("train_memory", "bf16", "pytorch", peak_mib, *torch_mib, 1.0);
  }
  std::fflush(stdout);
}

// The cost of amp::OverflowWatch: the MLP's bf16 and fp16 steps with and without a watch over
// the whole step (every op's outputs checked), interleaved.
void run_watch(const TrainOptions& options, Peers&) {
  const MlpConfig config = mlp_config(options);
  const std::string shape = shape_name(config.sizes);
  std::vector<std::unique_ptr<ClassifierRun>> runs;
  std::vector<Candidate> candidates;
  for (Mode mode : {Mode::Bf16, Mode::Fp16}) {
    runs.push_back(mlp_run(mode, config));
    ClassifierRun* run = runs.back().get();
    candidates.push_back({"off", mode_name(mode), [run] { run->step(false); }});
    candidates.push_back({"on", mode_name(mode), [run] { run->step(true); }});
  }
  hg::bench::time_interleaved(options, candidates);
  for (size_t i = 0; i + 1 < candidates.size(); i += 2) {
    const double off = candidates[i].us * 1e-3, on = candidates[i + 1].us * 1e-3;
    fmt::print(
        "{{\"bench\": \"overflow_watch\", \"mode\": \"{}\", \"shape\": \"{}\", \"batch\": {}, "
        "\"ms_off\": {:.3f}, \"ms_on\": {:.3f}, \"overhead\": {:.3f}}}\n",
        candidates[i].kernel, shape, config.batch, off, on, on / off);
  }
  std::fflush(stdout);
}

// ---- GPU: the GPT training step ---------------------------------------------------------------

struct GptConfig {
  int64_t vocab, block, layers, heads, embd, batch;
  std::string shape() const {
    return fmt::format("gpt-L{}-H{}-C{}-T{}-V{}", layers, heads, embd, block, vocab);
  }
};

GptConfig gpt_config(const TrainOptions& options) {
  if (options.small) return {512, 64, 2, 4, 128, options.batch};
  return {options.vocab, 1024, 12, 12, 768, options.batch};
}

// The GPT of `config`, initialized on the CPU from seed 0, then moved to `device`.
std::shared_ptr<hg::nn::GPT> gpt_on(const GptConfig& config, hg::DeviceType device) {
  hg::manual_seed(0);
  auto model = std::make_shared<hg::nn::GPT>(config.vocab, config.block, config.layers,
                                             config.heads, config.embd);
  model->to(device);
  return model;
}

// One mode's GPT, data, optimizer and scaler on `device`; step() is one training step.
class GptRun {
 public:
  GptRun(Mode mode, const GptConfig& config, hg::DeviceType device = hg::kCUDA)
      : mode_(mode),
        device_(device),
        config_(config),
        model_(gpt_on(config, device)),
        opt_(param_groups(*model_), {.lr = 6e-4, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8}),
        scaler_({.enabled = mode == Mode::Fp16}) {
    const int64_t B = config.batch, T = config.block;
    idx_ = random_labels(B * T, config.vocab, 1).reshape({B, T}).to(device);  // [B, T]
    targets_ = random_labels(B * T, config.vocab, 2).to(device);              // [B * T]
    params_ = model_->parameters();
  }

  // One training step; mark(i), when given, is called at the start (0), after the forward and
  // loss (1), after the backward (2) and at the end (3).
  void step(const std::function<void(int)>& mark = {}) {
    if (mark) mark(0);
    opt_.zero_grad();
    {
      hg::amp::Autocast autocast(device_, mode_ == Mode::Fp16 ? hg::kFloat16 : hg::kBFloat16,
                                 /*enabled=*/mode_ != Mode::Fp32);
      hg::amp::Fp8Autocast fp8(fp8_recipe_, /*enabled=*/mode_ == Mode::Fp8);
      const Tensor logits = model_->forward(idx_);  // [B, T, V]
      loss_ = hg::cross_entropy(logits.reshape({-1, config_.vocab}), targets_);
    }
    if (mark) mark(1);
    scaler_.scale(loss_).backward();
    if (mark) mark(2);
    scaler_.unscale_(opt_);
    hg::nn::utils::clip_grad_norm_(params_, 1.0);
    scaler_.step(opt_);
    scaler_.update();
    if (mark) mark(3);
  }

  // Gradient checkpointing of every block (nn::GPT::checkpoint_blocks).
  void set_checkpoint_blocks(bool on) { model_->checkpoint_blocks = on; }

  int64_t parameter_count() const {
    int64_t count = 0;
    for (const Tensor& p : params_) count += p.numel();
    return count;
  }
  double last_loss() const { return loss_.item<double>(); }  // waits for the device
  double scale() const { return scaler_.get_scale(); }
  const Tensor& loss() const { return loss_; }
  Mode mode() const { return mode_; }

 private:
  // nanoGPT's groups: weight decay on the parameters of 2 or more dims (matrices, embeddings).
  static std::vector<hg::optim::ParamGroup> param_groups(const hg::nn::Module& model) {
    std::vector<Tensor> decay, no_decay;
    for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
    return {{.params = decay, .options = {{"weight_decay", 0.1}}},
            {.params = no_decay, .options = {{"weight_decay", 0.0}}}};
  }

  Mode mode_;
  hg::DeviceType device_;
  GptConfig config_;
  std::shared_ptr<hg::nn::GPT> model_;
  hg::optim::AdamW opt_;
  hg::amp::GradScaler scaler_;
  hg::amp::DelayedScaling fp8_recipe_;  // Transformer Engine's defaults
  Tensor idx_, targets_, loss_;
  std::vector<Tensor> params_;
};

// {"bench": "<bench>", ...} (train_gpt_ops, train_gpt_cpu_ops): the time of a step per phase
// and op (forward, optimizer) or autograd node (backward). Stamps mark the boundaries, the time
// between two stamps is the work between them: on the GPU events, whose interval is the work
// enqueued between them; on the CPU the host's clock, ops being synchronous there:
//   - forward and optimizer: a dispatch observer (ops/observer.h) stamps after each outermost
//     op of the device, so an interval is the op's (its autocast casts and inner ops
//     included). Work outside ops (the fused optimizer's kernels) falls to "(outside ops)",
//     closed by the step's marks;
//   - backward: a pre-hook on every node of the graph stamps before the node runs, so an
//     interval is the previous node's (its kernels, and the engine's sums of the gradients it
//     produced), whether its backward calls ops or kernels directly.
// A GPU stamp costs the host a few microseconds; the step stays GPU-bound (train_gpt_phases'
// host_ms). A CPU stamp costs a clock read, and the hooks' calls, a small part of an op.
class OpProfile final : public hg::ops::DispatchObserver {
 public:
  explicit OpProfile(hg::DeviceType device) : device_(device) {}
  ~OpProfile() override { remove_hooks(); }

  void on_op(const hg::ops::OpCall& call) override {
    if (phase_ != "backward" && call.outermost && call.device_type == device_) {
      record(std::string(hg::op_name(call.op)));
    }
  }
  // Closes the current phase and starts `next` ("" at the end); entering the backward hooks
  // every node of the graph that produced `loss`.
  void mark(const std::string& next, const Tensor& loss) {
    if (phase_ == "backward") {
      record(node_);
      remove_hooks();
    } else if (!phase_.empty()) {
      record("(outside ops)");
    }
    phase_ = next;
    if (next.empty()) {
      stepped_ = true;  // the next mark starts another step: no interval across steps
      return;
    }
    if (stepped_ || labels_.empty()) record("(start)");
    stepped_ = false;
    if (phase_ == "backward") {
      node_ = "(before the first node)";
      hook_graph(loss);
    }
  }
  // Per (phase, op or node): calls and milliseconds, once the recorded work has run.
  std::map<std::pair<std::string, std::string>, std::pair<int, double>> totals() const {
    std::map<std::pair<std::string, std::string>, std::pair<int, double>> out;
#if HALFGRAD_HAS_CUDA
    if (device_ == hg::kCUDA && used_ > 0) events_[used_ - 1]->synchronize();
#endif
    for (size_t i = 1; i < labels_.size(); ++i) {
      if (labels_[i].second == "(start)") continue;
      auto& [calls, ms] = out[labels_[i]];
      ++calls;
      ms += elapsed_ms(i - 1, i);
    }
    return out;
  }

 private:
  void record(std::string label) {
#if HALFGRAD_HAS_CUDA
    if (device_ == hg::kCUDA) {
      if (used_ == events_.size()) events_.push_back(std::make_unique<hg::cuda::Event>());
      events_[used_++]->record();
    }
#endif
    if (device_ == hg::kCPU) host_stamps_.push_back(std::chrono::steady_clock::now());
    labels_.emplace_back(phase_, std::move(label));
  }
  double elapsed_ms(size_t from, size_t to) const {
#if HALFGRAD_HAS_CUDA
    if (device_ == hg::kCUDA) return double(events_[from]->elapsed_ms(*events_[to]));
#endif
    return std::chrono::duration<double, std::milli>(host_stamps_[to] - host_stamps_[from]).count();
  }
  void hook_graph(const Tensor& loss) {
    std::vector<std::shared_ptr<hg::autograd::Node>> pending;
    if (loss.grad_fn()) pending.push_back(loss.grad_fn());
    std::set<hg::autograd::Node*> seen;
    while (!pending.empty()) {
      std::shared_ptr<hg::autograd::Node> node = std::move(pending.back());
      pending.pop_back();
      if (!seen.insert(node.get()).second || node->outputs.empty()) continue;
      node->pre_hooks.emplace_back(0, [this, name = node->name()](const Tensor&) {
        record(node_);
        node_ = name;
        return Tensor();
      });
      hooked_.push_back(node);
      for (const hg::autograd::Edge& edge : node->next_edges) {
        if (edge.valid()) pending.push_back(edge.node);
      }
    }
  }
  void remove_hooks() {
    for (const auto& node : hooked_) node->pre_hooks.pop_back();
    hooked_.clear();
  }

  hg::DeviceType device_;
#if HALFGRAD_HAS_CUDA
  std::vector<std::unique_ptr<hg::cuda::Event>> events_;
  size_t used_ = 0;
#endif
  std::vector<std::chrono::steady_clock::time_point> host_stamps_;
  std::vector<std::pair<std::string, std::string>> labels_;
  std::string phase_, node_;
  bool stepped_ = false;
  std::vector<std::shared_ptr<hg::autograd::Node>> hooked_;
};

// The `top` largest (phase, op or node) times of `steps` steps of run on `device`, per step,
// as {"bench": "<bench>", ...} lines.
void print_gpt_ops(const std::string& bench, GptRun& run, hg::DeviceType device, Mode mode,
                   int steps, int top) {
  OpProfile profile(device);
  const char* phases[] = {"forward", "backward", "optimizer", ""};
#if HALFGRAD_HAS_CUDA
  if (device == hg::kCUDA) hg::cuda::synchronize();
#endif
  for (int step = 0; step < steps; ++step) {
    run.step([&](int i) { profile.mark(phases[i], run.loss()); });
  }
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [key, value] : profile.totals()) {
    const double ms = value.second / steps;
    rows.emplace_back(
        ms, fmt::format("{{\"bench\": \"{}\", \"impl\": \"halfgrad\", "
                        "\"mode\": \"{}\", \"phase\": \"{}\", \"op\": \"{}\", "
                        "\"calls\": {}, \"ms\": {:.3f}}}",
                        bench, mode_name(mode), key.first, key.second, value.first / steps, ms));
  }
  std::sort(rows.rbegin(), rows.rend());
  for (int i = 0; i < top && i < int(rows.size()); ++i) fmt::print("{}\n", rows[size_t(i)].second);
  std::fflush(stdout);
}

// {"bench": "<bench>_speedup", ...}: halfgrad's throughput over the peer's (higher is better;
// the target is met when speedup >= target).
void print_speedup(const std::string& bench, const std::string& mode, const std::string& vs,
                   double halfgrad, double peer, double target) {
  const double speedup = halfgrad / peer;
  fmt::print(
      "{{\"bench\": \"{}_speedup\", \"mode\": \"{}\", \"vs\": \"{}\", \"halfgrad\": {:.4g}, "
      "\"peer\": {:.4g}, \"speedup\": {:.3f}, \"target\": {}, \"met\": {}}}\n",
      bench, mode, vs, halfgrad, peer, speedup, target, json_bool(speedup >= target));
}

#if HALFGRAD_HAS_CUDA
// {"bench": "train_gpt_phases", ...}: where a step's GPU time goes (events at run.step's marks,
// the median over --reps single steps) and how long step() takes to return on the host
// (enqueueing; the GPU runs behind it): a host_ms near the step's GPU time would mean the
// host, not the GPU, sets the pace.
void print_gpt_phases(const TrainOptions& options, GptRun& run, Mode mode) {
  std::vector<std::unique_ptr<hg::cuda::Event>> events;
  for (int i = 0; i < 4; ++i) events.push_back(std::make_unique<hg::cuda::Event>());
  std::vector<double> forward, backward, optimizer, host;
  for (int rep = 0; rep < options.reps; ++rep) {
    hg::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    run.step([&](int i) { events[size_t(i)]->record(); });
    host.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    events[3]->synchronize();
    forward.push_back(events[0]->elapsed_ms(*events[1]));
    backward.push_back(events[1]->elapsed_ms(*events[2]));
    optimizer.push_back(events[2]->elapsed_ms(*events[3]));
  }
  fmt::print(
      "{{\"bench\": \"train_gpt_phases\", \"impl\": \"halfgrad\", \"mode\": \"{}\", "
      "\"forward_ms\": {:.3f}, \"backward_ms\": {:.3f}, \"optimizer_ms\": {:.3f}, "
      "\"host_ms\": {:.3f}}}\n",
      mode_name(mode), median(forward), median(backward), median(optimizer), median(host));
  std::fflush(stdout);
}

// {"bench": "train_gpt_graph", ...}: the step captured once into a CUDA graph (it makes no host
// sync, NOTE [No host sync in the step]) and replayed: its time without the host's enqueueing.
void print_gpt_graph(const TrainOptions& options, GptRun& run, Mode mode, double eager_ms) {
  try {
    hg::cuda::Graph graph;
    graph.capture_begin();
    run.step();
    graph.capture_end();
    const double ms = hg::bench::cuda_ms_per_call(options, [&] { graph.replay(); });
    fmt::print(
        "{{\"bench\": \"train_gpt_graph\", \"impl\": \"halfgrad\", \"mode\": \"{}\", "
        "\"host_syncs\": 0, \"ms\": {:.3f}, \"eager_ms\": {:.3f}, \"eager_over_graph\": "
        "{:.3f}}}\n",
        mode_name(mode), ms, eager_ms, eager_ms / ms);
  } catch (const std::exception& e) {
    fmt::print(
        "{{\"bench\": \"train_gpt_graph\", \"impl\": \"halfgrad\", \"mode\": \"{}\", "
        "\"error\": {}}}\n",
        mode_name(mode), nlohmann::json(std::string(e.what())).dump());
  }
  std::fflush(stdout);
}
#endif

void run_gpt(const TrainOptions& options, Peers&) {
  const GptConfig config = gpt_config(options);
  const int64_t tokens = config.batch * config.block;
  std::map<std::string, double> tokens_per_s;
  for (Mode mode : {Mode::Fp32, Mode::Fp16, Mode::Bf16, Mode::Fp8}) {
    if (std::find(options.modes.begin(), options.modes.end(), mode_name(mode)) ==
        options.modes.end()) {
      continue;
    }
    hg::cuda::synchronize();
    hg::cuda::reset_peak_memory_stats();
    GptRun run(mode, config);
    const double ms = hg::bench::cuda_ms_per_call(options, [&] { run.step(); });
    const double peak_mib = hg::bench::cuda_peak_mib();
    tokens_per_s[mode_name(mode)] = double(tokens) / ms * 1e3;
    fmt::print(
        "{{\"bench\": \"train_gpt\", \"impl\": \"halfgrad\", \"mode\": \"{}\", \"shape\": \"{}\", "
        "\"batch\": {}, \"tokens\": {}, \"ms\": {:.3f}, \"tokens_per_s\": {:.0f}, "
        "\"peak_mib\": {:.1f}, \"params\": {}, \"loss\": {:.4f}, \"scale\": {}}}\n",
        mode_name(mode), config.shape(), config.batch, tokens, ms, tokens_per_s[mode_name(mode)],
        peak_mib, run.parameter_count(), run.last_loss(), run.scale());
    std::fflush(stdout);
#if HALFGRAD_HAS_CUDA
    print_gpt_phases(options, run, mode);
    if (mode == Mode::Bf16) {
      print_gpt_ops("train_gpt_ops", run, hg::kCUDA, mode, 1, 60);
      print_gpt_graph(options, run, mode, ms);
    }
#endif
  }
  if (tokens_per_s.count("bf16") && tokens_per_s.count("fp32")) {
    print_speedup("train_gpt", "bf16", "halfgrad_fp32", tokens_per_s["bf16"], tokens_per_s["fp32"],
                  3.0);
  }
  // fp8 against bf16: the linear layers' GEMMs at twice the tensor-core rate, minus the casts
  // and amax reductions around them; target: not slower than bf16.
  if (tokens_per_s.count("fp8") && tokens_per_s.count("bf16")) {
    print_speedup("train_gpt", "fp8", "halfgrad_bf16", tokens_per_s["fp8"], tokens_per_s["bf16"],
                  1.0);
  }
  std::fflush(stdout);
}

// ---- CPU: the GPT training step ---------------------------------------------------------------

// The gpt-cpu sizes (train_twin.py's GPT_CPU holds the same), each at its own thread count,
// with the targets: bf16 and fp16 over halfgrad's fp32, bf16 over PyTorch's bf16.
struct CpuGpt {
  const char* size;
  GptConfig config;  // vocab, block, layers, heads, embd, batch
  int threads;
  double bf16_target;
  std::optional<double> fp16_target;
  double torch_target;
};

const CpuGpt kCpuGpts[] = {{"demo", {13, 9, 2, 4, 48, 64}, 1, 0.75, 1.0, 0.5},
                           {"larger", {256, 64, 4, 8, 256, 16}, 2, 0.6, std::nullopt, 0.5}};

// --small: a 1-layer, 32-wide GPT on T = 8 (smoke tests; no twin).
const CpuGpt kSmallCpuGpt = {"small", {16, 8, 1, 2, 32, 4}, 1, 0.75, 1.0, 0.35};

// Times `candidates` interleaved (their calls at the size's thread count) and prints a
// train_gpt_cpu line for each; returns the milliseconds by (impl, mode).
std::map<std::pair<std::string, std::string>, double> time_gpt_cpu(
    const TrainOptions& options, const CpuGpt& gpt, std::vector<Candidate>& candidates,
    bool interleaved) {
  hg::bench::time_interleaved(options, candidates);
  std::map<std::pair<std::string, std::string>, double> ms;
  for (const Candidate& c : candidates) {
    ms[{c.impl, c.kernel}] = c.us * 1e-3;
    std::string extra = interleaved ? ", \"interleaved\": true" : "";
    if (c.kernel == "fp16") extra += ", \"note\": \"GradScaler on\"";
    fmt::print(
        "{{\"bench\": \"train_gpt_cpu\", \"impl\": \"{}\", \"mode\": \"{}\", \"size\": "
        "\"{}\", \"shape\": \"{}\", \"batch\": {}, \"threads\": {}, \"ms\": {:.3f}{}}}\n",
        c.impl, c.kernel, gpt.size, gpt.config.shape(), gpt.config.batch, gpt.threads, c.us * 1e-3,
        extra);
  }
  std::fflush(stdout);
  return ms;
}

// Two passes per size: halfgrad's modes interleaved among themselves, steps back to back as a
// training loop runs them (the ratios over halfgrad's fp32, and the op profiles); then, with a
// live twin, halfgrad's fp32 and bf16 interleaved with PyTorch's (NOTE [Settling between the
// sides]; the modes of --twin-modes, each also under torch.compile with --twin-compile), for the
// ratios over PyTorch. Each step of the
// second pass starts after the other side's and a pause, with colder caches than in a loop.
void run_gpt_cpu(const TrainOptions& options, Peers& peers) {
  std::vector<CpuGpt> sizes(std::begin(kCpuGpts), std::end(kCpuGpts));
  if (options.small) sizes = {kSmallCpuGpt};
  const bool twin_live = peers.live && !options.small;
  for (const CpuGpt& gpt : sizes) {
    std::vector<std::unique_ptr<GptRun>> runs;
    std::vector<Candidate> own, against_torch;
    for (Mode mode : {Mode::Fp32, Mode::Bf16, Mode::Fp16, Mode::Fp8}) {
      if (std::find(options.modes.begin(), options.modes.end(), mode_name(mode)) ==
          options.modes.end()) {
        continue;
      }
      runs.push_back(std::make_unique<GptRun>(mode, gpt.config, hg::kCPU));
      GptRun* run = runs.back().get();
      const int threads = gpt.threads;
      const Candidate step{"halfgrad", mode_name(mode), [run, threads] {
                             omp_set_num_threads(threads);
                             run->step();
                           }};
      own.push_back(step);
      if (twin_live && options.twin_runs(mode_name(mode))) {
        against_torch.push_back(step);
        for (Candidate& c : twin_candidates(
                 options, peers, fmt::format("gpt-cpu {} {}", gpt.size, mode_name(mode)),
                 mode_name(mode))) {
          against_torch.push_back(std::move(c));
        }
      }
    }
    auto ms = time_gpt_cpu(options, gpt, own, false);
    const std::string bench = fmt::format("train_gpt_cpu_{}", gpt.size);
    const auto halfgrad = [&](const char* mode) { return ms.find({"halfgrad", mode}); };
    if (halfgrad("fp32") != ms.end()) {
      if (halfgrad("bf16") != ms.end()) {
        print_ratio(bench, "bf16", "halfgrad_fp32", halfgrad("bf16")->second,
                    halfgrad("fp32")->second, gpt.bf16_target);
      }
      if (halfgrad("fp16") != ms.end()) {
        print_ratio(bench, "fp16", "halfgrad_fp32", halfgrad("fp16")->second,
                    halfgrad("fp32")->second, gpt.fp16_target);
      }
    }
    // The CPU emulates fp8 (NOTE [Scaled fp8 GEMM]): the cost of the emulation over bf16.
    if (halfgrad("fp8") != ms.end() && halfgrad("bf16") != ms.end()) {
      print_ratio(bench, "fp8", "halfgrad_bf16", halfgrad("fp8")->second,
                  halfgrad("bf16")->second, std::nullopt);
    }
    // Where each mode's step goes: the 30 largest (phase, op or node) times, per step over
    // 10 steps.
    omp_set_num_threads(gpt.threads);
    for (size_t i = 0; i < runs.size(); ++i) {
      print_gpt_ops(fmt::format("{}_ops", bench), *runs[i], hg::kCPU, runs[i]->mode(), 10, 30);
    }
    omp_set_num_threads(options.threads);
    if (gpt.threads >= 2) {  // the size's thread count against one thread, fp32 and bf16
      for (size_t i = 0; i < runs.size(); ++i) {
        GptRun* run = runs[i].get();
        if (run->mode() != Mode::Fp32 && run->mode() != Mode::Bf16) continue;
        print_thread_scaling(options, bench, mode_name(run->mode()), gpt.threads,
                             [run] { run->step(); });
      }
    }
    if (!against_torch.empty()) {
      ms = time_gpt_cpu(options, gpt, against_torch, true);
      omp_set_num_threads(options.threads);
      for (const char* mode : {"fp32", "bf16", "fp16"}) {
        const auto h = ms.find({"halfgrad", mode});
        if (h == ms.end()) continue;
        std::map<std::string, double> torch_ms;
        for (const char* impl : {"pytorch", "pytorch-compile"}) {
          if (auto t = ms.find({impl, mode}); t != ms.end()) {
            torch_ms[std::string(impl) + "|" + mode] = t->second;
          }
        }
        const std::optional<double> target =
            std::string(mode) != "fp32" ? std::optional<double>(gpt.torch_target) : std::nullopt;
        print_torch_ratios(bench, mode, h->second, torch_ms, target);
      }
    }
    omp_set_num_threads(options.threads);
    std::fflush(stdout);
  }
}

// The CPU GPT's step with and without gradient checkpointing of its blocks, in fp32 and bf16:
// the median step time of the four interleaved, and each one's peak of live bytes in the CPU
// allocator over one step above what was live before it (cpu_reset_peak_stats), so the
// activations a step keeps count and the model, optimizer state and cached blocks do not.
void run_checkpoint(const TrainOptions& options, Peers&) {
  const CpuGpt& gpt = options.small ? kSmallCpuGpt : kCpuGpts[1];
  std::vector<std::unique_ptr<GptRun>> runs;
  std::vector<Candidate> candidates;
  for (Mode mode : {Mode::Fp32, Mode::Bf16}) {
    for (bool checkpointed : {false, true}) {
      runs.push_back(std::make_unique<GptRun>(mode, gpt.config, hg::kCPU));
      GptRun* run = runs.back().get();
      run->set_checkpoint_blocks(checkpointed);
      const int threads = gpt.threads;
      candidates.push_back({checkpointed ? "checkpoint" : "plain", mode_name(mode), [run, threads] {
                              omp_set_num_threads(threads);
                              run->step();
                            }});
    }
  }
  hg::bench::time_interleaved(options, candidates);
  omp_set_num_threads(gpt.threads);
  std::map<std::pair<std::string, std::string>, std::pair<double, double>> measured;
  for (size_t i = 0; i < runs.size(); ++i) {
    const int64_t before = hg::cpu_allocator_stats().live_bytes;
    hg::cpu_reset_peak_stats();
    runs[i]->step();
    const double peak_mib =
        double(hg::cpu_allocator_stats().peak_bytes - before) / (1024.0 * 1024.0);
    const Candidate& c = candidates[i];
    measured[{c.impl, c.kernel}] = {c.us * 1e-3, peak_mib};
    fmt::print(
        "{{\"bench\": \"train_gpt_checkpoint\", \"impl\": \"halfgrad\", \"mode\": \"{}\", "
        "\"size\": \"{}\", \"shape\": \"{}\", \"batch\": {}, \"threads\": {}, "
        "\"checkpoint\": {}, \"ms\": {:.3f}, \"step_peak_mib\": {:.2f}}}\n",
        c.kernel, gpt.size, gpt.config.shape(), gpt.config.batch, gpt.threads,
        json_bool(c.impl == "checkpoint"), c.us * 1e-3, peak_mib);
  }
  for (const char* mode : {"fp32", "bf16"}) {
    const auto plain = measured.at({"plain", mode}), checkpoint = measured.at({"checkpoint", mode});
    fmt::print(
        "{{\"bench\": \"train_gpt_checkpoint_ratio\", \"mode\": \"{}\", \"size\": \"{}\", "
        "\"time_ratio\": {:.3f}, \"memory_ratio\": {:.3f}}}\n",
        mode, gpt.size, checkpoint.first / plain.first, checkpoint.second / plain.second);
  }
  omp_set_num_threads(options.threads);
  std::fflush(stdout);
}

// ---- sections -------------------------------------------------------------------------------

struct Section {
  const char* name;
  void (*run)(const TrainOptions&, Peers&);
  bool cuda;  // runs with --device cuda (and only then)
};

// memory is not part of "all": it must run alone in its process.
constexpr Section kSections[] = {{"mlp", run_mlp, false},
                                 {"cnn", run_cnn, false},
                                 {"tiny", run_tiny, false},
                                 {"watch", run_watch, false},
                                 {"gpt-cpu", run_gpt_cpu, false},
                                 {"memory", run_memory, false},
                                 {"gpt", run_gpt, true},
                                 {"checkpoint", run_checkpoint, false}};

void run_sections(const TrainOptions& options) {
  const bool cuda = options.device == "cuda";
  for (const Section& section : kSections) {
    HG_CHECK(options.only != section.name || section.cuda == cuda,
             "hg-bench-train: the section '{}' runs with --device {}, not --device {}",
             section.name, section.cuda ? "cuda" : "cpu", options.device);
  }
  if (cuda) {
    hg::bench::require_cuda("hg-bench-train");
    hg::bench::print_cuda_device();
  }
  Peers peers;
  for (const std::string& path : options.twin_json) read_twin_lines(path, peers.lines);
  // The memory section measures this process alone: it never starts the twin. The GPU
  // section's twin runs in a process of its own (benchmarks/run-gpu).
  if (!options.twin_cmd.empty() && options.only != "memory" && !cuda) {
    peers.live = std::make_unique<TwinProcess>(options.twin_cmd);
  }
  for (const Section& section : kSections) {
    if (section.cuda != cuda) continue;
    const bool alone = std::string(section.name) == "memory";
    if (options.only == section.name || (options.only == "all" && !alone)) {
      section.run(options, peers);
    }
  }
}

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
  app.add_option("--modes", options.modes, "mlp and gpt: the modes to time")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8"}));
  app.add_option("--batch", options.batch, "gpt: sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--vocab", options.vocab, "gpt: vocabulary size")->check(CLI::PositiveNumber);
  app.add_flag("--small", options.small, "mlp, memory and gpt: a small model (for smoke tests)");
  CLI::Option* twin_json =
      app.add_option("--twin-json", options.twin_json, "the PyTorch twin's JSON lines")
          ->check(CLI::ExistingFile);
  app.add_option("--twin-cmd", options.twin_cmd,
                 "the PyTorch twin to run interleaved (train_twin.py --serve)")
      ->excludes(twin_json);
  app.add_option("--twin-modes", options.twin_modes, "the modes the live twin runs")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_flag("--twin-compile", options.twin_compile,
               "also time the live twin under torch.compile (PyTorch 2.x)");
  CLI11_PARSE(app, argc, argv);

  omp_set_num_threads(options.threads);
  return hg::bench::exit_code_of([&] { run_sections(options); });
}
