"""Solutions of notebook 05 that grading must reject (WRONG) or accept (RIGHT)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

import utils.dropout as ref
from utils.causal import CausalSelfAttention

NEG_INF = float("-inf")


# attention_dropout -----------------------------------------------------------------------
def dropout_factory(mistake=None):
    def attention_dropout(weights, p, training=True, generator=None):
        if mistake != "no check" and not 0 <= p < 1:
            raise ValueError(f"p must be in [0, 1), got {p}")
        if (not training and mistake != "active in eval") or p == 0:
            return weights
        gen = None if mistake == "ignores generator" else generator
        shape = (weights.shape[-1],) if mistake == "one mask per row" else weights.shape
        u = torch.rand(shape, generator=gen, device=weights.device)
        keep = u < p if mistake == "keep with p" else u >= p
        if mistake == "no scaling":
            return weights * keep
        if mistake == "times (1-p)":
            return weights * keep * (1 - p)
        if mistake == "in place":
            return weights.mul_(keep).div_(1 - p)
        return weights * keep / (1 - p)
    return attention_dropout


def dropout_F(weights, p, training=True, generator=None):
    return F.dropout(weights, p, training=training)


def dropout_module(weights, p, training=True, generator=None):
    if not 0 <= p < 1:
        raise ValueError("bad p")
    layer = nn.Dropout(p)
    layer.train(training)
    return layer(weights)


def dropout_torch(weights, p, training=True, generator=None):
    if not 0 <= p < 1:
        raise ValueError("bad p")
    return torch.dropout(weights, p, training)


def dropout_bernoulli(weights, p, training=True, generator=None):
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability {p} is not in [0, 1)")
    if not training or p == 0:
        return weights
    keep = torch.bernoulli(torch.full_like(weights, 1 - p), generator=generator)
    return weights * keep / (1 - p)


def dropout_where(weights, p, training=True, generator=None):
    if p < 0 or p >= 1:
        raise ValueError("p must satisfy 0 <= p < 1")
    if training and p > 0:
        drop = torch.rand(weights.shape, generator=generator, dtype=weights.dtype, device=weights.device) < p
        return torch.where(drop, torch.zeros_like(weights), weights / (1 - p))
    return weights


def dropout_uniform_(weights, p, training=True, generator=None):
    if not (0.0 <= p < 1.0):
        raise ValueError(p)
    if not training or p == 0.0:
        return weights.clone()
    u = torch.empty_like(weights).uniform_(generator=generator)
    return weights * (u > p).to(weights.dtype) / (1.0 - p)


def dropout_float32_mask(weights, p, training=True, generator=None):  # a float32 keep mask promotes bfloat16 weights
    if not 0 <= p < 1:
        raise ValueError(f"p must be in [0, 1), got {p}")
    if not training or p == 0:
        return weights
    keep = (torch.rand(weights.shape, generator=generator, device=weights.device) >= p).float()
    return weights * keep / (1 - p)


# CausalAttention -------------------------------------------------------------------------
def attention_class(mistake=None, store="buffer", slice_mask=True, persistent=True):
    class CausalAttention(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
            super().__init__()
            self.p = dropout
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            rate = {"keep with p": 1 - dropout, "hard-coded rate": 0.1}.get(mistake, dropout)
            if mistake != "no nn.Dropout":
                self.dropout = nn.Dropout(rate)
            mask = torch.ones(context_length, context_length, dtype=torch.bool).triu(1)
            if store == "buffer":
                self.register_buffer("mask", mask, persistent=persistent)
            else:
                self.mask = mask

        def forward(self, x):
            T = x.shape[1]
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = q @ k.transpose(1, 2) / math.sqrt(k.shape[-1])
            mask = self.mask[:T, :T] if slice_mask else self.mask
            if mistake == "on scores":
                scores = self.dropout(scores)
            if mistake != "no mask":
                scores = scores.masked_fill(mask, NEG_INF)
            if mistake == "on masked scores":
                scores = self.dropout(scores)
            weights = torch.softmax(scores, dim=-1)
            if mistake == "F.dropout always":
                weights = F.dropout(weights, self.p, training=True)
            elif mistake == "no nn.Dropout":
                weights = ref.attention_dropout(weights, self.p, self.training)
            elif mistake not in ("on scores", "on masked scores", "on context", "no dropout"):
                weights = self.dropout(weights)
            out = weights @ v
            if mistake == "on context":
                out = self.dropout(out)
            return out
    return CausalAttention


def attention_book():
    """The book's listing 3.3: float triu buffer, in-place masked_fill_ on the local scores."""
    class CausalAttention(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
            super().__init__()
            self.d_out = d_out
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.dropout = nn.Dropout(dropout)
            self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

        def forward(self, x):
            b, num_tokens, d_in = x.shape
            keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
            attn_scores = queries @ keys.transpose(1, 2)
            attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
            attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
            attn_weights = self.dropout(attn_weights)
            return attn_weights @ values
    return CausalAttention


def attention_where_named():
    """A differently named dropout layer and torch.where for the mask."""
    class CausalAttention(nn.Module):
        def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
            super().__init__()
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.attn_drop = nn.Dropout(p=dropout)
            self.register_buffer("mask", ~torch.tril(torch.ones(context_length, context_length, dtype=torch.bool)))

        def forward(self, x):
            T = x.size(-2)
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = torch.where(self.mask[:T, :T], NEG_INF, q @ k.mT * k.size(-1) ** -0.5)
            return self.attn_drop(F.softmax(scores, dim=-1)) @ v
    return CausalAttention


def attention_extends_04():
    """Exercise 2's text: notebook 04's CausalSelfAttention plus dropout, by subclassing it."""
    class CausalAttention(CausalSelfAttention):
        def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
            super().__init__(d_in, d_out, context_length, qkv_bias)
            self.dropout = nn.Dropout(dropout)

        def forward(self, x):
            T = x.shape[1]
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = (q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])).masked_fill(self.mask[:T, :T], NEG_INF)
            return self.dropout(torch.softmax(scores, dim=-1)) @ v
    return CausalAttention


