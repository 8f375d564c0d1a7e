# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 04 · Causal attention · 因果注意力
#
# A language model learns by predicting the next token. It does not do that one token at a time:
# one forward pass over "Your journey starts with one step" makes a prediction at every position at
# once ("Your" → "journey", "Your journey" → "starts", ...), so a text of T tokens gives T - 1
# training examples for the price of one pass: every position but the last, whose next token is not
# in the text (the cell below lists the 5 of this 6-token sentence). That only works if position i cannot look at positions after
# i. If it could, the answer it is asked for would be sitting right there, and the model would learn
# to copy instead of to predict.
#
# 语言模型通过预测下一个词元来学习。但它并不是一次只预测一个词元：对 "Your journey starts with one step" 做一次前向计算，就能同时在每个位置上做出预测（"Your" → "journey"，"Your journey" → "starts"，……），所以一段 T 个词元的文本，只花一次前向计算就得到 T - 1 个训练样本：除最后一个位置之外的每个位置（最后一个位置的下一个词元不在文本中；下面的单元格列出了这个 6 个词元的句子的 5 个样本）。这只有在位置 i 看不到 i 之后的位置时才成立。如果能看到，要预测的答案就摆在眼前，模型学会的将是抄答案，而不是预测。
#
# **Causal attention** (also called masked attention) enforces this: each query may attend to its
# own key and to earlier keys, never to later ones. In this notebook you build the mask, apply it by
# the two routes of Raschka's book, see why the second route must use $-\infty$ and not 0, prove
# with an experiment that nothing leaks, and pack it all into a module whose mask travels with it.
#
# **因果注意力**（也叫掩码注意力）保证了这一点：每个查询可以关注它自己的键和更早的键，但绝不能关注之后的键。在本笔记本中，你将构造因果掩码，用 Raschka 书中的两条路线应用它，看清第二条路线为什么必须用 $-\infty$ 而不是 0，用实验证明没有信息泄漏，并把这一切装进一个让掩码随之移动的模块。

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from utils.fixtures import JOURNEY_WORDS, journey_inputs
from utils.plots import attention_heatmap
from utils.self_attention import SelfAttentionV2

inputs = journey_inputs()                      # (T, d_in) = (6, 3)
for i in range(len(JOURNEY_WORDS) - 1):
    print(f"position {i}: sees {' '.join(JOURNEY_WORDS[:i + 1])!r:38} -> must predict {JOURNEY_WORDS[i + 1]!r}")

# %% [markdown]
# ## Without a mask, every token sees the future · 没有掩码时，每个词元都能看到未来
#
# We reuse the book's untrained `SelfAttentionV2` (seed 789) from notebook 02. Look at the first row:
# "Your" spreads its attention over all six tokens, including "step", the last word of the sentence.
# Everything above the diagonal is information from the future.
#
# 我们沿用笔记本 02 中书里那个未经训练的 `SelfAttentionV2`（种子 789）。看第一行："Your" 把注意力分散到全部六个词元上，包括句子的最后一个词 "step"。对角线以上的一切都是来自未来的信息。

# %%
torch.manual_seed(789)
sa_v2 = SelfAttentionV2(3, 2)
with torch.no_grad():
    queries, keys = sa_v2.W_query(inputs), sa_v2.W_key(inputs)
    scores = queries @ keys.T / math.sqrt(keys.shape[-1])   # (T, T), already scaled
    weights = torch.softmax(scores, dim=-1)
print(weights.round(decimals=4))
future = torch.ones(6, 6, dtype=torch.bool).triu(1)
print(f"share of the attention that goes to future tokens: {weights[future].sum() / weights.sum():.1%}")
attention_heatmap(weights, JOURNEY_WORDS, JOURNEY_WORDS, title="No mask: the upper triangle is the future")
plt.show()


