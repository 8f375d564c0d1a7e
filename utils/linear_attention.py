"""Linear attention and the delta rule: a state of fixed size (notebook 16).

Layout: transformers' (batch, tokens, heads, dim) for every function here, not the course's
(batch, heads, tokens, dim): these are the names and argument orders of Hugging Face's pure-PyTorch
references (`torch_recurrent_gated_delta_rule`, `torch_chunk_gated_delta_rule` in models/qwen3_next,
`recurrent_kimi_delta_attention`, `chunk_kimi_delta_attention` in models/kimi_linear), and an
external parity check calls them by these names. The state of a head is a (d_k, d_v) matrix S:
a key k (row vector) reads k S, a d_v row; writing value v under key k adds the outer product kᵀv.

Precision, as in those references: the arithmetic and the state are float32 whatever the inputs'
dtype (a state summed over thousands of tokens must not round to bfloat16's 8 bits); outputs come
back in the inputs' dtype.

    linear attention     S_t = S_{t-1} + k_tᵀ v_t                       o_t = q_t S_t
    gated delta rule     S_t = e^{g_t} S_{t-1} + k_tᵀ u_t,  u_t = β_t (v_t - k_t e^{g_t} S_{t-1})
    Kimi Delta Attention the same with e^{g_t} one number per key channel (a row of S)

Queries are scaled by d_k ** -0.5 (after the optional L2 normalisation, eps 1e-6), as in both models.
"""
import torch

NEG_INF = float("-inf")


def l2_normalize(x, eps: float = 1e-6):
    """x / sqrt(sum x^2 + eps) over the last dim: FLA's and Kimi's form (Qwen3-Next multiplies by the rsqrt)."""
    return x / torch.sqrt((x * x).sum(-1, keepdim=True) + eps)


# Linear attention: a running sum, and the same numbers in parallel ------------------------------
def linear_attention_recurrent(q, k, v):
    """(out (B, T, H, d_v), state (B, H, d_k, d_v)) of causal linear attention, one token at a time."""
    B, T, H, d_k = k.shape
    q, k, v32 = q.float() * d_k ** -0.5, k.float(), v.float()
    state = torch.zeros(B, H, d_k, v.shape[-1], dtype=torch.float32, device=v.device)
    out = torch.empty(B, T, H, v.shape[-1], dtype=torch.float32, device=v.device)
    for t in range(T):
        state = state + k[:, t, :, :, None] * v32[:, t, :, None, :]  # write: add k_tᵀ v_t
        out[:, t] = (q[:, t, :, None, :] @ state).squeeze(-2)  # read with the query, after the write
    return out.to(v.dtype), state


def linear_attention_parallel(q, k, v):
    """out (B, T, H, d_v) of causal linear attention: ((Q Kᵀ) masked to j <= t) V, softmax left out."""
    T, d_k = k.shape[1], k.shape[-1]
    q, k, v32 = (x.float().transpose(1, 2) for x in (q, k, v))  # (B, H, T, d)
    scores = (q * d_k ** -0.5) @ k.transpose(-1, -2)
    blocked = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return (scores.masked_fill(blocked, 0.0) @ v32).transpose(1, 2).to(v.dtype)


# The gated delta rule (Gated DeltaNet: Qwen3-Next, Qwen3.5) ---------------------------------------
def gated_delta_step(state, q, k, v, g, beta):
    """One token for every batch item and head: state (B, H, d_k, d_v); q, k (B, H, d_k); v (B, H, d_v);
    g, beta (B, H). Decay, correct what the state predicts for k, read with q: (out (B, H, d_v), state)."""
    state = state * g.exp()[..., None, None]  # forget: every entry of the head's state times e^g
    predicted = (k[..., None, :] @ state).squeeze(-2)  # what the state already returns for k
    correction = beta[..., None] * (v - predicted)  # the delta rule: write only the error, scaled by beta
    state = state + k[..., :, None] * correction[..., None, :]
    return (q[..., None, :] @ state).squeeze(-2), state


