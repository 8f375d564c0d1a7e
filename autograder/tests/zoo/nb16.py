"""Solutions of notebook 16 that grading must reject (WRONG) or accept (RIGHT): linear attention both
ways, the gated delta step, the recurrent and the chunked rule, the bytes of a hybrid stack."""
import math
from functools import partial

import torch
import torch.nn.functional as F

import utils.linear_attention as ref
from utils.kv_cache import kv_cache_bytes

NEG_INF = float("-inf")


# linear_attention_recurrent ---------------------------------------------------------------------
def _recurrent(q, k, v, read_first=False, scale=True, normalize=False, dtype=torch.float32, transpose_state=False,
               device=True, detach=False, in_place=False):
    B, T, H, d_k = k.shape
    q = q.to(dtype) * (d_k ** -0.5 if scale else 1.0)
    k, v32 = k.to(dtype), v.to(dtype)
    state = torch.zeros(B, H, d_k, v.shape[-1], dtype=dtype, device=q.device if device else None)
    key_sum = torch.zeros(B, H, d_k, dtype=dtype, device=q.device)
    outs = []
    for t in range(T):
        before = (q[:, t, :, None, :] @ state).squeeze(-2)
        if in_place:
            state += k[:, t, :, :, None] * v32[:, t, :, None, :]
        else:
            state = state + k[:, t, :, :, None] * v32[:, t, :, None, :]
        key_sum = key_sum + k[:, t]
        read = before if read_first else (q[:, t, :, None, :] @ state).squeeze(-2)
        outs.append(read / (q[:, t] * key_sum).sum(-1, keepdim=True) if normalize else read)
    out = torch.stack(outs, dim=1).to(v.dtype)
    if detach:
        out = out.detach()
    return out, (state.transpose(-1, -2) if transpose_state else state)


def recurrent_as_matrix(q, k, v):  # the parallel form inside: a (T, T) matrix
    d_k = k.shape[-1]
    qh, kh, vh = (x.float().transpose(1, 2) for x in (q, k, v))
    out = ((qh @ kh.transpose(-1, -2) * d_k ** -0.5).tril() @ vh).transpose(1, 2)
    return out.to(v.dtype), kh.transpose(-1, -2) @ vh


def recurrent_cumsum(q, k, v):  # every prefix state at once: (B, T, H, d_k, d_v)
    d_k = k.shape[-1]
    states = (k.float()[..., :, None] * v.float()[..., None, :]).cumsum(1)
    out = (q.float()[..., None, :] * d_k ** -0.5 @ states).squeeze(-2)
    return out.to(v.dtype), states[:, -1]


def recurrent_einsum(q, k, v):
    B, T, H, d_k = k.shape
    state = q.new_zeros(B, H, d_k, v.shape[-1], dtype=torch.float32)
    out = q.new_empty(B, T, H, v.shape[-1], dtype=torch.float32)
    for t in range(T):
        state = state + torch.einsum("bhk,bhv->bhkv", k[:, t].float(), v[:, t].float())
        out[:, t] = torch.einsum("bhk,bhkv->bhv", q[:, t].float() / math.sqrt(d_k), state)
    return out.to(q.dtype), state


def recurrent_per_head(q, k, v):
    B, T, H, d_k = k.shape
    states, outs = [], torch.zeros(B, T, H, v.shape[-1], device=q.device)
    for b in range(B):
        for h in range(H):
            S = torch.zeros(d_k, v.shape[-1], device=q.device)
            for t in range(T):
                S = S + torch.outer(k[b, t, h].float(), v[b, t, h].float())
                outs[b, t, h] = q[b, t, h].float() @ S / math.sqrt(d_k)
            states.append(S)
    return outs.to(q.dtype), torch.stack(states).view(B, H, d_k, v.shape[-1])


def recurrent_in_float64(q, k, v):
    out, state = _recurrent(q, k, v, dtype=torch.float64)
    return out.to(q.dtype), state.float()


