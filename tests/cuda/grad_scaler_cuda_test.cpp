// GradScaler with its scale on a CUDA device (NOTE [GradScaler on CUDA] in grad_scaler.h):
// every update sequence step by step against the CPU GradScaler (growth, backoff, bounds,
// hysteresis, growth that would overflow, update(new_scale)), unscale_ per (device, dtype)
// group, steps skipped on the device by the fused optimizers, the collapse alarm read from
// mapped memory, the history, and the state dict.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/amp/grad_scaler.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

enum Grad { kClean, kInfGrad, kNaNGrad };

// One scaler on the CPU and one on the GPU, each with a one-parameter SGD (lr 0) that supports
// the scaled step, run through the same iterations.
struct ScalerTwins {
  Tensor cpu_param = zeros({3}).requires_grad_();
  Tensor gpu_param = zeros({3}).to(kGpu).requires_grad_();
  optim::SGD cpu_opt{std::vector<Tensor>{cpu_param}, {.lr = 0.0}};
  optim::SGD gpu_opt{std::vector<Tensor>{gpu_param}, {.lr = 0.0}};
  amp::GradScaler cpu;
  amp::GradScaler gpu;
  explicit ScalerTwins(const amp::GradScalerOptions& options) : cpu(options), gpu(options) {}

  void iterate(Grad grad, std::optional<double> new_scale = std::nullopt) {
    cpu.scale(scalar_tensor(1.0));
    gpu.scale(scalar_tensor(1.0).to(kGpu));
    const double bad = grad == kInfGrad ? kInf : grad == kNaNGrad ? std::nan("") : 2.0;
    const Tensor values = tensor({1.0, bad, -3.0});
    cpu_param.mutable_grad() = values;
    gpu_param.mutable_grad() = values.to(kGpu);
    const bool cpu_stepped = cpu.step(cpu_opt);
    const amp::StepResult gpu_stepped = gpu.step(gpu_opt);
    CHECK(gpu_stepped.is_pending());
    CHECK(bool(gpu_stepped) == cpu_stepped);
    cpu.update(new_scale);
    gpu.update(new_scale);
    check_same();
  }
  void check_same() {
    CHECK(gpu.get_scale() == cpu.get_scale());
    CHECK(gpu.state_dict() == cpu.state_dict());
    CHECK(gpu.last_step_skipped() == cpu.last_step_skipped());
    CHECK(gpu.consecutive_skipped_iterations() == cpu.consecutive_skipped_iterations());
  }
};

}  // namespace

TEST_CASE("GradScaler on CUDA updates the scale as the CPU GradScaler step by step", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const std::vector<Grad> pattern = {kClean, kClean, kClean,   kClean,   kInfGrad, kClean,
                                     kClean, kClean, kNaNGrad, kInfGrad, kInfGrad, kClean,
                                     kClean, kClean, kClean,   kClean,   kInfGrad, kClean};
  const amp::GradScalerOptions options[] = {
      {.init_scale = 2.0, .growth_interval = 3},
      {.init_scale = 1024.0, .growth_factor = 3.0, .backoff_factor = 0.25, .growth_interval = 2},
      {.init_scale = 8.0, .growth_interval = 1, .min_scale = 2.0, .max_scale = 24.0},
      {.init_scale = 64.0, .growth_interval = 2, .hysteresis = 2},
      // 2^126 grows once to 2^127; the next growth would be inf in float32 and is not taken.
      {.init_scale = 8.507059173023462e37, .growth_interval = 1},
  };
  for (size_t k = 0; k < std::size(options); ++k) {
    INFO("options " << k);
    ScalerTwins twins(options[k]);
    for (size_t i = 0; i < pattern.size(); ++i) {
      INFO("iteration " << i);
      twins.iterate(pattern[i]);
    }
  }
}

TEST_CASE("GradScaler on CUDA sets a scale given to update as the CPU one", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  ScalerTwins twins({.init_scale = 4.0, .growth_interval = 2});
  twins.iterate(kClean);
  twins.iterate(kInfGrad, 3.0);
  CHECK(twins.gpu.get_scale() == 3.0);
  twins.iterate(kClean);
  twins.iterate(kClean, 0.1);
  twins.iterate(kClean);
}

