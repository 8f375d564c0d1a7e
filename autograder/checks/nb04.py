"""Hidden checks of notebook 04, causal attention.

Masks are boolean with True = BLOCKED and bottom-right aligned when there are fewer queries
than keys (../../curriculum.md). Outputs are compared with utils.causal and, when they differ,
with the outputs of the usual mistakes (a masked diagonal, an inverted mask, top-left
alignment, masking after the softmax, filling with 0), so that the message names the mistake.

Decision: the mask buffer may be persistent (the default, saved in state_dict) or registered
with persistent=False (as many production models do); what is graded is that it is a buffer,
so that .to() moves it and training never updates it. A float 0/1 buffer like the book's
(torch.triu(torch.ones(...), 1)) is accepted as long as 1 marks the blocked positions.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

import utils.causal as ref
from autograder.checks import (Shortcut, call, expect, expect_close, expect_linear, expect_tensor, fail, forbid,
                               matches, message, own_module, randn)

D_IN, D_OUT, CONTEXT = 5, 3, 6  # non-square projections, head_dim > 1
NEG_INF = float("-inf")



def _own_work(name, fn, extra=()):
    en = f"This exercise asks you to write {name} yourself, not to call utils.causal's {name}."
    zh = f"本练习要求你自己实现 {name}，而不是调用 utils.causal 中的 {name}。"
    if fn is getattr(ref, name):  # `from utils.causal import ...` in place of a body
        raise Shortcut(message(en, zh))
    return forbid([(ref, name), *extra], [fn], en, zh)


# causal_mask -----------------------------------------------------------------------------
def check_causal_mask(causal_mask):
    with _own_work("causal_mask", causal_mask):
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


def check_mask_and_renormalize(mask_and_renormalize):
    scores = randn(2, 4, 7, seed=41) * 2  # batch items differ; T_q != T_k
    weights = torch.softmax(scores, dim=-1)
    mask = ref.causal_mask(4, 7)
    square_w = torch.softmax(randn(3, 5, 5, seed=42), dim=-1)
    square_m = ref.causal_mask(5)
    w_copy = weights.clone()
    with _own_work("mask_and_renormalize", mask_and_renormalize):
        out = call(mask_and_renormalize, weights, mask, name="mask_and_renormalize")
        square = call(mask_and_renormalize, square_w, square_m, name="mask_and_renormalize")
    expect_tensor(out, "mask_and_renormalize's result", "mask_and_renormalize 的结果")
    expect(torch.equal(weights, w_copy),
           "mask_and_renormalize changed its input in place: use masked_fill (no underscore) so the caller's weights stay intact.",
           "mask_and_renormalize 原地修改了输入：使用 masked_fill（不带下划线），保持调用者的权重不变。")
    expected = ref.mask_and_renormalize(weights, mask)
    expect(out.shape == expected.shape,
           "mask_and_renormalize must return weights of the same shape as its input.",
           "mask_and_renormalize 必须返回与输入形状相同的权重。", f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    for variant, en, zh in _renormalize_variants(weights, mask):
        if matches(out, variant):
            fail(f"mask_and_renormalize has a known mistake: {en}.", f"mask_and_renormalize 有一个常见错误：{zh}。")
    expect_close(out.sum(-1), torch.ones(2, 4),
                 "Every row of the renormalized weights must sum to 1: divide the zeroed weights by their row sums (dim=-1, keepdim=True).",
                 "重新归一化后的每一行之和必须为 1：把置零后的权重除以它们的行和（dim=-1，keepdim=True）。")
    expect_close(out, expected,
                 "mask_and_renormalize is wrong: zero the weights where the mask is True, then divide each row by its sum.",
                 "mask_and_renormalize 不对：把掩码为 True 处的权重置零，然后把每一行除以它的和。")
    expect_close(square, ref.mask_and_renormalize(square_w, square_m),
                 "mask_and_renormalize is wrong for a batch of square (5, 5) weights: the (T, T) mask must apply to every batch item.",
                 "对一批方形 (5, 5) 权重，mask_and_renormalize 不对：(T, T) 的掩码必须作用于每个样本。")


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
    with _own_work("masked_softmax", masked_softmax):
        out = call(masked_softmax, scores, mask, name="masked_softmax")
        cols = call(masked_softmax, scores.transpose(-2, -1), mask.T, dim=-2, name="masked_softmax")
    expect_tensor(out, "masked_softmax's result", "masked_softmax 的结果")
    expect(torch.equal(scores, s_copy),
           "masked_softmax changed the caller's scores in place: use masked_fill, not masked_fill_, on an input you do not own.",
           "masked_softmax 原地修改了调用者的分数：对不属于你的输入，用 masked_fill 而不是 masked_fill_。")
    expected = ref.masked_softmax(scores, mask)
    expect(out.shape == expected.shape, "masked_softmax must return weights of the same shape as the scores.",
           "masked_softmax 必须返回与分数形状相同的权重。", f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    for variant, en, zh in _softmax_variants(scores, mask):
        if matches(out, variant):
            fail(f"masked_softmax has a known mistake: {en}.", f"masked_softmax 有一个常见错误：{zh}。")
    expect(bool(torch.isfinite(out).all()),
           "masked_softmax gives NaN or inf on a row of large scores: subtract the row maximum before exp, or use torch.softmax.",
           "masked_softmax 在一行很大的分数上得到 NaN 或 inf：在 exp 之前减去行最大值，或者使用 torch.softmax。")
    expect(bool((out.detach()[mask.expand_as(out)] == 0).all()),
           "Blocked positions must get weight exactly 0: fill their scores with -inf so that exp gives 0.",
           "被屏蔽的位置的权重必须恰好为 0：把它们的分数填成 -inf，这样 exp 会得到 0。")
    expect_close(out, expected,
                 "masked_softmax is wrong: fill the scores with -inf where the mask is True, then take the softmax along dim.",
                 "masked_softmax 不对：在掩码为 True 处把分数填成 -inf，然后沿 dim 做 softmax。")
    expect_close(cols, expected.transpose(-2, -1),
                 "masked_softmax ignores its dim argument: with dim=-2 each column must sum to 1 (pass dim on to the softmax).",
                 "masked_softmax 忽略了 dim 参数：dim=-2 时每一列之和必须为 1（把 dim 传给 softmax）。")


# CausalSelfAttention (its helpers are shared with notebook 05) ---------------------------
def weights_for(seed, d_in=D_IN, d_out=D_OUT):
    """An nn.Linear-shaped (d_out, d_in) weight, built here, never from the learner's RNG."""
    return randn(d_out, d_in, seed=seed) / math.sqrt(d_in)



