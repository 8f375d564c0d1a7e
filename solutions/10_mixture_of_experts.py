# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 10 · Mixture of experts (DeepSeek) · 混合专家（DeepSeek）
#
# After attention, every transformer block runs a feed-forward network on each token, and in large
# models that is where most parameters live. A **mixture of experts (MoE)** replaces the one network
# with many smaller ones, the *experts*, and a *router* that sends each token to a few of them. The
# model holds the parameters of all experts but each token uses only a few. This notebook builds the
# pieces, watches a router collapse onto a few experts and the two cures (the Switch Transformer's
# auxiliary loss and DeepSeek-V3's bias), and ends by recomputing DeepSeek-V3's 671B parameters
# from its config, and its active count per token, 2% above the published 36.7B. Names and layouts follow DeepSeek-V3's inference code.
#
# 在注意力之后，每个 Transformer 块都对每个词元运行一个前馈网络，而大模型的大部分参数就在这里。**混合专家（MoE）** 把这一个网络换成许多较小的网络，即 *专家*，再加上一个 *路由器*，把每个词元送到其中少数几个专家。模型持有所有专家的参数，但每个词元只用到其中几个。本笔记本构建这些部件，观察路由器如何坍缩到少数专家上，以及两种解决办法（Switch Transformer 的辅助损失和 DeepSeek-V3 的偏置），最后根据 DeepSeek-V3 的配置重新算出它的 6710 亿参数，以及每个词元激活的参数量，比公开的 367 亿多 2%。名称和布局遵循 DeepSeek-V3 的推理代码。

# %%
import os

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

GRADING = bool(os.getenv("NBGRADER_EXECUTION"))  # grading runs the demos smaller, or skips the one that trains
torch.set_num_threads(1)  # every tensor here is small: one thread beats waiting for a second, busy core

# DeepSeek-V3, inference/configs/config_671B.json
V3 = dict(vocab_size=129280, dim=7168, inter_dim=18432, moe_inter_dim=2048, n_layers=61, n_dense_layers=3,
          n_heads=128, n_routed_experts=256, n_shared_experts=1, n_activated_experts=8, n_expert_groups=8,
          n_limited_groups=4, route_scale=2.5, score_func="sigmoid", q_lora_rank=1536, kv_lora_rank=512,
          qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)

# %% [markdown]
# ## The expert: a SwiGLU feed-forward network · 专家：SwiGLU 前馈网络
#
# DeepSeek's feed-forward networks, dense or expert, are SwiGLU: a *gate* projection `w1` passed
# through SiLU ($x \cdot \sigma(x)$) multiplies an *up* projection `w3` element by element, and a
# *down* projection `w2` maps the product back: $w_2(\mathrm{silu}(w_1 x) \odot w_3 x)$. Three matrices
# of `dim x inter_dim`, no biases.
#
# DeepSeek 的前馈网络，无论是稠密的还是专家，都是 SwiGLU：*门控* 投影 `w1` 经过 SiLU（$x \cdot \sigma(x)$）后，与 *上* 投影 `w3` 逐元素相乘，再由 *下* 投影 `w2` 把乘积映射回来：$w_2(\mathrm{silu}(w_1 x) \odot w_3 x)$。三个 `dim x inter_dim` 矩阵，没有偏置。

# %% [markdown]
# ### Exercise 1 · `Expert` · 练习 1
#
# `nn.Linear` layers `w1` (`dim -> inter_dim`), `w2` (`inter_dim -> dim`), `w3` (`dim -> inter_dim`),
# all without bias; `forward` for any leading dimensions.
#
# `nn.Linear` 层 `w1`（`dim -> inter_dim`）、`w2`（`inter_dim -> dim`）、`w3`（`dim -> inter_dim`），都不带偏置；`forward` 适用于任意前导维度。
#
# <!-- rules: Expert -->
#
# #### Rules that grading checks · 评分检查的规则 (`Expert`)
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

# %% nbgrader={"grade": false, "grade_id": "Expert", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Expert(nn.Module):
    def __init__(self, dim, inter_dim):
        super().__init__()
        ### BEGIN SOLUTION
        self.w1 = nn.Linear(dim, inter_dim, bias=False)
        self.w2 = nn.Linear(inter_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, inter_dim, bias=False)
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        return self.w2(F.silu(self.w1(x)) * self.w3(x))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_Expert", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

expert = Expert(6, 10)
out = expert(torch.randn(2, 3, 6))
expect(out.shape == (2, 3, 6), "An expert maps (..., dim) back to (..., dim).", "专家把 (..., dim) 映射回 (..., dim)。",
       f"shape {tuple(out.shape)}")
expect(sum(p.numel() for p in expert.parameters()) == 3 * 6 * 10, "Three dim x inter_dim matrices and no biases.",
       "三个 dim x inter_dim 矩阵，没有偏置。")
print("✓ Expert")

# %% nbgrader={"grade": true, "grade_id": "test_Expert_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb10
nb10.check_Expert(Expert)
### END HIDDEN TESTS

# %% [markdown]
# ## Held and used: dense against sparse · 持有与使用：稠密与稀疏
#
# One dense network of width `inter_dim` against 16 experts of a quarter of that width, each token
# sent to 2 of them. The experts together hold four times the parameters of the dense network, but a
# token passes through only two of them: half the dense network's parameters are used per token.
#
# 一个宽度为 `inter_dim` 的稠密网络，对比 16 个宽度为其四分之一的专家，每个词元送到其中 2 个。这些专家合起来持有稠密网络四倍的参数，但一个词元只经过其中两个：每个词元只用到稠密网络一半的参数。