TEST_CASE("GradScaler on CUDA unscales each device and dtype group and rejects float16 grads",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(5);
  amp::GradScaler scaler({.init_scale = 8.0});
  scaler.scale(scalar_tensor(1.0).to(kGpu));
  Tensor a = zeros({70000}).to(kGpu).requires_grad_();
  Tensor b = zeros({4, 5}, kFloat64).to(kGpu).requires_grad_();
  Tensor c = zeros({33}, kBFloat16).to(kGpu).requires_grad_();
  Tensor unused = zeros({2}).to(kGpu).requires_grad_();
  optim::SGD opt({a, b, c, unused}, {.lr = 0.0});
  const Tensor ga = randn({70000}), gb = randn({4, 5}, kFloat64), gc = randn({33}).to(kBFloat16);
  a.mutable_grad() = ga.to(kGpu);
  b.mutable_grad() = gb.to(kGpu);
  c.mutable_grad() = gc.to(kGpu);
  scaler.unscale_(opt);
  CHECK(mismatch(a.grad(), ga.to(kFloat64) / 8.0, tolerance_for(kFloat32)).empty());
  CHECK(mismatch(b.grad(), gb / 8.0, tolerance_for(kFloat64)).empty());
  CHECK(mismatch(c.grad(), gc.to(kFloat64) / 8.0, tolerance_for(kBFloat16)).empty());
  CHECK_FALSE(unused.grad().defined());
  CHECK_THROWS_WITH(scaler.unscale_(opt), Contains("already been called"));
  CHECK(scaler.step(opt));
  scaler.update();

  Tensor h = zeros({2}, kFloat16).to(kGpu).requires_grad_();
  optim::SGD half_opt({a, h}, {.lr = 0.0});
  const std::vector<unsigned char> a_before = bytes_of(a.grad());
  h.mutable_grad() = ones({2}, kFloat16).to(kGpu);
  scaler.scale(scalar_tensor(1.0).to(kGpu));
  CHECK_THROWS_WITH(scaler.unscale_(half_opt), Contains("float16 gradients"));
  CHECK(bytes_of(a.grad()) == a_before);  // checked before anything is unscaled
}

TEST_CASE("GradScaler on CUDA drives AdamW which skips an overflow on the device", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(31);
  const Tensor w0 = randn({40, 30});
  Tensor w_cpu = w0.clone().requires_grad_();
  Tensor w_gpu = w0.to(kGpu).requires_grad_();
  optim::AdamW cpu_opt({w_cpu}, {.lr = 0.01});
  optim::AdamW gpu_opt({w_gpu}, {.lr = 0.01});
  amp::GradScaler cpu_scaler({.init_scale = 1024.0, .growth_interval = 2});
  amp::GradScaler gpu_scaler({.init_scale = 1024.0, .growth_interval = 2});
  for (int iteration = 0; iteration < 6; ++iteration) {
    INFO("iteration " << iteration);
    cpu_scaler.scale(scalar_tensor(1.0));
    gpu_scaler.scale(scalar_tensor(1.0).to(kGpu));
    // Scaled gradients: the true ones times the scale (a power of two: exact).
    Tensor grad = randn({40, 30}) * cpu_scaler.get_scale();
    if (iteration == 2) grad.narrow(0, 3, 1).fill_(kInf);
    w_cpu.mutable_grad() = grad;
    w_gpu.mutable_grad() = grad.to(kGpu);
    const std::vector<unsigned char> before = bytes_of(w_gpu);
    const bool cpu_stepped = cpu_scaler.step(cpu_opt);
    const bool gpu_stepped = gpu_scaler.step(gpu_opt);
    CHECK(gpu_stepped == cpu_stepped);
    CHECK(gpu_stepped == (iteration != 2));
    if (iteration == 2) CHECK(bytes_of(w_gpu) == before);  // bit-identical
    cpu_scaler.update();
    gpu_scaler.update();
    CHECK(gpu_scaler.get_scale() == cpu_scaler.get_scale());
  }
  CHECK(gpu_opt.state(0, 0).step_count() == 5);
  CHECK(mismatch(w_gpu, w_cpu.to(kFloat64), {2e-6, 1e-7}).empty());
}

