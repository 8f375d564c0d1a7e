"""Solutions of notebook 01 that grading must reject (WRONG) or accept (RIGHT)."""
import functools

import torch
import torch.nn.functional as F
from torch.nn.functional import softmax as imported_softmax

import utils.attention as ref


# attention_scores ------------------------------------------------------------------------
def scores_softmaxed(query, inputs):
    return torch.softmax(inputs @ query, dim=-1)


def scores_cosine(query, inputs):
    return F.cosine_similarity(inputs, query.expand_as(inputs), dim=-1)


def scores_wrong_axis(query, inputs):
    return (inputs * query).sum(dim=0)


def scores_query_first(query, inputs):
    return query @ inputs


def scores_hard_coded(query, inputs):
    return torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])


def scores_loop(query, inputs):
    return torch.stack([torch.dot(x, query) for x in inputs])


def scores_einsum(query, inputs):
    return torch.einsum("td,d->t", inputs, query)


def scores_broadcast(query, inputs):
    return (inputs * query).sum(dim=-1)


# softmax ---------------------------------------------------------------------------------
def softmax_naive(x, dim=-1):
    return torch.exp(x) / torch.exp(x).sum(dim=dim, keepdim=True)


def softmax_global_max(x, dim=-1):
    e = torch.exp(x - x.max())
    return e / e.sum(dim=dim, keepdim=True)


def softmax_ignores_dim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def softmax_no_keepdim(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim)


def softmax_in_place(x, dim=-1):
    x -= x.amax(dim=dim, keepdim=True)
    x.exp_()
    return x.div_(x.sum(dim=dim, keepdim=True))


def softmax_calls_torch(x, dim=-1):
    return torch.softmax(x, dim=dim)


def softmax_method(x, dim=-1):
    return x.softmax(dim)


def softmax_imported(x, dim=-1):
    return imported_softmax(x, dim=dim)


def softmax_divide_by_sum(x, dim=-1):
    return x / x.sum(dim=dim, keepdim=True)


def softmax_inf_to_zero(x, dim=-1):
    x = torch.nan_to_num(x, neginf=0.0)
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def softmax_logsumexp(x, dim=-1):
    return torch.exp(x - torch.logsumexp(x, dim=dim, keepdim=True))


