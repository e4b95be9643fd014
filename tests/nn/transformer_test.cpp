// MultiheadAttention against attention written out in float64 loops; GPT shapes, keys and a
// gradient reaching every parameter.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

// Self-attention of x [T, C] with H heads, by hand: the reference for one batch element.
std::vector<double> attention_reference(const std::vector<double>& x, int T, int C, int H,
                                        const std::vector<double>& in_w,
                                        const std::vector<double>& in_b,
                                        const std::vector<double>& out_w,
                                        const std::vector<double>& out_b, bool causal) {
  const int D = C / H;
  std::vector<double> qkv(T * 3 * C);
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < 3 * C; ++o) {
      double acc = in_b[o];
      for (int i = 0; i < C; ++i) acc += x[t * C + i] * in_w[o * C + i];
      qkv[t * 3 * C + o] = acc;
    }
  std::vector<double> heads(T * C);
  for (int h = 0; h < H; ++h)
    for (int i = 0; i < T; ++i) {
      std::vector<double> score(T, -std::numeric_limits<double>::infinity());
      double top = -std::numeric_limits<double>::infinity();
      for (int j = 0; j < T; ++j) {
        if (causal && j > i) continue;
        double s = 0;
        for (int d = 0; d < D; ++d)
          s += qkv[i * 3 * C + h * D + d] * qkv[j * 3 * C + C + h * D + d];
        score[j] = s / std::sqrt(double(D));
        top = std::max(top, score[j]);
      }
      double total = 0;
      for (int j = 0; j < T; ++j) total += score[j] = std::exp(score[j] - top);
      for (int d = 0; d < D; ++d) {
        double acc = 0;
        for (int j = 0; j < T; ++j) acc += score[j] / total * qkv[j * 3 * C + 2 * C + h * D + d];
        heads[i * C + h * D + d] = acc;
      }
    }
  std::vector<double> out(T * C);
  for (int t = 0; t < T; ++t)
    for (int o = 0; o < C; ++o) {
      double acc = out_b[o];
      for (int i = 0; i < C; ++i) acc += heads[t * C + i] * out_w[o * C + i];
      out[t * C + o] = acc;
    }
  return out;
}

}  // namespace

TEST_CASE("MultiheadAttention has PyTorch's layout and computes attention", "[nn][attention]") {
  manual_seed(12);
  const int B = 2, T = 5, C = 8, H = 2;
  for (bool causal : {false, true}) {
    nn::MultiheadAttention mha(C, H, causal);
    std::vector<std::string> keys;
    for (auto& [name, t] : mha.named_parameters()) keys.push_back(name);
    CHECK(keys == std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                           "out_proj.bias"});
    CHECK(mha.in_proj_weight.sizes() == Shape{3 * C, C});
    CHECK(mha.in_proj_bias.to_vector<float>() == std::vector<float>(3 * C, 0.0f));
    CHECK(mha.out_proj->bias.to_vector<float>() == std::vector<float>(C, 0.0f));
    // Non-zero biases so that the test sees them used.
    nn::init::uniform_(mha.in_proj_bias, -0.5, 0.5);
    nn::init::uniform_(mha.out_proj->bias, -0.5, 0.5);

    Tensor x = randn({B, T, C});
    Tensor y = mha(x);
    REQUIRE(y.sizes() == Shape{B, T, C});
    const auto xv = x.to_vector<double>();
    const auto yv = y.to_vector<double>();
    for (int b = 0; b < B; ++b) {
      std::vector<double> xb(xv.begin() + b * T * C, xv.begin() + (b + 1) * T * C);
      const auto ref = attention_reference(
          xb, T, C, H, mha.in_proj_weight.to_vector<double>(), mha.in_proj_bias.to_vector<double>(),
          mha.out_proj->weight.to_vector<double>(), mha.out_proj->bias.to_vector<double>(), causal);
      for (int k = 0; k < T * C; ++k) CHECK(yv[b * T * C + k] == Approx(ref[k]).margin(1e-4));
    }
  }
  CHECK_THROWS_AS(nn::MultiheadAttention(10, 3), Error);
}

