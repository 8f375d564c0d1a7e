# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 16 · Linear attention and the delta rule: a state of fixed size · 线性注意力与 delta 规则：固定大小的状态
#
# The course ended where DeepSeek-V3 is. Since then frontier attention has split in two. DeepSeek
# makes full attention cheaper (MLA in notebook 09, sparse attention in notebook 13). The hybrids
# replace three layers in four with **linear attention**, whose memory is a state of fixed size
# instead of a cache that grows with the text: Qwen3-Next and Qwen3.5 use **Gated DeltaNet** beside
# gated full attention, Kimi Linear uses **Kimi Delta Attention** (KDA) beside MLA.
#
# 本课程在 DeepSeek-V3 所在的地方结束。此后，前沿的注意力分成了两条路。DeepSeek 让全注意力更便宜（笔记本 09 的 MLA，笔记本 13 的稀疏注意力）。混合模型则把每四层中的三层换成**线性注意力**：它的记忆是一个固定大小的状态，而不是随文本增长的缓存。Qwen3-Next 和 Qwen3.5 在门控全注意力旁边使用 **Gated DeltaNet**，Kimi Linear 在 MLA 旁边使用 **Kimi Delta Attention**（KDA）。
#
# You build that layer from the course's own pieces: causal linear attention as a running sum and
# in its parallel masked form; the delta rule, which corrects what the state already predicts; the
# gate that lets it forget; the chunked form that trains fast, in tiles like notebook 14's; and the
# bytes of a hybrid stack beside notebook 07's cache. Ground truth is Hugging Face transformers'
# pure-PyTorch code for Qwen3-Next and Kimi Linear; the course's reference, `utils/linear_attention.py`,
# gives its numbers (the project's tests compare them), and this notebook downloads nothing. The
# functions use transformers' layout `(batch, tokens, heads, dim)`, tokens before heads, unlike
# notebooks 06-14. Each exercise is graded on your own code: handing in the course's function of the
# same name from `utils.linear_attention` (itself, an alias or a wrapper) scores nothing; torch's
# functions and your earlier exercises may be called unless an exercise's text says otherwise.
#
# 你将用本课程自己的部件搭出这一层：作为运行和、以及并行的掩码形式的因果线性注意力；修正状态已有预测的 delta 规则；让它遗忘的门；像笔记本 14 的分块那样快速训练的分块形式；以及混合堆叠的字节数，与笔记本 07 的缓存并排比较。标准答案是 Hugging Face transformers 中 Qwen3-Next 和 Kimi Linear 的纯 PyTorch 代码；课程的参考实现 `utils/linear_attention.py` 给出与它相同的数值（项目的测试会比较两者），本笔记本不下载任何东西。这里的函数使用 transformers 的布局 `(batch, tokens, heads, dim)`：词元在头之前，与笔记本 06-14 不同。每个练习都按你自己的代码评分：交上 `utils.linear_attention` 中课程的同名函数（它本身、别名或包装）不得分；torch 的函数和你之前的练习都可以调用，除非某个练习的说明另有规定。

# %%
import math
import os

import matplotlib.pyplot as plt
import torch

from utils.benchmark import demo_device

GRADING = bool(os.getenv("NBGRADER_EXECUTION"))  # grading measures shorter sequences
DEVICE = demo_device()  # the measuring cells run on a GPU when one is present (grading: the CPU)

# %% [markdown]
# ## Attention without the softmax is a running sum · 去掉 softmax 的注意力就是运行和
#
# Causal attention gives token $t$ the output $o_t = \sum_{j \le t} w_{tj} v_j$ with weights from a
# softmax of $q_t \cdot k_j$. Drop the softmax and keep the scaled dot products as weights:
# $o_t = \sum_{j \le t} (q_t \cdot k_j)\, v_j$. With row vectors, $(q_t \cdot k_j)\, v_j = q_t\, k_j^\top v_j$,
# and $q_t$ comes out of the sum:
#
# 因果注意力给词元 $t$ 的输出是 $o_t = \sum_{j \le t} w_{tj} v_j$，权重来自 $q_t \cdot k_j$ 的 softmax。去掉 softmax，直接用缩放后的点积作为权重：$o_t = \sum_{j \le t} (q_t \cdot k_j)\, v_j$。用行向量写，$(q_t \cdot k_j)\, v_j = q_t\, k_j^\top v_j$，于是 $q_t$ 可以提到求和之外：
#
# $$o_t = q_t \sum_{j \le t} k_j^\top v_j = q_t\, S_t, \qquad S_t = S_{t-1} + k_t^\top v_t .$$
#
# $S_t$ is a $(d_k, d_v)$ matrix, the **state**: each token adds the outer product of its key and
# value, and a query reads the state with one product. That is the recurrent form (Katharopoulos et
# al., 2020, "Transformers are RNNs"). The same numbers come in parallel from the masked matrix
# $(Q K^\top \odot M) V$, with $M$ lower triangular: notebook 04's causal mask with zeros instead of
# $-\infty$. The cell computes both on three tokens, with queries scaled by $1/\sqrt{d_k}$ as in
# notebook 03, and prints the state after each token.
#
# $S_t$ 是一个 $(d_k, d_v)$ 矩阵，即**状态**：每个词元加上它的键与值的外积，查询用一次乘法读取状态。这就是循环形式（Katharopoulos 等，2020，《Transformers are RNNs》）。同样的数值也可以由加了掩码的矩阵 $(Q K^\top \odot M) V$ 并行算出，其中 $M$ 是下三角矩阵：就是笔记本 04 的因果掩码，只是用 0 代替 $-\infty$。下面的单元格在三个词元上计算两种形式（查询像笔记本 03 那样乘以 $1/\sqrt{d_k}$），并打印每个词元之后的状态。

# %%
q = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # three tokens, d_k = 2
k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]])
v = torch.tensor([[1.0, 2.0, 0.0], [0.0, 1.0, 1.0], [3.0, 0.0, 1.0]])  # d_v = 3
S = torch.zeros(2, 3)
for t in range(3):
    S = S + k[t, :, None] * v[t, None, :]  # add k_tᵀ v_t
    print(f"after token {t}: S = {S.tolist()}, o_{t} = {[round(x, 4) for x in ((q[t] / math.sqrt(2)) @ S).tolist()]}")
M = torch.ones(3, 3).tril()
print("parallel ((Q Kᵀ / sqrt(d_k)) ⊙ M) V:", [[round(x, 4) for x in row] for row in ((q @ k.T / math.sqrt(2) * M) @ v).tolist()])

# %% [markdown]
# ### Exercise 1 · `linear_attention_recurrent` · 练习 1
#
# Return `(out, state)` for `q`, `k` of shape `(B, T, H, d_k)` and `v` of shape `(B, T, H, d_v)`. Start
# from a zero state of shape `(B, H, d_k, d_v)` and loop over the tokens: add $k_t^\top v_t$ (one outer
# product per batch item and head), then read $o_t = (q_t / \sqrt{d_k})\, S_t$ with the state that
# includes token $t$. `out` has shape `(B, T, H, d_v)`; `state` is the state after the last token.
# Rules the grader checks: compute in float32 whatever the inputs' dtype (`.float()`), return `out`
# in the inputs' dtype and `state` in float32; create new tensors on the inputs' device (`device=q.device`:
# the grader gives your function inputs that report a GPU); create nothing that holds more numbers
# than the largest of the inputs, the output and the state (no `(T, T)` matrix, no state kept for
# every token: the grader watches what your function creates); and let gradients flow from `out`
# to `q`, `k` and `v` (no `torch.no_grad()`, no `.detach()`, no in-place update of the state).
#
# 对形状为 `(B, T, H, d_k)` 的 `q`、`k` 和形状为 `(B, T, H, d_v)` 的 `v`，返回 `(out, state)`。从形状为 `(B, H, d_k, d_v)` 的零状态开始，对词元循环：加上 $k_t^\top v_t$（每个批次项、每个头一个外积），然后用包含词元 $t$ 的状态读取 $o_t = (q_t / \sqrt{d_k})\, S_t$。`out` 的形状为 `(B, T, H, d_v)`；`state` 是最后一个词元之后的状态。评分程序检查的规则：无论输入是什么 dtype 都用 float32 计算（`.float()`），`out` 用输入的 dtype 返回，`state` 用 float32 返回；新张量创建在输入所在的设备上（`device=q.device`：评分程序给你的函数的输入会报告自己在 GPU 上）；不要创建比输入、输出和状态中最大者所含数字更多的张量（不要 `(T, T)` 矩阵，也不要为每个词元保存一个状态：评分程序会观察你的函数创建了什么）；并且让梯度能从 `out` 流到 `q`、`k` 和 `v`（不要 `torch.no_grad()`、不要 `.detach()`，也不要原地更新状态）。

