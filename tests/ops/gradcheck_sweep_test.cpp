// Every differentiable op in the registry against finite differences (autograd::gradcheck).
//
// The sweep walks all_ops(): a differentiable op without a registered sample (see
// gradcheck_samples.h) fails the test, so an op cannot be added to op_list.def without a
// checked backward.
#include <catch2/catch.hpp>

#include "gradcheck_samples.h"

using namespace hg;
using hg::testing::Inputs;

TEST_CASE("every differentiable op passes gradcheck", "[gradcheck]") {
  const auto& all = testing::gradcheck_samples();
  for (const OpInfo& info : all_ops()) {
    if (!info.differentiable) continue;
    CAPTURE(info.name);
    const auto it = all.find(info.id);
    if (it == all.end()) FAIL("no gradcheck sample for the differentiable op " << info.name);
    const Inputs inputs = it->second.inputs();
    CHECK_NOTHROW(autograd::gradcheck(it->second.fn, inputs, it->second.options));
  }
}
TEST_CASE("second derivatives through create_graph", "[gradcheck]") {
  // d/dx of d/dx (x^3) = 6x, through the recorded backward of mul.
  Tensor x = tensor({0.5, -1.0, 2.0}, kFloat64).requires_grad_();
  const Tensor y = sum(mul(mul(x, x), x));
  const Tensor g = autograd::grad({y}, {x}, {}, true, true)[0];
  CHECK(g.to_vector<double>() == std::vector<double>{0.75, 3.0, 12.0});
  const Tensor gg = autograd::grad({sum(g)}, {x})[0];
  CHECK(gg.to_vector<double>() == std::vector<double>{3.0, -6.0, 12.0});
  // The same for gelu, whose first derivative is a fused kernel unless recorded.
  Tensor z = testing::input({4});
  CHECK_NOTHROW(autograd::gradcheck(
      [](const Inputs& in) {
        return autograd::grad({sum(gelu(in[0]))}, {in[0]}, {}, true, true)[0];
      },
      {z}));
}

TEST_CASE("second derivatives of the fused ops through create_graph", "[gradcheck]") {
  // Their recorded backward recomputes what the first-order one reads from saved results (the
  // pre-activation, the attention weights), so that it reaches every input again.
  const Inputs linear_inputs{testing::input({2, 3}), testing::input({4, 3}), testing::input({4})};
  CHECK_NOTHROW(autograd::gradcheck(
      [](const Inputs& in) {
        const Tensor y =
            sum(mul(linear_gelu(in[0], in[1], in[2]), linear_gelu(in[0], in[1], in[2])));
        const std::vector<Tensor> g = autograd::grad({y}, {in[0], in[1], in[2]}, {}, true, true);
        return add(sum(g[0]), add(sum(g[1]), sum(g[2])));
      },
      linear_inputs));
  const Inputs attention_inputs{testing::input({2, 3, 4}), testing::input({2, 5, 4}),
                                testing::input({2, 5, 4})};
  CHECK_NOTHROW(autograd::gradcheck(
      [](const Inputs& in) {
        const Tensor out = scaled_dot_product_flash_attention(in[0], in[1], in[2], true);
        const Tensor y = sum(mul(out, out));
        const std::vector<Tensor> g = autograd::grad({y}, {in[0], in[1], in[2]}, {}, true, true);
        return add(sum(mul(g[0], g[0])), add(sum(mul(g[1], g[1])), sum(mul(g[2], g[2]))));
      },
      attention_inputs));
}
