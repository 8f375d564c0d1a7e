"""Notebook 15's contracts and input families: each launcher against PyTorch's float64 answer, in the
input's dtype, on the device its kernels run on (Triton's interpreter on a CPU). float32 is graded at
the kernels' own tolerance: exact in the interpreter, TF32 products on a GPU (utils.flash_triton).

Grading runs every kernel in the interpreter, one program after another in Python, so each space is
small: a handful of levels per axis, their pairs covered by about a dozen probes."""
import torch

import utils.flash_triton as ref
from autograder.checks.core import rules
from autograder.checks.nb14.flash_variants import heads_layout, scaled_scores, sdpa
from autograder.checks.core.harness import Family, Probe
from autograder.checks.core.rules import Contract, Forbid
from autograder.checks.core.space import Space
from autograder.checks.nb15.triton_probes import apply_point, forward_point, mixed_layouts, softmax_point
from autograder.checks.nb15.triton_runs import on_device

# Contracts -------------------------------------------------------------------------------------
_SOFTMAX = (*(Forbid(t, "the softmax itself", "就是 softmax 本身") for t in ("torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax")),
            *(Forbid(t, "its logarithm", "softmax 的对数") for t in ("torch.log_softmax", "torch.nn.functional.log_softmax")))
_SDPA = Forbid("torch.nn.functional.scaled_dot_product_attention", "it computes the attention your kernel computes",
               "它会直接算出你的内核要算的注意力")
_LAUNCHER = ("the course's launcher: yours allocates and launches", "课程的启动函数：你的启动函数自己分配输出并启动内核")
_FLASH_FORWARD = Forbid("utils.flash_triton.flash_forward", "the course's launcher of any kernel it is given",
                        "课程的启动函数，可以启动传给它的任何内核")
_IN_PYTORCH = (Forbid("utils.flash_attention.flash_attention_forward", "notebook 14's forward, in PyTorch", "笔记本 14 的前向计算，用 PyTorch 写成"),
               Forbid("utils.flash_attention.naive_attention", "the course's attention, in PyTorch", "课程的注意力，用 PyTorch 写成"))
def _kernel_runs(grid_en, grid_zh, more_en="", more_zh=""):
    return (f"Your kernel is launched by the launcher (`kernel[grid](...)`), {grid_en}; no load or store leaves the tensors of "
            f"its launch; a masked `tl.load` without `other=` reads NaN (its lanes are undefined).{more_en}",
            f"你的内核由启动函数以 `kernel[grid](...)` 的方式启动，{grid_zh}；任何载入或存储都不能越出这次启动的张量；"
            f"不带 `other=` 的带掩码 `tl.load` 读到的是 NaN（这些位置的值是未定义的）。{more_zh}")


_STORED = ("The results are the values your kernel stored: the launcher allocates, launches and returns them (casting to the "
           "inputs' dtype at most), with no arithmetic in PyTorch after the launch.",
           "结果是你的内核存储的值：启动函数分配输出、启动内核并返回它们（至多转换为输入的 dtype），启动之后不再用 PyTorch 做任何运算。")
_WIDTH = ("`q`, `k` and `v` share one dtype and one width `d`, a power of two from 16", "`q`、`k`、`v` 的 dtype 相同，宽度 `d` 也相同，是从 16 起的 2 的幂")
_BLOCKS = ("`block_q` and `block_k` are powers of two from 16", "`block_q` 和 `block_k` 是从 16 起的 2 的幂")
_CAUSAL = ("with causal=True, T_q <= T_k (the queries are the last positions)", "causal=True 时 T_q <= T_k（查询是最后几个位置）")
_BF16 = ("float32 exactly, bfloat16 within its rounding", "float32 要精确，bfloat16 在其舍入误差之内")

