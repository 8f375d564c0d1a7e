import torch
import torch.nn.functional as F

from utils import moe as M


def v3_gate(x, weight, bias, k, n_groups, topk_groups, score_func, route_scale):
    """DeepSeek-V3's Gate.forward, restated from its inference code for an independent check."""
    s = x @ weight.T
    s = s.softmax(-1) if score_func == "softmax" else s.sigmoid()
    original = s
    s = s + bias
    if n_groups > 1:
        s = s.view(x.size(0), n_groups, -1)
        g = s.amax(-1) if score_func == "softmax" else s.topk(2, -1)[0].sum(-1)
        chosen = g.topk(topk_groups, -1)[1]
        blocked = s.new_ones(x.size(0), n_groups, dtype=torch.bool).scatter_(1, chosen, False)
        s = s.masked_fill(blocked.unsqueeze(-1), float("-inf")).flatten(1)
    idx = s.topk(k, -1)[1]
    w = original.gather(1, idx)
    if score_func == "sigmoid":
        w = w / w.sum(-1, keepdim=True)
    return w * route_scale, idx


def v3_moe(moe, x):
    """DeepSeek-V3's MoE.forward: a loop over experts with torch.where."""
    w, idx = moe.gate(x)
    y = torch.zeros_like(x)
    for i, expert in enumerate(moe.experts):
        rows, slot = torch.where(idx == i)
        y[rows] += expert(x[rows]) * w[rows, slot, None]
    return y + moe.shared_experts(x)


def deepseek_state(module, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=g) / (v.shape[-1] ** 0.5 if v.dim() > 1 else 10) for k, v in module.state_dict().items()}


def test_expert_is_swiglu():
    e = M.Expert(6, 10)
    x = torch.randn(4, 6)
    torch.testing.assert_close(e(x), (F.silu(x @ e.w1.weight.T) * (x @ e.w3.weight.T)) @ e.w2.weight.T)
    assert all(layer.bias is None for layer in (e.w1, e.w2, e.w3))


def test_topk_router():
    logits = torch.randn(7, 5)
    w, idx = M.topk_router(logits, 2)
    torch.testing.assert_close(w.sum(-1), torch.ones(7))
    p = logits.softmax(-1)
    top = p.topk(2, -1)
    assert torch.equal(idx, top.indices)
    torch.testing.assert_close(w, top.values / top.values.sum(-1, keepdim=True))


def test_load_balancing_loss_balanced_and_collapsed():
    E = 4
    probs = torch.full((8, E), 1 / E)
    idx = torch.arange(8).remainder(E).view(8, 1)
    torch.testing.assert_close(M.load_balancing_loss(probs, idx, E), torch.tensor(1.0))
    collapsed = torch.zeros(8, E)
    collapsed[:, 0] = 1
    torch.testing.assert_close(M.load_balancing_loss(collapsed, torch.zeros(8, 2, dtype=torch.long), E), torch.tensor(float(E)))
    logits = torch.randn(8, E, requires_grad=True)
    M.load_balancing_loss(logits.softmax(-1), logits.topk(2, -1).indices, E).backward()
    assert logits.grad.abs().sum() > 0


def test_gate_matches_deepseek_v3_in_its_layout():
    for groups, limited, func, scale in ((4, 2, "sigmoid", 2.5), (1, 1, "sigmoid", 1.0), (4, 2, "softmax", 1.0)):
        gate = M.Gate(12, 16, 3, groups, limited, func, scale)
        state = deepseek_state(gate, seed=groups)
        gate.load_state_dict(state)
        x = torch.randn(9, 12)
        w, idx = gate(x)
        w_ref, idx_ref = v3_gate(x, state["weight"], state["bias"], 3, groups, limited, func, scale)
        assert torch.equal(idx, idx_ref)
        torch.testing.assert_close(w, w_ref)
        if func == "sigmoid":
            torch.testing.assert_close(w.sum(-1), torch.full((9,), scale))
        if groups > 1:  # every chosen expert lies in one of the `limited` chosen groups
            assert all(len(set(r.tolist())) <= limited for r in idx // (16 // groups))


def test_bias_chooses_but_never_weights():
    gate = M.Gate(8, 6, 2)
    x = torch.randn(5, 8)
    with torch.no_grad():
        gate.bias.copy_(torch.tensor([10.0, 10.0, 0, 0, 0, 0]))  # forces experts 0 and 1
    w, idx = gate(x)
    assert set(idx.flatten().tolist()) == {0, 1}
    s = (x @ gate.weight.T).sigmoid().gather(1, idx)  # the bias of 10 is nowhere in the weights
    torch.testing.assert_close(w, s / s.sum(-1, keepdim=True))


def test_update_expert_bias_moves_against_load():
    bias = torch.zeros(4)
    new = M.update_expert_bias(bias, torch.tensor([10, 2, 4, 4]), gamma=0.1)
    torch.testing.assert_close(new, torch.tensor([-0.1, 0.1, 0.1, 0.1]))
    assert torch.equal(bias, torch.zeros(4))


def test_moe_matches_deepseek_v3_loop_and_per_token_loop():
    moe = M.MoE(10, 6, 8, 3, n_shared_experts=2, n_expert_groups=4, n_limited_groups=2, route_scale=2.5)
    moe.load_state_dict(deepseek_state(moe, seed=3))
    assert set(moe.state_dict()) >= {"gate.weight", "gate.bias", "experts.7.w3.weight", "shared_experts.w2.weight"}
    assert moe.shared_experts.w1.weight.shape == (12, 10)
    x = torch.randn(2, 7, 10)
    with torch.no_grad():
        y = moe(x)
        torch.testing.assert_close(y, v3_moe(moe, x.view(-1, 10)).view(2, 7, 10))
        torch.testing.assert_close(y.view(-1, 10), M.moe_forward_per_token(moe, x))


def test_moe_drops_no_token_when_one_expert_takes_all():
    moe = M.MoE(6, 4, 4, 1)
    with torch.no_grad():
        moe.gate.bias.copy_(torch.tensor([100.0, 0, 0, 0]))
    x = torch.randn(20, 6)
    torch.testing.assert_close(moe(x), moe.experts[0](x))


def test_parameter_counts_match_module_and_deepseek_v3():
    moe = M.MoE(12, 5, 8, 2, n_shared_experts=1)
    total, active = M.moe_parameter_counts(12, 5, 8, 2, 1)
    assert total == sum(p.numel() for p in moe.parameters())
    assert active == total - 6 * 3 * 12 * 5
    total, active = M.moe_parameter_counts(7168, 2048, 256, 8, 1)
    assert (total, active) == (257 * 3 * 7168 * 2048 + 256 * 7169, 9 * 3 * 7168 * 2048 + 256 * 7169)


def test_dispatch_benchmark_runs_and_agrees():
    r = M.dispatch_benchmark(tokens=64, dim=8, moe_inter_dim=4, n_routed_experts=8, n_activated_experts=2, repeats=1)
    assert r["speedup"] > 0
