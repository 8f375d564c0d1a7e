"""autograder/checks/core/cost.py counts what torch's own FLOP counter counts, without its imports."""
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from autograder.checks.core.cost import MatmulCost

g = torch.Generator().manual_seed(0)
a, b = torch.randn(5, 6, generator=g), torch.randn(6, 7, generator=g)
x3, w = torch.randn(2, 5, 6, generator=g), torch.randn(4, 6, generator=g)
q, k, v = (torch.randn(2, 3, 4, 8, generator=g) for _ in range(3))
v16 = torch.randn(2, 3, 4, 16, generator=g)
kg, vg = torch.randn(2, 1, 9, 8, generator=g), torch.randn(2, 1, 9, 8, generator=g)
bb = torch.randn(2, 6, 7, generator=g)
vec = torch.randn(6, generator=g)
layer = torch.nn.Linear(6, 3)

CALLS = {  # name: (call, number of matrix products it makes)
    "linear": (lambda: F.linear(x3, w), 1),
    "nn.Linear": (lambda: layer(x3), 1),
    "at": (lambda: a @ b, 1),
    "rmatmul": (lambda: b.__rmatmul__(a), 1),
    "matmul broadcast": (lambda: torch.matmul(x3, b), 1),
    "matmul batched both": (lambda: x3 @ bb, 1),
    "vector matmul": (lambda: vec @ b, 1),
    "Tensor.matmul": (lambda: a.matmul(b), 1),
    "linalg.matmul": (lambda: torch.linalg.matmul(a, b), 1),
    "mm": (lambda: torch.mm(a, b), 1),
    "Tensor.mm": (lambda: a.mm(b), 1),
    "bmm": (lambda: torch.bmm(x3, bb), 1),
    "Tensor.bmm": (lambda: x3.bmm(bb), 1),
    "addmm": (lambda: torch.addmm(torch.zeros(5, 7), a, b), 1),
    "Tensor.addmm": (lambda: torch.zeros(5, 7).addmm(a, b), 1),
    "baddbmm": (lambda: torch.baddbmm(torch.zeros(2, 5, 7), x3, bb), 1),
    "einsum mm": (lambda: torch.einsum("ij,jk->ik", a, b), 1),
    "einsum heads": (lambda: torch.einsum("bhqd,bhkd->bhqk", q, k), 1),
    "einsum ellipsis": (lambda: torch.einsum("...qd,...kd->...qk", q, k), 1),
    "einsum implicit": (lambda: torch.einsum("ij,jk", a, b), 1),
    "einsum list": (lambda: torch.einsum("ij,jk->ik", [a, b]), 1),
    "einsum sublist": (lambda: torch.einsum(a, [0, 1], b, [1, 2], [0, 2]), 1),
    "einsum three": (lambda: torch.einsum("ij,jk,kl->il", a, b, b.T), 1),
    "tensordot int": (lambda: torch.tensordot(x3, torch.randn(5, 6, 3), dims=2), 1),
    "tensordot lists": (lambda: torch.tensordot(a, b, dims=([1], [0])), 1),
    "two products": (lambda: (a @ b) @ b.T, 2),
}

# FlopCounterMode has no formula for these on the CPU (it reports 0): the count written out.
BY_HAND = {
    "matmul vector": (lambda: a @ vec, 5 * 6),
    "mv": (lambda: a.mv(vec), 5 * 6),
    "dot": (lambda: vec.dot(vec), 6),
}


def attention_by_products(q, k, v, causal=False):
    """What SDPA computes, written with two matmuls FlopCounterMode counts."""
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if causal:
        scores = scores.masked_fill(torch.ones(scores.shape[-2:]).triu(1).bool(), float("-inf"))
    return scores.softmax(-1) @ v


SDPA = {  # arguments; SDPA's CPU kernel is invisible to FlopCounterMode, its two products are not
    "plain": (q, k, v, False),
    "causal": (q, k, v, True),
    "value width": (q, k, v16, False),
    "grouped (expanded)": (q, kg.expand(2, 3, 9, 8), vg.expand(2, 3, 9, 8), False),
}


@pytest.mark.parametrize("name", CALLS)
def test_counts_what_flop_counter_counts(name):
    fn, products = CALLS[name]
    with FlopCounterMode(display=False) as reference:
        fn()
    with MatmulCost() as cost:
        fn()
    assert reference.get_total_flops() > 0
    assert 2 * cost.macs == reference.get_total_flops(), (cost.by_name, reference.get_flop_counts())
    assert cost.calls == products


@pytest.mark.parametrize("name", BY_HAND)
def test_counts_what_flop_counter_misses(name):
    fn, macs = BY_HAND[name]
    with MatmulCost() as cost:
        fn()
    assert (cost.macs, cost.calls) == (macs, 1)


@pytest.mark.parametrize("name", SDPA)
def test_sdpa_counts_as_its_two_products(name):
    q, k, v, causal = SDPA[name]
    with FlopCounterMode(display=False) as reference:
        expected = attention_by_products(q, k, v, causal)
    with MatmulCost() as cost:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, expected)
    assert 2 * cost.macs == reference.get_total_flops() > 0
    assert cost.calls == 1 and cost.by_name["scaled_dot_product_attention"] == cost.macs


def test_element_wise_products_are_counted_apart():
    with MatmulCost() as cost:
        ((a.unsqueeze(-1) * b.unsqueeze(0)).sum(1), a * 2.0)
    assert (cost.macs, cost.calls, cost.muls) == (0, 0, 5 * 6 * 7 + 5 * 6)


def test_nested_counts():
    with MatmulCost() as outer:
        (a + 1).sum()  # no product
        with MatmulCost() as inner:
            a @ b
    # an outer count sees everything done inside its block, an inner count's included
    assert inner.macs == outer.macs == 5 * 6 * 7 and outer.calls == 1


def test_whole_modules_are_listed_when_not_seen_through():
    mha = torch.nn.MultiheadAttention(6, 2, batch_first=True)
    with MatmulCost() as cost:
        mha(x3, x3, x3)
    assert cost.uncounted["multi_head_attention_forward"] == 1


def test_meta_tensors_are_counted():
    with MatmulCost() as cost:
        torch.empty(3, 4, device="meta") @ torch.empty(4, 5, device="meta")
    assert cost.macs == 60


def test_importing_and_using_it_imports_nothing_heavy():
    script = ("import sys, torch\nfrom autograder.checks.core.cost import MatmulCost\n"
              "with MatmulCost() as c:\n    torch.nn.Linear(4, 4)(torch.randn(2, 4)) @ torch.randn(4, 3)\n"
              "assert c.macs == 2 * 4 * 4 + 2 * 4 * 3, c.macs\n"
              "heavy = [m for m in ('torch._dynamo', 'sympy', 'torch._inductor') if m in sys.modules]\n"
              "assert not heavy, heavy\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
