import math

import pytest
import torch

from utils.kv_cache import KVCache
from utils.sliding_window import (RollingKVCache, WindowedLM, attention_with_sinks, generate,
                                  sliding_window_mask)


def test_mask_sees_the_last_window_positions_bottom_right():
    m = sliding_window_mask(4, 4, 2)
    assert (~m).sum(1).tolist() == [1, 2, 2, 2] and not m[3, 2] and m[3, 1] and m[0, 1]
    m = sliding_window_mask(2, 6, 3)  # queries at positions 4 and 5
    assert (~m).nonzero().tolist() == [[0, 2], [0, 3], [0, 4], [1, 3], [1, 4], [1, 5]]
    assert torch.equal(sliding_window_mask(5, 5, 5), torch.ones(5, 5, dtype=torch.bool).triu(1))
    with pytest.raises(ValueError):
        sliding_window_mask(3, 2, 1)


@pytest.mark.parametrize("chunks", [[1] * 9, [3, 3, 3], [7, 2], [2, 5, 1, 1], [9]])
def test_rolling_cache_returns_what_the_new_queries_need_in_order(chunks):
    window, total = 4, sum(chunks)
    keys = torch.arange(total, dtype=torch.float32).view(1, 1, total, 1)
    cache, start = RollingKVCache(1, window, 1, 1), 0
    for T in chunks:
        k, v = cache.update(keys[:, :, start:start + T], -keys[:, :, start:start + T])
        first = max(0, start - (window - 1))
        assert k.flatten().tolist() == list(range(first, start + T)) and torch.equal(v, -k)
        start += T
        assert cache.seq_len == start and cache.k.shape[2] == window


@pytest.mark.parametrize("prompt, chunk", [(3, None), (11, None), (11, 3), (11, 5), (5, 5), (12, 1)])
def test_cached_decoding_gives_the_tokens_of_full_recomputation(prompt, chunk):
    torch.manual_seed(0)
    model = WindowedLM(vocab_size=50, d_model=32, num_heads=4, n_layers=2, window=5).eval()
    idx = torch.randint(0, 50, (2, prompt))
    assert torch.equal(generate(model, idx, 9, use_cache=True, chunk=chunk), generate(model, idx, 9, use_cache=False))


def test_the_window_matters():
    """Without it the model generates other tokens: the check above is not vacuous."""
    torch.manual_seed(0)
    model = WindowedLM(vocab_size=50, window=3).eval()
    wide = WindowedLM(vocab_size=50, window=40).eval()
    wide.load_state_dict(model.state_dict())
    idx = torch.randint(0, 50, (2, 12))
    assert not torch.equal(generate(model, idx, 8, use_cache=False), generate(wide, idx, 8, use_cache=False))


def test_rolling_cache_memory_is_constant():
    cache = RollingKVCache(1, 128, 2, 16)
    sizes = []
    for n in (1024, 16384):
        cache.reset()
        for s in range(0, n, 512):
            cache.update(torch.randn(1, 2, 512, 16), torch.randn(1, 2, 512, 16))
        sizes.append(cache.nbytes())
    assert sizes == [2 * 128 * 2 * 16 * 4] * 2


def test_sinks_take_weight_and_vanish_from_the_output():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 6, 8), torch.randn(2, 3, 6, 5)
    sinks = torch.tensor([-1.0, 0.0, 2.0])
    scores = q @ k.transpose(-2, -1) / math.sqrt(8)
    e = torch.cat([scores, sinks.view(1, 3, 1, 1).expand(2, 3, 4, 1)], -1).softmax(-1)
    torch.testing.assert_close(attention_with_sinks(q, k, v, sinks), e[..., :-1] @ v)
    low = attention_with_sinks(q, k, v, torch.full((3,), -1e4))
    torch.testing.assert_close(low, torch.softmax(scores, -1) @ v)  # a very low sink is plain attention
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1:, :2] = False
    out = attention_with_sinks(q, k, v, sinks, mask)
    assert torch.equal(out[:, :, 0], torch.zeros(2, 3, 5))  # a fully blocked row: all on the sink
    out4 = attention_with_sinks(q, k, v, sinks, mask.expand(2, 1, 4, 6))
    torch.testing.assert_close(out4, out)


def test_full_cache_and_rolling_cache_agree_within_the_window():
    torch.manual_seed(0)
    model = WindowedLM(vocab_size=30, window=64).eval()
    idx = torch.randint(0, 30, (1, 10))
    full = generate(model, idx, 5, cache_cls=lambda b, w, h, d, **kw: KVCache(b, 64, h, d, **kw))
    assert torch.equal(full, generate(model, idx, 5))
