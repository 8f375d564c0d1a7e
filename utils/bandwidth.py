"""The bandwidth line: how fast this machine reads memory, and how close a decode gets to it.

At batch 1 a decoding step reads every weight matrix once (and the KV cache) to produce one
token, and does only about one multiply-add per number it reads: its speed limit is memory
bandwidth, not arithmetic. So

    tokens per second  <=  read rate / bytes read per token,

and `bytes_per_token * tokens_per_s / read_rate` is the fraction of that line a decode reaches.

Two rates are measured, each once per process, device, thread count and size, the best of a few
repeats, with what one torch operation reaches on the threads torch uses (so measure with the
thread count the decode uses):
- `read_bandwidth`, the line: one matrix-vector product over a float32 weight far larger than the
  CPU's caches, the operation a decode step repeats; bytes read per second (the vector and the
  result are negligible). It is a measured line, not a law: a decode whose bytes per token fit in
  the last-level cache (`last_level_cache_bytes`) is served partly from that cache between steps
  and can pass it, and another kernel can stream memory faster than this one does.
- `memory_bandwidth`, a reference: a large copy (`dst.copy_(src)`), counted as STREAM's Copy
  counts it, bytes read plus bytes written per second. A copy also writes, so it is not the rate
  of a read-only stream; decodes are compared with the read rate.
On a GPU (`device="cuda"`) both run in the GPU's own memory, timed after synchronizing.

    .venv/bin/python -m utils.bandwidth            # this machine's read and copy rates, GB/s
    .venv/bin/python -m utils.bandwidth --threads 1
    .venv/bin/python -m utils.bandwidth --device cuda

The interface, kept small and stable for notebooks 07, 11 and 12 and the decode benchmarks:

    read_bandwidth(n_bytes=2**28, repeats=5, device=None) -> float      bytes read per second (cached per device and thread count)
    memory_bandwidth(n_bytes=2**28, repeats=5, device=None) -> float    copy: bytes read + written per second (cached likewise)
    last_level_cache_bytes() -> int | None                              the largest CPU cache Linux reports
    bandwidth_fraction(bytes_per_token, tokens_per_s, bandwidth=None) -> float   (default: the read rate)
    bandwidth_line(bytes_per_token, tokens_per_s, bandwidth=None) -> str   one printable line
"""
import argparse
import glob

import torch

from utils.benchmark import device_of, timed

_MEASURED = {}  # (device, torch threads, n_bytes) -> bytes per second, copy
_READ = {}      # (device, torch threads, n_bytes) -> bytes per second, matrix-vector product


def last_level_cache_bytes():
    """Size of the largest CPU cache Linux reports for core 0 (sysfs), or None where none is reported
    (macOS, Windows, some containers)."""
    units = {"K": 2**10, "M": 2**20, "G": 2**30}
    sizes = []
    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/size"):
        with open(path) as f:
            text = f.read().strip()  # e.g. "32768K"
        if text:
            sizes.append(int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text))
    return max(sizes, default=None)


def read_bandwidth(n_bytes: int = 2**28, repeats: int = 5, device=None) -> float:
    """Read rate of this machine (or of `device`'s memory) in bytes per second: one matrix-vector
    product `w @ x` over a float32 weight `w` of n_bytes (rows of 1024), measured once per device,
    thread count and size. The decode's own operation, so the line a decode from memory approaches."""
    device = device_of(device)
    if device.type == "meta":
        raise ValueError("a meta tensor holds no memory: there is no bandwidth to measure on the meta device")
    key = (str(device), torch.get_num_threads(), n_bytes)
    if key not in _READ:
        if n_bytes < 4096 or repeats < 1:
            raise ValueError(f"need n_bytes >= 4096 (one row of 1024 floats) and repeats >= 1, got {n_bytes}, {repeats}")
        w = torch.ones(n_bytes // 4096, 1024, device=device)  # written once, so every page is really allocated
        x = torch.ones(1024, device=device)
        w @ x  # warm-up: page faults and thread start-up are not bandwidth
        best = min(timed(lambda: w @ x, device)[0] for _ in range(repeats))
        _READ[key] = w.numel() * w.element_size() / best
    return _READ[key]


def memory_bandwidth(n_bytes: int = 2**28, repeats: int = 5, device=None) -> float:
    """Copy bandwidth of this machine (or of `device`'s memory) in bytes per second, read + written,
    measured once per device, thread count and size: `dst.copy_(src)` of two float32 tensors of
    n_bytes each."""
    device = device_of(device)
    if device.type == "meta":
        raise ValueError("a meta tensor holds no memory: there is no bandwidth to measure on the meta device")
    key = (str(device), torch.get_num_threads(), n_bytes)
    if key not in _MEASURED:
        if n_bytes < 4 or repeats < 1:
            raise ValueError(f"need n_bytes >= 4 and repeats >= 1, got {n_bytes}, {repeats}")
        src = torch.ones(n_bytes // 4, device=device)  # written once, so every page is really allocated
        dst = torch.zeros_like(src)
        dst.copy_(src)  # warm-up: page faults and thread start-up are not bandwidth
        best = min(timed(lambda: dst.copy_(src), device)[0] for _ in range(repeats))
        _MEASURED[key] = 2 * src.numel() * src.element_size() / best
    return _MEASURED[key]


def bandwidth_fraction(bytes_per_token: float, tokens_per_s: float, bandwidth: float | None = None) -> float:
    """The fraction of the bandwidth line a decode reaches: bytes it reads per second / bandwidth
    (default: this machine's read rate)."""
    if bytes_per_token <= 0 or tokens_per_s <= 0:
        raise ValueError(f"need positive bytes per token and tokens per second, got {bytes_per_token}, {tokens_per_s}")
    return bytes_per_token * tokens_per_s / (bandwidth or read_bandwidth())


def bandwidth_line(bytes_per_token: float, tokens_per_s: float, bandwidth: float | None = None) -> str:
    """'12.3 MB read per token x 45.6 tokens/s = 0.56 GB/s, 4.1% of the measured 13.7 GB/s'."""
    bandwidth = bandwidth or read_bandwidth()
    fraction = bandwidth_fraction(bytes_per_token, tokens_per_s, bandwidth)
    return (f"{bytes_per_token / 1e6:.2f} MB read per token x {tokens_per_s:.1f} tokens/s = "
            f"{bytes_per_token * tokens_per_s / 1e9:.2f} GB/s, {100 * fraction:.1f}% of the measured "
            f"{bandwidth / 1e9:.1f} GB/s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--mib", type=int, default=256, help="size of each of the two tensors, MiB")
    parser.add_argument("--device", default=None, help="where the copy runs (default: the CPU)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    where = f"{device_of(args.device)}, {torch.get_num_threads()} threads"
    print(f"read rate, {where}, a matrix-vector product over {args.mib} MiB: "
          f"{read_bandwidth(args.mib * 2**20, device=args.device) / 1e9:.1f} GB/s")
    print(f"copy bandwidth, {where}, 2 x {args.mib} MiB, read + written: "
          f"{memory_bandwidth(args.mib * 2**20, device=args.device) / 1e9:.1f} GB/s")
    llc = last_level_cache_bytes()
    print(f"last-level cache: {llc / 2**20:.0f} MiB" if llc else "last-level cache: not reported here")
