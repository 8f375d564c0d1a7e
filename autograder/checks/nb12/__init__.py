"""Hidden checks of notebook 12, the capstone: a mini DeepSeek and multi-token prediction.

Every module is compared with utils.mini_deepseek / utils.mtp after loading the same
deterministic weights by parameter name (the names are DeepSeek-V3's, so a wrong name is a
checkpoint that would not load). When an output differs, it is compared with the outputs of the
usual mistakes (LayerNorm's mean, eps outside the root, post-norm, a loss not shifted, MTP's
embedding of the wrong token, the paper's concatenation order, ...) so the message names it.
Sizes, weights and probes are in capstone_parts.py, the mistakes' outputs in capstone_mistakes.py,
the harness's families in nb12/contract.py.

Decisions:
- `Block`, `MiniDeepSeek` and `MTPModule` are graded with the course's RMSNorm (and Block) in
  place of the learner's (put back afterwards), and `mtp_forward` with the course's model and MTP modules, so a
  mistake in an earlier exercise costs points once, in that exercise.
- `absorb` is graded by what the caches hold: after a call with absorb=True every MLA layer must
  have filled its latent cache (kv_cache, pe_cache) and nothing else, after absorb=False (the
  default) its per-head key and value cache. Both paths give the same outputs, so an output
  comparison alone cannot see a Block that drops absorb.
- A Block's input in these checks has a large mean and a spread that differs per feature, and
  norm weights differ from one norm to the next, so a skipped or swapped norm shows.
"""
import torch
import torch.nn.functional as F
from torch import nn

import utils.mini_deepseek as ref
import utils.mtp as ref_mtp
import utils.rmsnorm as utils_rmsnorm
from autograder.checks import (graded_checks, Shortcut, call, expect, expect_close, expect_known, expect_linear, expect_tensor, load_state,
                               message, own_module, own_work, randn)
from autograder.checks.nb12.capstone_mistakes import (block_mistakes, ce, expect_depths, mtp_loss_mistakes, mtp_loss_reference,
                                                 mtp_module_mistakes, rmsnorm_mistakes)
from autograder.checks.nb12.capstone_parts import (BLOCK_NORMS, CFG, CFG_TWO_DENSE, MTP_NORMS, block_structure, cache_paths,
                                              course_parts, expect_path, expect_precision_and_gradients, inputs, mtp_module_structure,
                                              listed, mtp_reference, reference, rms, with_weights)
from autograder.checks.nb12.contract import FAMILIES
from autograder.checks.core.harness import same_as_reference, same_as_reference_module


# RMSNorm ---------------------------------------------------------------------------------
def check_RMSNorm(RMSNorm):
    who = "RMSNorm"
    en = ("RMSNorm's rules do not allow F.rms_norm, torch.rms_norm or nn.RMSNorm (they compute this whole exercise), nor the course's "
          "utils.rmsnorm: write y = x * rsqrt(mean(x**2, dim=-1, keepdim=True) + eps) * weight with tensor operations.")
    zh = ("RMSNorm 的规则不允许使用 F.rms_norm、torch.rms_norm 或 nn.RMSNorm（它们会完成本练习的全部工作），也不允许使用课程的 "
          "utils.rmsnorm：请用张量运算写出 y = x * rsqrt(mean(x**2, dim=-1, keepdim=True) + eps) * weight。")
    with own_work(RMSNorm, who, en=en, zh=zh):
        norm = own_module(RMSNorm, 6)
        wide = own_module(RMSNorm, 6, eps=0.25)
    if isinstance(norm, nn.RMSNorm):
        raise Shortcut(message(en, zh, f"RMSNorm subclasses {type(norm).__mro__[1].__name__}, a subclass of nn.RMSNorm"))
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
    loud = (randn(2, 3, 6, seed=121) * 250).to(torch.float16)  # squares up to ~1e6: past float16's largest, 65504
    x_grad = x.clone().requires_grad_(True)
    with own_work(RMSNorm, who, en=en, zh=zh):
        out = call(norm, x, name="RMSNorm.forward")
        out_wide = call(wide, x, name="RMSNorm.forward")
        tiny = call(norm, x * 1e-3, name="RMSNorm.forward")
        half = call(norm, x.to(torch.bfloat16), name="RMSNorm.forward")
        half16 = call(norm, loud, name="RMSNorm.forward")
        with torch.enable_grad():
            graded = call(norm, x_grad, name="RMSNorm.forward")
    expect_tensor(out, "RMSNorm's output", "RMSNorm 的输出")
    expect_known(out, rms(x, ramp, 1e-6), rmsnorm_mistakes(x, ramp, 1e-6),
                 "RMSNorm's output is wrong: y = x * rsqrt(mean(x**2, dim=-1, keepdim=True) + eps) * weight.",
                 "RMSNorm 的输出不对：y = x * rsqrt(mean(x**2, dim=-1, keepdim=True) + eps) * weight。")
    expect_known(out_wide, rms(x, ramp, 0.25), rmsnorm_mistakes(x, ramp, 0.25),
                 "With eps=0.25 RMSNorm's output is wrong: eps goes inside the root, rsqrt(mean(x**2) + eps).",
                 "eps=0.25 时 RMSNorm 的输出不对：eps 应放在根号里面，rsqrt(mean(x**2) + eps)。")
    expect_close(tiny, rms(x * 1e-3, ramp, 1e-6),
                 "For inputs near 1e-3 the default eps shows: it must be 1e-6 (__init__(self, dim, eps=1e-6)).",
                 "输入在 1e-3 附近时默认 eps 的作用就显现出来：它必须是 1e-6（__init__(self, dim, eps=1e-6)）。")
    expect_precision_and_gradients(norm, x, x_grad, graded, half, half16, loud, ramp)
    reference_cls = utils_rmsnorm.RMSNorm  # looked up before own_work blocks it
    with own_work(RMSNorm, who, en=en, zh=zh):  # eps=0.25 and other sizes: the space's points build their own norms
        same_as_reference_module(RMSNorm, reference_cls, (6,), FAMILIES[who], who, grads=True)


