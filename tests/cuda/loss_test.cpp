// CUDA losses (cuda::loss_kernels through the public ops of halfgrad/ops/loss.h): every loss,
// forward and backward, in float32, float16 and bfloat16 against the same loss on float64 CPU
// copies of the inputs, for each reduction and option (weights, ignore_index, label smoothing,
// class probabilities, [N, C, d...] and [C] inputs, non-contiguous inputs); the create_graph
// backward; class targets out of range reported at the next synchronize, naming the op; a
// loss computed twice the same bits.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "halfgrad/halfgrad.h"
#include "test_util.h"

using namespace hg;
using namespace hg::testing;
using Catch::Contains;

namespace {

const std::vector<DType> kFloating = {kFloat32, kFloat16, kBFloat16};
const std::vector<const char*> kReductions = {"none", "mean", "sum"};

// Class indices in [0, C) from a fixed seed; every `ignore_every`-th one set to ignore (when
// ignore_every > 0).
Tensor classes(const Shape& shape, int64_t C, int64_t ignore_every = 0, int64_t ignore = -100,
               unsigned seed = 5) {
  std::mt19937 engine(seed);
  std::vector<int64_t> values(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = int64_t(engine() % uint64_t(C));
    if (ignore_every > 0 && i % size_t(ignore_every) == 1) values[i] = ignore;
  }
  return tensor(values, shape);
}

// Where a loss runs: CUDA copies in their dtype, or the float64 CPU reference.
struct Place {
  bool reference;
  // A floating tensor (in the reference: as float64); integers only move.
  Tensor operator()(const Tensor& t) const {
    if (!t.defined()) return t;
    if (!reference) return to_cuda(t);
    return t.is_floating_point() ? t.to(kFloat64) : t;
  }
};

using Loss = std::function<Tensor(const std::vector<Tensor>&, const Place&)>;

// The loss f on CUDA copies of the (rounded) differentiable inputs against f on float64 CPU
// copies: forward, then every input's gradient for one upstream gradient (a random one for
// "none", else 1).
void check_loss(const Loss& f, const std::vector<Tensor>& inputs, DType dtype) {
  check_forward_backward(
      [&](const std::vector<Tensor>& in, bool reference) { return f(in, Place{reference}); },
      inputs, dtype,
      [&](const Shape& shape) {
        return shape.empty() ? full({}, 1.0, dtype) : normal(shape, dtype);
      });
}

}  // namespace

// ---- cross_entropy, nll_loss ---------------------------------------------------------------

TEST_CASE("cuda cross_entropy with class indices matches float64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(1);
  const Tensor weight = rand({7}, kFloat32);
  for (DType dtype : kFloating) {
    for (const char* reduction : kReductions) {
      for (double smoothing : {0.0, 0.1}) {
        CAPTURE(dtype, reduction, smoothing);
        // [N, C], weighted, two targets in five ignored.
        const Tensor target = classes({10}, 7, 5);
        check_loss(
            [&](const std::vector<Tensor>& x, const Place& on) {
              return cross_entropy(x[0], on(target), on(weight), -100, reduction, smoothing);
            },
            {normal({10, 7}, dtype)}, dtype);
        // [N, C, d1, d2] from a permuted tensor, ignore_index a real class, no weight.
        const Tensor spatial = classes({3, 4, 2}, 5, 0);
        check_loss(
            [&](const std::vector<Tensor>& x, const Place& on) {
              return cross_entropy(x[0].permute({0, 3, 1, 2}), on(spatial), {}, 2, reduction,
                                   smoothing);
            },
            {normal({3, 4, 2, 5}, dtype)}, dtype);
        // [C]: one sample, a 0-d target.
        const Tensor one = tensor(std::vector<int64_t>{4}, Shape{});
        check_loss(
            [&](const std::vector<Tensor>& x, const Place& on) {
              return cross_entropy(x[0], on(one), on(weight), -100, reduction, smoothing);
            },
            {normal({7}, dtype)}, dtype);
      }
    }
  }
  // Many classes: a warp walks a long row.
  const Tensor labels = classes({6}, 3000);
  check_loss([&](const std::vector<Tensor>& x,
                 const Place& on) { return cross_entropy(x[0].t(), on(labels)); },
             {normal({3000, 6}, kFloat32)}, kFloat32);
}

TEST_CASE("cuda cross_entropy with class probabilities matches float64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(2);
  const Tensor weight = rand({6}, kFloat32);
  for (DType dtype : kFloating) {
    for (const char* reduction : kReductions) {
      for (double smoothing : {0.0, 0.2}) {
        CAPTURE(dtype, reduction, smoothing);
        // Gradients for the logits and for the probabilities.
        check_loss(
            [&](const std::vector<Tensor>& x, const Place& on) {
              return cross_entropy(x[0], softmax(x[1], 1), on(weight), -100, reduction, smoothing);
            },
            {normal({8, 6}, dtype), normal({8, 6}, dtype)}, dtype);
        check_loss(
            [&](const std::vector<Tensor>& x, const Place& on) {
              return cross_entropy(x[0].transpose(1, 2), x[1], {}, -100, reduction, smoothing);
            },
            {normal({4, 3, 6}, dtype), rand({4, 6, 3}, kFloat32).to(dtype)}, dtype);
      }
    }
  }
}

