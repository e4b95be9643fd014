// master_weights: the Apex-style recipe, a float16 model trained through float32 master weights.
//
// Before autocast, mixed precision meant converting the whole model to float16
// (amp::network_to_half, which keeps normalization layers in float32 and casts the input) and
// keeping a float32 "master" copy of every weight for the optimizer. In float16, small gradients
// underflow (the loss scale lifts them) and small updates round away (the masters keep them). This
// program shows the updates rounding away, and the dynamic loss scale finding its level, on
// one regression task:
//
//   fp32            float32 model and SGD: the reference.
//   fp16-no-master  float16 model, SGD updating the float16 weights directly, loss scaled by a
//                   static LossScaler. An update lr * grad that is smaller than half a float16
//                   ulp of its weight rounds away: those weights stop learning.
//   fp16-optimizer  amp::FP16Optimizer with a DynamicLossScaler (apex's defaults: 2^32, factor
//                   2, window 1000). The first iterations overflow and are skipped while the
//                   scale comes down; the float32 masters then keep the small updates (they
//                   lose about as few as the fp32 reference does).
//   fp16-manual     the same recipe by hand: prep_param_lists, model_grads_to_master_grads,
//                   a DynamicLossScaler, master_params_to_model_params.
//
// --mode all (the default) runs the four and prints one table, then what each column means.
// "lost updates" is counted over the whole run (LostUpdates): of all the updates the
// optimizer made, one per weight with a non-zero gradient per step taken, the share that left
// the weight unchanged. The fp32 reference always runs. The program exits with 1 when a
// master-weight mode ends with a loss above --max-loss-ratio times the float32 reference's, so
// the smoke test checks that the recipe works.
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
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

// "2^15" for an exact power of two, the number otherwise.
std::string power_of_two(double value) {
  int exponent = 0;
  const double mantissa = std::frexp(value, &exponent);  // value = mantissa * 2^exponent
  if (mantissa == 0.5) return fmt::format("2^{}", exponent - 1);
  return fmt::format("{:g}", value);
}

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
  std::string stepped;   // what the optimizer updates: "fp32 weights", "fp32 masters", ...
  double eval_loss = 0;  // float32 mean squared error on held-out points
  int64_t skipped = 0;   // iterations whose step was skipped (overflow)
  std::optional<double> first_scale = std::nullopt;  // the loss scale at the start and at
  std::optional<double> final_scale = std::nullopt;  // the end; none without loss scaling
  double lost_updates = 0;                           // LostUpdates::fraction() over the run
};

// Counts, over a whole run, the weight updates that rounding swallowed. Each step, every
// element of the stepped weights whose gradient is non-zero gets an update lr * grad; the
// update is lost when the weight stored after the step equals the weight before it (the
// update was below half a unit in the last place of the weight, in the weight's dtype).
// The counts add up over the steps that were taken; a skipped step counts nothing.
class LostUpdates {
 public:
  // Before the optimizer steps: a copy of the weights it is about to update.
  void before_step(const optim::Optimizer& opt) {
    NoGradGuard no_grad;
    before_.clear();
    for (const Tensor& w : weights(opt)) before_.push_back(w.detach().clone());
  }
  // After a step that was taken: counts the updates it made and the ones it lost.
  void after_step(const optim::Optimizer& opt) {
    NoGradGuard no_grad;
    const std::vector<Tensor> after = weights(opt);
    for (size_t i = 0; i < after.size(); ++i) {
      if (!after[i].grad().defined()) continue;  // not updated this step
      const Tensor has_update = ne(after[i].grad(), 0.0).to(kInt64);
      updates_ += sum(has_update).item<int64_t>();
      lost_ += sum(has_update * eq(after[i], before_[i]).to(kInt64)).item<int64_t>();
    }
  }
  double fraction() const { return updates_ > 0 ? double(lost_) / double(updates_) : 0.0; }

 private:
  static std::vector<Tensor> weights(const optim::Optimizer& opt) {
    std::vector<Tensor> all;
    for (const optim::ParamGroup& group : opt.param_groups()) {
      all.insert(all.end(), group.params.begin(), group.params.end());
    }
    return all;
  }
  std::vector<Tensor> before_;
  int64_t updates_ = 0;
  int64_t lost_ = 0;
};

// The model's loss in float32 on fixed held-out points (the model's own dtype for the forward).
double evaluate(nn::Module& model, const Batch& eval, DType dtype) {
  NoGradGuard no_grad;
  const Tensor prediction = model.forward(eval.x.to(dtype)).to(kFloat32);
  return nn::functional::mse_loss(prediction, eval.y).item<double>();
}

// One training run; `iteration` does one step on a batch and returns whether it was skipped.
Result train(const std::string& mode, const std::string& stepped, const Settings& s,
             nn::Module& model, DType dtype, const LostUpdates& lost,
             const std::function<bool(const Batch&)>& iteration,
             const std::function<std::optional<double>()>& scale) {
  manual_seed(s.seed + 1);  // the same batches in every mode
  const Batch eval = make_batch(1024);
  Result result{.mode = mode, .stepped = stepped, .first_scale = scale()};
  for (int64_t step = 0; step < s.steps; ++step) {
    const Batch batch = make_batch(s.batch);
    if (iteration({batch.x.to(dtype), batch.y.to(dtype)})) ++result.skipped;
  }
  result.eval_loss = evaluate(model, eval, dtype);
  result.final_scale = scale();
  result.lost_updates = lost.fraction();
  return result;
}

