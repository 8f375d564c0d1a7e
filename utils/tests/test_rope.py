import math

import pytest
import torch

from utils import rope


def complex_rope(x, positions, theta=10000.0):
    """Adjacent pairs as complex numbers times e^(i t w), as in Meta's Llama code."""
    hd = x.shape[-1]
    w = 1.0 / theta ** (torch.arange(hd // 2, dtype=torch.float64) * 2 / hd)
    turn = torch.polar(torch.ones(len(positions), hd // 2, dtype=torch.float64), positions.double()[:, None] * w)
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], hd // 2, 2).contiguous())
    return torch.view_as_real(z * turn).reshape(x.shape).to(x.dtype)


def rotate_half_rope(x, positions, theta=10000.0):
    """Hugging Face's form: x * cos + rotate_half(x) * sin with cos, sin = cat(freqs, freqs)."""
    hd = x.shape[-1]
    w = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    freqs = torch.cat([positions.double()[:, None] * w] * 2, dim=-1)
    x1, x2 = x.double()[..., : hd // 2], x.double()[..., hd // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return (x.double() * freqs.cos() + rotated * freqs.sin()).to(x.dtype)


def test_sinusoidal_matches_the_formula():
    pe = rope.sinusoidal_positions(7, 6, base=100.0)
    t, i = 5, 1
    assert pe.shape == (7, 6)
    assert math.isclose(pe[t, 2 * i].item(), math.sin(t / 100 ** (2 * i / 6)), rel_tol=1e-6)
    assert math.isclose(pe[t, 2 * i + 1].item(), math.cos(t / 100 ** (2 * i / 6)), rel_tol=1e-6)
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1, 0, 1, 0, 1]))


def test_sinusoidal_shift_is_a_fixed_rotation():
    pe = rope.sinusoidal_positions(40, 8)
    k = 3
    w = 10000.0 ** (-torch.arange(0, 8, 2) / 8)
    for t in (0, 11, 30):
        for i in range(4):
            c, s = math.cos(k * w[i]), math.sin(k * w[i])
            sin_t, cos_t = pe[t, 2 * i], pe[t, 2 * i + 1]
            torch.testing.assert_close(pe[t + k, 2 * i], sin_t * c + cos_t * s)
            torch.testing.assert_close(pe[t + k, 2 * i + 1], cos_t * c - sin_t * s)


def test_inverse_frequencies_golden():
    inv = rope.rope_inverse_frequencies(64)
    assert inv.shape == (32,)
    assert inv[0].item() == 1.0
    assert math.isclose(inv[1].item(), 0.74989, rel_tol=1e-4)
    assert math.isclose(inv[31].item(), 1.3335e-4, rel_tol=1e-3)
    assert math.isclose(rope.rope_inverse_frequencies(128, 500000.0)[63].item(), 2.455e-6, rel_tol=1e-3)
    with pytest.raises(ValueError):
        rope.rope_inverse_frequencies(7)


@pytest.mark.parametrize("interleaved,reference", [(True, complex_rope), (False, rotate_half_rope)])
def test_apply_rope_matches_independent_formulation(interleaved, reference):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 16)
    positions = torch.arange(4, 13)
    out = rope.apply_rope(x, positions, theta=500.0, interleaved=interleaved)
    torch.testing.assert_close(out, reference(x, positions, theta=500.0), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rope.apply_rope(x, torch.zeros(9, dtype=torch.long), interleaved=interleaved), x)


@pytest.mark.parametrize("interleaved", [True, False])
def test_score_depends_only_on_offset(interleaved):
    torch.manual_seed(1)
    q, k = torch.randn(32), torch.randn(32)

    def score(m, n):
        qm = rope.apply_rope(q[None], torch.tensor([m]), interleaved=interleaved)[0]
        kn = rope.apply_rope(k[None], torch.tensor([n]), interleaved=interleaved)[0]
        return (qm @ kn).item()

    for m, n, s in [(5, 2, 7), (9, 9, 30), (3, 10, 100)]:
        assert math.isclose(score(m, n), score(m + s, n + s), rel_tol=1e-4, abs_tol=1e-4)


def test_layouts_differ_but_agree_after_the_row_permutation():
    torch.manual_seed(2)
    H, hd, d_in, T = 3, 8, 5, 6
    W = torch.randn(H * hd, d_in)
    x = torch.randn(T, d_in)
    pos = torch.arange(T)
    heads = lambda y: y.view(T, H, hd).transpose(0, 1)  # (H, T, hd)
    meta = rope.apply_rope(heads(x @ W.T), pos, interleaved=True)
    hf = rope.apply_rope(heads(x @ rope.interleaved_to_half_split(W, H).T), pos)
    assert not torch.allclose(rope.apply_rope(heads(x @ W.T), pos), meta, atol=1e-3)
    # Scores agree: the permutation is the same for q and k, so dot products do not change.
    torch.testing.assert_close(hf @ hf.transpose(-2, -1), meta @ meta.transpose(-2, -1), atol=1e-4, rtol=1e-4)
    perm = rope.interleaved_to_half_split(torch.arange(H * hd), H)
    assert perm[:hd].tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    torch.testing.assert_close(hf, meta[..., perm[:hd]])


def test_rope_attention_cache_continues_positions():
    from utils.kv_cache import KVCache

    torch.manual_seed(3)
    attn = rope.RoPEMultiHeadAttention(6, 8, 16, 2, theta=100.0).eval()
    x = torch.randn(2, 7, 6)
    with torch.no_grad():
        full = attn(x)
        cache = KVCache(2, 16, 2, 4)
        steps = [attn(x[:, :4], cache)] + [attn(x[:, t:t + 1], cache) for t in range(4, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-4)
    assert cache.seq_len == 7


def test_yarn_keeps_fast_pairs_slows_slow_pairs_and_sharpens_the_softmax():
    # DeepSeek-V3's defaults: rope dim 64, theta 10,000, factor 40, original 4096, beta 32 / 1.
    base, yarn = rope.rope_inverse_frequencies(64), rope.yarn_inverse_frequencies(64)
    ratio = base / yarn
    torch.testing.assert_close(ratio[:11], torch.ones(11))  # pairs turning > 32 times over 4096 tokens
    torch.testing.assert_close(ratio[23:], torch.full((9,), 40.0))  # pairs turning < once: interpolated
    assert bool((ratio[11:23] > 1).all() and (ratio[11:23] < 40).all() and (ratio.diff() >= -1e-6).all())
    assert abs(rope.yarn_softmax_factor(40.0) - (0.1 * math.log(40) + 1) ** 2) < 1e-12
    assert abs(rope.yarn_softmax_factor(40.0) - 1.8739) < 1e-4
    torch.testing.assert_close(rope.yarn_inverse_frequencies(64, factor=1.0), base)
