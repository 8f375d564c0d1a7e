# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 07 · The KV cache, MQA and GQA · KV 缓存、MQA 与 GQA
#
# A language model writes one token at a time: it reads the text so far, picks the next token, appends
# it, and starts again. Done naively, every step runs the whole text through the model once more,
# although only the last token is new. In this notebook you find out exactly which work repeats, keep
# its result in a **KV cache**, and measure what that buys. Then you pay for it in memory, compute the
# bill for real models, and shrink it the way Llama 3 does: several query heads sharing one key/value
# head (**grouped-query attention**, and its extreme, **multi-query attention**).
#
# 语言模型一次写一个词元：读入目前为止的文本，选出下一个词元，把它接上，然后重新开始。如果天真地去做，每一步都要把整段文本重新送进模型一遍，尽管只有最后一个词元是新的。在本笔记本中，你将弄清楚到底哪些计算是重复的，把它们的结果保存在 **KV 缓存** 里，并测量这样做带来的收益。然后你要为它付出内存的代价：为真实的模型算出这笔账，再用 Llama 3 的办法把它缩小：让几个查询头共享一个键/值头（**分组查询注意力**，以及它的极端情形 **多查询注意力**）。
#
# Sources: S. Raschka, *Build a Large Language Model (From Scratch)*, ch. 4 and the KV-cache bonus
# material of its repository; N. Shazeer, *Fast Transformer Decoding: One Write-Head is All You Need*
# (2019, MQA); J. Ainslie et al., *GQA* (2023); the DeepSeek-V2 report, table 1 (cache sizes); T. Dao,
# *FlashAttention-2* (2023) and its repository (keys and values with fewer heads than the queries);
# vLLM's DeepSeek-V3 recipe and SGLang's DeepSeek-V3 usage page (the hardware DeepSeek-V3 is served on).
#
# 参考资料：S. Raschka，《从零构建大语言模型》第 4 章及其代码仓库中关于 KV 缓存的附加材料；N. Shazeer，*Fast Transformer Decoding: One Write-Head is All You Need*（2019，MQA）；J. Ainslie 等，*GQA*（2023）；DeepSeek-V2 技术报告表 1（缓存大小）；T. Dao，*FlashAttention-2*（2023）及其代码仓库（键和值的头数可以少于查询）；vLLM 的 DeepSeek-V3 部署指南和 SGLang 的 DeepSeek-V3 使用说明（部署 DeepSeek-V3 所用的硬件）。

# %%
import copy
import inspect
import os

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from utils.bandwidth import last_level_cache_bytes, memory_bandwidth, read_bandwidth
from utils.bench_generate import (FULL, LONG, SMALL, build, cache_regimes, format_regimes, format_rows, generation_benchmark,
                                  step_times)
from utils.benchmark import demo_device, order_warning, timed
from utils.causal import causal_mask
from utils.gpt import GPTConfig, GPTModel, TransformerBlock, parameter_count
from utils.kv_cache import ConcatKVCache
from utils.multihead import MultiHeadAttention, merge_heads, split_heads

# Small matrices: handing work to a second thread costs more than it saves, and one thread keeps
# the timings below steady when the machine is busy.
torch.set_num_threads(1)
GRADING = bool(os.getenv("NBGRADER_EXECUTION"))  # grading runs the notebook with smaller timings
DEVICE = demo_device()  # the timing cells run on a GPU when one is present (grading: the CPU)
cfg = SMALL
print(cfg)

# %% [markdown]
# ## Where attention sits · 注意力在哪里
#
# Before speeding anything up, look at the model we will generate with: `utils.gpt.GPTModel`, GPT-2's
# shape at a small size, with random weights (we measure speed and equality of outputs, not quality).
# Tokens become vectors (token embedding plus a learned position embedding, notebook 08 has more), then
# `n_layers` identical blocks, then a final norm and the output head that scores every vocabulary
# entry. Inside a block, attention is the **only** place where tokens look at each other; the
# feed-forward network works on each token alone.
#
# 在加速任何东西之前，先看看我们用来生成的模型：`utils.gpt.GPTModel`，一个小尺寸的 GPT-2 结构，权重是随机的（我们测量的是速度和输出是否一致，而不是质量）。词元先变成向量（词元嵌入加上可学习的位置嵌入，笔记本 08 会细讲），然后经过 `n_layers` 个相同的块，最后是最终的归一化层和输出头，输出头给词表中的每个词打分。在一个块里，注意力是词元之间互相查看的 **唯一** 地方；前馈网络只对每个词元单独计算。

# %%
print(inspect.getsource(TransformerBlock.forward))
model = GPTModel(cfg).eval()
block = model.trf_blocks[0]
parts = {"token + position embeddings": parameter_count(model.tok_emb) + parameter_count(model.pos_emb),
         "attention (all layers)": sum(parameter_count(b.att) for b in model.trf_blocks),
         "feed-forward (all layers)": sum(parameter_count(b.ff) for b in model.trf_blocks),
         "layer norms": sum(parameter_count(m) for m in model.modules() if isinstance(m, nn.LayerNorm)),
         "output head": parameter_count(model.out_head)}
for name, n in parts.items():
    print(f"{name:28} {n:>9,}")
print(f"{'total':28} {parameter_count(model):>9,}")
print(block.att)

# %% [markdown]
# The block is `x + attention(norm(x))`, then `x + feed_forward(norm(x))`: pre-norm, with a residual
# around each part. `block.att` is a plug: the model builds it with a function of the config, so the
# attention layers you write below can be put into the same model unchanged, and every layer also
# accepts a cache (`kv_cache=...`).
#
# 一个块先做 `x + attention(norm(x))`，再做 `x + feed_forward(norm(x))`：先归一化，每部分外面有一条残差连接。`block.att` 是一个插口：模型用一个以配置为参数的函数来构造它，所以你下面写的注意力层可以原样放进同一个模型，而且每一层都接受一个缓存（`kv_cache=...`）。

# %% [markdown]
# ## Generation without a cache repeats itself · 没有缓存的生成在重复劳动
#
# Greedy generation: run the model on the sequence, take the **argmax** of the logits at the **last**
# position, append it, repeat. Let's count how many token rows the first layer's key projection
# `W_key` processes at each step, with a forward hook.
#
# 贪心生成：把序列送进模型，取 **最后一个** 位置 logits 的 **argmax**，接到序列后面，重复。我们用一个前向钩子来数一数，每一步第一层的键投影 `W_key` 处理了多少行词元。

# %%
prompt = torch.randint(0, cfg.vocab_size, (1, 8), generator=torch.Generator().manual_seed(7))
rows = []
hook = block.att.W_key.register_forward_hook(lambda m, inputs, out: rows.append(inputs[0].shape[1]))
ids = prompt
with torch.no_grad():
    for step in range(24):
        next_id = model(ids)[:, -1].argmax(dim=-1, keepdim=True)
        ids = torch.cat((ids, next_id), dim=1)
hook.remove()
T0, N = prompt.shape[1], len(rows)
print("rows projected by W_key, step by step:", rows)
print(f"total rows: {sum(rows)}; N*T0 + N(N-1)/2 = {N * T0 + N * (N - 1) // 2} for N = {N} new tokens, T0 = {T0}")
print(f"rows a cached run projects: T0 + N - 1 = {T0 + N - 1} (the prompt once, then each new token but the last)")

# %% [markdown]
# At step $t$ (counting from 0) the model projects all $T_0 + t$ tokens again, so generating $N$
# tokens after a $T_0$-token prompt costs $\sum_{t=0}^{N-1} (T_0 + t) = N T_0 + N(N-1)/2$ token-passes
# per layer, quadratic in $N$; the cell above printed the count and the formula side by side. A run
# that keeps what it computed projects each token once: the prompt, then every new token but the
# last, $T_0 + N - 1$ rows. That is possible because the keys and values of the old tokens do not
# change: a token's key depends only on that token and the ones before it, and those are fixed.
#
# 在第 $t$ 步（从 0 数起），模型要把全部 $T_0 + t$ 个词元重新投影一遍，所以在 $T_0$ 个词元的提示之后生成 $N$ 个词元，每层的代价是 $\sum_{t=0}^{N-1} (T_0 + t) = N T_0 + N(N-1)/2$ 次词元计算，随 $N$ 平方增长；上面的单元格把这个计数和公式并排打印了出来。如果保留已经算过的结果，每个词元只需投影一次：提示一次，然后是除最后一个之外的每个新词元，共 $T_0 + N - 1$ 行。之所以能这样做，是因为旧词元的键和值不会变化：一个词元的键只取决于它自己和它之前的词元，而它们是固定的。
#
# Where is that true? In the first layer trivially: a key there is computed from one token's
# embedding alone. In the last block it is not trivial: its input has been through every earlier
# attention layer, where tokens mix, and only the causal mask (notebook 04) keeps the later tokens
# out. So we check it there: the last block's keys of the first 20 tokens, computed from those 20
# tokens and from the whole sequence.
#
# 这在哪里成立？在第一层是显然的：那里的键只由一个词元自己的嵌入计算出来。在最后一个块里就不显然了：它的输入已经经过了前面每一个注意力层，词元在那里相互混合，只有因果掩码（笔记本 04）把后面的词元挡在外面。所以我们在那里验证：最后一个块中前 20 个词元的键，分别由这 20 个词元和由整个序列计算出来。

# %%
def last_block_keys(ids):
    """The keys the last block computes: its input has passed every earlier block."""
    x = model.tok_emb(ids) + model.pos_emb(torch.arange(ids.shape[1]))
    for earlier in model.trf_blocks[:-1]:
        x = earlier(x)
    last = model.trf_blocks[-1]
    return last.att.W_key(last.norm1(x))


with torch.no_grad():
    k_short, k_long = last_block_keys(ids[:, :20]), last_block_keys(ids)
gap = (k_short - k_long[:, :20]).abs().max().item()
print(f"last block (block {cfg.n_layers - 1}), keys of tokens 0..19 from 20 tokens and from {ids.shape[1]} tokens:")
# The difference itself is rounding, which each processor does its own way: print it only if it is more.
print(f"largest difference: {'below 1e-5' if gap < 1e-5 else f'{gap:.2g}'}; equal up to float32 rounding (atol 1e-5): {gap < 1e-5}")

