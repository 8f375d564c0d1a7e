"""Solutions of notebook 03 that grading must reject (WRONG) or accept (RIGHT)."""
import math

import torch
import torch.nn.functional as F
from torch.autograd.functional import jacobian as imported_jacobian

import utils.scaled_attention as ref
from utils.attention import softmax as course_softmax


# dot_product_variance --------------------------------------------------------------------
def _dots(d, n_trials, generator, draw=torch.randn):
    q = draw(n_trials, d, generator=generator)
    k = draw(n_trials, d, generator=generator)
    return q, k, (q * k).sum(-1)


def variance_divides_by_d(d, n_trials=10_000, scaled=False, generator=None):
    _, _, dots = _dots(d, n_trials, generator)
    return (dots / d if scaled else dots).var().item()


def variance_of_q(d, n_trials=10_000, scaled=False, generator=None):
    q, _, _ = _dots(d, n_trials, generator)
    return (q / math.sqrt(d) if scaled else q).var().item()


def variance_mean(d, n_trials=10_000, scaled=False, generator=None):
    _, _, dots = _dots(d, n_trials, generator)
    return (dots / math.sqrt(d) if scaled else dots).mean().item()


def variance_uniform(d, n_trials=10_000, scaled=False, generator=None):
    _, _, dots = _dots(d, n_trials, generator, draw=torch.rand)
    return (dots / math.sqrt(d) if scaled else dots).var().item()


def variance_ignores_scaled(d, n_trials=10_000, scaled=False, generator=None):
    _, _, dots = _dots(d, n_trials, generator)
    return dots.var().item()


def variance_always_scaled(d, n_trials=10_000, scaled=False, generator=None):
    _, _, dots = _dots(d, n_trials, generator)
    return (dots / math.sqrt(d)).var().item()


def variance_hard_coded(d, n_trials=10_000, scaled=False, generator=None):
    return 1.0 if scaled else float(d)


def variance_ignores_generator(d, n_trials=10_000, scaled=False, generator=None):
    _, _, dots = _dots(d, n_trials, None)
    return (dots / math.sqrt(d) if scaled else dots).var().item()


def variance_fixed_trials(d, n_trials=10_000, scaled=False, generator=None):
    _, _, dots = _dots(d, 10_000, generator)
    return (dots / math.sqrt(d) if scaled else dots).var().item()


def variance_returns_tensor_of_dots(d, n_trials=10_000, scaled=False, generator=None):
    _, _, dots = _dots(d, n_trials, generator)
    return dots


def variance_population(d, n_trials=10_000, scaled=False, generator=None):
    _, _, dots = _dots(d, n_trials, generator)
    return torch.var(dots / math.sqrt(d) if scaled else dots, correction=0).item()


def variance_by_hand(d, n_trials=10_000, scaled=False, generator=None):
    q = torch.randn(d, n_trials, generator=generator)  # another layout, another draw order
    k = torch.randn(d, n_trials, generator=generator)
    dots = torch.einsum("dn,dn->n", q, k) / (math.sqrt(d) if scaled else 1.0)
    return float(((dots - dots.mean()) ** 2).mean())


def variance_loop(d, n_trials=10_000, scaled=False, generator=None):
    dots = []
    for _ in range(n_trials):
        q, k = torch.randn(d, generator=generator), torch.randn(d, generator=generator)
        dots.append(torch.dot(q, k) / math.sqrt(d) if scaled else torch.dot(q, k))
    return torch.stack(dots).var().item()


def variance_zero_dim_tensor(d, n_trials=10_000, scaled=False, generator=None):
    _, _, dots = _dots(d, n_trials, generator)
    return (dots / math.sqrt(d) if scaled else dots).var()


def variance_reseeds_global(d, n_trials=10_000, scaled=False, generator=None):
    """Seeds PyTorch's global generator from the one given, and draws from the global one."""
    if generator is not None:
        torch.manual_seed(generator.initial_seed())
    dots = (torch.randn(n_trials, d) * torch.randn(n_trials, d)).sum(-1)
    return (dots / math.sqrt(d) if scaled else dots).var().item()


