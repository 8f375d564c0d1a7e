"""Notebook 16's contracts and input families (linear attention and the delta rule), as data: each
exercise's declared rules (`CONTRACTS`, the text's Rules blocks), its input space (`SPACES`: sizes
with grouped value heads and lengths that are not multiples of the chunk, one token, an initial
state given or not, the final state asked for or not, the L2 normalisation on and off, gates at
their extremes, every dtype graded, every layout, a head count that is not a multiple), and the
pinned probes that name a mistake. The inputs themselves are built in checks/delta_inputs.py."""
import torch

from autograder.checks.core import rules
from autograder.checks.nb16.delta_inputs import BAD, bytes_point, linear_point, qkv, rule, rule_point, step, step_point
from autograder.checks.core.harness import Family, Probe
from autograder.checks.core.rules import Contract, Raises
from autograder.checks.core.space import Space

_rule = rule  # the checks build their named inputs with it

# Contracts -----------------------------------------------------------------------------------
_ALL = ("float32", "float64", "bfloat16")
_FLOAT32_STATE = ("`out` has the inputs' dtype, and the state is float32 whatever the inputs' dtype",
                  "`out` 与输入的 dtype 相同；无论输入是什么 dtype，状态都是 float32")
_HEADS = Raises("ValueError", "`H_v` (v's heads) is not a multiple of `H_k` (the heads of q and k)",
                "`H_v`（v 的头数）不是 `H_k`（q 和 k 的头数）的倍数")
_LOG_DECAYS = ("`g` <= 0 (log decays)", "`g` <= 0（对数衰减）")
CONTRACTS = rules.register("16", [
    Contract("linear_attention_recurrent", dtypes=_ALL, dtype=_FLOAT32_STATE,
             notes=(("Nothing you create holds more numbers than the largest of the inputs, the output and the state: no "
                     "`(T, T)` matrix, no state kept for every token (grading watches what your function creates).",
                     "你创建的张量所含的数都不多于输入、输出和状态中最大者：不要 `(T, T)` 矩阵，也不要为每个词元保存一个状态"
                     "（评分会观察你的函数创建了什么）。"),)),
    Contract("linear_attention_parallel", dtypes=_ALL,
             dtype=("the output has the inputs' dtype, computed in float32 (bfloat16 arithmetic rounds a sum of many scores "
                    "beyond bfloat16's tolerance)", "输出与输入的 dtype 相同，用 float32 计算（用 bfloat16 计算许多分数之和时，舍入误差会超出 bfloat16 的容差）"),
             notes=(("As many torch operations for any length `T`: no loop over tokens (grading counts them for 6 and for 24 tokens).",
                     "任何长度 `T` 下执行的 torch 运算个数都相同：不对词元循环（评分会分别统计 6 个和 24 个词元时的运算个数）。"),)),
    Contract("gated_delta_step", dtypes=_ALL,
             dtype=("`out` and the new state have the inputs' dtype (the recurrent function of exercise 4 gives float32)",
                    "`out` 和新状态与输入的 dtype 相同（练习 4 的循环函数给的是 float32）")),
    Contract("recurrent_gated_delta_rule", dtypes=_ALL, dtype=_FLOAT32_STATE, raises=(_HEADS,), preconditions=(_LOG_DECAYS,)),
    Contract("chunk_gated_delta_rule", dtypes=_ALL, dtype=_FLOAT32_STATE, raises=(_HEADS,), helpers=("_chunk",),
             preconditions=(_LOG_DECAYS, ("`chunk_size` >= 1", "`chunk_size` >= 1")),
             notes=(("The state is updated a few times per chunk, never token by token: grading counts the state-sized tensors your "
                     "function creates (so no loop over tokens, and no call to your recurrent function).",
                     "状态每块只更新几次，绝不逐个词元更新：评分会统计你的函数创建的状态大小的张量个数（所以不要对词元循环，"
                     "也不要调用你的循环函数）。"),
                    ("No `(T, T)` matrix, not even a mask: grading runs 64 tokens in chunks of 16 and looks for a pair of dims of 64.",
                     "不构造 `(T, T)` 矩阵，连掩码也不行：评分用 64 个词元、每块 16 个运行，并查找一对大小为 64 的维度。"),
                    ("No NaN or inf for log decays down to -60 (g from -60 to -30 is graded).",
                     "对数衰减低至 -60 时也不能出现 NaN 或 inf（评分会用 -60 到 -30 之间的 g）。"))),
    Contract("hybrid_cache_bytes", dtypes=(), dtype=("a tuple of two Python ints", "由两个 Python 整数组成的元组"), device="none",
             preconditions=(("`cache_elements_per_token` is even (keys and values: `2 * n_kv_heads * head_dim`; MLA's 576)",
                             "`cache_elements_per_token` 是偶数（键和值：`2 * n_kv_heads * head_dim`；MLA 的 576）"),)),
])

