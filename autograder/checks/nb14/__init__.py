"""Hidden checks of notebook 14, FlashAttention: exact attention in tiles.

Ground truth is PyTorch's own: F.scaled_dot_product_attention (with a bottom-right causal mask)
and autograd (`flash_variants`). Shapes are never square (T_q != T_k, d != d_v, batch and heads
whose items differ, non-contiguous inputs as split heads give them) and block sizes do not divide
T. When a value is wrong, it is compared with what each usual mistake computes, so that the
message names the mistake (`flash_variants` lists them).

What values cannot show is watched while the learner's code runs, from the contract:
- no intermediate larger than one (block_q, block_k) tile of every batch item and head, unless it
  holds no more elements than an input or an output (`tile_watch.TileWatch`);
- online_softmax makes no reduction (max, sum, softmax, ...) over more than block_size entries of a row;
- causal passes skip the tiles entirely above the diagonal: they do markedly less arithmetic than
  the same call without the mask (`cost.MatmulCost`: multiply-adds and multiplications);
- a causal output never depends on keys after its query (changing those keys changes nothing);
- FlashAttention keeps what backward needs on ctx: two calls in flight do not mix.
None of these imports torch._dynamo or sympy (`grad_probes` replaces gradcheck).
"""
import math

import torch

import utils.flash_attention as ref
from autograder.checks import graded_checks, call, expect, expect_close, expect_known, expect_tensor, fail, matches, own_work, randn
from autograder.checks.core.executes import ran
from autograder.checks.nb14.contract import FAMILIES
from autograder.checks.nb14.flash_variants import (autograd_grads, backward_mistakes, forward_mistakes, lse_mistakes, online_variant,
                                              scaled_scores, sdpa)
from autograder.checks.nb14.flash_variants import expect_dtype, expect_grads, expect_pair, heads_layout
from autograder.checks.nb14.grad_probes import (apply_and_backward, apply_without_causal, calls_in_flight, expect_no_probabilities_saved,
                                            watched_apply_and_backward, directional_error, expect_autograd_function)
from autograder.checks.core.tile_watch import TileWatch, elements, expect_skips, expect_tiles, work_of
from autograder.checks.core.harness import same_as_reference

NEG_INF = float("-inf")


def _flash_apply(cls):
    def apply(q, k, v, causal):
        return cls.apply(q, k, v, causal)
    return apply


_SQUARE = "T_q = T_k = 64, blocks of 8: skipping the 28 tiles above the diagonal leaves 36 of 64"


# online_softmax --------------------------------------------------------------------------------
def _softmax_input():
    x = randn(2, 3, 37, seed=141) * 4  # N = 37: no block size below divides it
    x[0, 0] += 1000.0  # large scores: exp overflows without the running maximum
    x[1, 1] -= 1000.0
    x[0, 1, torch.arange(37) % 3 == 0] = NEG_INF  # -inf entries get weight 0
    x[1, 2, :20] = NEG_INF  # a row whose first blocks are all -inf
    x[1, 0] = torch.linspace(-3.0, 6.0, 37)  # increasing: the maximum changes in every block
    return x


