"""Multi-head attention (notebook 06).

Several attention heads run side by side, each on its own head_dim-wide slice of the
projected queries, keys and values, and an output projection mixes their results. The
efficient module does all heads with one matmul per projection: split the feature axis into
(heads, head_dim), move heads next to batch, attend, and merge back.

Shapes: (B, T, D) outside; (B, H, T, hd) inside, with D = H * hd.
"""
import math

import torch
from torch import nn

from utils.causal import causal_mask
from utils.dropout import CausalAttention


class MultiHeadAttentionWrapper(nn.Module):
    """num_heads independent CausalAttention heads, outputs concatenated: width d_out * num_heads."""

    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(
            CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads))

    def forward(self, x):  # (B, T, d_in) -> (B, T, num_heads * d_out)
        return torch.cat([head(x) for head in self.heads], dim=-1)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, T, D) -> (B, H, T, D // H): the feature axis is split, never the token axis."""
    B, T, D = x.shape
    if D % num_heads:
        raise ValueError(f"width {D} is not divisible by num_heads={num_heads}")
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, H, T, hd) -> (B, T, H * hd). transpose() leaves a non-contiguous view, so reshape."""
    B, H, T, hd = x.shape
    return x.transpose(1, 2).reshape(B, T, H * hd)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)  # mixes what the heads found
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length))

    def forward(self, x):  # (B, T, d_in) -> (B, T, d_out)
        T = x.shape[1]
        q = split_heads(self.W_query(x), self.num_heads)  # (B, H, T, hd)
        k = split_heads(self.W_key(x), self.num_heads)
        v = split_heads(self.W_value(x), self.num_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, T, T)
        weights = torch.softmax(scores.masked_fill(self.mask[:T, :T], float("-inf")), dim=-1)
        return self.out_proj(merge_heads(self.dropout(weights) @ v))


def mha_parameter_count(d_in: int, d_out: int, num_heads: int, qkv_bias: bool = False) -> int:
    """Parameters of MultiHeadAttention; the number of heads only splits them."""
    if d_out % num_heads:
        raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
    qkv = 3 * (d_in * d_out + (d_out if qkv_bias else 0))
    return qkv + d_out * d_out + d_out


def attention_parameter_count(d_model: int, n_heads: int, head_dim: int, n_layers: int) -> int:
    """3Blue1Brown's count: query, key, value-down, value-up matrices per head, no biases."""
    return 4 * d_model * head_dim * n_heads * n_layers
