"""The input families of notebook 03's exercises (checks/harness.py), as data, and the view that
reduces dot_product_variance's random estimate to what its contract fixes."""
import inspect
import math

import torch

from autograder.checks import generator, randn
from autograder.checks.core import rules
from autograder.checks.core.harness import Family, Probe, _where
from autograder.checks.core.rules import Contract, Forbid
from autograder.checks.core.space import LAYOUTS, Space

_JACOBIAN = ("autograd computes the Jacobian this exercise writes", "autograd 会算出本练习要写的雅可比矩阵")
CONTRACTS = rules.register("03", [
    Contract("dot_product_variance", dtypes=(), dtype=("one number, a Python float (`.item()`); a 0-d tensor is accepted too", "一个数，即 Python 浮点数（`.item()`）；0 维张量也可以"), device="none",
             notes=(("A statistic: graded within six standard deviations of d (1 when `scaled`), from exactly `n_trials` pairs.",
                     "这是一个统计量：按与 d（`scaled` 时为 1）相差不超过六个标准差评分，且恰好来自 `n_trials` 对向量。"),
                    ("q and k are drawn from `generator` when one is given; PyTorch's global generator is left as it was.",
                     "给定 `generator` 时 q 和 k 从它采样；PyTorch 的全局生成器保持原样。"))),
    Contract("softmax_jacobian", dtypes=("float32", "float64"),
             forbids=(Forbid("torch.autograd.functional.jacobian", *_JACOBIAN), Forbid("torch.func.jacrev", *_JACOBIAN),
                      Forbid("torch.func.jacfwd", *_JACOBIAN)),
             preconditions=(("p is a probability vector (entries of at least 0 that sum to 1)", "p 是概率向量（元素不小于 0，且和为 1）"),)),
    Contract("scaled_dot_product_attention", dtypes=("float32", "float64", "bfloat16"),
             forbids=(Forbid("torch.nn.functional.scaled_dot_product_attention", "it is the function this exercise writes",
                             "它正是本练习要写的函数"),),
             preconditions=(("every query keeps at least one key (a row whose keys are all blocked gives NaN)",
                             "每个查询至少保留一个键（所有键都被屏蔽的行会得到 NaN）"),)),
])


def _far(*shape, seed):
    """Vectors with a shared coordinate of 20: every q·k / sqrt(8) is about 140 + O(1)."""
    x = randn(*shape, seed=seed)
    x[..., 0] = 20.0
    return x


def _below(*shape, seed, sign):
    """Whole-number vectors with a shared coordinate of ±150: every q·k is about -22,500, exact in float32."""
    x = (randn(*shape, seed=seed) * 2).round()
    x[..., 0] = 150.0 * sign
    return x


def _qkv(seed, t_q=4, t_k=6, lead=(2, 3), d_k=8, d_v=5):
    return randn(*lead, t_q, d_k, seed=seed), randn(*lead, t_k, d_k, seed=seed + 1), randn(*lead, t_k, d_v, seed=seed + 2)


_MASK = torch.tensor([[False, True, False, True, True, False], [False] * 6,
                      [True, True, True, False, False, True], [False, True, True, True, True, True]])  # (T_q, T_k)
_OTHER_MASK = torch.tensor([[False, False, True, True, True, True], [True, False, False, False, True, True],
                            [False, False, False, False, False, True], [True, True, True, True, True, False]])  # _MASK's shape, other keys
_PADDING = torch.tensor([[False] * 6, [False, False, False, True, True, True]])[:, None, None, :]  # (B, 1, 1, T_k)
_GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")


def _drawn(d, n_trials, scaled=False, by_position=False, seed=None):
    """dot_product_variance's arguments, with a fresh generator of `seed` (none: the global one)."""
    gen = None if seed is None else generator(seed)
    if by_position:
        return (d, n_trials, scaled, gen), {}
    return (d,), {"n_trials": n_trials, "scaled": scaled, **({} if gen is None else {"generator": gen})}


def _contract(d, n_trials=10_000, scaled=False, generator=None):
    """dot_product_variance's signature (../shared/curriculum.md): its arguments are bound to it."""