def load_projections(module, name, d_in=D_IN, d_out=D_OUT, bias=False, seed=60, weights=None):
    """Check the three nn.Linear layers and copy deterministic weights into them."""
    layers = {}
    for i, attr in enumerate(("W_query", "W_key", "W_value")):
        layer = expect_linear(module, attr, d_in, d_out, bias, name)
        with torch.no_grad():
            layer.weight.copy_(weights[attr] if weights else weights_for(seed + i, d_in, d_out))
            if bias:
                layer.bias.copy_(torch.linspace(-0.5, 0.5, d_out) * (i + 1))
        layers[attr] = layer
    return layers


def check_mask_buffer(module, name, context_length):
    buffers = dict(module.named_buffers())
    value = getattr(module, "mask", None)
    if "mask" not in buffers:
        if isinstance(value, nn.Parameter):
            fail(f"{name}.mask is an nn.Parameter, so the optimizer would train it: register it with self.register_buffer('mask', ...).",
                 f"{name}.mask 是 nn.Parameter，优化器会训练它：请用 self.register_buffer('mask', ...) 注册它。")
        fail(f"{name}.mask must be a registered buffer, so that .to() moves it with the weights and state_dict() saves it: use self.register_buffer('mask', ...).",
             f"{name}.mask 必须是注册的缓冲区，这样 .to() 会把它和权重一起移动，state_dict() 也会保存它：请使用 self.register_buffer('mask', ...)。",
             f"buffers: {sorted(buffers)}, mask is {type(value).__name__}")
    mask = buffers["mask"]
    expect(tuple(mask.shape) == (context_length, context_length),
           f"{name}.mask must cover the whole context: shape (context_length, context_length), sliced in forward for shorter inputs.",
           f"{name}.mask 必须覆盖整个上下文：形状为 (context_length, context_length)，在 forward 中对较短的输入切片。",
           f"shape {tuple(mask.shape)}, context_length={context_length}")
    right = ref.causal_mask(context_length)
    if torch.equal(mask.bool(), torch.ones_like(right).triu(0)):
        fail(f"In {name}.mask the diagonal is masked: a token may attend to itself, so block only the keys j > i (triu with diagonal=1).",
             f"{name}.mask 中对角线被屏蔽了：词元可以关注自己，所以只屏蔽 j > i 的键（triu 使用 diagonal=1）。")
    if torch.equal(mask.bool(), ~right):
        fail(f"{name}.mask marks the allowed keys: the course's convention is True (or 1) = BLOCKED, the keys above the diagonal.",
             f"{name}.mask 标记的是允许的键：本课程的约定是 True（或 1）= 被屏蔽，即对角线以上的键。")
    expect(torch.equal(mask.bool(), right),
           f"{name}.mask must be the causal mask of context_length tokens: True above the diagonal.",
           f"{name}.mask 必须是 context_length 个词元的因果掩码：对角线以上为 True。", f"got {mask.int().tolist()}")


