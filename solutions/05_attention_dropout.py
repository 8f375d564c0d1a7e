# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Dropout on attention weights · 注意力权重上的 dropout
#
# A large network can memorize its training data by letting a few units co-adapt: each one relies
# on the exact output of the others. **Dropout** (Srivastava et al., 2014) breaks that habit: during
# training every unit is switched off at random with probability $p$, so no unit can count on any
# other being there. In attention, GPT-style models apply it to the **attention weights**: in each
# training step every query randomly ignores some of the keys it could see. GPT-1 used $p = 0.1$ on
# them (Radford et al., 2018: "residual, embedding, and attention dropouts with a rate of 0.1"), and
# Hugging Face's GPT-2 configuration keeps that rate (`attn_pdrop = 0.1`; the GPT-2 paper gives no
# rate, and OpenAI's released GPT-2 code has no dropout at all); many recent LLMs, trained for
# about one pass over trillions of tokens, use no attention dropout at all (Llama's published
# configurations set `attention_dropout` to 0.0). The demos here use $p = 0.5$ so the effect is easy
# to see.
#
# 大型网络可以通过让少数单元相互适应来记住训练数据：每个单元都依赖其他单元的精确输出。**Dropout**（Srivastava 等，2014）打破了这种习惯：训练时每个单元以概率 $p$ 被随机关掉，所以没有哪个单元能指望其他单元一定在场。在注意力中，GPT 类模型把它应用到 **注意力权重** 上：每个训练步中，每个查询都会随机忽略一些它本可以看到的键。GPT-1 在注意力权重上使用 $p = 0.1$（Radford 等，2018：“残差、嵌入和注意力的 dropout 比例都是 0.1”），Hugging Face 的 GPT-2 配置沿用了这个比例（`attn_pdrop = 0.1`；GPT-2 论文没有给出比例，OpenAI 发布的 GPT-2 代码里根本没有 dropout）；许多近来的大语言模型只在数万亿词元上训练大约一遍，根本不用注意力 dropout（Llama 公开的配置把 `attention_dropout` 设为 0.0）。这里的演示使用 $p = 0.5$，让效果一目了然。
#
# Dropout is active only in training. At evaluation and generation time the model is deterministic.
#
# Dropout 只在训练时起作用。在评估和生成时，模型是确定性的。

# %%
import math

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from utils.causal import CausalSelfAttention, causal_mask, masked_softmax
from utils.fixtures import JOURNEY_WORDS, journey_inputs
from utils.plots import attention_heatmap
from utils.self_attention import SelfAttentionV2

inputs = journey_inputs()
torch.manual_seed(789)                                   # notebook 04's causal weights (the book's)
sa_v2 = SelfAttentionV2(3, 2)
with torch.no_grad():
    scores = sa_v2.W_query(inputs) @ sa_v2.W_key(inputs).T / math.sqrt(2)
causal_weights = masked_softmax(scores, causal_mask(6))
print(causal_weights.round(decimals=4))


# %% [markdown]
# ## Inverted dropout · 反向 dropout
#
# Zeroing a fraction $p$ of the weights shrinks their expected value to $(1-p)\,w$. The network would
# then see larger values at evaluation time, when nothing is dropped. **Inverted dropout** fixes this
# during training: it divides every survivor by $(1 - p)$, so that
#
# $$\mathbb{E}[\text{out}] = (1-p) \cdot \frac{w}{1-p} + p \cdot 0 = w .$$
#
# 把比例为 $p$ 的权重置零，会让它们的期望缩小为 $(1-p)\,w$。这样到了评估时（什么都不丢弃），网络看到的值会更大。**反向 dropout** 在训练时就解决了这个问题：它把每个保留下来的值除以 $(1 - p)$，于是
#
# $$\mathbb{E}[\text{out}] = (1-p) \cdot \frac{w}{1-p} + p \cdot 0 = w 。$$
#
# Evaluation then needs no correction at all: dropout becomes the identity. (The 2014 paper scaled
# the weights at test time instead; every modern framework uses the inverted form.)
#
# 评估时就完全不需要任何修正：dropout 变成恒等映射。（2014 年的论文是在测试时缩放权重；现代框架都使用反向的形式。）

