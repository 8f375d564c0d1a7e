"""Tests of utils.linear_attention and utils.gated_deltanet, the reference of notebook 16, and their
parity with Hugging Face transformers' pure-PyTorch code (Qwen3-Next's Gated DeltaNet, Kimi Linear's
KDA): `.venv/bin/pytest utils/tests/test_linear_attention.py`.

The parity tests need transformers, a test-only extra (requirements-test.txt, pinned to
TRANSFORMERS_VERSION; `make test` installs it): nothing is downloaded, the configs are built
locally and the weights are random. Without transformers they skip, saying so."""
import math

import pytest
import torch

from utils import linear_attention as la
from utils.gated_deltanet import GatedDeltaNet, GatedDeltaNetConfig

TRANSFORMERS_VERSION = "5.24.0"  # the release the course's reference was checked against (requirements-test.txt)


def _inputs(B=2, T=37, H_k=2, H_v=4, d_k=8, d_v=6, kda=False, g_scale=1.0, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(B, T, H_k, d_k, generator=gen), torch.randn(B, T, H_k, d_k, generator=gen)
    v = torch.randn(B, T, H_v, d_v, generator=gen)
    g = -torch.rand(B, T, H_v, *((d_k,) if kda else ()), generator=gen) * g_scale
    beta, s0 = torch.rand(B, T, H_v, generator=gen), torch.randn(B, H_v, d_k, d_v, generator=gen)
    return q, k, v, g, beta, s0


def _close(a, b, atol=1e-5, rtol=1e-4):
    torch.testing.assert_close(a, b, atol=atol, rtol=rtol)


# the course's own forms agree -------------------------------------------------------------------
def test_linear_attention_recurrent_equals_parallel_and_the_state_is_sum_of_outer_products():
    q, k, v = (torch.randn(2, 9, 3, d, generator=torch.Generator().manual_seed(d)) for d in (4, 4, 5))
    out, state = la.linear_attention_recurrent(q, k, v)
    _close(out, la.linear_attention_parallel(q, k, v))
    _close(state, torch.einsum("bthk,bthv->bhkv", k, v))
    low = la.linear_attention_recurrent(*(x.bfloat16() for x in (q, k, v)))
    assert low[0].dtype == torch.bfloat16 and low[1].dtype == torch.float32


@pytest.mark.parametrize("T, chunk", [(1, 4), (3, 4), (8, 4), (37, 16), (70, 64)])
@pytest.mark.parametrize("l2", [False, True])
def test_chunked_gated_delta_rule_equals_recurrent(T, chunk, l2):
    q, k, v, g, beta, s0 = _inputs(T=T)
    a = la.recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True, use_qk_l2norm=l2)
    b = la.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk, initial_state=s0, output_final_state=True, use_qk_l2norm=l2)
    _close(b[0], a[0], atol=1e-4)
    _close(b[1], a[1], atol=1e-4)


def test_the_step_is_the_rule_on_one_token_and_the_state_is_float32():
    q, k, v, g, beta, s0 = _inputs(T=1, H_k=4)
    out, state = la.recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True)
    o, s = la.gated_delta_step(s0, q[:, 0] * 8 ** -0.5, k[:, 0], v[:, 0], g[:, 0], beta[:, 0])
    _close(out[:, 0], o)
    _close(state, s)
    low = la.chunk_gated_delta_rule(*(x.bfloat16() for x in (q, k, v, g, beta)), output_final_state=True)
    assert low[0].dtype == torch.bfloat16 and low[1].dtype == torch.float32
    assert la.recurrent_gated_delta_rule(q, k, v, g, beta)[1] is None


def test_strong_decays_give_no_nan_and_forget_the_initial_state():
    q, k, v, g, beta, s0 = _inputs(T=10, g_scale=0.0)
    g = torch.full_like(g, -60.0)
    a = la.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=4, initial_state=s0 * 1e6, output_final_state=True)
    b = la.recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=None, output_final_state=True)
    assert torch.isfinite(a[0]).all()
    _close(a[0], b[0])


