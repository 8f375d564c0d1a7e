"""Hidden checks of notebook 03, why attention divides its scores by sqrt(d_k).

Variances are statistics: the checks compare them with d and 1 within ±15 % (the sample
variance of 10,000 trials has a relative spread of about 1.5 %, so that is ten standard
deviations), and a correct solution passes whatever order it draws its numbers in.
"""
import math

import torch

import utils.scaled_attention as ref
from autograder.checks import graded_checks, call, expect, expect_close, expect_tensor, fail, generator, own_work, randn
from autograder.checks.nb03.contract import CONTRACTS, FAMILIES, estimate_summary, explain_estimate
from autograder.checks.core.harness import same_as_reference
from autograder.checks.nb03.scaled_attention_mistakes import _named_mistakes, _pair


def _own_work(name, fn):
    """The exercise's utils twin, and what its contract forbids (nb03/contract.py CONTRACTS), may not do the work."""
    banned = [f.shown for f in CONTRACTS[name].forbids]
    rule_en = f" (its rules say: not allowed: {', '.join(banned)})" if banned else ""
    rule_zh = f"（它的规则是：不允许使用 {'、'.join(banned)}）" if banned else ""
    return own_work(fn, name,
                    en=f"This exercise asks you to write {name} yourself, not to call the course's utils.scaled_attention{rule_en}.",
                    zh=f"本练习要求你自己实现 {name}，而不是调用课程的 utils.scaled_attention{rule_zh}。")


def _number(result, what="dot_product_variance"):
    if isinstance(result, torch.Tensor) and result.numel() == 1:
        return float(result)
    expect(isinstance(result, (int, float)) and not isinstance(result, bool),
           f"{what} must return one number, a Python float (use .item() on a 0-d tensor).",
           f"{what} 必须返回一个数，即 Python 浮点数（对 0 维张量使用 .item()）。",
           f"got {type(result).__name__}" + (f" of shape {tuple(result.shape)}" if isinstance(result, torch.Tensor) else ""))
    return float(result)


