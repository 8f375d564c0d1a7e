# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 14 · FlashAttention, exact attention in tiles · FlashAttention：分块计算的精确注意力
#
# Every attention in this course so far builds the whole $(T_q, T_k)$ matrix of scores, then its
# softmax, and only then multiplies by the values. Notebook 06 measured that matrix growing with
# $T^2$. FlashAttention (Dao et al., 2022) computes the very same result without ever holding it: it
# walks over the keys one tile at a time, keeps for each query a running maximum and a running sum
# that it rescales whenever the maximum grows, saves those two numbers per query, and in the
# backward pass recomputes each tile instead of storing the probabilities. FlashAttention-2 (Dao,
# 2023) saves a single number per query instead, their log-sum-exp. It is exact, not an approximation, and it is the algorithm
# behind the fused attention kernels that training and serving systems use today.
#
# 到目前为止，本课程里的每一种注意力都会先构造完整的 $(T_q, T_k)$ 分数矩阵，再对它做 softmax，最后才乘以值向量。笔记本 06 测量过这个矩阵随 $T^2$ 增长。FlashAttention（Dao 等，2022）在从不保存这个矩阵的情况下算出完全相同的结果：它一次处理一块键，为每个查询保存一个运行最大值和一个运行和，每当最大值变大时就重新缩放它们；它为每个查询保存这两个数，在反向传播中重新计算每个分块，而不是存下概率。FlashAttention-2（Dao，2023）改为每个查询只保存一个数，即它们的 log-sum-exp。它是精确的，不是近似，今天训练和推理系统所用的融合注意力内核背后正是这个算法。
#
# You will write it in four steps: the online softmax on one row, the tiled forward pass, the
# backward pass that recomputes each tile from the log-sum-exp (FlashAttention-2's), and an
# `autograd.Function` that puts them together. Then you measure on this CPU what it buys: the peak
# memory and the time of naive attention, of your tiled forward and of PyTorch's
# `scaled_dot_product_attention`.
#
# 你将分四步写出它：一行上的在线 softmax、分块的前向计算、根据 log-sum-exp 重新计算每个分块的反向计算（FlashAttention-2 的做法），以及把它们组合起来的 `autograd.Function`。然后你将在这台 CPU 上测量它带来了什么：朴素注意力、你的分块前向计算和 PyTorch 的 `scaled_dot_product_attention` 各自的峰值内存和时间。

# %%
import math
import os

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from utils.bench_flash import format_rows, measure, order_warning, peak_extra_memory
from utils.benchmark import demo_device
from utils.causal import causal_mask
from utils.scaled_attention import scaled_dot_product_attention

GRADING = bool(os.getenv("NBGRADER_EXECUTION"))  # grading measures shorter sequences and skips gradcheck
DEVICE = demo_device()  # the measurements run on a GPU when one is present (grading: the CPU)

# %% [markdown]
# ## The matrix that grows like T² · 随 T² 增长的矩阵
#
# Notebook 03's `scaled_dot_product_attention` returns the weights, a $(T_q, T_k)$ tensor of float32:
# $4 T^2$ bytes per head. The cell prints that size for 4096 and 16384 tokens, then runs the function
# on one head of 4096 tokens and prints the peak memory the call added, measured by the operating
# system (the method is explained in the section on measurements).
#
# 笔记本 03 的 `scaled_dot_product_attention` 会返回权重，即一个 float32 的 $(T_q, T_k)$ 张量：每个头 $4 T^2$ 字节。下面的单元格先打印 4096 和 16384 个词元时这个矩阵的大小，再在一个 4096 个词元的头上运行该函数，并打印这次调用增加的峰值内存（由操作系统测得，测量方法在实测一节中说明）。

# %%
# NBVAL_IGNORE_OUTPUT
T = 4096
q, k, v = (torch.randn(1, 1, T, 64, generator=torch.Generator().manual_seed(i)).to(DEVICE) for i in range(3))
extra, _ = peak_extra_memory(scaled_dot_product_attention, q, k, v)
for t in (4096, 16384):
    print(f"T = {t:5d}: one (T, T) float32 matrix is {4 * t * t / 2**20:5.0f} MiB")
print(f"the inputs q, k, v at T = {T}: {3 * q.numel() * 4 / 2**20:.0f} MiB")
print(f"notebook 03's attention at T = {T}: peak extra memory {extra / 2**20:.0f} MiB")

# %% [markdown]
# The peak the cell printed holds about two such matrices: the scores and the weights exist at the
# same time. The inputs are a few MiB. Whatever the memory of a machine, a long enough text fills it.
#
# 单元格打印的峰值大约包含两个这样的矩阵：分数和权重会同时存在。而输入只有几 MiB。无论机器的内存有多大，足够长的文本都会把它填满。

# %% [markdown]
# ## Online softmax, on numbers you can follow · 在线 softmax：用你能跟上的数字
#
# A stable softmax needs the row's maximum $m$ before anything else: $\operatorname{softmax}(x)_i =
# e^{x_i - m} / \ell$ with $\ell = \sum_j e^{x_j - m}$. That looks like two passes over the whole
# row (one for $m$, then one for $\ell$) before a single output can be written. The trick (Milakov and Gimelshein, 2018) is to read the row in blocks and keep two numbers:
# the maximum $m$ seen so far and the sum $\ell$ of $e^{x_j - m}$ over what was read. When a new
# block brings a larger maximum $m'$, every term already summed was computed with the old $m$, and
# $e^{x_j - m} \cdot e^{m - m'} = e^{x_j - m'}$: multiplying the sum by $e^{m - m'}$ updates it.
#
# 稳定的 softmax 首先需要这一行的最大值 $m$：$\operatorname{softmax}(x)_i = e^{x_i - m} / \ell$，其中 $\ell = \sum_j e^{x_j - m}$。这看起来需要先对整行扫两遍（一遍求 $m$，再一遍求 $\ell$），才能写出任何一个输出。技巧（Milakov 与 Gimelshein，2018）是按块读取这一行，并保存两个数：目前见过的最大值 $m$，以及已读部分的 $e^{x_j - m}$ 之和 $\ell$。当新的块带来更大的最大值 $m'$ 时，已经累加的每一项都是用旧的 $m$ 算的，而 $e^{x_j - m} \cdot e^{m - m'} = e^{x_j - m'}$：把和乘以 $e^{m - m'}$ 就完成了更新。
#
# $$m' = \max(m, \max_{j \in \text{block}} x_j), \qquad \ell' = \ell\, e^{m - m'} + \sum_{j \in \text{block}} e^{x_j - m'} .$$
#
# Take $x = [1, 3, 2, 5]$ in blocks of 2. After the first block $m = 3$ and $\ell = e^{-2} + e^{0}$.
# The second block raises the maximum to 5, so the old sum is multiplied by $e^{3 - 5}$ before
# $e^{2-5} + e^{5-5}$ is added. The cell does exactly these steps with `math.exp` and compares the
# final $\ell$ with the sum computed in one go with the true maximum.
#
# 以 $x = [1, 3, 2, 5]$、块大小为 2 为例。第一个块之后 $m = 3$，$\ell = e^{-2} + e^{0}$。第二个块把最大值提高到 5，所以先把旧的和乘以 $e^{3 - 5}$，再加上 $e^{2-5} + e^{5-5}$。下面的单元格用 `math.exp` 一步步完成这些运算，并把最终的 $\ell$ 与用真正的最大值一次算出的和相比较。

# %%
x = [1.0, 3.0, 2.0, 5.0]
m1 = max(x[0], x[1])
l1 = math.exp(x[0] - m1) + math.exp(x[1] - m1)
print(f"after block [1, 3]: m = {m1}, l = {l1:.4f}")
m2 = max(m1, x[2], x[3])
l2 = l1 * math.exp(m1 - m2) + math.exp(x[2] - m2) + math.exp(x[3] - m2)
print(f"after block [2, 5]: m = {m2}, l = {l1:.4f} * e^({m1} - {m2}) + e^-3 + e^0 = {l2:.4f}")
print(f"one pass with the true maximum: l = {sum(math.exp(xi - 5) for xi in x):.4f}")
print("softmax:", [round(math.exp(xi - m2) / l2, 4) for xi in x])
print("torch  :", [round(p, 4) for p in torch.softmax(torch.tensor(x), dim=0).tolist()])

# %% [markdown]
# Why subtract a maximum at all: $e^{1000}$ does not fit in a float (the cell prints the largest
# float32), so the row $[1000, 1001]$ gives $\infty / \infty$ without it. With the maximum subtracted
# the exponents are $e^{-1}$ and $e^{0}$, and the answer is $[1/(1+e),\ e/(1+e)]$. The cell prints both.
#
# 为什么要减去最大值：$e^{1000}$ 无法用浮点数表示（单元格会打印最大的 float32），所以不减最大值时，行 $[1000, 1001]$ 会得到 $\infty / \infty$。减去最大值后指数变为 $e^{-1}$ 和 $e^{0}$，答案是 $[1/(1+e),\ e/(1+e)]$。下面的单元格把两种结果都打印出来。

