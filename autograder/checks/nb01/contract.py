"""Notebook 01's contracts and input families: vectors and sequences that differ, far apart, in
float64 and bfloat16, laid out in memory every way."""
import torch

from autograder.checks import randn
from autograder.checks.core import rules
from autograder.checks.core.harness import Family, Probe
from autograder.checks.core.rules import Contract, Forbid
from autograder.checks.core.space import Space

_ALL = ("float32", "float64", "bfloat16")
_WRITES = ("this exercise writes it", "本练习要写的正是它")
_LOG = ("its exp is the softmax", "它的 exp 就是 softmax")
SOFTMAX_FORBIDS = (Forbid("torch.softmax", *_WRITES), Forbid("torch.nn.functional.softmax", *_WRITES),
                   Forbid("torch.Tensor.softmax", *_WRITES), Forbid("torch.special.softmax", *_WRITES),
                   Forbid("torch.log_softmax", *_LOG), Forbid("torch.nn.functional.log_softmax", *_LOG),
                   Forbid("torch.Tensor.log_softmax", *_LOG))


def _sdpa(en, zh):
    return Forbid("torch.nn.functional.scaled_dot_product_attention", en, zh)


CONTRACTS = rules.register("01", [
    Contract("attention_scores", dtypes=_ALL),
    Contract("softmax", forbids=SOFTMAX_FORBIDS, dtypes=_ALL,
             preconditions=(("every slice along `dim` holds a finite entry, and none is `+inf` or NaN",
                             "沿 `dim` 的每个切片都至少有一个有限值，且没有 `+inf` 或 NaN"),)),
    Contract("context_vector", dtypes=_ALL,
             forbids=(_sdpa("with `scale=1.0` it computes this context vector", "用 `scale=1.0` 调用它就会算出这个上下文向量"),)),
    Contract("self_attention_weights", dtypes=_ALL,
             forbids=(_sdpa("with the identity as values it returns these weights", "以单位矩阵作为值调用它就会返回这些权重"),)),
    Contract("self_attention", dtypes=_ALL,
             forbids=(_sdpa("with `scale=1.0` it computes this whole exercise", "用 `scale=1.0` 调用它就会完成整个练习"),)),
])


# The input spaces --------------------------------------------------------------------------
def _far(*shape, seed, sign=1.0):
    """Token vectors with a shared coordinate of 20 (times sign): every dot product is ±400 + O(1)."""
    x = randn(*shape, seed=seed)
    x[..., 0] = 20.0 * sign
    return x


_VECTOR_SHAPES = {"T=1, d=4": (1, 4), "T=5, d=7": (5, 7), "T=6, d=3": (6, 3), "T=40, d=64": (40, 64)}
_EXTREME = ("scores of about 400", "scores of about -400")


def _vectors(point, seed):
    """(query (d,), inputs (T, d)) of a point: scores of order 1, about +400 or -400 (one-signed), or all equal."""
    t, d = _VECTOR_SHAPES[point["shape"]]
    values = point["values"]
    if values == "scores of about 400":
        return (_far(d, seed=seed), _far(t, d, seed=seed + 1)), {}
    if values == "scores of about -400":
        return (_far(d, seed=seed, sign=-1.0), _far(t, d, seed=seed + 1)), {}
    inputs = randn(t, d, seed=seed + 1)
    if values == "ties":
        inputs = inputs[:1].expand(t, d).clone()  # every token the same: equal scores
    return (randn(d, seed=seed), inputs), {}


_SOFTMAX_SHAPES = {"(5,)": (5,), "(3, 1)": (3, 1), "(3, 5)": (3, 5), "(2, 3, 5)": (2, 3, 5), "(2, 3, 4, 6)": (2, 3, 4, 6)}
_SATURATED = ("±400 by slice", "about -1000")  # logits of order 300: a pinned probe


