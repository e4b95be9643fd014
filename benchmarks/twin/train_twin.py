#!/usr/bin/env python3
"""PyTorch twin of hg-bench-train: the same models, batches, losses and optimizers, timed the
same way, printed as the same JSON lines with "impl": "pytorch".

  python3 benchmarks/twin/train_twin.py --threads 2 [--only mlp|cnn|tiny|gpt-cpu|memory] [--reps 10]

Sections (hg_bench_train.cpp describes each; keep the two files in step):
  mlp     MLP 1024 -> 4096 -> 4096 -> 10 (Linear, ReLU), batch 512, cross_entropy, AdamW
          (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01; torch 1.13's CPU default,
          the single-tensor loop), modes fp32 and bf16 (torch.autocast("cpu", bfloat16)).
          One step = zero_grad(set_to_none=True), forward, loss, backward, step; the median
          of --reps steps after --warmup steps.
  cnn     a CNN on synthetic 28 x 28 single-channel images, batch 128: two blocks of Conv2d 3x3
          (padding 1), BatchNorm2d, ReLU, MaxPool2d 2 (1 -> 32 -> 64 channels), then
          Linear(3136, 10); loss, optimizer, modes and timing as the MLP's.
  tiny    MLP 32 -> 32 -> 1 (Linear, ReLU), batch 16, mse_loss, SGD lr 1e-3: --tiny-steps
          steps per rep, microseconds per step, median over reps.
  gpt-cpu gpt_model.py's GPT on the CPU in two sizes, each at its own thread count: "demo",
          the demo's model (scripts/demo: 2 layers, 48 wide, 4 heads, T = 9, vocabulary 13,
          batch 64), one thread; "larger" (4 layers, 256 wide, 8 heads, T = 64, vocabulary
          256, batch 16), two threads. Random tokens and targets. One step = zero_grad
          (set_to_none=True), forward and cross_entropy (under torch.autocast("cpu",
          bfloat16) in bf16), backward, clip_grad_norm_ 1.0, AdamW step (lr 6e-4, betas
          (0.9, 0.95), eps 1e-8, weight decay 0.1 on matrices and embeddings; torch 1.13's
          CPU default, the single-tensor loop). Modes fp32 and bf16 (1.13 has no float16
          CPU autocast).
  memory  the bf16 MLP run in this process alone: peak resident memory (VmHWM) after
          --memory-steps steps, minus the resident memory (VmRSS) measured just before the
          model is built, with the high-water mark reset there (/proc/self/clear_refs 5).
          Run it in its own process (--only memory), so that no other section raises the mark.
  --serve reads commands on stdin, one a line, and answers each with one JSON line:
          "mlp MODE" / "cnn MODE" runs one step of that run ({"ms": ...}) in MODE fp32, bf16 or
          fp16 (fp16 autocast with torch.amp.GradScaler("cpu"), PyTorch 2.3 and later); a
          trailing "compile" runs the model under torch.compile (2.0 and later); "tiny N" runs
          N tiny steps ({"us": ...} per step), "gpt-cpu SIZE MODE" one GPT step at that
          size's thread count ({"ms": ...}; MODE and "compile" as above), "quit" ends. hg-bench-train --twin-cmd
          drives it, alternating its own steps with the twin's so that both see the same load.

benchmarks/run-train installs PyTorch 2.x from PyPI into build/venv-torch for it; the tests do
not use it. (Debian's python3-torch 1.13 runs it too, fp32 and bf16 without compile.)
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from gpt_model import GPT, GptConfig, param_groups

MLP_SIZES = (1024, 4096, 4096, 10)
MLP_BATCH = 512
CNN_WIDTH = 32
CNN_BATCH = 128
TINY_SIZES = (32, 32, 1)
TINY_BATCH = 16


def emit(record):
    print(json.dumps(record), flush=True)


def mlp(sizes):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i + 2 < len(sizes):
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def cnn(width=CNN_WIDTH):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1), nn.BatchNorm2d(2 * width), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * width * 7 * 7, 10))


def make_cnn_run(mode, compiled=False):
    """The CNN's model, synthetic images and optimizer; returns one training step."""
    torch.manual_seed(0)
    model = cnn()
    x = torch.randn(CNN_BATCH, 1, 28, 28)
    y = torch.randint(0, 10, (CNN_BATCH,))
    return classifier_step(model, x, y, mode, compiled)


