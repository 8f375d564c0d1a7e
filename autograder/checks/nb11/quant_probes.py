"""Inputs and shared judgements of notebook 11's quantizer checks (absmax int8, FP8 blocks and tiles).

The traps built here: the largest magnitude is a negative number (max is not max |x|), a
bfloat16 tensor whose largest value rounds to 128 without clamping, bfloat16 inputs on which
bfloat16 arithmetic gives other scales and integers than the prescribed float32, all-zero
slices, blocks and tiles (amax = 0, so an unguarded x / scale is 0 / 0 = NaN), weights whose
sides are not multiples of the block (a ragged edge holding the largest values).

Decisions: any guard of the zero slice is accepted (DeepSeek's amax floor of 1e-4, a tiny
epsilon, torch.where, nan_to_num): its scale must be finite and its integers 0, and no step of
the computation may produce NaN. Probes keep every other slice's amax far above 1e-4, where all
these guards give the same scale.
"""

import torch
from torch.overrides import TorchFunctionMode

from autograder.checks import call, expect, expect_close, expect_known, expect_tensor, fail, randn

FP8 = torch.float8_e4m3fn


def x_with_negative_peak():
    x = randn(5, 7, seed=110)
    x[2, 3] = -4.0  # the largest magnitude is negative; row 2 is loud
    return x


def bf16_input(shape, seed):
    """bfloat16 values spread over [-3, 3]: most x / scale land between two bfloat16 numbers."""
    return (randn(*shape, seed=seed) * 1.5).to(torch.bfloat16)


def expect_int8(q, who):
    expect_tensor(q, f"{who}'s q", f"{who} 的 q")
    expect(q.dtype == torch.int8, f"{who} must return q as torch.int8 (.to(torch.int8) after rounding and clamping).",
           f"{who} 返回的 q 必须是 torch.int8（取整并限制（clamp）到范围后再 .to(torch.int8)）。", f"dtype {q.dtype}")


def expect_rounded(q, x, scale, who, share=0.05):
    """q must be round(x / scale): at most `share` ties differ by 1; truncation and floor are named."""
    ratio = x.double() / scale.double()
    qd = q.double()
    for wrong, en, zh in [(ratio.trunc(), "rounds by truncation (toward zero): use torch.round", "用截断（向零取整）代替了四舍五入：请使用 torch.round"),
                          (ratio.floor(), "rounds down (floor): use torch.round", "向下取整（floor）了：请使用 torch.round")]:
        if torch.equal(qd, wrong) and not torch.equal(wrong, ratio.round()):
            fail(f"{who} {en}.", f"{who} {zh}。")
    off = (qd - ratio.round().clamp(-127, 127)).abs()
    expect(off.max() <= 1 and (off > 0).float().mean() <= share,
           f"{who}'s q must be round(x / scale), clamped to [-127, 127].",
           f"{who} 的 q 必须是 round(x / scale)，并限制（clamp）到 [-127, 127]。", f"largest difference {float(off.max())}, "
           f"{float((off > 0).float().mean()):.1%} of the values differ")


def bf16_mistake(right, what_en, what_zh):
    """(output, en, zh) of a scale computed in bfloat16 instead of float32."""
    return (right.to(torch.bfloat16).float(),
            f"The {what_en} is computed in bfloat16: compute in float32 (x.float() first), as the exercise says; bfloat16 keeps 8 significant bits.",
            f"{what_zh}是用 bfloat16 计算的：请按练习要求用 float32 计算（先 x.float()）；bfloat16 只有 8 位有效数字。")


def expect_scale_in_float32(scale, right, what_en, what_zh, who):
    """A scale from a bfloat16 input must equal the one computed in float32."""
    expect_known(scale.float(), right, [bf16_mistake(right, what_en, what_zh)],
                 f"{who}'s {what_en} of a bfloat16 input must be computed in float32.", f"{who} 对 bfloat16 输入的{what_zh}必须用 float32 计算。",
                 atol=1e-9)


