"""Hidden checks of notebook 04, causal attention.

Masks are boolean with True = BLOCKED and bottom-right aligned when there are fewer queries
than keys (CURRICULUM.md). Outputs are compared with utils.causal and, when they differ,
with the outputs of the usual mistakes (a masked diagonal, an inverted mask, top-left
alignment, masking after the softmax, filling with 0), so that the message names the mistake.

Decision: the mask buffer may be persistent (the default, saved in state_dict) or registered
with persistent=False (as many production models do); what is graded is that it is a buffer,
so that .to() moves it and training never updates it. A float 0/1 buffer like the book's
(torch.triu(torch.ones(...), 1)) is accepted as long as 1 marks the blocked positions.
"""
import torch
import torch.nn.functional as F

import utils.causal as ref
from autograder.checks import (graded_checks, call, expect, expect_close, expect_known, expect_tensor, fail, matches, own_module, own_work,
                               randn)
from autograder.checks.nb04.causal_layers import (NEG_INF, converted, expect_causal_output, expect_mask_buffer, expect_too_long_raises,
                                             load_projections, run_shorter, split_dtypes)
from autograder.checks.nb04.contract import CONTEXT, D_IN, D_OUT, FAMILIES
from autograder.checks.core.harness import _where, same_as_reference, same_as_reference_module

# causal_mask -----------------------------------------------------------------------------
def check_causal_mask(causal_mask):
    with own_work(causal_mask, "causal_mask"):
        square = call(causal_mask, 5, name="causal_mask")
        fewer = call(causal_mask, 3, 7, name="causal_mask")
        one = call(causal_mask, 1, 6, name="causal_mask")
        equal = call(causal_mask, 4, 4, device=torch.device("cpu"), name="causal_mask")
        on_cpu = call(causal_mask, 2, 5, device="cpu", name="causal_mask")
    expect_tensor(square, "causal_mask's result", "causal_mask 的结果")
    expect(tuple(square.shape) == (5, 5),
           "causal_mask(5) must return a (5, 5) mask: with num_keys=None there are as many keys as queries.",
           "causal_mask(5) 必须返回 (5, 5) 的掩码：num_keys=None 时键和查询一样多。", f"shape {tuple(square.shape)}")
    expect(square.dtype == torch.bool,
           "The mask must be boolean (True = blocked), so that masked_fill can use it directly: build it with dtype=torch.bool or call .bool().",
           "掩码必须是布尔型（True 表示屏蔽），这样 masked_fill 才能直接使用它：用 dtype=torch.bool 构造或调用 .bool()。",
           f"dtype {square.dtype}")
    right = ref.causal_mask(5)
    if torch.equal(square, torch.ones(5, 5, dtype=torch.bool).triu(0)):
        fail("Your mask blocks the diagonal: a token may attend to itself, so only keys j > i are blocked (triu with diagonal=1).",
             "你的掩码屏蔽了对角线：词元可以关注它自己，只有 j > i 的键才被屏蔽（triu 使用 diagonal=1）。")
    if torch.equal(square, ~right):
        fail("Your mask is inverted: True must mean BLOCKED (the future, above the diagonal), False the keys a query may see.",
             "你的掩码是反的：True 必须表示被屏蔽（未来，即对角线以上），False 表示查询可以看到的键。")
    if torch.equal(square, torch.ones(5, 5, dtype=torch.bool).tril(-1)):
        fail("Your mask blocks the past and keeps the future: True must mark the keys above the diagonal (j > i).",
             "你的掩码屏蔽了过去而保留了未来：True 必须标记对角线以上的键（j > i）。")
    expect(torch.equal(square, right),
           "causal_mask(5) is wrong: entry (i, j) must be True exactly when key j comes after query i (j > i).",
           "causal_mask(5) 不对：当且仅当键 j 在查询 i 之后（j > i）时，(i, j) 处才为 True。",
           f"got {square.int().tolist()}")
    expect(isinstance(fewer, torch.Tensor) and tuple(fewer.shape) == (3, 7),
           "causal_mask(3, 7) must have shape (num_queries, num_keys) = (3, 7).",
           "causal_mask(3, 7) 的形状必须是 (num_queries, num_keys) = (3, 7)。",
           f"shape {tuple(fewer.shape) if isinstance(fewer, torch.Tensor) else type(fewer).__name__}")
    if torch.equal(fewer.bool(), torch.ones(3, 7, dtype=torch.bool).triu(1)):
        fail("With fewer queries than keys your mask is top-left aligned: the 3 queries are the LAST 3 positions, so query i sees keys j <= i + (T_k - T_q) (bottom-right alignment, triu with diagonal=1 + T_k - T_q).",
             "查询少于键时你的掩码是左上对齐的：这 3 个查询是最后 3 个位置，所以查询 i 能看到 j <= i + (T_k - T_q) 的键（右下对齐，triu 使用 diagonal=1 + T_k - T_q）。")
    expect(torch.equal(fewer.bool(), ref.causal_mask(3, 7)) and fewer.dtype == torch.bool,
           "causal_mask(3, 7) is wrong: query i (one of the last 3 positions) may see key j iff j <= i + 4 (bottom-right alignment).",
           "causal_mask(3, 7) 不对：查询 i（最后 3 个位置之一）当且仅当 j <= i + 4 时可以看到键 j（右下对齐）。",
           f"got {fewer.int().tolist()}")
    expect(isinstance(one, torch.Tensor) and tuple(one.shape) == (1, 6) and not one.any(),
           "causal_mask(1, 6) must block nothing: the one new token is the last position and sees every key (the decoding step of a KV cache).",
           "causal_mask(1, 6) 不应屏蔽任何位置：唯一的新词元是最后一个位置，可以看到所有键（KV 缓存的解码步骤）。")
    for m in (equal, on_cpu):
        expect(isinstance(m, torch.Tensor) and m.device.type == "cpu",
               "causal_mask must create the mask on the device it is given (pass device= to the tensor you build).",
               "causal_mask 必须在给定的设备上创建掩码（把 device= 传给你构造的张量）。")
    expect(torch.equal(equal, ref.causal_mask(4)) and torch.equal(on_cpu, ref.causal_mask(2, 5)),
           "causal_mask must give the same mask when a device is passed.",
           "传入 device 时 causal_mask 必须给出同样的掩码。")
    with own_work(causal_mask, "causal_mask"):
        same_as_reference(causal_mask, ref.causal_mask, FAMILIES["causal_mask"], "causal_mask")


