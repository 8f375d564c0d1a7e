"""Solutions of notebook 12 that grading must reject (WRONG) or accept (RIGHT).

The classes here build on a correct RMSNorm and Block of this file (named so that the notebook's
names resolve to them), as a learner's later exercises build on their earlier ones.
"""
import torch
import torch.nn.functional as F
from torch import nn

import utils.rmsnorm
from utils.mini_deepseek import hidden_states
from utils.mla import MultiHeadLatentAttention
from utils.moe import MoE, Expert


# RMSNorm ---------------------------------------------------------------------------------
class RMSNorm(nn.Module):  # right, and the base of the classes below
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).to(x.dtype)


class NormLayerNorm(RMSNorm):
    def forward(self, x):
        c = x - x.mean(-1, keepdim=True)
        return c * torch.rsqrt(c.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class NormEpsOutside(RMSNorm):
    def forward(self, x):
        return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + self.eps) * self.weight


class NormNoWeight(RMSNorm):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class NormL2(RMSNorm):
    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True) * self.weight


class NormIgnoresEps(RMSNorm):
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class NormDefaultEps5(RMSNorm):
    def __init__(self, dim, eps=1e-5):
        super().__init__(dim, eps)


class NormHalfPrecision(RMSNorm):
    def forward(self, x):
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight).float()


class NormHalfArithmetic(RMSNorm):  # DeepSeek-V3's own code norms in the input's dtype; the contract says float32
    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.to(x.dtype)


class NormWeightData(RMSNorm):
    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.data).to(x.dtype)


class NormTorch(nn.RMSNorm):
    def __init__(self, dim, eps=1e-6):
        super().__init__(dim, eps=eps)


class NormFunctional(RMSNorm):
    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class NormWithBias(RMSNorm):
    def __init__(self, dim, eps=1e-6):
        super().__init__(dim, eps)
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        return super().forward(x) + self.bias


class NormDivideSqrt(nn.Module):  # right: sqrt and division, float32 by hand
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        x32 = x.to(torch.float32)
        rms = torch.sqrt((x32 * x32).sum(-1, keepdim=True) / x.shape[-1] + self.eps)
        return (self.weight * (x32 / rms)).type_as(x)


# Block -----------------------------------------------------------------------------------
def _ffn(cfg, layer_id):
    if layer_id < cfg.n_dense_layers:
        return Expert(cfg.dim, cfg.inter_dim)
    return MoE(cfg.dim, cfg.moe_inter_dim, cfg.n_routed_experts, cfg.n_activated_experts, cfg.n_shared_experts,
               cfg.n_expert_groups, cfg.n_limited_groups, cfg.score_func, cfg.route_scale)


class Block(nn.Module):  # right
    def __init__(self, cfg, layer_id):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(cfg.dim), MultiHeadLatentAttention(cfg.mla())
        self.ffn_norm, self.ffn = RMSNorm(cfg.dim), _ffn(cfg, layer_id)

    def forward(self, x, start_pos=0, absorb=False):
        x = x + self.attn(self.attn_norm(x), start_pos, absorb)
        return x + self.ffn(self.ffn_norm(x))


class BlockFfnNoGrad(Block):  # the feed-forward sublayer never trains
    def forward(self, x, start_pos=0, absorb=False):
        x = x + self.attn(self.attn_norm(x), start_pos, absorb)
        with torch.no_grad():
            update = self.ffn(self.ffn_norm(x))
        return x + update


class BlockPostNorm(Block):
    def forward(self, x, start_pos=0, absorb=False):
        x = self.attn_norm(x + self.attn(x, start_pos, absorb))
        return self.ffn_norm(x + self.ffn(x))


class BlockSharedNorm(Block):
    def forward(self, x, start_pos=0, absorb=False):
        x = x + self.attn(self.attn_norm(x), start_pos, absorb)
        return x + self.ffn(self.attn_norm(x))


class BlockNoResidual(Block):
    def forward(self, x, start_pos=0, absorb=False):
        x = self.attn(self.attn_norm(x), start_pos, absorb)
        return x + self.ffn(self.ffn_norm(x))


