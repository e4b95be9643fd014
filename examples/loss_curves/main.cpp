// loss_curves: the demo GPT trained in fp32, bf16 and fp8 from the same start on the same
// batches, with its loss curves plotted.
//
// Each precision is train_gpt's loop (../train_gpt/trainer.h): fp32 the reference, bf16 under
// amp::Autocast(kCPU, kBFloat16), fp8 the same with every linear layer in float8 under
// amp::Fp8Autocast (E4M3 forward, E5M2 gradients, delayed scaling; the CPU emulates the fp8
// products exactly). fp16 (with its GradScaler) may be listed too. It writes
// <out>/loss_curves.csv (step, then each precision's loss) and <out>/loss_curves.svg (each
// curve as a running mean over --smooth steps, log scale), and prints each run's final loss,
// accuracy and step time.
//
// Exit status: 0; 1 when an accuracy is below --min-accuracy or a file is missing; 2 on bad
// input.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "../train_gpt/addition_task.h"
#include "../train_gpt/trainer.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::examples;

namespace {

struct Run {
  std::string name;
  std::vector<double> losses;  // one per step
  TrainMetrics metrics{};
};

// The mean of the `window` values up to and including each one.
std::vector<std::pair<double, double>> running_mean(const std::vector<double>& values,
                                                    int64_t window) {
  std::vector<std::pair<double, double>> points;
  double sum = 0.0;
  for (size_t i = 0; i < values.size(); ++i) {
    sum += values[i];
    if (i >= size_t(window)) sum -= values[i - size_t(window)];
    const auto count = double(std::min(i + 1, size_t(window)));
    points.emplace_back(double(i + 1), sum / count);
  }
  return points;
}

bool file_is_there(const std::filesystem::path& path) {
  std::error_code error;
  return std::filesystem::file_size(path, error) > 0 && !error;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loss_curves: the demo GPT's loss curves in fp32, bf16 and fp8"};
  std::string precisions_flag = "fp32,bf16,fp8";
  std::string out_dir = "loss_curves_out";
  TrainOptions options;
  int64_t smooth = 20;
  int threads = 1;
  double min_accuracy = 0.0;
  app.add_option("--precisions", precisions_flag, "comma-separated: fp32, fp16, bf16, fp8");
  app.add_option("--out", out_dir, "folder for loss_curves.csv and loss_curves.svg");
  app.add_option("--steps", options.steps, "optimizer steps per run")->check(CLI::PositiveNumber);
  app.add_option("--seed", options.seed, "seed of the weights and the batches");
  app.add_option("--smooth", smooth, "steps in the plotted running mean")
      ->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "CPU threads")->check(CLI::PositiveNumber);
  app.add_option("--min-accuracy", min_accuracy, "exit with 1 when an accuracy is below this")
      ->check(CLI::Range(0.0, 1.0));
  CLI11_PARSE(app, argc, argv);

  std::vector<Run> runs;
  try {
    set_num_threads(threads);
    const AdditionTask task(/*digits=*/2, options.seed);
    std::stringstream list(precisions_flag);
    for (std::string name; std::getline(list, name, ',');) {
      TrainOptions run_options = options;
      run_options.dtype = parse_precision(name);
      run_options.fp8 = name == "fp8";
      Run run{.name = name, .losses = {}, .metrics = {}};
      run.metrics = train(task, run_options,
                          [&](const StepReport& report) { run.losses.push_back(report.loss); });
      runs.push_back(std::move(run));
    }
    HG_CHECK(!runs.empty(), "loss_curves: expected at least one precision, got '{}'",
             precisions_flag);
  } catch (const Error& error) {
    std::fprintf(stderr, "loss_curves: %s\n", error.what());
    return 2;
  }

  const std::filesystem::path out(out_dir);
  std::filesystem::create_directories(out);
  const std::filesystem::path csv = out / "loss_curves.csv";
  {
    std::ofstream file(csv);
    file << "step";
    for (const Run& run : runs) file << "," << run.name;
    file << "\n";
    for (size_t step = 0; step < runs.front().losses.size(); ++step) {
      file << step + 1;
      for (const Run& run : runs) file << "," << fmt::format("{:.6g}", run.losses[step]);
      file << "\n";
    }
  }
  SvgChart chart({.title = fmt::format("Demo GPT on 2-digit addition: training loss "
                                       "(running mean over {} steps)",
                                       smooth),
                  .x_label = "step",
                  .y_label = "cross-entropy loss",
                  .log_y = true,
                  .markers = false});
  for (const Run& run : runs) chart.add_series(run.name, running_mean(run.losses, smooth));
  const std::filesystem::path svg = out / "loss_curves.svg";
  chart.write(svg.string());

  fmt::print("| precision | step time (ms) | final loss | accuracy |\n");
  fmt::print("|-----------|---------------:|-----------:|---------:|\n");
  bool ok = file_is_there(csv) && file_is_there(svg);
  for (const Run& run : runs) {
    fmt::print("| {:<9} | {:>14.2f} | {:>10.4f} | {:>8.3f} |\n", run.name, run.metrics.step_ms,
               run.metrics.final_loss, run.metrics.accuracy);
    ok = ok && run.metrics.accuracy >= min_accuracy && std::isfinite(run.metrics.final_loss);
  }
  fmt::print("Curves: {} and {}\n", csv.string(), svg.string());
  return ok ? 0 : 1;
}