# %% [markdown]
# ### Exercise 1 · `attention_dropout` · 练习 1
#
# Write inverted dropout by hand for a tensor of any shape: draw one uniform random number per entry
# with `torch.rand(weights.shape, generator=generator, device=weights.device)` (a `generator`, when
# given, lives on the weights' device: the caller sees to it), keep the entries whose number is
# `>= p`, zero the others, and divide the survivors by `1 - p`. Return the weights unchanged when
# `training` is False or `p == 0`, and raise `ValueError` unless `0 <= p < 1`, in either mode.
# Return a new tensor (do not modify `weights` in place). `F.dropout`, `nn.Dropout` and
# `torch.dropout` are not allowed here.
#
# 为任意形状的张量手写反向 dropout：用 `torch.rand(weights.shape, generator=generator, device=weights.device)` 为每个元素抽一个均匀随机数（给出的 `generator` 与权重在同一设备上：这由调用者保证），保留随机数 `>= p` 的元素，把其余的置零，并把保留下来的元素除以 `1 - p`。当 `training` 为 False 或 `p == 0` 时原样返回权重；除非 `0 <= p < 1`，否则抛出 `ValueError`，两种模式下都一样。返回一个新张量（不要原地修改 `weights`）。这里不允许使用 `F.dropout`、`nn.Dropout` 和 `torch.dropout`。
#
# <!-- rules: attention_dropout -->
#
# #### Rules that grading checks · 评分检查的规则 (`attention_dropout`)
#
# - Not allowed: `F.dropout` (it is the dropout this exercise writes by hand); `nn.Dropout` (the same, as a layer); `torch.dropout` (the same, underneath); `torch.dropout_` (the same, in place); `torch.native_dropout` (the kernel under all of them).
# - Raises `ValueError` when `p` is not in [0, 1), whatever `training` is.
# - Not graded (the caller guarantees it): a `generator`, when given, is on the weights' device (a CUDA generator for CUDA weights).
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Which entries are dropped is your draw: grading measures the kept fraction and the scaling on large tensors, never a particular mask. Each entry is dropped independently; the random numbers come from `generator` (the same seed, the same mask), or from PyTorch's global generator when it is `None` (a new mask each call).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.dropout`（它就是本练习要你手写的 dropout）；`nn.Dropout`（同一个东西，做成了层）；`torch.dropout`（同一个东西，在底层）；`torch.dropout_`（同一个东西，原地版本）；`torch.native_dropout`（它们底下的内核）。
# - `p` 不在 [0, 1) 内（无论 `training` 取何值）时抛出 `ValueError`。
# - 不评分（由调用者保证）：给出的 `generator` 与权重在同一设备上（CUDA 权重配 CUDA 生成器）。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 哪些元素被丢弃由你的抽样决定：评分在大张量上测量保留比例和缩放，从不比较某个具体的掩码。每个元素独立地被丢弃；随机数来自 `generator`（相同的种子给出相同的掩码），为 `None` 时来自 PyTorch 的全局生成器（每次调用都是新的掩码）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "attention_dropout", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attention_dropout(weights, p, training=True, generator=None):
    """Zero each entry with probability p, scale the survivors by 1/(1-p); identity in eval."""
    ### BEGIN SOLUTION
    if not 0 <= p < 1:
        raise ValueError(f"dropout probability must satisfy 0 <= p < 1, got {p}")
    if not training or p == 0:
        return weights
    keep = torch.rand(weights.shape, generator=generator, device=weights.device) >= p
    return weights * keep / (1 - p)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attention_dropout", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close, fail

