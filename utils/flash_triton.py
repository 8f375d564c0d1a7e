"""FlashAttention as a GPU kernel in Triton (notebook 15): a row softmax, the FlashAttention-2
forward with its log-sum-exp, and an autograd Function whose backward is notebook 14's.

A Triton kernel is a Python function decorated with `@triton.jit`, launched once per program of a
grid (`kernel[grid](...)`); each program loads blocks of memory, computes on them and stores
blocks back. The forward here is FlashAttention-2's loop (Dao, 2023): one program per tile of
`BLOCK_Q` queries and per (batch item, head), a loop over tiles of `BLOCK_K` keys, with the running
maximum, running sum and output accumulator of notebook 14 kept in float32 whatever the inputs'
dtype. Where no CUDA GPU is present the kernels run in Triton's interpreter (TRITON_INTERPRET=1,
set below before triton is imported: triton reads it when a kernel is decorated), which executes
each program in numpy, one after another: exact, and slow.

    .venv/bin/python -m pytest -q utils/tests/test_flash_triton.py
    .venv/bin/python -m utils.bench_triton        # on a GPU: time and TFLOP/s against SDPA
"""
import math
import os
import sys

import numpy as np
import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules:  # its own @triton.jit helpers (tl.max, tl.sum...) were built for a GPU
        raise ImportError("triton was imported before TRITON_INTERPRET=1 was set, and this machine has no GPU: "
                          "restart the kernel and set os.environ['TRITON_INTERPRET'] = '1' before `import triton`")
    os.environ["TRITON_INTERPRET"] = "1"

try:
    import triton
    import triton.language as tl
except ImportError as e:  # an extra of the course: one command installs it
    raise ImportError("notebook 15 needs Triton: run `make triton` (pip install -r requirements-triton.txt)") from e

from utils.flash_attention import flash_attention_backward

DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def interpreted() -> bool:
    """True when this process's kernels run in Triton's interpreter, on the CPU."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def kernel_device() -> str:
    """Where the tensors given to this process's kernels must live."""
    return "cpu" if interpreted() else "cuda"


def tolerance(gradients: bool = False) -> dict:
    """atol and rtol for float32 results of these kernels against float64: exact in the interpreter;
    on a GPU tl.dot multiplies float32 blocks in TF32 (10 bits of mantissa) unless told otherwise,
    and a gradient carries the forward's error through D = rowsum(dO * O)."""
    if interpreted():
        return dict(atol=1e-4, rtol=1e-4) if gradients else dict(atol=1e-5, rtol=1e-4)
    return dict(atol=1e-2, rtol=1e-2) if gradients else dict(atol=3e-3, rtol=3e-3)


# Triton's interpreter, repaired in this process -------------------------------------------------
# It keeps bfloat16 blocks as their 16-bit patterns (numpy has no bfloat16) and computes on those
# patterns as if they were integers: `tl.dot` multiplies them (values near 1e10), `x + x` gives NaN,
# `-x` and `x * 0.5` are wrong, and Triton 3.7 has no bfloat16 constant at all (`x * 0.5` raises);
# Triton's debugging guide says the interpreter does not support bfloat16 arithmetic
# (triton-lang/triton issue 11584). A GPU computes a bfloat16 operation in float32 and rounds the
# result to bfloat16; so do the repairs below: every elementwise operation and tl.dot on bfloat16
# operands runs in float32, and an elementwise result is rounded back to bfloat16 (to nearest
# even), which is what the GPU stores in a bfloat16 register. A conversion of float32 to bfloat16
# (`.to(tl.bfloat16)`, a store into a bfloat16 tensor) rounds to nearest even too: the interpreter
# truncates, a GPU rounds (0.99999 -> 0.99609375 here, 1.0 there).
def _to_f32(bits):
    return (np.asarray(bits).astype(np.uint32) << 16).view(np.float32)


