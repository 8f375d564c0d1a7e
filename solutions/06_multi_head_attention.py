# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 06 · Multi-head attention · 多头注意力
#
# One attention head computes one set of weights per query: one notion of "relevant". A sentence
# has several at once: "it" needs its antecedent, a verb needs its subject and object, an adjective
# needs its noun. **Multi-head attention** runs several heads side by side, each with its own
# queries, keys and values in a smaller space, and mixes their results with an output projection.
# This notebook builds it twice: first as a list of the heads you already have, then as one
# efficient module that does all heads with a single matrix product per projection.
#
# 一个注意力头为每个查询计算一组权重：也就是一种"相关"的概念。而一个句子同时需要好几种："it" 需要它的先行词，动词需要主语和宾语，形容词需要它修饰的名词。**多头注意力** 让几个头并排运行，每个头在较小的空间里有自己的查询、键和值，再用一个输出投影把它们的结果混合起来。本笔记本把它构建两次：先用你已有的头组成一个列表，再写成一个高效的模块，每个投影只用一次矩阵乘法就完成所有头的计算。

# %%
import os

import matplotlib.pyplot as plt
import torch
from torch import nn

from utils.dropout import CausalAttention
from utils.plots import attention_heatmap
from utils.tokenizer import tokens

GRADING = bool(os.getenv("NBGRADER_EXECUTION"))  # grading times shorter sequences and a smaller benchmark

# %% [markdown]
# ## A wrapper of heads · 由多个头组成的包装器
#
# The direct construction: `num_heads` independent `CausalAttention` modules from notebook 05, all
# reading the same input, their outputs concatenated along the feature axis. Keep them in an
# `nn.ModuleList`, not a Python list: only then do `parameters()`, `.to()` and `state_dict()` see them.
#
# 最直接的构造：`num_heads` 个来自笔记本 05 的独立 `CausalAttention` 模块，读取同一个输入，把输出沿特征轴拼接起来。请把它们放在 `nn.ModuleList` 中，而不是 Python 列表：只有这样，`parameters()`、`.to()` 和 `state_dict()` 才能看到它们。

