// amp_loop: the canonical mixed-precision training loop (docs/design.md §7) on a task made
// in-process.
//
// A small MLP (2 -> 64 -> 64 -> 2, GELU) learns to tell apart the points of two interleaved
// spirals. The loop is the one a PyTorch user writes with torch.amp:
//
//   --dtype fp16  forward under amp::Autocast(kCPU, kFloat16), loss scaled by a GradScaler
//                 (fp16 gradients would underflow without it);
//   --dtype bf16  forward under amp::Autocast(kCPU, kBFloat16), no scaling (bfloat16 has
//                 float32's exponent range, so gradients do not underflow);
//   --dtype fp32  no autocast, no scaling: the reference;
//   --dtype auto  (the default) what the hardware runs natively, as a PyTorch script picks with
//                 torch.cuda.is_bf16_supported(): on a GPU bf16 where cuda::is_bf16_supported(),
//                 else fp16; on the CPU bf16 where cpu::is_bf16_supported() (its GEMMs have a
//                 bfloat16 kernel), else fp32.
//
// The parameters and the optimizer state stay float32 in every mode; only the matmuls run in
// 16 bits, in the forward and in their backward (where a scaled gradient can overflow
// float16), and the loss is float32 (cross_entropy is on autocast's float32 list).
//
// The fp16 GradScaler starts at 2^24 (--init-scale), not at torch.amp's 2^16: this model's
// scaled float16 gradients stay finite at 2^16 and overflow from about 2^21, so with torch's
// default nothing would be skipped and the run would not show the scaler at work. From 2^24
// the first steps overflow: each one is skipped and halves the scale. The gradients change as
// the model learns, so a later step can overflow too. (A real model's init_scale is a guess as
// well: too high costs a few skipped steps, too low lets small gradients underflow, so the
// default errs high.)
//
// The loss is printed every --print-every steps, and at every skipped step with the scale
// the step ran with; then the accuracy on the training points. The program exits with 1 when
// that accuracy is below kMinAccuracy, so the smoke test checks that each mode actually
// learns. --device cuda runs the same loop on the GPU (data, model, autocast and scaler all
// on CUDA); where no device is usable (a build without the CUDA backend, or no GPU) it says
// why and exits with 77, the code a test runner counts as skipped.
#include <cmath>
#include <cstdio>
#include <memory>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

// The accuracy every mode must reach on the training points after the requested steps (the
// default 200 steps reach 1.0 in each dtype).
constexpr double kMinAccuracy = 0.90;

// The exit code where --device cuda finds no usable device (CTest's SKIP_RETURN_CODE).
constexpr int kExitNoDevice = 77;

// The fp16 GradScaler's first scale: 2^24, above this model's overflow line, where torch.amp's
// default 2^16 is below it (see the top of the file).
constexpr double kInitScale = 16777216.0;

// "2^24" for an exact power of two, the number otherwise.
std::string power_of_two(double value) {
  int exponent = 0;
  const double mantissa = std::frexp(value, &exponent);  // value = mantissa * 2^exponent
  if (mantissa == 0.5) return fmt::format("2^{}", exponent - 1);
  return fmt::format("{:g}", value);
}

struct Dataset {
  Tensor x;  // [2n, 2] float32
  Tensor y;  // [2n] int64, 0 or 1
};

