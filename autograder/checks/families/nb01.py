"""Notebook 01's input families: vectors and sequences that differ, far apart, in float64 and bfloat16."""
import torch

from autograder.checks import randn
from autograder.checks.harness import Family, Probe


# Each family: the learner's function against utils.attention on every member (checks/harness.py).
def _big(seed):
    """Logits of +400 and -400 in alternate rows, spread of order 1..10 within a row (overflow
    shows; no row saturates, so every gradient is more than rounding)."""
    return randn(4, 5, seed=seed) * 3 + torch.tensor([400.0, -400.0, 400.0, -400.0])[:, None]


def _far(*shape, seed):
    """Token vectors with a shared coordinate of 20: every dot product is 400 + O(1)."""
    x = randn(*shape, seed=seed)
    x[..., 0] = 20.0
    return x


_DTYPES = [(torch.float64, "float64", "float64"), (torch.bfloat16, "bfloat16", "bfloat16")]


def _typed(axis_builds):
    return [Probe("dtype", f"{name} inputs", lambda dt=dt: axis_builds(dt), f"{zh} 输入") for dt, name, zh in _DTYPES]


_VECTORS = Family([
    Probe("edges", "one token (T = 1)", lambda: ((randn(4, seed=101), randn(1, 4, seed=102)), {}), "只有一个词元（T = 1）"),
    Probe("extreme", "scores in the hundreds", lambda: ((_far(4, seed=103), _far(5, 4, seed=104)), {}), "数百量级的分数"),
    *_typed(lambda dt: ((randn(4, seed=105).to(dt), randn(5, 4, seed=106).to(dt)), {})),
], compares=("values", "shape", "dtype", "device", "inputs", "grads"))
_SEQUENCES = Family([
    Probe("batch", "(B, H, T, d) inputs whose batch items and heads differ", lambda: ((randn(2, 3, 4, 5, seed=111),), {}),
          "批次项与注意力头各不相同的 (B, H, T, d) 输入"),
    Probe("edges", "one token (T = 1)", lambda: ((randn(2, 1, 3, seed=112),), {}), "只有一个词元（T = 1）"),
    Probe("extreme", "scores in the hundreds", lambda: ((_far(2, 4, 3, seed=113),), {}), "数百量级的分数"),
    Probe("extreme", "batch items of very different scales (scores near 1 and in the hundreds)",
          lambda: ((randn(2, 4, 3, seed=115) * torch.tensor([0.5, 12.0])[:, None, None],), {}), "尺度差别很大的批次项（分数接近 1 与数百量级）"),
    *_typed(lambda dt: ((randn(2, 4, 3, seed=114).to(dt),), {})),
], compares=("values", "shape", "dtype", "device", "inputs", "grads"))
FAMILIES = {
    "attention_scores": _VECTORS,
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
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads")),
    "context_vector": _VECTORS,
    "self_attention_weights": _SEQUENCES,
    "self_attention": _SEQUENCES,
}
