"""Notebook 05's input families (dropout on attention weights): what the harness runs each exercise
and the course's utils.dropout on, as data (autograder/checks/core/harness.py)."""
import torch

from autograder.checks import generator, randn
from autograder.checks.core import rules
from autograder.checks.nb04.causal_layers import layer_probes, representable, steep
from autograder.checks.core.harness import Family, Probe, Steps
from autograder.checks.core.rules import Contract, Forbid, Raises
from autograder.checks.core.space import Space

D_IN, D_OUT, CONTEXT = 5, 3, 6  # non-square projections, head_dim > 1
_ALL = ("float32", "float64", "bfloat16")
_BY_HAND = ("it is the dropout this exercise writes by hand", "它就是本练习要你手写的 dropout")
_SDPA = Forbid("torch.nn.functional.scaled_dot_product_attention",
               "with `dropout_p` it does this exercise's whole job: masked attention with dropout on the weights",
               "配合 `dropout_p`，它会完成本练习的全部工作：带掩码的注意力，并对权重做 dropout")

CONTRACTS = rules.register("05", [
    Contract("attention_dropout",
             forbids=(Forbid("torch.nn.functional.dropout", *_BY_HAND), Forbid("torch.nn.Dropout", "the same, as a layer", "同一个东西，做成了层"),
                      Forbid("torch.dropout", "the same, underneath", "同一个东西，在底层"),
                      Forbid("torch.dropout_", "the same, in place", "同一个东西，原地版本"),
                      Forbid("torch.native_dropout", "the kernel under all of them", "它们底下的内核")),
             raises=(Raises("ValueError", "`p` is not in [0, 1), whatever `training` is", "`p` 不在 [0, 1) 内（无论 `training` 取何值）"),),
             preconditions=(("a `generator`, when given, is on the weights' device (a CUDA generator for CUDA weights)",
                             "给出的 `generator` 与权重在同一设备上（CUDA 权重配 CUDA 生成器）"),),
             dtypes=_ALL,
             notes=(("Which entries are dropped is your draw: grading measures the kept fraction and the scaling on large tensors, never "
                     "a particular mask. Each entry is dropped independently; the random numbers come from `generator` (the same seed, "
                     "the same mask), or from PyTorch's global generator when it is `None` (a new mask each call).",
                     "哪些元素被丢弃由你的抽样决定：评分在大张量上测量保留比例和缩放，从不比较某个具体的掩码。每个元素独立地被丢弃；"
                     "随机数来自 `generator`（相同的种子给出相同的掩码），为 `None` 时来自 PyTorch 的全局生成器（每次调用都是新的掩码）。"),)),
    Contract("CausalAttention", forbids=(_SDPA,), dtypes=_ALL,
             dtype=("the layer moved with `.to(dtype)` computes in that dtype", "用 `.to(dtype)` 转换后的层用该 dtype 计算"),
             preconditions=(("the input has at most `context_length` tokens", "输入的词元数不超过 `context_length`"),),
             notes=(("It holds an `nn.Dropout(dropout)` layer that acts on the attention weights, so `train()` and `eval()` switch it "
                     "(deterministic in `eval()`); the mask is a buffer named `mask`.",
                     "它包含一个作用在注意力权重上的 `nn.Dropout(dropout)` 层，这样 `train()` 和 `eval()` 会开关它（`eval()` 中是确定性的）；"
                     "掩码是名为 `mask` 的缓冲区。"),)),
])


# attention_dropout -------------------------------------------------------------------------
def kept_as_reference(out, args, kwargs):
    """What the contract fixes whatever the draw: in training with p > 0, every entry is 0 (dropped)
    or its weight / (1 - p); the dropped ones are filled with that value, so values, dtype and
    layout are compared as for any exercise (the rate is measured by check_attention_dropout)."""
    weights, p = args[0], args[1] if len(args) > 1 else kwargs["p"]
    if not (kwargs.get("training", True) and p > 0 and isinstance(out, torch.Tensor) and out.shape == weights.shape):
        return out
    return torch.where(out != 0, out, weights.detach() / (1 - p))


_SHAPES = {"2x3x4x6": (2, 3, 4, 6), "250": (250,), "1x1": (1, 1), "3x7": (3, 7)}
_BAD = {"none": None, "p=-0.1": -0.1, "p=1": 1.0}
_ONE = ("contiguous", "column-major", "strided")  # one input tensor: "mixed" would be column-major again


def _dropout_point(point, seed):
    shape = _SHAPES[point["shape"]]
    x = randn(*shape, seed=seed)
    weights = {"softmax": torch.softmax(2 * x, dim=-1), "both signs, zeros, large": 1e4 * x * (x.abs() > 0.3)}[point["values"]]
    p = point["arguments:p"] if _BAD[point["bad"]] is None else _BAD[point["bad"]]
    gen = generator(seed + 1) if point["arguments:generator"] == "seeded" else None
    return (weights, p), {"training": point["flag:training"], "generator": gen}