# %% nbgrader={"grade": false, "grade_id": "linear_attention_recurrent", "locked": false, "schema_version": 3, "solution": true, "task": false}
def linear_attention_recurrent(q, k, v):
    """(out (B, T, H, d_v), state (B, H, d_k, d_v)) of causal linear attention, one token at a time."""
    ### BEGIN SOLUTION
    B, T, H, d_k = k.shape
    q32, k32, v32 = q.float() * d_k ** -0.5, k.float(), v.float()
    state = torch.zeros(B, H, d_k, v.shape[-1], dtype=torch.float32, device=q.device)
    out = torch.empty(B, T, H, v.shape[-1], dtype=torch.float32, device=q.device)
    for t in range(T):
        state = state + k32[:, t, :, :, None] * v32[:, t, :, None, :]  # add k_tᵀ v_t
        out[:, t] = (q32[:, t, :, None, :] @ state).squeeze(-2)  # read after the write: a token sees itself
    return out.to(q.dtype), state
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_linear_attention_recurrent", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close, randn

q, k, v = randn(2, 5, 3, 4, seed=0), randn(2, 5, 3, 4, seed=1), randn(2, 5, 3, 2, seed=2)
out, state = linear_attention_recurrent(q, k, v)
qh, kh, vh = (x.transpose(1, 2) for x in (q, k, v))  # (B, H, T, d)
expected = ((qh @ kh.transpose(-1, -2) / 2.0).tril() @ vh).transpose(1, 2)  # d_k = 4: divide by sqrt(4)
expect_close(out, expected, "out should equal ((Q Kᵀ / sqrt(d_k)) with zeros above the diagonal) V for every batch item and head.",
             "out 应等于 ((Q Kᵀ / sqrt(d_k))，对角线之上为 0) V，对每个批次项和每个头都成立。")
expect_close(state, kh.transpose(-1, -2) @ vh, "state should be the sum of k_tᵀ v_t over the tokens, of shape (B, H, d_k, d_v).",
             "state 应是所有词元的 k_tᵀ v_t 之和，形状为 (B, H, d_k, d_v)。")
print("✓ linear_attention_recurrent")

# %% nbgrader={"grade": true, "grade_id": "test_linear_attention_recurrent_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb16
nb16.check_linear_attention_recurrent(linear_attention_recurrent)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 2 · `linear_attention_parallel` · 练习 2
#
# Return `out` of shape `(B, T, H, d_v)`, the same numbers in one pass: for each batch item and head,
# the scores $(Q / \sqrt{d_k}) K^\top$ of every pair of tokens, set to 0 above the diagonal (token $t$
# sees the keys $j \le t$, itself included), times $V$. No softmax, and no loop over tokens: the
# grader counts the torch operations your function runs, and their number must not grow with $T$.
# Compute in float32, return the output in the inputs' dtype, and create the mask on the inputs'
# device (`torch.ones(T, T, dtype=torch.bool, device=q.device)`). Gradients must reach `q`, `k` and `v`.
#
# 返回形状为 `(B, T, H, d_v)` 的 `out`，一次算出同样的数值：对每个批次项和每个头，计算每一对词元的分数 $(Q / \sqrt{d_k}) K^\top$，把对角线之上的置为 0（词元 $t$ 看到 $j \le t$ 的键，包括它自己），再乘以 $V$。不要 softmax，也不要对词元循环：评分程序会统计你的函数执行的 torch 运算个数，它不能随 $T$ 增长。用 float32 计算，输出用输入的 dtype 返回，掩码创建在输入所在的设备上（`torch.ones(T, T, dtype=torch.bool, device=q.device)`）。梯度必须能传到 `q`、`k` 和 `v`。

# %% nbgrader={"grade": false, "grade_id": "linear_attention_parallel", "locked": false, "schema_version": 3, "solution": true, "task": false}
def linear_attention_parallel(q, k, v):
    """out (B, T, H, d_v) of causal linear attention: ((Q Kᵀ / sqrt(d_k)) masked to j <= t) V."""
    ### BEGIN SOLUTION
    T, d_k = k.shape[1], k.shape[-1]
    qh, kh, vh = (x.float().transpose(1, 2) for x in (q, k, v))  # (B, H, T, d)
    scores = qh @ kh.transpose(-1, -2) * d_k ** -0.5
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return (scores.masked_fill(future, 0.0) @ vh).transpose(1, 2).to(q.dtype)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_linear_attention_parallel", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close, randn
from utils.linear_attention import linear_attention_recurrent as reference

q, k, v = randn(2, 7, 3, 4, seed=3), randn(2, 7, 3, 4, seed=4), randn(2, 7, 3, 5, seed=5)
expect_close(linear_attention_parallel(q, k, v), reference(q, k, v)[0],
             "The parallel form should give the running sum's numbers: ((Q Kᵀ / sqrt(d_k)) with zeros above the diagonal) V.",
             "并行形式应给出与运行和相同的数值：((Q Kᵀ / sqrt(d_k))，对角线之上为 0) V。")
print("✓ linear_attention_parallel")

# %% nbgrader={"grade": true, "grade_id": "test_linear_attention_parallel_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb16
nb16.check_linear_attention_parallel(linear_attention_parallel)
### END HIDDEN TESTS

# %% [markdown]
# Your two functions on the same random inputs: the cell prints their largest difference and how
# many numbers each holds at its peak for $T = 512$ tokens of one head of 64: the parallel form
# builds the $(T, T)$ matrix, the recurrent form only a $(d_k, d_v)$ state.
#
# 你的两个函数在相同的随机输入上：单元格打印它们的最大差值，以及在一个宽 64 的头、$T = 512$ 个词元时，各自峰值持有多少个数：并行形式构造 $(T, T)$ 矩阵，循环形式只有一个 $(d_k, d_v)$ 状态。

# %%
# NBVAL_IGNORE_OUTPUT
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 512, 1, 64, generator=g) for _ in range(3))
recurrent_out, state = linear_attention_recurrent(q, k, v)
print(f"largest difference between the two forms: {(recurrent_out - linear_attention_parallel(q, k, v)).abs().max():.1e}")
print(f"parallel form: a (T, T) matrix of {512 * 512} numbers; recurrent form: a state of {state[0, 0].numel()} numbers")

# %% [markdown]
# ## Why the memory stops growing · 为什么内存不再增长
#
# Notebook 07's cache keeps the key and the value of every token: $2 T d$ numbers per head after $T$
# tokens, and each decode step reads all of them. Linear attention keeps $S_T$, $d_k d_v$ numbers per
# head, whatever $T$, and a decode step reads only that. The cell prints both per head of 128 for
# growing $T$: they cross at $T = d/2$, and at a million tokens the cache is 16,384 times larger.
#
# 笔记本 07 的缓存保存每个词元的键和值：$T$ 个词元之后每个头有 $2 T d$ 个数，每个解码步骤都要把它们全部读一遍。线性注意力只保存 $S_T$：每个头 $d_k d_v$ 个数，与 $T$ 无关，一个解码步骤也只读取它。单元格对一个宽 128 的头，打印 $T$ 增长时两者的大小：它们在 $T = d/2$ 处相交，在一百万个词元时缓存是状态的 16,384 倍。

# %%
d = 128
for T in (16, 64, 4096, 131072, 1048576):
    print(f"T = {T:>8}: KV cache {2 * T * d:>12,} numbers per head, state {d * d:,} numbers per head, "
          f"cache / state = {2 * T * d / (d * d):,.2f}")

# %% [markdown]
# ## What a fixed state gives up, and the delta rule · 固定状态放弃了什么，以及 delta 规则
#
# A $(d_k, d_v)$ matrix can hold at most $d_k$ independent key-value pairs. Write a value under a key
# that is already there and linear attention adds the two values; write more than $d_k$ keys and they
# overlap, each read returning a mixture. A fixed state must overwrite, and linear attention cannot.
#
# 一个 $(d_k, d_v)$ 矩阵最多能保存 $d_k$ 个相互独立的键值对。在已有的键下再写一个值，线性注意力会把两个值加起来；写入超过 $d_k$ 个键，它们就会互相重叠，每次读取得到的是混合。固定的状态必须能覆盖，而线性注意力做不到。
#
# The **delta rule** (Widrow and Hoff's rule, used as a fast-weight memory by Schlag et al., 2021;
# DeltaNet, made parallel by Yang et al., 2024) writes only the error: the state already returns
# $k_t S_{t-1}$ for the key $k_t$, so it adds $k_t^\top \beta_t (v_t - k_t S_{t-1})$, with a writing
# strength $\beta_t \in (0, 1)$. With $\beta_t = 1$ and a key of norm 1 the key now returns exactly
# $v_t$: the old value is replaced. The cell writes $v_1$, then $v_2$ under the same key: linear
# attention returns $v_1 + v_2$, the delta rule $v_2$.
#
# **delta 规则**（Widrow 与 Hoff 的规则，Schlag 等在 2021 年把它用作快速权重记忆；Yang 等在 2024 年让 DeltaNet 能够并行计算）只写入误差：状态对键 $k_t$ 已经返回 $k_t S_{t-1}$，所以它加上 $k_t^\top \beta_t (v_t - k_t S_{t-1})$，其中 $\beta_t \in (0, 1)$ 是写入强度。当 $\beta_t = 1$、键的范数为 1 时，这个键现在恰好返回 $v_t$：旧值被替换了。单元格先写入 $v_1$，再在同一个键下写入 $v_2$：线性注意力返回 $v_1 + v_2$，delta 规则返回 $v_2$。

