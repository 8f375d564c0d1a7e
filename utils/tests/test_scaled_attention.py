"""Tests of utils.scaled_attention: the variance argument, the softmax Jacobian and the general
scaled dot-product attention against PyTorch's own operator."""
import math

import pytest
import torch
import torch.nn.functional as F

from utils import scaled_attention as sa


def gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("d", [1, 16, 64, 256])
def test_variance_grows_like_d_and_scaling_brings_it_to_one(d):
    # the sample variance of 20,000 trials has a relative std of about sqrt(2 / 20000) = 1%
    raw = sa.dot_product_variance(d, n_trials=20_000, generator=gen(d))
    scaled = sa.dot_product_variance(d, n_trials=20_000, scaled=True, generator=gen(d + 1))
    assert isinstance(raw, float) and isinstance(scaled, float)
    assert raw == pytest.approx(d, rel=0.08)
    assert scaled == pytest.approx(1.0, rel=0.08)


def test_variance_follows_the_generator():
    a = sa.dot_product_variance(8, n_trials=500, generator=gen(0))
    assert a == sa.dot_product_variance(8, n_trials=500, generator=gen(0))
    assert a != sa.dot_product_variance(8, n_trials=500, generator=gen(1))


def test_jacobian_matches_autograd():
    z = torch.randn(7, generator=gen(2)) * 2
    p = torch.softmax(z, dim=-1)
    expected = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), z)
    jac = sa.softmax_jacobian(p)
    torch.testing.assert_close(jac, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(jac, jac.T)
    torch.testing.assert_close(jac.sum(-1), torch.zeros(7), atol=1e-6, rtol=0)


def test_jacobian_vanishes_at_one_hot():
    assert torch.equal(sa.softmax_jacobian(torch.tensor([0.0, 1.0, 0.0])), torch.zeros(3, 3))
    # the book's example: the diagonal of softmax([1, 2, 3]) is p(1 - p)
    diag = sa.softmax_jacobian(torch.softmax(torch.tensor([1.0, 2.0, 3.0]), -1)).diagonal()
    torch.testing.assert_close(diag, torch.tensor([0.0819, 0.1848, 0.2227]), atol=1e-4, rtol=0)


@pytest.mark.parametrize("scale", [None, 1.0, 0.3])
def test_sdpa_matches_pytorch(scale):
    q = torch.randn(2, 3, 4, 8, generator=gen(3))  # (B, H, T_q, d_k)
    k = torch.randn(2, 3, 6, 8, generator=gen(4))  # (B, H, T_k, d_k)
    v = torch.randn(2, 3, 6, 5, generator=gen(5))  # (B, H, T_k, d_v)
    context, weights = sa.scaled_dot_product_attention(q, k, v, scale=scale)
    assert context.shape == (2, 3, 4, 5) and weights.shape == (2, 3, 4, 6)
    expected = F.scaled_dot_product_attention(q, k, v, scale=scale)
    torch.testing.assert_close(context, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, 4))


def test_sdpa_mask_is_true_for_blocked():
    q = torch.randn(2, 3, 4, 8, generator=gen(6))
    k = torch.randn(2, 3, 6, 8, generator=gen(7))
    v = torch.randn(2, 3, 6, 5, generator=gen(8))
    mask = torch.rand(4, 6, generator=gen(9)) < 0.4  # (T_q, T_k), broadcast over (B, H)
    mask[:, 0] = False  # every query keeps a key
    mask[2] = False     # and one row is fully allowed
    context, weights = sa.scaled_dot_product_attention(q, k, v, mask=mask, scale=0.5)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask, scale=0.5)  # True = allowed there
    torch.testing.assert_close(context, expected, atol=1e-5, rtol=1e-4)
    assert torch.all(weights[..., mask] == 0)
    unmasked = sa.scaled_dot_product_attention(q, k, v, scale=0.5)[1]
    torch.testing.assert_close(weights[..., 2, :], unmasked[..., 2, :])


def test_sdpa_default_scale_is_one_over_sqrt_dk():
    q, k, v = (torch.randn(5, d, generator=gen(10 + d)) for d in (16, 16, 3))
    _, default = sa.scaled_dot_product_attention(q, k, v)
    _, explicit = sa.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(16))
    torch.testing.assert_close(default, explicit)


def test_random_scores_spread():
    raw = sa.random_scores(256, generator=gen(11))
    scaled = sa.random_scores(256, scaled=True, generator=gen(11))
    assert raw.shape == (256, 16)
    torch.testing.assert_close(scaled, raw / 16)
    assert raw.var().item() == pytest.approx(256, rel=0.2)
