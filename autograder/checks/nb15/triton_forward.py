"""Notebook 15's FlashAttention forward: what its launcher is run on, and what each run must show.

One launch per thing to show, each as small as shows it (the interpreter runs every program in
Python): batch items and heads that differ, causal with T_q < T_k, scores in the hundreds, one
query, the default blocks, NaN planted in keys no query tile needs, bf16, a long row of key tiles
in bf16, block_q > block_k with T_q a multiple of its block and T_k not, scores all near -200, and
a width d of 64. q, k and v in other layouts are the family's (nb15/contract.py), whose failures
are named by a rerun on contiguous copies (triton_runs.layout_explained). When a value is
wrong it is compared with what each usual mistake computes (`triton_variants`), so that the
message names the mistake.
"""
import math
import warnings

import torch

from autograder.checks import expect, expect_close, expect_known, fail, randn
from autograder.checks.nb14.flash_variants import heads_layout, scaled_scores, sdpa
from autograder.checks.nb15.triton_probes import far_below_zero, poisoned
from autograder.checks.nb15.triton_runs import f32_tol, on_device, run
from autograder.checks.nb15.triton_variants import forward_mistakes, lse_mistakes
from autograder.checks.nb15.triton_watch import KernelWatch
import utils.flash_triton as ref

BF16_TOL = 3e-2  # |out - exact| of bf16 outputs of order 1-3: the model answer stays near 1.5e-2
ACC_TOL = 3e-2  # on the long row: float32 running statistics stay near 8e-3, a bf16 accumulator reaches 5.7e-2
# (the same on an H200 natively: 8.2e-3 and 5.0e-2, `python -m autograder.gpu_check15`)
F32, BF16 = torch.float32, torch.bfloat16


def forward_inputs() -> dict:
    """label -> ((q, k, v) on the kernels' device, causal, blocks, dtype)."""
    B, H, T_q, T_k, d = 2, 2, 21, 45, 16
    q, k, v = heads_layout(B, H, T_q, d, 160), heads_layout(B, H, T_k, d, 161), heads_layout(B, H, T_k, d, 162)
    q = q * torch.linspace(0.5, 4.0, T_q)[:, None]  # growing scores: the maximum changes from tile to tile
    q, k, v = on_device(q, k, v)
    one = [t[:1] for t in (q, k, v)]  # batch item 0: two heads
    blocks = lambda bq, bk: dict(block_q=bq, block_k=bk)
    return {
        "f32": ((q, k, v), False, blocks(16, 16), F32),
        "causal": (one, True, blocks(16, 16), F32),
        "big": ((one[0] * 30, one[1], one[2]), True, blocks(16, 32), F32),
        "decode": ((q[:1, :1, -1:], k[:1, :1], v[:1, :1]), True, blocks(16, 16), F32),
        "default": (one, True, {}, F32),
        "poisoned": (on_device(*poisoned(64, d, 166)), True, blocks(16, 16), F32),
        "bf16": (one, False, blocks(16, 16), BF16),
        "bf16 causal": ([t[:1, :1] for t in (q, k, v)], True, blocks(16, 16), BF16),
        "long": (on_device(randn(1, 1, 16, d, seed=163), randn(1, 1, 512, d, seed=164), randn(1, 1, 512, d, seed=165) + 3.0),
                 False, blocks(16, 16), BF16),  # 32 key tiles, values near 3
        "blocks": (on_device(*(randn(1, 1, T, d, seed=170 + i) for i, T in enumerate((32, 45, 45)))), True, blocks(32, 16), F32),
        "far below 0": (on_device(*far_below_zero(1, 1, 16, 40, d, 173)), False, blocks(16, 16), F32),
        "wide": (on_device(*(randn(1, 1, T, 64, seed=176 + i) for i, T in enumerate((5, 9, 9)))), True, {}, F32),
    }


def _nan_from_undefined(fn, args, causal, blocks):
    """True when out's NaN go away once masked loads without other= read 0: they came from there."""
    with KernelWatch(undefined=0.0), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out, _ = run(fn, *args, causal=causal, **blocks, name="triton_flash_attention_forward")
    return not torch.isnan(out.detach().cpu()).any()


def _tol(label, dtype) -> dict:
    if dtype == BF16:
        return dict(atol=BF16_TOL, rtol=0)
    return dict(atol=1e-4, rtol=1e-4) if label == "big" and ref.interpreted() else dict(atol=0.1, rtol=0) if label == "big" else f32_tol()


