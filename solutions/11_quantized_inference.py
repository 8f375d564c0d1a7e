# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · Quantized inference · 量化推理
#
# When a language model writes, it produces one token at a time, and for each token it runs the
# whole network once. At batch size 1 no weight is reused: every weight is fetched from memory,
# used for one multiply-add with the one token's vector, and dropped. So the speed of decoding is set
# less by how fast the processor multiplies than by how many **bytes** of weights it must read per
# token. Store the weights in fewer bytes and decoding gets faster, and the model takes less memory.
#
# 语言模型写作时一次只产生一个词元，每产生一个词元就要把整个网络运行一遍。在批大小为 1 时，没有任何权重被复用：每个权重从内存中取出，只与这一个词元的向量做一次乘加，然后就被丢掉。所以解码的速度与其说取决于处理器乘得多快，不如说取决于每个词元必须读取多少 **字节** 的权重。用更少的字节存储权重，解码就更快，模型占用的内存也更少。
#
# In this notebook you measure where decode time goes on your machine, build symmetric int8
# quantization and see what one outlier weight does to it, meet the FP8 e4m3 number format, write
# DeepSeek-V3's block-wise FP8 scaling (128 x 128 weight blocks with `weight_scale_inv`, 1 x 128
# activation tiles), write an int8 weight-only linear layer and measure it next to W8A8 (8-bit
# activations too, the path that is fast on a CPU), turn a whole GPT into int8, store the KV cache in
# int8, and see on a trained model which quantization costs accuracy and why scales are per block.
#
# 在本笔记本中，你将在自己的机器上测量解码时间花在哪里，实现对称 int8 量化并看看一个离群权重会对它造成什么影响，认识 FP8 e4m3 数字格式，编写 DeepSeek-V3 的分块 FP8 缩放（128 x 128 的权重块配 `weight_scale_inv`，1 x 128 的激活分块），编写一个 int8 仅权重线性层，并把它与 W8A8（激活也量化为 8 位，在 CPU 上快的那条路径）放在一起测量，把整个 GPT 变成 int8，用 int8 存储 KV 缓存，并在一个训练过的模型上看看哪种量化会损失精度，以及为什么 scale 要按块取。

# %%
# NBVAL_IGNORE_OUTPUT
# (the output names this machine's thread count)
import copy
import os
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from utils.bandwidth import last_level_cache_bytes, memory_bandwidth, read_bandwidth
from utils.bench_quantize import (accuracy_rows, bytes_read_per_token, decode, decode_benchmark, format_accuracy,
                                  format_rows, int8_order, layer_times)
from utils.gpt import GPTConfig, GPTModel, parameter_count
from utils.kv_cache import KVCache, generate, kv_cache_bytes

GRADING = bool(os.getenv("NBGRADER_EXECUTION"))  # grading runs the notebook with smaller sizes (a 1-layer GPT)
print(f"torch {torch.__version__}; this machine offers {torch.get_num_threads()} threads, this notebook uses 1")
torch.set_num_threads(1)  # steady timings on a shared machine (see below)

# %% [markdown]
# ## Where decode time goes · 解码时间花在哪里
#
# Take notebook 07's GPT, at a small size so that this notebook stays quick. Generating one token
# with a KV cache multiplies one vector by every weight matrix once: each float32 weight costs 4
# bytes of memory traffic and 2 floating-point operations. A processor does far more than 2
# operations in the time it takes to fetch 4 bytes from main memory, so the multiply units wait for
# memory. The best possible speed is then
#
# 取笔记本 07 的 GPT，用较小的尺寸，好让本笔记本运行得快。用 KV 缓存生成一个词元时，一个向量要和每个权重矩阵各乘一次：每个 float32 权重带来 4 字节的内存流量和 2 次浮点运算。从主存取 4 字节的时间里，处理器能做的运算远多于 2 次，所以乘法单元在等内存。于是最快的速度为（词元/秒 ≤ 内存带宽 / 每个词元读取的权重字节数）：
#
# $$\text{tokens/s} \le \frac{\text{memory bandwidth (bytes/s)}}{\text{bytes of weights read per token}}.$$
#
# We measure the bandwidth with the operation a decode repeats: one matrix-vector product over a
# weight far larger than the processor's caches (`utils.bandwidth.read_bandwidth`, bytes read per
# second). A large copy's rate is printed next to it as a reference only: a copy also writes. The
# line is measured, not a law. A model whose bytes per token fit in the processor's last-level
# cache is served partly from that cache between tokens and can pass it; the cell prints the
# cache's size and says whether this model fits.
#
# 我们用解码反复做的那个操作来测量带宽：对一个远大于处理器缓存的权重做一次矩阵乘向量（`utils.bandwidth.read_bandwidth`，每秒读取的字节数）。一次大拷贝的速率打印在旁边，只作参照：拷贝还要写。这条线是测出来的，不是定律。每个词元读取的字节数能放进处理器末级缓存的模型，在两个词元之间有一部分数据由这个缓存供给，可以超过它；单元格会打印缓存的大小，并说明这个模型是否放得下。
#
# Everything in this notebook runs on **one thread** (`torch.set_num_threads(1)` above): on a
# machine shared with other work, a multi-threaded kernel waits for its slowest thread at every
# call, and that noise would swamp what we want to see. It runs on the CPU even where a GPU is
# present: the W8A8 layer's int8 kernel (fbgemm) exists only there, and every speed below is set
# against this CPU's bandwidth.
#
# 本笔记本中的一切都在 **一个线程** 上运行（上面的 `torch.set_num_threads(1)`）：在与其他任务共享的机器上，多线程的内核每次调用都要等待它最慢的线程，这种噪声会淹没我们想看到的东西。即使有 GPU，本笔记本也在 CPU 上运行：W8A8 层的 int8 内核（fbgemm）只在 CPU 上有，而下面的每个速度都要与这台 CPU 的带宽相比。

# %%
# NBVAL_IGNORE_OUTPUT
cfg = GPTConfig(vocab_size=4096, context_length=64, emb_dim=384, n_heads=6, n_layers=1 if GRADING else 4)
torch.manual_seed(0)
gpt = GPTModel(cfg).eval()
weights_mb = sum(p.numel() * p.element_size() for p in gpt.parameters()) / 1e6
read_mb = bytes_read_per_token(gpt) / 1e6  # the embedding tables give one row per token
prompt = torch.randint(0, cfg.vocab_size, (1, 16), generator=torch.Generator().manual_seed(1))
probe_bytes = (64 if GRADING else 128) * 2 ** 20
bandwidth = read_bandwidth(n_bytes=probe_bytes)  # utils.bandwidth: one matrix-vector product, bytes read per second
copy_rate = memory_bandwidth(n_bytes=probe_bytes)  # a reference: a copy reads and writes
llc = last_level_cache_bytes()
decode(gpt, prompt, 2)  # warm-up
steps = 4 if GRADING else 24
seconds, _ = decode(gpt, prompt, steps)
measured = steps / seconds
bound = bandwidth / (read_mb * 1e6)
print(f"{parameter_count(gpt):,} parameters = {weights_mb:.1f} MB in float32, {read_mb:.1f} MB of them read per token")
print(f"one thread on the machine that ran this: read rate {bandwidth / 1e9:.1f} GB/s (a matrix-vector product over "
      f"{probe_bytes // 2**20} MiB); copy {copy_rate / 1e9:.1f} GB/s (read + write, a reference)")
if llc:
    print(f"last-level cache: {llc / 2**20:.0f} MiB; the {read_mb:.1f} MB read per token are {read_mb * 1e6 / llc:.1f}x it"
          + (": they come from main memory" if read_mb * 1e6 > 2 * llc else ": part of them can be served from the cache, "
             "so the line below is no ceiling")
          + ("" if probe_bytes > 2 * llc else "; the read probe itself is not much larger than the cache"))
else:
    print("last-level cache: not reported on this system")
print(f"line: {bound:.0f} tokens/s; measured float32 decode: {measured:.0f} tokens/s ({measured / bound:.0%} of the line"
      + ("" if measured <= bound else ": above it, so part of the weights came from the cache") + ")")

# %% [markdown]
# On the machine that ran this, the measured decode speed is printed next to the line (the
# embedding tables are left out of the bytes: a token reads one row of each), with the share of the
# line it reaches. Where it stays below the line, the rest of the time goes to what the line leaves
# out: the attention over the cache, the layer norms, a few microseconds of Python and PyTorch
# dispatch for each of the dozens of operations per layer (at this small size they are a large
# share), and many small matrix products, each starting its stream anew where the probe ran one
# long one. What matters is the proportionality: **halve the
# bytes per weight and the bound doubles**. That is what quantization buys at inference time.
#
# 在运行本笔记本的机器上，测得的解码速度打印在这条线旁边（字节数不含嵌入表：每个词元只读取其中一行），同时打印出它达到这条线的比例。在低于这条线的地方，其余的时间花在这条线没有计入的地方：在缓存上做注意力、层归一化、每层几十个运算中每个运算几微秒的 Python 与 PyTorch 调度开销（在这么小的尺寸下它们占了很大一部分），以及许多小的矩阵乘法，每一个都要重新开始读取数据流，而测量时只跑了一条长的数据流。要紧的是比例关系：**每个权重的字节数减半，上限就翻倍**。这就是量化在推理时带来的收益。

# %% [markdown]
# ## Symmetric int8: the absmax scale · 对称 int8：absmax 缩放
#
# int8 holds the integers -128 to 127. Symmetric ("absmax") quantization maps the largest magnitude
# of a tensor to 127 and everything else proportionally:
#
# int8 能表示 -128 到 127 的整数。对称（"absmax"）量化把张量中最大的绝对值映射到 127，其余按比例映射：
#
# $$s = \frac{\max |x|}{127}, \qquad q = \text{clamp}\big(\text{round}(x / s),\ -127,\ 127\big), \qquad \hat x = q \cdot s.$$
#
# We leave -128 unused so that the grid is symmetric around 0. Rounding to the nearest integer keeps
# the error of every element within $s/2$; truncation toward zero would double it and bias every
# value toward 0. The scale can be one number for the whole tensor, or one per slice: with `dim`,
# take the max **along** `dim` and keep that dimension with size 1, so that `q * scale` broadcasts.
# For a weight of shape `(out, in)`, `dim=-1` gives one scale per output channel (per row).
#
# 我们不使用 -128，让网格关于 0 对称。取整到最近的整数让每个元素的误差不超过 $s/2$；向零截断会把误差加倍，并让每个值都偏向 0。scale 可以是整个张量一个数，也可以每个切片一个：给定 `dim` 时，**沿着** `dim` 取最大值，并保留这个大小为 1 的维度，让 `q * scale` 能够广播。对形状为 `(out, in)` 的权重，`dim=-1` 给每个输出通道（每一行）一个 scale。