def make_mlp_run(mode, sizes=MLP_SIZES, batch=MLP_BATCH, compiled=False):
    """The model, data and optimizer of the big MLP; returns one training step."""
    torch.manual_seed(0)
    model = mlp(sizes)
    x = torch.randn(batch, sizes[0])
    y = torch.randint(0, sizes[-1], (batch,))
    return classifier_step(model, x, y, mode, compiled)


def supports(mode, compiled):
    """Whether this PyTorch runs the mode (fp16 CPU autocast with a CPU GradScaler: 2.3 and
    later) and torch.compile (2.0 and later)."""
    if mode == "fp16" and not hasattr(torch, "amp") or (
            mode == "fp16" and not hasattr(torch.amp, "GradScaler")):
        return False
    return not compiled or hasattr(torch, "compile")


def autocast_and_scaler(mode):
    """torch.autocast's dtype for the mode (None: fp32) and the GradScaler (fp16 only)."""
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[mode]
    scaler = torch.amp.GradScaler("cpu") if mode == "fp16" else None
    return dtype, scaler


def classifier_step(model, x, y, mode, compiled=False):
    """AdamW, cross_entropy, autocast in bf16 or fp16 (with a GradScaler): one training step of a
    classifier; the model under torch.compile when compiled."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.01)
    dtype, scaler = autocast_and_scaler(mode)
    forward = torch.compile(model) if compiled else model

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(forward(x), y)
        if scaler is None:
            loss.backward()
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        return loss

    return step


def median_ms(call, reps, warmup):
    for _ in range(warmup):
        call()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def run_mlp(args):
    shape = "x".join(str(s) for s in MLP_SIZES)
    for mode in ("fp32", "bf16"):
        step = make_mlp_run(mode)
        ms = median_ms(step, args.reps, args.warmup)
        emit({"bench": "train_mlp", "impl": "pytorch", "mode": mode, "shape": shape,
              "batch": MLP_BATCH, "ms": round(ms, 3)})


def run_cnn(args):
    for mode in ("fp32", "bf16"):
        step = make_cnn_run(mode)
        ms = median_ms(step, args.reps, args.warmup)
        emit({"bench": "train_cnn", "impl": "pytorch", "mode": mode,
              "shape": f"cnn-{CNN_WIDTH}-{2 * CNN_WIDTH}-28x28", "batch": CNN_BATCH,
              "ms": round(ms, 3)})


def make_tiny_run(steps):
    """The tiny MLP's model, data and optimizer; returns `steps` training steps."""
    torch.manual_seed(0)
    model = mlp(TINY_SIZES)
    x = torch.randn(TINY_BATCH, TINY_SIZES[0])
    y = torch.randn(TINY_BATCH, TINY_SIZES[-1])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def run():
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()

    return run


def run_tiny(args):
    ms = median_ms(make_tiny_run(args.tiny_steps), max(args.reps, 5), 1)
    emit({"bench": "train_tiny", "impl": "pytorch", "shape": "32x32x1", "batch": TINY_BATCH,
          "us": round(ms * 1e3 / args.tiny_steps, 3)})


# The gpt-cpu sizes: (config, threads). hg_bench_train.cpp's kCpuGpts holds the same.
GPT_CPU = {"demo": (GptConfig(13, 9, 2, 4, 48, 64), 1),
           "larger": (GptConfig(256, 64, 4, 8, 256, 16), 2)}


def make_gpt_cpu_run(size, mode, compiled=False):
    """The GPT, data and optimizer of one gpt-cpu size and mode; returns one training step
    (run at the size's thread count), the model under torch.compile when compiled."""
    config, threads = GPT_CPU[size]
    torch.manual_seed(0)
    model = GPT(config)
    opt = torch.optim.AdamW(param_groups(model), lr=6e-4, betas=(0.9, 0.95), eps=1e-8)
    B, T, V = config.batch, config.block, config.vocab
    idx = torch.randint(0, V, (B, T))
    targets = torch.randint(0, V, (B * T,))
    dtype, scaler = autocast_and_scaler(mode)
    forward = torch.compile(model) if compiled else model

    def step():
        torch.set_num_threads(threads)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
            loss = F.cross_entropy(forward(idx).view(-1, V), targets)
        if scaler is None:
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
        return loss

    return step


