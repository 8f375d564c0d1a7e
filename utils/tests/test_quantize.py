"""Tests of utils.quantize, the reference kernels of notebook 11: `.venv/bin/pytest utils/tests/test_quantize.py`."""
import pytest
import torch
from torch import nn

from utils import quantize as qz


def test_absmax_per_tensor_error_is_at_most_half_a_step():
    x = torch.randn(64, 48, generator=torch.Generator().manual_seed(0))
    q, s = qz.absmax_quantize(x)
    assert q.dtype == torch.int8 and s.dim() == 0
    assert torch.isclose(s, x.abs().max() / 127)
    assert int(q.abs().max()) == 127
    assert ((qz.dequantize(q, s) - x).abs() <= s / 2 + 1e-7).all()


def test_absmax_per_channel_scale_is_kept_for_broadcasting():
    w = torch.randn(6, 10, generator=torch.Generator().manual_seed(1))
    q, s = qz.absmax_quantize(w, dim=-1)  # one scale per output channel (row)
    assert s.shape == (6, 1)
    assert torch.allclose(s.squeeze(1), w.abs().amax(1) / 127)
    assert ((qz.dequantize(q, s) - w).abs() <= s / 2 + 1e-7).all()
    assert qz.absmax_quantize(w, dim=0)[1].shape == (1, 10)


def test_absmax_clamps_a_bfloat16_peak_that_rounds_to_128():
    x = torch.tensor([2.6875, -1.0], dtype=torch.bfloat16)
    assert torch.round(x / (x.abs().amax() / 127)).max() == 128  # the trap: unclamped, it wraps to -128
    q, _ = qz.absmax_quantize(x)
    assert q.tolist()[0] == 127


def test_one_outlier_hurts_per_tensor_more_than_per_channel():
    w = torch.randn(32, 32, generator=torch.Generator().manual_seed(2)) * 0.02
    w[3, 7] = 1.0
    per_tensor = (qz.dequantize(*qz.absmax_quantize(w)) - w).abs().mean()
    per_channel = (qz.dequantize(*qz.absmax_quantize(w, dim=-1)) - w).abs().mean()
    assert per_channel * 10 < per_tensor