# %% [markdown]
# ### Exercise 1 · `absmax_quantize` · 练习 1
#
# Return `(q, scale)`: `q` of dtype `torch.int8` with the shape of `x`, and `scale` (float32) equal to
# `max|x| / 127`, either one number (`dim=None`) or `x.abs().amax(dim=dim, keepdim=True) / 127`.
# Compute in float32 (`x.float()` first, also for a bfloat16 input), round with `torch.round`, and
# clamp to [-127, 127] before `.to(torch.int8)`. An all-zero slice has amax = 0 and would give
# `x / scale` = 0 / 0 = NaN, which int8 cannot hold: clamp amax to a small floor first,
# `amax.clamp(min=1e-4)` (DeepSeek's `act_quant` does exactly this), so that slice gets q = 0. The
# floor changes no scale of a slice whose amax is at least 1e-4; the hidden test accepts any guard
# that gives a finite scale and q = 0.
#
# 返回 `(q, scale)`：`q` 的 dtype 为 `torch.int8`，形状与 `x` 相同；`scale`（float32）等于 `max|x| / 127`，要么是一个数（`dim=None`），要么是 `x.abs().amax(dim=dim, keepdim=True) / 127`。用 float32 计算（先 `x.float()`，bfloat16 输入也一样），用 `torch.round` 取整，并在 `.to(torch.int8)` 之前把它限制（clamp）到 [-127, 127]。全零的切片 amax = 0，`x / scale` 会是 0 / 0 = NaN，而 int8 存不下 NaN：先用一个小的下限限制 amax，`amax.clamp(min=1e-4)`（DeepSeek 的 `act_quant` 正是这样做的），让这个切片得到 q = 0。对 amax 不小于 1e-4 的切片，这个下限不会改变 scale；隐藏测试接受任何能给出有限 scale 和 q = 0 的保护方式。
#
# <!-- rules: absmax_quantize -->
#
# #### Rules that grading checks · 评分检查的规则 (`absmax_quantize`)
#
# - Graded in float32 and bfloat16: `q` is `torch.int8` and `scale` float32, computed in float32 whatever the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - An all-zero slice may be guarded any way that gives a finite scale and zeros; every other slice (amax at least 1e-4) gets exactly amax / 127, compared relative to the scale's size.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 在 float32、bfloat16 下评分：`q` 为 `torch.int8`，`scale` 为 float32，无论输入是什么 dtype 都用 float32 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 全零的切片可以用任何方式保护，只要 scale 有限且结果为零；其余每个切片（amax 至少为 1e-4）的 scale 必须恰好是 amax / 127，按相对于 scale 大小的误差比较。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "absmax_quantize", "locked": false, "schema_version": 3, "solution": true, "task": false}
def absmax_quantize(x, dim=None):
    """Symmetric int8: (q int8, scale) with x ~ q * scale; one scale, or one per slice along dim (kept)."""
    ### BEGIN SOLUTION
    x = x.float()
    amax = x.abs().amax() if dim is None else x.abs().amax(dim=dim, keepdim=True)
    scale = amax.clamp(min=1e-4) / 127  # an all-zero slice: q = 0, not 0 / 0
    q = torch.round(x / scale).clamp(-127, 127).to(torch.int8)
    return q, scale
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_absmax_quantize", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close

x = torch.tensor([[0.5, -2.54, 0.1], [1.3, 0.0, -0.314]])
q, scale = absmax_quantize(x)
expect(q.dtype == torch.int8, "q should be torch.int8.", "q 应为 torch.int8。")
expect_close(scale.reshape(()), torch.tensor(0.02), "The scale should be max|x| / 127 = 2.54 / 127 = 0.02.",
             "scale 应为 max|x| / 127 = 2.54 / 127 = 0.02。")
expect(q.tolist() == [[25, -127, 5], [65, 0, -16]], "q should be round(x / scale): -0.314 / 0.02 = -15.7 rounds to -16 (truncation would give -15).",
       "q 应为 round(x / scale)：-0.314 / 0.02 = -15.7 取整为 -16（截断会得到 -15）。", f"q = {q.tolist()}")
q_rows, s_rows = absmax_quantize(x, dim=1)
expect(s_rows.shape == (2, 1), "With dim=1 the scale should have shape (2, 1): one per row, kept for broadcasting.",
       "dim=1 时 scale 的形状应为 (2, 1)：每行一个，保留维度以便广播。", f"shape {tuple(s_rows.shape)}")
print("✓ absmax_quantize")

# %% nbgrader={"grade": true, "grade_id": "test_absmax_quantize_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb11
nb11.check_absmax_quantize(absmax_quantize)
### END HIDDEN TESTS

# %% [markdown]
# Why clamp, and why float32? With a scale computed in float32 from the tensor's own amax, the
# largest `|x| / scale` is 127 up to the last bit of float32, and rounds to 127: the clamp never
# acts. It matters in two other cases. In bfloat16 arithmetic (8 significant bits) the division
# can give 127.5, which rounds to 128, and `.to(torch.int8)` wraps 128 to -128: the largest value
# changes sign. And a
# scale reused for other data (static quantization fixes an activation scale in advance, from
# calibration data) meets values beyond it. The cell computes both divisions, and the 0 / 0 of an
# all-zero slice.
#
# 为什么要限制到 [-127, 127]，又为什么用 float32？如果 scale 是用 float32 从张量自己的 amax 算出来的，最大的 `|x| / scale` 在 float32 的最后一位之内就是 127，取整后是 127：这个限制从不起作用。它在另外两种情况下才要紧。在 bfloat16 运算中（8 位有效数字），除法可能得到 127.5，取整为 128，而 `.to(torch.int8)` 会把 128 回绕成 -128：最大的值变了号。而被复用于其他数据的 scale（静态量化用校准数据事先定下激活的 scale）会遇到超出它的值。下面的单元格计算这两种除法，以及全零切片的 0 / 0。

# %%
peak = torch.tensor([2.6875, -1.0], dtype=torch.bfloat16)
in_bf16 = peak / (peak.abs().amax() / 127)                       # every step in bfloat16
in_fp32 = peak.float() / (peak.float().abs().amax() / 127)
print(f"bfloat16: x / scale = {in_bf16.tolist()}, as int8 without clamping: {torch.round(in_bf16).to(torch.int8).tolist()}")
print(f"float32:  x / scale = {in_fp32.tolist()}")
zeros = torch.zeros(4)
print(f"an all-zero slice without a floor: x / scale = {(zeros / (zeros.abs().amax() / 127)).tolist()}; "
      f"with your absmax_quantize: q = {absmax_quantize(zeros)[0].tolist()}")

# %% [markdown]
# ### Exercise 2 · `dequantize` · 练习 2
#
# Return the float approximation `q * scale` (float32), with the scale broadcast over its slice.
#
# 返回浮点近似值 `q * scale`（float32），scale 广播到它的切片上。
#
# <!-- rules: dequantize -->
#
# #### Rules that grading checks · 评分检查的规则 (`dequantize`)
#
# - Graded in float32: the result is float32 (`q.float() * scale`).
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 在 float32 下评分：结果是 float32（`q.float() * scale`）。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "dequantize", "locked": false, "schema_version": 3, "solution": true, "task": false}
def dequantize(q, scale):
    """int8 q and its scale -> float32 approximation of the original tensor."""
    ### BEGIN SOLUTION
    return q.float() * scale
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_dequantize", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb11

with nb11.as_graded(dequantize):
    q = torch.tensor([[25, -127, 5], [65, 0, -16]], dtype=torch.int8)
    expect_close(dequantize(q, torch.tensor(0.02)), torch.tensor([[0.5, -2.54, 0.1], [1.3, 0.0, -0.32]]),
                 "dequantize should return q * scale as floats.", "dequantize 应返回浮点数 q * scale。")
    expect_close(dequantize(q, torch.tensor([[0.02], [0.01]])), torch.tensor([[0.5, -2.54, 0.1], [0.65, 0.0, -0.16]]),
                 "A (rows, 1) scale should multiply each row by its own scale.", "形状为 (rows, 1) 的 scale 应让每一行乘以它自己的 scale。")
    print("✓ dequantize")

# %% nbgrader={"grade": true, "grade_id": "test_dequantize_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb11
nb11.check_dequantize(dequantize)
### END HIDDEN TESTS

# %% [markdown]
# ## One outlier weight · 一个离群权重
#
# Trained weights are mostly small, with a few large ones, and activations are worse: Dettmers et
# al. (2022, *LLM.int8()*) found a few feature dimensions far larger than the rest in the hidden
# states of transformers from about 6.7B parameters on. Take a 256 x 256 weight of small values and
# set **one** of its 65,536 entries to 50 times the largest of the others. With one scale for the whole tensor, that
# entry sets the scale for everyone: the step between int8 levels grows 50-fold and most weights
# round to a handful of levels, many to 0. With one scale per output channel only the outlier's row
# pays. The error is measured on the other 65,535 weights, relative to their own norm: the outlier
# alone holds a large share of the tensor's norm (the cell prints it), and dividing by the whole
# norm would make the damage to the others look smaller than it is.
#
# 训练好的权重大多很小，只有少数很大；激活的情况更糟：Dettmers 等人（2022，*LLM.int8()*）发现，在约 67 亿参数及以上的 Transformer 的隐藏状态中，有少数特征维度远大于其余维度。取一个由小数值组成的 256 x 256 权重，把它 65,536 个元素中的 **一个** 设为其余元素中最大值的 50 倍。如果整个张量只用一个 scale，这个元素就替所有元素决定了 scale：int8 各级之间的步长增大 50 倍，大多数权重被舍入到寥寥几个级别上，很多变成 0。如果每个输出通道一个 scale，只有离群值所在的那一行受损。误差在其余 65,535 个权重上测量，并相对于它们自己的范数：离群值一个就占了整个张量范数的很大一部分（单元格会打印出来），除以整个张量的范数会让其他权重受到的损害看起来比实际小。

# %%
w = torch.randn(256, 256, generator=torch.Generator().manual_seed(2)) * 0.02
w_outlier = w.clone()
w_outlier[3, 7] = 50 * w.abs().max()
others = torch.ones_like(w, dtype=torch.bool)
others[3, 7] = False  # every weight but the outlier's place


def relative_error(w, dim):
    """The rounding error of the other 65,535 weights, relative to their own norm."""
    q, s = absmax_quantize(w, dim=dim)
    return float((dequantize(q, s) - w)[others].norm() / w[others].norm())


print(f"share of the squared norm in the outlier alone: {w_outlier[3, 7] ** 2 / w_outlier.pow(2).sum():.0%}")


rows = {}
for name, weight in [("no outlier", w), ("one outlier", w_outlier)]:
    rows[name] = [relative_error(weight, None), relative_error(weight, -1)]
    q, _ = absmax_quantize(weight)
    print(f"{name:12}  relative error: per tensor {rows[name][0]:.4f}, per output channel {rows[name][1]:.4f};  "
          f"weights rounded to 0 per tensor: {(q == 0).float().mean():.1%}")
fig, ax = plt.subplots(figsize=(6, 2.6))
for i, (name, errs) in enumerate(rows.items()):
    ax.bar([i - 0.2, i + 0.2], errs, width=0.4, color=["tab:red", "tab:blue"], label=["per tensor", "per output channel"] if i == 0 else None)
ax.set_xticks([0, 1], list(rows)); ax.set_ylabel("relative error, the other weights"); ax.set_yscale("log"); ax.legend()
plt.show()

# %% [markdown]
# The printed table shows it: without an outlier both scalings are good; with one outlier the
# per-tensor error jumps by more than an order of magnitude and most weights collapse to 0, while
# per output channel it stays far lower: only the other 255 weights of the outlier's own row pay,
# and the other 255 rows keep their error. Per-channel scales cost one float per row, nothing next
# to the row itself. That is why int8 weight-only layers use them.
#
# 打印出的表格说明了一切：没有离群值时两种缩放都很好；有一个离群值时，按张量缩放的误差跃升了一个数量级以上，大多数权重坍缩为 0，而按输出通道缩放的误差仍然低得多：只有离群值所在那一行的其他 255 个权重受损，其余 255 行保持原来的误差。每个通道的 scale 只需每行一个浮点数，与行本身相比微不足道。这就是 int8 仅权重量化层采用它们的原因。

