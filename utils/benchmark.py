"""Side-by-side timing: every variant measured in one run, interleaved, reported as a ratio.

    .venv/bin/python -m utils.benchmark            # full size: batch 8, 1024 tokens, d 768, 12 heads
    .venv/bin/python -m utils.benchmark --small    # the size notebook 06 uses

Absolute times depend on the machine; the ratios to one baseline are what carries over.
"""
import argparse
import statistics
import time

import torch
from tqdm.auto import tqdm


def expect_same(actual, expected, atol: float, rtol: float, what: str = "outputs"):
    """Raise AssertionError unless two results agree: a benchmark times only variants that do.

    Not torch.testing.assert_close: its first call imports torch.distributed and sympy
    (1.5 s), which would be most of a small benchmark's time.
    """
    if actual.shape != expected.shape or not torch.allclose(actual, expected, atol=atol, rtol=rtol):
        gap = (actual - expected).abs().max().item() if actual.shape == expected.shape else "shapes differ"
        raise AssertionError(f"{what}: {tuple(actual.shape)} vs {tuple(expected.shape)}, largest difference {gap}")


def compare(functions: dict, x, repeats: int = 5, warmup: int = 1, baseline: str | None = None) -> list[dict]:
    """Median wall time of each function on x; rounds interleave the functions so that a busy
    moment of the machine hits all of them alike."""
    times = {name: [] for name in functions}
    with torch.inference_mode():
        for fn in functions.values():
            for _ in range(warmup):
                fn(x)
        for _ in tqdm(range(repeats), desc="timing rounds", leave=False):
            for name, fn in functions.items():
                start = time.perf_counter()
                fn(x)
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians[baseline or next(iter(functions))]
    return [{"variant": name, "ms": 1e3 * m, "relative": m / base} for name, m in medians.items()]


def format_rows(rows) -> str:
    width = max(len(r["variant"]) for r in rows)
    lines = [f"{'variant':<{width}}  {'median ms':>10}  {'time / baseline':>15}"]
    lines += [f"{r['variant']:<{width}}  {r['ms']:>10.1f}  {r['relative']:>14.2f}x" for r in rows]
    return "\n".join(lines)


def mha_benchmark(batch=8, tokens=1024, d=768, heads=12, repeats=5, seed=0):
    from utils.mha_variants import all_variants
    from utils.multihead import MultiHeadAttention

    torch.manual_seed(seed)
    mha = MultiHeadAttention(d, d, tokens, 0.0, heads).eval()
    x = torch.randn(batch, tokens, d, generator=torch.Generator().manual_seed(seed))
    variants = all_variants(mha, tokens)
    with torch.inference_mode():
        reference = mha(x)
        for name, fn in variants.items():
            expect_same(fn(x), reference, atol=1e-4, rtol=1e-3, what=name)
    return compare(variants, x, repeats=repeats, baseline="MultiHeadAttention")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="batch 2, 256 tokens (as in notebook 06)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    size = dict(batch=2, tokens=256) if args.small else dict(batch=8, tokens=1024)
    print(f"multi-head attention, d=768, 12 heads, {size}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads")
    print(format_rows(mha_benchmark(**size, repeats=args.repeats)))
