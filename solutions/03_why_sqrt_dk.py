# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 03 · Why divide by sqrt(d_k) · 为什么要除以 sqrt(d_k)
#
# Every attention layer you will meet computes $\operatorname{softmax}\!\big(QK^\top/\sqrt{d_k}\big)\,V$.
# Notebook 01 left out the $\sqrt{d_k}$ and got away with it, because its vectors had 3 entries;
# notebook 02 divided by $\sqrt{d_{out}}$ and promised a reason. Real heads have 64 or 128 entries,
# and then the division is what keeps attention trainable.
#
# 你将遇到的每个注意力层都在计算 $\operatorname{softmax}\!\big(QK^\top/\sqrt{d_k}\big)\,V$。笔记本 01 省略了 $\sqrt{d_k}$ 也没出问题，因为那里的向量只有 3 个分量；笔记本 02 除以了 $\sqrt{d_{out}}$，并答应之后给出理由。真实的注意力头有 64 或 128 个分量，这时正是这次除法让注意力保持可训练。
#
# This notebook turns the argument of the original Transformer paper into three measurements:
# the scores spread out as $d_k$ grows (their variance is $d_k$), a softmax of widely spread
# scores becomes one-hot, and a one-hot softmax lets no gradient through. Then you write the
# general `scaled_dot_product_attention` that every later notebook uses, and check it against
# PyTorch's own.
#
# 本笔记本把原始 Transformer 论文中的论证变成三个测量：随着 $d_k$ 增大，分数越来越分散（它们的方差是 $d_k$）；分数很分散时 softmax 变成 one-hot；而 one-hot 的 softmax 不让任何梯度通过。然后你将编写之后每个笔记本都会用到的通用 `scaled_dot_product_attention`，并与 PyTorch 自带的实现对照。

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from utils.attention import softmax
from utils.plots import attention_heatmap
from utils.scaled_attention import random_scores

# %% [markdown]
# ## One die, a hundred dice · 一个骰子与一百个骰子
#
# Roll one die: the result is 1 to 6, mean 3.5, variance $35/12$. Now roll a hundred and add them up.
# The mean is 100 times larger, and so is the **variance**: variances of independent terms add. The
# spread (the standard deviation) grows only like $\sqrt{100} = 10$, but it grows. The cell rolls
# both many times and prints the measured mean and variance next to the exact ones.
#
# 掷一个骰子：结果是 1 到 6，均值 3.5，方差 $35/12$。现在掷一百个并把点数加起来。均值变为 100 倍，**方差** 也一样：独立项的方差可以相加。离散程度（标准差）只按 $\sqrt{100} = 10$ 增长，但它确实在增长。下面的单元格把两种情形各掷很多次，并把测得的均值和方差与精确值并排打印出来。

# %%
g = torch.Generator().manual_seed(0)
one_die = torch.randint(1, 7, (20_000,), generator=g).float()
hundred = torch.randint(1, 7, (20_000, 100), generator=g).float().sum(dim=-1)
print(f"one die     : mean {one_die.mean():6.2f}, variance {one_die.var():6.2f}"
      f"   (exact {3.5:6.2f} and {35 / 12:6.2f})")
print(f"100 dice sum: mean {hundred.mean():6.1f}, variance {hundred.var():6.1f}"
      f"   (exact {350:6.1f} and {100 * 35 / 12:6.1f})")

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
left.hist(one_die.numpy(), bins=[0.5 + i for i in range(7)], rwidth=0.8)
left.set_title(f"one die: standard deviation {one_die.std():.2f}"); left.set_xlabel("value")
right.hist(hundred.numpy(), bins=[270.5 + 4 * i for i in range(41)])  # 4 sums per bar
right.set_title(f"sum of 100 dice: standard deviation {hundred.std():.1f}"); right.set_xlabel("sum")
plt.show()


