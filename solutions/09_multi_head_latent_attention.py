# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · Multi-head latent attention (DeepSeek) · 多头潜在注意力（DeepSeek）
#
# Notebook 07 cached keys and values so that each new token costs one row of work instead of the
# whole prefix, and then shrank the cache by sharing keys and values between heads (GQA, MQA), at
# some cost in quality. DeepSeek-V2 and V3 take another route: **multi-head latent attention (MLA)**
# caches one short *latent* vector per token, from which every head's keys and values are rebuilt.
# This notebook builds MLA as DeepSeek-V3's public inference code (`inference/model.py`) does, with
# its parameter names and layouts; what loading V3's released weights would still take (converters,
# YaRN, the mask, tensor parallelism) is listed at the end.
#
# 笔记本 07 缓存了键和值，让每个新词元只需一行的计算量而不是整个前缀，然后通过让多个头共享键和值（GQA、MQA）缩小缓存，但代价是质量有所下降。DeepSeek-V2 和 V3 走了另一条路：**多头潜在注意力（MLA）** 为每个词元只缓存一个较短的 *潜在* 向量，每个头的键和值都由它重建。本笔记本按照 DeepSeek-V3 公开推理代码（`inference/model.py`）的方式构建 MLA，使用它的参数名和布局；要加载 V3 发布的权重还需要做些什么（转换脚本、YaRN、掩码、张量并行），列在本笔记本末尾。

# %%
import math
import os

import matplotlib.pyplot as plt
import torch
from torch import nn
from tqdm.auto import tqdm

from utils.causal import causal_mask
from utils.kv_cache import kv_cache_bytes
from utils.mla import MLAConfig
from utils.rmsnorm import RMSNorm
from utils.rope import apply_rope, rope_inverse_frequencies, yarn_inverse_frequencies, yarn_softmax_factor

