# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 15 · FlashAttention as a GPU kernel, in Triton · FlashAttention：用 Triton 写成 GPU 内核
#
# Notebook 14 wrote FlashAttention's algorithm in PyTorch and measured what it buys on a CPU: the
# memory of FlashAttention, not its speed. Its tiled forward is a Python loop that launches a few
# small PyTorch operations per tile; on a GPU that loop took 36-46x the time of PyTorch's fused
# kernel in float32 and 474-834x in bf16 (two runs, printed at the end). A **GPU kernel** is one function that the GPU
# runs as many copies at once, each copy working on its own tile from start to finish in fast
# on-chip memory. This notebook writes FlashAttention-2's forward as such a kernel, in Triton.
#
# 笔记本 14 用 PyTorch 写出了 FlashAttention 的算法，并在 CPU 上测量了它带来的好处：FlashAttention 的内存，而不是它的速度。它的分块前向计算是一个 Python 循环，每个分块启动几个小的 PyTorch 运算；在 GPU 上，这个循环的用时在 float32 下是 PyTorch 融合内核的 36-46 倍，在 bf16 下是 474-834 倍（两次运行，数字在本笔记本末尾打印）。**GPU 内核**是一个函数，GPU 同时运行它的许多副本，每个副本在快速的片上内存里从头到尾处理自己的分块。本笔记本用 Triton 把 FlashAttention-2 的前向计算写成这样一个内核。
#
# Triton is a language embedded in Python for such kernels: Tillet, Kung and Cox (2019) introduced
# its idea, a kernel written over tiles, as a C-like language (Triton-C) and a compiler; the
# Python-embedded language came with Triton 1.0 (OpenAI, 2021). You
# describe what one **program** does with **blocks** of data (load a block, compute on it, store a
# block); the compiler decides how the GPU's threads share that work, what goes to shared memory
# and which tensor-core instructions multiply the blocks. You will write three things: a row
# softmax as a warm-up, the FlashAttention forward kernel with its log-sum-exp, and an
# `autograd.Function` whose backward is notebook 14's.
#
# Triton 是嵌入在 Python 中、用来写这类内核的语言：Tillet、Kung 与 Cox（2019）提出了它的思想，即按分块来写内核，当时是一种类 C 的语言（Triton-C）加一个编译器；嵌入 Python 的语言随 Triton 1.0（OpenAI，2021）而来。你描述一个**程序**对数据**块**做什么（载入一个块，在上面计算，存回一个块）；编译器决定 GPU 的线程如何分担这些工作、哪些数据放进共享内存、用哪些张量核心指令做块的乘法。你将写三样东西：作为热身的按行 softmax，带 log-sum-exp 的 FlashAttention 前向内核，以及一个反向计算来自笔记本 14 的 `autograd.Function`。

# %% [markdown]
# ## A GPU kernel on a machine without a GPU · 在没有 GPU 的机器上运行 GPU 内核
#
# With the environment variable `TRITON_INTERPRET=1` set before `triton` is imported, Triton runs
# every kernel in its **interpreter**: the programs of a launch are executed one after another, in
# Python, each block a numpy array. Set it after the import and Triton's own helpers (`tl.max`,
# `tl.sum`) have already been built for a GPU. The cell below sets it when this machine has no
# GPU, and also while the notebook is graded, on any machine.
#
# 如果在导入 `triton` 之前设置环境变量 `TRITON_INTERPRET=1`，Triton 就会在它的**解释器**里运行每个内核：一次启动中的各个程序在 Python 里一个接一个地执行，每个块都是一个 numpy 数组。如果在导入之后才设置，Triton 自己的辅助函数（`tl.max`、`tl.sum`）已经为 GPU 构建好了。下面的单元格在这台机器没有 GPU 时设置它；评分时，无论在哪台机器上，也会设置它。
#
# What the interpreter tells you is what your kernel computes: the same loads, masks, float32
# arithmetic and stores as on a GPU, so its values can be compared with PyTorch's. What it cannot
# tell you: anything about speed (nothing runs in parallel, there is no shared memory and no tensor
# core, and `num_warps` and `num_stages`, which tune a GPU kernel, are ignored; of two kernels the
# slower one here may be the faster one there); whether a kernel fits a GPU (shared memory per
# pipeline stage, and `tl.dot`'s smallest shapes: on an NVIDIA GPU the summed dimension must be at
# least 16, where the interpreter takes any size); and what a masked load without `other=` returns:
# Triton's documentation says undefined, the interpreter gives 0 and a GPU whatever was there, so
# the grader reads those lanes as NaN. Two more differences: on a GPU, `tl.dot` multiplies float32
# blocks in TF32 by default (10 bits of mantissa), where the interpreter computes in full float32;
# and the interpreter keeps bfloat16 blocks as their 16-bit patterns and computes on the patterns
# as if they were integers (`x + x` gives NaN, `tl.dot` values near 1e10; its debugging guide says
# bfloat16 arithmetic is not supported). `utils.flash_triton`, imported below, repairs that in this
# process the way a GPU computes: each bfloat16 operation in float32, the result rounded to
# bfloat16. The course uses Triton 3.7, the version that torch 2.12 and 2.13 bring on a GPU, so the
# language you write here is the one a GPU compiles (`requirements-triton.txt` says why).
#
# 解释器能告诉你的是你的内核算出了什么：与 GPU 上相同的载入、掩码、float32 运算和存储，所以它的结果可以与 PyTorch 的比较。它不能告诉你的有：任何关于速度的事（没有任何东西并行运行，没有共享内存，也没有张量核心，用来调优 GPU 内核的 `num_warps` 和 `num_stages` 会被忽略；两个内核中，在这里较慢的那个在 GPU 上可能反而更快）；内核是否放得进 GPU（每级流水线占用的共享内存，以及 `tl.dot` 的最小形状：在 NVIDIA GPU 上，被求和的那一维至少为 16，而解释器接受任何大小）；以及不带 `other=` 的带掩码载入返回什么：Triton 的文档说是未定义的，解释器给出 0，GPU 给出那里碰巧存着的值，所以评分程序把这些位置读作 NaN。另有两点不同：在 GPU 上，`tl.dot` 默认用 TF32（10 位尾数）计算 float32 块的乘法，而解释器用完整的 float32；解释器把 bfloat16 块保存为 16 位的位模式，并把这些位模式当作整数来计算（`x + x` 得到 NaN，`tl.dot` 的值接近 1e10；它的调试指南说不支持 bfloat16 运算）。下面导入的 `utils.flash_triton` 在本进程中按 GPU 的算法修正这一点：每个 bfloat16 运算都用 float32 计算，再把结果舍入为 bfloat16。课程使用 Triton 3.7，即 torch 2.12 和 2.13 在 GPU 上带来的版本，所以你在这里写的语言就是 GPU 编译的语言（原因见 `requirements-triton.txt`）。

# %%
# NBVAL_IGNORE_OUTPUT
import math
import os

import torch

GRADING = bool(os.getenv("NBGRADER_EXECUTION"))  # grading runs the kernels in the interpreter, at small sizes
GPU = torch.cuda.is_available() and not GRADING
if not GPU:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

from utils.flash_triton import kernel_device  # noqa: E402  (says how to install triton if it is missing)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from autograder.checks.nb15.triton_watch import KernelWatch  # noqa: E402
from utils.flash_attention import flash_attention_backward  # noqa: E402

DEVICE = kernel_device()  # where the tensors given to the kernels must live
print(f"triton {triton.__version__}: kernels run {'on the GPU' if GPU else 'in the interpreter, on the CPU'}")

