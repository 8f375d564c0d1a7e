"""A mini DeepSeek-V3: the parts of notebooks 08-10 assembled into a language model (12).

    tokens (B, T) -> embed -> n_layers x Block -> norm -> head -> logits (B, T, vocab_size)
    Block: x = x + attn(attn_norm(x), start_pos, absorb)   multi-head latent attention, decoupled RoPE
           x = x + ffn(ffn_norm(x))                   dense Expert in the first n_dense_layers, MoE after

Pre-norm residual blocks (each sublayer reads a normalised copy of the residual stream and adds
its output back), RMSNorm everywhere, SwiGLU experts, a shared expert next to the routed ones and
the gate bias of auxiliary-loss-free balancing, as in DeepSeek-V3's `inference/model.py`, whose
parameter names this model keeps (`embed`, `layers.{i}.attn.wkv_a`, `layers.{i}.ffn.gate.bias`,
`norm`, `head`). Generation uses MLA's cache: a call with start_pos writes what it caches for its
tokens at positions start_pos.. and attends to every earlier position. `absorb` picks MLA's path
in every layer (09): False caches full per-head keys and values, True only the latent and the
rope key (kv_lora_rank + qk_rope_head_dim numbers per token per layer); cached decoding runs
absorb=True from the prefill on, since each path reads only the cache it wrote itself.

`load_checkpoint(path=None) -> (model, cfg)` loads the model trained by `python -m utils.train_mini`
(`checkpoints/mini_deepseek.pt`, in eval mode; `DEEP_CHECKPOINT` is its 8-layer sibling); its
multi-token-prediction module is loaded by `utils.mtp.load_mtp_modules`. Tests: `.venv/bin/pytest utils/tests/test_mini_deepseek.py`.
"""
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from utils.benchmark import device_of
from utils.mla import MLAConfig, MultiHeadLatentAttention
from utils.moe import MoE, Expert
from utils.rmsnorm import RMSNorm

CHECKPOINT = Path(__file__).resolve().parent.parent / "checkpoints" / "mini_deepseek.pt"
# the same model 8 layers deep, trained by the same command with --n-layers 8: next to it the MTP
# draft (one block) is cheap, which is where self-speculative decoding pays (12, utils.mtp)
DEEP_CHECKPOINT = CHECKPOINT.with_name("mini_deepseek_8layers.pt")


@dataclass
class MiniDeepSeekConfig:
    """Sizes, named as in DeepSeek-V3's ModelArgs; the defaults are the checkpoint's model."""
    vocab_size: int = 64
    dim: int = 64
    n_layers: int = 2
    n_dense_layers: int = 1
    inter_dim: int = 128
    # multi-head latent attention (notebook 09)
    n_heads: int = 4
    q_lora_rank: int = 0
    kv_lora_rank: int = 32
    qk_nope_head_dim: int = 16
    qk_rope_head_dim: int = 16
    v_head_dim: int = 16
    # mixture of experts (notebook 10)
    moe_inter_dim: int = 32
    n_routed_experts: int = 8
    n_activated_experts: int = 2
    n_shared_experts: int = 1
    n_expert_groups: int = 2
    n_limited_groups: int = 1
    score_func: str = "sigmoid"
    route_scale: float = 1.0
    # positions
    max_seq_len: int = 128
    rope_theta: float = 10000.0

    def mla(self) -> MLAConfig:
        return MLAConfig(**{f.name: getattr(self, f.name) for f in fields(MLAConfig)})


class Block(nn.Module):
    """One pre-norm layer: attention sublayer, then feed-forward sublayer, each with a residual."""

    def __init__(self, cfg: MiniDeepSeekConfig, layer_id: int):
        super().__init__()
        self.attn_norm = RMSNorm(cfg.dim)
        self.attn = MultiHeadLatentAttention(cfg.mla())
        self.ffn_norm = RMSNorm(cfg.dim)
        if layer_id < cfg.n_dense_layers:
            self.ffn = Expert(cfg.dim, cfg.inter_dim)
        else:
            self.ffn = MoE(cfg.dim, cfg.moe_inter_dim, cfg.n_routed_experts, cfg.n_activated_experts,
                           cfg.n_shared_experts, cfg.n_expert_groups, cfg.n_limited_groups,
                           cfg.score_func, cfg.route_scale)

    def forward(self, x: torch.Tensor, start_pos: int = 0, absorb: bool = False) -> torch.Tensor:  # (B, T, dim) -> (B, T, dim)
        x = x + self.attn(self.attn_norm(x), start_pos, absorb)
        return x + self.ffn(self.ffn_norm(x))


class MiniDeepSeek(nn.Module):
    def __init__(self, cfg: MiniDeepSeekConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor, start_pos: int = 0, absorb: bool = False) -> torch.Tensor:  # (B, T) -> (B, T, V)
        return self.head(self.norm(hidden_states(self, tokens, start_pos, absorb)))


