#!/usr/bin/env python3
"""Ratios of halfgrad's GPU benchmarks against their PyTorch twins, from the JSON lines of
hg-bench-ops --device cuda, ops_twin.py, hg-bench-train --device cuda and gpt_twin.py (any
order, any number of files). benchmarks/run-gpu runs them all and then this.

  python3 benchmarks/twin/gpu_report.py LINES.jsonl...

Prints one JSON line per ratio on stdout and a table of the targets on stderr:
  cuda_gemm_ratio      halfgrad TFLOP/s / PyTorch TFLOP/s (PyTorch's time / halfgrad's), per
                       mode and shape
                       (target >= 0.95 for fp16 and bf16 at 8192^3)
  cuda_copy_ratio      halfgrad's copy bandwidth / PyTorch's
  cuda_fused           unscale+inf-check and AdamW: halfgrad's bandwidth as a fraction of
                       the best copy bandwidth measured by either (target >= 0.8), next to
                       PyTorch's fraction
  cuda_attention_ratio causal attention, forward and forward + backward, per dtype: PyTorch's
                       time / halfgrad's (no target of its own: part of the GPT step), with
                       the kernels each ran and their peak memory
  train_gpt_speedup    halfgrad tokens/s / PyTorch tokens/s per mode (target >= 1.5 in bf16),
                       halfgrad bf16 / halfgrad fp32 (target >= 3), and peak memory
                       halfgrad / PyTorch per mode
Exits 1 when a halfgrad measurement that has a target is missing (its run failed), else 0;
targets not met are reported, not errors.
"""
import json
import sys

GEMM_MODES = ["fp32", "tf32", "fp16", "bf16"]
GEMM_TARGET = 0.95
FUSED_TARGET = 0.8
GPT_VS_TORCH_TARGET = 1.5
GPT_VS_FP32_TARGET = 3.0


def read_lines(paths):
    records = []
    for path in paths:
        with open(path) as lines:
            for line in lines:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        records.append(json.loads(line))
                    except json.JSONDecodeError:
                        print(f"gpu_report: skipping a line of {path} that is not JSON: {line}",
                              file=sys.stderr)
    return records


def find(records, bench, impl, **keys):
    for record in records:
        if (record.get("bench") == bench and record.get("impl") == impl
                and all(record.get(k) == v for k, v in keys.items())):
            return record
    return None


