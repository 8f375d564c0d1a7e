"""The builders of notebook 12's input spaces (nb12/contract.py), one point at a time: shapes,
value regimes and call sequences (a prefill, then the rest at start_pos)."""
import torch

from autograder.checks import generator, randn
from autograder.checks.nb12.capstone_parts import CFG, inputs, mtp_probe
from autograder.checks.core.harness import Steps

NORMS = {"dim 6, x (2, 3, 6)": (6, (2, 3, 6)), "dim 6, x (4, 6)": (6, (4, 6)), "dim 1, x (3, 1)": (1, (3, 1)),
         "dim 40, x (2, 2, 40)": (40, (2, 2, 40))}
SEQUENCES = {"B2, T6": (2, 6), "B1, T1": (1, 1), "B3, T4": (3, 4)}
MODULE_SEQUENCES = {"B2, T6": (2, 6), "B3, T4": (3, 4)}
TOKENS = {"B2, T8": (2, 8), "B3, T5": (3, 5)}
LOSSES = {"B3, T6, V7": (3, 6, 7), "B2, T2, V5": (2, 2, 5), "B1, T9, V3": (1, 9, 3), "B2, T5, V40": (2, 5, 40)}
CHAINS = {"B2, T6, D2": (2, 6, 2), "B1, T4, D3 (one position at depth 3)": (1, 4, 3)}
DEPTHS = {"B2, T9, V7, D3": (2, 9, 7, 3), "B2, T8, V6, D2": (2, 8, 6, 2), "B2, T3, V5, D1": (2, 3, 5, 1),
          "B1, T6, V40, D2": (1, 6, 40, 2)}


def tokens(B, T, V, seed):
    return torch.randint(0, V, (B, T), generator=generator(seed))


# RMSNorm -------------------------------------------------------------------------------------
def norm_point(point, seed):
    """x of a value regime; the norm built with the point's dim and eps."""
    dim, shape = NORMS[point["shape"]]
    x = randn(*shape, seed=seed)
    kind = point["values"]
    if kind == "near eps":  # mean of squares about 1e-6: an eps of 1e-5 in place of 1e-6 shows
        x = x * 1e-3
    elif kind == "large":  # squares up to ~1e6: past float16's largest number, 65504
        x = x * 250.0
    else:  # a mean far from 0: LayerNorm differs
        x = x * 0.4 + 0.3
        if kind == "a zero row":
            x.view(-1, dim)[0] = 0.0
    eps = point["arguments:eps"]
    return Steps([("__call__", (x,), {})], ctor=(dim,), ctor_kwargs={} if eps is None else {"eps": eps})


# Block, MiniDeepSeek, MTPModule: one call, or a prefill and the rest at start_pos -----------------
def prefill_fits(point) -> bool:
    T = SEQUENCES[point["shape"]][1]
    return point["sequence"] == "one call" or T > 1


def _calls(parts, T, extra, absorb=None):
    """[("__call__", args, kwargs)]: the whole sequence at once, or its first T - 2 positions then
    the rest at start_pos = T - 2; `parts(a, b)` gives the inputs of positions a..b. absorb, when
    given, goes by position to a prefill and by keyword otherwise (default: left out)."""
    kw = {"absorb": True} if absorb else {}
    if extra == "one call":
        return [("__call__", parts(0, T), kw)]
    k = max(1, T - 2)
    first = (*parts(0, k), 0) + ((bool(absorb),) if absorb is not None else ())
    return [("__call__", first, {}), ("__call__", (*parts(k, T), k), kw)]


def block_point(point, seed):
    B, T = SEQUENCES[point["shape"]]
    x = inputs(B, T, seed) if point["values"] == "mean far from 0" else randn(B, T, CFG.dim, seed=seed) * 3
    calls = _calls(lambda a, b: (x[:, a:b].clone(),), T, point["sequence"], point["flag:absorb"])
    return Steps(calls, ctor=(CFG, point["arguments:layer_id"]))


def model_point(point, seed):
    B, T = TOKENS[point["shape"]]
    t = tokens(B, T, CFG.vocab_size, seed)
    return Steps(_calls(lambda a, b: (t,), T, "one call", point["flag:absorb"]))


def mtp_module_point(point, seed):
    B, T = MODULE_SEQUENCES[point["shape"]]
    h, e = inputs(B, T, seed) * 0.3, randn(B, T, CFG.dim, seed=seed + 1) * 3  # other sizes: a missing norm shows
    return Steps(_calls(lambda a, b: (h[:, a:b].clone(), e[:, a:b].clone()), T, point["sequence"]))


# the losses and the chain ---------------------------------------------------------------------
def _logits(kind, shape, seed):
    x = randn(*shape, seed=seed)
    return {"normal": x * 2, "order 300": x * 300, "ties": torch.zeros(shape)}[kind]


def loss_point(point, seed):
    B, T, V = LOSSES[point["shape"]]
    t = tokens(B, T, V, seed)
    if point["values"] == "sure":  # -1e4 everywhere but at each position's next token
        logits = torch.full((B, T, V), -1e4)
        logits[:, :-1].scatter_(-1, t[:, 1:, None], 0.0)
        return (logits, t), {}
    return (_logits(point["values"], (B, T, V), seed), t), {}


def chain_point(point, seed):
    """(tokens, model, mtp_modules) and every weight by name (capstone_parts.with_weights), the
    modules in eval() (the hand-written check's call is in train(): mtp_forward leaves either)."""
    B, T, D = CHAINS[point["shape"]]
    return mtp_probe(B, T, D, seed)


def depths_point(point, seed):
    """mtp_loss's inputs as separate arguments (capstone_parts.listed): depth k's logits
    (B, T - k, V) for k = 1..D, then the tokens."""
    B, T, V, D = DEPTHS[point["shape"]]
    logits = [_logits(point["values"], (B, T - k, V), seed + k) for k in range(1, D + 1)]
    lam = point["arguments:lam"]
    return (*logits, tokens(B, T, V, seed)), ({} if lam is None else {"lam": lam})
