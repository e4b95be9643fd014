// nn::TransformerEncoderLayer against torch.nn.TransformerEncoderLayer: twin/
// transformer_encoder_layer.py made two layers with torch 1.13 (post-norm ReLU with [T, B, C]
// inputs, pre-norm GELU with batch_first) in float64 and printed their state dicts, an input,
// the eval-mode output and the gradient of the output's sum; the same state dict loads here.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

// case name -> key -> tensor, from the twin's output.
std::map<std::string, std::map<std::string, Tensor>> twin() {
  std::ifstream file(std::string(HG_TESTS_SOURCE_DIR) + "/nn/twin/transformer_encoder_layer.txt");
  REQUIRE(file.good());
  std::map<std::string, std::map<std::string, Tensor>> cases;
  std::string line, current;
  while (std::getline(file, line)) {
    std::istringstream in(line);
    std::string kind, key, shape_text;
    in >> kind >> key;
    if (kind == "case") {
      current = key;
      continue;
    }
    in >> shape_text;
    Shape shape;
    std::istringstream dims(shape_text);
    for (std::string d; std::getline(dims, d, ',');) shape.push_back(std::stoll(d));
    std::vector<double> values;
    for (std::string word; in >> word;) values.push_back(std::stod(word));
    cases[current][key] = tensor(values, shape, kFloat64);
  }
  return cases;
}

void check_close(const Tensor& got, const Tensor& want) {
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(g[i] == Approx(w[i]).epsilon(1e-9).margin(1e-12));
  }
}

void run_case(const std::map<std::string, Tensor>& data,
              nn::TransformerEncoderLayerOptions options) {
  nn::TransformerEncoderLayer layer(8, 2, options);
  layer.to(kFloat64);
  nn::StateDict state;
  for (const auto& [key, value] : data) {
    if (key != "input" && key != "output" && key != "input_grad") state[key] = value;
  }
  layer.load_state_dict(state);  // strict: torch's keys, one to one
  layer.eval();
  const Tensor x = data.at("input").clone().requires_grad_();
  const Tensor y = layer(x);
  check_close(y, data.at("output"));
  sum(y).backward();
  check_close(x.grad(), data.at("input_grad"));
}

}  // namespace

TEST_CASE("TransformerEncoderLayer matches torch's, post-norm and pre-norm", "[nn][transformer]") {
  const auto cases = twin();
  run_case(cases.at("post_norm_relu"), {.dim_feedforward = 16});
  run_case(cases.at("pre_norm_gelu_batch_first"),
           {.dim_feedforward = 16, .activation = "gelu", .batch_first = true, .norm_first = true});
}

TEST_CASE("TransformerEncoderLayer trains with dropout and refuses bad arguments",
          "[nn][transformer]") {
  manual_seed(3);
  nn::TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .batch_first = true});
  const Tensor x = randn({2, 5, 8});
  const Tensor a = layer(x), b = layer(x);
  CHECK(a.sizes() == Shape{2, 5, 8});
  CHECK_FALSE(a.to_vector<float>() == b.to_vector<float>());  // dropout while training
  layer.eval();
  CHECK(layer(x).to_vector<float>() == layer(x).to_vector<float>());
  CHECK_THROWS_WITH(nn::TransformerEncoderLayer(8, 2, {.activation = "tanh"}),
                    Contains("expected activation \"relu\" or \"gelu\", got \"tanh\""));
  CHECK_THROWS_WITH(layer(randn({5, 8})), Contains("expected a 3-D input ([B, T, C])"));
}