# %% [markdown]
# ## The dot product is a sum of d dice · 点积是 d 个骰子之和
#
# A score is $q \cdot k = \sum_{i=1}^{d} q_i k_i$. Suppose, as the paper does, that the entries of
# $q$ and $k$ are independent with mean 0 and variance 1 (a simple model of vectors at the start
# of training, not a property of trained ones). Each product $q_i k_i$ is one "die": mean 0 and variance
# $\mathbb E[q_i^2]\,\mathbb E[k_i^2] = 1$. Adding $d$ of them gives mean 0 and **variance $d$**:
# with $d = 64$ a typical score is about $\pm 8$, with $d = 1024$ about $\pm 32$.
#
# 一个分数是 $q \cdot k = \sum_{i=1}^{d} q_i k_i$。和论文一样，假设 $q$ 和 $k$ 的分量相互独立，均值为 0、方差为 1（这是训练开始时向量的一个简单模型，而不是训练后向量的性质）。每个乘积 $q_i k_i$ 就是一个"骰子"：均值为 0，方差为 $\mathbb E[q_i^2]\,\mathbb E[k_i^2] = 1$。把 $d$ 个相加得到均值 0、**方差 $d$**：当 $d = 64$ 时典型的分数约为 $\pm 8$，当 $d = 1024$ 时约为 $\pm 32$。
#
# Dividing by $\sqrt{d}$ divides the variance by $d$ and brings it back to 1, whatever the width.
# That is the whole reason for the $\sqrt{d_k}$: not $d_k$, which would shrink the scores towards 0
# (a spread of $1/\sqrt{d_k}$, almost uniform weights), and not $\sqrt{d_v}$, the width of the values,
# which never enters the dot product.
#
# 除以 $\sqrt{d}$ 会把方差除以 $d$，使它回到 1，无论宽度是多少。这就是 $\sqrt{d_k}$ 的全部理由：不是 $d_k$（那会把分数压向 0，标准差只剩 $1/\sqrt{d_k}$，权重几乎均匀），也不是值向量的宽度 $\sqrt{d_v}$（它根本不参与点积）。

# %% [markdown]
# ### Exercise 1 · `dot_product_variance` · 练习 1
#
# Measure it. Draw `n_trials` pairs of vectors $q, k$ of width `d` from a standard normal with
# `torch.randn(..., generator=generator)` (the generator makes the result reproducible), compute one
# dot product per pair, divide them by $\sqrt{d}$ when `scaled` is true, and return their variance as
# a Python float (`.item()`). No loop is needed: a `(n_trials, d)` tensor holds all the trials.
#
# 动手测量。用 `torch.randn(..., generator=generator)` 从标准正态分布中抽取 `n_trials` 对宽度为 `d` 的向量 $q, k$（生成器让结果可以复现），每对计算一个点积；当 `scaled` 为真时把它们除以 $\sqrt{d}$，然后以 Python 浮点数（`.item()`）返回它们的方差。不需要循环：一个 `(n_trials, d)` 的张量就能容纳所有试验。
#
# <!-- rules: dot_product_variance -->
#
# #### Rules that grading checks · 评分检查的规则 (`dot_product_variance`)
#
# - dtype: one number, a Python float (`.item()`); a 0-d tensor is accepted too.
# - A statistic: graded within six standard deviations of d (1 when `scaled`), from exactly `n_trials` pairs.
# - q and k are drawn from `generator` when one is given; PyTorch's global generator is left as it was.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - dtype：一个数，即 Python 浮点数（`.item()`）；0 维张量也可以。
# - 这是一个统计量：按与 d（`scaled` 时为 1）相差不超过六个标准差评分，且恰好来自 `n_trials` 对向量。
# - 给定 `generator` 时 q 和 k 从它采样；PyTorch 的全局生成器保持原样。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "dot_product_variance", "locked": false, "schema_version": 3, "solution": true, "task": false}
def dot_product_variance(d: int, n_trials: int = 10_000, scaled: bool = False, generator=None) -> float:
    """Empirical variance of q · k for q, k ~ N(0, I_d); divided by sqrt(d) first when `scaled`."""
    ### BEGIN SOLUTION
    q = torch.randn(n_trials, d, generator=generator)  # (n_trials, d)
    k = torch.randn(n_trials, d, generator=generator)
    dots = (q * k).sum(dim=-1)  # (n_trials,): one dot product per trial
    if scaled:
        dots = dots / math.sqrt(d)
    return dots.var().item()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_dot_product_variance", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

g = torch.Generator().manual_seed(0)
raw = float(dot_product_variance(16, n_trials=20_000, generator=g))
scaled = float(dot_product_variance(16, n_trials=20_000, scaled=True, generator=g))
expect(abs(raw - 16) < 0.15 * 16,
       "For d=16 the variance of q·k should be about 16: the variance of a sum of d products of variance 1.",
       "当 d=16 时 q·k 的方差应约为 16：d 个方差为 1 的乘积之和的方差。", f"got {raw:.4g}")
