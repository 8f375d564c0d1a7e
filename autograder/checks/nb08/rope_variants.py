"""Notebook 08's RoPE written independently of utils.rope, and the outputs of its known mistakes:
complex multiplication for adjacent pairs (Meta's Llama code), rotate-half for half-split pairs
(Hugging Face), and RoPE attention computed with one mistake switched on."""
import math

import torch

from utils.multihead import merge_heads, split_heads


def _freqs(hd, theta, exponent=lambda i, hd: 2 * i / hd):
    return torch.tensor([theta ** -exponent(i, hd) for i in range(hd // 2)], dtype=torch.float64)


def rope_complex(x, positions, theta=10000.0, freqs=None):
    """Adjacent pairs (2i, 2i+1) as complex numbers, times e^(i * t * w_i)."""
    hd = x.shape[-1]
    w = _freqs(hd, theta) if freqs is None else freqs
    turn = torch.polar(torch.ones(len(positions), hd // 2, dtype=torch.float64), positions.double()[:, None] * w)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], hd // 2, 2).contiguous())
    return torch.view_as_real(z * turn).reshape(x.shape).to(x.dtype)


def rope_rotate_half(x, positions, theta=10000.0, freqs=None, swap=False):
    """Half-split pairs (i, i + hd/2): x * cos + rotate_half(x) * sin."""
    hd = x.shape[-1]
    w = _freqs(hd, theta) if freqs is None else freqs
    angles = torch.cat([positions.double()[:, None] * w] * 2, dim=-1)
    cos, sin = (angles.sin(), angles.cos()) if swap else (angles.cos(), angles.sin())
    x1, x2 = x.double()[..., : hd // 2], x.double()[..., hd // 2:]
    return (x.double() * cos + torch.cat((-x2, x1), dim=-1) * sin).to(x.dtype)


def rope(x, positions, theta=10000.0, interleaved=False, **kw):
    return rope_complex(x, positions, theta, kw.get("freqs")) if interleaved else rope_rotate_half(x, positions, theta, **kw)


def _rope_mistakes(x, pos, theta, interleaved):
    hd = x.shape[-1]
    return [
        (rope(x, pos, theta, not interleaved),
         f"The pairs are wrong for interleaved={interleaved}: interleaved=True rotates adjacent pairs (2i, 2i+1), the default rotates half-split pairs (i, i + head_dim/2).",
         f"interleaved={interleaved} 时配对方式不对：interleaved=True 旋转相邻的一对 (2i, 2i+1)，默认旋转前后两半中的一对 (i, i + head_dim/2)。"),
        (rope(x, pos, theta, interleaved, freqs=_freqs(hd, theta, lambda i, d: i / d)),
         "The frequencies use theta^(-i/d): pair i turns at theta^(-2i/head_dim).", "频率用了 theta^(-i/d)：第 i 对以 theta^(-2i/head_dim) 转动。"),
        (rope(x, pos, theta, interleaved, freqs=_freqs(hd, theta, lambda i, d: 2 * i / (d // 2))),
         "The frequencies are computed over head_dim // 2: the exponent is 2i/head_dim.", "频率是按 head_dim // 2 计算的：指数应为 2i/head_dim。"),
        (rope(x, -pos, theta, interleaved), "The rotation goes the wrong way: (x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos).",
         "旋转方向反了：(x1, x2) -> (x1 cos - x2 sin, x1 sin + x2 cos)。"),
        (rope(x, torch.arange(len(pos)), theta, interleaved), "apply_rope ignores the positions it is given and uses 0 .. T-1.",
         "apply_rope 忽略了传入的 positions，而用了 0 .. T-1。"),
        (None if interleaved else rope_rotate_half(x, pos, theta, swap=True),
         "sin and cos are swapped: x1 cos - x2 sin, x1 sin + x2 cos.", "sin 和 cos 弄反了：x1 cos - x2 sin，x1 sin + x2 cos。"),
    ]


def _rope_mha(module, x, start, interleaved, theta, mistake=None, cache=None):
    """The reference computation, with one known mistake switched on."""
    B, T, _ = x.shape
    H, d_out = module.num_heads, module.W_query.out_features
    pos = torch.arange(T) if mistake == "restart" else torch.arange(start, start + T)
    if mistake == "before split":  # RoPE over d_out-wide vectors, then heads
        q, k = (split_heads(rope(layer(x), pos, theta, interleaved), H) for layer in (module.W_query, module.W_key))
    else:
        q, k = (rope(split_heads(layer(x), H), pos, theta, interleaved) for layer in (module.W_query, module.W_key))
    v = split_heads(module.W_value(x), H)
    if mistake == "values":
        v = rope(v, pos, theta, interleaved)
    if cache is not None:
        k, v = cache.update(k, v)
    S = k.shape[2]
    blocked = torch.ones(T, S, dtype=torch.bool).triu(1 + S - T)
    scores = (q @ k.transpose(-2, -1) / math.sqrt(d_out // H)).masked_fill(blocked, float("-inf"))
    return module.out_proj(merge_heads(torch.softmax(scores, -1) @ v))
