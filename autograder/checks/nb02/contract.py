"""Notebook 02's contracts and input families: batches that differ, one token, large inputs, every
dtype and layout, and v1/v2 pairs for the in-place copy (sizes square and not, v1 from other
weights or NaN, v2's weights laid out every way)."""
import torch
from torch import nn

import utils.self_attention as ref
from autograder.checks import randn, seeded
from autograder.checks.core import rules
from autograder.checks.core.harness import Family, Probe, Steps
from autograder.checks.core.rules import Contract, Forbid
from autograder.checks.core.space import LAYOUTS, Space, column_major, strided

D_IN, D_OUT = 5, 3  # non-square: a forgotten transpose cannot hide
QKV = ("W_query", "W_key", "W_value")

_ALL = ("float32", "float64", "bfloat16")
_MOVED = ("the module moved with `.to(dtype)` computes in that dtype", "用 `.to(dtype)` 转换后的模块用该 dtype 计算")
_SDPA = Forbid("torch.nn.functional.scaled_dot_product_attention", "it computes the whole attention this forward writes",
               "它会完成这个 forward 要写的整个注意力")
CONTRACTS = rules.register("02", [
    Contract("project_qkv", dtypes=_ALL),
    Contract("SelfAttentionV1", forbids=(_SDPA,), helpers=("attend",), dtypes=_ALL, dtype=_MOVED),
    Contract("SelfAttentionV2", forbids=(_SDPA,), helpers=("attend",), dtypes=_ALL, dtype=_MOVED),
    Contract("copy_weights_v2_to_v1", may_change=("v1",), dtypes=_ALL,
             dtype=("v1 and v2 share one dtype; v1's parameters keep it", "v1 与 v2 的 dtype 相同；v1 的参数保持该 dtype"),
             preconditions=(("v2 has no biases", "v2 没有偏置"),),
             notes=(("After the copy, v1's parameters share no memory with v2 (a copy is a copy: training v1 must not change v2).",
                     "复制之后，v1 的参数不与 v2 共享内存（复制就是复制：训练 v1 不能改变 v2）。"),)),
])


# The input spaces --------------------------------------------------------------------------
# leading dims, T, d_in, d_k (= d_out), d_v: a 2-d x, batch items and heads that differ, one token,
# sizes past the hidden tests' constants (d_in = 5, d_out = 3)
_SIZES = {"T=4, d_in=5, d_k=3, d_v=5, 2-d x": ((), 4, 5, 3, 5), "B3, T=4, d_in=5, d_k=3, d_v=2": ((3,), 4, 5, 3, 2),
          "B2,H2, T=3, d_in=4, d_k=4, d_v=4": ((2, 2), 3, 4, 4, 4), "B2, T=1, d_in=3, d_k=1, d_v=6": ((2,), 1, 3, 1, 6),
          "B2, T=5, d_in=70, d_k=64, d_v=65": ((2,), 5, 70, 64, 65)}


def _x(point, seed):
    lead, t, d_in, d_k, d_v = _SIZES[point["shape"]]
    return randn(*lead, t, d_in, seed=seed) * (30.0 if point["values"] == "large" else 1.0), d_in, d_k, d_v


def _project(point, seed):
    x, d_in, d_k, d_v = _x(point, seed)
    return (x, *(seeded((d_in, d), seed + i + 1, fan_in=d_in) for i, d in enumerate((d_k, d_k, d_v)))), {}


def _layer(point, seed):
    """One forward of a layer built with the point's sizes (and qkv_bias, for V2)."""
    x, d_in, d_k, _ = _x(point, seed)
    flags = {"qkv_bias": point["flag:qkv_bias"]} if point.get("flag:qkv_bias", "not given") != "not given" else {}
    return Steps([("__call__", (x,), {})], ctor=(d_in, d_k), ctor_kwargs=flags)


_PAIRS = {"d_in=5, d_out=3": (5, 3), "d_in=d_out=4": (4, 4), "d_in=2, d_out=6": (2, 6), "d_in=7, d_out=1": (7, 1)}
_START = {"other weights": None, "NaN": float("nan"), "zeros": 0.0}


def _pair_point(point, seed):
    d_in, d_out = _PAIRS[point["shape"]]
    return _v1_v2(d_in, d_out, seed, dtype=getattr(torch, point["dtype"]), start=_START[point["values"]], layout=point["layout"])


# x is the layer's one input: "mixed" (the first column-major, the others strided) would be "column-major" again
_LAYER_AXES = {"shape": tuple(_SIZES), "values": ("normal", "large"), "dtype": _ALL, "layout": ("contiguous", "column-major", "strided")}


def _not_bfloat16_large(p):
    """Large inputs give scores in the hundreds, which bfloat16 rounds to a multiple of 2: two right
    orders of computing them (the query scaled first, a float32 route cast back) give different weights."""
    return not (p["dtype"] == "bfloat16" and p["values"] == "large")
