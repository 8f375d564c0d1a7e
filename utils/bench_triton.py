"""Time and TFLOP/s of the Triton FlashAttention forward, notebook 14's tiled PyTorch forward and
PyTorch's SDPA, side by side, in one run (notebook 15).

    python -m utils.bench_triton                 # on a GPU: bf16, T = 1K .. 16K, two head shapes, causal and not
    python -m utils.bench_triton --max-tokens 4096

On a GPU every time is the median of CUDA-event timings after a warm-up (the first call compiles
and, for the autotuned kernel, tries each config). "kernel" is the course's kernel with its
default 64 x 64 tiles (the notebook's model answer); "autotuned" is the same kernel with the
blocks, warps and pipeline stages chosen by triton.autotune among a few; "tiled" is notebook 14's
Python loop over tiles of 256, skipped where its time would pass --tiled-budget seconds. The
errors are the largest |out - exact| over batch item 0, head 0, exact being float64 attention.
Without a GPU the same code runs in Triton's interpreter at small sizes: the times then measure
Python executing each program, nothing about a GPU (make test runs this path).
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn.functional as F

from utils.flash_attention import flash_attention_forward
from utils.flash_triton import flash_forward, flash_forward_kernel, interpreted, kernel_device

# Dense bf16 tensor-core peaks from NVIDIA's datasheets (TFLOP/s without sparsity), by device name.
PEAK_BF16 = {"H200": 989.4, "H100": 989.4, "A100": 312.0}


def attention_flops(B, H, T, d, causal) -> float:
    """Multiply-adds x 2 of the two products (q kᵀ and p v), T_q = T_k = T; causal computes half."""
    return 4 * B * H * T * T * d / (2 if causal else 1)


def peak_tflops():
    if interpreted():
        return None
    name = torch.cuda.get_device_name()
    return next((peak for key, peak in PEAK_BF16.items() if key in name), None)


def timed(fn, reps: int, warm_up: bool = True):
    """(median seconds of `reps` calls, the last call's result), after one warm-up call unless
    told otherwise; CUDA events on a GPU."""
    if warm_up:
        fn()
    times = []
    for _ in range(reps):
        if interpreted():
            start = time.perf_counter()
            result = fn()
            times.append(time.perf_counter() - start)
            continue
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        result = fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times), result


def exact_head(q, k, v, causal, chunk=2048):
    """float64 attention of batch item 0, head 0, computed in chunks of queries: (T_q, d)."""
    q0, k0, v0 = (t[0, 0].double() for t in (q, k, v))
    T_q, T_k = q0.shape[0], k0.shape[0]
    outs = []
    for i0 in range(0, T_q, chunk):
        s = q0[i0:i0 + chunk] @ k0.T / math.sqrt(q0.shape[-1])
        if causal:
            rows = torch.arange(i0, min(i0 + chunk, T_q), device=q.device)[:, None] + (T_k - T_q)
            s = s.masked_fill(torch.arange(T_k, device=q.device)[None, :] > rows, float("-inf"))
        outs.append(torch.softmax(s, -1) @ v0)
    return torch.cat(outs)


def autotuned_kernel():
    """flash_forward_kernel under triton.autotune: a few tile sizes, warps and stages (GPU only)."""
    import triton
    configs = [triton.Config({"BLOCK_Q": bq, "BLOCK_K": bk}, num_warps=w, num_stages=s)
               for bq, bk, w, s in ((64, 64, 4, 3), (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 2), (128, 32, 4, 4))]
    return triton.autotune(configs, key=["T_q", "T_k", "CAUSAL", "D"])(flash_forward_kernel)


def measure(shapes, tokens, causal_modes=(False, True), dtype=torch.bfloat16, reps=10, tiled_budget=20.0, seed=0,
            forward=None, autotune=True):
    """One row per (B, H, d), causal, T: seconds, TFLOP/s and error of each contender; `forward`
    (q, k, v, causal) -> (out, lse) is the kernel measured (default: the course's, 64 x 64 tiles)."""
    device, rows = kernel_device(), []
    forward = forward or (lambda q, k, v, causal: flash_forward(flash_forward_kernel, q, k, v, causal))
    tuned = None if interpreted() or not autotune else autotuned_kernel()
    for B, H, d in shapes:
        for causal in causal_modes:
            tiled_last = None  # seconds of the tiled forward at the previous T
            for T in tokens:
                g = torch.Generator(device=device).manual_seed(seed)
                q, k, v = (torch.randn(B, H, T, d, generator=g, device=device, dtype=dtype) for _ in range(3))
                contenders = {"kernel": lambda: forward(q, k, v, causal)[0],
                              "SDPA": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal)}
                if tuned is not None:
                    contenders["autotuned"] = lambda: flash_forward(tuned, q, k, v, causal, block_q=None)[0]
                if tiled_last is None or tiled_last * 4 <= tiled_budget:  # it grows like T²
                    contenders["tiled"] = lambda: flash_attention_forward(q, k, v, causal, 256, 256)[0]
                row = {"B": B, "H": H, "d": d, "causal": causal, "T": T}
                exact = exact_head(q, k, v, causal)
                with torch.no_grad():
                    for name, fn in contenders.items():
                        slow = name == "tiled" and T >= 4096  # seconds a call: once, no warm-up (nothing to compile)
                        row[f"{name} s"], out = timed(fn, 1 if slow or interpreted() else reps, warm_up=not slow)
                        row[f"{name} err"] = (out[0, 0].double() - exact).abs().max().item()
                        row[f"{name} TFLOP/s"] = attention_flops(B, H, T, d, causal) / row[f"{name} s"] / 1e12
                tiled_last = row.get("tiled s")
                if tuned is not None:
                    best = tuned.best_config
                    row["best"] = f"{best.kwargs['BLOCK_Q']}x{best.kwargs['BLOCK_K']} w{best.num_warps} s{best.num_stages}"
                rows.append(row)
    return rows


def _cell(row, name):
    if f"{name} s" not in row:
        return f"{'skipped':>20}"
    return f"{row[f'{name} s'] * 1e3:9.3f} {row[f'{name} TFLOP/s']:6.1f} {row[f'{name} err']:.0e}"


def format_rows(rows) -> str:
    names = [n for n in ("kernel", "autotuned", "tiled", "SDPA") if any(f"{n} s" in r for r in rows)]
    head = " | ".join(f"{n + ': ms TFLOP/s err':>26}" for n in names)
    lines = [f"{'B':>2} {'H':>3} {'d':>4} {'causal':>6} {'T':>6} | {head} | {'kernel/SDPA':>11}"]
    for r in rows:
        cells = " | ".join(f"{_cell(r, n):>26}" for n in names)
        best = f"  best {r['best']}" if "best" in r else ""
        lines.append(f"{r['B']:>2} {r['H']:>3} {r['d']:>4} {r['causal']!s:>6} {r['T']:>6} | {cells} | "
                     f"{r['kernel s'] / r['SDPA s']:>10.2f}x{best}")
    return "\n".join(lines)


def summary(rows, min_tokens=4096) -> str:
    long = [r for r in rows if r["T"] >= min_tokens]
    if not long:
        return f"no row with T >= {min_tokens}"
    worst = max(long, key=lambda r: r["kernel s"] / r["SDPA s"])
    ratio = worst["kernel s"] / worst["SDPA s"]
    return (f"at T >= {min_tokens}: the kernel takes at most {ratio:.2f}x SDPA's time "
            f"(B={worst['B']} H={worst['H']} d={worst['d']} causal={worst['causal']} T={worst['T']}); goal 2x: "
            f"{'met' if ratio <= 2 else 'NOT met'}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=16384)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--tiled-budget", type=float, default=20.0, help="seconds a tiled call may be predicted to take")
    args = parser.parse_args(argv)
    import triton
    if interpreted():  # Python runs every program: small sizes only
        shapes, tokens, dtype = [(1, 2, 16)], [64, 128], torch.float32
        print(f"no GPU: Triton {triton.__version__}'s interpreter on the CPU, float32, small sizes; "
              "the times measure Python running each program, not a GPU")
    else:
        shapes, dtype = [(1, 16, 64), (4, 16, 128)], torch.bfloat16
        tokens = [2 ** i for i in range(10, int(math.log2(args.max_tokens)) + 1)]
        peak = peak_tflops()
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}, bf16; "
              f"dense bf16 peak {f'{peak:.0f} TFLOP/s (datasheet)' if peak else 'unknown for this GPU'}; "
              f"medians of {args.reps} CUDA-event timings after a warm-up")
    rows = measure(shapes, tokens, dtype=dtype, reps=args.reps, tiled_budget=args.tiled_budget)
    print(format_rows(rows))
    if not interpreted():
        print(summary(rows))
        if peak_tflops():
            best = max(rows, key=lambda r: r["kernel TFLOP/s"])
            print(f"the kernel's best: {best['kernel TFLOP/s']:.0f} TFLOP/s, {best['kernel TFLOP/s'] / peak_tflops():.0%} of the peak; "
                  f"SDPA's best: {max(r['SDPA TFLOP/s'] for r in rows):.0f} TFLOP/s")
    return rows


if __name__ == "__main__":
    main()
