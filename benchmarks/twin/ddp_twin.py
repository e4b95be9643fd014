"""The PyTorch peer of benchmarks/run-ddp: the train_gpt demo's GPT (gpt_model.py, the 2-digit
addition task's shape: vocab 13, block 9, 2 layers, 4 heads, width 48) trained by
torch.nn.parallel.DistributedDataParallel over the gloo backend, one thread per rank, on one
rank and on two, with the demo's step (autocast, cross_entropy, backward, clip_grad_norm_,
AdamW). Prints one JSON line per configuration and repetition:

  {"bench": "train_gpt_ddp", "impl": "pytorch", "config": "1x1" | "2x1", "step_ms": ...}

Run with Debian's interpreter (/usr/bin/python3, PyTorch 1.13); the ranks are processes of
torch.multiprocessing on 127.0.0.1.
"""
import argparse
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_model import GPT, GptConfig, param_groups  # noqa: E402

VOCAB, BLOCK = 13, 9


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank, world, port, args, results):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    config = GptConfig(vocab=VOCAB, block=BLOCK, layers=2, heads=4, embd=48, batch=args.batch)
    model = torch.nn.parallel.DistributedDataParallel(GPT(config))
    opt = torch.optim.AdamW(param_groups(model.module), lr=3e-3, betas=(0.9, 0.99))
    generator = torch.Generator().manual_seed(rank)
    idx = torch.randint(0, VOCAB, (args.batch, BLOCK), generator=generator)
    targets = torch.randint(0, VOCAB, (args.batch * BLOCK,), generator=generator)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.dtype == "bf16"):
            loss = F.cross_entropy(model(idx).view(-1, VOCAB), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    for _ in range(args.warmup):
        step()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    dist.barrier()
    if rank == 0:
        results.put((time.perf_counter() - start) * 1e3 / args.steps)
    dist.destroy_process_group()


def run(world, args):
    context = mp.get_context("spawn")
    results = context.SimpleQueue()
    mp.start_processes(rank_main, args=(world, free_port(), args, results), nprocs=world,
                       start_method="spawn")
    return results.get()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    args = parser.parse_args()
    for _ in range(args.reps):
        for world in (1, 2):
            step_ms = run(world, args)
            tokens_per_s = world * args.batch * BLOCK * 1e3 / step_ms
            print(json.dumps({"bench": "train_gpt_ddp", "impl": "pytorch",
                              "config": f"{world}x1", "ranks": world, "batch_per_rank": args.batch,
                              "dtype": args.dtype, "steps": args.steps,
                              "step_ms": round(step_ms, 3), "tokens_per_s": round(tokens_per_s),
                              "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
