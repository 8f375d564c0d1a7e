"""Solutions of notebook 15 that grading must reject (WRONG) or accept (RIGHT).

An exercise's cell defines a kernel and its launcher, so an entry binds both names (a dict); the
Function's entries are classes. Each mistake is one switch of a kernel (tl.constexpr arguments,
all defaults right) or of its launcher. Kernels run in Triton's interpreter, like grading.
"""
import math

import utils.flash_triton as ref  # first: it sets TRITON_INTERPRET=1 before triton is imported

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from utils.flash_attention import flash_attention_backward, flash_attention_forward  # noqa: E402

LN2, LOG2E = math.log(2), math.log2(math.e)


# softmax_rows_kernel and triton_softmax ----------------------------------------------------------
@triton.jit
def _softmax(X, OUT, N, stride_x, stride_out, BLOCK_N: tl.constexpr,
             MASK: tl.constexpr = True, OTHER_ZERO: tl.constexpr = False, MAX: tl.constexpr = True, EXP2: tl.constexpr = False):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    other = float("-inf")
    if OTHER_ZERO:
        other = 0.0
    if MASK:
        x = tl.load(X + row * stride_x + cols, mask=cols < N, other=other).to(tl.float32)
    else:
        x = tl.load(X + row * stride_x + cols).to(tl.float32)
    if MAX:
        x = x - tl.max(x, axis=0)
    if EXP2:
        e = tl.exp2(x * 1.4426950408889634)
    else:
        e = tl.exp(x)
    tl.store(OUT + row * stride_out + cols, e / tl.sum(e, axis=0), mask=cols < N)


@triton.jit
def _softmax_strided(X, OUT, N, stride_row, stride_col, BLOCK_N: tl.constexpr):
    """Any strides, the output written with the input's strides."""
    row = tl.program_id(0)
    at = row * stride_row + tl.arange(0, BLOCK_N) * stride_col
    x = tl.load(X + at, mask=tl.arange(0, BLOCK_N) < N, other=-float("inf"))
    x = x.to(tl.float32)
    z = tl.exp(x - tl.max(x, 0))
    tl.store(OUT + at, z / tl.sum(z, 0), mask=tl.arange(0, BLOCK_N) < N)


def _softmax_with(kernel=_softmax, stride="row", block="pow2", out_dtype=None, **switches):
    def triton_softmax(x):
        if x.stride(1) != 1:
            x = x.contiguous()  # as the model answer: a row's columns adjacent
        out = torch.empty(x.shape, dtype=out_dtype or x.dtype, device=x.device)
        N = x.shape[1]
        row = x.stride(0) if stride == "row" else N
        kernel[(x.shape[0],)](x, out, N, row, out.stride(0) if stride == "row" else N,
                              BLOCK_N=triton.next_power_of_2(N) if block == "pow2" else N, **switches)
        return out

    return {"softmax_rows_kernel": kernel, "triton_softmax": triton_softmax}


def _softmax_any_strides(x):
    out = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=x.device)
    _softmax_strided[lambda meta: (x.shape[0],)](x, out, x.shape[1], x.stride(0), x.stride(1), BLOCK_N=1 << (x.shape[1] - 1).bit_length())
    return out


def _softmax_in_torch(x):
    e = torch.exp(x.float() - x.float().amax(-1, keepdim=True))  # right values, but no kernel ran
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


def _plain_function(*args, **kwargs):
    return None


