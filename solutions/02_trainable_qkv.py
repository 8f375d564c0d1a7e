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
# In notebook 01 every token used its raw embedding for everything. Take "The dog chased the ball but
# it couldn't catch it". The first "it" should attend to "dog" (the one that could not catch), the
# second to "ball". With raw dot products that is impossible to learn: the score of "it" for "dog" is
# fixed by the two embeddings, there is nothing to train, and the score matrix $X X^\top$ is
# symmetric, so "it" attends to "dog" exactly as strongly as "dog" attends to "it".
#
# The fix is three learned matrices. Each token gets a **query** $q = x W_q$ (what am I looking for?),
# a **key** $k = x W_k$ (what do I offer to queries?) and a **value** $v = x W_v$ (what do I pass on
# when I am attended to?). In 3Blue1Brown's picture, a noun's query asks "are there adjectives in
# front of me?", the keys of adjectives answer "yes", and their values propose the change that turns
# "creature" into "fluffy blue creature".
#
# 在笔记本 01 中，每个词元的一切都用它的原始嵌入。看这句话 "The dog chased the ball but it couldn't catch it"。第一个 "it" 应该关注 "dog"（没能抓住的那一个），第二个应该关注 "ball"。用原始点积不可能学会这一点："it" 对 "dog" 的分数由两个嵌入固定下来，没有任何东西可以训练；而且分数矩阵 $X X^\top$ 是对称的，所以 "it" 对 "dog" 的关注和 "dog" 对 "it" 的关注一样强。
#
# 解决办法是三个可学习的矩阵。每个词元得到一个 **查询** $q = x W_q$（我在找什么？）、一个 **键** $k = x W_k$（我能向查询提供什么？）和一个 **值** $v = x W_v$（被关注时我传递什么？）。用 3Blue1Brown 的图景来说：名词的查询问"我前面有形容词吗？"，形容词的键回答"有"，它们的值提出修改，把 "creature" 变成 "fluffy blue creature"。

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
print("X X^T symmetric:", torch.allclose(scores, scores.T))

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
# `torch.rand` draws from $[0, 1)$: every weight is positive, so every projected feature is a sum of
# $d_{in}$ positive terms and grows with $d_{in}$, and so do the scores. `nn.Linear` draws from
# $U(-1/\sqrt{d_{in}}, 1/\sqrt{d_{in}})$: centred on zero and shrunk with the width, so the scores keep
# the same spread at any width. The cell measures the largest attention weight of a random sentence
# for both, at growing widths.
#
# `torch.rand` 从 $[0, 1)$ 中采样：每个权重都是正的，因此每个投影后的特征都是 $d_{in}$ 个正项之和，随 $d_{in}$ 增长，分数也随之增长。`nn.Linear` 从 $U(-1/\sqrt{d_{in}}, 1/\sqrt{d_{in}})$ 中采样：以零为中心，并随宽度缩小，所以无论宽度多大，分数的分布范围都保持不变。下面的单元格在不同宽度下，测量一个随机句子在两种初始化下的最大注意力权重。

# %%
def largest_weight(init, d_in, d_out=64, tokens=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, d_in, generator=g)
    if init == "torch.rand":
        W_q, W_k = torch.rand(d_in, d_out, generator=g), torch.rand(d_in, d_out, generator=g)
    else:  # nn.Linear's default: uniform in +-1/sqrt(d_in)
        bound = 1 / math.sqrt(d_in)
        W_q, W_k = ((torch.rand(d_in, d_out, generator=g) * 2 - 1) * bound for _ in range(2))
    scores = (x @ W_q) @ (x @ W_k).T / math.sqrt(d_out)
    return torch.softmax(scores, dim=-1).max(dim=-1).values.mean().item()

widths = [16, 64, 256, 768]
for init in ("torch.rand", "nn.Linear"):
    values = [largest_weight(init, d) for d in widths]
    plt.plot(widths, values, marker="o", label=init)
    print(init, [round(v, 3) for v in values])
plt.axhline(1 / 16, color="gray", ls="--", label="uniform (1/16)")
plt.xscale("log"); plt.minorticks_off(); plt.xticks(widths, [str(w) for w in widths]); plt.xlabel("d_in"); plt.ylabel("mean largest weight"); plt.legend()
plt.title("torch.rand saturates the softmax as d_in grows")
plt.show()


# %% [markdown]
# ### Exercise 3 · `SelfAttentionV2` · 练习 3
#
# Same computation with three `nn.Linear(d_in, d_out, bias=qkv_bias)` layers named `W_query`, `W_key`
# and `W_value`.
#
# 用三个名为 `W_query`、`W_key`、`W_value` 的 `nn.Linear(d_in, d_out, bias=qkv_bias)` 层完成同样的计算。

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
# holds `(d_in, d_out)`, `nn.Linear` holds `(d_out, d_in)`. Assume V2 has no biases.
#
# 书中的练习 3.1：把权重原地复制到同名参数中，让 `SelfAttentionV1` 精确计算出 `SelfAttentionV2` 的结果。记住布局：V1 存的是 `(d_in, d_out)`，`nn.Linear` 存的是 `(d_out, d_in)`。假设 V2 没有偏置。

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
from autograder.checks import expect_close
from utils.self_attention import SelfAttentionV1 as RefV1, SelfAttentionV2 as RefV2

torch.manual_seed(0)
v1, v2 = RefV1(4, 2), RefV2(4, 2)
copy_weights_v2_to_v1(v1, v2)
x = torch.randn(3, 4)
expect_close(v1(x), v2(x), "After copying, V1 should reproduce V2: copy each weight transposed.",
             "复制之后，V1 应复现 V2：复制每个权重的转置。")
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
# in general; "it" can
# now attend to "dog" without "dog" attending to "it". Training decides what each query looks for.
#
# 左图：笔记本 01 中固定的权重，由对称的分数 $X X^\top$ 算出。右图：一个未经训练的 `SelfAttentionV2`。它的分数不再对称，因为一般来说 $q_i \cdot k_j \ne q_j \cdot k_i$；现在 "it" 可以关注 "dog"，而 "dog" 不必关注 "it"。每个查询要找什么，由训练决定。

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
# Sources: S. Raschka, *Build a Large Language Model (From Scratch)*, section 3.4 and exercise 3.1;
# 3Blue1Brown, *Attention in transformers, visually explained* (queries, keys and values as questions,
# answers and proposed changes); A. Vaswani et al., *Attention Is All You Need* (2017); PyTorch's
# `nn.Linear` documentation (weight layout and initialisation).
#
# 笔记本 03 会测量分数为什么要除以 $\sqrt{d_k}$，并编写通用的 `scaled_dot_product_attention`，它是之后每个笔记本都会复用的内核。
#
# 来源：S. Raschka，《从零构建大语言模型》第 3.4 节和练习 3.1；3Blue1Brown，《可视化解释 Transformer 中的注意力》（把查询、键和值看作提问、回答和提出的修改）；A. Vaswani 等，《Attention Is All You Need》（2017）；PyTorch 的 `nn.Linear` 文档（权重布局与初始化）。
