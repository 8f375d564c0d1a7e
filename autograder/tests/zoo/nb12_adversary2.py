"""Solutions of notebook 12 written as an adversarial learner would, second round (merged into nb12's
WRONG and RIGHT): the residual taken from the normed x, start_pos to one block only, the caller's
modules switched to eval mode, depths pooled into one mean, and right solutions written differently."""
import torch, math
import torch.nn.functional as F
from torch import nn
from utils.mini_deepseek import RMSNorm, MultiHeadLatentAttention, Expert, MoE, hidden_states
import utils.mini_deepseek as M
from utils.mtp import MTPModule as CourseMTP

class NormVectorNorm(nn.Module):  # right: through torch.linalg.vector_norm
    def __init__(self, dim, eps=1e-6):
        super().__init__(); self.eps = eps; self.weight = nn.Parameter(torch.ones(dim))
    def forward(self, x):
        x32 = x.float()
        ms = torch.linalg.vector_norm(x32, dim=-1, keepdim=True).pow(2) / x.shape[-1]
        return (self.weight.float() * (x32 / torch.sqrt(ms + self.eps))).to(x.dtype)
class NormWeightInside(nn.Module):  # weight multiplied in x's dtype after casting back
    def __init__(self, dim, eps=1e-6):
        super().__init__(); self.eps = eps; self.weight = nn.Parameter(torch.ones(dim))
    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight.to(x.dtype)
def block_cls(mistake=None):
    class Block(nn.Module):
        def __init__(self, cfg, layer_id):
            super().__init__()
            self.attn_norm = RMSNorm(cfg.dim); self.attn = MultiHeadLatentAttention(cfg.mla()); self.ffn_norm = RMSNorm(cfg.dim)
            self.ffn = Expert(cfg.dim, cfg.inter_dim) if layer_id < cfg.n_dense_layers else MoE(
                cfg.dim, cfg.moe_inter_dim, cfg.n_routed_experts, cfg.n_activated_experts, cfg.n_shared_experts,
                cfg.n_expert_groups, cfg.n_limited_groups, cfg.score_func, cfg.route_scale)
        def forward(self, x, start_pos=0, absorb=False):
            if mistake == "residual from the normed x":
                x = self.attn_norm(x); x = x + self.attn(x, start_pos, absorb)
                return x + self.ffn(self.ffn_norm(x))
            h = self.attn(self.attn_norm(x), start_pos=start_pos, absorb=absorb)
            x = torch.add(x, h)
            return torch.add(x, self.ffn(self.ffn_norm(x)))
    return Block
def model_cls(mistake=None):
    class MiniDeepSeek(nn.Module):
        def __init__(self, cfg):
            super().__init__()
            self.cfg = cfg
            self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
            self.layers = nn.ModuleList(M.Block(cfg, i) for i in range(cfg.n_layers))
            self.norm = RMSNorm(cfg.dim); self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        def forward(self, tokens, start_pos=0, absorb=False):
            x = self.embed(tokens)
            if mistake == "embedding times sqrt(dim)":
                x = x * math.sqrt(self.cfg.dim)
            for i, layer in enumerate(self.layers):
                sp = start_pos if (mistake != "start_pos to the first block only" or i == 0) else 0
                x = layer(x, sp, absorb)
            return self.head(self.norm(x))
    return MiniDeepSeek
def loss_batch_axis(logits, tokens):  # shifts the batch axis, not time
    V = logits.shape[-1]
    return F.cross_entropy(logits[:-1].reshape(-1, V), tokens[1:].reshape(-1))
def loss_ignore0(logits, tokens):  # token 0 taken as padding
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1), ignore_index=0)
def loss_per_sequence(logits, tokens):  # right: mean per sequence, then over the batch
    per = F.cross_entropy(logits[:, :-1].transpose(1, 2), tokens[:, 1:], reduction="none")  # (B, T-1)
    return per.mean(1).mean()
def mtp_loss_pooled(mtp_logits, tokens, lam=0.3):  # one cross-entropy over every depth's positions pooled
    V = mtp_logits[0].shape[-1]
    lg = torch.cat([l[:, :-1].reshape(-1, V) for l in mtp_logits]); tg = torch.cat([tokens[:, k + 1:].reshape(-1) for k in range(1, len(mtp_logits) + 1)])
    return lam * F.cross_entropy(lg, tg)
