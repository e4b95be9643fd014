#!/usr/bin/env python3
"""PyTorch twin of hg-bench-train --device cuda: the same GPT training step in PyTorch eager
(no torch.compile) with torch.autocast and GradScaler, printed as the same JSON lines with
"impl": "pytorch".

  python3 benchmarks/twin/gpt_twin.py [--batch 8] [--modes fp32 fp16 bf16] [--reps 10]
                                      [--iters 5] [--small]

The model is gpt_model.py's (halfgrad's nn::GPT as a PyTorch user writes it, with 12 blocks
here and F.scaled_dot_product_attention(is_causal=True)).

One step, as hg_bench_train.cpp's: zero_grad(set_to_none=True), forward and cross_entropy under
torch.autocast("cuda", dtype) (fp16, bf16), scaler.scale(loss).backward(), scaler.unscale_,
clip_grad_norm_ 1.0, scaler.step, scaler.update; torch.optim.AdamW(fused=True), lr 6e-4,
betas (0.9, 0.95), eps 1e-8, weight_decay 0.1 on parameters of 2 or more dims, 0 on the rest.
fp32 is true float32 (torch.set_float32_matmul_precision("highest")); fp16 turns the
GradScaler on; bf16 leaves it off. Times: CUDA events around --iters steps, the median of --reps
repeats after --warmup steps (NOTE [GPU timing] in bench_util.h); peak_mib is
torch.cuda.max_memory_allocated() from just before the model is built.

Needs python3 with a CUDA build of PyTorch; benchmarks/run-gpu runs it.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from gpt_model import GPT, GptConfig, param_groups
from gpu_timing import DEVICE, emit, ms_per_call


def gpt_config(args):
    if args.small:
        return GptConfig(512, 64, 2, 4, 128, args.batch)
    return GptConfig(args.vocab, 1024, 12, 12, 768, args.batch)


def make_run(mode, config):
    """The model, data, optimizer and scaler of one mode on the GPU; returns (step, state)."""
    torch.manual_seed(0)
    model = GPT(config).to(DEVICE)
    opt = torch.optim.AdamW(param_groups(model), lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                            fused=True)
    scaler = torch.amp.GradScaler(DEVICE, enabled=mode == "fp16")
    B, T, V = config.batch, config.block, config.vocab
    idx = torch.randint(0, V, (B, T), device=DEVICE)
    targets = torch.randint(0, V, (B * T,), device=DEVICE)
    dtype = torch.float16 if mode == "fp16" else torch.bfloat16
    state = {"model": model, "scaler": scaler, "loss": None}

    def step(mark=None):
        """One step; mark(i), when given, at the start (0), after the forward and loss (1),
        after the backward (2) and at the end (3), as hg-bench-train's GptRun::step."""
        if mark:
            mark(0)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE, dtype=dtype, enabled=mode != "fp32"):
            logits = model(idx)
            loss = F.cross_entropy(logits.view(-1, V), targets)
        if mark:
            mark(1)
        scaler.scale(loss).backward()
        if mark:
            mark(2)
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        if mark:
            mark(3)
        state["loss"] = loss

    return step, state


def phases(step, mode, args):
    """The train_gpt_phases line: events at step's marks, the median over --reps single steps,
    and host_ms, how long step() takes to return on the host."""
    events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    forward, backward, optimizer, host = [], [], [], []
    for _ in range(args.reps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step(lambda i: events[i].record())
        host.append((time.perf_counter() - start) * 1e3)
        events[3].synchronize()
        forward.append(events[0].elapsed_time(events[1]))
        backward.append(events[1].elapsed_time(events[2]))
        optimizer.append(events[2].elapsed_time(events[3]))
    emit({"bench": "train_gpt_phases", "impl": "pytorch", "mode": mode,
          "forward_ms": round(statistics.median(forward), 3),
          "backward_ms": round(statistics.median(backward), 3),
          "optimizer_ms": round(statistics.median(optimizer), 3),
          "host_ms": round(statistics.median(host), 3)})


def ops(step, mode, top=40):
    """train_gpt_ops lines: the largest self device times of one step under torch.profiler
    (aten ops and the kernels they launch, as key_averages() names them)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()

    def device_us(event):
        for name in ("self_device_time_total", "self_cuda_time_total"):
            if hasattr(event, name):
                return getattr(event, name)
        return 0.0

    events = sorted(prof.key_averages(), key=device_us, reverse=True)
    for event in events[:top]:
        if device_us(event) <= 0:
            break
        emit({"bench": "train_gpt_ops", "impl": "pytorch", "mode": mode, "op": event.key,
              "calls": event.count, "ms": round(device_us(event) / 1e3, 3)})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=50304)
    parser.add_argument("--modes", nargs="+", choices=["fp32", "fp16", "bf16"],
                        default=["fp32", "fp16", "bf16"])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--small", action="store_true", help="a small model (smoke tests)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("gpt_twin: PyTorch sees no CUDA device")
    torch.set_float32_matmul_precision("highest")
    config = gpt_config(args)
    tokens = config.batch * config.block
    emit({"bench": "cuda_device", "impl": "pytorch", "name": torch.cuda.get_device_name(),
          "torch": torch.__version__, "cuda": torch.version.cuda})
    tokens_per_s = {}
    for mode in ("fp32", "fp16", "bf16"):
        if mode not in args.modes:
            continue
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step, state = make_run(mode, config)
        ms = ms_per_call(step, args)
        peak = torch.cuda.max_memory_allocated() / 2**20
        tokens_per_s[mode] = tokens / ms * 1e3
        emit({"bench": "train_gpt", "impl": "pytorch", "mode": mode, "shape": config.shape(),
              "batch": config.batch, "tokens": tokens, "ms": round(ms, 3),
              "tokens_per_s": round(tokens_per_s[mode]), "peak_mib": round(peak, 1),
              "params": sum(p.numel() for p in state["model"].parameters()),
              "loss": round(state["loss"].item(), 4), "scale": state["scaler"].get_scale()})
        phases(step, mode, args)
        if mode == "bf16":
            ops(step, mode)
        del step, state
    if "bf16" in tokens_per_s and "fp32" in tokens_per_s:
        speedup = tokens_per_s["bf16"] / tokens_per_s["fp32"]
        emit({"bench": "train_gpt_speedup", "impl": "pytorch", "mode": "bf16",
              "vs": "pytorch_fp32", "pytorch": round(tokens_per_s["bf16"]),
              "peer": round(tokens_per_s["fp32"]), "speedup": round(speedup, 3)})


if __name__ == "__main__":
    main()