# %% [markdown]
# Equal, up to the rounding of float32 arithmetic on inputs of different lengths. In every layer, the
# new token needs three things: its own query, and the keys and values
# of **all** tokens so far. The old keys and values can be kept from earlier steps; that is the
# **KV cache**. The old **queries** are never needed again: a query is only used to compute the output
# at its own position, and the outputs at old positions were already produced (and used) when those
# tokens were generated. So the cache keeps K and V, not Q.
#
# 相等，差别至多是 float32 对不同长度的输入做运算时的舍入。在每一层里，新词元需要三样东西：它自己的查询，以及目前 **所有** 词元的键和值。旧的键和值可以从之前的步骤保留下来；这就是 **KV 缓存**。旧的 **查询** 再也用不到了：一个查询只用于计算它自己位置上的输出，而旧位置的输出在生成那些词元时就已经算过（并用过）了。所以缓存保存 K 和 V，不保存 Q。
#
# Generation with a cache has two phases. **Prefill**: the prompt goes through the model once, all
# its tokens at a time, filling the cache. **Decode**: from then on, one token per step; each layer
# projects only that token, appends its key and value to the cache, and its query attends over
# everything in the cache.
#
# 有缓存的生成分两个阶段。**预填充（prefill）**：提示一次性送进模型，所有词元同时计算，填满缓存。**解码（decode）**：此后每一步只送一个词元；每一层只投影这个词元，把它的键和值追加到缓存里，它的查询则关注缓存里的全部内容。

# %% [markdown]
# ### Exercise 1 · `KVCache` · 练习 1
#
# One layer's cache. In `__init__`, **preallocate** `self.k` and `self.v` as zeros of shape
# `(batch_size, num_kv_heads, max_seq_len, head_dim)` with the given `dtype` and `device`, and set
# `self.seq_len = 0` (positions filled so far). `update(k_new, v_new)` receives
# `(B, H_kv, T_new, hd)` tensors (often not contiguous: they come from a transpose): write them
# **into** the preallocated tensors at positions `seq_len .. seq_len + T_new - 1` (tokens are axis 2;
# slice assignment or `copy_`), advance `seq_len`, and return the **filled part** of the keys and
# values as views, `self.k[:, :, :seq_len]` and the same for `v`, of shape `(B, H_kv, seq_len, hd)`
# (a copy would cost what `torch.cat` costs, below). Raise `ValueError` when the new tokens do not
# fit in `max_seq_len` (a write that fills the cache exactly fits). `reset()` empties the cache for a
# new prompt.
#
# 一层的缓存。在 `__init__` 中 **预先分配** `self.k` 和 `self.v`：形状为 `(batch_size, num_kv_heads, max_seq_len, head_dim)` 的零张量，使用给定的 `dtype` 和 `device`，并设 `self.seq_len = 0`（目前已填的位置数）。`update(k_new, v_new)` 接收形状为 `(B, H_kv, T_new, hd)` 的张量（它们来自转置，往往不连续）：把它们 **写入** 预先分配的张量中位置 `seq_len .. seq_len + T_new - 1` 处（词元是第 2 轴；用切片赋值或 `copy_`），增加 `seq_len`，并以视图的形式返回键和值中 **已填的部分**：`self.k[:, :, :seq_len]` 以及对应的 `v`，形状 `(B, H_kv, seq_len, hd)`（复制一份的代价和下文的 `torch.cat` 一样）。当新词元放不进 `max_seq_len` 时抛出 `ValueError`（恰好填满缓存的写入是放得下的）。`reset()` 为新的提示清空缓存。
#
# <!-- rules: KVCache -->
#
# #### Rules that grading checks · 评分检查的规则 (`KVCache`)
#
# - Raises `ValueError` when an update does not fit: `seq_len + T_new > max_seq_len` (a write that fills the cache exactly is fine).
# - Graded in float32, float64 and bfloat16: the keys and values have the `dtype` the cache is given.
# - Device: the result is created on the `device` argument (pass `device=device` to what you build).
# - `update` writes into the preallocated `self.k` and `self.v` and returns views of their filled part (not copies); `reset()` empties the cache for a new prompt; keys and values may come in any memory layout.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 一次写入放不下时抛出 `ValueError`：`seq_len + T_new > max_seq_len`（恰好填满缓存的写入是可以的）。
# - 在 float32、float64、bfloat16 下评分：键和值的 dtype 是传给缓存的 `dtype`。
# - 设备：结果创建在参数 `device` 指定的设备上（把 `device=device` 传给你构造的张量）。
# - `update` 写入预先分配的 `self.k` 和 `self.v`，并返回其已填部分的视图（不是副本）；`reset()` 为新的提示清空缓存；键和值可能以任何内存布局传入。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "KVCache", "locked": false, "schema_version": 3, "solution": true, "task": false}
class KVCache:
    """Preallocated keys and values of one layer; seq_len positions are filled."""

    def __init__(self, batch_size, max_seq_len, num_kv_heads, head_dim, dtype=torch.float32, device=None):
        ### BEGIN SOLUTION
        self.max_seq_len = max_seq_len
        self.k = torch.zeros(batch_size, num_kv_heads, max_seq_len, head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.seq_len = 0
        ### END SOLUTION

    def update(self, k_new, v_new):
        ### BEGIN SOLUTION
        start, end = self.seq_len, self.seq_len + k_new.shape[2]
        if end > self.max_seq_len:
            raise ValueError(f"the cache holds {self.max_seq_len} positions, {end} requested")
        self.k[:, :, start:end] = k_new
        self.v[:, :, start:end] = v_new
        self.seq_len = end
        return self.k[:, :, :end], self.v[:, :, :end]
        ### END SOLUTION

    def reset(self):
        ### BEGIN SOLUTION
        self.seq_len = 0
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_KVCache", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

cache = KVCache(1, 4, 2, 3)
expect(tuple(cache.k.shape) == (1, 2, 4, 3) and cache.seq_len == 0,
       "KVCache should preallocate k of shape (batch, kv_heads, max_seq_len, head_dim) and start with seq_len 0.",
       "KVCache 应预先分配形状为 (batch, kv_heads, max_seq_len, head_dim) 的 k，并且 seq_len 从 0 开始。")
k, v = cache.update(torch.ones(1, 2, 3, 3), 2 * torch.ones(1, 2, 3, 3))
expect(tuple(k.shape) == (1, 2, 3, 3) and cache.seq_len == 3 and float(v.sum()) == 36.0,
       "After writing 3 tokens, update should return the 3 filled positions of keys and values.",
       "写入 3 个词元之后，update 应返回键和值中已填的 3 个位置。")
print("✓ KVCache")

# %% nbgrader={"grade": true, "grade_id": "test_KVCache_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb07
nb07.check_KVCache(KVCache)
### END HIDDEN TESTS

# %% [markdown]
# ## A layer that reads the cache · 读取缓存的注意力层
#
# With a cache, a layer receives only the **new** tokens `x` of shape `(B, T_new, d_in)`. It projects
# them, appends their keys and values to the cache, and lets their queries attend over all
# `T_total = seq_len` cached positions. The queries are the **last** `T_new` positions of the text, so
# the causal mask is notebook 04's bottom-right aligned `causal_mask(T_new, T_total)`: a single new
# token may see every key. A top-left aligned mask (blocked where
# `torch.ones(T_new, T_total).triu(1)` is True, i.e. allowed where `tril` is, as `is_causal=True`
# in `F.scaled_dot_product_attention` builds it) would let the new token see only the *first* key.
#
# 有缓存时，一层只接收 **新的** 词元 `x`，形状为 `(B, T_new, d_in)`。它投影这些词元，把它们的键和值追加到缓存里，然后让它们的查询关注全部 `T_total = seq_len` 个缓存位置。这些查询是文本的 **最后** `T_new` 个位置，所以因果掩码是笔记本 04 中右下对齐的 `causal_mask(T_new, T_total)`：单独一个新词元可以看到所有的键。左上对齐的掩码（在 `torch.ones(T_new, T_total).triu(1)` 为 True 处屏蔽，即只允许 `tril` 所在的位置，`F.scaled_dot_product_attention` 的 `is_causal=True` 就是这样构造的）会让新词元只看到 *第一个* 键。

# %%
for t_new, t_total in [(1, 6), (2, 6)]:
    print(f"bottom-right causal_mask({t_new}, {t_total}), True = blocked:\n{causal_mask(t_new, t_total).int()}")
    print(f"top-left (wrong at decode):\n{torch.ones(t_new, t_total, dtype=torch.bool).triu(1).int()}\n")

# %% [markdown]
# ### Exercise 2 · `CachedMultiHeadAttention` · 练习 2
#
# Notebook 06's `MultiHeadAttention` without dropout, with the same layers (`W_query`, `W_key`,
# `W_value` from `d_in` to `d_out` with `bias=qkv_bias`, and `out_proj` from `d_out` to `d_out` with a
# bias). `forward(x, kv_cache=None)`: project `x`, split heads (`split_heads` and `merge_heads` from
# `utils.multihead` are imported above); if a cache is given, `k, v = kv_cache.update(k, v)`; then
# causal attention with the bottom-right mask `causal_mask(T_new, T_total)` (imported from
# `utils.causal`), merge heads, `out_proj`. Without a cache it is plain causal multi-head attention.
# `T_total` is at most `context_length`; when the cache cannot hold the new tokens, its `update`
# raises `ValueError`: let it through. Keep `self.num_heads` and `self.head_dim`: the course's GPT
# reads them to shape each layer's cache (`model.new_caches`), and the grader checks them.
#
# 笔记本 06 中去掉 dropout 的 `MultiHeadAttention`，层与之相同（`W_query`、`W_key`、`W_value` 从 `d_in` 映射到 `d_out`，`bias=qkv_bias`；`out_proj` 从 `d_out` 映射到 `d_out`，带偏置）。`forward(x, kv_cache=None)`：投影 `x`，拆分头（上面已导入 `utils.multihead` 的 `split_heads` 和 `merge_heads`）；如果给了缓存，就 `k, v = kv_cache.update(k, v)`；然后用右下对齐的掩码 `causal_mask(T_new, T_total)`（从 `utils.causal` 导入）做因果注意力，合并头，`out_proj`。没有缓存时，它就是普通的因果多头注意力。`T_total` 不超过 `context_length`；缓存放不下新词元时，它的 `update` 会抛出 `ValueError`：让它传出来。请保留 `self.num_heads` 和 `self.head_dim`：课程的 GPT 读取它们来确定每一层缓存的形状（`model.new_caches`），评分也会检查它们。
#
# What is yours to write here is the cache and its mask, not the softmax: you may call
# `F.scaled_dot_product_attention(q, k, v, attn_mask=~causal_mask(T_new, T_total))` (its `attn_mask`
# marks the **allowed** keys, and its `is_causal=True` is top-left aligned). You may also subclass
# notebook 06's `MultiHeadAttention` (imported above) and write your own `forward`. The rule, the
# same in every notebook: reusing an earlier notebook's class is fine; handing in this exercise's own
# reference, `utils.kv_cache.CachedMultiHeadAttention` (or an alias, a wrapper, a subclass of it), is not.
#
# 这里要你写的是缓存和它的掩码，而不是 softmax：你可以调用 `F.scaled_dot_product_attention(q, k, v, attn_mask=~causal_mask(T_new, T_total))`（它的 `attn_mask` 标记的是 **允许** 的键，而它的 `is_causal=True` 是左上对齐的）。你也可以继承笔记本 06 的 `MultiHeadAttention`（上面已导入），写你自己的 `forward`。这条规则在每个笔记本中都一样：复用之前笔记本中的类是可以的；交上本练习自己的参考实现 `utils.kv_cache.CachedMultiHeadAttention`（或它的别名、包装、子类）则不行。
#
# <!-- rules: CachedMultiHeadAttention -->
#
# #### Rules that grading checks · 评分检查的规则 (`CachedMultiHeadAttention`)
#
# - The course's `cached_attention` may not run inside your code: this exercise is that part of the work.
# - Raises `ValueError` when the new tokens do not fit in the cache: its `update` raises it (let it through); a write that fills the cache exactly is fine.
# - Not graded (the caller guarantees it): the cached and new tokens together are at most `context_length`.
# - Not graded (the caller guarantees it): `d_out` is divisible by `num_heads`.
# - Graded in float32, float64 and bfloat16: the layer moved with `.to(dtype)`, with a cache of that dtype, computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - With a cache, only the new tokens are projected; everything kept between calls is in the cache it is given (the layer holds no state); without one, the layer trains (gradients reach every weight).
# - Keeps `self.num_heads` and `self.head_dim` (the GPT reads them).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 课程的 `cached_attention` 不能在你的代码中运行：本练习要你写的正是这部分工作。
# - 新词元放不进缓存时抛出 `ValueError`：缓存的 `update` 会抛出它（让它传出来）；恰好填满缓存的写入是可以的。
# - 不评分（由调用者保证）：已缓存的和新的词元加起来不超过 `context_length`。
# - 不评分（由调用者保证）：`d_out` 能被 `num_heads` 整除。
# - 在 float32、float64、bfloat16 下评分：用 `.to(dtype)` 转换、配同一 dtype 缓存的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 有缓存时只投影新的词元；调用之间保存的一切都在传入的缓存里（层本身不保存状态）；没有缓存时，层要参与训练（梯度传到每个权重）。
# - 保留 `self.num_heads` 和 `self.head_dim`（GPT 会读取它们）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "CachedMultiHeadAttention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class CachedMultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, num_heads, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        if d_out % num_heads:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        ### END SOLUTION

    def forward(self, x, kv_cache=None):  # (B, T_new, d_in) -> (B, T_new, d_out)
        ### BEGIN SOLUTION
        T_new = x.shape[1]
        q = split_heads(self.W_query(x), self.num_heads)  # (B, H, T_new, hd)
        k = split_heads(self.W_key(x), self.num_heads)
        v = split_heads(self.W_value(x), self.num_heads)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, H, T_total, hd)
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5  # (B, H, T_new, T_total)
        scores = scores.masked_fill(causal_mask(T_new, k.shape[2], device=x.device), float("-inf"))
        return self.out_proj(merge_heads(torch.softmax(scores, dim=-1) @ v))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_CachedMultiHeadAttention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close
