# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 12 · Capstone: a mini DeepSeek · 综合项目：迷你 DeepSeek
#
# Every part of DeepSeek-V3's architecture is now on the table: rotary positions (08), multi-head
# latent attention with its small cache (09), a mixture of experts with a shared expert and a bias
# that balances the load (10). In this notebook you assemble them into a language model in the
# layout of DeepSeek-V3's inference code, train it, look inside the trained model, and then add
# the last of DeepSeek-V3's ideas in this course: **multi-token prediction** (MTP), which
# trains the model to see two tokens ahead and then lets it decode faster.
#
# DeepSeek-V3 架构的每个部件现在都已摆在桌上：旋转位置编码（08），带小缓存的多头潜在注意力（09），带共享专家和负载均衡偏置的混合专家（10）。在本笔记本中，你将按照 DeepSeek-V3 推理代码的布局把它们组装成一个语言模型，训练它，观察训练好的模型内部，然后加上本课程讲到的 DeepSeek-V3 的最后一个想法：**多词元预测**（MTP）。它训练模型看到后面两个词元，并让模型解码得更快。
#
# The model is tiny (the table near the end counts its parameters), so that it trains on a CPU;
# the checkpoint below records how long its run took. The task is copying: a random segment of tokens, a separator, then the segment again and again.
# Nothing predicts the first segment; everything after it can be predicted exactly, by
# a model that finds where the current token appeared before and copies the token that came next.
#
# 这个模型很小（接近末尾的表格数出了它的参数量），所以能在 CPU 上训练；下面的检查点记录了那次训练用了多长时间。任务是复制：一段随机词元、一个分隔符，然后一遍又一遍地重复这段词元。第一段无法预测；之后的一切都可以被准确预测，只要模型能找到当前词元之前出现的位置，并复制紧随其后的那个词元。

# %%
import math
import os
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from utils.mini_deepseek import CHECKPOINT, MiniDeepSeekConfig, attention_maps
from utils.mla import MultiHeadLatentAttention, mla_cache_elements_per_token
from utils.moe import MoE, Expert
from utils.copy_task import BOS, SEP, copy_mask, copy_prompts, make_batch

GRADING = bool(os.getenv("NBGRADER_EXECUTION"))  # grading only needs every cell to run: smaller sizes, no training run
torch.set_num_threads(1)  # this model is so small that a second thread only adds overhead
torch.manual_seed(0)
batch = make_batch(2, 40, torch.Generator().manual_seed(3))
for row in batch:
    print(" ".join({BOS: "BOS", SEP: "SEP"}.get(int(t), str(int(t))) for t in row))

# %% [markdown]
# ## The configuration · 配置
#
# `MiniDeepSeekConfig` names its sizes as DeepSeek-V3's `ModelArgs` does. The MLA sizes go to
# `MLAConfig` (`cfg.mla()` builds one), and the MoE sizes to `MoE`. Here are the sizes of the model
# you will train, and the trained checkpoint that `python -m utils.train_mini` wrote.
#
# `MiniDeepSeekConfig` 对各个尺寸的命名与 DeepSeek-V3 的 `ModelArgs` 相同。MLA 的尺寸交给 `MLAConfig`（由 `cfg.mla()` 构造），MoE 的尺寸交给 `MoE`。下面是你将要训练的模型的尺寸，也是 `python -m utils.train_mini` 写出的已训练检查点的尺寸。

# %%
cfg = MiniDeepSeekConfig()
print(cfg)
print(cfg.mla())

# %% [markdown]
# ## RMSNorm · 均方根归一化
#
# LayerNorm subtracts each vector's mean, divides by its standard deviation, then scales and
# shifts. RMSNorm (Zhang and Sennrich, 2019) keeps only the division, by the root mean square, and a
# learned scale: no mean, no bias, and one reduction less. DeepSeek-V3 uses it before every
# sublayer and inside MLA (`q_norm`, `kv_norm`):
#
# LayerNorm 减去每个向量的均值，除以它的标准差，再缩放和平移。RMSNorm（Zhang 和 Sennrich，2019）只保留除以均方根这一步和一个可学习的缩放：没有均值，没有偏置，少一次归约。DeepSeek-V3 在每个子层之前以及 MLA 内部（`q_norm`、`kv_norm`）都使用它：
#
# $$y = \frac{x}{\sqrt{\frac{1}{d}\sum_j x_j^2 + \varepsilon}} \odot w$$
#
# $\varepsilon$ sits **inside** the root: it keeps a vector of zeros from dividing by zero. The
# mean of squares is computed in float32 even when `x` is bfloat16, and the result comes back in
# `x`'s dtype.
#
# $\varepsilon$ 位于根号 **里面**：它让全零向量不会除以零。即使 `x` 是 bfloat16，平方均值也要用 float32 计算，结果再转回 `x` 的数据类型。

# %% [markdown]
# ### Exercise 1 · `RMSNorm` · 练习 1
#
# A parameter `weight` of ones, shape `(dim,)`, and `eps` (`1e-6` unless given, as the signature
# says); `forward(x)` returns `x * rsqrt(mean(x**2, dim=-1, keepdim=True) + eps) * weight`, computed in
# float32 whatever `x`'s dtype (bfloat16, float16, float64), in `x`'s dtype. Write it with tensor
# operations: `F.rms_norm` (which DeepSeek-V3's own `RMSNorm.forward` calls) and `nn.RMSNorm` compute
# this whole exercise, so they are not allowed here.
#
# 一个形状为 `(dim,)`、初始为全 1 的参数 `weight`，以及 `eps`（如签名所示，除非另行给出，为 `1e-6`）；`forward(x)` 返回 `x * rsqrt(mean(x**2, dim=-1, keepdim=True) + eps) * weight`，无论 `x` 是什么 dtype（bfloat16、float16、float64）都用 float32 计算，返回 `x` 的数据类型。请用张量运算实现：`F.rms_norm`（DeepSeek-V3 自己的 `RMSNorm.forward` 就调用它）和 `nn.RMSNorm` 会完成本练习的全部工作，所以这里不允许使用。
#
# <!-- rules: RMSNorm -->
#
# #### Rules that grading checks · 评分检查的规则 (`RMSNorm`)
#
# - Not allowed: `F.rms_norm` (it computes this whole exercise); `torch.rms_norm` (it computes this whole exercise); `nn.RMSNorm` (its forward calls `F.rms_norm`; subclassing it is refused too).
# - Graded in float32, float64, bfloat16 and float16: the output has x's dtype, computed in float32 (also when the norm is moved with `.to(dtype)`).
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - `weight` is the only parameter, shape `(dim,)`, ones at the start; `eps` is `1e-6` unless it is given.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不允许使用：`F.rms_norm`（它会完成本练习的全部工作）；`torch.rms_norm`（它会完成本练习的全部工作）；`nn.RMSNorm`（它的 forward 调用 `F.rms_norm`；继承它也会被拒绝）。
# - 在 float32、float64、bfloat16、float16 下评分：输出与 x 的 dtype 相同，用 float32 计算（用 `.to(dtype)` 转换过的归一化层也一样）。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - `weight` 是唯一的参数，形状为 `(dim,)`，初始为全 1；除非另行给出，`eps` 为 `1e-6`。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "RMSNorm", "locked": false, "schema_version": 3, "solution": true, "task": false}
class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        ### BEGIN SOLUTION
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (y * self.weight.float()).to(x.dtype)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_RMSNorm", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close