@pytest.mark.parametrize("shape, block", [((256, 384), 128), ((200, 300), 128), ((130, 70), 64)])
def test_fp8_blocks_cover_ragged_edges_and_round_trip(shape, block):
    w = torch.randn(*shape, generator=torch.Generator().manual_seed(3)) * 0.1
    w[-1, -1] = 5.0
    w_fp8, s = qz.fp8_block_quantize(w, block)
    assert w_fp8.dtype == torch.float8_e4m3fn and w_fp8.shape == w.shape
    assert s.shape == (-(-shape[0] // block), -(-shape[1] // block))
    assert torch.isclose(s[-1, -1], torch.tensor(5.0 / 448))
    deq = qz.fp8_block_dequantize(w_fp8, s, block)
    full = qz._expand(s, shape, block)
    assert ((deq - w).abs() <= w.abs() / 16 + full / 1024 + 1e-8).all()  # 3 mantissa bits


def test_fp8_scale_matches_deepseek_weight_dequant():
    """DeepSeek-V3 inference/kernel.py: y = x * s with s = amax / 448 per 128 x 128 block."""
    w = torch.randn(256, 256, generator=torch.Generator().manual_seed(4))
    w_fp8, s = qz.fp8_block_quantize(w)
    block = w[128:, :128]
    assert torch.isclose(s[1, 0], block.abs().max() / 448)
    assert float(w_fp8.float().abs().max()) == 448.0


def test_fp8_activation_scales_per_token_per_block():
    x = torch.randn(2, 5, 256, generator=torch.Generator().manual_seed(5))
    x[1, 3, 130] = 50.0
    x_fp8, s = qz.fp8_activation_quantize(x)
    assert s.shape == (2, 5, 2)
    assert torch.isclose(s[1, 3, 1], torch.tensor(50.0 / 448))
    assert torch.isclose(s[1, 3, 0], x[1, 3, :128].abs().max() / 448)
    back = qz.fp8_activation_dequantize(x_fp8, s)
    assert ((back - x).abs() <= x.abs() / 16 + s.repeat_interleave(128, -1) / 1024 + 1e-8).all()
    with pytest.raises(ValueError, match="multiple of block_size"):
        qz.fp8_activation_quantize(torch.zeros(3, 100))


def test_fp8_grid_has_448_and_3_mantissa_bits():
    grid = qz.fp8_e4m3_grid()
    assert float(grid.max()) == 448.0 and float(grid.min()) == -448.0
    assert len(grid) == 253  # 256 codes - 2 NaNs - one duplicate zero
    assert float(grid[(grid >= 1) & (grid < 2)].diff().max()) == 0.125  # 8 values per octave


# 24 and 40: multiples of 8 that torch._weight_int8pack_mm gets wrong on AVX-512 (it steps K by 16)
@pytest.mark.parametrize("d_in, d_out, bias", [(64, 48, True), (32, 16, False), (12, 5, True), (24, 8, True), (40, 16, False)])
def test_int8_linear_matches_dequantized_weights(d_in, d_out, bias):
    torch.manual_seed(6)
    lin = nn.Linear(d_in, d_out, bias=bias)
    layer = qz.Int8WeightOnlyLinear.from_linear(lin)
    assert layer.weight.dtype == torch.int8 and layer.scale.shape == (d_out,)
    x = torch.randn(2, 3, d_in)
    q, s = qz.absmax_quantize(lin.weight.detach(), dim=-1)
    expected = x @ (q.float() * s).T + (lin.bias.detach() if bias else 0)
    with torch.no_grad():
        out = layer(x)
    assert out.dtype == torch.float32 and out.shape == (2, 3, d_out)
    torch.testing.assert_close(out, expected, atol=0.02 * float(expected.abs().max()), rtol=0)


def test_quantize_model_replaces_nested_linears_and_honours_skip():
    model = nn.Sequential(nn.Linear(16, 32), nn.Sequential(nn.GELU(), nn.ModuleList([nn.Linear(32, 32)])), nn.Linear(32, 8))
    before = qz.weight_bytes(model)
    assert qz.quantize_model_(model, skip=("2",)) is model
    assert isinstance(model[0], qz.Int8WeightOnlyLinear) and isinstance(model[1][1][0], qz.Int8WeightOnlyLinear)
    assert type(model[2]) is nn.Linear
    assert qz.weight_bytes(model) < before


def test_int8_kv_cache_is_a_drop_in_for_generate():
    from utils.gpt import GPTConfig, GPTModel
    from utils.kv_cache import generate
    torch.manual_seed(7)
    model = GPTModel(GPTConfig(vocab_size=50, context_length=32, emb_dim=32, n_heads=4, n_layers=2)).eval()
    prompt = torch.tensor([[1, 2, 3, 4]])
    plain = generate(model, prompt, 8)
    int8 = generate(model, prompt, 8, cache_cls=qz.Int8KVCache)
    assert int8.shape == plain.shape and (int8 == plain).float().mean() > 0.8
    cache = qz.Int8KVCache(1, 16, 4, 8)
    assert cache.nbytes() < 0.4 * 2 * 16 * 4 * 8 * 4


def test_an_all_zero_slice_block_or_tile_gives_zeros_not_nan():
    """amax = 0 would make x / scale = 0 / 0: the floor of DeepSeek's act_quant (1e-4) prevents it."""
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(8))
    x[1] = 0.0
    q, s = qz.absmax_quantize(x, dim=1)
    assert torch.isfinite(s).all() and (q[1] == 0).all()
    assert torch.equal(s[0, 0], x[0].abs().max() / 127)  # the floor changes no scale above 1e-4
    assert (qz.absmax_quantize(torch.zeros(4))[0] == 0).all()
    w = torch.randn(256, 256, generator=torch.Generator().manual_seed(9))
    w[:128, 128:] = 0.0
    w_fp8, ws = qz.fp8_block_quantize(w)
    assert not w_fp8.float().isnan().any() and (w_fp8[:128, 128:].float() == 0).all() and torch.isfinite(ws).all()
    a = torch.randn(2, 3, 256, generator=torch.Generator().manual_seed(10))
    a[0, 2] = 0.0  # a padding token
    a_fp8, a_s = qz.fp8_activation_quantize(a)
    assert not a_fp8.float().isnan().any() and (a_fp8[0, 2].float() == 0).all() and torch.isfinite(a_s).all()


def test_group_roundtrip_levels_and_error():
    w = torch.randn(6, 256, generator=torch.Generator().manual_seed(11))
    for group, bits in [(128, 4), (64, 4), (None, 4), (256, 8)]:
        back = qz.group_roundtrip(w, bits=bits, group_size=group)
        qmax = 2 ** (bits - 1) - 1
        groups = w.reshape(1, 1, -1) if group is None else w.unflatten(-1, (-1, group))
        step = groups.abs().amax(-1, keepdim=True) / qmax
        err = (back.reshape(groups.shape) - groups).abs()
        assert (err <= step / 2 + 1e-6).all()
        levels = torch.round(back.reshape(groups.shape) / step)
        assert levels.abs().max() <= qmax
    coarse = (qz.group_roundtrip(w, 4, None) - w).abs().mean()
    fine = (qz.group_roundtrip(w, 4, 64) - w).abs().mean()
    assert fine < coarse
    with pytest.raises(ValueError, match="multiple of group_size"):
        qz.group_roundtrip(torch.zeros(2, 100), 4, 64)


def test_roundtrip_weights_changes_only_linear_weights():
    model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    qz.roundtrip_weights_(model, lambda w: torch.zeros_like(w))
    after = model.state_dict()
    assert (after["0.weight"] == 0).all()
    assert all(torch.equal(after[k], before[k]) for k in before if k != "0.weight")


def test_w8a8_linear_matches_float_and_gives_each_token_its_scale():
    from utils.w8a8 import W8A8Linear
    torch.manual_seed(12)
    lin = nn.Linear(128, 96)
    layer = W8A8Linear.from_linear(lin)
    assert layer.weight.dtype == torch.int8 and set(layer.state_dict()) == {"weight", "scale", "bias"}
    x = torch.randn(4, 128)
    x[1] *= 1e-3  # a quiet token next to loud ones: a scale for the whole batch would round it away
    x[2] = 0.0
    with torch.no_grad():
        out, right = layer(x), lin(x)
        one = layer(x[1:2])
    assert out.shape == (4, 96) and not out.isnan().any()
    for i in (0, 1, 3):  # every token within 3% of its own largest output
        assert (out[i] - right[i]).abs().max() <= 0.03 * right[i].abs().max() + 1e-6
    torch.testing.assert_close(out[2], lin.bias.detach())
    assert (one[0] - right[1]).abs().max() <= 0.03 * right[1].abs().max() + 1e-6


def test_quantize_model_takes_another_layer():
    from utils.w8a8 import W8A8Linear
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    qz.quantize_model_(model, skip=("2",), layer=W8A8Linear)
    assert isinstance(model[0], W8A8Linear) and type(model[2]) is nn.Linear