# %%
key = torch.tensor([0.6, 0.8])  # norm 1
v1, v2 = torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.0, 3.0, 1.0])
S_linear, S_delta = torch.zeros(2, 3), torch.zeros(2, 3)
for value in (v1, v2):
    S_linear = S_linear + key[:, None] * value[None, :]
    S_delta = S_delta + key[:, None] * (1.0 * (value - key @ S_delta))[None, :]  # beta = 1
print("linear attention reads", [round(x, 6) for x in (key @ S_linear).tolist()], "= v1 + v2")
print("the delta rule reads   ", [round(x, 6) for x in (key @ S_delta).tolist()], "= v2")

# %% [markdown]
# ## The gate: forgetting on purpose · 门：有意地遗忘
#
# Gated DeltaNet (Yang, Kautz and Hatamizadeh, 2025) multiplies the state by a decay $\alpha_t =
# e^{g_t} \in (0, 1]$ before each write. The layer computes $g_t \le 0$ from the token (in Qwen3-Next,
# $g_t = -e^{A}\, \mathrm{softplus}(a_t + b_{dt})$ per head, Mamba-2's form), so a head can keep its
# memory ($g \approx 0$) or clear it at once ($g \ll 0$). One step, for each batch item and head:
#
# Gated DeltaNet（Yang、Kautz 与 Hatamizadeh，2025）在每次写入之前把状态乘以一个衰减 $\alpha_t = e^{g_t} \in (0, 1]$。层根据词元算出 $g_t \le 0$（在 Qwen3-Next 中，每个头 $g_t = -e^{A}\, \mathrm{softplus}(a_t + b_{dt})$，这是 Mamba-2 的形式），所以一个头既可以保留记忆（$g \approx 0$），也可以一下子清空（$g \ll 0$）。对每个批次项和每个头，一步是：
#
# $$S \leftarrow e^{g_t} S, \qquad S \leftarrow S + k_t^\top\, \beta_t\, (v_t - k_t S), \qquad o_t = q_t S .$$
#
# Kimi Delta Attention (Kimi Team, 2025) makes the decay finer: one $g_t$ per key channel, so each row
# of the state fades at its own rate ($S \leftarrow \mathrm{diag}(e^{g_t}) S$). Everything else is the
# same; the section after the exercises runs it.
#
# Kimi Delta Attention（Kimi 团队，2025）让衰减更细：每个键通道一个 $g_t$，于是状态的每一行以自己的速率衰减（$S \leftarrow \mathrm{diag}(e^{g_t}) S$）。其余部分完全相同；练习之后的一节会运行它。

# %% [markdown]
# ### Exercise 3 · `gated_delta_step` · 练习 3
#
# One token for every batch item and head at once: `state` of shape `(B, H, d_k, d_v)`, `q` and `k` of
# shape `(B, H, d_k)`, `v` of shape `(B, H, d_v)`, `g` and `beta` of shape `(B, H)`. In this order: decay
# `S = exp(g) S`; predict `k S` (a `(B, H, d_v)` row, from the decayed state); write
# `S = S + kᵀ (beta (v - k S))`; read `o = q S` with the new state. Return `(o, S)`. Use `q` as it is (the
# caller scales it). Compute in the dtype you are given and return both results in it (the
# recurrent function of Exercise 4 gives float32). Do not change `state` in place (`state = state * ...`,
# not `state *= ...`): the caller still has the old one, and autograd needs it; gradients must reach
# every input, and a tensor you create must be on the inputs' device.
#
# 一次处理所有批次项和所有头的一个词元：`state` 的形状为 `(B, H, d_k, d_v)`，`q` 和 `k` 的形状为 `(B, H, d_k)`，`v` 的形状为 `(B, H, d_v)`，`g` 和 `beta` 的形状为 `(B, H)`。按这个顺序：衰减 `S = exp(g) S`；预测 `k S`（一个 `(B, H, d_v)` 的行，用衰减之后的状态）；写入 `S = S + kᵀ (beta (v - k S))`；用新状态读取 `o = q S`。返回 `(o, S)`。`q` 按原样使用（调用者会缩放它）。用给你的 dtype 计算，两个结果也用它返回（练习 4 的循环函数给的是 float32）。不要原地修改 `state`（写 `state = state * ...`，不要写 `state *= ...`）：调用者还持有旧状态，自动求导也需要它；梯度必须能传到每一个输入，你创建的张量必须位于输入所在的设备上。

# %% nbgrader={"grade": false, "grade_id": "gated_delta_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def gated_delta_step(state, q, k, v, g, beta):
    """One token of the gated delta rule for every batch item and head: (out (B, H, d_v), new state)."""
    ### BEGIN SOLUTION
    state = state * g.exp()[..., None, None]  # forget
    predicted = (k[..., None, :] @ state).squeeze(-2)  # what the state returns for k now
    state = state + k[..., :, None] * (beta[..., None] * (v - predicted))[..., None, :]  # write the error
    return (q[..., None, :] @ state).squeeze(-2), state
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_gated_delta_step", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import math
import torch
from autograder.checks import expect_close

state = torch.tensor([[1.0], [2.0]]).expand(1, 1, 2, 1)  # (B, H, d_k, d_v) = (1, 1, 2, 1)
q, k, v = torch.tensor([[[1.0, 1.0]]]), torch.tensor([[[1.0, 0.0]]]), torch.tensor([[[5.0]]])
g, beta = torch.tensor([[math.log(0.5)]]), torch.tensor([[0.5]])
out, new = gated_delta_step(state, q, k, v, g, beta)
# decayed [[0.5], [1.0]]; k S = 0.5; correction 0.5 * (5 - 0.5) = 2.25 on row 0; o = q S = 2.75 + 1.0
expect_close(new, torch.tensor([[[[2.75], [1.0]]]]), "The new state should be exp(g) S + kᵀ (beta (v - k exp(g) S)): here [[2.75], [1.0]].",
             "新状态应为 exp(g) S + kᵀ (beta (v - k exp(g) S))：这里是 [[2.75], [1.0]]。")
expect_close(out, torch.tensor([[[3.75]]]), "out should be q times the new state: 2.75 + 1.0.", "out 应为 q 乘以新状态：2.75 + 1.0。")
print("✓ gated_delta_step")

# %% nbgrader={"grade": true, "grade_id": "test_gated_delta_step_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb16
nb16.check_gated_delta_step(gated_delta_step)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 4 · `recurrent_gated_delta_rule` · 练习 4
#
# The whole sequence, token by token, with the signature and the numbers of transformers'
# `torch_recurrent_gated_delta_rule` (its `use_qk_l2norm_in_kernel` is `use_qk_l2norm` here): `q` and `k`
# of shape `(B, T, H_k, d_k)`, `v` of shape `(B, T, H_v, d_v)`, `g` (log decays, $\le 0$) and `beta` of shape
# `(B, T, H_v)`, `initial_state` of shape `(B, H_v, d_k, d_v)` or `None`. In this order:
#
# 整个序列逐个词元处理，签名和数值都与 transformers 的 `torch_recurrent_gated_delta_rule` 相同（它的 `use_qk_l2norm_in_kernel` 在这里叫 `use_qk_l2norm`）：`q` 和 `k` 的形状为 `(B, T, H_k, d_k)`，`v` 的形状为 `(B, T, H_v, d_v)`，`g`（对数衰减，$\le 0$）和 `beta` 的形状为 `(B, T, H_v)`，`initial_state` 的形状为 `(B, H_v, d_k, d_v)` 或为 `None`。按这个顺序：
#
# 1. If `H_v` is not a multiple of `H_k`, raise `ValueError`. Otherwise key head $h$ serves the
#    $r = H_v / H_k$ consecutive value heads $hr, \dots, hr + r - 1$: `repeat_interleave(r, dim=2)` on `q`
#    and `k` (Qwen3-Next has 16 key heads for 32 value heads).
# 2. Convert `q`, `k`, `v`, `g`, `beta` to float32. With `use_qk_l2norm=True`, normalise `q` and `k` over
#    their last dim: `x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)`.
# 3. Scale the queries, and only them, by `d_k ** -0.5`.
# 4. Start from `initial_state` converted to float32, or from zeros on the inputs' device, and call
#    your `gated_delta_step` for each token.
# 5. Return `(out, state)`: `out` of shape `(B, T, H_v, d_v)` in the inputs' dtype, and the final state in
#    float32, or `None` in its place when `output_final_state` is False.
#
# 1. 如果 `H_v` 不是 `H_k` 的倍数，抛出 `ValueError`。否则键头 $h$ 服务于 $r = H_v / H_k$ 个连续的值头 $hr, \dots, hr + r - 1$：对 `q` 和 `k` 用 `repeat_interleave(r, dim=2)`（Qwen3-Next 有 16 个键头、32 个值头）。
# 2. 把 `q`、`k`、`v`、`g`、`beta` 转成 float32。当 `use_qk_l2norm=True` 时，对 `q` 和 `k` 的最后一维做归一化：`x / torch.sqrt((x * x).sum(-1, keepdim=True) + 1e-6)`。
# 3. 只把查询乘以 `d_k ** -0.5`。
# 4. 从转成 float32 的 `initial_state` 开始，或者从输入所在设备上的零状态开始，对每个词元调用你的 `gated_delta_step`。
# 5. 返回 `(out, state)`：`out` 的形状为 `(B, T, H_v, d_v)`，用输入的 dtype；最终状态用 float32；当 `output_final_state` 为 False 时，这个位置返回 `None`。
#
# The grader runs your function on float64 and bfloat16 inputs, one token, non-contiguous inputs,
# gates at their extremes ($g$ between $-60$ and $-30$, $\beta$ of 0 and 1) and grouped heads, and compares every
# gradient (to `q`, `k`, `v`, `g`, `beta` and `initial_state`) with the course's: no in-place update of
# the state. A mistake in your `gated_delta_step` costs marks in Exercise 3 only: here the grader
# runs the course's step in its place.
#
# 评分程序会在 float64 和 bfloat16 输入、一个词元、非连续输入、处于极端的门（$g$ 在 $-60$ 与 $-30$ 之间，$\beta$ 为 0 和 1）以及分组的头上运行你的函数，并把每个梯度（对 `q`、`k`、`v`、`g`、`beta` 和 `initial_state`）与课程的比较：不要原地更新状态。你的 `gated_delta_step` 中的错误只在练习 3 扣分：这里评分程序会用课程的单步函数代替它。

