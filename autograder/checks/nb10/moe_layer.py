"""Notebook 10's MoE layer, graded beyond its output: built with the course's Gate and Expert,
sparse by what it computes, any (..., dim) layout, and a gradient that reaches the gate; and the
learner's Gate built, loaded with the course's weights and run (`gate_result`).

`autograder.checks.nb10.check_MoE` and `check_Gate` call these; they raise the same AssertionErrors as any check.
"""
import torch
from torch import nn

import utils.moe as ref
from autograder.checks import CheckFailed, Shortcut, call, expect, expect_close, fail, load_state, own_module, own_work, randn, seeded_state
from autograder.checks.nb10.moe_probes import course_parts, gate_grad, gate_state, measure, sparse_budget

MOE_SIZES = dict(dim=12, inter=6, E=8, k=2, shared=2, groups=4, limited=2, scale=2.0)


def moe_modules(MoE):
    """The learner's MoE (built with the course's Gate and Expert) and the course's, same weights."""
    c = MOE_SIZES
    args = (c["dim"], c["inter"], c["E"], c["k"], c["shared"], c["groups"], c["limited"], "sigmoid", c["scale"])
    with own_work(MoE, "MoE"), course_parts(MoE):
        moe = own_module(MoE, *args)
        plain = own_module(MoE, c["dim"], c["inter"], c["E"], c["k"])
    experts = getattr(moe, "experts", None)
    expect(isinstance(experts, nn.ModuleList) and len(experts) == c["E"],
           "experts must be an nn.ModuleList of n_routed_experts Expert modules.", "experts 必须是由 n_routed_experts 个 Expert 组成的 nn.ModuleList。",
           f"got {type(experts).__name__}")
    expect(isinstance(getattr(moe, "shared_experts", None), nn.Module),
           "With n_shared_experts > 0 the MoE needs shared_experts: one Expert(dim, n_shared_experts * moe_inter_dim) that every token goes through.",
           "当 n_shared_experts > 0 时，MoE 需要 shared_experts：一个 Expert(dim, n_shared_experts * moe_inter_dim)，每个词元都会经过它。")
    expect(getattr(plain, "shared_experts", None) is None, "With n_shared_experts=0, shared_experts must be None.",
           "当 n_shared_experts=0 时，shared_experts 必须为 None。")
    reference = ref.MoE(*args)
    state = seeded_state(reference, 140)
    state["gate.weight"] = state["gate.weight"] * 2.0
    reference.load_state_dict(state)
    load_state(moe, state, "MoE")
    return moe, reference, state


def run_moe(MoE, moe, x, grad=False):
    with torch.set_grad_enabled(grad), own_work(MoE, "MoE"), course_parts(MoE):
        return call(moe, x, name="MoE.forward")


def check_sparse(MoE, moe):
    c = MOE_SIZES
    x = randn(4, 8, c["dim"], seed=142)
    N = x.shape[0] * x.shape[1]
    with torch.no_grad(), own_work(MoE, "MoE"), course_parts(MoE):
        macs, calls = measure(moe, x)
    budget_macs, budget_calls = sparse_budget(N, c["dim"], c["inter"], c["E"], c["k"], c["shared"] * c["inter"])
    expect(calls <= budget_calls,
           "Dispatch without a Python loop over tokens: run each expert once on all the tokens routed to it (group them by expert, then index_add_).",
           "分派时不要对词元做 Python 循环：每个专家在路由给它的所有词元上只运行一次（按专家分组，再用 index_add_）。",
           f"{calls} matrix products for {N} tokens and {c['E']} experts, at most {budget_calls} needed")
    expect(macs <= budget_macs,
           "Each routed expert runs only on the tokens routed to it (N * k rows in all), not on every token: that is what makes the layer sparse.",
           "每个路由专家只在路由给它的词元上运行（总共 N * k 行），而不是在所有词元上运行：这正是该层稀疏的原因。",
           f"{macs} multiply-adds for {N} tokens with k={c['k']}, a sparse layer needs at most {budget_macs}")