def check_online_softmax(online_softmax):
    who, x = "online_softmax", _softmax_input()
    x_copy = x.clone()
    results, watches = {}, {}
    with own_work(online_softmax, who):
        for block in (8, 5, 1, 64):
            with TileWatch(row_ndim=x.dim(), block_size=block) as watches[block]:
                results[block] = call(online_softmax, x, block, inputs_named=True, name=who)
        pair = call(online_softmax, torch.tensor([1000.0, 1001.0]), 1, inputs_named=True, name=who)
        strided = call(online_softmax, x.transpose(0, 1).contiguous().transpose(0, 1), 8, inputs_named=True, name=who)
        double = call(online_softmax, x.double(), 8, inputs_named=True, name=who)
    for block, result in results.items():
        expect_tensor(result, "online_softmax's result", "online_softmax 的结果")
        expect(result.shape == x.shape, "online_softmax must return a tensor of the shape of x.",
               "online_softmax 必须返回与 x 形状相同的张量。", f"block_size {block}: shape {tuple(result.shape)}, expected {tuple(x.shape)}")
    expect(torch.equal(x, x_copy), "online_softmax changed its input in place: leave x as it is.",
           "online_softmax 原地修改了输入：请保持 x 不变。")
    for block in (8, 5, 1):
        found = watches[block].full_row
        expect(found is None,
               f"online_softmax reduced more than block_size entries of a row at once ({found}, block_size {block}): keep a running maximum and a running sum, one block of block_size entries at a time.",
               f"online_softmax 一次对一行中多于 block_size 个元素做了归约（{found}，block_size 为 {block}）：请保持一个运行最大值和一个运行和，每次只处理 block_size 个元素。")
    expected = torch.softmax(x, dim=-1)
    for block in (8, 5, 1):
        mistakes = [(online_variant(x, block, rescale=False),
                     "The running sum was not rescaled when the maximum grew: multiply it by exp(m_old - m_new) before adding the new block's exp(x - m_new).",
                     "最大值变大时运行和没有重新缩放：在加上新块的 exp(x - m_new) 之前，先把它乘以 exp(m_old - m_new)。")]
        if not torch.isfinite(results[block].detach()).all():
            fail("online_softmax gives NaN or inf on rows with scores near 1000 or with -inf entries: subtract the running maximum inside exp, and keep a row that has seen only -inf at sum 0 (no -inf - (-inf)).",
                 "在分数接近 1000 或含 -inf 的行上，online_softmax 得到了 NaN 或 inf：在 exp 里减去运行最大值，并让只见过 -inf 的行的和保持为 0（不要计算 -inf - (-inf)）。",
                 f"block_size {block}")
        expect_known(results[block], expected, mistakes,
                     f"online_softmax differs from torch.softmax with block_size {block}: after the pass over the blocks, return exp(x - m) / l with the final maximum m and sum l.",
                     f"block_size 为 {block} 时 online_softmax 与 torch.softmax 不同：遍历完所有块后，用最终的最大值 m 和总和 l 返回 exp(x - m) / l。")
    expect_close(results[64], expected,
                 "online_softmax is wrong when block_size is larger than the row: the one block is the whole row.",
                 "当 block_size 大于行长时 online_softmax 不对：唯一的块就是整行。")
    expect_close(strided, expected, "online_softmax is wrong on a non-contiguous x (a transposed view): index blocks with x[..., start:stop], not view().",
                 "online_softmax 在非连续的 x（转置视图）上不对：用 x[..., start:stop] 取块，不要用 view()。")
    expect(bool((results[8].detach()[x == NEG_INF] == 0).all()),
           "Entries equal to -inf must get weight exactly 0.", "等于 -inf 的元素的权重必须恰好为 0。")
    expect_close(pair, torch.tensor([1 / (1 + math.e), math.e / (1 + math.e)]),
                 "online_softmax([1000, 1001], 1) must be [1/(1+e), e/(1+e)]: exp(1000) overflows unless you subtract the running maximum.",
                 "online_softmax([1000, 1001], 1) 必须是 [1/(1+e), e/(1+e)]：不减去运行最大值时 exp(1000) 会溢出。")
    expect(isinstance(double, torch.Tensor) and double.dtype == torch.float64,
           "online_softmax must keep the dtype of x: create the running maximum and sum with x.new_full / x.new_zeros.",
           "online_softmax 必须保持 x 的 dtype：用 x.new_full / x.new_zeros 创建运行最大值和运行和。",
           f"float64 input gave {getattr(double, 'dtype', type(double).__name__)}")
    expect_close(double, torch.softmax(x.double(), dim=-1), "online_softmax is wrong on a float64 x.",
                 "online_softmax 在 float64 的 x 上不对。")
    reference = ref.online_softmax  # looked up before own_work blocks it
    with own_work(online_softmax, who):
        same_as_reference(online_softmax, reference, FAMILIES[who], who)


