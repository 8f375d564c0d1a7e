"""Solutions of notebook 07 written as an adversarial learner would (merged into nb07's WRONG and
RIGHT): state across calls, dtypes after a reset, off-by-one at the cache's end, and valid
solutions written differently from the reference."""
import torch

from autograder.tests.zoo.nb07 import cache_class, generate_fn, gqa_class


# KVCache ------------------------------------------------------------------------------------
class ResetFloat32(cache_class()):
    """reset() reallocates the buffers with torch.zeros' default dtype: a bfloat16 cache comes back float32."""

    def reset(self):
        self.k, self.v = torch.zeros(self.k.shape, device=self.k.device), torch.zeros(self.v.shape, device=self.v.device)
        self.seq_len = 0


class FullIsOverflow(cache_class()):
    """Off by one at the end: refuses the write that fills the cache exactly."""

    def update(self, k_new, v_new):
        if self.seq_len + k_new.shape[2] >= self.max_seq_len:
            raise ValueError("cache full")
        return super().update(k_new, v_new)


class ReturnsNewOnly(cache_class()):
    """Returns only the positions just written, not every filled one."""

    def update(self, k_new, v_new):
        start = self.seq_len
        k, v = super().update(k_new, v_new)
        return k[:, :, start:], v[:, :, start:]


class ResetKeepsDtype:
    """Valid: one buffer for keys and values (2, B, H, T, hd), written with index_put_, reset() reallocates like __init__."""

    def __init__(self, batch_size, max_seq_len, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        self.shape, self.dtype, self.device = (2, batch_size, num_kv_heads, max_seq_len, head_dim), dtype, device
        self.reset()

    @property
    def k(self):
        return self.kv[0]

    @property
    def v(self):
        return self.kv[1]

    def reset(self):
        self.kv = torch.zeros(self.shape, dtype=self.dtype, device=self.device)
        self.seq_len = 0

    def update(self, k_new, v_new):
        end = self.seq_len + k_new.shape[2]
        if end > self.shape[3]:
            raise ValueError(f"{end} positions do not fit a cache of {self.shape[3]}")
        self.kv[:, :, :, self.seq_len:end] = torch.stack((k_new, v_new))
        self.seq_len = end
        return self.k[:, :, :end], self.v[:, :, :end]


# Attention layers ---------------------------------------------------------------------------
def first_batch_class(mha):
    """Remembers the batch size of its first call and merges the heads with it: right while every
    call has that batch, wrong (or a crash) for a batch of one after a batch of two."""
    base = gqa_class(mha=mha)

    class FirstBatch(base):
        def forward(self, x, kv_cache=None):
            self.__dict__.setdefault("batch", x.shape[0])
            return super().forward(x, kv_cache).reshape(self.batch, -1, self.out_proj.out_features)
    return FirstBatch


class _DetachedLinear(torch.nn.Linear):
    def forward(self, x):
        return torch.nn.functional.linear(x, self.weight.detach(), None if self.bias is None else self.bias.detach())


class DetachedValueWeight(gqa_class()):
    """Projects the values with W_value's weight detached: right outputs, W_value never trains."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.W_value.__class__ = _DetachedLinear


# generate -----------------------------------------------------------------------------------
def generate_token_by_token_prefill(model, token_ids, max_new_tokens, use_cache=True):
    """Right tokens; with the cache, the prompt is fed one token at a time (T passes instead of one)."""
    if not use_cache:
        return generate_fn()(model, token_ids, max_new_tokens, use_cache=False)
    with torch.no_grad():
        caches = model.new_caches(token_ids.shape[0], token_ids.shape[1] + max_new_tokens)
        ids = token_ids
        for t in range(token_ids.shape[1]):
            logits = model(token_ids[:, t:t + 1], caches)
        for _ in range(max_new_tokens):
            ids = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
            logits = model(ids[:, -1:], caches)
    return ids


@torch.inference_mode()
def generate_inference_mode(model, token_ids, max_new_tokens, use_cache=True):
    """Valid: a for loop under torch.inference_mode, caches as long as the model's context."""
    caches = model.new_caches(token_ids.shape[0], model.cfg.context_length) if use_cache else None
    out = token_ids
    for step in range(max_new_tokens):
        feed = out if caches is None or step == 0 else out[:, -1:]
        logits = model(feed, caches) if caches is not None else model(feed)
        out = torch.cat((out, logits[:, -1].argmax(-1)[:, None]), dim=1)
    return out


WRONG = {
    "KVCache": {
        "reset() reallocates in float32": (ResetFloat32, "a reset, then 1 token"),
        "a write that fills the cache exactly is refused": (FullIsOverflow, "fills the cache exactly"),
        "returns only the new positions": (ReturnsNewOnly, "only the keys just written"),
    },
    "CachedMultiHeadAttention": {
        "the batch size of the first call kept": (first_batch_class(True), "a batch of two, then a batch of one"),
    },
    "GroupedQueryAttention": {
        "the batch size of the first call kept": (first_batch_class(False), "a batch of two, then a batch of one"),
        "W_value's weight detached": (DetachedValueWeight, "W_value"),
    },
    "generate": {
        "the prompt fed one token at a time": (generate_token_by_token_prefill, "feed the prompt once"),
    },
}

RIGHT = {
    "KVCache": {"one stacked buffer, reset reallocates": ResetKeepsDtype},
    "generate": {"for loop under torch.inference_mode": generate_inference_mode},
}
