# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 · Trainable queries, keys and values · 可训练的查询、键和值
#
# In notebook 01 every token used its raw embedding as its query, its key and its value. The score of
# token `i` for token `j` was the dot product $x_i \cdot x_j$: fixed by the two embeddings, with nothing
# to train. What a token looks for is then exactly what it offers, so it attends most to tokens that
# already look like itself (or are simply long vectors, as "journey" and "starts" were in notebook 01).
# A noun that should look for its adjective cannot: its query is the noun itself, and it matches
# other nouns best.
#
# 在笔记本 01 中，每个词元都用它的原始嵌入同时充当查询、键和值。词元 `i` 对词元 `j` 的分数是点积 $x_i \cdot x_j$：由两个嵌入固定下来，没有任何东西可以训练。于是一个词元要找的东西恰好就是它自己提供的东西，它最关注的是本来就和它相像的词元（或者只是较长的向量，就像笔记本 01 中的 "journey" 和 "starts"）。一个名词想去找修饰它的形容词是做不到的：它的查询就是名词本身，而与它最匹配的是其他名词。
#
# The scores $X X^\top$ are symmetric: token `i` scores token `j` exactly as `j` scores `i`. The
# weights are not, because each row's softmax normalises over that query's own scores (the cell
# below prints both). Still, the symmetric scores are a real limit: "i is looking for j" and "j is
# looking for i" cannot differ. With a query matrix $W_q$ and a different key matrix $W_k$, the scores
# $(X W_q)(X W_k)^\top$ are no longer symmetric, and what a token asks for can differ from what it
# offers.
#
# 分数矩阵 $X X^\top$ 是对称的：词元 `i` 给 `j` 的分数与 `j` 给 `i` 的分数完全相同。权重则不然，因为每一行的 softmax 是在该查询自己的分数上归一化的（下面的单元格会把两者都打印出来）。尽管如此，对称的分数确实是一个限制："i 在找 j" 和 "j 在找 i" 无法有所不同。有了查询矩阵 $W_q$ 和另一个键矩阵 $W_k$，分数 $(X W_q)(X W_k)^\top$ 就不再对称，一个词元要找的东西可以不同于它提供的东西。
#
# The fix is three learned matrices. Each token gets a **query** $q = x W_q$ (what am I looking for?),
# a **key** $k = x W_k$ (what do I offer to queries?) and a **value** $v = x W_v$ (what do I pass on
# when I am attended to?). In 3Blue1Brown's picture, a noun's query asks "are there adjectives in
# front of me?", the keys of adjectives answer "yes", and their values propose the change that turns
# "creature" into "fluffy blue creature".
#
# 解决办法是三个可学习的矩阵。每个词元得到一个 **查询** $q = x W_q$（我在找什么？）、一个 **键** $k = x W_k$（我能向查询提供什么？）和一个 **值** $v = x W_v$（被关注时我传递什么？）。用 3Blue1Brown 的图景来说：名词的查询问"我前面有形容词吗？"，形容词的键回答"有"，它们的值提出修改，把 "creature" 变成 "fluffy blue creature"。
#
# What projections cannot fix is position. In "The dog chased the ball but it couldn't catch it" the
# two "it" tokens have the same embedding, so every projection gives them the same query and the
# same weights: nothing tells the first "it" from the second, or "the dog chased the ball" from "the
# ball chased the dog". Attention as built so far ignores word order entirely (notebook 01 shuffles a
# sentence to show it). Telling the two apart needs positions, added in notebook 08.
#
# 投影解决不了的是位置。在 "The dog chased the ball but it couldn't catch it" 中，两个 "it" 的嵌入相同，所以任何投影都会给它们相同的查询和相同的权重：没有任何东西能区分第一个 "it" 和第二个，也无法区分 "the dog chased the ball" 和 "the ball chased the dog"。到目前为止构建的注意力完全忽略词序（笔记本 01 打乱了一个句子来展示这一点）。要区分它们需要位置信息，笔记本 08 会加入它。

# %%
import math

import matplotlib.pyplot as plt
import torch
from torch import nn

from utils.attention import self_attention_weights
from utils.fixtures import JOURNEY_WORDS, journey_inputs
from utils.plots import attention_heatmap