norm = RMSNorm(4)
x = torch.tensor([[3.0, -4.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
expect_close(norm(x), torch.tensor([[1.2, -1.6, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]]),
             "RMSNorm of [3, -4, 0, 0] is [1.2, -1.6, 0, 0] (its RMS is 2.5), and a vector of ones stays ones.",
             "[3, -4, 0, 0] 的 RMSNorm 是 [1.2, -1.6, 0, 0]（它的均方根是 2.5），全 1 向量保持不变。", atol=1e-4)
expect(torch.equal(norm.weight.detach(), torch.ones(4)), "RMSNorm.weight starts at ones.", "RMSNorm.weight 初始为全 1。")
print("✓ RMSNorm")

# %% nbgrader={"grade": true, "grade_id": "test_RMSNorm_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb12
nb12.check_RMSNorm(RMSNorm)
### END HIDDEN TESTS

# %% [markdown]
# ## One block · 一个块
#
# A DeepSeek-V3 layer is a **pre-norm** residual block: each sublayer reads a normalised copy of the
# residual stream and adds its result back, so the stream itself is never normalised and a
# gradient always has a clean path from the loss to the first layer.
#
# DeepSeek-V3 的每一层都是一个 **前归一化** 的残差块：每个子层读取残差流的归一化副本，再把结果加回去。残差流本身从不被归一化，所以梯度总有一条从损失通往第一层的畅通路径。
#
# ```
# x = x + attn(attn_norm(x), start_pos, absorb)   multi-head latent attention (09), RoPE inside
# x = x + ffn(ffn_norm(x))                        Expert(dim, inter_dim) or MoE (10)
# ```
#
# The first `n_dense_layers` layers have a dense SwiGLU feed-forward layer (V3: the first 3 of 61),
# the others a mixture of experts with a shared expert. `start_pos` is the position of the first
# token of `x`: MLA writes its cache there, which is how generation continues a sequence.
# `absorb` picks MLA's path (09): `False` caches every head's keys and values, `True` only the
# latent and the rope key. Both give the same outputs; a Block passes `absorb` on to the attention
# so that the model's caller decides what the cache holds.
#
# 前 `n_dense_layers` 层使用稠密的 SwiGLU 前馈层（V3：61 层中的前 3 层），其余各层使用带共享专家的混合专家。`start_pos` 是 `x` 中第一个词元的位置：MLA 把缓存写在那里，生成就是这样接着一个序列继续下去的。`absorb` 选择 MLA 的路径（09）：`False` 缓存每个头的键和值，`True` 只缓存潜在向量和 rope 键。两条路径输出相同；Block 把 `absorb` 传给注意力，由调用模型的一方决定缓存里存什么。

# %% [markdown]
# ### Exercise 2 · `Block` · 练习 2
#
# `__init__(self, cfg, layer_id)`: `attn_norm` and `ffn_norm` (your `RMSNorm(cfg.dim)`), `attn =
# MultiHeadLatentAttention(cfg.mla())`, and `ffn = Expert(cfg.dim, cfg.inter_dim)` when `layer_id <
# cfg.n_dense_layers`, else `MoE(cfg.dim, cfg.moe_inter_dim, cfg.n_routed_experts,
# cfg.n_activated_experts, cfg.n_shared_experts, cfg.n_expert_groups, cfg.n_limited_groups,
# cfg.score_func, cfg.route_scale)`. `forward(x, start_pos=0, absorb=False)` as above, passing
# `start_pos` and `absorb` to `self.attn`.
#
# `__init__(self, cfg, layer_id)`：`attn_norm` 和 `ffn_norm`（你的 `RMSNorm(cfg.dim)`），`attn = MultiHeadLatentAttention(cfg.mla())`；当 `layer_id < cfg.n_dense_layers` 时 `ffn = Expert(cfg.dim, cfg.inter_dim)`，否则 `ffn = MoE(cfg.dim, cfg.moe_inter_dim, cfg.n_routed_experts, cfg.n_activated_experts, cfg.n_shared_experts, cfg.n_expert_groups, cfg.n_limited_groups, cfg.score_func, cfg.route_scale)`。`forward(x, start_pos=0, absorb=False)` 如上所示，把 `start_pos` 和 `absorb` 传给 `self.attn`。
#
# <!-- rules: Block -->
#
# #### Rules that grading checks · 评分检查的规则 (`Block`)
#
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Grading looks at which MLA cache a call filled: with `absorb=True` only the latent one (`kv_cache`, `pe_cache`), with `absorb=False` (the default) the per-head keys and values.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 评分会查看一次调用填充了哪个 MLA 缓存：`absorb=True` 时只有潜在缓存（`kv_cache`、`pe_cache`），`absorb=False`（默认）时是每个头的键和值。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "Block", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Block(nn.Module):
    def __init__(self, cfg, layer_id):
        super().__init__()
        ### BEGIN SOLUTION
        self.attn_norm = RMSNorm(cfg.dim)
        self.attn = MultiHeadLatentAttention(cfg.mla())
        self.ffn_norm = RMSNorm(cfg.dim)
        if layer_id < cfg.n_dense_layers:
            self.ffn = Expert(cfg.dim, cfg.inter_dim)
        else:
            self.ffn = MoE(cfg.dim, cfg.moe_inter_dim, cfg.n_routed_experts, cfg.n_activated_experts,
                           cfg.n_shared_experts, cfg.n_expert_groups, cfg.n_limited_groups,
                           cfg.score_func, cfg.route_scale)
        ### END SOLUTION

    def forward(self, x, start_pos=0, absorb=False):
        ### BEGIN SOLUTION
        x = x + self.attn(self.attn_norm(x), start_pos, absorb)
        return x + self.ffn(self.ffn_norm(x))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_Block", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect
from utils.mini_deepseek import MiniDeepSeekConfig

from autograder.checks import nb12

with nb12.as_graded(Block):
    small = MiniDeepSeekConfig(dim=16, n_heads=2, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4,
                               inter_dim=24, moe_inter_dim=8, n_routed_experts=4, n_expert_groups=1, max_seq_len=8)
    torch.manual_seed(0)
    dense_block, moe_block = Block(small, 0), Block(small, 1)
    expect(type(dense_block.ffn).__name__ == "Expert" and type(moe_block.ffn).__name__ == "MoE",
           "Layer 0 (< n_dense_layers = 1) has a dense Expert, layer 1 a MoE.", "第 0 层（< n_dense_layers = 1）使用稠密 Expert，第 1 层使用 MoE。")
    x = torch.randn(2, 5, 16)
    with torch.no_grad():
        y = moe_block(x)
    expect(y.shape == x.shape, "Block keeps the shape (B, T, dim).", "Block 保持形状 (B, T, dim)。")
    with torch.no_grad():
        step = torch.cat([moe_block(x[:, :3]), moe_block(x[:, 3:], 3)], dim=1)
    expect(torch.allclose(step, y, atol=1e-5), "A second call with start_pos=3 must continue the first (pass start_pos to attn).",
           "以 start_pos=3 的第二次调用必须接着第一次（把 start_pos 传给 attn）。")
    fresh = Block(small, 1)
    fresh.load_state_dict(moe_block.state_dict())
    with torch.no_grad():
        absorbed = torch.cat([fresh(x[:, :3], 0, absorb=True), fresh(x[:, 3:], 3, absorb=True)], dim=1)
    expect(torch.allclose(absorbed, y, atol=1e-5) and fresh.attn.kv_cache.shape[0] == 2 and fresh.attn.k_cache.shape[0] == 0,
           "With absorb=True the attention must run MLA's absorbed path (its kv_cache filled, k_cache empty): pass absorb to attn.",
           "absorb=True 时注意力必须走 MLA 的吸收路径（kv_cache 被填充，k_cache 为空）：把 absorb 传给 attn。")
    print("✓ Block")

# %% nbgrader={"grade": true, "grade_id": "test_Block_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb12
nb12.check_Block(Block)
### END HIDDEN TESTS

# %% [markdown]
# ## The model · 模型
#
# Token ids go through an embedding table, the blocks in order, a final norm and a linear head
# that gives one score (logit) per vocabulary entry at every position. There are no position
# embeddings: positions live only in RoPE, inside attention.
#
# 词元 id 依次经过嵌入表、按顺序的各个块、最终的归一化，以及一个线性输出头，在每个位置为词表中的每一项给出一个分数（logit）。这里没有位置嵌入：位置信息只存在于注意力内部的 RoPE 中。

# %% [markdown]
# ### Exercise 3 · `MiniDeepSeek` · 练习 3
#
# `embed = nn.Embedding(vocab_size, dim)`, `layers` an `nn.ModuleList` of `Block(cfg, i)` for `i`
# in `range(n_layers)`, `norm = RMSNorm(dim)`, `head = nn.Linear(dim, vocab_size, bias=False)`.
# `forward(tokens, start_pos=0, absorb=False)` returns logits `(B, T, vocab_size)`, with `start_pos` and
# `absorb` passed to every block.
#
# `embed = nn.Embedding(vocab_size, dim)`，`layers` 是由 `Block(cfg, i)`（`i` 取 `range(n_layers)`）组成的 `nn.ModuleList`，`norm = RMSNorm(dim)`，`head = nn.Linear(dim, vocab_size, bias=False)`。`forward(tokens, start_pos=0, absorb=False)` 返回 logits `(B, T, vocab_size)`，并把 `start_pos` 和 `absorb` 传给每个块。
#
# <!-- rules: MiniDeepSeek -->
#
# #### Rules that grading checks · 评分检查的规则 (`MiniDeepSeek`)
#
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Grading looks at which MLA cache a call filled: with `absorb=True` only the latent one (`kv_cache`, `pe_cache`), with `absorb=False` (the default) the per-head keys and values.
# - The head keeps a weight of its own (not tied to the embedding).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 评分会查看一次调用填充了哪个 MLA 缓存：`absorb=True` 时只有潜在缓存（`kv_cache`、`pe_cache`），`absorb=False`（默认）时是每个头的键和值。
# - 输出头有自己的权重（不与嵌入层绑定）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "MiniDeepSeek", "locked": false, "schema_version": 3, "solution": true, "task": false}
class MiniDeepSeek(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        ### BEGIN SOLUTION
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        ### END SOLUTION

    def forward(self, tokens, start_pos=0, absorb=False):
        ### BEGIN SOLUTION
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, start_pos, absorb)
        return self.head(self.norm(x))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_MiniDeepSeek", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect
from utils.mini_deepseek import MiniDeepSeekConfig

from autograder.checks import nb12

with nb12.as_graded(MiniDeepSeek):
    torch.manual_seed(0)
    tiny = MiniDeepSeek(MiniDeepSeekConfig(dim=16, n_heads=2, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4,
                                           v_head_dim=4, inter_dim=24, moe_inter_dim=8, n_routed_experts=4,
                                           n_expert_groups=1, max_seq_len=8)).eval()
    tokens = torch.tensor([[0, 5, 9, 1, 5, 9]])
    with torch.no_grad():
        logits = tiny(tokens)
        stepwise = torch.cat([tiny(tokens[:, :4]), tiny(tokens[:, 4:], 4)], dim=1)
    expect(logits.shape == (1, 6, 64), "MiniDeepSeek returns logits of shape (B, T, vocab_size).",
           "MiniDeepSeek 返回形状为 (B, T, vocab_size) 的 logits。")
    expect(torch.allclose(stepwise, logits, atol=1e-5), "A prefill then a call with start_pos must equal one call on the whole sequence.",
           "先预填充、再以 start_pos 调用，结果必须与对整个序列的一次调用相同。")
    latent = MiniDeepSeek(tiny.cfg).eval()
    latent.load_state_dict(tiny.state_dict())
    with torch.no_grad():
        absorbed = torch.cat([latent(tokens[:, :4], 0, absorb=True), latent(tokens[:, 4:], 4, absorb=True)], dim=1)
    expect(torch.allclose(absorbed, logits, atol=1e-5) and all(l.attn.kv_cache.shape[0] == 1 and l.attn.k_cache.shape[0] == 0 for l in latent.layers),
           "With absorb=True every block must run MLA's absorbed path (kv_cache filled, k_cache empty): pass absorb to every block.",
           "absorb=True 时每个块都必须走 MLA 的吸收路径（kv_cache 被填充，k_cache 为空）：把 absorb 传给每个块。")
    print("✓ MiniDeepSeek")

# %% nbgrader={"grade": true, "grade_id": "test_MiniDeepSeek_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb12
nb12.check_MiniDeepSeek(MiniDeepSeek)
### END HIDDEN TESTS

# %% [markdown]
# ## The next-token loss · 下一个词元的损失
#
# Causal attention (04) lets position `i` see tokens `0..i` only, so its logits are a prediction of
# token `i + 1`. The loss lines them up: logits of positions `0..T-2` against tokens `1..T-1`, the
# mean cross-entropy over all of them. The last position has no target inside the sequence.
#
# 因果注意力（04）只让位置 `i` 看到词元 `0..i`，所以它的 logits 是对词元 `i + 1` 的预测。损失把它们对齐：位置 `0..T-2` 的 logits 对应词元 `1..T-1`，对所有这些取平均交叉熵。最后一个位置在序列内没有目标。

# %% [markdown]
# ### Exercise 4 · `next_token_loss` · 练习 4
#
# Return the mean cross-entropy of predicting `tokens[:, 1:]` from `logits[:, :-1]` (`F.cross_entropy`
# wants `(N, V)` logits and `(N,)` targets).
#
# 返回由 `logits[:, :-1]` 预测 `tokens[:, 1:]` 的平均交叉熵（`F.cross_entropy` 需要 `(N, V)` 的 logits 和 `(N,)` 的目标）。
#
# <!-- rules: next_token_loss -->
#
# #### Rules that grading checks · 评分检查的规则 (`next_token_loss`)
#
# - Graded in float32 and float64: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 在 float32、float64 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "next_token_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def next_token_loss(logits, tokens):
    ### BEGIN SOLUTION
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_next_token_loss", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import math
import torch
from autograder.checks import expect_close

from autograder.checks import nb12

with nb12.as_graded(next_token_loss):
    sure = torch.full((1, 3, 4), -1e4)
    sure[0, 0, 2] = sure[0, 1, 3] = 0.0  # position 0 is sure of token 2, position 1 of token 3
    expect_close(next_token_loss(sure, torch.tensor([[1, 2, 3]])), torch.tensor(0.0),
                 "Position 0 predicts token 1 and position 1 predicts token 2: a model sure of the right next tokens has loss 0.",
                 "位置 0 预测词元 1，位置 1 预测词元 2：对下一个词元有十足把握且正确的模型损失为 0。", atol=1e-4)
    expect_close(next_token_loss(torch.zeros(2, 5, 8), torch.zeros(2, 5, dtype=torch.long)), torch.tensor(math.log(8)),
                 "Uniform logits over 8 tokens give a loss of ln 8.", "在 8 个词元上均匀的 logits 给出 ln 8 的损失。")
    print("✓ next_token_loss")

# %% nbgrader={"grade": true, "grade_id": "test_next_token_loss_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb12
nb12.check_next_token_loss(next_token_loss)
### END HIDDEN TESTS

# %% [markdown]
# ## A short training run · 一次简短的训练
#
# Your model, a fresh initialisation, AdamW, twenty steps of the copying task. After each
# step the gate biases of the MoE layers move by `update_expert_bias` (notebook 10): experts that
# got more than the mean load lose a little bias, the others gain it, with no auxiliary loss.
# The loss at the start is close to ln 64 (a uniform guess over the vocabulary of 64).
#
# 你的模型，全新初始化，AdamW，在复制任务上训练二十步。每一步之后，MoE 层的门控偏置按 `update_expert_bias`（笔记本 10）调整：负载高于平均的专家偏置略减，其余的略增，不需要辅助损失。开始时的损失接近 ln 64（在 64 个词的词表上均匀猜测）。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.train_mini import train

torch.manual_seed(0)
model = MiniDeepSeek(cfg)
# The first optimizer of a Python session imports torch._dynamo, which takes seconds; this run
# scores no points, so grading skips it.
if GRADING:
    print("Not run while grading: the training run scores no points.")
else:
    t0 = time.perf_counter()
    history = train(model, steps=20, batch_size=16, lr=1e-2, seed=0, progress=lambda r: tqdm(r, desc="training"))
    print(f"20 steps in {time.perf_counter() - t0:.1f} s on this machine; "
          f"loss {history['loss'][0]:.2f} -> {history['loss'][-1]:.2f} (ln 64 = {math.log(64):.2f})")

# %% [markdown]
# The loss falls below ln 64, but twenty steps are far too few to learn copying. The full run,
# `python -m utils.train_mini`, trains the same model with one MTP module (the second half of this
# notebook) for 500 steps. Its checkpoint is in the repository, with the losses of every step, the
# seed, the command that made it and how long the run took (`train_seconds`, on one thread of the
# machine that trained it). Its MTP loss, here and in the plot, is the depth-1 cross-entropy itself,
# unweighted; the training loss added 0.3 times it:
#
# 损失降到了 ln 64 以下，但二十步远远不够学会复制。完整的训练 `python -m utils.train_mini` 用一个 MTP 模块（本笔记本的后半部分）把同一个模型训练 500 步。它的检查点保存在仓库中，连同每一步的损失、种子、生成它的命令，以及那次训练用了多长时间（`train_seconds`，在训练它的机器上用一个线程）。这里和图中的 MTP 损失是深度 1 的交叉熵本身，没有加权；训练损失加上的是它的 0.3 倍：

# %%
ckpt = torch.load(CHECKPOINT, weights_only=True)  # checkpoints/mini_deepseek.pt
print(f"command: {ckpt['command']}   seed: {ckpt['seed']}   steps: {ckpt['steps']}   batch: {ckpt['batch_size']}   "
      f"training took {ckpt['train_seconds']:.0f} s ({ckpt['train_seconds'] / 60:.1f} min)")
label = {"mtp_loss": "mtp_loss (unweighted)"}
print("held-out: " + ", ".join(f"{label.get(k, k)} {v:.3f}" for k, v in ckpt["final"].items()))
fig, ax = plt.subplots(figsize=(7, 3))
ax.plot(ckpt["history"]["next_token"], lw=1, label="next-token loss")
ax.plot(ckpt["history"]["mtp"], lw=1, alpha=0.8, label="MTP depth-1 loss (token i + 2)")
ax.set_xlabel("training step"); ax.set_ylabel("cross-entropy (nats per token)"); ax.legend(); ax.grid(alpha=0.3)
plt.show()

# %% [markdown]
# Where does each curve fall? The cell below reads the stored history: the mean loss over the
# first and the last 25 steps, and the 100-step window in which it fell the most.
#
# 每条曲线在哪里下降？下面的单元格读取保存的历史：前 25 步和最后 25 步的平均损失，以及下降最多的那个 100 步窗口。

# %%
def describe_fall(losses, window=100, smooth=25):
    """Start and end (means of `smooth` steps) and the `window`-step span with the largest fall,
    named by the centre steps of the two means it compares."""
    curve = torch.tensor(losses)
    means = curve.unfold(0, smooth, 1).mean(-1)  # means[i]: steps i .. i + smooth - 1, centred on i + smooth // 2
    falls = means[:-window] - means[window:]
    start = int(falls.argmax()) + smooth // 2
    return float(means[0]), float(means[-1]), start, start + window, float(falls.max())


steep = {}
for name, label in (("next_token", "next-token loss"), ("mtp", "MTP depth-1 loss")):
    first, last, a, b, fall = describe_fall(ckpt["history"][name])
    steep[name] = a
    print(f"{label:17}: {first:.2f} -> {last:.2f} nats; steepest fall between steps {a} and {b} "
          f"(by {fall:.2f} nats, 25-step means)")
print(f"the MTP loss's steepest fall starts {steep['next_token'] - steep['mtp']} steps earlier")

# %% [markdown]
# Both curves fall from the start, without a flat stretch, and each has one steep part, printed
# above: the next-token loss falls fastest between steps 200 and 300, and the MTP loss's steepest
# fall starts 173 steps earlier. Neither goes to zero, because the first segment of each sequence is random; on the
# copied part the held-out accuracy above is what matters.
#
# 两条曲线都从一开始就在下降，没有平坦的阶段，并且各有一段陡降，位置见上面的输出：下一个词元的损失在第 200 到 300 步之间下降最快，而 MTP 损失的最陡下降早了 173 步开始。两者都不会降到零，因为每个序列的第一段是随机的；对复制部分来说，重要的是上面的留出集准确率。
#
# Why does the harder-looking task, the token after next, get learned first? Because the MTP
# module is handed half of the answer. At position `i` its input holds the embedding of token
# `i + 1`, and the main model's hidden state `h_i` still carries token `i` in its residual stream.
# So every position already holds a pair (this token, the next one), which is exactly what an
# induction head looks up: a single attention layer, the module's block, can match token `i + 1`
# against the earlier positions that hold it as "this token" and copy their "next one", token
# `i + 2`. The main model has to build the pair itself: layer 0 must carry each position's
# previous token into it, for an induction head in layer 1 to read, and this two-layer circuit
# takes longer to form. It is
# also why every draft is accepted in the runs at the end of this notebook: once both have learned
# to copy, the module's lookup gives the token the main model produces one step later.
#
# 为什么看起来更难的任务——预测下下个词元——反而先学会？因为 MTP 模块手里已经有一半答案。在位置 `i`，它的输入中有词元 `i + 1` 的嵌入，而主模型的隐藏状态 `h_i` 在残差流中仍带着词元 `i`。于是每个位置都已经有一对（本词元，下一个词元），这正是归纳头要查找的东西：只需一层注意力，也就是模块中的那个块，就能拿词元 `i + 1` 去匹配先前把它当作"本词元"的位置，并复制它们的"下一个词元"，即词元 `i + 2`。主模型则要自己构造这一对：第 0 层必须把每个位置的前一个词元带到该位置，再由第 1 层的归纳头读取，这个两层的回路需要更长时间才能形成。这也是本笔记本末尾的运行中每个草稿都被接受的原因：一旦模型学会了复制，模块查到的词元就是主模型下一步将会生成的词元。
#
# Your `MiniDeepSeek` has the same parameter names as the course's, DeepSeek-V3's names, so the
# trained weights load straight into your class. The cell scores its predictions on the copied
# tokens and on the random ones (the first segment and the first `SEP`), and splits the random
# ones into that `SEP` and the segment's own tokens:
#
# 你的 `MiniDeepSeek` 与课程的实现参数名相同，也就是 DeepSeek-V3 的参数名，所以训练好的权重可以直接加载到你的类中。下面的单元格对它在复制的词元和随机词元（第一段和第一个 `SEP`）上的预测打分，并把随机词元再分成这个 `SEP` 和该段自己的词元：

# %%
trained = MiniDeepSeek(MiniDeepSeekConfig(**ckpt["config"]))
trained.load_state_dict(ckpt["model"])
trained.eval()
test = make_batch(64, 48, torch.Generator().manual_seed(7))
with torch.no_grad():
    pred = trained(test)[:, :-1].argmax(-1)
mask = copy_mask(test)[:, 1:]
right = pred == test[:, 1:]
first_sep = ~mask & (test[:, 1:] == SEP)  # the random part ends with the first SEP
print(f"your class, trained weights: {right[mask].float().mean():.1%} of the copied tokens predicted, "
      f"{right[~mask].float().mean():.1%} of the random ones")
print(f"of the random ones: the first SEP {right[first_sep].float().mean():.1%}, the segment's tokens "
      f"{right[~mask & ~first_sep].float().mean():.1%} (a blind guess among the 62 tokens a segment draws from: {1 / 62:.1%})")

# %% [markdown]
# The random part is predicted above chance only thanks to its last target, the first `SEP`. A
# segment has 4 to 16 tokens, so once 4 are in, `SEP` is the likeliest next token; the model
# predicts it at those positions and is right once per sequence, where the segment ends (the
# printed share for the first `SEP`). The segment's own tokens it gets right less often than a
# blind guess would: where it predicts `SEP`, it cannot be right about a segment token.
#
# 随机部分的预测之所以高于随机猜测，全靠它的最后一个目标，即第一个 `SEP`。一段有 4 到 16 个词元，所以一旦读入 4 个，`SEP` 就是最可能的下一个词元；模型在这些位置预测它，于是每个序列在段结束的地方都会对一次（见打印出的第一个 `SEP` 的比例）。而该段自己的词元它猜中的比例反而低于盲猜：在它预测 `SEP` 的位置，它不可能猜对段中的词元。

# %% [markdown]
# ## An induction head · 归纳头
#
# How does a model copy? Olsson et al. (2022) found **induction heads**: at a token `A`, the head
# attends to the token that followed an earlier occurrence of `A`, and copies it. It needs two
# layers: layer 0 writes into each position what its previous token was, and a head in layer 1
# matches the current token against that. Below, every head of the trained model gets two scores
# on held-out sequences, averaged over the copied positions `t`: the attention it puts on the
# positions right after every earlier copy of the current token (induction), and on `t - 1` (the
# previous token). The best induction head is drawn.
#
# 模型是怎么复制的？Olsson 等人（2022）发现了 **归纳头**：在词元 `A` 处，这个头关注 `A` 先前出现时紧随其后的那个词元，并把它复制过来。它需要两层：第 0 层把每个位置的前一个词元写进该位置，第 1 层的一个头再用当前词元去匹配它。下面在留出序列上给已训练模型的每个头打两个分数，对被复制的位置 `t` 取平均：它放在当前词元每一次先前出现之后那个位置上的注意力（归纳），以及放在 `t - 1`（前一个词元）上的注意力。图中画出最好的归纳头。

# %%
def head_scores(maps, tokens):
    """Per layer, per head: mean attention on 'right after an earlier copy of me' and on 't - 1'."""
    T = tokens.shape[1]
    after_copy = torch.zeros(tokens.shape[0], T, T, dtype=torch.bool)  # (B, query t, key j)
    after_copy[:, :, 1:] = tokens[:, None, :-1] == tokens[:, :, None]  # token j - 1 equals token t
    after_copy &= torch.ones(T, T, dtype=torch.bool).tril()  # earlier positions only
    copied = copy_mask(tokens)  # (B, T)
    previous = torch.zeros(T, T, dtype=torch.bool)
    previous[torch.arange(1, T), torch.arange(T - 1)] = True
    scores = []
    for w in maps:  # (B, H, T, T)
        induction = (w * after_copy[:, None]).sum(-1).transpose(0, 1)  # (H, B, T)
        prev = (w * previous).sum(-1).transpose(0, 1)
        scores.append((induction[:, copied].mean(-1), prev[:, copied].mean(-1)))  # (H,) each
    return scores


held_out = make_batch(16, 48, torch.Generator().manual_seed(11))
maps = attention_maps(trained, held_out)  # per layer (B, H, T, T)
scores = head_scores(maps, held_out)
for layer, (induction, prev) in enumerate(scores):
    print(f"layer {layer}: induction score per head {[round(float(s), 2) for s in induction]}, "
          f"previous-token score {[round(float(s), 2) for s in prev]}")
best_layer, best_head = max(((l, h) for l in range(len(scores)) for h in range(len(scores[l][0]))),
                            key=lambda lh: float(scores[lh[0]][0][lh[1]]))
seq = held_out[:1, :40]
labels = [{BOS: "BOS", SEP: "SEP"}.get(int(x), str(int(x))) for x in seq[0]]
fig, ax = plt.subplots(figsize=(6.5, 6))
ax.imshow(attention_maps(trained, seq)[best_layer][0, best_head], cmap="viridis")
ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=6); ax.set_yticks(range(len(labels)), labels, fontsize=6)
ax.set_xlabel("key (attended to)"); ax.set_ylabel("query (current token)")
ax.set_title(f"layer {best_layer}, head {best_head}, the best induction head")
plt.show()

# %% [markdown]
# After the first `SEP` the picture is a set of stripes parallel to the diagonal, one segment
# length plus one apart: each query looks at the position right after every earlier copy of
# itself, which holds exactly the token it must output next. The induction heads are in layer 1,
# as the two-layer circuit needs. Layer 0 has no clean previous-token head: each of its heads puts
# only a fraction of its weight on `t - 1` (the previous-token scores printed for layer 0), so the
# previous token reaches each position spread over the four heads, mixed with other positions.
#
# 第一个 `SEP` 之后，图中是一组与对角线平行的条纹，彼此相隔"段长加一"：每个查询都看向自己每一次先前出现之后的那个位置，而那里恰好是它接下来必须输出的词元。归纳头位于第 1 层，正如这个两层的回路所要求的。第 0 层没有一个干净的前一词元头：它的每个头只把一部分权重放在 `t - 1` 上（见为第 0 层打印的前一词元分数），所以前一个词元是分散在四个头上、并混着其他位置的信息到达每个位置的。
#
# ## Generation with the cache · 使用缓存生成
#
# Greedy decoding: prefill the prompt once, then feed one token at a time with `start_pos`, all
# with `absorb=True`, so MLA caches only the latent and the rope key and each new token attends to
# the cached latents instead of recomputing the whole sequence. The prefill must already run the
# absorbed path: each path reads only the cache it wrote. The prompt is `BOS`, a segment and
# `SEP`; the model should write the segment again.
#
# 贪心解码：先对提示词做一次预填充，然后每次以 `start_pos` 输入一个词元，全程使用 `absorb=True`，这样 MLA 只缓存潜在向量和 rope 键，每个新词元关注的是已缓存的潜在向量，而不是重新计算整个序列。预填充就必须走吸收路径：每条路径只读取它自己写下的缓存。提示词是 `BOS`、一段词元和 `SEP`；模型应当把这一段再写一遍。

# %%
@torch.no_grad()
def generate(model, prompt, max_new_tokens, use_cache=True):
    tokens = prompt
    logits = model(prompt, 0, absorb=use_cache)  # the prefill writes the latent cache
    for step in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        tokens = torch.cat([tokens, nxt], dim=1)
        if step + 1 < max_new_tokens:
            logits = model(nxt, tokens.shape[1] - 1, absorb=True) if use_cache else model(tokens, 0)
    return tokens


def fresh_trained():
    """Your class with the trained weights and caches nothing has written yet."""
    model = MiniDeepSeek(MiniDeepSeekConfig(**ckpt["config"]))
    model.load_state_dict(ckpt["model"])
    return model.eval()


decoder = fresh_trained()
prompt = copy_prompts(1, torch.Generator().manual_seed(5))[0]
L = prompt.shape[1] - 2
out = generate(decoder, prompt, 2 * L + 1)
print("prompt:   ", prompt[0, 1:-1].tolist())
print("generated:", out[0, prompt.shape[1]:].tolist())
print("same tokens without the cache:", torch.equal(out, generate(fresh_trained(), prompt, 2 * L + 1, use_cache=False)))

# %% [markdown]
# What does that cache hold? Every MLA layer owns four buffers of shape `(batch, max_seq_len, ...)`:
# `k_cache` and `v_cache` for the naive path, `kv_cache` and `pe_cache` for the absorbed one; a
# prefill sizes the ones of the path it runs. The cell below reads, in every layer of the model
# that just generated, the buffers that were filled and how many numbers one token position holds
# in each, and does the same for a fresh model after a prefill on the naive path.
#
# 这个缓存里存了什么？每个 MLA 层有四个形状为 `(batch, max_seq_len, ...)` 的缓冲区：朴素路径的 `k_cache` 和 `v_cache`，吸收路径的 `kv_cache` 和 `pe_cache`；预填充只为它所走的路径分配缓冲区。下面的单元格在刚才生成的模型的每一层中，读出哪些缓冲区被填充了、每个缓冲区中一个词元位置存了多少个数，并对一个在朴素路径上做过预填充的新模型做同样的统计。

# %%
def cache_per_token(model):
    """{buffer name: numbers per token position, summed over layers}, for the buffers a prefill filled."""
    held = {}
    for layer in model.layers:
        for name, buf in layer.attn.named_buffers():
            if buf.shape[0] > 0:  # (B, max_seq_len, ...): one position is buf[0, 0]
                held[name] = held.get(name, 0) + buf[0, 0].numel()
    return held


naive = fresh_trained()
with torch.no_grad():
    naive(prompt)  # a prefill on the naive path (absorb=False)
for name, model in (("cached generation (absorb=True)", decoder), ("naive prefill (absorb=False)", naive)):
    held = cache_per_token(model)
    print(f"{name:32} {held} -> {sum(held.values())} numbers per token")
print(f"mla_cache_elements_per_token(n_layers, kv_lora_rank, qk_rope_head_dim) = "
      f"{mla_cache_elements_per_token(cfg.n_layers, cfg.kv_lora_rank, cfg.qk_rope_head_dim)}")

# %% [markdown]
# The decoder's cache holds 96 numbers per token, the latent (32) and the rope key (16) in each of
# the two layers, what `mla_cache_elements_per_token` counts; the naive path would hold 384, every
# head's 32-number key and 16-number value. Same tokens, a quarter of the cache.
#
# 解码器的缓存每个词元存 96 个数：两层中每层的潜在向量（32）和 rope 键（16），与 `mla_cache_elements_per_token` 算出的一致；朴素路径则要存 384 个，即每个头 32 个数的键和 16 个数的值。生成的词元相同，缓存只有四分之一。

# %%
# NBVAL_IGNORE_OUTPUT
n_new = 8 if GRADING else 30
times = {True: [], False: []}
for _ in range(2):  # interleaved rounds: both see the same load
    for use_cache in (True, False):
        t0 = time.perf_counter()
        generate(decoder, prompt, n_new, use_cache)
        times[use_cache].append(time.perf_counter() - t0)
cached, uncached = min(times[True]), min(times[False])
print(f"{n_new} new tokens: {n_new / uncached:.0f} tokens/s without the cache, {n_new / cached:.0f} with it "
      f"({uncached / cached:.1f}x) on the machine that ran this")

# %% [markdown]
# ## Expert load · 专家负载
#
# Which experts did the trained MoE layer use on held-out data? A hook on the gate counts the
# tokens sent to each expert. Without balancing, a router tends to collapse onto a few experts
# (notebook 10 measured it); this model was trained with the bias of auxiliary-loss-free balancing,
# moved after every training step, and no run without it, so the bars show the load it ended with,
# not a comparison. The bars are the share of the token-to-expert assignments of each routed expert; the
# line is a perfectly even load.
#
# 训练好的 MoE 层在留出数据上用了哪些专家？在门控上挂一个钩子，统计送往每个专家的词元数。没有均衡时，路由器往往会坍缩到少数几个专家上（笔记本 10 测量过）；这个模型训练时用了无辅助损失均衡的偏置，在每个训练步之后调整，没有不带偏置的对照训练，所以柱形显示的是它最终的负载，而不是一个对比。柱形是每个路由专家在"词元到专家"分配中所占的份额；横线是完全均匀的负载。

# %%
def count_into(counter):
    def hook(gate, inputs, output):  # output = (weights, indices); returning nothing leaves it unchanged
        counter.add_(torch.bincount(output[1].flatten(), minlength=len(counter)))
    return hook


moes = [m for m in trained.modules() if isinstance(m, MoE)]
counts = [torch.zeros(m.gate.weight.shape[0]) for m in moes]
hooks = [m.gate.register_forward_hook(count_into(c)) for m, c in zip(moes, counts)]
with torch.no_grad():
    trained(test)
for h in hooks:
    h.remove()
share = counts[0] / counts[0].sum()
fig, ax = plt.subplots(figsize=(6, 2.6))
ax.bar(range(len(share)), share)
ax.axhline(1 / len(share), color="grey", ls="--")
ax.set_xlabel("routed expert"); ax.set_ylabel("share of assignments"); ax.set_title("trained MoE layer, held-out batch")
plt.show()
print(f"most loaded expert {share.max():.1%}, least {share.min():.1%} (even: {1 / len(share):.1%}); "
      f"gate bias after training: {[round(float(b), 2) for b in moes[0].gate.bias]}")

# %% [markdown]
# ## The size of everything · 各部分的规模
#
# The same architecture at two scales. DeepSeek-V3's numbers are those of its published config
# (`inference/configs/config_671B.json`) and technical report; the mini model's are counted from
# the model in memory. "Cached per token" is what MLA's absorbed path keeps: the latent and the
# rope key, in every layer. The last line counts, from the same config, the weights a V3 draft of
# multi-token prediction (below) multiplies by: its projection, one MoE block's active weights and
# the output head.
#
# 同一种架构的两种规模。DeepSeek-V3 的数字来自其公开的配置（`inference/configs/config_671B.json`）和技术报告；迷你模型的数字是从内存中的模型数出来的。"每个词元的缓存"是 MLA 吸收路径所保存的内容：每一层的潜在向量和 rope 键。最后一行用同一份配置数出 V3 的一次多词元预测起草（见下文）要乘的权重：它的投影、一个 MoE 块激活的权重和输出头。

# %%
from utils.mini_deepseek import parameter_counts

c = MiniDeepSeekConfig(**ckpt["config"])
counts_mini = parameter_counts(trained)
v3 = dict(vocab_size=129280, dim=7168, n_layers=61, n_dense_layers=3, n_heads=128, kv_lora_rank=512, qk_rope_head_dim=64,
          n_routed_experts=256, n_activated_experts=8, n_shared_experts=1, moe_inter_dim=2048,
          q_lora_rank=1536, qk_nope_head_dim=128, v_head_dim=128)
rows = [("vocabulary", c.vocab_size, v3["vocab_size"]), ("width (dim)", c.dim, v3["dim"]),
        ("layers (dense first)", f"{c.n_layers} ({c.n_dense_layers})", f"{v3['n_layers']} ({v3['n_dense_layers']})"),
        ("attention heads", c.n_heads, v3["n_heads"]), ("KV latent (kv_lora_rank)", c.kv_lora_rank, v3["kv_lora_rank"]),
        ("routed experts (active)", f"{c.n_routed_experts} ({c.n_activated_experts})", f"{v3['n_routed_experts']} ({v3['n_activated_experts']})"),
        ("shared experts", c.n_shared_experts, v3["n_shared_experts"]),
        ("cached per token", mla_cache_elements_per_token(c.n_layers, c.kv_lora_rank, c.qk_rope_head_dim),
         mla_cache_elements_per_token(v3["n_layers"], v3["kv_lora_rank"], v3["qk_rope_head_dim"])),
        ("parameters", f"{counts_mini['total']:,}", "671B (+14B MTP)"),
        ("active per token", f"{counts_mini['active']:,}", "37B"),
        ("MTP modules", ckpt["mtp_depth"], 1)]
print(f"{'':26}{'mini':>14}{'DeepSeek-V3':>18}")
for name, mini, big in rows:
    print(f"{name:26}{mini!s:>14}{big!s:>18}")
# What a V3 draft multiplies by (MTP, below): eh_proj, one MoE block's active weights, the output head.
d, H, qk = v3["dim"], v3["n_heads"], v3["qk_nope_head_dim"] + v3["qk_rope_head_dim"]
mla = (d * v3["q_lora_rank"] + v3["q_lora_rank"] * H * qk + d * (v3["kv_lora_rank"] + v3["qk_rope_head_dim"])
       + v3["kv_lora_rank"] * H * (v3["qk_nope_head_dim"] + v3["v_head_dim"]) + H * v3["v_head_dim"] * d)
moe = (v3["n_activated_experts"] + v3["n_shared_experts"]) * 3 * d * v3["moe_inter_dim"] + v3["n_routed_experts"] * d  # + gate
draft = {"eh_proj": 2 * d * d, "one MoE block, active": mla + moe, "output head": v3["vocab_size"] * d}
print("a V3 draft: " + ", ".join(f"{k} {n / 1e9:.2f}B" for k, n in draft.items())
      + f"; {sum(draft.values()) / 1e9:.2f}B in all, {sum(draft.values()) / 37e9:.1%} of the 37B a main-model step activates")

# %% [markdown]
# # Multi-token prediction · 多词元预测
#
# A next-token model gets one training signal per position. **Multi-token prediction** asks each
# position for more: the token after next, and further. Gloeckle et al. (2024) trained with extra
# output heads and report better sample efficiency, above all on code, better induction and
# algorithmic skills, and up to 3 times faster inference when the extra heads draft tokens
# (self-speculative decoding). DeepSeek-V3's report gives its own reasons: the extra objective
# densifies the training signal and may let the model pre-plan its representations for future
# tokens. DeepSeek-V3 (technical report, section 2.2)
# made the prediction **sequential**: depth `k` does not guess token `i + k + 1` from position `i`
# alone, it is also told the token `i + k`, so every depth keeps the causal chain of a language model.
#
# 下一个词元模型在每个位置只得到一个训练信号。**多词元预测** 要求每个位置预测更多：下下个词元，乃至更远。Gloeckle 等人（2024）用额外的输出头训练，报告了更高的样本效率（尤其在代码上）、更好的归纳与算法能力，以及让额外的头起草词元（自推测解码）时最高 3 倍的推理加速。DeepSeek-V3 的报告给出了自己的理由：额外的目标让训练信号更密集，并可能让模型为预测未来的词元预先规划它的表示。DeepSeek-V3（技术报告第 2.2 节）把预测做成了 **顺序** 的：深度 `k` 并不只凭位置 `i` 去猜词元 `i + k + 1`，它还被告知了词元 `i + k`，所以每个深度都保持了语言模型的因果链。
#
# Module `k` takes the hidden state of depth `k - 1` at position `i` (depth 0 is the main model)
# and the embedding of token `i + k`, normalises each (`hnorm`, `enorm`), concatenates them,
# projects `2 * dim -> dim` (`eh_proj`) and runs one Transformer block. Its output goes through
# **the main model's output head**, and the embedding is the main model's too. In this course the
# output also goes through the main model's final norm, so only the two input norms, the projection
# and the block are new (V3's module has an output norm of its own, see the chain below). In V3 the
# module is its layer 61.
#
# 模块 `k` 接收深度 `k - 1` 在位置 `i` 的隐藏状态（深度 0 即主模型）和词元 `i + k` 的嵌入，分别归一化（`hnorm`、`enorm`），拼接，投影 `2 * dim -> dim`（`eh_proj`），再经过一个 Transformer 块。它的输出经过 **主模型的输出头**，嵌入也是主模型的。在本课程中，输出还经过主模型的最终归一化，所以新增的只有两个输入归一化、投影和块（V3 的模块有自己的输出归一化，见下面的"整个序列上的链"）。在 V3 中，这个模块就是它的第 61 层。
#
# $$h'^k_i = M_k\,[\mathrm{RMSNorm}(h^{k-1}_i);\ \mathrm{RMSNorm}(\mathrm{Emb}(t_{i+k}))],\qquad h^k_i = \mathrm{TRM}_k(h'^k_i),\qquad P^k_{i+k+1} = \mathrm{OutHead}(h^k_i)$$
#
# That is the paper's formula, with the hidden state **first**. The released weights
# (`model.layers.61.eh_proj` of DeepSeek-V3 on Hugging Face), and the inference engines that load them, concatenate the
# **embedding first**. The two are the same model: `eh_proj` multiplies the concatenation, so swapping
# the halves of the input is undone by swapping the two halves of `eh_proj`'s columns. What
# matters is to use the order the weights were trained with. This notebook uses the released layout.
#
# 这是论文中的公式，隐藏状态在 **前**。而发布的权重（Hugging Face 上 DeepSeek-V3 的 `model.layers.61.eh_proj`）以及加载它们的推理引擎，都是 **嵌入在前** 拼接的。两者是同一个模型：`eh_proj` 作用在拼接结果上，交换输入的两半，只需交换 `eh_proj` 列的两半即可抵消。关键是使用权重训练时的顺序。本笔记本采用发布权重的布局。

# %% [markdown]
# ### Exercise 5 · `MTPModule` · 练习 5
#
# `__init__(self, cfg, layer_id)`: `enorm`, `hnorm` (`RMSNorm(cfg.dim)`), `eh_proj =
# nn.Linear(2 * cfg.dim, cfg.dim, bias=False)`, `block = Block(cfg, layer_id)`; no embedding and
# no head of its own. `forward(h_prev, next_embeddings, start_pos=0)` returns
# `block(eh_proj(cat([enorm(next_embeddings), hnorm(h_prev)], dim=-1)), start_pos)`.
#
# `__init__(self, cfg, layer_id)`：`enorm`、`hnorm`（`RMSNorm(cfg.dim)`），`eh_proj = nn.Linear(2 * cfg.dim, cfg.dim, bias=False)`，`block = Block(cfg, layer_id)`；没有自己的嵌入层和输出头。`forward(h_prev, next_embeddings, start_pos=0)` 返回 `block(eh_proj(cat([enorm(next_embeddings), hnorm(h_prev)], dim=-1)), start_pos)`。
#
# <!-- rules: MTPModule -->
#
# #### Rules that grading checks · 评分检查的规则 (`MTPModule`)
#
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - No embedding or output head of its own: the main model's are shared.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 没有自己的嵌入层或输出头：共享主模型的。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "MTPModule", "locked": false, "schema_version": 3, "solution": true, "task": false}
class MTPModule(nn.Module):
    def __init__(self, cfg, layer_id):
        super().__init__()
        ### BEGIN SOLUTION
        self.enorm = RMSNorm(cfg.dim)
        self.hnorm = RMSNorm(cfg.dim)
        self.eh_proj = nn.Linear(2 * cfg.dim, cfg.dim, bias=False)
        self.block = Block(cfg, layer_id)
        ### END SOLUTION

    def forward(self, h_prev, next_embeddings, start_pos=0):
        ### BEGIN SOLUTION
        x = torch.cat([self.enorm(next_embeddings), self.hnorm(h_prev)], dim=-1)
        return self.block(self.eh_proj(x), start_pos)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_MTPModule", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect
from utils.mini_deepseek import MiniDeepSeekConfig

from autograder.checks import nb12

with nb12.as_graded(MTPModule):
    small = MiniDeepSeekConfig(dim=16, n_heads=2, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=4,
                               inter_dim=24, moe_inter_dim=8, n_routed_experts=4, n_expert_groups=1, max_seq_len=8)
    torch.manual_seed(0)
    mtp_small = MTPModule(small, 2).eval()
    names = {n.split(".")[0] for n, _ in mtp_small.named_parameters()}
    expect(names == {"enorm", "hnorm", "eh_proj", "block"},
           "MTPModule's parameters live in enorm, hnorm, eh_proj and block only: the embedding and head are shared.",
           "MTPModule 的参数只在 enorm、hnorm、eh_proj 和 block 中：嵌入层和输出头是共享的。")
    with torch.no_grad():
        out = mtp_small(torch.randn(2, 5, 16), torch.randn(2, 5, 16))
    expect(out.shape == (2, 5, 16), "MTPModule returns (B, T, dim).", "MTPModule 返回 (B, T, dim)。")
    print("✓ MTPModule")

# %% nbgrader={"grade": true, "grade_id": "test_MTPModule_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb12
nb12.check_MTPModule(MTPModule)
### END HIDDEN TESTS

# %% [markdown]
# ### The chain over a sequence · 整个序列上的链
#
# In training, every position runs every depth at once. `h` starts as the main model's residual
# stream before its final norm, `hidden_states(model, tokens)` (from `utils.mini_deepseek`: embed,
# then every block). Position `i` of depth `k` reads the embedding of token `i + k`, the token that depth
# `k - 1` was asked to predict there: `tokens[:, k:]`. Depth `k` has one position fewer than depth
# `k - 1`, since its last position would need a token past the end, hence `h[:, :-1]`. Reading
# `tokens[:, k - 1:]` instead would hand depth `k` a token it already had; `tokens[:, k + 1:]` would
# hand it the answer. Each depth's logits go through the shared norm and head.
#
# 训练时，每个位置同时经过所有深度。`h` 一开始是主模型在最终归一化之前的残差流，即 `hidden_states(model, tokens)`（来自 `utils.mini_deepseek`：嵌入，然后经过每个块）。深度 `k` 的位置 `i` 读取词元 `i + k` 的嵌入，即深度 `k - 1` 在该位置被要求预测的词元：`tokens[:, k:]`。深度 `k` 比深度 `k - 1` 少一个位置，因为它的最后一个位置需要序列末尾之后的词元，所以用 `h[:, :-1]`。如果改读 `tokens[:, k - 1:]`，深度 `k` 得到的是它已经有的词元；如果读 `tokens[:, k + 1:]`，就等于把答案交给了它。每个深度的 logits 都经过共享的归一化和输出头。

# %% [markdown]
# ### Exercise 6 · `mtp_forward` · 练习 6
#
# Return the main model's logits `(B, T, V)` and the list of each depth's logits, depth `k` of
# shape `(B, T - k, V)`: `h^0 = hidden_states(model, tokens)`, then for `k = 1..D`
# `h^k = mtp_modules[k-1](h^{k-1}[:, :-1], model.embed(tokens[:, k:]))`, and every logits tensor is
# `model.head(model.norm(h))`. Keep the graph: the MTP loss trains the main model too.
#
# 返回主模型的 logits `(B, T, V)`，以及每个深度的 logits 组成的列表，深度 `k` 的形状为 `(B, T - k, V)`：`h^0 = hidden_states(model, tokens)`，然后对 `k = 1..D` 计算 `h^k = mtp_modules[k-1](h^{k-1}[:, :-1], model.embed(tokens[:, k:]))`，每个 logits 张量都是 `model.head(model.norm(h))`。保留计算图：MTP 损失也训练主模型。
#
# <!-- rules: mtp_forward -->
#
# #### Rules that grading checks · 评分检查的规则 (`mtp_forward`)
#
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Every depth's logits keep their graph: the gradient reaches every parameter of `model` (through h^0 too) and of `mtp_modules`.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 每个深度的 logits 都保留计算图：梯度到达 `model`（也经由 h^0）和 `mtp_modules` 的每个参数。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %%
from utils.mini_deepseek import hidden_states


# %% nbgrader={"grade": false, "grade_id": "mtp_forward", "locked": false, "schema_version": 3, "solution": true, "task": false}
def mtp_forward(model, mtp_modules, tokens):
    ### BEGIN SOLUTION
    h = hidden_states(model, tokens)  # depth 0, (B, T, dim)
    logits = model.head(model.norm(h))
    mtp_logits = []
    for k, module in enumerate(mtp_modules, start=1):
        h = module(h[:, :-1], model.embed(tokens[:, k:]))  # (B, T - k, dim): position i reads token i + k
        mtp_logits.append(model.head(model.norm(h)))
    return logits, mtp_logits
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_mtp_forward", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect
from utils.mini_deepseek import MiniDeepSeek as CourseModel, MiniDeepSeekConfig
from utils.mtp import make_mtp_modules

from autograder.checks import nb12

with nb12.as_graded(mtp_forward):
    small = MiniDeepSeekConfig(vocab_size=20, dim=16, n_heads=2, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4,
                               v_head_dim=4, inter_dim=24, moe_inter_dim=8, n_routed_experts=4, n_expert_groups=1, max_seq_len=16)
    torch.manual_seed(0)
    course_model, modules = CourseModel(small).eval(), make_mtp_modules(small, 2).eval()
    tokens = torch.tensor([[0, 3, 7, 1, 10, 4, 9, 2, 5, 8]])
    changed = tokens.clone()
    changed[0, 7] = 11  # only token 7 changes
    with torch.no_grad():
        main, deep = mtp_forward(course_model, modules, tokens)
        _, deep_changed = mtp_forward(course_model, modules, changed)
    expect(main.shape == (1, 10, 20) and [tuple(d.shape) for d in deep] == [(1, 9, 20), (1, 8, 20)],
           "mtp_forward returns logits (B, T, V) and, for depth k, (B, T - k, V).",
           "mtp_forward 返回 logits (B, T, V)，以及深度 k 的 (B, T - k, V)。")
    for k, (a, b) in enumerate(zip(deep, deep_changed), start=1):
        moved = (a - b).abs().amax(-1)[0] > 1e-4  # bits may move anywhere: an expert's matmul sees another number of tokens
        first_changed = int(moved.nonzero()[0]) if moved.any() else None
        expect(first_changed == 7 - k,
               f"Depth {k} at position i reads token i + {k}: a change of token 7 must first reach position {7 - k} (use tokens[:, k:]).",
               f"深度 {k} 在位置 i 读取词元 i + {k}：词元 7 的改变必须最早出现在位置 {7 - k}（使用 tokens[:, k:]）。",
               f"first changed position {first_changed}")
    print("✓ mtp_forward")

# %% nbgrader={"grade": true, "grade_id": "test_mtp_forward_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb12
nb12.check_mtp_forward(mtp_forward)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 7 · `mtp_loss` · 练习 7
#
# Position `i` of depth `k` predicts token `i + k + 1`. Depth `k`'s logits have `T - k` positions;
# the last has no target inside the sequence, so compare `mtp_logits[k-1][:, :-1]` with
# `tokens[:, k + 1:]`. Average the `D` depths and weight them by `lam`:
# $\mathcal{L}_{MTP} = \frac{\lambda}{D}\sum_{k=1}^{D}\mathcal{L}_k$. The training loss is
# `next_token_loss + mtp_loss`. DeepSeek-V3 used `D = 1` and `lam = 0.3` for the first 10T tokens, then `0.1`.
# One difference from the report: its $\mathcal{L}_k$ puts $\frac{1}{T}$, with $T$ the input length,
# in front of a sum over the $T - k$ positions of depth `k` (its targets run to token $T + 1$). Here
# each depth takes the mean over the positions that have a target (what `F.cross_entropy` does),
# $T - k - 1$ of them in a sequence of $T$ tokens. The two differ by a constant factor per depth,
# which only rescales `lam` for that depth.
#
# 深度 `k` 的位置 `i` 预测词元 `i + k + 1`。深度 `k` 的 logits 有 `T - k` 个位置；最后一个位置在序列内没有目标，所以比较 `mtp_logits[k-1][:, :-1]` 与 `tokens[:, k + 1:]`。对 `D` 个深度取平均并乘以权重 `lam`：$\mathcal{L}_{MTP} = \frac{\lambda}{D}\sum_{k=1}^{D}\mathcal{L}_k$。训练损失是 `next_token_loss + mtp_loss`。DeepSeek-V3 使用 `D = 1`，前 10T 个词元 `lam = 0.3`，之后为 `0.1`。与报告有一处不同：报告中的 $\mathcal{L}_k$ 在深度 `k` 的 $T - k$ 个位置之和前面乘以 $\frac{1}{T}$，$T$ 是输入长度（它的目标一直到第 $T + 1$ 个词元）。这里每个深度对有目标的位置取平均（`F.cross_entropy` 的做法），在 $T$ 个词元的序列中有 $T - k - 1$ 个这样的位置。两者在每个深度上只差一个常数因子，相当于为该深度重新缩放 `lam`。
#
# <!-- rules: mtp_loss -->
#
# #### Rules that grading checks · 评分检查的规则 (`mtp_loss`)
#
# - Graded in float32 and float64: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 在 float32、float64 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "mtp_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def mtp_loss(mtp_logits, tokens, lam=0.3):
    ### BEGIN SOLUTION
    total = 0.0
    for k, logits in enumerate(mtp_logits, start=1):
        V = logits.shape[-1]
        total = total + F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, k + 1:].reshape(-1))
    return lam / len(mtp_logits) * total
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_mtp_loss", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import math
import torch
from autograder.checks import expect_close