# %%
dim, inter_dim, n_experts, k = 64, 256, 16, 2
dense = Expert(dim, inter_dim)
experts = nn.ModuleList(Expert(dim, inter_dim // 4) for _ in range(n_experts))
held_dense = sum(p.numel() for p in dense.parameters())
held_moe = sum(p.numel() for p in experts.parameters())
used_moe = k * sum(p.numel() for p in experts[0].parameters())
print(f"dense: holds {held_dense:,}, uses {held_dense:,} per token")
print(f"MoE:   holds {held_moe:,} ({held_moe / held_dense:.0f}x), uses {used_moe:,} per token ({used_moe / held_dense:.2f}x)")

# %% [markdown]
# ## The classic router: softmax, top-k, renormalise · 经典路由器：softmax、top-k、再归一化
#
# A linear layer scores every expert for every token (`logits`, shape `(N, E)`). The classic top-k
# router takes a softmax over **all** experts, keeps the `k` largest probabilities and renormalises
# them to sum 1; the token's output is the weighted sum of its `k` experts' outputs. Shazeer et al.
# (2017) and Mixtral write it as a softmax over the `k` largest logits, which gives the same weights.
# The Switch Transformer is the exception: it sends each token to `k = 1` expert and keeps the raw
# probability $p_i(x)$ as the weight, because one renormalised probability is always 1 (the cell
# below shows it) and the router would get no gradient from the task.
#
# 一个线性层为每个词元给每个专家打分（`logits`，形状 `(N, E)`）。经典的 top-k 路由器对 **所有** 专家做 softmax，保留最大的 `k` 个概率，并把它们重新归一化使其和为 1；词元的输出是它的 `k` 个专家输出的加权和。Shazeer 等（2017）和 Mixtral 把它写成对最大的 `k` 个 logits 做 softmax，得到的权重相同。Switch Transformer 是例外：它把每个词元只送到 `k = 1` 个专家，并把原始概率 $p_i(x)$ 直接作为权重，因为单个概率重新归一化后总是 1（下面的单元格展示了这一点），路由器就得不到来自任务的梯度。

# %% [markdown]
# ### Exercise 2 · `topk_router` · 练习 2
#
# `(N, E)` logits to `weights` `(N, k)` (each row sums to 1) and `indices` `(N, k)` (the experts chosen).
#
# 把 `(N, E)` 的 logits 变成 `weights` `(N, k)`（每行和为 1）和 `indices` `(N, k)`（被选中的专家）。
#
# <!-- rules: topk_router -->
#
# #### Rules that grading checks · 评分检查的规则 (`topk_router`)
#
# - Not graded (the caller guarantees it): 1 <= k <= E.
# - Not graded (the caller guarantees it): no tie at the k-th place of a token's choice scores (a tie there may go either way).
# - Graded in float32, float64 and bfloat16: the weights have the logits' dtype; the indices are integers.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - A token's k experts may come in any order (each token's pairs are compared sorted by expert).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：1 <= k <= E。
# - 不评分（由调用者保证）：每个词元的选择分数在第 k 位上没有并列（并列时选哪个都可以）。
# - 在 float32、float64、bfloat16 下评分：权重与 logits 的 dtype 相同；索引为整数。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 一个词元的 k 个专家可以按任意顺序给出（每个词元的（权重，专家）对按专家编号排序后比较）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "topk_router", "locked": false, "schema_version": 3, "solution": true, "task": false}
def topk_router(logits, k):
    ### BEGIN SOLUTION
    probs = torch.softmax(logits, dim=-1)
    top, indices = probs.topk(k, dim=-1)
    return top / top.sum(dim=-1, keepdim=True), indices
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_topk_router", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close

from autograder.checks import nb10

with nb10.as_graded(topk_router):
    weights, indices = topk_router(torch.tensor([[1.0, 3.0, 2.0, 0.0]]), 2)
    expect(indices.tolist()[0] in ([1, 2], [2, 1]), "Experts 1 and 2 have the two largest logits.", "专家 1 和 2 的 logits 最大。",
           f"indices {indices.tolist()}")
    expect_close(weights.sum(-1), torch.ones(1), "The kept weights should sum to 1.", "保留下来的权重之和应为 1。")
    print("✓ topk_router")

# %% nbgrader={"grade": true, "grade_id": "test_topk_router_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb10
nb10.check_topk_router(topk_router)
### END HIDDEN TESTS

# %%
logits = torch.tensor([[2.0, 0.5, -1.0, 0.0], [0.1, 0.3, 0.2, 0.0]])
weights, indices = topk_router(logits, 1)
print("top-1, renormalised:", weights.flatten().tolist())
print("top-1, raw probability (Switch):", [round(p, 3) for p in torch.softmax(logits, -1).gather(1, indices).flatten().tolist()])

# %% [markdown]
# ## Load collapse and the Switch loss · 负载坍缩与 Switch 损失
#
# Trained on its own, a router tends to feed the experts that already work best, which then get
# better still: a few experts take most tokens while others starve and never learn. The Switch
# Transformer (Fedus et al. 2021) adds an auxiliary loss
#
# 单独训练时，路由器倾向于把词元送给当前表现最好的专家，而这些专家因此变得更好：少数专家接收了大部分词元，其他专家则被饿着，永远学不会。Switch Transformer（Fedus 等 2021）加入一个辅助损失
#
# $$\mathcal{L}_{\text{aux}} = E \sum_{i=1}^{E} f_i \, P_i ,$$
#
# where $f_i$ is the share of the $N k$ assignments that went to expert $i$ (counted, so it carries no
# gradient) and $P_i$ is the mean router probability of expert $i$ (differentiable). When either $f$
# or $P$ is uniform ($1/E$ everywhere) the loss is exactly 1, since the other sums to 1. That is not
# its minimum: a router that puts many assignments on an expert of low mean probability and none on
# one of high mean probability scores below 1 (a cell after the exercise prints a case with
# $E = 3$, $k = 1$). The gradient flows through $P$ only, so it lowers
# the probability of the experts that received the most assignments.
#
# 其中 $f_i$ 是 $N k$ 次分配中分给专家 $i$ 的比例（通过计数得到，因此不带梯度），$P_i$ 是专家 $i$ 的平均路由概率（可微）。只要 $f$ 或 $P$ 之一是均匀的（处处为 $1/E$），损失就正好是 1，因为另一个之和为 1。但这并不是它的最小值：如果路由器把许多分配放在一个平均概率低的专家上，而平均概率高的某个专家一个也没分到，得分就会低于 1（练习之后的一个单元格打印了 $E = 3$、$k = 1$ 的例子）。梯度只通过 $P$ 传播，因此它降低的是得到最多分配的那些专家的概率。

# %% [markdown]
# ### Exercise 3 · `load_balancing_loss` · 练习 3
#
# `router_probs` `(N, E)` (the softmax over all experts), `expert_indices` `(N, k)`, `num_experts` E:
# return the scalar loss. Count $f$ from `expert_indices` as given: a router may have chosen them
# with something other than `router_probs` alone (a bias, noise), so they need not be its top k.
#
# `router_probs` `(N, E)`（对所有专家的 softmax），`expert_indices` `(N, k)`，`num_experts` 为 E：返回标量损失。$f$ 要按传入的 `expert_indices` 计数：路由器选择它们时可能用了 `router_probs` 之外的东西（偏置、噪声），所以它们不一定是 `router_probs` 的前 k 个。
#
# <!-- rules: load_balancing_loss -->
#
# #### Rules that grading checks · 评分检查的规则 (`load_balancing_loss`)
#
# - Not graded (the caller guarantees it): every entry of expert_indices is an expert number below num_experts; router_probs has num_experts columns.
# - Graded in float32: a scalar (one number).
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：expert_indices 的每个元素都是小于 num_experts 的专家编号；router_probs 有 num_experts 列。
# - 在 float32 下评分：标量（一个数）。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "load_balancing_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def load_balancing_loss(router_probs, expert_indices, num_experts):
    ### BEGIN SOLUTION
    counts = torch.bincount(expert_indices.flatten(), minlength=num_experts).to(router_probs.dtype)
    f = counts / expert_indices.numel()
    P = router_probs.mean(dim=0)
    return num_experts * (f * P).sum()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_load_balancing_loss", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb10

with nb10.as_graded(load_balancing_loss):
    probs = torch.full((4, 4), 0.25)
    indices = torch.tensor([[0], [1], [2], [3]])
    expect_close(load_balancing_loss(probs, indices, 4), torch.tensor(1.0), "A perfectly balanced router gives a loss of 1.",
                 "完全均衡的路由器给出的损失为 1。")
    print("✓ load_balancing_loss")

# %% nbgrader={"grade": true, "grade_id": "test_load_balancing_loss_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb10
nb10.check_load_balancing_loss(load_balancing_loss)
### END HIDDEN TESTS

# %% [markdown]
# Three routers with $E = 3$ experts and $k = 1$: one whose $P$ is uniform although every token goes
# to expert 0, one whose $f$ is uniform, and one with two tokens that put half the assignments on the
# expert with the lowest mean probability (expert 0) and none on expert 2, whose mean probability is
# almost the highest. That last one scores below 1.
#
# 三个 $E = 3$、$k = 1$ 的路由器：一个的 $P$ 是均匀的，但每个词元都去了专家 0；一个的 $f$ 是均匀的；还有一个有两个词元，把一半的分配给了平均概率最低的专家（专家 0），而平均概率几乎最高的专家 2 一个也没分到。最后这个的得分低于 1。

# %%
cases = {
    "P uniform, all tokens on expert 0": torch.full((3, 3), 1 / 3),
    "f uniform": torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.7, 0.1], [0.3, 0.3, 0.4]]),
    "half on the lowest-P expert": torch.tensor([[0.34, 0.33, 0.33], [0.0, 0.51, 0.49]]),
}
for name, probs in cases.items():
    chosen = torch.zeros(3, 1, dtype=torch.long) if name.startswith("P") else probs.argmax(-1, keepdim=True)
    f = torch.bincount(chosen.flatten(), minlength=3) / chosen.numel()
    print(f"{name:34}: f = {[round(v, 2) for v in f.tolist()]}, P = {[round(v, 3) for v in probs.mean(0).tolist()]}, "
          f"loss = {float(load_balancing_loss(probs, chosen, 3)):.3f}")

