#!/usr/bin/env python3
"""PyTorch twin of hg-bench-ops --device cuda: the same GPU measurements through PyTorch,
printed as the same JSON lines with "impl": "pytorch".

  python3 benchmarks/twin/ops_twin.py [--only gemm|bandwidth|attention] [--reps 10] [--iters 5]

Sections (hg_bench_ops.cpp describes each; keep the two files in step):
  gemm       torch.matmul on [M, K] x [K, N] at 4096^3 and 8192^3 in fp32, tf32
             (torch.set_float32_matmul_precision("high")), fp16 and bf16, in TFLOP/s; and fp8:
             torch._scaled_mm of float8_e4m3fn operands into bfloat16. PyTorch's
             other matmul settings stay at their defaults (what a user gets); the line records
             whether fp16/bf16 GEMMs may reduce in reduced precision.
  bandwidth  a 1 GiB float32 copy_ (bytes read + written), then the unscale+inf-check kernel
             (torch._amp_foreach_non_finite_check_and_unscale_, and GradScaler.unscale_ around
             it) and torch.optim.AdamW(fused=True).step() over GPT-2 small's parameters (124M
             float32 in 148 tensors), each as a fraction of the copy bandwidth for the bytes it
             must move (8 B/element for unscale, 28 for AdamW).
  attention  causal F.scaled_dot_product_attention at (B 8, H 12, T 1024, E 64) in fp16 and
             bf16, forward and forward + backward, in TFLOP/s of the causal half's matmuls;
             "kernel" names the SDPA backend PyTorch used.
Times: CUDA events around --iters calls, the median of --reps repeats after --warmup calls
(NOTE [GPU timing] in bench_util.h); peak_mib is torch.cuda.max_memory_allocated() from just
before the inputs are made to the end of the timing.

Needs python3 with a CUDA build of PyTorch; benchmarks/run-gpu runs it.
"""
import argparse

import torch

from gpu_timing import DEVICE, emit, ms_per_call, ms_per_call_between

GEMM_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))
# name, dtype, float32 matmul precision
GEMM_MODES = (("fp32", torch.float32, "highest"), ("tf32", torch.float32, "high"),
              ("fp16", torch.float16, "highest"), ("bf16", torch.bfloat16, "highest"))
DTYPE_NAMES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}
FUSED_TARGET = 0.8


def peak_mib():
    return round(torch.cuda.max_memory_allocated() / 2**20, 1)


def fresh_peak():
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()


def matmul_flag(name):
    """A torch.backends.cuda.matmul setting, or None where this PyTorch lacks it."""
    try:
        return bool(getattr(torch.backends.cuda.matmul, name))
    except (AttributeError, AssertionError):  # older versions raise AssertionError
        return None


def run_gemm(args):
    reduced = {torch.float16: matmul_flag("allow_fp16_reduced_precision_reduction"),
               torch.bfloat16: matmul_flag("allow_bf16_reduced_precision_reduction")}
    user_precision = torch.get_float32_matmul_precision()
    for m, k, n in GEMM_SHAPES:
        for name, dtype, precision in GEMM_MODES:
            torch.set_float32_matmul_precision(precision)
            fresh_peak()
            torch.manual_seed(1)
            a = torch.randn(m, k, device=DEVICE, dtype=dtype)
            b = torch.randn(k, n, device=DEVICE, dtype=dtype)
            ms = ms_per_call(lambda: torch.matmul(a, b), args)
            record = {"bench": "cuda_gemm", "impl": "pytorch", "mode": name,
                      "dtype": DTYPE_NAMES[dtype], "shape": f"{m}x{k}x{n}",
                      "tflops": round(2.0 * m * k * n / ms * 1e-9, 1), "ms": round(ms, 4),
                      "peak_mib": peak_mib(), "kernel": "torch.matmul"}
            if reduced.get(dtype) is not None:
                record["reduced_precision_reduction"] = reduced[dtype]
            emit(record)
            del a, b
    torch.set_float32_matmul_precision(user_precision)
    # fp8: torch._scaled_mm of float8_e4m3fn operands into bfloat16 (b column-major, as it asks).
    for m, k, n in GEMM_SHAPES:
        fresh_peak()
        torch.manual_seed(1)
        a = torch.randn(m, k, device=DEVICE).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device=DEVICE).to(torch.float8_e4m3fn).t()
        scale = torch.ones((), device=DEVICE)
        ms = ms_per_call(lambda: torch._scaled_mm(a, b, scale_a=scale, scale_b=scale,
                                                  out_dtype=torch.bfloat16), args)
        emit({"bench": "cuda_gemm", "impl": "pytorch", "mode": "fp8", "dtype": "float8_e4m3fn",
              "shape": f"{m}x{k}x{n}", "tflops": round(2.0 * m * k * n / ms * 1e-9, 1),
              "ms": round(ms, 4), "peak_mib": peak_mib(), "kernel": "torch._scaled_mm"})
        del a, b


