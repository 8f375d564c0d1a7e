# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 13 · Sliding windows, attention sinks and DeepSeek Sparse Attention · 滑动窗口、注意力 sink 与 DeepSeek 稀疏注意力
#
# Every attention so far reads every earlier key. That is what makes long contexts expensive: a
# decode step reads the whole cache, and the cache grows with the text. This notebook follows what
# the field did after DeepSeek-V3. A **sliding window** reads only the last `window` keys, so its
# cache stops growing (Mistral, gpt-oss on every other layer, DeepSeek-V4 in every block).
# **Attention sinks** give each head a place to put weight it does not want to spend (gpt-oss).
# **DeepSeek Sparse Attention** (DeepSeek-V3.2) keeps every key but lets a cheap *lightning indexer*
# choose, for each query, the 2048 keys that MLA (notebook 09) will read.
#
# 到目前为止，每种注意力都会读取之前的所有键。这正是长上下文昂贵的原因：一个解码步骤要读取整个缓存，而缓存随文本增长。本笔记本沿着 DeepSeek-V3 之后业界的做法展开。**滑动窗口** 只读取最后 `window` 个键，因此缓存不再增长（Mistral、gpt-oss 的每隔一层、DeepSeek-V4 的每个块）。**注意力 sink** 给每个头一个地方，存放它不想花掉的权重（gpt-oss）。**DeepSeek 稀疏注意力**（DeepSeek-V3.2）保留所有的键，但让一个廉价的 *闪电索引器* 为每个查询挑出 MLA（笔记本 09）要读取的 2048 个键。

# %%
import math
import os

import matplotlib.pyplot as plt
import torch
from torch import nn

from utils.benchmark import demo_device, order_warning, timed
from utils.causal import causal_mask
from utils.dsa import DSAConfig
from utils.kv_cache import KVCache
from utils.mla import MultiHeadLatentAttention
from utils.rope import apply_rope

GRADING = bool(os.getenv("NBGRADER_EXECUTION"))  # grading measures shorter contexts
DEVICE = demo_device()  # the timing cells run on a GPU when one is present (grading: the CPU)

# %% [markdown]
# ## 1. The sliding-window mask · 滑动窗口掩码
#
# With a window of `window` positions, the query at absolute position $p$ sees the keys at
# $p - \text{window} + 1, \dots, p$: itself and the `window - 1` before it. Like notebook 04's causal
# mask, the mask is boolean, True where a query may NOT attend, and bottom-right aligned: with
# `num_queries < num_keys` the queries are the last `num_queries` positions, so query $i$ sits at
# $p = i + \text{num\_keys} - \text{num\_queries}$. A window as long as the text is the causal mask.
#
# 窗口长度为 `window` 时，绝对位置 $p$ 的查询看到位置 $p - \text{window} + 1, \dots, p$ 的键：它自己和它之前的 `window - 1` 个。与笔记本 04 的因果掩码一样，掩码是布尔型，在查询不能关注的位置为 True，并且右下对齐：当 `num_queries < num_keys` 时，查询是最后 `num_queries` 个位置，所以查询 $i$ 位于 $p = i + \text{num\_keys} - \text{num\_queries}$。窗口与文本一样长时，它就是因果掩码。

# %% [markdown]
# ### Exercise 1 · `sliding_window_mask` · 练习 1
#
# Return the `(num_queries, num_keys)` boolean mask, True = blocked.
#
# 返回形状为 `(num_queries, num_keys)` 的布尔掩码，True 表示屏蔽。
#
# <!-- rules: sliding_window_mask -->
#
# #### Rules that grading checks · 评分检查的规则 (`sliding_window_mask`)
#
# - Not graded (the caller guarantees it): num_queries <= num_keys and window >= 1.
# - dtype: the result is `torch.bool`.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：num_queries <= num_keys 且 window >= 1。
# - dtype：结果是 `torch.bool`。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "sliding_window_mask", "locked": false, "schema_version": 3, "solution": true, "task": false}
def sliding_window_mask(num_queries, num_keys, window):
    ### BEGIN SOLUTION
    p = torch.arange(num_keys - num_queries, num_keys)[:, None]  # absolute query positions
    j = torch.arange(num_keys)[None, :]
    return (j > p) | (j <= p - window)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_sliding_window_mask", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

m = sliding_window_mask(4, 4, 2)
expect(m.dtype == torch.bool and m.shape == (4, 4), "The mask is a (num_queries, num_keys) boolean tensor.",
       "掩码是形状为 (num_queries, num_keys) 的布尔张量。", f"{m.dtype}, {tuple(m.shape)}")
expect((~m).sum(1).tolist() == [1, 2, 2, 2], "With window 2 each query sees itself and the position before it.",
       "窗口为 2 时，每个查询看到它自己和它之前的一个位置。", f"open per row {(~m).sum(1).tolist()}")
print("✓ sliding_window_mask")

# %% nbgrader={"grade": true, "grade_id": "test_sliding_window_mask_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb13
nb13.check_sliding_window_mask(sliding_window_mask)
### END HIDDEN TESTS

# %% [markdown]
# The plot shows the causal mask and a window of 4 over 12 tokens, white where a query may look.
# The window is a band along the diagonal: every row has at most 4 open keys, however long the text.
#
# 下图展示 12 个词元上的因果掩码和窗口为 4 的掩码，白色是查询可以看的位置。窗口是沿对角线的一条带：无论文本多长，每行最多有 4 个可见的键。

# %%
fig, axes = plt.subplots(1, 2, figsize=(7, 3.4))
for ax, (title, mask) in zip(axes, (("causal", causal_mask(12)), ("sliding window, window=4", sliding_window_mask(12, 12, 4)))):
    ax.imshow(~mask, cmap="gray", vmin=0, vmax=1)
    ax.set_title(title); ax.set_xlabel("key position"); ax.set_ylabel("query position")
plt.tight_layout(); plt.show()
print("open keys per row, window 4:", (~sliding_window_mask(12, 12, 4)).sum(1).tolist())

# %% [markdown]
# ## A cache that holds `window` positions · 只保存 `window` 个位置的缓存
#
# Keys older than the window will never be read again, so the cache can forget them: a ring buffer
# of `window` slots, where position $p$ lives in slot $p \bmod \text{window}$. Two details are where
# published code has broken. First, a chunk of several new tokens (a prompt, or speculative
# decoding) needs, for its first query, the `window - 1` positions *before* the chunk; a cache that
# returns only the last `window` positions of old and new together drops keys (rasbt's
# LLMs-from-scratch, issue #1008, fixed by PR #1013). Second, once the ring wraps, its slots are not
# in position order, and the positions keep counting: RoPE rotates the next token by its real
# position, not by the number of positions stored.
#
# 比窗口更早的键再也不会被读取，所以缓存可以忘掉它们：一个有 `window` 个槽的环形缓冲区，位置 $p$ 存放在槽 $p \bmod \text{window}$ 中。已发表的代码恰恰在两个细节上出过错。第一，一块多个新词元（提示词，或推测解码）中的第一个查询需要这一块 *之前* 的 `window - 1` 个位置；如果缓存只返回新旧合起来的最后 `window` 个位置，就会丢掉键（rasbt 的 LLMs-from-scratch，issue #1008，由 PR #1013 修复）。第二，环形缓冲区绕回之后，它的槽位不再按位置排序，而位置仍在继续计数：RoPE 按下一个词元真实的位置旋转它，而不是按存储的位置数。