# mask_and_renormalize --------------------------------------------------------------------
def _renormalize_variants(weights, mask):
    kept = weights.masked_fill(mask, 0.0)
    flipped = weights.masked_fill(~mask, 0.0)
    return [
        (kept, "the blocked weights were zeroed but the rows were not renormalized: divide each row by its new sum so it sums to 1 again",
         "被屏蔽的权重置零了，但没有重新归一化：把每一行除以它新的和，使它再次和为 1"),
        (flipped / flipped.sum(-1, keepdim=True), "the mask was used the wrong way round: True means BLOCKED, so zero the weights where the mask is True",
         "掩码用反了：True 表示被屏蔽，所以要把掩码为 True 处的权重置零"),
        (kept / kept.sum(-2, keepdim=True), "the weights were renormalized over the queries (dim=-2): each row, one query's weights over the keys (dim=-1), must sum to 1",
         "权重是在查询维 (dim=-2) 上重新归一化的：每一行，即一个查询对所有键 (dim=-1) 的权重，之和必须为 1"),
        (torch.softmax(kept, -1), "a softmax was applied to the zeroed weights: exp(0) = 1, so the blocked keys get weight again; divide by the row sum instead",
         "对置零后的权重又做了 softmax：exp(0) = 1，被屏蔽的键又得到了权重；应改为除以行和"),
    ]


def _explain_renormalized(probe, out, expected):
    """Rows in the right proportions that do not sum to 1: the divisor is not the row sum alone."""
    if not (isinstance(out, torch.Tensor) and out.shape == expected.shape and torch.isfinite(out).all()):
        return None
    out, expected = out.detach().double(), expected.detach().double()
    sums = out.sum(-1, keepdim=True)
    if not ((sums > 0).all() and matches(out / sums, expected)) or matches(sums, torch.ones_like(sums)):
        return None
    en_on, zh_on = _where(probe)
    tiny = probe.axis == "extreme"  # the kept weights are about 1e-7 there
    return (f"mask_and_renormalize's rows do not sum to 1{en_on}: divide the kept weights by their row sum alone"
            + ("; a constant added to the sum (an epsilon against division by zero) is not negligible next to row sums this small." if tiny else "."),
            f"mask_and_renormalize 的行和不为 1{zh_on}：只用行和去除保留的权重"
            + ("；加到行和上的常数（防止除以零的 epsilon）相对这样小的行和不可忽略。" if tiny else "。"))