# Block -----------------------------------------------------------------------------------
def check_Block(Block):
    who = "Block"
    for cfg, layer_id in ((CFG, 1), (CFG_TWO_DENSE, 1)):  # layer_id == n_dense_layers, and a config where it is dense
        block_structure(Block, cfg, layer_id, who)
    for layer_id, seed in ((0, 200), (2, 210)):
        dense = layer_id < CFG.n_dense_layers
        block = block_structure(Block, CFG, layer_id, who)
        r, weights = reference(ref.Block, CFG, layer_id, seed=seed, norms=BLOCK_NORMS)
        load_state(block, weights, who)
        block.eval()
        x, x3 = inputs(2, 6, seed + 1), inputs(3, 6, seed + 2)
        with own_work(Block, who), course_parts(Block, ("RMSNorm",)), torch.no_grad():
            out = call(block, x, name="Block.forward")
            first = call(block, x[:, :4], 0, name="Block.forward")
            rest = call(block, x[:, 4:], 4, name="Block.forward")
            absorbed = []
            paths_true = cache_paths(block, lambda: absorbed.extend([call(block, x3[:, :4], 0, True, name="Block.forward"),
                                                                     call(block, x3[:, 4:], 4, absorb=True, name="Block.forward")]))
            paths_false = cache_paths(block, lambda: call(block, x3, name="Block.forward"))
        with torch.no_grad():
            expected, expected3 = r(x), r(x3)
        expect_tensor(out, "Block's output", "Block 的输出")
        expect_known(out, expected, lambda: block_mistakes(r, x),
                     f"Block's output is wrong ({'dense' if dense else 'MoE'} layer): x = x + attn(attn_norm(x), start_pos), then x = x + ffn(ffn_norm(x)).",
                     f"Block 的输出不对（{'稠密' if dense else 'MoE'} 层）：x = x + attn(attn_norm(x), start_pos)，然后 x = x + ffn(ffn_norm(x))。")
        expect_close(torch.cat([first, rest], dim=1), expected,
                     "Feeding the last 2 tokens with start_pos=4 after the first 4 must give the same outputs as one call: pass start_pos to self.attn.",
                     "先输入前 4 个词元、再以 start_pos=4 输入最后 2 个，结果必须与一次调用相同：把 start_pos 传给 self.attn。")
        expect_path(paths_true, True, "Block.forward(x, start_pos, absorb)", "self.attn", " self.attn")
        expect_path(paths_false, False, "Block.forward(x, start_pos, absorb)", "self.attn", " self.attn")
        expect_close(torch.cat(absorbed, dim=1), expected3,
                     "With absorb=True a prefill of 4 tokens and a call with start_pos=4 must give the outputs of one call: x = x + attn(attn_norm(x), start_pos, absorb).",
                     "absorb=True 时，先预填充 4 个词元、再以 start_pos=4 调用，结果必须与一次调用相同：x = x + attn(attn_norm(x), start_pos, absorb)。")
    reference_cls = ref.Block  # looked up before own_work blocks it
    with own_work(Block, who), course_parts(Block, ("RMSNorm",)):  # a MoE layer; the space's points build dense ones too
        same_as_reference_module(Block, reference_cls, (CFG, 2), FAMILIES[who], who, grads=True, state_seed=1217)


