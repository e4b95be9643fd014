// hg::utils::checkpoint: the same gradients (inputs and parameters) as the plain forward, with
// dropout's masks replayed from the forward's random state and the forward's autocast mode;
// fewer live bytes after the forward; GPT with checkpoint_blocks; the boundary errors.
#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using Catch::Contains;
using testing::bit_identical;

namespace {

// A block with parameters, a nonlinearity and dropout (random draws).
struct MlpBlock : nn::Module {
  std::shared_ptr<nn::Linear> up = register_module("up", std::make_shared<nn::Linear>(16, 64));
  std::shared_ptr<nn::Linear> down = register_module("down", std::make_shared<nn::Linear>(64, 16));
  std::shared_ptr<nn::Dropout> drop = register_module("drop", std::make_shared<nn::Dropout>(0.2));
  std::string name() const override { return "MlpBlock"; }
  Tensor forward(const Tensor& x) override { return x + (*down)((*drop)(gelu((*up)(x), "none"))); }
};

struct Run {
  Tensor loss, x_grad;
  std::vector<Tensor> parameter_grads;
};

Run run(std::vector<std::shared_ptr<MlpBlock>>& blocks, bool checkpointed, uint64_t seed) {
  for (auto& b : blocks) {
    for (Tensor p : b->parameters()) p.mutable_grad() = Tensor();
  }
  manual_seed(seed);
  Tensor x = randn({8, 16}).requires_grad_();
  Tensor h = mul(x, 1.5);  // a non-leaf input to the first block
  for (auto& b : blocks) {
    h = checkpointed ? utils::checkpoint([&](const Tensor& in) { return (*b)(in); }, h) : (*b)(h);
  }
  Run r;
  r.loss = sum(mul(h, h));
  r.loss.backward();
  r.x_grad = x.grad();
  for (auto& b : blocks) {
    for (const Tensor& p : b->parameters()) r.parameter_grads.push_back(p.grad());
  }
  return r;
}

}  // namespace

TEST_CASE("checkpoint gives the plain forward's gradients, dropout masks included",
          "[autograd][checkpoint]") {
  manual_seed(1);
  std::vector<std::shared_ptr<MlpBlock>> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(std::make_shared<MlpBlock>());
  const Run plain = run(blocks, false, 42);
  const Run checkpointed = run(blocks, true, 42);
  CHECK(bit_identical(plain.loss, checkpointed.loss));
  CHECK(bit_identical(plain.x_grad, checkpointed.x_grad));
  REQUIRE(plain.parameter_grads.size() == checkpointed.parameter_grads.size());
  for (size_t i = 0; i < plain.parameter_grads.size(); ++i) {
    CAPTURE(i);
    REQUIRE(checkpointed.parameter_grads[i].defined());
    CHECK(bit_identical(plain.parameter_grads[i], checkpointed.parameter_grads[i]));
  }
  // The recomputation does not move the generator: the next draw is the one it would have been.
  manual_seed(42);
  Tensor x = randn({8, 16}).requires_grad_();
  Tensor y = utils::checkpoint([&](const Tensor& in) { return (*blocks[0])(in); }, x);
  const Tensor after_forward = rand({4});
  manual_seed(42);
  Tensor x2 = randn({8, 16}).requires_grad_();
  Tensor y2 = utils::checkpoint([&](const Tensor& in) { return (*blocks[0])(in); }, x2);
  sum(y2).backward();
  CHECK(bit_identical(rand({4}), after_forward));
}

