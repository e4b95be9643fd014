// master_weights: the Apex-style recipe, a float16 model trained through float32 master weights.
//
// Before autocast, mixed precision meant converting the whole model to float16
// (amp::network_to_half, which keeps normalization layers in float32) and keeping a float32
// "master" copy of every weight for the optimizer. Two things go wrong without the masters and
// the loss scale, and this program shows both on one regression task:
//
//   fp32            float32 model and SGD: the reference.
//   fp16-no-master  float16 model, SGD updating the float16 weights directly, loss scaled by a
//                   static LossScaler. An update lr * grad that is smaller than half a float16
//                   ulp of its weight rounds away: those weights stop learning.
//   fp16-optimizer  amp::FP16Optimizer with a DynamicLossScaler (apex's defaults: 2^32, factor
//                   2, window 1000). The first iterations overflow and are skipped while the
//                   scale comes down; the float32 masters then accumulate every small update.
//   fp16-manual     the same recipe by hand: prep_param_lists, model_grads_to_master_grads,
//                   a DynamicLossScaler, master_params_to_model_params.
//
// --mode all (the default) runs the four and prints one table. The program exits with 1 when a
// master-weight mode ends with a loss above --max-loss-ratio times the float32 reference's, so
// the smoke test checks that the recipe works.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

struct Settings {
  int64_t steps = 2000;
  double lr = 0.005;
  int64_t batch = 256;
  uint64_t seed = 0;
  double static_loss_scale = 128.0;
};

struct Batch {
  Tensor x;  // [N, 2] float32 in [-1, 1]
  Tensor y;  // [N, 1] float32
};

// y = sin(3 x0) cos(2 x1) / 2 + x0 x1 / 4: smooth, small, and not linear.
Batch make_batch(int64_t n) {
  Tensor x = rand({n, 2}) * 2.0 - 1.0;
  Tensor x0 = x.select(1, 0), x1 = x.select(1, 1);
  Tensor y = sin(x0 * 3.0) * cos(x1 * 2.0) * 0.5 + x0 * x1 * 0.25;
  return {x, y.unsqueeze(1)};
}

std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(nn::Linear(2, 64), nn::Tanh(), nn::LayerNorm({64}),
                                          nn::Linear(64, 64), nn::Tanh(), nn::Linear(64, 1));
}

struct Result {
  std::string mode;
  double eval_loss = 0;  // float32 mean squared error on held-out points
  int64_t skipped = 0;   // iterations whose step was skipped (overflow)
  double final_scale = 1;
  double wall_s = 0;
  // fp16-no-master: the share of weights whose last update rounded away (a non-zero
  // gradient, the same float16 value after the step). Negative: not measured.
  double lost_updates = -1;
};

// The model's loss in float32 on fixed held-out points (the model's own dtype for the forward).
double evaluate(nn::Module& model, const Batch& eval, DType dtype) {
  NoGradGuard no_grad;
  const Tensor prediction = model.forward(eval.x.to(dtype)).to(kFloat32);
  return nn::functional::mse_loss(prediction, eval.y).item<double>();
}

// One training run; `iteration` does one step on a batch and returns whether it was skipped.
Result train(const std::string& mode, const Settings& s, nn::Module& model, DType dtype,
             const std::function<bool(const Batch&)>& iteration,
             const std::function<double()>& scale) {
  manual_seed(s.seed + 1);  // the same batches in every mode
  const Batch eval = make_batch(1024);
  Result result{.mode = mode};
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 0; step < s.steps; ++step) {
    const Batch batch = make_batch(s.batch);
    if (iteration({batch.x.to(dtype), batch.y.to(dtype)})) ++result.skipped;
  }
  result.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.eval_loss = evaluate(model, eval, dtype);
  result.final_scale = scale();
  return result;
}

Result run_fp32(const Settings& s) {
  manual_seed(s.seed);
  auto model = make_model();
  optim::SGD opt(model->parameters(), {.lr = s.lr});
  return train(
      "fp32", s, *model, kFloat32,
      [&](const Batch& b) {
        opt.zero_grad();
        nn::functional::mse_loss(model->forward(b.x), b.y).backward();
        opt.step();
        return false;
      },
      [] { return 1.0; });
}

// The float16 weights are the optimizer's: each update is rounded to float16 as it is applied.
Result run_fp16_no_master(const Settings& s) {
  manual_seed(s.seed);
  auto model = make_model();
  amp::network_to_half(*model);
  optim::SGD opt(model->parameters(), {.lr = s.lr});
  amp::LossScaler scaler(s.static_loss_scale);
  int64_t changed = 0, updated = 0;  // over the float16 weights, at each step
  Result result = train(
      "fp16-no-master", s, *model, kFloat16,
      [&](const Batch& b) {
        opt.zero_grad();
        scaler.scale_loss(nn::functional::mse_loss(model->forward(b.x), b.y)).backward();
        NoGradGuard no_grad;
        const std::vector<Tensor> params = model->parameters();
        std::vector<Tensor> before;
        for (const Tensor& p : params) {
          p.mutable_grad().div_(scaler.loss_scale());
          before.push_back(p.detach().clone());
        }
        opt.step();
        changed = updated = 0;
        for (size_t i = 0; i < before.size(); ++i) {
          const Tensor& p = params[i];
          if (p.dtype() != kFloat16) continue;  // the float32 LayerNorm keeps its updates
          const Tensor has_update = ne(p.grad(), 0.0).to(kInt64);
          updated += sum(has_update).item<int64_t>();
          changed += sum(has_update * ne(p, before[i]).to(kInt64)).item<int64_t>();
        }
        return false;
      },
      [&] { return scaler.loss_scale(); });
  result.lost_updates = updated > 0 ? 1.0 - double(changed) / double(updated) : 0.0;
  return result;
}

