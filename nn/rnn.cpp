// The recurrent layers and cells (rnn.h): parameters, shape checks, and the time loop over the
// lstm_cell, gru_cell and rnn_tanh_cell / rnn_relu_cell ops (ops/rnn.h, NOTE [Recurrent
// cells]).
#include "halfgrad/nn/rnn.h"

#include <cmath>
#include <utility>

#include "halfgrad/core/factory.h"
#include "halfgrad/core/format.h"
#include "halfgrad/nn/init.h"
#include "halfgrad/ops/ops.h"

namespace hg::nn {

namespace {

std::string describe(const Tensor& t) {
  return t.defined() ? fmt::format("{}", t.sizes()) : std::string("an undefined tensor");
}

// The bias at `index` of an all_weights entry, or none without biases.
Tensor bias_at(const std::vector<Tensor>& weights, size_t index) {
  return weights.size() > index ? weights[index] : Tensor();
}

// One step of the plain RNN: the cell op of its nonlinearity.
Tensor rnn_cell(const std::string& nonlinearity, const Tensor& x, const Tensor& h,
                const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  return nonlinearity == "relu" ? rnn_relu_cell(x, h, w_ih, w_hh, b_ih, b_hh)
                                : rnn_tanh_cell(x, h, w_ih, w_hh, b_ih, b_hh);
}

void check_nonlinearity(const std::string& mode, const std::string& nonlinearity,
                        bool relu_allowed) {
  HG_CHECK(nonlinearity == "tanh" || (relu_allowed && nonlinearity == "relu"),
           "{}: expected nonlinearity {}, got \"{}\"", mode,
           relu_allowed ? "\"tanh\" or \"relu\"" : "\"tanh\" (only RNN takes another)",
           nonlinearity);
}

}  // namespace

// ---- RNNBase --------------------------------------------------------------------------------

RNNBase::RNNBase(const std::string& mode, int64_t gates, int64_t input_size_, int64_t hidden_size_,
                 RNNOptions options_)
    : input_size(input_size_),
      hidden_size(hidden_size_),
      options(std::move(options_)),
      mode_(mode) {
  HG_CHECK(input_size > 0 && hidden_size > 0,
           "{}: expected positive input_size and hidden_size, got {} and {}", mode, input_size,
           hidden_size);
  HG_CHECK(options.num_layers > 0, "{}: expected num_layers of at least 1, got {}", mode,
           options.num_layers);
  HG_CHECK(options.dropout >= 0.0 && options.dropout <= 1.0,
           "{}: expected dropout in [0, 1], got {}", mode, options.dropout);
  check_nonlinearity(mode, options.nonlinearity, mode == "RNN");
  const int64_t directions = options.bidirectional ? 2 : 1;
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    const int64_t layer_input = layer == 0 ? input_size : directions * hidden_size;
    for (int64_t direction = 0; direction < directions; ++direction) {
      const std::string suffix = fmt::format("_l{}{}", layer, direction == 1 ? "_reverse" : "");
      std::vector<Tensor> weights;
      weights.push_back(
          register_parameter("weight_ih" + suffix, empty({gates * hidden_size, layer_input})));
      weights.push_back(
          register_parameter("weight_hh" + suffix, empty({gates * hidden_size, hidden_size})));
      if (options.bias) {
        weights.push_back(register_parameter("bias_ih" + suffix, empty({gates * hidden_size})));
        weights.push_back(register_parameter("bias_hh" + suffix, empty({gates * hidden_size})));
      }
      all_weights.push_back(std::move(weights));
    }
  }
  reset_parameters();
}

void RNNBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(double(hidden_size));
  for (std::vector<Tensor>& weights : all_weights) {
    for (Tensor& w : weights) init::uniform_(w, -bound, bound);
  }
}

std::string RNNBase::extra_repr() const {
  std::string text = fmt::format("{}, {}", input_size, hidden_size);
  if (mode_ == "RNN" && options.nonlinearity != "tanh") {
    text += fmt::format(", nonlinearity='{}'", options.nonlinearity);
  }
  if (options.num_layers != 1) text += fmt::format(", num_layers={}", options.num_layers);
  if (!options.bias) text += ", bias=False";
  if (options.batch_first) text += ", batch_first=True";
  if (options.dropout != 0.0) text += fmt::format(", dropout={}", options.dropout);
  if (options.bidirectional) text += ", bidirectional=True";
  return text;
}

RNNBase::Sequence RNNBase::sequence_of(const Tensor& input) const {
  HG_CHECK(input.defined() && (input.dim() == 2 || input.dim() == 3) &&
               input.size(-1) == input_size && input.size(0) > 0 &&
               (input.dim() == 2 || input.size(1) > 0),
           "{}: expected an input of shape {} with T > 0 (or unbatched [T, {}]), got {}", mode_,
           options.batch_first ? fmt::format("[B, T, {}]", input_size)
                               : fmt::format("[T, B, {}]", input_size),
           input_size, describe(input));
  HG_CHECK(input.is_floating_point(), "{}: expected a floating input, got {}", mode_,
           input.dtype());
  if (input.dim() == 2) {
    return {.x = input.unsqueeze(1), .batched = false, .input_sizes = input.sizes()};
  }
  return {.x = options.batch_first ? input.transpose(0, 1) : input,
          .batched = true,
          .input_sizes = input.sizes()};
}

