"""PyTorch twin of the recurrent layers' test (tests/nn/rnn_test.cpp): builds LSTM, GRU and RNN
layers and the three cells in float64 with fixed parameter values (a formula of each
parameter's registration index and element index), runs them on fixed inputs, and prints per
case:
  case NAME
  keys KEY...                          the state dict's keys in registration order
  tensor KEY SHAPE values...           parameters, input, initial states (h0, c0) when given,
                                       the results (output, h_n, c_n; h, c for the cells), the
                                       weights of the weighted sum that is differentiated
                                       (weight.<result>), and its gradients (grad.<input>)
with 17 significant digits. The C++ test loads the parameters, runs halfgrad's modules and
compares.

Regenerate with Debian's PyTorch:
  /usr/bin/python3 rnn.py > rnn.txt
"""
import math

import torch


def emit(key, t):
    shape = ",".join(str(s) for s in t.shape) or "scalar"
    values = " ".join("%.17g" % v for v in t.detach().double().flatten().tolist())
    print("tensor", key, shape, values)


def pattern(shape, a, b, scale):
    n = math.prod(shape)
    j = torch.arange(n, dtype=torch.float64)
    return (scale * torch.sin(a * j + b)).reshape(shape)


def set_parameters(module):
    with torch.no_grad():
        for p, (name, param) in enumerate(module.named_parameters()):
            param.copy_(pattern(param.shape, 0.7, 1.3 * p + 0.1, 0.4))


def case(name, module, input_shape, states, has_cell_state=False):
    """states: None (absent) or the shape of h0 (and c0)."""
    module = module.double()
    set_parameters(module)
    x = pattern(input_shape, 0.37, 0.5, 0.8).requires_grad_()
    inputs = {"input": x}
    if states is not None:
        inputs["h0"] = pattern(states, 0.23, 0.4, 0.5).requires_grad_()
        if has_cell_state:
            inputs["c0"] = pattern(states, 0.31, -0.2, 0.6).requires_grad_()
    is_cell = isinstance(module, torch.nn.RNNCellBase)
    if states is None:
        result = module(x)
    elif has_cell_state:
        result = module(x, (inputs["h0"], inputs["c0"]))
    else:
        result = module(x, inputs["h0"])
    if is_cell:
        results = {"h": result[0], "c": result[1]} if has_cell_state else {"h": result}
    else:
        output, state = result
        results = {"output": output}
        if has_cell_state:
            results["h_n"], results["c_n"] = state
        else:
            results["h_n"] = state
    loss = 0
    weights = {}
    for k, (key, value) in enumerate(results.items()):
        weights[key] = pattern(value.shape, 0.53, 0.3 * k + 0.2, 1.0)
        loss = loss + (value * weights[key]).sum()
    loss.backward()

    print("case", name)
    print("keys", " ".join(module.state_dict().keys()))
    for key, value in module.state_dict().items():
        emit(key, value)
    for key, value in inputs.items():
        emit(key, value)
    for key, value in results.items():
        emit(key, value)
        emit("weight." + key, weights[key])
    for key, value in inputs.items():
        emit("grad." + key, value.grad)
    for key, param in module.named_parameters():
        emit("grad." + key, param.grad)


nn = torch.nn
case("lstm_two_layers", nn.LSTM(3, 4, num_layers=2), (5, 2, 3), (2, 2, 4), True)
case("lstm_batch_first_bidirectional", nn.LSTM(3, 4, num_layers=2, batch_first=True,
                                               bidirectional=True), (2, 5, 3), None, True)
case("lstm_unbatched_bidirectional_no_bias", nn.LSTM(3, 4, bias=False, bidirectional=True),
     (5, 3), (2, 4), True)
case("gru_two_layers", nn.GRU(3, 4, num_layers=2), (5, 2, 3), (2, 2, 4))
case("gru_batch_first_bidirectional", nn.GRU(3, 4, num_layers=2, batch_first=True,
                                             bidirectional=True), (2, 5, 3), (4, 2, 4))
case("gru_unbatched", nn.GRU(3, 4), (5, 3), None)
case("rnn_relu_bidirectional", nn.RNN(3, 4, num_layers=2, nonlinearity="relu",
                                      bidirectional=True), (5, 2, 3), (4, 2, 4))
case("rnn_tanh_batch_first", nn.RNN(3, 4, batch_first=True), (2, 5, 3), None)
case("lstm_cell", nn.LSTMCell(3, 4), (2, 3), (2, 4), True)
case("lstm_cell_unbatched", nn.LSTMCell(3, 4), (3,), None, True)
case("gru_cell", nn.GRUCell(3, 4), (2, 3), (2, 4))
case("gru_cell_unbatched_no_bias", nn.GRUCell(3, 4, bias=False), (3,), (4,))
case("rnn_cell_relu", nn.RNNCell(3, 4, nonlinearity="relu"), (2, 3), (2, 4))
