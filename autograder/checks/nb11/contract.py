"""Notebook 11's contracts and input families (checks/harness.py): the learner's code against
utils.quantize. The spaces' builders (value regimes, layers, models) are in `quant_spaces.py`.

Scales are compared relative to their size (atol 0): a scale is amax / 127 or / 448, so on a slice
whose amax is 1e-3 an absolute tolerance would let a scale that is off by 1e-4 / 127 (the floor
added to amax instead of clamped) pass. Every slice, block and tile of a generated probe keeps its
amax above 1e-4 (where every guard of the all-zero slice gives the same scale); the all-zero ones
are the hand-written checks' (quant_probes.expect_zero_guarded: any guard).
"""
import torch

import utils.quantize as ref
from autograder.checks import randn
from autograder.checks.core import rules
from autograder.checks.nb11 import quant_spaces as qs
from autograder.checks.core.harness import Family, Probe
from autograder.checks.core.rules import Contract
from autograder.checks.core.space import LAYOUTS, Space

_GUARD = ("An all-zero {what} may be guarded any way that gives a finite scale and zeros; every other {what} (amax at least 1e-4) "
          "gets exactly amax / {top}, compared relative to the scale's size.",
          "全零的{zh}可以用任何方式保护，只要 scale 有限且结果为零；其余每个{zh}（amax 至少为 1e-4）的 scale 必须恰好是 amax / {top}，"
          "按相对于 scale 大小的误差比较。")


def _guard(what, zh, top):
    return (_GUARD[0].format(what=what, top=top), _GUARD[1].format(zh=zh, top=top))


_IN_FLOAT32 = ("computed in float32 whatever the input's dtype", "无论输入是什么 dtype 都用 float32 计算")
CONTRACTS = rules.register("11", [
    Contract("absmax_quantize", dtypes=("float32", "bfloat16"),
             dtype=(f"`q` is `torch.int8` and `scale` float32, {_IN_FLOAT32[0]}", f"`q` 为 `torch.int8`，`scale` 为 float32，{_IN_FLOAT32[1]}"),
             notes=(_guard("slice", "切片", 127),)),
    Contract("dequantize", dtype=("the result is float32 (`q.float() * scale`)", "结果是 float32（`q.float() * scale`）")),
    Contract("fp8_block_quantize", dtypes=("float32", "bfloat16"),
             dtype=(f"`w_fp8` is `torch.float8_e4m3fn` and `scale` float32, {_IN_FLOAT32[0]}",
                    f"`w_fp8` 为 `torch.float8_e4m3fn`，`scale` 为 float32，{_IN_FLOAT32[1]}"),
             notes=(_guard("block", "块", 448),)),
    Contract("fp8_block_dequantize", dtype=("the result is float32", "结果是 float32")),
    Contract("fp8_activation_quantize", dtypes=("float32", "bfloat16"),
             dtype=(f"`x_fp8` is `torch.float8_e4m3fn` and `scale` float32, {_IN_FLOAT32[0]}",
                    f"`x_fp8` 为 `torch.float8_e4m3fn`，`scale` 为 float32，{_IN_FLOAT32[1]}"),
             preconditions=(("the last dimension K is a multiple of `block_size` (DeepSeek-V3's `act_quant` asserts it)",
                             "最后一维 K 是 `block_size` 的整数倍（DeepSeek-V3 的 `act_quant` 会断言这一点）"),),
             notes=(_guard("tile", "分块", 448),)),
    Contract("Int8WeightOnlyLinear", dtypes=("float32", "float64", "bfloat16"),
             dtype=("the output has x's dtype (the product may run on bfloat16 activations, as `torch._weight_int8pack_mm` takes them)",
                    "输出与 x 的 dtype 相同（乘法可以像 `torch._weight_int8pack_mm` 那样在 bfloat16 激活上进行）"),
             preconditions=(("`in_features` is a multiple of 16 (the CPU kernel of `torch._weight_int8pack_mm` steps through it by 16)",
                             "`in_features` 是 16 的整数倍（`torch._weight_int8pack_mm` 的 CPU 内核以 16 为步长处理它）"),),
             notes=(("The int8 weight (exactly `absmax_quantize(linear.weight, dim=-1)`'s codes) and the scales are buffers of the layer; "
                     "no floating-point copy of the weight is kept, in the layer or anywhere else, and the layer does not read the "
                     "`nn.Linear` it came from, nor hold it through an autograd graph (copy detached tensors).",
                     "int8 权重（恰好是 `absmax_quantize(linear.weight, dim=-1)` 的整数）和 scale 是该层的缓冲区；不在层中或其他任何地方"
                     "保留权重的浮点副本，该层也不读取它所来自的 `nn.Linear`，也不通过自动求导计算图持有它（复制分离后的张量）。"),
                    ("`x` may be non-contiguous (a column-major copy): `torch._weight_int8pack_mm` reads each row of its bfloat16 "
                     "input in one piece, so make that input `.contiguous()`.",
                     "`x` 可能不是连续的（列优先的副本）：`torch._weight_int8pack_mm` 一次读取其 bfloat16 输入的一整行，"
                     "所以要把这个输入变成 `.contiguous()`。"),
                    ("`forward` builds no floating-point tensor as large as the weight, and takes less than 1.5 times the float32 "
                     "`nn.Linear`'s time at 4096 x 4096 on one thread (unless the course's own layer, timed beside it, is that slow too).",
                     "`forward` 不构造与权重一样大的浮点张量，并且在单线程、4096 x 4096 下耗时少于 float32 `nn.Linear` 的 1.5 倍"
                     "（除非在旁边一起计时的课程自己的层也同样慢）。"))),
    Contract("quantize_model_", may_change=("model",), also=("the quantized model",),  # what the checks run after it
             notes=(("`skip` holds full dotted names of linears in `model.named_modules()`; a name of a container keeps nothing.",
                     "`skip` 中是线性层在 `model.named_modules()` 中的完整点分名字；容器的名字不会保留任何层。"),)),
])