# %% nbgrader={"grade": false, "grade_id": "recurrent_gated_delta_rule", "locked": false, "schema_version": 3, "solution": true, "task": false}
def recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm=False):
    """(out (B, T, H_v, d_v), final state (B, H_v, d_k, d_v) or None) of the gated delta rule, token by token."""
    ### BEGIN SOLUTION
    dtype, (H_k, H_v, d_k) = q.dtype, (k.shape[2], v.shape[2], k.shape[-1])
    if H_v % H_k:
        raise ValueError(f"H_v = {H_v} value heads is not a multiple of H_k = {H_k} key heads")
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    q, k = q.repeat_interleave(H_v // H_k, dim=2), k.repeat_interleave(H_v // H_k, dim=2)
    if use_qk_l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * d_k ** -0.5
    B, T = k.shape[:2]
    if initial_state is None:
        state = torch.zeros(B, H_v, d_k, v.shape[-1], dtype=torch.float32, device=v.device)
    else:
        state = initial_state.to(device=v.device, dtype=torch.float32)
    out = torch.empty_like(v)
    for t in range(T):
        out[:, t], state = gated_delta_step(state, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
    return out.to(dtype), state if output_final_state else None
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_recurrent_gated_delta_rule", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close, randn
from utils.linear_attention import recurrent_gated_delta_rule as reference

q, k, v = randn(2, 6, 2, 4, seed=10), randn(2, 6, 2, 4, seed=11), randn(2, 6, 4, 3, seed=12)  # H_k = 2, H_v = 4
g, beta = -torch.rand(2, 6, 4, generator=torch.Generator().manual_seed(13)), torch.rand(2, 6, 4, generator=torch.Generator().manual_seed(14))
s0 = randn(2, 4, 4, 3, seed=15)
for l2 in (False, True):
    out, state = recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True, use_qk_l2norm=l2)
    want_out, want_state = reference(q, k, v, g, beta, initial_state=s0, output_final_state=True, use_qk_l2norm=l2)
    expect_close(out, want_out, f"out should equal the gated delta rule's (grouped value heads, an initial state, use_qk_l2norm={l2}).",
                 f"out 应等于门控 delta 规则的结果（分组的值头、初始状态、use_qk_l2norm={l2}）。")
    expect_close(state, want_state, f"The final state should equal the gated delta rule's (use_qk_l2norm={l2}).",
                 f"最终状态应等于门控 delta 规则的结果（use_qk_l2norm={l2}）。")
expect(recurrent_gated_delta_rule(q, k, v, g, beta)[1] is None, "Without output_final_state=True the second result should be None.",
       "没有 output_final_state=True 时，第二个结果应为 None。")
print("✓ recurrent_gated_delta_rule")

# %% nbgrader={"grade": true, "grade_id": "test_recurrent_gated_delta_rule_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb16
nb16.check_recurrent_gated_delta_rule(recurrent_gated_delta_rule)
### END HIDDEN TESTS

# %% [markdown]
# ## The chunked form: a chunk in parallel, chunks through the state · 分块形式：块内并行，块间经由状态
#
# Token by token, a prefill of $T$ tokens is $T$ small steps, one after the other: fine for decoding,
# slow for training and long prompts. The chunked form (Yang et al., 2024, for DeltaNet; the same for
# Gated DeltaNet and KDA) cuts the sequence into chunks of $C$ tokens, as notebook 14 cut attention
# into tiles. Inside a chunk it works in parallel with $(C, C)$ matrix products; across chunks the
# state carries everything, as in the recurrent form.
#
# 逐个词元处理时，$T$ 个词元的预填充就是一个接一个的 $T$ 个小步骤：解码时没问题，训练和长提示时就很慢。分块形式（Yang 等，2024，用于 DeltaNet；Gated DeltaNet 和 KDA 相同）把序列切成每块 $C$ 个词元的块，就像笔记本 14 把注意力切成分块那样。块内用 $(C, C)$ 的矩阵乘法并行计算；块与块之间由状态承载一切，和循环形式一样。
#
# Inside a chunk that starts from the state $S$, let $\gamma_t = g_1 + \dots + g_t$ (the log of the decay
# from the chunk's start through position $t$) and $D_{tj} = e^{\gamma_t - \gamma_j}$ for $j \le t$, 0
# above the diagonal. Write $u_t = \beta_t (v_t - k_t \cdot \text{what the state holds then})$ for the
# correction that token $t$ writes. Unrolling the steps gives $C$ linear equations for the $u_t$:
#
# 在一个从状态 $S$ 开始的块内，令 $\gamma_t = g_1 + \dots + g_t$（从块开始到位置 $t$ 的衰减的对数），并令 $D_{tj} = e^{\gamma_t - \gamma_j}$（$j \le t$），对角线之上为 0。把 $u_t = \beta_t (v_t - k_t \cdot \text{那时状态存放的内容})$ 记作词元 $t$ 写入的修正量。把这些步骤展开，就得到关于 $u_t$ 的 $C$ 个线性方程：
#
# $$u_t + \sum_{j < t} \beta_t D_{tj} (k_t \cdot k_j)\, u_j = \beta_t v_t - \beta_t e^{\gamma_t} k_t S, \qquad\text{that is}\qquad (I + A)\, U = \beta V - (\beta e^{\gamma} K)\, S,$$
#
# with $A = (\beta K K^\top) \odot D$ strictly lower triangular. $I + A$ is unit lower triangular, so
# one triangular solve, `torch.linalg.solve_triangular(I + A, [βV, βe^γ K], upper=False, unitriangular=True)`,
# gives $W = (I + A)^{-1} \beta V$ and $\tilde K = (I + A)^{-1} \beta e^{\gamma} K$, and $U = W - \tilde K S$.
# Writing $(I + A)^{-1}$ as a product of simple corrections is the WY (or UT) representation of
# Householder products that DeltaNet's paper uses. Then every output of the chunk and the state at
# its end are two matrix products each:
#
# 其中 $A = (\beta K K^\top) \odot D$ 是严格下三角矩阵。$I + A$ 是单位下三角矩阵，所以一次三角求解 `torch.linalg.solve_triangular(I + A, [βV, βe^γ K], upper=False, unitriangular=True)` 就得到 $W = (I + A)^{-1} \beta V$ 和 $\tilde K = (I + A)^{-1} \beta e^{\gamma} K$，从而 $U = W - \tilde K S$。把 $(I + A)^{-1}$ 写成一串简单修正的乘积，就是 DeltaNet 论文所用的 Householder 乘积的 WY（或 UT）表示。然后，块内的每个输出和块末的状态各自只需两次矩阵乘法：
#
# $$O = (Q \odot e^{\gamma})\, S + (Q K^\top \odot D)\, U, \qquad S \leftarrow e^{\gamma_C} S + (K \odot e^{\gamma_C - \gamma})^\top U .$$
#
# The cell draws $D$ and $A$ for one chunk of 8 tokens with random gates: $D$ fades away from the
# diagonal as the decays accumulate, and $A$ is what the solve undoes.
#
# 单元格对一个 8 个词元、门随机的块画出 $D$ 和 $A$：随着衰减累积，$D$ 离对角线越远越淡；$A$ 就是三角求解要消去的部分。

# %%
gen = torch.Generator().manual_seed(1)
C = 8
gates = -torch.rand(C, generator=gen) * 0.6
keys = torch.nn.functional.normalize(torch.randn(C, 4, generator=gen), dim=-1)  # d_k = 4: keys overlap
betas = torch.rand(C, generator=gen)
gamma = gates.cumsum(0)
D = (gamma[:, None] - gamma[None, :]).masked_fill(~torch.ones(C, C, dtype=torch.bool).tril(), float("-inf")).exp()
A = (betas[:, None] * keys @ keys.T * D).tril(-1)
fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.4))
left.imshow(D, cmap="Blues", vmin=0, vmax=1); left.set_title("D = exp(γ_t - γ_j), j <= t")
right.imshow(A, cmap="RdBu", vmin=-A.abs().max(), vmax=A.abs().max()); right.set_title("A = (β K Kᵀ) ⊙ D, strictly lower")
for ax in (left, right):
    ax.set_xlabel("j (key)"); ax.set_ylabel("t (query)")
