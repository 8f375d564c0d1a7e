"""What the harness compares of notebook 11's int8 layer and of quantize_model_ (nb11/contract.py):
the view of each call that the contract fixes, and the words for a difference.

Decisions: Int8WeightOnlyLinear is run as from_linear(linear)(x), and compared on its output
relative to the size of the terms each output sums (any precision path the exercise allows,
bfloat16 or float32 activations, agrees there within bfloat16's tolerance), that output's dtype,
the int8 codes (exactly: absmax_quantize(linear.weight, dim=-1) fixes them) and each output
channel's amax = scale * 127 (a scale kept in bfloat16 or as (out, 1) is as right), rounded to
bfloat16 and compared in float32 relative to its size (nb11/contract.py: within 1%, so that a
channel whose amax is 1e-3 shows a floor of 1e-4 added to it). It does not
train: no gradient is compared. quantize_model_ is compared on what it leaves (effect=): whether
it returned the model itself, each module's kind by path, and the model's output.
"""
import torch
from torch import nn

from autograder.checks import call, randn
from autograder.checks.core.harness import _where
from autograder.checks.nb11.int8_layers import scale_of, tensors


def _codes_and_amax(layer, linear):
    """What the layer holds, as the contract fixes it: the int8 codes (out, in) and each output
    channel's amax = scale * 127 (a scale stored in bfloat16, or as (out, 1), is as right), in
    float32 after a rounding to bfloat16."""
    d_out, d_in = linear.weight.shape
    codes = [t for t in tensors(layer).values() if t.dtype == torch.int8 and tuple(t.shape) == (d_out, d_in)]
    return codes[0] if codes else torch.empty(0, dtype=torch.int8), scale_of(layer, linear).float()


def built_and_run(cls):
    """cls.from_linear(linear)(x) as one call, for the harness: (the output, relative; its dtype; the
    int8 codes; the amax). Relative: each output divided by the size of the terms it sums,
    sum_k |x_ik W_jk| + |b_j|, and in bfloat16, so that every precision path the exercise allows
    (bfloat16 activations as torch._weight_int8pack_mm takes them, float32 ones) agrees within
    bfloat16's tolerance, on loud rows and channels as on quiet ones."""
    def Int8WeightOnlyLinear(linear, x):
        layer = cls.from_linear(linear)
        y = layer(x)
        if not isinstance(y, torch.Tensor):
            return y, None, *_codes_and_amax(layer, linear)
        return _relative(y, linear, x), y.dtype, *_codes_and_amax(layer, linear)
    return Int8WeightOnlyLinear


def _relative(y, linear, x):
    size = x.detach().double().abs() @ linear.weight.detach().double().abs().T
    if linear.bias is not None:
        size = size + linear.bias.detach().double().abs()
    return (y.detach().double() / size).bfloat16() if y.shape == size.shape else y.bfloat16()


def _on(probe, en, zh):
    """A named mistake's sentence, saying on which probe it was seen."""
    en_on, zh_on = _where(probe)
    return f"{en}{en_on}.", f"{zh}{zh_on}。"


def explain_int8_linear(probe, out, expected):
    if isinstance(expected, torch.dtype):
        return _on(probe, "Int8WeightOnlyLinear's forward must return the input's dtype: compute in bfloat16 if you like, then convert back with .to(x.dtype)",
                "Int8WeightOnlyLinear 的 forward 必须返回与输入相同的 dtype：可以用 bfloat16 计算，然后用 .to(x.dtype) 转换回来")
    if isinstance(expected, torch.Tensor) and expected.dtype == torch.int8:
        return _on(probe, "Int8WeightOnlyLinear's int8 weight differs from absmax_quantize(linear.weight, dim=-1)'s codes: one scale per output channel, amax / 127, round, clamp to [-127, 127]",
                "Int8WeightOnlyLinear 的 int8 权重与 absmax_quantize(linear.weight, dim=-1) 的结果不同：每个输出通道一个 scale，amax / 127，取整，限制到 [-127, 127]")
    if isinstance(expected, torch.Tensor) and expected.dim() == 1:
        return _on(probe, "Int8WeightOnlyLinear's scales differ from absmax_quantize(linear.weight, dim=-1)'s: one per output channel, amax of that row / 127",
                "Int8WeightOnlyLinear 的 scale 与 absmax_quantize(linear.weight, dim=-1) 的不同：每个输出通道一个，等于该行的 amax / 127")
    return _on(probe, "Int8WeightOnlyLinear's output differs from the course's: x W^T + b, W = int8 weight * its output channel's scale, for every row of x",
               "Int8WeightOnlyLinear 的输出与课程的不同：对 x 的每一行计算 x W^T + b，W = int8 权重 * 所在输出通道的 scale")


# quantize_model_: what the model holds afterwards -------------------------------------------
def _kind(module) -> str:
    if type(module) is nn.Linear:
        return "nn.Linear"
    own = [t for t in [*module.parameters(recurse=False), *module.buffers(recurse=False)]]
    return "int8 layer" if any(t.dtype == torch.int8 for t in own) else type(module).__name__


def model_after(returned, args, kwargs):
    """What quantize_model_ left: whether it returned the model itself, each module's path and
    kind (nn.Linear, an int8 layer, or its class), and the model's output's dtype and values (in bfloat16: int8
    layers compute on bfloat16 activations) on fixed rows that differ."""
    model = args[0]
    x = randn(3, getattr(model, "d_in", 16), seed=1199)
    y = call(model, x, name="the quantized model")
    layout = tuple(f"{path or '(the model)'}: {_kind(m)}" for path, m in model.named_modules())
    if not isinstance(y, torch.Tensor):
        return returned is model, layout, None, y
    return returned is model, layout, y.dtype, y.bfloat16()


def explain_quantize(probe, out, expected):
    if isinstance(expected, bool):
        return _on(probe, "quantize_model_ must change the model in place and return that same model",
                "quantize_model_ 必须原地修改模型，并返回同一个模型")
    if isinstance(expected, torch.dtype):
        return _on(probe, "After quantize_model_ the model's output must keep the dtype of its input: change which layers compute, not the model's dtype",
                   "quantize_model_ 之后模型的输出必须保持输入的 dtype：只替换做计算的层，不改变模型的 dtype")
    if isinstance(expected, str):
        return _on(probe, "quantize_model_ must replace every nn.Linear at any depth, except those whose FULL dotted name in model.named_modules() is in skip, and leave every other module as it is",
                "quantize_model_ 必须替换任意深度的每个 nn.Linear（完整点分名字在 skip 中的除外），其他模块保持不变")
    return _on(probe, "After quantize_model_ the model's output differs from the course's quantized model's: replace each nn.Linear by Int8WeightOnlyLinear.from_linear of that same layer",
               "quantize_model_ 之后模型的输出与课程量化后的模型不同：把每个 nn.Linear 替换成由同一层得到的 Int8WeightOnlyLinear.from_linear")