# %%
row = torch.tensor([1000.0, 1001.0])
print("exp(x) / sum exp(x)    :", (row.exp() / row.exp().sum()).tolist())
print("exp(x - m) / sum(...)  :", ((row - row.max()).exp() / (row - row.max()).exp().sum()).tolist())
print("[1/(1+e), e/(1+e)]     :", [1 / (1 + math.e), math.e / (1 + math.e)])
big = torch.finfo(torch.float32).max
print(f"largest float32: {big:.3g} = e^{math.log(big):.1f}; exp(1000.0) in float32: {torch.tensor(1000.0).exp()}")

# %% [markdown]
# ### Exercise 1 · `online_softmax` · 练习 1
#
# Return the softmax of `x` along its last dimension, computed in one pass over blocks of
# `block_size` entries (the last block may be shorter), keeping a running maximum `m` and a running
# sum `l` of shape `x.shape[:-1]`, then one elementwise pass `exp(x - m) / l`. No reduction may span
# more than one block: no `x.max(dim=-1)` over the whole row, no `torch.softmax(x)`. Entries equal
# to $-\infty$ get weight 0. Careful with a row whose first blocks are all $-\infty$: there $m$ is
# still $-\infty$ and $-\infty - (-\infty)$ is NaN; shift by 0 instead while $m$ is infinite
# (`torch.where`). Create `m` and `l` with `x.new_full` and `x.new_zeros` so they keep the dtype of `x`.
#
# 返回 `x` 沿最后一维的 softmax：按每块 `block_size` 个元素（最后一块可以更短）扫一遍，保存形状为 `x.shape[:-1]` 的运行最大值 `m` 和运行和 `l`，然后做一次逐元素运算 `exp(x - m) / l`。任何归约都不能跨越一个以上的块：不能对整行做 `x.max(dim=-1)`，也不能用 `torch.softmax(x)`。等于 $-\infty$ 的元素权重为 0。注意开头几块全是 $-\infty$ 的行：那时 $m$ 仍是 $-\infty$，而 $-\infty - (-\infty)$ 是 NaN；在 $m$ 为无穷时改为减去 0（用 `torch.where`）。用 `x.new_full` 和 `x.new_zeros` 创建 `m` 和 `l`，使它们保持 `x` 的 dtype。
#
# <!-- rules: online_softmax -->
#
# #### Rules that grading checks · 评分检查的规则 (`online_softmax`)
#
# - Not graded (the caller guarantees it): block_size >= 1.
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - No reduction over more than `block_size` entries of a row at once (no full-row maximum or sum, also not through a matrix product); one elementwise pass at the end.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：block_size >= 1。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 一次归约不超过一行中的 `block_size` 个元素（不求整行的最大值或和，也不通过矩阵乘法）；最后做一次逐元素的计算。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "online_softmax", "locked": false, "schema_version": 3, "solution": true, "task": false}
def online_softmax(x: torch.Tensor, block_size: int) -> torch.Tensor:
    """Softmax along the last dim, one pass over blocks with a running max and a rescaled running sum."""
    ### BEGIN SOLUTION
    m = x.new_full(x.shape[:-1], float("-inf"))  # running maximum of each row
    l = x.new_zeros(x.shape[:-1])  # running sum of exp(x - m)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start:start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)  # no -inf - (-inf)
        l = l * torch.exp(m - shift) + torch.exp(block - shift[..., None]).sum(dim=-1)
        m = m_new
    shift = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    return torch.exp(x - shift[..., None]) / l[..., None]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_online_softmax", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

x = torch.tensor([[1.0, 3.0, 2.0, 5.0, 0.5], [1000.0, 1001.0, float("-inf"), 999.0, 1000.5]])
expect_close(online_softmax(x, 2), torch.softmax(x, dim=-1),
             "online_softmax(x, 2) should equal torch.softmax(x, dim=-1), also on a row near 1000 with a -inf entry.",
             "online_softmax(x, 2) 应等于 torch.softmax(x, dim=-1)，在接近 1000 且含 -inf 的行上也一样。")
expect_close(online_softmax(x, 1), torch.softmax(x, dim=-1),
             "With block_size=1 every entry is its own block: the running maximum changes often, rescale the sum each time.",
             "block_size=1 时每个元素自成一块：运行最大值经常变化，每次都要重新缩放和。")
print("✓ online_softmax")

# %% nbgrader={"grade": true, "grade_id": "test_online_softmax_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb14
nb14.check_online_softmax(online_softmax)
### END HIDDEN TESTS

# %% [markdown]
# A row of 64 random scores read in blocks of 8: the cell repeats the updates in plain Python and
# draws the running maximum after each block, and the running sum $\ell$ once rescaled to the new
# maximum (before the block's terms are added) and once they are added. Each time the maximum jumps,
# the sum drops by the factor $e^{m - m'}$ and then grows again by the new block's terms. The cell
# also checks your `online_softmax` on the same row against `torch.softmax`.
#
# 一行 64 个随机分数，每块 8 个：单元格用普通的 Python 重复这些更新，画出每块之后的运行最大值，以及运行和 $\ell$ 的两个值：按新的最大值重新缩放之后（加上新块各项之前），和加上新块各项之后。每当最大值跳升，和就按因子 $e^{m - m'}$ 下降，然后再加上新块的各项而增长。单元格还会在同一行上把你的 `online_softmax` 与 `torch.softmax` 相比较。

# %%
scores = torch.randn(64, generator=torch.Generator().manual_seed(4)) * 3
ms, before, after = [], [], []
m, l = float("-inf"), 0.0
for start in range(0, 64, 8):
    block = scores[start:start + 8]
    m_new = max(m, block.max().item())
    before.append(l * math.exp(m - m_new) if l else 0.0)  # the old sum, rescaled to the new maximum
    l = before[-1] + torch.exp(block - m_new).sum().item()
    m = m_new
    ms.append(m); after.append(l)
print("equal to torch.softmax within 1e-6:", torch.allclose(online_softmax(scores, 8), torch.softmax(scores, 0), atol=1e-6))
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3))
left.step(range(1, 9), ms, where="post"); left.set_title("running maximum m"); left.set_xlabel("blocks read")
right.plot(range(1, 9), before, "v", label="old sum × exp(m - m')")
right.plot(range(1, 9), after, "o-", label="after adding the block")
right.set_title("running sum l"); right.set_xlabel("blocks read"); right.legend(fontsize=8)
plt.tight_layout(); plt.show()

# %% [markdown]
# ## Attention in tiles · 分块计算注意力
#
# Attention is a softmax per query followed by a weighted sum of values, and the weighted sum can
# be carried along in the same pass. For a block of queries $Q_i$ and each block of keys and values
# $K_j, V_j$, compute one tile of scores $S = Q_i K_j^\top / \sqrt d$, then update the running maximum
# $m$, the running sum $\ell$ and an accumulator $A$ of shape $(b_q, d_v)$:
#
# 注意力就是对每个查询做 softmax，再对值向量加权求和，而加权求和可以在同一遍扫描中一起完成。对一块查询 $Q_i$ 和每一块键与值 $K_j, V_j$，先算出一个分数分块 $S = Q_i K_j^\top / \sqrt d$，再更新运行最大值 $m$、运行和 $\ell$，以及一个形状为 $(b_q, d_v)$ 的累加器 $A$：
#
# $$m' = \max(m, \operatorname{rowmax} S), \quad P = e^{S - m'}, \quad \ell' = e^{m - m'} \ell + \operatorname{rowsum} P, \quad A' = e^{m - m'} A + P V_j .$$
#
# After the last key block the output is $A / \ell$ (one division per query, not one per tile), and
# the log-sum-exp of the query's scores is $\mathrm{lse} = m + \log \ell$. Only $(b_q, b_k)$ scores
# ever exist at a time. Thanks to the rescaling, the result depends on neither the block sizes nor
# the order of the key blocks: it is the softmax of the whole row, up to float rounding.
#
# 处理完最后一块键之后，输出就是 $A / \ell$（每个查询只除一次，而不是每个分块除一次），查询分数的 log-sum-exp 是 $\mathrm{lse} = m + \log \ell$。任何时刻都只存在 $(b_q, b_k)$ 个分数。由于重新缩放，结果既不依赖于分块大小，也不依赖于键块的顺序：它就是整行的 softmax，只差浮点舍入。
#
# With `causal=True` the mask is bottom-right aligned as in notebook 04: with $T_q \le T_k$ the
# queries are the last $T_q$ positions, and query $i$ sees key $j$ iff $j \le i + (T_k - T_q)$. A tile
# whose first key comes after its last query is entirely masked: skip it, which halves the work of
# a long causal sequence. A tile that crosses the diagonal is computed with the mask applied inside
# it. The picture shows the three kinds of tiles for $T_q = 12$, $T_k = 20$ and blocks of 4.
#
# 当 `causal=True` 时，掩码像笔记本 04 一样右下对齐：$T_q \le T_k$ 时查询是最后 $T_q$ 个位置，查询 $i$ 当且仅当 $j \le i + (T_k - T_q)$ 时能看到键 $j$。如果一个分块的第一个键在它最后一个查询之后，这个分块就被完全屏蔽：跳过它，这让长因果序列的工作量减半。跨越对角线的分块照常计算，只是在分块内部应用掩码。下图给出 $T_q = 12$、$T_k = 20$、块大小为 4 时的三类分块。

# %%
def tile_kinds(T_q, T_k, block_q, block_k):
    """0 = computed without a mask, 1 = computed with the mask inside, 2 = skipped."""
    offset, rows = T_k - T_q, []
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        rows.append([2 if j0 > i1 - 1 + offset else 1 if min(j0 + block_k, T_k) - 1 > i0 + offset else 0
                     for j0 in range(0, T_k, block_k)])
    return torch.tensor(rows)