Tensor RNNBase::initial_state(const std::optional<Tensor>& given, const Sequence& sequence,
                              const char* what) const {
  const int64_t layers_directions = options.num_layers * (options.bidirectional ? 2 : 1);
  const int64_t B = sequence.x.size(1);
  if (!given) {
    return zeros({layers_directions, B, hidden_size},
                 {.dtype = sequence.x.dtype(), .device = sequence.x.device()});
  }
  const Shape expected = sequence.batched ? Shape({layers_directions, B, hidden_size})
                                          : Shape({layers_directions, hidden_size});
  HG_CHECK(given->defined() && given->sizes() == expected,
           "{}: expected {} of shape {} (num_layers * directions{}, hidden_size) for an input of "
           "shape {}, got {}",
           mode_, what, expected, sequence.batched ? ", batch" : "", sequence.input_sizes,
           describe(*given));
  return sequence.batched ? *given : given->unsqueeze(1);
}

std::pair<Tensor, std::vector<Tensor>> RNNBase::run(const Sequence& sequence,
                                                    const std::vector<Tensor>& initial,
                                                    Step step) const {
  const int64_t T = sequence.x.size(0), directions = options.bidirectional ? 2 : 1;
  std::vector<std::vector<Tensor>> finals(initial.size());
  Tensor layer_input = sequence.x;  // [T, B, in]
  for (int64_t layer = 0; layer < options.num_layers; ++layer) {
    std::vector<Tensor> direction_outputs;
    for (int64_t direction = 0; direction < directions; ++direction) {
      const int64_t index = layer * directions + direction;
      std::vector<Tensor> states;
      for (const Tensor& state : initial) states.push_back(state.select(0, index));  // [B, H]
      // The reverse direction reads the sequence backwards and writes each h at its own step.
      std::vector<Tensor> outputs(T);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t t = direction == 0 ? i : T - 1 - i;
        states = step(*this, layer_input.select(0, t), states, all_weights[index]);
        outputs[t] = states[0];
      }
      direction_outputs.push_back(stack(outputs, 0));  // [T, B, H]
      for (size_t s = 0; s < states.size(); ++s) finals[s].push_back(states[s]);
    }
    layer_input = directions == 1 ? direction_outputs[0] : cat(direction_outputs, 2);
    if (options.dropout > 0.0 && is_training() && layer + 1 < options.num_layers) {
      layer_input = dropout(layer_input, options.dropout, true);
    }
  }
  std::vector<Tensor> final_states;
  for (const std::vector<Tensor>& states : finals) {
    const Tensor stacked = stack(states, 0);  // [L * D, B, H]
    final_states.push_back(sequence.batched ? stacked : stacked.squeeze(1));
  }
  Tensor output = layer_input;  // [T, B, D H]
  if (!sequence.batched) {
    output = output.squeeze(1);
  } else if (options.batch_first) {
    output = output.transpose(0, 1);
  }
  return {output, final_states};
}

// ---- LSTM, GRU, RNN -------------------------------------------------------------------------

LSTM::LSTM(int64_t input_size_, int64_t hidden_size_, RNNOptions options_)
    : CustomForward("LSTM", 4, input_size_, hidden_size_, std::move(options_)) {}

std::tuple<Tensor, std::tuple<Tensor, Tensor>> LSTM::forward(
    const Tensor& input, const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  const Sequence sequence = sequence_of(input);
  std::optional<Tensor> h0, c0;
  if (hx) h0 = std::get<0>(*hx), c0 = std::get<1>(*hx);
  const std::vector<Tensor> initial = {initial_state(h0, sequence, "h0"),
                                       initial_state(c0, sequence, "c0")};
  auto [output, finals] = run(sequence, initial,
                              [](const RNNBase&, const Tensor& x, const std::vector<Tensor>& states,
                                 const std::vector<Tensor>& w) {
                                auto [h, c] = lstm_cell(x, {states[0], states[1]}, w[0], w[1],
                                                        bias_at(w, 2), bias_at(w, 3));
                                return std::vector<Tensor>{h, c};
                              });
  return {output, {finals[0], finals[1]}};
}

GRU::GRU(int64_t input_size_, int64_t hidden_size_, RNNOptions options_)
    : CustomForward("GRU", 3, input_size_, hidden_size_, std::move(options_)) {}

std::tuple<Tensor, Tensor> GRU::forward(const Tensor& input, const std::optional<Tensor>& hx) {
  const Sequence sequence = sequence_of(input);
  auto [output, finals] = run(sequence, {initial_state(hx, sequence, "h0")},
                              [](const RNNBase&, const Tensor& x, const std::vector<Tensor>& states,
                                 const std::vector<Tensor>& w) {
                                return std::vector<Tensor>{gru_cell(x, states[0], w[0], w[1],
                                                                    bias_at(w, 2), bias_at(w, 3))};
                              });
  return {output, finals[0]};
}