# MiniDeepSeek ----------------------------------------------------------------------------
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
    head = expect_linear(model, "head", CFG.dim, CFG.vocab_size, False, who,
                         "The output head has no bias: nn.Linear(dim, vocab_size, bias=False).", "输出头没有偏置：nn.Linear(dim, vocab_size, bias=False)。")
    expect(head.weight is not embed.weight,
           "DeepSeek-V3 does not tie the head to the embedding: head = nn.Linear(dim, vocab_size, bias=False) keeps a weight of its own.",
           "DeepSeek-V3 没有把输出头与嵌入绑定：head = nn.Linear(dim, vocab_size, bias=False) 有自己的权重。")
    r, weights = reference(ref.MiniDeepSeek, CFG, seed=300, norms=("norm.weight",))
    load_state(model, weights, who)
    model.eval()
    tokens = torch.tensor([[0, 3, 7, 1, 10, 4, 4, 9], [5, 2, 8, 8, 6, 0, 3, 1]])
    absorbed = []
    with own_work(MiniDeepSeek, who), course_parts(MiniDeepSeek), torch.no_grad():
        out = call(model, tokens, name="MiniDeepSeek.forward")
        first = call(model, tokens[:, :5], 0, name="MiniDeepSeek.forward")
        rest = call(model, tokens[:, 5:], 5, name="MiniDeepSeek.forward")
        paths_true = cache_paths(model, lambda: absorbed.extend([call(model, tokens[:1, :5], 0, True, name="MiniDeepSeek.forward"),
                                                                 call(model, tokens[:1, 5:], 5, absorb=True, name="MiniDeepSeek.forward")]))
        paths_false = cache_paths(model, lambda: call(model, tokens[:1], name="MiniDeepSeek.forward"))
    with torch.no_grad():
        expected = r(tokens)
        h = ref.hidden_states(r, tokens)

    def mistakes():
        return [(r.head(h), "The final norm is missing: logits = head(norm(x)).", "缺少最终的 norm：logits = head(norm(x))。"),
                (expected.softmax(-1), "forward returns logits, not probabilities: no softmax (the loss applies it).",
                 "forward 返回的是 logits，不是概率：不要做 softmax（损失函数会做）。"),
                (r.head(r.norm(r.embed(tokens))), "The blocks are not applied: x = block(x, start_pos, absorb) for every block in self.layers.",
                 "没有经过各个 Block：对 self.layers 中的每个 block 执行 x = block(x, start_pos, absorb)。")]
    expect_tensor(out, "MiniDeepSeek's output", "MiniDeepSeek 的输出")
    expect_known(out, expected, mistakes,
                 "MiniDeepSeek's logits are wrong: embed, every block in order, norm, head.",
                 "MiniDeepSeek 的 logits 不对：embed，依次经过每个 block，norm，head。")
    expect_close(torch.cat([first, rest], dim=1), expected,
                 "Feeding tokens 5.. with start_pos=5 after a prefill of 5 must give the same logits as one call: pass start_pos to every block.",
                 "先预填充 5 个词元、再以 start_pos=5 输入其余词元，logits 必须与一次调用相同：把 start_pos 传给每个 block。")
    expect_path(paths_true, True, "MiniDeepSeek.forward(tokens, start_pos, absorb)", "every block", "每个 block")
    expect_path(paths_false, False, "MiniDeepSeek.forward(tokens, start_pos, absorb)", "every block", "每个 block")
    expect_close(torch.cat(absorbed, dim=1), expected[:1],
                 "With absorb=True a prefill and a call with start_pos must give the logits of one call: pass start_pos and absorb to every block.",
                 "absorb=True 时，先预填充、再以 start_pos 调用，logits 必须与一次调用相同：把 start_pos 和 absorb 传给每个 block。")
    reference_cls = ref.MiniDeepSeek  # looked up before own_work blocks it
    with own_work(MiniDeepSeek, who), course_parts(MiniDeepSeek):
        same_as_reference_module(MiniDeepSeek, reference_cls, (CFG,), FAMILIES[who], who, grads=True, state_seed=1245)


