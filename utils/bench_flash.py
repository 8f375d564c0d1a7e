"""Peak memory and time of naive attention, the tiled FlashAttention forward and PyTorch's SDPA,
side by side, one run, one head (notebook 14).

    .venv/bin/python -m utils.bench_flash                     # T = 1K .. 16K, d = 64, blocks of 256
    .venv/bin/python -m utils.bench_flash --max-tokens 4096   # a quicker run

Memory is measured, not computed: on Linux, the process's resident-set high-water mark (VmHWM in
/proc/self/status) is reset before each call (writing 5 to /proc/self/clear_refs), free heap pages
are first handed back to the system (glibc's malloc_trim), and the peak extra memory of a call is
its high-water mark minus the resident memory before it. That counts every page the call touched,
the buffers inside SDPA's C++ kernel included. Torch 2.13 keeps no allocation statistics for the
CPU (torch.accelerator.memory_stats needs an accelerator), and a TorchDispatchMode sees only the
tensors that cross the dispatcher. Where /proc/self/clear_refs does not exist (macOS, Windows),
the fallback counts the bytes of the tensors that torch functions return and that are still alive
(a lower bound: it misses what a kernel allocates inside). On a CUDA GPU (`--device cuda`) the
caching allocator keeps exact statistics: the peak extra memory is torch.cuda.max_memory_allocated
after a reset, minus what was allocated before the call, and the clock is read after synchronizing.
"""
import argparse
import ctypes
import ctypes.util
import math
import weakref

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from utils.benchmark import device_of, steady, timed
from utils.benchmark import order_warning as benchmark_order_warning
from utils.flash_attention import flash_attention_forward
from utils.scaled_attention import scaled_dot_product_attention

_CLEAR_REFS, _STATUS = "/proc/self/clear_refs", "/proc/self/status"


def _status_bytes(field: str) -> int:
    with open(_STATUS) as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024  # reported in kB
    raise RuntimeError(f"{field} not found in {_STATUS}")


def _trim_heap():
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def _high_water_mark_available() -> bool:
    try:
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")
        _status_bytes("VmHWM:")
        return True
    except (OSError, RuntimeError):
        return False


class _LiveTensorBytes(TorchFunctionMode):
    """Fallback: the peak of the bytes held by tensors that torch calls returned and that live on."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.seen = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(t, torch.Tensor):
                self._count(t.untyped_storage())
        return result

    def _count(self, storage):
        key = storage.data_ptr()
        if key in self.seen or storage.nbytes() == 0:
            return
        self.seen.add(key)
        self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, storage.nbytes())

    def _free(self, key, nbytes):
        self.seen.discard(key)
        self.live -= nbytes


def peak_extra_memory(fn, *args, **kwargs):
    """(bytes, result): the most memory fn(*args, **kwargs) held above what was in use before."""
    peak, _, result = peak_memory_and_time(fn, *args, **kwargs)
    return peak, result


def peak_memory_and_time(fn, *args, **kwargs):
    """(bytes, seconds, result) of one call: its peak extra memory, and the time of the call alone
    (resetting the high-water mark and trimming the heap take milliseconds, outside the clock; the
    fallback's watching mode is inside it). The device is that of the first tensor argument."""
    device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        seconds, result = timed(lambda: fn(*args, **kwargs), device)
        return torch.cuda.max_memory_allocated(device) - before, seconds, result
    if device.type == "cpu" and _high_water_mark_available():
        _trim_heap()
        with open(_CLEAR_REFS, "w") as f:
            f.write("5")  # resets VmHWM to the current resident set
        before = _status_bytes("VmRSS:")
        seconds, result = timed(lambda: fn(*args, **kwargs), device)
        return _status_bytes("VmHWM:") - before, seconds, result
    with _LiveTensorBytes() as mode:
        seconds, result = timed(lambda: fn(*args, **kwargs), device)
    return mode.peak, seconds, result


def attention_variants(tiled=flash_attention_forward, block=256):
    """The three contenders, each (q, k, v) -> out: naive, the tiled forward, PyTorch's SDPA."""
    return {"naive": lambda q, k, v: scaled_dot_product_attention(q, k, v)[0],  # notebook 03's, (T, T) weights
            "tiled": lambda q, k, v: tiled(q, k, v, block_q=block, block_k=block)[0],
            "SDPA": F.scaled_dot_product_attention}


TIME_COLUMNS = ("naive s", "tiled s", "SDPA s")


def measure(tokens, d=64, tiled=flash_attention_forward, block=256, seed=0, device=None, retries=2):
    """One row per T: peak extra MiB and seconds of each variant, one head, equal outputs checked;
    on `device` (default: the default device), the inputs drawn on the CPU and moved there. Every
    variant's time grows with T, so a size whose time is out of order is measured again, at most
    `retries` more times (utils.benchmark.steady); `order_warning(rows)` says if some still are."""
    variants = attention_variants(tiled, block)
    device = device_of(device)

    def one_row(T):
        g = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(1, 1, T, d, generator=g, device=g.device).to(device) for _ in range(3))
        row, outs = {"T": T}, {}
        with torch.no_grad():
            for name, fn in variants.items():
                fn(q[..., :64, :], k[..., :64, :], v[..., :64, :])  # warm up: threads and first-call costs
                row[f"{name} MiB"], row[f"{name} s"], outs[name] = peak_memory_and_time(fn, q, k, v)
        for name in ("tiled", "SDPA"):
            gap = (outs[name] - outs["naive"]).abs().max().item()
            if gap > 1e-4:
                raise AssertionError(f"T={T}: {name} differs from naive attention by {gap:.2g}")
        for name in variants:
            row[f"{name} MiB"] /= 2 ** 20
        return row

    return steady(one_row, list(tokens), "T", TIME_COLUMNS, retries=retries)


def order_warning(rows):
    """A printable warning when a time column is still out of order in T after the repeats, else None."""
    return benchmark_order_warning(rows, "T", TIME_COLUMNS)


def format_rows(rows) -> str:
    lines = [f"{'T':>6} | {'peak extra memory (MiB)':^32} | {'time (s)':^26}",
             f"{'':>6} | {'naive':>10} {'tiled':>10} {'SDPA':>10} | {'naive':>8} {'tiled':>8} {'SDPA':>8}"]
    for r in rows:
        lines.append(f"{r['T']:>6} | {r['naive MiB']:>10.1f} {r['tiled MiB']:>10.1f} {r['SDPA MiB']:>10.1f} | "
                     f"{r['naive s']:>8.3f} {r['tiled s']:>8.3f} {r['SDPA s']:>8.3f}")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=16384)
    parser.add_argument("--block", type=int, default=256, help="block_q = block_k of the tiled forward")
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--device", default=None, help="where to run (default: the CPU)")
    args = parser.parse_args()
    tokens = [2 ** i for i in range(10, int(math.log2(args.max_tokens)) + 1)]
    device = device_of(args.device)
    how = ("torch.cuda.max_memory_allocated" if device.type == "cuda" else
           "VmHWM (Linux)" if _high_water_mark_available() else "live tensor bytes (fallback)")
    print(f"one head, d={args.head_dim}, blocks of {args.block}, {device}, memory measured by {how}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    rows = measure(tokens, d=args.head_dim, block=args.block, device=device)
    print(format_rows(rows))
    if order_warning(rows):
        print(order_warning(rows))
    last = rows[-1]
    print(f"at T={last['T']}: naive attention's peak extra memory is {last['naive MiB'] / last['tiled MiB']:.0f}x "
          f"the tiled forward's")
