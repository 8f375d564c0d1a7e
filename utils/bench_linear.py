"""What a state of fixed size buys and costs, measured: `python -m utils.bench_linear` (notebook 16).

- memory: the linear layers' states against the full-attention layers' cache, for the published
  configs of Qwen3-Next-80B-A3B and Kimi-Linear-48B-A3B, at 4K, 128K and 1M tokens;
- decode: one token's step with a fixed state (the gated delta rule) against one with notebook 07's
  cache (attention over every cached position), at growing context lengths, alternating rounds;
- prefill: the chunked form against the token-by-token one, on the same inputs, outputs checked equal;
- recall: a synthetic associative-recall task (Zoology's MQAR, without training): n key-value pairs
  written, every key asked again; linear attention, the delta rule and softmax attention over the
  cache, with the same keys and values.
Functions take the kernels to time (a notebook passes the learner's) and `device`; `--device cuda`
runs it all on a GPU, with the clock read after synchronizing.
"""
import argparse
import statistics

import torch

from utils.benchmark import device_of, expect_same, timed
from utils.kv_cache import KVCache, cached_attention
from utils.mla import one_thread
from utils.linear_attention import (chunk_gated_delta_rule, gated_delta_step, hybrid_cache_bytes, l2_normalize,
                                    recurrent_gated_delta_rule)

# Published configs. Qwen3-Next: transformers' Qwen3NextConfig defaults (documented as
# Qwen/Qwen3-Next-80B-A3B-Instruct's): 48 layers, every 4th full attention (16 query heads, 2 KV heads
# of 256), the others Gated DeltaNet (16 key heads and 32 value heads of 128, convolution kernel 4).
# Kimi Linear: transformers' KimiLinearConfig defaults (moonshotai/Kimi-Linear-48B-A3B-Instruct):
# 27 layers, KDA with 32 heads of 128 (kernel 4), MLA with kv_lora_rank 512 and qk_rope_head_dim 64;
# the checkpoint's config.json lists MLA at layers 4, 8, ..., 24 and 27 (7) and KDA at the other 20.
QWEN3_NEXT_80B = dict(name="Qwen3-Next-80B-A3B", n_layers=48, n_linear=36, n_full=12, linear_heads=32, d_k=128, d_v=128,
                      conv_channels=2 * 16 * 128 + 32 * 128, conv_kernel=4, cache_per_token=2 * 2 * 256,
                      full="gated attention, 2 KV heads of 256")
KIMI_LINEAR_48B = dict(name="Kimi-Linear-48B-A3B", n_layers=27, n_linear=20, n_full=7, linear_heads=32, d_k=128, d_v=128,
                       conv_channels=3 * 32 * 128, conv_kernel=4, cache_per_token=512 + 64,
                       full="MLA, latent 512 + RoPE key 64")
CONTEXTS = (4096, 131072, 1048576)


def memory_rows(config: dict, contexts=CONTEXTS, batch_size=1, bytes_fn=hybrid_cache_bytes) -> list[dict]:
    """Bytes per text: the linear layers' states (float32, as the reference kernels keep them) and
    convolution states (bfloat16), the full layers' cache (bfloat16), and the cache if every layer
    were full attention."""
    c = config
    rows = []
    for T in contexts:
        state, cache = bytes_fn(batch_size, T, c["n_linear"], c["n_full"], c["linear_heads"], c["d_k"], c["d_v"],
                                c["cache_per_token"])
        conv = batch_size * c["n_linear"] * c["conv_channels"] * (c["conv_kernel"] - 1) * 2
        all_full = batch_size * T * c["n_layers"] * c["cache_per_token"] * 2
        rows.append({"model": c["name"], "tokens": T, "state MiB": state / 2**20, "conv MiB": conv / 2**20,
                     "cache MiB": cache / 2**20, "all-full MiB": all_full / 2**20})
    return rows


