"""Notebook 07's input spaces (checks/space.py), and the seeded GPTs generate runs on.

KVCache: call sequences (a prefill then decode steps, one token at a time to full, a write that
fills it exactly, a reset then a refill), each optionally followed by a write one position past
max_seq_len (which must raise); keys and values in different memory layouts ("mixed").
The cached layers: the same sequences through the course's KVCache, two prompts with two caches,
and no cache (where gradients are compared); the layer's context is longer than any cache, so
only the cache's own limit is crossed. generate: multi-head, grouped-query and multi-query GPTs,
with and without the cache, in float32 and float64."""
import torch

import utils.kv_cache as ref
from autograder.checks import generator, randn, seeded_state
from autograder.checks.nb04.causal_layers import representable, steep
from autograder.checks.core.harness import Steps
from autograder.checks.core.space import LAYOUTS, Space
from utils.gpt import GPTConfig, GPTModel

B, D_IN, CONTEXT = 2, 5, 9
LAYER_DTYPES = ("float32", "float64", "bfloat16")
GENERATE_DTYPES = ("float32", "float64")  # argmax over bfloat16 logits ties too often for two right orders of summation

CFG = GPTConfig(vocab_size=23, context_length=40, emb_dim=8, n_heads=2, n_layers=2)
MODELS = {"multi-head": CFG,
          "grouped-query, 2 groups": GPTConfig(vocab_size=23, context_length=40, emb_dim=8, n_heads=4, n_layers=2, n_kv_groups=2),
          "multi-query": GPTConfig(vocab_size=23, context_length=40, emb_dim=8, n_heads=4, n_layers=2, n_kv_groups=1)}


def seeded_gpt(cls=GPTModel, cfg=CFG, dtype=torch.float32):
    model = cls(cfg).eval()
    model.load_state_dict(seeded_state(model, 90))
    return model.to(dtype)


def _dtype(point):
    return getattr(torch, point["dtype"])


# KVCache ------------------------------------------------------------------------------------
_CACHES = {"B2,H3,hd4,max6": (2, 3, 4, 6), "B1,H1,hd1,max4": (1, 1, 1, 4)}
_SEQUENCES = {  # sizes of the updates for a cache of max_seq_len m; None: a reset
    "prefill, decode 1, a chunk of 2": lambda m: [m - 3, 1, 2],
    "one token at a time to full": lambda m: [1] * m,
    "one write that fills it exactly": lambda m: [m],
    "fill, reset, fill again": lambda m: [m, None, m],
    "2 tokens, reset, 1 token": lambda m: [2, None, 1],
}


def _cache_point(point, seed):
    b, h, hd, m = _CACHES[point["shape"]]
    sizes = _SEQUENCES[point["sequence"]](m)
    filled = sum(sizes[sizes.index(None) + 1:] if None in sizes else sizes)
    if point["bad"] != "none":
        sizes = sizes + [m - filled + 1]  # one position past max_seq_len, whatever was filled
    scale = 1e4 if point["values"] == "large" else 1.0
    calls = [("reset", (), {}) if t is None else
             ("update", (randn(b, h, t, hd, seed=seed + 2 * i) * scale, randn(b, h, t, hd, seed=seed + 2 * i + 1) * scale), {})
             for i, t in enumerate(sizes)]
    return Steps(calls, ctor=(b, m, h, hd), ctor_kwargs={"dtype": _dtype(point)})


# The cached layers --------------------------------------------------------------------------
LAYER_CONTEXT = 12  # past every cache below: only the cache's own limit is crossed
_LAYER_SEQUENCES = {  # (tokens per call, which cache: 0, 1 or None), the caches' max_seq_len
    "no cache": ([(5, None)], 0),
    "prefill 3, decode 1, 1, a chunk of 2": ([(3, 0), (1, 0), (1, 0), (2, 0)], CONTEXT),
    "a prompt that fills the cache exactly": ([(4, 0), (2, 0)], 6),
    "two prompts, each with its own cache": ([(3, 0), (1, 0), (2, 1), (1, 1)], CONTEXT),
}
# (batch, d_out, num_heads, num_kv_groups)
CMHA_HEADS = {"B2, d_out 6, 2 heads": (2, 6, 2, 2), "B1, d_out 8, 4 heads": (1, 8, 4, 4), "B3, d_out 5, 1 head": (3, 5, 1, 1)}
GQA_HEADS = {"B2, d_out 8, 4 heads, 2 groups": (2, 8, 4, 2), "B3, d_out 8, 4 heads, 1 group (MQA)": (3, 8, 4, 1),
             "B1, d_out 8, 4 heads, 4 groups (MHA)": (1, 8, 4, 4), "B2, d_out 12, 6 heads, 3 groups": (2, 12, 6, 3)}
