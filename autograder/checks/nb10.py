"""Hidden checks of notebook 10, mixture of experts.

Weights are state_dicts in DeepSeek-V3's layout (`weight`, `bias` of the gate; `experts.{i}.w1/w2/w3`;
`shared_experts.w1/w2/w3`), built from seeds by parameter name and loaded into the learner's
modules, then compared with utils.moe. Routing results are compared as sets per token (the order
of a token's k experts is free). When a result differs, restatements with one known mistake at
a time name it.
"""
import torch
import torch.nn.functional as F
from torch import nn

import utils.moe as ref
from autograder.checks import (call, expect, expect_close, expect_known, expect_tensor, fail, load_state, matches, own_module,
                               own_work, randn, seeded_state)


def _canonical(weights, indices):
    """Sort each token's (index, weight) pairs by expert index."""
    order = indices.argsort(dim=-1)
    return weights.gather(1, order), indices.gather(1, order)


# Expert ------------------------------------------------------------------------------------
def check_Expert(Expert):
    with own_work(Expert, "Expert"):
        expert = own_module(Expert, 6, 10)
    layers = {n: getattr(expert, n, None) for n in ("w1", "w2", "w3")}
    expect(all(isinstance(l, nn.Linear) for l in layers.values()),
           "Expert needs three nn.Linear layers named w1 (gate), w2 (down) and w3 (up), as in DeepSeek-V3.",
           "Expert 需要三个 nn.Linear 层，名为 w1（门控）、w2（下投影）和 w3（上投影），与 DeepSeek-V3 一致。",
           f"got {[type(l).__name__ for l in layers.values()]}")
    expect(all(l.bias is None for l in layers.values()), "The expert's layers are without bias: nn.Linear(..., bias=False).",
           "专家的各层都不带偏置：nn.Linear(..., bias=False)。")
    reference = ref.Expert(6, 10)
    state = seeded_state(reference, 100)
    reference.load_state_dict(state)
    load_state(expert, state, "Expert")
    x = randn(2, 3, 6, seed=101)
    with torch.no_grad(), own_work(Expert, "Expert"):
        out = call(expert, x, name="Expert.forward")
    w1, w2, w3 = (state[f"{n}.weight"] for n in ("w1", "w2", "w3"))
    mistakes = [
        ((F.silu(x @ w3.T) * (x @ w1.T)) @ w2.T, "SiLU goes on w1, the gate; w3 is the up projection it multiplies: w2(silu(w1(x)) * w3(x)).",
         "SiLU 作用在 w1（门控）上；w3 是与之相乘的上投影：w2(silu(w1(x)) * w3(x))。"),
        ((F.relu(x @ w1.T) * (x @ w3.T)) @ w2.T, "SwiGLU uses SiLU (x * sigmoid(x)), not ReLU: F.silu.",
         "SwiGLU 使用 SiLU（x * sigmoid(x)），而不是 ReLU：F.silu。"),
        (F.silu(x @ w1.T) @ w2.T, "The gated product is missing: multiply silu(w1(x)) by w3(x) before w2.",
         "缺少门控乘积：在 w2 之前把 silu(w1(x)) 乘以 w3(x)。"),
        (F.silu((x @ w1.T) * (x @ w3.T)) @ w2.T, "SiLU acts on w1(x) alone, before the product: silu(w1(x)) * w3(x).",
         "SiLU 只作用在 w1(x) 上，并且在乘积之前：silu(w1(x)) * w3(x)。"),
    ]
    expect_known(out, reference(x).detach(), mistakes, "Expert's output is wrong: w2(silu(w1(x)) * w3(x)).",
                 "Expert 的输出不对：w2(silu(w1(x)) * w3(x))。")