def run_gpt_cpu(args):
    for size, (config, threads) in GPT_CPU.items():
        for mode in ("fp32", "bf16"):
            ms = median_ms(make_gpt_cpu_run(size, mode), args.reps, args.warmup)
            emit({"bench": "train_gpt_cpu", "impl": "pytorch", "mode": mode, "size": size,
                  "shape": config.shape(), "batch": config.batch, "threads": threads,
                  "ms": round(ms, 3)})
    torch.set_num_threads(args.threads)


def proc_status_kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def run_memory(args):
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # resets VmHWM to the current VmRSS
        hwm_reset = True
    except OSError:  # the peak then also covers the start-up; the line says so
        hwm_reset = False
    baseline = proc_status_kib("VmRSS")
    step = make_mlp_run("bf16")
    for _ in range(args.memory_steps):
        step()
    peak = proc_status_kib("VmHWM")
    emit({"bench": "train_memory", "impl": "pytorch", "mode": "bf16",
          "shape": "x".join(str(s) for s in MLP_SIZES),
          "definition": "VmHWM after the steps minus VmRSS before the model, HWM reset there",
          "hwm_reset": hwm_reset, "steps": args.memory_steps,
          "peak_mib": round((peak - baseline) / 1024, 1)})


def serve(args):
    """Commands: "mlp MODE", "cnn MODE", "tiny STEPS", "gpt-cpu SIZE MODE", each step-running
    command optionally followed by "compile" (torch.compile); MODE fp32, bf16 or fp16 (fp16 and
    compile where this PyTorch has them); "quit"."""
    runs = {}  # made on first use
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] == "quit":
            break
        compiled = command[-1] == "compile"
        words = command[:-1] if compiled else command
        if words[0] == "tiny" and len(words) == 2 and words[1].isdigit() and not compiled:
            count = int(words[1])
            steps = runs.get(tuple(command)) or make_tiny_run(count)
            runs[tuple(command)] = steps
            start = time.perf_counter()
            steps()
            emit({"us": (time.perf_counter() - start) * 1e6 / count})
            continue
        make = None
        mode = words[-1] if len(words) >= 2 else None
        if words[0] in ("mlp", "cnn") and len(words) == 2:
            build = make_mlp_run if words[0] == "mlp" else make_cnn_run
            make = lambda: build(mode, compiled=compiled)
        elif words[0] == "gpt-cpu" and len(words) == 3 and words[1] in GPT_CPU:
            make = lambda: make_gpt_cpu_run(words[1], mode, compiled)
        if make is None or mode not in ("fp32", "bf16", "fp16") or not supports(mode, compiled):
            emit({"error": f"train_twin --serve: unknown or unsupported command "
                           f"{line.strip()!r} (torch {torch.__version__}; expected 'mlp MODE', "
                           "'cnn MODE', 'gpt-cpu demo|larger MODE' with MODE fp32, bf16 or fp16, "
                           "each optionally followed by 'compile', 'tiny STEPS' or 'quit')"})
            continue
        step = runs.get(tuple(command)) or make()
        runs[tuple(command)] = step
        start = time.perf_counter()
        step()
        emit({"ms": (time.perf_counter() - start) * 1e3})
        torch.set_num_threads(args.threads)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tiny-steps", type=int, default=1000)
    parser.add_argument("--memory-steps", type=int, default=3)
    parser.add_argument("--only", choices=["all", "mlp", "cnn", "tiny", "gpt-cpu", "memory"], default="all")
    parser.add_argument("--serve", action="store_true", help="run steps on command (stdin)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.serve:
        serve(args)
        return
    if args.only == "memory":
        run_memory(args)  # alone in its process: the high-water mark is this run's
        return
    sections = {"mlp": run_mlp, "cnn": run_cnn, "tiny": run_tiny, "gpt-cpu": run_gpt_cpu}
    for name, run in sections.items():
        if args.only in ("all", name):
            run(args)
    if args.only == "all":
        print("train_twin: the memory section runs only with --only memory", file=sys.stderr)


if __name__ == "__main__":
    main()