# flash_forward_kernel and triton_flash_attention_forward --------------------------------------------
@triton.jit
def _flash(Q, K, V, O, LSE, T_q, T_k, scale, CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr,
           KV_MASK: tl.constexpr = True, STORE_MASK: tl.constexpr = True, EDGE_SCORES: tl.constexpr = True,
           RESCALE_ACC: tl.constexpr = True, END: tl.constexpr = 0, OFFSET: tl.constexpr = True, SEE_SELF: tl.constexpr = True,
           ACC_IN_INPUT_DTYPE: tl.constexpr = False, EXP2: tl.constexpr = 0, LSE_MODE: tl.constexpr = 0, HEADS: tl.constexpr = True):
    tile, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    kv_bh = bh
    if not HEADS:
        kv_bh = bh * 0  # every head reads the keys and values of head 0
    rows = tile * BLOCK_Q + tl.arange(0, BLOCK_Q)
    dims = tl.arange(0, D)
    q = tl.load(Q + bh * T_q * D + rows[:, None] * D + dims[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_Q], tl.float32)
    if ACC_IN_INPUT_DTYPE:
        acc = tl.zeros([BLOCK_Q, D], Q.dtype.element_ty)
    else:
        acc = tl.zeros([BLOCK_Q, D], tl.float32)
    offset = T_k - T_q
    if not OFFSET:
        offset = 0
    end = T_k
    if CAUSAL:
        if END == 0:
            end = tl.minimum(T_k, (tile + 1) * BLOCK_Q + offset)
        elif END == -1:
            end = tl.minimum(T_k, tile * BLOCK_Q + offset)  # one tile short
        elif END == 1:
            end = tl.minimum(T_k, (tile + 2) * BLOCK_Q + offset)  # one tile long
    qk_scale = scale
    if EXP2 == 1:
        qk_scale = scale * 1.4426950408889634
    for start in range(0, end, BLOCK_K):
        keys = start + tl.arange(0, BLOCK_K)
        at = kv_bh * T_k * D + keys[:, None] * D + dims[None, :]
        if KV_MASK:
            k = tl.load(K + at, mask=keys[:, None] < T_k, other=0.0)
            v = tl.load(V + at, mask=keys[:, None] < T_k, other=0.0)
        else:
            k = tl.load(K + at)
            v = tl.load(V + at)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        if EDGE_SCORES:
            seen = keys[None, :] < T_k
        else:
            seen = keys[None, :] >= 0
        if CAUSAL:
            if SEE_SELF:
                seen = seen & (keys[None, :] <= rows[:, None] + offset)
            else:
                seen = seen & (keys[None, :] < rows[:, None] + offset)
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        if EXP2 > 0:
            alpha = tl.exp2(m - m_new)
            p = tl.exp2(s - m_new[:, None])
        else:
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        if RESCALE_ACC:
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        else:
            acc = acc + tl.dot(p.to(v.dtype), v)
        if ACC_IN_INPUT_DTYPE:
            acc = acc.to(Q.dtype.element_ty)
        m = m_new
    out = (acc / l[:, None]).to(O.dtype.element_ty)
    if STORE_MASK:
        tl.store(O + bh * T_q * D + rows[:, None] * D + dims[None, :], out, mask=rows[:, None] < T_q)
    else:
        tl.store(O + bh * T_q * D + rows[:, None] * D + dims[None, :], out)
    if EXP2 == 1 and LSE_MODE == 0:
        lse = (m + tl.log2(l)) * 0.6931471805599453  # base 2 back to natural
    elif LSE_MODE == 1:
        lse = m + tl.log2(l)  # base 2 left as it is
    else:
        lse = m + tl.log(l)  # natural log of l (with EXP2 == 1 and LSE_MODE == 2: a base-2 m plus ln l)
    tl.store(LSE + bh * T_q + rows, lse, mask=rows < T_q)