# %% [markdown]
# ## FP8 e4m3: a floating-point byte · FP8 e4m3：一个字节的浮点数
#
# int8's 255 levels are evenly spaced. FP8 spends its 8 bits differently: 1 sign bit, 4 exponent
# bits, 3 mantissa bits (e4m3). Its values are spaced **evenly on a log scale**: between each power
# of two and the next there are $2^3 = 8$ values, so the relative rounding error is at most $2^{-4}$
# wherever the value lies in the normal range, from $2^{-6}$ up to the largest finite value, 448
# (below $2^{-6}$, the subnormals down to $2^{-9}$ are evenly spaced and get relatively coarser).
# PyTorch calls it `torch.float8_e4m3fn` ("fn": finite, no infinities, only NaN). DeepSeek-V3's
# training fed most of its matrix multiplications e4m3 inputs (the report, section 3.3: the linear
# layers' forward and both backward products, e4m3 for every tensor), while the master weights, the
# weight gradients and the optimizer states stayed in FP32 or BF16, and the embedding, the output
# head, the MoE gate, the normalisations and the attention operator kept BF16 or FP32. Its released
# checkpoint stores the linear layers' weights in e4m3 with block scales (below). All 256 bit
# patterns can be listed and drawn.
#
# int8 的 255 个级别是均匀分布的。FP8 用另一种方式分配它的 8 个比特：1 个符号位、4 个指数位、3 个尾数位（e4m3）。它的值 **在对数尺度上均匀分布**：相邻两个 2 的幂之间有 $2^3 = 8$ 个值，所以只要数值落在正规数范围内，即从 $2^{-6}$ 一直到最大的有限值 448，相对舍入误差都不超过 $2^{-4}$（低于 $2^{-6}$ 时，直到 $2^{-9}$ 的次正规数是均匀分布的，相对而言越来越粗）。PyTorch 称它为 `torch.float8_e4m3fn`（"fn"：有限，没有无穷大，只有 NaN）。DeepSeek-V3 训练时，大多数矩阵乘法的输入是 e4m3（技术报告第 3.3 节：线性层的前向和两个反向乘积，所有张量都用 e4m3），而主权重、权重梯度和优化器状态保持 FP32 或 BF16，嵌入、输出头、MoE 门控、归一化和注意力算子保持 BF16 或 FP32。它发布的检查点把线性层的权重以 e4m3 加分块 scale 的形式存储（见下文）。全部 256 种比特模式都可以列出来并画出来。

# %%
codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
grid = torch.unique(codes[codes.isfinite()])
positive = grid[grid > 0]
print(f"finite values: {len(grid)}, NaN codes: {int(codes.isnan().sum())}, largest: {grid.max():.0f} "
      f"(torch.finfo: {torch.finfo(torch.float8_e4m3fn).max:.0f}), smallest positive: {positive.min()} = 2^-9")
print("values in [1, 2):", grid[(grid >= 1) & (grid < 2)].tolist())
fig, axes = plt.subplots(1, 2, figsize=(11, 2.8))
axes[0].plot(positive, torch.zeros_like(positive), "|", markersize=18)
axes[0].set_xscale("log"); axes[0].set_yticks([]); axes[0].set_xlabel("value (log scale)")
axes[0].set_title(f"the {len(positive)} positive e4m3 values: 8 per power of two")
int8_levels = torch.arange(1, 128) / 127 * 448
axes[1].plot(positive[1:], positive.diff() / positive[1:], ".", label="FP8 e4m3")
axes[1].plot(int8_levels[1:], int8_levels.diff() / int8_levels[1:], ".", label="int8 scaled to 448")
axes[1].set_xscale("log"); axes[1].set_yscale("log"); axes[1].set_xlabel("value"); axes[1].set_ylabel("gap to the previous value / value")
axes[1].set_title("relative spacing"); axes[1].legend()
plt.tight_layout(); plt.show()
int8_step = 448 / 127
coarser = float(positive[:-1][positive.diff() > int8_step].min())  # FP8's step to the next value exceeds int8's
print(f"int8 scaled to 448 steps by {int8_step:.2f} everywhere; FP8's step is coarser from {coarser:.0f} up "
      f"(1/{448 / coarser:.0f} of the largest value)")

# %% [markdown]
# Left: the grid is dense near 0 and sparse near 448, evenly on a log axis. Right: FP8's relative
# spacing stays between $2^{-4}$ and $2^{-3}$ over its whole normal range, while int8's grows without
# bound toward 0: small values keep more precision in FP8. Near the top it is the other way round:
# the last line printed where FP8's step becomes coarser than int8's even step. For data without
# outliers, where most of the values, and most of the rounding error, lie within that factor of the
# largest, int8 with its absmax scale rounds more finely than FP8 does: Exercise 5's table shows it
# at an outlier factor of 1. But FP8 still needs a scale: the cell
# below converts a few small values. 0.001 lies below the smallest subnormal, $2^{-9}$ = 0.00195,
# and rounds up to it (it is above half of it), almost doubling; $2^{-10}$ and anything below it become 0;
# and values above 448 do not fit at all. e4m3 has no infinity, and what a bare cast makes of 500 depends
# on the PyTorch release (NaN in older ones; 448 since pull request pytorch/pytorch#178817, merged in
# April 2026; the cell prints what this one does), so the cell clamps to $\pm 448$ first, as the course's quantizers and DeepSeek's do. So FP8 also divides by a scale first, $s = \max|x| / 448$.
#
# 左图：网格在 0 附近密、在 448 附近疏，在对数轴上是均匀的。右图：FP8 的相对间距在整个正规数范围内保持在 $2^{-4}$ 与 $2^{-3}$ 之间，而 int8 的相对间距在接近 0 时无限增大：小数值在 FP8 中保留了更多精度。在最大值附近情况正好相反：最后一行打印出 FP8 的步长从哪里开始比 int8 的均匀步长更粗。对没有离群值的数据，大部分数值以及大部分舍入误差都落在最大值的这个倍数之内，用 absmax scale 的 int8 比 FP8 舍入得更细：练习 5 的表格在离群倍数为 1 时显示的正是这一点。但 FP8 仍然需要 scale：下面的单元格转换了几个很小的值。0.001 低于最小的次正规数 $2^{-9}$ = 0.00195，并向上舍入到它（因为它大于它的一半），几乎变成了两倍；$2^{-10}$ 以及比它更小的值都变成 0；而大于 448 的值根本放不下。e4m3 没有无穷大，直接转换会把 500 变成什么取决于 PyTorch 的版本（较早的版本为 NaN；2026 年 4 月合并的 pull request pytorch/pytorch#178817 之后为 448；单元格会打印当前版本的结果），所以单元格先限制（clamp）到 $\pm 448$，与本课程和 DeepSeek 的量化函数一样。所以 FP8 也要先除以一个 scale，$s = \max|x| / 448$。

# %%
small = torch.tensor([0.001, 0.0009, 2 ** -10, 0.002, 0.1, 500.0])
print("value        ", "  ".join(f"{v:9.6g}" for v in small.tolist()))
print("in e4m3      ", "  ".join(f"{v:9.6g}" for v in small.clamp(-448, 448).to(torch.float8_e4m3fn).float().tolist()))
print(f"smallest subnormal 2^-9 = {2 ** -9:.6g}; largest finite value {torch.finfo(torch.float8_e4m3fn).max:.0f}")
print(f"a bare cast of 500, without the clamp, in torch {torch.__version__}: "
      f"{torch.tensor([500.0]).to(torch.float8_e4m3fn).float().item()}")

# %% [markdown]
# ## DeepSeek-V3's block-wise FP8 · DeepSeek-V3 的分块 FP8
#
# DeepSeek-V3 (technical report, section 3.3, "fine-grained quantization") does not use one scale
# per tensor or per channel, but one per **tile**: each weight matrix is cut into 128 x 128 blocks,
# each with its own scale, and each token's activation vector into 1 x 128 tiles. Its released
# checkpoint stores, next to every FP8 weight, a float32 tensor `weight_scale_inv` of shape
# `(ceil(N/128), ceil(K/128))`, and its inference code (`inference/kernel.py`) dequantizes with
# `block * weight_scale_inv`, where the scale is `amax / 448`. A side that is not a multiple of 128
# gets a smaller last block; nothing is left out.
#
# DeepSeek-V3（技术报告第 3.3 节，"细粒度量化"）既不是每个张量一个 scale，也不是每个通道一个，而是每个 **分块** 一个：每个权重矩阵被切成 128 x 128 的块，每块有自己的 scale；每个词元的激活向量被切成 1 x 128 的分块。它发布的检查点在每个 FP8 权重旁边存了一个形状为 `(ceil(N/128), ceil(K/128))` 的 float32 张量 `weight_scale_inv`，它的推理代码（`inference/kernel.py`）用 `block * weight_scale_inv` 反量化，其中 scale 是 `amax / 448`。不是 128 整数倍的边得到一个较小的最后一块；没有任何元素被遗漏。
#
# Why blocks? An outlier only inflates the scale of its own 128 x 128 block (16,384 weights)
# instead of a whole row or matrix, and a block is exactly the piece a matrix-multiply kernel works
# on at once: DeepSeek's `fp8_gemm` multiplies each 128-long chunk of the dot product by
# `a_scale * b_scale` as it accumulates, so the scales cost almost nothing. Activations are where
# the big outliers live (a few channels carry values far larger than the rest), and they change
# with every token, so their scales are computed on the fly, per token and per 128 channels
# (`act_quant`).
#
# 为什么要分块？一个离群值只会抬高它所在的 128 x 128 块（16,384 个权重）的 scale，而不是整行或整个矩阵的；而且一个块恰好就是矩阵乘法内核一次处理的那一片：DeepSeek 的 `fp8_gemm` 在累加时把点积中每段长 128 的部分乘以 `a_scale * b_scale`，所以这些 scale 几乎不花代价。大的离群值主要出现在激活中（少数通道的值远大于其余通道），而且激活随每个词元变化，所以它们的 scale 是即时计算的，每个词元每 128 个通道一个（`act_quant`）。

