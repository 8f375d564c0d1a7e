"""Tests of utils.mini_deepseek, utils.copy_task and utils.train_mini (notebook 12): `.venv/bin/pytest utils/tests/test_mini_deepseek.py`."""

import pytest
import torch

from utils import mini_deepseek as md
from utils.moe import MoE
from utils.copy_task import BOS, SEP, copy_mask, copy_prompts, make_batch
from utils.mla import MultiHeadLatentAttention
from utils.train_mini import train

SMALL = md.MiniDeepSeekConfig(vocab_size=20, dim=16, n_layers=3, n_dense_layers=1, inter_dim=24, n_heads=2,
                              q_lora_rank=8, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4,
                              moe_inter_dim=8, n_routed_experts=4, n_activated_experts=2, n_expert_groups=2,
                              n_limited_groups=1, max_seq_len=24)


def small_model(seed=0):
    torch.manual_seed(seed)
    return md.MiniDeepSeek(SMALL).eval()


def test_layers_are_dense_then_moe_with_v3_names():
    model = small_model()
    assert [type(layer.ffn).__name__ for layer in model.layers] == ["Expert", "MoE", "MoE"]
    names = set(dict(model.named_parameters()))
    for name in ["embed.weight", "norm.weight", "head.weight", "layers.0.attn.wkv_a.weight", "layers.0.ffn.w1.weight",
                 "layers.1.ffn.gate.weight", "layers.1.ffn.gate.bias", "layers.1.ffn.shared_experts.w2.weight"]:
        assert name in names


def test_block_is_pre_norm():
    """The residual stream is never normalised: a huge input comes out with the same huge part."""
    torch.manual_seed(1)
    block = md.Block(SMALL, 0).eval()
    x = torch.randn(1, 5, SMALL.dim)
    with torch.no_grad():
        delta = block(x * 1000) - x * 1000  # what the sublayers add, from normalised inputs
        small_delta = block(x) - x
    assert delta.abs().max() < 1000 * 0.5 and small_delta.abs().max() < 100


def test_prefill_then_decode_equals_one_call():
    model = small_model()
    tokens = torch.randint(0, SMALL.vocab_size, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(tokens)
        parts = torch.cat([model(tokens[:, :5]), model(tokens[:, 5:7], 5), model(tokens[:, 7:], 7)], dim=1)
    torch.testing.assert_close(parts, full, atol=1e-5, rtol=1e-4)


def test_generate_same_with_and_without_cache():
    model = small_model(3)
    prompt = torch.randint(0, SMALL.vocab_size, (2, 4), generator=torch.Generator().manual_seed(3))
    cached = md.generate(model, prompt, 10)
    assert cached.shape == (2, 14) and torch.equal(cached[:, :4], prompt)
    assert torch.equal(cached, md.generate(model, prompt, 10, use_cache=False))


@pytest.mark.parametrize("absorb", [False, True])
def test_absorb_reaches_every_layer_and_decoding_continues_it(absorb):
    model = small_model(4)
    tokens = torch.randint(0, SMALL.vocab_size, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        full = small_model(4)(tokens)  # another instance: this one's caches stay fresh
        parts = torch.cat([model(tokens[:, :6], 0, absorb), model(tokens[:, 6:], 6, absorb=absorb)], dim=1)
    torch.testing.assert_close(parts, full, atol=1e-5, rtol=1e-4)
    for layer in model.layers:  # the prefill sized the cache of the path it ran (batch 2), only in fresh layers
        assert (layer.attn.kv_cache.shape[0] == 2) == absorb and (layer.attn.k_cache.shape[0] == 2) != absorb


def test_cached_generation_holds_the_latent_and_the_rope_key():
    model = small_model(5)
    md.generate(model, torch.zeros(1, 3, dtype=torch.long), 4)
    per_layer = SMALL.kv_lora_rank + SMALL.qk_rope_head_dim
    assert md.cached_numbers_per_token(model) == {"kv_cache": SMALL.n_layers * SMALL.kv_lora_rank,
                                                  "pe_cache": SMALL.n_layers * SMALL.qk_rope_head_dim}
    assert sum(md.cached_numbers_per_token(model).values()) == SMALL.n_layers * per_layer
    naive = small_model(5)
    with torch.no_grad():
        naive(torch.zeros(1, 3, dtype=torch.long))
    assert md.cached_numbers_per_token(naive) == {"k_cache": SMALL.n_layers * SMALL.n_heads * 8,
                                                  "v_cache": SMALL.n_layers * SMALL.n_heads * SMALL.v_head_dim}
    assert all(isinstance(m, MultiHeadLatentAttention) for m in (layer.attn for layer in model.layers))


def test_next_token_loss_is_shifted_mean_cross_entropy():
    logits = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(4))
    tokens = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(5))
    manual = -torch.stack([logits[b, t].log_softmax(-1)[tokens[b, t + 1]] for b in range(2) for t in range(4)]).mean()
    torch.testing.assert_close(md.next_token_loss(logits, tokens), manual)


