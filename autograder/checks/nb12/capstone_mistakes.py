"""The outputs of the usual mistakes of notebook 12's exercises, computed with the course's
modules, so that a check whose output differs can name the mistake (see nb12.py); and the
comparison of mtp_forward's depths that names them (expect_depths)."""
import torch
import torch.nn.functional as F

import utils.mini_deepseek as ref
from autograder.checks import expect, expect_known, expect_tensor
from autograder.checks.nb12.capstone_parts import CFG, rms


def rmsnorm_mistakes(x, w, eps):
    centred = x - x.mean(-1, keepdim=True)
    return [
        (rms(centred, w, eps), "Your RMSNorm subtracts the mean (that is LayerNorm): divide x itself by the root of the mean of its squares.",
         "你的 RMSNorm 减去了均值（那是 LayerNorm）：应直接把 x 除以其平方均值的平方根。"),
        (x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w,
         "eps is outside the square root: compute rsqrt(mean(x**2) + eps), eps added to the mean of squares.",
         "eps 放在了平方根外面：应计算 rsqrt(mean(x**2) + eps)，eps 加在平方均值上。"),
        (rms(x, 1.0, eps), "The output is not multiplied by self.weight.", "输出没有乘以 self.weight。"),
        (x / x.norm(dim=-1, keepdim=True) * w, "You divided by the vector's length, not by its root MEAN square: take the mean of x**2 over the last axis.",
         "你除以的是向量的长度，而不是均方根：对最后一维的 x**2 取平均。"),
        (rms(x, w, 1e-6), "RMSNorm ignores the eps it was given: store eps in __init__ and use it in forward.",
         "RMSNorm 忽略了传入的 eps：在 __init__ 中保存 eps，并在 forward 中使用它。"),
    ]


def block_mistakes(r, x):
    with torch.no_grad():
        post = r.attn_norm(x + r.attn(x))
        post = r.ffn_norm(post + r.ffn(post))
        shared = x + r.attn(r.attn_norm(x))
        shared = shared + r.ffn(r.attn_norm(shared))
        no_res = r.attn(r.attn_norm(x))
        no_res = no_res + r.ffn(r.ffn_norm(no_res))
        no_ffn_res = x + r.attn(r.attn_norm(x))
        no_ffn_res = r.ffn(r.ffn_norm(no_ffn_res))
        ffn_first = x + r.ffn(r.ffn_norm(x))
        ffn_first = ffn_first + r.attn(r.attn_norm(ffn_first))
        parallel = x + r.attn(r.attn_norm(x)) + r.ffn(r.ffn_norm(x))
    return [
        (post, "Your Block is post-norm (norm after the residual add): DeepSeek is pre-norm, x = x + attn(attn_norm(x)), then x = x + ffn(ffn_norm(x)).",
         "你的 Block 是后归一化（在残差相加之后做归一化）：DeepSeek 是前归一化，x = x + attn(attn_norm(x))，然后 x = x + ffn(ffn_norm(x))。"),
        (shared, "The feed-forward sublayer must read ffn_norm(x), not attn_norm(x): each sublayer has its own norm.",
         "前馈子层必须读取 ffn_norm(x)，而不是 attn_norm(x)：每个子层有自己的归一化。"),
        (no_res, "The attention sublayer's residual is missing: x = x + attn(attn_norm(x)), the input is added back.",
         "注意力子层缺少残差：x = x + attn(attn_norm(x))，要把输入加回去。"),
        (no_ffn_res, "The feed-forward sublayer's residual is missing: x = x + ffn(ffn_norm(x)).",
         "前馈子层缺少残差：x = x + ffn(ffn_norm(x))。"),
        (ffn_first, "Attention comes first, then the feed-forward layer.", "先做注意力，再做前馈层。"),
        (parallel, "The sublayers run one after the other: the feed-forward layer reads x AFTER attention's output was added.",
         "两个子层是先后执行的：前馈层读取的是加上注意力输出之后的 x。"),
    ]


def mtp_module_mistakes(r, h, e):
    def run(first, second):
        return r.block(r.eh_proj(torch.cat([first, second], dim=-1)))
    with torch.no_grad():
        return [
            (run(r.hnorm(h), r.enorm(e)), "You concatenated in the paper's order [hnorm(h); enorm(e)]: the released weights (and this exercise) put the embedding first, cat([enorm(next_embeddings), hnorm(h_prev)]).",
             "你按论文的顺序 [hnorm(h); enorm(e)] 拼接：发布的权重（以及本练习）把嵌入放在前面，cat([enorm(next_embeddings), hnorm(h_prev)])。"),
            (run(e, r.hnorm(h)), "enorm is missing: normalise the embedding with enorm before the concatenation.",
             "缺少 enorm：拼接之前先用 enorm 归一化嵌入。"),
            (run(r.enorm(e), h), "hnorm is missing: normalise the previous depth's hidden state with hnorm before the concatenation.",
             "缺少 hnorm：拼接之前先用 hnorm 归一化上一深度的隐藏状态。"),
            (run(e, h), "Both norms are missing: cat([enorm(next_embeddings), hnorm(h_prev)]).",
             "两个归一化都缺失了：cat([enorm(next_embeddings), hnorm(h_prev)])。"),
            (run(r.hnorm(e), r.enorm(h)), "enorm and hnorm are swapped: enorm normalises the embedding, hnorm the hidden state.",
             "enorm 和 hnorm 用反了：enorm 归一化嵌入，hnorm 归一化隐藏状态。"),
            (run(r.enorm(e), r.hnorm(h)) + h, "MTPModule returns the block's output, with no extra residual from h_prev.",
             "MTPModule 直接返回 block 的输出，不要再加上来自 h_prev 的残差。"),
        ]