def _expect_layouts(runs, inputs, fn):
    """A run on views (split heads give them) whose out is wrong, and right on contiguous copies of
    the same q, k and v: the layout is the mistake, whatever else the run was there to show."""
    for label, (args, causal, blocks, dtype) in inputs.items():
        if all(t.is_contiguous() for t in args):
            continue
        q, k, v = (t.to(dtype).cpu().double() for t in args)
        right = sdpa(q, k, v, causal)
        if torch.allclose(runs[label][0].double(), right, **_tol(label, dtype)):
            continue
        with KernelWatch(), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            again, _ = run(fn, *[t.to(dtype).contiguous() for t in args], causal=causal, **blocks, name="triton_flash_attention_forward")
        if torch.allclose(again.detach().cpu().double(), right, **_tol(label, dtype)):
            fail(f"out is wrong on q, k and v as split heads give them (views of (B, T, H, d), not contiguous; causal={causal}) and "
                 "right on contiguous copies of them: make q, k and v contiguous in the launcher (t.contiguous()), or pass every "
                 "dimension's stride of each tensor to the kernel and use them all.",
                 f"out 在拆分的头给出的 q、k、v 上不对（(B, T, H, d) 的视图，不连续；causal={causal}），在它们的连续副本上却是对的："
                 "请在启动函数中把 q、k、v 变成连续的（t.contiguous()），或者把每个张量每一维的步长都传给内核并全部用上。",
                 f"the run with {label} inputs, blocks {blocks or 'the default'}")


def _expect_out(out, q, k, v, causal, bq, bk, rerun, what=""):
    right = sdpa(q.double(), k.double(), v.double(), causal)
    if torch.allclose(out.double(), right, **f32_tol()):
        return
    if out.shape[:2] != (1, 1) and torch.allclose(out[0, 0].double(), right[0, 0], **f32_tol()):
        fail("out is right for batch item 0, head 0 and wrong for the others: each program must offset q, k, v, out and lse by its "
             "own (batch item, head), program_id(1), times that head's T x d.",
             "out 对样本 0、头 0 是对的，对其他的不对：每个程序都必须按它自己的（样本，头），即 program_id(1)，乘以该头的 T x d，"
             "去偏移 q、k、v、out 和 lse。")
    if (torch.isnan(out) & ~torch.isnan(right)).any():
        if rerun():
            fail(f"out has NaN (causal={causal}, blocks ({bq}, {bk}){what}) that come from a masked tl.load without other=: its masked-off "
                 "lanes are undefined (Triton's documentation; grading reads them as NaN, a GPU as whatever the memory held), and p * v "
                 "turns a NaN of v into NaN even where p = 0. Give every masked load an other= (0.0 for q, k and v).",
                 f"out 中的 NaN（causal={causal}，分块 ({bq}, {bk}){what}）来自一个没有 other= 的带掩码 tl.load：被屏蔽的位置的值是未定义的"
                 "（Triton 的文档如此说明；评分把它们读作 NaN，GPU 上则是内存里碰巧存着的值），即使 p = 0，p * v 也会把 v 中的 NaN 变成 NaN。"
                 "请给每个带掩码的载入一个 other=（q、k、v 用 0.0）。")
        fail(f"out has NaN (causal={causal}, blocks ({bq}, {bk}){what}): in a causal tile some query rows see no key (every score -inf). "
             "While m is still -inf, such a row computes exp(-inf - (-inf)) = NaN: visit the key tiles from key 0 upwards (every "
             "query sees key 0, so m is finite after the first tile), or guard that case.",
             f"out 中出现了 NaN（causal={causal}，分块 ({bq}, {bk}){what}）：在因果分块中，有些查询行看不到任何键（所有分数都是 -inf）。"
             "当 m 仍是 -inf 时，这样的行会计算 exp(-inf - (-inf)) = NaN：请从键 0 开始向后遍历键分块（每个查询都能看到键 0，"
             "所以第一个分块之后 m 就是有限的），或者处理这种情况。")
    expect_known(out, right, lambda: forward_mistakes(q, k, v, causal, bq, bk),
                 f"out differs from F.scaled_dot_product_attention (causal={causal}, blocks ({bq}, {bk}), T_q={q.shape[-2]}, T_k={k.shape[-2]}{what}): "
                 "check the running maximum, the rescaling of l and acc, the masks and the final division.",
                 f"out 与 F.scaled_dot_product_attention 不同（causal={causal}，分块 ({bq}, {bk})，T_q={q.shape[-2]}，T_k={k.shape[-2]}{what}）："
                 "请检查运行最大值、l 和 acc 的重新缩放、掩码以及最后的除法。", **f32_tol())