inputs = journey_inputs()
raw = self_attention_weights(inputs)
scores = inputs @ inputs.T
print("scores X X^T symmetric:", torch.allclose(scores, scores.T))
print(f"weights: 'Your' -> 'journey' {raw[0, 1]:.4f}, 'journey' -> 'Your' {raw[1, 0]:.4f} (not symmetric)")

g = torch.Generator().manual_seed(0)
W_q, W_k = torch.randn(3, 3, generator=g), torch.randn(3, 3, generator=g)
projected = (inputs @ W_q) @ (inputs @ W_k).T
print("scores (X W_q)(X W_k)^T symmetric:", torch.allclose(projected, projected.T))

repeated = inputs[[0, 1, 2, 1]]  # a 4-token text whose 2nd and 4th tokens are the same word
q, k = repeated @ W_q, repeated @ W_k
w = torch.softmax(q @ k.T, dim=-1)
print("same word twice -> same query:", torch.equal(q[1], q[3]), "| same weights:", torch.allclose(w[1], w[3]))

# %% [markdown]
# ## Step by step for the query "journey" · 以查询 "journey" 为例逐步计算
#
# We follow Raschka's book: $d_{in} = 3$ input features are projected to $d_{out} = 2$. The weights are
# random for now (seeded, so the numbers below are reproducible); training would shape them.
#
# 我们沿用 Raschka 书中的做法：把 $d_{in} = 3$ 个输入特征投影到 $d_{out} = 2$ 维。权重暂时是随机的（固定了种子，所以下面的数字可以复现）；训练会塑造它们。

# %%
d_in, d_out = inputs.shape[1], 2
torch.manual_seed(123)
W_query = nn.Parameter(torch.rand(d_in, d_out), requires_grad=False)
W_key = nn.Parameter(torch.rand(d_in, d_out), requires_grad=False)
W_value = nn.Parameter(torch.rand(d_in, d_out), requires_grad=False)

query_2 = inputs[1] @ W_query      # the query of "journey", (d_out,)
keys = inputs @ W_key              # every token's key, (T, d_out)
values = inputs @ W_value          # every token's value, (T, d_out)
print("query of 'journey':", query_2)
print("keys:", keys.shape, "values:", values.shape)

# %%
scores_2 = keys @ query_2                                 # (T,)
weights_2 = torch.softmax(scores_2 / math.sqrt(d_out), dim=-1)
context_2 = weights_2 @ values                            # (d_out,)
print("scores :", scores_2)
print("weights:", weights_2)
print("context:", context_2)


# %% [markdown]
# The scores are now divided by $\sqrt{d_{out}}$, the width of the keys, before the softmax. Notebook
# 03 measures why: without it, long vectors make the softmax almost one-hot and stop the gradients.
#
# 现在分数在 softmax 之前要除以 $\sqrt{d_{out}}$，也就是键的宽度。笔记本 03 会测量其原因：没有它，长向量会让 softmax 几乎变成 one-hot，梯度也随之消失。

# %% [markdown]
# ### Exercise 1 · `project_qkv` · 练习 1
#
# Project a batch of token vectors `x` of shape `(..., T, d_in)` with three raw matrices of shape
# `(d_in, d_k)`, `(d_in, d_k)` and `(d_in, d_v)`. Return `(queries, keys, values)` in that order.
#
# 用三个形状分别为 `(d_in, d_k)`、`(d_in, d_k)` 和 `(d_in, d_v)` 的原始矩阵，对形状为 `(..., T, d_in)` 的一批词元向量 `x` 做投影。按顺序返回 `(queries, keys, values)`。
#
# <!-- rules: project_qkv -->
#
# #### Rules that grading checks · 评分检查的规则 (`project_qkv`)
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

# %% nbgrader={"grade": false, "grade_id": "project_qkv", "locked": false, "schema_version": 3, "solution": true, "task": false}
def project_qkv(x, W_q, W_k, W_v):
    """x (..., T, d_in) -> queries (..., T, d_k), keys (..., T, d_k), values (..., T, d_v)."""
    ### BEGIN SOLUTION
    return x @ W_q, x @ W_k, x @ W_v
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_project_qkv", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

