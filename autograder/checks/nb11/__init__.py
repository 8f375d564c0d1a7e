"""Hidden checks of notebook 11, quantized inference.

The inputs and their traps are built in `quant_probes` (quantizers) and `int8_layers` (the int8
layer and quantize_model_), with the decisions each one takes; the harness's families are in
`nb11/contract.py`, and what it compares of the int8 layer and of quantize_model_ in `int8_views`.

Decisions: `absmax_quantize(x, dim)` takes the amax ALONG `dim` (x.abs().amax(dim, keepdim=True)),
so a weight (out, in) gets one scale per output channel with dim=-1; it, the FP8 quantizers and
dequantize compute in float32 (a bfloat16 input is checked). An all-zero slice, block or tile
must come out as q = 0 with a finite scale, whichever guard does it. `quantize_model_(model,
skip=())` leaves the nn.Linear layers whose full dotted name in model.named_modules() is in
`skip`. A later exercise is graded with the course's version of the earlier one it uses
(Int8WeightOnlyLinear with the course's absmax_quantize, quantize_model_ with the course's
Int8WeightOnlyLinear), so a mistake costs points once, where it is made.
"""
import torch
from torch import nn

import utils.quantize as ref
from autograder.checks import graded_checks, Shortcut, call, course_runs, course_versions, expect, expect_known, expect_tensor, fail, own_work, randn
from autograder.checks.nb11 import int8_layers as il
from autograder.checks.nb11 import int8_views as iv
from autograder.checks.nb11.contract import FAMILIES
from autograder.checks.core.harness import same_as_reference
from autograder.checks.nb11 import quant_probes as qp

FP8 = qp.FP8


def check_absmax_quantize(absmax_quantize):
    who, x = "absmax_quantize", qp.x_with_negative_peak()
    x3, half = randn(2, 3, 16, seed=111), qp.bf16_input((64,), seed=119)
    peak = torch.tensor([[2.6875, -1.0, 0.5], [0.25, 0.125, -2.0]], dtype=torch.bfloat16)
    zero_row = x.clone()
    zero_row[1] = 0.0
    with own_work(absmax_quantize, who):
        whole = call(absmax_quantize, x.clone(), name=who)
        by_dim = [(call(absmax_quantize, src.clone(), dim=d, name=who), src, d) for src, d in [(x, 1), (x, 0), (x3, -1)]]
        clamp = call(absmax_quantize, peak.clone(), name=who)
        in_bf16 = call(absmax_quantize, half.clone(), name=who)
        zero_rows, nan_rows = qp.call_watching_nan(absmax_quantize, zero_row.clone(), dim=1, name=who)
        zeros, nan_all = qp.call_watching_nan(absmax_quantize, torch.zeros(3, 4), name=who)
    expect(isinstance(whole, tuple) and len(whole) == 2, f"{who} must return a pair (q, scale).", f"{who} 必须返回一对 (q, scale)。")
    q, scale = whole
    qp.expect_int8(q, who)
    expect_tensor(scale, f"{who}'s scale", f"{who} 的 scale")
    expect(scale.numel() == 1, f"Without dim, {who} must use one scale for the whole tensor.",
           f"没有 dim 时，{who} 必须对整个张量使用一个 scale。", f"scale shape {tuple(scale.shape)}")
    amax = x.abs().max()
    expect_known(scale.reshape(()).float(), amax / 127, qp.scale_mistakes(x, amax),
                 f"{who}'s scale must be max(|x|) / 127.", f"{who} 的 scale 必须是 max(|x|) / 127。", atol=1e-9)
    qp.expect_rounded(q, x, scale.reshape(()).float(), who)
    for (qd, sd), src, dim in by_dim:
        qp.expect_int8(qd, who)
        expect_tensor(sd, f"{who}'s scale", f"{who} 的 scale")
        qp.expect_dim_scale(sd, src.abs().amax(dim, keepdim=True), src, dim, who)
        qp.expect_rounded(qd, src, sd.float(), who)

    qc, _ = clamp
    qp.expect_int8(qc, who)
    expect(int(qc.min()) >= -127 and int(qc.max()) <= 127,
           f"{who} must clamp q to [-127, 127] before .to(torch.int8): here (bfloat16 arithmetic) x / scale rounds to 128, which wraps to -128.",
           f"{who} 必须在 .to(torch.int8) 之前把 q 限制（clamp）到 [-127, 127]：这里（bfloat16 运算）x / scale 取整后为 128，会回绕成 -128。",
           f"q = {qc.tolist()}")
    qh, sh = in_bf16
    right = half.float().abs().amax() / 127
    qp.expect_scale_in_float32(sh.reshape(()), right, "scale", "scale", who)
    qp.expect_rounded(qh, half.float(), right, who, share=0.01)
    for (qz, sz), made_nan, zero_q, zero_s, what in [(zero_rows, nan_rows, lambda q: q[1], lambda s: s[1], ("row", "行")),
                                                    (zeros, nan_all, lambda q: q, lambda s: s, ("tensor", "张量"))]:
        qp.expect_zero_guarded(qz, sz, zero_q(qz), zero_s(sz), made_nan, who, *what)
    with own_work(absmax_quantize, "absmax_quantize"):
        same_as_reference(absmax_quantize, ref.absmax_quantize, FAMILIES["absmax_quantize"], "absmax_quantize",
                          explain=qp.explain_scale("absmax_quantize", 127), view=qp.scale_first)


