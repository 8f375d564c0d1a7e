"""Solutions of notebook 10 that grading must reject (WRONG) or accept (RIGHT)."""
import types

import torch
import torch.nn.functional as F
from torch import nn

import utils.moe


# Expert ------------------------------------------------------------------------------------------
def expert_class(mistake=None, style="layers"):
    class Expert(nn.Module):
        def __init__(self, dim, inter_dim):
            super().__init__()
            bias = mistake == "bias"
            self.w1 = nn.Linear(dim, inter_dim, bias=bias)
            self.w2 = nn.Linear(inter_dim, dim, bias=bias)
            self.w3 = nn.Linear(dim, inter_dim, bias=bias)

        def forward(self, x):
            if style == "einsum":
                gate = torch.einsum("...d,hd->...h", x, self.w1.weight)
                up = torch.einsum("...d,hd->...h", x, self.w3.weight)
                return torch.einsum("...h,dh->...d", gate * torch.sigmoid(gate) * up, self.w2.weight)
            a, b = (self.w3(x), self.w1(x)) if mistake == "w1 and w3 swapped" else (self.w1(x), self.w3(x))
            if mistake == "relu":
                return self.w2(F.relu(a) * b)
            if mistake == "no gating product":
                return self.w2(F.silu(a))
            if mistake == "silu after the product":
                return self.w2(F.silu(a * b))
            return self.w2(F.silu(a) * b)
    return Expert



class ExpertUpNoGrad(nn.Module):  # the up projection computed under no_grad: w3 never trains
    def __init__(self, dim, inter_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, inter_dim, bias=False)
        self.w2 = nn.Linear(inter_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, inter_dim, bias=False)

    def forward(self, x):
        with torch.no_grad():
            up = self.w3(x)
        return self.w2(F.silu(self.w1(x)) * up)


class ExpertBatchedOnly(ExpertUpNoGrad):  # right only for (B, T, dim) inputs
    def forward(self, x):
        gate = torch.einsum("btd,hd->bth", x, self.w1.weight)
        up = torch.einsum("btd,hd->bth", x, self.w3.weight)
        return torch.einsum("bth,dh->btd", F.silu(gate) * up, self.w2.weight)


class ExpertSigmoidInPlace(ExpertUpNoGrad):  # x * sigmoid(x) written into sigmoid's output: backward refuses
    def forward(self, x):
        gate = self.w1(x)
        silu = torch.sigmoid(gate)
        silu.mul_(gate)
        return self.w2(silu * self.w3(x))


class BorrowedExpert(utils.moe.Expert):
    pass


# topk_router -------------------------------------------------------------------------------------
def router_no_renorm(logits, k):
    return torch.softmax(logits, -1).topk(k, -1)


def router_in_place(logits, k):  # right weights, but the max is subtracted from the caller's logits
    logits -= logits.amax(-1, keepdim=True).detach()
    probs = logits.exp() / logits.exp().sum(-1, keepdim=True)
    top, indices = probs.topk(k, -1)
    return top / top.sum(-1, keepdim=True), indices


def router_logits_as_weights(logits, k):
    top = logits.topk(k, -1)
    return top.values, top.indices


def router_unstable_softmax(logits, k):
    e = torch.exp(logits)
    top, indices = (e / e.sum(-1, keepdim=True)).topk(k, -1)
    return top / top.sum(-1, keepdim=True), indices


def router_detached(logits, k):
    probs = torch.softmax(logits, -1).detach()  # the router would never learn from the task
    top, indices = probs.topk(k, -1)
    return top / top.sum(-1, keepdim=True), indices


def router_softmax_of_top_logits(logits, k):
    top = logits.topk(k, -1)
    return torch.softmax(top.values, -1), top.indices


def router_sorted_by_index(logits, k):
    probs = torch.exp(torch.log_softmax(logits, -1))
    indices = probs.topk(k, -1).indices.sort(-1).values
    kept = probs.gather(1, indices)
    return kept / kept.sum(-1, keepdim=True), indices



