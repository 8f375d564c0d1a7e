"""Solutions of notebook 02 that grading must reject (WRONG) or accept (RIGHT)."""
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

import utils.self_attention as ref


# project_qkv -----------------------------------------------------------------------------
def project_wrong_order(x, W_q, W_k, W_v):
    return x @ W_q, x @ W_v, x @ W_k


def project_one_matrix(x, W_q, W_k, W_v):
    return x @ W_q, x @ W_q, x @ W_q


def project_batched_T(x, W_q, W_k, W_v):
    return tuple((W.T @ x.T).T for W in (W_q, W_k, W_v))


def project_matmul(x, W_q, W_k, W_v):
    return torch.matmul(x, W_q), torch.matmul(x, W_k), torch.matmul(x, W_v)


def project_einsum(x, W_q, W_k, W_v):
    return tuple(torch.einsum("...i,io->...o", x, W) for W in (W_q, W_k, W_v))


def project_list(x, W_q, W_k, W_v):
    return [x @ W for W in (W_q, W_k, W_v)]


# SelfAttentionV1 and V2 share their forward mistakes -------------------------------------
def _forward(q, k, v, mistake=None):
    d_k = k.shape[-1]
    if mistake == "batched .T":
        scores = q @ k.T
    else:
        scores = q @ k.transpose(-2, -1)
    if mistake == "scale by d":
        return torch.softmax(scores / d_k, dim=-1) @ v
    if mistake == "scale by sqrt(d_in)":
        return torch.softmax(scores / math.sqrt(5), dim=-1) @ v  # the hidden tests use d_in = 5
    if mistake == "no scale":
        return torch.softmax(scores, dim=-1) @ v
    if mistake == "scale after softmax":
        return torch.softmax(scores, dim=-1) / d_k**0.5 @ v
    if mistake == "softmax over queries":
        return torch.softmax(scores / d_k**0.5, dim=-2) @ v
    if mistake == "sdpa":
        return F.scaled_dot_product_attention(q, k, v)
    return torch.softmax(scores / d_k**0.5, dim=-1) @ v


def v1_class(mistake=None, shape="in_out", registered=True):
    class V1(nn.Module):
        def __init__(self, d_in, d_out):
            super().__init__()
            size = (d_in, d_out) if shape == "in_out" else (d_out, d_in)
            make = nn.Parameter if registered else (lambda t: t)
            self.W_query = make(torch.rand(*size))
            self.W_key = make(torch.rand(*size))
            self.W_value = make(torch.rand(*size))

        def forward(self, x):
            Wq, Wk, Wv = self.W_query, self.W_key, self.W_value
            if shape != "in_out":
                Wq, Wk, Wv = Wq.T, Wk.T, Wv.T
            return _forward(x @ Wq, x @ Wk, x @ Wv, mistake)
    return V1


def v1_einsum():
    class V1(v1_class()):
        def forward(self, x):
            q, k, v = (torch.einsum("...td,de->...te", x, W) for W in (self.W_query, self.W_key, self.W_value))
            weights = torch.softmax(torch.einsum("...qe,...ke->...qk", q, k) / math.sqrt(k.shape[-1]), dim=-1)
            return torch.einsum("...qk,...ke->...qe", weights, v)
    return V1


def v2_class(mistake=None, honour_bias=True, manual_weight=False):
    class V2(nn.Module):
        def __init__(self, d_in, d_out, qkv_bias=False):
            super().__init__()
            bias = qkv_bias if honour_bias else False
            self.W_query = nn.Linear(d_in, d_out, bias=bias)
            self.W_key = nn.Linear(d_in, d_out, bias=bias)
            self.W_value = nn.Linear(d_in, d_out, bias=bias)

        def forward(self, x):
            if manual_weight:  # forgets that nn.Linear stores (d_out, d_in)
                return _forward(x @ self.W_query.weight, x @ self.W_key.weight, x @ self.W_value.weight)
            return _forward(self.W_query(x), self.W_key(x), self.W_value(x), mistake)
    return V2


def v2_values_frozen():
    """Values computed under no_grad: right outputs, but W_value never trains."""
    class V2(v2_class()):
        def forward(self, x):
            with torch.no_grad():
                v = self.W_value(x)
            return _forward(self.W_query(x), self.W_key(x), v)
    return V2


def v1_only_first_item():
    """Right when every batch item is the first one: attends with the first item's keys."""
    class V1(v1_class()):
        def forward(self, x):
            q, k, v = x @ self.W_query, x[:1] @ self.W_key, x[:1] @ self.W_value
            return torch.softmax(q @ k.mT / math.sqrt(k.shape[-1]), dim=-1) @ v
    return V1


def v2_functional_linear():
    class V2(v2_class()):
        def forward(self, x):
            q, k, v = (F.linear(x, layer.weight, layer.bias) for layer in (self.W_query, self.W_key, self.W_value))
            return torch.softmax(q @ k.mT / math.sqrt(k.shape[-1]), dim=-1) @ v
    return V2


