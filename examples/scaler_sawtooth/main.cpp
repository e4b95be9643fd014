// scaler_sawtooth: the dynamic loss scale of amp::GradScaler over a float16 run.
//
// A small regression MLP trains under amp::Autocast(kCPU, kFloat16) with a GradScaler that
// starts far too high (--init-scale 2^24) and grows quickly (--growth-interval 20). The scale
// then draws a sawtooth:
//   - at the start, the scaled float16 gradients overflow: each such step is skipped and the
//     scale halves, until the gradients fit;
//   - after every growth_interval clean steps the scale doubles, until a gradient overflows
//     again and the scale halves back;
//   - every --inject-every steps the program writes an inf into a gradient (standing in for a
//     rare bad batch): that step is skipped and the scale backs off too.
// It prints the scale history (the steps where something happened, each with the scale it ran
// with, as a power of two), writes every step as CSV (--csv), and, when gnuplot is on PATH,
// plots scale against step into a PNG (--png): a log2 axis labelled 2^k, the skipped steps
// marked, overflows apart from the injected infs. It exits with 1 when the CSV could not be
// written or the run shows no skipped step, no growth, or non-finite parameters.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

int64_t count_lines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return -1;
  int64_t lines = 0;
  std::string line;
  while (std::getline(in, line)) ++lines;
  return lines;
}

bool gnuplot_on_path() { return std::system("command -v gnuplot > /dev/null 2>&1") == 0; }

// "2^24" for an exact power of two, the number otherwise.
std::string power_of_two(double value) {
  int exponent = 0;
  const double mantissa = std::frexp(value, &exponent);  // value = mantissa * 2^exponent
  if (mantissa == 0.5) return fmt::format("2^{}", exponent - 1);
  return fmt::format("{:.0f}", value);
}

struct PlotSettings {
  int64_t steps;
  int64_t inject_every;  // 0: no injected infs
  double min_scale;      // the history's smallest and largest scales
  double max_scale;
};