TEST_CASE("cuda nll_loss matches float64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(3);
  const Tensor weight = rand({5}, kFloat32);
  for (DType dtype : kFloating) {
    for (const char* reduction : kReductions) {
      CAPTURE(dtype, reduction);
      const Tensor target = classes({12}, 5, 4);
      check_loss(
          [&](const std::vector<Tensor>& x, const Place& on) {
            return nll_loss(log_softmax(x[0], 1), on(target), on(weight), -100, reduction);
          },
          {normal({12, 5}, dtype)}, dtype);
      const Tensor spatial = classes({2, 3, 4}, 5, 3, 1);
      check_loss(
          [&](const std::vector<Tensor>& x, const Place& on) {
            return nll_loss(x[0].permute({0, 3, 1, 2}), on(spatial), {}, 1, reduction);
          },
          {normal({2, 3, 4, 5}, dtype)}, dtype);
      const Tensor one = tensor(std::vector<int64_t>{3}, Shape{});
      check_loss(
          [&](const std::vector<Tensor>& x, const Place& on) {
            return nll_loss(x[0], on(one), on(weight), -100, reduction);
          },
          {normal({5}, dtype)}, dtype);
    }
  }
}

TEST_CASE("cuda class losses: every target ignored, create_graph, determinism", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(4);
  // All ignored: "mean" is 0 / 0 = NaN, as on the CPU, and the gradient is zero.
  const Tensor ignored = full({4}, -100, kInt64);
  for (bool nll : {false, true}) {
    CAPTURE(nll);
    Tensor x = to_cuda(normal({4, 3}, kFloat32));
    x.requires_grad_();
    Tensor loss = nll ? nll_loss(x, to_cuda(ignored)) : cross_entropy(x, to_cuda(ignored));
    CHECK(std::isnan(loss.item<float>()));
    loss.backward();
    CHECK(host(x.grad()).to_vector<float>() == std::vector<float>(12, 0.0f));
  }
  // create_graph: the gradient is itself differentiated (the op formulas, on the device).
  const Tensor target = classes({6}, 4, 3);
  const Tensor weight = rand({4}, kFloat32);
  for (double smoothing : {0.0, 0.1}) {
    CAPTURE(smoothing);
    const Tensor x = normal({6, 4}, kFloat32);
    std::vector<double> penalties;
    for (bool reference : {false, true}) {
      const Place on{reference};
      Tensor input = on(x);
      input.requires_grad_();
      const Tensor loss = cross_entropy(input, on(target), on(weight), -100, "mean", smoothing);
      const Tensor g = autograd::grad({loss}, {input}, {}, false, /*create_graph=*/true)[0];
      const Tensor penalty = sum(mul(g, g));
      penalty.backward();
      penalties.push_back(penalty.item<double>());
      if (!reference) {
        const Tensor nll_g =
            autograd::grad({nll_loss(input, on(target), on(weight))}, {input}, {}, false, true)[0];
        CHECK(nll_g.is_cuda());
      }
    }
    CHECK(penalties[0] == Approx(penalties[1]).epsilon(1e-5));
  }
  // The same loss twice: the same bits (no atomics in any reduction).
  const Tensor logits = to_cuda(normal({300, 10}, kFloat32));
  const Tensor labels = to_cuda(classes({300}, 10, 7));
  REQUIRE(bit_identical(host(cross_entropy(logits, labels)), host(cross_entropy(logits, labels))));
  REQUIRE(bit_identical(host(mse_loss(logits, logits.t().contiguous().t())),
                        host(mse_loss(logits, logits.t().contiguous().t()))));
}

TEST_CASE("cuda class targets out of range raise at the next synchronize", "[cuda]") {
  HG_REQUIRE_CUDA();
  const Tensor x = to_cuda(normal({3, 4}, kFloat32));
  const Tensor bad = to_cuda(tensor(std::vector<int64_t>{0, 4, 1}));
  const Tensor negative = to_cuda(tensor(std::vector<int64_t>{0, -3, 1}));
  for (const char* reduction : kReductions) {
    CAPTURE(reduction);
    cross_entropy(x, bad, {}, -100, reduction);
    CHECK_THAT(error_of([] { cuda::synchronize(); }),
               Contains("cross_entropy") && Contains("got 4") && Contains("[0, 4)"));
    nll_loss(x, negative, {}, -100, reduction);
    CHECK_THAT(error_of([] { cuda::synchronize(); }), Contains("nll_loss") && Contains("got -3"));
    CHECK(error_of([] { cuda::synchronize(); }).empty());
  }
  // Host-side checks keep the CPU's words.
  CHECK_THAT(error_of([&] {
               cross_entropy(x, to_cuda(tensor(std::vector<int64_t>{0, 1})));
             }),
             Contains("cross_entropy: expected a target of shape [3]"));
  CHECK_THAT(error_of([&] { nll_loss(x, bad, to_cuda(ones({3}, kFloat32))); }),
             Contains("nll_loss: expected a weight of shape [4]"));
}

