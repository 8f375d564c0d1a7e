"""Solutions of notebook 07 that grading must reject (WRONG) or accept (RIGHT)."""
import collections
import math

import torch
import torch.nn.functional as F
from torch import nn

from utils.multihead import MultiHeadAttention


# KVCache ------------------------------------------------------------------------------------
def cache_class(mistake=None, style="slice"):
    class Cache:
        def __init__(self, batch_size, max_seq_len, num_kv_heads, head_dim, dtype=torch.float32, device=None):
            self.max_seq_len = max_seq_len
            make = torch.empty if style == "empty" else torch.zeros
            if mistake == "not preallocated":
                self.k = self.v = None
            else:
                self.k = make(batch_size, num_kv_heads, max_seq_len, head_dim,
                              dtype=torch.float32 if mistake == "ignores dtype" else dtype,
                              device=None if mistake == "ignores device" else device)
                self.v = make(batch_size, num_kv_heads, max_seq_len, head_dim, dtype=self.k.dtype, device=self.k.device)
            self.seq_len = 0
            self._filled = None

        def update(self, k_new, v_new):
            start, end = self.seq_len, self.seq_len + k_new.shape[2]
            if mistake == "keeps every update":  # a debugging log that outlives reset(): memory grows forever
                self.__dict__.setdefault("log", collections.deque()).append((k_new.clone(), v_new.clone()))
            if mistake == "wrong axis":
                fk = k_new if self._filled is None else torch.cat((self._filled[0], k_new), dim=1)
                fv = v_new if self._filled is None else torch.cat((self._filled[1], v_new), dim=1)
                self._filled = (fk, fv)
                self.seq_len = end
                return fk, fv
            if end > self.max_seq_len and mistake != "no overflow check":
                raise ValueError("cache full")
            if mistake == "replaces buffer":  # right values, but a new tensor every step
                self.k = torch.cat((self.k[:, :, :start], k_new, self.k[:, :, end:]), dim=2)
                self.v = torch.cat((self.v[:, :, :start], v_new, self.v[:, :, end:]), dim=2)
            elif style == "narrow":
                self.k.narrow(2, start, k_new.shape[2]).copy_(k_new)
                self.v.narrow(2, start, v_new.shape[2]).copy_(v_new)
            elif style == "index_copy":
                idx = torch.arange(start, end, device=k_new.device)
                self.k.index_copy_(2, idx, k_new)
                self.v.index_copy_(2, idx, v_new)
            elif mistake == "view of input":  # .view needs a contiguous input
                self.k[:, :, start:end] = k_new.view(k_new.shape)
                self.v[:, :, start:end] = v_new.reshape(v_new.shape)
                k_new.view(-1)
            else:
                self.k[:, :, start:end] = k_new
                self.v[:, :, start:end] = v_new
            if mistake != "seq_len frozen":
                self.seq_len = end
            if mistake == "whole buffer":
                return self.k, self.v
            if mistake == "returns copies":
                return self.k[:, :, :end].clone(), self.v[:, :, :end].clone()
            return self.k[:, :, :end], self.v[:, :, :end]

        def reset(self):
            if mistake == "no reset":
                return
            if mistake == "reset zeros only":
                self.k.zero_(); self.v.zero_()
                return
            self.seq_len = 0
    return Cache


