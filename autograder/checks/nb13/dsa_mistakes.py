"""Restatements of notebook 13's references with one known mistake at a time (used by nb13).

Each function computes, over a whole text (token i at position i), what a solution with the
named mistake returns; nb13 compares a failing output with these to name the mistake.
"""
import math

import torch

from utils.causal import causal_mask
from utils.rope import apply_rope
from utils.sliding_window import sliding_window_mask


def window_mask_variants(T_q, T_k, window) -> dict:
    p = torch.arange(T_k - T_q, T_k)[:, None]
    j = torch.arange(T_k)[None, :]
    top_left = torch.arange(T_q)[:, None]
    return {"wide": (j > p) | (j < p - window), "narrow": (j > p) | (j <= p - window + 1),
            "top-left": (j > top_left) | (j <= top_left - window), "inverted": ~sliding_window_mask(T_q, T_k, window),
            "no causal": j <= p - window, "no window": j > p}


def sink_variants(q, k, v, sinks, mask) -> dict:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    col = sinks.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    w = torch.softmax(torch.cat((scores, col), -1), -1)
    plain = torch.softmax(scores, -1)
    unscaled = torch.softmax(torch.cat((scores * math.sqrt(q.shape[-1]), col), -1), -1)[..., :-1]
    scaled_sink = torch.softmax(torch.cat((scores, col / math.sqrt(q.shape[-1])), -1), -1)[..., :-1]
    negated = torch.softmax(torch.cat((scores, -col), -1), -1)[..., :-1]
    sink_times_root = torch.softmax(torch.cat((scores, col * math.sqrt(q.shape[-1])), -1), -1)[..., :-1]
    e = scores.exp()
    return {"kept": w[..., :-1] @ v + w[..., -1:],  # the sink's weight lands on a value of ones
            "after": (plain @ v) / (1 + col.exp()), "after add": torch.softmax(scores, -1) @ v + col,
            "plain": plain @ v, "unscaled": unscaled @ v, "scaled sink": scaled_sink @ v,
            "sink times root": sink_times_root @ v, "negated": negated @ v,
            "not exponentiated": (e / (e.sum(-1, keepdim=True) + col)) @ v}


# The messages naming each mistake (nb13 shows them).
MASK_MISTAKES = {
    "wide": ("The window is off by one: the query at position p sees the keys p - window + 1 .. p, exactly window of them, not window + 1.",
             "窗口差了一：位置 p 的查询看到键 p - window + 1 .. p，正好 window 个，而不是 window + 1 个。"),
    "narrow": ("The window is off by one: the query at position p sees the keys p - window + 1 .. p, exactly window of them (itself included), not window - 1.",
               "窗口差了一：位置 p 的查询看到键 p - window + 1 .. p，正好 window 个（包括它自己），而不是 window - 1 个。"),
    "top-left": ("The mask must be bottom-right aligned: with fewer queries than keys the queries are the LAST num_queries positions.",
                 "掩码必须右下对齐：查询少于键时，查询是最后 num_queries 个位置。"),
    "inverted": ("True means BLOCKED: the mask is True where a query may NOT attend (outside the window or in the future).",
                 "True 表示被屏蔽：掩码在查询不能关注的位置（窗口之外或未来）为 True。"),
    "no causal": ("The mask must also block the future: a query never sees a key after its own position.",
                  "掩码还必须屏蔽未来：查询永远看不到它自己位置之后的键。"),
    "no window": ("The window is missing: keys more than window - 1 positions before the query must be blocked too.",
                  "缺少窗口：比查询早 window - 1 个位置以上的键也必须被屏蔽。"),
}

SPARSE_MISTAKES = {
    "per head": ("The selection is per query, shared by all MLA heads: the indexer's top-k keys, not each head's own top-k of its scores.",
                 "选择是按查询进行的，由所有 MLA 头共享：用索引器的 top-k 键，而不是每个头按自己的分数各选 top-k。"),
    "raw qr": ("The indexer reads MLA's query latent after its norm: qr = q_norm(wq_a(x)).", "索引器读取的是经过归一化的 MLA 查询潜在向量：qr = q_norm(wq_a(x))。"),
    "dense": ("Every query attends to every earlier position: it may attend only to its index_topk selected keys.",
              "每个查询都关注了所有之前的位置：它只能关注被选中的 index_topk 个键。"),
}

