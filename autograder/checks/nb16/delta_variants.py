"""Notebook 16's references restated with one known mistake at a time, so that a wrong value can be
named (the checks compare a learner's output with each), and the words for each mistake.

Every variant works in float32 on transformers' layout (B, T, H, d), as utils.linear_attention does;
with all switches at their defaults each gives the reference's numbers."""
import torch

from utils.linear_attention import l2_normalize


def linear_recurrent(q, k, v, read_first=False, scale=True, normalize=False):
    """(out, state) of causal linear attention; read_first: the query reads the state before the
    token's own write; normalize: divided by q·(sum of keys), Katharopoulos et al.'s denominator."""
    B, T, H, d_k = k.shape
    q = q.float() * (d_k ** -0.5 if scale else 1.0)
    k, v = k.float(), v.float()
    state = torch.zeros(B, H, d_k, v.shape[-1])
    key_sum = torch.zeros(B, H, d_k)
    out = torch.empty(B, T, H, v.shape[-1])
    for t in range(T):
        before = (q[:, t, :, None, :] @ state).squeeze(-2)
        state = state + k[:, t, :, :, None] * v[:, t, :, None, :]
        key_sum = key_sum + k[:, t]
        read = before if read_first else (q[:, t, :, None, :] @ state).squeeze(-2)
        out[:, t] = read / (q[:, t] * key_sum).sum(-1, keepdim=True) if normalize else read
    return out, state


def linear_parallel(q, k, v, diagonal=True, future=False, softmax=False, scale=True):
    """((Q Kᵀ) masked) V; diagonal=False: a token does not see itself; future: the mask reversed;
    softmax: a softmax over the masked scores (softmax attention, not linear)."""
    T, d_k = k.shape[1], k.shape[-1]
    q, k, v = (x.float().transpose(1, 2) for x in (q, k, v))
    scores = q @ k.transpose(-1, -2) * (d_k ** -0.5 if scale else 1.0)
    seen = torch.ones(T, T, dtype=torch.bool).tril(0 if diagonal else -1)
    if future:
        seen = seen.T
    if softmax:
        weights = torch.softmax(scores.masked_fill(~seen, float("-inf")), -1)
    else:
        weights = scores.masked_fill(~seen, 0.0)
    return (weights @ v).transpose(1, 2)


def step(state, q, k, v, g, beta, decay_after=False, predict_before_decay=False, beta_on_v_only=False,
         read_before=False, no_exp=False):
    """One gated delta step with one switch per mistake."""
    factor = (g if no_exp else g.exp())[..., None, None]
    old = state
    decayed = state if decay_after else state * factor
    predicted = (k[..., None, :] @ (old if predict_before_decay else decayed)).squeeze(-2)
    correction = beta[..., None] * v - predicted if beta_on_v_only else beta[..., None] * (v - predicted)
    new = decayed + k[..., :, None] * correction[..., None, :]
    if decay_after:
        new = new * factor
    out = (q[..., None, :] @ (decayed if read_before else new)).squeeze(-2)
    return out, new


def rule(q, k, v, g, beta, initial_state=None, output_final_state=False, use_qk_l2norm=False, scale="q",
         l2_after_scale=False, heads="interleave", ignore_initial=False, ignore_l2=False, **step_mistake):
    """recurrent_gated_delta_rule with one switch per mistake: scale "q" (right), "none" or "qk";
    heads "interleave" (key head h serves value heads h r .. h r + r - 1) or "repeat" (h, h + H_k, ...)."""
    H_k, H_v, d_k = k.shape[2], v.shape[2], k.shape[-1]
    q, k, v, g, beta = (x.float() for x in (q, k, v, g, beta))
    s = d_k ** -0.5
    if use_qk_l2norm and not ignore_l2 and not l2_after_scale:
        q, k = l2_normalize(q), l2_normalize(k)
    q = q * (s if scale in ("q", "qk") else 1.0)
    k = k * (s if scale == "qk" else 1.0)
    if use_qk_l2norm and l2_after_scale:
        q, k = l2_normalize(q), l2_normalize(k)
    if H_v != H_k:
        r = H_v // H_k
        q, k = ((x.repeat_interleave(r, 2) if heads == "interleave" else x.repeat(1, 1, r, 1)) for x in (q, k))
    B, T = k.shape[:2]
    state = torch.zeros(B, H_v, d_k, v.shape[-1]) if initial_state is None or ignore_initial else initial_state.float()
    out = torch.empty_like(v)
    for t in range(T):
        out[:, t], state = step(state, q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t], **step_mistake)
    return out, state if output_final_state else None


