"""Issue 36: notebook 03 solutions that the declared input spaces catch (WRONG: sizes past the hidden tests'
constants, float32-only code) or that the rules allow (RIGHT: float64 inside, cast back)."""
import math

import torch


def variance_d_capped(d, n_trials=10_000, scaled=False, generator=None):  # at most 512 features: d = 1024 shows
    width = min(d, 512)
    q, k = torch.randn(n_trials, width, generator=generator), torch.randn(n_trials, width, generator=generator)
    dots = (q * k).sum(-1)
    return (dots / math.sqrt(d) if scaled else dots).var().item()


def jacobian_float64_cast_back(p):
    p64 = p.double()
    return (torch.diag(p64) - torch.outer(p64, p64)).to(p.dtype)


def sdpa_scale_of_eight(q, k, v, mask=None, scale=None):  # 1 / sqrt(8): the hidden tests' d_k, hard-coded
    scores = q @ k.transpose(-2, -1) * (1 / math.sqrt(8) if scale is None else scale)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_softmax_float32(q, k, v, mask=None, scale=None):  # float32-only: float32 weights times float64 or bfloat16 values crash
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
    return weights @ v, weights


WRONG = {"dot_product_variance": {"at most 512 features": (variance_d_capped, "six standard deviations")}, "scaled_dot_product_attention": {
    "default scale 1 / sqrt(8) hard-coded": (sdpa_scale_of_eight, "differs from the course's"),
    "softmax with dtype=torch.float32 (crashes in float64 and bfloat16)": (sdpa_softmax_float32, "combines tensors of two dtypes"),
}}
RIGHT = {"softmax_jacobian": {"float64, cast back": jacobian_float64_cast_back}}