def test_value_heads_must_be_a_multiple_of_key_heads():
    q, k, v, g, beta, _ = _inputs(H_k=2, H_v=3)
    for rule in (la.recurrent_gated_delta_rule, la.chunk_gated_delta_rule):
        with pytest.raises(ValueError, match="3 value heads is not a multiple of 2 key heads"):
            rule(q, k, v, g, beta)


@pytest.mark.parametrize("T, chunk", [(5, 8), (37, 16)])
def test_kda_forms_agree_and_kda_with_one_decay_per_head_is_gated_deltanet(T, chunk):
    q, k, v, g, beta, s0 = _inputs(T=T, H_k=3, H_v=3, kda=True)
    a = la.recurrent_kda(q, k, v, g, beta, initial_state=s0, output_final_state=True, use_qk_l2norm=True)
    b = la.chunk_kda(q, k, v, g, beta, chunk_size=chunk, initial_state=s0, output_final_state=True, use_qk_l2norm=True)
    _close(b[0], a[0])
    _close(b[1], a[1])
    per_head = g[..., 0]
    c = la.recurrent_kda(q, k, v, per_head[..., None].expand_as(g), beta, initial_state=s0, output_final_state=True)
    d = la.recurrent_gated_delta_rule(q, k, v, per_head, beta, initial_state=s0, output_final_state=True)
    _close(c[0], d[0])


def test_hybrid_cache_bytes_of_qwen3_next_matches_kv_cache_bytes():
    from utils.kv_cache import kv_cache_bytes
    state, cache = la.hybrid_cache_bytes(1, 4096, 36, 12, 32, 128, 128, 2 * 2 * 256)
    assert state == 36 * 32 * 128 * 128 * 4 and cache == kv_cache_bytes(1, 4096, 12, 2, 256)


def test_the_layer_gives_the_same_output_for_a_prefill_and_token_by_token():
    torch.manual_seed(0)
    cfg = GatedDeltaNetConfig(hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                              linear_value_head_dim=6, linear_conv_kernel_dim=4)
    layer = GatedDeltaNet(cfg, chunk_size=8)
    x = torch.randn(2, 19, 32)
    with torch.no_grad():
        whole, (conv, rec) = layer(x)
        y, state = layer(x[:, :2])  # a prefill shorter than the convolution's kernel
        ys = [y]
        for t in range(2, 19):
            y, state = layer(x[:, t:t + 1], state)
            ys.append(y)
    _close(torch.cat(ys, 1), whole)
    _close(state[1], rec)
    assert conv.shape == (2, 2 * 2 * 8 + 4 * 6, 3)


