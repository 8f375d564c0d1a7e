"""Hidden checks of notebook 12, the capstone: a mini DeepSeek and multi-token prediction.

Every module is compared with utils.mini_deepseek / utils.mtp after loading the same
deterministic weights by parameter name (the names are DeepSeek-V3's, so a wrong name is a
checkpoint that would not load). When an output differs, it is compared with the outputs of the
usual mistakes (LayerNorm's mean, eps outside the root, post-norm, a loss not shifted, MTP's
embedding of the wrong token, the paper's concatenation order, ...) so the message names it.

Decisions:
- `MiniDeepSeek` is graded with the course's Block and RMSNorm in place of the learner's (put
  back afterwards), so a mistake in Block costs points once, in Block.
- The chain over a sequence (which token's embedding depth k reads) is given in the notebook,
  not an exercise of the contract; utils/tests/test_mtp.py proves the reference reads token i + k.
- A Block's input in these checks has a large mean and a spread that differs per feature, and
  norm weights differ from one norm to the next, so a skipped or swapped norm shows.
"""
import contextlib

import torch
import torch.nn.functional as F
from torch import nn

import utils.mini_deepseek as ref
import utils.mtp as ref_mtp
from utils.mla import MultiHeadLatentAttention
from utils.moe import MoE, Expert
from autograder.checks import (Shortcut, call, expect, expect_close, expect_known, expect_linear, expect_tensor, fail,
                               learner_functions, load_state, matches, message, own_module, own_work, randn,
                               seeded_state)

CFG = ref.MiniDeepSeekConfig(vocab_size=11, dim=12, n_layers=3, n_dense_layers=1, inter_dim=20, n_heads=2,
                             q_lora_rank=6, kv_lora_rank=8, qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=6,
                             moe_inter_dim=5, n_routed_experts=4, n_activated_experts=2, n_shared_experts=1,
                             n_expert_groups=2, n_limited_groups=1, score_func="sigmoid", route_scale=1.5,
                             max_seq_len=16)


def _x(B, T, seed, dim=CFG.dim):
    """Inputs with a mean far from 0 and a spread per feature, so norms matter."""
    return randn(B, T, dim, seed=seed) * torch.linspace(0.5, 2.0, dim) + 1.5


def _state(module, seed, norms=()):
    state = seeded_state(module, seed)
    for i, name in enumerate(norms):  # every norm its own weight
        state[name] = 1.0 + (0.4 - 0.25 * i) * torch.linspace(-1.0, 1.0, state[name].numel())
    return state


def _reference(cls, *args, seed, norms=()):
    module = cls(*args)
    state = _state(module, seed, norms)
    module.load_state_dict(state)
    return module.eval(), state