kinds = tile_kinds(12, 20, 4, 4)
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3))
left.imshow(~causal_mask(12, 20), cmap="Greens"); left.set_title("causal mask (12, 20): green = seen")
right.imshow(kinds, cmap="RdYlGn_r", vmin=0, vmax=2)
for (r, c), kind in zip(torch.cartesian_prod(torch.arange(3), torch.arange(5)).tolist(), kinds.flatten().tolist()):
    right.text(c, r, ["full", "masked", "skipped"][kind], ha="center", va="center", fontsize=8)
right.set_title("tiles of 4 x 4"); right.set_xticks([]); right.set_yticks([])
plt.tight_layout(); plt.show()
print("tiles computed:", int((kinds < 2).sum()), "of", kinds.numel())

# %% [markdown]
# ### Exercise 2 · `flash_attention_forward` · 练习 2
#
# Return `(out, lse)` for `q` of shape `(B, H, T_q, d)`, `k` of shape `(B, H, T_k, d)` and `v` of shape
# `(B, H, T_k, d_v)`: `out` of shape `(B, H, T_q, d_v)` equal to `softmax(q kᵀ / sqrt(d)) v`, and `lse` of
# shape `(B, H, T_q)`, the log-sum-exp of each query's scaled scores over the keys it sees:
# $\mathrm{lse}_i = \log \sum_j e^{q_i \cdot k_j / \sqrt d} = m_i + \log \ell_i$, with $d$ the width of the queries
# and keys (`q.shape[-1]`, not `d_v`). Both come back in the dtype of the inputs. Loop over query
# blocks of `block_q` rows and, inside, over key blocks of `block_k` rows (the last block of each may
# be shorter: `min(i0 + block_q, T_q)`); work on all batch items and heads at once with `...` indexing,
# or loop over them. The grader watches what your function creates: nothing may hold more numbers than
# one `(block_q, block_k)` tile of every batch item and head unless it is no larger than an input or the
# output (so compute scores, probabilities and masks tile by tile, and slice the inputs as they are,
# without padding), and no `F.scaled_dot_product_attention`. With `causal=True` (bottom-right aligned,
# $T_q \le T_k$) skip the tiles entirely above the diagonal, which the grader sees as less arithmetic
# than the same call without the mask, and mask the others with `masked_fill(..., float("-inf"))`.
# The first key tile (keys from 0 on) holds a key that every query sees, so $m$ is finite after it;
# a later tile that masks a whole row leaves that row's $m$, $\ell$ and accumulator as they were.
#
# 对形状为 `(B, H, T_q, d)` 的 `q`、`(B, H, T_k, d)` 的 `k` 和 `(B, H, T_k, d_v)` 的 `v`，返回 `(out, lse)`：`out` 的形状为 `(B, H, T_q, d_v)`，等于 `softmax(q kᵀ / sqrt(d)) v`；`lse` 的形状为 `(B, H, T_q)`，是每个查询在它能看到的键上缩放后分数的 log-sum-exp：$\mathrm{lse}_i = \log \sum_j e^{q_i \cdot k_j / \sqrt d} = m_i + \log \ell_i$，其中 $d$ 是查询和键的宽度（`q.shape[-1]`，不是 `d_v`）。两者都以输入的 dtype 返回。外层循环遍历每块 `block_q` 行的查询，内层循环遍历每块 `block_k` 行的键（每一维的最后一块可以更短：`min(i0 + block_q, T_q)`）；用 `...` 索引同时处理所有样本和头，或者对它们循环。评分程序会观察你的函数创建了什么：任何张量所含的数都不能多于每个样本和每个头的一个 `(block_q, block_k)` 分块，除非它不比某个输入或输出大（所以要逐个分块计算分数、概率和掩码，并直接对输入切片，不要填充），也不能调用 `F.scaled_dot_product_attention`。当 `causal=True`（右下对齐，$T_q \le T_k$）时，跳过完全位于对角线之上的分块（评分程序会看到比不加掩码的同一调用更少的运算），其他分块用 `masked_fill(..., float("-inf"))` 加掩码。第一个键块（从键 0 开始）含有每个查询都能看到的键，所以它之后 $m$ 就是有限的；之后某个分块若把一整行都屏蔽掉，这一行的 $m$、$\ell$ 和累加器都保持不变。
#
# <!-- rules: flash_attention_forward -->
#
# #### Rules that grading checks · 评分检查的规则 (`flash_attention_forward`)
#
# - Not allowed: `F.scaled_dot_product_attention` (it computes the attention this exercise builds tile by tile).
# - Not graded (the caller guarantees it): with causal=True, T_q <= T_k (the queries are the last positions).
# - Graded in float32 and float64: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - No score or probability intermediate larger than one (block_q, block_k) tile, nothing larger than an input or output; with causal=True the tiles entirely above the diagonal are skipped.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（它会直接完成本练习要逐块构造的注意力）。
# - 不评分（由调用者保证）：causal=True 时 T_q <= T_k（查询是最后几个位置）。
# - 在 float32、float64 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 不构造大于一个 (block_q, block_k) 分块的分数或概率中间张量，也不构造大于任何输入或输出的张量；causal=True 时跳过完全位于对角线之上的分块。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "flash_attention_forward", "locked": false, "schema_version": 3, "solution": true, "task": false}
def flash_attention_forward(q, k, v, causal: bool = False, block_q: int = 64, block_k: int = 64):
    """(out (B, H, T_q, d_v), lse (B, H, T_q)) of softmax(q kᵀ / sqrt(d)) v, one tile of scores at a time."""
    ### BEGIN SOLUTION
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale, offset = 1.0 / math.sqrt(q.shape[-1]), T_k - T_q
    out = q.new_empty(*q.shape[:-1], v.shape[-1])  # (B, H, T_q, d_v), written block by block
    lse = q.new_empty(q.shape[:-1])  # (B, H, T_q)
    for i0 in range(0, T_q, block_q):
        i1 = min(i0 + block_q, T_q)
        q_i = q[..., i0:i1, :]  # (B, H, bq, d)
        m = q.new_full(q_i.shape[:-1], float("-inf"))  # (B, H, bq)
        l = q.new_zeros(q_i.shape[:-1])
        acc = q.new_zeros(*q_i.shape[:-1], v.shape[-1])  # (B, H, bq, d_v)
        k_end = min(T_k, i1 + offset) if causal else T_k  # later key tiles are above the diagonal
        for j0 in range(0, k_end, block_k):
            j1 = min(j0 + block_k, T_k)
            s = q_i @ k[..., j0:j1, :].transpose(-2, -1) * scale  # (B, H, bq, bk)
            if causal and j1 - 1 > i0 + offset:  # the tile crosses the diagonal
                blocked = torch.arange(j0, j1, device=q.device)[None, :] > torch.arange(i0, i1, device=q.device)[:, None] + offset
                s = s.masked_fill(blocked, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m - m_new)  # rescales what was summed under the old maximum
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v[..., j0:j1, :]
            m = m_new
        out[..., i0:i1, :] = acc / l[..., None]
        lse[..., i0:i1] = m + torch.log(l)
    return out, lse
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_forward", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import math
import torch
import torch.nn.functional as F
from autograder.checks import expect_close, randn
from utils.causal import causal_mask

from autograder.checks import nb14

with nb14.as_graded(flash_attention_forward):
    q, k, v = randn(2, 2, 5, 8, seed=0), randn(2, 2, 9, 8, seed=1), randn(2, 2, 9, 3, seed=2)  # T_q=5, T_k=9, d_v=3
    for causal in (False, True):
        blocked = causal_mask(5, 9) if causal else torch.zeros(5, 9, dtype=torch.bool)
        out, lse = flash_attention_forward(q, k, v, causal=causal, block_q=2, block_k=4)
        expect_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=~blocked),
                     f"out should equal F.scaled_dot_product_attention (causal={causal}, bottom-right aligned, blocks of 2 and 4).",
                     f"out 应等于 F.scaled_dot_product_attention（causal={causal}，右下对齐，块大小 2 和 4）。")
        expect_close(lse, torch.logsumexp((q @ k.mT / math.sqrt(8)).masked_fill(blocked, float("-inf")), dim=-1),
                     f"lse should be the logsumexp of each query's scaled scores over the keys it sees (causal={causal}).",
                     f"lse 应是每个查询在它能看到的键上缩放后分数的 logsumexp（causal={causal}）。")
    print("✓ flash_attention_forward")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_forward_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb14
nb14.check_flash_attention_forward(flash_attention_forward)
### END HIDDEN TESTS

# %% [markdown]
# ### Against PyTorch · 与 PyTorch 对照
#
# Random shapes, $T_q \ne T_k$, block sizes that divide nothing, causal and not: the cell prints
# the largest difference between your `out` and `F.scaled_dot_product_attention`'s, and float32's
# rounding unit `torch.finfo(torch.float32).eps`. Differences of a few rounding units are float32
# rounding: the tiles add the same terms in another order.
#
# 随机形状、$T_q \ne T_k$、不能整除任何长度的块大小、因果与非因果：单元格打印你的 `out` 与 `F.scaled_dot_product_attention` 结果之间的最大差值，以及 float32 的舍入单位 `torch.finfo(torch.float32).eps`。只有几个舍入单位的差值就是 float32 的舍入误差：分块只是以另一种顺序把同样的项加起来。