# %% [markdown]
# ## One program per block · 每个块一个程序
#
# The smallest kernel adds two vectors of `n` numbers. A launch `add_kernel[grid](...)` starts
# `grid` programs; each asks for its number with `tl.program_id(0)` and handles the `BLOCK`
# numbers from `pid * BLOCK` on. Pointers are the addresses of the tensors' first elements, and
# `x_ptr + offsets` is a block of addresses, one per number: `tl.load` reads them into a block
# and `tl.store` writes a block back. `BLOCK` is a `tl.constexpr`, a number known when the kernel
# is compiled, because block shapes must be, and `tl.arange` needs a power of two.
#
# 最小的内核把两个各有 `n` 个数的向量相加。一次启动 `add_kernel[grid](...)` 会启动 `grid` 个程序；每个程序用 `tl.program_id(0)` 得到自己的编号，处理从 `pid * BLOCK` 开始的 `BLOCK` 个数。指针是张量第一个元素的地址，`x_ptr + offsets` 是一块地址，每个数一个：`tl.load` 把它们读成一个块，`tl.store` 把一个块写回去。`BLOCK` 是 `tl.constexpr`，即编译内核时就已知的数，因为块的形状必须在编译时确定，而且 `tl.arange` 需要 2 的幂。
#
# With `n = 1000` and blocks of 256, four programs cover 1024 positions: the last 24 are past the
# end of the tensors. The **mask** `offsets < n` switches those lanes off: a masked load reads
# nothing there and gives `other` (without `other=` the value is undefined: write `other=` on every
# masked load whose lanes reach a result) and a masked store writes nothing. Without it the kernel
# would read and write whatever memory follows the tensors. The cell runs the kernel, then
# runs a version without the masks inside the course's `KernelWatch`, which checks every address
# a kernel touches in the interpreter against the tensors of its launch and stops it before the
# first address outside them.
#
# 当 `n = 1000`、块大小为 256 时，四个程序覆盖 1024 个位置：最后 24 个在张量末尾之后。**掩码** `offsets < n` 关掉这些位置：带掩码的载入在那里什么也不读，得到 `other`（不写 `other=` 时这个值是未定义的：只要被屏蔽的位置会进入结果，就在这个带掩码的载入上写 `other=`），带掩码的存储什么也不写。没有掩码，内核就会读写紧跟在张量后面的任意内存。下面的单元格先运行这个内核，再在课程的 `KernelWatch` 里运行一个去掉掩码的版本；`KernelWatch` 在解释器中把内核访问的每个地址与这次启动的张量相比较，并在第一个越界地址之前让它停下。

# %%
@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n  # the last program's lanes past n do nothing
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def add_kernel_without_mask(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))


x, y = torch.arange(1000.0, device=DEVICE), torch.ones(1000, device=DEVICE)
out = torch.empty_like(x)
grid = (triton.cdiv(1000, 256),)
add_kernel[grid](x, y, out, 1000, BLOCK=256)
print(f"{grid[0]} programs of 256 for 1000 numbers; equal to x + y: {torch.equal(out, x + y)}")
if not GPU:
    try:
        with KernelWatch():
            add_kernel_without_mask[grid](x, y, out, 1000, BLOCK=256)
    except Exception as e:
        print("without the mask:", e.__cause__ or e)

# %% [markdown]
# A two-dimensional block is built the same way, by broadcasting: `rows[:, None] * stride +
# cols[None, :]` is a `(len(rows), len(cols))` block of addresses, and a mask such as
# `(rows[:, None] < M) & (cols[None, :] < N)` switches off what lies outside. Reductions along an
# axis (`tl.max(x, axis=0)`, `tl.sum`) and elementwise functions (`tl.exp`, `tl.where`) work on a
# whole block at once; `tl.dot(a, b)` multiplies an `(M, K)` block by a `(K, N)` block (on an NVIDIA
# GPU `K` must be at least 16; the interpreter takes any size) and returns float32 for float16,
# bfloat16 or float32 inputs. Offsets are not the only way to address a tile:
# block pointers (`tl.make_block_ptr` with `boundary_check` and `padding_option="zero"`, the style of
# Stanford's CS336) and tensor descriptors (`tl.make_tensor_descriptor`) load a tile by its
# coordinates, the part past the end filled with zeros. Triton 3.7, the course's, runs both, in
# its interpreter too, and grading accepts both; Triton deprecates block pointers from 3.7 and 3.9
# removes them. This notebook uses offsets and masks, which every version runs.
#
# 二维的块也用同样的方法构造，靠广播：`rows[:, None] * stride + cols[None, :]` 是一个 `(len(rows), len(cols))` 的地址块，像 `(rows[:, None] < M) & (cols[None, :] < N)` 这样的掩码关掉外面的部分。沿某一轴的归约（`tl.max(x, axis=0)`、`tl.sum`）和逐元素函数（`tl.exp`、`tl.where`）一次作用于整个块；`tl.dot(a, b)` 计算一个 `(M, K)` 块与一个 `(K, N)` 块的乘积（在 NVIDIA GPU 上 `K` 至少为 16；解释器接受任何大小），对 float16、bfloat16 或 float32 的输入返回 float32。寻址一个分块的方法不只有偏移量：块指针（`tl.make_block_ptr`，加上 `boundary_check` 和 `padding_option="zero"`，斯坦福 CS336 的写法）和张量描述符（`tl.make_tensor_descriptor`）都按分块的坐标载入，超出末尾的部分填为 0。课程使用的 Triton 3.7 两者都能运行，在解释器中也一样，评分也都接受；Triton 从 3.7 起不再推荐块指针，3.9 把它移除了。本笔记本使用偏移量和掩码，每个版本都能运行。

# %% [markdown]
# ### Exercise 1 · `softmax_rows_kernel` · 练习 1
#
# Write `softmax_rows_kernel`, launched with one program per row of `x` of shape `(M, N)`, and
# its launcher `triton_softmax(x)`. The kernel loads its row with a mask for the columns past `N`
# and `other=float("-inf")` (so that `exp` gives them 0), converts it to float32
# (`.to(tl.float32)`), subtracts the row's maximum (`tl.max(x, axis=0)`), takes `tl.exp`, divides
# by the sum and stores the row with the same mask. The launcher allocates the output in the dtype
# of `x` (`torch.empty`), and launches `softmax_rows_kernel[(M,)]` with `BLOCK_N =
# triton.next_power_of_2(N)` and the row strides `x.stride(0)` and `out.stride(0)`: in a view such
# as `wide[:, :N]` the rows are not `N` apart. The kernel's arguments shown are a suggestion.
#
# 写出 `softmax_rows_kernel`，它以每行一个程序的方式在形状为 `(M, N)` 的 `x` 上启动；再写出它的启动函数 `triton_softmax(x)`。内核载入自己的那一行，对 `N` 之后的列使用掩码和 `other=float("-inf")`（这样 `exp` 给它们 0），把它转换为 float32（`.to(tl.float32)`），减去这一行的最大值（`tl.max(x, axis=0)`），取 `tl.exp`，除以和，再用同样的掩码存储这一行。启动函数以 `x` 的 dtype 分配输出（`torch.empty`），并以 `BLOCK_N = triton.next_power_of_2(N)` 和行步长 `x.stride(0)`、`out.stride(0)` 启动 `softmax_rows_kernel[(M,)]`：在像 `wide[:, :N]` 这样的视图里，相邻两行相距不是 `N`。这里给出的内核参数只是建议。
#
# The grader calls `triton_softmax` and watches your kernel run. `x` may be any 2-d tensor or view:
# rows not `N` apart, columns not adjacent (`x = y.T`, where `x.stride(1) != 1`: make `x` contiguous
# in the launcher, or pass the column stride too), rows of a few columns to a few hundred, rows far
# from 0 and `-inf` entries.
#
# 评分程序调用 `triton_softmax` 并观察你的内核运行。`x` 可以是任何二维张量或视图：相邻两行相距不是 `N`，列不相邻（`x = y.T`，此时 `x.stride(1) != 1`：请在启动函数中把 `x` 变成连续的，或者把列步长也传给内核），每行几列到几百列，远离 0 的行，以及 `-inf` 元素。
#
# <!-- rules: softmax_rows_kernel -->
#
# #### Rules that grading checks · 评分检查的规则 (`softmax_rows_kernel`)
#
# - Not allowed: `torch.softmax` (the softmax itself); `Tensor.softmax` (the softmax itself); `F.softmax` (the softmax itself); `torch.log_softmax` (its logarithm); `F.log_softmax` (its logarithm); `utils.flash_triton.triton_softmax` (the course's launcher: yours allocates and launches); `utils.flash_attention.online_softmax` (notebook 14's softmax, in PyTorch).
# - Not graded (the caller guarantees it): `x` is 2-d and every row holds a finite value.
# - Graded in float32 and bfloat16: the output has `x`'s dtype; float32 exactly, bfloat16 within its rounding.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Your kernel is launched by the launcher (`kernel[grid](...)`), one program per row, grid `(M,)`; no load or store leaves the tensors of its launch; a masked `tl.load` without `other=` reads NaN (its lanes are undefined).
# - The results are the values your kernel stored: the launcher allocates, launches and returns them (casting to the inputs' dtype at most), with no arithmetic in PyTorch after the launch.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`torch.softmax`（就是 softmax 本身）；`Tensor.softmax`（就是 softmax 本身）；`F.softmax`（就是 softmax 本身）；`torch.log_softmax`（softmax 的对数）；`F.log_softmax`（softmax 的对数）；`utils.flash_triton.triton_softmax`（课程的启动函数：你的启动函数自己分配输出并启动内核）；`utils.flash_attention.online_softmax`（笔记本 14 的 softmax，用 PyTorch 写成）。
# - 不评分（由调用者保证）：`x` 是二维的，且每一行都有一个有限值。
# - 在 float32、bfloat16 下评分：输出与 `x` 的 dtype 相同；float32 要精确，bfloat16 在其舍入误差之内。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 你的内核由启动函数以 `kernel[grid](...)` 的方式启动，每行一个程序，grid 为 `(M,)`；任何载入或存储都不能越出这次启动的张量；不带 `other=` 的带掩码 `tl.load` 读到的是 NaN（这些位置的值是未定义的）。
# - 结果是你的内核存储的值：启动函数分配输出、启动内核并返回它们（至多转换为输入的 dtype），启动之后不再用 PyTorch 做任何运算。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "softmax_rows_kernel", "locked": false, "schema_version": 3, "solution": true, "task": false}
@triton.jit
def softmax_rows_kernel(X, OUT, N, stride_x, stride_out, BLOCK_N: tl.constexpr):
    """Softmax of row tl.program_id(0) of X into OUT: N columns, a block of BLOCK_N >= N."""
    ### BEGIN SOLUTION
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(X + row * stride_x + cols, mask=cols < N, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))  # the masked columns give exp(-inf) = 0
    tl.store(OUT + row * stride_out + cols, e / tl.sum(e, axis=0), mask=cols < N)
    ### END SOLUTION


