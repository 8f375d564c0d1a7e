"""Solutions of notebook 04 that grading must reject (WRONG) or accept (RIGHT)."""
import math

import torch
import torch.nn.functional as F
from torch import nn

import utils.causal as ref
from utils.self_attention import SelfAttentionV2

NEG_INF = float("-inf")


# causal_mask -----------------------------------------------------------------------------
def mask_with_diagonal(num_queries, num_keys=None, device=None):
    num_keys = num_queries if num_keys is None else num_keys
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).triu(num_keys - num_queries)


def mask_inverted(num_queries, num_keys=None, device=None):
    num_keys = num_queries if num_keys is None else num_keys
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).tril(num_keys - num_queries)


def mask_top_left(num_queries, num_keys=None, device=None):
    num_keys = num_queries if num_keys is None else num_keys
    return torch.ones(num_queries, num_keys, dtype=torch.bool, device=device).triu(1)


def mask_float(num_queries, num_keys=None, device=None):
    num_keys = num_queries if num_keys is None else num_keys
    return torch.ones(num_queries, num_keys, device=device).triu(1 + num_keys - num_queries)


def mask_square_only(num_queries, num_keys=None, device=None):
    return torch.ones(num_queries, num_queries, dtype=torch.bool, device=device).triu(1)


def mask_tril(num_queries, num_keys=None, device=None):
    num_keys = num_queries if num_keys is None else num_keys
    return ~torch.tril(torch.ones(num_queries, num_keys, dtype=torch.bool, device=device), diagonal=num_keys - num_queries)


def mask_arange(num_queries, num_keys=None, device=None):
    num_keys = num_queries if num_keys is None else num_keys
    i = torch.arange(num_queries, device=device)[:, None]
    j = torch.arange(num_keys, device=device)[None, :]
    return j > i + (num_keys - num_queries)


def mask_book_then_bool(num_queries, num_keys=None, device=None):
    num_keys = num_queries if num_keys is None else num_keys
    return torch.triu(torch.ones(num_queries, num_keys, device=device), diagonal=1 + num_keys - num_queries).bool()


def mask_ignores_device(num_queries, num_keys=None, device=None):  # right on the CPU only
    num_keys = num_queries if num_keys is None else num_keys
    return torch.ones(num_queries, num_keys, dtype=torch.bool).triu(1 + num_keys - num_queries)


def mask_then_to(num_queries, num_keys=None, device=None):  # built on the CPU, then moved: right
    num_keys = num_queries if num_keys is None else num_keys
    return torch.ones(num_queries, num_keys, dtype=torch.bool).triu(1 + num_keys - num_queries).to(device)


# mask_and_renormalize --------------------------------------------------------------------
def renorm_none(weights, mask):
    return weights.masked_fill(mask, 0.0)


def renorm_inverted(weights, mask):
    kept = weights.masked_fill(~mask, 0.0)
    return kept / kept.sum(-1, keepdim=True)


def renorm_over_queries(weights, mask):
    kept = weights.masked_fill(mask, 0.0)
    return kept / kept.sum(-2, keepdim=True)


def renorm_softmax_again(weights, mask):
    return torch.softmax(weights.masked_fill(mask, 0.0), dim=-1)


def renorm_in_place(weights, mask):
    weights.masked_fill_(mask, 0.0)
    return weights / weights.sum(-1, keepdim=True)


def renorm_where(weights, mask):
    kept = torch.where(mask, torch.zeros_like(weights), weights)
    return kept / kept.sum(dim=-1, keepdim=True)


def renorm_multiply(weights, mask):  # the book's route: multiply by tril(ones)
    kept = weights * (~mask).float()
    return kept / kept.sum(dim=-1, keepdim=True)


def renorm_via_log(weights, mask):  # softmax(log w) == w / sum(w): the same thing by the other route
    return torch.softmax(weights.log().masked_fill(mask, NEG_INF), dim=-1)


def renorm_sum_detached(weights, mask):  # right values; the row sum passes no gradient
    kept = weights.masked_fill(mask, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True).detach()


def renorm_assumes_unit_rows(weights, mask):  # divides by 1 - (blocked weight): right only when rows summed to 1
    return weights.masked_fill(mask, 0.0) / (1 - weights.masked_fill(~mask, 0.0).sum(dim=-1, keepdim=True))