w = torch.full((200, 300), 0.25)
out = attention_dropout(w, 0.5, generator=torch.Generator().manual_seed(0))
kept = out != 0
expect(abs(kept.float().mean().item() - 0.5) < 0.02,
       "With p = 0.5 about half of the entries should be zeroed.", "p = 0.5 时大约一半的元素应被置零。")
expect_close(out[kept], torch.full((int(kept.sum()),), 0.5),
             "Survivors should be divided by 1 - p (0.25 / 0.5 = 0.5).", "保留下来的元素应除以 1 - p（0.25 / 0.5 = 0.5）。")
expect(torch.equal(attention_dropout(w, 0.5, training=False), w),
       "With training=False the weights should come back unchanged.", "training=False 时权重应原样返回。")
try:
    attention_dropout(w, 1.0)
except ValueError:
    pass
else:
    fail("p = 1 should raise ValueError.", "p = 1 时应抛出 ValueError。")
print("✓ attention_dropout")

# %% nbgrader={"grade": true, "grade_id": "test_attention_dropout_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb05
nb05.check_attention_dropout(attention_dropout)
### END HIDDEN TESTS

# %% [markdown]
# The book's demo: dropout with $p = 0.5$ on a matrix of ones. Every entry becomes 0 or
# $1 / (1 - 0.5) = 2$.
#
# 书中的演示：对一个全 1 矩阵做 $p = 0.5$ 的 dropout。每个元素变成 0 或 $1 / (1 - 0.5) = 2$。

# %%
ones = torch.ones(6, 6)
dropped = attention_dropout(ones, 0.5, generator=torch.Generator().manual_seed(123))
print(dropped)
print("values:", dropped.unique().tolist(), "| zeros:", int((dropped == 0).sum()), "of", dropped.numel())

# %% [markdown]
# On the causal weights, the survivors double and the dropped weights vanish. The rows no longer sum
# to 1, and a row can even lose all its weight: dropout keeps the **expected** value of each weight,
# not the sum of a row.
#
# 在因果权重上，保留下来的权重翻倍，被丢弃的权重消失。各行之和不再为 1，某一行甚至可能失去全部权重：dropout 保持的是每个权重的 **期望**，而不是每行之和。

# %%
dropped_w = attention_dropout(causal_weights, 0.5, generator=torch.Generator().manual_seed(123))
print(dropped_w.round(decimals=4))
print("row sums:", dropped_w.sum(dim=-1).round(decimals=4))

# %% [markdown]
# ## Where to drop: the weights or the context · 在哪里 dropout：权重还是上下文
#
# Dropout could also act one step later, on the context vectors `weights @ V`. The two are not the
# same. Dropping a weight removes one key from one query's mix: that query's output is built from
# fewer keys, but all its features are still there (unless the query lost every key it had, as the
# first query, which sees only itself, does half of the time). Dropping the context zeroes single features of
# the output, ordinary dropout on activations, and every key still contributes. The cell applies
# both to the causal weights with random values and counts what each removes.
#
# Dropout 也可以晚一步作用在上下文向量 `weights @ V` 上。两者并不相同。丢弃一个权重，就是从一个查询的混合中去掉一个键：该查询的输出由更少的键构成，但它的所有特征都还在（除非这个查询失去了它所有的键，比如只能看到自己的第一个查询，有一半的概率如此）。对上下文做 dropout，则是把输出的单个特征置零，也就是普通的激活 dropout，而每个键仍然都有贡献。下面的单元格把两种方式都应用到因果权重和随机的值上，并统计各自去掉了什么。
#
# The course drops the weights, as the book does, as Hugging Face's GPT-2 and nanoGPT do, and as PyTorch's
# `F.scaled_dot_product_attention(..., dropout_p=p)` does: it regularises *which keys* a query relies
# on, the very thing attention learns. Dropout on the block's outputs (the residual dropout of
# Vaswani et al., section 5.4) is a separate layer outside attention.
#
# 本课程对权重做 dropout，书中、Hugging Face 的 GPT-2 和 nanoGPT 以及 PyTorch 的 `F.scaled_dot_product_attention(..., dropout_p=p)` 都是这样做的：它正则化的是一个查询 *依赖哪些键*，这恰恰是注意力要学的东西。对整个模块输出做的 dropout（Vaswani 等人论文第 5.4 节的残差 dropout）是注意力之外的另一层。

