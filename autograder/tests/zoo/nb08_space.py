"""Solutions of notebook 08 for its declared contracts and input spaces (issues 35, 36), merged into
nb08's WRONG and RIGHT: float32-only code, bad input answered silently, a
size hard-coded to the old probes', positions far from 0, and right solutions in the styles the
rules allow (float64 or float32 arithmetic cast back, an explicit error for what the rules say
raises, more general than a precondition asks)."""
import math

import torch
import torch.nn.functional as F

from autograder.tests.zoo.nb08 import rope_fn, rope_mha_class

_rope = rope_fn()


# sinusoidal_positions ------------------------------------------------------------------------
def sinusoidal_float16_positions(num_positions, d_model, base=10000.0):
    """Positions counted in float16: from 2048 on, odd positions round to even ones."""
    t = torch.arange(num_positions, dtype=torch.float16).float()[:, None]
    w = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    return torch.stack((torch.sin(t * w), torch.cos(t * w)), -1).flatten(1)


def sinusoidal_float64(num_positions, d_model, base=10000.0):
    """Right: angles in float64, the table cast to float32 at the end."""
    t = torch.arange(num_positions, dtype=torch.float64)[:, None]
    w = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.stack((torch.sin(t * w), torch.cos(t * w)), -1).flatten(1).float()


def sinusoidal_any_width(num_positions, d_model, base=10000.0):
    """Right, and more general than the precondition: an odd d_model keeps the sine of its last pair."""
    pe = torch.zeros(num_positions, d_model)
    t = torch.arange(num_positions, dtype=torch.float32)[:, None]
    w = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)
    pe[:, 0::2] = torch.sin(t * w)
    pe[:, 1::2] = torch.cos(t * w)[:, : d_model // 2]
    return pe


# rope_inverse_frequencies --------------------------------------------------------------------
def frequencies_float64(head_dim, theta=10000.0):
    """Right: computed in float64 (exp-log), returned as float32, and an odd head_dim refused."""
    if head_dim % 2:
        raise ValueError("head_dim must be even")
    return torch.exp(-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim * math.log(theta)).float()


def frequencies_hard_coded_64(head_dim, theta=10000.0):
    """A table of 32 frequencies for head_dim 64, cut to size: wrong for any other head_dim."""
    table = theta ** (-torch.arange(0, 64, 2, dtype=torch.float32) / 64)
    return table[: head_dim // 2]


# apply_rope ----------------------------------------------------------------------------------
def rope_cos_sin_float32(x, positions, theta=10000.0, interleaved=False):
    """cos and sin left in float32: a bfloat16 x comes back float32."""
    hd = x.shape[-1]
    angles = positions.float()[:, None] * theta ** (-torch.arange(0, hd, 2, dtype=torch.float32, device=x.device) / hd)
    cos, sin = angles.cos(), angles.sin()
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)
    a, b = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)


def rope_float32_cast_back(x, positions, theta=10000.0, interleaved=False):
    """Right: everything in float32 (Llama's idiom), cast back to x's dtype."""
    out = _rope(x.float(), positions, theta, interleaved)
    return out.to(x.dtype)