def triton_softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax of each row of x (M, N) with softmax_rows_kernel, in x's dtype."""
    ### BEGIN SOLUTION
    if x.stride(1) != 1:
        x = x.contiguous()
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    softmax_rows_kernel[(x.shape[0],)](x, out, x.shape[1], x.stride(0), out.stride(0), BLOCK_N=triton.next_power_of_2(x.shape[1]))
    return out
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_softmax_rows_kernel", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close
from autograder.checks.nb15.triton_watch import KernelWatch
from utils.flash_triton import kernel_device

x = torch.tensor([[1.0, 3.0, 2.0, 5.0, 0.5], [1000.0, 1001.0, float("-inf"), 999.0, 1000.5]], device=kernel_device())
with KernelWatch() as watch:  # a load or store outside x or the output is named, not performed
    out = triton_softmax(x)
expect(watch.launched(softmax_rows_kernel) == 1, "triton_softmax should launch softmax_rows_kernel once.",
       "triton_softmax 应启动 softmax_rows_kernel 一次。", f"{watch.launched(softmax_rows_kernel)} launches")
expect_close(out.cpu(), torch.softmax(x.cpu(), dim=-1),
             "triton_softmax(x) should equal torch.softmax(x, dim=-1), also on a row near 1000 with a -inf entry (5 columns in a block of 8).",
             "triton_softmax(x) 应等于 torch.softmax(x, dim=-1)，在接近 1000 且含 -inf 的行上也一样（5 列放在 8 个位置的块里）。")
print("✓ softmax_rows_kernel")

# %% nbgrader={"grade": true, "grade_id": "test_softmax_rows_kernel_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb15
nb15.check_softmax_rows_kernel(softmax_rows_kernel, triton_softmax)
### END HIDDEN TESTS

# %% [markdown]
# ## From notebook 14's loops to a grid of programs · 从笔记本 14 的循环到程序网格
#
# Notebook 14's forward had two loops: over tiles of `block_q` queries, and inside, over tiles of
# `block_k` keys; every batch item and head went along in each tensor operation. In the kernel the
# outer loop and the heads become the **grid**: program `(tile, bh)` with `tile =
# tl.program_id(0)` handles queries `tile * BLOCK_Q` to `tile * BLOCK_Q + BLOCK_Q - 1` of batch item
# and head `bh = tl.program_id(1)`, so a launch has `cdiv(T_q, BLOCK_Q) x B*H` programs, all
# independent. The inner loop over key tiles stays a loop, inside each program. Everything a
# program keeps between two key tiles (the running maximum `m`, the running sum `l`, the
# accumulator `acc` of shape `(BLOCK_Q, d)`) lives in registers, in float32 whatever the inputs'
# dtype; only the output and one log-sum-exp per query are written to memory.
#
# 笔记本 14 的前向计算有两层循环：外层遍历每块 `block_q` 个查询，内层遍历每块 `block_k` 个键；每个样本和每个头都在每个张量运算中一并处理。在内核里，外层循环和各个头变成了**网格**：程序 `(tile, bh)`（其中 `tile = tl.program_id(0)`）处理样本与头 `bh = tl.program_id(1)` 的第 `tile * BLOCK_Q` 到第 `tile * BLOCK_Q + BLOCK_Q - 1` 个查询，所以一次启动有 `cdiv(T_q, BLOCK_Q) x B*H` 个程序，彼此独立。遍历键分块的内层循环仍是循环，位于每个程序内部。一个程序在两个键分块之间保留的所有东西（运行最大值 `m`、运行和 `l`、形状为 `(BLOCK_Q, d)` 的累加器 `acc`）都放在寄存器里，无论输入是什么 dtype 都用 float32；只有输出和每个查询的一个 log-sum-exp 会写入内存。
#
# The two products are `tl.dot`s: `s = tl.dot(q, tl.trans(k)) * scale` gives a `(BLOCK_Q, BLOCK_K)`
# tile of scores in float32, and `tl.dot(p.to(v.dtype), v)` adds the tile's share of the output.
# In bf16 the probabilities `p` are rounded to bf16 for that product, as FlashAttention does,
# while `m`, `l` and `acc` stay float32: rounding the accumulator to bf16 after each of many key
# tiles would lose its low bits again and again. The edges need care twice: the last query tile
# has rows past `T_q` (load them with a mask and `other=0.0`, store with a mask), and the last key
# tile has keys past `T_k` (the masked load gives 0, a score of 0 is a real score, so those
# scores must also be set to `-inf` with `tl.where`).
#
# 两个乘积都用 `tl.dot`：`s = tl.dot(q, tl.trans(k)) * scale` 给出一个 float32 的 `(BLOCK_Q, BLOCK_K)` 分数分块，`tl.dot(p.to(v.dtype), v)` 加上这个分块对输出的贡献。在 bf16 下，概率 `p` 为这次乘法被舍入为 bf16，FlashAttention 也是这样做的，而 `m`、`l` 和 `acc` 保持 float32：如果在许多个键分块中的每一个之后都把累加器舍入为 bf16，它的低位就会一次又一次地丢失。边缘要注意两处：最后一个查询分块有 `T_q` 之后的行（用掩码和 `other=0.0` 载入，用掩码存储）；最后一个键分块有 `T_k` 之后的键（带掩码的载入给出 0，而 0 分是真实的分数，所以还必须用 `tl.where` 把这些分数设为 `-inf`）。
#
# With `causal=True` (bottom-right aligned, `offset = T_k - T_q`), query `i` sees key `j` iff
# `j <= i + offset`. The tile's last query sees keys up to `(tile + 1) * BLOCK_Q - 1 + offset`, so
# the key loop stops at `end = min(T_k, (tile + 1) * BLOCK_Q + offset)`: every key tile above the
# diagonal is skipped, and the tiles it does visit are masked with `keys <= rows + offset`. Key 0
# is in the first tile and every query sees it, so `m` is finite after the first tile and
# `exp(m - m_new)` never computes `-inf - (-inf)`. The cell prints, for `T_q = T_k = 64` and
# blocks of 16, which key tiles each query tile visits.
#
# 当 `causal=True`（右下对齐，`offset = T_k - T_q`）时，查询 `i` 当且仅当 `j <= i + offset` 时能看到键 `j`。分块的最后一个查询能看到直到 `(tile + 1) * BLOCK_Q - 1 + offset` 的键，所以键循环在 `end = min(T_k, (tile + 1) * BLOCK_Q + offset)` 处停止：对角线之上的每个键分块都被跳过，而确实访问的分块用 `keys <= rows + offset` 加掩码。键 0 在第一个分块里，每个查询都能看到它，所以第一个分块之后 `m` 就是有限的，`exp(m - m_new)` 永远不会计算 `-inf - (-inf)`。下面的单元格打印 `T_q = T_k = 64`、块大小为 16 时每个查询分块访问哪些键分块。

# %%
T_q = T_k = 64
BLOCK_Q = BLOCK_K = 16
for tile in range(triton.cdiv(T_q, BLOCK_Q)):
    end = min(T_k, (tile + 1) * BLOCK_Q + T_k - T_q)
    visited = list(range(0, end, BLOCK_K))
    print(f"query tile {tile} (queries {tile * BLOCK_Q}-{tile * BLOCK_Q + BLOCK_Q - 1}): key tiles starting at {visited}")
