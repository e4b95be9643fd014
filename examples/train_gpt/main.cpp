// train_gpt: a small character-level GPT (nn::GPT, nanoGPT's layout) trained with mixed
// precision on the CPU.
//
// The task is made in-process (addition_task.h: "07+45=250.", answers reversed, exact-match
// accuracy of greedy decoding on held-out problems) or is any text file (--text FILE,
// text_task.h: next-character accuracy on the file's held-out tail). The loop is trainer.h's:
//
//   --dtype fp32   no autocast, no scaling: the reference;
//   --dtype fp16   forward under amp::Autocast(kCPU, kFloat16), loss scaled by a GradScaler;
//   --dtype bf16   forward under amp::Autocast(kCPU, kBFloat16), no scaling;
//   --dtype fp8    bf16, with the linear layers in float8 under amp::Fp8Autocast (delayed
//                  scaling; the CPU emulates the fp8 products exactly), no scaling.
//
// A progress line shows the loss, tokens/s and the scale (rewritten in place on a terminal,
// one line every --log-every steps otherwise; --quiet: none). The run ends with the accuracy;
// --json adds one JSON line of metrics. --compare fp32,fp16,bf16 trains once per dtype (same
// seed, same batches) and prints one table: step time, tokens/s, final loss, accuracy, skipped
// steps, final scale, speedup over fp32 (./scripts/demo runs this). --profile FILE profiles
// steps 3 to 5 (after two warm-up steps) with profiler::Profile, writes their Chrome trace to
// FILE (open it in ui.perfetto.dev) and prints the profiler's table.
//
// --ddp trains data-parallel over the processes mpirun (or torchrun) started, one model replica
// each, gradients averaged by nn::parallel::DistributedDataParallel over MPI:
//
//   mpirun -np 2 build/release/examples/train_gpt --ddp --threads 1
//
// --batch is per rank (the step trains on batch * ranks sequences); rank 0 prints.
//
// Exit status: 0; 1 when an accuracy is below --min-accuracy; 2 on bad input (an unreadable or
// too short --text file, a model shape halfgrad refuses).
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "addition_task.h"
#include "halfgrad/halfgrad.h"
#if HALFGRAD_HAS_DISTRIBUTED
#include "halfgrad/distributed/data_parallel.h"
#endif
#include "text_task.h"
#include "trainer.h"

using namespace hg;
using namespace hg::examples;

