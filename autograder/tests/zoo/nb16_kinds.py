"""Notebook 16's wrong and right solutions of the kinds a fresh read found passing before its input spaces
were declared (issue 36): constants the text fixes (the L2 normalisation's eps), sizes past a constant
(a mask made for 64 tokens), float32-only arithmetic, a head count checked in one mode only, the
course's helper doing a chunk, arguments ignored; and right ones in styles the rules allow."""
import math
from functools import partial

import torch
import torch.nn.functional as F

import utils.linear_attention as ref
from autograder.tests.zoo.nb16 import _beside_recurrent, _bytes, _chunked, _prepare, _recurrent, _rule, step_einsum


def recurrent_scaled_by_d_v(q, k, v):
    """Queries scaled by the value width: the same numbers only where d_v = d_k."""
    out, state = _recurrent(q * math.sqrt(k.shape[-1] / v.shape[-1]), k, v)
    return out, state


def parallel_mask_of_64(q, k, v):
    """A mask made for at most 64 tokens (a context length), then cut: longer texts crash."""
    T, d_k = k.shape[1], k.shape[-1]
    qh, kh, vh = (x.float().transpose(1, 2) for x in (q, k, v))
    seen = torch.ones(64, 64, dtype=torch.bool, device=q.device).tril()[:T, :T]
    return ((qh @ kh.mT * d_k ** -0.5) * seen @ vh).transpose(1, 2).to(q.dtype)


def parallel_in_bfloat16(q, k, v):
    """The inputs' dtype all along: bfloat16 products and sums."""
    T, d_k = k.shape[1], k.shape[-1]
    qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))
    return ((qh @ kh.mT * d_k ** -0.5).tril() @ vh).transpose(1, 2)


def parallel_tril(q, k, v):
    """Right: the scores' lower triangle with torch.tril, no mask tensor."""
    qh, kh, vh = (x.float().transpose(1, 2) for x in (q, k, v))
    return ((qh @ kh.mT / math.sqrt(q.shape[-1])).tril() @ vh).transpose(1, 2).to(q.dtype)


def step_in_float32(state, q, k, v, g, beta):
    """Right: computed in float32 whatever the dtype, both results cast back."""
    out, new = step_einsum(*(x.float() for x in (state, q, k, v, g, beta)))
    return out.to(q.dtype), new.to(state.dtype)


def _heads_checked_with_initial(fn):
    """The head count checked only against a given initial_state: without one, nothing is checked."""
    def checked(q, k, v, g, beta, *args, initial_state=None, **kwargs):
        if initial_state is not None and initial_state.shape[1] % k.shape[2]:
            raise ValueError("initial_state's heads are not a multiple of H_k")
        return fn(q, k, v, g, beta, *args, initial_state=initial_state, check_heads=False, **kwargs)
    return checked


def _normalize(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm=False, eps=None):
    """The rule with q and k normalised by F.normalize (x / max(|x|, eps)) instead of x / sqrt(sum x² + 1e-6)."""
    if use_qk_l2norm:
        q, k = (F.normalize(x.float(), dim=-1) if eps is None else x.float() / torch.sqrt((x.float() ** 2).sum(-1, keepdim=True) + eps)
                for x in (q, k))
    return _rule(q, k, v, g, beta, initial_state, output_final_state, False)


def chunk_calls_course_chunk(q, k, v, g, beta, chunk_size=64, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    """The chunk loop written, each chunk the course's utils.linear_attention._chunk."""
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, use_qk_l2norm)
    S = torch.zeros(*k.shape[:2], k.shape[-1], v.shape[-1], device=v.device) if initial_state is None else initial_state.float()
    outs = []
    for c0 in range(0, k.shape[2], chunk_size):
        out, S = ref._chunk(*(x[:, :, c0:c0 + chunk_size] for x in (q, k, v, g, beta)), S)
        outs.append(out)
    return torch.cat(outs, 2).transpose(1, 2).to(out_dtype), S if output_final_state else None


def chunk_eps_outside(q, k, v, g, beta, chunk_size=64, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    """The L2 normalisation's eps added to the norm, not inside the square root."""
    if use_qk_l2norm:
        q, k = (x.float() / (x.float().norm(dim=-1, keepdim=True) + 1e-6) for x in (q, k))
    return _chunked(q, k, v, g, beta, chunk_size, initial_state, output_final_state, False)


WRONG = {
    "linear_attention_recurrent": {
        "queries scaled by d_v ** -0.5": (recurrent_scaled_by_d_v, "differs from causal linear attention"),
    },
    "linear_attention_parallel": {
        "a mask made for at most 64 tokens": (parallel_mask_of_64, "crashed"),
        "computed in bfloat16": (parallel_in_bfloat16, "compute in float32"),
    },
    "recurrent_gated_delta_rule": {
        "heads checked only against a given initial_state": (_heads_checked_with_initial(_rule), "raises ValueError when"),
        "F.normalize (eps 1e-12, not inside the sqrt)": (_normalize, "keys near zero"),
        "eps 1e-5 in the L2 normalisation": (partial(_normalize, eps=1e-5), "keys near zero"),
    },
    "chunk_gated_delta_rule": {
        "each chunk the course's _chunk": (_beside_recurrent(chunk_calls_course_chunk), "a helper"),
        "eps outside the square root": (_beside_recurrent(chunk_eps_outside), "keys near zero"),
    },
    "hybrid_cache_bytes": {
        "bytes per element ignored (4 and 2)": (partial(_bytes, mistake="default bytes"), "wrong output"),
    },
}

RIGHT = {
    "linear_attention_parallel": {"torch.tril on the scores": parallel_tril},
    "gated_delta_step": {"computed in float32, cast back": step_in_float32},
}
