"""Solutions of notebook 15 along the kinds of input a first set of probes left out (merged into
nb15's WRONG and RIGHT): layouts (a column stride, k and v laid out differently), block
combinations (block_q > block_k, T_q a multiple of its block while T_k is not), value regimes
(every score large and negative, rows that see no key of a tile, v's masked lanes read without
other=), sizes beyond a constant (rows wider than 64, d wider than 16), work in the wrong place (a
launcher that finishes in PyTorch), and a kernel the interpreter cannot run. Right ones: a kernel
that does bfloat16 arithmetic (q scaled in bf16, as Triton's 2023 tutorial did), one written with
block pointers (CS336's style), one whose float32 output the launcher casts to the inputs' dtype,
and one that uses every stride instead of copies."""
import math

import utils.flash_triton  # noqa: F401  (first: TRITON_INTERPRET=1 before triton is imported)

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from utils.flash_attention import flash_attention_backward  # noqa: E402

LOG2E = 1.4426950408889634


# softmax_rows_kernel and triton_softmax ------------------------------------------------------------
@triton.jit
def _row_softmax(X, OUT, N, stride_x, stride_out, BLOCK_N: tl.constexpr, NORMALISE: tl.constexpr = True,
                 MAX_FROM_ZERO: tl.constexpr = False):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(X + row * stride_x + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    if MAX_FROM_ZERO:
        m = tl.maximum(m, 0.0)  # "the maximum is at least 0": a row near -1000 underflows to 0 / 0
    e = tl.exp(x - m)
    if NORMALISE:
        e = e / tl.sum(e, axis=0)
    tl.store(OUT + row * stride_out + cols, e, mask=cols < N)


def _softmax(contiguous=True, block=None, **switches):
    def triton_softmax(x):
        if contiguous:
            x = x.contiguous()
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        _row_softmax[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0),
                                    BLOCK_N=block or triton.next_power_of_2(x.shape[1]), **switches)
        return out

    return {"softmax_rows_kernel": _row_softmax, "triton_softmax": triton_softmax}


def _softmax_finished_in_torch(x):
    x = x.contiguous()
    e = torch.empty(x.shape, dtype=torch.float32, device=x.device)  # the kernel stores exp(x - max) only
    _row_softmax[(x.shape[0],)](x, e, x.shape[1], x.stride(0), e.stride(0), BLOCK_N=triton.next_power_of_2(x.shape[1]),
                                NORMALISE=False)
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


def _softmax_cast_after(x):
    x = x.contiguous()
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    _row_softmax[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0), BLOCK_N=triton.next_power_of_2(x.shape[1]))
    return out.to(x.dtype)


