"""Issue 29, last round: notebook 04 solutions an adversarial learner might write (WRONG) or that are right another way (RIGHT)."""
import functools
import math

import torch
from torch import nn


# causal_mask -----------------------------------------------------------------------------
def mask_last_rows_of_square(num_queries, num_keys=None, device=None):
    """RIGHT within the contract (T_q <= T_k; the notebook leaves T_q > T_k open): the last T_q rows of the (T_k, T_k) mask."""
    num_keys = num_queries if num_keys is None else num_keys
    return torch.ones(num_keys, num_keys, dtype=torch.bool, device=device).triu(1)[-num_queries:]


@functools.lru_cache(maxsize=None)
def _cached_mask(num_queries, num_keys, device):
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).triu(1 + num_keys - num_queries)


def mask_cached(num_queries, num_keys=None, device=None):
    """functools.lru_cache: every caller gets the same tensor, so one caller's in-place change reaches the next."""
    return _cached_mask(num_queries, num_queries if num_keys is None else num_keys, device)


def mask_uint8(num_queries, num_keys=None, device=None):
    num_keys = num_queries if num_keys is None else num_keys
    return torch.ones(num_queries, num_keys, dtype=torch.uint8, device=device).triu(1 + num_keys - num_queries)


def mask_square_slice(num_queries, num_keys=None, device=None):
    """RIGHT: the bottom-right (T_q, T_k) block of a (T, T) mask, T = max(T_q, T_k)."""
    num_keys = num_queries if num_keys is None else num_keys
    n = max(num_queries, num_keys)
    full = torch.ones(n, n, dtype=torch.bool, device=device).triu(1)
    return full[n - num_queries:, n - num_keys:].clone()


# mask_and_renormalize --------------------------------------------------------------------
def renorm_no_keepdim(weights, mask):
    """Row sums without keepdim: for square weights they divide column by column."""
    kept = weights.masked_fill(mask, 0.0)
    s = kept.sum(-1)
    return kept / (s.unsqueeze(-1) if s.shape[-1:] != kept.shape[-1:] else s)


def renorm_float64_sums(weights, mask):
    kept = weights.masked_fill(mask, 0.0)
    return kept / kept.sum(-1, keepdim=True, dtype=torch.float64)


def renorm_mask_first_item(weights, mask):
    """Uses mask[0] when the mask has a batch dimension."""
    m = mask[0] if mask.dim() > 2 else mask
    kept = weights.masked_fill(m, 0.0)
    return kept / kept.sum(-1, keepdim=True)


def renorm_einsum(weights, mask):
    """RIGHT: the allowed mask cast to the weights' dtype, row sums by einsum."""
    kept = weights * (~mask).to(weights.dtype)
    return kept / torch.einsum("...k->...", kept).unsqueeze(-1)


# masked_softmax --------------------------------------------------------------------------
def msoftmax_max_last_dim(scores, mask, dim=-1):
    """The maximum over the last dim whatever dim is: the shift is not constant along dim."""
    s = scores.masked_fill(mask, float("-inf"))
    e = torch.exp(s - s.amax(-1, keepdim=True).clamp_min(-1e30))
    return e / e.sum(dim, keepdim=True)


def msoftmax_fill_minus_1e9(scores, mask, dim=-1):
    """A finite fill: visible scores below -1e9 lose to the blocked ones."""
    return torch.softmax(scores.masked_fill(mask, -1e9), dim=dim)


def msoftmax_moved_to_last(scores, mask, dim=-1):
    """RIGHT: dim moved to the end (the mask expanded first), softmax over -1, moved back."""
    filled = scores.masked_fill(mask.expand_as(scores), float("-inf"))
    return torch.softmax(filled.movedim(dim, -1), dim=-1).movedim(-1, dim)


def msoftmax_log_softmax(scores, mask, dim=-1):
    """RIGHT: log_softmax, then exp."""
    return torch.log_softmax(scores.masked_fill(mask, float("-inf")), dim=dim).exp()


# CausalSelfAttention ---------------------------------------------------------------------
class _Base(nn.Module):
    def __init__(self, d_in, d_out, context_length, qkv_bias=False):
        super().__init__()
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))

    def _attend(self, x, mask, scale=None):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        scale = k.shape[-1] ** -0.5 if scale is None else scale
        s = (q @ k.transpose(-2, -1) * scale).masked_fill(mask, float("-inf"))
        return torch.softmax(s, -1) @ v


class CSARejectsFullLength(_Base):
    """ValueError already at T == context_length (off by one)."""
    def forward(self, x):
        T = x.shape[-2]
        if T >= self.context_length:
            raise ValueError(T)
        return self._attend(x, self.mask[:T, :T])


