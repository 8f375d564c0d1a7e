"""Hidden checks of notebook 15, FlashAttention as a GPU kernel in Triton.

Each exercise is a kernel and its launcher (or an autograd Function that launches one); the
checks call the launcher and watch the kernels run (`triton_watch.KernelWatch`): the learner's own
kernel must be launched, on the contract's grid, and no load or store may leave the tensors of
its launch (a missing mask is named before memory is touched). Grading runs them in Triton's
interpreter on the CPU, at small sizes: every program is executed in Python, a few ms per tile.

Ground truth is PyTorch's, in float64: torch.softmax, F.scaled_dot_product_attention with a
bottom-right causal mask, torch.logsumexp of the scaled scores, autograd through SDPA. Inputs are
never square (T_q != T_k), lengths are not multiples of the blocks, batch items and heads differ
and come as split heads give them (non-contiguous); float32 and bf16 (bf16 within its rounding,
with the running statistics in float32). When a value is wrong it is compared with what each
usual mistake computes (`triton_variants`), so that the message names the mistake. What values
cannot show is probed: NaN planted in keys that a causal query tile never needs shows whether the
key loop skips the tiles above the diagonal.
"""
import contextlib
import math
import warnings

import torch

import utils.flash_triton as ref
from autograder.checks import graded_checks, Shortcut, expect, expect_close, expect_known, expect_tensor, fail, own_work, randn
from autograder.checks.nb15.contract import FAMILIES, attention, attention_out, softmax
from autograder.checks.nb14.flash_variants import autograd_grads, heads_layout, scaled_scores, sdpa
from autograder.checks.core.harness import same_as_reference
from autograder.checks.nb14.grad_probes import (apply_and_backward, apply_without_causal, calls_in_flight, expect_no_probabilities_saved,
                                            watched_apply_and_backward, expect_autograd_function)
from autograder.checks.core.tile_watch import TileWatch, elements, expect_tiles
from autograder.checks.nb15.triton_forward import BF16_TOL, expect_forward_runs, forward_inputs
from autograder.checks.nb15.triton_variants import softmax_mistakes
from autograder.checks.nb15.triton_runs import (expect_kernel, expect_out_and_lse, expect_stored, f32_tol, launched, layout_explained, not_stored,
                                          on_device, run)
from autograder.checks.nb15.triton_watch import KernelWatch
import autograder.checks.nb15.triton_probes as probes



@contextlib.contextmanager
def _own_work(kernel, launcher, who, launcher_name, en, zh):
    """own_work for the kernel and for its launcher (its closures and defaults too): the contract's forbids."""
    with own_work(kernel, who, en=en, zh=zh), own_work(launcher, launcher_name, en=en, zh=zh):
        yield