def attention_values_detached():
    """Right outputs; the values come from a detached projection, so W_value never trains."""
    class CausalAttention(attention_class()):
        def forward(self, x):
            T = x.shape[1]
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x).detach()
            scores = (q @ k.mT / math.sqrt(k.shape[-1])).masked_fill(self.mask[:T, :T], NEG_INF)
            return self.dropout(torch.softmax(scores, dim=-1)) @ v
    return CausalAttention


def attention_float32_softmax():
    """Softmax in float32, cast back to the input's dtype (Llama, Hugging Face)."""
    class CausalAttention(attention_class()):
        def forward(self, x):
            T = x.shape[1]
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = (q @ k.mT / math.sqrt(k.shape[-1])).masked_fill(self.mask[:T, :T], NEG_INF)
            return self.dropout(torch.softmax(scores.float(), dim=-1).to(x.dtype)) @ v
    return CausalAttention


def dropout_fixed_seed(weights, p, training=True, generator=None):  # the same mask on every call without a generator
    if not 0 <= p < 1:
        raise ValueError(p)
    if not training or p == 0:
        return weights
    g = generator or torch.Generator(device=weights.device).manual_seed(0)
    return weights * (torch.rand(weights.shape, generator=g, device=weights.device) >= p) / (1 - p)


def dropout_exact_count(weights, p, training=True, generator=None):  # exactly round(p * n) dropped per row: not independent
    if not 0 <= p < 1:
        raise ValueError(p)
    if not training or p == 0:
        return weights
    drop = torch.rand(weights.shape, generator=generator, device=weights.device).argsort(-1)[..., :round(p * weights.shape[-1])]
    keep = torch.ones_like(weights, dtype=torch.bool).scatter(-1, drop, False)
    return weights * keep / (1 - p)


def dropout_checks_p_in_training(weights, p, training=True, generator=None):  # a bad p passes silently in eval
    if not training or p == 0:
        return weights
    if not 0 <= p < 1:
        raise ValueError(f"p must be in [0, 1), got {p}")
    return weights * (torch.rand(weights.shape, generator=generator, device=weights.device) >= p) / (1 - p)