CONTRACTS = rules.register("15", [
    Contract("softmax_rows_kernel", also=("triton_softmax",), dtypes=("float32", "bfloat16"),
             forbids=(*_SOFTMAX, Forbid("utils.flash_triton.triton_softmax", *_LAUNCHER),
                      Forbid("utils.flash_attention.online_softmax", "notebook 14's softmax, in PyTorch", "笔记本 14 的 softmax，用 PyTorch 写成")),
             dtype=(f"the output has `x`'s dtype; {_BF16[0]}", f"输出与 `x` 的 dtype 相同；{_BF16[1]}"),
             preconditions=(("`x` is 2-d and every row holds a finite value", "`x` 是二维的，且每一行都有一个有限值"),),
             notes=(_kernel_runs("one program per row, grid `(M,)`", "每行一个程序，grid 为 `(M,)`"), _STORED)),
    Contract("flash_forward_kernel", also=("triton_flash_attention_forward",), dtypes=("float32", "bfloat16"),
             forbids=(_SDPA, Forbid("utils.flash_triton.triton_flash_attention_forward", *_LAUNCHER), _FLASH_FORWARD, *_IN_PYTORCH),
             dtype=(f"`out` in the inputs' dtype, `lse` float32; {_BF16[0]} (`out` within 3e-2 of the exact answer, `lse` within "
                    "two bf16 roundings of the scores)",
                    f"`out` 与输入的 dtype 相同，`lse` 为 float32；{_BF16[1]}（`out` 与精确答案相差不超过 3e-2，`lse` 不超过分数的两次 bf16 舍入）"),
             preconditions=(_WIDTH, _BLOCKS, _CAUSAL),
             notes=(_kernel_runs("one program per query tile and (batch item, head), grid `(cdiv(T_q, block_q), B * H)`",
                                 "每个查询分块、每个（样本，头）各一个程序，grid 为 `(cdiv(T_q, block_q), B * H)`",
                                 " With causal=True no key tile entirely above the diagonal is loaded.",
                                 "causal=True 时不载入完全位于对角线之上的键分块。"), _STORED)),
    Contract("TritonFlashAttention", earlier="own", dtypes=("float32", "bfloat16"),
             forbids=(_SDPA, Forbid("utils.flash_triton.triton_flash_attention_forward", *_LAUNCHER), _FLASH_FORWARD,
                      Forbid("utils.flash_triton.flash_forward_kernel", "the course's kernel: launch yours", "课程的内核：请启动你自己的"),
                      *_IN_PYTORCH, Forbid("utils.flash_attention.FlashAttention", "notebook 14's Function, in PyTorch",
                                           "笔记本 14 的 Function，用 PyTorch 写成")),
             dtype=("`out` and each gradient in its input's dtype (notebook 14's backward run on float32 copies)",
                    "`out` 和每个梯度都与其输入的 dtype 相同（笔记本 14 的反向计算在 float32 副本上运行）"),
             preconditions=(_WIDTH, _CAUSAL),
             notes=(("The `out` forward returns is what your kernel stored; forward saves lse, not the probabilities, and neither "
                     "forward nor backward builds an intermediate larger than one 64 x 64 tile of every head or than an input or "
                     "output; causal and the saved tensors live on `ctx`, so two calls in flight keep their own.",
                     "forward 返回的 `out` 是你的内核存储的值；forward 保存 lse 而不是概率，forward 和 backward 都不构造比每个头的一个 "
                     "64 x 64 分块以及任何输入和输出更大的中间张量；causal 和保存的张量放在 `ctx` 上，这样同时进行中的两次调用各自保留自己的。"),)),
])


# References and tolerances ---------------------------------------------------------------------
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


def _grad_tolerance():
    """float32 at the kernels' tolerance; bf16 gradients of notebook 14's float32 backward, cast back."""
    return {**_tolerance(gradients=True), torch.bfloat16: (6e-2, 2e-2)}


def _big_scores():
    """Scores in the hundreds: exact in the interpreter; on a GPU TF32 moves them by ~0.1 (as nb15's own check allows)."""
    return {torch.float32: (1e-4, 1e-4)} if ref.interpreted() else {torch.float32: (0.1, 0.0)}


def _bf16_lse():
    """lse (float32) of bf16 inputs: within two bf16 roundings of the scores (a kernel may scale q in
    bf16 first, as Triton's 2023 tutorial did); out, in bf16, at bf16's own tolerance."""
    return {torch.float32: (2.0 ** -6, 2.0 ** -7)}


def point_tolerance(point):
    """A generated point's own: scores far from 0 carry float32's rounding of their size; lse of bf16 inputs two bf16 roundings."""
    return {**(_big_scores() if point["values"] != "normal" else {}), **(_bf16_lse() if point["dtype"] == "bfloat16" else {})}


# Input spaces ----------------------------------------------------------------------------------
# Scores in the hundreds are graded in float32: a bf16 kernel may round q * scale to bf16 first (Triton's
# 2023 tutorial does), which at that size moves each score by about one, more than bf16's tolerance of out.
_NOT_BF16_HUNDREDS = lambda p: not (p["values"] == "scores in the hundreds" and p["dtype"] == "bfloat16")  # noqa: E731
_LAYOUTS = ("contiguous", "strided", "mixed")  # column-major: k in "mixed" (q.stride(-1) != 1: "strided")
SPACES = {
    "softmax_rows_kernel": Space({"shape": ((5, 23), (1, 1), (3, 64), (2, 300)),
                                  "values": ("normal", "rows far from 0", "-inf entries"),
                                  "dtype": CONTRACTS["softmax_rows_kernel"].dtypes,
                                  "layout:x": ("contiguous", "column-major", "strided")}, softmax_point),
    "flash_forward_kernel": Space({"shape": ((2, 1, 11, 27, 16), (1, 1, 32, 45, 32), (1, 2, 1, 23, 64)),
                                   "blocks": ((16, 32), (32, 16), "default (64, 64)"), "flag:causal": (False, True),
                                   "values": ("normal", "scores in the hundreds", "scores all near -200"),
                                   "dtype": CONTRACTS["flash_forward_kernel"].dtypes, "layout:q,k,v": _LAYOUTS},
                                  forward_point, valid=_NOT_BF16_HUNDREDS, tolerance=point_tolerance),
    "TritonFlashAttention": Space({"shape": ((2, 1, 9, 20, 16), (1, 2, 1, 17, 32)), "flag:causal": (False, True),
                                   "values": ("normal", "scores in the hundreds"),  # the forward's own regimes are exercise 2's
                                   "dtype": CONTRACTS["TritonFlashAttention"].dtypes, "layout:q,k,v": _LAYOUTS},
                                  apply_point, valid=_NOT_BF16_HUNDREDS, tolerance=point_tolerance,
                                  no_grads=lambda p: p["values"] == "scores in the hundreds"),
}


