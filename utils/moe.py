"""Mixture of experts as in DeepSeek-V3 (notebook 10; notebook 12 builds on it).

A dense feed-forward layer uses all its parameters for every token. A mixture of experts holds
many small feed-forward networks (experts) and a router that sends each token to k of them, so
the parameters held grow with the number of experts while those used per token stay at k.

- `Expert`: SwiGLU, w2(silu(w1 x) * w3 x), names as in DeepSeek-V3's inference code.
- `topk_router`, `load_balancing_loss`: the classic softmax top-k router and the Switch
  Transformer's auxiliary loss E * sum_i f_i P_i that keeps it from collapsing onto few experts.
- `Gate`: DeepSeek-V3's router. Sigmoid affinities; a bias that only CHOOSES experts (it never
  enters the weights); group-limited routing (keep the n_limited_groups groups whose top-2
  biased scores sum highest, for softmax the max); the chosen affinities renormalised to sum 1
  (sigmoid) and multiplied by route_scale.
- `update_expert_bias`: auxiliary-loss-free balancing, the bias moves by gamma against the load.
- `MoE`: gate + routed experts + shared experts, dispatched without a Python loop over tokens.
- `moe_parameter_counts`: total and active parameters of one MoE layer.

Parameter names and shapes follow DeepSeek-V3's `inference/model.py` (`gate.weight`, `gate.bias`,
`experts.{i}.w1/w2/w3`, `shared_experts.w1/w2/w3`), so its state_dict loads unchanged. Its code
creates `gate.bias` only for the 671B config (dim 7168); ours always has one, zeros by default,
which chooses exactly as no bias does. Its group score follows the bias too (the max without one,
the top-2 sum with one); ours follows `score_func`, which agrees for the 671B gate (sigmoid, biased).

`python -m utils.moe` times the per-token loop against the vectorised dispatch (2048 tokens,
64 experts, 6 active). Tests: `.venv/bin/pytest utils/tests/test_moe.py`.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from utils.benchmark import device_of, expect_same, timed
from utils.mla import one_thread


class Expert(nn.Module):
    """SwiGLU feed-forward: w1 is the gate, w3 the up projection, w2 the down projection."""

    def __init__(self, dim: int, inter_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, inter_dim, bias=False)
        self.w2 = nn.Linear(inter_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, inter_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., dim) -> (..., dim)
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def topk_router(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(N, E) logits -> weights (N, k) summing to 1 and expert indices (N, k)."""
    probs = torch.softmax(logits, dim=-1)  # softmax over ALL experts first
    top, indices = probs.topk(k, dim=-1)
    return top / top.sum(dim=-1, keepdim=True), indices


def load_balancing_loss(router_probs: torch.Tensor, expert_indices: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Switch Transformer: E * sum_i f_i * P_i; 1.0 when perfectly balanced.

    f_i: share of the N*k assignments that went to expert i (counted, no gradient);
    P_i: mean router probability of expert i (differentiable, so the loss pushes P towards 1/E).
    """
    counts = torch.bincount(expert_indices.flatten(), minlength=num_experts).to(router_probs.dtype)
    f = counts / expert_indices.numel()
    P = router_probs.mean(dim=0)
    return num_experts * (f * P).sum()


class Gate(nn.Module):
    """DeepSeek-V3's router: (N, dim) -> routing weights (N, k) and expert indices (N, k)."""

    def __init__(self, dim, n_routed_experts, n_activated_experts, n_expert_groups=1, n_limited_groups=1,
                 score_func="sigmoid", route_scale=1.0):
        super().__init__()
        if score_func not in ("sigmoid", "softmax"):
            raise ValueError(f"score_func must be 'sigmoid' or 'softmax', got {score_func!r}")
        if n_routed_experts % n_expert_groups:
            raise ValueError(f"n_routed_experts={n_routed_experts} is not divisible by n_expert_groups={n_expert_groups}")
        self.topk, self.n_groups, self.topk_groups = n_activated_experts, n_expert_groups, n_limited_groups
        self.score_func, self.route_scale = score_func, route_scale
        self.weight = nn.Parameter(torch.empty(n_routed_experts, dim))
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))  # nn.Linear's default
        # Only chooses experts; moved by update_expert_bias, not by gradients.
        self.bias = nn.Parameter(torch.zeros(n_routed_experts), requires_grad=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = x @ self.weight.T  # (N, E)
        if self.score_func == "softmax":
            scores = logits.softmax(dim=-1, dtype=torch.float32)
        else:
            scores = logits.sigmoid()
        affinity = scores  # what the weights are made of
        scores = scores + self.bias  # what the choice is made of
        if self.n_groups > 1:
            N = x.shape[0]
            grouped = scores.view(N, self.n_groups, -1)  # (N, G, E/G)
            if self.score_func == "softmax":
                group_scores = grouped.amax(dim=-1)
            else:
                group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)  # (N, G)
            keep = group_scores.topk(self.topk_groups, dim=-1).indices
            dropped = torch.ones_like(group_scores, dtype=torch.bool).scatter(1, keep, False)
            scores = grouped.masked_fill(dropped.unsqueeze(-1), float("-inf")).flatten(1)
        indices = scores.topk(self.topk, dim=-1).indices  # (N, k)
        weights = affinity.gather(1, indices)
        if self.score_func == "sigmoid":
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return (weights * self.route_scale).type_as(x), indices