# Input spaces --------------------------------------------------------------------------------
_LAYOUTS = ("contiguous", "column-major", "strided", "mixed")
_EXTREME = "g from -60 to -30, beta 0 and 1"
_LINEAR = Space({"shape": ((2, 6, 2, 4, 3), (1, 1, 3, 2, 5), (3, 9, 1, 5, 2), (1, 7, 2, 8, 8)),  # (B, T, H, d_k, d_v)
                 "values": ("normal", "queries of order 30", "all positive"), "dtype": _ALL, "layout": _LAYOUTS}, linear_point)
# (B, T, H_k, H_v, d_k, d_v): value heads grouped by 1, 2 and 3; lengths 5 and 7 (multiples of no chunk size but 1), 8 (of 4)
_RULE_SHAPES = ((2, 7, 2, 2, 4, 3), (1, 1, 1, 3, 3, 2), (2, 5, 2, 4, 4, 3), (1, 8, 3, 3, 5, 6))
_RULE_AXES = {"shape": _RULE_SHAPES, "arguments:initial_state": ("absent", "given"), "flag:output_final_state": (False, True),
              "flag:use_qk_l2norm": (False, True), "values": ("normal", _EXTREME, "keys near zero"), "dtype": _ALL, "layout": _LAYOUTS,
              "bad": ("none", BAD)}


def _bad_in_every_mode(p) -> bool:
    """A bad head count is probed with every flag and chunk size, in ordinary values, float32 and contiguous: its
    points cover no pair of the other axes that a point the reference answers must cover."""
    return p["bad"] == "none" or (p["values"] == "normal" and p["dtype"] == "float32" and p["layout"] == "contiguous")


SPACES = {
    "linear_attention_recurrent": _LINEAR,
    "linear_attention_parallel": _LINEAR,
    "gated_delta_step": Space({"shape": ((2, 3, 4, 3), (1, 1, 1, 5), (3, 2, 6, 2), (2, 4, 8, 8)),  # (B, H, d_k, d_v)
                               "values": ("normal", _EXTREME, "g = 0, beta = 1"), "dtype": _ALL, "layout": _LAYOUTS}, step_point),
    "recurrent_gated_delta_rule": Space(_RULE_AXES, rule_point, valid=_bad_in_every_mode),
    "chunk_gated_delta_rule": Space({**_RULE_AXES, "blocks": (1, 3, 4, "default")}, rule_point, valid=_bad_in_every_mode),
    "hybrid_cache_bytes": Space({"shape": ((3, 1000, 5, 2, 4, 16, 8, 64), (1, 1, 1, 1, 1, 1, 1, 2), (2, 70000, 3, 0, 7, 128, 64, 576),
                                           (5, 300, 0, 4, 2, 8, 8, 32), (8, 2**20, 48, 16, 32, 128, 256, 1024)),
                                 "arguments:bytes_per_element": ("defaults", "bfloat16 state, float32 cache", "one byte each")},
                                bytes_point),
}

# Pinned probes: hand-picked inputs that name a mistake ---------------------------------------
COMPARES = ("values", "shape", "dtype", "device", "inputs")
# e^-30 and less: the state forgotten, and within a chunk e^γ underflows to 0 and e^(γ_t - γ_j) for j > t overflows;
# beta 0: no write, 1: a full overwrite
_EXTREME_GATES = dict(g=(-60.0, -30.0), beta=(0.0, 1.0))

_LINEAR_PINNED = [
    Probe("batch", "batch items and heads that differ", lambda: qkv(400), "各不相同的批次项与注意力头"),
    Probe("edges", "one token", lambda: qkv(401, T=1), "一个词元"),
    Probe("edges", "non-contiguous inputs (transposed views)", lambda: qkv(402, strided=True), "非连续的输入（转置视图）"),
    Probe("extreme", "queries of order 30", lambda: qkv(403, scale=30.0), "30 量级的查询"),
]


def _rule_probes(seed, chunk):
    """The members recurrent_gated_delta_rule and chunk_gated_delta_rule share (chunk: its chunk_size, or None)."""
    c = {} if chunk is None else {"chunk": chunk}
    return [
        Probe("batch", "batch items that differ, no initial state", lambda: rule(seed, initial=False, **c), "各不相同的批次项，没有初始状态"),
        Probe("edges", "non-contiguous inputs (transposed views)", lambda: rule(seed + 4, strided=True, H_v=4, **c),
              "非连续的输入（转置视图）"),
        Probe("extreme", "g between -60 and -30, beta 0 and 1", lambda: rule(seed + 5, T=10, **_EXTREME_GATES, **c),
              "g 在 -60 与 -30 之间，beta 为 0 和 1"),
    ]


