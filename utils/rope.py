"""Positions: the sinusoidal encoding and rotary position embedding, RoPE (notebook 08).

Attention alone is blind to order. The Transformer adds a fixed sinusoidal vector to each token
(Vaswani et al., 2017); RoPE (Su et al., RoFormer, 2021) instead rotates pairs of query and key
coordinates by an angle proportional to the position, so that q_m . k_n depends on m - n only.

Pair i of a head (i = 0 .. hd/2 - 1) turns at the inverse frequency theta^(-2i/hd). Two layouts
of the pairs are in use, and they are NOT interchangeable:
  interleaved  pairs (2i, 2i+1): the RoPE paper, Meta's Llama code, DeepSeek-V3's inference code
  half-split   pairs (i, i+hd/2): Hugging Face (`rotate_half`), GPT-NeoX; the course's default
They agree after a row permutation of W_q and W_k (`interleaved_to_half_split`), which is what
checkpoint converters do.

YaRN (`yarn_inverse_frequencies`, `yarn_softmax_factor`) is how DeepSeek-V3 stretches RoPE past
its original 4096-token context (notebook 09 says when its code switches it on).

Shapes: x (..., T, hd), positions (T,); inside attention (B, H, T, hd).
Run its tests: `.venv/bin/pytest utils/tests/test_rope.py`.
"""
import math

import torch
from torch import nn

from utils.causal import causal_mask
from utils.multihead import merge_heads, split_heads


def sinusoidal_positions(num_positions: int, d_model: int, base: float = 10000.0, device=None) -> torch.Tensor:
    """(T, d_model) on `device`: PE[t, 2i] = sin(t / base^(2i/d)), PE[t, 2i+1] = cos(t / base^(2i/d))."""
    if d_model % 2:
        raise ValueError(f"d_model={d_model} must be even: sin and cos come in pairs")
    inv_freq = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32, device=device) / d_model)  # (d/2,)
    angles = torch.arange(num_positions, dtype=torch.float32, device=device)[:, None] * inv_freq  # (T, d/2)
    pe = torch.empty(num_positions, d_model, device=device)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return pe


def rope_inverse_frequencies(head_dim: int, theta: float = 10000.0, device=None) -> torch.Tensor:
    """(hd/2,): theta^(-2i/hd), from 1 radian per position down to about 1/theta."""
    if head_dim % 2:
        raise ValueError(f"head_dim={head_dim} must be even: RoPE rotates pairs of coordinates")
    return theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32, device=device) / head_dim)


def rope_angles(positions: torch.Tensor, head_dim: int, theta: float = 10000.0) -> torch.Tensor:
    """(T, hd/2): the angle of pair i at position t is t * theta^(-2i/hd)."""
    inv_freq = rope_inverse_frequencies(head_dim, theta, device=positions.device)
    return positions.to(torch.float32)[..., None] * inv_freq


def yarn_inverse_frequencies(head_dim: int, theta: float = 10000.0, factor: float = 40.0,
                             original_seq_len: int = 4096, beta_fast: int = 32, beta_slow: int = 1,
                             device=None) -> torch.Tensor:
    """(hd/2,): YaRN's frequencies, as DeepSeek-V3's `precompute_freqs_cis` computes them when
    max_seq_len > original_seq_len (Peng et al., 2023, "YaRN").

    Pairs that turn more than beta_fast times over the original context keep their frequency;
    pairs that turn less than beta_slow times are slowed down `factor` times (interpolated);
    the pairs in between blend the two along a linear ramp.
    """
    def pair_turning(rotations):  # the pair index that turns `rotations` times over original_seq_len
        return head_dim * math.log(original_seq_len / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = max(math.floor(pair_turning(beta_fast)), 0)
    high = min(math.ceil(pair_turning(beta_slow)), head_dim - 1)
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32, device=device) - low) / max(high - low, 1e-3)).clamp(0, 1)
    inv_freq = rope_inverse_frequencies(head_dim, theta, device)
    return inv_freq * (1 - ramp) + inv_freq / factor * ramp


def yarn_softmax_factor(factor: float = 40.0, mscale: float = 1.0) -> float:
    """What DeepSeek-V3 multiplies its softmax scale by under YaRN: mscale'**2, mscale' = 0.1 mscale ln(factor) + 1."""
    return (0.1 * mscale * math.log(factor) + 1.0) ** 2


def apply_rope(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0,
               interleaved: bool = False) -> torch.Tensor:
    """Rotate each pair of x's last axis by its angle; (..., T, hd) -> (..., T, hd)."""
    hd = x.shape[-1]
    angles = rope_angles(positions, hd, theta)  # (T, hd/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, hd/2) each
        return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def interleaved_to_half_split(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Reorder the output rows of W_q or W_k (d_out, d_in), or a bias (d_out,), head by head.

    Within each head, rows (0, 2, 4, ...) come first and (1, 3, 5, ...) second, so the
    interleaved pair (2i, 2i+1) lands on the half-split pair (i, i + hd/2). Then
    half-split RoPE on the permuted projection == interleaved RoPE on the original.
    """
    d_out = weight.shape[0]
    if d_out % num_heads or (d_out // num_heads) % 2:
        raise ValueError(f"d_out={d_out} must split into num_heads={num_heads} heads of even width")
    hd = d_out // num_heads
    rest = weight.shape[1:]
    return weight.reshape(num_heads, hd // 2, 2, *rest).transpose(1, 2).reshape(d_out, *rest)


class RoPEMultiHeadAttention(nn.Module):
    """Causal multi-head attention with RoPE on queries and keys (never values), KV cache optional.

    Same weights as notebook 06's MultiHeadAttention (W_query, W_key, W_value, out_proj), no
    dropout. RoPE is applied per head, on (B, H, T, hd) with hd = d_out // num_heads, at the
    absolute positions of the new tokens: they continue from the cache's seq_len. The cache
    stores keys already rotated, so a cached key is never rotated twice.
    """

    def __init__(self, d_in, d_out, context_length, num_heads, theta=10000.0, interleaved=False,
                 qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.context_length, self.theta, self.interleaved = context_length, theta, interleaved
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x, kv_cache=None):  # (B, T, d_in) -> (B, T, d_out)
        T = x.shape[1]
        start = 0 if kv_cache is None else kv_cache.seq_len
        if start + T > self.context_length:
            raise ValueError(f"{start} cached + {T} new tokens exceed context_length={self.context_length}")
        positions = torch.arange(start, start + T, device=x.device)
        q = split_heads(self.W_query(x), self.num_heads)  # (B, H, T, hd)
        k = split_heads(self.W_key(x), self.num_heads)
        v = split_heads(self.W_value(x), self.num_heads)
        q = apply_rope(q, positions, self.theta, self.interleaved)
        k = apply_rope(k, positions, self.theta, self.interleaved)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H, start + T, hd)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, start + T)
        scores = scores.masked_fill(causal_mask(T, k.shape[-2], device=x.device), float("-inf"))
        return self.out_proj(merge_heads(torch.softmax(scores, dim=-1) @ v))