SINK_MISTAKES = {
    "kept": ("The sink's column must be dropped after the softmax: it has no value vector, so its weight goes nowhere.",
             "softmax 之后必须去掉 sink 这一列：它没有值向量，它的权重不流向任何地方。"),
    "after": ("The sink is a logit: it joins the scores before the softmax, not the weights after it.",
              "sink 是一个 logit：它在 softmax 之前加入分数，而不是在 softmax 之后加入权重。"),
    "after add": ("The sink is a logit: it joins the scores before the softmax, not the weights after it.",
                  "sink 是一个 logit：它在 softmax 之前加入分数，而不是在 softmax 之后加入权重。"),
    "plain": ("Your output is plain attention, as if there were no sink: append the sink to each row of scores before the softmax, and do not renormalise after dropping it (a row's weights sum to less than 1).",
              "你的输出就是普通注意力，好像没有 sink 一样：要在 softmax 之前把 sink 作为额外一列加到每行分数上，去掉它之后也不要重新归一化（一行权重之和小于 1）。"),
    "unscaled": ("The scores must be scaled by 1/sqrt(d) before the sink joins them.", "在 sink 加入之前，分数必须按 1/sqrt(d) 缩放。"),
    "scaled sink": ("The sink is a logit as it is: scale the scores by 1/sqrt(d), not the sink.",
                    "sink 本身就是 logit：要缩放的是分数（1/sqrt(d)），而不是 sink。"),
    "sink times root": ("The sink is a logit as it is: scale the scores by 1/sqrt(d), not the sink.",
                        "sink 本身就是 logit：要缩放的是分数（1/sqrt(d)），而不是 sink。"),
    "negated": ("The sink joins the scores with its own sign: the extra column is +sinks[h], not -sinks[h].",
                "sink 以它自己的符号加入分数：额外的一列是 +sinks[h]，而不是 -sinks[h]。"),
    "not exponentiated": ("The sink is a logit: it enters the softmax's denominator as exp(sinks[h]), like every score, not as sinks[h] itself.",
                          "sink 是一个 logit：它像每个分数一样以 exp(sinks[h]) 进入 softmax 的分母，而不是以 sinks[h] 本身。"),
}

INDEX_MISTAKES = {
    "interleaved": ("The indexer's RoPE must be half-split (pairs i, i + d/2), as DeepSeek corrected it in November 2025: the first release rotated adjacent pairs like MLA does, and serving engines that copied it picked other keys.",
                    "索引器的 RoPE 必须是前后两半配对（i 与 i + d/2），这是 DeepSeek 在 2025 年 11 月更正的：首次发布的代码像 MLA 一样旋转相邻的一对，照抄它的推理引擎因此选出了别的键。"),
    "rope last": ("The indexer puts the rope part FIRST in each head and in the key, [pe | nope], the reverse of MLA's [nope | pe].",
                  "索引器把 rope 部分放在每个头和键的最前面，即 [pe | nope]，与 MLA 的 [nope | pe] 相反。"),
    "no k_norm": ("The indexer's key goes through k_norm (a LayerNorm) before RoPE.", "索引器的键在 RoPE 之前要经过 k_norm（LayerNorm）。"),
    "k_norm after rope": ("The indexer's key goes through k_norm BEFORE RoPE: wk, then k_norm, then RoPE on its first qk_rope_head_dim features.",
                          "索引器的键先经过 k_norm 再施加 RoPE：先 wk，再 k_norm，然后对前 qk_rope_head_dim 个特征施加 RoPE。"),
    "key not rotated": ("RoPE rotates the rope part of the shared key too, not only the query heads': both at their own positions.",
                        "RoPE 也要旋转共享键的 rope 部分，而不只是查询头的：两者都按各自的位置旋转。"),
    "no scale": ("The head weights are weights_proj(x) * index_n_heads**-0.5 * index_head_dim**-0.5: both factors.",
                 "头权重是 weights_proj(x) * index_n_heads**-0.5 * index_head_dim**-0.5：两个因子都要有。"),
    "no head scale": ("The head weights are weights_proj(x) * index_n_heads**-0.5 * index_head_dim**-0.5: both factors.",
                      "头权重是 weights_proj(x) * index_n_heads**-0.5 * index_head_dim**-0.5：两个因子都要有。"),
    "no dim scale": ("The head weights are weights_proj(x) * index_n_heads**-0.5 * index_head_dim**-0.5: both factors.",
                     "头权重是 weights_proj(x) * index_n_heads**-0.5 * index_head_dim**-0.5：两个因子都要有。"),
    "no relu": ("Each head's dot product goes through a ReLU before it is weighted: sum_h w[t, h] * relu(q[t, h] . k[s]).",
                "每个头的点积先经过 ReLU 再加权：sum_h w[t, h] * relu(q[t, h] . k[s])。"),
    "relu after weighting": ("The ReLU acts on each head's dot product before the weighting, not after it: sum_h w[t, h] * relu(q[t, h] . k[s]).",
                             "ReLU 作用于加权之前每个头的点积，而不是加权之后：sum_h w[t, h] * relu(q[t, h] . k[s])。"),
    "relu of the sum": ("The ReLU acts on each head's dot product before the weighting, not after it: sum_h w[t, h] * relu(q[t, h] . k[s]).",
                        "ReLU 作用于加权之前每个头的点积，而不是加权之后：sum_h w[t, h] * relu(q[t, h] . k[s])。"),
}