# absmax int8 ----------------------------------------------------------------------------------
def scale_mistakes(x, amax):
    return [
        (x.max() / 127, "The scale comes from max(x), which misses a large negative value: use the max of ABSOLUTE values, x.abs().amax().",
         "scale 来自 max(x)，漏掉了绝对值很大的负数：请用绝对值的最大值 x.abs().amax()。"),
        (x.abs().mean() / 127, "The scale comes from the mean of |x|: absmax uses the MAXIMUM of |x|, so that no value overflows.",
         "scale 来自 |x| 的平均值：absmax 用的是 |x| 的最大值，这样才不会有值溢出。"),
        (127 / amax, "The scale is inverted: scale = amax / 127, and q = round(x / scale).", "scale 颠倒了：scale = amax / 127，q = round(x / scale)。"),
        (amax / 128, "Symmetric int8 uses [-127, 127]: scale = amax / 127, not / 128.", "对称 int8 使用 [-127, 127]：scale = amax / 127，而不是 / 128。"),
        (amax / 255, "Symmetric int8 uses [-127, 127]: scale = amax / 127, not / 255.", "对称 int8 使用 [-127, 127]：scale = amax / 127，而不是 / 255。")]


def expect_dim_scale(sd, expected, src, dim, who):
    if sd.shape != expected.shape:
        other = 1 - dim if dim >= 0 else 0
        evidence = f"scale shape {tuple(sd.shape)}, expected {tuple(expected.shape)}"
        if dim >= 0 and sd.numel() == src.shape[other]:
            fail(f"With dim={dim} the scale has the right values but not a dimension of size 1 along dim: keep it for broadcasting (amax(dim=dim, keepdim=True)).",
                 f"dim={dim} 时 scale 缺少 dim 方向上大小为 1 的维度：请保留它以便广播（amax(dim=dim, keepdim=True)）。", evidence)
        if dim >= 0 and sd.numel() == src.shape[dim]:
            fail(f"With dim={dim} the scale is taken along the wrong axis: take the amax ALONG dim (one scale per slice along dim).",
                 f"dim={dim} 时 scale 沿着错误的轴计算：应沿 dim 求 amax（沿 dim 的每个切片一个 scale）。", evidence)
        fail(f"With dim={dim} the scale must have the shape of x with size 1 along dim (amax(dim=dim, keepdim=True)).",
             f"dim={dim} 时 scale 的形状必须与 x 相同、只是 dim 方向上大小为 1（amax(dim=dim, keepdim=True)）。", evidence)
    expect_close(sd.float(), expected / 127, f"With dim={dim} every scale must be the max of |x| along dim, / 127.",
                 f"dim={dim} 时每个 scale 必须是沿 dim 的 |x| 最大值除以 127。")


# FP8 ------------------------------------------------------------------------------------------
def ragged_weight(n, k, seed, zero_block=None):
    w = randn(n, k, seed=seed) * 0.05
    w[-1, -1] = 3.0  # the loudest value sits in the ragged corner block
    w[0, 5] = -1.5   # and a negative outlier in the first block
    if zero_block:   # an all-zero block (a pruned piece of the weight): amax 0
        (r0, r1), (c0, c1) = zero_block
        w[r0:r1, c0:c1] = 0.0
    return w


def fp8_error_ok(w, deq, scale_full):
    """e4m3 keeps 3 mantissa bits: relative error <= 2^-4, plus half a subnormal step near 0."""
    return bool(((deq - w).abs() <= w.abs() * 2 ** -4 + scale_full * 2 ** -10 + 1e-7).all())


def fp8_scale_mistakes(right, amax, w):
    return [(amax / 127, "The FP8 scale is amax / 127, the int8 one: e4m3's largest value is 448, so scale = amax / 448.",
             "FP8 的 scale 用了 int8 的 amax / 127：e4m3 的最大值是 448，所以 scale = amax / 448。"),
            (448 / amax, "The inverse is stored: DeepSeek-V3's weight_scale_inv is amax / 448, so that w = w_fp8 * scale.",
             "存的是倒数：DeepSeek-V3 的 weight_scale_inv 是 amax / 448，这样 w = w_fp8 * scale。"),
            (torch.full_like(right, float(w.abs().max()) / 448), "Every block has the scale of the whole tensor: take the amax of each block.",
             "每个块都用了整个张量的 scale：请对每个块分别求 amax。")]