class BlockParallel(Block):
    def forward(self, x, start_pos=0, absorb=False):
        return x + self.attn(self.attn_norm(x), start_pos, absorb) + self.ffn(self.ffn_norm(x))


class BlockNoStartPos(Block):
    def forward(self, x, start_pos=0, absorb=False):
        x = x + self.attn(self.attn_norm(x))
        return x + self.ffn(self.ffn_norm(x))


class BlockAllMoE(Block):
    def __init__(self, cfg, layer_id):
        super().__init__(cfg, layer_id)
        self.ffn = _ffn(cfg, cfg.n_dense_layers)


class BlockAlwaysAbsorbed(Block):  # the same outputs, but the caller's absorb=False is ignored
    def forward(self, x, start_pos=0, absorb=False):
        h = x + self.attn(self.attn_norm(x), start_pos, absorb=True)
        return h + self.ffn(self.ffn_norm(h))


class BlockDropsAbsorb(Block):
    def forward(self, x, start_pos=0, absorb=False):
        x = x + self.attn(self.attn_norm(x), start_pos)
        return x + self.ffn(self.ffn_norm(x))


class BlockDenseBoundary(Block):  # layer_id == n_dense_layers is already a MoE layer
    def __init__(self, cfg, layer_id):
        super().__init__(cfg, layer_id)
        self.ffn = _ffn(cfg, 0 if layer_id <= cfg.n_dense_layers else layer_id)


class BlockDenseFirstOnly(Block):  # only layer 0 dense, whatever n_dense_layers says
    def __init__(self, cfg, layer_id):
        super().__init__(cfg, layer_id)
        self.ffn = _ffn(cfg, 0 if layer_id == 0 else cfg.n_dense_layers)


class BlockKeywords(Block):  # right: everything by keyword
    def forward(self, x, start_pos=0, absorb=False):
        h = x + self.attn(self.attn_norm(x), start_pos=start_pos, absorb=absorb)
        return h + self.ffn(self.ffn_norm(h))


# MiniDeepSeek ----------------------------------------------------------------------------
class MiniDeepSeek(nn.Module):  # right
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def forward(self, tokens, start_pos=0, absorb=False):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, start_pos, absorb)
        return self.head(self.norm(x))


class ModelNoFinalNorm(MiniDeepSeek):
    def forward(self, tokens, start_pos=0, absorb=False):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, start_pos, absorb)
        return self.head(x)


class ModelFrozenEmbedding(MiniDeepSeek):  # the embedding is read under no_grad: it never trains
    def forward(self, tokens, start_pos=0, absorb=False):
        with torch.no_grad():
            x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, start_pos, absorb)
        return self.head(self.norm(x))


class ModelSoftmax(MiniDeepSeek):
    def forward(self, tokens, start_pos=0, absorb=False):
        return super().forward(tokens, start_pos, absorb).softmax(-1)


class ModelLayerIdZero(MiniDeepSeek):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.layers = nn.ModuleList(Block(cfg, 0) for _ in range(cfg.n_layers))


class ModelHeadBias(MiniDeepSeek):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size)


class ModelDropsAbsorb(MiniDeepSeek):
    def forward(self, tokens, start_pos=0, absorb=False):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x, start_pos)
        return self.head(self.norm(x))


class ModelTiedHead(MiniDeepSeek):
    def __init__(self, cfg):
        super().__init__(cfg)
        self.head.weight = self.embed.weight


class ModelNoStartPos(MiniDeepSeek):
    def forward(self, tokens, start_pos=0, absorb=False):
        x = self.embed(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x))


class ModelSequential(nn.Module):  # right: the blocks called through a loop over named children
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList()
        for i in range(cfg.n_layers):
            self.layers.append(Block(cfg, layer_id=i))
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def forward(self, tokens, start_pos=0, absorb=False):
        h = self.embed(tokens)
        for i in range(len(self.layers)):
            h = self.layers[i](h, start_pos=start_pos, absorb=absorb)
        return self.head(self.norm(h))


# next_token_loss -------------------------------------------------------------------------
def loss_unshifted(logits, tokens):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))