# %% [markdown]
# ### Exercise 3 · `fp8_block_quantize` · 练习 3
#
# For `w` of shape `(N, K)`, return `(w_fp8, scale)`: `scale` of shape
# `(ceil(N / block_size), ceil(K / block_size))` with each entry the max of `|w|` over its block
# divided by 448, and `w_fp8 = (w / scale of its block).to(torch.float8_e4m3fn)`, shape `(N, K)`.
# Cover the ragged edge. Compute in float32 (`w.float()`: DeepSeek-V3 stores `weight_scale_inv` in
# float32), and guard the all-zero block as in exercise 1: clamp each block's amax to at least 1e-4
# before dividing, so that a block of zeros (a pruned piece of a weight) becomes zeros, not NaN
# (FP8 has a NaN). One way: pad `|w|` with zeros to whole blocks and
# `reshape(nb, block_size, kb, block_size)`, then `amax(dim=(1, 3))`; spread the scales back to
# `(N, K)` with `repeat_interleave` and slice.
#
# 对形状为 `(N, K)` 的 `w`，返回 `(w_fp8, scale)`：`scale` 的形状为 `(ceil(N / block_size), ceil(K / block_size))`，每个元素是其块内 `|w|` 的最大值除以 448；`w_fp8 = (w / 所在块的 scale).to(torch.float8_e4m3fn)`，形状为 `(N, K)`。要覆盖不整齐的边缘。用 float32 计算（`w.float()`：DeepSeek-V3 以 float32 存储 `weight_scale_inv`），并像练习 1 那样保护全零的块：相除之前把每个块的 amax 限制为至少 1e-4，让一个全零的块（权重中被剪枝的一片）变成零，而不是 NaN（FP8 有 NaN）。一种做法：用 0 把 `|w|` 填充到整块，`reshape(nb, block_size, kb, block_size)`，再 `amax(dim=(1, 3))`；用 `repeat_interleave` 把 scale 铺回 `(N, K)` 并切片。
#
# <!-- rules: fp8_block_quantize -->
#
# #### Rules that grading checks · 评分检查的规则 (`fp8_block_quantize`)
#
# - Graded in float32 and bfloat16: `w_fp8` is `torch.float8_e4m3fn` and `scale` float32, computed in float32 whatever the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - An all-zero block may be guarded any way that gives a finite scale and zeros; every other block (amax at least 1e-4) gets exactly amax / 448, compared relative to the scale's size.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 在 float32、bfloat16 下评分：`w_fp8` 为 `torch.float8_e4m3fn`，`scale` 为 float32，无论输入是什么 dtype 都用 float32 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 全零的块可以用任何方式保护，只要 scale 有限且结果为零；其余每个块（amax 至少为 1e-4）的 scale 必须恰好是 amax / 448，按相对于 scale 大小的误差比较。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "fp8_block_quantize", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fp8_block_quantize(w, block_size=128):
    """(N, K) -> (w_fp8 (N, K) float8_e4m3fn, scale (ceil(N/b), ceil(K/b))), w ~ w_fp8 * scale of its block."""
    ### BEGIN SOLUTION
    n, k = w.shape
    nb, kb = -(-n // block_size), -(-k // block_size)
    padded = F.pad(w.float().abs(), (0, kb * block_size - k, 0, nb * block_size - n))
    scale = padded.reshape(nb, block_size, kb, block_size).amax(dim=(1, 3)).clamp(min=1e-4) / 448
    full = scale.repeat_interleave(block_size, 0)[:n].repeat_interleave(block_size, 1)[:, :k]
    w_fp8 = (w.float() / full).clamp(-448, 448).to(torch.float8_e4m3fn)
    return w_fp8, scale
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_fp8_block_quantize", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close

from autograder.checks import nb11

with nb11.as_graded(fp8_block_quantize):
    w = torch.ones(3, 5)
    w[2, 4] = -8.96
    w_fp8, scale = fp8_block_quantize(w, block_size=2)
    expect(w_fp8.dtype == torch.float8_e4m3fn and w_fp8.shape == (3, 5), "w_fp8 should be float8_e4m3fn with the shape of w.",
           "w_fp8 应为 float8_e4m3fn，形状与 w 相同。")
    expect(scale.shape == (2, 3), "A 3 x 5 weight in 2 x 2 blocks has ceil(3/2) x ceil(5/2) = 2 x 3 blocks.",
           "按 2 x 2 分块的 3 x 5 权重有 ceil(3/2) x ceil(5/2) = 2 x 3 个块。", f"shape {tuple(scale.shape)}")
    expect_close(scale, torch.tensor([[1, 1, 1], [1, 1, 8.96]]) / 448, "Each block's scale should be its max |w| / 448.",
                 "每个块的 scale 应为块内 max |w| / 448。")
    expect(float(w_fp8[2, 4].float()) == -448.0, "The largest |w| of a block should become ±448 in FP8.", "块内最大的 |w| 在 FP8 中应变为 ±448。")
    zero_fp8, _ = fp8_block_quantize(torch.zeros(2, 2), block_size=2)
    expect(not zero_fp8.float().isnan().any(), "An all-zero block should become zeros, not NaN: clamp its amax to a small floor (1e-4) before dividing.",
           "全零的块应变成零而不是 NaN：相除之前用一个小的下限（1e-4）限制它的 amax。")
    print("✓ fp8_block_quantize")

# %% nbgrader={"grade": true, "grade_id": "test_fp8_block_quantize_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb11
nb11.check_fp8_block_quantize(fp8_block_quantize)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 4 · `fp8_block_dequantize` · 练习 4
#
# Return `w_fp8` as float32, each element multiplied by the scale of its block (what DeepSeek-V3's
# `weight_dequant` computes), shape `(N, K)`, ragged edge included.
#
# 把 `w_fp8` 转成 float32 返回，每个元素乘以它所在块的 scale（即 DeepSeek-V3 的 `weight_dequant` 的计算），形状为 `(N, K)`，包括不整齐的边缘。
#
# <!-- rules: fp8_block_dequantize -->
#
# #### Rules that grading checks · 评分检查的规则 (`fp8_block_dequantize`)
#
# - Graded in float32: the result is float32.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 在 float32 下评分：结果是 float32。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "fp8_block_dequantize", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fp8_block_dequantize(w_fp8, scale, block_size=128):
    """w_fp8 (N, K) and scale (ceil(N/b), ceil(K/b)) -> float32 (N, K)."""
    ### BEGIN SOLUTION
    n, k = w_fp8.shape
    full = scale.repeat_interleave(block_size, 0)[:n].repeat_interleave(block_size, 1)[:, :k]
    return w_fp8.float() * full
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_fp8_block_dequantize", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb11

with nb11.as_graded(fp8_block_dequantize):
    w_fp8 = torch.full((3, 5), 2.0).to(torch.float8_e4m3fn)
    scale = torch.tensor([[1.0, 10.0, 100.0], [0.5, 0.25, 0.125]])
    expected = torch.tensor([[2, 2, 20, 20, 200], [2, 2, 20, 20, 200], [1, 1, 0.5, 0.5, 0.25]])
    expect_close(fp8_block_dequantize(w_fp8, scale, block_size=2), expected,
                 "Each element should be multiplied by the scale of its 2 x 2 block, the ragged last row and column included.",
                 "每个元素应乘以它所在 2 x 2 块的 scale，包括不整齐的最后一行和最后一列。")
    print("✓ fp8_block_dequantize")

# %% nbgrader={"grade": true, "grade_id": "test_fp8_block_dequantize_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb11
nb11.check_fp8_block_dequantize(fp8_block_dequantize)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 5 · `fp8_activation_quantize` · 练习 5
#
# For activations `x` of shape `(..., K)`, with K a multiple of `block_size` (the caller guarantees it, as
# DeepSeek-V3's `act_quant` asserts it), return `(x_fp8, scale)`:
# one scale per token per `block_size` channels, shape `(..., K // block_size)`, equal to the max of
# `|x|` over that tile / 448, and `x_fp8` of the shape of `x`. Compute in float32, and clamp each
# tile's amax to at least 1e-4 (DeepSeek's `act_quant` does): a padding token is all zeros, and
# must come out as zeros, not NaN. Hint: `x.unflatten(-1, (-1, block_size))`.
#
# 对形状为 `(..., K)` 的激活 `x`，K 是 `block_size` 的整数倍（由调用者保证，DeepSeek-V3 的 `act_quant` 会断言这一点），返回 `(x_fp8, scale)`：每个词元每 `block_size` 个通道一个 scale，形状为 `(..., K // block_size)`，等于该分块内 `|x|` 的最大值除以 448；`x_fp8` 的形状与 `x` 相同。用 float32 计算，并把每个分块的 amax 限制为至少 1e-4（DeepSeek 的 `act_quant` 就是这样做的）：填充词元全是零，必须变成零，而不是 NaN。提示：`x.unflatten(-1, (-1, block_size))`。
#
# <!-- rules: fp8_activation_quantize -->
#
# #### Rules that grading checks · 评分检查的规则 (`fp8_activation_quantize`)
#
# - Not graded (the caller guarantees it): the last dimension K is a multiple of `block_size` (DeepSeek-V3's `act_quant` asserts it).
# - Graded in float32 and bfloat16: `x_fp8` is `torch.float8_e4m3fn` and `scale` float32, computed in float32 whatever the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - An all-zero tile may be guarded any way that gives a finite scale and zeros; every other tile (amax at least 1e-4) gets exactly amax / 448, compared relative to the scale's size.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：最后一维 K 是 `block_size` 的整数倍（DeepSeek-V3 的 `act_quant` 会断言这一点）。
# - 在 float32、bfloat16 下评分：`x_fp8` 为 `torch.float8_e4m3fn`，`scale` 为 float32，无论输入是什么 dtype 都用 float32 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 全零的分块可以用任何方式保护，只要 scale 有限且结果为零；其余每个分块（amax 至少为 1e-4）的 scale 必须恰好是 amax / 448，按相对于 scale 大小的误差比较。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "fp8_activation_quantize", "locked": false, "schema_version": 3, "solution": true, "task": false}
def fp8_activation_quantize(x, block_size=128):
    """(..., K) -> (x_fp8 (..., K), scale (..., K / b)): DeepSeek-V3's act_quant, 1 x block_size tiles."""
    ### BEGIN SOLUTION
    tiles = x.float().unflatten(-1, (-1, block_size))           # (..., K/b, b)
    scale = tiles.abs().amax(dim=-1).clamp(min=1e-4) / 448     # (..., K/b); a zero tile: no 0 / 0
    x_fp8 = (tiles / scale.unsqueeze(-1)).clamp(-448, 448).to(torch.float8_e4m3fn)
    return x_fp8.flatten(-2), scale
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_fp8_activation_quantize", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close

from autograder.checks import nb11

with nb11.as_graded(fp8_activation_quantize):
    x = torch.tensor([[[1.0, -4.48, 0.5, 0.25], [44.8, 1.0, 2.0, -0.448]]])  # (1 batch, 2 tokens, 4 channels)
    x_fp8, scale = fp8_activation_quantize(x, block_size=2)
    expect(x_fp8.dtype == torch.float8_e4m3fn and x_fp8.shape == x.shape, "x_fp8 should be float8_e4m3fn with the shape of x.",
           "x_fp8 应为 float8_e4m3fn，形状与 x 相同。")
    expect_close(scale, torch.tensor([[[0.01, 0.5 / 448], [0.1, 2 / 448]]]),
                 "There should be one scale per token per block of 2 channels: its max |x| / 448.",
                 "每个词元每 2 个通道应有一个 scale：该分块的 max |x| / 448。")
    padding_fp8, _ = fp8_activation_quantize(torch.zeros(1, 4), block_size=2)
    expect(not padding_fp8.float().isnan().any(), "A padding token (all zeros) should become zeros, not NaN: clamp each tile's amax to a small floor (1e-4).",
           "填充词元（全是零）应变成零而不是 NaN：用一个小的下限（1e-4）限制每个分块的 amax。")
    print("✓ fp8_activation_quantize")

# %% nbgrader={"grade": true, "grade_id": "test_fp8_activation_quantize_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb11
nb11.check_fp8_activation_quantize(fp8_activation_quantize)
### END HIDDEN TESTS

# %% [markdown]
# Now the experiment that justifies the tiles. Take activations of 64 tokens of width 1024 and make
# channel 5 larger than the others by a growing factor. LLM.int8() reports such outlier feature
# dimensions in the hidden states of large transformers; the sweep goes on to a million times, far
# past what such models show, to find where each format breaks. Quantize with one scale for the whole tensor, in int8
# and in FP8, and with DeepSeek-V3's 1 x 128 FP8 tiles, and measure the error on the **other**
# 1023 channels: what the outlier costs everyone else.
#
# 现在做一个说明分块合理性的实验。取 64 个词元、宽度 1024 的激活，让通道 5 比其余通道大若干倍，倍数逐渐增大。LLM.int8() 报告过大型 Transformer 的隐藏状态中这样的离群特征维度；这里的扫描一直到一百万倍，远超这些模型中出现的程度，为的是找出每种格式在哪里失效。分别用整个张量一个 scale 的 int8 和 FP8，以及 DeepSeek-V3 的 1 x 128 FP8 分块进行量化，测量 **其余** 1023 个通道上的误差：离群值让其他所有值付出的代价。

# %%
base = torch.randn(64, 1024, generator=torch.Generator().manual_seed(3))
quiet = torch.ones(1024, dtype=torch.bool)
quiet[5] = False


def int8_one_scale(x):
    q, s = absmax_quantize(x)
    return dequantize(q, s)


def fp8_one_scale(x):
    s = x.abs().max() / 448
    return (x / s).to(torch.float8_e4m3fn).float() * s


def fp8_tiles(x):
    x_fp8, s = fp8_activation_quantize(x)
    return (x_fp8.float().unflatten(-1, (-1, 128)) * s.unsqueeze(-1)).flatten(-2)


factors = [1, 10, 100, 1e3, 1e4, 1e5, 1e6]
errors = {name: [] for name in ("int8, one scale", "FP8, one scale", "FP8, 1 x 128 tiles")}
for f in factors:
    acts = base.clone()
    acts[:, 5] *= f
    for name, quantize in zip(errors, (int8_one_scale, fp8_one_scale, fp8_tiles)):
        errors[name].append(float((quantize(acts) - acts)[:, quiet].norm() / acts[:, quiet].norm()))
print("outlier factor " + "".join(f"{f:>9.0e}" for f in factors))
for name, errs in errors.items():
    print(f"{name:19}" + "".join(f"{e:9.4f}" for e in errs))
fig, ax = plt.subplots(figsize=(6.5, 3))
for name, errs in errors.items():
    ax.plot(factors, errs, "o-", label=name)
ax.set_xscale("log"); ax.set_yscale("log"); ax.set_xlabel("channel 5 is this many times larger")
ax.set_ylabel("relative error, other channels"); ax.legend(); plt.show()

# %% [markdown]
# Read the printed table. int8 with one scale is ruined by an outlier of 100: the step grows with
# the outlier until the quiet channels round to 0 (error 1). FP8 with one scale holds much longer,
# because its grid is logarithmic: the quiet values only slide down the exponent range, until
# they reach the subnormals and then 0. With tiles, only the tile that holds channel 5 (channels
# 0 to 127) pays; the other 7 tiles of each token keep FP8's ordinary error, so the total error
# of the quiet channels stays far lower. Weights are handled the same way with 128 x 128 blocks.
#
# 读一读打印出的表格。整体一个 scale 的 int8 被 100 倍的离群值毁掉了：步长随离群值增大，直到安静的通道被舍入为 0（误差为 1）。整体一个 scale 的 FP8 坚持得久得多，因为它的网格是对数的：安静的值只是沿指数范围往下滑，直到落入次正规数，然后变成 0。使用分块时，只有包含通道 5 的那个分块（通道 0 到 127）付出代价；每个词元的其余 7 个分块保持 FP8 通常的误差，所以安静通道的总误差要低得多。权重也用同样的方式处理，只是分块为 128 x 128。

# %% [markdown]
# ## Weight-only int8 and W8A8 · 仅权重 int8 与 W8A8
#
# Storing int8 saves memory, but is it faster? Only if the matrix multiply reads the int8 weight
# directly. The obvious forward, `F.linear(x, q.float() * scale)`, first writes a whole float32
# copy of the weight (reading 1 byte and writing 4 per weight) and then reads it again: more memory
# traffic than the float32 layer, so expect it to be **slower** (the measurement below shows it). PyTorch has an int8 weight-only matmul
# kernel, the ATen operator `torch._weight_int8pack_mm(x, w_int8, scales)` (the leading underscore
# marks it as internal: it has no documentation page, but a stable, descriptive name). `x` is
# `(M, K)`, `w_int8` is `(N, K)` int8, `scales` is `(N,)` in the dtype of `x`, and it returns
# `x @ (w_int8 * scales[:, None]).T` without ever building that float weight. Two practical facts,
# measured on this course's machines: it is fast with **bfloat16** activations (in float32 it runs a
# slower path), and it is only safe when `K` is a multiple of 16. Other sizes crash the kernel or,
# worse, return wrong numbers without any error: on a processor with AVX-512, K = 24 and K = 40 gave
# wrong results while 16, 32 and 48 were right. Every layer in this notebook and in its tests has K
# a multiple of 16, and `utils.quantize`'s layer falls back to an exact, slower path for other sizes.
#
# 存成 int8 能省内存，但会更快吗？只有当矩阵乘法直接读取 int8 权重时才会。最直接的 forward，`F.linear(x, q.float() * scale)`，会先写出一份完整的 float32 权重副本（每个权重读 1 字节、写 4 字节），然后再把它读一遍：内存流量比 float32 层还多，所以可以预期它 **更慢**（下面的测量会显示出来）。PyTorch 有一个 int8 仅权重的矩阵乘法内核，即 ATen 算子 `torch._weight_int8pack_mm(x, w_int8, scales)`（开头的下划线表示它是内部算子：没有文档页面，但名字稳定且含义清楚）。`x` 为 `(M, K)`，`w_int8` 为 `(N, K)` 的 int8，`scales` 为 `(N,)`、dtype 与 `x` 相同，它返回 `x @ (w_int8 * scales[:, None]).T`，却从不构造那个浮点权重。在本课程的机器上测得两个实际情况：它在 **bfloat16** 激活下很快（在 float32 下走的是较慢的路径）；只有 `K` 是 16 的倍数时它才可靠。其他尺寸会让内核崩溃，或者更糟，不报任何错误却返回错误的数：在一台有 AVX-512 的处理器上，K = 24 和 K = 40 给出了错误的结果，而 16、32 和 48 是对的。本笔记本及其测试中每一层的 K 都是 16 的倍数；`utils.quantize` 的层在其他尺寸下退回到一条精确但较慢的路径。

# %% [markdown]
# What that kernel saves is bytes, not arithmetic: it widens every int8 weight to float and
# multiplies in float, one multiply-add per weight as float32 does, plus the conversion. This is
# **weight-only** quantization (int8 weights, 16-bit activations). On a GPU, or wherever memory is
# far slower than the arithmetic, fewer bytes is what counts; on one CPU core the conversions and
# the float multiply-adds take time of their own, and the measurement below shows how much of the
# saving they leave.
#
# 这个内核省下的是字节，而不是运算：它把每个 int8 权重扩展成浮点数再做浮点乘法，每个权重一次乘加，和 float32 一样，外加一次转换。这就是 **仅权重** 量化（int8 权重，16 位激活）。在 GPU 上，或者在内存远比运算慢的地方，字节少才是关键；而在单个 CPU 核上，这些转换和浮点乘加本身也要花时间，下面的测量会显示它们留下了多少收益。
#
# **W8A8** quantizes the activations too, to 8 bits with a scale computed at
# every call, multiplies them by the int8 weights and adds the products in int32; the float result
# is the int32 sum times the activation scale times the weight scale. (fbgemm's dynamic path, used
# below, makes the activations unsigned bytes, 0 to 255 around a zero point, with one scale and zero
# point per call for all its tokens: one token at batch 1.) x86 processors have instructions for
# exactly this: AVX2's `vpmaddubsw` multiplies 32 pairs of an unsigned and a signed byte at once
# (adding neighbouring products into 16 bits), AVX-512 VNNI's `vpdpbusd` multiplies 64 pairs and
# adds them straight into 32-bit sums. PyTorch's x86 int8 backend, fbgemm, runs such a matmul; `utils.w8a8.W8A8Linear`
# wraps it (`torch.ops.quantized.linear_prepack` once, `torch.ops.quantized.linear_dynamic` at
# every call, int8 weights with one scale per output channel, as yours).
#
# **W8A8** 把激活也量化为 8 位（scale 在每次调用时计算），再与 int8 权重相乘，把乘积累加到 int32 中；浮点结果就是 int32 的和乘以激活的 scale 再乘以权重的 scale。（下面用到的 fbgemm 动态路径把激活变成无符号字节，以一个零点为中心取 0 到 255，每次调用对其中所有词元只用一个 scale 和一个零点：批大小为 1 时就是一个词元。）x86 处理器正好有做这件事的指令：AVX2 的 `vpmaddubsw` 一次把 32 对无符号字节与有符号字节相乘（把相邻的乘积加成 16 位），AVX-512 VNNI 的 `vpdpbusd` 一次把 64 对字节相乘并直接加到 32 位的和中。PyTorch 的 x86 int8 后端 fbgemm 就运行这样的矩阵乘法；`utils.w8a8.W8A8Linear` 封装了它（一次 `torch.ops.quantized.linear_prepack`，每次调用 `torch.ops.quantized.linear_dynamic`，int8 权重每个输出通道一个 scale，和你的一样）。

# %% [markdown]
# ### Exercise 6 · `Int8WeightOnlyLinear` · 练习 6
#
# Write the module. `from_linear(linear)` (a classmethod) quantizes `linear.weight` `(out, in)`
# with one scale per output channel (your `absmax_quantize` with `dim=-1`), keeps the int8 weight
# and the scales as buffers (`self.register_buffer`), and copies the bias (or keeps `None`). Keep
# no float copy of the weight. `forward(x)` takes `(..., in)`, flattens it to `(M, in)`, calls
# `torch._weight_int8pack_mm` on `x` in bfloat16 (made `.contiguous()`: the kernel reads each row in one
# piece, and `x` may be a transposed copy) with bfloat16 scales, converts back to the dtype of
# `x`, adds the bias in that dtype and restores the shape `(..., out)`. The hidden test times it against the
# float32 `nn.Linear` at 4096 x 4096 on one thread and fails a forward that takes 1.5 times the
# float32 time or more (a Python loop, extra work for every weight), unless the course's own layer,
# timed beside it, is that slow too (where PyTorch has no vector kernel for this product). It does
# not demand a speed-up: how much this kernel gains over float32 depends on the processor, as the
# next cell measures.
#
# 编写这个模块。`from_linear(linear)`（类方法）对 `linear.weight` `(out, in)` 按每个输出通道一个 scale 进行量化（用你的 `absmax_quantize`，`dim=-1`），把 int8 权重和 scale 存为缓冲区（`self.register_buffer`），并复制偏置（或保持 `None`）。不要保留权重的浮点副本。`forward(x)` 接收 `(..., in)`，展平为 `(M, in)`，对转成 bfloat16 的 `x`（再调用 `.contiguous()`：内核一次读取一整行，而 `x` 可能是转置得到的副本）和 bfloat16 的 scale 调用 `torch._weight_int8pack_mm`，再转回 `x` 的 dtype，加上（同样是该 dtype 的）偏置并恢复形状 `(..., out)`。隐藏测试会在单线程上以 4096 x 4096 的尺寸把它与 float32 的 `nn.Linear` 比较计时，耗时达到 float32 的 1.5 倍或更多的 forward 判为不通过（Python 循环、对每个权重的额外工作），除非在旁边一起计时的课程自己的层也同样慢（PyTorch 没有为这种乘法提供向量内核的处理器上）。它不要求加速：这个内核比 float32 快多少取决于处理器，下一个单元格会测量。
#
# <!-- rules: Int8WeightOnlyLinear -->
#
# #### Rules that grading checks · 评分检查的规则 (`Int8WeightOnlyLinear`)
#
# - Not graded (the caller guarantees it): `in_features` is a multiple of 16 (the CPU kernel of `torch._weight_int8pack_mm` steps through it by 16).
# - Graded in float32, float64 and bfloat16: the output has x's dtype (the product may run on bfloat16 activations, as `torch._weight_int8pack_mm` takes them).
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - The int8 weight (exactly `absmax_quantize(linear.weight, dim=-1)`'s codes) and the scales are buffers of the layer; no floating-point copy of the weight is kept, in the layer or anywhere else, and the layer does not read the `nn.Linear` it came from, nor hold it through an autograd graph (copy detached tensors).
# - `x` may be non-contiguous (a column-major copy): `torch._weight_int8pack_mm` reads each row of its bfloat16 input in one piece, so make that input `.contiguous()`.
# - `forward` builds no floating-point tensor as large as the weight, and takes less than 1.5 times the float32 `nn.Linear`'s time at 4096 x 4096 on one thread (unless the course's own layer, timed beside it, is that slow too).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：`in_features` 是 16 的整数倍（`torch._weight_int8pack_mm` 的 CPU 内核以 16 为步长处理它）。
# - 在 float32、float64、bfloat16 下评分：输出与 x 的 dtype 相同（乘法可以像 `torch._weight_int8pack_mm` 那样在 bfloat16 激活上进行）。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - int8 权重（恰好是 `absmax_quantize(linear.weight, dim=-1)` 的整数）和 scale 是该层的缓冲区；不在层中或其他任何地方保留权重的浮点副本，该层也不读取它所来自的 `nn.Linear`，也不通过自动求导计算图持有它（复制分离后的张量）。
# - `x` 可能不是连续的（列优先的副本）：`torch._weight_int8pack_mm` 一次读取其 bfloat16 输入的一整行，所以要把这个输入变成 `.contiguous()`。
# - `forward` 不构造与权重一样大的浮点张量，并且在单线程、4096 x 4096 下耗时少于 float32 `nn.Linear` 的 1.5 倍（除非在旁边一起计时的课程自己的层也同样慢）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "Int8WeightOnlyLinear", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Int8WeightOnlyLinear(nn.Module):
    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        ### BEGIN SOLUTION
        self.register_buffer("weight", torch.zeros(out_features, in_features, dtype=torch.int8))
        self.register_buffer("scale", torch.ones(out_features))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)
        ### END SOLUTION

    @classmethod
    def from_linear(cls, linear):
        ### BEGIN SOLUTION
        layer = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        q, scale = absmax_quantize(linear.weight.detach(), dim=-1)   # (out, in), (out, 1)
        layer.weight.copy_(q)
        layer.scale.copy_(scale.squeeze(-1))
        if linear.bias is not None:
            layer.bias.copy_(linear.bias.detach())
        return layer
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        x2 = x.reshape(-1, self.in_features).to(torch.bfloat16).contiguous()          # (M, in)
        y = torch._weight_int8pack_mm(x2, self.weight, self.scale.to(torch.bfloat16)).to(x.dtype)
        if self.bias is not None:
            y = y + self.bias.to(x.dtype)
        return y.reshape(*x.shape[:-1], self.out_features)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_Int8WeightOnlyLinear", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from torch import nn
from autograder.checks import expect, expect_close

from autograder.checks import nb11

with nb11.as_graded(Int8WeightOnlyLinear):
    expect(hasattr(Int8WeightOnlyLinear, "from_linear"), "Int8WeightOnlyLinear should have a classmethod from_linear(linear).",
           "Int8WeightOnlyLinear 应有类方法 from_linear(linear)。")
    torch.manual_seed(0)
    linear = nn.Linear(16, 8)
    layer = Int8WeightOnlyLinear.from_linear(linear)
    int8_tensors = [t for t in [*layer.buffers(), *layer.parameters()] if t.dtype == torch.int8]
    expect(len(int8_tensors) == 1 and int8_tensors[0].shape == (8, 16),
           "The layer should keep its weight as one int8 buffer of shape (out_features, in_features).",
           "该层应把权重存为一个形状为 (out_features, in_features) 的 int8 缓冲区。")
    x = torch.randn(2, 3, 16)
    with torch.no_grad():
        expect_close(layer(x), linear(x), "The int8 layer should give nearly the outputs of the float layer.",
                     "int8 层的输出应与浮点层几乎相同。", atol=0.03, rtol=0.02)
    print("✓ Int8WeightOnlyLinear")

# %% nbgrader={"grade": true, "grade_id": "test_Int8WeightOnlyLinear_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb11
nb11.check_Int8WeightOnlyLinear(Int8WeightOnlyLinear)
### END HIDDEN TESTS

# %% [markdown]
# One layer of 4096 x 4096, one token, four ways. Its float32 weight, 64 MB, is larger than the
# last-level cache of most processors, so it comes from main memory at every call; its int8
# weight, 16 MB, fits in some (the cell prints this one's cache), and such a layer can then pass
# the read rate. The four ways: float32 `nn.Linear`, the "dequantize
# then multiply" forward, yours (weight-only) and W8A8 on fbgemm. Times are the best of interleaved
# rounds, on one thread, as ratios to float32; the cell also prints what this processor offers.
#
# 一个 4096 x 4096 的层，一个词元，四种做法。它的 float32 权重有 64 MB，比大多数处理器的末级缓存大，所以每次调用都要从主存读取；它的 int8 权重有 16 MB，能放进一些处理器的末级缓存（单元格会打印这个处理器的缓存大小），这时这样的层可以超过读取速率。四种做法是：float32 的 `nn.Linear`、"先反量化再相乘" 的 forward、你的实现（仅权重）以及基于 fbgemm 的 W8A8。时间取交替进行的多轮中最好的一轮，单线程，以相对 float32 的比值给出；单元格也打印出这个处理器提供了什么。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.w8a8 import W8A8Linear

side = 1024 if GRADING else 4096  # grading: a small layer, whose timings no one reads
big = nn.Linear(side, side)
mine = Int8WeightOnlyLinear.from_linear(big)
dequantize_first = lambda x: F.linear(x, mine.weight.float() * mine.scale[:, None], mine.bias)
variants = {"float32 nn.Linear": big, "dequantize, then F.linear": dequantize_first,
            "Int8WeightOnlyLinear (yours)": mine, "W8A8Linear (fbgemm)": W8A8Linear.from_linear(big)}
best = {name: float("inf") for name in variants}
x1 = torch.randn(1, side)
with torch.inference_mode():
    for r in range(10 if GRADING else 30):
        for name, fn in variants.items():
            if r >= 3 and fn is dequantize_first:  # far behind from the first round: three are enough
                continue
            start = time.perf_counter(); fn(x1); best[name] = min(best[name], time.perf_counter() - start)
print(f"vector instructions PyTorch uses here: {torch.backends.cpu.get_cpu_capability()}; "
      f"AVX-512 VNNI: {'yes' if torch.cpu._is_vnni_supported() else 'no'}")
weight_bytes = {"float32 nn.Linear": side * side * 4,
                "dequantize, then F.linear": side * side * (1 + 4 + 4 + 4 + 4),  # .float(), * scale, F.linear reads
                "Int8WeightOnlyLinear (yours)": side * side, "W8A8Linear (fbgemm)": side * side}  # weight bytes per call
for name, t in best.items():
    print(f"{name:29} {1e6 * t:8.0f} us   {t / best['float32 nn.Linear']:.2f}x the float32 time   "
          f"{weight_bytes[name] / t / 1e9:5.1f} GB/s of weight bytes")
print(f"read rate measured at the top: {bandwidth / 1e9:.1f} GB/s (the line for a weight read from main memory); "
      f"copy {copy_rate / 1e9:.1f} GB/s (read + write, a reference)")
if llc:
    print(f"last-level cache {llc / 2**20:.0f} MiB: the float32 weight is {side * side * 4 / llc:.1f}x it, the int8 "
          f"weight {side * side / llc:.1f}x" + (": the int8 layers can be served partly from the cache"
                                                if side * side <= llc else ": both come from main memory"))
above = [name for name, t in best.items() if weight_bytes[name] / t > bandwidth]
print("above the read rate: " + (", ".join(above) if above else "no row"))
ratio = {name: t / best["float32 nn.Linear"] for name, t in best.items()}
w8a8, yours = ratio["W8A8Linear (fbgemm)"], ratio["Int8WeightOnlyLinear (yours)"]
print(f"on this machine, at {side} x {side}: W8A8 {w8a8:.2f}x and your weight-only layer {yours:.2f}x the float32 time, "
      + ("W8A8 the faster of the two" if w8a8 < yours else "your weight-only layer the faster of the two")
      + f"; dequantizing first {ratio['dequantize, then F.linear']:.1f}x, "
      + ("slower than float32" if ratio["dequantize, then F.linear"] > 1 else "not slower than float32 here"))

# %% [markdown]
# Compare the printed ratios of the machine that ran this. The dequantize-first forward moves more
# bytes than float32 (the int8 weight read, then two float32 copies written and read: `.float()`
# and `* scale`); the last line says whether that made it slower here. The last column divides the
# weight bytes each layer moves by its time. A row that reads its weight from main memory stays
# below the read rate printed under the table; a row above it was served partly from the cache
# (the cell names such rows, and says which weights fit in the cache).
#
# 比较运行本笔记本的机器打印出的比值。先反量化的 forward 搬运的字节比 float32 还多（读取 int8 权重，再写出并读回两份 float32 副本：`.float()` 和 `* scale`）；最后一行说明它在这里是否因此更慢。最后一列是每个层搬运的权重字节数除以它的时间。从主存读取权重的行会低于表格下方打印的读取速率；高于它的行有一部分由缓存供给（单元格会列出这样的行，并说明哪些权重放得进缓存）。
#
# An int8 layer reads a quarter of float32's bytes, so 0.25x, a quarter of the bytes at float32's
# rate, is a reference for the int8 layers, not a floor that none can pass. Both int8 layers read
# the same bytes and differ in the work per weight: your weight-only layer widens each weight to
# float and multiplies in float; W8A8 multiplies 8-bit activations by int8 weights, many pairs per
# instruction, adding them in int32. Which is faster depends on how fast a core converts and
# multiplies compared with how fast it streams memory, which differs from one processor to another:
# the first line of the output says which vector instructions this one offers, and the last line
# which layer was faster here. The hidden test looks inside one forward for a float tensor as large
# as the weight (the sign of dequantizing first), then times your layer against float32 at
# 4096 x 4096 as described in the exercise.
#
# int8 层读取的字节是 float32 的四分之一，所以 0.25x，即以 float32 的速率读四分之一的字节，只是 int8 层的一个参照，而不是谁都不能越过的下限。两个 int8 层读取的字节相同，差别在每个权重上的工作：你的仅权重层把每个权重扩展成浮点数，再做浮点乘法；W8A8 用 8 位激活乘 int8 权重，每条指令处理很多对，并在 int32 中累加。哪个更快，取决于一个核做转换和乘法的速度与它流式读取内存的速度之比，而这因处理器而异：输出的第一行说明这个处理器提供哪些向量指令，最后一行说明在这里哪个层更快。隐藏测试先检查一次 forward 中是否出现了与权重一样大的浮点张量（先反量化的迹象），再按练习中说的方式在 4096 x 4096 的尺寸上把你的层与 float32 比较计时。

# %% [markdown]
# ### Exercise 7 · `quantize_model_` · 练习 7
#
# Replace, in place, every `nn.Linear` of `model`, however deeply nested (inside `nn.Sequential`,
# `nn.ModuleList`, `nn.ModuleDict` or any custom module), by `Int8WeightOnlyLinear.from_linear(...)`,
# except those whose name in `model.named_modules()` is in `skip` (for example `skip=("out_head",)`
# keeps GPT's output head in float). Return `model`. Hint: for each module of
# `list(model.named_modules())`, look at its `named_children()` and `setattr(parent, child_name, new)`.
# The trailing underscore is PyTorch's convention for "changes its argument in place" (`add_`, `quantize_`).
#
# 原地替换 `model` 中的每个 `nn.Linear`，无论嵌套多深（在 `nn.Sequential`、`nn.ModuleList`、`nn.ModuleDict` 或任何自定义模块之中），换成 `Int8WeightOnlyLinear.from_linear(...)`；但在 `model.named_modules()` 中名字属于 `skip` 的除外（例如 `skip=("out_head",)` 让 GPT 的输出头保持浮点）。返回 `model`。提示：对 `list(model.named_modules())` 中的每个模块，查看它的 `named_children()`，并用 `setattr(parent, child_name, new)` 替换。末尾的下划线是 PyTorch 表示 "原地修改参数" 的惯例（`add_`、`quantize_`）。
#
# <!-- rules: quantize_model_ -->
#
# #### Rules that grading checks · 评分检查的规则 (`quantize_model_`)
#
# - Changes `model` in place (that is its job); no other argument.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - `skip` holds full dotted names of linears in `model.named_modules()`; a name of a container keeps nothing.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 原地修改 `model`（这正是它的任务）；不修改其他参数。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - `skip` 中是线性层在 `model.named_modules()` 中的完整点分名字；容器的名字不会保留任何层。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "quantize_model_", "locked": false, "schema_version": 3, "solution": true, "task": false}
def quantize_model_(model, skip=()):
    """Every nn.Linear (at any depth) -> Int8WeightOnlyLinear, in place, except the names in skip."""
    ### BEGIN SOLUTION
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            full_name = f"{name}.{child_name}" if name else child_name
            if isinstance(child, nn.Linear) and full_name not in skip:
                setattr(module, child_name, Int8WeightOnlyLinear.from_linear(child))
    return model
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_quantize_model_", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from torch import nn
from autograder.checks import expect

from autograder.checks import nb11

with nb11.as_graded(quantize_model_):
    net = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Sequential(nn.Linear(16, 16)), nn.Linear(16, 8))
    expect(quantize_model_(net, skip=("3",)) is net, "quantize_model_ should return the same model, changed in place.",
           "quantize_model_ 应返回同一个模型（已原地修改）。")
    expect(not isinstance(net[0], nn.Linear) and not isinstance(net[2][0], nn.Linear),
           "Every nn.Linear, nested ones included, should be replaced.", "每个 nn.Linear（包括嵌套的）都应被替换。")
    expect(type(net[3]) is nn.Linear, "The linear named '3' is in skip and should stay an nn.Linear.", "名为 '3' 的线性层在 skip 中，应保持为 nn.Linear。")
    print("✓ quantize_model_")

