import math

import pytest
import torch

import utils.mla as mla
from utils.mla import (MLAConfig, MultiHeadLatentAttention, cache_bytes, kv_cache_elements_per_token,
                       mla_cache_elements_per_token)

CFG = MLAConfig(dim=32, n_heads=4, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4,
                v_head_dim=5, max_seq_len=24, rope_theta=500.0)
CFG_NO_Q_LORA = MLAConfig(dim=24, n_heads=3, q_lora_rank=0, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=6,
                          v_head_dim=7, max_seq_len=16)


def deepseek_v3_state(cfg, seed=0):
    """A state_dict in DeepSeek-V3's MLA layout, by name, built from a seed."""
    H, qk = cfg.n_heads, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    shapes = {"wkv_a.weight": (cfg.kv_lora_rank + cfg.qk_rope_head_dim, cfg.dim), "kv_norm.weight": (cfg.kv_lora_rank,),
              "wkv_b.weight": (H * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank),
              "wo.weight": (cfg.dim, H * cfg.v_head_dim)}
    if cfg.q_lora_rank:
        shapes.update({"wq_a.weight": (cfg.q_lora_rank, cfg.dim), "q_norm.weight": (cfg.q_lora_rank,),
                       "wq_b.weight": (H * qk, cfg.q_lora_rank)})
    else:
        shapes["wq.weight"] = (H * qk, cfg.dim)
    g = torch.Generator().manual_seed(seed)
    return {k: (1 + 0.1 * torch.randn(s, generator=g)) if "norm" in k else torch.randn(s, generator=g) / math.sqrt(s[1])
            for k, s in shapes.items()}