def loss_backwards(logits, tokens):
    return F.cross_entropy(logits[:, 1:].reshape(-1, logits.shape[-1]), tokens[:, :-1].reshape(-1))


def loss_sum(logits, tokens):
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1), reduction="sum")


def loss_shift_two(logits, tokens):
    return F.cross_entropy(logits[:, :-2].reshape(-1, logits.shape[-1]), tokens[:, 2:].reshape(-1))


def loss_transpose(logits, tokens):  # right: (B, V, T) layout
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:])


def loss_by_hand(logits, tokens):  # right: log-softmax and gather
    logp = logits[:, :-1].log_softmax(-1)
    return -logp.gather(-1, tokens[:, 1:, None]).mean()


def loss_shifted_in_place(logits, tokens):  # right value; subtracting the max writes into the caller's logits
    logits -= logits.amax(-1, keepdim=True).detach()
    return F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())


def loss_log_of_softmax(logits, tokens):  # right only while the logits stay small: softmax underflows to 0
    p = logits[:, :-1].softmax(-1)
    return -p.gather(-1, tokens[:, 1:, None]).log().mean()


def loss_in_float32(logits, tokens):  # a float32 loss whatever the logits' dtype
    return F.cross_entropy(logits[:, :-1].float().flatten(0, 1), tokens[:, 1:].flatten())


def loss_float32_cast_back(logits, tokens):  # right: computed in float32, returned in the logits' dtype
    return loss_in_float32(logits, tokens).to(logits.dtype)


# MTPModule -------------------------------------------------------------------------------
class MTPModule(nn.Module):  # right
    def __init__(self, cfg, layer_id):
        super().__init__()
        self.enorm, self.hnorm = RMSNorm(cfg.dim), RMSNorm(cfg.dim)
        self.eh_proj = nn.Linear(2 * cfg.dim, cfg.dim, bias=False)
        self.block = Block(cfg, layer_id)

    def forward(self, h_prev, next_embeddings, start_pos=0):
        return self.block(self.eh_proj(torch.cat([self.enorm(next_embeddings), self.hnorm(h_prev)], -1)), start_pos)


class MTPDetachedNorms(MTPModule):  # the norms' outputs are detached: enorm and hnorm never train
    def forward(self, h_prev, next_embeddings, start_pos=0):
        both = torch.cat([self.enorm(next_embeddings), self.hnorm(h_prev)], -1).detach()
        return self.block(self.eh_proj(both), start_pos)


class MTPPaperOrder(MTPModule):
    def forward(self, h_prev, next_embeddings, start_pos=0):
        return self.block(self.eh_proj(torch.cat([self.hnorm(h_prev), self.enorm(next_embeddings)], -1)), start_pos)


class MTPNoNorms(MTPModule):
    def forward(self, h_prev, next_embeddings, start_pos=0):
        return self.block(self.eh_proj(torch.cat([next_embeddings, h_prev], -1)), start_pos)


class MTPNoEnorm(MTPModule):
    def forward(self, h_prev, next_embeddings, start_pos=0):
        return self.block(self.eh_proj(torch.cat([next_embeddings, self.hnorm(h_prev)], -1)), start_pos)


class MTPNoHnorm(MTPModule):
    def forward(self, h_prev, next_embeddings, start_pos=0):
        return self.block(self.eh_proj(torch.cat([self.enorm(next_embeddings), h_prev], -1)), start_pos)


class MTPSwappedNorms(MTPModule):
    def forward(self, h_prev, next_embeddings, start_pos=0):
        return self.block(self.eh_proj(torch.cat([self.hnorm(next_embeddings), self.enorm(h_prev)], -1)), start_pos)


class MTPOwnHead(MTPModule):
    def __init__(self, cfg, layer_id):
        super().__init__(cfg, layer_id)
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)


class MTPResidual(MTPModule):
    def forward(self, h_prev, next_embeddings, start_pos=0):
        return h_prev + super().forward(h_prev, next_embeddings, start_pos)


class MTPNoStartPos(MTPModule):
    def forward(self, h_prev, next_embeddings, start_pos=0):
        return super().forward(h_prev, next_embeddings)