LINEAR_RECURRENT = {
    "read_first": ("The output of token t must read the state after its own write (S_t = S_(t-1) + k_tᵀ v_t, then o_t = q_t S_t): a token sees itself, as in the causal mask of notebook 04.",
                   "词元 t 的输出必须读取写入它自己之后的状态（先 S_t = S_(t-1) + k_tᵀ v_t，再 o_t = q_t S_t）：和笔记本 04 的因果掩码一样，一个词元能看到它自己。"),
    "scale": ("The queries must be scaled by d_k ** -0.5, as the scores of notebook 03 are.",
              "查询必须乘以 d_k ** -0.5，和笔记本 03 的分数一样。"),
    "normalize": ("This notebook's linear attention has no denominator: o_t = q_t S_t, without dividing by q_t · (sum of the keys) (Katharopoulos et al.'s normalisation, which Gated DeltaNet and KDA drop).",
                  "本笔记本的线性注意力没有分母：o_t = q_t S_t，不除以 q_t ·（键之和）（这是 Katharopoulos 等人的归一化，Gated DeltaNet 和 KDA 都去掉了它）。"),
}
LINEAR_PARALLEL = {
    "diagonal": ("The mask must keep the diagonal: token t sees the keys j <= t, itself included.",
                 "掩码必须保留对角线：词元 t 看到 j <= t 的键，包括它自己。"),
    "future": ("The mask is reversed: token t must see the keys j <= t (a lower triangle), not the later ones.",
               "掩码反了：词元 t 必须看到 j <= t 的键（下三角），而不是之后的键。"),
    "softmax": ("Linear attention has no softmax: multiply the masked scores (zeros above the diagonal) by V directly.",
                "线性注意力没有 softmax：把加了掩码的分数（对角线之上为 0）直接乘以 V。"),
    "scale": ("The scores must be scaled by d_k ** -0.5, as in linear_attention_recurrent.",
              "分数必须乘以 d_k ** -0.5，和 linear_attention_recurrent 一样。"),
}
STEP = {
    "decay_after": ("The decay comes first: S = exp(g) S, then the prediction k S and the write, then the read.",
                    "衰减在最前面：先 S = exp(g) S，再预测 k S 并写入，最后读取。"),
    "predict_before_decay": ("The prediction k S must use the decayed state: it is what the state holds for k when the write happens.",
                             "预测 k S 必须使用衰减之后的状态：这才是写入发生时状态为 k 存放的内容。"),
    "beta_on_v_only": ("beta scales the whole correction: S += kᵀ (beta (v - k S)), not kᵀ (beta v - k S).",
                       "beta 缩放整个修正量：S += kᵀ (beta (v - k S))，而不是 kᵀ (beta v - k S)。"),
    "read_before": ("The output reads the state after the write: o = q S_new.", "输出读取写入之后的状态：o = q S_new。"),
    "no_exp": ("g is a log decay: the state is multiplied by exp(g), a number in (0, 1], not by g.",
               "g 是对数衰减：状态乘以 exp(g)（一个 (0, 1] 之间的数），而不是乘以 g。"),
}
RULE = {  # in this order: with use_qk_l2norm, normalising after the scale gives the numbers of no scale at all
    "l2_after_scale": ("L2-normalise q and k first, then scale the queries by d_k ** -0.5: normalising after the scale undoes it.",
                       "先对 q 和 k 做 L2 归一化，再把查询乘以 d_k ** -0.5：缩放之后再归一化会把缩放抵消掉。"),
    "scale=none": ("The queries must be scaled by d_k ** -0.5 (after the optional L2 normalisation).",
                   "查询必须乘以 d_k ** -0.5（在可选的 L2 归一化之后）。"),
    "scale=qk": ("Only the queries are scaled by d_k ** -0.5, not the keys: the keys write into the state as they are.",
                 "只有查询乘以 d_k ** -0.5，键不乘：键按原样写入状态。"),
    "ignore_l2": ("With use_qk_l2norm=True, q and k must be L2-normalised (x / sqrt(sum x² + 1e-6)) before the scale.",
                  "use_qk_l2norm=True 时，q 和 k 必须在缩放之前做 L2 归一化（x / sqrt(sum x² + 1e-6)）。"),
    "heads=repeat": ("Key head h serves the consecutive value heads h r .. h r + r - 1 (r = H_v // H_k): repeat_interleave, not repeat.",
                     "键头 h 服务于连续的值头 h r .. h r + r - 1（r = H_v // H_k）：用 repeat_interleave，而不是 repeat。"),
    "ignore_initial": ("initial_state is the state before the first token: start from it when it is given.",
                       "initial_state 是第一个词元之前的状态：给出时要从它开始。"),
}


def rule_mistakes(args, kwargs):
    """(outputs, en, zh) of every mistake of the rule (its own and the step's) on these inputs."""
    found = []
    for key, (en, zh) in RULE.items():
        name, _, value = key.partition("=")
        found.append((rule(*args, **kwargs, **{name: value or True}), en, zh))
    for key, (en, zh) in STEP.items():
        found.append((rule(*args, **kwargs, **{key: True}), en, zh))
    return found