def check_layouts(MoE, moe, x, want):
    """Any (..., dim) input: a non-contiguous one, and a single token without a batch."""
    strided = x.transpose(0, 1).contiguous().transpose(0, 1)  # same values, not contiguous
    try:
        with torch.no_grad(), own_work(MoE, "MoE"), course_parts(MoE):
            out = moe(strided)
    except (Shortcut, CheckFailed):
        raise
    except Exception as e:  # the same values, contiguous, ran above
        fail("MoE.forward fails on a non-contiguous input: flatten the leading dimensions with reshape, not view.",
             "MoE.forward 在非连续输入上出错：用 reshape 而不是 view 来展平前导维度。", f"{type(e).__name__}: {e}")
    expect_close(out, want, "MoE.forward gives other outputs for the same values stored non-contiguously.",
                 "同样的数值以非连续方式存储时，MoE.forward 给出了不同的输出。")
    with torch.no_grad():
        expect_close(run_moe(MoE, moe, x[0, 0]), want[0, 0], "MoE.forward must take any (..., dim) input, a single token (dim,) too.",
                     "MoE.forward 必须接受任意 (..., dim) 的输入，包括单个词元 (dim,)。")


def check_gate_gradient(MoE, moe, reference, x):
    probe = randn(*x.shape, seed=143)
    try:
        with own_work(MoE, "MoE"), course_parts(MoE):
            got = gate_grad(moe, x, probe)
    except RuntimeError as e:  # the output does not require grad at all
        got = None if "does not require grad" in str(e) else fail(
            "MoE.forward's output cannot be backpropagated through: check for in-place writes into tensors autograd needs.",
            "无法对 MoE.forward 的输出做反向传播：检查是否对自动求导需要的张量做了原地写入。", f"{type(e).__name__}: {e}")
    want = gate_grad(reference, x, probe)
    expect(got is not None and torch.allclose(got, want, atol=1e-5, rtol=1e-4),
           "No gradient (or a wrong one) reaches the gate through the routing weights: keep the weights in the graph (no .detach(), .item() or torch.no_grad() in forward).",
           "没有梯度（或梯度不对）通过路由权重传到路由门控：让权重留在计算图中（forward 中不要用 .detach()、.item() 或 torch.no_grad()）。",
           "no gradient" if got is None else f"largest difference {float((got - want).abs().max()):.3g}")


def gate_result(Gate, args, x, grad=False):
    """Build the learner's gate with `args`, load the course's weights for them, run it on x;
    (weights, indices, the state loaded, the gate)."""
    dim, E, k, groups, limited, func, scale, seed = args
    with own_work(Gate, "Gate"):
        gate = own_module(Gate, dim, E, k, groups, limited, func, scale)
    params = dict(gate.named_parameters())
    expect("weight" in params and "bias" in params,
           "Gate needs two parameters, weight (n_routed_experts, dim) and bias (n_routed_experts,), as DeepSeek-V3's gate.",
           "Gate 需要两个参数：weight (n_routed_experts, dim) 和 bias (n_routed_experts,)，与 DeepSeek-V3 的路由门控一致。",
           f"parameters: {sorted(params)}")
    state = gate_state(ref.Gate(dim, E, k, groups, limited, func, scale), seed)
    load_state(gate, state, "Gate")
    gate = gate.to(x.dtype)
    with torch.set_grad_enabled(grad), own_work(Gate, "Gate"):
        result = call(gate, x, name="Gate.forward")
    expect(isinstance(result, tuple) and len(result) == 2, "Gate.forward must return a tuple (weights, indices).",
           "Gate.forward 必须返回一个元组 (weights, indices)。", f"got {type(result).__name__}")
    weights, indices = result
    N = x.shape[0]
    expect(isinstance(indices, torch.Tensor) and indices.shape == (N, k) and not indices.is_floating_point()
           and isinstance(weights, torch.Tensor) and weights.shape == (N, k),
           "weights and indices must both be (N, n_activated_experts), indices as integers.",
           "weights 和 indices 的形状都必须是 (N, n_activated_experts)，indices 为整数。",
           f"got {getattr(weights, 'shape', None)}, {getattr(indices, 'shape', None)}")
    return weights, indices, state, gate
