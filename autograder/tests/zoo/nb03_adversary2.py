"""Issue 29, last round: notebook 03 solutions an adversarial learner might write (WRONG) or that are right another way (RIGHT)."""
import math

import torch


# dot_product_variance --------------------------------------------------------------------
def variance_sqrt_d_minus_1(d, n_trials=10_000, scaled=False, generator=None):
    """Scaled by sqrt(d - 1): about 1.07 at d = 16, inside the visible test's 15%."""
    q = torch.randn(n_trials, d, generator=generator)
    k = torch.randn(n_trials, d, generator=generator)
    dots = (q * k).sum(-1)
    if scaled:
        dots = dots / math.sqrt(d - 1)
    return dots.var().item()


def variance_one_key(d, n_trials=10_000, scaled=False, generator=None):
    """One key for all trials: the variance is |k|², right on average, not for every key."""
    q = torch.randn(n_trials, d, generator=generator)
    k = torch.randn(d, generator=generator)
    dots = q @ k
    if scaled:
        dots = dots / math.sqrt(d)
    return dots.var().item()


def variance_half_generator(d, n_trials=10_000, scaled=False, generator=None):
    """Queries from the generator, keys from PyTorch's global one."""
    q = torch.randn(n_trials, d, generator=generator)
    k = torch.randn(n_trials, d)
    dots = (q * k).sum(-1)
    if scaled:
        dots = dots / math.sqrt(d)
    return dots.var().item()


def variance_rounded(d, n_trials=10_000, scaled=False, generator=None):
    """Rounded to an integer: 16 and 1 for the visible test's sizes."""
    q = torch.randn(n_trials, d, generator=generator)
    k = torch.randn(n_trials, d, generator=generator)
    dots = (q * k).sum(-1)
    if scaled:
        dots = dots / math.sqrt(d)
    return round(dots.var().item())


def variance_capped_trials(d, n_trials=10_000, scaled=False, generator=None):
    """At most 500 trials, to run fast."""
    n = min(n_trials, 500)
    q = torch.randn(n, d, generator=generator)
    k = torch.randn(n, d, generator=generator)
    dots = (q * k).sum(-1)
    if scaled:
        dots = dots / math.sqrt(d)
    return dots.var().item()


def variance_trials_last(d, n_trials=10_000, scaled=False, generator=None):
    """RIGHT: (d, n_trials) draws, the variance divided by d when scaled, float64 statistics."""
    q = torch.randn(d, n_trials, generator=generator)
    k = torch.randn(d, n_trials, generator=generator)
    dots = (q * k).sum(0).double()
    mean = dots.mean()
    var = ((dots - mean) ** 2).sum() / (n_trials - 1)
    return float(var / d if scaled else var)


# softmax_jacobian ------------------------------------------------------------------------
def jacobian_pT_on_1d(p):
    """p @ p.T on a 1-D p is the scalar p·p, not the outer product."""
    return torch.diag(p) - p @ p.T


def jacobian_unsqueeze_in_place(p):
    """p.unsqueeze_(-1) reshapes the caller's p to (n, 1)."""
    p.unsqueeze_(-1)
    return torch.diag(p[:, 0]) - p @ p.T


def jacobian_eye_float32(p):
    """torch.eye(n) without dtype: float32 whatever p's dtype (promotes half to float32)."""
    eye = torch.eye(p.shape[-1])
    return (eye * p - torch.outer(p, p)).to(torch.promote_types(torch.float32, p.dtype)) if p.dtype != torch.float64 else eye.double() * p - torch.outer(p, p)


def jacobian_row_first(p):
    """p_j (δ_ij - p_i): the transpose, equal only because the Jacobian is symmetric... and it is."""
    return p[None, :] * (torch.eye(p.shape[-1], dtype=p.dtype, device=p.device) - p[:, None])


def jacobian_in_place_build(p):
    """RIGHT: -outer, then the diagonal added in place on the new tensor."""
    J = -torch.outer(p, p)
    J.diagonal().add_(p)
    return J


def jacobian_batched(p):
    """RIGHT: works for (..., n): diag_embed minus a broadcast outer product."""
    return torch.diag_embed(p) - p.unsqueeze(-1) * p.unsqueeze(-2)


