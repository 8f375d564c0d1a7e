"""The input families of notebook 06's exercises (checks/harness.py), as data: the learner's code
against utils.multihead on each probe."""
import torch

from autograder.checks import randn
from autograder.checks.core import rules
from autograder.checks.nb04.causal_layers import layer_probes, representable, steep
from autograder.checks.core.harness import Family, Probe, Steps
from autograder.checks.core.rules import Contract, Forbid, Raises
from autograder.checks.core.space import Space

D_IN, CONTEXT = 5, 6  # the layers' input width and context length, in the families and in checks/nb06.py
_GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")
_ALL = ("float32", "float64", "bfloat16")
_MOVED = ("the layer moved with `.to(dtype)` computes in that dtype", "用 `.to(dtype)` 转换后的层用该 dtype 计算")
_SHORT = ("the input has at most `context_length` tokens", "输入的词元数不超过 `context_length`")
_INT = ("the result is an `int`", "结果是 `int`")
_DROPOUT = ("Dropout acts on the attention weights (on in `train()`, off in `eval()`); in `train()` it is graded by its statistics "
            "(the kept fraction and the scaling by 1/(1-p)), never by a particular mask, so any correct draw passes, "
            "`F.scaled_dot_product_attention(..., dropout_p=...)`'s included.",
            "Dropout 作用在注意力权重上（`train()` 中开启，`eval()` 中关闭）；在 `train()` 中按统计量评分（保留比例和 1/(1-p) 的缩放），"
            "从不比较某个具体的掩码，所以任何正确的抽样都能通过，包括 `F.scaled_dot_product_attention(..., dropout_p=...)` 自己的抽样。")
_MHA_FORWARD = ("PyTorch's multi-head attention: the projections, heads, attention and output projection this exercise builds",
                "PyTorch 的多头注意力：本练习要构造的投影、多头、注意力和输出投影")

CONTRACTS = rules.register("06", [
    Contract("MultiHeadAttentionWrapper", dtypes=_ALL, dtype=_MOVED, preconditions=(_SHORT,),
             notes=(("The heads are `num_heads` separate `CausalAttention` modules, each with its own weights, in one `nn.ModuleList`.",
                     "各个头是 `num_heads` 个独立的 `CausalAttention` 模块，各有自己的权重，放在一个 `nn.ModuleList` 中。"), _DROPOUT)),
    Contract("split_heads", dtypes=_ALL,
             raises=(Raises("ValueError", "the width is not divisible by `num_heads` (the message names both numbers)",
                            "宽度不能被 `num_heads` 整除（信息中写出这两个数）"),)),
    Contract("merge_heads", dtypes=_ALL),
    Contract("MultiHeadAttention", dtypes=_ALL, dtype=_MOVED, preconditions=(_SHORT,),
             forbids=(Forbid("torch.nn.functional.multi_head_attention_forward", *_MHA_FORWARD),
                      Forbid("torch.nn.MultiheadAttention", "the same, as a layer", "同一个东西，做成了层")),
             raises=(Raises("ValueError", "`d_out` is not divisible by `num_heads` (the message names both numbers)",
                            "`d_out` 不能被 `num_heads` 整除（信息中写出这两个数）"),),
             notes=(("The causal mask is a buffer named `mask`; `out_proj` is `nn.Linear(d_out, d_out)` with a bias.",
                     "因果掩码是名为 `mask` 的缓冲区；`out_proj` 是带偏置的 `nn.Linear(d_out, d_out)`。"), _DROPOUT)),
    Contract("mha_parameter_count", dtypes=(), dtype=_INT, device="none",
             preconditions=(("`d_out` is divisible by `num_heads`", "`d_out` 能被 `num_heads` 整除"),)),
    Contract("attention_parameter_count", dtypes=(), dtype=_INT, device="none"),
])


# The input spaces --------------------------------------------------------------------------
def _x(batch, t, d_in, values, seed):
    return randn(batch, t, d_in, seed=seed) * (30.0 if values == "large" else 1.0)