RNN::RNN(int64_t input_size_, int64_t hidden_size_, RNNOptions options_)
    : CustomForward("RNN", 1, input_size_, hidden_size_, std::move(options_)) {}

std::tuple<Tensor, Tensor> RNN::forward(const Tensor& input, const std::optional<Tensor>& hx) {
  const Sequence sequence = sequence_of(input);
  auto [output, finals] =
      run(sequence, {initial_state(hx, sequence, "h0")},
          [](const RNNBase& self, const Tensor& x, const std::vector<Tensor>& states,
             const std::vector<Tensor>& w) {
            return std::vector<Tensor>{rnn_cell(self.options.nonlinearity, x, states[0], w[0], w[1],
                                                bias_at(w, 2), bias_at(w, 3))};
          });
  return {output, finals[0]};
}

// ---- the cells ------------------------------------------------------------------------------

RNNCellBase::RNNCellBase(const std::string& mode, int64_t gates, int64_t input_size_,
                         int64_t hidden_size_, bool bias)
    : input_size(input_size_), hidden_size(hidden_size_), mode_(mode) {
  HG_CHECK(input_size > 0 && hidden_size > 0,
           "{}: expected positive input_size and hidden_size, got {} and {}", mode, input_size,
           hidden_size);
  weight_ih = register_parameter("weight_ih", empty({gates * hidden_size, input_size}));
  weight_hh = register_parameter("weight_hh", empty({gates * hidden_size, hidden_size}));
  if (bias) {
    bias_ih = register_parameter("bias_ih", empty({gates * hidden_size}));
    bias_hh = register_parameter("bias_hh", empty({gates * hidden_size}));
  }
  reset_parameters();
}

void RNNCellBase::reset_parameters() {
  const double bound = 1.0 / std::sqrt(double(hidden_size));
  for (Tensor* w : {&weight_ih, &weight_hh, &bias_ih, &bias_hh}) {
    if (w->defined()) init::uniform_(*w, -bound, bound);
  }
}

std::string RNNCellBase::extra_repr() const {
  return fmt::format("{}, {}{}", input_size, hidden_size, bias_ih.defined() ? "" : ", bias=False");
}

void RNNCellBase::check_input(const Tensor& input) const {
  HG_CHECK(
      input.defined() && (input.dim() == 1 || input.dim() == 2) && input.size(-1) == input_size,
      "{}: expected an input of shape [B, {}] or [{}], got {}", mode_, input_size, input_size,
      describe(input));
  HG_CHECK(input.is_floating_point(), "{}: expected a floating input, got {}", mode_,
           input.dtype());
}

Tensor RNNCellBase::state_or_zeros(const std::optional<Tensor>& given, const Tensor& input,
                                   const char* what) const {
  const Shape expected =
      input.dim() == 2 ? Shape({input.size(0), hidden_size}) : Shape({hidden_size});
  if (!given) return zeros(expected, {.dtype = input.dtype(), .device = input.device()});
  HG_CHECK(given->defined() && given->sizes() == expected,
           "{}: expected {} of shape {} for an input of shape {}, got {}", mode_, what, expected,
           input.sizes(), describe(*given));
  return *given;
}

LSTMCell::LSTMCell(int64_t input_size_, int64_t hidden_size_, bool bias)
    : CustomForward("LSTMCell", 4, input_size_, hidden_size_, bias) {}

std::tuple<Tensor, Tensor> LSTMCell::forward(const Tensor& input,
                                             const std::optional<std::tuple<Tensor, Tensor>>& hx) {
  check_input(input);
  std::optional<Tensor> h, c;
  if (hx) h = std::get<0>(*hx), c = std::get<1>(*hx);
  return lstm_cell(input, {state_or_zeros(h, input, "h"), state_or_zeros(c, input, "c")}, weight_ih,
                   weight_hh, bias_ih, bias_hh);
}

GRUCell::GRUCell(int64_t input_size_, int64_t hidden_size_, bool bias)
    : CustomForward("GRUCell", 3, input_size_, hidden_size_, bias) {}

Tensor GRUCell::forward(const Tensor& input, const std::optional<Tensor>& hx) {
  check_input(input);
  return gru_cell(input, state_or_zeros(hx, input, "h"), weight_ih, weight_hh, bias_ih, bias_hh);
}

RNNCell::RNNCell(int64_t input_size_, int64_t hidden_size_, bool bias, std::string nonlinearity_)
    : CustomForward("RNNCell", 1, input_size_, hidden_size_, bias),
      nonlinearity(std::move(nonlinearity_)) {
  check_nonlinearity("RNNCell", nonlinearity, true);
}

std::string RNNCell::extra_repr() const {
  return RNNCellBase::extra_repr() +
         (nonlinearity != "tanh" ? fmt::format(", nonlinearity='{}'", nonlinearity) : "");
}

Tensor RNNCell::forward(const Tensor& input, const std::optional<Tensor>& hx) {
  check_input(input);
  return rnn_cell(nonlinearity, input, state_or_zeros(hx, input, "h"), weight_ih, weight_hh,
                  bias_ih, bias_hh);
}

}  // namespace hg::nn