def emit(record):
    print(json.dumps(record), flush=True)


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    records = read_lines(sys.argv[1:])
    table = []  # (what, value, target, met)
    missing = []

    def judge(what, value, target):
        met = None if value is None or target is None else value >= target
        table.append((what, value, target, met))
        if value is None and target is not None:
            missing.append(what)
        return met

    # GEMM: every mode and shape halfgrad or PyTorch measured.
    gemm_keys = sorted({(r["mode"], r["shape"]) for r in records if r.get("bench") == "cuda_gemm"},
                       key=lambda k: (int(k[1].split("x")[0]), GEMM_MODES.index(k[0])
                                      if k[0] in GEMM_MODES else len(GEMM_MODES)))
    for mode, shape in gemm_keys:
        hg = find(records, "cuda_gemm", "halfgrad", mode=mode, shape=shape)
        torch = find(records, "cuda_gemm", "pytorch", mode=mode, shape=shape)
        target = (GEMM_TARGET if mode in ("fp16", "bf16", "fp8") and shape == "8192x8192x8192"
                  else None)
        peer = "torch._scaled_mm" if mode == "fp8" else "torch.matmul"
        ratio = torch["ms"] / hg["ms"] if hg and torch and hg["ms"] else None  # = TFLOP/s ratio
        record = {"bench": "cuda_gemm_ratio", "mode": mode, "shape": shape,
                  "halfgrad_tflops": hg and hg["tflops"],
                  "pytorch_tflops": torch and torch["tflops"],
                  "ratio": ratio and round(ratio, 3),
                  "halfgrad_peak_mib": hg and hg.get("peak_mib"),
                  "pytorch_peak_mib": torch and torch.get("peak_mib")}
        if target is not None:
            record.update(target=target, met=judge(f"gemm {mode} {shape} vs {peer}", ratio, target))
        else:
            judge(f"gemm {mode} {shape} vs {peer}", ratio, None)
        emit(record)

    # Copy bandwidth: the ceiling of the fused passes.
    hg_copy = find(records, "cuda_copy", "halfgrad")
    torch_copy = find(records, "cuda_copy", "pytorch")
    copies = [r["gbps"] for r in (hg_copy, torch_copy) if r]
    best_copy = max(copies) if copies else None
    if hg_copy and torch_copy:
        ratio = hg_copy["gbps"] / torch_copy["gbps"]
        emit({"bench": "cuda_copy_ratio", "halfgrad_gbps": hg_copy["gbps"],
              "pytorch_gbps": torch_copy["gbps"], "ratio": round(ratio, 3)})
        judge("copy bandwidth vs PyTorch's", ratio, None)

    # Fused passes: fractions of the best copy bandwidth measured.
    apis = {"cuda_unscale": "torch._amp_foreach_non_finite_check_and_unscale_",
            "cuda_adamw": "torch.optim.AdamW(fused=True).step"}
    for bench, api in apis.items():
        hg = find(records, bench, "halfgrad")
        torch = find(records, bench, "pytorch", api=api)
        hg_fraction = hg["gbps"] / best_copy if hg and best_copy else None
        torch_fraction = torch["gbps"] / best_copy if torch and best_copy else None
        emit({"bench": "cuda_fused", "pass": bench, "best_copy_gbps": best_copy,
              "halfgrad_gbps": hg and hg["gbps"], "pytorch_gbps": torch and torch["gbps"],
              "halfgrad_fraction": hg_fraction and round(hg_fraction, 3),
              "pytorch_fraction": torch_fraction and round(torch_fraction, 3),
              "halfgrad_peak_mib": hg and hg.get("peak_mib"),
              "pytorch_peak_mib": torch and torch.get("peak_mib"),
              "target": FUSED_TARGET,
              "met": judge(f"{bench[5:]} fraction of copy bandwidth", hg_fraction, FUSED_TARGET)})
        judge(f"{bench[5:]} (PyTorch) fraction of copy bandwidth", torch_fraction, None)

    # Attention (the fused kernels against PyTorch's SDPA backend).
    attention_keys = sorted({(r["dtype"], r["pass"]) for r in records
                             if r.get("bench") == "cuda_attention"})
    for dtype, pass_name in attention_keys:
        hg = find(records, "cuda_attention", "halfgrad", dtype=dtype, **{"pass": pass_name})
        torch = find(records, "cuda_attention", "pytorch", dtype=dtype, **{"pass": pass_name})
        ratio = torch["ms"] / hg["ms"] if hg and torch and hg["ms"] else None
        emit({"bench": "cuda_attention_ratio", "dtype": dtype, "pass": pass_name,
              "halfgrad_tflops": hg and hg["tflops"], "pytorch_tflops": torch and torch["tflops"],
              "halfgrad_kernel": hg and hg.get("kernel"),
              "pytorch_kernel": torch and torch.get("kernel"), "ratio": ratio and round(ratio, 3),
              "halfgrad_peak_mib": hg and hg.get("peak_mib"),
              "pytorch_peak_mib": torch and torch.get("peak_mib")})
        judge(f"attention {dtype} {pass_name} vs PyTorch SDPA", ratio, None)

    # The pieces of a linear layer's backward (PyTorch's time over halfgrad's).
    piece_keys = sorted({(r["shape"], r["piece"]) for r in records
                         if r.get("bench") == "cuda_linear_backward"})
    for shape, piece in piece_keys:
        hg = find(records, "cuda_linear_backward", "halfgrad", shape=shape, piece=piece)
        torch = find(records, "cuda_linear_backward", "pytorch", shape=shape, piece=piece)
        ratio = torch["ms"] / hg["ms"] if hg and torch and hg["ms"] else None
        emit({"bench": "cuda_linear_backward_ratio", "shape": shape, "piece": piece,
              "halfgrad_ms": hg and hg["ms"], "pytorch_ms": torch and torch["ms"],
              "ratio": ratio and round(ratio, 3)})
        judge(f"linear backward {piece} {shape} vs PyTorch", ratio, None)

    # The GPT training step.
    for mode in ("fp32", "fp16", "bf16"):
        hg = find(records, "train_gpt", "halfgrad", mode=mode)
        torch = find(records, "train_gpt", "pytorch", mode=mode)
        if not hg and not torch:
            continue
        target = GPT_VS_TORCH_TARGET if mode == "bf16" else None
        speedup = hg["tokens_per_s"] / torch["tokens_per_s"] if hg and torch else None
        memory = hg["peak_mib"] / torch["peak_mib"] if hg and torch and torch["peak_mib"] else None
        record = {"bench": "train_gpt_speedup", "mode": mode, "vs": "pytorch",
                  "halfgrad": hg and hg["tokens_per_s"], "peer": torch and torch["tokens_per_s"],
                  "speedup": speedup and round(speedup, 3),
                  "halfgrad_peak_mib": hg and hg["peak_mib"],
                  "pytorch_peak_mib": torch and torch["peak_mib"],
                  "peak_memory_ratio": memory and round(memory, 3)}
        met = judge(f"gpt step {mode} tokens/s vs PyTorch", speedup, target)
        if target is not None:
            record.update(target=target, met=met)
        emit(record)
        judge(f"gpt step {mode} peak memory / PyTorch's", memory, None)
    hg_bf16 = find(records, "train_gpt", "halfgrad", mode="bf16")
    hg_fp32 = find(records, "train_gpt", "halfgrad", mode="fp32")
    if hg_bf16 or hg_fp32:
        speedup = (hg_bf16["tokens_per_s"] / hg_fp32["tokens_per_s"]
                   if hg_bf16 and hg_fp32 else None)
        emit({"bench": "train_gpt_speedup", "mode": "bf16", "vs": "halfgrad_fp32",
              "halfgrad": hg_bf16 and hg_bf16["tokens_per_s"],
              "peer": hg_fp32 and hg_fp32["tokens_per_s"], "speedup": speedup and round(speedup, 3),
              "target": GPT_VS_FP32_TARGET,
              "met": judge("gpt step bf16 vs halfgrad fp32", speedup, GPT_VS_FP32_TARGET)})

    # Where the step's GPU time goes: halfgrad's phase times over PyTorch's (below 1: halfgrad
    # is faster), and the step captured into a CUDA graph.
    for mode in ("fp32", "fp16", "bf16"):
        hg = find(records, "train_gpt_phases", "halfgrad", mode=mode)
        torch = find(records, "train_gpt_phases", "pytorch", mode=mode)
        if not hg or not torch:
            continue
        record = {"bench": "train_gpt_phases_ratio", "mode": mode}
        for phase in ("forward", "backward", "optimizer", "host"):
            key = f"{phase}_ms"
            ratio = hg[key] / torch[key] if torch[key] else None
            record[f"{phase}_halfgrad_over_pytorch"] = ratio and round(ratio, 3)
            judge(f"gpt {mode} {phase} ms, halfgrad / PyTorch", ratio, None)
        emit(record)
    graph = find(records, "train_gpt_graph", "halfgrad", mode="bf16")
    if graph and "ms" in graph:
        judge("gpt bf16 eager ms / captured graph ms", graph["eager_over_graph"], None)

    width = max((len(row[0]) for row in table), default=10)
    print(f"{'measurement':<{width}}  {'value':>8}  {'target':>7}  met", file=sys.stderr)
    for what, value, target, met in table:
        shown = "missing" if value is None else f"{value:.3f}"
        goal = "" if target is None else f">= {target:g}"
        verdict = "" if met is None else ("yes" if met else "NO")
        print(f"{what:<{width}}  {shown:>8}  {goal:>7}  {verdict}", file=sys.stderr)
    if missing:
        print(f"gpu_report: missing measurements (a run failed?): {', '.join(missing)}",
              file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