# flash_attention_forward -----------------------------------------------------------------------
def _expect_out(out, q, k, v, causal, leaked):
    """out against SDPA; a wrong out is named by the known mistake it equals, or by NaN rows, or by the leak probe."""
    right = sdpa(q, k, v, causal)
    if not matches(out, right):
        for output, en, zh in forward_mistakes(q, k, v, causal, 4, 7):
            if matches(out, output):
                fail(en, zh, "your output equals what that mistake computes")
        expect(not (causal and torch.isnan(out).any()),
               "With causal=True some outputs are NaN: a row whose keys were all masked so far gives exp(-inf - (-inf)); query i sees key j iff j <= i + (T_k - T_q) (key 0 is seen by every query), and a key loop that does not start at key 0 must keep m = -inf rows at l = 0 as online_softmax does.",
               "causal=True 时有些输出是 NaN：到目前为止键全被屏蔽的行会得到 exp(-inf - (-inf))；查询 i 当且仅当 j <= i + (T_k - T_q) 时能看到键 j（键 0 每个查询都能看到），而不从键 0 开始的键循环必须像 online_softmax 那样让 m = -inf 的行保持 l = 0。",
               f"{int(torch.isnan(out).any(-1).sum())} of {out[..., 0].numel()} query rows are NaN")
        expect(not leaked,
               "Changing only keys and values that come after some queries changed those queries' outputs: the causal mask lets a query see later keys; block key j exactly when j > i + (T_k - T_q).",
               "只改变位于某些查询之后的键和值，却改变了这些查询的输出：因果掩码让查询看到了之后的键；应当恰好在 j > i + (T_k - T_q) 时屏蔽键 j。",
               "keys 24 to 28 changed; queries 0 to 7 see keys up to 23 only")
    expect_close(out, right,
                 f"out differs from F.scaled_dot_product_attention (causal={causal}, block_q=4, block_k=7, T_q=13, T_k=29): check the running maximum, the rescaling and the final division.",
                 f"out 与 F.scaled_dot_product_attention 不同（causal={causal}，block_q=4，block_k=7，T_q=13，T_k=29）：请检查运行最大值、重新缩放和最后的除法。")


