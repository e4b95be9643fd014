// Gradcheck samples of the recurrent cells (ops/rnn.cpp): batched with biases, and unbatched
// without, so both projections and every gate reach the checked gradient.
#include "../gradcheck_samples.h"

namespace hg::testing {
namespace {

const bool registered = register_samples([](std::map<OpId, Sample>& s) {
  // x [B, I] = [2, 3], H = 2.
  s[OpId::lstm_cell] =
      Sample{[](const Inputs& in) {
               const auto [h, c] = lstm_cell(in[0], {in[1], in[2]}, in[3], in[4], in[5], in[6]);
               const auto [h1, c1] = lstm_cell(
                   in[0].select(0, 1), {in[1].select(0, 0), in[2].select(0, 0)}, in[3], in[4]);
               return cat({h.flatten(), c.flatten(), h1, c1});
             },
             [] {
               return Inputs{input({2, 3}), input({2, 2}), input({2, 2}), input({8, 3}),
                             input({8, 2}), input({8}),    input({8})};
             }};
  s[OpId::gru_cell] = Sample{[](const Inputs& in) {
                               const Tensor h = gru_cell(in[0], in[1], in[2], in[3], in[4], in[5]);
                               const Tensor h1 =
                                   gru_cell(in[0].select(0, 1), in[1].select(0, 0), in[2], in[3]);
                               return cat({h.flatten(), h1});
                             },
                             [] {
                               return Inputs{input({2, 3}), input({2, 2}), input({6, 3}),
                                             input({6, 2}), input({6}),    input({6})};
                             }};
  // The plain RNN's two cells, batched with biases and unbatched without.
  s[OpId::rnn_tanh_cell] =
      Sample{[](const Inputs& in) {
               return cat({rnn_tanh_cell(in[0], in[1], in[2], in[3], in[4], in[5]).flatten(),
                           rnn_tanh_cell(in[0].select(0, 1), in[1].select(0, 0), in[2], in[3])});
             },
             [] {
               return Inputs{input({2, 3}), input({2, 2}), input({2, 3}),
                             input({2, 2}), input({2}),    input({2})};
             }};
  s[OpId::rnn_relu_cell] =
      Sample{[](const Inputs& in) {
               return cat({rnn_relu_cell(in[0], in[1], in[2], in[3], in[4], in[5]).flatten(),
                           rnn_relu_cell(in[0].select(0, 1), in[1].select(0, 0), in[2], in[3])});
             },
             [] {
               return Inputs{input({2, 3}), input({2, 2}), input({2, 3}),
                             input({2, 2}), input({2}),    input({2})};
             }};
});

}  // namespace
}  // namespace hg::testing
