"""Solutions of notebook 07 that its declared input spaces exist to judge (merged into nb07's WRONG
and RIGHT): keys and values in different layouts, a caller's tensor kept as the cache, the cache's
ValueError swallowed, sizes fixed at the pinned probes', float32-only code, and generate on a
grouped-query GPT or a float64 one."""
import math

import torch

from autograder.tests.zoo.nb07 import cache_class, gqa_class
from utils.kv_cache import KVCache


# KVCache ------------------------------------------------------------------------------------
class ValuesThroughView(cache_class()):
    """The values copied through .view(B, H, -1): fine while v is contiguous (as in the pinned probes),
    a crash when keys and values come in different layouts."""

    def update(self, k_new, v_new):
        B, H, T, hd = v_new.shape
        start, end = self.seq_len, self.seq_len + T
        if end > self.max_seq_len:
            raise ValueError(f"{end} positions do not fit in {self.max_seq_len}")
        self.k[:, :, start:end] = k_new
        self.v[:, :, start:end] = v_new.view(B, H, T * hd).view(B, H, T, hd)
        self.seq_len = end
        return self.k[:, :, :end], self.v[:, :, :end]


class KeepsCallersTensor(cache_class()):
    """A write that fills the whole cache keeps the caller's tensors instead of copying them: a
    later write into the cache would change the caller's keys."""

    def update(self, k_new, v_new):
        if self.seq_len == 0 and k_new.shape[2] == self.max_seq_len:
            self.k, self.v, self.seq_len = k_new, v_new, self.max_seq_len
            return self.k, self.v
        return super().update(k_new, v_new)


# The cached layers --------------------------------------------------------------------------
def swallows_overflow(mha):
    """Catches the cache's ValueError and starts the cache again: a silent answer past max_seq_len."""
    class Layer(gqa_class(mha=mha)):
        def forward(self, x, kv_cache=None):
            if kv_cache is not None and kv_cache.seq_len + x.shape[1] > kv_cache.max_seq_len:
                kv_cache.reset()
            return super().forward(x, kv_cache)
    return Layer


def layer_variant(kind, mha):
    """A cached layer with one mistake of size or dtype (WRONG), by `kind`."""
    class Layer(gqa_class(mha=mha)):
        def forward(self, x, kv_cache=None):
            B, T, _ = x.shape
            h, g, hd = self.num_heads, self.g, self.head_dim
            flat = x.view(B * T, -1) if kind == "flat view" else x.reshape(B * T, -1)  # .view needs a contiguous x
            q = self.W_query(flat).view(B, T, h, hd).transpose(1, 2)
            k, v = (layer(flat).view(B, T, g, hd).transpose(1, 2) for layer in (self.W_key, self.W_value))
            if kv_cache is not None:
                k, v = kv_cache.update(k, v)
            k, v = k.repeat_interleave(h // g, dim=1), v.repeat_interleave(h // g, dim=1)
            S = k.shape[2]
            scores = q @ k.mT / math.sqrt(3 if kind == "scale sqrt(3)" else hd)
            allowed = torch.arange(S, device=x.device)[None, :] <= torch.arange(S - T, S, device=x.device)[:, None]
            if kind == "additive float32 mask":
                scores = scores + torch.zeros(T, S, device=x.device).masked_fill(~allowed, float("-inf"))
            else:
                scores = scores.masked_fill(~allowed, float("-inf"))
            return self.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, h * hd))
    return Layer


# generate -----------------------------------------------------------------------------------
def generate_own_caches(kind):
    """Caches made by hand: with n_heads key/value heads of float32 ("MHA, float32": right only for a
    multi-head float32 GPT), or per layer as model.new_caches makes them ("per layer": RIGHT)."""
    @torch.no_grad()
    def generate(model, token_ids, max_new_tokens, use_cache=True):
        B, T = token_ids.shape
        cfg, p = model.cfg, next(model.parameters())
        if kind == "per layer":
            caches = [KVCache(B, T + max_new_tokens, getattr(b.att, "num_kv_heads", b.att.num_heads), b.att.head_dim,
                              dtype=p.dtype, device=p.device) for b in model.trf_blocks]
        else:
            caches = [KVCache(B, T + max_new_tokens, cfg.n_heads, cfg.emb_dim // cfg.n_heads, device=p.device) for _ in model.trf_blocks]
        ids, fresh = token_ids, token_ids
        for _ in range(max_new_tokens):
            logits = model(fresh, caches) if use_cache else model(ids)
            next_id = logits[:, -1].argmax(dim=-1, keepdim=True)
            ids, fresh = torch.cat((ids, next_id), dim=1), next_id
        return ids
    return generate


WRONG = {
    "KVCache": {
        "values copied through .view (keys and values in different layouts)": (ValuesThroughView, "crashed"),
        "the caller's tensors kept when one write fills the cache": (KeepsCallersTensor, "shares memory with"),
    },
    "CachedMultiHeadAttention": {
        "the cache's ValueError swallowed (reset and go on)": (swallows_overflow(True), "returns a result for bad input"),
        "scale by sqrt(3), the pinned head_dim": (layer_variant("scale sqrt(3)", True), "differs from the course's"),
        "projections of x.view(B * T, d_in)": (layer_variant("flat view", True), "crashed"),
        "an additive mask made in float32": (layer_variant("additive float32 mask", True), "combines tensors of two dtypes"),
    },
    "GroupedQueryAttention": {
        "the cache's ValueError swallowed (reset and go on)": (swallows_overflow(False), "returns a result for bad input"),
        "projections of x.view(B * T, d_in)": (layer_variant("flat view", False), "crashed"),
        "an additive mask made in float32": (layer_variant("additive float32 mask", False), "combines tensors of two dtypes"),
    },
    "generate": {
        "caches made by hand with n_heads float32 heads": (generate_own_caches("MHA, float32"), "crashed"),
    },
}

RIGHT = {
    "generate": {"caches made by hand, per layer, as new_caches does": generate_own_caches("per layer")},
}
