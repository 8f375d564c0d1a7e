"""Hidden checks of notebook 05, dropout on attention weights.

Which entries dropout zeroes depends on the random number generator, and the stream differs
across platforms and versions, so nothing here compares masks: the checks measure statistics
on large tensors (kept fraction within ten standard deviations of 1 - p, every survivor equal
to its input divided by 1 - p) and invariants (identity in eval and for p = 0, the same
generator seed gives the same output on one machine). A probe sees inside CausalAttention:
one-hot tokens with a value map [I; I] make both halves of the output equal the attention
weights, so dropout on the weights (halves equal), on the context (halves differ) and on the
scores (rows still sum to 1) tell themselves apart.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

import utils.causal as causal_ref
import utils.dropout as ref
from autograder.checks import (Shortcut, call, expect, expect_close, expect_tensor, fail, forbid, generator,
                               message, own_module, randn)
from autograder.checks import nb04

_DROPOUT_TARGETS = [(F, "dropout"), (nn, "Dropout"), (torch, "dropout"), (torch, "dropout_"),
                    (torch, "native_dropout"), (ref, "attention_dropout")]
_BY_HAND = ("This exercise asks you to write dropout by hand (a random keep mask and a rescaling), not to call F.dropout, nn.Dropout, torch.dropout or utils.",
            "本练习要求你手写 dropout（随机保留掩码加上重新缩放），而不是调用 F.dropout、nn.Dropout、torch.dropout 或 utils。")


# attention_dropout -----------------------------------------------------------------------
def _bad_p(attention_dropout, weights, p):
    try:
        attention_dropout(weights, p, training=True, generator=generator(79))
    except ValueError:
        return
    except (Shortcut, AssertionError):
        raise
    except Exception as e:
        fail(f"attention_dropout(p={p}) must raise ValueError, not {type(e).__name__}: check 0 <= p < 1 first.",
             f"attention_dropout(p={p}) 必须抛出 ValueError，而不是 {type(e).__name__}：先检查 0 <= p < 1。",
             f"{type(e).__name__}: {e}")
    fail(f"attention_dropout must raise ValueError for p={p}: a probability needs 0 <= p < 1 (p = 1 would divide by 0).",
         f"当 p={p} 时 attention_dropout 必须抛出 ValueError：概率需满足 0 <= p < 1（p = 1 会除以 0）。")


def _expect_inverted_dropout(out, weights, p, label):
    """Kept fraction about 1 - p and every survivor equal to weight / (1 - p)."""
    kept = out.detach() != 0
    frac = float(kept.float().mean())
    evidence = f"{label}: kept fraction {frac:.3f}, expected {1 - p:.3f}"
    if abs(frac - p) < 0.02 and abs(p - 0.5) > 0.05:
        fail("Your dropout keeps each weight with probability p instead of 1 - p: p is the probability of DROPPING (keep where rand >= p).",
             "你的 dropout 以概率 p 保留每个权重，而不是 1 - p：p 是被丢弃的概率（rand >= p 时保留）。", evidence)
    if frac > 0.999:
        fail("No weight was dropped in training mode: zero each weight with probability p when training=True.",
             "训练模式下没有任何权重被丢弃：当 training=True 时，以概率 p 把每个权重置零。", evidence)
    expect(abs(frac - (1 - p)) < 0.02,
           f"Dropout with p={p} must zero about a fraction p of the weights, each independently.",
           f"p={p} 的 dropout 必须把大约比例为 p 的权重置零，且每个权重相互独立。", evidence)
    ratio = out.detach()[kept] / weights[kept]
    if torch.allclose(ratio, torch.ones_like(ratio), rtol=1e-4, atol=1e-6):
        fail("The surviving weights are not scaled by 1/(1-p): without it the expected value of every weight shrinks by (1 - p) in training and eval sees larger weights.",
             "保留下来的权重没有乘以 1/(1-p)：否则训练时每个权重的期望都缩小为 (1 - p) 倍，评估时看到的权重更大。", label)
    if torch.allclose(ratio, torch.full_like(ratio, 1 - p), rtol=1e-4, atol=1e-6):
        fail("The surviving weights were multiplied by (1 - p): inverted dropout divides them by (1 - p), so their expected value stays the same.",
             "保留下来的权重被乘以了 (1 - p)：反向 dropout 应除以 (1 - p)，这样期望值保持不变。", label)
    expect_close(ratio, torch.full_like(ratio, 1 / (1 - p)),
                 "Every surviving weight must equal its input divided by (1 - p) (inverted dropout).",
                 "每个保留下来的权重必须等于它的输入除以 (1 - p)（反向 dropout）。", atol=1e-5, rtol=1e-4)
    return kept


def check_attention_dropout(attention_dropout):
    weights = torch.rand(4, 2, 100, 250, generator=generator(70)) + 0.5  # 200,000 distinct nonzero weights
    before = weights.clone()
    if attention_dropout is ref.attention_dropout:
        raise Shortcut(message(*_BY_HAND))
    with forbid(_DROPOUT_TARGETS, [attention_dropout], *_BY_HAND):
        out = call(attention_dropout, weights, 0.3, training=True, generator=generator(71), name="attention_dropout")
        again = call(attention_dropout, weights, 0.3, training=True, generator=generator(71), name="attention_dropout")
        other = call(attention_dropout, weights, 0.3, training=True, generator=generator(72), name="attention_dropout")
        half = call(attention_dropout, weights, 0.5, generator=generator(73), name="attention_dropout")
        in_eval = call(attention_dropout, weights, 0.3, training=False, generator=generator(74), name="attention_dropout")
        no_p = call(attention_dropout, weights, 0.0, training=True, generator=generator(75), name="attention_dropout")
        for bad in (-0.1, 1.0, 1.5):
            _bad_p(attention_dropout, weights, bad)
    expect_tensor(out, "attention_dropout's result", "attention_dropout 的结果")
    expect(out.shape == weights.shape, "attention_dropout must return a tensor of the same shape as the weights.",
           "attention_dropout 必须返回与权重形状相同的张量。", f"shape {tuple(out.shape)}, expected {tuple(weights.shape)}")
    expect(torch.equal(weights, before),
           "attention_dropout changed the weights in place: return a new tensor (weights * keep / (1 - p)), the caller still needs its weights.",
           "attention_dropout 原地修改了权重：请返回一个新张量（weights * keep / (1 - p)），调用者还需要原来的权重。")
    expect(isinstance(in_eval, torch.Tensor) and torch.equal(in_eval, weights),
           "With training=False dropout must do nothing and return the weights unchanged: evaluation is deterministic.",
           "当 training=False 时 dropout 不应做任何事，应原样返回权重：评估是确定性的。")
    expect(isinstance(no_p, torch.Tensor) and torch.allclose(no_p, weights),
           "With p = 0 dropout must return the weights unchanged.", "p = 0 时 dropout 必须原样返回权重。")
    kept = _expect_inverted_dropout(out, weights, 0.3, "p=0.3")
    _expect_inverted_dropout(half, weights, 0.5, "p=0.5")
    rows = kept.reshape(-1, kept.shape[-1])
    expect(float((rows[1:] == rows[:1]).all(-1).float().mean()) < 0.1,
           "Every weight must be dropped independently: draw a random number per entry, with the weights' full shape, not one mask per row shared by all rows.",
           "每个权重都必须独立地被丢弃：按权重的完整形状为每个元素抽一个随机数，而不是让所有行共用一个掩码。")
    expect(torch.equal(out, again) and not torch.equal(out, other),
           "attention_dropout must draw its random numbers from the generator argument (torch.rand(..., generator=generator)): the same seed must give the same mask.",
           "attention_dropout 必须从 generator 参数中抽取随机数（torch.rand(..., generator=generator)）：相同的种子必须给出相同的掩码。")


# CausalAttention -------------------------------------------------------------------------
def _probe(CausalAttention, p, T=8, batch=1000):
    """One-hot tokens, value map [I; I]: both output halves equal the (dropped) weights."""
    module = own_module(CausalAttention, T, 2 * T, T, p)
    weights = {"W_query": nb04.weights_for(90, T, 2 * T) * 3, "W_key": nb04.weights_for(91, T, 2 * T) * 3,
               "W_value": torch.cat([torch.eye(T), torch.eye(T)])}
    nb04.load_projections(module, "CausalAttention", d_in=T, d_out=2 * T, weights=weights)
    x = torch.eye(T).expand(batch, T, T).contiguous()
    q, k = x[0] @ weights["W_query"].T, x[0] @ weights["W_key"].T
    expected = causal_ref.masked_softmax(q @ k.T / math.sqrt(2 * T), causal_ref.causal_mask(T))
    module.train()
    return module, x, expected


def check_CausalAttention(CausalAttention):
    name = "CausalAttention"
    D_IN, D_OUT, CONTEXT = nb04.D_IN, nb04.D_OUT, nb04.CONTEXT
    for bias in (False, True):
        module = own_module(CausalAttention, D_IN, D_OUT, CONTEXT, 0.3, qkv_bias=bias)
        layers = nb04.load_projections(module, name, bias=bias)
        nb04.check_mask_buffer(module, name, CONTEXT)
        drops = [m for m in module.modules() if isinstance(m, nn.Dropout)]
        expect(drops, f"{name} must hold an nn.Dropout(dropout) layer, so that model.train() and model.eval() switch it on and off.",
               f"{name} 必须包含一个 nn.Dropout(dropout) 层，这样 model.train() 和 model.eval() 才能开关它。",
               f"modules: {sorted({type(m).__name__ for m in module.modules()})}")
        expect(any(abs(m.p - 0.3) < 1e-9 for m in drops),
               f"{name}'s nn.Dropout must use the dropout rate passed to __init__.",
               f"{name} 的 nn.Dropout 必须使用传给 __init__ 的 dropout 比例。", f"dropout=0.3, nn.Dropout p={[m.p for m in drops]}")
        module.eval()
        x = randn(2, CONTEXT, D_IN, seed=80)
        short = randn(3, 4, D_IN, seed=81)
        with nb04._forbid_module(module, ref.CausalAttention, name):
            first = call(module, x, name=f"{name}.forward")
            second = call(module, x, name=f"{name}.forward")
            expect_tensor(first, f"{name}'s output", f"{name} 的输出")
            expect(torch.equal(first, second),
                   f"In eval() mode {name} must be deterministic: dropout is still active, use the nn.Dropout module (it reads self.training), not F.dropout(..., training=True).",
                   f"在 eval() 模式下 {name} 必须是确定性的：dropout 仍在起作用，请使用 nn.Dropout 模块（它读取 self.training），而不是 F.dropout(..., training=True)。")
            nb04.expect_causal_output(first, layers, x, name)
            nb04.expect_causal_output(nb04.run_shorter(module, short, name), layers, short, name)

    p = 0.3
    module, x, expected = _probe(CausalAttention, p)
    with nb04._forbid_module(module, ref.CausalAttention, name):
        out = call(module, x, name=f"{name}.forward").detach()
    T = expected.shape[-1]
    expect(out.shape == (x.shape[0], T, 2 * T), f"{name} must map (B, T, d_in) to (B, T, d_out).",
           f"{name} 必须把 (B, T, d_in) 映射为 (B, T, d_out)。", f"shape {tuple(out.shape)}")
    if torch.isnan(out).any():
        fail(f"{name} gives NaN in training: dropout was applied to the masked scores (-inf * 0 = NaN); apply it to the weights, after the softmax.",
             f"{name} 在训练时得到 NaN：dropout 被应用到了已屏蔽的分数上（-inf * 0 = NaN）；应在 softmax 之后应用到权重上。")
    left, right = out[..., :T], out[..., T:]
    if not torch.allclose(left, right, atol=1e-6):
        fail(f"{name} applies dropout to the context (after multiplying by the values): drop the attention weights, then compute weights @ values.",
             f"{name} 把 dropout 应用到了上下文向量上（乘以值之后）：应先对注意力权重做 dropout，再计算 weights @ values。")
    allowed = ~causal_ref.causal_mask(T)
    seen = left[:, allowed]                      # (B, allowed entries)
    if float((seen == 0).float().mean()) < 0.01:
        if torch.allclose(left, expected.expand_as(left), atol=1e-5):
            fail(f"In train() mode {name} drops nothing: apply the nn.Dropout layer to the attention weights in forward.",
                 f"在 train() 模式下 {name} 什么都没有丢弃：在 forward 中把 nn.Dropout 层应用到注意力权重上。")
        fail(f"{name} applies dropout to the scores before the softmax, which renormalizes the rows again: apply it to the weights, after the softmax.",
             f"{name} 在 softmax 之前对分数做了 dropout，softmax 又把每行重新归一化了：应在 softmax 之后对权重做 dropout。")
    _expect_inverted_dropout(seen, expected[allowed].expand_as(seen).contiguous(), p, f"{name} in train(), dropout={p}")