def _to_bf16(values):
    """float32 -> bfloat16 bit patterns, rounded to nearest even, NaN kept NaN."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounded = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(values), np.uint16(0x7FC0), rounded)


def _repair_interpreter():
    from triton.runtime import interpreter
    builder, Handle = interpreter.InterpreterBuilder, interpreter.TensorHandle
    if getattr(builder, "course_repaired", False):
        return
    is_bf16 = lambda h: h.dtype.scalar == tl.bfloat16
    f32 = lambda h: Handle(_to_f32(h.data), tl.float32) if is_bf16(h) else h

    def in_float32(original, *operands_at):
        """original(self, *args) with its bfloat16 operands in float32 and a float result rounded back."""
        def method(self, *args):
            if not any(is_bf16(args[i]) for i in operands_at):
                return original(self, *args)
            out = original(self, *[f32(a) if i in operands_at else a for i, a in enumerate(args)])
            if out.data.dtype != np.float32:  # a comparison: booleans
                return out
            return Handle(_to_bf16(out.data), tl.bfloat16)
        return method

    def create_dot(self, a, b, *rest, **kwargs):  # bf16 products are exact in float32: the tensor cores' answer
        return dot(self, f32(a), f32(b), *rest, **kwargs)

    def cast_impl(self, src, dst_type):  # float32 -> bfloat16 to nearest even (the interpreter truncates), as a GPU's
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:  # .to(tl.bfloat16) and a store into bf16 do
            return Handle(_to_bf16(np.asarray(src.data, dtype=np.float32)), tl.bfloat16)
        return cast(self, src, dst_type)

    binary, unary, ternary, fma, dot = builder.binary_op, builder.unary_op, builder.ternary_op, builder.create_fma, builder.create_dot
    cast = builder.cast_impl
    builder.cast_impl = cast_impl
    builder.binary_op = in_float32(binary, 0, 1)  # + - * / max min and comparisons
    builder.unary_op = in_float32(unary, 0)  # negation, exp, log, sqrt...
    builder.ternary_op = lambda self, a, b, c, op: ternary(self, a, b, c, op) if op is np.where else in_float32(ternary, 0, 1, 2)(self, a, b, c, op)
    builder.create_fma = in_float32(fma, 0, 1, 2)
    builder.create_dot = create_dot
    if not hasattr(builder, "get_bf16"):  # a Python float in a bfloat16 expression (x * 0.5)
        builder.get_bf16 = lambda self, value: Handle(_to_bf16(np.array([value], dtype=np.float32)), tl.bfloat16)

    # Speed: a launch makes triton.language run in the interpreter, then every call of one of
    # Triton's own @jit helpers (tl.max, tl.sum, tl.cdiv...) inside it does so again, listing each
    # module's members each time (a third of a small kernel's time). Skip that when done already.
    call = interpreter.InterpretedFunction.__call__

    def helper_call(self, *args, **kwargs):
        langs = [v for v in self.fn.__globals__.values() if v is tl or v is tl.core]
        if not langs or any(tl.core.is_builtin(lang.load) for lang in langs):
            return call(self, *args, **kwargs)
        try:
            return self.rewrite()(*args, **kwargs)
        except Exception as e:
            raise interpreter.InterpreterError(repr(e)) from e

    interpreter.InterpretedFunction.__call__ = helper_call
    builder.course_repaired = True


if interpreted():
    _repair_interpreter()


# Row softmax: the warm-up ---------------------------------------------------------------------
@triton.jit
def softmax_rows_kernel(X, OUT, N, stride_x, stride_out, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)  # one program per row
    cols = tl.arange(0, BLOCK_N)  # BLOCK_N >= N, a power of two: the columns past N are masked
    x = tl.load(X + row * stride_x + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))  # masked columns give exp(-inf) = 0
    tl.store(OUT + row * stride_out + cols, (e / tl.sum(e, axis=0)).to(OUT.dtype.element_ty), mask=cols < N)


def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax of each row of x (M, N), one program per row, float32 arithmetic, x's dtype out."""
    if x.dim() != 2 or x.dtype not in DTYPES:
        raise ValueError(f"triton_softmax takes a 2-d tensor of {DTYPES}, got shape {tuple(x.shape)} {x.dtype}")
    if x.stride(1) != 1:
        x = x.contiguous()  # the kernel steps through a row one element at a time
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    softmax_rows_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0),
                                       BLOCK_N=triton.next_power_of_2(x.shape[1]))
    return out