# scaled_dot_product_attention -------------------------------------------------------------
def sdpa_bmm(q, k, v, mask=None, scale=None):
    """RIGHT: torch.bmm on the leading dimensions flattened."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = torch.bmm(q.reshape(-1, *q.shape[-2:]), k.reshape(-1, *k.shape[-2:]).transpose(1, 2)).reshape(*q.shape[:-1], k.shape[-2]) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    w = torch.softmax(scores, -1)
    return w @ v, w


def sdpa_fill_minus_1e4(q, k, v, mask=None, scale=None):
    """Blocked scores set to -1e4: not blocked when the scores are large."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, -1e4)
    w = torch.softmax(scores, -1)
    return w @ v, w


def sdpa_add_minus_1e9(q, k, v, mask=None, scale=None):
    """mask * -1e9 added: a fully blocked row becomes uniform instead of NaN... and large scores lose precision."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores + mask * -1e9
    w = torch.softmax(scores, -1)
    return w @ v, w


def sdpa_scale_by_q_rows(q, k, v, mask=None, scale=None):
    """The scale from q.shape[-2] (T_q) instead of q.shape[-1] (d_k)."""
    scale = 1 / math.sqrt(q.shape[-2]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    w = torch.softmax(scores, -1)
    return w @ v, w


def sdpa_mask_cached(q, k, v, mask=None, scale=None, _seen={}):
    """The first mask of each shape is remembered and reused (which check names it depends on the masks seen before: no words)."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        mask = _seen.setdefault(tuple(mask.shape), mask)
        scores = scores.masked_fill(mask, float("-inf"))
    w = torch.softmax(scores, -1)
    return w @ v, w


def sdpa_float64_inside(q, k, v, mask=None, scale=None):
    """RIGHT: computed in float64, cast back to q's dtype."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q.double() @ k.double().transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    w = torch.softmax(scores, -1)
    return (w @ v.double()).to(q.dtype), w.to(q.dtype)


def sdpa_scale_keys(q, k, v, mask=None, scale=None):
    """RIGHT: the keys scaled (out of place), the mask as torch.where on the new scores."""
    if scale is None:
        scale = k.shape[-1] ** -0.5
    scores = q @ (k * scale).transpose(-2, -1)
    if mask is not None:
        scores = torch.where(mask, torch.tensor(float("-inf"), dtype=scores.dtype, device=scores.device), scores)
    w = scores.softmax(dim=-1)
    return torch.matmul(w, v), w


WRONG = {
    "dot_product_variance": {"scaled by sqrt(d - 1)": (variance_sqrt_d_minus_1, "six standard deviations"), "one key for all trials": (variance_one_key, "the variance must be about 1"),
                             "keys from the global generator": (variance_half_generator, "another seed a different one"), "rounded to an integer": (variance_rounded, "do not vary from seed to seed"),
                             "at most 500 trials": (variance_capped_trials, "the variance must be about 1")},
    "softmax_jacobian": {"p @ p.T on a 1-D p": (jacobian_pT_on_1d, "must sum to 0"), "p.unsqueeze_ on the caller's p": (jacobian_unsqueeze_in_place, "changed its input p in place"),
                         "torch.eye without dtype": (jacobian_eye_float32, "combines a tensor on the CPU")},
    "scaled_dot_product_attention": {"blocked scores set to -1e4": (sdpa_fill_minus_1e4, "a finite fill such as -1e4"),
                                     "mask * -1e9 added": (sdpa_add_minus_1e9, "crashed with RuntimeError"), "scale from T_q": (sdpa_scale_by_q_rows, "the weights are wrong"),
                                     "first mask of each shape reused": (sdpa_mask_cached, None)},
}

RIGHT = {
    "dot_product_variance": {"(d, n_trials) draws, variance / d, float64 statistics": variance_trials_last},
    "softmax_jacobian": {"-outer, diagonal added in place": jacobian_in_place_build, "diag_embed, batched": jacobian_batched,
                         "p_j (δ_ij - p_i), the symmetric form": jacobian_row_first},
    "scaled_dot_product_attention": {"float64 inside, cast back": sdpa_float64_inside, "torch.bmm on flattened leading dims": sdpa_bmm, "keys scaled, torch.where": sdpa_scale_keys},
}
