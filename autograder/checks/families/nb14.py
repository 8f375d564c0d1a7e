"""Notebook 14's input families (FlashAttention): what the harness runs each exercise and the
course's utils.flash_attention on, as data (autograder/checks/harness.py)."""
import torch

from autograder.checks import randn
from autograder.checks.flash_variants import heads_layout, scaled_scores
from autograder.checks.harness import Family, Probe

_ROWS = ("values", "shape", "dtype", "device", "inputs")


def _rows(seed, shape=(2, 3, 11), scale=1.0, block=4, dtype=torch.float32, shift=None):
    x = randn(*shape, seed=seed) * scale
    if shift is not None:  # rows far from 0: exp overflows (or underflows to 0 / 0) without the running maximum
        x = x + torch.tensor(shift).view(-1, *[1] * (x.dim() - 1))
    return (x.to(dtype), block), {}


def _qkv(seed, B=2, H=2, T_q=5, T_k=7, d=4, d_v=3, scale=1.0, dtype=torch.float32):
    q, k, v = heads_layout(B, H, T_q, d, seed) * scale, heads_layout(B, H, T_k, d, seed + 1), heads_layout(B, H, T_k, d_v, seed + 2)
    return tuple(t.to(dtype) for t in (q, k, v))


def _forward_args(seed, causal, blocks=(2, 3), **sizes):
    return _qkv(seed, **sizes), dict(causal=causal, **({} if blocks is None else dict(block_q=blocks[0], block_k=blocks[1])))


def _backward_args(seed, causal, blocks=(2, 3), **sizes):
    """q, k, v, the out and lse the forward saved (PyTorch's own; built inside the check, where SDPA is blocked), and grad_out."""
    q, k, v = _qkv(seed, **sizes)
    scores = scaled_scores(q, k, causal)
    out, lse = torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)
    g = heads_layout(q.shape[0], q.shape[1], q.shape[2], v.shape[-1], seed + 3).to(q.dtype)
    return (q, k, v, out, lse, g), dict(causal=causal, **({} if blocks is None else dict(block_q=blocks[0], block_k=blocks[1])))


def _apply_args(seed, causal, **sizes):
    return _qkv(seed, **sizes) + (causal,), {}


# The members the three attention exercises share, as data: (axis, label, zh, causal, sizes).
_BATCH = ("batch", "batch items and heads that differ", "各不相同的批次项与注意力头", False, {})
_CAUSAL = ("arguments", "causal=True with T_q < T_k", "causal=True 且 T_q < T_k", True, {})
_HUNDREDS = ("extreme", "scores in the hundreds", "数百量级的分数", True, {"scale": 100.0})
# scores near 100: larger ones make the gradients so large that float32's rounding exceeds its tolerance
_NEAR_100 = ("extreme", "scores near 100", "接近 100 的分数", True, {"scale": 40.0})
_ONE_QUERY = ("edges", "one query, the default blocks", "一个查询，默认分块大小", True, {"blocks": None, "T_q": 1})
_FLOAT64 = ("dtype", "float64", "float64", True, {"dtype": torch.float64})


def _attention_family(build, seed, members, compares):
    """One probe per member, the n-th built by build(seed + n, causal, **sizes)."""
    return Family([Probe(axis, label, lambda n=n, causal=causal, sizes=sizes: build(seed + n, causal, **sizes), zh)
                   for n, (axis, label, zh, causal, sizes) in enumerate(members)], compares=compares)


FAMILIES = {
    "online_softmax": Family([
        Probe("batch", "rows that differ, blocks of 4", lambda: _rows(300), "各不相同的行，块大小 4"),
        Probe("extreme", "rows shifted by ±1000 and scaled by 300", lambda: _rows(301, (3, 9), scale=300.0, shift=[1000.0, -1000.0, 0.0]),
              "平移 ±1000、放大 300 倍的行"),
        Probe("edges", "a block longer than the row", lambda: _rows(302, (2, 5), block=64), "比行更长的块"),
        Probe("edges", "rows of length 1", lambda: _rows(303, (3, 1), block=2), "长度为 1 的行"),
        Probe("dtype", "float64", lambda: _rows(304, dtype=torch.float64, scale=4.0), "float64"),
        Probe("dtype", "bfloat16", lambda: _rows(305, dtype=torch.bfloat16, scale=4.0), "bfloat16"),
    ], compares=_ROWS),
    "flash_attention_forward": _attention_family(_forward_args, 310, (_BATCH, _CAUSAL, _HUNDREDS, _ONE_QUERY, _FLOAT64), _ROWS),
    "flash_attention_backward": _attention_family(_backward_args, 320, (_BATCH, _CAUSAL, _NEAR_100, _ONE_QUERY, _FLOAT64), _ROWS),
    "FlashAttention": _attention_family(_apply_args, 330, (_BATCH, _CAUSAL, _HUNDREDS, _FLOAT64), _ROWS + ("grads",)),
}