def _logits(point, seed):
    shape, dim = _SOFTMAX_SHAPES[point["shape"]], point["arguments:dim"]
    x, values = randn(*shape, seed=seed), point["values"]
    along = [1] * len(shape)
    along[dim] = shape[dim]
    across = list(shape)
    across[dim] = 1  # one number per slice
    if values == "±400 by slice":
        x = x * 3 + 400.0 * torch.sign(randn(*across, seed=seed + 1))
    elif values == "about -1000":  # every entry large and negative: exp without the shift underflows to 0 / 0
        x = x * 3 - 1000.0
    elif values == "-inf entries":  # never the first of a slice, so every slice keeps a finite entry
        odd = (torch.arange(shape[dim]) % 2 == 1).view(along)
        x = x.masked_fill(odd & (randn(*shape, seed=seed + 2) > -0.5), float("-inf"))
    elif values == "ties":
        x = torch.full(shape, 0.7)
    else:
        x = x * 2
    return (x,), ({} if dim == -1 else {"dim": dim})


_SEQUENCE_SHAPES = {"T=6, d=3": (6, 3), "B2, T=5, d=4": (2, 5, 4), "B2,H3, T=4, d=5": (2, 3, 4, 5), "B2, T=1, d=3": (2, 1, 3),
                    "T=33, d=64": (33, 64)}
_SEQUENCE_EXTREME = ("scores of about 400", "items of very different scales")


def _sequence(point, seed):
    shape, values = _SEQUENCE_SHAPES[point["shape"]], point["values"]
    if values == "scores of about 400":
        return (_far(*shape, seed=seed),), {}
    x = randn(*shape, seed=seed)
    if values == "items of very different scales":  # one shift for the whole batch underflows the small item
        scales = torch.tensor([0.5, 12.0]).repeat(shape[0])[:shape[0]] if len(shape) > 2 else torch.tensor([12.0])
        x = x * scales.view(-1, *[1] * (len(shape) - 1))
    elif values == "ties":
        x = x[..., :1, :].expand(shape).clone()  # every token of an item the same
    return (x,), {}


# One input of two or more dimensions: "mixed" (the first column-major, the others strided) is "column-major" here.
LAYOUTS = ("contiguous", "column-major", "strided")


def _no_bfloat16_extremes(extremes):
    """Scores in the hundreds round to a multiple of 2 in bfloat16: two right orders of computing them
    (a float32 route cast back; x - logsumexp(x)) give different weights. Not graded there."""
    return lambda p: not (p["dtype"] == "bfloat16" and p["values"] in extremes)


SPACES = {
    "attention_scores": Space({"shape": tuple(_VECTOR_SHAPES), "values": ("normal", *_EXTREME, "ties"), "dtype": _ALL,
                               "layout": LAYOUTS}, _vectors),
    "softmax": Space({"shape": tuple(_SOFTMAX_SHAPES), "arguments:dim": (-1, 0, 1, -2),
                      "values": ("normal", *_SATURATED, "-inf entries", "ties"), "dtype": _ALL, "layout": LAYOUTS}, _logits,
                     valid=lambda p: (-len(_SOFTMAX_SHAPES[p["shape"]]) <= p["arguments:dim"] < len(_SOFTMAX_SHAPES[p["shape"]])
                                      and _no_bfloat16_extremes(_SATURATED)(p)),
                     no_grads=lambda p: p["values"] in _SATURATED),
    "context_vector": Space({"shape": tuple(_VECTOR_SHAPES), "values": ("normal", *_EXTREME, "ties"), "dtype": _ALL,
                             "layout": LAYOUTS}, _vectors, valid=_no_bfloat16_extremes(_EXTREME),
                            no_grads=lambda p: p["values"] in _EXTREME),
    "self_attention_weights": Space({"shape": tuple(_SEQUENCE_SHAPES), "values": ("normal", *_SEQUENCE_EXTREME, "ties"),
                                     "dtype": _ALL, "layout": LAYOUTS}, _sequence, valid=_no_bfloat16_extremes(_SEQUENCE_EXTREME),
                                    no_grads=lambda p: p["values"] in _SEQUENCE_EXTREME),
}
SPACES["self_attention"] = SPACES["self_attention_weights"]


# The pinned probes: each names a mistake --------------------------------------------------
def _big(seed):
    """Logits of +400 and -400 in alternate rows, spread of order 1..10 within a row (overflow
    shows; no row saturates, so every gradient is more than rounding)."""
    return randn(4, 5, seed=seed) * 3 + torch.tensor([400.0, -400.0, 400.0, -400.0])[:, None]