FAMILIES = {
    "linear_attention_recurrent": Family(_LINEAR_PINNED, compares=COMPARES, space=SPACES["linear_attention_recurrent"]),
    "linear_attention_parallel": Family(_LINEAR_PINNED + [
        Probe("edges", "70 tokens (past any mask made once for at most 64)", lambda: qkv(404, B=1, T=70, H=1), "70 个词元（超过只为最多 64 个词元做一次的掩码）"),
        Probe("dtype", "bfloat16 queries of order 30, 13 tokens", lambda: qkv(405, B=3, T=13, H=1, d_k=5, d_v=2, scale=30.0, dtype=torch.bfloat16),
              "30 量级的 bfloat16 查询，13 个词元"),
    ], compares=COMPARES, space=SPACES["linear_attention_parallel"]),
    "gated_delta_step": Family([
        Probe("batch", "batch items and heads that differ", lambda: step(420), "各不相同的批次项与注意力头"),
        Probe("extreme", "g = -50 (the state forgotten) and beta 0 and 1", lambda: step(421, g=(-50.0, -50.0), beta=(0.0, 1.0)),
              "g = -50（状态被遗忘），beta 为 0 和 1"),
        Probe("edges", "keys of one channel (d_k = 1)", lambda: step(422, d_k=1), "只有一个通道的键（d_k = 1）"),
    ], compares=COMPARES, space=SPACES["gated_delta_step"]),
    "recurrent_gated_delta_rule": Family(_rule_probes(430, None), compares=COMPARES, space=SPACES["recurrent_gated_delta_rule"]),
    "chunk_gated_delta_rule": Family(_rule_probes(450, 4) + [
        Probe("arguments", "the default chunk_size (64), 70 tokens", lambda: rule(472, T=70, B=1, H_v=4, d_k=3),
              "默认的 chunk_size（64），70 个词元"),
    ], compares=COMPARES, space=SPACES["chunk_gated_delta_rule"]),
    "hybrid_cache_bytes": Family([
        Probe("arguments", "Qwen3-Next-80B-A3B at 1M tokens", lambda: ((1, 2**20, 36, 12, 32, 128, 128, 1024), {}),
              "Qwen3-Next-80B-A3B，1M 个词元"),
        Probe("arguments", "Kimi-Linear-48B-A3B at 128K tokens (MLA's 576 numbers per token)",
              lambda: ((1, 2**17, 20, 7, 32, 128, 128, 576), {}), "Kimi-Linear-48B-A3B，128K 个词元（MLA 每个词元 576 个数）"),
    ], compares=("values",), space=SPACES["hybrid_cache_bytes"]),
}

# Mutants of the model answers that no input the contracts allow tells apart (python -m autograder mutants 16), by the
# model answer's line: why each computes the same.
_FLOAT32 = "float32 is torch's default dtype, which grading keeps: dtype=torch.float32 only says it"
_FOUR_DIMS = "the tensor is always 4-dimensional here ((B, H, ., .) as the contract's shapes say): dim 2 is dim -2"
_SAME_DEVICE = ("initial_state comes on the device of the other inputs (a caller's tensors share one device, and grading's "
                "inputs all report the same one): moving it there changes nothing")
_LOWER = ("solve_triangular(upper=False, unitriangular=True) reads only the strictly lower triangle of I + A: what tril keeps "
          "on and above the diagonal is never read")
_UNIT = "A = (...).tril(-1) has a zero diagonal, so I + A has ones there: solving with them or assuming them is the same"
EQUIVALENT = {
    "linear_attention_recurrent": {"line 6: keyword dtype= dropped": _FLOAT32, "line 7: keyword dtype= dropped": _FLOAT32,
                                   "line 10: -2 -> 2": _FOUR_DIMS},
    "linear_attention_parallel": {"line 6: -2 -> 2": _FOUR_DIMS},
    "gated_delta_step": {"line 5: -2 -> 2": _FOUR_DIMS, "line 7: -2 -> 2": _FOUR_DIMS},
    "recurrent_gated_delta_rule": {"line 15: keyword dtype= dropped": _FLOAT32, "line 17: keyword device= dropped": _SAME_DEVICE},
    "chunk_gated_delta_rule": {"line 16: keyword dtype= dropped": _FLOAT32, "line 18: keyword device= dropped": _SAME_DEVICE,
                               "line 29: keyword dtype= dropped": _FLOAT32, "line 28: -1 -> 1": _LOWER,
                               "line 28: constant 1 -> 0": _LOWER, "line 31: keyword unitriangular= dropped": _UNIT,
                               "line 31: True -> False": _UNIT, "line 28: -2 -> 2": _FOUR_DIMS, "line 33: -2 -> 2": _FOUR_DIMS,
                               "line 35: -2 -> 2": _FOUR_DIMS},
}
