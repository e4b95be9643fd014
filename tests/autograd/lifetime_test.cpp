// What a training step leaves alive: the autograd graph (and the tensors it saved) is freed
// by backward, and the weight-cast cache by the end of the autocast region. Counted on the
// CPU allocator's live allocations, so a leaked buffer of any size fails.
#include <memory>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

int64_t live() { return cpu_allocator_stats().live_allocations; }

std::shared_ptr<nn::Sequential> small_model() {
  return std::make_shared<nn::Sequential>(nn::Linear(16, 32), nn::GELU(), nn::LayerNorm({32}),
                                          nn::Linear(32, 4));
}

}  // namespace

TEST_CASE("backward frees the graph and the tensors it saved", "[autograd][lifetime]") {
  manual_seed(0);
  auto model = small_model();
  const Tensor x = randn({8, 16});
  const Tensor y = randn({8, 4});
  const size_t params = model->parameters().size();
  const int64_t baseline = live();

  Tensor loss = nn::functional::mse_loss(model->forward(x), y);
  const int64_t with_graph = live();
  CHECK(with_graph > baseline + 1);  // the loss and the activations the graph saved

  loss.backward();
  // Only the loss itself and one gradient per parameter remain.
  CHECK(live() == baseline + 1 + int64_t(params));

  loss = Tensor();
  for (Tensor& p : model->parameters()) p.mutable_grad() = Tensor();
  CHECK(live() == baseline);
}

TEST_CASE("retain_graph keeps the graph until the last backward", "[autograd][lifetime]") {
  manual_seed(1);
  auto model = small_model();
  const Tensor x = randn({8, 16});
  const int64_t baseline = live();
  {
    Tensor loss = sum(model->forward(x));
    const int64_t with_graph = live();
    loss.backward(Tensor(), /*retain_graph=*/true);
    const size_t params = model->parameters().size();
    CHECK(live() == with_graph + int64_t(params));  // the graph stays, grads added
    loss.backward();
    CHECK(live() == baseline + 1 + int64_t(params));
  }
  for (Tensor& p : model->parameters()) p.mutable_grad() = Tensor();
  CHECK(live() == baseline);
}

TEST_CASE("the weight-cast cache is freed when the autocast region ends",
          "[autograd][lifetime][autocast]") {
  manual_seed(2);
  auto model = small_model();
  const Tensor x = randn({8, 16});
  const int64_t baseline = live();
  {
    NoGradGuard no_grad;
    amp::Autocast autocast(kCPU, kBFloat16);
    Tensor out = model->forward(x);
    CHECK(live() > baseline);  // the output and the cast copies of the weights
  }
  CHECK(live() == baseline);
  {
    Tensor loss;
    {
      amp::Autocast autocast(kCPU, kBFloat16);
      loss = sum(model->forward(x));
      CHECK(amp::weight_cast_cache_size() == 4);  // both Linear layers' weight and bias
    }
    CHECK(amp::weight_cast_cache_size() == 0);
    loss.backward();
  }
  for (Tensor& p : model->parameters()) p.mutable_grad() = Tensor();
  CHECK(live() == baseline);
}

TEST_CASE("a training loop does not grow the live allocations", "[autograd][lifetime]") {
  manual_seed(3);
  auto model = small_model();
  optim::AdamW opt(model->parameters(), {.lr = 1e-3});
  amp::GradScaler scaler;
  const Tensor x = randn({8, 16});
  const Tensor y = randn({8, 4});
  auto step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(kCPU, kFloat16);
      loss = nn::functional::mse_loss(model->forward(x), y);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    nn::utils::clip_grad_norm_(model->parameters(), 1.0);
    scaler.step(opt);
    scaler.update();
  };
  step();
  step();  // the optimizer's state and the scaler's tensors exist from here on
  const int64_t after_two = live();
  for (int i = 0; i < 5; ++i) step();
  CHECK(live() == after_two);
}
