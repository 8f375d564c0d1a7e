"""Tests of utils.causal, the reference kernels of notebook 04: `.venv/bin/pytest utils/tests/test_causal.py`."""
import math

import pytest
import torch
import torch.nn.functional as F

from utils import causal
from utils.fixtures import journey_inputs
from utils.self_attention import SelfAttentionV2


def test_mask_is_boolean_strict_upper_triangle():
    m = causal.causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (4, 4)
    assert m.tolist() == [[False, True, True, True], [False, False, True, True],
                          [False, False, False, True], [False, False, False, False]]


@pytest.mark.parametrize("t_q, t_k", [(1, 6), (2, 6), (3, 7), (5, 5)])
def test_mask_is_bottom_right_aligned(t_q, t_k):
    m = causal.causal_mask(t_q, t_k)
    i, j = torch.arange(t_q)[:, None], torch.arange(t_k)[None, :]
    assert torch.equal(m, j > i + (t_k - t_q))
    assert torch.equal(m, causal.causal_mask(t_k)[-t_q:])  # the last T_q rows of the square mask


def test_mask_rejects_more_queries_than_keys():
    with pytest.raises(ValueError, match="3 < 4"):
        causal.causal_mask(4, 3)


def test_the_two_routes_agree_and_match_the_book():
    """Raschka section 3.5.1: SelfAttentionV2 with seed 789, d_out = 2."""
    torch.manual_seed(789)
    sa = SelfAttentionV2(3, 2)
    x = journey_inputs()
    with torch.no_grad():
        scores = sa.W_query(x) @ sa.W_key(x).T / math.sqrt(2)
    mask = causal.causal_mask(6)
    route_1 = causal.mask_and_renormalize(torch.softmax(scores, -1), mask)
    route_2 = causal.masked_softmax(scores, mask)
    torch.testing.assert_close(route_1, route_2)
    torch.testing.assert_close(route_2[1, :2], torch.tensor([0.5517, 0.4483]), atol=1e-4, rtol=0)
    assert (route_2[mask] == 0).all()
    torch.testing.assert_close(route_2.sum(-1), torch.ones(6))


def test_filling_with_zero_leaks():
    scores = torch.zeros(3, 3)
    leaky = torch.softmax(scores.masked_fill(causal.causal_mask(3), 0.0), -1)
    assert leaky[0, 1:].sum() > 0.5  # exp(0) = 1: the future keeps its weight
    assert (causal.masked_softmax(scores, causal.causal_mask(3))[0, 1:] == 0).all()


def test_masked_softmax_honours_dim_and_leaves_input_alone():
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 4, 6, generator=g)
    before = scores.clone()
    mask = causal.causal_mask(4, 6)
    cols = causal.masked_softmax(scores.mT, mask.T, dim=-2)
    torch.testing.assert_close(cols, causal.masked_softmax(scores, mask).mT)
    assert torch.equal(scores, before)


def _module(seed=0, d_in=5, d_out=3, context_length=6):
    torch.manual_seed(seed)
    return causal.CausalSelfAttention(d_in, d_out, context_length, qkv_bias=True)


def test_no_leakage_from_future_tokens():
    m = _module()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 6, 5, generator=g)
    changed = x.clone()
    changed[:, 3:] = torch.randn(2, 3, 5, generator=g)
    with torch.no_grad():
        assert torch.equal(m(x)[:, :3], m(changed)[:, :3])
        assert not torch.allclose(m(x)[:, 3:], m(changed)[:, 3:])


def test_shorter_inputs_slice_the_mask_and_longer_ones_raise():
    m = _module()
    x = torch.randn(2, 6, 5, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(m(x[:, :4]), m(x)[:, :4])
    with pytest.raises(ValueError, match="context_length=6"):
        m(torch.zeros(1, 7, 5))


def test_mask_is_a_buffer_in_state_dict_and_moves_with_to():
    m = _module()
    assert "mask" in dict(m.named_buffers()) and "mask" in m.state_dict()
    assert "mask" not in dict(m.named_parameters())
    m.to(torch.float64)
    assert m.W_query.weight.dtype == torch.float64 and m.mask.dtype == torch.bool
    out = m(torch.randn(1, 4, 5, dtype=torch.float64))
    assert out.dtype == torch.float64
    fresh = causal.CausalSelfAttention(5, 3, 6, qkv_bias=True).double()
    fresh.load_state_dict(m.state_dict())
    assert torch.equal(fresh.mask, m.mask)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_mask_moves_to_the_gpu():
    m = _module().to("cuda")
    assert m.mask.device.type == "cuda"
    assert m(torch.randn(1, 4, 5, device="cuda")).device.type == "cuda"


@pytest.mark.parametrize("t_q", [1, 2, 6])
def test_bottom_right_alignment_equals_sdpa_with_an_explicit_mask(t_q):
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(2, t_q, 4, generator=g), torch.randn(2, 6, 4, generator=g), torch.randn(2, 6, 3, generator=g)
    mask = causal.causal_mask(t_q, 6)
    ours = causal.masked_softmax(q @ k.mT / 2.0, mask) @ v
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=~mask))  # SDPA: True = keep


def test_last_queries_equal_the_last_rows_of_full_attention_and_is_causal_does_not():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 6, 4, generator=g) for _ in range(3))
    full = causal.masked_softmax(q @ k.mT / 2.0, causal.causal_mask(6)) @ v
    last = causal.masked_softmax(q[:, -2:] @ k.mT / 2.0, causal.causal_mask(2, 6)) @ v
    torch.testing.assert_close(last, full[:, -2:])
    top_left = F.scaled_dot_product_attention(q[:, -2:], k, v, is_causal=True)  # the trap: top-left aligned
    assert not torch.allclose(top_left, last)