def v3_reference(state, cfg, x):
    """Full-sequence MLA written from DeepSeek-V3's definitions: complex rotation of adjacent pairs,
    the rope key shared by the heads, wkv_b rows per head as [nope keys | values]."""
    B, T, _ = x.shape
    H, nope, rope, dv, c = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank

    def rms(v, w):
        return v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * w

    freqs = 1.0 / cfg.rope_theta ** (torch.arange(0, rope, 2).float() / rope)
    cis = torch.polar(torch.ones(T, rope // 2), torch.outer(torch.arange(T).float(), freqs))

    def rotate(v):  # (B, T, ..., rope), adjacent pairs as complex numbers
        z = torch.view_as_complex(v.float().reshape(*v.shape[:-1], -1, 2))
        return torch.view_as_real(z * cis.view(1, T, *([1] * (v.dim() - 3)), -1)).flatten(-2)

    q = x @ state["wq.weight"].T if "wq.weight" in state else \
        rms(x @ state["wq_a.weight"].T, state["q_norm.weight"]) @ state["wq_b.weight"].T
    q = q.view(B, T, H, nope + rope)
    q = torch.cat([q[..., :nope], rotate(q[..., nope:])], -1)
    kv = x @ state["wkv_a.weight"].T
    latent, k_pe = rms(kv[..., :c], state["kv_norm.weight"]), rotate(kv[..., c:])
    kv = (latent @ state["wkv_b.weight"].T).view(B, T, H, nope + dv)
    k = torch.cat([kv[..., :nope], k_pe.unsqueeze(2).expand(B, T, H, rope)], -1)
    scores = torch.einsum("bshd,bthd->bhst", q, k) / math.sqrt(nope + rope)
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.einsum("bhst,bthd->bshd", scores.softmax(-1), kv[..., nope:])
    return out.flatten(2) @ state["wo.weight"].T


@pytest.mark.parametrize("cfg", [CFG, CFG_NO_Q_LORA])
@pytest.mark.parametrize("absorb", [False, True])
def test_deepseek_layout_loads_and_matches_prefill_and_decode(cfg, absorb):
    state = deepseek_v3_state(cfg, seed=1)
    mla = MultiHeadLatentAttention(cfg)
    mla.load_state_dict(state)  # strict: same names and shapes as DeepSeek-V3
    x = torch.randn(2, 9, cfg.dim)
    expected = v3_reference(state, cfg, x)
    with torch.no_grad():
        parts = [mla(x[:, :5], 0, absorb), mla(x[:, 5:6], 5, absorb), mla(x[:, 6:9], 6, absorb)]
    torch.testing.assert_close(torch.cat(parts, 1), expected, atol=1e-5, rtol=1e-4)


def test_naive_and_absorbed_paths_agree_at_prefill_and_decode():
    mla = MultiHeadLatentAttention(CFG)
    mla.load_state_dict(deepseek_v3_state(CFG, seed=2))
    x = torch.randn(3, 12, CFG.dim)
    with torch.no_grad():
        for start, end in ((0, 8), (8, 9), (9, 10), (10, 12)):
            naive, absorbed = mla(x[:, start:end], start, False), mla(x[:, start:end], start, True)
            torch.testing.assert_close(naive, absorbed, atol=1e-5, rtol=1e-4)


def test_absorbed_cache_holds_normalised_latent_and_rope_key():
    mla = MultiHeadLatentAttention(CFG)
    mla.load_state_dict(deepseek_v3_state(CFG, seed=3))
    x = torch.randn(2, 7, CFG.dim)
    with torch.no_grad():
        mla(x, 0, absorb=True)
        latent = mla.wkv_a(x)[..., :CFG.kv_lora_rank]
        torch.testing.assert_close(mla.kv_cache[:, :7], mla.kv_norm(latent))
    assert mla.kv_cache.shape == (2, CFG.max_seq_len, CFG.kv_lora_rank)
    assert mla.pe_cache.shape == (2, CFG.max_seq_len, CFG.qk_rope_head_dim)
    per_token = mla_cache_elements_per_token(1, CFG.kv_lora_rank, CFG.qk_rope_head_dim)
    assert cache_bytes(mla, absorb=True) == 2 * CFG.max_seq_len * per_token * 4
    mla(x, 0, absorb=False)
    qk = CFG.qk_nope_head_dim + CFG.qk_rope_head_dim
    assert cache_bytes(mla, absorb=False) == 2 * CFG.max_seq_len * CFG.n_heads * (qk + CFG.v_head_dim) * 4


def test_causal_and_limits():
    mla = MultiHeadLatentAttention(CFG)
    x = torch.randn(1, 6, CFG.dim)
    y = x.clone()
    y[:, -1] += 3
    with torch.no_grad():
        torch.testing.assert_close(mla(x)[:, :-1], mla(y)[:, :-1])
        with pytest.raises(ValueError, match="max_seq_len"):
            mla(torch.randn(1, CFG.max_seq_len + 1, CFG.dim))
        mla(x, 0, True)
        with pytest.raises(ValueError, match="prefill"):
            mla(torch.randn(4, 1, CFG.dim), 6, True)


def test_trains_with_cache_buffers():
    mla = MultiHeadLatentAttention(CFG)
    opt = torch.optim.SGD(mla.parameters(), lr=0.01)
    x = torch.randn(2, 8, CFG.dim)
    for _ in range(2):
        loss = mla(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(p.grad is not None for p in mla.parameters())
    assert set(mla.state_dict()) == set(deepseek_v3_state(CFG))


def test_cache_formulas_deepseek_v2_and_v3():
    assert mla_cache_elements_per_token(1, 512, 64) == 576
    assert mla_cache_elements_per_token(60, 512, 64) == 34_560  # V2
    assert kv_cache_elements_per_token(60, 128, 128) == 1_966_080  # V2 as MHA
    assert kv_cache_elements_per_token(95, 8, 128) == 194_560  # DeepSeek 67B, GQA
    saving = 1 - mla_cache_elements_per_token(60, 512, 64) * 6 / 8 / (kv_cache_elements_per_token(95, 8, 128) * 2)
    assert round(saving * 100, 1) == 93.3


def test_fill_cache_writes_what_a_prefill_writes():
    mla = MultiHeadLatentAttention(CFG)
    x = torch.randn(2, 6, CFG.dim)
    with torch.no_grad():
        for absorb, names in ((False, ("k_cache", "v_cache")), (True, ("kv_cache", "pe_cache"))):
            mla(x, 0, absorb)
            prefilled = [getattr(mla, n).clone() for n in names]
            mla.fill_cache(x, absorb)
            for name, before in zip(names, prefilled):
                torch.testing.assert_close(getattr(mla, name), before)


def test_latent_attention_paths_agree_and_cache_only_the_latent():
    torch.manual_seed(7)
    att = mla.LatentAttention(dim=12, n_heads=3, kv_lora_rank=5, head_dim=4, max_seq_len=10).eval()
    x = torch.randn(2, 7, 12)
    with torch.no_grad():
        whole = att(x)
        for absorb in (False, True):
            steps = torch.cat([att(x[:, :4], 0, absorb)] + [att(x[:, t:t + 1], t, absorb) for t in range(4, 7)], dim=1)
            torch.testing.assert_close(steps, whole, atol=1e-5, rtol=1e-4)
    assert tuple(att.kv_cache.shape) == (2, 10, 5)
    torch.testing.assert_close(att.kv_cache[:, :7], att.wkv_a(x).detach())


def test_decode_benchmark_times_any_module_with_the_forward_of_the_contract():
    cfg = mla.MLAConfig(dim=16, n_heads=2, q_lora_rank=0, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=2,
                        v_head_dim=3, max_seq_len=40)

    class Learner(torch.nn.Module):  # no fill_cache: filled through forward, in chunks
        def __init__(self):
            super().__init__()
            self.inner = mla.MultiHeadLatentAttention(cfg)

        def forward(self, x, start_pos=0, absorb=False):
            return self.inner(x, start_pos, absorb)

    rows = mla.decode_benchmark(cfg, [8, 32], repeats=3, module=Learner())
    assert [r["context"] for r in rows] == [8, 32] and all(r["naive_ms"] > 0 and r["absorbed_ms"] > 0 for r in rows)