from autograder.checks import nb12

with nb12.as_graded(mtp_loss):
    tokens = torch.tensor([[1, 2, 3, 0]])
    sure = torch.full((1, 3, 4), -1e4)
    sure[0, 0, 3] = sure[0, 1, 0] = 0.0  # depth 1: position 0 predicts token 2 (= 3), position 1 token 3 (= 0)
    expect_close(mtp_loss([sure], tokens), torch.tensor(0.0),
                 "Depth 1 at position i predicts token i + 2: these logits are right everywhere, so the loss is 0.",
                 "深度 1 在位置 i 预测词元 i + 2：这些 logits 处处正确，所以损失为 0。", atol=1e-4)
    expect_close(mtp_loss([torch.zeros(1, 3, 4), torch.zeros(1, 2, 4)], tokens, lam=0.1), torch.tensor(0.1 * math.log(4)),
                 "Uniform logits at both depths give lam / D * (ln 4 + ln 4) = lam * ln 4.",
                 "两个深度的 logits 都均匀时，损失为 lam / D * (ln 4 + ln 4) = lam * ln 4。")
    print("✓ mtp_loss")

# %% nbgrader={"grade": true, "grade_id": "test_mtp_loss_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb12
nb12.check_mtp_loss(mtp_loss)
### END HIDDEN TESTS