expect(abs(scaled - 1) < 0.15,
       "With scaled=True the variance should be about 1: divide each dot product by sqrt(d).",
       "当 scaled=True 时方差应约为 1：把每个点积除以 sqrt(d)。", f"got {scaled:.4g}")
print("✓ dot_product_variance")

# %% nbgrader={"grade": true, "grade_id": "test_dot_product_variance_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb03
nb03.check_dot_product_variance(dot_product_variance)
### END HIDDEN TESTS

# %% [markdown]
# Your function, from $d = 1$ to $d = 1024$. On log-log axes the unscaled variance follows the
# line $\operatorname{Var} = d$; the scaled one stays flat at 1. The cell prints the measured values.
#
# 用你的函数测量从 $d = 1$ 到 $d = 1024$ 的情况。在双对数坐标上，不缩放的方差沿着直线 $\operatorname{Var} = d$ 上升；缩放后的方差平稳地保持在 1。单元格会打印测得的数值。

# %%
dims = [1, 4, 16, 64, 256, 1024]
g = torch.Generator().manual_seed(1)
raw = [dot_product_variance(d, n_trials=5_000, generator=g) for d in dims]
scaled = [dot_product_variance(d, n_trials=5_000, scaled=True, generator=g) for d in dims]
for d, r, s in zip(dims, raw, scaled):
    print(f"d = {d:4d}   Var(q·k) = {r:7.1f}   Var(q·k / sqrt(d)) = {s:.2f}")

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.loglog(dims, dims, "k--", lw=1, label="Var = d")
ax.loglog(dims, raw, "o-", label="q·k")
ax.loglog(dims, scaled, "s-", label="q·k / sqrt(d)")
ax.set_xlabel("d (width of q and k)"); ax.set_ylabel("variance of the score")
ax.set_title("The variance of q·k grows like d"); ax.legend()
plt.show()


# %% [markdown]
# ## A softmax of spread-out scores is one-hot · 分数分散时 softmax 变成 one-hot
#
# Softmax only sees differences between scores: $e^{x_i}/\sum_j e^{x_j}$ does not change when every
# score moves by the same amount. A gap of 10 between the best score and the next already gives
# the best key $e^{10} \approx 22{,}000$ times the weight of the other. With spread-out scores the
# softmax turns into an argmax: one weight near 1, the rest near 0.
#
# Softmax 只看分数之间的差：所有分数同时加上同一个数，$e^{x_i}/\sum_j e^{x_j}$ 不变。最好的分数与次好的分数相差 10，就已经让最好的键得到另一个键 $e^{10} \approx 22{,}000$ 倍的权重。分数很分散时 softmax 就变成了 argmax：一个权重接近 1，其余接近 0。
#
# The cell draws 256 random queries and 16 random keys of width $d$, and plots the average largest
# weight of a row. With 16 keys a uniform row has largest weight $1/16$; a one-hot row has 1.
#
# 下面的单元格随机生成 256 个查询和 16 个宽度为 $d$ 的键，并画出每行最大权重的平均值。有 16 个键时，均匀的一行最大权重为 $1/16$；one-hot 的一行为 1。

# %%
def largest_weight(d, scaled):
    scores = random_scores(d, n_queries=256, n_keys=16, scaled=scaled,
                           generator=torch.Generator().manual_seed(d))
    return softmax(scores, dim=-1).amax(dim=-1).mean().item()

raw_max = [largest_weight(d, scaled=False) for d in dims]
scaled_max = [largest_weight(d, scaled=True) for d in dims]
for d, r, s in zip(dims, raw_max, scaled_max):
    print(f"d = {d:4d}   largest weight: unscaled {r:.3f}   scaled {s:.3f}")

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.semilogx(dims, raw_max, "o-", label="softmax(q·k)")
ax.semilogx(dims, scaled_max, "s-", label="softmax(q·k / sqrt(d))")
ax.axhline(1 / 16, color="gray", ls=":", label="uniform (1/16)")
ax.axhline(1.0, color="k", ls="--", lw=1, label="one-hot")
ax.set_xlabel("d"); ax.set_ylabel("mean largest weight of a row")
ax.set_title("Softmax saturates as the scores spread"); ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# One row at $d = 512$, eight keys, makes it concrete: the cell prints the weights of the same query
# without and with the division.
#
# 取 $d = 512$、八个键的一行，看得更具体：单元格打印出同一个查询在不除和除以 $\sqrt{d}$ 时的权重。