# mtp_forward: each mistake is a whole chain, (model, modules, tokens) -> list of depth logits ----
def _chain(model, modules, tokens, embedded, h0=None, reads_h0=False, out=None):
    """A variant of the chain: embedded(k, h_prev) gives depth k's inputs (hidden state, embeddings)."""
    h0 = ref.hidden_states(model, tokens) if h0 is None else h0
    out = out or (lambda h: model.head(model.norm(h)))
    h, logits = h0, []
    for k, module in enumerate(modules, start=1):
        prev = h0[:, :h0.shape[1] - k + 1] if reads_h0 else h  # the positions depth k - 1 has
        h = module(*embedded(k, prev))
        logits.append(out(h))
    return logits


def mtp_forward_mistakes(model, modules, tokens):
    embed, T = model.embed, tokens.shape[1]

    def aligned(shift):  # embeddings of tokens[:, k + shift:], the hidden state cut to their length
        def embedded(k, h):
            e = embed(tokens[:, k + shift:])
            return h[:, :e.shape[1]], e
        return embedded

    def right(k, h):
        return h[:, :-1], embed(tokens[:, k:])

    early_en = "Depth k at position i must read the embedding of token i + k, tokens[:, k:]: yours reads token i + k - 1, which position i already had."
    early_zh = "深度 k 在位置 i 必须读取词元 i + k 的嵌入，即 tokens[:, k:]：你读取的是词元 i + k - 1，位置 i 已经有它了。"
    with torch.no_grad():
        h0 = ref.hidden_states(model, tokens)
        unit = ref.RMSNorm(CFG.dim)
        return [
            (_chain(model, modules, tokens, lambda k, h: (h[:, :-1], embed(tokens[:, k - 1:T - 1]))), early_en, early_zh),
            (_chain(model, modules, tokens, aligned(-1)), early_en, early_zh),
            (_chain(model, modules, tokens, aligned(1)),
             "Depth k at position i must read the embedding of token i + k, tokens[:, k:]: yours reads token i + k + 1, the very token it must predict.",
             "深度 k 在位置 i 必须读取词元 i + k 的嵌入，即 tokens[:, k:]：你读取的是词元 i + k + 1，正是它要预测的那个词元。"),
            (_chain(model, modules, tokens, lambda k, h: (h[:, :-1], embed(tokens[:, 1:h.shape[1]]))),
             "Depth k at position i must read the embedding of token i + k, tokens[:, k:]: yours reads tokens[:, 1:] at every depth (right for k = 1 only).",
             "深度 k 在位置 i 必须读取词元 i + k 的嵌入，即 tokens[:, k:]：你在每个深度都读取 tokens[:, 1:]（只在 k = 1 时正确）。"),
            (_chain(model, modules, tokens, right, h0=model.norm(h0)),
             "h^0 is the main model's last hidden state BEFORE its final norm (hidden_states(model, tokens)), not model.norm of it.",
             "h^0 是主模型在最终归一化之前的最后隐藏状态（hidden_states(model, tokens)），而不是经过 model.norm 之后的。"),
            (_chain(model, modules, tokens, lambda k, h: (h[:, 1:], embed(tokens[:, k:]))),
             "Keep positions 0 .. T-k-1 of the previous depth, h^{k-1}[:, :-1] (drop the last one, which has no token i + k), not h[:, 1:].",
             "保留上一深度的位置 0 .. T-k-1，即 h^{k-1}[:, :-1]（去掉最后一个，它没有词元 i + k），而不是 h[:, 1:]。"),
            (_chain(model, modules, tokens, right, reads_h0=True),
             "Depth k reads h^{k-1}, the output of depth k - 1 (DeepSeek-V3's chain is sequential), not the main model's h^0 at every depth.",
             "深度 k 读取的是 h^{k-1}，即深度 k - 1 的输出（DeepSeek-V3 的链是顺序的），而不是在每个深度都读取主模型的 h^0。"),
            (_chain(model, modules, tokens, right, out=model.head),
             "Each depth's logits go through the main model's final norm, then its head: model.head(model.norm(h^k)).",
             "每个深度的 logits 都要先经过主模型的最终归一化，再经过输出头：model.head(model.norm(h^k))。"),
            (_chain(model, modules, tokens, right, out=lambda h: model.head(unit(h))),
             "Each depth's logits go through model.norm, the main model's trained final norm (shared in this course), not a new RMSNorm.",
             "每个深度的 logits 都经过 model.norm，即主模型训练好的最终归一化（本课程中共享），而不是一个新的 RMSNorm。"),
        ]


