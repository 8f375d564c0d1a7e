"""Notebook 10's input spaces (mixture of experts): the axes each contract allows, and the builders
that turn a point into inputs (space.py). Router logits keep their probabilities apart (distinct even
in bfloat16) except where a tie is the point, and never tie at the k-th place (a precondition)."""
import torch

from autograder.checks import randn
from autograder.checks.core.harness import Steps
from autograder.checks.core.space import Space

_LAYOUTS = ("contiguous", "column-major", "strided", "mixed")
_ONE_INPUT = ("contiguous", "column-major", "strided")  # a layer's one input: "mixed" would be column-major again


def router_logits(seed, shift=None, unused=None, N=5, E=6):
    logits = randn(N, E, seed=seed) * 2
    if shift is not None:
        logits = logits + torch.tensor(shift)[:, None]
    if unused is not None:
        logits[:, unused] -= 20.0
    return logits


def spaced_logits(seed, N=4, E=6, gap=0.8):
    """Each row a permutation of logits `gap` apart: no two probabilities round to the same bfloat16 (a near-tie
    at the k-th place would let a right solution computed in float32 choose another expert than one in bfloat16)."""
    return randn(N, E, seed=seed).argsort(-1).float() * gap - 2.0


# Expert ----------------------------------------------------------------------------------------
_EXPERT_SHAPES = {"(2, 3, dim)": (2, 3), "(dim,): one token": (), "(5, dim)": (5,), "(2, 2, 3, dim)": (2, 2, 3)}
_EXPERT_LAYERS = {"dim 6, inter_dim 10": (6, 10), "dim 5, inter_dim 3 (narrower than dim)": (5, 3), "dim 8, inter_dim 16": (8, 16)}
_SCALES = {"normal": 1.0, "large (order 30)": 30.0}


def _expert(point, seed):
    dim, inter = _EXPERT_LAYERS[point["shape:layer"]]
    x = randn(*_EXPERT_SHAPES[point["shape"]], dim, seed=seed) * _SCALES[point["values"]]
    return Steps([("__call__", (x,), {})], ctor=(dim, inter))


# topk_router -----------------------------------------------------------------------------------
_ROUTER_SHAPES = {"5 tokens, 6 experts": (5, 6), "1 token, 4 experts": (1, 4), "7 tokens, 8 experts": (7, 8),
                  "3 tokens, 130 experts": (3, 130)}


