# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Positions: sinusoidal encoding and RoPE · 位置：正弦编码与旋转位置编码
#
# "Dog bites man" and "man bites dog" contain the same tokens. Attention compares every query with
# every key by a dot product, and nothing in that comparison says where a token stands. This notebook
# first measures that blindness, then follows the three answers you will meet most often: a learned
# vector per position (GPT-2, the model of notebook 07), the fixed sinusoidal encoding of *Attention Is
# All You Need*, and the rotary position embedding **RoPE** (Su et al., *RoFormer*, 2021) used by Llama
# and DeepSeek, which rotates queries and keys so that position enters a score only through how far
# apart two tokens are.
#
# "Dog bites man"（狗咬人）和 "man bites dog"（人咬狗）包含相同的词元。注意力用点积把每个查询与每个键比较，而这种比较本身并不知道词元在哪个位置。本笔记本先测量这种"位置盲"，再依次介绍最常见的三种办法：为每个位置学习一个向量（GPT-2，也就是笔记本 07 的模型）、*Attention Is All You Need* 中固定的正弦编码，以及 Llama 和 DeepSeek 使用的旋转位置编码 **RoPE**（Su 等，*RoFormer*，2021）：它旋转查询和键，使位置只通过两个词元相距多远进入分数。
#
# Sources: A. Vaswani et al. (2017), section 3.5; J. Su et al., *RoFormer* (2021), sections 3.2-3.4;
# Meta's Llama reference code and Hugging Face's `apply_rotary_pos_emb` (the two layouts); DeepSeek-V3's
# `inference/model.py` (interleaved RoPE); the Llama 3 report, *The Llama 3 Herd of Models* (2024),
# section 3.2 (theta = 500,000) and W. Xiong et al., *Effective Long-Context Scaling of Foundation
# Models* (2023); A. Haviv et al., *Transformer Language Models without Positional Encodings Still
# Learn Positional Information* (2022).
#
# 参考资料：A. Vaswani 等（2017）第 3.5 节；J. Su 等，*RoFormer*（2021）第 3.2-3.4 节；Meta 的 Llama 参考代码和 Hugging Face 的 `apply_rotary_pos_emb`（两种布局）；DeepSeek-V3 的 `inference/model.py`（相邻配对式 RoPE）；Llama 3 技术报告《The Llama 3 Herd of Models》（2024）第 3.2 节（theta = 500,000）以及 W. Xiong 等，《Effective Long-Context Scaling of Foundation Models》（2023）；A. Haviv 等，《Transformer Language Models without Positional Encodings Still Learn Positional Information》（2022）。

# %%
import math

import matplotlib.pyplot as plt
import torch
from torch import nn

from utils.causal import causal_mask
from utils.gpt import GPTConfig, GPTModel
from utils.kv_cache import KVCache, generate
from utils.multihead import merge_heads, split_heads
from utils.self_attention import SelfAttentionV2

torch.set_num_threads(1)  # small tensors: one thread is fastest and steadiest

# %% [markdown]
# ## Attention alone is blind to order · 注意力本身看不到顺序
#
# Take notebook 02's self-attention (no mask) and five tokens, then feed the same tokens in a shuffled
# order. If attention knew positions, the outputs would change. They do not: they are the same rows,
# shuffled the same way. Mathematically, permuting the rows of $X$ permutes $Q$, $K$ and $V$, the
# score matrix is permuted on both sides, and the softmax does not care about the order of a row.
#
# 取笔记本 02 的自注意力（不带掩码）和五个词元，然后把同样的词元按打乱的顺序送进去。如果注意力知道位置，输出就会改变。但它们没有变：还是那些行，只是按同样的方式打乱了。从数学上看，打乱 $X$ 的行就打乱了 $Q$、$K$ 和 $V$ 的行，分数矩阵的行和列被同样地打乱，而 softmax 并不关心一行中元素的顺序。

# %%
torch.manual_seed(0)
attn = SelfAttentionV2(8, 8)
x = torch.randn(5, 8)
perm = torch.tensor([3, 0, 4, 1, 2])
with torch.no_grad():
    out, out_shuffled = attn(x), attn(x[perm])
print("order fed in:", perm.tolist())
print("outputs of the shuffled input == shuffled outputs:", torch.allclose(out_shuffled, out[perm], atol=1e-6))

# %% [markdown]
# A causal mask (notebook 04) gives a token a way to infer *how many* tokens precede it (through how
# its attention is spread over them; language models without any position encoding do learn positions
# this way, Haviv et al., 2022), but not which came where: shuffle everything before the last token
# and the last token's output does not move.
#
# 因果掩码（笔记本 04）让一个词元有办法推断它前面有 *多少* 个词元（通过它的注意力在这些词元上分布的方式；没有任何位置编码的语言模型确实会这样学到位置，Haviv 等，2022），但不知道谁在哪里：把最后一个词元之前的所有词元打乱，最后一个词元的输出纹丝不动。

# %%
with torch.no_grad():
    q, k, v = attn.W_query(x), attn.W_key(x), attn.W_value(x)
    def causal_out(order):
        scores = (q[order] @ k[order].T / math.sqrt(8)).masked_fill(causal_mask(5), float("-inf"))
        return torch.softmax(scores, dim=-1) @ v[order]
    last_same = torch.allclose(causal_out(torch.tensor([0, 1, 2, 3, 4]))[-1], causal_out(torch.tensor([2, 0, 3, 1, 4]))[-1], atol=1e-6)
print("last token's output unchanged when the 4 before it are shuffled:", last_same)

