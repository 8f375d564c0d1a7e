"""Why attention divides its scores by sqrt(d_k), and the general kernel (notebook 03).

The dot product of two random vectors with independent N(0, 1) components has variance d:
as vectors get longer the scores spread out, softmax saturates towards one-hot, and its
Jacobian diag(p) - p pᵀ, the factor every gradient of the scores passes through, goes to
zero. Dividing by sqrt(d_k) brings the variance back to 1. `scaled_dot_product_attention`
is the kernel later notebooks call; it equals torch.nn.functional.scaled_dot_product_attention
with the mask inverted (the course's masks are True = BLOCKED, PyTorch's are True = allowed).

Tests: .venv/bin/pytest utils/tests/test_scaled_attention.py
"""
import math

import torch


def _draw_on(generator, device):
    """Random numbers are drawn where the generator lives (a CPU generator gives the same numbers
    whatever the device) and then moved to `device`, by default the generator's (else the default)."""
    drawn = generator.device if generator is not None else device
    return drawn, device if device is not None else drawn


def dot_product_variance(d: int, n_trials: int = 10_000, scaled: bool = False,
                         generator: torch.Generator | None = None, device=None) -> float:
    """Empirical variance of q · k for q, k ~ N(0, I_d): about d, or about 1 when `scaled`; computed
    on `device` (by default the generator's)."""
    drawn, device = _draw_on(generator, device)
    q = torch.randn(n_trials, d, generator=generator, device=drawn).to(device)  # (n_trials, d)
    k = torch.randn(n_trials, d, generator=generator, device=drawn).to(device)
    dots = (q * k).sum(dim=-1)  # (n_trials,): one dot product per trial
    if scaled:
        dots = dots / math.sqrt(d)
    return dots.var().item()


def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """d softmax(z)_i / d z_j = p_i (δ_ij - p_j), i.e. diag(p) - p pᵀ: (n,) -> (n, n).

    It depends only on the output p, so a one-hot p (a saturated softmax) gives the zero
    matrix: no gradient reaches the scores.
    """
    return torch.diag(p) - torch.outer(p, p)


def scaled_dot_product_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                                 mask: torch.Tensor | None = None,
                                 scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ * scale) v -> (context (..., T_q, d_v), weights (..., T_q, T_k)).

    q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v). `mask` is boolean, broadcastable
    to (..., T_q, T_k), True = blocked. `scale` defaults to 1 / sqrt(d_k): the width of the
    vectors that were multiplied, not of the values.
    """
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T_q, T_k); .T would also swap batch dims
    if mask is not None:
        # -inf before the softmax gives weight exactly 0 and the others still sum to 1.
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # over keys: each query's row sums to 1
    return weights @ v, weights


def random_scores(d: int, n_queries: int = 256, n_keys: int = 16, scaled: bool = False,
                  generator: torch.Generator | None = None, device=None) -> torch.Tensor:
    """Scores of random queries against random keys, N(0, I_d) each: (n_queries, n_keys), on
    `device` (by default the generator's).

    The figures of notebook 03 use them to show what growing d does to a softmax row.
    """
    drawn, device = _draw_on(generator, device)
    q = torch.randn(n_queries, d, generator=generator, device=drawn).to(device)
    k = torch.randn(n_keys, d, generator=generator, device=drawn).to(device)
    scores = q @ k.T
    return scores / math.sqrt(d) if scaled else scores
