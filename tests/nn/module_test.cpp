// nn::Module: names and layouts as PyTorch, state dicts, to(dtype), hooks, modes.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "halfgrad/halfgrad.h"

using namespace hg;

namespace {

std::vector<std::string> keys_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> keys;
  for (const auto& [name, tensor] : named) keys.push_back(name);
  return keys;
}

// A user module with a child and a parameter of its own, as people write them.
struct Net : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  std::shared_ptr<nn::BatchNorm2d> bn;
  Tensor scale;
  Net() {
    fc = register_module("fc", std::make_shared<nn::Linear>(4, 3));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(3));
    scale = register_parameter("scale", ones({3}));
  }
  std::string name() const override { return "Net"; }
  Tensor forward(const Tensor& x) override { return (*fc)(x)*scale; }
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("Linear and Sequential name and lay out parameters as PyTorch", "[nn][module]") {
  nn::Linear linear(5, 3);
  CHECK(linear.weight.sizes() == Shape{3, 5});
  CHECK(linear.bias.sizes() == Shape{3});
  CHECK(keys_of(linear.named_parameters()) == std::vector<std::string>{"weight", "bias"});
  CHECK(linear.weight.requires_grad());
  CHECK(linear.weight.is_leaf());
  CHECK(nn::Linear(5, 3, false).named_parameters().size() == 1);

  auto model = std::make_shared<nn::Sequential>(nn::Linear(4, 8), nn::GELU(),
                                                std::make_shared<nn::Linear>(8, 2));
  CHECK(keys_of(model->named_parameters()) ==
        std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  CHECK(model->size() == 3);
  CHECK(model->at<nn::Linear>(2)->weight.sizes() == Shape{2, 8});
  CHECK_THROWS_AS(model->at<nn::Linear>(1), Error);
  std::vector<std::string> child_names;
  for (auto& [name, child] : model->named_children()) child_names.push_back(name);
  CHECK(child_names == std::vector<std::string>{"0", "1", "2"});
  // The registry and the member are one tensor.
  CHECK(model->parameters()[2].is_same(model->at<nn::Linear>(2)->weight));
}

TEST_CASE("nested modules give dotted names and buffers are separate", "[nn][module]") {
  auto net = std::make_shared<Net>();
  CHECK(keys_of(net->named_parameters()) ==
        std::vector<std::string>{"scale", "fc.weight", "fc.bias", "bn.weight", "bn.bias"});
  CHECK(keys_of(net->named_parameters(false)) == std::vector<std::string>{"scale"});
  CHECK(keys_of(net->named_buffers()) ==
        std::vector<std::string>{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"});
  CHECK(net->children().size() == 2);
  std::vector<std::string> module_names;
  for (auto& [name, m] : net->named_modules()) module_names.push_back(name);
  CHECK(module_names == std::vector<std::string>{"", "fc", "bn"});
  auto keys = net->state_dict();
  CHECK(keys.size() == 8);
  CHECK(keys.count("bn.num_batches_tracked") == 1);
}

TEST_CASE("a parameter shared by two children is listed once", "[nn][module]") {
  auto a = std::make_shared<nn::Linear>(2, 2);
  nn::Sequential twice(a, a);
  CHECK(twice.parameters().size() == 2);
  CHECK(keys_of(twice.named_parameters()) == std::vector<std::string>{"0.weight", "0.bias"});
}

TEST_CASE("registering a taken or dotted name is an error naming it", "[nn][module]") {
  nn::Module m;
  m.register_parameter("w", zeros({2}));
  try {
    m.register_buffer("w", zeros({2}));
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "\"w\""));
  }
  CHECK_THROWS_AS(m.register_parameter("a.b", zeros({2})), Error);
  CHECK_THROWS_AS(m.register_parameter("", zeros({2})), Error);
  CHECK(m.parameters().size() == 1);
  CHECK_THROWS_AS(m(zeros({2})), Error);  // no forward
}

TEST_CASE("train and eval reach every descendant", "[nn][module]") {
  auto net = std::make_shared<Net>();
  CHECK(net->is_training());
  net->eval();
  CHECK(!net->is_training());
  CHECK(!net->fc->is_training());
  CHECK(!net->bn->is_training());
  net->train();
  CHECK(net->bn->is_training());
}

TEST_CASE("state_dict round trip copies values into another model", "[nn][module]") {
  manual_seed(1);
  auto a = std::make_shared<Net>();
  auto b = std::make_shared<Net>();
  REQUIRE(a->fc->weight.to_vector<float>() != b->fc->weight.to_vector<float>());
  {
    NoGradGuard no_grad;
    a->bn->running_mean.fill_(0.25);
    a->bn->num_batches_tracked.fill_(7);
  }
  auto result = b->load_state_dict(a->state_dict());
  CHECK(result.missing_keys.empty());
  CHECK(result.unexpected_keys.empty());
  for (auto& [key, tensor] : a->state_dict()) {
    CHECK(b->state_dict().at(key).to_vector<double>() == tensor.to_vector<double>());
  }
  // Copied, not shared.
  CHECK(!b->fc->weight.shares_storage(a->fc->weight));
  CHECK(b->bn->num_batches_tracked.item<int64_t>() == 7);
  // The state dict shares storage with the module and carries no autograd.
  auto state = a->state_dict();
  CHECK(state.at("fc.weight").shares_storage(a->fc->weight));
  CHECK(!state.at("fc.weight").requires_grad());
}

TEST_CASE("load_state_dict errors name the key and leave the model unchanged", "[nn][module]") {
  auto source = std::make_shared<Net>();
  auto model = std::make_shared<Net>();
  const auto before = model->fc->weight.to_vector<float>();
  const auto bias_before = model->fc->bias.to_vector<float>();

  auto check_error = [&](const nn::StateDict& state, const std::string& key) {
    try {
      model->load_state_dict(state);
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK(contains(e.what(), "\"" + key + "\""));
    }
    CHECK(model->fc->weight.to_vector<float>() == before);
    CHECK(model->fc->bias.to_vector<float>() == bias_before);
  };

  auto missing = source->state_dict();
  missing.erase("scale");  // sorted keys: "bn.*", "fc.*" come first and would be copied
  check_error(missing, "scale");

  auto extra = source->state_dict();
  extra.emplace("zz.unused", zeros({1}));
  check_error(extra, "zz.unused");

  auto wrong_shape = source->state_dict();
  wrong_shape["scale"] = zeros({4});
  check_error(wrong_shape, "scale");

  // strict = false loads what matches and reports the rest.
  auto partial = source->state_dict();
  partial.erase("scale");
  partial.emplace("zz.unused", zeros({1}));
  auto result = model->load_state_dict(partial, false);
  CHECK(result.missing_keys == std::vector<std::string>{"scale"});
  CHECK(result.unexpected_keys == std::vector<std::string>{"zz.unused"});
  CHECK(model->fc->weight.to_vector<float>() == source->fc->weight.to_vector<float>());
}

TEST_CASE("load_state_dict converts the dtype of the values", "[nn][module]") {
  nn::Linear a(3, 2), b(3, 2);
  nn::StateDict state;
  state["weight"] = a.weight.detach().to(kFloat64);
  state["bias"] = a.bias.detach().to(kFloat64);
  b.load_state_dict(state);
  CHECK(b.weight.dtype() == kFloat32);
  CHECK(b.weight.to_vector<float>() == a.weight.to_vector<float>());
}

TEST_CASE("to(kFloat16) keeps parameter identity and converts data and grads", "[nn][module]") {
  auto net = std::make_shared<Net>();
  const auto params = net->parameters();  // what an optimizer would hold
  const auto original = net->fc->weight.to_vector<float>();
  net->fc->weight.mutable_grad() = full({3, 4}, 0.5);

  net->half();
  CHECK(params[1].is_same(net->fc->weight));
  CHECK(net->fc->weight.dtype() == kFloat16);
  CHECK(params[1].dtype() == kFloat16);
  CHECK(net->fc->weight.requires_grad());
  CHECK(net->fc->weight.is_leaf());
  CHECK(net->fc->weight.grad().dtype() == kFloat16);
  CHECK(net->fc->weight.grad().to_vector<float>() == std::vector<float>(12, 0.5f));
  CHECK(net->bn->running_var.dtype() == kFloat16);
  CHECK(net->bn->num_batches_tracked.dtype() == kInt64);  // integer buffers stay
  const auto halved = net->fc->weight.to_vector<float>();
  for (size_t i = 0; i < original.size(); ++i) {
    CHECK(halved[i] == float(Half(original[i])));
  }

  // Gradients flow to the same tensors in the new dtype.
  net->fc->weight.mutable_grad() = Tensor();
  Tensor y = (*net)(ones({2, 4}, kFloat16));
  CHECK(y.dtype() == kFloat16);
  sum(y).backward();
  CHECK(params[1].grad().defined());
  CHECK(params[1].grad().dtype() == kFloat16);

  net->float32();
  CHECK(params[1].dtype() == kFloat32);
  CHECK(net->fc->weight.to_vector<float>() == halved);
  net->bfloat16();
  CHECK(params[0].dtype() == kBFloat16);
  CHECK(params[0].is_same(net->scale));
  CHECK_THROWS_AS(net->to(kInt32), Error);
}

TEST_CASE("to(Device) is a no-op on the CPU and an error for an unreachable device",
          "[nn][module]") {
  nn::Linear linear(2, 2);
  Tensor w = linear.weight;
  const void* data = w.data_ptr();
  linear.to(Device(kCPU));
  CHECK(linear.weight.data_ptr() == data);
  if (!cuda::is_available()) {
    CHECK_THROWS_AS(linear.to(Device(kCUDA)), Error);
    CHECK(linear.weight.is_cpu());
    CHECK(linear.weight.data_ptr() == data);
  }
}

TEST_CASE("forward hooks fire in order and can be removed", "[nn][module]") {
  auto linear = std::make_shared<nn::Linear>(2, 2);
  std::vector<std::string> calls;
  auto pre = linear->register_forward_pre_hook([&](nn::Module& m, const Tensor& x) {
    calls.push_back("pre " + m.name());
    return std::optional<Tensor>(x * 2.0);
  });
  Tensor seen_input, seen_output;
  auto post = linear->register_forward_hook(
      [&](nn::Module&, const Tensor& x, const Tensor& y) -> std::optional<Tensor> {
        calls.push_back("post");
        seen_input = x;
        seen_output = y;
        return std::nullopt;
      });
  Tensor x = ones({1, 2});
  Tensor y = (*linear)(x);
  CHECK(calls == std::vector<std::string>{"pre Linear", "post"});
  CHECK(seen_input.to_vector<float>() == std::vector<float>{2, 2});
  CHECK(y.is_same(seen_output));
  CHECK(y.to_vector<float>() == linear->forward(full({1, 2}, 2.0)).to_vector<float>());

  pre.remove();
  pre.remove();  // twice: nothing
  calls.clear();
  y = (*linear)(x);
  CHECK(calls == std::vector<std::string>{"post"});
  CHECK(y.to_vector<float>() == linear->forward(x).to_vector<float>());
  post.remove();
  calls.clear();
  (*linear)(x);
  CHECK(calls.empty());

  // A forward hook may replace the output; hooks on children fire inside Sequential.
  auto seq = std::make_shared<nn::Sequential>(linear, nn::ReLU());
  auto zero = seq->at<nn::ReLU>(1)->register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor& out) -> std::optional<Tensor> {
        return zeros_like(out);
      });
  CHECK((*seq)(x).to_vector<float>() == std::vector<float>{0, 0});
}

TEST_CASE("modules print as PyTorch's repr", "[nn][module]") {
  nn::Sequential seq(nn::Linear(4, 8), nn::GELU("tanh"), nn::Linear(8, 2, false));
  CHECK(seq.to_string() ==
        "Sequential(\n"
        "  (0): Linear(in_features=4, out_features=8, bias=True)\n"
        "  (1): GELU(approximate='tanh')\n"
        "  (2): Linear(in_features=8, out_features=2, bias=False)\n"
        ")");
}
