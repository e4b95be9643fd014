// OpCall::rerun (NOTE [Op reruns] in ops/observer.h): an observer that asks reruns an op's
// forward on inputs of its choosing, unseen by observers, without a graph, below autocast, with
// the call's own random draws.
#include <functional>
#include <vector>

#include <catch2/catch.hpp>

#include "halfgrad/halfgrad.h"
#include "halfgrad/ops/observer.h"

using namespace hg;
using Catch::Contains;

namespace {

// Reruns every outermost call on the inputs the kernel received, and keeps what came back.
struct Rerunner final : ops::DispatchObserver {
  Rerunner() { request_reruns(); }
  int calls_seen = 0;
  bool busy = false;
  bool every_call_had_a_rerun = true;
  std::vector<std::vector<Tensor>> outputs, reruns;
  std::function<std::vector<Tensor>(std::span<const Tensor>)> choose_inputs;
  void on_op(const ops::OpCall& call) override {
    ++calls_seen;
    if (!call.outermost || busy) return;  // not the ops choose_inputs calls
    busy = true;
    struct Done {
      bool& flag;
      ~Done() { flag = false; }
    } done{busy};
    every_call_had_a_rerun = every_call_had_a_rerun && call.rerun != nullptr;
    if (call.rerun == nullptr) return;
    std::vector<Tensor> out;
    for (const Tensor* t : call.outputs) out.push_back(*t);
    outputs.push_back(out);
    const std::vector<Tensor> inputs =
        choose_inputs ? choose_inputs(call.inputs)
                      : std::vector<Tensor>(call.inputs.begin(), call.inputs.end());
    const int before = calls_seen;
    reruns.push_back((*call.rerun)(inputs));
    CHECK(calls_seen == before);  // the rerun's own ops are hidden
  }
};

}  // namespace

TEST_CASE("a rerun on the same inputs gives the call's outputs bit for bit with no graph",
          "[observer][rerun]") {
  const Tensor x = randn({3, 5}).requires_grad_(), w = randn({4, 5}), b = randn({4});
  Rerunner rerunner;
  Tensor y;
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    y = linear(x, w, b);
  }
  REQUIRE(rerunner.every_call_had_a_rerun);
  REQUIRE(rerunner.reruns.size() == 1);
  const Tensor& again = rerunner.reruns[0].at(0);
  CHECK(y.grad_fn() != nullptr);
  CHECK(again.grad_fn() == nullptr);  // grad mode off in the rerun
  CHECK(again.dtype() == kBFloat16);  // the kernel's inputs were bfloat16 already
  CHECK(again.to(kFloat32).to_vector<float>() == y.to(kFloat32).to_vector<float>());
}

TEST_CASE("a rerun runs below autocast on the inputs it is given", "[observer][rerun]") {
  const Tensor a = randn({4, 4}), c = randn({4, 4});
  Rerunner rerunner;
  rerunner.choose_inputs = [](std::span<const Tensor> inputs) {
    std::vector<Tensor> wide;
    for (const Tensor& t : inputs) wide.push_back(t.to(kFloat64));
    return wide;
  };
  {
    amp::Autocast autocast(kCPU, kFloat16);
    (void)matmul(a, c);
  }
  REQUIRE(rerunner.reruns.size() == 1);
  // Not cast to float16 again: the float64 inputs give a float64 product, equal to float64 math
  // on the float16 operands the call used.
  const Tensor& wide = rerunner.reruns[0].at(0);
  CHECK(wide.dtype() == kFloat64);
  const Tensor expected = matmul(a.to(kFloat16).to(kFloat64), c.to(kFloat16).to(kFloat64));
  CHECK(wide.to_vector<double>() == expected.to_vector<double>());
}

TEST_CASE("a rerun of dropout draws the call's mask and leaves the generator where the call did",
          "[observer][rerun]") {
  const Tensor x = ones({64});
  manual_seed(21);
  const Tensor plain = dropout(x, 0.5, true);
  const Generator::State plain_after = default_generator().get_state();

  manual_seed(21);
  Rerunner rerunner;
  const Tensor observed = dropout(x, 0.5, true);
  const Generator::State observed_after = default_generator().get_state();
  REQUIRE(rerunner.reruns.size() == 1);
  CHECK(observed.to_vector<float>() == plain.to_vector<float>());
  CHECK(rerunner.reruns[0].at(0).to_vector<float>() == plain.to_vector<float>());
  CHECK(observed_after.offset == plain_after.offset);
  CHECK(observed_after.seed == plain_after.seed);
}

TEST_CASE("a rerun given the wrong number of inputs is an error naming the op",
          "[observer][rerun]") {
  struct Misuser final : ops::DispatchObserver {
    Misuser() { request_reruns(); }
    std::string message;
    void on_op(const ops::OpCall& call) override {
      if (!call.outermost || call.rerun == nullptr) return;
      try {
        (void)(*call.rerun)(call.inputs.subspan(0, 1));
      } catch (const Error& error) {
        message = error.what();
      }
    }
  } misuser;
  (void)mul(randn({2}), randn({2}));
  CHECK_THAT(misuser.message, Contains("mul: a rerun takes 2 tensor inputs, got 1"));
}
