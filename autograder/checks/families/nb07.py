"""Notebook 07's input families: layers fed batches, large inputs and a cache across calls; the
KVCache fed updates, a reset and float64/bfloat16 caches; generate on prompts and a seeded GPT."""
import torch

import utils.kv_cache as ref
from autograder.checks import randn, seeded_state
from autograder.checks.harness import Family, Probe, Steps
from utils.gpt import GPTConfig, GPTModel

B, D_IN, CONTEXT = 2, 5, 9


def _kv(seed, B=2, H=3, T=1, hd=4, dtype=torch.float32):
    """Keys and values (B, H, T, hd) whose batch items and heads differ; the keys not contiguous."""
    k = randn(B, T, H, hd, seed=seed).transpose(1, 2).to(dtype)
    return k, randn(B, H, T, hd, seed=seed + 1).to(dtype)


def _updates(sizes, seed, **shape):
    return [("update", _kv(seed + 2 * i, T=T, **shape), {}) for i, T in enumerate(sizes)]


def _layer_family(kv_heads, head_dim):
    """A layer's family: batches that differ, large inputs, and a cached sequence of 3, 1 and 2
    tokens through the course's KVCache (so a mistake in the learner's KVCache costs marks once)."""
    def cached():
        x, cache = randn(B, 6, D_IN, seed=100), ref.KVCache(B, CONTEXT, kv_heads, head_dim)
        return Steps([("__call__", (x[:, a:b],), {"kv_cache": cache}) for a, b in ((0, 3), (3, 4), (4, 6))])
    return Family([
        Probe("batch", "a batch whose items differ", lambda: ((randn(3, 5, D_IN, seed=101),), {}), "各项不同的批次"),
        Probe("extreme", "inputs 30 times larger", lambda: ((30 * randn(B, 4, D_IN, seed=102),), {}), "放大 30 倍的输入"),
        Probe("state", "a cache fed 3, 1, then 2 tokens", cached, "依次送入 3、1、2 个词元的缓存"),
        Probe("state", "a batch of two, then a batch of one", lambda: Steps([("__call__", (randn(2, 3, D_IN, seed=103),), {}),
                                                                            ("__call__", (randn(1, 4, D_IN, seed=104),), {})]),
              "先是两个的批次，然后是一个的批次"),
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads", "state", "holds"))


FAMILIES = {
    "CachedMultiHeadAttention": _layer_family(kv_heads=2, head_dim=3),  # d_out 6, 2 heads
    "GroupedQueryAttention": _layer_family(kv_heads=2, head_dim=2),  # d_out 8, 4 heads, 2 groups
    "generate": Family([
        Probe("batch", "two prompts that differ, with the cache", lambda: ((seeded_gpt(), torch.tensor([[4, 9, 1], [13, 13, 2]]), 4), {}),
              "两个不同的提示，使用缓存"),
        Probe("arguments", "use_cache=False", lambda: ((seeded_gpt(), torch.tensor([[4, 9, 1], [13, 13, 2]]), 4), {"use_cache": False}),
              "use_cache=False"),
        Probe("edges", "a one-token prompt", lambda: ((seeded_gpt(), torch.tensor([[7], [21]]), 3), {}), "只有一个词元的提示"),
        Probe("edges", "no new tokens", lambda: ((seeded_gpt(), torch.tensor([[4, 9, 1]]), 0), {}), "不生成新词元"),
    ], compares=("values", "shape", "dtype", "device", "inputs")),
    "kv_cache_bytes": Family([
        Probe("edges", "sizes of one", lambda: ((1, 1, 1, 1, 1), {}), "全部为 1 的大小"),
        Probe("arguments", "bytes_per_element=1 (FP8) and 4 (float32)", lambda: ((2, 5, 3, 4, 16), {"bytes_per_element": 1}),
              "bytes_per_element=1（FP8）和 4（float32）"),
        Probe("extreme", "DeepSeek-V3's size at 128K tokens, batch 8", lambda: ((8, 131072, 61, 128, 128), {"bytes_per_element": 4}),
              "DeepSeek-V3 的规模，128K 词元，批大小 8"),
    ], compares=("values",)),
    "KVCache": Family([
        Probe("state", "updates of 3, 1 and 2 tokens, a reset, then 1 token",
              lambda: Steps(_updates([3, 1, 2], 80) + [("reset", (), {})] + _updates([1], 90)), "先写入 3、1、2 个词元，重置，再写入 1 个"),
        Probe("edges", "one update that fills every position",
              lambda: Steps(_updates([6], 92)), "一次写满所有位置"),
        Probe("dtype", "a float64 cache", lambda: Steps(_updates([2, 1], 94, B=1, H=2, hd=3, dtype=torch.float64), ctor=(1, 4, 2, 3),
                                                       ctor_kwargs={"dtype": torch.float64}), "float64 缓存"),
        Probe("dtype", "a bfloat16 cache", lambda: Steps(_updates([2, 1], 96, B=1, H=2, hd=3, dtype=torch.bfloat16), ctor=(1, 4, 2, 3),
                                                        ctor_kwargs={"dtype": torch.bfloat16}), "bfloat16 缓存"),
        Probe("state", "a bfloat16 cache: 2 tokens, a reset, then 1 token",
              lambda: Steps(_updates([2], 97, B=1, H=2, hd=3, dtype=torch.bfloat16) + [("reset", (), {})]
                            + _updates([1], 99, B=1, H=2, hd=3, dtype=torch.bfloat16), ctor=(1, 4, 2, 3), ctor_kwargs={"dtype": torch.bfloat16}),
              "bfloat16 缓存：写入 2 个词元，重置，再写入 1 个"),
    ], compares=("values", "shape", "dtype", "device", "inputs", "state", "holds")),
}


CFG = GPTConfig(vocab_size=23, context_length=40, emb_dim=8, n_heads=2, n_layers=2)


def seeded_gpt(cls=GPTModel):
    model = cls(CFG).eval()
    model.load_state_dict(seeded_state(model, 90))
    return model
