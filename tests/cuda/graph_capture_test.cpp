// A whole mixed-precision training step without a host sync (NOTE [No host sync in the step]
// in cuda/multi_tensor.cpp): forward under autocast float16, GradScaler scale / backward /
// unscale_ / clip_grad_norm_ / step / update, AdamW, captured into a CUDA graph and replayed.
// Capturing fails on any host wait (a copy to the CPU, item(), a synchronize), so a capture
// that succeeds is the proof; the replays must then train exactly as the same steps run
// eagerly, including a batch with an inf whose step is skipped on the device, and with an lr
// schedule that changes the lr between replays.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/cuda/stream.h"
#include "halfgrad/halfgrad.h"
#include "halfgrad/ops/linalg.h"
#include "halfgrad/ops/loss.h"

using namespace hg;
using namespace hg::testing;

namespace {

// An MLP 16 -> 32 -> 4 (ReLU) with float32 parameters on the GPU, drawn from `seed`.
struct Mlp {
  Tensor w1, b1, w2, b2;
  std::vector<Tensor> parameters() const { return {w1, b1, w2, b2}; }
  Tensor forward(const Tensor& x) const { return linear(relu(linear(x, w1, b1)), w2, b2); }
};

Mlp make_mlp(uint64_t seed) {
  Generator gen(seed);
  auto param = [&](const Shape& shape, double scale) {
    Tensor p = (randn(shape, {}, &gen) * scale).to(kGpu);
    p.requires_grad_();
    return p;
  };
  Mlp mlp;
  mlp.w1 = param({32, 16}, 0.3);
  mlp.b1 = param({32}, 0.1);
  mlp.w2 = param({4, 32}, 0.3);
  mlp.b2 = param({4}, 0.1);
  return mlp;
}

// A model, its optimizer and its scaler, and the training step of docs/design.md §7.
struct Trainer {
  Mlp model;
  optim::AdamW opt;
  amp::GradScaler scaler;

  explicit Trainer(uint64_t seed)
      : model(make_mlp(seed)),
        opt(model.parameters(), {.lr = 1e-2, .weight_decay = 0.01}),
        scaler(amp::GradScalerOptions{.init_scale = 256.0, .growth_interval = 3}) {}

  void step(const Tensor& x, const Tensor& y) {
    // The gradients stay allocated (zeroed, not freed), so every step, and every replay,
    // accumulates into the same memory.
    opt.zero_grad(/*set_to_none=*/false);
    Tensor loss;
    {
      amp::Autocast autocast(kCUDA, kFloat16);
      loss = mse_loss(model.forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    nn::utils::clip_grad_norm_(model.parameters(), 1.0);
    scaler.step(opt);
    scaler.update();
  }
};

struct Batch {
  Tensor x, y;
};

}  // namespace

TEST_CASE("a mixed-precision training step captures into a CUDA graph and replays as eager",
          "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  constexpr int kWarmup = 3, kReplays = 10, kPoisoned = 4;
  Generator data_gen(11);
  std::vector<Batch> batches;
  for (int i = 0; i < kWarmup + kReplays; ++i) {
    Tensor x = randn({8, 16}, {}, &data_gen);
    if (i == kWarmup + kPoisoned) x.narrow(0, 2, 1).narrow(1, 5, 1).fill_(INFINITY);
    batches.push_back({x.to(kGpu), randn({8, 4}, {}, &data_gen).to(kGpu)});
  }
  Trainer graphed(7);
  Trainer eager(7);
  // The lr decays every 2 steps: the replays must see each new lr (NOTE [The lr on the device]).
  optim::StepLR graphed_schedule(graphed.opt, 2, 0.7);
  optim::StepLR eager_schedule(eager.opt, 2, 0.7);

  // The graph reads its batch from fixed memory, refilled before each replay.
  Tensor static_x = empty({8, 16}, {.dtype = kFloat32, .device = kGpu});
  Tensor static_y = empty({8, 4}, {.dtype = kFloat32, .device = kGpu});
  auto load = [&](const Batch& batch) {
    NoGradGuard no_grad;
    static_x.copy_(batch.x);
    static_y.copy_(batch.y);
  };

  // Warm-up, eagerly: the gradients, the optimizer state and the scaler's device state are
  // created here, outside the capture.
  for (int i = 0; i < kWarmup; ++i) {
    load(batches[size_t(i)]);
    graphed.step(static_x, static_y);
    eager.step(batches[size_t(i)].x, batches[size_t(i)].y);
    graphed_schedule.step();
    eager_schedule.step();
  }
  cuda::synchronize();
  std::vector<std::vector<float>> after_warmup;
  for (const Tensor& p : graphed.model.parameters()) after_warmup.push_back(p.to_vector<float>());

  cuda::Graph graph;
  graph.capture_begin();
  graphed.step(static_x, static_y);  // recorded, not run
  graph.capture_end();
  REQUIRE(graph.captured());

  for (int i = 0; i < kReplays; ++i) {
    INFO("replay " << i);
    const Batch& batch = batches[size_t(kWarmup + i)];
    load(batch);
    graph.replay();
    eager.step(batch.x, batch.y);
    graphed_schedule.step();
    eager_schedule.step();
    // The flag the captured step wrote in this replay (a host read, outside the graph).
    CHECK(graphed.scaler.last_step_skipped() == (i == kPoisoned));
    CHECK(eager.scaler.last_step_skipped() == (i == kPoisoned));
  }
  cuda::synchronize();

  CHECK(graphed.opt.param_groups()[0].options.at("lr") ==
        eager.opt.param_groups()[0].options.at("lr"));
  CHECK(graphed.scaler.get_scale() == eager.scaler.get_scale());
  CHECK(graphed.scaler.state_dict() == eager.scaler.state_dict());
  const std::vector<Tensor> got = graphed.model.parameters();
  const std::vector<Tensor> want = eager.model.parameters();
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("parameter " << i);
    CHECK(graphed.opt.state(0, i).step_count() == eager.opt.state(0, i).step_count());
    CHECK(graphed.opt.state(0, i).step_count() == kWarmup + kReplays - 1);  // one skipped
    CHECK(got[i].to_vector<float>() != after_warmup[i]);                    // the replays trained
    CHECK(mismatch(got[i], want[i].to(Device(kCPU)).to(kFloat64), {1e-4, 1e-5}).empty());
    for (float v : got[i].to_vector<float>()) CHECK(std::isfinite(v));
  }
}