def ce(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def mtp_loss_reference(mtp_logits, tokens, lam, shift=0, divide=True, per_T=False):
    """lam / D * sum_k CE of depth k (targets moved by `shift`); per_T: the report's sum / T instead of a mean."""
    def depth_loss(k, lg):
        logits, targets = (lg[:, :lg.shape[1] - 1 - shift] if shift >= 0 else lg), tokens[:, k + 1 + shift:]
        if per_T:
            return ce(logits, targets) * targets.numel() / (tokens.shape[0] * tokens.shape[1])
        return ce(logits, targets)
    total = sum(depth_loss(k, lg) for k, lg in enumerate(mtp_logits, start=1))
    return lam / len(mtp_logits) * total if divide else lam * total


def expect_depths(deep, want_deep, model, modules, tokens):
    """Each depth's logits against the course's (a differing one named by the chain's mistakes),
    and the depths' gradient reaching the main model through h^0."""
    known = {}

    def mistakes_at(k):  # the mistakes' chains are run only when an output differs
        def build():
            if not known:
                known["chains"] = mtp_forward_mistakes(model, modules, tokens)
            return [(chain[k - 1].detach() if len(chain) >= k else None, en, zh) for chain, en, zh in known["chains"]]
        return build

    for k, (got, want) in enumerate(zip(deep, want_deep), start=1):
        expect_tensor(got, f"Depth {k}'s logits", f"深度 {k} 的 logits")
        expect_known(got.detach(), want.detach(), mistakes_at(k),
                     f"Depth {k}'s logits are wrong: h^k = mtp_modules[k-1](h^(k-1)[:, :-1], model.embed(tokens[:, k:])), logits = model.head(model.norm(h^k)).",
                     f"深度 {k} 的 logits 不对：h^k = mtp_modules[k-1](h^(k-1)[:, :-1], model.embed(tokens[:, k:]))，logits = model.head(model.norm(h^k))。")
    probe = model.layers[0].attn.wkv_a.weight  # reached only through h^0
    weights = [torch.linspace(-1.0, 1.0, d.numel()).view_as(d) for d in want_deep]
    expect(all(d.requires_grad for d in deep),
           "The depths' logits carry no gradient: do not run the chain under torch.no_grad() or detach h^0 (the MTP loss trains the main model too).",
           "各深度的 logits 不带梯度：不要在 torch.no_grad() 下运行这条链，也不要分离 h^0（MTP 损失也训练主模型）。")
    (got,) = torch.autograd.grad(sum((d * w).sum() for d, w in zip(deep, weights)), [probe], allow_unused=True)
    (want,) = torch.autograd.grad(sum((d * w).sum() for d, w in zip(want_deep, weights)), [probe])
    expect(got is not None and torch.allclose(got, want, atol=1e-5, rtol=1e-3),
           "The depths' logits must pass their gradient to the main model through h^0: do not detach h^0 (in DeepSeek-V3 the MTP loss trains the main model too).",
           "各深度的 logits 必须通过 h^0 把梯度传回主模型：不要分离 h^0（在 DeepSeek-V3 中，MTP 损失也训练主模型）。",
           "no gradient" if got is None else f"largest difference {float((got - want).abs().max()):.3g}")


def mtp_loss_mistakes(deep, tokens):
    """mtp_loss's usual mistakes at lam = 0.1, with their sentences."""
    return [
        (mtp_loss_reference(deep, tokens, 0.1, shift=-1), "The targets are shifted one too few: position i of depth k predicts token i + k + 1, so compare logits[:, :-1] with tokens[:, k + 1:].",
         "目标少错开了一位：深度 k 的位置 i 预测词元 i + k + 1，所以要比较 logits[:, :-1] 与 tokens[:, k + 1:]。"),
        (mtp_loss_reference(deep, tokens, 0.1, shift=1), "The targets are shifted one too many: position i of depth k predicts token i + k + 1, not i + k + 2.",
         "目标多错开了一位：深度 k 的位置 i 预测词元 i + k + 1，而不是 i + k + 2。"),
        (mtp_loss_reference(deep, tokens, 0.1, divide=False), "The sum over depths is not divided by D: the loss is lam / D * sum_k L_k.",
         "对各深度的求和没有除以 D：损失是 lam / D * sum_k L_k。"),
        (mtp_loss_reference(deep, tokens, 1.0), "lam is ignored: multiply by lam (DeepSeek-V3 used 0.3, then 0.1).",
         "忽略了 lam：要乘以 lam（DeepSeek-V3 先用 0.3，后用 0.1）。"),
        (mtp_loss_reference(deep, tokens, 0.1, per_T=True), "You divided each depth's sum by T, as the report writes L_k: this course takes the mean over the positions that have a target (F.cross_entropy's mean).",
         "你像报告中的 L_k 那样把每个深度的和除以 T：本课程对有目标的位置取平均（F.cross_entropy 的平均）。"),
    ]