def router_float32_probs(logits, k):  # the probabilities in float32 whatever the logits' dtype
    probs = torch.softmax(logits.float(), -1)
    top, indices = probs.topk(k, -1)
    return top / top.sum(-1, keepdim=True), indices


def router_float32_cast_back(logits, k):  # the softmax in float32, cast back (Llama, Hugging Face)
    probs = torch.softmax(logits.float(), -1)
    top, indices = probs.topk(k, -1)
    return (top / top.sum(-1, keepdim=True)).to(logits.dtype), indices


def router_masks_every_maximum(logits, k):  # picks the maximum k times, but masks every expert equal to it
    probs = torch.softmax(logits, -1)
    left, chosen = probs.detach().clone(), []
    for _ in range(k):
        best = left.argmax(-1, keepdim=True)
        chosen.append(best)
        left = left.masked_fill(left == left.gather(1, best), -1.0)  # a tied expert goes with it
    indices = torch.cat(chosen, -1)
    top = probs.gather(1, indices)
    return top / top.sum(-1, keepdim=True), indices

# load_balancing_loss -----------------------------------------------------------------------------
def lb_no_factor(router_probs, expert_indices, num_experts):
    f = torch.bincount(expert_indices.flatten(), minlength=num_experts).float() / expert_indices.numel()
    return (f * router_probs.mean(0)).sum()


def lb_per_token(router_probs, expert_indices, num_experts):
    f = torch.bincount(expert_indices.flatten(), minlength=num_experts).float() / expert_indices.shape[0]
    return num_experts * (f * router_probs.mean(0)).sum()


def lb_sum_of_probs(router_probs, expert_indices, num_experts):
    f = torch.bincount(expert_indices.flatten(), minlength=num_experts).float() / expert_indices.numel()
    return num_experts * (f * router_probs.sum(0)).sum()


def lb_swapped(router_probs, expert_indices, num_experts):
    f = router_probs.mean(0).detach()  # the probabilities treated as the constant share...
    P = torch.bincount(expert_indices.flatten(), minlength=num_experts).float() / expert_indices.numel()
    return num_experts * (f * P).sum()  # ...so the gradient is lost


def lb_chooses_again(router_probs, expert_indices, num_experts):
    chosen = router_probs.topk(expert_indices.shape[1], -1).indices
    f = torch.bincount(chosen.flatten(), minlength=num_experts).float() / chosen.numel()
    return num_experts * (f * router_probs.mean(0)).sum()


def lb_one_hot(router_probs, expert_indices, num_experts):
    f = F.one_hot(expert_indices, num_experts).float().sum(1).mean(0) / expert_indices.shape[1]
    return num_experts * torch.dot(f, router_probs.mean(0))



def lb_experts_from_indices(router_probs, expert_indices, num_experts):  # E counted from the experts that were used
    used = expert_indices.unique().numel()
    f = torch.bincount(expert_indices.flatten(), minlength=num_experts).float() / expert_indices.numel()
    return used * (f * router_probs.mean(0)).sum()