from utils.kv_cache import KVCache as ReferenceCache

from autograder.checks import nb07

with nb07.as_graded(CachedMultiHeadAttention):
    torch.manual_seed(0)
    layer = CachedMultiHeadAttention(4, 6, 8, 2).eval()
    x = torch.randn(1, 5, 4)
    with torch.no_grad():
        full = layer(x)
        cache = ReferenceCache(1, 8, 2, 3)
        steps = torch.cat([layer(x[:, :3], kv_cache=cache), layer(x[:, 3:4], kv_cache=cache), layer(x[:, 4:], kv_cache=cache)], dim=1)
    expect_close(steps, full, "Prefill 3 tokens, then decode 1 and 1: the outputs should equal one pass over all 5 tokens.",
                 "先预填充 3 个词元，再逐个解码 2 个：输出应与对全部 5 个词元做一次计算的结果相同。")
    print("✓ CachedMultiHeadAttention")

# %% nbgrader={"grade": true, "grade_id": "test_CachedMultiHeadAttention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb07
nb07.check_CachedMultiHeadAttention(CachedMultiHeadAttention)
### END HIDDEN TESTS

# %% [markdown]
# Your layer has the same parameters as notebook 06's `MultiHeadAttention`, so we can copy weights
# and compare. Then we put it into the GPT, with your `KVCache` in every layer, and check that prefill
# plus one-token steps give the same logits as one pass over the whole sequence.
#
# 你的层和笔记本 06 的 `MultiHeadAttention` 参数相同，所以可以复制权重来比较。然后我们把它放进 GPT，每层用你的 `KVCache`，检查预填充加逐个词元的步骤与对整个序列做一次计算得到的 logits 是否相同。

# %%
torch.manual_seed(1)
mha06 = MultiHeadAttention(16, 16, 10, 0.0, 4).eval()
mine = CachedMultiHeadAttention(16, 16, 10, 4).eval()
mine.load_state_dict(mha06.state_dict(), strict=False)  # 06 also stores its mask buffer
x = torch.randn(2, 10, 16)
with torch.no_grad():
    print("equal to notebook 06's layer (atol 1e-6):", torch.allclose(mine(x), mha06(x), atol=1e-6))

my_attention = lambda c: CachedMultiHeadAttention(c.emb_dim, c.emb_dim, c.context_length, c.n_heads, c.qkv_bias)
torch.manual_seed(2)
my_model = GPTModel(cfg, attention=my_attention).eval()
seq = torch.randint(0, cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(3))
with torch.no_grad():
    full = my_model(seq)
    caches = my_model.new_caches(2, cfg.context_length, KVCache)  # one of YOUR caches per layer
    stepwise = [my_model(seq[:, :8], caches)] + [my_model(seq[:, t:t + 1], caches) for t in range(8, 12)]
print("logits, prefill 8 + 4 single steps equal one pass (atol 1e-5):",
      torch.allclose(torch.cat(stepwise, dim=1), full, atol=1e-5))
print("cache lengths:", [c.seq_len for c in caches])

# %% [markdown]
# The model feeds the new tokens their true positions: it reads the number of cached tokens,
# `caches[0].seq_len`, and looks up position embeddings from there. If positions restarted at 0 for
# each new token, every step would look like the start of a text.
#
# 模型会给新词元它们真实的位置：它读取已缓存的词元数 `caches[0].seq_len`，并从那里开始查找位置嵌入。如果每个新词元的位置都从 0 重新开始，每一步看起来都会像是一段文本的开头。

# %% [markdown]
# ### Exercise 3 · `generate` · 练习 3
#
# Greedy decoding. `token_ids` is `(B, T)`; return `(B, T + max_new_tokens)`: the prompt followed by
# the new tokens. Each new token is the **argmax** of the logits at the **last** position (no
# sampling). With `use_cache=True`: make fresh caches with `model.new_caches(B, T + max_new_tokens)`
# (one `utils.kv_cache.KVCache` per layer, so this exercise does not depend on yours), run the prompt
# once (`model(token_ids, caches)`), then feed only the newest token at each step. With
# `use_cache=False`: run the whole sequence, `model(ids)`, at every step. Wrap it in
# `torch.no_grad()`. The model's attention may be multi-head or grouped-query (Exercise 5), and its
# `T + max_new_tokens` is at most its `context_length`: `model.new_caches` shapes every layer's cache
# for you.
#
# 贪心解码。`token_ids` 的形状为 `(B, T)`；返回 `(B, T + max_new_tokens)`：提示后面接新的词元。每个新词元是 **最后一个** 位置 logits 的 **argmax**（不采样）。当 `use_cache=True` 时：用 `model.new_caches(B, T + max_new_tokens)` 新建缓存（每层一个 `utils.kv_cache.KVCache`，这样本练习不依赖你的实现），把提示送入一次（`model(token_ids, caches)`），之后每一步只送入最新的词元。当 `use_cache=False` 时：每一步都把整个序列送入 `model(ids)`。用 `torch.no_grad()` 包起来。模型的注意力可能是多头的，也可能是分组查询的（练习 5），而且 `T + max_new_tokens` 不超过它的 `context_length`：`model.new_caches` 会为你确定每一层缓存的形状。
#
# <!-- rules: generate -->
#
# #### Rules that grading checks · 评分检查的规则 (`generate`)
#
# - Not graded (the caller guarantees it): `T + max_new_tokens` is at most the model's `context_length`.
# - Graded in float32 and float64: models of that dtype (make the caches with `model.new_caches`, which follows the model); the result is token ids (`torch.long`), the prompt first.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Greedy and the same tokens with and without the cache, for every attention the GPT may hold (multi-head, grouped-query, multi-query); the model runs under `torch.no_grad()`; with the cache, the prompt is fed once, then only the newest token.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：`T + max_new_tokens` 不超过模型的 `context_length`。
# - 在 float32、float64 下评分：使用该 dtype 的模型（用 `model.new_caches` 建缓存，它会跟随模型）；结果是词元 id（`torch.long`），提示在前。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 贪心解码，有缓存和没有缓存时给出相同的词元，无论 GPT 用哪种注意力（多头、分组查询、多查询）；模型在 `torch.no_grad()` 下运行；有缓存时提示只送入一次，之后只送入最新的词元。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "generate", "locked": false, "schema_version": 3, "solution": true, "task": false}
def generate(model, token_ids, max_new_tokens, use_cache=True):
    """Greedy: (B, T) -> (B, T + max_new_tokens)."""
    ### BEGIN SOLUTION
    B, T = token_ids.shape
    ids = token_ids
    with torch.no_grad():
        if use_cache:
            caches = model.new_caches(B, T + max_new_tokens)
            logits = model(token_ids, caches)  # prefill
        for step in range(max_new_tokens):
            if not use_cache:
                logits = model(ids)  # the whole sequence, every step
            next_id = logits[:, -1].argmax(dim=-1, keepdim=True)  # (B, 1)
            ids = torch.cat((ids, next_id), dim=1)
            if use_cache and step + 1 < max_new_tokens:
                logits = model(next_id, caches)  # decode: one token
    return ids
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_generate", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect
from utils.gpt import GPTConfig, GPTModel