# %% [markdown]
# ### Exercise 2 · `RollingKVCache` · 练习 2
#
# `__init__(batch_size, window, num_kv_heads, head_dim, dtype, device)` allocates storage for
# `window` positions; `seq_len` counts the positions seen. `update(k_new, v_new)` takes
# `(B, num_kv_heads, T_new, head_dim)` and returns, in position order, up to `window - 1` positions
# before the new ones and then all the new ones (a chunk longer than the window included), for the
# keys and for the values; `reset()` starts a new text.
#
# `__init__(batch_size, window, num_kv_heads, head_dim, dtype, device)` 为 `window` 个位置分配存储；`seq_len` 统计见过的位置数。`update(k_new, v_new)` 接收 `(B, num_kv_heads, T_new, head_dim)`，按位置顺序返回新位置之前最多 `window - 1` 个位置，再加上所有新位置（包括比窗口更长的块），键和值都如此；`reset()` 开始一段新文本。
#
# <!-- rules: RollingKVCache -->
#
# #### Rules that grading checks · 评分检查的规则 (`RollingKVCache`)
#
# - Graded in float32 and float64: the cache keeps the dtype it is built with (`dtype=`).
# - Device: the result is created on the `device` argument (pass `device=device` to what you build).
# - It holds storage for `window` positions only, whatever the length of the text.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 在 float32、float64 下评分：缓存保持构造时指定的 dtype（`dtype=`）。
# - 设备：结果创建在参数 `device` 指定的设备上（把 `device=device` 传给你构造的张量）。
# - 无论文本多长，它只为 `window` 个位置保存存储。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "RollingKVCache", "locked": false, "schema_version": 3, "solution": true, "task": false}
class RollingKVCache:
    def __init__(self, batch_size, window, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        ### BEGIN SOLUTION
        self.window = window
        self.k = torch.zeros(batch_size, num_kv_heads, window, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.seq_len = 0
        ### END SOLUTION

    def update(self, k_new, v_new):
        ### BEGIN SOLUTION
        W, T = self.window, k_new.shape[2]
        kept = min(W - 1, self.seq_len)
        old = torch.arange(self.seq_len - kept, self.seq_len) % W  # slots of the kept positions, oldest first
        k = torch.cat((self.k[:, :, old], k_new.to(self.k.dtype)), dim=2)
        v = torch.cat((self.v[:, :, old], v_new.to(self.v.dtype)), dim=2)
        n = min(T, W)
        new = torch.arange(self.seq_len + T - n, self.seq_len + T) % W
        self.k[:, :, new], self.v[:, :, new] = k[:, :, -n:], v[:, :, -n:]
        self.seq_len += T
        return k, v
        ### END SOLUTION

    def reset(self):
        ### BEGIN SOLUTION
        self.seq_len = 0
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_RollingKVCache", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

from autograder.checks import nb13

with nb13.as_graded(RollingKVCache):
    cache = RollingKVCache(1, 3, 1, 1)
    positions = torch.arange(6.0).view(1, 1, 6, 1)
    got = [cache.update(positions[:, :, t:t + 1], positions[:, :, t:t + 1])[0].flatten().tolist() for t in range(4)]
    expect(got == [[0.0], [0.0, 1.0], [0.0, 1.0, 2.0], [1.0, 2.0, 3.0]] and cache.seq_len == 4,
           "One token at a time with window 3: each step returns the last 2 positions and the new one, in order.",
           "窗口为 3、每次一个词元：每一步按顺序返回最后 2 个位置和新位置。", f"got {got}, seq_len {cache.seq_len}")
    print("✓ RollingKVCache")

# %% nbgrader={"grade": true, "grade_id": "test_RollingKVCache_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb13
nb13.check_RollingKVCache(RollingKVCache)
### END HIDDEN TESTS

# %% [markdown]
# Your cache in a small windowed language model (`utils.sliding_window.WindowedLM`: RoPE, window 5,
# random weights). Greedy tokens from cached decoding, with the prompt fed whole or in chunks of 3,
# must equal the tokens of recomputing the whole text at every step with the sliding mask. The
# prompt is longer than the window, so the window edge and the wrap are crossed.
#
# 把你的缓存放进一个小的窗口语言模型（`utils.sliding_window.WindowedLM`：RoPE，窗口 5，随机权重）。用缓存解码得到的贪心词元（提示词一次输入或按每块 3 个输入）必须与每一步都用滑动掩码重新计算整个文本得到的词元相同。提示词比窗口长，因此会跨过窗口边缘和绕回。

# %%
from utils.sliding_window import WindowedLM, generate

torch.manual_seed(0)
lm = WindowedLM(vocab_size=50, d_model=32, num_heads=4, n_layers=2, window=5).eval()
prompt = torch.randint(0, 50, (2, 11))
full = generate(lm, prompt, 12, use_cache=False)
for chunk in (None, 3):
    cached = generate(lm, prompt, 12, chunk=chunk, cache_cls=RollingKVCache)
    print(f"prompt in chunks of {chunk or prompt.shape[1]}: same tokens as full recomputation: {torch.equal(cached, full)}")

# %% [markdown]
# The memory, measured from the tensors the cache holds after 1K and 16K positions (8 KV heads of
# 64, window 128, float32), against notebook 07's cache, which must be allocated for the whole text:
#
# 内存，直接取自缓存在 1K 和 16K 个位置之后持有的张量（8 个宽度为 64 的键值头，窗口 128，float32），并与笔记本 07 的缓存比较，后者必须为整个文本分配空间：

# %%
def tensor_bytes(obj):
    return sum(t.numel() * t.element_size() for t in vars(obj).values() if isinstance(t, torch.Tensor))


rolling, full_cache = {}, {}
for n in (1024, 16384):
    cache = RollingKVCache(1, 128, 8, 64)
    for s in range(0, n, 512):
        k = torch.randn(1, 8, 512, 64)
        cache.update(k, k)
    rolling[n], full_cache[n] = tensor_bytes(cache), tensor_bytes(KVCache(1, n, 8, 64))
    print(f"{n:>6} positions: rolling cache {rolling[n]:>10,} bytes, full KV cache {full_cache[n]:>12,} bytes")
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(list(rolling), [b / 2**20 for b in full_cache.values()], "o-", label="full KV cache (07)")
ax.plot(list(rolling), [b / 2**20 for b in rolling.values()], "o-", label="rolling, window 128")
ax.set_xlabel("positions seen"); ax.set_ylabel("MiB"); ax.legend(); plt.tight_layout(); plt.show()

# %% [markdown]
# ## 2. Attention sinks · 注意力 sink
#
# A softmax row always sums to 1: a head that finds nothing relevant must still spend its weight
# somewhere. Trained models dump it on the first tokens of the text (Xiao et al., *Efficient
# Streaming Language Models with Attention Sinks*, 2023, who named them sinks), which is why a
# sliding window that evicts those first tokens can break a model, and why StreamingLLM keeps the
# first 4 tokens in the cache. gpt-oss makes the sink explicit: one learned logit $s_h$ per head joins
# every row of scaled scores as an extra column before the softmax and is dropped after it,
#
# softmax 的一行总是和为 1：一个找不到相关内容的头仍然必须把权重花在某处。训练好的模型会把它堆在文本最前面的几个词元上（Xiao 等人，《Efficient Streaming Language Models with Attention Sinks》，2023，他们称之为 sink），这就是为什么逐出这些开头词元的滑动窗口可能让模型失效，也是 StreamingLLM 在缓存中保留前 4 个词元的原因。gpt-oss 把 sink 显式化：每个头一个可学习的 logit $s_h$，在 softmax 之前作为额外一列加入每行缩放后的分数，并在 softmax 之后去掉，
#
# $$w_{t,j} = \frac{e^{a_{t,j}}}{e^{s_h} + \sum_{j'} e^{a_{t,j'}}}, \qquad a_{t,j} = \frac{q_t \cdot k_j}{\sqrt{d}},$$
#
# so a row's weights sum to less than 1, and a head can attend to (almost) nothing. A row whose keys
# are all blocked gives 0: all its weight is on the sink.
#
# 因此一行权重之和小于 1，一个头可以（几乎）什么都不关注。所有键都被屏蔽的一行输出 0：它全部的权重都在 sink 上。

# %% [markdown]
# ### Exercise 3 · `attention_with_sinks` · 练习 3
#
# `q (B, H, T_q, d)`, `k (B, H, T_k, d)`, `v (B, H, T_k, d_v)`, `sinks (H,)`; `mask` is None,
# `(T_q, T_k)` or `(B, 1, T_q, T_k)`, True = blocked. Return `(B, H, T_q, d_v)`, in the dtype of the
# inputs. The sinks are learned parameters: compute with the `sinks` tensor itself, so that a
# gradient reaches it.
#
# `q (B, H, T_q, d)`、`k (B, H, T_k, d)`、`v (B, H, T_k, d_v)`、`sinks (H,)`；`mask` 为 None、`(T_q, T_k)` 或 `(B, 1, T_q, T_k)`，True 表示屏蔽。返回 `(B, H, T_q, d_v)`，dtype 与输入相同。sink 是可学习的参数：直接用 `sinks` 张量本身计算，这样梯度才能传到它。
#
# <!-- rules: attention_with_sinks -->
#
# #### Rules that grading checks · 评分检查的规则 (`attention_with_sinks`)
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

# %% nbgrader={"grade": false, "grade_id": "attention_with_sinks", "locked": false, "schema_version": 3, "solution": true, "task": false}
def attention_with_sinks(q, k, v, sinks, mask=None):
    ### BEGIN SOLUTION
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    sink = sinks.view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
    weights = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]
    return weights @ v
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attention_with_sinks", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close

from autograder.checks import nb13

with nb13.as_graded(attention_with_sinks):
    q, k, v = torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 3, 4), torch.ones(1, 1, 3, 2)
    out = attention_with_sinks(q, k, v, torch.zeros(1))
    expect_close(out, torch.full((1, 1, 1, 2), 0.75), "Three equal scores and a sink of 0: each of the four columns gets 1/4, the values get 3/4.",
                 "三个相等的分数和一个为 0 的 sink：四列各得 1/4，值得到 3/4。")
    print("✓ attention_with_sinks")

