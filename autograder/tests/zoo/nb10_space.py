"""Solutions of notebook 10 for its declared contracts and input spaces (issues 35, 36), merged into
nb10's WRONG and RIGHT: sizes hard-coded to the old probes' (a group of 4 experts, a dim of 6, k of
2), the mean load over the busy experts only, a float32 dispatch buffer, layouts, and right
solutions in the styles the rules allow (float32 arithmetic cast back, the bias updated in place)."""
import torch
import torch.nn.functional as F
from torch import nn

from autograder.tests.zoo.nb10 import expert_class, gate_class, moe_class


# Expert ------------------------------------------------------------------------------------------
class ExpertDimSix(expert_class()):
    """Flattens its input to rows of 6, the dim of every expert the old probes built."""

    def forward(self, x):
        return super().forward(x.reshape(-1, 6)).reshape(x.shape)


class ExpertFlatView(expert_class()):
    """Flattens the leading dimensions with view: fails on an input stored column by column."""

    def forward(self, x):
        return super().forward(x.view(-1, x.shape[-1])).view(x.shape)


class ExpertFloat32CastBack(expert_class()):
    """Right: computes in float32 whatever the layer's dtype, and casts the result back to x's."""

    def forward(self, x):
        w1, w2, w3 = (getattr(self, n).weight.float() for n in ("w1", "w2", "w3"))
        h = x.float()
        return F.linear(F.silu(F.linear(h, w1)) * F.linear(h, w3), w2).to(x.dtype)


# topk_router -------------------------------------------------------------------------------------
def router_stable_sort(logits, k):
    """Right: a stable descending sort of the probabilities, the first k kept, weights renormalised in float32 and cast back."""
    probs = torch.softmax(logits.float(), -1)
    order = probs.sort(dim=-1, descending=True, stable=True).indices[:, :k]
    kept = probs.gather(1, order)
    return (kept / kept.sum(-1, keepdim=True)).to(logits.dtype), order


def router_k_capped(logits, k):
    """At most 8 experts a token (a table sized for the old probes): wrong for k past 8."""
    probs = torch.softmax(logits, -1)
    top, indices = probs.topk(min(k, 8), -1)
    return top / top.sum(-1, keepdim=True), indices


# load_balancing_loss -----------------------------------------------------------------------------
def lb_mean_over_experts(router_probs, expert_indices, num_experts):
    """P_i divided by the number of experts instead of the number of tokens: right only when N = E."""
    f = torch.bincount(expert_indices.flatten(), minlength=num_experts).to(router_probs.dtype) / expert_indices.numel()
    return num_experts * (f * router_probs.sum(0) / num_experts).sum()


def lb_chosen_probabilities(router_probs, expert_indices, num_experts):
    """P_i from the probabilities of the tokens that chose expert i only."""
    chosen = torch.zeros_like(router_probs).scatter(1, expert_indices, 1.0)
    f = chosen.sum(0) / expert_indices.numel()
    return num_experts * (f * (router_probs * chosen).mean(0)).sum()