def update_expert_bias(bias: torch.Tensor, tokens_per_expert: torch.Tensor, gamma: float = 0.001) -> torch.Tensor:
    """Auxiliary-loss-free balancing: overloaded experts lose gamma, underloaded ones gain it."""
    load = tokens_per_expert.to(bias.dtype)
    return bias - gamma * torch.sign(load - load.mean())


class MoE(nn.Module):
    """Routed experts (k of n_routed_experts per token) plus always-on shared experts."""

    def __init__(self, dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts=0,
                 n_expert_groups=1, n_limited_groups=1, score_func="sigmoid", route_scale=1.0):
        super().__init__()
        self.dim, self.n_routed_experts = dim, n_routed_experts
        self.gate = Gate(dim, n_routed_experts, n_activated_experts, n_expert_groups, n_limited_groups,
                         score_func, route_scale)
        self.experts = nn.ModuleList(Expert(dim, moe_inter_dim) for _ in range(n_routed_experts))
        self.shared_experts = Expert(dim, n_shared_experts * moe_inter_dim) if n_shared_experts > 0 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., dim) -> (..., dim)
        shape = x.shape
        x = x.reshape(-1, self.dim)  # (N, dim)
        weights, indices = self.gate(x)  # (N, k), (N, k)
        y = dispatch(x, weights, indices, self.experts)
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        return y.view(shape)


def dispatch(x, weights, indices, experts) -> torch.Tensor:
    """Sort the N*k (token, expert) pairs by expert; each expert runs once on its tokens."""
    k = indices.shape[1]
    flat = indices.flatten()  # (N*k,) assignment a = token a // k, slot a % k
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=len(experts)).tolist()
    token = order // k
    w = weights.flatten()[order].unsqueeze(-1)  # (N*k, 1)
    y = torch.zeros_like(x)
    start = 0
    for e, count in enumerate(counts):  # a loop over experts, never over tokens
        if count:
            rows = token[start:start + count]
            y.index_add_(0, rows, experts[e](x[rows]) * w[start:start + count])
        start += count
    return y


def moe_forward_per_token(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """The slow way, for comparison only: every token visits its k experts one at a time."""
    x = x.reshape(-1, x.shape[-1])
    weights, indices = moe.gate(x)
    y = torch.zeros_like(x)
    for t in range(x.shape[0]):
        for w, e in zip(weights[t], indices[t].tolist()):
            y[t] += w * moe.experts[e](x[t])
    if moe.shared_experts is not None:
        y = y + moe.shared_experts(x)
    return y


def moe_parameter_counts(dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts) -> tuple[int, int]:
    """(total, active per token) of one MoE layer: experts, shared experts, gate weight and bias.

    The gate scores every expert for every token, so all of it counts as active.
    """
    expert = 3 * dim * moe_inter_dim
    gate = n_routed_experts * dim + n_routed_experts
    total = (n_routed_experts + n_shared_experts) * expert + gate
    active = (n_activated_experts + n_shared_experts) * expert + gate
    return total, active


def dispatch_benchmark(tokens=2048, dim=64, moe_inter_dim=32, n_routed_experts=64, n_activated_experts=6,
                       repeats=3, seed=0, moe=None, device=None) -> dict:
    """Median seconds of the per-token loop and of the vectorised dispatch, same layer, same input.

    `moe`: any module with `gate`, `experts`, `shared_experts` and a forward (a learner's MoE),
    timed on its own device; by default this file's MoE with the sizes given and one shared
    expert, built on `device` (default: the default device).
    """
    torch.manual_seed(seed)
    device = device_of(moe if moe is not None else device)
    if moe is None:
        with torch.device(device):
            moe = MoE(dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts=1)
    moe = moe.eval()
    x = torch.randn(tokens, moe.gate.weight.shape[1], device=device)
    times = {"per-token loop": [], "vectorised": []}
    with torch.no_grad(), one_thread():
        expect_same(moe_forward_per_token(moe, x), moe(x), atol=1e-5, rtol=1e-4, what="per-token loop vs vectorised")
        for _ in range(repeats):  # interleaved rounds, so both see the same machine load
            for name, fn in (("per-token loop", lambda: moe_forward_per_token(moe, x)), ("vectorised", lambda: moe(x))):
                times[name].append(timed(fn, device)[0])
    median = {name: sorted(ts)[len(ts) // 2] for name, ts in times.items()}
    return {**median, "speedup": median["per-token loop"] / median["vectorised"]}


if __name__ == "__main__":
    r = dispatch_benchmark()
    print("MoE layer: 2048 tokens, dim 64, 64 experts of width 32, 6 active, 1 shared (same weights, same input, one thread)")
    print(f"  per-token loop  {r['per-token loop'] * 1e3:9.1f} ms")
    print(f"  vectorised      {r['vectorised'] * 1e3:9.1f} ms")
    print(f"  speedup         {r['speedup']:9.1f}x")
