"""Notebook 08's contracts and input spaces (positions: the sinusoidal encoding and RoPE): what the
harness runs each exercise and the course's utils.rope on, as data (autograder/checks/core/harness.py).

Positions far from 0 (about 4,000) are graded at the rounding of a float32 angle there: the angle
t * w_i of a right solution computed another way (float64 angles, exp-log frequencies, complex
numbers) differs from the course's float32 one by up to about t * 2^-22 radians, more than
float32's tolerance on the rotated values (`_far`)."""
import torch

from autograder.checks import ATOL, RTOL, randn
from autograder.checks.core import rules
from autograder.checks.core.harness import Family, Probe, Steps
from autograder.checks.core.rules import Contract, Raises
from autograder.checks.core.space import Space
from utils.kv_cache import KVCache

_GRADED = ("values", "shape", "dtype", "device", "inputs", "grads")
_LAYOUTS = ("contiguous", "column-major", "strided", "mixed")
_FLOAT32 = ("the result is float32", "结果为 float32")

CONTRACTS = rules.register("08", [
    Contract("sinusoidal_positions", dtypes=(), dtype=_FLOAT32, device="none",
             preconditions=(("d_model is even (sin and cos come in pairs)", "d_model 为偶数（sin 与 cos 成对出现）"),)),
    Contract("rope_inverse_frequencies", dtypes=(), dtype=_FLOAT32, device="none",
             preconditions=(("head_dim is even", "head_dim 为偶数"),)),
    Contract("apply_rope", dtypes=("float32", "float64", "bfloat16"),
             preconditions=(("head_dim (the last dimension of x) is even", "head_dim（x 的最后一维）为偶数"),
                            ("`positions` holds one position per row of x (T of them)", "`positions` 为 x 的每一行给出一个位置（共 T 个）")),
             notes=(("Positions far from 0 (thousands) are graded at the rounding of a float32 angle there.",
                     "远离 0 的位置（数千）按该处 float32 角度的舍入误差评分。"),)),
    Contract("interleaved_to_half_split", dtypes=("float32", "float64", "bfloat16"),
             raises=(Raises("Exception", "the `d_out` rows do not split into `num_heads` heads of even width",
                            "`d_out` 行不能分成 `num_heads` 个宽度为偶数的头"),)),
    Contract("RoPEMultiHeadAttention", dtypes=("float32", "float64"),
             dtype=("the layer moved with `.to(dtype)` computes in that dtype", "用 `.to(dtype)` 转换后的层用该 dtype 计算"),
             preconditions=(("`d_out` splits into `num_heads` heads of even width", "`d_out` 能分成 `num_heads` 个宽度为偶数的头"),
                            ("the cached and the new tokens together fit `context_length`", "已缓存的与新的词元合起来不超过 `context_length`")),
             notes=(("`num_heads` and `head_dim` are attributes (notebook 07's GPT reads them); the module keeps nothing between calls.",
                     "`num_heads` 与 `head_dim` 是属性（笔记本 07 的 GPT 读取它们）；模块在调用之间不保存任何东西。"),)),
])


# The input spaces --------------------------------------------------------------------------
FAR = 4093  # the first far position: not a round number, past bfloat16's exact integers (256)


def _far(point) -> dict | None:
    """The tolerance of a point whose positions reach about FAR + 12: float32's angle rounding there."""
    far = point.get("values") == "far (4093 and on)" or point.get("shape") == (FAR + 12, 10)
    atol = (FAR + 12) * 2.0 ** -20  # about 4e-3: 16 times the rounding of one angle, times |x| up to 4
    return {torch.float32: (atol, RTOL), torch.float64: (atol, RTOL)} if far else None


# Scores in the hundreds: float32 rounds each to about 2^-24 * 300, and the softmax passes that on
# to the output (float64 angles with F.scaled_dot_product_attention differ from the course's by 3e-5).
_STEEP = {torch.float32: (1e-3, 1e-3), torch.float64: (1e-3, 1e-3)}


def _sinusoidal(point, seed):
    positions, d_model = point["shape"]
    base = point["arguments:base"]
    return ((positions, d_model), {} if base is None else {"base": base})


