"""Side-by-side timing: every variant measured in one run, interleaved, reported as a ratio.

    .venv/bin/python -m utils.benchmark            # full size: batch 8, 1024 tokens, d 768, 12 heads
    .venv/bin/python -m utils.benchmark --small    # the size notebook 06 uses
    .venv/bin/python -m utils.benchmark --device cuda   # on a GPU

Absolute times depend on the machine; the ratios to one baseline are what carries over.

Every benchmark of the course reads its clock through `now(device)` (or `timed`), which first waits
for the device: a GPU runs kernels asynchronously, and a clock read without waiting measures how
fast Python queued the work, not how long it ran. `device_of` says where a tensor or module lives.
"""
import argparse
import os
import statistics
import time

import torch
from tqdm.auto import tqdm


def device_of(obj=None) -> torch.device:
    """Where a tensor or a module (its first parameter or buffer) lives; a device name as a
    torch.device; None, or a module without tensors: the default device (the CPU unless changed)."""
    if isinstance(obj, torch.Tensor):
        return obj.device
    if isinstance(obj, torch.nn.Module):
        for t in (*obj.parameters(), *obj.buffers()):
            return t.device
        return torch.get_default_device()
    return torch.get_default_device() if obj is None else torch.device(obj)


def demo_device() -> str:
    """Where a notebook's demonstrations (timings, memory) run: "cuda" when a GPU is present and the
    notebook is not being graded, else "cpu". Grading stays on the CPU: its checks and tolerances are
    set for the CPU, and a grader must give every learner the same result on any machine."""
    return "cuda" if torch.cuda.is_available() and not os.getenv("NBGRADER_EXECUTION") else "cpu"


def synchronize(device=None):
    """Wait until `device` (a device, tensor or module) has finished the work queued on it."""
    device = device_of(device)
    if device.type not in ("cpu", "meta"):
        torch.accelerator.synchronize(device)


def now(device=None) -> float:
    """time.perf_counter() once `device` has finished its queued work: the clock of every benchmark."""
    synchronize(device)
    return time.perf_counter()


def timed(fn, device=None):
    """(seconds, fn()) with the device's queued work finished before both clock reads."""
    start = now(device)
    out = fn()
    return now(device) - start, out


def expect_same(actual, expected, atol: float, rtol: float, what: str = "outputs"):
    """Raise AssertionError unless two results agree: a benchmark times only variants that do.

    Not torch.testing.assert_close: its first call imports torch.distributed and sympy
    (1.5 s), which would be most of a small benchmark's time.
    """
    if actual.shape != expected.shape or not torch.allclose(actual, expected, atol=atol, rtol=rtol):
        gap = (actual - expected).abs().max().item() if actual.shape == expected.shape else "shapes differ"
        raise AssertionError(f"{what}: {tuple(actual.shape)} vs {tuple(expected.shape)}, largest difference {gap}")


def compare(functions: dict, x, repeats: int = 5, warmup: int = 1, baseline: str | None = None) -> list[dict]:
    """Median wall time of each function on x (on x's device); rounds interleave the functions so
    that a busy moment of the machine hits all of them alike."""
    device = device_of(x)
    times = {name: [] for name in functions}
    with torch.inference_mode():
        for fn in functions.values():
            for _ in range(warmup):
                fn(x)
        for _ in tqdm(range(repeats), desc="timing rounds", leave=False):
            for name, fn in functions.items():
                times[name].append(timed(lambda: fn(x), device)[0])
    medians = {name: statistics.median(t) for name, t in times.items()}
    base = medians[baseline or next(iter(functions))]
    return [{"variant": name, "ms": 1e3 * m, "relative": m / base} for name, m in medians.items()]


def out_of_order(rows, size: str, columns, slack: float = 0.8) -> list[tuple]:
    """(column, smaller size, larger size, ratio) for each pair of neighbouring rows where the larger
    size took less than `slack` times the smaller size's time. A cost that grows with the size cannot
    do that: the smaller size's run was disturbed (other work on the machine, a clock change)."""
    found = []
    for a, b in zip(rows, rows[1:]):
        for c in columns:
            if a.get(c) and b.get(c) and b[size] > a[size] and b[c] < slack * a[c]:
                found.append((c, a[size], b[size], b[c] / a[c]))
    return found


def steady(measure_row, sizes, size: str, columns, retries: int = 2, slack: float = 0.8) -> list[dict]:
    """[measure_row(s) for s in sizes], measured again (at most `retries` more times) at the sizes
    whose times are out of order (`out_of_order`); each time kept is the smallest seen for its size,
    the other entries of a row are its first measurement's. On a quiet machine nothing is repeated."""
    rows = [measure_row(s) for s in sizes]
    for _ in range(retries):
        again = {x for _, a, b, _ in out_of_order(rows, size, columns, slack) for x in (a, b)}
        if not again:
            break
        for row in rows:
            if row[size] in again:
                new = measure_row(row[size])
                for c in columns:
                    if new.get(c) is not None and (row.get(c) is None or new[c] < row[c]):
                        row[c] = new[c]
    return rows


def order_warning(rows, size: str, columns, slack: float = 0.8) -> str | None:
    """One printable warning when some times are still out of order in the size, else None."""
    found = out_of_order(rows, size, columns, slack)
    if not found:
        return None
    pairs = "; ".join(f"{c}: {size} = {b} took {r:.2f}x the time of {size} = {a}" for c, a, b, r in found)
    return (f"warning: times that should grow with {size} do not ({pairs}). The machine was busy during part of "
            f"this run: rerun the cell on a quiet machine before drawing conclusions from these columns.")


def format_rows(rows) -> str:
    width = max(len(r["variant"]) for r in rows)
    lines = [f"{'variant':<{width}}  {'median ms':>10}  {'time / baseline':>15}"]
    lines += [f"{r['variant']:<{width}}  {r['ms']:>10.1f}  {r['relative']:>14.2f}x" for r in rows]
    return "\n".join(lines)


def mha_benchmark(batch=8, tokens=1024, d=768, heads=12, repeats=5, seed=0, device=None):
    from utils.mha_variants import all_variants
    from utils.multihead import MultiHeadAttention

    torch.manual_seed(seed)
    with torch.device("cpu"):  # the same weights and input on every device
        mha = MultiHeadAttention(d, d, tokens, 0.0, heads).eval()
    device = device_of(device)
    mha.to(device)
    variants = all_variants(mha, tokens)  # built where mha lives
    x = torch.randn(batch, tokens, d, generator=torch.Generator().manual_seed(seed), device="cpu").to(device)
    with torch.inference_mode():
        reference = mha(x)
        for name, fn in variants.items():
            expect_same(fn(x), reference, atol=1e-4, rtol=1e-3, what=name)
    return compare(variants, x, repeats=repeats, baseline="MultiHeadAttention")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="batch 2, 256 tokens (as in notebook 06)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default=None, help="where to run (default: the CPU)")
    args = parser.parse_args()
    size = dict(batch=2, tokens=256) if args.small else dict(batch=8, tokens=1024)
    print(f"multi-head attention, d=768, 12 heads, {size}, torch {torch.__version__}, {device_of(args.device)}, "
          f"{torch.get_num_threads()} threads")
    print(format_rows(mha_benchmark(**size, repeats=args.repeats, device=args.device)))