class MTPProjBias(MTPModule):
    def __init__(self, cfg, layer_id):
        super().__init__(cfg, layer_id)
        self.eh_proj = nn.Linear(2 * cfg.dim, cfg.dim)


class MTPSplitProjection(MTPModule):  # right: the projection of a concatenation is a sum of two products
    def forward(self, h_prev, next_embeddings, start_pos=0):
        d = next_embeddings.shape[-1]
        w_e, w_h = self.eh_proj.weight[:, :d], self.eh_proj.weight[:, d:]
        return self.block(self.enorm(next_embeddings) @ w_e.T + self.hnorm(h_prev) @ w_h.T, start_pos)


# mtp_forward -----------------------------------------------------------------------------
def _depths(model, mtp_modules, tokens, step, h0=None, out=None):
    """The chain with one step changed: step(k, h, tokens) -> (hidden input, embeddings) of depth k."""
    h = hidden_states(model, tokens) if h0 is None else h0
    out = out or (lambda h: model.head(model.norm(h)))
    logits, deep = model.head(model.norm(hidden_states(model, tokens))), []
    for k, module in enumerate(mtp_modules, start=1):
        h = module(*step(k, h, tokens, model))
        deep.append(out(h))
    return logits, deep


def mtp_forward(model, mtp_modules, tokens):  # right
    h = hidden_states(model, tokens)
    logits, mtp_logits = model.head(model.norm(h)), []
    for k, module in enumerate(mtp_modules, start=1):
        h = module(h[:, :-1], model.embed(tokens[:, k:]))
        mtp_logits.append(model.head(model.norm(h)))
    return logits, mtp_logits


def mtp_forward_model_call(model, mtp_modules, tokens):  # right: the main logits from model(tokens), a loop by index
    logits = model(tokens)
    h, T, mtp_logits = hidden_states(model, tokens), tokens.shape[1], []
    for k in range(1, len(mtp_modules) + 1):
        h = mtp_modules[k - 1](h[:, :T - k], model.embed(tokens[:, k:T]))
        mtp_logits.append(model.head(model.norm(h)))
    return logits, mtp_logits


def mtp_forward_one_early(model, mtp_modules, tokens):
    return _depths(model, mtp_modules, tokens, lambda k, h, t, m: (h[:, :-1], m.embed(t[:, k - 1:-1])))


def mtp_forward_early_aligned(model, mtp_modules, tokens):
    def step(k, h, t, m):
        e = m.embed(t[:, k - 1:])
        return h[:, :e.shape[1]], e
    return _depths(model, mtp_modules, tokens, step)


def mtp_forward_late_aligned(model, mtp_modules, tokens):
    def step(k, h, t, m):
        e = m.embed(t[:, k + 1:])
        return h[:, :e.shape[1]], e
    return _depths(model, mtp_modules, tokens, step)


def mtp_forward_always_next(model, mtp_modules, tokens):
    return _depths(model, mtp_modules, tokens, lambda k, h, t, m: (h[:, :-1], m.embed(t[:, 1:h.shape[1]])))


def mtp_forward_h0_after_norm(model, mtp_modules, tokens):
    return _depths(model, mtp_modules, tokens, lambda k, h, t, m: (h[:, :-1], m.embed(t[:, k:])),
                   h0=model.norm(hidden_states(model, tokens)))


def mtp_forward_front_slice(model, mtp_modules, tokens):
    return _depths(model, mtp_modules, tokens, lambda k, h, t, m: (h[:, 1:], m.embed(t[:, k:])))


def mtp_forward_parallel(model, mtp_modules, tokens):  # every depth from h^0, as independent heads
    h0 = hidden_states(model, tokens)
    logits = model.head(model.norm(h0))
    T = tokens.shape[1]
    return logits, [model.head(model.norm(m(h0[:, :T - k], model.embed(tokens[:, k:]))))
                    for k, m in enumerate(mtp_modules, start=1)]


def mtp_forward_no_norm(model, mtp_modules, tokens):
    return _depths(model, mtp_modules, tokens, lambda k, h, t, m: (h[:, :-1], m.embed(t[:, k:])), out=model.head)