# %% [markdown]
# ## The mask · 掩码
#
# A causal mask is a `(T_q, T_k)` boolean matrix. In this course **True means BLOCKED**: entry
# `(i, j)` is True when key `j` comes after query `i`, so the mask is True strictly above the
# diagonal. PyTorch's `masked_fill(mask, value)` writes `value` where the mask is True.
#
# 因果掩码是一个 `(T_q, T_k)` 的布尔矩阵。在本课程中 **True 表示被屏蔽**：当键 `j` 在查询 `i` 之后时，`(i, j)` 处为 True，所以掩码恰好在对角线以上为 True。PyTorch 的 `masked_fill(mask, value)` 会在掩码为 True 的地方写入 `value`。
#
# When there are **fewer queries than keys**, the queries are the *last* `T_q` positions. This is
# what happens when a model generates with a KV cache (notebook 07, `07_kv_cache.ipynb`): the keys of the earlier tokens
# are kept, and only the new token asks a query. So query `i` may see key `j` exactly when
# $j \le i + (T_k - T_q)$: the mask is aligned to the **bottom-right** corner.
#
# 当 **查询少于键** 时，这些查询是 *最后* `T_q` 个位置。用 KV 缓存生成文本时（笔记本 07，`07_kv_cache.ipynb`）正是如此：之前词元的键被保留下来，只有新的词元发出查询。所以查询 `i` 当且仅当 $j \le i + (T_k - T_q)$ 时可以看到键 `j`：掩码对齐到 **右下角**。

# %% [markdown]
# ### Exercise 1 · `causal_mask` · 练习 1
#
# Return a boolean tensor of shape `(num_queries, num_keys)` (`num_keys` defaults to `num_queries`),
# created on `device`, that is True where query `i` may **not** see key `j`, bottom-right aligned.
# Hint: `torch.triu(..., diagonal=...)` keeps the entries on and above a chosen diagonal.
#
# 返回一个形状为 `(num_queries, num_keys)` 的布尔张量（`num_keys` 默认等于 `num_queries`），创建在 `device` 上；在查询 `i` **不能** 看到键 `j` 的地方为 True，并且右下对齐。提示：`torch.triu(..., diagonal=...)` 保留选定对角线及其上方的元素。
#
# <!-- rules: causal_mask -->
#
# #### Rules that grading checks · 评分检查的规则 (`causal_mask`)
#
# - Not graded (the caller guarantees it): num_keys >= num_queries (the queries are the last positions of the keys).
# - dtype: the result is `torch.bool`.
# - Device: the result is created on the `device` argument (pass `device=device` to what you build).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：num_keys >= num_queries（查询是键的最后几个位置）。
# - dtype：结果是 `torch.bool`。
# - 设备：结果创建在参数 `device` 指定的设备上（把 `device=device` 传给你构造的张量）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "causal_mask", "locked": false, "schema_version": 3, "solution": true, "task": false}
def causal_mask(num_queries, num_keys=None, device=None):
    """(T_q, T_k) bool, True = blocked: query i sees key j iff j <= i + (T_k - T_q)."""
    ### BEGIN SOLUTION
    num_keys = num_queries if num_keys is None else num_keys
    ones = torch.ones(num_queries, num_keys, dtype=torch.bool, device=device)
    return ones.triu(1 + num_keys - num_queries)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_causal_mask", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

m = causal_mask(3)
expect(isinstance(m, torch.Tensor) and m.dtype == torch.bool,
       "causal_mask should return a boolean tensor.", "causal_mask 应返回布尔张量。")
expect(m.tolist() == [[False, True, True], [False, False, True], [False, False, False]],
       "causal_mask(3) should be True strictly above the diagonal (the future).",
       "causal_mask(3) 应恰好在对角线以上（未来）为 True。")
expect(causal_mask(2, 4).tolist() == [[False, False, False, True], [False, False, False, False]],
       "causal_mask(2, 4) should be bottom-right aligned: the 2 queries are the last 2 of 4 positions.",
       "causal_mask(2, 4) 应右下对齐：这 2 个查询是 4 个位置中的最后 2 个。")
print("✓ causal_mask")

# %% nbgrader={"grade": true, "grade_id": "test_causal_mask_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb04
nb04.check_causal_mask(causal_mask)
### END HIDDEN TESTS

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), gridspec_kw={"width_ratios": [6, 7]})
for ax, (t_q, t_k) in zip(axes, [(6, 6), (3, 7)]):
    m = causal_mask(t_q, t_k)
    ax.imshow(m.numpy(), cmap="Greys", vmin=0, vmax=1.6)
    for i in range(t_q):
        for j in range(t_k):
            ax.text(j, i, "✗" if m[i, j] else "✓", ha="center", va="center", color="white" if m[i, j] else "green")
    ax.set_xticks(range(t_k)); ax.set_yticks(range(t_q), [str(t_k - t_q + i) for i in range(t_q)])
    ax.set_xlabel("key position"); ax.set_ylabel("query position")
    ax.set_title(f"causal_mask({t_q}, {t_k}): grey ✗ = blocked")