# flash_forward_kernel and triton_flash_attention_forward --------------------------------------------
@triton.jit
def _flash(Q, K, V, O, LSE, T_q, T_k, sq0, sq1, sq2, sq3, sk0, sk1, sk2, sk3, sv0, sv1, sv2, sv3, H, scale,
           CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
           UNIT_D: tl.constexpr = False, END_BY_K: tl.constexpr = False, EVEN: tl.constexpr = False,
           M_FROM_ZERO: tl.constexpr = False, BACKWARDS: tl.constexpr = False, PARTS: tl.constexpr = False,
           L=None, STORE_LSE: tl.constexpr = True, V_OTHER: tl.constexpr = True):
    """Any strides; O and LSE contiguous (B*H, T_q, D) and (B*H, T_q). One switch per mistake."""
    tile, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    b, h = bh // H, bh % H
    rows = tile * BLOCK_Q + tl.arange(0, BLOCK_Q)
    dims = tl.arange(0, D)
    dq, dk, dv = dims * sq3, dims * sk3, dims * sv3
    if UNIT_D:  # "the last dimension is contiguous"
        dq, dk, dv = dims, dims, dims
    q_at = Q + b * sq0 + h * sq1 + rows[:, None] * sq2 + dq[None, :]
    if EVEN:  # no masks when T_q is a multiple of BLOCK_Q, whatever T_k
        q = tl.load(q_at)
    else:
        q = tl.load(q_at, mask=rows[:, None] < T_q, other=0.0)
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    if M_FROM_ZERO:
        m = tl.zeros([BLOCK_Q], tl.float32)
    l = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, D], tl.float32)
    offset = T_k - T_q
    end = T_k
    if CAUSAL:
        if END_BY_K:
            end = tl.minimum(T_k, (tile + 1) * BLOCK_K + offset)
        else:
            end = tl.minimum(T_k, (tile + 1) * BLOCK_Q + offset)
    n_tiles = tl.cdiv(end, BLOCK_K)
    for i in range(0, n_tiles):
        start = i * BLOCK_K
        if BACKWARDS:  # the diagonal tile first
            start = (n_tiles - 1 - i) * BLOCK_K
        keys = start + tl.arange(0, BLOCK_K)
        k_at = K + b * sk0 + h * sk1 + keys[:, None] * sk2 + dk[None, :]
        v_at = V + b * sv0 + h * sv1 + keys[:, None] * sv2 + dv[None, :]
        if EVEN:
            k = tl.load(k_at)
            v = tl.load(v_at)
        else:
            k = tl.load(k_at, mask=keys[:, None] < T_k, other=0.0)
            if V_OTHER:
                v = tl.load(v_at, mask=keys[:, None] < T_k, other=0.0)
            else:  # "masked lanes give 0": undefined on a GPU, and p * NaN = NaN
                v = tl.load(v_at, mask=keys[:, None] < T_k)
        s = tl.dot(q, tl.trans(k)) * scale
        seen = keys[None, :] < T_k
        if EVEN:
            seen = keys[None, :] >= 0
        if CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None] + offset)
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    o_at = O + bh * T_q * D + rows[:, None] * D + dims[None, :]
    if PARTS:  # acc, m and l to memory: the launcher finishes in PyTorch
        tl.store(o_at, acc, mask=rows[:, None] < T_q)
        tl.store(LSE + bh * T_q + rows, m, mask=rows < T_q)
        tl.store(L + bh * T_q + rows, l, mask=rows < T_q)
    else:
        if EVEN:
            tl.store(o_at, (acc / l[:, None]).to(O.dtype.element_ty))
        else:
            tl.store(o_at, (acc / l[:, None]).to(O.dtype.element_ty), mask=rows[:, None] < T_q)
        if STORE_LSE:
            tl.store(LSE + bh * T_q + rows, m + tl.log(l), mask=rows < T_q)


def _flash_with(contiguous=True, v_like_k=False, width=None, even_from_q=False, finish="kernel", **switches):
    def triton_flash_attention_forward(q, k, v, causal=False, block_q=64, block_k=64):
        (B, H, T_q, d), T_k = q.shape, k.shape[2]
        if contiguous:
            q, k, v = (t.contiguous() for t in (q, k, v))
        D = width or d
        out = torch.empty(B, H, T_q, d, dtype=torch.float32 if finish in ("torch", "cast") else q.dtype, device=q.device)
        lse = torch.empty(B, H, T_q, dtype=torch.float32, device=q.device)
        l = torch.empty_like(lse) if finish == "torch" else None
        even = even_from_q and T_q % block_q == 0
        sv = k.stride() if v_like_k else v.stride()  # "v is laid out like k"
        _flash[(triton.cdiv(T_q, block_q), B * H)](q, k, v, out, lse, T_q, T_k, *q.stride(), *k.stride(), *sv, H, 1 / math.sqrt(d),
                                                   CAUSAL=causal, D=D, BLOCK_Q=block_q, BLOCK_K=block_k, EVEN=even,
                                                   PARTS=finish == "torch", L=l, STORE_LSE=finish != "lse in torch", **switches)
        if finish == "torch":  # the division and the log-sum-exp after the launch
            return (out / l[..., None]).to(q.dtype), lse + torch.log(l)
        if finish == "cast":  # the kernel's float32 output in the inputs' dtype: a copy, no arithmetic
            return out.to(q.dtype), lse
        if finish == "lse in torch":
            s = (q.float() @ k.float().transpose(-2, -1)) / math.sqrt(d)
            if causal:
                s = s.masked_fill(torch.ones(T_q, T_k, dtype=torch.bool, device=q.device).triu(T_k - T_q + 1), float("-inf"))
            return out, torch.logsumexp(s, -1)
        return out, lse

    return {"flash_forward_kernel": _flash, "triton_flash_attention_forward": triton_flash_attention_forward}