def mtp_forward_own_norm(model, mtp_modules, tokens):  # V3's layer 61 has a shared_head.norm; here it is untrained
    norm = RMSNorm(model.embed.weight.shape[1])
    return _depths(model, mtp_modules, tokens, lambda k, h, t, m: (h[:, :-1], m.embed(t[:, k:])),
                   out=lambda h: model.head(norm(h)))


def mtp_forward_detached(model, mtp_modules, tokens):
    return _depths(model, mtp_modules, tokens, lambda k, h, t, m: (h[:, :-1], m.embed(t[:, k:])),
                   h0=hidden_states(model, tokens).detach())


def mtp_forward_embedding_detached(model, mtp_modules, tokens):  # the MTP loss never trains the shared embedding
    return _depths(model, mtp_modules, tokens, lambda k, h, t, m: (h[:, :-1], m.embed(t[:, k:]).detach()))


def mtp_forward_head_frozen(model, mtp_modules, tokens):  # the depths read the shared head's weight detached
    return _depths(model, mtp_modules, tokens, lambda k, h, t, m: (h[:, :-1], m.embed(t[:, k:])),
                   out=lambda h: F.linear(model.norm(h), model.head.weight.detach()))


def mtp_forward_embedding_by_index(model, mtp_modules, tokens):  # right: embedding rows by indexing, depths in a while loop
    h = hidden_states(model, tokens)
    logits, deep, k = model.head(model.norm(h)), [], 0
    while k < len(mtp_modules):
        k += 1
        h = mtp_modules[k - 1](h[:, :-1], model.embed.weight[tokens[:, k:]])
        deep.append(model.head(model.norm(h)))
    return logits, deep


def mtp_forward_no_grad(model, mtp_modules, tokens):
    with torch.no_grad():
        return mtp_forward(model, mtp_modules, tokens)


# mtp_loss --------------------------------------------------------------------------------
def _loss(mtp_logits, tokens, lam, shift=0, divide=True):
    total = 0.0
    for k, lg in enumerate(mtp_logits, start=1):
        V = lg.shape[-1]
        logits = lg if shift < 0 else lg[:, :lg.shape[1] - 1 - shift]
        total = total + F.cross_entropy(logits.reshape(-1, V), tokens[:, k + 1 + shift:].reshape(-1))
    return lam / len(mtp_logits) * total if divide else lam * total


def mtp_loss_too_few(mtp_logits, tokens, lam=0.3):
    return _loss(mtp_logits, tokens, lam, shift=-1)


def mtp_loss_too_many(mtp_logits, tokens, lam=0.3):
    return _loss(mtp_logits, tokens, lam, shift=1)


def mtp_loss_not_divided(mtp_logits, tokens, lam=0.3):
    return _loss(mtp_logits, tokens, lam, divide=False)


def mtp_loss_no_lam(mtp_logits, tokens, lam=0.3):
    return _loss(mtp_logits, tokens, 1.0)


def mtp_loss_default_lam(mtp_logits, tokens, lam=0.1):
    return _loss(mtp_logits, tokens, lam)


def mtp_loss_report_over_T(mtp_logits, tokens, lam=0.3):  # the report's 1/T in front of each depth's sum
    total = 0.0
    for k, lg in enumerate(mtp_logits, start=1):
        V = lg.shape[-1]
        total = total + F.cross_entropy(lg[:, :-1].reshape(-1, V), tokens[:, k + 1:].reshape(-1), reduction="sum") / tokens.numel()
    return lam / len(mtp_logits) * total


def mtp_loss_later_detached(mtp_logits, tokens, lam=0.3):  # depths after the first never train
    return _loss([mtp_logits[0]] + [lg.detach() for lg in mtp_logits[1:]], tokens, lam)


def mtp_loss_stacked(mtp_logits, tokens, lam=0.3):  # right: a mean over depths of per-depth means
    losses = torch.stack([F.cross_entropy(lg[:, :-1].transpose(1, 2), tokens[:, k + 1:])
                          for k, lg in enumerate(mtp_logits, start=1)])
    return lam * losses.mean()