from autograder.checks import nb07

with nb07.as_graded(generate):
    torch.manual_seed(0)
    tiny = GPTModel(GPTConfig(vocab_size=30, context_length=16, emb_dim=8, n_heads=2, n_layers=2)).eval()
    start = torch.tensor([[1, 2, 3]])
    with_cache, without = generate(tiny, start, 5, use_cache=True), generate(tiny, start, 5, use_cache=False)
    expect(tuple(with_cache.shape) == (1, 8) and torch.equal(with_cache[:, :3], start),
           "generate should return the prompt followed by max_new_tokens new tokens.", "generate 应返回提示后面接 max_new_tokens 个新词元。")
    expect(torch.equal(with_cache, without), "Greedy generation should give the same tokens with and without the cache.",
           "贪心生成在有缓存和没有缓存时应给出相同的词元。")
    print("✓ generate")

# %% nbgrader={"grade": true, "grade_id": "test_generate_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb07
nb07.check_generate(generate)
### END HIDDEN TESTS

# %% [markdown]
# ## What the cache buys · 缓存带来了什么
#
# Same model, same prompt, with and without the cache: the tokens must be identical (the cache changes
# how much is computed, not what), and we time both in the same run.
#
# 同一个模型、同一个提示，有缓存和没有缓存：词元必须完全相同（缓存改变的是计算量，而不是计算结果），我们在同一次运行中为两者计时。

# %%
# NBVAL_IGNORE_OUTPUT
new_tokens = 8 if GRADING else 80
demo_model, demo_prompt = copy.deepcopy(model).to(DEVICE), prompt.to(DEVICE)
timings = {}
for use_cache in tqdm([True, False, True, False], desc="generating"):
    seconds, out = timed(lambda: generate(demo_model, demo_prompt, new_tokens, use_cache=use_cache), DEVICE)
    timings.setdefault(use_cache, []).append(seconds)
    timings.setdefault(f"tokens {use_cache}", out)
same = torch.equal(timings["tokens True"], timings["tokens False"])
speed = {c: new_tokens / min(timings[c]) for c in (True, False)}
print(f"{new_tokens} new tokens, identical with and without the cache: {same}")
print(f"with the cache:    {speed[True]:7.1f} tokens/s")
print(f"without the cache: {speed[False]:7.1f} tokens/s")
print(f"speed-up on the machine that ran this: {speed[True] / speed[False]:.1f}x")

# %% [markdown]
# The speed-up printed above is what the machine that ran this notebook measured. An uncached step
# redoes the projections and the feed-forward of every token of the prefix; a cached step does them
# for one token. That is what stops growing with the text. The cached step is not free of the prefix,
# though: its query still attends over every cached key and value, $O(T \cdot d)$ per layer per step for
# $T$ cached tokens of width $d$, against $O(d^2)$ per layer for the projections and the feed-forward.
# At this small size a good part of each step is also Python overhead that both paths pay.
# `python -m utils.bench_generate` runs the same comparison at GPT-2 small's full size (12 layers,
# width 768, 256 new tokens) in a few minutes. Where a GPU is present, this cell and the other timing
# cells of this notebook run on it (`utils.benchmark.demo_device()`) and measure the GPU. The same
# comparison at GPT-2 small's size was also run for this course on an NVIDIA H200; the next cell
# prints those figures from a table, labelled with the runs that produced them.
#
# 上面打印的加速比是运行本笔记本的机器测得的。不带缓存的一步要为前缀中的每个词元重做投影和前馈网络；带缓存的一步只为一个词元做这些。随文本增长而不再增长的正是这一部分。但带缓存的一步并没有摆脱前缀：它的查询仍然要关注缓存中的每一个键和值，对 $T$ 个宽度为 $d$ 的已缓存词元，每层每步是 $O(T \cdot d)$，而投影和前馈网络每层是 $O(d^2)$。在这么小的规模下，每一步还有相当一部分时间是两条路径都要付出的 Python 开销。`python -m utils.bench_generate` 在 GPT-2 small 的完整规模（12 层，宽度 768，生成 256 个新词元）下做同样的比较，几分钟即可复现。有 GPU 时，这个单元格和本笔记本其他计时单元格都在 GPU 上运行（`utils.benchmark.demo_device()`），测的是 GPU。同样的比较在 GPT-2 small 的规模下也为本课程在一块 NVIDIA H200 上运行过；下一个单元格从一张表中打印这些数字，并标明得出它们的运行。

# %%
# Measured for this course on an NVIDIA H200 (torch 2.11, CUDA 13), 2026-11-26, GPT-2 small's size (12 layers,
# width 768, float32), batch 1, prompt of 8 tokens, greedy, utils.bench_generate: run 1 for the course's reference
# figures; run 2 by `python -m utils.device_report --device cuda` (CHANGELOG.md, issue 31), 256 new tokens only.
H200_TOKENS_PER_S = {8: {"run 1": (230, 164)}, 256: {"run 1": (219, 209)}}  # (with the cache, without)
H200_SPEEDUP = {8: {"run 1": 1.40}, 256: {"run 1": 1.05, "run 2": 1.30}}  # with the cache / without
CPU_ONE_THREAD_SPEEDUP = 2.6  # run 1's machine, one CPU thread, 8 new tokens
print("measured on an NVIDIA H200, GPT-2 small's size, batch 1: speed with the cache / without")
for new, runs in H200_SPEEDUP.items():
    parts = [f"{run} {x:.2f}x" + (f" ({H200_TOKENS_PER_S[new][run][0]} against {H200_TOKENS_PER_S[new][run][1]} tokens/s)"
                                  if run in H200_TOKENS_PER_S.get(new, {}) else "") for run, x in runs.items()]
    spread = f"; range over the runs {min(runs.values()):.2f}-{max(runs.values()):.2f}x" if len(runs) > 1 else "; one run"
    print(f"{new:4} new tokens: " + ", ".join(parts) + spread)
print(f"the same model on one CPU thread of run 1's machine, 8 new tokens: {CPU_ONE_THREAD_SPEEDUP:.1f}x")

# %% [markdown]
# On that GPU the cache bought much less than on one CPU thread (compare the printed ratios): a GPU
# step of a model this small waits on the launches of its many small kernels more than on their
# arithmetic. At 256 new tokens the two runs differ (the printed range): a loop of launches is
# timed as much by the machine that issues them as by the GPU.
#
# 在那块 GPU 上，缓存带来的收益比在一个 CPU 线程上小得多（比较打印出的比值）：这么小的模型在 GPU 上的一步，等待的主要是一个个小内核的启动，而不是它们的算术。生成 256 个新词元时两次运行的结果不同（见打印出的范围）：一串内核启动的耗时既取决于 GPU，也同样取决于发出这些启动的机器。

# %% [markdown]
# ## Prefill and decode: two cost regimes · 预填充与解码：两种代价
#
# So generation has two regimes. **Prefill** runs $T$ prompt tokens at once: $T$ rows through every
# weight matrix, and a $(T, T)$ attention in each layer, so its time grows faster than $T$ once the
# attention dominates. A cached **decode** step runs one token: the weights cost the same at any
# length, and only the attention over the cache grows, linearly in $T$. The cell below measures both
# on the same small model with a longer context (`utils.bench_generate.LONG`: 4 layers of width 128,
# context 2,048), at several lengths: the time of one prefill pass over $T$ tokens up to 1,024 (which is
# also what one uncached step costs at that length), and the median time of a cached decode step with
# $T$ tokens in the cache, up to 2,000 (the cache is filled with random keys and values: what a step
# costs does not depend on what they are).
#
# 所以生成有两种代价。**预填充** 一次处理 $T$ 个提示词元：$T$ 行经过每个权重矩阵，每层还有一个 $(T, T)$ 的注意力，所以一旦注意力占主导，它的时间增长得比 $T$ 更快。带缓存的 **解码** 一步只处理一个词元：权重的开销在任何长度下都一样，只有对缓存的注意力在增长，且与 $T$ 成线性关系。下面的单元格在同一个小模型上、用更长的上下文（`utils.bench_generate.LONG`：4 层，宽度 128，上下文 2,048），在几个长度下测量两者：对最多 1,024 个词元做一次预填充的时间（这也正是不带缓存时在该长度下一步的开销），以及缓存中有 $T$ 个词元（最多 2,000 个）时一次带缓存解码步骤的时间中位数（缓存用随机的键和值填充：一步的开销与它们的值无关）。

# %%
# NBVAL_IGNORE_OUTPUT
long_model = build(LONG, device=DEVICE)
contexts = [32, 256, 1024] if GRADING else [32, 64, 128, 256, 512, 1024, 1536, 2000]
regimes = step_times(long_model, contexts, steps=3 if GRADING else 15, prefill_max=256 if GRADING else 1024)
print(f"{'context T':>9}  {'prefill ms':>10}  {'prefill ms/token':>16}  {'decode step ms':>14}")
for r in regimes:
    prefill = (f"{1e3 * r['prefill_s']:>10.2f}  {1e3 * r['prefill_s'] / r['context']:>16.4f}" if r["prefill_s"]
               else f"{'(not run)':>10}  {'':>16}")
    print(f"{r['context']:>9}  {prefill}  {1e3 * r['decode_s']:>14.3f}")
print(order_warning(regimes, "context", ["prefill_s"]) or "prefill times grow with T: no sign of a disturbed run")
timed_prefill = [r for r in regimes if r["prefill_s"]]
a, b = timed_prefill[0], timed_prefill[-1]
prefill_growth = b["prefill_s"] / a["prefill_s"]
print(f"prefill, T = {a['context']} to {b['context']} ({b['context'] // a['context']}x longer): "
      f"{prefill_growth:.0f}x the time, {'faster' if prefill_growth > b['context'] / a['context'] else 'no faster'} than T")