# %% nbgrader={"grade": true, "grade_id": "test_attention_with_sinks_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb13
nb13.check_attention_with_sinks(attention_with_sinks)
### END HIDDEN TESTS

# %% [markdown]
# What the sink changes in the weights: the total weight a row gives its keys (keys of value 1) as
# the sink logit grows, for a row whose scores are all 0 over 8 keys. It is $8 / (8 + e^{s})$: the
# sink takes over once $e^{s}$ passes the sum of the keys' exponentials. Blocking a row entirely
# gives exactly 0.
#
# sink 在权重上改变了什么：对一行在 8 个键上分数全为 0 的情况，随着 sink logit 增大，这一行分给键的总权重（键的值为 1）。它等于 $8 / (8 + e^{s})$：一旦 $e^{s}$ 超过各键指数之和，sink 就占了上风。完全屏蔽一行则正好得到 0。

# %%
q, k, v = torch.zeros(1, 1, 1, 4), torch.zeros(1, 1, 8, 4), torch.ones(1, 1, 8, 1)
logits = torch.linspace(-4, 8, 25)
totals = [attention_with_sinks(q, k, v, s.view(1)).item() for s in logits]
fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(logits, totals, "o-", label="measured"); ax.plot(logits, 8 / (8 + logits.exp()), "--", label="8 / (8 + e^s)")
ax.set_xlabel("sink logit s"); ax.set_ylabel("weight on the keys"); ax.legend(); plt.tight_layout(); plt.show()
print(f"sink 0: {totals[8]:.4f} (8/9 = {8 / 9:.4f}); sink ln 8: {attention_with_sinks(q, k, v, torch.tensor([math.log(8)])).item():.4f}")
print("fully blocked row:", attention_with_sinks(q, k, v, torch.zeros(1), torch.ones(1, 8, dtype=torch.bool)).item())

# %% [markdown]
# ## 3. DeepSeek Sparse Attention · DeepSeek 稀疏注意力
#
# DeepSeek-V3.2-Exp keeps V3's MLA and adds a **lightning indexer** in front of it. For the query
# token $t$ and every earlier position $s$ the indexer computes a cheap score with 64 small heads
# (width 128) over **one key per token shared by all index heads**,
#
# DeepSeek-V3.2-Exp 保留了 V3 的 MLA，并在它前面加了一个 **闪电索引器**。对查询词元 $t$ 和每个更早的位置 $s$，索引器用 64 个小头（宽 128）计算一个廉价的分数，这些头 **共享每个词元的同一个键**，
#
# $$I_{t,s} = \sum_h w_{t,h}\, \mathrm{ReLU}(q_{t,h} \cdot k_s), \qquad w_{t} = \texttt{weights\_proj}(x_t)\cdot 64^{-1/2}\cdot 128^{-1/2}.$$
#
# In the official code (`inference/model.py`, `Indexer`): `wq_b` maps MLA's query latent
# `qr = q_norm(wq_a(x))` to 64 heads of 128; `wk` maps `x` to one key of 128, then `k_norm` (a
# LayerNorm with a bias); `weights_proj` maps `x` to one weight per head. RoPE acts on the first
# `qk_rope_head_dim` (64) features: the indexer's heads are `[pe | nope]`, the reverse of MLA's
# `[nope | pe]`. Then each query keeps its `index_topk = 2048` best positions, and MLA attends to
# those only: the same selection for all 128 MLA heads of that query. The indexer is cheap because
# its key is 128 numbers (FP8 in V3.2) against MLA's 576, and its heads are ReLU-weighted dot
# products without a softmax.
#
# 在官方代码（`inference/model.py`，`Indexer`）中：`wq_b` 把 MLA 的查询潜在向量 `qr = q_norm(wq_a(x))` 映射为 64 个宽 128 的头；`wk` 把 `x` 映射为一个宽 128 的键，再经过 `k_norm`（带偏置的 LayerNorm）；`weights_proj` 把 `x` 映射为每个头一个权重。RoPE 作用于前 `qk_rope_head_dim`（64）个特征：索引器的头是 `[pe | nope]`，与 MLA 的 `[nope | pe]` 相反。然后每个查询保留它最好的 `index_topk = 2048` 个位置，MLA 只关注这些位置：同一查询的所有 128 个 MLA 头使用同一个选择。索引器之所以便宜，是因为它的键只有 128 个数（V3.2 中为 FP8），而 MLA 是 576 个，并且它的头是经 ReLU 加权的点积，没有 softmax。

# %% [markdown]
# ### The RoPE layout of the indexer, a bug with a story · 索引器的 RoPE 布局：一个有故事的 bug
#
# MLA rotates adjacent pairs $(2i, 2i+1)$ (interleaved, notebook 08). The indexer's weights expect
# half-split pairs $(i, i + d/2)$. The first released inference code applied the indexer's RoPE
# interleaved, like MLA's. On 2025-11-17 DeepSeek added a note to the repository's README (the
# indexer's RoPE input "requires a non-interleaved layout, whereas RoPE in the MLA module expects an
# interleaved layout") and, in commit 8631a81 of `deepseek-ai/DeepSeek-V3.2-Exp`, passes
# `interleaved=False` for the indexer: a clone older than that still shows the interleaved call.
# Serving engines that had copied the released code fixed it in the following days and weeks (the
# Sources list where). Nothing crashes with the wrong layout: the indexer simply selects other keys.
# This notebook uses the corrected layout.
#
# MLA 旋转相邻的一对 $(2i, 2i+1)$（交错布局，笔记本 08）。索引器的权重要求前后两半配对 $(i, i + d/2)$。首次发布的推理代码像 MLA 一样以交错方式对索引器施加 RoPE。2025-11-17，DeepSeek 在仓库的 README 中加了一条说明（索引器的 RoPE 输入"需要非交错布局，而 MLA 模块中的 RoPE 需要交错布局"），并在 `deepseek-ai/DeepSeek-V3.2-Exp` 的提交 8631a81 中对索引器传入 `interleaved=False`：比这更早的克隆仍然是交错的调用。照抄了发布代码的推理引擎在随后几天到几周内修复了它（来源中列出了在哪里）。用错误的布局什么也不会崩溃：索引器只是选出了别的键。本笔记本使用更正后的布局。

# %% [markdown]
# ### Exercise 4 · `LightningIndexer` · 练习 4
#
# `__init__(self, cfg)` with a `DSAConfig` (09's `MLAConfig` fields plus `index_n_heads`,
# `index_head_dim`, `index_topk`): `wq_b` (`q_lora_rank -> index_n_heads * index_head_dim`), `wk`
# (`dim -> index_head_dim`), `k_norm = nn.LayerNorm(index_head_dim, eps=1e-6)`, `weights_proj`
# (`dim -> index_n_heads`), all linear layers without bias. `forward(x, qr, start_pos=0)` returns
# the index scores `(B, T, start_pos + T)`: half-split RoPE (`apply_rope(..., interleaved=False)`) on
# the first `qk_rope_head_dim` features of each query head and of the key, at positions
# `start_pos ...`; keys cached across calls (`start_pos == 0` starts a new text, as in 09); `-inf`
# for positions after each query. No FP8, no Hadamard rotation.
#
# `__init__(self, cfg)` 接收一个 `DSAConfig`（09 的 `MLAConfig` 字段，再加 `index_n_heads`、`index_head_dim`、`index_topk`）：`wq_b`（`q_lora_rank -> index_n_heads * index_head_dim`）、`wk`（`dim -> index_head_dim`）、`k_norm = nn.LayerNorm(index_head_dim, eps=1e-6)`、`weights_proj`（`dim -> index_n_heads`），所有线性层都不带偏置。`forward(x, qr, start_pos=0)` 返回索引分数 `(B, T, start_pos + T)`：在位置 `start_pos ...` 上，对每个查询头和键的前 `qk_rope_head_dim` 个特征施加前后两半配对的 RoPE（`apply_rope(..., interleaved=False)`）；键在多次调用之间缓存（与 09 一样，`start_pos == 0` 开始一段新文本）；每个查询之后的位置为 `-inf`。没有 FP8，也没有 Hadamard 旋转。
#
# <!-- rules: LightningIndexer -->
#
# #### Rules that grading checks · 评分检查的规则 (`LightningIndexer`)
#
# - Graded in float32 and float64: the layer moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 在 float32、float64 下评分：用 `.to(dtype)` 转换后的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "LightningIndexer", "locked": false, "schema_version": 3, "solution": true, "task": false}
class LightningIndexer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        ### BEGIN SOLUTION
        H, d = cfg.index_n_heads, cfg.index_head_dim
        self.wq_b = nn.Linear(cfg.q_lora_rank, H * d, bias=False)
        self.wk = nn.Linear(cfg.dim, d, bias=False)
        self.k_norm = nn.LayerNorm(d, eps=1e-6)
        self.weights_proj = nn.Linear(cfg.dim, H, bias=False)
        self.keys = None
        ### END SOLUTION

    def forward(self, x, qr, start_pos=0):
        ### BEGIN SOLUTION
        cfg = self.cfg
        B, T, _ = x.shape
        H, d, r = cfg.index_n_heads, cfg.index_head_dim, cfg.qk_rope_head_dim
        end = start_pos + T
        positions = torch.arange(start_pos, end, device=x.device)

        def rope_first(t):  # the rope part comes first in the indexer
            return torch.cat([apply_rope(t[..., :r], positions, cfg.rope_theta, interleaved=False), t[..., r:]], dim=-1)

        q = rope_first(self.wq_b(qr).view(B, T, H, d).transpose(1, 2))  # (B, H, T, d)
        k = rope_first(self.k_norm(self.wk(x)))  # (B, T, d), shared by the heads
        self.keys = k if start_pos == 0 else torch.cat([self.keys[:, :start_pos], k], dim=1)
        w = self.weights_proj(x) * (H ** -0.5 * d ** -0.5)  # (B, T, H)
        scores = torch.relu(torch.einsum("bhtd,bsd->bhts", q, self.keys))
        index = torch.einsum("bhts,bth->bts", scores, w)
        return index.masked_fill(causal_mask(T, end, device=x.device), float("-inf"))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_LightningIndexer", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect
from utils.dsa import DSAConfig

from autograder.checks import nb13

with nb13.as_graded(LightningIndexer):
    torch.manual_seed(0)
    cfg = DSAConfig(dim=16, n_heads=2, q_lora_rank=8, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=3,
                    max_seq_len=10, index_n_heads=3, index_head_dim=8, index_topk=4)
    indexer = LightningIndexer(cfg)
    with torch.no_grad():
        scores = indexer(torch.randn(2, 5, 16), torch.randn(2, 5, 8))
    expect(scores.shape == (2, 5, 5), "The index scores have shape (B, T, start_pos + T).", "索引分数的形状是 (B, T, start_pos + T)。",
           f"shape {tuple(scores.shape)}")
    expect(bool(torch.isneginf(scores[:, 0, 1:]).all()) and bool(torch.isfinite(scores[:, -1]).all()),
           "Positions after a query get -inf; the last query scores every position.",
           "查询之后的位置为 -inf；最后一个查询为每个位置打分。")
    print("✓ LightningIndexer")

# %% nbgrader={"grade": true, "grade_id": "test_LightningIndexer_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb13
nb13.check_LightningIndexer(LightningIndexer)
### END HIDDEN TESTS

# %% [markdown]
# The first release's layout, measured: the same weights in your indexer and in `utils.dsa`'s with
# `interleaved_rope=True` (what the first release computed), 64 positions, top-8 per query. The
# cell prints how many of the last query's 8 selected keys the two layouts share, and for how many
# queries with more than 8 candidates the selections differ.
#
# 实测首次发布的布局：同样的权重分别放进你的索引器和 `utils.dsa` 中 `interleaved_rope=True` 的索引器（即首次发布所计算的），64 个位置，每个查询选 top-8。下面的单元格打印两种布局为最后一个查询选出的 8 个键中有几个相同，以及在候选多于 8 个的查询中，有多少个查询的选择不同。

# %%
import utils.dsa

torch.manual_seed(0)
cfg = DSAConfig(dim=64, n_heads=2, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=16, v_head_dim=8,
                max_seq_len=64, index_n_heads=4, index_head_dim=32, index_topk=8)
first_release = utils.dsa.LightningIndexer(cfg, interleaved_rope=True)
mine = LightningIndexer(cfg)
mine.load_state_dict(first_release.state_dict())
x, qr = torch.randn(1, 64, cfg.dim), torch.randn(1, 64, cfg.q_lora_rank)
with torch.no_grad():
    picked = {name: m(x, qr).topk(8, dim=-1).indices[0] for name, m in (("half-split", mine), ("interleaved", first_release))}
shared = len(set(picked["half-split"][-1].tolist()) & set(picked["interleaved"][-1].tolist()))
differ = sum(set(a.tolist()) != set(b.tolist()) for a, b in zip(picked["half-split"][8:], picked["interleaved"][8:]))
print(f"last query: {shared} of 8 selected keys shared; queries 8..63 whose selection differs: {differ} of 56")

# %% [markdown]
# ### Why the official code rotates q and k with a Hadamard matrix · 官方代码为什么用 Hadamard 矩阵旋转 q 和 k
#
# Before quantizing to FP8, V3.2's indexer multiplies both the query heads and the key by a
# Hadamard matrix scaled by $d^{-1/2}$ (`rotate_activation`). That matrix $R$ is orthonormal
# ($R R^\top = I$), so $(Rq) \cdot (Rk) = q \cdot k$: the scores do not change, and this notebook
# leaves the rotation out. It is there for the quantization that follows (notebook 11): one outlier
# feature sets the scale of its whole block of 128 values, and the rotation spreads the outlier over
# all the features, making the block flat. Whether a flat block quantizes better depends on the
# format: int8's levels are evenly spaced, FP8's are floating-point, fine near 0 and coarse near the
# top. The cell checks the dot product, measures how flat the block becomes, and prints the error of
# $q \cdot k$ after a round trip of both vectors through each format (one scale per block of 128),
# with and without the rotation, for 1000 random pairs with one outlier feature each, of 30 and then
# of 3000.
#
# 在量化到 FP8 之前，V3.2 的索引器把查询头和键都乘以一个按 $d^{-1/2}$ 缩放的 Hadamard 矩阵（`rotate_activation`）。这个矩阵 $R$ 是正交归一的（$R R^\top = I$），所以 $(Rq) \cdot (Rk) = q \cdot k$：分数不变，本笔记本因此省略了这个旋转。它是为随后的量化准备的（笔记本 11）：一个离群特征决定了它所在的 128 个值的整个块的缩放因子，而旋转把离群值分摊到所有特征上，使这个块变得平坦。平坦的块是否量化得更好取决于格式：int8 的量化级是等间距的，FP8 的是浮点的，在 0 附近细、在最大值附近粗。下面的单元格检查点积，测量块变得多平坦，并打印两个向量都经过每种格式往返一次（每 128 个值一个缩放因子）之后 $q \cdot k$ 的误差，分别在有旋转和无旋转时，对 1000 对各带一个离群特征（先是 30，再是 3000）的随机向量进行测量。

# %%
def hadamard(d):
    h = torch.ones(1, 1)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h / math.sqrt(d)


def round_trip(t, fmt):  # one absmax scale per row of 128 values
    top = {"int8": 127, "fp8": 448}[fmt]  # 448: FP8 e4m3's largest value
    scale = t.abs().amax(-1, keepdim=True) / top
    q = (t / scale).round() if fmt == "int8" else (t / scale).to(torch.float8_e4m3fn).float()
    return q * scale


R = hadamard(128)
for outlier in (30.0, 3000.0):
    g = torch.Generator().manual_seed(0)
    Q, K = torch.randn(1000, 128, generator=g), torch.randn(1000, 128, generator=g)
    Q[:, 7], K[:, 5] = outlier, outlier  # one outlier feature in each
    exact = (Q * K).sum(-1)
    if outlier == 30.0:
        print(f"(RQ) . (RK) equals Q . K: {torch.allclose(((Q @ R) * (K @ R)).sum(-1), exact, atol=1e-3)}; "
              f"R R^T = I: {torch.allclose(R @ R.T, torch.eye(128), atol=1e-6)}")
        print(f"largest / median |value| of a key: {(K.abs().amax(-1) / K.abs().median(-1).values).mean():.1f} plain, "
              f"{((K @ R).abs().amax(-1) / (K @ R).abs().median(-1).values).mean():.1f} rotated")
    errors = {}
    for fmt in ("int8", "fp8"):
        for rotated in (False, True):
            q, k = (Q @ R, K @ R) if rotated else (Q, K)
            errors[fmt, rotated] = ((round_trip(q, fmt) * round_trip(k, fmt)).sum(-1) - exact).abs().mean().item()
        print(f"outlier {outlier:g}, {fmt}: mean |error of q . k| {errors[fmt, False]:.3g} plain, {errors[fmt, True]:.3g} rotated")
    print(f"outlier {outlier:g}: the rotation lowered the error for",
          [fmt for fmt in ("int8", "fp8") if errors[fmt, True] < errors[fmt, False]] or "neither format")