def renorm_epsilon(weights, mask):  # an epsilon against division by zero: right unless the kept weights are tiny
    kept = weights.masked_fill(mask, 0.0)
    return kept / (kept.sum(dim=-1, keepdim=True) + 1e-6)


def renorm_always_float32(weights, mask):
    kept = weights.float().masked_fill(mask, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)


# masked_softmax --------------------------------------------------------------------------
def softmax_fill_zero(scores, mask, dim=-1):
    return torch.softmax(scores.masked_fill(mask, 0.0), dim=dim)


def softmax_then_mask(scores, mask, dim=-1):
    return torch.softmax(scores, dim=dim).masked_fill(mask, 0.0)


def softmax_inverted(scores, mask, dim=-1):
    return torch.softmax(scores.masked_fill(~mask, NEG_INF), dim=dim)


def softmax_ignores_dim(scores, mask, dim=-1):
    return torch.softmax(scores.masked_fill(mask, NEG_INF), dim=-1)


def softmax_in_place(scores, mask, dim=-1):
    return torch.softmax(scores.masked_fill_(mask, NEG_INF), dim=dim)


def softmax_no_mask(scores, mask, dim=-1):
    return torch.softmax(scores, dim=dim)


def softmax_naive_exp(scores, mask, dim=-1):
    e = scores.masked_fill(mask, NEG_INF).exp()
    return e / e.sum(dim=dim, keepdim=True)


def softmax_where(scores, mask, dim=-1):
    return torch.softmax(torch.where(mask, NEG_INF, scores), dim=dim)


def softmax_finfo_min(scores, mask, dim=-1):
    return F.softmax(scores.masked_fill(mask, torch.finfo(scores.dtype).min), dim=dim)


def softmax_by_hand(scores, mask, dim=-1):
    s = scores.masked_fill(mask, NEG_INF)
    e = (s - s.amax(dim=dim, keepdim=True)).exp()
    return e / e.sum(dim=dim, keepdim=True)


def softmax_max_before_mask(scores, mask, dim=-1):  # the shift includes blocked scores: right while scores stay of order 1
    e = (scores - scores.amax(dim=dim, keepdim=True)).masked_fill(mask, NEG_INF).exp()
    return e / e.sum(dim=dim, keepdim=True)


def softmax_always_float32(scores, mask, dim=-1):
    return torch.softmax(scores.float().masked_fill(mask, NEG_INF), dim=dim)


def softmax_float32_cast_back(scores, mask, dim=-1):  # Llama, Hugging Face: softmax in float32, the input's dtype out
    return torch.softmax(scores.float().masked_fill(mask, NEG_INF), dim=dim).to(scores.dtype)


# CausalSelfAttention ---------------------------------------------------------------------
def causal_class(mistake=None, store="buffer", slice_mask=True, check_length=True, honour_bias=True, persistent=True):
    class CausalSelfAttention(nn.Module):
        def __init__(self, d_in, d_out, context_length, qkv_bias=False):
            super().__init__()
            bias = qkv_bias if honour_bias else False
            self.context_length = context_length
            self.W_query = nn.Linear(d_in, d_out, bias=bias)
            self.W_key = nn.Linear(d_in, d_out, bias=bias)
            self.W_value = nn.Linear(d_in, d_out, bias=bias)
            if mistake == "diagonal":
                mask = torch.ones(context_length, context_length, dtype=torch.bool).triu(0)
            elif mistake == "inverted":
                mask = torch.ones(context_length, context_length, dtype=torch.bool).tril(0)
            else:
                mask = torch.ones(context_length, context_length, dtype=torch.bool).triu(1)
            if store == "buffer":
                self.register_buffer("mask", mask, persistent=persistent)
            elif store == "attribute":
                self.mask = mask
            elif store == "parameter":
                self.mask = nn.Parameter(mask.float(), requires_grad=False)

        def forward(self, x):
            T = x.shape[1]
            if check_length and T > self.context_length:
                raise ValueError(f"{T} tokens > context_length {self.context_length}")
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            if mistake == "sdpa":
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)
            scores = q @ k.transpose(1, 2)
            if mistake != "no scale":
                scores = scores / math.sqrt(k.shape[-1])
            mask = self.mask.bool()[:T, :T] if slice_mask else self.mask.bool()
            if mistake == "fill zero":
                weights = torch.softmax(scores.masked_fill(mask, 0.0), dim=-1)
            elif mistake == "after softmax":
                weights = torch.softmax(scores, dim=-1).masked_fill(mask, 0.0)
            elif mistake == "no mask":
                weights = torch.softmax(scores, dim=-1)
            else:
                weights = torch.softmax(scores.masked_fill(mask, NEG_INF), dim=-1)
            return weights @ v
    return CausalSelfAttention