# %%
values = torch.randn(6, 4, generator=torch.Generator().manual_seed(2))   # (T, d_v)
on_weights = attention_dropout(causal_weights, 0.5, generator=torch.Generator().manual_seed(7))
on_context = attention_dropout(causal_weights @ values, 0.5, generator=torch.Generator().manual_seed(7))
allowed = ~causal_mask(6)
print(f"dropout on the weights: {int((on_weights[allowed] == 0).sum())} of {int(allowed.sum())} (query, key) pairs removed, "
      f"{int(((on_weights @ values) == 0).sum())} of 24 output features zero")
print(f"dropout on the context: 0 of {int(allowed.sum())} (query, key) pairs removed, "
      f"{int((on_context == 0).sum())} of 24 output features zero")

# %% [markdown]
# ## Dropout is a statistic · dropout 是一个统计量
#
# One draw tells little; many draws show what dropout guarantees. Left: the fraction of the 36
# entries of a 6 × 6 matrix that survive, over 2,000 draws with $p = 0.5$: it scatters around 0.5
# like a binomial count. Right: the average of $n$ dropped copies of the causal weights (16 runs each) approaches
# the weights themselves, with a root-mean-square error that falls like $1/\sqrt{n}$.
#
# 一次抽样说明不了什么；多次抽样才能显示 dropout 保证了什么。左图：对一个 6 × 6 矩阵做 $p = 0.5$ 的 dropout，2,000 次抽样中 36 个元素被保留的比例：它像二项分布计数一样在 0.5 附近分布。右图：对因果权重做 $n$ 次 dropout 后取平均（每个 $n$ 重复 16 次），结果逼近权重本身，均方根误差按 $1/\sqrt{n}$ 下降。

# %%
g = torch.Generator().manual_seed(0)
draws = torch.stack([attention_dropout(ones, 0.5, generator=g) for _ in range(2000)])   # (2000, 6, 6)
kept_fraction = (draws != 0).float().mean(dim=(1, 2))
print(f"kept fraction over 2000 draws: mean {kept_fraction.mean():.3f}, std {kept_fraction.std():.3f}"
      f" (binomial: {math.sqrt(0.5 * 0.5 / 36):.3f})")

g = torch.Generator().manual_seed(1)
copies = attention_dropout(causal_weights.expand(16, 4096, 6, 6), 0.5, generator=g)  # 16 runs of 4096 draws
ns = [4, 16, 64, 256, 1024, 4096]
allowed = ~causal_mask(6)
errors = [(copies[:, :n].mean(dim=1) - causal_weights)[:, allowed].pow(2).mean().sqrt().item() for n in ns]
print("root-mean-square error of the mean of n copies:", {n: round(e, 4) for n, e in zip(ns, errors)})

fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8))
left.hist(kept_fraction.numpy(), bins=torch.arange(8, 30).div(36).numpy() - 1 / 72, color="tab:blue", edgecolor="white")
left.axvline(0.5, color="black", ls="--", label="1 - p = 0.5")
left.set_xlabel("fraction of the 36 entries kept"); left.set_ylabel("draws"); left.legend()
left.set_title("Kept fraction over 2,000 draws (p = 0.5)")
right.loglog(ns, errors, marker="o", label="RMS of (mean - w)")
right.loglog(ns, [errors[0] * math.sqrt(ns[0] / n) for n in ns], ls="--", color="gray", label="∝ 1/√n")
right.set_xlabel("number of dropped copies averaged, n"); right.set_ylabel("root-mean-square error"); right.legend()
right.set_title("The mean of dropped weights converges to w")
plt.tight_layout(); plt.show()