# %% [markdown]
# Read the error lines. For int8 the rotation helps: its even step is set by the largest value of
# the block, and the rotation makes that value small. For FP8 it does the opposite, for both
# outliers: FP8 rounds each value relative to its own size, so in the plain block only the outlier
# carried a large error, and after the rotation every one of the 128 values holds a share of the
# outlier and its error, which then reaches every product of $q \cdot k$. The rotation does bring
# back values that FP8 would lose (a block spanning more than E4M3's normal range, $2^{-6}$ to 448,
# a factor of about $2^{15}$, sends its smallest values to the coarse subnormals or to 0), but with
# one outlier their errors are small next to the outlier's. One outlier in Gaussian noise is the
# simplest case, not what trained activations look like, and DeepSeek's code does not say what
# the rotation buys its FP8 keys; what holds for any data is the first line: the rotation costs
# nothing in the scores.
#
# 读一读误差那几行。对 int8，旋转有帮助：它的均匀步长由块中最大的值决定，而旋转让这个值变小。对 FP8，两种离群值下旋转都适得其反：FP8 按每个值自身的大小做舍入，所以在原始的块中只有离群值带着大的误差；旋转之后，128 个值中的每一个都分到了离群值的一份以及它的误差，这个误差随后进入 $q \cdot k$ 的每一个乘积。旋转确实能挽回 FP8 会丢掉的值（一个块的数值跨度超过 E4M3 的正规数范围 $2^{-6}$ 到 448，即约 $2^{15}$ 倍时，最小的值会落入粗糙的次正规数或变成 0），但只有一个离群值时，这些值的误差与离群值的误差相比很小。高斯噪声中的一个离群值只是最简单的情形，并不是训练后激活值的样子，而 DeepSeek 的代码也没有说明旋转给它的 FP8 键带来了什么；对任何数据都成立的是第一行：旋转在分数上没有任何代价。

# %% [markdown]
# ### Exercise 5 · `topk_key_mask` · 练习 5
#
# From index scores `(B, T, S)`, return the boolean mask `(B, T, S)`, True = blocked, that keeps
# exactly `min(topk, number of finite scores)` keys per query, the highest; never a `-inf` position
# (a query near the start of the text has fewer than `topk` candidates).
#
# 根据索引分数 `(B, T, S)` 返回布尔掩码 `(B, T, S)`，True 表示屏蔽：每个查询正好保留 `min(topk, 有限分数的个数)` 个分数最高的键；永远不选 `-inf` 的位置（文本开头附近的查询，候选少于 `topk` 个）。
#
# <!-- rules: topk_key_mask -->
#
# #### Rules that grading checks · 评分检查的规则 (`topk_key_mask`)
#
# - The course's `topk_indices` may not run inside your code: this exercise is that part of the work.
# - Graded in float32, float64 and bfloat16: the result is `torch.bool`.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 课程的 `topk_indices` 不能在你的代码中运行：本练习要你写的正是这部分工作。
# - 在 float32、float64、bfloat16 下评分：结果是 `torch.bool`。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "topk_key_mask", "locked": false, "schema_version": 3, "solution": true, "task": false}
def topk_key_mask(index_scores, topk):
    ### BEGIN SOLUTION
    chosen = index_scores.topk(min(topk, index_scores.shape[-1]), dim=-1).indices
    keep = torch.zeros_like(index_scores, dtype=torch.bool).scatter(-1, chosen, True)
    return ~(keep & torch.isfinite(index_scores))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_topk_key_mask", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

from autograder.checks import nb13

with nb13.as_graded(topk_key_mask):
    scores = torch.tensor([[[1.0, float("-inf"), float("-inf")], [0.5, 2.0, 1.0]]])
    got = topk_key_mask(scores, 2)
    expect(got.tolist() == [[[False, True, True], [True, False, False]]],
           "Top-2: the first query has one candidate, the second keeps its two best.",
           "Top-2：第一个查询只有一个候选，第二个查询保留它最好的两个。", f"got {got.tolist()}")
    print("✓ topk_key_mask")

# %% nbgrader={"grade": true, "grade_id": "test_topk_key_mask_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb13
nb13.check_topk_key_mask(topk_key_mask)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 6 · `SparseMLA` · 练习 6
#
# Subclass 09's `MultiHeadLatentAttention` (imported from `utils.mla`: same parameters and caches;
# its helpers `_latent_and_rope_key`, `_expand` and `_write` are yours to reuse) and add
# `self.indexer = LightningIndexer(cfg)`, fed with `qr = q_norm(wq_a(x))`. In
# `forward(x, start_pos=0, absorb=False)` every query attends only to the keys `topk_key_mask` keeps
# for it (`index_topk` of them), on both paths: the mask is per query and shared by all MLA heads, on
# top of the causal mask. V3.2's official code does exactly this, adding 0 for the selected keys and
# `-inf` for the others to MLA's scores. When `index_topk >= start_pos + T` it is 09's MLA.
#
# 继承 09 的 `MultiHeadLatentAttention`（从 `utils.mla` 导入：参数和缓存相同；它的辅助方法 `_latent_and_rope_key`、`_expand` 和 `_write` 你可以直接复用），并加上 `self.indexer = LightningIndexer(cfg)`，输入为 `qr = q_norm(wq_a(x))`。在 `forward(x, start_pos=0, absorb=False)` 中，两条路径上的每个查询都只关注 `topk_key_mask` 为它保留的键（`index_topk` 个）：掩码按查询给出，由所有 MLA 头共享，并叠加在因果掩码之上。V3.2 的官方代码正是这样做的：对选中的键在 MLA 分数上加 0，对其他键加 `-inf`。当 `index_topk >= start_pos + T` 时，它就是 09 的 MLA。
#
# <!-- rules: SparseMLA -->
#
# #### Rules that grading checks · 评分检查的规则 (`SparseMLA`)
#
# - The course's `gather_positions` may not run inside your code: this exercise is that part of the work.
# - Graded in float32 and float64: the layer moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 课程的 `gather_positions` 不能在你的代码中运行：本练习要你写的正是这部分工作。
# - 在 float32、float64 下评分：用 `.to(dtype)` 转换后的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "SparseMLA", "locked": false, "schema_version": 3, "solution": true, "task": false}
class SparseMLA(MultiHeadLatentAttention):
    def __init__(self, cfg):
        super().__init__(cfg)
        ### BEGIN SOLUTION
        self.indexer = LightningIndexer(cfg)
        ### END SOLUTION

    def forward(self, x, start_pos=0, absorb=False):
        ### BEGIN SOLUTION
        cfg = self.cfg
        B, T, _ = x.shape
        H, nope, rope, dv = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        end = start_pos + T
        positions = torch.arange(start_pos, end, device=x.device)
        qr = self.q_norm(self.wq_a(x))
        q_nope, q_pe = self.wq_b(qr).view(B, T, H, nope + rope).split([nope, rope], dim=-1)
        q_pe = apply_rope(q_pe.transpose(1, 2), positions, cfg.rope_theta, interleaved=True).transpose(1, 2)
        latent, k_pe = self._latent_and_rope_key(x, positions)
        blocked = topk_key_mask(self.indexer(x, qr, start_pos), cfg.index_topk) | causal_mask(T, end, device=x.device)  # (B, T, end)
        if absorb:
            w = self.wkv_b.weight.view(H, nope + dv, cfg.kv_lora_rank)
            c, pe = self._write("kv_cache", latent, start_pos), self._write("pe_cache", k_pe, start_pos)
            q_latent = torch.einsum("bthd,hdc->bthc", q_nope, w[:, :nope])
            scores = torch.einsum("bthc,bsc->bths", q_latent, c) + torch.einsum("bthr,bsr->bths", q_pe, pe)
        else:
            k, v = self._expand(latent, k_pe)
            k, v = self._write("k_cache", k, start_pos), self._write("v_cache", v, start_pos)
            scores = torch.einsum("bthd,bshd->bths", torch.cat([q_nope, q_pe], dim=-1), k)
        scores = (scores * self.softmax_scale).masked_fill(blocked.unsqueeze(2), float("-inf"))
        weights = torch.softmax(scores.float(), dim=-1).type_as(x)  # (B, T, H, end)
        if absorb:
            out = torch.einsum("bths,bsc,hdc->bthd", weights, c, w[:, nope:])
        else:
            out = torch.einsum("bths,bshd->bthd", weights, v)
        return self.wo(out.flatten(2))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_SparseMLA", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close
from utils.dsa import DSAConfig
from utils.mla import MultiHeadLatentAttention

from autograder.checks import nb13

with nb13.as_graded(SparseMLA):
    torch.manual_seed(0)
    cfg = DSAConfig(dim=16, n_heads=2, q_lora_rank=8, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=3,
                    max_seq_len=10, index_n_heads=3, index_head_dim=8, index_topk=10)
    sparse = SparseMLA(cfg)
    dense = MultiHeadLatentAttention(cfg)
    dense.load_state_dict({k: v for k, v in sparse.state_dict().items() if not k.startswith("indexer.")})
    x = torch.randn(2, 6, 16)
    with torch.no_grad():
        expect_close(sparse(x), dense(x), "With index_topk >= the number of positions, SparseMLA is 09's MLA.",
                     "当 index_topk >= 位置数时，SparseMLA 就是 09 的 MLA。")
    print("✓ SparseMLA")