@triton.jit
def _flash_strided(Q, K, V, O, LSE, T_q, T_k, scale, sq, sk, sv, so, H, CAUSAL: tl.constexpr, D: tl.constexpr,
                   BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """Strides instead of .contiguous(), a 3-d grid (tile, head, batch item), two stages: the key
    tiles every query of the tile sees without a causal mask, then the diagonal ones with it."""
    tile, h, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    rows = tile * BLOCK_Q + tl.arange(0, BLOCK_Q)
    dims = tl.arange(0, D)
    q = tl.load(Q + b * sq[0] + h * sq[1] + rows[:, None] * sq[2] + dims[None, :] * sq[3], mask=rows[:, None] < T_q, other=0.0)
    m = tl.zeros([BLOCK_Q], tl.float32) - float("inf")
    l = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, D], tl.float32)
    offset = T_k - T_q
    end, split = T_k, T_k // BLOCK_K * BLOCK_K
    if CAUSAL:
        end = tl.minimum(T_k, (tile + 1) * BLOCK_Q + offset)
        split = tl.minimum(T_k, tile * BLOCK_Q + offset + 1) // BLOCK_K * BLOCK_K  # tiles seen whole by every row
    for stage in tl.static_range(2):
        lo, hi = 0, split
        if stage == 1:
            lo, hi = split, end
        for start in range(lo, hi, BLOCK_K):
            keys = start + tl.arange(0, BLOCK_K)
            k = tl.load(K + b * sk[0] + h * sk[1] + keys[:, None] * sk[2] + dims[None, :] * sk[3], mask=keys[:, None] < T_k, other=0.0)
            v = tl.load(V + b * sv[0] + h * sv[1] + keys[:, None] * sv[2] + dims[None, :] * sv[3], mask=keys[:, None] < T_k, other=0.0)
            s = tl.dot(q, tl.trans(k)) * scale
            if stage == 1:
                seen = keys[None, :] < T_k
                if CAUSAL:
                    seen = seen & (keys[None, :] <= rows[:, None] + offset)
                s = tl.where(seen, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, axis=1))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new[:, None])
            l = l * alpha + tl.sum(p, axis=1)
            acc = acc * alpha[:, None] + tl.dot(p, v.to(tl.float32))  # p kept in float32
            m = m_new
    tl.store(O + b * so[0] + h * so[1] + rows[:, None] * so[2] + dims[None, :] * so[3], acc / l[:, None], mask=rows[:, None] < T_q)
    tl.store(LSE + (b * H + h) * T_q + rows, m + tl.log(l), mask=rows < T_q)


@triton.jit
def _flash_descriptors(Q, K, V, O, LSE, T_q, T_k, scale, CAUSAL: tl.constexpr, D: tl.constexpr,
                       BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """Tensor descriptors (Triton's successor to block pointers): a tile is loaded by its
    coordinates, and the rows or keys past the end come back as zeros without a mask."""
    tile, bh = tl.program_id(0), tl.program_id(1)
    q_desc = tl.make_tensor_descriptor(Q + bh * T_q * D, shape=[T_q, D], strides=[D, 1], block_shape=[BLOCK_Q, D])
    k_desc = tl.make_tensor_descriptor(K + bh * T_k * D, shape=[T_k, D], strides=[D, 1], block_shape=[BLOCK_K, D])
    v_desc = tl.make_tensor_descriptor(V + bh * T_k * D, shape=[T_k, D], strides=[D, 1], block_shape=[BLOCK_K, D])
    o_desc = tl.make_tensor_descriptor(O + bh * T_q * D, shape=[T_q, D], strides=[D, 1], block_shape=[BLOCK_Q, D])
    rows = tile * BLOCK_Q + tl.arange(0, BLOCK_Q)
    q = q_desc.load([tile * BLOCK_Q, 0])
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, D], tl.float32)
    offset = T_k - T_q
    end = T_k
    if CAUSAL:
        end = tl.minimum(T_k, (tile + 1) * BLOCK_Q + offset)
    for start in range(0, end, BLOCK_K):
        keys = start + tl.arange(0, BLOCK_K)
        k = k_desc.load([start, 0])
        v = v_desc.load([start, 0])
        s = tl.dot(q, tl.trans(k)) * scale
        seen = keys[None, :] < T_k
        if CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None] + offset)
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m = m_new
    o_desc.store([tile * BLOCK_Q, 0], (acc / l[:, None]).to(O.dtype.element_ty))
    tl.store(LSE + bh * T_q + rows, m + tl.log(l), mask=rows < T_q)