def _router(point, seed):
    N, E = _ROUTER_SHAPES[point["shape"]]
    k = {"1": 1, "2": 2, "E (every expert)": E}[point["arguments:k"]]
    values = point["values"]
    if values == "hundreds (each token shifted by ±300)":  # 8 apart: bfloat16 (spacing 4 up to 1024) keeps them apart
        logits = spaced_logits(seed, N, E, gap=8.0) + 300.0 * torch.sign(randn(N, 1, seed=seed + 1))
    else:
        logits = spaced_logits(seed, N, E)
    if values == "ties inside and below the top k":
        ranked = logits.argsort(-1, descending=True)
        rows = torch.arange(N)
        if k >= 2:  # the two largest equal: both kept
            logits[rows, ranked[:, 1]] = logits[rows, ranked[:, 0]]
        if E - k >= 2:  # the (k+1)-th and (k+2)-th equal: both dropped
            logits[rows, ranked[:, k + 1]] = logits[rows, ranked[:, k]]
    if values == "an expert no token picks":
        logits[:, E // 2] -= 40.0
    return (logits, k), {}


# load_balancing_loss ---------------------------------------------------------------------------
_BALANCE_SHAPES = {"6 tokens, 4 experts, k 2": (6, 4, 2), "5 tokens, 6 experts, k 3": (5, 6, 3), "1 token, 4 experts, k 1": (1, 4, 1),
                   "8 tokens, 8 experts, k 2 (N = E)": (8, 8, 2), "12 tokens, 130 experts, k 4": (12, 130, 4)}
_LOADS = ("chosen with a bias (uneven)", "the last expert unused", "an expert in the middle unused", "balanced (cyclic)",
          "every token on the same k experts", "saturated probabilities")


def _balance(point, seed):
    N, E, k = _BALANCE_SHAPES[point["shape"]]
    loads = point["values"]
    probs = torch.softmax(randn(N, E, seed=seed) * (40.0 if loads == "saturated probabilities" else 2.0), -1)
    choice = probs + torch.linspace(0.0, 0.3, E)  # the choice made with a bias, as DeepSeek's
    if loads == "the last expert unused":
        choice[:, E - 1] = -1.0
    if loads == "an expert in the middle unused":
        choice[:, E // 2] = -1.0
    indices = choice.topk(k, -1).indices
    if loads == "balanced (cyclic)":
        indices = (torch.arange(N * k) % E).view(N, k)
    if loads == "every token on the same k experts":
        indices = torch.arange(k).expand(N, k).clone()
    return (probs, indices, E), {}


# Gate and MoE ----------------------------------------------------------------------------------
_GATES = {  # dim, n_routed_experts, n_activated_experts[, n_expert_groups, n_limited_groups, score_func, route_scale]
    "16 experts in 4 groups, keep 2, k 3, sigmoid, route_scale 2.5": (12, 16, 3, 4, 2, "sigmoid", 2.5),
    "8 experts, k 2, the defaults": (12, 8, 2),
    "12 experts in 2 groups, keep 1, k 2, softmax, route_scale 1.5": (12, 12, 2, 2, 1, "softmax", 1.5),  # 6 a group
    "15 experts in 5 groups, keep 2, k 4, sigmoid": (12, 15, 4, 5, 2, "sigmoid", 1.0),  # 3 a group
    "6 experts, k 1, softmax": (10, 6, 1, 1, 1, "softmax", 1.0),
}
_TOKENS = {"normal": 1.0, "large (order 5)": 5.0, "zero tokens (equal affinities: the bias alone chooses)": 0.0}


def _gate(point, seed):
    ctor = _GATES[point["arguments:config"]]
    x = randn(point["shape"], ctor[0], seed=seed) * _TOKENS[point["values"]]
    return Steps([("__call__", (x,), {})], ctor=ctor)


_MOES = {  # dim, moe_inter_dim, n_routed_experts, n_activated_experts[, n_shared_experts, groups, limited, score_func, route_scale]
    "8 experts in 4 groups, keep 2, k 2, 2 shared, route_scale 2": (12, 6, 8, 2, 2, 4, 2, "sigmoid", 2.0),
    "6 experts, k 2, no shared (the defaults)": (10, 4, 6, 2),
    "12 experts in 3 groups, keep 1, k 3, softmax, 1 shared": (12, 5, 12, 3, 1, 3, 1, "softmax", 1.0),
    "4 experts, k 1, 1 shared": (8, 7, 4, 1, 1),
}
_MOE_SHAPES = {"(2, 5, dim)": (2, 5), "(dim,): one token": (), "(2, 2, 3, dim)": (2, 2, 3)}


def _moe(point, seed):
    ctor = _MOES[point["arguments:config"]]
    lead, dim = _MOE_SHAPES[point["shape"]], ctor[0]
    if point["values"] == "tokens alike (the same experts crowded)":
        x = randn(dim, seed=seed) * 2 + 0.01 * randn(*lead, dim, seed=seed + 1)
    else:
        x = randn(*lead, dim, seed=seed)
    return Steps([("__call__", (x,), {})], ctor=ctor)


# update_expert_bias ----------------------------------------------------------------------------
def _loads(kind, E, seed):
    """Loads that tell the mean over all experts apart from the other means a mistake might take."""
    if kind == "uneven":
        return (randn(E, seed=seed).abs() * 10).round()
    loads = torch.full((E,), 10.0)
    if kind == "two at the mean":  # mean 10: experts 1 and 2 stay
        loads[0], loads[-1] = 14.0, 6.0
    elif kind == "empty experts (the mean over all, not over the busy ones)":  # expert 1 above the mean over all, below the busy ones'
        loads = torch.zeros(E)
        loads[0], loads[1] = 4.0 * E, 5.0
    elif kind == "a fractional mean (not the integer one)":  # mean 11 + 2/E: expert 1 at 11 is below it
        loads[0], loads[1] = 10.0 + E + 1, 11.0
    return loads


def _bias(point, seed):
    E = point["shape"]
    loads = _loads(point["values"], E, seed)
    loads = loads.long() if point["arguments:tokens_per_expert"] == "int64 counts" else loads
    gamma = point["arguments:gamma"]
    return (randn(E, seed=seed + 1) * 0.3, loads) + (() if gamma is None else (gamma,)), {}


def spaces(contracts) -> dict:
    """The spaces of notebook 10's exercises; their "dtype" axes are the contracts' dtypes. The layers'
    oracles (every point) use one seed: two made them too slow for `python -m autograder mutants`."""
    dtypes = {name: c.dtypes for name, c in contracts.items()}
    return {
        "Expert": Space({"shape": tuple(_EXPERT_SHAPES), "shape:layer": tuple(_EXPERT_LAYERS), "values": tuple(_SCALES),
                         "dtype": dtypes["Expert"], "layout": _ONE_INPUT}, _expert, seeds=(0,)),
        "topk_router": Space({"shape": tuple(_ROUTER_SHAPES), "arguments:k": ("1", "2", "E (every expert)"),
                              "values": ("spaced", "hundreds (each token shifted by ±300)", "ties inside and below the top k",
                                         "an expert no token picks"),
                              "dtype": dtypes["topk_router"], "layout": _ONE_INPUT}, _router,
                             valid=lambda p: not (p["arguments:k"] == "E (every expert)" and p["values"] == "an expert no token picks"),
                             no_grads=lambda p: p["values"].startswith("hundreds")),
        "load_balancing_loss": Space({"shape": tuple(_BALANCE_SHAPES), "values": _LOADS, "dtype": dtypes["load_balancing_loss"],
                                      "layout": _LAYOUTS}, _balance),
        "Gate": Space({"arguments:config": tuple(_GATES), "shape": (1, 24), "values": tuple(_TOKENS), "dtype": dtypes["Gate"],
                       "layout": _ONE_INPUT}, _gate, seeds=(0,)),
        "update_expert_bias": Space({"shape": (3, 8, 33), "values": ("uneven", "two at the mean", "empty experts (the mean over all, not over the busy ones)",
                                                                     "a fractional mean (not the integer one)"),
                                     "arguments:tokens_per_expert": ("int64 counts", "float counts"), "arguments:gamma": (None, 0.05),
                                     "dtype": dtypes["update_expert_bias"]}, _bias),
        "MoE": Space({"arguments:config": tuple(_MOES), "shape": tuple(_MOE_SHAPES),
                      "values": ("normal", "tokens alike (the same experts crowded)"), "dtype": dtypes["MoE"],
                      "layout": ("contiguous", "column-major")}, _moe, seeds=(0,)),
        "moe_parameter_counts": Space({"shape": ((7168, 2048, 256, 8, 1), (12, 5, 8, 2, 0), (10, 3, 6, 1, 3), (5120, 1536, 160, 6, 2),
                                                 (1, 1, 1, 1, 0), (64, 32, 64, 6, 1))}, lambda p, seed: (p["shape"], {})),
    }
