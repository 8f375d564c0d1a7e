"""What DeepSeek Sparse Attention buys at decode, measured: `python -m utils.bench_sparse` (notebook 13).

One layer with DeepSeek-V3.2's per-head sizes (MLA: 128 heads over a 512 + 64 latent, nope/rope/v
128/64/128, q_lora_rank 1536; indexer: 64 heads x 128, index_topk 2048) and a smaller model width
`dim` (it only changes the fixed cost of the projections). One decode step after `context` cached
positions, on one thread:
- dense: 09's absorbed MLA (`MultiHeadLatentAttention.forward` on the same module), reading every
  cached latent and rope key;
- sparse: `SparseMLA` with absorb=True, the indexer over every cached index key, then MLA over the
  2048 selected latents only.
Both share the weights and the caches, which hold random values with a prefill's statistics
(`utils.dsa.fill_caches`; a 32K-token prefill of 128 heads would take far longer than the steps).
Rounds alternate between the two, the median is kept, and the two outputs are checked equal where
top-k covers every position. Bytes read per step count the cache entries each path reads.
It also measures RollingKVCache's memory after 1K and 16K positions. `--device cuda` runs it all on
a GPU, with the clock read after synchronizing.
"""
import argparse

import torch

from utils.benchmark import device_of, expect_same, timed
from utils.dsa import DSAConfig, SparseMLA, fill_caches
from utils.mla import MultiHeadLatentAttention, one_thread
from utils.sliding_window import RollingKVCache


def v32_layer(dim: int, max_seq_len: int) -> DSAConfig:
    return DSAConfig(dim=dim, n_heads=128, q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128,
                     qk_rope_head_dim=64, v_head_dim=128, max_seq_len=max_seq_len,
                     index_n_heads=64, index_head_dim=128, index_topk=2048)


def bytes_read(cfg: DSAConfig, context: int, element_size: int = 4) -> dict:
    """Cache bytes one decode step reads: dense every latent and rope key; sparse every index key, then top-k of them."""
    end = context + 1
    latent = cfg.kv_lora_rank + cfg.qk_rope_head_dim
    return {"dense": end * latent * element_size,
            "sparse": (end * cfg.index_head_dim + min(cfg.index_topk, end) * latent) * element_size}


def decode_step_benchmark(contexts, dim=1024, repeats=5, seed=0, progress=None, cfg=None, device=None) -> list[dict]:
    """Median ms of one decode step, dense absorbed MLA vs sparse, at each context (ascending);
    V3.2's per-head sizes unless another DSAConfig is given (its max_seq_len must exceed the contexts);
    on `device` (default: the default device)."""
    cfg = cfg or v32_layer(dim, max(contexts) + 1)
    dim = cfg.dim
    device = device_of(device)
    torch.manual_seed(seed)
    with torch.device(device):
        module = SparseMLA(cfg).eval()
    g = torch.Generator().manual_seed(seed)  # on the CPU: the same caches and token on every device
    x = torch.randn(1, 1, dim, generator=g, device=g.device).to(device)
    dense = lambda pos: MultiHeadLatentAttention.forward(module, x, pos, absorb=True)
    sparse = lambda pos: module(x, pos, absorb=True)
    rows = []
    with torch.no_grad(), one_thread():
        fill_caches(module, max(contexts), g)
        for context in (progress(contexts) if progress else contexts):
            times = {"dense": [], "sparse": []}
            for _ in range(repeats):
                for name, step in (("dense", dense), ("sparse", sparse)):
                    seconds, out = timed(lambda: step(context), device)
                    times[name].append(seconds)
                    if name == "dense":
                        dense_out = out
            if context + 1 <= cfg.index_topk:  # every position selected: the same attention
                expect_same(out, dense_out, atol=1e-4, rtol=1e-3, what=f"sparse vs dense at {context} tokens")
            ms = {k: sorted(v)[repeats // 2] * 1e3 for k, v in times.items()}
            rows.append({"context": context, "dense_ms": ms["dense"], "sparse_ms": ms["sparse"],
                         "speedup": ms["dense"] / ms["sparse"], **{f"{k}_bytes": v for k, v in bytes_read(cfg, context).items()}})
    return rows


def crossover(rows) -> int | None:
    """The first measured context from which sparse stays faster than dense (None if it never is)."""
    for i, row in enumerate(rows):
        if all(r["speedup"] > 1 for r in rows[i:]):
            return row["context"]
    return None


def rolling_cache_bytes(positions, window=128, num_kv_heads=8, head_dim=64, chunk=256, device=None) -> dict:
    """RollingKVCache's bytes, from its tensors, after feeding it `n` positions, for each n."""
    out = {}
    for n in positions:
        cache = RollingKVCache(1, window, num_kv_heads, head_dim, device=device)
        for s in range(0, n, chunk):
            k = torch.randn(1, num_kv_heads, min(chunk, n - s), head_dim, device=device)
            cache.update(k, k)
        out[n] = cache.nbytes()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[1024, 2048, 4096, 8192, 16384, 32768])
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default=None, help="where to run (default: the CPU)")
    args = parser.parse_args()
    rows = decode_step_benchmark(sorted(args.contexts), args.dim, args.repeats, device=args.device)
    print(f"one decode step, V3.2 per-head sizes, dim={args.dim}, batch 1, one thread, median of {args.repeats}, "
          f"{device_of(args.device)}")
    print(f"{'context':>8} {'dense ms':>9} {'sparse ms':>10} {'speedup':>8} {'dense MiB read':>15} {'sparse MiB read':>16}")
    for r in rows:
        print(f"{r['context']:>8} {r['dense_ms']:>9.2f} {r['sparse_ms']:>10.2f} {r['speedup']:>7.2f}x "
              f"{r['dense_bytes'] / 2**20:>15.2f} {r['sparse_bytes'] / 2**20:>16.2f}")
    print(f"crossover: sparse faster from {crossover(rows)} cached positions on (of those measured)")
    for n, b in rolling_cache_bytes([1024, 16384], device=args.device).items():
        print(f"RollingKVCache (window 128, 8 KV heads of 64, float32) after {n:>6} positions: {b:,} bytes")


if __name__ == "__main__":
    main()