class NormInPlace(RMSNorm):
    """Right values, but for a float32 x, x.float() is x itself: mul_ rescales the caller's tensor."""
    def forward(self, x):
        x32 = x.float()
        x32.mul_(torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps))
        return (x32 * self.weight).to(x.dtype)


_REFERENCE_FORWARD = utils.rmsnorm.RMSNorm.forward  # a function of the reference module, kept under another name


class NormReferenceHelper(RMSNorm):
    """Its forward hands the work to the reference's forward (no reference object is kept by the class)."""
    def forward(self, x):
        return _REFERENCE_FORWARD(self, x)


WRONG = {
    "RMSNorm": {
        # the reference's forward runs inside the learner's / 学习者的 forward 里运行了参考实现的 forward
        "calls the reference's forward through vars()": (NormReferenceHelper, "ran while your code ran"),
        # it rescales the caller's tensor in place / 它原地缩放了调用者的张量
        "normalizes x in place": (NormInPlace, "changed its input x in place"),
        "layer-norm": (NormLayerNorm, "subtracts the mean"),
        "eps-outside-root": (NormEpsOutside, "eps is outside the square root"),
        "no-weight": (NormNoWeight, "not multiplied by self.weight"),
        "l2-norm": (NormL2, "vector's length"),
        "ignores-eps": (NormIgnoresEps, "ignores the eps"),
        "default-eps-1e-5": (NormDefaultEps5, "default eps"),
        "returns-float32": (NormHalfPrecision, "x's dtype"),
        "half-precision-arithmetic": (NormHalfArithmetic, "65504"),
        "weight-data": (NormWeightData, "No gradient reaches RMSNorm's weight"),
        "nn-rmsnorm": (NormTorch, "nn.RMSNorm"),
        "f-rms-norm": (NormFunctional, "do not allow F.rms_norm"),
        "has-bias": (NormWithBias, "exactly one parameter"),
    },
    "Block": {
        "post-norm": (BlockPostNorm, "post-norm"),
        "shared-norm": (BlockSharedNorm, "ffn_norm(x), not attn_norm(x)"),
        "no-residual": (BlockNoResidual, "residual is missing"),
        "parallel": (BlockParallel, "one after the other"),
        "no-start-pos": (BlockNoStartPos, "pass start_pos to self.attn"),
        "all-moe": (BlockAllMoE, "dense feed-forward"),
        "drops-absorb": (BlockDropsAbsorb, "must pass absorb to self.attn"),
        "absorb-always": (BlockAlwaysAbsorbed, "do not fix absorb"),
        "dense-at-n-dense-layers": (BlockDenseBoundary, "layer_id >= n_dense_layers uses a mixture of experts"),
        "dense-layer-0-only": (BlockDenseFirstOnly, "layer_id < n_dense_layers has a dense"),
        "feed-forward under no_grad": (BlockFfnNoGrad, "part of the output does not train"),
    },
    "MiniDeepSeek": {
        "no-final-norm": (ModelNoFinalNorm, "final norm is missing"),
        "softmax": (ModelSoftmax, "not probabilities"),
        "layer-id-zero": (ModelLayerIdZero, "Block(cfg, i)"),
        "head-bias": (ModelHeadBias, "no bias"),
        "no-start-pos": (ModelNoStartPos, "pass start_pos to every block"),
        "drops-absorb": (ModelDropsAbsorb, "must pass absorb to every block"),
        "tied-head": (ModelTiedHead, "does not tie"),
        "embedding under no_grad": (ModelFrozenEmbedding, "No gradient reaches MiniDeepSeek.embed.weight"),
    },
    "next_token_loss": {
        # it shifts the caller's logits in place / 它原地平移了调用者的 logits
        "subtracts the max from logits in place": (loss_shifted_in_place, "changed its input logits in place"),
        "unshifted": (loss_unshifted, "not shifted"),
        "backwards": (loss_backwards, "wrong way"),
        "sum": (loss_sum, "is a sum"),
        "shift-two": (loss_shift_two, "shifted by two"),
        "log of softmax": (loss_log_of_softmax, "logits of order 300"),
        "float32 whatever the dtype": (loss_in_float32, "must follow its input's dtype"),
    },
    "MTPModule": {
        "paper-order": (MTPPaperOrder, "paper's order"),
        "no-norms": (MTPNoNorms, "Both norms are missing"),
        "no-enorm": (MTPNoEnorm, "enorm is missing"),
        "no-hnorm": (MTPNoHnorm, "hnorm is missing"),
        "swapped-norms": (MTPSwappedNorms, "swapped"),
        "own-head": (MTPOwnHead, "of its own"),
        "residual": (MTPResidual, "no extra residual"),
        "no-start-pos": (MTPNoStartPos, "pass start_pos to self.block"),
        "proj-bias": (MTPProjBias, "eh_proj has no bias"),
        "norms detached": (MTPDetachedNorms, "No gradient reaches MTPModule.enorm.weight"),
    },
    "mtp_forward": {
        "embedding-one-early": (mtp_forward_one_early, "reads token i + k - 1"),
        "embedding-one-early-aligned": (mtp_forward_early_aligned, "reads token i + k - 1"),
        "embedding-one-late-aligned": (mtp_forward_late_aligned, "reads token i + k + 1"),
        "embedding-of-next-token-at-every-depth": (mtp_forward_always_next, "tokens[:, 1:] at every depth"),
        "h0-after-final-norm": (mtp_forward_h0_after_norm, "BEFORE its final norm"),
        "h-sliced-at-the-front": (mtp_forward_front_slice, "h^{k-1}[:, :-1]"),
        "every-depth-from-h0": (mtp_forward_parallel, "sequential"),
        "no-final-norm": (mtp_forward_no_norm, "model.head(model.norm(h^k))"),
        "new-output-norm": (mtp_forward_own_norm, "not a new RMSNorm"),
        "detached-h0": (mtp_forward_detached, "do not detach h^0"),
        "no-grad": (mtp_forward_no_grad, "carry no gradient"),
        "embedding-detached": (mtp_forward_embedding_detached, "part of the output does not train"),
        "head-weight-detached": (mtp_forward_head_frozen, "part of the output does not train"),
    },
    "mtp_loss": {
        "targets-one-too-few": (mtp_loss_too_few, "one too few"),
        "targets-one-too-many": (mtp_loss_too_many, "one too many"),
        "not-divided-by-D": (mtp_loss_not_divided, "not divided by D"),
        "lam-ignored": (mtp_loss_no_lam, "lam is ignored"),
        "default-lam-0.1": (mtp_loss_default_lam, "default lam"),
        "report-sum-over-T": (mtp_loss_report_over_T, "as the report writes L_k"),
        "later depths detached": (mtp_loss_later_detached, "No gradient reaches input 2"),
    },
}

