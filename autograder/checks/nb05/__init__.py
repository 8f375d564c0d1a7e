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
from torch import nn

import utils.dropout as ref
from autograder.checks import (graded_checks, call, expect, expect_raises, expect_tensor, generator, own_module, own_work, randn)
from autograder.checks.nb04.causal_layers import (expect_causal_output, expect_dropout_on_weights, expect_inverted_dropout,
                                             expect_mask_buffer, load_projections, modal, probe_tokens, probe_weights, run_shorter)
from autograder.checks.nb05.contract import CONTEXT, D_IN, D_OUT, FAMILIES, kept_as_reference
from autograder.checks.core.harness import same_as_reference, same_as_reference_module

# the calls refused (F.dropout, nn.Dropout, torch.dropout, ...) are the contract's (nb05/contract.py)
_BY_HAND = ("This exercise asks you to write dropout by hand (a random keep mask and a rescaling), not to call F.dropout, nn.Dropout, torch.dropout or utils.",
            "本练习要求你手写 dropout（随机保留掩码加上重新缩放），而不是调用 F.dropout、nn.Dropout、torch.dropout 或 utils。")


# attention_dropout -----------------------------------------------------------------------
def check_attention_dropout(attention_dropout):
    weights = torch.rand(4, 2, 100, 250, generator=generator(70)) + 0.5  # 200,000 distinct nonzero weights
    before = weights.clone()
    with own_work(attention_dropout, "attention_dropout", en=_BY_HAND[0], zh=_BY_HAND[1]):
        out = call(attention_dropout, weights, 0.3, training=True, generator=generator(71), inputs_named=True, name="attention_dropout")
        again = call(attention_dropout, weights, 0.3, training=True, generator=generator(71), inputs_named=True, name="attention_dropout")
        other = call(attention_dropout, weights, 0.3, training=True, generator=generator(72), inputs_named=True, name="attention_dropout")
        half = call(attention_dropout, weights, 0.5, generator=generator(73), inputs_named=True, name="attention_dropout")
        in_eval = call(attention_dropout, weights, 0.3, training=False, generator=generator(74), inputs_named=True, name="attention_dropout")
        with torch.random.fork_rng():  # generator=None draws from the global generator: a new mask each call
            torch.manual_seed(76)
            unseeded = [call(attention_dropout, weights[0, 0], 0.5, training=True, inputs_named=True, name="attention_dropout")
                        for _ in range(2)]
        no_p = call(attention_dropout, weights, 0.0, training=True, generator=generator(75), inputs_named=True, name="attention_dropout")
        for bad in (-0.1, 1.0, 1.5):
            expect_raises(ValueError, attention_dropout, weights, bad, training=True, generator=generator(79),
                          en=f"attention_dropout must raise ValueError for p={bad}: a probability needs 0 <= p < 1 (p = 1 would divide by 0).",
                          zh=f"当 p={bad} 时 attention_dropout 必须抛出 ValueError：概率需满足 0 <= p < 1（p = 1 会除以 0）。")
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
    kept = expect_inverted_dropout(out, weights, 0.3, "p=0.3")
    expect_inverted_dropout(half, weights, 0.5, "p=0.5")
    rows = kept.reshape(-1, kept.shape[-1])
    expect(float((rows[1:] == rows[:1]).all(-1).float().mean()) < 0.1,
           "Every weight must be dropped independently: draw a random number per entry, with the weights' full shape, not one mask per row shared by all rows.",
           "每个权重都必须独立地被丢弃：按权重的完整形状为每个元素抽一个随机数，而不是让所有行共用一个掩码。")
    counts = (~rows).sum(-1).double()  # dropped per row: Binomial(250, 0.3), standard deviation 7.2
    expect(float(counts.std()) > 0.5 * math.sqrt(rows.shape[-1] * 0.3 * 0.7),
           "Every weight must be dropped independently, with probability p: the number dropped per row varies from row to row "
           "(a Bernoulli draw per entry), it is not fixed at p * n.",
           "每个权重都必须以概率 p 独立地被丢弃：每行被丢弃的个数逐行变化（每个元素做一次伯努利抽样），而不是固定为 p * n。",
           f"dropped per row: standard deviation {float(counts.std()):.2f}, expected about {math.sqrt(rows.shape[-1] * 0.21):.2f}")
    expect(all(isinstance(t, torch.Tensor) for t in unseeded) and not torch.equal(*unseeded),
           "Without a generator, each call must draw a new mask from PyTorch's global random numbers (generator=None): "
           "do not fall back to a generator with a fixed seed.",
           "没有传入 generator 时，每次调用都必须从 PyTorch 的全局随机数中抽取新的掩码（generator=None）：不要退回到固定种子的生成器。")
    expect(torch.equal(out, again) and not torch.equal(out, other),
           "attention_dropout must draw its random numbers from the generator argument (torch.rand(..., generator=generator)): the same seed must give the same mask.",
           "attention_dropout 必须从 generator 参数中抽取随机数（torch.rand(..., generator=generator)）：相同的种子必须给出相同的掩码。")
    with own_work(attention_dropout, "attention_dropout", en=_BY_HAND[0], zh=_BY_HAND[1]):
        same_as_reference(attention_dropout, ref.attention_dropout, FAMILIES["attention_dropout"], "attention_dropout",
                          effect=kept_as_reference)


