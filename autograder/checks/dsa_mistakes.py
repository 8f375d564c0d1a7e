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
    return {"kept": w[..., :-1] @ v + w[..., -1:],  # the sink's weight lands on a value of ones
            "after": (plain @ v) / (1 + col.exp()), "after add": torch.softmax(scores, -1) @ v + col,
            "plain": plain @ v, "unscaled": unscaled @ v, "scaled sink": scaled_sink @ v}


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
    if mistake != "no k_norm":
        k = _ln(k, state["k_norm.weight"], state["k_norm.bias"])
    k = rope(k)
    w = x @ state["weights_proj.weight"].T * {"no scale": 1.0, "no head scale": d ** -0.5}.get(mistake, (H * d) ** -0.5)
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