def estimate_summary(fn):
    """fn (dot_product_variance) with its result reduced to what the contract fixes: that it is one
    number; whether it lies within six standard deviations of the theory (d, or 1 when scaled; the
    sample variance of n trials has a relative standard deviation of sqrt((2 + 6/d) / n), q·k
    having kurtosis 3 + 6/d); and, when a generator is given, that the draws came from it (it
    advanced) and not from PyTorch's global one (left as it was)."""
    def dot_product_variance(*args, **kwargs):
        bound = inspect.signature(_contract).bind(*args, **kwargs)
        bound.apply_defaults()
        d, n_trials, scaled, gen = bound.arguments.values()
        global_before, before = torch.random.get_rng_state(), None if gen is None else gen.get_state()
        result = fn(*args, **kwargs)
        if isinstance(result, torch.Tensor) and result.numel() == 1 or isinstance(result, (int, float)) and not isinstance(result, bool):
            value, kind = float(result), "one number"
        else:
            value, kind = math.nan, type(result).__name__ + (f" of shape {tuple(result.shape)}" if isinstance(result, torch.Tensor) else "")
        theory = 1.0 if scaled else float(d)
        spread = 6 * theory * math.sqrt((2 + 6 / d) / n_trials)
        verdict = "within the bound" if abs(value - theory) <= spread else f"{value:.4g}, outside {theory:g} ± {spread:.3g}"
        source = "no generator given"
        if gen is not None:
            advanced, left = not torch.equal(before, gen.get_state()), torch.equal(global_before, torch.random.get_rng_state())
            source = ("drawn from the generator given" if advanced and left else
                      f"the generator given {'advanced' if advanced else 'left as it was'}, the global one {'left as it was' if left else 'changed'}")
        return kind, verdict, source
    return dot_product_variance


def explain_estimate(probe, out, expected):
    """The sentence for the part of `estimate_summary` that differs."""
    on, zh_on = _where(probe)
    if expected == "one number":
        return (f"dot_product_variance must return one number, a Python float{on} (use .item() on a 0-d tensor).",
                f"dot_product_variance 必须返回一个数，即 Python 浮点数{zh_on}（对 0 维张量使用 .item()）。")
    if expected == "within the bound":
        return (f"dot_product_variance's estimate lies more than six standard deviations from the theory{on}: about d unscaled "
                "and 1 scaled, from exactly n_trials pairs (q, k) of standard normal entries.",
                f"dot_product_variance 的估计与理论值相差超过六个标准差{zh_on}：不缩放约为 d，缩放后约为 1，"
                "且恰好来自 n_trials 对分量服从标准正态分布的 (q, k)。")
    return (f"Draw q and k with torch.randn(..., generator=generator){on}: the generator given must advance, and PyTorch's "
            "global generator must be left as it was (no torch.manual_seed).",
            f"请用 torch.randn(..., generator=generator) 采样 q 和 k{zh_on}：传入的生成器必须前进，PyTorch 的全局生成器"
            "必须保持原样（不要用 torch.manual_seed）。")


# The input spaces --------------------------------------------------------------------------
def _variance_point(point, seed):
    d, n, scaled, how = point["shape"], point["arguments:n_trials"], point["flag:scaled"], point["arguments:generator"]
    if how == "none (the global one)":
        return (d,), {"n_trials": n, "scaled": scaled}
    return _drawn(d, n, scaled, by_position=how == "by position", seed=seed)


def _jacobian_point(point, seed):
    n, values = point["shape"], point["values"]
    logits = {"softmax of order-1 logits": 1.0, "almost one-hot": 30.0, "uniform": 0.0}.get(values)
    if values == "one-hot":
        p = torch.zeros(n)
        p[seed % n] = 1.0
    elif values == "tiny entries":  # one entry near 1, the others about 1e-30: J's entries as small, relative tolerance decides
        p = torch.softmax(randn(n, seed=seed) + torch.where(torch.arange(n) == 0, 0.0, -69.0), dim=-1)
    else:
        p = torch.softmax(randn(n, seed=seed) * logits, dim=-1)
    return (p,), {}


_SDPA_SHAPES = {"B2,H3, T_q=4, T_k=6, d_k=8, d_v=5": ((2, 3), 4, 6, 8, 5), "2-d, T_q=3, T_k=7, d_k=4, d_v=2": ((), 3, 7, 4, 2),
                "B2, T_q=3, T_k=1 (one key)": ((2,), 3, 1, 4, 3), "B2, T_q=1 (one query), T_k=5": ((2,), 1, 5, 6, 7),
                "B1,H2, T_q=T_k=9, d_k=d_v=64": ((1, 2), 9, 9, 64, 64)}