# %% [markdown]
# ## The trained MTP module · 训练好的 MTP 模块
#
# The checkpoint's MTP module was trained next to the main model with `lam` = 0.3. Load it into
# your class (same names again) and measure, on held-out sequences, how often depth 1 gets the
# token after next right, against the main model on the next token:
#
# 检查点中的 MTP 模块与主模型一起训练，`lam` = 0.3。把它加载到你的类中（参数名同样一致），在留出序列上测量深度 1 猜对下下个词元的频率，并与主模型预测下一个词元的准确率对比：

# %%
mtp_trained = nn.ModuleList([MTPModule(c, c.n_layers)])
mtp_trained.load_state_dict(ckpt["mtp"])
mtp_trained.eval()
with torch.no_grad():
    main_logits, (depth1,) = mtp_forward(trained, mtp_trained, test)
next_ok = (main_logits[:, :-1].argmax(-1) == test[:, 1:])[copy_mask(test)[:, 1:]].float().mean()
after_ok = (depth1[:, :-1].argmax(-1) == test[:, 2:])[copy_mask(test)[:, 2:]].float().mean()
print(f"copied tokens: main model right on token i + 1 {next_ok:.1%}, MTP depth 1 right on token i + 2 {after_ok:.1%}")
print(f"losses on this batch: next-token {next_token_loss(main_logits, test):.3f}, "
      f"MTP (lam = 0.3) {mtp_loss([depth1], test):.3f}")

