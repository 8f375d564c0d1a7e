"""What notebook 10's checks compare with: the gate, update_expert_bias and moe_parameter_counts
restated with one known mistake at a time, the MoE's dropped assignments, the arithmetic a sparse
layer may do, and the course's Gate and Expert put in place of the learner's while their MoE is graded.

The MoE is graded by what it computes, not by which modules it calls: a layer that runs every
expert on every token through stacked weights, or loops over tokens calling w1/w2/w3 directly,
never triggers an Expert's hooks. `MatmulCost` counts every matrix product however it is reached.
"""

import torch
from torch import nn

import utils.moe as ref
from autograder.checks import course_versions, seeded_state
from autograder.checks.core.cost import MatmulCost


def canonical(weights, indices):
    """Sort each token's (index, weight) pairs by expert index: the order of a token's k is free."""
    order = indices.argsort(dim=-1)
    return weights.gather(1, order), indices.gather(1, order)


ROUTER_GRAD = ("The routing weights must carry the gradient back to the router's scores (no .detach(), .item() or torch.no_grad() on their way): the router learns through them.",
               "路由权重必须把梯度传回路由器的打分（途中不要用 .detach()、.item() 或 torch.no_grad()）：路由器正是通过它们学习的。")


def routing_grad(weights, indices, leaf, probe):
    """The gradient of sum(probe * weights) (each token's pairs in expert order) w.r.t. `leaf`, or None."""
    if not (isinstance(weights, torch.Tensor) and weights.requires_grad):
        return None
    w, _ = canonical(weights, indices)
    return torch.autograd.grad((w * probe).sum(), leaf, allow_unused=True)[0]


# Gate ------------------------------------------------------------------------------------------
def restated_gate(state, x, k, groups, limited, func, scale, mistake=None):
    """DeepSeek-V3's gate written out again, with `mistake` (a key of GATE_MISTAKES) made."""
    logits = x @ state["weight"].T
    scores = logits.sigmoid() if (func == "sigmoid") != (mistake == "softmax") else logits.softmax(-1)
    choice = scores if mistake == "bias ignored" else scores + state["bias"]
    if groups > 1 and mistake != "groups ignored":
        grouped = choice.view(x.shape[0], groups, -1)
        if mistake == "group max" or (func == "softmax" and mistake != "group top-2 sum"):
            group_scores = grouped.amax(-1)
        else:
            group_scores = grouped.topk(2, -1).values.sum(-1)
        kept = group_scores.topk(limited, -1).indices
        if mistake == "zero mask":  # multiplying by a 0/1 mask, as some ports of V3's code do
            keep = torch.zeros_like(group_scores).scatter(1, kept, 1.0)
            choice = (grouped * keep.unsqueeze(-1)).flatten(1)
        else:
            dropped = torch.ones_like(group_scores, dtype=torch.bool).scatter(1, kept, False)
            choice = grouped.masked_fill(dropped.unsqueeze(-1), float("-inf")).flatten(1)
    indices = choice.topk(k, -1).indices
    weights = (choice if mistake == "bias in weights" else scores).gather(1, indices)
    if (func == "sigmoid" and mistake != "no renormalisation") or mistake == "softmax renormalised":
        weights = weights / weights.sum(-1, keepdim=True)
    return canonical(weights * (1.0 if mistake == "no route_scale" else scale), indices)


