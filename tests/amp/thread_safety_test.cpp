// Autocast state and the weight-cast cache are per thread: several threads training their own
// models at once, each under its own autocast dtype (or none), get exactly the results of the
// same runs made one after the other.
#include <omp.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using hg::testing::bit_identical;

namespace {

enum class Mode { kFloat32, kBFloat16, kFloat16 };

struct Result {
  std::vector<Tensor> params;
  double scale = 0;
  std::vector<DType> linear_outputs;  // the dtype of each linear output, from a trace
};

// A run that touches no global state: its own generator, model, optimizer and scaler.
Result train(Mode mode, uint64_t seed, int steps) {
  Generator generator(seed);
  auto model = std::make_shared<nn::Sequential>(nn::Linear(12, 24), nn::GELU(), nn::LayerNorm({24}),
                                                nn::Linear(24, 3));
  {
    NoGradGuard no_grad;
    for (Tensor& p : model->parameters()) p.copy_(randn(p.sizes(), {}, &generator) * 0.3);
  }
  optim::AdamW opt(model->parameters(), {.lr = 1e-2});
  amp::GradScaler scaler(
      {.init_scale = 1024.0, .growth_interval = 4, .enabled = mode == Mode::kFloat16});
  const DType dtype = mode == Mode::kFloat16 ? kFloat16 : kBFloat16;
  Result result;
  for (int step = 0; step < steps; ++step) {
    const Tensor x = randn({16, 12}, {}, &generator);
    const Tensor y = randn({16, 3}, {}, &generator);
    opt.zero_grad();
    Tensor loss;
    {
      amp::AutocastTrace trace;
      amp::Autocast autocast(kCPU, dtype, /*enabled=*/mode != Mode::kFloat32);
      loss = nn::functional::mse_loss(model->forward(x), y);
      if (step == 0) {
        for (const amp::TraceEntry& entry : trace.entries()) {
          if (entry.op == OpId::linear) result.linear_outputs.push_back(entry.output_dtypes[0]);
        }
      }
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  for (const Tensor& p : model->parameters()) result.params.push_back(p.detach().clone());
  result.scale = scaler.get_scale();
  return result;
}

}  // namespace

TEST_CASE("threads training separate models under different autocast states",
          "[autocast][threads]") {
  const std::vector<Mode> modes = {Mode::kFloat32,  Mode::kBFloat16, Mode::kFloat16,
                                   Mode::kBFloat16, Mode::kFloat16,  Mode::kFloat32};
  const int steps = 12;
  // One OpenMP thread inside every op, so each run's arithmetic is the same in any thread.
  const int previous_threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<Result> sequential;
  for (size_t i = 0; i < modes.size(); ++i) sequential.push_back(train(modes[i], 100 + i, steps));

  std::vector<Result> concurrent(modes.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < modes.size(); ++i) {
    threads.emplace_back([&, i] {
      omp_set_num_threads(1);
      concurrent[i] = train(modes[i], 100 + i, steps);
    });
  }
  for (std::thread& t : threads) t.join();
  omp_set_num_threads(previous_threads);

  for (size_t i = 0; i < modes.size(); ++i) {
    INFO("run " << i);
    const DType expected = modes[i] == Mode::kFloat32   ? kFloat32
                           : modes[i] == Mode::kFloat16 ? kFloat16
                                                        : kBFloat16;
    CHECK(concurrent[i].linear_outputs == std::vector<DType>{expected, expected});
    CHECK(concurrent[i].scale == sequential[i].scale);
    REQUIRE(concurrent[i].params.size() == sequential[i].params.size());
    for (size_t p = 0; p < sequential[i].params.size(); ++p) {
      CHECK(bit_identical(concurrent[i].params[p], sequential[i].params[p]));
    }
  }
  // Nothing leaked into this thread: no autocast, an empty cache.
  CHECK_FALSE(amp::is_autocast_enabled(kCPU));
  CHECK(amp::weight_cast_cache_size() == 0);
}