def _flash_with_descriptors(q, k, v, causal=False, block_q=64, block_k=64):
    (B, H, T_q, D), T_k = q.shape, k.shape[2]
    q, k, v = (t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q); lse = torch.empty(B, H, T_q, device=q.device)
    # A descriptor made inside a kernel needs scratch memory on a GPU: without an allocator the
    # launch fails there ("no allocator was set"), although the interpreter runs it.
    triton.set_allocator(lambda size, alignment, stream: torch.empty(size, dtype=torch.int8, device=q.device))
    _flash_descriptors[(triton.cdiv(T_q, block_q), B * H)](q, k, v, out, lse, T_q, T_k, D ** -0.5, CAUSAL=causal, D=D, BLOCK_Q=block_q, BLOCK_K=block_k)
    return out, lse


def _flash_with(lse_dtype=None, fixed_blocks=None, **switches):
    def triton_flash_attention_forward(q, k, v, causal=False, block_q=64, block_k=64):
        (B, H, T_q, D), T_k = q.shape, k.shape[2]
        q, k, v = (t.contiguous() for t in (q, k, v))
        out = torch.empty_like(q)
        lse = torch.empty(B, H, T_q, dtype=lse_dtype or torch.float32, device=q.device)
        bq, bk = fixed_blocks or (block_q, block_k)
        _flash[(triton.cdiv(T_q, bq), B * H)](q, k, v, out, lse, T_q, T_k, 1 / math.sqrt(D), CAUSAL=causal, D=D,
                                              BLOCK_Q=bq, BLOCK_K=bk, **switches)
        return out, lse

    return {"flash_forward_kernel": _flash, "triton_flash_attention_forward": triton_flash_attention_forward}


def _flash_any_strides(q, k, v, causal=False, block_q=64, block_k=64):
    (B, H, T_q, D), T_k = q.shape, k.shape[2]
    out = torch.empty(B, H, T_q, D, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, H, T_q, device=q.device)
    _flash_strided[(triton.cdiv(T_q, block_q), H, B)](q, k, v, out, lse, T_q, T_k, D ** -0.5, q.stride(), k.stride(), v.stride(),
                                                       out.stride(), H, CAUSAL=causal, D=D, BLOCK_Q=block_q, BLOCK_K=block_k)
    return out, lse


def _flash_in_torch(q, k, v, causal=False, block_q=64, block_k=64):
    out, lse = flash_attention_forward(q.float(), k.float(), v.float(), causal, block_q, block_k)  # notebook 14's, no kernel
    return out.to(q.dtype), lse


def _flash_naive(q, k, v, causal=False, block_q=64, block_k=64):
    s = q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1])  # right values, but no kernel ran
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(k.shape[-2] - q.shape[-2] + 1), float("-inf"))
    return (torch.softmax(s, -1) @ v.float()).to(q.dtype), torch.logsumexp(s, -1)


def _flash_sdpa(q, k, v, causal=False, block_q=64, block_k=64):
    return F.scaled_dot_product_attention(q, k, v), torch.zeros(q.shape[:-1])


# TritonFlashAttention --------------------------------------------------------------------------
_FORWARD = _flash_with()["triton_flash_attention_forward"]


def _backward_in_float32(q, k, v, out, lse, grad_out, causal):
    grads = flash_attention_backward(q.float(), k.float(), v.float(), out.float(), lse, grad_out.float(), causal)
    return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v)))