# %% [markdown]
# ## Learned positions (GPT-2) · 可学习的位置（GPT-2）
#
# GPT-2, and the `GPTModel` of notebook 07, add a learned vector to each token: row `t` of an
# `nn.Embedding(context_length, emb_dim)` for the token at position `t`. It is simple and works well,
# but the table has a row per position and no more: there is nothing to look up beyond
# `context_length`, and position 900 learns only from texts that long. With a KV cache the model asks
# for rows `seq_len, seq_len + 1, ...` (notebook 07).
#
# GPT-2 以及笔记本 07 的 `GPTModel` 给每个词元加上一个可学习的向量：位置 `t` 上的词元加 `nn.Embedding(context_length, emb_dim)` 的第 `t` 行。这种做法简单而且有效，但这张表每个位置一行，仅此而已：超过 `context_length` 就没有可查的行了，而且第 900 个位置只能从那么长的文本中学习。有 KV 缓存时，模型查的是第 `seq_len, seq_len + 1, ...` 行（笔记本 07）。

# %%
gpt2 = GPTConfig()
pos_table = nn.Embedding(gpt2.context_length, gpt2.emb_dim)
print(f"GPT-2 small's position table: {tuple(pos_table.weight.shape)}, {pos_table.weight.numel():,} parameters")
try:
    pos_table(torch.tensor([gpt2.context_length]))
except IndexError as e:
    print("position", gpt2.context_length, "->", type(e).__name__)

# %% [markdown]
# ## The sinusoidal encoding · 正弦位置编码
#
# *Attention Is All You Need* adds a fixed vector instead. Pair $i$ of its coordinates
# ($i = 0 \dots d/2 - 1$) is a point on a circle turning at frequency $w_i = \text{base}^{-2i/d}$
# (base = 10,000): $PE[t, 2i] = \sin(t\,w_i)$, $PE[t, 2i+1] = \cos(t\,w_i)$. Pair $i$ turns once
# every $2\pi / w_i$ positions, its wavelength: the wavelengths form a geometric progression from
# $2\pi$ towards $10000 \cdot 2\pi$ (Vaswani et al.), so the first pairs turn within a few positions
# and the last ones take tens of thousands, like the hands of a clock. The cell after the exercise
# prints them for $d = 64$.
#
# *Attention Is All You Need* 改为加上一个固定的向量。其第 $i$ 对坐标（$i = 0 \dots d/2 - 1$）是一个以频率 $w_i = \text{base}^{-2i/d}$（base = 10,000）转动的圆上的点：$PE[t, 2i] = \sin(t\,w_i)$，$PE[t, 2i+1] = \cos(t\,w_i)$。第 $i$ 对每 $2\pi / w_i$ 个位置转一圈，这就是它的波长：各对的波长构成一个从 $2\pi$ 到接近 $10000 \cdot 2\pi$ 的等比数列（Vaswani 等），所以前几对几个位置就转一圈，最后几对要几万个位置才转一圈，就像钟表的指针。练习之后的单元格会打印 $d = 64$ 时的这些波长。

# %% [markdown]
# ### Exercise 1 · `sinusoidal_positions` · 练习 1
#
# Return the `(num_positions, d_model)` table with `PE[t, 2i] = sin(t / base^(2i/d))` and
# `PE[t, 2i+1] = cos(t / base^(2i/d))` (sines in the even columns, cosines in the odd ones), in
# float32.
#
# 返回 `(num_positions, d_model)` 的表，其中 `PE[t, 2i] = sin(t / base^(2i/d))`，`PE[t, 2i+1] = cos(t / base^(2i/d))`（偶数列是正弦，奇数列是余弦），使用 float32。
#
# <!-- rules: sinusoidal_positions -->
#
# #### Rules that grading checks · 评分检查的规则 (`sinusoidal_positions`)
#
# - Not graded (the caller guarantees it): d_model is even (sin and cos come in pairs).
# - dtype: the result is float32.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：d_model 为偶数（sin 与 cos 成对出现）。
# - dtype：结果为 float32。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "sinusoidal_positions", "locked": false, "schema_version": 3, "solution": true, "task": false}
def sinusoidal_positions(num_positions, d_model, base=10000.0):
    ### BEGIN SOLUTION
    w = base ** (-torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)  # (d/2,)
    angles = torch.arange(num_positions, dtype=torch.float32)[:, None] * w  # (T, d/2)
    pe = torch.zeros(num_positions, d_model)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles)
    return pe
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_sinusoidal_positions", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close

pe = sinusoidal_positions(4, 4)
expect(tuple(pe.shape) == (4, 4), "sinusoidal_positions(4, 4) should have shape (4, 4).", "sinusoidal_positions(4, 4) 的形状应为 (4, 4)。")
expect_close(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]), "Position 0 should be sin(0) = 0 and cos(0) = 1 in every pair.",
             "位置 0 在每一对中应为 sin(0) = 0 和 cos(0) = 1。")
expect_close(pe[1, :2], torch.tensor([0.841471, 0.540302]), "Pair 0 turns at 1 radian per position: PE[1, 0:2] = (sin 1, cos 1).",
             "第 0 对每个位置转 1 弧度：PE[1, 0:2] = (sin 1, cos 1)。")
print("✓ sinusoidal_positions")

# %% nbgrader={"grade": true, "grade_id": "test_sinusoidal_positions_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb08
nb08.check_sinusoidal_positions(sinusoidal_positions)
### END HIDDEN TESTS

# %%
pe = sinusoidal_positions(100, 64)
wavelengths_pe = 2 * math.pi * 10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float64) / 64)  # 2 pi / w_i
print("wavelengths (positions per turn), pairs 0-4:", [round(w, 1) for w in wavelengths_pe[:5].tolist()],
      f"... pair 31: {wavelengths_pe[-1]:,.0f}; each pair's is {wavelengths_pe[1] / wavelengths_pe[0]:.3f}x the previous one's")
