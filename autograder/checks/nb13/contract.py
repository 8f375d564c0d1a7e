"""Notebook 13's input families: the rolling cache fed chunks across calls, a reset and the same
positions again; sinks on blocked rows, masks, large logits and dtypes; the indexer, top-k with
ties and k past the length, and sparse MLA on both paths."""
import torch

import utils.dsa as ref
from autograder.checks import generator, randn
from autograder.checks.core import rules
from autograder.checks.core.harness import Family, Probe, Steps
from autograder.checks.core.rules import Contract
from autograder.checks.core.space import Space
from utils.sliding_window import sliding_window_mask as ref_mask

GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")


def _chunks(seed, sizes, B=2, H=2, hd=3, dtype=torch.float32):
    """Steps of RollingKVCache.update on random keys and values (batch items and heads differ); "reset" between texts.
    Every sequence ends with a one-token update: what is held then is the window, whatever came before."""
    calls = []
    for i, T in enumerate(sizes):
        if T == "reset":
            calls.append(("reset", (), {}))
        else:
            calls.append(("update", (randn(B, H, T, hd, seed=seed + i).to(dtype), randn(B, H, T, hd, seed=seed + 50 + i).to(dtype)), {}))
    return Steps(calls, ctor_kwargs=None if dtype == torch.float32 else {"dtype": dtype})


def _same_text_twice(seed):  # reset, then the very same positions written again
    first = _chunks(seed, [2, 3, 1]).calls
    return Steps(first + [("reset", (), {})] + first)


def _sink_inputs(seed, mask=None, scale=1.0, sinks=(-1.5, 0.3, 2.0), dtype=torch.float32, B=2, T_q=4, T_k=6):
    q, k, v = randn(B, 3, T_q, 8, seed=seed) * scale, randn(B, 3, T_k, 8, seed=seed + 1), randn(B, 3, T_k, 5, seed=seed + 2)
    return tuple(t.to(dtype) for t in (q, k, v, torch.tensor(sinks))) + (mask,), {}


def _blocked_row():
    blocked = torch.ones(4, 6, dtype=torch.bool)
    blocked[1:, 1:5] = False  # row 0 fully blocked: all its weight on the sink
    return blocked


def _scores(seed, B=2, T=5, S=7, ties=False, dtype=torch.float32, topk=3):
    scores = randn(B, T, S, seed=seed)
    if ties:  # every row: its best once, then three equal scores straddling the 2nd and 3rd places
        scores = torch.tensor([3.0, 1.0, 1.0, 1.0, 0.0, -1.0, -2.0]).repeat(B, T, 1)
        scores[1] = scores[1].flip(-1)
    scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(S - T + 1), float("-inf"))  # the future
    return (scores.to(dtype), topk), {}


INDEX_CFG = ref.DSAConfig(dim=20, n_heads=2, q_lora_rank=10, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4,
                          v_head_dim=3, max_seq_len=12, rope_theta=100.0, index_n_heads=6, index_head_dim=8, index_topk=3)
SPARSE_CFG = ref.DSAConfig(dim=20, n_heads=3, q_lora_rank=10, kv_lora_rank=8, qk_nope_head_dim=6, qk_rope_head_dim=4,
                           v_head_dim=5, max_seq_len=12, rope_theta=100.0, index_n_heads=6, index_head_dim=8, index_topk=3)


def _indexer_inputs(seed, B, T, scale=1.0):
    return (randn(B, T, INDEX_CFG.dim, seed=seed) * scale, randn(B, T, INDEX_CFG.q_lora_rank, seed=seed + 1) * scale), {}


