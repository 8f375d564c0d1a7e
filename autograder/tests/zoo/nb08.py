"""Solutions of notebook 08 that grading must reject (WRONG) or accept (RIGHT)."""
import math

import torch
import torch.nn.functional as F
from torch import nn


# sinusoidal_positions ------------------------------------------------------------------------
def sinusoidal_fn(mistake=None, style="slices"):
    def sinusoidal_positions(num_positions, d_model, base=10000.0):
        if mistake == "ignores base":
            base = 10000.0
        if style == "loops":
            pe = torch.zeros(num_positions, d_model)
            for t in range(num_positions):
                for i in range(d_model // 2):
                    a = t / base ** (2 * i / d_model)
                    pe[t, 2 * i], pe[t, 2 * i + 1] = math.sin(a), math.cos(a)
            return pe
        step = torch.arange(d_model // 2, dtype=torch.float32) * (1 if mistake == "i over d" else 2)
        w = torch.exp(-step / d_model * math.log(base))
        angles = torch.arange(num_positions, dtype=torch.float32)[:, None] * w
        if mistake == "halves":
            return torch.cat((angles.sin(), angles.cos()), dim=-1)
        first, second = (angles.cos(), angles.sin()) if mistake == "swapped" else (angles.sin(), angles.cos())
        return torch.stack((first, second), dim=-1).reshape(num_positions, d_model)
    return sinusoidal_positions


# rope_inverse_frequencies -------------------------------------------------------------------
def frequencies_fn(mistake=None, style="power"):
    def rope_inverse_frequencies(head_dim, theta=10000.0):
        if mistake == "ignores theta":
            theta = 10000.0
        i = torch.arange(head_dim // 2, dtype=torch.float32)
        exponent = {"i over d": i / head_dim, "over half": 2 * i / (head_dim // 2),
                    "positive": -2 * i / head_dim}.get(mistake, 2 * i / head_dim)
        if style == "exp":
            return torch.exp(-exponent * math.log(theta))
        return 1.0 / theta ** exponent
    return rope_inverse_frequencies


# apply_rope ----------------------------------------------------------------------------------
def rope_fn(mistake=None, style="split"):
    def apply_rope(x, positions, theta=10000.0, interleaved=False):
        hd = x.shape[-1]
        if mistake == "ignores positions":
            positions = torch.arange(x.shape[-2])
        i = torch.arange(hd // 2, dtype=torch.float32)
        exponent = {"i over d": i / hd, "over half": 2 * i / (hd // 2)}.get(mistake, 2 * i / hd)
        inv_freq = (theta ** -exponent).to(positions.device)
        angles = positions.float()[:, None] * inv_freq  # (T, hd/2)
        if mistake == "angles in x's dtype":  # bfloat16 cannot tell position 4001 from 4000
            angles = positions.to(x.dtype)[:, None] * inv_freq.to(x.dtype)
        if mistake == "reverse":
            angles = -angles
        if mistake == "always interleaved":
            interleaved = True
        elif mistake == "always half-split":
            interleaved = False
        elif mistake == "layouts swapped":
            interleaved = not interleaved
        if mistake == "view":  # leading dimensions flattened with view: fails on heads split by a transpose
            out = rotated(x.view(-1, *x.shape[-2:]), angles, interleaved).view(x.shape)
        else:
            out = rotated(x, angles, interleaved)
        if mistake == "in place":
            return x.copy_(out)
        if mistake == "second half detached":
            half = out.shape[-1] // 2
            out = torch.cat((out[..., :half], out[..., half:].detach()), dim=-1)
        return out if mistake == "float32 result" else out.to(x.dtype)

    def rotated(x, angles, interleaved):
        hd = x.shape[-1]
        if interleaved:
            if style == "complex":
                z = torch.view_as_complex(x.float().reshape(*x.shape[:-1], hd // 2, 2).contiguous())
                return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).reshape(x.shape)
            x1, x2 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x1 * angles.cos() - x2 * angles.sin(), x1 * angles.sin() + x2 * angles.cos()), -1).flatten(-2)
        cos, sin = torch.cat((angles.cos(),) * 2, -1), torch.cat((angles.sin(),) * 2, -1)
        if mistake == "swapped":
            cos, sin = sin, cos
        return x * cos + torch.cat((-x[..., hd // 2:], x[..., : hd // 2]), dim=-1) * sin
    return apply_rope


# interleaved_to_half_split --------------------------------------------------------------------
def permute_fn(mistake=None):
    def interleaved_to_half_split(weight, num_heads):
        d_out = weight.shape[0]
        hd = d_out // num_heads
        if mistake == "global":
            return torch.cat((weight[0::2], weight[1::2]))
        if mistake == "columns":
            return torch.cat((weight[:, 0::2], weight[:, 1::2]), dim=1)
        if mistake == "identity":
            return weight.clone()
        if mistake == "float32":
            weight = weight.float()
        if mistake == "2-D only":  # (H, hd/2, 2, d_in) -> (H, 2, hd/2, d_in)
            return weight.view(num_heads, hd // 2, 2, weight.shape[1]).transpose(1, 2).reshape(weight.shape)
        if mistake is None and (d_out % num_heads or hd % 2):  # the rules: bad sizes raise
            raise ValueError(f"d_out={d_out} does not split into {num_heads} heads of even width")
        rows = []
        for h in range(num_heads):
            if mistake == "inverse":
                rows += [h * hd + (r // 2 if r % 2 == 0 else hd // 2 + r // 2) for r in range(hd)]
            else:
                rows += [h * hd + r for r in range(0, hd, 2)] + [h * hd + r for r in range(1, hd, 2)]
        return weight[torch.tensor(rows)]
    return interleaved_to_half_split


# RoPEMultiHeadAttention ----------------------------------------------------------------------
_rope = rope_fn()


def rope_mha_class(mistake=None, style="matmul"):
    class Layer(nn.Module):
        def __init__(self, d_in, d_out, context_length, num_heads, theta=10000.0, interleaved=False, qkv_bias=False):
            super().__init__()
            self.h, self.hd, self.theta, self.interleaved = num_heads, d_out // num_heads, theta, interleaved
            if mistake != "other names":  # what notebook 07's GPT reads to size the cache
                self.num_heads, self.head_dim = num_heads, d_out // num_heads
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.out_proj = nn.Linear(d_out, d_out)

        def forward(self, x, kv_cache=None):
            B, T, _ = x.shape
            start = 0 if kv_cache is None or mistake == "restart" else kv_cache.seq_len
            pos = torch.arange(start, start + T, device=x.device)
            interleaved = (not self.interleaved) if mistake == "layout ignored" else self.interleaved
            rot = (lambda t: t) if mistake == "no rope" else (lambda t: _rope(t, pos, self.theta, interleaved))
            heads = lambda t: t.reshape(B, T, self.h, self.hd).permute(0, 2, 1, 3)
            if mistake == "before split":
                q, k = heads(rot(self.W_query(x))), heads(rot(self.W_key(x)))
            else:
                q, k = rot(heads(self.W_query(x))), rot(heads(self.W_key(x)))
            if mistake == "detached":
                k = k.detach()
            if mistake == "rotated in place under no_grad":  # the values are right, the gradients see no rotation
                q, k = heads(self.W_query(x)).contiguous(), heads(self.W_key(x)).contiguous()
                with torch.no_grad():
                    q.copy_(_rope(q, pos, self.theta, interleaved))
                    k.copy_(_rope(k, pos, self.theta, interleaved))
            v = heads(self.W_value(x))
            if mistake == "values":
                v = rot(v)
            if kv_cache is not None:
                k, v = kv_cache.update(k, v)
            elif mistake == "own cache":  # keys and values kept in the module between calls
                if hasattr(self, "past"):
                    k, v = torch.cat((self.past[0], k), 2), torch.cat((self.past[1], v), 2)
                self.past = (k, v)
            S = k.shape[2]
            if style == "sdpa":  # the attention itself may be PyTorch's: what 08 teaches is the rotation
                allowed = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
                return self.out_proj(out.transpose(1, 2).reshape(B, T, self.h * self.hd))
            if style == "einsum":
                scores = torch.einsum("bhtd,bhsd->bhts", q, k) / math.sqrt(self.hd)
            else:
                scores = q @ k.transpose(-2, -1) / math.sqrt(self.hd)
            allowed = torch.ones(T, S, dtype=torch.bool, device=x.device).tril(S - T)
            if mistake == "exp without the max":  # right only while the scores stay small
                e = scores.masked_fill(~allowed, float("-inf")).exp()
                weights = e / e.sum(-1, keepdim=True)
            elif style == "float32 softmax":  # Llama's idiom: right
                weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")).float(), dim=-1).to(scores.dtype)
            else:
                weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1)
            return self.out_proj((weights @ v).permute(0, 2, 1, 3).reshape(B, T, self.h * self.hd))
    return Layer


WRONG = {
    "sinusoidal_positions": {
        "sin and cos swapped": (sinusoidal_fn("swapped"), "sin and cos are swapped"),
        "halves": (sinusoidal_fn("halves"), "first half"),
        "i over d": (sinusoidal_fn("i over d"), "base^(-i/d)"),
        "ignores base": (sinusoidal_fn("ignores base"), "base it is given"),
    },
    "rope_inverse_frequencies": {
        "theta^(-i/d)": (frequencies_fn("i over d"), "theta^(-i/d)"),
        "over head_dim // 2": (frequencies_fn("over half"), "head_dim // 2"),
        "positive exponent": (frequencies_fn("positive"), "wrong sign"),
        "ignores theta": (frequencies_fn("ignores theta"), "theta it is given"),
    },
    "apply_rope": {
        "always half-split": (rope_fn("always half-split"), "pairs are wrong"),
        "always interleaved": (rope_fn("always interleaved"), "pairs are wrong"),
        "layouts swapped": (rope_fn("layouts swapped"), "pairs are wrong"),
        "theta^(-i/d)": (rope_fn("i over d"), "theta^(-i/d)"),
        "over head_dim // 2": (rope_fn("over half"), "head_dim // 2"),
        "rotates backwards": (rope_fn("reverse"), "wrong way"),
        "sin and cos swapped": (rope_fn("swapped"), "sin and cos are swapped"),
        "ignores positions": (rope_fn("ignores positions"), "ignores the positions"),
        "view on split heads": (rope_fn("view"), "non-contiguous"),
        "writes into x": (rope_fn("in place"), "leave x unchanged"),
        "float32 result for other dtypes": (rope_fn("float32 result"), "input's dtype"),
        "angles in x's dtype": (rope_fn("angles in x's dtype"), "positions near 4000 in bfloat16"),
        "second half detached": (rope_fn("second half detached"), "The gradient of input 1 through apply_rope"),
    },
    "interleaved_to_half_split": {
        "across all rows": (permute_fn("global"), "across the whole matrix"),
        "inverse": (permute_fn("inverse"), "inverse permutation"),
        "columns": (permute_fn("columns"), "columns were permuted"),
        "identity": (permute_fn("identity"), "Within each head"),
        "2-D weights only": (permute_fn("2-D only"), "1-D bias"),
        "float32 whatever the dtype": (permute_fn("float32"), "must follow its input's dtype"),
    },
    "RoPEMultiHeadAttention": {
        "rotates values": (rope_mha_class("values"), "values are rotated"),
        "RoPE over d_out": (rope_mha_class("before split"), "wrong head width"),
        "layout ignored": (rope_mha_class("layout ignored"), "layout is wrong"),
        "no rope": (rope_mha_class("no rope"), "No RoPE"),
        "positions restart with a cache": (rope_mha_class("restart"), "Positions restart at 0"),
        "other attribute names": (rope_mha_class("other names"), "num_heads and head_dim"),
        "keys kept in the module across calls": (rope_mha_class("own cache"), "same output on every call"),
        "keys detached": (rope_mha_class("detached"), "Gradients must reach"),
        "rotated in place under no_grad": (rope_mha_class("rotated in place under no_grad"), "The gradient of RoPEMultiHeadAttention.W_"),
        "exp without subtracting the max": (rope_mha_class("exp without the max"), "scores in the hundreds"),
    },
}

RIGHT = {
    "sinusoidal_positions": {"exp-log, stack": sinusoidal_fn(), "loops": sinusoidal_fn(style="loops")},
    "rope_inverse_frequencies": {"1 / theta^e": frequencies_fn(), "exp-log": frequencies_fn(style="exp")},
    "apply_rope": {"rotate_half / stack": rope_fn(), "complex for interleaved": rope_fn(style="complex")},
    "interleaved_to_half_split": {"index list": permute_fn()},
    "RoPEMultiHeadAttention": {"permute + tril": rope_mha_class(), "einsum": rope_mha_class(style="einsum"),
                               "SDPA with a bottom-right mask": rope_mha_class(style="sdpa"),
                               "softmax in float32, cast back": rope_mha_class(style="float32 softmax")},
}

from autograder.tests.zoo import nb08_adversary, nb08_space  # noqa: E402  (they import rope_fn and rope_mha_class from here)

for _more in (nb08_adversary, nb08_space):
    for _exercise, _entries in _more.WRONG.items():
        WRONG[_exercise].update(_entries)
    for _exercise, _entries in _more.RIGHT.items():
        RIGHT[_exercise].update(_entries)
