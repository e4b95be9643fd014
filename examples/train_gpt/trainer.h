// train_gpt's training loop, shared by the example and by tests/nn/train_gpt_test.cpp.
//
//   AdditionTask task(/*digits=*/2, /*seed=*/0);
//   TrainMetrics m = train(task, {.dtype = kFloat16, .steps = 800});
//   // m.accuracy, m.tokens_per_s, m.skipped_steps, m.final_scale, ...
//
// The loop is docs/design.md §7's (the one amp_loop runs), on an nn::GPT:
//   - fp32: no autocast, no scaling: the reference;
//   - fp16: the forward under amp::Autocast(kCPU, kFloat16), the loss scaled by a GradScaler;
//   - bf16: the forward under amp::Autocast(kCPU, kBFloat16), no scaling (bfloat16 has float32's
//     exponent range);
//   - fp8 (options.fp8, with bf16): the bf16 forward with the linear layers in float8 under an
//     amp::Fp8Autocast of one delayed-scaling recipe (E4M3 forward, E5M2 gradients; the CPU
//     emulates the fp8 products exactly), no scaling.
// Every step: zero_grad, forward + cross_entropy under autocast, scaler.scale(loss).backward(),
// scaler.unscale_ (so that clipping sees the true gradients), clip_grad_norm_, scaler.step,
// scaler.update, then the learning-rate schedule, which does not advance on a skipped step
// (NOTE [Skipped steps] in optim/lr_scheduler.h). Parameters and AdamW's state stay float32.
//
// With profile_path set, steps profile_warmup + 1 ... profile_warmup + profile_steps run under a
// profiler::Profile: its Chrome trace goes to profile_path and its table to
// TrainMetrics::profile_table.
//
// AdamW decays the weights of matmuls and embeddings (parameters of 2 or more dims), not
// biases and LayerNorm parameters, as nanoGPT does.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "task.h"

namespace hg::examples {

// "fp32", "fp16", "bf16", "fp8" -> the autocast dtype (kFloat32: no autocast); fp8 is bf16
// autocast with the linear layers in float8 (TrainOptions::fp8).
inline DType parse_precision(std::string_view name) {
  if (name == "fp32") return kFloat32;
  if (name == "fp16") return kFloat16;
  if (name == "bf16" || name == "fp8") return kBFloat16;
  HG_ERROR("train_gpt: expected a precision fp32, fp16, bf16 or fp8, got '{}'", name);
}

inline std::string_view precision_name(DType dtype, bool fp8 = false) {
  if (fp8) return "fp8";
  if (dtype == kFloat32) return "fp32";
  if (dtype == kFloat16) return "fp16";
  if (dtype == kBFloat16) return "bf16";
  HG_ERROR("train_gpt: expected the dtype float32, float16 or bfloat16, got {}", dtype);
}

struct TrainOptions {
  DType dtype = kFloat32;  // of the forward; kFloat32 turns autocast off
  bool fp8 = false;        // the linear layers in float8 under amp::Fp8Autocast
  int64_t fp8_amax_history = 16;  // the delayed-scaling recipe's amax_history_len
  // The defaults learn 2-digit addition (accuracy >= 0.9 on held-out problems in every dtype,
  // tests/nn/train_gpt_test.cpp) in 9 s (fp32), 22 s (fp16) and 10 s (bf16) of one core of
  // an AVX512-BF16 EPYC.
  int64_t steps = 800;
  int64_t batch = 64;
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t n_embd = 48;
  double lr = 3e-3;  // peak lr: linear warmup over warmup_fraction of the steps, then cosine
  double min_lr_fraction = 0.1;
  double warmup_fraction = 0.1;
  double weight_decay = 0.1;
  double clip_norm = 1.0;
  uint64_t seed = 0;  // of the initial weights and of the batches
  std::string profile_path = "";  // empty: no profiling
  int64_t profile_warmup = 2;     // steps before the profiled ones (fewer when steps is small)
  int64_t profile_steps = 3;
  int64_t profile_rows = 20;  // of the table
  // Data-parallel training (train_gpt --ddp): every rank draws the same batch of
  // batch * world_size sequences and trains on its own slice of batch sequences, so the ranks
  // together take the step one process would take on the whole batch. `wrap`, when set, wraps
  // the model once it is built (in nn::parallel::DistributedDataParallel) and returns the
  // module the forward goes through.
  int rank = 0;
  int world_size = 1;
  std::function<std::shared_ptr<nn::Module>(std::shared_ptr<nn::GPT>)> wrap = nullptr;
};

// What one step did, for a progress display.
struct StepReport {
  int64_t step;  // 1, 2, ..., steps
  int64_t steps;
  double loss;
  double tokens_per_s;  // since the first step
  double scale;         // the GradScaler's scale after update() (1 when it is off)
  int64_t skipped_steps;
};

struct TrainMetrics {
  DType dtype;
  bool fp8;
  int64_t steps;
  int64_t parameters;     // number of scalars
  int world_size;         // ranks training together (1: one process)
  int64_t tokens;         // per step, over every rank: batch * world_size * block_size
  double step_ms;         // mean wall time of a training step
  double tokens_per_s;    // tokens / step time
  double final_loss;      // mean training loss of the last kFinalLossSteps steps
  double accuracy;        // Task::accuracy after training
  int64_t skipped_steps;  // optimizer steps the GradScaler skipped (inf/NaN gradients)
  double final_scale;     // the GradScaler's scale at the end (1 when it is off)
  std::string profile_table;  // the profiled steps' table (options.profile_path set)
  int64_t profiled_first = 0, profiled_last = 0;  // the profiled steps
  static constexpr int64_t kFinalLossSteps = 20;
};

inline TrainMetrics train(const Task& task, const TrainOptions& options,
                          const std::function<void(const StepReport&)>& on_step = {}) {
  HG_CHECK(options.steps >= 1, "train: expected at least 1 step, got {}", options.steps);
  HG_CHECK(options.batch >= 1, "train: expected a batch of at least 1, got {}", options.batch);
  HG_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
           "train: expected a rank in [0, world_size), got rank {} of {}", options.rank,
           options.world_size);
  HG_CHECK(options.dtype == kFloat32 || options.dtype == kFloat16 || options.dtype == kBFloat16,
           "train: expected the dtype float32, float16 or bfloat16, got {}", options.dtype);
  const bool use_autocast = options.dtype != kFloat32;
  const DType autocast_dtype = use_autocast ? options.dtype : kBFloat16;  // unused when off

