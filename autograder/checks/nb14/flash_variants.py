"""What notebook 14's checks compare against: the right answers, and what the usual mistakes compute.

Ground truth is PyTorch's own: `F.scaled_dot_product_attention` with a bottom-right causal mask,
`torch.logsumexp` of the scaled scores, and autograd through SDPA. When a learner's value is
wrong, the checks compare it with the output of each known mistake, computed here by the tiled
algorithm with one switch per mistake (all switches at their defaults: the right algorithm), so
that the message names the mistake. Each list holds (switches, English, Chinese).
"""
import math

import torch
import torch.nn.functional as F

import utils.flash_attention as ref
from autograder.checks import expect, expect_tensor, randn

NEG_INF = float("-inf")


# Ground truth ----------------------------------------------------------------------------------
def blocked(T_q, T_k, device, top_left=False):
    """(T_q, T_k) bool, True = blocked, bottom-right aligned unless `top_left`."""
    return ref._tile_mask(0, T_q, 0, T_k, 0 if top_left else T_k - T_q, device)


def sdpa(q, k, v, causal, top_left=False):
    if not causal:
        return F.scaled_dot_product_attention(q, k, v)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~blocked(q.shape[-2], k.shape[-2], q.device, top_left))


def scaled_scores(q, k, causal, scale=None):
    s = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(q.shape[-1]) if scale is None else scale)
    return s.masked_fill(blocked(q.shape[-2], k.shape[-2], q.device), NEG_INF) if causal else s


def lse_mistakes(q, k, causal):
    """What lse is when it keeps only part of m + log(l), or forgets the scale."""
    right, m = torch.logsumexp(scaled_scores(q, k, causal), -1), scaled_scores(q, k, causal).amax(-1)
    return [(right - m, "lse is missing the maximum: the log-sum-exp is m + log(l), because l sums exp(s - m).",
             "lse 缺少最大值：log-sum-exp 是 m + log(l)，因为 l 累加的是 exp(s - m)。"),
            (m, "lse is only the running maximum: the log-sum-exp is m + log(l), add the log of the running sum.",
             "lse 只是运行最大值：log-sum-exp 是 m + log(l)，还要加上运行和的对数。"),
            (torch.logsumexp(scaled_scores(q, k, causal, scale=1.0), -1),
             "lse was computed from unscaled scores: it is the log-sum-exp of q · k / sqrt(d), the scores the softmax used.",
             "lse 是由未缩放的分数算出的：它应是 q · k / sqrt(d) 的 log-sum-exp，即 softmax 所用的分数。")]


def autograd_grads(q, k, v, g, causal):
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        (sdpa(*leaves, causal) * g).sum().backward()  # backward(g) would import sympy (its shape check)
    return [t.grad for t in leaves]


# online_softmax --------------------------------------------------------------------------------
def online_variant(x, block_size, rescale=True):
    m, l = x.new_full(x.shape[:-1], NEG_INF), x.new_zeros(x.shape[:-1])
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(-1))
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        alpha = torch.exp(m - shift) if rescale else torch.ones_like(l)
        l = l * alpha + torch.exp(block - shift[..., None]).sum(-1)
        m = m_new
    return torch.exp(x - torch.where(torch.isinf(m), torch.zeros_like(m), m)[..., None]) / l[..., None]