plt.tight_layout(); plt.show()
print(causal_mask(3, 7).int())


# %% [markdown]
# On the right, the three queries are positions 4, 5 and 6 of a 7-token text: position 4 sees keys
# 0 to 4, and the last query sees everything. The diagonal of allowed entries ends in the
# bottom-right corner.
#
# 右图中，三个查询是 7 个词元文本中的第 4、5、6 个位置：位置 4 能看到键 0 到 4，最后一个查询能看到全部。允许关注的对角线终止于右下角。

# %% [markdown]
# ## Route 1: zero the future, then renormalize · 路线 1：把未来置零，再重新归一化
#
# The book's first route starts from the ordinary softmax weights, sets the blocked ones to 0 and
# divides each row by its new sum, so that every row sums to 1 again. Is that honest? Row $i$ after
# renormalizing is
# $\dfrac{e^{s_{ij}}}{\sum_{k \le i} e^{s_{ik}}}$ for $j \le i$: the softmax denominator over all
# keys cancels, so the result is exactly a softmax over the allowed keys alone. The future had no
# influence.
#
# 书中的第一条路线从普通的 softmax 权重出发，把被屏蔽的权重设为 0，再把每一行除以它新的和，使每行之和再次为 1。这样做靠得住吗？重新归一化之后，第 $i$ 行在 $j \le i$ 处等于 $\dfrac{e^{s_{ij}}}{\sum_{k \le i} e^{s_{ik}}}$：对所有键求和的 softmax 分母被约掉了，结果恰好是只在允许的键上做的 softmax。未来没有产生任何影响。

# %% [markdown]
# ### Exercise 2 · `mask_and_renormalize` · 练习 2
#
# Given attention `weights` of shape `(..., T_q, T_k)` and a boolean `mask` (True = blocked)
# broadcastable to it, return new weights with the blocked entries set to 0 and each row divided by
# its sum. Do not change the input in place.
#
# 给定形状为 `(..., T_q, T_k)` 的注意力权重 `weights` 和一个可以广播到该形状的布尔掩码 `mask`（True = 被屏蔽），返回新的权重：被屏蔽的元素设为 0，每一行除以它的和。不要原地修改输入。
#
# <!-- rules: mask_and_renormalize -->
#
# #### Rules that grading checks · 评分检查的规则 (`mask_and_renormalize`)
#
# - Not graded (the caller guarantees it): every row keeps at least one key.
# - Graded in float32 and float64: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：每一行至少保留一个键。
# - 在 float32、float64 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "mask_and_renormalize", "locked": false, "schema_version": 3, "solution": true, "task": false}
def mask_and_renormalize(weights, mask):
    """Zero the blocked weights, then rescale every row to sum 1."""
    ### BEGIN SOLUTION
    kept = weights.masked_fill(mask, 0.0)
    return kept / kept.sum(dim=-1, keepdim=True)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_mask_and_renormalize", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb04

with nb04.as_graded(mask_and_renormalize):
    w = torch.tensor([[0.5, 0.25, 0.25], [0.2, 0.3, 0.5], [0.1, 0.2, 0.7]])
    m = torch.tensor([[False, True, True], [False, False, True], [False, False, False]])
    expect_close(mask_and_renormalize(w, m), torch.tensor([[1.0, 0.0, 0.0], [0.4, 0.6, 0.0], [0.1, 0.2, 0.7]]),
                 "Blocked weights should become 0 and every row should be divided by its new sum.",
                 "被屏蔽的权重应变为 0，每一行应除以它新的和。")
    print("✓ mask_and_renormalize")

# %% nbgrader={"grade": true, "grade_id": "test_mask_and_renormalize_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb04
nb04.check_mask_and_renormalize(mask_and_renormalize)
### END HIDDEN TESTS

# %%
mask = causal_mask(6)
route_1 = mask_and_renormalize(weights, mask)
print(route_1.round(decimals=4))
print("row sums:", route_1.sum(dim=-1))


# %% [markdown]
# These are the book's numbers (section 3.5.1): "journey" now splits its attention 0.5517 / 0.4483
# between "Your" and itself, and "Your" can only attend to itself.
#
# 这些正是书中（第 3.5.1 节）的数字："journey" 现在把注意力按 0.5517 / 0.4483 分给 "Your" 和它自己，而 "Your" 只能关注它自己。