def check_flash_attention_forward(flash_attention_forward):
    fn, who = flash_attention_forward, "flash_attention_forward"
    B, H, T_q, T_k, d, d_v = 2, 3, 13, 29, 8, 5
    q, k, v = heads_layout(B, H, T_q, d, 142), heads_layout(B, H, T_k, d, 143), heads_layout(B, H, T_k, d_v, 144)
    q = q * torch.linspace(0.5, 6.0, T_q)[:, None]  # growing scores: the maximum changes from tile to tile
    copies = [t.clone() for t in (q, k, v)]
    later_k, later_v = k.clone(), v.clone()  # keys 24.. are after queries 0..7 (offset T_k - T_q = 16)
    later_k[..., 24:, :], later_v[..., 24:, :] = randn(B, H, 5, d, seed=149) * 3, randn(B, H, 5, d_v, seed=149) * 3
    sq, sk, sv = randn(1, 2, 48, 4, seed=145), randn(1, 2, 80, 4, seed=146), randn(1, 2, 80, 3, seed=147)
    eq = randn(1, 1, 64, 4, seed=148)
    runs, work = {}, {}
    watches = {(8, 16): TileWatch(), (32, 4): TileWatch()}  # block_q below and above block_k: each used where it belongs
    en = f"This exercise asks you to write {who} yourself, tile by tile, not to call F.scaled_dot_product_attention or the course's reference in utils."
    zh = f"本练习要求你逐个分块自己实现 {who}，而不是调用 F.scaled_dot_product_attention 或 utils 中课程的参考实现。"
    shapes = (B, H, T_q, d_v), (B, H, T_q)
    with own_work(fn, who, en=en, zh=zh):
        for causal in (False, True):
            runs[causal] = expect_pair(call(fn, q, k, v, causal=causal, block_q=4, block_k=7, name=who), who, *shapes)
        later = expect_pair(call(fn, q, later_k, later_v, causal=True, block_q=4, block_k=7, name=who), who, *shapes)
        default = expect_pair(call(fn, q, k, v, True, name=who), who, *shapes)
        big = expect_pair(call(fn, q * 30, k, v, causal=True, block_q=5, block_k=6, name=who), who, *shapes)
        double = call(fn, q.double(), k.double(), v.double(), causal=True, block_q=4, block_k=7, name=who)
        decode = expect_pair(call(fn, q[..., -1:, :], k, v, causal=True, block_q=4, block_k=7, name=who), who, (B, H, 1, d_v), (B, H, 1))
        for (bq, bk), watch in watches.items():
            with watch:
                call(fn, sq, sk, sv, causal=True, block_q=bq, block_k=bk, name=who)
        for causal in (False, True):
            runs[f"64 {causal}"], work[causal] = work_of(call, fn, eq, eq, eq, causal=causal, block_q=8, block_k=8, name=who)
    expect(all(torch.equal(a, b) for a, b in zip((q, k, v), copies)), f"{who} changed q, k or v in place: leave the inputs as they are.",
           f"{who} 原地修改了 q、k 或 v：请保持输入不变。")
    leaked = not torch.allclose(later[0][..., :8, :], runs[True][0][..., :8, :], atol=1e-6, rtol=1e-5, equal_nan=True)
    for causal in (False, True):
        out, lse = runs[causal]
        _expect_out(out, q, k, v, causal, causal and leaked)
        right_lse = torch.logsumexp(scaled_scores(q, k, causal), -1)
        expect_known(lse, right_lse, lambda: lse_mistakes(q, k, causal),
                     f"lse differs from torch.logsumexp of the scaled scores (causal={causal}): lse = m + log(l) for each query, over the keys it sees.",
                     f"lse 与缩放后分数的 torch.logsumexp 不同（causal={causal}）：对每个查询，在它能看到的键上 lse = m + log(l)。")
    expect_close(decode[0], sdpa(q[..., -1:, :], k, v, True),
                 "With one query (a decoding step, T_q = 1) and causal=True, the query is the last position and sees every key.",
                 "只有一个查询（解码的一步，T_q = 1）且 causal=True 时，这个查询是最后一个位置，能看到所有的键。")
    expect_close(expect_pair(runs["64 True"], who, (1, 1, 64, 4), (1, 1, 64))[0], sdpa(eq, eq, eq, True),
                 "With T_q = T_k = 64, blocks of 8 and causal=True, out differs from causal attention: mask the tiles on the diagonal.",
                 "T_q = T_k = 64、块大小为 8 且 causal=True 时，out 与因果注意力不同：请给对角线上的分块加掩码。")
    expect_close(default[0], sdpa(q, k, v, True),
                 f"{who} is wrong with its default block sizes (64, 64), larger than T: a block may hold fewer rows than block_q.",
                 f"{who} 在默认分块大小 (64, 64) 下不对（比 T 还大）：一个分块的行数可能少于 block_q。")
    expect(bool(torch.isfinite(big[0]).all() and torch.isfinite(big[1]).all()),
           "Scores in the hundreds give NaN or inf: subtract the running maximum inside exp.",
           "分数达到几百时出现了 NaN 或 inf：请在 exp 里减去运行最大值。")
    expect_close(big[0], sdpa(q * 30, k, v, True), "With large scores out is wrong: keep the running maximum and rescale.",
                 "分数很大时 out 不对：请保持运行最大值并重新缩放。", atol=1e-4)
    expect_dtype(double, ("out", "lse"), who)
    expect_close(double[0], sdpa(q.double(), k.double(), v.double(), True), f"{who} is wrong on float64 inputs.",
                 f"{who} 在 float64 输入上不对。")
    for (bq, bk), watch in watches.items():
        expect_tiles(watch, max(elements(sq, sk, sv), 2 * bq * bk), who, bq, bk)
    expect_skips(work[True], work[False], who, _SQUARE)
    reference = ref.flash_attention_forward  # looked up before own_work blocks it
    with own_work(fn, who, en=en, zh=zh):
        same_as_reference(fn, reference, FAMILIES[who], who)