# Gate --------------------------------------------------------------------------------------------
def gate_class(mistake=None, style="masked_fill"):
    class Gate(nn.Module):
        def __init__(self, dim, n_routed_experts, n_activated_experts, n_expert_groups=1, n_limited_groups=1,
                     score_func="sigmoid", route_scale=1.0):
            super().__init__()
            self.k, self.groups, self.limited = n_activated_experts, n_expert_groups, n_limited_groups
            self.func, self.scale = score_func, route_scale
            self.weight = nn.Parameter(torch.randn(n_routed_experts, dim) / dim ** 0.5)
            self.bias = nn.Parameter(torch.zeros(n_routed_experts))

        def forward(self, x):
            logits = F.linear(x, self.weight.detach() if mistake == "weight detached" else self.weight)
            softmax = (self.func == "softmax") != (mistake == "softmax")
            scores = torch.softmax(logits, -1) if softmax else torch.sigmoid(logits)
            choice = scores if mistake == "bias ignored" else scores + self.bias
            if self.groups > 1 and mistake != "groups ignored":
                N = x.shape[0]
                grouped = choice.view(N, self.groups, -1)
                if mistake == "V3's bias rule":  # DeepSeek-V3's code: max without a bias, top-2 sum with one
                    group_scores = grouped.amax(-1) if self.bias is None else grouped.topk(2, -1)[0].sum(-1)
                elif self.func == "softmax" or mistake == "group max":
                    group_scores = grouped.max(-1).values
                else:
                    group_scores = grouped.topk(2, -1).values.sum(-1)
                kept = group_scores.topk(self.limited, -1).indices
                if mistake == "zero mask":  # as some ports of V3's code do: multiply by a 0/1 mask
                    keep = torch.zeros(N, self.groups, device=grouped.device).scatter(1, kept, 1.0)
                    choice = (grouped * keep.unsqueeze(-1)).flatten(1)
                elif style == "where":
                    allowed = torch.zeros(N, self.groups, dtype=torch.bool, device=grouped.device).scatter(1, kept, True)
                    choice = torch.where(allowed.unsqueeze(-1), grouped, torch.full_like(grouped, float("-inf"))).reshape(N, -1)
                else:
                    dropped = torch.ones(N, self.groups, dtype=torch.bool, device=grouped.device).scatter(1, kept, False)
                    choice = grouped.masked_fill(dropped.unsqueeze(-1), float("-inf")).flatten(1)
            indices = choice.topk(self.k, -1).indices
            if style == "where":
                indices = indices.sort(-1).values  # any order of a token's experts is fine
            weights = (choice if mistake == "bias in weights" else scores).gather(1, indices)
            if mistake == "renormalised after route_scale":
                weights = weights * self.scale
            if (self.func == "sigmoid" and mistake != "no renormalisation") or mistake == "softmax renormalised":
                weights = weights / weights.sum(-1, keepdim=True)
            if mistake not in ("no route_scale", "renormalised after route_scale"):
                weights = weights * self.scale
            return (weights.float() if mistake == "float32 weights" else weights.type_as(x)), indices
    return Gate


class BorrowedGate(utils.moe.Gate):
    pass


# update_expert_bias --------------------------------------------------------------------------------
def bias_wrong_sign(bias, tokens_per_expert, gamma=0.001):
    load = tokens_per_expert.float()
    return bias + gamma * torch.sign(load - load.mean())


def bias_proportional(bias, tokens_per_expert, gamma=0.001):
    load = tokens_per_expert.float()
    return bias - gamma * (load - load.mean())


def bias_fresh(bias, tokens_per_expert, gamma=0.001):
    load = tokens_per_expert.float()
    return -gamma * torch.sign(load - load.mean())


def bias_at_mean_gains(bias, tokens_per_expert, gamma=0.001):
    load = tokens_per_expert.float()
    return bias + torch.where(load > load.mean(), -gamma, gamma)


def bias_integer_mean(bias, tokens_per_expert, gamma=0.001):
    mean = tokens_per_expert.sum() // len(tokens_per_expert)
    return bias - gamma * torch.sign(tokens_per_expert - mean).to(bias.dtype)


def bias_where(bias, tokens_per_expert, gamma=0.001):
    load = tokens_per_expert.double()
    step = torch.where(load > load.mean(), -gamma, torch.where(load < load.mean(), gamma, 0.0))
    return bias + step.to(bias.dtype)


def bias_in_place(bias, tokens_per_expert, gamma=0.001):
    load = tokens_per_expert.float()
    bias -= gamma * torch.sign(load - load.mean())
    return bias