x = torch.arange(12.0).reshape(2, 2, 3)
W = torch.eye(3)[:, :2]  # keeps the first two features
q, k, v = project_qkv(x, W, 2 * W, torch.eye(3))
expect_close(q, x[..., :2], "Queries should be x @ W_q.", "查询应为 x @ W_q。")
expect_close(k, 2 * x[..., :2], "Keys should be x @ W_k.", "键应为 x @ W_k。")
expect_close(v, x, "Values should be x @ W_v.", "值应为 x @ W_v。")
print("✓ project_qkv")

# %% nbgrader={"grade": true, "grade_id": "test_project_qkv_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb02
nb02.check_project_qkv(project_qkv)
### END HIDDEN TESTS

# %% [markdown]
# ## A compact class · 紧凑的类
#
# Packing the three matrices into an `nn.Module` makes them **parameters**: `model.parameters()` finds
# them, an optimizer updates them, `state_dict()` saves them. The forward pass computes every token's
# context vector at once: $\operatorname{softmax}(Q K^\top / \sqrt{d_{out}})\,V$.
#
# 把三个矩阵装进一个 `nn.Module`，它们就成了 **参数**：`model.parameters()` 能找到它们，优化器会更新它们，`state_dict()` 会保存它们。前向计算一次得到所有词元的上下文向量：$\operatorname{softmax}(Q K^\top / \sqrt{d_{out}})\,V$。

# %% [markdown]
# ### Exercise 2 · `SelfAttentionV1` · 练习 2
#
# Create `W_query`, `W_key`, `W_value` as `nn.Parameter`s of shape `(d_in, d_out)` (start them with
# `torch.rand`, as the book does) and write `forward(x)` for `x` of shape `(..., T, d_in)`. Use
# `transpose(-2, -1)` for $K^\top$ so batches work.
#
# 创建形状为 `(d_in, d_out)` 的 `nn.Parameter`：`W_query`、`W_key`、`W_value`（像书中一样用 `torch.rand` 初始化），并为形状 `(..., T, d_in)` 的 `x` 编写 `forward(x)`。用 `transpose(-2, -1)` 得到 $K^\top$，这样批量输入也能工作。
#
# <!-- rules: SelfAttentionV1 -->
#
# #### Rules that grading checks · 评分检查的规则 (`SelfAttentionV1`)
#
# - Not allowed: `F.scaled_dot_product_attention` (it computes the whole attention this forward writes).
# - The course's `attend` may not run inside your code: this exercise is that part of the work.
# - Graded in float32, float64 and bfloat16: the module moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（它会完成这个 forward 要写的整个注意力）。
# - 课程的 `attend` 不能在你的代码中运行：本练习要你写的正是这部分工作。
# - 在 float32、float64、bfloat16 下评分：用 `.to(dtype)` 转换后的模块用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "SelfAttentionV1", "locked": false, "schema_version": 3, "solution": true, "task": false}
class SelfAttentionV1(nn.Module):
    def __init__(self, d_in, d_out):
        super().__init__()
        ### BEGIN SOLUTION
        self.W_query = nn.Parameter(torch.rand(d_in, d_out))
        self.W_key = nn.Parameter(torch.rand(d_in, d_out))
        self.W_value = nn.Parameter(torch.rand(d_in, d_out))
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        queries, keys, values = x @ self.W_query, x @ self.W_key, x @ self.W_value
        scores = queries @ keys.transpose(-2, -1)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return weights @ values
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_SelfAttentionV1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close

from autograder.checks import nb02

with nb02.as_graded(SelfAttentionV1):
    sa = SelfAttentionV1(3, 2)
    expect(sa.W_query.shape == (3, 2), "W_query should have shape (d_in, d_out).", "W_query 的形状应为 (d_in, d_out)。")
    with torch.no_grad():
        for W in (sa.W_query, sa.W_key, sa.W_value):
            W.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]))
    x = torch.tensor([[1.0, 0.0, 5.0], [0.0, 2.0, 5.0]])
    w = torch.softmax(torch.tensor([[1.0, 0.0], [0.0, 4.0]]) / 2 ** 0.5, dim=-1)
    expect_close(sa(x), w @ torch.tensor([[1.0, 0.0], [0.0, 2.0]]),
                 "SelfAttentionV1 should compute softmax(Q K^T / sqrt(d_out)) V.",
                 "SelfAttentionV1 应计算 softmax(Q K^T / sqrt(d_out)) V。")
    print("✓ SelfAttentionV1")

