"""Inputs of notebook 15's checks and families, each built to show one thing: rows that are views
(the softmax's x a slice of a wider tensor, or a transposed tensor whose columns are not adjacent),
rows wider than a block one might hard-code, heads in every layout a caller may pass (split heads,
a transposed view whose last dimension is not contiguous, k and v laid out differently), scores
far below 0 (a running maximum started at 0 underflows to 0 / 0), and keys that a causal query
tile never needs, planted with NaN. All seeded, on the CPU; `on_device` moves them."""
import torch

from autograder.checks import randn
from autograder.checks.nb14.flash_variants import heads_layout
from autograder.checks.core.space import column_major, strided
from autograder.checks.nb15.triton_runs import device


def softmax_view():
    """(wide, x): x = wide[:, :37], rows 50 apart, with rows near +500 and -1000, -inf entries and
    the maximum in the last column, next to the mask."""
    wide = randn(6, 50, seed=150) * 3
    x = wide[:, :37]
    x[1] += 500.0  # exp overflows without the row's maximum
    x[2] -= 1000.0  # and underflows to 0 / 0
    x[3, ::4] = float("-inf")  # -inf entries get weight 0
    x[4] = torch.linspace(-2.0, 9.0, 37)
    return wide, x


def softmax_transposed(M=5, N=37, seed=152):
    """x (M, N) = y.T: its columns are M apart in memory, x.stride() == (1, M)."""
    return (randn(N, M, seed=seed) * 2).T


def transposed(B, H, T, d, seed):
    """(B, H, T, d) whose last dimension is not contiguous: a view of (B, H, d, T)."""
    return randn(B, H, d, T, seed=seed).transpose(-2, -1)


def mixed_layouts(B, H, T_q, T_k, d, seed):
    """q a transposed view (q.stride(-1) != 1), k contiguous, v as split heads give it: three layouts."""
    return transposed(B, H, T_q, d, seed), randn(B, H, T_k, d, seed=seed + 1), heads_layout(B, H, T_k, d, seed + 2)


def far_below_zero(B, H, T_q, T_k, d, seed, level=200.0):
    """q, k, v whose scaled scores are all near -level: channel 0 of q is -40, of k level * sqrt(d) / 40,
    the other channels random. exp(s - 0) underflows to 0 in float32 below about -104."""
    q, k, v = (randn(B, H, T, d, seed=seed + i) for i, T in enumerate((T_q, T_k, T_k)))
    q[..., 0], k[..., 0] = -40.0, level * d ** 0.5 / 40.0
    return q, k, v


def poisoned(T, d, seed):
    """(q, k, v) of one head whose last 16 keys and values are NaN: no query before them needs them."""
    q, k, v = (randn(1, 1, T, d, seed=seed + i) for i in range(3))
    k[..., T - 16:, :], v[..., T - 16:, :] = float("nan"), float("nan")
    return q, k, v


# Points of the declared input spaces (nb15/contract.py) -------------------------------------------
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def laid_out(t, how: str):
    """The same values in another memory layout: column-major (the last two dimensions' strides
    swapped), strided (every other element of a buffer whose gaps hold NaN), or, for heads,
    "split heads" (a view of (B, T, H, d), as splitting a projection gives it)."""
    if how == "contiguous":
        return t.contiguous()
    if how == "split heads":
        return t.transpose(1, 2).contiguous().transpose(1, 2)
    return column_major(t) if how == "column-major" else strided(t)


def _qkv_layouts(how: str):
    """The layouts of q, k and v: all three alike, or "mixed": q contiguous, k column-major
    (k.stride(-1) != 1) and v as split heads give it, three layouts at once (a launcher that looks
    at q's layout only, or addresses v with k's strides, shows)."""
    return ("contiguous", "column-major", "split heads") if how == "mixed" else (how,) * 3


def softmax_point(p, seed):
    """x (M, N) in the point's dtype and layout: values of order 2, rows far from 0 (in the hundreds,
    shifted by +500 and -1000 in turn: exp overflows, or underflows to 0 / 0 without the row's
    maximum), or -inf in every fourth column (column 0 stays finite)."""
    M, N = p["shape"]
    x = randn(M, N, seed=seed) * 2
    if p["values"] == "rows far from 0":
        x = x * 150 + torch.tensor([500.0, -1000.0]).repeat(M)[:M, None]
    elif p["values"] == "-inf entries":
        x = x.masked_fill(torch.arange(N) % 4 == 3, float("-inf"))
    x = laid_out(x.to(_DTYPES[p["dtype"]]), p["layout:x"])  # cast first: a cast would make a strided tensor contiguous
    return (x.to(device()),), {}


def _point_qkv(p, seed):
    B, H, T_q, T_k, d = p["shape"]
    q, k, v = (randn(B, H, T, d, seed=seed + i) for i, T in enumerate((T_q, T_k, T_k)))
    if p["values"] == "scores in the hundreds":
        q = q * 40.0
    elif p["values"] == "scores all near -200":  # exp(s - 0) underflows to 0 below about -104: a running maximum started at 0 gives 0 / 0
        q[..., 0], k[..., 0] = -40.0, 200.0 * d ** 0.5 / 40.0
    dtype = _DTYPES[p["dtype"]]
    return [laid_out(t.to(dtype), how).to(device()) for t, how in zip((q, k, v), _qkv_layouts(p["layout:q,k,v"]))]


def forward_point(p, seed):
    blocks = {} if isinstance(p["blocks"], str) else dict(block_q=p["blocks"][0], block_k=p["blocks"][1])
    return tuple(_point_qkv(p, seed)), dict(causal=p["flag:causal"], **blocks)


def apply_point(p, seed):
    """Function.apply takes its arguments by position only: (q, k, v, causal)."""
    return (*_point_qkv(p, seed), p["flag:causal"]), {}