fig, ax = plt.subplots(figsize=(8, 3))
im = ax.imshow(pe.T, aspect="auto", cmap="RdBu")
ax.set_xlabel("position t"); ax.set_ylabel("coordinate (2i: sin, 2i+1: cos)")
ax.set_title("sinusoidal_positions(100, 64): fast pairs at the top, slow at the bottom")
fig.colorbar(im); plt.show()

# %% [markdown]
# **The rotation property.** Moving $k$ positions ahead turns every pair by the angle $k\,w_i$,
# whatever $t$ is: $(\sin((t+k)w), \cos((t+k)w))$ is $(\sin(tw), \cos(tw))$ rotated by $kw$ (the
# angle-addition formulas). So $PE(t + k) = R_k\,PE(t)$ with one block-diagonal matrix $R_k$ that does
# not depend on $t$: a fixed offset is a fixed linear map, which attention's projections can learn to
# use. We build $R_k$ and check it on every position.
#
# **旋转性质。** 向前移动 $k$ 个位置，就是把每一对都转过角度 $k\,w_i$，与 $t$ 无关：$(\sin((t+k)w), \cos((t+k)w))$ 是 $(\sin(tw), \cos(tw))$ 转过 $kw$ 的结果（和角公式）。所以 $PE(t + k) = R_k\,PE(t)$，其中 $R_k$ 是一个不依赖于 $t$ 的分块对角矩阵：固定的偏移就是固定的线性变换，注意力的投影可以学会利用它。我们构造 $R_k$，并在每个位置上检验。

# %%
def shift_matrix(k, d_model, base=10000.0):
    """R_k: block i turns (sin, cos) of pair i by k * w_i."""
    w = base ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i, a in enumerate(k * w):
        c, s = math.cos(a), math.sin(a)
        R[2 * i:2 * i + 2, 2 * i:2 * i + 2] = torch.tensor([[c, s], [-s, c]])  # sin' = sin c + cos s, cos' = cos c - sin s
    return R


k_shift = 5
R = shift_matrix(k_shift, 64).float()
predicted = pe[:-k_shift] @ R.T  # R_k applied to every PE(t)
err = (predicted - pe[k_shift:]).abs().max().item()
print(f"max |R_{k_shift} PE(t) - PE(t + {k_shift})| over t = 0..{len(pe) - k_shift - 1}: below 1e-4: {err < 1e-4}")
fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
for ax, i in zip(axes, (0, 3)):
    ax.plot(pe[:40, 2 * i + 1], pe[:40, 2 * i], ".-", alpha=0.5)
    for t in (2, 10):
        ax.annotate("", xy=(pe[t + k_shift, 2 * i + 1], pe[t + k_shift, 2 * i]), xytext=(pe[t, 2 * i + 1], pe[t, 2 * i]),
                    arrowprops=dict(arrowstyle="->", color="red"))
    ax.set_aspect("equal"); ax.set_xlabel(f"PE[t, {2 * i + 1}] (cos)"); ax.set_ylabel(f"PE[t, {2 * i}] (sin)")
    ax.set_title(f"pair {i}: t -> t+{k_shift} is the same turn (red)")
plt.tight_layout(); plt.show()

# %% [markdown]
# ## RoPE: rotate the queries and keys · RoPE：旋转查询和键
#
# The sinusoidal vector is *added* to the token, and the model has to learn to untangle content from
# position. RoPE puts the rotation where it is used: in each attention head, pair $i$ of the query at
# position $m$ is rotated by the angle $m\,w_i$, and pair $i$ of the key at position $n$ by $n\,w_i$,
# with $w_i = \theta^{-2i/d}$ ($d$ = head_dim, $\theta$ = 10,000). A rotation by $a$ followed by the
# dot product with a vector rotated by $b$ is the dot product after a rotation by $a - b$ alone, so
#
# 正弦向量是 *加* 到词元上的，模型必须学会把内容和位置区分开。RoPE 把旋转放在用到它的地方：在每个注意力头中，位置 $m$ 的查询的第 $i$ 对被旋转 $m\,w_i$ 角度，位置 $n$ 的键的第 $i$ 对被旋转 $n\,w_i$，其中 $w_i = \theta^{-2i/d}$（$d$ = head_dim，$\theta$ = 10,000）。一个向量旋转 $a$、另一个旋转 $b$ 之后做点积，等于只旋转 $a - b$ 之后的点积，所以
#
# $$\langle R_m q, R_n k \rangle = \langle R_{m-n}\, q, k \rangle:$$
#
# the score depends on the content of $q$ and $k$ and on the **offset** $m - n$, never on $m$ and $n$
# themselves. The values are not rotated: they carry what is passed on, not where it came from.
#
# 分数取决于 $q$ 和 $k$ 的内容以及 **偏移** $m - n$，而与 $m$ 和 $n$ 本身无关。值不旋转：它们携带的是要传递的内容，而不是来源的位置。

# %% [markdown]
# ### Exercise 2 · `rope_inverse_frequencies` · 练习 2
#
# Return the `head_dim // 2` frequencies $w_i = \theta^{-2i/\text{head\_dim}}$, $i = 0 \dots$
# head_dim/2 − 1, as float32.
#
# 返回 `head_dim // 2` 个频率 $w_i = \theta^{-2i/\text{head\_dim}}$，$i = 0 \dots$ head_dim/2 − 1，使用 float32。
#
# <!-- rules: rope_inverse_frequencies -->
#
# #### Rules that grading checks · 评分检查的规则 (`rope_inverse_frequencies`)
#
# - Not graded (the caller guarantees it): head_dim is even.
# - dtype: the result is float32.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：head_dim 为偶数。
# - dtype：结果为 float32。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "rope_inverse_frequencies", "locked": false, "schema_version": 3, "solution": true, "task": false}
def rope_inverse_frequencies(head_dim, theta=10000.0):
    ### BEGIN SOLUTION
    return theta ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_rope_inverse_frequencies", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb08

