"""Notebook 07's input families: layers fed batches, large inputs and a cache across calls; the
KVCache fed updates, a reset and float64/bfloat16 caches; generate on prompts and seeded GPTs
(multi-head, grouped-query and multi-query). The generated spaces are in nb07_spaces.py."""
import torch

import utils.kv_cache as ref
from autograder.checks import randn
from autograder.checks.core import rules
from autograder.checks.nb07.spaces import (B, CFG, CONTEXT, D_IN, GENERATE_DTYPES, LAYER_DTYPES, MODELS, SPACES,  # noqa: F401
                                                    seeded_gpt)
from autograder.checks.core.harness import Family, Probe, Steps
from autograder.checks.core.rules import Contract, Raises

_ALL = LAYER_DTYPES
_OVERFLOW = Raises("ValueError", "the new tokens do not fit in the cache: its `update` raises it (let it through); a write that "
                   "fills the cache exactly is fine", "新词元放不进缓存：缓存的 `update` 会抛出它（让它传出来）；恰好填满缓存的写入是可以的")
_LAYER_NOTES = (("With a cache, only the new tokens are projected; everything kept between calls is in the cache it is given "
                 "(the layer holds no state); without one, the layer trains (gradients reach every weight).",
                 "有缓存时只投影新的词元；调用之间保存的一切都在传入的缓存里（层本身不保存状态）；没有缓存时，层要参与训练（梯度传到每个权重）。"),)
_LAYER_DTYPE = ("the layer moved with `.to(dtype)`, with a cache of that dtype, computes in that dtype",
                "用 `.to(dtype)` 转换、配同一 dtype 缓存的层用该 dtype 计算")
_FITS = ("the cached and new tokens together are at most `context_length`", "已缓存的和新的词元加起来不超过 `context_length`")
_DIVISIBLE = "`d_out` is divisible by `num_heads`"

CONTRACTS = rules.register("07", [
    Contract("KVCache", dtypes=_ALL, dtype=("the keys and values have the `dtype` the cache is given", "键和值的 dtype 是传给缓存的 `dtype`"),
             device="argument",
             raises=(Raises("ValueError", "an update does not fit: `seq_len + T_new > max_seq_len` (a write that fills the cache exactly "
                            "is fine)", "一次写入放不下：`seq_len + T_new > max_seq_len`（恰好填满缓存的写入是可以的）"),),
             notes=(("`update` writes into the preallocated `self.k` and `self.v` and returns views of their filled part (not copies); "
                     "`reset()` empties the cache for a new prompt; keys and values may come in any memory layout.",
                     "`update` 写入预先分配的 `self.k` 和 `self.v`，并返回其已填部分的视图（不是副本）；`reset()` 为新的提示清空缓存；"
                     "键和值可能以任何内存布局传入。"),)),
    Contract("CachedMultiHeadAttention", helpers=("cached_attention",), dtypes=_ALL, dtype=_LAYER_DTYPE, raises=(_OVERFLOW,),
             preconditions=(_FITS, (_DIVISIBLE, "`d_out` 能被 `num_heads` 整除")),
             notes=_LAYER_NOTES + (("Keeps `self.num_heads` and `self.head_dim` (the GPT reads them).",
                                    "保留 `self.num_heads` 和 `self.head_dim`（GPT 会读取它们）。"),)),
    Contract("generate", dtypes=GENERATE_DTYPES,
             dtype=("models of that dtype (make the caches with `model.new_caches`, which follows the model); the result is token "
                    "ids (`torch.long`), the prompt first", "使用该 dtype 的模型（用 `model.new_caches` 建缓存，它会跟随模型）；"
                    "结果是词元 id（`torch.long`），提示在前"),
             preconditions=(("`T + max_new_tokens` is at most the model's `context_length`", "`T + max_new_tokens` 不超过模型的 `context_length`"),),
             notes=(("Greedy and the same tokens with and without the cache, for every attention the GPT may hold (multi-head, "
                     "grouped-query, multi-query); the model runs under `torch.no_grad()`; with the cache, the prompt is fed once, then "
                     "only the newest token.", "贪心解码，有缓存和没有缓存时给出相同的词元，无论 GPT 用哪种注意力（多头、分组查询、多查询）；"
                     "模型在 `torch.no_grad()` 下运行；有缓存时提示只送入一次，之后只送入最新的词元。"),)),
    Contract("kv_cache_bytes", dtypes=(), dtype=("the result is an `int`", "结果是 `int`"), device="none"),
    Contract("GroupedQueryAttention", helpers=("cached_attention",), dtypes=_ALL, dtype=_LAYER_DTYPE, raises=(_OVERFLOW,),
             preconditions=(_FITS, (f"{_DIVISIBLE}, and `num_heads` by `num_kv_groups`", "`d_out` 能被 `num_heads` 整除，`num_heads` 能被 `num_kv_groups` 整除")),
             notes=_LAYER_NOTES + (("Keeps `self.num_heads`, `self.head_dim` and `self.num_kv_heads`; the cache holds the "
                                    "`num_kv_groups` key/value heads, before they are repeated.",
                                    "保留 `self.num_heads`、`self.head_dim` 和 `self.num_kv_heads`；缓存保存重复之前的 `num_kv_groups` 个键/值头。"),)),
])


