"""Greedy generation timed side by side: no cache, a preallocated KV cache, a torch.cat cache,
and grouped-query (4 groups) and multi-query attention with a preallocated cache (notebook 07).

    .venv/bin/python -m utils.bench_generate           # full size: GPT-2 small's shape, random weights,
                                                       # batch 1, 256 new tokens after a short prompt
    .venv/bin/python -m utils.bench_generate --small   # the size notebook 07 uses
    .venv/bin/python -m utils.bench_generate --threads 1   # steadier on a busy machine

Every variant generates from the same prompt; the MHA variants must give identical tokens. Each
cached variant runs `repeats` times, interleaved, and reports its median; the uncached one runs
once (it is the slow one). Absolute speeds depend on the machine; the ratios are what carry over.

The bandwidth line (utils.bandwidth): a decode step at batch 1 reads every weight once and the
cache, so each cached row also prints the bytes read per generated token and the fraction of the
machine's measured read rate (`utils.bandwidth.read_bandwidth`) that this reaches. The same run then times the cache update
where it matters: a small model at a long context (`LONG`), preallocated against torch.cat, decode
steps only.

Every function runs where its model lives (those that build the models take `device`, default the
default device, and build them on the CPU first, so a seed gives the same weights everywhere); the
bandwidth is that device's. `--device cuda` runs the command on a GPU.
"""
import argparse
import statistics

import torch
from tqdm.auto import tqdm

from utils.bandwidth import bandwidth_fraction, read_bandwidth
from utils.benchmark import device_of, steady, timed
from utils.gpt import GPTConfig, GPTModel
from utils.kv_cache import ConcatKVCache, KVCache, generate

FULL = GPTConfig()  # 12 layers, width 768, 12 heads, GPT-2 vocabulary, context 1024
SMALL = GPTConfig(vocab_size=1000, context_length=160, emb_dim=128, n_heads=8, n_layers=4)
LONG = GPTConfig(vocab_size=1000, context_length=2048, emb_dim=128, n_heads=8, n_layers=4)  # SMALL, long texts


def build(cfg: GPTConfig, n_kv_groups=None, seed=0, device=None) -> GPTModel:
    torch.manual_seed(seed)
    with torch.device("cpu"):  # the same weights on every device
        model = GPTModel(GPTConfig(**{**cfg.__dict__, "n_kv_groups": n_kv_groups}))
    return model.to(device_of(device)).eval()


def cache_bytes(model, batch_size, max_seq_len, cache_cls=KVCache) -> int:
    """Bytes of the real key and value tensors of every layer's preallocated cache."""
    caches = model.new_caches(batch_size, max_seq_len, cache_cls)
    return sum(c.k.numel() * c.k.element_size() + c.v.numel() * c.v.element_size() for c in caches)


def decode_bytes_per_token(model, context_len: float) -> float:
    """Bytes one batch-1 decode step reads: every parameter except the embedding tables (one row
    of each is read), plus the keys and values of `context_len` cached tokens in every layer."""
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    for table in (model.tok_emb, model.pos_emb):
        if table is not None:
            w = table.weight
            total -= (w.shape[0] - 1) * w.shape[1] * w.element_size()
    p = next(model.parameters())
    per_position = sum(2 * getattr(b.att, "num_kv_heads", b.att.num_heads) * b.att.head_dim for b in model.trf_blocks)
    return total + per_position * p.element_size() * context_len


def filled_caches(model, context_len: int, extra: int = 0, cache_cls=KVCache, seed: int = 0):
    """One cache per layer holding `context_len` positions of seeded random keys and values (what a
    decode step costs does not depend on what the cache holds), with room for `extra` more."""
    g = torch.Generator().manual_seed(seed)
    device = device_of(model)
    caches = model.new_caches(1, context_len + extra, cache_cls)
    for b, cache in zip(model.trf_blocks, caches):
        shape = (1, getattr(b.att, "num_kv_heads", b.att.num_heads), context_len, b.att.head_dim)
        k, v = (torch.randn(shape, generator=g, device=g.device).to(device) for _ in range(2))
        cache.update(k, v)
    return caches


@torch.inference_mode()
def decode_tokens_per_s(model, context_len: int, new_tokens: int, cache_cls=KVCache, seed: int = 0) -> float:
    """Greedy decode steps alone, after `context_len` cached positions: tokens per second (the
    caches are filled by filled_caches, not by a prefill, which would take longer than the steps)."""
    caches = filled_caches(model, context_len, new_tokens, cache_cls, seed)
    device = device_of(model)
    next_id = torch.zeros(1, 1, dtype=torch.long, device=device)

    def steps():
        token = next_id
        for _ in range(new_tokens):
            token = model(token, caches)[:, -1:].argmax(dim=-1)

    return new_tokens / timed(steps, device)[0]