def causal_allowed_buffer():
    """A tril buffer marking the ALLOWED keys: right output, but against the course's convention."""
    class CausalSelfAttention(causal_class()):
        def __init__(self, d_in, d_out, context_length, qkv_bias=False):
            super().__init__(d_in, d_out, context_length, qkv_bias)
            self.register_buffer("mask", torch.tril(torch.ones(context_length, context_length)))

        def forward(self, x):
            T = x.shape[1]
            if T > self.context_length:
                raise ValueError("too long")
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = (q @ k.transpose(1, 2)).masked_fill(self.mask[:T, :T] == 0, NEG_INF)
            return torch.softmax(scores / math.sqrt(k.shape[-1]), dim=-1) @ v
    return CausalSelfAttention


def causal_book_style():
    """The book's listing: float triu buffer, in-place masked_fill_ on the local scores, .bool() slice."""
    class CausalSelfAttention(nn.Module):
        def __init__(self, d_in, d_out, context_length, qkv_bias=False):
            super().__init__()
            self.context_length = context_length
            self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
            self.register_buffer("mask", torch.triu(torch.ones(context_length, context_length), diagonal=1))

        def forward(self, x):
            b, num_tokens, d_in = x.shape
            if num_tokens > self.context_length:
                raise ValueError(f"{num_tokens} tokens do not fit in context_length={self.context_length}")
            keys, queries, values = self.W_key(x), self.W_query(x), self.W_value(x)
            attn_scores = queries @ keys.transpose(1, 2)
            attn_scores.masked_fill_(self.mask.bool()[:num_tokens, :num_tokens], -torch.inf)
            attn_weights = torch.softmax(attn_scores / keys.shape[-1] ** 0.5, dim=-1)
            return attn_weights @ values
    return CausalSelfAttention


def causal_einsum_where():
    class CausalSelfAttention(causal_class()):
        def forward(self, x):
            T = x.shape[-2]
            if T > self.mask.shape[0]:
                raise ValueError("input longer than the context")
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = torch.einsum("btd,bsd->bts", q, k) / math.sqrt(q.shape[-1])
            weights = torch.softmax(torch.where(self.mask[:T, :T], NEG_INF, scores), dim=-1)
            return torch.einsum("bts,bsd->btd", weights, v)
    return CausalSelfAttention


def causal_uses_course_kernels():
    """Earlier ideas reused from utils: the mask and the masked softmax (not the class itself)."""
    class CausalSelfAttention(causal_class()):
        def __init__(self, d_in, d_out, context_length, qkv_bias=False):
            super().__init__(d_in, d_out, context_length, qkv_bias)
            self.register_buffer("mask", ref.causal_mask(context_length))

        def forward(self, x):
            T = x.shape[-2]
            if T > self.context_length:
                raise ValueError("too many tokens")
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            return ref.masked_softmax(q @ k.mT / math.sqrt(k.shape[-1]), self.mask[:T, :T]) @ v
    return CausalSelfAttention


def causal_extends_v2():
    """Exercise 4's text: extend notebook 02's SelfAttentionV2 (reusing an earlier notebook's class is no shortcut)."""
    class CausalSelfAttention(SelfAttentionV2):
        def __init__(self, d_in, d_out, context_length, qkv_bias=False):
            super().__init__(d_in, d_out, qkv_bias)
            self.context_length = context_length
            self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))

        def forward(self, x):
            T = x.shape[1]
            if T > self.context_length:
                raise ValueError("too many tokens")
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = (q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])).masked_fill(self.mask[:T, :T], NEG_INF)
            return torch.softmax(scores, dim=-1) @ v
    return CausalSelfAttention