floor, b = min(regimes, key=lambda r: r["decode_s"]), regimes[-1]  # short contexts are the noisiest
decode_growth = b["decode_s"] / floor["decode_s"]
print(f"cached decode step: {1e3 * floor['decode_s']:.3f} ms at its fastest (T = {floor['context']}), "
      f"{1e3 * b['decode_s']:.3f} ms at T = {b['context']}: {decode_growth:.1f}x the time, "
      f"{'more slowly than' if decode_growth < prefill_growth else 'no more slowly than'} prefill over its range")
fig, ax = plt.subplots(figsize=(6.5, 3.2))
ax.loglog([r["context"] for r in timed_prefill], [1e3 * r["prefill_s"] for r in timed_prefill], "o-",
          label="prefill of T tokens = one uncached step")
ax.loglog(contexts, [1e3 * r["decode_s"] for r in regimes], "s-", label="one cached decode step")
ax.set_xlabel("context length T (tokens)"); ax.set_ylabel("ms"); ax.legend(); ax.set_title("two cost regimes")
plt.show()

# %% [markdown]
# The last two lines printed how much each grew over the range of lengths measured, on the machine
# that ran this notebook, and how that compares. What to look for: prefill growing with $T$ and, at
# the long end, faster than $T$ (its time per token rises: the $(T, T)$ attention); the cached decode
# step growing much more slowly, from a floor set by the weights and the Python overhead, by the
# attention over the cache. For a long text
# that attention is the part of each new token's cost that keeps growing, and it reads the whole
# cache at every step. Grouped-query attention (below) and DeepSeek's multi-head latent attention
# (notebook 09) make the cache smaller; whether a step also *reads* less depends on how the attention
# is computed, as the section on grouped-query attention shows.
#
# 最后两行打印了在所测长度范围内两者各增长了多少（来自运行本笔记本的机器），以及两者的比较。要看的是：预填充随 $T$ 增长，在长的一端增长得比 $T$ 更快（每个词元的时间在上升：这是 $(T, T)$ 的注意力）；带缓存的解码步骤增长得慢得多：它从由权重和 Python 开销决定的底线出发，因对缓存的注意力而增长。对于长文本，每个新词元的代价中不断增长的正是这部分注意力，而它每一步都要读取整个缓存。下面的分组查询注意力和 DeepSeek 的多头潜在注意力（笔记本 09）把缓存变小；一步是否也因此 *读取* 得更少，取决于注意力是怎样计算的，分组查询注意力一节会说明这一点。

# %% [markdown]
# ## Preallocated or `torch.cat` · 预先分配还是 `torch.cat`
#
# A cache can also grow with `torch.cat((old, new), dim=2)` at each step, as the first version in
# Raschka's repository does. That is shorter to write, but `cat` allocates a new tensor and copies the
# whole cache every step: appending the $t$-th token copies $t$ positions, so $N$ tokens copy about
# $N^2/2$ positions in total, against $N$ for a preallocated buffer. `utils.kv_cache.ConcatKVCache`
# has the same interface as your `KVCache`; time only the cache updates of one layer of GPT-2 small's
# shape (12 heads of 64), one token at a time.
#
# 缓存也可以在每一步用 `torch.cat((old, new), dim=2)` 增长，Raschka 仓库里的第一个版本就是这样做的。这样写起来更短，但 `cat` 每一步都要分配一个新张量并复制整个缓存：追加第 $t$ 个词元要复制 $t$ 个位置，所以 $N$ 个词元总共大约复制 $N^2/2$ 个位置，而预先分配的缓冲区只需 $N$ 个。`utils.kv_cache.ConcatKVCache` 与你的 `KVCache` 接口相同；我们只为 GPT-2 small 形状的一层（12 个 64 维的头）的缓存更新计时，每次一个词元。

# %%
# NBVAL_IGNORE_OUTPUT
def time_updates(cache_cls, n_tokens, heads=12, hd=64):
    cache = cache_cls(1, n_tokens, heads, hd, device=DEVICE)
    k_new = torch.randn(1, heads, 1, hd).to(DEVICE)

    def append_all():
        for _ in range(n_tokens):
            cache.update(k_new, k_new)

    return timed(append_all, DEVICE)[0]


n_tokens = 256 if GRADING else 512
update_s = {"KVCache (preallocated)": [], "ConcatKVCache (torch.cat)": []}
for _ in tqdm(range(3), desc="timing rounds"):
    update_s["KVCache (preallocated)"].append(time_updates(KVCache, n_tokens))
    update_s["ConcatKVCache (torch.cat)"].append(time_updates(ConcatKVCache, n_tokens))
best = {name: min(s) for name, s in update_s.items()}
for name, s in best.items():
    print(f"{name:27} {1e3 * s:8.1f} ms for {n_tokens} appends")
print(f"torch.cat / preallocated on the machine that ran this: {best['ConcatKVCache (torch.cat)'] / best['KVCache (preallocated)']:.1f}x")

# %% [markdown]
# The updates alone: `torch.cat` took the multiple printed above of the preallocated cache's time,
# and the gap widens with the length of the text. Whether that shows in tokens per second depends
# on what else a decoding step does. The next cell times decode steps alone (the caches filled with
# random keys and values first), preallocated against `torch.cat`, in two regimes measured in one
# run: the small model of the two-regimes plot above (`LONG`) at a long context (1,792 cached tokens:
# there the cache, which `torch.cat` copies whole at every step, is larger than the weights), and GPT-2 small's full
# size with a short text (about 500 MB of weights read per token, next to a cache of a few dozen
# tokens). `MB/token` is what one step reads (every weight once, one row of each embedding table,
# the cache); `% bw` is that times the tokens per second over this machine's read rate (box below).
#
# 单看缓存更新：`torch.cat` 所用的时间是预先分配缓存的上面打印的那么多倍，而且文本越长差距越大。这在每秒词元数上能否体现出来，取决于一步解码还做了什么。下一个单元格只为解码步骤计时（先用随机的键和值填好缓存），比较预先分配和 `torch.cat`，在一次运行中测量两种情形：上面两种代价图中的小模型（`LONG`）在长上下文下（已缓存 1,792 个词元：这时 `torch.cat` 每一步都要整个复制的缓存比权重还大），以及 GPT-2 small 的完整规模配上短文本（每个词元要读约 500 MB 的权重，而缓存只有几十个词元）。`MB/token` 是一步读取的字节数（每个权重一次、每个嵌入表的一行、缓存）；`% bw` 是它乘以每秒词元数再除以本机的读取速率（见下面的说明框）。

# %%
# NBVAL_IGNORE_OUTPUT
if GRADING:  # grading runs it small: the same code, two tiny regimes
    cases = {"small model, long context": (LONG, 256, 8), "small model, short context": (SMALL, 8, 8)}
else:
    cases = {"small model, long context": (LONG, 1792, 200), "full size, short context": (FULL, 8, 4)}
regime_rows = cache_regimes(cases, repeats=1 if GRADING else 5, device=DEVICE)
print(format_regimes(regime_rows))
copy_bytes = (16 if GRADING else 256) * 2 ** 20  # grading: a small copy, whose rate no one reads
print(f"read rate (utils.bandwidth.read_bandwidth, a matrix-vector product over 256 MiB, {torch.get_num_threads()} "
      f"thread): {read_bandwidth(device=DEVICE) / 1e9:.1f} GB/s; a copy, for reference: "
      f"{memory_bandwidth(n_bytes=copy_bytes, device=DEVICE) / 1e9:.1f} GB/s (read + written)")
llc = last_level_cache_bytes() if DEVICE == "cpu" else None  # a GPU's rows read the GPU's memory
print(f"last-level cache of this processor: {llc / 2**20:.0f} MiB" if llc else "last-level cache: not reported here")
for r in regime_rows if llc else []:
    times = r["bytes_per_token"] / llc
    print(f"{r['regime']:27} reads {times:5.1f}x the last-level cache per token: "
          + ("read `% bw` as the distance to the line" if times > 2 else "served partly from the cache, `% bw` is no distance to the line"))
long_row, full_row = regime_rows
print(f"preallocated / torch.cat: {long_row['ratio']:.2f}x at a long context, {full_row['ratio']:.2f}x at full size "
      f"with a short text; the update matters more where the cache dominates: {long_row['ratio'] > full_row['ratio']}")

# %% [markdown]
# > **How to read `% bw`.** The read rate is what one matrix-vector product over a weight far larger
# > than the processor's caches reached on this machine, on the threads the decode uses: the line a
# > decode that reads main memory approaches. For a row that reads several times the last-level
# > cache per token (the cell says which), `% bw` is how close its decode comes to that line, and
# > what separates it from 100% is everything else a step spends time on (arithmetic, Python, the
# > dispatch of each operation, many short reads instead of one long stream). A row whose bytes fit
# > in the cache is served partly from it between steps: the line is no ceiling there, its `% bw`
# > could pass 100%, and it is no measure of the distance to main memory's limit.
#
# > **怎样读 `% bw`。** 读取速率是在这台机器上、用解码所用的线程数，对一个远大于处理器缓存的权重做一次矩阵乘向量所达到的速率：从主存读取数据的解码所趋近的那条线。对于每个词元读取的字节数是末级缓存好几倍的那一行（单元格会指出是哪些），`% bw` 表示它的解码离这条线有多近，而它与 100% 之间的差距，就是一步中花在其他事情上的时间（算术运算、Python、每个运算的调度、许多短的读取而不是一条长的数据流）。字节数能放进缓存的那一行，在两步之间有一部分数据由缓存供给：这条线不是它的上限，它的 `% bw` 可能超过 100%，也不能衡量离主存上限有多远。

# %% [markdown]
# Read the two rows side by side. At a long context with a small model, each `torch.cat` copies
# the whole cache of every layer, and that cache outweighs what the rest of the step reads: look
# there for the larger ratio of preallocated to `torch.cat` (the first one printed). At full size
# with a short text the step reads hundreds of megabytes of weights, and the copy of a short cache
# may be lost in it (the second ratio; the last line says whether the update mattered more where
# the cache dominates). With a small model and a short text, as in the table at the end of this
# notebook, the copy a preallocated cache saves is a few dozen positions: expect the two to be
# within run-to-run noise of each other, in either order. Preallocation pays once that copy is
# large: at long contexts.
#
# 把两行并排读。小模型、长上下文时，每次 `torch.cat` 都要复制每一层的整个缓存，而这个缓存比一步中其他部分读取的数据还多：在这里找预先分配与 `torch.cat` 之比中较大的那个（打印的第一个）。完整规模、短文本时，一步要读取几百兆字节的权重，复制一个短缓存的开销可能淹没在其中（第二个比值；最后一行说明了缓存占主导时缓存更新是否更重要）。小模型配短文本时（本笔记本末尾的表格就是这种情形），预先分配的缓存省下的复制只有几十个位置：两者的差别预计在每次运行的噪声之内，先后顺序不定。只有当省下的复制很大时，也就是在长上下文下，预先分配才划算。

