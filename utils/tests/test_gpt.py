import torch

from utils.gpt import GPTConfig, GPTModel, parameter_count
from utils.kv_cache import KVCache
from utils.rope import RoPEMultiHeadAttention


def tiny(**kw):
    return GPTConfig(**{**dict(vocab_size=40, context_length=16, emb_dim=12, n_heads=3, n_layers=2), **kw})


def test_shapes_causality_and_cache_positions():
    torch.manual_seed(0)
    model = GPTModel(tiny()).eval()
    idx = torch.randint(0, 40, (2, 9))
    with torch.no_grad():
        full = model(idx)
        assert full.shape == (2, 9, 40)
        changed = idx.clone()
        changed[:, -1] = (changed[:, -1] + 1) % 40
        torch.testing.assert_close(model(changed)[:, :-1], full[:, :-1])
        caches = model.new_caches(2, 16)
        steps = [model(idx[:, :5], caches)] + [model(idx[:, t:t + 1], caches) for t in range(5, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-4)
    assert all(c.seq_len == 9 for c in caches)


def test_gpt2_small_parameter_count():
    # GPT-2 small without Q/K/V biases and with an untied output head (Raschka ch. 4: 163,009,536)
    model = GPTModel(GPTConfig())
    assert parameter_count(model) == 163_009_536


def test_pluggable_rope_attention():
    torch.manual_seed(1)
    cfg = tiny(learned_positions=False)
    model = GPTModel(cfg, attention=lambda c: RoPEMultiHeadAttention(c.emb_dim, c.emb_dim, c.context_length,
                                                                   c.n_heads)).eval()
    assert model.pos_emb is None
    idx = torch.randint(0, 40, (1, 7))
    with torch.no_grad():
        full = model(idx)
        caches = model.new_caches(1, 16, KVCache)
        steps = [model(idx[:, :3], caches)] + [model(idx[:, t:t + 1], caches) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-4)