# %% [markdown]
# ## Route 2: $-\infty$ before the softmax · 路线 2：在 softmax 之前填 $-\infty$
#
# Route 1 computes a softmax and then throws part of it away. The usual route masks the **scores**
# instead: write $-\infty$ into the blocked entries, then take one softmax. Since $e^{-\infty} = 0$,
# blocked keys get weight exactly 0, and the softmax's own normalization makes each row sum to 1 over
# the allowed keys.
#
# 路线 1 先算 softmax，再丢掉其中一部分。更常用的路线改为屏蔽 **分数**：在被屏蔽的位置写入 $-\infty$，然后只做一次 softmax。因为 $e^{-\infty} = 0$，被屏蔽的键得到的权重恰好为 0，而 softmax 自身的归一化让每一行在允许的键上之和为 1。

# %% [markdown]
# ### Exercise 3 · `masked_softmax` · 练习 3
#
# Fill the blocked `scores` (where `mask` is True) with `-inf` and return the softmax along `dim`.
# You may use `torch.softmax` here (you wrote your own in notebook 01). Do not change the caller's
# scores in place.
#
# 把 `scores` 中被屏蔽的位置（`mask` 为 True 处）填成 `-inf`，返回沿 `dim` 的 softmax。这里可以使用 `torch.softmax`（你在笔记本 01 中已经自己实现过）。不要原地修改调用者的分数。
#
# <!-- rules: masked_softmax -->
#
# #### Rules that grading checks · 评分检查的规则 (`masked_softmax`)
#
# - Not graded (the caller guarantees it): every row keeps at least one key.
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：每一行至少保留一个键。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "masked_softmax", "locked": false, "schema_version": 3, "solution": true, "task": false}
def masked_softmax(scores, mask, dim=-1):
    """softmax(scores with -inf where mask is True) along dim."""
    ### BEGIN SOLUTION
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=dim)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_masked_softmax", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb04

with nb04.as_graded(masked_softmax):
    m = torch.tensor([[False, True, True], [False, False, True], [False, False, False]])
    expect_close(masked_softmax(torch.zeros(3, 3), m),
                 torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]]),
                 "With equal scores, each query should share its weight equally among the keys it may see.",
                 "分数相同时，每个查询应把权重平均分给它能看到的键。")
    print("✓ masked_softmax")

# %% nbgrader={"grade": true, "grade_id": "test_masked_softmax_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb04
nb04.check_masked_softmax(masked_softmax)
### END HIDDEN TESTS

# %%
route_2 = masked_softmax(scores, mask)
print(scores.masked_fill(mask, float("-inf")).round(decimals=4))
print("route 1 == route 2:", torch.allclose(route_1, route_2),
      "| largest difference below 1e-6:", bool((route_1 - route_2).abs().max() < 1e-6))

# %% [markdown]
# The two routes agree to rounding error. Route 2 is the one every implementation uses: one softmax
# instead of a softmax, a multiplication and a division, and it is the form that fused kernels such
# as `F.scaled_dot_product_attention` accept.
#
# 两条路线在舍入误差范围内一致。所有实现都使用路线 2：只需一次 softmax，而不是 softmax、乘法再加除法；它也是 `F.scaled_dot_product_attention` 等融合内核所接受的形式。

# %% [markdown]
# ## Why filling with 0 leaks · 为什么填 0 会泄漏
#
# A tempting shortcut is `scores.masked_fill(mask, 0)`. It looks like "switching the future off",
# but a score of 0 is an ordinary score: $e^0 = 1$, which is about as large as the other $e^{s}$
# here. The cell measures how much attention each token still pays to the future.
#
# 一个诱人的捷径是 `scores.masked_fill(mask, 0)`。它看起来像是"关掉了未来"，但分数 0 只是一个普通的分数：$e^0 = 1$，和这里其他的 $e^{s}$ 差不多大。下面的单元格测量每个词元仍然分给未来的注意力有多少。

# %%
zero_filled = torch.softmax(scores.masked_fill(mask, 0.0), dim=-1)
leak = (zero_filled * mask).sum(dim=-1)        # weight on blocked (future) keys, per query
for word, share in zip(JOURNEY_WORDS, leak):
    print(f"{word:8} puts {share:.1%} of its attention on the future")
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
attention_heatmap(route_2, JOURNEY_WORDS, JOURNEY_WORDS, ax=left, title="fill -inf: future weight = 0")
attention_heatmap(zero_filled, JOURNEY_WORDS, JOURNEY_WORDS, ax=right, title="fill 0: exp(0) = 1 leaks")
plt.tight_layout(); plt.show()