@torch.inference_mode()
def step_times(model, contexts, steps: int = 9, prefill_max: int = 1024, retries: int = 2) -> list[dict]:
    """Prefill and decode as two cost regimes: for each context length T, the time of one prefill
    pass over T tokens (what an uncached step costs at that length; None past prefill_max) and the
    median time of a cached decode step with T tokens in the cache. A prefill time out of order in T
    is measured again, at most `retries` more times (utils.benchmark.steady)."""
    device = device_of(model)
    warm = filled_caches(model, contexts[0], 8)  # the first calls of a process run slower: not measured
    for _ in range(8):
        model(torch.zeros(1, 1, dtype=torch.long, device=device), warm)
    model(torch.zeros(1, contexts[0], dtype=torch.long, device=device), model.new_caches(1, contexts[0]))  # a first prefill

    def one_row(T):
        ids = torch.randint(0, model.cfg.vocab_size, (1, T), generator=torch.Generator().manual_seed(T), device="cpu")
        ids = ids.to(device)
        prefill_s = timed(lambda: model(ids, model.new_caches(1, T)), device)[0] if T <= prefill_max else None
        caches, token = filled_caches(model, T, steps, seed=T), ids[:, :1]
        decode = [timed(lambda: model(token, caches), device)[0] for _ in range(steps)]
        return {"context": T, "prefill_s": prefill_s, "decode_s": statistics.median(decode)}

    return steady(one_row, list(contexts), "context", ["prefill_s"], retries=retries)


def cache_regimes(regimes: dict, repeats: int = 3, seed: int = 0, device=None) -> list[dict]:
    """Preallocated against torch.cat, decode steps alone, in several regimes measured in one run:
    regimes = {name: (cfg, context_len, new_tokens)}. Rows of {regime, context, preallocated,
    torch.cat (tokens/s, medians of interleaved repeats), ratio, bytes_per_token, fraction}."""
    rows = []
    bandwidth = read_bandwidth(device=device)
    for name, (cfg, context_len, new_tokens) in regimes.items():
        model = build(cfg, seed=seed, device=device)
        speeds = {KVCache: [], ConcatKVCache: []}
        decode_tokens_per_s(model, 8, 4)  # warm-up
        for _ in range(repeats):
            for cls in speeds:
                speeds[cls].append(decode_tokens_per_s(model, context_len, new_tokens, cls, seed))
        pre, cat = statistics.median(speeds[KVCache]), statistics.median(speeds[ConcatKVCache])
        read = decode_bytes_per_token(model, context_len + (new_tokens - 1) / 2)
        rows.append({"regime": name, "context": f"{context_len}..{context_len + new_tokens}", "preallocated": pre,
                     "torch.cat": cat, "ratio": pre / cat, "bytes_per_token": read,
                     "fraction": bandwidth_fraction(read, pre, bandwidth)})
    return rows


def format_regimes(rows) -> str:
    width = max(len(r["regime"]) for r in rows)
    lines = [f"{'regime':<{width}}  {'context':>11}  {'preallocated':>12}  {'torch.cat':>9}  {'ratio':>6}  {'MB/token':>8}  {'% bw':>5}"]
    lines += [f"{r['regime']:<{width}}  {r['context']:>11}  {r['preallocated']:>12.1f}  {r['torch.cat']:>9.1f}  "
              f"{r['ratio']:>5.2f}x  {r['bytes_per_token'] / 1e6:>8.2f}  {100 * r['fraction']:>5.1f}" for r in rows]
    return "\n".join(lines)