with nb08.as_graded(rope_inverse_frequencies):
    expect_close(rope_inverse_frequencies(4), torch.tensor([1.0, 0.01]), "For head_dim 4: w = (10000^0, 10000^(-2/4)) = (1, 0.01).",
                 "head_dim 为 4 时：w = (10000^0, 10000^(-2/4)) = (1, 0.01)。")
    print("✓ rope_inverse_frequencies")

# %% nbgrader={"grade": true, "grade_id": "test_rope_inverse_frequencies_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb08
nb08.check_rope_inverse_frequencies(rope_inverse_frequencies)
### END HIDDEN TESTS

# %% [markdown]
# ### Exercise 3 · `apply_rope` · 练习 3
#
# `x` is `(..., T, head_dim)` and `positions` a LongTensor of the `T` positions. Compute the angles
# `positions[:, None] * rope_inverse_frequencies(head_dim, theta)` of shape `(T, head_dim/2)` and rotate
# each pair $(x_1, x_2) \mapsto (x_1\cos a - x_2\sin a,\; x_1\sin a + x_2\cos a)$. Which coordinates
# form pair $i$ depends on the layout: by default **half-split**, $(i,\ i + \text{head\_dim}/2)$ (Hugging
# Face, GPT-NeoX); with `interleaved=True`, **adjacent** $(2i,\ 2i + 1)$ (the RoPE paper, Meta's Llama
# code, DeepSeek-V3). Return a new tensor of the same shape and dtype, and leave `x` unchanged; `x` may
# be a non-contiguous view (heads split by a transpose are).
#
# `x` 的形状为 `(..., T, head_dim)`，`positions` 是这 `T` 个位置组成的 LongTensor。计算形状为 `(T, head_dim/2)` 的角度 `positions[:, None] * rope_inverse_frequencies(head_dim, theta)`，并旋转每一对 $(x_1, x_2) \mapsto (x_1\cos a - x_2\sin a,\; x_1\sin a + x_2\cos a)$。哪些坐标组成第 $i$ 对取决于布局：默认是 **前后两半**，$(i,\ i + \text{head\_dim}/2)$（Hugging Face、GPT-NeoX）；`interleaved=True` 时是 **相邻**，$(2i,\ 2i + 1)$（RoPE 论文、Meta 的 Llama 代码、DeepSeek-V3）。返回一个形状和 dtype 都相同的新张量，并保持 `x` 不变；`x` 可能是非连续的视图（经 transpose 拆分出的头就是这样）。
#
# <!-- rules: apply_rope -->
#
# #### Rules that grading checks · 评分检查的规则 (`apply_rope`)
#
# - Not graded (the caller guarantees it): head_dim (the last dimension of x) is even.
# - Not graded (the caller guarantees it): `positions` holds one position per row of x (T of them).
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Positions far from 0 (thousands) are graded at the rounding of a float32 angle there.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：head_dim（x 的最后一维）为偶数。
# - 不评分（由调用者保证）：`positions` 为 x 的每一行给出一个位置（共 T 个）。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 远离 0 的位置（数千）按该处 float32 角度的舍入误差评分。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "apply_rope", "locked": false, "schema_version": 3, "solution": true, "task": false}
def apply_rope(x, positions, theta=10000.0, interleaved=False):
    ### BEGIN SOLUTION
    hd = x.shape[-1]
    angles = positions.float()[:, None] * rope_inverse_frequencies(hd, theta).to(positions.device)  # (T, hd/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_apply_rope", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import math
import torch
from autograder.checks import expect_close

from autograder.checks import nb08

with nb08.as_graded(apply_rope):
    one = torch.tensor([[1.0, 0.0, 0.0, 0.0]])  # (T=1, head_dim=4)
    expect_close(apply_rope(one, torch.tensor([1])), torch.tensor([[math.cos(1), 0.0, math.sin(1), 0.0]]),
                 "Half-split: coordinate 0 pairs with coordinate 2, and pair 0 turns by 1 radian at position 1.",
                 "前后两半式：第 0 个坐标与第 2 个坐标配对，第 0 对在位置 1 转 1 弧度。")
    expect_close(apply_rope(one, torch.tensor([1]), interleaved=True), torch.tensor([[math.cos(1), math.sin(1), 0.0, 0.0]]),
                 "Interleaved: coordinate 0 pairs with coordinate 1.", "相邻配对式：第 0 个坐标与第 1 个坐标配对。")
    print("✓ apply_rope")

# %% nbgrader={"grade": true, "grade_id": "test_apply_rope_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb08
nb08.check_apply_rope(apply_rope)
### END HIDDEN TESTS

# %% [markdown]
# Now the property, checked: one query and one key, placed at many positions $(m, n)$; the score of
# $(m, n)$ equals that of $(m + s, n + s)$ for every shift $s$, in both layouts.
#
# 现在来检验这个性质：一个查询和一个键，放在许多位置 $(m, n)$ 上；对任意平移 $s$，$(m, n)$ 的分数都等于 $(m + s, n + s)$ 的分数，两种布局都是如此。

# %%
torch.manual_seed(1)
q1, k1 = torch.randn(64), torch.randn(64)


def score(m, n, interleaved=False, theta=10000.0):
    qm = apply_rope(q1[None], torch.tensor([m]), theta, interleaved)[0]
    kn = apply_rope(k1[None], torch.tensor([n]), theta, interleaved)[0]
    return (qm @ kn).item()