# MoE -------------------------------------------------------------------------------------------------
RightGate, RightExpert = gate_class(), expert_class()


def moe_class(mistake=None, style="sort"):
    class MoE(nn.Module):
        def __init__(self, dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts=0,
                     n_expert_groups=1, n_limited_groups=1, score_func="sigmoid", route_scale=1.0):
            super().__init__()
            self.gate = RightGate(dim, n_routed_experts, n_activated_experts, n_expert_groups, n_limited_groups,
                                  score_func, route_scale)
            self.experts = nn.ModuleList(RightExpert(dim, moe_inter_dim) for _ in range(n_routed_experts))
            self.shared_experts = RightExpert(dim, n_shared_experts * moe_inter_dim) if n_shared_experts > 0 else None
            self.capacity = None

        def forward(self, x):
            shape = x.shape
            x = x.view(-1, shape[-1]) if mistake == "view" else x.reshape(-1, shape[-1])
            weights, indices = self.gate(x)
            if mistake == "weights detached":
                weights = weights.detach()
            y = torch.zeros_like(x)
            if mistake == "every expert on every token":
                gates = torch.zeros(x.shape[0], len(self.experts), device=x.device).scatter(1, indices, weights)
                y = sum(expert(x) * gates[:, e:e + 1] for e, expert in enumerate(self.experts))
            elif mistake == "per-token loop":
                for t in range(x.shape[0]):
                    for w, e in zip(weights[t], indices[t].tolist()):
                        y[t] = y[t] + w * self.experts[e](x[t])
            elif mistake == "stacked weights, every expert":  # no Expert is ever called: hooks see nothing
                w1, w2, w3 = (torch.stack([getattr(e, n).weight for e in self.experts]) for n in ("w1", "w2", "w3"))
                gates = torch.zeros(x.shape[0], len(self.experts), device=x.device).scatter(1, indices, weights)
                h = F.silu(torch.einsum("nd,ehd->neh", x, w1)) * torch.einsum("nd,ehd->neh", x, w3)
                y = torch.einsum("neh,edh,ne->nd", h, w2, gates)
            elif mistake == "per-token loop on w1/w2/w3":
                for t in range(x.shape[0]):
                    for w, e in zip(weights[t], indices[t].tolist()):
                        ex = self.experts[e]
                        y[t] = y[t] + w * F.linear(F.silu(F.linear(x[t], ex.w1.weight)) * F.linear(x[t], ex.w3.weight), ex.w2.weight)
            elif style == "gathered weights":  # every assignment gets its own expert's matrices: sparse, no loop at all
                w1, w2, w3 = (torch.stack([getattr(e, n).weight for e in self.experts]) for n in ("w1", "w2", "w3"))
                h = F.silu(torch.einsum("nd,nkhd->nkh", x, w1[indices])) * torch.einsum("nd,nkhd->nkh", x, w3[indices])
                y = torch.einsum("nkh,nkdh,nk->nd", h, w2[indices], weights)
            else:
                capacity = 2 * indices.numel() // len(self.experts)
                for e, expert in enumerate(self.experts):  # DeepSeek-V3's way: a loop over experts, torch.where
                    rows, slot = torch.where(indices == e)
                    if mistake == "drops tokens over capacity":
                        rows, slot = rows[:capacity], slot[:capacity]
                    if len(rows) == 0:
                        continue
                    out = expert(x[rows]) * weights[rows, slot, None]
                    if mistake == "assigns instead of adding":
                        y[rows] = out
                    elif style == "scatter_add":
                        y.scatter_add_(0, rows.unsqueeze(-1).expand_as(out), out)
                    else:
                        y.index_add_(0, rows, out)
            if self.shared_experts is not None and mistake != "shared experts left out":
                y = y + self.shared_experts(x)
            return y.view(shape)
    return MoE


class BorrowedMoE(utils.moe.MoE):
    pass


