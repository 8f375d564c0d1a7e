"""Sliding-window attention, a rolling KV cache and attention sinks (notebook 13).

A sliding window lets the query at absolute position p see only the keys at p - window + 1 .. p
(Mistral 7B, gpt-oss on every other layer, DeepSeek-V4 in every block). Its cache never needs
more than `window` positions, whatever the length of the text: a ring buffer that overwrites the
oldest position. A chunk of several new queries needs, for its first query, up to window - 1
positions BEFORE the chunk, so the cache hands those back together with the new ones, in
position order, and the bottom-right aligned `sliding_window_mask` does the rest.

Attention sinks (gpt-oss, `gpt_oss/torch/model.py`): one learned logit per head joins each row
of scores as an extra column before the softmax and is dropped after it, so a head may put its
weight on "nothing" and a row's weights sum to less than 1.

Shapes: q, k, v (B, H, T, d); masks (T_q, T_k) bool, True = BLOCKED.
`python -m utils.bench_sparse` measures this cache's memory at 1K and 16K positions.
Tests: `.venv/bin/pytest utils/tests/test_sliding_window.py`.
"""
import math

import torch
from torch import nn

from utils.rope import apply_rope


def sliding_window_mask(num_queries: int, num_keys: int, window: int, device=None) -> torch.Tensor:
    """(T_q, T_k) bool, True = blocked; the queries are the LAST T_q of the T_k positions."""
    if num_keys < num_queries or window < 1:
        raise ValueError(f"need num_keys >= num_queries and window >= 1, got {num_queries}, {num_keys}, {window}")
    p = torch.arange(num_keys - num_queries, num_keys, device=device)[:, None]  # absolute query positions
    j = torch.arange(num_keys, device=device)[None, :]
    return (j > p) | (j <= p - window)  # the future, and what fell out of the window


class RollingKVCache:
    """Keys and values of the last `window` positions of one layer, in a ring buffer."""

    def __init__(self, batch_size, window, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        if window < 1:
            raise ValueError(f"window={window} must be at least 1")
        self.window = window
        self.k = torch.zeros(batch_size, num_kv_heads, window, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.seq_len = 0  # positions seen, NOT positions stored: RoPE continues from here

    def _last(self, n: int):
        """The last n stored positions, oldest first (n <= min(window, seq_len))."""
        slots = torch.arange(self.seq_len - n, self.seq_len, device=self.k.device) % self.window
        return self.k[:, :, slots], self.v[:, :, slots]

    def update(self, k_new, v_new):  # (B, H_kv, T_new, hd) twice -> (B, H_kv, kept + T_new, hd) twice
        kept = min(self.window - 1, self.seq_len)  # what the first new query may still see
        k_old, v_old = self._last(kept)
        T = k_new.shape[2]
        n = min(T, self.window)  # a chunk longer than the window: only its tail stays
        slots = torch.arange(self.seq_len + T - n, self.seq_len + T, device=self.k.device) % self.window
        self.k[:, :, slots] = k_new[:, :, T - n:].to(self.k.dtype)
        self.v[:, :, slots] = v_new[:, :, T - n:].to(self.v.dtype)
        self.seq_len += T
        return torch.cat((k_old, k_new), dim=2), torch.cat((v_old, v_new), dim=2)

    def reset(self):
        self.seq_len = 0

    def nbytes(self) -> int:
        return self.k.numel() * self.k.element_size() + self.v.numel() * self.v.element_size()


def attention_with_sinks(q, k, v, sinks, mask=None):
    """Scaled dot-product attention whose softmax also sees one logit per head, then drops it."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    sink = sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    weights = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]  # the sink's share is dropped
    return weights @ v


class SlidingWindowAttention(nn.Module):
    """Multi-head attention over a sliding window, half-split RoPE, optional sinks; forward(x, cache=None)."""

    def __init__(self, d_model, num_heads, window, sinks=False, theta=10000.0):
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim, self.window, self.theta = num_heads, d_model // num_heads, window, theta
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out = nn.Linear(d_model, d_model, bias=False)
        self.sinks = nn.Parameter(torch.zeros(num_heads)) if sinks else None

    def forward(self, x, cache=None):  # (B, T, D) new tokens -> (B, T, D)
        B, T, D = x.shape
        start = 0 if cache is None else cache.seq_len  # positions continue past the window
        positions = torch.arange(start, start + T, device=x.device)
        q, k, v = self.qkv(x).view(B, T, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rope(q, positions, self.theta), apply_rope(k, positions, self.theta)
        if cache is not None:
            k, v = cache.update(k, v)
        mask = sliding_window_mask(T, k.shape[2], self.window, device=x.device)
        if self.sinks is None:
            out = torch.softmax((q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)).masked_fill(mask, float("-inf")), -1) @ v
        else:
            out = attention_with_sinks(q, k, v, self.sinks, mask)
        return self.out(out.transpose(1, 2).reshape(B, T, D))


class WindowedLM(nn.Module):
    """A tiny decoder: embedding, n_layers of x + attention(RMS-normalised x), a head. For tests and demos."""

    def __init__(self, vocab_size=64, d_model=32, num_heads=4, n_layers=2, window=4, sinks=False):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d_model)
        self.layers = nn.ModuleList(SlidingWindowAttention(d_model, num_heads, window, sinks) for _ in range(n_layers))
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def new_caches(self, batch_size, cache_cls=RollingKVCache):
        """One empty cache per layer, with the model's dtype and device."""
        w = self.emb.weight
        return [cache_cls(batch_size, layer.window, layer.num_heads, layer.head_dim, dtype=w.dtype, device=w.device)
                for layer in self.layers]

    def forward(self, idx, caches=None):  # (B, T) -> (B, T, vocab)
        x = self.emb(idx)
        for i, layer in enumerate(self.layers):
            x = x + layer(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6), None if caches is None else caches[i])
        return self.head(x)


@torch.no_grad()
def generate(model, idx, max_new_tokens, use_cache=True, chunk=None, cache_cls=RollingKVCache):
    """Greedy tokens. With a cache: the prompt goes in chunks of `chunk` tokens (all at once when None),
    then one token per step; without: the whole text is recomputed every step."""
    out = idx
    if not use_cache:
        for _ in range(max_new_tokens):
            out = torch.cat((out, model(out)[:, -1:].argmax(-1)), dim=1)
        return out
    caches = model.new_caches(idx.shape[0], cache_cls)
    step = chunk or idx.shape[1]
    for s in range(0, idx.shape[1], step):
        logits = model(idx[:, s:s + step], caches)
    for _ in range(max_new_tokens):
        out = torch.cat((out, logits[:, -1:].argmax(-1)), dim=1)
        logits = model(out[:, -1:], caches)
    return out
