"""Decode speed and weight memory of notebook 07's GPT in float32, bfloat16 and int8 weight-only,
side by side, one run, the same prompt (notebook 11).

    .venv/bin/python -m utils.bench_quantize            # full size: 12 layers, width 768, GPT-2 vocabulary
    .venv/bin/python -m utils.bench_quantize --small    # the size notebook 11 uses
    .venv/bin/python -m utils.bench_quantize --threads 1  # one thread, as the notebook times it

Decoding one token reads every weight once, so tokens/s is bounded by memory bandwidth / bytes
of weights. The command measures this machine's copy bandwidth, prints that bound next to each
measured speed, and reports speeds as ratios to float32 (absolute numbers depend on the machine
and on what else runs on it). Each variant decodes `repeats` times, interleaved; medians.
"""
import argparse
import contextlib
import copy
import statistics
import time

import torch
from tqdm.auto import tqdm

from utils.gpt import GPTConfig, GPTModel
from utils.quantize import quantize_model_, weight_bytes

FULL = GPTConfig()  # notebook 07's model: 12 layers, width 768, 12 heads, vocabulary 50257
SMALL = GPTConfig(vocab_size=8192, context_length=128, emb_dim=512, n_heads=8, n_layers=4)


@contextlib.contextmanager
def num_threads(n: int):
    """Run a block on n threads (1 keeps timings steady on a busy machine), then restore."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def copy_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second of a large float32 copy, counting the read and the write."""
    src = torch.ones(megabytes * 2 ** 20 // 4)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = min(_timed(lambda: dst.copy_(src))[0] for _ in range(repeats))
    return 2 * src.numel() * 4 / best


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def bytes_read_per_token(model) -> int:
    """Weight bytes one decode step reads: everything but the embedding tables (one row each)."""
    tables = {id(t) for m in model.modules() if isinstance(m, torch.nn.Embedding) for t in m.parameters()}
    return sum(t.numel() * t.element_size() for t in [*model.parameters(), *model.buffers()] if id(t) not in tables)


def build_variants(cfg: GPTConfig, seed: int = 0) -> dict:
    """float32, bfloat16 and int8 weight-only copies of one random-weight GPT."""
    torch.manual_seed(seed)
    fp32 = GPTModel(cfg).eval()
    return {"float32": fp32, "bfloat16": copy.deepcopy(fp32).to(torch.bfloat16),
            "int8 weight-only": quantize_model_(copy.deepcopy(fp32))}


@torch.inference_mode()
def decode(model, prompt, new_tokens: int):
    """Prefill the prompt, then time `new_tokens` greedy steps of one token: (seconds, token ids)."""
    caches = model.new_caches(prompt.shape[0], prompt.shape[1] + new_tokens)
    logits = model(prompt, caches)
    ids = []
    start = time.perf_counter()
    for _ in range(new_tokens):
        next_id = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
        ids.append(next_id)
        logits = model(next_id, caches)
    return time.perf_counter() - start, torch.cat(ids, dim=1)


def decode_benchmark(variants: dict, prompt, new_tokens: int = 16, repeats: int = 3, progress=True) -> list[dict]:
    times = {name: [] for name in variants}
    tokens = {}
    for name, model in variants.items():  # warm-up, and the tokens each variant generates
        tokens[name] = decode(model, prompt, 2)[1]
    for _ in tqdm(range(repeats), desc="decode rounds", leave=False, disable=not progress):
        for name, model in variants.items():
            seconds, tokens[name] = decode(model, prompt, new_tokens)
            times[name].append(seconds)
    base = next(iter(variants))
    rows = []
    for name, model in variants.items():
        speed = new_tokens / statistics.median(times[name])
        rows.append({"variant": name, "tokens/s": speed, "weight MB": weight_bytes(model) / 1e6,
                     "read MB/token": bytes_read_per_token(model) / 1e6,
                     "same tokens as float32": float((tokens[name] == tokens[base]).float().mean())})
    for r in rows:
        r["speed / float32"] = r["tokens/s"] / rows[0]["tokens/s"]
        r["memory / float32"] = r["weight MB"] / rows[0]["weight MB"]
    return rows


def format_rows(rows, bandwidth: float | None = None) -> str:
    head = f"{'variant':<17} {'tokens/s':>9} {'speed/fp32':>10} {'weight MB':>10} {'mem/fp32':>9} {'same tokens':>11}"
    if bandwidth:
        head += f" {'MB read/token':>13} {'bound tok/s':>11}"
    lines = [head]
    for r in rows:
        line = (f"{r['variant']:<17} {r['tokens/s']:>9.2f} {r['speed / float32']:>9.2f}x {r['weight MB']:>10.1f} "
                f"{r['memory / float32']:>8.2f}x {r['same tokens as float32']:>10.0%}")
        if bandwidth:
            line += f" {r['read MB/token']:>13.1f} {bandwidth / (r['read MB/token'] * 1e6):>11.1f}"
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="the size notebook 11 uses")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: PyTorch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = SMALL if args.small else FULL
    bandwidth = copy_bandwidth()
    print(f"threads: {torch.get_num_threads()}; copy bandwidth (read + write): {bandwidth / 1e9:.1f} GB/s")
    variants = build_variants(cfg)
    prompt = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
    rows = decode_benchmark(variants, prompt, args.new_tokens, args.repeats)
    print(f"{cfg.n_layers} layers, width {cfg.emb_dim}, vocabulary {cfg.vocab_size}; batch 1, prompt 16 tokens, "
          f"{args.new_tokens} decode steps, median of {args.repeats} interleaved runs")
    print(format_rows(rows, bandwidth))
    print("bound = copy bandwidth / bytes read per token (every weight once; of the embedding tables one row).")