TEST_CASE("GradScaler on CUDA raises the collapse alarm from the device's count", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  Tensor p = zeros({1}).to(kGpu).requires_grad_();
  optim::SGD opt({p}, {.lr = 0.0});
  amp::GradScaler scaler({.init_scale = 65536.0, .alarm_after_consecutive_skips = 4});
  std::vector<std::string> warnings;
  scaler.set_warning_handler([&](std::string_view message) { warnings.emplace_back(message); });
  auto iteration = [&](bool inf) {
    scaler.scale(scalar_tensor(1.0).to(kGpu));
    p.mutable_grad() = tensor({inf ? kInf : 1.0}).to(kGpu);
    scaler.step(opt);
    scaler.update();
  };
  for (int i = 0; i < 4; ++i) iteration(true);
  cuda::synchronize();  // the 4th update ran: the next update() finds its alarm
  iteration(true);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Contains("4 iterations in a row") && Contains("scale is now 4096") &&
                              Contains("bfloat16"));
  for (int i = 0; i < 4; ++i) iteration(true);  // the same run of skips warns once
  cuda::synchronize();
  iteration(false);
  CHECK(warnings.size() == 1);
  CHECK(scaler.consecutive_skipped_iterations() == 0);
  for (int i = 0; i < 4; ++i) iteration(true);  // a new run warns again
  cuda::synchronize();
  iteration(false);
  CHECK(warnings.size() == 2);

  // Error mode: a later update() throws, after its own update was done.
  amp::GradScaler strict({.init_scale = 16.0,
                          .growth_interval = 1,
                          .alarm_after_consecutive_skips = 0,
                          .alarm_scale_floor = 4.0,
                          .alarm_action = amp::GradScalerOptions::AlarmAction::kError});
  int throws = 0;
  std::string message;
  auto strict_iteration = [&](bool inf) {
    strict.scale(scalar_tensor(1.0).to(kGpu));
    p.mutable_grad() = tensor({inf ? kInf : 1.0}).to(kGpu);
    strict.step(opt);
    try {
      strict.update();
    } catch (const Error& error) {
      ++throws;
      message = error.what();
    }
  };
  strict_iteration(true);  // 8
  strict_iteration(true);  // 4
  strict_iteration(true);  // 2, below the floor: this update() throws if the device was quick
  cuda::synchronize();
  strict_iteration(false);  // otherwise this one does
  CHECK(throws == 1);
  CHECK_THAT(message, Contains("fell to 2, below the floor 4"));
  CHECK(strict.get_scale() == 4.0);  // every update was done, the throwing one too
}

TEST_CASE("GradScaler on CUDA records the same history as on the CPU", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  ScalerTwins twins({.init_scale = 4.0, .growth_interval = 1, .record_history = true});
  twins.iterate(kClean);
  twins.iterate(kInfGrad);
  twins.iterate(kClean);
  const auto& want = twins.cpu.history();
  const auto& got = twins.gpu.history();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CHECK(got[i].step == want[i].step);
    CHECK(got[i].scale == want[i].scale);
    CHECK(got[i].skipped == want[i].skipped);
  }
}

TEST_CASE("GradScaler on CUDA saves and loads its state with the device counters", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  const amp::GradScalerOptions options{.init_scale = 64.0, .growth_interval = 3, .hysteresis = 2};
  ScalerTwins twins(options);
  for (Grad g : {kClean, kInfGrad, kClean, kClean, kInfGrad}) twins.iterate(g);
  const std::map<std::string, double> state = twins.gpu.state_dict();
  CHECK(state.at("_overflow_tracker") == 1.0);

  // Loaded before the first scale(): the device state starts from it.
  ScalerTwins before_init(options);
  before_init.cpu.load_state_dict(state);
  before_init.gpu.load_state_dict(state);
  // Loaded after: the device's counters are overwritten.
  ScalerTwins after_init(options);
  after_init.iterate(kInfGrad);
  after_init.cpu.load_state_dict(state);
  after_init.gpu.load_state_dict(state);
  after_init.check_same();
  for (Grad g : {kInfGrad, kInfGrad, kClean, kClean, kClean, kClean}) {
    twins.iterate(g);
    before_init.iterate(g);
    after_init.iterate(g);
    CHECK(before_init.gpu.get_scale() == twins.gpu.get_scale());
    CHECK(after_init.gpu.get_scale() == twins.gpu.get_scale());
  }
}

TEST_CASE("GradScaler on CUDA with an optimizer without a scaled step decides on the host",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  // Plain SGD written with ops (no step_scaled): step() reads found_inf on the host.
  class PlainSGD : public optim::Optimizer {
   public:
    explicit PlainSGD(std::vector<Tensor> params)
        : Optimizer({optim::ParamGroup{std::move(params), {}}}, {{"lr", 0.5}}) {}
    void step() override {
      NoGradGuard no_grad;
      ++steps;
      for (Tensor& p : param_groups()[0].params) p.sub_(p.grad(), 0.5);
    }
    int steps = 0;
  };
  Tensor p = zeros({2}).to(kGpu).requires_grad_();
  PlainSGD opt({p});
  amp::GradScaler scaler({.init_scale = 2.0});
  for (bool inf : {false, true, false}) {
    scaler.scale(scalar_tensor(1.0).to(kGpu));
    p.mutable_grad() = tensor({2.0, inf ? kInf : 4.0}).to(kGpu);
    const amp::StepResult stepped = scaler.step(opt);
    CHECK_FALSE(stepped.is_pending());
    CHECK(bool(stepped) == !inf);
    scaler.update();
  }
  CHECK(opt.steps == 2);
  // 0.5 * [2, 4] / 2, then the skip (the scale backs off to 1), then 0.5 * [2, 4] / 1.
  CHECK(p.to_vector<float>() == std::vector<float>{-1.5f, -3.0f});
}