def check_mask_and_renormalize(mask_and_renormalize):
    scores = randn(2, 4, 7, seed=41) * 2  # batch items differ; T_q != T_k
    weights = torch.softmax(scores, dim=-1)
    mask = ref.causal_mask(4, 7)
    square_w = torch.softmax(randn(3, 5, 5, seed=42), dim=-1)
    square_m = ref.causal_mask(5)
    w_copy = weights.clone()
    with own_work(mask_and_renormalize, "mask_and_renormalize"):
        out = call(mask_and_renormalize, weights, mask, inputs_named=True, name="mask_and_renormalize")
        square = call(mask_and_renormalize, square_w, square_m, inputs_named=True, name="mask_and_renormalize")
    expect_tensor(out, "mask_and_renormalize's result", "mask_and_renormalize 的结果")
    expect(torch.equal(weights, w_copy),
           "mask_and_renormalize changed its input in place: use masked_fill (no underscore) so the caller's weights stay intact.",
           "mask_and_renormalize 原地修改了输入：使用 masked_fill（不带下划线），保持调用者的权重不变。")
    expected = ref.mask_and_renormalize(weights, mask)
    expect(out.shape == expected.shape,
           "mask_and_renormalize must return weights of the same shape as its input.",
           "mask_and_renormalize 必须返回与输入形状相同的权重。", f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    if not any(matches(out, v) for v, _, _ in _renormalize_variants(weights, mask)):
        expect_close(out.sum(-1), torch.ones(2, 4),
                     "Every row of the renormalized weights must sum to 1: divide the zeroed weights by their row sums (dim=-1, keepdim=True).",
                     "重新归一化后的每一行之和必须为 1：把置零后的权重除以它们的行和（dim=-1，keepdim=True）。")
    expect_known(out, expected, [(v, f"mask_and_renormalize has a known mistake: {en}.", f"mask_and_renormalize 有一个常见错误：{zh}。")
                                 for v, en, zh in _renormalize_variants(weights, mask)],
                 "mask_and_renormalize is wrong: zero the weights where the mask is True, then divide each row by its sum.",
                 "mask_and_renormalize 不对：把掩码为 True 处的权重置零，然后把每一行除以它的和。")
    expect_close(square, ref.mask_and_renormalize(square_w, square_m),
                 "mask_and_renormalize is wrong for a batch of square (5, 5) weights: the (T, T) mask must apply to every batch item.",
                 "对一批方形 (5, 5) 权重，mask_and_renormalize 不对：(T, T) 的掩码必须作用于每个样本。")
    with own_work(mask_and_renormalize, "mask_and_renormalize"):
        same_as_reference(mask_and_renormalize, ref.mask_and_renormalize, FAMILIES["mask_and_renormalize"],
                          "mask_and_renormalize", explain=_explain_renormalized, grads=True)


# masked_softmax --------------------------------------------------------------------------
def _softmax_variants(scores, mask):
    return [
        (torch.softmax(scores.masked_fill(mask, 0.0), -1), "the blocked scores were filled with 0, but exp(0) = 1 still gives them weight, so the future leaks: fill with -inf",
         "被屏蔽的分数填成了 0，但 exp(0) = 1 仍会给它们权重，未来的信息因此泄漏：应填 -inf"),
        (torch.softmax(scores, -1).masked_fill(mask, 0.0), "the mask was applied after the softmax without renormalizing, so rows no longer sum to 1: fill the scores with -inf before the softmax",
         "掩码在 softmax 之后才应用且没有重新归一化，所以行和不再为 1：应在 softmax 之前把分数填成 -inf"),
        (torch.softmax(scores.masked_fill(~mask, NEG_INF), -1), "the mask was used the wrong way round: True means BLOCKED, so fill -inf where the mask is True",
         "掩码用反了：True 表示被屏蔽，所以要在掩码为 True 处填 -inf"),
        (torch.softmax(scores, -1), "nothing was masked: fill the scores with -inf where the mask is True before the softmax",
         "什么都没有被屏蔽：在 softmax 之前把掩码为 True 处的分数填成 -inf"),
    ]


def check_masked_softmax(masked_softmax):
    scores = randn(2, 4, 7, seed=43) * 3
    scores[1, 0] += 1000.0  # a row of large scores: the softmax must stay finite
    mask = ref.causal_mask(4, 7)
    s_copy = scores.clone()
    with own_work(masked_softmax, "masked_softmax"):
        out = call(masked_softmax, scores, mask, inputs_named=True, name="masked_softmax")
        cols = call(masked_softmax, scores.transpose(-2, -1), mask.T, dim=-2, inputs_named=True, name="masked_softmax")
    expect_tensor(out, "masked_softmax's result", "masked_softmax 的结果")
    expect(torch.equal(scores, s_copy),
           "masked_softmax changed the caller's scores in place: use masked_fill, not masked_fill_, on an input you do not own.",
           "masked_softmax 原地修改了调用者的分数：对不属于你的输入，用 masked_fill 而不是 masked_fill_。")
    expected = ref.masked_softmax(scores, mask)
    expect(out.shape == expected.shape, "masked_softmax must return weights of the same shape as the scores.",
           "masked_softmax 必须返回与分数形状相同的权重。", f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    mistakes = [(v, f"masked_softmax has a known mistake: {en}.", f"masked_softmax 有一个常见错误：{zh}。")
                for v, en, zh in _softmax_variants(scores, mask)]
    if not any(matches(out, v) for v, _, _ in mistakes):  # an inverted mask leaves a row with NaN: named below
        expect(bool(torch.isfinite(out).all()),
               "masked_softmax gives NaN or inf on a row of large scores: subtract the row maximum before exp, or use torch.softmax.",
               "masked_softmax 在一行很大的分数上得到 NaN 或 inf：在 exp 之前减去行最大值，或者使用 torch.softmax。")
    expect_known(out, expected, mistakes,
                 "masked_softmax is wrong: fill the scores with -inf where the mask is True, then take the softmax along dim.",
                 "masked_softmax 不对：在掩码为 True 处把分数填成 -inf，然后沿 dim 做 softmax。")
    expect(bool((out.detach()[mask.expand_as(out)] == 0).all()),
           "Blocked positions must get weight exactly 0: fill their scores with -inf so that exp gives 0.",
           "被屏蔽的位置的权重必须恰好为 0：把它们的分数填成 -inf，这样 exp 会得到 0。")
    expect_close(cols, expected.transpose(-2, -1),
                 "masked_softmax ignores its dim argument: with dim=-2 each column must sum to 1 (pass dim on to the softmax).",
                 "masked_softmax 忽略了 dim 参数：dim=-2 时每一列之和必须为 1（把 dim 传给 softmax）。")
    with own_work(masked_softmax, "masked_softmax"):
        same_as_reference(masked_softmax, ref.masked_softmax, FAMILIES["masked_softmax"], "masked_softmax", grads=True)


# CausalSelfAttention ---------------------------------------------------------------------
def check_CausalSelfAttention(CausalSelfAttention):
    who = "CausalSelfAttention"
    en = f"{who} must compute masked attention itself, not call F.scaled_dot_product_attention or hand in the course's utils.causal.{who} (extending notebook 02's SelfAttentionV2 is fine)."
    zh = f"{who} 必须自己计算带掩码的注意力，不能调用 F.scaled_dot_product_attention，也不能交上课程的 utils.causal.{who}（继承笔记本 02 的 SelfAttentionV2 是可以的）。"
    x = randn(2, CONTEXT, D_IN, seed=61)
    short = randn(3, 4, D_IN, seed=62)
    future = x.clone()
    future[:, 3:] = randn(2, CONTEXT - 3, D_IN, seed=63)
    for bias in (False, True):
        with own_work(CausalSelfAttention, "CausalSelfAttention", en=en, zh=zh):
            module = own_module(CausalSelfAttention, D_IN, D_OUT, CONTEXT, qkv_bias=bias)
            layers = load_projections(module, who, D_IN, D_OUT, bias=bias)
            expect_mask_buffer(module, who, CONTEXT)
            out = call(module, x, name=f"{who}.forward")
            shorter = run_shorter(module, short, who)
            changed = call(module, future, name=f"{who}.forward")
            expect_too_long_raises(module, randn(1, CONTEXT + 1, D_IN, seed=64), who)
        expect_causal_output(out, layers, x, who)
        expect_causal_output(shorter, layers, short, who)
        expect_close(changed[:, :3], out[:, :3],
                     f"The outputs of the first 3 tokens changed when only later tokens changed: {who} lets queries see the future.",
                     f"只改变后面的词元时，前 3 个词元的输出却变了：{who} 让查询看到了未来。")
    moved = module.to(torch.float64)
    expect(isinstance(moved, torch.nn.Module) and "mask" in dict(moved.named_buffers()),
           f"{who}.to(float64) must keep the mask as a buffer.", f"{who}.to(float64) 之后掩码必须仍是缓冲区。")
    with torch.no_grad(), own_work(CausalSelfAttention, "CausalSelfAttention", en=en, zh=zh):
        double = call(moved, x.double(), name=f"{who}.forward")
    expect(isinstance(double, torch.Tensor) and double.dtype == torch.float64,
           f"After .to(torch.float64), {who} must compute in float64: build everything from the input and the registered tensors.",
           f"调用 .to(torch.float64) 之后，{who} 必须用 float64 计算：一切都应由输入和已注册的张量构造。")
    # qkv_bias=True in float32 (every bias's gradient too), False on the layers moved to another dtype
    plain, typed = split_dtypes(FAMILIES[who])
    references = {dtype: converted(ref.CausalSelfAttention, dtype) for dtype, _ in typed}  # looked up outside own_work
    with own_work(CausalSelfAttention, "CausalSelfAttention", en=en, zh=zh):
        same_as_reference_module(CausalSelfAttention, ref.CausalSelfAttention, (D_IN, D_OUT, CONTEXT), plain, who,
                                 grads=True, ctor_kwargs={"qkv_bias": True})
        for dtype, family in typed:
            same_as_reference_module(converted(CausalSelfAttention, dtype), references[dtype], (D_IN, D_OUT, CONTEXT), family, who,
                                     grads=True)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