print(f"key tiles visited: {sum(min(T_k, (t + 1) * BLOCK_Q) // BLOCK_K for t in range(4))} of {4 * 4}")

# %% [markdown]
# ### Exercise 2 · `flash_forward_kernel` · 练习 2
#
# Write `flash_forward_kernel` and its launcher `triton_flash_attention_forward(q, k, v, causal,
# block_q, block_k)`, which returns `(out, lse)` as notebook 14's `flash_attention_forward` does:
# `out` of shape `(B, H, T_q, d)` in the inputs' dtype and `lse` of shape `(B, H, T_q)` in float32,
# the natural log-sum-exp `m + log(l)` of each query's scaled scores over the keys it sees. The
# launcher makes `q`, `k`, `v` contiguous (split heads give views), so that head `bh` of `q` starts
# `bh * T_q * d` elements in and row `i` of it `i * d` further; it allocates `out` and `lse` and
# launches the grid `(triton.cdiv(T_q, block_q), B * H)` with `scale = 1 / sqrt(d)`, `causal`, `d`
# and the blocks as `tl.constexpr`s. `tl.program_id` is a 32-bit integer: cast it to int64
# (`.to(tl.int64)`) before multiplying it by `T * d`, which passes 2^31 for 256 heads of 128K tokens
# of width 128.
#
# 写出 `flash_forward_kernel` 及其启动函数 `triton_flash_attention_forward(q, k, v, causal, block_q, block_k)`，它像笔记本 14 的 `flash_attention_forward` 一样返回 `(out, lse)`：`out` 的形状为 `(B, H, T_q, d)`，dtype 与输入相同；`lse` 的形状为 `(B, H, T_q)`，为 float32，是每个查询在它能看到的键上缩放后分数的自然对数 log-sum-exp，即 `m + log(l)`。启动函数让 `q`、`k`、`v` 变成连续的（拆分的头给出的是视图），这样 `q` 的第 `bh` 个头从第 `bh * T_q * d` 个元素开始，其中第 `i` 行再往后 `i * d` 个元素；它分配 `out` 和 `lse`，并以 `scale = 1 / sqrt(d)` 启动网格 `(triton.cdiv(T_q, block_q), B * H)`，`causal`、`d` 和分块大小作为 `tl.constexpr` 传入。`tl.program_id` 是 32 位整数：在把它乘以 `T * d` 之前先转换为 int64（`.to(tl.int64)`），对 256 个头、128K 个词元、宽度 128 来说，这个乘积超过 2^31。
#
# The grader calls your launcher and watches the launches. Its inputs cover: blocks of 16 to 64
# with `block_q` smaller, equal or larger than `block_k`; lengths that are not multiples of the
# blocks, and `T_q` a multiple of `block_q` while `T_k` is not; causal and not; `d` from 16 to 64;
# `q`, `k` and `v` in any layout (split heads, a transposed view whose last dimension is not
# contiguous, `k` and `v` laid out differently: make them contiguous, or pass and use every
# dimension's stride); scores in the hundreds and scores all near -200.
#
# 评分程序调用你的启动函数并观察每次启动。它的输入覆盖：16 到 64 的分块，`block_q` 小于、等于或大于 `block_k`；长度不是分块的倍数，以及 `T_q` 是 `block_q` 的倍数而 `T_k` 不是；因果与非因果；`d` 从 16 到 64；任何布局的 `q`、`k`、`v`（拆分的头、最后一维不连续的转置视图、`k` 和 `v` 布局不同：把它们变成连续的，或者传入并使用每一维的步长）；达到几百的分数，以及全都接近 -200 的分数。
#
# <!-- rules: flash_forward_kernel -->
#
# #### Rules that grading checks · 评分检查的规则 (`flash_forward_kernel`)
#
# - Not allowed: `F.scaled_dot_product_attention` (it computes the attention your kernel computes); `utils.flash_triton.triton_flash_attention_forward` (the course's launcher: yours allocates and launches); `utils.flash_triton.flash_forward` (the course's launcher of any kernel it is given); `utils.flash_attention.flash_attention_forward` (notebook 14's forward, in PyTorch); `utils.flash_attention.naive_attention` (the course's attention, in PyTorch).
# - Not graded (the caller guarantees it): `q`, `k` and `v` share one dtype and one width `d`, a power of two from 16.
# - Not graded (the caller guarantees it): `block_q` and `block_k` are powers of two from 16.
# - Not graded (the caller guarantees it): with causal=True, T_q <= T_k (the queries are the last positions).
# - Graded in float32 and bfloat16: `out` in the inputs' dtype, `lse` float32; float32 exactly, bfloat16 within its rounding (`out` within 3e-2 of the exact answer, `lse` within two bf16 roundings of the scores).
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Your kernel is launched by the launcher (`kernel[grid](...)`), one program per query tile and (batch item, head), grid `(cdiv(T_q, block_q), B * H)`; no load or store leaves the tensors of its launch; a masked `tl.load` without `other=` reads NaN (its lanes are undefined). With causal=True no key tile entirely above the diagonal is loaded.
# - The results are the values your kernel stored: the launcher allocates, launches and returns them (casting to the inputs' dtype at most), with no arithmetic in PyTorch after the launch.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（它会直接算出你的内核要算的注意力）；`utils.flash_triton.triton_flash_attention_forward`（课程的启动函数：你的启动函数自己分配输出并启动内核）；`utils.flash_triton.flash_forward`（课程的启动函数，可以启动传给它的任何内核）；`utils.flash_attention.flash_attention_forward`（笔记本 14 的前向计算，用 PyTorch 写成）；`utils.flash_attention.naive_attention`（课程的注意力，用 PyTorch 写成）。
# - 不评分（由调用者保证）：`q`、`k`、`v` 的 dtype 相同，宽度 `d` 也相同，是从 16 起的 2 的幂。
# - 不评分（由调用者保证）：`block_q` 和 `block_k` 是从 16 起的 2 的幂。
# - 不评分（由调用者保证）：causal=True 时 T_q <= T_k（查询是最后几个位置）。
# - 在 float32、bfloat16 下评分：`out` 与输入的 dtype 相同，`lse` 为 float32；float32 要精确，bfloat16 在其舍入误差之内（`out` 与精确答案相差不超过 3e-2，`lse` 不超过分数的两次 bf16 舍入）。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 你的内核由启动函数以 `kernel[grid](...)` 的方式启动，每个查询分块、每个（样本，头）各一个程序，grid 为 `(cdiv(T_q, block_q), B * H)`；任何载入或存储都不能越出这次启动的张量；不带 `other=` 的带掩码 `tl.load` 读到的是 NaN（这些位置的值是未定义的）。causal=True 时不载入完全位于对角线之上的键分块。
# - 结果是你的内核存储的值：启动函数分配输出、启动内核并返回它们（至多转换为输入的 dtype），启动之后不再用 PyTorch 做任何运算。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "flash_forward_kernel", "locked": false, "schema_version": 3, "solution": true, "task": false}
@triton.jit
def flash_forward_kernel(Q, K, V, O, LSE, T_q, T_k, scale,
                         CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_K: tl.constexpr):
    """Program (tile, bh): out and lse of queries tile * BLOCK_Q ... of head bh; Q, K, V, O contiguous (B*H, T, D)."""
    ### BEGIN SOLUTION
    tile, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)  # int64: bh * T_q * D may pass 2**31
    rows = tile * BLOCK_Q + tl.arange(0, BLOCK_Q)
    dims = tl.arange(0, D)
    q = tl.load(Q + bh * T_q * D + rows[:, None] * D + dims[None, :], mask=rows[:, None] < T_q, other=0.0)
    m = tl.full([BLOCK_Q], float("-inf"), tl.float32)
    l = tl.zeros([BLOCK_Q], tl.float32)
    acc = tl.zeros([BLOCK_Q, D], tl.float32)
    offset = T_k - T_q
    end = T_k
    if CAUSAL:
        end = tl.minimum(T_k, (tile + 1) * BLOCK_Q + offset)  # later key tiles are above the diagonal
    for start in range(0, end, BLOCK_K):
        keys = start + tl.arange(0, BLOCK_K)
        at = bh * T_k * D + keys[:, None] * D + dims[None, :]
        k = tl.load(K + at, mask=keys[:, None] < T_k, other=0.0)
        v = tl.load(V + at, mask=keys[:, None] < T_k, other=0.0)
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
    tl.store(O + bh * T_q * D + rows[:, None] * D + dims[None, :], acc / l[:, None], mask=rows[:, None] < T_q)
    tl.store(LSE + bh * T_q + rows, m + tl.log(l), mask=rows < T_q)
    ### END SOLUTION