def _sdpa_mask(kind, lead, t_q, t_k, seed):
    """A boolean mask, True = blocked, that leaves key 0 to every query (the precondition)."""
    i, j = torch.arange(t_q)[:, None], torch.arange(t_k)[None, :]
    if kind == "causal (T_q, T_k)":
        return j > i + max(t_k - t_q, 0)
    if kind == "random (T_q, T_k)":
        return (torch.rand(t_q, t_k, generator=generator(seed)) < 0.4) & (j > 0)
    items = lead[0] if lead else 1  # padding: item b blocks its last b keys, (B, 1, ..., 1, T_k)
    per_item = torch.stack([(torch.arange(t_k) >= t_k - b) & (torch.arange(t_k) > 0) for b in range(items)])
    return per_item.view(items, *[1] * (len(lead) - 1), 1, t_k) if lead else per_item.view(1, t_k)


def _sdpa_point(point, seed):
    lead, t_q, t_k, d_k, d_v = _SDPA_SHAPES[point["shape"]]
    q, k = randn(*lead, t_q, d_k, seed=seed), randn(*lead, t_k, d_k, seed=seed + 1)
    if point["values"] == "scores of about 140":  # a shared coordinate c with c² · scale = 140, whatever the scale: float32
        scale = point["arguments:scale"] or d_k ** -0.5  # rounds such scores to about 1e-5, within the tolerance
        q[..., 0] = k[..., 0] = math.sqrt(140.0 / scale)
    if point["values"] == "ties":
        k = k[..., :1, :].expand(k.shape).clone()  # every key the same: equal scores in a row
    kwargs = {}
    if point["arguments:mask"] != "none":
        kwargs["mask"] = _sdpa_mask(point["arguments:mask"], lead, t_q, t_k, seed + 3)
    if point["arguments:scale"] is not None:
        kwargs["scale"] = point["arguments:scale"]
    v = randn(*lead, t_k, d_v, seed=seed + 2)
    if point["values"] == "scores of about 140":  # positive values: the context, a mean of them, has no cancellation, so the
        v = v.abs() + 0.5  # float32 rounding of the scores (about 1e-5 of their size) stays within the relative tolerance
    return (q, k, v), kwargs


SPACES = {
    "dot_product_variance": Space({"shape": (1, 7, 64, 1024), "arguments:n_trials": (500, 2_000, 5_000), "flag:scaled": (False, True),
                                   "arguments:generator": ("keyword", "by position", "none (the global one)")}, _variance_point,
                                  valid=lambda p: p["shape"] * p["arguments:n_trials"] <= 3_100_000),
    "softmax_jacobian": Space({"shape": (1, 2, 5, 40), "values": ("softmax of order-1 logits", "uniform", "almost one-hot", "one-hot",
                                                                   "tiny entries"),
                               "dtype": ("float32", "float64")}, _jacobian_point, valid=lambda p: p["shape"] > 1 or p["values"] == "uniform"),
    # bfloat16 rounds scores of 140 to a multiple of 1: two right orders of computing them differ there, not graded
    "scaled_dot_product_attention": Space({"shape": tuple(_SDPA_SHAPES), "arguments:mask": ("none", "causal (T_q, T_k)", "padding (B, ..., 1, T_k)",
                                                                                            "random (T_q, T_k)"),
                                           "arguments:scale": (None, 0.3, 1.0, 0.0), "values": ("normal", "scores of about 140", "ties"),
                                           "dtype": ("float32", "float64", "bfloat16"), "layout": LAYOUTS}, _sdpa_point,
                                          valid=lambda p: not (p["dtype"] == "bfloat16" and p["values"] == "scores of about 140"),
                                          no_grads=lambda p: p["values"] == "scores of about 140"),
}