// Two spirals, 1.5 turns each, the second one rotated by pi; a little Gaussian noise.
Dataset two_spirals(int64_t points_per_class, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::normal_distribution<double> noise(0.0, 0.03);
  std::vector<float> xs;
  std::vector<int64_t> ys;
  for (int64_t label = 0; label < 2; ++label) {
    for (int64_t i = 0; i < points_per_class; ++i) {
      const double t = 0.1 + 0.9 * unit(rng);  // radius
      const double angle = 3.0 * std::numbers::pi * t + std::numbers::pi * double(label);
      xs.push_back(float(t * std::cos(angle) + noise(rng)));
      xs.push_back(float(t * std::sin(angle) + noise(rng)));
      ys.push_back(label);
    }
  }
  const int64_t n = 2 * points_per_class;
  return {tensor(xs, {n, 2}), tensor(ys, {n})};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"amp_loop: the autocast + GradScaler training loop on two spirals"};
  std::string dtype_flag = "auto";
  std::string device_flag = "cpu";
  int64_t steps = 200;
  int64_t print_every = 50;
  uint64_t seed = 0;
  double init_scale = kInitScale;
  app.add_option("--dtype", dtype_flag, "precision of the forward pass")
      ->check(CLI::IsMember({"auto", "fp32", "fp16", "bf16"}));
  app.add_option("--device", device_flag, "where the model runs")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--steps", steps, "optimizer steps (full batch)")->check(CLI::PositiveNumber);
  app.add_option("--print-every", print_every, "print the loss every K steps")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the data and of the initial weights");
  app.add_option("--init-scale", init_scale, "the GradScaler's first scale (fp16)")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const DeviceType device = device_flag == "cuda" ? kCUDA : kCPU;
  if (device == kCUDA && !cuda::is_available()) {
    std::fprintf(stderr,
                 "amp_loop: --device cuda: no CUDA device is usable here (%s); run with "
                 "--device cpu\n",
                 cuda::describe().c_str());
    return kExitNoDevice;
  }
  std::string picked;
  if (dtype_flag == "auto") {
    if (device == kCUDA) {
      dtype_flag = cuda::is_bf16_supported() ? "bf16" : "fp16";
      picked = cuda::is_bf16_supported() ? " (auto: the GPU computes in bfloat16)"
                                         : " (auto: the GPU has no bfloat16)";
    } else {
      dtype_flag = cpu::is_bf16_supported() ? "bf16" : "fp32";
      picked = cpu::is_bf16_supported() ? " (auto: the CPU has bfloat16 GEMM kernels)"
                                        : " (auto: the CPU has no bfloat16 GEMM kernels)";
    }
  }
  const bool use_autocast = dtype_flag != "fp32";
  const DType autocast_dtype = dtype_flag == "fp16" ? kFloat16 : kBFloat16;

  manual_seed(seed);
  const Dataset on_cpu = two_spirals(256, seed);
  const Dataset data{on_cpu.x.to(device), on_cpu.y.to(device)};
  auto model = std::make_shared<nn::Sequential>(nn::Linear(2, 64), nn::GELU(), nn::Linear(64, 64),
                                                nn::GELU(), nn::Linear(64, 2));
  model->to(device);
  optim::AdamW opt(model->parameters(), {.lr = 1e-2, .weight_decay = 0.01});
  // Enabled only for float16: with enabled = false every scaler call is a pass-through, so
  // one loop serves every dtype, as with torch.amp.GradScaler(enabled=...).
  amp::GradScaler scaler({.init_scale = init_scale, .enabled = dtype_flag == "fp16"});

  const char* scaler_note = dtype_flag == "fp16"   ? "on"
                            : dtype_flag == "bf16" ? "off (bfloat16 has float32's exponent range)"
                                                   : "off";
  fmt::print("amp_loop: {}{} on {}, {} steps, {} points, scaler {}\n", dtype_flag, picked,
             device_flag, steps, data.x.size(0), scaler_note);
  if (scaler.is_enabled()) {
    fmt::print(
        "GradScaler: starts at {}; an inf/NaN gradient skips the step and halves the scale, {} "
        "clean steps in a row double it\n",
        power_of_two(init_scale), scaler.get_growth_interval());
    if (init_scale == kInitScale) {
      fmt::print(
          "  (torch.amp starts at 2^16, where this model's scaled gradients stay finite and "
          "nothing is skipped: --init-scale 65536 to see)\n");
    }
  }
  int64_t skipped = 0;
  for (int64_t step = 1; step <= steps; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(device, autocast_dtype, /*enabled=*/use_autocast);
      // Label smoothing keeps the logits bounded once every point is classified, so the
      // softmax's probabilities never sink into float32's slow subnormal range.
      loss = nn::functional::cross_entropy(model->forward(data.x), data.y, /*weight=*/{},
                                           /*ignore_index=*/-100, "mean",
                                           /*label_smoothing=*/0.1);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);  // true gradients, so the clipping threshold means what it says
    nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    const bool stepped = scaler.step(opt);
    const double scale = scaler.get_scale();  // the scale this step's backward ran with
    scaler.update();
    if (!stepped) ++skipped;
    if (step % print_every != 0 && step != 1 && stepped) continue;
    std::string line = fmt::format("step {:>5}  loss {:.4f}", step, loss.item<double>());
    if (step == 1 && use_autocast) {
      // cross_entropy is on autocast's float32 list: the loss is float32 in every mode.
      line +=
          fmt::format(" ({}: autocast runs cross_entropy in float32)", dtype_name(loss.dtype()));
    }
    if (scaler.is_enabled()) line += fmt::format("  scale {}", power_of_two(scale));
    if (!stepped) {
      line += fmt::format("  inf/NaN gradient: step skipped, scale halved to {}",
                          power_of_two(scaler.get_scale()));
    }
    fmt::print("{}\n", line);
  }
  if (scaler.is_enabled()) {
    fmt::print("GradScaler: {} of {} steps skipped, scale {} -> {}\n", skipped, steps,
               power_of_two(init_scale), power_of_two(scaler.get_scale()));
  }

  double accuracy = 0.0;
  {
    NoGradGuard no_grad;
    amp::Autocast autocast(device, autocast_dtype, /*enabled=*/use_autocast);
    const Tensor predicted = argmax(model->forward(data.x), 1);
    accuracy = mean(eq(predicted, data.y).to(kFloat32)).item<double>();
  }
  fmt::print("accuracy {:.4f} (threshold {:.2f})\n", accuracy, kMinAccuracy);
  if (accuracy < kMinAccuracy) {
    fmt::print("amp_loop: FAILED - the model did not learn the spirals\n");
    return 1;
  }
  return 0;
}