def _kv(seed, B=2, H=3, T=1, hd=4, dtype=torch.float32):
    """Keys and values (B, H, T, hd) whose batch items and heads differ; the keys not contiguous."""
    k = randn(B, T, H, hd, seed=seed).transpose(1, 2).to(dtype)
    return k, randn(B, H, T, hd, seed=seed + 1).to(dtype)


def _updates(sizes, seed, **shape):
    return [("update", _kv(seed + 2 * i, T=T, **shape), {}) for i, T in enumerate(sizes)]


def _layer_family(kv_heads, head_dim, space):
    """A layer's pinned probes: batches that differ, large inputs, and a cached sequence of 3, 1 and 2
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
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads", "state", "holds"), space=space)


FAMILIES = {
    "CachedMultiHeadAttention": _layer_family(kv_heads=2, head_dim=3, space=SPACES["CachedMultiHeadAttention"]),  # d_out 6, 2 heads
    "GroupedQueryAttention": _layer_family(kv_heads=2, head_dim=2, space=SPACES["GroupedQueryAttention"]),  # d_out 8, 4 heads, 2 groups
    "generate": Family([
        Probe("batch", "two prompts that differ, with the cache", lambda: ((seeded_gpt(), torch.tensor([[4, 9, 1], [13, 13, 2]]), 4), {}),
              "两个不同的提示，使用缓存"),
        Probe("arguments", "a grouped-query GPT (2 key/value heads for 4 query heads)",
              lambda: ((seeded_gpt(cfg=MODELS["grouped-query, 2 groups"]), torch.tensor([[4, 9, 1], [13, 13, 2]]), 4), {}),
              "分组查询的 GPT（4 个查询头共用 2 个键/值头）"),
        Probe("edges", "a one-token prompt", lambda: ((seeded_gpt(), torch.tensor([[7], [21]]), 3), {}), "只有一个词元的提示"),
        Probe("edges", "no new tokens", lambda: ((seeded_gpt(), torch.tensor([[4, 9, 1]]), 0), {}), "不生成新词元"),
    ], compares=("values", "shape", "dtype", "device", "inputs"), space=SPACES["generate"]),
    "kv_cache_bytes": Family([
        Probe("edges", "sizes of one", lambda: ((1, 1, 1, 1, 1), {}), "全部为 1 的大小"),
        Probe("arguments", "bytes_per_element=1 (FP8) and 4 (float32)", lambda: ((2, 5, 3, 4, 16), {"bytes_per_element": 1}),
              "bytes_per_element=1（FP8）和 4（float32）"),
        Probe("extreme", "DeepSeek-V3's size at 128K tokens, batch 8", lambda: ((8, 131072, 61, 128, 128), {"bytes_per_element": 4}),
              "DeepSeek-V3 的规模，128K 词元，批大小 8"),
    ], compares=("values",), space=SPACES["kv_cache_bytes"]),
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
    ], compares=("values", "shape", "dtype", "device", "inputs", "state", "holds"), space=SPACES["KVCache"]),
}

# Mutants of the model answers that no input the contract allows can tell apart (python -m autograder mutants 07).
_NO_CHECK = "the sizes' divisibility is a precondition (the text's): no probe builds a layer whose sizes do not divide"
_TRANSPOSE = "k is (B, H, T, hd): its dimension 2 is its dimension -2, so transpose(2, -1) is transpose(-2, -1)"
EQUIVALENT = {
    "CachedMultiHeadAttention": {
        "line 5: if d_out % num_heads -> if False": _NO_CHECK,
        "line 7: // -> /": "head_dim is used only as the scale's sqrt(head_dim), and d_out / num_heads equals d_out // num_heads where they divide",
        "line 22: -2 -> 2": _TRANSPOSE,
    },
    "GroupedQueryAttention": {
        "line 5: if d_out % num_heads or num_heads % num_kv_groups -> if False": _NO_CHECK,
        "line 25: -2 -> 2": _TRANSPOSE,
    },
    "generate": {
        "line 13: -1 -> 1": "logits[:, -1] is (B, vocab): its dimension 1 is its dimension -1, the same argmax",
        "line 15: < -> <=": "one more decode step after the last new token: the same tokens, and the caches (T + max_new_tokens "
                            "positions) hold it exactly; one wasted forward pass in max_new_tokens, which the contract does not fix",
        "line 15: + -> -": "the same extra decode step after the last new token (step - 1 < max_new_tokens always holds): the same tokens",
        "line 15: (step + 1) -> its left operand": "the same extra decode step after the last new token: the same tokens",
        "line 15: constant 1 -> 0": "the same extra decode step after the last new token: the same tokens",
    },
}