# %% nbgrader={"grade": true, "grade_id": "test_quantize_model__hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb11
nb11.check_quantize_model_(quantize_model_)
### END HIDDEN TESTS

# %% [markdown]
# ## The whole GPT in int8 · 整个 GPT 换成 int8
#
# Now the measurement this notebook is about: a GPT a little larger than the one at the top
# (width 512, 4 layers, a vocabulary of 8192: `utils.bench_quantize.SMALL`), the same prompt,
# decoded on one thread in float32, with your int8 weight-only layers everywhere, and with W8A8 layers
# everywhere (`utils.quantize.quantize_model_` with `layer=W8A8Linear`). Both int8 models store 1
# byte per weight plus a scale per row; the embedding table stays float32. Each variant decodes
# several times, interleaved, and the table gives medians, the weight memory, the share of the
# generated tokens that agree with float32, the bytes read per token and the share of the measured
# read rate that the speed reaches (tokens/s times bytes per token, over the read rate). The
# full-size comparison (12 layers, width 768, GPT-2's vocabulary, plus the accuracy on a trained
# model) is a command, because it takes a minute or more: `.venv/bin/python -m utils.bench_quantize`.
#
# 现在进行本笔记本真正关心的测量：一个比开头那个稍大的 GPT（宽度 512、4 层、词表 8192：`utils.bench_quantize.SMALL`）、相同的提示，在单线程上分别以 float32、处处换成你的 int8 仅权重层、以及处处换成 W8A8 层（`utils.quantize.quantize_model_` 加 `layer=W8A8Linear`）来解码。两个 int8 模型都是每个权重 1 字节，外加每行一个 scale；嵌入表保持 float32。每种做法交替解码多次，表中给出中位数、权重内存、生成的词元中与 float32 一致的比例、每个词元读取的字节数，以及速度达到测得的读取速率的比例（tokens/s 乘以每个词元的字节数，再除以读取速率）。完整尺寸的比较（12 层、宽度 768、GPT-2 词表，外加在训练过的模型上的精度）是一条命令，因为它要运行一分钟或更久：`.venv/bin/python -m utils.bench_quantize`。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.bench_quantize import SMALL
from utils.quantize import quantize_model_ as course_quantize_model_