# Pinned probes: the inputs a generated point does not hold ----------------------------------------
def _heads(B, H, T_q, T_k, d, seed, scale=1.0, dtype=torch.float32, **kwargs):
    """q, k, v as split heads give them (non-contiguous), batch items and heads that differ."""
    def build():
        q, k, v = heads_layout(B, H, T_q, d, seed) * scale, heads_layout(B, H, T_k, d, seed + 1), heads_layout(B, H, T_k, d, seed + 2)
        return tuple(t.to(dtype) for t in on_device(q, k, v)), dict(kwargs)
    return build


def _apply_mixed(B, H, T_q, T_k, d, seed, causal):
    """Function.apply takes its arguments by position only: (q, k, v, causal)."""
    return lambda: (tuple(on_device(*mixed_layouts(B, H, T_q, T_k, d, seed))) + (causal,), {})


FAMILIES = {
    "softmax_rows_kernel": Family([], compares=("values", "shape", "dtype", "device", "inputs"), tolerance=_tolerance,
                                  space=SPACES["softmax_rows_kernel"]),
    "flash_forward_kernel": Family([
        Probe("arguments", "blocks (16, 32), causal, T_q = T_k = 40", _heads(1, 1, 40, 40, 16, 189, causal=True, block_q=16, block_k=32),
              "分块 (16, 32)，因果，T_q = T_k = 40"),
        # Not causal, two query tiles and keys past T_q + BLOCK_Q: a causal end applied to every call
        # (`if CAUSAL` taken as true) leaves out the last key tile (mutants 15 found the grading points hold none)
        Probe("arguments", "blocks (16, 32), not causal, T_q = 32, T_k = 45", _heads(1, 1, 32, 45, 16, 190, causal=False, block_q=16, block_k=32),
              "分块 (16, 32)，非因果，T_q = 32，T_k = 45"),
    ], compares=("values", "shape", "dtype", "device", "inputs"), tolerance=_tolerance, space=SPACES["flash_forward_kernel"]),
    "TritonFlashAttention": Family([
        Probe("arguments", "q a transposed view, k and v in other layouts, causal", _apply_mixed(1, 2, 11, 19, 16, 196, True),
              "q 是转置的视图，k 和 v 是另外的布局，因果"),
    ], compares=("values", "shape", "dtype", "device", "inputs", "grads"), tolerance=_tolerance, grad_tolerance=_grad_tolerance,
       space=SPACES["TritonFlashAttention"]),
}


# Mutants of the model answers that no input of the spaces can tell apart (python -m autograder mutants 15) ----
_AXIS = "the row is a 1-d block: a reduction over all of its axes, or over axis -1, is the one over axis 0"
EQUIVALENT = {
    "softmax_rows_kernel": {
        "line 7: .to(...) dropped (an alias or the old dtype)":
            "a no-op in float32; in bfloat16 Triton computes exp, max and sum in float32 and rounds each result to bf16 (the "
            "interpreter, as utils.flash_triton repairs it, does the same), which stays within bf16's tolerance of the output",
        "line 8: keyword axis= dropped": _AXIS,
        "line 8: constant 0 -> -1": _AXIS,
        "line 9: keyword axis= dropped": _AXIS,
        "line 9: constant 0 -> -1": _AXIS,
        "line 16: if x.stride(1) != 1 -> if True": "a copy of an x that is contiguous already: the same values, one copy more",
        "line 16: constant 1 -> 0": "x.stride(1) != 0 copies every x of the space (a copy of a contiguous x changes nothing); "
                                    "only an expanded x, whose columns are one element (stride 0), is left as it is, and the "
                                    "contract's inputs hold no such x",
    },
    "TritonFlashAttention": {
        "line 17: .float(...) dropped (an alias or the old dtype)":
            "the one of the five that survives is out's: notebook 14's backward uses out only in D = rowsum(grad_out * out), "
            "where PyTorch promotes a bf16 out to grad_out's float32 (without q's, k's, v's or grad_out's .float() a bf16 "
            "product of the backward fails, and grading kills those four)",
        "line 18: .to(...) dropped (an alias or the old dtype)":
            "autograd casts each gradient a Function returns to its input's dtype (validate_outputs in "
            "torch/csrc/autograd/engine.cpp), so the float32 gradients of bf16 inputs arrive as bf16 all the same",
    },
}
