// nn::LSTM and nn::GRU on CUDA against the same layers on the CPU: output, final states and the
// gradients of a weighted sum (input, initial states, every parameter) in float32, and under
// float16 autocast, where the cells run and return float16.
//
//   T sequence length, B batch, I input features, H hidden features.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using namespace hg::testing;

namespace {

Tensor pattern(const Shape& shape, uint64_t seed) {
  Generator generator(seed);
  return sub(mul(rand(shape, {}, &generator), 2.0), 1.0);
}

// Whether got is within tolerance of want, relative to want's largest magnitude.
bool close(const Tensor& got, const Tensor& want, double tolerance) {
  const Tensor g = got.to(kCPU).to(kFloat64), w = want.to(kCPU).to(kFloat64);
  const double error = max(abs(sub(g, w))).item<double>();
  const double scale = max(abs(w)).item<double>();
  CAPTURE(error, scale);
  return error <= tolerance * (1.0 + scale);
}

// The results of one run and the gradients of sum(result * weight) over them.
struct Run {
  std::vector<Tensor> results, grads;
};

// Runs `call` on leaf copies of inputs on `device` (the module already there) and collects the
// results and the gradients of the inputs and of the parameters.
Run run(nn::Module& module, const std::vector<Tensor>& inputs, Device device,
        const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& call, bool autocast) {
  std::vector<Tensor> leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.to(device).detach().requires_grad_());
  Run out;
  {
    amp::Autocast region(device.type, kFloat16, autocast);
    out.results = call(leaves);
  }
  Tensor loss;
  for (size_t i = 0; i < out.results.size(); ++i) {
    const Tensor weight = pattern(out.results[i].sizes(), 100 + i).to(device);
    const Tensor term = sum(mul(out.results[i].to(kFloat32), weight));
    loss = loss.defined() ? add(loss, term) : term;
  }
  loss.backward();
  for (const Tensor& leaf : leaves) out.grads.push_back(leaf.grad());
  for (const Tensor& p : module.parameters()) {
    out.grads.push_back(p.grad());
    p.mutable_grad() = Tensor();
  }
  return out;
}

template <class Layer>
void compare(Layer& cpu_layer, Layer& cuda_layer, const std::vector<Tensor>& inputs,
             const std::function<std::vector<Tensor>(Layer&, const std::vector<Tensor>&)>& call) {
  const auto on = [&](Layer& layer) {
    return [&](const std::vector<Tensor>& in) { return call(layer, in); };
  };
  const Run reference = run(cpu_layer, inputs, kCPU, on(cpu_layer), false);
  for (const bool autocast : {false, true}) {
    CAPTURE(autocast);
    const Run got = run(cuda_layer, inputs, kCUDA, on(cuda_layer), autocast);
    // float16 cells over 7 steps and 2 layers; float32 on both devices, summed differently.
    const double tolerance = autocast ? 1e-2 : 1e-5;
    REQUIRE(got.results.size() == reference.results.size());
    for (size_t i = 0; i < got.results.size(); ++i) {
      CAPTURE(i);
      CHECK(got.results[i].device().type == kCUDA);
      CHECK(got.results[i].dtype() == (autocast ? kFloat16 : kFloat32));
      CHECK(close(got.results[i], reference.results[i], tolerance));
    }
    REQUIRE(got.grads.size() == reference.grads.size());
    for (size_t i = 0; i < got.grads.size(); ++i) {
      CAPTURE(i);
      REQUIRE(got.grads[i].defined());
      CHECK(got.grads[i].dtype() == kFloat32);
      CHECK(close(got.grads[i], reference.grads[i], tolerance));
    }
  }
}

}  // namespace

TEST_CASE("LSTM on CUDA matches the CPU", "[cuda][nn][rnn]") {
  HG_REQUIRE_CUDA();
  manual_seed(1);
  const nn::RNNOptions options{.num_layers = 2, .batch_first = true, .bidirectional = true};
  nn::LSTM cpu_lstm(6, 8, options), cuda_lstm(6, 8, options);
  cuda_lstm.load_state_dict(cpu_lstm.state_dict());
  cuda_lstm.to(kCUDA);
  // x [B, T, I], h0 and c0 [L * D, B, H]
  const std::vector<Tensor> inputs = {pattern({3, 7, 6}, 1), pattern({4, 3, 8}, 2),
                                      pattern({4, 3, 8}, 3)};
  compare<nn::LSTM>(cpu_lstm, cuda_lstm, inputs, [](nn::LSTM& lstm, const std::vector<Tensor>& in) {
    auto [output, state] = lstm.forward(in[0], std::tuple<Tensor, Tensor>{in[1], in[2]});
    return std::vector<Tensor>{output, std::get<0>(state), std::get<1>(state)};
  });
}

TEST_CASE("GRU on CUDA matches the CPU", "[cuda][nn][rnn]") {
  HG_REQUIRE_CUDA();
  manual_seed(2);
  const nn::RNNOptions options{.num_layers = 2, .bidirectional = true};
  nn::GRU cpu_gru(6, 8, options), cuda_gru(6, 8, options);
  cuda_gru.load_state_dict(cpu_gru.state_dict());
  cuda_gru.to(kCUDA);
  // x [T, B, I], h0 [L * D, B, H]
  const std::vector<Tensor> inputs = {pattern({7, 3, 6}, 4), pattern({4, 3, 8}, 5)};
  compare<nn::GRU>(cpu_gru, cuda_gru, inputs, [](nn::GRU& gru, const std::vector<Tensor>& in) {
    auto [output, h_n] = gru.forward(in[0], in[1]);
    return std::vector<Tensor>{output, h_n};
  });
}