# %% [markdown]
# ## Two uses at inference · 推理时的两种用法
#
# **Drop the modules.** The main model is a complete language model; MTP was a training signal.
# DeepSeek-V3's 671B parameters do not count the 14B of its MTP module.
#
# **丢掉这些模块。** 主模型本身就是完整的语言模型；MTP 只是一个训练信号。DeepSeek-V3 的 671B 参数不包括其 MTP 模块的 14B。
#
# **Use depth 1 as a draft** (self-speculative decoding). After the main model produced token
# `t_{p+1}`, the MTP module, which already has the main model's hidden state at `p`, drafts `t_{p+2}`
# for the cost of its projection, one block and the output head. The next forward pass of the main model reads **two** tokens, `t_{p+1}` and the
# draft. Its prediction at the first position is the token it would have produced anyway: if it
# equals the draft, the draft is kept, and the prediction at the second position is one more token
# for free. Two tokens for one pass of the main model. If not, the draft is dropped and the main
# model's own token is used. Either way every token kept is the main model's greedy choice, so the
# text is **identical** to plain greedy decoding; only the number of passes changes. DeepSeek
# reports that 85-90% of its drafts are accepted, for 1.8 times the tokens per second.
#
# **把深度 1 用作草稿**（自推测解码）。主模型生成词元 `t_{p+1}` 之后，MTP 模块已经拥有主模型在位置 `p` 的隐藏状态，只需它的投影、一个块和输出头的计算量就能起草 `t_{p+2}`。主模型的下一次前向计算读入 **两个** 词元：`t_{p+1}` 和草稿。它在第一个位置上的预测正是它本来就会生成的词元：如果与草稿相同，就保留草稿，而第二个位置上的预测又白白多得一个词元。主模型一次前向计算得到两个词元。如果不同，就丢弃草稿，使用主模型自己的词元。无论哪种情况，保留下来的每个词元都是主模型的贪心选择，所以文本与普通贪心解码 **完全相同**；改变的只是前向计算的次数。DeepSeek 报告其草稿有 85-90% 被接受，每秒词元数达到 1.8 倍。
#
# `utils.mtp.speculative_generate` implements it with both caches (the main model's and the module's block). Measured
# here on the trained checkpoint, side by side in one run:
#
# `utils.mtp.speculative_generate` 用两个缓存（主模型的和模块中块的）实现了它。下面在训练好的检查点上，于同一次运行中并排测量：