plt.tight_layout(); plt.show()

# %% [markdown]
# ### Exercise 5 · `chunk_gated_delta_rule` · 练习 5
#
# The same numbers as your `recurrent_gated_delta_rule`, chunk by chunk, with the signature of
# transformers' `torch_chunk_gated_delta_rule` (`chunk_size=64` by default). Steps 1-3 and 5 and every
# rule of Exercise 4 are the same (the error, grouped heads, float32, the dtypes returned, the
# device, gradients to every input). Then split the tokens into chunks of `chunk_size` (the last may
# be shorter: slice it, or pad with zeros as transformers does, since a padded token with `beta = 0`
# and `g = 0` changes nothing) and, from the state at each chunk's start, apply the formulas above.
# Three rules the grader checks besides the values: the state is updated once per chunk, never token
# by token (it counts the state-sized tensors your function creates: a few per chunk pass, one or
# more per token fail, so no loop over tokens and no call to your recurrent function); it never builds
# a $(T, T)$ matrix, not even a mask (one chunk of the whole sequence is the quadratic parallel form:
# the grader runs 64 tokens in chunks of 16 and looks for a pair of dims of 64); and strong
# decays must give no NaN (it runs $g$ between $-60$ and $-30$): compute $D$ as `exp(γ_t - γ_j)` with the positions
# above the diagonal set to `-inf` before the `exp`, never as `exp(γ_t) / exp(γ_j)` (0 / 0 once
# $e^{\gamma}$ underflows) nor by multiplying an overflowed `inf` by a zero mask. Forward substitution
# row by row inside a chunk (what transformers does when exporting) is as right as
# `solve_triangular`.
#
# 与你的 `recurrent_gated_delta_rule` 数值相同，但按块计算，签名与 transformers 的 `torch_chunk_gated_delta_rule` 相同（默认 `chunk_size=64`）。第 1-3 步、第 5 步和练习 4 的所有规则都相同（报错、分组的头、float32、返回的 dtype、设备、传到每个输入的梯度）。然后把词元切成每块 `chunk_size` 个（最后一块可以更短：对它切片，或者像 transformers 那样补零，因为 `beta = 0`、`g = 0` 的补齐词元什么也不改变），并从每块开始时的状态应用上面的公式。除了数值，评分程序还检查三条规则：状态每块只更新一次，绝不逐个词元更新（它会统计你的函数创建的状态大小的张量个数：每块几个可以通过，每个词元一个或更多则不通过，所以不要对词元循环，也不要调用你的循环函数）；它从不构造 $(T, T)$ 矩阵，连掩码也不行（把整个序列当作一块就是二次复杂度的并行形式：评分程序用 64 个词元、每块 16 个运行，并查找一对大小为 64 的维度）；强衰减不能产生 NaN（它会用 $-60$ 与 $-30$ 之间的 $g$ 运行）：把 $D$ 算成 `exp(γ_t - γ_j)`，并在 `exp` 之前把对角线之上的位置设为 `-inf`，不要算成 `exp(γ_t) / exp(γ_j)`（一旦 $e^{\gamma}$ 下溢就是 0 / 0），也不要用为 0 的掩码去乘一个已经溢出的 `inf`。在块内逐行做前向代入（transformers 导出模型时就这样做）和 `solve_triangular` 一样正确。

# %% nbgrader={"grade": false, "grade_id": "chunk_gated_delta_rule", "locked": false, "schema_version": 3, "solution": true, "task": false}
def chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=64, initial_state=None, output_final_state=False,
                           use_qk_l2norm=False):
    """recurrent_gated_delta_rule's numbers, chunk_size tokens at a time: within a chunk in parallel, across chunks through the state."""
    ### BEGIN SOLUTION
    dtype, (H_k, H_v, d_k) = q.dtype, (k.shape[2], v.shape[2], k.shape[-1])
    if H_v % H_k:
        raise ValueError(f"H_v = {H_v} value heads is not a multiple of H_k = {H_k} key heads")
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    q, k = q.repeat_interleave(H_v // H_k, dim=2), k.repeat_interleave(H_v // H_k, dim=2)
    if use_qk_l2norm:
        q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6)
        k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)
    q = q * d_k ** -0.5
    B, T = k.shape[:2]
    if initial_state is None:
        S = torch.zeros(B, H_v, d_k, v.shape[-1], dtype=torch.float32, device=v.device)
    else:
        S = initial_state.to(device=v.device, dtype=torch.float32)
    q, k, v, g, beta = (x.transpose(1, 2) for x in (q, k, v, g, beta))  # heads first: (B, H_v, T, ...)
    outs = []
    for c0 in range(0, T, chunk_size):
        qc, kc, vc, gc, bc = (x[:, :, c0:c0 + chunk_size] for x in (q, k, v, g, beta))
        C = kc.shape[2]
        gamma = gc.cumsum(-1)
        seen = torch.ones(C, C, dtype=torch.bool, device=v.device).tril()
        D = (gamma[..., :, None] - gamma[..., None, :]).masked_fill(~seen, float("-inf")).exp()
        kb = kc * bc[..., None]
        A = (kb @ kc.transpose(-1, -2) * D).tril(-1)
        eye = torch.eye(C, dtype=torch.float32, device=v.device)
        rhs = torch.cat([vc * bc[..., None], kb * gamma.exp()[..., None]], dim=-1)
        W, K_tilde = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True).split([vc.shape[-1], d_k], dim=-1)
        U = W - K_tilde @ S
        outs.append((qc * gamma.exp()[..., None]) @ S + (qc @ kc.transpose(-1, -2) * D) @ U)
        last = gamma[..., -1:]
        S = S * last.exp()[..., None] + (kc * (last - gamma).exp()[..., None]).transpose(-1, -2) @ U
    out = torch.cat(outs, dim=2).transpose(1, 2)
    return out.to(dtype), S if output_final_state else None
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_chunk_gated_delta_rule", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close, randn

q, k, v = randn(2, 11, 2, 4, seed=20), randn(2, 11, 2, 4, seed=21), randn(2, 11, 4, 3, seed=22)  # 11 tokens: chunks of 4, 4, 3
g, beta = -torch.rand(2, 11, 4, generator=torch.Generator().manual_seed(23)), torch.rand(2, 11, 4, generator=torch.Generator().manual_seed(24))
s0 = randn(2, 4, 4, 3, seed=25)
for l2 in (False, True):
    mine = chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=4, initial_state=s0, output_final_state=True, use_qk_l2norm=l2)
    yours = recurrent_gated_delta_rule(q, k, v, g, beta, initial_state=s0, output_final_state=True, use_qk_l2norm=l2)
    expect_close(mine[0], yours[0], f"The chunked output should equal your recurrent one (11 tokens in chunks of 4, use_qk_l2norm={l2}).",
                 f"分块形式的输出应等于你的循环形式的输出（11 个词元，每块 4 个，use_qk_l2norm={l2}）。", atol=1e-4)
    expect_close(mine[1], yours[1], f"The chunked final state should equal your recurrent one (use_qk_l2norm={l2}).",
                 f"分块形式的最终状态应等于你的循环形式的最终状态（use_qk_l2norm={l2}）。", atol=1e-4)
print("✓ chunk_gated_delta_rule")

# %% nbgrader={"grade": true, "grade_id": "test_chunk_gated_delta_rule_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb16
nb16.check_chunk_gated_delta_rule(chunk_gated_delta_rule)
### END HIDDEN TESTS

# %% [markdown]
# ## Kimi Delta Attention: a decay per channel · Kimi Delta Attention：每个通道一个衰减
#
# KDA changes one thing: `g` has shape `(B, T, H, d_k)`, a decay for each row of the state, and there is
# one value head per key head. The course's `utils.linear_attention.recurrent_kda` and `chunk_kda` give
# the numbers of transformers' `recurrent_kimi_delta_attention` and `chunk_kimi_delta_attention` (in
# the chunked form the decays between two positions differ per channel, so $D$ becomes a $(C, C, d_k)$
# tensor). The cell checks two things: KDA's two forms agree, and KDA with the same decay on every
# channel is Gated DeltaNet, your `recurrent_gated_delta_rule`.
#
# KDA 只改变一件事：`g` 的形状为 `(B, T, H, d_k)`，状态的每一行一个衰减，并且每个键头对应一个值头。课程的 `utils.linear_attention.recurrent_kda` 和 `chunk_kda` 给出与 transformers 的 `recurrent_kimi_delta_attention` 和 `chunk_kimi_delta_attention` 相同的数值（在分块形式中，两个位置之间的衰减因通道而异，所以 $D$ 变成一个 $(C, C, d_k)$ 的张量）。单元格检查两件事：KDA 的两种形式一致；以及每个通道衰减都相同的 KDA 就是 Gated DeltaNet，即你的 `recurrent_gated_delta_rule`。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.linear_attention import chunk_kda, recurrent_kda