// Writes a gnuplot script next to the PNG and runs it; returns whether gnuplot succeeded.
// The y axis is log2 with a tick at each power of two the scale reached (fewer when it spans
// many); the key sits below the plot, where it cannot cover the sawtooth.
bool plot_png(const std::string& csv, const std::string& png, const PlotSettings& plot) {
  const std::string script = png + ".gp";
  std::ofstream out(script);
  if (!out) return false;
  const int low = int(std::floor(std::log2(plot.min_scale)));
  const int high = std::max(int(std::ceil(std::log2(plot.max_scale))), low + 1);
  const int tick_every = std::max(1, (high - low + 11) / 12);  // at most about 12 ticks
  const double step_margin = std::max(1.0, double(plot.steps) / 75.0);
  // Which skipped steps the program injected an inf into (the same rule as the training loop).
  const std::string injected = plot.inject_every > 0
                                   ? fmt::format("($1 > 0 && int($1) % {} == 0)", plot.inject_every)
                                   : std::string("0");
  out << "set datafile separator ','\n"
      << "set terminal png enhanced size 900,450\n"
      << "set output '" << png << "'\n"
      << "set title 'GradScaler: the loss scale each step ran with (skipped steps marked)'\n"
      << "set xlabel 'step'\n"
      << "set ylabel 'loss scale'\n"
      << fmt::format("set xrange [{}:{}]\n", -step_margin, double(plot.steps - 1) + step_margin)
      << "set logscale y 2\n"
      << fmt::format("set yrange [2**{}:2**{}]\n", low - 0.4, high + 0.4)
      << fmt::format("set ytics 2**{}, 2**{}, 2**{}\n", low, tick_every, high)
      << "set format y '2^{%L}'\n"
      << "set grid ytics\n"
      << "set key below horizontal maxrows 1 samplen 2\n"
      // every ::1 leaves out the CSV's header line.
      << "plot '" << csv << "' every ::1 using 1:2 with steps lw 2 title 'scale', \\\n"
      << "     '' every ::1 using 1:($3 > 0 && !" << injected
      << " ? $2 : 1/0) with points pt 7 ps 1.2 title 'skipped: overflow'";
  if (plot.inject_every > 0) {
    out << ", \\\n     '' every ::1 using 1:($3 > 0 && " << injected
        << " ? $2 : 1/0) with points pt 5 ps 1.2 title 'skipped: injected inf'";
  }
  out << "\n";
  out.close();
  return std::system(("gnuplot '" + script + "'").c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"scaler_sawtooth: the GradScaler's scale over a float16 run"};
  int64_t steps = 300;
  int64_t inject_every = 70;
  int64_t growth_interval = 20;
  double init_scale = 16777216.0;  // 2^24
  uint64_t seed = 0;
  std::string csv = "scale_history.csv";
  std::string png = "scale_history.png";
  app.add_option("--steps", steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--inject-every", inject_every,
                 "write an inf into a gradient every M steps (0: never)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--growth-interval", growth_interval, "clean steps before the scale doubles")
      ->check(CLI::PositiveNumber);
  app.add_option("--init-scale", init_scale, "the scale of the first step")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the data and of the initial weights");
  app.add_option("--csv", csv, "where the scale history goes (step,scale,skipped)");
  app.add_option("--png", png, "where the plot goes (needs gnuplot on PATH)");
  CLI11_PARSE(app, argc, argv);

  // A teacher-student regression with noisy targets, so the loss (and the gradients) never
  // vanish and the overflow line stays where the scale can reach it.
  manual_seed(seed);
  const Tensor x = randn({128, 16});
  nn::Linear teacher(16, 4);
  Tensor y;
  {
    NoGradGuard no_grad;
    y = teacher.forward(x) + 0.3 * randn({128, 4});
  }
  auto model = std::make_shared<nn::Sequential>(nn::Linear(16, 64), nn::GELU(), nn::Linear(64, 4));
  optim::SGD opt(model->parameters(), {.lr = 0.05});
  amp::GradScaler scaler(
      {.init_scale = init_scale, .growth_interval = growth_interval, .record_history = true});

  int64_t injected = 0;
  double first_loss = 0.0;
  double last_loss = 0.0;
  for (int64_t step = 0; step < steps; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(kCPU, kFloat16);
      loss = mse_loss(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    if (inject_every > 0 && step > 0 && step % inject_every == 0) {
      NoGradGuard no_grad;
      Tensor grad = model->at<nn::Linear>(0)->weight.grad();  // a handle on the same memory
      grad.fill_(std::numeric_limits<double>::infinity());
      ++injected;
    }
    scaler.step(opt);
    scaler.update();
    if (step == 0) first_loss = loss.item<double>();
    last_loss = loss.item<double>();
  }

  // The history: one entry per update(), with the scale that iteration ran with.
  fmt::print(
      "scaler_sawtooth: {} fp16 steps, init_scale {}, growth_interval {}, an inf every {} "
      "steps\n\n",
      steps, power_of_two(init_scale), growth_interval, inject_every);
  fmt::print("{:>6}  {:>7}  {}\n", "step", "scale", "event (scale: the one the step ran with)");
  const auto is_injected = [&](int64_t step) {
    return inject_every > 0 && step > 0 && step % inject_every == 0;
  };
  int64_t skipped = 0;
  int64_t growths = 0;
  double previous = -1.0;
  double min_scale = init_scale;
  double max_scale = init_scale;
  for (const amp::HistoryEntry& entry : scaler.history()) {
    min_scale = std::min(min_scale, entry.scale);
    max_scale = std::max(max_scale, entry.scale);
    std::string change;
    if (previous > 0 && entry.scale > previous) {
      change = fmt::format("doubled after {} clean steps; ", growth_interval);
      ++growths;
    } else if (previous > 0 && entry.scale < previous) {
      change = "halved; ";
    }
    previous = entry.scale;
    if (entry.skipped) ++skipped;
    if (change.empty() && !entry.skipped && entry.step != 0) continue;
    const std::string outcome = !entry.skipped ? "step ran"
                                : is_injected(entry.step)
                                    ? "injected inf: step skipped"
                                    : "overflow (inf/NaN gradient): step skipped";
    fmt::print("{:>6}  {:>7}  {}{}\n", entry.step, power_of_two(entry.scale), change, outcome);
  }
  fmt::print("(steps where nothing changed are left out; the CSV has every step)\n\n");
  fmt::print("{} steps skipped ({} of them injected), {} growths, final scale {}\n", skipped,
             injected, growths, power_of_two(scaler.get_scale()));
  fmt::print("loss {:.4f} -> {:.4f}\n", first_loss, last_loss);

  scaler.write_history_csv(csv);
  const int64_t lines = count_lines(csv);
  if (lines != steps + 1) {
    fmt::print("scaler_sawtooth: FAILED - {} should hold a header and {} rows, found {} lines\n",
               csv, steps, lines);
    return 1;
  }
  fmt::print("wrote {} ({} rows)\n", csv, steps);
  if (gnuplot_on_path()) {
    if (plot_png(csv, png, {steps, inject_every, min_scale, max_scale})) {
      fmt::print("wrote {}\n", png);
    } else {
      fmt::print("scaler_sawtooth: FAILED - gnuplot is on PATH but did not write {}\n", png);
      return 1;
    }
  } else {
    fmt::print("gnuplot is not on PATH: the PNG plot was skipped\n");
  }

  bool finite = true;
  for (const Tensor& p : model->parameters()) {
    for (double v : p.to_vector<double>()) finite = finite && std::isfinite(v);
  }
  if (skipped == 0 || growths == 0 || !finite) {
    fmt::print("scaler_sawtooth: FAILED - expected skipped steps, growths and finite weights\n");
    return 1;
  }
  return 0;
}
