"""Greedy generation timed side by side: no cache, a preallocated KV cache, a torch.cat cache,
and grouped-query (4 groups) and multi-query attention with a preallocated cache (notebook 07).

    .venv/bin/python -m utils.bench_generate           # full size: GPT-2 small's shape, random weights,
                                                       # batch 1, 256 new tokens after a short prompt
    .venv/bin/python -m utils.bench_generate --small   # the size notebook 07 uses
    .venv/bin/python -m utils.bench_generate --threads 1   # steadier on a busy machine

Every variant generates from the same prompt; the MHA variants must give identical tokens. Each
cached variant runs `repeats` times, interleaved, and reports its median; the uncached one runs
once (it is the slow one). Absolute speeds depend on the machine; the ratios are what carry over.
"""
import argparse
import statistics
import time

import torch
from tqdm.auto import tqdm

from utils.gpt import GPTConfig, GPTModel
from utils.kv_cache import ConcatKVCache, KVCache, generate

FULL = GPTConfig()  # 12 layers, width 768, 12 heads, GPT-2 vocabulary, context 1024
SMALL = GPTConfig(vocab_size=1000, context_length=160, emb_dim=128, n_heads=8, n_layers=4)


def build(cfg: GPTConfig, n_kv_groups=None, seed=0) -> GPTModel:
    torch.manual_seed(seed)
    return GPTModel(GPTConfig(**{**cfg.__dict__, "n_kv_groups": n_kv_groups})).eval()


def cache_bytes(model, batch_size, max_seq_len, cache_cls=KVCache) -> int:
    """Bytes of the real key and value tensors of every layer's preallocated cache."""
    caches = model.new_caches(batch_size, max_seq_len, cache_cls)
    return sum(c.k.numel() * c.k.element_size() + c.v.numel() * c.v.element_size() for c in caches)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def generation_benchmark(cfg=FULL, prompt_len=8, new_tokens=256, repeats=3, seed=0, verbose=False):
    """Rows of {variant, tokens_per_s, speedup (vs no cache), cache_bytes}; asserts equal tokens."""
    prompt = torch.randint(0, cfg.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(seed))
    models = {"mha": build(cfg, seed=seed), "gqa4": build(cfg, 4, seed), "mqa": build(cfg, 1, seed)}
    variants = {  # name: (model, use_cache, cache class)
        "KV cache, preallocated": ("mha", True, KVCache),
        "KV cache, torch.cat": ("mha", True, ConcatKVCache),
        "GQA 4 groups, preallocated": ("gqa4", True, KVCache),
        "MQA 1 group, preallocated": ("mqa", True, KVCache),
    }
    run = lambda m, c, cls: generate(models[m], prompt, new_tokens, use_cache=c, cache_cls=cls)
    say = tqdm.write if verbose else (lambda line: None)  # each measurement as it comes, for long runs
    for m, c, cls in variants.values():
        run(m, c, cls) if new_tokens <= 32 else generate(models[m], prompt, 8, cache_cls=cls)  # warm-up
    times = {name: [] for name in variants}
    outputs = {}
    with torch.inference_mode():
        for _ in tqdm(range(repeats), desc="cached rounds", leave=False):
            for name, spec in variants.items():
                seconds, outputs[name] = timed(lambda: run(*spec))
                times[name].append(seconds)
                say(f"  {name}: {new_tokens / seconds:.1f} tokens/s")
        no_cache_s, outputs["no cache"] = timed(lambda: run("mha", False, KVCache))
        say(f"  no cache: {new_tokens / no_cache_s:.2f} tokens/s")
    if not (torch.equal(outputs["no cache"], outputs["KV cache, preallocated"])
            and torch.equal(outputs["KV cache, preallocated"], outputs["KV cache, torch.cat"])):
        raise AssertionError("cached and uncached greedy generation gave different tokens")
    seconds = {"no cache": no_cache_s} | {n: statistics.median(t) for n, t in times.items()}
    total = prompt_len + new_tokens
    rows = []
    for name, s in seconds.items():
        m, c, cls = ("mha", False, None) if name == "no cache" else variants[name]
        rows.append({"variant": name, "tokens_per_s": new_tokens / s, "speedup": no_cache_s / s,
                     "cache_bytes": cache_bytes(models[m], 1, total) if c else 0})
    return rows


def update_benchmark(cfg=FULL, total_tokens=264, repeats=3):
    """Only the cache updates of a whole generation: n_layers caches, one token appended at a time.
    Returns {cache class name: median seconds}."""
    hd = cfg.emb_dim // cfg.n_heads
    k_new = torch.randn(1, cfg.n_heads, 1, hd)
    times = {cls.__name__: [] for cls in (KVCache, ConcatKVCache)}
    for _ in range(repeats):
        for cls in (KVCache, ConcatKVCache):
            caches = [cls(1, total_tokens, cfg.n_heads, hd) for _ in range(cfg.n_layers)]
            start = time.perf_counter()
            for _ in range(total_tokens):
                for cache in caches:
                    cache.update(k_new, k_new)
            times[cls.__name__].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def format_rows(rows) -> str:
    width = max(len(r["variant"]) for r in rows)
    lines = [f"{'variant':<{width}}  {'tokens/s':>9}  {'vs no cache':>11}  {'cache MiB':>9}"]
    lines += [f"{r['variant']:<{width}}  {r['tokens_per_s']:>9.1f}  {r['speedup']:>10.2f}x"
              f"  {r['cache_bytes'] / 2**20:>9.2f}" for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the small model of notebook 07")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = SMALL if args.small else FULL
    print(f"greedy generation, {cfg}, batch 1, prompt 8 tokens, {args.new_tokens} new tokens, fp32, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    rows = generation_benchmark(cfg, new_tokens=args.new_tokens, repeats=args.repeats, verbose=True)
    print(format_rows(rows))
    by = {r["variant"]: r for r in rows}
    pre, cat = by["KV cache, preallocated"], by["KV cache, torch.cat"]
    print(f"preallocated / torch.cat: {pre['tokens_per_s'] / cat['tokens_per_s']:.2f}x tokens/s")
    updates = update_benchmark(cfg, 8 + args.new_tokens, args.repeats)
    print(f"cache updates alone ({cfg.n_layers} layers x {8 + args.new_tokens} tokens): preallocated "
          f"{1e3 * updates['KVCache']:.1f} ms, torch.cat {1e3 * updates['ConcatKVCache']:.1f} ms, "
          f"{updates['ConcatKVCache'] / updates['KVCache']:.1f}x")