# RMSNorm ---------------------------------------------------------------------------------
def _rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def check_RMSNorm(RMSNorm):
    who = "RMSNorm"
    extra = [(F, "rms_norm"), (F, "layer_norm")] + ([(torch, "rms_norm")] if hasattr(torch, "rms_norm") else [])
    with own_work(RMSNorm, who, extra=extra, en="This exercise asks you to write RMSNorm yourself, not to use utils.rmsnorm, nn.RMSNorm or F.rms_norm.",
                  zh="本练习要求你自己实现 RMSNorm，而不是使用 utils.rmsnorm、nn.RMSNorm 或 F.rms_norm。"):
        norm = own_module(RMSNorm, 6)
        wide = own_module(RMSNorm, 6, eps=0.25)
    if isinstance(norm, nn.RMSNorm):
        raise Shortcut(message("This exercise asks you to write RMSNorm yourself, not to wrap nn.RMSNorm.",
                               "本练习要求你自己实现 RMSNorm，而不是包装 nn.RMSNorm。"))
    params = dict(norm.named_parameters())
    expect(list(params) == ["weight"],
           "RMSNorm has exactly one parameter, weight (no bias, no mean): y = x / sqrt(mean(x**2) + eps) * weight.",
           "RMSNorm 只有一个参数 weight（没有偏置，也不减均值）：y = x / sqrt(mean(x**2) + eps) * weight。",
           f"parameters {sorted(params)}")
    w = params["weight"]
    expect(tuple(w.shape) == (6,) and torch.equal(w.detach(), torch.ones(6)) and w.requires_grad,
           "RMSNorm.weight must be a trainable nn.Parameter of shape (dim,) that starts at ones.",
           "RMSNorm.weight 必须是形状为 (dim,)、初始为全 1 的可训练 nn.Parameter。",
           f"shape {tuple(w.shape)}")
    ramp = 1.0 + 0.5 * torch.linspace(-1.0, 1.0, 6)
    for module in (norm, wide):
        with torch.no_grad():
            module.weight.copy_(ramp)
    x = randn(2, 3, 6, seed=120) * 0.4 + 0.3  # mean far from 0: LayerNorm differs
    with own_work(RMSNorm, who, extra=extra):
        out = call(norm, x, name="RMSNorm.forward")
        out_wide = call(wide, x, name="RMSNorm.forward")
        tiny = call(norm, x * 1e-3, name="RMSNorm.forward")
        half = call(norm, x.to(torch.bfloat16), name="RMSNorm.forward")
    expect_tensor(out, "RMSNorm's output", "RMSNorm 的输出")

    def mistakes(eps):
        centred = x - x.mean(-1, keepdim=True)
        return [
            (_rms(centred, ramp, eps), "Your RMSNorm subtracts the mean (that is LayerNorm): divide x itself by the root of the mean of its squares.",
             "你的 RMSNorm 减去了均值（那是 LayerNorm）：应直接把 x 除以其平方均值的平方根。"),
            (x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * ramp,
             "eps is outside the square root: compute rsqrt(mean(x**2) + eps), eps added to the mean of squares.",
             "eps 放在了平方根外面：应计算 rsqrt(mean(x**2) + eps)，eps 加在平方均值上。"),
            (_rms(x, 1.0, eps), "The output is not multiplied by self.weight.", "输出没有乘以 self.weight。"),
            (x / x.norm(dim=-1, keepdim=True) * ramp, "You divided by the vector's length, not by its root MEAN square: take the mean of x**2 over the last axis.",
             "你除以的是向量的长度，而不是均方根：对最后一维的 x**2 取平均。"),
            (_rms(x, ramp, 1e-6), "RMSNorm ignores the eps it was given: store eps in __init__ and use it in forward.",
             "RMSNorm 忽略了传入的 eps：在 __init__ 中保存 eps，并在 forward 中使用它。"),
        ]
    expect_known(out, _rms(x, ramp, 1e-6), mistakes(1e-6),
                 "RMSNorm's output is wrong: y = x * rsqrt(mean(x**2, dim=-1, keepdim=True) + eps) * weight.",
                 "RMSNorm 的输出不对：y = x * rsqrt(mean(x**2, dim=-1, keepdim=True) + eps) * weight。")
    expect_known(out_wide, _rms(x, ramp, 0.25), mistakes(0.25),
                 "With eps=0.25 RMSNorm's output is wrong: eps goes inside the root, rsqrt(mean(x**2) + eps).",
                 "eps=0.25 时 RMSNorm 的输出不对：eps 应放在根号里面，rsqrt(mean(x**2) + eps)。")
    expect_close(tiny, _rms(x * 1e-3, ramp, 1e-6),
                 "For inputs near 1e-3 the default eps shows: it must be 1e-6 (__init__(self, dim, eps=1e-6)).",
                 "输入在 1e-3 附近时默认 eps 的作用就显现出来：它必须是 1e-6（__init__(self, dim, eps=1e-6)）。")
    expect(isinstance(half, torch.Tensor) and half.dtype == torch.bfloat16,
           "RMSNorm must return x's dtype: compute in float32, then .to(x.dtype) (a bfloat16 input gives a bfloat16 output).",
           "RMSNorm 必须返回与 x 相同的数据类型：用 float32 计算，再 .to(x.dtype)（bfloat16 输入得到 bfloat16 输出）。",
           f"dtype {getattr(half, 'dtype', None)}")
    expect_close(half.float(), _rms(x.to(torch.bfloat16).float(), ramp, 1e-6).to(torch.bfloat16).float(),
                 "With a bfloat16 input RMSNorm must compute in float32 and round once at the end.",
                 "输入为 bfloat16 时，RMSNorm 必须用 float32 计算，只在最后舍入一次。", atol=2e-2, rtol=2e-2)


# Block -----------------------------------------------------------------------------------
BLOCK_NORMS = ("attn_norm.weight", "ffn_norm.weight")


def _block_mistakes(r, x):
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