// ---- pointwise losses ----------------------------------------------------------------------

TEST_CASE("cuda pointwise losses match float64", "[cuda]") {
  HG_REQUIRE_CUDA();
  PoisonCudaAllocations poison;
  manual_seed(5);
  for (DType dtype : kFloating) {
    for (const char* reduction : kReductions) {
      CAPTURE(dtype, reduction);
      const std::vector<Tensor> pair = {normal({6, 5}, dtype), normal({5, 6}, dtype)};
      // The target transposed: not contiguous.
      check_loss([&](const std::vector<Tensor>& x,
                     const Place&) { return mse_loss(x[0], x[1].t(), reduction); },
                 pair, dtype);
      check_loss([&](const std::vector<Tensor>& x,
                     const Place&) { return l1_loss(x[0], x[1].t(), reduction); },
                 pair, dtype);
      for (double beta : {1.0, 0.5, 0.0}) {
        CAPTURE(beta);
        check_loss([&](const std::vector<Tensor>& x,
                       const Place&) { return smooth_l1_loss(x[0], x[1].t(), reduction, beta); },
                   pair, dtype);
      }
      // Logits, probabilities as targets, a weight per class and a pos_weight per class.
      const Tensor weight = rand({5}, kFloat32), pos_weight = add(rand({5}, kFloat32), 0.5);
      const std::vector<Tensor> logits_targets = {normal({6, 5}, dtype),
                                                  rand({6, 5}, kFloat32).to(dtype)};
      check_loss(
          [&](const std::vector<Tensor>& x, const Place& on) {
            return binary_cross_entropy_with_logits(x[0], x[1], on(weight), reduction,
                                                    on(pos_weight));
          },
          logits_targets, dtype);
      check_loss(
          [&](const std::vector<Tensor>& x, const Place&) {
            return binary_cross_entropy_with_logits(x[0], x[1], {}, reduction);
          },
          logits_targets, dtype);
      // binary_cross_entropy of probabilities in (0, 1).
      check_loss(
          [&](const std::vector<Tensor>& x, const Place& on) {
            return binary_cross_entropy(sigmoid(x[0]), x[1], on(weight), reduction);
          },
          logits_targets, dtype);
      // kl_div: log-probabilities against probabilities or log-probabilities.
      for (const char* kl_reduction : {reduction, "batchmean"}) {
        CAPTURE(kl_reduction);
        check_loss(
            [&](const std::vector<Tensor>& x, const Place&) {
              return kl_div(log_softmax(x[0], 1), softmax(x[1], 1), kl_reduction);
            },
            {normal({6, 5}, dtype), normal({6, 5}, dtype)}, dtype);
        check_loss(
            [&](const std::vector<Tensor>& x, const Place&) {
              return kl_div(log_softmax(x[0], 1), log_softmax(x[1], 1), kl_reduction, true);
            },
            {normal({6, 5}, dtype), normal({6, 5}, dtype)}, dtype);
      }
    }
  }
  // Mixed dtypes promote (float16 input, float32 target: a float32 loss), and a weight that
  // needs its gradient takes the op formulas.
  check_loss([](const std::vector<Tensor>& x, const Place&) { return mse_loss(x[0], x[1]); },
             {normal({4, 3}, kFloat16), normal({4, 3}, kFloat32)}, kFloat32);
  check_loss([](const std::vector<Tensor>& x,
                const Place&) { return binary_cross_entropy_with_logits(x[0], x[1], x[2]); },
             {normal({4, 3}, kFloat32), rand({4, 3}, kFloat32), rand({3}, kFloat32)}, kFloat32);
  // binary_cross_entropy checks its input range on the device, without waiting: the error
  // comes at the next synchronize, naming the first value found outside [0, 1].
  Tensor probabilities = full({3}, 0.5, kFloat32);
  probabilities.narrow(0, 1, 1).fill_(1.5);
  const Tensor loss = binary_cross_entropy(to_cuda(probabilities), to_cuda(zeros({3}, kFloat32)));
  CHECK_THAT(error_of([] { cuda::synchronize(); }),
             Contains("binary_cross_entropy (cuda:0): expected every element of input in [0, 1] "
                      "(probabilities), got 1.5 (found on the device)"));
  CHECK(error_of([] { cuda::synchronize(); }).empty());  // reported once
  CHECK_THAT(error_of([] {
               binary_cross_entropy(to_cuda(full({2}, std::nan(""), kFloat32)),
                                    to_cuda(zeros({2}, kFloat32)))
                   .item<float>();
             }),
             Contains("got nan"));
}