def triton_flash_attention_forward(q, k, v, causal: bool = False, block_q: int = 64, block_k: int = 64):
    """(out (B, H, T_q, d) in q's dtype, lse (B, H, T_q) float32): softmax(q kᵀ / sqrt(d)) v with flash_forward_kernel."""
    ### BEGIN SOLUTION
    (B, H, T_q, d), T_k = q.shape, k.shape[2]
    q, k, v = (t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q)
    lse = torch.empty(B, H, T_q, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(T_q, block_q), B * H)
    flash_forward_kernel[grid](q, k, v, out, lse, T_q, T_k, 1.0 / math.sqrt(d), CAUSAL=causal, D=d, BLOCK_Q=block_q, BLOCK_K=block_k)
    return out, lse
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_flash_forward_kernel", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import math
import torch
import torch.nn.functional as F
from autograder.checks import expect, expect_close, randn
from autograder.checks.nb15.triton_watch import KernelWatch
from utils.flash_triton import kernel_device, tolerance  # float32 on a GPU: tl.dot multiplies in TF32

q, k, v = (randn(1, 2, T, 16, seed=i).to(kernel_device()) for i, T in enumerate((20, 37, 37)))  # T_q=20, T_k=37, d=16
for causal in (False, True):
    seen = torch.ones(20, 37, dtype=torch.bool).tril(37 - 20) if causal else torch.ones(20, 37, dtype=torch.bool)
    with KernelWatch() as watch:
        out, lse = triton_flash_attention_forward(q, k, v, causal=causal, block_q=16, block_k=16)
    expect(watch.launched(flash_forward_kernel) == 1, "triton_flash_attention_forward should launch flash_forward_kernel once.",
           "triton_flash_attention_forward 应启动 flash_forward_kernel 一次。")
    qc, kc, vc = q.cpu(), k.cpu(), v.cpu()
    expect_close(out.cpu(), F.scaled_dot_product_attention(qc, kc, vc, attn_mask=seen),
                 f"out should equal F.scaled_dot_product_attention (causal={causal}, bottom-right aligned, blocks of 16).",
                 f"out 应等于 F.scaled_dot_product_attention（causal={causal}，右下对齐，块大小 16）。", **tolerance())
    expect_close(lse.cpu(), torch.logsumexp((qc @ kc.mT / math.sqrt(16)).masked_fill(~seen, float("-inf")), dim=-1),
                 f"lse should be the logsumexp of each query's scaled scores over the keys it sees (causal={causal}).",
                 f"lse 应是每个查询在它能看到的键上缩放后分数的 logsumexp（causal={causal}）。", **tolerance())
print("✓ flash_forward_kernel")

# %% nbgrader={"grade": true, "grade_id": "test_flash_forward_kernel_hidden", "locked": true, "points": 3, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb15
nb15.check_flash_forward_kernel(flash_forward_kernel, triton_flash_attention_forward)
### END HIDDEN TESTS

# %% [markdown]
# ### Against PyTorch and float64 · 与 PyTorch 和 float64 对照
#
# The cell runs your kernel and `F.scaled_dot_product_attention` on the same inputs, causal, with
# lengths that divide nothing, in float32 and in bf16, and prints the largest difference of each
# from attention computed in float64 from the same (rounded) inputs, and which of the two is
# closer. In the interpreter, in float32, both are within a few float32 rounding units of the exact
# answer. On a GPU your kernel's `tl.dot` multiplies float32 blocks in TF32 by default (each operand
# rounded to 10 bits of mantissa, up to 2^-11 of its value), so there it should be further from the
# exact answer than SDPA; the course has not recorded by how much, and the cell prints it when it
# runs on a GPU. In bf16 the output itself is rounded to bf16 (about 3 significant digits, `eps` =
# 0.0078), and the difference of both is of that order. Grading skips this cell: it reads scores.
#
# 下面的单元格在相同的输入上（因果，长度不能被任何分块整除）分别以 float32 和 bf16 运行你的内核和 `F.scaled_dot_product_attention`，并打印每个结果与由同样（已舍入的）输入在 float64 下算出的注意力之间的最大差值。并打印两者中哪个更接近。在解释器中，在 float32 下，两者与精确答案都只差几个 float32 舍入单位。在 GPU 上，你的内核的 `tl.dot` 默认用 TF32 计算 float32 块的乘法（每个操作数被舍入到 10 位尾数，误差最多为其值的 2^-11），所以在那里它应该比 SDPA 离精确答案更远；课程没有记录远多少，在 GPU 上运行时单元格会打印出来。在 bf16 下，输出本身被舍入为 bf16（大约 3 位有效数字，`eps` = 0.0078），两者的差值都在这个量级。评分时跳过这个单元格：评分只读分数。

# %%
# NBVAL_IGNORE_OUTPUT
g = torch.Generator().manual_seed(5)
q, k, v = (torch.randn(2, 4, T, 32, generator=g) for T in (100, 150, 150))
seen = torch.ones(100, 150, dtype=torch.bool).tril(50)
for dtype in () if GRADING else (torch.float32, torch.bfloat16):  # grading reads scores, not this table
    qd, kd, vd = (t.to(dtype).to(DEVICE) for t in (q, k, v))
    exact = F.scaled_dot_product_attention(*(t.cpu().double() for t in (qd, kd, vd)), attn_mask=seen)
    ours, _ = triton_flash_attention_forward(qd, kd, vd, causal=True, block_q=32, block_k=32)
    theirs = F.scaled_dot_product_attention(qd, kd, vd, attn_mask=seen.to(DEVICE))
    mine, sdpa = ((t.cpu().double() - exact).abs().max().item() for t in (ours, theirs))
    closer = "your kernel" if mine < sdpa else "SDPA" if sdpa < mine else "neither"
    print(f"{str(dtype):15} largest |out - exact|: your kernel {mine:.1e}, SDPA {sdpa:.1e} (eps of the dtype "
          f"{torch.finfo(dtype).eps:.1e}); closer to the exact answer: {closer}")

# %% [markdown]
# ## The backward pass, from notebook 14 · 反向计算：来自笔记本 14
#
# The forward saved what FlashAttention-2's backward needs: `out` and one log-sum-exp per query.
# Notebook 14's `flash_attention_backward` recomputes each tile's probabilities as
# `exp(s - lse)` and never holds a `(T_q, T_k)` matrix; the course's version is in
# `utils.flash_attention`. A Triton backward would launch the same tiles as kernels, with the
# key tiles in the grid (FlashAttention-2 gives each program one key tile and loops over the
# queries); here the PyTorch one is reused, so the forward runs on the GPU's fast path and the
# backward is still exact, but slow: it is notebook 14's Python loop over tiles, the path measured
# at the end at 36-834x SDPA's time, so a model trained with this Function would spend its time in
# the backward.
#
# 前向计算保存了 FlashAttention-2 的反向计算所需要的东西：`out` 以及每个查询一个 log-sum-exp。笔记本 14 的 `flash_attention_backward` 把每个分块的概率重新算成 `exp(s - lse)`，从不保存 `(T_q, T_k)` 的矩阵；课程的版本在 `utils.flash_attention` 里。用 Triton 写的反向计算会把同样的分块作为内核启动，把键分块放进网格（FlashAttention-2 让每个程序负责一个键分块并遍历查询）；这里复用 PyTorch 的版本，所以前向计算走 GPU 的快速路径，反向计算仍然是精确的，但很慢：它是笔记本 14 遍历分块的 Python 循环，也就是本笔记本末尾测得用时为 SDPA 的 36-834 倍的那条路径，所以用这个 Function 训练的模型会把时间花在反向计算上。