# %%
from utils.mtp import greedy_generate, speculative_generate

prompt = copy_prompts(1, torch.Generator().manual_seed(21))[0]
plain = greedy_generate(trained, prompt, 30)
fast, stats = speculative_generate(trained, mtp_trained[0], prompt, 30)
print("greedy:     ", plain[0, prompt.shape[1]:].tolist())
print("speculative:", fast[0, prompt.shape[1]:].tolist())
print(f"identical: {torch.equal(plain, fast)}; drafts accepted {stats['accepted']} of {stats['drafted']}; "
      f"{stats['passes']} passes of the main model for 30 tokens")

# %%
# NBVAL_IGNORE_OUTPUT
from utils.mtp import decode_benchmark

prompts = copy_prompts(2 if GRADING else 3, torch.Generator().manual_seed(1234))
r = decode_benchmark(trained, mtp_trained[0], prompts, max_new_tokens=8 if GRADING else 30, repeats=1 if GRADING else 2)
print(f"{'acceptance of the draft':32}{r['acceptance']:>10.1%}")
print(f"{'tokens per main-model pass':32}{r['tokens_per_pass']:>10.2f}")
print(f"{'greedy, tokens/s':32}{r['greedy_tok_s']:>10.0f}")
print(f"{'self-speculative, tokens/s':32}{r['speculative_tok_s']:>10.0f}   ({r['speedup']:.2f}x on the machine that ran this)")
print(f"{'output identical to greedy':32}{r['identical']!s:>10}")

