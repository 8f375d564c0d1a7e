"""What the checks of causal attention layers share (notebooks 04, 05 and 06).

Not a check module: it holds no check_* function of its own, and check modules import it
instead of importing each other. Deterministic Q/K/V weights, the mask buffer, the output of a
causal layer compared with the usual masking mistakes, and a probe that sees where dropout acts.

The dropout probe: one-hot tokens (x = I) and a value map that repeats the identity twice
([I; I] per head) make both halves of each head's output equal that head's attention weights.
Dropout on the weights keeps the halves equal; dropout on the context or on the output does
not; dropout on the scores leaves rows that still sum to 1 (nothing is zero).
"""
import math

import torch

import utils.causal as ref
from autograder.checks import (CheckFailed, expect, expect_close, expect_known, expect_linear, expect_raises, expect_tensor,
                               fail, fill_linear, matches, randn)

NEG_INF = float("-inf")
QKV = ("W_query", "W_key", "W_value")


def load_projections(module, who, d_in, d_out, bias=False, seed=60, weights=None):
    """module.W_query/W_key/W_value must be nn.Linear(d_in, d_out, bias); fill them deterministically."""
    layers = {}
    for i, attr in enumerate(QKV):
        layer = expect_linear(module, attr, d_in, d_out, bias, who)
        fill_linear(layer, seed + i, bias_scale=0.5 * (i + 1))
        if weights:
            with torch.no_grad():
                layer.weight.copy_(weights[attr])
        layers[attr] = layer
    return layers


def expect_mask_buffer(module, who, context_length):
    """`mask` must be a registered (context_length, context_length) buffer, True (or 1) above the diagonal."""
    buffers = dict(module.named_buffers())
    value = getattr(module, "mask", None)
    if "mask" not in buffers:
        if isinstance(value, torch.nn.Parameter):
            fail(f"{who}.mask is an nn.Parameter, so the optimizer would train it: register it with self.register_buffer('mask', ...).",
                 f"{who}.mask 是 nn.Parameter，优化器会训练它：请用 self.register_buffer('mask', ...) 注册它。")
        fail(f"{who}.mask must be a registered buffer, so that .to() moves it with the weights and state_dict() saves it: use self.register_buffer('mask', ...).",
             f"{who}.mask 必须是注册的缓冲区，这样 .to() 会把它和权重一起移动，state_dict() 也会保存它：请使用 self.register_buffer('mask', ...)。",
             f"buffers: {sorted(buffers)}, mask is {type(value).__name__}")
    mask = buffers["mask"]
    expect(tuple(mask.shape) == (context_length, context_length),
           f"{who}.mask must cover the whole context: shape (context_length, context_length), sliced in forward for shorter inputs.",
           f"{who}.mask 必须覆盖整个上下文：形状为 (context_length, context_length)，在 forward 中对较短的输入切片。",
           f"shape {tuple(mask.shape)}, context_length={context_length}")
    right = ref.causal_mask(context_length)
    if torch.equal(mask.bool(), torch.ones_like(right).triu(0)):
        fail(f"In {who}.mask the diagonal is masked: a token may attend to itself, so block only the keys j > i (triu with diagonal=1).",
             f"{who}.mask 中对角线被屏蔽了：词元可以关注自己，所以只屏蔽 j > i 的键（triu 使用 diagonal=1）。")
    if torch.equal(mask.bool(), ~right):
        fail(f"{who}.mask marks the allowed keys: the course's convention is True (or 1) = BLOCKED, the keys above the diagonal.",
             f"{who}.mask 标记的是允许的键：本课程的约定是 True（或 1）= 被屏蔽，即对角线以上的键。")
    expect(torch.equal(mask.bool(), right),
           f"{who}.mask must be the causal mask of context_length tokens: True above the diagonal.",
           f"{who}.mask 必须是 context_length 个词元的因果掩码：对角线以上为 True。", f"got {mask.int().tolist()}")