@triton.jit
def _flash_libdevice(Q, K, V, O, LSE, T_q, T_k, scale, CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr,
                     BLOCK_K: tl.constexpr):
    """Right on a GPU; exp through CUDA's libdevice, which the interpreter cannot call."""
    tile, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rows = tile * BLOCK_Q + tl.arange(0, BLOCK_Q)
    dims = tl.arange(0, D)
    q = tl.load(Q + bh * T_q * D + rows[:, None] * D + dims[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, D], tl.float32)
    end = T_k
    if CAUSAL:
        end = tl.minimum(T_k, (tile + 1) * BLOCK_Q + T_k - T_q)
    for start in range(0, end, BLOCK_K):
        keys = start + tl.arange(0, BLOCK_K)
        k = tl.load(K + bh * T_k * D + keys[:, None] * D + dims[None, :], mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + bh * T_k * D + keys[:, None] * D + dims[None, :], mask=keys[:, None] < T_k, other=0.0)
        seen = keys[None, :] < T_k
        if CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None] + T_k - T_q)
        s = tl.where(seen, tl.dot(q, tl.trans(k)) * scale, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        p = tl.extra.cuda.libdevice.exp(s - m_new[:, None])
        alpha = tl.extra.cuda.libdevice.exp(m - m_new)
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    tl.store(O + bh * T_q * D + rows[:, None] * D + dims[None, :], (acc / l[:, None]).to(O.dtype.element_ty), mask=rows[:, None] < T_q)
    tl.store(LSE + bh * T_q + rows, m + tl.log(l), mask=rows < T_q)


def _launch_libdevice(q, k, v, causal=False, block_q=64, block_k=64):
    (B, H, T_q, d), T_k = q.shape, k.shape[2]
    q, k, v = (t.contiguous() for t in (q, k, v))
    out, lse = torch.empty_like(q), torch.empty(B, H, T_q, device=q.device)
    _flash_libdevice[(triton.cdiv(T_q, block_q), B * H)](q, k, v, out, lse, T_q, T_k, d ** -0.5, CAUSAL=causal, D=d,
                                                         BLOCK_Q=block_q, BLOCK_K=block_k)
    return out, lse


# Right: bfloat16 arithmetic, as Triton's 2023 fused-attention tutorial wrote it --------------------
@triton.jit
def _flash_tutorial(Q, K, V, O, LSE, T_q, T_k, sm_scale, CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr,
                    BLOCK_K: tl.constexpr):
    """q scaled by sm_scale * log2(e) in q's dtype (a bf16 block times a scalar is bf16 arithmetic),
    base-2 statistics with exp2, lse converted back to the natural log."""
    tile, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rows = tile * BLOCK_Q + tl.arange(0, BLOCK_Q)
    dims = tl.arange(0, D)
    qk_scale = sm_scale * 1.4426950408889634
    q = tl.load(Q + bh * T_q * D + rows[:, None] * D + dims[None, :], mask=rows[:, None] < T_q, other=0.0)
    q = (q * qk_scale).to(Q.dtype.element_ty)
    m_i = tl.zeros([BLOCK_Q], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_Q], dtype=tl.float32)
    acc = tl.zeros([BLOCK_Q, D], dtype=tl.float32)
    hi = T_k
    if CAUSAL:
        hi = tl.minimum(T_k, (tile + 1) * BLOCK_Q + T_k - T_q)
    for start_n in range(0, hi, BLOCK_K):
        cols = start_n + tl.arange(0, BLOCK_K)
        k = tl.load(K + bh * T_k * D + cols[None, :] * D + dims[:, None], mask=cols[None, :] < T_k, other=0.0)  # kᵀ
        qk = tl.dot(q, k)
        keep = cols[None, :] < T_k
        if CAUSAL:
            keep = keep & (rows[:, None] + T_k - T_q >= cols[None, :])
        qk = tl.where(keep, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V + bh * T_k * D + cols[:, None] * D + dims[None, :], mask=cols[:, None] < T_k, other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(V.dtype.element_ty), v)
        m_i = m_ij
    tl.store(O + bh * T_q * D + rows[:, None] * D + dims[None, :], (acc / l_i[:, None]).to(O.dtype.element_ty), mask=rows[:, None] < T_q)
    tl.store(LSE + bh * T_q + rows, (m_i + tl.math.log2(l_i)) * 0.6931471805599453, mask=rows < T_q)


def _tutorial_launcher(q, k, v, causal=False, block_q=64, block_k=64):
    (B, H, T_q, d), T_k = q.shape, k.shape[2]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o = torch.empty_like(q)
    M = torch.empty((B, H, T_q), device=q.device, dtype=torch.float32)
    _flash_tutorial[(triton.cdiv(T_q, block_q), B * H, 1)](q, k, v, o, M, T_q, T_k, 1.0 / d ** 0.5, CAUSAL=causal, D=d,
                                                          BLOCK_Q=block_q, BLOCK_K=block_k)
    return o, M