def check_dot_product_variance(dot_product_variance):
    def run(d, n_trials, scaled, seed):
        return _number(call(dot_product_variance, d, n_trials=n_trials, scaled=scaled,
                            generator=generator(seed), name="dot_product_variance"))

    with _own_work("dot_product_variance", dot_product_variance):
        raw, scaled = run(64, 10_000, False, 0), run(64, 10_000, True, 1)
        small, wide = run(1, 20_000, False, 2), run(300, 5_000, True, 3)
        again, other = run(16, 2_000, False, 0), run(16, 2_000, False, 4)
        repeat = run(16, 2_000, False, 0)
        few = [run(16, 50, False, 10 + s) for s in range(20)]
        few_scaled = [run(16, 200, True, 40 + s) for s in range(10)]
        default = _number(call(dot_product_variance, 8, name="dot_product_variance"))
    evidence = f"d=64: unscaled {raw:.4g}, scaled {scaled:.4g}"
    same = abs(raw - scaled) < 0.05 * max(abs(raw), abs(scaled), 1e-9)
    ignores_scaled = ("The scaled and unscaled variances are the same: divide q·k by sqrt(d) only when scaled=True.",
                      "缩放与不缩放的方差相同：只有在 scaled=True 时才把 q·k 除以 sqrt(d)。", evidence)
    if abs(raw - 64) > 0.15 * 64:
        if same:
            fail(*ignores_scaled)
        if abs(raw) < 0.5:
            fail("The unscaled result is about 0, the mean of q·k: return the variance of the dot products (torch.var), not their mean.",
                 "不缩放的结果约为 0，那是 q·k 的均值：应返回点积的方差 (torch.var)，而不是均值。", evidence)
        if abs(raw - 1) < 0.25:
            fail("The unscaled result is about 1, the variance of single entries of q: take the variance of the dot products q·k, one per trial.",
                 "不缩放的结果约为 1，那是 q 的单个分量的方差：应对每次试验的点积 q·k 求方差。", evidence)
        if 0.02 * 64 < raw < 0.08 * 64:
            fail("The unscaled variance is far below d: draw q and k from a standard normal with torch.randn, not uniformly with torch.rand.",
                 "不缩放的方差远小于 d：应使用 torch.randn 从标准正态分布采样 q 和 k，而不是用 torch.rand 均匀采样。", evidence)
        fail("For d=64 the unscaled variance of q·k must be about 64: sum d products q_i k_i, each of variance 1, then take the variance over trials.",
             "当 d=64 时，不缩放的 q·k 方差应约为 64：把 d 个方差为 1 的乘积 q_i k_i 相加，再对所有试验求方差。", evidence)
    if same:
        fail(*ignores_scaled)
    if abs(scaled - 1) > 0.15:
        if abs(scaled - 1 / 64) < 0.005:
            fail("The scaled variance is about 1/d: you divided q·k by d instead of sqrt(d).",
                 "缩放后的方差约为 1/d：你把 q·k 除以了 d，而不是 sqrt(d)。", evidence)
        fail("With scaled=True the variance must be about 1: divide each dot product by sqrt(d) before taking the variance.",
             "当 scaled=True 时方差应约为 1：在求方差之前把每个点积除以 sqrt(d)。", evidence)
    expect(abs(small - 1) < 0.15 and abs(wide - 1) < 0.15,
           "The variances are wrong for other sizes: use the d you are given (unscaled ≈ d, scaled ≈ 1 for every d).",
           "对其他维度的方差不对：请使用传入的 d（对任何 d，不缩放约为 d，缩放后约为 1）。",
           f"d=1 unscaled {small:.4g}, d=300 scaled {wide:.4g}")
    expect(again == repeat and again != other,
           "The same generator seed must give the same result and another seed a different one: draw q and k with torch.randn(..., generator=generator).",
           "相同的生成器种子必须得到相同的结果，不同的种子得到不同的结果：请用 torch.randn(..., generator=generator) 采样 q 和 k。",
           f"seed 0: {again:.6g} then {repeat:.6g}, seed 4: {other:.6g}")
    spread = torch.tensor(few).std().item()
    expect(spread > 0.05 * 16,
           "With n_trials=50 the estimates barely vary from seed to seed: draw exactly n_trials pairs (q, k), not a fixed number.",
           "当 n_trials=50 时，各个种子的估计几乎不变：请恰好采样 n_trials 对 (q, k)，而不是固定的数量。",
           f"std over 20 seeds {spread:.3g}, expected about {16 * math.sqrt(2 / 50):.3g}")
    scaled_spread = torch.tensor(few_scaled).std().item()
    expect(scaled_spread > 0.3 * math.sqrt(2.375 / 200),
           "With scaled=True the estimates do not vary from seed to seed: return the sample variance of the scaled dot products itself, "
           "not rounded and not the theory's 1.",
           "当 scaled=True 时，各个种子的估计没有变化：应返回缩放后点积的样本方差本身，不要取整，也不要直接返回理论值 1。",
           f"d=16, 200 trials, 10 seeds: {', '.join(f'{v:.4g}' for v in few_scaled)}")
    expect(abs(default - 8) < 0.15 * 8,
           "Called with only d (default n_trials, no generator), the variance must still be about d.",
           "只传入 d（默认 n_trials，没有生成器）时，方差仍应约为 d。", f"d=8: {default:.4g}")
    reference = ref.dot_product_variance  # looked up before own_work blocks it
    with _own_work("dot_product_variance", dot_product_variance):
        same_as_reference(estimate_summary(dot_product_variance), estimate_summary(reference), FAMILIES["dot_product_variance"],
                          "dot_product_variance", explain=explain_estimate)