# flash_attention_backward ----------------------------------------------------------------------
def check_flash_attention_backward(flash_attention_backward):
    fn, who = flash_attention_backward, "flash_attention_backward"
    B, H, T_q, T_k, d, d_v = 2, 3, 13, 29, 8, 5
    q, k, v = heads_layout(B, H, T_q, d, 150), heads_layout(B, H, T_k, d, 151), heads_layout(B, H, T_k, d_v, 152)
    g = heads_layout(B, H, T_q, d_v, 153)  # grad_out as autograd may pass it: not contiguous
    sq, sk, sv, sg = randn(1, 2, 48, 4, seed=154), randn(1, 2, 80, 4, seed=155), randn(1, 2, 80, 3, seed=156), randn(1, 2, 48, 3, seed=157)
    eq, eg = randn(1, 1, 64, 4, seed=158), randn(1, 1, 64, 4, seed=159)
    saved = {causal: ref.flash_attention_forward(q, k, v, causal, 64, 64) for causal in (False, True)}
    small = ref.flash_attention_forward(sq, sk, sv, True, 64, 64)
    square = {causal: ref.flash_attention_forward(eq, eq, eq, causal, 64, 64) for causal in (False, True)}
    runs, work = {}, {}
    watches = {(8, 16): TileWatch(), (32, 4): TileWatch()}  # block_q below and above block_k: each used where it belongs
    en = f"This exercise asks you to write {who} yourself from lse (recomputing each tile), not to call autograd, F.scaled_dot_product_attention or the course's reference in utils."
    zh = f"本练习要求你根据 lse 自己实现 {who}（重新计算每个分块），而不是调用 autograd、F.scaled_dot_product_attention 或 utils 中课程的参考实现。"
    copies = [t.clone() for t in (q, k, v, g, *saved[True])]
    with own_work(fn, who, en=en, zh=zh):
        for causal in (False, True):
            runs[causal] = call(fn, q, k, v, *saved[causal], g, causal=causal, block_q=4, block_k=7, name=who)
        default = call(fn, q, k, v, *saved[True], g, True, name=who)
        double = call(fn, q.double(), k.double(), v.double(), *(t.double() for t in saved[True]), g.double(), True,
                      block_q=4, block_k=7, name=who)
        for (bq, bk), watch in watches.items():
            with watch:
                call(fn, sq, sk, sv, *small, sg, causal=True, block_q=bq, block_k=bk, name=who)
        for causal in (False, True):
            _, work[causal] = work_of(call, fn, eq, eq, eq, *square[causal], eg, causal=causal, block_q=8, block_k=8, name=who)
    expect(all(torch.equal(a, b) for a, b in zip((q, k, v, g, *saved[True]), copies)),
           f"{who} changed one of its inputs in place (q, k, v, out, lse or grad_out): accumulate into new tensors such as torch.zeros_like(q).",
           f"{who} 原地修改了某个输入（q、k、v、out、lse 或 grad_out）：请累加到新张量中，例如 torch.zeros_like(q)。")
    for causal, result in runs.items():
        expect_grads(result, q, k, v)
        right = autograd_grads(q, k, v, g, causal)
        mistakes = lambda: backward_mistakes(q, k, v, *saved[causal], g, causal, 4, 7)
        for i, (name, ours, expected) in enumerate(zip(("dq", "dk", "dv"), result, right)):
            expect_known(ours, expected, lambda: [(grads[i], m_en, m_zh) for grads, m_en, m_zh in mistakes()],
                         f"{name} differs from autograd's (causal={causal}, block_q=4, block_k=7, T_q=13, T_k=29): P = exp(s - lse), dS = P * (dP - D), then dQ += dS K / sqrt(d), dK += dSᵀ Q / sqrt(d), dV += Pᵀ dO.",
                         f"{name} 与 autograd 的结果不同（causal={causal}，block_q=4，block_k=7，T_q=13，T_k=29）：P = exp(s - lse)，dS = P * (dP - D)，然后 dQ += dS K / sqrt(d)，dK += dSᵀ Q / sqrt(d)，dV += Pᵀ dO。",
                         atol=1e-4, rtol=1e-4)
    expect_grads(default, q, k, v)
    for name, ours, expected in zip(("dq", "dk", "dv"), default, autograd_grads(q, k, v, g, True)):
        expect_close(ours, expected, f"{who} is wrong with its default block sizes (64, 64), larger than T: {name} differs from autograd's.",
                     f"{who} 在默认分块大小 (64, 64)（比 T 还大）下不对：{name} 与 autograd 的结果不同。", atol=1e-4, rtol=1e-4)
    expect_dtype(double, ("dq", "dk", "dv"), who)
    for name, ours, expected in zip(("dq", "dk", "dv"), double, autograd_grads(q.double(), k.double(), v.double(), g.double(), True)):
        expect_close(ours, expected, f"{who} is wrong on float64 inputs: {name} differs from autograd's.",
                     f"{who} 在 float64 输入上不对：{name} 与 autograd 的结果不同。", atol=1e-4, rtol=1e-4)
    for (bq, bk), watch in watches.items():
        expect_tiles(watch, max(elements(sq, sk, sv), 2 * bq * bk), who, bq, bk)
    expect_skips(work[True], work[False], who, _SQUARE)
    reference = ref.flash_attention_backward  # looked up before own_work blocks it
    with own_work(fn, who, en=en, zh=zh):
        same_as_reference(fn, reference, FAMILIES[who], who)


