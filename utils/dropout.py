"""Dropout on attention weights (notebook 05).

Inverted dropout zeroes each weight with probability p during training and scales the
survivors by 1/(1-p), so the expected value of every weight is unchanged and evaluation
needs no rescaling. Which entries are dropped depends on the RNG and differs across
platforms, so tests check statistics, never the exact mask.
"""
import torch
from torch import nn

from utils.causal import CausalSelfAttention


def attention_dropout(weights: torch.Tensor, p: float, training: bool = True, generator=None) -> torch.Tensor:
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability must satisfy 0 <= p < 1, got {p}")
    if not training or p == 0:
        return weights
    keep = torch.rand(weights.shape, generator=generator, device=weights.device) >= p
    return weights * keep / (1 - p)


class CausalAttention(CausalSelfAttention):
    """The book's compact causal attention: notebook 04's module plus nn.Dropout on the weights."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, qkv_bias)
        self.dropout = nn.Dropout(dropout)

    def attention_weights(self, q, k):
        return self.dropout(super().attention_weights(q, k))
