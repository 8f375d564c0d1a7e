"""Notebook 15's GPU check (gpu_check15.py): the inputs it runs (cases, layouts, the float64
answer) and how it compares (grading's tolerances, copied, and a tally of each entry's errors).
torch only: a GPU machine may lack what autograder.checks imports."""
import math
from typing import NamedTuple

import torch

F32, BF16 = torch.float32, torch.bfloat16
NAMES = {F32: "float32", BF16: "bfloat16"}

# Grading's own tolerances (autograder/checks/nb15), copied: this script must not import the checks.
BF16_TOL = 3e-2  # triton_forward.BF16_TOL: bf16 out of order 1-3
ACC_TOL = 3e-2  # triton_forward.ACC_TOL: 32 key tiles in bf16, values near 3 (test_gpu_check15 keeps them equal)
SOFTMAX_TOL = {F32: dict(atol=1e-6, rtol=1e-5), BF16: dict(atol=4e-3, rtol=0)}  # check_softmax_rows_kernel
BF16_GRAD_TOL = dict(atol=6e-2, rtol=2e-2)  # check_TritonFlashAttention

class Case(NamedTuple):
    label: str
    shape: tuple  # (B, H, T_q, T_k, d)
    causal: bool
    blocks: tuple  # (block_q, block_k), or None for the launcher's defaults
    layout: str  # contiguous, split heads or mixed
    dtypes: tuple
    values: str = "randn"


# Kept small: every kernel is compiled for each (dtype, constexprs) it meets, and the interpreter
# of the smoke test runs every program in Python.
FORWARD_CASES = (
    Case("split heads, T_k not a multiple", (2, 2, 45, 77, 16), False, (16, 32), "split heads", (F32, BF16), "growing scores"),
    Case("causal, mixed layouts, default blocks", (1, 2, 100, 300, 64), True, None, "mixed", (F32, BF16)),
    Case("causal, block_q > block_k", (1, 1, 64, 90, 32), True, (32, 16), "contiguous", (F32,)),
    Case("scores near -200", (1, 1, 16, 40, 16), False, (16, 16), "contiguous", (F32,), "far below 0"),
    Case("32 key tiles", (1, 1, 16, 512, 16), False, (16, 16), "contiguous", (BF16,), "values near 3"),
)
FUNCTION_CASES = (
    Case("split heads", (1, 2, 20, 37, 16), False, None, "split heads", (F32, BF16)),
    Case("causal, mixed layouts", (1, 2, 70, 130, 32), True, None, "mixed", (F32, BF16)),
)
SMALL = {(1, 2, 100, 300, 64): (1, 2, 40, 100, 32)}  # --device cpu: the interpreter's time goes with T_q x T_k x d



# Inputs and the float64 answer --------------------------------------------------------------------
def randn(*shape, seed):
    """Seeded on the CPU: the same values on either device."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def lay_out(values, dtype, device, layout):
    """`values` (B, H, T, d) in `dtype` on `device`, as a contiguous tensor, as split heads give it (a
    view of (B, T, H, d)), or transposed (a view of (B, H, d, T): the last dimension not contiguous)."""
    if layout == "contiguous":
        return values.to(dtype).to(device)
    dims = (1, 2) if layout == "split heads" else (-2, -1)
    return values.transpose(*dims).contiguous().to(dtype).to(device).transpose(*dims)


def qkv(case, dtype, device, seed=160):
    """(q, k, v) laid out as the case says, and the same values in float64 on `device`."""
    B, H, T_q, T_k, d = case.shape
    q, k, v = (randn(B, H, T, d, seed=seed + i) for i, T in enumerate((T_q, T_k, T_k)))
    if case.values == "growing scores":  # the running maximum changes from tile to tile
        q = q * torch.linspace(0.5, 4.0, T_q)[:, None]
    elif case.values == "far below 0":  # every score near -200: exp(s - 0) underflows to 0 below about -104
        q[..., 0], k[..., 0] = -40.0, 200.0 * d ** 0.5 / 40.0
    elif case.values == "values near 3":  # a bf16 accumulator drifts over the 32 tiles
        v = v + 3.0
    layouts = ("transposed", "contiguous", "split heads") if case.layout == "mixed" else (case.layout,) * 3
    laid = [lay_out(t, dtype, device, how) for t, how in zip((q, k, v), layouts)]
    return laid, [t.to(dtype).to(device).double() for t in (q, k, v)]


def attention64(q, k, v, causal):
    """(out, lse) of softmax(q kᵀ / sqrt(d)) v, causal bottom-right aligned: query i sees key j iff j <= i + T_k - T_q."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        T_q, T_k = s.shape[-2:]
        s = s.masked_fill(~torch.ones(T_q, T_k, dtype=torch.bool, device=s.device).tril(T_k - T_q), float("-inf"))
    return torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)