# triton_softmax ------------------------------------------------------------------------------
def check_softmax_rows_kernel(softmax_rows_kernel, triton_softmax):
    who = "softmax_rows_kernel"
    expect_kernel(softmax_rows_kernel, who)
    expect(callable(triton_softmax), "triton_softmax must be a function: the launcher of softmax_rows_kernel.",
           "triton_softmax 必须是函数：softmax_rows_kernel 的启动函数。")
    wide, x = probes.softmax_view()
    wide, = on_device(wide)
    x = wide[:, :37]
    copy, contiguous = wide.clone(), x.contiguous()
    square, columns, long = on_device(randn(3, 64, seed=151), probes.softmax_transposed(), randn(2, 300, seed=153) * 4)
    en = "This exercise asks you to write the softmax yourself, in softmax_rows_kernel, not to call torch's softmax or the course's kernels in utils."
    zh = "本练习要求你在 softmax_rows_kernel 中自己实现 softmax，而不是调用 torch 的 softmax 或 utils 中课程的内核。"
    runs, unstored, one_per_row = {}, [], ("one program per row, grid (M,)", "每行一个程序，grid 为 (M,)")
    with _own_work(softmax_rows_kernel, triton_softmax, who, "triton_softmax", en, zh), KernelWatch() as watch:
        for name, arg in (("view", x), ("contiguous", contiguous), ("square", square), ("bf16", contiguous.bfloat16()),
                          ("columns", columns), ("long", long)):
            before = len(watch.launches)
            runs[name] = run(triton_softmax, arg, name="triton_softmax")
            launched(watch, softmax_rows_kernel, before, "triton_softmax", (arg.shape[0], *one_per_row))
            expect_tensor(runs[name], "triton_softmax's result", "triton_softmax 的结果")
            unstored += not_stored(watch, before, [("its result", runs[name])])
    expect(torch.equal(wide, copy), "triton_softmax changed its input in place: write into a new output tensor.",
           "triton_softmax 原地修改了输入：请写入一个新的输出张量。")
    for name, out in runs.items():
        shape = {"square": (3, 64), "columns": (5, 37), "long": (2, 300)}.get(name, (6, 37))
        expect(tuple(out.shape) == shape, "triton_softmax must return a tensor of the shape of x.",
               "triton_softmax 必须返回与 x 形状相同的张量。", f"shape {tuple(out.shape)}, expected {shape}")
    expected = torch.softmax(x.cpu().double(), -1)
    for name in ("contiguous", "view"):
        out = runs[name].cpu()
        expect(not torch.isnan(out).any() and not torch.isinf(out).any(),
               "triton_softmax gives NaN or inf on rows near +500 or -1000: subtract each row's maximum before exp (tl.max(x, axis=0)).",
               "triton_softmax 在接近 +500 或 -1000 的行上得到了 NaN 或 inf：在 exp 之前减去每行的最大值（tl.max(x, axis=0)）。",
               f"{name} input")
        expect_known(out, expected, lambda: softmax_mistakes(x.cpu(), wide.cpu()),
                     f"triton_softmax differs from torch.softmax ({name} x of shape (6, 37)): exp(x - max) / sum over each row, in float32.",
                     f"triton_softmax 与 torch.softmax 不同（{name}，x 的形状为 (6, 37)）：对每一行计算 exp(x - max) / sum，使用 float32。",
                     atol=1e-6, rtol=1e-5)
    expect(bool((runs["contiguous"].cpu()[x.cpu() == float("-inf")] == 0).all()),
           "Entries equal to -inf must get weight exactly 0.", "等于 -inf 的元素的权重必须恰好为 0。")
    expect_close(runs["square"].cpu(), torch.softmax(square.cpu().double(), -1),
                 "triton_softmax is wrong on rows of 64 columns, a power of two (BLOCK_N = N, nothing masked).",
                 "triton_softmax 在 64 列（2 的幂，BLOCK_N = N，无需掩码）的行上不对。", atol=1e-6, rtol=1e-5)
    expect_close(runs["columns"].cpu(), torch.softmax(columns.cpu().double(), -1),
                 "triton_softmax is wrong on x = y.T, whose columns are not adjacent in memory (x.stride(1) != 1): make x contiguous "
                 "in the launcher (x.contiguous()), or pass the column stride too and step through a row with it.",
                 "triton_softmax 在 x = y.T 上不对，它的列在内存中不相邻（x.stride(1) != 1）：在启动函数中把 x 变成连续的"
                 "（x.contiguous()），或者把列步长也传给内核，并用它在一行中前进。", atol=1e-6, rtol=1e-5)
    expect_close(runs["long"].cpu(), torch.softmax(long.cpu().double(), -1),
                 "triton_softmax is wrong on rows of 300 columns, wider than the other inputs: BLOCK_N = triton.next_power_of_2(N), "
                 "from the row's length, not a constant.",
                 "triton_softmax 在 300 列（比其他输入更宽）的行上不对：BLOCK_N = triton.next_power_of_2(N)，由行的长度决定，"
                 "而不是一个常数。", atol=1e-6, rtol=1e-5)
    bf16 = runs["bf16"]
    expect(bf16.dtype == torch.bfloat16, "triton_softmax must return the input's dtype: allocate the output like x, compute in float32 (.to(tl.float32)).",
           "triton_softmax 必须返回输入的 dtype：按 x 的 dtype 分配输出，用 float32 计算（.to(tl.float32)）。", f"bf16 input gave {bf16.dtype}")
    expect_close(bf16.cpu(), torch.softmax(contiguous.bfloat16().cpu().double(), -1),
                 "triton_softmax is wrong on bf16 input: load, convert to float32 (.to(tl.float32)), compute, store in the output's dtype.",
                 "triton_softmax 在 bf16 输入上不对：载入后转换为 float32（.to(tl.float32)），计算，再以输出的 dtype 存储。", atol=4e-3, rtol=0)
    expect_stored(unstored, "triton_softmax")
    with _own_work(softmax_rows_kernel, triton_softmax, who, "triton_softmax", en, zh), KernelWatch():
        same_as_reference(triton_softmax, softmax, FAMILIES[who], "triton_softmax",
                          explain=layout_explained(triton_softmax, FAMILIES[who], "layout:x", "triton_softmax's result", "triton_softmax 的结果"))