# copy_weights_v2_to_v1 -------------------------------------------------------------------
def copy_book(v1, v2):  # the book's solution: each new Parameter is a view of v2's weight, so training v1 changes v2
    v1.W_query = nn.Parameter(v2.W_query.weight.T)
    v1.W_key = nn.Parameter(v2.W_key.weight.T)
    v1.W_value = nn.Parameter(v2.W_value.weight.T)


def copy_data(v1, v2):
    for name in ("W_query", "W_key", "W_value"):
        getattr(v1, name).data = getattr(v2, name).weight.data.t().clone()


def copy_no_transpose(v1, v2):
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            getattr(v1, name).copy_(getattr(v2, name).weight)


def copy_no_transpose_param(v1, v2):
    v1.W_query = nn.Parameter(v2.W_query.weight)
    v1.W_key = nn.Parameter(v2.W_key.weight)
    v1.W_value = nn.Parameter(v2.W_value.weight)


def copy_mixed_up(v1, v2):
    v1.W_query = nn.Parameter(v2.W_key.weight.T)
    v1.W_key = nn.Parameter(v2.W_query.weight.T)
    v1.W_value = nn.Parameter(v2.W_value.weight.T)


def copy_plain_tensor(v1, v2):
    v1.W_query = v2.W_query.weight.T.detach()


def copy_returns_new(v1, v2):
    """Copies into a fresh module and returns it: v1 itself is left as it was."""
    fresh = copy.deepcopy(v1)
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            getattr(fresh, name).copy_(getattr(v2, name).weight.T)
    return fresh


def copy_returns_v1(v1, v2):
    """A correct in-place copy that also returns v1: the contract ignores the return value."""
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            getattr(v1, name).copy_(getattr(v2, name).weight.T)
    return v1


def copy_via_list(v1, v2):
    """Rebuilt from Python numbers: float32 whatever v2's dtype."""
    for name in ("W_query", "W_key", "W_value"):
        setattr(v1, name, nn.Parameter(torch.tensor(getattr(v2, name).weight.T.tolist())))


def copy_frozen(v1, v2):
    """Right values in parameters that no longer train."""
    for name in ("W_query", "W_key", "W_value"):
        setattr(v1, name, nn.Parameter(getattr(v2, name).weight.detach().T.clone(), requires_grad=False))


def copy_non_leaf(v1, v2):
    """v2's transposed weights written straight into v1's parameter table: non-leaves, which an optimizer cannot train."""
    for name in ("W_query", "W_key", "W_value"):
        v1._parameters[name] = getattr(v2, name).weight.T


def copy_inference_mode(v1, v2):
    """New Parameters made under torch.inference_mode(): right values, but an optimizer's in-place step fails on them."""
    with torch.inference_mode():
        for name in ("W_query", "W_key", "W_value"):
            setattr(v1, name, nn.Parameter(getattr(v2, name).weight.T.clone()))


def copy_in_inference_mode(v1, v2):
    """copy_ into v1's own Parameters under torch.inference_mode(): they stay normal tensors."""
    with torch.inference_mode():
        for name in ("W_query", "W_key", "W_value"):
            getattr(v1, name).copy_(getattr(v2, name).weight.T)


def copy_zero_then_add(v1, v2):
    """Zeroes by multiplying: right unless v1 starts from NaN or inf (0 * NaN = NaN)."""
    with torch.no_grad():
        for name in ("W_query", "W_key", "W_value"):
            getattr(v1, name).mul_(0).add_(getattr(v2, name).weight.T)


def copy_swaps(v1, v2):
    """Swaps the weights: v1 is right, but v2 now holds v1's old weights."""
    for name in ("W_query", "W_key", "W_value"):
        old = getattr(v1, name)
        setattr(v1, name, nn.Parameter(getattr(v2, name).weight.T))
        getattr(v2, name).weight = nn.Parameter(old.detach().T)


def copy_load_state_dict(v1, v2):
    v1.load_state_dict({name: getattr(v2, name).weight.T for name in ("W_query", "W_key", "W_value")})


def copy_data_copy(v1, v2):
    for name in ("W_query", "W_key", "W_value"):
        getattr(v1, name).data.copy_(getattr(v2, name).weight.data.t())


def copy_new_contiguous(v1, v2):
    for name in ("W_query", "W_key", "W_value"):
        setattr(v1, name, nn.Parameter(getattr(v2, name).weight.detach().T.contiguous()))


def copy_book_cloned(v1, v2):
    for name in ("W_query", "W_key", "W_value"):
        setattr(v1, name, nn.Parameter(getattr(v2, name).weight.detach().T.clone()))


def copy_new_cloned(v1, v2):
    for name in ("W_query", "W_key", "W_value"):
        setattr(v1, name, nn.Parameter(getattr(v2, name).weight.detach().T.clone(memory_format=torch.contiguous_format)))


def copy_data_view(v1, v2):  # .data set to a view of v2's weight: v1 and v2 share memory
    for name in ("W_query", "W_key", "W_value"):
        getattr(v1, name).data = getattr(v2, name).weight.data.t()


def copy_float32_buffer(v1, v2):  # float32-only: a float32 staging tensor, then nn.Parameter of it
    for name in ("W_query", "W_key", "W_value"):
        staging = torch.empty(getattr(v1, name).shape, dtype=torch.float32)
        staging.copy_(getattr(v2, name).weight.detach().T)
        setattr(v1, name, nn.Parameter(staging))