def moe_with_own_parts(course_dispatch=False):
    """An MoE that builds the learner's Gate and Expert by name, as a notebook's does: a wrong
    Gate there must not cost the MoE's points too (the check puts the course's in). With
    course_dispatch, its tokens go through utils.moe.dispatch: the part the text calls "your
    dispatch", not the learner's."""
    namespace = {"Gate": gate_class("group max"), "Expert": expert_class("relu")}
    route = ("        y = utils.moe.dispatch(x, weights, indices, self.experts)\n" if course_dispatch else
             "        y = torch.zeros_like(x)\n"
             "        for e, expert in enumerate(self.experts):\n"
             "            token, slot = torch.where(indices == e)\n"
             "            y.index_add_(0, token, expert(x[token]) * weights[token, slot, None])\n")
    exec("import torch\nfrom torch import nn\n"
         "import utils.moe\n"
         "class MoE(nn.Module):\n"
         "    def __init__(self, dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts=0,\n"
         "                 n_expert_groups=1, n_limited_groups=1, score_func='sigmoid', route_scale=1.0):\n"
         "        super().__init__()\n"
         "        self.gate = Gate(dim, n_routed_experts, n_activated_experts, n_expert_groups, n_limited_groups, score_func, route_scale)\n"
         "        self.experts = nn.ModuleList(Expert(dim, moe_inter_dim) for _ in range(n_routed_experts))\n"
         "        self.shared_experts = Expert(dim, n_shared_experts * moe_inter_dim) if n_shared_experts > 0 else None\n"
         "    def forward(self, x):\n"
         "        shape = x.shape\n"
         "        x = x.reshape(-1, shape[-1])\n"
         "        weights, indices = self.gate(x)\n"
         + route +
         "        if self.shared_experts is not None:\n"
         "            y = y + self.shared_experts(x)\n"
         "        return y.view(shape)\n", namespace)
    return namespace["MoE"]


# moe_parameter_counts ----------------------------------------------------------------------------------
def counts_factory(mistake=None):
    def moe_parameter_counts(dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts):
        expert = (2 if mistake == "two matrices" else 3) * dim * moe_inter_dim
        gate = n_routed_experts * dim + (0 if mistake == "gate bias left out" else n_routed_experts)
        if mistake == "gate left out":
            gate = 0
        shared = 0 if mistake == "shared left out" else n_shared_experts
        total = (n_routed_experts + shared) * expert + gate
        active = (n_activated_experts + shared) * expert + (0 if mistake == "gate not active" else gate)
        if mistake == "active is total":
            active = total
        return total, active
    return moe_parameter_counts


def counts_per_matrix(dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts):
    matrices = {"w1": dim * moe_inter_dim, "w2": moe_inter_dim * dim, "w3": dim * moe_inter_dim}
    one = sum(matrices.values())
    gate = {"weight": n_routed_experts * dim, "bias": n_routed_experts}
    held = [one] * (n_routed_experts + n_shared_experts)
    used = [one] * (n_activated_experts + n_shared_experts)
    return sum(held) + sum(gate.values()), sum(used) + sum(gate.values())


_REFERENCE_FORWARD = utils.moe.Expert.forward.__code__


class ExpertReferenceCode(nn.Module):
    """Its own __init__; its forward is a new function object built on the reference's code."""
    def __init__(self, dim, inter_dim):
        super().__init__()
        self.w1 = nn.Linear(dim, inter_dim, bias=False)
        self.w2 = nn.Linear(inter_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, inter_dim, bias=False)

    forward = types.FunctionType(_REFERENCE_FORWARD, vars(utils.moe), "forward")



def moe_shared_no_grad():
    """Right outputs, but the shared experts run under no_grad: they never train."""
    class MoE(moe_class(style="index_add")):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if self.shared_experts is not None:
                inner = self.shared_experts.forward

                def forward(x):
                    with torch.no_grad():
                        return inner(x)
                self.shared_experts.forward = forward
    return MoE


