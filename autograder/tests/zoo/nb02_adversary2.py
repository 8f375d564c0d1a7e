"""Issue 29, last round: notebook 02 solutions an adversarial learner might write (WRONG) or that are right another way (RIGHT)."""
import math

import torch
import torch.nn.functional as F
from torch import nn


# project_qkv -----------------------------------------------------------------------------
def project_flattened(x, W_q, W_k, W_v):
    """Flattens the batch to 2-D and never restores it."""
    flat = x.reshape(-1, x.shape[-1])
    return flat @ W_q, flat @ W_k, flat @ W_v


def project_float32(x, W_q, W_k, W_v):
    return tuple(x.float() @ W.float() for W in (W_q, W_k, W_v))


def project_fused(x, W_q, W_k, W_v):
    """RIGHT: one matmul on the concatenated weights, split back."""
    out = x @ torch.cat([W_q, W_k, W_v], dim=-1)
    return tuple(out.split([W_q.shape[-1], W_k.shape[-1], W_v.shape[-1]], dim=-1))


def project_in_place(x, W_q, W_k, W_v):
    """Scales x in place by 1 (harmless) but detaches: returns values computed without grad."""
    with torch.no_grad():
        v = x @ W_v
    return x @ W_q, x @ W_k, v


# SelfAttentionV1 -------------------------------------------------------------------------
class V1SharedQK(nn.Module):
    """One Parameter used as both W_query and W_key."""
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = self.W_query
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v


class V1KeysOfFirstCall(nn.Module):
    """Caches the keys and values of the first call and reuses them."""
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))
        self._kv = None

    def forward(self, x):
        if self._kv is None or self._kv[0].shape != x.shape[:-1] + (self.W_key.shape[1],):
            self._kv = (x @ self.W_key, x @ self.W_value)
        k, v = self._kv
        q = x @ self.W_query
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v


class V1ScalesInputInPlace(nn.Module):
    """Divides the caller's x in place by d_out ** 0.25 (so q k^T comes out scaled)."""
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))

    def forward(self, x):
        s = self.W_key.shape[1] ** 0.25
        x.data.div_(s)
        q, k = x @ self.W_query, x @ self.W_key
        v = (x * s) @ self.W_value
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


class V1Float64(nn.Module):
    """Parameters created in float64 and the input cast up."""
    def __init__(self, d_in, d_out):
        super().__init__()
        self.W_query = nn.Parameter(torch.rand(d_in, d_out, dtype=torch.float64))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out, dtype=torch.float64))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out, dtype=torch.float64))

    def forward(self, x):
        x = x.to(self.W_query.dtype)
        q, k, v = x @ self.W_query, x @ self.W_key, x @ self.W_value
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v


class V1Randn(nn.Module):
    """RIGHT: randn initialisation, F.softmax, math.sqrt, .mT."""
    def __init__(self, d_in, d_out):
        super().__init__()
        for name in ("W_query", "W_key", "W_value"):
            setattr(self, name, nn.Parameter(torch.randn(d_in, d_out)))

    def forward(self, x):
        q, k, v = (x @ getattr(self, n) for n in ("W_query", "W_key", "W_value"))
        return F.softmax(q @ k.mT / math.sqrt(q.shape[-1]), dim=-1) @ v


# SelfAttentionV2 -------------------------------------------------------------------------
class V2SharedKV(nn.Module):
    """W_value is the W_key layer."""
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = self.W_key

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v


class V2BiasAlways(nn.Module):
    """bias=True whatever qkv_bias says, the bias of W_value zeroed only when qkv_bias is False."""
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=True)
        self.W_key = nn.Linear(d_in, d_out, bias=True)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v


class V2Lazy(nn.Module):
    """nn.LazyLinear: ignores d_in, sizes itself on the first call."""
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.LazyLinear(d_out, bias=qkv_bias)
        self.W_key = nn.LazyLinear(d_out, bias=qkv_bias)
        self.W_value = nn.LazyLinear(d_out, bias=qkv_bias)

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ v