# %% nbgrader={"grade": true, "grade_id": "test_SelfAttentionV1_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb02
nb02.check_SelfAttentionV1(SelfAttentionV1)
### END HIDDEN TESTS

# %%
torch.manual_seed(123)
sa_v1 = SelfAttentionV1(d_in, d_out)
print(sa_v1(inputs))
print("parameters:", [name for name, _ in sa_v1.named_parameters()])

# %% [markdown]
# ## nn.Linear: the same map, stored transposed · nn.Linear：同样的映射，转置存储
#
# `nn.Linear(d_in, d_out)` computes $x W^\top + b$ and stores `weight` with shape `(d_out, d_in)`: one
# row per output feature. So a raw `(d_in, d_out)` matrix `W` and a layer whose weight is `W.T` compute
# the same thing. This matters when copying weights between the two forms (exercise 4).
#
# `nn.Linear(d_in, d_out)` 计算 $x W^\top + b$，它的 `weight` 形状为 `(d_out, d_in)`：每个输出特征占一行。因此原始的 `(d_in, d_out)` 矩阵 `W` 与权重为 `W.T` 的层计算的是同一件事。在两种形式之间复制权重时（练习 4）这一点很重要。

# %%
layer = nn.Linear(d_in, d_out, bias=False)
print("nn.Linear(3, 2).weight.shape =", tuple(layer.weight.shape))
W = layer.weight.detach().T          # the raw (d_in, d_out) form
print("x @ W equals layer(x):", torch.allclose(inputs @ W, layer(inputs)))


# %% [markdown]
# ### Why nn.Linear's initialisation beats torch.rand · 为什么 nn.Linear 的初始化优于 torch.rand
#
# Take inputs with mean 0 and variance 1. A projected feature $\sum_i x_i W_{ij}$ then has mean 0
# and variance $d_{in}\,\mathbb{E}[W^2]$. `torch.rand` draws from $[0, 1)$, where $\mathbb{E}[W^2] = 1/3$:
# the variance is $d_{in}/3$ and grows with the width. Worse, every weight has mean $0.5$, so all the
# features of one token share a large common term $0.5 \sum_i x_i$: the token's features move
# together, their mean is far from 0, and a score $q \cdot k$ adds up $d_{out}$ such shared terms.
#
# 设输入的均值为 0、方差为 1。投影后的一个特征 $\sum_i x_i W_{ij}$ 的均值为 0，方差为 $d_{in}\,\mathbb{E}[W^2]$。`torch.rand` 从 $[0, 1)$ 中采样，此时 $\mathbb{E}[W^2] = 1/3$：方差是 $d_{in}/3$，随宽度增长。更糟的是，每个权重的均值都是 $0.5$，所以同一个词元的所有特征共享一个很大的公共项 $0.5 \sum_i x_i$：这个词元的各个特征一起变化，它们的均值远离 0，而分数 $q \cdot k$ 会把 $d_{out}$ 个这样的公共项累加起来。
#
# `nn.Linear` draws from $U(-1/\sqrt{d_{in}}, 1/\sqrt{d_{in}})$, where $\mathbb{E}[W^2] = 1/(3 d_{in})$:
# the variance of a feature is $1/3$ at every width, and weights of mean 0 share no common term. The
# cell measures, for both initialisations and growing $d_{in}$, the variance of the projected
# features, the size of each token's feature mean (its standard deviation across tokens), and the
# largest attention weight that results.
#
# `nn.Linear` 从 $U(-1/\sqrt{d_{in}}, 1/\sqrt{d_{in}})$ 中采样，此时 $\mathbb{E}[W^2] = 1/(3 d_{in})$：无论宽度多大，特征的方差都是 $1/3$，而均值为 0 的权重也没有公共项。下面的单元格对两种初始化和不断增大的 $d_{in}$，测量投影特征的方差、每个词元特征均值的大小（它在词元之间的标准差），以及由此得到的最大注意力权重。