def _queries_and_keys(q, k, n_v_heads: int, use_qk_l2norm: bool):
    """float32 queries and keys, L2-normalised if asked, queries scaled by d_k ** -0.5, each key head
    repeated for the n_v_heads // H_k consecutive value heads it serves."""
    H_k = k.shape[2]
    if n_v_heads % H_k:
        raise ValueError(f"{n_v_heads} value heads is not a multiple of {H_k} key heads")
    q, k = q.float(), k.float()
    if use_qk_l2norm:
        q, k = l2_normalize(q), l2_normalize(k)
    q = q * k.shape[-1] ** -0.5
    if n_v_heads != H_k:
        q, k = (x.repeat_interleave(n_v_heads // H_k, dim=2) for x in (q, k))
    return q, k


def _start(initial_state, B, H, d_k, d_v, like):
    if initial_state is None:
        return torch.zeros(B, H, d_k, d_v, dtype=torch.float32, device=like.device)
    return initial_state.to(device=like.device, dtype=torch.float32)


def recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    """q, k (B, T, H_k, d_k); v (B, T, H_v, d_v); g (log decay, <= 0) and beta (B, T, H_v); initial_state
    (B, H_v, d_k, d_v) or None. Token by token: (out (B, T, H_v, d_v) in v's dtype, final state or None)."""
    dtype = v.dtype
    q, k = _queries_and_keys(q, k, v.shape[2], use_qk_l2norm)
    v, g, beta = v.float(), g.float(), beta.float()
    B, T, H, d_k = k.shape
    state = _start(initial_state, B, H, d_k, v.shape[-1], v)
    out = torch.empty_like(v)
    for t in range(T):
        out[:, t], state = gated_delta_step(state, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
    return out.to(dtype), state if output_final_state else None


def _chunk(q, k, v, g, beta, state):
    """One chunk of C tokens (heads first: q, k (B, H, C, d_k), v (B, H, C, d_v), g, beta (B, H, C)) from
    the state at its start. Inside the chunk in parallel: the corrections u of all C tokens at once
    (the UT transform), then the outputs and the state at the chunk's end."""
    C = k.shape[2]
    gamma = g.cumsum(-1)  # log of the decay from the chunk's start through each position
    seen = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    decay = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~seen, NEG_INF).exp()  # e^{γ_t - γ_j}, j <= t
    k_beta = k * beta[..., None]
    A = (k_beta @ k.transpose(-1, -2) * decay).tril(-1)  # u_t + sum_{j<t} A_tj u_j = β_t (v_t - k_t e^{γ_t} S)
    rhs = torch.cat([v * beta[..., None], k_beta * gamma.exp()[..., None]], dim=-1)
    eye = torch.eye(C, dtype=k.dtype, device=k.device)
    solved = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    w, k_decayed = solved.split([v.shape[-1], k.shape[-1]], dim=-1)
    u = w - k_decayed @ state  # the corrections, the state's predictions taken out
    out = (q * gamma.exp()[..., None]) @ state + (q @ k.transpose(-1, -2) * decay) @ u
    last = gamma[..., -1:]
    state = state * last.exp()[..., None] + (k * (last - gamma).exp()[..., None]).transpose(-1, -2) @ u
    return out, state


def chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                           use_qk_l2norm=False):
    """The same numbers as recurrent_gated_delta_rule, chunk_size tokens at a time: within a chunk in
    parallel, across chunks through the state. The last chunk may be shorter (no padding)."""
    dtype = v.dtype
    q, k = _queries_and_keys(q, k, v.shape[2], use_qk_l2norm)
    v, g, beta = v.float(), g.float(), beta.float()
    B, T, H, d_k = k.shape
    state = _start(initial_state, B, H, d_k, v.shape[-1], v)
    q, k, v, g, beta = (x.transpose(1, 2) for x in (q, k, v, g, beta))  # heads first: (B, H, T, ...)
    outs = []
    for c0 in range(0, T, chunk_size):
        c = slice(c0, c0 + chunk_size)
        out, state = _chunk(q[:, :, c], k[:, :, c], v[:, :, c], g[:, :, c], beta[:, :, c], state)
        outs.append(out)
    out = torch.cat(outs, dim=2) if outs else v
    return out.transpose(1, 2).to(dtype), state if output_final_state else None


# Kimi Delta Attention: a decay per key channel --------------------------------------------------
def recurrent_kda(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    """q, k (B, T, H, d_k); v (B, T, H, d_v); g (B, T, H, d_k), one log decay per key channel; beta (B, T, H).
    The gated delta rule with row c of each head's state decayed by e^{g_c}."""
    dtype, d_k = v.dtype, k.shape[-1]
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    if use_qk_l2norm:
        q, k = l2_normalize(q), l2_normalize(k)
    q = q * d_k ** -0.5
    B, T, H, _ = k.shape
    state = _start(initial_state, B, H, d_k, v.shape[-1], v)
    out = torch.empty_like(v)
    for t in range(T):
        state = state * g[:, t].exp()[..., None]  # (B, H, d_k, 1): one factor per row
        correction = beta[:, t, :, None] * (v[:, t] - (k[:, t, :, None, :] @ state).squeeze(-2))
        state = state + k[:, t, :, :, None] * correction[..., None, :]
        out[:, t] = (q[:, t, :, None, :] @ state).squeeze(-2)
    return out.to(dtype), state if output_final_state else None


def _kda_chunk(q, k, v, g, beta, state):
    """_chunk with g (B, H, C, d_k): the decays between two positions differ per channel, so the
    within-chunk products carry a (C, C, d_k) factor."""
    C = k.shape[2]
    gamma = g.cumsum(-2)
    seen = torch.ones(C, C, dtype=torch.bool, device=k.device).tril()
    decay = (gamma[..., :, None, :] - gamma[..., None, :, :]).masked_fill(~seen[..., None], NEG_INF).exp()
    k_beta = k * beta[..., None]
    A = (k_beta[..., :, None, :] * k[..., None, :, :] * decay).sum(-1).tril(-1)
    rhs = torch.cat([v * beta[..., None], k_beta * gamma.exp()], dim=-1)
    eye = torch.eye(C, dtype=k.dtype, device=k.device)
    solved = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    w, k_decayed = solved.split([v.shape[-1], k.shape[-1]], dim=-1)
    u = w - k_decayed @ state
    scores = (q[..., :, None, :] * k[..., None, :, :] * decay).sum(-1)
    out = (q * gamma.exp()) @ state + scores @ u
    last = gamma[..., -1:, :]
    state = state * last.exp().transpose(-1, -2) + (k * (last - gamma).exp()).transpose(-1, -2) @ u
    return out, state


def chunk_kda(q, k, v, g, beta, chunk_size=64, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    """recurrent_kda's numbers, chunk_size tokens at a time (the last chunk may be shorter)."""
    dtype, d_k = v.dtype, k.shape[-1]
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    if use_qk_l2norm:
        q, k = l2_normalize(q), l2_normalize(k)
    q = q * d_k ** -0.5
    B, T, H, _ = k.shape
    state = _start(initial_state, B, H, d_k, v.shape[-1], v)
    q, k, v, g, beta = (x.transpose(1, 2) for x in (q, k, v, g, beta))
    outs = []
    for c0 in range(0, T, chunk_size):
        c = slice(c0, c0 + chunk_size)
        out, state = _kda_chunk(q[:, :, c], k[:, :, c], v[:, :, c], g[:, :, c], beta[:, :, c], state)
        outs.append(out)
    out = torch.cat(outs, dim=2) if outs else v
    return out.transpose(1, 2).to(dtype), state if output_final_state else None


# Memory of a hybrid stack ---------------------------------------------------------------------
def hybrid_cache_bytes(batch_size, seq_len, n_linear_layers, n_full_layers, linear_heads, d_k, d_v,
                       cache_elements_per_token, state_bytes_per_element=4, cache_bytes_per_element=2):
    """(state bytes of the linear layers, cache bytes of the full-attention layers) of one stack: a
    (d_k, d_v) state per linear head, whatever the length; cache_elements_per_token per full layer
    and token (2 * n_kv_heads * head_dim for GQA, notebook 07; 576 for DeepSeek's MLA, notebook 09)."""
    state = batch_size * n_linear_layers * linear_heads * d_k * d_v * state_bytes_per_element
    cache = batch_size * seq_len * n_full_layers * cache_elements_per_token * cache_bytes_per_element
    return int(state), int(cache)


def __getattr__(name):
    """GatedDeltaNet and GatedDeltaNetConfig, the layer, live in utils/gated_deltanet.py (which imports this file)."""
    if name in ("GatedDeltaNet", "GatedDeltaNetConfig"):
        from utils import gated_deltanet
        return getattr(gated_deltanet, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