# Scales and outputs relative to their size: each is one float32 division or product of exact
# numbers (amax, an integer code), so any right order of operations is within a few units in the
# last place (1e-6), and a floor added to amax (1e-4 / amax, 4e-5 at amax 2.5) fails on the scale
# itself rather than on the codes it moves.
_RELATIVE = {torch.float32: (0.0, 1e-6), torch.float64: (0.0, 1e-6)}
_NO_GRADS = ("values", "shape", "dtype", "device", "inputs")  # rounding has no gradient to compare
_SCALE_FREE = ("values", "shape", "device", "inputs")  # a float64 scale is as right as float32's (the zoo's "float64")
_VALUES = ("normal", "negative peak", "one-signed", "thousands", "tiny", "near the floor")
_ONE_INPUT = ("contiguous", "column-major", "strided")  # one tensor input: "mixed" would be "column-major"

SPACES = {
    "absmax_quantize": Space({"shape": tuple(qs.DIM_SHAPES), "arguments:dim": (None, 0, 1, -1), "values": _VALUES,
                              "dtype": CONTRACTS["absmax_quantize"].dtypes, "layout": _ONE_INPUT},
                             qs.absmax_point, valid=qs.dim_fits),
    "dequantize": Space({"shape": tuple(qs.DIM_SHAPES), "arguments:dim": (None, 0, 1, -1), "values": ("normal", "thousands", "tiny"),
                         "dtype": CONTRACTS["dequantize"].dtypes, "layout": LAYOUTS}, qs.dequantize_point, valid=qs.dim_fits),
    "fp8_block_quantize": Space({"shape": tuple(qs.MATRICES), "blocks": (None, 8, 32, 128), "values": _VALUES,
                                 "dtype": CONTRACTS["fp8_block_quantize"].dtypes, "layout": _ONE_INPUT}, qs.fp8_weight_point),
    # no column-major scale ("column-major" lays out both inputs so): torch.kron, a right way to spread the scales,
    # views its input and fails on one (torch 2.13); "mixed" has w_fp8 column-major and the scale strided
    "fp8_block_dequantize": Space({"shape": tuple(qs.MATRICES), "blocks": (None, 8, 32, 128), "values": ("normal", "thousands", "tiny"),
                                   "dtype": CONTRACTS["fp8_block_dequantize"].dtypes, "layout": ("contiguous", "strided", "mixed")},
                                  qs.fp8_packed_point),
    "fp8_activation_quantize": Space({"shape": tuple(qs.ACTIVATIONS), "blocks": (None, 16, 32, 64),
                                      "values": ("normal", "one loud tile", "one-signed", "thousands", "tiny", "near the floor"),
                                      "dtype": CONTRACTS["fp8_activation_quantize"].dtypes, "layout": _ONE_INPUT},
                                     qs.fp8_activation_point, valid=qs.tiles_fit),
    # x is the one tensor input ("mixed" would be "column-major"); its values' scale does not matter (outputs are
    # compared relative to the terms they sum), their pattern does
    "Int8WeightOnlyLinear": Space({"shape": tuple(qs.LAYERS), "flag:bias": (True, False),
                                   "values": ("one loud output channel", "one loud input row", "one quiet output channel"),
                                   "dtype": CONTRACTS["Int8WeightOnlyLinear"].dtypes, "layout": ("contiguous", "column-major", "strided")},
                                  qs.int8_point),
    "quantize_model_": Space({"shape": tuple(qs.MODELS), "arguments:skip": ((), ("head",), ("blocks.1.0",), ("blocks.1",))},
                             qs.model_point),
}