# %% [markdown]
# With 0 as the fill, "Your" still gives most of its attention to the five tokens after it. Only
# $-\infty$ (or a number so negative that its exponential underflows to 0, such as
# `torch.finfo(dtype).min`) removes the future.
#
# 用 0 填充时，"Your" 仍然把大部分注意力给了它之后的五个词元。只有 $-\infty$（或者一个负到其指数下溢为 0 的数，例如 `torch.finfo(dtype).min`）才能真正去掉未来。

# %% [markdown]
# ## A module with a mask buffer · 带掩码缓冲区的模块
#
# Inside an `nn.Module`, the mask is built once for the longest input, `context_length` tokens, and
# kept as a **buffer**: `self.register_buffer("mask", ...)`. A buffer is a tensor that belongs to the
# module without being a parameter. `.to(device)` moves it together with the weights (a plain
# attribute would stay behind on the CPU and the forward pass would fail on a GPU), `state_dict()`
# saves it, and the optimizer never touches it. An input of `T <= context_length` tokens uses the
# top-left `T × T` corner, `self.mask[:T, :T]`, which is again a causal mask.
#
# 在 `nn.Module` 中，掩码只为最长的输入（`context_length` 个词元）构造一次，并保存为 **缓冲区**：`self.register_buffer("mask", ...)`。缓冲区是属于模块但不是参数的张量。`.to(device)` 会把它和权重一起移动（普通属性会留在 CPU 上，前向计算在 GPU 上就会出错），`state_dict()` 会保存它，优化器也永远不会碰它。`T <= context_length` 个词元的输入使用左上角的 `T × T` 部分，`self.mask[:T, :T]`，它同样是一个因果掩码。

# %% [markdown]
# ### Exercise 4 · `CausalSelfAttention` · 练习 4
#
# Extend notebook 02's `SelfAttentionV2`: three `nn.Linear(d_in, d_out, bias=qkv_bias)` layers named
# `W_query`, `W_key`, `W_value`, and a buffer named `mask` holding the `(context_length,
# context_length)` causal mask (True, or 1, = blocked). `forward(x)` takes `x` of shape
# `(B, T, d_in)`, raises `ValueError` when `T > context_length`, and returns
# $\operatorname{softmax}(\operatorname{mask}(Q K^\top / \sqrt{d_{out}}))\,V$ of shape `(B, T, d_out)`.
# Write it with torch operations (your functions above may help); `F.scaled_dot_product_attention`
# is not allowed here. Extending may mean subclassing: `SelfAttentionV2` is imported above, and a
# class that subclasses it and writes its own `forward` is your own work (reusing an earlier
# notebook's class is fine; handing in `utils.causal.CausalSelfAttention`, this exercise's own
# reference, is not).
#
# 扩展笔记本 02 的 `SelfAttentionV2`：三个名为 `W_query`、`W_key`、`W_value` 的 `nn.Linear(d_in, d_out, bias=qkv_bias)` 层，以及一个名为 `mask` 的缓冲区，存放 `(context_length, context_length)` 的因果掩码（True 或 1 = 被屏蔽）。`forward(x)` 接收形状为 `(B, T, d_in)` 的 `x`，当 `T > context_length` 时抛出 `ValueError`，并返回形状为 `(B, T, d_out)` 的 $\operatorname{softmax}(\operatorname{mask}(Q K^\top / \sqrt{d_{out}}))\,V$。请用 torch 运算实现（上面你写的函数可能有帮助）；这里不允许使用 `F.scaled_dot_product_attention`。扩展可以是继承：上面已导入 `SelfAttentionV2`，继承它并编写自己的 `forward` 的类算作你自己的工作（复用之前笔记本中的类是可以的；交上本练习自己的参考实现 `utils.causal.CausalSelfAttention` 则不行）。
#
# <!-- rules: CausalSelfAttention -->
#
# #### Rules that grading checks · 评分检查的规则 (`CausalSelfAttention`)
#
# - Not allowed: `F.scaled_dot_product_attention` (it computes the whole masked attention this exercise builds).
# - Raises `ValueError` when the input has more tokens than `context_length`.
# - Graded in float32, float64 and bfloat16: the layer moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - The mask is a buffer named `mask` (so `.to()` moves it and the optimizer never trains it).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（它会完成本练习要构造的整个带掩码注意力）。
# - 输入的词元多于 `context_length` 时抛出 `ValueError`。
# - 在 float32、float64、bfloat16 下评分：用 `.to(dtype)` 转换后的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 掩码是名为 `mask` 的缓冲区（这样 `.to()` 会移动它，优化器也不会训练它）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "CausalSelfAttention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class CausalSelfAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        self.context_length = context_length
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        mask = torch.ones(context_length, context_length, dtype=torch.bool).triu(1)
        self.register_buffer("mask", mask)
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        T = x.shape[-2]
        if T > self.context_length:
            raise ValueError(f"input has {T} tokens, more than context_length={self.context_length}")
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)   # (B, T, d_out)
        scores = queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5         # (B, T, T)
        scores = scores.masked_fill(self.mask[:T, :T], float("-inf"))
        return torch.softmax(scores, dim=-1) @ values
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_CausalSelfAttention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close, fail

