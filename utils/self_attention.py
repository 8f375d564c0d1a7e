"""Self-attention with trainable queries, keys and values (notebook 02).

Three learned maps turn each token's embedding into a query (what it looks for), a key (what
it offers to be found by) and a value (what it passes on when found). Scores Q Kᵀ are divided
by sqrt(d_out) before the softmax; notebook 03 measures why.

Row-vector convention: a raw weight W has shape (d_in, d_out) and projects with x @ W.
nn.Linear stores the transpose, (d_out, d_in), and computes x @ weight.T + bias.
"""
import math

import torch
from torch import nn


def project_qkv(x, W_q, W_k, W_v):
    """(..., T, d_in) @ (d_in, d_k|d_v) -> queries, keys, values."""
    return x @ W_q, x @ W_k, x @ W_v


def attend(queries, keys, values):
    """softmax(Q Kᵀ / sqrt(d_k)) V for (..., T, d) tensors."""
    scores = queries @ keys.transpose(-2, -1)
    weights = torch.softmax(scores / math.sqrt(keys.shape[-1]), dim=-1)
    return weights @ values


class SelfAttentionV1(nn.Module):
    """Raw nn.Parameter matrices of shape (d_in, d_out), as in the equations."""

    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):  # (..., T, d_in) -> (..., T, d_out)
        return attend(*project_qkv(x, self.W_query, self.W_key, self.W_value))


class SelfAttentionV2(nn.Module):
    """The same computation with nn.Linear: better initialisation, optional biases."""

    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):  # (..., T, d_in) -> (..., T, d_out)
        return attend(self.W_query(x), self.W_key(x), self.W_value(x))


@torch.no_grad()
def copy_weights_v2_to_v1(v1: SelfAttentionV1, v2: SelfAttentionV2) -> None:
    """Make v1 compute exactly what v2 computes (the book's exercise 3.1): transpose each weight."""
    for name in ("W_query", "W_key", "W_value"):
        getattr(v1, name).copy_(getattr(v2, name).weight.T)
