import torch
import torch.nn.functional as F

from utils.rmsnorm import RMSNorm


def test_unit_rms_and_weight():
    norm = RMSNorm(6)
    x = torch.randn(3, 4, 6) * 7
    y = norm(x)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(3, 4), atol=1e-4, rtol=1e-4)
    assert torch.equal(norm.weight, torch.ones(6))
    with torch.no_grad():
        norm.weight.copy_(torch.arange(1.0, 7.0))
    torch.testing.assert_close(norm(x), y * torch.arange(1.0, 7.0))


def test_matches_torch_rms_norm_in_float32():
    norm = RMSNorm(8, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.linspace(0.5, 1.5, 8))
    x = torch.randn(5, 8)
    torch.testing.assert_close(norm(x), F.rms_norm(x, (8,), norm.weight, 1e-5))


def test_no_mean_subtraction_and_eps():
    norm = RMSNorm(4)
    x = torch.full((1, 4), 3.0)  # LayerNorm would give zeros
    torch.testing.assert_close(norm(x), torch.ones(1, 4), atol=1e-5, rtol=0)
    assert torch.isfinite(norm(torch.zeros(2, 4))).all()


def test_statistic_in_float32_result_in_input_dtype():
    norm = RMSNorm(16)
    x = (torch.randn(4, 16) * 100).bfloat16()
    y = norm(x)
    assert y.dtype == torch.bfloat16
    expected = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).bfloat16()
    assert torch.equal(y, expected)