# FlashAttention-2 forward ---------------------------------------------------------------------
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T_q, T_k, scale,
                         CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """Q, O (B*H, T_q, D), K, V (B*H, T_k, D), contiguous; LSE (B*H, T_q) float32."""
    tile, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)  # int64: B*H*T*D may pass 2**31
    rows = tile * BLOCK_Q + tl.arange(0, BLOCK_Q)  # this program's queries
    dims = tl.arange(0, D)
    q = tl.load(Q + bh * T_q * D + rows[:, None] * D + dims[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)  # running maximum
    l = tl.zeros([BLOCK_Q], tl.float32)  # running sum of exp(s - m)
    acc = tl.zeros([BLOCK_Q, D], tl.float32)  # unnormalised output
    offset = T_k - T_q  # bottom-right causal alignment: query i sees key j iff j <= i + offset
    end = T_k
    if CAUSAL:  # key tiles after the tile's last query are skipped
        end = tl.minimum(T_k, (tile + 1) * BLOCK_Q + offset)
    for start in range(0, end, BLOCK_K):
        keys = start + tl.arange(0, BLOCK_K)
        at = bh * T_k * D + keys[:, None] * D + dims[None, :]
        k = tl.load(K + at, mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + at, mask=keys[:, None] < T_k, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale  # (BLOCK_Q, BLOCK_K) scores, float32
        seen = keys[None, :] < T_k  # keys past the end get -inf, not the 0 their masked load gave
        if CAUSAL:
            seen = seen & (keys[None, :] <= rows[:, None] + offset)
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=1))  # key 0 is in the first tile: m_new is finite
        alpha = tl.exp(m - m_new)  # rescales what was summed under the old maximum
        p = tl.exp(s - m_new[:, None])
        l = l * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)  # the products in v's dtype, summed in float32
        m = m_new
    tl.store(O + bh * T_q * D + rows[:, None] * D + dims[None, :], (acc / l[:, None]).to(O.dtype.element_ty),
             mask=rows[:, None] < T_q)
    tl.store(LSE + bh * T_q + rows, m + tl.log(l), mask=rows < T_q)


def check_inputs(q, k, v, causal):
    """Raise ValueError for what the kernels do not take, naming the shapes and dtypes."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k and v must be (B, H, T, d), got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    (B, H, T_q, d), T_k = q.shape, k.shape[2]
    if k.shape != (B, H, T_k, d) or v.shape != k.shape:
        raise ValueError(f"k and v must be (B, H, T_k, d) with q's B, H and d: {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if d < 16 or d & (d - 1):
        raise ValueError(f"the head size d must be a power of two from 16 (tl.arange and tl.dot), got {d}")
    if q.dtype not in DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise ValueError(f"q, k and v must share one dtype of {DTYPES}, got {q.dtype}, {k.dtype}, {v.dtype}")
    if causal and T_q > T_k:
        raise ValueError(f"causal attention needs T_q <= T_k (bottom-right alignment), got T_q={T_q}, T_k={T_k}")
    if q.device.type != kernel_device():
        raise ValueError(f"the kernels of this process run on {kernel_device()}, the inputs are on {q.device}")


def flash_forward(kernel, q, k, v, causal=False, block_q=64, block_k=64, **options):
    """(out, lse) of `kernel` (flash_forward_kernel's arguments) on q, k, v (B, H, T, d); with
    block_q=None the kernel is autotuned and its configs choose the blocks and warps. Otherwise
    Triton's defaults, 4 warps and 3 pipeline stages: on an H200 the fastest of the autotuned
    configs for d = 128 with 64 x 64 tiles, and within 2x of SDPA for d = 64 (utils.bench_triton)."""
    check_inputs(q, k, v, causal)
    (B, H, T_q, d), T_k = q.shape, k.shape[2]
    q, k, v = (t.contiguous() for t in (q, k, v))  # the kernel's offsets assume (B, H, T, d) row-major
    out = torch.empty_like(q)
    lse = torch.empty(B, H, T_q, dtype=torch.float32, device=q.device)
    if block_q is not None:
        options = {"BLOCK_Q": block_q, "BLOCK_K": block_k, **options}
    grid = lambda meta: (triton.cdiv(T_q, meta["BLOCK_Q"]), B * H)  # one program per query tile and head
    kernel[grid](q, k, v, out, lse, T_q, T_k, 1.0 / math.sqrt(d), CAUSAL=causal, D=d, **options)
    return out, lse


def triton_flash_attention_forward(q, k, v, causal: bool = False, block_q: int = 64, block_k: int = 64):
    """(out (B, H, T_q, d) in q's dtype, lse (B, H, T_q) float32) of softmax(q kᵀ / sqrt(d)) v."""
    return flash_forward(flash_forward_kernel, q, k, v, causal, block_q, block_k)


class TritonFlashAttention(torch.autograd.Function):
    """out = TritonFlashAttention.apply(q, k, v, causal): the Triton forward, notebook 14's backward
    (each tile's probabilities recomputed from lse), in float32 for bf16 and float16 inputs."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        out, lse = triton_flash_attention_forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, lse = ctx.saved_tensors
        grads = flash_attention_backward(q.float(), k.float(), v.float(), out.float(), lse, grad_out.float(), ctx.causal)
        return (*(g.to(t.dtype) for g, t in zip(grads, (q, k, v))), None)
