"""Hidden checks of notebook 10, mixture of experts.

Weights are state_dicts in DeepSeek-V3's layout (`weight`, `bias` of the gate; `experts.{i}.w1/w2/w3`;
`shared_experts.w1/w2/w3`), built from seeds by parameter name and loaded into the learner's
modules, then compared with utils.moe. Routing results are compared as sets per token (the order
of a token's k experts is free). When a result differs, restatements with one known mistake at
a time name it (autograder/checks/nb10/moe_probes.py).

Decisions:
- `MoE` is graded with the course's Gate and Expert in place of the learner's (put back
  afterwards), so a mistake in those costs points once, in their own exercise.
- Sparsity is graded by what the layer computes (multiply-adds and matrix-product calls, counted
  by autograder/checks/core/cost.py), not by which modules it calls.
"""
import torch
import torch.nn.functional as F
from torch import nn

import utils.moe as ref
from autograder.checks import (graded_checks, call, expect, expect_close, expect_known, expect_tensor, fail, load_state, matches, own_module,
                               own_work, randn, seeded_state)
from autograder.checks.nb04.causal_layers import converted, split_dtypes
from autograder.checks.nb10.contract import FAMILIES
from autograder.checks.nb10.moe_layer import MOE_SIZES, check_gate_gradient, check_layouts, check_sparse, gate_result, moe_modules, run_moe
from autograder.checks.nb10.moe_probes import (CHOICE_MISTAKES, DROPS, GATE_CONFIGS, GATE_MISTAKES, ROUTER_GRAD, bias_mistakes, canonical,
                                          count_mistakes, course_parts, drops_assignments, restated_gate, routing_grad)
from autograder.checks.core.harness import same_as_reference, same_as_reference_module


def _routed(result):
    """(weights, indices) with each token's experts sorted by number: the order of a token's k is free."""
    if (isinstance(result, tuple) and len(result) == 2 and all(isinstance(t, torch.Tensor) for t in result)
            and result[0].dim() == 2 and result[0].shape == result[1].shape and not result[1].is_floating_point()):
        return canonical(*result)
    return result


def _scalar(loss):
    """One number, whatever its shape (a scalar or (1,))."""
    return loss.reshape(()) if isinstance(loss, torch.Tensor) and loss.numel() == 1 else loss


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
    # a model moved to another dtype (model.double()) computes in it: the dtype members run on
    # experts built by causal_layers.converted, the learner's and the course's alike
    plain, typed = split_dtypes(FAMILIES["Expert"])
    reference, references = ref.Expert, {dtype: converted(ref.Expert, dtype) for dtype, _ in typed}  # looked up before own_work
    with own_work(Expert, "Expert"):
        same_as_reference_module(Expert, reference, (6, 10), plain, "Expert", grads=True)
        for dtype, family in typed:
            same_as_reference_module(converted(Expert, dtype), references[dtype], (6, 10), family, "Expert", grads=True)


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
    w, i = canonical(weights.detach(), indices)
    rw, ri = canonical(right_w, right_i)
    expect(torch.equal(i, ri), "The chosen experts must be the k with the largest probabilities (topk over the expert axis).",
           "被选中的专家必须是概率最大的 k 个（沿专家轴做 topk）。", f"got {indices.tolist()[:2]}, expected {right_i.tolist()[:2]}")
    probs = torch.softmax(logits, -1)
    top = probs.gather(1, right_i)
    expect_known(w, rw, [
        (canonical(top, right_i)[0], "The kept probabilities must be renormalised to sum 1: divide by their sum.",
         "保留下来的概率必须重新归一化使其和为 1：除以它们的和。"),
        (canonical(logits.gather(1, right_i), right_i)[0], "The weights are probabilities: a softmax over all experts, then the top k, renormalised.",
         "权重是概率：先对所有专家做 softmax，再取前 k 个并重新归一化。"),
    ], "topk_router's weights are wrong: softmax over all experts, keep the top k, divide them by their sum.",
        "topk_router 的权重不对：对所有专家做 softmax，保留前 k 个，再除以它们的和。")
    leaf, probe = logits.clone().requires_grad_(True), randn(7, 3, seed=111)
    with own_work(topk_router, "topk_router"):
        got = routing_grad(*call(topk_router, leaf, 3, name="topk_router"), leaf, probe)
    expect(got is not None, *ROUTER_GRAD, "no gradient reached the logits")
    expect_close(got, routing_grad(*ref.topk_router(leaf, 3), leaf, probe), *ROUTER_GRAD)
    reference = ref.topk_router  # looked up before own_work blocks it
    with own_work(topk_router, "topk_router"):
        same_as_reference(topk_router, reference, FAMILIES["topk_router"], "topk_router", grads=True, view=_routed)