gen = torch.Generator().manual_seed(2)
q, k, v = (torch.randn(1, 20, 2, 8, generator=gen) for _ in range(3))
g_channels, beta = -torch.rand(1, 20, 2, 8, generator=gen), torch.rand(1, 20, 2, generator=gen)
kda = recurrent_kda(q, k, v, g_channels, beta, use_qk_l2norm=True)[0]
print(f"KDA, recurrent against chunked (chunks of 8): largest difference "
      f"{(kda - chunk_kda(q, k, v, g_channels, beta, chunk_size=8, use_qk_l2norm=True)[0]).abs().max():.1e}")
g_heads = g_channels[..., 0]  # one decay per head, copied to every channel
same = recurrent_kda(q, k, v, g_heads[..., None].expand(-1, -1, -1, 8), beta, use_qk_l2norm=True)[0]
print(f"KDA with one decay per head against your Gated DeltaNet: largest difference "
      f"{(same - recurrent_gated_delta_rule(q, k, v, g_heads, beta, use_qk_l2norm=True)[0]).abs().max():.1e}")

# %% [markdown]
# ## The layer: Qwen3-Next's Gated DeltaNet · 这一层：Qwen3-Next 的 Gated DeltaNet
#
# Around the rule, Qwen3-Next's layer (`utils.linear_attention.GatedDeltaNet`, under the parameter
# names of transformers' `Qwen3NextGatedDeltaNet`) projects each token to $q, k, v$, a gate $z$, and the
# logits $b, a$ of $\beta = \sigma(b)$ and $g = -e^{A}\,\mathrm{softplus}(a + b_{dt})$; runs $q, k, v$
# through a short causal convolution (4 tokens, one filter per channel) and SiLU; applies the rule
# with L2-normalised $q$ and $k$; and ends with an RMSNorm of each head's output times $\mathrm{SiLU}(z)$
# and an output projection. It carries two states: the convolution's last 3 inputs and the recurrent
# state. The cell builds a small layer with random weights, runs a prefill of 20 tokens, and again
# as a prefill of 5 then 15 single tokens carrying both states: the same outputs. The project's
# test `utils/tests/test_linear_attention.py` loads the state_dict of transformers' own layer
# (transformers 5.24.0) into this one and compares prefill and token-by-token outputs; it needs
# transformers, which this notebook does not.
#
# 在规则之外，Qwen3-Next 的层（`utils.linear_attention.GatedDeltaNet`，使用 transformers 中 `Qwen3NextGatedDeltaNet` 的参数名）把每个词元投影成 $q, k, v$、一个门 $z$，以及 $\beta = \sigma(b)$ 和 $g = -e^{A}\,\mathrm{softplus}(a + b_{dt})$ 的 logits $b, a$；让 $q, k, v$ 经过一个短的因果卷积（4 个词元，每个通道一个滤波器）和 SiLU；用 L2 归一化的 $q$ 和 $k$ 应用规则；最后对每个头的输出做 RMSNorm、乘以 $\mathrm{SiLU}(z)$，再做输出投影。它携带两个状态：卷积的最后 3 个输入和循环状态。单元格用随机权重构造一个小层，先对 20 个词元做一次预填充，再分成 5 个词元的预填充加 15 个单独的词元、携带两个状态运行一次：输出相同。项目的测试 `utils/tests/test_linear_attention.py` 把 transformers 自己那一层的 state_dict（transformers 5.24.0）载入这一层，比较预填充和逐词元的输出；它需要 transformers，而本笔记本不需要。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.linear_attention import GatedDeltaNet, GatedDeltaNetConfig

torch.manual_seed(0)
cfg = GatedDeltaNetConfig(hidden_size=64, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                          linear_value_head_dim=16, linear_conv_kernel_dim=4)
layer = GatedDeltaNet(cfg, chunk_size=8).eval()
x = torch.randn(2, 20, 64)
with torch.no_grad():
    whole, _ = layer(x)
    y, state = layer(x[:, :5])
    steps = [y]
    for t in range(5, 20):
        y, state = layer(x[:, t:t + 1], state)
        steps.append(y)
print(f"prefill of 20 against 5 + 15 single tokens: largest difference {(whole - torch.cat(steps, 1)).abs().max():.1e}")
print("states carried:", {"convolution": tuple(state[0].shape), "recurrent": tuple(state[1].shape)})
print("parameters:", [name for name, _ in layer.named_parameters()])

# %% [markdown]
# ## The memory of a hybrid stack · 混合堆叠的内存
#
# Qwen3-Next-80B-A3B has 48 layers: 36 Gated DeltaNet layers (32 value heads and 16 key heads of 128)
# and, every fourth layer, 12 gated full-attention layers with 2 KV heads of 256. Kimi-Linear-48B-A3B
# has 27 layers: 20 KDA layers (32 heads of 128) and 7 MLA layers, whose cache holds notebook 09's
# 512 + 64 numbers per token. A hybrid stack's memory for one text is the linear layers' states,
# whatever its length, plus the full layers' cache, which grows with it.
#
# Qwen3-Next-80B-A3B 有 48 层：36 个 Gated DeltaNet 层（32 个值头和 16 个键头，宽 128），以及每隔三层一个、共 12 个门控全注意力层，各有 2 个宽 256 的 KV 头。Kimi-Linear-48B-A3B 有 27 层：20 个 KDA 层（32 个宽 128 的头）和 7 个 MLA 层，它们的缓存每个词元保存笔记本 09 的 512 + 64 个数。混合堆叠为一段文本占用的内存，是线性层的状态（与长度无关）加上全注意力层的缓存（随长度增长）。

# %% [markdown]
# ### Exercise 6 · `hybrid_cache_bytes` · 练习 6
#
# Return a tuple of two Python ints, `(state_bytes, cache_bytes)`, for `batch_size` texts of `seq_len`
# tokens: the recurrent states of `n_linear_layers` layers of `linear_heads` heads, each a `(d_k, d_v)`
# matrix of `state_bytes_per_element` bytes per number (4: float32, as the reference kernels keep it),
# and the cache of `n_full_layers` full-attention layers holding `cache_elements_per_token` numbers per
# token and layer, keys and values together, of `cache_bytes_per_element` bytes (2: bfloat16). For
# grouped-query attention `cache_elements_per_token` is `2 * n_kv_heads * head_dim`, exactly what
# notebook 07's `kv_cache_bytes` counts per token and layer; for MLA it is 576. The short
# convolution's state is left out (the next cell prints it: a few percent of the states).
#
# 对 `batch_size` 段、每段 `seq_len` 个词元的文本，返回一个由两个 Python 整数组成的元组 `(state_bytes, cache_bytes)`：`n_linear_layers` 个层、每层 `linear_heads` 个头的循环状态，每个都是 `(d_k, d_v)` 矩阵，每个数 `state_bytes_per_element` 字节（4：float32，参考内核就这样保存）；以及 `n_full_layers` 个全注意力层的缓存，每层每个词元保存 `cache_elements_per_token` 个数（键和值合在一起），每个数 `cache_bytes_per_element` 字节（2：bfloat16）。对分组查询注意力，`cache_elements_per_token` 是 `2 * n_kv_heads * head_dim`，正是笔记本 07 的 `kv_cache_bytes` 每个词元每层所计的数；对 MLA 是 576。短卷积的状态不计入（下一个单元格会打印它：只占状态的百分之几）。

# %% nbgrader={"grade": false, "grade_id": "hybrid_cache_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def hybrid_cache_bytes(batch_size, seq_len, n_linear_layers, n_full_layers, linear_heads, d_k, d_v,
                       cache_elements_per_token, state_bytes_per_element=4, cache_bytes_per_element=2):
    """(state bytes of the linear layers, cache bytes of the full-attention layers) of one hybrid stack."""
    ### BEGIN SOLUTION
    state = batch_size * n_linear_layers * linear_heads * d_k * d_v * state_bytes_per_element
    cache = batch_size * seq_len * n_full_layers * cache_elements_per_token * cache_bytes_per_element
    return int(state), int(cache)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_hybrid_cache_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from autograder.checks import expect
from utils.kv_cache import kv_cache_bytes

got = hybrid_cache_bytes(1, 4096, 36, 12, 32, 128, 128, 2 * 2 * 256)
expect(got == (36 * 32 * 128 * 128 * 4, kv_cache_bytes(1, 4096, 12, 2, 256)),
       "Qwen3-Next at 4096 tokens: the states should be 36 * 32 * 128 * 128 * 4 bytes and the cache notebook 07's kv_cache_bytes(1, 4096, 12, 2, 256).",
       "Qwen3-Next 在 4096 个词元时：状态应为 36 * 32 * 128 * 128 * 4 字节，缓存应为笔记本 07 的 kv_cache_bytes(1, 4096, 12, 2, 256)。", f"got {got}")
