"""Hidden checks of notebook 11, quantized inference.

Inputs are built here from fixed seeds, with the traps of each idea inside: the largest
magnitude is a negative number (max is not max |x|), a bfloat16 tensor whose largest value
rounds to 128 without clamping, weights whose sides are not multiples of the block (a ragged
edge holding the largest values), activations whose tokens and blocks have very different
ranges, and a linear layer with one loud output channel and a large bias.

Decisions: `absmax_quantize(x, dim)` takes the amax ALONG `dim` (x.abs().amax(dim, keepdim=True)),
so a weight (out, in) gets one scale per output channel with dim=-1. `quantize_model_(model,
skip=())` leaves the nn.Linear layers whose name in model.named_modules() is in `skip`.
The int8 linear may compute in bfloat16 (torch._weight_int8pack_mm does), so its outputs are
compared per output channel within 2% of that channel's largest output. "Dequantizes the whole
weight at every call" is caught without a clock: a torch function mode records the torch calls
of one forward (tensor methods and operators included), and none may return a float tensor half
as large as the weight. (A dispatch mode would see below the Python calls too, but entering the
first one imports torch._dynamo, 1.3 s of every submit.) Speed is then measured
against the float32 layer at 4096 x 4096 (more than a last-level cache), interleaved, best of many
rounds, on one thread (on a busy machine a two-thread kernel waits for its second thread at every
call), and only a forward 1.5 times slower than float32 fails: on one thread of a CPU without int8
dot-product instructions the kernel merely matches float32, while it wins on more threads.
"""
import time

import torch
from torch import nn

from torch.overrides import TorchFunctionMode

import utils.quantize as ref
from autograder.checks import Shortcut, call, expect, expect_close, expect_known, expect_tensor, fail, generator, own_work, randn

FP8 = torch.float8_e4m3fn


def _x_with_negative_peak():
    x = randn(5, 7, seed=110)
    x[2, 3] = -4.0  # the largest magnitude is negative; row 2 is loud
    return x


def _int8(q, who):
    expect_tensor(q, f"{who}'s q", f"{who} 的 q")
    expect(q.dtype == torch.int8, f"{who} must return q as torch.int8 (.to(torch.int8) after rounding and clamping).",
           f"{who} 返回的 q 必须是 torch.int8（取整并截断到范围后再 .to(torch.int8)）。", f"dtype {q.dtype}")


def _expect_rounded(q, x, scale, who):
    """q must be round(x / scale): at most a few ties differ by 1; truncation and floor are named."""
    ratio = x.double() / scale.double()
    qd = q.double()
    for wrong, en, zh in [(ratio.trunc(), "rounds by truncation (toward zero): use torch.round", "用截断（向零取整）代替了四舍五入：请使用 torch.round"),
                          (ratio.floor(), "rounds down (floor): use torch.round", "向下取整（floor）了：请使用 torch.round")]:
        if torch.equal(qd, wrong) and not torch.equal(wrong, ratio.round()):
            fail(f"{who} {en}.", f"{who} {zh}。")
    off = (qd - ratio.round().clamp(-127, 127)).abs()
    expect(off.max() <= 1 and (off > 0).float().mean() <= 0.05,
           f"{who}'s q must be round(x / scale), clamped to [-127, 127].",
           f"{who} 的 q 必须是 round(x / scale)，并截断到 [-127, 127]。", f"largest difference {float(off.max())}")