# FlashAttention --------------------------------------------------------------------------------
def check_FlashAttention(FlashAttention):
    who = "FlashAttention"
    en = f"This exercise asks you to write {who} yourself, not to subclass or call the course's reference in utils or F.scaled_dot_product_attention."
    zh = f"本练习要求你自己实现 {who}，而不是继承或调用 utils 中课程的参考实现或 F.scaled_dot_product_attention。"
    expect_autograd_function(FlashAttention, who, (), en, zh)  # the contract's forbids
    B, H, T_q, T_k, d, d_v = 1, 2, 70, 90, 4, 3  # more than one tile of 64
    q, k, v = randn(B, H, T_q, d, seed=160), randn(B, H, T_k, d, seed=161), randn(B, H, T_k, d_v, seed=162)
    g = randn(B, H, T_q, d_v, seed=163)
    big = [randn(1, 1, 200, 4, seed=164 + i).requires_grad_() for i in range(3)]
    small = [randn(1, 2, 3, 4, seed=167).double(), randn(1, 2, 5, 4, seed=168).double(), randn(1, 2, 5, 3, seed=169).double()]
    runs, forward_watch, watch, errors = {}, TileWatch(), TileWatch(), {}
    with own_work(FlashAttention, who, en=en, zh=zh), ran(_learner_backward(FlashAttention)) as backward_ran:
        for causal in (False, True):
            runs[causal] = apply_and_backward(FlashAttention, (q, k, v), g, causal, who)
        in_flight = calls_in_flight(FlashAttention, q, k, v, g, who)
        watched_apply_and_backward(FlashAttention, big, forward_watch, watch, who)
        plain = apply_without_causal(FlashAttention, q, k, v, who)
        for causal in (False, True):
            errors[causal] = directional_error(lambda *x: FlashAttention.apply(*x, causal), small, seed=170)
    expect(backward_ran.count > 0 or _learner_backward(FlashAttention) is None,
           f"{who}.backward must call your flash_attention_backward (exercise 3), as the text asks: that is where the gradients come from.",
           f"{who}.backward 必须调用你自己的 flash_attention_backward（练习 3），正如正文所要求：梯度就是从那里来的。",
           "your flash_attention_backward did not run during backward")
    for causal, (out, grads, saved) in runs.items():
        expect_close(out, sdpa(q, k, v, causal),
                     f"{who}.apply(q, k, v, causal={causal}) differs from F.scaled_dot_product_attention: forward must return the out of flash_attention_forward.",
                     f"{who}.apply(q, k, v, causal={causal}) 与 F.scaled_dot_product_attention 不同：forward 必须返回 flash_attention_forward 的 out。")
        expect_no_probabilities_saved(saved, T_q, T_k, who)
        expect(any(t.numel() == B * H * T_q and t.shape[:2] == (B, H) for t in saved),
               f"{who} must save lse (one number per query) with ctx.save_for_backward(q, k, v, out, lse): backward recomputes the probabilities from it.",
               f"{who} 必须用 ctx.save_for_backward(q, k, v, out, lse) 保存 lse（每个查询一个数）：反向传播由它重新计算概率。",
               f"saved shapes {[tuple(t.shape) for t in saved]}")
        for name, ours, expected in zip(("q", "k", "v"), grads, autograd_grads(q, k, v, g, causal)):
            expect(ours is not None, f"{who}.backward gave no gradient for {name}: return (dq, dk, dv, None), one entry per input of forward.",
                   f"{who}.backward 没有给出 {name} 的梯度：返回 (dq, dk, dv, None)，forward 的每个输入对应一项。")
            expect_close(ours, expected,
                         f"The gradient of {name} differs from autograd's (causal={causal}): backward must call flash_attention_backward with the saved tensors and ctx's causal.",
                         f"{name} 的梯度与 autograd 的结果不同（causal={causal}）：backward 必须用保存的张量和 ctx 中的 causal 调用 flash_attention_backward。",
                         atol=1e-4, rtol=1e-4)
    for name, ours, expected in zip(("q", "k", "v"), in_flight, autograd_grads(q, k, v, g, True)):
        expect(ours is not None and torch.allclose(ours.double(), expected.double(), atol=1e-4, rtol=1e-4),
               f"{who}.backward used what a later call of forward stored: keep causal and the saved tensors on ctx (ctx.causal, ctx.save_for_backward), not on the class or in a global.",
               f"{who}.backward 用了之后一次 forward 调用存下的东西：把 causal 和要保存的张量放在 ctx 上（ctx.causal、ctx.save_for_backward），不要放在类上或全局变量里。",
               f"the gradient of {name} of a causal call, after a non-causal call on other inputs")
    expect(isinstance(plain, torch.Tensor), f"{who}.apply(q, k, v) must work without causal: forward(ctx, q, k, v, causal=False).",
           f"{who}.apply(q, k, v) 在不传 causal 时也必须能用：forward(ctx, q, k, v, causal=False)。")
    expect_close(plain, sdpa(q, k, v, False), f"{who}.apply(q, k, v) must default to causal=False.",
                 f"{who}.apply(q, k, v) 的默认值必须是 causal=False。")
    expect_tiles(forward_watch, max(elements(*big), 64 * 64), f"{who}.forward", 64, 64)
    expect_tiles(watch, max(elements(*big), 64 * 64), f"{who}.backward", 64, 64)
    for causal, error in errors.items():
        expect(error < 1e-5,
               f"In float64 the gradients of {who} disagree with finite differences (causal={causal}), what torch.autograd.gradcheck checks: keep every tensor in the inputs' dtype.",
               f"在 float64 下 {who} 的梯度与有限差分不一致（causal={causal}），而这正是 torch.autograd.gradcheck 检查的：让每个张量保持输入的 dtype。",
               f"largest relative error {error:.2g}")
    reference = _flash_apply(ref.FlashAttention)  # its forward and backward call utils' kernels: no extra blocked here
    with own_work(FlashAttention, who):
        same_as_reference(_flash_apply(FlashAttention), reference, FAMILIES[who], who, grads=True)


def _learner_backward(FlashAttention):
    """The code of the learner's own flash_attention_backward, as the notebook defines it."""
    from autograder.checks import learner_functions
    for f in learner_functions(FlashAttention):
        found = f.__globals__.get("flash_attention_backward")
        if found is not None and hasattr(found, "__code__") and not (getattr(found, "__module__", "") or "").startswith("utils"):
            return found.__code__
    return None


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
