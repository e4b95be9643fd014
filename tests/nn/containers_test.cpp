// ModuleList, ModuleDict, ParameterList, ParameterDict: torch's names in state dicts, traversal,
// mode and dtype changes reaching every entry, Python indexing, replacement by key, errors.
#include <catch2/catch.hpp>

#include <set>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

// A model as a torch user writes one: blocks in a ModuleList, heads in a ModuleDict, extra
// parameters in a ParameterList and a ParameterDict.
struct Model : nn::Module {
  std::shared_ptr<nn::ModuleList> blocks =
      register_module("blocks", std::make_shared<nn::ModuleList>());
  std::shared_ptr<nn::ModuleDict> heads =
      register_module("heads", std::make_shared<nn::ModuleDict>());
  std::shared_ptr<nn::ParameterList> scales =
      register_module("scales", std::make_shared<nn::ParameterList>());
  std::shared_ptr<nn::ParameterDict> extra =
      register_module("extra", std::make_shared<nn::ParameterDict>());
  Model() {
    for (int i = 0; i < 3; ++i) blocks->append(nn::Linear(4, 4));
    blocks->append(std::make_shared<nn::Dropout>(0.5));
    heads->insert("class", std::make_shared<nn::Linear>(4, 2));
    heads->insert("box", std::make_shared<nn::Linear>(4, 4));
    for (int i = 0; i < 2; ++i) scales->append(ones({4}));
    extra->insert("temperature", full({}, 2.0));
  }
  std::string name() const override { return "Model"; }
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    int64_t i = 0;
    for (const auto& block : *blocks) {
      h = (*block)(h);
      if (i < 2) h = mul(h, (*scales)[i]);
      ++i;
    }
    return div((*(*heads)["class"])(h), (*extra)["temperature"]);
  }
};

}  // namespace

TEST_CASE("containers name their entries as torch's state dict does", "[nn][containers]") {
  auto model = std::make_shared<Model>();
  std::set<std::string> keys;
  for (const auto& [name, t] : model->state_dict()) keys.insert(name);
  CHECK(keys == std::set<std::string>{"blocks.0.weight", "blocks.0.bias", "blocks.1.weight",
                                      "blocks.1.bias", "blocks.2.weight", "blocks.2.bias",
                                      "heads.class.weight", "heads.class.bias", "heads.box.weight",
                                      "heads.box.bias", "scales.0", "scales.1",
                                      "extra.temperature"});
  CHECK(model->parameters().size() == 13);
  CHECK(model->blocks->size() == 4);
  CHECK(model->heads->keys() == std::vector<std::string>{"class", "box"});
  CHECK(model->heads->contains("box"));
  CHECK_FALSE(model->heads->contains("mask"));
  CHECK((*model->scales)[-1].is_same((*model->scales)[1]));
  CHECK(model->blocks->at<nn::Linear>(-2)->in_features == 4);
  // The forward uses them; gradients reach the list and dict parameters.
  const Tensor y = (*model)(randn({5, 4}));
  CHECK(y.sizes() == Shape{5, 2});
  sum(y).backward();
  CHECK((*model->scales)[0].grad().defined());
  CHECK((*model->extra)["temperature"].grad().defined());
}

TEST_CASE("train, eval, to and load_state_dict reach container entries", "[nn][containers]") {
  auto model = std::make_shared<Model>();
  model->eval();
  CHECK_FALSE(model->blocks->at<nn::Dropout>(3)->is_training());
  model->train();
  CHECK(model->blocks->at<nn::Dropout>(3)->is_training());
  model->to(kBFloat16);
  CHECK((*model->scales)[1].dtype() == kBFloat16);
  CHECK(model->heads->items()[1].second->parameters()[0].dtype() == kBFloat16);
  model->to(kFloat32);
  auto other = std::make_shared<Model>();
  other->load_state_dict(model->state_dict());
  CHECK(other->blocks->at<nn::Linear>(1)->weight.to_vector<float>() ==
        model->blocks->at<nn::Linear>(1)->weight.to_vector<float>());
  // apply visits every entry.
  int linears = 0;
  model->apply([&](nn::Module& m) { linears += m.name() == "Linear"; });
  CHECK(linears == 5);
}

TEST_CASE("dict entries are replaced in place and bad lookups are errors", "[nn][containers]") {
  nn::ModuleDict dict({{"a", std::make_shared<nn::ReLU>()}, {"b", std::make_shared<nn::Tanh>()}});
  dict.insert("a", std::make_shared<nn::Linear>(2, 3));  // replaces, keeps the order
  CHECK(dict.keys() == std::vector<std::string>{"a", "b"});
  CHECK(dict["a"]->name() == "Linear");
  CHECK_THROWS_WITH(dict["c"], Contains("ModuleDict: no module under the key \"c\""));
  nn::ParameterDict params({{"w", zeros({2})}});
  params.insert("w", ones({3}));
  CHECK(params.size() == 1);
  CHECK(params["w"].sizes() == Shape{3});
  CHECK(params["w"].requires_grad());
  CHECK_THROWS_WITH(params["v"], Contains("no parameter under the key \"v\""));
  nn::ModuleList list;
  CHECK_THROWS_WITH(list[0], Contains("ModuleList: index 0 is out of range for 0 entries"));
  nn::ParameterList plist({zeros({3, 4})});
  // As torch prints a ParameterList of one and of two parameters.
  CHECK(plist.to_string() == "ParameterList(  (0): Parameter containing: [float32 of size 3x4])");
  plist.append(zeros({2}));
  CHECK(plist.to_string() ==
        "ParameterList(\n    (0): Parameter containing: [float32 of size 3x4]\n    (1): Parameter "
        "containing: [float32 of size 2]\n)");
  CHECK_THROWS_WITH(plist[-3], Contains("index -3 is out of range for 2 entries"));
}

TEST_CASE("a braced Sequential makes its modules in the listed order", "[nn][containers]") {
  // Sequential's header: a braced list is evaluated left to right under every compiler, so the
  // modules draw their initial weights in order, as appending them one by one does.
  manual_seed(11);
  nn::Sequential braced{nn::Linear(3, 4), nn::ReLU(), nn::Linear(4, 2)};
  manual_seed(11);
  nn::Sequential appended;
  appended.append(nn::Linear(3, 4));
  appended.append(nn::ReLU());
  appended.append(nn::Linear(4, 2));
  const auto a = braced.named_parameters(), b = appended.named_parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    CAPTURE(a[i].first);
    CHECK(a[i].first == b[i].first);
    CHECK(a[i].second.to_vector<float>() == b[i].second.to_vector<float>());
  }
}