# next_token_loss -------------------------------------------------------------------------
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
        (ce(logits, tokens), "The loss is not shifted: position i predicts token i + 1, so compare logits[:, :-1] with tokens[:, 1:].",
         "损失没有错开一位：位置 i 预测词元 i + 1，所以要比较 logits[:, :-1] 与 tokens[:, 1:]。"),
        (ce(logits[:, 1:], tokens[:, :-1]), "The shift goes the wrong way: logits[:, :-1] (every position but the last) predict tokens[:, 1:].",
         "错位的方向反了：应由 logits[:, :-1]（除最后一个以外的位置）预测 tokens[:, 1:]。"),
        (F.cross_entropy(logits[:, :-1].reshape(-1, 7), tokens[:, 1:].reshape(-1), reduction="sum"),
         "The loss is a sum: take the mean over every predicted token.", "损失是求和：应对所有被预测词元取平均。"),
        (ce(logits[:, :-2], tokens[:, 2:]), "The targets are shifted by two: position i predicts token i + 1.",
         "目标错开了两位：位置 i 预测词元 i + 1。"),
    ]
    expect_known(out, ce(logits[:, :-1], tokens[:, 1:]), mistakes,
                 "next_token_loss is wrong: mean cross-entropy of logits[:, :-1] against tokens[:, 1:].",
                 "next_token_loss 不对：logits[:, :-1] 对 tokens[:, 1:] 的平均交叉熵。")
    expect_close(short, ce(logits[:1, :1], tokens[:1, 1:2]),
                 "With 2 tokens there is one prediction: logits[:, 0] against tokens[:, 1].",
                 "只有 2 个词元时只有一个预测：logits[:, 0] 对 tokens[:, 1]。")
    reference_fn = ref.next_token_loss  # looked up before own_work blocks it
    with own_work(next_token_loss, "next_token_loss"):
        same_as_reference(next_token_loss, reference_fn, FAMILIES["next_token_loss"], "next_token_loss", grads=True)


# Multi-token prediction ------------------------------------------------------------------
def check_MTPModule(MTPModule):
    who, layer_id = "MTPModule", CFG.n_layers
    with own_work(MTPModule, who), course_parts(MTPModule, ("Block", "RMSNorm")):
        module = own_module(MTPModule, CFG, layer_id)
    mtp_module_structure(module, who)
    r, weights = reference(ref_mtp.MTPModule, CFG, layer_id, seed=500, norms=MTP_NORMS)
    load_state(module, weights, who)
    module.eval()
    h, e = inputs(2, 6, 501) * 0.3, randn(2, 6, CFG.dim, seed=502) * 3  # different scales: a missing norm shows
    with own_work(MTPModule, who), course_parts(MTPModule, ("Block", "RMSNorm")), torch.no_grad():
        out = call(module, h, e, name="MTPModule.forward")
        first = call(module, h[:, :4], e[:, :4], 0, name="MTPModule.forward")
        rest = call(module, h[:, 4:], e[:, 4:], 4, name="MTPModule.forward")
    with torch.no_grad():
        expected = r(h, e)
    expect_tensor(out, "MTPModule's output", "MTPModule 的输出")
    expect_known(out, expected, lambda: mtp_module_mistakes(r, h, e),
                 "MTPModule's output is wrong: block(eh_proj(cat([enorm(next_embeddings), hnorm(h_prev)], dim=-1)), start_pos).",
                 "MTPModule 的输出不对：block(eh_proj(cat([enorm(next_embeddings), hnorm(h_prev)], dim=-1)), start_pos)。")
    expect_close(torch.cat([first, rest], dim=1), expected,
                 "With start_pos=4 after 4 positions the module must continue its cache: pass start_pos to self.block.",
                 "在 4 个位置之后以 start_pos=4 调用时，模块必须接着使用它的缓存：把 start_pos 传给 self.block。")
    reference_cls = ref_mtp.MTPModule  # looked up before own_work blocks it
    with own_work(MTPModule, who), course_parts(MTPModule, ("Block", "RMSNorm")):
        same_as_reference_module(MTPModule, reference_cls, (CFG, layer_id), FAMILIES[who], who, grads=True, state_seed=1257)