# %%
row = random_scores(512, n_queries=1, n_keys=8, generator=torch.Generator().manual_seed(2))[0]
torch.set_printoptions(precision=3, sci_mode=False)
print("scores            :", row)
print("softmax(q·k)      :", softmax(row, dim=-1))
print("softmax(q·k / √d) :", softmax(row / math.sqrt(512), dim=-1))
torch.set_printoptions(profile="default")


# %% [markdown]
# ## Why one-hot is bad: the softmax Jacobian · one-hot 为何不好：softmax 的雅可比矩阵
#
# Training moves the scores $z$ by the gradient, and every gradient that reaches a score goes
# through the derivative of the softmax $p = \operatorname{softmax}(z)$. Differentiating
# $p_i = e^{z_i} / \sum_k e^{z_k}$ with the quotient rule gives
#
# $$\frac{\partial p_i}{\partial z_j} = p_i\,(\delta_{ij} - p_j), \qquad
# J = \operatorname{diag}(p) - p\,p^\top .$$
#
# 训练按梯度移动分数 $z$，而到达分数的每一个梯度都要经过 softmax $p = \operatorname{softmax}(z)$ 的导数。用商法则对 $p_i = e^{z_i} / \sum_k e^{z_k}$ 求导，得到上式：$\partial p_i / \partial z_j = p_i(\delta_{ij} - p_j)$，即 $J = \operatorname{diag}(p) - p\,p^\top$。
#
# The diagonal $p_i(1 - p_i)$ says: raising your own score raises your weight; the off-diagonal
# $-p_i p_j$ says: raising another score takes weight from you. $J$ depends only on $p$, and if $p$
# is one-hot every entry is 0 ($1 \cdot (1 - 1)$ on the diagonal, a product with a 0 elsewhere). The
# gradient of the scores is $J^\top$ times the gradient of the weights, so a saturated softmax
# passes nothing back: the queries and keys stop learning.
#
# 对角元 $p_i(1 - p_i)$ 表示：提高自己的分数会提高自己的权重；非对角元 $-p_i p_j$ 表示：提高别人的分数会拿走你的权重。$J$ 只依赖于 $p$；如果 $p$ 是 one-hot，每一项都是 0（对角线上是 $1 \cdot (1 - 1)$，其他位置是与 0 的乘积）。分数的梯度等于 $J^\top$ 乘以权重的梯度，所以饱和的 softmax 不会往回传递任何东西：查询和键就不再学习了。

# %% [markdown]
# ### Exercise 2 · `softmax_jacobian` · 练习 2
#
# Return $\operatorname{diag}(p) - p\,p^\top$ for a probability vector `p` of shape `(n,)`, as an
# `(n, n)` tensor. $p\,p^\top$ is an outer product (`torch.outer`, or `p[:, None] * p[None, :]`), not
# `p * p`. Write the formula yourself: `torch.autograd.functional.jacobian` is not allowed here, but the
# visible test uses it to check you.
#
# 对形状为 `(n,)` 的概率向量 `p`，返回 `(n, n)` 的张量 $\operatorname{diag}(p) - p\,p^\top$。$p\,p^\top$ 是外积（`torch.outer` 或 `p[:, None] * p[None, :]`），不是 `p * p`。请自己写出公式：这里不允许使用 `torch.autograd.functional.jacobian`，但可见测试会用它来检查你的结果。
#
# <!-- rules: softmax_jacobian -->
#
# #### Rules that grading checks · 评分检查的规则 (`softmax_jacobian`)
#
# - Not allowed: `torch.autograd.functional.jacobian` (autograd computes the Jacobian this exercise writes); `torch.func.jacrev` (autograd computes the Jacobian this exercise writes); `torch.func.jacfwd` (autograd computes the Jacobian this exercise writes).
# - Not graded (the caller guarantees it): p is a probability vector (entries of at least 0 that sum to 1).
# - Graded in float32 and float64: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`torch.autograd.functional.jacobian`（autograd 会算出本练习要写的雅可比矩阵）；`torch.func.jacrev`（autograd 会算出本练习要写的雅可比矩阵）；`torch.func.jacfwd`（autograd 会算出本练习要写的雅可比矩阵）。
# - 不评分（由调用者保证）：p 是概率向量（元素不小于 0，且和为 1）。
# - 在 float32、float64 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "softmax_jacobian", "locked": false, "schema_version": 3, "solution": true, "task": false}
def softmax_jacobian(p: torch.Tensor) -> torch.Tensor:
    """d softmax(z)_i / d z_j = p_i (δ_ij - p_j): diag(p) - p pᵀ, (n,) -> (n, n)."""
    ### BEGIN SOLUTION
    return torch.diag(p) - torch.outer(p, p)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_softmax_jacobian", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb03

