"""Tests of utils.flash_attention, the reference of notebook 14: `.venv/bin/pytest utils/tests/test_flash_attention.py`."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from utils import flash_attention as fa


def _qkv(B, H, T_q, T_k, d, d_v, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T_q, d, generator=g, dtype=dtype), torch.randn(B, H, T_k, d, generator=g, dtype=dtype),
            torch.randn(B, H, T_k, d_v, generator=g, dtype=dtype))


def _sdpa(q, k, v, causal):
    if causal:  # bottom-right aligned, unlike is_causal=True
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(q.shape[-2], k.shape[-2]))
    return F.scaled_dot_product_attention(q, k, v)


def test_online_softmax_equals_softmax_and_survives_large_rows():
    x = torch.randn(3, 4, 37, generator=torch.Generator().manual_seed(1)) * 5
    x[0, 0] += 1000.0
    x[1, 2, :20] = float("-inf")  # the first blocks of a row are all -inf
    for block in (1, 5, 8, 37, 64):
        torch.testing.assert_close(fa.online_softmax(x, block), torch.softmax(x, dim=-1))
    torch.testing.assert_close(fa.online_softmax(torch.tensor([1000.0, 1001.0]), 1),
                               torch.tensor([1 / (1 + math.e), math.e / (1 + math.e)]))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape, blocks", [((2, 3, 13, 29, 8, 5), (4, 7)), ((1, 2, 29, 29, 16, 16), (8, 8)),
                                           ((2, 1, 1, 40, 4, 6), (64, 16)), ((1, 1, 70, 70, 8, 8), (64, 64))])
def test_forward_equals_sdpa_and_lse_equals_logsumexp(causal, shape, blocks):
    q, k, v = _qkv(*shape)
    out, lse = fa.flash_attention_forward(q, k, v, causal=causal, block_q=blocks[0], block_k=blocks[1])
    torch.testing.assert_close(out, _sdpa(q, k, v, causal), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(lse, fa.naive_attention(q, k, v, causal)[1], atol=1e-5, rtol=1e-4)


def test_causal_tiles_above_the_diagonal_are_skipped():
    q, k, v = _qkv(1, 1, 16, 16, 4, 4)
    calls = []

    class Counting(torch.overrides.TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if getattr(func, "__name__", "") == "matmul":  # q tile @ k tileᵀ, then p @ v tile
                calls.append(func)
            return func(*args, **(kwargs or {}))

    with Counting():
        fa.flash_attention_forward(q, k, v, causal=True, block_q=4, block_k=4)
    assert len(calls) == 4 * 5 // 2 * 2  # 10 tiles on or below the diagonal, two matmuls each


def test_causal_needs_no_more_queries_than_keys():
    q, k, v = _qkv(1, 1, 5, 3, 4, 4)
    with pytest.raises(ValueError, match="T_q=5, T_k=3"):
        fa.flash_attention_forward(q, k, v, causal=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape, blocks", [((2, 3, 13, 29, 8, 5), (4, 7)), ((1, 2, 17, 17, 6, 6), (5, 3))])
def test_backward_equals_autograd(causal, shape, blocks):
    q, k, v = _qkv(*shape, seed=2)
    g = torch.randn(*q.shape[:-1], v.shape[-1], generator=torch.Generator().manual_seed(3))
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    _sdpa(*leaves, causal).backward(g)
    out, lse = fa.flash_attention_forward(q, k, v, causal, *blocks)
    grads = fa.flash_attention_backward(q, k, v, out, lse, g, causal, *blocks)
    for ours, leaf in zip(grads, leaves):
        torch.testing.assert_close(ours, leaf.grad, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("causal", [False, True])
def test_autograd_function_passes_gradcheck_and_saves_no_probabilities(causal):
    q, k, v = (t.requires_grad_() for t in _qkv(2, 2, 3, 5, 4, 3, seed=4, dtype=torch.float64))
    assert torch.autograd.gradcheck(lambda *x: fa.FlashAttention.apply(*x, causal), (q, k, v))
    out = fa.FlashAttention.apply(q, k, v, causal)
    assert [tuple(t.shape) for t in out.grad_fn.saved_tensors] == [(2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3),
                                                                 (2, 2, 3, 3), (2, 2, 3)]


def test_naive_attention_equals_sdpa():
    q, k, v = _qkv(2, 2, 6, 9, 4, 5)
    torch.testing.assert_close(fa.naive_attention(q, k, v, causal=True)[0], _sdpa(q, k, v, True))