def hidden_states(model: nn.Module, tokens: torch.Tensor, start_pos: int = 0, absorb: bool = False) -> torch.Tensor:
    """The residual stream after the last block, before the final norm: (B, T) -> (B, T, dim).

    Written against the contract's names (embed, layers), so it runs any MiniDeepSeek,
    the learner's too. Multi-token prediction starts from it.
    """
    x = model.embed(tokens)
    for layer in model.layers:
        x = layer(x, start_pos, absorb=absorb)
    return x


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of predicting tokens[:, 1:] from logits[:, :-1]: position i predicts i + 1."""
    V = logits.shape[-1]
    return F.cross_entropy(logits[:, :-1].reshape(-1, V), tokens[:, 1:].reshape(-1))


@torch.no_grad()
def generate(model: nn.Module, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool = True) -> torch.Tensor:
    """Greedy decoding, (B, T) -> (B, T + max_new_tokens). With the cache, the prompt is read once
    (prefill) and every later call feeds one token at start_pos, all on MLA's absorbed path, so
    the cache holds the latent and the rope key; without it, each step re-reads everything from
    position 0. Both give the same tokens."""
    tokens = prompt
    logits = model(prompt, 0, absorb=use_cache)
    for step in range(max_new_tokens):
        nxt = logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, nxt], dim=1)
        if step + 1 < max_new_tokens:
            logits = model(nxt, tokens.shape[1] - 1, absorb=True) if use_cache else model(tokens, 0)
    return tokens


def cached_numbers_per_token(model: nn.Module) -> dict:
    """What the MLA caches of `model` hold per token position, read from the buffers themselves.

    {buffer name: numbers per token summed over layers}, for the buffers a prefill has sized
    (batch > 0); the other path's buffers stay empty in a model that ran one path only.
    """
    held = {}
    for m in model.modules():
        if isinstance(m, MultiHeadLatentAttention):
            for name, buf in m.named_buffers():
                if buf.shape[0] > 0:  # (B, max_seq_len, ...): what one position holds is buf[0, 0]
                    held[name] = held.get(name, 0) + buf[0, 0].numel()
    return held


@torch.no_grad()
def mla_attention_weights(attn: MultiHeadLatentAttention, x: torch.Tensor) -> torch.Tensor:
    """The causal attention weights of one MLA layer on x (B, T, dim), from position 0: (B, H, T, T).

    The naive path's scores (per-head keys [k_nope | k_pe]) from the layer's own queries and keys,
    recomputed here because the layer returns only its output; no cache is written.
    """
    T = x.shape[1]
    positions = torch.arange(T, device=x.device)
    q_nope, q_pe, _ = attn._queries(x, positions)  # (B, T, H, .)
    k, _ = attn._expand(*attn._latent_and_rope_key(x, positions))  # (B, T, H, nope + rope)
    scores = torch.einsum("bshd,bthd->bhst", torch.cat([q_nope, q_pe], dim=-1), k) * attn.softmax_scale
    scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
    return scores.softmax(dim=-1)


@torch.no_grad()
def attention_maps(model: nn.Module, tokens: torch.Tensor) -> list:
    """Attention weights of every layer, [(B, H, T, T)] * n_layers, for tokens from position 0."""
    maps, x = [], model.embed(tokens)
    for layer in model.layers:
        maps.append(mla_attention_weights(layer.attn, layer.attn_norm(x)))
        x = layer(x)
    return maps


def moe_layers(model: nn.Module) -> list[MoE]:
    return [m for m in model.modules() if isinstance(m, MoE)]


def parameter_counts(model: nn.Module) -> dict:
    """Total parameters and those one token uses (k routed experts of each MoE layer, not all)."""
    total = sum(p.numel() for p in model.parameters())
    idle = 0
    for moe in moe_layers(model):
        per_expert = sum(p.numel() for p in moe.experts[0].parameters())
        idle += (moe.n_routed_experts - moe.gate.topk) * per_expert
    return {"total": total, "active": total - idle}


def bytes_read_per_token(model: nn.Module, context: int) -> int:
    """Bytes one cached decode step at batch 1 reads: the weights one token uses (the active
    parameters, of the embedding table one row) and the absorbed path's latent cache (kv_lora_rank
    + qk_rope_head_dim numbers per layer) at `context` earlier positions, in the weights' dtype."""
    cfg = model.cfg
    size = next(model.parameters()).element_size()
    weights = parameter_counts(model)["active"] - model.embed.weight.numel() + cfg.dim
    cache = context * cfg.n_layers * (cfg.kv_lora_rank + cfg.qk_rope_head_dim)
    return (weights + cache) * size


def load_checkpoint(path=None, device=None) -> tuple[MiniDeepSeek, MiniDeepSeekConfig]:
    """The trained mini DeepSeek and its config, in eval mode, on `device` (default: the default device),
    from `python -m utils.train_mini`."""
    ckpt = torch.load(path or CHECKPOINT, map_location="cpu", weights_only=True)
    cfg = MiniDeepSeekConfig(**ckpt["config"])
    with torch.device("cpu"):
        model = MiniDeepSeek(cfg)
    model.load_state_dict(ckpt["model"])
    return model.to(device_of(device)).eval(), cfg