# Attention layers ---------------------------------------------------------------------------
def gqa_class(mistake=None, style="repeat_interleave", mha=False):
    """A layer for both exercises (mha=True: one KV head per query head)."""
    class Layer(MultiHeadAttention if style == "subclass of 06" else nn.Module):
        def __init__(self, d_in, d_out, context_length, num_heads, num_kv_groups=None, qkv_bias=False):
            groups = num_heads if mha else num_kv_groups
            if style == "subclass of 06":  # notebook 06's layer gives the four projections
                super().__init__(d_in, d_out, context_length, 0.0, num_heads, qkv_bias)
            else:
                nn.Module.__init__(self)
            self.num_heads, self.head_dim = num_heads, d_out // num_heads
            if mistake == "other attribute names":
                self.n_kv = groups
            elif not mha or mistake == "num_kv_heads wrong":
                self.num_kv_heads = groups if mistake != "num_kv_heads wrong" else 1
            kv_out = d_out if mistake == "full width kv" else groups * self.head_dim
            self.g = groups
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, kv_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, kv_out, bias=qkv_bias)
            self.out_proj = nn.Linear(d_out, d_out)
            self.history, self.seen = None, 0
            if mistake == "other attribute names" and mha:  # the GPT reads num_heads and head_dim
                self.n_heads, self.hd = self.__dict__.pop("num_heads"), self.__dict__.pop("head_dim")

        def forward(self, x, kv_cache=None):
            if mistake == "no_grad forward":
                with torch.no_grad():
                    return self.attend(x, kv_cache)
            return self.attend(x, kv_cache)

        def attend(self, x, kv_cache):
            B, T, _ = x.shape
            h, hd = (self.n_heads, self.hd) if hasattr(self, "n_heads") else (self.num_heads, self.head_dim)
            split = lambda t, n: t.view(B, t.shape[1], n, hd).transpose(1, 2)
            q = split(self.W_query(x), h)
            if mistake == "projects prefix" and kv_cache is not None:
                if kv_cache.seq_len == 0:
                    self.history = None
                self.history = x if self.history is None else torch.cat((self.history, x), dim=1)
                k_all, v_all = split(self.W_key(self.history), self.g), split(self.W_value(self.history), self.g)
                kv_cache.update(k_all[:, :, -T:], v_all[:, :, -T:])
                k, v = k_all, v_all
            else:
                k, v = split(self.W_key(x), self.g), split(self.W_value(x), self.g)
                if mistake == "keys half detached":  # right outputs; W_key gets half its gradient
                    k = 0.5 * k + 0.5 * k.detach()
                group = h // self.g
                if mistake == "caches repeated heads":
                    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
                if kv_cache is not None and mistake != "ignores cache":
                    k, v = kv_cache.update(k, v)
            S = k.shape[2]
            start = S - T
            if mistake == "keeps a position counter":  # its own count of the tokens seen, never reset
                start = self.seen if kv_cache is not None else 0
                self.seen += T if kv_cache is not None else 0
            if mistake == "top-left mask":
                blocked = torch.ones(T, S, dtype=torch.bool, device=x.device).triu(1)
            elif mistake == "no mask":
                blocked = torch.zeros(T, S, dtype=torch.bool, device=x.device)
            elif mistake == "mask on the CPU":  # right on this machine; a GPU refuses the mix
                blocked = torch.arange(S)[None, :] > torch.arange(start, start + T)[:, None]
            else:
                blocked = torch.arange(S, device=x.device)[None, :] > torch.arange(start, start + T, device=x.device)[:, None]
            if style == "sdpa":  # the softmax is not what 07 teaches: PyTorch's fused kernel is fine
                ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=~blocked, enable_gqa=k.shape[1] != h)
                return self.out_proj(ctx.transpose(1, 2).reshape(B, T, h * hd))
            group = h // k.shape[1]
            if mistake == "repeat":
                k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
            elif style == "expand":
                k = k[:, :, None].expand(B, k.shape[1], group, S, hd).reshape(B, h, S, hd)
                v = v[:, :, None].expand(B, v.shape[1], group, S, hd).reshape(B, h, S, hd)
            else:
                k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            if style == "einsum":
                scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(hd)
            else:
                scores = q @ k.transpose(-2, -1) / math.sqrt(hd)
            scores = torch.where(blocked, float("-inf"), scores)
            if mistake == "softmax in float32":
                weights = scores.softmax(dim=-1, dtype=torch.float32)
            elif style == "float32 softmax":  # Llama's and Hugging Face's idiom: right by the precision rule
                weights = scores.softmax(dim=-1, dtype=torch.float32).to(scores.dtype)
            else:
                weights = scores.softmax(dim=-1)
            ctx = weights @ v
            return self.out_proj(ctx.transpose(1, 2).reshape(B, T, h * hd))
    return Layer