class CSAFirstSliceKept(_Base):
    """The mask slice of the first call kept for every later call."""
    def forward(self, x):
        T = x.shape[-2]
        if T > self.context_length:
            raise ValueError(T)
        if not hasattr(self, "_m"):
            self._m = self.mask[:T, :T]
        return self._attend(x, self._m if self._m.shape[0] >= T else self.mask[:T, :T])


class CSAScaleDin(_Base):
    def __init__(self, d_in, d_out, context_length, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, qkv_bias)
        self.d_in = d_in

    def forward(self, x):
        T = x.shape[-2]
        if T > self.context_length:
            raise ValueError(T)
        return self._attend(x, self.mask[:T, :T], scale=self.d_in ** -0.5)


class CSAMask1024(_Base):
    """The mask is always 1024 x 1024, whatever context_length is."""
    def __init__(self, d_in, d_out, context_length, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, qkv_bias)
        self.register_buffer("mask", torch.ones(1024, 1024, dtype=torch.bool).triu(1))

    def forward(self, x):
        T = x.shape[-2]
        if T > self.context_length:
            raise ValueError(T)
        return self._attend(x, self.mask[:T, :T])


class CSANoRaiseSlicesShort(_Base):
    """No ValueError: for T > context_length it attends with the mask padded by True (blocked)."""
    def forward(self, x):
        T = x.shape[-2]
        m = self.mask[:T, :T]
        if T > self.context_length:
            m = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        return self._attend(x, m)


class CSABottomRightSlice(_Base):
    """RIGHT: the bottom-right T x T block of the buffer (the same triangle)."""
    def forward(self, x):
        T = x.shape[-2]
        if T > self.context_length:
            raise ValueError(f"{T} > {self.context_length}")
        return self._attend(x, self.mask[-T:, -T:])


class CSAAllowedTril(nn.Module):
    """RIGHT: a tril buffer named mask holding the *blocked* positions as ~tril, math.sqrt, F.softmax."""
    def __init__(self, d_in, d_out, context_length, qkv_bias=False):
        super().__init__()
        self.context_length = context_length
        for n in ("W_query", "W_key", "W_value"):
            setattr(self, n, nn.Linear(d_in, d_out, bias=qkv_bias))
        self.register_buffer("mask", ~torch.tril(torch.ones(context_length, context_length, dtype=torch.bool)))

    def forward(self, x):
        T = x.shape[-2]
        if T > self.context_length:
            raise ValueError("sequence longer than context_length")
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        s = torch.matmul(q, k.mT) / math.sqrt(q.size(-1))
        s = s.masked_fill(self.mask[:T, :T], -math.inf)
        return torch.nn.functional.softmax(s, dim=-1) @ v


WRONG = {
    "causal_mask": {"lru_cache: one tensor shared by all callers": (mask_cached, "returned the same tensor on a second call"), "uint8 mask": (mask_uint8, "must be boolean")},
    "mask_and_renormalize": {"row sums without keepdim": (renorm_no_keepdim, "crashed with RuntimeError"), "row sums in float64": (renorm_float64_sums, "must follow its input's dtype"),
                             "mask[0] of a batched mask": (renorm_mask_first_item, "padding mask")},
    "masked_softmax": {"maximum over the last dim whatever dim is": (msoftmax_max_last_dim, "ignores its dim argument"), "blocked scores set to -1e9": (msoftmax_fill_minus_1e9, "scores of about -2e9")},
    "CausalSelfAttention": {"ValueError at T == context_length": (CSARejectsFullLength, "crashed with ValueError"), "first call's mask slice kept": (CSAFirstSliceKept, "slice the buffer to the input"),
                            "scale by sqrt(d_in)": (CSAScaleDin, "CausalSelfAttention is wrong"), "mask always 1024 x 1024": (CSAMask1024, "must cover the whole context"),
                            "no ValueError, a fresh mask for long inputs": (CSANoRaiseSlicesShort, "must raise ValueError")},
}

RIGHT = {
    "causal_mask": {"bottom-right block of a square mask": mask_square_slice, "last T_q rows of the (T_k, T_k) mask": mask_last_rows_of_square},
    "mask_and_renormalize": {"allowed mask in the weights' dtype, einsum row sums": renorm_einsum},
    "masked_softmax": {"log_softmax then exp": msoftmax_log_softmax, "dim moved to the end and back": msoftmax_moved_to_last},
    "CausalSelfAttention": {"bottom-right slice of the buffer": CSABottomRightSlice, "~tril buffer, math.sqrt, F.softmax": CSAAllowedTril},
}
