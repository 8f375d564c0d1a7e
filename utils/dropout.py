"""Dropout on attention weights (notebook 05).

Inverted dropout zeroes each weight with probability p during training and scales the
survivors by 1/(1-p), so the expected value of every weight is unchanged and evaluation
needs no rescaling. Which entries are dropped depends on the RNG and differs across
platforms, so tests check statistics, never the exact mask.
"""
import math

import torch
from torch import nn

from utils.causal import causal_mask, masked_softmax


def attention_dropout(weights: torch.Tensor, p: float, training: bool = True, generator=None) -> torch.Tensor:
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability must satisfy 0 <= p < 1, got {p}")
    if not training or p == 0:
        return weights
    keep = torch.rand(weights.shape, generator=generator, device=weights.device) >= p
    return weights * keep / (1 - p)


class CausalAttention(nn.Module):
    """The book's compact causal attention: buffer `mask`, nn.Dropout on the weights."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", causal_mask(context_length))

    def forward(self, x):  # (B, T, d_in) -> (B, T, d_out)
        T = x.shape[-2]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        weights = self.dropout(masked_softmax(scores, self.mask[:T, :T]))
        return weights @ v