from autograder.checks import nb04

with nb04.as_graded(CausalSelfAttention):
    ca = CausalSelfAttention(2, 2, context_length=4)
    expect("mask" in dict(ca.named_buffers()),
           "The mask should be a buffer named mask: self.register_buffer('mask', ...).",
           "掩码应是名为 mask 的缓冲区：self.register_buffer('mask', ...)。")
    with torch.no_grad():
        for layer in (ca.W_query, ca.W_key, ca.W_value):
            layer.weight.copy_(torch.eye(2))
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [[2.0, 0.0], [0.0, 2.0], [1.0, 1.0]]])
    out = ca(x)
    expect_close(out[:, 0], x[:, 0], "The first token can only attend to itself, so its output should be its own value.",
                 "第一个词元只能关注它自己，所以它的输出应该是它自己的值。")
    w = torch.softmax(torch.tensor([0.0, 1.0]) / 2 ** 0.5, dim=-1)
    expect_close(out[0, 1], w @ x[0, :2], "The second token should attend to the first two tokens only, with scaled scores.",
                 "第二个词元应只关注前两个词元，并使用缩放后的分数。")
    try:
        ca(torch.zeros(1, 5, 2))
    except ValueError:
        pass
    else:
        fail("An input longer than context_length should raise ValueError.", "输入长于 context_length 时应抛出 ValueError。")
    print("✓ CausalSelfAttention")

# %% nbgrader={"grade": true, "grade_id": "test_CausalSelfAttention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb04
nb04.check_CausalSelfAttention(CausalSelfAttention)
### END HIDDEN TESTS

# %% [markdown]
# ## The leakage experiment · 泄漏实验
#
# The definition of causal, as an experiment: change only the *future* tokens and watch the outputs
# of the earlier ones. We give a causal module and an unmasked `SelfAttentionV2` the same weights,
# replace "one" and "step" by random vectors, and measure how far each position's output moves.
#
# 把"因果"的定义变成一个实验：只改变 *未来* 的词元，观察前面词元的输出。我们让一个因果模块和一个没有掩码的 `SelfAttentionV2` 使用相同的权重，把 "one" 和 "step" 换成随机向量，测量每个位置的输出移动了多少。

# %%
torch.manual_seed(123)
causal = CausalSelfAttention(3, 2, context_length=6)
unmasked = SelfAttentionV2(3, 2)
unmasked.load_state_dict({k: v for k, v in causal.state_dict().items() if k != "mask"})

batch = torch.stack([inputs, inputs.flip(0)])          # (B, T, d_in) = (2, 6, 3), items differ
changed = batch.clone()
changed[:, 4:] = torch.randn(2, 2, 3, generator=torch.Generator().manual_seed(0))
with torch.no_grad():
    moved_causal = (causal(changed) - causal(batch)).abs().amax(dim=(0, 2))       # per position
    moved_plain = (unmasked(changed) - unmasked(batch)).abs().amax(dim=(0, 2))
print("largest change, causal  :", moved_causal.numpy().round(4))
print("largest change, unmasked:", moved_plain.numpy().round(4))

