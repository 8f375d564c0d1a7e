import pytest
import torch

from utils import multihead as mh
from utils.mha_variants import all_variants


def test_split_merge_round_trip_and_layout():
    x = torch.randn(2, 5, 12)
    heads = mh.split_heads(x, 4)
    assert heads.shape == (2, 4, 5, 3)
    torch.testing.assert_close(heads[:, 1], x[..., 3:6])
    torch.testing.assert_close(mh.merge_heads(heads), x)
    with pytest.raises(ValueError, match="12.*5|5.*12"):
        mh.split_heads(x, 5)


def test_mha_rejects_uneven_heads_naming_both_numbers():
    with pytest.raises(ValueError, match="d_out=7.*num_heads=2"):
        mh.MultiHeadAttention(4, 7, 8, 0.0, 2)


def test_all_variants_agree():
    torch.manual_seed(0)
    mha = mh.MultiHeadAttention(16, 16, 12, 0.0, 4).eval()
    x = torch.randn(2, 12, 16)
    with torch.no_grad():
        expected = mha(x)
        for name, fn in all_variants(mha, 12).items():
            torch.testing.assert_close(fn(x), expected, atol=1e-5, rtol=1e-4, msg=lambda m: f"{name}: {m}")


def test_causal_and_buffer():
    torch.manual_seed(1)
    mha = mh.MultiHeadAttention(8, 8, 10, 0.0, 2).eval()
    x = torch.randn(1, 6, 8)
    y = x.clone()
    y[:, -1] += 5
    with torch.no_grad():
        torch.testing.assert_close(mha(x)[:, :-1], mha(y)[:, :-1])
    assert "mask" in mha.state_dict() and mha.to(torch.float64).mask.dtype == torch.bool


def test_parameter_counts():
    assert mh.mha_parameter_count(768, 768, 12) == 2_360_064
    assert mh.mha_parameter_count(768, 768, 12) == sum(p.numel() for p in mh.MultiHeadAttention(768, 768, 4, 0.0, 12).parameters())
    assert mh.mha_parameter_count(5, 6, 3, True) == sum(p.numel() for p in mh.MultiHeadAttention(5, 6, 4, 0.0, 3, True).parameters())
    assert mh.attention_parameter_count(12288, 96, 128, 96) == 57_982_058_496
    wrapper = mh.MultiHeadAttentionWrapper(3, 2, 4, 0.0, 3)
    assert wrapper(torch.randn(2, 4, 3)).shape == (2, 4, 6)
