"""Solutions of notebook 06 that grading must reject (WRONG) or accept (RIGHT)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

import utils.multihead as ref
from utils.causal import causal_mask
from utils.dropout import CausalAttention


# MultiHeadAttentionWrapper ----------------------------------------------------------------
def wrapper_class(container="modulelist", cat_dim=-1, shared=False, combine="cat", mistake=None):
    class Wrapper(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            self.out_dropout = nn.Dropout(dropout if mistake == "dropout on the output" else 0.0)
            if mistake == "dropout on the output":
                dropout = 0.0
            if mistake == "ignores qkv_bias":
                qkv_bias = False
            if shared:
                heads = [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)] * num_heads
            else:
                heads = [CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads)]
            self.heads = nn.ModuleList(heads) if container == "modulelist" else heads

        def forward(self, x):
            outs = [head(x) for head in self.heads]
            if combine == "sum":
                return torch.stack(outs).sum(0).repeat(1, 1, len(outs))
            return self.out_dropout(torch.cat(outs, dim=cat_dim))
    return Wrapper


def wrapper_two_heads():
    """Always two heads, whatever num_heads says."""
    class Wrapper(wrapper_class()):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__(d_in, d_out, context_length, dropout, 2, qkv_bias)
    return Wrapper


def wrapper_second_head_frozen():
    """The second head computed under no_grad: right outputs, but its weights never train."""
    class Wrapper(wrapper_class()):
        def forward(self, x):
            outs = []
            for h, head in enumerate(self.heads):
                with torch.set_grad_enabled(h != 1 and torch.is_grad_enabled()):
                    outs.append(head(x))
            return torch.cat(outs, dim=-1)
    return Wrapper


def wrapper_squeezed():
    """.squeeze() on the output: harmless until a sequence of one token loses its token axis."""
    class Wrapper(wrapper_class()):
        def forward(self, x):
            return torch.cat([head(x) for head in self.heads], dim=-1).squeeze()
    return Wrapper


def wrapper_float32_buffer():
    """Heads written into slices of a preallocated output on the input's device, but float32 whatever its dtype."""
    class Wrapper(wrapper_class()):
        def forward(self, x):
            outs = [head(x) for head in self.heads]
            width = outs[0].shape[-1]
            out = torch.zeros(*x.shape[:-1], width * len(outs), device=x.device)
            for h, o in enumerate(outs):
                out[..., h * width:(h + 1) * width] = o
            return out
    return Wrapper


class OwnHead(nn.Module):
    """A head written out (W_query, W_key, W_value, a mask buffer); `stable` subtracts each row's maximum;
    `sdpa`: the attention by F.scaled_dot_product_attention, its dropout_p in training only."""

    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False, stable=True, sdpa=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.stable, self.sdpa = stable, sdpa
        self.register_buffer("mask", causal_mask(context_length))

    def forward(self, x):
        T = x.shape[1]
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        if self.sdpa:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout.p if self.training else 0.0)
        scores = (q @ k.mT / math.sqrt(k.shape[-1])).masked_fill(self.mask[:T, :T], float("-inf"))
        if self.stable:
            weights = torch.softmax(scores.float(), dim=-1).to(x.dtype)  # the float32 idiom, cast back
        else:
            e = scores.exp()
            weights = e / e.sum(dim=-1, keepdim=True)
        return self.dropout(weights) @ v