def _attention_variants(q, k, v):
    """What the usual masking mistakes compute on (B, T, d) tensors."""
    T = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
    right = ref.causal_mask(T)
    soft = lambda m, fill=NEG_INF: torch.softmax(scores.masked_fill(m, fill), -1) @ v
    return [
        (soft(torch.ones(T, T, dtype=torch.bool).triu(0)), "the diagonal is masked, so the first token has nothing to attend to (NaN): a token may attend to itself, block only j > i",
         "对角线被屏蔽了，第一个词元无处可关注（NaN）：词元可以关注自己，只屏蔽 j > i"),
        (soft(~right), "the mask is inverted: True means BLOCKED, the keys after the query", "掩码是反的：True 表示被屏蔽，即查询之后的键"),
        (soft(right, 0.0), "the blocked scores were filled with 0, and exp(0) = 1 still gives them weight: fill with -inf",
         "被屏蔽的分数填成了 0，而 exp(0) = 1 仍会给它们权重：应填 -inf"),
        ((torch.softmax(scores, -1).masked_fill(right, 0.0)) @ v, "the weights were masked after the softmax without renormalizing: fill the scores with -inf before the softmax",
         "权重在 softmax 之后才被屏蔽且没有重新归一化：应在 softmax 之前把分数填成 -inf"),
        (torch.softmax(scores, -1) @ v, "nothing is masked, so every token sees the future: apply the causal mask to the scores",
         "没有任何屏蔽，每个词元都能看到未来：把因果掩码应用到分数上"),
        (torch.softmax((q @ k.transpose(-2, -1)).masked_fill(right, NEG_INF), -1) @ v,
         "the scores are not scaled: divide Q K^T by sqrt(d_out) before the softmax", "分数没有缩放：在 softmax 之前把 Q K^T 除以 sqrt(d_out)"),
    ]


def expected_causal(layers, x):
    with torch.no_grad():
        q, k, v = (layers[n](x) for n in ("W_query", "W_key", "W_value"))
    T = x.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
    return ref.masked_softmax(scores, ref.causal_mask(T)) @ v, (q, k, v)