_T = {"B2,T=1": (2, lambda c: 1), "B3,T<context": (3, lambda c: c - 2), "B2,T=context": (2, lambda c: c)}
# wrapper: (num_heads, each head's width, context_length); MultiHeadAttention: (d_in, d_out, num_heads, context_length)
_WRAPPER = {"1 head of width 3": (1, 3, 6), "2 heads of width 2": (2, 2, 9), "3 heads of width 4": (3, 4, 6)}
_MHA = {"d_out 6, 2 heads": (5, 6, 2, 6), "d_in 4, d_out 6, 3 heads, context 9": (4, 6, 3, 9), "d_in 3, d_out 4, 1 head, context 5": (3, 4, 1, 5)}
_ONE = ("contiguous", "column-major", "strided")  # one input tensor: "mixed" would be column-major again


def _dropout(point):
    return 0.5 if point["flag:mode"] == "eval" else 0.0  # train() with dropout 0: deterministic, every gradient compared


def _wrapper_point(point, seed):
    heads, width, context = _WRAPPER[point["arguments:heads"]]
    batch, t = _T[point["shape"]]
    return Steps([("__call__", (_x(batch, t(context), D_IN, point["values"], seed),), {})], ctor=(D_IN, width, context, _dropout(point), heads),
                 ctor_kwargs={"qkv_bias": point["flag:qkv_bias"], "mode": point["flag:mode"]})


def _mha_point(point, seed):
    d_in, d_out, heads, context = _MHA[point["arguments:heads"]]
    batch, t = _T[point["shape"]]
    return Steps([("__call__", (_x(batch, t(context), d_in, point["values"], seed),), {})], ctor=(d_in, d_out, context, _dropout(point), heads),
                 ctor_kwargs={"qkv_bias": point["flag:qkv_bias"], "mode": point["flag:mode"]})


def _split_point(point, seed):
    batch, t = {"B2,T3": (2, 3), "B3,T5": (3, 5), "B1,T1": (1, 1)}[point["shape"]]
    heads, hd = point["arguments:heads"], point["arguments:head_dim"]
    width = heads * hd + (1 if point["bad"] == "width not divisible" else 0)
    x = randn(batch, t, width, seed=seed)
    return (x.round() if point["values"] == "integers, ties" else x, heads), {}


def _merge_point(point, seed):
    shape = {"B2,H3,T4,hd2": (2, 3, 4, 2), "B1,H1,T1,hd5": (1, 1, 1, 5), "B3,H2,T5,hd1": (3, 2, 5, 1), "B2,H4,T3,hd3": (2, 4, 3, 3)}[point["shape"]]
    x = randn(*shape, seed=seed)
    return (x.round() if point["values"] == "integers, ties" else x,), {}


_LAYER_AXES = {"shape": tuple(_T), "flag:qkv_bias": (False, True), "flag:mode": ("train", "eval"), "values": ("normal", "large")}
_COUNTS = ((768, 768, 12), (5, 6, 2), (5, 6, 3), (64, 32, 4), (10, 8, 8), (7, 9, 1), (1, 4, 2))
SPACES = {
    "MultiHeadAttentionWrapper": Space({**_LAYER_AXES, "arguments:heads": tuple(_WRAPPER), "dtype": _ALL, "layout": _ONE},
                                       _wrapper_point, valid=representable, no_grads=lambda p: p["values"] == "large", tolerance=steep),
    "split_heads": Space({"shape": ("B2,T3", "B3,T5", "B1,T1"), "arguments:heads": (1, 2, 4), "arguments:head_dim": (1, 3),
                          "bad": ("none", "width not divisible"), "values": ("normal", "integers, ties"), "dtype": _ALL, "layout": _ONE},
                         _split_point, valid=lambda p: p["bad"] == "none" or p["arguments:heads"] > 1),
    "merge_heads": Space({"shape": ("B2,H3,T4,hd2", "B1,H1,T1,hd5", "B3,H2,T5,hd1", "B2,H4,T3,hd3"), "values": ("normal", "integers, ties"),
                          "dtype": _ALL, "layout": _ONE}, _merge_point),
    "MultiHeadAttention": Space({**_LAYER_AXES, "arguments:heads": tuple(_MHA), "dtype": _ALL, "layout": _ONE},
                                _mha_point, valid=representable, no_grads=lambda p: p["values"] == "large", tolerance=steep),
    "mha_parameter_count": Space({"shape": _COUNTS, "flag:qkv_bias": (False, True)},
                                 lambda p, seed: (p["shape"], {"qkv_bias": p["flag:qkv_bias"]})),
    "attention_parameter_count": Space({"shape": ((12288, 96, 128, 96), (16, 1, 4, 1), (10, 3, 4, 2), (768, 12, 64, 12), (6, 4, 3, 5))},
                                       lambda p, seed: (p["shape"], {})),
}


