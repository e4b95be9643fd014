// The recurrent cells lstm_cell, gru_cell, rnn_tanh_cell and rnn_relu_cell (ops/rnn.cpp): one
// time step of torch's LSTM, GRU and RNN, torch's gate order and formulas. nn::LSTM, nn::GRU and
// nn::RNN (nn/rnn.h) run them over time.
//
//   B batch, I input features, H hidden features.
#pragma once

#include <tuple>

#include "halfgrad/core/tensor.h"

namespace hg {

// One LSTM step: x [B, I] (or unbatched [I]), hx = (h, c), each [B, H] ([H]); w_ih [4H, I],
// w_hh [4H, H], b_ih and b_hh [4H] or undefined. Gates i, f, g, o are the four row blocks of
// x w_ih^T + b_ih + h w_hh^T + b_hh:
//   c' = sigmoid(f) c + sigmoid(i) tanh(g),  h' = sigmoid(o) tanh(c').
// Returns (h', c'). Under autocast every floating input is cast to the autocast dtype once, and
// the step computes and returns in it (torch's lower-precision list has lstm_cell).
std::tuple<Tensor, Tensor> lstm_cell(const Tensor& x, const std::tuple<Tensor, Tensor>& hx,
                                     const Tensor& w_ih, const Tensor& w_hh,
                                     const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());

// One GRU step: x [B, I] (or [I]), h [B, H] ([H]); w_ih [3H, I], w_hh [3H, H], b_ih and b_hh
// [3H] or undefined. With the row blocks r, z, n of the two projections,
//   r = sigmoid(x W_ir^T + b_ir + h W_hr^T + b_hr),  z likewise,
//   n = tanh(x W_in^T + b_in + r (h W_hn^T + b_hn)),  h' = (1 - z) n + z h.
// Autocast as lstm_cell.
Tensor gru_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());

// One step of the plain RNN (torch's RNNCell): x [B, I] (or [I]), h [B, H] ([H]); w_ih [H, I],
// w_hh [H, H], b_ih and b_hh [H] or undefined: h' = tanh (relu) of x w_ih^T + b_ih + h w_hh^T +
// b_hh. Autocast as lstm_cell.
Tensor rnn_tanh_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());
Tensor rnn_relu_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih = Tensor(), const Tensor& b_hh = Tensor());

}  // namespace hg