def _frequencies(point, seed):
    theta = point["arguments:theta"]
    if theta == "default":
        return (point["shape"],), {}
    return ((point["shape"], 50.0), {}) if theta == "50 by position" else ((point["shape"],), {"theta": 500000.0})


_ROPE_SHAPES = {"(T, hd) 5x8": ((), 5, 8), "(B, H, T, hd) 2x3x4x6": ((2, 3), 4, 6), "(B, T, hd) 3x6x2": ((3,), 6, 2),
                "(B, H, T, hd) 1x2x3x16": ((1, 2), 3, 16)}
_POSITIONS = {
    "0 .. T-1": lambda T: torch.arange(T),
    "from 7": lambda T: torch.arange(7, 7 + T),
    "not consecutive": lambda T: torch.tensor([3, 4, 6, 9, 13, 18])[:T],
    "repeated, descending": lambda T: torch.tensor([5, 5, 4, 2, 1, 0])[:T],
    "far (4093 and on)": lambda T: torch.tensor([FAR, FAR + 1, FAR + 2, FAR + 5, FAR + 8, FAR + 12])[:T],
}


def _rope_point(point, seed):
    lead, T, hd = _ROPE_SHAPES[point["shape"]]
    theta = point["arguments:theta"]
    args = (randn(*lead, T, hd, seed=seed), _POSITIONS[point["values"]](T)) + (() if theta is None else (theta,))
    return args, ({"interleaved": True} if point["flag:interleaved"] else {})


_PERMUTE_SHAPES = {"3 heads of 4, (12, 7)": (3, 4, (7,)), "2 heads of 6, a bias (12,)": (2, 6, ()),
                   "4 heads of 2, (8, 3)": (4, 2, (3,)), "1 head of 10, (10, 4)": (1, 10, (4,))}


