"""Causal (masked) attention (notebook 04).

A language model is trained to predict every next token at once, so position i may only use
positions <= i. Masks are boolean with True = BLOCKED, applied as scores.masked_fill(mask, -inf)
before the softmax. With fewer queries than keys (decoding with a KV cache) the mask is
bottom-right aligned: query i of the last T_q positions sees key j iff j <= i + (T_k - T_q).
"""
import math

import torch
from torch import nn


def causal_mask(num_queries: int, num_keys: int | None = None, device=None) -> torch.Tensor:
    """(T_q, T_k) bool, True above the (bottom-right aligned) diagonal."""
    num_keys = num_queries if num_keys is None else num_keys
    if num_keys < num_queries:
        raise ValueError(f"causal_mask needs num_keys >= num_queries, got {num_keys} < {num_queries}")
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).triu(1 + num_keys - num_queries)


def mask_and_renormalize(weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The book's first route: zero the blocked weights, then rescale each row to sum 1."""
    kept = weights.masked_fill(mask, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """The usual route: blocked scores become -inf, so exp() gives them exactly 0."""
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=dim)


class CausalSelfAttention(nn.Module):
    """SelfAttentionV2 plus a causal mask kept as a buffer (moves with .to(), saved in state_dict)."""

    def __init__(self, d_in, d_out, context_length, qkv_bias=False):
        super().__init__()
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.register_buffer("mask", causal_mask(context_length))

    def forward(self, x):  # (B, T, d_in) -> (B, T, d_out)
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return self.attention_weights(q, k) @ v

    def attention_weights(self, q, k):  # (B, T, d_out) twice -> (B, T, T)
        T = q.shape[-2]
        if T > self.context_length:
            raise ValueError(f"input has {T} tokens, more than context_length={self.context_length}")
        scores = q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])
        return masked_softmax(scores, self.mask[:T, :T])