# %% [markdown]
# ## What the cache costs · 缓存的代价
#
# Each layer keeps a key and a value vector per KV head, per token, per sequence in the batch:
#
# 每一层为批中每个序列的每个词元、每个 KV 头保存一个键向量和一个值向量：
#
# $$\text{bytes} = 2 \times \text{batch} \times \text{tokens} \times \text{layers} \times \text{KV heads} \times \text{head\_dim} \times \text{bytes per element}$$
#
# The 2 is keys and values. Unlike the weights, this grows with the length of the text and with the
# number of texts served at once.
#
# 其中的 2 代表键和值。与权重不同，它随文本长度和同时服务的文本数量而增长。

# %% [markdown]
# ### Exercise 4 · `kv_cache_bytes` · 练习 4
#
# Return the number of bytes of the cache by the formula above, as an `int`; `bytes_per_element`
# defaults to 2 (bf16 or fp16).
#
# 按上面的公式返回缓存的字节数（`int`）；`bytes_per_element` 默认为 2（bf16 或 fp16）。
#
# <!-- rules: kv_cache_bytes -->
#
# #### Rules that grading checks · 评分检查的规则 (`kv_cache_bytes`)
#
# - dtype: the result is an `int`.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - dtype：结果是 `int`。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "kv_cache_bytes", "locked": false, "schema_version": 3, "solution": true, "task": false}
def kv_cache_bytes(batch_size, seq_len, n_layers, n_kv_heads, head_dim, bytes_per_element=2):
    ### BEGIN SOLUTION
    return 2 * batch_size * seq_len * n_layers * n_kv_heads * head_dim * bytes_per_element
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_kv_cache_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from autograder.checks import expect

from autograder.checks import nb07

with nb07.as_graded(kv_cache_bytes):
    expect(kv_cache_bytes(1, 1, 1, 1, 1) == 4, "One token, one layer, one head of width 1 in bf16: a key and a value of 2 bytes each, 4 bytes.",
           "一个词元、一层、一个宽度为 1 的头，bf16：一个键和一个值，各 2 字节，共 4 字节。")
    expect(kv_cache_bytes(2, 3, 4, 5, 6, 4) == 2 * 2 * 3 * 4 * 5 * 6 * 4, "kv_cache_bytes should multiply all its factors and 2 (keys and values).",
           "kv_cache_bytes 应把所有因子和 2（键和值）相乘。")
    print("✓ kv_cache_bytes")

# %% nbgrader={"grade": true, "grade_id": "test_kv_cache_bytes_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb07
nb07.check_kv_cache_bytes(kv_cache_bytes)
### END HIDDEN TESTS

# %% [markdown]
# First the formula against the real tensors: the caches of our small model, in float32 (4 bytes).
#
# 先用真实的张量检验公式：我们这个小模型的缓存，float32（4 字节）。

# %%
caches = model.new_caches(1, cfg.context_length)
real = sum(c.k.numel() * c.k.element_size() + c.v.numel() * c.v.element_size() for c in caches)
head_dim = cfg.emb_dim // cfg.n_heads
formula = kv_cache_bytes(1, cfg.context_length, cfg.n_layers, cfg.n_heads, head_dim, bytes_per_element=4)
print(f"bytes of the real cache tensors: {real:,}; formula: {formula:,}; equal: {real == formula}")

# %% [markdown]
# Now real models, in bf16 (2 bytes). GPT-2 small: 12 layers, 12 heads of 64, context 1,024.
# Llama-3-8B: 32 layers, 32 query heads but only **8 KV heads** of 128 (grouped-query attention,
# below), context 8,192, and for comparison the same model as if it had one KV head per query head.
# DeepSeek-V3 (61 layers, 128 heads, context 128K = 131,072 with YaRN) if it
# used plain multi-head attention: each head's key is 192 wide (128 + 64 for RoPE) and its value
# 128, which the formula covers with `head_dim = (192 + 128) / 2 = 160`. That is 40,960 numbers per
# token per layer: the cache of DeepSeek-V3's `naive` attention path. Notebook 09 shows how its
# multi-head latent attention keeps 576 instead.
#
# 现在看真实的模型，bf16（2 字节）。GPT-2 small：12 层，12 个 64 维的头，上下文 1,024。Llama-3-8B：32 层，32 个查询头，但只有 **8 个 KV 头**，每个 128 维（分组查询注意力，见下文），上下文 8,192；作为对照，再算同一个模型假如每个查询头各有一个 KV 头时的缓存。DeepSeek-V3（61 层，128 个头，借助 YaRN 上下文为 128K = 131,072）如果使用普通多头注意力：每个头的键是 192 维（128 + 64 给 RoPE），值是 128 维，公式里用 `head_dim = (192 + 128) / 2 = 160` 来表示。这相当于每个词元每层 40,960 个数：正是 DeepSeek-V3 `naive` 注意力路径的缓存。笔记本 09 会展示它的多头潜在注意力如何只保存 576 个数。

# %%
models = {  # name: (layers, KV heads, head_dim, context length)
    "GPT-2 small": (12, 12, 64, 1024),
    "Llama-3-8B (8 KV heads)": (32, 8, 128, 8192),
    "Llama-3-8B if 32 KV heads": (32, 32, 128, 8192),
    "DeepSeek-V3 as plain MHA": (61, 128, 160, 131072),
}
def human(n_bytes):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n_bytes < 1024 or unit == "GiB":
            return f"{n_bytes:,.0f} {unit}" if unit == "B" else f"{n_bytes:,.1f} {unit}"
        n_bytes /= 1024


print(f"{'model':26} {'per token':>12} {'context':>8} {'full context, batch 1':>22}")
for name, (layers, kv_heads, hd, context) in models.items():
    per_token = kv_cache_bytes(1, 1, layers, kv_heads, hd)
    full_ctx = kv_cache_bytes(1, context, layers, kv_heads, hd)
    print(f"{name:26} {human(per_token):>12} {context:>8,} {human(full_ctx):>22}")
print("DeepSeek-V3, numbers per token per layer:", 2 * 128 * 160)

# %% [markdown]
# How large is that last number? Take a node of 8 H100 GPUs, 80 GB each by NVIDIA's datasheet;
# `nvidia-smi` reports 81,559 MiB per H100 80GB (quoted in NVIDIA/nccl issue 1264 and
# modal-labs/modal-client pull request 2797). The weights come on top: DeepSeek-V3's 671B parameters
# take about 671 GB in FP8 at one byte each (an approximation: the checkpoint keeps its embedding and
# output head in bf16, and adds a 14B-parameter module for multi-token prediction, notebook 12). That
# alone is about as much as the whole node holds (the cell prints the ratios), which is why serving
# engines run DeepSeek-V3 in FP8 on 8 H200 GPUs (141 GB each) or on two 8xH100 nodes (the vLLM recipe
# for DeepSeek-V3 and SGLang's DeepSeek-V3 usage page).
#
# 最后那个数有多大？以一个有 8 块 H100 GPU 的节点为例，按 NVIDIA 的规格表每块 80 GB；`nvidia-smi` 对每块 H100 80GB 报告 81,559 MiB（见 NVIDIA/nccl 的 issue 1264 和 modal-labs/modal-client 的 pull request 2797）。权重还要另算：DeepSeek-V3 的 671B 个参数用 FP8 存储（每个一字节）约占 671 GB（这是近似值：检查点里的嵌入层和输出头是 bf16，另外还有一个 14B 参数的多词元预测模块，见笔记本 12）。光是权重就差不多等于整个节点的显存（单元格打印了比值），所以推理引擎用 FP8 部署 DeepSeek-V3 时，使用 8 块 H200 GPU（每块 141 GB）或两个 8xH100 节点（见 vLLM 的 DeepSeek-V3 部署指南和 SGLang 的 DeepSeek-V3 使用说明）。

# %%
v3_cache = kv_cache_bytes(1, 131072, 61, 128, 160)
node_datasheet = 8 * 80 * 10**9  # 8 x 80 GB
node_reported = 8 * 81559 * 2**20  # 8 x 81,559 MiB, what nvidia-smi shows
print(f"DeepSeek-V3 as plain MHA, one 128K-token sequence: {v3_cache / 1e9:,.0f} GB = {v3_cache / 2**30:,.0f} GiB")
print(f"8xH100 node, datasheet 8 x 80 GB: {node_datasheet / 1e9:,.0f} GB; cache / node = {v3_cache / node_datasheet:.2f}")
print(f"8xH100 node, as nvidia-smi reports it: {node_reported / 1e9:,.0f} GB; cache / node = {v3_cache / node_reported:.2f}")
weights_fp8 = 671e9  # about one byte per parameter
node_h200 = 8 * 141 * 10**9  # 8 x 141 GB, H200 datasheet
print(f"the weights in FP8, about {weights_fp8 / 1e9:,.0f} GB: weights / 8xH100 node = {weights_fp8 / node_datasheet:.2f} "
      f"(datasheet), {weights_fp8 / node_reported:.2f} (nvidia-smi); weights / 8xH200 node ({node_h200 / 1e9:,.0f} GB) = "
      f"{weights_fp8 / node_h200:.2f}")
print(f"cache + weights = {(v3_cache + weights_fp8) / node_reported:.1f} 8xH100 nodes")

# %% [markdown]
# The cache of a single 128K-token sequence would be more than the whole node's memory by the
# datasheet's count, and nearly all of it by `nvidia-smi`'s (the ratios printed), before the weights,
# which need about one more node, and before any batching. Llama-3-8B's cache is 4x smaller per
# token than it would be with one KV head per query head (128 KiB against 512 KiB in the table above),
# because it keeps 8 KV heads instead of 32. That is the next idea.
#
# 一条 128K 词元的序列，其缓存按规格表计算就超过了整个节点的显存，按 `nvidia-smi` 的数字也几乎占满（见打印的比值），这还没算需要大约再一个节点的权重，也还没有任何批处理。Llama-3-8B 每个词元的缓存比每个查询头各有一个 KV 头时小 4 倍（上表中 128 KiB 对 512 KiB），因为它只保存 8 个 KV 头而不是 32 个。这就是下一个思路。
#
# Unlike the weights, the cache grows with the text and with the batch. The plot puts Llama-3-8B's
# cache in bf16 against its weights in bf16 (8,030,261,248 parameters, counted from its published
# configuration in the cell), for batches of 1, 16 and 64: each line crosses the weights where the
# cache becomes the larger of the two, and the cell prints where.
#
# 与权重不同，缓存随文本和批增长。下图把 Llama-3-8B 的 bf16 缓存与它的 bf16 权重（8,030,261,248 个参数，在单元格里由它公开的配置算出）放在一起比较，批大小分别为 1、16 和 64：每条线与权重线相交的地方，就是缓存变得比权重更大的地方，单元格会打印出这些位置。

