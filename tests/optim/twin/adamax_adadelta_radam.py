"""PyTorch twin of tests/optim/adamax_test.cpp: runs torch.optim.Adamax, Adadelta and RAdam over
ten steps for each option set, on the parameters and gradients of rmsprop_adagrad.py, and prints
the same lines (see there) with 17 significant digits; betas print as beta1 and beta2, halfgrad's
option names. The C++ tests read the committed output, adamax_adadelta_radam.txt.

Regenerate with Debian's PyTorch:  /usr/bin/python3 adamax_adadelta_radam.py > adamax_adadelta_radam.txt
"""
import torch

from rmsprop_adagrad import run

ADAMAX = {
    "adamax_plain": dict(lr=0.01),
    "adamax_betas_eps": dict(lr=0.02, betas=(0.8, 0.99), eps=1e-3),
    "adamax_weight_decay": dict(lr=0.01, weight_decay=0.1),
    "adamax_maximize": dict(lr=0.01, maximize=True),
}
ADADELTA = {
    "adadelta_plain": dict(),
    "adadelta_rho_eps": dict(lr=0.5, rho=0.5, eps=1e-3),
    "adadelta_weight_decay": dict(weight_decay=0.1),
    "adadelta_maximize": dict(lr=0.8, maximize=True),
}
RADAM = {
    "radam_plain": dict(lr=0.01),
    "radam_betas": dict(lr=0.02, betas=(0.8, 0.9), eps=1e-6),
    "radam_weight_decay": dict(lr=0.01, weight_decay=0.1),
}
ADAMAX_OPTIONS = ["lr", "beta1", "beta2", "eps", "weight_decay", "maximize"]
ADADELTA_OPTIONS = ["lr", "rho", "eps", "weight_decay", "maximize"]
RADAM_OPTIONS = ["lr", "beta1", "beta2", "eps", "weight_decay"]


def option(group, key):
    if key in ("beta1", "beta2"):
        return group["betas"][0 if key == "beta1" else 1]
    return group[key]


if __name__ == "__main__":
    for name, options in ADAMAX.items():
        run(name, torch.optim.Adamax, ADAMAX_OPTIONS, options, option)
    for name, options in ADADELTA.items():
        run(name, torch.optim.Adadelta, ADADELTA_OPTIONS, options)
    for name, options in RADAM.items():
        run(name, torch.optim.RAdam, RADAM_OPTIONS, options, option)
