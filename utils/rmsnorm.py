"""RMSNorm: scale each vector to unit root-mean-square, then by a learned weight (09, 12).

DeepSeek-V3 normalises with RMSNorm everywhere: before attention and the feed-forward layer,
and inside multi-head latent attention on the compressed query (`q_norm`) and the compressed
key-value latent (`kv_norm`). Unlike LayerNorm it subtracts no mean and has no bias:

    y = x / sqrt(mean(x**2) + eps) * weight

The statistic is computed in float32 whatever x's dtype (a bf16 mean of squares loses digits),
and the result comes back in x's dtype. Tests: `.venv/bin/pytest utils/tests/test_rmsnorm.py`.
"""
import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., dim) -> (..., dim)
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)