def format_memory(rows) -> str:
    lines = [f"{'model':20} {'tokens':>8} {'linear states':>14} {'conv states':>12} {'full-layer cache':>17} "
             f"{'hybrid total':>13} {'all layers full':>16}"]
    for r in rows:
        total = r["state MiB"] + r["conv MiB"] + r["cache MiB"]
        lines.append(f"{r['model']:20} {r['tokens']:>8} {r['state MiB']:>10.1f} MiB {r['conv MiB']:>8.2f} MiB "
                     f"{r['cache MiB']:>13.1f} MiB {total:>9.1f} MiB {r['all-full MiB']:>12.1f} MiB")
    return "\n".join(lines)


def decode_rows(contexts, heads=8, d=64, repeats=5, step=recurrent_gated_delta_rule, device=None, seed=0) -> list[dict]:
    """Median ms of one decode step at each context length: the gated delta rule on a (heads, d, d)
    state (`step`, called as recurrent_gated_delta_rule on one token) and attention over notebook 07's
    KVCache filled with `context` random positions (the new token's key and value written, then read)."""
    device = device_of(device)
    g = torch.Generator().manual_seed(seed)
    cpu = dict(generator=g, device="cpu")  # drawn on the CPU: the same values on every device
    q, k, v = (torch.randn(1, 1, heads, d, **cpu).to(device) for _ in range(3))
    gate, beta = -torch.rand(1, 1, heads, **cpu).to(device), torch.rand(1, 1, heads, **cpu).to(device)
    state = torch.randn(1, heads, d, d, **cpu).to(device) * 0.1
    cache = KVCache(1, max(contexts) + 1, heads, d, device=device)
    cache.k.normal_(), cache.v.normal_()  # what is cached does not change the time
    rows = []
    with torch.no_grad(), one_thread():
        for context in contexts:
            def linear():
                return step(q, k, v, gate, beta, initial_state=state, output_final_state=True)

            def attention():
                cache.seq_len = context
                keys, values = cache.update(k.transpose(1, 2), v.transpose(1, 2))
                return cached_attention(q.transpose(1, 2), keys, values)
            linear(), attention()  # warm-up
            times = {"linear": [], "attention": []}
            for _ in range(repeats):  # alternating rounds: a busy machine slows both alike
                times["linear"].append(timed(linear, device)[0])
                times["attention"].append(timed(attention, device)[0])
            rows.append({"context": context, **{f"{n} ms": 1e3 * statistics.median(t) for n, t in times.items()},
                         "cache MiB": 2 * context * heads * d * 4 / 2**20, "state MiB": heads * d * d * 4 / 2**20})
    return rows


def prefill_rows(lengths, heads=4, d=64, chunk_size=64, recurrent=recurrent_gated_delta_rule,
                 chunked=chunk_gated_delta_rule, device=None, seed=0) -> list[dict]:
    """Seconds of one prefill of `length` tokens, token by token and chunked, on the same inputs;
    the two outputs and final states are checked equal first."""
    device = device_of(device)
    rows = []
    with torch.no_grad(), one_thread():
        for T in lengths:
            g = torch.Generator().manual_seed(seed + T)
            cpu = dict(generator=g, device="cpu")
            q, k, v = (torch.randn(1, T, heads, d, **cpu).to(device) for _ in range(3))
            gate, beta = (-torch.rand(1, T, heads, **cpu) * 0.1).to(device), torch.rand(1, T, heads, **cpu).to(device)
            args = (q, k, v, gate, beta)
            chunked(*args, chunk_size=chunk_size, use_qk_l2norm=True)  # warm-up
            s_rec, (out_rec, state_rec) = timed(lambda: recurrent(*args, output_final_state=True, use_qk_l2norm=True), device)
            s_chunk, (out_chunk, state_chunk) = timed(
                lambda: chunked(*args, chunk_size=chunk_size, output_final_state=True, use_qk_l2norm=True), device)
            expect_same(out_chunk, out_rec, atol=1e-4, rtol=1e-3, what=f"chunked and recurrent outputs at T = {T}")
            expect_same(state_chunk, state_rec, atol=1e-4, rtol=1e-3, what=f"final states at T = {T}")
            rows.append({"tokens": T, "recurrent s": s_rec, "chunked s": s_chunk})
    return rows