# triton_flash_attention_forward --------------------------------------------------------------
def check_flash_forward_kernel(flash_forward_kernel, triton_flash_attention_forward):
    who, kernel, fn = "flash_forward_kernel", flash_forward_kernel, triton_flash_attention_forward
    expect_kernel(kernel, who)
    expect(callable(fn), "triton_flash_attention_forward must be a function: the launcher of flash_forward_kernel.",
           "triton_flash_attention_forward 必须是函数：flash_forward_kernel 的启动函数。")
    inputs = forward_inputs()
    copies = [t.clone() for t in inputs["f32"][0]]
    en = f"This exercise asks you to write the FlashAttention forward yourself, in {who}, not to call F.scaled_dot_product_attention or the course's code in utils."
    zh = f"本练习要求你在 {who} 中自己实现 FlashAttention 的前向计算，而不是调用 F.scaled_dot_product_attention 或 utils 中课程的代码。"
    runs, unstored = {}, []
    with _own_work(kernel, fn, who, "triton_flash_attention_forward", en, zh), KernelWatch() as watch, warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the poisoned probe's last query tile is NaN, legitimately
        for label, (args, causal, blocks, dtype) in inputs.items():
            before = len(watch.launches)
            result = run(fn, *[t.to(dtype) for t in args], causal=causal, **blocks, name="triton_flash_attention_forward")
            (B, H, T_q, d), bq = args[0].shape, blocks.get("block_q", 64)
            launched(watch, kernel, before, "triton_flash_attention_forward",
                     (math.ceil(T_q / bq) * B * H, "one program per tile of block_q queries and per (batch item, head): "
                      "grid (cdiv(T_q, block_q), B * H)", "每 block_q 个查询组成的分块、每个（样本，头）各一个程序：grid 为 (cdiv(T_q, block_q), B * H)"))
            runs[label] = expect_out_and_lse(result, "triton_flash_attention_forward", (B, H, T_q, args[2].shape[-1]), dtype)
            unstored += not_stored(watch, before, [("out", result[0]), ("lse", result[1])])
    expect(all(torch.equal(a, b) for a, b in zip(inputs["f32"][0], copies)), "triton_flash_attention_forward changed q, k or v in place: leave the inputs as they are.",
           "triton_flash_attention_forward 原地修改了 q、k 或 v：请保持输入不变。")
    expect_forward_runs(runs, inputs, fn)
    expect_stored(unstored, "triton_flash_attention_forward")
    with _own_work(kernel, fn, who, "triton_flash_attention_forward", en, zh), KernelWatch():
        same_as_reference(fn, attention, FAMILIES[who], "triton_flash_attention_forward",
                          explain=layout_explained(fn, FAMILIES[who], "layout:q,k,v", "triton_flash_attention_forward's result",
                                                   "triton_flash_attention_forward 的结果"))


