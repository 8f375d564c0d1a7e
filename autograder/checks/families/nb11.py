"""Notebook 11's input families (checks/harness.py): the learner's code against utils.quantize."""
import torch
from torch import nn

import utils.quantize as ref
from autograder.checks import randn
from autograder.checks import int8_layers as il
from autograder.checks.harness import Family, Probe


def _bf16(*shape, seed):
    return randn(*shape, seed=seed).bfloat16()


_NO_GRADS = ("values", "shape", "dtype", "device", "inputs")  # rounding has no gradient to compare
_SCALE_FREE = ("values", "shape", "device", "inputs")  # a float64 scale is as right as float32's (the zoo's "float64")
FAMILIES = {
    "absmax_quantize": Family([
        Probe("batch", "rows that differ, one scale per row", lambda: ((randn(3, 2, 16, seed=120),), {"dim": -1}), "各行不同，每行一个 scale"),
        Probe("arguments", "one scale per column (dim=0)", lambda: ((randn(5, 7, seed=121),), {"dim": 0}), "每列一个 scale（dim=0）"),
        Probe("extreme", "values in the thousands", lambda: ((3000 * randn(4, 9, seed=122),), {}), "数千量级的数值"),
        Probe("dtype", "a bfloat16 input", lambda: ((_bf16(4, 32, seed=123),), {"dim": 1}), "bfloat16 输入"),
    ], compares=_SCALE_FREE),
    "dequantize": Family([
        Probe("batch", "rows that differ", lambda: (ref.absmax_quantize(randn(3, 2, 16, seed=124), dim=-1), {}), "各行不同"),
        Probe("arguments", "one scale per column", lambda: (ref.absmax_quantize(randn(5, 7, seed=125), dim=0), {}), "每列一个 scale"),
    ], compares=_SCALE_FREE),
    "fp8_block_quantize": Family([
        Probe("edges", "a ragged edge (70 x 130, blocks of 32)", lambda: ((randn(70, 130, seed=131),), {"block_size": 32}),
              "不整齐的边缘（70 x 130，32 的块）"),
        Probe("edges", "one block larger than the matrix", lambda: ((randn(5, 3, seed=132),), {"block_size": 8}), "一个比矩阵还大的块"),
        Probe("extreme", "weights in the thousands", lambda: ((3000 * randn(16, 24, seed=133),), {"block_size": 8}), "数千量级的权重"),
        Probe("dtype", "a bfloat16 weight", lambda: ((_bf16(32, 48, seed=134),), {"block_size": 16}), "bfloat16 权重"),
    ], compares=_NO_GRADS),
    "fp8_block_dequantize": Family([
        Probe("edges", "a ragged edge (70 x 130, blocks of 32)",
              lambda: (ref.fp8_block_quantize(randn(70, 130, seed=126), 32), {"block_size": 32}), "不整齐的边缘（70 x 130，32 的块）"),
        Probe("edges", "one block larger than the matrix", lambda: (ref.fp8_block_quantize(randn(5, 3, seed=127), 8), {"block_size": 8}),
              "一个比矩阵还大的块"),
        Probe("arguments", "the default block_size, 128 (a 200 x 300 weight)", lambda: (ref.fp8_block_quantize(randn(200, 300, seed=137)), {}),
              "默认的 block_size，128（200 x 300 的权重）"),
    ], compares=_NO_GRADS),
    "fp8_activation_quantize": Family([
        Probe("batch", "tokens of a batch that differ", lambda: ((randn(2, 3, 64, seed=128),), {"block_size": 32}), "批次中各不相同的词元"),
        Probe("extreme", "activations in the thousands", lambda: ((2000 * randn(4, 64, seed=129),), {"block_size": 16}), "数千量级的激活"),
        Probe("dtype", "a bfloat16 input", lambda: ((_bf16(3, 64, seed=130),), {"block_size": 32}), "bfloat16 输入"),
        # bad input: the text says K is a multiple of block_size, as DeepSeek-V3's act_quant asserts
        Probe("edges", "a last dimension (40) that is not a multiple of block_size (32)", lambda: ((randn(2, 40, seed=138),), {"block_size": 32}),
              "最后一维（40）不是 block_size（32）的倍数"),
    ], compares=_NO_GRADS),
    # Run as from_linear(linear)(x) (checks/int8_views.py). The layer does not train (int8 buffers,
    # no parameters): no gradient to compare.
    "Int8WeightOnlyLinear": Family([
        Probe("batch", "a batch of rows that differ, one output channel 50 times louder", lambda: _int8(32, 24, True, 1101, (2, 3, 32)),
              "各行不同的一批输入，一个输出通道大 50 倍"),
        Probe("extreme", "one input row 10 times the others", lambda: _int8(48, 16, True, 1103, (4, 48), loud_row=2), "一行输入是其他行的 10 倍"),
        Probe("edges", "one input row", lambda: _int8(32, 24, True, 1105, (1, 32)), "只有一行输入"),
        Probe("edges", "a bias-free nn.Linear", lambda: _int8(64, 8, False, 1107, (3, 64)), "不带偏置的 nn.Linear"),
        *[Probe("dtype", f"{name} inputs", lambda dt=dt: _int8(32, 24, True, 1109, (2, 32), dtype=dt), f"{name} 输入")
          for dt, name in ((torch.bfloat16, "bfloat16"), (torch.float64, "float64"))],
    ], compares=_NO_GRADS + ("holds",)),  # holds: the int8 codes (exactly) and the per-channel scales
    "quantize_model_": Family([
        Probe("batch", "linears at the top, in a ModuleList of Sequentials (with and without a bias), a ModuleDict and a custom module",
              lambda: ((il.probe_model(1121),), {}), "位于顶层、ModuleList 中的 Sequential（带或不带偏置）、ModuleDict 和自定义模块中的线性层"),
        Probe("arguments", "skip=('blocks.1.0',): one nested linear kept", lambda: ((il.probe_model(1122),), {"skip": ("blocks.1.0",)}),
              "skip=('blocks.1.0',)：保留一个嵌套的线性层"),
        Probe("arguments", "skip=('head',)", lambda: ((il.probe_model(1123),), {"skip": ("head",)}), "skip=('head',)"),
        Probe("edges", "skip=('blocks.1',) names a container, not a linear: its linears are replaced",
              lambda: ((il.probe_model(1124),), {"skip": ("blocks.1",)}), "skip=('blocks.1',) 指的是容器而不是线性层：其中的线性层仍被替换"),
        Probe("edges", "a model with no nn.Linear", lambda: ((no_linear_model(1125),), {}), "没有 nn.Linear 的模型"),
    ], compares=("values", "shape", "dtype", "device", "holds")),  # by effect: each module's kind by path, the output
}


def _int8(d_in, d_out, bias, seed, shape, dtype=torch.float32, loud_row=None):
    """(nn.Linear with one loud output channel, x) for Int8WeightOnlyLinear.from_linear(linear)(x)."""
    x = randn(*shape, seed=seed + 1)
    if loud_row is not None:
        x[loud_row] *= 10.0
    return (il.make_linear(d_in, d_out, bias, seed), x.to(dtype)), {}


class _NoLinear(nn.Module):
    """Nothing to quantize: a norm and an activation."""
    d_in = 16

    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.norm(x))


def no_linear_model(seed):
    model = _NoLinear()
    with torch.no_grad():
        model.norm.weight.copy_(1 + randn(16, seed=seed) / 4)
    return model.eval()