def associative_recall(n_pairs, d=64, trials=4, recent=16, step=gated_delta_step, seed=0, device=None) -> list[dict]:
    """Fraction of keys whose value is recalled, for n key-value pairs written in order, then every key
    asked again. Keys: random unit vectors of d; values: random vectors of d; recalled = the written
    value nearest (largest dot product) to what the memory returns. Three memories of the same pairs:
    - linear attention: S = sum k_iᵀ v_i, read k_j S (d x d numbers, whatever n);
    - delta rule: `step` (gated_delta_step) with beta = 1 and no decay, each write replacing what S returned for
      k_i (d x d numbers);
    - softmax attention over the cache (the hybrid's full-attention layer): every key and value kept
      (2 n d numbers), scores q.k scaled by sqrt(d) (unit keys: the course's 1/sqrt(d) of keys of norm sqrt(d)).
    Also the same fractions over the `recent` pairs written last."""
    device = device_of(device)
    rows = []
    with one_thread():  # small products: on a busy machine, threads waiting for each other cost 30x
        for n in n_pairs:
            rows.append(_recall(n, d, trials, recent, step, seed, device))
    return rows


def _recall(n, d, trials, recent, step, seed, device) -> dict:
    """One row of associative_recall: n pairs, every key asked again."""
    g = torch.Generator().manual_seed(seed + n)
    keys = l2_normalize(torch.randn(trials, n, d, generator=g, device="cpu"), eps=0.0).to(device)
    values = torch.randn(trials, n, d, generator=g, device="cpu").to(device)
    linear = keys @ (keys.transpose(-1, -2) @ values)  # k_j sum_i k_iᵀ v_i, all j at once
    state = torch.zeros(trials, 1, d, d, device=device)
    ones, zeros = torch.ones(trials, 1, device=device), torch.zeros(trials, 1, device=device)
    for i in range(n):
        _, state = step(state, keys[:, None, i], keys[:, None, i], values[:, None, i], zeros, ones)
    delta = keys @ state[:, 0]
    softmax = torch.softmax(keys @ keys.transpose(-1, -2) * d ** 0.5, dim=-1) @ values
    recalled = {name: (read @ values.transpose(-1, -2)).argmax(-1) == torch.arange(n, device=device)
                for name, read in (("linear attention", linear), ("delta rule", delta), ("softmax attention", softmax))}
    newest = slice(max(0, n - recent), n)
    return {"pairs": n, **{name: float(ok.float().mean()) for name, ok in recalled.items()},
            **{f"{name}, newest {recent}": float(ok[:, newest].float().mean()) for name, ok in recalled.items()},
            "state numbers": d * d, "cache numbers": 2 * n * d}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cpu or cuda (default: the default device)")
    device = device_of(parser.parse_args(argv).device)
    print(format_memory(memory_rows(QWEN3_NEXT_80B) + memory_rows(KIMI_LINEAR_48B)))
    for r in decode_rows([1024, 4096, 16384, 65536, 262144], heads=16, d=128, device=device):
        print(f"decode, context {r['context']:>7}: fixed state {r['linear ms']:7.3f} ms, KV cache {r['attention ms']:8.3f} ms")
    for r in prefill_rows([1024, 4096, 16384], heads=16, d=128, device=device):
        print(f"prefill {r['tokens']:>6} tokens: token by token {r['recurrent s']:7.3f} s, chunked {r['chunked s']:7.3f} s")
    for r in associative_recall([16, 64, 256, 1024, 4096], device=device):
        print(f"recall of {r['pairs']:>5} pairs: linear {r['linear attention']:.2f}, delta {r['delta rule']:.2f}, "
              f"softmax {r['softmax attention']:.2f}")


if __name__ == "__main__":
    main()
