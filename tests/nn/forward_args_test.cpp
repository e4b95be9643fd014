// Modules whose forward takes and returns anything (NOTE [Module forward signature]): Values,
// CustomForward, hooks that see every input, Sequential passing tuples on, the forward stack.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Matchers::Contains;

namespace {

// forward(x, shift, factor, mode) -> (x * factor + shift, x * factor) with shift optional,
// factor a number, mode "add" or "sub" (sub negates the shift).
struct Affine : nn::CustomForward<Affine> {
  std::string name() const override { return "Affine"; }
  std::tuple<Tensor, Tensor> forward(const Tensor& x, const std::optional<Tensor>& shift,
                                     double factor, const std::string& mode) {
    HG_CHECK(mode == "add" || mode == "sub", "Affine: expected mode add or sub, got {}", mode);
    Tensor scaled = x * factor;
    if (!shift) return {scaled, scaled};
    return {mode == "add" ? scaled + *shift : scaled - *shift, scaled};
  }
};

// Takes the pair an Affine returns and adds its halves.
struct AddPair : nn::CustomForward<AddPair> {
  std::string name() const override { return "AddPair"; }
  Tensor forward(const std::tuple<Tensor, Tensor>& pair) {
    return std::get<0>(pair) + std::get<1>(pair);
  }
};

// Records the forward stack's class names as its forward sees them.
struct Probe : nn::Module {
  std::vector<std::string>* seen;
  explicit Probe(std::vector<std::string>* seen) : seen(seen) {}
  std::string name() const override { return "Probe"; }
  Tensor forward(const Tensor& x) override {
    std::string stack;
    for (const nn::Module* m : nn::forward_stack()) stack += m->name() + "/";
    seen->push_back(stack);
    return x;
  }
};

struct Fails : nn::Module {
  std::string name() const override { return "Fails"; }
  Tensor forward(const Tensor&) override { HG_ERROR("Fails: always"); }
};

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

}  // namespace

TEST_CASE("Value round-trips the kinds a forward takes", "[nn][forward]") {
  const Tensor x = arange(3, kFloat32);
  const nn::Value v = nn::Value::from(
      std::make_tuple(x, std::optional<Tensor>(), 2.5, int64_t(-4), std::string("mode"), true));
  CHECK(v.kind() == "tuple(Tensor, None, float, int, str, bool)");
  const auto [t, none, f, i, s, b] =
      v.to<std::tuple<Tensor, std::optional<Tensor>, double, int, std::string, bool>>();
  CHECK(t.is_same(x));
  CHECK(!none.has_value());
  CHECK(f == 2.5);
  CHECK(i == -4);
  CHECK(s == "mode");
  CHECK(b);
  // Python's float(3): an int reads as a float, not the other way round.
  CHECK(nn::Value(3).to<double>() == 3.0);
  CHECK_THROWS_WITH(nn::Value(3.5).to<int>("arg"), Contains("arg: expected an int, got float"));
  CHECK_THROWS_WITH(nn::Value(int64_t(300)).to<uint8_t>("arg"),
                    Contains("expected an integer that fits the parameter, got 300"));
  CHECK_THROWS_WITH((v.to<std::pair<Tensor, Tensor>>("out")),
                    Contains("out: expected a tuple of 2 elements, got tuple(Tensor, None"));
  // Vectors are tuples; a pair and a two-tuple are the same value.
  const nn::Value list = nn::Value::from(std::vector<int>{1, 2, 3});
  CHECK(list.to<std::vector<int64_t>>() == std::vector<int64_t>{1, 2, 3});
  CHECK(nn::Value::from(std::make_pair(1, 2.0)).to<std::tuple<int, double>>() ==
        std::make_tuple(1, 2.0));
  CHECK(nn::describe({x, nn::Value(), "s"}) == "(Tensor, None, str)");
}

TEST_CASE("a CustomForward module is called with its own signature", "[nn][forward]") {
  auto affine = std::make_shared<Affine>();
  const Tensor x = tensor(std::vector<float>{1, 2, 3});
  const Tensor shift = tensor(std::vector<float>{10, 20, 30});
  // Without hooks: a direct call, the result in forward's own type.
  auto [y, scaled] = (*affine)(x, shift, 2.0, "add");
  CHECK(values(y) == std::vector<float>{12, 24, 36});
  CHECK(values(scaled) == std::vector<float>{2, 4, 6});
  // Type-erased, the optional parameter left out is None, as torch's default.
  const nn::Value out = affine->call({x, nn::Value(), 3, "sub"});
  CHECK(out.kind() == "tuple(Tensor, Tensor)");
  CHECK(values(out.tuple()[0].tensor()) == std::vector<float>{3, 6, 9});
  CHECK_THROWS_WITH(
      affine->call({x, shift}),
      Contains("Affine.forward: expected at least 4 arguments, got 2 (Tensor, Tensor)"));
  CHECK_THROWS_WITH(affine->call({x, shift, 2.0, "add", 1}),
                    Contains("Affine.forward: expected at most 4 arguments, got 5"));
  CHECK_THROWS_WITH(affine->call({x, 2.0, 2.0, "add"}),
                    Contains("Affine.forward argument 1: expected a Tensor, got float"));
  // A plain module called with anything but one tensor names what it got.
  auto linear = std::make_shared<nn::Linear>(3, 2);
  CHECK_THROWS_WITH(linear->call({x, x}),
                    Contains("Linear.forward: expected one Tensor, got (Tensor, Tensor)"));
}