def variance_private_generator(d, n_trials=10_000, scaled=False, generator=None):
    """A private copy seeded like the generator given: two calls with one generator repeat the same draws."""
    own = None if generator is None else torch.Generator().manual_seed(generator.initial_seed())
    _, _, dots = _dots(d, n_trials, own)
    return (dots / math.sqrt(d) if scaled else dots).var().item()


def variance_one_draw_float64(d, n_trials=10_000, scaled=False, generator=None):
    qk = torch.randn(2, n_trials, d, generator=generator, dtype=torch.float64)
    dots = torch.einsum("nd,nd->n", qk[0], qk[1]) / (d ** 0.5 if scaled else 1)
    return float(dots.var())


# softmax_jacobian ------------------------------------------------------------------------
def jacobian_elementwise(p):
    return torch.diag(p) - p * p


def jacobian_no_diagonal(p):
    return -torch.outer(p, p)


def jacobian_sign(p):
    return torch.outer(p, p) - torch.diag(p)


def jacobian_diag_only(p):
    return torch.diag(p)


def jacobian_diag_p1mp(p):
    return torch.diag(p * (1 - p))


def jacobian_softmax_again(p):
    s = torch.softmax(p, dim=-1)
    return torch.diag(s) - torch.outer(s, s)


def jacobian_autograd(p):
    return imported_jacobian(lambda z: torch.softmax(z, dim=-1), torch.log(p))


def jacobian_calls_utils(p):
    return ref.softmax_jacobian(p)


def jacobian_broadcast(p):
    return torch.diag_embed(p) - p[:, None] * p[None, :]


def jacobian_loop(p):
    n = len(p)
    out = p.new_empty(n, n)
    for i in range(n):
        for j in range(n):
            out[i, j] = p[i] * ((1.0 if i == j else 0.0) - p[j])
    return out


def jacobian_eye(p):
    return p[:, None] * (torch.eye(len(p), device=p.device) - p[None, :])


def jacobian_always_float32(p):
    p = p.float()
    return torch.diag(p) - torch.outer(p, p)


def jacobian_outer_detached(p):  # right values; the p pᵀ term passes half its gradient
    return torch.diag(p) - torch.outer(p, p.detach())


# scaled_dot_product_attention ------------------------------------------------------------
def _attend(q, k, v, mask=None, scale=None, divide_by=None, dim=-1, transpose=lambda k: k.transpose(-2, -1)):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ transpose(k)
    scores = scores / divide_by if divide_by is not None else scores * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=dim)
    return weights @ v, weights


def sdpa_by_dk(q, k, v, mask=None, scale=None):
    return _attend(q, k, v, mask, divide_by=q.shape[-1])


def sdpa_by_sqrt_dv(q, k, v, mask=None, scale=None):
    return _attend(q, k, v, mask, divide_by=math.sqrt(v.shape[-1]))


def sdpa_after_softmax(q, k, v, mask=None, scale=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1) / math.sqrt(q.shape[-1])
    return weights @ v, weights


def sdpa_no_scaling(q, k, v, mask=None, scale=None):
    return _attend(q, k, v, mask, divide_by=1.0)


def sdpa_dim_minus_2(q, k, v, mask=None, scale=None):
    return _attend(q, k, v, mask, scale, dim=-2)


def sdpa_dot_T(q, k, v, mask=None, scale=None):
    return _attend(q, k, v, mask, scale, transpose=lambda k: k.T)


def sdpa_transpose01(q, k, v, mask=None, scale=None):
    return _attend(q, k, v, mask, scale, transpose=lambda k: k.transpose(0, 1))


def sdpa_inverted_mask(q, k, v, mask=None, scale=None):
    return _attend(q, k, v, None if mask is None else ~mask, scale)


