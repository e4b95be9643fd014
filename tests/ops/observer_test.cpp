// ops/observer.h: dispatch observers see every op call of their thread, after the op ran, with
// the dtypes the caller gave and the ones autocast handed the kernel.
#include <catch2/catch.hpp>

#include <thread>

#include "halfgrad/halfgrad.h"
#include "halfgrad/ops/observer.h"

using namespace hg;

namespace {

struct Recorder final : ops::DispatchObserver {
  struct Seen {
    OpId op;
    bool outermost;
    std::optional<CastPolicy> policy;
    std::vector<DType> given, received, outputs;
  };
  std::vector<Seen> calls;
  void on_op(const ops::OpCall& call) override {
    Seen seen{call.op, call.outermost, call.policy, {}, {}, {}};
    seen.given.assign(call.given_dtypes.begin(), call.given_dtypes.end());
    for (const Tensor& t : call.inputs) {
      if (t.defined()) seen.received.push_back(t.dtype());
    }
    for (const Tensor* t : call.outputs) seen.outputs.push_back(t->dtype());
    calls.push_back(std::move(seen));
  }
};

}  // namespace

TEST_CASE("an observer sees each op with the dtypes given and the dtypes autocast passed on",
          "[observer]") {
  const Tensor x = randn({2, 4}), w = randn({3, 4});
  Recorder recorder;
  CHECK(ops::has_observers());
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    (void)linear(x, w);
  }
  // linear's inner calls come first (they finish first), the outermost call last.
  REQUIRE_FALSE(recorder.calls.empty());
  const Recorder::Seen& outer = recorder.calls.back();
  CHECK(outer.op == OpId::linear);
  CHECK(outer.outermost);
  REQUIRE(outer.policy.has_value());
  CHECK(*outer.policy == CastPolicy::LowerPrecision);
  CHECK(outer.given == std::vector<DType>{kFloat32, kFloat32});
  CHECK(outer.received == std::vector<DType>{kBFloat16, kBFloat16});
  CHECK(outer.outputs == std::vector<DType>{kBFloat16});
  for (size_t i = 0; i + 1 < recorder.calls.size(); ++i) {
    CHECK_FALSE(recorder.calls[i].outermost);
    CHECK_FALSE(recorder.calls[i].policy.has_value());
  }
}

TEST_CASE("observers nest, leave in any order, and see only their own thread", "[observer]") {
  const Tensor x = ones({3});
  auto outer = std::make_unique<Recorder>();
  auto inner = std::make_unique<Recorder>();
  (void)exp(x);
  CHECK(outer->calls.size() == 1);
  CHECK(inner->calls.size() == 1);
  outer.reset();  // not the most recent one: the list still holds the inner observer
  (void)exp(x);
  CHECK(inner->calls.size() == 2);
  std::thread([&] { (void)exp(x); }).join();
  CHECK(inner->calls.size() == 2);
  inner.reset();
  CHECK_FALSE(ops::has_observers());
}