def dropout_no_device(weights, p, training=True, generator=None):  # the call the text once dictated: the mask on the CPU
    if not 0 <= p < 1:
        raise ValueError(p)
    if not training or p == 0:
        return weights
    return weights * (torch.rand(weights.shape, generator=generator) >= p) / (1 - p)


def dropout_flat_view(weights, p, training=True, generator=None):  # .view(-1) needs a contiguous input
    if not 0 <= p < 1:
        raise ValueError(p)
    if not training or p == 0:
        return weights
    flat = weights.view(-1)
    return (flat * (torch.rand(flat.shape, generator=generator, device=flat.device) >= p) / (1 - p)).view(weights.shape)


def dropout_renormalized(weights, p, training=True, generator=None):  # rows made to sum to 1 again: not inverted dropout
    if not 0 <= p < 1:
        raise ValueError(p)
    if not training or p == 0:
        return weights
    kept = weights * (torch.rand(weights.shape, generator=generator, device=weights.device) >= p)
    return kept / kept.sum(-1, keepdim=True).clamp_min(1e-30)


def dropout_scale_first(weights, p, training=True, generator=None):  # RIGHT: the mask scaled in the weights' dtype, then applied
    if not 0 <= p < 1:
        raise ValueError(p)
    if not training or p == 0:
        return weights.clone()
    keep = torch.rand(weights.shape, generator=generator, device=weights.device) >= p
    return weights * (keep.to(weights.dtype) / (1 - p))


def dropout_in_float32(weights, p, training=True, generator=None):  # RIGHT: computed in float32, cast back
    if not 0 <= p < 1:
        raise ValueError(p)
    if not training or p == 0:
        return weights
    keep = torch.rand(weights.shape, generator=generator, device=weights.device) >= p
    return (weights.float() * keep / (1 - p)).to(weights.dtype)


def attention_variant(kind):
    """CausalAttention written another way (RIGHT) or with one mistake (WRONG), by `kind`."""
    class CausalAttention(attention_class()):
        def forward(self, x):
            T = x.shape[1]
            if kind == "flat view":  # projections of x.view(-1, d_in): needs a contiguous x
                flat = x.view(-1, x.shape[-1])
                q, k, v = (layer(flat).view(*x.shape[:2], -1) for layer in (self.W_query, self.W_key, self.W_value))
            else:
                q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            if kind == "sdpa with dropout_p":
                return F.scaled_dot_product_attention(q, k, v, attn_mask=~self.mask[:T, :T], dropout_p=self.p if self.training else 0.0)
            if kind == "einsum":
                scores = torch.einsum("btd,bsd->bts", q, k) / math.sqrt(k.shape[-1])
            else:
                scores = q @ k.mT / math.sqrt(3 if kind == "scale sqrt(3)" else k.shape[-1])
            if kind == "additive float32 mask":
                scores = scores + torch.zeros(T, T, device=x.device).masked_fill(self.mask[:T, :T], NEG_INF)
            elif kind == "finfo.min":
                scores = scores.masked_fill(self.mask[:T, :T], torch.finfo(scores.dtype).min)
            else:
                scores = scores.masked_fill(self.mask[:T, :T], NEG_INF)
            if kind == "exp without the max":
                e = scores.exp()
                weights = e / e.sum(-1, keepdim=True)
            elif kind == "float32 softmax":
                weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
            else:
                weights = torch.softmax(scores, dim=-1)
            if kind == "F.dropout, training=self.training":
                return F.dropout(weights, self.dropout.p, training=self.training) @ v
            return self.dropout(weights) @ v
    return CausalAttention


def attention_six_positions():
    """The mask built for 6 positions, whatever context_length says."""
    class CausalAttention(attention_class()):
        def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
            super().__init__(d_in, d_out, 6, dropout, qkv_bias)
    return CausalAttention