with nb03.as_graded(softmax_jacobian):
    z = torch.tensor([1.0, 2.0, 3.0])
    autograd = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), z)
    expect_close(softmax_jacobian(torch.softmax(z, dim=-1)), autograd,
                 "The Jacobian should equal the one autograd computes for softmax: diag(p) - p pᵀ.",
                 "雅可比矩阵应与 autograd 对 softmax 算出的一致：diag(p) - p pᵀ。", atol=1e-6)
    expect_close(softmax_jacobian(torch.tensor([0.0, 1.0, 0.0])), torch.zeros(3, 3),
                 "For a one-hot p the Jacobian should be all zeros.",
                 "当 p 为 one-hot 时雅可比矩阵应全为 0。")
    print("✓ softmax_jacobian")

# %% nbgrader={"grade": true, "grade_id": "test_softmax_jacobian_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb03
nb03.check_softmax_jacobian(softmax_jacobian)
### END HIDDEN TESTS

# %% [markdown]
# Now the same random queries and keys as before, with your Jacobian: the plot shows the size
# (Frobenius norm) of $J$ for the median row of 64 as $d$ grows. Without the division it falls by
# orders of magnitude (the cell prints the values); with it, it stays where it was at $d = 1$.
#
# 现在用之前同样的随机查询和键，配合你的雅可比矩阵：下图给出随着 $d$ 增大，64 行中位于中位数的那一行的 $J$ 的大小（Frobenius 范数）。不做除法时它下降了几个数量级（单元格会打印数值）；做了除法，它就保持在 $d = 1$ 时的水平。

# %%
def jacobian_norm(d, scaled):
    scores = random_scores(d, n_queries=64, n_keys=16, scaled=scaled,
                           generator=torch.Generator().manual_seed(d))
    p = softmax(scores, dim=-1)
    return torch.stack([softmax_jacobian(row).norm() for row in p]).median().item()

raw_norm = [jacobian_norm(d, scaled=False) for d in dims]
scaled_norm = [jacobian_norm(d, scaled=True) for d in dims]
for d, r, s in zip(dims, raw_norm, scaled_norm):
    print(f"d = {d:4d}   median ||J||: unscaled {r:.1e}   scaled {s:.1e}")

fig, ax = plt.subplots(figsize=(6, 3.5))
ax.loglog(dims, raw_norm, "o-", label="softmax(q·k)")
ax.loglog(dims, scaled_norm, "s-", label="softmax(q·k / sqrt(d))")
ax.set_xlabel("d"); ax.set_ylabel("median ||diag(p) - p pᵀ|| of a row")
ax.set_title("The gradient through softmax vanishes without scaling"); ax.legend()
plt.show()