def expect_causal_output(out, layers, x, name):
    expected, (q, k, v) = expected_causal(layers, x)
    expect_tensor(out, f"{name}'s output", f"{name} 的输出")
    expect(out.shape == expected.shape,
           f"{name} must map (B, T, d_in) to (B, T, d_out).", f"{name} 必须把 (B, T, d_in) 映射为 (B, T, d_out)。",
           f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    if matches(out, expected):
        return
    for variant, en, zh in _attention_variants(q, k, v):
        if matches(out, variant):
            fail(f"{name} has a known mistake: {en}.", f"{name} 有一个常见错误：{zh}。")
    expect_close(out, expected,
                 f"{name} is wrong: softmax of (Q K^T / sqrt(d_out)) with -inf above the diagonal, then times V.",
                 f"{name} 不对：对上三角填 -inf 后的 (Q K^T / sqrt(d_out)) 做 softmax，再乘以 V。")


def run_shorter(module, x, name):
    """Call the module on fewer tokens than its context; a crash here means the mask was not sliced."""
    try:
        return module(x)
    except AssertionError:
        raise
    except Exception as e:
        fail(f"{name} crashes on an input shorter than context_length: slice the buffer to the input, self.mask[:T, :T].",
             f"{name} 在比 context_length 短的输入上报错：把缓冲区切成与输入一样大，self.mask[:T, :T]。",
             f"{type(e).__name__}: {e}")


def _forbid_module(module, cls_ref, name):
    return forbid([(cls_ref, "forward"), (F, "scaled_dot_product_attention")], [type(module).forward],
                  f"{name} must compute masked attention itself, not call F.scaled_dot_product_attention or utils.",
                  f"{name} 必须自己计算带掩码的注意力，不能调用 F.scaled_dot_product_attention 或 utils。")


def check_CausalSelfAttention(CausalSelfAttention):
    name = "CausalSelfAttention"
    for bias in (False, True):
        module = own_module(CausalSelfAttention, D_IN, D_OUT, CONTEXT, qkv_bias=bias)
        layers = load_projections(module, name, bias=bias)
        check_mask_buffer(module, name, CONTEXT)
        x = randn(2, CONTEXT, D_IN, seed=61)
        with _forbid_module(module, ref.CausalSelfAttention, name):
            out = call(module, x, name=f"{name}.forward")
            expect_causal_output(out, layers, x, name)
            short = randn(3, 4, D_IN, seed=62)
            expect_causal_output(run_shorter(module, short, name), layers, short, name)
            future = x.clone()
            future[:, 3:] = randn(2, CONTEXT - 3, D_IN, seed=63)
            changed = call(module, future, name=f"{name}.forward")
            expect_close(changed[:, :3], out[:, :3],
                         f"The outputs of the first 3 tokens changed when only later tokens changed: {name} lets queries see the future.",
                         f"只改变后面的词元时，前 3 个词元的输出却变了：{name} 让查询看到了未来。")
            try:
                module(randn(1, CONTEXT + 1, D_IN, seed=64))
            except ValueError:
                pass
            except AssertionError:
                raise
            except Exception as e:
                fail(f"{name} must raise ValueError (with a message) for more than context_length tokens, not {type(e).__name__}: check T first.",
                     f"输入超过 context_length 个词元时，{name} 必须抛出 ValueError（附带说明），而不是 {type(e).__name__}：先检查 T。",
                     f"{type(e).__name__}: {e}")
            else:
                fail(f"{name} must raise ValueError for an input longer than context_length: there is no mask for those positions.",
                     f"输入长于 context_length 时，{name} 必须抛出 ValueError：这些位置没有掩码。")
    moved = module.to(torch.float64)
    expect(isinstance(moved, nn.Module) and "mask" in dict(moved.named_buffers()),
           f"{name}.to(float64) must keep the mask as a buffer.", f"{name}.to(float64) 之后掩码必须仍是缓冲区。")
    with torch.no_grad():
        double = call(moved, x.double(), name=f"{name}.forward")
    expect(isinstance(double, torch.Tensor) and double.dtype == torch.float64,
           f"After .to(torch.float64), {name} must compute in float64: build everything from the input and the registered tensors.",
           f"调用 .to(torch.float64) 之后，{name} 必须用 float64 计算：一切都应由输入和已注册的张量构造。")