TEST_CASE("hooks see every input and may replace inputs and result", "[nn][forward]") {
  auto affine = std::make_shared<Affine>();
  const Tensor x = tensor(std::vector<float>{1, 2});
  const Tensor shift = tensor(std::vector<float>{5, 5});
  std::vector<std::string> seen;
  auto pre = affine->register_forward_pre_hook(
      [&](nn::Module& m, const nn::Args& args) -> std::optional<nn::Args> {
        seen.push_back(m.name() + nn::describe(args));
        nn::Args replaced = args;
        replaced[2] = args[2].to<double>() * 10;  // the factor
        return replaced;
      });
  std::vector<double> factors_seen;
  auto post = affine->register_forward_hook(
      [&](nn::Module&, const nn::Args& args, const nn::Value& out) -> std::optional<nn::Value> {
        seen.push_back("post" + nn::describe(args) + " -> " + out.kind());
        factors_seen.push_back(args[2].to<double>());  // what forward received
        const auto [a, b] = out.to<std::tuple<Tensor, Tensor>>();
        return nn::Value::from(std::make_tuple(a + 1.0, b));
      });
  auto [y, scaled] = (*affine)(x, shift, 2.0, "add");
  CHECK(seen == std::vector<std::string>{"Affine(Tensor, Tensor, float, str)",
                                         "post(Tensor, Tensor, float, str) -> tuple(Tensor, "
                                         "Tensor)"});
  // 1 * 20 + 5 + 1 and 2 * 20 + 5 + 1, computed by hand.
  CHECK(values(y) == std::vector<float>{26, 46});
  CHECK(values(scaled) == std::vector<float>{20, 40});
  CHECK(factors_seen == std::vector<double>{20});
  seen.clear();
  (*affine)(x, std::nullopt, 1.0, "add");
  CHECK(seen.front() == "Affine(Tensor, None, float, str)");
  pre.remove();
  post.remove();

  // A hook written in tensor terms fits one-tensor calls only, and says so.
  auto tensor_hook = affine->register_forward_pre_hook(
      [](nn::Module&, const Tensor&) -> std::optional<Tensor> { return std::nullopt; });
  CHECK_THROWS_WITH((*affine)(x, shift, 2.0, "add"),
                    Contains("Affine: a forward pre-hook that takes one Tensor is registered, "
                             "but the module was called with (Tensor, Tensor, float, str)"));
  tensor_hook.remove();
}

TEST_CASE("loss modules run hooks that see input and target", "[nn][forward]") {
  auto mse = std::make_shared<nn::MSELoss>();
  std::string seen;
  auto hook = mse->register_forward_pre_hook([&](nn::Module& m, const nn::Args& args) {
    seen = m.name() + nn::describe(args);
    return std::optional<nn::Args>();
  });
  const Tensor a = tensor(std::vector<float>{1, 2}), b = tensor(std::vector<float>{3, 5});
  CHECK((*mse)(a, b).item<float>() == Approx((4.0 + 9.0) / 2));
  CHECK(seen == "MSELoss(Tensor, Tensor)");
}

TEST_CASE("MultiheadAttention takes query alone or query key and value", "[nn][forward]") {
  manual_seed(3);
  auto attn = std::make_shared<nn::MultiheadAttention>(8, 2);
  const Tensor x = randn({2, 4, 8});
  const Tensor kv = randn({2, 6, 8});
  std::vector<std::string> seen;
  auto hook = attn->register_forward_pre_hook([&](nn::Module&, const nn::Args& args) {
    seen.push_back(nn::describe(args));
    return std::optional<nn::Args>();
  });
  const auto self = values((*attn)(x));
  CHECK(self == values((*attn)(x, x, x)));
  const auto cross = values((*attn)(x, kv, kv));
  CHECK(cross == values(attn->call({x, kv, kv}).tensor()));
  CHECK(seen.front() == "(Tensor)");
  CHECK(seen.back() == "(Tensor, Tensor, Tensor)");
  CHECK_THROWS_WITH((*attn)(x, kv, std::nullopt),
                    Contains("expected key and value both given or both left out"));
  // A one-tensor call through the base class runs the same forward.
  nn::Module& base = *attn;
  CHECK(values(base(x)) == values((*attn)(x)));
}