def _ln(t, w, b):
    return torch.nn.functional.layer_norm(t, (t.shape[-1],), w, b, 1e-6)


def index_scores(state, cfg, x, qr, positions, mistake=None):
    """I[t, s] of the whole text x (B, N, dim) with token i at positions[i]; keys = all tokens, causal."""
    B, N, _ = x.shape
    H, d, r = cfg.index_n_heads, cfg.index_head_dim, cfg.qk_rope_head_dim
    interleaved = mistake == "interleaved"

    def rope(t):  # (B, [H,] N, d): the rope part first, or from the end
        if mistake == "rope last":
            return torch.cat([t[..., :-r], apply_rope(t[..., -r:], positions, cfg.rope_theta)], -1)
        return torch.cat([apply_rope(t[..., :r], positions, cfg.rope_theta, interleaved=interleaved), t[..., r:]], -1)

    q = rope((qr @ state["wq_b.weight"].T).view(B, N, H, d).transpose(1, 2))  # (B, H, N, d)
    k = x @ state["wk.weight"].T
    if mistake not in ("no k_norm", "k_norm after rope"):
        k = _ln(k, state["k_norm.weight"], state["k_norm.bias"])
    if mistake != "key not rotated":
        k = rope(k)
    if mistake == "k_norm after rope":
        k = _ln(k, state["k_norm.weight"], state["k_norm.bias"])
    w = x @ state["weights_proj.weight"].T * {"no scale": 1.0, "no head scale": d ** -0.5, "no dim scale": H ** -0.5}.get(mistake, (H * d) ** -0.5)
    dots = (q @ k.unsqueeze(1).transpose(-2, -1)).transpose(1, 2)  # (B, N, H, N)
    w = w.unsqueeze(-1)
    index = {"no relu": (dots * w).sum(2), "relu after weighting": (dots * w).relu().sum(2),
             "relu of the sum": (dots * w).sum(2).relu()}.get(mistake, (dots.relu() * w).sum(2))
    return index.masked_fill(causal_mask(N, N), float("-inf"))


def sparse_mla(reference, x, topk, mistake=None):
    """The naive path of SparseMLA over the whole text x (B, N, dim), with one mistake."""
    cfg, m = reference.cfg, reference
    B, N, _ = x.shape
    H, nope, rope = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim
    positions = torch.arange(N)
    qr = m.q_norm(m.wq_a(x))
    q_nope, q_pe = m.wq_b(qr).view(B, N, H, nope + rope).split([nope, rope], -1)
    q = torch.cat([q_nope, apply_rope(q_pe.transpose(1, 2), positions, cfg.rope_theta, interleaved=True).transpose(1, 2)], -1)
    k, v = m._expand(*m._latent_and_rope_key(x, positions))
    scores = torch.einsum("bshd,bthd->bsht", q, k) * m.softmax_scale
    causal = causal_mask(N, N)
    if mistake == "per head":  # each head keeps its own top-k of its own scores
        s = scores.masked_fill(causal[:, None], float("-inf"))
        keep = torch.zeros_like(s, dtype=torch.bool).scatter(-1, s.topk(min(topk, N), -1).indices, True)
        hidden = ~keep | causal[:, None]
    else:
        state = {k_[8:]: p for k_, p in m.state_dict().items() if k_.startswith("indexer.")}
        feed = m.wq_a(x) if mistake == "raw qr" else qr
        index = index_scores(state, cfg, x, feed, positions)
        keep = torch.zeros_like(index, dtype=torch.bool).scatter(-1, index.topk(min(topk, N), -1).indices, True)
        hidden = (causal.expand_as(keep) if mistake == "dense" else ~keep | causal).unsqueeze(2)
    weights = scores.masked_fill(hidden, float("-inf")).softmax(-1)
    return m.wo(torch.einsum("bsht,bthd->bshd", weights, v).flatten(2))