for interleaved in (False, True):
    worst = max(abs(score(m, n, interleaved) - score(m + s, n + s, interleaved))
                for m, n in [(3, 1), (10, 10), (2, 40)] for s in (1, 17, 500))
    print(f"interleaved={interleaved}: score(m, n) == score(m + s, n + s) within 1e-3: {worst < 1e-3}")
print(f"score(5, 2) = {score(5, 2):.3f}, score(105, 102) = {score(105, 102):.3f}, score(5, 5) = {score(5, 5):.3f}")

# %% [markdown]
# **Decay with distance, for a query and key that agree.** RoFormer (section 3.4.3) shows that RoPE
# gives a long-term decay: for a query and key that agree in every coordinate (here all ones), the
# score shrinks, with oscillations, as the offset grows, because the pairs turn at different speeds
# and fall out of step. The same holds on average for a random query and a key *equal* to it. It does
# not hold for a random query and an unrelated random key: their expected score is 0 at every
# distance, and its spread does not shrink either. RoPE does not make nearby tokens win by itself;
# it makes a match between query and key count less the farther apart they are. The cell computes
# all three, the random ones averaged over 200 draws.
#
# **随距离衰减：针对一致的查询和键。** RoFormer（第 3.4.3 节）指出 RoPE 带来一种长程衰减：对一个每个坐标都一致的查询和键（这里全为 1），随着偏移增大，分数会一边振荡一边缩小，因为各对以不同的速度转动，逐渐不再同步。对一个随机查询和一个 *等于* 它的键，平均而言也是如此。但对一个随机查询和一个与之无关的随机键，这并不成立：它们的分数在任何距离上的期望都是 0，其离散程度也不会缩小。RoPE 本身并不会让近处的词元胜出；它让查询与键之间的匹配随距离增大而分量变轻。下面的单元格计算这三种情况，随机的情况对 200 次抽样取平均。

# %%
offsets = torch.arange(0, 2000, 4)  # every 4th distance keeps the random draws small
g = torch.Generator().manual_seed(5)
q_rand, k_rand = torch.randn(200, 128, generator=g), torch.randn(200, 128, generator=g)


def scores_by_offset(q, k):
    """(N, 128) queries at position 0 against their keys rotated to each offset: (N, offsets)."""
    keys = apply_rope(k[:, None, :].expand(len(q), len(offsets), 128), offsets)  # (N, offsets, 128)
    return (keys @ q[:, :, None]).squeeze(-1)


ones = torch.ones(1, 128)
independent = scores_by_offset(q_rand, k_rand)
curves = {"q = k = all ones": scores_by_offset(ones, ones)[0],
          "random q, k = q (mean)": scores_by_offset(q_rand, q_rand).mean(0),
          "random q, independent k (mean)": independent.mean(0)}
fig, ax = plt.subplots(figsize=(8, 3))
for label, curve in curves.items():
    ax.plot(offsets, curve / 128, label=label, lw=1)
ax.set_xlabel("relative distance m - n (tokens)"); ax.set_ylabel("score / 128")
ax.set_title("RoPE, head_dim 128, theta 10,000"); ax.legend(); plt.show()
at = [0, 3, 25, 250]  # distances 0, 12, 100, 1000
for label, curve in curves.items():
    print(f"{label:32} score / 128 at distance 0, 12, 100, 1000: {[round(curve[i].item() / 128, 3) for i in at]}")
spread = independent.std(0) / 128
print(f"random q, independent k: spread (std / 128) at distance 0 and 1000: {spread[0]:.3f}, {spread[250]:.3f}")

# %% [markdown]
# ## Two layouts, one rotation · 两种布局，同一种旋转
#
# The two layouts rotate different pairs of coordinates, so they give different results on the same
# vector. But a head's coordinates are just the output rows of `W_query` and `W_key`, in an order the
# model learned. Reorder the rows of both, within each head, so that row $2i$ becomes row $i$ and row
# $2i+1$ becomes row $i + \text{hd}/2$, and the half-split layout rotates exactly the pairs the
# interleaved layout rotated. The scores are then identical. This is why Hugging Face's converter for
# Meta's Llama checkpoints permutes the query and key weights ("permute for sliced rotary"), and why
# loading DeepSeek-V3 weights into a half-split RoPE needs the same care.
#
# 两种布局旋转的是不同的坐标对，所以对同一个向量给出不同的结果。但一个头的坐标只不过是 `W_query` 和 `W_key` 的输出行，其顺序是模型学出来的。在每个头内部把两者的行重新排列，使第 $2i$ 行变成第 $i$ 行、第 $2i+1$ 行变成第 $i + \text{hd}/2$ 行，前后两半式布局旋转的就恰好是相邻配对式布局旋转过的那些对。这样分数就完全相同。这就是 Hugging Face 转换 Meta 的 Llama 检查点时要重排查询和键的权重（"permute for sliced rotary"）的原因，也是把 DeepSeek-V3 的权重加载到前后两半式 RoPE 中时需要同样小心的原因。