def _permute_point(point, seed):
    heads, hd, rest = _PERMUTE_SHAPES[point["shape"]]
    d_out = heads * hd + {"none": 0, "odd head_dim": heads, "d_out not divisible by num_heads": 1}[point["bad"]]
    weight = {"random": lambda: randn(d_out, *rest, seed=seed),
              "integers (int64)": lambda: torch.arange(d_out * (rest[0] if rest else 1)).view(d_out, *rest),
              "rows repeated in pairs": lambda: randn(d_out // 2 + 1, *rest, seed=seed).repeat_interleave(2, 0)[:d_out]}[point["values"]]()
    return (weight, heads), {}


_LAYERS = {"d_in 5, 2 heads of 4, context 9": (5, 8, 9, 2, 10000.0), "d_in 6, 2 heads of 6, context 8, theta 50": (6, 12, 8, 2, 50.0),
           "d_in 4, 4 heads of 4, context 10": (4, 16, 10, 4, 10000.0)}
# batch, number of tokens (None: context_length), and the chunks given to one cache (None: one call without a cache)
_SEQUENCES = {"one call, B2, T = context": (2, None, None), "one call, B3, T = 1": (3, 1, None),
              "a cache: prefill T - 1, then one token, B1": (1, None, (-1, None)),
              "a cache: one token, two, then the rest, B2": (2, None, (1, 2, None))}
_LAYER_LAYOUTS = ("contiguous", "column-major", "strided")  # one input: "mixed" would be column-major again


def _layer_point(point, seed):
    d_in, d_out, context, heads, theta = _LAYERS[point["shape:layer"]]
    batch, T, plan = _SEQUENCES[point["sequence"]]
    T = context if T is None else T
    x = randn(batch, T, d_in, seed=seed) * {"normal": 1.0, "large (scores in the hundreds)": 12.0, "tiny (size 1e-3)": 1e-3}[point["values"]]
    given = {"theta": theta, "interleaved": point["flag:interleaved"], "qkv_bias": point["flag:qkv_bias"]}
    defaults = {"theta": 10000.0, "interleaved": False, "qkv_bias": False}  # left out, so that the defaults are graded too
    ctor = dict(ctor=(d_in, d_out, context, heads), ctor_kwargs={k: v for k, v in given.items() if v != defaults[k]})
    if plan is None:
        return Steps([("__call__", (x,), {})], **ctor)
    cache = KVCache(batch, context, heads, d_out // heads, dtype=getattr(torch, point["dtype"]))
    return Steps([("__call__", (x[:, a:b].clone(),), {"kv_cache": cache}) for a, b in _cuts(T, plan)], **ctor)


def _cuts(T, plan):
    """Chunk boundaries: sizes in `plan` (-1: all but the last token; None: the rest)."""
    cuts, start = [], 0
    for size in plan:
        end = T if size is None else (T - 1 if size == -1 else start + size)
        cuts.append((start, end))
        start = end
    return cuts


SPACES = {
    "sinusoidal_positions": Space({"shape": ((1, 2), (12, 8), (7, 6), (90, 16), (FAR + 12, 10)), "arguments:base": (None, 100.0, 500000.0)},
                                  _sinusoidal, tolerance=_far),
    "rope_inverse_frequencies": Space({"shape": (2, 6, 64, 130), "arguments:theta": ("default", "50 by position", "500000 by keyword")},
                                      _frequencies),
    "apply_rope": Space({"shape": tuple(_ROPE_SHAPES), "flag:interleaved": (False, True), "arguments:theta": (None, 500000.0),
                         "values": tuple(_POSITIONS), "dtype": CONTRACTS["apply_rope"].dtypes,
                         "layout": _LAYOUTS}, _rope_point, no_grads=lambda p: _far(p) is not None, tolerance=_far),
    "interleaved_to_half_split": Space({"shape": tuple(_PERMUTE_SHAPES), "values": ("random", "integers (int64)", "rows repeated in pairs"),
                                        "bad": ("none", "odd head_dim", "d_out not divisible by num_heads"),
                                        "dtype": CONTRACTS["interleaved_to_half_split"].dtypes, "layout": _LAYOUTS}, _permute_point,
                                       valid=lambda p: not (p["shape"].startswith("1 head") and p["bad"] == "d_out not divisible by num_heads"),
                                       no_grads=lambda p: p["values"] == "integers (int64)"),
    "RoPEMultiHeadAttention": Space({"shape:layer": tuple(_LAYERS), "sequence": tuple(_SEQUENCES), "flag:interleaved": (False, True),
                                     "flag:qkv_bias": (False, True), "values": ("normal", "large (scores in the hundreds)", "tiny (size 1e-3)"),
                                     "dtype": CONTRACTS["RoPEMultiHeadAttention"].dtypes, "layout": _LAYER_LAYOUTS}, _layer_point,
                                    no_grads=lambda p: p["values"] == "large (scores in the hundreds)",
                                    tolerance=lambda p: _STEEP if p["values"] == "large (scores in the hundreds)" else None),
}


def _mha(x, interleaved, bias, seed_x):
    return lambda: Steps([("__call__", (x(seed_x),), {})], ctor_kwargs={"theta": 50.0, "interleaved": interleaved, "qkv_bias": bias})


FAMILIES = {
    # Pinned: positions below 100, where every right formulation agrees at float32's tolerance.
    "sinusoidal_positions": Family([
        Probe("edges", "one position, d_model 2", lambda: ((1, 2), {}), "一个位置，d_model 为 2"),
        Probe("arguments", "base=100, 12 positions, d_model 8", lambda: ((12, 8), {"base": 100.0}), "base=100，12 个位置，d_model 为 8"),
        Probe("extreme", "90 positions, d_model 16", lambda: ((90, 16), {}), "90 个位置，d_model 为 16"),
    ], compares=("values", "shape", "dtype", "device"), space=SPACES["sinusoidal_positions"]),
    "rope_inverse_frequencies": Family([
        Probe("edges", "head_dim 2", lambda: ((2,), {}), "head_dim 为 2"),
        Probe("arguments", "head_dim 128, theta=500000 (Llama 3)", lambda: ((128,), {"theta": 500000.0}),
              "head_dim 为 128，theta=500000（Llama 3）"),
        Probe("arguments", "head_dim 6, theta 50 given by position", lambda: ((6, 50.0), {}), "head_dim 为 6，theta 50 按位置传入"),
    ], compares=("values", "shape", "dtype", "device"), space=SPACES["rope_inverse_frequencies"]),
    "apply_rope": Family([
        *[Probe("batch", f"(B, H, T, hd) heads whose batch items and heads differ, interleaved={lay}",
                lambda lay=lay: ((randn(2, 3, 5, 8, seed=801), torch.tensor([3, 4, 5, 6, 9]), 100.0), {"interleaved": lay}),
                f"批次项与注意力头各不相同的 (B, H, T, hd)，interleaved={lay}") for lay in (False, True)],
        Probe("edges", "(T, head_dim) with one position and head_dim 2", lambda: ((randn(1, 2, seed=802), torch.tensor([5])), {}),
              "(T, head_dim)，一个位置，head_dim 为 2"),
        Probe("edges", "heads split by a transpose (non-contiguous)",
              lambda: ((randn(2, 4, 3, 6, seed=803).transpose(1, 2), torch.arange(4)), {"interleaved": True}), "经 transpose 拆分出的头（非连续）"),
        *[Probe("extreme", f"positions near 4000 in bfloat16, interleaved={lay}",
                lambda lay=lay: ((randn(2, 2, 4, 8, seed=804).bfloat16(), torch.arange(4000, 4004)), {"interleaved": lay}),
                f"bfloat16 下接近 4000 的位置，interleaved={lay}") for lay in (False, True)],
    ], compares=_GRADED, space=SPACES["apply_rope"]),
    "interleaved_to_half_split": Family([
        Probe("batch", "a (12, 7) weight of 3 heads whose rows differ", lambda: ((randn(12, 7, seed=811), 3), {}),
              "3 个头、各行不同的 (12, 7) 权重"),
        Probe("edges", "a 1-D bias of 2 heads", lambda: ((randn(12, seed=812), 2), {}), "2 个头的一维偏置"),
        Probe("edges", "head_dim 2", lambda: ((randn(8, 3, seed=813), 4), {}), "head_dim 为 2"),
        *[Probe("dtype", f"a {name} weight", lambda dt=dt: ((randn(12, 5, seed=814).to(dt), 2), {}), f"{name} 权重")
          for dt, name in ((torch.float64, "float64"), (torch.bfloat16, "bfloat16"))],
    ], compares=_GRADED, space=SPACES["interleaved_to_half_split"]),
    "RoPEMultiHeadAttention": Family([
        Probe("batch", "two batch items that differ, 9 tokens = context_length", _mha(lambda s: randn(2, 9, 5, seed=s), False, False, 821),
              "两个不同的批次项，9 个词元 = context_length"),
        Probe("edges", "one token (interleaved, with biases)", _mha(lambda s: randn(2, 1, 5, seed=s), True, True, 822),
              "只有一个词元（相邻配对，带偏置）"),
        Probe("extreme", "inputs of size 12 (scores in the hundreds)", _mha(lambda s: randn(2, 6, 5, seed=s) * 12, True, True, 823),
              "大小为 12 的输入（数百量级的分数）", tolerance=_STEEP),
    ], compares=_GRADED, space=SPACES["RoPEMultiHeadAttention"]),
}
MHA_CTOR = (5, 8, 9, 2)  # d_in, d_out, context_length, num_heads of the pinned probes

# Mutants of the model answers that no input the contracts allow can tell apart (`python -m autograder mutants 08`).
_INT_ARANGE = "an integer arange divided by an int, or times a float32 tensor, is float32 already (exact below 2^24)"
EQUIVALENT = {
    "sinusoidal_positions": {"line 3: keyword dtype= dropped": _INT_ARANGE, "line 4: keyword dtype= dropped": _INT_ARANGE},
    "rope_inverse_frequencies": {"line 3: keyword dtype= dropped": _INT_ARANGE},
    "apply_rope": {"line 4: .float(...) dropped (an alias or the old dtype)": "integer positions times float32 frequencies are float32 already"},
    "RoPEMultiHeadAttention": {
        "line 5: if d_out % num_heads -> if False": "d_out not divisible by num_heads is a precondition: never graded",
        "line 18: constant 0 -> 1": "without a cache every position moves by the same amount: RoPE sees only offsets, so no score changes",
        "line 18: constant 0 -> -1": "without a cache every position moves by the same amount: RoPE sees only offsets, so no score changes",
        "line 25: -2 -> 2": "k.transpose(2, -1) is k.transpose(-2, -1) for the 4-D keys (B, H, S, hd)",
    },
}