def wrapper_own_heads(stable=True, sdpa=False, context=None):
    """Heads written out, kept in a list with another name, joined by stack and flatten; `context`:
    a fixed context length, whatever the argument says."""
    class Wrapper(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            self.attention_heads = nn.ModuleList([OwnHead(d_in, d_out, context or context_length, dropout, qkv_bias, stable, sdpa)
                                                  for _ in range(num_heads)])

        def forward(self, x):
            return torch.stack([head(x) for head in self.attention_heads], dim=-2).flatten(-2)
    return Wrapper


# split_heads / merge_heads -----------------------------------------------------------------
def divisible(x, num_heads):
    """The contract's ValueError, naming both numbers."""
    if x.shape[-1] % num_heads:
        raise ValueError(f"{x.shape[-1]} features do not split into {num_heads} heads")


def split_token_axis(x, num_heads):
    B, T, D = x.shape
    return x.reshape(B, num_heads, T, D // num_heads)


def split_no_transpose(x, num_heads):
    B, T, D = x.shape
    return x.view(B, T, num_heads, D // num_heads)


def split_unflatten(x, num_heads):
    divisible(x, num_heads)
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)


def split_einops_style(x, num_heads):
    divisible(x, num_heads)
    B, T, D = x.shape
    return x.reshape(B, T, num_heads, D // num_heads).permute(0, 2, 1, 3)


def split_unchecked(x, num_heads):  # the view itself refuses an indivisible width, with a RuntimeError
    B, T, D = x.shape
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)


def split_silent_error(x, num_heads):  # a ValueError that does not say which sizes disagree
    if x.shape[-1] % num_heads:
        raise ValueError("bad number of heads")
    return split_unchecked(x, num_heads)


def merge_in_float32(x):
    B, H, T, hd = x.shape
    return x.float().transpose(1, 2).reshape(B, T, H * hd)


def merge_view_noncontiguous(x):
    B, H, T, hd = x.shape
    return x.transpose(1, 2).view(B, T, H * hd)


def merge_no_transpose(x):
    B, H, T, hd = x.shape
    return x.reshape(B, T, H * hd)


def merge_contiguous_view(x):
    B, H, T, hd = x.shape
    return x.transpose(1, 2).contiguous().view(B, T, H * hd)


def merge_flatten(x):
    return x.permute(0, 2, 1, 3).flatten(-2)


def split_in_float32(x, num_heads):
    divisible(x, num_heads)
    B, T, D = x.shape
    return x.float().view(B, T, num_heads, D // num_heads).transpose(1, 2)


def merge_detached(x):
    B, H, T, hd = x.shape
    return x.detach().transpose(1, 2).reshape(B, T, H * hd)


# MultiHeadAttention -------------------------------------------------------------------------
def mha_class(mistake=None):
    class MHA(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
            super().__init__()
            if d_out % num_heads and mistake != "no divisibility check":
                raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
            self.num_heads, self.head_dim, self.d_out = num_heads, d_out // num_heads, d_out
            qkv_bias = qkv_bias and mistake != "ignores qkv_bias"
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.out_proj = nn.Linear(d_out, d_out)
            self.dropout = nn.Dropout(dropout)
            if mistake == "mask not a buffer":
                self.mask = causal_mask(context_length)
            else:
                self.register_buffer("mask", causal_mask(context_length))

        def forward(self, x):
            B, T, _ = x.shape
            H, hd = self.num_heads, self.head_dim
            if mistake == "keys under no_grad":
                with torch.no_grad():
                    k_fixed = self.W_key(x).view(B, T, H, hd).transpose(1, 2)
            if mistake == "split along tokens":
                q, k, v = (layer(x).reshape(B, H, T, hd) for layer in (self.W_query, self.W_key, self.W_value))
            else:
                q, k, v = (layer(x).view(B, T, H, hd).transpose(1, 2) for layer in (self.W_query, self.W_key, self.W_value))
            scale = math.sqrt(self.d_out if mistake == "scale by sqrt(d_out)" else hd)
            if mistake == "keys under no_grad":
                k = k_fixed
            scores = q @ k.transpose(-2, -1) / scale
            mask = self.mask if mistake == "mask not sliced" else self.mask[:T, :T]
            if mistake == "exp without the max":  # right only while the scores stay small
                e = scores.masked_fill(mask, float("-inf")).exp()
                weights = e / e.sum(-1, keepdim=True)
            elif mistake == "float32 softmax cast back":  # Llama's idiom: right
                weights = torch.softmax(scores.masked_fill(mask, float("-inf")).float(), dim=-1).to(scores.dtype)
            else:
                weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
            if mistake == "dropout in eval":
                weights = F.dropout(weights, 0.5, training=True)
            elif mistake not in ("dropout on the context", "dropout on the output"):
                weights = self.dropout(weights)
            context = weights @ v
            if mistake == "dropout on the context":
                context = self.dropout(context)
            if mistake == "merge without transpose":
                context = context.reshape(B, T, H * hd)
            else:
                context = context.transpose(1, 2).reshape(B, T, H * hd)
            if mistake == "no out_proj":
                return context
            if mistake == "dropout on the output":
                return self.dropout(self.out_proj(context))
            return self.out_proj(context)
    return MHA


def mha_sdpa(dropout="training"):
    """The attention by F.scaled_dot_product_attention (allowed): its dropout_p in training only (RIGHT),
    never ("none") or always ("always")."""
    class MHA(mha_class()):
        def forward(self, x):
            B, T, _ = x.shape
            q, k, v = (layer(x).view(B, T, self.num_heads, self.head_dim).transpose(1, 2)
                       for layer in (self.W_query, self.W_key, self.W_value))
            p = {"training": self.dropout.p if self.training else 0.0, "none": 0.0, "always": self.dropout.p}[dropout]
            if dropout == "training":  # the mask buffer, as SDPA reads it: True = may attend
                context = F.scaled_dot_product_attention(q, k, v, attn_mask=~self.mask[:T, :T], dropout_p=p)
            else:
                context = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
            return self.out_proj(context.transpose(1, 2).reshape(B, T, -1))
    return MHA


def mha_variant(kind):
    """MultiHeadAttention with one mistake of dtype, size or library, by `kind`."""
    class MHA(mha_class()):
        def forward(self, x):
            B, T, _ = x.shape
            H, hd = self.num_heads, self.head_dim
            if kind == "F.multi_head_attention_forward":
                q, k, v = (layer(x).transpose(0, 1) for layer in (self.W_query, self.W_key, self.W_value))  # projected: (T, B, d_out)
                w = torch.eye(H * hd, dtype=x.dtype, device=x.device).repeat(3, 1)  # so its own in-projection keeps them
                out, _ = F.multi_head_attention_forward(q, k, v, H * hd, H, w, None,
                                                        None, None, False, self.dropout.p, self.out_proj.weight, self.out_proj.bias,
                                                        training=self.training, need_weights=False, attn_mask=self.mask[:T, :T],
                                                        is_causal=True)
                return out.transpose(0, 1)
            q, k, v = (layer(x).view(B, T, H, hd).transpose(1, 2) for layer in (self.W_query, self.W_key, self.W_value))
            scores = q @ k.mT / math.sqrt(3 if kind == "scale sqrt(3)" else hd)
            if kind == "additive float32 mask":
                scores = scores + torch.zeros(T, T, device=x.device).masked_fill(self.mask[:T, :T], float("-inf"))
            else:
                scores = scores.masked_fill(self.mask[:T, :T], float("-inf"))
            if kind == "float32 softmax":
                weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
            else:
                weights = torch.softmax(scores, dim=-1)
            return self.out_proj((self.dropout(weights) @ v).transpose(1, 2).reshape(B, T, H * hd))
    return MHA


def mha_einsum():
    class MHA(mha_class()):
        def forward(self, x):
            B, T, _ = x.shape
            H, hd = self.num_heads, self.head_dim
            q, k, v = (layer(x).view(B, T, H, hd) for layer in (self.W_query, self.W_key, self.W_value))
            scores = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
            weights = self.dropout(torch.softmax(scores.masked_fill(self.mask[:T, :T], float("-inf")), -1))
            return self.out_proj(torch.einsum("bhts,bshd->bthd", weights, v).reshape(B, T, H * hd))
    return MHA


# parameter counts ---------------------------------------------------------------------------
def count_no_out_bias(d_in, d_out, num_heads, qkv_bias=False):
    return 3 * (d_in * d_out + (d_out if qkv_bias else 0)) + d_out * d_out


def count_ignores_qkv_bias(d_in, d_out, num_heads, qkv_bias=False):
    return 3 * d_in * d_out + d_out * d_out + d_out


def count_times_heads(d_in, d_out, num_heads, qkv_bias=False):
    return num_heads * count_formula(d_in, d_out, num_heads, qkv_bias)


def count_by_modules(d_in, d_out, num_heads, qkv_bias=False):
    return sum(p.numel() for p in ref.MultiHeadAttention(d_in, d_out, 1, 0.0, num_heads, qkv_bias).parameters())


def count_formula(d_in, d_out, num_heads, qkv_bias=False):
    return 3 * d_in * d_out + (3 * d_out if qkv_bias else 0) + d_out * (d_out + 1)


def gpt3_three_matrices(d_model, n_heads, head_dim, n_layers):
    return 3 * d_model * head_dim * n_heads * n_layers


def gpt3_one_layer(d_model, n_heads, head_dim, n_layers):
    return 4 * d_model * head_dim * n_heads


def gpt3_with_biases(d_model, n_heads, head_dim, n_layers):
    return (4 * d_model * head_dim + 3 * head_dim + d_model) * n_heads * n_layers


def gpt3_per_matrix(d_model, n_heads, head_dim, n_layers):
    per_head = 2 * d_model * head_dim + d_model * head_dim + head_dim * d_model
    return per_head * n_heads * n_layers


WRONG = {
    "MultiHeadAttentionWrapper": {
        "plain list": (wrapper_class(container="list"), "nn.ModuleList"),
        "one head repeated": (wrapper_class(shared=True), "its own module"),
        "concatenated along tokens": (wrapper_class(cat_dim=1), "feature axis"),
        "heads summed": (wrapper_class(combine="sum"), "columns h*d_out"),
        "dropout on the concatenated output": (wrapper_class(mistake="dropout on the output"), "drop the attention weights"),
        "ignores qkv_bias": (wrapper_class(mistake="ignores qkv_bias"), "qkv_bias=True"),
        "always two heads": (wrapper_two_heads(), "in the order the module registers them"),
        "second head under no_grad": (wrapper_second_head_frozen(), "No gradient reaches MultiHeadAttentionWrapper.heads.1.W_query"),
        ".squeeze() on the output": (wrapper_squeezed(), "wrong shape (on one token)"),
        "own heads, exp without the max": (wrapper_own_heads(stable=False), "scores in the hundreds"),
        "a float32 output buffer": (wrapper_float32_buffer(), "must follow its input's dtype"),
        "own heads with a context of 6, whatever it is given": (wrapper_own_heads(context=6), "crashed"),
    },
    "split_heads": {
        "token axis": (split_token_axis, "wrong axis"),
        "no transpose": (split_no_transpose, "(B, H, T, D // H)"),
        "float32 whatever the dtype": (split_in_float32, "must follow its input's dtype"),
        "no check: view's RuntimeError": (split_unchecked, "instead of ValueError"),
        "a ValueError without the numbers": (split_silent_error, "must name both numbers"),
    },
    "merge_heads": {
        "view after transpose": (merge_view_noncontiguous, "contiguous"),
        "no transpose back": (merge_no_transpose, "wrong axis"),
        "detached": (merge_detached, "does not depend on anything that trains"),
        "float32 whatever the dtype": (merge_in_float32, "must follow its input's dtype"),
    },
    "MultiHeadAttention": {
        "scale by sqrt(d_out)": (mha_class("scale by sqrt(d_out)"), "sqrt(head_dim)"),
        "no out_proj": (mha_class("no out_proj"), "output projection is missing"),
        "heads split along tokens": (mha_class("split along tokens"), "token axis"),
        "merged without transpose": (mha_class("merge without transpose"), "without transposing back"),
        "mask not a buffer": (mha_class("mask not a buffer"), "registered buffer"),
        "mask not sliced": (mha_class("mask not sliced"), "self.mask[:T, :T]"),
        "dropout active in eval": (mha_class("dropout in eval"), "deterministic"),
        "dropout on the context": (mha_class("dropout on the context"), "drop the attention weights"),
        "dropout on the output": (mha_class("dropout on the output"), "drop the attention weights"),
        "ignores qkv_bias": (mha_class("ignores qkv_bias"), "qkv_bias=True"),
        "no divisibility check": (mha_class("no divisibility check"), "must raise ValueError"),
        "F.scaled_dot_product_attention without dropout_p": (mha_sdpa("none"), "drops nothing"),
        "F.scaled_dot_product_attention with dropout_p in eval too": (mha_sdpa("always"), "deterministic"),
        "F.multi_head_attention_forward": (mha_variant("F.multi_head_attention_forward"), "they do this exercise's whole job"),
        "softmax in float32, not cast back": (mha_variant("float32 softmax"), "combines tensors of two dtypes"),
        "an additive mask made in float32": (mha_variant("additive float32 mask"), "combines tensors of two dtypes"),
        "scale by sqrt(3), the pinned head_dim": (mha_variant("scale sqrt(3)"), "differs from the course's"),
        "keys under no_grad": (mha_class("keys under no_grad"), "MultiHeadAttention.W_key.weight"),
        "exp without subtracting the max": (mha_class("exp without the max"), "scores in the hundreds"),
    },
    "mha_parameter_count": {
        "forgets out_proj bias": (count_no_out_bias, "out_proj's bias"),
        "ignores qkv_bias": (count_ignores_qkv_bias, "qkv_bias=True"),
        "multiplies by heads": (count_times_heads, "number of heads"),
    },
    "attention_parameter_count": {
        "three matrices": (gpt3_three_matrices, "value-down"),
        "one layer": (gpt3_one_layer, "every layer"),
        "adds biases": (gpt3_with_biases, "57,982,058,496"),
    },
}

RIGHT = {
    "MultiHeadAttentionWrapper": {"the notebook's solution": wrapper_class(),
                                  "own heads, another name, stack and flatten, float32 softmax": wrapper_own_heads(),
                                  "own heads by F.scaled_dot_product_attention, dropout_p in training": wrapper_own_heads(sdpa=True)},
    "split_heads": {"unflatten": split_unflatten, "reshape + permute": split_einops_style},
    "merge_heads": {"contiguous().view": merge_contiguous_view, "permute + flatten": merge_flatten},
    "MultiHeadAttention": {"the notebook's solution": mha_class(), "einsum": mha_einsum(),
                           "softmax in float32, cast back": mha_class("float32 softmax cast back"),
                           "F.scaled_dot_product_attention, dropout_p in training": mha_sdpa()},
    "mha_parameter_count": {"count the modules": count_by_modules, "formula": count_formula},
    "attention_parameter_count": {"matrix by matrix": gpt3_per_matrix},
}

from autograder.tests.zoo import nb06_adversary2  # noqa: E402

for _exercise, _entries in nb06_adversary2.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb06_adversary2.RIGHT.items():
    RIGHT[_exercise].update(_entries)