def check_mtp_forward(mtp_forward):
    who, D = "mtp_forward", 3
    reference_fn = ref_mtp.mtp_forward  # looked up before own_work blocks it
    model, modules = mtp_reference(D, seed=600)
    tokens = torch.tensor([[0, 3, 7, 1, 10, 4, 9, 2, 5, 8], [5, 2, 8, 6, 0, 3, 1, 9, 4, 7]])  # (2, 10), distinct per row
    model.train(), modules.train()  # as in a training step: checks.call requires the caller's mode to stay
    with own_work(mtp_forward, who), torch.enable_grad():
        result = call(mtp_forward, model, modules, tokens, name="mtp_forward")
    model.eval(), modules.eval()
    with torch.enable_grad():
        want_logits, want_deep = ref_mtp.mtp_forward(model, modules, tokens)
    expect(isinstance(result, (tuple, list)) and len(result) == 2,
           "mtp_forward returns two things: the main model's logits and the list of each depth's logits.",
           "mtp_forward 返回两样东西：主模型的 logits，以及每个深度的 logits 组成的列表。", f"got {type(result).__name__}")
    logits, deep = result
    expect_tensor(logits, "The main model's logits", "主模型的 logits")
    with torch.no_grad():
        h0 = ref.hidden_states(model, tokens)
    expect_known(logits, want_logits.detach(), [(model.head(h0).detach(), "The main model's logits go through its final norm: model.head(model.norm(h^0)).",
                                                 "主模型的 logits 要经过它的最终归一化：model.head(model.norm(h^0))。")],
                 "The main model's logits are wrong: model.head(model.norm(h^0)) with h^0 = hidden_states(model, tokens).",
                 "主模型的 logits 不对：model.head(model.norm(h^0))，其中 h^0 = hidden_states(model, tokens)。")
    expect(isinstance(deep, (list, tuple)) and len(deep) == D,
           "mtp_forward returns one logits tensor per MTP module: a list of D tensors, depth k's of shape (B, T - k, V).",
           "mtp_forward 为每个 MTP 模块返回一个 logits 张量：D 个张量组成的列表，深度 k 的形状为 (B, T - k, V)。",
           f"{D} modules, got {type(deep).__name__} of length {len(deep) if hasattr(deep, '__len__') else '?'}")
    expect_depths(deep, want_deep, model, modules, tokens)
    with own_work(mtp_forward, who):
        same_as_reference(with_weights(mtp_forward), with_weights(reference_fn), FAMILIES[who], who, grads=True)


def check_mtp_loss(mtp_loss):
    tokens = torch.randint(0, 7, (2, 9), generator=torch.Generator().manual_seed(700))
    deep = [randn(2, 9 - k, 7, seed=700 + k) * 2 for k in (1, 2, 3)]
    with own_work(mtp_loss, "mtp_loss"):
        out = call(mtp_loss, deep, tokens, 0.1, name="mtp_loss")
        default = call(mtp_loss, deep[:2], tokens, name="mtp_loss")
        one = call(mtp_loss, deep[:1], tokens, lam=0.5, name="mtp_loss")
    expect_tensor(out, "mtp_loss's result", "mtp_loss 的结果")
    expect(out.dim() == 0, "mtp_loss returns one number (a 0-d tensor).", "mtp_loss 返回一个数（0 维张量）。", f"shape {tuple(out.shape)}")
    mistakes = mtp_loss_mistakes(deep, tokens)
    expect_known(out, mtp_loss_reference(deep, tokens, 0.1), mistakes,
                 "mtp_loss is wrong: lam / D * sum over k of cross_entropy(mtp_logits[k-1][:, :-1], tokens[:, k + 1:]).",
                 "mtp_loss 不对：lam / D * 对 k 求和 cross_entropy(mtp_logits[k-1][:, :-1], tokens[:, k + 1:])。")
    expect_close(default, mtp_loss_reference(deep[:2], tokens, 0.3), "The default lam must be 0.3 (DeepSeek-V3's value for most of its training).",
                 "lam 的默认值必须是 0.3（DeepSeek-V3 大部分训练中使用的值）。")
    expect_close(one, mtp_loss_reference(deep[:1], tokens, 0.5), "With one depth (D = 1) the loss is lam * cross_entropy(mtp_logits[0][:, :-1], tokens[:, 2:]).",
                 "只有一个深度（D = 1）时，损失是 lam * cross_entropy(mtp_logits[0][:, :-1], tokens[:, 2:])。")
    reference_fn = ref_mtp.mtp_loss  # looked up before own_work blocks it; "input k" is depth k's logits
    with own_work(mtp_loss, "mtp_loss"):
        same_as_reference(listed(mtp_loss), listed(reference_fn), FAMILIES["mtp_loss"], "mtp_loss", grads=True)


graded_checks(globals())  # device findings are said last (checks/elsewhere.py)