def check_dequantize(dequantize):
    who = "dequantize"
    x = qp.x_with_negative_peak()
    cases = [ref.absmax_quantize(x), ref.absmax_quantize(x, dim=1), ref.absmax_quantize(x, dim=0)]
    with own_work(dequantize, who):
        outs = [call(dequantize, q.clone(), s.clone(), name=who) for q, s in cases]
    for (q, s), out in zip(cases, outs):
        expect_tensor(out, f"{who}'s result", f"{who} 的结果")
        expect(out.is_floating_point(), f"{who} must return floating-point values (q.float() * scale), not integers.",
               f"{who} 必须返回浮点数（q.float() * scale），而不是整数。", f"dtype {out.dtype}")
        expect(out.dtype in (torch.float32, torch.float64), f"{who} returns {out.dtype}: compute in float32 (q.float() * scale); a 16-bit float keeps only 8 or 11 significant bits.",
               f"{who} 返回的是 {out.dtype}：请用 float32 计算（q.float() * scale）；16 位浮点数只有 8 或 11 位有效数字。", f"dtype {out.dtype}")
        expect_known(out.float(), q.float() * s, [
            (q.float() / s, "dequantize divides by the scale: it must multiply, x ~ q * scale.", "dequantize 除以了 scale：应当相乘，x ~ q * scale。"),
            (q.float() * s / 127, "dequantize divides by 127 again: the scale already holds amax / 127, so x ~ q * scale.", "dequantize 又除以了 127：scale 已经是 amax / 127，所以 x ~ q * scale。")],
            f"{who} must return q * scale, with the scale broadcast over its slice.", f"{who} 必须返回 q * scale，scale 广播到它的切片上。")
        expect(bool(((out.float() - x).abs() <= s / 2 + 1e-6).all()),
               "Every dequantized value must be within scale / 2 of the original.", "每个反量化后的值与原值之差必须不超过 scale / 2。")
    with own_work(dequantize, "dequantize"):
        same_as_reference(dequantize, ref.dequantize, FAMILIES["dequantize"], "dequantize")