def gpt2_small_shapes():
    """GPT-2 small's parameter shapes, nanoGPT's layout (wte tied to lm_head, V = 50304)."""
    V, T, C, L = 50304, 1024, 768, 12
    shapes = [(V, C), (T, C)]
    for _ in range(L):
        shapes += [(C,), (C,), (3 * C, C), (3 * C,), (C, C), (C,), (C,), (C,), (4 * C, C),
                   (4 * C,), (C, 4 * C), (C,)]
    return shapes + [(C,), (C,)]


def gpt2_small_params_with_grads():
    torch.manual_seed(2)
    params = []
    for shape in gpt2_small_shapes():
        param = torch.nn.Parameter(torch.randn(shape, device=DEVICE))
        param.grad = torch.randn(shape, device=DEVICE)
        params.append(param)
    return params


def emit_fused(bench, params, bytes_moved, ms, copy_gbps, api):
    gbps = bytes_moved / ms * 1e-6
    emit({"bench": bench, "impl": "pytorch", "dtype": "float32",
          "params": sum(p.numel() for p in params), "tensors": len(params),
          "bytes": bytes_moved, "ms": round(ms, 4), "gbps": round(gbps, 1),
          "copy_gbps": round(copy_gbps, 1), "fraction_of_copy": round(gbps / copy_gbps, 3),
          "target": FUSED_TARGET, "met": gbps / copy_gbps >= FUSED_TARGET,
          "peak_mib": peak_mib(), "api": api})


def run_bandwidth(args):
    # The ceiling: dst.copy_(src), 1 GiB each.
    fresh_peak()
    numel = 1 << 28
    torch.manual_seed(1)
    src = torch.randn(numel, device=DEVICE)
    dst = torch.empty_like(src)
    ms = ms_per_call(lambda: dst.copy_(src), args)
    bytes_moved = 2 * src.numel() * src.element_size()
    copy_gbps = bytes_moved / ms * 1e-6
    emit({"bench": "cuda_copy", "impl": "pytorch", "dtype": "float32", "numel": numel,
          "bytes": bytes_moved, "ms": round(ms, 4), "gbps": round(copy_gbps, 1),
          "peak_mib": peak_mib()})
    del src, dst

    # Unscale + inf check: the kernel itself, then GradScaler.unscale_ (hg-bench-ops times
    # halfgrad's GradScaler::unscale_; torch's adds making found_inf and the reciprocal of the
    # scale). Scale 1 keeps the gradients' values from one call to the next.
    fresh_peak()
    params = gpt2_small_params_with_grads()
    numel = sum(p.numel() for p in params)
    grads = [p.grad for p in params]
    found_inf = torch.zeros(1, device=DEVICE)
    inv_scale = torch.ones(1, device=DEVICE)
    ms = ms_per_call(
        lambda: torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale),
        args)
    emit_fused("cuda_unscale", params, 8 * numel, ms, copy_gbps,
               "torch._amp_foreach_non_finite_check_and_unscale_")
    opt = torch.optim.AdamW(params)  # holds the parameters; never steps here
    scaler = torch.amp.GradScaler(DEVICE, init_scale=1.0)
    scaler.scale(torch.ones(1, device=DEVICE))  # the scale lives on the GPU
    ms = ms_per_call_between(lambda: scaler.unscale_(opt), scaler.update, args)
    emit_fused("cuda_unscale", params, 8 * numel, ms, copy_gbps, "GradScaler.unscale_")
    del params, grads, opt, scaler

    # AdamW: nanoGPT's settings; the first (warm-up) step makes exp_avg and exp_avg_sq.
    fresh_peak()
    params = gpt2_small_params_with_grads()
    opt = torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            fused=True)
    ms = ms_per_call(opt.step, args)
    emit_fused("cuda_adamw", params, 28 * sum(p.numel() for p in params), ms, copy_gbps,
               "torch.optim.AdamW(fused=True).step")