# %% [markdown]
# ## The general kernel · 通用的注意力内核
#
# Everything so far fits in one function, the one PyTorch calls `scaled_dot_product_attention`:
#
# $$\operatorname{Attention}(Q, K, V) = \operatorname{softmax}\!\Big(\frac{Q K^\top}{\sqrt{d_k}}\Big) V .$$
#
# 到目前为止的内容都可以写进一个函数，也就是 PyTorch 所说的 `scaled_dot_product_attention`（见上式）。
#
# From now on queries, keys and values are separate tensors. `q` has shape `(..., T_q, d_k)`, `k` has
# `(..., T_k, d_k)` and `v` has `(..., T_k, d_v)`: there may be fewer queries than keys (a decoder
# producing one new token looks at all the earlier ones), and the values may be narrower or wider than
# the keys. The leading `...` holds the batch and, from notebook 06 on, the heads. Two arguments
# prepare later notebooks:
#
# 从现在起，查询、键和值是不同的张量。`q` 的形状是 `(..., T_q, d_k)`，`k` 是 `(..., T_k, d_k)`，`v` 是 `(..., T_k, d_v)`：查询可以比键少（解码器生成一个新词元时要看之前所有的词元），值向量也可以比键更窄或更宽。前面的 `...` 容纳批次维，从笔记本 06 开始还有注意力头。两个参数是为后面的笔记本准备的：
#
# - `mask`: boolean, broadcastable to `(..., T_q, T_k)`, **True = blocked**. Blocked scores become
#   `-inf` before the softmax, so they get weight exactly 0 and the others still sum to 1. (PyTorch's
#   own boolean `attn_mask` means the opposite, True = allowed: pass it `~mask`.) Two shapes are
#   common: a causal mask `(T_q, T_k)` (notebook 04) and a padding mask `(B, 1, 1, T_k)` (below).
# - `scale`: the factor the scores are multiplied by, $1/\sqrt{d_k}$ when it is `None`.
#
# - `mask`：布尔张量，可广播到 `(..., T_q, T_k)`，**True = 屏蔽**。被屏蔽的分数在 softmax 之前变为 `-inf`，因此权重恰好为 0，其余权重之和仍为 1。（PyTorch 自己的布尔 `attn_mask` 含义相反，True = 允许：传给它 `~mask`。）常见的形状有两种：因果掩码 `(T_q, T_k)`（笔记本 04）和填充掩码 `(B, 1, 1, T_k)`（见下文）。
# - `scale`：分数所乘的因子，为 `None` 时取 $1/\sqrt{d_k}$。

# %% [markdown]
# ### Exercise 3 · `scaled_dot_product_attention` · 练习 3
#
# Return the pair `(context, weights)`: `weights` of shape `(..., T_q, T_k)`, whose rows sum to 1, and
# `context = weights @ v` of shape `(..., T_q, d_v)`. Scale the scores **before** the softmax, take the
# softmax over the keys (`dim=-1`), transpose `k` with `k.transpose(-2, -1)` (or `k.mT`; `k.T` would
# reverse the batch dims too), and fill blocked scores with `scores.masked_fill(mask, float("-inf"))`.
# You may use `softmax` from notebook 01 (imported above) or `torch.softmax`; calling
# `F.scaled_dot_product_attention` is not allowed here.
#
# 返回一对 `(context, weights)`：`weights` 的形状为 `(..., T_q, T_k)`，每一行之和为 1；`context = weights @ v`，形状为 `(..., T_q, d_v)`。在 softmax **之前** 缩放分数，对键（`dim=-1`）做 softmax，用 `k.transpose(-2, -1)`（或 `k.mT`）转置 `k`（`k.T` 会把批次维也反转），并用 `scores.masked_fill(mask, float("-inf"))` 填充被屏蔽的分数。你可以使用笔记本 01 的 `softmax`（上面已导入）或 `torch.softmax`；这里不允许调用 `F.scaled_dot_product_attention`。
#
# <!-- rules: scaled_dot_product_attention -->
#
# #### Rules that grading checks · 评分检查的规则 (`scaled_dot_product_attention`)
#
# - Not allowed: `F.scaled_dot_product_attention` (it is the function this exercise writes).
# - Not graded (the caller guarantees it): every query keeps at least one key (a row whose keys are all blocked gives NaN).
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（它正是本练习要写的函数）。
# - 不评分（由调用者保证）：每个查询至少保留一个键（所有键都被屏蔽的行会得到 NaN）。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "scaled_dot_product_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
def scaled_dot_product_attention(q, k, v, mask=None, scale=None):
    """softmax(q kᵀ * scale) v -> (context (..., T_q, d_v), weights (..., T_q, T_k)); mask True = blocked."""
    ### BEGIN SOLUTION
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])  # d_k, the width of the vectors in the dot product
    scores = q @ k.transpose(-2, -1) * scale  # (..., T_q, T_k)
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = softmax(scores, dim=-1)  # over the keys
    return weights @ v, weights
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_scaled_dot_product_attention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
import torch.nn.functional as F
from autograder.checks import expect_close, randn

from autograder.checks import nb03