def expect_fp8_pair(out, like, who, name):
    expect(isinstance(out, tuple) and len(out) == 2, f"{who} must return a pair ({name}, scale).", f"{who} 必须返回一对 ({name}, scale)。")
    q, scale = out
    expect_tensor(q, f"{who}'s {name}", f"{who} 的 {name}")
    expect(q.dtype == FP8 and q.shape == like.shape, f"{who} must return {name} as torch.float8_e4m3fn with the shape of its input.",
           f"{who} 返回的 {name} 必须是 torch.float8_e4m3fn，形状与输入相同。", f"dtype {q.dtype}, shape {tuple(q.shape)}")
    expect_tensor(scale, f"{who}'s scale", f"{who} 的 scale")
    return q, scale


def activations():
    x = randn(2, 3, 256, seed=117)
    x[0, 1, :128] *= 40.0  # one token's first block is loud
    x[1, 2, 200] = -25.0   # a negative outlier in another token's second block
    x[1, 0] = 0.0          # a padding token: every tile zero
    y = randn(4, 192, seed=118)
    y[:, 64:128] *= 0.01   # a quiet middle block in every token
    return x, y


# all-zero slices: 0 / 0 ----------------------------------------------------------------------
class NaNWatch(TorchFunctionMode):
    """Records the torch calls (tensor methods included) that convert a tensor holding NaN into
    integers or FP8: int8 has no NaN (what NaN becomes is undefined), FP8 keeps it."""

    def __init__(self):
        super().__init__()
        self.found = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        src = args[0] if args else None
        out = func(*args, **(kwargs or {}))
        if (isinstance(src, torch.Tensor) and src.is_floating_point() and src.dtype != FP8 and isinstance(out, torch.Tensor)
                and (not out.is_floating_point() or out.dtype == FP8) and bool(src.isnan().any())):
            self.found.append(getattr(func, "__name__", str(func)))
        return out


def zero_message(who, what_en, what_zh):
    return (f"{who} turns an all-zero {what_en} into NaN: its amax is 0, so x / scale is 0 / 0. Clamp amax to a small floor before dividing "
            f"(amax.clamp(min=1e-4), as DeepSeek's act_quant does), so that the {what_en} gets q = 0.",
            f"{who} 把全零的{what_zh}变成了 NaN：它的 amax 为 0，x / scale 就是 0 / 0。请在相除之前把 amax 限制（clamp）到一个小的下限"
            f"（amax.clamp(min=1e-4)，DeepSeek 的 act_quant 就是这样做的），让这个{what_zh}得到 q = 0。")


def call_watching_nan(fn, *args, name, **kwargs):
    """Call the learner's quantizer; returns (output, names of the calls that made a NaN)."""
    with NaNWatch() as watch:
        out = call(fn, *args, name=name, **kwargs)
    return out, watch.found


def expect_zero_guarded(q, scale, zero_q, zero_scale, made_nan, who, what_en, what_zh):
    """The zero slice: no NaN made on the way, a finite scale, q = 0 there, and no NaN anywhere."""
    en, zh = zero_message(who, what_en, what_zh)
    nan_q = bool(q.float().isnan().any()) if q.is_floating_point() else False
    expect(not made_nan and not nan_q and bool(torch.isfinite(scale.float()).all()), en, zh,
           f"NaN made by {made_nan[:3]}" if made_nan else f"scale of the zero {what_en}: {zero_scale.flatten()[:4].tolist()}")
    expect(bool((zero_q.float() == 0).all()), en, zh, f"q of the zero {what_en}: {zero_q.float().flatten()[:6].tolist()}")