def mtp_loss_D_is_batch(mtp_logits, tokens, lam=0.3):  # divides by len(tokens), the batch size
    total = sum(F.cross_entropy(l[:, :-1].flatten(0, 1), tokens[:, k + 1:].flatten()) for k, l in enumerate(mtp_logits, 1))
    return lam / len(tokens) * total
def mtp_loss_comprehension(mtp_logits, tokens, lam=0.3):  # right: torch.stack of a comprehension, mean
    return lam * torch.stack([F.cross_entropy(l[:, :-1].flatten(0, 1), tokens[:, k + 1:].flatten()) for k, l in enumerate(mtp_logits, 1)]).mean()
def mtp_cls(mistake=None):
    class MTPModule(nn.Module):
        def __init__(self, cfg, layer_id):
            super().__init__()
            self.enorm = RMSNorm(cfg.dim); self.hnorm = RMSNorm(cfg.dim)
            self.eh_proj = nn.Linear(2 * cfg.dim, cfg.dim, bias=False)
            self.block = M.Block(cfg, 0 if mistake == "Block(cfg, 0)" else layer_id)
        def forward(self, h_prev, next_embeddings, start_pos=0):
            x = torch.cat([self.enorm(next_embeddings), self.hnorm(h_prev)], -1)
            if mistake == "start_pos ignored by block":
                return self.block(self.eh_proj(x))
            return self.block(self.eh_proj(x), start_pos=start_pos)
    return MTPModule
def mtp_forward_eval(model, mtp_modules, tokens):  # switches the caller's model and modules to eval mode
    model.eval(); [m.eval() for m in mtp_modules]
    h = hidden_states(model, tokens); logits = model.head(model.norm(h)); out = []
    for k, m in enumerate(mtp_modules, 1):
        h = m(h[:, :-1], model.embed(tokens[:, k:])); out.append(model.head(model.norm(h)))
    return logits, out
def mtp_forward_narrow(model, mtp_modules, tokens):  # right: narrow and F.embedding
    h = hidden_states(model, tokens); logits = model.head(model.norm(h)); out = []
    T = tokens.shape[1]
    for k, m in enumerate(mtp_modules, 1):
        h = m(h.narrow(1, 0, T - k), F.embedding(tokens.narrow(1, k, T - k), model.embed.weight)); out.append(model.head(model.norm(h)))
    return logits, out

WRONG = {
    "RMSNorm": {"weight multiplied in x's dtype": (NormWeightInside, "The gradient of RMSNorm.weight")},
    "Block": {"residual from the normed x": (block_cls("residual from the normed x"), "x = x + attn(attn_norm(x)")},
    "MiniDeepSeek": {
        "embedding times sqrt(dim)": (model_cls("embedding times sqrt(dim)"), "embed, every block in order"),
        "start_pos to the first block only": (model_cls("start_pos to the first block only"), "pass start_pos to every block"),
    },
    "next_token_loss": {
        "shifts the batch axis": (loss_batch_axis, "mean cross-entropy of logits[:, :-1]"),
        "token 0 ignored as padding": (loss_ignore0, "differs from the course's"),
    },
    "MTPModule": {
        "Block(cfg, 0) whatever layer_id": (mtp_cls("Block(cfg, 0)"), "must be Block(cfg, layer_id)"),
        "start_pos not passed to the block": (mtp_cls("start_pos ignored by block"), "pass start_pos to self.block"),
    },
    # the caller's model left in eval mode / 调用者的模型被留在 eval 模式
    "mtp_forward": {"switches the model and modules to eval mode": (mtp_forward_eval, "left model in another mode")},
    "mtp_loss": {
        "one mean over every depth's positions": (mtp_loss_pooled, "lam / D * sum over k"),
        "D taken as the batch size": (mtp_loss_D_is_batch, "lam / D * sum over k"),
    },
}

RIGHT = {
    "RMSNorm": {"torch.linalg.vector_norm": NormVectorNorm},
    "Block": {"torch.add, keywords": block_cls()},
    "MiniDeepSeek": {"enumerate over the layers": model_cls()},
    "next_token_loss": {"mean per sequence, then over the batch": loss_per_sequence},
    "MTPModule": {"start_pos as a keyword": mtp_cls()},
    "mtp_forward": {"narrow and F.embedding": mtp_forward_narrow},
    "mtp_loss": {"torch.stack(...).mean()": mtp_loss_comprehension},
}
