"""Notebook 02's input families: batches that differ, one token, large inputs, and v1/v2 pairs
for the in-place copy (sizes square and not, v1 from other weights or NaN, float64)."""
import torch

import utils.self_attention as ref
from autograder.checks import randn, seeded
from autograder.checks.harness import Family, Probe

D_IN, D_OUT = 5, 3  # non-square: a forgotten transpose cannot hide

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
    ], compares=_GRADS),
    "SelfAttentionV1": Family(_X_PROBES, compares=_GRADS),
    "SelfAttentionV2": Family(_X_PROBES, compares=_GRADS),
    # an in-place copy: what v1 holds afterwards is compared (`_copied`), whatever it returns
    "copy_weights_v2_to_v1": Family([
        Probe("batch", "d_in = 5 != d_out = 3, v1 starting from other weights, two batch items that differ",
              lambda: _v1_v2(5, 3, 501), "d_in = 5 != d_out = 3，v1 从其他权重开始，两个不同的批次项"),
        Probe("edges", "square sizes, d_in = d_out = 4", lambda: _v1_v2(4, 4, 511), "方阵大小，d_in = d_out = 4"),
        Probe("edges", "d_in = 2 < d_out = 6", lambda: _v1_v2(2, 6, 521), "d_in = 2 < d_out = 6"),
        Probe("extreme", "v1 starting from NaN", lambda: _v1_v2(3, 2, 531, start=float("nan")), "v1 从 NaN 开始"),
        Probe("dtype", "float64 modules", lambda: _v1_v2(5, 3, 541, dtype=torch.float64), "float64 的模块"),
    ], compares=("values", "shape", "dtype", "device", "inputs")),
}
QKV = ("W_query", "W_key", "W_value")


def _weights(seed, d_in=D_IN, d_out=D_OUT):
    """Raw (d_in, d_out) weights, spread like nn.Linear's initialisation."""
    return seeded((d_in, d_out), seed, fan_in=d_in)


def _v1_v2(d_in, d_out, seed, dtype=torch.float32, start=None):
    """(v1, v2) of the course's classes: v2's weights seeded, v1's seeded too (another seed) or all `start`."""
    v1, v2 = ref.SelfAttentionV1(d_in, d_out), ref.SelfAttentionV2(d_in, d_out)
    with torch.no_grad():
        for i, name in enumerate(QKV):
            getattr(v2, name).weight.copy_(_weights(seed + i, d_in, d_out).T)
            getattr(v1, name).copy_(_weights(seed + 3 + i, d_in, d_out) if start is None else torch.full((d_in, d_out), start))
    return (v1.to(dtype), v2.to(dtype)), {}