# a scale that differs: the words (nb11/contract.py compares scales relative to their size) -------
def added_to_amax(scale, right, top):
    """c when scale * top = right * top + c everywhere (a floor added to amax, not clamped), else None."""
    got, want = scale.detach().double().flatten() * top, right.detach().double().flatten() * top
    if got.shape != want.shape or not got.numel():
        return None
    added, rounding = got - want, 8 * 2 ** -23 * float(want.abs().max())  # float32's rounding of the largest amax
    c = float(added.mean())
    return c if abs(c) > 2 * rounding and float((added - c).abs().max()) <= 1e-2 * abs(c) + rounding else None


def added_message(who, top, c, en_on="", zh_on=""):
    return (f"{who}'s scale is (amax + {c:.2g}) / {top}{en_on}: a constant added to amax shows on a slice whose amax is small. "
            f"Clamp amax instead (amax.clamp(min=1e-4)): every slice whose amax is at least 1e-4 gets exactly amax / {top}.",
            f"{who} 的 scale 是 (amax + {c:.2g}) / {top}{zh_on}：加到 amax 上的常数在 amax 很小的切片上会显现出来。"
            f"请改为限制 amax（amax.clamp(min=1e-4)）：amax 至少为 1e-4 的每个切片的 scale 都必须恰好是 amax / {top}。")


def expect_no_added_floor(scale, right, top, who):
    """A hand-written check's scales, where they are not right: named when amax got a constant added."""
    if torch.allclose(scale.double(), right.double(), atol=1e-9, rtol=1e-4):
        return
    if (c := added_to_amax(scale, right, top)) is not None:
        fail(*added_message(who, top, c))


def scale_first(out):
    """(scale, codes) of a quantizer's (codes, scale): the harness compares the scale first, so that a
    wrong scale is named as one and not by the codes it moves."""
    return (out[1], out[0]) if isinstance(out, (tuple, list)) and len(out) == 2 else out


def explain_scale(who, top):
    """explain(probe, out, expected) for a quantizer's (scale, codes) (scale_first): a negative
    scale (max without abs), a constant added to amax, other scales; codes of a right scale."""
    from autograder.checks.core.comparisons import _where

    def explain(probe, out, expected):
        if not (isinstance(out, torch.Tensor) and isinstance(expected, torch.Tensor) and out.shape == expected.shape):
            return None
        en_on, zh_on = _where(probe)
        if expected.dtype in (torch.int8, FP8):
            return (f"{who}'s codes differ from the course's{en_on}, its scales being right: each value divided by the scale of its slice "
                    f"in float32, {'rounded with torch.round and clamped to [-127, 127]' if expected.dtype == torch.int8 else 'clamped to [-448, 448], then .to(torch.float8_e4m3fn)'}.",
                    f"{who} 的编码与课程的不同{zh_on}（scale 是对的）：每个值在 float32 中除以所在切片的 scale，"
                    f"{'用 torch.round 取整并限制到 [-127, 127]' if expected.dtype == torch.int8 else '限制到 [-448, 448]，再 .to(torch.float8_e4m3fn)'}。")
        if not out.is_floating_point() or out.dtype == FP8:
            return None
        if bool((out.detach() < 0).any()):
            return (f"{who}'s scales must be positive{en_on}: amax is the max of ABSOLUTE values (abs before the max).",
                    f"{who} 的 scale 必须为正{zh_on}：amax 是绝对值的最大值（先取 abs 再求最大值）。")
        if (c := added_to_amax(out, expected, top)) is not None:
            return added_message(who, top, c, en_on, zh_on)
        return (f"{who}'s scale differs from the course's{en_on} (compared relative to its size): each scale is the max of |x| over its slice "
                f"/ {top}, computed in float32.",
                f"{who} 的 scale 与课程的不同{zh_on}（按相对于其大小的误差比较）：每个 scale 都是其切片内 |x| 的最大值除以 {top}，用 float32 计算。")
    return explain
