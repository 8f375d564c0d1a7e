# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 01 · Dot-product attention · 点积注意力
#
# Read "The dog chased the ball": to understand "chased", you look back at "dog" and "ball". Attention
# gives a model that habit. Each token sends out a **query**, "which words matter to me?", scores
# every word of the text against it, and builds a **context vector**: a blend of all the words,
# weighted by how much each one matters.
#
# 读 "The dog chased the ball" 这句话时，为了理解 "chased"，你会回头看 "dog" 和 "ball"。注意力让模型也有这个习惯。每个词元发出一个 **查询**："哪些词对我重要？"，用它给文本中的每个词打分，然后构造一个 **上下文向量**：所有词的混合，按每个词的重要程度加权。
#
# Before attention (Bahdanau et al., 2014), recurrent translation models squeezed a whole source
# sentence into one fixed vector, and long sentences lost their beginning; Bahdanau's attention let
# the decoder look at every encoder state directly. Self-attention, the kind this course builds
# (Cheng et al., 2016; Vaswani et al., 2017), lets every position of one sequence look at every
# other position of the same sequence. In this notebook there are no trainable weights yet: each token's own
# embedding plays the query, the key and the value.
#
# 在注意力出现之前（Bahdanau 等，2014），循环神经网络翻译模型把整个源句压缩进一个固定长度的向量，长句子的开头因此丢失；Bahdanau 的注意力让解码器能直接看到编码器的每个状态。本课程构建的自注意力（Cheng 等，2016；Vaswani 等，2017）让一个序列中的每个位置都能直接看到同一序列中的其他所有位置。本笔记本还没有可训练的权重：每个词元自己的嵌入同时充当查询、键和值。

# %%
import os
import time

import matplotlib.pyplot as plt
import torch

from utils.fixtures import JOURNEY_WORDS, journey_inputs
from utils.plots import attention_heatmap

GRADING = bool(os.getenv("NBGRADER_EXECUTION"))  # grading times the loop on fewer tokens

# %% [markdown]
# ## Attention is weighted averaging · 注意力就是加权平均
#
# Start with something familiar: smoothing a noisy signal. Each smoothed point is a weighted average
# of all the points, where near points weigh more. Write the weights as a **softmax of scores**, with
# score = minus the squared distance in time, and you have the exact shape of attention:
# scores → softmax → weighted sum. Attention only changes where the scores come from: from the
# content of the tokens instead of their distance.
#
# 先从熟悉的事情开始：平滑一条带噪声的信号。每个平滑后的点都是所有点的加权平均，越近的点权重越大。把权重写成 **分数的 softmax**，其中分数 = 时间距离平方的相反数，就得到了注意力的完整形状：分数 → softmax → 加权求和。注意力唯一的改变是分数的来源：来自词元的内容，而不是它们的距离。

# %%
g = torch.Generator().manual_seed(0)
t = torch.linspace(0, 6, 120)
signal = torch.sin(t)
noisy = signal + 0.3 * torch.randn(t.shape, generator=g)

scores = -(t[:, None] - t[None, :]) ** 2 / (2 * 0.25**2)  # (query time, key time)
weights = torch.softmax(scores, dim=-1)                   # each row sums to 1
smoothed = weights @ noisy                                # weighted average per query

fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.5))
left.plot(t, noisy, ".", alpha=0.5, label="noisy")
left.plot(t, smoothed, lw=2, label="weights @ noisy")
left.plot(t, signal, "k--", lw=1, label="sin(t)")
left.set_xlabel("time t"); left.set_ylabel("signal value")
left.legend(); left.set_title("Smoothing = attention over time")
right.plot(t, weights[60], label="weights of query t = %.1f" % t[60])
right.set_xlabel("key time t"); right.set_ylabel("attention weight")
right.legend(); right.set_title("One row of the weight matrix")
plt.show()
print("row sums:", weights.sum(-1)[:3], "...")

# %% [markdown]
# ## Scores: how well does each word answer the query? · 分数：每个词对查询的回应有多好？
#
# Our text is "Your journey starts with one step", each token a 3-d vector. The **attention score**
# of input `j` for a query `q` is the dot product `q · x_j`: large when the two vectors point the
# same way and are long, small or negative otherwise. We take "journey" (`x[1]`) as the query.
#
# 我们的文本是 "Your journey starts with one step"，每个词元是一个三维向量。输入 `j` 对查询 `q` 的 **注意力分数** 是点积 `q · x_j`：两个向量方向一致且较长时分数大，否则分数小或为负。我们用 "journey"（`x[1]`）作为查询。