def _dtypes(shape, seed, extra=()):
    """A float64 and a bfloat16 probe of the same input."""
    return [Probe("dtype", f"{name} input", lambda dt=dt: ((randn(*shape, seed=seed).to(dt), *extra), {}), f"{name} 输入")
            for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))]


FAMILIES = {
    # pinned: one head of width 3 (check_MultiHeadAttentionWrapper), dropout 0.0, so outputs are
    # deterministic in train mode too; the generated points say their heads, mode, dtype and flags
    "MultiHeadAttentionWrapper": Family([*layer_probes(D_IN, CONTEXT, 630)], compares=_GRADED, space=SPACES["MultiHeadAttentionWrapper"]),
    "split_heads": Family([
        Probe("batch", "(3, 5, 12) inputs whose batch items differ, 4 heads", lambda: ((randn(3, 5, 12, seed=601), 4), {}),
              "批次项各不相同的 (3, 5, 12) 输入，4 个头"),
        Probe("edges", "one token, one head", lambda: ((randn(2, 1, 6, seed=602), 1), {}), "一个词元、一个头"),
        Probe("edges", "head_dim 1 (as many heads as features)", lambda: ((randn(2, 3, 4, seed=603), 4), {}),
              "head_dim 为 1（头数等于特征数）"),
        *_dtypes((2, 3, 6), 604, (2,)),
        # last: bad input, after the probes that name the usual mistakes
        Probe("edges", "a width of 10 for 4 heads (not divisible: no split holds every feature)",
              lambda: ((randn(2, 3, 10, seed=605), 4), {}), "宽度 10、4 个头（不能整除：没有能容纳所有特征的切分）"),
    ], compares=_GRADED, space=SPACES["split_heads"]),
    "merge_heads": Family([
        Probe("batch", "(2, 3, 4, 2) inputs whose batch items and heads differ", lambda: ((randn(2, 3, 4, 2, seed=611),), {}),
              "批次项与注意力头各不相同的 (2, 3, 4, 2) 输入"),
        Probe("edges", "one token, one head", lambda: ((randn(2, 1, 1, 5, seed=612),), {}), "一个词元、一个头"),
        *_dtypes((2, 2, 3, 3), 613),
    ], compares=_GRADED, space=SPACES["merge_heads"]),
    # pinned: d_out 6 in 2 heads, dropout 0.0 in train mode (check_MultiHeadAttention)
    "MultiHeadAttention": Family([*layer_probes(D_IN, CONTEXT, 620)], compares=_GRADED, space=SPACES["MultiHeadAttention"]),
    "mha_parameter_count": Family([
        Probe("arguments", "qkv_bias=True, d_in != d_out", lambda: ((64, 32, 4), {"qkv_bias": True}), "qkv_bias=True，d_in != d_out"),
        Probe("edges", "one head", lambda: ((5, 6, 1), {}), "只有一个头"),
        Probe("edges", "head_dim 1 (as many heads as d_out)", lambda: ((10, 8, 8), {}), "head_dim 为 1（头数等于 d_out）"),
    ], compares=("values",), space=SPACES["mha_parameter_count"]),
    "attention_parameter_count": Family([
        Probe("edges", "one layer of one head", lambda: ((16, 1, 4, 1), {}), "一层、一个头"),
        Probe("arguments", "head_dim != d_model / n_heads", lambda: ((10, 3, 4, 2), {}), "head_dim != d_model / n_heads"),
    ], compares=("values",), space=SPACES["attention_parameter_count"]),
}

# Mutants of the model answers that no input the contract allows can tell apart (python -m autograder mutants 06).
EQUIVALENT = {
    "MultiHeadAttention": {
        "line 7: // -> /": "head_dim is used only as the scale's sqrt(head_dim), and d_out / num_heads equals d_out // num_heads "
                           "wherever the ValueError above lets the layer be built",
        "line 22: -2 -> 2": "k is (B, H, T, hd): its dimension 2 is its dimension -2, so transpose(2, -1) is transpose(-2, -1)",
    },
}