TEST_CASE("self-attention projects q, k and v with one product, as projecting them one by one",
          "[nn][attention]") {
  // Self-attention (the packed projection: one linear and one chunk) against the same module
  // given three separate copies of x as query, key and value (three linears over slices of
  // in_proj_weight), in float64: outputs, the input's gradient (the copies' three summed) and
  // the parameters' gradients.
  manual_seed(17);
  const int B = 2, T = 5, C = 8, H = 2;
  nn::MultiheadAttention mha(C, H, true);
  mha.to(kFloat64);
  nn::init::uniform_(mha.in_proj_bias, -0.5, 0.5);
  const Tensor x = randn({B, T, C}, kFloat64);
  const Tensor weights = randn({B, T, C}, kFloat64);
  auto grads_of = [&](const std::vector<Tensor>& inputs) {
    for (auto& [name, p] : mha.named_parameters()) p.mutable_grad() = Tensor();
    const Tensor y = inputs.size() == 1 ? mha(inputs[0]) : mha(inputs[0], inputs[1], inputs[2]);
    sum(mul(y, weights)).backward();
    std::vector<std::vector<double>> values{y.to_vector<double>()};
    Tensor input_grad = inputs[0].grad();
    for (size_t i = 1; i < inputs.size(); ++i) input_grad = add(input_grad, inputs[i].grad());
    values.push_back(input_grad.to_vector<double>());
    for (auto& [name, p] : mha.named_parameters()) values.push_back(p.grad().to_vector<double>());
    return values;
  };
  auto leaf = [&] { return x.detach().clone().requires_grad_(); };
  const auto packed = grads_of({leaf()});
  const auto separate = grads_of({leaf(), leaf(), leaf()});
  REQUIRE(packed.size() == 6);  // y, x's gradient, four parameters' gradients
  REQUIRE(separate.size() == packed.size());
  for (size_t t = 0; t < packed.size(); ++t) {
    INFO("value " << t);
    REQUIRE(packed[t].size() == separate[t].size());
    for (size_t i = 0; i < packed[t].size(); ++i) {
      CHECK(std::isfinite(packed[t][i]));
      CHECK(packed[t][i] == Approx(separate[t][i]).margin(1e-12));
    }
  }

  // Under autocast the self-attention runs two linears (the packed in-projection and
  // out_proj) and one chunk; with separate key and value, four linears.
  mha.to(kFloat32);
  const Tensor x32 = x.to(kFloat32);
  auto linears = [&](bool self) {
    amp::AutocastTrace trace;
    amp::Autocast autocast(kCPU, kBFloat16);
    const Tensor y = self ? mha(x32) : mha(x32, x32.clone(), x32.clone());
    CHECK(y.dtype() == kBFloat16);
    int count = 0, chunks = 0;
    for (const amp::TraceEntry& entry : trace.entries()) {
      count += entry.op == OpId::linear;
      chunks += entry.op == OpId::chunk;
    }
    CHECK(chunks == (self ? 1 : 0));
    return count;
  };
  CHECK(linears(true) == 2);
  CHECK(linears(false) == 4);
}

TEST_CASE("GPT returns logits of shape [B, T, V] with nanoGPT's keys", "[nn][gpt]") {
  manual_seed(13);
  auto gpt = std::make_shared<nn::GPT>(/*vocab*/ 11, /*block_size*/ 8, /*n_layer*/ 2,
                                       /*n_head*/ 2, /*n_embd*/ 8);
  std::set<std::string> keys;
  for (auto& [name, t] : gpt->named_parameters()) keys.insert(name);
  for (const char* key : {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.attn.in_proj_weight",
                          "h.1.attn.out_proj.bias", "h.1.mlp.0.weight", "h.1.mlp.2.bias",
                          "ln_f.bias", "lm_head.weight"}) {
    CHECK(keys.count(key) == 1);
  }
  CHECK(keys.count("lm_head.bias") == 0);
  CHECK(gpt->wte->weight.sizes() == Shape{11, 8});
  CHECK(gpt->lm_head->weight.sizes() == Shape{11, 8});

  Tensor idx = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 0, 1}, Shape{2, 6});
  Tensor logits = (*gpt)(idx);
  CHECK(logits.sizes() == Shape{2, 6, 11});

  // Causality: changing the last token leaves the logits at earlier positions alone.
  Tensor idx2 = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 9, 7, 8, 9, 10, 0, 1}, Shape{2, 6});
  Tensor logits2 = (*gpt)(idx2);
  CHECK(logits.narrow(1, 0, 5).to_vector<float>() == logits2.narrow(1, 0, 5).to_vector<float>());
  CHECK(logits.narrow(1, 5, 1).to_vector<float>() != logits2.narrow(1, 5, 1).to_vector<float>());

  Tensor too_long = zeros({1, 9}, kInt64);
  CHECK_THROWS_AS((*gpt)(too_long), Error);
}