# %%
inputs = journey_inputs()
print(inputs)
query = inputs[1]
print("query 'journey':", query)


# %% [markdown]
# ### Exercise 1 · `attention_scores` · 练习 1
#
# Return the dot product of `query` (shape `(d,)`) with every row of `inputs` (shape `(T, d)`), as a
# tensor of shape `(T,)`. A loop over rows works; one matrix product is shorter and faster.
#
# 返回 `query`（形状 `(d,)`）与 `inputs`（形状 `(T, d)`）每一行的点积，结果是形状为 `(T,)` 的张量。对行做循环可以；一次矩阵乘法更短也更快。
#
# <!-- rules: attention_scores -->
#
# #### Rules that grading checks · 评分检查的规则 (`attention_scores`)
#
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "attention_scores", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attention_scores(query: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """Dot product of `query` (d,) with each row of `inputs` (T, d) -> (T,)."""
    ### BEGIN SOLUTION
    return inputs @ query
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attention_scores", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close
from utils.fixtures import journey_inputs

inputs = journey_inputs()

expect_close(attention_scores(inputs[1], inputs),
             torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865]),
             "Scores for 'journey' should match the book: score j is query . inputs[j].",
             "'journey' 的分数应与书中一致：第 j 个分数是 query · inputs[j]。", atol=1e-4)
print("✓ attention_scores")

# %% nbgrader={"grade": true, "grade_id": "test_attention_scores_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb01
nb01.check_attention_scores(attention_scores)
### END HIDDEN TESTS

# %% [markdown]
# "journey" scores itself highest, then "starts", whose embedding points almost the same way.
#
# "journey" 给自己的分数最高，其次是嵌入方向几乎相同的 "starts"。

# %% [markdown]
# ## Softmax: from scores to weights · Softmax：从分数到权重
#
# Scores are not yet weights: they do not sum to 1 and could be negative. Dividing by their sum would
# fix the total but breaks on negative scores. **Softmax** first makes every score positive with
# `exp`, then divides by the total:
#
# $$\operatorname{softmax}(x)_i = \frac{e^{x_i}}{\sum_j e^{x_j}}$$
#
# 分数还不是权重：它们的和不为 1，而且可能为负。直接除以总和可以让总和为 1，但遇到负分数就不成立了。**Softmax** 先用 `exp` 让每个分数变成正数，再除以总和（见上式）。
#
# Two details matter in practice. `exp` overflows float32 above about 88, so a score of 1000 gives
# `inf / inf = nan`. Subtracting the maximum of each row first changes nothing mathematically (the
# factor $e^{-m}$ cancels) and keeps every exponent at most 0. And a score of `-inf` must get weight
# exactly 0: that is how masks will hide tokens in notebook 04.
#
# 实践中有两个细节很重要。float32 的 `exp` 在大约 88 以上就会溢出，所以分数 1000 会得到 `inf / inf = nan`。先减去每行的最大值在数学上不改变结果（因子 $e^{-m}$ 被约掉），并让每个指数都不超过 0。另外，分数为 `-inf` 的位置必须得到恰好为 0 的权重：笔记本 04 中的掩码正是这样隐藏词元的。

# %%
scores = attention_scores(query, inputs)
naive = scores / scores.sum()
print("divide by the sum:", naive, "sum", naive.sum().item())
big = torch.tensor([1000.0, 1001.0])
print("exp(1000) in float32:", torch.exp(big[0]).item(), "-> naive softmax:", torch.exp(big) / torch.exp(big).sum())