# %% [markdown]
# ### Exercise 1 · `MultiHeadAttentionWrapper` · 练习 1
#
# Build `num_heads` heads `CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)` and return
# their outputs concatenated on the last axis: shape `(B, T, d_out * num_heads)`, for inputs of at most
# `context_length` tokens. Here, as in the book, `d_out` is the width of **each head**, so the output
# is `num_heads` times wider.
#
# 构建 `num_heads` 个头 `CausalAttention(d_in, d_out, context_length, dropout, qkv_bias)`，返回它们沿最后一维拼接的输出：形状为 `(B, T, d_out * num_heads)`，输入最多有 `context_length` 个词元。这里和书中一样，`d_out` 是 **每个头** 的宽度，所以输出宽度是它的 `num_heads` 倍。
#
# <!-- rules: MultiHeadAttentionWrapper -->
#
# #### Rules that grading checks · 评分检查的规则 (`MultiHeadAttentionWrapper`)
#
# - Not graded (the caller guarantees it): the input has at most `context_length` tokens.
# - Graded in float32, float64 and bfloat16: the layer moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - The heads are `num_heads` separate `CausalAttention` modules, each with its own weights, in one `nn.ModuleList`.
# - Dropout acts on the attention weights (on in `train()`, off in `eval()`); in `train()` it is graded by its statistics (the kept fraction and the scaling by 1/(1-p)), never by a particular mask, so any correct draw passes, `F.scaled_dot_product_attention(..., dropout_p=...)`'s included.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：输入的词元数不超过 `context_length`。
# - 在 float32、float64、bfloat16 下评分：用 `.to(dtype)` 转换后的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 各个头是 `num_heads` 个独立的 `CausalAttention` 模块，各有自己的权重，放在一个 `nn.ModuleList` 中。
# - Dropout 作用在注意力权重上（`train()` 中开启，`eval()` 中关闭）；在 `train()` 中按统计量评分（保留比例和 1/(1-p) 的缩放），从不比较某个具体的掩码，所以任何正确的抽样都能通过，包括 `F.scaled_dot_product_attention(..., dropout_p=...)` 自己的抽样。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "MultiHeadAttentionWrapper", "locked": false, "schema_version": 3, "solution": true, "task": false}
class MultiHeadAttentionWrapper(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        self.heads = nn.ModuleList(
            CausalAttention(d_in, d_out, context_length, dropout, qkv_bias) for _ in range(num_heads))
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        return torch.cat([head(x) for head in self.heads], dim=-1)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_MultiHeadAttentionWrapper", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

torch.manual_seed(0)
wrapper = MultiHeadAttentionWrapper(3, 2, context_length=6, dropout=0.0, num_heads=2)
out = wrapper(torch.rand(2, 6, 3))
expect(out.shape == (2, 6, 4), "Two heads of width 2 should give an output of width 4.",
       "两个宽度为 2 的头应得到宽度为 4 的输出。", f"shape {tuple(out.shape)}")
expect(len(list(wrapper.parameters())) == 6, "Each head's three projections should be parameters of the wrapper.",
       "每个头的三个投影都应是包装器的参数。")
print("✓ MultiHeadAttentionWrapper")

# %% nbgrader={"grade": true, "grade_id": "test_MultiHeadAttentionWrapper_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb06
nb06.check_MultiHeadAttentionWrapper(MultiHeadAttentionWrapper)
### END HIDDEN TESTS

# %% [markdown]
# ## One module for all heads · 用一个模块计算所有头
#
# The wrapper runs the heads one after another. Instead, project once to the full width
# `d_out = num_heads * head_dim` and cut the features into heads: `(B, T, d_out)` becomes
# `(B, T, H, hd)` with `view`, and `transpose(1, 2)` moves heads next to the batch, `(B, H, T, hd)`, so
# that one batched matmul computes every head's scores. After attention, the reverse trip merges the
# heads. `transpose` does not move data, it only changes strides; the result is not *contiguous*, and
# `view` refuses it. Use `.contiguous().view(...)` or `reshape`.
#
# 包装器一个接一个地运行各个头。更好的做法是：一次投影到完整宽度 `d_out = num_heads * head_dim`，再把特征切成多个头：用 `view` 把 `(B, T, d_out)` 变成 `(B, T, H, hd)`，再用 `transpose(1, 2)` 把头移到批维旁边，得到 `(B, H, T, hd)`，这样一次批量矩阵乘法就能算出所有头的分数。注意力之后，反向操作把各个头合并。`transpose` 不移动数据，只改变步长；结果不是 *连续* 的，`view` 会拒绝它。请使用 `.contiguous().view(...)` 或 `reshape`。
#
# Mind the name: in `MultiHeadAttention`, `d_out` is the **total** width, split into `num_heads`
# heads of `head_dim = d_out // num_heads`, while in `MultiHeadAttentionWrapper` it was the width of
# each head. The book uses one name for both; the output of `MultiHeadAttention(d_in, d_out, ...)` is
# `d_out` wide, the wrapper's `d_out * num_heads`.
#
# 注意这个名字：在 `MultiHeadAttention` 中，`d_out` 是 **总** 宽度，被切成 `num_heads` 个宽为 `head_dim = d_out // num_heads` 的头；而在 `MultiHeadAttentionWrapper` 中，它是每个头的宽度。书中两处用的是同一个名字；`MultiHeadAttention(d_in, d_out, ...)` 的输出宽度是 `d_out`，包装器的输出宽度是 `d_out * num_heads`。

# %%
x = torch.arange(2 * 3 * 4.0).reshape(1, 2, 3, 4).transpose(1, 2)  # (B, H, T, hd) -> (B, T, H, hd)
print("contiguous after transpose?", x.is_contiguous())
try:
    x.view(1, 3, 8)
except RuntimeError as e:
    print("view fails:", str(e).split(".")[0])
print("reshape works:", tuple(x.reshape(1, 3, 8).shape))


# %% [markdown]
# ### Exercise 2 · `split_heads` · 练习 2
#
# `(B, T, D)` → `(B, H, T, D // H)`: head `h` holds features `h*hd:(h+1)*hd` of every token. Split the
# feature axis, never the token axis. Raise `ValueError` naming both numbers when `D` is not
# divisible by `num_heads`.
#
# `(B, T, D)` → `(B, H, T, D // H)`：第 `h` 个头包含每个词元的第 `h*hd` 到 `(h+1)*hd` 个特征。切分特征轴，绝不能切分词元轴。当 `D` 不能被 `num_heads` 整除时，抛出写明这两个数的 `ValueError`。
#
# <!-- rules: split_heads -->
#
# #### Rules that grading checks · 评分检查的规则 (`split_heads`)
#
# - Raises `ValueError` when the width is not divisible by `num_heads` (the message names both numbers).
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 宽度不能被 `num_heads` 整除（信息中写出这两个数）时抛出 `ValueError`。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "split_heads", "locked": false, "schema_version": 3, "solution": true, "task": false}
def split_heads(x, num_heads):
    """(B, T, D) -> (B, H, T, D // H)."""
    ### BEGIN SOLUTION
    B, T, D = x.shape
    if D % num_heads:
        raise ValueError(f"width {D} is not divisible by num_heads={num_heads}")
    return x.view(B, T, num_heads, D // num_heads).transpose(1, 2)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_split_heads", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb06

with nb06.as_graded(split_heads):
    x = torch.arange(12.0).reshape(1, 2, 6)  # two tokens of width 6
    expect_close(split_heads(x, 3)[0, 1], torch.tensor([[2.0, 3.0], [8.0, 9.0]]),
                 "Head 1 should hold features 2:4 of both tokens.", "第 1 个头应包含两个词元的第 2:4 个特征。")
    print("✓ split_heads")

# %% nbgrader={"grade": true, "grade_id": "test_split_heads_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb06
nb06.check_split_heads(split_heads)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 3 · `merge_heads` · 练习 3
#
# The inverse: `(B, H, T, hd)` → `(B, T, H * hd)`, so that `merge_heads(split_heads(x, H))` gives `x` back.
#
# 逆操作：`(B, H, T, hd)` → `(B, T, H * hd)`，使得 `merge_heads(split_heads(x, H))` 还原出 `x`。
#
# <!-- rules: merge_heads -->
#
# #### Rules that grading checks · 评分检查的规则 (`merge_heads`)
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

# %% nbgrader={"grade": false, "grade_id": "merge_heads", "locked": false, "schema_version": 3, "solution": true, "task": false}
def merge_heads(x):
    """(B, H, T, hd) -> (B, T, H * hd)."""
    ### BEGIN SOLUTION
    B, H, T, hd = x.shape
    return x.transpose(1, 2).reshape(B, T, H * hd)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_merge_heads", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb06

with nb06.as_graded(merge_heads):
    x = torch.arange(24.0).reshape(2, 3, 4)
    heads = x.view(2, 3, 2, 2).transpose(1, 2)  # what split_heads(x, 2) returns
    expect_close(merge_heads(heads), x, "merge_heads should undo split_heads.", "merge_heads 应当是 split_heads 的逆操作。")
    print("✓ merge_heads")

# %% nbgrader={"grade": true, "grade_id": "test_merge_heads_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb06
nb06.check_merge_heads(merge_heads)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 4 · `MultiHeadAttention` · 练习 4
#
# The efficient module. `W_query`, `W_key`, `W_value` are `nn.Linear(d_in, d_out, bias=qkv_bias)`;
# `out_proj` is `nn.Linear(d_out, d_out)` with a bias; the causal mask is a buffer named `mask`,
# sliced to the input length; each head's scores are divided by $\sqrt{\text{head\_dim}}$ (the width
# of *its* keys); dropout acts on the weights. Raise `ValueError` naming both numbers when `d_out` is
# not divisible by `num_heads`. Inputs have at most `context_length` tokens. Use your `split_heads`
# and `merge_heads`. The lesson is the heads (split, merge, `out_proj`), not the attention inside
# them: computing it with `F.scaled_dot_product_attention` is allowed (pass
# `dropout_p=self.dropout.p` only in training), while `nn.MultiheadAttention` and
# `F.multi_head_attention_forward`, which would do the whole layer, are not.
#
# 高效的模块。`W_query`、`W_key`、`W_value` 是 `nn.Linear(d_in, d_out, bias=qkv_bias)`；`out_proj` 是带偏置的 `nn.Linear(d_out, d_out)`；因果掩码是名为 `mask` 的缓冲区，并按输入长度切片；每个头的分数除以 $\sqrt{\text{head\_dim}}$（也就是 *它自己* 的键的宽度）；dropout 作用在权重上。当 `d_out` 不能被 `num_heads` 整除时，抛出写明这两个数的 `ValueError`。输入最多有 `context_length` 个词元。请使用你的 `split_heads` 和 `merge_heads`。这里要学的是多头（拆分、合并、`out_proj`），而不是头内部的注意力：可以用 `F.scaled_dot_product_attention` 来计算它（只在训练时传入 `dropout_p=self.dropout.p`）；而 `nn.MultiheadAttention` 和 `F.multi_head_attention_forward` 会完成整个层，所以不允许使用。
#
# <!-- rules: MultiHeadAttention -->
#
# #### Rules that grading checks · 评分检查的规则 (`MultiHeadAttention`)
#
# - Not allowed: `F.multi_head_attention_forward` (PyTorch's multi-head attention: the projections, heads, attention and output projection this exercise builds); `nn.MultiheadAttention` (the same, as a layer).
# - Raises `ValueError` when `d_out` is not divisible by `num_heads` (the message names both numbers).
# - Not graded (the caller guarantees it): the input has at most `context_length` tokens.
# - Graded in float32, float64 and bfloat16: the layer moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - The causal mask is a buffer named `mask`; `out_proj` is `nn.Linear(d_out, d_out)` with a bias.
# - Dropout acts on the attention weights (on in `train()`, off in `eval()`); in `train()` it is graded by its statistics (the kept fraction and the scaling by 1/(1-p)), never by a particular mask, so any correct draw passes, `F.scaled_dot_product_attention(..., dropout_p=...)`'s included.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.multi_head_attention_forward`（PyTorch 的多头注意力：本练习要构造的投影、多头、注意力和输出投影）；`nn.MultiheadAttention`（同一个东西，做成了层）。
# - `d_out` 不能被 `num_heads` 整除（信息中写出这两个数）时抛出 `ValueError`。
# - 不评分（由调用者保证）：输入的词元数不超过 `context_length`。
# - 在 float32、float64、bfloat16 下评分：用 `.to(dtype)` 转换后的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 因果掩码是名为 `mask` 的缓冲区；`out_proj` 是带偏置的 `nn.Linear(d_out, d_out)`。
# - Dropout 作用在注意力权重上（`train()` 中开启，`eval()` 中关闭）；在 `train()` 中按统计量评分（保留比例和 1/(1-p) 的缩放），从不比较某个具体的掩码，所以任何正确的抽样都能通过，包括 `F.scaled_dot_product_attention(..., dropout_p=...)` 自己的抽样。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "MultiHeadAttention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class MultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, num_heads, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        if d_out % num_heads:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        T = x.shape[1]
        q = split_heads(self.W_query(x), self.num_heads)  # (B, H, T, hd)
        k = split_heads(self.W_key(x), self.num_heads)
        v = split_heads(self.W_value(x), self.num_heads)
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5  # (B, H, T, T)
        weights = torch.softmax(scores.masked_fill(self.mask[:T, :T], float("-inf")), dim=-1)
        return self.out_proj(merge_heads(self.dropout(weights) @ v))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_MultiHeadAttention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

from autograder.checks import nb06

with nb06.as_graded(MultiHeadAttention):
    torch.manual_seed(0)
    mha = MultiHeadAttention(3, 4, context_length=6, dropout=0.0, num_heads=2)
    out = mha(torch.rand(2, 5, 3))
    expect(out.shape == (2, 5, 4), "The output should be (B, T, d_out).", "输出形状应为 (B, T, d_out)。", f"shape {tuple(out.shape)}")
    expect("mask" in dict(mha.named_buffers()), "The mask should be a registered buffer named mask.",
           "掩码应是名为 mask 的已注册缓冲区。")
    print("✓ MultiHeadAttention")

# %% nbgrader={"grade": true, "grade_id": "test_MultiHeadAttention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb06
nb06.check_MultiHeadAttention(MultiHeadAttention)
### END HIDDEN TESTS

# %% [markdown]
# ## Three ways, one result · 三种写法，同一个结果
#
# The wrapper and the efficient module compute the same heads once their weights agree: head `h` of
# a wrapper with per-head width `hd` gets rows `h*hd:(h+1)*hd` of the big projections. The wrapper has
# no output projection, so its output equals the efficient module's merged context *before*
# `out_proj`; passing it through the module's `out_proj` gives the module's output. The cell checks
# both. PyTorch's own `nn.MultiheadAttention` keeps the three projections stacked in one
# `in_proj_weight`; copying ours into it gives the same numbers too. (`utils.mha_variants` does the
# copying; here we check the results.)
#
# 只要权重一致，包装器和高效模块计算的是同样的头：每个头宽度为 `hd` 的包装器，其第 `h` 个头取大投影矩阵的第 `h*hd` 到 `(h+1)*hd` 行。包装器没有输出投影，所以它的输出等于高效模块在 `out_proj` *之前* 合并得到的上下文；再把它送入模块的 `out_proj`，就得到模块的输出。下面的单元格两者都检查。PyTorch 自带的 `nn.MultiheadAttention` 把三个投影堆叠在一个 `in_proj_weight` 中；把我们的权重复制进去，也得到相同的数值。（复制由 `utils.mha_variants` 完成；这里我们检查结果。）

# %%
from utils.causal import causal_mask
from utils.mha_variants import torch_mha_forward, torch_mha_from, wrapper_from

torch.manual_seed(123)
mha = MultiHeadAttention(d_in=8, d_out=8, context_length=10, dropout=0.0, num_heads=4).eval()
x = torch.randn(2, 10, 8)
with torch.no_grad():
    ours = mha(x)
    q, k, v = (split_heads(layer(x), 4) for layer in (mha.W_query, mha.W_key, mha.W_value))
    scores = (q @ k.transpose(-2, -1) / mha.head_dim**0.5).masked_fill(causal_mask(10), float("-inf"))
    context = merge_heads(torch.softmax(scores, dim=-1) @ v)  # (B, T, d_out), before out_proj
    wrapper = wrapper_from(mha, context_length=10)               # 4 heads of width 2, no out_proj
    via_wrapper = wrapper(x)
    via_torch = torch_mha_forward(torch_mha_from(mha), x)
print("wrapper output width:", via_wrapper.shape[-1], "| module output width:", ours.shape[-1])
print("wrapper == module's context before out_proj (to 1e-6):", torch.allclose(via_wrapper, context, atol=1e-6))
print("mha.out_proj(wrapper output) == module (to 1e-6):", torch.allclose(mha.out_proj(via_wrapper), ours, atol=1e-6))
print("nn.MultiheadAttention == module (to 1e-6):", torch.allclose(via_torch, ours, atol=1e-6))

# %% [markdown]
# ## What the heads look at · 各个头在看什么
#
# Heads of an untrained layer on random embeddings look at nothing in particular. Trained models
# have heads with clear roles, and two of the most common can be written by hand: a
# **previous-token head**, whose query at position `i` matches only the key of position `i - 1`, and
# a **first-token head**, whose queries all match the key of position 0 (trained models park spare
# attention there, the "attention sink"). Both read positions, and attention itself has none, so
# here the input of each token is simply the one-hot vector of its position (notebook 08 shows how
# real models add positions to the token embeddings).
#
# 未训练的层在随机嵌入上的各个头并不关注什么特别的东西。训练好的模型里有分工清晰的头，其中最常见的两种可以手工写出来：**前一词元头**，位置 `i` 的查询只与位置 `i - 1` 的键匹配；以及 **首词元头**，所有查询都与位置 0 的键匹配（训练好的模型会把多余的注意力停放在那里，即"注意力汇聚"）。这两种头都读取位置信息，而注意力本身没有位置，所以这里每个词元的输入就是它所在位置的 one-hot 向量（笔记本 08 会展示真实模型如何把位置加到词元嵌入上）。
#
# With `head_dim = T`, the queries and keys are columns of the projection matrices. Head 0 gets
# queries $q_i = c\,e_i$ and keys $k_j = e_{j+1}$, so the score is $c$ exactly when $j = i - 1$. Head 1
# gets the same query $q_i = e_0$ for every position and the key $k_0 = c\,e_0$, all other keys zero.
#
# 取 `head_dim = T` 时，查询和键就是投影矩阵的列。第 0 个头的查询为 $q_i = c\,e_i$，键为 $k_j = e_{j+1}$，所以当且仅当 $j = i - 1$ 时分数为 $c$。第 1 个头在每个位置都用同一个查询 $q_i = e_0$，键为 $k_0 = c\,e_0$，其余的键都为零。

# %%
sentence = "The dog chased the ball but it couldn't catch it"
labels = tokens(sentence)
T, c = len(labels), 20.0
hand = MultiHeadAttention(d_in=T, d_out=2 * T, context_length=T, dropout=0.0, num_heads=2).eval()
with torch.no_grad():
    for layer in (hand.W_query, hand.W_key, hand.W_value):
        layer.weight.zero_()
    hand.W_query.weight[:T] = c * torch.eye(T)        # head 0: q_i = c e_i
    hand.W_key.weight[:T] = torch.diag(torch.ones(T - 1), -1)  # head 0: k_j = e_(j+1)
    hand.W_query.weight[T, :] = 1.0                    # head 1: q_i = e_0 for every i
    hand.W_key.weight[T, 0] = c                        # head 1: k_0 = c e_0, other keys 0
    x = torch.eye(T)[None]                             # (1, T, T): token i is the one-hot of position i
    q = split_heads(hand.W_query(x), 2)
    k = split_heads(hand.W_key(x), 2)
    scores = (q @ k.transpose(-2, -1) / hand.head_dim**0.5).masked_fill(hand.mask[:T, :T], float("-inf"))
    weights = torch.softmax(scores, dim=-1)[0]         # (H, T, T)
fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
for head, (ax, name) in enumerate(zip(axes, ("head 0: previous token", "head 1: first token"))):
    attention_heatmap(weights[head], labels, labels, ax=ax, annotate=False, title=name)
plt.tight_layout(); plt.show()
print("head 0, most attended key per query:", weights[0].argmax(-1).tolist())
print("head 1, most attended key per query:", weights[1].argmax(-1).tolist())
print(f"smallest weight on the intended key: head 0 {weights[0].diagonal(-1).min():.3f}, head 1 {weights[1][:, 0].min():.3f}")

# %% [markdown]
# Head 0's strongest key is the previous position for every query but the first (which can only
# see itself), and head 1's is position 0 for every query; the last line prints the smallest weight
# each head gives its intended key.
#
# 除了第一个查询（它只能看到自己）之外，第 0 个头对每个查询最关注的键都是前一个位置；第 1 个头对每个查询最关注的都是位置 0；最后一行打印了每个头给目标键的最小权重。

# %% [markdown]
# ## Cross-attention · 交叉注意力
#
# So far queries, keys and values all came from one sequence: **self**-attention. In
# **cross-attention** the queries come from one sequence and the keys and values from another. The
# original Transformer's decoder uses it to read the encoded source sentence while it writes the
# translation (Vaswani et al., 2017, section 3.2.3); speech and image models read their encoder's
# output the same way. Nothing in `scaled_dot_product_attention` from notebook 03 assumed
# $T_q = T_k$: the weights are `(T_q, T_k)`, one row per target token and one column per source
# token, and no causal mask is needed, since the whole source is known.
#
# 到目前为止，查询、键和值都来自同一个序列：这是 **自** 注意力。在 **交叉注意力** 中，查询来自一个序列，键和值来自另一个序列。原始 Transformer 的解码器在写出译文时，用它来读取已编码的源句子（Vaswani 等，2017，第 3.2.3 节）；语音和图像模型也以同样的方式读取编码器的输出。笔记本 03 中的 `scaled_dot_product_attention` 从未假设 $T_q = T_k$：权重的形状是 `(T_q, T_k)`，每个目标词元一行，每个源词元一列；而且不需要因果掩码，因为整个源序列都是已知的。

# %%
from utils.scaled_attention import scaled_dot_product_attention

torch.manual_seed(0)
source = torch.randn(1, 7, 16)   # (B, T_k, d): e.g. an encoded sentence of 7 tokens
target = torch.randn(1, 3, 12)   # (B, T_q, d'): 3 tokens written so far, another width
W_q, W_k, W_v = nn.Linear(12, 8), nn.Linear(16, 8), nn.Linear(16, 10)
with torch.no_grad():
    context, weights = scaled_dot_product_attention(W_q(target), W_k(source), W_v(source))
print("weights:", tuple(weights.shape), "(B, T_q, T_k) | context:", tuple(context.shape), "(B, T_q, d_v)")
print("every target token's weights over the source sum to 1:", torch.allclose(weights.sum(-1), torch.ones(1, 3)))

# %% [markdown]
# ## The cost of the (T, T) weights · (T, T) 权重的代价
#
# Every head stores a `(T, T)` matrix of weights and computes it with $T^2$ dot products, so doubling
# the length multiplies both the memory and the time of that step by four. The cell builds the
# weights of your `MultiHeadAttention` (batch 1, 4 heads) at growing lengths and prints their size
# and the time of the scores-softmax-weights step (on one thread, so that the ratio shows the work
# rather than how busy the other cores are), each relative to the shortest length, on the machine
# that ran this. Memory follows $T^2$ exactly. Time grows roughly like $T^2$ as well, often faster on
# a CPU once the weights no longer fit in its caches, and more slowly at small lengths, where fixed
# overheads dominate: compare the time ratios with the last column. What comes later does not remove
# this cost, and each idea touches a different part of it: the KV cache (notebook 07) saves
# recomputing keys and values while generating, but every new token still attends over all earlier
# ones; multi-head latent attention (notebook 09) shrinks what is cached per token, a memory linear
# in T; fused kernels such as the flash and memory-efficient backends of
# `F.scaled_dot_product_attention` (notebook 14) never store the $(T, T)$ weights, but still compute
# all $T^2$ scores (where no fused backend applies, SDPA falls back to a math backend that does store
# them).
#
# 每个头都要保存一个 `(T, T)` 的权重矩阵，并用 $T^2$ 次点积来计算它，所以长度加倍时，这一步的内存和时间都变为四倍。下面的单元格在不断增加的长度下构建你的 `MultiHeadAttention` 的权重（批大小 1，4 个头），并打印它们的大小以及"分数-softmax-权重"这一步的耗时（在单线程上测量，这样比值反映的是计算量，而不是其他核心有多忙），都相对于最短长度给出，数值来自运行本笔记本的机器。内存严格按 $T^2$ 增长。时间也大致按 $T^2$ 增长：在 CPU 上，一旦权重放不进缓存，往往增长得更快；而在长度较小时，固定开销占主导，增长得更慢：请把时间的比值与最后一列对比。后面的内容并没有消除这个代价，每个思路触及的是它的不同部分：KV 缓存（笔记本 07）在生成时省去了重新计算键和值，但每个新词元仍要关注之前的所有词元；多头潜在注意力（笔记本 09）缩小了每个词元缓存的内容，这部分内存随 T 线性增长；`F.scaled_dot_product_attention` 的 flash 和 memory-efficient 后端这样的融合内核（笔记本 14）从不保存 $(T, T)$ 的权重，但仍要计算全部 $T^2$ 个分数（没有融合后端适用时，SDPA 会退回到会保存它们的 math 后端）。

# %%
# NBVAL_IGNORE_OUTPUT
import time

cost = MultiHeadAttention(d_in=64, d_out=64, context_length=2048, dropout=0.0, num_heads=4).eval()

def weights_of(x):
    T = x.shape[1]
    q, k = split_heads(cost.W_query(x), 4), split_heads(cost.W_key(x), 4)
    scores = (q @ k.transpose(-2, -1) / cost.head_dim**0.5).masked_fill(cost.mask[:T, :T], float("-inf"))
    return torch.softmax(scores, dim=-1)  # (B, H, T, T)

lengths, rows = [64, 128] if GRADING else [256, 512, 1024, 2048], []
threads = torch.get_num_threads()
torch.set_num_threads(1)  # one thread: the ratios show the work, not how busy the other cores are
with torch.no_grad():
    for T in lengths:
        x = torch.randn(1, T, 64)
        weights_of(x)  # warm-up
        times = []
        for _ in range(3):
            start = time.perf_counter()
            w = weights_of(x)
            times.append(time.perf_counter() - start)
        rows.append((T, w.numel() * w.element_size(), min(times)))
torch.set_num_threads(threads)
for T, size, seconds in rows:
    print(f"T={T:5d}: weights {size / 2**20:6.1f} MiB ({size / rows[0][1]:4.0f}x) | "
          f"time {seconds * 1e3:7.2f} ms ({seconds / rows[0][2]:5.1f}x) | (T/{lengths[0]})^2 = {(T / lengths[0])**2:.0f}")
growth, square = rows[-1][2] / rows[0][2], (lengths[-1] / lengths[0]) ** 2
print(f"From T={lengths[0]} to T={lengths[-1]} the time grew {growth:.0f}x against {square:.0f}x for T^2: on this "
      f"machine it grew {'faster than' if growth > 1.25 * square else 'more slowly than' if growth < 0.8 * square else 'about like'} T^2.")

# %% [markdown]
# ## Counting parameters · 计算参数量
#
# Heads do not add parameters: they split `d_out` into pieces. The module has three `d_in x d_out`
# projections (plus their biases when `qkv_bias`) and the output projection, `d_out x d_out` plus a
# bias of `d_out`.
#
# 多个头并不增加参数：它们只是把 `d_out` 切成几份。模块有三个 `d_in x d_out` 投影（`qkv_bias` 时还有它们的偏置），以及输出投影：`d_out x d_out` 的权重加上 `d_out` 个偏置。

# %% [markdown]
# ### Exercise 5 · `mha_parameter_count` · 练习 5
#
# Return the number of parameters of `MultiHeadAttention(d_in, d_out, ..., num_heads, qkv_bias)` from
# the formula, without building the module.
#
# 不构建模块，直接用公式返回 `MultiHeadAttention(d_in, d_out, ..., num_heads, qkv_bias)` 的参数数量。
#
# <!-- rules: mha_parameter_count -->
#
# #### Rules that grading checks · 评分检查的规则 (`mha_parameter_count`)
#
# - Not graded (the caller guarantees it): `d_out` is divisible by `num_heads`.
# - dtype: the result is an `int`.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：`d_out` 能被 `num_heads` 整除。
# - dtype：结果是 `int`。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "mha_parameter_count", "locked": false, "schema_version": 3, "solution": true, "task": false}
def mha_parameter_count(d_in, d_out, num_heads, qkv_bias=False):
    ### BEGIN SOLUTION
    qkv = 3 * (d_in * d_out + (d_out if qkv_bias else 0))
    return qkv + d_out * d_out + d_out
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_mha_parameter_count", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from autograder.checks import expect

from autograder.checks import nb06

with nb06.as_graded(mha_parameter_count):
    got = mha_parameter_count(4, 4, 2)
    expect(got == 3 * 16 + 16 + 4, "MultiHeadAttention(4, 4, heads=2) has 68 parameters.",
           "MultiHeadAttention(4, 4, heads=2) 有 68 个参数。", f"got {got}")
    print("✓ mha_parameter_count")

# %% nbgrader={"grade": true, "grade_id": "test_mha_parameter_count_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb06
nb06.check_mha_parameter_count(mha_parameter_count)
### END HIDDEN TESTS

# %%
for bias in (False, True):
    layer = MultiHeadAttention(768, 768, context_length=1024, dropout=0.0, num_heads=12, qkv_bias=bias)
    print(f"768 -> 768, 12 heads, qkv_bias={bias}: formula {mha_parameter_count(768, 768, 12, qkv_bias=bias):,}, "
          f"module {sum(p.numel() for p in layer.parameters()):,}")


# %% [markdown]
# With `qkv_bias=False`, the book's default, a layer of GPT-2 small's size (768 wide, 12 heads) has
# 2,360,064 parameters. GPT-2 small itself has biases on its query, key and value projections (its
# released weights hold them), so each of its attention layers has 2,362,368: the cell prints both.
#
# 当 `qkv_bias=False`（书中的默认值）时，GPT-2 small 大小的层（宽 768，12 个头）有 2,360,064 个参数。GPT-2 small 本身的查询、键、值投影带有偏置（它发布的权重里包含这些偏置），所以它的每个注意力层有 2,362,368 个参数：上面的单元格把两者都打印了出来。

# %% [markdown]
# 3Blue1Brown counts GPT-3's attention differently, per head: a query and a key matrix of
# `d_model x head_dim`, and the value map factored in two, *value-down* (`d_model x head_dim`) and
# *value-up* (`head_dim x d_model`), which together play the role of our value projection and that
# head's slice of `out_proj`. Biases are left out.
#
# 3Blue1Brown 按头来数 GPT-3 的注意力参数：一个查询矩阵和一个键矩阵，大小都是 `d_model x head_dim`；值映射被分解成两个，*value-down*（`d_model x head_dim`）和 *value-up*（`head_dim x d_model`），二者合起来相当于我们的值投影加上 `out_proj` 中属于该头的那一部分。偏置不计。

# %% [markdown]
# ### Exercise 6 · `attention_parameter_count` · 练习 6
#
# Return the count over all heads and all layers: four `d_model x head_dim` matrices per head.
#
# 返回所有头、所有层的总数：每个头四个 `d_model x head_dim` 矩阵。
#
# <!-- rules: attention_parameter_count -->
#
# #### Rules that grading checks · 评分检查的规则 (`attention_parameter_count`)
#
# - dtype: the result is an `int`.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - dtype：结果是 `int`。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "attention_parameter_count", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attention_parameter_count(d_model, n_heads, head_dim, n_layers):
    ### BEGIN SOLUTION
    return 4 * d_model * head_dim * n_heads * n_layers
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attention_parameter_count", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from autograder.checks import expect

from autograder.checks import nb06

with nb06.as_graded(attention_parameter_count):
    got = attention_parameter_count(8, 2, 4, 3)
    expect(got == 4 * 8 * 4 * 2 * 3, "4 matrices of 8 x 4, 2 heads, 3 layers: 768 parameters.",
           "每个头 4 个 8 x 4 矩阵，2 个头，3 层：768 个参数。", f"got {got}")
    print("✓ attention_parameter_count")

# %% nbgrader={"grade": true, "grade_id": "test_attention_parameter_count_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb06
nb06.check_attention_parameter_count(attention_parameter_count)
### END HIDDEN TESTS

# %%
gpt3 = attention_parameter_count(d_model=12288, n_heads=96, head_dim=128, n_layers=96)
print(f"GPT-3 attention: {gpt3:,} parameters, {gpt3 / 175e9:.0%} of its 175 billion")

# %% [markdown]
# ## Which is fastest on your machine? · 在你的机器上哪个最快？
#
# Five implementations of the same layer (all checked equal), timed side by side in one run with
# interleaved rounds: the wrapper, the efficient module, an einsum version, PyTorch's fused
# `F.scaled_dot_product_attention`, and `nn.MultiheadAttention`. The table gives each one's median time
# relative to the efficient module; the sentence under the plot says what your machine showed. Here
# the size is reduced (batch 2, 256 tokens, width 768, 12 heads) to stay quick; `python -m
# utils.benchmark` runs the full size (batch 8, 1024 tokens). When the notebook is graded, a tiny size
# is used, since grading only needs the cell to run.
#
# 同一个层的五种实现（都已验证结果相同），在同一次运行中交替计时：包装器、高效模块、einsum 版本、PyTorch 融合的 `F.scaled_dot_product_attention`，以及 `nn.MultiheadAttention`。表格给出每种实现的中位时间相对于高效模块的倍数；图下方的句子说明你的机器测得的结果。为了快速，这里缩小了规模（批大小 2，256 个词元，宽度 768，12 个头）；`python -m utils.benchmark` 运行完整规模（批大小 8，1024 个词元）。评分时使用很小的规模，因为评分只需要这个单元格能运行。
#
# Do not expect "one module" to win everywhere. The module stores the weights of all heads at once, a
# `(B, H, T, T)` tensor (at the full size, 8 x 12 x 1024 x 1024 floats; the cell prints how many MiB), and on a
# CPU moving that through memory can cost more than the wrapper's loop over heads. PyTorch's fused
# backends (flash, memory-efficient) never store that tensor, which is why `F.scaled_dot_product_attention`
# is often the fastest when one of them applies; the sentence under the figure says which was fastest
# here.
#
# 不要指望"一个模块"在任何情况下都更快。这个模块一次性保存所有头的权重，即一个 `(B, H, T, T)` 张量（完整规模下为 8 x 12 x 1024 x 1024 个浮点数；单元格会打印它有多少 MiB）；在 CPU 上，把它在内存中搬来搬去的代价可能超过包装器对各个头的循环。PyTorch 的融合后端（flash、memory-efficient）从不保存这个张量，所以只要其中一个适用，`F.scaled_dot_product_attention` 往往最快；图下方的句子说明在这里哪个最快。

# %%
# NBVAL_IGNORE_OUTPUT
from IPython.display import clear_output

from utils.benchmark import format_rows, mha_benchmark

size = dict(batch=1, tokens=16, repeats=1) if GRADING else dict(batch=2, tokens=256, repeats=5)
rows = mha_benchmark(**size)
clear_output()  # the finished progress bar would stay in the saved notebook as a stale "0%" line
print(format_rows(rows))
fig, ax = plt.subplots(figsize=(7, 2.8))
ax.barh([r["variant"] for r in rows], [r["relative"] for r in rows])
ax.axvline(1.0, color="gray", ls="--"); ax.invert_yaxis()
ax.set_xlabel("time relative to MultiHeadAttention (lower is faster)")
plt.show()
fastest = min(rows, key=lambda r: r["relative"])
slowest = max(rows, key=lambda r: r["relative"])
print(f"On this machine {fastest['variant']} was fastest and {slowest['variant']} was "
      f"{slowest['relative'] / fastest['relative']:.1f}x slower than it.")
print(f"Full-size weights tensor: {8 * 12 * 1024 * 1024 * 4 / 2**20:.0f} MiB in float32")

# %% [markdown]
# ## What comes next · 接下来
#
# Generating text one token at a time recomputes every key and value at every step. Notebook 07
# (`07_kv_cache.ipynb`) caches them (the KV cache), then shrinks that cache by sharing keys and values between heads
# (multi-query and grouped-query attention).
#
# 逐个词元生成文本时，每一步都要重新计算所有的键和值。笔记本 07（`07_kv_cache.ipynb`）会把它们缓存起来（KV 缓存），再通过让多个头共享键和值来缩小缓存（多查询注意力和分组查询注意力）。
#
# Sources: S. Raschka, *Build a Large Language Model (From Scratch)*, section 3.6 and its bonus
# comparison of efficient multi-head implementations; A. Vaswani et al., *Attention Is All You Need*
# (2017), sections 3.2.2 and 3.2.3 (multi-head attention, cross-attention in the decoder); 3Blue1Brown, *Attention in transformers, visually explained* (value-down and
# value-up, GPT-3's 57,982,058,496 attention parameters); PyTorch documentation of
# `nn.MultiheadAttention` and `F.scaled_dot_product_attention`.
#
# 来源：S. Raschka，《从零构建大语言模型》第 3.6 节及其对高效多头实现的附加比较；A. Vaswani 等，《Attention Is All You Need》（2017）第 3.2.2 和 3.2.3 节（多头注意力，解码器中的交叉注意力）；3Blue1Brown，《可视化解释 Transformer 中的注意力》（value-down 与 value-up，GPT-3 的 57,982,058,496 个注意力参数）；PyTorch 关于 `nn.MultiheadAttention` 和 `F.scaled_dot_product_attention` 的文档。