def softmax_inputs(device):
    """(label, x, x in float64): a view of a wider tensor with rows near +500 and -1000 and -inf
    entries, x = y.T (columns not adjacent), and rows of 300 columns, wider than any constant block."""
    wide = randn(6, 50, seed=150) * 3
    wide[1, :37] += 500.0  # exp overflows without the row's maximum
    wide[2, :37] -= 1000.0  # and underflows to 0 / 0
    wide[3, :37:4] = float("-inf")
    long = randn(3, 300, seed=153) * 4
    for dtype in (F32, BF16):
        x = wide.to(dtype).to(device)[:, :37]
        yield f"view {NAMES[dtype]}", x, x.double()
        x = long.to(dtype).to(device)
        yield f"300 columns {NAMES[dtype]}", x, x.double()
    x = (randn(37, 5, seed=152) * 2).to(device).T
    yield "x = y.T float32", x, x.double()


# Comparisons ------------------------------------------------------------------------------------
class Tally:
    """The largest |error| of each (dtype, quantity), and the runs that were outside tolerance."""

    def __init__(self):
        self.errors, self.failures = {}, []

    def compare(self, label, dtype, quantity, got, want, atol, rtol):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape:
            self.failures.append(f"{label}: {quantity} is {type(got).__name__} {tuple(getattr(got, 'shape', ()))}, "
                                 f"expected shape {tuple(want.shape)}")
            return
        diff = (got.detach().double() - want).abs().nan_to_num(nan=math.inf, posinf=math.inf)  # NaN is as wrong as can be
        diff = diff.masked_fill((got.detach().double() == want) & want.isinf(), 0.0)  # -inf where -inf is right
        worst = diff.max().item()
        key = (NAMES[dtype], quantity)
        self.errors[key] = max(self.errors.get(key, 0.0), worst)
        if not bool((diff <= atol + rtol * want.abs()).all()):
            self.failures.append(f"{label}: {quantity} |error| {worst:.3g}")

    def dtype_is(self, label, what, got, dtype):
        if getattr(got, "dtype", None) != dtype:
            self.failures.append(f"{label}: {what} is {getattr(got, 'dtype', type(got).__name__)}, expected {dtype}")

    def summary(self):
        by_dtype = {}
        for (dtype, quantity), worst in self.errors.items():
            by_dtype.setdefault(dtype, []).append(f"{quantity} {worst:.1e}")
        return "; ".join(f"{dtype} {' '.join(parts)}" for dtype, parts in by_dtype.items()) or "no errors measured"


def f32_tol(ref, gradients=False):
    return ref.tolerance(gradients)  # the kernels' own: exact in the interpreter, TF32 products on a GPU


def bf16_lse_tol(q, k):
    """triton_forward.bf16_lse_tolerance: two bf16 roundings of each query's largest scaled score."""
    return 2.0 ** -7 * (q.abs() @ k.abs().transpose(-2, -1) / math.sqrt(q.shape[-1])).amax(-1) + 1e-3