# Right: block pointers, in CS336's style ---------------------------------------------------------
@triton.jit
def _flash_block_pointers(Q_ptr, K_ptr, V_ptr, O_ptr, L_ptr,
                          stride_qb, stride_qh, stride_qq, stride_qd, stride_kb, stride_kh, stride_kk, stride_kd,
                          stride_vb, stride_vh, stride_vk, stride_vd, stride_ob, stride_oh, stride_oq, stride_od,
                          stride_lb, stride_lh, stride_lq, N_QUERIES, N_KEYS, N_HEADS, scale,
                          D: tl.constexpr, Q_TILE_SIZE: tl.constexpr, K_TILE_SIZE: tl.constexpr, is_causal: tl.constexpr):
    query_tile_index = tl.program_id(0)
    batch_head = tl.program_id(1)
    b, h = batch_head // N_HEADS, batch_head % N_HEADS
    Q_block_ptr = tl.make_block_ptr(Q_ptr + b * stride_qb + h * stride_qh, shape=(N_QUERIES, D), strides=(stride_qq, stride_qd),
                                    offsets=(query_tile_index * Q_TILE_SIZE, 0), block_shape=(Q_TILE_SIZE, D), order=(1, 0))
    K_block_ptr = tl.make_block_ptr(K_ptr + b * stride_kb + h * stride_kh, shape=(N_KEYS, D), strides=(stride_kk, stride_kd),
                                    offsets=(0, 0), block_shape=(K_TILE_SIZE, D), order=(1, 0))
    V_block_ptr = tl.make_block_ptr(V_ptr + b * stride_vb + h * stride_vh, shape=(N_KEYS, D), strides=(stride_vk, stride_vd),
                                    offsets=(0, 0), block_shape=(K_TILE_SIZE, D), order=(1, 0))
    O_block_ptr = tl.make_block_ptr(O_ptr + b * stride_ob + h * stride_oh, shape=(N_QUERIES, D), strides=(stride_oq, stride_od),
                                    offsets=(query_tile_index * Q_TILE_SIZE, 0), block_shape=(Q_TILE_SIZE, D), order=(1, 0))
    L_block_ptr = tl.make_block_ptr(L_ptr + b * stride_lb + h * stride_lh, shape=(N_QUERIES,), strides=(stride_lq,),
                                    offsets=(query_tile_index * Q_TILE_SIZE,), block_shape=(Q_TILE_SIZE,), order=(0,))
    Q_i = tl.load(Q_block_ptr, boundary_check=(0, 1), padding_option="zero")
    O_i = tl.zeros((Q_TILE_SIZE, D), dtype=tl.float32)
    l_i = tl.zeros((Q_TILE_SIZE,), dtype=tl.float32)
    m_i = tl.full((Q_TILE_SIZE,), float("-inf"), dtype=tl.float32)
    q_idx = query_tile_index * Q_TILE_SIZE + tl.arange(0, Q_TILE_SIZE) + N_KEYS - N_QUERIES  # absolute positions
    n_keys = N_KEYS
    if is_causal:
        n_keys = tl.minimum(N_KEYS, (query_tile_index + 1) * Q_TILE_SIZE + N_KEYS - N_QUERIES)
    for j in range(tl.cdiv(n_keys, K_TILE_SIZE)):
        K_j = tl.load(K_block_ptr, boundary_check=(0, 1), padding_option="zero")
        V_j = tl.load(V_block_ptr, boundary_check=(0, 1), padding_option="zero")
        S_ij = tl.dot(Q_i, tl.trans(K_j)) * scale
        k_idx = j * K_TILE_SIZE + tl.arange(0, K_TILE_SIZE)
        valid = k_idx[None, :] < N_KEYS
        if is_causal:
            valid = valid & (k_idx[None, :] <= q_idx[:, None])
        S_ij = tl.where(valid, S_ij, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(S_ij, axis=1))
        P_ij = tl.exp(S_ij - m_new[:, None])
        correction = tl.exp(m_i - m_new)
        l_i = correction * l_i + tl.sum(P_ij, axis=1)
        O_i = O_i * correction[:, None] + tl.dot(P_ij.to(V_j.dtype), V_j)
        m_i = m_new
        K_block_ptr = K_block_ptr.advance((K_TILE_SIZE, 0))
        V_block_ptr = V_block_ptr.advance((K_TILE_SIZE, 0))
    tl.store(O_block_ptr, (O_i / l_i[:, None]).to(O_block_ptr.type.element_ty), boundary_check=(0, 1))
    tl.store(L_block_ptr, m_i + tl.log(l_i), boundary_check=(0,))