# DeepSeek-V3 (inference/configs/config_671B.json) and DeepSeek-V2 (config_236B.json), attention sizes only
V3 = dict(n_layers=61, dim=7168, n_heads=128, q_lora_rank=1536, kv_lora_rank=512,
          qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
V2 = dict(n_layers=60, dim=5120, n_heads=128, q_lora_rank=1536, kv_lora_rank=512,
          qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)

# %% [markdown]
# ## The cache bill at DeepSeek's size · DeepSeek 规模下的缓存账单
#
# Suppose DeepSeek-V3 used plain multi-head attention: 61 layers, 128 heads, and heads of width 128
# (the $d_h$ of the DeepSeek-V2 paper). Notebook 07's `kv_cache_bytes` gives the bill in bf16 (2 bytes
# per number) for one sequence.
#
# 假设 DeepSeek-V3 使用普通的多头注意力：61 层、128 个头，每个头宽 128（即 DeepSeek-V2 论文中的 $d_h$）。笔记本 07 的 `kv_cache_bytes` 给出单个序列在 bf16（每个数 2 字节）下的账单。

# %%
per_token = kv_cache_bytes(1, 1, V3["n_layers"], V3["n_heads"], 128)
print(f"MHA cache per token: {per_token / 2**20:.2f} MiB")
for context in (4096, 32_768, 131_072):
    print(f"  {context:>7,} tokens: {kv_cache_bytes(1, context, V3['n_layers'], V3['n_heads'], 128) / 2**30:7.1f} GiB")

# %% [markdown]
# At 128K tokens one sequence would need more memory than a whole 80 GB accelerator holds, before a
# single weight is loaded. The cache, not the arithmetic, limits how long and how many sequences a
# server can run.
#
# 在 128K 个词元时，单个序列所需的内存就超过一整块 80 GB 加速器的容量，而这还没有加载任何权重。限制服务器能运行多长、多少个序列的，是缓存，而不是算力。

# %% [markdown]
# ## One latent for keys and values · 键和值共用一个潜在向量
#
# MLA compresses the token's hidden state $h_t$ (width `dim`) into a latent $c^{KV}_t$ of width
# `kv_lora_rank` (512 for V3, against the keys and values of 128 heads of width 128 in plain multi-head attention), and
# expands it back per head:
#
# MLA 把词元的隐藏状态 $h_t$（宽度 `dim`）压缩成宽度为 `kv_lora_rank` 的潜在向量 $c^{KV}_t$（V3 中为 512，而普通多头注意力中是 128 个宽度为 128 的头的键和值），再为每个头展开回来：
#
# $$c^{KV}_t = \mathrm{RMSNorm}(W^{DKV} h_t), \qquad [k^{C}_{t,i} \,|\, v_{t,i}] = W^{UKV}_i \, c^{KV}_t .$$
#
# In V3's code $W^{DKV}$ is the first `kv_lora_rank` outputs of `wkv_a`, the norm is `kv_norm`, and
# `wkv_b` (`kv_lora_rank` -> `n_heads * (qk_nope_head_dim + v_head_dim)`) holds, head after head, the
# rows of that head's keys ($W^{UK}$) followed by the rows of its values ($W^{UV}$). Queries are
# compressed the same way to save activations during training: `wq_a` to `q_lora_rank`, `q_norm`,
# then `wq_b` up to every head (when `q_lora_rank == 0`, one `wq` does it directly). All linear layers
# are without bias. RMSNorm (`utils.rmsnorm`, and your exercise in notebook 12) divides a vector by its
# root mean square and multiplies it by a learned weight.
#
# 在 V3 的代码中，$W^{DKV}$ 是 `wkv_a` 的前 `kv_lora_rank` 个输出，归一化是 `kv_norm`，而 `wkv_b`（`kv_lora_rank` -> `n_heads * (qk_nope_head_dim + v_head_dim)`）逐头存放：先是该头键的行（$W^{UK}$），再是它的值的行（$W^{UV}$）。查询也以同样方式压缩，以节省训练时的激活：`wq_a` 降到 `q_lora_rank`，`q_norm`，再用 `wq_b` 升到所有头（当 `q_lora_rank == 0` 时，由一个 `wq` 直接完成）。所有线性层都不带偏置。RMSNorm（`utils.rmsnorm`，也是你在笔记本 12 中的练习）把向量除以它的均方根，再乘以一个可学习的权重。

# %% [markdown]
# ## Folding $W^{UK}$ into the query, and why RoPE stops it · 把 $W^{UK}$ 折叠进查询，以及 RoPE 为何阻止它
#
# Expanding every cached latent into keys at every step would throw the saving away. But a score is
# $q^\top k_j = q^\top W^{UK} c_j = (W^{UK\top} q)^\top c_j$: multiply the query by $W^{UK}$ once, and
# score it directly against the cached latents. The same holds on the value side: attend over the
# latents, then apply $W^{UV}$ once. This is the *absorption* of the V2 paper (section 2.1.2). The
# paper describes it as merging matrices ahead of time, $W^{UK}$ into the query's projection and
# $W^{UV}$ into the output projection $W^O$. V3's inference code, like this notebook, keeps them apart
# and multiplies by them at run time; merging would not pay at V3's size, where the merged matrices
# would be about 4 times larger than the ones they replace (the section on what absorption costs
# prints both).
#
# 在每一步都把所有缓存的潜在向量展开成键，会把节省的内存全部抵消。但一个分数是 $q^\top k_j = q^\top W^{UK} c_j = (W^{UK\top} q)^\top c_j$：把查询乘以 $W^{UK}$ 一次，就能直接与缓存的潜在向量打分。值这一侧同理：先对潜在向量做注意力，再乘一次 $W^{UV}$。这就是 V2 论文（第 2.1.2 节）中的 *吸收*。论文把它描述为事先合并矩阵：把 $W^{UK}$ 并入查询的投影，把 $W^{UV}$ 并入输出投影 $W^O$；V3 的推理代码和本笔记本一样，让它们保持分开，在运行时再相乘；在 V3 的规模下合并并不划算，合并后的矩阵大约是被它们取代的矩阵的 4 倍（讲吸收代价的那一节会把两者都打印出来）。
#
# RoPE breaks it. With positions, the key is rotated by a matrix $R_j$ that depends on the key's
# position: $q_m^\top R_m^\top R_j W^{UK} c_j = q_m^\top R_{j-m} W^{UK} c_j$. The matrix between the
# query and the latent now changes with every pair of positions, so no single matrix can be folded
# into the query. The cell shows it on one head: without RoPE one folded query gives every key's
# score. With RoPE the key at position $j$ needs its own folded query, $W^{UK\top} R_{j-m}^\top q_m$:
# it gives that key's score, but it differs from key to key (the cell prints how far each is from the
# first key's), so folding would have to be redone for every cached key at every step, which is the
# expansion it was meant to avoid.
#
# RoPE 破坏了这一点。有了位置后，键要乘以一个取决于键位置的旋转矩阵 $R_j$：$q_m^\top R_m^\top R_j W^{UK} c_j = q_m^\top R_{j-m} W^{UK} c_j$。查询和潜在向量之间的矩阵随每一对位置而变，因此无法把某一个固定矩阵折叠进查询。下面的单元格在一个头上演示：不用 RoPE 时，一个折叠后的查询就能给出每个键的分数。用 RoPE 时，位置 $j$ 的键需要它自己的折叠查询 $W^{UK\top} R_{j-m}^\top q_m$：它能给出这个键的分数，但每个键的都不一样（单元格打印了每个与第一个键的折叠查询相差多远），所以每一步都得为每个缓存的键重新折叠一次，而这正是折叠本想避免的展开。

# %%
g = torch.Generator().manual_seed(0)
W_UK = torch.randn(8, 16, generator=g)  # head width 8, latent width 16
q, latents = torch.randn(8, generator=g), torch.randn(5, 16, generator=g)  # one query, 5 cached latents
keys = latents @ W_UK.T  # (5, 8) expanded keys
folded = W_UK.T @ q  # (16,) the query, once multiplied by W_UK
print("no RoPE, folded == expanded:", torch.allclose(keys @ q, latents @ folded, atol=1e-5))
m, js = 4, torch.arange(5)
q_rot = apply_rope(q.view(1, 8), torch.tensor([m]), interleaved=True)[0]  # the query at position m
with_rope = apply_rope(keys, js, interleaved=True) @ q_rot  # (5,) scores against keys rotated at j
# R_m^T R_j = R_{j-m}, and R_{j-m}^T is a rotation by m - j: key j's folded query is W_UK^T R_{m-j} q
folded_per_key = torch.stack([W_UK.T @ apply_rope(q.view(1, 8), torch.tensor([m - j]), interleaved=True)[0]
                              for j in js.tolist()])  # (5, 16), one per key position
print("RoPE, each key's own folded query == expanded:",
      torch.allclose((latents * folded_per_key).sum(-1), with_rope, atol=1e-5))
print("distance of each key's folded query from key 0's:",
      [round(d, 2) for d in (folded_per_key - folded_per_key[0]).norm(dim=-1).tolist()])

# %% [markdown]
# ## A latent attention without positions · 不带位置的潜在注意力
#
# Before adding positions, the whole idea in one small module: `utils.mla.LatentAttention` caches
# only the latent `wkv_a(x)` (width `kv_lora_rank`), and `wkv_b` rebuilds each head's key and value
# from it. With `absorb=False` it rebuilds the keys and values of **every cached token at every
# step**; with `absorb=True` it folds the key rows of `wkv_b` into the query and applies the value
# rows after attending over the latents, as above. The cell checks that both paths, decoding token
# by token, give the output of one pass over the whole text, and counts what each decode step
# multiplies to rebuild the prefix. Full MLA adds three things to this module: decoupled RoPE (next),
# the compressed query (`wq_a`, `q_norm`, `wq_b`), and the norm of the latent (`kv_norm`). One word of
# warning: `absorb=False` means something else there. This stepping stone's naive path re-expands the
# cached latents at every step; full MLA's naive path, as in V3's code, caches the expanded keys and
# values instead, and re-expanding cached latents in it would be a mistake.
#
# 在加入位置之前，先用一个小模块展示整个想法：`utils.mla.LatentAttention` 只缓存潜在向量 `wkv_a(x)`（宽度为 `kv_lora_rank`），由 `wkv_b` 从中重建每个头的键和值。`absorb=False` 时，它在 **每一步都重建所有缓存词元** 的键和值；`absorb=True` 时，它像上面那样把 `wkv_b` 的键行折叠进查询，并在对潜在向量做注意力之后再乘以值行。下面的单元格检查两条路径逐个词元解码时都给出与对整段文本一次计算相同的输出，并统计每个解码步骤为重建前缀要做多少乘法。完整的 MLA 在这个模块上再加三样东西：解耦的 RoPE（下一节）、压缩的查询（`wq_a`、`q_norm`、`wq_b`），以及潜在向量的归一化（`kv_norm`）。提醒一句：在那里 `absorb=False` 的含义不同。这个过渡模块的朴素路径每一步都重新展开缓存的潜在向量；而完整 MLA 的朴素路径与 V3 的代码一样，缓存的是展开后的键和值，在其中重新展开缓存的潜在向量是错误的。

# %%
from utils.mla import LatentAttention

torch.manual_seed(2)
plain = LatentAttention(dim=32, n_heads=4, kv_lora_rank=8, head_dim=16, max_seq_len=16).eval()
x = torch.randn(2, 10, 32)
with torch.no_grad():
    whole = plain(x)
    for absorb in (False, True):
        steps = torch.cat([plain(x[:, :6], 0, absorb)] + [plain(x[:, t:t + 1], t, absorb) for t in range(6, 10)], dim=1)
        print(f"absorb={absorb}: token by token == whole text: {torch.allclose(steps, whole, atol=1e-5)}")
print(f"cached per token: {plain.kv_cache.shape[-1]} numbers (the latent), "
      f"against {2 * plain.n_heads * plain.head_dim} for the keys and values of {plain.n_heads} heads")
context = 4096
print(f"a decode step after {context:,} tokens: absorb=False multiplies {context:,} latents by wkv_b, "
      f"{context * plain.kv_lora_rank * 2 * plain.n_heads * plain.head_dim:,} multiply-adds; absorb=True never does")

# %% [markdown]
# ## Decoupled RoPE · 解耦的 RoPE
#
# DeepSeek's answer keeps the two jobs apart. Each query head has `qk_nope_head_dim` coordinates
# without positions (scored against keys rebuilt from the latent, so absorption works) and
# `qk_rope_head_dim` coordinates that RoPE rotates. On the key side, the last `qk_rope_head_dim`
# outputs of `wkv_a` give **one rope key per token, shared by all heads** ($k^R_t$ in the paper), so
# the cache grows by only 64 numbers per token. The score of head $i$ is the sum of both parts, its own
# query parts $q^C_{t,i}$, $q^R_{t,i}$ and key $k^C_{j,i}$ against a rope key $k^R_j$ that has no head
# index,
#
# DeepSeek 的办法是把这两项工作分开。每个查询头有 `qk_nope_head_dim` 个不带位置的坐标（与由潜在向量重建的键打分，因此吸收仍然可行），以及 `qk_rope_head_dim` 个由 RoPE 旋转的坐标。在键这一侧，`wkv_a` 的最后 `qk_rope_head_dim` 个输出给出 **每个词元一个、由所有头共享的 rope 键**（论文中的 $k^R_t$），因此缓存每个词元只多 64 个数。头 $i$ 的分数是两部分之和：它自己的查询部分 $q^C_{t,i}$、$q^R_{t,i}$ 和键 $k^C_{j,i}$，与一个没有头下标的 rope 键 $k^R_j$，
#
# $$s_{t,j,i} = \frac{q^{C\top}_{t,i}\, k^C_{j,i} + q^{R\top}_{t,i}\, k^R_j}{\sqrt{d_h + d^R_h}},$$
#
# scaled by the full query width `qk_nope_head_dim + qk_rope_head_dim` (192 for V3), the width of
# the dot product. RoPE rotates adjacent pairs $(2i, 2i+1)$, as DeepSeek-V3's code does
# (`view_as_complex`): use `apply_rope(..., interleaved=True)` from notebook 08, with `cfg.rope_theta`.
#
# 缩放用的是完整的查询宽度 `qk_nope_head_dim + qk_rope_head_dim`（V3 中为 192），即点积的宽度。RoPE 旋转相邻的一对 $(2i, 2i+1)$，与 DeepSeek-V3 的代码（`view_as_complex`）一致：请使用笔记本 08 的 `apply_rope(..., interleaved=True)`，并传入 `cfg.rope_theta`。

# %% [markdown]
# ## Two paths to the same output · 殊途同归的两条路径
#
# - **naive** (`absorb=False`): expand the latent with `wkv_b` into per-head keys `[k_nope | k_pe]`
#   (the shared rope key copied to every head) and values; cache them in `k_cache`
#   `(B, max_seq_len, H, nope + rope)` and `v_cache` `(B, max_seq_len, H, v_head_dim)`.
# - **absorbed** (`absorb=True`): cache only the *normalised* latent in `kv_cache`
#   `(B, max_seq_len, kv_lora_rank)` and the rotated rope key in `pe_cache` `(B, max_seq_len, rope)`;
#   multiply `q_nope` by each head's key rows of `wkv_b` (view its weight as
#   `(H, nope + v_head_dim, kv_lora_rank)`), score against `kv_cache`, add the rope scores against
#   `pe_cache`; after the softmax, average the latents and apply each head's value rows of `wkv_b`.
#
# - **朴素路径**（`absorb=False`）：用 `wkv_b` 把潜在向量展开成每个头的键 `[k_nope | k_pe]`（共享的 rope 键复制到每个头）和值；把它们缓存在 `k_cache` `(B, max_seq_len, H, nope + rope)` 和 `v_cache` `(B, max_seq_len, H, v_head_dim)` 中。
# - **吸收路径**（`absorb=True`）：只在 `kv_cache` `(B, max_seq_len, kv_lora_rank)` 中缓存 *归一化后* 的潜在向量，在 `pe_cache` `(B, max_seq_len, rope)` 中缓存旋转后的 rope 键；把 `q_nope` 乘以 `wkv_b` 中每个头的键行（把它的权重看成 `(H, nope + v_head_dim, kv_lora_rank)`），与 `kv_cache` 打分，再加上与 `pe_cache` 的 rope 分数；softmax 之后，对潜在向量加权平均，再乘以 `wkv_b` 中每个头的值行。
#
# Both write the new tokens at positions `start_pos ... start_pos + T - 1` and attend to every cached
# position up to there, with the causal mask of notebook 04 (bottom-right aligned). The rope positions
# are the same absolute positions, also when decoding. Softmax in float32, as V3 does.
#
# 两条路径都把新词元写在位置 `start_pos ... start_pos + T - 1`，并关注直到该处的所有缓存位置，使用笔记本 04 的因果掩码（右下对齐）。rope 的位置就是这些绝对位置，解码时也是如此。softmax 用 float32 计算，与 V3 一致。

# %% [markdown]
# ### Exercise 1 · `MultiHeadLatentAttention` · 练习 1
#
# `__init__(self, cfg)` with an `MLAConfig` (`dim, n_heads, q_lora_rank, kv_lora_rank,
# qk_nope_head_dim, qk_rope_head_dim, v_head_dim, max_seq_len, rope_theta`): the layers `wq` (when
# `q_lora_rank == 0`) or `wq_a`, `q_norm`, `wq_b`; `wkv_a` (`dim` -> `kv_lora_rank + qk_rope_head_dim`,
# the latent first, then the rope key), `kv_norm`, `wkv_b`, `wo` (`n_heads * v_head_dim` -> `dim`).
# `forward(x, start_pos=0, absorb=False)` maps `(B, T, dim)` to `(B, T, dim)`. Each query head's
# `qk_nope_head_dim + qk_rope_head_dim` outputs are `[nope | rope]`: the last `qk_rope_head_dim` are
# rotated, like the shared rope key, at positions `start_pos, ...` with `cfg.rope_theta` (interleaved
# pairs). The naive path caches in `k_cache` and `v_cache`, the absorbed path in `kv_cache` and
# `pe_cache` (shapes above), and an absorbed decode step must not rebuild the cached keys or values.
# The module trains: use `self.wkv_b.weight` itself (not `.data`) so that gradients reach it, and
# return the dtype of `x` (softmax in float32, then back). The method `_write` is
# given: it stores new entries in a cache buffer (a prefill, `start_pos == 0`, sizes the buffer for the
# batch of `x`) and returns every position up to the new end, so a decode step with `start_pos > 0`
# continues the sequences of the last prefill.
#
# `__init__(self, cfg)` 接收一个 `MLAConfig`（`dim, n_heads, q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, max_seq_len, rope_theta`）：各层为 `wq`（当 `q_lora_rank == 0` 时）或 `wq_a`、`q_norm`、`wq_b`；`wkv_a`（`dim` -> `kv_lora_rank + qk_rope_head_dim`，先是潜在向量，再是 rope 键）、`kv_norm`、`wkv_b`、`wo`（`n_heads * v_head_dim` -> `dim`）。`forward(x, start_pos=0, absorb=False)` 把 `(B, T, dim)` 映射为 `(B, T, dim)`。每个查询头的 `qk_nope_head_dim + qk_rope_head_dim` 个输出是 `[nope | rope]`：最后 `qk_rope_head_dim` 个坐标与共享的 rope 键一样，在位置 `start_pos, ...` 上用 `cfg.rope_theta` 旋转（相邻配对）。朴素路径缓存在 `k_cache` 和 `v_cache` 中，吸收路径缓存在 `kv_cache` 和 `pe_cache` 中（形状见上文），并且吸收路径的解码步骤不能重建缓存的键或值。这个模块是要训练的：直接使用 `self.wkv_b.weight`（而不是 `.data`），让梯度能传到它；返回与 `x` 相同的 dtype（softmax 用 float32，再转换回来）。方法 `_write` 已经给出：它把新条目存入一个缓存缓冲区（预填充，即 `start_pos == 0` 时，按 `x` 的批大小分配缓冲区），并返回直到新末尾的所有位置，因此 `start_pos > 0` 的解码步骤会接着上一次预填充的序列继续。
#
# <!-- rules: MultiHeadLatentAttention -->
#
# #### Rules that grading checks · 评分检查的规则 (`MultiHeadLatentAttention`)
#
# - Raises an error (any exception) when `start_pos + T` is more than `cfg.max_seq_len` (the caches hold max_seq_len positions).
# - Not graded (the caller guarantees it): a decode step (`start_pos > 0`) continues the sequences of the last prefill (`start_pos == 0`), no more of them, at the position where they end.
# - Graded in float32 and float64: the layer moved with `.to(dtype)` computes in that dtype (softmax in float32, then back).
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - All linear layers are without bias; the caches are the buffers `k_cache`, `v_cache` (absorb=False) and `kv_cache`, `pe_cache` (absorb=True), in the dtype of `x` (a layer moved to float64 caches float64).
# - An absorbed decode step's multiply-adds are counted: at most 1.25 times the course's (the cached keys and values are never rebuilt).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - `start_pos + T` 大于 `cfg.max_seq_len`（缓存只能容纳 max_seq_len 个位置）时抛出错误（任何异常都可以）。
# - 不评分（由调用者保证）：解码步骤（`start_pos > 0`）接着上一次预填充（`start_pos == 0`）的序列继续，序列数不多于它，并且从它们结束的位置开始。
# - 在 float32、float64 下评分：用 `.to(dtype)` 转换后的层用该 dtype 计算（softmax 用 float32，再转换回来）。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 所有线性层都不带偏置；缓存是缓冲区 `k_cache`、`v_cache`（absorb=False）和 `kv_cache`、`pe_cache`（absorb=True），dtype 与 `x` 相同（转换为 float64 的层缓存 float64）。
# - 吸收路径解码步骤的乘加次数会被统计：至多为课程实现的 1.25 倍（缓存的键和值从不重建）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "MultiHeadLatentAttention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class MultiHeadLatentAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        ### BEGIN SOLUTION
        H, nope, rope, dv = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        if cfg.q_lora_rank == 0:
            self.wq = nn.Linear(cfg.dim, H * (nope + rope), bias=False)
        else:
            self.wq_a = nn.Linear(cfg.dim, cfg.q_lora_rank, bias=False)
            self.q_norm = RMSNorm(cfg.q_lora_rank)
            self.wq_b = nn.Linear(cfg.q_lora_rank, H * (nope + rope), bias=False)
        self.wkv_a = nn.Linear(cfg.dim, cfg.kv_lora_rank + rope, bias=False)
        self.kv_norm = RMSNorm(cfg.kv_lora_rank)
        self.wkv_b = nn.Linear(cfg.kv_lora_rank, H * (nope + dv), bias=False)
        self.wo = nn.Linear(H * dv, cfg.dim, bias=False)
        ### END SOLUTION

    def _write(self, name, new, start_pos):
        """Given. Store new (B, T, ...) in buffer `name` (B, max_seq_len, ...) at start_pos;
        return positions 0 .. start_pos + T - 1, the new entries with their gradients."""
        cache, B, T = getattr(self, name, None), new.shape[0], new.shape[1]
        if start_pos == 0 and (cache is None or cache.shape[0] != B or cache.dtype != new.dtype):
            cache = new.new_zeros(B, self.cfg.max_seq_len, *new.shape[2:])
            self.register_buffer(name, cache, persistent=False)
        elif cache is None or cache.shape[0] < B:
            raise ValueError(f"no cache {name} for a batch of {B}: prefill with start_pos=0 first")
        cache[:B, start_pos:start_pos + T] = new.detach()
        return torch.cat([cache[:B, :start_pos], new], dim=1)

    def forward(self, x, start_pos=0, absorb=False):
        ### BEGIN SOLUTION
        cfg = self.cfg
        B, T, _ = x.shape
        H, nope, rope, dv = cfg.n_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim
        end = start_pos + T
        positions = torch.arange(start_pos, end, device=x.device)
        q = self.wq(x) if cfg.q_lora_rank == 0 else self.wq_b(self.q_norm(self.wq_a(x)))
        q_nope, q_pe = q.view(B, T, H, nope + rope).split([nope, rope], dim=-1)
        q_pe = apply_rope(q_pe.transpose(1, 2), positions, cfg.rope_theta, interleaved=True).transpose(1, 2)
        latent, k_pe = self.wkv_a(x).split([cfg.kv_lora_rank, rope], dim=-1)
        latent = self.kv_norm(latent)  # (B, T, c)
        k_pe = apply_rope(k_pe, positions, cfg.rope_theta, interleaved=True)  # (B, T, rope), shared by heads
        if absorb:
            w = self.wkv_b.weight.view(H, nope + dv, cfg.kv_lora_rank)
            q_latent = torch.einsum("bthd,hdc->bthc", q_nope, w[:, :nope])
            c = self._write("kv_cache", latent, start_pos)  # (B, end, c)
            pe = self._write("pe_cache", k_pe, start_pos)  # (B, end, rope)
            scores = torch.einsum("bthc,bsc->bhts", q_latent, c) + torch.einsum("bthr,bsr->bhts", q_pe, pe)
        else:
            k_nope, v = self.wkv_b(latent).view(B, T, H, nope + dv).split([nope, dv], dim=-1)
            k = torch.cat([k_nope, k_pe.unsqueeze(2).expand(B, T, H, rope)], dim=-1)
            k, v = self._write("k_cache", k, start_pos), self._write("v_cache", v, start_pos)  # (B, end, H, .)
            scores = torch.einsum("bthd,bshd->bhts", torch.cat([q_nope, q_pe], dim=-1), k)
        scores = scores / math.sqrt(nope + rope)  # (B, H, T, end)
        scores = scores.masked_fill(causal_mask(T, end, device=x.device), float("-inf"))
        weights = torch.softmax(scores.float(), dim=-1).type_as(x)
        if absorb:
            out = torch.einsum("bhts,bsc->bhtc", weights, c)  # (B, H, T, c) attended latents
            out = torch.einsum("bhtc,hdc->bthd", out, w[:, nope:])
        else:
            out = torch.einsum("bhts,bshd->bthd", weights, v)
        return self.wo(out.reshape(B, T, H * dv))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_MultiHeadLatentAttention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close
from utils.mla import MLAConfig

torch.manual_seed(0)
cfg = MLAConfig(dim=16, n_heads=2, q_lora_rank=8, kv_lora_rank=6, qk_nope_head_dim=4, qk_rope_head_dim=2,
                v_head_dim=3, max_seq_len=10)
mla = MultiHeadLatentAttention(cfg)
x = torch.randn(2, 5, 16)
with torch.no_grad():
    naive = mla(x)
    absorbed = mla(x, absorb=True)
expect(naive.shape == (2, 5, 16), "The output should have the input's shape (B, T, dim).",
       "输出形状应与输入相同 (B, T, dim)。", f"shape {tuple(naive.shape)}")
expect_close(absorbed, naive, "The absorbed path should give the naive path's output.", "吸收路径应给出与朴素路径相同的输出。")
print("✓ MultiHeadLatentAttention")

# %% nbgrader={"grade": true, "grade_id": "test_MultiHeadLatentAttention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb09
nb09.check_MultiHeadLatentAttention(MultiHeadLatentAttention)
### END HIDDEN TESTS

# %% [markdown]
# Decoding one token at a time with either path gives the outputs of the whole sequence at once, and
# the two paths agree (on the machine that ran this, the largest differences are printed).
#
# 无论用哪条路径逐个词元解码，都得到与一次处理整个序列相同的输出，两条路径也一致（下面打印的是运行本笔记本的机器上的最大差异）。

# %%
# NBVAL_IGNORE_OUTPUT
torch.manual_seed(1)
cfg = MLAConfig(dim=32, n_heads=4, q_lora_rank=16, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4,
                v_head_dim=8, max_seq_len=32)
mla = MultiHeadLatentAttention(cfg).eval()
x = torch.randn(2, 12, cfg.dim)
with torch.no_grad():
    whole = mla(x)
    steps = {absorb: torch.cat([mla(x[:, :4], 0, absorb)] + [mla(x[:, t:t + 1], t, absorb) for t in range(4, 12)], dim=1)
             for absorb in (False, True)}
print(f"naive, token by token vs whole:    {(steps[False] - whole).abs().max():.1e}")
print(f"absorbed, token by token vs whole: {(steps[True] - whole).abs().max():.1e}")

# %% [markdown]
# ## The cache per token · 每个词元的缓存
#
# The absorbed path caches `kv_lora_rank + qk_rope_head_dim` numbers per token per layer; multi-head
# attention caches a key and a value per head, grouped-query attention per group, multi-query
# attention one of each.
#
# 吸收路径每个词元每层缓存 `kv_lora_rank + qk_rope_head_dim` 个数；多头注意力为每个头缓存一个键和一个值，分组查询注意力为每个组缓存，多查询注意力只缓存一个键和一个值。

# %% [markdown]
# ### Exercise 2 · `mla_cache_elements_per_token` · 练习 2
#
# Numbers cached per token over all layers by MLA's absorbed path.
#
# MLA 吸收路径在所有层中为每个词元缓存的数的个数。
#
# <!-- rules: mla_cache_elements_per_token -->
#
# #### Rules that grading checks · 评分检查的规则 (`mla_cache_elements_per_token`)
#
# - dtype: an `int` (a number of elements).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - dtype：`int`（元素的个数）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "mla_cache_elements_per_token", "locked": false, "schema_version": 3, "solution": true, "task": false}
def mla_cache_elements_per_token(n_layers, kv_lora_rank, qk_rope_head_dim):
    ### BEGIN SOLUTION
    return n_layers * (kv_lora_rank + qk_rope_head_dim)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_mla_cache_elements_per_token", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from autograder.checks import expect

from autograder.checks import nb09

with nb09.as_graded(mla_cache_elements_per_token):
    got = mla_cache_elements_per_token(1, 512, 64)
    expect(got == 576, "One DeepSeek-V3 layer caches 512 + 64 = 576 numbers per token.",
           "DeepSeek-V3 的一层每个词元缓存 512 + 64 = 576 个数。", f"got {got}")
    print("✓ mla_cache_elements_per_token")

# %% nbgrader={"grade": true, "grade_id": "test_mla_cache_elements_per_token_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb09
nb09.check_mla_cache_elements_per_token(mla_cache_elements_per_token)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 3 · `kv_cache_elements_per_token` · 练习 3
#
# Numbers cached per token over all layers by attention with `n_kv_heads` key-value heads of width
# `head_dim`: `n_heads` of them is MHA, a number of groups is GQA, 1 is MQA.
#
# 具有 `n_kv_heads` 个宽度为 `head_dim` 的键值头的注意力，在所有层中为每个词元缓存的数的个数：等于 `n_heads` 时是 MHA，等于组数时是 GQA，等于 1 时是 MQA。
#
# <!-- rules: kv_cache_elements_per_token -->
#
# #### Rules that grading checks · 评分检查的规则 (`kv_cache_elements_per_token`)
#
# - dtype: an `int` (a number of elements).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - dtype：`int`（元素的个数）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "kv_cache_elements_per_token", "locked": false, "schema_version": 3, "solution": true, "task": false}
def kv_cache_elements_per_token(n_layers, n_kv_heads, head_dim):
    ### BEGIN SOLUTION
    return 2 * n_layers * n_kv_heads * head_dim
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_kv_cache_elements_per_token", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from autograder.checks import expect

from autograder.checks import nb09

with nb09.as_graded(kv_cache_elements_per_token):
    got = kv_cache_elements_per_token(2, 3, 4)
    expect(got == 48, "2 layers, 3 KV heads of width 4: a key and a value each, 48 numbers.",
           "2 层、3 个宽度为 4 的键值头：每个头一个键和一个值，共 48 个数。", f"got {got}")
    print("✓ kv_cache_elements_per_token")

# %% nbgrader={"grade": true, "grade_id": "test_kv_cache_elements_per_token_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb09
nb09.check_kv_cache_elements_per_token(kv_cache_elements_per_token)
### END HIDDEN TESTS

# %% [markdown]
# ## MLA against MHA, GQA and MQA of the same model · 同一模型下 MLA 与 MHA、GQA、MQA 的比较
#
# The same layers, heads of width $d_h = 128$ as in the V2 paper's Table 1, GQA with 8 groups. The
# V2 paper writes MLA's cache as $(d_c + d^R_h) l = \tfrac{9}{2} d_h l$, the cache of GQA with 2.25
# groups. The last row is what V3's naive path caches (keys 192 wide, values 128).
#
# 同样的层数，头宽 $d_h = 128$（与 V2 论文表 1 相同），GQA 取 8 个组。V2 论文把 MLA 的缓存写成 $(d_c + d^R_h) l = \tfrac{9}{2} d_h l$，相当于只有 2.25 个组的 GQA。最后一行是 V3 朴素路径缓存的量（键宽 192，值宽 128）。

# %%
def cache_table(cfg):
    L, H = cfg["n_layers"], cfg["n_heads"]
    mla = mla_cache_elements_per_token(L, cfg["kv_lora_rank"], cfg["qk_rope_head_dim"])
    rows = {"MHA (128 heads)": kv_cache_elements_per_token(L, H, 128),
            "GQA (8 groups)": kv_cache_elements_per_token(L, 8, 128),
            "MQA (1 head)": kv_cache_elements_per_token(L, 1, 128),
            "MLA (latent + rope key)": mla,
            "MLA naive path (full K, V)": L * H * (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"] + cfg["v_head_dim"])}
    return {name: (n, n * 2 / 1024, n / mla) for name, n in rows.items()}


for name, cfg in (("DeepSeek-V2", V2), ("DeepSeek-V3", V3)):
    print(f"{name}: {cfg['n_layers']} layers, per token")
    print(f"  {'':28} {'numbers':>11} {'KiB bf16':>9} {'x MLA':>7}")
    for row, (n, kib, ratio) in cache_table(cfg).items():
        print(f"  {row:28} {n:>11,} {kib:>9.1f} {ratio:>7.2f}")
v3 = cache_table(V3)
print(f"V3 per layer: MLA {mla_cache_elements_per_token(1, 512, 64)} numbers; "
      f"MLA is {1 - 1 / v3['MHA (128 heads)'][2]:.2%} smaller than MHA")

# %% [markdown]
# ## What "93.3% smaller" compares · "缩小 93.3%" 比较的是什么
#
# The DeepSeek-V2 abstract says that, *compared with DeepSeek 67B*, V2 "reduces the KV cache by
# 93.3%". DeepSeek 67B is not an MHA twin of V2: it is a dense model with grouped-query attention
# (95 layers, 8 KV heads of width 128), and deployed V2 stores its cache quantized to about 6 bits
# per number (section 3.2.3). The paper does not give the computation or the baseline's precision; the
# figure reproduces exactly if DeepSeek 67B's cache is bf16, which the cell assumes. MLA against MHA
# of the same V2 shape, at equal precision, is a different and larger ratio.
#
# DeepSeek-V2 的摘要说，*与 DeepSeek 67B 相比*，V2 "把 KV 缓存减少了 93.3%"。DeepSeek 67B 并不是 V2 的 MHA 孪生版本：它是一个使用分组查询注意力的稠密模型（95 层，8 个宽度为 128 的键值头），而部署的 V2 把缓存量化到每个数平均约 6 比特（第 3.2.3 节）。论文没有给出计算过程，也没有说明基线的精度；如果 DeepSeek 67B 的缓存是 bf16，这个数字就能精确重现，下面的单元格正是这样假设的。在相同精度下把 MLA 与同样是 V2 形状的 MHA 比较，得到的是另一个更大的比例。

# %%
v2_bits = mla_cache_elements_per_token(60, 512, 64) * 6  # deployed V2: 6-bit cache
dsk67b_bits = kv_cache_elements_per_token(95, 8, 128) * 16  # DeepSeek 67B: GQA, assumed bf16
print(f"DeepSeek 67B (GQA, bf16 assumed): {dsk67b_bits / 8 / 1024:6.1f} KiB per token")
print(f"DeepSeek-V2 (MLA, 6-bit):         {v2_bits / 8 / 1024:6.1f} KiB per token")
print(f"reduction: {1 - v2_bits / dsk67b_bits:.1%}")
same_precision = 1 - mla_cache_elements_per_token(60, 512, 64) / kv_cache_elements_per_token(60, 128, 128)
print(f"MLA vs MHA of V2's own shape, both bf16: {same_precision:.2%} smaller")

# %% [markdown]
# ## Absorption trades arithmetic for memory · 吸收是用算力换内存
#
# Absorption is not free. Per cached position, per new token and per layer, the naive path reads a
# key and a value for every head and multiplies each number it reads once. The absorbed path reads
# only the latent and the rope key, but every head scores its folded query (width `kv_lora_rank +
# qk_rope_head_dim`) against them and averages the latents (width `kv_lora_rank`): the same few
# numbers are multiplied by all 128 heads. The cell counts both at V3's sizes.
#
# 吸收并不是免费的。对每个缓存位置、每个新词元、每一层，朴素路径为每个头读取一个键和一个值，读到的每个数只乘一次。吸收路径只读取潜在向量和 rope 键，但每个头都要用它折叠后的查询（宽度 `kv_lora_rank + qk_rope_head_dim`）与它们打分，并对潜在向量（宽度 `kv_lora_rank`）加权平均：同样这几个数要被全部 128 个头各乘一遍。下面的单元格按 V3 的尺寸统计两者。

# %%
H, nope, rope_w, dv, c_w = V3["n_heads"], V3["qk_nope_head_dim"], V3["qk_rope_head_dim"], V3["v_head_dim"], V3["kv_lora_rank"]
naive_read = H * (nope + rope_w) + H * dv  # a key and a value per head
naive_macs = H * (nope + rope_w) + H * dv  # each number read is multiplied once
absorbed_read = c_w + rope_w  # the latent and the rope key, shared by the heads
absorbed_macs = H * (c_w + rope_w) + H * c_w  # every head: a score over [c | k_pe], then an average of c
print(f"per cached position, per new token, per layer (V3):")
print(f"  naive:    reads {naive_read:>6,} numbers, {naive_macs:>7,} multiply-adds ({naive_macs / naive_read:.0f} per number read)")
print(f"  absorbed: reads {absorbed_read:>6,} numbers, {absorbed_macs:>7,} multiply-adds ({absorbed_macs / absorbed_read:.0f} per number read)")
print(f"  absorbed / naive: {absorbed_macs / naive_macs:.1f}x the multiply-adds, {naive_read / absorbed_read:.0f}x fewer numbers read")
print(f"per new token, once: fold and unfold wkv_b {2 * H * nope * c_w:,} multiply-adds (absorbed) "
      f"against expanding the new latent {H * (nope + dv) * c_w:,} (naive)")
q_rank, dim = V3["q_lora_rank"], V3["dim"]
print(f"merged ahead of time instead: wq_b's nope rows times W^UK, {q_rank * H * c_w / 1e6:.1f}M parameters against "
      f"{q_rank * H * nope / 1e6:.1f}M; W^UV times wo, {H * c_w * dim / 1e6:.1f}M against {H * dv * dim / 1e6:.1f}M "
      f"({c_w / nope:.0f}x as large each)")

# %% [markdown]
# So absorption is a trade of memory for compute: about 3.4 times the multiply-adds of the naive path
# for every cached position, to read 71 times fewer numbers. A decode step has one new token per
# sequence, and the naive path does one multiply-add per number it fetches from memory, far below
# what an accelerator can compute in the time the fetch takes: its time is set by the memory
# traffic, and the trade pays. When many queries share each cached position (a long prefill), the
# arithmetic dominates instead, and expanded keys and values are the cheaper form; serving engines
# such as vLLM's MLA backend use the naive ("compute friendly") form for prefill and the absorbed
# ("data-movement friendly") one for decoding. The last line printed shows what merging the matrices
# ahead of time, as the V2 paper describes, would cost at V3's size: the two matrices a decode step
# reads for every token would be 4 times as large. V3's code folds at run time instead.
#
# 所以吸收是用内存换算力：每个缓存位置大约要做朴素路径 3.4 倍的乘加，换来读取的数少 71 倍。解码步骤中每个序列只有一个新词元，朴素路径从内存中取来的每个数只做一次乘加，远低于加速器在取数所需时间内能完成的计算量：它的耗时由内存访问量决定，这个交换是划算的。当许多查询共享每个缓存位置时（长的预填充），计算量反而占主导，展开后的键和值是更便宜的形式；vLLM 的 MLA 后端等推理引擎在预填充时使用朴素（"计算友好"）形式，在解码时使用吸收（"数据搬运友好"）形式。最后打印的一行说明了在 V3 的规模下，像 V2 论文描述的那样事先合并矩阵会有什么代价：解码时每个词元都要读取的这两个矩阵会大 4 倍。V3 的代码则是在运行时折叠。
#
# **MQA in disguise.** Look at the absorbed decode step once more: every head's folded query is
# scored against the *same* cached vector $[c_j \,|\, k^R_j]$ (576 numbers in V3), and every head
# averages the *same* latents $c_j$. That is multi-query attention (notebook 07): 128 query heads, one
# key-value head with keys of width 576 and values of width 512, followed by each head's $W^{UV}$ and
# `wo`. MLA caches as little as MQA with one wide head, while its heads, rebuilt through $W^{UK}$ and
# $W^{UV}$, stay as different as in multi-head attention.
#
# **伪装的 MQA。** 再看一次吸收路径的解码步骤：每个头折叠后的查询都与 *同一个* 缓存向量 $[c_j \,|\, k^R_j]$（V3 中 576 个数）打分，每个头都对 *同样的* 潜在向量 $c_j$ 加权平均。这就是多查询注意力（笔记本 07）：128 个查询头，一个键值头，键宽 576、值宽 512，之后再乘以每个头的 $W^{UV}$ 和 `wo`。MLA 的缓存与只有一个宽头的 MQA 一样少，而它的各个头经 $W^{UK}$ 和 $W^{UV}$ 重建后，仍然像多头注意力中那样各不相同。

# %% [markdown]
# ## Measured: decode time and cache bytes · 实测：解码时间与缓存字节数
#
# The cell times one decode step of **your** `MultiHeadLatentAttention`, both paths on the same module
# and weights, at growing contexts (`utils.mla.decode_benchmark`: the caches filled by your own
# forward, one thread, rounds of the two paths interleaved so both see the same machine load, the
# median of 15 steps, the two outputs checked equal). The model is small so that the notebook stays
# quick, and a CPU is not the accelerator the trade above was made for, so the outcome here need not
# be the one a server sees. The sentences under the plot, printed from the measurements, say which
# path was faster at each context on the machine that ran this. Where a GPU is present the cell runs
# there (`utils.benchmark.demo_device()`) and measures the GPU; the cell after it prints what an H200
# measured at DeepSeek-V3's sizes.
#
# 下面的单元格为 **你的** `MultiHeadLatentAttention` 的一个解码步骤计时：两条路径用同一个模块和同样的权重，上下文长度不断增长（`utils.mla.decode_benchmark`：缓存由你自己的 forward 填充，单线程，两条路径交替进行，使它们经历相同的机器负载，取 15 步的中位数，并检查两者输出相同）。模型很小，以便本笔记本运行得快；而且 CPU 并不是上面那种交换所针对的加速器，所以这里的结果未必与服务器上的一致。图下方由测量结果打印出的句子说明了在运行本笔记本的机器上，每个上下文长度下哪条路径更快。有 GPU 时这个单元格在 GPU 上运行（`utils.benchmark.demo_device()`），测的是 GPU；它后面的单元格打印一块 H200 在 DeepSeek-V3 的尺寸下测得的结果。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.benchmark import demo_device, order_warning
from utils.mla import decode_benchmark

bench_cfg = MLAConfig(dim=256, n_heads=8, q_lora_rank=96, kv_lora_rank=64, qk_nope_head_dim=32, qk_rope_head_dim=16,
                      v_head_dim=32, max_seq_len=4097)  # room for the step after 4096 cached tokens
contexts = [64, 128] if os.getenv("NBGRADER_EXECUTION") else [256, 512, 1024, 2048, 4096]
torch.manual_seed(3)
rows = decode_benchmark(bench_cfg, contexts, repeats=15, progress=tqdm,
                        module=MultiHeadLatentAttention(bench_cfg).to(demo_device()))  # a GPU when present
print(f"{'context':>8} {'naive ms':>9} {'absorbed ms':>12} {'naive / absorbed':>17}")
for r in rows:
    print(f"{r['context']:>8} {r['naive_ms']:>9.2f} {r['absorbed_ms']:>12.2f} {r['speedup']:>17.2f}")
fig, ax = plt.subplots(figsize=(6, 3.2))
ax.plot(contexts, [r["naive_ms"] for r in rows], "o-", label="naive (full K, V cached)")
ax.plot(contexts, [r["absorbed_ms"] for r in rows], "o-", label="absorbed (latent cached)")
ax.set_xscale("log", base=2); ax.set_xlabel("cached tokens (context)"); ax.set_ylabel("ms per decode step")
ax.legend(); plt.show()
for r in rows:
    faster, ratio = ("absorbed", r["speedup"]) if r["speedup"] > 1 else ("naive", 1 / r["speedup"])
    print(f"On this machine, at {r['context']:,} cached tokens the {faster} path was faster, by {ratio:.2f}x.")
print(order_warning(rows, "context", ["naive_ms"]) or "the naive step's time grows with the context: no sign of a disturbed run")

# %% [markdown]
# The same two paths were also measured for this course on an NVIDIA H200, at DeepSeek-V3's sizes
# (width 7168, 128 heads, latent 512 + 64), batch 1, in two runs on 2026-11-26. Your machine cannot
# repeat that here, so the cell prints the figures from a table, labelled with the runs that
# produced them, and the range over the runs.
#
# 同样的两条路径也为本课程在一块 NVIDIA H200 上、以 DeepSeek-V3 的尺寸（宽度 7168，128 个头，潜在向量 512 + 64）、批大小 1 测量过，2026-11-26 共两次运行。你的机器无法在这里重复这个测量，所以单元格从一张表中打印这些数字，标明得出它们的运行，并给出各次运行之间的范围。

# %%
# Measured for this course on an NVIDIA H200 (torch 2.11, CUDA 13), 2026-11-26: utils.mla's MultiHeadLatentAttention
# moved to the GPU, V3's sizes, batch 1, one decode step, medians of 5 timed with CUDA events after a warm-up.
# Run 1 for the course's reference figures; run 2 by `python -m utils.device_report --device cuda`
# (CHANGELOG.md, issue 31), which recorded the ratios only.
H200_MLA_MS = {"run 1": {4096: (2.36, 2.02), 32768: (7.88, 2.08)}}  # {context: (naive ms, absorbed ms)}
H200_MLA_SPEEDUP = {4096: {"run 1": 2.36 / 2.02, "run 2": 1.35}, 32768: {"run 1": 7.88 / 2.08, "run 2": 4.9}}
print("one MLA decode step on an NVIDIA H200, DeepSeek-V3's sizes, batch 1: naive time / absorbed time")
for context, runs in H200_MLA_SPEEDUP.items():
    ms = H200_MLA_MS["run 1"][context]
    print(f"{context:>6,} cached tokens: run 1 {runs['run 1']:.2f}x ({ms[0]:.2f} against {ms[1]:.2f} ms), "
          f"run 2 {runs['run 2']:.2f}x; range {min(runs.values()):.2f}-{max(runs.values()):.2f}x")

# %% [markdown]
# On that GPU the absorbed step was the faster at both contexts in both runs, and its lead grew with
# the context, as the bytes predict. The two runs give different ratios (the printed range): read
# the range, not one figure.
#
# 在那块 GPU 上，两次运行中吸收路径的一步在两个上下文长度下都更快，而且领先幅度随上下文增长，正如字节数所预测的。两次运行给出的比值不同（见打印出的范围）：要读范围，而不是单个数字。

# %% [markdown]
# The bytes come from the cache tensors themselves, after a prefill with each path, and equal the
# formulas: batch x `max_seq_len` x numbers per token x 4 bytes (float32).
#
# 字节数直接取自缓存张量本身（分别用两条路径预填充之后），并且等于公式：批大小 x `max_seq_len` x 每个词元的数 x 4 字节（float32）。

# %%
def buffer_bytes(module, names):
    return sum(getattr(module, n).numel() * getattr(module, n).element_size() for n in names)


mla = MultiHeadLatentAttention(bench_cfg).eval()
x = torch.randn(2, 16, bench_cfg.dim)
with torch.no_grad():
    mla(x, absorb=False)
    mla(x, absorb=True)
c = bench_cfg
naive_bytes, absorbed_bytes = buffer_bytes(mla, ("k_cache", "v_cache")), buffer_bytes(mla, ("kv_cache", "pe_cache"))
naive_formula = 2 * c.max_seq_len * c.n_heads * (c.qk_nope_head_dim + c.qk_rope_head_dim + c.v_head_dim) * 4
absorbed_formula = 2 * c.max_seq_len * mla_cache_elements_per_token(1, c.kv_lora_rank, c.qk_rope_head_dim) * 4
print(f"naive cache:    {naive_bytes:>10,} bytes (formula {naive_formula:,})")
print(f"absorbed cache: {absorbed_bytes:>10,} bytes (formula {absorbed_formula:,})")
print(f"ratio {naive_bytes / absorbed_bytes:.1f}x, both equal to their formulas: "
      f"{naive_bytes == naive_formula and absorbed_bytes == absorbed_formula}")

# %% [markdown]
# ## What differs from DeepSeek-V3's code · 与 DeepSeek-V3 代码的不同之处
#
# Your module has V3's parameter names, shapes and layouts, so the MLA weights of V3's own inference
# code load into it. The released checkpoint does not load as it is:
# - **Names and formats.** The checkpoint on Hugging Face uses Hugging Face's names
#   (`self_attn.q_a_proj`, `kv_a_proj_with_mqa`, `kv_b_proj`, `o_proj`, ...) and stores most weights
#   in FP8 with block scales (`weight_scale_inv`). V3's `convert.py` renames and shards them, and
#   `fp8_cast_bf16.py` turns them into bf16; only their output loads into this layout.
# - **Tensor parallelism.** V3's code splits the heads over `world_size` processes (`n_local_heads`,
#   `ColumnParallelLinear` for `wq_b`, `wkv_b`, `RowParallelLinear` for `wo` with an all-reduce); one
#   shard holds `n_heads / world_size` heads. Your module is V3's code at `world_size = 1`.
# - **YaRN.** Built with its default `max_seq_len` of 16,384, V3's code rescales the softmax and
#   slows the rope pairs at every length (below); your module matches it at `max_seq_len <= 4096`.
# - **The mask.** V3's `Transformer` builds a `(T, T)` causal mask, so its MLA cannot take a chunk of
#   several tokens at `start_pos > 0` (the scores are `(T, start_pos + T)`); its `generate.py` never
#   asks, decoding one token at a time after the prompt. Your module uses the bottom-right mask of
#   notebook 04 and accepts such chunks.
#
# 你的模块具有 V3 的参数名、形状和布局，因此 V3 自己的推理代码中的 MLA 权重可以加载进来。但发布的检查点不能直接加载：
# - **名字和格式。** Hugging Face 上的检查点使用 Hugging Face 的名字（`self_attn.q_a_proj`、`kv_a_proj_with_mqa`、`kv_b_proj`、`o_proj` 等），并且大部分权重以带分块缩放因子（`weight_scale_inv`）的 FP8 存储。V3 的 `convert.py` 负责重命名和切分，`fp8_cast_bf16.py` 把它们转换为 bf16；只有经过它们转换后的结果才能加载进这种布局。
# - **张量并行。** V3 的代码把各个头分到 `world_size` 个进程上（`n_local_heads`，`wq_b`、`wkv_b` 用 `ColumnParallelLinear`，`wo` 用带 all-reduce 的 `RowParallelLinear`）；每个分片只有 `n_heads / world_size` 个头。你的模块相当于 `world_size = 1` 时的 V3 代码。
# - **YaRN。** 以默认的 `max_seq_len` 16,384 构建时，V3 的代码在任何长度上都会重新缩放 softmax 并放慢 rope 的各对（见下文）；你的模块在 `max_seq_len <= 4096` 时与它一致。
# - **掩码。** V3 的 `Transformer` 构造的是 `(T, T)` 的因果掩码，因此它的 MLA 不能在 `start_pos > 0` 时接收由多个词元组成的一块输入（分数的形状是 `(T, start_pos + T)`）；它的 `generate.py` 也从不这样调用：处理完提示之后每次只解码一个词元。你的模块使用笔记本 04 的右下对齐掩码，可以接收这样的输入块。

# %% [markdown]
# ### YaRN: what V3's code adds beyond 4,096 tokens · YaRN：V3 的代码在 4,096 个词元之外加了什么
#
# V3 was pre-trained with a 4,096-token context (`original_seq_len`) and extended to 128K with YaRN
# (Peng et al., 2023). Its inference code switches YaRN on whenever the model is built with
# `max_seq_len > original_seq_len`, and the default `max_seq_len` of its `ModelArgs` is 16,384, which
# `generate.py` does not lower: **as shipped, V3's code runs YaRN at every length**, a 10-token prompt
# included. YaRN changes two things. The rope frequencies: pairs that turn many times over 4,096
# tokens keep their frequency, the slowest pairs are slowed down 40 times (`rope_factor`), and the
# pairs between blend the two. The softmax scale: multiplied by mscale², with mscale = 0.1 ln 40 + 1.
# Our module leaves YaRN out, so it computes what V3's code computes when built with
# `max_seq_len <= 4096`, and nothing else; with the shipped default the two differ at every length.
# The cell computes both changes for V3's 64-wide rope part (`utils.rope.yarn_inverse_frequencies`).
#
# V3 用 4,096 个词元的上下文（`original_seq_len`）预训练，再用 YaRN（Peng 等，2023）扩展到 128K。它的推理代码只要模型以 `max_seq_len > original_seq_len` 构建，就会打开 YaRN；而它的 `ModelArgs` 中 `max_seq_len` 的默认值是 16,384，`generate.py` 也不会把它调低：**按发布时的设置，V3 的代码在任何长度上都运行 YaRN**，连 10 个词元的提示也不例外。YaRN 改变两件事。rope 频率：在 4,096 个词元中转很多圈的对保持原频率，最慢的对被放慢 40 倍（`rope_factor`），介于两者之间的对则在两者之间过渡。softmax 缩放：乘以 mscale²，其中 mscale = 0.1 ln 40 + 1。我们的模块不含 YaRN，因此它计算的就是 V3 的代码在 `max_seq_len <= 4096` 时所计算的，仅此而已；按发布时的默认值，两者在任何长度上都不同。下面的单元格针对 V3 宽 64 的 rope 部分计算这两处变化（`utils.rope.yarn_inverse_frequencies`）。

# %%
slowed = rope_inverse_frequencies(64) / yarn_inverse_frequencies(64, 10000.0, factor=40.0, original_seq_len=4096)
kept, stretched = int((slowed < 1.0001).sum()), int((slowed > 39.99).sum())
print(f"V3's 32 rope pairs under YaRN: {kept} keep their frequency, {stretched} are slowed 40x, "
      f"{32 - kept - stretched} blend the two")
print(f"softmax scale: 192^-0.5 = {192 ** -0.5:.5f}, times mscale^2 = {yarn_softmax_factor(40.0):.3f} "
      f"-> {192 ** -0.5 * yarn_softmax_factor(40.0):.5f}")

# %% [markdown]
# ## What comes next · 接下来
#
# MLA makes DeepSeek's attention cheap to serve. Its other half is the feed-forward layer: notebook 10
# replaces it with a mixture of experts, where each token uses a few of many experts, and builds
# DeepSeek-V3's router.
#
# MLA 让 DeepSeek 的注意力在推理服务时很便宜。另一半是前馈层：笔记本 10 把它换成混合专家，每个词元只使用众多专家中的几个，并构建 DeepSeek-V3 的路由器。
#
# Sources: DeepSeek-AI, *DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language
# Model* (2024), section 2.1 (low-rank key-value joint compression, decoupled RoPE, Table 1 of cache
# sizes), section 3.2.3 and the abstract (the 93.3%); DeepSeek-AI, *DeepSeek-V3 Technical Report*
# (2024), sections 2.1.1 and 4.3 (context extension with YaRN); DeepSeek-V3's public inference code, `inference/model.py` (`MLA`, its `naive`
# and `absorb` paths, `ModelArgs`, `precompute_freqs_cis` for YaRN, the mask of `Transformer`),
# `generate.py`, `convert.py`, `fp8_cast_bf16.py` and `inference/configs/config_671B.json`,
# `config_236B.json`; B. Peng et al., *YaRN* (2023); vLLM's `vllm/attention/backends/mla/common.py`
# (the two forms of MLA for prefill and decode); DeepSeek-AI,
# *DeepSeek LLM* (2024) for DeepSeek 67B's attention.
#
# 来源：DeepSeek-AI，《DeepSeek-V2: A Strong, Economical, and Efficient Mixture-of-Experts Language Model》（2024）第 2.1 节（低秩键值联合压缩、解耦 RoPE、缓存大小的表 1）、第 3.2.3 节与摘要（93.3%）；DeepSeek-AI，《DeepSeek-V3 Technical Report》（2024）第 2.1.1 节与第 4.3 节（用 YaRN 扩展上下文）；DeepSeek-V3 公开推理代码 `inference/model.py`（`MLA` 及其 `naive` 与 `absorb` 路径、`ModelArgs`、YaRN 的 `precompute_freqs_cis`、`Transformer` 的掩码）、`generate.py`、`convert.py`、`fp8_cast_bf16.py` 以及 `inference/configs/config_671B.json`、`config_236B.json`；B. Peng 等，《YaRN》（2023）；vLLM 的 `vllm/attention/backends/mla/common.py`（MLA 在预填充和解码中的两种形式）；DeepSeek-AI，《DeepSeek LLM》（2024）中 DeepSeek 67B 的注意力配置。