class CausalBorrowsMethods(nn.Module):
    """Its own __init__; forward and attention_weights are the reference class's methods, taken into
    the class body: no object the rule compares (the class, an alias, a subclass) is handed in."""
    def __init__(self, d_in, d_out, context_length, qkv_bias=False):
        super().__init__()
        self.context_length = context_length
        self.W_query, self.W_key, self.W_value = (nn.Linear(d_in, d_out, bias=qkv_bias) for _ in range(3))
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))

    forward = ref.CausalSelfAttention.forward
    attention_weights = ref.CausalSelfAttention.attention_weights


def causal_keys_detached():
    """Right outputs; the keys come from a detached projection, so W_key never trains."""
    class CausalSelfAttention(causal_class()):
        def forward(self, x):
            T = x.shape[1]
            if T > self.context_length:
                raise ValueError("too many tokens")
            q, k, v = self.W_query(x), self.W_key(x).detach(), self.W_value(x)
            scores = (q @ k.transpose(-2, -1) / math.sqrt(k.shape[-1])).masked_fill(self.mask[:T, :T], NEG_INF)
            return torch.softmax(scores, dim=-1) @ v
    return CausalSelfAttention


def causal_weights_no_grad():
    """Right outputs; the attention weights are computed under no_grad, so neither W_query nor W_key trains."""
    class CausalSelfAttention(causal_class()):
        def forward(self, x):
            T = x.shape[1]
            if T > self.context_length:
                raise ValueError("too many tokens")
            with torch.no_grad():
                q, k = self.W_query(x), self.W_key(x)
                weights = torch.softmax((q @ k.mT / math.sqrt(k.shape[-1])).masked_fill(self.mask[:T, :T], NEG_INF), dim=-1)
            return weights @ self.W_value(x)
    return CausalSelfAttention


def causal_float32_min_fill():
    """Blocked scores filled with float32's lowest value whatever the layer's dtype: bfloat16 cannot hold it
    (torch.finfo(scores.dtype).min can)."""
    class CausalSelfAttention(causal_class()):
        def forward(self, x):
            T = x.shape[1]
            if T > self.context_length:
                raise ValueError("too many tokens")
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = (q @ k.mT / math.sqrt(k.shape[-1])).masked_fill(self.mask[:T, :T], torch.finfo(torch.float32).min)
            return torch.softmax(scores, dim=-1) @ v
    return CausalSelfAttention


def causal_float32_softmax():
    """Softmax in float32, cast back to the input's dtype (Llama, Hugging Face)."""
    class CausalSelfAttention(causal_class()):
        def forward(self, x):
            T = x.shape[1]
            if T > self.context_length:
                raise ValueError("too many tokens")
            q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
            scores = (q @ k.mT / math.sqrt(k.shape[-1])).masked_fill(self.mask[:T, :T], NEG_INF)
            return torch.softmax(scores.float(), dim=-1).to(x.dtype) @ v
    return CausalSelfAttention