# Gate --------------------------------------------------------------------------------------------
class GateGroupOfFour(gate_class()):
    """n_routed_experts // 4 groups, as if every group held 4 experts (every grouped gate of the old probes did)."""

    def forward(self, x):
        groups, self.groups = self.groups, (self.weight.shape[0] // 4 if self.groups > 1 else 1)
        try:
            return super().forward(x)
        finally:
            self.groups = groups


class GateFloat32(gate_class()):
    """Right: the scores in float32 (as DeepSeek-V3's softmax(dtype=float32)), the weights cast back to x's dtype."""

    def forward(self, x):
        return _float32_gate(self, x)


def _float32_gate(gate, x):
    logits = F.linear(x.float(), gate.weight.float())
    scores = torch.softmax(logits, -1) if gate.func == "softmax" else torch.sigmoid(logits)
    choice = scores + gate.bias.float()
    if gate.groups > 1:
        grouped = choice.view(x.shape[0], gate.groups, -1)
        group_scores = grouped.amax(-1) if gate.func == "softmax" else grouped.topk(2, -1).values.sum(-1)
        kept = group_scores.topk(gate.limited, -1).indices
        allowed = torch.zeros_like(group_scores, dtype=torch.bool).scatter(1, kept, True)
        choice = grouped.masked_fill(~allowed.unsqueeze(-1), float("-inf")).flatten(1)
    indices = choice.topk(gate.k, -1).indices
    weights = scores.gather(1, indices)
    if gate.func == "sigmoid":
        weights = weights / weights.sum(-1, keepdim=True)
    return (weights * gate.scale).to(x.dtype), indices


# update_expert_bias ------------------------------------------------------------------------------
def bias_mean_of_busy(bias, tokens_per_expert, gamma=0.001):
    """The mean load over the experts that received tokens, not over all experts."""
    load = tokens_per_expert.to(bias.dtype)
    busy = load[load > 0]
    return bias - gamma * torch.sign(load - busy.mean())


def bias_float64_in_place(bias, tokens_per_expert, gamma=0.001):
    """Right: the step computed in float64, written into the caller's bias (the contract allows it), which is returned."""
    load = tokens_per_expert.double()
    step = gamma * torch.sign(load - load.mean())
    with torch.no_grad():
        bias.sub_(step.to(bias.dtype))
    return bias


# MoE ---------------------------------------------------------------------------------------------
class MoEFloat32Buffer(moe_class(style="index_add")):
    """The dispatch accumulates into torch.zeros(N, dim), float32 whatever the layer's dtype."""

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, indices = self.gate(x)
        y = torch.zeros(x.shape[0], x.shape[1], device=x.device)
        for e, expert in enumerate(self.experts):
            rows, slot = torch.where(indices == e)
            if len(rows):
                y.index_add_(0, rows, expert(x[rows]) * weights[rows, slot, None])
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        return y.view(shape)


class MoETwoSlots(moe_class(style="index_add")):
    """The token of assignment a taken as a // 2: right only for k = 2, the k of the old probes."""

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        weights, indices = self.gate(x)
        order = indices.flatten().argsort()
        counts = torch.bincount(indices.flatten(), minlength=len(self.experts)).tolist()
        rows, w = order // 2, weights.flatten()[order].unsqueeze(-1)
        y, start = torch.zeros_like(x), 0
        for e, count in enumerate(counts):
            if count:
                mine = rows[start:start + count]
                y.index_add_(0, mine, self.experts[e](x[mine]) * w[start:start + count])
            start += count
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        return y.view(shape)


WRONG = {
    "Expert": {
        "rows of 6 written in": (ExpertDimSix, "crashed"),
        "leading dimensions flattened with view": (ExpertFlatView, "crashed"),
    },
    "topk_router": {"at most 8 experts a token": (router_k_capped, "130 experts")},
    "load_balancing_loss": {
        "P divided by E instead of N": (lb_mean_over_experts, "load_balancing_loss is wrong"),
        "P from the choosing tokens only": (lb_chosen_probabilities, "load_balancing_loss is wrong"),
    },
    "Gate": {"groups of 4 experts written in": (GateGroupOfFour, "differs from the course's")},
    "update_expert_bias": {"the mean over the busy experts": (bias_mean_of_busy, "empty experts")},
    "MoE": {
        "a float32 dispatch buffer": (MoEFloat32Buffer, "crashed"),
        "the token of an assignment as a // 2": (MoETwoSlots, "MoE.forward crashed"),
    },
}

RIGHT = {
    "Expert": {"float32 arithmetic, cast back": ExpertFloat32CastBack},
    "topk_router": {"a stable sort in float32, cast back": router_stable_sort},
    "Gate": {"scores in float32, weights cast back": GateFloat32},
    "update_expert_bias": {"float64 step, in place": bias_float64_in_place},
}