def sdpa_zero_after_softmax(q, k, v, mask=None, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    weights = torch.softmax(q @ k.transpose(-2, -1) * scale, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(mask, 0.0)
    return weights @ v, weights


def sdpa_adds_mask_times_inf(q, k, v, mask=None, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores + mask.float() * float("-inf")
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_ignores_scale(q, k, v, mask=None, scale=None):
    return _attend(q, k, v, mask, None)


def sdpa_divides_by_scale(q, k, v, mask=None, scale=None):
    return _attend(q, k, v, mask, divide_by=math.sqrt(q.shape[-1]) if scale is None else scale)


def sdpa_swapped(q, k, v, mask=None, scale=None):
    context, weights = _attend(q, k, v, mask, scale)
    return weights, context


def sdpa_returns_context_only(q, k, v, mask=None, scale=None):
    return _attend(q, k, v, mask, scale)[0]


def sdpa_pytorch(q, k, v, mask=None, scale=None):
    context = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else ~mask, scale=scale)
    return context, ref.scaled_dot_product_attention(q, k, v, mask, scale)[1]


def sdpa_calls_utils(q, k, v, mask=None, scale=None):
    return ref.scaled_dot_product_attention(q, k, v, mask, scale)


def sdpa_naive_softmax(q, k, v, mask=None, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    e = torch.exp(scores)
    weights = e / e.sum(-1, keepdim=True)
    return weights @ v, weights


def sdpa_scales_q_in_place(q, k, v, mask=None, scale=None):  # right outputs; q *= scale rescales the caller's queries
    q *= q.shape[-1] ** -0.5 if scale is None else scale
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return weights @ v, weights


def sdpa_einsum(q, k, v, mask=None, scale=None):
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = torch.einsum("...qd,...kd->...qk", q, k) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights


def sdpa_where(q, k, v, mask=None, scale=None):
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.mT * scale
    if mask is not None:
        scores = torch.where(mask, torch.tensor(float("-inf")), scores)
    weights = course_softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_large_negative(q, k, v, mask=None, scale=None):
    scores = q @ k.transpose(-2, -1) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if mask is not None:
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
    weights = F.softmax(scores, dim=-1)
    return torch.matmul(weights, v), weights


def sdpa_loop_over_keys(q, k, v, mask=None, scale=None):
    if scale is None:
        scale = 1 / math.sqrt(q.shape[-1])
    columns = [(q * k[..., j:j + 1, :]).sum(-1) for j in range(k.shape[-2])]  # (..., T_q) each
    scores = torch.stack(columns, dim=-1) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, -math.inf)
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def sdpa_weights_float32(q, k, v, mask=None, scale=None):  # the weights come back in float32 whatever q's dtype
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
    return weights.to(v.dtype) @ v, weights


def sdpa_values_detached(q, k, v, mask=None, scale=None):  # right values; v never trains
    context, weights = _attend(q, k, v, mask, scale)
    return weights @ v.detach(), weights


def sdpa_scale_or_default(q, k, v, mask=None, scale=None):  # `scale or ...` takes scale=0.0 for "not given"
    return _attend(q, k, v, mask, scale or 1 / math.sqrt(q.shape[-1]))


def sdpa_float32_cast_back(q, k, v, mask=None, scale=None):  # Llama, Hugging Face: softmax in float32, cast back
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    return weights @ v, weights


WRONG = {
    "dot_product_variance": {
        "divides by d": (variance_divides_by_d, "instead of sqrt(d)"),
        "variance of q alone": (variance_of_q, "variance of single entries of q"),
        "mean instead of variance": (variance_mean, "not their mean"),
        "uniform torch.rand": (variance_uniform, "torch.rand"),
        "ignores scaled": (variance_ignores_scaled, "only when scaled=True"),
        "always scaled": (variance_always_scaled, "only when scaled=True"),
        "hard-coded d and 1": (variance_hard_coded, "same generator seed"),
        "ignores the generator": (variance_ignores_generator, "generator=generator"),
        "ignores n_trials": (variance_fixed_trials, "n_trials"),
        "returns the dot products": (variance_returns_tensor_of_dots, "Python float"),
        "reseeds the global generator": (variance_reseeds_global, "global generator must be left as it was"),
        "a private generator seeded like the given one": (variance_private_generator, "the generator given must advance"),
        "calls utils": (lambda d, n_trials=10_000, scaled=False, generator=None:
                        ref.dot_product_variance(d, n_trials, scaled, generator), "yourself"),
    },
    "softmax_jacobian": {
        "p * p instead of the outer product": (jacobian_elementwise, "outer product"),
        "diagonal term missing": (jacobian_no_diagonal, "diagonal term diag(p) is missing"),
        "sign flipped": (jacobian_sign, "sign is flipped"),
        "diag(p) only": (jacobian_diag_only, "off-diagonal terms are missing"),
        "diag(p (1 - p)) only": (jacobian_diag_p1mp, "off-diagonal terms are missing"),
        "softmax applied again": (jacobian_softmax_again, "already a probability vector"),
        "autograd jacobian": (jacobian_autograd, "yourself"),
        "calls utils": (jacobian_calls_utils, "yourself"),
        "always float32": (jacobian_always_float32, "must follow its input's dtype (torch.float64)"),
        "p pᵀ half detached": (jacobian_outer_detached, "input 1 through softmax_jacobian"),
    },
    "scaled_dot_product_attention": {
        # it scales the caller's queries in place / 它原地缩放了调用者的查询
        "scales q in place": (sdpa_scales_q_in_place, "changed its input q in place"),
        "divides by d_k": (sdpa_by_dk, "instead of sqrt(d_k)"),
        "divides by sqrt(d_v)": (sdpa_by_sqrt_dv, "sqrt(d_v)"),
        "scales after the softmax": (sdpa_after_softmax, "after the softmax"),
        "no scaling": (sdpa_no_scaling, "were not scaled"),
        "softmax over dim=-2": (sdpa_dim_minus_2, "dim=-2"),
        "k.T on a batch": (sdpa_dot_T, "not k.T"),
        "transpose(0, 1) on a batch": (sdpa_transpose01, "transpose only the last two dims"),
        "mask polarity inverted": (sdpa_inverted_mask, "True means BLOCKED"),
        "mask zeros after softmax": (sdpa_zero_after_softmax, "before the softmax"),
        "adds mask * -inf": (sdpa_adds_mask_times_inf, "0 * -inf is NaN"),
        "ignores scale": (sdpa_ignores_scale, "ignores the scale argument"),
        "divides by scale": (sdpa_divides_by_scale, "multiply the scores by scale"),
        "returns (weights, context)": (sdpa_swapped, "return (context, weights)"),
        "returns the context only": (sdpa_returns_context_only, "pair (context, weights)"),
        "naive softmax overflows": (sdpa_naive_softmax, "stable softmax"),
        "F.scaled_dot_product_attention": (sdpa_pytorch, "yourself"),
        "calls utils": (sdpa_calls_utils, "yourself"),
        "weights always float32": (sdpa_weights_float32, "output[1] must follow its input's dtype (torch.float64)"),
        "scale or the default": (sdpa_scale_or_default, "on scale=0.0"),
        "v detached": (sdpa_values_detached, "No gradient reaches input 3 through scaled_dot_product_attention"),
    },
}

RIGHT = {
    "dot_product_variance": {"torch.var correction=0": variance_population, "einsum, by hand": variance_by_hand,
                             "loop over trials": variance_loop, "0-d tensor": variance_zero_dim_tensor,
                             "one float64 draw of (2, n, d), einsum": variance_one_draw_float64},
    "softmax_jacobian": {"diag_embed and broadcasting": jacobian_broadcast, "loops": jacobian_loop,
                         "p (I - pᵀ)": jacobian_eye},
    "scaled_dot_product_attention": {"einsum": sdpa_einsum, "torch.where and .mT": sdpa_where,
                                     "finfo.min fill": sdpa_large_negative, "loop over keys": sdpa_loop_over_keys,
                                     "softmax in float32, cast back": sdpa_float32_cast_back},
}

from autograder.tests.zoo import nb03_adversary2  # noqa: E402

for _exercise, _entries in nb03_adversary2.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb03_adversary2.RIGHT.items():
    RIGHT[_exercise].update(_entries)

from autograder.tests.zoo import nb03_spaces  # noqa: E402

for _exercise, _entries in nb03_spaces.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb03_spaces.RIGHT.items():
    RIGHT[_exercise].update(_entries)