def softmax_max_values(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / torch.sum(e, dim=dim, keepdim=True)


def softmax_first_shift(x, dim=-1):  # right while a row's spread stays small (logits of order 1)
    e = torch.exp(x - x.narrow(dim, 0, 1))
    return e / e.sum(dim=dim, keepdim=True)


def softmax_always_float32(x, dim=-1):
    x = x.float()
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def softmax_in_float32_cast_back(x, dim=-1):  # Llama, Hugging Face: compute in float32, return the input's dtype
    e = torch.exp(x.float() - x.float().amax(dim=dim, keepdim=True))
    return (e / e.sum(dim=dim, keepdim=True)).to(x.dtype)


def softmax_max_detached(x, dim=-1):  # the shift cancels, so its gradient is not needed
    e = torch.exp(x - x.amax(dim=dim, keepdim=True).detach())
    return e / e.sum(dim=dim, keepdim=True)


def scores_always_float32(query, inputs):
    return inputs.float() @ query.float()


def scores_always_float64(query, inputs):  # a float64 result once crashed the "already normalized" test
    return inputs.double() @ query.double()


# context_vector --------------------------------------------------------------------------
def context_raw_scores(query, inputs):
    return (inputs @ query) @ inputs


def context_weights_query(query, inputs):
    weights = ref.softmax(inputs @ query)
    return (weights[:, None] * query).sum(dim=0)


def context_mean(query, inputs):
    return inputs.mean(dim=0)


def context_returns_weights(query, inputs):
    return ref.softmax(inputs @ query)


def context_calls_utils(query, inputs):
    return ref.context_vector(query, inputs)


def context_transposed_product(query, inputs):
    return inputs.T @ ref.softmax(inputs @ query)


def context_loop(query, inputs):
    weights = ref.softmax(inputs @ query)
    total = inputs.new_zeros(inputs.shape[-1])
    for w, x in zip(weights, inputs):
        total = total + w * x
    return total


def context_weights_no_grad(query, inputs):
    with torch.no_grad():  # the weights never train the scores
        weights = torch.softmax(inputs @ query, dim=-1)
    return weights @ inputs


def context_float32_softmax(query, inputs):
    weights = torch.softmax((inputs @ query).float(), dim=-1).to(inputs.dtype)
    return weights @ inputs


# self_attention_weights ------------------------------------------------------------------
def weights_softmax_dim0(inputs):
    return ref.softmax(inputs @ inputs.transpose(-2, -1), dim=0)


def weights_dot_T(inputs):
    return ref.softmax(inputs @ inputs.T, dim=-1)


def weights_transpose01(inputs):
    return ref.softmax(inputs @ inputs.transpose(0, 1), dim=-1)


def weights_gram_of_features(inputs):
    return ref.softmax(inputs.transpose(-2, -1) @ inputs, dim=-1)


def weights_no_softmax(inputs):
    return inputs @ inputs.transpose(-2, -1)


def weights_scaled(inputs):
    return ref.softmax(inputs @ inputs.transpose(-2, -1) / inputs.shape[-1] ** 0.5, dim=-1)


def weights_calls_utils(inputs):
    return ref.self_attention_weights(inputs)


def weights_einsum(inputs):
    return torch.softmax(torch.einsum("...id,...jd->...ij", inputs, inputs), dim=-1)


def weights_mT(inputs):
    return torch.softmax(inputs @ inputs.mT, dim=-1)


def weights_keys_detached(inputs):
    return torch.softmax(inputs @ inputs.detach().transpose(-2, -1), dim=-1)


def weights_float32_softmax(inputs):
    return torch.softmax((inputs @ inputs.transpose(-2, -1)).float(), dim=-1).to(inputs.dtype)


# self_attention --------------------------------------------------------------------------
def attention_transposed_weights(inputs):
    return ref.self_attention_weights(inputs).transpose(-2, -1) @ inputs


def attention_no_softmax(inputs):
    return (inputs @ inputs.transpose(-2, -1)) @ inputs


def attention_returns_weights(inputs):
    return ref.self_attention_weights(inputs)


def attention_sdpa(inputs):
    return F.scaled_dot_product_attention(inputs, inputs, inputs, scale=1.0)


def attention_flattens_batch(inputs):
    flat = inputs.reshape(-1, inputs.shape[-1])
    return (ref.self_attention_weights(flat) @ flat).reshape(inputs.shape)


def attention_calls_utils(inputs):
    return ref.self_attention(inputs)


def attention_einsum(inputs):
    weights = torch.softmax(torch.einsum("...id,...jd->...ij", inputs, inputs), dim=-1)
    return torch.einsum("...ij,...jd->...id", weights, inputs)


def attention_always_float32(inputs):
    inputs = inputs.float()
    return torch.softmax(inputs @ inputs.transpose(-2, -1), dim=-1) @ inputs


def attention_values_detached(inputs):
    return torch.softmax(inputs @ inputs.transpose(-2, -1), dim=-1) @ inputs.detach()


def attention_float32_softmax(inputs):
    weights = torch.softmax((inputs @ inputs.transpose(-2, -1)).float(), dim=-1).to(inputs.dtype)
    return weights @ inputs


def weights_one_shift_per_batch(inputs):  # one maximum for the whole batch: item 0 underflows when item 1 is large
    s = inputs @ inputs.transpose(-2, -1)
    e = torch.exp(s - s.amax())
    return e / e.sum(-1, keepdim=True)


WRONG = {
    "attention_scores": {
        "softmax applied already": (scores_softmaxed, "raw dot products"),
        "cosine similarity": (scores_cosine, "dot product of the query"),
        "sums over tokens": (scores_wrong_axis, "one score per input token"),
        "query @ inputs": (scores_query_first, "crashed"),
        "hard-coded book numbers": (scores_hard_coded, "5 tokens of width 7"),
        "calls utils": (lambda q, x: ref.attention_scores(q, x), "your own code"),
        "always float32": (scores_always_float32, "must follow its input's dtype (torch.float64)"),
        "always float64": (scores_always_float64, "must follow its input's dtype (torch.float32)"),
    },
    "softmax": {
        "no max subtracted": (softmax_naive, "subtract each slice's own maximum"),
        "global max": (softmax_global_max, "subtract each slice's own maximum"),
        "ignores dim": (softmax_ignores_dim, "ignores its dim argument"),
        "sum without keepdim": (softmax_no_keepdim, "crashed"),
        "modifies its input": (softmax_in_place, "in place"),
        "torch.softmax": (softmax_calls_torch, "softmax's rules say: not allowed"),
        "Tensor.softmax": (softmax_method, "softmax's rules say: not allowed"),
        "imported F.softmax under another name": (softmax_imported, "softmax's rules say: not allowed"),
        "divides by the sum": (softmax_divide_by_sum, "exp(score) divided by the sum"),
        "-inf turned into 0": (softmax_inf_to_zero, "-inf entries must get weight exactly 0"),
        "calls utils": (lambda x, dim=-1: ref.softmax(x, dim), "softmax's rules say: not allowed"),
        "functools.partial of utils": (functools.partial(ref.softmax), "softmax's rules say: not allowed"),
        "subtracts the first entry, not the max": (softmax_first_shift, "differs from the course's (on logits of order 300)"),
        "always float32": (softmax_always_float32, "must follow its input's dtype (torch.float64)"),
    },
    "context_vector": {
        "raw scores as weights": (context_raw_scores, "raw scores"),
        "weights the query": (context_weights_query, "softmax weights times the input rows"),
        "plain mean": (context_mean, "softmax weights times the input rows"),
        "returns the weights": (context_returns_weights, "inputs' width d"),
        "calls utils": (context_calls_utils, "your own code"),
        "weights under no_grad": (context_weights_no_grad, "No gradient reaches input 1 through context_vector"),
    },
    "self_attention_weights": {
        # each row is shifted by its own maximum / 每一行减去它自己的最大值
        "one shift for the whole batch": (weights_one_shift_per_batch, "batch items of very different scales"),
        "softmax over queries": (weights_softmax_dim0, "must sum to 1"),
        ".T on a batch": (weights_dot_T, None),
        "transpose(0, 1)": (weights_transpose01, None),
        "X^T X": (weights_gram_of_features, "X @ X^T, not X^T @ X"),
        "no softmax": (weights_no_softmax, "must sum to 1"),
        "scaled by sqrt(d)": (weights_scaled, "book's weights"),
        "calls utils": (weights_calls_utils, "your own code"),
        "keys detached": (weights_keys_detached, "The gradient of input 1 through self_attention_weights differs"),
    },
    "self_attention": {
        "transposed weights": (attention_transposed_weights, "transposed weights"),
        "no softmax": (attention_no_softmax, "book's context vector"),
        "returns the weights": (attention_returns_weights, "(T, d)"),
        "F.scaled_dot_product_attention": (attention_sdpa, "your own code"),
        "flattens the batch": (attention_flattens_batch, "Batched"),
        "calls utils": (attention_calls_utils, "your own code"),
        "functools.partial of utils": (functools.partial(ref.self_attention), "your own code"),
        "always float32": (attention_always_float32, "must follow its input's dtype (torch.float64)"),
        "values detached": (attention_values_detached, "The gradient of input 1 through self_attention differs"),
    },
}

RIGHT = {
    "attention_scores": {"loop": scores_loop, "einsum": scores_einsum, "broadcast": scores_broadcast},
    "softmax": {"logsumexp": softmax_logsumexp, "max().values": softmax_max_values,
                "float32 then cast back": softmax_in_float32_cast_back, "max detached": softmax_max_detached},
    "context_vector": {"inputs.T @ weights": context_transposed_product, "loop": context_loop,
                       "softmax in float32, cast back": context_float32_softmax},
    "self_attention_weights": {"einsum": weights_einsum, ".mT": weights_mT,
                               "softmax in float32, cast back": weights_float32_softmax},
    "self_attention": {"einsum": attention_einsum, "softmax in float32, cast back": attention_float32_softmax},
}

from autograder.tests.zoo import nb01_spaces  # noqa: E402

for _exercise, _entries in nb01_spaces.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb01_spaces.RIGHT.items():
    RIGHT[_exercise].update(_entries)