# %% [markdown]
# The experiment: 16 small experts, top-2, learn to imitate a fixed random network on random inputs.
# To keep it quick, every expert runs on every token and only the chosen weights are kept (the
# output is the same as dispatching; the work is not). Two runs from the same start: without the
# auxiliary loss, and with it at weight 0.1. Both are measured on the same 4096 held-out tokens
# before training and after 150 steps: each expert's share of the assignments (the plot, busiest
# first) and the task loss, the mean squared error against the network they imitate.
#
# 实验：16 个小专家，top-2，学习在随机输入上模仿一个固定的随机网络。为了快速，每个专家都在每个词元上运行，只保留被选中的权重（输出与真正分派相同，计算量则不同）。两次运行从同一起点开始：不加辅助损失，以及以 0.1 的权重加上它。两次运行都在同样的 4096 个留出词元上测量，训练前测一次，150 步之后再测一次：每个专家所占的分配比例（图中按从忙到闲排列），以及任务损失，即与被模仿网络之间的均方误差。

# %%
# NBVAL_IGNORE_OUTPUT
def train_router(aux_weight, steps=150, n_experts=16, k=2, dim=16, hidden=16, tokens=128, seed=0, bias_gamma=0.0):
    """Train a tiny top-k MoE to imitate a random network; return {"before"/"after": (shares, task loss)}.
    bias_gamma > 0 balances with DeepSeek-V3's bias instead (used further down, after exercise 5)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    teacher = nn.Sequential(nn.Linear(dim, 64), nn.Tanh(), nn.Linear(64, dim))
    router = nn.Linear(dim, n_experts, bias=False)
    w1, w3 = (nn.Parameter(torch.randn(n_experts, dim, hidden) / dim ** 0.5) for _ in range(2))
    w2 = nn.Parameter(torch.randn(n_experts, hidden, dim) / hidden ** 0.5)
    opt = torch.optim.Adam([*router.parameters(), w1, w2, w3], lr=3e-2)
    held_out = torch.randn(4096, dim, generator=torch.Generator().manual_seed(seed + 1))
    bias = torch.zeros(n_experts)

    def moe(x):  # (N, dim) -> output, router logits, chosen experts
        logits = router(x)
        if bias_gamma:  # the bias only chooses; the weights are the chosen probabilities, renormalised
            probs = logits.softmax(dim=-1)
            indices = (probs + bias).topk(k, dim=-1).indices
            weights = probs.gather(1, indices)
            weights = weights / weights.sum(dim=-1, keepdim=True)
        else:
            weights, indices = topk_router(logits, k)
        gates = torch.zeros(x.shape[0], n_experts).scatter(1, indices, weights)  # (N, E), k non-zeros per row
        h = F.silu(torch.einsum("nd,edh->neh", x, w1)) * torch.einsum("nd,edh->neh", x, w3)
        return torch.einsum("neh,ehd,ne->nd", h, w2, gates), logits, indices

    def measure():
        with torch.no_grad():
            y, _, indices = moe(held_out)
            shares = torch.bincount(indices.flatten(), minlength=n_experts).float() / indices.numel()
            return shares, F.mse_loss(y, teacher(held_out)).item()

    before = measure()
    for _ in range(steps):
        x = torch.randn(tokens, dim, generator=g)
        y, logits, indices = moe(x)
        loss = F.mse_loss(y, teacher(x).detach())
        loss = loss + aux_weight * load_balancing_loss(logits.softmax(-1), indices, n_experts)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if bias_gamma:
            bias = update_expert_bias(bias, torch.bincount(indices.flatten(), minlength=n_experts), bias_gamma)
    return {"before": before, "after": measure()}


# The first optimizer of a Python session imports torch._dynamo, which takes seconds; this run
# scores no points, so grading skips it.
if GRADING:
    print("Not run while grading: training the two routers scores no points.")
else:
    runs = {name: train_router(w) for name, w in tqdm([("no balancing", 0.0), ("Switch loss x 0.1", 0.1)])}
    rows = {"before training": runs["no balancing"]["before"],
            **{f"{name}, after": run["after"] for name, run in runs.items()}}
    fig, ax = plt.subplots(figsize=(7, 3))
    for offset, (name, (shares, _)) in zip((-0.27, 0, 0.27), rows.items()):
        ax.bar(torch.arange(16) + offset, shares.sort(descending=True).values, width=0.27, label=name)
    ax.axhline(1 / 16, color="gray", ls="--", label="even share")
    ax.set_xlabel("expert (busiest first)"); ax.set_ylabel("share of assignments"); ax.legend(); plt.show()
    for name, (shares, task) in rows.items():
        top4 = shares.sort(descending=True).values[:4].sum()
        print(f"{name:26}: busiest 4 of 16 experts take {top4:.0%}, quietest {shares.min():.1%}, task loss {task:.4f}")

# %% [markdown]
# Read the lines the cell printed. Before training (both runs start there) the random router
# already gives the busiest four experts more than their even quarter. Without balancing, training
# concentrates the tokens further: the busiest four take a larger share and the quietest gets almost
# nothing. With the Switch loss the shares end closer to even than they started, and the task loss
# after the same 150 steps is higher than without it: in this experiment, balancing the load cost task
# loss. The Switch loss balances through its gradient, which pulls the router away from what the task
# alone would choose; DeepSeek-V3 balances with a bias that sends no gradient at all (below, where
# this experiment is run again with it).
#
# 请读上面单元格打印的几行。训练前（两次运行都从这里开始），随机的路由器已经让最忙的四个专家拿到多于均分的四分之一。不加均衡时，训练让词元进一步集中：最忙的四个专家拿到更大的份额，最闲的几乎什么也得不到。加上 Switch 损失后，份额最终比开始时更接近均匀，而同样 150 步之后的任务损失比不加时更高：在这个实验中，均衡负载让任务损失变高了。Switch 损失通过它的梯度来均衡，这个梯度把路由器从仅凭任务会做的选择上拉开；DeepSeek-V3 则用一个完全不产生梯度的偏置来均衡（见下文，那里会用它把这个实验再做一遍）。

# %% [markdown]
# ## DeepSeek-V3's gate · DeepSeek-V3 的路由门控
#
# DeepSeek-V3 (technical report, section 2.1.2; `Gate` in its inference code) routes differently:
#
# DeepSeek-V3（技术报告第 2.1.2 节；推理代码中的 `Gate`）的路由方式不同：
#
# 1. **Sigmoid affinities**: $s_{i} = \sigma(x \cdot w_i)$ for each expert, independent of the others
#    (V2 used a softmax; with `score_func="softmax"` the gate does that instead).
# 2. **A bias that only chooses**: experts are ranked by $s_i + b_i$, but the weights are made from
#    $s_i$ alone. The bias steers load without distorting what the experts' outputs are worth.
# 3. **Group-limited routing**: the experts are split into `n_expert_groups` groups (in V3, 8 groups
#    of 32; in training, each group's experts sit on one node); a group's score is the sum of its
#    two highest biased scores (for softmax, its maximum); only the `n_limited_groups` best groups
#    stay (4 in V3), and the top-`k` experts are chosen among them. In training this bounds how many
#    nodes a token's data must travel to. V3's code decides the group score differently: by whether the gate has a bias (the maximum without one,
#    the top-2 sum with one), and it creates the bias only for the 671B model (`dim == 7168`), whose
#    scores are sigmoid. The course's gate always has a bias (zeros choose as no bias does), so it
#    ties the rule to the score function instead; for V3's sigmoid gate both rules take the top-2 sum.
# 4. **Weights**: the chosen $s_i$, renormalised to sum 1 (sigmoid only; softmax weights are used as
#    they are), then multiplied by `route_scale` (2.5 in V3).
#
# 1. **Sigmoid 亲和度**：每个专家 $s_{i} = \sigma(x \cdot w_i)$，彼此独立（V2 用的是 softmax；当 `score_func="softmax"` 时路由门控改用 softmax）。
# 2. **只用于选择的偏置**：专家按 $s_i + b_i$ 排序，但权重只由 $s_i$ 构成。偏置用来调节负载，而不会扭曲专家输出的价值。
# 3. **分组限制路由**：专家被分成 `n_expert_groups` 个组（V3 中为 8 组，每组 32 个；训练时每组的专家放在一个节点上）；一个组的分数是它最高的两个带偏置分数之和（softmax 时取最大值）；只保留最好的 `n_limited_groups` 个组（V3 中为 4 个），并在其中选出前 `k` 个专家。训练时这限制了一个词元的数据需要传送到的节点数。V3 的代码用另一种方式决定组分数：看路由门控有没有偏置（没有偏置取最大值，有偏置取前两个之和），而它只为 671B 模型（`dim == 7168`）创建偏置，该模型的分数是 sigmoid。本课程的路由门控总是有偏置（全零偏置的选择与没有偏置相同），所以改为按分数函数决定规则；对 V3 的 sigmoid 路由门控，两种规则都取前两个之和。
# 4. **权重**：被选中的 $s_i$，重新归一化使其和为 1（仅 sigmoid；softmax 的权重直接使用），再乘以 `route_scale`（V3 中为 2.5）。
#
# DeepSeek gives no reason for the sigmoid or for `route_scale`; what follows is an interpretation,
# not theirs. Softmax affinities over 256 experts are small and coupled (raising one lowers all the
# others), while each sigmoid score stands on its own between 0 and 1. And the renormalised routed
# weights sum to 1, the same weight as the one shared expert's output, which is added unscaled;
# `route_scale` = 2.5 gives the routed experts together 2.5 times that.
#
# DeepSeek 对 sigmoid 和 `route_scale` 都没有给出理由；下面是一种解读，不是他们的说法。在 256 个专家上做 softmax，得到的亲和度很小而且相互耦合（一个升高，其他都会降低），而每个 sigmoid 分数都独立地落在 0 到 1 之间。另外，重新归一化后的路由权重之和为 1，与唯一的共享专家的输出权重相同（共享专家的输出不经缩放直接相加）；`route_scale` = 2.5 让所有路由专家合起来的权重是它的 2.5 倍。

# %% [markdown]
# ### Exercise 4 · `Gate` · 练习 4
#
# Parameters `weight` `(n_routed_experts, dim)` (initialise it like `nn.Linear`, for example
# `nn.init.kaiming_uniform_(w, a=5 ** 0.5)`, or with a small normal) and `bias` `(n_routed_experts,)`,
# zeros (it moves by the rule of exercise 5, not by gradients: `requires_grad=False` is fine).
# `forward(x)` for `x` `(N, dim)` returns `(weights, indices)`, both `(N, n_activated_experts)`, with
# the weights in `x`'s dtype. Mask the groups that were not kept with `-inf` before the final top-k.
# The four rules of the section above, one line each:
# - scores: `sigmoid(x @ weight.T)`, or its softmax over the experts when `score_func="softmax"`;
# - choice: rank the experts by scores + `bias`; the weights are gathered from the scores alone;
# - groups (when `n_expert_groups > 1`): a group's score is the sum of its two highest biased scores
#   (sigmoid) or its highest one (softmax); keep the `n_limited_groups` best groups, then the top-`k`;
# - weights: the chosen scores, divided by their sum (sigmoid only), times `route_scale`.
#
# 参数 `weight` `(n_routed_experts, dim)`（像 `nn.Linear` 那样初始化，例如 `nn.init.kaiming_uniform_(w, a=5 ** 0.5)`，或用较小的正态分布）和 `bias` `(n_routed_experts,)`，初始为零（它按练习 5 的规则变化，而不是靠梯度：可以设 `requires_grad=False`）。`forward(x)` 接收 `(N, dim)` 的 `x`，返回 `(weights, indices)`，二者形状都是 `(N, n_activated_experts)`，权重的 dtype 与 `x` 相同。在最后的 top-k 之前，用 `-inf` 屏蔽未被保留的组。
# 上一节的四条规则，每条一行：
# - 分数：`sigmoid(x @ weight.T)`，`score_func="softmax"` 时则是在专家上的 softmax；
# - 选择：按分数 + `bias` 给专家排序；权重只从分数中取出；
# - 分组（`n_expert_groups > 1` 时）：一个组的分数是它最高的两个带偏置分数之和（sigmoid）或最高的那一个（softmax）；保留最好的 `n_limited_groups` 个组，再在其中取前 `k` 个；
# - 权重：被选中的分数除以它们的和（仅 sigmoid），再乘以 `route_scale`。
#
# <!-- rules: Gate -->
#
# #### Rules that grading checks · 评分检查的规则 (`Gate`)
#
# - Not graded (the caller guarantees it): `score_func` is "sigmoid" or "softmax"; the groups divide the experts, at least 2 experts each, `n_limited_groups <= n_expert_groups`, and the kept groups hold at least `n_activated_experts` experts.
# - Not graded (the caller guarantees it): no tie at the k-th place of a token's choice scores (a tie there may go either way).
# - Graded in float32 and float64: the layer moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - A token's k experts may come in any order (compared sorted by expert).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 不评分（由调用者保证）：`score_func` 为 "sigmoid" 或 "softmax"；组能整除专家数、每组至少 2 个专家，`n_limited_groups <= n_expert_groups`，且保留的组里至少有 `n_activated_experts` 个专家。
# - 不评分（由调用者保证）：每个词元的选择分数在第 k 位上没有并列（并列时选哪个都可以）。
# - 在 float32、float64 下评分：用 `.to(dtype)` 转换后的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 一个词元的 k 个专家可以按任意顺序给出（按专家编号排序后比较）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "Gate", "locked": false, "schema_version": 3, "solution": true, "task": false}
class Gate(nn.Module):
    def __init__(self, dim, n_routed_experts, n_activated_experts, n_expert_groups=1, n_limited_groups=1,
                 score_func="sigmoid", route_scale=1.0):
        super().__init__()
        ### BEGIN SOLUTION
        self.topk, self.n_groups, self.topk_groups = n_activated_experts, n_expert_groups, n_limited_groups
        self.score_func, self.route_scale = score_func, route_scale
        self.weight = nn.Parameter(torch.empty(n_routed_experts, dim))
        nn.init.kaiming_uniform_(self.weight, a=5 ** 0.5)
        self.bias = nn.Parameter(torch.zeros(n_routed_experts), requires_grad=False)
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        logits = x @ self.weight.T  # (N, E)
        scores = logits.softmax(dim=-1) if self.score_func == "softmax" else logits.sigmoid()
        choice = scores + self.bias
        if self.n_groups > 1:
            grouped = choice.view(x.shape[0], self.n_groups, -1)  # (N, G, E / G)
            if self.score_func == "softmax":
                group_scores = grouped.amax(dim=-1)
            else:
                group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
            kept = group_scores.topk(self.topk_groups, dim=-1).indices
            dropped = torch.ones_like(group_scores, dtype=torch.bool).scatter(1, kept, False)
            choice = grouped.masked_fill(dropped.unsqueeze(-1), float("-inf")).flatten(1)
        indices = choice.topk(self.topk, dim=-1).indices
        weights = scores.gather(1, indices)
        if self.score_func == "sigmoid":
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return (weights * self.route_scale).to(x.dtype), indices
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_Gate", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect, expect_close

from autograder.checks import nb10

with nb10.as_graded(Gate):
    gate = Gate(8, 6, 2, route_scale=2.5)
    weights, indices = gate(torch.randn(5, 8))
    expect(weights.shape == (5, 2) and indices.shape == (5, 2), "Weights and indices should both be (N, k).",
           "权重和索引的形状都应为 (N, k)。", f"{tuple(weights.shape)}, {tuple(indices.shape)}")
    expect_close(weights.sum(-1), torch.full((5,), 2.5), "Sigmoid weights sum to 1 after renormalising, then to route_scale.",
                 "sigmoid 权重重新归一化后和为 1，乘以 route_scale 后和为 route_scale。")
    print("✓ Gate")

# %% nbgrader={"grade": true, "grade_id": "test_Gate_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb10
nb10.check_Gate(Gate)
### END HIDDEN TESTS

# %% [markdown]
# ## Balancing without an auxiliary loss · 无辅助损失的负载均衡
#
# An auxiliary loss balances the load, and in the experiment above the task loss was higher with it.
# The V3 report (section 2.1.2) notes that too large an auxiliary loss impairs the model (citing Wang
# et al., 2024) and balances with the bias instead: after each training step, every expert
# that received more than the mean load has its bias lowered by $\gamma$, every expert below the mean
# has it raised by $\gamma$ (V3 used $\gamma = 0.001$ for most of training). Only the choice changes,
# so the weights, and the gradients, stay those of the task. (V3 keeps a very small sequence-wise
# auxiliary loss as a safeguard; it is left out here.)
#
# 辅助损失能均衡负载，而在上面的实验中，加上它之后任务损失更高。V3 技术报告（第 2.1.2 节）指出，过大的辅助损失会损害模型（引用 Wang 等，2024），因此改用偏置来均衡：每个训练步骤之后，负载高于平均值的专家把偏置降低 $\gamma$，低于平均值的专家把偏置提高 $\gamma$（V3 在大部分训练中使用 $\gamma = 0.001$）。只有选择发生变化，因此权重和梯度仍然是任务本身的。（V3 还保留了一个非常小的序列级辅助损失作为保险；这里略去。）

# %% [markdown]
# ### Exercise 5 · `update_expert_bias` · 练习 5
#
# Return the new bias: `bias` minus `gamma` where `tokens_per_expert` is above its mean, plus `gamma`
# where it is below, unchanged where it equals the mean. `tokens_per_expert` may be an integer tensor
# (counts); its mean is a real number all the same.
#
# 返回新的偏置：`tokens_per_expert` 高于其平均值处，`bias` 减去 `gamma`；低于平均值处，加上 `gamma`；等于平均值处保持不变。`tokens_per_expert` 可能是整数张量（计数），但它的平均值仍然是实数。
#
# <!-- rules: update_expert_bias -->
#
# #### Rules that grading checks · 评分检查的规则 (`update_expert_bias`)
#
# - Changes `bias` in place (that is its job); no other argument.
# - Graded in float32 and float64: the new bias has the bias's dtype, whatever the dtype of tokens_per_expert.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Returning the bias updated in place is fine too.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 原地修改 `bias`（这正是它的任务）；不修改其他参数。
# - 在 float32、float64 下评分：新的偏置与 bias 的 dtype 相同，无论 tokens_per_expert 是什么 dtype。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 原地更新 bias 并返回它也可以。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "update_expert_bias", "locked": false, "schema_version": 3, "solution": true, "task": false}
def update_expert_bias(bias, tokens_per_expert, gamma=0.001):
    ### BEGIN SOLUTION
    load = tokens_per_expert.to(bias.dtype)
    return bias - gamma * torch.sign(load - load.mean())
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_update_expert_bias", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect_close

from autograder.checks import nb10

with nb10.as_graded(update_expert_bias):
    new = update_expert_bias(torch.zeros(3), torch.tensor([9, 1, 2]), gamma=0.5)
    expect_close(new, torch.tensor([-0.5, 0.5, 0.5]), "The busiest expert loses gamma, the others (below the mean of 4) gain it.",
                 "最忙的专家减去 gamma，其他专家（低于平均值 4）加上 gamma。")
    print("✓ update_expert_bias")

# %% nbgrader={"grade": true, "grade_id": "test_update_expert_bias_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb10
nb10.check_update_expert_bias(update_expert_bias)
### END HIDDEN TESTS

# %% [markdown]
# A simulation with your `Gate` (16 experts in 4 groups, 2 groups kept, top-2) on a stream of inputs
# that all lean in one direction, so a few experts are favoured from the start. Each step routes a
# batch of 512 tokens, counts the load and updates the bias; $\gamma$ is 0.01 rather than V3's 0.001
# so that it settles within the notebook's time. The left plot tracks the busiest and quietest
# expert's share; the right one shows every expert's share at the first and the last step.
#
# 用你的 `Gate`（16 个专家分成 4 组，保留 2 组，top-2）在一串都偏向同一方向的输入上模拟，因此一开始就有少数专家受到偏爱。每一步把 512 个词元的一批数据路由出去，统计负载并更新偏置；$\gamma$ 取 0.01 而不是 V3 的 0.001，以便在本笔记本的时间内稳定下来。左图追踪最忙和最闲专家的份额；右图显示第一步和最后一步时每个专家的份额。

# %%
# NBVAL_IGNORE_OUTPUT
# (grading runs 30 steps instead of 300, so the printed shares differ)
torch.manual_seed(0)
gate = Gate(16, 16, 2, n_expert_groups=4, n_limited_groups=2)
lean = torch.randn(16)
busiest, quietest, shares = [], [], []
n_steps = 30 if GRADING else 300
for step in range(n_steps):
    x = torch.randn(512, 16) + lean  # every token leans the same way
    with torch.no_grad():
        _, indices = gate(x)
        load = torch.bincount(indices.flatten(), minlength=16)
        gate.bias.copy_(update_expert_bias(gate.bias, load, gamma=0.01))
    share = load.float() / load.sum()
    busiest.append(share.max().item()); quietest.append(share.min().item()); shares.append(share)
fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3))
ax1.plot(busiest, label="busiest expert"); ax1.plot(quietest, label="quietest expert")
ax1.axhline(1 / 16, color="gray", ls="--", label="even share")
ax1.set_xlabel("step"); ax1.set_ylabel("share of assignments"); ax1.legend()
ax2.bar(torch.arange(16) - 0.2, shares[0], width=0.4, label="step 0")
ax2.bar(torch.arange(16) + 0.2, shares[-1], width=0.4, label=f"step {n_steps - 1}")
ax2.set_xlabel("expert"); ax2.set_ylabel("share of assignments"); ax2.legend(); plt.show()
print(f"busiest / quietest share: step 0 {busiest[0]:.1%} / {quietest[0]:.1%}, "
      f"step {n_steps - 1} {busiest[-1]:.1%} / {quietest[-1]:.1%} (even: {1 / 16:.1%})")

# %% [markdown]
# Does the bias avoid the cost that the Switch loss had in the experiment of exercise 3? Run that
# experiment again (`train_router`), now with the bias instead of the auxiliary loss: it is added to
# the router's probabilities only to choose the experts, and `update_expert_bias` moves it with
# V3's $\gamma = 0.001$ after every step. One run can be luck, so the cell trains the three routers
# from three starting points (seeds) and prints each one's task loss and load.
#
# 偏置能避免练习 3 的实验中 Switch 损失带来的代价吗？把那个实验（`train_router`）再做一遍，这次用偏置代替辅助损失：偏置加到路由器的概率上，只用来选择专家，每一步之后由 `update_expert_bias` 以 V3 的 $\gamma = 0.001$ 调整。一次运行可能只是运气，所以下面的单元格从三个起点（随机种子）分别训练三种路由器，并打印每一种的任务损失和负载。

# %%
# NBVAL_IGNORE_OUTPUT
if GRADING:
    print("Not run while grading: training the routers scores no points.")
else:
    variants = {"no balancing": {}, "Switch loss x 0.1": {"aux_weight": 0.1}, "bias, gamma 0.001": {"bias_gamma": 0.001}}
    task = {name: [] for name in variants}
    for seed in tqdm(range(3), desc="seeds"):
        for name, kwargs in variants.items():
            shares, loss = train_router(kwargs.get("aux_weight", 0.0), seed=seed, bias_gamma=kwargs.get("bias_gamma", 0.0))["after"]
            task[name].append(loss)
            print(f"seed {seed}, {name:18}: busiest 4 of 16 experts take {shares.sort(descending=True).values[:4].sum():.0%}, "
                  f"task loss {loss:.4f}")
    mean = {name: sum(losses) / len(losses) for name, losses in task.items()}
    above = sum(b > n for b, n in zip(task["bias, gamma 0.001"], task["no balancing"]))
    print("mean task loss: " + ", ".join(f"{name} {m:.4f}" for name, m in mean.items()))
    print(f"On this machine the bias run's task loss was above the unbalanced run's in {above} of 3 seeds, "
          f"and on average {'above' if mean['bias, gamma 0.001'] > mean['Switch loss x 0.1'] else 'below'} the Switch run's.")

# %% [markdown]
# The bias balances about as well as the Switch loss did, and the task loss rises with it: in these
# runs, balancing cost task loss whichever way it was done, although the bias sends no gradient
# through the router. In a toy like this most of the price is that of the balance itself, tokens
# spread over experts the task alone would not have chosen. Whether the bias costs less than an
# auxiliary loss is a question for real training, and the V3 report answers it there: its ablation (section 4.5.2)
# trains MoE models both ways, and the models balanced with the bias score better on most
# benchmarks. This experiment can show what each method does to the load, not that result.
#
# 偏置实现的均衡与 Switch 损失差不多，任务损失也随之升高：在这些运行中，无论用哪种方法均衡，任务损失都变高了，尽管偏置根本不通过路由器传递梯度。在这样的小实验里，代价大部分来自均衡本身：词元被分散到仅凭任务不会选择的专家上。偏置的代价是否比辅助损失小，是真实训练中的问题，V3 技术报告也是在那里回答的：它的消融实验（第 4.5.2 节）用两种方法训练 MoE 模型，用偏置均衡的模型在大多数基准上得分更高。这个实验能展示每种方法对负载的作用，但展示不了那个结论。

# %% [markdown]
# ## Shared experts and the whole layer · 共享专家与完整的层
#
# DeepSeek's MoE also has **shared experts** that every token goes through, added to the routed
# output: they learn what all tokens need, so the routed experts can specialise (DeepSeekMoE, Dai et
# al. 2024). V3's code builds them as one SwiGLU network of width `n_shared_experts * moe_inter_dim`.
# The layer's output is $\text{shared}(x) + \sum_{i \in \text{top-}k} g_i \, \text{expert}_i(x)$.
#
# DeepSeek 的 MoE 还有每个词元都会经过的 **共享专家**，其输出加到路由输出上：它们学习所有词元都需要的东西，让路由专家可以专门化（DeepSeekMoE，Dai 等 2024）。V3 的代码把它们构建成一个宽度为 `n_shared_experts * moe_inter_dim` 的 SwiGLU 网络。该层的输出为 $\text{shared}(x) + \sum_{i \in \text{top-}k} g_i \, \text{expert}_i(x)$。
#
# Dispatching one token at a time would call the experts $N k$ times. Instead, group the $N k$
# (token, expert) assignments by expert (sort them, or take `torch.where(indices == e)` per expert):
# each expert runs once on all its tokens, and `index_add_` adds the weighted results back to their
# rows. A loop over the experts is fine; a loop over the tokens is what this avoids. Every token gets
# all its `k` experts, however many tokens an expert receives: nothing is dropped.
#
# 一次分派一个词元会调用专家 $N k$ 次。更好的做法是把 $N k$ 个（词元，专家）分配按专家分组（对它们排序，或对每个专家取 `torch.where(indices == e)`）：每个专家在它的所有词元上只运行一次，再用 `index_add_` 把加权结果加回对应的行。对专家循环没有问题；要避免的是对词元循环。无论一个专家接收多少词元，每个词元都得到它全部的 `k` 个专家：不丢弃任何东西。

# %% [markdown]
# ### Exercise 6 · `MoE` · 练习 6
#
# `gate` (your `Gate`), `experts` (an `nn.ModuleList` of `n_routed_experts` of your `Expert(dim,
# moe_inter_dim)`), `shared_experts` (one `Expert(dim, n_shared_experts * moe_inter_dim)` when
# `n_shared_experts > 0`, else `None`). `forward(x)` for `x` `(..., dim)` returns the same shape, and
# the routing weights stay in the autograd graph, so the gate learns from the task. Grading builds
# your `MoE` with the course's `Gate` and `Expert` (a mistake in those costs points only there) and
# counts the arithmetic of your `forward`: the multiply-adds and the number of matrix products. Running
# every expert on every token, or looping over the tokens, fails however it is written.
#
# `gate`（你的 `Gate`），`experts`（由 `n_routed_experts` 个你的 `Expert(dim, moe_inter_dim)` 组成的 `nn.ModuleList`），`shared_experts`（当 `n_shared_experts > 0` 时为一个 `Expert(dim, n_shared_experts * moe_inter_dim)`，否则为 `None`）。`forward(x)` 接收 `(..., dim)` 的 `x`，返回相同形状，并且路由权重留在自动求导的计算图中，路由门控才能从任务中学习。评分时用课程的 `Gate` 和 `Expert` 构建你的 `MoE`（那两个练习中的错误只在那里扣分），并统计你的 `forward` 的运算量：乘加次数和矩阵乘法的次数。让每个专家处理每个词元，或对词元循环，无论怎样写都不能通过。
#
# <!-- rules: MoE -->
#
# #### Rules that grading checks · 评分检查的规则 (`MoE`)
#
# - The course's `dispatch` and `moe_forward_per_token` may not run inside your code: this exercise is that part of the work.
# - Not graded (the caller guarantees it): `score_func` is "sigmoid" or "softmax"; the groups divide the experts, at least 2 experts each, `n_limited_groups <= n_expert_groups`, and the kept groups hold at least `n_activated_experts` experts.
# - Not graded (the caller guarantees it): no tie at the k-th place of a token's choice scores (a tie there may go either way).
# - Graded in float32 and float64: the layer moved with `.to(dtype)` computes in that dtype.
# - Device: the output on the input's device; a tensor you create gets `device=x.device` (x: an input).
# - Graded with the course's `Gate` and `Expert` in place of yours; the arithmetic of `forward` is counted (each routed expert runs once, on its tokens only: no loop over the tokens).
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - 课程的 `dispatch`、`moe_forward_per_token` 不能在你的代码中运行：本练习要你写的正是这部分工作。
# - 不评分（由调用者保证）：`score_func` 为 "sigmoid" 或 "softmax"；组能整除专家数、每组至少 2 个专家，`n_limited_groups <= n_expert_groups`，且保留的组里至少有 `n_activated_experts` 个专家。
# - 不评分（由调用者保证）：每个词元的选择分数在第 k 位上没有并列（并列时选哪个都可以）。
# - 在 float32、float64 下评分：用 `.to(dtype)` 转换后的层用该 dtype 计算。
# - 设备：输出在输入所在的设备上；你新建的张量要加 `device=x.device`（x 是某个输入）。
# - 评分时用课程的 `Gate` 和 `Expert` 代替你的；`forward` 的运算量会被统计（每个路由专家只运行一次，且只处理路由给它的词元：不要对词元循环）。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "MoE", "locked": false, "schema_version": 3, "solution": true, "task": false}
class MoE(nn.Module):
    def __init__(self, dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts=0,
                 n_expert_groups=1, n_limited_groups=1, score_func="sigmoid", route_scale=1.0):
        super().__init__()
        ### BEGIN SOLUTION
        self.gate = Gate(dim, n_routed_experts, n_activated_experts, n_expert_groups, n_limited_groups,
                         score_func, route_scale)
        self.experts = nn.ModuleList(Expert(dim, moe_inter_dim) for _ in range(n_routed_experts))
        self.shared_experts = Expert(dim, n_shared_experts * moe_inter_dim) if n_shared_experts > 0 else None
        ### END SOLUTION

    def forward(self, x):
        ### BEGIN SOLUTION
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # (N, dim)
        weights, indices = self.gate(x)  # (N, k)
        k = indices.shape[1]
        order = indices.flatten().argsort()  # assignments sorted by expert
        counts = torch.bincount(indices.flatten(), minlength=len(self.experts)).tolist()
        rows, w = order // k, weights.flatten()[order].unsqueeze(-1)
        y = torch.zeros_like(x)
        start = 0
        for e, count in enumerate(counts):
            if count:
                mine = rows[start:start + count]
                y.index_add_(0, mine, self.experts[e](x[mine]) * w[start:start + count])
            start += count
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        return y.view(shape)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_MoE", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
import torch
from autograder.checks import expect

from autograder.checks import nb10

with nb10.as_graded(MoE):
    moe = MoE(8, 4, n_routed_experts=6, n_activated_experts=2, n_shared_experts=1)
    out = moe(torch.randn(2, 5, 8))
    expect(out.shape == (2, 5, 8), "The MoE keeps the input's shape.", "MoE 保持输入的形状。", f"shape {tuple(out.shape)}")
    expect(len(moe.experts) == 6 and moe.shared_experts is not None, "6 routed experts and a shared expert.",
           "6 个路由专家和一个共享专家。")
    print("✓ MoE")

# %% nbgrader={"grade": true, "grade_id": "test_MoE_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb10
nb10.check_MoE(MoE)
### END HIDDEN TESTS

# %% [markdown]
# ## Measured: a loop over tokens against your dispatch · 实测：按词元循环与你的分派
#
# The same layer (your `MoE`, 64 experts, 6 active, one shared expert), the same tokens, two ways:
# every token visiting its experts one at a time (`utils.moe.moe_forward_per_token`), and your
# vectorised `forward`; outputs checked equal, one thread, interleaved rounds, median. The notebook
# uses 256 tokens to stay quick; `python -m utils.moe` runs 2048. The sentence under the table says
# what the machine that ran this measured. Where a GPU is present the cell runs there
# (`utils.benchmark.demo_device()`) and measures the GPU; the last lines print what an H200
# measured for this course at 2048 tokens.
#
# 同一个层（你的 `MoE`，64 个专家，激活 6 个，一个共享专家），同样的词元，两种方式：每个词元逐个访问它的专家（`utils.moe.moe_forward_per_token`），以及你的向量化 `forward`；检查输出相同，单线程，交替轮次，取中位数。本笔记本用 256 个词元以保持快速；`python -m utils.moe` 运行 2048 个。表格下方的句子说明运行本笔记本的机器测得的结果。有 GPU 时这个单元格在 GPU 上运行（`utils.benchmark.demo_device()`），测的是 GPU；最后几行打印一块 H200 为本课程在 2048 个词元时测得的结果。

# %%
# NBVAL_IGNORE_OUTPUT
from utils.benchmark import demo_device
from utils.moe import dispatch_benchmark

tokens = 64 if GRADING else 256
torch.manual_seed(0)
layer = MoE(64, 32, n_routed_experts=64, n_activated_experts=6, n_shared_experts=1).to(demo_device())  # a GPU when present
r = dispatch_benchmark(tokens=tokens, moe=layer, repeats=3)
print(f"{'per-token loop':>16} {r['per-token loop'] * 1e3:8.1f} ms")
print(f"{'vectorised':>16} {r['vectorised'] * 1e3:8.1f} ms")
print(f"On this machine, with {tokens} tokens, " + (f"your dispatch was {r['speedup']:.0f}x faster than the per-token loop."
      if r["speedup"] > 1 else f"the per-token loop was not slower than your dispatch ({1 / r['speedup']:.2f}x its time)."))
# Measured for this course on an NVIDIA H200, 2026-11-26, by `python -m utils.device_report --device cuda`
# (utils.moe.dispatch_benchmark, the same layer, 2048 tokens, medians of 3; CHANGELOG.md, issue 31). One run.
H200_DISPATCH_SPEEDUP = {2048: 154}
print("measured on an NVIDIA H200 (one run): " + ", ".join(
    f"{t} tokens, your kind of dispatch {x}x faster than the per-token loop" for t, x in H200_DISPATCH_SPEEDUP.items()))

# %% [markdown]
# ## Counting DeepSeek-V3's parameters · 计算 DeepSeek-V3 的参数量
#
# DeepSeek-V3 has 61 layers; the first 3 use a dense SwiGLU of width `inter_dim`, the other 58 an MoE
# of 256 routed experts and 1 shared expert of width `moe_inter_dim`, 8 routed experts active per
# token. The published figures (`README_WEIGHTS.md` of the DeepSeek-V3 repository) are 671B parameters
# in the main model and 36.7B activated per token, the latter including 0.9B for the embedding and 0.9B
# for the output head.
#
# DeepSeek-V3 有 61 层；前 3 层使用宽度为 `inter_dim` 的稠密 SwiGLU，其余 58 层使用 MoE：256 个路由专家和 1 个宽度为 `moe_inter_dim` 的共享专家，每个词元激活 8 个路由专家。公开的数字（DeepSeek-V3 仓库的 `README_WEIGHTS.md`）是主模型 6710 亿参数，每个词元激活 367 亿参数，后者包括嵌入的 9 亿和输出头的 9 亿。

# %% [markdown]
# ### Exercise 7 · `moe_parameter_counts` · 练习 7
#
# Return `(total, active)` for one MoE layer: the routed and shared experts (3 matrices of
# `dim x moe_inter_dim` each) and the gate (`weight` and `bias`). Active counts the experts a token
# uses (its `n_activated_experts` routed ones and the shared ones) and the whole gate, which scores
# every expert for every token.
#
# 返回一个 MoE 层的 `(total, active)`：路由专家和共享专家（每个 3 个 `dim x moe_inter_dim` 矩阵）以及路由门控（`weight` 和 `bias`）。激活参数包括一个词元用到的专家（它的 `n_activated_experts` 个路由专家和共享专家）以及整个路由门控，因为它要为每个词元给每个专家打分。
#
# <!-- rules: moe_parameter_counts -->
#
# #### Rules that grading checks · 评分检查的规则 (`moe_parameter_counts`)
#
# - dtype: a tuple of two `int`s.
# - And the course-wide rules hold too (notebook 00, "How grading works").
#
# - dtype：由两个 `int` 组成的元组。
# - 另外，全课程通用的规则同样适用（笔记本 00，“评分如何进行”）。
#
# <!-- /rules -->

# %% nbgrader={"grade": false, "grade_id": "moe_parameter_counts", "locked": false, "schema_version": 3, "solution": true, "task": false}
def moe_parameter_counts(dim, moe_inter_dim, n_routed_experts, n_activated_experts, n_shared_experts):
    ### BEGIN SOLUTION
    expert = 3 * dim * moe_inter_dim
    gate = n_routed_experts * dim + n_routed_experts
    return ((n_routed_experts + n_shared_experts) * expert + gate,
            (n_activated_experts + n_shared_experts) * expert + gate)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_moe_parameter_counts", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
from autograder.checks import expect

from autograder.checks import nb10

with nb10.as_graded(moe_parameter_counts):
    got = moe_parameter_counts(8, 4, 6, 2, 1)
    expect(tuple(got) == (7 * 96 + 54, 3 * 96 + 54),
           "dim 8, width 4: each expert has 96 parameters, the gate 54; 6 routed + 1 shared held, 2 + 1 used.",
           "dim 8、宽度 4：每个专家 96 个参数，路由门控 54 个；持有 6 个路由专家 + 1 个共享专家，使用 2 + 1 个。", f"got {got}")
    print("✓ moe_parameter_counts")

# %% nbgrader={"grade": true, "grade_id": "test_moe_parameter_counts_hidden", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
# Hidden tests: they run when your notebook is graded. 隐藏测试：评分时运行。
### BEGIN HIDDEN TESTS
from autograder.checks import nb10
nb10.check_moe_parameter_counts(moe_parameter_counts)
### END HIDDEN TESTS

# %% [markdown]
# The rest of the model: MLA in every layer (the layers of notebook 09), two RMSNorm weights per
# layer and a final one, the dense layers, the token embedding and the output head (`vocab_size x
# dim` each, not tied).
#
# 模型的其余部分：每层的 MLA（笔记本 09 的那些层）、每层两个 RMSNorm 权重和最后一个 RMSNorm、稠密层、词元嵌入和输出头（各为 `vocab_size x dim`，不共享）。

# %%
c = V3
attention = (c["dim"] * c["q_lora_rank"] + c["q_lora_rank"]  # wq_a, q_norm
             + c["q_lora_rank"] * c["n_heads"] * (c["qk_nope_head_dim"] + c["qk_rope_head_dim"])  # wq_b
             + c["dim"] * (c["kv_lora_rank"] + c["qk_rope_head_dim"]) + c["kv_lora_rank"]  # wkv_a, kv_norm
             + c["kv_lora_rank"] * c["n_heads"] * (c["qk_nope_head_dim"] + c["v_head_dim"])  # wkv_b
             + c["n_heads"] * c["v_head_dim"] * c["dim"])  # wo
moe_total, moe_active = moe_parameter_counts(c["dim"], c["moe_inter_dim"], c["n_routed_experts"],
                                             c["n_activated_experts"], c["n_shared_experts"])
dense_ffn = 3 * c["dim"] * c["inter_dim"]
n_moe = c["n_layers"] - c["n_dense_layers"]
embedding = c["vocab_size"] * c["dim"]
body = c["n_layers"] * (attention + 2 * c["dim"]) + c["n_dense_layers"] * dense_ffn + c["dim"]
total = body + n_moe * moe_total + 2 * embedding
active = body + n_moe * moe_active + 2 * embedding
print(f"one MLA layer {attention / 1e6:.1f}M, one MoE layer {moe_total / 1e9:.2f}B ({moe_active / 1e6:.1f}M active)")
print(f"embedding {embedding / 1e9:.2f}B, output head {embedding / 1e9:.2f}B")
print(f"total:  {total / 1e9:.2f}B   (README_WEIGHTS.md: 671B)")
print(f"active: {active / 1e9:.2f}B   (README_WEIGHTS.md: 36.7B, embedding and head included); "
      f"difference {(active - 36.7e9) / 1e9:.2f}B")
# The MTP module (layer 61): one more MLA + MoE block with its two norms, enorm, hnorm, eh_proj
# (2 * dim -> dim) and its own final norm (shared_head.norm); embedding and head are the main model's.
mtp = attention + 2 * c["dim"] + moe_total + 2 * c["dim"] + 2 * c["dim"] * c["dim"] + c["dim"]
print(f"MTP module: {mtp / 1e9:.2f}B of its own (README_WEIGHTS.md: 11.5B unique); "
      f"671B + that + embedding and head counted again: {(total + mtp + 2 * embedding) / 1e9:.1f}B")

# %% [markdown]
# The total lands on the published 671B. The active count is above the published 36.7B by the
# difference printed above (about 2%), and the embedding and the head cannot explain it:
# `README_WEIGHTS.md` includes both in its 36.7B (0.9B each, as printed), as this count does. The
# README does not break its figure down, so which part it counts differently is not known from the
# published material; the technical report and the main README round the figure to 37B.
#
# 总数正好落在公开的 6710 亿上。激活参数量比公开的 367 亿多出上面打印的差值（约 2%），而这个差值不能用嵌入和输出头来解释：`README_WEIGHTS.md` 的 367 亿已经包括了这两者（如上所打印，各 9 亿），本计数也包括了。该 README 没有给出数字的分项，所以仅凭公开材料无法知道它在哪一部分的统计口径不同；技术报告和主 README 把这个数字取整为 370 亿。
#
# The 685B of the released checkpoint adds the multi-token-prediction (MTP) module of notebook 12:
# one more MLA + MoE block, the projection `eh_proj` (`2 * dim -> dim`) and its norms, 11.5B
# parameters of its own by `README_WEIGHTS.md` (the cell printed this count's figure). The module
# shares the embedding and the output head with the main model, it does not have copies; the
# checkpoint file stores the two tables a second time under layer 61's names
# (`model.layers.61.embed_tokens`, `model.layers.61.shared_head.head`), and counting them again is
# what makes the sum printed above about 685B.
#
# 发布的检查点的 6850 亿还包括笔记本 12 中的多词元预测（MTP）模块：再一个 MLA + MoE 块、投影 `eh_proj`（`2 * dim -> dim`）及其归一化，按 `README_WEIGHTS.md` 是 115 亿个它自己的参数（单元格打印了本计数的数字）。该模块与主模型共享嵌入和输出头，并没有副本；检查点文件在第 61 层的名字下（`model.layers.61.embed_tokens`、`model.layers.61.shared_head.head`）把这两张表又存了一遍，再计入一次，才使上面打印的和约为 6850 亿。

# %% [markdown]
# ## What comes next · 接下来
#
# Notebook 11 makes these weights small enough to serve: int8 and DeepSeek-V3's FP8 block
# quantization. Notebook 12 assembles a mini DeepSeek from the same pieces, but it imports the
# course's versions, not yours: MLA from `utils.mla`, and `Expert` and `MoE` (which builds its `Gate`)
# from `utils.moe`, so a mistake left here does not follow you there. What you write there is what
# joins them: the norm, the block, the model and multi-token prediction.
#
# 笔记本 11 让这些权重小到足以部署：int8 以及 DeepSeek-V3 的 FP8 分块量化。笔记本 12 用同样的部件组装一个迷你 DeepSeek，但它导入的是课程的版本，而不是你的：MLA 来自 `utils.mla`，`Expert` 和 `MoE`（由它构建自己的 `Gate`）来自 `utils.moe`，因此这里遗留的错误不会跟到那里。你在那里要写的是把它们连起来的部分：归一化、块、模型和多词元预测。
#
# Sources: N. Shazeer et al., *Outrageously Large Neural Networks: The Sparsely-Gated
# Mixture-of-Experts Layer* (2017); W. Fedus, B. Zoph, N. Shazeer, *Switch Transformers* (2021),
# section 2.2 (the auxiliary loss); N. Shazeer, *GLU Variants Improve Transformer* (2020, SwiGLU);
# D. Dai et al., *DeepSeekMoE* (2024, shared experts); DeepSeek-AI, *DeepSeek-V3 Technical Report*
# (2024), section 2.1.2 (sigmoid gate, auxiliary-loss-free balancing, node-limited routing), section
# 3.2 (experts over 8 nodes in training), section 4.5.2 (the bias against an auxiliary loss, ablated)
# and its README (685B with the MTP module) and `README_WEIGHTS.md` (671B, 36.7B activated, MTP
# module 11.5B, shared embedding and head); the released checkpoint's `model.safetensors.index.json` (layer 61's
# `embed_tokens` and `shared_head.head` stored again); DeepSeek-V3's public inference code,
# `inference/model.py` (`Gate`, `Expert`, `MoE`) and `inference/configs/config_671B.json`; L. Wang
# et al., *Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts* (2024).
#
# 来源：N. Shazeer 等，《Outrageously Large Neural Networks: The Sparsely-Gated Mixture-of-Experts Layer》（2017）；W. Fedus、B. Zoph、N. Shazeer，《Switch Transformers》（2021）第 2.2 节（辅助损失）；N. Shazeer，《GLU Variants Improve Transformer》（2020，SwiGLU）；D. Dai 等，《DeepSeekMoE》（2024，共享专家）；DeepSeek-AI，《DeepSeek-V3 Technical Report》（2024）第 2.1.2 节（sigmoid 路由门控、无辅助损失的负载均衡、节点限制路由）、第 3.2 节（训练时专家分布在 8 个节点上）、第 4.5.2 节（偏置与辅助损失的消融比较）及其 README（含 MTP 模块 6850 亿）和 `README_WEIGHTS.md`（6710 亿、激活 367 亿、MTP 模块 115 亿、共享的嵌入与输出头）；发布的检查点的 `model.safetensors.index.json`（第 61 层的 `embed_tokens` 和 `shared_head.head` 又存了一遍）；DeepSeek-V3 公开推理代码 `inference/model.py`（`Gate`、`Expert`、`MoE`）与 `inference/configs/config_671B.json`；L. Wang 等，《Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts》（2024）。