WRONG = {
    "causal_mask": {
        # a device= argument is honoured / 遵守 device= 参数
        "ignores its device= argument": (mask_ignores_device, "asked for another device"),
        "diagonal masked": (mask_with_diagonal, "blocks the diagonal"),
        "inverted (tril)": (mask_inverted, "inverted"),
        "top-left aligned for T_q < T_k": (mask_top_left, "top-left aligned"),
        "float 0/1 mask": (mask_float, "boolean"),
        "ignores num_keys": (mask_square_only, "(3, 7)"),
        "the utils function": (ref.causal_mask, "yourself"),
    },
    "mask_and_renormalize": {
        "no renormalization": (renorm_none, "not renormalized"),
        "inverted mask": (renorm_inverted, "wrong way round"),
        "renormalized over queries": (renorm_over_queries, "dim=-2"),
        "softmax of the zeroed weights": (renorm_softmax_again, "exp(0) = 1"),
        "in place on the input": (renorm_in_place, "in place"),
        "the utils function": (ref.mask_and_renormalize, "yourself"),
        "assumes rows summed to 1": (renorm_assumes_unit_rows, "input 1 through mask_and_renormalize differs"),
        "row sum detached": (renorm_sum_detached, "The gradient of input 1 through mask_and_renormalize differs"),
        "always float32": (renorm_always_float32, "must follow its input's dtype (torch.float64)"),
        "an epsilon added to the row sum": (renorm_epsilon, "rows do not sum to 1 (on weights whose kept entries are about 1e-7, the mass"),
    },
    "masked_softmax": {
        "filled with 0 instead of -inf": (softmax_fill_zero, "filled with 0"),
        "masked after the softmax without renormalizing": (softmax_then_mask, "after the softmax"),
        "inverted mask": (softmax_inverted, "wrong way round"),
        "ignores dim": (softmax_ignores_dim, "dim argument"),
        "in place on the caller's scores": (softmax_in_place, "in place"),
        "no mask": (softmax_no_mask, "nothing was masked"),
        "exp without the maximum": (softmax_naive_exp, "NaN or inf"),
        "the utils function": (ref.masked_softmax, "yourself"),
        "maximum taken over blocked scores too": (softmax_max_before_mask, "differs from the course's (on scores of order 300)"),
        "always float32": (softmax_always_float32, "must follow its input's dtype (torch.float64)"),
    },
    "CausalSelfAttention": {
        "diagonal masked": (causal_class("diagonal"), "diagonal is masked"),
        "inverted mask": (causal_class("inverted"), "marks the allowed keys"),
        "filled with 0 instead of -inf": (causal_class("fill zero"), "exp(0) = 1"),
        "masked after the softmax without renormalizing": (causal_class("after softmax"), "after the softmax"),
        "no mask": (causal_class("no mask"), "sees the future"),
        "no scaling": (causal_class("no scale"), "not scaled"),
        "mask is a plain attribute, not a buffer": (causal_class(store="attribute"), "registered buffer"),
        "mask is an nn.Parameter": (causal_class(store="parameter"), "nn.Parameter"),
        "mask not sliced": (causal_class(slice_mask=False), "self.mask[:T, :T]"),
        "no ValueError for long inputs": (causal_class(check_length=False), "ValueError"),
        "tril buffer of allowed keys": (causal_allowed_buffer(), "marks the allowed keys"),
        "ignores qkv_bias": (causal_class(honour_bias=False), "qkv_bias=True"),
        "F.scaled_dot_product_attention": (causal_class("sdpa"), "compute masked attention itself"),
        "the utils class itself": (ref.CausalSelfAttention, "compute masked attention itself"),
        "keys detached": (causal_keys_detached(), "No gradient reaches CausalSelfAttention.W_key.weight"),
        "weights under no_grad": (causal_weights_no_grad(), "No gradient reaches CausalSelfAttention.W_query.weight"),
        "float32's lowest value as the fill": (causal_float32_min_fill(), "crashed with RuntimeError"),
        # the reference's code runs while the learner's class runs / 学习者的类运行时，参考实现的代码在运行
        "methods taken from the utils class": (CausalBorrowsMethods, "ran while your code ran"),
    },
}

RIGHT = {
    "causal_mask": {"~tril": mask_tril, "arange comparison": mask_arange, "float triu then .bool()": mask_book_then_bool,
                    "built on the CPU, then .to(device)": mask_then_to},
    "mask_and_renormalize": {"torch.where": renorm_where, "multiply by the allowed mask": renorm_multiply,
                             "softmax of log weights": renorm_via_log},
    "masked_softmax": {"torch.where": softmax_where, "finfo.min fill and F.softmax": softmax_finfo_min,
                       "softmax by hand": softmax_by_hand, "softmax in float32, cast back": softmax_float32_cast_back},
    "CausalSelfAttention": {
        "the notebook's solution": causal_class(),
        "register_buffer(persistent=True)": causal_class(persistent=True),
        "register_buffer(persistent=False)": causal_class(persistent=False),
        "the book's listing (float buffer, masked_fill_)": causal_book_style(),
        "einsum and torch.where": causal_einsum_where(),
        "utils.causal mask and masked_softmax": causal_uses_course_kernels(),
        "subclass of notebook 02's SelfAttentionV2": causal_extends_v2(),
        "softmax in float32, cast back": causal_float32_softmax(),
    },
}

from autograder.tests.zoo import nb04_adversary2  # noqa: E402

for _exercise, _entries in nb04_adversary2.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb04_adversary2.RIGHT.items():
    RIGHT[_exercise].update(_entries)
