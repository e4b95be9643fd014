"""PyTorch twin of tests/optim/rmsprop_test.cpp and adagrad_test.cpp: runs torch.optim.RMSprop
and torch.optim.Adagrad over ten steps for each option set, on two float64 parameters with
fixed values and gradients from a fixed formula, and prints, one line each,
    <run> options <optimizer> <option> <value> ...      the optimizer and its options
    <run> <step> <param> grad <values>                  the gradient that step used
    <run> <step> <param> param <values>                 the parameter after the step
    <run> <step> <param> keys <state keys, sorted>      the keys of its state after the step
    <run> <step> <param> <state key> <values>           each state value after the step
with 17 significant digits; step 0 is the state after construction. The C++ tests read the
committed output, rmsprop_adagrad.txt, and make the same runs with halfgrad.

Regenerate with Debian's PyTorch:  /usr/bin/python3 rmsprop_adagrad.py > rmsprop_adagrad.txt
"""
import math

import torch

STEPS = 10
INITIAL = [[0.5, -1.25, 2.0, 0.125, -0.75], [0.3, -0.7, 1.1]]

RMSPROP = {
    "rmsprop_plain": dict(lr=0.01),
    "rmsprop_momentum": dict(lr=0.01, momentum=0.9),
    "rmsprop_centered": dict(lr=0.01, alpha=0.9, centered=True),
    "rmsprop_centered_momentum": dict(lr=0.02, alpha=0.95, momentum=0.5, centered=True),
    "rmsprop_weight_decay": dict(lr=0.01, weight_decay=0.1),
    "rmsprop_maximize": dict(lr=0.01, momentum=0.3, eps=1e-3, maximize=True),
}
ADAGRAD = {
    "adagrad_plain": dict(lr=0.1),
    "adagrad_lr_decay": dict(lr=0.1, lr_decay=0.05),
    "adagrad_weight_decay": dict(lr=0.1, weight_decay=0.2),
    "adagrad_initial_accumulator_value": dict(lr=0.1, initial_accumulator_value=0.5),
    "adagrad_maximize": dict(lr=0.1, eps=1e-3, maximize=True),
}
# The option names halfgrad shares with torch, in the order printed.
RMSPROP_OPTIONS = ["lr", "alpha", "eps", "weight_decay", "momentum", "centered", "maximize"]
ADAGRAD_OPTIONS = ["lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps",
                   "maximize"]


def numbers(values):
    return " ".join("%.17g" % float(v) for v in values)


def gradient(param, element, step):
    # Varied signs and magnitudes, so that the averages and the accumulator all move.
    return math.sin(1.0 + 0.37 * element + 0.61 * param + 1.13 * step) * (1 + 0.5 * (step % 3))


def emit(run, step, params, opt):
    for j, p in enumerate(params):
        print(run, step, j, "param", numbers(p.detach().tolist()))
        state = opt.state[p]
        print(run, step, j, "keys", " ".join(sorted(state.keys())) or "-")
        for key in sorted(state.keys()):
            value = state[key]
            values = value.reshape(-1).tolist() if torch.is_tensor(value) else [value]
            print(run, step, j, key, numbers(values))


def run(name, make, names, options, option=lambda group, key: group[key]):
    # option(group, key): the value halfgrad's option `key` has in torch's param group.
    params = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in INITIAL]
    opt = make(params, **options)
    group = opt.param_groups[0]
    print(name, "options", make.__name__,
          " ".join("%s %.17g" % (key, float(option(group, key))) for key in names))
    emit(name, 0, params, opt)
    for step in range(1, STEPS + 1):
        for j, p in enumerate(params):
            p.grad = torch.tensor([gradient(j, i, step) for i in range(p.numel())],
                                  dtype=torch.float64)
            print(name, step, j, "grad", numbers(p.grad.tolist()))
        opt.step()
        emit(name, step, params, opt)


if __name__ == "__main__":
    for name, options in RMSPROP.items():
        run(name, torch.optim.RMSprop, RMSPROP_OPTIONS, options)
    for name, options in ADAGRAD.items():
        run(name, torch.optim.Adagrad, ADAGRAD_OPTIONS, options)