# %% [markdown]
# ### Exercise 3 · `TritonFlashAttention` · 练习 3
#
# Write the `torch.autograd.Function` whose `forward(ctx, q, k, v, causal=False)` calls your
# `triton_flash_attention_forward` (default blocks), saves `q, k, v, out, lse` with
# `ctx.save_for_backward` and `causal` on `ctx`, and returns `out`; and whose `backward(ctx,
# grad_out)` returns `(dq, dk, dv, None)` from notebook 14's `flash_attention_backward` (imported
# in the first cell). That backward multiplies tensors that must share one dtype, and `lse` is
# float32: call it on float32 copies (`q.float()`, ..., `grad_out.float()`; FlashAttention-2 too
# accumulates its gradients in float32, though it feeds its products 16-bit tiles), and return each
# gradient in its input's dtype (`.to(q.dtype)`). The grader compares every gradient with
# autograd's through `F.scaled_dot_product_attention`.
#
# 写出一个 `torch.autograd.Function`：它的 `forward(ctx, q, k, v, causal=False)` 调用你的 `triton_flash_attention_forward`（使用默认分块），用 `ctx.save_for_backward` 保存 `q, k, v, out, lse`，把 `causal` 放在 `ctx` 上，并返回 `out`；它的 `backward(ctx, grad_out)` 用笔记本 14 的 `flash_attention_backward`（已在第一个单元格中导入）返回 `(dq, dk, dv, None)`。这个反向计算相乘的张量必须是同一个 dtype，而 `lse` 是 float32：请在 float32 副本上调用它（`q.float()`、……、`grad_out.float()`；FlashAttention-2 也在 float32 中累加梯度，尽管它的乘法用的是 16 位的分块）；再把每个梯度以其输入的 dtype 返回（`.to(q.dtype)`）。评分程序把每个梯度与 autograd 通过 `F.scaled_dot_product_attention` 求出的梯度相比较。
#
# <!-- rules: TritonFlashAttention -->
#
# #### Rules that grading checks · 评分检查的规则 (`TritonFlashAttention`)
#
# - Not allowed: `F.scaled_dot_product_attention` (it computes the attention your kernel computes); `utils.flash_triton.triton_flash_attention_forward` (the course's launcher: yours allocates and launches); `utils.flash_triton.flash_forward` (the course's launcher of any kernel it is given); `utils.flash_triton.flash_forward_kernel` (the course's kernel: launch yours); `utils.flash_attention.flash_attention_forward` (notebook 14's forward, in PyTorch); `utils.flash_attention.naive_attention` (the course's attention, in PyTorch); `utils.flash_attention.FlashAttention` (notebook 14's Function, in PyTorch).
# - Not graded (the caller guarantees it): `q`, `k` and `v` share one dtype and one width `d`, a power of two from 16.
# - Not graded (the caller guarantees it): with causal=True, T_q <= T_k (the queries are the last positions).
# - Graded in float32 and bfloat16: `out` and each gradient in its input's dtype (notebook 14's backward run on float32 copies).
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Calls your own earlier exercises of this notebook (the text asks for them): a mistake there shows here too.
# - The `out` forward returns is what your kernel stored; forward saves lse, not the probabilities, and neither forward nor backward builds an intermediate larger than one 64 x 64 tile of every head or than an input or output; causal and the saved tensors live on `ctx`, so two calls in flight keep their own.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（它会直接算出你的内核要算的注意力）；`utils.flash_triton.triton_flash_attention_forward`（课程的启动函数：你的启动函数自己分配输出并启动内核）；`utils.flash_triton.flash_forward`（课程的启动函数，可以启动传给它的任何内核）；`utils.flash_triton.flash_forward_kernel`（课程的内核：请启动你自己的）；`utils.flash_attention.flash_attention_forward`（笔记本 14 的前向计算，用 PyTorch 写成）；`utils.flash_attention.naive_attention`（课程的注意力，用 PyTorch 写成）；`utils.flash_attention.FlashAttention`（笔记本 14 的 Function，用 PyTorch 写成）。
# - 不评分（由调用者保证）：`q`、`k`、`v` 的 dtype 相同，宽度 `d` 也相同，是从 16 起的 2 的幂。
# - 不评分（由调用者保证）：causal=True 时 T_q <= T_k（查询是最后几个位置）。
# - 在 float32、bfloat16 下评分：`out` 和每个梯度都与其输入的 dtype 相同（笔记本 14 的反向计算在 float32 副本上运行）。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 调用你自己在本笔记本中更早完成的练习（正文要求如此）：那里的错误在这里也会体现。
# - forward 返回的 `out` 是你的内核存储的值；forward 保存 lse 而不是概率，forward 和 backward 都不构造比每个头的一个 64 x 64 分块以及任何输入和输出更大的中间张量；causal 和保存的张量放在 `ctx` 上，这样同时进行中的两次调用各自保留自己的。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "TritonFlashAttention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class TritonFlashAttention(torch.autograd.Function):
    """out = TritonFlashAttention.apply(q, k, v, causal): your Triton forward, notebook 14's backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        ### BEGIN SOLUTION
        out, lse = triton_flash_attention_forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_out):
        ### BEGIN SOLUTION
        q, k, v, out, lse = ctx.saved_tensors
        grads = flash_attention_backward(q.float(), k.float(), v.float(), out.float(), lse, grad_out.float(), ctx.causal)
        return (*(g.to(t.dtype) for g, t in zip(grads, (q, k, v))), None)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_TritonFlashAttention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
import torch.nn.functional as F
from autograder.checks import expect, expect_close, randn
from utils.flash_triton import kernel_device, tolerance

expect(isinstance(TritonFlashAttention, type) and issubclass(TritonFlashAttention, torch.autograd.Function),
       "TritonFlashAttention should be a class that subclasses torch.autograd.Function.", "TritonFlashAttention 应是继承 torch.autograd.Function 的类。")
q, k, v, g = (randn(1, 2, T, 16, seed=10 + i) for i, T in enumerate((20, 37, 37, 20)))
seen = torch.ones(20, 37, dtype=torch.bool).tril(37 - 20)
ours = [t.clone().to(kernel_device()).requires_grad_() for t in (q, k, v)]
theirs = [t.clone().requires_grad_() for t in (q, k, v)]
out = TritonFlashAttention.apply(*ours, True)
expected = F.scaled_dot_product_attention(*theirs, attn_mask=seen)
expect_close(out.detach().cpu(), expected.detach(), "TritonFlashAttention.apply(q, k, v, True) should equal causal F.scaled_dot_product_attention.",
             "TritonFlashAttention.apply(q, k, v, True) 应等于因果的 F.scaled_dot_product_attention。", **tolerance())
(out * g.to(kernel_device())).sum().backward()
(expected * g).sum().backward()
for name, a, b in zip("qkv", ours, theirs):
    expect_close(a.grad.cpu(), b.grad, f"The gradient of {name} should equal autograd's through F.scaled_dot_product_attention.",
                 f"{name} 的梯度应等于 autograd 通过 F.scaled_dot_product_attention 求出的梯度。", **tolerance(gradients=True))
print("✓ TritonFlashAttention")

# %% nbgrader={"grade": true, "grade_id": "test_TritonFlashAttention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb15
nb15.check_TritonFlashAttention(TritonFlashAttention)
### END HIDDEN TESTS

# %% [markdown]
# ## What makes a kernel fast · 是什么让内核变快
#
# Four things decide a FlashAttention kernel's speed, and the interpreter shows none of them. The
# first is a tile's **arithmetic intensity**: for each key tile a program reads `BLOCK_K` keys and
# values of `d` numbers (`4 BLOCK_K d` bytes in bf16) and does the two products, `4 BLOCK_Q
# BLOCK_K d` floating-point operations: `BLOCK_Q` operations per byte. A GPU computes its peak only
# when each byte it reads from memory feeds enough operations; below the ratio of its peak to its
# bandwidth, it waits for memory. The cell prints that ratio for the H200 from NVIDIA's datasheet,
# and what query tiles of 16 to 128 give. Keys read by the programs of one head are shared through
# the GPU's cache, which is why tiles of 64 or 128 queries already reach a good share of the peak.
#
# 决定 FlashAttention 内核速度的有四件事，而解释器一件也显示不出来。第一是分块的**算术强度**：对每个键分块，一个程序读取 `BLOCK_K` 个键和值，每个 `d` 个数（bf16 下共 `4 BLOCK_K d` 字节），做两次乘法，即 `4 BLOCK_Q BLOCK_K d` 次浮点运算：每字节 `BLOCK_Q` 次运算。只有当它从显存读取的每个字节都供给足够多的运算时，GPU 才能达到峰值；低于峰值与带宽之比时，它就在等待显存。下面的单元格按 NVIDIA 的数据手册打印 H200 的这个比值，以及 16 到 128 的查询分块能给出多少。同一个头的各个程序读取的键通过 GPU 的缓存共享，所以 64 或 128 个查询的分块就已经能达到峰值的可观比例。
#
# The second is **coalesced loads**: the 32 threads of a warp that read 32 adjacent addresses
# are served by one wide memory transaction. A row of a contiguous tile is `d` adjacent numbers,
# so loading `q`, `k` and `v` along `d` is coalesced; in a transposed view (`q.stride(-1) != 1`)
# adjacent numbers of a row are far apart and each costs its own transaction, which is why the
# launcher copies such inputs once with `.contiguous()`. The third is **`num_warps` and
# `num_stages`**: a program runs on `num_warps` warps of 32 threads (4 by default), and with
# `num_stages` stages (3 by default) Triton pipelines the key loop, loading the next tiles into
# shared memory while the current one is multiplied, at the cost of one set of `k` and `v` tiles
# of shared memory per stage; the cell prints that cost against the H200's 228 KB per streaming
# multiprocessor. The fourth is **`exp2`**: the GPU's special-function unit computes `2^x` in one
# instruction, and `exp(x)` is `exp2(x log2(e))`; FlashAttention folds `log2(e)` into the scale, so
# each score costs one multiply and one `exp2` (Triton's `tl.exp` adds the multiply itself). These
# are chosen per GPU: `utils.bench_triton` autotunes the tiles, warps and stages.
#
# 第二是**合并访存**：一个线程束的 32 个线程读取 32 个相邻地址时，由一次宽的内存事务完成。连续分块的一行是 `d` 个相邻的数，所以沿 `d` 载入 `q`、`k`、`v` 是合并的；在转置的视图中（`q.stride(-1) != 1`），一行中相邻的数在内存中相距很远，每个都要单独一次事务，这就是为什么启动函数先用 `.contiguous()` 把这样的输入复制一次。第三是 **`num_warps` 和 `num_stages`**：一个程序运行在 `num_warps` 个各 32 线程的线程束上（默认 4 个），Triton 用 `num_stages` 级（默认 3 级）把键循环流水化，在乘当前分块的同时把后面的分块载入共享内存，代价是每一级占用一组 `k` 和 `v` 分块的共享内存；单元格打印这个代价，并与 H200 每个流式多处理器的 228 KB 相比。第四是 **`exp2`**：GPU 的特殊函数单元用一条指令计算 `2^x`，而 `exp(x)` 就是 `exp2(x log2(e))`；FlashAttention 把 `log2(e)` 并入缩放因子，于是每个分数只花一次乘法和一次 `exp2`（Triton 的 `tl.exp` 会自己加上这次乘法）。这些都要按 GPU 来选：`utils.bench_triton` 会自动调优分块、线程束和流水线级数。

# %%
H200_BF16_FLOPS, H200_BYTES_PER_S, H200_SMEM_PER_SM = 989e12, 4.8e12, 228 * 1024  # NVIDIA's H200 datasheet and Hopper tuning guide
ridge = H200_BF16_FLOPS / H200_BYTES_PER_S
print(f"H200: {ridge:.0f} floating-point operations per byte read from memory to reach the bf16 peak")
for block_q in (16, 32, 64, 128):
    share = min(1.0, block_q / ridge)
    print(f"  BLOCK_Q = {block_q:3}: {block_q} operations per byte of k and v, at most {share:.0%} of the peak if every tile came from memory")
for d in (64, 128):
    per_stage = 2 * 64 * d * 2  # one 64-key tile of k and one of v, bf16
    print(f"  d = {d:3}, 64-key tiles: {per_stage // 1024} KB of shared memory per pipeline stage; 3 stages {3 * per_stage // 1024} KB "
          f"of the {H200_SMEM_PER_SM // 1024} KB of a streaming multiprocessor")

# %% [markdown]
# ## Measured on a GPU · 在 GPU 上实测
#
# The first cell below prints what the course measured on NVIDIA H200s (torch 2.11 with CUDA 13,
# bf16, 2026-11-26), labelled as such, in two runs: run 1 with a separate script whose kernel is
# written like yours (64 x 64 tiles, `T_q = T_k`), run 2 with `python -m utils.bench_triton`, which
# times the course's model answer (`utils.flash_triton`). Both time it against
# `F.scaled_dot_product_attention` on the same inputs; which of SDPA's kernels ran was not
# recorded, nor was the Triton version (torch 2.11's CUDA wheels bring 3.6). TFLOP/s counts the two
# matrix products of attention, `4 B H T² d` floating-point operations (half of them with the causal
# mask); the H200's dense bf16 peak is 989 TFLOP/s on NVIDIA's datasheet. The second cell measures
# on this machine: on a GPU, your kernel, notebook 14's tiled forward and SDPA, in one run, for T
# from 1K to 16K; without one, it says so and times your kernel in the interpreter at small sizes,
# to show what the interpreter's seconds are (they say nothing about a GPU).
#
# 下面第一个单元格打印课程在 NVIDIA H200 上测得的数字（torch 2.11 加 CUDA 13，bf16，2026-11-26），并如实标注，共两次运行：第 1 次用一个单独的脚本，其中的内核写法与你的相同（64 x 64 的分块，`T_q = T_k`）；第 2 次用 `python -m utils.bench_triton`，它为课程的参考答案（`utils.flash_triton`）计时。两次都在相同的输入上与 `F.scaled_dot_product_attention` 比较；当时运行的是 SDPA 的哪个内核没有记录，Triton 的版本也没有记录（torch 2.11 的 CUDA wheel 带来的是 3.6）。TFLOP/s 统计注意力的两个矩阵乘法，即 `4 B H T² d` 次浮点运算（加因果掩码时为一半）；按 NVIDIA 的数据手册，H200 的稠密 bf16 峰值是 989 TFLOP/s。第二个单元格在这台机器上测量：有 GPU 时，在同一次运行中测量你的内核、笔记本 14 的分块前向计算和 SDPA，T 从 1K 到 16K；没有 GPU 时，它会说明这一点，并在解释器里以小尺寸为你的内核计时，让你看看解释器的秒数是什么样的（它们与 GPU 无关）。

# %%
# Measured by the course on NVIDIA H200s, torch 2.11 + CUDA 13, bf16, 2026-11-26. Run 1: a separate script, a kernel like
# yours (64 x 64 tiles); run 2: python -m utils.bench_triton on utils.flash_triton's kernel (64 x 64 tiles, 4 warps, 3 stages).
H200_RUN1 = [  # (shape, T, kernel time / SDPA time, kernel TFLOP/s, SDPA TFLOP/s), non-causal
    ("B=1 H=16 d=64", 1024, 1.59, None, None),
    ("B=1 H=16 d=64", 4096, 1.54, 253, 390),
    ("B=1 H=16 d=64", 16384, 1.54, 312, 481),
    ("B=4 H=16 d=128", 4096, 1.63, 402, 657),
]
H200_RUN1_CAUSAL = (1.67, 1.85)  # kernel time / SDPA time, causal, the same shapes
H200_RUN2 = {"ratio at T >= 4096": (1.47, 1.80), "best kernel TFLOP/s": 403, "best SDPA TFLOP/s": 686}
NB14_TILED_MS = {"run 1": {"bf16": (1009.5, 1.21), "float32": (728.9, 16.0)},  # notebook 14's table: (tiled forward, SDPA)
                 "run 2": {"bf16": (539.9, 1.14), "float32": (569.7, 15.95)}}  # B=1 H=8 d=64 T=16384, tiles of 256
print("Measured on NVIDIA H200s (the course's figures, not this machine), bf16")
print(f"run 1, non-causal: {'shape':>15} {'T':>6} | kernel time / SDPA time | kernel TFLOP/s | SDPA TFLOP/s")
for shape, T, ratio, ours, theirs in H200_RUN1:
    print(f"{'':19}{shape:>15} {T:>6} | {ratio:>22.2f}x | {ours or '':>14} | {theirs or '':>12}")
print(f"run 1, causal, same shapes: {H200_RUN1_CAUSAL[0]:.2f}x to {H200_RUN1_CAUSAL[1]:.2f}x SDPA's time")
low, high = H200_RUN2["ratio at T >= 4096"]
print(f"run 2, the model answer's kernel, T >= 4096: {low:.2f}x to {high:.2f}x SDPA's time; at best {H200_RUN2['best kernel TFLOP/s']} "
      f"TFLOP/s against SDPA's {H200_RUN2['best SDPA TFLOP/s']}")
ratios = [ratio for _, _, ratio, _, _ in H200_RUN1] + [*H200_RUN1_CAUSAL, low, high]
print(f"over both runs: {min(ratios):.2f}x to {max(ratios):.2f}x SDPA's time")
best = max(402, H200_RUN2["best kernel TFLOP/s"])
print(f"peak: the kernel's best {best} TFLOP/s is {best / 989:.0%} of the H200's 989 dense bf16; SDPA's {657}-{686} are "
      f"{657 / 989:.0%}-{686 / 989:.0%}")
if best / 989 > 64 / (989 / 4.8):  # the arithmetic-intensity bound of 64-query tiles, cell above
    print(f"{best / 989:.0%} is above the {64 / (989 / 4.8):.0%} that 64-query tiles allow if every k and v tile came from memory: "
          "part of them came from the cache")
for run, by_dtype in NB14_TILED_MS.items():
    print(f"notebook 14's tiled forward, {run}: " + ", ".join(f"{dtype} {tiled:.1f} ms against SDPA's {sdpa:.2f} ms, {tiled / sdpa:.0f}x"
                                                              for dtype, (tiled, sdpa) in by_dtype.items()))

# %%
# NBVAL_IGNORE_OUTPUT
from utils.bench_triton import format_rows, measure, peak_tflops, summary

if GPU:
    print(f"{torch.cuda.get_device_name()}: your kernel (64 x 64 tiles), notebook 14's tiled forward and SDPA, bf16, B=1 H=16 d=64")
    rows = measure([(1, 16, 64)], [1024, 2048, 4096, 8192, 16384], causal_modes=(False,), reps=5,
                   forward=triton_flash_attention_forward, autotune=False)
    print(format_rows(rows))
    print(summary(rows))
    if peak_tflops():
        print(f"peak of this GPU: {peak_tflops():.0f} TFLOP/s dense bf16 (datasheet)")
elif GRADING:
    print("Graded: grading reads scores, not timings (the interpreter's table is skipped).")
else:
    print("No GPU here: the kernel runs in Triton's interpreter, one program after another in Python.")
    rows = measure([(1, 2, 16)], [64, 128, 256], causal_modes=(False,), dtype=torch.float32, reps=1,
                   forward=triton_flash_attention_forward, autotune=False)
    print(format_rows(rows))
    print("(query tile, key tile) pairs per head with tiles of 64:", [triton.cdiv(r["T"], 64) ** 2 for r in rows])

# %% [markdown]
# Read the H200 lines first. A kernel like yours, about forty lines, took 1.47x to 1.85x SDPA's
# time over both runs and reached 41 % of the H200's peak; notebook 14's PyTorch loop took 474x to
# 834x SDPA's time in bf16. Triton already does part of what a hand-written kernel does: it
# pipelines the key loop (`num_stages`) and on Hopper GPUs multiplies tiles with asynchronous
# warpgroup instructions, so your loop does overlap the next tile's loads with the current tile's
# products. FlashAttention-2's paper reports 35 % of an H100's peak (another GPU and other code
# than here). The rest of the gap is the subject of FlashAttention-3 (Shah et al., 2024), up to 75 %
# of an H100: warp specialisation (some warps copy tiles with the TMA engine while warpgroups
# multiply), ping-pong scheduling that runs one warpgroup's softmax during another's products, and
# FP8. SDPA's 657-686 TFLOP/s, 66-69 % of the peak, is more than FlashAttention-2 reaches, so that
# was not FlashAttention-2's kernel; which kernel it was is not recorded.
#
# 先看 H200 的几行。一个与你的写法相同、大约四十行的内核，在两次运行中用时为 SDPA 的 1.47 到 1.85 倍，达到 H200 峰值的 41 %；笔记本 14 的 PyTorch 循环在 bf16 下用时为 SDPA 的 474 到 834 倍。Triton 已经替你做了手写内核要做的一部分事：它把键循环流水化（`num_stages`），在 Hopper GPU 上用异步的线程束组指令做分块的乘法，所以你的循环确实让下一个分块的载入与当前分块的乘法重叠。FlashAttention-2 的论文报告的是 H100 峰值的 35 %（与这里的 GPU 和代码都不同）。剩下的差距正是 FlashAttention-3（Shah 等，2024）的主题，它在 H100 上最高达到 75 %：线程束分工（一些线程束用 TMA 引擎复制分块，同时线程束组做乘法）、让一个线程束组的 softmax 与另一个的乘法交替进行的乒乓调度，以及 FP8。SDPA 的 657-686 TFLOP/s，即峰值的 66-69 %，超过了 FlashAttention-2 能达到的水平，所以那不是 FlashAttention-2 的内核；到底是哪个内核没有记录。
#
# If this machine has a GPU, the table above measured your own kernel; its ratio to SDPA at 4K
# tokens and more is the number to compare with the H200's. Without a GPU, the interpreter's
# table shows the other side of the bargain: the same kernel, exact, takes a time that grows with
# the number of (query tile, key tile) pairs (the cell prints them), because each block operation
# of each program is a Python call. That is why grading here uses sequences of a few dozen tokens
# (one row of 512 keys at most), and why the speed of a Triton kernel can only be learned on a GPU.
#
# 如果这台机器有 GPU，上面的表格测量的就是你自己的内核；它在 4K 及以上词元时与 SDPA 的比值，就是要与 H200 的数字相比较的那个数。没有 GPU 时，解释器的表格展示了这笔交易的另一面：同一个内核，结果精确，用时却随（查询分块，键分块）对的数量增长（单元格打印了这些数量），因为每个程序的每个块运算都是一次 Python 调用。这就是为什么这里的评分只用几十个词元的序列（最多一行 512 个键），也是为什么 Triton 内核的速度只能在 GPU 上才能知道。

# %% [markdown]
# ## What comes next · 接下来
#
# The reference of this notebook is `utils/flash_triton.py` (the kernels, their launchers and
# `TritonFlashAttention`), with `utils/bench_triton.py` for the GPU measurement and
# `autograder/checks/nb15/triton_watch.py` for the watch that names out-of-bounds loads. Natural next
# steps, each a kernel of its own: a Triton backward (FlashAttention-2's, with a program per key
# tile that accumulates `dk` and `dv` and adds to `dq` atomically or in a second pass), a causal
# forward that masks only the tiles on the diagonal, and autotuning the block sizes, warps and
# pipeline stages per GPU (`triton.autotune`, which `utils.bench_triton` uses).
#
# 本笔记本的参考实现是 `utils/flash_triton.py`（内核、它们的启动函数和 `TritonFlashAttention`），GPU 测量在 `utils/bench_triton.py` 中，能指出越界载入的观察工具在 `autograder/checks/nb15/triton_watch.py` 中。自然的下一步，每一步都是一个单独的内核：用 Triton 写的反向计算（FlashAttention-2 的做法：每个键分块一个程序，累加 `dk` 和 `dv`，并用原子操作或第二遍计算把贡献加到 `dq` 上），只对对角线上的分块加掩码的因果前向计算，以及针对每种 GPU 自动调优分块大小、线程束数和流水线级数（`triton.autotune`，`utils.bench_triton` 就用了它）。
#
# Sources: P. Tillet, H. T. Kung, D. Cox, *Triton: an intermediate language and compiler for tiled
# neural network computations* (MAPL 2019; Triton-C and its compiler); P. Tillet, *Introducing
# Triton: open-source GPU programming for neural networks* (OpenAI, 2021; Triton 1.0, the language
# in Python); T. Dao, *FlashAttention-2* (2023, arXiv 2307.08691; the loop order, one program per
# query tile, 35 % of an H100's peak); J. Shah et al., *FlashAttention-3* (2024, arXiv 2407.08608;
# warp specialisation, ping-pong scheduling, up to 75 %); Triton's documentation (`tl.load`: a
# masked load without `other` is undefined; the debugging guide: the interpreter does not support
# bfloat16 arithmetic) and its tutorials on softmax and fused attention (2023: `q` scaled in 16 bits,
# `exp2`); triton-lang/triton issue 11584 (bfloat16 `tl.dot` in the interpreter); NVIDIA's H200
# datasheet (989 TFLOP/s dense bf16, 4.8 TB/s) and Hopper tuning guide (228 KB of shared memory per
# SM); Stanford CS336, assignment 2 (a FlashAttention-2 forward in Triton, with block pointers); GPU
# figures: measured for the course on NVIDIA H200s, twice (this notebook's cell says how).
#
# 来源：P. Tillet、H. T. Kung 与 D. Cox，《Triton：用于分块神经网络计算的中间语言与编译器》（MAPL 2019；Triton-C 及其编译器）；P. Tillet，《Triton 简介：面向神经网络的开源 GPU 编程》（OpenAI，2021；Triton 1.0，即 Python 中的语言）；T. Dao，《FlashAttention-2》（2023，arXiv 2307.08691；循环顺序、每个查询分块一个程序、H100 峰值的 35 %）；J. Shah 等，《FlashAttention-3》（2024，arXiv 2407.08608；线程束分工、乒乓调度、最高 75 %）；Triton 的文档（`tl.load`：不带 `other` 的带掩码载入是未定义的；调试指南：解释器不支持 bfloat16 运算）及其关于 softmax 和融合注意力的教程（2023 年版：`q` 在 16 位中缩放，使用 `exp2`）；triton-lang/triton 的第 11584 号问题（解释器中 bfloat16 的 `tl.dot`）；NVIDIA 的 H200 数据手册（稠密 bf16 989 TFLOP/s，4.8 TB/s）与 Hopper 调优指南（每个 SM 228 KB 共享内存）；斯坦福 CS336 作业 2（用 Triton 写 FlashAttention-2 的前向计算，使用块指针）；GPU 上的数字：为本课程在 NVIDIA H200 上测得两次（本笔记本的单元格说明了做法）。