def _function(forward=_FORWARD, backward=_backward_in_float32, save="lse", returns="out", backward_causal=True, n_grads=4, keep="ctx"):
    class TritonFlashAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, causal=False):
            out, lse = forward(q, k, v, causal)
            if save == "probabilities":
                p = torch.softmax(q.float() @ k.float().transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
                ctx.save_for_backward(q, k, v, out, lse, p)
            elif keep == "lse on ctx":
                ctx.save_for_backward(q, k, v, out)
                ctx.lse = lse
            else:
                ctx.save_for_backward(q, k, v, out, lse)
            ctx.causal = causal
            if keep == "class":
                TritonFlashAttention.kept = (q, k, v, out, lse, causal)
            return (out, lse) if returns == "pair" else out

        @staticmethod
        def backward(ctx, grad_out, *rest):
            if keep == "class":
                *saved, causal = TritonFlashAttention.kept
            elif keep == "lse on ctx":
                saved, causal = (*ctx.saved_tensors, ctx.lse), ctx.causal
            else:
                saved, causal = ctx.saved_tensors[:5], ctx.causal
            return (*backward(*saved, grad_out, causal and backward_causal), None)[:n_grads]

    return TritonFlashAttention


def _backward_bf16_as_is(q, k, v, out, lse, grad_out, causal):
    return flash_attention_backward(q, k, v, out, lse, grad_out, causal)  # bf16 tensors with a float32 lse


def _backward_full_matrix(q, k, v, out, lse, grad_out, causal):
    leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    with torch.enable_grad():
        s = leaves[0] @ leaves[1].transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(k.shape[-2] - q.shape[-2] + 1), float("-inf"))
        grads = torch.autograd.grad(torch.softmax(s, -1) @ leaves[2], leaves, grad_out.float())
    return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v)))


def _backward_tiles_of_32(q, k, v, out, lse, grad_out, causal):
    grads = flash_attention_backward(q.float(), k.float(), v.float(), out.float(), lse, grad_out.float(), causal, 32, 32)
    return tuple(g.to(t.dtype) for g, t in zip(grads, (q, k, v)))