# %% [markdown]
# ### Exercise 4 · `interleaved_to_half_split` · 练习 4
#
# `weight` is a `(d_out, d_in)` projection weight (as `nn.Linear` stores it) whose `d_out` rows are
# `num_heads` heads of `head_dim` rows. Return it with the rows of each head reordered: first the
# head's rows `0, 2, 4, ...`, then its rows `1, 3, 5, ...`. It must also work on a 1-D bias of length
# `d_out`.
#
# `weight` 是形状为 `(d_out, d_in)` 的投影权重（`nn.Linear` 存储的方式），它的 `d_out` 行是 `num_heads` 个头，每个头 `head_dim` 行。返回把每个头内部的行重新排列后的权重：先放该头的第 `0, 2, 4, ...` 行，再放第 `1, 3, 5, ...` 行。它对长度为 `d_out` 的一维偏置也必须适用。
#
# <!-- rules: interleaved_to_half_split -->
#
# #### Rules that grading checks · 评分检查的规则 (`interleaved_to_half_split`)
#
# - Raises an error (any exception) when the `d_out` rows do not split into `num_heads` heads of even width.
# - Graded in float32, float64 and bfloat16: the output has the input's dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - `d_out` 行不能分成 `num_heads` 个宽度为偶数的头时抛出错误（任何异常都可以）。
# - 在 float32、float64、bfloat16 下评分：输出与输入的 dtype 相同。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "interleaved_to_half_split", "locked": false, "schema_version": 3, "solution": true, "task": false}
def interleaved_to_half_split(weight, num_heads):
    ### BEGIN SOLUTION
    d_out, rest = weight.shape[0], weight.shape[1:]
    hd = d_out // num_heads
    # (H, hd/2, 2, ...) -> (H, 2, hd/2, ...): the evens of each head, then its odds
    return weight.reshape(num_heads, hd // 2, 2, *rest).transpose(1, 2).reshape(d_out, *rest)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_interleaved_to_half_split", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

from autograder.checks import nb08

with nb08.as_graded(interleaved_to_half_split):
    rows = interleaved_to_half_split(torch.arange(8), 2).tolist()
    expect(rows == [0, 2, 1, 3, 4, 6, 5, 7], "With 2 heads of 4 rows, each head's rows 0, 2 come before its rows 1, 3.",
           "2 个头、每个头 4 行时，每个头的第 0、2 行排在第 1、3 行之前。")
    print("✓ interleaved_to_half_split")

# %% nbgrader={"grade": true, "grade_id": "test_interleaved_to_half_split_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb08
nb08.check_interleaved_to_half_split(interleaved_to_half_split)
### END HIDDEN TESTS

# %%
torch.manual_seed(2)
H, hd, d_in, T = 4, 16, 24, 10
W_q, W_k = torch.randn(H * hd, d_in), torch.randn(H * hd, d_in)
tokens, pos = torch.randn(T, d_in), torch.arange(T)
heads = lambda y: y.view(T, H, hd).transpose(0, 1)  # (H, T, hd)


def scores(Wq, Wk, interleaved):
    q = apply_rope(heads(tokens @ Wq.T), pos, interleaved=interleaved)
    k = apply_rope(heads(tokens @ Wk.T), pos, interleaved=interleaved)
    return q @ k.transpose(-2, -1)


meta = scores(W_q, W_k, interleaved=True)  # Meta / DeepSeek layout, original weights
print("half-split on the same weights equals interleaved:", torch.allclose(scores(W_q, W_k, False), meta, atol=1e-3))
hf = scores(interleaved_to_half_split(W_q, H), interleaved_to_half_split(W_k, H), False)
print("half-split on the permuted weights equals interleaved:", torch.allclose(hf, meta, atol=1e-3))

# %% [markdown]
# ## theta: how many pairs turn within the context · theta：上下文中有多少对转过一圈
#
# Pair $i$ completes a turn every $2\pi / w_i = 2\pi\,\theta^{2i/d}$ tokens: its **wavelength**. With
# $\theta$ = 10,000 (RoFormer, Llama 2, DeepSeek-V3's base) and head_dim 128, the slowest pair's
# wavelength is already far longer than Llama 3's 8,192-token context (the cell prints both), so
# distinct angles for far-apart positions are not what a larger $\theta$ buys. What it changes is
# how many pairs turn less than once over the context: those pairs never come back to an angle they
# had, and they change slowly enough to tell far positions apart. Llama 3 raised $\theta$ to
# 500,000 for **long context**: its report says this "enables us to better support longer
# contexts", citing Xiong et al. (2023), who found a larger base effective for context lengths up to
# 32,768; Llama 3.1 was then extended to 128K tokens. The cell counts the pairs at both values of
# $\theta$ for an 8K and a 128K context.
#
# 第 $i$ 对每 $2\pi / w_i = 2\pi\,\theta^{2i/d}$ 个词元转一圈：这就是它的 **波长**。当 $\theta$ = 10,000（RoFormer、Llama 2、DeepSeek-V3 的基础值）且 head_dim 为 128 时，最慢一对的波长已经远远长于 Llama 3 的 8,192 个词元的上下文（单元格打印了两者），所以更大的 $\theta$ 换来的并不是让相距很远的位置得到不同的角度。它改变的是在整个上下文中转不满一圈的对有多少：这些对永远不会回到曾经有过的角度，而且变化得足够慢，能把远处的位置区分开。Llama 3 把 $\theta$ 提高到 500,000 是为了 **长上下文**：它的技术报告说这"使我们能更好地支持更长的上下文"，并引用了 Xiong 等（2023），他们发现更大的基数对长达 32,768 的上下文有效；Llama 3.1 随后被扩展到 128K 个词元。单元格在两种 $\theta$ 下、针对 8K 和 128K 的上下文统计这些对的个数。

# %%
fig, ax = plt.subplots(figsize=(8, 3.2))
for theta in (10_000.0, 500_000.0):
    wavelengths = 2 * math.pi / rope_inverse_frequencies(128, theta).double()
    ax.semilogy(wavelengths, label=f"theta = {theta:,.0f}")
    slow = {context: int((wavelengths > context).sum()) for context in (8192, 131_072)}
    print(f"theta {theta:>9,.0f}: wavelengths from {wavelengths[0]:.2f} to {wavelengths[-1]:,.0f} tokens; "
          f"pairs (of 64) turning less than once over 8,192 tokens: {slow[8192]}, over 131,072: {slow[131_072]}")
ax.axhline(8192, color="gray", ls="--", label="8,192 tokens (Llama 3 context)")
ax.axhline(131_072, color="gray", ls=":", label="131,072 tokens (Llama 3.1 context)")
ax.set_xlabel("pair i"); ax.set_ylabel("wavelength (tokens, log scale)"); ax.legend()
plt.show()

# %% [markdown]
# The counts printed: at $\theta$ = 10,000, 14 of the 64 pairs turn less than once over 8,192 tokens
# and none over 131,072; at $\theta$ = 500,000, 29 and 15. A model trained at 8K with $\theta$ =
# 10,000 and then stretched to 128K would have every pair wrap around at least once over its
# context; with 500,000, 15 pairs still turn less than once from one end of it to the other.
#
# 打印出的个数：$\theta$ = 10,000 时，64 对中有 14 对在 8,192 个词元中转不满一圈，而在 131,072 个词元中一对也没有；$\theta$ = 500,000 时，分别是 29 对和 15 对。一个用 $\theta$ = 10,000 在 8K 上训练、再被拉长到 128K 的模型，其每一对在整个上下文中都至少转过一圈；用 500,000 时，仍有 15 对从上下文的一端到另一端转不满一圈。

# %% [markdown]
# ## RoPE inside attention, with the KV cache · 注意力中的 RoPE，以及 KV 缓存
#
# In a multi-head layer, RoPE is applied **per head**, after splitting heads: the tensors are
# `(B, H, T, head_dim)` and the frequencies are over `head_dim`, not over `d_out`. With the KV cache of
# notebook 07, the new tokens are not at positions `0, 1, ...`: they sit at `kv_cache.seq_len`,
# `seq_len + 1`, ... (read before the update). Keys are rotated before they enter the cache, once, at
# their own position, and never again: since position enters a score only through the offset, old
# keys stay valid however long the text grows.
#
# 在多头层中，RoPE 是在拆分头之后 **按头** 应用的：张量形状为 `(B, H, T, head_dim)`，频率按 `head_dim` 计算，而不是按 `d_out`。用笔记本 07 的 KV 缓存时，新的词元不在位置 `0, 1, ...`：它们位于 `kv_cache.seq_len`、`seq_len + 1`、……（在更新之前读取）。键在进入缓存之前按各自的位置旋转一次，以后不再旋转：因为位置只通过偏移进入分数，所以无论文本变得多长，旧的键都依然有效。

# %% [markdown]
# ### Exercise 5 · `RoPEMultiHeadAttention` · 练习 5
#
# Notebook 07's `CachedMultiHeadAttention` (same layers: `W_query`, `W_key`, `W_value` with
# `bias=qkv_bias`, `out_proj` with a bias) plus RoPE: in `forward(x, kv_cache=None)`, positions are
# `start, ..., start + T - 1` with `start = kv_cache.seq_len` (0 without a cache); after splitting
# heads, apply your `apply_rope` with `self.theta` and `self.interleaved` to the queries and keys (not
# the values); then update the cache and attend with the bottom-right causal mask. Keep `self.num_heads`
# and `self.head_dim`: notebook 07's GPT reads them to size each layer's cache. Keep nothing in the
# module between calls: the cache holds the past. The attention itself may be
# `F.scaled_dot_product_attention` with a bottom-right mask; what this exercise teaches is the rotation.
#
# 笔记本 07 的 `CachedMultiHeadAttention`（层相同：`W_query`、`W_key`、`W_value` 使用 `bias=qkv_bias`，`out_proj` 带偏置）加上 RoPE：在 `forward(x, kv_cache=None)` 中，位置是 `start, ..., start + T - 1`，其中 `start = kv_cache.seq_len`（没有缓存时为 0）；拆分头之后，用 `self.theta` 和 `self.interleaved` 对查询和键（不包括值）应用你的 `apply_rope`；然后更新缓存，并用右下对齐的因果掩码做注意力。保留属性 `self.num_heads` 和 `self.head_dim`：笔记本 07 的 GPT 读取它们来确定每一层缓存的大小。不要在调用之间把任何东西保存在模块里：过去的内容由缓存保存。注意力本身可以用带右下对齐掩码的 `F.scaled_dot_product_attention`；本练习要教的是旋转。
#
# <!-- rules: RoPEMultiHeadAttention -->
#
# #### Rules that grading checks · 评分检查的规则 (`RoPEMultiHeadAttention`)
#
# - Not graded (the caller guarantees it): `d_out` splits into `num_heads` heads of even width.
# - Not graded (the caller guarantees it): the cached and the new tokens together fit `context_length`.
# - Graded in float32 and float64: the layer moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - `num_heads` and `head_dim` are attributes (notebook 07's GPT reads them); the module keeps nothing between calls.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：`d_out` 能分成 `num_heads` 个宽度为偶数的头。
# - 不评分（由调用者保证）：已缓存的与新的词元合起来不超过 `context_length`。
# - 在 float32、float64 下评分：用 `.to(dtype)` 转换后的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - `num_heads` 与 `head_dim` 是属性（笔记本 07 的 GPT 读取它们）；模块在调用之间不保存任何东西。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "RoPEMultiHeadAttention", "locked": false, "schema_version": 3, "solution": true, "task": false}
class RoPEMultiHeadAttention(nn.Module):
    def __init__(self, d_in, d_out, context_length, num_heads, theta=10000.0, interleaved=False, qkv_bias=False):
        super().__init__()
        ### BEGIN SOLUTION
        if d_out % num_heads:
            raise ValueError(f"d_out={d_out} must be divisible by num_heads={num_heads}")
        self.num_heads, self.head_dim = num_heads, d_out // num_heads
        self.theta, self.interleaved = theta, interleaved
        self.W_query = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_key = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.W_value = nn.Linear(d_in, d_out, bias=qkv_bias)
        self.out_proj = nn.Linear(d_out, d_out)
        ### END SOLUTION

    def forward(self, x, kv_cache=None):  # (B, T, d_in) -> (B, T, d_out)
        ### BEGIN SOLUTION
        T = x.shape[1]
        start = 0 if kv_cache is None else kv_cache.seq_len  # before the update
        positions = torch.arange(start, start + T, device=x.device)
        q = apply_rope(split_heads(self.W_query(x), self.num_heads), positions, self.theta, self.interleaved)
        k = apply_rope(split_heads(self.W_key(x), self.num_heads), positions, self.theta, self.interleaved)
        v = split_heads(self.W_value(x), self.num_heads)  # values are not rotated
        if kv_cache is not None:
            k, v = kv_cache.update(k, v)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        scores = scores.masked_fill(causal_mask(T, k.shape[2], device=x.device), float("-inf"))
        return self.out_proj(merge_heads(torch.softmax(scores, dim=-1) @ v))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_RoPEMultiHeadAttention", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close
from utils.kv_cache import KVCache as ReferenceCache

from autograder.checks import nb08

with nb08.as_graded(RoPEMultiHeadAttention):
    torch.manual_seed(0)
    layer = RoPEMultiHeadAttention(6, 8, 10, 2).eval()
    x = torch.randn(1, 6, 6)
    with torch.no_grad():
        full = layer(x)
        cache = ReferenceCache(1, 10, 2, 4)
        steps = torch.cat([layer(x[:, :4], kv_cache=cache), layer(x[:, 4:5], kv_cache=cache), layer(x[:, 5:], kv_cache=cache)], dim=1)
    expect(tuple(full.shape) == (1, 6, 8), "RoPEMultiHeadAttention should map (B, T, d_in) to (B, T, d_out).",
           "RoPEMultiHeadAttention 应把 (B, T, d_in) 映射为 (B, T, d_out)。")
    expect_close(steps, full, "With a cache, prefill 4 tokens then decode 2: the outputs should equal one pass over all 6 (positions continue from the cache).",
                 "有缓存时，先预填充 4 个词元再解码 2 个：输出应与对全部 6 个词元做一次计算的结果相同（位置从缓存的长度继续）。")
    print("✓ RoPEMultiHeadAttention")

# %% nbgrader={"grade": true, "grade_id": "test_RoPEMultiHeadAttention_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb08
nb08.check_RoPEMultiHeadAttention(RoPEMultiHeadAttention)
### END HIDDEN TESTS

# %% [markdown]
# Finally, your layer in notebook 07's GPT, with the learned position table switched off
# (`learned_positions=False`): RoPE is now the only source of position. Greedy generation gives the
# same tokens with and without the cache. That tests that each new token's position is right
# *relative to the cached keys*, not that it is right in absolute terms: RoPE cannot see an offset
# shared by all positions (the scores above are equal at $(m, n)$ and $(m + s, n + s)$), so the test
# would pass even if every position, cached and new, were off by the same amount.
#
# 最后，把你的层放进笔记本 07 的 GPT，并关掉可学习的位置表（`learned_positions=False`）：RoPE 现在是位置信息的唯一来源。贪心生成在有缓存和没有缓存时给出相同的词元。这检验的是每个新词元的位置 *相对于已缓存的键* 是对的，而不是它的绝对位置是对的：RoPE 看不出所有位置共有的偏移（上面的分数在 $(m, n)$ 和 $(m + s, n + s)$ 处相等），所以即使每个位置（已缓存的和新的）都偏了同样的量，这个检验也会通过。

# %%
cfg = GPTConfig(vocab_size=500, context_length=64, emb_dim=64, n_heads=4, n_layers=2, learned_positions=False)
torch.manual_seed(3)
rope_gpt = GPTModel(cfg, attention=lambda c: RoPEMultiHeadAttention(c.emb_dim, c.emb_dim, c.context_length, c.n_heads)).eval()
print("position table:", rope_gpt.pos_emb)
start = torch.randint(0, cfg.vocab_size, (2, 5), generator=torch.Generator().manual_seed(4))
with_cache = generate(rope_gpt, start, 30, use_cache=True)
without = generate(rope_gpt, start, 30, use_cache=False)
print("same 30 tokens with and without the cache:", torch.equal(with_cache, without))

# %% [markdown]
# RoPE in this form is what Llama uses. DeepSeek-V3 uses it too, but only on a small slice of each
# query and key (64 of 192 coordinates), with one rotated key shared by all heads. The reason is not
# only that the rest of the key can be compressed into a short cached latent, but that it can be
# *absorbed*: a key rebuilt from the latent by a fixed matrix lets that matrix be folded into the
# query once, so decoding never rebuilds the keys. A rotation that depends on the key's position,
# between the query and that matrix, would forbid the folding. That is notebook 09, multi-head latent
# attention.
#
# 这种形式的 RoPE 就是 Llama 所用的。DeepSeek-V3 也使用它，但只用在每个查询和键的一小部分上（192 个坐标中的 64 个），并且所有头共享同一个旋转后的键。原因不只是键的其余部分可以被压缩成一个较短的、被缓存的潜在向量，更在于它可以被 *吸收*：由潜在向量经一个固定矩阵重建的键，允许把这个矩阵一次性折叠进查询，于是解码时永远不必重建键。如果在查询和这个矩阵之间夹着一个取决于键位置的旋转，折叠就不可能了。这就是笔记本 09 的多头潜在注意力。
