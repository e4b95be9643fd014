"""PyTorch twin of tests/optim/lr_scheduler_test.cpp: prints, for each schedule, the lr of
every param group (and the momentum where a schedule cycles it) after construction and after
each step, as `name step value value ...` with 17 significant digits. The C++ test reads the
committed output, lr_schedules.txt, and makes the same schedules with halfgrad.

Regenerate with PyTorch (Debian's python3-torch 1.13 wrote the first schedules; the venv's 2.15
writes the same lines for them, and wrote the ones from "polynomial" on):
  /usr/bin/python3 lr_schedules.py > lr_schedules.txt
  ../../../build/venv-torch/bin/python lr_schedules.py > lr_schedules.txt
"""
import math

import torch
from torch.optim import SGD, Adam
from torch.optim import lr_scheduler as S


def groups(opt_class, **kw):
    a = torch.nn.Parameter(torch.zeros(2))
    b = torch.nn.Parameter(torch.zeros(3))
    return opt_class([{"params": [a], "lr": 0.1}, {"params": [b], "lr": 0.02}], **kw)


def momentum_of(group):
    return group["momentum"] if "momentum" in group else group["betas"][0]


def emit(name, opt, steps, step, momentum=False):
    def line(k):
        values = [g["lr"] for g in opt.param_groups]
        if momentum:
            values += [momentum_of(g) for g in opt.param_groups]
        print(name, k, " ".join("%.17g" % v for v in values))

    line(0)
    for k in range(1, steps + 1):
        opt.step()
        step(k)
        line(k)


def run(name, opt, scheduler, steps, momentum=False):
    emit(name, opt, steps, lambda k: scheduler.step(), momentum)


opt = groups(SGD, momentum=0.9)
run("lambda", opt, S.LambdaLR(opt, [lambda e: 0.95 ** e, lambda e: 1.0 / (e + 1)]), 12)
opt = groups(SGD, momentum=0.9)
run("multistep", opt, S.MultiStepLR(opt, milestones=[3, 7, 7], gamma=0.5), 12)
opt = groups(SGD, momentum=0.9)
run("exponential", opt, S.ExponentialLR(opt, gamma=0.9), 12)
opt = groups(SGD, momentum=0.9)
run("cosine", opt, S.CosineAnnealingLR(opt, T_max=5, eta_min=0.001), 16)
opt = groups(SGD, momentum=0.9)
run("linear", opt, S.LinearLR(opt, start_factor=0.25, end_factor=1.0, total_iters=4), 8)
opt = groups(SGD, momentum=0.9)
run("onecycle", opt, S.OneCycleLR(opt, max_lr=[0.5, 0.1], total_steps=20), 19, momentum=True)
opt = groups(Adam)
run("onecycle_three_phase", opt,
    S.OneCycleLR(opt, max_lr=0.3, total_steps=15, pct_start=0.25, anneal_strategy="linear",
                 three_phase=True, div_factor=10.0, final_div_factor=100.0,
                 base_momentum=0.8, max_momentum=0.9), 14, momentum=True)
opt = groups(SGD, momentum=0.9)
run("sequential", opt,
    S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.1, total_iters=3),
                         S.ExponentialLR(opt, gamma=0.8)], milestones=[3]), 10)
opt = groups(SGD, momentum=0.9)
run("sequential_cosine", opt,
    S.SequentialLR(opt, [S.ExponentialLR(opt, gamma=0.5),
                         S.CosineAnnealingLR(opt, T_max=4)], milestones=[2]), 9)

METRICS = [1.0, 0.95, 0.93, 0.92, 0.91, 0.92, 0.80, 0.81, 0.82, 0.83, 0.84, 0.79, float("nan"),
           0.78, 0.5, 0.49, 0.48, 0.47, 0.46, 0.45]
print("metrics", 0, " ".join("%.17g" % m for m in METRICS))
opt = groups(SGD, momentum=0.9)
plateau = S.ReduceLROnPlateau(opt, mode="min", factor=0.5, patience=2, threshold=0.05,
                              cooldown=1, min_lr=[0.02, 0.0])
emit("plateau_min", opt, len(METRICS), lambda k: plateau.step(METRICS[k - 1]))
opt = groups(SGD, momentum=0.9)
plateau = S.ReduceLROnPlateau(opt, mode="max", factor=0.1, patience=1, threshold=0.02,
                              threshold_mode="abs", eps=1e-3)
emit("plateau_max_abs", opt, len(METRICS), lambda k: plateau.step(-METRICS[k - 1]))

opt = groups(SGD, momentum=0.9)
run("polynomial", opt, S.PolynomialLR(opt, total_iters=6, power=2.0), 9)
opt = groups(SGD, momentum=0.9)
run("polynomial_default", opt, S.PolynomialLR(opt), 7)

# step() and step(epoch) interleaved: None is step() with no argument.
WARM_RESTART_EPOCHS = [None] * 8 + [12.5, None, None, None, 2.25, None, None, 40, None, 0.75, None]
opt = groups(SGD, momentum=0.9)
warm = S.CosineAnnealingWarmRestarts(opt, T_0=3, T_mult=2, eta_min=0.001)
emit("warm_restarts_mult2", opt, len(WARM_RESTART_EPOCHS),
     lambda k: warm.step() if WARM_RESTART_EPOCHS[k - 1] is None
     else warm.step(WARM_RESTART_EPOCHS[k - 1]))
opt = groups(SGD, momentum=0.9)
warm = S.CosineAnnealingWarmRestarts(opt, T_0=4)
emit("warm_restarts", opt, len(WARM_RESTART_EPOCHS),
     lambda k: warm.step() if WARM_RESTART_EPOCHS[k - 1] is None
     else warm.step(WARM_RESTART_EPOCHS[k - 1]))

opt = groups(SGD, momentum=0.9)
run("cyclic_triangular", opt,
    S.CyclicLR(opt, base_lr=[0.01, 0.002], max_lr=[0.1, 0.05], step_size_up=4,
               step_size_down=2), 14, momentum=True)
opt = groups(Adam)
run("cyclic_triangular2", opt,
    S.CyclicLR(opt, base_lr=0.001, max_lr=0.01, step_size_up=3, mode="triangular2",
               base_momentum=0.85, max_momentum=0.95), 20, momentum=True)
opt = groups(SGD, momentum=0.9)
run("cyclic_exp_range", opt,
    S.CyclicLR(opt, base_lr=0.01, max_lr=[0.1, 0.05], step_size_up=2, step_size_down=3,
               mode="exp_range", gamma=0.9, cycle_momentum=False), 14)
opt = groups(SGD, momentum=0.9)
run("cyclic_scale_fn_iterations", opt,
    S.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=3, step_size_down=1,
               scale_fn=lambda x: 1.0 / (1.0 + 0.1 * x), scale_mode="iterations",
               base_momentum=[0.7, 0.8], max_momentum=[0.95, 0.9]), 12, momentum=True)
opt = groups(SGD, momentum=0.9)
run("cyclic_scale_fn_cycle", opt,
    S.CyclicLR(opt, base_lr=0.01, max_lr=0.1, step_size_up=2, mode="exp_range",
               scale_fn=lambda c: 1.0 / c, cycle_momentum=False), 12)
