"""Issue 29, last round: notebook 06 solutions an adversarial learner might write (WRONG) or that are right another way (RIGHT)."""
import math

import torch
from torch import nn

from utils.dropout import CausalAttention


# MultiHeadAttentionWrapper ---------------------------------------------------------------
class WrapperNoDropout(nn.Module):
    """Every head built with dropout=0.0, whatever dropout is."""
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(CausalAttention(d_in, d_out, context_length, 0.0, qkv_bias) for _ in range(num_heads))

    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)


class WrapperArgsSwapped(nn.Module):
    """dropout and qkv_bias passed in each other's place."""
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(CausalAttention(d_in, d_out, context_length, float(qkv_bias), bool(dropout)) for _ in range(num_heads))

    def forward(self, x):
        return torch.cat([h(x) for h in self.heads], dim=-1)


class WrapperReversed(nn.Module):
    """The heads concatenated last to first."""
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList(CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads))

    def forward(self, x):
        return torch.cat([h(x) for h in reversed(self.heads)], dim=-1)


class WrapperStackFlatten(nn.Module):
    """RIGHT: torch.stack on a new last axis, then flatten (head-major)."""
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        self.heads = nn.ModuleList([CausalAttention(d_in, d_out, context_length, dropout, qkv_bias=qkv_bias)
                                    for _ in range(num_heads)])

    def forward(self, x):
        return torch.stack([h(x) for h in self.heads], dim=-2).flatten(-2)


# split_heads / merge_heads ----------------------------------------------------------------
def split_interleaved(x, num_heads):
    """Feature i goes to head i % H: the heads interleaved."""
    B, T, D = x.shape
    return x.view(B, T, D // num_heads, num_heads).permute(0, 3, 1, 2)


def split_truncates(x, num_heads):
    """D not divisible by H: the last features silently dropped."""
    B, T, D = x.shape
    hd = D // num_heads
    return x[..., :num_heads * hd].reshape(B, T, num_heads, hd).transpose(1, 2)


def split_chunk_stack(x, num_heads):
    """RIGHT: chunk the features, stack the heads on axis 1."""
    if x.shape[-1] % num_heads:
        raise ValueError(f"width {x.shape[-1]} is not a multiple of {num_heads}")
    return torch.stack(x.chunk(num_heads, dim=-1), dim=1)


def merge_head_dim_major(x):
    """permute(0, 2, 3, 1): features ordered dimension-major, the heads interleaved."""
    B, H, T, hd = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, T, H * hd)


def merge_first_item_shape(x):
    """Sizes read from the first item only: x[0]."""
    H, T, hd = x[0].shape
    return x.transpose(1, 2).reshape(-1, T, H * hd)[: x.shape[0]]


def merge_cat_unbind(x):
    """RIGHT: the heads unbound and concatenated along the features."""
    return torch.cat(x.unbind(dim=1), dim=-1)


# MultiHeadAttention ----------------------------------------------------------------------
class _MHA(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False, out_bias=True):
        super().__init__()
        if d_out % num_heads:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out, bias=out_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))

    def _split(self, t):
        B, T, _ = t.shape
        return t.view(B, T, self.num_heads, self.head_dim).transpose(1, 2)

    def _forward(self, x, T=None, mask=None, dropout_scores=False):
        B, t, _ = x.shape
        T = t if T is None else T
        q, k, v = self._split(self.W_query(x)), self._split(self.W_key(x)), self._split(self.W_value(x))
        s = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        if dropout_scores:
            s = self.dropout(s)
        s = s.masked_fill(self.mask[:T, :T] if mask is None else mask, float("-inf"))
        w = torch.softmax(s, -1)
        if not dropout_scores:
            w = self.dropout(w)
        return self.out_proj((w @ v).transpose(1, 2).reshape(B, t, -1))

    def forward(self, x):
        return self._forward(x)


class MHAOutProjNoBias(_MHA):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias, out_bias=False)


class MHAOutProjBiasIsQkvBias(_MHA):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__(d_in, d_out, context_length, dropout, num_heads, qkv_bias, out_bias=qkv_bias)


class MHADropoutOnScores(_MHA):
    """Dropout on the scores before the mask and softmax."""
    def forward(self, x):
        return self._forward(x, dropout_scores=True)


class MHAFirstValuesKept(_MHA):
    """The values of the first call kept while the input shape stays the same."""
    def forward(self, x):
        B, T, _ = x.shape
        if getattr(self, "_v", None) is None or self._v.shape[0] != B or self._v.shape[2] != T:
            self._v = self._split(self.W_value(x))
        q, k = self._split(self.W_query(x)), self._split(self.W_key(x))
        s = (q @ k.transpose(-2, -1) / self.head_dim ** 0.5).masked_fill(self.mask[:T, :T], float("-inf"))
        return self.out_proj((self.dropout(torch.softmax(s, -1)) @ self._v).transpose(1, 2).reshape(B, T, -1))


