"""PyTorch twin of the NAdam runs of tests/optim/adamax_test.cpp: runs torch.optim.NAdam over ten
steps for each option set, on the parameters and gradients of rmsprop_adagrad.py, and prints the
same lines (see there) with 17 significant digits; betas print as beta1 and beta2, halfgrad's
option names. The C++ tests read the committed output, nadam.txt.

This twin needs PyTorch 2: torch 1.13's NAdam multiplies the product of the momentum
coefficients by this step's coefficient twice when it makes the next step's product (fixed in
2.0), and has neither decoupled_weight_decay nor maximize. Regenerate with PyTorch 2.x from PyPI
(benchmarks/run-train makes the virtual environment build/venv-torch):
    build/venv-torch/bin/python tests/optim/twin/nadam.py > tests/optim/twin/nadam.txt
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmsprop_adagrad import run  # noqa: E402

NADAM = {
    "nadam_plain": dict(lr=0.01),
    "nadam_betas_eps": dict(lr=0.02, betas=(0.8, 0.99), eps=1e-3),
    "nadam_momentum_decay": dict(lr=0.01, momentum_decay=0.05),
    "nadam_weight_decay": dict(lr=0.01, weight_decay=0.1),
    "nadam_decoupled_weight_decay": dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
    "nadam_maximize": dict(lr=0.01, maximize=True),
}
NADAM_OPTIONS = ["lr", "beta1", "beta2", "eps", "weight_decay", "momentum_decay",
                 "decoupled_weight_decay", "maximize"]


def option(group, key):
    if key in ("beta1", "beta2"):
        return group["betas"][0 if key == "beta1" else 1]
    return group[key]


def nadam(params, **options):
    # The single-tensor path, which the CPU takes by default.
    return torch.optim.NAdam(params, foreach=False, **options)


nadam.__name__ = "NAdam"

if __name__ == "__main__":
    assert int(torch.__version__.split(".")[0]) >= 2, "this twin needs PyTorch 2 (see above)"
    for name, options in NADAM.items():
        run(name, nadam, NADAM_OPTIONS, options, option)