# topk_router -------------------------------------------------------------------------------
def check_topk_router(topk_router):
    logits = randn(7, 6, seed=110) * 2
    logits[0] = torch.tensor([1000.0, 1001.0, 999.0, -1000.0, 0.0, 998.0])  # large logits: a stable softmax needed
    with own_work(topk_router, "topk_router"):
        result = call(topk_router, logits, 3, name="topk_router")
    expect(isinstance(result, tuple) and len(result) == 2, "topk_router must return a tuple (weights, indices).",
           "topk_router 必须返回一个元组 (weights, indices)。", f"got {type(result).__name__}")
    weights, indices = result
    expect_tensor(weights, "The weights", "权重")
    expect(isinstance(indices, torch.Tensor) and indices.shape == (7, 3) and not indices.is_floating_point(),
           "indices must be an integer tensor (N, k) of expert numbers.", "indices 必须是由专家编号组成的 (N, k) 整数张量。",
           f"got {getattr(indices, 'shape', type(indices).__name__)}")
    expect(not torch.isnan(weights).any(),
           "The weights contain NaN: with logits near 1000, exp() overflows; subtract each row's maximum before exp (or use torch.softmax).",
           "权重中出现了 NaN：logits 接近 1000 时 exp() 会溢出；在 exp 之前先减去每行的最大值（或使用 torch.softmax）。")
    right_w, right_i = ref.topk_router(logits, 3)
    w, i = _canonical(weights.detach(), indices)
    rw, ri = _canonical(right_w, right_i)
    expect(torch.equal(i, ri), "The chosen experts must be the k with the largest probabilities (topk over the expert axis).",
           "被选中的专家必须是概率最大的 k 个（沿专家轴做 topk）。", f"got {indices.tolist()[:2]}, expected {right_i.tolist()[:2]}")
    probs = torch.softmax(logits, -1)
    top = probs.gather(1, right_i)
    expect_known(w, rw, [
        (_canonical(top, right_i)[0], "The kept probabilities must be renormalised to sum 1: divide by their sum.",
         "保留下来的概率必须重新归一化使其和为 1：除以它们的和。"),
        (_canonical(logits.gather(1, right_i), right_i)[0], "The weights are probabilities: a softmax over all experts, then the top k, renormalised.",
         "权重是概率：先对所有专家做 softmax，再取前 k 个并重新归一化。"),
    ], "topk_router's weights are wrong: softmax over all experts, keep the top k, divide them by their sum.",
        "topk_router 的权重不对：对所有专家做 softmax，保留前 k 个，再除以它们的和。")


# load_balancing_loss -------------------------------------------------------------------------
def check_load_balancing_loss(load_balancing_loss):
    fn, E, k = load_balancing_loss, 6, 2
    logits = randn(10, E, seed=120) * 2
    logits[:, 0] += 2.0  # an uneven router
    probs = torch.softmax(logits, -1).requires_grad_(True)
    indices = probs.detach().topk(k, -1).indices
    with own_work(fn, "load_balancing_loss"):
        loss = call(fn, probs, indices, E, name="load_balancing_loss")
    expect_tensor(loss, "The loss", "损失")
    expect(loss.numel() == 1, "The loss is one number (a scalar tensor).", "损失是一个数（标量张量）。", f"shape {tuple(loss.shape)}")
    loss = loss.reshape(())
    want = ref.load_balancing_loss(probs.detach(), indices, E)
    counts = torch.bincount(indices.flatten(), minlength=E).float()
    P = probs.detach().mean(0)
    expect_known(loss.detach(), want, [
        ((counts / indices.numel() * P).sum(), "The Switch loss has the factor E (num_experts) in front: E * sum_i f_i * P_i, which is 1 when balanced.",
         "Switch 损失前面有因子 E（num_experts）：E * sum_i f_i * P_i，均衡时等于 1。"),
        (E * (counts / indices.shape[0] * P).sum(), "f_i is the share of the N*k assignments (divide the counts by N*k), not of the N tokens.",
         "f_i 是 N*k 次分配中的比例（计数除以 N*k），而不是 N 个词元中的比例。"),
        (E * (counts / indices.numel() * probs.detach().sum(0)).sum(), "P_i is the MEAN router probability of expert i over the tokens, not the sum.",
         "P_i 是专家 i 在所有词元上的平均路由概率，而不是总和。"),
    ], "load_balancing_loss is wrong: E * sum_i f_i * P_i with f_i the share of assignments and P_i the mean probability.",
        "load_balancing_loss 不对：E * sum_i f_i * P_i，其中 f_i 是分配比例，P_i 是平均概率。")
    grad = torch.autograd.grad(loss, probs, allow_unused=True)[0] if loss.requires_grad else None
    expected_grad = (E * counts / indices.numel() / probs.shape[0]).expand_as(probs)
    expect(grad is not None and torch.allclose(grad, expected_grad, atol=1e-5),
           "The gradient must flow through P (the mean router probability) and not through f (the counts): f and P are swapped or detached.",
           "梯度必须通过 P（平均路由概率）传播，而不是通过 f（计数）：f 与 P 弄反了，或被 detach 了。",
           "no gradient" if grad is None else f"largest gradient error {float((grad - expected_grad).abs().max()):.3g}")
    balanced = torch.full((8, 4), 0.25)
    with own_work(fn, "load_balancing_loss"):
        one = call(fn, balanced, torch.tensor([[0, 1], [2, 3]] * 4), 4, name="load_balancing_loss")
    expect_close(one.detach().reshape(()), torch.tensor(1.0), "A perfectly balanced router (k = 2) gives exactly 1.",
                 "完全均衡的路由器（k = 2）给出的结果正好是 1。")