_DTYPES = [(torch.float64, "float64", "float64"), (torch.bfloat16, "bfloat16", "bfloat16")]
_GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")


def _typed(axis_builds):
    return [Probe("dtype", f"{name} inputs", lambda dt=dt: axis_builds(dt), f"{zh} 输入") for dt, name, zh in _DTYPES]


def _vector_probes():
    return [
        Probe("edges", "one token (T = 1)", lambda: ((randn(4, seed=101), randn(1, 4, seed=102)), {}), "只有一个词元（T = 1）"),
        Probe("extreme", "scores in the hundreds", lambda: ((_far(4, seed=103), _far(5, 4, seed=104)), {}), "数百量级的分数"),
        *_typed(lambda dt: ((randn(4, seed=105).to(dt), randn(5, 4, seed=106).to(dt)), {})),
    ]


def _sequence_probes():
    return [
        Probe("batch", "(B, H, T, d) inputs whose batch items and heads differ", lambda: ((randn(2, 3, 4, 5, seed=111),), {}),
              "批次项与注意力头各不相同的 (B, H, T, d) 输入"),
        Probe("edges", "one token (T = 1)", lambda: ((randn(2, 1, 3, seed=112),), {}), "只有一个词元（T = 1）"),
        Probe("extreme", "scores in the hundreds", lambda: ((_far(2, 4, 3, seed=113),), {}), "数百量级的分数"),
        Probe("extreme", "batch items of very different scales (scores near 1 and in the hundreds)",
              lambda: ((randn(2, 4, 3, seed=115) * torch.tensor([0.5, 12.0])[:, None, None],), {}), "尺度差别很大的批次项（分数接近 1 与数百量级）"),
        *_typed(lambda dt: ((randn(2, 4, 3, seed=114).to(dt),), {})),
    ]


FAMILIES = {
    "attention_scores": Family(_vector_probes(), compares=_GRADED, space=SPACES["attention_scores"]),
    "softmax": Family([
        Probe("batch", "a (2, 3, 5) tensor with dim=1, slices that differ", lambda: ((randn(2, 3, 5, seed=121),), {"dim": 1}),
              "dim=1 的 (2, 3, 5) 张量，各切片不同"),
        Probe("arguments", "dim=0", lambda: ((randn(3, 4, seed=122),), {"dim": 0}), "dim=0"),
        Probe("extreme", "logits of ±400 in different rows", lambda: ((_big(123),), {}), "不同行分别为 ±400 的 logits"),
        Probe("extreme", "logits of order 300", lambda: ((randn(3, 5, seed=127) * 300,), {}), "数量级为 300 的 logits"),
        Probe("edges", "a slice of length 1", lambda: ((randn(3, 1, seed=124),), {}), "长度为 1 的切片"),
        Probe("edges", "-inf entries", lambda: ((randn(3, 4, seed=125).masked_fill(torch.eye(3, 4, dtype=torch.bool), float("-inf")),), {}),
              "含 -inf 的元素"),
        Probe("ties", "equal logits", lambda: ((torch.full((2, 4), 0.7),), {}), "相等的 logits"),
        *_typed(lambda dt: (((randn(3, 5, seed=126) * 3).to(dt),), {})),
    ], compares=_GRADED, space=SPACES["softmax"]),
    "context_vector": Family(_vector_probes(), compares=_GRADED, space=SPACES["context_vector"]),
    "self_attention_weights": Family(_sequence_probes(), compares=_GRADED, space=SPACES["self_attention_weights"]),
    "self_attention": Family(_sequence_probes(), compares=_GRADED, space=SPACES["self_attention"]),
}

# Mutants of the model answers that no input can tell apart (python -m autograder mutants 01)
EQUIVALENT = {
    "context_vector": {
        "line 4: keyword dim= dropped": "softmax's default dim is -1, the one the answer passes",
        "line 4: constant 1 -> 0": "the scores are 1-d: dim=-0 (= 0) is dim=-1",
    },
    "self_attention_weights": {"line 5: keyword dim= dropped": "softmax's default dim is -1, the one the answer passes"},
}