def bias_float32(bias, tokens_per_expert, gamma=0.001):  # the new bias in float32 whatever the bias's dtype
    load = tokens_per_expert.float()
    return bias.float() - gamma * torch.sign(load - load.mean())

WRONG = {
    "Expert": {
        # the reference's forward code runs under another function object / 参考实现的 forward 代码换了个函数对象在运行
        "a new function on the reference's code": (ExpertReferenceCode, "ran while your code ran"),
        "w1 and w3 swapped": (expert_class("w1 and w3 swapped"), "SiLU goes on w1"),
        "relu": (expert_class("relu"), "not ReLU"),
        "no gating product": (expert_class("no gating product"), "gated product is missing"),
        "silu after the product": (expert_class("silu after the product"), "before the product"),
        "layers with bias": (expert_class("bias"), "without bias"),
        "subclasses utils": (BorrowedExpert, "yourself"),
        # the harness's gradients and edges / 由 harness 的梯度与边界情况发现
        "up projection under no_grad": (ExpertUpNoGrad, "No gradient reaches Expert.w3.weight"),
        "only (B, T, dim) inputs": (ExpertBatchedOnly, "crashed"),
        "SiLU written in place into sigmoid's output": (ExpertSigmoidInPlace, "cannot be backpropagated through"),
    },
    "topk_router": {
        # it shifts the caller's logits in place / 它原地平移了调用者的 logits
        "subtracts the max in place": (router_in_place, "changed its input logits in place"),
        "no renormalisation": (router_no_renorm, "renormalised"),
        "logits as weights": (router_logits_as_weights, "weights are probabilities"),
        "softmax without the max": (router_unstable_softmax, "overflows"),
        "calls utils": (utils.moe.topk_router, "yourself"),
        "weights detached": (router_detached, "carry the gradient back"),
        # the harness's dtypes and ties / 由 harness 的 dtype 与并列值发现
        "probabilities in float32 whatever the dtype": (router_float32_probs, "must follow its input's dtype"),
        "masks every expert tied with the maximum": (router_masks_every_maximum, "on tied logits"),
    },
    "load_balancing_loss": {
        "no factor E": (lb_no_factor, "factor E"),
        "f over tokens, not assignments": (lb_per_token, "N*k assignments"),
        "sum of probabilities": (lb_sum_of_probs, "MEAN router probability"),
        "f and P swapped": (lb_swapped, "f and P are swapped"),
        "chooses the experts again": (lb_chooses_again, "expert_indices"),
        "calls utils": (utils.moe.load_balancing_loss, "yourself"),
        "E counted from the experts used": (lb_experts_from_indices, "on an expert no token picks"),
    },
    "Gate": {
        "softmax where sigmoid": (gate_class("softmax"), "not a softmax"),
        "bias in the weights": (gate_class("bias in weights"), "WITHOUT the bias"),
        "no renormalisation": (gate_class("no renormalisation"), "renormalised to sum 1"),
        "route_scale missing": (gate_class("no route_scale"), "route_scale"),
        "group score as max": (gate_class("group max"), "not the max"),
        "groups not limited": (gate_class("groups ignored"), "groups that were not chosen"),
        "bias ignored": (gate_class("bias ignored"), "scores + bias"),
        "V3's group rule (by the bias) copied": (gate_class("V3's bias rule"), "whether the gate has a bias"),
        "softmax weights renormalised": (gate_class("softmax renormalised"), "only sigmoid weights are renormalised"),
        "groups masked with zeros": (gate_class("zero mask"), "a mask of zeros is not enough"),
        "renormalised after route_scale": (gate_class("renormalised after route_scale"), "renormalising after the scale undoes it"),
        "weights always float32": (gate_class("float32 weights"), "x's dtype"),
        "gate weight detached": (gate_class("weight detached"), "carry the gradient back"),
        "subclasses utils": (BorrowedGate, "yourself"),
    },
    "update_expert_bias": {
        "wrong sign": (bias_wrong_sign, "sign is reversed"),
        "proportional step": (bias_proportional, "exactly gamma"),
        "fresh bias": (bias_fresh, "current bias"),
        "experts at the mean gain gamma": (bias_at_mean_gains, "exactly at the mean"),
        "integer mean": (bias_integer_mean, "integer division"),
        "the new bias in float32 whatever the dtype": (bias_float32, "must follow its input's dtype (torch.float64)"),
        "calls utils": (utils.moe.update_expert_bias, "yourself"),
    },
    "MoE": {
        "shared experts left out": (moe_class("shared experts left out"), "shared experts are left out"),
        "per-token loop": (moe_class("per-token loop"), "without a Python loop over tokens"),
        "every expert on every token": (moe_class("every expert on every token"), "only on the tokens routed to it"),
        "every expert through stacked weights": (moe_class("stacked weights, every expert"), "only on the tokens routed to it"),
        "per-token loop on w1/w2/w3": (moe_class("per-token loop on w1/w2/w3"), "without a Python loop over tokens"),
        "view on a non-contiguous input": (moe_class("view"), "reshape, not view"),
        "routing weights detached": (moe_class("weights detached"), "reaches the gate"),
        "drops tokens over capacity": (moe_class("drops tokens over capacity"), "drops or overwrites"),
        "assigns instead of adding": (moe_class("assigns instead of adding"), "drops or overwrites"),
        "subclasses utils": (BorrowedMoE, "yourself"),
        "shared experts under no_grad": (moe_shared_no_grad(), "No gradient reaches MoE.shared_experts.w1.weight"),
        # the dispatch is the exercise, even through the course's helper / 分派正是练习本身，借课程的辅助函数也不行
        "tokens sent through utils.moe.dispatch": (moe_with_own_parts(course_dispatch=True), "a helper of the course's reference"),
    },
    "moe_parameter_counts": {
        "gate left out": (counts_factory("gate left out"), "gate is part of the layer"),
        "gate bias left out": (counts_factory("gate bias left out"), "bias (n_routed_experts numbers)"),
        "gate not active": (counts_factory("gate not active"), "whole gate as active"),
        "shared experts left out": (counts_factory("shared left out"), "Shared experts count"),
        "active equals total": (counts_factory("active is total"), "only the experts a token uses"),
        "two matrices per expert": (counts_factory("two matrices"), "three matrices"),
        "calls utils": (utils.moe.moe_parameter_counts, "yourself"),
    },
}