# %% nbgrader={"grade": true, "grade_id": "test_SparseMLA_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb13
nb13.check_SparseMLA(SparseMLA)
### END HIDDEN TESTS

# %% [markdown]
# Your sparse MLA against 09's when the top-k covers every position, and with a small top-k, token
# by token on both paths (the largest differences, on the machine that ran this, are printed):
#
# 当 top-k 覆盖所有位置时，把你的稀疏 MLA 与 09 的 MLA 比较；再用一个小的 top-k，在两条路径上逐个词元解码（下面打印的是运行本笔记本的机器上的最大差异）：

# %%
# NBVAL_IGNORE_OUTPUT
torch.manual_seed(1)
cfg = DSAConfig(dim=32, n_heads=4, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=8,
                max_seq_len=16, index_n_heads=4, index_head_dim=16, index_topk=16)
sparse = SparseMLA(cfg).eval()
dense = MultiHeadLatentAttention(cfg).eval()
dense.load_state_dict({k: v for k, v in sparse.state_dict().items() if not k.startswith("indexer.")})
x = torch.randn(2, 12, cfg.dim)
with torch.no_grad():
    print(f"top-k 16 >= 12 positions, sparse vs 09's MLA: {(sparse(x) - dense(x)).abs().max():.1e}")
    sparse.cfg.index_topk = 4
    whole = sparse(x)
    for absorb in (False, True):
        steps = torch.cat([sparse(x[:, :4], 0, absorb)] + [sparse(x[:, t:t + 1], t, absorb) for t in range(4, 12)], dim=1)
        print(f"top-k 4, {'absorbed' if absorb else 'naive'} path token by token vs whole: {(steps - whole).abs().max():.1e}")
    print(f"top-k 4 vs 09's MLA (different, as it should be): {(whole - dense(x)).abs().max():.2f}")

# %% [markdown]
# ## 4. What it buys, measured · 实测它带来了什么
#
# One decode step with V3.2's per-head sizes (MLA: 128 heads over a 512 + 64 latent; indexer: 64
# heads of 128; `index_topk` 2048; one layer, model width 1024 to keep the projections small),
# `utils.bench_sparse.decode_step_benchmark`: dense absorbed MLA (09's forward on the same module)
# against the sparse step of `utils.dsa.SparseMLA` (the indexer over every cached index key, then
# MLA over the 2048 selected latents, which it gathers first), one thread, the median of alternating rounds, the caches filled with random values of a
# prefill's statistics. The dense step reads every cached latent; the sparse step reads every index
# key (128 numbers per position) but only 2048 latents. `python -m utils.bench_sparse` runs the same
# measurement from the command line. The sentences under the plot say what this machine measured.
# Where a GPU is present, this cell and the next timing cell run there (`utils.benchmark.demo_device()`)
# and measure the GPU.
#
# 一个解码步骤，使用 V3.2 的每头尺寸（MLA：128 个头，潜在向量 512 + 64；索引器：64 个宽 128 的头；`index_topk` 2048；一层，模型宽度 1024 以使投影较小），`utils.bench_sparse.decode_step_benchmark`：稠密的吸收 MLA（在同一模块上调用 09 的 forward）与 `utils.dsa.SparseMLA` 的稀疏步骤（索引器读取每个缓存的索引键，然后 MLA 只读取被选中的 2048 个潜在向量，它先把这些向量收集出来）比较，单线程，交替轮次取中位数，缓存填入具有预填充统计特性的随机值。稠密步骤读取每个缓存的潜在向量；稀疏步骤读取每个索引键（每个位置 128 个数），但只读取 2048 个潜在向量。`python -m utils.bench_sparse` 在命令行运行同样的测量。图下方的句子说明本机测得的结果。有 GPU 时，这个单元格和下一个计时单元格在 GPU 上运行（`utils.benchmark.demo_device()`），测的是 GPU。
#
# Your Exercise 6 class is not what is timed, and it would not be faster than dense: like V3.2's
# released `model.py`, it scores every cached latent and then adds the mask, so it does all of the
# dense step's work plus the indexer's. Selecting keys saves time only when the selected latents
# are gathered first, or read by a kernel made for it (FlashMLA's sparse kernels, released with
# V3.2); a cell below measures that difference on MLA's attention alone.
#
# 这里计时的不是你在练习 6 中写的类，它也不会比稠密步骤快：它和 V3.2 发布的 `model.py` 一样，先为每个缓存的潜在向量打分，再加上掩码，所以它做了稠密步骤的全部工作，外加索引器的工作。只有先把选中的潜在向量收集出来，或者用专门的内核读取它们（随 V3.2 发布的 FlashMLA 稀疏内核），选键才能省时间；下面的一个单元格只在 MLA 的注意力部分测量这个差别。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.bench_sparse import crossover, decode_step_benchmark

contexts = [64, 128] if GRADING else [1024, 2048, 4096, 8192, 16384, 32768]
small = DSAConfig(dim=64, n_heads=4, q_lora_rank=32, kv_lora_rank=32, qk_nope_head_dim=16, qk_rope_head_dim=8,
                  v_head_dim=16, max_seq_len=129, index_n_heads=4, index_head_dim=16, index_topk=32)
rows = decode_step_benchmark(contexts, dim=1024, repeats=3, cfg=small if GRADING else None,  # grading: a tiny layer
                             device=DEVICE)
print(f"{'context':>8} {'dense ms':>9} {'sparse ms':>10} {'speedup':>8} {'dense MiB read':>15} {'sparse MiB read':>16}")
for r in rows:
    print(f"{r['context']:>8} {r['dense_ms']:>9.1f} {r['sparse_ms']:>10.1f} {r['speedup']:>7.2f}x "
          f"{r['dense_bytes'] / 2**20:>15.2f} {r['sparse_bytes'] / 2**20:>16.2f}")
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(contexts, [r["dense_ms"] for r in rows], "o-", label="dense absorbed MLA")
ax.plot(contexts, [r["sparse_ms"] for r in rows], "o-", label="indexer + top-2048 MLA")
ax.set_xscale("log", base=2); ax.set_xlabel("cached positions"); ax.set_ylabel("ms per decode step")
ax.legend(); plt.tight_layout(); plt.show()
last = rows[-1]
print(f"On this machine, at {last['context']} cached positions the sparse step took {last['sparse_ms']:.1f} ms and the "
      f"dense step {last['dense_ms']:.1f} ms: {last['speedup']:.1f}x; "
      + (f"sparse was faster from {crossover(rows)} cached positions on." if crossover(rows)
         else "sparse was not faster at the longest contexts measured."))
print(order_warning(rows, "context", ["dense_ms"]) or "the dense step's time grows with the context: no sign of a disturbed run")

# %% [markdown]
# While the text holds at most 2048 positions (the cached ones and the new token), the sparse step
# selects every key: it is the dense step plus the indexer, and only adds work. Beyond that, the dense step grows with 576 numbers
# per position and 128 heads, the sparse step with 128 numbers per position for the indexer's 64
# heads, and the 2048 latents it gathers cost the same at every context.
#
# 只要文本总共不超过 2048 个位置（缓存的位置加上新词元），稀疏步骤就选中每个键：它就是稠密步骤再加上索引器，只是增加了工作量。超过之后，稠密步骤随每个位置 576 个数、128 个头增长，稀疏步骤随索引器 64 个头、每个位置 128 个数增长，而它收集的 2048 个潜在向量在任何上下文长度下代价都相同。

# %% [markdown]
# ### Masking or gathering · 掩码还是收集
#
# MLA's absorbed attention for one query (128 heads over 512 + 64 numbers per position) over 16,384
# cached positions, three ways, on one thread: over every latent (dense); over every latent with the
# index mask added, what Exercise 6 and V3.2's released `model.py` do; and over the 2048 selected
# latents gathered first, what `utils.dsa.SparseMLA` does. The selection here is random (an
# indexer's would cost the same); the cell checks that masking and gathering give the same output
# and prints the median time of each.
#
# 对一个查询做 MLA 的吸收注意力（128 个头，每个位置 512 + 64 个数），缓存 16,384 个位置，在单线程上用三种方式计算：对每个潜在向量（稠密）；对每个潜在向量并加上索引掩码，即练习 6 和 V3.2 发布的 `model.py` 的做法；以及先收集出被选中的 2048 个潜在向量再计算，即 `utils.dsa.SparseMLA` 的做法。这里的选择是随机的（索引器的选择代价相同）；单元格检查掩码和收集给出相同的输出，并打印每种方式的中位时间。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.mla import one_thread