# flash_attention_forward -----------------------------------------------------------------------
def forward_variant(q, k, v, causal, bq, bk, rescale_l=True, rescale_acc=True, divide_inside=False,
                    top_left=False, skip_partial=False, mask_tiles=True, see_self=True, scale=None):
    """The tiled forward's out with one switch per known mistake (all defaults: the right one)."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale, offset = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale, 0 if top_left else T_k - T_q
    outs = []
    for i0 in range(0, T_q, bq):
        i1 = min(i0 + bq, T_q)
        q_i = q[..., i0:i1, :]
        m, l = q.new_full(q_i.shape[:-1], NEG_INF), q.new_zeros(q_i.shape[:-1])
        acc = q.new_zeros(*q_i.shape[:-1], v.shape[-1])
        for j0 in range(0, T_k, bk):
            j1 = min(j0 + bk, T_k)
            if causal and (j0 > i1 - 1 + offset or (skip_partial and j1 - 1 > i0 + offset)):
                continue
            s = q_i @ k[..., j0:j1, :].transpose(-2, -1) * scale
            if causal and mask_tiles:  # see_self=False blocks the diagonal too (>= instead of >)
                s = s.masked_fill(ref._tile_mask(i0, i1, j0, j1, offset - (not see_self), q.device), NEG_INF)
            m_new = torch.maximum(m, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)
            l = (alpha if rescale_l else 1.0) * l + p.sum(-1)
            acc = (alpha[..., None] if rescale_acc else 1.0) * acc + p @ v[..., j0:j1, :]
            if divide_inside:
                acc = acc / l[..., None]
            m = m_new
        outs.append(acc if divide_inside else acc / l[..., None])
    return torch.cat(outs, dim=-2)


_SCALE = ("The scores must be multiplied by 1/sqrt(d) with d = q.shape[-1], the width of the queries and keys "
          "(not 1/d, not the width of the values, not left unscaled).",
          "分数必须乘以 1/sqrt(d)，其中 d = q.shape[-1] 是查询和键的宽度（不是 1/d，不是值向量的宽度，也不能不缩放）。")
_FORWARD_MISTAKES = [
    (dict(rescale_l=False), "The running sum l was not rescaled when the maximum grew: l = exp(m_old - m_new) * l + rowsum(P).",
     "最大值变大时运行和 l 没有重新缩放：l = exp(m_old - m_new) * l + rowsum(P)。"),
    (dict(rescale_acc=False), "The output accumulator was not rescaled when the maximum grew: acc = exp(m_old - m_new) * acc + P @ V.",
     "最大值变大时输出累加器没有重新缩放：acc = exp(m_old - m_new) * acc + P @ V。"),
    (dict(divide_inside=True), "The accumulator was divided by the running sum inside the loop over key tiles: divide once, after the last tile (or multiply back by the old sum).",
     "累加器在遍历键分块的循环内被运行和除了：应在最后一个分块之后只除一次（或者先乘回旧的和）。"),
    (dict(scale=1.0), *_SCALE),
]
_CAUSAL_MISTAKES = [
    (dict(top_left=True), "The causal mask is top-left aligned: with T_q < T_k the queries are the last T_q positions, so query i sees key j iff j <= i + (T_k - T_q).",
     "因果掩码是左上对齐的：T_q < T_k 时查询是最后 T_q 个位置，所以查询 i 当且仅当 j <= i + (T_k - T_q) 时能看到键 j。"),
    (dict(skip_partial=True), "A tile only partly above the diagonal was skipped: skip a tile only when its first key comes after its last query; mask the others.",
     "一个只有部分在对角线之上的分块被跳过了：只有当分块的第一个键在其最后一个查询之后时才跳过；其他分块要加掩码。"),
    (dict(mask_tiles=False), "The tiles on the diagonal were not masked: keys after a query must get -inf inside the tile too.",
     "对角线上的分块没有加掩码：在分块内部，查询之后的键也必须设为 -inf。"),
    (dict(see_self=False), "Each query must see its own position: block key j only when j > i + (T_k - T_q), not when j >= i + (T_k - T_q).",
     "每个查询必须能看到它自己的位置：只有当 j > i + (T_k - T_q) 时才屏蔽键 j，而不是 j >= i + (T_k - T_q) 时。"),
]


def forward_mistakes(q, k, v, causal, bq, bk):
    cases = _FORWARD_MISTAKES + (_CAUSAL_MISTAKES if causal else [])
    cases = cases + [(dict(scale=c), *_SCALE) for c in (1.0 / q.shape[-1], 1.0 / math.sqrt(v.shape[-1]))]
    return [(forward_variant(q, k, v, causal, bq, bk, **flags), en, zh) for flags, en, zh in cases]


# flash_attention_backward ----------------------------------------------------------------------
def backward_variant(q, k, v, out, lse, g, causal, bq, bk, d_from_p=False, no_d=False, unnormalised_dv=False,
                     tile_softmax=False, scale=None):
    """The tiled backward with one switch per known mistake (all defaults: the right one)."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    s_scale, offset = 1.0 / math.sqrt(q.shape[-1]), T_k - T_q
    D = (g * out).sum(-1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, T_k, bk):
        j1 = min(j0 + bk, T_k)
        for i0 in range(0, T_q, bq):
            i1 = min(i0 + bq, T_q)
            s = q[..., i0:i1, :] @ k[..., j0:j1, :].transpose(-2, -1) * s_scale
            if causal:
                s = s.masked_fill(ref._tile_mask(i0, i1, j0, j1, offset, q.device), NEG_INF)
            p = torch.softmax(s, -1).nan_to_num(0.0) if tile_softmax else torch.exp(s - lse[..., i0:i1, None])
            dv[..., j0:j1, :] += (torch.exp(s) if unnormalised_dv else p).transpose(-2, -1) @ g[..., i0:i1, :]
            dp = g[..., i0:i1, :] @ v[..., j0:j1, :].transpose(-2, -1)
            D_i = (p * dp).sum(-1) if d_from_p else torch.zeros_like(D[..., i0:i1]) if no_d else D[..., i0:i1]
            ds = p * (dp - D_i[..., None])
            c = s_scale if scale is None else scale
            dq[..., i0:i1, :] += ds @ k[..., j0:j1, :] * c
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ q[..., i0:i1, :] * c
    return dq, dk, dv