# TritonFlashAttention ------------------------------------------------------------------------
def check_TritonFlashAttention(TritonFlashAttention):
    who, cls = "TritonFlashAttention", TritonFlashAttention
    en = (f"This exercise asks you to write {who} yourself: its forward launches your kernel (through your "
          "triton_flash_attention_forward), not F.scaled_dot_product_attention or the course's code in utils.")
    zh = (f"本练习要求你自己实现 {who}：它的 forward 通过你的 triton_flash_attention_forward 启动你的内核，"
          "而不是调用 F.scaled_dot_product_attention 或 utils 中课程的代码。")
    expect_autograd_function(cls, who, (), en, zh)  # the contract's forbids
    B, H, T_q, T_k, d = 1, 2, 20, 37, 16
    q, k, v = (randn(B, H, T, d, seed=170 + i) for i, T in enumerate((T_q, T_k, T_k)))
    g = randn(B, H, T_q, d, seed=173)
    q, k, v, g = on_device(q, k, v, g)
    big = [t.requires_grad_() for t in on_device(*(randn(1, 1, 130, 16, seed=174 + i) for i in range(3)))]
    runs, forward_watch, watch, unstored = {}, TileWatch(), TileWatch(), []
    with own_work(cls, who, en=en, zh=zh), KernelWatch() as kernels:  # its methods' names, closures and defaults too
        for causal in (False, True):
            before = len(kernels.launches)
            runs[causal] = apply_and_backward(cls, (q, k, v), g, causal, who)
            unstored += not_stored(kernels, before, [("out", runs[causal][0])])
        before = len(kernels.launches)
        try:
            runs["bf16"] = apply_and_backward(cls, [t.bfloat16() for t in (q, k, v)], g.bfloat16(), True, who)
        except AssertionError as e:
            if isinstance(e, Shortcut) or "dtype" not in str(e):
                raise
            fail(f"{who}.backward crashed on bf16 inputs: notebook 14's backward multiplies tensors that must share one dtype, and lse is float32; "
                 "call it on float32 copies (q.float(), k.float(), v.float(), out.float(), lse, grad_out.float()) and cast each gradient back (.to(q.dtype)).",
                 f"{who}.backward 在 bf16 输入上崩溃了：笔记本 14 的反向计算相乘的张量必须是同一个 dtype，而 lse 是 float32；"
                 "请在 float32 副本上调用它（q.float()、k.float()、v.float()、out.float()、lse、grad_out.float()），再把每个梯度转换回去（.to(q.dtype)）。",
                 str(e).split("[")[-1].rstrip("]"))
        own = [l for l in kernels.launches[before:] if not (getattr(l.fn, "__module__", "") or "").startswith("utils")]
        in_flight = calls_in_flight(cls, q, k, v, g, who)
        watched_apply_and_backward(cls, big, forward_watch, watch, who)
        plain = apply_without_causal(cls, q, k, v, who)
    expect(own, f"{who}.apply launched no Triton kernel of yours: forward must call your triton_flash_attention_forward, which launches flash_forward_kernel.",
           f"{who}.apply 没有启动你自己的任何 Triton 内核：forward 必须调用你的 triton_flash_attention_forward，由它启动 flash_forward_kernel。",
           f"kernels launched: {[getattr(l.fn, '__name__', '?') for l in kernels.launches[before:]] or 'none'}")
    q, k, v, g = q.cpu(), k.cpu(), v.cpu(), g.cpu()
    for causal in (False, True):
        out, grads, saved = runs[causal]
        expect_close(out.cpu(), sdpa(q, k, v, causal),
                     f"{who}.apply(q, k, v, causal={causal}) differs from F.scaled_dot_product_attention: forward must return the out of your kernel.",
                     f"{who}.apply(q, k, v, causal={causal}) 与 F.scaled_dot_product_attention 不同：forward 必须返回你的内核算出的 out。", **f32_tol())
        expect_no_probabilities_saved(saved, T_q, T_k, who)
        expect(any(tuple(t.shape) == (B, H, T_q) for t in saved),
               f"{who} must save lse (one number per query) with ctx.save_for_backward(q, k, v, out, lse): backward recomputes the probabilities from it.",
               f"{who} 必须用 ctx.save_for_backward(q, k, v, out, lse) 保存 lse（每个查询一个数）：反向传播由它重新计算概率。",
               f"saved shapes {[tuple(t.shape) for t in saved]}")
        for name, ours, expected in zip("qkv", grads, autograd_grads(q.double(), k.double(), v.double(), g.double(), causal)):
            expect(ours is not None, f"{who}.backward gave no gradient for {name}: return (dq, dk, dv, None), one entry per input of forward.",
                   f"{who}.backward 没有给出 {name} 的梯度：返回 (dq, dk, dv, None)，forward 的每个输入对应一项。")
            expect_close(ours.cpu(), expected,
                         f"The gradient of {name} differs from autograd's (causal={causal}): backward must call notebook 14's flash_attention_backward "
                         "with the saved q, k, v, out, lse, grad_out and ctx's causal.",
                         f"{name} 的梯度与 autograd 的结果不同（causal={causal}）：backward 必须用保存的 q、k、v、out、lse、grad_out 和 ctx 中的 causal "
                         "调用笔记本 14 的 flash_attention_backward。", **ref.tolerance(gradients=True))
    expect_stored(unstored, f"{who}.forward")
    out, grads, _ = runs["bf16"]
    qb, kb, vb = (t.bfloat16().double() for t in (q, k, v))
    expect_close(out.cpu(), sdpa(qb, kb, vb, True), f"{who}.apply on bf16 inputs differs from attention in float64 by more than bf16 rounding.",
                 f"{who}.apply 在 bf16 输入上与 float64 的注意力相差超过了 bf16 的舍入误差。", atol=BF16_TOL, rtol=0)
    for name, ours, expected in zip("qkv", grads, autograd_grads(qb, kb, vb, g.bfloat16().double(), True)):
        expect(ours is not None and ours.dtype == torch.bfloat16,
               f"{who}.backward must return bf16 gradients for bf16 inputs: compute them in float32, then .to(q.dtype) and so on.",
               f"{who}.backward 对 bf16 输入必须返回 bf16 的梯度：用 float32 计算，然后 .to(q.dtype) 等。",
               f"the gradient of {name}: {getattr(ours, 'dtype', None)}")
        expect_close(ours.cpu(), expected,
                     f"With bf16 inputs the gradient of {name} is wrong: call notebook 14's backward on float32 copies (q.float(), ..., grad_out.float(), "
                     "lse is float32 already) and cast each gradient back to its input's dtype.",
                     f"bf16 输入时 {name} 的梯度不对：在 float32 副本上（q.float()、……、grad_out.float()，lse 本来就是 float32）调用笔记本 14 的反向计算，"
                     "再把每个梯度转换回其输入的 dtype。", atol=6e-2, rtol=2e-2)
    for name, ours, expected in zip("qkv", in_flight, autograd_grads(q, k, v, g, True)):
        expect(ours is not None and torch.allclose(ours.cpu().double(), expected.double(), **ref.tolerance(gradients=True)),
               f"{who}.backward used what a later call of forward stored: keep causal and the saved tensors on ctx (ctx.causal, ctx.save_for_backward), not on the class or in a global.",
               f"{who}.backward 用了之后一次 forward 调用存下的东西：把 causal 和要保存的张量放在 ctx 上（ctx.causal、ctx.save_for_backward），不要放在类上或全局变量里。",
               f"the gradient of {name} of a causal call, after a non-causal call on other inputs")
    expect(isinstance(plain, torch.Tensor), f"{who}.apply(q, k, v) must work without causal: forward(ctx, q, k, v, causal=False).",
           f"{who}.apply(q, k, v) 在不传 causal 时也必须能用：forward(ctx, q, k, v, causal=False)。")
    expect_close(plain.cpu(), sdpa(q, k, v, False), f"{who}.apply(q, k, v) must default to causal=False.",
                 f"{who}.apply(q, k, v) 的默认值必须是 causal=False。", **f32_tol())
    expect_tiles(forward_watch, max(elements(*big), 64 * 64), f"{who}.forward", 64, 64)
    expect_tiles(watch, max(elements(*big), 64 * 64), f"{who}.backward", 64, 64)
    with own_work(cls, who, en=en, zh=zh), KernelWatch():
        same_as_reference(cls.apply, attention_out, FAMILIES[who], who, grads=True,
                          explain=layout_explained(cls.apply, FAMILIES[who], "layout:q,k,v", f"{who}.apply's out", f"{who}.apply 的 out"))


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