# Gate ----------------------------------------------------------------------------------------
def restated_gate(state, x, k, groups, limited, func, scale, mistake=None):
    logits = x @ state["weight"].T
    scores = logits.sigmoid() if (func == "sigmoid") != (mistake == "softmax") else logits.softmax(-1)
    choice = scores if mistake == "bias ignored" else scores + state["bias"]
    if groups > 1 and mistake != "groups ignored":
        grouped = choice.view(x.shape[0], groups, -1)
        if func == "softmax" or mistake == "group max":
            group_scores = grouped.amax(-1)
        else:
            group_scores = grouped.topk(2, -1).values.sum(-1)
        kept = group_scores.topk(limited, -1).indices
        dropped = torch.ones_like(group_scores, dtype=torch.bool).scatter(1, kept, False)
        choice = grouped.masked_fill(dropped.unsqueeze(-1), float("-inf")).flatten(1)
    indices = choice.topk(k, -1).indices
    weights = (choice if mistake == "bias in weights" else scores).gather(1, indices)
    if func == "sigmoid" and mistake != "no renormalisation":
        weights = weights / weights.sum(-1, keepdim=True)
    return _canonical(weights * (1.0 if mistake == "no route_scale" else scale), indices)


GATE_MISTAKES = {
    "softmax": ("With score_func='sigmoid' the affinities are sigmoid(x W^T), each expert on its own, not a softmax over experts.",
                "当 score_func='sigmoid' 时，亲和度是 sigmoid(x W^T)，每个专家各自计算，而不是对专家做 softmax。"),
    "bias in weights": ("The bias only chooses experts: gather the weights from the scores WITHOUT the bias.",
                        "偏置只用于选择专家：权重要从不加偏置的分数中取。"),
    "no renormalisation": ("Sigmoid weights must be renormalised to sum 1 over the chosen experts before route_scale.",
                           "sigmoid 权重在乘 route_scale 之前，必须在被选中的专家上重新归一化使其和为 1。"),
    "no route_scale": ("The weights must be multiplied by route_scale at the end.", "权重最后必须乘以 route_scale。"),
    "group max": ("With sigmoid scores a group's score is the sum of its top-2 biased expert scores, not the max.",
                  "对 sigmoid 分数，一个组的分数是组内最高两个带偏置分数之和，而不是最大值。"),
    "groups ignored": ("Tokens were routed to groups that were not chosen: mask every expert outside the n_limited_groups best groups with -inf before the top-k.",
                       "词元被路由到了未被选中的组：在 top-k 之前，用 -inf 屏蔽最好的 n_limited_groups 个组之外的所有专家。"),
    "bias ignored": ("The bias must be added to the scores used to choose experts (scores + bias for the top-k).",
                     "选择专家所用的分数必须加上偏置（top-k 用 scores + bias）。"),
}
GATE_CONFIGS = (  # dim, E, k, groups, limited, score_func, route_scale, seed
    (12, 16, 3, 4, 2, "sigmoid", 2.5, 130),
    (10, 8, 2, 1, 1, "sigmoid", 1.0, 131),
    (12, 12, 2, 3, 1, "softmax", 1.5, 132),
    (12, 16, 4, 4, 1, "sigmoid", 1.0, 133),
)


