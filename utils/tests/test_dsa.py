"""utils.dsa against a reference restated in this file from DeepSeek-V3.2-Exp's definitions
(`inference/model.py`: `precompute_freqs_cis` without YaRN, `apply_rotary_emb` with its
`interleaved` switch of 2025-11-17, `Indexer.forward`, `MLA.forward`'s prefill and decode paths
with the index mask), fed a state_dict in the official names and layouts."""
import math

import pytest
import torch
import torch.nn.functional as F

from utils.dsa import DSAConfig, LightningIndexer, SparseMLA, topk_key_mask
from utils.mla import MultiHeadLatentAttention

CFG = DSAConfig(dim=32, n_heads=4, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4,
                v_head_dim=5, max_seq_len=40, rope_theta=500.0, index_n_heads=8, index_head_dim=8, index_topk=5)  # 8 heads: an all-zero (tied) score is rare


def official_state(cfg, seed=0):
    """Parameters by the official names: MLA's, then the indexer's (its LayerNorm has a bias)."""
    H, qk = cfg.n_heads, cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    shapes = {"wq_a.weight": (cfg.q_lora_rank, cfg.dim), "q_norm.weight": (cfg.q_lora_rank,),
              "wq_b.weight": (H * qk, cfg.q_lora_rank), "wkv_a.weight": (cfg.kv_lora_rank + cfg.qk_rope_head_dim, cfg.dim),
              "kv_norm.weight": (cfg.kv_lora_rank,), "wkv_b.weight": (H * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank),
              "wo.weight": (cfg.dim, H * cfg.v_head_dim),
              "indexer.wq_b.weight": (cfg.index_n_heads * cfg.index_head_dim, cfg.q_lora_rank),
              "indexer.wk.weight": (cfg.index_head_dim, cfg.dim), "indexer.k_norm.weight": (cfg.index_head_dim,),
              "indexer.k_norm.bias": (cfg.index_head_dim,), "indexer.weights_proj.weight": (cfg.index_n_heads, cfg.dim)}
    g = torch.Generator().manual_seed(seed)
    return {k: (1 + 0.1 * torch.randn(s, generator=g)) if "norm.weight" in k else
            0.1 * torch.randn(s, generator=g) if k.endswith("bias") else torch.randn(s, generator=g) / math.sqrt(s[1])
            for k, s in shapes.items()}