# FP8 -----------------------------------------------------------------------------------------
def check_fp8_block_quantize(fp8_block_quantize):
    who = "fp8_block_quantize"
    cases = [((200, 300), 128, ((0, 128), (128, 256))), ((130, 70), 64, None), ((256, 128), 128, None), ((96, 40), 64, None)]
    weights = [qp.ragged_weight(n, k, 112 + i, zero) for i, ((n, k), _, zero) in enumerate(cases)]
    half = qp.bf16_input((64, 96), seed=116)
    with own_work(fp8_block_quantize, who):
        outs = [qp.call_watching_nan(fp8_block_quantize, w.clone(), block_size=b, name=who) for w, (_, b, _) in zip(weights, cases)]
        in_bf16 = call(fp8_block_quantize, half.clone(), block_size=32, name=who)
    for w, ((n, k), b, zero), (out, made_nan) in zip(weights, cases, outs):
        w_fp8, scale = qp.expect_fp8_pair(out, w, who, "w_fp8")
        blocks = (-(-n // b), -(-k // b))
        if tuple(scale.shape) == (n // b, k // b) and blocks != (n // b, k // b):
            fail(f"The blocks do not cover the ragged edge: a {n}x{k} weight needs ceil({n}/{b}) x ceil({k}/{b}) blocks, the last ones smaller.",
                 f"这些块没有覆盖不整齐的边缘：{n}x{k} 的权重需要 ceil({n}/{b}) x ceil({k}/{b}) 个块，最后的块更小。",
                 f"scale shape {tuple(scale.shape)}, expected {blocks}")
        expect(tuple(scale.shape) == blocks, f"{who} must return one scale per block: shape (ceil(N/block_size), ceil(K/block_size)).",
               f"{who} 必须每个块返回一个 scale：形状为 (ceil(N/block_size), ceil(K/block_size))。", f"scale shape {tuple(scale.shape)}, expected {blocks}")
        if zero:
            (r0, r1), (c0, c1) = zero
            qp.expect_zero_guarded(w_fp8, scale, w_fp8[r0:r1, c0:c1], scale[r0 // b, c0 // b], made_nan, who, "block", "块")
        _, right = ref.fp8_block_quantize(w, b)
        live = right * 448 > 2 * ref.AMAX_FLOOR  # the zero block's scale is any guard's choice
        amax = right * 448
        qp.expect_no_added_floor(scale.float()[live], right[live], 448, who)
        expect_known(scale.float()[live], right[live], [(m[live], en, zh) for m, en, zh in qp.fp8_scale_mistakes(right, amax, w)],
                     "Every block's scale must be the max of |w| in that block / 448.", "每个块的 scale 必须是该块内 |w| 的最大值除以 448。", atol=1e-9)
        full = ref._expand(right, (n, k), b)
        expect(qp.fp8_error_ok(w, w_fp8.float() * full, full),
               "w_fp8 * scale must give back w within FP8's rounding: divide each block by its own scale before .to(torch.float8_e4m3fn).",
               "w_fp8 * scale 必须在 FP8 的舍入误差内还原 w：转换成 torch.float8_e4m3fn 之前，把每个块除以它自己的 scale。",
               f"largest difference {float((w_fp8.float() * full - w).abs().max()):.4g}")
    qp.expect_scale_in_float32(qp.expect_fp8_pair(in_bf16, half, who, "w_fp8")[1], ref.fp8_block_quantize(half, 32)[1], "scale", "scale", who)
    with own_work(fp8_block_quantize, "fp8_block_quantize"):
        same_as_reference(fp8_block_quantize, ref.fp8_block_quantize, FAMILIES["fp8_block_quantize"], "fp8_block_quantize",
                          explain=qp.explain_scale("fp8_block_quantize", 448), view=qp.scale_first)


def check_fp8_block_dequantize(fp8_block_dequantize):
    who = "fp8_block_dequantize"
    cases = [((200, 300), 128), ((130, 70), 64), ((64, 192), 64)]
    packed = [ref.fp8_block_quantize(qp.ragged_weight(n, k, 115 + i), b) for i, ((n, k), b) in enumerate(cases)]
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
            "Every element must be multiplied by the scale of ITS block (row // block_size, column // block_size), ragged edge included.",
            "每个元素必须乘以它所在块的 scale（行 // block_size，列 // block_size），包括不整齐的边缘。")
    with own_work(fp8_block_dequantize, "fp8_block_dequantize"):
        same_as_reference(fp8_block_dequantize, ref.fp8_block_dequantize, FAMILIES["fp8_block_dequantize"], "fp8_block_dequantize")


def check_fp8_activation_quantize(fp8_activation_quantize):
    who = "fp8_activation_quantize"
    x, y = qp.activations()
    half = qp.bf16_input((5, 64), seed=119)
    with own_work(fp8_activation_quantize, who):
        outs = [qp.call_watching_nan(fp8_activation_quantize, x.clone(), name=who),
                qp.call_watching_nan(fp8_activation_quantize, y.clone(), block_size=64, name=who)]
        in_bf16 = call(fp8_activation_quantize, half.clone(), block_size=32, name=who)
    for inp, b, (out, made_nan) in [(x, 128, outs[0]), (y, 64, outs[1])]:
        x_fp8, scale = qp.expect_fp8_pair(out, inp, who, "x_fp8")
        want = (*inp.shape[:-1], inp.shape[-1] // b)
        evidence = f"scale shape {tuple(scale.shape)}, expected {want}"
        if scale.numel() == 1:
            fail("The activation scale is one number for the whole tensor: DeepSeek-V3 uses one scale per token per block of block_size channels.",
                 "激活的 scale 是整个张量共用的一个数：DeepSeek-V3 对每个词元的每 block_size 个通道使用一个 scale。", evidence)
        if scale.numel() == inp[..., 0].numel():
            fail("The activation scale is one per token: DeepSeek-V3 uses one per token AND per block of block_size channels.",
                 "激活的 scale 每个词元只有一个：DeepSeek-V3 对每个词元、每 block_size 个通道各用一个 scale。", evidence)
        expect(tuple(scale.shape) == want, f"{who} must return scale of shape (..., K // block_size): one per token per block.",
               f"{who} 返回的 scale 形状必须是 (..., K // block_size)：每个词元每个块一个。", evidence)
        if inp is x:
            qp.expect_zero_guarded(x_fp8, scale, x_fp8[1, 0], scale[1, 0], made_nan, who, "tile (a padding token)", "分块（填充词元）")
        _, right = ref.fp8_activation_quantize(inp, b)
        live = right * 448 > 2 * ref.AMAX_FLOOR  # the padding token's scale is any guard's choice
        qp.expect_no_added_floor(scale.float()[live], right[live], 448, who)
        expect_known(scale.float()[live], right[live], [
            (right[live] * 448 / 127, "The FP8 scale is amax / 127, the int8 one: e4m3's largest value is 448, so scale = amax / 448.",
             "FP8 的 scale 用了 int8 的 amax / 127：e4m3 的最大值是 448，所以 scale = amax / 448。"),
            (1 / right[live], "The inverse is stored: the scale is amax / 448, so that x = x_fp8 * scale.", "存的是倒数：scale 是 amax / 448，这样 x = x_fp8 * scale。")],
            "Every scale must be the max of |x| over that token's block / 448.", "每个 scale 必须是该词元该块内 |x| 的最大值除以 448。", atol=1e-9)
        full = right.repeat_interleave(b, dim=-1)
        expect(qp.fp8_error_ok(inp, x_fp8.float() * full, full),
               "x_fp8 * scale must give back x within FP8's rounding: divide each token's block by its own scale.",
               "x_fp8 * scale 必须在 FP8 的舍入误差内还原 x：把每个词元的每个块除以它自己的 scale。")
    qp.expect_scale_in_float32(qp.expect_fp8_pair(in_bf16, half, who, "x_fp8")[1], ref.fp8_activation_quantize(half, 32)[1], "scale", "scale", who)
    with own_work(fp8_activation_quantize, "fp8_activation_quantize"):
        same_as_reference(fp8_activation_quantize, ref.fp8_activation_quantize, FAMILIES["fp8_activation_quantize"], "fp8_activation_quantize",
                          explain=qp.explain_scale("fp8_activation_quantize", 448), view=qp.scale_first)


# int8 weight-only linear ---------------------------------------------------------------------
def _expect_forward(layer, linear, d_in, seed, who):
    """Outputs on an ordinary and a non-contiguous input; buffers left as they were; the layer
    reads its own int8 copy, not the nn.Linear it came from."""
    x = randn(3, 5, d_in, seed=seed)
    strided = randn(3, 2, d_in, seed=seed + 1).transpose(0, 1)  # (2, 3, d_in), not contiguous
    right, right_strided = il.reference_linear(linear, x), il.reference_linear(linear, strided)
    kept = {k: t.clone() for k, t in layer.state_dict().items()}
    with torch.no_grad():
        out = call(layer, x, name=f"{who}.forward")
        il.expect_like_linear(out, x, right, who, il.linear_mistakes(linear, x))
        il.expect_like_linear(call(layer, strided, name=f"{who}.forward"), strided, right_strided,
                              f"{who} (a non-contiguous input, x.transpose(0, 1))")
        changed = [k for k, t in layer.state_dict().items() if k not in kept or t.dtype != kept[k].dtype or not torch.equal(t, kept[k])]
        expect(not changed, f"{who}'s forward changes the layer's buffers: leave the int8 weight, the scales and the bias as from_linear made them.",
               f"{who} 的 forward 修改了层的缓冲区：int8 权重、scale 和偏置应保持 from_linear 生成时的样子。", f"changed: {changed}")
        originals = [p for p in (linear.weight, linear.bias) if p is not None]
        for p in originals:  # the original layer changes; the quantized one must not notice (a bias kept by reference does)
            p.mul_(-1.0)
        again = call(layer, x, name=f"{who}.forward")
        for p in originals:
            p.mul_(-1.0)
    expect(torch.equal(again, out), f"{who} still reads the nn.Linear it was made from: from_linear must copy what it needs (the int8 weight, scales, bias) into the new layer.",
           f"{who} 仍在读取它所来自的 nn.Linear：from_linear 必须把需要的东西（int8 权重、scale、偏置）复制到新层中。")


def check_Int8WeightOnlyLinear(Int8WeightOnlyLinear):
    who = "Int8WeightOnlyLinear"
    big = il.make_linear(il.BIG, il.BIG, True, 122)  # float32 64 MB: more than a CPU's last-level cache
    course = ref.Int8WeightOnlyLinear.from_linear(big)  # this processor's int8 kernel as the course calls it, built before the rule blocks the class
    reference = iv.built_and_run(ref.Int8WeightOnlyLinear)  # looked up before own_work blocks it
    with own_work(Int8WeightOnlyLinear, who), course_versions(Int8WeightOnlyLinear, {"absmax_quantize": ref.absmax_quantize}):
        try:  # the notebook's constructor; another signature is fine, wrapping the course's class is not
            Int8WeightOnlyLinear(64, 48)
        except Shortcut:
            raise
        except Exception:
            pass
        expect(isinstance(Int8WeightOnlyLinear, type) and issubclass(Int8WeightOnlyLinear, nn.Module) and hasattr(Int8WeightOnlyLinear, "from_linear"),
               f"{who} must be an nn.Module subclass with a classmethod from_linear(linear).", f"{who} 必须是 nn.Module 的子类，并带有类方法 from_linear(linear)。")
        for d_in, d_out, bias, seed in [(64, 48, True, 120), (32, 24, False, 121)]:
            linear = il.make_linear(d_in, d_out, bias, seed)
            layer = call(Int8WeightOnlyLinear.from_linear, linear, name=f"{who}.from_linear")
            expect(isinstance(layer, Int8WeightOnlyLinear), f"{who}.from_linear(linear) must return an {who}.",
                   f"{who}.from_linear(linear) 必须返回一个 {who}。", f"got {type(layer).__name__}")
            il.expect_int8_storage(layer, d_in, d_out, who)
            il.expect_scales(layer, linear, who)
            il.expect_no_graph(layer, who)
            hidden = il.copies_elsewhere(Int8WeightOnlyLinear, linear.weight.detach())
            expect(not hidden, f"{who} keeps a floating-point copy of the whole weight outside the layer (a class attribute or a container of the notebook): keep only the int8 weight and its scales, in the layer.",
                   f"{who} 在层之外（类属性或笔记本中的容器里）保留了整个权重的浮点副本：只在层中保留 int8 权重和它的 scale。", f"found in {hidden}")
            _expect_forward(layer, linear, d_in, seed + 10, who)
        fast = call(Int8WeightOnlyLinear.from_linear, big, name=f"{who}.from_linear")
        x = randn(1, il.BIG, seed=123)
        with torch.no_grad(), il.FloatsAsLargeAsTheWeight(il.BIG * il.BIG // 2) as seen:
            call(fast, x, name=f"{who}.forward")
        expect(not seen.found, f"{who}'s forward dequantizes the whole weight at every call (it builds a float tensor as large as the weight), which reads more memory than the float32 layer: multiply with the int8 weight directly (torch._weight_int8pack_mm on bfloat16 activations).",
               f"{who} 的 forward 每次调用都把整个权重反量化（构造了与权重一样大的浮点张量），读取的内存比 float32 层还多：请直接用 int8 权重做乘法（对 bfloat16 激活调用 torch._weight_int8pack_mm）。",
               f"float tensors made: {seen.found[:3]}")
        for rounds in (10, 30):  # a second, longer try before calling it slow
            with course_runs():  # the course's layer is timed beside the learner's, which is timed unwatched too
                t_int8, t_float, t_course = il.best_times(fast, (big, course), x, rounds)
            if fast_enough := t_int8 < il.SLACK * max(t_float, t_course):
                break
            if t_int8 > il.HOPELESS * max(t_float, t_course):
                break
    if not fast_enough:
        fail(f"{who}'s forward takes {il.SLACK} times the float32 nn.Linear's time or more, and as long against the course's own int8 layer: multiply with the int8 weight directly (torch._weight_int8pack_mm on bfloat16 activations), without Python loops.",
             f"{who} 的 forward 耗时达到 float32 nn.Linear 的 {il.SLACK} 倍或更多，相对课程自己的 int8 层也是如此：请直接用 int8 权重做乘法（对 bfloat16 激活调用 torch._weight_int8pack_mm），不要用 Python 循环。",
             f"best of {rounds} rounds: int8 {1e3 * t_int8:.2f} ms, float32 {1e3 * t_float:.2f} ms, the course's layer {1e3 * t_course:.2f} ms for 2 calls at {il.BIG}x{il.BIG}")
    with own_work(Int8WeightOnlyLinear, who), course_versions(Int8WeightOnlyLinear, {"absmax_quantize": ref.absmax_quantize}):
        same_as_reference(iv.built_and_run(Int8WeightOnlyLinear), reference, FAMILIES[who], who, explain=iv.explain_int8_linear)


def check_quantize_model_(quantize_model_):
    who = "quantize_model_"
    model, x = il.probe_model(124), randn(3, 16, seed=125)
    names = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        expected = model(x)
    norm = model.norm
    reference, reference_layer = ref.quantize_model_, ref.Int8WeightOnlyLinear  # looked up before own_work blocks them
    with own_work(quantize_model_, who), course_versions(quantize_model_, {"Int8WeightOnlyLinear": ref.Int8WeightOnlyLinear}):
        returned = call(quantize_model_, model, name=who)
        expect(returned is model, f"{who} must change the model in place and return that same model.",
               f"{who} 必须原地修改模型，并返回同一个模型。", f"returned {type(returned).__name__}")
        left = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
        expect(not left, f"{who} misses nested nn.Linear layers: walk every submodule (named_modules or recursion over children), not just the top level.",
               f"{who} 漏掉了嵌套的 nn.Linear 层：请遍历所有子模块（named_modules 或对 children 递归），而不只是顶层。", f"still nn.Linear: {left}")
        for n in names:
            expect(any(t.dtype == torch.int8 for t in il.tensors(model.get_submodule(n)).values()),
                   f"{who} must replace every nn.Linear by an int8 layer (your Int8WeightOnlyLinear.from_linear).",
                   f"{who} 必须把每个 nn.Linear 替换成 int8 层（你的 Int8WeightOnlyLinear.from_linear）。", f"{n} holds no int8 tensor")
        expect(model.norm is norm, f"{who} must leave modules other than nn.Linear as they are.", f"{who} 必须保持 nn.Linear 以外的模块不变。")
        with torch.no_grad():
            out = call(model, x, name="the quantized model")
        tol = 0.05 * expected.abs().max() + 1e-3  # six int8 layers with bfloat16 activations
        expect(out.shape == expected.shape and bool(((out.float() - expected).abs() <= tol).all()),
               f"After {who} the model's output must stay close to the float32 model's (graded with the course's Int8WeightOnlyLinear).",
               f"{who} 之后模型的输出必须与 float32 模型的接近（评分时使用课程的 Int8WeightOnlyLinear）。",
               f"largest difference {float((out.float() - expected).abs().max()):.4g}")
        kept, nested = il.probe_model(126), il.probe_model(127)
        try:
            quantize_model_(kept, skip=("head",))
            quantize_model_(nested, skip=("blocks.1.0",))
        except TypeError as e:
            fail(f"{who} must accept skip=(names,): the names in model.named_modules() of the linears to keep in float.",
                 f"{who} 必须接受 skip=(names,)：要保留为浮点的线性层在 model.named_modules() 中的名字。", f"TypeError: {e}")
    expect(type(kept.head) is nn.Linear, f"{who} quantizes the output head when told not to: leave the linears named in skip as they are.",
           f"{who} 在被要求跳过时仍量化了输出头：请保留 skip 中列出名字的线性层。", f"head is {type(kept.head).__name__}")
    left = [n for n, m in kept.named_modules() if isinstance(m, nn.Linear)]
    expect(left == ["head"], f"With skip=('head',) {who} must still replace every other nn.Linear.",
           f"skip=('head',) 时 {who} 仍必须替换其余每个 nn.Linear。", f"still nn.Linear: {left}")
    left = [n for n, m in nested.named_modules() if isinstance(m, nn.Linear)]
    expect(left == ["blocks.1.0"], f"{who} must compare the FULL dotted name with skip: skip=('blocks.1.0',) keeps exactly that nested linear (the child's own name '0' is shared by blocks.0.0).",
           f"{who} 必须用完整的点分名字与 skip 比较：skip=('blocks.1.0',) 恰好保留那个嵌套的线性层（子模块自己的名字 '0' 与 blocks.0.0 相同）。",
           f"still nn.Linear: {left}")
    with own_work(quantize_model_, who), course_versions(quantize_model_, {"Int8WeightOnlyLinear": reference_layer}):
        same_as_reference(quantize_model_, reference, FAMILIES[who], who, explain=iv.explain_quantize, effect=iv.model_after)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