class MHALoopOverHeads(nn.Module):
    """RIGHT: a loop over heads on slices of the projections, torch.where for the mask."""
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        if d_out % num_heads != 0:
            raise ValueError(f"{d_out} % {num_heads} != 0")
        self.num_heads = num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1).bool())

    def forward(self, x):
        T = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        hd = q.shape[-1] // self.num_heads
        outs = []
        for h in range(self.num_heads):
            sl = slice(h * hd, (h + 1) * hd)
            s = q[..., sl] @ k[..., sl].mT / math.sqrt(hd)
            s = torch.where(self.mask[:T, :T], torch.full_like(s, float("-inf")), s)
            outs.append(self.dropout(torch.softmax(s, dim=-1)) @ v[..., sl])
        return self.out_proj(torch.cat(outs, dim=-1))


# parameter counts ------------------------------------------------------------------------
def count_float(d_in, d_out, num_heads, qkv_bias=False):
    """Head by head with a true division: a float."""
    per_head = d_out / num_heads
    return 3 * num_heads * per_head * (d_in + (1 if qkv_bias else 0)) + d_out * d_out + d_out


def count_out_bias_tied(d_in, d_out, num_heads, qkv_bias=False):
    return 3 * (d_in * d_out + (d_out if qkv_bias else 0)) + d_out * d_out + (d_out if qkv_bias else 0)


def count_by_heads(d_in, d_out, num_heads, qkv_bias=False):
    """RIGHT: head by head, integer division."""
    hd = d_out // num_heads
    qkv = num_heads * 3 * (d_in * hd + (hd if qkv_bias else 0))
    return qkv + d_out * (d_out + 1)


def attention_count_d_model_squared(d_model, n_heads, head_dim, n_layers):
    """4 d_model² per layer: assumes n_heads * head_dim == d_model."""
    return 4 * d_model * d_model * n_layers


def attention_count_float(d_model, n_heads, head_dim, n_layers):
    return 4.0 * d_model * n_heads * head_dim * n_layers


def attention_count_sum(d_model, n_heads, head_dim, n_layers):
    """RIGHT: summed layer by layer, matrix by matrix (W_q, W_k, W_v in, W_o out)."""
    inner = n_heads * head_dim
    return sum(3 * d_model * inner + inner * d_model for _ in range(n_layers))


WRONG = {
    "MultiHeadAttentionWrapper": {"every head built with dropout=0.0": (WrapperNoDropout, "drops nothing"), "dropout and qkv_bias swapped": (WrapperArgsSwapped, "must not have a bias"),
                                  "heads concatenated last to first": (WrapperReversed, "head h's causal attention output fills columns")},
    "split_heads": {"heads interleaved (feature i to head i % H)": (split_interleaved, "Head h must hold features"), "indivisible D silently truncated": (split_truncates, "must raise ValueError when the width")},
    "merge_heads": {"dimension-major (heads interleaved)": (merge_head_dim_major, "must undo split_heads")},
    "MultiHeadAttention": {"out_proj without bias": (MHAOutProjNoBias, "out_proj must be nn.Linear(d_out, d_out) with a bias"), "out_proj bias follows qkv_bias": (MHAOutProjBiasIsQkvBias, "out_proj must be nn.Linear(d_out, d_out) with a bias"),
                           "dropout on the scores": (MHADropoutOnScores, "dropout to the scores"), "first call's values kept": (MHAFirstValuesKept, "compute every call from its own inputs")},
    "mha_parameter_count": {"a float (true division)": (count_float, "must return an int"), "out_proj bias follows qkv_bias": (count_out_bias_tied, "forgot out_proj's bias")},
    "attention_parameter_count": {"4 d_model² per layer": (attention_count_d_model_squared, "is wrong: 4 * d_model * head_dim"), "a float": (attention_count_float, "must return an int")},
}

RIGHT = {
    "MultiHeadAttentionWrapper": {"stack on a new axis, flatten": WrapperStackFlatten},
    "split_heads": {"chunk and stack": split_chunk_stack},
    "merge_heads": {"unbind and cat": merge_cat_unbind, "sizes from the first item": merge_first_item_shape},
    "MultiHeadAttention": {"a loop over heads, torch.where": MHALoopOverHeads},
    "mha_parameter_count": {"head by head, integer division": count_by_heads},
    "attention_parameter_count": {"summed layer by layer": attention_count_sum},
}