def check_Block(Block):
    who = "Block"
    for layer_id, seed in ((0, 200), (2, 210)):
        dense = layer_id < CFG.n_dense_layers
        with own_work(Block, who):
            block = own_module(Block, CFG, layer_id)
        for name in ("attn_norm", "ffn_norm"):
            expect(isinstance(getattr(block, name, None), nn.Module),
                   f"Block needs its own {name} (an RMSNorm(dim)).", f"Block 需要自己的 {name}（一个 RMSNorm(dim)）。")
        expect(isinstance(getattr(block, "attn", None), MultiHeadLatentAttention),
               "Block.attn must be MultiHeadLatentAttention(cfg.mla()) from notebook 09.",
               "Block.attn 必须是笔记本 09 的 MultiHeadLatentAttention(cfg.mla())。",
               f"got {type(getattr(block, 'attn', None)).__name__}")
        ffn = getattr(block, "ffn", None)
        if dense:
            expect(isinstance(ffn, Expert) and ffn.w1.out_features == CFG.inter_dim,
                   "A layer with layer_id < n_dense_layers has a dense feed-forward layer: ffn = Expert(dim, inter_dim).",
                   "layer_id < n_dense_layers 的层使用稠密前馈层：ffn = Expert(dim, inter_dim)。",
                   f"layer_id {layer_id}, n_dense_layers {CFG.n_dense_layers}, got {type(ffn).__name__}")
        else:
            expect(isinstance(ffn, MoE),
                   "A layer with layer_id >= n_dense_layers uses a mixture of experts: ffn = MoE(dim, moe_inter_dim, ...) with the config's MoE sizes.",
                   "layer_id >= n_dense_layers 的层使用混合专家：ffn = MoE(dim, moe_inter_dim, ...)，使用配置中的 MoE 大小。",
                   f"layer_id {layer_id}, n_dense_layers {CFG.n_dense_layers}, got {type(ffn).__name__}")
        r, state = _reference(ref.Block, CFG, layer_id, seed=seed, norms=BLOCK_NORMS)
        load_state(block, state, who)
        block.eval()
        x = _x(2, 6, seed + 1)
        with own_work(Block, who), torch.no_grad():
            out = call(block, x, name="Block.forward")
            first = call(block, x[:, :4], 0, name="Block.forward")
            rest = call(block, x[:, 4:], 4, name="Block.forward")
        with torch.no_grad():
            expected = r(x)
        expect_tensor(out, "Block's output", "Block 的输出")
        expect_known(out, expected, lambda: _block_mistakes(r, x),
                     f"Block's output is wrong ({'dense' if dense else 'MoE'} layer): x = x + attn(attn_norm(x), start_pos), then x = x + ffn(ffn_norm(x)).",
                     f"Block 的输出不对（{'稠密' if dense else 'MoE'} 层）：x = x + attn(attn_norm(x), start_pos)，然后 x = x + ffn(ffn_norm(x))。")
        expect_close(torch.cat([first, rest], dim=1), expected,
                     "Feeding the last 2 tokens with start_pos=4 after the first 4 must give the same outputs as one call: pass start_pos to self.attn.",
                     "先输入前 4 个词元、再以 start_pos=4 输入最后 2 个，结果必须与一次调用相同：把 start_pos 传给 self.attn。")


# MiniDeepSeek ----------------------------------------------------------------------------
@contextlib.contextmanager
def course_parts(fn, names=("Block", "RMSNorm")):
    """While grading one class, the learner's other classes are replaced by the course's."""
    saved = []
    try:
        for f in learner_functions(fn):
            namespace = f.__globals__
            for name in names:
                if name in namespace and not any(namespace is s[0] and name == s[1] for s in saved):
                    saved.append((namespace, name, namespace[name]))
                    namespace[name] = getattr(ref, name)
        yield
    finally:
        for namespace, name, value in reversed(saved):
            namespace[name] = value