# %% [markdown]
# ### Exercise 2 · `softmax` · 练习 2
#
# Write a numerically stable `softmax(x, dim=-1)` with `exp`, `amax` (or `max`) and `sum`, along any
# `dim`, for tensors of any shape. Subtract each slice's own maximum (keep the dimension with
# `keepdim=True` so it broadcasts), and do not change `x` in place. Calling `torch.softmax` or
# `F.softmax` is not allowed here: this is the exercise.
#
# 用 `exp`、`amax`（或 `max`）和 `sum` 编写数值稳定的 `softmax(x, dim=-1)`，适用于任意 `dim` 和任意形状的张量。减去每个切片自己的最大值（用 `keepdim=True` 保留维度以便广播），并且不要原地修改 `x`。这里不允许调用 `torch.softmax` 或 `F.softmax`：这正是本练习的内容。
#
# <!-- rules: softmax -->
#
# #### Rules that grading checks · 评分检查的规则 (`softmax`)
#
# - Not allowed: `torch.softmax` (this exercise writes it); `F.softmax` (this exercise writes it); `Tensor.softmax` (this exercise writes it); `torch.special.softmax` (this exercise writes it); `torch.log_softmax` (its exp is the softmax); `F.log_softmax` (its exp is the softmax); `Tensor.log_softmax` (its exp is the softmax).
# - Not graded (the caller guarantees it): every slice along `dim` holds a finite entry, and none is `+inf` or NaN.
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`torch.softmax`（本练习要写的正是它）；`F.softmax`（本练习要写的正是它）；`Tensor.softmax`（本练习要写的正是它）；`torch.special.softmax`（本练习要写的正是它）；`torch.log_softmax`（它的 exp 就是 softmax）；`F.log_softmax`（它的 exp 就是 softmax）；`Tensor.log_softmax`（它的 exp 就是 softmax）。
# - 不评分（由调用者保证）：沿 `dim` 的每个切片都至少有一个有限值，且没有 `+inf` 或 NaN。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "softmax", "locked": false, "schema_version": 3, "solution": true, "task": false}
def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Stable softmax along `dim`; entries of -inf get weight 0."""
    ### BEGIN SOLUTION
    shifted = x - x.amax(dim=dim, keepdim=True)
    exp = torch.exp(shifted)
    return exp / exp.sum(dim=dim, keepdim=True)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_softmax", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb01

with nb01.as_graded(softmax):
    expect_close(softmax(torch.tensor([0.9544, 1.4950, 1.4754, 0.8434, 0.7070, 1.0865])),
                 torch.tensor([0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]),
                 "softmax of the book's scores should give the book's weights: exp(score) / sum of exp(scores).",
                 "对书中分数做 softmax 应得到书中的权重：exp(分数) / 所有 exp(分数) 之和。", atol=1e-4)
    expect_close(softmax(torch.tensor([1000.0, 1001.0])), torch.tensor([0.2689414, 0.7310586]),
                 "softmax must stay finite for large scores: subtract the maximum before exp.",
                 "分数很大时 softmax 也必须是有限值：在 exp 之前减去最大值。")
    print("✓ softmax")

# %% nbgrader={"grade": true, "grade_id": "test_softmax_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb01
nb01.check_softmax(softmax)
### END HIDDEN TESTS

# %% [markdown]
# Softmax also **sharpens**: multiply the same scores by a growing factor and the weight moves to
# the highest scores, while the low ones fade towards 0. Where two scores nearly tie, they share the
# weight until the factor is large enough to separate them: "journey" (1.4950) and "starts" (1.4754)
# differ by only 0.02, so at x16 the largest weight is still only 0.577, and "starts" holds most of
# the rest (the cell prints the two largest weights at every factor). Notebook 03 shows why this
# sharpening is a problem when vectors get long, and why attention divides its scores by $\sqrt{d}$.
#
# Softmax 还会 **锐化**：把同一组分数乘以越来越大的因子，权重就会移向最高的分数，而低分数的权重逐渐趋于 0。如果两个分数几乎相等，它们会一直分享权重，直到因子大到足以把它们分开："journey"（1.4950）和 "starts"（1.4754）只差 0.02，所以在 x16 时最大的权重仍然只有 0.577，剩下的大部分归 "starts"（单元格打印了每个因子下最大的两个权重）。笔记本 03 会说明为什么当向量变长时这种锐化是个问题，以及注意力为什么要把分数除以 $\sqrt{d}$。

# %%
factors = [0.5, 1, 2, 4, 8, 16]
fig, ax = plt.subplots(figsize=(7, 3))
for f in factors:
    ax.plot(JOURNEY_WORDS, softmax(f * scores), marker="o", label=f"scores x {f}")
ax.set_xlabel("key token"); ax.set_ylabel("weight"); ax.set_title("Softmax sharpens as scores grow"); ax.legend(fontsize=8)
plt.show()
for f in factors:
    top = softmax(f * scores).topk(2)
    print(f"x{f:<3}: largest weight {top.values[0]:.3f} ({JOURNEY_WORDS[top.indices[0]]}), "
          f"second {top.values[1]:.3f} ({JOURNEY_WORDS[top.indices[1]]}), the other four {1 - top.values.sum():.3f}")


# %% [markdown]
# ## The context vector · 上下文向量
#
# The context vector of a query is the weighted sum of the inputs, $z = \sum_j \alpha_j x_j$: it
# is the query's view of the whole sentence, mostly made of the tokens it attends to.
#
# 一个查询的上下文向量是输入的加权和 $z = \sum_j \alpha_j x_j$：它是该查询对整句话的看法，主要由它关注的词元组成。

# %% [markdown]
# ### Exercise 3 · `context_vector` · 练习 3
#
# Combine your two functions: scores, then softmax weights, then the weighted sum of the input rows.
# `query` has shape `(d,)`, `inputs` `(T, d)`, the result `(d,)`. Here `torch.softmax` is allowed
# too: this exercise is about the weighted sum.
#
# 组合你的两个函数：先算分数，再用 softmax 得到权重，最后对输入各行加权求和。`query` 的形状为 `(d,)`，`inputs` 为 `(T, d)`，结果为 `(d,)`。这里也可以使用 `torch.softmax`：本练习讲的是加权求和。
#
# <!-- rules: context_vector -->
#
# #### Rules that grading checks · 评分检查的规则 (`context_vector`)
#
# - Not allowed: `F.scaled_dot_product_attention` (with `scale=1.0` it computes this context vector).
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（用 `scale=1.0` 调用它就会算出这个上下文向量）。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "context_vector", "locked": false, "schema_version": 3, "solution": true, "task": false}
def context_vector(query: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """Attention-weighted sum of the input rows for one query: (d,), (T, d) -> (d,)."""
    ### BEGIN SOLUTION
    weights = softmax(attention_scores(query, inputs), dim=-1)
    return weights @ inputs
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_context_vector", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close
from utils.fixtures import journey_inputs

from autograder.checks import nb01

with nb01.as_graded(context_vector):
    inputs = journey_inputs()

    expect_close(context_vector(inputs[1], inputs), torch.tensor([0.4419, 0.6515, 0.5683]),
                 "The context vector of 'journey' should match the book: sum_j softmax(scores)_j * inputs[j].",
                 "'journey' 的上下文向量应与书中一致：sum_j softmax(分数)_j * inputs[j]。", atol=1e-4)
    print("✓ context_vector")

# %% nbgrader={"grade": true, "grade_id": "test_context_vector_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb01
nb01.check_context_vector(context_vector)
### END HIDDEN TESTS

# %% [markdown]
# ## Every query at once · 一次计算所有查询
#
# Each token can be a query. Stacking all the scores gives the matrix $S = X X^\top$ of shape
# `(T, T)`: row `i` holds query `i`'s scores against every key. A softmax along each row gives the
# **attention weights**, and one more product gives all context vectors: $Z = \operatorname{softmax}(X X^\top)\,X$.
# With a batch `(B, T, d)`, transpose only the last two dims: `transpose(-2, -1)`, never `.T`, which
# reverses every dimension and would mix the batch.
#
# 每个词元都可以作为查询。把所有分数叠起来得到形状为 `(T, T)` 的矩阵 $S = X X^\top$：第 `i` 行是查询 `i` 对每个键的分数。对每一行做 softmax 得到 **注意力权重**，再做一次乘法就得到所有上下文向量：$Z = \operatorname{softmax}(X X^\top)\,X$。对于一批输入 `(B, T, d)`，只转置最后两维：用 `transpose(-2, -1)`，不要用 `.T`，它会反转所有维度并把批次混在一起。

# %% [markdown]
# ### Exercise 4 · `self_attention_weights` · 练习 4
#
# Return softmax($X X^\top$) along the last dim, for `inputs` of shape `(..., T, d)` with any number
# of leading batch dims. The result has shape `(..., T, T)` and every row sums to 1. Your `softmax`
# or `torch.softmax`, either is fine.
#
# 对形状为 `(..., T, d)`（可以有任意多个前导批维）的 `inputs`，返回沿最后一维做 softmax 的 $X X^\top$。结果形状为 `(..., T, T)`，每一行之和为 1。用你的 `softmax` 或 `torch.softmax` 都可以。
#
# <!-- rules: self_attention_weights -->
#
# #### Rules that grading checks · 评分检查的规则 (`self_attention_weights`)
#
# - Not allowed: `F.scaled_dot_product_attention` (with the identity as values it returns these weights).
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（以单位矩阵作为值调用它就会返回这些权重）。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "self_attention_weights", "locked": false, "schema_version": 3, "solution": true, "task": false}
def self_attention_weights(inputs: torch.Tensor) -> torch.Tensor:
    """softmax(X X^T) row-wise: (..., T, d) -> (..., T, T)."""
    ### BEGIN SOLUTION
    scores = inputs @ inputs.transpose(-2, -1)
    return softmax(scores, dim=-1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_self_attention_weights", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close
from utils.fixtures import journey_inputs

from autograder.checks import nb01

with nb01.as_graded(self_attention_weights):
    inputs = journey_inputs()

    w = self_attention_weights(inputs)
    expect_close(w.sum(dim=-1), torch.ones(6),
                 "Every row of the weights should sum to 1: softmax over the last dim.",
                 "权重的每一行之和应为 1：对最后一维做 softmax。")
    expect_close(w[1], torch.tensor([0.1385, 0.2379, 0.2333, 0.1240, 0.1082, 0.1581]),
                 "Row 1 should be the weights of the query 'journey'.",
                 "第 1 行应是查询 'journey' 的权重。", atol=1e-4)
    print("✓ self_attention_weights")

# %% nbgrader={"grade": true, "grade_id": "test_self_attention_weights_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb01
nb01.check_self_attention_weights(self_attention_weights)
### END HIDDEN TESTS

# %% [markdown]
# A heatmap shows the whole matrix: rows are queries, columns are keys. Almost every row gives its
# largest weight to "journey" or "starts", the two longest vectors (printed below). A raw dot product rewards long vectors, not only similar ones,
# and nothing here can learn otherwise: the reason notebook 02 adds trainable projections.
#
# 热力图展示了整个矩阵：行是查询，列是键。几乎每一行都把最大的权重给了 "journey" 或 "starts"，也就是最长的两个向量（见下面的输出）。原始点积偏爱长向量，而不只是相似的向量，而这里没有任何东西可以学会别的做法：这正是笔记本 02 加入可训练投影的原因。

# %%
w = self_attention_weights(inputs)
attention_heatmap(w, JOURNEY_WORDS, JOURNEY_WORDS,
                  title="softmax(X Xᵀ) for 'Your journey starts with one step'")
plt.show()
print("most attended key per query:", [JOURNEY_WORDS[j] for j in w.argmax(dim=-1)])
print("vector lengths:", {word: round(n, 2) for word, n in zip(JOURNEY_WORDS, inputs.norm(dim=-1).tolist())})


# %% [markdown]
# ### Exercise 5 · `self_attention` · 练习 5
#
# Return the context vectors of all tokens, shape `(..., T, d)`: the weights times the inputs.
#
# 返回所有词元的上下文向量，形状为 `(..., T, d)`：权重乘以输入。
#
# <!-- rules: self_attention -->
#
# #### Rules that grading checks · 评分检查的规则 (`self_attention`)
#
# - Not allowed: `F.scaled_dot_product_attention` (with `scale=1.0` it computes this whole exercise).
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（用 `scale=1.0` 调用它就会完成整个练习）。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "self_attention", "locked": false, "schema_version": 3, "solution": true, "task": false}
def self_attention(inputs: torch.Tensor) -> torch.Tensor:
    """All context vectors at once: (..., T, d) -> (..., T, d)."""
    ### BEGIN SOLUTION
    return self_attention_weights(inputs) @ inputs
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_self_attention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close
from utils.fixtures import journey_inputs

from autograder.checks import nb01

with nb01.as_graded(self_attention):
    inputs = journey_inputs()

    z = self_attention(inputs)
    expect_close(z[1], torch.tensor([0.4419, 0.6515, 0.5683]),
                 "Row 1 should be the context vector of 'journey', the same as context_vector(inputs[1], inputs).",
                 "第 1 行应是 'journey' 的上下文向量，与 context_vector(inputs[1], inputs) 相同。", atol=1e-4)
    print("✓ self_attention")

# %% nbgrader={"grade": true, "grade_id": "test_self_attention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb01
nb01.check_self_attention(self_attention)
### END HIDDEN TESTS

# %% [markdown]
# ## Attention alone ignores word order · 注意力本身忽略词序
#
# Nothing in $\operatorname{softmax}(X X^\top)\,X$ knows where a token stands. Shuffle the tokens and
# every token gets the same context vector as before, only in the shuffled place: the outputs are
# shuffled the same way. The cell reverses the sentence: "Your journey starts with one step" and
# "step one with starts journey Your" give the same set of context vectors. Trainable projections (notebook 02) do not change
# that; notebook 08 adds positions, so that order can matter.
#
# $\operatorname{softmax}(X X^\top)\,X$ 中没有任何东西知道一个词元所在的位置。把词元打乱后，每个词元得到的上下文向量和之前完全一样，只是换到了打乱后的位置上：输出以同样的方式被打乱。下面的单元格把句子倒过来："Your journey starts with one step" 和 "step one with starts journey Your" 得到的是同一组上下文向量。可训练的投影（笔记本 02）不会改变这一点；笔记本 08 会加入位置信息，让顺序变得重要。

# %%
order = torch.arange(len(inputs) - 1, -1, -1)  # the sentence backwards; any permutation works
print("reordered:", " ".join(JOURNEY_WORDS[i] for i in order))
print("outputs shuffled the same way:", torch.allclose(self_attention(inputs[order]), self_attention(inputs)[order], atol=1e-6))

# %% [markdown]
# ## One matrix product instead of a loop · 用一次矩阵乘法代替循环
#
# Both routes give the same numbers; the matrix route hands the whole job to one optimized kernel.
# The cell measures both, side by side in one run, on 1,024 random tokens of width 64 (your machine's
# ratio is printed; it varies with the CPU).
#
# 两种方式得到相同的数值；矩阵方式把全部工作交给一个优化过的内核。下面的单元格在同一次运行中并排测量两者，输入为 1,024 个宽度为 64 的随机词元（会打印出你机器上的速度比，它随 CPU 而变化）。

# %%
# NBVAL_IGNORE_OUTPUT
x = torch.randn(128 if GRADING else 1024, 64, generator=torch.Generator().manual_seed(0))

def best_of(fn, repeats=5):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)

loop_out = torch.stack([context_vector(x[i], x) for i in range(len(x))])
print("same result:", torch.allclose(loop_out, self_attention(x), atol=1e-5))
t_loop = best_of(lambda: torch.stack([context_vector(x[i], x) for i in range(len(x))]))
t_matrix = best_of(lambda: self_attention(x))
print(f"{len(x)} tokens: loop over queries {t_loop * 1e3:.1f} ms | one matrix product {t_matrix * 1e3:.2f} ms "
      + (f"| the matrix route is {t_loop / t_matrix:.0f}x faster on this machine" if t_matrix < t_loop
         else f"| on this machine the loop was not slower ({t_matrix / t_loop:.1f}x the loop's time for one product)"))

# %% [markdown]
# ## What comes next · 接下来
#
# Here every token's query, key and value were its raw embedding, so "it" could only attend to words
# that already look like "it". Notebook 02 gives attention three trainable projections, $W_q$, $W_k$,
# $W_v$, so a model can learn *what* to look for.
#
# 这里每个词元的查询、键和值都是它的原始嵌入，所以 "it" 只能关注那些本来就像 "it" 的词。笔记本 02 会给注意力加上三个可训练的投影 $W_q$、$W_k$、$W_v$，让模型学会 *要找什么*。
#
# Sources: S. Raschka, *Build a Large Language Model (From Scratch)*, section 3.3 (the example and its
# numbers: scores 0.9544…, weights 0.1385…, context 0.4419…); D. Bahdanau, K. Cho, Y. Bengio, *Neural
# Machine Translation by Jointly Learning to Align and Translate* (2014); J. Cheng, L. Dong,
# M. Lapata, *Long Short-Term Memory-Networks for Machine Reading* (2016, intra-attention); A. Vaswani
# et al., *Attention Is All You Need* (2017); smoothing as weighting
# after the course's transformer deep-dive notes.
#
# 来源：S. Raschka，《从零构建大语言模型》第 3.3 节（示例及其数值）；D. Bahdanau、K. Cho、Y. Bengio，《通过联合学习对齐与翻译的神经机器翻译》（2014）；J. Cheng、L. Dong、M. Lapata，《Long Short-Term Memory-Networks for Machine Reading》（2016，句内注意力）；A. Vaswani 等，《Attention Is All You Need》（2017）；把平滑看作加权的思路来自本课程的 Transformer 深入讲解笔记。
