"""Inputs of notebook 16's exercises (linear attention and the delta rule), in transformers' layout
(B, T, H, d): the builders of the pinned probes, and of one point of each declared input space
(nb16/contract.py declares the spaces; space.py casts the point's dtype and lays its tensors out).

Value regimes: keys of norm about 1 (the layer's L2 normalisation gives them; unnormalised keys of
norm d_k make the delta rule's state grow without bound), gates in the ordinary range (g in
[-1, 0], beta in [0, 1]), and the extremes: g from -60 to -30 (the state forgotten; within a chunk
e^γ underflows to 0 and e^(γ_j - γ_t) for j > t overflows), beta 0 (no write) and 1 (a full
overwrite), alternating over tokens and heads."""
import torch

from autograder.checks import generator, randn


def rand(*shape, seed):
    return torch.rand(*shape, generator=generator(seed))


def head_split(x):
    """The same values, not contiguous: (B, T, H, d) stored as (B, H, T, d), as a head split gives it."""
    return x.transpose(1, 2).contiguous().transpose(1, 2)


def zero_one(*shape):
    """0 and 1 alternating along the last two dims (tokens and heads, or batch items and heads)."""
    index = torch.arange(shape[-2])[:, None] + torch.arange(shape[-1])[None, :]
    return (index % 2).float().expand(*shape).clone()


def gates(values: str, *shape, seed):
    """(g, beta) of `shape` for a value regime: "g from -60 to -30, beta 0 and 1", "g = 0, beta = 1", else ordinary."""
    if values == "g from -60 to -30, beta 0 and 1":
        return -60.0 + 30.0 * rand(*shape, seed=seed), zero_one(*shape)
    if values == "g = 0, beta = 1":  # nothing forgotten, every write a full overwrite
        return torch.zeros(shape), torch.ones(shape)
    return -rand(*shape, seed=seed), rand(*shape, seed=seed + 1)


# Linear attention -----------------------------------------------------------------------------
def qkv(seed, B=2, T=6, H=2, d_k=4, d_v=3, scale=1.0, dtype=torch.float32, strided=False):
    q, k, v = randn(B, T, H, d_k, seed=seed) * scale, randn(B, T, H, d_k, seed=seed + 1), randn(B, T, H, d_v, seed=seed + 2)
    out = tuple(t.to(dtype) for t in (q, k, v))
    return (tuple(map(head_split, out)) if strided else out), {}


def linear_point(p, seed):
    B, T, H, d_k, d_v = p["shape"]
    q, k, v = randn(B, T, H, d_k, seed=seed), randn(B, T, H, d_k, seed=seed + 1), randn(B, T, H, d_v, seed=seed + 2)
    if p["values"] == "queries of order 30":
        q = q * 30.0
    elif p["values"] == "all positive":  # every score positive: the sums only grow along the sequence
        q, k, v = q.abs(), k.abs(), v.abs()
    return (q, k, v), {}


# One gated delta step -------------------------------------------------------------------------
def step(seed, B=2, H=3, d_k=4, d_v=3, g=(-1.0, 0.0), beta=None, dtype=torch.float32, strided=False):
    state = randn(B, H, d_k, d_v, seed=seed) * 0.5
    q, k, v = randn(B, H, d_k, seed=seed + 1) * 0.5, randn(B, H, d_k, seed=seed + 2) * 0.5, randn(B, H, d_v, seed=seed + 3)
    gate = g[0] + (g[1] - g[0]) * rand(B, H, seed=seed + 4)
    b = rand(B, H, seed=seed + 5) if beta is None else torch.tensor(beta).repeat(B, H // len(beta) + 1)[:, :H]
    args = [t.to(dtype) for t in (state, q, k, v, gate, b)]
    if strided:
        args = [t.T.contiguous().T if t.dim() == 2 else t.transpose(0, 1).contiguous().transpose(0, 1) for t in args]
    return tuple(args), {}


def step_point(p, seed):
    B, H, d_k, d_v = p["shape"]
    state = randn(B, H, d_k, d_v, seed=seed) * 0.5
    k = randn(B, H, d_k, seed=seed + 2)
    k = k / k.norm(dim=-1, keepdim=True)  # norm 1: with beta = 1 the key then returns exactly v
    g, beta = gates(p["values"], B, H, seed=seed + 4)
    return (state, randn(B, H, d_k, seed=seed + 1), k, randn(B, H, d_v, seed=seed + 3), g, beta), {}


# The gated delta rule over a sequence ---------------------------------------------------------
def rule(seed, B=2, T=7, H_k=2, H_v=2, d_k=4, d_v=3, initial=True, final=True, l2=False, g=(-1.0, 0.0), beta=None,
         dtype=torch.float32, strided=False, chunk=None):
    """Arguments of recurrent_gated_delta_rule (and, with chunk, chunk_gated_delta_rule)."""
    q, k = randn(B, T, H_k, d_k, seed=seed), randn(B, T, H_k, d_k, seed=seed + 1)
    v = randn(B, T, H_v, d_v, seed=seed + 2)
    if not l2:  # keys of norm about 1, as the layer's L2 normalisation gives: the state stays of order 1
        q, k = q * d_k ** -0.5, k * d_k ** -0.5
    gate = g[0] + (g[1] - g[0]) * rand(B, T, H_v, seed=seed + 3)
    b = rand(B, T, H_v, seed=seed + 4) if beta is None else zero_one(B, T, H_v)
    args = [t.to(dtype) for t in (q, k, v, gate, b)]
    if strided:
        args = [head_split(t) if t.dim() == 4 else t.transpose(0, 1).contiguous().transpose(0, 1) for t in args]
    kwargs = {"output_final_state": final, "use_qk_l2norm": l2}
    if initial:
        kwargs["initial_state"] = (randn(B, H_v, d_k, d_v, seed=seed + 5) * 0.5).to(dtype)
    if chunk is not None:
        kwargs["chunk_size"] = chunk
    return tuple(args), kwargs


BAD = "H_v not a multiple of H_k"


def rule_point(p, seed):
    """A point of the recurrent (and, with a "blocks" level, the chunked) rule's space."""
    B, T, H_k, H_v, d_k, d_v = p["shape"]
    if p["bad"] == BAD:
        H_k = max(H_k, 2)
        H_v = 2 * H_k - 1
    args, kwargs = rule(seed, B=B, T=T, H_k=H_k, H_v=H_v, d_k=d_k, d_v=d_v, initial=p["arguments:initial_state"] == "given",
                        final=p["flag:output_final_state"], l2=p["flag:use_qk_l2norm"])
    g, beta = gates(p["values"], B, T, H_v, seed=seed + 3)
    if p["values"] == "keys near zero":  # the L2 normalisation's eps decides: sqrt(sum x² + 1e-6), as the text says
        args = (args[0] * 1e-3, args[1] * 1e-3, *args[2:])
    if p.get("blocks", "default") != "default":
        kwargs["chunk_size"] = p["blocks"]
    return (*args[:3], g, beta), kwargs


# The bytes of a hybrid stack ------------------------------------------------------------------
def bytes_point(p, seed):
    sizes = p["shape"]
    per_element = {"defaults": {}, "bfloat16 state, float32 cache": {"state_bytes_per_element": 2, "cache_bytes_per_element": 4},
                   "one byte each": {"state_bytes_per_element": 1, "cache_bytes_per_element": 1}}[p["arguments:bytes_per_element"]]
    return sizes, per_element