def check_MiniDeepSeek(MiniDeepSeek):
    who = "MiniDeepSeek"
    with own_work(MiniDeepSeek, who), course_parts(MiniDeepSeek):
        model = own_module(MiniDeepSeek, CFG)
    embed = getattr(model, "embed", None)
    expect(isinstance(embed, nn.Embedding) and tuple(embed.weight.shape) == (CFG.vocab_size, CFG.dim),
           "MiniDeepSeek.embed must be nn.Embedding(vocab_size, dim).", "MiniDeepSeek.embed 必须是 nn.Embedding(vocab_size, dim)。")
    layers = getattr(model, "layers", None)
    expect(isinstance(layers, nn.ModuleList) and len(layers) == CFG.n_layers,
           "MiniDeepSeek.layers must be an nn.ModuleList of n_layers Blocks.", "MiniDeepSeek.layers 必须是包含 n_layers 个 Block 的 nn.ModuleList。",
           f"got {type(layers).__name__} of length {len(layers) if hasattr(layers, '__len__') else '?'}")
    kinds = [type(getattr(layer, "ffn", None)).__name__ for layer in layers]
    expect(kinds == ["Expert"] * CFG.n_dense_layers + ["MoE"] * (CFG.n_layers - CFG.n_dense_layers),
           "Build layer i as Block(cfg, i): its layer_id decides dense (i < n_dense_layers) or MoE.",
           "第 i 层要用 Block(cfg, i) 构造：layer_id 决定它是稠密层（i < n_dense_layers）还是 MoE 层。", f"feed-forward layers {kinds}")
    expect(isinstance(getattr(model, "norm", None), nn.Module),
           "MiniDeepSeek needs a final norm (RMSNorm(dim)) before the head.", "MiniDeepSeek 需要在输出头之前有一个最终的 norm（RMSNorm(dim)）。")
    expect_linear(model, "head", CFG.dim, CFG.vocab_size, False, who,
                  "The output head has no bias: nn.Linear(dim, vocab_size, bias=False).", "输出头没有偏置：nn.Linear(dim, vocab_size, bias=False)。")
    r, state = _reference(ref.MiniDeepSeek, CFG, seed=300, norms=("norm.weight",))
    load_state(model, state, who)
    model.eval()
    tokens = torch.tensor([[0, 3, 7, 1, 10, 4, 4, 9], [5, 2, 8, 8, 6, 0, 3, 1]])
    with own_work(MiniDeepSeek, who), course_parts(MiniDeepSeek), torch.no_grad():
        out = call(model, tokens, name="MiniDeepSeek.forward")
        first = call(model, tokens[:, :5], 0, name="MiniDeepSeek.forward")
        rest = call(model, tokens[:, 5:], 5, name="MiniDeepSeek.forward")
    with torch.no_grad():
        expected = r(tokens)
        h = ref.hidden_states(r, tokens)

    def mistakes():
        return [(r.head(h), "The final norm is missing: logits = head(norm(x)).", "缺少最终的 norm：logits = head(norm(x))。"),
                (expected.softmax(-1), "forward returns logits, not probabilities: no softmax (the loss applies it).",
                 "forward 返回的是 logits，不是概率：不要做 softmax（损失函数会做）。"),
                (r.head(r.norm(r.embed(tokens))), "The blocks are not applied: x = block(x, start_pos) for every block in self.layers.",
                 "没有经过各个 Block：对 self.layers 中的每个 block 执行 x = block(x, start_pos)。")]
    expect_tensor(out, "MiniDeepSeek's output", "MiniDeepSeek 的输出")
    expect_known(out, expected, mistakes,
                 "MiniDeepSeek's logits are wrong: embed, every block in order, norm, head.",
                 "MiniDeepSeek 的 logits 不对：embed，依次经过每个 block，norm，head。")
    expect_close(torch.cat([first, rest], dim=1), expected,
                 "Feeding tokens 5.. with start_pos=5 after a prefill of 5 must give the same logits as one call: pass start_pos to every block.",
                 "先预填充 5 个词元、再以 start_pos=5 输入其余词元，logits 必须与一次调用相同：把 start_pos 传给每个 block。")