_ONE = ("contiguous", "column-major", "strided")  # one input tensor: "mixed" would be column-major again


def _layer_point(heads, gqa):
    def build(point, seed):
        b, d_out, h, groups = heads[point["shape"]]
        steps, max_len = _LAYER_SEQUENCES[point["sequence"]]
        if point["bad"] != "none":  # past the last cache's max_seq_len by one position
            last = steps[-1][1]
            steps = steps + [(max_len - sum(t for t, c in steps if c == last) + 1, last)]
        x = randn(b, sum(t for t, _ in steps), D_IN, seed=seed) * (30.0 if point["values"] == "large" else 1.0)
        caches = [ref.KVCache(b, max_len, groups, d_out // h, dtype=_dtype(point)) for _ in range(2)]
        calls, start = [], 0
        for t, c in steps:
            calls.append(("__call__", (x[:, start:start + t],), {} if c is None else {"kv_cache": caches[c]}))
            start += t
        return Steps(calls, ctor=(D_IN, d_out, LAYER_CONTEXT, h, *((groups,) if gqa else ())),
                     ctor_kwargs={"qkv_bias": point["flag:qkv_bias"]})
    return build


def _layer_space(heads, gqa):
    return Space({"sequence": tuple(_LAYER_SEQUENCES), "bad": ("none", "one position past the cache"), "shape": tuple(heads),
                  "flag:qkv_bias": (False, True), "values": ("normal", "large"), "dtype": LAYER_DTYPES, "layout": _ONE},
                 _layer_point(heads, gqa),
                 valid=lambda p: (p["sequence"] != "no cache" or p["bad"] == "none") and representable(p),
                 no_grads=lambda p: p["values"] == "large", tolerance=steep)


# generate -----------------------------------------------------------------------------------
_PROMPTS = {"B1,T1,+3": (1, 1, 3), "B2,T3,+4": (2, 3, 4), "B3,T5,+0": (3, 5, 0)}


def _generate_point(point, seed):
    b, t, new = _PROMPTS[point["shape"]]
    ids = {"distinct ids": torch.randint(0, 23, (b, t), generator=generator(seed)), "one id repeated": torch.full((b, t), 22)}[point["values"]]
    return (seeded_gpt(cfg=MODELS[point["arguments:model"]], dtype=_dtype(point)), ids, new), {"use_cache": point["flag:use_cache"]}


def _generate_valid(point):
    """float64 where it can matter, with the caches (a cache made in float32 by hand); the ids laid
    out in memory in float32: each probe copies a GPT, so the oracle stays within a mutant's time."""
    return point["dtype"] == "float32" or point["flag:use_cache"] and point["layout"] == "contiguous"


SPACES = {
    "KVCache": Space({"sequence": tuple(_SEQUENCES), "bad": ("none", "one position past max_seq_len"), "shape": tuple(_CACHES),
                      "values": ("normal", "large"), "dtype": LAYER_DTYPES, "layout": LAYOUTS}, _cache_point),
    "CachedMultiHeadAttention": _layer_space(CMHA_HEADS, gqa=False),
    "GroupedQueryAttention": _layer_space(GQA_HEADS, gqa=True),
    "generate": Space({"arguments:model": tuple(MODELS), "flag:use_cache": (True, False), "shape": tuple(_PROMPTS),
                       "values": ("distinct ids", "one id repeated"), "dtype": GENERATE_DTYPES, "layout": ("contiguous", "strided")},
                      _generate_point, valid=_generate_valid,
                      seeds=(0,)),  # the seed only draws the ids: one seed keeps the oracle (every point) within a mutant's time
    "kv_cache_bytes": Space({"shape": ((1, 1, 32, 8, 128), (3, 10, 2, 4, 8), (2, 1024, 12, 12, 64), (1, 7, 1, 1, 2), (8, 131072, 61, 128, 128)),
                             "arguments:bytes_per_element": ("default", 1, 4)},
                            lambda p, seed: (p["shape"], {} if p["arguments:bytes_per_element"] == "default"
                                             else {"bytes_per_element": p["arguments:bytes_per_element"]})),
}