RIGHT = {
    "RMSNorm": {"reference-style": RMSNorm, "sqrt-and-divide": NormDivideSqrt},
    "Block": {"reference-style": Block, "keyword-arguments": BlockKeywords},
    "MiniDeepSeek": {"reference-style": MiniDeepSeek, "indexed-loop": ModelSequential},
    "next_token_loss": {"transposed": loss_transpose, "log-softmax-gather": loss_by_hand,
                        "float32 then cast back": loss_float32_cast_back},
    "MTPModule": {"reference-style": MTPModule, "split-projection": MTPSplitProjection},
    "mtp_forward": {"reference-style": mtp_forward, "model-call-and-index-loop": mtp_forward_model_call,
                    "embedding-by-index": mtp_forward_embedding_by_index},
    "mtp_loss": {"stacked-mean": mtp_loss_stacked},
}

from autograder.tests.zoo import nb12_adversary2  # noqa: E402

for _exercise, _entries in nb12_adversary2.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb12_adversary2.RIGHT.items():
    RIGHT[_exercise].update(_entries)

from autograder.tests.zoo import nb12_contracts  # noqa: E402

for _exercise, _entries in nb12_contracts.WRONG.items():
    WRONG[_exercise].update(_entries)
for _exercise, _entries in nb12_contracts.RIGHT.items():
    RIGHT[_exercise].update(_entries)