expect(hybrid_cache_bytes(2, 10**6, 20, 7, 32, 128, 128, 576)[0] == hybrid_cache_bytes(2, 10, 20, 7, 32, 128, 128, 576)[0],
       "The states do not depend on seq_len.", "状态与 seq_len 无关。")
print("✓ hybrid_cache_bytes")

# %% nbgrader={"grade": true, "grade_id": "test_hybrid_cache_bytes_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb16
nb16.check_hybrid_cache_bytes(hybrid_cache_bytes)
### END HIDDEN TESTS

# %% [markdown]
# ## Measured: state against cache at 4K, 128K and 1M tokens · 实测：4K、128K 与 1M 词元时的状态与缓存
#
# With your `hybrid_cache_bytes` and the published configs (`utils.bench_linear.QWEN3_NEXT_80B` and
# `KIMI_LINEAR_48B`, which say where each number comes from), the cell prints per text: the linear
# layers' states (float32), their convolution states (bfloat16), the full layers' cache (bfloat16),
# the hybrid's total, and what the cache would be if every layer were full attention.
#
# 用你的 `hybrid_cache_bytes` 和公开的配置（`utils.bench_linear.QWEN3_NEXT_80B` 和 `KIMI_LINEAR_48B`，其中注明了每个数的出处），单元格为一段文本打印：线性层的状态（float32）、它们的卷积状态（bfloat16）、全注意力层的缓存（bfloat16）、混合堆叠的总量，以及如果每一层都是全注意力时缓存会有多大。

# %%
from utils.bench_linear import KIMI_LINEAR_48B, QWEN3_NEXT_80B, format_memory, memory_rows

rows = memory_rows(QWEN3_NEXT_80B, bytes_fn=hybrid_cache_bytes) + memory_rows(KIMI_LINEAR_48B, bytes_fn=hybrid_cache_bytes)
print(format_memory(rows))
for r in rows:
    if r["tokens"] == 1048576:
        hybrid = r["state MiB"] + r["conv MiB"] + r["cache MiB"]
        print(f"{r['model']} at 1M tokens: the hybrid holds {hybrid / r['all-full MiB']:.0%} of an all-full-attention cache; "
              f"its fixed states are {(r['state MiB'] + r['conv MiB']) / hybrid:.1%} of what it holds")

# %% [markdown]
# The states are a fixed cost of tens of MiB per text: at 4K tokens they are comparable to the cache,
# at 1M they are a fraction of a percent of what the stack holds. The full-attention layers keep the
# cache growing, at a quarter (Qwen3-Next) or about a quarter (Kimi Linear, 7 of 27) of the rate of an
# all-full-attention stack: that is the "up to 75 % less KV cache" in Kimi Linear's report.
#
# 状态是每段文本几十 MiB 的固定开销：在 4K 个词元时它与缓存相当，在 1M 个词元时只占整个堆叠所持有内容的不到百分之一。全注意力层让缓存继续增长，速度是全部为全注意力的堆叠的四分之一（Qwen3-Next）或大约四分之一（Kimi Linear，27 层中有 7 层）：这就是 Kimi Linear 报告中"KV 缓存最多减少 75 %"的由来。

# %% [markdown]
# ## Measured: decode time per token against context length · 实测：每个词元的解码时间与上下文长度
#
# One decode step of one layer with 8 heads of 64, at growing context lengths, one thread, the two
# steps in alternating rounds (median of several): your `recurrent_gated_delta_rule` on one token with
# a `(8, 64, 64)` state, and attention over notebook 07's `KVCache` holding `context` positions (write
# the new key and value, then `cached_attention`). Where a GPU is present this cell runs there
# (`utils.benchmark.demo_device()`); the first line says where it ran.
#
# 一层、8 个宽 64 的头，在不同的上下文长度下做一个解码步骤，单线程，两种步骤交替多轮（取中位数）：你的 `recurrent_gated_delta_rule` 在一个词元上运行，状态为 `(8, 64, 64)`；以及在保存了 `context` 个位置的笔记本 07 的 `KVCache` 上做注意力（写入新的键和值，然后 `cached_attention`）。有 GPU 时这个单元格在 GPU 上运行（`utils.benchmark.demo_device()`）；第一行说明它在哪里运行。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.bench_linear import decode_rows

contexts = [256, 1024, 4096] if GRADING else [1024, 4096, 16384, 65536]
print(f"measured on: {DEVICE}" + (" (grading: short contexts)" if GRADING else ""))
decode = decode_rows(contexts, heads=8, d=64, repeats=7, step=recurrent_gated_delta_rule, device=DEVICE)
for r in decode:
    print(f"context {r['context']:>6}: fixed state {r['linear ms']:6.3f} ms ({r['state MiB']:.2f} MiB), "
          f"KV cache {r['attention ms']:7.3f} ms ({r['cache MiB']:6.1f} MiB)")
first, last = decode[0], decode[-1]
growth = {name: last[f"{name} ms"] / first[f"{name} ms"] for name in ("linear", "attention")}
span = last["context"] // first["context"]
print(f"context x{span}: the fixed-state step took x{growth['linear']:.1f}, the cache step x{growth['attention']:.1f}")
if growth["attention"] > 2 * growth["linear"]:
    print("on this machine the cache's step grows with the context and the fixed state's does not")
else:
    print("on this machine the two grew alike over these contexts: the fixed costs of each step dominate here; "
          "try longer contexts (python -m utils.bench_linear)")
fig, ax = plt.subplots(figsize=(5.5, 3.4))
ax.loglog([r["context"] for r in decode], [r["linear ms"] for r in decode], "o-", base=2, label="fixed state (yours)")
ax.loglog([r["context"] for r in decode], [r["attention ms"] for r in decode], "s-", base=2, label="KV cache (07)")
ax.set_xlabel("context (tokens)"); ax.set_ylabel("ms per decode step"); ax.legend(); plt.tight_layout(); plt.show()

# %% [markdown]
# ## Measured: chunked against recurrent prefill · 实测：分块与循环的预填充
#
# A prefill of one text with 4 heads of 64, L2-normalised $q$ and $k$: your `recurrent_gated_delta_rule`
# against your `chunk_gated_delta_rule` with chunks of 64, on the same inputs, their outputs and
# final states checked equal first, one thread; on a GPU where one is present, as the decode cell.
#
# 一段文本的预填充，4 个宽 64 的头，$q$ 和 $k$ 做 L2 归一化：在相同的输入上比较你的 `recurrent_gated_delta_rule` 和每块 64 个的 `chunk_gated_delta_rule`，先检查两者的输出和最终状态相等，单线程；有 GPU 时和解码的单元格一样在 GPU 上运行。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.bench_linear import prefill_rows

lengths = [64, 256] if GRADING else [128, 512, 2048]
print(f"measured on: {DEVICE}" + (" (grading: short prompts)" if GRADING else ""))
prefill = prefill_rows(lengths, heads=4, d=64, chunk_size=64, recurrent=recurrent_gated_delta_rule,
                       chunked=chunk_gated_delta_rule, device=DEVICE)
for r in prefill:
    print(f"{r['tokens']:>5} tokens: token by token {r['recurrent s'] * 1e3:8.1f} ms, chunked {r['chunked s'] * 1e3:7.1f} ms, "
          f"x{r['recurrent s'] / r['chunked s']:.1f}")
speedup = prefill[-1]["recurrent s"] / prefill[-1]["chunked s"]
if speedup > 1:
    print(f"at {prefill[-1]['tokens']} tokens the chunked form was x{speedup:.1f} faster here: "
          f"{prefill[-1]['tokens'] // 64} chunks of a few matrix products against {prefill[-1]['tokens']} small steps")
else:
    print("here the chunked form was not faster at these lengths: its matrix products cost more than the steps they replace")

# %% [markdown]
# The chunked form does more arithmetic than the recurrent one (the $(C, C)$ products inside each
# chunk), but in $T / C$ steps of matrix products instead of $T$ steps of a few tiny operations each,
# and a CPU's vector units and a GPU's tensor cores run matrix products far better. That is why training and prefill use the
# chunked kernel and decoding the recurrent step (`GatedDeltaNet` above does the same).
#
# 分块形式的运算量比循环形式多（每块内部的 $(C, C)$ 乘法），但它分成 $T / C$ 步矩阵乘法，而不是 $T$ 步、每步几个很小的运算；CPU 的向量单元和 GPU 的张量核心运行矩阵乘法要好得多。这就是为什么训练和预填充使用分块内核，而解码使用循环的单步（上面的 `GatedDeltaNet` 也是这样）。