# load_balancing_loss -------------------------------------------------------------------------
def check_load_balancing_loss(load_balancing_loss):
    fn, E, k = load_balancing_loss, 6, 2
    logits = randn(10, E, seed=120) * 2
    logits[:, 0] += 2.0  # an uneven router
    probs = torch.softmax(logits, -1).requires_grad_(True)
    steer = torch.zeros(E)
    steer[1] = 0.3  # the choice was made with a bias (as DeepSeek's is): not the top-k of router_probs
    indices = (probs.detach() + steer).topk(k, -1).indices
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
        (ref.load_balancing_loss(probs.detach(), probs.detach().topk(k, -1).indices, E),
         "f_i counts the assignments you are given in expert_indices; do not choose the experts again from router_probs (the router may have chosen with a bias).",
         "f_i 统计的是传入的 expert_indices 中的分配；不要根据 router_probs 重新选择专家（路由器可能是带偏置选择的）。"),
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
    reference = ref.load_balancing_loss  # looked up before own_work blocks it
    with own_work(fn, "load_balancing_loss"):
        same_as_reference(fn, reference, FAMILIES["load_balancing_loss"], "load_balancing_loss", grads=True, view=_scalar)


# Gate ----------------------------------------------------------------------------------------
def check_Gate(Gate):
    for args in GATE_CONFIGS:
        dim, E, k, groups, limited, func, scale, seed = args
        x = randn(24, dim, seed=seed + 10)
        weights, indices, state, _ = gate_result(Gate, args, x)
        with torch.no_grad():
            variants = {m: restated_gate(state, x, k, groups, limited, func, scale, m) for m in GATE_MISTAKES}
            reference = ref.Gate(*args[:7])
            reference.load_state_dict(state)
            rw, ri = canonical(*reference(x))
        if groups > 1:
            per_token = [len(set(row)) for row in (indices // (E // groups)).tolist()]
            expect(max(per_token) <= limited, *GATE_MISTAKES["groups ignored"],
                   f"a token's experts lie in {max(per_token)} groups, at most {limited} allowed")
        w, i = canonical(weights.detach().float(), indices)
        setting = f"(score_func={func}, {groups} groups, {limited} kept, k={k}, route_scale={scale})"
        if not torch.equal(i, ri):
            for m in CHOICE_MISTAKES:
                if torch.equal(i, variants[m][1]):
                    fail(*GATE_MISTAKES[m], f"{setting}: your chosen experts equal what that mistake chooses")
            fail(f"Gate chose the wrong experts {setting}: rank by score + bias within the kept groups.",
                 f"Gate 选错了专家 {setting}：在保留的组中按 score + bias 排序。",
                 f"token 0: got {indices[0].tolist()}, expected {ri[0].tolist()}")
        expect_known(w, rw, [(vw, *GATE_MISTAKES[m]) for m, (vw, vi) in variants.items() if torch.equal(vi, ri)],
                     f"Gate's weights are wrong {setting}: the chosen affinities (without bias), renormalised for sigmoid, times route_scale.",
                     f"Gate 的权重不对 {setting}：被选中专家的亲和度（不含偏置），sigmoid 时重新归一化，再乘以 route_scale。")
    args = GATE_CONFIGS[0]
    x = randn(24, args[0], seed=150).double()  # weights come back in x's dtype
    weights, indices, _, _ = gate_result(Gate, args, x)
    expect(weights.dtype == torch.float64, "Gate's weights must come back in x's dtype (weights.type_as(x)), here float64.",
           "Gate 的权重必须以 x 的 dtype 返回（weights.type_as(x)），这里是 float64。", f"got {weights.dtype}")
    x, probe = randn(24, args[0], seed=151), randn(24, args[2], seed=152)
    weights, indices, state, gate = gate_result(Gate, args, x, grad=True)
    reference = ref.Gate(*args[:7])
    reference.load_state_dict(state)
    with own_work(Gate, "Gate"):
        got = routing_grad(weights, indices, gate.weight, probe)
    expect(got is not None, *ROUTER_GRAD, "no gradient reached Gate.weight")
    expect_close(got, routing_grad(*reference(x), reference.weight, probe), *ROUTER_GRAD)
    reference = ref.Gate  # looked up before own_work blocks it
    with own_work(Gate, "Gate"):  # the space's points bring their own configurations
        same_as_reference_module(Gate, reference, (12, 16, 3, 4, 2, "sigmoid", 2.5), FAMILIES["Gate"], "Gate", grads=True, view=_routed)


# update_expert_bias ----------------------------------------------------------------------------
def check_update_expert_bias(update_expert_bias):
    fn = update_expert_bias
    bias = torch.tensor([0.5, -0.2, 0.0, 0.1, 0.3])
    for load in (torch.tensor([30, 2, 10, 9, 2]),  # mean 10.6: one expert at its floor, 10
                 torch.tensor([4, 8, 2, 4, 2])):  # mean 4: two experts exactly at it
        with own_work(fn, "update_expert_bias"):
            got = call(fn, bias.clone(), load.clone(), 0.05, name="update_expert_bias")
        expect_tensor(got, "The new bias", "新的偏置")
        expect_known(got, ref.update_expert_bias(bias, load, 0.05), bias_mistakes(bias, load, 0.05),
                     "update_expert_bias is wrong: minus gamma above the mean load, plus gamma below, unchanged at the mean.",
                     "update_expert_bias 不对：高于平均负载减去 gamma，低于平均负载加上 gamma，等于平均值时不变。")
    with own_work(fn, "update_expert_bias"):
        default = call(fn, torch.zeros(3), torch.tensor([5, 0, 1]), name="update_expert_bias")
    expect_close(default, torch.tensor([-0.001, 0.001, 0.001]), "The default gamma is 0.001, DeepSeek-V3's.",
                 "gamma 的默认值是 DeepSeek-V3 的 0.001。")
    reference = ref.update_expert_bias  # looked up before own_work blocks it
    with own_work(fn, "update_expert_bias"):
        same_as_reference(fn, reference, FAMILIES["update_expert_bias"], "update_expert_bias")


# MoE ---------------------------------------------------------------------------------------------
def check_MoE(MoE):
    moe, reference, state = moe_modules(MoE)
    x = randn(2, 7, MOE_SIZES["dim"], seed=141)
    out = run_moe(MoE, moe, x)
    expect_tensor(out, "The MoE's output", "MoE 的输出")
    with torch.no_grad():
        want = reference(x)
        if out.shape == want.shape and not matches(out, want) and drops_assignments(out, reference, x):
            fail(*DROPS)
        routed = want - reference.shared_experts(x)
    expect_known(out, want, [
        (routed, "The shared experts are left out: add shared_experts(x) to the routed output for every token.",
         "漏掉了共享专家：对每个词元，把 shared_experts(x) 加到路由输出上。"),
    ], "MoE's output is wrong: for each token, sum its k experts' outputs times the gate's weights, plus the shared experts.",
        "MoE 的输出不对：对每个词元，把它的 k 个专家的输出乘以路由门控权重后求和，再加上共享专家。")
    check_sparse(MoE, moe)
    check_layouts(MoE, moe, x, want)
    check_gate_gradient(MoE, moe, reference, x)
    crowded = dict(state)
    crowded["gate.bias"] = torch.tensor([5.0, 5.0] + [0.0] * (MOE_SIZES["E"] - 2))  # every token picks experts 0 and 1
    reference.load_state_dict(crowded)
    load_state(moe, crowded, "MoE")
    expect_close(run_moe(MoE, moe, x), reference(x).detach(), *DROPS)
    c, reference = MOE_SIZES, ref.MoE  # looked up before own_work blocks it
    ctor = (c["dim"], c["inter"], c["E"], c["k"], c["shared"], c["groups"], c["limited"], "sigmoid", c["scale"])
    with own_work(MoE, "MoE"), course_parts(MoE):  # the course's Gate and Expert, as above
        same_as_reference_module(MoE, reference, ctor, FAMILIES["MoE"], "MoE", grads=True, state_seed=140)


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
        for pair, en, zh in count_mistakes(args, want):
            if tuple(got) == pair:
                fail(en, zh, f"got {tuple(got)}, expected {want}")
        fail(f"moe_parameter_counts{args} is wrong: total = (routed + shared) experts x 3 x dim x moe_inter_dim + the gate; active = (activated + shared) experts + the gate.",
             f"moe_parameter_counts{args} 不对：total = (路由 + 共享) 专家数 x 3 x dim x moe_inter_dim + 路由门控；active = (激活 + 共享) 专家数 + 路由门控。",
             f"got {tuple(got)}, expected {want}")
    reference = ref.moe_parameter_counts  # looked up before own_work blocks it
    with own_work(fn, "moe_parameter_counts"):
        same_as_reference(fn, reference, FAMILIES["moe_parameter_counts"], "moe_parameter_counts",
                          view=lambda counts: tuple(counts) if isinstance(counts, (tuple, list)) else counts)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