def check_absmax_quantize(absmax_quantize):
    who, x = "absmax_quantize", _x_with_negative_peak()
    with own_work(absmax_quantize, who):
        whole = call(absmax_quantize, x.clone(), name=who)
        rows = call(absmax_quantize, x.clone(), dim=1, name=who)
        cols = call(absmax_quantize, x.clone(), dim=0, name=who)
        x3 = randn(2, 3, 16, seed=111)
        last = call(absmax_quantize, x3.clone(), dim=-1, name=who)
        peak = torch.tensor([[2.6875, -1.0, 0.5], [0.25, 0.125, -2.0]], dtype=torch.bfloat16)
        clamp = call(absmax_quantize, peak.clone(), name=who)
    expect(isinstance(whole, tuple) and len(whole) == 2, f"{who} must return a pair (q, scale).", f"{who} 必须返回一对 (q, scale)。")
    q, scale = whole
    _int8(q, who)
    expect_tensor(scale, f"{who}'s scale", f"{who} 的 scale")
    expect(scale.numel() == 1, f"Without dim, {who} must use one scale for the whole tensor.",
           f"没有 dim 时，{who} 必须对整个张量使用一个 scale。", f"scale shape {tuple(scale.shape)}")
    amax = x.abs().max()
    expect_known(scale.reshape(()).float(), amax / 127, [
        (x.max() / 127, "The scale comes from max(x), which misses a large negative value: use the max of ABSOLUTE values, x.abs().amax().",
         "scale 来自 max(x)，漏掉了绝对值很大的负数：请用绝对值的最大值 x.abs().amax()。"),
        (x.abs().mean() / 127, "The scale comes from the mean of |x|: absmax uses the MAXIMUM of |x|, so that no value overflows.",
         "scale 来自 |x| 的平均值：absmax 用的是 |x| 的最大值，这样才不会有值溢出。"),
        (127 / amax, "The scale is inverted: scale = amax / 127, and q = round(x / scale).", "scale 颠倒了：scale = amax / 127，q = round(x / scale)。"),
        (amax / 128, "Symmetric int8 uses [-127, 127]: scale = amax / 127, not / 128.", "对称 int8 使用 [-127, 127]：scale = amax / 127，而不是 / 128。"),
        (amax / 255, "Symmetric int8 uses [-127, 127]: scale = amax / 127, not / 255.", "对称 int8 使用 [-127, 127]：scale = amax / 127，而不是 / 255。")],
        f"{who}'s scale must be max(|x|) / 127.", f"{who} 的 scale 必须是 max(|x|) / 127。", atol=1e-9)
    _expect_rounded(q, x, scale.reshape(()).float(), who)

    for (qd, sd), dim, expected in [(rows, 1, x.abs().amax(1, keepdim=True)), (cols, 0, x.abs().amax(0, keepdim=True)),
                                    (last, -1, x3.abs().amax(-1, keepdim=True))]:
        _int8(qd, who)
        expect_tensor(sd, f"{who}'s scale", f"{who} 的 scale")
        src = x3 if dim == -1 else x
        if sd.shape != expected.shape:
            other = 1 - dim if dim >= 0 else 0
            if dim >= 0 and sd.numel() == src.shape[other]:
                fail(f"With dim={dim} the scale has the right values but not a dimension of size 1 along dim: keep it for broadcasting (amax(dim=dim, keepdim=True)).",
                     f"dim={dim} 时 scale 缺少 dim 方向上大小为 1 的维度：请保留它以便广播（amax(dim=dim, keepdim=True)）。",
                     f"scale shape {tuple(sd.shape)}, expected {tuple(expected.shape)}")
            if dim >= 0 and sd.numel() == src.shape[dim]:
                fail(f"With dim={dim} the scale is taken along the wrong axis: take the amax ALONG dim (one scale per slice along dim).",
                     f"dim={dim} 时 scale 沿着错误的轴计算：应沿 dim 求 amax（沿 dim 的每个切片一个 scale）。",
                     f"scale shape {tuple(sd.shape)}, expected {tuple(expected.shape)}")
            fail(f"With dim={dim} the scale must have the shape of x with size 1 along dim (amax(dim=dim, keepdim=True)).",
                 f"dim={dim} 时 scale 的形状必须与 x 相同、只是 dim 方向上大小为 1（amax(dim=dim, keepdim=True)）。",
                 f"scale shape {tuple(sd.shape)}, expected {tuple(expected.shape)}")
        expect_close(sd.float(), expected / 127, f"With dim={dim} every scale must be the max of |x| along dim, / 127.",
                     f"dim={dim} 时每个 scale 必须是沿 dim 的 |x| 最大值除以 127。")
        _expect_rounded(qd, src, sd.float(), who)

    qc, _ = clamp
    _int8(qc, who)
    expect(int(qc.min()) >= -127 and int(qc.max()) <= 127,
           f"{who} must clamp q to [-127, 127] before .to(torch.int8): here (bfloat16 input) x / scale rounds to 128, which wraps to -128.",
           f"{who} 必须在 .to(torch.int8) 之前把 q 截断到 [-127, 127]：这里（bfloat16 输入）x / scale 取整后为 128，会回绕成 -128。",
           f"q = {qc.tolist()}")


