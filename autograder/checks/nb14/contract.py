"""Notebook 14's input families (FlashAttention): what the harness runs each exercise and the
course's utils.flash_attention on, as data (autograder/checks/core/harness.py)."""
import torch

from autograder.checks import randn
from autograder.checks.core import rules
from autograder.checks.nb14.flash_variants import heads_layout, scaled_scores
from autograder.checks.core.harness import Family, Probe
from autograder.checks.core.rules import Contract, Forbid
from autograder.checks.core.space import Space

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


# Contracts and input spaces ---------------------------------------------------------------------
_SDPA = Forbid("torch.nn.functional.scaled_dot_product_attention", "it computes the attention this exercise builds tile by tile",
               "它会直接完成本练习要逐块构造的注意力")
_AUTOGRAD = tuple(Forbid(t, "the gradients are this exercise's to compute from lse", "梯度要由本练习根据 lse 计算")
                  for t in ("torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward"))
_COURSE = tuple(Forbid(f"utils.flash_attention.{n}", "the course's version: call your own, from exercises 2 and 3",
                       "这是课程的版本：请调用你自己在练习 2 和 3 中写的") for n in ("flash_attention_forward", "flash_attention_backward"))
_CAUSAL = ("with causal=True, T_q <= T_k (the queries are the last positions)", "causal=True 时 T_q <= T_k（查询是最后几个位置）")
_TILES = (("No score or probability intermediate larger than one (block_q, block_k) tile, nothing larger than an input or output; "
           "with causal=True the tiles entirely above the diagonal are skipped.",
           "不构造大于一个 (block_q, block_k) 分块的分数或概率中间张量，也不构造大于任何输入或输出的张量；causal=True 时跳过完全位于对角线之上的分块。"),)
_BOTH = ("float32", "float64")
CONTRACTS = rules.register("14", [
    Contract("online_softmax", dtypes=("float32", "float64", "bfloat16"),
             preconditions=(("block_size >= 1", "block_size >= 1"),),
             notes=(("No reduction over more than `block_size` entries of a row at once (no full-row maximum or sum, also not "
                     "through a matrix product); one elementwise pass at the end.",
                     "一次归约不超过一行中的 `block_size` 个元素（不求整行的最大值或和，也不通过矩阵乘法）；最后做一次逐元素的计算。"),)),
    Contract("flash_attention_forward", forbids=(_SDPA,), dtypes=_BOTH, preconditions=(_CAUSAL,), notes=_TILES),
    Contract("flash_attention_backward", forbids=(_SDPA, *_AUTOGRAD), dtypes=_BOTH, preconditions=(_CAUSAL,), notes=_TILES),
    Contract("FlashAttention", forbids=(_SDPA, *_COURSE), dtypes=_BOTH, earlier="own", preconditions=(_CAUSAL,),
             notes=(("forward saves q, k, v, out and lse (not the probabilities); backward calls your `flash_attention_backward`.",
                     "forward 保存 q、k、v、out 和 lse（不保存概率）；backward 调用你自己的 `flash_attention_backward`。"),)),
])

_LAYOUTS = ("contiguous", "column-major", "strided", "mixed")
_SIZES = ((2, 2, 5, 7, 4, 3), (1, 3, 13, 29, 8, 5), (2, 1, 1, 6, 4, 4), (1, 1, 9, 9, 2, 3))  # (B, H, T_q, T_k, d, d_v)
_BLOCKS = ((2, 3), (3, 2), (4, 4), (64, 64), (1, 5))


def _point_qkv(p, seed):
    B, H, T_q, T_k, d, d_v = p["shape"]
    q, k, v = randn(B, H, T_q, d, seed=seed), randn(B, H, T_k, d, seed=seed + 1), randn(B, H, T_k, d_v, seed=seed + 2)
    if p["values"] == "large":
        q = q * 40.0
    elif p["values"] == "near 100":  # the backward's gradients grow with the scores: past ~100 float32's rounding exceeds its tolerance
        q = q * 20.0
    elif p["values"] == "all far below 0":  # every score about -400: a running maximum started at 0 underflows to 0 / 0
        q, k = q.abs() * 20.0 + 1.0, -(k.abs() * 20.0 + 1.0)
    return q, k, v


def _point_rows(p, seed):
    x = randn(*p["shape"], seed=seed)
    if p["values"] == "shifted by ±1000":
        x = x * 300.0 + torch.linspace(-1000.0, 1000.0, x.shape[0]).view(-1, *[1] * (x.dim() - 1))
    elif p["values"] == "-inf entries":
        x = x.masked_fill(torch.arange(x.shape[-1]) % 3 == 1, float("-inf"))
    elif p["values"] == "first blocks -inf":
        x = x.masked_fill(torch.arange(x.shape[-1]) < x.shape[-1] - 1, float("-inf"))
    return (x, p["blocks"]), {}


def _point_forward(p, seed):
    bq, bk = p["blocks"]
    return _point_qkv(p, seed), dict(causal=p["flag:causal"], block_q=bq, block_k=bk)


def _point_backward(p, seed):
    q, k, v = _point_qkv(p, seed)
    scores = scaled_scores(q, k, p["flag:causal"])
    out, lse = torch.softmax(scores, -1) @ v, torch.logsumexp(scores, -1)
    g = randn(*out.shape, seed=seed + 3)
    bq, bk = p["blocks"]
    return (q, k, v, out, lse, g), dict(causal=p["flag:causal"], block_q=bq, block_k=bk)


def _point_apply(p, seed):
    return (*_point_qkv(p, seed), p["flag:causal"]), {}


SPACES = {
    "online_softmax": Space({"shape": ((2, 3, 11), (3, 37), (1, 100), (4, 1)), "blocks": (1, 3, 8, 64),
                             "values": ("normal", "shifted by ±1000", "-inf entries", "first blocks -inf"),
                             "dtype": CONTRACTS["online_softmax"].dtypes, "layout": _LAYOUTS}, _point_rows),
    "flash_attention_forward": Space({"shape": _SIZES, "blocks": _BLOCKS, "flag:causal": (False, True),
                                      "values": ("normal", "large", "all far below 0"), "dtype": _BOTH, "layout": _LAYOUTS}, _point_forward),
    "flash_attention_backward": Space({"shape": _SIZES, "blocks": _BLOCKS, "flag:causal": (False, True),
                                       "values": ("normal", "near 100"), "dtype": _BOTH, "layout": _LAYOUTS}, _point_backward),
    "FlashAttention": Space({"shape": _SIZES, "flag:causal": (False, True), "values": ("normal", "large", "all far below 0"),
                             "dtype": _BOTH, "layout": _LAYOUTS}, _point_apply, no_grads=lambda p: p["values"] != "normal"),
}
for _name, _space in SPACES.items():  # each family's covering array joins its pinned probes
    FAMILIES[_name] = Family(FAMILIES[_name].pinned, FAMILIES[_name].compares, FAMILIES[_name].tolerance,
                             FAMILIES[_name].grad_tolerance, space=_space)