SPACES = {
    "project_qkv": Space({"shape": tuple(_SIZES), "values": ("normal", "large"), "dtype": _ALL, "layout": LAYOUTS}, _project),
    "SelfAttentionV1": Space(dict(_LAYER_AXES), _layer, valid=_not_bfloat16_large, no_grads=lambda p: p["values"] == "large"),
    "SelfAttentionV2": Space({**_LAYER_AXES, "flag:qkv_bias": (False, True, "not given")}, _layer, valid=_not_bfloat16_large,
                             no_grads=lambda p: p["values"] == "large"),
    # v1 and v2 are modules: the builder casts them and lays out v2's weights itself
    "copy_weights_v2_to_v1": Space({"shape": tuple(_PAIRS), "values": tuple(_START), "dtype": _ALL,
                                    "layout": ("contiguous", "column-major", "strided")}, _pair_point),
}

_GRADS = ("values", "shape", "dtype", "device", "inputs", "grads")
_X_PROBES = [
    Probe("batch", "a batch whose items differ", lambda: ((randn(3, 4, D_IN, seed=24),), {}), "各项不同的批次"),
    Probe("edges", "a single token", lambda: ((randn(2, 1, D_IN, seed=25),), {}), "只有一个词元"),
    Probe("extreme", "inputs 30 times larger (nearly one-hot weights)", lambda: ((30 * randn(2, 4, D_IN, seed=26),), {}),
          "放大 30 倍的输入（几乎 one-hot 的权重）"),
]
FAMILIES = {
    "project_qkv": Family([
        Probe("batch", "a batch whose items differ, d_v != d_k",
              lambda: ((randn(3, 4, D_IN, seed=27), randn(D_IN, D_OUT, seed=28), randn(D_IN, D_OUT, seed=29),
                        randn(D_IN, D_OUT + 2, seed=30)), {}), "各项不同的批次，d_v != d_k"),
        Probe("dtype", "float64 inputs and weights",
              lambda: (tuple(randn(*s, seed=31 + i).double() for i, s in enumerate(((2, 3, D_IN), (D_IN, D_OUT), (D_IN, D_OUT), (D_IN, D_OUT)))), {}),
              "float64 的输入和权重"),
    ], compares=_GRADS, space=SPACES["project_qkv"]),
    "SelfAttentionV1": Family(_X_PROBES, compares=_GRADS, space=SPACES["SelfAttentionV1"]),
    "SelfAttentionV2": Family(_X_PROBES, compares=_GRADS, space=SPACES["SelfAttentionV2"]),
    # an in-place copy: what v1 holds afterwards is compared (checks/nb02.py `_copied`), whatever it returns
    "copy_weights_v2_to_v1": Family([
        Probe("batch", "d_in = 5 != d_out = 3, v1 starting from other weights, two batch items that differ",
              lambda: _v1_v2(5, 3, 501), "d_in = 5 != d_out = 3，v1 从其他权重开始，两个不同的批次项"),
        Probe("edges", "square sizes, d_in = d_out = 4", lambda: _v1_v2(4, 4, 511), "方阵大小，d_in = d_out = 4"),
        Probe("edges", "d_in = 2 < d_out = 6", lambda: _v1_v2(2, 6, 521), "d_in = 2 < d_out = 6"),
        Probe("extreme", "v1 starting from NaN", lambda: _v1_v2(3, 2, 531, start=float("nan")), "v1 从 NaN 开始"),
        Probe("dtype", "float64 modules", lambda: _v1_v2(5, 3, 541, dtype=torch.float64), "float64 的模块"),
    ], compares=("values", "shape", "dtype", "device", "inputs"), space=SPACES["copy_weights_v2_to_v1"]),
}


def _weights(seed, d_in=D_IN, d_out=D_OUT):
    """Raw (d_in, d_out) weights, spread like nn.Linear's initialisation."""
    return seeded((d_in, d_out), seed, fan_in=d_in)


def _v1_v2(d_in, d_out, seed, dtype=torch.float32, start=None, layout="contiguous"):
    """(v1, v2) of the course's classes: v2's weights seeded and laid out in memory as `layout` says,
    v1's seeded too (another seed) or all `start`."""
    v1, v2 = ref.SelfAttentionV1(d_in, d_out), ref.SelfAttentionV2(d_in, d_out)
    with torch.no_grad():
        for i, name in enumerate(QKV):
            getattr(v2, name).weight.copy_(_weights(seed + i, d_in, d_out).T)
            getattr(v1, name).copy_(_weights(seed + 3 + i, d_in, d_out) if start is None else torch.full((d_in, d_out), start))
    v1, v2 = v1.to(dtype), v2.to(dtype)
    if layout != "contiguous":  # the same values, other strides: weight.T may then be contiguous already, a view
        for name in QKV:
            layer = getattr(v2, name)
            layer.weight = nn.Parameter((column_major if layout == "column-major" else strided)(layer.weight))
    return (v1, v2), {}