# CausalAttention -------------------------------------------------------------------------
def check_CausalAttention(CausalAttention):
    who = "CausalAttention"
    en = (f"{who} must compute masked attention itself, not call F.scaled_dot_product_attention (its rules: with dropout_p it does this "
          f"exercise's whole job) or hand in the course's utils.dropout.{who} (extending notebook 04's CausalSelfAttention is fine).")
    zh = (f"{who} 必须自己计算带掩码的注意力，不能调用 F.scaled_dot_product_attention（它的规则：配合 dropout_p 它会完成本练习的全部工作），"
          f"也不能交上课程的 utils.dropout.{who}（继承笔记本 04 的 CausalSelfAttention 是可以的）。")
    guard = lambda: own_work(CausalAttention, "CausalAttention", en=en, zh=zh)
    x, short = randn(2, CONTEXT, D_IN, seed=80), randn(3, 4, D_IN, seed=81)
    for bias in (False, True):
        with guard():
            module = own_module(CausalAttention, D_IN, D_OUT, CONTEXT, 0.3, qkv_bias=bias)
            layers = load_projections(module, who, D_IN, D_OUT, bias=bias)
            expect_mask_buffer(module, who, CONTEXT)
            drops = [m for m in module.modules() if isinstance(m, nn.Dropout)]
            expect(drops, f"{who} must hold an nn.Dropout(dropout) layer, so that model.train() and model.eval() switch it on and off.",
                   f"{who} 必须包含一个 nn.Dropout(dropout) 层，这样 model.train() 和 model.eval() 才能开关它。",
                   f"modules: {sorted({type(m).__name__ for m in module.modules()})}")
            expect(any(abs(m.p - 0.3) < 1e-9 for m in drops),
                   f"{who}'s nn.Dropout must use the dropout rate passed to __init__.",
                   f"{who} 的 nn.Dropout 必须使用传给 __init__ 的 dropout 比例。", f"dropout=0.3, nn.Dropout p={[m.p for m in drops]}")
            module.eval()
            first = call(module, x, name=f"{who}.forward")
            second = call(module, x, name=f"{who}.forward")
            shorter = run_shorter(module, short, who)
        expect_tensor(first, f"{who}'s output", f"{who} 的输出")
        expect(torch.equal(first, second),
               f"In eval() mode {who} must be deterministic: dropout is still active, use the nn.Dropout module (it reads self.training), not F.dropout(..., training=True).",
               f"在 eval() 模式下 {who} 必须是确定性的：dropout 仍在起作用，请使用 nn.Dropout 模块（它读取 self.training），而不是 F.dropout(..., training=True)。")
        expect_causal_output(first, layers, x, who)
        expect_causal_output(shorter, layers, short, who)

    # the pinned probes: qkv_bias=True, dropout 0 in train(); the generated points say their mode, dtype and flags.
    # Before the dropout probe, which reads the weights through the output: wrong weights are named as such.
    reference = modal(ref.CausalAttention)  # looked up outside own_work
    with guard():
        same_as_reference_module(modal(CausalAttention), reference, (D_IN, D_OUT, CONTEXT, 0.0), FAMILIES[who], who,
                                 grads=True, ctor_kwargs={"qkv_bias": True})
    p, T = 0.3, 8
    (weights,), expected = probe_weights(T, heads=1)
    with guard():
        module = own_module(CausalAttention, T, 2 * T, T, p)
        load_projections(module, who, T, 2 * T, weights=weights)
        module.train()
        out = call(module, probe_tokens(T), name=f"{who}.forward")
    expect_dropout_on_weights(out, expected, p, who)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