# linear_attention_parallel ----------------------------------------------------------------------
def _parallel(q, k, v, diagonal=True, future=False, softmax=False, scale=True, device=True, cast_back=True):
    T, d_k = k.shape[1], k.shape[-1]
    qh, kh, vh = (x.float().transpose(1, 2) for x in (q, k, v))
    scores = qh @ kh.transpose(-1, -2) * (d_k ** -0.5 if scale else 1.0)
    seen = torch.ones(T, T, dtype=torch.bool, device=q.device if device else None).tril(0 if diagonal else -1)
    if future:
        seen = seen.T
    weights = torch.softmax(scores.masked_fill(~seen, NEG_INF), -1) if softmax else scores * seen
    out = (weights @ vh).transpose(1, 2)
    return out.to(q.dtype) if cast_back else out


def parallel_by_tokens(q, k, v):  # a loop over tokens: the recurrent form again
    return _recurrent(q, k, v)[0]


def parallel_einsum(q, k, v):
    T = q.shape[1]
    scores = torch.einsum("bthd,bshd->bhts", q.float(), k.float()) / math.sqrt(q.shape[-1])
    scores = scores * torch.tril(torch.ones(T, T, device=q.device))
    return torch.einsum("bhts,bshv->bthv", scores, v.float()).to(q.dtype)


def parallel_cumsum(q, k, v):  # every prefix state at once, no loop: parallel, and right
    return recurrent_cumsum(q, k, v)[0]


def parallel_per_head(q, k, v):
    T = q.shape[1]
    mask = torch.ones(T, T, device=q.device).tril()
    heads = [((q[:, :, h].float() @ k[:, :, h].float().mT) / math.sqrt(q.shape[-1]) * mask) @ v[:, :, h].float()
             for h in range(q.shape[2])]
    return torch.stack(heads, dim=2).to(q.dtype)


# gated_delta_step -------------------------------------------------------------------------------
def _step(state, q, k, v, g, beta, in_place=False, float32=False, **mistake):
    if float32:
        state, q, k, v, g, beta = (x.float() for x in (state, q, k, v, g, beta))
    if in_place:
        state *= g.exp()[..., None, None]
        predicted = (k[..., None, :] @ state).squeeze(-2)
        state += k[..., :, None] * (beta[..., None] * (v - predicted))[..., None, :]
        return (q[..., None, :] @ state).squeeze(-2), state
    from autograder.checks.nb16.delta_variants import step
    return step(state, q, k, v, g, beta, **mistake)


def step_transformers_style(state, q, k, v, g, beta):
    state = state * g.exp()[..., None, None]
    kv_mem = (state * k.unsqueeze(-1)).sum(dim=-2)
    state = state + k.unsqueeze(-1) * ((v - kv_mem) * beta.unsqueeze(-1)).unsqueeze(-2)
    return (state * q.unsqueeze(-1)).sum(dim=-2), state


def step_einsum(state, q, k, v, g, beta):
    S = torch.exp(g)[:, :, None, None] * state
    u = beta[..., None] * (v - torch.einsum("bhk,bhkv->bhv", k, S))
    S = S + torch.einsum("bhk,bhv->bhkv", k, u)
    return torch.einsum("bhk,bhkv->bhv", q, S), S


def step_per_head(state, q, k, v, g, beta):
    outs, states = [], []
    for b in range(state.shape[0]):
        for h in range(state.shape[1]):
            S = state[b, h] * torch.exp(g[b, h])
            S = S + torch.outer(k[b, h], beta[b, h] * (v[b, h] - k[b, h] @ S))
            outs.append(q[b, h] @ S)
            states.append(S)
    B, H = state.shape[:2]
    return torch.stack(outs).view(B, H, -1), torch.stack(states).view(state.shape)