def check_softmax_jacobian(softmax_jacobian):
    z = torch.tensor([1.5, -0.5, 0.25, 2.0, -1.0])
    p = torch.softmax(z, dim=-1)
    expected = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), z)
    one_hot = torch.tensor([0.0, 0.0, 1.0, 0.0])
    three = torch.softmax(randn(3, seed=30) * 3, dim=-1)
    with _own_work("softmax_jacobian", softmax_jacobian):
        jac = call(softmax_jacobian, p.clone(), name="softmax_jacobian")
        hot = call(softmax_jacobian, one_hot.clone(), name="softmax_jacobian")
        small = call(softmax_jacobian, three.clone(), name="softmax_jacobian")
    expect_tensor(jac, "softmax_jacobian's result", "softmax_jacobian 的结果")
    outer = p[:, None] * p[None, :]
    expect(jac.shape == (5, 5),
           "For p of length n the Jacobian must be an (n, n) matrix: entry (i, j) is d p_i / d z_j.",
           "对长度为 n 的 p，雅可比矩阵必须是 (n, n) 矩阵：第 (i, j) 项是 d p_i / d z_j。",
           f"shape {tuple(jac.shape)}, expected (5, 5)")
    jac = jac.detach().float()
    if torch.allclose(jac, torch.diag(p) - p * p, atol=1e-5):
        fail("p pᵀ is an outer product, entry (i, j) = p_i p_j: use torch.outer(p, p) or p[:, None] * p[None, :], not p * p.",
             "p pᵀ 是外积，第 (i, j) 项为 p_i p_j：请用 torch.outer(p, p) 或 p[:, None] * p[None, :]，而不是 p * p。")
    if torch.allclose(jac, -outer, atol=1e-5):
        fail("The diagonal term diag(p) is missing: d p_i / d z_i = p_i (1 - p_i), so the Jacobian is diag(p) - p pᵀ.",
             "缺少对角项 diag(p)：d p_i / d z_i = p_i (1 - p_i)，所以雅可比矩阵是 diag(p) - p pᵀ。")
    if torch.allclose(jac, outer - torch.diag(p), atol=1e-5):
        fail("The sign is flipped: the Jacobian is diag(p) - p pᵀ, so its diagonal p_i (1 - p_i) is positive.",
             "符号反了：雅可比矩阵是 diag(p) - p pᵀ，它的对角元 p_i (1 - p_i) 为正。")
    if torch.allclose(jac, torch.diag(p), atol=1e-5) or torch.allclose(jac, torch.diag(p * (1 - p)), atol=1e-5):
        fail("The off-diagonal terms are missing: raising z_j lowers every other p_i, d p_i / d z_j = -p_i p_j.",
             "缺少非对角项：增大 z_j 会降低其他每个 p_i，d p_i / d z_j = -p_i p_j。")
    again = torch.softmax(p, dim=-1)
    if torch.allclose(jac, torch.diag(again) - torch.outer(again, again), atol=1e-5):
        fail("The input p is already a probability vector, the softmax output: do not apply softmax to it again.",
             "输入 p 已经是概率向量，即 softmax 的输出：不要再对它做一次 softmax。")
    expect_close(jac.sum(-1), torch.zeros(5),
                 "Every row of the softmax Jacobian must sum to 0, because the probabilities always sum to 1: diag(p) - p pᵀ.",
                 "softmax 雅可比矩阵的每一行之和必须为 0，因为概率之和总是 1：diag(p) - p pᵀ。", atol=1e-5)
    expect_close(jac, jac.T, "The softmax Jacobian must be symmetric: diag(p) - p pᵀ.",
                 "softmax 的雅可比矩阵必须是对称的：diag(p) - p pᵀ。", atol=1e-6)
    expect_close(jac, expected,
                 "The Jacobian differs from the one autograd computes for softmax: entry (i, j) is p_i (δ_ij - p_j).",
                 "雅可比矩阵与 autograd 对 softmax 算出的不同：第 (i, j) 项为 p_i (δ_ij - p_j)。", atol=1e-6)
    expect_close(hot, torch.zeros(4, 4),
                 "For a one-hot p the Jacobian must be all zeros: a saturated softmax passes no gradient.",
                 "当 p 为 one-hot 时雅可比矩阵必须全为 0：饱和的 softmax 不传递梯度。", atol=1e-7)
    expect_close(small, ref.softmax_jacobian(three),
                 "For another length (n=3) the Jacobian is wrong: use the length of p you are given.",
                 "换一个长度 (n=3) 时雅可比矩阵不对：请使用传入的 p 的长度。", atol=1e-6)
    with _own_work("softmax_jacobian", softmax_jacobian):
        same_as_reference(softmax_jacobian, ref.softmax_jacobian, FAMILIES["softmax_jacobian"], "softmax_jacobian", grads=True)