def causal_attention(q, k, v, scale=None):
    """softmax(q kᵀ * scale) v with -inf above the diagonal; scale defaults to 1/sqrt(d_k)."""
    T = q.shape[-2]
    scale = 1 / math.sqrt(k.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    return torch.softmax(scores.masked_fill(ref.causal_mask(T), NEG_INF), dim=-1) @ v


def _causal_mistakes(q, k, v, who):
    """(output, en, zh) of the usual masking mistakes, on (B, T, d) tensors."""
    T = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
    right = ref.causal_mask(T)
    soft = lambda m, fill=NEG_INF: torch.softmax(scores.masked_fill(m, fill), -1) @ v
    table = [
        (soft(torch.ones(T, T, dtype=torch.bool).triu(0)), "the diagonal is masked, so the first token has nothing to attend to (NaN): a token may attend to itself, block only j > i",
         "对角线被屏蔽了，第一个词元无处可关注（NaN）：词元可以关注自己，只屏蔽 j > i"),
        (soft(~right), "the mask is inverted: True means BLOCKED, the keys after the query", "掩码是反的：True 表示被屏蔽，即查询之后的键"),
        (soft(right, 0.0), "the blocked scores were filled with 0, and exp(0) = 1 still gives them weight: fill with -inf",
         "被屏蔽的分数填成了 0，而 exp(0) = 1 仍会给它们权重：应填 -inf"),
        (torch.softmax(scores, -1).masked_fill(right, 0.0) @ v, "the weights were masked after the softmax without renormalizing: fill the scores with -inf before the softmax",
         "权重在 softmax 之后才被屏蔽且没有重新归一化：应在 softmax 之前把分数填成 -inf"),
        (torch.softmax(scores, -1) @ v, "nothing is masked, so every token sees the future: apply the causal mask to the scores",
         "没有任何屏蔽，每个词元都能看到未来：把因果掩码应用到分数上"),
        (causal_attention(q, k, v, scale=1.0), "the scores are not scaled: divide Q K^T by sqrt(d_out) before the softmax",
         "分数没有缩放：在 softmax 之前把 Q K^T 除以 sqrt(d_out)"),
    ]
    return [(out, f"{who} has a known mistake: {en}.", f"{who} 有一个常见错误：{zh}。") for out, en, zh in table]


def expect_causal_output(out, layers, x, who):
    """out must be causal attention of the three projections of x; a known mistake is named."""
    with torch.no_grad():
        q, k, v = (layers[n](x) for n in QKV)
    expected = causal_attention(q, k, v)
    expect_tensor(out, f"{who}'s output", f"{who} 的输出")
    expect(out.shape == expected.shape,
           f"{who} must map (B, T, d_in) to (B, T, d_out).", f"{who} 必须把 (B, T, d_in) 映射为 (B, T, d_out)。",
           f"shape {tuple(out.shape)}, expected {tuple(expected.shape)}")
    expect_known(out, expected, lambda: _causal_mistakes(q, k, v, who),
                 f"{who} is wrong: softmax of (Q K^T / sqrt(d_out)) with -inf above the diagonal, then times V.",
                 f"{who} 不对：对上三角填 -inf 后的 (Q K^T / sqrt(d_out)) 做 softmax，再乘以 V。")


def run_shorter(module, x, who):
    """Call the module on fewer tokens than its context; a crash here means the mask was not sliced."""
    try:
        return module(x)
    except CheckFailed:
        raise
    except Exception as e:
        fail(f"{who} crashes on an input shorter than context_length: slice the buffer to the input, self.mask[:T, :T].",
             f"{who} 在比 context_length 短的输入上报错：把缓冲区切成与输入一样大，self.mask[:T, :T]。",
             f"{type(e).__name__}: {e}")


def expect_too_long_raises(module, x, who):
    expect_raises(ValueError, module, x, name=f"{who}.forward",
                  en=f"{who} must raise ValueError (with a message) for an input longer than context_length: there is no mask for those positions, so check T first.",
                  zh=f"输入长于 context_length 时，{who} 必须抛出 ValueError（附带说明）：这些位置没有掩码，所以要先检查 T。")


def expect_inverted_dropout(out, weights, p, label):
    """Kept fraction about 1 - p and every survivor equal to weight / (1 - p). Returns the kept mask."""
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


def probe_weights(T, heads, seed=90):
    """Per head h: W_query, W_key (2T, T) from seeds and W_value = [I; I]; and the causal weights they give."""
    eye = torch.eye(T)
    per_head, expected = [], []
    for h in range(heads):
        w = {"W_query": randn(2 * T, T, seed=seed + 2 * h) * 3 / math.sqrt(T),
             "W_key": randn(2 * T, T, seed=seed + 2 * h + 1) * 3 / math.sqrt(T),
             "W_value": torch.cat([eye, eye])}
        q, k = eye @ w["W_query"].T, eye @ w["W_key"].T
        expected.append(ref.masked_softmax(q @ k.T / math.sqrt(2 * T), ref.causal_mask(T)))
        per_head.append(w)
    return per_head, torch.stack(expected)  # (H, T, T)


def probe_tokens(T, batch=1000):
    """One-hot tokens: (batch, T, T)."""
    return torch.eye(T).expand(batch, T, T).contiguous()


def expect_dropout_on_weights(out, expected, p, who):
    """out (B, T, H * 2T) from the probe; expected (H, T, T): the eval-mode weights of each head."""
    H, T, _ = expected.shape
    out = out.detach()
    expect(tuple(out.shape[1:]) == (T, H * 2 * T), f"{who} must map (B, T, d_in) to (B, T, d_out).",
           f"{who} 必须把 (B, T, d_in) 映射为 (B, T, d_out)。", f"shape {tuple(out.shape)}")
    if torch.isnan(out).any():
        fail(f"{who} gives NaN in training: dropout was applied to the masked scores (-inf * 0 = NaN); apply it to the weights, after the softmax.",
             f"{who} 在训练时得到 NaN：dropout 被应用到了已屏蔽的分数上（-inf * 0 = NaN）；应在 softmax 之后应用到权重上。")
    halves = out.view(out.shape[0], T, H, 2, T)
    left, right = halves[:, :, :, 0], halves[:, :, :, 1]  # (B, T, H, T) each
    if not torch.allclose(left, right, atol=1e-6):
        fail(f"{who} applies dropout to the context or the output (after multiplying by the values): drop the attention weights, then compute weights @ values.",
             f"{who} 把 dropout 应用到了上下文向量或输出上（乘以值之后）：应先对注意力权重做 dropout，再计算 weights @ values。")
    left = left.permute(0, 2, 1, 3)  # (B, H, T, T), like the weights
    allowed = ~ref.causal_mask(T)
    seen = left[:, :, allowed]  # (B, H, allowed entries)
    if float((seen == 0).float().mean()) < 0.01:
        if matches(left, expected.expand_as(left)):
            fail(f"In train() mode {who} drops nothing: apply the nn.Dropout layer to the attention weights in forward.",
                 f"在 train() 模式下 {who} 什么都没有丢弃：在 forward 中把 nn.Dropout 层应用到注意力权重上。")
        fail(f"{who} applies dropout to the scores before the softmax, which renormalizes the rows again: apply it to the weights, after the softmax.",
             f"{who} 在 softmax 之前对分数做了 dropout，softmax 又把每行重新归一化了：应在 softmax 之后对权重做 dropout。")
    expect_inverted_dropout(seen, expected[:, allowed].expand_as(seen).contiguous(), p, f"{who} in train(), dropout={p}")


def converted(cls, dtype, evaluate=False):
    """A constructor of cls whose module is moved to `dtype` (and put in eval() mode): the harness
    builds the learner's and the course's layers with it for a family's dtype probes."""
    def build(*args, **kwargs):
        module = cls(*args, **kwargs)
        if isinstance(module, torch.nn.Module):
            module = module.to(dtype)
            if evaluate:
                module.eval()
        return module
    build.__name__ = getattr(cls, "__name__", "your class")
    return build


def representable(point) -> bool:
    """A layer's space: scores in the hundreds ("large" values) only where their dtype holds them. In
    bfloat16 a score of 300 is rounded to a multiple of 2, so two right orders of computation (q @ k.T
    rounded, or SDPA accumulating in float32) give softmax weights that differ by far more than any
    tolerance: such a point would grade the rounding, not the code."""
    return not (point.get("values") == "large" and point.get("dtype") == "bfloat16")


# Scores in the hundreds: float32 rounds each to about 2^-24 * 300, and the softmax passes that on
# to the output, so two right orders of computation (q @ k.T / sqrt(d) or q @ k.T * d ** -0.5,
# torch.where or masked_fill, a float32 softmax of float64 scores) differ by up to 1e-4 there.
STEEP = {torch.float32: (1e-3, 1e-3), torch.float64: (1e-3, 1e-3)}


def steep(point):
    """A layer's per-point tolerance (Space.tolerance): STEEP where the scores are in the hundreds."""
    return STEEP if point.get("values") == "large" else None


def modal(cls):
    """A constructor of cls that takes `mode="train"` or `mode="eval"` besides cls's own arguments
    and puts the module in that mode: a generated point of a layer with dropout (notebooks 05 and
    06) says in which mode it is graded. `__wrapped__` lets the harness see the class's code."""
    def build(*args, mode="train", **kwargs):
        module = cls(*args, **kwargs)
        if isinstance(module, torch.nn.Module):
            module.train(mode == "train")
        return module
    build.__name__, build.__wrapped__ = getattr(cls, "__name__", "your class"), cls
    return build


def split_dtypes(family):
    """(the family without its dtype probes, [(dtype, its probes)]): a layer's dtype probes run on
    layers built by `converted`, one dtype at a time (a probe names its dtype in its label)."""
    plain = family.only(lambda p: p.axis != "dtype")
    typed = [(dt, family.only(lambda p, name=str(dt).removeprefix("torch."): p.axis == "dtype" and name in p.label))
             for dt in (torch.float64, torch.bfloat16)]
    return plain, [(dt, f) for dt, f in typed if f.probes]


def layer_probes(d_in: int, context: int, seed: int) -> list:
    """The probes every attention layer of 04-06 runs on (harness.py): two batch items that
    differ at full context, one token, fewer tokens than the context, and inputs large enough for
    scores in the hundreds; seeds seed + 1 to seed + 4."""
    from autograder.checks.core.harness import Probe
    return [
        Probe("batch", f"two batch items that differ, T = context_length = {context}",
              lambda: ((randn(2, context, d_in, seed=seed + 1),), {}), f"两个不同的批次项，T = context_length = {context}"),
        Probe("edges", "one token", lambda: ((randn(2, 1, d_in, seed=seed + 2),), {}), "只有一个词元"),
        Probe("edges", "fewer tokens than context_length", lambda: ((randn(3, 4, d_in, seed=seed + 3),), {}), "少于 context_length 的词元"),
        Probe("extreme", "inputs of size 30 (scores in the hundreds)", lambda: ((randn(2, context, d_in, seed=seed + 4) * 30,), {}),
              "大小为 30 的输入（数百量级的分数）"),
    ]

