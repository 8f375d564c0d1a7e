"""What notebook 15's checks compare against: what the usual mistakes of a Triton softmax and a
Triton FlashAttention forward compute, emulated in float64 PyTorch with the kernels' own tiling
(queries in tiles of BLOCK_Q rows, keys in tiles of BLOCK_K from key 0), one switch per mistake
(all switches at their defaults: the right algorithm). When a learner's value is wrong and equals
one of these, the message names the mistake. Each list holds (switches, English, Chinese).
Ground truth itself is PyTorch's: torch.softmax, F.scaled_dot_product_attention and
torch.logsumexp, in float64 (`flash_variants.sdpa`, `flash_variants.scaled_scores`).
"""
import math

import torch

from autograder.checks.nb14.flash_variants import scaled_scores

NEG_INF = float("-inf")
LOG2E = math.log2(math.e)


# triton_softmax --------------------------------------------------------------------------------
def _softmax(x, masked_as_zero=False):
    if masked_as_zero:  # the columns up to the next power of two join each row as zeros
        x = torch.cat([x, x.new_zeros(x.shape[0], (1 << (x.shape[1] - 1).bit_length()) - x.shape[1])], dim=1)
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def softmax_mistakes(x, wide):
    """[(out, en, zh)] for x = wide[:, :N], a view whose rows are wide's (stride wide.shape[1])."""
    M, N = x.shape
    flat = wide.double().flatten()
    return [
        (_softmax(x.double(), masked_as_zero=True)[:, :N],
         "The masked columns past N were loaded as 0 and joined the row's sum: load them with other=float(\"-inf\"), so that exp gives 0.",
         "N 之后被屏蔽的列以 0 载入，进入了这一行的和：请用 other=float(\"-inf\") 载入它们，这样 exp 得到 0。"),
        (_softmax(flat[:M * N].reshape(M, N)),
         "Row r was read from r * N: in a view a row starts r * x.stride(0) elements from the start, so pass the row stride to the kernel.",
         "第 r 行是从 r * N 处读取的：在视图中一行从开头算起位于 r * x.stride(0) 个元素处，请把行步长传给内核。"),
    ]