class V2ScaleAtInit(nn.Module):
    """Scale computed from d_in at __init__ (right only when d_in == d_out)."""
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.scale = d_in ** -0.5
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        q, k, v = self.W_query(x), self.W_key(x), self.W_value(x)
        return torch.softmax(q @ k.transpose(-2, -1) * self.scale, dim=-1) @ v


class V2Baddbmm(nn.Module):
    """RIGHT: scale stored at __init__ from d_out, scores with torch.matmul on a scaled query."""
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.scale = 1 / math.sqrt(d_out)
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)

    def forward(self, x):
        q = self.W_query(x) * self.scale
        return torch.matmul(torch.softmax(torch.matmul(q, self.W_key(x).transpose(-1, -2)), -1), self.W_value(x))


class V2ValuesOfFirstCall(nn.Module):
    """Keeps the values of the first call while the shape stays the same."""
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.values = None

    def forward(self, x):
        if self.values is None or self.values.shape[:-1] != x.shape[:-1]:
            self.values = self.W_value(x)
        q, k = self.W_query(x), self.W_key(x)
        return torch.softmax(q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5, dim=-1) @ self.values


# copy_weights_v2_to_v1 -------------------------------------------------------------------
def copy_reshape(v1, v2):
    """reshape instead of transpose: the right shape, the wrong layout."""
    with torch.no_grad():
        for n in ("W_query", "W_key", "W_value"):
            getattr(v1, n).copy_(getattr(v2, n).weight.reshape(getattr(v1, n).shape))


def copy_forgets_value(v1, v2):
    with torch.no_grad():
        v1.W_query.copy_(v2.W_query.weight.T)
        v1.W_key.copy_(v2.W_key.weight.T)


def copy_shares_storage(v1, v2):
    """v1's parameters become views of v2's weights (as the book's nn.Parameter(weight.T) does): training v1 changes v2."""
    for n in ("W_query", "W_key", "W_value"):
        getattr(v1, n).data = getattr(v2, n).weight.data.T


def copy_setattr_loop(v1, v2):
    """RIGHT: a loop over names, t() and copy_ under no_grad."""
    with torch.no_grad():
        for n in ("W_query", "W_key", "W_value"):
            getattr(v1, n).copy_(getattr(v2, n).weight.t())


WRONG = {
    "project_qkv": {"batch flattened, not restored": (project_flattened, "for every token of every batch item"), "always float32": (project_float32, "must follow its input's dtype"),
                    "values under no_grad": (project_in_place, "part of the output does not train")},
    "SelfAttentionV1": {"W_key is W_query": (V1SharedQK, "must be a registered nn.Parameter"), "keys and values of the first call cached": (V1KeysOfFirstCall, "compute every call from its own inputs"),
                        "caller's x scaled in place": (V1ScalesInputInPlace, "changed its input x in place"), "float64 parameters, input cast": (V1Float64, "must follow its input's dtype")},
    "SelfAttentionV2": {"W_value is W_key": (V2SharedKV, "must have the names of the contract"), "query and key biased always": (V2BiasAlways, "must not have a bias"),
                        "nn.LazyLinear": (V2Lazy, "must map d_in features to d_out"), "values of the first call kept": (V2ValuesOfFirstCall, "compute every call from its own inputs"), "scale from d_in at __init__": (V2ScaleAtInit, "sqrt(d_in)")},
    "copy_weights_v2_to_v1": {"reshape instead of transpose": (copy_reshape, "without the transpose"), "W_value not copied": (copy_forgets_value, "v1.W_value must receive"),
                              ".data = weight.data.T, memory shared with v2": (copy_shares_storage, "shares memory with argument 2")},
}

RIGHT = {
    "project_qkv": {"one matmul on the concatenated weights": project_fused},
    "SelfAttentionV1": {"randn, F.softmax, .mT": V1Randn},
    "SelfAttentionV2": {"scale at __init__ from d_out, torch.matmul": V2Baddbmm},
    "copy_weights_v2_to_v1": {"setattr loop with .t()": copy_setattr_loop},
}