# %%
def projection_stats(init, d_in, d_out=64, tokens=16, seed=0):
    """Variance of the projected features and spread of each token's feature mean (on 2,048 random
    tokens), and the mean largest attention weight of a 16-token sentence."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2048, d_in, generator=g)
    if init == "torch.rand":
        W_q, W_k = torch.rand(d_in, d_out, generator=g), torch.rand(d_in, d_out, generator=g)
    else:  # nn.Linear's default: uniform in +-1/sqrt(d_in)
        bound = 1 / math.sqrt(d_in)
        W_q, W_k = ((torch.rand(d_in, d_out, generator=g) * 2 - 1) * bound for _ in range(2))
    q, k = x @ W_q, x @ W_k                                   # (2048, d_out)
    weights = torch.softmax(q[:tokens] @ k[:tokens].T / math.sqrt(d_out), dim=-1)
    return q.var().item(), q.mean(dim=-1).std().item(), weights.max(dim=-1).values.mean().item()

widths = [16, 64, 256, 768]
fig, ax = plt.subplots(figsize=(6, 3.5))
for init in ("torch.rand", "nn.Linear"):
    stats = [projection_stats(init, d) for d in widths]
    for d, (var, mean_spread, largest) in zip(widths, stats):
        theory = (d / 3, 0.5 * math.sqrt(d)) if init == "torch.rand" else (1 / 3, math.sqrt(1 / (3 * 64)))
        print(f"{init:10s} d_in={d:3d}: feature variance {var:6.2f} (theory {theory[0]:6.2f}) | std of a token's "
              f"feature mean {mean_spread:5.2f} (theory {theory[1]:5.2f}) | mean largest weight {largest:.3f}")
    ax.plot(widths, [s[2] for s in stats], marker="o", label=init)
ax.axhline(1 / 16, color="gray", ls="--", label="uniform (1/16)")
ax.set_xscale("log"); ax.minorticks_off(); ax.set_xticks(widths, [str(w) for w in widths])
ax.set_xlabel("d_in"); ax.set_ylabel("mean largest attention weight"); ax.legend()
ax.set_title("torch.rand saturates the softmax as d_in grows")
plt.show()

# %% [markdown]
# With `torch.rand` the feature variance follows $d_{in}/3$ and each token's features carry a shared
# offset of about $0.5\sqrt{d_{in}}$, so the softmax is almost one-hot already at $d_{in} = 64$. With
# `nn.Linear` the variance stays near $1/3$, a token's feature mean is only the average of 64
# independent features (about $\sqrt{1/(3 \cdot 64)} \approx 0.07$), and the weights stay spread out.
#
# 用 `torch.rand` 时，特征方差遵循 $d_{in}/3$，每个词元的特征都带有大约 $0.5\sqrt{d_{in}}$ 的公共偏移，所以在 $d_{in} = 64$ 时 softmax 就已经几乎是 one-hot 了。用 `nn.Linear` 时，方差保持在 $1/3$ 附近，一个词元的特征均值只是 64 个独立特征的平均（约为 $\sqrt{1/(3 \cdot 64)} \approx 0.07$），权重也保持分散。

# %% [markdown]
# ### Exercise 3 · `SelfAttentionV2` · 练习 3
#
# Same computation with three `nn.Linear(d_in, d_out, bias=qkv_bias)` layers named `W_query`, `W_key`
# and `W_value`.
#
# 用三个名为 `W_query`、`W_key`、`W_value` 的 `nn.Linear(d_in, d_out, bias=qkv_bias)` 层完成同样的计算。
#
# <!-- rules: SelfAttentionV2 -->
#
# #### Rules that grading checks · 评分检查的规则 (`SelfAttentionV2`)
#
# - Not allowed: `F.scaled_dot_product_attention` (it computes the whole attention this forward writes).
# - The course's `attend` may not run inside your code: this exercise is that part of the work.
# - Graded in float32, float64 and bfloat16: the module moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（它会完成这个 forward 要写的整个注意力）。
# - 课程的 `attend` 不能在你的代码中运行：本练习要你写的正是这部分工作。
# - 在 float32、float64、bfloat16 下评分：用 `.to(dtype)` 转换后的模块用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "SelfAttentionV2", "locked": false, "schema_version": 3, "solution": true, "task": false}
class SelfAttentionV2(nn.Module):
    def __init__(self, d_in, d_out, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)
        scores = queries @ keys.transpose(-2, -1)
        weights = torch.softmax(scores / keys.shape[-1] ** 0.5, dim=-1)
        return weights @ values
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_SelfAttentionV2", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from torch import nn
from autograder.checks import expect, expect_close

from autograder.checks import nb02

with nb02.as_graded(SelfAttentionV2):
    sa = SelfAttentionV2(3, 2)
    expect(isinstance(sa.W_query, nn.Linear) and sa.W_query.bias is None,
           "W_query should be nn.Linear(d_in, d_out) without bias by default.",
           "W_query 默认应为不带偏置的 nn.Linear(d_in, d_out)。")
    with torch.no_grad():
        for layer in (sa.W_query, sa.W_key, sa.W_value):
            layer.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    x = torch.tensor([[1.0, 0.0, 5.0], [0.0, 2.0, 5.0]])
    w = torch.softmax(torch.tensor([[1.0, 0.0], [0.0, 4.0]]) / 2 ** 0.5, dim=-1)
    expect_close(sa(x), w @ torch.tensor([[1.0, 0.0], [0.0, 2.0]]),
                 "SelfAttentionV2 should compute softmax(Q K^T / sqrt(d_out)) V with its nn.Linear layers.",
                 "SelfAttentionV2 应使用它的 nn.Linear 层计算 softmax(Q K^T / sqrt(d_out)) V。")
    expect(SelfAttentionV2(3, 2, qkv_bias=True).W_key.bias is not None,
           "qkv_bias=True should give the layers a bias.", "qkv_bias=True 时这些层应带有偏置。")
    print("✓ SelfAttentionV2")

# %% nbgrader={"grade": true, "grade_id": "test_SelfAttentionV2_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb02
nb02.check_SelfAttentionV2(SelfAttentionV2)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 4 · `copy_weights_v2_to_v1` · 练习 4
#
# The book's exercise 3.1: make a `SelfAttentionV1` compute exactly what a `SelfAttentionV2` computes
# by copying the weights, in place, into the parameters of the same name. Remember the layout: V1
# holds `(d_in, d_out)`, `nn.Linear` holds `(d_out, d_in)`. Assume V2 has no biases. A copy is a
# copy: afterwards v1 may not share memory with v2, or training v1 would change v2 too. The book's
# `nn.Parameter(v2.W_query.weight.T)` is a view of v2's weight; write `copy_` under
# `torch.no_grad()`, or `nn.Parameter(weight.detach().T.clone())`.
#
# 书中的练习 3.1：把权重原地复制到同名参数中，让 `SelfAttentionV1` 精确计算出 `SelfAttentionV2` 的结果。记住布局：V1 存的是 `(d_in, d_out)`，`nn.Linear` 存的是 `(d_out, d_in)`。假设 V2 没有偏置。复制就是复制：复制之后 v1 不能与 v2 共享内存，否则训练 v1 也会改变 v2。书中的 `nn.Parameter(v2.W_query.weight.T)` 是 v2 权重的一个视图；请在 `torch.no_grad()` 下用 `copy_`，或者写 `nn.Parameter(weight.detach().T.clone())`。
#
# <!-- rules: copy_weights_v2_to_v1 -->
#
# #### Rules that grading checks · 评分检查的规则 (`copy_weights_v2_to_v1`)
#
# - Not graded (the caller guarantees it): v2 has no biases.
# - Changes `v1` in place (that is its job); no other argument.
# - Graded in float32, float64 and bfloat16: v1 and v2 share one dtype; v1's parameters keep it.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - After the copy, v1's parameters share no memory with v2 (a copy is a copy: training v1 must not change v2).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：v2 没有偏置。
# - 原地修改 `v1`（这正是它的任务）；不修改其他参数。
# - 在 float32、float64、bfloat16 下评分：v1 与 v2 的 dtype 相同；v1 的参数保持该 dtype。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 复制之后，v1 的参数不与 v2 共享内存（复制就是复制：训练 v1 不能改变 v2）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "copy_weights_v2_to_v1", "locked": false, "schema_version": 3, "solution": true, "task": false}
def copy_weights_v2_to_v1(v1, v2):
    """Copy v2's nn.Linear weights into v1's raw matrices so that v1(x) == v2(x)."""
    ### BEGIN SOLUTION
    with torch.no_grad():
        v1.W_query.copy_(v2.W_query.weight.T)
        v1.W_key.copy_(v2.W_key.weight.T)
        v1.W_value.copy_(v2.W_value.weight.T)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_copy_weights_v2_to_v1", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close
from utils.self_attention import SelfAttentionV1 as RefV1, SelfAttentionV2 as RefV2

from autograder.checks import nb02

with nb02.as_graded(copy_weights_v2_to_v1):
    torch.manual_seed(0)
    v1, v2 = RefV1(4, 2), RefV2(4, 2)
    copy_weights_v2_to_v1(v1, v2)
    x = torch.randn(3, 4)
    expect_close(v1(x), v2(x), "After copying, V1 should reproduce V2: copy each weight transposed.",
                 "复制之后，V1 应复现 V2：复制每个权重的转置。")
    shared = [n for n in ("W_query", "W_key", "W_value")
              if getattr(v1, n).untyped_storage().data_ptr() == getattr(v2, n).weight.untyped_storage().data_ptr()]
    expect(not shared, "After copying, v1 must not share memory with v2 (a copy is a copy): copy_ under torch.no_grad(), "
           "or nn.Parameter(weight.detach().T.clone()).",
           "复制之后，v1 不能与 v2 共享内存（复制就是复制）：在 torch.no_grad() 下 copy_，或者用 nn.Parameter(weight.detach().T.clone())。",
           f"shared: {shared}")
    print("✓ copy_weights_v2_to_v1")

# %% nbgrader={"grade": true, "grade_id": "test_copy_weights_v2_to_v1_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb02
nb02.check_copy_weights_v2_to_v1(copy_weights_v2_to_v1)
### END HIDDEN TESTS

# %%
torch.manual_seed(789)
sa_v2 = SelfAttentionV2(d_in, d_out)
copy_weights_v2_to_v1(sa_v1, sa_v2)
print("V1 after copying equals V2:", torch.allclose(sa_v1(inputs), sa_v2(inputs)))

# %% [markdown]
# ## What the projections change · 投影改变了什么
#
# Left: the fixed weights of notebook 01, computed from the symmetric scores $X X^\top$. Right: one
# untrained `SelfAttentionV2`. Its scores are no longer symmetric, since $q_i \cdot k_j \ne q_j \cdot k_i$
# in general: a token can score another highly without being scored highly in return. Training
# decides what each query looks for.
#
# 左图：笔记本 01 中固定的权重，由对称的分数 $X X^\top$ 算出。右图：一个未经训练的 `SelfAttentionV2`。它的分数不再对称，因为一般来说 $q_i \cdot k_j \ne q_j \cdot k_i$：一个词元可以给另一个词元打高分，而对方不必回以高分。每个查询要找什么，由训练决定。

# %%
with torch.no_grad():
    q, k = sa_v2.W_query(inputs), sa_v2.W_key(inputs)
    learned = torch.softmax(q @ k.T / math.sqrt(d_out), dim=-1)
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
attention_heatmap(raw, JOURNEY_WORDS, JOURNEY_WORDS, ax=left, title="softmax(X Xᵀ): fixed")
attention_heatmap(learned, JOURNEY_WORDS, JOURNEY_WORDS, ax=right, title="softmax(Q Kᵀ/√d): trainable")
plt.tight_layout(); plt.show()
print("scores symmetric? X Xᵀ:", torch.allclose(scores, scores.T), "| Q Kᵀ:", torch.allclose(q @ k.T, k @ q.T))

# %% [markdown]
# ## What comes next · 接下来
#
# Notebook 03 measures why the scores are divided by $\sqrt{d_k}$ and writes the general
# `scaled_dot_product_attention`, the kernel every later notebook reuses.
#
# 笔记本 03 会测量分数为什么要除以 $\sqrt{d_k}$，并编写通用的 `scaled_dot_product_attention`，它是之后每个笔记本都会复用的内核。
#
# Sources: S. Raschka, *Build a Large Language Model (From Scratch)*, section 3.4 and exercise 3.1;
# 3Blue1Brown, *Attention in transformers, visually explained* (queries, keys and values as questions,
# answers and proposed changes); A. Vaswani et al., *Attention Is All You Need* (2017); PyTorch's
# `nn.Linear` documentation (weight layout and initialisation).
#
# 来源：S. Raschka，《从零构建大语言模型》第 3.4 节和练习 3.1；3Blue1Brown，《可视化解释 Transformer 中的注意力》（把查询、键和值看作提问、回答和提出的修改）；A. Vaswani 等，《Attention Is All You Need》（2017）；PyTorch 的 `nn.Linear` 文档（权重布局与初始化）。