def _dropout_valid(point):
    """A bad p stands for p (the point's p is 0.3 then), in either mode, on softmax weights; a layout
    other than contiguous where the dropout runs (training, p > 0), so that reading it matters."""
    drops = point["flag:training"] and point["arguments:p"] > 0 and point["bad"] == "none"
    return ((point["bad"] == "none" or point["arguments:p"] == 0.3 and point["values"] == "softmax")
            and (point["layout"] == "contiguous" or drops))


# CausalAttention ---------------------------------------------------------------------------
_SIZES = {"d_in 5, d_out 3, context 6": (D_IN, D_OUT, CONTEXT), "d_in 4, d_out 8, context 9": (4, 8, 9)}  # past the pinned ones


def _layer_point(point, seed):
    d_in, d_out, context = _SIZES[point["arguments:sizes"]]
    batch, t = {"B2,T=1": (2, 1), "B3,T<context": (3, context - 2), "B2,T=context": (2, context), "B1,T=context": (1, context)}[point["shape"]]
    x = randn(batch, t, d_in, seed=seed) * (30.0 if point["values"] == "large" else 1.0)
    dropout = 0.5 if point["flag:mode"] == "eval" else 0.0  # train() with dropout 0: deterministic, every gradient compared
    return Steps([("__call__", (x,), {})], ctor=(d_in, d_out, context, dropout),
                 ctor_kwargs={"qkv_bias": point["flag:qkv_bias"], "mode": point["flag:mode"]})


SPACES = {
    "attention_dropout": Space({"shape": tuple(_SHAPES), "arguments:p": (0.0, 0.3, 0.9), "flag:training": (True, False),
                                "arguments:generator": ("seeded", None), "values": ("softmax", "both signs, zeros, large"),
                                "bad": tuple(_BAD), "dtype": _ALL, "layout": _ONE}, _dropout_point, valid=_dropout_valid),
    "CausalAttention": Space({"shape": ("B2,T=1", "B3,T<context", "B2,T=context", "B1,T=context"), "arguments:sizes": tuple(_SIZES),
                              "flag:qkv_bias": (False, True),
                              "flag:mode": ("train", "eval"), "values": ("normal", "large"), "dtype": _ALL, "layout": _ONE},
                             _layer_point, valid=representable, no_grads=lambda p: p["values"] == "large", tolerance=steep),
}


def _drop(dtype, p=0.3, training=True, seed=500):
    weights = torch.softmax(randn(2, 3, 4, 6, seed=seed), dim=-1).to(dtype)
    return (weights, p), {"training": training, "generator": generator(seed + 1)}


FAMILIES = {
    # Which entries are dropped is the learner's draw (the contract fixes the rate, not the
    # order of the random numbers): values are compared through kept_as_reference, and the
    # rate by the statistics of check_attention_dropout.
    "attention_dropout": Family([
        Probe("dtype", "float64 weights, p=0.3", lambda: _drop(torch.float64), "float64 权重，p=0.3"),
        Probe("dtype", "bfloat16 weights, p=0.3", lambda: _drop(torch.bfloat16), "bfloat16 权重，p=0.3"),
        Probe("arguments", "float64 weights with training=False", lambda: _drop(torch.float64, training=False),
              "training=False 的 float64 权重"),
        Probe("edges", "bfloat16 weights with p=0", lambda: _drop(torch.bfloat16, p=0.0), "p=0 的 bfloat16 权重"),
        Probe("edges", "p=1 with training=False (a bad p whatever the mode)", lambda: _drop(torch.float32, p=1.0, training=False),
              "training=False 时 p=1（无论什么模式，p 都不合法）"),
    ], compares=("values", "shape", "dtype", "device", "inputs"), space=SPACES["attention_dropout"]),
    # Built with dropout=0.0 in train() (deterministic: every value and gradient compared) or with
    # dropout=0.5 in eval(); dropout itself is checked by its statistics (causal_layers).
    "CausalAttention": Family([
        *layer_probes(D_IN, CONTEXT, 510),
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads"), space=SPACES["CausalAttention"]),
}

# Mutants of the model answers that no input the contract allows can tell apart (python -m autograder mutants 05).
EQUIVALENT = {
    "attention_dropout": {
        "line 6: constant 0 -> 1": "p == 1 never reaches that line (the ValueError above); with p == 0 the mutant computes weights * (u >= 0) / 1, the same values",
        "line 6: constant 0 -> -1": "p == -1 never reaches that line (the ValueError above); with p == 0 the mutant computes weights * (u >= 0) / 1, the same values",
        "line 8: >= -> >": "a uniform draw equals p with probability about 2**-24 per entry: the same kept fraction and scaling",
    },
}