with nb03.as_graded(scaled_dot_product_attention):
    q, k, v = randn(2, 4, 8, seed=0), randn(2, 6, 8, seed=1), randn(2, 6, 5, seed=2)  # T_q=4, T_k=6, d_k=8, d_v=5
    mask = torch.triu(torch.ones(4, 6, dtype=torch.bool), diagonal=3)  # True = blocked
    context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
    expect_close(weights.sum(dim=-1), torch.ones(2, 4),
                 "Every row of the weights should sum to 1: softmax over the keys (dim=-1).",
                 "权重的每一行之和应为 1：对键 (dim=-1) 做 softmax。")
    expect_close(context, F.scaled_dot_product_attention(q, k, v, attn_mask=~mask),
                 "The context should equal PyTorch's scaled_dot_product_attention (whose boolean mask means True = allowed).",
                 "上下文应与 PyTorch 的 scaled_dot_product_attention 一致（它的布尔掩码中 True 表示允许）。")
    print("✓ scaled_dot_product_attention")

# %% nbgrader={"grade": true, "grade_id": "test_scaled_dot_product_attention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb03
nb03.check_scaled_dot_product_attention(scaled_dot_product_attention)
### END HIDDEN TESTS

# %% [markdown]
# ### Against PyTorch · 与 PyTorch 对照
#
# Random shapes with $T_q \ne T_k$ and $d_k \ne d_v$, a random mask, and the default scale: the cell
# prints the largest difference between your context vectors and those of
# `F.scaled_dot_product_attention`. Differences around $10^{-7}$ are float32 rounding.
#
# 随机形状（$T_q \ne T_k$、$d_k \ne d_v$）、随机掩码和默认缩放：单元格打印出你的上下文向量与 `F.scaled_dot_product_attention` 结果之间的最大差值。$10^{-7}$ 左右的差值是 float32 的舍入误差。

# %%
# NBVAL_IGNORE_OUTPUT
g = torch.Generator().manual_seed(3)
for B, H, T_q, T_k, d_k, d_v in [(1, 1, 3, 5, 4, 2), (2, 4, 7, 9, 16, 8), (3, 2, 1, 12, 32, 64)]:
    q = torch.randn(B, H, T_q, d_k, generator=g)
    k = torch.randn(B, H, T_k, d_k, generator=g)
    v = torch.randn(B, H, T_k, d_v, generator=g)
    mask = torch.rand(T_q, T_k, generator=g) < 0.3
    mask[:, 0] = False  # every query keeps at least one key
    ours, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)
    diff = (ours - theirs).abs().max().item()
    assert diff < 1e-5, diff
    print(f"q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}: max difference {diff:.1e}")

# %% [markdown]
# ### Scaled and unscaled, side by side · 缩放与不缩放并排比较
#
# Five queries and seven keys of width 64, random. Without the division most weights are practically
# 0 and each row piles onto one or two keys; with it every row still spreads its attention over
# several keys, and the model can learn from there. The cell prints, for both, the mean largest
# weight of a row and how many of the 35 weights are below 0.01.
#
# 五个查询和七个键，宽度为 64，都是随机的。不做除法时大多数权重几乎为 0，每一行都集中在一两个键上；做了除法，每一行仍然把注意力分散在几个键上，模型可以从这里开始学习。单元格打印出两种情况下每行最大权重的平均值，以及 35 个权重中有多少个小于 0.01。

# %%
g = torch.Generator().manual_seed(4)
q, k = torch.randn(5, 64, generator=g), torch.randn(7, 64, generator=g)
v = torch.eye(7)  # the context is then the weights themselves
_, unscaled = scaled_dot_product_attention(q, k, v, scale=1.0)
_, scaled = scaled_dot_product_attention(q, k, v)
fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
labels_q, labels_k = [f"q{i}" for i in range(5)], [f"k{j}" for j in range(7)]
attention_heatmap(unscaled, labels_q, labels_k, ax=left, title="softmax(q kᵀ), d_k = 64")
attention_heatmap(scaled, labels_q, labels_k, ax=right, title="softmax(q kᵀ / √64)")
plt.tight_layout(); plt.show()
for name, w in [("unscaled", unscaled), ("scaled", scaled)]:
    print(f"{name:8s}: mean largest weight {w.amax(-1).mean():.2f}, weights below 0.01: {int((w < 0.01).sum())} of 35")

