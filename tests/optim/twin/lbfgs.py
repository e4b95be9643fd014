"""PyTorch twin of the LBFGS runs of tests/optim/lbfgs_test.cpp: runs torch.optim.LBFGS for four
steps of each option set on a fixed float64 problem, and prints, one line each,
    <run> options LBFGS <option> <value> ...     the optimizer's options (line_search_fn 1 for
                                                 "strong_wolfe", 0 for none)
    <run> <step> <param> param <values>          each parameter after the step
    <run> <step> 0 loss <value>                  what step() returned (the loss where it began)
    <run> <step> 0 keys <state keys, sorted>     the keys of LBFGS's state (kept on parameter 0)
    <run> <step> 0 <state key> <values>          each state value, lists of tensors flattened
                                                 one after another
with 17 significant digits; step 0 is the state after construction. torch's scratch list "al"
(rewritten before it is read at every iteration) is left out: halfgrad does not keep it.

The problem: x (4 values) in a Rosenbrock valley, W (2 x 3) in a ridge-regularised least-squares
term, and u (2 values), which the loss does not use (its gradient stays None: zeros in the flat
gradient). With maximize the closure returns minus that loss.

This twin needs PyTorch 2 (LBFGS's maximize, and the line search capped at the evaluations the
step has left, are torch 2's). Regenerate with PyTorch 2.x from PyPI (benchmarks/run-train makes
the virtual environment build/venv-torch):
    build/venv-torch/bin/python tests/optim/twin/lbfgs.py > tests/optim/twin/lbfgs.txt
"""
import torch

STEPS = 4
INITIAL = [[-1.2, 1.0, -0.5, 0.8], [[0.1, -0.2, 0.3], [0.4, 0.0, -0.6]], [0.5, -0.5]]
C = [1.0, -2.0, 0.5]
E = [0.3, -0.4]

RUNS = {
    "lbfgs_fixed_step": dict(lr=0.05, max_iter=5),
    "lbfgs_strong_wolfe": dict(line_search_fn="strong_wolfe"),
    "lbfgs_short_history": dict(line_search_fn="strong_wolfe", history_size=3, max_iter=8),
    "lbfgs_max_eval": dict(lr=0.5, max_iter=10, max_eval=6, line_search_fn="strong_wolfe"),
    "lbfgs_tolerances": dict(line_search_fn="strong_wolfe", tolerance_grad=1e-3,
                             tolerance_change=1e-4),
    "lbfgs_maximize": dict(line_search_fn="strong_wolfe", max_iter=6, maximize=True),
}
OPTIONS = ["lr", "max_iter", "max_eval", "tolerance_grad", "tolerance_change", "history_size",
           "line_search_fn", "maximize"]


def numbers(values):
    return " ".join("%.17g" % float(v) for v in values)


def flat_values(value):
    if isinstance(value, list):
        return [v for item in value for v in flat_values(item)]
    if torch.is_tensor(value):
        return value.reshape(-1).tolist()
    return [value]


def loss_of(x, w):
    rosenbrock = (10 * (x[1:] - x[:-1] * x[:-1]) ** 2 + (1 - x[:-1]) ** 2).sum()
    c = torch.tensor(C, dtype=torch.float64)
    e = torch.tensor(E, dtype=torch.float64)
    residual = w @ c - e
    return rosenbrock + (residual * residual).sum() + 0.1 * (w * w).sum()


def option(group, key):
    if key == "line_search_fn":
        return 1 if group[key] == "strong_wolfe" else 0
    return group[key]


def emit(name, step, params, opt, loss):
    for j, p in enumerate(params):
        print(name, step, j, "param", numbers(p.detach().reshape(-1).tolist()))
    if loss is not None:
        print(name, step, 0, "loss", numbers([loss]))
    state = {k: v for k, v in opt.state[params[0]].items() if k != "al"}
    print(name, step, 0, "keys", " ".join(sorted(state.keys())) or "-")
    for key in sorted(state.keys()):
        print(name, step, 0, key, numbers(flat_values(state[key])))


def run(name, options):
    params = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in INITIAL]
    opt = torch.optim.LBFGS(params, **options)
    sign = -1 if options.get("maximize", False) else 1
    group = opt.param_groups[0]
    print(name, "options LBFGS",
          " ".join("%s %.17g" % (key, float(option(group, key))) for key in OPTIONS))
    emit(name, 0, params, opt, None)

    def closure():
        opt.zero_grad()
        loss = sign * loss_of(params[0], params[1])
        loss.backward()
        return loss

    for step in range(1, STEPS + 1):
        loss = opt.step(closure)
        emit(name, step, params, opt, loss.item())


if __name__ == "__main__":
    assert int(torch.__version__.split(".")[0]) >= 2, "this twin needs PyTorch 2 (see above)"
    for name, options in RUNS.items():
        run(name, options)