torch.manual_seed(0)
mid = gpt if GRADING else GPTModel(SMALL).eval()  # width 512, 4 layers, vocabulary 8192 (grading: the GPT above)
variants = {"float32": mid, "int8 weight-only": quantize_model_(copy.deepcopy(mid)),
            "W8A8 (fbgemm)": course_quantize_model_(copy.deepcopy(mid), layer=W8A8Linear)}
rows = decode_benchmark(variants, prompt, new_tokens=4 if GRADING else 16, repeats=1 if GRADING else 3,
                        bandwidth=bandwidth, progress=False)
print(format_rows(rows))
for r in rows if llc else []:
    print(f"{r['variant']:17} reads {r['read MB/token'] * 1e6 / llc:4.1f}x the last-level cache per token"
          + (": it can be served partly from the cache" if r["read MB/token"] * 1e6 <= llc else ""))
print(int8_order(rows, layer_times(mid.cfg.emb_dim, repeats=20 if GRADING else 100)))
fig, axes = plt.subplots(1, 2, figsize=(10, 2.6))
axes[0].barh([r["variant"] for r in rows], [r["speed / float32"] for r in rows]); axes[0].set_xlabel("decode speed / float32 (higher is faster)")
axes[1].barh([r["variant"] for r in rows], [r["weight MB"] for r in rows]); axes[1].set_xlabel("weight memory (MB)")
for ax in axes:
    ax.invert_yaxis()