def rope_float64_angles_einsum(x, positions, theta=10000.0, interleaved=False):
    """Right: angles in float64, pairs as a (..., hd/2, 2) view turned by an einsum with (T, hd/2, 2, 2) rotations."""
    hd = x.shape[-1]
    w = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64, device=x.device) / hd)
    a = positions.double()[:, None] * w
    rot = torch.stack((torch.stack((a.cos(), -a.sin()), -1), torch.stack((a.sin(), a.cos()), -1)), -2).to(x.dtype)
    pairs = x.unflatten(-1, (hd // 2, 2)) if interleaved else x.unflatten(-1, (2, hd // 2)).transpose(-1, -2)
    turned = torch.einsum("tpij,...tpj->...tpi", rot, pairs)
    return turned.flatten(-2) if interleaved else turned.transpose(-1, -2).flatten(-2)


# interleaved_to_half_split ---------------------------------------------------------------------
def permute_view(weight, num_heads):
    """Right: rows regrouped with view (splitting the first dimension is a view in any layout); bad sizes fail in view."""
    hd = weight.shape[0] // num_heads
    rest = weight.shape[1:]
    return weight.view(num_heads, hd // 2, 2, *rest).transpose(1, 2).reshape(weight.shape)


def permute_silent_on_odd(weight, num_heads):
    """An index list that answers for an odd head_dim too (its last row left in place): bad input must raise."""
    d_out = weight.shape[0]
    hd = d_out // num_heads
    rows = [h * hd + r for h in range(num_heads) for r in (*range(0, hd, 2), *range(1, hd, 2))]
    return weight[torch.tensor(rows + list(range(len(rows), d_out)))]


def permute_index_select(weight, num_heads):
    """Right: a ValueError for bad sizes, then index_select with the permutation built from arange."""
    d_out = weight.shape[0]
    if d_out % num_heads or (d_out // num_heads) % 2:
        raise ValueError("d_out must split into num_heads heads of even width")
    hd = d_out // num_heads
    within = torch.cat((torch.arange(0, hd, 2), torch.arange(1, hd, 2)))
    rows = (torch.arange(num_heads)[:, None] * hd + within).flatten().to(weight.device)
    return weight.index_select(0, rows)


# RoPEMultiHeadAttention ----------------------------------------------------------------------
class RoPEHeadDimFour(rope_mha_class()):
    """head_dim hard-coded to 4, the width of every head the old probes used."""

    def __init__(self, d_in, d_out, context_length, num_heads, theta=10000.0, interleaved=False, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, num_heads, theta, interleaved, qkv_bias)
        self.h, self.hd = d_out // 4, 4


class RoPEFloat32(rope_mha_class()):
    """Casts its input to float32 whatever the layer's dtype: a layer moved to float64 crashes."""

    def forward(self, x, kv_cache=None):
        return super().forward(x.float(), kv_cache)


class RoPETable(rope_mha_class()):
    """Right: a cos/sin table over context_length built in __init__ as buffers (Hugging Face's
    rotary embedding), moved with the layer by .to(); half-split and interleaved both read it."""

    def __init__(self, d_in, d_out, context_length, num_heads, theta=10000.0, interleaved=False, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, num_heads, theta, interleaved, qkv_bias)
        hd = d_out // num_heads
        angles = torch.arange(context_length, dtype=torch.float32)[:, None] * theta ** (-torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        self.register_buffer("cos_table", angles.cos(), persistent=False)
        self.register_buffer("sin_table", angles.sin(), persistent=False)

    def forward(self, x, kv_cache=None):
        B, T, _ = x.shape
        start = 0 if kv_cache is None else kv_cache.seq_len
        cos, sin = self.cos_table[start:start + T], self.sin_table[start:start + T]
        heads = lambda t: t.reshape(B, T, self.h, self.hd).transpose(1, 2)

        def turn(t):
            if self.interleaved:
                a, b = t[..., 0::2], t[..., 1::2]
                return torch.stack((a * cos - b * sin, a * sin + b * cos), -1).flatten(-2)
            a, b = t[..., : self.hd // 2], t[..., self.hd // 2:]
            return torch.cat((a * cos - b * sin, a * sin + b * cos), -1)
        q, k, v = turn(heads(self.W_query(x))), turn(heads(self.W_key(x))), heads(self.W_value(x))
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        S = k.shape[2]
        scores = (q @ k.transpose(-2, -1) / math.sqrt(self.hd)).masked_fill(torch.ones(T, S, dtype=torch.bool, device=x.device).triu(1 + S - T), float("-inf"))
        return self.out_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, self.h * self.hd))


class RoPEFloat64SDPA(rope_mha_class()):
    """Right: float64 angles (rotation matrices, einsum) and F.scaled_dot_product_attention with a bottom-right mask."""

    def forward(self, x, kv_cache=None):
        B, T, _ = x.shape
        start = 0 if kv_cache is None else kv_cache.seq_len
        pos = torch.arange(start, start + T, device=x.device)
        heads = lambda t: t.reshape(B, T, self.h, self.hd).transpose(1, 2)
        q, k = (rope_float64_angles_einsum(heads(w(x)), pos, self.theta, self.interleaved) for w in (self.W_query, self.W_key))
        v = heads(self.W_value(x))
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        allowed = torch.ones(T, k.shape[2], dtype=torch.bool, device=x.device).tril(k.shape[2] - T)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, self.h * self.hd))


WRONG = {
    "sinusoidal_positions": {
        "positions counted in float16": (sinusoidal_float16_positions, "4105"),
    },
    "rope_inverse_frequencies": {
        "a table for head_dim 64, cut to size": (frequencies_hard_coded_64, "rope_inverse_frequencies"),
    },
    "apply_rope": {
        "cos and sin left in float32": (rope_cos_sin_float32, "must follow its input's dtype"),
    },
    "interleaved_to_half_split": {
        "odd head_dim answered": (permute_silent_on_odd, "returns a result for bad input"),
    },
    "RoPEMultiHeadAttention": {
        "head_dim hard-coded to 4": (RoPEHeadDimFour, "crashed"),
        "float32 whatever the layer's dtype": (RoPEFloat32, "crashed"),
    },
}

RIGHT = {
    "sinusoidal_positions": {"float64 angles, cast to float32": sinusoidal_float64, "an odd d_model handled too": sinusoidal_any_width},
    "rope_inverse_frequencies": {"float64 exp-log, cast back, odd head_dim refused": frequencies_float64},
    "apply_rope": {"float32 arithmetic cast back": rope_float32_cast_back,
                   "float64 angles, einsum over (hd/2, 2) pairs": rope_float64_angles_einsum},
    "interleaved_to_half_split": {"ValueError, then index_select": permute_index_select, "view, transpose, reshape": permute_view},
    "RoPEMultiHeadAttention": {"a cos/sin table built in __init__": RoPETable, "float64 angles, SDPA": RoPEFloat64SDPA},
}