def bf16_lse_tolerance(q, k):
    """Per query: lse of bf16 inputs within 2^-7 of sum_d |q_d k_d| / sqrt(d) over its keys, two bf16
    roundings of its largest scaled score (a kernel that scales q in bf16 first, as Triton's 2023
    tutorial did, moves lse by up to one rounding of the scale and one of each product)."""
    return 2.0 ** -7 * (q.abs() @ k.abs().transpose(-2, -1) / math.sqrt(q.shape[-1])).amax(-1) + 1e-3


def expect_forward_runs(runs, inputs, fn):
    """Each run of `forward_inputs` against PyTorch's float64 answer, with the words of its probe."""
    def args(label):
        return [t.cpu() for t in inputs[label][0]]

    def rerun(label):
        (a, causal, blocks, dtype) = inputs[label]
        return lambda: _nan_from_undefined(fn, [t.to(dtype) for t in a], causal, blocks)

    _expect_layouts(runs, inputs, fn)
    q, k, v = args("f32")
    for label, causal in (("f32", False), ("causal", True)):
        out, lse = runs[label]
        qq, kk, vv = (t[:out.shape[0]] for t in (q, k, v))
        _expect_out(out, qq, kk, vv, causal, 16, 16, rerun(label))
        expect_known(lse, torch.logsumexp(scaled_scores(qq.double(), kk.double(), causal), -1), lambda: lse_mistakes(qq, kk, causal),
                     f"lse differs from torch.logsumexp of the scaled scores (causal={causal}): lse = m + log(l) for each query, over the keys it sees.",
                     f"lse 与缩放后分数的 torch.logsumexp 不同（causal={causal}）：对每个查询，在它能看到的键上 lse = m + log(l)。", **f32_tol())
    big, (bq, bk, bv) = runs["big"][0], args("big")
    expect(bool(torch.isfinite(big).all()), "Scores in the hundreds give NaN or inf: subtract the running maximum inside exp.",
           "分数达到几百时出现了 NaN 或 inf：请在 exp 里减去运行最大值。")
    expect_close(big, sdpa(bq.double(), bk.double(), bv.double(), True),  # on a GPU TF32 moves such scores by ~0.1
                 "With scores in the hundreds (blocks of 16 queries and 32 keys) out is wrong: keep the running maximum and rescale.",
                 "分数达到几百时（16 个查询、32 个键的分块）out 不对：请保持运行最大值并重新缩放。",
                 **(dict(atol=1e-4, rtol=1e-4) if ref.interpreted() else dict(atol=0.1, rtol=0)))
    expect_close(runs["decode"][0], sdpa(*(t.double() for t in args("decode")), True),
                 "With one query (a decoding step, T_q = 1) and causal=True, the query is the last position and sees every key.",
                 "只有一个查询（解码的一步，T_q = 1）且 causal=True 时，这个查询是最后一个位置，能看到所有的键。", **f32_tol())
    expect_close(runs["default"][0], sdpa(*(t.double() for t in args("default")), True),
                 "triton_flash_attention_forward is wrong with its default blocks (64, 64), larger than T_q = 21: mask the rows past T_q.",
                 "triton_flash_attention_forward 在默认分块 (64, 64)（大于 T_q = 21）下不对：请遮住 T_q 之后的行。", **f32_tol())
    _expect_poisoned(runs["poisoned"][0], args("poisoned"))
    for label, causal in (("bf16", False), ("bf16 causal", True)):
        out, lse = runs[label]
        qb, kb, vb = (t.bfloat16().double() for t in args(label))
        expect_close(out, sdpa(qb, kb, vb, causal),
                     f"With bf16 inputs (causal={causal}) out is further from the exact answer than bf16 rounding allows: keep m, l and acc in "
                     "float32 and cast only p for the second tl.dot (p.to(v.dtype)).",
                     f"bf16 输入（causal={causal}）时 out 与精确答案的差距超出了 bf16 的舍入误差：m、l 和 acc 保持 float32，"
                     "只在第二个 tl.dot 前转换 p（p.to(v.dtype)）。", atol=BF16_TOL, rtol=0)
        error = (lse.double() - torch.logsumexp(scaled_scores(qb, kb, causal), -1)).abs()
        expect(bool((error <= bf16_lse_tolerance(qb, kb)).all()),
               f"With bf16 inputs (causal={causal}) lse is wrong by more than two bf16 roundings of the scores: the scores of tl.dot are "
               "float32, keep m and l in float32.",
               f"bf16 输入（causal={causal}）时 lse 的误差超过了分数的两次 bf16 舍入：tl.dot 得到的分数是 float32，m 和 l 要保持 float32。",
               f"largest error {error.max().item():.3g}")
    long = runs["long"][0]
    error = (long.double() - sdpa(*(t.bfloat16().double() for t in args("long")), False)).abs().max().item()
    expect(error <= ACC_TOL,
           "Over 32 key tiles in bf16 the output drifts from the exact answer: the accumulator acc (and m, l) must stay float32 across "
           "the loop (tl.zeros(..., dtype=tl.float32)); only p is cast to v's dtype for tl.dot.",
           "在 bf16 下经过 32 个键分块后输出偏离了精确答案：累加器 acc（以及 m、l）在整个循环中必须保持 float32"
           "（tl.zeros(..., dtype=tl.float32)）；只有 p 为 tl.dot 转换成 v 的 dtype。",
           f"T_k = 512, blocks of 16, values near 3: largest error {error:.3g}, at most {ACC_TOL} allowed")
    _expect_new_kinds(runs, args, rerun)


