"""The bandwidth line: how fast this machine moves memory, and how close a decode gets to it.

At batch 1 a decoding step reads every weight matrix once (and the KV cache) to produce one
token, and does only about one multiply-add per number it reads: its speed limit is memory
bandwidth, not arithmetic. So

    tokens per second  <=  bandwidth / bytes read per token,

and `bytes_per_token * tokens_per_s / bandwidth` is the fraction of that limit a decode reaches.

The bandwidth is measured once per process and thread count, with a large copy (`dst.copy_(src)`
of tensors far larger than the CPU's caches), counted as STREAM's Copy counts it: the bytes
read plus the bytes written, per second; the best of a few repeats. It is what one torch
operation reaches with the threads torch uses, so measure with the thread count the decode uses.
On a GPU (`device="cuda"`) the same copy runs in the GPU's own memory, timed after synchronizing:
the limit of a decode that runs there.

    .venv/bin/python -m utils.bandwidth            # this machine's copy bandwidth, GB/s
    .venv/bin/python -m utils.bandwidth --threads 1
    .venv/bin/python -m utils.bandwidth --device cuda

The interface, kept small and stable for notebooks 07, 11 and 12 and the decode benchmarks:

    memory_bandwidth(n_bytes=2**28, repeats=5, device=None) -> float    bytes per second (cached per device and thread count)
    bandwidth_fraction(bytes_per_token, tokens_per_s, bandwidth=None) -> float
    bandwidth_line(bytes_per_token, tokens_per_s, bandwidth=None) -> str   one printable line
"""
import argparse

import torch

from utils.benchmark import device_of, timed

_MEASURED = {}  # (device, torch threads, n_bytes) -> bytes per second


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
    """The fraction of the bandwidth limit a decode reaches: bytes it reads per second / bandwidth."""
    if bytes_per_token <= 0 or tokens_per_s <= 0:
        raise ValueError(f"need positive bytes per token and tokens per second, got {bytes_per_token}, {tokens_per_s}")
    return bytes_per_token * tokens_per_s / (bandwidth or memory_bandwidth())


def bandwidth_line(bytes_per_token: float, tokens_per_s: float, bandwidth: float | None = None) -> str:
    """'12.3 MB read per token x 45.6 tokens/s = 0.56 GB/s, 4.1% of the measured 13.7 GB/s'."""
    bandwidth = bandwidth or memory_bandwidth()
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
    bw = memory_bandwidth(args.mib * 2**20, device=args.device)
    print(f"copy bandwidth, {device_of(args.device)}, {torch.get_num_threads()} threads, 2 x {args.mib} MiB, "
          f"read + written: {bw / 1e9:.1f} GB/s")