pos = torch.arange(6)
plt.figure(figsize=(7, 3.5))
plt.bar(pos - 0.2, moved_plain, width=0.4, label="no mask")
plt.bar(pos + 0.2, moved_causal, width=0.4, label="causal mask")
plt.axvspan(3.5, 5.5, color="gray", alpha=0.15, label="changed tokens")
plt.xticks(pos, [f"{i}" for i in range(6)]); plt.xlabel("position"); plt.ylabel("largest |change| of the output")
plt.title("Changing tokens 4 and 5: only the causal model keeps 0-3 fixed"); plt.legend(); plt.show()

# %% [markdown]
# With the mask, positions 0 to 3 do not move at all (a change of exactly 0), while the unmasked
# layer changes every position. The same property means that a causal layer's output for the first
# `T` tokens does not depend on how long the text is: running it on a prefix gives the prefix of the
# output. That is why slicing the mask, `self.mask[:T, :T]`, is all a shorter input needs.
#
# 有掩码时，位置 0 到 3 完全不动（变化恰好为 0），而没有掩码的层的每个位置都变了。同一性质还意味着：因果层对前 `T` 个词元的输出与文本有多长无关，在前缀上运行得到的就是输出的前缀。这就是为什么较短的输入只需要对掩码切片 `self.mask[:T, :T]`。

# %%
with torch.no_grad():
    full, prefix = causal(batch), causal(batch[:, :4])
print("output of the first 4 tokens == first 4 rows of the full output:", torch.allclose(prefix, full[:, :4]))


# %% [markdown]
# ## The mask travels with the module · 掩码随模块一起移动
#
# A buffer is listed by `named_buffers()`, saved by `state_dict()` and left alone by `parameters()`.
# `.to(...)` converts floating-point tensors and moves every tensor to the target device; a boolean
# buffer keeps its dtype when the weights become float64, because a mask is not a number to be
# rounded. Compare a module that stores its mask as a plain attribute.
#
# 缓冲区会被 `named_buffers()` 列出、被 `state_dict()` 保存，而不会出现在 `parameters()` 中。`.to(...)` 会转换浮点张量，并把每个张量移到目标设备；当权重变成 float64 时，布尔缓冲区保持它的类型，因为掩码不是需要取舍的数值。对比一个把掩码存为普通属性的模块。

# %%
class PlainAttributeMask(nn.Module):
    def __init__(self, context_length):
        super().__init__()
        self.W_query = nn.Linear(3, 2)
        self.mask = causal_mask(context_length)        # not registered

as_buffer, as_attribute = CausalSelfAttention(3, 2, 6), PlainAttributeMask(6)
print("buffer   : state_dict keys", list(as_buffer.state_dict()), "| buffers", [n for n, _ in as_buffer.named_buffers()])
print("attribute: state_dict keys", list(as_attribute.state_dict()), "| buffers", [n for n, _ in as_attribute.named_buffers()])
print("'mask' among the parameters:", any(n == "mask" for n, _ in as_buffer.named_parameters()))
as_buffer.to(torch.float64)
print("after .to(torch.float64): weight", as_buffer.W_query.weight.dtype, "| mask", as_buffer.mask.dtype)
with torch.no_grad():
    print("float64 forward:", as_buffer(batch.double()).dtype)

# %% [markdown]
# On a GPU, `.to("cuda")` would carry `as_buffer.mask` along and leave `as_attribute.mask` on the
# CPU, where the first `masked_fill` would stop with "Expected all tensors to be on the same device".
# Models that rebuild the mask on load sometimes register it with `persistent=False`, which keeps
# the `.to()` behaviour but leaves it out of `state_dict()`.
#
# 在 GPU 上，`.to("cuda")` 会带上 `as_buffer.mask`，而把 `as_attribute.mask` 留在 CPU 上，第一次 `masked_fill` 就会报错 "Expected all tensors to be on the same device"。有些在加载时重新构造掩码的模型会用 `persistent=False` 注册它，这样保留了 `.to()` 的行为，但它不会出现在 `state_dict()` 中。

