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
  const AllocatorStats before = cpu_allocator_stats();
  for (int i = 0; i < 5; ++i) step();
  CHECK(live() == after_two);
  // Every block of a step after the first two comes from the allocator's cache: no step
  // allocates from the system (issue 18's "no allocator churn").
  const AllocatorStats after = cpu_allocator_stats();
  CHECK(after.total_allocations > before.total_allocations);
  CHECK(after.system_allocations == before.system_allocations);
}

TEST_CASE("a leaf keeps one AccumulateGrad across graphs without keeping itself alive",
          "[autograd][lifetime]") {
  manual_seed(4);
  Tensor w = randn({3}).requires_grad_();
  std::weak_ptr<autograd::Node> accumulator;
  uint64_t sequence_nr = 0;
  {
    const Tensor y1 = mul(w, 2.0);
    const std::shared_ptr<autograd::Node> node = y1.grad_fn()->next_edges.at(0).node;
    REQUIRE(node != nullptr);
    CHECK(node->name() == "AccumulateGrad");
    accumulator = node;
    sequence_nr = node->sequence_nr();
    sum(y1).backward();
  }
  // The first graph is gone; the leaf still holds its node, and the next graph uses it.
  REQUIRE_FALSE(accumulator.expired());
  const Tensor y2 = mul(w, 3.0);
  CHECK(y2.grad_fn()->next_edges.at(0).node == accumulator.lock());
  CHECK(y2.grad_fn()->next_edges.at(0).node->sequence_nr() == sequence_nr);
  sum(y2).backward();
  for (int64_t i = 0; i < 3; ++i) CHECK(w.grad()[i].item<double>() == 5.0);

  // A graph does not keep its leaves alive through their AccumulateGrad: a gradient that
  // arrives after the leaf is gone is dropped.
  const std::weak_ptr<TensorImpl> weak = w.impl_ptr();
  const Tensor y3 = sum(w);
  w = Tensor();
  CHECK(weak.expired());
  CHECK_NOTHROW(y3.backward());
}

TEST_CASE("set_data drops the kept AccumulateGrad, whose dtype would be stale",
          "[autograd][lifetime]") {
  manual_seed(5);
  const Tensor p = randn({4}).requires_grad_();
  sum(mul(p, 2.0)).backward();
  const std::shared_ptr<autograd::Node> before = autograd::gradient_edge(p).node;
  REQUIRE(before != nullptr);
  CHECK(before->outputs.at(0).dtype == kFloat32);

  nn::set_data(p, p.detach().to(kFloat16));
  p.mutable_grad() = Tensor();
  const std::shared_ptr<autograd::Node> after = autograd::gradient_edge(p).node;
  CHECK(after != before);
  CHECK(after->outputs.at(0).dtype == kFloat16);
  sum(mul(p, 2.0)).backward();
  REQUIRE(p.grad().defined());
  CHECK(p.grad().dtype() == kFloat16);
  for (int64_t i = 0; i < 4; ++i) CHECK(p.grad()[i].item<double>() == 2.0);
}

TEST_CASE("an op that saves its own output does not keep it alive", "[autograd][lifetime]") {
  // relu, sigmoid and softmax save their outputs for backward; the node holds them without
  // owning them (the output owns the node), so nothing stays once the graph is gone.
  manual_seed(6);
  const Tensor x = randn({4, 8}).requires_grad_();
  const int64_t baseline = live();
  {
    const Tensor loss = sum(softmax(sigmoid(relu(x)), 1));
    CHECK(live() > baseline);
    loss.backward();
  }
  x.mutable_grad() = Tensor();
  CHECK(live() == baseline);
}