# %% [markdown]
# ## Why the exact mask is not reproducible · 为什么确切的掩码无法复现
#
# Which entries are dropped depends on the random number generator, and that is not one thing.
# CPU and CUDA use different generator algorithms, the stream can change between PyTorch versions
# and operating systems (the book's dropout example prints different matrices on different machines:
# LLMs-from-scratch issues #57 and #312, PyTorch issue #121595), and even on one machine, equally
# correct implementations consume the random numbers differently. The cell below uses the *same*
# seed for three correct dropouts.
#
# 哪些元素被丢弃取决于随机数生成器，而它并不是唯一确定的。CPU 和 CUDA 使用不同的生成器算法，随机数流可能随 PyTorch 版本和操作系统而变（书中的 dropout 例子在不同机器上打印出不同的矩阵：LLMs-from-scratch 的 issue #57 和 #312，PyTorch issue #121595）；即使在同一台机器上，同样正确的实现消耗随机数的方式也不同。下面的单元格让三个正确的 dropout 使用 *同一个* 种子。

# %%
big = torch.ones(100, 100)
ours = attention_dropout(big, 0.5, generator=torch.Generator().manual_seed(7)) != 0
bernoulli = torch.bernoulli(torch.full_like(big, 0.5), generator=torch.Generator().manual_seed(7)) != 0
torch.manual_seed(7)
pytorch = F.dropout(big, 0.5, training=True) != 0
for name, mask in [("torch.bernoulli", bernoulli), ("F.dropout", pytorch)]:
    print(f"attention_dropout vs {name:15}: same decision on {(mask == ours).float().mean():.1%} of entries"
          f" | kept: {ours.float().mean():.3f} vs {mask.float().mean():.3f}")

# %% [markdown]
# All three keep about half of the entries, yet their masks differ. `torch.bernoulli` reads the
# same uniform numbers but keeps an entry when its number is *below* $1 - p$, so with $p = 0.5$ its
# mask is the exact complement of ours; `F.dropout` uses the generator its own way and agrees with
# ours on about half of the decisions, as two independent masks would. So tests of dropout (this course's hidden tests
# included) never compare masks. They check what every correct dropout must satisfy: the kept
# fraction is close to $1 - p$ on a large tensor, every survivor equals its input divided by
# $1 - p$, `p = 0` and evaluation mode are the identity, and a bad `p` raises.
#
# 三者都保留了大约一半的元素，但它们的掩码各不相同。`torch.bernoulli` 读取的是同样的均匀随机数，但在随机数 *小于* $1 - p$ 时保留元素，所以 $p = 0.5$ 时它的掩码恰好是我们的掩码的补集；`F.dropout` 以自己的方式使用生成器，与我们的决定大约一半相同，正如两个相互独立的掩码那样。所以对 dropout 的测试（包括本课程的隐藏测试）从不比较掩码，而是检查每个正确的 dropout 都必须满足的性质：在大张量上保留的比例接近 $1 - p$，每个保留的元素等于输入除以 $1 - p$，`p = 0` 和评估模式是恒等映射，非法的 `p` 会抛出异常。

# %% [markdown]
# ## nn.Dropout follows train() and eval() · nn.Dropout 跟随 train() 和 eval()
#
# Inside a model, dropout is an `nn.Dropout(p)` layer. Every module has a `training` flag;
# `model.train()` and `model.eval()` set it on the module and all its children, and `nn.Dropout`
# reads it. So one call to `model.eval()` switches off every dropout layer in a network.
#
# 在模型内部，dropout 是一个 `nn.Dropout(p)` 层。每个模块都有一个 `training` 标志；`model.train()` 和 `model.eval()` 会在模块及其所有子模块上设置它，而 `nn.Dropout` 会读取它。因此只需调用一次 `model.eval()`，就能关掉网络中所有的 dropout 层。

# %%
layer = nn.Dropout(0.5)
x = torch.ones(2, 8)
torch.manual_seed(0)
print("train():", layer.train()(x))
print("eval(): ", layer.eval()(x))


