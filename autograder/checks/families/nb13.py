"""Notebook 13's input families: the rolling cache fed chunks across calls, a reset and the same
positions again; sinks on blocked rows, masks, large logits and dtypes; the indexer, top-k with
ties and k past the length, and sparse MLA on both paths."""
import torch

import utils.dsa as ref
from autograder.checks import randn
from autograder.checks.harness import Family, Probe, Steps
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