S, top = (256, 32) if GRADING else (16384, 2048)  # cached positions, selected positions
g = torch.Generator().manual_seed(2)
q_latent, q_pe = torch.randn(1, 1, 128, 512, generator=g), torch.randn(1, 1, 128, 64, generator=g)  # (B, T, H, .)
c, pe = torch.randn(1, S, 512, generator=g), torch.randn(1, S, 64, generator=g)  # cached latents and rope keys
picked = torch.randperm(S, generator=g)[:top]  # what an indexer would have selected
q_latent, q_pe, c, pe, picked = (t.to(DEVICE) for t in (q_latent, q_pe, c, pe, picked))  # drawn on the CPU: the same values
blocked = torch.ones(1, 1, S, dtype=torch.bool, device=DEVICE)
blocked[..., picked] = False


def attend(c, pe, blocked=None):
    """MLA's absorbed attention of the query over the latents it is given: (B, T, H, 512)."""
    scores = (torch.einsum("bthc,bsc->bths", q_latent, c) + torch.einsum("bthr,bsr->bths", q_pe, pe)) / 24
    if blocked is not None:
        scores = scores.masked_fill(blocked.unsqueeze(2), float("-inf"))
    return torch.einsum("bths,bsc->bthc", torch.softmax(scores, dim=-1), c)


ways = {"dense, every latent": lambda: attend(c, pe),
        "masked, every latent scored (Exercise 6, model.py)": lambda: attend(c, pe, blocked),
        f"gathered, the {top} selected (utils.dsa)": lambda: attend(c[:, picked], pe[:, picked])}
times = {name: [] for name in ways}
with torch.no_grad(), one_thread():
    for _ in range(5):
        for name, way in ways.items():
            times[name].append(timed(way, DEVICE)[0])
    same = torch.allclose(attend(c, pe, blocked), attend(c[:, picked], pe[:, picked]), atol=1e-5)
print(f"{S} cached positions, one query; masked and gathered give the same output: {same}")
for name, t in times.items():
    print(f"{name:52} {1e3 * sorted(t)[2]:8.2f} ms")

# %% [markdown]
# Masking computes every score before it throws most of them away, so expect it at no less than the
# dense time; gathering computes 2048 of them. That is why the timed sparse step above gathers, and why
# DeepSeek released kernels that read only the selected latents (FlashMLA's sparse kernels) next to
# the masking reference in `model.py`.
#
# 掩码先算出每一个分数，再把其中大部分丢掉，所以预计它的代价不低于稠密的时间；收集只计算其中 2048 个。这就是上面计时的稀疏步骤要先收集的原因，也是 DeepSeek 在做掩码的参考实现 `model.py` 之外，还发布了只读取被选中潜在向量的内核（FlashMLA 的稀疏内核）的原因。
#
# ### On a GPU, at batch 1 · 在 GPU 上，批大小为 1
#
# The same two steps, the course's `utils.dsa.SparseMLA` with its gather against 09's dense absorbed
# MLA, were also measured on a GPU at DeepSeek-V3's full sizes (width 7168, 128 heads, latent
# 512 + 64; indexer 64 heads of 128, top-2048), batch 1. Your machine cannot repeat that
# measurement here, so the cell prints its figures from a table, labelled with the machine that
# produced them: one NVIDIA H200, torch 2.11 with CUDA 13, each time the median of 5 decode steps
# timed with CUDA events after a warm-up. The bytes read come from `utils.bench_sparse.bytes_read`,
# as in the CPU table, and the time to read the dense step's bytes uses the H200's memory bandwidth
# as NVIDIA's datasheet states it, 4.8 TB/s.
#
# 同样的两个步骤，即课程带收集的 `utils.dsa.SparseMLA` 与 09 的稠密吸收 MLA，也在一块 GPU 上以 DeepSeek-V3 的完整尺寸（宽度 7168，128 个头，潜在向量 512 + 64；索引器 64 个宽 128 的头，top-2048）、批大小 1 测量过。你的机器无法在这里重复这个测量，所以单元格从一张表中打印这些数字，并标明得出它们的机器：一块 NVIDIA H200，torch 2.11 加 CUDA 13，每个时间都是预热之后用 CUDA 事件计时的 5 个解码步骤的中位数。读取的字节数与 CPU 的表一样来自 `utils.bench_sparse.bytes_read`，读取稠密步骤这些字节所需的时间则用 NVIDIA 数据手册给出的 H200 显存带宽 4.8 TB/s 计算。

# %%
from utils.bench_sparse import bytes_read, v32_layer

# Measured on one NVIDIA H200 (torch 2.11, CUDA 13): utils.dsa.SparseMLA moved to the GPU, V3's sizes, batch 1,
# the median of 5 decode steps timed with CUDA events after a warm-up. {context: (dense ms, sparse ms)}
H200_MS = {8192: (1.80, 3.18), 32768: (1.83, 3.31), 65536: (2.06, 3.45)}
H200_BYTES_PER_S = 4.8e12  # memory bandwidth, NVIDIA's H200 datasheet
print("one decode step, measured on one NVIDIA H200, batch 1, DeepSeek-V3's sizes")
print(f"{'context':>8} {'dense ms':>9} {'sparse ms':>10} {'speedup':>8} {'dense MiB read':>15} {'sparse MiB read':>16} "
      f"{'dense read at 4.8 TB/s':>23}")
for context, (dense_ms, sparse_ms) in H200_MS.items():
    read = bytes_read(v32_layer(7168, context + 1), context)
    print(f"{context:>8} {dense_ms:>9.2f} {sparse_ms:>10.2f} {dense_ms / sparse_ms:>7.2f}x {read['dense'] / 2**20:>15.1f} "
          f"{read['sparse'] / 2**20:>16.1f} {read['dense'] / H200_BYTES_PER_S * 1e3:>20.3f} ms")

# %% [markdown]
# On that GPU the sparse step was slower than the dense one at every context measured (the speedup
# column stays below 1), although it reads 2 to 4 times fewer bytes: at 4.8 TB/s even the dense
# step's reads take at most three hundredths of a millisecond of a step of about 2 ms. At batch 1 a step of
# one layer waits on its dozens of small kernels, launched one after another (the projections, the
# indexer's products, the top-k, the gather, the softmax), and on the indexer's own work, not on
# reading the cache, and the sparse step has more kernels to launch. On one CPU thread the
# arithmetic over every cached latent and 128 heads can be slow enough to dominate: the line under
# the CPU plot says from which context, if any, selecting 2048 paid on your machine. Sparse attention
# pays where the work over the cache dominates a step:
#
# 在那块 GPU 上，稀疏步骤在测量的每个上下文长度下都比稠密步骤慢（加速比一列始终低于 1），尽管它读取的字节少 2 到 4 倍：以 4.8 TB/s 计，即使是稠密步骤的读取，也最多只占约 2 毫秒的一步中的百分之三毫秒。批大小为 1 时，一层的一步等待的是它依次启动的几十个小内核（各个投影、索引器的乘积、top-k、收集、softmax）以及索引器本身的工作，而不是读取缓存；稀疏步骤要启动的内核还更多。在单个 CPU 线程上，对每个缓存的潜在向量、128 个头做的运算可能慢到足以占主导：CPU 图下方的那一行说明在你的机器上从哪个上下文长度开始（如果有的话）只选 2048 个是划算的。稀疏注意力在对缓存的工作主导一步的地方划算：
#
# - long contexts: the dense work grows with every cached token, while the sparse MLA part stays at
#   2048 positions and only the indexer's small keys keep growing;
# - large batches: a server decodes many sequences in one step, each reading its own cache, while
#   the launches are paid once per step;
# - fused kernels: kernels that read only the selected latents in a few launches (FlashMLA's sparse
#   decoding kernel, released with V3.2), not the separate PyTorch operations of `utils.dsa` or the
#   masking of `model.py`.
#
# - 长上下文：稠密的工作随每个缓存的词元增长，而稀疏 MLA 的部分始终是 2048 个位置，只有索引器的小键在继续增长；
# - 大批量：服务器在一步中解码许多序列，每个序列读取自己的缓存，而内核启动每一步只付一次；
# - 融合内核：用少数几次启动只读取被选中潜在向量的内核（随 V3.2 发布的 FlashMLA 稀疏解码内核），而不是 `utils.dsa` 中一个个单独的 PyTorch 运算，也不是 `model.py` 的掩码做法。