# %% [markdown]
# ### Exercise 2 · `CausalAttention` · 练习 2
#
# The book's compact causal attention class: notebook 04's `CausalSelfAttention` plus dropout.
# `__init__(d_in, d_out, context_length, dropout, qkv_bias=False)` creates `W_query`, `W_key`,
# `W_value` (`nn.Linear(d_in, d_out, bias=qkv_bias)`), an `nn.Dropout(dropout)` layer and the buffer
# `mask` (True, or 1, = blocked). `forward(x)` for `x` of shape `(B, T, d_in)`, `T <= context_length`:
# scaled scores, mask sliced to `[:T, :T]` and filled with `-inf`, softmax, **dropout on the
# weights**, then weights times values. Here `nn.Dropout` is what you should use: it turns itself off
# in `eval()`. `F.scaled_dot_product_attention(..., dropout_p=p)` would do this whole exercise (masked
# attention with dropout on the weights), so it is not allowed here. You may subclass notebook 04's
# `CausalSelfAttention` (imported above) and write your own `forward`: reusing an earlier notebook's
# class is fine; handing in `utils.dropout.CausalAttention`, this exercise's own reference, is not.
#
# 书中紧凑的因果注意力类：笔记本 04 的 `CausalSelfAttention` 加上 dropout。`__init__(d_in, d_out, context_length, dropout, qkv_bias=False)` 创建 `W_query`、`W_key`、`W_value`（`nn.Linear(d_in, d_out, bias=qkv_bias)`）、一个 `nn.Dropout(dropout)` 层和缓冲区 `mask`（True 或 1 = 被屏蔽）。对形状为 `(B, T, d_in)`、`T <= context_length` 的 `x`，`forward(x)` 依次计算：缩放后的分数，把掩码切成 `[:T, :T]` 并填入 `-inf`，softmax，**对权重做 dropout**，再用权重乘以值。这里应该使用 `nn.Dropout`：它在 `eval()` 中会自动关闭。`F.scaled_dot_product_attention(..., dropout_p=p)` 会完成整个练习（带掩码的注意力，并对权重做 dropout），所以这里不允许使用它。你可以继承笔记本 04 的 `CausalSelfAttention`（上面已导入）并编写自己的 `forward`：复用之前笔记本中的类是可以的；交上本练习自己的参考实现 `utils.dropout.CausalAttention` 则不行。
#
# <!-- rules: CausalAttention -->
#
# #### Rules that grading checks · 评分检查的规则 (`CausalAttention`)
#
# - Not allowed: `F.scaled_dot_product_attention` (with `dropout_p` it does this exercise's whole job: masked attention with dropout on the weights).
# - Not graded (the caller guarantees it): the input has at most `context_length` tokens.
# - Graded in float32, float64 and bfloat16: the layer moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - It holds an `nn.Dropout(dropout)` layer that acts on the attention weights, so `train()` and `eval()` switch it (deterministic in `eval()`); the mask is a buffer named `mask`.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.scaled_dot_product_attention`（配合 `dropout_p`，它会完成本练习的全部工作：带掩码的注意力，并对权重做 dropout）。
# - 不评分（由调用者保证）：输入的词元数不超过 `context_length`。
# - 在 float32、float64、bfloat16 下评分：用 `.to(dtype)` 转换后的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 它包含一个作用在注意力权重上的 `nn.Dropout(dropout)` 层，这样 `train()` 和 `eval()` 会开关它（`eval()` 中是确定性的）；掩码是名为 `mask` 的缓冲区。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "CausalAttention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class CausalAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, dropout, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.dropout = nn.Dropout(dropout)
        self.register_buffer("mask", torch.ones(context_length, context_length, dtype=torch.bool).triu(1))
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        T = x.shape[-2]
        queries, keys, values = self.W_query(x), self.W_key(x), self.W_value(x)   # (B, T, d_out)
        scores = queries @ keys.transpose(-2, -1) / keys.shape[-1] ** 0.5         # (B, T, T)
        weights = torch.softmax(scores.masked_fill(self.mask[:T, :T], float("-inf")), dim=-1)
        return self.dropout(weights) @ values
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_CausalAttention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from torch import nn
from autograder.checks import expect, expect_close