# parity with transformers ---------------------------------------------------------------------
@pytest.fixture(scope="module")
def hf(request):
    """transformers' modules for Qwen3-Next and Kimi Linear, imported offline (nothing is downloaded)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("HF_HUB_OFFLINE", "1")
    request.addfinalizer(mp.undo)
    transformers = pytest.importorskip(
        "transformers", reason=f"transformers is not installed: `make test` installs requirements-test.txt "
                               f"(transformers=={TRANSFORMERS_VERSION}) for these parity tests")
    from transformers.models.kimi_linear import modeling_kimi_linear
    from transformers.models.qwen3_next import modeling_qwen3_next
    return transformers, modeling_qwen3_next, modeling_kimi_linear


def test_the_pinned_transformers_is_the_one_installed(hf):
    assert hf[0].__version__ == TRANSFORMERS_VERSION, (
        f"transformers {hf[0].__version__} is installed, the parity was recorded with {TRANSFORMERS_VERSION} "
        "(requirements-test.txt): update both together")


@pytest.mark.parametrize("T, chunk", [(1, 64), (37, 16), (70, 64)])
@pytest.mark.parametrize("l2", [False, True])
def test_gated_delta_rule_equals_transformers(hf, T, chunk, l2):
    qwen = hf[1]
    q, k, v, g, beta, s0 = _inputs(T=T)  # grouped value heads (4 for 2), an initial state
    theirs = qwen.torch_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True,
                                                   use_qk_l2norm_in_kernel=l2)
    ours = la.recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True, use_qk_l2norm=l2)
    _close(ours[0], theirs[0], atol=1e-4)
    _close(ours[1], theirs[1], atol=1e-4)
    theirs = qwen.torch_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk, initial_state=s0, output_final_state=True,
                                               use_qk_l2norm_in_kernel=l2)
    ours = la.chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=chunk, initial_state=s0, output_final_state=True,
                                     use_qk_l2norm=l2)
    _close(ours[0], theirs[0], atol=1e-4)
    _close(ours[1], theirs[1], atol=1e-4)
    assert qwen.torch_chunk_gated_delta_rule(q, k, v, g, beta)[1] is None and la.chunk_gated_delta_rule(q, k, v, g, beta)[1] is None


@pytest.mark.parametrize("T, chunk", [(1, 64), (37, 16)])
@pytest.mark.parametrize("l2", [False, True])
def test_kda_equals_transformers(hf, T, chunk, l2):
    kimi = hf[2]
    q, k, v, g, beta, s0 = _inputs(T=T, H_k=3, H_v=3, kda=True)
    theirs = kimi.recurrent_kimi_delta_attention(q, k, v, g, beta, s0, True, use_qk_l2norm_in_kernel=l2)
    ours = la.recurrent_kda(q, k, v, g, beta, s0, True, use_qk_l2norm=l2)
    _close(ours[0], theirs[0], atol=1e-4)
    _close(ours[1], theirs[1], atol=1e-4)
    theirs = kimi.chunk_kimi_delta_attention(q, k, v, g, beta, chunk_size=chunk, initial_state=s0, output_final_state=True,
                                             use_qk_l2norm_in_kernel=l2)
    ours = la.chunk_kda(q, k, v, g, beta, chunk_size=chunk, initial_state=s0, output_final_state=True, use_qk_l2norm=l2)
    _close(ours[0], theirs[0], atol=1e-4)
    _close(ours[1], theirs[1], atol=1e-4)


def test_gated_deltanet_loads_qwen3_next_layer_and_matches_it_in_prefill_and_token_by_token(hf):
    transformers, qwen, _ = hf
    from transformers.cache_utils import DynamicCache
    cfg = transformers.Qwen3NextConfig(hidden_size=48, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
                                       linear_value_head_dim=6, linear_conv_kernel_dim=4, num_hidden_layers=1,
                                       num_attention_heads=2, num_key_value_heads=1, head_dim=8, layer_types=["linear_attention"])
    torch.manual_seed(0)
    theirs = qwen.Qwen3NextGatedDeltaNet(cfg, layer_idx=0).eval()
    with torch.no_grad():
        for p in theirs.parameters():  # random weights of a trained layer's scale, norm weights away from 1
            p.copy_(torch.randn_like(p) * (0.5 if p.dim() < 2 else p.shape[-1] ** -0.5) + (1.0 if p.dim() == 1 else 0.0))
    ours = GatedDeltaNet(cfg, chunk_size=16)
    ours.load_state_dict(theirs.state_dict())  # strict: the same names and shapes
    x = torch.randn(2, 37, 48, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        _close(ours(x)[0], theirs(x), atol=1e-4)
        cache, state = DynamicCache(config=cfg), None
        for start, end in [(0, 5)] + [(t, t + 1) for t in range(5, 37)]:  # a prefill of 5, then token by token
            want = theirs(x[:, start:end], cache=cache)
            got, state = ours(x[:, start:end], state)
            _close(got, want, atol=1e-4)
        _close(state[1], cache.get_recurrent_state(0), atol=1e-4)
        _close(state[0], cache.get_conv_state(0)[..., 1:])  # transformers keeps the kernel's 4 last inputs, the layer 3