GATE_MISTAKES = {
    "softmax": ("With score_func='sigmoid' the affinities are sigmoid(x W^T), each expert on its own, not a softmax over experts.",
                "当 score_func='sigmoid' 时，亲和度是 sigmoid(x W^T)，每个专家各自计算，而不是对专家做 softmax。"),
    "bias in weights": ("The bias only chooses experts: gather the weights from the scores WITHOUT the bias.",
                        "偏置只用于选择专家：权重要从不加偏置的分数中取。"),
    "no renormalisation": ("Sigmoid weights must be renormalised to sum 1 over the chosen experts before route_scale.",
                           "sigmoid 权重在乘 route_scale 之前，必须在被选中的专家上重新归一化使其和为 1。"),
    "softmax renormalised": ("With score_func='softmax' the weights are the chosen probabilities as they are: only sigmoid weights are renormalised.",
                             "当 score_func='softmax' 时，权重就是被选中专家的概率本身：只有 sigmoid 权重才重新归一化。"),
    "no route_scale": ("The weights must be multiplied by route_scale at the end, after renormalising (renormalising after the scale undoes it).",
                       "权重最后必须乘以 route_scale，并且在重新归一化之后（先乘再归一化会把它抵消）。"),
    "group max": ("With sigmoid scores a group's score is the sum of its top-2 biased expert scores, not the max.",
                  "对 sigmoid 分数，一个组的分数是组内最高两个带偏置分数之和，而不是最大值。"),
    "group top-2 sum": ("With score_func='softmax' a group's score is its highest expert score, not the sum of its top two: the course keys the rule to the score function, while DeepSeek-V3's code keys it to whether the gate has a bias, and every gate here has one.",
                        "当 score_func='softmax' 时，一个组的分数是组内最高的专家分数，而不是最高两个之和：本课程按分数函数决定规则，而 DeepSeek-V3 的代码按路由门控有没有偏置来决定，这里每个路由门控都有偏置。"),
    "groups ignored": ("Tokens were routed to groups that were not chosen: mask every expert outside the n_limited_groups best groups with -inf before the top-k (a mask of zeros is not enough, biased scores can be negative).",
                       "词元被路由到了未被选中的组：在 top-k 之前，用 -inf 屏蔽最好的 n_limited_groups 个组之外的所有专家（用 0 屏蔽不够，带偏置的分数可能为负）。"),
    "bias ignored": ("The bias must be added to the scores used to choose experts (scores + bias for the top-k).",
                     "选择专家所用的分数必须加上偏置（top-k 用 scores + bias）。"),
}
CHOICE_MISTAKES = ("softmax", "group max", "group top-2 sum", "groups ignored", "bias ignored")
# dim, E, k, groups, limited, score_func, route_scale, seed: each mistake above, and a
# group mask of zeros (biased scores below 0 in a kept group), changes the result of at least one
# of them (the zoo, autograder/tests/zoo/nb10.py, holds one of each).
GATE_CONFIGS = (
    (12, 16, 3, 4, 2, "sigmoid", 2.5, 130),
    (10, 8, 2, 1, 1, "sigmoid", 1.0, 131),
    (12, 12, 2, 3, 1, "softmax", 1.5, 132),
    (12, 16, 4, 4, 1, "sigmoid", 1.0, 133),
)


def gate_state(reference, seed, bias_scale=0.3):
    """Weights spread so that the bias and the groups matter, and a bias ramp that differs per config."""
    state = seeded_state(reference, seed)
    state["weight"] = state["weight"] * 2.0
    E = state["bias"].numel()
    state["bias"] = bias_scale * torch.linspace(-1.0, 1.0, E).roll(seed % E)
    return state


# MoE -------------------------------------------------------------------------------------------
DROPS = ("Your MoE drops or overwrites tokens: each token must get all its k expert outputs, however crowded an expert is (add with index_add_, never assign, no capacity limit).",
         "你的 MoE 丢弃或覆盖了词元：无论专家多拥挤，每个词元都必须得到它全部 k 个专家的输出（用 index_add_ 累加，不要赋值，不设容量上限）。")


def drops_assignments(out, reference, x) -> bool:
    """Does every token's output equal the shared part plus SOME of its k weighted expert outputs,
    with at least one token missing one?"""
    flat, got = x.reshape(-1, x.shape[-1]), out.detach().reshape(-1, x.shape[-1])
    weights, indices = reference.gate(flat)
    shared = reference.shared_experts(flat)
    k, missing = indices.shape[1], False
    subsets = [[(m >> j) & 1 for j in range(k)] for m in range(2 ** k)]
    for t in range(flat.shape[0]):
        parts = torch.stack([reference.experts[e](flat[t]) * w for w, e in zip(weights[t], indices[t].tolist())])
        hit = [sub for sub in subsets if torch.allclose(got[t], shared[t] + (torch.tensor(sub, dtype=parts.dtype) @ parts), atol=1e-5)]
        if not hit:
            return False
        missing |= all(0 in sub for sub in hit)
    return missing


def sparse_budget(N, dim, inter, E, k, shared_inter):
    """The most a sparse layer needs: (multiply-adds, matrix-product calls).

    Multiply-adds: each token through its k experts and the shared expert (3 matrices each), the
    gate, plus room for one more product of the gate's size (a one-hot dispatch, a second gate
    call) and one of k x dim per token (combining the k outputs with a product). Calls: the gate,
    three per expert and per shared expert, and one more per expert for gathering or combining.
    A layer that runs every expert on every token exceeds the first; a loop over tokens, the second.
    """
    macs = N * k * 3 * dim * inter + N * 3 * dim * shared_inter + 2 * N * E * dim + N * k * dim
    elementwise = 2 * N * (k * (inter + dim) + shared_inter + dim + 2 * E)  # SiLU gating, weights, scale
    calls = 2 + 4 * (E + 1)
    return macs + elementwise, calls