def sdpa_backend(q, k, v):
    """The SDPA backend PyTorch picks for these inputs, or "unknown"."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
                        SDPBackend.CUDNN_ATTENTION):
            try:
                with sdpa_kernel(backend):
                    torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
                return backend.name.lower()
            except RuntimeError:
                continue
    except ImportError:
        pass
    return "unknown"


def run_attention(args):
    B, H, T, E = 8, 12, 1024, 64
    half_product_flops = 2.0 * B * H * T * T * E / 2
    for dtype in (torch.float16, torch.bfloat16):
        fresh_peak()
        torch.manual_seed(3)
        q, k, v = (torch.randn(B, H, T, E, device=DEVICE, dtype=dtype, requires_grad=True)
                   for _ in range(3))
        dy = torch.randn(B, H, T, E, device=DEVICE, dtype=dtype)
        kernel = sdpa_backend(q.detach(), k.detach(), v.detach())

        def forward():
            with torch.no_grad():
                torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

        def forward_backward():
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            y.backward(dy)

        for name, products, call in (("forward", 2.0, forward),
                                     ("forward_backward", 7.0, forward_backward)):
            ms = ms_per_call(call, args)
            emit({"bench": "cuda_attention", "impl": "pytorch", "dtype": DTYPE_NAMES[dtype],
                  "pass": name, "shape": f"{B}x{H}x{T}x{E}", "causal": True,
                  "tflops": round(products * half_product_flops / ms * 1e-9, 1),
                  "ms": round(ms, 4), "peak_mib": peak_mib(), "kernel": kernel})
        del q, k, v, dy


def run_linear_backward(args):
    """The cuda_linear_backward lines: dx = g w, dw = g^T x and db = g.sum(0) in bf16 at the
    GPT step's shapes, each alone (hg-bench-ops' linear_backward section)."""
    M = 8 * 1024
    for N, K in ((768, 768), (3072, 768), (768, 3072), (50304, 768)):
        torch.manual_seed(4)
        g = torch.randn(M, N, device=DEVICE, dtype=torch.bfloat16)
        x = torch.randn(M, K, device=DEVICE, dtype=torch.bfloat16)
        w = torch.randn(N, K, device=DEVICE, dtype=torch.bfloat16)
        pieces = (("dx", 2.0 * M * N * K, 2.0 * (M * N + N * K + M * K), lambda: g @ w),
                  ("dw", 2.0 * M * N * K, 2.0 * (M * N + M * K + N * K), lambda: g.t() @ x),
                  ("db", 1.0 * M * N, 2.0 * (M * N + N), lambda: g.sum(0)))
        with torch.no_grad():
            for name, flops, bytes_moved, call in pieces:
                ms = ms_per_call(call, args)
                emit({"bench": "cuda_linear_backward", "impl": "pytorch", "piece": name,
                      "shape": f"M{M}xN{N}xK{K}", "ms": round(ms, 4),
                      "tflops": round(flops / ms * 1e-9, 1),
                      "gbps": round(bytes_moved / ms * 1e-6)})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--only", choices=["all", "gemm", "bandwidth", "attention",
                                           "linear_backward"],
                        default="all")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("ops_twin: PyTorch sees no CUDA device")
    emit({"bench": "cuda_device", "impl": "pytorch", "name": torch.cuda.get_device_name(),
          "torch": torch.__version__, "cuda": torch.version.cuda})
    sections = {"gemm": run_gemm, "bandwidth": run_bandwidth, "attention": run_attention,
                "linear_backward": run_linear_backward}
    for name, run in sections.items():
        if args.only in ("all", name):
            run(args)


if __name__ == "__main__":
    main()