RIGHT = {
    "Expert": {"einsum with x * sigmoid(x)": expert_class(style="einsum")},
    "topk_router": {"softmax of the top-k logits": router_softmax_of_top_logits,
                    "log-softmax, indices sorted": router_sorted_by_index,
                    "softmax in float32, cast back": router_float32_cast_back},
    "load_balancing_loss": {"one-hot counts": lb_one_hot},
    "Gate": {"torch.where, indices sorted": gate_class(style="where")},
    "update_expert_bias": {"torch.where": bias_where, "in place": bias_in_place},
    "MoE": {"DeepSeek-V3's torch.where loop over experts": moe_class(style="index_add"),
            "scatter_add": moe_class(style="scatter_add"),
            "each assignment's gathered weights, no loop": moe_class(style="gathered weights"),
            "built from a wrong Gate and Expert of its notebook": moe_with_own_parts()},
    "moe_parameter_counts": {"counted per matrix": counts_per_matrix},
}

from autograder.tests.zoo import nb10_adversary2, nb10_space  # noqa: E402

for _more in (nb10_adversary2, nb10_space):
    for _exercise, _entries in _more.WRONG.items():
        WRONG[_exercise].update(_entries)
    for _exercise, _entries in _more.RIGHT.items():
        RIGHT[_exercise].update(_entries)
