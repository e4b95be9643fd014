// nn::LSTM, GRU, RNN and their cells against torch.nn's: twin/rnn.py built each case with torch
// 1.13 in float64 (two layers, batch_first, bidirectional, without bias, given and absent
// initial states, unbatched input) and printed its parameters, inputs, results and the
// gradients of a weighted sum of the results; the same parameters load here by torch's keys.
// Then dropout between layers, autocast, shape errors and gradcheck.
#include <catch2/catch.hpp>

#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "../test_util.h"
#include "halfgrad/autograd/gradcheck.h"
#include "halfgrad/halfgrad.h"

using namespace hg;
using Catch::Contains;

namespace {

struct TwinCase {
  std::vector<std::string> keys;  // the state dict's keys in torch's registration order
  std::map<std::string, Tensor> tensors;
};

// case name -> its keys and tensors, from the twin's output.
const std::map<std::string, TwinCase>& twin() {
  static const std::map<std::string, TwinCase> cases = [] {
    std::ifstream file(std::string(HG_TESTS_SOURCE_DIR) + "/nn/twin/rnn.txt");
    REQUIRE(file.good());
    std::map<std::string, TwinCase> parsed;
    std::string line, current;
    while (std::getline(file, line)) {
      std::istringstream in(line);
      std::string kind, key;
      in >> kind;
      if (kind == "case") {
        in >> current;
        continue;
      }
      if (kind == "keys") {
        for (std::string word; in >> word;) parsed[current].keys.push_back(word);
        continue;
      }
      std::string shape_text;
      in >> key >> shape_text;
      Shape shape;
      std::istringstream dims(shape_text);
      for (std::string d; std::getline(dims, d, ',');) shape.push_back(std::stoll(d));
      std::vector<double> values;
      for (std::string word; in >> word;) values.push_back(std::stod(word));
      parsed[current].tensors[key] = tensor(values, shape, kFloat64);
    }
    return parsed;
  }();
  return cases;
}

void check_close(const Tensor& got, const Tensor& want, double relative = 1e-10) {
  REQUIRE(got.defined());
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    CAPTURE(i);
    CHECK(g[i] == Approx(w[i]).epsilon(relative).margin(1e-13));
  }
}

using Inputs = std::map<std::string, Tensor>;
using Results = std::map<std::string, Tensor>;

// Loads the case's parameters into module (float64) by torch's keys, runs call on the case's
// inputs, and compares the results and the gradients of the weighted sum with torch's.
void check_case(const std::string& name, nn::Module& module,
                const std::function<Results(const Inputs&)>& call) {
  INFO("case " << name);
  const TwinCase& data = twin().at(name);
  module.to(kFloat64);
  std::vector<std::string> keys;
  for (const auto& [key, value] : module.named_parameters()) keys.push_back(key);
  CHECK(keys == data.keys);
  nn::StateDict state;
  for (const std::string& key : data.keys) state[key] = data.tensors.at(key);
  module.load_state_dict(state);  // strict: torch's keys, one to one

  Inputs inputs;
  for (const char* key : {"input", "h0", "c0"}) {
    if (data.tensors.count(key)) inputs[key] = data.tensors.at(key).clone().requires_grad_();
  }
  const Results results = call(inputs);
  Tensor loss;
  int64_t weighted = 0;
  for (const auto& [key, value] : results) {
    INFO("result " << key);
    check_close(value, data.tensors.at(key));
    const Tensor term = sum(mul(value, data.tensors.at("weight." + key)));
    loss = loss.defined() ? add(loss, term) : term;
    ++weighted;
  }
  int64_t expected_results = 0;
  for (const auto& [key, value] : data.tensors) expected_results += key.rfind("weight.", 0) == 0;
  CHECK(weighted == expected_results);
  loss.backward();
  for (const auto& [key, value] : inputs) {
    INFO("gradient of " << key);
    check_close(value.grad(), data.tensors.at("grad." + key));
  }
  for (const auto& [key, value] : module.named_parameters()) {
    INFO("gradient of " << key);
    check_close(value.grad(), data.tensors.at("grad." + key));
  }
}