def check_dequantize(dequantize):
    who = "dequantize"
    x = _x_with_negative_peak()
    cases = [ref.absmax_quantize(x), ref.absmax_quantize(x, dim=1), ref.absmax_quantize(x, dim=0)]
    with own_work(dequantize, who):
        outs = [call(dequantize, q.clone(), s.clone(), name=who) for q, s in cases]
    for (q, s), out in zip(cases, outs):
        expect_tensor(out, f"{who}'s result", f"{who} 的结果")
        expect(out.is_floating_point(), f"{who} must return floating-point values (q.float() * scale), not integers.",
               f"{who} 必须返回浮点数（q.float() * scale），而不是整数。", f"dtype {out.dtype}")
        expect_known(out.float(), q.float() * s, [
            (q.float() / s, "dequantize divides by the scale: it must multiply, x ~ q * scale.", "dequantize 除以了 scale：应当相乘，x ~ q * scale。"),
            (q.float() * s / 127, "dequantize divides by 127 again: the scale already holds amax / 127, so x ~ q * scale.", "dequantize 又除以了 127：scale 已经是 amax / 127，所以 x ~ q * scale。")],
            f"{who} must return q * scale, with the scale broadcast over its slice.", f"{who} 必须返回 q * scale，scale 广播到它的切片上。")
        expect(bool(((out.float() - x).abs() <= s / 2 + 1e-6).all()),
               f"Every dequantized value must be within scale / 2 of the original.", f"每个反量化后的值与原值之差必须不超过 scale / 2。")


# FP8 -----------------------------------------------------------------------------------------
def _ragged_weight(n, k, seed):
    w = randn(n, k, seed=seed) * 0.05
    w[-1, -1] = 3.0  # the loudest value sits in the ragged corner block
    w[0, 5] = -1.5   # and a negative outlier in the first block
    return w


def _fp8_error_ok(w, deq, scale_full):
    """e4m3 keeps 3 mantissa bits: relative error <= 2^-4, plus half a subnormal step near 0."""
    return bool(((deq - w).abs() <= w.abs() * 2 ** -4 + scale_full * 2 ** -10 + 1e-7).all())