def copy_state_dict_loop(v1, v2):
    with torch.no_grad():
        for name, p in v1.named_parameters():
            p.copy_(v2.state_dict()[f"{name}.weight"].T)


WRONG = {
    "project_qkv": {
        "wrong order": (project_wrong_order, "wrong order"),
        "one matrix for all": (project_one_matrix, "its own matrix"),
        ".T on a batch": (project_batched_T, None),
    },
    "SelfAttentionV1": {
        "scale by d_out": (v1_class("scale by d"), "instead of sqrt(d_out)"),
        "scale by sqrt(d_in)": (v1_class("scale by sqrt(d_in)"), "sqrt(d_in)"),
        "no scaling": (v1_class("no scale"), "not scaled"),
        "scaled after softmax": (v1_class("scale after softmax"), "after the softmax"),
        "softmax over queries": (v1_class("softmax over queries"), "dim=-2"),
        ".T on a batch": (v1_class("batched .T"), None),
        "weights stored (d_out, d_in)": (v1_class(shape="out_in"), "(d_in, d_out)"),
        "plain tensors, not parameters": (v1_class(registered=False), "registered nn.Parameter"),
        "F.scaled_dot_product_attention": (v1_class("sdpa"), "compute attention itself"),
        "the utils class itself": (ref.SelfAttentionV1, "compute attention itself"),
        "the first item's keys for every item": (v1_only_first_item(), None),
    },
    "SelfAttentionV2": {
        "ignores qkv_bias": (v2_class(honour_bias=False), "qkv_bias=True"),
        "scale by d_out": (v2_class("scale by d"), "instead of sqrt(d_out)"),
        "scaled after softmax": (v2_class("scale after softmax"), "after the softmax"),
        "softmax over queries": (v2_class("softmax over queries"), "dim=-2"),
        "uses .weight without transpose": (v2_class(manual_weight=True), None),
        "F.scaled_dot_product_attention": (v2_class("sdpa"), "compute attention itself"),
        "the utils class itself": (ref.SelfAttentionV2, "compute attention itself"),
        "values under torch.no_grad()": (v2_values_frozen(), "No gradient reaches SelfAttentionV2.W_value"),
    },
    "copy_weights_v2_to_v1": {
        "no transpose (copy_)": (copy_no_transpose, None),
        "no transpose (new Parameter)": (copy_no_transpose_param, "without the transpose"),
        "query and key swapped": (copy_mixed_up, "same name"),
        "plain tensor assigned": (copy_plain_tensor, None),
        "returns a new module": (copy_returns_new, "in place"),
        "rebuilt with torch.tensor(.tolist()): float32 always": (copy_via_list, "of v2's dtype"),
        "parameters with requires_grad=False": (copy_frozen, "that train"),
        "non-leaves in v1._parameters": (copy_non_leaf, "that train"),
        "new Parameters under torch.inference_mode()": (copy_inference_mode, "not made under torch.inference_mode()"),
        "zeroed by multiplying, then added (NaN stays)": (copy_zero_then_add, "whatever v1 held before (on v1 starting from NaN)"),
        "swaps v1's and v2's weights": (copy_swaps, "changed v2"),
        "the book's nn.Parameter(weight.T): a view of v2's weight": (copy_book, "shares memory with argument 2"),
        ".contiguous() of weight.T: no copy when it is contiguous already": (copy_new_contiguous, "shares memory with argument 2"),
    },
}

WRONG["copy_weights_v2_to_v1"].update({".data = weight.data.t(), a view of v2": (copy_data_view, "shares memory with argument 2"),
                                       "a float32 staging tensor": (copy_float32_buffer, "of v2's dtype")})

RIGHT = {
    "project_qkv": {"torch.matmul": project_matmul, "einsum": project_einsum, "a list": project_list},
    "SelfAttentionV1": {"the notebook's solution": v1_class(), "einsum": v1_einsum()},
    "SelfAttentionV2": {"the notebook's solution": v2_class(), "F.linear and .mT": v2_functional_linear()},
    "copy_weights_v2_to_v1": {"nn.Parameter(weight.detach().T.clone())": copy_book_cloned, ".data assignment": copy_data,
                              "copies in place and returns v1": copy_returns_v1, "load_state_dict of the transposes": copy_load_state_dict,
                              ".data.copy_ without no_grad": copy_data_copy, "new Parameters, .T.clone(memory_format=contiguous)": copy_new_cloned,
                              "copy_ under torch.inference_mode()": copy_in_inference_mode,
                              "named_parameters and v2's state_dict": copy_state_dict_loop},
}

from autograder.tests.zoo import nb02_adversary2  # noqa: E402

for _exercise, _entries in nb02_adversary2.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb02_adversary2.RIGHT.items():
    RIGHT[_exercise].update(_entries)

from autograder.tests.zoo import nb02_spaces  # noqa: E402

for _exercise, _entries in nb02_spaces.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb02_spaces.RIGHT.items():
    RIGHT[_exercise].update(_entries)