# recurrent_gated_delta_rule ---------------------------------------------------------------------
def _rule(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm=False, check_heads=True,
          state_dtype=torch.float32, always_state=False, detach_initial=False, device=True, **mistake):
    H_k, H_v = k.shape[2], v.shape[2]
    if check_heads and H_v % H_k:
        raise ValueError("H_v must be a multiple of H_k")
    if mistake:
        from autograder.checks.nb16.delta_variants import rule
        out, state = rule(q, k, v, g, beta, initial_state, True, use_qk_l2norm, **mistake)
        return out.to(v.dtype), state if output_final_state else None
    r, out_dtype = max(H_v // H_k, 1), v.dtype
    q, k, v, g, beta = (x.to(state_dtype) for x in (q, k, v, g, beta))
    q, k = q.repeat_interleave(r, 2), k.repeat_interleave(r, 2)
    if use_qk_l2norm:
        q, k = (x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6) for x in (q, k))
    q = q / math.sqrt(k.shape[-1])
    B, T, H, d_k = k.shape
    if initial_state is None:
        state = torch.zeros(B, H, d_k, v.shape[-1], dtype=state_dtype, device=v.device if device else None)
    else:
        state = (initial_state.detach() if detach_initial else initial_state).to(state_dtype)
    outs = []
    for t in range(T):
        o, state = step_transformers_style(state, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
        outs.append(o)
    out = torch.stack(outs, 1)
    return out.to(out_dtype), state if output_final_state or always_state else None


def rule_calls_my_step(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    """Right: the notebook's own structure, calling gated_delta_step by name (graded with the course's)."""
    H_k, H_v, d_k, dtype = k.shape[2], v.shape[2], k.shape[-1], v.dtype
    if H_v % H_k:
        raise ValueError(f"{H_v} is not a multiple of {H_k}")
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    if use_qk_l2norm:
        q, k = (x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6) for x in (q, k))  # Qwen3-Next's form
    q, k = (x.repeat_interleave(H_v // H_k, dim=2) for x in (q * d_k ** -0.5, k))
    state = v.new_zeros(v.shape[0], H_v, d_k, v.shape[-1]) if initial_state is None else initial_state.float()
    out = torch.empty_like(v)
    for t in range(v.shape[1]):
        out[:, t], state = gated_delta_step(state, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])  # noqa: F821
    return out.to(dtype), (state if output_final_state else None)


def rule_heads_first_einsum(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    """Right: transformers' layout turned heads-first, einsum, the output written in place of a fresh tensor."""
    dtype, H_k, H_v = v.dtype, k.shape[2], v.shape[2]
    if H_v % H_k != 0:
        raise ValueError("value heads must be a multiple of key heads")
    q, k = (x.repeat_interleave(H_v // H_k, dim=2) for x in (q, k))
    q, k, v, g, beta = (x.transpose(1, 2).to(torch.float32, memory_format=torch.contiguous_format) for x in (q, k, v, g, beta))
    if use_qk_l2norm:
        q, k = q / (q.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt(), k / (k.pow(2).sum(-1, keepdim=True) + 1e-6).sqrt()
    q = q / q.shape[-1] ** 0.5
    B, H, T, d_k = k.shape
    S = torch.zeros(B, H, d_k, v.shape[-1], device=v.device) if initial_state is None else initial_state.to(v)
    out = torch.zeros_like(v)
    for t in range(T):
        S = S * g[:, :, t].exp()[..., None, None]
        u = beta[:, :, t, None] * (v[:, :, t] - torch.einsum("bhk,bhkv->bhv", k[:, :, t], S))
        S = S + torch.einsum("bhk,bhv->bhkv", k[:, :, t], u)
        out[:, :, t] = torch.einsum("bhk,bhkv->bhv", q[:, :, t], S)
    return out.transpose(1, 2).contiguous().to(dtype), S if output_final_state else None


def rule_in_float64(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    out, state = _rule(q, k, v, g, beta, initial_state, True, use_qk_l2norm, state_dtype=torch.float64)
    return out.to(v.dtype), state.float() if output_final_state else None


# chunk_gated_delta_rule -------------------------------------------------------------------------
def _prepare(q, k, v, g, beta, use_qk_l2norm, dtype=torch.float32):
    H_k, H_v = k.shape[2], v.shape[2]
    if H_v % H_k:
        raise ValueError("H_v must be a multiple of H_k")
    q, k, v, g, beta = (x.to(dtype) for x in (q, k, v, g, beta))
    q, k = q.repeat_interleave(H_v // H_k, 2), k.repeat_interleave(H_v // H_k, 2)
    if use_qk_l2norm:
        q, k = (x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6) for x in (q, k))
    return (x.transpose(1, 2) for x in (q * k.shape[-1] ** -0.5, k, v, g, beta))


def _chunked(q, k, v, g, beta, chunk_size=64, initial_state=None, output_final_state=False, use_qk_l2norm=False,
             decay="difference", drop_tail=False, no_state_decay=False, dtype=torch.float32):
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, use_qk_l2norm, dtype)
    B, H, T, d_k = k.shape
    S = torch.zeros(B, H, d_k, v.shape[-1], dtype=dtype, device=v.device) if initial_state is None else initial_state.to(dtype)
    outs = []
    stop = T - T % chunk_size if drop_tail and T >= chunk_size else T
    for c0 in range(0, stop, chunk_size):
        qc, kc, vc, gc, bc = (x[:, :, c0:c0 + chunk_size] for x in (q, k, v, g, beta))
        C = kc.shape[2]
        gamma = gc.cumsum(-1)
        lower = torch.ones(C, C, dtype=torch.bool, device=v.device).tril()
        if decay == "ratio":
            D = (gamma.exp()[..., :, None] / gamma.exp()[..., None, :]) * lower
        elif decay == "mask after exp":
            D = (gamma[..., :, None] - gamma[..., None, :]).exp() * lower
        else:
            D = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~lower, NEG_INF).exp()
        kb = kc * bc[..., None]
        A = (kb @ kc.mT * D).tril(-1)
        rhs = torch.cat([vc * bc[..., None], kb * gamma.exp()[..., None]], -1)
        sol = torch.linalg.solve_triangular(torch.eye(C, dtype=dtype, device=v.device) + A, rhs, upper=False, unitriangular=True)
        W, Kt = sol.split([vc.shape[-1], d_k], -1)
        U = W - Kt @ S
        outs.append((qc * gamma.exp()[..., None]) @ S + (qc @ kc.mT * D) @ U)
        last = gamma[..., -1:]
        S = (S if no_state_decay else S * last.exp()[..., None]) + (kc * (last - gamma).exp()[..., None]).mT @ U
    out = torch.cat(outs, 2).transpose(1, 2)
    return out.to(out_dtype), S.float() if output_final_state else None


def chunk_calls_recurrent(q, k, v, g, beta, chunk_size=64, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    return recurrent_gated_delta_rule(q, k, v, g, beta, initial_state, output_final_state, use_qk_l2norm)  # noqa: F821


def chunk_tokens_inside(q, k, v, g, beta, chunk_size=64, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    """Chunks in name only: a token loop inside each chunk."""
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, use_qk_l2norm)
    B, H, T, d_k = k.shape
    S = torch.zeros(B, H, d_k, v.shape[-1], device=v.device) if initial_state is None else initial_state.float()
    out = torch.empty_like(v)
    for c0 in range(0, T, chunk_size):
        for t in range(c0, min(c0 + chunk_size, T)):
            S = S * g[:, :, t].exp()[..., None, None]
            S = S + k[:, :, t, :, None] * (beta[:, :, t, None] * (v[:, :, t] - (k[:, :, t, None, :] @ S).squeeze(-2)))[..., None, :]
            out[:, :, t] = (q[:, :, t, None, :] @ S).squeeze(-2)
    return out.transpose(1, 2).to(out_dtype), S if output_final_state else None


def chunk_transformers_style(q, k, v, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                             use_qk_l2norm=False):
    """Right: zero padding to a multiple of the chunk and forward substitution row by row (transformers' export path)."""
    out_dtype, T = v.dtype, v.shape[1]
    q, k, v, g, beta = _prepare(q, k, v, g, beta, use_qk_l2norm)
    pad = (chunk_size - T % chunk_size) % chunk_size
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    B, H, Tp, d_k = k.shape
    n, C = Tp // chunk_size, chunk_size
    q, k, v = (x.reshape(B, H, n, C, x.shape[-1]) for x in (q, k, v))
    g, beta = g.reshape(B, H, n, C), beta.reshape(B, H, n, C)
    gamma = g.cumsum(-1)
    upper = torch.ones(C, C, dtype=torch.bool, device=v.device).triu(1)
    D = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(upper, NEG_INF).exp()
    kb = k * beta[..., None]
    T_inv = -(kb @ k.mT * D).masked_fill(torch.ones(C, C, dtype=torch.bool, device=v.device).triu(0), 0.0)  # -A
    rows = [T_inv[..., 0, :]]
    for i in range(1, C):
        row = T_inv[..., i, :]
        done = (row[..., :i, None] * torch.stack(rows, -2)[..., :i, :i]).sum(-2)
        rows.append(torch.cat([row[..., :i] + done, row[..., i:]], dim=-1))
    T_inv = torch.stack(rows, -2) + torch.eye(C, device=v.device)
    W, Kt = T_inv @ (v * beta[..., None]), T_inv @ (kb * gamma.exp()[..., None])
    S = torch.zeros(B, H, d_k, v.shape[-1], device=v.device) if initial_state is None else initial_state.float()
    outs = []
    for i in range(n):
        U = W[:, :, i] - Kt[:, :, i] @ S
        outs.append((q[:, :, i] * gamma[:, :, i].exp()[..., None]) @ S + (q[:, :, i] @ k[:, :, i].mT * D[:, :, i]) @ U)
        last = gamma[:, :, i, -1:]
        S = S * last.exp()[..., None] + (k[:, :, i] * (last - gamma[:, :, i]).exp()[..., None]).mT @ U
    out = torch.stack(outs, 2).reshape(B, H, Tp, -1)[:, :, :T]
    return out.transpose(1, 2).to(out_dtype), S if output_final_state else None


def chunk_inverse(q, k, v, g, beta, chunk_size=64, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    """Right, differently: (I + A)^-1 with torch.linalg.inv, einsum for the products."""
    out_dtype = v.dtype
    q, k, v, g, beta = _prepare(q, k, v, g, beta, use_qk_l2norm)
    B, H, T, d_k = k.shape
    S = torch.zeros(B, H, d_k, v.shape[-1], device=v.device) if initial_state is None else initial_state.float()
    outs = []
    for c0 in range(0, T, chunk_size):
        qc, kc, vc, gc, bc = (x[:, :, c0:c0 + chunk_size] for x in (q, k, v, g, beta))
        C = kc.shape[2]
        gamma = gc.cumsum(-1)
        D = torch.where(torch.ones(C, C, dtype=torch.bool, device=v.device).tril(),
                        (gamma[..., :, None] - gamma[..., None, :]).clamp(max=0.0), torch.full((), NEG_INF, device=v.device)).exp()
        A = torch.einsum("bhtk,bhjk->bhtj", kc * bc[..., None], kc) * D
        inv = torch.linalg.inv(torch.eye(C, device=v.device) + A.tril(-1))
        U = inv @ (vc * bc[..., None]) - inv @ (kc * (bc * gamma.exp())[..., None]) @ S
        outs.append(torch.einsum("bhtk,bhkv->bhtv", qc * gamma.exp()[..., None], S)
                    + torch.einsum("bhtj,bhjv->bhtv", torch.einsum("bhtk,bhjk->bhtj", qc, kc) * D, U))
        S = S * gamma[..., -1].exp()[..., None, None] + torch.einsum("bhjk,bhjv->bhkv", kc * (gamma[..., -1:] - gamma).exp()[..., None], U)
    return torch.cat(outs, 2).transpose(1, 2).to(out_dtype), S if output_final_state else None


# hybrid_cache_bytes -----------------------------------------------------------------------------
def _bytes(batch_size, seq_len, n_linear_layers, n_full_layers, linear_heads, d_k, d_v, cache_elements_per_token,
           state_bytes_per_element=4, cache_bytes_per_element=2, mistake=None):
    s_b, c_b = (cache_bytes_per_element, state_bytes_per_element) if mistake == "swapped" else (state_bytes_per_element, cache_bytes_per_element)
    b = 1 if mistake == "batch" else batch_size
    state = b * n_linear_layers * linear_heads * d_k * d_v * s_b * (seq_len if mistake == "grows" else 1)
    cache = b * seq_len * n_full_layers * cache_elements_per_token * c_b * (2 if mistake == "twice" else 1)
    if mistake == "floats":
        return float(state), float(cache)
    if mistake == "MiB":
        return state // 2**20, cache // 2**20
    if mistake == "default bytes":
        return batch_size * n_linear_layers * linear_heads * d_k * d_v * 4, batch_size * seq_len * n_full_layers * cache_elements_per_token * 2
    return state, cache


def bytes_with_kv_cache_bytes(batch_size, seq_len, n_linear_layers, n_full_layers, linear_heads, d_k, d_v,
                              cache_elements_per_token, state_bytes_per_element=4, cache_bytes_per_element=2):
    """Right: notebook 07's kv_cache_bytes for the cache (one 'head' of half the elements: keys and values)."""
    cache = kv_cache_bytes(batch_size, seq_len, n_full_layers, 1, cache_elements_per_token // 2, cache_bytes_per_element)
    return math.prod((batch_size, n_linear_layers, linear_heads, d_k, d_v, state_bytes_per_element)), cache


# The learner's own earlier exercises, which later ones call by name (grading runs the course's in their place).
gated_delta_step = step_transformers_style
recurrent_gated_delta_rule = rule_heads_first_einsum


def _beside_recurrent(chunked):
    """A chunked candidate in a notebook that also holds a right recurrent_gated_delta_rule: the visible
    test compares the two."""
    return {"chunk_gated_delta_rule": chunked, "recurrent_gated_delta_rule": rule_heads_first_einsum}

WRONG = {
    "linear_attention_recurrent": {
        "reads before its own write": (partial(_recurrent, read_first=True), "must read the state after its own write"),
        "queries not scaled": (partial(_recurrent, scale=False), "scaled by d_k ** -0.5"),
        "Katharopoulos' denominator": (partial(_recurrent, normalize=True), "has no denominator"),
        "state transposed (d_v, d_k)": (partial(_recurrent, transpose_state=True), "keys index its rows"),
        "the (T, T) matrix inside": (recurrent_as_matrix, "larger than its inputs, its output and its state"),
        "every prefix state kept": (recurrent_cumsum, "larger than its inputs, its output and its state"),
        "computed in the inputs' dtype": (lambda q, k, v: _recurrent(q, k, v, dtype=q.dtype), "the state in float32"),
        "state made on the CPU": (partial(_recurrent, device=False), "Create every tensor on the input's device"),
        "output detached": (partial(_recurrent, detach=True), "No gradient reaches"),
        "state updated in place": (partial(_recurrent, in_place=True), "cannot be backpropagated"),
        "calls utils": (lambda q, k, v: ref.linear_attention_recurrent(q, k, v), "yourself"),
    },
    "linear_attention_parallel": {
        "diagonal masked": (partial(_parallel, diagonal=False), "keep the diagonal"),
        "mask reversed": (partial(_parallel, future=True), "mask is reversed"),
        "a softmax": (partial(_parallel, softmax=True), "no softmax"),
        "scores not scaled": (partial(_parallel, scale=False), "scaled by d_k ** -0.5"),
        "a loop over tokens": (parallel_by_tokens, "more torch operations for 24 tokens than for 6"),
        "mask made on the CPU": (partial(_parallel, device=False), "Create every tensor on the input's device"),
        "float32 returned for bfloat16": (partial(_parallel, cast_back=False), "must return bfloat16"),
        "calls utils": (lambda q, k, v: ref.linear_attention_parallel(q, k, v), "yourself"),
    },
    "gated_delta_step": {
        "decay after the write": (partial(_step, decay_after=True), "The decay comes first"),
        "prediction from the undecayed state": (partial(_step, predict_before_decay=True), "must use the decayed state"),
        "beta on v only": (partial(_step, beta_on_v_only=True), "beta scales the whole correction"),
        "reads the old state": (partial(_step, read_before=True), "reads the state after the write"),
        "g used as a factor": (partial(_step, no_exp=True), "g is a log decay"),
        "state changed in place": (partial(_step, in_place=True), "in place"),
        "always float32": (partial(_step, float32=True), "in the dtype it is given"),
        "calls utils": (lambda *a: ref.gated_delta_step(*a), "yourself"),
    },
    "recurrent_gated_delta_rule": {
        "queries not scaled": (partial(_rule, scale="none"), "must be scaled by d_k ** -0.5"),
        "keys scaled too": (partial(_rule, scale="qk"), "Only the queries are scaled"),
        "L2 after the scale": (partial(_rule, l2_after_scale=True), "L2-normalise q and k first"),
        "use_qk_l2norm ignored": (partial(_rule, ignore_l2=True), "must be L2-normalised"),
        "repeat for grouped heads": (partial(_rule, heads="repeat"), "repeat_interleave"),
        "initial_state ignored": (partial(_rule, ignore_initial=True), "initial_state is the state before the first token"),
        "decay after the write": (partial(_rule, decay_after=True), "The decay comes first"),
        "final state always returned": (partial(_rule, always_state=True), "must return (out, None)"),
        "no check of the head counts": (partial(_rule, check_heads=False), "must raise ValueError"),
        "state in bfloat16 for bfloat16 inputs": (lambda *a, **kw: _rule(*a, **kw, state_dtype=a[0].dtype), "the state in float32"),
        "initial state detached": (partial(_rule, detach_initial=True), "No gradient reaches initial_state"),
        "zeros on the CPU": (partial(_rule, device=False), "Create every tensor on the input's device"),
        "calls utils": (lambda *a, **kw: ref.recurrent_gated_delta_rule(*a, **kw), "yourself"),
    },
    "chunk_gated_delta_rule": {
        "calls the recurrent form": (_beside_recurrent(chunk_calls_recurrent), "state-sized tensors"),
        "a token loop inside each chunk": (_beside_recurrent(chunk_tokens_inside), "state-sized tensors"),
        "decay as a ratio of exponentials": (_beside_recurrent(partial(_chunked, decay="ratio")), "NaN or inf"),
        "mask multiplied after the exp": (_beside_recurrent(partial(_chunked, decay="mask after exp")), "NaN or inf"),
        "one chunk of the whole sequence": (_beside_recurrent(lambda *a, chunk_size=64, **kw: _chunked(*a, chunk_size=10**6, **kw)),
                                            "pair of dims"),
        "last short chunk dropped": (_beside_recurrent(partial(_chunked, drop_tail=True)), "differs from the gated delta rule"),
        "state not decayed across chunks": (_beside_recurrent(partial(_chunked, no_state_decay=True)), "differs from the gated delta rule"),
        "initial_state ignored": (_beside_recurrent(lambda *a, initial_state=None, **kw: _chunked(*a, **kw)), "initial_state is the state before the first token"),
        "calls utils": (_beside_recurrent(lambda *a, **kw: ref.chunk_gated_delta_rule(*a, **kw)), "yourself"),
    },
    "hybrid_cache_bytes": {
        "the state grows with seq_len": (partial(_bytes, mistake="grows"), "does not grow with seq_len"),
        "keys and values counted twice": (partial(_bytes, mistake="twice"), "already counts keys and values"),
        "bytes per element swapped": (partial(_bytes, mistake="swapped"), "not the other way round"),
        "batch left out": (partial(_bytes, mistake="batch"), "multiply by batch_size"),
        "floats": (partial(_bytes, mistake="floats"), "must return an int"),
        "MiB instead of bytes": (partial(_bytes, mistake="MiB"), "is wrong"),
        "calls utils": (lambda *a, **kw: ref.hybrid_cache_bytes(*a, **kw), "yourself"),
    },
}

RIGHT = {
    "linear_attention_recurrent": {"einsum": recurrent_einsum, "one batch item and head at a time, torch.outer": recurrent_per_head,
                                   "computed in float64, state cast to float32": recurrent_in_float64},
    "linear_attention_parallel": {"einsum and a float mask": parallel_einsum, "prefix sums of outer products": parallel_cumsum,
                                  "one head at a time": parallel_per_head},
    "gated_delta_step": {"transformers' sums": step_transformers_style, "einsum": step_einsum, "one head at a time": step_per_head},
    "recurrent_gated_delta_rule": {"calls gated_delta_step, rsqrt as Qwen3-Next": rule_calls_my_step,
                                   "heads first, einsum": rule_heads_first_einsum, "computed in float64": rule_in_float64},
    "chunk_gated_delta_rule": {"padding and forward substitution": _beside_recurrent(chunk_transformers_style),
                               "torch.linalg.inv and einsum": _beside_recurrent(chunk_inverse),
                               "computed in float64": _beside_recurrent(partial(_chunked, dtype=torch.float64))},
    "hybrid_cache_bytes": {"notebook 07's kv_cache_bytes": bytes_with_kv_cache_bytes, "plain": _bytes},
}


from autograder.tests.zoo import nb16_kinds  # noqa: E402  (issue 36's kinds; it imports the builders above)

for _exercise, _entries in nb16_kinds.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb16_kinds.RIGHT.items():
    RIGHT[_exercise].update(_entries)