_GRAD_SCALE = ("dQ and dK need the factor 1/sqrt(d) with d = q.shape[-1]: the scores are q · k / sqrt(d), so dQ = dS @ K / sqrt(d) and dK = dSᵀ @ Q / sqrt(d).",
               "dQ 和 dK 需要因子 1/sqrt(d)，其中 d = q.shape[-1]：分数是 q · k / sqrt(d)，所以 dQ = dS @ K / sqrt(d)，dK = dSᵀ @ Q / sqrt(d)。")
_BACKWARD_MISTAKES = [
    (dict(d_from_p=True), "D was computed from one tile's P * dP: D = rowsum(dO * O) over the whole row, computed once before the loops.",
     "D 是由一个分块的 P * dP 算出的：D = rowsum(dO * O)，对整行计算，在循环之前算一次。"),
    (dict(no_d=True), "dS = P * (dP - D) with D = rowsum(dO * O): D was left out (it is the softmax Jacobian's second term).",
     "dS = P * (dP - D)，其中 D = rowsum(dO * O)：D 被漏掉了（它是 softmax 雅可比矩阵的第二项）。"),
    (dict(unnormalised_dv=True), "dV was accumulated with unnormalised probabilities exp(s): recompute P = exp(s - lse) and add Pᵀ @ dO.",
     "dV 是用未归一化的概率 exp(s) 累加的：请重新计算 P = exp(s - lse)，再加上 Pᵀ @ dO。"),
    (dict(tile_softmax=True), "P was normalised within each tile: recompute P = exp(s - lse) with the forward's lse, which normalises over the whole row.",
     "P 是在每个分块内部归一化的：请用前向计算的 lse 重新计算 P = exp(s - lse)，lse 在整行上归一化。"),
    (dict(scale=1.0), *_GRAD_SCALE),
]


def backward_mistakes(q, k, v, out, lse, g, causal, bq, bk):
    """[(dq, dk, dv), en, zh] of each known mistake."""
    cases = _BACKWARD_MISTAKES + [(dict(scale=1.0 / math.sqrt(v.shape[-1])), *_GRAD_SCALE)]
    return [(backward_variant(q, k, v, out, lse, g, causal, bq, bk, **flags), en, zh) for flags, en, zh in cases]


# the shapes and dtypes of what a learner's function returns --------------------------------
def heads_layout(B, H, T, d, seed):
    """(B, H, T, d) as split heads give it: a non-contiguous view of (B, T, H, d)."""
    return randn(B, T, H, d, seed=seed).transpose(1, 2)


def expect_dtype(result, names, who):
    dtypes = [getattr(t, "dtype", type(t).__name__) for t in (result if isinstance(result, tuple) else (result,))]
    expect(len(dtypes) == len(names) and all(d == torch.float64 for d in dtypes),
           f"{who} must return its results in the dtype of its inputs: create every running tensor from the inputs (q.new_zeros, torch.zeros_like).",
           f"{who} 必须以输入的 dtype 返回结果：每个运行中的张量都从输入创建（q.new_zeros、torch.zeros_like）。",
           "float64 inputs gave " + ", ".join(f"{n} {d}" for n, d in zip(names, dtypes)))


def expect_pair(result, who, out_shape, lse_shape):
    expect(isinstance(result, tuple) and len(result) == 2,
           f"{who} must return a pair (out, lse).", f"{who} 必须返回一对 (out, lse)。", f"got {type(result).__name__}")
    out, lse = result
    expect_tensor(out, "out", "out")
    expect_tensor(lse, "lse", "lse")
    expect(tuple(out.shape) == out_shape,
           "out must have shape (B, H, T_q, d_v): one output per query, as wide as the values.",
           "out 的形状必须是 (B, H, T_q, d_v)：每个查询一个输出，宽度与值向量相同。",
           f"shape {tuple(out.shape)}, expected {out_shape}")
    expect(tuple(lse.shape) == lse_shape,
           "lse must have shape (B, H, T_q): one log-sum-exp per query (no trailing dimension of 1).",
           "lse 的形状必须是 (B, H, T_q)：每个查询一个 log-sum-exp（末尾不要有大小为 1 的维度）。",
           f"shape {tuple(lse.shape)}, expected {lse_shape}")
    return out.detach(), lse.detach()


def expect_grads(result, q, k, v):
    expect(isinstance(result, tuple) and len(result) == 3 and all(isinstance(t, torch.Tensor) for t in result),
           "flash_attention_backward must return three tensors (dq, dk, dv).", "flash_attention_backward 必须返回三个张量 (dq, dk, dv)。")
    expect([tuple(t.shape) for t in result] == [tuple(q.shape), tuple(k.shape), tuple(v.shape)],
           "dq, dk and dv must have the shapes of q, k and v, in that order.",
           "dq、dk 和 dv 的形状必须分别与 q、k 和 v 相同，且按此顺序。",
           f"shapes {[tuple(t.shape) for t in result]}")
