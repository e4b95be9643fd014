// The recurrent layers: LSTM, GRU and RNN (multi-layer, optionally bidirectional), and the
// single-step LSTMCell, GRUCell and RNNCell, as torch.nn's: the same options, parameter names,
// shapes, gate order and initialisation, so state dicts map one to one.
//
//   T sequence length, B batch, I input_size, H hidden_size, L num_layers, D directions (2 when
//   bidirectional, else 1).
//
//   nn::LSTM lstm(16, 32, {.num_layers = 2, .batch_first = true});
//   auto [output, state] = lstm(x);           // x [B, T, 16] -> output [B, T, 32]
//   auto [h_n, c_n] = state;                  // each [2, B, 32]
//
// Under autocast the cells (the lstm_cell and gru_cell ops, and RNN's linear) run in the
// autocast dtype, so output and states come out in it, as torch's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "halfgrad/nn/module.h"

namespace hg::nn {

struct RNNOptions {
  int64_t num_layers = 1;
  bool bias = true;  // false: no bias_ih_l*, bias_hh_l* parameters
  // Input and output [B, T, *] instead of [T, B, *]; the states stay [L * D, B, H], as torch's.
  bool batch_first = false;
  // Dropout on the outputs of every layer but the last, while training.
  double dropout = 0.0;
  bool bidirectional = false;
  // nn::RNN's activation, "tanh" or "relu"; LSTM and GRU have their own and take only "tanh".
  std::string nonlinearity = "tanh";
};

// What LSTM, GRU and RNN share (torch's RNNBase): the parameters and the time loop.
//
// Parameters, registered per layer k and direction in torch's order: weight_ih_l{k} [G H, I]
// (layer 0) or [G H, D H], weight_hh_l{k} [G H, H], bias_ih_l{k} and bias_hh_l{k} [G H], the
// reverse direction's with the suffix _reverse; G = 4 (LSTM: gates i, f, g, o), 3 (GRU: r, z,
// n) or 1 (RNN). Every one starts ~ U(-1/sqrt(H), 1/sqrt(H)).
class RNNBase : public Module {
 public:
  std::string extra_repr() const override;
  // Draws every parameter again from U(-1/sqrt(H), 1/sqrt(H)).
  void reset_parameters();

  int64_t input_size, hidden_size;
  RNNOptions options;
  // torch's all_weights: per layer and direction (index k D + d), {weight_ih, weight_hh} and,
  // with bias, {bias_ih, bias_hh}. The same tensors as the registered parameters.
  std::vector<std::vector<Tensor>> all_weights;

 protected:
  RNNBase(const std::string& mode, int64_t gates, int64_t input_size, int64_t hidden_size,
          RNNOptions options);

  // One input's layout. x is [T, B, I] whatever the caller gave.
  struct Sequence {
    Tensor x;
    bool batched = true;
    Shape input_sizes = {};  // as given, for messages
  };
  Sequence sequence_of(const Tensor& input) const;
  // The initial state called `what` as [L * D, B, H]: the given one (checked against the input's
  // batch; [L * D, H] for an unbatched input) or zeros of x's dtype and device.
  Tensor initial_state(const std::optional<Tensor>& given, const Sequence& sequence,
                       const char* what) const;

  // One step of one direction of one layer: x_t [B, in] and the states, each [B, H] (the first
  // is h, which is also the step's output), with that layer-direction's all_weights entry;
  // returns the next states.
  using Step = std::vector<Tensor> (*)(const RNNBase& self, const Tensor& x,
                                       const std::vector<Tensor>& states,
                                       const std::vector<Tensor>& weights);
  // Runs every layer and direction over time. initial: each state [L * D, B, H]. Returns the
  // output in the caller's layout and each final state [L * D, B, H] ([L * D, H] unbatched).
  std::pair<Tensor, std::vector<Tensor>> run(const Sequence& sequence,
                                             const std::vector<Tensor>& initial, Step step) const;