# generate -------------------------------------------------------------------------------------
def generate_fn(mistake=None, style="plain"):
    def generate(model, token_ids, max_new_tokens, use_cache=True):
        B, T = token_ids.shape
        cached = use_cache if mistake not in ("ignores use_cache", "always caches") else mistake == "always caches"
        with torch.set_grad_enabled(mistake == "records gradients"):
            if mistake == "stale caches":
                if not hasattr(model, "_zoo_caches"):
                    model._zoo_caches = model.new_caches(B, model.cfg.context_length)
                caches = model._zoo_caches
            else:
                caches = model.new_caches(B, T + max_new_tokens) if cached or mistake == "positions restart" else None
            ids, fresh = token_ids, token_ids
            while ids.shape[1] < T + max_new_tokens or (mistake == "at least one token" and ids.shape[1] == T):
                if mistake == "positions restart":
                    x = model.tok_emb(fresh) + model.pos_emb(torch.arange(fresh.shape[1]))
                    for block, cache in zip(model.trf_blocks, caches):
                        x = block(x, cache)
                    logits = model.out_head(model.final_norm(x))
                elif cached:
                    logits = (model(fresh, caches=caches) if style == "kwarg" else
                              model.forward(fresh, caches) if style == "forward" else model(fresh, caches))
                else:
                    logits = model.forward(ids) if style == "forward" else model(ids)
                last = logits[:, 0] if mistake == "first position" else logits[:, -1]
                if mistake == "samples":
                    next_id = torch.multinomial(torch.softmax(last, dim=-1), 1)
                else:
                    next_id = torch.argmax(last, dim=-1).unsqueeze(-1)
                ids = torch.cat([ids, next_id], dim=-1)
                fresh = next_id
        return ids
    return generate


# kv_cache_bytes -------------------------------------------------------------------------------
def bytes_fn(mistake=None):
    def kv_cache_bytes(batch_size, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_element=4 if mistake == "default 4" else 2):
        factor = 1 if mistake == "keys only" else 2
        if mistake == "bits":
            bytes_per_element *= 8
        if mistake == "float":  # bytes_per_element as bits / 8
            bytes_per_element = bytes_per_element * 8 / 8
        return math.prod((factor, batch_size, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_element))
    return kv_cache_bytes


