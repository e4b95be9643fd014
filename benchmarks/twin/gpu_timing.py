"""What the PyTorch CUDA twins (ops_twin.py, gpt_twin.py) share: the device, the JSON lines they
print, and how they time GPU work (NOTE [GPU timing] in bench_util.h): CUDA events around
--iters calls, the median of --reps repeats after --warmup calls.

The twins run as scripts from this folder, which puts it on sys.path: `from gpu_timing import
...` finds this file.
"""
import json
import statistics

import torch

DEVICE = "cuda"


def emit(record):
    print(json.dumps(record), flush=True)


def ms_per_call(call, args):
    """Milliseconds per call: events around --iters calls, median of --reps repeats."""
    for _ in range(args.warmup):
        call()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    per_call = []
    for _ in range(args.reps):
        start.record()
        for _ in range(args.iters):
            call()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) / args.iters)
    return statistics.median(per_call)


def ms_per_call_between(call, between, args):
    """As ms_per_call, but each call has its own events and `between` runs after it, untimed."""
    for _ in range(args.warmup):
        call()
        between()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters)]
    per_call = []
    for _ in range(args.reps):
        for i in range(args.iters):
            starts[i].record()
            call()
            ends[i].record()
            between()
        total = 0.0
        for i in range(args.iters):
            ends[i].synchronize()
            total += starts[i].elapsed_time(ends[i])
        per_call.append(total / args.iters)
    return statistics.median(per_call)