FAMILIES = {
    "sliding_window_mask": Family([
        Probe("edges", "a window longer than the prompt", lambda: ((2, 5, 9), {}), "比提示更长的窗口"),
        Probe("edges", "one query (a decoding step)", lambda: ((1, 8, 4), {}), "一个查询（解码的一步）"),
        Probe("edges", "a window of 1", lambda: ((4, 6, 1), {}), "大小为 1 的窗口"),
        Probe("arguments", "a chunk of queries after a prefix", lambda: ((3, 7, 3), {}), "前缀之后的一块查询"),
    ], compares=("values", "shape", "dtype", "device")),
    "RollingKVCache": Family([
        Probe("state", "one token at a time, wrapping around the window", lambda: _chunks(200, [1] * 7), "每次一个词元，绕回窗口"),
        Probe("state", "a chunk longer than the window, then tokens", lambda: _chunks(210, [5, 1, 2, 1]), "比窗口更长的一块，然后是单个词元"),
        Probe("state", "reset, then the same positions again", lambda: _same_text_twice(220), "重置之后再写同样的位置"),
        Probe("edges", "a text shorter than the window", lambda: _chunks(230, [1, 1]), "比窗口更短的文本"),
        Probe("dtype", "a float64 cache: 2 tokens, a reset, then 1 token", lambda: _chunks(235, [2, "reset", 1], dtype=torch.float64),
              "float64 缓存：写入 2 个词元，重置，再写入 1 个"),
    ], compares=("values", "shape", "dtype", "device", "inputs", "state", "holds")),
    "attention_with_sinks": Family([
        Probe("batch", "batch items and heads that differ", lambda: _sink_inputs(240), "各不相同的批次项与注意力头"),
        Probe("edges", "a fully blocked row", lambda: _sink_inputs(241, _blocked_row()), "完全被屏蔽的一行"),
        Probe("arguments", "a (B, 1, T_q, T_k) sliding-window mask", lambda: _sink_inputs(242, ref_mask(4, 6, 3).expand(2, 1, 4, 6)),
              "(B, 1, T_q, T_k) 的滑动窗口掩码"),
        Probe("batch", "a (B, 1, T_q, T_k) mask that differs between batch items",
              lambda: _sink_inputs(246, torch.stack((ref_mask(4, 6, 3), ref_mask(4, 6, 2)))[:, None]), "各批次项不同的 (B, 1, T_q, T_k) 掩码"),
        Probe("extreme", "logits and sinks in the hundreds", lambda: _sink_inputs(243, scale=100.0, sinks=(300.0, -300.0, 0.0)),
              "数百量级的 logits 和 sink"),
        Probe("dtype", "float64 inputs", lambda: _sink_inputs(244, ref_mask(4, 6, 2), dtype=torch.float64), "float64 输入"),
        Probe("dtype", "bfloat16 inputs", lambda: _sink_inputs(245, dtype=torch.bfloat16), "bfloat16 输入"),
    ], compares=GRADED),
    "LightningIndexer": Family([
        Probe("batch", "two texts that differ", lambda: _indexer_inputs(250, 2, 5), "两段不同的文本"),
        Probe("edges", "a one-token text", lambda: _indexer_inputs(251, 1, 1), "只有一个词元的文本"),
        Probe("extreme", "inputs of order 20", lambda: _indexer_inputs(252, 2, 4, scale=20.0), "20 量级的输入"),
    ], compares=GRADED),
    "topk_key_mask": Family([
        Probe("batch", "batch items that differ", lambda: _scores(260), "各不相同的批次项"),
        Probe("ties", "ties at the k-th place", lambda: _scores(261, ties=True), "第 k 名处的并列值"),
        Probe("edges", "k >= length", lambda: _scores(262, topk=9), "k >= 长度"),
        Probe("edges", "k = 1", lambda: _scores(263, topk=1), "k = 1"),
        Probe("dtype", "float64 scores", lambda: _scores(264, dtype=torch.float64), "float64 的分数"),
        Probe("dtype", "bfloat16 scores", lambda: _scores(265, dtype=torch.bfloat16), "bfloat16 的分数"),
    ], compares=("values", "shape", "dtype", "device", "inputs")),
    "SparseMLA": Family([
        Probe("batch", "two texts that differ, more keys than index_topk", lambda: ((randn(2, 6, SPARSE_CFG.dim, seed=270), 0, False), {}),
              "两段不同的文本，键多于 index_topk"),
        Probe("arguments", "the absorbed path", lambda: ((randn(2, 6, SPARSE_CFG.dim, seed=271), 0, True), {}), "吸收路径"),
        Probe("edges", "a one-token text", lambda: ((randn(1, 1, SPARSE_CFG.dim, seed=272), 0, False), {}), "只有一个词元的文本"),
    ], compares=GRADED),
}