class TritonFlashAttentionNoDefault(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal):
        out, lse = _FORWARD(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return (*_backward_in_float32(*ctx.saved_tensors, grad_out, ctx.causal), None)


def _utils_forward(q, k, v, causal=False):
    return ref.triton_flash_attention_forward(q, k, v, causal)


def _torch_forward(q, k, v, causal=False):
    return _flash_naive(q, k, v, causal)


WRONG = {
    "softmax_rows_kernel": {
        "no mask at the edge": (_softmax_with(MASK=False), "outside the tensors"),
        "masked columns loaded as 0": (_softmax_with(OTHER_ZERO=True), "loaded as 0"),
        "N instead of the row stride": (_softmax_with(stride="N"), "x.stride(0)"),
        "no maximum subtracted": (_softmax_with(MAX=False), "subtract each row's maximum"),
        "BLOCK_N = N, not a power of two": (_softmax_with(block="N"), "powers of two"),
        "float32 output for bf16 input": (_softmax_with(out_dtype=torch.float32), "input's dtype"),
        "torch.softmax in the launcher": ({"softmax_rows_kernel": _softmax, "triton_softmax": lambda x: torch.softmax(x, -1)}, "yourself"),
        "the course's launcher": ({"softmax_rows_kernel": _softmax, "triton_softmax": ref.triton_softmax}, "yourself"),
        "never launches the kernel": ({"softmax_rows_kernel": _softmax, "triton_softmax": _softmax_in_torch}, "never launched"),
        "a plain function": ({"softmax_rows_kernel": _plain_function, "triton_softmax": _softmax_in_torch}, "must be a Triton kernel"),
    },
    "flash_forward_kernel": {
        "no mask on the key and value loads": (_flash_with(KV_MASK=False), "outside the tensors"),
        "no mask on the store": (_flash_with(STORE_MASK=False), "outside the tensors"),
        "keys past T_k not set to -inf": (_flash_with(EDGE_SCORES=False), "keys past T_k"),
        "accumulator not rescaled": (_flash_with(RESCALE_ACC=False), "accumulator was not rescaled"),
        "causal loop one tile short": (_flash_with(END=-1), "one tile early"),
        "causal loop one tile long": (_flash_with(END=1), "not one tile more"),
        "no causal tile skipped": (_flash_with(END=2), "skipping every tile above the diagonal"),
        "causal without T_k - T_q": (_flash_with(OFFSET=False), "top-left aligned"),
        "mask blocks the query's own key": (_flash_with(SEE_SELF=False), "its own position"),
        "accumulator in bf16": (_flash_with(ACC_IN_INPUT_DTYPE=True), "must stay float32"),
        "exp2 without log2(e)": (_flash_with(EXP2=2), "log2(e)"),
        "lse left in base 2": (_flash_with(EXP2=1, LSE_MODE=1), "natural log-sum-exp"),
        "lse: base-2 maximum plus ln(l)": (_flash_with(EXP2=1, LSE_MODE=2), "natural log-sum-exp"),
        "lse in the inputs' dtype": (_flash_with(lse_dtype=torch.bfloat16), "lse must be float32"),
        "every head reads head 0's keys": (_flash_with(HEADS=False), "batch item 0, head 0"),
        "ignores block_q and block_k": (_flash_with(fixed_blocks=(64, 64)), "one program per tile"),
        "F.scaled_dot_product_attention": ({"flash_forward_kernel": _flash, "triton_flash_attention_forward": _flash_sdpa}, "yourself"),
        "the course's launcher": ({"flash_forward_kernel": _flash, "triton_flash_attention_forward": ref.triton_flash_attention_forward},
                                  "yourself"),
        "notebook 14's tiles in PyTorch": ({"flash_forward_kernel": _flash, "triton_flash_attention_forward": _flash_in_torch}, "yourself"),
        "never launches the kernel": ({"flash_forward_kernel": _flash, "triton_flash_attention_forward": _flash_naive}, "never launched"),
    },
    "TritonFlashAttention": {
        "saves the probabilities": (_function(save="probabilities"), "(T_q, T_k) tensor"),
        "forward returns (out, lse)": (_function(returns="pair"), "forward returns out only"),
        "backward ignores causal": (_function(backward_causal=False), "causal=True"),
        "backward returns three gradients": (_function(n_grads=3), "one gradient per input of forward"),
        "bf16 tensors straight to notebook 14's backward": (_function(backward=_backward_bf16_as_is), "float32 copies"),
        "backward through autograd on the full matrix": (_function(backward=_backward_full_matrix), "TritonFlashAttention.backward created"),
        "forward calls the course's launcher": (_function(forward=_utils_forward), "yourself"),
        "forward with notebook 14's code": (_function(forward=lambda q, k, v, c: _flash_in_torch(q, k, v, c)), "yourself"),
        "forward in PyTorch, no kernel": (_function(forward=_torch_forward), "launched no Triton kernel"),
        "keeps causal and tensors on the class": (_function(keep="class"), "a later call of forward"),
        "no default for causal": (TritonFlashAttentionNoDefault, "default causal=False"),
    },
}

RIGHT = {
    "softmax_rows_kernel": {"exp2 with log2(e)": _softmax_with(EXP2=True),
                            "any strides, a grid function, the output with the input's strides":
                                {"softmax_rows_kernel": _softmax_strided, "triton_softmax": _softmax_any_strides}},
    "flash_forward_kernel": {"exp2 with log2(e), lse back to natural": _flash_with(EXP2=1),
                             "strides, a 3-d grid, two stages, p in float32":
                                 {"flash_forward_kernel": _flash_strided, "triton_flash_attention_forward": _flash_any_strides},
                             "tensor descriptors instead of offsets":
                                 {"flash_forward_kernel": _flash_descriptors, "triton_flash_attention_forward": _flash_with_descriptors}},
    "TritonFlashAttention": {"the model answer's shape": _function(),
                             "lse kept as a ctx attribute": _function(keep="lse on ctx"),
                             "backward in tiles of 32": _function(backward=_backward_tiles_of_32)},
}


from autograder.tests.zoo import nb15_kinds, nb15_spaces  # noqa: E402  (they use this module's kernels)

for _more in (nb15_kinds, nb15_spaces):
    for _exercise, _entries in _more.WRONG.items():
        WRONG[_exercise].update(_entries)
    for _exercise, _entries in _more.RIGHT.items():
        RIGHT.setdefault(_exercise, {}).update(_entries)