def _expect_poisoned(out, args):
    probe = out[..., :48, :]
    expect(not torch.isnan(probe).any(),
           "Queries 0-47 got NaN from keys 48-63, which they never see (NaN was planted there): with causal=True the key loop must stop at "
           "the tile's last query, end = min(T_k, (tile + 1) * BLOCK_Q + T_k - T_q), skipping every tile above the diagonal (not one tile more).",
           "查询 0-47 从它们永远看不到的键 48-63（那里放了 NaN）得到了 NaN：causal=True 时键循环必须在该分块最后一个查询处停止，"
           "end = min(T_k, (tile + 1) * BLOCK_Q + T_k - T_q)，跳过对角线之上的每一个分块（不要多算一个）。",
           "T_q = T_k = 64, blocks of 16, NaN in keys and values 48-63")
    expect_close(probe, sdpa(*(t.nan_to_num().double() for t in args), True)[..., :48, :],
                 "With T_q = T_k = 64, blocks of 16 and causal=True, out is wrong for queries 0-47.",
                 "T_q = T_k = 64、块大小为 16 且 causal=True 时，查询 0-47 的 out 不对。", **f32_tol())


def _expect_new_kinds(runs, args, rerun):
    q, k, v = args("blocks")
    _expect_out(runs["blocks"][0], q, k, v, True, 32, 16, rerun("blocks"), ", T_q = 32 a multiple of block_q, T_k = 45 not of block_k")
    out = runs["far below 0"][0]
    q, k, v = args("far below 0")
    expect(not torch.isnan(out).any(),
           "With every score near -200, out is NaN: start the running maximum at -inf (tl.full([BLOCK_Q], float(\"-inf\"), tl.float32)), "
           "not at 0: exp(s - 0) underflows to 0 below about -104, l stays 0 and acc / l is 0 / 0.",
           "当所有分数都接近 -200 时 out 是 NaN：运行最大值要从 -inf 开始（tl.full([BLOCK_Q], float(\"-inf\"), tl.float32)），"
           "而不是从 0 开始：低于约 -104 时 exp(s - 0) 下溢为 0，l 一直是 0，acc / l 就是 0 / 0。")
    big_tol = dict(atol=1e-4, rtol=1e-4) if ref.interpreted() else dict(atol=0.1, rtol=0)  # float32 scores near -200 carry ~2e-5
    expect_close(out, sdpa(q.double(), k.double(), v.double(), False),
                 "With every score near -200, out is wrong: keep the running maximum (started at -inf) and subtract it inside exp.",
                 "当所有分数都接近 -200 时 out 不对：保持运行最大值（从 -inf 开始），并在 exp 里减去它。", **big_tol)
    q, k, v = args("wide")
    expect_close(runs["wide"][0], sdpa(q.double(), k.double(), v.double(), True),
                 "With d = 64 (the other inputs have d = 16) out is wrong: the width is q.shape[-1], passed to the kernel as D; nothing in "
                 "the kernel or the launcher may assume a constant width.",
                 "当 d = 64 时（其他输入的 d = 16）out 不对：宽度是 q.shape[-1]，作为 D 传给内核；内核和启动函数都不能假设宽度是常数。",
                 **f32_tol())