# %%
# NBVAL_IGNORE_OUTPUT
g = torch.Generator().manual_seed(5)
for (B, H, T_q, T_k, d, d_v), (bq, bk) in [((1, 4, 37, 100, 16, 16), (16, 24)), ((2, 2, 128, 128, 32, 8), (64, 48)),
                                           ((3, 1, 1, 77, 8, 5), (64, 10))]:
    q, k, v = torch.randn(B, H, T_q, d, generator=g), torch.randn(B, H, T_k, d, generator=g), torch.randn(B, H, T_k, d_v, generator=g)
    for causal in (False, True):
        ours, _ = flash_attention_forward(q, k, v, causal=causal, block_q=bq, block_k=bk)
        theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=~causal_mask(T_q, T_k) if causal else None)
        print(f"T_q={T_q:3d} T_k={T_k:3d} blocks ({bq}, {bk}) causal={causal!s:5}: max difference {(ours - theirs).abs().max():.1e}")
print(f"float32 rounding unit (eps): {torch.finfo(torch.float32).eps:.1e}")

# %% [markdown]
# ## The backward pass from the log-sum-exp · 由 log-sum-exp 计算反向传播
#
# Autograd would save the $(T_q, T_k)$ probabilities for the backward pass, which is exactly what
# the forward avoided. FlashAttention recomputes each tile's probabilities instead. In
# FlashAttention-2's form, which this notebook follows, it saves `lse` and recomputes them as
# $P = e^{S - \mathrm{lse}}$, already normalised (the first version saved $m$ and $\ell$ and
# divided by $\ell$). With $dO$ the gradient of the output, the rules
# for one tile are those of notebook 03's softmax Jacobian, $dS = P \circ (dP - D)$:
#
# 自动求导会为反向传播保存 $(T_q, T_k)$ 的概率，而这正是前向计算所避免的。FlashAttention 改为重新计算每个分块的概率。本笔记本采用 FlashAttention-2 的形式：保存 `lse`，并把概率重新算成 $P = e^{S - \mathrm{lse}}$，它已经归一化了（第一版保存的是 $m$ 和 $\ell$，再除以 $\ell$）。设 $dO$ 是输出的梯度，一个分块的规则来自笔记本 03 的 softmax 雅可比矩阵，即 $dS = P \circ (dP - D)$：
#
# $$dV_j \mathrel{+}= P^\top dO_i, \quad dP = dO_i V_j^\top, \quad dS = P \circ (dP - D_i), \quad dQ_i \mathrel{+}= \frac{dS\, K_j}{\sqrt d}, \quad dK_j \mathrel{+}= \frac{dS^\top Q_i}{\sqrt d} .$$
#
# $D$ is one number per query: $D_i = \sum_j P_{ij}\, dP_{ij}$, a sum over all keys, which no single
# tile knows. But $dP_{ij} = dO_i \cdot v_j$, so $\sum_j P_{ij}\,(dO_i \cdot v_j) = dO_i \cdot \sum_j P_{ij} v_j
# = dO_i \cdot O_i$: $D = \operatorname{rowsum}(dO \circ O)$, which FlashAttention-2 computes once from the
# output, before the loops. The cell checks the identity on a small example with the full matrix.
#
# $D$ 是每个查询一个数：$D_i = \sum_j P_{ij}\, dP_{ij}$，它是对所有键求和，任何单个分块都不知道它。但 $dP_{ij} = dO_i \cdot v_j$，所以 $\sum_j P_{ij}\,(dO_i \cdot v_j) = dO_i \cdot \sum_j P_{ij} v_j = dO_i \cdot O_i$：$D = \operatorname{rowsum}(dO \circ O)$，FlashAttention-2 在循环之前由输出把它算一次。下面的单元格在一个使用完整矩阵的小例子上验证这个恒等式。

# %%
g = torch.Generator().manual_seed(6)
q, k, v, dO = (torch.randn(4, 8, generator=g) for _ in range(4))
P = torch.softmax(q @ k.T / math.sqrt(8), dim=-1)
O = P @ v
print("rowsum(P * dP):", (P * (dO @ v.T)).sum(-1))
print("rowsum(dO * O):", (dO * O).sum(-1))

# %% [markdown]
# ### Exercise 3 · `flash_attention_backward` · 练习 3
#
# Return `(dq, dk, dv)`, the gradients of the forward's `out` for the incoming gradient `grad_out`,
# given `q, k, v`, the forward's `out` and `lse`. Compute `D = (grad_out * out).sum(-1)` once, start
# `dq, dk, dv` at zero (`torch.zeros_like`, so they keep the inputs' dtype), and loop over tiles
# (FlashAttention's backward, in both versions, puts the key blocks outside and the query blocks
# inside; either order is right),
# recomputing `P = exp(s - lse[..., i0:i1, None])` with the same mask and the same skipped tiles as
# the forward. The grader watches this function as it watches the forward: nothing larger than a tile
# of every head unless it is no larger than an input or output, and with `causal=True` less
# arithmetic than without the mask. Do not call autograd: this is the backward pass.
#
# 给定 `q, k, v` 以及前向计算的 `out` 和 `lse`，对传入的梯度 `grad_out` 返回前向 `out` 的梯度 `(dq, dk, dv)`。先算一次 `D = (grad_out * out).sum(-1)`，把 `dq, dk, dv` 初始化为零（用 `torch.zeros_like`，使它们保持输入的 dtype），然后遍历各个分块（FlashAttention 两个版本的反向计算都把键块放在外层循环、查询块放在内层；两种顺序都对），用与前向相同的掩码和相同的跳过规则重新计算 `P = exp(s - lse[..., i0:i1, None])`。评分程序像观察前向计算一样观察这个函数：除非不比某个输入或输出大，任何张量都不能大于每个头的一个分块；并且 `causal=True` 时的运算要比不加掩码时少。不要调用自动求导：这本身就是反向传播。
#
# <!-- rules: flash_attention_backward -->
#
# #### Rules that grading checks · 评分检查的规则 (`flash_attention_backward`)
#
# - Not allowed: `F.scaled_dot_product_attention` (it computes the attention this exercise builds tile by tile); `torch.autograd.grad` (the gradients are this exercise's to compute from lse); `torch.autograd.backward` (the gradients are this exercise's to compute from lse); `Tensor.backward` (the gradients are this exercise's to compute from lse).
# - Not graded (the caller guarantees it): with causal=True, T_q <= T_k (the queries are the last positions).
# - Graded in float32 and float64: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - No score or probability intermediate larger than one (block_q, block_k) tile, nothing larger than an input or output; with causal=True the tiles entirely above the diagonal are skipped.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（它会直接完成本练习要逐块构造的注意力）；`torch.autograd.grad`（梯度要由本练习根据 lse 计算）；`torch.autograd.backward`（梯度要由本练习根据 lse 计算）；`Tensor.backward`（梯度要由本练习根据 lse 计算）。
# - 不评分（由调用者保证）：causal=True 时 T_q <= T_k（查询是最后几个位置）。
# - 在 float32、float64 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 不构造大于一个 (block_q, block_k) 分块的分数或概率中间张量，也不构造大于任何输入或输出的张量；causal=True 时跳过完全位于对角线之上的分块。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "flash_attention_backward", "locked": false, "schema_version": 3, "solution": true, "task": false}
def flash_attention_backward(q, k, v, out, lse, grad_out, causal: bool = False, block_q: int = 64, block_k: int = 64):
    """(dq, dk, dv) of flash_attention_forward, each tile's probabilities recomputed from lse."""
    ### BEGIN SOLUTION
    T_q, T_k = q.shape[-2], k.shape[-2]
    scale, offset = 1.0 / math.sqrt(q.shape[-1]), T_k - T_q
    D = (grad_out * out).sum(dim=-1)  # (B, H, T_q) = rowsum(P * dP), without P
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    for j0 in range(0, T_k, block_k):
        j1 = min(j0 + block_k, T_k)
        k_j, v_j = k[..., j0:j1, :], v[..., j0:j1, :]
        for i0 in range(0, T_q, block_q):
            i1 = min(i0 + block_q, T_q)
            if causal and j0 > i1 - 1 + offset:  # entirely above the diagonal
                continue
            q_i, do_i = q[..., i0:i1, :], grad_out[..., i0:i1, :]
            s = q_i @ k_j.transpose(-2, -1) * scale  # (B, H, bq, bk)
            if causal and j1 - 1 > i0 + offset:
                blocked = torch.arange(j0, j1, device=q.device)[None, :] > torch.arange(i0, i1, device=q.device)[:, None] + offset
                s = s.masked_fill(blocked, float("-inf"))
            p = torch.exp(s - lse[..., i0:i1, None])  # the forward's probabilities, recomputed
            dv[..., j0:j1, :] += p.transpose(-2, -1) @ do_i
            ds = p * (do_i @ v_j.transpose(-2, -1) - D[..., i0:i1, None])
            dq[..., i0:i1, :] += ds @ k_j * scale
            dk[..., j0:j1, :] += ds.transpose(-2, -1) @ q_i * scale
    return dq, dk, dv
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_backward", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
import torch.nn.functional as F
from autograder.checks import expect_close, randn
from utils.causal import causal_mask
from utils.flash_attention import flash_attention_forward as reference_forward