  manual_seed(options.seed);
  std::mt19937_64 batch_rng(options.seed);
  const int64_t T = task.block_size();
  const auto gpt =
      std::make_shared<nn::GPT>(task.vocab_size(), T, options.n_layer, options.n_head,
                                options.n_embd);
  nn::GPT& model = *gpt;
  const std::shared_ptr<nn::Module> forward_module = options.wrap ? options.wrap(gpt) : gpt;

  std::vector<Tensor> decay, no_decay;
  for (const Tensor& param : model.parameters())
    (param.dim() >= 2 ? decay : no_decay).push_back(param);
  // beta2 0.99 as nanoGPT's small character models (few tokens per step).
  optim::AdamW opt({{.params = decay, .options = {{"weight_decay", options.weight_decay}}},
                    {.params = no_decay, .options = {{"weight_decay", 0.0}}}},
                   {.lr = options.lr, .beta1 = 0.9, .beta2 = 0.99});
  const auto warmup = int64_t(options.warmup_fraction * double(options.steps));
  optim::CosineWithWarmup schedule(opt, warmup, options.steps,
                                   options.min_lr_fraction * options.lr);
  // Enabled for float16 only: disabled, every scaler call is a pass-through (one loop for
  // every dtype, as with torch.amp.GradScaler(enabled=...)).
  amp::GradScaler scaler({.enabled = options.dtype == kFloat16});

  TrainMetrics metrics{};
  metrics.dtype = options.dtype;
  metrics.fp8 = options.fp8;
  metrics.world_size = options.world_size;
  amp::DelayedScaling fp8_recipe({.amax_history_len = options.fp8_amax_history});
  metrics.steps = options.steps;
  for (const Tensor& param : model.parameters()) metrics.parameters += param.numel();
  metrics.tokens = options.batch * options.world_size * T;

  std::vector<double> losses;
  losses.reserve(size_t(options.steps));
  const auto start = std::chrono::steady_clock::now();
  auto seconds_since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const bool profiling = !options.profile_path.empty();
  metrics.profiled_first = std::min(options.profile_warmup + 1, options.steps);
  metrics.profiled_last =
      std::min(metrics.profiled_first + std::max<int64_t>(options.profile_steps, 1) - 1,
               options.steps);
  std::optional<profiler::Profile> profile;
  for (int64_t step = 1; step <= options.steps; ++step) {
    if (profiling && step == metrics.profiled_first) {
      profile.emplace(profiler::ProfileOptions{.model = &model});
    }
    Batch batch = task.sample_batch(options.batch * options.world_size, batch_rng);
    if (options.world_size > 1) {
      batch.x = batch.x.narrow(0, options.rank * options.batch, options.batch);
      batch.y = batch.y.narrow(0, options.rank * options.batch, options.batch);
    }
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(kCPU, autocast_dtype, /*enabled=*/use_autocast);
      amp::Fp8Autocast fp8(fp8_recipe, /*enabled=*/options.fp8);
      const Tensor logits = forward_module->forward(batch.x);  // [B, T, V]
      loss = nn::functional::cross_entropy(logits.reshape({-1, task.vocab_size()}),
                                           batch.y.reshape({-1}), /*weight=*/{}, kIgnoreIndex);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    nn::utils::clip_grad_norm_(model.parameters(), options.clip_norm);
    scaler.step(opt);
    scaler.update();
    const bool skipped = scaler.last_step_skipped();
    schedule.step(/*optimizer_stepped=*/!skipped);
    metrics.skipped_steps += skipped;
    losses.push_back(loss.item<double>());
    if (profile && step == metrics.profiled_last) {
      profile->stop();
      profile->export_chrome_trace(options.profile_path);
      metrics.profile_table = profile->table("", options.profile_rows);
      profile.reset();
    }
    if (on_step) {
      on_step({.step = step,
               .steps = options.steps,
               .loss = losses.back(),
               .tokens_per_s = double(step * metrics.tokens) / seconds_since_start(),
               .scale = scaler.get_scale(),
               .skipped_steps = metrics.skipped_steps});
    }
  }
  const double seconds = seconds_since_start();
  metrics.step_ms = 1e3 * seconds / double(options.steps);
  metrics.tokens_per_s = double(options.steps * metrics.tokens) / seconds;
  const int64_t last = std::min(options.steps, TrainMetrics::kFinalLossSteps);
  double loss_sum = 0.0;
  for (int64_t i = options.steps - last; i < options.steps; ++i) loss_sum += losses[size_t(i)];
  metrics.final_loss = loss_sum / double(last);
  metrics.final_scale = scaler.get_scale();

  model.eval();
  NoGradGuard no_grad;
  amp::Autocast autocast(kCPU, autocast_dtype, /*enabled=*/use_autocast);
  amp::Fp8Autocast fp8(fp8_recipe, /*enabled=*/options.fp8);
  metrics.accuracy = task.accuracy(model);
  return metrics;
}

}  // namespace hg::examples