plt.tight_layout(); plt.show()

# %% [markdown]
# Read the table of the machine that ran this. Both int8 models need well under half the memory of
# float32 (the embedding table stays float32). The speed column is the whole model, not one
# layer: besides the matrix products every token pays for attention, norms and the dispatch of
# each PyTorch operation, the same for every variant. The last column is each variant's share of
# the read rate; a variant whose bytes per token fit in the last-level cache (the lines under the
# table say which) is served partly from it, and its share can pass what main memory alone allows.
#
# 读一读运行本笔记本的机器给出的表格。两个 int8 模型所需的内存都远少于 float32 的一半（嵌入表仍是 float32）。速度一列是整个模型而不是一层：除了矩阵乘法，每个词元还要为注意力、归一化以及每个 PyTorch 运算的调度付出代价，这部分对每种做法都一样。最后一列是每种做法达到读取速率的比例；每个词元读取的字节数能放进末级缓存的做法（表格下方的几行会说明是哪些）有一部分由缓存供给，它的比例可以超过仅靠主存所能达到的。
#
# The last line says which int8 model was faster here, with one layer of this width timed alone
# beside it, and what fits that order. It need not be the order of the 4096 x 4096 layer above,
# where reading the weight dominates each call: at width 512 a call's other work (converting or
# quantizing the activation vector, the kernel's setup) weighs more, and the order can differ from
# one run and one machine to another. On random weights the int8 models may also pick other
# tokens than float32: the logits of an untrained model are nearly tied, and any rounding can flip
# them. What a trained model loses is measured on notebook 12's checkpoint below.
#
# 最后一行说明在这里哪个 int8 模型更快，旁边附上单独计时的一个同样宽度的层，以及与这个顺序相符的解释。它不一定与上面 4096 x 4096 的层的顺序相同：在那里，每次调用的时间主要花在读取权重上；而在宽度 512 时，一次调用的其他工作（转换或量化激活向量、内核自身的准备）占得更重，这个顺序可能因运行、因机器而不同。在随机权重上，int8 模型挑出的词元也可能与 float32 不同：未经训练的模型的 logits 几乎打平，任何舍入都可能让它们翻转。训练过的模型会损失多少，在下面用笔记本 12 的检查点来测量。

# %% [markdown]
# ## The KV cache in int8 · 用 int8 存储 KV 缓存
#
# At long contexts the cache, not the weights, dominates the bytes read per token (notebook 07).
# The same absmax idea applies: each new key or value vector of one head gets one scale (per token,
# per head) and is stored as int8. DeepSeek-V2 reports storing its cache at about 6 bits per element
# on average. `utils.quantize.Int8KVCache` has `KVCache`'s interface, so `generate` takes it as
# `cache_cls`.
#
# 在长上下文时，每个词元读取的字节主要来自缓存而不是权重（笔记本 07）。同样的 absmax 思想也适用：某个头的每个新键或值向量得到一个 scale（每个词元、每个头一个），以 int8 存储。DeepSeek-V2 报告其缓存平均每个元素约 6 比特。`utils.quantize.Int8KVCache` 的接口与 `KVCache` 相同，所以 `generate` 可以把它作为 `cache_cls` 使用。

# %%
# NBVAL_IGNORE_OUTPUT
# (grading decodes 4 tokens instead of 16)
from utils.quantize import Int8KVCache

steps = 4 if GRADING else 16
plain = generate(gpt, prompt, steps)
int8_cache = generate(gpt, prompt, steps, cache_cls=Int8KVCache)
head_dim = cfg.emb_dim // cfg.n_heads
f32_bytes = kv_cache_bytes(1, cfg.context_length, cfg.n_layers, cfg.n_heads, head_dim, bytes_per_element=4)
int8_bytes = sum(Int8KVCache(1, cfg.context_length, cfg.n_heads, head_dim).nbytes() for _ in range(cfg.n_layers))
print(f"cache for {cfg.context_length} tokens: float32 {f32_bytes / 1e6:.2f} MB, int8 with scales {int8_bytes / 1e6:.2f} MB "
      f"({int8_bytes / f32_bytes:.2f}x)")
print(f"generated tokens equal to the float32 cache's: {(int8_cache[:, 16:] == plain[:, 16:]).float().mean():.0%} of {steps}")

# %% [markdown]
# The int8 cache takes about a quarter of the float32 bytes plus one scale per head vector. The
# share of generated tokens that stayed the same is printed above. Where some differ, it is
# because with random weights many next tokens are near-ties that any rounding can flip, and once
# one token differs, the rest of the text follows a different path.
#
# int8 缓存大约占 float32 字节数的四分之一，外加每个头向量一个 scale。上面打印出了生成词元中保持不变的比例。如果有些词元不同，那是因为在随机权重下，很多下一个词元都处于几乎打平的状态，任何舍入都可能让它翻转，而一旦有一个词元不同，后面的文本就走上了另一条路。
#
# What this cache saves is memory, not decode bandwidth: at every step its `update` dequantizes the
# whole cache back to float32 and attention then reads those float32 keys and values, more bytes
# than a float32 cache would read. Serving kernels dequantize inside attention, a tile of keys at a
# time in registers, so that only the int8 bytes cross memory; that is what makes a quantized cache
# faster as well as smaller.
#
# 这个缓存省下的是内存，而不是解码时的带宽：每一步它的 `update` 都把整个缓存反量化回 float32，注意力随后读取这些 float32 的键和值，读取的字节比 float32 缓存还多。用于部署的内核在注意力内部反量化，每次在寄存器里处理一小块键，这样穿过内存的只有 int8 字节；这才让量化缓存既更小又更快。

