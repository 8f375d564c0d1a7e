"""Notebook 15's input families: each launcher against PyTorch's float64 answer, in the input's
dtype, on the device its kernels run on (Triton's interpreter on a CPU). float32 is graded at the
kernels' own tolerance: exact in the interpreter, TF32 products on a GPU (utils.flash_triton)."""
import torch

import utils.flash_triton as ref
from autograder.checks import randn
from autograder.checks.flash_variants import heads_layout, scaled_scores, sdpa
from autograder.checks.harness import Family, Probe
from autograder.checks.triton_probes import far_below_zero, mixed_layouts, softmax_transposed
from autograder.checks.triton_runs import on_device


def softmax(x):
    return torch.softmax(x.double(), -1).to(x.dtype)


def attention(q, k, v, causal=False, block_q=64, block_k=64):
    """(out, lse) of the forward's contract: out in q's dtype, lse float32."""
    q64, k64, v64 = q.double(), k.double(), v.double()
    return sdpa(q64, k64, v64, causal).to(q.dtype), torch.logsumexp(scaled_scores(q64, k64, causal), -1).float()


def attention_out(q, k, v, causal=False):
    return sdpa(q.double(), k.double(), v.double(), causal).to(q.dtype)


def _tolerance(gradients=False):
    t = ref.tolerance(gradients)
    return {torch.float32: (t["atol"], t["rtol"])}


def _big_scores():
    """Scores in the hundreds: exact in the interpreter; on a GPU TF32 moves them by ~0.1 (as nb15's own check allows)."""
    return {torch.float32: (1e-4, 1e-4)} if ref.interpreted() else {torch.float32: (0.1, 0.0)}


def _bf16_lse():
    """lse (float32) of bf16 inputs: within two bf16 roundings of the scores (a kernel may scale q in
    bf16 first, as Triton's 2023 tutorial did); out, in bf16, at bf16's own tolerance."""
    return {torch.float32: (2.0 ** -6, 2.0 ** -7)}


def _rows(shape, seed, scale=1.0, dtype=torch.float32):
    return lambda: (tuple(on_device((randn(*shape, seed=seed) * scale).to(dtype))), {})


def _transposed_rows():
    return (on_device(softmax_transposed(4, 29, 185))[0],), {}


def _heads(B, H, T_q, T_k, d, seed, scale=1.0, dtype=torch.float32, **kwargs):
    """q, k, v as split heads give them (non-contiguous), batch items and heads that differ."""
    def build():
        q, k, v = heads_layout(B, H, T_q, d, seed) * scale, heads_layout(B, H, T_k, d, seed + 1), heads_layout(B, H, T_k, d, seed + 2)
        return tuple(t.to(dtype) for t in on_device(q, k, v)), dict(kwargs)
    return build


def _built(make, dtype=torch.float32, **kwargs):
    """q, k, v from `make` (triton_probes: three layouts, scores far below 0), on the kernels' device."""
    return lambda: (tuple(t.to(dtype) for t in on_device(*make())), dict(kwargs))


def _apply(B, H, T_q, T_k, d, seed, causal=False, make=None):
    """Function.apply takes its arguments by position only: (q, k, v, causal)."""
    def build():
        (q, k, v), _ = _built(make)() if make else _heads(B, H, T_q, T_k, d, seed)()
        return (q, k, v, causal), {}
    return build


FAMILIES = {
    "softmax_rows_kernel": Family([
        Probe("batch", "5 rows of 23 that differ", _rows((5, 23), 180), "5 行互不相同的 23 列"),
        Probe("extreme", "rows of logits in the hundreds", _rows((3, 19), 181, scale=300.0), "数百量级 logits 的行"),
        Probe("edges", "one row of one column", _rows((1, 1), 182), "一行一列"),
        Probe("dtype", "bfloat16 rows", _rows((4, 19), 183, dtype=torch.bfloat16), "bfloat16 的行"),
        Probe("arguments", "x = y.T: columns 4 apart in memory", _transposed_rows, "x = y.T：列在内存中相隔 4"),
        Probe("edges", "rows of 200 columns", _rows((2, 200), 184, scale=3.0), "200 列的行"),
    ], compares=("values", "shape", "dtype", "device", "inputs"), tolerance=_tolerance),
    "flash_forward_kernel": Family([
        Probe("batch", "2 batch items x 2 heads, T_q=11, T_k=27", _heads(2, 2, 11, 27, 16, 184, block_q=16, block_k=16),
              "2 个样本 x 2 个头，T_q=11，T_k=27"),
        Probe("extreme", "causal, scores in the hundreds", _heads(1, 2, 13, 29, 16, 185, scale=30.0, causal=True, block_q=16, block_k=16),
              "因果，数百量级的分数", tolerance=_big_scores),
        Probe("edges", "one query (decoding), causal", _heads(1, 2, 1, 23, 16, 186, causal=True, block_q=16, block_k=16),
              "一个查询（解码），因果"),
        Probe("edges", "T_q = T_k = 5 under the default blocks (64, 64)", _heads(1, 1, 5, 5, 16, 187, causal=True),
              "默认分块 (64, 64) 下 T_q = T_k = 5"),
        Probe("dtype", "bfloat16, causal", _heads(1, 2, 12, 21, 16, 188, dtype=torch.bfloat16, causal=True, block_q=16, block_k=16),
              "bfloat16，因果", tolerance=_bf16_lse),
        Probe("arguments", "q a transposed view, k and v in other layouts, blocks (32, 16), T_q = 32, T_k = 45, d = 32, bfloat16, causal",
              _built(lambda: mixed_layouts(1, 1, 32, 45, 32, 194), torch.bfloat16, causal=True, block_q=32, block_k=16),
              "q 是转置的视图，k 和 v 是另外的布局，分块 (32, 16)，T_q = 32，T_k = 45，d = 32，bfloat16，因果", tolerance=_bf16_lse),
        Probe("extreme", "every score near -200, d = 64, blocks (16, 32)",
              _built(lambda: far_below_zero(1, 1, 13, 40, 64, 195), block_q=16, block_k=32),
              "所有分数都接近 -200，d = 64，分块 (16, 32)", tolerance=_big_scores),
        Probe("arguments", "blocks (16, 32), causal, T_q = T_k = 40", _heads(1, 1, 40, 40, 16, 189, causal=True, block_q=16, block_k=32),
              "分块 (16, 32)，因果，T_q = T_k = 40"),
    ], compares=("values", "shape", "dtype", "device", "inputs"), tolerance=_tolerance),
    "TritonFlashAttention": Family([
        Probe("batch", "2 batch items x 2 heads, T_q=9, T_k=20", _apply(2, 2, 9, 20, 16, 190), "2 个样本 x 2 个头，T_q=9，T_k=20"),
        Probe("arguments", "causal=True, T_q = T_k = 24", _apply(1, 2, 24, 24, 16, 191, causal=True), "causal=True，T_q = T_k = 24"),
        Probe("edges", "one query (decoding), causal", _apply(1, 1, 1, 17, 16, 192, causal=True), "一个查询（解码），因果"),
        Probe("arguments", "q a transposed view, k and v in other layouts, causal",
              _apply(0, 0, 0, 0, 0, 0, causal=True, make=lambda: mixed_layouts(1, 2, 11, 19, 16, 196)), "q 是转置的视图，k 和 v 是另外的布局，因果"),
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads"), tolerance=_tolerance,
       grad_tolerance=lambda: _tolerance(gradients=True)),
}