from autograder.checks import nb05

with nb05.as_graded(CausalAttention):
    ca = CausalAttention(2, 2, context_length=4, dropout=0.5)
    expect("mask" in dict(ca.named_buffers()), "The mask should be a buffer named mask.", "掩码应是名为 mask 的缓冲区。")
    expect(any(isinstance(m, nn.Dropout) for m in ca.modules()),
           "CausalAttention should hold an nn.Dropout layer.", "CausalAttention 应包含一个 nn.Dropout 层。")
    with torch.no_grad():
        for layer in (ca.W_query, ca.W_key, ca.W_value):
            layer.weight.copy_(torch.eye(2))
    x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]])
    ca.eval()
    out = ca(x)
    expect(torch.equal(out, ca(x)), "In eval() mode the output should be deterministic.", "在 eval() 模式下输出应是确定性的。")
    w = torch.softmax(torch.tensor([0.0, 1.0]) / 2 ** 0.5, dim=-1)
    expect_close(out[0, :2], torch.stack([x[0, 0], w @ x[0, :2]]),
                 "In eval() mode CausalAttention should equal causal attention without dropout.",
                 "在 eval() 模式下 CausalAttention 应等于没有 dropout 的因果注意力。")
    print("✓ CausalAttention")

# %% nbgrader={"grade": true, "grade_id": "test_CausalAttention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb05
nb05.check_CausalAttention(CausalAttention)
### END HIDDEN TESTS

# %% [markdown]
# The book's batch: the sentence twice, shape `(2, 6, 3)`. In `eval()` the module equals notebook
# 04's `CausalSelfAttention` with the same weights; in `train()` two calls give different outputs.
#
# 书中的批次：同一句话两次，形状 `(2, 6, 3)`。在 `eval()` 中，这个模块与权重相同的笔记本 04 的 `CausalSelfAttention` 相等；在 `train()` 中，两次调用给出不同的输出。

# %%
batch = torch.stack((inputs, inputs), dim=0)
torch.manual_seed(123)
ca = CausalAttention(3, 2, context_length=batch.shape[1], dropout=0.5)
reference = CausalSelfAttention(3, 2, context_length=6)
reference.load_state_dict(ca.state_dict(), strict=False)   # same W_query, W_key, W_value
print("context_vecs.shape:", ca(batch).shape)
with torch.no_grad():
    ca.eval()
    print("eval(): equals CausalSelfAttention:", torch.allclose(ca(batch), reference(batch)),
          "| deterministic:", torch.equal(ca(batch), ca(batch)))
    ca.train()
    print("train(): two calls equal:", torch.equal(ca(batch), ca(batch)))

# %% [markdown]
# ## Seeing the dropped weights · 看见被丢弃的权重
#
# A module returns context vectors, not weights. To look inside, feed one-hot tokens (`x = I`) and
# make the value map the identity: then each context vector *is* that query's row of weights. Left:
# the weights in `eval()`; right: one training step, where some of each row's weights are gone and
# the survivors are doubled. Repeating the identity twice in the value map, $[I; I]$, gives two
# copies of the weights: dropout on the weights keeps both halves equal, while dropout on the
# context vectors would drop entries of the two halves independently. That is how grading tells them
# apart without looking at any particular mask.
#
# 模块返回的是上下文向量，而不是权重。想看到内部，就输入 one-hot 词元（`x = I`），并让值映射成为恒等映射：这样每个上下文向量 *就是* 该查询的那一行权重。左图：`eval()` 中的权重；右图：一个训练步，每一行都有一些权重消失，保留下来的权重翻倍。把值映射中的单位矩阵重复两次，$[I; I]$，就得到权重的两份拷贝：对权重做 dropout 时两半保持相等，而对上下文向量做 dropout 时两半的元素会被独立地丢弃。评分正是这样在不看任何具体掩码的情况下区分它们的。