def _bf16(*shape, seed):
    return randn(*shape, seed=seed).bfloat16()


FAMILIES = {
    "absmax_quantize": Family([
        Probe("batch", "rows that differ, one scale per row", lambda: ((randn(3, 2, 16, seed=120),), {"dim": -1}), "各行不同，每行一个 scale"),
        Probe("arguments", "one scale per column (dim=0)", lambda: ((randn(5, 7, seed=121),), {"dim": 0}), "每列一个 scale（dim=0）"),
        Probe("extreme", "values in the thousands", lambda: ((3000 * randn(4, 9, seed=122),), {}), "数千量级的数值"),
        Probe("dtype", "a bfloat16 input", lambda: ((_bf16(4, 32, seed=123),), {"dim": 1}), "bfloat16 输入"),
    ], compares=_SCALE_FREE, tolerance=_RELATIVE, space=SPACES["absmax_quantize"]),
    "dequantize": Family([
        Probe("batch", "rows that differ", lambda: (ref.absmax_quantize(randn(3, 2, 16, seed=124), dim=-1), {}), "各行不同"),
        Probe("arguments", "one scale per column", lambda: (ref.absmax_quantize(randn(5, 7, seed=125), dim=0), {}), "每列一个 scale"),
    ], compares=_SCALE_FREE, tolerance=_RELATIVE, space=SPACES["dequantize"]),
    "fp8_block_quantize": Family([
        Probe("edges", "a ragged edge (70 x 130, blocks of 32)", lambda: ((randn(70, 130, seed=131),), {"block_size": 32}),
              "不整齐的边缘（70 x 130，32 的块）"),
        Probe("edges", "one block larger than the matrix", lambda: ((randn(5, 3, seed=132),), {"block_size": 8}), "一个比矩阵还大的块"),
        Probe("extreme", "weights in the thousands", lambda: ((3000 * randn(16, 24, seed=133),), {"block_size": 8}), "数千量级的权重"),
        Probe("dtype", "a bfloat16 weight", lambda: ((_bf16(32, 48, seed=134),), {"block_size": 16}), "bfloat16 权重"),
    ], compares=_NO_GRADS, tolerance=_RELATIVE, space=SPACES["fp8_block_quantize"]),
    "fp8_block_dequantize": Family([
        Probe("edges", "a ragged edge (70 x 130, blocks of 32)",
              lambda: (ref.fp8_block_quantize(randn(70, 130, seed=126), 32), {"block_size": 32}), "不整齐的边缘（70 x 130，32 的块）"),
        Probe("edges", "one block larger than the matrix", lambda: (ref.fp8_block_quantize(randn(5, 3, seed=127), 8), {"block_size": 8}),
              "一个比矩阵还大的块"),
        Probe("arguments", "the default block_size, 128 (a 200 x 300 weight)", lambda: (ref.fp8_block_quantize(randn(200, 300, seed=137)), {}),
              "默认的 block_size，128（200 x 300 的权重）"),
    ], compares=_NO_GRADS, tolerance=_RELATIVE, space=SPACES["fp8_block_dequantize"]),
    "fp8_activation_quantize": Family([
        Probe("batch", "tokens of a batch that differ", lambda: ((randn(2, 3, 64, seed=128),), {"block_size": 32}), "批次中各不相同的词元"),
        Probe("extreme", "activations in the thousands", lambda: ((2000 * randn(4, 64, seed=129),), {"block_size": 16}), "数千量级的激活"),
        Probe("dtype", "a bfloat16 input", lambda: ((_bf16(3, 64, seed=130),), {"block_size": 32}), "bfloat16 输入"),
    ], compares=_NO_GRADS, tolerance=_RELATIVE, space=SPACES["fp8_activation_quantize"]),
    # Run as from_linear(linear)(x) (checks/int8_views.py). The layer does not train (int8 buffers,
    # no parameters): no gradient to compare. Each output channel's amax (scale * 127, rounded to
    # bfloat16, the kernel's dtype) is float32 and compared relative to its size, within 1%.
    "Int8WeightOnlyLinear": Family([
        Probe("batch", "a batch of rows that differ, one output channel 50 times louder", lambda: qs.int8_layer(32, 24, True, 1101, (2, 3, 32)),
              "各行不同的一批输入，一个输出通道大 50 倍"),
        Probe("extreme", "one input row 10 times the others", lambda: qs.int8_layer(48, 16, True, 1103, (4, 48), loud_row=2), "一行输入是其他行的 10 倍"),
        Probe("edges", "one input row", lambda: qs.int8_layer(32, 24, True, 1105, (1, 32)), "只有一行输入"),
        Probe("edges", "a bias-free nn.Linear", lambda: qs.int8_layer(64, 8, False, 1107, (3, 64)), "不带偏置的 nn.Linear"),
    ], compares=_NO_GRADS + ("holds",), tolerance={torch.float32: (0.0, 1e-2)}, space=SPACES["Int8WeightOnlyLinear"]),
    # the pinned probes (the probe model with and without skip) are points of the space
    "quantize_model_": Family([], compares=("values", "shape", "dtype", "device", "holds"), space=SPACES["quantize_model_"]),  # by effect: each module's kind by path, the output
}