# %% [markdown]
# Two tokens per pass do not make decoding twice as fast. Count what a speculative step costs, in
# units of one greedy step (one pass of the main model on one token, time t1): one pass on two
# tokens (c2 = t2 / t1) and one draft (r = td / t1). It keeps 1 + a tokens, a being the
# acceptance rate, where greedy keeps one per unit, so the speed-up is $(1 + a) / (c_2 + r)$ and
# the draft stops paying at $r = 1 + a - c_2$.
#
# 推测解码每次前向计算得到两个词元，并不会让解码快一倍。以一次贪心步（主模型对一个词元的一次前向计算，耗时 t1）为单位，数一数一个推测步的代价：主模型对两个词元的一次前向计算（c2 = t2 / t1）加一次起草（r = td / t1）。它保留 1 + a 个词元（a 是接受率），而贪心解码每个单位保留一个，所以加速比为 $(1 + a) / (c_2 + r)$，当 $r = 1 + a - c_2$ 时草稿就不再划算。
#
# Here the draft is a whole block next to a main model of two, so r is large. `utils.mtp.step_costs`
# times the four calls on this machine and `cost_model` puts them into the formula:
#
# 这里草稿是一个完整的块，而主模型只有两个块，所以 r 很大。`utils.mtp.step_costs` 在这台机器上为这四种调用计时，`cost_model` 把它们代入公式：

# %%
# NBVAL_IGNORE_OUTPUT
from utils.mtp import cost_model, step_costs


def print_cost_model(name, model, draft, acceptance, measured):
    m = cost_model(step_costs(model, draft, prompts[0], calls=2 if GRADING else 20, rounds=1 if GRADING else 3), acceptance)
    print(f"{name}: c2 = {m['verify_cost']:.2f}, r = {m['draft_cost']:.2f}, predicted {m['predicted']:.2f}x, "
          f"measured {measured:.2f}x; break-even at r = {m['break_even']:.2f}")
    return m


shallow_costs = print_cost_model("2 layers", trained, mtp_trained[0], r["acceptance"], r["speedup"])

# %% [markdown]
# **A deeper model.** The draft stays one block (with its projection and the output head) however
# deep the main model is, so depth makes it cheap. In DeepSeek-V3 it is one block next to 61 layers,
# but the output head is large (129,280 x 7,168 weights): the size table above counts what a draft
# uses there against the 37B parameters a main-model step activates. `python -m utils.train_mini --n-layers 8`
# trained the same model 8 layers deep with its MTP module, on the same task and seed
# (`checkpoints/mini_deepseek_8layers.pt`). It loads into your classes too. The last line puts its
# greedy decode against the limit of notebook 11: the bytes a step reads (the weights one token
# uses and the latent cache) times tokens per second, over this machine's read rate (notebook 11's
# line). What to look for: at this size expect the fraction to be small, a step waiting on the
# fixed cost of each of its many small operations rather than on memory; the line after it says
# whether it was.
#
# **更深的模型。** 无论主模型多深，草稿始终只有一个块（加上它的投影和输出头），所以加深主模型会让草稿变得便宜。在 DeepSeek-V3 中，它是 61 层旁边的一个块，但输出头很大（129,280 x 7,168 个权重）：上面的规模表数出了一次起草在那里用到的参数，并与主模型一步激活的 37B 参数相比。`python -m utils.train_mini --n-layers 8` 用同样的任务和种子训练了 8 层深的同一个模型及其 MTP 模块（`checkpoints/mini_deepseek_8layers.pt`）。它同样可以加载到你的类中。最后一行把它的贪心解码与笔记本 11 的上限相比：一步读取的字节数（一个词元用到的权重和潜在缓存）乘以每秒词元数，再除以这台机器的读取速率（笔记本 11 的那条线）。要看的是：在这个规模下，预计这个比例很小，一步等待的是它众多小操作各自的固定开销，而不是内存；它后面的一行会说明是否如此。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.bandwidth import bandwidth_fraction, bandwidth_line, read_bandwidth
from utils.mini_deepseek import DEEP_CHECKPOINT, bytes_read_per_token

deep_ckpt = torch.load(DEEP_CHECKPOINT, weights_only=True)
deep_cfg = MiniDeepSeekConfig(**deep_ckpt["config"])
deep = MiniDeepSeek(deep_cfg)
deep.load_state_dict(deep_ckpt["model"])
deep_mtp = nn.ModuleList([MTPModule(deep_cfg, deep_cfg.n_layers)])
deep_mtp.load_state_dict(deep_ckpt["mtp"])
deep_mtp = deep_mtp[0].eval()
deep.eval()
print(f"command: {deep_ckpt['command']}; {deep_cfg.n_layers} layers; held-out copy accuracy "
      f"{deep_ckpt['final']['copy_accuracy']:.2%}, of its MTP depth 1 {deep_ckpt['final']['mtp_copy_accuracy']:.2%}")
rd = decode_benchmark(deep, deep_mtp, prompts[:1] if GRADING else prompts, max_new_tokens=8 if GRADING else 30,
                      repeats=1 if GRADING else 2)  # grading: one prompt, a figure no one reads
print(f"{'acceptance of the draft':32}{rd['acceptance']:>10.1%}")
print(f"{'greedy, tokens/s':32}{rd['greedy_tok_s']:>10.0f}")
print(f"{'self-speculative, tokens/s':32}{rd['speculative_tok_s']:>10.0f}   ({rd['speedup']:.2f}x on the machine that ran this)")
print(f"{'output identical to greedy':32}{rd['identical']!s:>10}")
deep_costs = print_cost_model("8 layers", deep, deep_mtp, rd["acceptance"], rd["speedup"])
context = round(sum(p.shape[1] for p in prompts) / len(prompts)) + 15  # the mean over a 30-token decode
bandwidth = read_bandwidth(n_bytes=(64 if GRADING else 256) * 2 ** 20)  # utils.bandwidth: a matrix-vector product
print("greedy, against the read rate:", bandwidth_line(bytes_read_per_token(deep, context), rd["greedy_tok_s"], bandwidth))
share = bandwidth_fraction(bytes_read_per_token(deep, context), rd["greedy_tok_s"], bandwidth)
print("a small fraction: a step waits on the fixed costs of its operations, not on memory" if share < 0.25 else
      f"{share:.0%} of the line: on this machine memory is a large share of a step")

# %% [markdown]
# To see the whole curve, make the 8-layer model's draft dearer on purpose: `DearerDraft` runs the
# same block several times (same output, same acceptance, only the cost grows). Each point below
# is measured: its r by `step_costs`, its speed-up by `decode_benchmark`, side by side with greedy.
# The line is the formula with the measured a and c2; where it crosses 1 the draft stops paying.
#
# 为了看到整条曲线，我们故意让 8 层模型的草稿变贵：`DearerDraft` 把同一个块运行若干次（输出相同、接受率相同，只有代价变大）。下面每个点都是测量出来的：r 由 `step_costs` 测得，加速比由 `decode_benchmark` 与贪心解码并排测得。曲线是代入测得的 a 和 c2 的公式；它与 1 相交的地方，草稿就不再划算。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.mtp import cost_sweep

sweep = cost_sweep(deep, deep_mtp, prompts[:1] if GRADING else prompts[:2], 4 if GRADING else 30,
                   times=(1,) if GRADING else (1, 4, 8), repeats=1 if GRADING else 2, calls=2 if GRADING else 10,
                   rounds=1 if GRADING else 3, progress=lambda t: tqdm(t, desc="draft cost sweep"))
a, c2 = rd["acceptance"], deep_costs["verify_cost"]
grid = torch.linspace(0, max(1.6, max(row["draft_cost"] for row in sweep) * 1.1), 100)
fig, ax = plt.subplots(figsize=(7, 3.8))
ax.plot(grid, (1 + a) / (c2 + grid), color="gray", lw=1, label=f"(1 + a) / (c2 + r), a = {a:.2f}, c2 = {c2:.2f}")
ax.plot([row["draft_cost"] for row in sweep], [row["speedup"] for row in sweep], "o", label="8 layers, draft run 1, 4, 8 times")
ax.plot([shallow_costs["draft_cost"]], [r["speedup"]], "s", color="C3", label="2 layers, its own draft")
ax.axhline(1, color="black", lw=0.8)
ax.axvline(1 + a - c2, color="C2", ls="--", lw=1, label=f"break-even r = {1 + a - c2:.2f}")
ax.set_xlabel("r = cost of the draft / cost of one greedy step"); ax.set_ylabel("speed-up over greedy (measured)")
ax.set_title("self-speculative decoding pays while the draft is cheap"); ax.legend(fontsize=8); ax.grid(alpha=0.3)
plt.show()
for row in sweep:
    print(f"draft run {row['times']} times: r = {row['draft_cost']:.2f}, predicted {row['predicted']:.2f}x, "
          f"measured {row['speedup']:.2f}x, identical output {row['identical']}")