Result run_fp16_optimizer(const Settings& s) {
  manual_seed(s.seed);
  auto model = make_model();
  amp::network_to_half(*model);
  amp::FP16Optimizer opt(model->parameters(),
                         [&](std::vector<Tensor> masters) {
                           return std::make_unique<optim::SGD>(std::move(masters),
                                                               optim::SGDOptions{.lr = s.lr});
                         },
                         {.dynamic_loss_scale = true});
  return train(
      "fp16-optimizer", s, *model, kFloat16,
      [&](const Batch& b) {
        opt.zero_grad();
        opt.backward(nn::functional::mse_loss(model->forward(b.x), b.y));
        return !opt.step();
      },
      [&] { return opt.loss_scale(); });
}

Result run_fp16_manual(const Settings& s) {
  manual_seed(s.seed);
  auto model = make_model();
  amp::network_to_half(*model);
  // Named references, not a structured binding: lambdas capture them (clang 14 cannot capture
  // a binding).
  auto lists = amp::prep_param_lists(*model);
  std::vector<Tensor>& model_params = lists.first;
  std::vector<Tensor>& master_params = lists.second;
  optim::SGD opt(master_params, {.lr = s.lr});
  amp::DynamicLossScaler scaler;
  return train(
      "fp16-manual", s, *model, kFloat16,
      [&](const Batch& b) {
        for (Tensor& p : model_params) p.mutable_grad() = Tensor();
        scaler.scale_loss(nn::functional::mse_loss(model->forward(b.x), b.y)).backward();
        // apex's order: the overflow check, then the update of the scale; a clean iteration
        // unscales the master grads with the scale its backward used, before update_scale().
        if (scaler.has_overflow(model_params)) {
          scaler.update_scale(true);
          return true;
        }
        amp::model_grads_to_master_grads(model_params, master_params);
        {
          NoGradGuard no_grad;
          for (Tensor& m : master_params) m.mutable_grad().div_(scaler.loss_scale());
        }
        scaler.update_scale(false);
        opt.step();
        amp::master_params_to_model_params(model_params, master_params);
        return false;
      },
      [&] { return scaler.loss_scale(); });
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"master_weights: a float16 model trained through float32 master weights"};
  Settings s;
  std::string mode = "all";
  double max_loss_ratio = 1.5;
  app.add_option("--mode", mode, "which recipe to run")
      ->check(CLI::IsMember({"all", "fp32", "fp16-no-master", "fp16-optimizer", "fp16-manual"}));
  app.add_option("--steps", s.steps, "SGD steps")->check(CLI::PositiveNumber);
  app.add_option("--lr", s.lr, "SGD learning rate")->check(CLI::PositiveNumber);
  app.add_option("--batch", s.batch, "points per step")->check(CLI::PositiveNumber);
  app.add_option("--seed", s.seed, "seed of the weights and of the data");
  app.add_option("--max-loss-ratio", max_loss_ratio,
                 "fail when a master-weight mode ends above this times the fp32 loss")
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  std::vector<std::pair<std::string, std::function<Result(const Settings&)>>> runs = {
      {"fp32", run_fp32},
      {"fp16-no-master", run_fp16_no_master},
      {"fp16-optimizer", run_fp16_optimizer},
      {"fp16-manual", run_fp16_manual}};
  std::vector<Result> results;
  for (const auto& [name, run] : runs) {
    // The fp32 reference always runs: the other modes are judged against it.
    if (mode == "all" || mode == name || name == "fp32") results.push_back(run(s));
  }

  const double reference = results.front().eval_loss;
  fmt::print("master_weights: {} SGD steps, lr {:g}, batch {}\n\n", s.steps, s.lr, s.batch);
  fmt::print("{:<16} {:>12} {:>10} {:>8} {:>13} {:>8}\n", "mode", "eval loss", "vs fp32", "skipped",
             "final scale", "time s");
  bool failed = false;
  for (const Result& r : results) {
    const double ratio = r.eval_loss / reference;
    const std::string lost =
        r.lost_updates < 0 ? "-" : fmt::format("{:.1f}%", 100.0 * r.lost_updates);
    fmt::print("{:<16} {:>12.3e} {:>10.2f} {:>8} {:>13g} {:>8.2f} {:>14}\n", r.mode, r.eval_loss,
               ratio, r.skipped, r.final_scale, r.wall_s, lost);
    const bool master_mode = r.mode == "fp16-optimizer" || r.mode == "fp16-manual";
    if (master_mode && !(ratio <= max_loss_ratio)) failed = true;
  }
  if (failed) {
    fmt::print("\nmaster_weights: FAILED - a master-weight run ended above {:g}x the fp32 loss\n",
               max_loss_ratio);
    return 1;
  }
  return 0;
}