# Mutants of the model answers that no input the contracts allow can tell apart (python -m autograder
# mutants 11), with the reason.
_LOWER_FLOOR = ("a floor below 1e-4 changes only slices whose amax is below 1e-4: the all-zero ones, where the contract "
                "accepts any guard")
_NEVER_CLAMPED = "a value divided by the scale of its own slice (amax / {top}, in float32) is at most {top}: the clamp never acts"
_PROMOTED = "int8 or bfloat16 times (or over) a float32 tensor is float32 already (type promotion)"
_E4M3 = "447 rounds to 448 in e4m3, whose grid holds nothing between 416 and 448"
EQUIVALENT = {
    "absmax_quantize": {"line 6: constant 0.0001 -> 5e-05": _LOWER_FLOOR,
                        "line 7: constant 127 -> 128": _NEVER_CLAMPED.format(top=127) + " (it does in bfloat16 arithmetic: the hand-written check's trap)"},
    "dequantize": {"line 4: .float(...) dropped (an alias or the old dtype)": _PROMOTED},
    "fp8_block_quantize": {"line 7: constant 0.0001 -> 5e-05": _LOWER_FLOOR, "line 9: constant 448 -> 449": _NEVER_CLAMPED.format(top=448),
                           "line 9: constant 448 -> 447": _E4M3, "line 9: .float(...) dropped (an alias or the old dtype)": _PROMOTED},
    "fp8_activation_quantize": {"line 5: constant 0.0001 -> 5e-05": _LOWER_FLOOR, "line 6: constant 448 -> 449": _NEVER_CLAMPED.format(top=448),
                                "line 6: constant 448 -> 447": _E4M3},
    "Int8WeightOnlyLinear": {"line 2: True -> False": "the layer is made by from_linear, which passes bias itself (the default is the skeleton's)",
                             "line 8: conditional -> its first branch": "a zero bias buffer where the nn.Linear has no bias adds nothing",
                             "line 14: keyword bias= dropped": "a zero bias buffer where the nn.Linear has no bias adds nothing",
                             "line 15: -1 -> 1": "the weight is 2-D: dim 1 is dim -1",
                             "line 17: -1 -> 1": "the scale is (out, 1): squeeze(1) is squeeze(-1)"},
}