namespace {

// How progress is shown: rewritten in place on a terminal, as log lines otherwise.
enum class Progress { kNone, kInPlace, kLines };

// A JSON number, or null for inf/NaN (which JSON cannot write).
std::string json_number(double value) {
  return std::isfinite(value) ? fmt::format("{:.6g}", value) : "null";
}

void print_json(const TrainMetrics& m, std::string_view task) {
  fmt::print(
      "{{\"task\": \"{}\", \"dtype\": \"{}\", \"ranks\": {}, \"steps\": {}, \"step_ms\": {}, "
      "\"tokens_per_s\": {}, \"final_loss\": {}, \"accuracy\": {}, \"skipped_steps\": {}, "
      "\"final_scale\": {}}}\n",
      task, precision_name(m.dtype, m.fp8), m.world_size, m.steps, json_number(m.step_ms),
      json_number(m.tokens_per_s),
      json_number(m.final_loss), json_number(m.accuracy), m.skipped_steps,
      json_number(m.final_scale));
}

// The --compare table, one row per run; speedup is fp32's step time over the row's (needs an
// fp32 run).
void print_table(const std::vector<TrainMetrics>& runs) {
  double fp32_step_ms = 0.0;
  for (const TrainMetrics& m : runs) {
    if (m.dtype == kFloat32 && !m.fp8) fp32_step_ms = m.step_ms;
  }
  fmt::print("| {:<5} | {:>14} | {:>9} | {:>10} | {:>8} | {:>13} | {:>11} | {:>17} |\n", "dtype",
             "step time (ms)", "tokens/s", "final loss", "accuracy", "skipped steps", "final scale",
             "speedup over fp32");
  fmt::print(
      "|-------|---------------:|----------:|-----------:|---------:|--------------:|"
      "------------:|------------------:|\n");
  for (const TrainMetrics& m : runs) {
    const std::string speedup =
        fp32_step_ms > 0.0 ? fmt::format("{:.2f}x", fp32_step_ms / m.step_ms) : "-";
    fmt::print(
        "| {:<5} | {:>14.2f} | {:>9.0f} | {:>10.4f} | {:>8.3f} | {:>13} | {:>11g} | {:>17} |\n",
        precision_name(m.dtype, m.fp8), m.step_ms, m.tokens_per_s, m.final_loss, m.accuracy,
        m.skipped_steps, m.final_scale, speedup);
  }
}

// "fp32,fp16" -> {"fp32", "fp16"}, each checked by parse_precision.
std::vector<std::string> parse_precision_list(const std::string& list) {
  std::vector<std::string> names;
  std::stringstream in(list);
  std::string name;
  while (std::getline(in, name, ',')) {
    parse_precision(name);
    names.push_back(name);
  }
  HG_CHECK(!names.empty(), "--compare: expected a list such as fp32,fp16,bf16, got '{}'", list);
  return names;
}

// One progress line: "bf16 [########------------]  120/1000  loss 1.2345  23456 tok/s  scale 1".
std::string progress_line(std::string_view dtype, const StepReport& r) {
  constexpr int64_t kWidth = 24;
  const int64_t filled = kWidth * r.step / r.steps;
  return fmt::format("{} [{}{}] {:>{}}/{}  loss {:.4f}  {:.0f} tok/s  scale {:g}  skipped {}",
                     dtype, std::string(size_t(filled), '#'),
                     std::string(size_t(kWidth - filled), '-'), r.step,
                     fmt::formatted_size("{}", r.steps), r.steps, r.loss, r.tokens_per_s, r.scale,
                     r.skipped_steps);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"train_gpt: a small character-level GPT trained in fp32, fp16 or bf16 on the CPU"};
  std::string dtype_flag = "bf16";
  std::string compare;
  std::string text_file;
  int64_t digits = 2;
  int64_t block_size = 64;
  TrainOptions options;
  int threads = 0;
  int64_t log_every = 0;
  double min_accuracy = 0.0;
  bool json = false;
  bool quiet = false;
  bool ddp = false;
  std::string profile_file;
  // A flag given twice takes its last value, so ./scripts/demo --steps N overrides the demo's.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--dtype", dtype_flag, "precision of the forward pass")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "fp8"}));
  app.add_option("--compare", compare,
                 "train once per listed dtype (e.g. fp32,fp16,bf16) and print one table")
      ->excludes("--dtype");
  app.add_option("--steps", options.steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", options.batch, "sequences per batch")->check(CLI::PositiveNumber);
  app.add_option("--n-layer", options.n_layer, "transformer blocks")->check(CLI::PositiveNumber);
  app.add_option("--n-head", options.n_head, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--n-embd", options.n_embd, "embedding width")->check(CLI::PositiveNumber);
  app.add_option("--lr", options.lr, "peak learning rate (warmup, then cosine)")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", options.seed, "seed of the task, the weights and the batches");
  app.add_option("--digits", digits, "addition task: digits per operand")
      ->check(CLI::Range(int64_t(1), AdditionTask::kMaxDigits));
  app.add_option("--text", text_file, "train on this text file instead of the addition task")
      ->excludes("--digits");
  app.add_option("--block-size", block_size, "--text: characters of context")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "CPU threads (0: OpenMP's default)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-every", log_every,
                 "when stdout is not a terminal, a progress line every K steps (0: steps / 10)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--min-accuracy", min_accuracy, "exit with 1 when the accuracy is below this")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--json", json, "print one JSON line of metrics per run");
  app.add_flag("--quiet", quiet, "no progress lines");
  app.add_flag("--ddp", ddp,
               "data-parallel over the ranks of mpirun/torchrun (DistributedDataParallel, MPI)");
  app.add_option("--profile", profile_file,
                 "profile steps 3-5: write their Chrome trace to this file, print the op table")
      ->excludes("--compare");
  CLI11_PARSE(app, argc, argv);

  try {
    if (threads > 0) set_num_threads(threads);
    if (ddp) {
#if HALFGRAD_HAS_DISTRIBUTED
      const auto group = distributed::init_process_group();
      options.rank = group->rank();
      options.world_size = group->world_size();
      options.wrap = [](std::shared_ptr<nn::GPT> gpt) -> std::shared_ptr<nn::Module> {
        return std::make_shared<nn::parallel::DistributedDataParallel<nn::GPT>>(std::move(gpt));
      };
      // Every rank trains; rank 0 speaks.
      if (options.rank != 0) quiet = true;
#else
      HG_ERROR("--ddp: expected a build with hg::distributed (MPI: ./scripts/setup installs "
               "libopenmpi-dev), got one without it");
#endif
    }
    const bool speaks = options.rank == 0;
    std::unique_ptr<Task> task;
    if (text_file.empty()) {
      task = std::make_unique<AdditionTask>(digits, options.seed);
    } else {
      task = std::make_unique<TextTask>(text_file, block_size);
    }
    const std::string_view task_name = text_file.empty() ? "addition" : "text";
    const std::vector<std::string> precisions =
        compare.empty() ? std::vector<std::string>{dtype_flag} : parse_precision_list(compare);

    const Progress progress = quiet                         ? Progress::kNone
                              : isatty(fileno(stdout)) != 0 ? Progress::kInPlace
                                                            : Progress::kLines;
    if (log_every == 0) log_every = std::max<int64_t>(1, options.steps / 10);
    if (speaks) {
      fmt::print("train_gpt: {}\n", task->describe());
      fmt::print(
          "train_gpt: GPT n_layer={} n_head={} n_embd={}, block_size {}, batch {}, {} steps, "
          "lr {:g}, threads {}{}\n",
          options.n_layer, options.n_head, options.n_embd, task->block_size(), options.batch,
          options.steps, options.lr, get_num_threads(),
          options.world_size > 1
              ? fmt::format(", {} ranks ({} sequences a step)", options.world_size,
                            options.batch * options.world_size)
              : "");
    }

    std::vector<TrainMetrics> runs;
    bool below_bar = false;
    options.profile_path = profile_file;
    for (const std::string& precision : precisions) {
      options.dtype = parse_precision(precision);
      options.fp8 = precision == "fp8";
      const std::string_view name = precision_name(options.dtype, options.fp8);
      auto on_step = [&](const StepReport& report) {
        if (progress == Progress::kInPlace) {
          fmt::print("\r{}", progress_line(name, report));
          if (report.step == report.steps) fmt::print("\n");
          std::fflush(stdout);
        } else if (progress == Progress::kLines &&
                   (report.step % log_every == 0 || report.step == 1)) {
          fmt::print("{}\n", progress_line(name, report));
          std::fflush(stdout);
        }
      };
      const TrainMetrics m = train(*task, options, on_step);
      below_bar = below_bar || m.accuracy < min_accuracy;
      if (!speaks) continue;
      fmt::print(
          "{}: {} parameters, {:.2f} ms/step, {:.0f} tokens/s, final loss {:.4f}, "
          "skipped steps {}, final scale {:g}\n",
          name, m.parameters, m.step_ms, m.tokens_per_s, m.final_loss, m.skipped_steps,
          m.final_scale);
      fmt::print("{}: accuracy {:.4f} ({})\n", name, m.accuracy, task->accuracy_name());
      if (json) print_json(m, task_name);
      if (!profile_file.empty()) {
        fmt::print("{}: profiled steps {}-{}, Chrome trace in {}\n{}", name, m.profiled_first,
                   m.profiled_last, profile_file, m.profile_table);
      }
      runs.push_back(m);
    }
    if (!compare.empty() && speaks) {
      fmt::print("\n");
      print_table(runs);
    }
    if (below_bar) {
      fmt::print("train_gpt: FAILED - accuracy below --min-accuracy {:g}\n", min_accuracy);
      return 1;
    }
    return 0;
  } catch (const Error& error) {
    std::fprintf(stderr, "train_gpt: %s\n", error.what());
    return 2;
  }
}