FAMILIES = {
    # A random estimate: `estimate_summary` reduces each result to what the contract fixes (one
    # number, within six standard deviations of d or 1, drawn from the generator given), since the
    # values depend on the order the numbers are drawn in, which the contract leaves free.
    "dot_product_variance": Family([
        Probe("edges", "d = 1, unscaled, 20,000 trials", lambda: _drawn(1, 20_000, seed=331), "d = 1，不缩放，20,000 次试验"),
        Probe("edges", "d = 1, scaled, 20,000 trials", lambda: _drawn(1, 20_000, True, seed=332), "d = 1，缩放，20,000 次试验"),
        Probe("extreme", "d = 1024, unscaled, 2,000 trials", lambda: _drawn(1024, 2_000, seed=333), "d = 1024，不缩放，2,000 次试验"),
        Probe("extreme", "d = 1024, scaled, 2,000 trials", lambda: _drawn(1024, 2_000, True, seed=334), "d = 1024，缩放，2,000 次试验"),
        Probe("arguments", "few trials (500), d = 16", lambda: _drawn(16, 500, seed=335), "很少的试验（500 次），d = 16"),
        Probe("arguments", "arguments by position: d = 16, 3,000 trials, scaled, a generator",
              lambda: _drawn(16, 3_000, True, by_position=True, seed=336), "按位置传参：d = 16，3,000 次试验，缩放，一个生成器"),
        Probe("arguments", "only d = 8 (10,000 trials, the global generator)", lambda: ((8,), {}), "只传 d = 8（10,000 次试验，全局生成器）"),
    ], compares=("values",), space=SPACES["dot_product_variance"]),
    # float64 only: p (I - pᵀ) with torch.eye (float32) is right and keeps float64, not bfloat16.
    "softmax_jacobian": Family([
        Probe("edges", "n = 1", lambda: ((torch.ones(1),), {}), "n = 1"),
        Probe("ties", "a uniform p", lambda: ((torch.full((5,), 0.2),), {}), "均匀的 p"),
        Probe("extreme", "an almost one-hot p", lambda: ((torch.softmax(randn(6, seed=301) * 30, dim=-1),), {}), "几乎 one-hot 的 p"),
        Probe("dtype", "a float64 p", lambda: ((torch.softmax(randn(4, seed=302), dim=-1).double(),), {}), "float64 的 p"),
    ], compares=_GRADED, space=SPACES["softmax_jacobian"]),
    "scaled_dot_product_attention": Family([
        Probe("batch", "(B, H, T, d) inputs whose batch items and heads differ, with a (T_q, T_k) mask",
              lambda: (_qkv(311), {"mask": _MASK}), "批次项与注意力头各不相同的 (B, H, T, d) 输入，带 (T_q, T_k) 掩码"),
        Probe("arguments", "scale=0.3 and a padding mask (B, 1, 1, T_k)", lambda: (_qkv(314), {"mask": _PADDING, "scale": 0.3}),
              "scale=0.3 与填充掩码 (B, 1, 1, T_k)"),
        Probe("arguments", "scale=0.0 (every key weighs the same)", lambda: (_qkv(329, lead=(2,)), {"scale": 0.0}),
              "scale=0.0（每个键的权重相同）"),
        Probe("extreme", "scores of about 140", lambda: ((_far(2, 4, 8, seed=317), _far(2, 6, 8, seed=318), randn(2, 6, 5, seed=319)), {}),
              "约为 140 的分数"),
        Probe("edges", "one key (T_k = 1)", lambda: (_qkv(320, t_q=3, t_k=1, lead=(2,)), {}), "只有一个键（T_k = 1）"),
        Probe("edges", "one query (T_q = 1)", lambda: (_qkv(323, t_q=1, lead=(2,)), {}), "只有一个查询（T_q = 1）"),
        *[Probe("dtype", f"{name} inputs with a mask", lambda dt=dt: (tuple(t.to(dt) for t in _qkv(326)), {"mask": _MASK}),
                f"带掩码的 {name} 输入") for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))],
        # last, so that they do not come before the probes that name the usual mistakes. Whole-number q and k
        # and scale=0.5 make every score exact in float32, so right answers agree on scores this large.
        Probe("extreme", "scores of about -11,000 with a mask (a finite fill such as -1e4 would outweigh them)",
              lambda: ((_below(2, 4, 8, seed=340, sign=1), _below(2, 6, 8, seed=341, sign=-1), randn(2, 6, 5, seed=342)),
                       {"mask": _MASK, "scale": 0.5}),
              "约为 -11,000 的分数，带掩码（-1e4 这样的有限填充值会压过它们）"),
        Probe("arguments", "another (T_q, T_k) mask, after the first one", lambda: (_qkv(343), {"mask": _OTHER_MASK}),
              "另一个 (T_q, T_k) 掩码，在第一个之后"),
    ], compares=_GRADED, space=SPACES["scaled_dot_product_attention"]),
}

# Mutants of the model answers that no input the contract allows can tell apart (python -m autograder mutants 03)
EQUIVALENT = {
    "dot_product_variance": {
        "line 6: (q * k) -> its left operand": "the sum of q's d entries has variance d too, as q·k does: the contract grades that statistic",
        "line 6: -1 -> 1": "the products are (n_trials, d): dim 1 is dim -1",
        "line 9: .item(...) dropped (an alias or the old dtype)": "a 0-d tensor is accepted as the one number (its Rules say so)",
    },
    "scaled_dot_product_attention": {"line 9: keyword dim= dropped": "softmax's default dim is -1, the one the answer passes"},
}