# %%
# Llama-3-8B (its config.json): vocabulary 128,256, width 4,096, 32 layers, feed-forward 14,336,
# 32 query heads and 8 KV heads of 128, untied input and output embeddings, two RMSNorms per layer.
vocab, width, layers, ffn, kv_width = 128256, 4096, 32, 14336, 8 * 128
per_layer = 2 * width * width + 2 * width * kv_width + 3 * width * ffn + 2 * width
llama_params = 2 * vocab * width + layers * per_layer + width
weights = 2 * llama_params  # bf16
print(f"Llama-3-8B parameters: {llama_params:,}; weights in bf16: {weights / 2**30:.1f} GiB")
lengths = [2**i for i in range(8, 18)]  # 256 .. 131,072 tokens
fig, ax = plt.subplots(figsize=(6.5, 3.4))
for batch in (1, 16, 64):
    ax.loglog(lengths, [kv_cache_bytes(batch, t, 32, 8, 128) / 2**30 for t in lengths], label=f"KV cache, batch {batch}")
    crossing = weights / kv_cache_bytes(batch, 1, 32, 8, 128)
    print(f"batch {batch:>2}: the cache outgrows the weights past {crossing:,.0f} tokens per sequence")
    ax.plot(crossing, weights / 2**30, "ko")
ax.axhline(weights / 2**30, color="k", linestyle="--", label="weights (bf16)")
ax.axvline(8192, color="gray", linestyle=":", label="Llama 3's context, 8,192")
ax.set_xlabel("tokens per sequence"); ax.set_ylabel("GiB"); ax.legend(fontsize=8)
ax.set_title("Llama-3-8B: KV cache against weights")
plt.show()

# %% [markdown]
# At batch 1 the cache passes the weights only at 122,532 tokens per sequence, far beyond Llama 3's
# 8,192-token context; at batch 16 it does within that context (7,658 tokens), and at batch 64 after
# 1,915 tokens. Serving many long texts at once is where the cache, not the model, fills the GPU.
#
# 批大小为 1 时，每条序列要到 122,532 个词元缓存才超过权重，远在 Llama 3 的 8,192 词元上下文之外；批大小为 16 时，在这个上下文之内就超过了（7,658 个词元）；批大小为 64 时，1,915 个词元之后就超过了。同时服务许多长文本时，占满 GPU 的是缓存，而不是模型。

# %% [markdown]
# ## Multi-query and grouped-query attention · 多查询注意力与分组查询注意力
#
# The cache holds keys and values; queries are never cached. So the number of **KV heads** sets the
# cache size, and the number of query heads does not. Multi-query attention (MQA, Shazeer 2019) keeps
# all query heads but gives them a **single** shared key/value head. Grouped-query attention (GQA,
# Ainslie et al. 2023) sits in between: `num_heads` query heads in `num_kv_groups` groups, each group
# sharing one key/value head. Query head `h` uses group `h // (num_heads // num_kv_groups)`: with 4
# heads and 2 groups, heads 0 and 1 use group 0, heads 2 and 3 use group 1. `num_kv_groups = 1` is
# MQA, `num_kv_groups = num_heads` is ordinary multi-head attention, and the cache shrinks by
# `num_heads / num_kv_groups`.
#
# 缓存保存的是键和值；查询从不缓存。所以决定缓存大小的是 **KV 头** 的数量，而不是查询头的数量。多查询注意力（MQA，Shazeer 2019）保留所有查询头，但只给它们 **一个** 共享的键/值头。分组查询注意力（GQA，Ainslie 等 2023）介于两者之间：`num_heads` 个查询头分成 `num_kv_groups` 组，每组共享一个键/值头。查询头 `h` 使用第 `h // (num_heads // num_kv_groups)` 组：4 个头、2 组时，头 0 和 1 使用第 0 组，头 2 和 3 使用第 1 组。`num_kv_groups = 1` 就是 MQA，`num_kv_groups = num_heads` 就是普通的多头注意力，缓存缩小为原来的 `num_kv_groups / num_heads`。
#
# In code, `tensor.repeat_interleave(g, dim=1)` turns KV heads `(k0, k1)` into `(k0, k0, k1, k1)`,
# which is this assignment; `tensor.repeat(1, g, 1, 1)` gives `(k0, k1, k0, k1)`, which is not.
#
# 在代码中，`tensor.repeat_interleave(g, dim=1)` 把 KV 头 `(k0, k1)` 变成 `(k0, k0, k1, k1)`，这正是上面的分配方式；`tensor.repeat(1, g, 1, 1)` 得到的是 `(k0, k1, k0, k1)`，不是。