# %% [markdown]
# ### Padding masks · 填充掩码
#
# A batch stacks texts of different lengths into one tensor, so the shorter ones are filled up with
# padding tokens. Those are not words: no query may attend to them. A **padding mask** blocks them.
# It depends on the batch item and the key, not on the query, so it has shape `(B, 1, 1, T_k)`: True
# at every padded key of item `b`, broadcast over the heads and over every query. Your
# `scaled_dot_product_attention` handles it as it is, because the mask only has to broadcast against
# the scores `(B, H, T_q, T_k)`. A causal mask `(T_q, T_k)` and a padding mask combine with `|`
# (blocked if either blocks).
#
# 一个批次把长度不同的文本堆成一个张量，所以较短的文本要用填充词元补齐。它们不是真正的词：任何查询都不应关注它们。**填充掩码** 负责屏蔽它们。它取决于批中的样本和键，而与查询无关，所以形状是 `(B, 1, 1, T_k)`：在样本 `b` 的每个填充键处为 True，并在各个头和所有查询上广播。你的 `scaled_dot_product_attention` 原样就能处理它，因为掩码只需要能与分数 `(B, H, T_q, T_k)` 广播。因果掩码 `(T_q, T_k)` 和填充掩码用 `|` 组合（任意一个屏蔽就屏蔽）。
#
# The cell pads the second of two texts from 3 to 5 tokens and checks two things: the padded keys get
# weight exactly 0, and the real tokens' outputs equal those computed on the unpadded text alone.
#
# 下面的单元格把两个文本中的第二个从 3 个词元填充到 5 个，并检查两件事：被填充的键得到的权重恰好为 0，真实词元的输出与只用未填充文本算出的结果相同。

# %%
g = torch.Generator().manual_seed(5)
B, H, T, d = 2, 2, 5, 8
lengths = torch.tensor([5, 3])                                   # the second text has 3 real tokens
q, k, v = (torch.randn(B, H, T, d, generator=g) for _ in range(3))
padding = torch.arange(T)[None, :] >= lengths[:, None]          # (B, T_k): True at padded keys
mask = padding[:, None, None, :]                                 # (B, 1, 1, T_k)
print("padding mask of item 1:", padding[1].tolist(), "| mask shape:", tuple(mask.shape))
context, weights = scaled_dot_product_attention(q, k, v, mask=mask)
print("weight on padded keys:", weights[1, ..., 3:].abs().max().item())
alone, _ = scaled_dot_product_attention(q[1:, :, :3], k[1:, :, :3], v[1:, :, :3])
print("real tokens unchanged by the padding:", torch.allclose(context[1:, :, :3], alone, atol=1e-6))

# %% [markdown]
# ## What comes next · 接下来
#
# The scores here came from random vectors; in a model they come from the trainable projections of
# notebook 02, whose $d_{out}$ is this $d_k$. Notebook 04 uses the `mask` argument to stop tokens from
# seeing the future, and notebook 06 runs the same kernel once per head. Its reference lives in
# `utils/scaled_attention.py`.
#
# 这里的分数来自随机向量；在模型中它们来自笔记本 02 的可训练投影，那里的 $d_{out}$ 就是这里的 $d_k$。笔记本 04 用 `mask` 参数阻止词元看到未来，笔记本 06 对每个注意力头各运行一次同样的内核。它的参考实现位于 `utils/scaled_attention.py`。
#
# Sources: A. Vaswani et al., *Attention Is All You Need* (2017), section 3.2.1 and its footnote on the
# variance of $q \cdot k$; S. Raschka, *Build a Large Language Model (From Scratch)*, section 3.4.1
# and its sidebar "The rationale behind scaled-dot product attention"; the illustrated e-book 《看图学大模型》 (its
# interview question "why divide by $\sqrt d$": variance, saturation and the softmax Jacobian); the
# dice analogy after the course's DeepSeek lecture notes; PyTorch's documentation of
# `torch.nn.functional.scaled_dot_product_attention` (signature, boolean `attn_mask` with True = allowed).
#
# 来源：A. Vaswani 等，《Attention Is All You Need》（2017），第 3.2.1 节及其关于 $q \cdot k$ 方差的脚注；S. Raschka，《从零构建大语言模型》第 3.4.1 节及其附注"缩放点积注意力的原理"；图解电子书《看图学大模型》（其面试题"为什么要除以 $\sqrt d$"：方差、饱和与 softmax 雅可比矩阵）；骰子的类比来自本课程的 DeepSeek 讲座笔记；PyTorch 关于 `torch.nn.functional.scaled_dot_product_attention` 的文档（签名，以及 True 表示允许的布尔 `attn_mask`）。