def measure(module, x):
    """Multiply-adds (matrix products and element-wise products) and matrix-product calls of one forward."""
    with MatmulCost() as cost:
        module(x)
    return cost.macs + cost.muls, cost.calls


def course_parts(fn, names=("Gate", "Expert")):
    """While the learner's MoE is graded, the Gate and Expert it builds are the course's, so a
    mistake in those exercises costs points there, not here too. Put back afterwards."""
    return course_versions(fn, {name: getattr(ref, name) for name in names})


def gate_grad(moe: nn.Module, x, probe):
    """The gradient that reaches gate.weight through the routing weights (None if none does)."""
    gate_weight = moe.gate.weight
    gate_weight.grad = None
    (moe(x) * probe).sum().backward()
    return gate_weight.grad


def bias_mistakes(bias, load, gamma):
    """update_expert_bias restated with one known mistake at a time: (new bias, en, zh)."""
    load = load.double()
    sign = torch.sign(load - load.mean())
    return [
        (bias + gamma * sign, "The sign is reversed: overloaded experts must LOSE gamma (be chosen less), underloaded ones gain it.",
         "符号反了：过载的专家必须减去 gamma（更少被选中），负载不足的专家加上 gamma。"),
        (bias - gamma * (load - load.mean()), "The bias moves by exactly gamma (the sign of the load's difference from the mean), not in proportion to it.",
         "偏置每次正好移动 gamma（负载与平均值之差的符号），而不是与差值成比例。"),
        (-gamma * sign, "Start from the current bias: return bias - gamma * sign(load - mean), not a fresh one.",
         "要从当前的偏置出发：返回 bias - gamma * sign(load - mean)，而不是一个新的偏置。"),
        (bias - gamma * torch.where(load > load.mean(), 1.0, -1.0), "An expert exactly at the mean load keeps its bias: the step is gamma * sign(load - mean), and sign(0) = 0.",
         "负载正好等于平均值的专家保持偏置不变：步长是 gamma * sign(load - mean)，而 sign(0) = 0。"),
        (bias - gamma * torch.sign(load - load.sum().div(len(load), rounding_mode="floor")),
         "The mean load is a real number: compute it in floating point (tokens_per_expert.float().mean()), not with integer division.",
         "平均负载是实数：要用浮点数计算（tokens_per_expert.float().mean()），而不是整数除法。"),
    ]


def count_mistakes(args, want):
    """moe_parameter_counts(*args) restated with one known mistake at a time: ((total, active), en, zh)."""
    dim, inter, E, k, shared = args
    expert, gate = 3 * dim * inter, E * dim + E
    total, active = want
    return (
        ((total - gate, active - gate), "The gate is part of the layer: count its weight (n_routed_experts x dim) and its bias (n_routed_experts).",
         "路由门控是层的一部分：计入它的 weight（n_routed_experts x dim）和 bias（n_routed_experts）。"),
        ((total - E, active - E), "The gate's bias (n_routed_experts numbers) is a parameter too: count it.", "路由门控的偏置（n_routed_experts 个数）也是参数：要计入。"),
        ((total, active - gate), "The gate scores every expert for every token: count the whole gate as active.", "路由门控要为每个词元给每个专家打分：整个路由门控都算作激活参数。"),
        ((total - shared * expert, active - shared * expert), "Shared experts count in both numbers: every token uses them.", "共享专家在两个数中都要计入：每个词元都会用到它们。"),
        ((total, active - shared * expert), "Shared experts are active for every token: add them to the active count.", "共享专家对每个词元都是激活的：把它们加到激活数中。"),
        ((total, total), "Active counts only the experts a token uses: n_activated_experts routed ones plus the shared ones (and the gate).",
         "激活参数只计一个词元用到的专家：n_activated_experts 个路由专家加上共享专家（以及路由门控）。"),
        ((total - (E + shared) * dim * inter, active - (k + shared) * dim * inter), "An expert has three matrices of dim x moe_inter_dim (w1, w2, w3).",
         "一个专家有三个 dim x moe_inter_dim 矩阵（w1、w2、w3）。"),
    )
