"""Tests of utils.dropout, the reference kernels of notebook 05: `.venv/bin/pytest utils/tests/test_dropout.py`.

Dropout masks depend on the platform's random number stream, so these tests check statistics
and invariants, never a particular mask.
"""
import math

import pytest
import torch

from utils import causal, dropout


def _gen(seed):
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.8])
def test_kept_fraction_and_survivor_scaling(p):
    w = torch.rand(400, 500, generator=_gen(0)) + 0.5
    out = dropout.attention_dropout(w, p, generator=_gen(1))
    kept = out != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.01  # std is about 0.001
    torch.testing.assert_close(out[kept], w[kept] / (1 - p))
    assert abs(out.mean().item() - w.mean().item()) < 0.02 * w.mean().item()  # the expectation is kept


def test_identity_in_eval_and_for_p_zero():
    w = torch.rand(3, 4, 4, generator=_gen(2))
    assert torch.equal(dropout.attention_dropout(w, 0.5, training=False), w)
    assert torch.equal(dropout.attention_dropout(w, 0.0), w)


@pytest.mark.parametrize("p", [-0.1, 1.0, 1.5])
def test_bad_p_raises(p):
    with pytest.raises(ValueError, match="0 <= p < 1"):
        dropout.attention_dropout(torch.ones(2, 2), p)


def test_same_generator_seed_same_mask_on_one_machine_and_input_untouched():
    w = torch.ones(50, 50)
    a = dropout.attention_dropout(w, 0.5, generator=_gen(3))
    b = dropout.attention_dropout(w, 0.5, generator=_gen(3))
    c = dropout.attention_dropout(w, 0.5, generator=_gen(4))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert torch.equal(w, torch.ones(50, 50))


def test_kept_fraction_of_many_small_draws_is_binomial():
    g = _gen(5)
    fractions = torch.stack([(dropout.attention_dropout(torch.ones(6, 6), 0.5, generator=g) != 0).float().mean()
                             for _ in range(2000)])
    assert abs(fractions.mean().item() - 0.5) < 0.01
    assert abs(fractions.std().item() - math.sqrt(0.25 / 36)) < 0.01


def _weights(module, seed=10):
    g = _gen(seed)
    with torch.no_grad():
        for layer in (module.W_query, module.W_key, module.W_value):
            layer.weight.copy_(torch.randn(layer.weight.shape, generator=g) / math.sqrt(layer.in_features))


def test_causal_attention_in_eval_equals_causal_self_attention():
    ca, ref = dropout.CausalAttention(5, 3, 6, 0.5), causal.CausalSelfAttention(5, 3, 6)
    _weights(ca)
    ref.load_state_dict(ca.state_dict())
    x = torch.randn(2, 6, 5, generator=_gen(11))
    ca.eval()
    with torch.no_grad():
        torch.testing.assert_close(ca(x), ref(x))
        torch.testing.assert_close(ca(x[:, :4]), ref(x[:, :4]))  # the mask is sliced for shorter inputs
        assert torch.equal(ca(x), ca(x))
    assert "mask" in dict(ca.named_buffers()) and "mask" in ca.state_dict()


def test_causal_attention_drops_weights_not_context():
    """One-hot tokens and a value map [I; I]: both output halves are the (dropped) weights."""
    T, p = 8, 0.3
    ca = dropout.CausalAttention(T, 2 * T, T, p)
    _weights(ca)
    with torch.no_grad():
        ca.W_value.weight.copy_(torch.cat([torch.eye(T), torch.eye(T)]))
        x = torch.eye(T).expand(1000, T, T)
        q, k = ca.W_query(x[0]), ca.W_key(x[0])
        expected = causal.masked_softmax(q @ k.T / math.sqrt(2 * T), causal.causal_mask(T))
        torch.manual_seed(0)
        out = ca.train()(x)
    left, right = out[..., :T], out[..., T:]
    assert torch.equal(left, right)
    allowed = ~causal.causal_mask(T)
    seen = left[:, allowed]
    kept = seen != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.02
    torch.testing.assert_close(seen[kept], (expected[allowed] / (1 - p)).expand_as(seen)[kept])
    assert (left[:, ~allowed] == 0).all()  # dropout never brings back the future