TEST_CASE("a GPT loss sends a gradient to every parameter", "[nn][gpt]") {
  manual_seed(14);
  auto gpt = std::make_shared<nn::GPT>(13, 6, 2, 2, 8);
  Tensor idx = tensor(std::vector<int64_t>{0, 5, 2, 12, 7, 3, 3, 8, 1, 9}, Shape{2, 5});
  Tensor targets = tensor(std::vector<int64_t>{5, 2, 12, 7, 3, 8, 1, 9, 4, 0}, Shape{10});
  Tensor logits = (*gpt)(idx);
  Tensor loss = nn::functional::cross_entropy(logits.reshape({10, 13}), targets);
  // Near log(V) at init (weights N(0, 0.02)).
  CHECK(loss.item<double>() == Approx(std::log(13.0)).margin(0.1));
  loss.backward();
  for (auto& [name, p] : gpt->named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().sizes() == p.sizes());
    double largest = 0;
    for (double g : p.grad().to_vector<double>()) largest = std::max(largest, std::abs(g));
    CHECK(largest > 0);
    CHECK(std::isfinite(largest));
  }
}

TEST_CASE("a GPT converted to bfloat16 runs and trains in bfloat16", "[nn][gpt]") {
  manual_seed(15);
  auto gpt = std::make_shared<nn::GPT>(7, 4, 1, 2, 8);
  const auto params = gpt->parameters();
  gpt->bfloat16();
  Tensor idx = tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5}, Shape{2, 3});
  Tensor logits = (*gpt)(idx);
  CHECK(logits.dtype() == kBFloat16);
  CHECK(logits.sizes() == Shape{2, 3, 7});
  sum(logits.to(kFloat32)).backward();
  for (const Tensor& p : params) {
    CHECK(p.dtype() == kBFloat16);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == kBFloat16);
  }
}

TEST_CASE("a float32 GPT under CPU autocast gives bfloat16 logits and float32 grads", "[nn][gpt]") {
  manual_seed(16);
  auto gpt = std::make_shared<nn::GPT>(7, 4, 1, 2, 8);
  Tensor idx = tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 5}, Shape{2, 3});
  Tensor targets = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, Shape{6});
  Tensor loss;
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    Tensor logits = (*gpt)(idx);
    CHECK(logits.dtype() == kBFloat16);
    loss = nn::functional::cross_entropy(logits.reshape({6, 7}), targets);
  }
  CHECK(loss.dtype() == kFloat32);  // cross_entropy runs in float32 under autocast
  loss.backward();
  for (auto& [name, p] : gpt->named_parameters()) {
    INFO(name);
    REQUIRE(p.grad().defined());
    CHECK(p.grad().dtype() == kFloat32);
  }
}

TEST_CASE("a Block's fused MLP is its modules' MLP, and hooks on them are honoured", "[nn][gpt]") {
  manual_seed(15);
  auto block = std::make_shared<nn::Block>(8, 2);
  block->to(kFloat64);
  const Tensor x = randn({2, 5, 8}, kFloat64);
  const Tensor fused = (*block)(x);  // linear_gelu inside
  // A forward hook on the GELU makes the Block run the MLP module by module.
  int calls = 0;
  auto handle = (*block->mlp)[1]->register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor&) -> std::optional<Tensor> {
        ++calls;
        return std::nullopt;
      });
  const Tensor modules = (*block)(x);
  CHECK(calls == 1);
  const std::vector<double> a = fused.to_vector<double>(), b = modules.to_vector<double>();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) CHECK(a[i] == Approx(b[i]).epsilon(1e-12));
}