# the FlashAttention forward kernel ----------------------------------------------------------------
def kernel_variant(q, k, v, causal, bq, bk, rescale_acc=True, rescale_l=True, end="right", offset=True, see_self=True,
                   mask_diagonal=True, keys_past_end=False, scale=None, divide_inside=False, exp2_unscaled=False):
    """out (B, H, T_q, d) in float64 of the FlashAttention-2 forward kernel, with one switch per mistake."""
    q, k, v = (t.double() for t in (q, k, v))
    T_q, T_k, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    shift = T_k - T_q if offset else 0
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    for t0 in range(0, T_q, bq):
        rows = torch.arange(t0, t0 + bq)
        q_t = torch.cat([q[..., t0:t0 + bq, :], q.new_zeros(*q.shape[:-2], max(0, t0 + bq - T_q), d)], dim=-2)
        m = q.new_full(q_t.shape[:-1], NEG_INF)
        l = q.new_zeros(q_t.shape[:-1])
        acc = q.new_zeros(*q_t.shape[:-1], v.shape[-1])
        stop = T_k
        if causal:
            stop = min(T_k, {"right": t0 + bq + shift, "short": t0 + shift, "long": t0 + 2 * bq + shift, "all": T_k,
                                 "by_k": (t0 // bq + 1) * bk + shift}[end])
        for s0 in range(0, stop, bk):
            keys = torch.arange(s0, s0 + bk)
            pad = max(0, s0 + bk - T_k)
            k_t = torch.cat([k[..., s0:s0 + bk, :], k.new_zeros(*k.shape[:-2], pad, d)], dim=-2)
            v_t = torch.cat([v[..., s0:s0 + bk, :], v.new_zeros(*v.shape[:-2], pad, v.shape[-1])], dim=-2)
            s = q_t @ k_t.transpose(-2, -1) * scale
            seen = torch.ones(bq, bk, dtype=torch.bool) if keys_past_end else (keys[None, :] < T_k).expand(bq, bk)
            if causal and mask_diagonal:
                seen = seen & ((keys[None, :] <= rows[:, None] + shift) if see_self else (keys[None, :] < rows[:, None] + shift))
            s = s.masked_fill(~seen, NEG_INF)
            m_new = torch.maximum(m, s.amax(-1))
            base = math.log(2) if exp2_unscaled else 1.0  # exp2(x) = exp(x ln 2)
            alpha = torch.exp((m - m_new) * base)
            p = torch.exp((s - m_new[..., None]) * base)
            l = (alpha * l if rescale_l else l) + p.sum(-1)
            acc = (alpha[..., None] * acc if rescale_acc else acc) + p @ v_t
            if divide_inside:
                acc = acc / l[..., None]
            m = m_new
        result = acc if divide_inside else acc / l[..., None]
        out[..., t0:t0 + bq, :] = result[..., :min(bq, T_q - t0), :]
    return out


_TOP_LEFT = ("The causal mask is top-left aligned: with T_q < T_k the queries are the last T_q positions, so query i sees key j iff "
             "j <= i + (T_k - T_q), in the mask and in the loop's end alike.",
             "因果掩码是左上对齐的：T_q < T_k 时查询是最后 T_q 个位置，所以查询 i 当且仅当 j <= i + (T_k - T_q) 时能看到键 j，掩码和循环的终点都要如此。")
_SCALE = ("The scores must be multiplied by scale = 1/sqrt(d), d = q.shape[-1] (not 1/d, not left unscaled).",
          "分数必须乘以 scale = 1/sqrt(d)，其中 d = q.shape[-1]（不是 1/d，也不能不缩放）。")
_FORWARD_MISTAKES = [
    (dict(rescale_acc=False),
     "The output accumulator was not rescaled when the running maximum grew: acc = acc * alpha[:, None] + tl.dot(p, v), with alpha = exp(m - m_new).",
     "运行最大值变大时输出累加器没有重新缩放：acc = acc * alpha[:, None] + tl.dot(p, v)，其中 alpha = exp(m - m_new)。"),
    (dict(rescale_l=False),
     "The running sum l was not rescaled when the running maximum grew: l = l * alpha + tl.sum(p, axis=1), with alpha = exp(m - m_new).",
     "运行最大值变大时运行和 l 没有重新缩放：l = l * alpha + tl.sum(p, axis=1)，其中 alpha = exp(m - m_new)。"),
    (dict(keys_past_end=True),
     "The keys past T_k in the last key tile took part in the softmax: their masked loads give 0, so their scores must be set to -inf (tl.where(keys < T_k, s, -inf)).",
     "最后一个键分块中 T_k 之后的键参与了 softmax：它们的带掩码加载得到 0，所以必须把它们的分数设为 -inf（tl.where(keys < T_k, s, -inf)）。"),
    (dict(divide_inside=True),
     "The accumulator was divided by the running sum inside the key loop: divide once, after the last key tile.",
     "累加器在键循环内被运行和除了：应在最后一个键分块之后只除一次。"),
    (dict(exp2_unscaled=True),
     "tl.exp2 was applied to natural-log scores: exp(x) = exp2(x * log2(e)), so multiply the scores (and the maximum) by log2(e) = 1.4427 before exp2.",
     "tl.exp2 被用在了以 e 为底的分数上：exp(x) = exp2(x * log2(e))，所以在 exp2 之前要把分数（和最大值）乘以 log2(e) = 1.4427。"),
    (dict(scale=1.0), *_SCALE),
]
_CAUSAL_MISTAKES = [
    (dict(end="short"),
     "The causal key loop stopped one tile early, before the tile on the diagonal: a query tile's keys go up to its last query, "
     "end = min(T_k, (tile + 1) * BLOCK_Q + T_k - T_q).",
     "因果的键循环提前了一个分块结束，漏掉了对角线上的分块：一个查询分块的键一直到它最后一个查询为止，end = min(T_k, (tile + 1) * BLOCK_Q + T_k - T_q)。"),
    (dict(end="by_k"),
     "The causal key loop's end counts queries: end = min(T_k, (tile + 1) * BLOCK_Q + T_k - T_q), with BLOCK_Q, which equals "
     "BLOCK_K only when the two blocks are equal (here block_q > block_k, and the loop stopped before the tile's last query's keys).",
     "因果键循环的终点按查询计数：end = min(T_k, (tile + 1) * BLOCK_Q + T_k - T_q)，用的是 BLOCK_Q，只有两种分块相等时它才等于 "
     "BLOCK_K（这里 block_q > block_k，循环在该分块最后一个查询的键之前就停止了）。"),
    (dict(offset=False), *_TOP_LEFT),
    (dict(see_self=False),
     "Each query must see its own position: key j is blocked only when j > i + (T_k - T_q), so keep keys <= rows + T_k - T_q.",
     "每个查询必须能看到它自己的位置：只有当 j > i + (T_k - T_q) 时才屏蔽键 j，所以要保留 keys <= rows + T_k - T_q。"),
    (dict(mask_diagonal=False),
     "The tiles on the diagonal were not masked: keys after a query must get -inf inside the tile too (keys <= rows + T_k - T_q).",
     "对角线上的分块没有加掩码：在分块内部，查询之后的键也必须设为 -inf（keys <= rows + T_k - T_q）。"),
]


def forward_mistakes(q, k, v, causal, bq, bk):
    """[(out, en, zh)] of each known mistake on these inputs and blocks."""
    cases = _FORWARD_MISTAKES + (_CAUSAL_MISTAKES if causal else [])
    cases = cases + [(dict(scale=1.0 / q.shape[-1]), *_SCALE)]
    return [(kernel_variant(q, k, v, causal, bq, bk, **flags), en, zh) for flags, en, zh in cases]


_BASE = ("lse must be the natural log-sum-exp (what torch.logsumexp gives): with exp2 and base-2 m and l, lse = (m + log2(l)) * ln(2).",
         "lse 必须是以 e 为底的 log-sum-exp（即 torch.logsumexp 给出的值）：用 exp2 且 m、l 以 2 为底时，lse = (m + log2(l)) * ln(2)。")


def lse_mistakes(q, k, causal):
    """[(lse, en, zh)]: the log-sum-exp in the wrong base, or missing a part."""
    s = scaled_scores(q.double(), k.double(), causal)
    right, m = torch.logsumexp(s, -1), s.amax(-1)
    return [(right * LOG2E, *_BASE),  # m2 + log2(l): the whole of it in base 2
            (m * LOG2E + (right - m), *_BASE),  # a base-2 maximum plus a natural log(l)
            (m + (right - m) * LOG2E, *_BASE),  # a natural maximum plus log2(l)
            (right - m, "lse is missing the maximum: the log-sum-exp is m + log(l), because l sums exp(s - m).",
             "lse 缺少最大值：log-sum-exp 是 m + log(l)，因为 l 累加的是 exp(s - m)。"),
            (m, "lse is only the running maximum: the log-sum-exp is m + log(l), add the log of the running sum.",
             "lse 只是运行最大值：log-sum-exp 是 m + log(l)，还要加上运行和的对数。")]