def freqs_cis(dim, seqlen, base):
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    return torch.polar(torch.ones(seqlen, dim // 2), torch.outer(torch.arange(seqlen).float(), freqs))


def rotary(x, cis, interleaved=True):
    """x (B, T, H, d): pairs (2i, 2i+1) when interleaved, else (i, i + d/2), as complex numbers."""
    shape = x.shape
    if not interleaved:
        x = x.view(*shape[:-1], 2, -1).transpose(-1, -2).contiguous()
    z = torch.view_as_complex(x.float().reshape(*shape[:-1], -1, 2)) * cis.view(1, shape[1], 1, -1)
    y = torch.view_as_real(z)
    if not interleaved:
        y = y.transpose(-1, -2)
    return y.flatten(3)


def hadamard(d):
    h = torch.ones(1, 1)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h * d ** -0.5


def rms(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def official_index_scores(s, cfg, x, qr, cis, interleaved=False):
    """Indexer.forward up to the top-k, without FP8 but WITH the Hadamard rotation (it changes no score)."""
    B, T, _ = x.shape
    r, d, nh = cfg.qk_rope_head_dim, cfg.index_head_dim, cfg.index_n_heads
    q = (qr @ s["indexer.wq_b.weight"].T).view(B, T, nh, d)
    q = torch.cat([rotary(q[..., :r], cis, interleaved), q[..., r:]], -1)
    k = F.layer_norm(x @ s["indexer.wk.weight"].T, (d,), s["indexer.k_norm.weight"], s["indexer.k_norm.bias"], 1e-6)
    k = torch.cat([rotary(k[..., :r].unsqueeze(2), cis, interleaved).squeeze(2), k[..., r:]], -1)
    q, k = q @ hadamard(d), k @ hadamard(d)
    weights = (x @ s["indexer.weights_proj.weight"].T) * nh ** -0.5 * d ** -0.5
    score = torch.einsum("bshd,btd->bsht", q, k).relu() * weights.unsqueeze(-1)
    return score.sum(2) + torch.full((T, T), float("-inf")).triu(1)


def official_mla(s, cfg, x, interleaved_indexer=False):
    """MLA.forward over a whole text: the prefill path with the index mask (mask + scatter of the top-k)."""
    B, T, _ = x.shape
    H, nope, r, dv, c = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
    cis = freqs_cis(r, T, cfg.rope_theta)
    qr = rms(x @ s["wq_a.weight"].T, s["q_norm.weight"])
    q = (qr @ s["wq_b.weight"].T).view(B, T, H, nope + r)
    q = torch.cat([q[..., :nope], rotary(q[..., nope:], cis)], -1)
    kv, k_pe = (x @ s["wkv_a.weight"].T).split([c, r], -1)
    kv = (rms(kv, s["kv_norm.weight"]) @ s["wkv_b.weight"].T).view(B, T, H, nope + dv)
    k_pe = rotary(k_pe.unsqueeze(2), cis)
    k = torch.cat([kv[..., :nope], k_pe.expand(-1, -1, H, -1)], -1)
    scores = torch.einsum("bshd,bthd->bsht", q, k) * (nope + r) ** -0.5
    mask = torch.full((T, T), float("-inf")).triu(1)
    index = official_index_scores(s, cfg, x, qr, freqs_cis(r, T, cfg.rope_theta), interleaved_indexer)
    topk = index.topk(min(cfg.index_topk, T), dim=-1)[1]
    index_mask = torch.full((B, T, T), float("-inf")).scatter_(-1, topk, 0) + mask
    weights = (scores + index_mask.unsqueeze(2)).softmax(-1)
    return torch.einsum("bsht,bthd->bshd", weights, kv[..., nope:]).flatten(2) @ s["wo.weight"].T, topk


@pytest.fixture
def loaded():
    torch.manual_seed(0)
    module, state = SparseMLA(CFG).eval(), official_state(CFG)
    module.load_state_dict(state)  # strict: the official names, nothing more, nothing less
    return module, state


def test_indexer_matches_the_official_definition(loaded):
    module, state = loaded
    x = torch.randn(2, 12, CFG.dim)
    qr = module.q_norm(module.wq_a(x))
    with torch.no_grad():
        got = module.indexer(x, qr)
        want = official_index_scores(state, CFG, x, qr, freqs_cis(CFG.qk_rope_head_dim, 12, CFG.rope_theta))
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)
    assert module.indexer.k_cache.shape == (2, CFG.max_seq_len, CFG.index_head_dim)


@pytest.mark.parametrize("absorb", [False, True])
def test_sparse_mla_matches_the_official_definition_prefill_and_decode(loaded, absorb):
    module, state = loaded
    x = torch.randn(2, 14, CFG.dim)
    with torch.no_grad():
        want, _ = official_mla(state, CFG, x)
        parts = [module(x[:, :9], 0, absorb)] + [module(x[:, t:t + 1], t, absorb) for t in range(9, 12)]
        parts.append(module(x[:, 12:], 12, absorb))  # a chunk of two after decoding
    torch.testing.assert_close(torch.cat(parts, 1), want, atol=1e-5, rtol=1e-4)


def test_the_first_release_interleaved_indexer_rope_selects_other_keys(loaded):
    module, state = loaded
    x = torch.randn(1, 32, CFG.dim)
    with torch.no_grad():
        _, fixed = official_mla(state, CFG, x)
        _, first = official_mla(state, CFG, x, interleaved_indexer=True)
        buggy = SparseMLA(CFG, interleaved_indexer_rope=True)
        buggy.load_state_dict(state)
        qr = buggy.q_norm(buggy.wq_a(x))
        mask = topk_key_mask(buggy.indexer(x, qr), CFG.index_topk)
    chosen = lambda idx: [set(row.tolist()) for row in idx[0]]
    assert chosen(fixed) != chosen(first)  # the layout changes which keys MLA reads
    assert chosen(first)[CFG.index_topk:] == [set((~m).nonzero().flatten().tolist()) for m in mask[0]][CFG.index_topk:]


def test_hadamard_rotation_keeps_every_dot_product():
    q, k, h = torch.randn(5, 128, dtype=torch.float64), torch.randn(7, 128, dtype=torch.float64), hadamard(128).double()
    torch.testing.assert_close((q @ h) @ (k @ h).T, q @ k.T)


@pytest.mark.parametrize("absorb", [False, True])
def test_sparse_mla_is_09s_mla_when_topk_covers_every_position(absorb):
    cfg = DSAConfig(**{**CFG.__dict__, "index_topk": 14})
    torch.manual_seed(1)
    sparse = SparseMLA(cfg).eval()
    dense = MultiHeadLatentAttention(cfg)
    dense.load_state_dict({k: v for k, v in sparse.state_dict().items() if not k.startswith("indexer.")})
    x = torch.randn(2, 14, cfg.dim)
    with torch.no_grad():
        for start, end in ((0, 8), (8, 9), (9, 14)):
            torch.testing.assert_close(sparse(x[:, start:end], start, absorb), dense(x[:, start:end], start, absorb),
                                       atol=1e-5, rtol=1e-4)


def test_topk_key_mask_keeps_the_best_finite_scores():
    scores = torch.tensor([[[0.5, float("-inf"), float("-inf")], [3.0, 1.0, float("-inf")], [1.0, 4.0, 2.0]]])
    assert topk_key_mask(scores, 2).tolist() == [[[False, True, True], [False, False, True], [True, False, False]]]
    assert not topk_key_mask(scores, 9)[0, 2].any()


def test_defaults_are_v32s_and_q_lora_is_required():
    cfg = DSAConfig(dim=8, n_heads=1, q_lora_rank=0, kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2,
                    v_head_dim=2, max_seq_len=4)
    assert (cfg.index_n_heads, cfg.index_head_dim, cfg.index_topk) == (64, 128, 2048)
    with pytest.raises(ValueError):
        SparseMLA(cfg)
    assert isinstance(LightningIndexer(DSAConfig(**{**cfg.__dict__, "q_lora_rank": 4, "index_n_heads": 2,
                                                    "index_head_dim": 4})).k_norm, torch.nn.LayerNorm)