def test_attention_maps_reproduce_the_layer_output():
    model = small_model(5)
    x = torch.randn(2, 7, SMALL.dim, generator=torch.Generator().manual_seed(6))
    attn = model.layers[1].attn
    w = md.mla_attention_weights(attn, x)  # (B, H, T, T)
    assert w.shape == (2, 2, 7, 7) and torch.allclose(w.sum(-1), torch.ones(2, 2, 7))
    assert (w.triu(1) == 0).all()
    with torch.no_grad():
        v = attn.wkv_b(attn.kv_norm(attn.wkv_a(x)[..., :SMALL.kv_lora_rank])).view(2, 7, 2, -1)[..., SMALL.qk_nope_head_dim:]
        out = attn.wo(torch.einsum("bhst,bthd->bshd", w, v).flatten(2))
        torch.testing.assert_close(out, attn(x), atol=1e-5, rtol=1e-4)
    maps = md.attention_maps(model, torch.zeros(1, 6, dtype=torch.long))
    assert len(maps) == SMALL.n_layers and maps[0].shape == (1, 2, 6, 6)


def test_parameter_counts_active_leaves_out_idle_experts():
    model = small_model()
    counts = md.parameter_counts(model)
    per_expert = 3 * SMALL.dim * SMALL.moe_inter_dim
    idle = (SMALL.n_layers - SMALL.n_dense_layers) * (SMALL.n_routed_experts - SMALL.n_activated_experts) * per_expert
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["total"] - counts["active"] == idle


def test_make_batch_repeats_a_segment_of_distinct_tokens():
    batch = make_batch(8, 48, torch.Generator().manual_seed(7))
    assert batch.shape == (8, 48) and (batch[:, 0] == BOS).all()
    for row in batch:
        L = int((row == SEP).nonzero()[0]) - 1
        segment = row[1:L + 1]
        assert len(set(segment.tolist())) == L and (segment >= 2).all()
        unit = torch.cat([segment, torch.tensor([SEP])])
        assert torch.equal(row[1:], unit.repeat(48)[:47])
    mask = copy_mask(batch)
    first_sep = (batch == SEP).int().argmax(1)
    assert all(mask[b, t] == (t > first_sep[b]) for b in range(8) for t in range(48))
    assert torch.equal(make_batch(3, 20, torch.Generator().manual_seed(1)), make_batch(3, 20, torch.Generator().manual_seed(1)))


def test_copy_prompts_end_at_the_first_separator():
    for p in copy_prompts(5, torch.Generator().manual_seed(8)):
        assert p.shape[0] == 1 and p[0, 0] == BOS and p[0, -1] == SEP and (p[0, 1:-1] != SEP).all()


def test_training_lowers_the_loss_and_moves_gate_biases():
    torch.manual_seed(0)
    cfg = md.MiniDeepSeekConfig(dim=32, n_heads=2, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
                                inter_dim=48, moe_inter_dim=16, n_routed_experts=4, n_expert_groups=1)
    model = md.MiniDeepSeek(cfg)
    history = train(model, steps=12, batch_size=8, lr=1e-2, seed=0)
    assert len(history["loss"]) == 12 and sum(history["loss"][-3:]) < sum(history["loss"][:3])
    bias = model.layers[1].ffn.gate.bias
    assert isinstance(model.layers[1].ffn, MoE) and bias.abs().sum() > 0 and not bias.requires_grad


def test_checkpoint_loads_and_copies():
    path = md.CHECKPOINT
    if not path.exists():
        pytest.skip("no checkpoint: run python -m utils.train_mini")
    ckpt = torch.load(path, weights_only=True)
    assert {"seed", "command", "config", "model", "mtp", "final"} <= set(ckpt)
    assert ckpt["command"].startswith("python -m utils.train_mini")
    model, cfg = md.load_checkpoint()
    assert not model.training and cfg.vocab_size == 64
    tokens = make_batch(64, 48, torch.Generator().manual_seed(99))
    with torch.no_grad():
        pred = model(tokens)[:, :-1].argmax(-1)
    mask = copy_mask(tokens)[:, 1:]
    assert (pred == tokens[:, 1:])[mask].float().mean() > 0.9
    assert path.stat().st_size < 8e6