 private:
  std::string mode_;
};

// NOTE [CustomForward hides Module's forward] The forward a CustomForward module declares
// (LSTM's forward(input, hx) -> (output, (h_n, c_n))) hides Module's virtual forward(const
// Tensor&), which CustomForward overrides for calls through a Module& or nn::Sequential (NOTE
// [Module forward signature]). The hiding is the design: `lstm.forward(x)` must call LSTM's own
// forward and return what torch's returns. A `using` of the base's forward would make that call
// ambiguous (both take one tensor; the other parameters have defaults), and an override in LSTM
// cannot return a tuple. So each such declaration turns clang's -Woverloaded-virtual (part of
// its -Wall) off around itself, keeping a user's -Werror build clean; clang honours the GCC
// spelling of the pragma. A user's own CustomForward module gets the same warning from clang
// and can silence it the same way.

// torch.nn.LSTM. forward(input, (h0, c0)) -> (output, (h_n, c_n)):
//   input [T, B, I] ([B, T, I] with batch_first) or unbatched [T, I];
//   h0, c0 [L * D, B, H] ([L * D, H] unbatched), zeros when absent;
//   output [T, B, D H] ([B, T, D H]; [T, D H] unbatched), the last layer's h at every step, the
//   two directions concatenated; h_n, c_n [L * D, B, H], each layer-direction's last state.
class LSTM : public CustomForward<LSTM, RNNBase> {
 public:
  LSTM(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
  std::string name() const override { return "LSTM"; }
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  std::tuple<Tensor, std::tuple<Tensor, Tensor>> forward(
      const Tensor& input, const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt);
#pragma GCC diagnostic pop
};

// torch.nn.GRU, with n = tanh(W_in x + b_in + r (W_hn h + b_hn)). forward(input, h0) ->
// (output, h_n), shapes as LSTM's.
class GRU : public CustomForward<GRU, RNNBase> {
 public:
  GRU(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  std::string name() const override { return "GRU"; }
  std::tuple<Tensor, Tensor> forward(const Tensor& input,
                                     const std::optional<Tensor>& hx = std::nullopt);
#pragma GCC diagnostic pop
};

// torch.nn.RNN (Elman): h' = act(W_ih x + b_ih + W_hh h + b_hh), act options.nonlinearity.
// forward(input, h0) -> (output, h_n), shapes as LSTM's.
class RNN : public CustomForward<RNN, RNNBase> {
 public:
  RNN(int64_t input_size, int64_t hidden_size, RNNOptions options = {});
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  std::string name() const override { return "RNN"; }
  std::tuple<Tensor, Tensor> forward(const Tensor& input,
                                     const std::optional<Tensor>& hx = std::nullopt);
#pragma GCC diagnostic pop
};

// What the cells share (torch's RNNCellBase): weight_ih [G H, I], weight_hh [G H, H], bias_ih
// and bias_hh [G H] (when bias), each ~ U(-1/sqrt(H), 1/sqrt(H)).
class RNNCellBase : public Module {
 public:
  std::string extra_repr() const override;
  void reset_parameters();

  int64_t input_size, hidden_size;
  Tensor weight_ih, weight_hh, bias_ih, bias_hh;  // biases undefined without bias

 protected:
  RNNCellBase(const std::string& mode, int64_t gates, int64_t input_size, int64_t hidden_size,
              bool bias);
  // input [B, I] or [I], checked; the state called `what` checked against it ([B, H] or [H]),
  // or zeros of input's dtype and device when absent.
  void check_input(const Tensor& input) const;
  Tensor state_or_zeros(const std::optional<Tensor>& given, const Tensor& input,
                        const char* what) const;

 private:
  std::string mode_;
};

// torch.nn.LSTMCell: forward(input, (h, c)) -> (h', c'); input [B, I] or [I], states [B, H] or
// [H], zeros when absent.
class LSTMCell : public CustomForward<LSTMCell, RNNCellBase> {
 public:
  LSTMCell(int64_t input_size, int64_t hidden_size, bool bias = true);
  std::string name() const override { return "LSTMCell"; }
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  std::tuple<Tensor, Tensor> forward(
      const Tensor& input, const std::optional<std::tuple<Tensor, Tensor>>& hx = std::nullopt);
#pragma GCC diagnostic pop
};

// torch.nn.GRUCell: forward(input, h) -> h'.
class GRUCell : public CustomForward<GRUCell, RNNCellBase> {
 public:
  GRUCell(int64_t input_size, int64_t hidden_size, bool bias = true);
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  std::string name() const override { return "GRUCell"; }
  Tensor forward(const Tensor& input, const std::optional<Tensor>& hx = std::nullopt);
#pragma GCC diagnostic pop
};

// torch.nn.RNNCell: forward(input, h) -> act(W_ih x + b_ih + W_hh h + b_hh); nonlinearity
// "tanh" or "relu".
class RNNCell : public CustomForward<RNNCell, RNNCellBase> {
 public:
  RNNCell(int64_t input_size, int64_t hidden_size, bool bias = true,
          std::string nonlinearity = "tanh");
  std::string name() const override { return "RNNCell"; }
#pragma GCC diagnostic push
// NOTE [CustomForward hides Module's forward]: clang's -Woverloaded-virtual is off here.
#pragma GCC diagnostic ignored "-Woverloaded-virtual"
  std::string extra_repr() const override;
  Tensor forward(const Tensor& input, const std::optional<Tensor>& hx = std::nullopt);
#pragma GCC diagnostic pop

  std::string nonlinearity;
};

}  // namespace hg::nn