# next_token_loss -------------------------------------------------------------------------
def _ce(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def check_next_token_loss(next_token_loss):
    logits = randn(3, 6, 7, seed=400) * 2
    tokens = torch.randint(0, 7, (3, 6), generator=torch.Generator().manual_seed(401))
    with own_work(next_token_loss, "next_token_loss"):
        out = call(next_token_loss, logits, tokens, name="next_token_loss")
        short = call(next_token_loss, logits[:1, :2], tokens[:1, :2], name="next_token_loss")
    expect_tensor(out, "next_token_loss's result", "next_token_loss 的结果")
    expect(out.dim() == 0, "next_token_loss must return one number (a 0-d tensor): the mean over every predicted token.",
           "next_token_loss 必须返回一个数（0 维张量）：对所有被预测词元取平均。", f"shape {tuple(out.shape)}")
    mistakes = [
        (_ce(logits, tokens), "The loss is not shifted: position i predicts token i + 1, so compare logits[:, :-1] with tokens[:, 1:].",
         "损失没有错开一位：位置 i 预测词元 i + 1，所以要比较 logits[:, :-1] 与 tokens[:, 1:]。"),
        (_ce(logits[:, 1:], tokens[:, :-1]), "The shift goes the wrong way: logits[:, :-1] (every position but the last) predict tokens[:, 1:].",
         "错位的方向反了：应由 logits[:, :-1]（除最后一个以外的位置）预测 tokens[:, 1:]。"),
        (F.cross_entropy(logits[:, :-1].reshape(-1, 7), tokens[:, 1:].reshape(-1), reduction="sum"),
         "The loss is a sum: take the mean over every predicted token.", "损失是求和：应对所有被预测词元取平均。"),
        (_ce(logits[:, :-2], tokens[:, 2:]), "The targets are shifted by two: position i predicts token i + 1.",
         "目标错开了两位：位置 i 预测词元 i + 1。"),
    ]
    expect_known(out, _ce(logits[:, :-1], tokens[:, 1:]), mistakes,
                 "next_token_loss is wrong: mean cross-entropy of logits[:, :-1] against tokens[:, 1:].",
                 "next_token_loss 不对：logits[:, :-1] 对 tokens[:, 1:] 的平均交叉熵。")
    expect_close(short, _ce(logits[:1, :1], tokens[:1, 1:2]),
                 "With 2 tokens there is one prediction: logits[:, 0] against tokens[:, 1].",
                 "只有 2 个词元时只有一个预测：logits[:, 0] 对 tokens[:, 1]。")


# Multi-token prediction ------------------------------------------------------------------
MTP_NORMS = ("enorm.weight", "hnorm.weight", "block.attn_norm.weight", "block.ffn_norm.weight")


def _mtp_mistakes(r, h, e):
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


def check_MTPModule(MTPModule):
    who, layer_id = "MTPModule", CFG.n_layers
    with own_work(MTPModule, who), course_parts(MTPModule, ("Block", "RMSNorm")):
        module = own_module(MTPModule, CFG, layer_id)
    own = [n for n, m in module.named_modules() if isinstance(m, nn.Embedding)
           or (isinstance(m, nn.Linear) and m.out_features == CFG.vocab_size)]
    expect(not own, "MTPModule must not have an embedding or output head of its own: it uses the main model's, shared (DeepSeek-V3 shares them between the model and its MTP module).",
           "MTPModule 不能有自己的嵌入层或输出头：它使用主模型的，二者共享（DeepSeek-V3 的主模型与 MTP 模块共享它们）。", f"found {own}")
    for name in ("enorm", "hnorm"):
        expect(isinstance(getattr(module, name, None), nn.Module),
               f"MTPModule needs {name} = RMSNorm(dim).", f"MTPModule 需要 {name} = RMSNorm(dim)。")
    expect_linear(module, "eh_proj", 2 * CFG.dim, CFG.dim, False, who,
                  "eh_proj has no bias: nn.Linear(2 * dim, dim, bias=False).", "eh_proj 没有偏置：nn.Linear(2 * dim, dim, bias=False)。")
    expect(isinstance(getattr(getattr(module, "block", None), "ffn", None), MoE),
           "MTPModule.block must be Block(cfg, layer_id) (with layer_id >= n_dense_layers it has a MoE, as V3's MTP layer 61).",
           "MTPModule.block 必须是 Block(cfg, layer_id)（layer_id >= n_dense_layers 时它含 MoE，与 V3 的 MTP 第 61 层相同）。")
    r, state = _reference(ref_mtp.MTPModule, CFG, layer_id, seed=500, norms=MTP_NORMS)
    load_state(module, state, who)
    module.eval()
    h, e = _x(2, 6, 501) * 0.3, randn(2, 6, CFG.dim, seed=502) * 3  # different scales: a missing norm shows
    with own_work(MTPModule, who), course_parts(MTPModule, ("Block", "RMSNorm")), torch.no_grad():
        out = call(module, h, e, name="MTPModule.forward")
        first = call(module, h[:, :4], e[:, :4], 0, name="MTPModule.forward")
        rest = call(module, h[:, 4:], e[:, 4:], 4, name="MTPModule.forward")
    with torch.no_grad():
        expected = r(h, e)
    expect_tensor(out, "MTPModule's output", "MTPModule 的输出")
    expect_known(out, expected, lambda: _mtp_mistakes(r, h, e),
                 "MTPModule's output is wrong: block(eh_proj(cat([enorm(next_embeddings), hnorm(h_prev)], dim=-1)), start_pos).",
                 "MTPModule 的输出不对：block(eh_proj(cat([enorm(next_embeddings), hnorm(h_prev)], dim=-1)), start_pos)。")
    expect_close(torch.cat([first, rest], dim=1), expected,
                 "With start_pos=4 after 4 positions the module must continue its cache: pass start_pos to self.block.",
                 "在 4 个位置之后以 start_pos=4 调用时，模块必须接着使用它的缓存：把 start_pos 传给 self.block。")


def _mtp_ref(mtp_logits, tokens, lam, shift=0, divide=True):
    total = sum(_ce(lg[:, :lg.shape[1] - 1 - shift] if shift >= 0 else lg, tokens[:, k + 1 + shift:])
                for k, lg in enumerate(mtp_logits, start=1))
    return lam / len(mtp_logits) * total if divide else lam * total


def check_mtp_loss(mtp_loss):
    tokens = torch.randint(0, 7, (2, 9), generator=torch.Generator().manual_seed(700))
    deep = [randn(2, 9 - k, 7, seed=700 + k) * 2 for k in (1, 2, 3)]
    with own_work(mtp_loss, "mtp_loss"):
        out = call(mtp_loss, deep, tokens, 0.1, name="mtp_loss")
        default = call(mtp_loss, deep[:2], tokens, name="mtp_loss")
        one = call(mtp_loss, deep[:1], tokens, lam=0.5, name="mtp_loss")
    expect_tensor(out, "mtp_loss's result", "mtp_loss 的结果")
    expect(out.dim() == 0, "mtp_loss returns one number (a 0-d tensor).", "mtp_loss 返回一个数（0 维张量）。", f"shape {tuple(out.shape)}")
    mistakes = [
        (_mtp_ref(deep, tokens, 0.1, shift=-1), "The targets are shifted one too few: position i of depth k predicts token i + k + 1, so compare logits[:, :-1] with tokens[:, k + 1:].",
         "目标少错开了一位：深度 k 的位置 i 预测词元 i + k + 1，所以要比较 logits[:, :-1] 与 tokens[:, k + 1:]。"),
        (_mtp_ref(deep, tokens, 0.1, shift=1), "The targets are shifted one too many: position i of depth k predicts token i + k + 1, not i + k + 2.",
         "目标多错开了一位：深度 k 的位置 i 预测词元 i + k + 1，而不是 i + k + 2。"),
        (_mtp_ref(deep, tokens, 0.1, divide=False), "The sum over depths is not divided by D: the loss is lam / D * sum_k L_k.",
         "对各深度的求和没有除以 D：损失是 lam / D * sum_k L_k。"),
        (_mtp_ref(deep, tokens, 1.0), "lam is ignored: multiply by lam (DeepSeek-V3 used 0.3, then 0.1).",
         "忽略了 lam：要乘以 lam（DeepSeek-V3 先用 0.3，后用 0.1）。"),
    ]
    expect_known(out, _mtp_ref(deep, tokens, 0.1), mistakes,
                 "mtp_loss is wrong: lam / D * sum over k of cross_entropy(mtp_logits[k-1][:, :-1], tokens[:, k + 1:]).",
                 "mtp_loss 不对：lam / D * 对 k 求和 cross_entropy(mtp_logits[k-1][:, :-1], tokens[:, k + 1:])。")
    expect_close(default, _mtp_ref(deep[:2], tokens, 0.3), "The default lam must be 0.3 (DeepSeek-V3's value for most of its training).",
                 "lam 的默认值必须是 0.3（DeepSeek-V3 大部分训练中使用的值）。")
    expect_close(one, _mtp_ref(deep[:1], tokens, 0.5), "With one depth (D = 1) the loss is lam * cross_entropy(mtp_logits[0][:, :-1], tokens[:, 2:]).",
                 "只有一个深度（D = 1）时，损失是 lam * cross_entropy(mtp_logits[0][:, :-1], tokens[:, 2:])。")