WRONG = {
    "KVCache": {
        # the cache lives where it is told / 缓存放在指定的设备上
        "ignores its device= argument": (cache_class("ignores device"), "on the device it is given"),
        "whole buffer": (cache_class("whole buffer"), "whole preallocated buffer"),
        "no overflow check": (cache_class("no overflow check"), "max_seq_len"),
        "wrong axis": (cache_class("wrong axis"), "wrong axis"),
        "no reset": (cache_class("no reset"), "not reset"),
        "reset zeros only": (cache_class("reset zeros only"), "not reset"),
        "seq_len frozen": (cache_class("seq_len frozen"), "positions restart at 0"),
        "not preallocated": (cache_class("not preallocated"), "preallocate"),
        "ignores dtype": (cache_class("ignores dtype"), "dtype"),
        "replaces buffer": (cache_class("replaces buffer"), "write into the preallocated"),
        "returns copies": (cache_class("returns copies"), "not copies"),
        "view of input": (cache_class("view of input"), "not contiguous"),
        "keeps every update in a deque": (cache_class("keeps every update"), "holds more than it needs"),
    },
    "CachedMultiHeadAttention": {
        "top-left mask": (gqa_class("top-left mask", mha=True), "top-left aligned mask"),
        "mask made on the CPU": (gqa_class("mask on the CPU", mha=True), "another device"),
        "projects prefix": (gqa_class("projects prefix", mha=True), "projects the whole prefix"),
        "no mask": (gqa_class("no mask", mha=True), "must equal notebook 06"),
        "ignores cache": (gqa_class("ignores cache", mha=True), "With a cache"),
        "other attribute names": (gqa_class("other attribute names", mha=True), "self.num_heads"),
        "keeps a position counter": (gqa_class("keeps a position counter", mha=True), "keeps state across calls"),
        "softmax in float32": (gqa_class("softmax in float32", mha=True), "float64"),
        "no_grad forward": (gqa_class("no_grad forward", mha=True), "carry gradients"),
    },
    "GroupedQueryAttention": {
        "keys half detached": (gqa_class("keys half detached"), "The gradient of GroupedQueryAttention.W_key.weight"),
        "repeat": (gqa_class("repeat"), "repeat_interleave"),
        "caches repeated heads": (gqa_class("caches repeated heads"), "before they are repeated"),
        "full width kv": (gqa_class("full width kv"), "wrong shape"),
        "top-left mask": (gqa_class("top-left mask"), "top-left aligned mask"),
        "other attribute names": (gqa_class("other attribute names"), "self.num_kv_heads"),
        "num_kv_heads wrong": (gqa_class("num_kv_heads wrong"), "num_kv_heads"),
        "keeps a position counter": (gqa_class("keeps a position counter"), "keeps state across calls"),
        "softmax in float32": (gqa_class("softmax in float32"), "float64"),
        "no_grad forward": (gqa_class("no_grad forward"), "carry gradients"),
    },
    "generate": {
        "a token even when none is asked": (generate_fn("at least one token"), "no new tokens"),
        "samples": (generate_fn("samples"), "does not sample"),
        "ignores use_cache": (generate_fn("ignores use_cache"), "ignores use_cache=True"),
        "always caches": (generate_fn("always caches"), "ignores use_cache=False"),
        "first position": (generate_fn("first position"), "LAST position"),
        "stale caches": (generate_fn("stale caches"), "not reset between two prompts"),
        "positions restart": (generate_fn("positions restart"), "Positions restart at 0"),
        "records gradients": (generate_fn("records gradients"), "torch.no_grad()"),
    },
    "kv_cache_bytes": {
        "keys only": (bytes_fn("keys only"), "only one of keys and values"),
        "bits": (bytes_fn("bits"), "counts bits"),
        "default 4": (bytes_fn("default 4"), "defaults to 2"),
        "float": (bytes_fn("float"), "must return an int"),
    },
}

RIGHT = {
    "KVCache": {"slice": cache_class(), "empty + narrow": cache_class(style="narrow"),
                "index_copy": cache_class(style="index_copy"), "torch.empty": cache_class(style="empty")},
    "CachedMultiHeadAttention": {"where + arange mask": gqa_class(mha=True),
                                 "softmax in float32, cast back (Llama's idiom)": gqa_class(style="float32 softmax", mha=True), "einsum": gqa_class(style="einsum", mha=True),
                                 "SDPA, bottom-right mask": gqa_class(style="sdpa", mha=True),
                                 "subclass of notebook 06's MultiHeadAttention": gqa_class(style="subclass of 06", mha=True)},
    "GroupedQueryAttention": {"repeat_interleave": gqa_class(), "expand + reshape": gqa_class(style="expand"),
                              "einsum": gqa_class(style="einsum"), "SDPA, enable_gqa=True": gqa_class(style="sdpa"),
                              "subclass of notebook 06's MultiHeadAttention": gqa_class(style="subclass of 06")},
    "generate": {"while loop": generate_fn(), "caches as keyword": generate_fn(style="kwarg"),
                 "model.forward(...)": generate_fn(style="forward")},
    "kv_cache_bytes": {"math.prod": bytes_fn()},
}

from autograder.tests.zoo import nb07_adversary  # noqa: E402  (it imports cache_class and generate_fn from here)

for _exercise, _entries in nb07_adversary.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb07_adversary.RIGHT.items():
    RIGHT[_exercise].update(_entries)

from autograder.tests.zoo import nb07_contract  # noqa: E402  (the entries the declared input spaces judge)

for _exercise, _entries in nb07_contract.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb07_contract.RIGHT.items():
    RIGHT[_exercise].update(_entries)