# Contracts and input spaces ---------------------------------------------------------------------
_ALL = ("float32", "float64", "bfloat16")
_LAYOUTS = ("contiguous", "column-major", "strided", "mixed")
_BOOL = ("the result is `torch.bool`", "结果是 `torch.bool`")
CONTRACTS = rules.register("13", [
    Contract("sliding_window_mask", dtypes=(), dtype=_BOOL, device="none",
             preconditions=(("num_queries <= num_keys and window >= 1", "num_queries <= num_keys 且 window >= 1"),)),
    Contract("RollingKVCache", dtypes=("float32", "float64"), device="argument",
             dtype=("the cache keeps the dtype it is built with (`dtype=`)", "缓存保持构造时指定的 dtype（`dtype=`）"),
             notes=(("It holds storage for `window` positions only, whatever the length of the text.",
                     "无论文本多长，它只为 `window` 个位置保存存储。"),)),
    Contract("attention_with_sinks", dtypes=_ALL),
    Contract("LightningIndexer", dtypes=("float32", "float64"),
             dtype=("the layer moved with `.to(dtype)` computes in that dtype", "用 `.to(dtype)` 转换后的层用该 dtype 计算")),
    Contract("topk_key_mask", dtypes=_ALL, dtype=_BOOL, helpers=("topk_indices",)),
    Contract("SparseMLA", dtypes=("float32", "float64"), helpers=("gather_positions",),
             dtype=("the layer moved with `.to(dtype)` computes in that dtype", "用 `.to(dtype)` 转换后的层用该 dtype 计算")),
])

OTHER_INDEX_CFG = ref.DSAConfig(dim=24, n_heads=2, q_lora_rank=12, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=2,
                                v_head_dim=3, max_seq_len=16, rope_theta=1000.0, index_n_heads=4, index_head_dim=6, index_topk=5)
OTHER_SPARSE_CFG = ref.DSAConfig(dim=24, n_heads=2, q_lora_rank=12, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=2,
                                 v_head_dim=3, max_seq_len=16, rope_theta=1000.0, index_n_heads=4, index_head_dim=6, index_topk=5)
_CFGS = {"cfg A": (INDEX_CFG, SPARSE_CFG), "cfg B": (OTHER_INDEX_CFG, OTHER_SPARSE_CFG)}
# Call sequences of a layer with a cache: (start, end) segments of one text; start 0 starts a new one.
_SEGMENTS = {"prefill": [(0, 5)], "prefill, decode": [(0, 5), (5, 6)], "chunks": [(0, 3), (3, 4), (4, 7)],
             "a new text": [(0, 4), (0, 2)]}
_CACHE_RUNS = {"one at a time": [1] * 7, "a long chunk": [5, 1, 2, 1], "reset": [2, 3, "reset", 1],
               "window-sized chunks": "window", "short": [1, 1]}


def _mask_point(p, seed):
    t_q = p["shape"]
    window = p["arguments:window"]
    return (t_q, t_q + p["arguments:extra_keys"], window), {}


def _cache_point(p, seed):
    batch, window, heads, hd = p["shape"]
    sizes = _CACHE_RUNS[p["sequence"]]
    sizes = [window, window, 1] if sizes == "window" else sizes
    dtype = {"float32": torch.float32, "float64": torch.float64}[p["dtype"]]
    steps = _chunks(seed, sizes, B=batch, H=heads, hd=hd, dtype=dtype)
    return Steps(steps.calls, ctor=(batch, window, heads, hd), ctor_kwargs={"dtype": dtype})


def _sinks_point(p, seed):
    B, H, t_q, t_k, d, d_v = p["shape"]
    large = p["values"] == "large"
    q, k, v = randn(B, H, t_q, d, seed=seed) * (100.0 if large else 1.0), randn(B, H, t_k, d, seed=seed + 1), randn(B, H, t_k, d_v, seed=seed + 2)
    sinks = torch.linspace(-300.0, 300.0, H) if large else torch.linspace(-1.5, 2.0, H)
    window = ref_mask(t_q, t_k, 2)
    mask = {"none": None, "(T_q, T_k) window": window, "(B, 1, T_q, T_k), per item": torch.stack(
        [ref_mask(t_q, t_k, 2 + b) for b in range(B)])[:, None], "a fully blocked row": window.clone().index_fill_(0, torch.tensor([0]), True)}[
        p["arguments:mask"]]
    return (q, k, v, sinks, mask), {}


def _layer_steps(p, seed, cfg, inputs):
    calls = []
    for start, end in _SEGMENTS[p["sequence"]]:
        args = inputs(seed + 10 * start + end, end - start)
        calls.append(("__call__", args, {}))
    return Steps(calls, ctor=(cfg,))