from autograder.checks import nb14

with nb14.as_graded(flash_attention_backward):
    q, k, v, g = randn(2, 2, 5, 8, seed=0), randn(2, 2, 9, 8, seed=1), randn(2, 2, 9, 3, seed=2), randn(2, 2, 5, 3, seed=3)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    (F.scaled_dot_product_attention(*leaves, attn_mask=~causal_mask(5, 9)) * g).sum().backward()
    out, lse = reference_forward(q, k, v, causal=True, block_q=2, block_k=4)
    grads = flash_attention_backward(q, k, v, out, lse, g, causal=True, block_q=2, block_k=4)
    for name, ours, leaf in zip(("dq", "dk", "dv"), grads, leaves):
        expect_close(ours, leaf.grad, f"{name} should equal autograd's gradient of F.scaled_dot_product_attention (causal, blocks of 2 and 4).",
                     f"{name} 应等于 autograd 对 F.scaled_dot_product_attention 求出的梯度（因果，块大小 2 和 4）。")
    print("✓ flash_attention_backward")

# %% nbgrader={"grade": true, "grade_id": "test_flash_attention_backward_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb14
nb14.check_flash_attention_backward(flash_attention_backward)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 4 · `FlashAttention` · 练习 4
#
# Wire both into autograd. A `torch.autograd.Function` has two static methods: `forward(ctx, ...)`
# computes the output and stores what the backward needs with `ctx.save_for_backward(...)` (tensors)
# or as attributes of `ctx` (anything else), and `backward(ctx, grad_out)` returns one gradient per
# input of `forward`, `None` for an input that is not a tensor. Call it as `FlashAttention.apply(q,
# k, v, causal)`. Save `q, k, v, out, lse`, never the probabilities; use the default block sizes. Keep
# `causal` on `ctx` too, not on the class or in a global: a model can run two calls' forwards before
# either backward, and the grader does.
#
# 把两者接入自动求导。`torch.autograd.Function` 有两个静态方法：`forward(ctx, ...)` 计算输出，并用 `ctx.save_for_backward(...)`（张量）或 `ctx` 的属性（其他东西）保存反向传播需要的内容；`backward(ctx, grad_out)` 为 `forward` 的每个输入返回一个梯度，非张量的输入返回 `None`。调用方式是 `FlashAttention.apply(q, k, v, causal)`。保存 `q, k, v, out, lse`，绝不保存概率；使用默认的分块大小。`causal` 也要放在 `ctx` 上，不要放在类上或全局变量里：模型可能先运行两次调用的 forward，再运行其中任何一次的 backward，评分程序就会这样做。
#
# <!-- rules: FlashAttention -->
#
# #### Rules that grading checks · 评分检查的规则 (`FlashAttention`)
#
# - Not allowed: `F.scaled_dot_product_attention` (it computes the attention this exercise builds tile by tile); `utils.flash_attention.flash_attention_forward` (the course's version: call your own, from exercises 2 and 3); `utils.flash_attention.flash_attention_backward` (the course's version: call your own, from exercises 2 and 3).
# - Not graded (the caller guarantees it): with causal=True, T_q <= T_k (the queries are the last positions).
# - Graded in float32 and float64: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Calls your own earlier exercises of this notebook (the text asks for them): a mistake there shows here too.
# - forward saves q, k, v, out and lse (not the probabilities); backward calls your `flash_attention_backward`.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（它会直接完成本练习要逐块构造的注意力）；`utils.flash_attention.flash_attention_forward`（这是课程的版本：请调用你自己在练习 2 和 3 中写的）；`utils.flash_attention.flash_attention_backward`（这是课程的版本：请调用你自己在练习 2 和 3 中写的）。
# - 不评分（由调用者保证）：causal=True 时 T_q <= T_k（查询是最后几个位置）。
# - 在 float32、float64 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 调用你自己在本笔记本中更早完成的练习（正文要求如此）：那里的错误在这里也会体现。
# - forward 保存 q、k、v、out 和 lse（不保存概率）；backward 调用你自己的 `flash_attention_backward`。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "FlashAttention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class FlashAttention(torch.autograd.Function):
    """out = FlashAttention.apply(q, k, v, causal): exact attention that saves lse, not the probabilities."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        ### BEGIN SOLUTION
        out, lse = flash_attention_forward(q, k, v, causal)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out
        ### END SOLUTION

    @staticmethod
    def backward(ctx, grad_out):
        ### BEGIN SOLUTION
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = flash_attention_backward(q, k, v, out, lse, grad_out, ctx.causal)
        return dq, dk, dv, None  # no gradient for causal
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_FlashAttention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
import torch.nn.functional as F
from autograder.checks import expect, expect_close, randn
from utils.causal import causal_mask

expect(isinstance(FlashAttention, type) and issubclass(FlashAttention, torch.autograd.Function),
       "FlashAttention should be a class that subclasses torch.autograd.Function.", "FlashAttention 应是继承 torch.autograd.Function 的类。")
q, k, v, g = randn(1, 2, 6, 4, seed=10), randn(1, 2, 8, 4, seed=11), randn(1, 2, 8, 3, seed=12), randn(1, 2, 6, 3, seed=13)
ours = [t.clone().requires_grad_() for t in (q, k, v)]
theirs = [t.clone().requires_grad_() for t in (q, k, v)]
out = FlashAttention.apply(*ours, True)
expected = F.scaled_dot_product_attention(*theirs, attn_mask=~causal_mask(6, 8))
expect_close(out, expected, "FlashAttention.apply(q, k, v, True) should equal causal F.scaled_dot_product_attention.",
             "FlashAttention.apply(q, k, v, True) 应等于因果的 F.scaled_dot_product_attention。")
(out * g).sum().backward()
(expected * g).sum().backward()
for name, a, b in zip("qkv", ours, theirs):
    expect_close(a.grad, b.grad, f"The gradient of {name} should equal autograd's through F.scaled_dot_product_attention.",
                 f"{name} 的梯度应等于 autograd 通过 F.scaled_dot_product_attention 求出的梯度。")
print("✓ FlashAttention")

# %% nbgrader={"grade": true, "grade_id": "test_FlashAttention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb14
nb14.check_FlashAttention(FlashAttention)
### END HIDDEN TESTS

# %% [markdown]
# `torch.autograd.gradcheck` compares the gradients of a function with finite differences, input by
# input, in float64 (float32 rounding would drown the comparison). The cell runs it on your
# `FlashAttention` with and without the mask, and prints what the autograd graph keeps for the
# backward pass: the saved tensors' shapes, none of them $(T_q, T_k)$.
#
# `torch.autograd.gradcheck` 在 float64 下（float32 的舍入误差会淹没比较）逐个输入地把函数的梯度与有限差分相比较。下面的单元格在有掩码和无掩码两种情况下对你的 `FlashAttention` 运行它，并打印自动求导图为反向传播保存了什么：所保存张量的形状，其中没有一个是 $(T_q, T_k)$。

# %%
# NBVAL_IGNORE_OUTPUT
gen = torch.Generator().manual_seed(7)
inputs = [torch.randn(1, 2, T, d, dtype=torch.float64, generator=gen, requires_grad=True)
          for T, d in ((3, 4), (5, 4), (5, 3))]  # T_q = 3, T_k = 5, d_v = 3
if GRADING:
    print("Not run while grading: gradcheck scores no points (the hidden tests compare finite differences themselves).")
else:
    for causal in (False, True):
        print(f"gradcheck, causal={causal}:", torch.autograd.gradcheck(lambda *t: FlashAttention.apply(*t, causal), inputs))
out = FlashAttention.apply(*inputs, True)
print("saved for backward:", [tuple(t.shape) for t in out.grad_fn.saved_tensors])

# %% [markdown]
# ## Why it matters, measured · 为什么重要：实测
#
# The cell measures, on this CPU, one head with $d = 64$ and $T$ from 1024 to 16384 tokens: the peak
# extra memory and the time of notebook 03's attention (naive), of your `flash_attention_forward`
# with blocks of 256 (tiled) and of `F.scaled_dot_product_attention` (SDPA), one after the other in
# the same run, with their outputs checked equal. Memory is measured, not computed: on Linux,
# `utils.bench_flash.peak_extra_memory` resets the process's high-water mark of resident memory
# (`/proc/self/clear_refs`), runs the call and reads the new mark (`VmHWM`). That counts every page
# the call touches, the buffers inside PyTorch's C++ kernels included. torch has no always-on
# allocation counters for the CPU like `torch.cuda.memory_stats` (its profiler can record CPU
# allocations, at the cost of tracing every one). The same measurement runs from a terminal with `python -m utils.bench_flash`.
# Where a GPU is present, the memory and time cells of this notebook run there
# (`utils.benchmark.demo_device()`) and measure the GPU, its memory read from `torch.cuda.max_memory_allocated`.
#
# 下面的单元格在这台 CPU 上测量一个 $d = 64$ 的头、$T$ 从 1024 到 16384 个词元时，笔记本 03 的注意力（朴素）、你的 `flash_attention_forward`（块大小 256，分块）和 `F.scaled_dot_product_attention`（SDPA）的峰值额外内存与时间：在同一次运行中依次测量，并检查它们的输出相等。内存是测出来的，不是算出来的：在 Linux 上，`utils.bench_flash.peak_extra_memory` 会重置进程常驻内存的高水位（`/proc/self/clear_refs`），运行调用，再读取新的高水位（`VmHWM`）。这会计入调用触及的每一页内存，包括 PyTorch C++ 内核内部的缓冲区。torch 没有像 `torch.cuda.memory_stats` 那样为 CPU 常开的分配计数（它的性能分析器可以记录 CPU 上的分配，代价是跟踪每一次分配）。同样的测量也可以在终端里用 `python -m utils.bench_flash` 运行。有 GPU 时，本笔记本测量内存和时间的单元格在 GPU 上运行（`utils.benchmark.demo_device()`），测的是 GPU，内存取自 `torch.cuda.max_memory_allocated`。

# %%
# NBVAL_IGNORE_OUTPUT
tokens = [512, 1024, 2048] if GRADING else [1024, 2048, 4096, 8192, 16384]
rows = measure(tokens, d=64, tiled=flash_attention_forward, block=256, device=DEVICE)
print(format_rows(rows))
last = rows[-1]
print(f"one 256 x 256 float32 tile: {256 * 256 * 4 / 2**10:.0f} KiB; the output at T = {last['T']}: "
      f"{last['T'] * 64 * 4 / 2**20:.1f} MiB")
ratio = last["naive MiB"] / last["tiled MiB"]
print(f"at T = {last['T']}: naive attention needed {ratio:.0f}x the peak extra memory of your tiled forward "
      f"(goal at T = 16384: at least 50x)")
print(order_warning(rows) or "every time column grows with T: no sign of a disturbed run")
print("tiled / naive time: " + ", ".join(f"{r['T']}: {r['tiled s'] / r['naive s']:.2f}x" for r in rows)
      + f"; at T = {last['T']} the {'tiled forward' if last['tiled s'] < last['naive s'] else 'naive attention'} was faster")
sdpa_first = all(r["SDPA s"] < min(r["naive s"], r["tiled s"]) for r in rows)
print(f"SDPA the fastest of the three at every T: {sdpa_first}")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.6))
for name, style in (("naive", "o-"), ("tiled", "s-"), ("SDPA", "^-")):
    left.loglog([r["T"] for r in rows], [r[f"{name} MiB"] for r in rows], style, base=2, label=name)
    right.loglog([r["T"] for r in rows], [r[f"{name} s"] for r in rows], style, base=2, label=name)
left.set_xlabel("T (tokens)"); left.set_ylabel("peak extra memory (MiB)"); left.set_title("memory: T² against T")
right.set_xlabel("T (tokens)"); right.set_ylabel("seconds"); right.set_title("time of one forward pass")
left.legend(); right.legend(); plt.tight_layout(); plt.show()

# %% [markdown]
# Read the table the cell printed. Naive attention's memory grows about 4x each time $T$ doubles:
# two $(T, T)$ matrices live at once. The tiled forward's grows far more slowly, with $T$ rather
# than $T^2$: it holds the output (the cell prints its size at the largest $T$), a few tiles of
# $256 \times 256$ (256 KiB each in float32) and the accumulators of one block of queries. If you
# collected the output blocks in a list and concatenated them at the end, your peak holds the
# output twice. The last line prints the ratio at the largest $T$. PyTorch's SDPA on the CPU is a
# flash-style kernel of its own, so its memory stays low too.
#
# 请阅读单元格打印的表格。$T$ 每翻一倍，朴素注意力的内存大约增长 4 倍：同时存在两个 $(T, T)$ 矩阵。分块前向计算的内存增长得慢得多，随 $T$ 而不是 $T^2$ 增长：它持有输出（单元格打印了最大 $T$ 时输出的大小）、几个 $256 \times 256$ 的分块（float32 下每个 256 KiB）以及一块查询的累加器。如果你把输出的各块收集在一个列表里、最后再拼接，峰值就会持有两份输出。最后一行打印出最大 $T$ 时的比值。PyTorch 在 CPU 上的 SDPA 本身就是一个 FlashAttention 式的内核，所以它的内存也很低。
#
# ### What the backward's recomputation costs · 反向计算中重新计算的代价
#
# Saving `lse` instead of the probabilities trades arithmetic for memory. For each tile it keeps,
# your backward does five matrix products (the scores again, $P^\top dO$, $dO\,V^\top$, $dS\,K$ and
# $dS^\top Q$) where the forward did two, so a forward and a backward pass through `FlashAttention`
# do seven products per tile, where naive attention with autograd, which stores $P$, does six. What
# the extra product buys is memory: the cell measures, for one causal head of 2048 tokens, the peak
# extra memory and the time of a forward and a backward pass through naive attention
# (`utils.flash_attention.naive_attention`, whose autograd graph keeps the $(T, T)$ probabilities)
# and through your `FlashAttention`.
#
# 保存 `lse` 而不是概率，是用运算换内存。对每个保留的分块，你的反向计算要做五次矩阵乘法（再算一次分数、$P^\top dO$、$dO\,V^\top$、$dS\,K$ 和 $dS^\top Q$），而前向计算只做两次，所以经过 `FlashAttention` 的一次前向加一次反向，每个分块做七次乘法；而自动求导下的朴素注意力保存了 $P$，只做六次。多出的这一次乘法换来的是内存：下面的单元格对一个 2048 个词元的因果头，测量经过朴素注意力（`utils.flash_attention.naive_attention`，它的自动求导图保存 $(T, T)$ 的概率）和经过你的 `FlashAttention` 的一次前向加一次反向的峰值额外内存与时间。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.bench_flash import peak_memory_and_time
from utils.flash_attention import naive_attention

T_b = 512 if GRADING else 2048
g = torch.Generator().manual_seed(9)
q, k, v = (torch.randn(1, 1, T_b, 64, generator=g).to(DEVICE).requires_grad_() for _ in range(3))
grad_out = torch.randn(1, 1, T_b, 64, generator=g).to(DEVICE)
passes = {"naive attention, autograd (keeps P)": lambda q, k, v: naive_attention(q, k, v, causal=True)[0].backward(grad_out),
          "your FlashAttention (keeps lse)": lambda q, k, v: FlashAttention.apply(q, k, v, True).backward(grad_out)}
for name, forward_backward in passes.items():
    forward_backward(q, k, v)  # warm-up
    q.grad = k.grad = v.grad = None
    extra, seconds, _ = peak_memory_and_time(forward_backward, q, k, v)  # measured on q's device
    q.grad = k.grad = v.grad = None
    print(f"{name:36} forward + backward, T = {T_b}, causal: peak extra memory {extra / 2**20:6.1f} MiB, {seconds:.3f} s")

# %% [markdown]
# Read the two lines: the backward that recomputes needs a small fraction of the memory of the one
# that keeps $P$, and that is what lets FlashAttention train on long sequences; the extra product
# per tile is its price.
#
# 读一读这两行：重新计算的反向传播所需的内存只是保存 $P$ 的那种的一小部分，这正是 FlashAttention 能在长序列上训练的原因；每个分块多出的一次乘法是它的代价。

# %% [markdown]
# ### Where the time goes · 时间花在哪里
#
# Time depends on more than arithmetic. Your tiled forward does the same arithmetic as the naive one,
# organised differently. Naive attention runs a few large operations, but writes two $(T, T)$ matrices
# to main memory and reads them back (at 16384 tokens, two of the 1024 MiB matrices the first cell
# printed). Your tiled forward keeps every intermediate as small as a tile, but it is a Python loop
# that launches a few PyTorch operations per tile, $(T / 256)^2$ tiles in all, and each launch costs
# microseconds. Which of the two costs more depends on $T$ and on the machine: the timing cell
# printed the tiled time over the naive one at each $T$. Read it only if that cell found every
# column growing with $T$; if it printed a warning, the machine was busy during the run, and the
# cell should be run again before drawing conclusions.
#
# 时间取决于的不只是算术。你的分块前向计算与朴素实现做的算术相同，只是组织方式不同。朴素注意力只运行几个大的运算，但要把两个 $(T, T)$ 矩阵写入主内存再读回来（在 16384 个词元时，就是第一个单元格打印的两个 1024 MiB 的矩阵）。你的分块前向计算让每个中间结果都只有一个分块那么小，但它是 Python 循环，每个分块启动几个 PyTorch 运算，总共 $(T / 256)^2$ 个分块，每次启动都要花几微秒。两者哪个代价更高取决于 $T$ 和机器：计时单元格打印了每个 $T$ 下分块时间与朴素时间之比。只有当那个单元格发现每一列都随 $T$ 增长时才去读它；如果它打印了警告，说明运行时机器很忙，应先重新运行这个单元格，再下结论。
#
# SDPA is a **fused kernel**: one C++ function that keeps a tile in cache while it computes the
# scores, the exponentials, the running sums and the product with $V$, with no intermediate larger
# than a tile, and that spreads the tiles over the cores. Compare its column with the other two
# (the cell also said whether it was the fastest at every $T$): that is what fusing is worth on
# this machine. Yours is a teaching kernel: it has the memory of FlashAttention; the speed is what a
# fused kernel adds, and on a GPU that is far more than on this CPU (below).
#
# SDPA 是一个**融合内核**：一个 C++ 函数把一个分块留在缓存里，同时计算分数、指数、运行和以及与 $V$ 的乘积，没有任何比一个分块更大的中间结果，并把各个分块分配到多个核心上。把它的一列与另外两列比较（单元格也说明了它是否在每个 $T$ 下都最快）：这就是融合在这台机器上的价值。你的是教学用的内核：它有 FlashAttention 的内存；速度则是融合内核额外带来的，而在 GPU 上这部分远比在这台 CPU 上大（见下文）。
#
# ### On a GPU · 在 GPU 上
#
# On a GPU the point is speed as much as memory. An A100 has 40-80 GB of high-bandwidth memory (HBM)
# at 1.5-2.0 TB/s, and 192 KB of on-chip SRAM in each of its 108 streaming multiprocessors at about
# 19 TB/s (the FlashAttention paper's figures). Attention with the full matrix writes $S$ and $P$
# to HBM and reads them back: its time goes to moving data, not to arithmetic. FlashAttention loads
# a tile of $Q$, $K$ and $V$ into SRAM, does all the work of that tile there and writes only the
# output: fewer HBM accesses, which the paper turns into a 3x speedup on GPT-2 at 1K tokens and the
# first better-than-chance results on Path-X (16K tokens).
#
# 在 GPU 上，重点既是内存也是速度。一块 A100 有 40-80 GB 的高带宽显存（HBM），带宽为 1.5-2.0 TB/s；它的 108 个流式多处理器每个都有 192 KB 的片上 SRAM，带宽约 19 TB/s（FlashAttention 论文中的数字）。使用完整矩阵的注意力要把 $S$ 和 $P$ 写入 HBM 再读回来：它的时间花在搬运数据上，而不是算术上。FlashAttention 把 $Q$、$K$、$V$ 的一个分块载入 SRAM，在那里完成这个分块的全部工作，只写出输出：HBM 访问更少，论文由此在 1K 词元的 GPT-2 上得到 3 倍加速，并在 Path-X（16K 词元）上第一次得到优于随机猜测的结果。

# %% [markdown]
# ### Your loop on a GPU · 你的循环在 GPU 上
#
# The course's reference of your forward, `utils.flash_attention.flash_attention_forward` (the same
# loop, blocks of 256), was also run on a GPU against `F.scaled_dot_product_attention`, for one
# batch item with 8 heads of 64 and 16,384 tokens, not causal, on two H200 machines. Your machine
# cannot repeat that here, so the cell prints the figures from a table, labelled with the machines
# that produced them: an NVIDIA H200, torch 2.11 with CUDA 13, each time the median of several runs
# timed with CUDA events after a warm-up; the errors are the largest difference from float64 at
# 1024 tokens (run 2 compares with float64 computed from the same bfloat16 inputs).
#
# 课程中与你的前向计算对应的参考实现 `utils.flash_attention.flash_attention_forward`（同样的循环，块大小 256）也在一块 GPU 上与 `F.scaled_dot_product_attention` 比较过：一个样本、8 个宽 64 的头、16,384 个词元、非因果，在两台 H200 机器上。你的机器无法在这里重复这个测量，所以单元格从一张表中打印这些数字，并标明得出它们的机器：一块 NVIDIA H200，torch 2.11 加 CUDA 13，每个时间都是预热之后用 CUDA 事件计时的若干次运行的中位数；误差是 1024 个词元时与 float64 的最大差值（第 2 次运行与由同样的 bfloat16 输入算出的 float64 结果比较）。

# %%
# Measured on an NVIDIA H200 (torch 2.11, CUDA 13), two machines, 2026-11-26: run 1 for the course's reference
# figures, run 2 again for this text. utils.flash_attention.flash_attention_forward (blocks of 256) against
# F.scaled_dot_product_attention, B=1, H=8, d=64, T=16384, not causal; medians of CUDA-event timings after a warm-up.
H200_MS = {"run 1": {"bfloat16": (1009.5, 1.21), "float32": (728.9, 16.0)},  # (tiled forward, SDPA) in ms
           "run 2": {"bfloat16": (539.9, 1.14), "float32": (569.7, 15.95)}}
H200_PEAK_MIB = {"naive": 8208, "tiled": 21}  # the forward in bfloat16, run 1 (run 2: 8209 and 21)
H200_ERROR = {"run 1": {"tiled": 1.4e-2, "naive": 1.4e-2, "SDPA": 8.3e-3},  # bfloat16, T = 1024, against float64
              "run 2": {"tiled": 4.9e-3, "naive": 4.3e-3, "SDPA": 1.1e-3, "tiled in float32, rounded at the end": 9.7e-4}}
tiles = (16384 // 256) ** 2
print("measured on an NVIDIA H200: B=1, H=8, d=64, T=16384, not causal")
for run, by_dtype in H200_MS.items():
    for dtype, (tiled, sdpa) in by_dtype.items():
        print(f"{run}, {dtype:9} tiled forward {tiled:7.1f} ms ({1e3 * tiled / tiles:.0f} us per 256 x 256 tile), "
              f"SDPA {sdpa:5.2f} ms: {tiled / sdpa:.0f}x SDPA's time")
print(f"peak memory in bfloat16: naive attention {H200_PEAK_MIB['naive']} MiB, tiled forward {H200_PEAK_MIB['tiled']} MiB "
      f"({H200_PEAK_MIB['naive'] / H200_PEAK_MIB['tiled']:.0f}x less)")
for run, errors in H200_ERROR.items():
    print(f"{run}, largest |error| in bfloat16 at T = 1024: " + ", ".join(f"{k} {e:.1e}" for k, e in errors.items()))
for run, by_dtype in H200_MS.items():
    (tiled_bf, sdpa_bf), (tiled_32, sdpa_32) = by_dtype["bfloat16"], by_dtype["float32"]
    print(f"{run}, bfloat16 time / float32 time: tiled forward {tiled_bf / tiled_32:.2f}x, SDPA {sdpa_bf / sdpa_32:.2f}x")

# %% [markdown]
# On that GPU the tiled forward has the memory of FlashAttention, hundreds of times less than naive
# attention, and takes tens of times SDPA's time in float32 and hundreds of times in bfloat16 (the
# printed ratios). Its time is its loop: 4096 tiles, each a
# handful of PyTorch operations, each a separate GPU kernel launched from Python (the printed time
# per tile). That is why the two runs differ far more for the tiled forward than for SDPA: a loop
# of launches is timed as much by the machine that issues them as by the GPU. And unlike SDPA, much
# faster in bfloat16 than in float32, the tiled forward gains nothing reliable from bfloat16 (the
# last two lines: it was slower in bfloat16 in run 1 and a little faster in run 2): the arithmetic
# is not what it waits on. SDPA runs one fused kernel that keeps each tile on the chip through the whole update. The
# tiles alone give FlashAttention's memory; its speed comes from the fusion.
#
# 在那块 GPU 上，分块前向计算有 FlashAttention 的内存，比朴素注意力少几百倍，而耗时在 float32 下是 SDPA 的几十倍，在 bfloat16 下是几百倍（见打印出的比值）。它的时间就是它的循环：4096 个分块，每个分块几个 PyTorch 运算，每个运算都是从 Python 启动的一个单独的 GPU 内核（见打印出的每个分块的时间）。这就是为什么两次运行中分块前向计算的时间相差远比 SDPA 大：一串内核启动的耗时既取决于 GPU，也同样取决于发出这些启动的机器。而且 SDPA 在 bfloat16 下比 float32 快得多，分块前向计算却不能从 bfloat16 中得到可靠的好处（最后两行：第 1 次运行中它在 bfloat16 下更慢，第 2 次运行中稍快）：它等待的不是算术。SDPA 运行一个融合内核，在整个更新过程中把每个分块留在芯片上。分块本身带来 FlashAttention 的内存；它的速度来自融合。

# %% [markdown]
# ### bfloat16 inside the loop · 循环内部的 bfloat16
#
# The tiled forward also rounds more than SDPA in bfloat16 (the printed errors: the tiled forward's
# is about naive attention's, SDPA's smaller; in run 2 the tiled forward computed in float32 and
# rounded at the end comes as close as SDPA). A forward that creates its running maximum, sum and accumulator
# with `q.new_full` and `q.new_zeros`, as the course's does, keeps them in the dtype of its inputs,
# so in bfloat16 every rescaling and every addition to the accumulator rounds to 8 significant bits; FlashAttention's kernels
# keep them in float32 and round only the output. The cell measures the same on this CPU at 1024
# tokens: your forward in bfloat16; your forward on the same inputs converted to float32, its
# output rounded to bfloat16 at the end, which is what float32 accumulation gives; and SDPA in
# bfloat16.
#
# 分块前向计算在 bfloat16 下的舍入误差也比 SDPA 大（见打印出的误差：分块前向计算的误差与朴素注意力的相当，SDPA 的更小；在第 2 次运行中，用 float32 计算、最后再舍入的分块前向计算与 SDPA 一样接近）。像课程的实现那样用 `q.new_full` 和 `q.new_zeros` 创建运行最大值、运行和与累加器的前向计算，让它们保持输入的 dtype，所以在 bfloat16 下，每次重新缩放、每次往累加器里加，都会舍入到 8 位有效数字；FlashAttention 的内核把它们保存在 float32 中，只对输出做舍入。下面的单元格在这台 CPU 上、1024 个词元时测量同样的事情：bfloat16 下的你的前向计算；把同样的输入转成 float32 运行你的前向计算，最后再把输出舍入到 bfloat16，这就是 float32 累加的效果；以及 bfloat16 下的 SDPA。

# %%
# NBVAL_IGNORE_OUTPUT
g = torch.Generator().manual_seed(8)
T_e = 256 if GRADING else 1024
bf16 = [torch.randn(1, 2, T_e, 64, generator=g).to(torch.bfloat16) for _ in range(3)]
exact = F.scaled_dot_product_attention(*(t.double() for t in bf16))  # the same rounded inputs, in float64
outs = {"your forward, bfloat16 throughout": flash_attention_forward(*bf16)[0],
        "your forward in float32, rounded at the end": flash_attention_forward(*(t.float() for t in bf16))[0].to(torch.bfloat16),
        "SDPA, bfloat16": F.scaled_dot_product_attention(*bf16)}
for name, out in outs.items():
    print(f"{name:44} T = {T_e}: largest |error| against float64 {(out.double() - exact).abs().max():.1e}")

# %% [markdown]
# Compare the first line with the other two on the machine that ran this: accumulating in float32
# brings your forward's error down to about SDPA's, and what is left is the rounding of the output
# itself to bfloat16. Kernels for real use do exactly that: bfloat16 inputs and outputs, float32
# inside.
#
# 在运行本笔记本的机器上，把第一行与另外两行比较：用 float32 累加把你的前向计算的误差降到大约与 SDPA 相同，剩下的是输出本身舍入到 bfloat16 的误差。实际使用的内核正是这样做的：bfloat16 的输入和输出，内部用 float32。

# %% [markdown]
# ## What came after · 后来的发展
#
# **FlashAttention-3 and FP8.** FlashAttention-2 (Dao, 2023) reorganised the loops and the work
# between GPU threads for about 2x over the first version on an A100, but reached only 35 % of an
# H100's peak. FlashAttention-3 (Shah et al., 2024) is written for Hopper GPUs: it overlaps the
# matrix products with the softmax of another tile and the data movement with the computation, and
# adds an FP8 path with block quantization. It reports 1.5-2.0x over FlashAttention-2 in FP16, up to
# 740 TFLOPs/s (75 % utilisation), close to 1.2 PFLOPs/s in FP8, with 2.6x lower numerical error
# than a baseline FP8 attention. Notebook 11's block-wise FP8 scales are the same idea.
#
# **FlashAttention-3 与 FP8。** FlashAttention-2（Dao，2023）重新组织了循环以及 GPU 线程之间的分工，在 A100 上比第一版快约 2 倍，但在 H100 上只达到峰值的 35 %。FlashAttention-3（Shah 等，2024）为 Hopper GPU 而写：它让矩阵乘法与另一个分块的 softmax 重叠、让数据搬运与计算重叠，并加入了带分块量化的 FP8 路径。论文报告它在 FP16 下比 FlashAttention-2 快 1.5-2.0 倍，最高 740 TFLOPs/s（75 % 利用率），FP8 下接近 1.2 PFLOPs/s，数值误差比基线 FP8 注意力低 2.6 倍。笔记本 11 中分块的 FP8 缩放是同一个思路。
#
# **FlashMLA.** DeepSeek's decode kernel for multi-head latent attention (notebook 09), released in
# February 2025 for Hopper GPUs. In the absorbed path of notebook 09 every query head attends to the
# same latent cache (576 numbers per token in DeepSeek-V3: the 512 of the latent, also used as the
# value, and 64 of RoPE), so the kernel reads each block of the cache once for all heads, tile by
# tile, from a paged cache of 64-token blocks. Its README reports up to 3000 GB/s in
# memory-bound and 580 TFLOPS in compute-bound configurations on an H800 (660 TFLOPS after the April
# 2025 update), and it returns the log-sum-exp next to the output, as your forward does.
#
# **FlashMLA。** 这是 DeepSeek 为多头潜在注意力（笔记本 09）写的解码内核，于 2025 年 2 月为 Hopper GPU 发布。在笔记本 09 的吸收路径中，每个查询头关注的都是同一份潜在缓存（DeepSeek-V3 中每个词元 576 个数：512 个潜在向量分量，同时用作值，以及 64 个 RoPE 分量），所以内核逐块读取缓存，每块只为所有头读取一次，缓存按 64 个词元一块分页。它的 README 报告在 H800 上，受内存限制的配置最高 3000 GB/s，受计算限制的配置 580 TFLOPS（2025 年 4 月更新后为 660 TFLOPS）；并且它和你的前向计算一样，在输出旁边返回 log-sum-exp。
#
# **Paged KV caches.** Notebook 07's cache reserves `max_seq_len` positions per sequence. A server
# holding hundreds of requests of unknown length wastes most of that. PagedAttention (Kwon et al.,
# 2023, the vLLM paper) stores the cache in fixed-size blocks, like an operating system's memory
# pages, with a block table per sequence; sequences sharing a prompt share its blocks. The attention
# kernel then gathers the keys and values of each tile through the block table, which tile-by-tile
# attention makes natural. The paper reports near-zero waste of cache memory and 2-4x the throughput
# of FasterTransformer and Orca at the same latency.
#
# **分页 KV 缓存。** 笔记本 07 的缓存为每个序列预留 `max_seq_len` 个位置。一个同时服务数百个长度未知的请求的服务器会浪费其中的大部分。PagedAttention（Kwon 等，2023，即 vLLM 论文）像操作系统的内存分页一样，把缓存存放在固定大小的块中，每个序列有一张块表；共享同一提示词的序列共享它的块。于是注意力内核通过块表取出每个分块的键和值，而逐块计算的注意力让这件事顺理成章。论文报告缓存内存几乎没有浪费，并且在相同延迟下吞吐量是 FasterTransformer 和 Orca 的 2-4 倍。

# %% [markdown]
# ## What comes next · 接下来
#
# The reference of this notebook lives in `utils/flash_attention.py`, with `utils/bench_flash.py` for
# the measurements. The course's models keep calling `F.scaled_dot_product_attention` or their own
# attention: a fused kernel does without the launches of a Python loop (the timing cell above said
# whether SDPA was the fastest at every length on your machine), and now you know what it does
# inside.
#
# 本笔记本的参考实现位于 `utils/flash_attention.py`，测量代码位于 `utils/bench_flash.py`。课程中的模型仍然调用 `F.scaled_dot_product_attention` 或它们自己的注意力：融合内核省去了 Python 循环的一次次启动（上面的计时单元格说明了在你的机器上 SDPA 是否在每个长度下都最快），而现在你知道它内部在做什么了。
#
# Sources: T. Dao, D. Y. Fu, S. Ermon, A. Rudra, C. Ré, *FlashAttention: Fast and Memory-Efficient
# Exact Attention with IO-Awareness* (2022, arXiv 2205.14135; the running maximum and sum saved per
# query and the tiles recomputed in the backward, Algorithms 1 and 4; the A100 memory figures, the
# GPT-2 and Path-X results); T. Dao, *FlashAttention-2* (2023, arXiv 2307.08691; the forward's
# loop order with the query blocks outside, only the log-sum-exp saved, and
# $D = \operatorname{rowsum}(dO \circ O)$ computed once before the backward's loops); J. Shah et al., *FlashAttention-3* (2024, arXiv
# 2407.08608); M. Milakov, N. Gimelshein, *Online normalizer calculation for softmax* (2018, arXiv
# 1805.02867); W. Kwon et al., *Efficient Memory Management for Large Language Model Serving with
# PagedAttention* (SOSP 2023, arXiv 2309.06180); DeepSeek's FlashMLA repository README
# (github.com/deepseek-ai/FlashMLA); Stanford CS336, assignment 2 (a PyTorch FlashAttention graded on
# CPU); PyTorch's `F.scaled_dot_product_attention` documentation; the GPU figures: measured for this
# course on an NVIDIA H200 (torch 2.11, CUDA 13), twice, with `utils/flash_attention.py`.
#
# 来源：T. Dao 等，《FlashAttention：具备 IO 感知的快速且省内存的精确注意力》（2022，arXiv 2205.14135；每个查询保存运行最大值和运行和、反向传播中重新计算分块，即算法 1 和 4；A100 的显存数字，GPT-2 与 Path-X 的结果）；T. Dao，《FlashAttention-2：更好的并行与分工带来更快的注意力》（2023，arXiv 2307.08691；前向计算中查询块在外层的循环顺序、只保存 log-sum-exp，以及在反向计算的循环之前只算一次的 $D = \operatorname{rowsum}(dO \circ O)$）；J. Shah 等，《FlashAttention-3》（2024，arXiv 2407.08608）；M. Milakov 与 N. Gimelshein，《softmax 归一化因子的在线计算》（2018，arXiv 1805.02867）；W. Kwon 等，《用分页注意力高效管理大语言模型服务的内存》（SOSP 2023，arXiv 2309.06180）；DeepSeek 的 FlashMLA 仓库说明文件（github.com/deepseek-ai/FlashMLA）；斯坦福 CS336 作业 2（在 CPU 上评分的 PyTorch 版 FlashAttention）；PyTorch 的 `F.scaled_dot_product_attention` 文档；GPU 上的数字：为本课程在 NVIDIA H200 上用 `utils/flash_attention.py` 测得两次（torch 2.11、CUDA 13）。