# %%
T = 6
probe = CausalAttention(T, 2 * T, context_length=T, dropout=0.5)
with torch.no_grad():
    probe.W_query.weight.copy_(torch.cat([torch.eye(T), torch.eye(T)]) * 2)
    probe.W_key.weight.copy_(torch.cat([torch.eye(T), torch.eye(T)]).flip(0))
    probe.W_value.weight.copy_(torch.cat([torch.eye(T), torch.eye(T)]))   # [I; I]
    one_hot = torch.eye(T).unsqueeze(0)                                    # (1, T, T)
    seen_eval = probe.eval()(one_hot)[0]
    torch.manual_seed(3)
    seen_train = probe.train()(one_hot)[0]
print("both halves equal in train():", torch.equal(seen_train[:, :T], seen_train[:, T:]))
fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
tokens = [f"token {i}" for i in range(T)]
attention_heatmap(seen_eval[:, :T], tokens, tokens, ax=left, title="eval(): the causal weights")
attention_heatmap(seen_train[:, :T], tokens, tokens, ax=right, title="train(), p = 0.5: dropped or doubled")
plt.tight_layout(); plt.show()

# %% [markdown]
# ## What comes next · 接下来
#
# Notebook 06 runs several of these `CausalAttention` heads side by side, first as a list of modules
# and then as one efficient multi-head layer, the form GPT-2 and every later model uses.
#
# 笔记本 06 会让多个这样的 `CausalAttention` 头并排运行：先是一个模块列表，再是一个高效的多头层，也就是 GPT-2 及之后所有模型使用的形式。
#
# Sources: S. Raschka, *Build a Large Language Model (From Scratch)*, sections 3.5.2 (dropout on the
# attention weights, the $p = 0.5$ demo, the note on OS-dependent outputs) and 3.5.3 (the compact
# `CausalAttention` class); N. Srivastava, G. Hinton, A. Krizhevsky, I. Sutskever and
# R. Salakhutdinov, *Dropout: A Simple Way to Prevent Neural Networks from Overfitting*, JMLR 15
# (2014); A. Radford, K. Narasimhan, T. Salimans, I. Sutskever, *Improving Language Understanding by
# Generative Pre-Training* (2018), section 4.1 (dropout rate 0.1, attention dropout included); Hugging
# Face Transformers' `GPT2Config` (`attn_pdrop`) and A. Karpathy's nanoGPT `model.py` (dropout on the
# attention weights); A. Vaswani et al., *Attention Is All You Need* (2017), section 5.4 (residual
# dropout); PyTorch issue #121595 and LLMs-from-scratch issues #57 and #312 (dropout masks differ across
# platforms).
#
# 来源：S. Raschka，《从零构建大语言模型》第 3.5.2 节（注意力权重上的 dropout、$p = 0.5$ 的演示、输出随操作系统不同的说明）和第 3.5.3 节（紧凑的 `CausalAttention` 类）；N. Srivastava、G. Hinton、A. Krizhevsky、I. Sutskever 和 R. Salakhutdinov，《Dropout: A Simple Way to Prevent Neural Networks from Overfitting》，JMLR 15（2014）；A. Radford、K. Narasimhan、T. Salimans、I. Sutskever，《Improving Language Understanding by Generative Pre-Training》（2018）第 4.1 节（dropout 比例 0.1，包括注意力 dropout）；Hugging Face Transformers 的 `GPT2Config`（`attn_pdrop`）和 A. Karpathy 的 nanoGPT `model.py`（注意力权重上的 dropout）；A. Vaswani 等，《Attention Is All You Need》（2017）第 5.4 节（残差 dropout）；PyTorch issue #121595 以及 LLMs-from-scratch 的 issue #57 和 #312（dropout 掩码在不同平台上不同）。