std::optional<Tensor> maybe(const Inputs& inputs, const char* key) {
  return inputs.count(key) ? std::optional<Tensor>(inputs.at(key)) : std::nullopt;
}

std::optional<std::tuple<Tensor, Tensor>> maybe_pair(const Inputs& inputs) {
  if (!inputs.count("h0")) return std::nullopt;
  return std::tuple<Tensor, Tensor>{inputs.at("h0"), inputs.at("c0")};
}

void check_lstm(const std::string& name, nn::LSTM& lstm) {
  check_case(name, lstm, [&](const Inputs& in) {
    auto [output, state] = lstm.forward(in.at("input"), maybe_pair(in));
    return Results{{"output", output}, {"h_n", std::get<0>(state)}, {"c_n", std::get<1>(state)}};
  });
}

template <class Layer>
void check_single_state(const std::string& name, Layer& layer) {
  check_case(name, layer, [&](const Inputs& in) {
    auto [output, h_n] = layer.forward(in.at("input"), maybe(in, "h0"));
    return Results{{"output", output}, {"h_n", h_n}};
  });
}

// Values of a fixed pattern, seeded.
Tensor pattern(const Shape& shape, uint64_t seed, DType dtype = kFloat32) {
  Generator generator(seed);
  return sub(mul(rand(shape, {.dtype = dtype}, &generator), 2.0), 1.0);
}

double max_abs_difference(const Tensor& a, const Tensor& b) {
  return max(abs(sub(a.to(kFloat64), b.to(kFloat64)))).item<double>();
}

}  // namespace