# %% [markdown]
# ## A trained model in int8 · 训练过的模型换成 int8
#
# Random weights say nothing about what quantization costs a model that has learned something.
# Notebook 12's mini DeepSeek was trained (`python -m utils.train_mini`) to continue sequences by
# copying: `BOS a1 ... aL SEP a1 ... aL SEP ...`. We run it teacher-forced on a fresh batch of such
# sequences, in float32, with every `nn.Linear` turned into your `Int8WeightOnlyLinear`, and into
# W8A8 layers (the MoE gate's weight is a plain parameter, not an `nn.Linear`, so routing stays
# float32). For each we print the next-token loss, its change from float32, and the share of
# positions where the token ranked first is float32's: on the copied positions, whose next token
# the earlier ones determine, and on all positions. On the others (the first segment) the next
# token is random: the model spreads its probability over the alphabet, its top two are near-ties,
# and any rounding can swap them.
#
# 随机权重说明不了量化会让一个学到了东西的模型损失多少。笔记本 12 的迷你 DeepSeek 经过训练（`python -m utils.train_mini`），能通过复制来续写 `BOS a1 ... aL SEP a1 ... aL SEP ...` 这样的序列。我们在一批新的此类序列上以教师强制的方式运行它：float32、把每个 `nn.Linear` 换成你的 `Int8WeightOnlyLinear`、以及换成 W8A8 层（MoE 门控的权重是普通参数而不是 `nn.Linear`，所以路由仍是 float32）。对每一种，我们打印下一个词元的损失、它相对 float32 的变化，以及排在第一的词元与 float32 相同的位置所占的比例：分别统计复制的位置（其下一个词元由前面的词元决定）和所有位置。在其余位置（第一段）下一个词元是随机的：模型把概率分散在整个字母表上，排在前两位的几乎打平，任何舍入都可能让它们互换。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.mini_deepseek import load_checkpoint
from utils.quantize import group_roundtrip, roundtrip_weights_
from utils.train_mini import make_batch

trained, mini_cfg = load_checkpoint()
tokens = make_batch(16 if GRADING else 256, generator=torch.Generator().manual_seed(11))  # (B, T)
served = {"float32": trained, "int8 weight-only": quantize_model_(copy.deepcopy(trained)),
          "W8A8 (fbgemm)": course_quantize_model_(copy.deepcopy(trained), layer=W8A8Linear)}
print(f"{tokens.numel():,} positions, teacher-forced")
print(format_accuracy(accuracy_rows(served, tokens)))

# %% [markdown]
# Read the printed rows: the loss change is what each int8 path does to this model's loss on
# average (rounding is noise, so a small change can land on either side of 0), and the agreement on
# the copied positions says how often it would still write the same token.
#
# 读一读打印出的各行：损失的变化是每种 int8 做法平均让这个模型的损失改变了多少（舍入是噪声，所以很小的变化可能落在 0 的任意一侧），复制位置上的一致率说明它有多经常仍会写出同一个词元。
#
# Now quantization that hurts, on the same checkpoint. Every `nn.Linear` weight is replaced by its
# round trip (quantize, then dequantize) with four rules: int8 with one scale per output channel
# (what your layer stores), int8 with **one scale per tensor**, int4 (integers -7 to 7, 15 levels)
# with one scale per group of 128 input features of a row (this model's rows have at most 128
# entries, so a group is a whole row), and int4 with one scale per tensor. The histogram shows each
# rule's rounding error over all the weights: an error is at most half a step, and the step is the
# scale, set by the largest magnitude that shares it.
#
# 现在看会造成损失的量化，仍在同一个检查点上。每个 `nn.Linear` 的权重被替换成它的往返结果（量化，再反量化），规则有四种：每个输出通道一个 scale 的 int8（也就是你的层存储的），**每个张量一个 scale** 的 int8，每行每 128 个输入特征一组、每组一个 scale 的 int4（整数 -7 到 7，15 个级别；这个模型的每行最多 128 个元素，所以一组就是一整行），以及每个张量一个 scale 的 int4。直方图显示每种规则在所有权重上的舍入误差：误差最多是半个步长，而步长就是 scale，由共用它的元素中最大的绝对值决定。

# %%
# NBVAL_IGNORE_OUTPUT
rules = {"int8, per channel": lambda w: group_roundtrip(w, bits=8, group_size=w.shape[-1]),
         "int8, per tensor": lambda w: group_roundtrip(w, bits=8, group_size=None),
         "int4, groups of 128": lambda w: group_roundtrip(w, bits=4, group_size=128),
         "int4, per tensor": lambda w: group_roundtrip(w, bits=4, group_size=None)}
weights = [m.weight.detach() for m in trained.modules() if isinstance(m, nn.Linear)]
rounded = {"float32": trained, **{name: roundtrip_weights_(copy.deepcopy(trained), rule) for name, rule in rules.items()}}
print(format_accuracy(accuracy_rows(rounded, tokens)))
print(f"largest |w| / median |w| over the weight matrices: {min(float(w.abs().max() / w.abs().median()) for w in weights):.0f} "
      f"to {max(float(w.abs().max() / w.abs().median()) for w in weights):.0f}")
fig, ax = plt.subplots(figsize=(7, 3))
bins = torch.logspace(-7, 0, 60)
for name, rule in rules.items():
    errors = torch.cat([(rule(w) - w).abs().flatten() for w in weights])
    ax.hist(errors.clamp(min=1e-7).numpy(), bins=bins.numpy(), histtype="step", label=f"{name}: median {errors.median():.1e}")
ax.set_xscale("log"); ax.set_xlabel("|rounded weight - weight|"); ax.set_ylabel("weights"); ax.legend(fontsize=8)
plt.tight_layout(); plt.show()

# %% [markdown]
# Read the printed rows next to the histogram. Each step to the right in the histogram is a
# coarser grid: per tensor instead of per row multiplies a row's step by the ratio of the tensor's
# largest weight to the row's, and int4 has 7 levels on each side of 0 where int8 has 127. Which of those costs accuracy depends on the model: the printed ratio of largest to median
# weight says how far this checkpoint's weights spread; the wider the spread, the more a single
# scale for many weights rounds the small ones away. Compare the int8 rows with the int4 rows: the
# change in loss and the agreement on all positions show which grid is too coarse for this model. Models with billions of parameters have
# outliers far larger than this small one, which is why production formats keep a scale per block
# (DeepSeek-V3's 128 x 128 FP8 blocks, int4 commonly in groups of 32 to 128) and why 4 bits need them
# most.
#
# 把打印出的各行和直方图放在一起读。直方图中每向右移一步，网格就更粗一级：按张量而不是按行取 scale，会让一行的步长乘以张量最大权重与该行最大权重之比；而 int4 在 0 的每一侧只有 7 个级别，int8 有 127 个。这些做法中哪个会损失精度取决于模型：打印出的最大权重与中位权重之比说明这个检查点的权重分布有多宽；分布越宽，一个 scale 管的权重越多，小的权重就越容易被舍入掉。把 int8 的各行和 int4 的各行比较一下：损失的变化以及所有位置上的一致率说明了哪种网格对这个模型来说太粗。数十亿参数的模型的离群值比这个小模型大得多，这就是为什么生产中使用的格式都给每个块保留一个 scale（DeepSeek-V3 的 128 x 128 FP8 块，int4 通常 32 到 128 个一组），也是为什么 4 比特最需要它们。

# %% [markdown]
# ## Summary · 小结
#
# - Decoding at batch 1 reads every weight once per token: bytes per token over the read rate is
#   the line the speed approaches when the weights come from main memory (a model that fits in the
#   last-level cache can pass it), so fewer bytes per weight means more tokens per second.
# - Absmax int8: scale = max|x| / 127, round to the nearest integer, clamp to [-127, 127], in float32; an all-zero slice
#   needs a floor on amax (1e-4, as DeepSeek's act_quant) or it becomes 0 / 0. One outlier ruins a
#   per-tensor scale; one scale per output channel contains it.
# - FP8 e4m3: 8 values per power of two, largest 448; it still needs a scale, amax / 448.
# - DeepSeek-V3 scales FP8 weights per 128 x 128 block (`weight_scale_inv`, multiplied to
#   dequantize) and activations per token per 128 channels, so outliers stay in their tile.
# - Int8 weight-only layers read a quarter of the bytes only if the kernel reads int8 directly
#   (`torch._weight_int8pack_mm`); dequantizing the whole weight at every call moves more bytes
#   than float32, so where a decode step waits on memory it is slower (the 4096 x 4096 cell prints
#   whether it was on yours). (Kernels that dequantize one tile at a time inside the
#   matrix multiply avoid that, and where a large batch makes the arithmetic dominate, dequantizing
#   first costs little: DeepSeek-V3's `inference/model.py` defaults to `gemm_impl = "bf16"`,
#   `weight_dequant` then a bf16 matrix multiply.) They still multiply in float, so on a CPU core
#   that arithmetic can take as long as the bytes; W8A8 (8-bit activations times int8 weights,
#   summed in int32: AVX2 `vpmaddubsw`, AVX-512 VNNI) multiplies the bytes themselves. Which of the
#   two is faster depends on the layer's size and on the processor: the cells above print the order
#   on yours, for one 4096 x 4096 layer and for the whole small model.
# - An int8 KV cache that dequantizes itself at every step saves memory, not bandwidth.
# - On a trained model, per-channel int8 cost little; coarser grids (4 bits, one scale for a whole
#   tensor) cost more, which is why scales are kept per block.
#
# - 批大小为 1 的解码对每个词元把每个权重读一遍：权重来自主存时，读取速率除以每个词元的字节数就是速度所趋近的那条线（能放进末级缓存的模型可以超过它），所以每个权重的字节越少，每秒的词元越多。
# - Absmax int8：scale = max|x| / 127，取整到最近的整数，限制到 [-127, 127]，用 float32 计算；全零的切片需要给 amax 设一个下限（1e-4，与 DeepSeek 的 act_quant 相同），否则会变成 0 / 0。一个离群值就能毁掉按张量的 scale；每个输出通道一个 scale 能把它限制住。
# - FP8 e4m3：每个 2 的幂之间 8 个值，最大 448；它仍然需要 scale，即 amax / 448。
# - DeepSeek-V3 对 FP8 权重按 128 x 128 的块缩放（`weight_scale_inv`，反量化时相乘），对激活按每个词元每 128 个通道缩放，让离群值留在自己的分块内。
# - int8 仅权重层只有在内核直接读取 int8 时才只读四分之一的字节（`torch._weight_int8pack_mm`）；每次调用都把整个权重反量化，搬运的字节比 float32 还多，所以在解码步等待内存的地方它更慢（4096 x 4096 的单元格会打印在你的机器上是否如此）。（在矩阵乘法内部一次只反量化一个分块的内核可以避免这一点；而在大批量、算术占主导的地方，先反量化的代价很小：DeepSeek-V3 的 `inference/model.py` 默认 `gemm_impl = "bf16"`，先 `weight_dequant` 再做 bf16 矩阵乘法。）它们仍用浮点做乘法，所以在 CPU 核上这些运算可能与读取字节花一样多的时间；W8A8（8 位激活乘 int8 权重，累加到 int32：AVX2 的 `vpmaddubsw`、AVX-512 VNNI）直接对字节做乘法。两者哪个更快，取决于层的大小和处理器：上面的单元格打印出在你的机器上的顺序，包括一个 4096 x 4096 的层和整个小模型。
# - 每一步都把自己整体反量化的 int8 KV 缓存省的是内存，而不是带宽。
# - 在训练过的模型上，按通道的 int8 代价很小；更粗的网格（4 比特、整个张量一个 scale）代价更大，这就是 scale 按块保留的原因。