# %% [markdown]
# ## Fewer queries than keys: bottom-right alignment · 查询少于键：右下对齐
#
# When a model generates text with a KV cache, it keeps the keys and values of the tokens it has
# already seen and feeds only the new tokens. Their queries are the last positions of the text. The
# check: compute attention for the last 2 queries against all 6 keys with `causal_mask(2, 6)`, and
# compare with the last 2 rows of full causal attention. PyTorch's
# `F.scaled_dot_product_attention(..., is_causal=True)` aligns its mask to the **top-left** corner
# instead, which is right only when `T_q == T_k`: with an explicit bottom-right mask it agrees.
#
# 当模型用 KV 缓存生成文本时，它保留已经看过的词元的键和值，只输入新的词元。这些新词元的查询是文本的最后几个位置。检验方法：用 `causal_mask(2, 6)` 计算最后 2 个查询对全部 6 个键的注意力，与完整因果注意力的最后 2 行比较。PyTorch 的 `F.scaled_dot_product_attention(..., is_causal=True)` 则把掩码对齐到 **左上角**，只有在 `T_q == T_k` 时才正确；传入显式的右下对齐掩码时，它与我们的结果一致。

# %%
with torch.no_grad():
    q, k, v = causal.W_query(batch), causal.W_key(batch), causal.W_value(batch)   # (B, 6, 2)
full = masked_softmax(q @ k.mT / math.sqrt(2), causal_mask(6)) @ v
last_q = q[:, -2:]                                                               # the 2 newest queries
bottom_right = masked_softmax(last_q @ k.mT / math.sqrt(2), causal_mask(2, 6)) @ v
top_left = masked_softmax(last_q @ k.mT / math.sqrt(2), torch.ones(2, 6, dtype=torch.bool).triu(1)) @ v
print("bottom-right == last rows of full attention:", torch.allclose(bottom_right, full[:, -2:]))
print(f"top-left error: {(top_left - full[:, -2:]).abs().max():.4f}")
sdpa_explicit = F.scaled_dot_product_attention(last_q, k, v, attn_mask=~causal_mask(2, 6))  # SDPA: True = keep
sdpa_is_causal = F.scaled_dot_product_attention(last_q, k, v, is_causal=True)
print("SDPA with our mask == ours:", torch.allclose(sdpa_explicit, bottom_right, atol=1e-6),
      "| SDPA is_causal=True == ours:", torch.allclose(sdpa_is_causal, bottom_right, atol=1e-6))

# %% [markdown]
# Note the flipped convention: `F.scaled_dot_product_attention` reads a boolean `attn_mask` as True =
# **allowed**, so we pass `~causal_mask(...)`. With the top-left mask the newest query would be
# forbidden to see the tokens it is supposed to continue, an error of the size printed above;
# notebook 07 (`07_kv_cache.ipynb`) builds on this bottom-right alignment.
#
# 注意约定是反的：`F.scaled_dot_product_attention` 把布尔 `attn_mask` 中的 True 理解为 **允许**，所以我们传入 `~causal_mask(...)`。若用左上对齐的掩码，最新的查询将看不到它要接续的那些词元，误差就是上面打印的大小；笔记本 07（`07_kv_cache.ipynb`）会建立在这种右下对齐之上。

# %% [markdown]
# ## What comes next · 接下来
#
# Notebook 05 adds dropout to the attention weights and assembles the book's compact
# `CausalAttention` class, the single head that notebook 06 stacks into multi-head attention.
#
# 笔记本 05 会在注意力权重上加入 dropout，并组装出书中紧凑的 `CausalAttention` 类，也就是笔记本 06 会堆叠成多头注意力的单个头。
#
# Sources: S. Raschka, *Build a Large Language Model (From Scratch)*, section 3.5 (3.5.1 the two
# masking routes and the information-leakage argument, 3.5.3 the mask as a buffer); A. Vaswani et
# al., *Attention Is All You Need* (2017), section 3.2.3 (masking illegal connections with
# $-\infty$); N. Srivastava et al., *Dropout: A Simple Way to Prevent Neural Networks from
# Overfitting* (2014), for the next notebook; PyTorch's documentation of
# `F.scaled_dot_product_attention` (`is_causal` is top-left aligned).
#
# 来源：S. Raschka，《从零构建大语言模型》第 3.5 节（3.5.1 两种掩码路线与信息泄漏的论证，3.5.3 把掩码作为缓冲区）；A. Vaswani 等，《Attention Is All You Need》（2017）第 3.2.3 节（用 $-\infty$ 屏蔽非法连接）；N. Srivastava 等，《Dropout: A Simple Way to Prevent Neural Networks from Overfitting》（2014），用于下一个笔记本；PyTorch 的 `F.scaled_dot_product_attention` 文档（`is_causal` 是左上对齐的）。