TEST_CASE("Sequential passes each result on as the next module's argument", "[nn][forward]") {
  auto affine = std::make_shared<Affine>();
  // Sequential calls with one argument: Affine needs four (only shift is optional).
  auto seq = std::make_shared<nn::Sequential>(nn::Linear(2, 2), affine, AddPair());
  CHECK_THROWS_WITH((*seq)(ones({1, 2})),
                    Contains("Affine.forward: expected at least 4 arguments, got 1 (Tensor)"));

  // A module returning a tuple feeds one taking it, as an LSTM feeds torch users' selectors.
  struct Split : nn::CustomForward<Split> {
    std::string name() const override { return "Split"; }
    // By value: forward(const Tensor&) is the one-tensor virtual, which returns a Tensor.
    std::tuple<Tensor, Tensor> forward(Tensor x) { return {x * 2.0, x * 3.0}; }
  };
  auto pipeline = std::make_shared<nn::Sequential>(Split(), AddPair(), nn::ReLU());
  const Tensor x = tensor(std::vector<float>{1, -2});
  CHECK(values((*pipeline)(x)) == std::vector<float>{5, 0});
  CHECK(pipeline->call({x}).kind() == "Tensor");
  // An empty Sequential returns its argument; hooks on the children fire inside.
  CHECK(nn::Sequential().call({x}).tensor().is_same(x));
  int calls = 0;
  auto hook = pipeline->at<AddPair>(1)->register_forward_hook(
      [&](nn::Module&, const nn::Args& args, const nn::Value&) -> std::optional<nn::Value> {
        ++calls;
        CHECK(nn::describe(args) == "(tuple(Tensor, Tensor))");
        return std::nullopt;
      });
  (*pipeline)(x);
  CHECK(calls == 1);
}

TEST_CASE("the forward stack holds the modules whose forward runs", "[nn][forward]") {
  std::vector<std::string> seen;
  auto inner = std::make_shared<nn::Sequential>(Probe(&seen));
  auto outer = std::make_shared<nn::Sequential>(Probe(&seen), inner);
  (*outer)(ones({1}));
  CHECK(seen == std::vector<std::string>{"Sequential/Probe/", "Sequential/Sequential/Probe/"});
  CHECK(nn::forward_stack().empty());
  // A forward that throws leaves the stack as it found it.
  auto failing = std::make_shared<nn::Sequential>(Probe(&seen), Fails());
  CHECK_THROWS_WITH((*failing)(ones({1})), Contains("Fails: always"));
  CHECK(nn::forward_stack().empty());
}

TEST_CASE("an LSTM runs its hooks and sits in a Sequential as in torch", "[nn][forward]") {
  manual_seed(5);
  auto lstm = std::make_shared<nn::LSTM>(3, 4);
  // torch users pick the output out of (output, (h_n, c_n)) with a small module.
  struct Output : nn::CustomForward<Output> {
    std::string name() const override { return "Output"; }
    Tensor forward(const std::tuple<Tensor, std::tuple<Tensor, Tensor>>& result) {
      return std::get<0>(result);
    }
  };
  auto seq = std::make_shared<nn::Sequential>(lstm, Output());
  const Tensor x = randn({5, 2, 3});
  const Tensor h0 = randn({1, 2, 4}), c0 = randn({1, 2, 4});
  const auto direct = values(std::get<0>(lstm->forward(x, std::nullopt)));
  CHECK(values((*seq)(x)) == direct);
  std::vector<std::string> seen;
  auto hook = lstm->register_forward_hook(
      [&](nn::Module&, const nn::Args& args, const nn::Value& out) -> std::optional<nn::Value> {
        seen.push_back(nn::describe(args) + " -> " + out.kind());
        return std::nullopt;
      });
  auto [output, state] = (*lstm)(x, std::make_tuple(h0, c0));
  CHECK(values(output) == values(std::get<0>(lstm->forward(x, std::make_tuple(h0, c0)))));
  CHECK(values((*seq)(x)) == direct);
  CHECK(seen == std::vector<std::string>{
                    "(Tensor, tuple(Tensor, Tensor)) -> tuple(Tensor, tuple(Tensor, Tensor))",
                    "(Tensor) -> tuple(Tensor, tuple(Tensor, Tensor))"});
}
