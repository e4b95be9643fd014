// lstm_cell, gru_cell, rnn_tanh_cell and rnn_relu_cell: composites of linear and the elementwise
// ops, so autograd records
// their inner ops and they need no backward of their own; they autocast once, at the top.
//
//   B batch, I input features, H hidden features, G gates (4 for the LSTM, 3 for the GRU, 1 for
//   the plain RNN).
//
// NOTE [Recurrent cells] A recurrent layer is a time loop over one op per step (nn/rnn.cpp),
// and that op is the cell, not its matrix products, for autocast's sake: torch lists the cells
// (and on the CPU the whole layer) as lower precision, so the state that comes out of a step is
// already in the autocast dtype and the next step reads it without a cast, and the pointwise
// gate arithmetic runs in that dtype too, as torch's does. Were only the products listed, each
// step would return the dtype of its gate arithmetic, float32 states would be cast again at
// every step, and the results would not come out in the autocast dtype. Each step projects its
// own input (rather than one product over all time steps up front) so that the cell is the
// whole step, the same on both backends and under gradcheck; the float32 weights are cast once
// per autocast region by the weight-cast cache, not once per step.
#include "halfgrad/ops/rnn.h"

#include <string>

#include "halfgrad/core/format.h"
#include "halfgrad/ops/dispatch.h"
#include "halfgrad/ops/ops.h"

namespace hg {

namespace {

using ops::dispatch;
using ops::OpContext;

std::string describe(const Tensor& t) {
  return t.defined() ? fmt::format("{}", t.sizes()) : std::string("an undefined tensor");
}

// The shapes of one step: x [B, I] or [I], every state [B, H] or [H], w_ih [G H, I],
// w_hh [G H, H], the biases [G H] or undefined. Returns H.
int64_t check_cell(OpId id, int64_t gates, const Tensor& x, std::initializer_list<Tensor> states,
                   const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
  const auto name = op_name(id);
  HG_CHECK(x.defined() && (x.dim() == 1 || x.dim() == 2),
           "{}: expected an input of shape [B, I] or [I], got {}", name, describe(x));
  HG_CHECK(x.is_floating_point(), "{}: expected a floating input, got {}", name, x.dtype());
  HG_CHECK(w_hh.defined() && w_hh.dim() == 2 && w_hh.size(0) == gates * w_hh.size(1),
           "{}: expected w_hh of shape [{} H, H], got {}", name, gates, describe(w_hh));
  const int64_t H = w_hh.size(1), I = x.size(-1);
  HG_CHECK(w_ih.defined() && w_ih.sizes() == Shape({gates * H, I}),
           "{}: expected w_ih of shape [{}, {}] ({} H by the input's {} features), got {}", name,
           gates * H, I, gates, I, describe(w_ih));
  for (const Tensor& b : {b_ih, b_hh}) {
    HG_CHECK(!b.defined() || b.sizes() == Shape({gates * H}),
             "{}: expected biases of shape [{}] or none, got {}", name, gates * H, b.sizes());
  }
  const Shape state_shape = x.dim() == 2 ? Shape({x.size(0), H}) : Shape({H});
  for (const Tensor& state : states) {
    HG_CHECK(state.defined() && state.sizes() == state_shape,
             "{}: expected a hidden state of shape {} for an input of shape {}, got {}", name,
             state_shape, x.sizes(), describe(state));
  }
  return H;
}

struct LstmCell {
  static constexpr OpId id = OpId::lstm_cell;
  static constexpr bool kComposite = true;
  std::tuple<Tensor, Tensor> forward(OpContext&, const Tensor& x, const Tensor& h, const Tensor& c,
                                     const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                     const Tensor& b_hh) {
    check_cell(id, 4, x, {h, c}, w_ih, w_hh, b_ih, b_hh);
    const Tensor gates = add(linear(x, w_ih, b_ih), linear(h, w_hh, b_hh));  // [B, 4H]
    const std::vector<Tensor> ifgo = chunk(gates, 4, -1);
    const Tensor c_next = add(mul(sigmoid(ifgo[1]), c), mul(sigmoid(ifgo[0]), tanh(ifgo[2])));
    const Tensor h_next = mul(sigmoid(ifgo[3]), tanh(c_next));
    return {h_next, c_next};
  }
};

struct GruCell {
  static constexpr OpId id = OpId::gru_cell;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, const Tensor& x, const Tensor& h, const Tensor& w_ih,
                 const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
    check_cell(id, 3, x, {h}, w_ih, w_hh, b_ih, b_hh);
    // The hidden projection stays apart from the input's: r gates only its n block.
    const std::vector<Tensor> input_rzn = chunk(linear(x, w_ih, b_ih), 3, -1);   // [B, H] each
    const std::vector<Tensor> hidden_rzn = chunk(linear(h, w_hh, b_hh), 3, -1);  // [B, H] each
    const Tensor r = sigmoid(add(input_rzn[0], hidden_rzn[0]));
    const Tensor z = sigmoid(add(input_rzn[1], hidden_rzn[1]));
    const Tensor n = tanh(add(input_rzn[2], mul(r, hidden_rzn[2])));
    return add(n, mul(z, sub(h, n)));  // (1 - z) n + z h
  }
};

// One step of the plain RNN: tanh or relu of the two projections' sum.
template <OpId Id>
struct RnnCell {
  static constexpr OpId id = Id;
  static constexpr bool kComposite = true;
  Tensor forward(OpContext&, const Tensor& x, const Tensor& h, const Tensor& w_ih,
                 const Tensor& w_hh, const Tensor& b_ih, const Tensor& b_hh) {
    check_cell(id, 1, x, {h}, w_ih, w_hh, b_ih, b_hh);
    const Tensor pre = add(linear(x, w_ih, b_ih), linear(h, w_hh, b_hh));
    return Id == OpId::rnn_relu_cell ? relu(pre) : tanh(pre);
  }
};

}  // namespace

Tensor rnn_tanh_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih, const Tensor& b_hh) {
  return dispatch(RnnCell<OpId::rnn_tanh_cell>{}, x, h, w_ih, w_hh, b_ih, b_hh);
}

Tensor rnn_relu_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                     const Tensor& b_ih, const Tensor& b_hh) {
  return dispatch(RnnCell<OpId::rnn_relu_cell>{}, x, h, w_ih, w_hh, b_ih, b_hh);
}

std::tuple<Tensor, Tensor> lstm_cell(const Tensor& x, const std::tuple<Tensor, Tensor>& hx,
                                     const Tensor& w_ih, const Tensor& w_hh, const Tensor& b_ih,
                                     const Tensor& b_hh) {
  return dispatch(LstmCell{}, x, std::get<0>(hx), std::get<1>(hx), w_ih, w_hh, b_ih, b_hh);
}

Tensor gru_cell(const Tensor& x, const Tensor& h, const Tensor& w_ih, const Tensor& w_hh,
                const Tensor& b_ih, const Tensor& b_hh) {
  return dispatch(GruCell{}, x, h, w_ih, w_hh, b_ih, b_hh);
}

}  // namespace hg
