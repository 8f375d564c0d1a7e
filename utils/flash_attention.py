"""FlashAttention in PyTorch: exact attention computed tile by tile (notebook 14).

The (T_q, T_k) score matrix is never built. Queries go in blocks of `block_q`, keys and values in
blocks of `block_k`; each query keeps a running maximum m, a running sum l of exp(score - m) and
an output accumulator, all rescaled by exp(m_old - m_new) when the maximum grows (the online
softmax of Milakov & Gimelshein, 2018). The forward saves one log-sum-exp per query; the backward
recomputes each tile's probabilities from it (FlashAttention-2, Dao 2023), with
D = rowsum(dO * O). Memory is linear in T instead of quadratic.

    .venv/bin/python -m pytest -q utils/tests/test_flash_attention.py
    .venv/bin/python -m utils.bench_flash     # memory and time against naive attention and SDPA

Shapes: q (..., T_q, d), k (..., T_k, d), v (..., T_k, d_v); the leading dims are usually (B, H).
Causal masks are bottom-right aligned (T_q <= T_k): query i sees key j iff j <= i + (T_k - T_q).
"""
import math

import torch

NEG_INF = float("-inf")


def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax along the last dim in one pass over blocks (running max and rescaled running sum),
    then one elementwise pass; no reduction ever spans more than one block."""
    m = x.new_full(x.shape[:-1], NEG_INF)  # running maximum of each row
    l = x.new_zeros(x.shape[:-1])  # running sum of exp(x - m)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = _finite(m_new)  # a row that has seen only -inf so far keeps l = 0 (no inf - inf)
        l = l * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)
        m = m_new
    return torch.exp(x - _finite(m)[..., None]) / l[..., None]


def _finite(m: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isinf(m), torch.zeros_like(m), m)


def _tile_mask(i0, i1, j0, j1, offset, device):
    """(bq, bk) bool, True = blocked: key j is after query i + offset (bottom-right aligned)."""
    rows = torch.arange(i0, i1, device=device)[:, None] + offset
    cols = torch.arange(j0, j1, device=device)[None, :]
    return cols > rows


def _check_causal(causal, T_q, T_k):
    if causal and T_q > T_k:
        raise ValueError(f"causal attention needs T_q <= T_k (bottom-right alignment), got T_q={T_q}, T_k={T_k}")


def flash_attention_forward(q, k, v, causal: bool = False, block_q: int = 64, block_k: int = 64):
    """(out (..., T_q, d_v), lse (..., T_q)): softmax(q kᵀ / sqrt(d)) v, one (block_q, block_k) tile
    of scores at a time; lse = log sum_j exp(q_i · k_j / sqrt(d)) over the keys query i sees."""
    T_q, T_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    _check_causal(causal, T_q, T_k)
    scale, offset = 1.0 / math.sqrt(d), T_k - T_q
    out = q.new_empty(*q.shape[:-1], v.shape[-1])  # (..., T_q, d_v)
    lse = q.new_empty(q.shape[:-1])  # (..., T_q)
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        q_i = q[..., i0:i1, :]  # (..., bq, d)
        m = q.new_full(q_i.shape[:-1], NEG_INF)  # (..., bq) running maximum
        l = q.new_zeros(q_i.shape[:-1])  # (..., bq) running sum of exp(s - m)
        acc = q.new_zeros(*q_i.shape[:-1], v.shape[-1])  # (..., bq, d_v) unnormalised output
        # causal: the last query of the block sees keys up to i1 - 1 + offset; later tiles are skipped
        k_end = min(T_k, i1 + offset) if causal else T_k
        for j0 in range(0, k_end, block_k):
            j1 = min(j0 + block_k, T_k)
            s = q_i @ k[..., j0:j1, :].transpose(-2, -1) * scale  # (..., bq, bk), one tile
            if causal and j1 - 1 > i0 + offset:  # some key of the tile is after some query: mask it
                s = s.masked_fill(_tile_mask(i0, i1, j0, j1, offset, q.device), NEG_INF)
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])  # (..., bq, bk)
            alpha = torch.exp(m - m_new)  # rescales what was summed under the old maximum
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v[..., j0:j1, :]
            m = m_new
        out[..., i0:i1, :] = acc / l[..., None]  # divide once, after the last tile
        lse[..., i0:i1] = m + torch.log(l)
    return out, lse


def flash_attention_backward(q, k, v, out, lse, grad_out, causal: bool = False, block_q: int = 64, block_k: int = 64):
    """(dq, dk, dv) of flash_attention_forward, FlashAttention-2's way: key blocks outside, query
    blocks inside; each tile's P = exp(s - lse) is recomputed, dS = P * (dP - D) with
    D = rowsum(dO * O) (equal to rowsum(P * dP), without storing P)."""
    T_q, T_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    _check_causal(causal, T_q, T_k)
    scale, offset = 1.0 / math.sqrt(d), T_k - T_q
    D = (grad_out * out).sum(dim=-1)  # (..., T_q)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, T_k, block_k):
        j1 = min(j0 + block_k, T_k)
        k_j, v_j = k[..., j0:j1, :], v[..., j0:j1, :]  # (..., bk, d), (..., bk, d_v)
        # causal: query i sees key j0 iff i >= j0 - offset; earlier query blocks are skipped
        i_start = max(0, j0 - offset) // block_q * block_q if causal else 0
        for i0 in range(i_start, T_q, block_q):
            i1 = min(i0 + block_q, T_q)
            q_i, do_i = q[..., i0:i1, :], grad_out[..., i0:i1, :]
            s = q_i @ k_j.transpose(-2, -1) * scale  # (..., bq, bk)
            if causal and j1 - 1 > i0 + offset:
                s = s.masked_fill(_tile_mask(i0, i1, j0, j1, offset, q.device), NEG_INF)
            p = torch.exp(s - lse[..., i0:i1, None])  # the forward's probabilities, recomputed
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ do_i
            dp = do_i @ v_j.transpose(-2, -1)  # (..., bq, bk)
            ds = p * (dp - D[..., i0:i1, None])
            dq[..., i0:i1, :] += ds @ k_j * scale
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ q_i * scale
    return dq, dk, dv


class FlashAttention(torch.autograd.Function):
    """out = FlashAttention.apply(q, k, v, causal): saves q, k, v, out and lse, never the probabilities."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        out, lse = flash_attention_forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, ctx.causal)
        return dq, dk, dv, None


def naive_attention(q, k, v, causal: bool = False):
    """(out, lse) the direct way, with the full (T_q, T_k) scores: what the tiles must equal."""
    T_q, T_k = q.shape[-2], k.shape[-2]
    _check_causal(causal, T_q, T_k)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
    if causal:
        s = s.masked_fill(_tile_mask(0, T_q, 0, T_k, T_k - T_q, q.device), NEG_INF)
    return torch.softmax(s, dim=-1) @ v, torch.logsumexp(s, dim=-1)