TEST_CASE("checkpoint recomputes under the forward's autocast mode", "[autograd][checkpoint]") {
  manual_seed(2);
  auto block = std::make_shared<MlpBlock>();
  block->eval();
  const auto grads = [&](bool checkpointed, bool autocast_on = true) {
    for (Tensor p : block->parameters()) p.mutable_grad() = Tensor();
    Tensor x = randn({4, 16}).requires_grad_();
    Tensor y;
    {
      amp::Autocast autocast(kCPU, kBFloat16, autocast_on);
      y = checkpointed ? utils::checkpoint([&](const Tensor& in) { return (*block)(in); }, x)
                       : (*block)(x);
    }
    sum(y).backward();  // outside the region: the replay must bring it back
    return std::pair{x.grad(), block->up->weight.grad()};
  };
  manual_seed(3);
  const auto plain = grads(false);
  manual_seed(3);
  const auto replayed = grads(true);
  CHECK(bit_identical(plain.first, replayed.first));
  CHECK(bit_identical(plain.second, replayed.second));
  // The test can tell: without autocast the gradients differ (the linears ran in float32).
  manual_seed(3);
  const auto full_precision = grads(false, /*autocast_on=*/false);
  CHECK_FALSE(bit_identical(plain.second, full_precision.second));
}

TEST_CASE("checkpointed segments keep their inputs, not their activations",
          "[autograd][checkpoint]") {
  manual_seed(4);
  std::vector<std::shared_ptr<MlpBlock>> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(std::make_shared<MlpBlock>());
  const auto live_after_forward = [&](bool checkpointed) {
    const Tensor x = randn({512, 16}).requires_grad_();
    const int64_t before = cpu_allocator_stats().live_bytes;
    Tensor h = x;
    for (auto& b : blocks) {
      h = checkpointed ? utils::checkpoint([&](const Tensor& in) { return (*b)(in); }, h) : (*b)(h);
    }
    const int64_t held = cpu_allocator_stats().live_bytes - before;
    sum(h).backward();
    return held;
  };
  const int64_t plain = live_after_forward(false);
  const int64_t checkpointed = live_after_forward(true);
  CAPTURE(plain, checkpointed);
  // Per block the plain graph holds [512, 64] activations (several); checkpointing holds one
  // [512, 16] input.
  CHECK(checkpointed * 4 < plain);
}

TEST_CASE("GPT with checkpoint_blocks trains as without", "[autograd][checkpoint][nn]") {
  manual_seed(5);
  auto gpt = std::make_shared<nn::GPT>(32, 8, 2, 2, 16);
  const Tensor idx = randint(0, 32, {2, 8});
  const auto grads = [&]() {
    for (Tensor p : gpt->parameters()) p.mutable_grad() = Tensor();
    const Tensor logits = (*gpt)(idx);
    cross_entropy(logits.reshape({-1, 32}), idx.reshape({-1})).backward();
    std::vector<Tensor> out;
    for (const Tensor& p : gpt->parameters()) out.push_back(p.grad());
    return out;
  };
  const std::vector<Tensor> plain = grads();
  gpt->checkpoint_blocks = true;
  const std::vector<Tensor> checkpointed = grads();
  for (size_t i = 0; i < plain.size(); ++i) {
    CAPTURE(i);
    CHECK(bit_identical(plain[i], checkpointed[i]));
  }
}

TEST_CASE("checkpoint refuses a captured tensor with history and runs plainly without grad",
          "[autograd][checkpoint][errors]") {
  const Tensor w = randn({4}).requires_grad_();
  const Tensor scaled = mul(w, 2.0);  // has a grad_fn, not passed as an input
  const Tensor x = randn({4}).requires_grad_();
  CHECK_THROWS_WITH(utils::checkpoint([&](const Tensor& in) { return mul(in, scaled); }, x),
                    Contains("uses a tensor with history (grad_fn MulBackward") &&
                        Contains("pass it as an input"));
  // Passed as an input, its gradient arrives.
  Tensor y =
      utils::checkpoint([](const Tensor& in, const Tensor& s) { return mul(in, s); }, x, scaled);
  sum(y).backward();
  CHECK(bit_identical(w.grad(), mul(x, 2.0).detach()));
  // Double backward through a segment is refused, not silently wrong.
  Tensor z = utils::checkpoint([](const Tensor& in) { return mul(in, in); }, x);
  CHECK_THROWS_WITH(autograd::grad({sum(z)}, {x}, {}, true, /*create_graph=*/true),
                    Contains("create_graph (double backward)"));
  NoGradGuard no_grad;
  CHECK_FALSE(utils::checkpoint([](const Tensor& in) { return exp(in); }, x).requires_grad());
}