gaps = [row["speedup"] / row["predicted"] - 1 for row in sweep]
widest = min(range(len(sweep)), key=lambda i: gaps[i])
print(f"measured against the line: {min(gaps):+.0%} to {max(gaps):+.0%}"
      + ("; below it at every point" if max(gaps) < 0 else "; above it at every point" if min(gaps) > 0 else "")
      + f"; furthest below at r = {sweep[widest]['draft_cost']:.2f}, "
      + ("the cheapest draft" if sweep[widest]["draft_cost"] == min(row["draft_cost"] for row in sweep) else "not the cheapest draft"))
say = lambda x: "a speed-up" if x > 1.05 else "no speed-up (within 5% of greedy)" if x >= 0.95 else "a slow-down"
print(f"on this machine: 2 layers with its draft {r['speedup']:.2f}x greedy, {say(r['speedup'])}; "
      f"8 layers {rd['speedup']:.2f}x, {say(rd['speedup'])}")

# %% [markdown]
# What to look for, and the last two lines say what this machine measured. The 2-layer model's
# draft costs most of a greedy step, so it sits near break-even; the 8-layer model's draft is a
# small fraction of a step, and the same kind of draft, accepted just as often, can turn two tokens
# per pass into a real speed-up. The measured points need not lie on the line: the formula leaves
# out the loop's own bookkeeping (joining tokens, comparing the draft), which weighs most where the
# draft is cheapest, and a step of this small model takes milliseconds, so on a shared machine its
# timings move by tens of percent between rounds (the line before the last gives the range and
# where the largest gap was). c2, in the legend, is close to
# 1 because, at this size, a pass on two tokens costs little more than a pass on one. On a GPU
# serving a large dense model that holds for a different reason: a step reads every weight once whether it
# checks one token or two (notebook 11). In a mixture of experts the second token may be routed to
# other experts, so a two-token pass can read up to twice the routed experts' weights (16 experts
# per layer instead of 8 in V3). DeepSeek-V3 reports 85-90% acceptance and 1.8x the tokens per
# second; the acceptance rate and the identical output do not depend on the machine, up to
# floating-point ties: a pass on two tokens adds in another order than a pass on one, and can flip
# a near-tie between two candidate tokens.
#
# 要看的是下面这些，最后两行说明这台机器测得的结果。2 层模型的草稿几乎要花掉一次贪心步的代价，所以它处在盈亏平衡点附近；8 层模型的草稿只占一步的一小部分，同样的草稿、同样的接受率，就能把每次前向计算两个词元变成真正的加速。测量点不一定落在曲线上：公式没有计入循环自身的簿记（拼接词元、比较草稿），而它在草稿最便宜的地方分量最重；并且这个小模型的一步只需几毫秒，所以在与他人共享的机器上，各轮之间的计时会相差几十个百分点（倒数第二行给出了范围以及最大差距出现在哪里）。图例中的 c2 接近 1，是因为在这个规模下，对两个词元的一次前向计算只比对一个词元的稍贵一点。在 GPU 上服务大型稠密模型时，这一点出于另一个原因同样成立：无论检查一个词元还是两个，一步都只把每个权重读一遍（笔记本 11）。在混合专家模型中，第二个词元可能被路由到别的专家，所以对两个词元的一次前向计算最多可能读取两倍的路由专家权重（V3 中每层 16 个专家而不是 8 个）。DeepSeek-V3 报告的接受率为 85-90%，每秒词元数为 1.8 倍；除了浮点数打平的情形，接受率和输出完全相同这两点与机器无关：对两个词元的前向计算与对一个词元的前向计算求和顺序不同，可能让两个候选词元之间几乎打平的比较翻转。
#
# ## What you built · 你构建了什么
#
# A DeepSeek-V3 in miniature: your RMSNorm, pre-norm blocks, model, next-token loss and
# multi-token prediction with its two uses, around the course's MLA with decoupled RoPE and a
# compressed cache (`utils.mla`) and its mixture of experts with a shared expert and bias balancing
# (`utils.moe`), the versions of notebooks 09 and 10. The weights load into DeepSeek-V3's parameter
# names. What separates this model from the real one is mainly scale (the table above) and FP8
# (notebook 11), and a few details the course leaves out: queries without V3's compression
# (`q_lora_rank = 0`, one `wq` where V3 has `wq_a`, `q_norm` and `wq_b`), no YaRN (notebook 09),
# `route_scale` 1.0 where V3 has 2.5, no sequence-wise balance loss next to the bias, and the two
# MTP details below.
#
# 一个迷你版的 DeepSeek-V3：你的 RMSNorm、前归一化块、模型、下一个词元损失以及多词元预测及其两种用法，围绕着课程的带解耦 RoPE 和压缩缓存的 MLA（`utils.mla`）和带共享专家与偏置均衡的混合专家（`utils.moe`），即笔记本 09 和 10 的版本。这些权重可以按 DeepSeek-V3 的参数名加载。这个模型与真正的模型之间的差别主要在规模（上面的表格）和 FP8（笔记本 11），还有课程省略的几个细节：查询没有 V3 的压缩（`q_lora_rank = 0`，一个 `wq`，而 V3 有 `wq_a`、`q_norm` 和 `wq_b`）、没有 YaRN（笔记本 09）、`route_scale` 为 1.0 而 V3 为 2.5、偏置之外没有按序列的均衡损失，以及下面 MTP 的两处细节。

# %% [markdown]
# ### Two MTP details that differ from V3 · MTP 与 V3 不同的两处细节
#
# Here the course and the released DeepSeek-V3 differ in two details of the chain (Exercise 6's
# `mtp_forward`). The first is the output norm. V3's layer 61 stores one of its own, `model.layers.61.shared_head.norm.weight`, next to
# `enorm`, `hnorm` and `eh_proj`; only the embedding and the head matrix (`shared_head.head`) are
# shared with the main model (`README_WEIGHTS.md`), and engines that load the weights (vLLM's
# `deepseek_mtp.py`) apply `shared_head.norm`, not the main model's `model.norm`, before the head.
# This course sends every depth through the main model's final `norm`, trained by both losses: one
# norm fewer, so the checkpoint's MTP module has no output norm. The second is `h^0`. vLLM hands
# layer 61 the main model's output after its final norm (`DeepseekV2Model.forward` in
# `deepseek_v2.py` ends with `self.norm(hidden_states, residual)`), while this course's `h^0` is the
# residual stream before that norm. `hnorm` rescales each vector to an RMS of 1, which undoes the
# final norm's division but not its learned per-channel weight, so the two inputs differ by that
# weight. To take V3's layer 61, `MTPModule` would need one more RMSNorm, applied in place of
# `model.norm`, and `mtp_forward` would start from `model.norm(hidden_states(model, tokens))`.
#
# 在这里，本课程与发布的 DeepSeek-V3 在这条链（练习 6 的 `mtp_forward`）上有两处不同。第一处是输出归一化。V3 的第 61 层在 `enorm`、`hnorm` 和 `eh_proj` 之外，还保存了自己的输出归一化 `model.layers.61.shared_head.norm.weight`；只有嵌入和输出头矩阵（`shared_head.head`）与主模型共享（`README_WEIGHTS.md`），而加载这些权重的推理引擎（vLLM 的 `deepseek_mtp.py`）在输出头之前用的是 `shared_head.norm`，不是主模型的 `model.norm`。本课程让每个深度都经过主模型的最终 `norm`，它同时被两个损失训练：少了一个归一化，所以检查点中的 MTP 模块没有输出归一化。第二处是 `h^0`。vLLM 交给第 61 层的是主模型经过最终归一化之后的输出（`deepseek_v2.py` 中 `DeepseekV2Model.forward` 以 `self.norm(hidden_states, residual)` 结束），而本课程的 `h^0` 是这个归一化之前的残差流。`hnorm` 把每个向量缩放到均方根为 1，这抵消了最终归一化的除法，却抵消不了它可学习的逐通道权重，所以两种输入相差的正是这个权重。要装入 V3 的第 61 层，`MTPModule` 需要多一个 RMSNorm，并用它代替 `model.norm`，而 `mtp_forward` 要从 `model.norm(hidden_states(model, tokens))` 开始。

# %% [markdown]
# Sources: DeepSeek-AI, *DeepSeek-V3 Technical Report* (2024), sections 2.1 (architecture) and 2.2
# (multi-token prediction, lam 0.3 then 0.1), 5.4.3 (acceptance 85-90%, 1.8x tokens per second), and its
# inference code `inference/model.py` (parameter names, `Block`, `Gate`); F. Gloeckle et al., *Better
# & Faster Large Language Models via Multi-token Prediction* (2024); B. Zhang and R. Sennrich, *Root
# Mean Square Layer Normalization* (2019); C. Olsson et al., *In-context Learning and Induction
# Heads* (2022); the eh_proj layout and layer 61's own `shared_head.norm`: the released DeepSeek-V3
# weights on Hugging Face (`model.safetensors.index.json`), `README_WEIGHTS.md` of the DeepSeek-V3
# repository (what layer 61 shares) and vLLM's `vllm/model_executor/models/deepseek_mtp.py`; what
# layer 61 is fed: vLLM's `vllm/model_executor/models/deepseek_v2.py` (`DeepseekV2Model.forward`);
# V3's sizes and `route_scale`: `inference/configs/config_671B.json`.
#
# 来源：DeepSeek-AI，《DeepSeek-V3 技术报告》（2024）第 2.1 节（架构）和第 2.2 节（多词元预测，lam 先 0.3 后 0.1）、第 5.4.3 节（接受率 85-90%，每秒词元数 1.8 倍），及其推理代码 `inference/model.py`（参数名、`Block`、`Gate`）；F. Gloeckle 等，《Better & Faster Large Language Models via Multi-token Prediction》（2024）；B. Zhang 和 R. Sennrich，《Root Mean Square Layer Normalization》（2019）；C. Olsson 等，《In-context Learning and Induction Heads》（2022）；eh_proj 的布局和第 61 层自己的 `shared_head.norm`：Hugging Face 上发布的 DeepSeek-V3 权重（`model.safetensors.index.json`）、DeepSeek-V3 仓库的 `README_WEIGHTS.md`（第 61 层共享哪些参数），以及 vLLM 的 `vllm/model_executor/models/deepseek_mtp.py`；第 61 层的输入：vLLM 的 `vllm/model_executor/models/deepseek_v2.py`（`DeepseekV2Model.forward`）；V3 的尺寸和 `route_scale`：`inference/configs/config_671B.json`。