def check_Gate(Gate):
    for dim, E, k, groups, limited, func, scale, seed in GATE_CONFIGS:
        with own_work(Gate, "Gate"):
            gate = own_module(Gate, dim, E, k, groups, limited, func, scale)
        params = dict(gate.named_parameters())
        expect("weight" in params and "bias" in params,
               "Gate needs two parameters, weight (n_routed_experts, dim) and bias (n_routed_experts,), as DeepSeek-V3's gate.",
               "Gate 需要两个参数：weight (n_routed_experts, dim) 和 bias (n_routed_experts,)，与 DeepSeek-V3 的门控一致。",
               f"parameters: {sorted(params)}")
        reference = ref.Gate(dim, E, k, groups, limited, func, scale)
        state = seeded_state(reference, seed)
        state["weight"] = state["weight"] * 2.0  # spread the scores so that the bias and the groups matter
        state["bias"] = 0.3 * torch.linspace(-1.0, 1.0, E).roll(seed % E)
        reference.load_state_dict(state)
        load_state(gate, state, "Gate")
        x = randn(24, dim, seed=seed + 10)
        with torch.no_grad(), own_work(Gate, "Gate"):
            result = call(gate, x, name="Gate.forward")
        expect(isinstance(result, tuple) and len(result) == 2, "Gate.forward must return a tuple (weights, indices).",
               "Gate.forward 必须返回一个元组 (weights, indices)。", f"got {type(result).__name__}")
        weights, indices = result
        expect(isinstance(indices, torch.Tensor) and indices.shape == (24, k) and isinstance(weights, torch.Tensor)
               and weights.shape == (24, k), "weights and indices must both be (N, n_activated_experts).",
               "weights 和 indices 的形状都必须是 (N, n_activated_experts)。",
               f"got {getattr(weights, 'shape', None)}, {getattr(indices, 'shape', None)}")
        if groups > 1:
            per_token = [len(set(row)) for row in (indices // (E // groups)).tolist()]
            expect(max(per_token) <= limited, GATE_MISTAKES["groups ignored"][0], GATE_MISTAKES["groups ignored"][1],
                   f"a token's experts lie in {max(per_token)} groups, at most {limited} allowed")
        w, i = _canonical(weights.detach().float(), indices)
        with torch.no_grad():
            rw, ri = _canonical(*reference(x))
            variants = {m: restated_gate(state, x, k, groups, limited, func, scale, m) for m in GATE_MISTAKES}
        setting = f"(score_func={func}, {groups} groups, {limited} kept, k={k}, route_scale={scale})"
        if not torch.equal(i, ri):
            for m, (vw, vi) in variants.items():
                if torch.equal(i, vi) and m not in ("bias in weights", "no renormalisation", "no route_scale"):
                    fail(*GATE_MISTAKES[m], "your chosen experts equal what that mistake chooses")
            fail(f"Gate chose the wrong experts {setting}: rank by score + bias within the kept groups.",
                 f"Gate 选错了专家 {setting}：在保留的组中按 score + bias 排序。",
                 f"token 0: got {indices[0].tolist()}, expected {ri[0].tolist()}")
        expect_known(w, rw, [(vw, *GATE_MISTAKES[m]) for m, (vw, vi) in variants.items() if torch.equal(vi, ri)],
                     f"Gate's weights are wrong {setting}: the chosen affinities (without bias), renormalised for sigmoid, times route_scale.",
                     f"Gate 的权重不对 {setting}：被选中专家的亲和度（不含偏置），sigmoid 时重新归一化，再乘以 route_scale。")


# update_expert_bias ----------------------------------------------------------------------------
def check_update_expert_bias(update_expert_bias):
    fn = update_expert_bias
    bias = torch.tensor([0.5, -0.2, 0.0, 0.1, 0.3])
    load = torch.tensor([30, 2, 11, 9, 1])  # mean 10.6: two above, three below
    with own_work(fn, "update_expert_bias"):
        got = call(fn, bias.clone(), load.clone(), 0.05, name="update_expert_bias")
    expect_tensor(got, "The new bias", "新的偏置")
    want = ref.update_expert_bias(bias, load, 0.05)
    sign = torch.sign(load.float() - load.float().mean())
    expect_known(got, want, [
        (bias + 0.05 * sign, "The sign is reversed: overloaded experts must LOSE gamma (be chosen less), underloaded ones gain it.",
         "符号反了：过载的专家必须减去 gamma（更少被选中），负载不足的专家加上 gamma。"),
        (bias - 0.05 * (load.float() - load.float().mean()), "The bias moves by exactly gamma (the sign of the load's difference from the mean), not in proportion to it.",
         "偏置每次正好移动 gamma（负载与平均值之差的符号），而不是与差值成比例。"),
        (-0.05 * sign, "Start from the current bias: return bias - gamma * sign(load - mean), not a fresh one.",
         "要从当前的偏置出发：返回 bias - gamma * sign(load - mean)，而不是一个新的偏置。"),
    ], "update_expert_bias is wrong: minus gamma above the mean load, plus gamma below.",
        "update_expert_bias 不对：高于平均负载减去 gamma，低于平均负载加上 gamma。")
    with own_work(fn, "update_expert_bias"):
        default = call(fn, torch.zeros(3), torch.tensor([5, 0, 1]), name="update_expert_bias")
    expect_close(default, torch.tensor([-0.001, 0.001, 0.001]), "The default gamma is 0.001, DeepSeek-V3's.",
                 "gamma 的默认值是 DeepSeek-V3 的 0.001。")


# MoE ---------------------------------------------------------------------------------------------
def _count_calls(modules):
    """Count the experts' forward calls and the token rows they receive."""
    counter = {"calls": 0, "rows": 0}

    def hook(module, inputs, output):
        counter["calls"] += 1
        counter["rows"] += inputs[0].shape[:-1].numel() if inputs and isinstance(inputs[0], torch.Tensor) else 0
    return counter, [m.register_forward_hook(hook) for m in modules]


DROPS = ("Your MoE drops or overwrites tokens: each token must get all its k expert outputs, however crowded an expert is (add with index_add_, never assign, no capacity limit).",
         "你的 MoE 丢弃或覆盖了词元：无论专家多拥挤，每个词元都必须得到它全部 k 个专家的输出（用 index_add_ 累加，不要赋值，不设容量上限）。")


def _drops_assignments(out, reference, x) -> bool:
    """Does every token's output equal the shared part plus SOME of its k weighted expert outputs,
    with at least one token missing one?"""
    flat, got = x.reshape(-1, x.shape[-1]), out.detach().reshape(-1, x.shape[-1])
    weights, indices = reference.gate(flat)
    shared = reference.shared_experts(flat)
    k, missing = indices.shape[1], False
    for t in range(flat.shape[0]):
        parts = torch.stack([reference.experts[e](flat[t]) * w for w, e in zip(weights[t], indices[t].tolist())])
        subsets = [[(m >> j) & 1 for j in range(k)] for m in range(2 ** k)]
        hit = [sub for sub in subsets if torch.allclose(got[t], shared[t] + (torch.tensor(sub, dtype=parts.dtype) @ parts), atol=1e-5)]
        if not hit:
            return False
        missing |= all(0 in sub for sub in hit)
    return missing


def check_MoE(MoE):
    dim, inter, E, k, shared, groups, limited, scale = 12, 6, 8, 2, 2, 4, 2, 2.0
    with own_work(MoE, "MoE"):
        moe = own_module(MoE, dim, inter, E, k, shared, groups, limited, "sigmoid", scale)
    experts = getattr(moe, "experts", None)
    expect(isinstance(experts, nn.ModuleList) and len(experts) == E,
           "experts must be an nn.ModuleList of n_routed_experts Expert modules.", "experts 必须是由 n_routed_experts 个 Expert 组成的 nn.ModuleList。",
           f"got {type(experts).__name__}")
    shared_expert = getattr(moe, "shared_experts", None)
    expect(isinstance(shared_expert, nn.Module),
           "With n_shared_experts > 0 the MoE needs shared_experts: one Expert(dim, n_shared_experts * moe_inter_dim) that every token goes through.",
           "当 n_shared_experts > 0 时，MoE 需要 shared_experts：一个 Expert(dim, n_shared_experts * moe_inter_dim)，每个词元都会经过它。")
    with own_work(MoE, "MoE"):
        plain = own_module(MoE, dim, inter, E, k)
    expect(getattr(plain, "shared_experts", None) is None, "With n_shared_experts=0, shared_experts must be None.",
           "当 n_shared_experts=0 时，shared_experts 必须为 None。")
    reference = ref.MoE(dim, inter, E, k, shared, groups, limited, "sigmoid", scale)
    state = seeded_state(reference, 140)
    state["gate.weight"] = state["gate.weight"] * 2.0
    reference.load_state_dict(state)
    load_state(moe, state, "MoE")
    x = randn(2, 7, dim, seed=141)
    counter, hooks = _count_calls(list(experts))
    try:
        with torch.no_grad(), own_work(MoE, "MoE"):
            out = call(moe, x, name="MoE.forward")
    finally:
        for h in hooks:
            h.remove()
    expect_tensor(out, "The MoE's output", "MoE 的输出")
    with torch.no_grad():
        want = reference(x)
        flat = x.reshape(-1, dim)
        routed = want - reference.shared_experts(x)
        if out.shape == want.shape and not matches(out, want) and _drops_assignments(out, reference, x):
            fail(*DROPS)
    expect_known(out, want, [
        (routed, "The shared experts are left out: add shared_experts(x) to the routed output for every token.",
         "漏掉了共享专家：对每个词元，把 shared_experts(x) 加到路由输出上。"),
    ], "MoE's output is wrong: for each token, sum its k experts' outputs times the gate's weights, plus the shared experts.",
        "MoE 的输出不对：对每个词元，把它的 k 个专家的输出乘以门控权重后求和，再加上共享专家。")
    expect(counter["calls"] <= E * k,
           "Dispatch without a Python loop over tokens: run each expert once on all the tokens routed to it (group them by expert, then index_add_).",
           "分派时不要对词元做 Python 循环：每个专家在路由给它的所有词元上只运行一次（按专家分组，再用 index_add_）。",
           f"{counter['calls']} expert calls for {flat.shape[0]} tokens and {E} experts")
    expect(counter["rows"] <= flat.shape[0] * k,
           "Each routed expert runs only on the tokens routed to it (N * k rows in all), not on every token: that is what makes the layer sparse.",
           "每个路由专家只在路由给它的词元上运行（总共 N * k 行），而不是在所有词元上运行：这正是该层稀疏的原因。",
           f"the experts processed {counter['rows']} rows for {flat.shape[0]} tokens with k={k}")
    crowded = dict(state)
    crowded["gate.bias"] = torch.tensor([5.0, 5.0] + [0.0] * (E - 2))  # every token picks experts 0 and 1
    reference.load_state_dict(crowded)
    load_state(moe, crowded, "MoE")
    with torch.no_grad(), own_work(MoE, "MoE"):
        out = call(moe, x, name="MoE.forward")
    expect_close(out, reference(x).detach(), *DROPS)


# moe_parameter_counts -------------------------------------------------------------------------------
def check_moe_parameter_counts(moe_parameter_counts):
    fn = moe_parameter_counts
    for args in ((7168, 2048, 256, 8, 1), (5120, 1536, 160, 6, 2), (12, 5, 8, 2, 0), (10, 3, 6, 1, 3)):
        with own_work(fn, "moe_parameter_counts"):
            got = call(fn, *args, name="moe_parameter_counts")
        want = ref.moe_parameter_counts(*args)
        expect(isinstance(got, tuple) and len(got) == 2, "moe_parameter_counts must return a tuple (total, active).",
               "moe_parameter_counts 必须返回一个元组 (total, active)。", f"got {got!r}")
        if tuple(got) == tuple(want):
            continue
        dim, inter, E, k, shared = args
        expert, gate = 3 * dim * inter, E * dim + E
        total, active = want
        for pair, en, zh in (
            ((total - gate, active - gate), "The gate is part of the layer: count its weight (n_routed_experts x dim) and its bias (n_routed_experts).",
             "门控是层的一部分：计入它的 weight（n_routed_experts x dim）和 bias（n_routed_experts）。"),
            ((total - E, active - E), "The gate's bias (n_routed_experts numbers) is a parameter too: count it.", "门控的偏置（n_routed_experts 个数）也是参数：要计入。"),
            ((total, active - gate), "The gate scores every expert for every token: count the whole gate as active.", "门控要为每个词元给每个专家打分：整个门控都算作激活参数。"),
            ((total - shared * expert, active - shared * expert), "Shared experts count in both numbers: every token uses them.", "共享专家在两个数中都要计入：每个词元都会用到它们。"),
            ((total, active - shared * expert), "Shared experts are active for every token: add them to the active count.", "共享专家对每个词元都是激活的：把它们加到激活数中。"),
            ((total, total), "Active counts only the experts a token uses: n_activated_experts routed ones plus the shared ones (and the gate).",
             "激活参数只计一个词元用到的专家：n_activated_experts 个路由专家加上共享专家（以及门控）。"),
            ((total - (E + shared) * dim * inter, active - (k + shared) * dim * inter), "An expert has three matrices of dim x moe_inter_dim (w1, w2, w3).",
             "一个专家有三个 dim x moe_inter_dim 矩阵（w1、w2、w3）。"),
        ):
            if tuple(got) == pair:
                fail(en, zh, f"got {tuple(got)}, expected {want}")
        fail(f"moe_parameter_counts{args} is wrong: total = (routed + shared) experts x 3 x dim x moe_inter_dim + the gate; active = (activated + shared) experts + the gate.",
             f"moe_parameter_counts{args} 不对：total = (路由 + 共享) 专家数 x 3 x dim x moe_inter_dim + 门控；active = (激活 + 共享) 专家数 + 门控。",
             f"got {tuple(got)}, expected {want}")