# %%
kv = torch.tensor([0, 1]).view(1, 2, 1, 1)
print("repeat_interleave:", kv.repeat_interleave(2, dim=1).flatten().tolist(), "  repeat:", kv.repeat(1, 2, 1, 1).flatten().tolist())
print("group of each query head (4 heads, 2 groups):", [h // (4 // 2) for h in range(4)])

# %% [markdown]
# ### Exercise 5 · `GroupedQueryAttention` · 练习 5
#
# Like your `CachedMultiHeadAttention` (the same limits: let the cache's `ValueError` through), but
# `W_key` and `W_value` map `d_in` to `num_kv_groups * head_dim` (with `head_dim = d_out // num_heads`).
# In `forward(x, kv_cache=None)`, split the keys and values into `num_kv_groups` heads, update the cache **with those** (that is where
# the memory is saved), and only then repeat each KV head for the query heads of its group. Keep
# `self.num_heads`, `self.head_dim` and `self.num_kv_heads` (= `num_kv_groups`): the GPT makes each
# layer's cache with `num_kv_heads` heads. `F.scaled_dot_product_attention(..., enable_gqa=True)`,
# which assigns query head h to KV head h // r as here (r = num_heads / num_kv_groups), is allowed: the grouping is what you write, not the
# softmax.
#
# 与你的 `CachedMultiHeadAttention` 类似（限制相同：让缓存的 `ValueError` 传出来），但 `W_key` 和 `W_value` 把 `d_in` 映射到 `num_kv_groups * head_dim`（`head_dim = d_out // num_heads`）。在 `forward(x, kv_cache=None)` 中，把键和值拆成 `num_kv_groups` 个头，**用它们** 更新缓存（内存正是在这里省下的），然后才为每个组里的查询头重复对应的 KV 头。请保留 `self.num_heads`、`self.head_dim` 和 `self.num_kv_heads`（= `num_kv_groups`）：GPT 按 `num_kv_heads` 个头为每一层建立缓存。`F.scaled_dot_product_attention(..., enable_gqa=True)` 与这里一样，把查询头 h 分给 KV 头 h // r（r = num_heads / num_kv_groups），可以使用：你要写的是分组，而不是 softmax。
#
# <!-- rules: GroupedQueryAttention -->
#
# #### Rules that grading checks · 评分检查的规则 (`GroupedQueryAttention`)
#
# - The course's `cached_attention` may not run inside your code: this exercise is that part of the work.
# - Raises `ValueError` when the new tokens do not fit in the cache: its `update` raises it (let it through); a write that fills the cache exactly is fine.
# - Not graded (the caller guarantees it): the cached and new tokens together are at most `context_length`.
# - Not graded (the caller guarantees it): `d_out` is divisible by `num_heads`, and `num_heads` by `num_kv_groups`.
# - Graded in float32, float64 and bfloat16: the layer moved with `.to(dtype)`, with a cache of that dtype, computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - With a cache, only the new tokens are projected; everything kept between calls is in the cache it is given (the layer holds no state); without one, the layer trains (gradients reach every weight).
# - Keeps `self.num_heads`, `self.head_dim` and `self.num_kv_heads`; the cache holds the `num_kv_groups` key/value heads, before they are repeated.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 课程的 `cached_attention` 不能在你的代码中运行：本练习要你写的正是这部分工作。
# - 新词元放不进缓存时抛出 `ValueError`：缓存的 `update` 会抛出它（让它传出来）；恰好填满缓存的写入是可以的。
# - 不评分（由调用者保证）：已缓存的和新的词元加起来不超过 `context_length`。
# - 不评分（由调用者保证）：`d_out` 能被 `num_heads` 整除，`num_heads` 能被 `num_kv_groups` 整除。
# - 在 float32、float64、bfloat16 下评分：用 `.to(dtype)` 转换、配同一 dtype 缓存的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 有缓存时只投影新的词元；调用之间保存的一切都在传入的缓存里（层本身不保存状态）；没有缓存时，层要参与训练（梯度传到每个权重）。
# - 保留 `self.num_heads`、`self.head_dim` 和 `self.num_kv_heads`；缓存保存重复之前的 `num_kv_groups` 个键/值头。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "GroupedQueryAttention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class GroupedQueryAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, num_heads, num_kv_groups, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        if d_out % num_heads or num_heads % num_kv_groups:
            raise ValueError(f"need d_out={d_out} divisible by num_heads={num_heads}, divisible by num_kv_groups={num_kv_groups}")
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_groups, d_out // num_heads
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, num_kv_groups * self.head_dim, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        ### END SOLUTION

    def forward(self, x, kv_cache=None):  # (B, T_new, d_in) -> (B, T_new, d_out)
        ### BEGIN SOLUTION
        T_new = x.shape[1]
        q = split_heads(self.W_query(x), self.num_heads)  # (B, H, T_new, hd)
        k = split_heads(self.W_key(x), self.num_kv_heads)  # (B, G, T_new, hd)
        v = split_heads(self.W_value(x), self.num_kv_heads)
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)  # (B, G, T_total, hd): the cache holds G heads
        group_size = self.num_heads // self.num_kv_heads
        k = k.repeat_interleave(group_size, dim=1)  # (B, H, T_total, hd): head h reads group h // group_size
        v = v.repeat_interleave(group_size, dim=1)
        scores = q @ k.transpose(-2, -1) / self.head_dim ** 0.5
        scores = scores.masked_fill(causal_mask(T_new, k.shape[2], device=x.device), float("-inf"))
        return self.out_proj(merge_heads(torch.softmax(scores, dim=-1) @ v))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_GroupedQueryAttention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

from autograder.checks import nb07

with nb07.as_graded(GroupedQueryAttention):
    gqa = GroupedQueryAttention(8, 12, 6, 6, 2)
    expect(tuple(gqa.W_key.weight.shape) == (4, 8) and tuple(gqa.W_value.weight.shape) == (4, 8),
           "With 6 heads of width 2 in 2 groups, W_key and W_value should map 8 inputs to 2 * 2 = 4 outputs.",
           "6 个宽度为 2 的头分成 2 组时，W_key 和 W_value 应把 8 个输入映射到 2 * 2 = 4 个输出。")
    expect(tuple(gqa(torch.randn(2, 5, 8)).shape) == (2, 5, 12), "GroupedQueryAttention should map (B, T, d_in) to (B, T, d_out).",
           "GroupedQueryAttention 应把 (B, T, d_in) 映射为 (B, T, d_out)。")
    print("✓ GroupedQueryAttention")

# %% nbgrader={"grade": true, "grade_id": "test_GroupedQueryAttention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb07
nb07.check_GroupedQueryAttention(GroupedQueryAttention)
### END HIDDEN TESTS

# %% [markdown]
# Both extremes, shown by copying weights. With `num_kv_groups = num_heads` the layer has exactly
# `CachedMultiHeadAttention`'s parameters and must compute the same thing. With one group (MQA) it
# equals a multi-head layer whose key and value heads are all copies of the single shared one.
#
# 用复制权重来展示两个极端。当 `num_kv_groups = num_heads` 时，该层的参数与 `CachedMultiHeadAttention` 完全相同，计算结果也必须相同。只有一组（MQA）时，它等于一个多头层，其所有的键头和值头都是那个共享头的副本。

# %%
torch.manual_seed(4)
x = torch.randn(2, 7, 16)
mha = CachedMultiHeadAttention(16, 16, 7, 4).eval()
as_mha = GroupedQueryAttention(16, 16, 7, 4, num_kv_groups=4).eval()
as_mha.load_state_dict(mha.state_dict())
mqa = GroupedQueryAttention(16, 16, 7, 4, num_kv_groups=1).eval()
copied = {name: (w.repeat(4, *[1] * (w.dim() - 1)) if name.startswith(("W_key", "W_value")) else w)
          for name, w in mqa.state_dict().items()}  # the one KV head copied for each of the 4 query heads
mha_from_mqa = CachedMultiHeadAttention(16, 16, 7, 4).eval()
mha_from_mqa.load_state_dict(copied)
with torch.no_grad():
    print("GQA with num_heads groups equals MHA:       ", torch.allclose(as_mha(x), mha(x), atol=1e-6))
    print("MQA equals MHA with copied key/value heads: ", torch.allclose(mqa(x), mha_from_mqa(x), atol=1e-6))
for groups in (4, 2, 1):
    layer = GroupedQueryAttention(16, 16, 7, 4, groups)
    print(f"{groups} KV group(s): W_key {tuple(layer.W_key.weight.shape)}, cache per token per layer "
          f"{kv_cache_bytes(1, 1, 1, groups, 4, 4)} bytes")

# %% [markdown]
# The cache now holds `num_kv_groups` heads, but look at what a step does with them:
# `repeat_interleave` writes a new tensor with `num_heads` heads, the whole cache copied out
# `num_heads / num_kv_groups` times, for the keys and again for the values, at every step. So with
# this way of computing it GQA shrinks what is *stored*, not what a step reads and writes. A product
# that takes the shared heads as they are avoids the copy: view the queries as `(B, G, r * T_new, hd)`,
# the `r = num_heads / num_kv_groups` query heads of a group stacked as rows, and multiply each group's
# rows by that group's keys in place. The cell checks that both give the same scores and prints the
# bytes. Fused kernels such as FlashAttention-2 work this way: they take keys and values with fewer
# heads than the queries.
#
# 缓存现在只保存 `num_kv_groups` 个头，但看看一步里是怎样使用它们的：`repeat_interleave` 会写出一个有 `num_heads` 个头的新张量，把整个缓存复制 `num_heads / num_kv_groups` 份，键一次、值一次，每一步都如此。所以按这种算法，GQA 缩小的是 *保存* 的数据，而不是一步读写的数据。直接使用共享头的乘法可以省掉这次复制：把查询看成 `(B, G, r * T_new, hd)`，即把一个组的 `r = num_heads / num_kv_groups` 个查询头作为行堆在一起，再让每个组的这些行原地乘以该组的键。下面的单元格检查两者给出的分数相同，并打印字节数。FlashAttention-2 这样的融合内核就是这样做的：它们接受头数比查询少的键和值。

# %%
torch.manual_seed(5)
B, H, G, T_cached, hd = 1, 8, 2, 1000, 64
q, k = torch.randn(B, H, 1, hd), torch.randn(B, G, T_cached, hd)  # one new token; the cache holds G heads
k_repeated = k.repeat_interleave(H // G, dim=1)  # (B, H, T_cached, hd): a new tensor at every step
scores_repeated = q @ k_repeated.transpose(-2, -1)  # (B, H, 1, T_cached)
scores_grouped = (q.view(B, G, H // G, hd) @ k.transpose(-2, -1)).view(B, H, 1, T_cached)  # k used in place
print("same scores:", torch.allclose(scores_repeated, scores_grouped, atol=1e-5))
print(f"keys in the cache: {k.numel() * k.element_size() / 2**10:.0f} KiB; "
      f"written by repeat_interleave at every step: {k_repeated.numel() * k_repeated.element_size() / 2**10:.0f} KiB; "
      f"by the grouped product: 0 KiB")

# %% [markdown]
# ## One table · 一张表
#
# The same small GPT with multi-head attention, GQA with 4 groups (2 query heads per KV head), and MQA;
# random weights, greedy generation from the same prompt, measured side by side in one run by
# `utils.bench_generate.generation_benchmark` (it also checks that the cached and uncached MHA tokens
# are identical). `vs no cache` is the speed relative to MHA without a cache; `cache MiB` is the
# bytes of the real cache tensors; `MB/token` and `% bw` are the bandwidth line of the regime table
# above (here the prefill is inside the time, and the cache read is taken at the middle length). This
# model reads a few MB per token: compare that with the last-level cache printed above before you
# read `% bw` as a distance to main memory's limit.
#
# 同一个小 GPT，分别使用多头注意力、4 组的 GQA（每个 KV 头对应 2 个查询头）和 MQA；随机权重，从同一个提示做贪心生成，由 `utils.bench_generate.generation_benchmark` 在一次运行中并排测量（它还会检查 MHA 有缓存和无缓存时生成的词元是否完全相同）。`vs no cache` 是相对于无缓存 MHA 的速度；`cache MiB` 是真实缓存张量的字节数；`MB/token` 和 `% bw` 与上面情形表中的带宽一栏相同（这里的时间包含了预填充，缓存的读取量按中间长度计算）。这个模型每个词元只读几 MB：先把它与上面打印的末级缓存大小比较，再决定能否把 `% bw` 当作离主存上限的距离来读。

# %%
# NBVAL_IGNORE_OUTPUT
rows = generation_benchmark(cfg, prompt_len=8, new_tokens=8 if GRADING else 80, repeats=1 if GRADING else 2, device=DEVICE)
print(format_rows(rows))
by = {r["variant"]: r for r in rows}
mha_row = by["KV cache, preallocated"]
print(f"cache: MHA / GQA-4 = {mha_row['cache_bytes'] / by['GQA 4 groups, preallocated']['cache_bytes']:.0f}x, "
      f"MHA / MQA = {mha_row['cache_bytes'] / by['MQA 1 group, preallocated']['cache_bytes']:.0f}x")
fig, ax = plt.subplots(figsize=(7, 2.6))
ax.barh([r["variant"] for r in rows], [r["tokens_per_s"] for r in rows])
ax.invert_yaxis(); ax.set_xlabel("tokens per second (higher is faster)")
plt.show()

# %% [markdown]
# On the machine that ran this notebook: the cache ratios printed above are exact (`num_heads /
# num_kv_groups`), while the speeds are measurements, and at this size their order among MHA, GQA
# and MQA changes from run to run: the weights, not the cache, dominate what each step reads, and
# `repeat_interleave` writes the KV heads out again for every query head at every step, and the product
# reads that copy (the cell after Exercise 5 printed how much): the attention of GQA and MQA here moves
# no fewer bytes than MHA's, although `MB/token` counts only the smaller cache they keep. Their payoff
# is memory, and with it longer texts and bigger batches on the same hardware, which is why Llama 3
# uses GQA. DeepSeek went further and compressed the cache itself: notebook 09.
#
# 在运行本笔记本的机器上：上面打印的缓存比值是精确的（`num_heads / num_kv_groups`），而速度是测量值。在这个规模下，MHA、GQA 和 MQA 之间的快慢顺序每次运行都可能不同：每一步读取的主要是权重，而不是缓存，而且 `repeat_interleave` 每一步都要为每个查询头把 KV 头重新写出一份，乘法再读取这份副本（练习 5 之后的单元格打印了有多少）：这里 GQA 和 MQA 的注意力搬运的字节并不比 MHA 少，尽管 `MB/token` 只计入它们保存的较小的缓存。它们的收益在于内存，进而能在同样的硬件上处理更长的文本和更大的批，这正是 Llama 3 使用 GQA 的原因。DeepSeek 更进一步，压缩了缓存本身：见笔记本 09。
#
# Full size, a few minutes on 2 cores: `python -m utils.bench_generate` (12 layers, width 768, 12
# heads, GPT-2's vocabulary, batch 1, 256 new tokens); it prints the same columns, the measured
# bandwidth, and the two regimes of preallocated against `torch.cat`.
#
# 完整规模，在 2 个核上需要几分钟：`python -m utils.bench_generate`（12 层，宽度 768，12 个头，GPT-2 的词表，批大小 1，生成 256 个新词元）；它打印同样的各列、测得的带宽，以及预先分配与 `torch.cat` 的两种情形。