# %% [markdown]
# ## 5. KV bytes per token of the designs in this course · 本课程各设计每个词元的 KV 字节数
#
# Per attention layer, the cache bytes at a context of $L$ tokens, divided by $L$, in bf16 (2 bytes
# a number) except V3.2's index keys, which its code caches in FP8 with one float32 scale per 128
# values (132 bytes). Sizes from the configs: GPT-2 small (12 heads of 64), Llama 3 8B (8 KV heads of
# 128), DeepSeek-V3 (latent 512 + rope key 64), V3.2 (V3 plus a 128-wide index key), gpt-oss (8 KV
# heads of 64, a 128-token window on every other layer: the average of the two kinds of layer), and
# DeepSeek-V4's two kinds of layer (its one KV head of 512, counted as one 512-wide vector per cache
# entry; a 128-token window plus a compressed branch: rate 4 with, as we assume, one index key per
# compressed entry, or rate 128). V4's cache formats are not in its config: counting its entries in
# bf16 is an assumption too. Whole models multiply by their number of layers.
#
# 每个注意力层在上下文为 $L$ 个词元时的缓存字节数除以 $L$，按 bf16（每个数 2 字节）计算，只有 V3.2 的索引键例外：它的代码以 FP8 缓存，每 128 个值一个 float32 缩放因子（132 字节）。尺寸来自各配置：GPT-2 small（12 个宽 64 的头）、Llama 3 8B（8 个宽 128 的键值头）、DeepSeek-V3（潜在向量 512 + rope 键 64）、V3.2（V3 再加一个宽 128 的索引键）、gpt-oss（8 个宽 64 的键值头，每隔一层一个 128 词元的窗口：取两种层的平均）、以及 DeepSeek-V4 的两种层（它唯一的 512 宽 KV 头，按每个缓存条目一个 512 宽的向量计算；一个 128 词元的窗口加一个压缩分支：压缩率 4，并按我们的假设为每个压缩条目配一个索引键，或压缩率 128）。V4 的缓存格式不在它的配置中：按 bf16 计算它的条目也是我们的假设。整个模型再乘以层数。

# %%
BF16 = 2


def full_layer(width):  # numbers cached per token for every token of the text
    return lambda L: width * BF16 * L


def window_layer(width, window=128):
    return lambda L: width * BF16 * min(L, window)


designs = {
    "GPT-2 small MHA (K, V: 12 x 64)": full_layer(2 * 12 * 64),
    "Llama 3 8B GQA (K, V: 8 x 128)": full_layer(2 * 8 * 128),
    "DeepSeek-V3 MLA (512 + 64)": full_layer(512 + 64),
    "DeepSeek-V3.2 (MLA + FP8 index key)": lambda L: full_layer(512 + 64)(L) + (128 + 4) * L,
    "gpt-oss, if no layer had a window": full_layer(2 * 8 * 64),
    "gpt-oss (8 x 64; window on half)": lambda L: (full_layer(2 * 8 * 64)(L) + window_layer(2 * 8 * 64)(L)) / 2,
    "one 512-wide vector, every token": full_layer(512),
    "V4 layer, window + rate 4 + index": lambda L: window_layer(512)(L) + (512 * BF16 + 128 * BF16) * (L // 4),
    "V4 layer, window + rate 128": lambda L: window_layer(512)(L) + 512 * BF16 * (L // 128),
}
lengths = {"4K": 4096, "128K": 131072, "1M": 1048576}
print(f"{'bytes per token per layer':38}" + "".join(f"{k:>9}" for k in lengths))
for name, bytes_at in designs.items():
    print(f"{name:38}" + "".join(f"{bytes_at(L) / L:>9.1f}" for L in lengths.values()))

# %% [markdown]
# The table shows why the field moved. The window's share shrinks with the context, so gpt-oss tends
# to half of what it would cache without windows; V3.2 keeps MLA's cache and adds a little for the
# indexer (its gain is in the work per step, section 4, not in memory); V4 compresses the text
# itself, so once the context is much longer than the window its bytes per token are those of one
# 512-wide vector per token divided by the compression rate (plus the index keys at rate 4).
#
# 这张表说明了业界为何转向。窗口所占的份额随上下文增长而缩小，所以 gpt-oss 趋近于没有窗口时缓存量的一半；V3.2 保留了 MLA 的缓存，并为索引器多加了一点（它的收益在于每一步的计算量，见第 4 节，而不在内存）；V4 压缩的是文本本身，所以一旦上下文远长于窗口，它每个词元的字节数就是每个词元一个 512 宽向量的字节数除以压缩率（压缩率 4 时再加上索引键）。

# %% [markdown]
# ## Summary · 小结
#
# A sliding window bounds both the cache and the work per step, at the price of forgetting; sinks
# let a head attend to nothing, which windows need; DeepSeek Sparse Attention keeps every key in
# memory but lets each query attend to only 2048 latents, chosen by a cheap indexer whose RoPE
# layout must match the one it was trained with. It saves time only where the selected latents are
# gathered (or read by a sparse kernel) rather than masked, and where the work over the cache
# dominates a step: on one CPU thread beyond the crossover measured in section 4; on a GPU at
# batch 1, the course's PyTorch saves nothing (the H200 figures). As shipped, DeepSeek-V3.2-Exp's code runs YaRN at every
# length: its `max_seq_len` (16384 by default) exceeds `original_seq_len` (4096), so YaRN's
# frequencies and MLA's larger softmax scale apply even to a 10-token text. This course leaves YaRN
# out, so parity with that code holds when it is built with `max_seq_len <= 4096`.
#
# 滑动窗口以遗忘为代价，同时限制了缓存和每一步的计算量；sink 让一个头可以什么都不关注，这正是窗口所需要的；DeepSeek 稀疏注意力把每个键都保留在内存中，但每个查询只关注 2048 个潜在向量，由一个廉价的索引器挑选，而索引器的 RoPE 布局必须与它训练时的一致。只有把选中的潜在向量收集出来（或由稀疏内核读取）而不是加掩码，并且对缓存的工作在一步中占主导时，它才省时间：在单个 CPU 线程上超过第 4 节测得的交叉点之后；在 GPU 上批大小为 1 时，课程的 PyTorch 实现并不省（见 H200 的数字）。按发布时的设置，DeepSeek-V3.2-Exp 的代码在任何长度上都运行 YaRN：它的 `max_seq_len`（默认 16384）大于 `original_seq_len`（4096），所以即使是 10 个词元的文本，YaRN 的频率和 MLA 更大的 softmax 缩放也都会生效。本课程省略了 YaRN，所以只有当那份代码以 `max_seq_len <= 4096` 构建时，两者才一致。
#
# Sources: DeepSeek-AI, DeepSeek-V3.2-Exp inference code (`inference/model.py`: `Indexer`, `MLA`,
# `rotate_activation`, `ModelArgs`; `config_671B_v3.2.json`), its README note of 2025-11-17 on the indexer's
# RoPE layout and commit 8631a813356d39b09a5c1ee1cde8ed6015559eb3 (the fix; vLLM fixed it on 2025-11-18,
# vllm-ascend twice, after a regression; in mlx-lm a reviewer corrected a port still in review);
# vLLM PR #28968, SGLang issue #13530, vllm-ascend PRs #4641 and #7341, mlx-lm PR #512 (a review
# comment of 2025-12-01); DeepSeek's FlashMLA README (its sparse kernels for V3.2);
# OpenAI, gpt-oss (`gpt_oss/torch/model.py`: sinks, sliding window); DeepSeek-V4's Hugging Face
# `configuration_deepseek_v4.py`; G. Xiao et al., *Efficient Streaming Language Models with Attention
# Sinks* (2023); A. Q. Jiang et al., *Mistral 7B* (2023); S. Raschka, LLMs-from-scratch `ch04/06_swa`,
# issue #1008 and PR #1013; the GPU figures: measured for this course on one NVIDIA H200 (torch 2.11,
# CUDA 13, the course's `utils` of 2026-11-25), and NVIDIA's H200 datasheet (4.8 TB/s).
#
# 来源：DeepSeek-AI 的 DeepSeek-V3.2-Exp 推理代码（`inference/model.py` 中的 `Indexer`、`MLA`、`rotate_activation`、`ModelArgs`；`config_671B_v3.2.json`）、它 2025 年 11 月 17 日关于索引器 RoPE 布局的 README 说明，以及提交 8631a813356d39b09a5c1ee1cde8ed6015559eb3（这次修复；vLLM 在 2025-11-18 修复，vllm-ascend 在一次回归后修复了两次；mlx-lm 中一位审阅者在移植仍在审阅时就更正了它）；推理引擎的修复与报告：vLLM PR #28968、SGLang issue #13530、vllm-ascend PR #4641 与 #7341、mlx-lm PR #512（2025-12-01 的一条审阅意见）；DeepSeek 的 FlashMLA 说明文件（它为 V3.2 提供的稀疏内核）；OpenAI 的 gpt-oss（`gpt_oss/torch/model.py`：sink 与滑动窗口）；DeepSeek-V4 在 Hugging Face 上的 `configuration_deepseek_v4.py`；G. Xiao 等，《Efficient Streaming Language Models with Attention Sinks》（2023）；A. Q. Jiang 等，《Mistral 7B》（2023）；S. Raschka 的 LLMs-from-scratch 中的 `ch04/06_swa`、issue #1008 与 PR #1013；GPU 上的数字：为本课程在一块 NVIDIA H200 上测得（torch 2.11、CUDA 13，课程 2026-11-25 的 `utils`），以及 NVIDIA 的 H200 数据手册（4.8 TB/s）。