def generation_benchmark(cfg=FULL, prompt_len=8, new_tokens=256, repeats=3, seed=0, verbose=False, device=None):
    """Rows of {variant, tokens_per_s, speedup (vs no cache), cache_bytes, bytes_per_token,
    fraction (of the measured bandwidth; None without a cache)}; asserts equal tokens."""
    device = device_of(device)
    prompt = torch.randint(0, cfg.vocab_size, (1, prompt_len), generator=torch.Generator().manual_seed(seed),
                           device="cpu").to(device)
    models = {"mha": build(cfg, seed=seed, device=device), "gqa4": build(cfg, 4, seed, device),
              "mqa": build(cfg, 1, seed, device)}
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
                seconds, outputs[name] = timed(lambda: run(*spec), device)
                times[name].append(seconds)
                say(f"  {name}: {new_tokens / seconds:.1f} tokens/s")
        no_cache_s, outputs["no cache"] = timed(lambda: run("mha", False, KVCache), device)
        say(f"  no cache: {new_tokens / no_cache_s:.2f} tokens/s")
    if not (torch.equal(outputs["no cache"], outputs["KV cache, preallocated"])
            and torch.equal(outputs["KV cache, preallocated"], outputs["KV cache, torch.cat"])):
        raise AssertionError("cached and uncached greedy generation gave different tokens")
    seconds = {"no cache": no_cache_s} | {n: statistics.median(t) for n, t in times.items()}
    total = prompt_len + new_tokens
    bandwidth = read_bandwidth(device=device)
    rows = []
    for name, s in seconds.items():
        m, c, cls = ("mha", False, None) if name == "no cache" else variants[name]
        # the prefill is in the time too: a step reads the weights and, on average, half the generation's cache
        read = decode_bytes_per_token(models[m], prompt_len + (new_tokens - 1) / 2) if c else None
        rows.append({"variant": name, "tokens_per_s": new_tokens / s, "speedup": no_cache_s / s,
                     "cache_bytes": cache_bytes(models[m], 1, total) if c else 0, "bytes_per_token": read,
                     "fraction": bandwidth_fraction(read, new_tokens / s, bandwidth) if c else None})
    return rows


def update_benchmark(cfg=FULL, total_tokens=264, repeats=3, device=None):
    """Only the cache updates of a whole generation: n_layers caches, one token appended at a time.
    Returns {cache class name: median seconds}."""
    hd = cfg.emb_dim // cfg.n_heads
    device = device_of(device)
    k_new = torch.randn(1, cfg.n_heads, 1, hd, device=device)
    times = {cls.__name__: [] for cls in (KVCache, ConcatKVCache)}

    def fill(caches):
        for _ in range(total_tokens):
            for cache in caches:
                cache.update(k_new, k_new)

    for _ in range(repeats):
        for cls in (KVCache, ConcatKVCache):
            caches = [cls(1, total_tokens, cfg.n_heads, hd, device=device) for _ in range(cfg.n_layers)]
            times[cls.__name__].append(timed(lambda: fill(caches), device)[0])
    return {name: statistics.median(t) for name, t in times.items()}


def format_rows(rows) -> str:
    width = max(len(r["variant"]) for r in rows)
    lines = [f"{'variant':<{width}}  {'tokens/s':>9}  {'vs no cache':>11}  {'cache MiB':>9}  {'MB/token':>8}  {'% bw':>5}"]
    lines += [f"{r['variant']:<{width}}  {r['tokens_per_s']:>9.1f}  {r['speedup']:>10.2f}x  {r['cache_bytes'] / 2**20:>9.2f}  "
              + (f"{r['bytes_per_token'] / 1e6:>8.2f}  {100 * r['fraction']:>5.1f}" if r["fraction"] else f"{'-':>8}  {'-':>5}")
              for r in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the small model of notebook 07")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--device", default=None, help="where to run (default: the CPU)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = SMALL if args.small else FULL
    device = device_of(args.device)
    print(f"greedy generation, {cfg}, batch 1, prompt 8 tokens, {args.new_tokens} new tokens, fp32, "
          f"torch {torch.__version__}, {device}, {torch.get_num_threads()} threads")
    rows = generation_benchmark(cfg, new_tokens=args.new_tokens, repeats=args.repeats, verbose=True, device=device)
    print(format_rows(rows))
    by = {r["variant"]: r for r in rows}
    pre, cat = by["KV cache, preallocated"], by["KV cache, torch.cat"]
    print(f"preallocated / torch.cat: {pre['tokens_per_s'] / cat['tokens_per_s']:.2f}x tokens/s")
    print(f"bandwidth: {read_bandwidth(device=device) / 1e9:.1f} GB/s measured (read rate of a matrix-vector product, utils.bandwidth); "
          f"MB/token = weights + cache read per generated token, % bw = MB/token x tokens/s / bandwidth")
    updates = update_benchmark(cfg, 8 + args.new_tokens, args.repeats, device)
    print(f"cache updates alone ({cfg.n_layers} layers x {8 + args.new_tokens} tokens): preallocated "
          f"{1e3 * updates['KVCache']:.1f} ms, torch.cat {1e3 * updates['ConcatKVCache']:.1f} ms, "
          f"{updates['ConcatKVCache'] / updates['KVCache']:.1f}x")
    print("decode steps alone, preallocated vs torch.cat (tokens/s), where the update matters and where it does not:")
    print(format_regimes(cache_regimes({"small model, long context": (LONG, 1792, 256),
                                        "this size, short context": (cfg, 8, min(args.new_tokens, 64))},
                                       args.repeats, device=device)))
