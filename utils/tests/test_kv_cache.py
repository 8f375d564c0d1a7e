import pytest
import torch

from utils import kv_cache as kc
from utils.gpt import GPTConfig, GPTModel
from utils.multihead import MultiHeadAttention


def test_cache_returns_filled_part_and_refuses_overflow():
    cache = kc.KVCache(2, 5, 3, 4)
    k1, v1 = torch.randn(2, 3, 3, 4), torch.randn(2, 3, 3, 4)
    k, v = cache.update(k1, v1)
    assert k.shape == (2, 3, 3, 4) and cache.seq_len == 3
    k, v = cache.update(k1[:, :, :2], v1[:, :, :2])
    torch.testing.assert_close(k[:, :, 3:], k1[:, :, :2])
    with pytest.raises(ValueError):
        cache.update(k1[:, :, :1], v1[:, :, :1])
    cache.reset()
    assert cache.seq_len == 0 and cache.update(k1, v1)[0].shape[2] == 3


@pytest.mark.parametrize("cls", [kc.KVCache, kc.ConcatKVCache])
def test_cached_steps_equal_full_pass_and_mha(cls):
    torch.manual_seed(0)
    attn = kc.CachedMultiHeadAttention(6, 8, 12, 2).eval()
    mha = MultiHeadAttention(6, 8, 12, 0.0, 2).eval()
    mha.load_state_dict(attn.state_dict(), strict=False)
    x = torch.randn(2, 7, 6)
    with torch.no_grad():
        full = attn(x)
        torch.testing.assert_close(full, mha(x))
        cache = cls(2, 12, 2, 4)
        steps = [attn(x[:, :3], cache)] + [attn(x[:, t:t + 1], cache) for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-4)


def test_gqa_extremes_equal_mha_and_mqa_shares_one_head():
    torch.manual_seed(1)
    x = torch.randn(2, 5, 8)
    mha = kc.CachedMultiHeadAttention(8, 8, 5, 4).eval()
    gqa = kc.GroupedQueryAttention(8, 8, 5, 4, 4).eval()
    gqa.load_state_dict(mha.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(gqa(x), mha(x))
        mqa = kc.GroupedQueryAttention(8, 8, 5, 4, 1).eval()
        # MHA whose 4 key/value heads are copies of MQA's single head
        mha.load_state_dict(mqa.state_dict() | {n: mqa.state_dict()[n].repeat(4, *[1] * (mqa.state_dict()[n].dim() - 1))
                                                for n in mqa.state_dict() if n.startswith(("W_key", "W_value"))})
        torch.testing.assert_close(mqa(x), mha(x))


def test_gqa_head_to_group_assignment():
    torch.manual_seed(2)
    gqa = kc.GroupedQueryAttention(8, 8, 4, 4, 2).eval()
    x = torch.randn(1, 4, 8)
    with torch.no_grad():
        # zero group 1's values: heads 2 and 3 (h // 2 == 1) must output exactly 0 before out_proj
        gqa.W_value.weight[2:4].zero_()
        ctx = {}
        gqa.out_proj.register_forward_hook(lambda m, i, o: ctx.setdefault("in", i[0]))
        gqa(x)
    heads = ctx["in"].view(1, 4, 4, 2)
    assert heads[..., 2:, :].abs().max() == 0 and heads[..., :2, :].abs().max() > 0


def test_generate_same_tokens_with_and_without_cache():
    torch.manual_seed(3)
    for groups in (None, 2, 1):
        model = GPTModel(GPTConfig(vocab_size=50, context_length=24, emb_dim=16, n_heads=4, n_layers=2,
                                   n_kv_groups=groups))
        prompt = torch.randint(0, 50, (2, 4))
        a = kc.generate(model, prompt, 12, use_cache=True)
        b = kc.generate(model, prompt, 12, use_cache=False)
        c = kc.generate(model, prompt, 12, cache_cls=kc.ConcatKVCache)
        assert a.shape == (2, 16) and torch.equal(a, b) and torch.equal(a, c) and torch.equal(a[:, :4], prompt)
    with pytest.raises(ValueError):
        kc.generate(model, prompt, 30)


def test_kv_cache_bytes_matches_real_tensors_and_known_sizes():
    cache = kc.KVCache(3, 10, 2, 8, dtype=torch.bfloat16)
    real = cache.k.numel() * cache.k.element_size() + cache.v.numel() * cache.v.element_size()
    assert kc.kv_cache_bytes(3, 10, 1, 2, 8) == real
    # Llama-3-8B: 32 layers, 8 KV heads of 128, bf16 -> 128 KiB per token
    assert kc.kv_cache_bytes(1, 1, 32, 8, 128) == 131072
    # rasbt's GQA estimator: d 4096, 32 heads, 32 layers, 32,768 tokens, bf16: 17.18 GB MHA, 4.29 GB with 8 KV heads
    assert round(kc.kv_cache_bytes(1, 32768, 32, 32, 128) / 1e9, 2) == 17.18
    assert round(kc.kv_cache_bytes(1, 32768, 32, 8, 128) / 1e9, 2) == 4.29