def _block_pointer_launcher(q, k, v, causal=False, block_q=64, block_k=64):
    B, H, N_QUERIES, D = q.shape
    O = torch.empty_like(q)
    L = torch.empty((B, H, N_QUERIES), device=q.device, dtype=torch.float32)
    _flash_block_pointers[(triton.cdiv(N_QUERIES, block_q), B * H)](q, k, v, O, L, *q.stride(), *k.stride(), *v.stride(), *O.stride(),
                                                                    *L.stride(), N_QUERIES, k.shape[2], H, D ** -0.5, D=D,
                                                                    Q_TILE_SIZE=block_q, K_TILE_SIZE=block_k, is_causal=causal)
    return O, L


# TritonFlashAttention ---------------------------------------------------------------------------
_FORWARD = _flash_with()["triton_flash_attention_forward"]


class _OutFromLse(torch.autograd.Function):
    """forward keeps the kernel's lse but recomputes out in PyTorch from it."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        _, lse = _FORWARD(q, k, v, causal)
        s = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=q.device).triu(k.shape[2] - q.shape[2] + 1), float("-inf"))
        out = (torch.exp(s - lse[..., None]) @ v.float()).to(q.dtype)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        grads = flash_attention_backward(q.float(), k.float(), v.float(), out.float(), lse, grad_out.float(), ctx.causal)
        return (*(g.to(t.dtype) for g, t in zip(grads, (q, k, v))), None)


WRONG = {
    "softmax_rows_kernel": {
        "a column stride ignored (x a transposed view)": (_softmax(contiguous=False), "x.stride(1)"),
        "BLOCK_N a constant 64": (_softmax(block=64), "not a constant"),
        "the maximum floored at 0": (_softmax(MAX_FROM_ZERO=True), "NaN or inf"),
        "the division by the sum in PyTorch after the kernel":
            ({"softmax_rows_kernel": _row_softmax, "triton_softmax": _softmax_finished_in_torch}, "no tl.store"),
    },
    "flash_forward_kernel": {
        "strides passed, the last one taken as 1": (_flash_with(contiguous=False, UNIT_D=True), "every dimension"),
        "v addressed with k's strides": (_flash_with(contiguous=False, v_like_k=True), "three layouts at once"),
        "causal loop's end counted in BLOCK_K": (_flash_with(END_BY_K=True), "counts queries"),
        "no masks when T_q is a multiple of block_q": (_flash_with(even_from_q=True), "outside the tensors"),
        "running maximum started at 0": (_flash_with(M_FROM_ZERO=True), "start the running maximum at -inf"),
        "v loaded with a mask and no other=": (_flash_with(V_OTHER=False), "without other="),
        "key tiles from the diagonal backwards": (_flash_with(BACKWARDS=True), "-inf - (-inf)"),
        "the width hard-coded as 16": (_flash_with(width=16), "constant width"),
        "out and lse finished in PyTorch from acc, m and l": (_flash_with(finish="torch"), "no tl.store"),
        "lse with torch.logsumexp after the kernel": (_flash_with(finish="lse in torch"), "no tl.store"),
        "exp through libdevice (the interpreter cannot run it)":
            ({"flash_forward_kernel": _flash_libdevice, "triton_flash_attention_forward": _launch_libdevice}, "interpreter"),
    },
    "TritonFlashAttention": {
        "forward recomputes out in PyTorch from the kernel's lse": (_OutFromLse, "no tl.store"),
    },
}

RIGHT = {
    "flash_forward_kernel": {
        "q scaled in bf16 and exp2, as Triton's 2023 tutorial": {"flash_forward_kernel": _flash_tutorial,
                                                                  "triton_flash_attention_forward": _tutorial_launcher},
        "block pointers, CS336's style": {"flash_forward_kernel": _flash_block_pointers,
                                          "triton_flash_attention_forward": _block_pointer_launcher},
        "out stored in float32, cast to the inputs' dtype by the launcher": _flash_with(finish="cast"),
        "strides of every dimension, no copies": _flash_with(contiguous=False),
    },
    "softmax_rows_kernel": {"float32 output cast to x's dtype by the launcher":
                            {"softmax_rows_kernel": _row_softmax, "triton_softmax": _softmax_cast_after}},
}