Result run_fp32(const Settings& s) {
  manual_seed(s.seed);
  auto model = make_model();
  optim::SGD opt(model->parameters(), {.lr = s.lr});
  LostUpdates lost;
  return train(
      "fp32", "fp32 weights", s, *model, kFloat32, lost,
      [&](const Batch& b) {
        opt.zero_grad();
        nn::functional::mse_loss(model->forward(b.x), b.y).backward();
        lost.before_step(opt);
        opt.step();
        lost.after_step(opt);
        return false;
      },
      [] { return std::nullopt; });
}

// The float16 weights are the optimizer's: each update is rounded to float16 as it is applied.
Result run_fp16_no_master(const Settings& s) {
  manual_seed(s.seed);
  auto model = amp::network_to_half(make_model());
  optim::SGD opt(model->parameters(), {.lr = s.lr});
  amp::LossScaler scaler(s.static_loss_scale);
  LostUpdates lost;
  return train(
      "fp16-no-master", "fp16 weights", s, *model, kFloat16, lost,
      [&](const Batch& b) {
        opt.zero_grad();
        scaler.scale_loss(nn::functional::mse_loss(model->forward(b.x), b.y)).backward();
        {
          NoGradGuard no_grad;
          for (Tensor& p : model->parameters()) p.mutable_grad().div_(scaler.loss_scale());
        }
        lost.before_step(opt);
        opt.step();
        lost.after_step(opt);
        return false;
      },
      [&] { return scaler.loss_scale(); });
}

Result run_fp16_optimizer(const Settings& s) {
  manual_seed(s.seed);
  auto model = amp::network_to_half(make_model());
  amp::FP16Optimizer opt(model->parameters(),
                         [&](std::vector<Tensor> masters) {
                           return std::make_unique<optim::SGD>(std::move(masters),
                                                               optim::SGDOptions{.lr = s.lr});
                         },
                         {.dynamic_loss_scale = true});
  LostUpdates lost;
  return train(
      "fp16-optimizer", "fp32 masters", s, *model, kFloat16, lost,
      [&](const Batch& b) {
        opt.zero_grad();
        opt.backward(nn::functional::mse_loss(model->forward(b.x), b.y));
        lost.before_step(opt.optimizer());  // the masters, with their unscaled grads
        if (!opt.step()) return true;
        lost.after_step(opt.optimizer());
        return false;
      },
      [&] { return opt.loss_scale(); });
}

Result run_fp16_manual(const Settings& s) {
  manual_seed(s.seed);
  auto model = amp::network_to_half(make_model());
  // Named references, not a structured binding: lambdas capture them (clang 14 cannot capture
  // a binding).
  auto lists = amp::prep_param_lists(*model);
  std::vector<Tensor>& model_params = lists.first;
  std::vector<Tensor>& master_params = lists.second;
  optim::SGD opt(master_params, {.lr = s.lr});
  amp::DynamicLossScaler scaler;
  LostUpdates lost;
  return train(
      "fp16-manual", "fp32 masters", s, *model, kFloat16, lost,
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
        lost.before_step(opt);
        opt.step();
        lost.after_step(opt);
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
  fmt::print("{:<16} {:<15} {:>10} {:>8} {:>8} {:>13} {:>13}\n", "mode", "optimizer steps",
             "eval loss", "vs fp32", "skipped", "loss scale", "lost updates");
  bool failed = false;
  for (const Result& r : results) {
    const double ratio = r.eval_loss / reference;
    const std::string scale = r.final_scale ? fmt::format("{} -> {}", power_of_two(*r.first_scale),
                                                          power_of_two(*r.final_scale))
                                            : "-";
    fmt::print("{:<16} {:<15} {:>10.3e} {:>8.2f} {:>8} {:>13} {:>12.2f}%\n", r.mode, r.stepped,
               r.eval_loss, ratio, r.skipped, scale, 100.0 * r.lost_updates);
    const bool master_mode = r.mode == "fp16-optimizer" || r.mode == "fp16-manual";
    if (master_mode && !(ratio <= max_loss_ratio)) failed = true;
  }
  fmt::print(
      "\n"
      "optimizer steps  the weights the optimizer updates (the LayerNorm's are float32 in\n"
      "                 every mode)\n"
      "eval loss        mean squared error on 1024 held-out points, in float32; vs fp32:\n"
      "                 its ratio to the fp32 run's\n"
      "skipped          steps skipped because the scaled float16 gradients overflowed (a\n"
      "                 dynamic scaler starts high and halves the scale on each overflow)\n"
      "loss scale       at the start -> at the end of the run (fp16-no-master's is static)\n"
      "lost updates     over the whole run, the share of the weight updates that rounding\n"
      "                 swallowed: each step taken gives every weight with a non-zero\n"
      "                 gradient an update lr * grad, lost when it is below half a unit in\n"
      "                 the last place of the weight, so that the weight, stored in its\n"
      "                 dtype, does not change\n");
  if (failed) {
    fmt::print("\nmaster_weights: FAILED - a master-weight run ended above {:g}x the fp32 loss\n",
               max_loss_ratio);
    return 1;
  }
  return 0;
}