def check_scaled_dot_product_attention(scaled_dot_product_attention):
    fn = scaled_dot_product_attention
    # (B, H, T_q, d_k), (B, H, T_k, d_k), (B, H, T_k, d_v): nothing square, items differ
    q, k, v = randn(2, 3, 4, 8, seed=40), randn(2, 3, 6, 8, seed=41), randn(2, 3, 6, 5, seed=42)
    q2, k2, v2 = q[0, 0], k[0, 0], v[0, 0]  # (T_q, d_k), (T_k, d_k), (T_k, d_v)
    mask = torch.tensor([[False, True, False, True, True, False],
                         [False, False, False, False, False, False],  # a row that sees every key
                         [True, True, True, False, False, True],
                         [False, True, True, True, True, True]])  # (T_q, T_k), broadcast over (B, H)
    padding = torch.tensor([[False] * 6, [False, False, False, True, True, True]])[:, None, None, :]  # (B, 1, 1, T_k)
    big = q * 40  # scores in the hundreds: a softmax without the max subtracted overflows
    with _own_work("scaled_dot_product_attention", fn):
        single = call(fn, q2, k2, v2, name="scaled_dot_product_attention")
        try:
            batched = fn(q, k, v)
        except Exception as e:
            if isinstance(e, AssertionError):
                raise
            fail("Your function works on 2-d inputs but crashes on batched ones (B, H, T, d): transpose only the last two dims with k.transpose(-2, -1) or k.mT, not k.T, which reverses every dim.",
                 "你的函数在二维输入上可以运行，但在批量输入 (B, H, T, d) 上报错：只转置最后两维，用 k.transpose(-2, -1) 或 k.mT，而不是会反转所有维度的 k.T。",
                 f"{type(e).__name__}: {e}")
        masked = call(fn, q, k, v, mask=mask, name="scaled_dot_product_attention")
        padded = call(fn, q, k, v, mask=padding, name="scaled_dot_product_attention")
        custom = call(fn, q, k, v, scale=0.3, name="scaled_dot_product_attention")
        unit = call(fn, q, k, v, scale=1.0, name="scaled_dot_product_attention")
        large = call(fn, big, k, v, name="scaled_dot_product_attention")
    context2, weights2 = _pair(single, q2.shape, k2.shape, v2.shape)
    context, weights = _pair(batched, q.shape, k.shape, v.shape)
    _named_mistakes(weights2, q2, k2, v2.shape[-1])
    _named_mistakes(weights, q, k, v.shape[-1])
    if weights.sum(-2).sub(1).abs().max() < 1e-4 and weights.sum(-1).sub(1).abs().max() > 1e-3:
        fail("The columns of your weights sum to 1, not the rows: apply the softmax over the keys, dim=-1.",
             "你的权重是每一列之和为 1，而不是每一行：应对键做 softmax，dim=-1。")
    expect_close(weights.sum(-1), torch.ones(2, 3, 4),
                 "Every row of the attention weights must sum to 1: softmax over the keys (dim=-1), after scaling.",
                 "注意力权重的每一行之和必须为 1：在缩放之后对键 (dim=-1) 做 softmax。")
    ref_context2, ref_weights2 = ref.scaled_dot_product_attention(q2, k2, v2)
    expect_close(weights2, ref_weights2,
                 "For 2-d inputs with T_q != T_k and d_k != d_v the weights are wrong: softmax(q kᵀ / sqrt(d_k)) over the keys.",
                 "对于 T_q != T_k 且 d_k != d_v 的二维输入，权重不对：应对键做 softmax(q kᵀ / sqrt(d_k))。")
    expect_close(context2, ref_context2,
                 "The weights are right but the context is wrong: multiply the weights (T_q, T_k) by v (T_k, d_v).",
                 "权重正确但上下文不对：应把权重 (T_q, T_k) 乘以 v (T_k, d_v)。")
    ref_context, ref_weights = ref.scaled_dot_product_attention(q, k, v)
    expect_close(weights, ref_weights,
                 "For batched inputs (B, H, T, d) the weights are wrong: every batch item and head must use only its own q and k.",
                 "对于批量输入 (B, H, T, d) 权重不对：每个样本和每个头只能使用它自己的 q 和 k。")
    expect_close(context, ref_context,
                 "For batched inputs the context is wrong: every batch item and head must mix only its own v.",
                 "对于批量输入上下文不对：每个样本和每个头只能混合它自己的 v。")

    m_context, m_weights = _pair(masked, q.shape, k.shape, v.shape)
    _named_mistakes(m_weights, q, k, v.shape[-1], mask)  # first: an inverted mask leaves the fully allowed row with NaN
    if torch.isnan(m_weights).any() or torch.isnan(m_context).any():
        fail("NaN appeared with a mask: 0 * -inf is NaN, so fill the blocked scores with scores.masked_fill(mask, float('-inf')) or torch.where, do not add mask * -inf.",
             "使用掩码时出现了 NaN：0 * -inf 等于 NaN，所以请用 scores.masked_fill(mask, float('-inf')) 或 torch.where 填充被屏蔽的分数，不要加上 mask * -inf。")
    expect(bool((m_weights[..., mask] == 0).all()),
           "Blocked keys (mask True) must get weight exactly 0: fill their scores with -inf before the softmax.",
           "被屏蔽的键（掩码为 True）的权重必须恰好为 0：在 softmax 之前把它们的分数填为 -inf。")
    ref_m_context, ref_m_weights = ref.scaled_dot_product_attention(q, k, v, mask=mask)
    expect_close(m_weights, ref_m_weights,
                 "With a (T_q, T_k) mask on batched inputs the weights are wrong: the mask broadcasts over (B, H), and a row with no blocked key stays a plain softmax.",
                 "在批量输入上使用 (T_q, T_k) 掩码时权重不对：掩码会在 (B, H) 上广播，没有被屏蔽的行仍是普通的 softmax。")
    expect_close(m_context, ref_m_context,
                 "With a mask the context is wrong: multiply the masked weights by v.",
                 "使用掩码时上下文不对：应把掩码后的权重乘以 v。")
    p_context, p_weights = _pair(padded, q.shape, k.shape, v.shape)
    ref_p_context, ref_p_weights = ref.scaled_dot_product_attention(q, k, v, mask=padding)
    expect_close(p_weights, ref_p_weights,
                 "A padding mask of shape (B, 1, 1, T_k) gives wrong weights: let the mask broadcast against the scores (..., T_q, T_k).",
                 "形状为 (B, 1, 1, T_k) 的填充掩码得到的权重不对：让掩码与分数 (..., T_q, T_k) 广播。")
    expect_close(p_context, ref_p_context, "A padding mask gives the wrong context.", "使用填充掩码时上下文不对。")

    c_context, c_weights = _pair(custom, q.shape, k.shape, v.shape)
    u_context, u_weights = _pair(unit, q.shape, k.shape, v.shape)
    if torch.allclose(c_weights, ref_weights, atol=1e-5) or torch.allclose(u_weights, ref_weights, atol=1e-5):
        fail("Your function ignores the scale argument: use scale when it is given, 1 / sqrt(d_k) only when it is None.",
             "你的函数忽略了参数 scale：给定 scale 时就使用它，只有在 scale 为 None 时才用 1 / sqrt(d_k)。")
    for got, scale in ((c_weights, 0.3), (u_weights, 1.0)):
        expect_close(got, ref.scaled_dot_product_attention(q, k, v, scale=scale)[1],
                     f"With scale={scale} the weights are wrong: multiply the scores by scale (do not divide, and do not also divide by sqrt(d_k)).",
                     f"当 scale={scale} 时权重不对：把分数乘以 scale（不要相除，也不要再除以 sqrt(d_k)）。")
    expect_close(c_context, ref.scaled_dot_product_attention(q, k, v, scale=0.3)[0],
                 "With scale=0.3 the context is wrong.", "当 scale=0.3 时上下文不对。")

    l_context, l_weights = _pair(large, q.shape, k.shape, v.shape)
    expect(bool(torch.isfinite(l_weights).all() and torch.isfinite(l_context).all()),
           "Scores in the hundreds give NaN or inf: use a stable softmax that subtracts each row's maximum (torch.softmax or utils.attention.softmax).",
           "分数达到几百时出现了 NaN 或 inf：请使用减去每行最大值的稳定 softmax（torch.softmax 或 utils.attention.softmax）。")
    expect_close(l_weights, ref.scaled_dot_product_attention(big, k, v)[1],
                 "With large scores the weights are wrong: use a stable softmax over the keys.",
                 "分数很大时权重不对：请对键使用稳定的 softmax。", atol=1e-4)
    with _own_work("scaled_dot_product_attention", fn):
        same_as_reference(fn, ref.scaled_dot_product_attention, FAMILIES["scaled_dot_product_attention"],
                          "scaled_dot_product_attention", grads=True)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