# %% [markdown]
# ## What a fixed state cannot hold · 固定的状态装不下什么
#
# A synthetic associative-recall task (the multi-query associative recall of Arora et al., 2023,
# without training): write $n$ key-value pairs (random unit keys and random values of 64 numbers),
# then ask every key again; a value counts as recalled when the written value nearest to what the
# memory returns is the right one. Three memories of the same pairs: linear attention's state, the
# delta rule's state (your `gated_delta_step` with $\beta = 1$ and no decay), both $64 \times 64$
# numbers; and softmax attention over the cache, which keeps every pair ($2 \cdot 64\, n$ numbers), the
# memory of a hybrid's full-attention layer. The second table counts only the 16 pairs written last.
#
# 一个合成的联想回忆任务（Arora 等 2023 年的多查询联想回忆，不经训练）：写入 $n$ 个键值对（随机的单位键和 64 个数的随机值），然后再把每个键问一遍；如果在写入过的值中，离记忆返回结果最近的那个就是正确的值，就算回忆成功。同样的键值对用三种记忆保存：线性注意力的状态、delta 规则的状态（你的 `gated_delta_step`，$\beta = 1$ 且不衰减），两者都是 $64 \times 64$ 个数；以及对缓存做的 softmax 注意力，它保存每一对（$2 \cdot 64\, n$ 个数），也就是混合模型中全注意力层的记忆。第二张表只统计最后写入的 16 对。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.bench_linear import associative_recall

pairs = [16, 64, 256] if GRADING else [16, 32, 64, 128, 256, 512]
print(f"computed on: {DEVICE}")
recall = associative_recall(pairs, d=64, trials=4, step=gated_delta_step, device=DEVICE)  # your step writes the pairs
names = ("linear attention", "delta rule", "softmax attention")
for newest in (False, True):
    print("recalled, the 16 newest pairs" if newest else "recalled, all pairs")
    for r in recall:
        print(f"  {r['pairs']:>4} pairs: " + ", ".join(f"{n} {r[f'{n}, newest 16' if newest else n]:.2f}" for n in names)
              + f"   (state {r['state numbers']} numbers, cache {r['cache numbers']})")
worst = recall[-1]
if worst["linear attention"] < 0.5 and worst["delta rule"] < 0.5 and worst["softmax attention"] > 0.95:
    print(f"at {worst['pairs']} pairs both fixed states lost most pairs; the cache recalled {worst['softmax attention']:.0%}")
else:
    print(f"at {worst['pairs']} pairs: linear {worst['linear attention']:.2f}, delta {worst['delta rule']:.2f}, "
          f"softmax {worst['softmax attention']:.2f}: not the usual picture, look at the tables above")
fig, ax = plt.subplots(figsize=(5.5, 3.4))
for n, style in zip(names, ("o-", "s-", "^-")):
    ax.semilogx([r["pairs"] for r in recall], [r[n] for r in recall], style, base=2, label=n)
ax.axvline(64, color="grey", lw=0.8, ls=":"); ax.text(68, 0.5, "d_k = 64", fontsize=8)
ax.set_xlabel("key-value pairs written"); ax.set_ylabel("fraction recalled"); ax.legend(fontsize=8)
plt.tight_layout(); plt.show()

# %% [markdown]
# Read the two tables. Both fixed states recall almost everything while $n$ is well below $d_k = 64$
# and fail as $n$ grows past it: $64 \times 64$ numbers cannot hold hundreds of independent pairs. They
# fail differently. Linear attention blurs every pair alike (its newest pairs are no better than the
# rest); the delta rule overwrites, so it loses the old pairs and keeps the newest exactly. The cache
# recalls every pair at every $n$, because it keeps them all, and pays for it in memory that grows
# with $n$. That is the hybrid's bargain: three layers in four with a fixed state for the bulk of the
# work, one in four with a cache for what must be looked up exactly. This construction shows the
# capacity of each memory, not what a trained model learns: trained on recall, a hybrid learns to
# route lookups to its full-attention layers, which is what Qwen3-Next's and Kimi Linear's reports
# measure on long-context retrieval.
#
# 请阅读这两张表。当 $n$ 远小于 $d_k = 64$ 时，两种固定状态几乎都能回忆起所有内容；当 $n$ 超过它时就失败了：$64 \times 64$ 个数装不下几百个相互独立的键值对。它们失败的方式不同。线性注意力把每一对都同样地模糊掉（最新的几对并不比其余的好）；delta 规则会覆盖，所以它丢掉旧的对，却精确地保留最新的对。缓存在每个 $n$ 上都能回忆起每一对，因为它把它们全都保存下来，代价是随 $n$ 增长的内存。这就是混合模型的取舍：四层中的三层用固定的状态完成大部分工作，一层用缓存处理必须精确查找的内容。这个构造展示的是每种记忆的容量，而不是训练好的模型学到了什么：在回忆任务上训练后，混合模型会学会把查找交给它的全注意力层，这正是 Qwen3-Next 和 Kimi Linear 的报告在长上下文检索上测量的内容。

# %% [markdown]
# ## What comes next · 接下来
#
# The course's reference for this notebook is `utils/linear_attention.py` (the rule in every form,
# KDA) and `utils/gated_deltanet.py` (the layer), with `utils/bench_linear.py` for the measurements
# (`python -m utils.bench_linear` runs them at larger sizes; `--device cuda` on a GPU). Production
# kernels for these rules are in the flash-linear-attention library (FLA), which transformers calls
# when it is installed and replaces with the pure-PyTorch code this notebook matched when it is not.
#
# 本笔记本的参考实现是 `utils/linear_attention.py`（各种形式的规则，以及 KDA）和 `utils/gated_deltanet.py`（这一层），测量代码在 `utils/bench_linear.py`（`python -m utils.bench_linear` 用更大的尺寸运行它们；在 GPU 上加 `--device cuda`）。这些规则的生产级内核在 flash-linear-attention 库（FLA）中：装了它时 transformers 就调用它，没装时则换成本笔记本所对照的纯 PyTorch 代码。
#
# Sources: A. Katharopoulos et al., *Transformers are RNNs: Fast Autoregressive Transformers with
# Linear Attention* (ICML 2020, arXiv 2006.16236); I. Schlag, K. Irie, J. Schmidhuber, *Linear
# Transformers Are Secretly Fast Weight Programmers* (ICML 2021, arXiv 2102.11174; the delta rule);
# S. Yang et al., *Parallelizing Linear Transformers with the Delta Rule over Sequence Length* (NeurIPS
# 2024, arXiv 2406.06484; the chunked form and its WY representation); S. Yang, J. Kautz, A.
# Hatamizadeh, *Gated Delta Networks: Improving Mamba2 with Delta Rule* (ICLR 2025, arXiv 2412.06464);
# Kimi Team, *Kimi Linear: An Expressive, Efficient Attention Architecture* (2025, arXiv 2510.26692;
# KDA, the 3:1 hybrid with MLA, up to 75 % less KV cache); S. Arora et al., *Zoology: Measuring and
# Improving Recall in Efficient Language Models* (2023, arXiv 2312.04927; multi-query associative
# recall); Hugging Face transformers 5.24.0, `models/qwen3_next/modeling_qwen3_next.py`
# (`torch_recurrent_gated_delta_rule`, `torch_chunk_gated_delta_rule`, `Qwen3NextGatedDeltaNet`) and
# `models/kimi_linear/modeling_kimi_linear.py` (`recurrent_kimi_delta_attention`,
# `chunk_kimi_delta_attention`); the configs: transformers' `Qwen3NextConfig` defaults (documented as
# Qwen/Qwen3-Next-80B-A3B-Instruct's) and `KimiLinearConfig` defaults (moonshotai/Kimi-Linear-48B-A3B-Instruct),
# with the layer list of that checkpoint's `config.json` (`linear_attn_config.full_attn_layers`:
# 4, 8, 12, 16, 20, 24, 27).
#
# 来源：A. Katharopoulos 等，《Transformers are RNNs：使用线性注意力的快速自回归 Transformer》（ICML 2020，arXiv 2006.16236）；I. Schlag、K. Irie、J. Schmidhuber，《线性 Transformer 其实是快速权重编程器》（ICML 2021，arXiv 2102.11174；delta 规则）；S. Yang 等，《用 delta 规则在序列长度上并行化线性 Transformer》（NeurIPS 2024，arXiv 2406.06484；分块形式及其 WY 表示）；S. Yang、J. Kautz、A. Hatamizadeh，《门控 Delta 网络：用 delta 规则改进 Mamba2》（ICLR 2025，arXiv 2412.06464）；Kimi 团队，《Kimi Linear：一种表达力强、高效的注意力架构》（2025，arXiv 2510.26692；KDA、与 MLA 3:1 的混合、KV 缓存最多减少 75 %）；S. Arora 等，《Zoology：测量并改进高效语言模型的回忆能力》（2023，arXiv 2312.04927；多查询联想回忆）；Hugging Face transformers 5.24.0 的 `models/qwen3_next/modeling_qwen3_next.py`（`torch_recurrent_gated_delta_rule`、`torch_chunk_gated_delta_rule`、`Qwen3NextGatedDeltaNet`）和 `models/kimi_linear/modeling_kimi_linear.py`（`recurrent_kimi_delta_attention`、`chunk_kimi_delta_attention`）；配置：transformers 的 `Qwen3NextConfig` 默认值（文档注明为 Qwen/Qwen3-Next-80B-A3B-Instruct 的配置）和 `KimiLinearConfig` 默认值（moonshotai/Kimi-Linear-48B-A3B-Instruct），以及该检查点 `config.json` 中的层列表（`linear_attn_config.full_attn_layers`：4、8、12、16、20、24、27）。