WRONG = {
    "attention_dropout": {
        # each weight dropped independently, from the global generator when none is given / 每个权重独立丢弃；未给生成器时用全局生成器
        "a fixed seed when no generator is given": (dropout_fixed_seed, "Without a generator, each call must draw a new mask"),
        "exactly p * n dropped per row": (dropout_exact_count, "varies from row to row"),
        "no 1/(1-p) scaling": (dropout_factory("no scaling"), "not scaled by 1/(1-p)"),
        "multiplied by (1-p)": (dropout_factory("times (1-p)"), "multiplied by (1 - p)"),
        "active in eval": (dropout_factory("active in eval"), "training=False"),
        "keeps with probability p": (dropout_factory("keep with p"), "probability p instead of 1 - p"),
        "ignores the generator": (dropout_factory("ignores generator"), "generator argument"),
        "one mask shared by all rows": (dropout_factory("one mask per row"), "independently"),
        "no ValueError for bad p": (dropout_factory("no check"), "ValueError"),
        "in place on the weights": (dropout_factory("in place"), "in place"),
        "F.dropout": (dropout_F, "by hand"),
        "nn.Dropout": (dropout_module, "by hand"),
        "torch.dropout": (dropout_torch, "by hand"),
        "the utils function": (ref.attention_dropout, "by hand"),
        "float32 keep mask": (dropout_float32_mask, "must follow its input's dtype (torch.bfloat16)"),
        "p checked only in training": (dropout_checks_p_in_training, "whatever `training` is"),
        "torch.rand without device=": (dropout_no_device, "device"),
        "flattened with view": (dropout_flat_view, "crashed"),
        "rows renormalized after the drop": (dropout_renormalized, "divided by (1 - p)"),
    },
    "CausalAttention": {
        "dropout on the scores before masking": (attention_class("on scores"), "scores before the softmax"),
        "dropout on the masked scores": (attention_class("on masked scores"), "NaN"),
        "dropout on the context": (attention_class("on context"), "to the context"),
        "no dropout at all": (attention_class("no dropout"), "drops nothing"),
        "F.dropout active in eval": (attention_class("F.dropout always"), "deterministic"),
        "nn.Dropout(1 - dropout)": (attention_class("keep with p"), "rate passed to __init__"),
        "hard-coded dropout rate": (attention_class("hard-coded rate"), "rate passed to __init__"),
        "hand-written dropout instead of nn.Dropout": (attention_class("no nn.Dropout"), "nn.Dropout"),
        "no mask": (attention_class("no mask"), "sees the future"),
        "mask is a plain attribute": (attention_class(store="attribute"), "registered buffer"),
        "mask not sliced": (attention_class(slice_mask=False), "self.mask[:T, :T]"),
        "the utils class itself": (ref.CausalAttention, "compute masked attention itself"),
        "values detached": (attention_values_detached(), "No gradient reaches CausalAttention.W_value.weight"),
        "F.scaled_dot_product_attention with dropout_p": (attention_variant("sdpa with dropout_p"), "with dropout_p it does this"),
        "softmax in float32, not cast back": (attention_variant("float32 softmax"), "combines tensors of two dtypes"),
        "an additive mask made in float32": (attention_variant("additive float32 mask"), "combines tensors of two dtypes"),
        "scale by sqrt(3), the pinned width": (attention_variant("scale sqrt(3)"), "differs from the course's"),
        "a mask of 6 positions": (attention_six_positions(), "crashed"),
        "projections of x.view(-1, d_in)": (attention_variant("flat view"), "crashed"),
        "exp without subtracting the max": (attention_variant("exp without the max"), "scores in the hundreds"),
    },
}

RIGHT = {
    "attention_dropout": {"the notebook's solution": dropout_factory(), "torch.bernoulli": dropout_bernoulli,
                          "torch.where": dropout_where, "uniform_ with a generator": dropout_uniform_,
                          "the mask scaled first, in the weights' dtype": dropout_scale_first,
                          "in float32, cast back": dropout_in_float32},
    "CausalAttention": {"the notebook's solution": attention_class(),
                        "register_buffer(persistent=False)": attention_class(persistent=False),
                        "the book's listing 3.3": attention_book(),
                        "torch.where and a differently named dropout": attention_where_named(),
                        "subclass of notebook 04's CausalSelfAttention": attention_extends_04(),
                        "softmax in float32, cast back": attention_float32_softmax(),
                        "einsum": attention_variant("einsum"), "filled with finfo.min": attention_variant("finfo.min"),
                        "F.dropout(..., training=self.training) beside its nn.Dropout": attention_variant("F.dropout, training=self.training")},
}