def check_fp8_block_quantize(fp8_block_quantize):
    who = "fp8_block_quantize"
    cases = [((200, 300), 128), ((130, 70), 64), ((256, 128), 128)]
    weights = [_ragged_weight(n, k, 112 + i) for i, ((n, k), _) in enumerate(cases)]
    with own_work(fp8_block_quantize, who):
        outs = [call(fp8_block_quantize, w.clone(), block_size=b, name=who) for w, (_, b) in zip(weights, cases)]
    for w, ((n, k), b), out in zip(weights, cases, outs):
        expect(isinstance(out, tuple) and len(out) == 2, f"{who} must return a pair (w_fp8, scale).", f"{who} 必须返回一对 (w_fp8, scale)。")
        w_fp8, scale = out
        expect_tensor(w_fp8, f"{who}'s w_fp8", f"{who} 的 w_fp8")
        expect(w_fp8.dtype == FP8 and w_fp8.shape == w.shape,
               f"{who} must return w_fp8 as torch.float8_e4m3fn with the shape of w.", f"{who} 返回的 w_fp8 必须是 torch.float8_e4m3fn，形状与 w 相同。",
               f"dtype {w_fp8.dtype}, shape {tuple(w_fp8.shape)}")
        expect_tensor(scale, f"{who}'s scale", f"{who} 的 scale")
        blocks = (-(-n // b), -(-k // b))
        if tuple(scale.shape) == (n // b, k // b) and blocks != (n // b, k // b):
            fail(f"The blocks do not cover the ragged edge: a {n}x{k} weight needs ceil({n}/{b}) x ceil({k}/{b}) blocks, the last ones smaller.",
                 f"这些块没有覆盖不整齐的边缘：{n}x{k} 的权重需要 ceil({n}/{b}) x ceil({k}/{b}) 个块，最后的块更小。",
                 f"scale shape {tuple(scale.shape)}, expected {blocks}")
        expect(tuple(scale.shape) == blocks, f"{who} must return one scale per block: shape (ceil(N/block_size), ceil(K/block_size)).",
               f"{who} 必须每个块返回一个 scale：形状为 (ceil(N/block_size), ceil(K/block_size))。", f"scale shape {tuple(scale.shape)}, expected {blocks}")
        _, right = ref.fp8_block_quantize(w, b)
        amax = right * 448
        expect_known(scale.float(), right, [
            (amax / 127, "The FP8 scale is amax / 127, the int8 one: e4m3's largest value is 448, so scale = amax / 448.",
             "FP8 的 scale 用了 int8 的 amax / 127：e4m3 的最大值是 448，所以 scale = amax / 448。"),
            (448 / amax, "The inverse is stored: DeepSeek-V3's weight_scale_inv is amax / 448, so that w = w_fp8 * scale.",
             "存的是倒数：DeepSeek-V3 的 weight_scale_inv 是 amax / 448，这样 w = w_fp8 * scale。"),
            (torch.full_like(right, float(w.abs().max()) / 448), "Every block has the scale of the whole tensor: take the amax of each block.",
             "每个块都用了整个张量的 scale：请对每个块分别求 amax。")],
            f"Every block's scale must be the max of |w| in that block / 448.", f"每个块的 scale 必须是该块内 |w| 的最大值除以 448。", atol=1e-9)
        full = ref._expand(right, (n, k), b)
        expect(_fp8_error_ok(w, w_fp8.float() * full, full),
               f"w_fp8 * scale must give back w within FP8's rounding: divide each block by its own scale before .to(torch.float8_e4m3fn).",
               f"w_fp8 * scale 必须在 FP8 的舍入误差内还原 w：转换成 torch.float8_e4m3fn 之前，把每个块除以它自己的 scale。",
               f"largest difference {float((w_fp8.float() * full - w).abs().max()):.4g}")


def check_fp8_block_dequantize(fp8_block_dequantize):
    who = "fp8_block_dequantize"
    cases = [((200, 300), 128), ((130, 70), 64), ((64, 192), 64)]
    packed = [ref.fp8_block_quantize(_ragged_weight(n, k, 115 + i), b) for i, ((n, k), b) in enumerate(cases)]
    with own_work(fp8_block_dequantize, who):
        outs = [call(fp8_block_dequantize, q.clone(), s.clone(), block_size=b, name=who) for (q, s), (_, b) in zip(packed, cases)]
    for (q, s), (shape, b), out in zip(packed, cases, outs):
        full = ref._expand(s, shape, b)
        expect_tensor(out, f"{who}'s result", f"{who} 的结果")
        expect(out.is_floating_point() and out.dtype != FP8, f"{who} must return ordinary floating-point values (w_fp8.float() * scale).",
               f"{who} 必须返回普通浮点数（w_fp8.float() * scale）。", f"dtype {out.dtype}")
        expect_known(out.float(), q.float() * full, [
            (q.float() / full, "fp8_block_dequantize divides by the scale: weight_scale_inv is multiplied, w = w_fp8 * scale.",
             "fp8_block_dequantize 除以了 scale：weight_scale_inv 是用来乘的，w = w_fp8 * scale。")],
            f"Every element must be multiplied by the scale of ITS block (row // block_size, column // block_size), ragged edge included.",
            f"每个元素必须乘以它所在块的 scale（行 // block_size，列 // block_size），包括不整齐的边缘。")


def check_fp8_activation_quantize(fp8_activation_quantize):
    who = "fp8_activation_quantize"
    x = randn(2, 3, 256, seed=117)
    x[0, 1, :128] *= 40.0  # one token's first block is loud
    x[1, 2, 200] = -25.0   # a negative outlier in another token's second block
    y = randn(4, 192, seed=118)
    y[:, 64:128] *= 0.01   # a quiet middle block in every token
    with own_work(fp8_activation_quantize, who):
        outs = [call(fp8_activation_quantize, x.clone(), name=who), call(fp8_activation_quantize, y.clone(), block_size=64, name=who)]
    for inp, b, out in [(x, 128, outs[0]), (y, 64, outs[1])]:
        expect(isinstance(out, tuple) and len(out) == 2, f"{who} must return a pair (x_fp8, scale).", f"{who} 必须返回一对 (x_fp8, scale)。")
        x_fp8, scale = out
        expect_tensor(x_fp8, f"{who}'s x_fp8", f"{who} 的 x_fp8")
        expect(x_fp8.dtype == FP8 and x_fp8.shape == inp.shape, f"{who} must return x_fp8 as torch.float8_e4m3fn with the shape of x.",
               f"{who} 返回的 x_fp8 必须是 torch.float8_e4m3fn，形状与 x 相同。", f"dtype {x_fp8.dtype}, shape {tuple(x_fp8.shape)}")
        expect_tensor(scale, f"{who}'s scale", f"{who} 的 scale")
        want = (*inp.shape[:-1], inp.shape[-1] // b)
        if scale.numel() == 1:
            fail("The activation scale is one number for the whole tensor: DeepSeek-V3 uses one scale per token per block of block_size channels.",
                 "激活的 scale 是整个张量共用的一个数：DeepSeek-V3 对每个词元的每 block_size 个通道使用一个 scale。", f"scale shape {tuple(scale.shape)}, expected {want}")
        if scale.numel() == inp[..., 0].numel():
            fail("The activation scale is one per token: DeepSeek-V3 uses one per token AND per block of block_size channels.",
                 "激活的 scale 每个词元只有一个：DeepSeek-V3 对每个词元、每 block_size 个通道各用一个 scale。", f"scale shape {tuple(scale.shape)}, expected {want}")
        expect(tuple(scale.shape) == want, f"{who} must return scale of shape (..., K // block_size): one per token per block.",
               f"{who} 返回的 scale 形状必须是 (..., K // block_size)：每个词元每个块一个。", f"scale shape {tuple(scale.shape)}, expected {want}")
        _, right = ref.fp8_activation_quantize(inp, b)
        expect_known(scale.float(), right, [
            (right * 448 / 127, "The FP8 scale is amax / 127, the int8 one: e4m3's largest value is 448, so scale = amax / 448.",
             "FP8 的 scale 用了 int8 的 amax / 127：e4m3 的最大值是 448，所以 scale = amax / 448。"),
            (1 / right, "The inverse is stored: the scale is amax / 448, so that x = x_fp8 * scale.", "存的是倒数：scale 是 amax / 448，这样 x = x_fp8 * scale。")],
            f"Every scale must be the max of |x| over that token's block / 448.", f"每个 scale 必须是该词元该块内 |x| 的最大值除以 448。", atol=1e-9)
        full = right.repeat_interleave(b, dim=-1)
        expect(_fp8_error_ok(inp, x_fp8.float() * full, full),
               "x_fp8 * scale must give back x within FP8's rounding: divide each token's block by its own scale.",
               "x_fp8 * scale 必须在 FP8 的舍入误差内还原 x：把每个词元的每个块除以它自己的 scale。")


# int8 weight-only linear ---------------------------------------------------------------------
def _linear(d_in, d_out, bias, seed):
    # On the meta device: no random initialisation to pay for (every value is set below), and
    # unlike nn.utils.skip_init no import of sympy (0.6 s).
    layer = nn.Linear(d_in, d_out, bias=bias, device="meta")
    weight = randn(d_out, d_in, seed=seed) / d_in ** 0.5
    weight[1] *= 50.0  # one loud output channel: a per-tensor scale ruins every other row
    layer.weight = nn.Parameter(weight)
    if bias:
        layer.bias = nn.Parameter(torch.linspace(-3.0, 3.0, d_out))
    return layer


def _tensors(module):
    """Every tensor the module keeps: parameters, buffers and plain tensor attributes."""
    found = {}
    for name, m in module.named_modules():
        items = [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False),
                 *((k, v) for k, v in vars(m).items() if isinstance(v, torch.Tensor))]
        found.update({f"{name}.{k}".lstrip("."): v for k, v in items if v is not None})
    return found


def _expect_int8_storage(module, d_in, d_out, who):
    held = _tensors(module)
    expect(any(t.dtype == torch.int8 and t.numel() == d_in * d_out for t in held.values()),
           f"{who} must store the weight as a torch.int8 tensor of shape (out_features, in_features).",
           f"{who} 必须把权重存成形状为 (out_features, in_features) 的 torch.int8 张量。", f"tensors: {[(k, t.dtype) for k, t in held.items()]}")
    floats = [k for k, t in held.items() if t.is_floating_point() and t.numel() >= d_in * d_out]
    expect(not floats, f"{who} keeps a floating-point copy of the whole weight: keep only the int8 weight and its scales, or the memory saving is lost.",
           f"{who} 保留了整个权重的浮点副本：只保留 int8 权重和它的 scale，否则就省不下内存。", f"float tensors {floats}")


def _reference_linear(linear, x, per_channel=True, bias=True):
    q, s = ref.absmax_quantize(linear.weight.detach(), dim=-1 if per_channel else None)
    y = x @ (q.float() * s).T
    return y + linear.bias.detach() if bias and linear.bias is not None else y


def _expect_like_linear(out, x, linear, who, slack=0.02):
    """Per output channel within `slack` of that channel's largest output (bfloat16 activations allowed)."""
    right = _reference_linear(linear, x)
    expect_tensor(out, f"{who}'s output", f"{who} 的输出")
    expect(out.shape == right.shape and out.dtype == x.dtype, f"{who} must map (..., in_features) to (..., out_features) in the dtype of the input.",
           f"{who} 必须把 (..., in_features) 映射为 (..., out_features)，dtype 与输入相同。",
           f"shape {tuple(out.shape)} {out.dtype}, expected {tuple(right.shape)} {x.dtype}")
    tol = slack * right.abs().flatten(0, -2).amax(0) + 1e-3
    close = lambda y: bool(((y.detach().float() - right).abs() <= tol).all()) if y is not right else True
    if close(out):
        return
    mistakes = [(_reference_linear(linear, x, bias=False), "the bias is dropped: add the layer's bias after the matmul", "偏置被丢掉了：在矩阵乘法之后加上该层的偏置"),
                (_reference_linear(linear, x, per_channel=False), "one scale for the whole weight: one loud output channel ruins the others, use one scale per output channel (amax along the input features)",
                 "整个权重只用了一个 scale：一个很大的输出通道毁掉了其余通道，请每个输出通道一个 scale（沿输入特征求 amax）")]
    for wrong, en, zh in mistakes:
        if close(wrong) or bool(((out.detach().float() - wrong).abs() <= tol).all()):
            fail(f"{who} is wrong: {en}.", f"{who} 不对：{zh}。")
    fail(f"{who} must compute x W^T + b with W = int8 weight * per-output-channel scale.",
         f"{who} 必须计算 x W^T + b，其中 W = int8 权重 * 每个输出通道的 scale。", f"largest difference {float((out.detach().float() - right).abs().max()):.4g}")


BIG = 4096   # the timed layer: its float32 weight (64 MB) must come from memory, its int8 one is 16 MB
SLACK = 1.5  # on one thread of a CPU without int8 dot products the kernel only matches float32


class _FloatsAsLargeAsTheWeight(TorchFunctionMode):
    """Records every floating-point tensor of at least `limit` elements that a torch call returns."""

    def __init__(self, limit):
        super().__init__()
        self.limit, self.found = limit, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() >= self.limit:
                self.found.append(f"{getattr(func, '__name__', func)}: {tuple(t.shape)} {t.dtype}")
        return out


def _best_times(fast, slow, x, rounds):
    """One thread: on a busy machine a multi-threaded kernel waits for its second thread at every call."""
    best, threads = [float("inf"), float("inf")], torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _time_rounds(fast, slow, x, rounds, best)
    finally:
        torch.set_num_threads(threads)
    return best


def _time_rounds(fast, slow, x, rounds, best):
    with torch.inference_mode():
        for fn in (fast, slow):
            fn(x)
        for _ in range(rounds):  # interleaved: a busy moment slows both alike; the best round is the quiet one
            for i, fn in enumerate((fast, slow)):
                start = time.perf_counter()
                fn(x); fn(x)
                best[i] = min(best[i], time.perf_counter() - start)
            if best[0] > 3 * best[1]:  # hopeless: stop early, a slow forward would only burn the time limit
                return


def check_Int8WeightOnlyLinear(Int8WeightOnlyLinear):
    who = "Int8WeightOnlyLinear"
    with own_work(Int8WeightOnlyLinear, who):
        try:  # the notebook's constructor; another signature is fine, wrapping the course's class is not
            Int8WeightOnlyLinear(64, 48)
        except Shortcut:
            raise
        except Exception:
            pass
        expect(isinstance(Int8WeightOnlyLinear, type) and issubclass(Int8WeightOnlyLinear, nn.Module) and hasattr(Int8WeightOnlyLinear, "from_linear"),
               f"{who} must be an nn.Module subclass with a classmethod from_linear(linear).", f"{who} 必须是 nn.Module 的子类，并带有类方法 from_linear(linear)。")
        for d_in, d_out, bias, seed in [(64, 48, True, 120), (32, 24, False, 121)]:
            linear = _linear(d_in, d_out, bias, seed)
            layer = call(Int8WeightOnlyLinear.from_linear, linear, name=f"{who}.from_linear")
            expect(isinstance(layer, Int8WeightOnlyLinear), f"{who}.from_linear(linear) must return an {who}.",
                   f"{who}.from_linear(linear) 必须返回一个 {who}。", f"got {type(layer).__name__}")
            _expect_int8_storage(layer, d_in, d_out, who)
            x = randn(3, 5, d_in, seed=seed + 10)
            with torch.no_grad():
                out = call(layer, x, name=f"{who}.forward")
            _expect_like_linear(out, x, linear, who)
        big = _linear(BIG, BIG, True, 122)  # float32 64 MB: more than a CPU's last-level cache
        fast = call(Int8WeightOnlyLinear.from_linear, big, name=f"{who}.from_linear")
        x = randn(1, BIG, seed=123)
        with torch.no_grad(), _FloatsAsLargeAsTheWeight(BIG * BIG // 2) as seen:
            call(fast, x, name=f"{who}.forward")
        expect(not seen.found, f"{who}'s forward dequantizes the whole weight at every call (it builds a float tensor as large as the weight), which reads more memory than the float32 layer: multiply with the int8 weight directly (torch._weight_int8pack_mm on bfloat16 activations).",
               f"{who} 的 forward 每次调用都把整个权重反量化（构造了与权重一样大的浮点张量），读取的内存比 float32 层还多：请直接用 int8 权重做乘法（对 bfloat16 激活调用 torch._weight_int8pack_mm）。",
               f"float tensors made: {seen.found[:3]}")
        for rounds in (10, 30):  # a second, longer try before calling it slow
            t_int8, t_float = _best_times(fast, big, x, rounds)
            if t_int8 < SLACK * t_float:
                return
            if t_int8 > 3 * t_float:
                break
    fail(f"{who}'s forward is far slower than the float32 nn.Linear: multiply with the int8 weight directly (torch._weight_int8pack_mm on bfloat16 activations), without Python loops.",
         f"{who} 的 forward 比 float32 的 nn.Linear 慢得多：请直接用 int8 权重做乘法（对 bfloat16 激活调用 torch._weight_int8pack_mm），不要用 Python 循环。",
         f"best of {rounds} rounds: int8 {1e3 * t_int8:.2f} ms, float32 {1e3 * t_float:.2f} ms for 2 calls at {BIG}x{BIG}")


class _Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, x):
        return self.proj(x)


class _Probe(nn.Module):
    """Linears at the top, in a ModuleList of Sequentials, in a ModuleDict and in a custom module."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 32, bias=False)) for _ in range(2))
        self.mixer = nn.ModuleDict({"inner": _Inner()})
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, 24)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = x + block(x)
        x = x + self.mixer["inner"](x)
        return self.head(self.norm(x))


def _probe(seed):
    model = _Probe()
    g = generator(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) / (p.shape[-1] ** 0.5 if p.dim() > 1 else 4) + (1.0 if "norm.weight" in name else 0.0))
    return model.eval()


def check_quantize_model_(quantize_model_):
    who = "quantize_model_"
    model, x = _probe(124), randn(3, 16, seed=125)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        expected = model(x)
    norm = model.norm
    with own_work(quantize_model_, who):
        returned = call(quantize_model_, model, name=who)
        expect(returned is model, f"{who} must change the model in place and return that same model.",
               f"{who} 必须原地修改模型，并返回同一个模型。", f"returned {type(returned).__name__}")
        left = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
        expect(not left, f"{who} misses nested nn.Linear layers: walk every submodule (named_modules or recursion over children), not just the top level.",
               f"{who} 漏掉了嵌套的 nn.Linear 层：请遍历所有子模块（named_modules 或对 children 递归），而不只是顶层。", f"still nn.Linear: {left}")
        for n in names:
            expect(any(t.dtype == torch.int8 for t in _tensors(model.get_submodule(n)).values()),
                   f"{who} must replace every nn.Linear by an int8 layer (your Int8WeightOnlyLinear.from_linear).",
                   f"{who} 必须把每个 nn.Linear 替换成 int8 层（你的 Int8WeightOnlyLinear.from_linear）。", f"{n} holds no int8 tensor")
        expect(model.norm is norm, f"{who} must leave modules other than nn.Linear as they are.", f"{who} 必须保持 nn.Linear 以外的模块不变。")
        with torch.no_grad():
            out = call(model, x, name="the quantized model")
        tol = 0.05 * expected.abs().max() + 1e-3  # six int8 layers with bfloat16 activations
        expect(out.shape == expected.shape and bool(((out.float() - expected).abs() <= tol).all()),
               f"After {who} the model's output must stay close to the float32 model's: check Int8WeightOnlyLinear first.",
               f"{who} 之后模型的输出必须与 float32 模型的接近：请先检查 Int8WeightOnlyLinear。",
               f"largest difference {float((out.float() - expected).abs().max()):.4g}")
        kept = _probe(126)
        try:
            quantize_model_(kept, skip=("head",))
        except TypeError as e:
            fail(f"{who} must accept skip=(names,): the names in model.named_modules() of the linears to keep in float.",
                 f"{who} 必须接受 skip=(names,)：要保留为浮点的线性层在 model.named_modules() 中的名字。", f"TypeError: {e}")
    expect(type(kept.head) is nn.Linear, f"{who} quantizes the output head when told not to: leave the linears named in skip as they are.",
           f"{who} 在被要求跳过时仍量化了输出头：请保留 skip 中列出名字的线性层。", f"head is {type(kept.head).__name__}")
    left = [n for n, m in kept.named_modules() if isinstance(m, nn.Linear)]
    expect(left == ["head"], f"With skip=('head',) {who} must still replace every other nn.Linear.",
           f"skip=('head',) 时 {who} 仍必须替换其余每个 nn.Linear。", f"still nn.Linear: {left}")