def _indexer_point(p, seed):
    cfg = _CFGS[p["shape:cfg"]][0]
    scale = 20.0 if p["values"] == "large" else 1.0
    start_of = dict((i, s) for i, (s, _) in enumerate(_SEGMENTS[p["sequence"]]))
    steps = _layer_steps(p, seed, cfg, lambda s, T: (randn(p["shape"], T, cfg.dim, seed=s) * scale,
                                                     randn(p["shape"], T, cfg.q_lora_rank, seed=s + 1) * scale))
    return Steps([(m, (*a, start_of[i]), k) for i, (m, a, k) in enumerate(steps.calls)], ctor=steps.ctor)


def _topk_point(p, seed):
    B, T, S = p["shape"]
    scores = randn(B, T, S, seed=seed)
    if p["values"] == "ties":
        scores = torch.round(scores)  # many equal scores, some at the k-th place
    elif p["values"] == "one finite per row":
        scores = torch.full((B, T, S), float("-inf")).scatter(-1, torch.randint(0, S, (B, T, 1), generator=generator(seed)), 1.0)
    scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(S - T + 1), float("-inf"))  # the future
    return (scores, p["arguments:topk"]), {}


def _sparse_point(p, seed):
    cfg = _CFGS[p["shape:cfg"]][1]
    scale = 10.0 if p["values"] == "large" else 1.0
    start_of = dict((i, s) for i, (s, _) in enumerate(_SEGMENTS[p["sequence"]]))
    steps = _layer_steps(p, seed, cfg, lambda s, T: (randn(p["shape"], T, cfg.dim, seed=s) * scale,))
    return Steps([(m, (*a, start_of[i], p["flag:absorb"]), k) for i, (m, a, k) in enumerate(steps.calls)], ctor=steps.ctor)


SPACES = {
    "sliding_window_mask": Space({"shape": (1, 3, 5), "arguments:extra_keys": (0, 2, 7), "arguments:window": (1, 2, 4, 20)}, _mask_point),
    "RollingKVCache": Space({"shape": ((2, 3, 2, 3), (1, 1, 1, 2), (3, 4, 2, 5)), "sequence": tuple(_CACHE_RUNS),
                             "values": ("normal",), "dtype": CONTRACTS["RollingKVCache"].dtypes, "layout": _LAYOUTS}, _cache_point),
    "attention_with_sinks": Space({"shape": ((2, 3, 4, 6, 8, 5), (1, 2, 1, 5, 4, 4), (2, 1, 5, 5, 3, 2)),
                                   "arguments:mask": ("none", "(T_q, T_k) window", "(B, 1, T_q, T_k), per item", "a fully blocked row"),
                                   "values": ("normal", "large"), "dtype": _ALL, "layout": _LAYOUTS}, _sinks_point,
                                  no_grads=lambda p: p["values"] == "large"),
    "LightningIndexer": Space({"shape": (1, 2), "shape:cfg": tuple(_CFGS), "sequence": tuple(_SEGMENTS), "values": ("normal", "large"),
                               "dtype": CONTRACTS["LightningIndexer"].dtypes, "layout": _LAYOUTS}, _indexer_point,
                              no_grads=lambda p: p["values"] == "large"),
    "topk_key_mask": Space({"shape": ((2, 5, 7), (1, 1, 4), (3, 4, 9)), "values": ("normal", "ties", "one finite per row"),
                            "arguments:topk": (1, 3, 20), "dtype": _ALL, "layout": _LAYOUTS}, _topk_point),
    "SparseMLA": Space({"shape": (1, 2), "shape:cfg": tuple(_CFGS), "sequence": tuple(_SEGMENTS), "flag:absorb": (False, True),
                        "values": ("normal", "large"), "dtype": CONTRACTS["SparseMLA"].dtypes, "layout": _LAYOUTS}, _sparse_point,
                       no_grads=lambda p: p["values"] == "large"),
}
for _name, _space in SPACES.items():  # each family's covering array joins its pinned probes
    FAMILIES[_name] = Family(FAMILIES[_name].pinned, FAMILIES[_name].compares, FAMILIES[_name].tolerance,
                             FAMILIES[_name].grad_tolerance, space=_space)