TEST_CASE("LSTM matches torch's", "[nn][rnn]") {
  nn::LSTM two_layers(3, 4, {.num_layers = 2});
  check_lstm("lstm_two_layers", two_layers);
  nn::LSTM batch_first(3, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  check_lstm("lstm_batch_first_bidirectional", batch_first);
  nn::LSTM unbatched(3, 4, {.bias = false, .bidirectional = true});
  check_lstm("lstm_unbatched_bidirectional_no_bias", unbatched);
}

TEST_CASE("GRU matches torch's", "[nn][rnn]") {
  nn::GRU two_layers(3, 4, {.num_layers = 2});
  check_single_state("gru_two_layers", two_layers);
  nn::GRU batch_first(3, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  check_single_state("gru_batch_first_bidirectional", batch_first);
  nn::GRU unbatched(3, 4);
  check_single_state("gru_unbatched", unbatched);
}

TEST_CASE("RNN matches torch's", "[nn][rnn]") {
  nn::RNN relu(3, 4, {.num_layers = 2, .bidirectional = true, .nonlinearity = "relu"});
  check_single_state("rnn_relu_bidirectional", relu);
  nn::RNN tanh_layer(3, 4, {.batch_first = true});
  check_single_state("rnn_tanh_batch_first", tanh_layer);
}

TEST_CASE("LSTMCell GRUCell and RNNCell match torch's", "[nn][rnn]") {
  for (const char* name : {"lstm_cell", "lstm_cell_unbatched"}) {
    nn::LSTMCell cell(3, 4);
    check_case(name, cell, [&](const Inputs& in) {
      auto [h, c] = cell.forward(in.at("input"), maybe_pair(in));
      return Results{{"h", h}, {"c", c}};
    });
  }
  nn::GRUCell gru(3, 4);
  check_case("gru_cell", gru, [&](const Inputs& in) {
    return Results{{"h", gru.forward(in.at("input"), maybe(in, "h0"))}};
  });
  nn::GRUCell gru_no_bias(3, 4, false);
  check_case("gru_cell_unbatched_no_bias", gru_no_bias, [&](const Inputs& in) {
    return Results{{"h", gru_no_bias.forward(in.at("input"), maybe(in, "h0"))}};
  });
  nn::RNNCell rnn(3, 4, true, "relu");
  check_case("rnn_cell_relu", rnn, [&](const Inputs& in) {
    return Results{{"h", rnn.forward(in.at("input"), maybe(in, "h0"))}};
  });
}

TEST_CASE("recurrent layers start as torch's reset_parameters", "[nn][rnn]") {
  manual_seed(3);
  nn::GRU gru(5, 16, {.num_layers = 2, .bidirectional = true});
  const std::map<std::string, Shape> shapes = {
      {"weight_ih_l0", {48, 5}},  {"weight_hh_l0", {48, 16}},         {"bias_ih_l1_reverse", {48}},
      {"weight_ih_l1", {48, 32}}, {"weight_ih_l1_reverse", {48, 32}}, {"bias_hh_l0", {48}}};
  const nn::StateDict state = gru.state_dict();
  CHECK(state.size() == 16);
  for (const auto& [key, shape] : shapes) {
    CAPTURE(key);
    CHECK(state.at(key).sizes() == shape);
  }
  // U(-1/4, 1/4) for hidden_size 16, on every parameter.
  for (const auto& [key, value] : state) {
    CAPTURE(key);
    CHECK(value.dtype() == kFloat32);
    CHECK(max(value).item<double>() <= 0.25);
    CHECK(min(value).item<double>() >= -0.25);
    CHECK(max(abs(value)).item<double>() > 0.2);  // spread over the range, not zeros
  }
  CHECK(gru.all_weights.size() == 4);
  CHECK(gru.all_weights[3][0].data_ptr() == state.at("weight_ih_l1_reverse").data_ptr());
  nn::LSTMCell cell(5, 16, false);
  CHECK(cell.state_dict().size() == 2);
  CHECK(cell.weight_ih.sizes() == Shape({64, 5}));
  CHECK(nn::GRU(2, 3, {.num_layers = 2, .dropout = 0.5}).to_string() ==
        "GRU(2, 3, num_layers=2, dropout=0.5)");
}

TEST_CASE("LSTM dropout acts between layers and only while training", "[nn][rnn]") {
  nn::LSTM plain(3, 4, {.num_layers = 2});
  nn::LSTM dropping(3, 4, {.num_layers = 2, .dropout = 0.5});
  dropping.load_state_dict(plain.state_dict());
  const Tensor x = pattern({5, 2, 3}, 11);
  auto [plain_output, plain_state] = plain.forward(x);

  dropping.eval();
  auto [eval_output, eval_state] = dropping.forward(x);
  CHECK(testing::bit_identical(eval_output, plain_output));
  CHECK(testing::bit_identical(std::get<0>(eval_state), std::get<0>(plain_state)));

  dropping.train();
  manual_seed(5);
  auto [train_output, train_state] = dropping.forward(x);
  // The second layer reads a dropped input, so its output differs.
  CHECK(max_abs_difference(train_output, plain_output) > 1e-3);
  CHECK(max_abs_difference(std::get<0>(train_state).select(0, 1),
                           std::get<0>(plain_state).select(0, 1)) > 1e-3);
  // The first layer's states are taken before the dropout, and the last layer's output is not
  // dropped: no element is zeroed.
  CHECK(testing::bit_identical(std::get<0>(train_state).select(0, 0),
                               std::get<0>(plain_state).select(0, 0)));
  CHECK(testing::bit_identical(std::get<1>(train_state).select(0, 0),
                               std::get<1>(plain_state).select(0, 0)));
  CHECK_FALSE(any(eq(train_output, 0.0)).item<bool>());

  // One layer: nothing to drop between.
  nn::LSTM single(3, 4, {.dropout = 0.5});
  nn::LSTM single_plain(3, 4);
  single_plain.load_state_dict(single.state_dict());
  CHECK(
      testing::bit_identical(std::get<0>(single.forward(x)), std::get<0>(single_plain.forward(x))));
}

TEST_CASE("recurrent layers under bfloat16 autocast run and return bfloat16", "[nn][rnn][amp]") {
  manual_seed(8);
  nn::LSTM lstm(6, 8, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  nn::GRU gru(6, 8, {.num_layers = 2});
  nn::RNN rnn(6, 8, {.nonlinearity = "relu"});
  const Tensor x = pattern({3, 7, 6}, 21);

  // Outside autocast float32 stays float32.
  auto [lstm_output32, lstm_state32] = lstm.forward(x);
  CHECK(lstm_output32.dtype() == kFloat32);
  CHECK(std::get<1>(lstm_state32).dtype() == kFloat32);

  Tensor lstm_output, lstm_h, lstm_c, gru_output, gru_h, rnn_output;
  {
    amp::Autocast autocast(kCPU, kBFloat16);
    amp::AutocastTrace trace;
    std::tie(lstm_output, std::ignore) = lstm.forward(x);
    auto [output, state] = lstm.forward(x);
    lstm_h = std::get<0>(state);
    lstm_c = std::get<1>(state);
    std::tie(gru_output, gru_h) = gru.forward(x.transpose(0, 1));
    rnn_output = std::get<0>(rnn.forward(x.transpose(0, 1)));
    std::set<OpId> cells;
    for (const auto& entry : trace.entries()) {
      if (entry.op == OpId::lstm_cell || entry.op == OpId::gru_cell ||
          entry.op == OpId::rnn_relu_cell) {
        cells.insert(entry.op);
        CHECK(entry.policy == CastPolicy::LowerPrecision);
      }
    }
    CHECK(cells.size() == 3);
  }
  for (const Tensor& t : {lstm_output, lstm_h, lstm_c, gru_output, gru_h, rnn_output}) {
    CHECK(t.dtype() == kBFloat16);
  }
  // The gradient reaches the float32 parameters through the casts.
  sum(lstm_output.to(kFloat32)).backward();
  CHECK(lstm.all_weights[0][0].grad().dtype() == kFloat32);

  // Against the same layers in float64: bfloat16's 8 significant bits, over 7 steps and 2 layers.
  lstm.to(kFloat64);
  gru.to(kFloat64);
  auto [lstm_output64, lstm_state64] = lstm.forward(x.to(kFloat64));
  auto [gru_output64, gru_h64] = gru.forward(x.to(kFloat64).transpose(0, 1));
  const auto close = [](const Tensor& got, const Tensor& want) {
    const double error = max_abs_difference(got, want);
    CAPTURE(error);
    CHECK(error < 1.5e-2);
    CHECK(error > 0.0);  // it did run in bfloat16
  };
  close(lstm_output, lstm_output64);
  close(lstm_h, std::get<0>(lstm_state64));
  close(lstm_c, std::get<1>(lstm_state64));
  close(gru_output, gru_output64);
  close(gru_h, gru_h64);
}

TEST_CASE("recurrent layers refuse wrong shapes with clear errors", "[nn][rnn]") {
  nn::LSTM lstm(3, 4, {.num_layers = 2});
  const Tensor x = pattern({5, 2, 3}, 1);
  CHECK_THROWS_WITH(
      lstm.forward(pattern({5, 2, 2}, 1)),
      Contains("LSTM: expected an input of shape [T, B, 3]") && Contains("[5, 2, 2]"));
  CHECK_THROWS_WITH(lstm.forward(pattern({5}, 1)), Contains("got [5]"));
  const Tensor h = zeros({2, 3, 4}), c = zeros({2, 2, 4});
  CHECK_THROWS_WITH(lstm.forward(x, std::tuple<Tensor, Tensor>{h, c}),
                    Contains("LSTM: expected h0 of shape [2, 2, 4]") && Contains("got [2, 3, 4]"));
  CHECK_THROWS_WITH(lstm.forward(x, std::tuple<Tensor, Tensor>{c, zeros({1, 2, 4})}),
                    Contains("LSTM: expected c0 of shape [2, 2, 4]"));
  nn::GRU gru(3, 4, {.batch_first = true});
  CHECK_THROWS_WITH(gru.forward(pattern({2, 5, 3}, 1), zeros({1, 5, 4})),
                    Contains("GRU: expected h0 of shape [1, 2, 4]") && Contains("[2, 5, 3]"));
  // Unbatched input wants unbatched states.
  CHECK_THROWS_WITH(gru.forward(pattern({5, 3}, 1), zeros({1, 1, 4})),
                    Contains("expected h0 of shape [1, 4]"));
  nn::GRUCell cell(3, 4);
  CHECK_THROWS_WITH(cell.forward(pattern({2, 4}, 1)),
                    Contains("GRUCell: expected an input of shape [B, 3] or [3], got [2, 4]"));
  CHECK_THROWS_WITH(cell.forward(pattern({2, 3}, 1), zeros({3, 4})),
                    Contains("GRUCell: expected h of shape [2, 4]"));
  CHECK_THROWS_WITH(nn::LSTM(3, 4, {.nonlinearity = "relu"}),
                    Contains("LSTM: expected nonlinearity"));
  CHECK_THROWS_WITH(nn::RNN(3, 4, {.nonlinearity = "gelu"}), Contains("\"tanh\" or \"relu\""));
  CHECK_THROWS_WITH(nn::GRU(3, 0), Contains("expected positive input_size and hidden_size"));
  // The ops name themselves.
  CHECK_THROWS_WITH(
      lstm_cell(zeros({2, 3}), {zeros({2, 4}), zeros({2, 4})}, zeros({16, 2}), zeros({16, 4})),
      Contains("lstm_cell: expected w_ih of shape [16, 3]"));
  CHECK_THROWS_WITH(gru_cell(zeros({2, 3}), zeros({2, 4}), zeros({12, 3}), zeros({16, 4})),
                    Contains("gru_cell: expected w_hh of shape [3 H, H]"));
  CHECK_THROWS_WITH(rnn_tanh_cell(zeros({2, 3}), zeros({2, 5}), zeros({4, 3}), zeros({4, 4})),
                    Contains("rnn_tanh_cell: expected a hidden state of shape [2, 4] for an input "
                             "of shape [2, 3], got [2, 5]"));
  // Nothing was changed by the refused calls.
  CHECK(all(eq(h, 0.0)).item<bool>());
}

TEST_CASE("recurrent layers pass gradcheck in float64", "[nn][rnn][gradcheck]") {
  manual_seed(4);
  nn::LSTM lstm(2, 3, {.num_layers = 2, .bidirectional = true});
  lstm.to(kFloat64);
  std::vector<Tensor> inputs = {pattern({3, 2, 2}, 1, kFloat64).requires_grad_(),
                                pattern({4, 2, 3}, 2, kFloat64).requires_grad_(),
                                pattern({4, 2, 3}, 3, kFloat64).requires_grad_()};
  for (const Tensor& p : lstm.parameters()) inputs.push_back(p);
  CHECK(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        auto [output, state] = lstm.forward(in[0], std::tuple<Tensor, Tensor>{in[1], in[2]});
        return cat({output.flatten(), std::get<0>(state).flatten(), std::get<1>(state).flatten()});
      },
      inputs));

  nn::GRU gru(2, 3, {.num_layers = 2, .batch_first = true});
  gru.to(kFloat64);
  inputs = {pattern({2, 3, 2}, 4, kFloat64).requires_grad_(),
            pattern({2, 2, 3}, 5, kFloat64).requires_grad_()};
  for (const Tensor& p : gru.parameters()) inputs.push_back(p);
  CHECK(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        auto [output, h_n] = gru.forward(in[0], in[1]);
        return cat({output.flatten(), h_n.flatten()});
      },
      inputs));
}
