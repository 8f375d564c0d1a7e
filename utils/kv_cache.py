"""The KV cache, multi-query and grouped-query attention, greedy generation (notebook 07).

A decoder generates one token at a time. Without a cache every step runs the whole prefix
through the model again, recomputing keys and values that have not changed. With a cache each
layer keeps the keys and values of the tokens seen so far (queries are not kept: only the new
token asks a question), projects only the new token, and attends over the cache with the
bottom-right aligned causal mask of notebook 04.

Grouped-query attention (Ainslie et al., 2023) lets groups of query heads share one key/value
head: query head h reads kv group h // (num_heads // num_kv_groups). One group is multi-query
attention (Shazeer, 2019); num_heads groups is ordinary multi-head attention. The cache shrinks
by num_heads / num_kv_groups.

Shapes: x (B, T, D); q (B, H, T, hd); cached k, v (B, H_kv, max_seq_len, hd).
Full-size timing: `.venv/bin/python -m utils.bench_generate`.
"""
import math

import torch
from torch import nn

from utils.causal import causal_mask
from utils.multihead import merge_heads, split_heads


class KVCache:
    """Preallocated keys and values of one layer; `seq_len` positions are filled."""

    def __init__(self, batch_size, max_seq_len, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        self.max_seq_len = max_seq_len
        self.k = torch.zeros(batch_size, num_kv_heads, max_seq_len, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.seq_len = 0

    def update(self, k_new, v_new):  # (B, H_kv, T_new, hd) twice -> filled (B, H_kv, seq_len, hd) twice
        start, end = self.seq_len, self.seq_len + k_new.shape[2]
        if end > self.max_seq_len:
            raise ValueError(f"cache holds max_seq_len={self.max_seq_len} positions, {end} requested")
        self.k[:, :, start:end] = k_new
        self.v[:, :, start:end] = v_new
        self.seq_len = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def reset(self):
        self.seq_len = 0  # the old values are simply overwritten later


class ConcatKVCache:
    """The same interface, grown with torch.cat: each step copies the whole cache (for comparison)."""

    def __init__(self, batch_size, max_seq_len, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        self.max_seq_len, self.k, self.v = max_seq_len, None, None

    @property
    def seq_len(self):
        return 0 if self.k is None else self.k.shape[2]

    def update(self, k_new, v_new):
        if self.seq_len + k_new.shape[2] > self.max_seq_len:
            raise ValueError(f"cache holds max_seq_len={self.max_seq_len} positions")
        self.k = k_new if self.k is None else torch.cat((self.k, k_new), dim=2)
        self.v = v_new if self.v is None else torch.cat((self.v, v_new), dim=2)
        return self.k, self.v

    def reset(self):
        self.k = self.v = None


def cached_attention(q, k, v):
    """(B, H, T, hd) queries of the LAST T positions against (B, H, S, hd) keys: bottom-right mask."""
    T, S = q.shape[-2], k.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, S)
    if T > 1:  # one new token may see every key: nothing to mask
        scores = scores.masked_fill(causal_mask(T, S, device=q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


class GroupedQueryAttention(nn.Module):
    """num_heads query heads share num_kv_groups key/value heads; forward(x, kv_cache=None)."""

    def __init__(self, d_in, d_out, context_length, num_heads, num_kv_groups, qkv_bias=False):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        if num_heads % num_kv_groups:
            raise ValueError(f"num_heads={num_heads} must be divisible by num_kv_groups={num_kv_groups}")
        self.num_heads, self.num_kv_heads = num_heads, num_kv_groups
        self.head_dim = d_out // num_heads
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)

    def forward(self, x, kv_cache=None):  # (B, T, d_in) -> (B, T, d_out); x holds only NEW tokens
        T = x.shape[1]
        start = 0 if kv_cache is None else kv_cache.seq_len
        if start + T > self.context_length:
            raise ValueError(f"{start} cached + {T} new tokens exceed context_length={self.context_length}")
        q = split_heads(self.W_query(x), self.num_heads)  # (B, H, T, hd)
        k = split_heads(self.W_key(x), self.num_kv_heads)  # (B, H_kv, T, hd)
        v = split_heads(self.W_value(x), self.num_kv_heads)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H_kv, start + T, hd)
        group_size = self.num_heads // self.num_kv_heads
        if group_size > 1:  # head h reads group h // group_size: (g0, g0, g1, g1, ...), not (g0, g1, g0, g1)
            k, v = k.repeat_interleave(group_size, dim=1), v.repeat_interleave(group_size, dim=1)
        return self.out_proj(merge_heads(cached_attention(q, k, v)))


class CachedMultiHeadAttention(GroupedQueryAttention):
    """Notebook 06's MultiHeadAttention (no dropout) that can attend over a KV cache."""

    def __init__(self, d_in, d_out, context_length, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, num_heads, num_heads, qkv_bias)


@torch.no_grad()
def generate(model, token_ids, max_new_tokens, use_cache=True, cache_cls=KVCache):
    """Greedy decoding: (B, T) -> (B, T + max_new_tokens); the same tokens with and without a cache."""
    B, T = token_ids.shape
    if T + max_new_tokens > model.cfg.context_length:
        raise ValueError(f"{T} + {max_new_tokens} tokens exceed context_length={model.cfg.context_length}")
    was_training = model.training
    model.eval()
    caches = model.new_caches(B, T + max_new_tokens, cache_cls) if use_cache else None
    out, fresh = token_ids, token_ids  # fresh: what the model has not seen yet
    for _ in range(max_new_tokens):
        # with a cache: prefill the prompt once, then one token per step; without: the whole sequence
        logits = model(fresh, caches) if use_cache else model(out)  # (B, T_in, vocab)
        next_id = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1), greedy
        out = torch.cat((out, next_id), dim=1)
        fresh = next_id
    model.train(was_training)
    return out


def kv_cache_bytes(batch_size, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_element=2) -> int:
    """Keys AND values (the 2) of every layer, KV head, position and batch item."""
    return 2 * batch_size * seq_len * n_layers * n_kv_heads * head_dim * bytes_per_element
